"""The view of git a lane build's own processes get (issue 20): canonical, and still true.

Upstreams compile git into the binary (llama.cpp's build-info: `git rev-parse --short
HEAD`, `git rev-list --count HEAD`, `git describe`). Left alone, the answers depend on the
workspace, not the source: `--short` grows with the object count (a workspace deepened by
a rebase gets 8 characters, a fresh depth-1 fetch 7) or with a user's `core.abbrev`, and
`--count` counts whatever history was fetched. The build therefore sees:

* `core.abbrev` pinned (ABBREV) on the command-line scope, above any user config;
* the history cut at the pinned commit (and a git worker's commit), as a depth-1 fetch
  has it, through `GIT_SHALLOW_FILE`: `--count` is 1 + the patches in every workspace,
  `describe` sees the same commits;
* replace refs off, and none of the user's GIT_DIR-style redirections.

The commit ids themselves are untouched: the binary embeds the real commit.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, MutableMapping
from pathlib import Path

from dgr_forge.core.fsutil import atomic_write_text

ABBREV = 12
VIEW_FILE = "dgr-git-shallow"
# variables that would point git elsewhere or add configuration the view does not pin
_DROPPED = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_CONFIG_PARAMETERS",
    "GIT_REPLACE_REF_BASE",
    "GIT_GRAFT_FILE",
)


def write_view(build_dir: Path, commits: Iterable[str]) -> Path:
    """The shallow file (one commit id a line) in the lane's build directory; rewritten
    only when it changes (a no-op build writes nothing)."""
    path = build_dir / VIEW_FILE
    text = "".join(f"{c}\n" for c in sorted(set(commits)))
    try:
        if path.read_text() == text:
            return path
    except OSError:
        pass
    build_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path


def apply(env: MutableMapping[str, str], view: Path) -> None:
    """Make `env` (a build's process environment) see git through the view."""
    for name in list(env):
        if name in _DROPPED or name.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")):
            del env[name]
    env["GIT_CONFIG_COUNT"] = "1"
    env["GIT_CONFIG_KEY_0"] = "core.abbrev"
    env["GIT_CONFIG_VALUE_0"] = str(ABBREV)
    env["GIT_SHALLOW_FILE"] = os.fspath(view)
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
