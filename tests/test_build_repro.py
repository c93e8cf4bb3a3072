"""Reproducible and true on an upstream that builds like llama.cpp (issue 20): the forge
chooses every launcher (the upstream's own ccache auto-detection included), the binary
does not depend on the workspace's git history, the cache or the checkout's path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.build import BuiltLane, LaneSnapshot, built_snapshot, make_patched_root, make_worker
from support.cache import clean_env
from support.cli import Result, run_forge
from support.git import Upstream, sh_git
from support.llamalike import make_llamalike_upstream

pytestmark = pytest.mark.slow

SCRIPTS = str(Path(sys.executable).parent)  # the venv's bin: ccache (the cache extra)


@pytest.fixture(scope="module")
def llamalike(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    return make_llamalike_upstream(tmp_path_factory.mktemp("llamalike") / "upstream")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """ccache on PATH (the upstream finds it), a cache of the test's own."""
    path = SCRIPTS + os.pathsep + os.environ.get("PATH", "")
    return clean_env(CCACHE_DIR=str(tmp_path / "ccache"), PATH=path, **extra)


def _build(root: Path, env: dict[str, str], *args: str) -> Result:
    sign = [] if "--key" in args else ["--no-sign"]
    return run_forge("--root", str(root), "--json", "build", "-j", "2", *sign, *args, env=env)


def _lane(res: Result) -> dict[str, Any]:
    return res.json["lanes"][0]  # type: ignore[no-any-return]


def _generated(root: Path) -> str:
    build = root / ".dgr" / "build" / "cpu"
    return (build / "build.ninja").read_text() + (build / "CMakeFiles" / "rules.ninja").read_text()


def _tool_output(res: Result) -> str:
    tool = next(a["path"] for a in _lane(res)["artifacts"] if a["name"] == "llama-cli")
    return subprocess.run([tool], capture_output=True, text=True, check=True).stdout


def test_deepened_cached_and_fresh_uncached_at_another_path_are_identical(
    tmp_path: Path, llamalike: Upstream
) -> None:
    if shutil.which("ccache", path=SCRIPTS + os.pathsep + os.environ.get("PATH", "")) is None:
        pytest.skip("ccache not installed (the 'cache' extra)")
    a = make_patched_root(tmp_path / "one" / "forge", llamalike)
    b = tmp_path / "two" / "deeper" / "forge"
    shutil.copytree(a, b, symlinks=True)
    # a user's own git setting that changes `--short` (as a big history does)
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[core]\n\tabbrev = 9\n")
    env = _env(tmp_path)
    key = tmp_path / "key.pem"
    assert run_forge("keygen", "--out", str(key)).code == 0

    # checkout A: fetched, then its history deepened (as a rebase does), built cached
    assert run_forge("--root", str(a), "fetch", env=env).code == 0
    src = a / ".dgr" / "src" / "llama.cpp"
    sh_git(src, "fetch", "-q", "--unshallow", llamalike.url)
    assert sh_git(src, "rev-list", "--count", llamalike.head) == str(len(llamalike.commits))
    user_git = {**env, "GIT_CONFIG_GLOBAL": str(gitconfig)}
    cached = _build(a, user_git, "--cache", "ccache", "--key", str(key))
    assert cached.code == 0, cached
    assert _lane(cached)["cache"]["tool"] == "ccache"

    # checkout B: fresh (shallow), another path, no cache
    off = _build(b, env, "--cache", "off", "--key", str(key))
    assert off.code == 0, off
    assert _lane(off)["cache"]["mode"] == "off"
    rules = _generated(b)
    assert "ccache" not in rules and "LAUNCHER = " not in rules  # no hidden launcher

    # the binary embeds the upstream's own build number at the pin and the pin + series
    # commit string (issue 29); git describe sees the canonical view (12-character ids)
    out = _tool_output(off)
    head = sh_git(b / ".dgr" / "src" / "llama.cpp", "rev-parse", "HEAD")
    number = len(llamalike.commits)
    assert f"build {number} commit {llamalike.head[:12]}+1 " in out, out
    assert f"describe {head[:12]} " in out, out
    assert _tool_output(cached) == out

    names = sorted(x["name"] for x in _lane(off)["artifacts"])
    assert names == ["ggml", "ggml-base", "ggml-cpu", "llama", "llama-cli"], names
    compare = run_forge(
        "--json",
        "report",
        "compare",
        _lane(cached)["report"],
        _lane(off)["report"],
        "--key",
        f"{key}.pub",
        env=env,
    )
    assert compare.code == 0, compare.stdout + compare.stderr


# ----------------------------------------------------------------------------- trees


def test_ignored_file_in_the_upstream_tree_stops_the_build(
    tmp_path: Path, upstream: Upstream
) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    env = clean_env()
    assert _build(root, env, "--cache", "off").code == 0
    src = root / ".dgr" / "src" / "llama.cpp"
    # a shadow header on the include path, hidden from `git status` by info/exclude
    (src / "include" / "cstdio").write_text("#error shadowed\n")
    exclude = src / ".git" / "info" / "exclude"
    exclude.write_text(exclude.read_text() + "/include/cstdio\n")
    res = _build(root, env, "--cache", "off")
    assert res.code == 3, res
    assert "include/cstdio" in res.stderr and "ignored" in res.stderr
    status = run_forge("--root", str(root), "--json", "status", env=env)
    assert status.json["upstream"]["ignored"] == ["include/cstdio"], status.json
    assert status.json["upstream"]["verified"] is False

    # the forge's own presets file is let through, by name and content; another is not
    (src / "include" / "cstdio").unlink()
    presets = run_forge("--root", str(root), "presets", env=env)
    assert presets.code == 0, presets
    assert (src / "CMakeUserPresets.json").is_file() and (src / "dgr-forge.presets.json").is_file()
    assert _build(root, env, "--cache", "off").code == 0
    status = run_forge("--root", str(root), "--json", "status", env=env)
    assert status.json["upstream"]["ignored"] == [], status.json  # as `build` lets them through
    # a person's own presets file in the upstream tree may include anything: not let through
    user = src / "CMakeUserPresets.json"
    user.write_text('{"version": 4, "include": ["dgr-forge.presets.json", "/tmp/x.json"]}\n')
    res = _build(root, env, "--cache", "off")
    assert res.code == 3 and "CMakeUserPresets.json" in res.stderr, res
    status = run_forge("--root", str(root), "--json", "status", env=env)
    assert status.json["upstream"]["ignored"] == ["CMakeUserPresets.json"], status.json
    # nor a presets file of the forge's name that loads other files
    assert run_forge("--root", str(root), "presets", "--remove", env=env).code == 0
    assert run_forge("--root", str(root), "presets", env=env).code == 0
    (src / "dgr-forge.presets.json").write_text('{"version": 3, "include": ["/tmp/x.json"]}\n')
    res = _build(root, env, "--cache", "off")
    assert res.code == 3 and "dgr-forge.presets.json" in res.stderr, res


# ----------------------------------------------------------------------------- programs


def _compilers(directory: Path, cxx_extra: str = "", hook: str = "") -> dict[str, str]:
    """gcc/g++ at a fixed path (the gcc toolchain's DGR_GCC_PREFIX): wrapper scripts."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, real in (("gcc", "gcc"), ("g++", "g++")):
        script = bin_dir / name
        extra = cxx_extra if name == "g++" else ""
        tmp = bin_dir / f".{name}.new"  # replaced, as a package update does: a new file
        tmp.write_text(f'#!/bin/sh\n{hook}exec {shutil.which(real)} "$@" {extra}\n')
        tmp.chmod(0o755)
        tmp.replace(script)
    return {"DGR_GCC_PREFIX": str(directory)}


# the first build of the tests that start from a lane built with gcc/g++ at a fixed path
# (the wrappers at BASE/gcc, DGR_GCC_PREFIX), the worker given as --worker, --cache off:
# made once per module, each test gets it back (wrappers included) as that build left it


@pytest.fixture(scope="module")
def _wrapped_lane(
    tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream
) -> LaneSnapshot:
    directory = tmp_path_factory.mktemp("wrapped-lane")
    env = clean_env(**_compilers(directory / "lane" / "gcc"))  # BASE/gcc (support.build)
    return built_snapshot(directory, _upstream_template, options=("--cache", "off"), env=env)


@pytest.fixture
def wrapped(_wrapped_lane: LaneSnapshot) -> BuiltLane:
    return _wrapped_lane.restore()


def _wrapped_env(lane: BuiltLane) -> dict[str, str]:
    return clean_env(**_compilers(lane.base / "gcc"))  # the same scripts: nothing changes


def _wrapped_args(lane: BuiltLane) -> list[str]:
    """The first build's arguments but --no-sign (`_build` adds it): --worker W --cache off."""
    return [a for a in lane.args() if a != "--no-sign"]


def test_compiler_swapped_at_the_same_path_rebuilds_everything(wrapped: BuiltLane) -> None:
    root, first, args = (
        wrapped.root,
        wrapped.first,
        _wrapped_args(wrapped),
    )  # --worker W --cache off
    env = _wrapped_env(wrapped)
    assert first.code == 0, first
    steps = _lane(first)["ninja_steps"]
    tools = _statement(_lane(first)["report"])["predicate"]["buildDefinition"][
        "resolvedDependencies"
    ]
    assert any(t["name"] == "cxx-compiler cc1plus" and "digest" in t for t in tools), tools
    assert any(t["name"] == "ar" and t["annotations"]["version"] for t in tools), tools

    _compilers(wrapped.base / "gcc", cxx_extra="-O0")  # same path, another compiler
    second = _build(root, env, *args)
    assert second.code == 0, second
    assert _lane(second)["status"] == "built" and not _lane(second)["report_reused"]
    assert "changed since configure" in second.stderr and "CMAKE_CXX_COMPILER" in second.stderr
    assert _lane(second)["ninja_steps"] == steps  # every object again, none mixed in
    assert _lane(second)["artifacts"] != _lane(first)["artifacts"]


def test_worker_edit_with_an_old_mtime_is_rebuilt(wrapped: BuiltLane) -> None:
    root, worker, first, args = wrapped.root, wrapped.worker, wrapped.first, _wrapped_args(wrapped)
    assert worker is not None
    env = _wrapped_env(wrapped)
    assert first.code == 0, first  # `build --worker WORKER --cache off`
    util = worker / "src" / "util.cpp"
    before = util.stat()
    util.write_text(util.read_text().replace("(layer);", "(layer) + 10;"))
    os.utime(util, ns=(before.st_atime_ns, before.st_mtime_ns))  # as `cp -p`, a checkout

    second = _build(root, env, *args)
    assert second.code == 0, second
    cpu = _lane(second)
    assert cpu["status"] == "built" and not cpu["report_reused"], cpu
    assert "nothing to do" in second.stderr
    out = subprocess.run([cpu["artifacts"][0]["path"]], capture_output=True, text=True).stdout
    assert "owner(7)=13" in out
    third = _build(root, env, *args)
    assert _lane(third)["status"] == "up-to-date" and _lane(third)["report_reused"], third


def test_toolchain_file_edited_during_the_build_gives_no_report(
    tmp_path: Path, upstream: Upstream
) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    toolchain = root / "toolchains" / "gcc.cmake"
    # the compiler edits the toolchain file while configure runs it
    hook = f"grep -q edited {toolchain} || echo '# edited' >> {toolchain}\n"
    env = clean_env(**_compilers(tmp_path / "gcc", hook=hook))
    res = _build(root, env, "--cache", "off")
    assert res.code == 1, res
    assert "toolchains/gcc.cmake" in res.stderr and "changed while the build ran" in res.stderr
    assert not list((root / ".dgr" / "reports").glob("*.jsonl"))
    again = _build(root, clean_env(**_compilers(tmp_path / "gcc2")), "--cache", "off")
    assert again.code == 0 and _lane(again)["status"] == "built", again


def _statement(report: str) -> dict[str, Any]:
    import base64
    import json

    envelope = json.loads(Path(report).read_text().splitlines()[0])
    return json.loads(base64.b64decode(envelope["payload"]))  # type: ignore[no-any-return]


def test_worker_beside_the_checkout_hits_the_cache_from_another_path(
    tmp_path: Path, upstream: Upstream
) -> None:
    from support.cache import ccache_hits, ccache_stats, doctor

    from dgr_forge.cache import select as cache

    env = _env(tmp_path)
    if cache.locate(doctor(), "ccache") is None:
        pytest.skip("ccache not installed (the 'cache' extra)")
    setup = cache.select(doctor(), "ccache", environ=env)
    results = []
    for where in ("one", "two/deeper"):
        root = make_patched_root(tmp_path / where / "forge", upstream)
        worker = make_worker(tmp_path / where / "shard-worker")  # the README's ../shard-worker
        before = ccache_stats(setup, env)
        res = _build(root, env, "--cache", "ccache", "--worker", str(worker))
        assert res.code == 0, res
        after = ccache_stats(setup, env)
        results.append((res, {k: after.get(k, 0) - before.get(k, 0) for k in after}))
    hits, calls = ccache_hits(results[1][1])
    assert calls >= 4 and hits == calls, results[1][1]  # the worker's objects too
    assert (
        _lane(results[0][0])["artifacts"][0]["sha256"]
        == _lane(results[1][0])["artifacts"][0]["sha256"]
    )


def test_a_launcher_the_forge_did_not_choose_is_exit_1(tmp_path: Path, upstream: Upstream) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    toolchain = root / "toolchains" / "gcc.cmake"
    # a launcher set behind the forge's back (as ggml's RULE_LAUNCH_COMPILE does)
    toolchain.write_text(
        toolchain.read_text() + "set_property(GLOBAL PROPERTY RULE_LAUNCH_COMPILE /usr/bin/env)\n"
    )
    res = _build(root, clean_env(), "--cache", "off")
    assert res.code == 1, res
    assert "/usr/bin/env" in res.stderr and "the forge chose none" in res.stderr
    assert res.json["compile"] == ["/usr/bin/env"] and res.json["chosen"] is None
    assert not list((root / ".dgr" / "reports").glob("*.jsonl"))


def test_a_kill_during_the_fresh_build_directory_is_finished_by_the_next_run(
    wrapped: BuiltLane,
) -> None:
    import json

    root, first, args = (
        wrapped.root,
        wrapped.first,
        _wrapped_args(wrapped),
    )  # --worker W --cache off
    env = _wrapped_env(wrapped)
    assert first.code == 0, first
    _compilers(wrapped.base / "gcc", cxx_extra="-O0")  # the next run must start afresh
    killed = _build(root, {**env, "DGR_FAULT": "build.wipe"}, *args)
    assert killed.code in (-9, 137), killed
    state = json.loads((root / ".dgr" / "state.json").read_text())["lanes"]["cpu"]
    assert state["in_progress"] == "wipe" and "programs" not in state
    # as a removal cut short leaves it: some files gone, the other objects still there
    build = root / ".dgr" / "build" / "cpu"
    (build / "build.ninja").unlink()
    next(build.rglob("*.o")).unlink()
    again = _build(root, env, *args)
    assert again.code == 0, again
    assert _lane(again)["status"] == "built"
    assert _lane(again)["ninja_steps"] == _lane(first)["ninja_steps"]  # every object again
    state = json.loads((root / ".dgr" / "state.json").read_text())["lanes"]["cpu"]
    assert "in_progress" not in state
