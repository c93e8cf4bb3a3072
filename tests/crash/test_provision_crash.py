"""Crash safety of `artifacts provision` (issue 14): SIGKILL at every named transition and a
full disk at the write; the next plain run completes from what is on disk, against a real
loopback HTTP server, resuming partial downloads with HTTP Range.

Fault points: `provision.part` (before each write into NAME.part), `provision.verified`
(NAME.part complete and its sha256 matched, not yet renamed), `provision.renamed` (the
final file in place, not yet in the verified cache), `provision.record` (every file of a
`--layers` run in place, the destination's record of provisioned ranges not yet written).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import Result, run_forge
from support.server import FaultyServer, split_names, write_layered_gguf, write_split_gguf

from dgr_forge.models import manifest as models
from dgr_forge.models.manifest import ModelFile

FAST = {"DGR_ARTIFACTS_BACKOFF": "0.01", "DGR_ARTIFACTS_TIMEOUT": "10"}
NAMES = split_names("big", 2)
KILLED = (-9, 137)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ~4 MiB parts: several network reads each, so a kill can land mid-file."""
    path = tmp_path_factory.mktemp("crash-source")
    write_split_gguf(path, "big", 2, tensor_elems=1 << 20)
    return path


@pytest.fixture
def server(source: Path) -> Iterator[FaultyServer]:
    with FaultyServer(source) as s:
        yield s


def manifest_for(tmp_path: Path, source: Path, base_url: str) -> Path:
    files = [
        ModelFile(
            p.name,
            p.stat().st_size,
            hashlib.sha256(p.read_bytes()).hexdigest(),
            models.file_url(base_url, p.name),
        )
        for p in sorted(source.iterdir())
    ]
    path = tmp_path / "big.toml"
    path.write_text(models.dumps("big", files))
    return path


def provision(manifest: Path, dest: Path, fault: str | None = None) -> Result:
    env = {**FAST, **({"DGR_FAULT": fault} if fault else {})}
    return run_forge(
        "artifacts", "provision", str(manifest), "--dest", str(dest), "--jobs", "1", "--json",
        env=env, timeout=120,
    )  # fmt: skip


def assert_exact(source: Path, dest: Path) -> None:
    for name in NAMES:
        assert (dest / name).read_bytes() == (source / name).read_bytes(), name
        assert not (dest / f"{name}.part").exists()


def test_kill_mid_write_keeps_the_part_and_the_next_run_resumes_with_range(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    killed = provision(m, dest, f"provision.part:{NAMES[1]}@3")  # two writes landed
    assert killed.code in KILLED, killed
    part = dest / f"{NAMES[1]}.part"
    kept = part.stat().st_size
    size = (source / NAMES[1]).stat().st_size
    assert 0 < kept < size
    assert part.read_bytes() == (source / NAMES[1]).read_bytes()[:kept]  # a prefix, exactly
    assert (dest / NAMES[0]).is_file()  # the file before it was finished and stays

    res = provision(m, dest)
    assert res.code == 0, res
    assert_exact(source, dest)
    assert [r.range for r in server.requests_for(NAMES[1])] == [None, f"bytes={kept}-"]
    got = next(f for f in res.json["files"] if f["name"] == NAMES[1])
    assert got["resumed_from"] == kept and got["downloaded_bytes"] == size - kept
    assert [f["status"] for f in res.json["files"]] == ["present", "downloaded"]


@pytest.mark.parametrize("point", ["provision.verified", "provision.renamed"])
def test_kill_after_the_download_loses_nothing(
    tmp_path: Path, source: Path, server: FaultyServer, point: str
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    killed = provision(m, dest, f"{point}:{NAMES[0]}")
    assert killed.code in KILLED, killed
    on_disk = dest / (NAMES[0] if point == "provision.renamed" else f"{NAMES[0]}.part")
    assert on_disk.read_bytes() == (source / NAMES[0]).read_bytes()

    res = provision(m, dest)
    assert res.code == 0, res
    assert_exact(source, dest)
    assert len(server.requests_for(NAMES[0])) == 1  # never downloaded again
    first = next(f for f in res.json["files"] if f["name"] == NAMES[0])
    if point == "provision.renamed":
        assert first["status"] == "present"
    else:  # the complete part is re-hashed and renamed, no byte fetched
        assert first["status"] == "downloaded" and first["downloaded_bytes"] == 0
    verify = run_forge("artifacts", "verify", str(m), "--dest", str(dest), env=FAST)
    assert verify.code == 0, verify


def test_disk_full_at_the_write_is_a_clear_failure_and_keeps_the_part(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    full = provision(m, dest, f"provision.part:{NAMES[0]}:enospc@3")
    assert full.code == 1, full
    assert "Traceback" not in full.stderr
    assert f"{NAMES[0]}: No space left on device" in full.stderr
    assert "fix: free space on the file system of" in full.stderr and "resumes" in full.stderr
    assert full.json["failed"] == [NAMES[0]]
    part = dest / f"{NAMES[0]}.part"
    kept = part.stat().st_size
    assert 0 < kept < (source / NAMES[0]).stat().st_size
    assert f"{kept} bytes are kept in {part.name}" in full.stderr

    res = provision(m, dest)
    assert res.code == 0, res
    assert_exact(source, dest)
    assert [r.range for r in server.requests_for(NAMES[0])] == [None, f"bytes={kept}-"]


def test_kill_before_the_layer_record_the_next_run_records_without_downloading(
    tmp_path: Path,
) -> None:
    src = tmp_path / "src"
    write_layered_gguf(src, "m8", layers=8, splits=3)
    with FaultyServer(src) as server:
        m = tmp_path / "m8.toml"
        made = run_forge("artifacts", "manifest", str(src), "--name", "m8", "--url-base",
                         server.base_url, "--out", str(m))  # fmt: skip
        assert made.code == 0, made
        dest = tmp_path / "dest"
        args = ("artifacts", "provision", str(m), "--dest", str(dest), "--layers", "3-4", "--json")
        killed = run_forge(*args, env={**FAST, "DGR_FAULT": "provision.record:m8"}, timeout=120)
        assert killed.code in KILLED, killed
        assert not (dest / ".dgr-layers.json").exists()
        fetched = len(server.log)
        res = run_forge(*args, env=FAST, timeout=120)
        assert res.code == 0, res
        assert len(server.log) == fetched  # every file was there: nothing downloaded again
        assert res.json["provisioned"]["layers"] == "3-4"
