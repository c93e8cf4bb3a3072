"""Files a user or repository names are regular files, read within bounds (issue 21 #3,
#9): a FIFO, a device or a directory is refused at once (exit 2 naming it), never read
forever or waited on; the verified cache is only a cache (a FIFO, a corrupt or deeply
nested one is discarded) and is written through the destination's held descriptor; a
deeply nested report payload is a verification failure (exit 1), not a crash."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest
from support.build import make_patched_root
from support.cli import Result, run_forge
from support.git import Upstream
from support.roots import copy_product
from support.server import FaultyServer, write_split_gguf

from dgr_forge.attest import keys
from dgr_forge.core import fsutil
from dgr_forge.core.errors import BadInput
from dgr_forge.models import manifest as models
from dgr_forge.models.hashing import CACHE_FILE, VerifiedCache
from dgr_forge.models.manifest import ModelFile

# a child process where the old code would hang or eat memory: the timeout fails the test
HANG = {"subprocess": True, "timeout": 60}


def refused(res: Result, name: str) -> None:
    assert res.code == 2, res
    assert name in res.stderr, res
    assert "Traceback" not in res.stderr and "MemoryError" not in res.stderr, res


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "planted.fifo"
    os.mkfifo(path)
    return path


def test_read_regular_refuses_fifo_device_directory_and_size(tmp_path: Path, fifo: Path) -> None:
    for path in (fifo, Path("/dev/zero"), tmp_path):
        with pytest.raises(BadInput) as info:
            fsutil.read_regular(path, what="report", hint="h", limit=10)
        assert str(path) in str(info.value)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 11)
    with pytest.raises(BadInput, match="over the 10-byte limit"):
        fsutil.read_regular(big, what="report", hint="h", limit=10)
    link = tmp_path / "link"
    link.symlink_to(big)
    with pytest.raises(BadInput, match="symlink"):
        fsutil.read_regular(link, what="report", hint="h", limit=100, follow=False)
    assert fsutil.read_regular(link, what="report", hint="h", limit=100) == b"x" * 11


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_report_show_and_verify_refuse_a_non_file(
    tmp_path: Path, fifo: Path, forge_root: Path, target: str
) -> None:
    path = str(fifo) if target == "fifo" else target
    for args in (["report", "show", path], ["report", "verify", path, "--key", "x.pub"]):
        refused(run_forge(*args, cwd=forge_root, **HANG), path)  # type: ignore[arg-type]


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_ci_render_check_refuses_a_non_file(
    tmp_path: Path, fifo: Path, forge_root: Path, target: str
) -> None:
    copy_product(forge_root)  # the real recipes: a workflow to compare
    (forge_root / "ci").mkdir()  # an install source: the workflow renders, then compares
    (forge_root / "ci" / "requirements.txt").write_text(
        "dgr-forge @ git+https://example.invalid/dgr-forge.git@" + "c" * 40 + "\n"
    )
    (forge_root / "ci" / "constraints.txt").write_text("cmake==4.4.5\nninja==1.13.2\n")
    path = str(fifo) if target == "fifo" else target
    res = run_forge("ci", "render", "--check", path, cwd=forge_root, **HANG)  # type: ignore[arg-type]
    refused(res, path)


def test_certify_refuses_endless_evidence(tmp_path: Path, fifo: Path, forge_root: Path) -> None:
    keys.generate(tmp_path / "k.pem")
    for evidence in ("/dev/zero", str(fifo)):
        res = run_forge(
            "certify", "--report", str(tmp_path / "r.jsonl"), "--evidence", evidence,
            "--key", str(tmp_path / "k.pem"), "--report-key", str(tmp_path / "k.pem.pub"),
            cwd=forge_root, **HANG,  # type: ignore[arg-type]
        )  # fmt: skip
        refused(res, evidence)


def test_a_deeply_nested_report_payload_is_a_failed_verification(
    tmp_path: Path, forge_root: Path
) -> None:
    keys.generate(tmp_path / "k.pem")
    payload = b"[" * 200_000 + b"]" * 200_000
    envelope = {
        "payloadType": "application/vnd.in-toto+json",
        "payload": base64.b64encode(payload).decode(),
        "signatures": [],
    }
    report = tmp_path / "deep.intoto.jsonl"
    report.write_text(json.dumps(envelope) + "\n")
    res = run_forge(
        "--json", "report", "verify", str(report), "--key", str(tmp_path / "k.pem.pub"),
        cwd=forge_root,
    )  # fmt: skip
    assert res.code == 1, res
    assert any("nested too deeply" in f for f in res.json["failures"]), res
    # the envelope itself nested too deeply: exit 2 naming the file, no traceback
    deep = tmp_path / "deep-envelope.jsonl"
    deep.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    refused(run_forge("report", "show", str(deep), cwd=forge_root), str(deep))


# ----------------------------------------------------------------------------- verified cache


@pytest.fixture
def model(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "src"
    write_split_gguf(src, "tiny", 1, tensor_elems=64)
    (f,) = src.iterdir()
    m = tmp_path / "m.toml"
    digest = fsutil.sha256_file(f)
    m.write_text(models.dumps("tiny", [ModelFile(f.name, f.stat().st_size, digest, f.as_uri())]))
    return m, src


@pytest.mark.parametrize("cache", ["fifo", "nested", "corrupt", "directory"])
def test_a_hostile_verified_cache_is_discarded_never_waited_on(
    tmp_path: Path, model: tuple[Path, Path], cache: str
) -> None:
    m, src = model
    dest = tmp_path / "dest"
    dest.mkdir()
    path = dest / CACHE_FILE
    if cache == "fifo":
        os.mkfifo(path)
    elif cache == "nested":
        path.write_text('{"files": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif cache == "corrupt":
        path.write_bytes(b"\xff{not json")
    else:
        path.mkdir()
    env = {"DGR_ARTIFACTS_FILE_ROOTS": str(src)}
    for args in (
        ["provision", str(m), "--dest", str(dest)],
        ["verify", str(m), "--dest", str(dest)],
    ):
        guard = HANG if cache == "fifo" else {}  # only a FIFO could hang the old code
        res = run_forge("artifacts", *args, env=env, **guard)  # type: ignore[arg-type]
        assert res.code == 0, res
        assert "Traceback" not in res.stderr


def test_the_cache_is_written_through_the_held_directory(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    try:
        cache = VerifiedCache(dest, fd)
        cache.record("a.gguf", os.stat(tmp_path), "0" * 64)
        # the destination swapped for a symlink into the attacker's directory meanwhile
        os.rename(dest, tmp_path / "moved")
        attacker = tmp_path / "attacker"
        attacker.mkdir()
        dest.symlink_to(attacker)
        cache.save()
    finally:
        os.close(fd)
    assert not (attacker / CACHE_FILE).exists()
    assert "a.gguf" in (tmp_path / "moved" / CACHE_FILE).read_text()


def test_provision_and_verify_with_a_fifo_cache_over_http(
    tmp_path: Path, model: tuple[Path, Path]
) -> None:
    _, src = model
    (f,) = src.iterdir()
    with FaultyServer(src) as server:
        m = tmp_path / "http.toml"
        m.write_text(
            models.dumps(
                "tiny",
                [ModelFile(f.name, f.stat().st_size, fsutil.sha256_file(f), server.url(f.name))],
            )
        )
        dest = tmp_path / "dest"
        dest.mkdir()
        os.mkfifo(dest / CACHE_FILE)
        res = run_forge("artifacts", "provision", str(m), "--dest", str(dest), **HANG)  # type: ignore[arg-type]
        assert res.code == 0, res
    shutil.rmtree(dest)


def test_a_fifo_among_the_cmake_modules_never_blocks_a_build(
    tmp_path: Path, upstream: Upstream
) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    os.mkfifo(root / "cmake" / "planted.cmake")
    res = run_forge("--root", str(root), "build", "--lane", "cpu", "--no-sign", **HANG)  # type: ignore[arg-type]
    refused(res, "cmake/planted.cmake")


def test_a_signing_key_path_that_is_a_fifo_never_blocks(
    fifo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dgr_forge.core.output import Reporter
    from dgr_forge.lanes.signing import SigningKey

    monkeypatch.setenv("DGR_SIGNING_KEY", str(fifo))
    key = SigningKey(None, True, Reporter())
    assert key.fingerprint() is None  # the no-op fast path reads nothing
    with pytest.raises(BadInput, match="DGR_SIGNING_KEY"):
        key.signer()  # refused at once, not read
