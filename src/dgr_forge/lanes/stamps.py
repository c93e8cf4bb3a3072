"""File stamps: a file's sha256 with the stat record it was hashed under (issue 20).

A stamp is re-used without reading the file only when (size, mtime, ctime, inode) are those
recorded and the record is not racy (taken more than `RACY_NS` after the file's ctime). Any
write changes ctime, which no user process can set back, so an edit that keeps the old mtime
is re-hashed: the check git's index makes.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dgr_forge.core.fsutil import atomic_write_text, read_tree_file, sha256_bytes, sha256_file

# a stat taken this soon after the file's last change may miss a second change in the same
# (coarse) timestamp tick, so such a record is re-hashed next time; ticks are <= 10 ms
RACY_NS = 50_000_000
Stamp = list[Any]  # [sha256, size, mtime_ns, ctime_ns, inode, taken_ns]


def valid(stamp: Any) -> bool:
    return (
        isinstance(stamp, list)
        and len(stamp) == 6
        and isinstance(stamp[0], str)
        and all(type(n) is int for n in stamp[1:])
    )


def stamp(path: Path, known: Stamp | None = None, worker: Path | None = None) -> Stamp | None:
    """None when it is not a file; `known` is re-used while its stat record still holds.
    The root's own files by content; a path worker's (under `worker`) as `worker_file`."""
    taken = time.time_ns()
    tree = worker if worker is not None and path.is_relative_to(worker) else None
    try:  # a worker file's before the read: a change after it moves ctime
        st = os.stat(path) if tree is None else os.lstat(path)
    except OSError:
        return None
    if tree is None and not stat.S_ISREG(st.st_mode):  # the stat already taken: no second one
        return None
    seen = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    settled = known is not None and valid(known) and known[5] - st.st_ctime_ns > RACY_NS
    if settled and known is not None and known[1:5] == seen:
        return known
    if tree is None:  # non-blocking: a FIFO swapped in is exit 2, never a wait
        return [sha256_file(path), *seen, taken]
    data = worker_file(tree, path.relative_to(tree).as_posix(), missing_ok=True)
    return None if data is None else [sha256_bytes(data), *seen, taken]


def worker_file(top: Path, rel: str, *, missing_ok: bool = False) -> bytes | None:
    """A path worker's file `rel` as git stores it (a link's text); a FIFO is exit 2."""
    hint = "a path worker holds regular files and links only"
    return read_tree_file(top, rel, what="worker file", hint=hint, missing_ok=missing_ok)


def restamp(stamps: dict[str, Stamp], worker: Path | None = None) -> dict[str, Stamp]:
    return {p: s for p, known in stamps.items() if (s := stamp(Path(p), known, worker)) is not None}


def changed(stamps: dict[str, Stamp], worker: Path | None = None) -> list[str]:
    new = restamp(stamps, worker)
    return [path for path, known in stamps.items() if new.get(path, [None])[0] != known[0]]


def digest_of(snap: dict[str, Stamp], path: Path | None) -> str | None:
    stamp = snap.get(str(path)) if path is not None else None
    return str(stamp[0]) if stamp else None


def valid_map(data: Any, ok: Callable[[Any], bool] = valid) -> dict[str, Any]:
    """A map of stamps (or of values `ok` takes); anything malformed is dropped."""
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and ok(v)}


# ----------------------------------------------------------------------------- host cache

_HOST_MAX = 512  # entries: programs of a few toolchains
# in the forge's cache directory, never the home directory of whoever builds (issue 25 #4):
# programs' stamps (compilers: ~70 MB to hash), and their answers by file stat and argument
STAMPS_FILE = "program-stamps.json"
PROBES_FILE = "program-probes.json"


def _load(base: Path | None, name: str) -> Any:
    if base is None:
        return {}
    try:
        with (base / name).open("rb") as fh:
            return json.loads(fh.read(1 << 20))
    except (OSError, ValueError):
        return {}


def _save(base: Path, name: str, data: Mapping[str, object]) -> None:
    """Best effort; directories the forge makes are 0700 (what is in them is trusted)."""
    with contextlib.suppress(OSError):
        base.parent.parent.mkdir(parents=True, exist_ok=True)
        for d in (base.parent, base):
            d.mkdir(mode=0o700, exist_ok=True)
        atomic_write_text(base / name, json.dumps(data, sort_keys=True), mode=0o600)


def load_host(base: Path | None) -> dict[str, Stamp]:
    return valid_map(_load(base, STAMPS_FILE))


def save_host(base: Path | None, new: dict[str, Stamp]) -> None:
    if base is not None and new:
        merged = {**load_host(base), **new}
        _save(base, STAMPS_FILE, dict(sorted(merged.items(), key=lambda kv: kv[1][5])[-_HOST_MAX:]))


def load_host_probes(base: Path | None) -> dict[str, str]:
    return valid_map(_load(base, PROBES_FILE), lambda v: isinstance(v, str))


def save_host_probes(base: Path | None, probes: dict[str, str]) -> None:
    if base is not None and probes != load_host_probes(base):
        _save(base, PROBES_FILE, dict(list(probes.items())[-_HOST_MAX:]))
