"""CLI commands, one module per concern; each module registers its commands on `app`.

The modules stay thin: parse options, call the library, describe the result. A run that names one
command imports only the module that defines it (`register_for`): building the Click command of
every other one costs each start about 15 ms. Each command imports its library modules inside
itself, so that a no-op start pays for none it does not use (crypto, jinja2, requests).
"""

from __future__ import annotations

import importlib
import os

from dgr_forge.cli.argv import Argv

# Which module defines each top-level command, in `dgr-forge --help`'s order
# (tests/test_startup.py checks it against what the modules register).
COMMAND_MODULES: dict[str, str] = {
    "fetch": "fetch", "status": "fetch", "patch": "patch", "export": "patch",
    "rebase": "rebase", "check": "rebase", "bump": "bump",
    "build": "build", "doctor": "build", "lanes": "build", "presets": "build",
    "keygen": "report", "certify": "report", "report": "report",
    "artifacts": "artifacts", "ci": "ci", "toolchain": "toolchain", "demo": "demo",
}  # fmt: skip

MODULES = list(dict.fromkeys(COMMAND_MODULES.values()))

_imported: set[str] = set()
_all = False


def _import(name: str) -> None:
    if name not in _imported:
        importlib.import_module(f"dgr_forge.cli.cmd_{name}")
        _imported.add(name)


def register_all() -> None:
    """Every command, in `MODULES` order (also when some were registered before)."""
    global _all
    if _all:
        return
    for name in MODULES:
        _import(name)
    from dgr_forge.cli.app import app

    rank = {f"dgr_forge.cli.cmd_{name}": i for i, name in enumerate(MODULES)}
    app.registered_commands.sort(key=lambda c: rank.get(getattr(c.callback, "__module__", ""), 0))
    app.registered_groups.sort(
        key=lambda g: MODULES.index(COMMAND_MODULES.get(g.name or "", "demo"))
    )
    _all = True


def command_module(line: Argv) -> str | None:
    """The one module a command line needs: "" for none (`--version` before any command),
    None for all (no command named, `--help`, an unknown name, completion)."""
    if any(k.startswith("_DGR_FORGE_COMPLETE") or k == "_TYPER_COMPLETE_ARGS" for k in os.environ):
        return None
    if line.first == "--version":
        return ""
    if line.first is None or line.first.startswith("-"):
        return None  # --help, completion options, a typo: Click shows every command
    return COMMAND_MODULES.get(line.first)


def register_for(line: Argv) -> None:
    """Register what the line runs: one module, none, or all."""
    if _all:
        return
    name = command_module(line)
    if name is None:
        register_all()
    elif name:
        _import(name)
