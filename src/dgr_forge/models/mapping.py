"""The layer map of a model, from its split headers: built, checked, compared.

`build` turns the headers of every `.gguf` file of one model (one split set, or one file)
into the map: the model's `<arch>.block_count` from the metadata split (part 1, where
`gguf-split` keeps the model's KV data), and per file the layers and other tensor groups
its tensors belong to. The headers must agree with each other first (`gguf_split.
check_headers`: `split.no`/`split.count` against the names, `split.tensors.count` against
the parts' tensors), so a part of another model cannot slip into the map; a tensor name
claiming a layer at or past `block_count` is refused. `contradictions` is what verify
asks of a file it holds: does its header still say what the manifest's map says?
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from dgr_forge.models import gguf_split, layermap
from dgr_forge.models import manifest as models
from dgr_forge.models.gguf_split import Header
from dgr_forge.models.layermap import LayerMap, Ranges
from dgr_forge.models.manifest import ModelFile

ARCH_KEY = "general.architecture"


class MapError(ValueError):
    """The headers cannot make a layer map: per file, what is wrong."""

    def __init__(self, problems: dict[str, list[str]]) -> None:
        self.problems = problems
        listed = "; ".join(f"{n}: {', '.join(ps)}" for n, ps in problems.items())
        super().__init__(listed[:2000])


class Unmappable(MapError):
    """Not a model the map can describe (no block_count, several models): not hostile."""


def gguf_files(files: tuple[ModelFile, ...] | list[ModelFile]) -> list[ModelFile]:
    return [f for f in files if f.name.endswith(".gguf")]


def metadata_file(files: tuple[ModelFile, ...] | list[ModelFile]) -> ModelFile | None:
    """The split that holds the model's KV metadata: part 1 (or the one .gguf file)."""
    ggufs = gguf_files(files)
    for f in ggufs:
        s = models.split_name(f.name)
        if s is not None and s.no == 1:
            return f
    return ggufs[0] if len(ggufs) == 1 else None


def block_count(header: Header, name: str) -> LayerMap:
    arch = header.strings.get(ARCH_KEY)
    if arch is None or layermap.check_group(arch) is not None:
        raise Unmappable({name: [f"no usable {ARCH_KEY} in the metadata split"]})
    count = header.ints.get(f"{arch}.block_count")
    if count is None:
        raise Unmappable({name: [f"no integer {arch}.block_count in the metadata split"]})
    if not 1 <= count <= layermap.MAX_BLOCK_COUNT:
        shown = str(count)
        raise MapError({name: [f"{arch}.block_count is {shown} (1 to {layermap.MAX_BLOCK_COUNT})"]})
    return LayerMap(arch=arch, block_count=count)


def build(
    files: tuple[ModelFile, ...] | list[ModelFile], headers: dict[str, Header | str]
) -> tuple[LayerMap, list[ModelFile]]:
    """The map and the files carrying their halves of it; MapError naming each bad file."""
    ggufs = gguf_files(files)
    if not ggufs:
        raise Unmappable({"(manifest)": ["lists no .gguf file"]})
    # a map is of one model: one split set, or one unsplit .gguf file
    sets = {(s.prefix if s else f.name) for f in ggufs for s in [models.split_name(f.name)]}
    if len(sets) > 1:
        names = ", ".join(sorted(sets)[:5])
        raise Unmappable(
            {"(manifest)": [f"holds {len(sets)} GGUF models ({names}); a map is of one"]}
        )
    problems: dict[str, list[str]] = {}
    for f in ggufs:
        if f.name not in headers:
            problems.setdefault(f.name, []).append("no header read (every part is needed)")
    for name, found in gguf_split.check_headers(headers).items():
        problems.setdefault(name, []).extend(found)
    if problems:
        raise MapError(problems)
    meta = metadata_file(ggufs)
    assert meta is not None  # one model, every part present
    meta_header = headers[meta.name]
    assert isinstance(meta_header, Header)
    lmap = block_count(meta_header, meta.name)
    seen: dict[bytes, str] = {}
    held: dict[str, tuple[Ranges, tuple[str, ...]]] = {}
    for f in ggufs:
        h = headers[f.name]
        assert isinstance(h, Header)
        try:
            held[f.name] = layermap.groups(h.tensors, lmap.block_count)
        except layermap.RangeError as err:
            problems.setdefault(f.name, []).append(str(err))
            continue
        for t in h.tensors:
            other = seen.setdefault(t, f.name)
            if other != f.name:
                problems.setdefault(f.name, []).append(f"tensor {t[:80]!r} is also in {other}")
                break
    if not problems:
        covered = set().union(*(layermap.layers(r) for r, _ in held.values()))
        missing = [n for n in range(lmap.block_count) if n not in covered]
        if missing:
            holes = layermap.format_ranges(layermap.of_layers(missing))
            problems[meta.name] = [
                f"no part holds a tensor of layers {holes} (block_count {lmap.block_count})"
            ]
    if problems:
        raise MapError(problems)
    mapped = [
        msgspec.structs.replace(
            f, layers=layermap.format_ranges(held[f.name][0]), tensors=held[f.name][1]
        )
        if f.name in held
        else f
        for f in files
    ]
    return lmap, mapped


def contradictions(f: ModelFile, header: Header, lmap: LayerMap) -> list[str]:
    """What the header of `f` says that the manifest's map does not (empty: they agree)."""
    fix = "the file changed since the map was made: re-run `dgr-forge artifacts map M`"
    try:
        layers, tensors = layermap.groups(header.tensors, lmap.block_count)
    except layermap.RangeError as err:
        return [f"layer map mismatch: {err} ({fix})"]
    problems = []
    if layers != (f.ranges or ()):
        mine, said = layermap.format_ranges(layers), layermap.format_ranges(f.ranges or ())
        problems.append(
            f"layer map mismatch: the header holds layers {mine or 'none'}, the map says "
            f"{said or 'none'} ({fix})"
        )
    if tensors != tuple(sorted(set(f.tensors or ()))):
        problems.append(
            f"layer map mismatch: the header holds tensors {list(tensors)}, the map says "
            f"{list(f.tensors or ())} ({fix})"
        )
    return problems


def header_problems(
    dest: Path, files: list[ModelFile], lmap: LayerMap | None
) -> dict[str, list[str]]:
    """Split consistency of the present `.gguf` files, and with a map, every header
    against what the map says of its file (a file changed upstream is named here)."""
    headers = gguf_split.read_headers(dest, files, follow=False)
    problems = gguf_split.check_headers(headers)
    if lmap is None:
        return problems
    meta = metadata_file(files)
    for f in files:
        h = headers.get(f.name)
        if not isinstance(h, Header) or not f.mapped or problems.get(f.name):
            continue
        found = contradictions(f, h, lmap)
        if f is meta and f.name.endswith(".gguf"):
            count = h.ints.get(f"{h.strings.get(ARCH_KEY)}.block_count")
            if count != lmap.block_count:
                found.append(
                    f"layer map mismatch: the header's block_count is {count}, the map says "
                    f"{lmap.block_count}"
                )
        if found:
            problems[f.name] = found
    return problems
