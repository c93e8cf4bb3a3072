"""Layer ranges and tensor groups: the vocabulary of a model manifest's layer map, parsed and
printed (`"0-4,7"`, the syntax of `--layers`) and made from a header's tensor names, bounded
(docs/model-artifacts.md, 'Layer ranges').
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated

from dgr_forge.core.tominput import Record, about

Ranges = tuple[tuple[int, int], ...]  # inclusive (first, last), sorted, merged

EMBEDDINGS = "token_embd"  # what `--first` adds
HEAD = ("output_norm", "output")  # what `--last` adds (tied embeddings: token_embd too)
MAX_BLOCK_COUNT = 100_000  # llama.cpp models have at most a few hundred layers
MAX_RANGE_ITEMS = 1024
_ITEM = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9}))?")  # ASCII digits only
_GROUP = re.compile(r"[A-Za-z0-9_]{1,64}")
_LAYER = re.compile(rb"blk\.(\d{1,9})\.")


MAP_FIX = "re-create the map from the split headers: `dgr-forge artifacts map M`"


class LayerMap(Record, frozen=True):
    """The layer map: every `.gguf` file then says the layers and tensors it holds."""

    arch: Annotated[str, about("the architecture, from the split headers", fix=MAP_FIX)]
    block_count: Annotated[
        int, about("the model's layer count", ge=1, le=MAX_BLOCK_COUNT, fix=MAP_FIX)
    ]


class RangeError(ValueError):
    """A malformed range list: the message says what and where."""


def merge(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sorted, overlapping and adjacent ranges joined: (0,3),(4,6),(9,9) -> (0,6),(9,9)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def parse(text: str) -> Ranges:
    """`"0-10,22-32"` or `"5"` -> merged ranges; `""` -> (). RangeError on anything else."""
    if text == "":
        return ()
    if len(items := text.split(",")) > MAX_RANGE_ITEMS:
        raise RangeError(f"more than {MAX_RANGE_ITEMS} ranges")
    found = []
    for n, item in enumerate(items, 1):
        if (m := _ITEM.fullmatch(item)) is None:
            shown = repr(item[:40]) if item else "an empty item"
            raise RangeError(f"item {n} is {shown}, not N or A-B (whole numbers from 0)")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise RangeError(f"item {n} {item!r} runs backwards ({lo} > {hi})")
        found.append((lo, hi))
    return merge(found)


def format_ranges(ranges: Iterable[tuple[int, int]]) -> str:
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in merge(ranges))


def layers(ranges: Ranges) -> set[int]:
    """Every layer of `ranges` (callers bound them by block_count first)."""
    return {n for lo, hi in ranges for n in range(lo, hi + 1)}


def holes(held: Iterable[Ranges], block_count: int) -> str:
    """The layers below `block_count` that none of `held` holds, formatted ("": none)."""
    covered = set().union(*(layers(r) for r in held))
    return format_ranges((n, n) for n in range(block_count) if n not in covered)


def check_group(name: str) -> str | None:
    """None when `name` is a tensor group name the map may hold, else what is wrong."""
    if _GROUP.fullmatch(name) is None:
        return f"{name[:80]!r} is not a tensor group name (letters, digits, _; at most 64)"
    return "'blk' is the layers' prefix, not a group" if name == "blk" else None


def groups(names: Iterable[bytes], block_count: int) -> tuple[Ranges, tuple[str, ...]]:
    """The layers and other groups a header's tensor names hold; RangeError when a name
    claims a layer at or beyond `block_count` or is not `blk.N.x` / `<group>.x`."""
    held: set[int] = set()
    others: set[str] = set()
    for raw in names:
        if raw.startswith(b"blk."):
            m = _LAYER.match(raw)
            if m is None or (len(m.group(1)) > 1 and m.group(1).startswith(b"0")):
                raise RangeError(f"tensor {raw[:80]!r} is not blk.N.<name>")
            if (n := int(m.group(1))) >= block_count:
                raise RangeError(
                    f"tensor {raw[:80]!r} claims layer {n}, the model has {block_count} "
                    f"(block_count: layers 0-{block_count - 1})"
                )
            held.add(n)
            continue
        try:
            group = raw.decode("utf-8").split(".", 1)[0]
        except UnicodeDecodeError:
            raise RangeError(f"tensor name {raw[:80]!r} is not UTF-8") from None
        if problem := check_group(group):
            raise RangeError(f"tensor {raw[:80]!r}: {problem}")
        others.add(group)
    return merge((n, n) for n in held), tuple(sorted(others))
