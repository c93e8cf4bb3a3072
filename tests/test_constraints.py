"""The toolchain is pinned (issue 13 #7): the cmake and ninja wheels and every runtime
dependency have an exact version in constraints.txt, which CI and the README install use."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].strip().lower().replace("_", "-")


def test_constraints_pin_toolchain_and_runtime_deps() -> None:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version and re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), line
            pins[_name(name)] = version
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for req in project["dependencies"]:
        assert _name(req) in pins, f"{req} is not pinned in constraints.txt"
    # the test extra too (CI installs it under the same file), and the build backend the
    # rendered CI and the packaging tests build this tree with
    for req in project["optional-dependencies"]["test"]:
        assert _name(req) in pins, f"{req} (test extra) is not pinned in constraints.txt"
    backend = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    assert all(_name(req) in pins for req in backend), backend
    assert "cmake" in pins and "ninja" in pins
    # fragile dependencies carry an upper bound in pyproject too
    bounded = {_name(r): r for r in project["dependencies"]}
    for name in ("tomlkit", "typer", "cmake", "ninja"):
        assert "<" in bounded[name], bounded[name]


def test_ci_and_readme_install_with_the_constraints() -> None:
    line = re.compile(r"pip install (--quiet )?-c constraints\.txt -e '\.\[test\]'")
    assert line.search((REPO / ".ci" / "run").read_text())
    readme = (REPO / "README.md").read_text()
    assert line.search(readme)
    # the main job installs the tool alone: no test extra before `dgr-forge build`
    main = next(x for x in readme.splitlines() if x.rstrip().endswith("&& dgr-forge build"))
    assert "pip install -c constraints.txt -e . &&" in main and "[test]" not in main, main
