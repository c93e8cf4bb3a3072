"""Recipes mean what they say: every option a recipe passes is declared upstream (before
configure, the same scan as `check`), and CMake used it (after configure)."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.lanes.recipes import Recipe

UNUSED_HEADER = "Manually-specified variables were not used by the project:"


def refuse_undeclared(forge: Forge, recipe: Recipe, src: Path, commit: str) -> None:
    """`check`'s declared-option scan, on the tree about to be built (exit 2)."""
    from dgr_forge.upstream.check import CHECKED_PREFIXES, declared_options

    wanted = [o for o in sorted(recipe.cmake_options) if o.startswith(CHECKED_PREFIXES)]
    if not wanted:
        return
    declared, renames = declared_options(src)
    bad = []
    for option in wanted:
        if option in renames:
            bad.append(f"{option} (renamed upstream to {renames[option]})")
        elif option not in declared:
            close = difflib.get_close_matches(option, sorted(declared), n=1, cutoff=0.6)
            bad.append(f"{option} (closest declared: {close[0]})" if close else option)
    if bad:
        raise BadInput(
            f"{forge.rel(recipe.path)}: cmake.options not declared by upstream at "
            f"{commit[:12]}: {'; '.join(bad)}; CMake would silently ignore them",
            hint="rename or remove them (`dgr-forge check` lists every lane's options)",
            details={"file": forge.rel(recipe.path), "undeclared": bad},
        )


def unused_variables(lines: list[str]) -> list[str]:
    """CMake's "Manually-specified variables were not used by the project" list."""
    names: list[str] = []
    for i, line in enumerate(lines):
        if UNUSED_HEADER in line:
            for follow in lines[i + 1 :]:
                word = follow.strip()
                if not word and names:
                    break
                if word and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.+-]*", word):
                    names.append(word)
                elif word:
                    break
    return names
