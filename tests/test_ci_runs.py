"""The rendered CI runs: a pull request's jobs, step by step, in a clean clone.

The forge root is this repository itself (its tracked files as they are now, pinning the
test upstream with a one-patch series and the cpu lane): the GitHub `check` job and the
`cpu` lane job, and the GitLab `lane:cpu` job, run as their runners would
(`support.actions`). Nothing reaches the network: pip installs from wheels made from this
test environment (`PIP_NO_INDEX`, `PIP_FIND_LINKS`), the Actions cache is a loopback
service that misses, and the runner image's `apt-get` only confirms packages the image
holds. Everything else is the rendered files, as rendered: the install step builds and
installs the checked-out tree under constraints.txt, then the jobs use that install.

One virtual environment serves every job of both providers (the install step's venv lives
under the runner's temp directory, shared for the session): the first job installs
everything, the later ones re-run the same step against it.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.actions import Runner, cache_service, load_yaml, run_github_job, run_gitlab_job
from support.build import make_patched_root
from support.cli import run_forge
from support.git import Upstream, sh_git
from support.roots import canonicalize
from support.wheelhouse import build_backend, copy_worktree, shared_wheelhouse, uninstall

REPO = Path(__file__).resolve().parent.parent
GITHUB = ".github/workflows/dgr-forge.yml"
GITLAB = ".gitlab-ci.yml"

pytestmark = pytest.mark.slow

APT_GET = textwrap.dedent(
    """\
    #!/bin/sh
    # The runner image's package manager, offline: `update` is a no-op and a package
    # "installs" only when the image already has what it provides.
    echo "$*" >> "$(dirname "$0")/apt.log"
    [ "$1" = update ] && exit 0
    for arg; do
      case "$arg" in -*|install) continue ;; esac
      case "$arg" in
        build-essential) needs="gcc g++ make" ;;
        ccache) needs=ccache ;;
        git) needs=git ;;
        ca-certificates) needs= ;;
        python3|python3-venv) needs=python3 ;;
        *) echo "E: Unable to locate package $arg" >&2; exit 100 ;;
      esac
      for tool in $needs; do
        command -v "$tool" >/dev/null || { echo "E: $arg: not in this image" >&2; exit 100; }
      done
    done
    """
)


@dataclass
class Machine:
    runner: Runner
    temp: Path  # RUNNER_TEMP and TMPDIR: the install step's venv lives here
    tools: Path
    cache_requests: list[str]


@pytest.fixture(scope="session")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    """A runner with no network: wheels of this environment, the interpreter the tests run
    on as setup-python's, an image with git, compilers and ccache."""
    base = tmp_path_factory.mktemp("ci-machine")
    wheels = shared_wheelhouse(tmp_path_factory, build_backend(REPO))
    python_bin = base / "setup-python"
    python_bin.mkdir()
    interpreter = Path(getattr(sys, "_base_executable", sys.executable))
    # setup-python's "3.12" is the interpreter these tests run on (the wheels are its); the
    # names the install step probes all lead to it
    for name in ("python", "python3", "python3.11", "python3.12", "python3.13"):
        (python_bin / name).symlink_to(interpreter)
    tools = base / "image"
    tools.mkdir()
    (tools / "apt-get").write_text(APT_GET)
    (tools / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    venv_bin = Path(sys.executable).parent
    ccache = shutil.which("ccache") or str(venv_bin / "ccache")
    (tools / "ccache").symlink_to(ccache)
    for tool in (tools / "apt-get", tools / "sudo"):
        tool.chmod(0o755)
    sccache = Path(shutil.which("sccache") or venv_bin / "sccache")
    temp = base / "runner-temp"
    temp.mkdir()
    home = base / "home"
    home.mkdir()
    env = {
        "PATH": os.pathsep.join([str(tools), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": str(temp),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        "PIP_CONFIG_FILE": os.devnull,  # this machine's pip settings are not the runner's
        # PIP_COMPILE=0: the venv's modules compile when a job first imports them (no
        # PYTHONDONTWRITEBYTECODE here): pip compiling every file of every wheel was
        # ~6 s of CPU a suite, for modules the jobs never import
        "PIP_COMPILE": "0",  # (pip reads PIP_NO_COMPILE=1 as compile=1)
    }
    with cache_service() as (url, requests):
        yield Machine(Runner(env, python_bin, sccache, url), temp, tools, requests)


@pytest.fixture(scope="module")
def tool_repository(tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream) -> Path:
    """This repository's tracked files as they are now, pinning the test upstream (one
    patch), with the cpu lane only and both workflows rendered and committed."""
    base = tmp_path_factory.mktemp("tool")
    repo = copy_worktree(REPO, base / "dgr-forge")
    patched = make_patched_root(base / "patched", _upstream_template)
    shutil.copy(patched / "manifests" / "llama.cpp.toml", repo / "manifests" / "llama.cpp.toml")
    shutil.rmtree(repo / "patches" / "llama.cpp")
    shutil.copytree(patched / "patches" / "llama.cpp", repo / "patches" / "llama.cpp")
    for recipe in (repo / "recipes").glob("*.toml"):
        if recipe.name != "cpu.toml":
            recipe.unlink()
    canonicalize(repo)  # the series as `export` writes it: what `check` holds it to
    shutil.rmtree(repo / ".dgr")
    for provider, path in (("github", GITHUB), ("gitlab", GITLAB)):
        out = run_forge("--root", str(repo), "ci", "render", "--provider", provider,
                        "--out", str(repo / path), "--json")  # fmt: skip
        assert out.code == 0, out
        assert out.json["install"] == "checkout" and out.json["written"] == []
    sh_git(repo, "init", "-q", "-b", "main")
    sh_git(repo, "add", "-A")
    sh_git(repo, "commit", "-q", "-m", "dgr-forge at the test pin")
    return repo


def clone(repo: Path, dest: Path) -> Path:
    sh_git(dest.parent, "clone", "-q", str(repo), str(dest))
    return dest


PULL_REQUEST = {
    "event_name": "pull_request",
    "ref": "refs/pull/7/merge",
    "repository": "example/dgr-forge",
    "workflow_ref": f"example/dgr-forge/{GITHUB}@refs/pull/7/merge",
    "event": {"repository": {"default_branch": "main"}},
}


def lane_entry(workflow: dict[str, Any], lane: str) -> dict[str, Any]:
    include = workflow["jobs"]["lane"]["strategy"]["matrix"]["include"]
    return next(entry for entry in include if entry["lane"] == lane)


def installed_tool(job_env: dict[str, str], temp: Path) -> Path:
    """The dgr-forge the job's later steps ran: the install step's venv, not this one."""
    found = shutil.which("dgr-forge", path=job_env["PATH"])
    assert found and Path(found) == temp / "dgr-venv" / "bin" / "dgr-forge", found
    return Path(found)


def installed_from(temp: Path) -> dict[str, Any]:
    """pip's record of where the venv's dgr-forge came from (direct_url.json), read from the
    venv's site-packages here (a venv Python process for it was ~0.1 CPU-s a call)."""
    from importlib import metadata

    (site,) = (temp / "dgr-venv").glob("lib/python*/site-packages")
    (dist,) = [
        d for d in metadata.distributions(path=[str(site)]) if d.metadata["Name"] == "dgr-forge"
    ]
    record: dict[str, Any] = json.loads(dist.read_text("direct_url.json") or "null")
    return record


def test_github_check_and_cpu_lane_jobs_of_a_pull_request_run(
    tool_repository: Path, machine: Machine, tmp_path: Path
) -> None:
    workflow = load_yaml((tool_repository / GITHUB).read_text())

    check = run_github_job(workflow, "check", clone(tool_repository, tmp_path / "check"),
                           machine.runner, PULL_REQUEST, temp=machine.temp)  # fmt: skip
    assert check.ok, check.failure()
    ran = [s.name for s in check.steps if s.kind == "run"]
    assert ran == [
        "Install dgr-forge (the checked-out tree, its toolchain pinned by constraints.txt)",
        "This workflow is what recipes/ renders to",
        "dgr-forge check",
    ]
    assert "up to date" in check.steps[-2].stdout
    venv_python = machine.temp / "dgr-venv" / "bin" / "python"
    installed_tool(check.env, machine.temp)
    # the checked-out tree, installed (not linked to this checkout), with the pinned toolchain
    where = subprocess.run(
        [str(venv_python), "-c", "import dgr_forge, cmake, ninja; print(dgr_forge.__file__)"],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    ).stdout  # fmt: skip
    assert str(machine.temp / "dgr-venv") in where and str(REPO) not in where
    source = installed_from(machine.temp)  # this job's own clone, as a wheel (not editable)
    assert source["url"] == (tmp_path / "check").as_uri(), source
    assert not source.get("dir_info", {}).get("editable"), source

    lane = run_github_job(workflow, "lane", clone(tool_repository, tmp_path / "lane"),
                          machine.runner, PULL_REQUEST, lane_entry(workflow, "cpu"),
                          temp=machine.temp)  # fmt: skip
    assert lane.ok, lane.failure()
    assert [s.kind for s in lane.steps].count("skipped") == 0
    build = json.loads((tmp_path / "lane" / "dgr-build-cpu.json").read_text())
    assert build["ok"] is True and build["command"] == "build", build
    (result,) = build["lanes"]
    assert result["cache"]["tool"] == "sccache" and result["cache"]["mode"] == "ro", result
    pins = dict(
        line.split("==")
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    envelope = json.loads((tmp_path / "lane" / result["report"]).read_text())
    statement = base64.b64decode(envelope["payload"]).decode()  # unsigned: a pull request
    assert envelope["signatures"] == []
    assert f'"{pins["cmake"]}"' in statement and f'"{pins["ninja"]}"' in statement
    uploads = [s for s in lane.steps if s.uploaded]
    assert {p.name for s in uploads for p in s.uploaded} >= {"reports", "dgr-build-cpu.json"}
    # the pull request read the cache (misses) and wrote nothing to it
    assert any("artifactcache/cache?keys=" in r for r in machine.cache_requests)
    assert all("?keys=" in r for r in machine.cache_requests), machine.cache_requests
    apt = (machine.tools / "apt.log").read_text()
    assert "build-essential" in apt  # the recipe's ci.packages, asked of the image


def test_gitlab_cpu_lane_job_of_a_merge_request_runs(
    tool_repository: Path, machine: Machine, tmp_path: Path
) -> None:
    pipeline = load_yaml((tool_repository / GITLAB).read_text())
    job = pipeline["lane:cpu"]
    assert job["rules"][0]["if"] == '$CI_PIPELINE_SOURCE == "schedule"'  # not a merge request
    workdir = clone(tool_repository, tmp_path / "lane")
    result = run_gitlab_job(
        pipeline,
        "lane:cpu",
        workdir,
        machine.runner,
        {"CI_PIPELINE_SOURCE": "merge_request_event", "CI_CONFIG_PATH": GITLAB},
    )
    assert result.ok, result.failure()
    # the job's install step put its own clone into the venv its later lines ran from
    assert installed_from(machine.temp)["url"] == workdir.as_uri()
    # ... and the image has no other dgr-forge the script could have run
    assert shutil.which("dgr-forge", path=machine.runner.base_env["PATH"]) is None
    build = json.loads((workdir / "dgr-build-cpu.json").read_text())
    assert build["ok"] is True, build
    (lane,) = build["lanes"]
    assert lane["cache"]["tool"] == "ccache" and lane["cache"]["mode"] == "ro", lane
    assert (workdir / ".dgr" / "reports").is_dir() and (workdir / ".ccache").is_dir()


def test_another_forge_root_installs_dgr_forge_pinned_by_commit(
    tool_repository: Path, machine: Machine, _upstream_template: Upstream, tmp_path: Path
) -> None:
    """A forge root that is not the tool's repository: its check job installs dgr-forge
    from an exact commit of the tool's repository (here a local clone's URL), under the
    ci/constraints.txt `ci render --write-pins` wrote from this environment, and runs."""
    root = make_patched_root(tmp_path / "forge", _upstream_template)
    for recipe in (root / "recipes").glob("*.toml"):
        if recipe.name != "cpu.toml":
            recipe.unlink()
    canonicalize(root)
    shutil.rmtree(root / ".dgr")
    commit = sh_git(tool_repository, "rev-parse", "HEAD")
    (root / "ci").mkdir()
    # file://localhost/...: pip 23 wants a host in a git+file URL
    pin = f"dgr-forge @ git+file://localhost{tool_repository}@{commit}"
    (root / "ci" / "requirements.txt").write_text(pin + "\n")
    out = run_forge(
        "--root", str(root), "ci", "render", "--write-pins", "--out", str(root / GITHUB), "--json"
    )
    assert out.code == 0 and out.json["written"] == ["ci/constraints.txt"], out
    assert out.json["install_args"] == "-c ci/constraints.txt -r ci/requirements.txt"
    sh_git(root, "init", "-q", "-b", "main")
    sh_git(root, "add", "-A")
    sh_git(root, "commit", "-q", "-m", "a forge root of its own")

    # the shared venv keeps the dependencies earlier jobs installed (what a fresh runner
    # downloads again), not dgr-forge: pip would take the same version as satisfied
    venv_python = machine.temp / "dgr-venv" / "bin" / "python"
    if venv_python.exists():
        uninstall(machine.temp / "dgr-venv", "dgr_forge")
    workflow = load_yaml((root / GITHUB).read_text())
    check = run_github_job(workflow, "check", clone(root, tmp_path / "check"), machine.runner,
                           PULL_REQUEST, temp=machine.temp)  # fmt: skip
    assert check.ok, check.failure()
    installed_tool(check.env, machine.temp)
    assert installed_from(machine.temp)["vcs_info"]["commit_id"] == commit
