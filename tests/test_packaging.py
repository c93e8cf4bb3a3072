"""The distribution: sdist and wheel build offline, pass `twine check`, and say what they are;
the wheel is the whole tool (its demo runs from a fresh venv of it), the sdist builds the
wheel and carries what its tests read."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest
from support.wheelhouse import build_backend, copy_worktree, shared_wheelhouse, uninstall

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("dist")
    tree = copy_worktree(REPO, base / "tree")
    out = base / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(tree)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PIP_NO_INDEX": "1"},
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dgr-forge's runtime dependencies and its build backend (pip's build isolation) as
    wheels of this environment: what a fresh venv installs from, offline."""
    return shared_wheelhouse(tmp_path_factory, build_backend(REPO))


def test_twine_check_passes(dists: tuple[Path, Path]) -> None:
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dists)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2, checked.stdout


def test_metadata_license_urls_classifiers_and_no_gguf_at_run_time(
    dists: tuple[Path, Path],
) -> None:
    _, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(info).decode())
        license_text = zf.read(info.replace("METADATA", "licenses/LICENSE")).decode()
    assert meta["License-Expression"] == "MIT" and meta["License-File"] == "LICENSE"
    assert license_text.startswith("MIT License")
    classifiers = meta.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Typing :: Typed" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # the expression says it
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    assert "llama.cpp" in (meta["Keywords"] or "")
    requires = meta.get_all("Requires-Dist") or []
    runtime = [r for r in requires if "extra ==" not in r]
    assert not any(r.startswith(("gguf", "numpy")) for r in runtime), runtime
    assert any(r.startswith("gguf") and re.search(r"extra == [\"']test[\"']", r) for r in requires)
    # what the package reads at run time ships in it
    assert "dgr_forge/py.typed" in names
    assert {"dgr_forge/ci/templates/github-actions.yml.j2",
            "dgr_forge/ci/templates/actions.toml"} <= set(names)  # fmt: skip
    demo = REPO / "src" / "dgr_forge" / "demo"  # the demo upstream's and worker's sources
    texts = {f"dgr_forge/{p.relative_to(demo.parent)}" for p in demo.rglob("*") if p.is_file()}
    assert {n for n in texts if "__pycache__" not in n} <= set(names)
    assert "dgr_forge/demo/upstream/tools/perplexity/perplexity.cpp" in names


def _product_files() -> dict[str, bytes]:
    """recipes/, toolchains/ and cmake/ as the repository holds them (one copy each)."""
    return {
        str(path.relative_to(REPO)): path.read_bytes()
        for name in ("recipes", "toolchains", "cmake")
        for path in sorted((REPO / name).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_the_wheel_carries_the_forges_own_files_as_package_data(dists: tuple[Path, Path]) -> None:
    """What `demo` copies into a forge root ships in the wheel, byte for byte the
    repository's one copy (built from the sdist: `python -m build` makes the wheel from it)."""
    _, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        shipped = {
            n.removeprefix("dgr_forge/product/"): zf.read(n)
            for n in zf.namelist()
            if n.startswith("dgr_forge/product/") and not n.endswith("/")
        }
    assert shipped == _product_files()
    assert {"recipes/cpu.toml", "toolchains/probes.toml", "cmake/DgrUpstream.cmake"} <= set(shipped)


def test_the_repository_keeps_one_copy_of_the_forges_files() -> None:
    """No checked-in duplicate under src/: the wheel's copies are made when it is built."""
    assert not (REPO / "src" / "dgr_forge" / "product").exists()
    names = {p.name for p in (REPO / "src").rglob("*") if p.is_file()}
    assert not {"cpu.toml", "probes.toml", "DgrUpstream.cmake"} & names


def test_sdist_builds_the_wheel_and_carries_what_its_tests_read(dists: tuple[Path, Path]) -> None:
    """The sdist is the repository's source: the tests with their data, the docs and JSON
    schemas, constraints.txt and the forge root's own files (the build maps three of them
    into the wheel, which `python -m build` made from this sdist)."""
    sdist, _ = dists
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    expected = {
        "LICENSE", "pyproject.toml", "README.md", "SECURITY.md", "constraints.txt",
        "src/dgr_forge/__init__.py", "tests/conftest.py", "tests/support/roots.py",
        "tests/data/models/tiny-test.toml", "docs/json-schema/build.json", "docs/cli.md",
        "manifests/llama.cpp.toml", "recipes/cpu.toml", "toolchains/probes.toml",
        "cmake/DgrUpstream.cmake", "src/dgr_forge/demo/upstream/CMakeLists.txt",
    }  # fmt: skip
    assert expected <= names, sorted(expected - names)
    tracked = subprocess.run(
        ["git", "ls-files", "tests", "docs", "recipes", "toolchains", "cmake"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert not set(tracked) - names, sorted(set(tracked) - names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_src_never_imports_gguf_or_numpy() -> None:
    """gguf (and numpy with it) is a test dependency only: src/ reads GGUF headers itself."""
    for path in (REPO / "src").rglob("*.py"):
        text = path.read_text()
        if text.isascii() and "gguf" not in text and "numpy" not in text:
            continue  # no import can name them (only a non-ASCII name could NFKC to them)
        tree = ast.parse(text, str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in ("gguf", "numpy"), f"{path}: imports {name}"


@dataclass
class Venv:
    """A fresh venv with the README's main line installed in it (offline)."""

    path: Path
    env: dict[str, str]  # no DGR_/PYTHON/PIP_ settings of this run; pip offline; PATH first
    installed: subprocess.CompletedProcess[str]

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def pip(self, *args: str) -> subprocess.CompletedProcess[str]:
        """This environment's pip on the venv (--python): the same pip, none installed there."""
        return subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(self.python), "--quiet", *args],
            capture_output=True, text=True, timeout=300, env=self.env,
        )  # fmt: skip


@pytest.fixture(scope="module")
def readme_venv(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Venv:
    """The README's first line, as written, in a fresh venv of a clean copy of this tree
    (offline: pip finds this environment's wheels). One venv for the module: installing the
    dependencies is most of its cost."""
    import shlex

    readme = (REPO / "README.md").read_text()
    main = next(x for x in readme.splitlines() if x.rstrip().endswith("&& dgr-forge build"))
    install = next(part.strip() for part in main.split("&&") if part.strip().startswith("pip "))
    assert install == "pip install -c constraints.txt -e .", install
    base = tmp_path_factory.mktemp("readme")
    tree = copy_worktree(REPO, base / "clone")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DGR_", "PYTHON", "PIP_"))}
    # PIP_COMPILE=0: what the venv's programs import compiles when they first run (this
    # env has no PYTHONDONTWRITEBYTECODE), not every file of every wheel at install
    env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse), PIP_COMPILE="0",
               PIP_DISABLE_PIP_VERSION_CHECK="1", HOME=str(base / "home"))  # fmt: skip
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    made = Venv(venv, env, subprocess.CompletedProcess([], 0))
    args = shlex.split(install)[2:]  # after `pip install`
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(made.python), "--quiet", "install", *args],
        cwd=tree, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    made.installed = done
    return made


@pytest.mark.slow
def test_the_readmes_main_line_installs_the_tool_without_the_test_extra(
    readme_venv: Venv,
) -> None:
    """The README's first line installs the tool and its runtime dependencies, none of the
    test extra's packages. (Its `dgr-forge build` needs the upstream: the demo test below
    runs the tool's whole loop offline.)"""
    import re

    done = readme_venv.installed
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    version = subprocess.run(
        ["dgr-forge", "--version"], cwd=readme_venv.path.parent, capture_output=True,
        text=True, env=readme_venv.env, timeout=60,
    )  # fmt: skip
    assert version.returncode == 0 and re.search(r"\d+\.\d+", version.stdout + version.stderr)
    # what `pip list` lists: the distributions in the venv's site-packages (read here, not
    # by a pip process: ~0.6 CPU-s)
    from importlib import metadata

    (site,) = readme_venv.path.glob("lib/python*/site-packages")
    names = {
        re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower()
        for d in metadata.distributions(path=[str(site)])
    }
    assert {"dgr-forge", "cmake", "ninja", "typer"} <= names, names
    assert not names & {"pytest", "mypy", "ruff", "zizmor", "gguf", "numpy", "hypothesis"}


@pytest.mark.slow
def test_the_demo_runs_from_the_wheel_installed_in_a_venv(
    dists: tuple[Path, Path], readme_venv: Venv, tmp_path: Path
) -> None:
    """`pip install dgr_forge-*.whl` (offline; its dependencies, as its metadata names them,
    already there), then `dgr-forge demo DIR` outside any checkout: the whole tour, from
    the wheel's files only."""
    _, wheel = dists
    assert readme_venv.installed.returncode == 0, readme_venv.installed.stderr[-3000:]
    uninstall(readme_venv.path, "dgr_forge")  # the README's editable one
    installed = readme_venv.pip("install", "--no-index", str(wheel))
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    py, env = readme_venv.python, readme_venv.env
    tool = readme_venv.path / "bin" / "dgr-forge"
    where = subprocess.run(
        [str(py), "-P", "-c", "import dgr_forge; print(dgr_forge.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=env,
    ).stdout  # fmt: skip
    assert str(readme_venv.path) in where and str(REPO) not in where and "clone" not in where
    demo = tmp_path / "demo"
    ran = subprocess.run(
        [str(tool), "--json", "demo", str(demo)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    import json

    steps = json.loads(ran.stdout)["steps"]
    assert [s["step"] for s in steps][:3] == ["fetch", "patch", "build"], steps
    assert all(s["exit_code"] in (0, 3) for s in steps), steps
    # the demo root holds the wheel's files, which are the repository's
    for rel, data in _product_files().items():
        if rel.startswith(("cmake/", "toolchains/")) or rel == "recipes/cpu.toml":
            assert (demo / rel).read_bytes() == data, rel
