"""Console entry point: hoist global options, register commands, and the error boundary.

Every way out is an exit code and a message, never a traceback: a `ForgeError` as raised;
a usage error as exit 2; an `OSError` as one ``error:`` line naming the path, with a hint
(exit 2 when the path is unusable: missing, not a directory, permissions, read-only; exit 1
when the operation failed: disk full, I/O error); a NUL byte, a `ValueError`, a too-deep
input (`RecursionError`) as exit 2; a network error as exit 1. ``DGR_DEBUG=1`` adds the
traceback. Only a genuine bug (any other exception) still prints its traceback.
"""

from __future__ import annotations

import io
import os
import sys
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

import typer

from dgr_forge import __version__
from dgr_forge.cli import helpstyle
from dgr_forge.cli.app import JSON_CHANNEL, app, emit_json
from dgr_forge.cli.commands import register_for
from dgr_forge.cli.failures import as_forge_error, debug_enabled
from dgr_forge.core.errors import BadInput, ExitCode, ForgeError
from dgr_forge.core.fsutil import tighten_umask
from dgr_forge.core.output import Reporter
from dgr_forge.core.urls import shown

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


def command_path(args: list[str], root: Any = None) -> str:
    """The (sub)command a hoisted argument list names, e.g. "ci render"; "dgr-forge" if none.
    `root` is the app's Click command when the caller already built it."""
    node: Any = typer.main.get_command(app) if root is None else root
    path: list[str] = []
    i = 0
    while i < len(args) and isinstance(getattr(node, "commands", None), Mapping):
        arg = args[i]
        if arg == "--":
            break
        if arg in _GLOBAL_VALUED:
            i += 2
            continue
        if not arg.startswith("-"):
            sub = node.commands.get(arg)
            if sub is None:
                break
            path.append(arg)
            node = sub
        i += 1
    return " ".join(path) or "dgr-forge"


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (in-process callers)
        return None


@contextmanager
def _json_stdout(enabled: bool) -> Iterator[None]:
    """With --json, keep stdout for the one JSON object only: Python's `sys.stdout` (Typer's
    help, stray prints) and file descriptor 1 (child processes) both go to stderr meanwhile."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved_stdout = sys.stdout
    out_fd = _fileno(saved_stdout)
    stream = saved_stdout if out_fd is None else os.fdopen(os.dup(out_fd), "w", encoding="utf-8")
    saved_fd1 = os.dup(1)
    os.dup2(_fileno(sys.stderr) or 2, 1)
    JSON_CHANNEL.stream = stream
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved_stdout
        JSON_CHANNEL.stream = None
        os.dup2(saved_fd1, 1)
        os.close(saved_fd1)
        stream.flush()
        if stream is not saved_stdout:
            stream.close()


def _report(err: ForgeError, command: str, as_json: bool) -> int:
    Reporter(json_mode=as_json).error(str(err))
    if as_json:
        emit_json(command, err.exit_code, {"error": err.message, "hint": err.hint, **err.details})
    return int(err.exit_code)


def _invoke(root: Any, args: list[str], command: str, as_json: bool) -> int:
    """Run the app's Click command `root`; every way out becomes an exit code (and, with
    --json, one JSON object)."""
    try:
        # `app(...)` would rebuild the Click command (~15 ms at every start); with pretty
        # exceptions off, calling the built one is the same thing.
        result = root(args=args, prog_name="dgr-forge", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except ForgeError as err:  # raised outside `run` (an option callback, a sub-app)
        Reporter(json_mode=as_json).error(str(err))
        if as_json:
            emit_json(command, err.exit_code, {"error": err.message, "hint": err.hint})
        return int(err.exit_code)
    except Exception as err:
        known = as_forge_error(err)
        if known is not None:
            if debug_enabled():
                traceback.print_exc()
            return _report(known, command, as_json)
        # Usage errors (bad flag, missing argument) carry `show` and `format_message` in
        # every Typer/Click version; match that shape rather than a private class.
        show = getattr(err, "show", None)
        if show is not None and hasattr(err, "format_message"):
            text = io.StringIO()
            show(file=text)  # Click echoes the argument: escaped like every input shown
            sys.stderr.write(shown(text.getvalue()))
            sys.stderr.flush()
            if as_json:
                message = err.format_message() or "missing command (usage printed on stderr)"
                emit_json(command, ExitCode.BAD_INPUT, {"error": message})
            return int(ExitCode.BAD_INPUT)
        if type(err).__name__ == "Abort":
            if as_json:
                emit_json(command, 130, {"error": "aborted"})
            return 130
        if not as_json:
            raise
        traceback.print_exc()  # a bug: the trace goes to stderr, the contract still holds
        emit_json(command, ExitCode.FAILED, {"error": f"internal error: {err!r}"})
        return int(ExitCode.FAILED)


def _nul_argument(args: list[str]) -> BadInput | None:
    """No path or URL may hold a NUL byte (exec cannot pass one; an in-process caller
    can): refuse it up front, naming the option, before anything is read or created."""
    for i, arg in enumerate(args):
        if "\x00" not in arg:
            continue
        name = arg.split("=", 1)[0] if arg.startswith("-") else None
        if name is None and i > 0 and args[i - 1].startswith("-"):
            name = args[i - 1]
        where = name or f"argument {i + 1}"
        return BadInput(
            f"{where}: the value contains a NUL byte (a control character)",
            hint="remove the NUL byte: no path, URL or name may contain one",
            details={"argument": where},
        )
    return None


def _reopen_closed_std() -> set[int]:
    """Which of stdin/stdout/stderr were closed at start (`>&-`), each reopened on
    /dev/null: no file the forge opens later takes fd 1 or 2 (a report would get the
    table printed into it), and every write goes somewhere instead of a traceback."""
    closed: set[int] = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            closed.add(fd)
    if 1 in closed or sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    if 2 in closed or sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    return closed


def main(argv: list[str] | None = None) -> None:
    tighten_umask()  # nothing the forge makes is group/world-writable (SECURITY.md)
    closed = _reopen_closed_std()
    args = hoist_global_options(list(sys.argv[1:] if argv is None else argv))
    register_for(args)
    head = args[: args.index("--")] if "--" in args else args
    as_json = "--json" in head
    root = typer.main.get_command(app)
    helpstyle.apply(root)  # one placeholder style, the global options named in every help
    command = command_path(args, root)
    JSON_CHANNEL.emitted = False  # one invocation, one object (main may run in-process)
    with _json_stdout(as_json):
        nul = _nul_argument(args)
        code = _report(nul, command, as_json) if nul else _invoke(root, args, command, as_json)
        if as_json and not JSON_CHANNEL.emitted:
            # --help, --version, a group's help, typer.Exit: still exactly one object
            fields: dict[str, Any] = {}
            if "--version" in head:
                fields["version"] = __version__
            elif "--help" in head:
                fields["help"] = "printed on stderr"
            emit_json(command, code, fields)
    if as_json and 1 in closed and code == 0:
        # the answer is the JSON object, and it had nowhere to go (docs/cli.md)
        print("error: stdout is closed: the JSON object was not written", file=sys.stderr)
        code = ExitCode.FAILED
    sys.exit(code)
