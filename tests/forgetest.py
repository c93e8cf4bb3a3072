"""The names the tests have always imported; they live in the `support` package now.

An upstream git repository (`support.git`), a forge root (`support.roots`, the one
builder) and running the CLI (`support.cli`: in-process by default, a child process for
kill/pause faults, signals and held locks).
"""

from __future__ import annotations

from support.cli import (
    SRC,
    Result,
    forge_cmd,
    forge_env,
    needs_subprocess,
    run_forge,
    run_forge_in_process,
    run_forge_subprocess,
)
from support.git import BASE_FILES, GIT_ENV, Upstream, make_upstream, sh_git
from support.roots import make_forge_root, manifest_text

__all__ = [
    "BASE_FILES",
    "GIT_ENV",
    "SRC",
    "Result",
    "Upstream",
    "forge_cmd",
    "forge_env",
    "make_forge_root",
    "make_upstream",
    "manifest_text",
    "needs_subprocess",
    "run_forge",
    "run_forge_in_process",
    "run_forge_subprocess",
    "sh_git",
]
