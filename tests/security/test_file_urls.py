"""`file://` model URLs (issue 21 #8): a manifest may name only files under directories
the operator allowed (--mirror, DGR_ARTIFACTS_FILE_ROOTS); nothing (not even a size) is
told about a file outside them or one the user may not read; parts are created 0600."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from support.cli import forge_cmd, forge_env, run_forge
from support.server import FaultyServer

from dgr_forge.models import manifest as models
from dgr_forge.models.manifest import ModelFile


def manifest(tmp_path: Path, url: str, size: int, sha: str = "0" * 64) -> Path:
    m = tmp_path / "m.toml"
    m.write_text(models.dumps("x", [ModelFile("x.gguf", size, sha, url)]))
    return m


def test_a_file_url_outside_the_allowed_directories_is_refused_unread(tmp_path: Path) -> None:
    secret = tmp_path / "private" / "secret.key"
    secret.parent.mkdir()
    secret.write_bytes(b"s" * 1234)
    m = manifest(tmp_path, secret.as_uri(), size=1)  # a wrong size would reveal the real one
    for flags in ([], ["--json"]):
        res = run_forge(*flags, "artifacts", "provision", str(m), "--dest", str(tmp_path / "d"))
        assert res.code == 2, res
        assert "DGR_ARTIFACTS_FILE_ROOTS" in res.stderr and "x.gguf" in res.stderr, res
        assert "1234" not in res.stdout + res.stderr, res
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())
    # allowed by the operator: read (and its size named, the user may read it anyway)
    res = run_forge(
        "artifacts", "provision", str(m), "--dest", str(tmp_path / "d"),
        env={"DGR_ARTIFACTS_FILE_ROOTS": str(secret.parent)},
    )  # fmt: skip
    assert res.code == 1 and "1234" in res.stderr, res


def test_a_symlink_inside_an_allowed_directory_cannot_lead_out(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (tmp_path / "secret").write_bytes(b"s" * 777)
    (allowed / "x.gguf").symlink_to(tmp_path / "secret")
    m = manifest(tmp_path, (allowed / "x.gguf").as_uri(), size=1)
    res = run_forge(
        "artifacts", "provision", str(m), "--dest", str(tmp_path / "d"),
        env={"DGR_ARTIFACTS_FILE_ROOTS": str(allowed)},
    )  # fmt: skip
    assert res.code == 2 and "777" not in res.stderr, res


def test_parts_are_private_until_verified(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    data = os.urandom(64 << 10)
    (src / "x.gguf").write_bytes(data)
    good = hashlib.sha256(data).hexdigest()
    env = {"DGR_ARTIFACTS_TRIES": "1", "DGR_ARTIFACTS_BACKOFF": "0.01"}
    with FaultyServer(src) as server:
        m = manifest(tmp_path, server.url("x.gguf"), len(data), sha=good)
        server.faults.cut["x.gguf"] = 1000  # the connection drops: the part is kept
        res = run_forge("artifacts", "provision", str(m), "--dest", str(tmp_path / "d"), env=env)
        assert res.code == 1, res
        part = tmp_path / "d" / "x.gguf.part"
        assert part.stat().st_size == 1000
        assert stat.S_IMODE(part.stat().st_mode) == 0o600
        res = run_forge("artifacts", "provision", str(m), "--dest", str(tmp_path / "d"), env=env)
        # downloaded and hashed true, but random bytes are not a GGUF header: not ready
        assert "x: FAILED: 1 of 1 files not ready" in res.stdout, res
        assert "unreadable GGUF header" in res.stderr, res
    final = tmp_path / "d" / "x.gguf"
    assert final.read_bytes() == data
    assert stat.S_IMODE(final.stat().st_mode) & 0o044 == 0o044  # readable as model files are


def test_nothing_is_told_about_a_file_the_user_cannot_read(tmp_path: Path) -> None:
    """Another user's 0600 file, read by a process without the right to (root without
    CAP_DAC_OVERRIDE, through setpriv): neither its size nor a hash is printed."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to drop the right to read every file")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    secret = allowed / "x.gguf"
    secret.write_bytes(b"r" * 4321)
    secret.chmod(0o600)
    os.chown(secret, 65534, 65534)
    m = manifest(tmp_path, secret.as_uri(), size=1)
    done = subprocess.run(
        [
            setpriv, "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search",
            *forge_cmd("artifacts", "provision", str(m), "--dest", str(tmp_path / "d")),
        ],
        env=forge_env({"DGR_ARTIFACTS_FILE_ROOTS": str(allowed)}),
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 1, done
    assert "cannot read" in done.stderr, done
    assert "4321" not in done.stdout + done.stderr, done


# ----------------------------------------------------------------------------- issue 33 #5
# the source is opened once, no link followed along its path, and that descriptor is
# what is checked against the allowed directories and read: a swap after the up-front
# check (simulated by skipping it) leaks nothing


@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_source_swapped_for_a_link_after_the_check_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    secret = tmp_path / "root-only" / "secret"
    secret.parent.mkdir()
    secret.write_bytes(b"s" * 777)
    digest = hashlib.sha256(secret.read_bytes()).hexdigest()
    if where == "file":
        source = allowed / "x.gguf"
        source.symlink_to(secret)
    else:  # the variant: a directory on the way swapped for a link out of the allowed dir
        (allowed / "sub").symlink_to(secret.parent)
        source = allowed / "sub" / "secret"
    m = manifest(tmp_path, source.as_uri(), size=777)
    # the up-front check passed before the swap: the open itself must hold
    monkeypatch.setattr("dgr_forge.models.provision.check_file_sources", lambda *a: None)
    monkeypatch.setenv("DGR_ARTIFACTS_FILE_ROOTS", str(allowed))
    res = run_forge("--json", "artifacts", "provision", str(m), "--dest", str(tmp_path / "d"),
                    subprocess=False)  # fmt: skip
    assert res.code in (1, 2), res
    assert digest not in res.stdout + res.stderr, res
    assert "symbolic link" in res.stdout + res.stderr, res
    assert not (tmp_path / "d" / "x.gguf").exists()


def test_a_source_outside_the_allowed_dirs_is_refused_on_the_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.gguf").write_bytes(b"s" * 10)
    (tmp_path / "allowed").mkdir()
    m = manifest(tmp_path, (other / "x.gguf").as_uri(), size=10)
    monkeypatch.setattr("dgr_forge.models.provision.check_file_sources", lambda *a: None)
    monkeypatch.setenv("DGR_ARTIFACTS_FILE_ROOTS", str(tmp_path / "allowed"))
    res = run_forge("artifacts", "provision", str(m), "--dest", str(tmp_path / "d"),
                    subprocess=False)  # fmt: skip
    assert res.code in (1, 2) and "outside the directories allowed" in res.stderr, res


def test_map_reads_a_file_source_header_only_through_a_checked_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variant: `artifacts map` (GGUF headers of file:// sources) followed links and
    opened by path after the check; a source swapped for a link is now never read."""
    from support.server import write_layered_gguf
    from test_layers import plain_manifest

    elsewhere = tmp_path / "root-only"
    write_layered_gguf(elsewhere, elems=64)
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    for p in sorted(elsewhere.iterdir()):
        (allowed / p.name).symlink_to(p)
    m = plain_manifest(tmp_path, elsewhere, allowed.as_uri())
    monkeypatch.setattr("dgr_forge.models.make_manifest.check_file_sources", lambda *a: None)
    monkeypatch.setenv("DGR_ARTIFACTS_FILE_ROOTS", str(allowed))
    res = run_forge("--json", "artifacts", "map", str(m), subprocess=False)
    assert res.code != 0, res
    assert "block_count" not in (res.json or {}), res
    assert "symbolic links" in res.stdout + res.stderr, res
