"""The source trees a build compiles hold exactly the patched tree and the worker's commit.

`changes()` is every path git sees beyond the commit: tracked edits, untracked files, and
ignored ones too (a shadow `include/cstdio` listed in `.git/info/exclude` is still on the
include path). The one file the forge itself writes into a tree, the `CMakeUserPresets.json`
of `presets`, is let through by name and content (its shape, with nothing that loads other
files); the build directory lives outside both trees. `lanes.build` refuses what this
finds (exit 3), `status` shows the ignored files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dgr_forge.core import gitutil

PRESETS = "CMakeUserPresets.json"
_PRESET_KEYS = {"version", "cmakeMinimumRequired", "configurePresets", "buildPresets"}
_CONFIGURE_KEYS = {
    "name",
    "displayName",
    "description",
    "generator",
    "binaryDir",
    "cacheVariables",
    "toolchainFile",
}
_BUILD_KEYS = {"name", "configurePreset", "targets"}
_MAX_PRESETS = 1 << 20


def changes(src: Path) -> list[str]:
    """Porcelain v1 lines ("XY path"; "!! path" for an ignored file) of everything in `src`
    that is not the commit checked out, the forge's own presets file left out."""
    proc = gitutil.git(
        src,
        "status",
        "--porcelain",
        "-z",
        "--untracked-files=all",
        "--ignored=matching",
        "--ignore-submodules",
        env={"GIT_OPTIONAL_LOCKS": "0"},  # a no-op build must not even refresh the index
    )
    out = []
    fields = proc.stdout.split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if not entry:
            continue
        if entry[0] in "RC":  # a rename's original path follows in its own field
            i += 1
        if entry[:3] == "!! " and entry[3:] == PRESETS and forge_presets(src / PRESETS):
            continue
        out.append(entry)
    return out


def ignored(src: Path) -> list[str]:
    """The ignored files alone (paths), for `status`."""
    if not (src / ".git").exists():
        return []
    return [line[3:] for line in changes(src) if line.startswith("!! ")]


def forge_presets(path: Path) -> bool:
    """`path` is a presets file as `dgr-forge presets` writes it: a regular file, JSON of
    exactly its keys (no `include`, which would load other files), every preset `dgr-*`."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > _MAX_PRESETS:
            return False
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict) or set(data) - _PRESET_KEYS:
        return False
    for key, allowed in (("configurePresets", _CONFIGURE_KEYS), ("buildPresets", _BUILD_KEYS)):
        presets = data.get(key, [])
        if not isinstance(presets, list):
            return False
        for preset in presets:
            if not isinstance(preset, dict) or set(preset) - allowed:
                return False
            if not str(preset.get("name", "")).startswith("dgr-"):
                return False
    return True
