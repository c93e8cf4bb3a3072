"""Exact model artifacts on the right disk: provision (resumable download), verify, manifest.

* `provision`: refuse a destination under /home or without room; stream each missing file
  into `NAME.part`, resume with an HTTP Range request from the bytes already there, retry
  dropped connections, timeouts and 5xx with exponential backoff, check size and sha256
  (hashed while streaming), then fsync + atomic rename. Files run in parallel.
* `verify`: size + sha256 of every file (8 MiB reads; hashlib releases the GIL, so files
  hash in parallel) and split consistency read from the GGUF headers.
* `build_manifest`: a manifest from the files in a directory (what a release engineer runs).

A cache `<dest>/.dgr-verified.json` remembers (size, mtime_ns, ctime_ns, inode, device) ->
sha256 of files this tool verified, so `provision` skips present files without re-hashing
them. Any write to a file changes its ctime, which `touch` cannot set back, so a changed
file never matches its entry; `verify` never trusts the cache (it always re-hashes).
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import requests
import urllib3

from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.fsutil import atomic_write_text
from dgr_forge.core.output import ProgressSink, Reporter
from dgr_forge.models import gguf_split
from dgr_forge.models import manifest as models
from dgr_forge.models.manifest import ModelFile, ModelManifest

if TYPE_CHECKING:
    from hashlib import _Hash

_T = TypeVar("_T")
_R = TypeVar("_R")

READ_BLOCK = 8 << 20  # big reads: hashing runs at disk speed, few syscalls
NET_CHUNK = 1 << 20
CACHE_FILE = ".dgr-verified.json"
LOCK_FILE = ".dgr-provision.lock"
# Model files must not land on the home file system (small, quota'd, backed up).
FORBIDDEN_ROOTS = ("/home",)


def _env_number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass(frozen=True)
class RetryPolicy:
    """How hard provisioning tries: `tries` consecutive failures without progress per file."""

    tries: int = 5
    backoff: float = 1.0  # first delay in seconds, doubled per failure, capped at 30 s
    connect_timeout: float = 15.0
    read_timeout: float = 60.0

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """DGR_ARTIFACTS_{TRIES,BACKOFF,TIMEOUT} override the defaults (tests use short ones)."""
        return cls(
            tries=max(1, int(_env_number("DGR_ARTIFACTS_TRIES", cls.tries))),
            backoff=max(0.0, _env_number("DGR_ARTIFACTS_BACKOFF", cls.backoff)),
            read_timeout=max(0.1, _env_number("DGR_ARTIFACTS_TIMEOUT", cls.read_timeout)),
        )

    def delay(self, failures: int) -> float:
        return float(min(self.backoff * 2 ** (failures - 1), 30.0))


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


# ----------------------------------------------------------------------------- hashing


def hash_file(
    path: Path,
    h: _Hash | None = None,
    on_bytes: Callable[[int], None] | None = None,
    stop: threading.Event | None = None,
) -> _Hash:
    """Feed `path` into `h` (a new sha256 by default) with 8 MiB reads into one buffer."""
    h = h if h is not None else hashlib.sha256()
    buf = bytearray(READ_BLOCK)
    view = memoryview(buf)
    with path.open("rb", buffering=0) as f:
        if hasattr(os, "posix_fadvise"):
            with suppress(OSError):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while n := f.readinto(buf):
            h.update(view[:n])  # releases the GIL: other files hash at the same time
            if on_bytes is not None:
                on_bytes(n)
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt
    return h


class VerifiedCache:
    """`<dest>/.dgr-verified.json`: files this tool hashed, keyed by an exact stat signature."""

    def __init__(self, dest: Path) -> None:
        self.path = dest / CACHE_FILE
        self._lock = threading.Lock()
        self.entries: dict[str, dict[str, Any]] = {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("files"), dict):
                self.entries = {k: v for k, v in data["files"].items() if isinstance(v, dict)}
        except (OSError, ValueError):
            pass  # no cache, or a broken one: everything gets hashed

    @staticmethod
    def signature(st: os.stat_result) -> dict[str, int]:
        return {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
            "ino": st.st_ino,
            "dev": st.st_dev,
        }

    def lookup(self, name: str, st: os.stat_result) -> str | None:
        with self._lock:
            entry = self.entries.get(name)
        if entry is None:
            return None
        sig = self.signature(st)
        if any(entry.get(k) != v for k, v in sig.items()):
            return None
        sha = entry.get("sha256")
        return sha if isinstance(sha, str) else None

    def record(self, name: str, st: os.stat_result, sha: str) -> None:
        with self._lock:
            self.entries[name] = {**self.signature(st), "sha256": sha}

    def forget(self, name: str) -> None:
        with self._lock:
            self.entries.pop(name, None)

    def save(self) -> None:
        with self._lock:
            text = json.dumps({"version": 1, "files": self.entries}, indent=1, sort_keys=True)
        with suppress(OSError):  # only a speed-up; never fail a run over it
            atomic_write_text(self.path, text + "\n")


class _Progress:
    """Thread-safe wrapper over a ProgressSink: one bar per file plus a total."""

    def __init__(self, sink: ProgressSink, total: int, label: str) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self._done = 0
        self._total = total
        self._label = label
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


# ----------------------------------------------------------------------------- destination


def check_destination(dest: Path) -> Path:
    """The destination with symlinks resolved; BadInput if it is (or would be) under /home."""
    resolved = Path(os.path.realpath(Path.cwd() / dest.expanduser()))
    for root in FORBIDDEN_ROOTS:
        for form in {Path(root), Path(os.path.realpath(root))}:
            if resolved == form or resolved.is_relative_to(form):
                raise BadInput(
                    f"--dest {dest}: resolves to {resolved}, under {root}: model artifacts "
                    f"are never stored under {root}",
                    hint="pass a directory on the data disk, e.g. --dest /srv/models/<name> "
                    "(symlinks are followed, so a link into /home is refused too)",
                    details={"dest": str(dest), "resolved": str(resolved)},
                )
    if resolved.exists() and not resolved.is_dir():
        raise BadInput(
            f"--dest {dest}: {resolved} exists and is not a directory",
            hint="pass a directory (it is created if missing)",
            details={"dest": str(dest)},
        )
    return resolved


def nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor or "/")


def missing_bytes(dest: Path, files: tuple[ModelFile, ...]) -> int:
    """Bytes still to download: a present file of the right size counts as done."""
    need = 0
    for f in files:
        final = dest / f.name
        if final.is_file() and final.stat().st_size == f.size:
            continue
        part = dest / (f.name + models.PART_SUFFIX)
        have = part.stat().st_size if part.is_file() else 0
        need += f.size - have if have <= f.size else f.size
    return need


def check_space(dest: Path, files: tuple[ModelFile, ...]) -> tuple[int, int]:
    need = missing_bytes(dest, files)
    anchor = nearest_existing(dest)
    free = shutil.disk_usage(anchor).free
    if need > free:
        raise BadInput(
            f"--dest {dest}: not enough free space: {human(need)} ({need} bytes) still to "
            f"download, {human(free)} ({free} bytes) free on the file system of {anchor}",
            hint="free space there or pass a --dest on a larger disk",
            details={"dest": str(dest), "needed_bytes": need, "free_bytes": free},
        )
    return need, free


@contextmanager
def dest_lock(dest: Path, out: Reporter) -> Iterator[None]:
    """One provision per destination at a time: two writers on one NAME.part corrupt it."""
    if sys.platform == "win32":  # pragma: no cover - the runtime hosts are POSIX
        yield
        return
    import fcntl

    with (dest / LOCK_FILE).open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            out.info(f"waiting for another provision into {dest} to finish ...")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- provision


@dataclass
class FileOutcome:
    name: str
    size: int
    status: str = "pending"  # present | downloaded | failed
    downloaded_bytes: int = 0
    resumed_from: int = 0  # bytes of NAME.part reused instead of downloaded again
    restarts: int = 0  # times the file started over from byte 0 (server ignored Range)
    retries: int = 0
    error: str | None = None


@dataclass
class ProvisionResult:
    model: str
    dest: Path
    files: list[FileOutcome]
    seconds: float
    split_problems: dict[str, list[str]] = field(default_factory=dict)

    @property
    def failed(self) -> list[FileOutcome]:
        return [f for f in self.files if f.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.split_problems

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "dest": str(self.dest),
            "files": [asdict(f) for f in self.files],
            "downloaded_bytes": sum(f.downloaded_bytes for f in self.files),
            "seconds": round(self.seconds, 3),
            "failed": [f.name for f in self.failed],
            "split_problems": self.split_problems,
        }


class _Retry(Exception):
    """A transient failure: the bytes so far are kept and the next try resumes."""


def source_url(f: ModelFile, mirror: str | None) -> str:
    return models.file_url(mirror, f.name) if mirror else f.url


def check_mirror(mirror: str | None) -> str | None:
    """A mirror base URL; a plain directory path becomes a file:// URL."""
    if mirror is None:
        return None
    if "://" not in mirror:
        path = Path(mirror).expanduser()
        if path.is_dir():
            return path.resolve().as_uri()
    problem = models.check_url(mirror)
    if problem:
        raise BadInput(
            f"--mirror: {problem}",
            hint="pass a base URL (http://, https://, file://) or a directory holding the files",
            details={"mirror": mirror},
        )
    return mirror


class _Downloader:
    """Brings one file to `dest` exactly; shared state is only the cache and progress."""

    def __init__(
        self,
        dest: Path,
        out: Reporter,
        cache: VerifiedCache,
        progress: _Progress,
        policy: RetryPolicy,
        stop: threading.Event,
    ) -> None:
        self.dest = dest
        self.out = out
        self.cache = cache
        self.progress = progress
        self.policy = policy
        self.stop = stop

    def run(self, f: ModelFile, url: str) -> FileOutcome:
        outcome = FileOutcome(name=f.name, size=f.size)
        tick = self.progress.add(f.name, f.size)
        try:
            self._provision(f, url, outcome, tick)
        except OperationFailed as err:
            outcome.status = "failed"
            outcome.error = err.message
            part = self.dest / (f.name + models.PART_SUFFIX)
            if part.is_file() and part.stat().st_size == 0:
                part.unlink()  # nothing worth resuming
        except OSError as err:  # the destination, not the source: disk full, permissions
            outcome.status = "failed"
            outcome.error = f"{f.name}: {err.strerror or err} ({err.filename or self.dest})"
        return outcome

    def _provision(
        self, f: ModelFile, url: str, outcome: FileOutcome, tick: Callable[[int, str | None], None]
    ) -> None:
        final = self.dest / f.name
        if final.is_file():
            st = final.stat()
            if st.st_size == f.size:
                sha = self.cache.lookup(f.name, st)
                if sha is None:
                    sha = hash_file(final, stop=self.stop).hexdigest()
                    self.cache.record(f.name, final.stat(), sha)
                if sha == f.sha256:
                    stale = self.dest / (f.name + models.PART_SUFFIX)
                    stale.unlink(missing_ok=True)  # left by an older run; the file is done
                    tick(f.size, f"{f.name} (present)")
                    outcome.status = "present"
                    return
                self.out.warn(
                    f"{f.name}: on disk with sha256 {sha}, manifest says {f.sha256}; "
                    "downloading it again"
                )
            else:
                self.out.warn(
                    f"{f.name}: on disk with {st.st_size} bytes, manifest says {f.size}; "
                    "downloading it again"
                )
            self.cache.forget(f.name)
        part = self.dest / (f.name + models.PART_SUFFIX)
        sha = self._download(f, url, part, outcome, tick)
        if sha != f.sha256:
            part.unlink(missing_ok=True)
            raise OperationFailed(
                f"{f.name}: sha256 mismatch after download: expected {f.sha256}, got {sha} "
                f"(from {url}); the partial file was removed",
                hint="re-run to download again; if it repeats, the manifest or the server is wrong",
            )
        os.replace(part, final)
        _fsync_dir(self.dest)
        self.cache.record(f.name, final.stat(), sha)
        outcome.status = "downloaded"

    def _download(
        self,
        f: ModelFile,
        url: str,
        part: Path,
        outcome: FileOutcome,
        tick: Callable[[int, str | None], None],
    ) -> str:
        """Fill `part` to exactly f.size bytes; return its sha256 (hashed while streaming)."""
        h = hashlib.sha256()
        have = part.stat().st_size if part.is_file() else 0
        if have > f.size:
            self.out.warn(f"{part.name} is larger than the manifest's size; starting over")
            part.unlink()
            have = 0
        if have:
            hash_file(part, h, stop=self.stop)
            outcome.resumed_from = have
            tick(have, None)
            self.out.info(f"{f.name}: resuming at byte {have} of {f.size}")
        state = _Stream(f=f, url=url, have=have, h=h, outcome=outcome, tick=tick)
        failures = 0
        with part.open("ab") as fp:
            state.fp = fp
            while state.have < f.size:
                before = state.have
                try:
                    if urlsplit(url).scheme == "file":
                        self._copy_file(state)
                    else:
                        self._get_http(state)
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
                    fp.flush()
                    if self.stop.is_set():  # aborted: the error is ours, not the server's
                        raise KeyboardInterrupt from None
                    failures = 1 if state.have > before else failures + 1
                    if failures >= self.policy.tries:
                        raise OperationFailed(
                            f"{f.name}: gave up after {failures} tries without progress: "
                            f"{_brief(err)} ({url}); {state.have} of {f.size} bytes are kept "
                            f"in {part.name}",
                            hint="re-run provision: it resumes from the kept bytes",
                        ) from None
                    outcome.retries += 1
                    delay = self.policy.delay(failures)
                    self.out.warn(
                        f"{f.name}: {_brief(err)}; retry in {delay:.2f}s from byte {state.have}"
                    )
                    if self.stop.wait(delay):
                        raise KeyboardInterrupt from None
            fp.flush()
            os.fsync(fp.fileno())
        return state.h.hexdigest()

    def _restart(self, state: _Stream, why: str) -> None:
        """Drop the partial bytes and start the file over (said once per file)."""
        if state.outcome.restarts >= self.policy.tries:
            raise OperationFailed(
                f"{state.f.name}: {why}, {state.outcome.restarts} times; giving up ({state.url})",
                hint="the server does not serve this file consistently; try a --mirror",
            )
        if not state.said_restart:
            self.out.warn(f"{state.f.name}: {why}; restarting this file from byte 0")
            state.said_restart = True
        assert state.fp is not None
        state.fp.truncate(0)
        state.tick(-state.have, None)
        state.have = 0
        state.h = hashlib.sha256()
        state.outcome.restarts += 1
        state.outcome.resumed_from = 0
        state.again = True

    def _wrong_size(self, state: _Stream, server_size: int) -> OperationFailed:
        return OperationFailed(
            f"{state.f.name}: the source has {server_size} bytes, the manifest says "
            f"{state.f.size} ({state.url})",
            hint="fix size (and sha256) in the manifest, or point it at the right file",
        )

    def _get_http(self, state: _Stream) -> None:
        headers = {"Accept-Encoding": "identity"}  # byte offsets must be the file's own
        if state.have:
            headers["Range"] = f"bytes={state.have}-"
        timeout = (self.policy.connect_timeout, self.policy.read_timeout)
        with requests.get(state.url, headers=headers, stream=True, timeout=timeout) as r:
            self._read_response(state, r)

    def _read_response(self, state: _Stream, r: requests.Response) -> None:
        code = r.status_code
        if code == 206:
            start, total = _content_range(r.headers.get("Content-Range", ""))
            if total is not None and total != state.f.size:
                raise self._wrong_size(state, total)
            if start != state.have:
                self._restart(state, f"the server answered a different range ({start})")
                return
        elif code == 200:
            length = r.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) != state.f.size:
                raise self._wrong_size(state, int(length))
            if state.have:
                self._restart(state, "the server ignored the Range request (HTTP 200)")
                state.again = False  # this response is the whole file: keep reading it
        elif code == 416:
            _, total = _content_range(r.headers.get("Content-Range", ""))
            if total is not None and total != state.f.size:
                raise self._wrong_size(state, total)
            if not state.have:
                raise OperationFailed(
                    f"{state.f.name}: HTTP 416 for a request without a range ({state.url})",
                    hint="check the url in the manifest (or --mirror)",
                )
            self._restart(state, "the server refused the range (HTTP 416)")
            return
        elif code >= 500 or code in (408, 429):
            raise _Retry(f"HTTP {code} from {state.url}")
        else:
            raise OperationFailed(
                f"{state.f.name}: HTTP {code} from {state.url}",
                hint="check the url in the manifest (or --mirror) and access to the server",
            )
        # read1: whatever has arrived, so a dropped connection loses no received byte
        # (iter_content would discard a partly filled chunk)
        while chunk := r.raw.read1(NET_CHUNK, decode_content=False):
            self._write(state, chunk)

    def _copy_file(self, state: _Stream) -> None:
        src = Path(url2pathname(unquote(urlsplit(state.url).path)))
        try:
            size = src.stat().st_size
        except FileNotFoundError:
            raise OperationFailed(
                f"{state.f.name}: {src} does not exist ({state.url})",
                hint="check the url in the manifest or the --mirror directory",
            ) from None
        except OSError as err:
            raise _Retry(f"cannot stat {src}: {err.strerror}") from None
        if size != state.f.size:
            raise self._wrong_size(state, size)
        try:
            with src.open("rb") as s:
                s.seek(state.have)
                while chunk := s.read(READ_BLOCK):
                    self._write(state, chunk)
        except OSError as err:
            raise _Retry(f"reading {src}: {err.strerror}") from None

    def _write(self, state: _Stream, chunk: bytes) -> None:
        if self.stop.is_set():
            raise KeyboardInterrupt
        if state.have + len(chunk) > state.f.size:
            raise OperationFailed(
                f"{state.f.name}: the source sent more than the manifest's {state.f.size} "
                f"bytes ({state.url})",
                hint="fix size (and sha256) in the manifest, or point it at the right file",
            )
        assert state.fp is not None
        state.fp.write(chunk)
        state.h.update(chunk)
        state.have += len(chunk)
        state.outcome.downloaded_bytes += len(chunk)
        state.tick(len(chunk), None)


@dataclass
class _Stream:
    f: ModelFile
    url: str
    have: int
    h: _Hash
    outcome: FileOutcome
    tick: Callable[[int, str | None], None]
    fp: Any = None
    said_restart: bool = False
    again: bool = False  # the last response made us start over; not a failure


def _content_range(value: str) -> tuple[int | None, int | None]:
    """'bytes 10-99/100' -> (10, 100); 'bytes */100' -> (None, 100)."""
    try:
        unit, _, spec = value.strip().partition(" ")
        rng, _, total = spec.partition("/")
        if unit != "bytes":
            return None, None
        start = None if rng == "*" else int(rng.split("-", 1)[0])
        return start, (None if total in ("", "*") else int(total))
    except ValueError:
        return None, None


def _brief(err: BaseException) -> str:
    """A one-line reason for a transient failure (requests/urllib3 texts are nested tuples)."""
    if isinstance(err, _Retry):
        return str(err)
    if isinstance(err, requests.Timeout | urllib3.exceptions.TimeoutError):
        return "timed out"
    if isinstance(err, requests.exceptions.ChunkedEncodingError | urllib3.exceptions.ProtocolError):
        return "connection dropped"
    if isinstance(err, requests.ConnectionError):
        return "cannot connect" if err.response is None else "connection error"
    text = str(err) or type(err).__name__
    return text if len(text) < 200 else text[:197] + "..."


def _in_daemon_threads(
    fn: Callable[[_T], _R], items: list[_T], jobs: int, stop: threading.Event
) -> list[_R]:
    """fn over items, `jobs` at a time, in daemon threads.

    Not a ThreadPoolExecutor: its threads are joined at exit, so Ctrl-C would wait for a
    worker blocked in recv() until its read timeout. Daemon workers just end with the
    process; a NAME.part they were appending to is always a prefix of the file, which the
    next run hashes and resumes from.
    """
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


def provision(
    m: ModelManifest,
    dest: Path,
    out: Reporter,
    *,
    mirror: str | None = None,
    jobs: int = 4,
    policy: RetryPolicy | None = None,
) -> ProvisionResult:
    """Bring every file of `m` into `dest`, exactly; refusals raise BadInput before any write."""
    started = time.monotonic()
    mirror = check_mirror(mirror)
    target = check_destination(dest)
    need, _ = check_space(target, m.files)
    policy = policy or RetryPolicy.from_env()
    target.mkdir(parents=True, exist_ok=True)
    out.step(
        f"provisioning {m.name}: {len(m.files)} files, {human(m.total_size)}, "
        f"{human(need)} to download, into {target}"
    )
    stop = threading.Event()
    outcomes: dict[str, FileOutcome] = {}
    with dest_lock(target, out):
        cache = VerifiedCache(target)
        try:
            with out.progress(transfer=True) as sink:
                progress = _Progress(sink, m.total_size, "total")
                dl = _Downloader(target, out, cache, progress, policy, stop)
                todo = [(f, source_url(f, mirror)) for f in m.files]
                for outcome in _in_daemon_threads(lambda t: dl.run(*t), todo, jobs, stop):
                    outcomes[outcome.name] = outcome
        finally:
            cache.save()
    files = [outcomes[f.name] for f in m.files]
    for o in files:
        if o.status == "failed":
            out.error(o.error or f"{o.name}: failed")
    ok_names = {o.name for o in files if o.status != "failed"}
    split_problems = gguf_split.check(target, [f for f in m.files if f.name in ok_names])
    for name, problems in split_problems.items():
        for problem in problems:
            out.error(f"{name}: {problem}")
    result = ProvisionResult(
        model=m.name,
        dest=target,
        files=files,
        seconds=time.monotonic() - started,
        split_problems=split_problems,
    )
    got = sum(o.downloaded_bytes for o in files)
    present = sum(1 for o in files if o.status == "present")
    out.info(
        f"{m.name}: {len(files) - len(result.failed)}/{len(files)} files ready in {target} "
        f"({present} already present, {human(got)} downloaded in {result.seconds:.1f}s)"
    )
    return result


# ----------------------------------------------------------------------------- verify


@dataclass
class FileCheck:
    name: str
    size: int
    ok: bool
    problems: list[str]
    sha256: str | None = None  # what is on disk, when it was hashed


@dataclass
class VerifyResult:
    model: str
    dest: Path
    files: list[FileCheck]
    seconds: float

    @property
    def bad(self) -> list[FileCheck]:
        return [f for f in self.files if not f.ok]

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "dest": str(self.dest),
            "files": [asdict(f) for f in self.files],
            "bad": [f.name for f in self.bad],
            "bytes": sum(f.size for f in self.files),
            "seconds": round(self.seconds, 3),
        }


def default_jobs() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def hash_many(
    paths: list[Path], out: Reporter, jobs: int, label: str = "hashing"
) -> dict[Path, str]:
    """sha256 of each path, `jobs` files at a time, with progress."""
    sizes = {p: p.stat().st_size for p in paths}
    stop = threading.Event()
    with out.progress(transfer=True) as sink:
        progress = _Progress(sink, sum(sizes.values()), label)

        def one(p: Path) -> tuple[Path, str]:
            tick = progress.add(p.name, sizes[p])
            return p, hash_file(p, on_bytes=lambda n: tick(n, None), stop=stop).hexdigest()

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            try:
                return dict(pool.map(one, paths))
            except BaseException:
                stop.set()
                raise


def verify(m: ModelManifest, dest: Path, out: Reporter, *, jobs: int | None = None) -> VerifyResult:
    started = time.monotonic()
    target = Path(os.path.realpath(Path.cwd() / dest.expanduser()))
    if not target.is_dir():
        raise BadInput(
            f"--dest {dest}: {target} is not a directory",
            hint=f"pass the directory the model was provisioned into "
            f"(`dgr-forge artifacts provision {m.shown} --dest DIR`)",
            details={"dest": str(dest)},
        )
    out.step(f"verifying {m.name}: {len(m.files)} files, {human(m.total_size)} in {target}")
    problems: dict[str, list[str]] = {f.name: [] for f in m.files}
    to_hash: list[Path] = []
    for f in m.files:
        path = target / f.name
        s = models.split_name(f.name)
        part = f" (split part {s.no} of {s.count})" if s else ""
        if not path.is_file():
            problems[f.name].append(f"missing{part}")
        elif (size := path.stat().st_size) != f.size:
            problems[f.name].append(f"wrong size: {size} bytes, manifest says {f.size}")
        else:
            to_hash.append(path)
    shas = hash_many(to_hash, out, jobs or default_jobs(), "verifying")
    cache = VerifiedCache(target)
    for f in m.files:
        path = target / f.name
        sha = shas.get(path)
        if sha is None:
            continue
        if sha != f.sha256:
            problems[f.name].append(f"wrong sha256: expected {f.sha256}, actual {sha}")
            cache.forget(f.name)
        else:
            cache.record(f.name, path.stat(), sha)
    present = [f for f in m.files if (target / f.name).is_file()]
    for name, extra in gguf_split.check(target, present).items():
        problems[name].extend(extra)
    if os.access(target, os.W_OK):
        cache.save()
    checks = [
        FileCheck(f.name, f.size, not problems[f.name], problems[f.name], shas.get(target / f.name))
        for f in m.files
    ]
    result = VerifyResult(m.name, target, checks, time.monotonic() - started)
    for c in result.bad:
        for problem in c.problems:
            out.error(f"{c.name}: {problem}")
    if not result.bad:
        rate = m.total_size / result.seconds if result.seconds > 0 else 0.0
        out.info(
            f"{m.name}: all {len(checks)} files verified ({human(m.total_size)} at {human(rate)}/s)"
        )
    return result


# ----------------------------------------------------------------------------- manifest


@dataclass
class BuiltManifest:
    name: str
    files: list[ModelFile]
    text: str


def build_manifest(
    directory: Path,
    name: str,
    url_base: str,
    out: Reporter,
    *,
    source_revision: str | None = None,
    jobs: int | None = None,
) -> BuiltManifest:
    """Hash the files in `directory` into a model manifest (validated by the loader)."""
    if not directory.is_dir():
        raise BadInput(
            f"{directory}: not a directory",
            hint="pass the directory that holds the model files",
            details={"dir": str(directory)},
        )
    if not models.NAME_RE.fullmatch(name) or ".." in name:
        raise BadInput(
            f"--name: {name!r} is not a plain name",
            hint="use letters, digits, '.', '_' or '-', e.g. \"deepseek-v4\"",
        )
    if source_revision is not None and not models.HEX40_RE.fullmatch(source_revision):
        raise BadInput(
            f"--source-revision: {source_revision!r} is not a full 40-hex revision",
            hint="pass the checkpoint's full lowercase commit id (branch or tag names move)",
        )
    problem = models.check_url(url_base)
    if problem:
        raise BadInput(
            f"--url-base: {problem}",
            hint="pass the base URL the files will be served from, e.g. https://host/models/NAME",
        )
    entries = sorted(
        (
            p
            for p in directory.iterdir()
            if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".part")
        ),
        key=lambda p: p.name,
    )
    if not entries:
        raise BadInput(
            f"{directory}: no model files in it",
            hint="pass the directory that holds the model files (hidden and .part files "
            "are skipped, subdirectories are not read)",
            details={"dir": str(directory)},
        )
    for p in entries:
        bad = models.check_file_name(p.name)
        if bad:
            raise BadInput(
                f"{directory}: {bad}",
                hint="rename the file to letters, digits, '.', '_' and '-'",
                details={"dir": str(directory), "file": p.name},
            )
    shas = hash_many(entries, out, jobs or default_jobs(), "hashing")
    files = [
        ModelFile(
            name=p.name,
            size=p.stat().st_size,
            sha256=shas[p],
            url=models.file_url(url_base, p.name),
        )
        for p in entries
    ]
    text = models.dumps(name, files, source_revision)
    models.loads(text.encode(), shown=f"manifest for {directory}")  # same rules as on load
    split_problems = gguf_split.check(directory, files)
    if split_problems:
        listed = "; ".join(f"{n}: {', '.join(ps)}" for n, ps in split_problems.items())
        raise BadInput(
            f"{directory}: the GGUF split set is inconsistent: {listed}",
            hint="re-split the model (llama-gguf-split) so every part's header matches its name",
            details={"dir": str(directory), "split_problems": split_problems},
        )
    return BuiltManifest(name=name, files=files, text=text)
