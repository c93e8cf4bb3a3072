"""Bringing one model file into the destination exactly: resumable, retried, bounded, atomic.

Each missing file streams into `NAME.part` (opened without following links, see `dest`),
resumes with an HTTP Range request from the bytes already there, retries dropped
connections, timeouts, slow transfers and 5xx with exponential backoff, checks size and
sha256 (hashed while streaming), then fsync + atomic rename. Every URL shown is masked.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import stat
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit

import requests
import urllib3
from msgspec import Struct

from dgr_forge.core import fault, fsutil
from dgr_forge.core.errors import OperationFailed, env_number
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import d
from dgr_forge.core.urls import mask, mask_text
from dgr_forge.models import sources
from dgr_forge.models.dest import DestDir
from dgr_forge.models.hashing import READ_BLOCK, Progress, VerifiedCache, hash_fd, human
from dgr_forge.models.manifest import PART_SUFFIX, ModelFile

if TYPE_CHECKING:
    from hashlib import _Hash

NET_CHUNK = 1 << 20
_SIZE_FIX = "fix size (and sha256) in the manifest, or point it at the right file"


@dataclass(frozen=True)
class RetryPolicy:
    """How hard provisioning tries: `tries` consecutive failures without progress per file."""

    tries: int = 5
    backoff: float = 1.0  # first delay in seconds, doubled per failure, capped at 30 s
    connect_timeout: float = 15.0
    read_timeout: float = 60.0
    min_rate: float = 1024.0  # bytes/s over every stall_s window (RateFloor), else retried
    stall_s: float = 60.0
    # a split's header read by HTTP Range requests (`artifacts map`): at most this many requests
    # and this many seconds in all, so a server answering a byte per 206 cannot hold a
    # run for weeks (a real header takes a few dozen requests, in seconds)
    range_requests: int = 1024
    range_deadline: float = 600.0

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """The DGR_ARTIFACTS_* variables read below; a bad value is exit 2."""
        return cls(
            tries=env_number("DGR_ARTIFACTS_TRIES", cls.tries, 1, 1000),
            backoff=env_number("DGR_ARTIFACTS_BACKOFF", cls.backoff, 0.0, 300.0),
            read_timeout=env_number("DGR_ARTIFACTS_TIMEOUT", cls.read_timeout, 0.01, 86400.0),
            min_rate=env_number("DGR_ARTIFACTS_MIN_RATE", cls.min_rate, 1.0, 2.0**40),
            stall_s=env_number("DGR_ARTIFACTS_STALL_S", cls.stall_s, 0.01, 86400.0),
            range_requests=env_number("DGR_ARTIFACTS_RANGE_REQUESTS", cls.range_requests, 1, 10**6),
            range_deadline=env_number(
                "DGR_ARTIFACTS_RANGE_DEADLINE", cls.range_deadline, 0.01, 86400.0
            ),
        )

    def delay(self, failures: int) -> float:
        return float(min(self.backoff * 2 ** (failures - 1), 30.0))


class RateFloor:
    """The minimum rate of a transfer: at least `min_rate` bytes/s over every `stall_s`
    window, whatever the read timeout lets through (a server dripping a byte per second
    never trips a 60 s read timeout). Downloads and Range reads of headers share it."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.min_rate, self.window = policy.min_rate, policy.stall_s
        self.restart()

    def restart(self) -> None:
        self._start, self._bytes = time.monotonic(), 0

    def add(self, n: int) -> str | None:
        """Count `n` bytes that arrived; the problem when the window closed below the rate."""
        self._bytes += n
        if (elapsed := time.monotonic() - self._start) < self.window:
            return None
        if self._bytes < self.min_rate * elapsed:
            return (
                f"too slow: {self._bytes} bytes in {elapsed:.1f}s, under the minimum "
                f"{human(self.min_rate)}/s (DGR_ARTIFACTS_MIN_RATE)"
            )
        self.restart()
        return None


class FileOutcome(Struct, kw_only=True):
    """a file"""

    name: Annotated[str, d("file name")]
    size: Annotated[int, d("bytes, from the manifest")]
    status: Annotated[str, d("`present`, `downloaded` or `failed`; `planned` with `--dry-run`")] = (
        "pending"
    )
    downloaded_bytes: Annotated[int, d("bytes downloaded this run")] = 0
    resumed_from: Annotated[int, d("bytes of NAME.part reused")] = 0
    restarts: Annotated[int, d("times it started over from byte 0 (the server ignored Range)")] = 0
    retries: Annotated[int, d("retries")] = 0
    error: Annotated[str | None, d("why it failed")] = None
    sha256: Annotated[str, d("the manifest's sha256: what it was verified against")] = ""


class _Retry(Exception):
    """A transient failure: the bytes so far are kept and the next try resumes."""


class TooSlow(_Retry):
    """Below the minimum rate: retried, but it counts as a try even though bytes arrived
    (for a header read by ranges, across all its requests)."""


@dataclass
class _Stream:
    f: ModelFile
    url: str
    shown: str  # the URL as messages show it: credentials masked
    part: str  # NAME.part
    outcome: FileOutcome
    tick: Callable[[int, str | None], None]
    have: int = 0
    h: _Hash = field(default_factory=hashlib.sha256)
    fd: int = -1
    again: bool = False  # the last response made us start over; not a failure


@dataclass
class Downloader:
    """Brings one file to `dest` exactly; shared state is only the cache and progress."""

    dest: DestDir
    out: Reporter
    cache: VerifiedCache
    progress: Progress
    policy: RetryPolicy
    stop: threading.Event
    file_roots: tuple[str, ...] = ()  # where a file:// source may be, checked on its descriptor

    def run(self, f: ModelFile, url: str) -> FileOutcome:
        outcome = FileOutcome(name=f.name, size=f.size, sha256=f.sha256)
        part = f.name + PART_SUFFIX
        try:
            self._provision(
                _Stream(f, url, mask(url), part, outcome, self.progress.add(f.name, f.size))
            )
        except OperationFailed as err:
            outcome.status = "failed"
            outcome.error = str(err)  # with its `fix:` line, as every failure is printed
            st = self.dest.lstat(part)
            if st is not None and st.st_size == 0 and stat.S_ISREG(st.st_mode):
                self.dest.unlink(part)  # nothing worth resuming
        except OSError as err:  # the destination, not the source: disk full, permissions
            outcome.status = "failed"
            st, d = self.dest.lstat(part), self.dest.path
            kept = f"; {st.st_size} bytes are kept in {part}" if st and st.st_size else ""
            outcome.error = f"{f.name}: {err.strerror or err} ({err.filename or d}){kept}"
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                outcome.error += (
                    f"\n  fix: free space on the file system of {d} (`df -h {d}`)"
                    " and re-run provision: it resumes from the kept bytes"
                )
        return outcome

    def _provision(self, state: _Stream) -> None:
        f, part, outcome = state.f, state.part, state.outcome
        if (fd := self.dest.open_final(f.name)) is not None:
            try:
                st = os.fstat(fd)
                differs = f"{st.st_size} bytes, manifest says {f.size}"
                if st.st_size == f.size:
                    if (sha := self.cache.lookup(f.name, st)) is None:
                        sha = hash_fd(fd, self.stop).hexdigest()
                        self.cache.record(f.name, os.fstat(fd), sha)
                    if sha == f.sha256:
                        self.dest.unlink(part)  # left by an older run; the file is done
                        state.tick(f.size, f"{f.name} (present)")
                        outcome.status = "present"
                        return
                    differs = f"sha256 {sha}, manifest says {f.sha256}"
                self.out.warn(f"{f.name}: on disk with {differs}; downloading it again")
            finally:
                os.close(fd)
            self.cache.forget(f.name)
        if (sha := self._download(state)) != f.sha256:
            self.dest.unlink(part)
            raise OperationFailed(
                f"{f.name}: sha256 mismatch after download: expected {f.sha256}, got {sha} "
                f"(from {state.shown}); the partial file was removed",
                hint="re-run to download again; if it repeats, the manifest or the server is wrong",
            )
        fault.point("provision.verified", f.name)
        self.dest.replace(part, f.name)  # a planted link at the final name is replaced
        self.dest.fsync()
        fault.point("provision.renamed", f.name)
        if (after := self.dest.lstat(f.name)) is not None:
            self.cache.record(f.name, after, sha)
        outcome.status = "downloaded"

    def _download(self, state: _Stream) -> str:
        """Fill `part` to exactly f.size bytes; return its sha256 (hashed while streaming)."""
        f, url, shown, part = state.f, state.url, state.shown, state.part
        fd = state.fd = self.dest.open_part(part, self.out)  # created 0600: nobody else reads it
        try:
            if (have := os.fstat(fd).st_size) > f.size:
                self.out.warn(f"{part} is larger than the manifest's size; starting over")
                os.ftruncate(fd, 0)
                have = 0
            if have:
                hash_fd(fd, self.stop, state.h)  # the descriptor we append to, not the path
                state.outcome.resumed_from = state.have = have
                state.tick(have, None)
                self.out.info(f"{f.name}: resuming at byte {have} of {f.size}")
            failures = 0
            while state.have < f.size:
                before = state.have
                try:
                    (self._copy_file if urlsplit(url).scheme == "file" else self._get_http)(state)
                    if state.again:  # started over on purpose: ask again at once
                        state.again = False
                        continue
                    if state.have < f.size:
                        raise _Retry(f"the transfer ended at byte {state.have} of {f.size}")
                except (
                    _Retry,
                    requests.ConnectionError,
                    requests.Timeout,
                    requests.exceptions.ChunkedEncodingError,
                    requests.exceptions.ContentDecodingError,
                    urllib3.exceptions.HTTPError,  # read1 on the raw stream raises these
                ) as err:
                    if self.stop.is_set():  # aborted: the error is ours, not the server's
                        raise KeyboardInterrupt from None
                    slow = isinstance(err, TooSlow)
                    failures = 1 if state.have > before and not slow else failures + 1
                    if failures >= self.policy.tries:
                        what = "slow tries" if slow else "tries without progress"
                        raise OperationFailed(
                            f"{f.name}: gave up after {failures} {what}: {_brief(err)} "
                            f"({shown}); {state.have} of {f.size} bytes are kept in {part}",
                            hint="check that the host is reachable from here (network, proxy, "
                            "DNS) or pass --mirror URL, then re-run provision: it resumes from "
                            "the kept bytes",
                        ) from None
                    state.outcome.retries += 1
                    delay = self.policy.delay(failures)
                    self.out.warn(
                        f"{f.name}: {_brief(err)}; retry in {delay:.2f}s from byte {state.have}"
                    )
                    if self.stop.wait(delay):
                        raise KeyboardInterrupt from None
                except (requests.RequestException, ValueError) as err:
                    # an invalid redirect target (`http://[::1`), too many redirects, ...
                    raise OperationFailed(
                        f"{f.name}: the request to {shown} failed: {_brief(err)}",
                        hint="check the url in the manifest (or --mirror) and where the server "
                        "redirects to",
                    ) from None
            os.fsync(fd)
            sha = state.h.hexdigest()
            if sha == f.sha256:  # the model file it becomes is readable as usual
                os.fchmod(fd, 0o644 & ~_umask())
            return sha
        finally:
            os.close(fd)

    def _restart(self, state: _Stream, why: str) -> None:
        """Drop the partial bytes and start the file over (said once per file)."""
        if state.outcome.restarts >= self.policy.tries:
            raise OperationFailed(
                f"{state.f.name}: {why}, {state.outcome.restarts} times; giving up ({state.shown})",
                hint="the server does not serve this file consistently; try a --mirror",
            )
        if not state.outcome.restarts:
            self.out.warn(f"{state.f.name}: {why}; restarting this file from byte 0")
        os.ftruncate(state.fd, 0)  # O_APPEND: the next write lands at byte 0
        state.tick(-state.have, None)
        state.have = 0
        state.h = hashlib.sha256()
        state.outcome.restarts += 1
        state.outcome.resumed_from = 0
        state.again = True

    def _same_size(self, state: _Stream, size: int | None) -> None:
        if size is not None and size != state.f.size:
            raise OperationFailed(
                f"{state.f.name}: the source has {size} bytes, the manifest says "
                f"{state.f.size} ({state.shown})",
                hint=_SIZE_FIX,
            )

    def _get_http(self, state: _Stream) -> None:
        headers = {"Accept-Encoding": "identity"}  # byte offsets must be the file's own
        if state.have:
            headers["Range"] = f"bytes={state.have}-"
        timeout = (self.policy.connect_timeout, self.policy.read_timeout)
        sources.HEADER_PHASE.why = None
        with (
            sources.http_session(self.policy.read_timeout) as session,
            session.get(state.url, headers=headers, stream=True, timeout=timeout) as r,
        ):
            if (code := r.status_code) == 206:
                start, _, total = content_range(r.headers.get("Content-Range", ""))
                self._same_size(state, total)
                if start != state.have:
                    self._restart(state, f"the server answered a different range ({start})")
                    return
            elif code == 200:
                length = r.headers.get("Content-Length", "")
                self._same_size(state, int(length) if length.isdigit() else None)
                if state.have:
                    self._restart(state, "the server ignored the Range request (HTTP 200)")
                    state.again = False  # this response is the whole file: keep reading it
            elif code == 416:
                self._same_size(state, content_range(r.headers.get("Content-Range", ""))[2])
                if not state.have:
                    raise OperationFailed(
                        f"{state.f.name}: HTTP 416 for a request without a range ({state.shown})",
                        hint="check the url in the manifest (or --mirror)",
                    )
                self._restart(state, "the server refused the range (HTTP 416)")
                return
            elif code >= 500 or code in (408, 429):
                raise _Retry(f"HTTP {code} from {state.shown}")
            else:
                raise OperationFailed(
                    f"{state.f.name}: HTTP {code} from {state.shown}",
                    hint="check the url in the manifest (or --mirror) and access to the server",
                )
            # read1: whatever has arrived, so a dropped connection loses no received byte
            # (iter_content would discard a partly filled chunk)
            floor = RateFloor(self.policy)
            while chunk := r.raw.read1(NET_CHUNK, decode_content=False):
                self._write(state, chunk)
                if slow := floor.add(len(chunk)):
                    raise TooSlow(slow)

    def _copy_file(self, state: _Stream) -> None:
        src = sources.file_source_path(state.url)
        # opened once, no link followed at any component, then checked on the descriptor
        # (where it is, what it is, its size) and read through it: a swap after the
        # up-front check reads nothing; nothing (not even the size) is told about a file
        # this user may not read; a FIFO or device never blocks or streams
        try:
            fd = sources.open_file_source(src, self.file_roots)
        except sources.OutsideRoots:  # this file fails, the others go on
            refused = sources.outside_roots(state.f.name, state.url, state.f.name)
            raise OperationFailed(refused.message, hint=refused.hint) from None
        except FileNotFoundError:
            raise OperationFailed(
                f"{state.f.name}: {src} does not exist ({state.shown})",
                hint="check the url in the manifest or the --mirror directory",
            ) from None
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                raise OperationFailed(
                    f"{state.f.name}: {src} is, or lies under, a symbolic link: a file:// "
                    "source is opened without following links",
                    hint="point the url at the file itself, by a path without links",
                ) from None
            raise OperationFailed(
                f"{state.f.name}: cannot read {src} ({err.strerror})",
                hint="provision as a user who may read the source, or fix the url",
            ) from None
        with os.fdopen(fd, "rb"):
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OperationFailed(
                    f"{state.f.name}: {src} is not a regular file ({state.shown})",
                    hint="point the url at the model file itself",
                )
            os.set_blocking(fd, True)
            self._same_size(state, st.st_size)
            while True:
                try:  # from where the part ends; a write error is the dest's
                    chunk = os.pread(fd, READ_BLOCK, state.have)
                except OSError as err:
                    raise _Retry(f"reading {src}: {err.strerror}") from None
                if not chunk:
                    return
                self._write(state, chunk)

    def _write(self, state: _Stream, chunk: bytes) -> None:
        if self.stop.is_set():
            raise KeyboardInterrupt
        if state.have + len(chunk) > state.f.size:
            raise OperationFailed(
                f"{state.f.name}: the source sent more than the manifest's {state.f.size} "
                f"bytes ({state.shown})",
                hint=_SIZE_FIX,
            )
        fault.point("provision.part", state.f.name)  # kill / ENOSPC at the write
        try:
            fsutil.write_all(state.fd, chunk)
        except OSError as err:
            err.filename = err.filename or str(self.dest / state.part)
            raise
        state.h.update(chunk)
        state.have += len(chunk)
        state.outcome.downloaded_bytes += len(chunk)
        state.tick(len(chunk), None)


@functools.cache
def _umask() -> int:
    """The process umask, read without changing it (os.umask would, for every thread)."""
    with suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def content_range(value: str) -> tuple[int | None, int | None, int | None]:
    """'bytes 10-99/100' -> (10, 99, 100); 'bytes */100' -> (None, None, 100); a part that
    is not a plain number (of at most 20 digits) is None, and all are for another unit."""

    def number(text: str) -> int | None:
        return int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None

    unit, _, spec = value.strip().partition(" ")
    rng, _, total = spec.partition("/")
    first, _, last = rng.partition("-")
    return (number(first), number(last), number(total)) if unit == "bytes" else (None,) * 3


def _brief(err: BaseException) -> str:
    """A one-line reason for a transient failure (requests/urllib3 texts are nested tuples)."""
    if isinstance(err, _Retry):
        return mask_text(str(err))
    why = getattr(sources.HEADER_PHASE, "why", None)
    if why:  # cut in the header phase: say why, not requests' nested text
        sources.HEADER_PHASE.why = None
        return str(why)
    if isinstance(err, requests.Timeout | urllib3.exceptions.TimeoutError):
        return "timed out"
    if isinstance(err, requests.exceptions.ChunkedEncodingError | urllib3.exceptions.ProtocolError):
        return "connection dropped"
    if isinstance(err, requests.ConnectionError):
        return "cannot connect" if err.response is None else "connection error"
    text = mask_text(str(err) or type(err).__name__)
    return text if len(text) < 200 else text[:197] + "..."
