"""Console entry point: hoist global options, register commands, map usage errors to exit 2."""

from __future__ import annotations

import sys

from dgr_forge.app import app, emit_json
from dgr_forge.commands import register_all
from dgr_forge.errors import ExitCode

# Options that belong to the whole tool; accepted anywhere on the command line
# (`dgr-forge build --lane cuda --json` as CI writes it) and moved to the front.
_GLOBAL_FLAGS = {"--json"}
_GLOBAL_VALUED = {"--root", "--workspace"}


def hoist_global_options(argv: list[str]) -> list[str]:
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        name = arg.split("=", 1)[0]
        if arg in _GLOBAL_FLAGS or (name in _GLOBAL_VALUED and "=" in arg):
            front.append(arg)
        elif arg in _GLOBAL_VALUED and i + 1 < len(argv):
            front.extend(argv[i : i + 2])
            i += 1
        else:
            rest.append(arg)
        i += 1
    return front + rest


def main(argv: list[str] | None = None) -> None:
    args = hoist_global_options(list(sys.argv[1:] if argv is None else argv))
    register_all()
    try:
        result = app(args=args, prog_name="dgr-forge", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except Exception as err:
        # Usage errors (bad flag, missing argument) carry `show` and `format_message` in
        # every Typer/Click version; match that shape rather than a private class.
        show = getattr(err, "show", None)
        if show is None or not hasattr(err, "format_message"):
            if type(err).__name__ == "Abort":
                sys.exit(130)
            raise
        show()
        if "--json" in args:
            command = next((a for a in args if not a.startswith("-")), "dgr-forge")
            emit_json(command, ExitCode.BAD_INPUT, {"error": err.format_message()})
        code = ExitCode.BAD_INPUT
    sys.exit(int(code or 0))
