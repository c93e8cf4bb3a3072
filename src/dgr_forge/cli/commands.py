"""CLI commands, one module per concern; each module registers its commands on `app`.

The modules stay thin: parse options, call the library, describe the result.
"""

from __future__ import annotations

import importlib

# Explicit, ordered list: `dgr-forge --help` shows commands in this order.
MODULES: list[str] = [
    "fetch",
    "patch",
    "rebase",
    "bump",
    "build",
    "report",
    "artifacts",
    "ci",
    "demo",
]

_registered = False


def register_all() -> None:
    global _registered
    if not _registered:
        for name in MODULES:
            importlib.import_module(f"dgr_forge.cli.cmd_{name}")
        _registered = True
