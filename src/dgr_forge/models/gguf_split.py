"""A GGUF model's split headers: read by a bounded reader, checked, made the layer map.

llama.cpp splits a model into `P-00001-of-0000N.gguf` ..., each part's KV header holding
`split.no` (0-based), `split.count` and `split.tensors.count`. Every count and length is
checked against the bytes left before anything is read or skipped (the `gguf` package's
reader builds Python lists of whatever a header claims: minutes and gigabytes for a 43-byte file).
"""

from __future__ import annotations

import math
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import msgspec

from dgr_forge.core.errors import BadInput
from dgr_forge.core.output import Reporter
from dgr_forge.models import layermap
from dgr_forge.models.manifest import ModelFile, split_name

GGUF_MAGIC = b"GGUF"
VERSIONS = (2, 3)  # what llama.cpp writes today (and the gguf package reads)
DEFAULT_ALIGNMENT = 32
MAX_ARRAY_DEPTH = 4  # llama.cpp writes flat arrays; a deeper nest is hostile
MAX_DIMS = 8  # GGML_MAX_DIMS is 4
# value types (GGUFValueType): fixed-size scalars by their byte size
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL = range(8)
_STRING, _ARRAY, _UINT64, _INT64, _FLOAT64 = range(8, 13)
_SCALAR = {
    _UINT8: "B", _INT8: "b", _UINT16: "H", _INT16: "h", _UINT32: "I", _INT32: "i",
    _FLOAT32: "f", _BOOL: "?", _UINT64: "Q", _INT64: "q", _FLOAT64: "d",
}  # fmt: skip
_INTEGER = {_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _BOOL, _UINT64, _INT64}
_MIN_KV = 8 + 4 + 1  # key length, type, the smallest value
_MIN_TENSOR = 8 + 4 + 4 + 8  # name length, n_dims, type, offset
# ggml's types as a GGUF file holds them: id -> (elements per block, bytes per block), as
# ggml.c's type_traits at the pin (gguf's GGML_QUANT_SIZES; tests/test_models checks)
GGML_BLOCKS = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
    15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18),
    21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4),
    27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66),
    39: (32, 17), 40: (64, 36), 41: (128, 18),
}  # fmt: skip
ARCH_KEY = "general.architecture"
KEPT_STRINGS = {ARCH_KEY}  # the string values the layer map needs
MAX_KEPT_STRING = 64
Headers = dict[str, "Header | str"]  # file name -> its header, or why it is unreadable


class GGUFError(ValueError):
    """The header is malformed, or claims more than the file holds."""


@dataclass
class Header:
    """What the split check and the layer map need from a GGUF header."""

    version: int
    n_tensors: int
    ints: dict[str, int] = field(default_factory=dict)  # integer-typed KV values
    keys: set[str] = field(default_factory=set)
    strings: dict[str, str] = field(default_factory=dict)  # KEPT_STRINGS only
    tensors: list[bytes] = field(default_factory=list)  # tensor names, in header order
    # the tensors' data in bytes (ggml_nbytes summed, llama-bench's `model_size`); None: a
    # type not in GGML_BLOCKS, or a row not a whole number of blocks
    data_bytes: int | None = 0
    end: int = 0  # bytes of header read (up to the end of the tensor infos)


class _Reader:
    """Reads a GGUF header, every count and length bounded by the bytes left in the file."""

    def __init__(self, f: BinaryIO, size: int, limit: int | None = None) -> None:
        self.f, self.size, self.pos, self.order = f, size, 0, "<"
        self.limit = size if limit is None else min(size, limit)

    def left(self) -> int:
        return self.size - self.pos

    def _bounded(self, n: int, what: str) -> None:
        if n > self.left():
            raise GGUFError(
                f"{what} needs {n} bytes at offset {self.pos}, the file has {self.left()} left"
            )
        if self.pos + n > self.limit:  # a header that never ends: cut at the limit
            raise GGUFError(
                f"{what} at offset {self.pos} runs past the header limit of {self.limit} bytes"
            )

    def take(self, n: int, what: str) -> bytes:
        self._bounded(n, what)
        if len(data := self.f.read(n)) != n:
            raise GGUFError(f"the file ended while reading {what} at offset {self.pos}")
        self.pos += n
        return data

    def skip(self, n: int, what: str) -> None:
        self._bounded(n, what)
        self.pos += n
        self.f.seek(self.pos)

    def num(self, fmt: str, what: str) -> int | float | bool:
        size = struct.calcsize(fmt)
        value: int | float | bool = struct.unpack(self.order + fmt, self.take(size, what))[0]
        return value

    def u32(self, what: str) -> int:
        return int(self.num("I", what))

    def u64(self, what: str) -> int:
        return int(self.num("Q", what))

    def count(self, what: str, each: int) -> int:
        """A count of items of at least `each` bytes: refused when they cannot fit."""
        if (n := self.u64(what)) * each > self.left():
            raise GGUFError(
                f"{what} claims {n} items, more than the {self.left()} bytes left can hold"
            )
        return n

    def string(self, what: str) -> bytes:
        return self.take(self.count(f"{what} length", 1), what)

    def value(self, vtype: int, what: str, depth: int = 0) -> int | float | bool | None:
        """Read (or skip) one value; scalars are returned, strings and arrays skipped."""
        if (fmt := _SCALAR.get(vtype)) is not None:
            return self.num(fmt, what)
        if vtype == _STRING:
            self.skip(self.count(f"{what} length", 1), what)
            return None
        if vtype != _ARRAY:
            raise GGUFError(f"{what} has unknown value type {vtype}")
        if depth >= MAX_ARRAY_DEPTH:
            raise GGUFError(f"{what} nests arrays deeper than {MAX_ARRAY_DEPTH}")
        item = self.u32(f"{what} item type")
        if (fmt := _SCALAR.get(item)) is not None:
            size = struct.calcsize(fmt)
            self.skip(self.count(what, size) * size, what)
        elif item == _STRING:  # every item has a length (8 bytes) or a header (12)
            self._skip_strings(self.count(what, 8), what)
        elif item == _ARRAY:
            for _ in range(self.count(what, 12)):
                self.value(item, what, depth + 1)
        else:
            raise GGUFError(f"{what} has unknown item type {item}")
        return None

    def _skip_strings(self, n: int, what: str) -> None:
        """Skip `n` length-prefixed strings (a vocabulary: 10^5 of them), each length bounded."""
        f, unpack, fmt, size = self.f, struct.unpack, self.order + "Q", self.limit
        pos = self.pos
        if pos + 8 * n > size:
            raise GGUFError(f"{what}: {n} strings at offset {pos} run past {size} bytes")
        for _ in range(n):
            if len(raw := f.read(8)) != 8:
                raise GGUFError(f"the file ended inside {what} at offset {pos}")
            length = unpack(fmt, raw)[0]
            pos += 8
            if length > size - pos:
                raise GGUFError(
                    f"{what}: a string of {length} bytes at offset {pos}, the file has "
                    f"{size - pos} left"
                )
            pos += length
            f.seek(length, 1)
        self.pos = pos


def read_header(path: Path, *, follow: bool = False) -> Header:
    """The GGUF header of `path`; a symlink is followed only with `follow` (a release
    engineer's own source directory)."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    return read_header_fd(os.open(path, flags))


def read_header_fd(fd: int, limit: int | None = None) -> Header:
    """`read_header` of an open descriptor (closed after): the file already checked."""
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise GGUFError("not a regular file")
        return parse_header(f, st.st_size, limit)


def parse_header(f: BinaryIO, size: int, limit: int | None = None) -> Header:
    """The GGUF header read from `f` (a file of `size` bytes: on disk or over HTTP Range
    requests), every count checked against `size` and no byte read past `limit`."""
    r = _Reader(f, size, limit)
    if r.take(4, "the magic") != GGUF_MAGIC:
        raise GGUFError("GGUF magic invalid")
    raw = r.take(4, "the version")
    version = struct.unpack("<I", raw)[0]
    if version & 0xFFFF == 0:  # written on a big-endian host
        r.order = ">"
        version = struct.unpack(">I", raw)[0]
    if version not in VERSIONS:
        raise GGUFError(f"GGUF version {version} is not supported (2 or 3)")
    n_tensors = r.u64("the tensor count")
    n_kv = r.count("the KV count", _MIN_KV)
    if n_tensors * _MIN_TENSOR > r.left():
        raise GGUFError(f"the header claims {n_tensors} tensors, more than the file can hold")
    header = Header(version=version, n_tensors=n_tensors)
    for i in range(n_kv):
        try:
            key = r.string(f"KV {i} key").decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"KV {i} key is not UTF-8") from None
        if key in header.keys:
            raise GGUFError(f"duplicate KV key {key[:100]!r}")
        header.keys.add(key)
        vtype = r.u32(f"KV {key[:100]!r} type")
        if key in KEPT_STRINGS and vtype == _STRING:
            if len(kept := r.string(f"KV {key!r}")) > MAX_KEPT_STRING:
                raise GGUFError(f"KV {key!r} is longer than {MAX_KEPT_STRING} bytes")
            header.strings[key] = kept.decode("utf-8", "replace")
            continue
        value = r.value(vtype, f"KV {key[:100]!r}")
        if vtype in _INTEGER and value is not None:
            header.ints[key] = int(value)
    alignment = header.ints.get("general.alignment", DEFAULT_ALIGNMENT)
    if alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(f"general.alignment {alignment} is not a power of two")
    names: set[bytes] = set()
    for i in range(n_tensors):
        if (name := r.string(f"tensor {i} name")) in names:
            raise GGUFError(f"duplicate tensor name {name[:100]!r}")
        names.add(name)
        header.tensors.append(name)
        if (n_dims := r.u32(f"tensor {i} dimension count")) > MAX_DIMS:
            raise GGUFError(f"tensor {i} has {n_dims} dimensions (at most {MAX_DIMS})")
        dims = [r.u64(f"tensor {i} shape") for _ in range(n_dims)] or [1]
        block = GGML_BLOCKS.get(r.u32(f"tensor {i} type"))
        if block is None or dims[0] % block[0] or header.data_bytes is None:
            header.data_bytes = None
        else:
            header.data_bytes += math.prod(dims) // block[0] * block[1]
        offset = r.u64(f"tensor {i} offset")
        data_start = -(-r.pos // alignment) * alignment
        if offset > size - min(data_start, size):
            raise GGUFError(f"tensor {i} starts beyond the end of the file")
    header.end = r.pos
    return header


def read_headers(dest: Path, files: list[ModelFile], *, follow: bool = False) -> Headers:
    """The headers of the present `.gguf` files: name -> header, or why it is unreadable."""
    headers: Headers = {}
    for f in gguf_files(files):
        if not (path := dest / f.name).is_file():
            continue
        try:
            headers[f.name] = read_header(path, follow=follow)
        except (GGUFError, OSError) as err:
            text = str(err) if isinstance(err, GGUFError) else (err.strerror or str(err))
            headers[f.name] = f"unreadable GGUF header: {text[:200]}"
    return headers


def check_headers(headers: Headers) -> dict[str, list[str]]:
    """Split consistency of headers read (a str: why unreadable): each part's `split.no`
    and `split.count` match its name, no two parts claim one `split.no`, all parts of a set
    agree on `split.tensors.count` and, all present, hold that many tensors; a `.gguf` whose
    name is not a split does not claim to be one."""
    problems: dict[str, list[str]] = {name: [] for name in headers}
    by_no: dict[str, dict[int, list[str]]] = {}
    tensor_totals: dict[str, dict[str, int]] = {}
    tensor_counts: dict[str, int] = {}

    def mismatch(name: str, text: str) -> None:
        problems[name].append(f"split mismatch: {text}")

    for fname, header in headers.items():
        if isinstance(header, str):
            problems[fname].append(header)
            continue
        no, count = header.ints.get("split.no"), header.ints.get("split.count")
        total = header.ints.get("split.tensors.count")
        if (s := split_name(fname)) is None:
            if count is not None and count > 1:
                mismatch(
                    fname,
                    f"header says part {(no or 0) + 1} of {count} (split.no/split.count) but the "
                    "name is not P-0000K-of-0000N.gguf",
                )
            continue
        if count is None or no is None:
            mismatch(
                fname,
                "no integer split.no/split.count in the header, the name says "
                f"part {s.no} of {s.count}",
            )
            continue
        if count != s.count:
            mismatch(fname, f"split.count is {count}, the name says {s.count} parts")
        if no != s.no - 1:
            mismatch(fname, f"split.no is {no} (part {no + 1}), the name says part {s.no}")
        by_no.setdefault(s.prefix, {}).setdefault(no, []).append(fname)
        tensor_counts[fname] = header.n_tensors
        if total is not None:
            tensor_totals.setdefault(s.prefix, {})[fname] = total
        else:
            mismatch(fname, "no integer split.tensors.count in the header")
    for prefix, parts in by_no.items():
        for no, names in parts.items():
            if len(names) > 1:
                for name in names:
                    others = ", ".join(n for n in names if n != name)
                    mismatch(name, f"duplicate split.no {no} (also claimed by {others})")
        totals = tensor_totals.get(prefix, {})
        if len(set(totals.values())) > 1:
            for name, total in totals.items():
                mismatch(name, f"split.tensors.count {total} differs between the parts")
        else:
            names = [n for ns in parts.values() for n in ns]
            first = split_name(names[0])
            complete = first is not None and len(names) == first.count == len(totals)
            declared, actual = next(iter(totals.values()), 0), sum(tensor_counts[n] for n in names)
            if complete and actual != declared:
                for name in names:
                    said = f"split.tensors.count says {declared}"
                    mismatch(name, f"the parts hold {actual} tensors, {said}")
    return {k: v for k, v in problems.items() if v}


class MapError(ValueError):
    """The headers cannot make a layer map: per file, what is wrong."""

    def __init__(self, problems: dict[str, list[str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{n}: {', '.join(ps)}" for n, ps in problems.items())[:2000])


class Unmappable(MapError):
    """Not a model the map can describe (no block_count, several models): not hostile."""


def gguf_files(files: tuple[ModelFile, ...] | list[ModelFile]) -> list[ModelFile]:
    return [f for f in files if f.name.endswith(".gguf")]


def metadata_file(files: tuple[ModelFile, ...] | list[ModelFile]) -> ModelFile | None:
    """The split that holds the model's KV metadata: part 1 (or the one .gguf file)."""
    ggufs = gguf_files(files)
    one = ggufs[0] if len(ggufs) == 1 else None
    return next((f for f in ggufs if (s := split_name(f.name)) and s.no == 1), one)


def build(
    files: tuple[ModelFile, ...] | list[ModelFile], headers: Headers
) -> tuple[layermap.LayerMap, list[ModelFile]]:
    """The map and the files carrying their halves of it; MapError naming each bad file."""
    ggufs = gguf_files(files)  # some: `with_map` maps only a GGUF model
    # a map is of one model: one split set, or one unsplit .gguf file
    sets = {(s.prefix if s else f.name) for f in ggufs for s in [split_name(f.name)]}
    if len(sets) > 1:
        names = ", ".join(sorted(sets)[:5])
        raise Unmappable(
            {"(manifest)": [f"holds {len(sets)} GGUF models ({names}); a map is of one"]}
        )
    missing = "no header read (every part is needed)"
    problems: dict[str, list[str]] = {f.name: [missing] for f in ggufs if f.name not in headers}
    for name, found in check_headers(headers).items():
        problems.setdefault(name, []).extend(found)
    if problems:
        raise MapError(problems)
    meta = metadata_file(ggufs)
    assert meta is not None  # one model, every part present
    meta_header = headers[meta.name]
    assert isinstance(meta_header, Header)
    arch = meta_header.strings.get(ARCH_KEY)
    if arch is None or layermap.check_group(arch) is not None:
        raise Unmappable({meta.name: [f"no usable {ARCH_KEY} in the metadata split"]})
    if (count := meta_header.ints.get(f"{arch}.block_count")) is None:
        raise Unmappable({meta.name: [f"no integer {arch}.block_count in the metadata split"]})
    if not 1 <= count <= layermap.MAX_BLOCK_COUNT:
        raise MapError(
            {meta.name: [f"{arch}.block_count is {count} (1 to {layermap.MAX_BLOCK_COUNT})"]}
        )
    lmap = layermap.LayerMap(arch=arch, block_count=count)
    seen: dict[bytes, str] = {}
    held: dict[str, tuple[layermap.Ranges, tuple[str, ...]]] = {}
    for f in ggufs:
        h = headers[f.name]
        assert isinstance(h, Header)
        try:
            held[f.name] = layermap.groups(h.tensors, lmap.block_count)
        except layermap.RangeError as err:
            problems.setdefault(f.name, []).append(str(err))
            continue
        for t in h.tensors:
            if (other := seen.setdefault(t, f.name)) != f.name:
                problems.setdefault(f.name, []).append(f"tensor {t[:80]!r} is also in {other}")
                break
    if not problems and (holes := layermap.holes((r for r, _ in held.values()), count)):
        problems[meta.name] = [f"no part holds a tensor of layers {holes} (block_count {count})"]
    if problems:
        raise MapError(problems)
    return lmap, [
        msgspec.structs.replace(
            f, layers=layermap.format_ranges(held[f.name][0]), tensors=held[f.name][1]
        )
        if f.name in held
        else f
        for f in files
    ]


def with_map(
    files: list[ModelFile], headers: Headers, shown: str, out: Reporter
) -> tuple[layermap.LayerMap | None, list[ModelFile]]:
    """The files with the layer map from their headers; a model the map cannot describe
    (no `<arch>.block_count`, several models) is said and left without one; headers that
    contradict each other (a hostile or foreign part) are exit 2 naming the files."""
    if not gguf_files(files):
        return None, files  # not a GGUF model: nothing to map
    try:
        return build(files, headers)
    except Unmappable as err:
        out.warn(f"{shown}: no layer map: {err}")
        return None, files
    except MapError as err:
        raise BadInput(
            f"{shown}: the split headers cannot make a layer map: {err}",
            hint="re-split the model (llama-gguf-split) from one checkpoint; every part's "
            "tensors must be blk.N.* below block_count or a named group",
            details={"split_problems": err.problems},
        ) from None


def header_problems(
    dest: Path, files: list[ModelFile], lmap: layermap.LayerMap | None
) -> dict[str, list[str]]:
    """Split consistency of the present `.gguf` files, and with a map, every header
    against what the map says of its file (a file changed upstream is named here)."""
    headers = read_headers(dest, files, follow=False)
    problems = check_headers(headers)
    if lmap is None:
        return problems
    meta = metadata_file(files)
    fix = "the file changed since the map was made: re-run `dgr-forge artifacts map M`"
    for f in files:
        h = headers.get(f.name)
        if not isinstance(h, Header) or not f.mapped or problems.get(f.name):
            continue
        found = []
        try:
            layers, tensors = layermap.groups(h.tensors, lmap.block_count)
        except layermap.RangeError as err:
            found.append(f"layer map mismatch: {err} ({fix})")
        else:
            if layers != (f.ranges or ()):
                mine, said = layermap.format_ranges(layers), layermap.format_ranges(f.ranges or ())
                found.append(
                    f"layer map mismatch: the header holds layers {mine or 'none'}, the map "
                    f"says {said or 'none'} ({fix})"
                )
            if tensors != tuple(sorted(set(f.tensors or ()))):
                found.append(
                    f"layer map mismatch: the header holds tensors {list(tensors)}, the map "
                    f"says {list(f.tensors or ())} ({fix})"
                )
        if f is meta:
            count = h.ints.get(f"{h.strings.get(ARCH_KEY)}.block_count")
            if count != lmap.block_count:
                found.append(
                    f"layer map mismatch: the header's block_count is {count}, the map says "
                    f"{lmap.block_count}"
                )
        if found:
            problems[f.name] = found
    return problems
