"""Attacks on `artifacts provision|verify|manifest` (issue 12): planted symlinks, hostile GGUF
headers, credentials in URLs, bad redirects, hostile environment numbers, a trickling server
and a held provision lock. Every attack runs the real CLI against a loopback HTTP server.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import Result, forge_cmd, forge_env, run_forge
from support.server import (
    FaultyServer,
    hostile_gguf,
    manifest_of,
    sha,
    split_names,
    write_split_gguf,
)

from dgr_forge.models import gguf_split
from dgr_forge.models import manifest as models
from dgr_forge.models.manifest import ModelFile

FAST = {"DGR_ARTIFACTS_BACKOFF": "0.01", "DGR_ARTIFACTS_TIMEOUT": "10"}
NAMES = split_names("tiny", 2)
SECRET = "S3cr3tPassw0rd"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    write_split_gguf(tmp_path / "source", "tiny", 2, tensor_elems=4096)
    return tmp_path / "source"


@pytest.fixture
def server(source: Path) -> Iterator[FaultyServer]:
    with FaultyServer(source) as s:
        yield s


def manifest_for(tmp_path: Path, source: Path, base_url: str) -> Path:
    return manifest_of(source, base_url, tmp_path / "tiny.toml", "tiny")


def provision(manifest: Path, dest: Path, *extra: str, env: dict[str, str] | None = None) -> Result:
    return run_forge(
        "artifacts", "provision", str(manifest), "--dest", str(dest), "--json", *extra,
        env={**FAST, **(env or {})}, timeout=60,
    )  # fmt: skip


def no_traceback(res: Result) -> None:
    assert "Traceback" not in res.stderr + res.stdout, res


# ----------------------------------------------------------------------------- symlinks


def test_symlinked_part_is_not_followed(tmp_path: Path, source: Path, server: FaultyServer) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    dest.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"0123456789")
    (dest / f"{NAMES[0]}.part").symlink_to(victim)
    res = provision(m, dest)
    assert res.code == 0, res
    assert victim.read_bytes() == b"0123456789"  # not grown, not truncated
    assert (dest / NAMES[0]).read_bytes() == (source / NAMES[0]).read_bytes()
    assert not (dest / NAMES[0]).is_symlink()
    assert "not a partial download; removed it" in res.stderr
    assert [r.range for r in server.requests_for(NAMES[0])] == [None]  # started over


def test_part_that_is_a_fifo_is_replaced_without_hanging(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    dest.mkdir()
    os.mkfifo(dest / f"{NAMES[1]}.part")
    res = provision(m, dest)
    assert res.code == 0, res
    assert (dest / NAMES[1]).read_bytes() == (source / NAMES[1]).read_bytes()


def test_symlinked_lock_is_refused_and_creates_nothing(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    dest.mkdir()
    outside = tmp_path / "outside" / "planted.lock"
    outside.parent.mkdir()
    (dest / ".dgr-provision.lock").symlink_to(outside)
    res = provision(m, dest)
    assert res.code == 2, res
    no_traceback(res)
    assert ".dgr-provision.lock" in res.stderr and "symlink" in res.stderr and "fix:" in res.stderr
    assert not outside.exists()
    assert server.log == [] and not (dest / NAMES[0]).exists()


def test_symlinked_final_file_is_refused(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    dest.mkdir()
    # a link to a perfect copy elsewhere: the old code reported it "present"
    elsewhere = tmp_path / "elsewhere.gguf"
    elsewhere.write_bytes((source / NAMES[0]).read_bytes())
    (dest / NAMES[0]).symlink_to(elsewhere)
    res = provision(m, dest)
    assert res.code == 2, res
    no_traceback(res)
    assert f"{NAMES[0]}: is a symlink, not a regular file" in res.stderr and "rm " in res.stderr
    assert server.log == []
    assert elsewhere.read_bytes() == (source / NAMES[0]).read_bytes()

    verify = run_forge("artifacts", "verify", str(m), "--dest", str(dest), "--json", env=FAST)
    assert verify.code == 1, verify
    assert f"{NAMES[0]}: is a symlink, not a regular file" in verify.stderr


def test_home_rule_cannot_be_bypassed_through_links_in_dest(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    dest.mkdir()
    tag = uuid.uuid4().hex
    part_target = Path("/home") / f"dgr-forge-test-{tag}.part"
    final_target = Path("/home") / f"dgr-forge-test-{tag}.gguf"
    (dest / f"{NAMES[0]}.part").symlink_to(part_target)
    (dest / NAMES[1]).symlink_to(final_target)
    try:
        res = provision(m, dest)
        assert res.code == 2, res  # the final-file link is refused up front
        assert f"{NAMES[1]}: is a symlink" in res.stderr
        (dest / NAMES[1]).unlink()
        res = provision(m, dest)
        assert res.code == 0, res  # the part link is removed, never followed
        assert not part_target.exists() and not final_target.exists()
        assert not (dest / NAMES[0]).is_symlink()
    finally:
        part_target.unlink(missing_ok=True)
        final_target.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- bounded parsing


@pytest.mark.parametrize("item_type", [0, 6, 10, 8, 9])
def test_hostile_array_counts_are_refused_at_once(tmp_path: Path, item_type: int) -> None:
    path = hostile_gguf(tmp_path / "h.gguf", item_type)
    started = time.monotonic()
    with pytest.raises(gguf_split.GGUFError, match="more than the"):
        gguf_split.read_header(path)
    assert time.monotonic() - started < 0.5


def _header(*parts: bytes) -> bytes:
    import struct

    return b"GGUF" + struct.pack("<I", 3) + b"".join(parts)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (_header((10**15).to_bytes(8, "little"), (0).to_bytes(8, "little")), "tensors"),
        (_header((0).to_bytes(8, "little"), (10**15).to_bytes(8, "little")), "KV count"),
        (_header(bytes(8), (1).to_bytes(8, "little"), (2**63).to_bytes(8, "little"), bytes(16)),
         "key length"),
        (b"GGUF" + (7).to_bytes(4, "little"), "version 7"),
        (b"GGUX" + bytes(20), "magic"),
        (b"GG", "magic"),
    ],
)  # fmt: skip
def test_hostile_headers_are_bounded(tmp_path: Path, data: bytes, words: str) -> None:
    path = tmp_path / "h.gguf"
    path.write_bytes(data)
    with pytest.raises(gguf_split.GGUFError, match=words):
        gguf_split.read_header(path)


def _limited(args: list[str], limit_mb: int = 100, timeout: float = 20) -> tuple[Result, float]:
    """The CLI in a subprocess under RLIMIT_AS; returns its result and wall seconds."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))

    started = time.monotonic()
    proc = subprocess.run(
        forge_cmd(*args), env=forge_env(FAST), capture_output=True, text=True,
        timeout=timeout, preexec_fn=limit, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return Result(proc.returncode, proc.stdout, proc.stderr), time.monotonic() - started


def test_hostile_header_in_verify_under_memory_and_time_limits(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    part = hostile_gguf(dest / "m-00001-of-00001.gguf")
    # the manifest vouches for the hostile bytes: size and sha256 match, so it is parsed
    m = tmp_path / "m.toml"
    f = ModelFile(part.name, part.stat().st_size, sha(part), f"https://h/{part.name}")
    m.write_text(models.dumps("m", [f]))
    res, seconds = _limited(
        ["artifacts", "verify", str(m), "--dest", str(dest), "--jobs", "1", "--json"]
    )
    assert res.code == 1, res
    no_traceback(res)
    assert f"{part.name}: unreadable GGUF header" in res.stderr and "claims" in res.stderr
    assert seconds < 10  # typically ~0.4 s, CLI start-up included; the old code ran minutes

    # `artifacts manifest` reads the same header of files nobody vouched for
    out = tmp_path / "out.toml"
    res, seconds = _limited(
        ["artifacts", "manifest", str(dest), "--name", "m", "--url-base", "https://h/",
         "--out", str(out), "--jobs", "1"]
    )  # fmt: skip
    assert res.code == 2, res
    no_traceback(res)
    assert "unreadable GGUF header" in res.stderr and not out.exists()
    assert seconds < 10


def test_verify_parses_no_header_whose_hash_failed(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    part = hostile_gguf(dest / "m-00001-of-00001.gguf")
    m = tmp_path / "m.toml"
    f = ModelFile(part.name, part.stat().st_size, "0" * 64, f"https://h/{part.name}")
    m.write_text(models.dumps("m", [f]))
    res = run_forge("artifacts", "verify", str(m), "--dest", str(dest), "--json", env=FAST)
    assert res.code == 1, res
    problems = res.json["files"][0]["problems"]
    assert len(problems) == 1 and problems[0].startswith("wrong sha256"), problems


# ----------------------------------------------------------------------------- credentials


def test_credentials_never_shown(tmp_path: Path, source: Path, server: FaultyServer) -> None:
    authed = server.base_url.replace("http://", f"http://user:{SECRET}@")
    m = manifest_for(tmp_path, source, authed)
    # every message that names a URL: a retried 500, a failing 404, a retry warning
    server.faults.fail[NAMES[0]] = 1
    (source / NAMES[1]).rename(source / "gone.gguf")
    res = provision(m, tmp_path / "dest", env={"DGR_ARTIFACTS_TRIES": "2"})
    assert res.code == 1, res
    assert "HTTP 500" in res.stderr and "HTTP 404" in res.stderr
    assert "***@127.0.0.1" in res.stderr
    assert SECRET not in res.stdout + res.stderr

    # a mirror with credentials, good and bad; a bad URL in the manifest
    (source / "gone.gguf").rename(source / NAMES[1])
    ok = provision(m, tmp_path / "dest2", "--mirror", authed)
    assert ok.code == 0, ok
    bad = provision(m, tmp_path / "dest3", "--mirror", f"ftp://user:{SECRET}@h/m")
    assert bad.code == 2, bad
    broken = tmp_path / "broken.toml"
    broken.write_text(m.read_text().replace(authed, f"http://user:{SECRET}@[::1", 1))
    bad_manifest = provision(broken, tmp_path / "dest4")
    assert bad_manifest.code == 2, bad_manifest
    made = run_forge(
        "artifacts", "manifest", str(source), "--name", "tiny", "--url-base", authed,
        "--out", str(tmp_path / "made.toml"), "--json", env=FAST,
    )  # fmt: skip
    assert made.code == 0, made
    for r in (ok, bad, bad_manifest, made):
        no_traceback(r)
        assert SECRET not in r.stdout + r.stderr, r


# ----------------------------------------------------------------------------- no tracebacks


def test_redirect_to_an_invalid_url_is_a_clear_failure(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    server.faults.redirect[NAMES[0]] = "http://[::1"
    res = provision(m, tmp_path / "dest")
    assert res.code == 1, res
    no_traceback(res)
    assert f"{NAMES[0]}: the request to {server.url(NAMES[0])} failed" in res.stderr
    # every network failure carries its fix (issue 22), once, in the file's own error
    error = res.json["files"][0]["error"]
    assert error.count("fix:") == 1 and "redirects to" in error, error
    assert res.json["failed"] == [NAMES[0]]


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("DGR_ARTIFACTS_TRIES", "nan"),
        ("DGR_ARTIFACTS_TRIES", "inf"),
        ("DGR_ARTIFACTS_TRIES", "-1"),
        ("DGR_ARTIFACTS_TRIES", "0"),
        ("DGR_ARTIFACTS_TRIES", "1" + "0" * 30),
        ("DGR_ARTIFACTS_TRIES", "2.5"),
        ("DGR_ARTIFACTS_BACKOFF", "nan"),
        ("DGR_ARTIFACTS_BACKOFF", "-1"),
        ("DGR_ARTIFACTS_TIMEOUT", "inf"),
        ("DGR_ARTIFACTS_TIMEOUT", "0"),
        ("DGR_ARTIFACTS_MIN_RATE", "0"),
        ("DGR_ARTIFACTS_STALL_S", "nan"),
        ("DGR_ARTIFACTS_STALL_S", "1e400"),
    ],
)
def test_environment_numbers_must_be_finite_positive_and_bounded(
    tmp_path: Path, source: Path, server: FaultyServer, var: str, value: str
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    res = provision(m, dest, env={var: value})
    assert res.code == 2, res
    no_traceback(res)
    assert f"{var}={value!r} is not" in res.stderr and "fix:" in res.stderr
    assert not dest.exists() and server.log == []


def test_trickling_server_is_cut_by_the_minimum_rate(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    server.faults.trickle[NAMES[0]] = 1000  # 1000 bytes, then a byte per second
    env = {
        "DGR_ARTIFACTS_STALL_S": "1",
        "DGR_ARTIFACTS_MIN_RATE": "1024",
        "DGR_ARTIFACTS_TRIES": "2",
    }
    started = time.monotonic()
    res = provision(m, dest, "--jobs", "2", env=env)
    assert time.monotonic() - started < 15  # the read timeout (10 s) alone never fires
    assert res.code == 1, res
    no_traceback(res)
    assert f"{NAMES[0]}: gave up after 2 slow tries: too slow" in res.stderr
    kept = (dest / f"{NAMES[0]}.part").stat().st_size
    assert kept >= 1000 and "are kept in" in res.stderr  # nothing received is thrown away
    assert (dest / NAMES[1]).read_bytes() == (source / NAMES[1]).read_bytes()


def test_provision_lock_honours_the_lock_timeout_and_names_the_holder(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    dest.mkdir()
    holder = {"pid": 4242, "command": "dgr-forge artifacts provision x", "started": "then"}
    with (dest / ".dgr-provision.lock").open("w") as fh:
        fh.write(json.dumps(holder))
        fh.flush()
        fcntl.flock(fh, fcntl.LOCK_EX)
        started = time.monotonic()
        res = provision(m, dest, env={"DGR_LOCK_TIMEOUT": "0.5"})
        assert time.monotonic() - started < 10
        assert res.code == 1, res
        assert "still being provisioned by pid 4242" in res.stderr, res
        assert res.json["holder"].startswith("pid 4242")
        now = provision(m, dest, env={"DGR_LOCK_TIMEOUT": "0"})
        assert now.code == 1 and "is being provisioned by pid 4242" in now.stderr, now
        nan = provision(m, dest, env={"DGR_LOCK_TIMEOUT": "nan"})
        assert nan.code == 2, nan
        no_traceback(nan)
    assert server.log == []
    res = provision(m, dest)
    assert res.code == 0, res


@pytest.mark.parametrize(
    ("mirror", "words"),
    [
        ("-oProxyCommand=touch /tmp/x", "starts with '-'"),
        ("ext::sh -c touch% /tmp/x", "remote helper transport"),
        ("http://h/\x01", "control character"),
        ("ssh://h/m", "scheme ssh://"),
    ],
)
def test_hostile_mirror_is_refused(
    tmp_path: Path, source: Path, server: FaultyServer, mirror: str, words: str
) -> None:
    m = manifest_for(tmp_path, source, server.base_url)
    res = provision(m, tmp_path / "dest", f"--mirror={mirror}")
    assert res.code == 2, res
    no_traceback(res)
    assert "--mirror" in res.stderr and words in res.stderr
    assert server.log == [] and not (tmp_path / "dest").exists()
