"""`dgr-forge ci matrix` / `ci render`: CI generated from recipes/, never written by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from forgetest import manifest_text, run_forge

from dgr_forge.core.fsutil import sha256_file
from dgr_forge.lanes import ci
from dgr_forge.upstream.manifest import load as load_manifest

PIN = "0123456789abcdef0123456789abcdef01234567"
OTHER_PIN = "89abcdef0123456789abcdef0123456789abcdef"
TEMPLATES = Path(ci.__file__).parent / "templates"

CPU = """\
schema = 1
[lane]
backend = "CPU"
[requires]
tools = ["cc", "cxx"]
"""
CUDA = """\
schema = 1
[lane]
backend = "CUDA"
host_os = ["linux"]
[cmake]
options = { GGML_CUDA = "ON" }
[requires]
tools = ["nvcc"]
libraries = ["cublas"]
[ci]
runs_on = ["ubuntu-24.04", "gpu"]
container = "nvidia/cuda:12.6.2-devel-ubuntu24.04"
"""
VULKAN = """\
schema = 1
[lane]
backend = "Vulkan"
[requires]
tools = ["glslc"]
libraries = ["vulkan"]
[ci]
runs_on = ["ubuntu-24.04"]
"""

EXPECTED_MATRIX = {
    "include": [
        {
            "lane": "cpu",
            "backend": "CPU",
            "runs_on": ["ubuntu-latest"],
            "tools": ["cc", "cxx"],
            "libraries": [],
        },
        {
            "lane": "cuda",
            "backend": "CUDA",
            "runs_on": ["ubuntu-24.04", "gpu"],
            "container": "nvidia/cuda:12.6.2-devel-ubuntu24.04",
            "tools": ["nvcc"],
            "libraries": ["cublas"],
        },
    ]
}


def write_root(path: Path, recipes: dict[str, str], pin: str = PIN) -> Path:
    """A forge root with a manifest and the given recipes (no upstream needed to render)."""
    (path / "manifests").mkdir(parents=True)
    (path / "patches" / "llama.cpp").mkdir(parents=True)
    (path / "recipes").mkdir()
    (path / "manifests" / "llama.cpp.toml").write_text(
        manifest_text("https://example.invalid/llama.cpp.git", pin)
    )
    for lane, text in recipes.items():
        (path / "recipes" / f"{lane}.toml").write_text(text)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return write_root(tmp_path / "forge", {"cpu": CPU, "cuda": CUDA})


def ci_matrix(root: Path) -> Any:
    result = run_forge("--root", str(root), "ci", "matrix")
    assert result.code == 0, result
    return result.json


def render(root: Path, provider: str = "github") -> str:
    result = run_forge("--root", str(root), "ci", "render", "--provider", provider)
    assert result.code == 0, result
    return result.stdout


def github_jobs(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    # YAML 1.1 reads the bare key `on` as True: accept either spelling
    assert "on" in data or True in data
    jobs = data["jobs"]
    assert isinstance(jobs, dict)
    return jobs


def walk(node: Any) -> list[Any]:
    """Every mapping and its keys, recursively (to look for forbidden keys anywhere)."""
    found: list[Any] = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found += walk(value)
    elif isinstance(node, list):
        for value in node:
            found += walk(value)
    return found


# ----------------------------------------------------------------------------- matrix


def test_matrix_is_the_recipes_with_container_only_where_named(root: Path) -> None:
    assert ci_matrix(root) == EXPECTED_MATRIX
    enveloped = run_forge("--root", str(root), "ci", "matrix", "--json")
    assert enveloped.code == 0, enveloped
    payload = enveloped.json
    assert payload["ok"] is True and payload["exit_code"] == 0
    assert payload["command"] == "ci matrix"
    assert payload["matrix"] == EXPECTED_MATRIX
    assert "2 lane(s): cpu, cuda" in enveloped.stderr


def test_matrix_refuses_a_bad_recipe_naming_file_and_key(root: Path) -> None:
    (root / "recipes" / "rocm.toml").write_text(CPU + "[ci]\nrunner = 'x'\n")
    result = run_forge("--root", str(root), "ci", "matrix", "--json")
    assert result.code == 2, result
    assert result.json["ok"] is False and result.json["exit_code"] == 2
    assert "recipes/rocm.toml" in result.stderr and "ci.runner" in result.stderr
    assert "unknown key" in result.json["error"]


# ----------------------------------------------------------------------------- github


def test_github_workflow_lane_matrix_equals_ci_matrix(root: Path) -> None:
    jobs = github_jobs(render(root))
    names = list(jobs)
    assert names[0] == "check", "the check job must come first"
    assert names == ["check", "lane"]
    check_steps = jobs["check"]["steps"]
    assert any(step.get("run") == "dgr-forge check" for step in check_steps)

    lane = jobs["lane"]
    assert lane["needs"] == "check"
    assert lane["strategy"]["matrix"] == ci_matrix(root)
    assert lane["strategy"]["matrix"]["include"] == EXPECTED_MATRIX["include"]
    assert lane["runs-on"] == "${{ matrix.runs_on }}"
    assert lane["container"] == "${{ matrix.container }}"

    steps = lane["steps"]
    build = next(step for step in steps if "dgr-forge build" in step.get("run", ""))
    assert "dgr-forge build --lane ${{ matrix.lane }} --json" in build["run"]
    # the signing key comes from the secret, and only the build step sees it
    assert build["env"] == {"DGR_SIGNING_KEY": "${{ secrets.DGR_SIGNING_KEY }}"}
    assert "DGR_SIGNING_KEY" not in lane.get("env", {})
    assert [s for s in steps if "DGR_SIGNING_KEY" in str(s)] == [build]
    # the build's exit code (2 when the lane's toolchain is missing) is the step's
    assert build["run"].rstrip().endswith('exit "$status"')
    uploads = [step for step in steps if step.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads and ".dgr/reports/" in uploads[0]["with"]["path"]
    assert uploads[0]["with"]["if-no-files-found"] == "error"
    # nothing may turn a failed lane into a pass
    for mapping in walk(jobs):
        assert "continue-on-error" not in mapping
        assert "|| true" not in str(mapping.get("run", ""))


def test_github_caches_are_keyed_by_pin_lane_and_series(root: Path) -> None:
    text = render(root)
    data = yaml.safe_load(text)
    pin = load_manifest(root / "manifests" / "llama.cpp.toml", root)
    assert data["env"]["DGR_PIN"] == PIN
    assert data["env"]["DGR_SERIES_DIGEST"] == pin.series_digest
    caches = {
        step["with"]["path"]: step["with"]
        for step in data["jobs"]["lane"]["steps"]
        if step.get("uses", "").startswith("actions/cache")
    }
    assert caches[".dgr/src"]["key"] == "dgr-src-${{ env.DGR_PIN }}"
    ccache_key = caches[".ccache"]["key"]
    for part in ("${{ matrix.lane }}", "${{ env.DGR_PIN }}", "${{ env.DGR_SERIES_DIGEST }}"):
        assert part in ccache_key

    # a new pin is a new key: the rendered bytes change exactly there
    other = write_root(root.parent / "other", {"cpu": CPU, "cuda": CUDA}, pin=OTHER_PIN)
    changed = [
        (a, b) for a, b in zip(text.splitlines(), render(other).splitlines(), strict=True) if a != b
    ]
    assert changed == [(f'  DGR_PIN: "{PIN}"', f'  DGR_PIN: "{OTHER_PIN}"')]


def test_adding_a_recipe_adds_a_job_without_touching_the_template(root: Path) -> None:
    template_hashes = {p.name: sha256_file(p) for p in TEMPLATES.iterdir()}
    before = github_jobs(render(root))["lane"]["strategy"]["matrix"]["include"]
    before_gitlab = yaml.safe_load(render(root, "gitlab"))

    (root / "recipes" / "vulkan.toml").write_text(VULKAN)
    after_matrix = ci_matrix(root)
    after = github_jobs(render(root))["lane"]["strategy"]["matrix"]["include"]
    after_gitlab = yaml.safe_load(render(root, "gitlab"))

    assert [e["lane"] for e in before] == ["cpu", "cuda"]
    assert [e["lane"] for e in after] == ["cpu", "cuda", "vulkan"]
    assert after == after_matrix["include"]
    assert after[2] == {
        "lane": "vulkan",
        "backend": "Vulkan",
        "runs_on": ["ubuntu-24.04"],
        "tools": ["glslc"],
        "libraries": ["vulkan"],
    }
    assert "lane:vulkan" not in before_gitlab and "lane:vulkan" in after_gitlab
    assert {p.name: sha256_file(p) for p in TEMPLATES.iterdir()} == template_hashes


def test_render_is_deterministic_and_out_writes_atomically(root: Path, tmp_path: Path) -> None:
    assert render(root) == render(root)
    out = tmp_path / "wf" / ".github" / "workflows" / "dgr-forge.yml"
    first = run_forge("--root", str(root), "ci", "render", "--out", str(out), "--json")
    assert first.code == 0, first
    assert first.stdout.count("{\n") == 1 and first.json["changed"] is True
    assert first.json["path"] == str(out) and first.json["lanes"] == ["cpu", "cuda"]
    assert out.read_text() == render(root)
    assert oct(out.stat().st_mode & 0o777) == oct(0o644)
    mtime = out.stat().st_mtime_ns
    again = run_forge("--root", str(root), "ci", "render", "--out", str(out), "--json")
    assert again.code == 0 and again.json["changed"] is False
    assert out.stat().st_mtime_ns == mtime
    assert sorted(os.listdir(out.parent)) == ["dgr-forge.yml"], "no temp files left behind"


def test_check_flags_a_stale_workflow_and_changes_nothing(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "dgr-forge.yml"
    assert run_forge("--root", str(root), "ci", "render", "--out", str(out)).code == 0
    ok = run_forge("--root", str(root), "ci", "render", "--check", str(out), "--json")
    assert ok.code == 0 and ok.json["current"] is True, ok

    (root / "recipes" / "vulkan.toml").write_text(VULKAN)
    committed = out.read_bytes()
    stale = run_forge("--root", str(root), "ci", "render", "--check", str(out), "--json")
    assert stale.code == 1, stale
    assert stale.json["ok"] is False and stale.json["current"] is False
    assert "stale" in stale.stderr
    assert f"dgr-forge ci render --provider github --out {out}" in stale.stderr
    assert out.read_bytes() == committed

    missing = run_forge("--root", str(root), "ci", "render", "--check", str(tmp_path / "no.yml"))
    assert missing.code == 2 and "no such workflow file" in missing.stderr, missing


# ----------------------------------------------------------------------------- gitlab


def test_gitlab_pipeline_has_the_same_shape(root: Path) -> None:
    data = yaml.safe_load(render(root, "gitlab"))
    assert data["stages"] == ["check", "build"]
    assert data["check"]["stage"] == "check" and data["check"]["needs"] == []
    assert "dgr-forge check" in data["check"]["script"]
    lanes = {name.split(":", 1)[1]: job for name, job in data.items() if name.startswith("lane:")}
    matrix = ci_matrix(root)["include"]
    assert list(lanes) == [entry["lane"] for entry in matrix]
    for entry in matrix:
        job = lanes[entry["lane"]]
        assert job["needs"] == ["check"] and job["stage"] == "build"
        assert job["tags"] == entry["runs_on"]
        assert job["variables"]["DGR_LANE"] == entry["lane"]
        assert job.get("image") == entry.get("container")
        assert job["allow_failure"] is False
        assert any('dgr-forge build --lane "$DGR_LANE" --json' in line for line in job["script"])
        keys = [cache["key"] for cache in job["cache"]]
        assert keys[0] == f"dgr-src-{PIN}"
        assert keys[1].startswith(f"ccache-{entry['lane']}-{PIN}-")
        assert ".dgr/reports/" in job["artifacts"]["paths"]
    assert data["variables"]["DGR_PIN"] == PIN


# ----------------------------------------------------------------------------- refusals


def test_refusals_exit_2_and_write_nothing(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "wf.yml"
    out.write_text("# hand-written, keep me\n")

    unknown = run_forge("--root", str(root), "ci", "render", "--provider", "jenkins", "--json")
    assert unknown.code == 2 and unknown.json["provider"] == "jenkins", unknown
    assert "--provider github or --provider gitlab" in unknown.stderr

    (root / "recipes" / "cuda.toml").write_text(CUDA.replace('container = "', "container = 7 #"))
    bad = run_forge("--root", str(root), "ci", "render", "--out", str(out), "--json")
    assert bad.code == 2, bad
    assert "recipes/cuda.toml" in bad.stderr and "ci.container" in bad.stderr
    assert out.read_text() == "# hand-written, keep me\n"

    empty = write_root(tmp_path / "empty", {})
    none = run_forge("--root", str(empty), "ci", "render", "--out", str(out))
    assert none.code == 2 and "no recipes" in none.stderr, none
    assert "recipes/<lane>.toml" in none.stderr
    assert out.read_text() == "# hand-written, keep me\n"

    both = run_forge("--root", str(empty), "ci", "render", "--out", str(out), "--check", str(out))
    assert both.code == 2 and "exclude each other" in both.stderr, both

    to_dir = run_forge("--root", str(root.parent / "other-root"), "ci", "matrix")
    assert to_dir.code == 2 and "not a forge root" in to_dir.stderr


def test_out_to_a_directory_is_refused(root: Path) -> None:
    result = run_forge("--root", str(root), "ci", "render", "--out", str(root / "recipes"))
    assert result.code == 2 and "is a directory" in result.stderr, result
    assert sorted(p.name for p in (root / "recipes").iterdir()) == ["cpu.toml", "cuda.toml"]


def test_templates_ship_with_the_package() -> None:
    names = sorted(p.name for p in TEMPLATES.iterdir())
    assert names == ["github-actions.yml.j2", "gitlab-ci.yml.j2"]
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    # setuptools ships package data only when pyproject lists it
    assert '"dgr_forge.lanes" = ["templates/*"]' in pyproject


# ----------------------------------------------------------------------------- the real thing

REPO = Path(__file__).resolve().parent.parent


def test_the_repositorys_own_recipes_render_for_both_providers(tmp_path: Path) -> None:
    """The committed recipes/ (every lane) render to workflows whose lanes are `ci matrix`."""
    matrix = ci_matrix(REPO)
    assert {e["lane"] for e in matrix["include"]} >= {"cpu", "cuda", "rocm", "vulkan", "metal"}
    github = render(REPO)
    assert github_jobs(github)["lane"]["strategy"]["matrix"] == matrix
    gitlab = yaml.safe_load(render(REPO, "gitlab"))
    assert [n[5:] for n in gitlab if n.startswith("lane:")] == [
        e["lane"] for e in matrix["include"]
    ]
    assert render(REPO) == github


def shell_step(script: str, lane: str, cwd: Path, tmp_path: Path) -> Any:
    """Run a workflow step's script as GitHub does (bash -eo pipefail) with `dgr-forge` on PATH."""
    import subprocess

    from forgetest import forge_cmd, forge_env

    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "dgr-forge"
    shim.write_text("#!/bin/sh\nexec " + " ".join(forge_cmd()) + ' "$@"\n')
    shim.chmod(0o755)
    env = forge_env({"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"})
    return subprocess.run(
        [
            "bash",
            "--noprofile",
            "--norc",
            "-eo",
            "pipefail",
            "-c",
            script.replace("${{ matrix.lane }}", lane),
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_lane_this_runner_cannot_build_fails_its_job(forge_root: Path, tmp_path: Path) -> None:
    """The rendered build step, run for real: a missing toolchain is exit 2, never a pass."""
    import platform
    import shutil

    lane = "cuda" if platform.system() == "Darwin" else "metal"  # never buildable here
    shutil.copytree(REPO / "toolchains", forge_root / "toolchains", dirs_exist_ok=True)
    shutil.copy(REPO / "recipes" / f"{lane}.toml", forge_root / "recipes")
    steps = github_jobs(render(forge_root))["lane"]["steps"]
    build = next(s for s in steps if "dgr-forge build" in s.get("run", ""))
    doctor = next(s for s in steps if s.get("run") == "dgr-forge doctor")

    probe = shell_step(doctor["run"], lane, forge_root, tmp_path)
    assert probe.returncode == 0, probe.stderr
    assert f"{lane} lane" in probe.stderr

    job = shell_step(build["run"], lane, forge_root, tmp_path)
    assert job.returncode == 2, (job.stdout, job.stderr)
    report = json.loads((forge_root / f"dgr-build-{lane}.json").read_text())
    assert report["ok"] is False and report["exit_code"] == 2 and report["command"] == "build"
    assert json.loads(job.stdout) == report  # the step prints the result into the log
    assert not (forge_root / ".dgr" / "build" / lane).exists(), "nothing half-built"


def test_shell_completion_script_and_completions(tmp_path: Path) -> None:
    script = run_forge("--show-completion", "bash")
    assert script.code == 0, script
    assert "_DGR_FORGE_COMPLETE=complete_bash" in script.stdout
    assert "complete -o default -F _dgr_forge_completion dgr-forge" in script.stdout
    offered = run_forge(
        env={
            "_DGR_FORGE_COMPLETE": "complete_bash",
            "COMP_WORDS": "dgr-forge ci ",
            "COMP_CWORD": "2",
        }
    )
    assert offered.code == 0, offered
    assert offered.stdout.split() == ["matrix", "render"]
