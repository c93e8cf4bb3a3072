"""One run at a time per workspace: an advisory `flock` on `<workspace>/lock`.

The kernel drops a flock when its holder dies, so a crashed or SIGKILLed run never blocks
the next one; the file's content (pid, command, start time) is only there to tell a
waiting run who it is waiting for. Re-entrant within one process, so library functions
(`ensure_patched` calling `ensure_fetched`, `build` calling both) can each take it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.output import Reporter

DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: beyond that a value is a typo, not a wish
POLL_S = 0.1


@dataclass
class _Held:
    fd: int
    depth: int


_held: dict[Path, _Held] = {}
_guard = threading.RLock()


def lock_timeout() -> float:
    """Seconds to wait for another run (DGR_LOCK_TIMEOUT; 0 = fail at once)."""
    raw = os.environ.get("DGR_LOCK_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    # nan compares false with everything, so it would wait forever: refuse it explicitly
    if not math.isfinite(value) or not 0 <= value <= MAX_TIMEOUT_S:
        raise BadInput(
            f"DGR_LOCK_TIMEOUT={raw[:40]!r} is not a number of seconds from 0 to {MAX_TIMEOUT_S:g}",
            hint="set DGR_LOCK_TIMEOUT to e.g. 600 (wait up to 10 minutes) or 0 (never wait)",
        )
    return value


def describe_holder(lock_file: Path) -> str:
    """Who holds the lock, from what the holder wrote (best effort: it may be mid-write)."""
    try:
        info = json.loads(lock_file.read_text() or "{}")
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


@contextlib.contextmanager
def workspace_lock(forge: Forge, out: Reporter) -> Iterator[None]:
    """Hold the workspace lock for the block; wait (or fail, with DGR_LOCK_TIMEOUT=0)."""
    path = forge.lock_file
    key = path.absolute()
    with _guard:
        held = _held.get(key)
        if held is not None:
            held.depth += 1
    if held is not None:
        try:
            yield
        finally:
            with _guard:
                held.depth -= 1
        return

    lock_timeout()  # a bad value is refused whether or not this run has to wait
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        raise BadInput(
            f"{path}: cannot open the workspace lock ({err.strerror or err})",
            hint="the lock must be a plain file the forge can write: remove whatever is "
            f"there (`rm -r {path}`; it holds no data) or choose another --workspace",
            details={"lock": str(path)},
        ) from None
    try:
        if not _try_flock(fd):
            timeout = lock_timeout()
            holder = describe_holder(path)
            if timeout == 0:
                raise OperationFailed(
                    f"workspace {forge.workspace} is in use by {holder}",
                    hint="wait for that run to finish (or stop it), or set DGR_LOCK_TIMEOUT to "
                    "a number of seconds to wait",
                    details={"lock": str(path), "holder": holder},
                )
            out.info(f"waiting for {holder} (workspace lock {path}, up to {timeout:g} s)")
            deadline = time.monotonic() + timeout
            while not _try_flock(fd):
                if time.monotonic() >= deadline:
                    raise OperationFailed(
                        f"workspace {forge.workspace} still in use by {describe_holder(path)} "
                        f"after {timeout:g} s",
                        hint="wait for that run to finish (or stop it), or raise DGR_LOCK_TIMEOUT",
                        details={"lock": str(path), "holder": describe_holder(path)},
                    )
                time.sleep(POLL_S)
        info = {
            "pid": os.getpid(),
            "command": " ".join(["dgr-forge", *sys.argv[1:]])[:300],
            "started": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        with _guard:
            _held[key] = _Held(fd=fd, depth=1)
        try:
            yield
        finally:
            with _guard:
                del _held[key]
            # clear the holder info first, then release: a waiter never reads a stale holder
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- root lock
# Self-contained on purpose (the workspace lock above may change shape): writers of
# patches/ and the manifest (export, rebase's finish and abort, journal recovery) also take
# a flock on `<root>/.dgr-root.lock`, so two workspaces on one root serialize.

ROOT_LOCK_NAME = ".dgr-root.lock"
_ROOT_DEFAULT_TIMEOUT_S = 600.0
_ROOT_POLL_S = 0.1
_root_depth: dict[Path, tuple[int, int]] = {}  # lock path -> (fd, depth), this process


def _root_timeout() -> float:
    raw = os.environ.get("DGR_LOCK_TIMEOUT", "").strip()
    try:
        value = float(raw) if raw else _ROOT_DEFAULT_TIMEOUT_S
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise BadInput(
            f"DGR_LOCK_TIMEOUT={raw!r} is not a finite number of seconds >= 0",
            hint="set DGR_LOCK_TIMEOUT to e.g. 600 (wait up to 10 minutes) or 0 (never wait)",
        )
    return value


def _root_try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _root_holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another dgr-forge run (holder unknown)"
    return f"pid {info.get('pid')} ({info.get('command', '?')}, since {info.get('started', '?')})"


@contextlib.contextmanager
def root_lock_at(root: Path, out: Reporter | None = None) -> Iterator[None]:
    """Hold `<root>/.dgr-root.lock` for the block (re-entrant in one process); wait up to
    DGR_LOCK_TIMEOUT for another run, naming it, or fail (exit 1) naming it."""
    path = (root / ROOT_LOCK_NAME).absolute()
    held = _root_depth.get(path)
    if held is not None:
        _root_depth[path] = (held[0], held[1] + 1)
        try:
            yield
        finally:
            fd, depth = _root_depth[path]
            _root_depth[path] = (fd, depth - 1)
        return
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        raise OperationFailed(
            f"{path}: cannot open the root lock ({err.strerror})",
            hint="the forge root must be writable by whoever runs export or rebase",
        ) from None
    try:
        if not _root_try_flock(fd):
            timeout = _root_timeout()
            holder = _root_holder(path)
            if timeout == 0:
                raise OperationFailed(
                    f"forge root {root} is being written by {holder}",
                    hint="wait for that run to finish (or stop it), or set DGR_LOCK_TIMEOUT",
                    details={"lock": str(path), "holder": holder},
                )
            msg = f"waiting for {holder} (root lock {path}, up to {timeout:g} s)"
            if out is not None:
                out.info(msg)
            else:
                sys.stderr.write(msg + "\n")
            deadline = time.monotonic() + timeout
            while not _root_try_flock(fd):
                if time.monotonic() >= deadline:
                    raise OperationFailed(
                        f"forge root {root} still being written by {_root_holder(path)} "
                        f"after {timeout:g} s",
                        hint="wait for that run to finish (or stop it), or raise DGR_LOCK_TIMEOUT",
                        details={"lock": str(path), "holder": _root_holder(path)},
                    )
                time.sleep(_ROOT_POLL_S)
        info = {
            "pid": os.getpid(),
            "command": " ".join(["dgr-forge", *sys.argv[1:]])[:300],
            "started": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        _root_depth[path] = (fd, 1)
        try:
            yield
        finally:
            del _root_depth[path]
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def root_lock(forge: Forge, out: Reporter | None = None) -> contextlib.AbstractContextManager[None]:
    """The root-level lock of `forge.root` (see `root_lock_at`)."""
    return root_lock_at(forge.root, out)
