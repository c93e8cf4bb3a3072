"""Re-exports `support.history` (long upstream histories made with git fast-import, what
a workspace holds of them, and a server-side log of the packs it sends)."""

from __future__ import annotations

from support.history import (
    PackLog,
    add_history,
    before,
    between,
    pack_log,
    range_objects,
    workspace_commits,
)

__all__ = [
    "PackLog",
    "add_history",
    "before",
    "between",
    "pack_log",
    "range_objects",
    "workspace_commits",
]
