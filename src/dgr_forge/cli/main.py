"""Console entry point: the line read, its commands registered, its streams guarded, and
every way out an exit code and a message (`app.fail`, `app.as_forge_error`), never a traceback
but for a genuine bug.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext, suppress
from typing import Any, TextIO

import typer

from dgr_forge import __version__
from dgr_forge.cli import options
from dgr_forge.cli.app import JSON_CHANNEL, app, emit_json, fail
from dgr_forge.cli.commands import read, register_for
from dgr_forge.core.errors import BadInput, ExitCode


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (in-process callers)
        return None


class GuardedStream:
    """A text stream whose writes cannot raise, for stdout and stderr. A full device
    (`> /dev/full`), a closed pipe or an I/O error is recorded (`error`), the rest of the
    run's output to it dropped (its descriptor pointed at /dev/null, so neither buffered
    bytes nor Python's exit flush raise again); `main` makes it exit 1 and one line."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self.stream, self.name = stream, name
        self.error: OSError | ValueError | None = None

    def write(self, text: str) -> int:
        if self.error is None:
            try:
                return self.stream.write(text)
            except (OSError, ValueError) as err:  # ValueError: a closed file object
                self._failed(err)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.error is None:
            try:
                self.stream.flush()
            except (OSError, ValueError) as err:
                self._failed(err)

    def close(self) -> None:
        self.flush()
        with suppress(OSError, ValueError):
            self.stream.close()

    def _failed(self, err: OSError | ValueError) -> None:
        self.error = err
        if (fd := _fileno(self.stream)) is not None:
            with suppress(OSError):
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, fd)
                os.close(null)
        with suppress(OSError, ValueError):
            self.stream.flush()  # what was buffered goes to /dev/null now

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, buffer, ...
        return getattr(self.stream, name)


@contextmanager
def _json_stdout(guards: list[GuardedStream]) -> Iterator[None]:
    """For --json, keep stdout for the one JSON object only: Python's `sys.stdout` (Typer's
    help, stray prints) and file descriptor 1 (child processes) both go to stderr meanwhile."""
    sys.stdout.flush()
    saved_stdout = sys.stdout
    out_fd = _fileno(saved_stdout)
    own = None if out_fd is None else os.fdopen(os.dup(out_fd), "w", encoding="utf-8")
    # the JSON object's own stream, guarded like stdout: its failure is stdout's
    stream = guards[0] if own is None else GuardedStream(own, "stdout")
    saved_fd1 = os.dup(1)
    os.dup2(_fileno(sys.stderr) or 2, 1)
    JSON_CHANNEL.stream = stream  # type: ignore[assignment]
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved_stdout
        JSON_CHANNEL.stream = None
        os.dup2(saved_fd1, 1)
        os.close(saved_fd1)
        stream.flush()
        if own is not None:
            stream.close()
            guards[0].error = guards[0].error or stream.error


def main(argv: list[str] | None = None) -> None:
    # what the forge makes for itself (workspace, cache, stamps, state, logs, reports) is
    # never group- or world-writable, whatever umask it was started with (SECURITY.md)
    os.umask(os.umask(0o022) | 0o022)
    # stdin/stdout/stderr closed at start (`>&-`) are reopened on /dev/null: no file the
    # forge opens later takes fd 1 or 2 (a report would get the table printed into it),
    # and every write goes somewhere instead of a traceback
    closed: set[int] = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            if (null := os.open(os.devnull, os.O_RDWR)) != fd:
                os.dup2(null, fd)
                os.close(null)
            closed.add(fd)
    if 1 in closed or sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    if 2 in closed or sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    # sys.stdout and sys.stderr guarded for this invocation (main may run in-process)
    saved = sys.stdout, sys.stderr
    guards = [GuardedStream(sys.stdout, "stdout"), GuardedStream(sys.stderr, "stderr")]
    sys.stdout, sys.stderr = guards
    try:
        code = _main(argv, closed, guards)
        if failed := [g for g in guards if g.error is not None]:
            # the answer (or what was said about it) did not arrive: never exit 0
            err, name = failed[0].error, failed[0].name
            what = err.strerror if isinstance(err, OSError) and err.strerror else "it is closed"
            guards[1].write(f"error: cannot write to {name}: {what}\n")
            code = code or ExitCode.FAILED
    finally:
        for guard in guards:
            guard.flush()
        sys.stdout, sys.stderr = saved
    sys.exit(code)


def _main(argv: list[str] | None, closed: set[int], guards: list[GuardedStream]) -> int:
    line = read(list(sys.argv[1:] if argv is None else argv))
    register_for(line)
    as_json = line.as_json
    root = typer.main.get_command(app)
    options.apply(root)
    node, path = root, []  # the (sub)command the words name, e.g. "ci render"
    for word in line.words:
        subs = getattr(node, "commands", None)
        if not isinstance(subs, Mapping) or word not in subs:
            break
        path.append(word)
        node = subs[word]
    command = " ".join(path) or "dgr-forge"
    JSON_CHANNEL.emitted = False  # one invocation, one object (main may run in-process)
    with _json_stdout(guards) if as_json else nullcontext():
        if line.nul is not None:
            # exec cannot pass a NUL byte, an in-process caller can: refused before
            # anything is read or created
            nul = BadInput(
                f"{line.nul}: the value contains a NUL byte (a control character)",
                hint="remove the NUL byte: no path, URL or name may contain one",
                details={"argument": line.nul},
            )
            code = fail(nul, command, as_json) or ExitCode.BAD_INPUT
        else:  # an error leaves through `app.fail`
            try:
                # `app(...)` would rebuild the Click command (~15 ms at every start); with
                # pretty exceptions off, calling the built one is the same thing.
                result = root(args=line.args, prog_name="dgr-forge", standalone_mode=False)
                code = result if isinstance(result, int) else 0
            except (Exception, KeyboardInterrupt) as err:
                if (failed := fail(err, command, as_json)) is None:
                    raise
                code = failed
        if as_json and not JSON_CHANNEL.emitted:
            # --help, --version, a group's help, typer.Exit: still exactly one object
            fields: dict[str, str] = {}
            if "--version" in line.head:
                fields["version"] = __version__
            elif "--help" in line.head:
                fields["help"] = "printed on stderr"
            emit_json(command, code, fields)
    if as_json and 1 in closed and code == 0:
        # the answer is the JSON object, and it had nowhere to go (docs/cli.md)
        print("error: stdout is closed: the JSON object was not written", file=sys.stderr)
        code = ExitCode.FAILED
    return code
