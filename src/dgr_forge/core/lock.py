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
