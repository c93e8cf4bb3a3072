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
from typing import Annotated

from dgr_forge.core.tominput import Checker, Record, Version1, about, decode, fail, shown_value

SCHEMA = 1


# -- the file as written is the record (its keys, types, defaults, meanings: declared once,
# here); a probe's name is its key, its description that name when the file gives none

Strings = tuple[str, ...]
Packages = Annotated[
    dict[str, Strings],
    about(
        "install hints per package system (`debian`, `brew`, `pip`, ...)",
        fix='write packages = { debian = ["..."] }',
    ),
]


class ToolProbe(Record, frozen=True):
    """An executable: looked up in wheels, hints, then PATH, and asked its version."""

    description: Annotated[str, about("what it is (default: the probe's name)")] | None = None
    executables: Annotated[Strings, about("names looked up (first found wins)")] = ()
    python_dirs: Annotated[
        Strings,
        about(
            "installed wheels' directories, searched first: `pkg/sub/dir`, `@scripts`, "
            "or `module:ATTR` (imports the module)"
        ),
    ] = ()
    hints: Annotated[
        Strings, about("directories searched next: a system prefix, or `$VAR/sub`")
    ] = ()
    path_search: Annotated[
        bool, about("false: only python_dirs and hints, not PATH", fix="path_search = false")
    ] = True
    find_command: Annotated[
        Strings, about("a fixed lookup printing the tool's path (`xcrun --find NAME`)")
    ] = ()
    version_args: Annotated[Strings, about("the arguments that print its version")] = ("--version",)
    version_regex: Annotated[str, about("group 1 of its first match is the version")] | None = None
    host_os: Annotated[Strings, about("probed only on these (`platform.system().lower()`)")] = ()
    packages: Packages = {}  # noqa: RUF012 (msgspec copies an empty default)


class LibraryProbe(Record, frozen=True):
    """Headers and a linkable library under one of `roots`."""

    description: Annotated[str, about("what it is (default: the probe's name)")] | None = None
    headers: Annotated[Strings, about("every one must exist under an include dir")] = ()
    names: Annotated[Strings, about("`lib<name>.so`/`.dylib`/`.a` or `<name>.lib`")] = ()
    roots: Annotated[
        Strings,
        about(
            "`$VAR`, `tool:<probe>` (that tool's install prefix), `python:pkg/sub` (an "
            "installed wheel's directory) or a path"
        ),
    ] = ()
    include_dirs: Annotated[Strings, about("relative to each root")] = ("include",)
    lib_dirs: Annotated[Strings, about("relative to each root")] = ("lib",)
    packages: Packages = {}  # noqa: RUF012


class Probes(Record, frozen=True):
    """`toolchains/probes.toml`: the tools and libraries a recipe may require, and how
    `doctor` looks for each."""

    schema: Version1
    tools: Annotated[dict[str, ToolProbe], about("by probe name")] = {}  # noqa: RUF012
    libraries: Annotated[dict[str, LibraryProbe], about("by probe name")] = {}  # noqa: RUF012


def load_probes(path: Path, shown: str | None = None, *, root: Path | None = None) -> Probes:
    """Parse probes.toml strictly: unknown keys and wrong types are exit 2; under `root`
    (the forge root) a link is refused, never read."""
    shown = shown or str(path)
    _, data = Checker(shown).load(
        path,
        what="probes file",
        hint="restore toolchains/probes.toml from the repository",
        root=root,
    )
    doc = decode(shown, data, Probes)
    for name, t in doc.tools.items():
        key = f"tools.{name}"
        if not t.executables and not t.find_command:
            raise fail(shown, key, "needs executables or find_command", 'executables = ["..."]')
        _check_data(shown, key, t)
    for name, lib in doc.libraries.items():
        for where in lib.roots:
            wheel = where.removeprefix("python:")
            named = wheel.partition("/")[0].isidentifier() and ".." not in wheel
            if wheel != where and not named:
                raise fail(
                    shown,
                    f"libraries.{name}.roots",
                    f"{where[:60]!r} is not a wheel directory the forge may look in",
                    '"python:pkg/sub/dir", e.g. "python:nvidia/cu13"',
                )
    return doc


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


def _check_data(shown: str, key: str, t: ToolProbe) -> None:
    """Exit 2 naming the key for anything in a tool probe that is a command, not data."""
    for exe in t.executables:
        if not _PROGRAM.fullmatch(exe):
            raise fail(
                shown,
                f"{key}.executables",
                f"{exe[:60]!r} is not a program name (no paths, options or spaces)",
                'name the program, e.g. executables = ["gcc"]',
            )
    if t.find_command and not _fixed_form(t.find_command):
        forms = "; ".join(" ".join(f).replace("{}", "NAME") for f in sorted(FIND_COMMANDS))
        raise fail(
            shown,
            f"{key}.find_command",
            f"{shown_value(list(t.find_command))} is not one of the lookups the forge knows "
            "(a probe never runs a command the repository names)",
            f"use one of: {forms}",
        )
    if t.version_args not in VERSION_ARGS:
        raise fail(
            shown,
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
            raise fail(
                shown,
                f"{key}.python_dirs",
                f"{spec[:60]!r} is not a wheel directory the forge may look in",
                '"pkg/sub/dir", "@scripts", or "module:ATTR" for module '
                + " or ".join(sorted(PYTHON_MODULES)),
            )
    for hint in t.hints:
        var = re.match(r"^\$([A-Za-z_][A-Za-z0-9_]*)(/|$)", hint)
        if ".." in hint.split("/") or not (var or hint.startswith(HINT_PREFIXES)):
            raise fail(
                shown,
                f"{key}.hints",
                f"{hint[:60]!r} is not a system prefix or an environment variable",
                f'"$VAR/bin", or a directory under {", ".join(HINT_PREFIXES)}',
            )
        if var and var.group(1) not in TOOLCHAIN_VARS:
            raise fail(
                shown,
                f"{key}.hints",
                f"${var.group(1)} names no toolchain installation (a probe never looks "
                "in the checkout or a home directory)",
                "use one of " + ", ".join(f"${v}" for v in sorted(TOOLCHAIN_VARS)),
            )
