"""What `check` reports about one CMake option a recipe passes (the shape only: `lanes`
builds it on every build, without importing `check` and what `check` needs)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OptionProblem:
    recipe: str
    option: str
    message: str
    renamed_to: str | None = None
    # upstream keeps the option only as a deprecation shim (exit 2: the recipe must change)
    deprecated: bool = False
