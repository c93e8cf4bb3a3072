"""CLI commands, one module per concern; each module registers its commands on `app`.

The command line is read once (`read`); a run imports only the module of the command it
names (`register_for`; docs/architecture.md, 'Start-up cost').
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

# Options that belong to the whole tool; accepted anywhere on the command line
# (`dgr-forge build --lane cuda --json` as CI writes it) and moved to the front.
GLOBAL_FLAGS = frozenset({"--json", "--quiet", "-q", "--verbose", "-v"})
GLOBAL_VALUED = frozenset({"--root", "-C", "--workspace"})
ATTACHED = "-C"  # `-CDIR`, the short option's value attached as make takes it


@dataclass(frozen=True)
class Argv:  # the command line as `read` found it
    args: list[str]  # what Click parses: the global options first, then the rest as given
    words: list[str]  # the words before `--` that are not options: the command path's start
    first: str | None  # the first token after the global options (`--version`, a command)
    head: list[str]  # the tokens before `--`
    nul: str | None  # where a NUL byte is (the option, or `argument N`), None when none

    @property
    def as_json(self) -> bool:
        return "--json" in self.head


def read(argv: list[str]) -> Argv:
    front: list[str] = []
    rest: list[str] = []
    words: list[str] = []
    nul: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        if nul is None and "\x00" in arg:
            before = argv[i - 1] if i > 0 else ""
            name = arg.split("=", 1)[0] if arg.startswith("-") else None
            nul = name or (before if before.startswith("-") else f"argument {i + 1}")
        name = arg.split("=", 1)[0]
        attached = arg.startswith(ATTACHED) and len(arg) > len(ATTACHED)
        if arg in GLOBAL_FLAGS or attached or (name in GLOBAL_VALUED and "=" in arg):
            front.append(arg)
        elif arg in GLOBAL_VALUED and i + 1 < len(argv):
            front.extend(argv[i : i + 2])
            if nul is None and "\x00" in argv[i + 1]:
                nul = arg
            i += 2
            continue
        else:
            rest.append(arg)
            if not arg.startswith("-"):
                words.append(arg)
        i += 1
    first = rest[0] if rest and rest[0] != "--" else None
    return Argv(front + rest, words, first, argv[:i], nul)  # head: what came before `--`


# Which module defines each top-level command, in `dgr-forge --help`'s order
# (tests/test_startup.py checks it against what the modules register).
COMMAND_MODULES: dict[str, str] = {
    "fetch": "fetch", "status": "fetch", "patch": "patch", "export": "patch",
    "rebase": "rebase", "check": "rebase", "bump": "rebase",
    "build": "build", "doctor": "build", "lanes": "build", "presets": "build",
    "keygen": "report", "certify": "report", "report": "report",
    "artifacts": "artifacts", "ci": "ci", "toolchain": "toolchain", "demo": "toolchain",
}  # fmt: skip

MODULES = list(dict.fromkeys(COMMAND_MODULES.values()))

_all = False


def _import(name: str) -> None:  # once: a module imported again registers nothing again
    importlib.import_module(f"dgr_forge.cli.cmd_{name}")


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
        key=lambda g: MODULES.index(COMMAND_MODULES.get(g.name or "", MODULES[-1]))
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


def register_for(line: Argv) -> None:  # one module, none, or all
    if (name := command_module(line)) is None:
        register_all()
    elif name:
        _import(name)
