"""The distribution: sdist and wheel build offline, pass `twine check`, and say what they are."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from support.wheelhouse import copy_worktree

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
    assert any(r.startswith("gguf") and 'extra == "test"' in r for r in requires)
    # what the package reads at run time ships in it
    assert "dgr_forge/py.typed" in names
    assert {"dgr_forge/lanes/templates/github-actions.yml.j2",
            "dgr_forge/lanes/templates/actions.toml"} <= set(names)  # fmt: skip


def test_sdist_carries_the_license_and_no_tests_it_could_not_run(dists: tuple[Path, Path]) -> None:
    """The tests need the whole repository (recipes/, toolchains/, the support builders):
    the sdist carries none rather than some that cannot run."""
    sdist, _ = dists
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    assert {"LICENSE", "pyproject.toml", "README.md", "src/dgr_forge/__init__.py"} <= names
    assert not [n for n in names if n.startswith(("tests/", "bench/"))], sorted(names)


def test_src_never_imports_gguf_or_numpy() -> None:
    """gguf (and numpy with it) is a test dependency only: src/ reads GGUF headers itself."""
    for path in (REPO / "src").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in ("gguf", "numpy"), f"{path}: imports {name}"
