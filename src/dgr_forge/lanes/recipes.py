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
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import sha256_bytes

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
    return BadInput(f"{shown}: {key}: {problem}", hint=fix, details={"file": shown, "key": key})


def _strings(shown: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(
            shown, key, "must be an array of strings", f'write {key.split(".")[-1]} = ["..."]'
        )
    return tuple(value)


def load(path: Path, shown: str | None = None) -> Recipe:
    shown = shown or str(path)
    name = path.stem
    if not LANE_NAME.fullmatch(name):
        raise _fail(shown, "(file name)", f"{name!r} is not a lane name", "use [a-z0-9_-] only")
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except OSError as err:
        raise _fail(shown, "(file)", f"cannot read: {err.strerror}", "check the path") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise _fail(
            shown, "(syntax)", f"invalid TOML: {err}", "fix the TOML at that line"
        ) from None

    tables: dict[str, dict[str, Any]] = {"": data}
    for section in ("lane", "cmake", "requires", "ci"):
        value = data.get(section, {})
        if not isinstance(value, dict):
            raise _fail(shown, section, "must be a table", f"write [{section}]")
        tables[section] = value
    for section, allowed in _KEYS.items():
        unknown = sorted(set(tables[section]) - allowed)
        if unknown:
            key = f"{section}.{unknown[0]}" if section else unknown[0]
            raise _fail(shown, key, "unknown key", "allowed: " + ", ".join(sorted(allowed)))
    if data.get("schema") != SCHEMA:
        raise _fail(
            shown, "schema", f"expected {SCHEMA}, got {data.get('schema')!r}", "set schema = 1"
        )

    lane, cmake, requires, ci = (tables[s] for s in ("lane", "cmake", "requires", "ci"))
    backend = lane.get("backend")
    if not isinstance(backend, str) or not backend:
        raise _fail(shown, "lane.backend", "missing or not a string", 'set backend = "CPU"')
    description = lane.get("description", "")
    toolchain = lane.get("toolchain")
    container = ci.get("container")
    for key, value in (
        ("lane.description", description),
        ("lane.toolchain", toolchain),
        ("ci.container", container),
    ):
        if value is not None and not isinstance(value, str):
            raise _fail(shown, key, "must be a string", "quote the value")

    options_raw = cmake.get("options", {})
    if not isinstance(options_raw, dict):
        raise _fail(
            shown, "cmake.options", "must be a table", 'write options = { GGML_CUDA = "ON" }'
        )
    options: dict[str, str] = {}
    for key, value in options_raw.items():
        if not CMAKE_NAME.fullmatch(key):
            raise _fail(shown, f"cmake.options.{key}", "not a CMake variable name", "fix the name")
        if isinstance(value, bool):
            value = "ON" if value else "OFF"
        if not isinstance(value, str | int):
            raise _fail(
                shown,
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
        description=description or "",
        host_os=_strings(
            shown, "lane.host_os", lane.get("host_os", ["linux", "darwin", "windows"])
        ),
        toolchain=toolchain,
        cmake_options=options,
        targets=_strings(shown, "cmake.targets", cmake.get("targets", [])),
        tools=_strings(shown, "requires.tools", requires.get("tools", [])),
        libraries=_strings(shown, "requires.libraries", requires.get("libraries", [])),
        runs_on=_strings(shown, "ci.runs_on", ci.get("runs_on", ["ubuntu-latest"])),
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
