"""Where the suite writes its scratch files: a RAM-backed file system when there is room.

The suite creates and deletes about a hundred thousand small files (git repositories,
build trees, copies of roots). On the disk of the machine kind the project is measured on,
creating a file cost between 40 and 700 µs (`/tmp/fsbench`-style loop of 30,000 files; the
slow end right after many deletions, which ext4's inode allocator pays for), on tmpfs a
steady 12 µs: half the suite's system time went there. So when
`/dev/shm` is a tmpfs with room to spare, the test run's temporary directory (pytest's
`tmp_path` and everything `tempfile` makes, in the tests and in the programs they start)
is there; otherwise it stays where the system puts it.

`FORGETEST_TMP=DIR` chooses the directory; `FORGETEST_TMP=system` keeps the system's.
Tests whose files a sandbox must see at the same path (bwrap mounts a fresh /dev) take a
directory from `disk_tmp()` instead.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

CHOICE_ENV = "FORGETEST_TMP"
DISK_ENV = "FORGETEST_DISK_TMP"  # the system's temporary directory, for disk_tmp()
SHM = Path("/dev/shm")
ROOM = 4 << 30  # a run holds under 1 GiB; pytest keeps the last run's directories too


def _is_tmpfs(path: Path) -> bool:
    try:
        mounts = Path("/proc/mounts").read_text()
    except OSError:
        return False
    return any(
        len(fields) > 2 and fields[1] == str(path) and fields[2] == "tmpfs"
        for fields in (line.split() for line in mounts.splitlines())
    )


def _roomy(path: Path) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize >= ROOM and os.access(path, os.W_OK | os.X_OK)


def choose() -> Path | None:
    """The directory the run's temporary files go to, None for the system's own."""
    chosen = os.environ.get(CHOICE_ENV, "")
    if chosen == "system":
        return None
    if chosen:
        return Path(chosen)
    return SHM if _is_tmpfs(SHM) and _roomy(SHM) else None


def use(path: Path | None) -> None:
    """Make `path` this process's and its children's temporary directory (TMPDIR, which
    pytest's tmp_path, `tempfile` and the programs the tests start all follow); the
    system's own stays known to `disk_tmp()`."""
    os.environ.setdefault(DISK_ENV, tempfile.gettempdir())
    if path is None:
        return
    path.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(path)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def disk_tmp() -> Path:
    """The system's temporary directory, whatever `use` chose for the run."""
    return Path(os.environ.get(DISK_ENV) or tempfile.gettempdir())
