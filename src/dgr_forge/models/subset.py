"""Which files a layer range needs (whole files only: the manifest's sha256 covers them), and
what a destination was provisioned for (docs/model-artifacts.md, 'Layer ranges').
"""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import dataclass
from typing import Annotated

import msgspec
from msgspec import Struct

from dgr_forge.core.errors import BadInput
from dgr_forge.core.structs import d
from dgr_forge.models import layermap
from dgr_forge.models.gguf_split import metadata_file
from dgr_forge.models.hashing import read_small, write_in
from dgr_forge.models.layermap import EMBEDDINGS, HEAD, Ranges
from dgr_forge.models.manifest import ModelFile, ModelManifest

RECORD_FILE = ".dgr-layers.json"
MAX_RECORD_BYTES = 64 << 10


class Layers(Struct, kw_only=True):
    """with `--layers` (or, for `verify`, the destination's record): the layers the files
    listed were chosen for"""

    layers: Annotated[str, d("merged layer ranges, e.g. `11-21`")]
    first: Annotated[bool, d("the embeddings' files included (`--first`, or a range from layer 0)")]
    last: Annotated[
        bool, d("the output head's files included (`--last`, or a range to the last layer)")
    ]


class Provisioned(Struct, kw_only=True):
    """with a layer map: what the destination records it was provisioned for (the union of
    every successful run's ranges); also the record file's keys"""

    model: Annotated[str, d("the model's name")]
    layers: Annotated[str, d("layer ranges")]
    first: Annotated[bool, d("the embeddings")]
    last: Annotated[bool, d("the output head")]

    @property
    def ranges(self) -> Ranges:
        return layermap.parse(self.layers)  # checked when read

    def union(self, sel: Selection) -> Provisioned:
        return Provisioned(
            model=self.model,
            layers=layermap.format_ranges((*self.ranges, *sel.ranges)),
            first=self.first or sel.first,
            last=self.last or sel.last,
        )


class Serves(Struct, kw_only=True):
    """with a layer map: what the files that verified can serve"""

    layers: Annotated[str, d('layer ranges, e.g. `0-10,22-32` (`""`: none)')]
    first: Annotated[bool, d("the embeddings' files verified")]
    last: Annotated[bool, d("the output head's files verified")]


@dataclass(frozen=True)
class Selection:
    ranges: Ranges
    first: bool
    last: bool
    files: tuple[ModelFile, ...]

    def shown(self) -> Layers:
        return Layers(layers=layermap.format_ranges(self.ranges), first=self.first, last=self.last)


def _needs_map(m: ModelManifest) -> BadInput:
    return BadInput(
        f"{m.shown}: the manifest has no layer map, so --layers cannot choose its files",
        hint=f"add one from the split headers: `dgr-forge artifacts map {m.shown}` (over HTTP "
        "Range requests, or `--dest DIR` where the files are), then re-run",
        details={"file": m.shown},
    )


def parse_layers(m: ModelManifest, text: str) -> Ranges:
    """`--layers` for `m`: exit 2 for a manifest without a map, a malformed list, or a layer
    the model does not have."""
    if m.layer_map is None:
        raise _needs_map(m)
    last = m.layer_map.block_count - 1
    fix = f"pass --layers A-B[,C-D] with 0 <= A <= B <= {last}, e.g. --layers 0-{min(last, 10)}"
    if "\x00" in text or not text:
        raise BadInput(f"--layers {text[:40]!r}: empty or a NUL byte", hint=fix)
    try:
        ranges = layermap.parse(text)
    except layermap.RangeError as err:
        raise BadInput(f"--layers {text[:80]!r}: {err}", hint=fix) from None
    if ranges[-1][1] > last:
        raise BadInput(
            f"--layers {text[:80]!r}: layer {ranges[-1][1]} is beyond the model's last layer "
            f"{last} ({m.layer_map.block_count} layers)",
            hint=fix,
        )
    return ranges


def select(m: ModelManifest, ranges: Ranges, first: bool, last: bool) -> Selection:
    """The files `ranges` (and `--first`/`--last`) need, in manifest order."""
    if m.layer_map is None:
        raise _needs_map(m)
    final = m.layer_map.block_count - 1
    first = first or any(lo == 0 for lo, _ in ranges)
    last = last or any(hi == final for _, hi in ranges)
    groups = {EMBEDDINGS} if first or (last and _tied(m)) else set()
    groups |= set(HEAD) if last else set()
    always = {f.name for f in _always(m)}
    chosen = tuple(
        f
        for f in m.files
        if f.name in always
        or any(lo <= b_hi and b_lo <= hi for lo, hi in f.ranges or () for b_lo, b_hi in ranges)
        or set(f.tensors or ()) & groups
    )
    return Selection(ranges, first, last, chosen)


def _always(m: ModelManifest) -> list[ModelFile]:
    """The files every range needs: outside the map, the metadata split, and those holding
    a group that is neither the embeddings nor the head (`rope_freqs`)."""
    meta = metadata_file(m.files)
    return [
        f
        for f in m.files
        if not f.mapped or f is meta or set(f.tensors or ()) - {EMBEDDINGS, *HEAD}
    ]


def _tied(m: ModelManifest) -> bool:
    """No `output` tensor: the head reuses the embeddings (tied weights)."""
    return not any("output" in (f.tensors or ()) for f in m.files)


def serves(m: ModelManifest, good: set[str]) -> Serves | None:
    """What the files in `good` (verified) can serve: layer ranges, embeddings, head."""
    if m.layer_map is None:
        return None
    base = all(f.name in good for f in _always(m))

    def groups_good(groups: set[str]) -> bool:
        holders = [f for f in m.files if set(f.tensors or ()) & groups]
        return base and bool(holders) and all(f.name in good for f in holders)

    missing = {n for f in m.files if f.name not in good for n in layermap.layers(f.ranges or ())}
    layers = [] if not base else [n for n in range(m.layer_map.block_count) if n not in missing]
    return Serves(
        layers=layermap.format_ranges((n, n) for n in layers),
        first=groups_good({EMBEDDINGS}),
        last=groups_good({*HEAD, EMBEDDINGS} if _tied(m) else set(HEAD)),
    )


def read_record(dir_fd: int, model: str) -> Provisioned | None:
    """The destination's record for `model`; None when absent, another model's, or not
    ours (a planted FIFO or link, too big, malformed): only ever a hint, never fatal."""
    with suppress(OSError, msgspec.DecodeError, layermap.RangeError):
        raw = read_small(dir_fd, RECORD_FILE, MAX_RECORD_BYTES)
        held = None if raw is None else msgspec.json.decode(raw, type=Provisioned)
        if held is not None and held.model == model:  # its ranges merged, as written
            return msgspec.structs.replace(held, layers=layermap.format_ranges(held.ranges))
    return None


def write_record(dir_fd: int, record: Provisioned) -> None:
    text = json.dumps({"version": 1, **msgspec.structs.asdict(record)}, indent=1, sort_keys=True)
    write_in(dir_fd, RECORD_FILE, text.encode() + b"\n")
