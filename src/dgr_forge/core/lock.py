"""One run at a time per workspace: an advisory `flock` on `<workspace>/lock`, which the
kernel drops when its holder dies; the file's content (pid, command, start time) only
tells a waiting run who it waits for. `cli/app` (`Env.session`) takes it before any input is read.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from msgspec import Struct

from dgr_forge.core.errors import BadInput, OperationFailed, env_number
from dgr_forge.core.forge import Forge
from dgr_forge.core.output import Reporter
from dgr_forge.core.urls import mask_text


class _Held(Struct):  # a lock this process holds (tests/support/cli.py closes a leaked one)
    fd: int


_held: dict[Path, _Held] = {}  # by path (one dict operation at a time: atomic)


def holder_of(fd: int) -> str:
    """Who holds the lock open at `fd`, as the holder wrote it (read through `fd`)."""
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another dgr-forge run (holder unknown)"
    return f"pid {info.get('pid')} ({info.get('command', '?')}, since {info.get('started', '?')})"


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class LockWords(Struct, frozen=True):
    """How a lock names itself in messages (the workspace, root and provision locks)."""

    busy: str  # "workspace X is in use" / "forge root X is being written"
    still_busy: str
    label: str  # "workspace lock" / "root lock", in the waiting line
    open_failed: str = ""  # "{path}: cannot open ..." is prefixed
    open_hint: str = ""
    open_error: type[BadInput] | type[OperationFailed] = BadInput


@contextlib.contextmanager
def hold(
    fd: int, path: Path, words: LockWords, say: Callable[[str], None], holder: Callable[[], str]
) -> Iterator[None]:
    """An exclusive flock on `fd` (at `path`) for the block, waiting up to DGR_LOCK_TIMEOUT
    for another run (naming it: `holder`), else exit 1. While held it says who holds it."""
    # a bad value (a NaN would wait forever) is refused whether or not this run waits
    timeout = env_number("DGR_LOCK_TIMEOUT", 600.0, 0.0, 7 * 24 * 3600.0)
    if not _try_flock(fd):
        who = holder()
        if timeout == 0:
            raise OperationFailed(
                f"{words.busy} by {who}",
                hint="wait for that run to finish (or stop it), or set DGR_LOCK_TIMEOUT to "
                "a number of seconds to wait",
                details={"lock": str(path), "holder": who},
            )
        say(f"waiting for {who} ({words.label} {path}, up to {timeout:g} s)")
        deadline = time.monotonic() + timeout
        while not _try_flock(fd):
            if time.monotonic() >= deadline:
                who = holder()
                raise OperationFailed(
                    f"{words.still_busy} by {who} after {timeout:g} s",
                    hint="wait for that run to finish (or stop it), or raise DGR_LOCK_TIMEOUT",
                    details={"lock": str(path), "holder": who},
                )
            time.sleep(0.1)
    info = {  # only ever a hint: a failed write is no failure
        "pid": os.getpid(),
        "command": mask_text(" ".join(["dgr-forge", *sys.argv[1:]]))[:300],
        "started": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
    try:
        yield
    finally:
        # clear the holder info first, then release: a waiter never reads a stale holder
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def _flock_held(path: Path, words: LockWords, say: Callable[[str], None]) -> Iterator[None]:
    """`hold` on `path`, re-entrant within this process."""
    if (key := path.absolute()) in _held:  # the outer holder releases it
        yield
        return

    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o644)  # non-blocking: a FIFO there never hangs the open
    except OSError as err:
        if err.errno in (errno.EISDIR, errno.ELOOP, errno.ENXIO):  # not a file we can lock
            raise _not_a_file(path) from None
        raise words.open_error(
            f"{path}: {words.open_failed} ({err.strerror or err})",
            hint=words.open_hint,
            details={"lock": str(path)},
        ) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, socket or device: flock: EINVAL
            raise _not_a_file(path)
        os.set_blocking(fd, True)
        with hold(fd, path, words, say, lambda: holder_of(fd)):
            _held[key] = _Held(fd)
            try:
                yield
            finally:
                del _held[key]
    finally:
        os.close(fd)


def _not_a_file(path: Path) -> BadInput:
    return BadInput(
        f"{path}: the lock is not a regular file (a FIFO, socket, device, directory or link "
        "is there)",
        hint=f"remove it (`rm -r {path}`; a lock holds no data): the forge recreates it",
        details={"lock": str(path)},
    )


def workspace_lock(forge: Forge, out: Reporter) -> contextlib.AbstractContextManager[None]:
    path = forge.lock_file
    words = LockWords(
        open_failed="cannot open the workspace lock",
        open_hint="the lock must be a plain file the forge can write: remove whatever is "
        f"there (`rm -r {path}`; it holds no data) or choose another --workspace",
        busy=f"workspace {forge.workspace} is in use",
        still_busy=f"workspace {forge.workspace} still in use",
        label="workspace lock",
    )
    return _flock_held(path, words, out.info)


def root_lock(
    root: Path, out: Reporter, on_wait: Callable[[], None] | None = None
) -> contextlib.AbstractContextManager[None]:
    """`<root>/.dgr-root.lock`, taken by writers of patches/ and the manifest, so two
    workspaces on one root serialize; `on_wait` is called before this run waits."""
    words = LockWords(
        open_failed="cannot open the root lock",
        open_hint="the forge root must be writable by whoever runs export or rebase",
        open_error=OperationFailed,
        busy=f"forge root {root} is being written",
        still_busy=f"forge root {root} still being written",
        label="root lock",
    )

    def say(msg: str) -> None:
        if on_wait is not None:
            on_wait()
        out.info(msg)

    return _flock_held((root / ".dgr-root.lock").absolute(), words, say)
