"""The upstream pin: `manifests/llama.cpp.toml`, loaded and validated (DESIGN.md, "Manifest").

Every malformed input is a `BadInput` (exit 2) naming the file, the key and the fix; no
input makes the loader raise anything else.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from msgspec import Struct

from dgr_forge.core.errors import BadInput
from dgr_forge.core.ids import HEX40, HEX64, NAME
from dgr_forge.core.tomlcheck import Checker, read_bytes, shown_value
from dgr_forge.core.urls import check_url

SCHEMA = 1
PATCH_NAME = re.compile(r"^(\d{4})-[A-Za-z0-9][A-Za-z0-9._-]*\.patch$")

_TOP_KEYS = {"schema", "upstream", "patches"}
_UPSTREAM_KEYS = {"name", "url", "commit", "tree", "build_number"}
# llama.cpp is past b10000; a number far beyond any real history is a typo or hostile
MAX_BUILD_NUMBER = 10**9
_PATCHES_KEYS = {"dir", "series", "result"}
_ENTRY_KEYS = {"file", "sha256", "tree"}
_RESULT_KEYS = {"tree"}


class PatchEntry(Struct, frozen=True):
    file: str
    sha256: str
    tree: str | None

    @property
    def number(self) -> int:
        return int(self.file[:4])


class UpstreamManifest(Struct, frozen=True):
    path: Path
    name: str
    url: str
    commit: str
    tree: str | None
    patches_dir: Path  # absolute
    patches_dir_rel: str  # as written in the manifest
    series: tuple[PatchEntry, ...]
    result_tree: str | None
    # the upstream's own build number at the pin (its commit count there, llama.cpp's
    # `b<N>`): what the binaries carry; recorded by fetch, rebase and bump
    build_number: int | None = None

    @property
    def build_commit(self) -> str:
        """The commit string the binaries carry: the pin, and the series on top."""
        return f"{self.commit[:12]}+{len(self.series)}" if self.series else self.commit[:12]

    def patch_path(self, entry: PatchEntry) -> Path:
        return self.patches_dir / entry.file

    @property
    def series_digest(self) -> str:
        """sha256 over the ordered series ("file sha256" lines): one id for the whole stack."""
        lines = "".join(f"{e.file} {e.sha256}\n" for e in self.series)
        return hashlib.sha256(lines.encode()).hexdigest()


class _Checker(Checker):
    """The shared schema reader plus the manifest's git object ids."""

    def object_id(self, data: dict[str, Any], key: str, where: str, required: bool) -> str | None:
        value = self.string(data, key, where, required)
        if value is None:
            return None
        if not HEX40.fullmatch(value):
            what = "commit" if key == "commit" else "tree"
            looks_like_ref = not re.fullmatch(r"[0-9a-fA-F]*", value)
            problem = f"{shown_value(value)} is not a full 40-hex {what} id"
            if looks_like_ref and key == "commit":
                problem += " (branch and tag names are refused: a pin must not move)"
            fix = (
                "pin the full lowercase commit id, e.g. the output of `git rev-parse <ref>`"
                if key == "commit"
                else f"use the full tree id (`git rev-parse <commit>^{{tree}}`) or remove {key}"
            )
            raise self.fail(f"{where}.{key}", problem, fix)
        return value


_HINT = (
    "create it (see docs/patches-and-rebase.md, 'The manifest') "
    "or pass --root to the right checkout"
)


def read_raw(path: Path) -> bytes:
    """The manifest file's bytes now, read as `load` reads it (a regular file of at most
    4 MiB, a FIFO never waited on, exit 2 naming it): for those that copy, hash, compare
    or rewrite the file after loading it, never an unbounded second read."""
    return read_bytes(path, what="manifest", hint=_HINT)


def load(path: Path, root: Path) -> UpstreamManifest:
    """Load and validate the upstream manifest at `path`; paths resolve against `root`.
    Pure: it reads. A write a kill interrupted is finished by the command context
    (`cli/context`, for commands that write) before this runs."""
    try:
        shown = str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        shown = str(path)
    c = _Checker(shown)
    _, data = c.load(path, what="manifest", hint=_HINT)

    c.known_keys(data, _TOP_KEYS, "")
    c.schema(data, SCHEMA)

    upstream = c.table(data.get("upstream"), "upstream")
    c.known_keys(upstream, _UPSTREAM_KEYS, "upstream")
    name = c.string(upstream, "name", "upstream")
    assert name is not None
    if not NAME.fullmatch(name):
        raise c.fail(
            "upstream.name",
            f"{shown_value(name)} is not a plain directory name",
            "use letters, digits, '.', '_' or '-', e.g. \"llama.cpp\"",
        )
    url = c.string(upstream, "url", "upstream")
    assert url is not None
    if not url.strip():
        raise c.fail("upstream.url", "empty", "set the upstream's git URL")
    commit = c.object_id(upstream, "commit", "upstream", required=True)
    assert commit is not None
    tree = c.object_id(upstream, "tree", "upstream", required=False)
    build_number = c.integer(
        upstream,
        "build_number",
        "upstream",
        required=False,
        minimum=1,
        maximum=MAX_BUILD_NUMBER,
        fix="remove it: `dgr-forge fetch` records the upstream's own count at the pin "
        "(`git rev-list --count <commit>` in a full clone)",
    )

    patches = c.table(data.get("patches", {}), "patches")
    c.known_keys(patches, _PATCHES_KEYS, "patches")
    dir_rel = c.string(patches, "dir", "patches", required=False) or f"patches/{name}"
    patches_dir = (root / dir_rel).resolve()
    if Path(dir_rel).is_absolute() or not patches_dir.is_relative_to(root.resolve()):
        raise c.fail(
            "patches.dir",
            f"{shown_value(dir_rel)} is outside the forge root",
            "use a relative path",
        )
    series_raw = patches.get("series", [])
    if not isinstance(series_raw, list):
        raise c.fail("patches.series", "must be an array of tables", "write [[patches.series]]")
    series: list[PatchEntry] = []
    for i, item in enumerate(series_raw):
        where = f"patches.series[{i}]"
        entry = c.table(item, where)
        c.known_keys(entry, _ENTRY_KEYS, where)
        file = c.string(entry, "file", where)
        assert file is not None
        m = PATCH_NAME.fullmatch(file)
        if not m:
            raise c.fail(
                f"{where}.file",
                f"{shown_value(file)} is not named NNNN-<slug>.patch",
                "run `dgr-forge export` to regenerate canonical names",
            )
        sha = c.string(entry, "sha256", where)
        assert sha is not None
        if not HEX64.fullmatch(sha):
            raise c.fail(
                f"{where}.sha256",
                f"{shown_value(sha)} is not a 64-hex sha256",
                f"set it to `sha256sum {dir_rel}/{file}` (or run `dgr-forge export`)",
            )
        step_tree = c.object_id(entry, "tree", where, required=False)
        if series and int(m.group(1)) == series[-1].number:
            raise c.fail(
                f"{where}.file",
                f"duplicate patch number {m.group(1)} ({series[-1].file} and {file})",
                "renumber the series (`dgr-forge export` does it)",
            )
        if series and int(m.group(1)) < series[-1].number:
            raise c.fail(
                f"{where}.file",
                f"{file} is listed after {series[-1].file}: series out of numeric order",
                "list [[patches.series]] in ascending NNNN order",
            )
        series.append(PatchEntry(file=file, sha256=sha, tree=step_tree))

    result = c.table(patches.get("result", {}), "patches.result")
    c.known_keys(result, _RESULT_KEYS, "patches.result")
    result_tree = c.object_id(result, "tree", "patches.result", required=False)

    try:
        _check_files_on_disk(c, patches_dir, dir_rel, series)
    except BadInput as err:
        # where the series lives: a half-written one there may be why (cli/context says so)
        err.details.setdefault("patches_dir", str(patches_dir))
        raise
    check_url(url, f"{shown}: [upstream] url")  # data, never a git option
    return UpstreamManifest(
        path=path,
        name=name,
        url=url,
        commit=commit,
        tree=tree,
        patches_dir=patches_dir,
        patches_dir_rel=dir_rel,
        series=tuple(series),
        result_tree=result_tree,
        build_number=build_number,
    )


def _check_files_on_disk(
    c: _Checker, patches_dir: Path, dir_rel: str, series: list[PatchEntry]
) -> None:
    listed = {e.file for e in series}
    for i, entry in enumerate(series):
        if not (patches_dir / entry.file).is_file():
            raise c.fail(
                f"patches.series[{i}].file",
                f"{dir_rel}/{entry.file} does not exist",
                "restore the file, or remove its [[patches.series]] entry",
            )
    on_disk = sorted(p.name for p in patches_dir.glob("*.patch")) if patches_dir.is_dir() else []
    for name in on_disk:
        if name not in listed:
            raise c.fail(
                "patches.series",
                f"{dir_rel}/{name} is on disk but not listed in the series",
                "add a [[patches.series]] entry for it (`dgr-forge export` does), or delete it",
            )
