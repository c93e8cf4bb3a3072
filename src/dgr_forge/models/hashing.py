"""Hashing model files: sha256 at disk speed, progress over parallel files, the verified cache.

A cache `<dest>/.dgr-verified.json` remembers (size, mtime_ns, ctime_ns, inode, device) ->
sha256 of files this tool verified, so `provision` skips present files without re-hashing
them. Any write to a file changes its ctime, which `touch` cannot set back, so a changed
file never matches its entry; `verify` never trusts the cache (it always re-hashes).
"""

from __future__ import annotations

import hashlib
import os
import queue
import stat
import threading
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import msgspec
from msgspec import Struct

from dgr_forge.core.output import ProgressSink, Reporter

if TYPE_CHECKING:
    from hashlib import _Hash

READ_BLOCK = 8 << 20  # big reads: hashing runs at disk speed, few syscalls
CACHE_FILE = ".dgr-verified.json"
_T = TypeVar("_T")
_R = TypeVar("_R")


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def hash_fd(
    fd: int,
    stop: threading.Event,
    h: _Hash | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> _Hash:
    """Feed the open file `fd` from byte 0 into `h` (a new sha256 by default): the caller's
    descriptor, never a path re-opened (which a planted symlink could redirect)."""
    h = h if h is not None else hashlib.sha256()
    buf = bytearray(READ_BLOCK)
    view = memoryview(buf)
    if hasattr(os, "posix_fadvise"):
        with suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    offset = 0
    while n := os.preadv(fd, [buf], offset):
        offset += n
        h.update(view[:n])  # releases the GIL: other files hash at the same time
        if on_bytes is not None:
            on_bytes(n)
        if stop.is_set():
            raise KeyboardInterrupt
    return h


MAX_CACHE_BYTES = 16 << 20
_SMALL_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def read_small(dir_fd: int, name: str, limit: int) -> bytes | None:
    """A record file inside the held directory, read bounded: None when it is not a
    regular file (a planted FIFO is never waited on, a link never followed) or too big."""
    with os.fdopen(os.open(name, _SMALL_OPEN, dir_fd=dir_fd), "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        raw = f.read(limit + 1)
    return raw if len(raw) <= limit else None


class _Entry(Struct, frozen=True):  # a file this tool hashed: its exact stat signature
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    dev: int
    sha256: str


class _CacheDoc(Struct):
    version: int = 1
    files: dict[str, _Entry] = {}


def _entry(st: os.stat_result, sha: str) -> _Entry:
    return _Entry(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, sha)


class VerifiedCache:
    """`<dest>/.dgr-verified.json`, only a cache: one missing, not a regular file, too big or
    not of its shape (decoded typed: a hostile nesting fails at its first bracket) is
    discarded, never fatal, never waited on. Read and written by name from the held
    directory descriptor, so a directory swapped for a symlink meanwhile is not written."""

    def __init__(self, dest: Path, dir_fd: int | None = None) -> None:
        self._lock = threading.Lock()
        self.entries: dict[str, _Entry] = {}
        self._own_fd = dir_fd is None
        self.dir_fd: int | None = dir_fd
        with suppress(OSError, msgspec.DecodeError, RecursionError):
            if self.dir_fd is None:
                self.dir_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            if (raw := read_small(self.dir_fd, CACHE_FILE, MAX_CACHE_BYTES)) is not None:
                self.entries = msgspec.json.decode(raw, type=_CacheDoc).files

    def close(self) -> None:
        if self._own_fd and self.dir_fd is not None:
            os.close(self.dir_fd)
        self.dir_fd = None

    def lookup(self, name: str, st: os.stat_result) -> str | None:
        with self._lock:
            entry = self.entries.get(name)
        return entry.sha256 if entry is not None and entry == _entry(st, entry.sha256) else None

    def record(self, name: str, st: os.stat_result, sha: str) -> None:
        with self._lock:
            self.entries[name] = _entry(st, sha)

    def forget(self, name: str) -> None:
        with self._lock:
            self.entries.pop(name, None)

    def save(self) -> None:
        """Write the cache (a new temp file renamed, in the held directory); then close."""
        with self._lock:
            data = msgspec.json.encode(_CacheDoc(files=dict(sorted(self.entries.items()))))
        try:
            if self.dir_fd is not None:
                with suppress(OSError):  # only a speed-up; never fail a run over it
                    write_in(self.dir_fd, CACHE_FILE, data + b"\n")
        finally:
            self.close()


def write_in(dir_fd: int, name: str, data: bytes) -> None:
    """Atomically replace `name` inside the directory `dir_fd` (temp file + fsync + rename)."""
    tmp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
        dir_fd=dir_fd,
    )  # fmt: skip
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


class Progress:
    """Thread-safe wrapper over a ProgressSink: one bar per file plus a total."""

    def __init__(self, sink: ProgressSink, total: int, label: str) -> None:
        self._sink, self._lock, self._done = sink, threading.Lock(), 0
        self._total, self._label = total, label
        self._total_task = sink.add(label, total=total or None)

    def add(self, name: str, size: int) -> Callable[[int, str | None], None]:
        with self._lock:
            task = self._sink.add(name, total=size or None)
        state = {"done": 0}

        def update(n: int, description: str | None = None) -> None:
            with self._lock:
                state["done"] += n
                self._done += n
                self._sink.update(task, state["done"], size or None, description or name)
                self._sink.update(self._total_task, self._done, self._total or None, self._label)

        return update


def hash_many(
    paths: list[Path], out: Reporter, jobs: int | None, label: str, *, follow: bool = True
) -> dict[Path, str]:
    """sha256 of each path, `jobs` files at a time (default: the CPUs, at most 8)."""
    jobs = jobs or max(1, min(8, os.cpu_count() or 1))
    sizes = {p: (p.stat() if follow else p.lstat()).st_size for p in paths}
    stop = threading.Event()
    with out.progress(transfer=True) as sink:
        progress = Progress(sink, sum(sizes.values()), label)

        def one(p: Path) -> tuple[Path, str]:
            tick = progress.add(p.name, sizes[p])
            # follow=False: a symlink is an OSError (ELOOP), never read
            fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
            try:
                return p, hash_fd(fd, stop, on_bytes=lambda n: tick(n, None)).hexdigest()
            finally:
                os.close(fd)

        return dict(in_daemon_threads(one, paths, jobs, stop))


def in_daemon_threads(
    fn: Callable[[_T], _R], items: list[_T], jobs: int, stop: threading.Event
) -> list[_R]:
    """fn over items (results in order), `jobs` at a time, in daemon threads: a
    ThreadPoolExecutor's are joined at exit, so Ctrl-C would wait for a worker blocked in
    recv(); a NAME.part a daemon was appending to is a prefix the next run resumes from."""
    pending: queue.SimpleQueue[tuple[int, _T]] = queue.SimpleQueue()
    for i, item in enumerate(items):
        pending.put((i, item))
    results: dict[int, _R] = {}
    errors: list[BaseException] = []

    def worker() -> None:
        while not stop.is_set():
            try:
                i, item = pending.get_nowait()
            except queue.Empty:
                return
            try:
                results[i] = fn(item)
            except BaseException as err:
                errors.append(err)
                stop.set()
                return

    threads = [
        threading.Thread(target=worker, name=f"dgr-artifacts-{n}", daemon=True)
        for n in range(max(1, min(jobs, len(items))))
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # a timed join lets Ctrl-C through
    except BaseException:
        stop.set()
        raise
    if errors:
        raise errors[0]
    return [results[i] for i in range(len(items))]
