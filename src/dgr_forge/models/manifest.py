"""Model artifact manifests: `manifests/models/<name>.toml`, loaded and validated (its
keys: `ModelManifest`; docs/json-schema/toml/ is generated from it).

Like the upstream manifest loader, every malformed input is a `BadInput` (exit 2) naming
the file, the key and the fix; no input makes the loader raise anything else.
"""

from __future__ import annotations

import contextlib
import functools
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Final
from urllib.parse import quote, urlsplit

import msgspec
import tomli_w

from dgr_forge.core import tominput, urls
from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import read_regular
from dgr_forge.core.gitutil import HEX40, HEX64, NAME
from dgr_forge.core.tominput import CheckedStr, Record, Version1, about, decode, fail
from dgr_forge.models import layermap
from dgr_forge.models.layermap import MAP_FIX, LayerMap, Ranges

SCHEMA: Final = 1
MODELS_DIR = "manifests/models"
URL_SCHEMES = (*urls.HTTP_SCHEMES, "file")  # file://: a local mirror or an air-gapped host
PART_SUFFIX = ".part"  # reserved: partial downloads live next to the file as NAME.part
# llama.cpp's split naming: `<prefix>-%05d-of-%05d.gguf`, parts numbered from 1
SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")

_FILES_FIX = "list each artifact as a [[files]] table with name, size, sha256 and url"
NAME_FIX = "use letters, digits, '.', '_' or '-', e.g. \"deepseek-v4\""


# -- the file as written is the record (its keys, types, bounds, meanings: declared once,
# here); its derived values are properties


class Model(Record, frozen=True, omit_defaults=True):
    """The model."""

    name: Annotated[str, about("a plain name, e.g. `deepseek-v4`")]
    source_revision: (
        Annotated[str, about("the upstream checkpoint's full 40-hex revision")] | None
    ) = None
    shared_dir: (
        Annotated[
            str,
            about(
                "a shared, sticky model directory (mode 1777) `certify --dest` may read "
                "though others can write it: only a file's owner may replace a file there"
            ),
        ]
        | None
    ) = None


class FileName(CheckedStr):
    """A plain file name (no path, no `..`, not `*.part`): files land in --dest."""

    fix = "use the bare file name; files land in --dest"

    @classmethod
    def problem(cls, value: str) -> str | None:
        return check_file_name(value)


class ModelFile(Record, frozen=True, omit_defaults=True):
    """One artifact."""

    name: FileName  # a plain `str` once decoded: encoders take no subclass
    size: Annotated[
        int,
        about(
            "bytes",
            ge=0,  # exact type: `true` and `1.0` are not sizes
            fix="set it to the file's exact size in bytes (`stat -c %s FILE`)",
            problem="{value} is not a non-negative integer number of bytes",
        ),
    ]
    sha256: Annotated[str, about("its sha256, 64 lowercase hex")]
    url: Annotated[str, about("where it is fetched: an http(s):// or file:// URL")]
    layers: (
        Annotated[str, about("with a [map]: the layers it holds, e.g. `0-4`", fix=MAP_FIX)] | None
    ) = None
    tensors: (
        Annotated[tuple[str, ...], about("with a [map]: its other tensor groups", fix=MAP_FIX)]
        | None
    ) = None

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "name", str(self.name))

    @cached_property
    def ranges(self) -> Ranges | None:
        return None if self.layers is None else layermap.parse(self.layers)

    @property
    def mapped(self) -> bool:
        return self.layers is not None


@dataclass(frozen=True)
class SplitName:
    prefix: str
    no: int  # 1-based, as in the file name
    count: int


class ModelManifest(Record, frozen=True, omit_defaults=True):
    """`manifests/models/<name>.toml`: a model's artifacts, pinned by size and sha256."""

    LOADED = ("path", "shown")
    schema: Version1
    model: Model
    layer_map: LayerMap | None = msgspec.field(default=None, name="map")
    files: Annotated[tuple[ModelFile, ...], about("every artifact, once", fix=_FILES_FIX)] = ()
    path: Path | None = None
    shown: str = "(model manifest)"  # how errors name the manifest

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


def name_problem(name: str) -> str | None:
    """What is wrong with a model's name (`[model] name`, `artifacts manifest --name`)."""
    return None if NAME.fullmatch(name) and ".." not in name else f"{name!r} is not a plain name"


def revision_problem(revision: str) -> str | None:
    return None if HEX40.fullmatch(revision) else f"{revision!r} is not a full 40-hex revision"


def split_name(name: str) -> SplitName | None:
    """`x-00002-of-00009.gguf` -> SplitName("x", 2, 9); None for a name that is not a split."""
    m = SPLIT_NAME.fullmatch(name)
    return SplitName(m["prefix"], int(m["no"]), int(m["count"])) if m else None


def check_url(url: str) -> str | None:
    """None when `url` is a usable http(s)/file URL, else what is wrong with it (the URL
    masked); `core.urls.check_url` (a leading `-`, control characters, NUL) runs after."""
    shown = urls.mask(url)
    try:
        parts = urlsplit(url)
    except ValueError as err:
        return f"{shown!r} is not a URL ({err})"
    if parts.scheme in ("http", "https"):
        return None if parts.netloc else f"{shown!r} has no host"
    if parts.scheme == "file":
        return None if parts.path.startswith("/") else f"{shown!r} has no absolute path"
    return f"{shown!r} is not an http(s):// or file:// URL"


def file_url(base: str, name: str) -> str:
    """BASE/NAME, the name percent-encoded (mirrors and `artifacts manifest --url-base`)."""
    return base.rstrip("/") + "/" + quote(name)


def check_file_name(name: str) -> str | None:
    """None when `name` is a plain file name the manifest may list, else what is wrong."""
    if "/" in name or "\\" in name:
        return f"{name!r} contains a path separator"
    if ".." in name:
        return f"{name!r} contains '..'"
    if not NAME.fullmatch(name):
        return f"{name!r} is not a plain file name"
    if name.endswith(PART_SUFFIX):
        return f"{name!r} ends in {PART_SUFFIX}, which is reserved for partial downloads"
    return None


def resolve_path(spec: str, root: Path | None) -> Path:
    """A manifest argument: a path to a .toml file, or a model name under manifests/models/."""
    path = Path(spec)
    if spec.endswith(".toml") or path.exists() or "/" in spec or root is None:
        return path
    return root / MODELS_DIR / f"{spec}.toml"


def load(path: Path, root: Path | None = None) -> ModelManifest:
    """Load and validate the model manifest at `path` (shown relative to `root` in errors)."""
    shown = str(path)
    if root is not None:
        with contextlib.suppress(ValueError, OSError):
            shown = str(path.resolve().relative_to(root.resolve()))
    return loads(read_raw(path, shown, root), path=path, shown=shown)


def read_raw(path: Path, shown: str, root: Path | None = None) -> bytes:
    """A model manifest's bytes, read bounded (a regular file of at most 4 MiB, a FIFO
    never waited on; under the forge `root`, never through a link)."""
    return read_regular(
        path,
        limit=tominput.MAX_BYTES,
        what="model manifest",
        shown=shown,
        root=root,
        hint=f"pass the path to a model manifest, or a name under {MODELS_DIR}/ "
        "(`dgr-forge artifacts manifest` writes one)",
    )


def loads(
    raw: bytes, *, path: Path | None = None, shown: str = "(model manifest)"
) -> ModelManifest:
    m = decode(shown, tominput.Checker(shown).parse(raw), ModelManifest, path=path, shown=shown)
    name, revision, shared_dir = m.name, m.model.source_revision, m.model.shared_dir
    if shared_dir is not None and not shared_dir.startswith("/"):
        raise fail(
            shown, "model.shared_dir", f"{shared_dir[:80]!r} is not an absolute path",
            'write the directory in full: shared_dir = "/srv/models"',
        )  # fmt: skip
    if problem := name_problem(name):
        raise fail(shown, "model.name", problem, NAME_FIX)
    if revision is not None and (problem := revision_problem(revision)):
        raise fail(
            shown,
            "model.source_revision",
            problem,
            "pin the checkpoint's full lowercase commit id (branch or tag names move), "
            "or remove source_revision",
        )
    if not m.files:
        raise fail(shown, "files", "missing or empty", _FILES_FIX)
    lmap = m.layer_map
    if lmap is not None and layermap.check_group(lmap.arch) is not None:
        raise fail(shown, "map.arch", f"{lmap.arch[:80]!r} is not an architecture name", MAP_FIX)
    seen: dict[str, str] = {}
    for i, f in enumerate(m.files):
        _check_file(shown, f, f"files[{i}]", seen, lmap)
    _check_split_sets(shown, m.files)
    held = (f.ranges or () for f in m.files)  # a map with a hole cannot serve the model
    if lmap is not None and (holes := layermap.holes(held, lmap.block_count)):
        raise fail(
            shown,
            "files",
            f"the layer map holds no file for layers {holes} of {lmap.block_count}",
            MAP_FIX,
        )
    return m


def _check_file(
    shown: str, entry: ModelFile, where: str, seen: dict[str, str], layer_map: LayerMap | None
) -> None:
    name, sha, url = entry.name, entry.sha256, entry.url

    def bad(key: str, problem: str, fix: str = MAP_FIX) -> BadInput:
        return fail(shown, f"{where}.{key}", problem, fix)

    folded = name.casefold()  # "A.gguf" and "a.gguf" are one file on macOS/Windows
    if folded in seen:
        raise bad(
            "name", f"duplicate file name {name!r} (also {seen[folded]})", "list each file once"
        )
    seen[folded] = where
    if not HEX64.fullmatch(sha):
        fix = f"set it to the output of `sha256sum {name}`"
        raise bad("sha256", f"{sha!r} is not a 64-hex lowercase sha256", fix)
    if url_problem := check_url(url):
        raise bad("url", url_problem, "use an http://, https:// or file:// URL")
    try:
        urls.check_url(url, f"{shown}: {where}.url", schemes=URL_SCHEMES)
    except BadInput as err:
        err.details = {"file": shown, "key": f"{where}.url"}
        raise
    # a file's half of the layer map: both keys on every .gguf file with a [map], none
    # anywhere without one
    has = [k for k in ("layers", "tensors") if getattr(entry, k) is not None]
    if layer_map is None or not entry.name.endswith(".gguf"):
        if has:
            why = "there is no [map]" if layer_map is None else "the file is not a .gguf"
            raise bad(has[0], f"set, but {why}")
        return
    if entry.layers is None:
        raise bad("layers", "missing")
    try:
        layers = entry.ranges or ()
    except layermap.RangeError as err:
        raise bad("layers", str(err)) from None
    if layers and layers[-1][1] >= layer_map.block_count:
        raise bad(
            "layers", f"layer {layers[-1][1]} is beyond map.block_count {layer_map.block_count}"
        )
    if entry.tensors is None:
        raise bad("tensors", "missing")
    for group in entry.tensors:
        if problem := layermap.check_group(group):
            raise bad("tensors", problem)


def _check_split_sets(shown: str, files: tuple[ModelFile, ...]) -> None:
    """Every split set `P-K-of-N.gguf` lists all N parts, with one N."""
    bad = functools.partial(fail, shown, "files")
    sets: dict[str, dict[int, str]] = {}
    counts: dict[str, int] = {}
    for f in files:
        if (s := split_name(f.name)) is None:
            continue
        if s.count < 1 or not 1 <= s.no <= s.count:
            raise bad(
                f"{f.name}: part {s.no} of {s.count} is not a valid split part",
                "parts are numbered 00001 to N, e.g. model-00001-of-00003.gguf",
            )
        if (known := counts.setdefault(s.prefix, s.count)) != s.count:
            raise bad(
                f"split set {s.prefix}: {f.name} says {s.count} parts, another part says {known}",
                "list the parts of one split set only (same -of-NNNNN)",
            )
        sets.setdefault(s.prefix, {})[s.no] = f.name
    for prefix, parts in sets.items():
        if missing := [n for n in range(1, counts[prefix] + 1) if n not in parts]:
            listed = ", ".join(f"{prefix}-{n:05d}-of-{counts[prefix]:05d}.gguf" for n in missing)
            raise bad(
                f"split set {prefix} is incomplete: not listed: {listed}",
                "list every part of the set (`dgr-forge artifacts manifest` does)",
            )


def dumps(
    name: str,
    files: list[ModelFile] | tuple[ModelFile, ...],
    source_revision: str | None = None,
    layer_map: LayerMap | None = None,
) -> str:
    """The manifest text for `files` (what `artifacts manifest` writes); loads() accepts it."""
    m = ModelManifest(
        schema=SCHEMA, model=Model(name, source_revision), layer_map=layer_map, files=tuple(files)
    )
    # omit_defaults: TOML has no null, an absent optional key is left out
    return tomli_w.dumps({k: v for k, v in msgspec.to_builtins(m).items() if k not in m.LOADED})
