"""The one way the forge runs a child process, so stdin is never inherited (a CI job must
not hang on a prompt) and a missing or hanging tool is handled one way."""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from msgspec import Struct

_LINE_END = rb"[\r\n]"  # git's progress rewrites its line with \r

# `--verbose`: told of each child (argv, cwd) before it starts; `cli.app.run` sets it
Observer = Callable[[Sequence[str], "Path | None"], None]
_observer: Observer | None = None


def observe(observer: Observer | None) -> Observer | None:
    global _observer
    before, _observer = _observer, observer
    return before


def starting(cmd: Sequence[str], cwd: Path | None) -> None:
    if _observer is not None:
        _observer(cmd, cwd)


def capture(
    cmd: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    text: bool = True,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `cmd` to completion with stdout and stderr captured (never raises on exit code)."""
    starting(cmd, cwd)
    if isinstance(input, str) and not text:
        input = input.encode()
    return subprocess.run(
        list(cmd),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL if input is None else None,
        input=input,
        capture_output=True,
        text=text,
        timeout=timeout,
        check=False,
    )


PROBE_LIMIT = 1 << 20  # bytes a probe may print: a version or a device list, never more


def probe(cmd: Sequence[str], *, timeout: float = 20.0) -> subprocess.CompletedProcess[str] | None:
    """A host probe (`tool --version`); None: missing, broken, past `timeout` or `PROBE_LIMIT`."""
    starting(cmd, None)
    try:
        done = bounded(cmd, timeout=timeout, limit=PROBE_LIMIT)
    except (OSError, ValueError):
        return None
    if done.returncode is None:
        return None
    text = (done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"))
    return subprocess.CompletedProcess(list(cmd), done.returncode, *text)


def stream(
    cmd: Sequence[str],
    on_line: Callable[[str], None],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    merge_stdout: bool = True,
) -> int:
    """The exit code; `on_line` gets each line of stderr (and stdout when `merge_stdout`,
    else it is discarded) as it arrives, ended at \\n or \\r (progress that redraws)."""
    starting(cmd, cwd)
    with subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if merge_stdout else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if merge_stdout else subprocess.PIPE,
    ) as proc:
        pipe = proc.stdout if merge_stdout else proc.stderr
        assert pipe is not None
        buf = b""
        while chunk := os.read(pipe.fileno(), 65536):
            buf += chunk
            *lines, buf = re.split(_LINE_END, buf)
            for raw in lines:
                if raw:
                    on_line(raw.decode(errors="replace"))
        if buf:
            on_line(buf.decode(errors="replace"))
        return proc.wait()


def spawn(cmd: Sequence[str], *, env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A long-running child the caller stops (a server for one build), output to `log`, in
    its own session so a terminal's Ctrl-C reaches only the forge, which stops it in order."""
    starting(cmd, None)
    with open(log, "wb") as sink:  # the child has its own copy of the descriptor
        return subprocess.Popen(
            list(cmd),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


class Bounded(Struct, frozen=True):
    returncode: int | None  # None: it was stopped (deadline or output bound)
    stdout: bytes  # at most the bound
    stderr: bytes
    timed_out: bool
    over_limit: bool
    seconds: float


def bounded(
    cmd: Sequence[str],
    *,
    timeout: float,
    limit: int,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: BinaryIO | None = None,
) -> Bounded:
    """Run `cmd` (its own session) until it exits, `timeout` passes or its output exceeds
    `limit` bytes (then its group is killed); what is read is also written to `log`."""
    started = time.monotonic()
    deadline = started + timeout
    child = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert child.stdout is not None and child.stderr is not None
    out_fd, err_fd = child.stdout.fileno(), child.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    total = 0
    timed_out = over = False
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map() and not over:
            if (left := deadline - time.monotonic()) <= 0:
                timed_out = True
                break
            for key, _ in sel.select(min(left, 1.0)):
                if not (chunk := os.read(key.fd, 65536)):
                    sel.unregister(key.fd)
                    continue
                room = limit - total
                bufs[key.fd] += chunk[: max(room, 0)]
                total += len(chunk)
                if log is not None:
                    log.write(chunk[: max(room, 0)])
                if total > limit:
                    over = True
                    break
    if timed_out or over:
        _kill_group(child)
    try:
        rc: int | None = child.wait(timeout=max(deadline - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:
        _kill_group(child)
        timed_out, rc = True, None
    child.stdout.close()
    child.stderr.close()
    _kill_session(child.pid)  # whatever the outcome: nothing it started outlives it
    if timed_out or over:
        rc = None
    seconds = time.monotonic() - started
    return Bounded(rc, bytes(bufs[out_fd]), bytes(bufs[err_fd]), timed_out, over, seconds)


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


_REAPED = 5.0  # seconds to wait for a killed session's processes to be gone


def _session_members(sid: int) -> list[int]:
    """The live processes of session `sid` (Linux /proc; elsewhere its process group
    only, which `killpg` reaches): a child that left its group stays in its session."""
    found = []
    session = str(sid).encode()
    with contextlib.suppress(OSError):
        # after every probe and bounded run: raw reads, no file objects (~40% of the scan)
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
            except OSError:
                continue
            try:
                fields = os.read(fd, 4096).rsplit(b")", 1)[-1].split()
            except OSError:
                continue
            finally:
                os.close(fd)
            if len(fields) > 3 and fields[0] not in (b"Z", b"X") and fields[3] == session:
                found.append(int(name))
    return found


def _kill_session(sid: int) -> None:
    """SIGKILL every process of the session (its group, and any group a descendant moved
    to) and wait until none runs. (A process that made a session of its own has left.)"""
    deadline = time.monotonic() + _REAPED
    while True:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, signal.SIGKILL)
        members = _session_members(sid)
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not members or time.monotonic() > deadline:
            return
        time.sleep(0.01)
