"""The probe file, `toolchains/probes.toml`: which tools and libraries a lane may ask
for, and how `doctor` looks for each, read once into typed probes and checked.

A probe runs only a fixed form (`--version`-like arguments, a `find_command` of a known
program), looks only under system prefixes or `$VAR/...` hints naming a toolchain
installation, and imports only the wheels named in `PYTHON_MODULES`: the data cannot
make the forge run or import anything else (tests/security/test_probes.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from msgspec import Struct

from dgr_forge.core.fsutil import sha256_bytes
from dgr_forge.core.structs import hash_without
from dgr_forge.core.tomlcheck import Checker, shown_value

SCHEMA = 1
_TOOL_KEYS = {
    "description",
    "executables",
    "python_dirs",
    "hints",
    "path_search",
    "find_command",
    "version_args",
    "version_regex",
    "host_os",
    "packages",
}
_LIB_KEYS = {
    "description",
    "headers",
    "names",
    "roots",
    "include_dirs",
    "lib_dirs",
    "packages",
}


class ToolProbe(Struct, frozen=True):
    name: str
    description: str
    executables: tuple[str, ...]
    python_dirs: tuple[str, ...]
    hints: tuple[str, ...]
    path_search: bool
    find_command: tuple[str, ...]
    version_args: tuple[str, ...]
    version_regex: str | None
    host_os: tuple[str, ...]
    packages: dict[str, tuple[str, ...]]

    def __hash__(self) -> int:  # a dict is unhashable
        return hash_without(self, frozenset({"packages"}))


class LibraryProbe(Struct, frozen=True):
    name: str
    description: str
    headers: tuple[str, ...]
    names: tuple[str, ...]
    roots: tuple[str, ...]
    include_dirs: tuple[str, ...]
    lib_dirs: tuple[str, ...]
    packages: dict[str, tuple[str, ...]]

    def __hash__(self) -> int:  # a dict is unhashable
        return hash_without(self, frozenset({"packages"}))


class Probes(Struct, frozen=True):
    path: Path
    sha256: str
    tools: dict[str, ToolProbe]
    libraries: dict[str, LibraryProbe]

    def __hash__(self) -> int:  # a dict is unhashable
        return hash_without(self, frozenset({"tools", "libraries"}))


def _table(c: Checker, key: str, value: Any, allowed: set[str]) -> dict[str, Any]:
    """A probe's table ([tools.X] or [libraries.X]) holding only the `allowed` keys."""
    table = c.table(value, key)
    c.known_keys(table, allowed, key)
    return table


def _packages(c: Checker, key: str, value: Any) -> dict[str, tuple[str, ...]]:
    table = c.table(value, key, fix='write packages = { debian = ["..."] }')
    return {system: c.strings(table, system, key) for system in table}


def load_probes(path: Path, shown: str | None = None) -> Probes:
    """Parse probes.toml strictly: unknown keys and wrong types are exit 2."""
    c = Checker(shown or str(path))
    raw, data = c.load(
        path, what="probes file", hint="restore toolchains/probes.toml from the repository"
    )
    c.known_keys(data, {"schema", "tools", "libraries"}, "")
    c.schema(data, SCHEMA)

    tools: dict[str, ToolProbe] = {}
    for name, t in c.table(data.get("tools", {}), "tools").items():
        key = f"tools.{name}"
        t = _table(c, key, t, _TOOL_KEYS)
        tools[name] = ToolProbe(
            name=name,
            description=c.string(t, "description", key, required=False) or name,
            executables=c.strings(t, "executables", key),
            python_dirs=c.strings(t, "python_dirs", key),
            hints=c.strings(t, "hints", key),
            path_search=c.boolean(t, "path_search", key, True, fix="path_search = false"),
            find_command=c.strings(t, "find_command", key),
            version_args=c.strings(t, "version_args", key, ["--version"]),
            version_regex=c.string(t, "version_regex", key, required=False),
            host_os=c.strings(t, "host_os", key),
            packages=_packages(c, f"{key}.packages", t.get("packages", {})),
        )
        if not tools[name].executables and not tools[name].find_command:
            raise c.fail(key, "needs executables or find_command", 'executables = ["..."]')
        _check_data(c, key, tools[name])
    libraries: dict[str, LibraryProbe] = {}
    for name, lib in c.table(data.get("libraries", {}), "libraries").items():
        key = f"libraries.{name}"
        lib = _table(c, key, lib, _LIB_KEYS)
        libraries[name] = LibraryProbe(
            name=name,
            description=c.string(lib, "description", key, required=False) or name,
            headers=c.strings(lib, "headers", key),
            names=c.strings(lib, "names", key),
            roots=c.strings(lib, "roots", key),
            include_dirs=c.strings(lib, "include_dirs", key, ["include"]),
            lib_dirs=c.strings(lib, "lib_dirs", key, ["lib"]),
            packages=_packages(c, f"{key}.packages", lib.get("packages", {})),
        )
    return Probes(path=path, sha256=sha256_bytes(raw), tools=tools, libraries=libraries)


# ----------------------------------------------------------------------------- probes are data
# A probe file comes with the checkout (a pull request may change it), and `lanes`,
# `doctor`, `presets --print` run its probes: so it may only name programs, never a
# command. A program is a plain name looked up in known places; it is asked its version
# with one of a few fixed argument lists; `find_command` is one of the forms below.
_PROGRAM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
VERSION_ARGS = {("--version",), ("-dumpfullversion",), ("-dumpversion",), ("-version",)}
FIND_COMMANDS = {  # the program and its fixed arguments; "{}" is a program name
    ("xcrun", "--find", "{}"),
    ("xcrun", "-f", "{}"),
    ("hipconfig", "--path"),
    ("hipconfig", "--hipclangpath"),
}
PYTHON_MODULES = {"cmake", "ninja"}  # "module:ATTR" imports these wheels, nothing else
# literal hint directories: system install prefixes only (a "$VAR/..." hint is the
# operator's own environment)
HINT_PREFIXES = ("/opt/", "/usr/", "/Library/", "/Applications/", "/Developer/")
# the variables a "$VAR/..." hint may name: each names a toolchain installation, never a
# checkout ($PWD, $GITHUB_WORKSPACE, $CI_PROJECT_DIR, $HOME would run what a pull request
# commits)
TOOLCHAIN_VARS = frozenset(
    {
        "CUDA_PATH", "CUDA_HOME", "ROCM_PATH", "HIP_PATH", "VULKAN_SDK", "ONEAPI_ROOT",
        "DGR_GCC_PREFIX", "DGR_CLANG_PREFIX",
    }
)  # fmt: skip


def _fixed_form(command: tuple[str, ...]) -> bool:
    for form in FIND_COMMANDS:
        if len(form) == len(command) and all(
            f == a or (f == "{}" and _PROGRAM.fullmatch(a))
            for f, a in zip(form, command, strict=True)
        ):
            return True
    return False


def _check_data(c: Checker, key: str, t: ToolProbe) -> None:
    """Exit 2 naming the key for anything in a tool probe that is a command, not data."""
    for exe in t.executables:
        if not _PROGRAM.fullmatch(exe):
            raise c.fail(
                f"{key}.executables",
                f"{exe[:60]!r} is not a program name (no paths, options or spaces)",
                'name the program, e.g. executables = ["gcc"]',
            )
    if t.find_command and not _fixed_form(t.find_command):
        forms = "; ".join(" ".join(f).replace("{}", "NAME") for f in sorted(FIND_COMMANDS))
        raise c.fail(
            f"{key}.find_command",
            f"{shown_value(list(t.find_command))} is not one of the lookups the forge knows "
            "(a probe never runs a command the repository names)",
            f"use one of: {forms}",
        )
    if t.version_args not in VERSION_ARGS:
        raise c.fail(
            f"{key}.version_args",
            f"{shown_value(list(t.version_args))} is not one of the fixed version queries",
            "use one of: " + ", ".join(repr(list(a)) for a in sorted(VERSION_ARGS)),
        )
    for spec in t.python_dirs:
        module, colon, _ = spec.partition(":")
        package = spec.partition("/")[0]
        ok = spec == "@scripts" or (
            module in PYTHON_MODULES if colon else package.isidentifier() and ".." not in spec
        )
        if not ok:
            raise c.fail(
                f"{key}.python_dirs",
                f"{spec[:60]!r} is not a wheel directory the forge may look in",
                '"pkg/sub/dir", "@scripts", or "module:ATTR" for module '
                + " or ".join(sorted(PYTHON_MODULES)),
            )
    for hint in t.hints:
        var = re.match(r"^\$([A-Za-z_][A-Za-z0-9_]*)(/|$)", hint)
        if ".." in hint.split("/") or not (var or hint.startswith(HINT_PREFIXES)):
            raise c.fail(
                f"{key}.hints",
                f"{hint[:60]!r} is not a system prefix or an environment variable",
                f'"$VAR/bin", or a directory under {", ".join(HINT_PREFIXES)}',
            )
        if var and var.group(1) not in TOOLCHAIN_VARS:
            raise c.fail(
                f"{key}.hints",
                f"${var.group(1)} names no toolchain installation (a probe never looks "
                "in the checkout or a home directory)",
                "use one of " + ", ".join(f"${v}" for v in sorted(TOOLCHAIN_VARS)),
            )
