"""`toolchains/probes.toml`: which tools and libraries a lane may ask for, and how `doctor`
looks for each. It comes with the checkout (a pull request may change it), so a probe is
data: fixed version queries and lookups, system prefixes or `$VAR/...` hints naming a
toolchain, only the wheels in `PYTHON_MODULES` (tests/security/test_probes.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from dgr_forge.core.errors import BadInput
from dgr_forge.core.tominput import Checker, Record, Version1, about, decode, fail, shown_value

PROBES = "toolchains/probes.toml"  # under the forge root


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
    """Under `root` (the forge root) a link is refused, never read."""
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
        _refuse_commands(shown, key, t)
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


# A program is a plain name looked up in known places, asked its version with one of a
# few fixed argument lists; `find_command` is one of the forms below.
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
# the variables a "$VAR/..." hint may name: each names a toolchain installation, never a checkout
# ($PWD, $GITHUB_WORKSPACE, $CI_PROJECT_DIR, $HOME would run what a pull request commits)
TOOLCHAIN_VARS = frozenset(
    {
        "CUDA_PATH", "CUDA_HOME", "ROCM_PATH", "HIP_PATH", "VULKAN_SDK", "ONEAPI_ROOT",
        "DGR_GCC_PREFIX", "DGR_CLANG_PREFIX",
    }
)  # fmt: skip


def _refuse_commands(shown: str, key: str, t: ToolProbe) -> None:
    def refused(field: str, problem: str, fix: str) -> BadInput:
        return fail(shown, f"{key}.{field}", problem, fix)

    for exe in t.executables:
        if not _PROGRAM.fullmatch(exe):
            raise refused(
                "executables",
                f"{exe[:60]!r} is not a program name (no paths, options or spaces)",
                'name the program, e.g. executables = ["gcc"]',
            )
    fixed = any(
        len(form) == len(t.find_command)
        and all(
            f == a or (f == "{}" and _PROGRAM.fullmatch(a))
            for f, a in zip(form, t.find_command, strict=True)
        )
        for form in FIND_COMMANDS
    )
    if t.find_command and not fixed:
        forms = "; ".join(" ".join(f).replace("{}", "NAME") for f in sorted(FIND_COMMANDS))
        raise refused(
            "find_command",
            f"{shown_value(list(t.find_command))} is not one of the lookups the forge knows "
            "(a probe never runs a command the repository names)",
            f"use one of: {forms}",
        )
    if t.version_args not in VERSION_ARGS:
        raise refused(
            "version_args",
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
            raise refused(
                "python_dirs",
                f"{spec[:60]!r} is not a wheel directory the forge may look in",
                '"pkg/sub/dir", "@scripts", or "module:ATTR" for module '
                + " or ".join(sorted(PYTHON_MODULES)),
            )
    for hint in t.hints:
        var = re.match(r"^\$([A-Za-z_][A-Za-z0-9_]*)(/|$)", hint)
        if ".." in hint.split("/") or not (var or hint.startswith(HINT_PREFIXES)):
            raise refused(
                "hints",
                f"{hint[:60]!r} is not a system prefix or an environment variable",
                f'"$VAR/bin", or a directory under {", ".join(HINT_PREFIXES)}',
            )
        if var and var.group(1) not in TOOLCHAIN_VARS:
            raise refused(
                "hints",
                f"${var.group(1)} names no toolchain installation (a probe never looks "
                "in the checkout or a home directory)",
                "use one of " + ", ".join(f"${v}" for v in sorted(TOOLCHAIN_VARS)),
            )
