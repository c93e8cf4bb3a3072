"""One help style for every command, and the values the shell completes.

`apply` runs on the built Click command tree (cli.main): every option that takes a value
shows one kind of placeholder (`PATH`, `URL`, `LANE`, `REV`, `N`, ...: never Typer's
`<str>`/`<path>`), and every subcommand's help ends by naming the global options, which
are accepted anywhere on the line. The `complete_*` functions are the options' Typer
`autocompletion`: lane names from the forge root's recipes/, cache kinds, modes and CI
providers. Completion never fails: no forge root, no lanes offered.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import typer

# by option name first (what the value means), then by the value's type
METAVARS: dict[str, str] = {
    "--lane": "LANE",
    "--mirror": "URL",
    "--url-base": "URL",
    "--url": "URL",
    "--cache": "CACHE",
    "--cache-mode": "MODE",
    "--provider": "PROVIDER",
    "--jobs": "N",
    "--key": "PATH",
    "--report-key": "PATH",
    "--source-revision": "REV",
    "--onto": "REV",
    "--name": "NAME",
    "--hardware": "TEXT",
    "--layers": "RANGES",  # A-B[,C-D]: layer numbers
}
GLOBAL_OPTIONS = (
    "Global options, accepted anywhere on the line: --root PATH (the forge root), "
    "--workspace PATH, --json (one JSON object on stdout); see dgr-forge --help."
)
CACHE_KINDS = ("auto", "ccache", "sccache", "off")
CACHE_MODES = ("rw", "ro")
PROVIDERS = ("github", "gitlab")


def _metavar(param: Any) -> str:
    for opt in param.opts:
        if opt in METAVARS:
            return METAVARS[opt]
    kind = type(param.type).__name__
    if "Path" in kind or "File" in kind:
        return "PATH"
    if "Int" in kind:
        return "N"
    if "Float" in kind:
        return "SECONDS"
    return "TEXT"


def _argument(param: Any) -> None:
    """An argument keeps its name in the usage line (REPORT, DIR) and shows its kind in the
    same style as options (PATH), not Typer's `<path>`: the type is this argument's own
    copy, so a shared type object (Click's STRING) is never changed."""
    if param.metavar is None:
        param.metavar = (param.name or "value").upper()
    shown = _metavar(param)
    kind = copy.copy(param.type)
    kind.get_metavar = lambda *args, **kwargs: shown
    param.type = kind


def apply(root: Any) -> None:
    """Placeholders and the global-options epilog, on every command under `root`."""
    stack = [(root, True)]
    while stack:
        command, top = stack.pop()
        for param in command.params:
            if param.param_type_name == "argument":
                _argument(param)
                continue
            if param.param_type_name != "option" or getattr(param, "is_flag", False):
                continue
            if param.metavar is None or param.metavar.startswith("<"):
                param.metavar = _metavar(param)
        if not top and not command.epilog:
            command.epilog = GLOBAL_OPTIONS
        for sub in (getattr(command, "commands", None) or {}).values():
            stack.append((sub, False))


def _choices(values: tuple[str, ...], incomplete: str) -> list[str]:
    return [v for v in values if v.startswith(incomplete)]


def complete_lanes(ctx: typer.Context, incomplete: str) -> list[str]:
    """Lane names: recipes/<lane>.toml of the forge root (--root, DGR_ROOT, or upwards)."""
    from dgr_forge.core.forge import Forge

    root = ctx.find_root().params.get("root")
    try:
        recipes = Forge.locate(Path(root) if root else None).recipes_dir
        names = sorted(p.stem for p in recipes.glob("*.toml") if p.is_file())
    except Exception:  # completion must never print a traceback into the shell
        return []
    return [n for n in names if n.startswith(incomplete)]


def complete_cache(incomplete: str) -> list[str]:
    return _choices(CACHE_KINDS, incomplete)


def complete_cache_mode(incomplete: str) -> list[str]:
    return _choices(CACHE_MODES, incomplete)


def complete_provider(incomplete: str) -> list[str]:
    return _choices(PROVIDERS, incomplete)
