"""`build` never hands back or signs a report that does not match reality (issue 13)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.build import (
    BuiltLane,
    LaneSnapshot,
    built_snapshot,
    forge_build,
    keygen,
    make_patched_root,
    make_worker,
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


# the first build of the tests that only need a lane that was built: made once per module
# (the worker given as --worker and signed with a key of its own, the same with --cache
# off, or --no-sign with the root's path worker), each test gets it back as that build left
# it; the signed, the unsigned and the worker-less lanes are made once per process and
# shared with test_build.py and test_lane_stale.py (one xdist scope: support.schedule)


@pytest.fixture(scope="module")
def _signed_lane(
    tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream
) -> LaneSnapshot:
    return shared_snapshot(tmp_path_factory, _upstream_template, sign=True)


@pytest.fixture
def signed(_signed_lane: LaneSnapshot) -> BuiltLane:
    return _signed_lane.restore()


@pytest.fixture(scope="module")
def _unsigned_lane(
    tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream
) -> LaneSnapshot:
    return shared_snapshot(tmp_path_factory, _upstream_template, worker="path")


@pytest.fixture
def unsigned(_unsigned_lane: LaneSnapshot) -> BuiltLane:
    return _unsigned_lane.restore()


@pytest.fixture(scope="module")
def _uncached_lane(
    tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream
) -> LaneSnapshot:
    return built_snapshot(
        tmp_path_factory.mktemp("uncached-lane"),
        _upstream_template,
        sign=True,
        options=("--cache", "off"),
    )


@pytest.fixture
def uncached(_uncached_lane: LaneSnapshot) -> BuiltLane:
    return _uncached_lane.restore()


def lane(result: Any) -> dict[str, Any]:
    return result.json["lanes"][0]  # type: ignore[no-any-return]


def verify(root: Path, report: str, pub: Path) -> Any:
    return run_forge(
        "--root", str(root), "report", "verify", report, "--key", str(pub), "--artifacts"
    )


def statement(report: str) -> dict[str, Any]:
    import base64

    env = json.loads(Path(report).read_text())
    return json.loads(base64.b64decode(env["payload"]))  # type: ignore[no-any-return]


def state(root: Path) -> dict[str, Any]:
    return json.loads((root / ".dgr" / "state.json").read_text())["lanes"]["cpu"]  # type: ignore[no-any-return]


def test_flipped_byte_in_artifact_is_rebuilt_and_the_report_stays_true(signed: BuiltLane) -> None:
    root, worker_dir, key, first = signed.root, signed.worker, signed.key, signed.first
    binary = Path(lane(first)["artifacts"][0]["path"])
    # a no-op first: the subject's stat record is now settled (not racy)
    assert forge_build(root, "--worker", str(worker_dir), "--key", str(key)).code == 0
    before = binary.stat()
    data = bytearray(binary.read_bytes())
    data[len(data) // 2] ^= 0xFF
    binary.write_bytes(bytes(data))
    os.utime(binary, ns=(before.st_atime_ns, before.st_mtime_ns))  # same size, same mtime

    second = forge_build(root, "--worker", str(worker_dir), "--key", str(key))
    assert second.code == 0, second
    cpu = lane(second)
    assert cpu["rebuilt"] == [str(binary)]
    assert "changed on disk" in second.stderr
    assert cpu["artifacts"] == lane(first)["artifacts"]  # same inputs, same bytes again
    # so the report is true again: handed back (issue 46), its subjects re-hashing to it
    assert cpu["status"] == "up-to-date" and cpu["report_reused"]
    assert cpu["report"] == lane(first)["report"]
    assert verify(root, cpu["report"], Path(f"{key}.pub")).code == 0


def test_kill_between_relink_and_report_never_reuses_a_stale_report(signed: BuiltLane) -> None:
    root, worker_dir, key, first = signed.root, signed.worker, signed.key, signed.first
    assert worker_dir is not None
    assert "in_progress" not in state(root)  # cleared once the report is written
    util = worker_dir / "src" / "util.cpp"
    util.write_text(util.read_text().replace("(layer);", "(layer) + 10;"))

    killed = forge_build(
        root, "--worker", str(worker_dir), "--key", str(key), env={"DGR_FAULT": "build.linked"}
    )
    assert killed.code in (-9, 137), killed
    assert state(root)["in_progress"] == "build"  # marked before Ninja ran

    again = forge_build(root, "--worker", str(worker_dir), "--key", str(key))
    assert again.code == 0, again
    cpu = lane(again)
    assert cpu["status"] == "built" and not cpu["report_reused"]
    assert cpu["report"] != lane(first)["report"]
    assert verify(root, cpu["report"], Path(f"{key}.pub")).code == 0
    assert "in_progress" not in state(root)
    out = subprocess.run([cpu["artifacts"][0]["path"]], capture_output=True, text=True).stdout
    assert "owner(7)=13" in out


def test_in_progress_is_set_before_configure(root: Path, worker_dir: Path) -> None:
    res = forge_build(
        root, "--worker", str(worker_dir), "--no-sign", env={"DGR_FAULT": "build.linked"}
    )
    assert res.code in (-9, 137), res
    assert state(root)["in_progress"] in ("configure", "build")
    assert "last_build" not in state(root)
    again = forge_build(root, "--worker", str(worker_dir), "--no-sign")
    assert again.code == 0, again
    assert lane(again)["status"] == "built"


def test_key_asked_on_up_to_date_lane_is_honoured(signed: BuiltLane) -> None:
    root, worker_dir, a, first = signed.root, signed.worker, signed.key, signed.first
    b = keygen(signed.base, "b")
    second = forge_build(root, "--worker", str(worker_dir), "--key", str(b))
    assert second.code == 0, second
    cpu = lane(second)
    assert not cpu["report_reused"] and cpu["report"] != lane(first)["report"]
    assert verify(root, cpu["report"], Path(f"{b}.pub")).code == 0
    assert verify(root, cpu["report"], Path(f"{a}.pub")).code == 1
    # the same key again: now a true no-op
    third = forge_build(root, "--worker", str(worker_dir), "--key", str(b))
    assert third.code == 0 and lane(third)["report_reused"], third
    assert lane(third)["report"] == cpu["report"]
    # --no-sign on a lane whose last report is signed: a new, unsigned report
    unsigned = forge_build(root, "--worker", str(worker_dir), "--no-sign")
    assert unsigned.code == 0 and not lane(unsigned)["report_reused"], unsigned
    assert json.loads(Path(lane(unsigned)["report"]).read_text())["signatures"] == []


def test_bad_key_is_exit_2_even_when_up_to_date(signed: BuiltLane, tmp_path: Path) -> None:
    root, worker_dir = signed.root, signed.worker
    missing = forge_build(root, "--worker", str(worker_dir), "--key", str(tmp_path / "nope.pem"))
    assert missing.code == 2, missing
    assert "nope.pem" in missing.stderr
    garbage = forge_build(
        root, "--worker", str(worker_dir), env={"DGR_SIGNING_KEY": "-----BEGIN garbage"}
    )
    assert garbage.code == 2, garbage
    bad_file = tmp_path / "garbage.pem"
    bad_file.write_text("not a key\n")
    bad_file.chmod(0o600)
    garbage_path = forge_build(
        root, "--worker", str(worker_dir), env={"DGR_SIGNING_KEY": str(bad_file)}
    )
    assert garbage_path.code == 2, garbage_path
    assert "garbage.pem" in garbage_path.stderr


def test_untracked_source_in_upstream_tree_is_exit_3(unsigned: BuiltLane) -> None:
    root, args = unsigned.root, unsigned.args()
    src = root / ".dgr" / "src" / "llama.cpp"
    stray = src / "ggml" / "src" / "stray.cpp"
    stray.write_text("int stray() { return 1; }\n")
    res = forge_build(root, *args)
    assert res.code == 3, res
    assert "stray.cpp" in res.stderr
    assert stray.read_text() == "int stray() { return 1; }\n"  # nothing lost
    # an ignored file is compiled as readily (issue 20): refused too, by name
    stray.unlink()
    (src / ".git" / "info" / "exclude").write_text("/notes.txt\n")
    (src / "notes.txt").write_text("mine\n")
    ignored = forge_build(root, *args)
    assert ignored.code == 3 and "notes.txt" in ignored.stderr, ignored
    (src / "notes.txt").unlink()
    ok = forge_build(root, *args)
    assert ok.code == 0, ok


def _recipe_with(root: Path, extra: str) -> None:
    path = root / "recipes" / "cpu.toml"
    text = path.read_text()
    path.write_text(text.replace('GGML_NATIVE = "OFF"', f'GGML_NATIVE = "OFF", {extra}'))


def test_undeclared_option_is_exit_2_naming_closest(root: Path) -> None:
    _recipe_with(root, 'GGML_CUDAA = "ON"')
    res = forge_build(root, "--no-sign")
    assert res.code == 2, res
    assert "GGML_CUDAA" in res.stderr and "closest declared: GGML_CUDA" in res.stderr
    assert not (root / ".dgr" / "build" / "cpu" / "build.ninja").exists()


def test_cmake_unused_variable_is_exit_2_naming_it(root: Path) -> None:
    _recipe_with(root, 'DGRTEST_UNUSED_SWITCH = "ON"')
    res = forge_build(root, "--no-sign")
    assert res.code == 2, res
    assert "DGRTEST_UNUSED_SWITCH" in res.stderr and "not use" in res.stderr
    again = forge_build(root, "--no-sign")  # not recorded as configured: refused again
    assert again.code == 2, again


def test_noop_build_keeps_logs_and_byproducts_true(unsigned: BuiltLane) -> None:
    root, first = unsigned.root, unsigned.first
    first_log = Path(lane(first)["log_file"])
    content = first_log.read_bytes()
    assert b"CMAKE_BUILD_TYPE" in content or b"-DCMAKE" in content  # configure output kept
    second = forge_build(root, *unsigned.args())
    assert second.code == 0 and lane(second)["report_reused"], second
    assert first_log.read_bytes() == content  # never rewritten
    # nothing ran, so no log of its own: the link still names the report's build's log
    assert lane(second)["log_file"] == str(first_log)
    link = root / ".dgr" / "logs" / "build-cpu.log"
    assert link.is_symlink() and link.resolve() == first_log.resolve()
    import hashlib

    ws = root / ".dgr"
    files = 0
    for b in statement(lane(second)["report"])["predicate"]["runDetails"]["byproducts"]:
        if "annotations" in b:  # facts carried in the report (the worker surface), no file
            continue
        files += 1
        assert hashlib.sha256((ws / b["name"]).read_bytes()).hexdigest() == b["digest"]["sha256"]
    assert files  # the logs at least


URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*$")


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_statement_hygiene(signed: BuiltLane, tmp_path: Path) -> None:
    root, worker_dir = signed.root, signed.worker
    # another key on the up-to-date lane: a new report, written in this environment
    key = keygen(tmp_path, "b")
    res = forge_build(
        root,
        "--worker",
        str(worker_dir),
        "--key",
        str(key),
        env={"DGR_CONTAINER_IMAGE": "ghcr.io/acme/builder:1.2@sha256:" + "ab" * 32},
    )
    assert res.code == 0 and not lane(res)["report_reused"], res
    stmt = statement(lane(res)["report"])
    build_def = stmt["predicate"]["buildDefinition"]
    deps = build_def["resolvedDependencies"]
    for dep in deps:
        if "uri" in dep:
            assert URI.match(dep["uri"]), dep
    machine = [str(root), str(root.resolve()), str(worker_dir), sys.prefix, str(tmp_path)]
    machine.append(str(signed.base))
    for text in _strings(stmt["subject"]) + _strings(build_def):
        if text.startswith("git+file://"):
            continue  # the manifest's own upstream URL (a local test repository)
        for path in machine:
            assert path not in text, (path, text)
        assert not re.search(r"(^|[=\s])/(usr|opt|home|tmp|work)/", text), text
    names = {d["name"]: d for d in deps}
    assert (
        names["toolchains/gcc.cmake"]["digest"]["sha256"]
        == __import__("hashlib")
        .sha256((root / "toolchains" / "gcc.cmake").read_bytes())
        .hexdigest()
    )
    cmake_version = subprocess.run(
        [shutil.which("cmake", path=str(Path(sys.executable).parent)) or "cmake", "--version"],
        capture_output=True,
        text=True,
    ).stdout.split()[2]
    assert names["cmake"]["annotations"]["version"] == cmake_version
    assert names["cmake"]["uri"] == f"pkg:generic/cmake@{cmake_version}"
    assert names["ninja"]["annotations"]["version"]
    assert re.match(r"GNU \d+\.\d+", names["cxx-compiler"]["annotations"]["version"])
    assert names["worker"]["uri"] == "file:///dgr/worker"
    assert names["worker"]["annotations"]["location"] == "${DGR_WORKER}"
    image = names["container-image"]
    assert image["uri"] == "pkg:docker/ghcr.io/acme/builder@1.2"
    assert image["digest"] == {"sha256": "ab" * 32}
    internal = build_def["internalParameters"]
    assert internal["compilerCache"]["mode"] in ("rw", "off")
    assert "-DCMAKE_MAKE_PROGRAM=${NINJA}" in internal["cmakeArgs"]


def test_cmake_and_ninja_are_stamped_once_for_every_report_that_shares_the_cache(
    tmp_path: Path,
    upstream: Upstream,
    monkeypatch: pytest.MonkeyPatch,
    _signed_lane: LaneSnapshot,
) -> None:
    """cmake (~20 MB) and ninja are programs of the build like the compilers: stamped while
    Ninja compiles, through the forge cache's program stamps. A second workspace's build
    reads neither file again, and its report still names each by its true sha256. (The
    first workspace's build: the module's signed lane, built in this process through the
    same forge cache.)"""
    from support.cache import doctor

    from dgr_forge.attest import provenance
    from dgr_forge.core import fsutil
    from dgr_forge.lanes import stamps

    assert _signed_lane.built.first.code == 0
    key = keygen(tmp_path, "a")
    read: list[str] = []

    def counting(path: Path) -> str:
        read.append(os.path.realpath(path))
        return fsutil.sha256_file(path)

    for module in (provenance, stamps):  # the two readers a report's tool digests came from
        monkeypatch.setattr(module, "sha256_file", counting)
    second = forge_build(make_patched_root(tmp_path / "two", upstream), "--key", str(key))
    assert second.code == 0, second
    deps = _deps(lane(second)["report"])
    drivers = {}
    for name in ("cmake", "ninja"):
        found = doctor().tool(name).path  # the program the build ran (plan.cmake, plan.ninja)
        assert found, name
        drivers[name] = os.path.realpath(found)
        assert deps[name]["digest"]["sha256"] == _file_sha256(Path(drivers[name])), name
    assert read and not set(read) & set(drivers.values()), (read, drivers)


def _deps(report: str) -> dict[str, Any]:
    deps = statement(report)["predicate"]["buildDefinition"]["resolvedDependencies"]
    return {d["name"]: d for d in deps}


def _file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_shared_library_subject_is_the_real_file(root: Path, tmp_path: Path) -> None:
    worker = make_worker(
        tmp_path / "w",
        {
            "CMakeLists.txt": (
                "cmake_minimum_required(VERSION 3.18)\nproject(w C CXX)\n"
                "include(DgrUpstream)\nadd_library(wlib SHARED src/util.cpp)\n"
                "set_target_properties(wlib PROPERTIES VERSION 1.2.3 SOVERSION 1)\n"
                "target_link_libraries(wlib PRIVATE llama)\n"
                "set_target_properties(llama ggml PROPERTIES POSITION_INDEPENDENT_CODE ON)\n"
            )
        },
    )
    res = forge_build(root, "--worker", str(worker), "--no-sign")
    assert res.code == 0, res
    subjects = statement(lane(res)["report"])["subject"]
    assert [s["name"] for s in subjects] == ["build/cpu/libwlib.so.1.2.3"]
    assert subjects[0]["annotations"]["aliases"] == ["libwlib.so", "libwlib.so.1"]


def test_two_workspaces_build_identical_subjects_and_compare(
    uncached: BuiltLane, tmp_path: Path
) -> None:
    # the first workspace: the module's --cache off lane (the root's own, ROOT/.dgr); the
    # second, at a path of another length, built fresh the same way
    root, worker_dir, key = uncached.root, uncached.worker, uncached.key
    assert worker_dir is not None and key is not None
    pub = str(key) + ".pub"
    reports = [lane(uncached.first)["report"]]
    for ws in (tmp_path / "elsewhere" / "ws-two-longer",):
        res = run_forge(
            "--root",
            str(root),
            "--workspace",
            str(ws),
            "--json",
            "build",
            "-j",
            "2",
            "--worker",
            str(worker_dir),
            "--key",
            str(key),
            "--cache",
            "off",
        )
        assert res.code == 0, res
        reports.append(lane(res)["report"])
    same = run_forge("--json", "report", "compare", *reports, "--key", pub)
    assert same.code == 0, same
    assert same.json["identical"] and same.json["differences"] == []

    # a different build: compare lists the artifact, exit 1
    util = worker_dir / "src" / "util.cpp"
    util.write_text(util.read_text().replace("(layer);", "(layer) + 1;"))
    other = forge_build(root, "--worker", str(worker_dir), "--key", str(key))  # the first's
    assert other.code == 0, other
    diff = run_forge("--json", "report", "compare", reports[0], lane(other)["report"], "--key", pub)
    assert diff.code == 1, diff
    assert [d["name"] for d in diff.json["differences"]] == ["build/cpu/shard-worker"]
    assert "build/cpu/shard-worker" in diff.stderr

    # a tampered report fails its signature: exit 1 even with equal subjects
    tampered = tmp_path / "tampered.intoto.jsonl"
    env = json.loads(Path(reports[1]).read_text())
    env["signatures"][0]["sig"] = __import__("base64").b64encode(bytes(64)).decode()
    tampered.write_text(json.dumps(env) + "\n")
    bad = run_forge("report", "compare", reports[0], str(tampered), "--key", pub)
    assert bad.code == 1, bad
    assert "signature" in bad.stderr


def test_compare_hostile_inputs(tmp_path: Path) -> None:
    missing = run_forge("report", "compare", str(tmp_path / "a"), "--", "-b")
    assert missing.code == 2, missing
    assert "Traceback" not in missing.stderr


@pytest.fixture
def workerless(tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream) -> BuiltLane:
    """A root without a worker whose cpu lane was built once, signed (shared)."""
    return shared_snapshot(tmp_path_factory, _upstream_template, worker=None, sign=True).restore()


def test_presets_without_worker_go_into_upstream_tree(workerless: BuiltLane) -> None:
    root, first = workerless.root, workerless.first
    assert first.code == 0, first
    src = root / ".dgr" / "src" / "llama.cpp"
    res = run_forge("--root", str(root), "--json", "presets", "--lane", "cpu")
    assert res.code == 0, res
    assert res.json["path"] == str(src / "dgr-forge.presets.json")
    assert res.json["user_presets"] == str(src / "CMakeUserPresets.json")
    assert res.json["user_presets_change"] == "created"
    assert not (root / "CMakeUserPresets.json").exists()
    assert sh_git(src, "status", "--porcelain", "--untracked-files=all") == ""
    cmake = str(Path(sys.executable).parent / "cmake")
    cmake = cmake if Path(cmake).exists() else "cmake"
    subprocess.run([cmake, "--preset", "dgr-cpu"], cwd=src, check=True, capture_output=True)
    built = subprocess.run(
        [cmake, "--build", "--preset", "dgr-cpu"], cwd=src, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stdout + built.stderr
    again = forge_build(root, *workerless.args())  # the tree is still clean: no refusal
    assert again.code == 0, again
    assert run_forge("--root", str(root), "patch").code == 0


def test_presets_default_to_worker_dir(unsigned: BuiltLane) -> None:
    root, worker = unsigned.root, unsigned.worker  # the root's path worker
    assert worker is not None
    res = run_forge("--root", str(root), "--json", "presets", "--lane", "cpu")
    assert res.code == 0, res
    assert res.json["path"] == str(worker.resolve() / "dgr-forge.presets.json")
    assert res.json["user_presets"] == str(worker.resolve() / "CMakeUserPresets.json")
    cmake = str(Path(sys.executable).parent / "cmake")
    cmake = cmake if Path(cmake).exists() else "cmake"
    subprocess.run([cmake, "--preset", "dgr-cpu"], cwd=worker, check=True, capture_output=True)
    built = subprocess.run(
        [cmake, "--build", "--preset", "dgr-cpu"], cwd=worker, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert "no work to do" in built.stdout  # the same arguments: the forge's build graph


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--cache", "bogus"], {}, "--cache 'bogus'"),
        (["--cache", "-x"], {}, "--cache '-x'"),
        (["--cache-mode", "../rw"], {}, "--cache-mode '../rw'"),
        ([], {"DGR_CACHE": "ccache\x01"}, "DGR_CACHE"),
        ([], {"DGR_CACHE_MODE": "write"}, "DGR_CACHE_MODE"),
    ],
)
def test_bad_cache_choice_is_exit_2_before_anything(
    root: Path, args: list[str], env: dict[str, str], named: str
) -> None:
    res = forge_build(root, "--no-sign", *args, env=env)
    assert res.code == 2, res
    assert named in res.stderr and "Traceback" not in res.stderr
    assert not (root / ".dgr" / "build").exists()


def test_cache_off_builds_without_launcher_and_report_records_cache(
    uncached: BuiltLane,
) -> None:
    root, res = uncached.root, uncached.first  # built with --cache off
    assert lane(res)["cache"] == {"tool": None, "version": "", "backend": "none", "mode": "off"}
    cache = (root / ".dgr" / "build" / "cpu" / "CMakeCache.txt").read_text()
    assert "COMPILER_LAUNCHER" not in cache
    internal = statement(lane(res)["report"])["predicate"]["buildDefinition"]["internalParameters"]
    assert internal["compilerCache"]["mode"] == "off" and internal["compilerLauncher"] is None


def test_damaged_state_file_is_no_state(unsigned: BuiltLane) -> None:
    root = unsigned.root
    state_file = root / ".dgr" / "state.json"
    data = json.loads(state_file.read_text())
    data["lanes"]["cpu"]["last_build"]["subject_stats"] = "garbage"
    data["lanes"]["cpu"]["last_build"]["artifacts"] = [1, 2]
    data["lanes"]["cpu"]["source_date_epoch"] = True
    data["lanes"]["cpu"]["evidence"] = {"byproducts": "x", "signed_by": 7, "report_sha256": []}
    state_file.write_text(json.dumps(data))
    res = forge_build(root, *unsigned.args())
    assert res.code == 0, res
    assert "Traceback" not in res.stderr
    assert lane(res)["status"] == "built"  # nothing trusted from it: a new, true report


@pytest.mark.parametrize(
    "url",
    [
        "--upload-pack=touch {marker};git-upload-pack",
        "ext::sh -c 'touch {marker}'",
        "https://example.invalid/w.git\n--upload-pack=touch {marker}",
    ],
)
def test_worker_url_is_data_never_an_option(root: Path, tmp_path: Path, url: str) -> None:
    marker = tmp_path / "pwned"
    value = url.format(marker=marker)
    (root / "manifests" / "shard-worker.toml").write_text(
        f'schema = 1\n[worker]\nurl = {json.dumps(value)}\ncommit = "{"a" * 40}"\n'
    )
    res = forge_build(root, "--no-sign")
    assert res.code == 2, res
    assert "[worker] url" in res.stderr and "Traceback" not in res.stderr
    assert not marker.exists()
    # the lock (taken before any input is read) may be there, nothing of the worker
    ws = root / ".dgr"
    assert not ws.exists() or [p.name for p in ws.iterdir()] == ["lock"]


def test_worker_url_credentials_are_masked(root: Path, tmp_path: Path) -> None:
    (root / "manifests" / "shard-worker.toml").write_text(
        'schema = 1\n[worker]\nurl = "https://user:s3cr3t@127.0.0.1:9/w.git"\n'
        f'commit = "{"a" * 40}"\n'
    )
    res = forge_build(root, "--no-sign")  # loopback port 9: refused, no network needed
    assert res.code == 1, res
    assert "***@127.0.0.1" in res.stderr
    assert "s3cr3t" not in res.stdout + res.stderr


def test_empty_signing_key_is_exit_2_even_when_up_to_date(
    signed: BuiltLane, tmp_path: Path
) -> None:
    """What CI passes when a secret is missing: never a throwaway key (issue 13 #2).
    The refusal lives in the one key lookup (attest/records.py); build must honour it
    on an up-to-date lane too."""
    home = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path / "home")}
    root, worker_dir = signed.root, signed.worker
    noop = forge_build(root, *signed.args(), env=home)  # up to date here, signed
    assert noop.code == 0 and lane(noop)["report_reused"], noop
    for env in ({"DGR_SIGNING_KEY": ""}, {"DGR_SIGNING_KEY": "  "}, {"CI": "true"}):
        res = forge_build(root, "--worker", str(worker_dir), env={**home, **env})
        assert res.code == 2, (env, res)
        assert not (tmp_path / "config" / "dgr-forge").exists()  # no key was created
    ok = forge_build(root, "--worker", str(worker_dir), "--no-sign", env={**home, "CI": "true"})
    assert ok.code == 0, ok


def test_the_same_key_given_another_way_is_loaded_once_then_known_by_its_fingerprint(
    signed: BuiltLane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built with --key, then the same file named by DGR_SIGNING_KEY: the keyid proves the
    report is that key's (one full load, the report reused), and the next no-op knows the
    key by its cheap fingerprint: the key is not loaded again (the real tree's no-op paid
    ~60 ms a run for that load)."""
    root, worker_dir, key = signed.root, signed.worker, signed.key
    assert key is not None
    env = {"DGR_SIGNING_KEY": str(key)}
    other_way = forge_build(root, "--worker", str(worker_dir), env=env)
    assert other_way.code == 0 and lane(other_way)["report_reused"], other_way
    assert lane(other_way)["report"] == lane(signed.first)["report"]

    from dgr_forge.attest import keys

    def never(*_: object, **__: object) -> None:
        raise AssertionError("the signing key was loaded on a no-op")

    monkeypatch.setattr(keys, "resolve_signer", never)
    again = forge_build(root, "--worker", str(worker_dir), env=env)
    assert again.code == 0 and lane(again)["report_reused"], again
    assert lane(again)["report"] == lane(signed.first)["report"]
