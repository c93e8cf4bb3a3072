"""`artifacts provision`: every file of a model into its destination, exactly.

Refusals (a bad environment number, a bad mirror, a destination under /home or without
room, a planted non-file where a model file belongs) raise BadInput before any byte is
written. Files run in parallel (see `download` for one file); the split headers of the
files that arrived are checked last.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dgr_forge.core.output import Reporter
from dgr_forge.models import gguf_split
from dgr_forge.models.dest import DestDir, check_destination, check_space, dest_lock
from dgr_forge.models.download import (
    Downloader,
    FileOutcome,
    RetryPolicy,
    check_file_sources,
    check_mirror,
    source_url,
)
from dgr_forge.models.hashing import Progress, VerifiedCache, human
from dgr_forge.models.manifest import ModelManifest

_T = TypeVar("_T")
_R = TypeVar("_R")


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


def in_daemon_threads(
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
    policy = policy or RetryPolicy.from_env()
    mirror = check_mirror(mirror)
    check_file_sources(m.files, mirror, m.shown)
    target = check_destination(dest)
    need, _ = check_space(target, m.files)
    target.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    outcomes: dict[str, FileOutcome] = {}
    with DestDir(target) as held, dest_lock(held, out):
        held.refuse_planted(m.files)
        out.step(
            f"provisioning {m.name}: {len(m.files)} files, {human(m.total_size)}, "
            f"{human(need)} to download, into {target}"
        )
        cache = VerifiedCache(target, held.fd)  # saved through the held descriptor
        try:
            with out.progress(transfer=True) as sink:
                progress = Progress(sink, m.total_size, "total")
                dl = Downloader(held, out, cache, progress, policy, stop)
                todo = [(f, source_url(f, mirror)) for f in m.files]
                for outcome in in_daemon_threads(lambda t: dl.run(*t), todo, jobs, stop):
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
