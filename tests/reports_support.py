"""Re-exports `support.reports` (a root with a real patch, a recipe and a worker repo; a
`LaneBuild` over real artifact files; DSSE helpers)."""

from __future__ import annotations

from support.reports import (
    PATCH_FILE,
    RECIPE,
    isolate_key_env,
    keyid_from_pub,
    lane_build,
    make_patch,
    make_worker,
    payload_of,
    read_envelope,
    setup_root,
    write_manifest,
)

__all__ = [
    "PATCH_FILE",
    "RECIPE",
    "isolate_key_env",
    "keyid_from_pub",
    "lane_build",
    "make_patch",
    "make_worker",
    "payload_of",
    "read_envelope",
    "setup_root",
    "write_manifest",
]
