"""`artifacts provision|verify|manifest` against a real loopback HTTP server with faults."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import Result, forge_env, forge_popen, run_forge
from support.server import FaultyServer, flip_byte, split_names, write_split_gguf

from dgr_forge.core.errors import BadInput
from dgr_forge.core.output import Reporter
from dgr_forge.models import gguf_split
from dgr_forge.models import manifest as models
from dgr_forge.models import provision as provisioning
from dgr_forge.models.dest import DestDir, check_destination
from dgr_forge.models.hashing import VerifiedCache
from dgr_forge.models.manifest import ModelFile

FAST = {"DGR_ARTIFACTS_BACKOFF": "0.01", "DGR_ARTIFACTS_TIMEOUT": "10"}
NAMES = split_names("tiny", 3)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A real 3-part split GGUF set (~64 KiB per part)."""
    write_split_gguf(tmp_path / "source", "tiny", 3)
    return tmp_path / "source"


@pytest.fixture
def server(source: Path) -> Iterator[FaultyServer]:
    with FaultyServer(source) as s:
        yield s


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest_for(
    tmp_path: Path, source: Path, base_url: str, edit: dict[str, dict[str, object]] | None = None
) -> Path:
    """A manifest of `source` written independently of the code under test."""
    files = []
    for p in sorted(source.iterdir()):
        fields: dict[str, object] = {
            "name": p.name,
            "size": p.stat().st_size,
            "sha256": sha(p),
            "url": models.file_url(base_url, p.name),
        }
        fields.update((edit or {}).get(p.name, {}))
        files.append(ModelFile(**fields))  # type: ignore[arg-type]
    path = tmp_path / "tiny.toml"
    path.write_text(models.dumps("tiny", files))
    return path


def provision(manifest: Path, dest: Path, *extra: str, env: dict[str, str] | None = None) -> Result:
    return run_forge(
        "artifacts", "provision", str(manifest), "--dest", str(dest), "--json", *extra,
        env={**FAST, **(env or {})},
    )  # fmt: skip


def forge(*args: str) -> Result:
    return run_forge(*args, env=FAST)


def verify(manifest: Path, dest: Path) -> Result:
    return run_forge(
        "artifacts", "verify", str(manifest), "--dest", str(dest), "--json", env=FAST
    )  # fmt: skip


def outcome(res: Result, name: str) -> dict[str, object]:
    return next(f for f in res.json["files"] if f["name"] == name)


def assert_exact(source: Path, dest: Path) -> None:
    for name in NAMES:
        assert (dest / name).read_bytes() == (source / name).read_bytes(), name
        assert not (dest / f"{name}.part").exists()


# ----------------------------------------------------------------------------- happy path


def test_provision_verify_and_skip(tmp_path: Path, source: Path, server: FaultyServer) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "models" / "tiny"
    res = provision(m, dest)
    assert res.code == 0, res
    assert set(res.json) >= {"ok", "exit_code", "command", "model", "dest", "files", "failed"}
    assert res.json["command"] == "artifacts provision" and res.json["failed"] == []
    assert [f["status"] for f in res.json["files"]] == ["downloaded"] * 3
    assert_exact(source, dest)
    for name in NAMES:  # one plain GET per file, nothing re-fetched
        assert [(r.range, r.status) for r in server.requests_for(name)] == [(None, 200)]

    ok = verify(m, dest)
    assert ok.code == 0, ok
    assert ok.json["bad"] == [] and all(f["ok"] for f in ok.json["files"])

    stale = dest / f"{NAMES[0]}.part"  # left over from some older run
    stale.write_bytes(b"junk")
    again = provision(m, dest)
    assert again.code == 0, again
    assert not stale.exists()
    assert [f["status"] for f in again.json["files"]] == ["present"] * 3
    assert again.json["downloaded_bytes"] == 0
    assert len(server.log) == 3  # already-verified files are not downloaded again


def test_cut_download_resumes_with_range(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    server.faults.cut[NAMES[1]] = 50_000
    res = provision(m, dest)
    assert res.code == 0, res
    assert_exact(source, dest)
    log = [(r.range, r.status) for r in server.requests_for(NAMES[1])]
    assert log == [(None, 200), ("bytes=50000-", 206)]  # resumed, not restarted from 0
    got = outcome(res, NAMES[1])
    assert got["retries"] == 1 and got["restarts"] == 0
    assert got["downloaded_bytes"] == (source / NAMES[1]).stat().st_size  # no byte twice


def test_partial_file_from_an_earlier_run_is_resumed(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    dest.mkdir()
    data = (source / NAMES[0]).read_bytes()
    (dest / f"{NAMES[0]}.part").write_bytes(data[:30_000])
    res = provision(m, dest)
    assert res.code == 0, res
    assert_exact(source, dest)
    assert [r.range for r in server.requests_for(NAMES[0])] == ["bytes=30000-"]
    got = outcome(res, NAMES[0])
    assert got["resumed_from"] == 30_000 and got["downloaded_bytes"] == len(data) - 30_000
    assert "resuming at byte 30000" in res.stderr


def test_500_once_is_retried(tmp_path: Path, source: Path, server: FaultyServer) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    server.faults.fail[NAMES[2]] = 1
    res = provision(m, tmp_path / "dest")
    assert res.code == 0, res
    assert_exact(source, tmp_path / "dest")
    assert [r.status for r in server.requests_for(NAMES[2])] == [500, 200]
    assert outcome(res, NAMES[2])["retries"] == 1
    assert "HTTP 500" in res.stderr


def test_persistent_500_gives_up_and_keeps_the_rest(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    server.faults.fail[NAMES[0]] = 100
    dest = tmp_path / "dest"
    res = provision(m, dest, env={"DGR_ARTIFACTS_TRIES": "3"})
    assert res.code == 1, res
    assert res.json["failed"] == [NAMES[0]]
    assert f"{NAMES[0]}: gave up after 3 tries" in res.stderr
    assert len(server.requests_for(NAMES[0])) == 3  # bounded
    assert not (dest / NAMES[0]).exists()
    for name in NAMES[1:]:
        assert (dest / name).read_bytes() == (source / name).read_bytes()


def test_server_ignoring_range_restarts_the_file_and_says_so_once(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    server.faults.cut[NAMES[0]] = 40_000
    server.faults.ignore_range.add(NAMES[0])
    res = provision(m, tmp_path / "dest")
    assert res.code == 0, res
    assert_exact(source, tmp_path / "dest")
    log = [(r.range, r.status) for r in server.requests_for(NAMES[0])]
    assert log == [(None, 200), ("bytes=40000-", 200)]
    assert res.stderr.count("ignored the Range request") == 1
    assert "restarting this file from byte 0" in res.stderr
    assert outcome(res, NAMES[0])["restarts"] == 1


def test_stalled_transfer_times_out_and_resumes(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    server.faults.stall[NAMES[0]] = 20_000
    server.faults.stall_seconds = 1.5
    res = provision(m, tmp_path / "dest", env={"DGR_ARTIFACTS_TIMEOUT": "0.3"})
    assert res.code == 0, res
    assert_exact(source, tmp_path / "dest")
    assert [r.range for r in server.requests_for(NAMES[0])] == [None, "bytes=20000-"]
    assert f"{NAMES[0]}: timed out; retry" in res.stderr


def test_interrupted_run_keeps_the_part_and_the_next_run_resumes(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    part = dest / f"{NAMES[0]}.part"
    args = ["artifacts", "provision", str(m), "--dest", str(dest), "--jobs", "1"]
    # The bound comes from what this run measures, not a fixed number of seconds: the
    # time the child took to start and reach the stall (interpreter, imports, first bytes
    # under this machine's load right now) is what a clean exit after Ctrl-C may cost; the
    # stall and the read timeout are set far beyond it, so a child stuck behind the read
    # timeout cannot pass the bound however loaded the machine is.
    launched = time.monotonic()
    server.faults.stall[NAMES[0]] = 20_000
    server.faults.stall_seconds = 600  # far beyond any bound below: only Ctrl-C ends it
    env = forge_env({**FAST, "DGR_ARTIFACTS_TIMEOUT": "600"})
    proc = forge_popen(*args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not (part.is_file() and part.stat().st_size == 20_000):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    startup = time.monotonic() - launched
    bound = max(3.0, 10 * startup)
    assert bound < 600 / 3, f"the child took {startup:.1f} s to reach the stall"
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    elapsed = time.monotonic() - started
    assert proc.returncode == 130, err
    assert elapsed < bound, (elapsed, startup)  # not stuck behind the read timeout
    assert "interrupted" in err
    assert part.stat().st_size == 20_000 and not (dest / NAMES[0]).exists()

    res = provision(m, dest)
    assert res.code == 0, res
    assert_exact(source, dest)
    assert [r.range for r in server.requests_for(NAMES[0])] == [None, "bytes=20000-"]


def test_unreachable_server_gives_up(tmp_path: Path, source: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = manifest_for(tmp_path, source, f"http://127.0.0.1:{port}/m")
    res = provision(m, tmp_path / "dest", env={"DGR_ARTIFACTS_TRIES": "2"})
    assert res.code == 1, res
    assert sorted(res.json["failed"]) == NAMES
    assert f"{NAMES[0]}: gave up after 2 tries without progress: cannot connect" in res.stderr
    # every network failure says what to do about it
    errors = [i for i, line in enumerate(res.stderr.splitlines()) if line.startswith("error:")]
    lines = res.stderr.splitlines()
    assert len(errors) == len(NAMES)
    for i in errors:
        assert lines[i + 1].startswith("  fix: check that the host is reachable"), lines[i + 1]
        assert "--mirror URL" in lines[i + 1]
    assert not list((tmp_path / "dest").glob("*.gguf*"))  # no empty .part left behind


def test_part_beyond_the_servers_file_is_a_size_error(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    size = (source / NAMES[0]).stat().st_size
    m = manifest_for(tmp_path, source, server.base_url, {NAMES[0]: {"size": size + 100}})
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / f"{NAMES[0]}.part").write_bytes(b"x" * (size + 50))
    res = provision(m, dest)
    assert res.code == 1, res
    assert [(r.range, r.status) for r in server.requests_for(NAMES[0])] == [
        (f"bytes={size + 50}-", 416)
    ]
    assert f"{NAMES[0]}: the source has {size} bytes, the manifest says {size + 100}" in res.stderr


def test_server_answering_the_wrong_range_restarts_the_file(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    server.faults.cut[NAMES[2]] = 10_000
    server.faults.range_from_zero.add(NAMES[2])
    res = provision(m, tmp_path / "dest")
    assert res.code == 0, res
    assert_exact(source, tmp_path / "dest")
    log = [(r.range, r.status) for r in server.requests_for(NAMES[2])]
    assert log == [(None, 200), ("bytes=10000-", 206), (None, 200)]
    assert "answered a different range (0)" in res.stderr
    assert outcome(res, NAMES[2])["restarts"] == 1


def test_http_404_fails_without_retry(tmp_path: Path, source: Path, server: FaultyServer) -> None:
    m = manifest_for(
        tmp_path, source, server.base_url, {NAMES[1]: {"url": server.url("nope.gguf")}}
    )
    res = provision(m, tmp_path / "dest")
    assert res.code == 1, res
    assert f"{NAMES[1]}: HTTP 404" in res.stderr
    assert len(server.requests_for("nope.gguf")) == 1


# ----------------------------------------------------------------------------- wrong manifests


def test_wrong_size_in_manifest_is_caught(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    size = (source / NAMES[1]).stat().st_size
    m = manifest_for(tmp_path, source, server.base_url, {NAMES[1]: {"size": size + 1}})
    dest = tmp_path / "dest"
    res = provision(m, dest)
    assert res.code == 1, res
    assert f"{NAMES[1]}: the source has {size} bytes, the manifest says {size + 1}" in res.stderr
    assert res.json["failed"] == [NAMES[1]]
    assert not (dest / NAMES[1]).exists()

    # the same wrong size against files already on disk: verify names it
    (dest / NAMES[1]).write_bytes((source / NAMES[1]).read_bytes())
    v = verify(m, dest)
    assert v.code == 1, v
    assert v.json["bad"] == [NAMES[1]]
    assert f"{NAMES[1]}: wrong size: {size} bytes, manifest says {size + 1}" in v.stderr


def test_wrong_sha256_in_manifest_is_caught(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url, {NAMES[2]: {"sha256": "0" * 64}})
    dest = tmp_path / "dest"
    res = provision(m, dest)
    assert res.code == 1, res
    assert f"{NAMES[2]}: sha256 mismatch after download: expected {'0' * 64}" in res.stderr
    assert not (dest / NAMES[2]).exists() and not (dest / f"{NAMES[2]}.part").exists()


def test_bad_manifest_is_exit_2(tmp_path: Path) -> None:
    m = tmp_path / "bad.toml"
    m.write_text('schema = 1\n[model]\nname = "x"\n[[files]]\nname = "../a"\n')
    res = provision(m, tmp_path / "dest")
    assert res.code == 2, res
    assert "bad.toml" in res.stderr and "files[0].name" in res.stderr
    assert not (tmp_path / "dest").exists()


# ----------------------------------------------------------------------------- verify


def test_corrupted_byte_fails_verify_naming_the_file(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    assert provision(m, dest).code == 0
    flip_byte(dest / NAMES[1], 40_000)
    res = verify(m, dest)
    assert res.code == 1, res
    assert res.json["bad"] == [NAMES[1]]
    want = sha(source / NAMES[1])
    assert f"{NAMES[1]}: wrong sha256: expected {want}, actual {sha(dest / NAMES[1])}" in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert errors and all(NAMES[1] in line for line in errors)

    # provision does not trust its cache for the changed file: it fetches it again
    fixed = provision(m, dest)
    assert fixed.code == 0, fixed
    assert outcome(fixed, NAMES[1])["status"] == "downloaded"
    assert [f["status"] for f in fixed.json["files"]].count("present") == 2
    assert_exact(source, dest)


def test_missing_split_part_is_caught(tmp_path: Path, source: Path, server: FaultyServer) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    assert provision(m, dest).code == 0
    (dest / NAMES[1]).unlink()
    res = verify(m, dest)
    assert res.code == 1, res
    assert f"{NAMES[1]}: missing (split part 2 of 3)" in res.stderr
    assert res.json["bad"] == [NAMES[1]]


def test_wrong_split_count_is_caught(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_split_gguf(src, "tiny", 3, tensor_elems=256, header={2: {"split.count": 4}})
    m = manifest_for(tmp_path, src, src.as_uri())  # file:// URLs
    dest = tmp_path / "dest"
    res = provision(m, dest, env={"DGR_ARTIFACTS_FILE_ROOTS": str(src)})
    assert res.code == 1, res  # every byte matches the manifest, the headers do not
    assert res.json["failed"] == []
    assert NAMES[2] in res.json["split_problems"]
    v = verify(m, dest)
    assert v.code == 1, v
    assert v.json["bad"] == [NAMES[2]]
    assert f"{NAMES[2]}: split mismatch: split.count is 4, the name says 3 parts" in v.stderr


def test_duplicate_split_no_is_caught(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_split_gguf(src, "tiny", 3, tensor_elems=256, header={1: {"split.no": 0}})
    m = manifest_for(tmp_path, src, src.as_uri())
    res = verify(m, src)
    assert res.code == 1, res
    assert "split.no is 0 (part 1), the name says part 2" in res.stderr
    assert f"duplicate split.no 0 (also claimed by {NAMES[1]})" in res.stderr
    assert sorted(res.json["bad"]) == sorted(NAMES[:2])


def test_tensor_count_mismatch_is_caught(tmp_path: Path) -> None:
    src = tmp_path / "src"
    hdr = {i: {"split.tensors.count": 5} for i in range(3)}
    write_split_gguf(src, "tiny", 3, tensor_elems=256, header=hdr)
    res = verify(manifest_for(tmp_path, src, src.as_uri()), src)
    assert res.code == 1, res
    assert "the parts hold 3 tensors, split.tensors.count says 5" in res.stderr


def test_verify_missing_dest_is_exit_2(tmp_path: Path, source: Path) -> None:
    m = manifest_for(tmp_path, source, source.as_uri())
    res = verify(m, tmp_path / "nowhere")
    assert res.code == 2, res
    assert "is not a directory" in res.stderr


# ----------------------------------------------------------------------------- refusals


def test_destination_under_home_is_refused_and_nothing_created(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    target = Path("/home") / f"dgr-forge-test-{uuid.uuid4().hex}"
    res = provision(m, target / "models")
    assert res.code == 2, res
    assert "under /home" in res.stderr and "fix:" in res.stderr
    assert not target.exists()
    assert server.log == []

    # `..` that leads into /home, and a symlink into /home: resolved, then refused
    up_to_root = Path(*[".."] * len(tmp_path.parts))  # tmp_path/a back up to /
    sneaky = tmp_path / "a" / up_to_root / target.relative_to("/")
    assert provision(m, sneaky).code == 2
    link = tmp_path / "data"
    link.symlink_to("/home", target_is_directory=True)
    res = provision(m, link / target.name / "models")
    assert res.code == 2, res
    assert f"resolves to {target}/models" in res.stderr
    assert not target.exists()
    assert server.log == []


def test_check_destination_rules(tmp_path: Path) -> None:
    for bad in (Path("/home"), Path("/home/x/y/z"), tmp_path / "l" / "m"):
        if bad.parts[1] != "home":
            (tmp_path / "l").symlink_to("/home/nonexistent-dgr-target")
        with pytest.raises(BadInput, match="under /home"):
            check_destination(bad)
    assert check_destination(tmp_path / "new" / "dir") == (tmp_path / "new" / "dir")
    assert check_destination(Path("/homestead/x")) == Path("/homestead/x")
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="not a directory"):
        check_destination(tmp_path / "file")


def test_not_enough_space_is_refused(tmp_path: Path, source: Path, server: FaultyServer) -> None:
    m = manifest_for(tmp_path, source, server.base_url, {NAMES[0]: {"size": 10**15}})
    dest = tmp_path / "deep" / "dest"
    res = provision(m, dest)
    assert res.code == 2, res
    assert "not enough free space" in res.stderr
    free = res.json["free_bytes"]
    assert res.json["needed_bytes"] > 10**15 > free
    assert not (tmp_path / "deep").exists()
    assert server.log == []


# ----------------------------------------------------------------------------- mirror, file://


def test_mirror_replaces_urls(tmp_path: Path, source: Path) -> None:
    # the manifest's URLs point at a closed port; the mirror (a directory) has the files
    m = manifest_for(tmp_path, source, "http://127.0.0.1:9/models")
    dest = tmp_path / "dest"
    res = provision(m, dest, "--mirror", str(source), "--jobs", "2")
    assert res.code == 0, res
    assert_exact(source, dest)
    assert verify(m, dest).code == 0


def test_file_url_partial_resume(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DGR_ARTIFACTS_FILE_ROOTS", str(source))  # the operator allows it
    m = models.load(manifest_for(tmp_path, source, source.as_uri()))
    dest = tmp_path / "dest"
    dest.mkdir()
    data = (source / NAMES[2]).read_bytes()
    (dest / f"{NAMES[2]}.part").write_bytes(data[:1000])
    result = provisioning.provision(m, dest, Reporter(quiet=True), jobs=1)
    assert result.ok
    got = {o.name: o for o in result.files}[NAMES[2]]
    assert got.resumed_from == 1000 and got.downloaded_bytes == len(data) - 1000
    assert_exact(source, dest)


def test_verified_cache_is_exact(tmp_path: Path) -> None:
    f = tmp_path / "f.bin"
    f.write_bytes(b"a" * 100)
    cache = VerifiedCache(tmp_path)
    cache.record("f.bin", f.stat(), "x" * 64)
    cache.save()
    again = VerifiedCache(tmp_path)
    assert again.lookup("f.bin", f.stat()) == "x" * 64
    st = f.stat()
    f.write_bytes(b"b" * 100)  # same size; put the mtime back as a sneaky edit would
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert again.lookup("f.bin", f.stat()) is None  # ctime moved: the file is hashed again


# ----------------------------------------------------------------------------- manifest


def test_manifest_command_writes_what_provision_needs(tmp_path: Path, source: Path) -> None:
    out = tmp_path / "manifests" / "models" / "tiny.toml"
    rev = "60d8d70770c6776ff598c94bb586a859a38244f1"
    args = ("artifacts", "manifest", str(source), "--name", "tiny", "--url-base")
    res = forge(*args, "https://models.example/tiny/", "--source-revision", rev,
                    "--out", str(out), "--json")  # fmt: skip
    assert res.code == 0, res
    assert res.json["state"] == "written"
    m = models.load(out)
    assert m.name == "tiny" and m.model.source_revision == rev
    assert [f.name for f in m.files] == NAMES
    for f in m.files:
        assert f.size == (source / f.name).stat().st_size
        assert f.sha256 == sha(source / f.name)
        assert f.url == f"https://models.example/tiny/{f.name}"
    before = out.read_bytes()
    again = forge(*args, "https://models.example/tiny/", "--source-revision", rev,
                      "--out", str(out), "--json")  # fmt: skip
    assert again.json["state"] == "unchanged" and out.read_bytes() == before


def test_manifest_command_refusals(tmp_path: Path, source: Path) -> None:
    out = tmp_path / "m.toml"
    base = ("artifacts", "manifest")
    bad_rev = forge(*base, str(source), "--name", "tiny", "--url-base", "https://h/",
                        "--source-revision", "main", "--out", str(out))  # fmt: skip
    assert bad_rev.code == 2 and "--source-revision" in bad_rev.stderr
    bad_url = forge(*base, str(source), "--name", "tiny", "--url-base", "ftp://h/",
                        "--out", str(out))  # fmt: skip
    assert bad_url.code == 2 and "not an http(s):// or file:// URL" in bad_url.stderr
    (source / NAMES[2]).unlink()  # an incomplete split set is not a publishable model
    partial = forge(*base, str(source), "--name", "tiny", "--url-base", "https://h/",
                        "--out", str(out))  # fmt: skip
    assert partial.code == 2 and "split set tiny is incomplete" in partial.stderr
    assert not out.exists()


def test_manifest_command_refuses_inconsistent_headers(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_split_gguf(src, "tiny", 2, tensor_elems=64, header={1: {"split.count": 3}})
    out = tmp_path / "m.toml"
    res = forge("artifacts", "manifest", str(src), "--name", "tiny",
                    "--url-base", "https://h/", "--out", str(out))  # fmt: skip
    assert res.code == 2, res
    assert "split.count is 3, the name says 2 parts" in res.stderr
    assert not out.exists()


# ----------------------------------------------------------------------------- GGUF headers


def gguf_file(path: Path, kv: dict[str, object]) -> None:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(path, arch="llama")
    for key, value in kv.items():
        if isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_uint16(key, int(value))  # type: ignore[call-overload]
    w.add_tensor("t", np.zeros(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check(directory: Path) -> dict[str, list[str]]:
    files = [
        ModelFile(p.name, p.stat().st_size, "0" * 64, "file:///x") for p in directory.iterdir()
    ]
    return gguf_split.check_headers(gguf_split.read_headers(directory, files))


def test_split_header_checks(tmp_path: Path) -> None:
    gguf_file(tmp_path / "single.gguf", {})  # not a split, does not claim to be: fine
    gguf_file(tmp_path / "liar.gguf", {"split.no": 0, "split.count": 2})
    gguf_file(tmp_path / "s-00001-of-00001.gguf", {"split.no": "0", "split.count": "1"})
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all")
    (tmp_path / "empty.gguf").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not checked")
    problems = check(tmp_path)
    assert set(problems) == {"liar.gguf", "s-00001-of-00001.gguf", "junk.gguf", "empty.gguf"}
    assert "header says part 1 of 2" in problems["liar.gguf"][0]
    assert "no integer split.no/split.count" in problems["s-00001-of-00001.gguf"][0]
    assert problems["junk.gguf"][0].startswith("unreadable GGUF header")
    assert problems["empty.gguf"][0].startswith("unreadable GGUF header")


def test_split_set_from_the_writer_is_consistent(tmp_path: Path) -> None:
    write_split_gguf(tmp_path, "ok", 4, tensor_elems=32)
    assert check(tmp_path) == {}


def test_manifest_defaults_to_the_forge_root_and_loads_by_name(
    tmp_path: Path, source: Path
) -> None:
    root = tmp_path / "root"
    (root / "manifests").mkdir(parents=True)
    args = ("artifacts", "manifest", str(source), "--name", "tiny", "--url-base", "https://h/t")
    res = run_forge(*args, cwd=root, env=FAST)
    assert res.code == 0, res
    assert (root / "manifests" / "models" / "tiny.toml").is_file()
    v = run_forge("artifacts", "verify", "tiny", "--dest", str(source), cwd=root, env=FAST)
    assert v.code == 0, v

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = run_forge(*args, cwd=elsewhere, env=FAST)
    assert res.code == 2, res
    assert "pass --out PATH" in res.stderr
    assert not (elsewhere / "manifests").exists()


def test_dest_dir_holds_exactly_the_checked_directory(tmp_path: Path) -> None:
    real = tmp_path / "real" / "models"
    real.mkdir(parents=True)
    with DestDir(real) as held:
        assert held.lstat("nothing") is None and held / "x" == real / "x"
    # a component above --dest swapped for a link after the /home check: refused
    (tmp_path / "link").symlink_to(tmp_path / "real")
    if Path("/proc/self/fd").is_dir():
        with pytest.raises(BadInput, match="changed while provision opened it"):
            DestDir(tmp_path / "link" / "models")
    (tmp_path / "direct").symlink_to(real)  # the last component: never followed
    with pytest.raises(BadInput, match="cannot open the directory"):
        DestDir(tmp_path / "direct")


def test_bounded_reader_reads_what_the_gguf_writer_wrote(tmp_path: Path) -> None:
    import gguf
    import numpy as np

    path = tmp_path / "vocab.gguf"
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_token_list([f"tok{i}".encode() for i in range(500)] + [b""])  # array of strings
    w.add_token_scores([0.5] * 501)  # array of float32
    w.add_string("general.name", "x" * 300)
    w.add_bool("flag", True)
    w.add_uint64("big", 2**40)
    w.add_int32("split.tensors.count", 2)
    w.add_tensor("a", np.zeros(8, dtype=np.float32))
    w.add_tensor("b", np.ones(3, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    header = gguf_split.read_header(path)
    assert header.n_tensors == 2 and header.version == 3
    assert header.ints["big"] == 2**40 and header.ints["split.tensors.count"] == 2
    assert header.ints["flag"] == 1 and "general.name" not in header.ints
    assert "tokenizer.ggml.tokens" in header.keys
    cut = tmp_path / "cut.gguf"  # the same header cut inside the vocabulary
    cut.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(gguf_split.GGUFError):
        gguf_split.read_header(cut)


def test_each_verdict_is_on_stdout_through_a_pipe(tmp_path: Path, source: Path) -> None:
    """`artifacts verify|provision ... 2>/dev/null` still says what happened, as `report
    verify` does: the verdict is the answer (stdout), the per-file problems diagnostics."""
    m = manifest_for(tmp_path, source, "http://127.0.0.1:9/models")
    dest = tmp_path / "dest"

    def piped(*args: str) -> Result:
        return run_forge(*args, env=FAST, subprocess=True)

    half = tmp_path / "half"
    half.mkdir()
    for name in NAMES[:2]:
        (half / name).write_bytes((source / name).read_bytes())
    failed = piped("artifacts", "provision", str(m), "--dest", str(dest), "--mirror", str(half))
    assert failed.code == 1, failed
    assert f"tiny: FAILED: 1 of 3 files not ready in {dest} ({NAMES[2]})" in failed.stdout
    ok = piped("artifacts", "provision", str(m), "--dest", str(dest), "--mirror", str(source))
    assert ok.code == 0, ok
    assert f"tiny: 3/3 files ready in {dest}" in ok.stdout
    good = piped("artifacts", "verify", str(m), "--dest", str(dest))
    assert good.code == 0, good
    assert good.stdout.startswith("tiny: OK: all 3 files verified"), good.stdout
    flip_byte(dest / NAMES[1], 40_000)
    bad = piped("artifacts", "verify", str(m), "--dest", str(dest))
    assert bad.code == 1, bad
    assert f"tiny: FAILED verification: 1 of 3 files ({NAMES[1]})" in bad.stdout
    assert "error:" not in bad.stdout and f"{NAMES[1]}: wrong sha256" in bad.stderr


def test_the_tensor_data_bytes_are_llama_benchs_model_size(tmp_path: Path) -> None:
    """Issue 43 #3: a header's `data_bytes` is ggml_nbytes summed over its tensors (what
    llama_model_size reports), a quantized row by its blocks; the file is larger (header,
    metadata, alignment). A type the forge does not know makes it unknown (None)."""
    import gguf
    import numpy as np
    from gguf.constants import GGML_QUANT_SIZES
    from gguf.constants import GGMLQuantizationType as T

    for type_id, block in gguf_split.GGML_BLOCKS.items():  # ggml's own sizes, every one
        assert GGML_QUANT_SIZES[T(type_id)] == block, T(type_id).name
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_tensor("f32", np.ones((3, 64), dtype=np.float32))
    w.add_tensor("f16", np.ones((5, 32), dtype=np.float16))
    w.add_tensor("q8", np.zeros((2, 34 * 4), dtype=np.uint8), raw_dtype=T.Q8_0)
    w.add_tensor("q4k", np.zeros((1, 144), dtype=np.uint8), raw_dtype=T.Q4_K)
    for write in (w.write_header_to_file, w.write_kv_data_to_file, w.write_tensors_to_file):
        write()
    w.close()
    want = 3 * 64 * 4 + 5 * 32 * 2 + 2 * 4 * 34 + 144
    assert gguf_split.read_header(path).data_bytes == want < path.stat().st_size
    # the Q4_K tensor's type id (12) rewritten to one ggml has not (200): unknown
    data = bytearray(path.read_bytes())
    at = data.index(b"q4k") + 3 + 4 + 2 * 8  # name, n_dims, two dimensions
    assert int.from_bytes(data[at : at + 4], "little") == 12
    data[at : at + 4] = (200).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    assert gguf_split.read_header(path).data_bytes is None
