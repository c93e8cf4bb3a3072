"""Real llama.cpp, as shipped (issue 29): on an upstream that declares llama.cpp's current
option set with its deprecation shims, loads its ggml libraries at run time and has a
history far longer than a depth-1 fetch, the shipped recipes pass `check` and build, a
deprecated alias is refused naming its replacement, the binaries carry the upstream's own
build number, every library the requested target loads is signed, and no machine path of
a `file://` upstream reaches the report."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.build import make_patched_root
from support.cache import clean_env
from support.cli import Result, run_forge
from support.git import Upstream, copy_upstream, sh_git
from support.llamalike import make_llamalike_upstream

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def _llamalike(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    return make_llamalike_upstream(tmp_path_factory.mktemp("llamalike") / "upstream")


@pytest.fixture
def llamalike(tmp_path: Path, _llamalike: Upstream) -> Upstream:
    return copy_upstream(_llamalike, tmp_path / "upstream")


def _forge(root: Path, *args: str) -> Result:
    return run_forge("--root", str(root), "--json", *args, env=clean_env())


def _build(root: Path, *args: str) -> Result:
    sign = [] if "--key" in args else ["--no-sign"]
    return _forge(root, "build", "-j", "2", "--cache", "off", *sign, *args)


def _statement(report: str) -> dict[str, Any]:
    envelope = json.loads(Path(report).read_text().splitlines()[0])
    return json.loads(base64.b64decode(envelope["payload"]))  # type: ignore[no-any-return]


def _cli_output(res: Result) -> str:
    lane = res.json["lanes"][0]
    tool = next(a["path"] for a in lane["artifacts"] if a["name"] == "llama-cli")
    return subprocess.run([tool], capture_output=True, text=True, check=True).stdout


def _runpath(path: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True)
    return re.findall(r"\((?:RUNPATH|RPATH)\)\s+[^\[]*\[([^\]]*)\]", out.stdout)


def _count(up: Upstream) -> int:
    return int(sh_git(up.path, "rev-list", "--count", up.head))


def test_shipped_recipes_pass_check_and_build_at_a_current_llama_cpp(
    tmp_path: Path, llamalike: Upstream
) -> None:
    root = make_patched_root(tmp_path / "forge", llamalike)
    assert _forge(root, "patch").code == 0 and _forge(root, "export").code == 0  # canonical
    check = _forge(root, "check")
    assert check.code == 0, check
    assert check.json["option_problems"] == []
    res = _build(root, "--lane", "cpu")
    assert res.code == 0, res
    assert "LLAMA_CURL" not in res.stderr
    # upstream's llama-ui-assets ran, with neither npm nor a download (h7 finding 7)
    log = Path(res.json["lanes"][0]["log"]).read_text()
    assert "Provisioning UI assets" in log and "would" not in log, log[-2000:]


@pytest.mark.parametrize(
    ("option", "replacement"), [("LLAMA_CUBLAS", "GGML_CUDA"), ("LLAMA_CURL", None)]
)
def test_a_deprecated_alias_is_exit_2_naming_it_and_its_replacement(
    tmp_path: Path, llamalike: Upstream, option: str, replacement: str | None
) -> None:
    root = make_patched_root(tmp_path / "forge", llamalike)
    recipe = root / "recipes" / "cpu.toml"
    recipe.write_text(
        recipe.read_text().replace('GGML_NATIVE = "OFF"', f'GGML_NATIVE = "OFF", {option} = "OFF"')
    )
    assert _forge(root, "patch").code == 0 and _forge(root, "export").code == 0
    pin = llamalike.head[:12]
    for res in (_forge(root, "check"), _build(root, "--lane", "cpu")):
        assert res.code == 2, res
        assert option in res.stderr and "recipes/cpu.toml" in res.stderr, res.stderr
        assert f"deprecated upstream at {pin}" in res.stderr, res.stderr
        if replacement:
            assert f"use {replacement}" in res.stderr, res.stderr
        else:
            assert "no replacement" in res.stderr, res.stderr
    problems = _forge(root, "check").json["option_problems"]
    assert [(p["option"], p["renamed_to"], p["deprecated"]) for p in problems] == [
        (option, replacement, True)
    ]


def test_the_binary_carries_the_upstreams_build_number_shallow_or_deep(
    tmp_path: Path, llamalike: Upstream
) -> None:
    root = make_patched_root(tmp_path / "one" / "forge", llamalike)
    fetched = _forge(root, "fetch")
    assert fetched.code == 0, fetched
    number = _count(llamalike)
    assert number > 100
    manifest = (root / "manifests" / "llama.cpp.toml").read_text()
    assert f"build_number = {number}\n" in manifest, manifest
    status = _forge(root, "status")
    assert status.json["upstream"]["build_number"] == number, status.json
    shown = run_forge("--root", str(root), "status", env=clean_env()).stdout
    assert f"build     b{number}" in shown, shown

    # a second workspace at another path, its history deepened to the full upstream one
    deep = tmp_path / "two" / "deeper" / "forge"
    shutil.copytree(root, deep, symlinks=True)
    sh_git(deep / ".dgr" / "src" / "llama.cpp", "fetch", "-q", "--unshallow", llamalike.url)
    outputs = []
    for where in (root, deep):
        res = _build(where, "--lane", "cpu")
        assert res.code == 0, res
        outputs.append(_cli_output(res))
        libs = {Path(a["path"]).name for a in res.json["lanes"][0]["artifacts"]}
        assert f"libllama.so.0.0.{number}" in libs, libs
    assert f"build {number} commit {llamalike.head[:12]}+1 " in outputs[0], outputs[0]
    assert outputs[0] == outputs[1]


def test_fetch_without_the_upstream_never_records_a_wrong_number(
    tmp_path: Path, llamalike: Upstream
) -> None:
    root = make_patched_root(tmp_path / "forge", llamalike)
    assert _forge(root, "fetch").code == 0
    manifest = root / "manifests" / "llama.cpp.toml"
    manifest.write_text(manifest.read_text().replace(f"build_number = {_count(llamalike)}\n", ""))
    shutil.rmtree(llamalike.path)  # the upstream is gone: nothing can count its history
    res = _build(root, "--lane", "cpu")
    assert res.code == 2, res
    assert "build_number" in res.stderr and "dgr-forge fetch" in res.stderr, res.stderr
    assert "build_number" not in manifest.read_text()


def test_every_library_the_target_loads_is_a_subject(tmp_path: Path, llamalike: Upstream) -> None:
    root = make_patched_root(tmp_path / "forge", llamalike)
    recipe = root / "recipes" / "cpu.toml"
    recipe.write_text(recipe.read_text().replace("targets = []", 'targets = ["llama"]'))
    key = tmp_path / "key.pem"
    assert run_forge("keygen", "--out", str(key)).code == 0
    res = _build(root, "--lane", "cpu", "--key", str(key))
    assert res.code == 0, res
    lane = res.json["lanes"][0]
    names = sorted(a["name"] for a in lane["artifacts"])
    assert names == ["ggml", "ggml-base", "ggml-cpu", "llama"], names
    subjects = {Path(s["name"]).name for s in _statement(lane["report"])["subject"]}
    assert {"libggml.so", "libggml-base.so", "libggml-cpu.so"} <= subjects, subjects

    verify = ["report", "verify", lane["report"], "--key", f"{key}.pub", "--artifacts"]
    assert _forge(root, *verify).code == 0
    cpu_lib = next(Path(a["path"]) for a in lane["artifacts"] if a["name"] == "ggml-cpu")
    cpu_lib.write_bytes(cpu_lib.read_bytes() + b"\0")
    changed = _forge(root, *verify)
    assert changed.code == 1, changed
    assert "libggml-cpu.so" in changed.stdout + changed.stderr


def test_no_machine_path_of_a_file_upstream_in_the_report(
    tmp_path: Path, llamalike: Upstream
) -> None:
    root = make_patched_root(tmp_path / "forge", llamalike)
    key = tmp_path / "key.pem"
    assert run_forge("keygen", "--out", str(key)).code == 0
    res = _build(root, "--lane", "cpu", "--key", str(key))
    assert res.code == 0, res
    text = json.dumps(_statement(res.json["lanes"][0]["report"]))
    for machine in (str(llamalike.path), str(tmp_path), llamalike.url):
        assert machine not in text, machine
    # and no subject searches the directory it is started from: no empty RUNPATH element
    # (CMake's `$ORIGIN:` on every installable target; tests/security/test_runpath.py)
    for artifact in res.json["lanes"][0]["artifacts"]:
        for value in _runpath(Path(artifact["path"])):
            assert "" not in value.split(":"), (artifact["path"], value)
    # rewritten with their mtimes kept: Ninja itself finds nothing to relink after it
    build_dir = root / ".dgr" / "build" / "cpu"
    ninja = Path(sys.executable).with_name("ninja")
    dry = subprocess.run([ninja, "-C", build_dir, "-n"], capture_output=True, text=True)
    assert "Linking" not in dry.stdout, dry.stdout  # (its always-run UI step aside)
    deps = _statement(res.json["lanes"][0]["report"])["predicate"]["buildDefinition"][
        "resolvedDependencies"
    ]
    up = next(d for d in deps if d["name"] == "llama.cpp")
    assert up["uri"].startswith("git+file:///") and up["uri"].endswith(llamalike.head), up
    assert up["annotations"]["buildNumber"] == _count(llamalike)
    for dep in deps:
        if "uri" in dep and dep["uri"].startswith("pkg:generic/"):
            assert dep["annotations"]["version"], dep


def test_a_rebase_records_the_new_pins_build_number(tmp_path: Path, llamalike: Upstream) -> None:
    root = make_patched_root(tmp_path / "forge", llamalike)
    assert _forge(root, "fetch").code == 0
    manifest = root / "manifests" / "llama.cpp.toml"
    assert f"build_number = {_count(llamalike)}\n" in manifest.read_text()
    for i in range(3):
        llamalike.commit({f"docs/later-{i}.md": f"later {i}\n"}, f"docs: later {i}")
    res = _forge(root, "rebase", "--onto", llamalike.head)
    assert res.code == 0, res
    text = manifest.read_text()
    assert f'commit = "{llamalike.head}"' in text
    assert f"build_number = {_count(llamalike)}\n" in text, text  # 128, not the old 125
    assert _forge(root, "status").json["upstream"]["build_number"] == _count(llamalike)


def test_a_hostile_build_number_is_exit_2(tmp_path: Path, llamalike: Upstream) -> None:
    root = make_patched_root(tmp_path / "forge", llamalike)
    manifest = root / "manifests" / "llama.cpp.toml"
    good = manifest.read_text()
    for bad in ('"125"', "true", "0", "-1", "1.5", str(10**30), '"${{ github.run }}"'):
        manifest.write_text(good.replace("[upstream]\n", f"[upstream]\nbuild_number = {bad}\n"))
        res = _forge(root, "status")
        assert res.code == 2, (bad, res)
        assert "upstream.build_number" in res.stderr, (bad, res.stderr)


def test_the_number_comes_from_a_full_mirror_never_from_a_shallow_one(
    tmp_path: Path, llamalike: Upstream
) -> None:
    root = make_patched_root(tmp_path / "forge", llamalike)
    shallow = tmp_path / "shallow.git"
    full = tmp_path / "full.git"
    sh_git(tmp_path, "clone", "-q", "--bare", "--depth", "1", llamalike.url, str(shallow))
    sh_git(tmp_path, "clone", "-q", "--bare", "--mirror", str(llamalike.path), str(full))
    shutil.rmtree(llamalike.path)  # the upstream itself is unreachable: mirrors only
    manifest = root / "manifests" / "llama.cpp.toml"

    res = _forge(root, "fetch", "--mirror", str(shallow))
    assert res.code == 0, res
    assert res.json["build_number"] is None
    assert "build number" in res.stderr and "shallow" in res.stderr, res.stderr
    assert "build_number" not in manifest.read_text()  # never the shallow count

    res = _forge(root, "fetch", "--mirror", str(full))
    assert res.code == 0, res
    assert res.json["build_number"] == len(llamalike.commits)
    assert f"build_number = {len(llamalike.commits)}\n" in manifest.read_text()


def test_a_bump_records_the_new_pins_build_number(tmp_path: Path, llamalike: Upstream) -> None:
    """`bump` (no --dry-run) re-pins through the rebase: the new pin's number, not the old."""
    root = make_patched_root(tmp_path / "forge", llamalike)
    assert _forge(root, "fetch").code == 0
    old = _count(llamalike)
    for i in range(2):
        llamalike.commit({f"docs/bumped-{i}.md": f"bumped {i}\n"}, f"docs: bumped {i}")
    res = _forge(root, "bump", "--to", llamalike.head)
    assert res.code == 0, res
    text = (root / "manifests" / "llama.cpp.toml").read_text()
    assert f'commit = "{llamalike.head}"' in text, text
    assert f"build_number = {old + 2}\n" in text, text
    assert _forge(root, "status").json["upstream"]["build_number"] == old + 2


def test_subjects_are_what_upstream_installs_and_an_older_build_s_files_go(
    tmp_path: Path, llamalike: Upstream
) -> None:
    """Issue 44 point 7: with no recipe targets, the subjects are the targets upstream
    installs (the File API's install information) and the suite's programs, with their
    libraries; a host helper it builds but never installs (llama.cpp's llama-ui-embed) is
    not shipped. After a rebase moves the library's version, the older libllama.so.0.0.N
    is removed from the build tree, and said; every path printed is normalized."""
    root = make_patched_root(tmp_path / "forge", llamalike)
    first = _build(root, "--lane", "cpu", "--no-sign")
    assert first.code == 0, first
    lane = first.json["lanes"][0]
    names = sorted(a["name"] for a in lane["artifacts"])
    assert names == ["ggml", "ggml-base", "ggml-cpu", "llama", "llama-cli"], names
    built = root / ".dgr" / "build" / "cpu"
    helper = [p for p in built.rglob("llama-ui-embed") if p.is_file()]
    assert helper, "the helper was built (it is in the build tree, not in the report)"
    old = next(Path(a["path"]) for a in lane["artifacts"] if a["name"] == "llama")
    assert old.name == f"libllama.so.0.0.{_count(llamalike)}"

    for i in range(2):
        llamalike.commit({f"docs/later-{i}.md": f"later {i}\n"}, f"docs: later {i}")
    assert _forge(root, "rebase", "--onto", llamalike.head).code == 0
    second = _build(root, "--lane", "cpu", "--no-sign")
    assert second.code == 0, second
    new = next(
        Path(a["path"]) for a in second.json["lanes"][0]["artifacts"] if a["name"] == "llama"
    )
    assert new.name == f"libllama.so.0.0.{_count(llamalike)}" and new != old
    assert not old.exists(), "the older version is gone from the build tree"
    assert "removed .dgr/build/cpu/" in second.stderr and old.name in second.stderr, second.stderr
    versions = sorted(p.name for p in new.parent.glob("libllama.so.*"))
    assert versions == ["libllama.so.0", new.name], versions
    for line in (second.stdout + second.stderr).splitlines():
        assert "/../" not in line and not line.rstrip().endswith("/.."), line
