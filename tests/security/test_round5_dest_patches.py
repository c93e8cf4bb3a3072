"""Hostile inputs, fifth round (issue 45): the /home rule on every `--dest` (cause 3) and
one patch-size limit for every reader of a patch file (cause 9)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.cli import run_forge
from support.server import manifest_of, write_split_gguf

from dgr_forge.core.errors import BadInput
from dgr_forge.core.output import Reporter
from dgr_forge.models import dest as dest_mod
from dgr_forge.models import manifest as models
from dgr_forge.models.verify import verify
from dgr_forge.upstream import series, series_journal

CACHE = ".dgr-verified.json"

# ----------------------------------------------------------------------------- cause 3: /home


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A real two-part split model's manifest; its files in tmp_path/source."""
    source = tmp_path / "source"
    write_split_gguf(source, "tiny", 2, tensor_elems=256)
    return manifest_of(source, "https://models.example.org/tiny", tmp_path / "tiny.toml", "tiny")


@pytest.fixture
def in_home(tmp_path: Path) -> Iterator[Path]:
    """A directory under the real /home holding the model's exact files, removed after."""
    if not os.access("/home", os.W_OK):
        pytest.skip("needs a writable /home")
    home = Path("/home") / f"dgr-forge-test-{uuid.uuid4().hex}"
    shutil.copytree(tmp_path / "source", home)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _refused(res: Any, shown: str) -> None:
    assert res.code == 2, res
    assert "under /home" in res.stderr and shown in res.stderr, res


def test_verify_dest_under_home_is_refused_and_writes_no_cache(
    tmp_path: Path, model: Path, in_home: Path
) -> None:
    """The attack: `artifacts verify --dest` under /home wrote .dgr-verified.json there."""
    res = run_forge("artifacts", "verify", str(model), "--dest", str(in_home), "--json")
    _refused(res, str(in_home))
    assert not (in_home / CACHE).exists()
    # a link to it, and `..` forms that end there: the resolved directory is what counts
    link = tmp_path / "models"
    link.symlink_to(in_home, target_is_directory=True)
    up = Path(*[".."] * len(tmp_path.parts))
    for form in (link, tmp_path / "x" / up / in_home.relative_to("/"), Path(f"{link}/")):
        (tmp_path / "x").mkdir(exist_ok=True)
        res = run_forge("artifacts", "verify", str(model), "--dest", str(form), "--json")
        _refused(res, str(in_home))
    # `artifacts map --dest` reads through the same gate
    res = run_forge("artifacts", "map", str(model), "--dest", str(link), "--json")
    _refused(res, str(in_home))
    assert not (in_home / CACHE).exists()


def test_verify_dest_on_a_bind_mount_of_home_is_refused(
    tmp_path: Path, model: Path, in_home: Path
) -> None:
    mnt = tmp_path / "data"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "--bind", "/home", str(mnt)]).returncode:
        pytest.skip("mount --bind is not permitted here")
    try:
        res = run_forge(
            "artifacts", "verify", str(model), "--dest", str(mnt / in_home.name), "--json"
        )
        assert res.code == 2 and "a mount" in res.stderr, res
        assert not (in_home / CACHE).exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_the_home_rule_verify_uses_is_the_one_provision_uses(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variant, wherever /home is not writable: the rule's home root moved to a
    directory of the test's, reached through a link; verify refuses it and writes nothing."""
    home = tmp_path / "fakehome"
    shutil.copytree(tmp_path / "source", home / "models")
    monkeypatch.setattr(dest_mod, "FORBIDDEN_ROOTS", (str(home),))
    link = tmp_path / "srv"
    link.symlink_to(home, target_is_directory=True)
    m = models.load(model, tmp_path)
    with pytest.raises(BadInput, match="under " + str(home)):
        verify(m, link / "models", Reporter())
    assert not (home / "models" / CACHE).exists()
    assert verify(m, tmp_path / "source", Reporter()).bad == []  # elsewhere: verified


# ----------------------------------------------------------------------------- cause 9: patches


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as f:
        f.truncate(size)  # no disk used, `size` bytes to read
    return path


def test_one_patch_limit_for_patch_check_and_export(tmp_path: Path) -> None:
    """The attack: a 46 MB patch applied (`patch`'s 64 MiB) but `check` (and a re-export,
    which compares with the file on disk) read it under a 32 MiB cap: exit 2 in the gate."""
    pdir = tmp_path / "patches"
    pdir.mkdir()
    big = _sparse(pdir / "0001-big.patch", 46_000_000)
    fake: Any = SimpleNamespace(
        patch_path=lambda e: pdir / e.file, patches_dir_rel="patches", patches_dir=pdir
    )
    entry: Any = SimpleNamespace(file=big.name)
    assert len(series.read_patch(fake, entry)) == 46_000_000  # what `patch` applies
    data = series_journal.patch_bytes(pdir, big.name)  # what `check` and `export` compare
    assert data is not None and len(data) == 46_000_000


def test_a_patch_over_the_limit_is_refused_by_every_reader_alike(tmp_path: Path) -> None:
    """The variant: one byte over the one limit is exit 2 in every reader, naming the same
    limit; one byte under passes them all."""
    pdir = tmp_path / "patches"
    pdir.mkdir()
    limit = 64 << 20  # the documented limit (SECURITY.md)
    fake: Any = SimpleNamespace(
        patch_path=lambda e: pdir / e.file, patches_dir_rel="patches", patches_dir=pdir
    )
    _sparse(pdir / "0001-at.patch", limit)
    _sparse(pdir / "0002-over.patch", limit + 1)
    assert len(series.read_patch(fake, SimpleNamespace(file="0001-at.patch"))) == limit
    assert len(series_journal.patch_bytes(pdir, "0001-at.patch") or b"") == limit
    for read in (
        lambda: series.read_patch(fake, SimpleNamespace(file="0002-over.patch")),
        lambda: series_journal.patch_bytes(pdir, "0002-over.patch"),
    ):
        with pytest.raises(BadInput, match=f"over the {limit}-byte limit"):
            read()
