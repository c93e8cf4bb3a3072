"""Console entry point: hoist global options, register commands, and the error boundary.

Every way out is an exit code and a message, never a traceback: a `ForgeError` as raised;
a usage error as exit 2; an `OSError` as one ``error:`` line naming the path, with a hint
(exit 2 when the path is unusable: missing, not a directory, permissions, read-only; exit 1
when the operation failed: disk full, I/O error); a NUL byte, a `ValueError`, a too-deep
input (`RecursionError`) as exit 2; a network error as exit 1. ``DGR_DEBUG=1`` adds the
traceback. Only a genuine bug (any other exception) still prints its traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

import typer

from dgr_forge import __version__
from dgr_forge.cli import argv as argv_mod
from dgr_forge.cli import helpstyle
from dgr_forge.cli.app import JSON_CHANNEL, app, emit_json, fail
from dgr_forge.cli.commands import register_for
from dgr_forge.core.errors import BadInput, ExitCode
from dgr_forge.core.fsutil import tighten_umask


def command_path(words: list[str], root: Any = None) -> str:
    """The (sub)command the line's words name, e.g. "ci render"; "dgr-forge" if none.
    `root` is the app's Click command when the caller already built it."""
    node: Any = typer.main.get_command(app) if root is None else root
    path: list[str] = []
    for word in words:
        subs = getattr(node, "commands", None)
        if not isinstance(subs, Mapping) or word not in subs:
            break
        path.append(word)
        node = subs[word]
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


def _invoke(root: Any, args: list[str], command: str, as_json: bool) -> int:
    """Run the app's Click command `root`; every way out becomes an exit code (and, with
    --json, one JSON object): an error through the one boundary, `app.fail`."""
    try:
        # `app(...)` would rebuild the Click command (~15 ms at every start); with pretty
        # exceptions off, calling the built one is the same thing.
        result = root(args=args, prog_name="dgr-forge", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except (Exception, KeyboardInterrupt) as err:
        code = fail(err, command, as_json)
        if code is None:
            raise
        return code


def _nul_argument(where: str) -> BadInput:
    """No path or URL may hold a NUL byte (exec cannot pass one; an in-process caller
    can): refused up front, naming the option, before anything is read or created."""
    return BadInput(
        f"{where}: the value contains a NUL byte (a control character)",
        hint="remove the NUL byte: no path, URL or name may contain one",
        details={"argument": where},
    )


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
    line = argv_mod.read(list(sys.argv[1:] if argv is None else argv))
    register_for(line)
    as_json = line.as_json
    root = typer.main.get_command(app)
    helpstyle.apply(root)  # one placeholder style, the global options named in every help
    command = command_path(line.words, root)
    JSON_CHANNEL.emitted = False  # one invocation, one object (main may run in-process)
    with _json_stdout(as_json):
        if line.nul is not None:
            code = fail(_nul_argument(line.nul), command, as_json) or ExitCode.BAD_INPUT
        else:
            code = _invoke(root, line.args, command, as_json)
        if as_json and not JSON_CHANNEL.emitted:
            # --help, --version, a group's help, typer.Exit: still exactly one object
            fields: dict[str, Any] = {}
            if "--version" in line.head:
                fields["version"] = __version__
            elif "--help" in line.head:
                fields["help"] = "printed on stderr"
            emit_json(command, code, fields)
    if as_json and 1 in closed and code == 0:
        # the answer is the JSON object, and it had nowhere to go (docs/cli.md)
        print("error: stdout is closed: the JSON object was not written", file=sys.stderr)
        code = ExitCode.FAILED
    sys.exit(code)
