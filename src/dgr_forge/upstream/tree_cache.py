"""Per-patch trees the manifest does not record, computed once and kept in the workspace.

A series exported without per-patch trees leaves `status` and a no-op `patch` only one way
to know what each patch should produce: apply the series on a scratch index (two git calls
per patch). The trees that gives are kept in the workspace's git dir
(`.git/dgr/trees.json`, beside `series_base`'s record), each keyed by the pin and the
sha256 of every patch up to it, so a later run asks git nothing for them, and a changed
pin or patch byte misses the cache instead of reading a stale tree. Only the current
series is kept (the file stays the size of the series). The workspace is scratch space:
a missing or unreadable cache is recomputed, never an error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import msgspec

from dgr_forge.core.fsutil import atomic_write_text
from dgr_forge.core.gitutil import HEX40

CACHE_FILE = "dgr/trees.json"
SCHEMA = 1
MAX_BYTES = 16 << 20  # 100,000 patches' entries fit in a tenth of it


class _Cache(msgspec.Struct):
    """What `.git/dgr/trees.json` holds: key (`keys`) -> the tree after that patch."""

    schema: int
    trees: dict[str, str]


def _path(src: Path) -> Path:
    return src / ".git" / CACHE_FILE


def keys(pin: str, datas: Sequence[bytes]) -> list[str]:
    """Key i: the pin and the digests of patches 0..i (what tree i depends on)."""
    chain = hashlib.sha256(f"dgr-trees\0{pin}".encode())
    out: list[str] = []
    for data in datas:
        chain.update(b"\0" + hashlib.sha256(data).digest())
        out.append(chain.copy().hexdigest())
    return out


def lookup(src: Path, pin: str, datas: Sequence[bytes]) -> list[str | None]:
    """The cached tree after each patch (None where not cached)."""
    try:
        if _path(src).stat().st_size > MAX_BYTES:
            raise ValueError("not this cache")  # a series never needs this much: recompute
        cache = msgspec.json.decode(_path(src).read_bytes(), type=_Cache)
        trees = cache.trees if cache.schema == SCHEMA else {}
    except (OSError, ValueError):  # msgspec's DecodeError is one
        trees = {}
    return [t if HEX40.fullmatch(t := trees.get(key, "")) else None for key in keys(pin, datas)]


def store(src: Path, pin: str, datas: Sequence[bytes], trees: Sequence[str | None]) -> None:
    """Keep the known trees of this series (`trees[i]` after patch i; None: unknown)."""
    if not (src / ".git").is_dir():
        return
    entries = {
        key: tree
        for key, tree in zip(keys(pin, datas), trees, strict=False)
        if tree is not None and HEX40.fullmatch(tree)
    }
    if not entries:
        return
    path = _path(src)
    try:
        path.parent.mkdir(exist_ok=True)
        text = msgspec.json.format(msgspec.json.encode(_Cache(SCHEMA, entries)), indent=1)
        atomic_write_text(path, text.decode() + "\n")
    except OSError:
        pass  # a cache: a read-only workspace computes the trees again next time
