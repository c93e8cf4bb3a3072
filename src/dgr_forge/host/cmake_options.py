"""Recipes mean what they say: every option a recipe passes is declared upstream (before
configure, and in `check`: the one scan), and CMake used it (after configure)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from msgspec import Struct

from dgr_forge.core import gitutil
from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_tree_file
from dgr_forge.core.structs import d
from dgr_forge.host.recipes import Recipe


class OptionProblem(Struct, frozen=True):
    """a CMake option a recipe passes that upstream does not declare as it is"""

    recipe: Annotated[str, d("the recipe")]
    option: Annotated[str, d("the option")]
    message: Annotated[str, d("what is wrong, and the fix")]
    renamed_to: Annotated[str | None, d("the option's new name upstream")] = None
    deprecated: Annotated[
        bool, d("upstream keeps it only as a deprecation shim (the recipe must change)")
    ] = False


UNUSED_HEADER = "Manually-specified variables were not used by the project:"


CHECKED_PREFIXES = ("GGML_", "LLAMA_")
# patterns compiled at first use (re caches them): ~2 ms a no-op build never scans for
_DECL = (
    r"(?i)\b(?:option|cmake_dependent_option)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\b"
    r"|\bset\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s[^)]*\bCACHE\b"
)
# llama.cpp's deprecation shims: `llama_option_depr(WARNING OLD NEW)` for a rename,
# `llama_option_depr(WARNING OLD)` for an option that is ignored now (LLAMA_CURL), a
# FATAL_ERROR type where setting it stops configure (ggml likewise)
_DEPR = (
    r"(?i)\b\w*option_depr\s*\(\s*\w+\s+([A-Za-z_][A-Za-z0-9_]*)(?:\s+([A-Za-z_][A-Za-z0-9_]*))?"
    r"\s*\)"
)
_COMMENT = r"#[^\n]*"
# llama.cpp's version: its CMake derives both from git unless they are given
BUILD_INFO = ("LLAMA_BUILD_NUMBER", "LLAMA_BUILD_COMMIT")
_GIVEN = r"(?i)\bif\s*\(\s*NOT\s+DEFINED\s+([A-Za-z_][A-Za-z0-9_]*)\s*\)"
_TREE_HINT = "a CMake file of the tree is a regular file of sane size: fix the patch or commit"


def _cmake_texts(src: Path) -> Iterator[str]:  # tracked, comments removed
    for rel in gitutil.out(src, "ls-files", "-z").split("\0"):
        if (base := rel.rsplit("/", 1)[-1]) != "CMakeLists.txt" and not base.endswith(".cmake"):
            continue
        data = read_tree_file(src, rel, what="CMake file", hint=_TREE_HINT, missing_ok=True)
        if data is not None:  # None: tracked, but deleted in the work tree
            yield re.sub(_COMMENT, "", data.decode("utf-8", errors="replace"))


def declared_options(src: Path) -> tuple[set[str], dict[str, str | None]]:
    """CMake cache variables the tree declares, and its deprecated names (old -> the
    replacement upstream names, None when it names none)."""
    texts = list(_cmake_texts(src))
    names = {m.group(1) or m.group(2) for text in texts for m in re.finditer(_DECL, text)}
    renames = {m.group(1): m.group(2) or None for text in texts for m in re.finditer(_DEPR, text)}
    return names, renames


def taken_as_given(src: Path) -> tuple[str, ...]:
    """The build-info variables the tree takes from outside when defined (llama.cpp's
    `if (NOT DEFINED LLAMA_BUILD_NUMBER)`): `build` passes the upstream's own values."""
    found = {m.group(1) for text in _cmake_texts(src) for m in re.finditer(_GIVEN, text)}
    return tuple(n for n in BUILD_INFO if n in found)


def deprecated(option: str, new: str | None, commit: str) -> str:
    fix = f"use {new}" if new else "no replacement: upstream ignores it, remove it"
    return f"{option} is deprecated upstream at {commit[:12]} (llama_option_depr): {fix}"


def check_options(
    forge: Forge, src: Path, commit: str, all_recipes: dict[str, Recipe]
) -> tuple[int, list[OptionProblem]]:
    declared, renames = declared_options(src)
    problems: list[OptionProblem] = []
    checked = 0
    for lane, recipe in all_recipes.items():
        shown = forge.rel(recipe.path)
        for option in sorted(recipe.cmake_options):
            if not option.startswith(CHECKED_PREFIXES):
                continue
            checked += 1
            if option in renames:
                new = renames[option]
                message = f"{shown}: cmake.options.{option}: {deprecated(option, new, commit)}"
                problems.append(OptionProblem(lane, option, message, new, deprecated=True))
            elif option not in declared:
                close = difflib.get_close_matches(option, sorted(declared), n=3, cutoff=0.6)
                hint = f"; similar options upstream declares: {', '.join(close)}" if close else ""
                message = (
                    f"{shown}: cmake.options.{option}: not declared by upstream at "
                    f"{commit[:12]} (no option()/set(... CACHE) in any CMakeLists.txt or "
                    f"*.cmake): renamed or removed upstream? CMake would silently ignore it{hint}"
                )
                problems.append(OptionProblem(lane, option, message))
    return checked, problems


def refuse_undeclared(forge: Forge, recipe: Recipe, src: Path, commit: str) -> None:
    """`check`'s declared-option scan, on the tree about to be built (exit 2)."""
    wanted = [o for o in sorted(recipe.cmake_options) if o.startswith(CHECKED_PREFIXES)]
    if not wanted:
        return
    declared, renames = declared_options(src)
    bad = []
    for option in wanted:
        if option in renames:
            bad.append(deprecated(option, renames[option], commit))
        elif option not in declared:
            close = difflib.get_close_matches(option, sorted(declared), n=1, cutoff=0.6)
            bad.append(f"{option} (closest declared: {close[0]})" if close else option)
    if bad:
        raise BadInput(
            f"{forge.rel(recipe.path)}: cmake.options not declared by upstream at "
            f"{commit[:12]} (or only as a deprecated alias): {'; '.join(bad)}; CMake would "
            "ignore them or do what the replacement does",
            hint="rename or remove them (`dgr-forge check` lists every lane's options)",
            details={"file": forge.rel(recipe.path), "undeclared": bad},
        )


def unused_variables(lines: list[str]) -> list[str]:
    names: list[str] = []
    for i, line in enumerate(lines):
        if UNUSED_HEADER in line:
            for follow in lines[i + 1 :]:
                word = follow.strip()
                if word and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.+-]*", word):
                    names.append(word)
                elif word or names:  # another line, or the blank one after the names
                    break
    return names
