"""Backend lane recipes: `recipes/<lane>.toml`, one declarative file per lane.

A recipe says what to pass to CMake (upstream's own option names), what the host must
have, where it can build, and how CI should run it. `build`, `doctor`, `lanes`, `check`
and `ci` all read recipes through `load_all`, so a new recipe file is a new lane
everywhere with no code change.

    schema = 1
    [lane]
    backend = "CUDA"                       # human name of the backend
    description = "NVIDIA GPUs via CUDA"
    host_os = ["linux", "windows"]         # platform.system().lower() values
    toolchain = "gcc"                      # toolchains/<name>.cmake (optional)
    [cmake]
    options = { GGML_CUDA = "ON", GGML_NATIVE = "OFF" }
    targets = []                           # default targets; empty = CMake's default
    [requires]
    tools = ["nvcc"]                       # probe names from toolchains/probes.toml
    libraries = ["cublas"]
    [ci]
    runs_on = ["ubuntu-24.04"]             # runner labels
    container = "nvidia/cuda:12.6.2-devel-ubuntu24.04"   # optional
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import sha256_bytes
from dgr_forge.core.tomlcheck import Checker

SCHEMA = 1
LANE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
CMAKE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEYS: dict[str, set[str]] = {
    "": {"schema", "lane", "cmake", "requires", "ci"},
    "lane": {"backend", "description", "host_os", "toolchain"},
    "cmake": {"options", "targets"},
    "requires": {"tools", "libraries"},
    "ci": {"runs_on", "container"},
}


@dataclass(frozen=True)
class Recipe:
    name: str  # the lane name: the file's stem
    path: Path
    sha256: str  # of the file's bytes: reports and certifications bind to it
    backend: str
    description: str
    host_os: tuple[str, ...]
    toolchain: str | None
    cmake_options: dict[str, str] = field(hash=False)
    targets: tuple[str, ...]
    tools: tuple[str, ...]
    libraries: tuple[str, ...]
    runs_on: tuple[str, ...]
    container: str | None

    def cmake_args(self) -> list[str]:
        """`-DNAME=VALUE` for each option, in a stable (sorted) order."""
        return [f"-D{k}={v}" for k, v in sorted(self.cmake_options.items())]


def _fail(shown: str, key: str, problem: str, fix: str) -> BadInput:
    return Checker(shown).fail(key, problem, fix)


def load(path: Path, shown: str | None = None) -> Recipe:
    shown = shown or str(path)
    c = Checker(shown)
    name = path.stem
    if not LANE_NAME.fullmatch(name):
        raise c.fail("(file name)", f"{name!r} is not a lane name", "use [a-z0-9_-] only")
    raw, data = c.load(path, what="recipe", hint="check the path")

    c.known_keys(data, _KEYS[""], "")
    lane, cmake, requires, ci = (
        c.section(data, s, _KEYS[s]) for s in ("lane", "cmake", "requires", "ci")
    )
    c.schema(data, SCHEMA)

    backend = c.string(lane, "backend", "lane", nonempty=True, fix='set backend = "CPU"')
    assert backend is not None
    description = c.string(lane, "description", "lane", required=False) or ""
    toolchain = c.string(lane, "toolchain", "lane", required=False)
    container = c.string(ci, "container", "ci", required=False)

    options_raw = cmake.get("options", {})
    if not isinstance(options_raw, dict):
        raise c.fail("cmake.options", "must be a table", 'write options = { GGML_CUDA = "ON" }')
    options: dict[str, str] = {}
    for key, value in options_raw.items():
        if not CMAKE_NAME.fullmatch(key):
            raise c.fail(f"cmake.options.{key}", "not a CMake variable name", "fix the name")
        if isinstance(value, bool):
            value = "ON" if value else "OFF"
        if type(value) not in (str, int):  # exact: a float is not an option value
            raise c.fail(
                f"cmake.options.{key}",
                "must be a string, integer or boolean",
                'e.g. GGML_CUDA = "ON"',
            )
        options[key] = str(value)

    return Recipe(
        name=name,
        path=path,
        sha256=sha256_bytes(raw),
        backend=backend,
        description=description,
        host_os=c.strings(lane, "host_os", "lane", ["linux", "darwin", "windows"]),
        toolchain=toolchain,
        cmake_options=options,
        targets=c.strings(cmake, "targets", "cmake"),
        tools=c.strings(requires, "tools", "requires"),
        libraries=c.strings(requires, "libraries", "requires"),
        runs_on=c.strings(ci, "runs_on", "ci", ["ubuntu-latest"]),
        container=container,
    )


def load_all(recipes_dir: Path, root: Path | None = None) -> dict[str, Recipe]:
    """Every recipe in the directory, by lane name, sorted by name."""
    if not recipes_dir.is_dir():
        raise BadInput(f"{recipes_dir}: no recipes directory", hint="create recipes/<lane>.toml")
    recipes: dict[str, Recipe] = {}
    for path in sorted(recipes_dir.glob("*.toml")):
        shown = str(path.relative_to(root)) if root and path.is_relative_to(root) else str(path)
        recipes[path.stem] = load(path, shown)
    return recipes


def select(recipes: dict[str, Recipe], lanes: list[str]) -> list[Recipe]:
    """The recipes for the named lanes (all when none named); an unknown lane is exit 2."""
    if not lanes:
        return list(recipes.values())
    unknown = [lane for lane in lanes if lane not in recipes]
    if unknown:
        raise BadInput(
            f"unknown lane {unknown[0]!r}",
            hint="known lanes: " + ", ".join(recipes) + " (one recipes/<lane>.toml each)",
            details={"lane": unknown[0]},
        )
    return [recipes[lane] for lane in lanes]
