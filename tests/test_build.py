"""`dgr-forge build`: real CMake + Ninja builds of the test upstream and a test worker."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.build import (
    TEST_CUDA_RECIPE,
    BuiltLane,
    LaneSnapshot,
    built_snapshot,
    forge_build,
    make_patched_root,
    make_worker,
    nvcc_path,
    path_without,
    shared_snapshot,
)
from support.cli import run_forge
from support.git import Upstream, sh_git

pytestmark = pytest.mark.slow


@pytest.fixture
def root(tmp_path: Path, upstream: Upstream) -> Path:
    return make_patched_root(tmp_path / "forge", upstream)


@pytest.fixture
def worker_dir(tmp_path: Path) -> Path:
    return make_worker(tmp_path / "worker")


@pytest.fixture(scope="module")
def _worker_lane(
    tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream
) -> LaneSnapshot:
    """The worker built once with --no-sign: the first build of the tests that only need
    a lane that was built (each gets it back as that build left it, see `built`)."""
    return built_snapshot(tmp_path_factory.mktemp("worker-lane"), _upstream_template)


@pytest.fixture
def built(_worker_lane: LaneSnapshot) -> BuiltLane:
    return _worker_lane.restore()


def lane(result) -> dict:  # type: ignore[no-untyped-def,type-arg]
    return result.json["lanes"][0]  # type: ignore[no-any-return]


# the first builds these tests check as they came (a signed worker build, an upstream
# build without a worker): made once per process, shared with test_build_truth.py and
# test_lane_stale.py (one xdist scope: support.schedule), each test gets its copy back


@pytest.fixture
def signed(tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream) -> BuiltLane:
    return shared_snapshot(tmp_path_factory, _upstream_template, sign=True).restore()


@pytest.fixture
def workerless(tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream) -> BuiltLane:
    return shared_snapshot(tmp_path_factory, _upstream_template, worker=None, sign=True).restore()


def test_worker_build_runs_patched_behaviour(signed: BuiltLane) -> None:
    root, key, res = signed.root, signed.key, signed.first  # `build --worker W --key K`
    assert res.code == 0, res
    cpu = lane(res)
    assert cpu["status"] == "built" and cpu["configured"]
    build_dir = root / ".dgr" / "build" / "cpu"
    assert Path(cpu["build_dir"]) == build_dir

    # artifacts come from the File API codemodel: exactly the worker's executable (the
    # upstream is EXCLUDE_FROM_ALL and its tools are off in worker builds)
    assert [(a["name"], a["kind"]) for a in cpu["artifacts"]] == [("shard-worker", "EXECUTABLE")]
    binary = Path(cpu["artifacts"][0]["path"])
    assert binary == build_dir / "shard-worker"
    assert (build_dir / ".cmake/api/v1/query/client-dgr-forge/query.json").is_file()
    assert (build_dir / "compile_commands.json").is_file()

    manifest = (root / "manifests" / "llama.cpp.toml").read_text()
    pin = re.search(r'commit = "([0-9a-f]{40})"', manifest).group(1)  # type: ignore[union-attr]
    out = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout
    assert "owner(7)=3" in out  # upstream says 0; the patch in the series says layer % 4
    assert f"commit={pin}" in out and "lane=cpu" in out and "patches=1" in out
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"],
        cwd=root / ".dgr/src/llama.cpp",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert f"head={head}" in out and head != pin

    # the signed report verifies, artifacts included
    verify = run_forge(
        "--root", str(root), "report", "verify", cpu["report"], "--key", f"{key}.pub", "--artifacts"
    )
    assert verify.code == 0, verify
    state = json.loads((root / ".dgr" / "state.json").read_text())
    assert state["lanes"]["cpu"]["last_build"]["result"] == "ok"

    # status names the lanes built here and their last report
    st = run_forge("--root", str(root), "status", "--json")
    assert st.code == 0, st
    assert st.json["lanes"] == [{"lane": "cpu", "last_build": st.json["lanes"][0]["last_build"]}]
    assert st.json["lanes"][0]["last_build"]["result"] == "ok"
    assert st.json["lanes"][0]["last_build"]["report"] == cpu["report"]
    assert "lane cpu" in st.stderr and cpu["report"] in st.stderr


def test_noop_rebuild_runs_nothing(built: BuiltLane) -> None:
    root, worker_dir, first = built.root, built.worker, built.first
    cache = root / ".dgr" / "build" / "cpu" / "CMakeCache.txt"
    src_head = root / ".dgr" / "src" / "llama.cpp" / ".git" / "HEAD"
    cache_mtime, head_mtime = cache.stat().st_mtime_ns, src_head.stat().st_mtime_ns
    binary = Path(lane(first)["artifacts"][0]["path"])
    binary_mtime = binary.stat().st_mtime_ns

    second = forge_build(root, "--worker", str(worker_dir), "--no-sign")
    assert second.code == 0, second
    cpu = lane(second)
    assert cpu["status"] == "up-to-date"
    assert not cpu["configured"] and not cpu["patched"] and cpu["report_reused"]
    assert cpu["report"] == lane(first)["report"]
    assert cpu["artifacts"] == lane(first)["artifacts"]
    assert cache.stat().st_mtime_ns == cache_mtime  # not re-configured
    assert src_head.stat().st_mtime_ns == head_mtime  # not re-fetched / re-patched
    assert binary.stat().st_mtime_ns == binary_mtime
    # not even Ninja: the lane's stamps and records say nothing moved (issue 46), so no log
    assert cpu["log_file"] == lane(first)["log_file"] and "build" not in cpu["timings"]
    assert (root / ".dgr" / "logs" / "build-cpu.log").resolve() == Path(cpu["log_file"])
    assert "configure" not in second.stderr and "fetch" not in second.stderr


def test_a_new_empty_commit_with_the_forge_committer_survives_a_plain_build(
    built: BuiltLane,
) -> None:
    """Issue 45, cause 10: a person's own new commit (empty: its tree is the series'),
    with their author and the forge's committer identity, was re-applied away by a plain
    build. It is now a person's commit (the forge knows its own by their recorded ids)."""
    from dgr_forge.core.gitutil import FORGE_IDENTITY

    src = built.root / ".dgr" / "src" / "llama.cpp"
    person = {"GIT_AUTHOR_NAME": "Bea Teammate", "GIT_AUTHOR_EMAIL": "bea@team.invalid"}
    posing = {**person, **FORGE_IDENTITY}
    sh_git(src, "commit", "-q", "--allow-empty", "-m", "release: mark 1.2", env=posing)
    mine = sh_git(src, "rev-parse", "HEAD")
    r = forge_build(built.root, *built.args())
    assert r.code in (0, 3), r  # kept as a person's commit (or a refusal naming it)
    logs = built.root / ".dgr" / "logs"
    saved = [p for p in logs.glob("*") if p.is_file() and mine[:12] in p.read_text("latin-1")]
    assert mine in sh_git(src, "rev-list", "HEAD").split() or saved, r


def test_worker_source_edit_rebuilds_only_that(built: BuiltLane) -> None:
    root, worker_dir, first = built.root, built.worker, built.first
    assert worker_dir is not None
    util = worker_dir / "src" / "util.cpp"
    util.write_text(
        util.read_text().replace("llama_layer_owner(layer);", "llama_layer_owner(layer) + 10;")
    )

    second = forge_build(root, "--worker", str(worker_dir), "--no-sign")
    assert second.code == 0, second
    cpu = lane(second)
    assert cpu["status"] == "built" and not cpu["configured"]
    assert cpu["ninja_steps"] == 2  # compile util.cpp + relink, nothing else
    log = (root / ".dgr" / "logs" / "build-cpu.log").read_text()
    compiled = re.findall(r"^\[\d+/\d+\] Building \S+ object (\S+)", log, re.MULTILINE)
    assert compiled == ["CMakeFiles/shard-worker.dir/src/util.cpp.o"]
    assert cpu["report"] != lane(first)["report"]  # new artifact hash -> new report
    assert cpu["artifacts"][0]["sha256"] != lane(first)["artifacts"][0]["sha256"]
    out = subprocess.run([cpu["artifacts"][0]["path"]], capture_output=True, text=True).stdout
    assert "owner(7)=13" in out


def test_recipe_change_reconfigures(built: BuiltLane) -> None:
    root, worker_dir = built.root, built.worker
    recipe = root / "recipes" / "cpu.toml"
    recipe.write_text(recipe.read_text().replace('GGML_NATIVE = "OFF"', 'GGML_NATIVE = "ON"'))
    res = forge_build(root, "--worker", str(worker_dir), "--no-sign")
    assert res.code == 0, res
    assert lane(res)["configured"] and not lane(res)["patched"]
    cache = (root / ".dgr" / "build" / "cpu" / "CMakeCache.txt").read_text()
    assert "GGML_NATIVE:BOOL=ON" in cache or "GGML_NATIVE:UNINITIALIZED=ON" in cache

    # a toolchain file edit also reconfigures (and still does not re-patch)
    toolchain = root / "toolchains" / "gcc.cmake"
    toolchain.write_text(toolchain.read_text() + "# edited\n")
    res = forge_build(root, "--worker", str(worker_dir), "--no-sign")
    assert res.code == 0, res
    assert lane(res)["configured"] and not lane(res)["patched"]
    # and with nothing changed after that, a no-op again
    res = forge_build(root, "--worker", str(worker_dir), "--no-sign")
    assert lane(res)["status"] == "up-to-date" and not lane(res)["configured"]


def test_upstream_default_targets_without_worker(workerless: BuiltLane) -> None:
    root, res = workerless.root, workerless.first  # `build` with no worker
    assert res.code == 0, res
    artifacts = {a["name"]: a for a in lane(res)["artifacts"]}
    assert set(artifacts) == {"llama-cli"}  # the upstream's only executable target
    out = subprocess.run(
        [artifacts["llama-cli"]["path"]], capture_output=True, text=True, check=True
    ).stdout
    assert "llama upstream+dgr" in out and "owner(7)=3" in out
    lanes = run_forge("--root", str(root), "--json", "lanes")
    row = next(r for r in lanes.json["lanes"] if r["lane"] == "cpu")
    assert row["buildable"] and row["last_build"]["result"] == "ok"
    assert row["last_build"]["report"] == lane(res)["report"]


def test_failing_compile_exit_1_shows_errors_keeps_log(root: Path, tmp_path: Path) -> None:
    broken = make_worker(
        tmp_path / "broken", {"src/util.cpp": "int worker_owner(int layer) { return layer +; }\n"}
    )
    res = forge_build(root, "--worker", str(broken), "--no-sign")
    assert res.code == 1, res
    assert res.json["ok"] is False
    assert "util.cpp" in res.stderr and "error" in res.stderr
    log = root / ".dgr" / "logs" / "build-cpu.log"
    assert str(log) in res.stderr
    assert "FAILED:" in log.read_text() and "util.cpp" in log.read_text()
    assert any("error" in line for line in lane(res)["error_lines"])
    lanes = run_forge("--root", str(root), "--json", "lanes")
    row = next(r for r in lanes.json["lanes"] if r["lane"] == "cpu")
    assert row["last_build"]["result"] == "failed"


def nothing_but_the_lock(root: Path) -> bool:
    """The workspace holds at most its lock file: the command context takes the lock
    before it reads any input, so a refusal may leave that (empty) file, nothing else."""
    ws = root / ".dgr"
    return not ws.exists() or [p.name for p in ws.iterdir()] == ["lock"]


def test_missing_nvcc_exit_2_creates_nothing(root: Path) -> None:
    (root / "recipes" / "cuda.toml").write_text(TEST_CUDA_RECIPE)
    env = {"PATH": path_without("nvcc"), "CUDA_PATH": "", "CUDA_HOME": ""}
    manifest_before = (root / "manifests" / "llama.cpp.toml").read_bytes()
    res = run_forge("--root", str(root), "--json", "build", "--lane", "cuda", env=env)
    assert res.code == 2, res
    assert "cuda lane cannot build on this host" in res.stderr
    assert "nvcc not found" in res.stderr and "nvidia-cuda-toolkit" in res.stderr
    assert [lane["lane"] for lane in res.json["lanes"]] == ["cuda"]
    assert res.json["lanes"][0]["missing"][0]["name"] == "nvcc"
    assert nothing_but_the_lock(root)  # no build dir, no source, nothing half-done
    assert (root / "manifests" / "llama.cpp.toml").read_bytes() == manifest_before


def test_real_cuda_recipe_says_cublas_missing(root: Path) -> None:
    if nvcc_path() is None:
        pytest.skip("no nvcc on this host")
    doctor = run_forge("--root", str(root), "--json", "doctor")
    cuda = next(r for r in doctor.json["lanes"] if r["lane"] == "cuda")
    if cuda["buildable"]:
        pytest.skip("this host has cuBLAS")
    env = {"PATH": os.environ["PATH"] + os.pathsep + str(Path(nvcc_path() or "").parent)}
    res = run_forge("--root", str(root), "--json", "build", "--lane", "cuda", env=env)
    assert res.code == 2, res
    assert "cuda lane cannot build on this host: missing cuBLAS" in res.stderr
    assert [m["name"] for m in res.json["lanes"][0]["missing"]] == ["cublas"]
    assert not (root / ".dgr" / "build").exists()


def test_bad_inputs_exit_2_nothing_created(root: Path, tmp_path: Path) -> None:
    res = run_forge("--root", str(root), "--json", "build", "--lane", "nope")
    assert res.code == 2 and "unknown lane 'nope'" in res.stderr
    res = run_forge("--root", str(root), "--json", "build", "--worker", str(tmp_path / "missing"))
    assert res.code == 2 and "no CMakeLists.txt" in res.stderr
    res = run_forge("--root", str(root), "--json", "build", "--jobs", "0")
    assert res.code == 2 and "--jobs 0" in res.stderr
    (root / "manifests" / "shard-worker.toml").write_text(
        'schema = 1\n[worker]\nurl = "x"\ncommit = "main"\n'
    )
    res = run_forge("--root", str(root), "--json", "build")
    assert res.code == 2 and "worker.commit" in res.stderr
    assert nothing_but_the_lock(root)


# what a build cannot take in a path: a CMake list separator, a quote, a backslash, a
# pipe (`ninja: error: build.ninja: expected newline, got '|'`), a `$` (Ninja's variables,
# ccache's base_dir: `environment variable "x" not set`), a line break, and what ends a
# path in Ninja's deps log (`*`, `` ` ``, a control character: the boundary check then
# read other headers)
UNBUILDABLE_PATHS = {
    "semicolon": ";",
    "quote": '"',
    "backslash": "\\",
    "pipe": "|",
    "dollar": "$",
    "star": "*",
    "backtick": "`",
    "caret": "^",
    "angle": "<",
    "tab": "\t",
    "escape": "\x1b",
    "newline": "\n",
    "carriage-return": "\r",
}


@pytest.mark.parametrize(
    ("where", "name"),
    [("root", name) for name in sorted(UNBUILDABLE_PATHS)]
    + [("workspace", "semicolon"), ("worker", "star"), ("worker", "newline")],
)
def test_a_path_cmake_cannot_build_in_is_exit_2_before_anything_is_made(
    tmp_path: Path, upstream: Upstream, where: str, name: str
) -> None:
    bad = f"in{UNBUILDABLE_PATHS[name]}here"
    root = make_patched_root(tmp_path / (bad if where == "root" else "forge"), upstream)
    args = ["--root", str(root)]
    if where == "workspace":
        args += ["--workspace", str(tmp_path / bad / "ws")]
    build = ["build", "--lane", "cpu"]
    if where == "worker":
        build += ["--worker", str(make_worker(tmp_path / bad / "worker"))]
    manifest_before = (root / "manifests" / "llama.cpp.toml").read_bytes()
    res = run_forge(*args, "--json", *build)
    assert res.code == 2, res
    assert f"{UNBUILDABLE_PATHS[name]!r}" in res.json["error"], res.json["error"]
    assert "fix:" in res.stderr and "move" in res.json["hint"]
    assert res.json["path"].startswith(str(tmp_path / bad))
    assert (root / "manifests" / "llama.cpp.toml").read_bytes() == manifest_before
    ws = tmp_path / bad / "ws" if where == "workspace" else root / ".dgr"
    assert not ws.exists() or [p.name for p in ws.iterdir()] == ["lock"]  # nothing made


def test_ccache_is_the_compiler_launcher_when_present(
    root: Path, worker_dir: Path, tmp_path: Path
) -> None:
    fake = tmp_path / "fakebin"
    fake.mkdir()
    calls = tmp_path / "ccache-calls"
    script = fake / "ccache"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "ccache version 9.9.9"; exit 0; fi\n'
        f'echo "$@" >> "{calls}"\n'
        'exec "$@"\n'
    )
    script.chmod(0o755)
    env = {"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    res = forge_build(root, "--worker", str(worker_dir), "--no-sign", env=env)
    assert res.code == 0, res
    cache = (root / ".dgr" / "build" / "cpu" / "CMakeCache.txt").read_text()
    assert f"CMAKE_CXX_COMPILER_LAUNCHER:UNINITIALIZED={script}" in cache
    launched = calls.read_text()
    assert "src/util.cpp" in launched and "src/main.cpp" in launched


def test_git_worker_from_manifest_is_fetched_at_its_commit(root: Path, tmp_path: Path) -> None:
    repo = make_worker(tmp_path / "worker-repo")
    sh_git(repo, "init", "-q")
    sh_git(repo, "add", "-A")
    sh_git(repo, "commit", "-qm", "worker")
    commit = sh_git(repo, "rev-parse", "HEAD")
    (root / "manifests" / "shard-worker.toml").write_text(
        f'schema = 1\n[worker]\nurl = "{repo.as_uri()}"\ncommit = "{commit}"\n'
    )
    res = forge_build(root, "--no-sign")
    assert res.code == 0, res
    assert res.json["worker"] == repo.as_uri()
    assert [a["name"] for a in lane(res)["artifacts"]] == ["shard-worker"]
    checkout = root / ".dgr" / "src" / "shard-worker"
    assert sh_git(checkout, "rev-parse", "HEAD") == commit

    # a new commit upstream of the worker changes nothing: the pin is exact
    (repo / "src" / "util.cpp").write_text("int worker_owner(int) { return 99; }\n")
    sh_git(repo, "commit", "-qam", "later")
    again = forge_build(root, "--no-sign")
    assert again.code == 0, again
    assert lane(again)["status"] == "up-to-date"
    assert sh_git(checkout, "rev-parse", "HEAD") == commit

    # a deleted checkout is fetched again by the next plain build (issue 19)
    shutil.rmtree(checkout)
    again = forge_build(root, "--no-sign")
    assert again.code == 0, again
    assert sh_git(checkout, "rev-parse", "HEAD") == commit

    # the checkout is a workspace: a bump never loses an edit or a commit made there
    later = sh_git(repo, "rev-parse", "HEAD")
    (checkout / "src" / "main.cpp").write_text(
        "// my edit\n" + (repo / "src" / "main.cpp").read_text()
    )
    (checkout / "NOTES.md").write_text("mine\n")
    (root / "manifests" / "shard-worker.toml").write_text(
        f'schema = 1\n[worker]\nurl = "{repo.as_uri()}"\ncommit = "{later}"\n'
    )
    res = forge_build(root, "--no-sign")
    assert res.code == 3, res
    assert "src/main.cpp" in res.json["error"] and "--force" in res.json["hint"], res
    assert (checkout / "NOTES.md").read_text() == "mine\n"
    sh_git(checkout, "add", "-A")
    sh_git(checkout, "commit", "-qm", "my worker tweak")
    mine = sh_git(checkout, "rev-parse", "HEAD")
    (checkout / "NOTES.md").write_text("mine, later\n")
    res = forge_build(root, "--no-sign")
    assert res.code == 3 and "my worker tweak" in res.json["error"], res
    assert sh_git(checkout, "rev-parse", "HEAD") == mine
    res = forge_build(root, "--no-sign", "--force")
    assert res.code == 0, res
    assert sh_git(checkout, "rev-parse", "HEAD") == later
    logs = root / ".dgr" / "logs"
    (patch_file,) = logs.glob("worker-saved-shard-worker-*.patch")
    (mbox,) = logs.glob("worker-saved-commits-shard-worker-*.mbox")
    assert str(patch_file) in res.stderr and str(mbox) in res.stderr
    assert b"mine, later" in patch_file.read_bytes()
    assert b"Subject: [PATCH] my worker tweak" in mbox.read_bytes()
    assert b"// my edit" in mbox.read_bytes()


def test_local_edit_in_upstream_workspace_is_not_built_silently(built: BuiltLane) -> None:
    root, worker_dir = built.root, built.worker
    binary = root / ".dgr" / "build" / "cpu" / "shard-worker"
    built = binary.stat().st_mtime_ns
    edited = root / ".dgr" / "src" / "llama.cpp" / "src" / "llama.cpp"
    edited.write_text(edited.read_text().replace("layer % 4", "layer % 5"))
    res = forge_build(root, "--worker", str(worker_dir), "--no-sign")
    assert res.code == 3, res  # a human decides: export it as a patch, or discard it
    assert "src/llama.cpp" in res.stderr
    assert "layer % 5" in edited.read_text()  # the edit is kept
    assert binary.stat().st_mtime_ns == built  # nothing was compiled from it
