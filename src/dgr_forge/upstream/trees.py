"""The source trees a build compiles hold exactly the patched tree and the worker's commit:
`changes()` is every path git sees beyond it, ignored ones too (a shadow `include/cstdio`
in `.git/info/exclude` is still on the include path), except the presets files the forge
writes, recognised by name and content (a person's own may include anything).
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
    "name", "displayName", "description", "generator", "binaryDir", "cacheVariables",
    "toolchainFile"
}  # fmt: skip
_BUILD_KEYS = {"name", "configurePreset", "targets"}
_MAX_PRESETS = 1 << 20


def changes(src: Path, *, refresh: bool = False) -> list[str]:
    """Porcelain v1 lines ("XY path", "!! path") of everything in `src` beyond its commit.
    `refresh` (under the workspace lock): git may write the refreshed index back, else
    racily clean files are re-hashed at every call (~1 s on llama.cpp's 3,000 files)."""
    proc = gitutil.git(
        src, "status", "--porcelain", "-z", "--untracked-files=all", "--ignored=matching",
        "--ignore-submodules",
        env={} if refresh else {"GIT_OPTIONAL_LOCKS": "0"},  # else: never even the index
    )  # fmt: skip
    out = []
    fields = iter(proc.stdout.split("\0"))
    for entry in fields:
        if not entry:
            continue
        if entry[0] in "RC":  # a rename's original path follows in its own field
            next(fields, None)
        if entry[:3] == "!! " and forge_written(src, entry[3:]):
            continue
        out.append(entry)
    return out


def forge_written(src: Path, rel: str) -> bool:
    if rel == OWN_PRESETS:
        return forge_presets(src / rel)
    if rel == USER_PRESETS:
        try:  # a tree file: bounded, a link read as its text (never equal to the stub)
            data = fsutil.read_tree_file(src, rel, hint="", limit=_MAX_PRESETS, missing_ok=True)
        except (OSError, ForgeError):
            return False
        return data == USER_PRESETS_STUB.encode() and not (src / rel).is_symlink()
    return False


def forge_presets(path: Path) -> bool:
    """`path` is as `dgr-forge presets` writes it: JSON of exactly its keys (no `include`,
    which would load other files), every preset `dgr-*`."""
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
