"""The compiler cache through `dgr-forge build` (issue 16): two checkouts at different
paths share hits (ccache's own statistics), the remote round trip through a loopback
server, read-only builds write nothing of their own, and the report, the JSON and the logs
record the cache without its credentials. (`--cache off`: tests/test_build_truth.py.)"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.build import make_patched_root, make_worker
from support.cache import ccache_hits, ccache_stats, clean_env, doctor, loopback_server, snapshot
from support.cli import Result, run_forge
from support.git import Upstream

from dgr_forge.cache import select as cache

pytestmark = pytest.mark.slow

SECRET = "hunter2-s3cr3t"


def _checkout(tmp_path: Path, rel: str, upstream: Upstream) -> Path:
    """A forge root (a checkout) at `rel` with its worker inside, default workspace."""
    root = make_patched_root(tmp_path / rel, upstream)
    make_worker(root / "worker")
    return root


def _build(root: Path, env: dict[str, str], *args: str) -> Result:
    return run_forge(
        "--root",
        str(root),
        "--json",
        "build",
        "-j",
        "2",
        "--no-sign",
        "--worker",
        str(root / "worker"),
        *args,
        env=env,
    )


def _stats(env: dict[str, str]) -> dict[str, int]:
    """ccache's own counters for the CCACHE_DIR in `env`."""
    return ccache_stats(cache.select(doctor(), "ccache", environ=env), env)


def _statement(report: str) -> dict[str, Any]:
    envelope = json.loads(Path(report).read_text().splitlines()[0])
    return json.loads(base64.b64decode(envelope["payload"]))  # type: ignore[no-any-return]


def test_two_checkouts_at_different_paths_share_hits(tmp_path: Path, upstream: Upstream) -> None:
    env = clean_env(CCACHE_DIR=str(tmp_path / "ccache"), CCACHE_LOGFILE=str(tmp_path / "cc.log"))
    a = _checkout(tmp_path, "one/forge", upstream)
    b = tmp_path / "two" / "deeper" / "forge"  # a second checkout of the same root
    shutil.copytree(a, b, symlinks=True)
    first = _build(a, env, "--cache", "ccache")
    assert first.code == 0, first
    lane = first.json["lanes"][0]
    assert lane["cache"]["tool"] == "ccache" and lane["cache"]["mode"] == "rw"
    misses = _stats(env).get("cache_miss", 0)
    assert misses >= 3

    before = _stats(env)
    second = _build(b, env, "--cache", "ccache")
    assert second.code == 0, second
    after = _stats(env)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    hits, calls = ccache_hits(delta)
    assert calls == misses and hits >= 0.8 * calls, delta


def test_remote_round_trip_read_only_and_no_secret_anywhere(
    tmp_path: Path, upstream: Upstream
) -> None:
    a = _checkout(tmp_path, "a/forge", upstream)
    b = tmp_path / "b" / "x" / "forge"
    shutil.copytree(a, b, symlinks=True)
    c = tmp_path / "c" / "forge"
    shutil.copytree(a, c, symlinks=True)
    with loopback_server(auth=f"ci:{SECRET}") as (host, store):
        remote = f"http://ci:{SECRET}@{host}/cache"
        env_a = clean_env(CCACHE_DIR=str(tmp_path / "local-a"), CCACHE_REMOTE_STORAGE=remote)
        first = _build(a, env_a, "--cache", "ccache")
        assert first.code == 0, first
        cache = first.json["lanes"][0]["cache"]
        assert cache == {
            "tool": "ccache",
            "version": cache["version"],
            "backend": f"local + remote http://***@{host}/cache",
            "mode": "rw",
            "hits": 0,  # this build's own figures (ccache's stats log of this lane)
            "misses": cache["misses"],
        }
        assert cache["misses"] >= 4
        assert store.count("PUT", 201) >= 4 and store.count("GET", 401) == 0

        # a fresh local cache, another checkout, read-only: hits from the remote, no write
        env_b = {**env_a, "CCACHE_DIR": str(tmp_path / "local-b"), "DGR_CACHE_MODE": "ro"}
        objects, puts = dict(store.objects), store.count("PUT")
        second = _build(b, env_b, "--cache", "ccache")
        assert second.code == 0, second
        stats = _stats(env_b)
        hits, calls = ccache_hits(stats)
        assert calls >= 4 and hits >= stats.get("remote_storage_hit", 0) >= 0.8 * calls, stats
        assert store.objects == objects and store.count("PUT") == puts
        # ccache copies remote hits into the local cache even read-only: byte for byte what
        # the remote holds, nothing of this build's own
        local = snapshot(tmp_path / "local-b")
        assert local and set(local.values()) <= set(store.objects.values())
        internal = _statement(second.json["lanes"][0]["report"])["predicate"]["buildDefinition"][
            "internalParameters"
        ]
        assert internal["compilerCache"]["mode"] == "ro"
        assert (
            internal["compilerCache"]["backend"]
            == f"local + remote http://***@{host}/cache|read-only"
        )

        # `doctor` too; the secret is in no output, report or log of any of it
        doctor = run_forge("--root", str(c), "--json", "doctor", env=env_b)
        outputs = [r.stdout + r.stderr for r in (first, second, doctor)]
        files = [p for root in (a, b) for p in (root / ".dgr").rglob("*") if p.is_file()]
        assert files
        for text in outputs + [p.read_bytes().decode("utf-8", "replace") for p in files]:
            assert SECRET not in text


def test_cache_off_and_ro_reach_the_build(tmp_path: Path, upstream: Upstream) -> None:
    a = _checkout(tmp_path, "a/forge", upstream)
    env = clean_env(CCACHE_DIR=str(tmp_path / "local"))
    assert _build(a, env, "--cache", "ccache").code == 0
    before = snapshot(tmp_path / "local")
    util = a / "worker" / "src" / "util.cpp"
    util.write_text(util.read_text() + "int changed_for_ro = 1;\n")
    ro = _build(a, {**env, "DGR_CACHE": "ccache"}, "--cache-mode", "ro")
    assert ro.code == 0, ro
    assert ro.json["lanes"][0]["cache"]["mode"] == "ro"
    assert snapshot(tmp_path / "local") == before  # the changed file's result: not stored
