"""Attacks on the layer-range paths (issue 34): a planted record of provisioned ranges
(a symlink, a FIFO, a lying one) and credentials in the URLs `artifacts map` reads
headers from. Every attack runs the real CLI against a loopback HTTP server."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import Result, run_forge
from support.server import FaultyServer, split_names, write_layered_gguf

from dgr_forge.models import manifest as models
from dgr_forge.models.manifest import ModelFile

FAST = {"DGR_ARTIFACTS_BACKOFF": "0.01", "DGR_ARTIFACTS_TIMEOUT": "10", "DGR_ARTIFACTS_TRIES": "2"}
NAMES = split_names("m8", 3)
SECRET = "S3cr3tPassw0rd"
RECORD = ".dgr-layers.json"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    write_layered_gguf(tmp_path / "source", "m8", layers=8, splits=3)
    return tmp_path / "source"


@pytest.fixture
def server(source: Path) -> Iterator[FaultyServer]:
    with FaultyServer(source) as s:
        yield s


def manifest(tmp_path: Path, source: Path, base_url: str, *, mapped: bool = True) -> Path:
    out = tmp_path / "m8.toml"
    if mapped:
        res = run_forge("artifacts", "manifest", str(source), "--name", "m8", "--url-base",
                        base_url, "--out", str(out), "--json")  # fmt: skip
        assert res.code == 0, res
        return out
    files = []
    for p in sorted(source.iterdir()):
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        files.append(ModelFile(p.name, p.stat().st_size, digest, models.file_url(base_url, p.name)))
    out.write_text(models.dumps("m8", files))
    return out


def forge(*args: str) -> Result:
    return run_forge(*args, "--json", env=FAST, timeout=60)


def test_a_symlinked_record_is_replaced_never_followed(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    dest.mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text('{"model": "m8", "layers": "0-7", "first": true, "last": true}\n')
    (dest / RECORD).symlink_to(victim)
    res = forge("artifacts", "provision", str(m), "--dest", str(dest), "--layers", "3-4")
    assert res.code == 0, res
    assert res.json["provisioned"]["layers"] == "3-4"  # the link's claim was not read
    assert victim.read_text().startswith('{"model": "m8", "layers": "0-7"')  # not written
    assert not (dest / RECORD).is_symlink()
    assert json.loads((dest / RECORD).read_text())["layers"] == "3-4"


def test_a_fifo_record_does_not_hang_verify(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    assert forge("artifacts", "provision", str(m), "--dest", str(dest), "--layers", "3").code == 0
    (dest / RECORD).unlink()
    os.mkfifo(dest / RECORD)
    res = forge("artifacts", "verify", str(m), "--dest", str(dest))
    assert res.json["provisioned"] is None  # ignored: without a record, the whole model
    assert res.code == 1 and res.json["bad"], res


def test_a_lying_record_cannot_make_verify_pass(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    assert forge("artifacts", "provision", str(m), "--dest", str(dest), "--layers", "3").code == 0
    (dest / RECORD).write_text('{"model": "m8", "layers": "", "first": false, "last": false}')
    for name in NAMES:
        (dest / name).unlink(missing_ok=True)
    res = forge("artifacts", "verify", str(m), "--dest", str(dest))
    assert res.code == 1, res  # the metadata split is always required
    assert NAMES[0] in res.json["bad"]
    assert res.json["serves"]["layers"] == ""


def test_credentials_in_the_mirror_never_show_in_map_errors(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest(tmp_path, source, "https://models.example.org/m8", mapped=False)
    server.faults.ignore_range = set(NAMES)
    host = server.base_url.removeprefix("http://")
    res = forge("artifacts", "map", str(m), "--mirror", f"http://user:{SECRET}@{host}")
    assert res.code == 1, res
    assert SECRET not in res.stdout + res.stderr
    assert "HTTP 200 to a Range request" in res.json["error"]
