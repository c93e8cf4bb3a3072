"""The source trees a build compiles hold exactly the patched tree and the worker's commit.

`changes()` is every path git sees beyond the commit: tracked edits, untracked files, and
ignored ones too (a shadow `include/cstdio` listed in `.git/info/exclude` is still on the
include path). The files the forge itself writes into a tree for `presets` are let through
by name and content: its own `dgr-forge.presets.json` (its shape, with nothing that loads
other files) and a `CMakeUserPresets.json` that is exactly the forge's two-line one
including it (a person's own, which may include anything, is not); the build directory
lives outside both trees. `lanes.build` refuses what this
finds (exit 3), `status` shows the ignored files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dgr_forge.core import fsutil, gitutil
from dgr_forge.core.errors import BadInput, ForgeError

USER_PRESETS = "CMakeUserPresets.json"  # CMake's name; the person's file
OWN_PRESETS = "dgr-forge.presets.json"  # the forge's presets; the user's file includes it
# the CMakeUserPresets.json the forge creates where there is none: its include alone
USER_PRESETS_STUB = f'{{\n  "version": 4,\n  "include": ["{OWN_PRESETS}"]\n}}\n'
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


def changes(src: Path, *, refresh: bool = False) -> list[str]:
    """Porcelain v1 lines ("XY path"; "!! path" for an ignored file) of everything in `src`
    that is not the commit checked out, the forge's own presets file left out. `refresh`
    (a caller holding the workspace lock): git may write the index's refreshed stat
    records back, else files checked out in the index's own second (racily clean) or a
    copied tree are re-hashed at every call: ~1 s on llama.cpp's 3,000 files."""
    proc = gitutil.git(
        src,
        "status",
        "--porcelain",
        "-z",
        "--untracked-files=all",
        "--ignored=matching",
        "--ignore-submodules",
        env={} if refresh else {"GIT_OPTIONAL_LOCKS": "0"},  # else: never even the index
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
        if entry[:3] == "!! " and forge_written(src, entry[3:]):
            continue
        out.append(entry)
    return out


def forge_written(src: Path, rel: str) -> bool:
    """`rel` in the tree `src` is a presets file the forge wrote there, by name and content."""
    if rel == OWN_PRESETS:
        return forge_presets(src / rel)
    if rel == USER_PRESETS:
        try:  # a tree file: bounded, a link read as its text (never equal to the stub)
            data = fsutil.read_tree_file(src, rel, hint="", limit=_MAX_PRESETS, missing_ok=True)
        except (OSError, ForgeError):
            return False
        return (
            data is not None and not (src / rel).is_symlink() and data == USER_PRESETS_STUB.encode()
        )
    return False


def forge_presets(path: Path) -> bool:
    """`path` is a presets file as `dgr-forge presets` writes it: a regular file, JSON of
    exactly its keys (no `include`, which would load other files), every preset `dgr-*`."""
    try:
        # in the upstream tree: a link is its text (not JSON), a FIFO exit 2, never a wait
        raw = fsutil.read_tree_file(path.parent, path.name, hint="", limit=_MAX_PRESETS)
        data: Any = json.loads(raw or b"")
    except (OSError, ValueError, BadInput):
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
