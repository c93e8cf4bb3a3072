"""The upstream pin: `manifests/llama.cpp.toml`, loaded and validated (docs/design.md, "Manifest");
every malformed input is a `BadInput` (exit 2) naming the file, the key and the fix.
"""

from __future__ import annotations

import hashlib
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated

import msgspec

from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import read_regular
from dgr_forge.core.gitutil import HEX40, HEX64, NAME
from dgr_forge.core.tominput import (
    MAX_BYTES,
    Checker,
    NonEmpty,
    Record,
    Version1,
    about,
    decode,
    fail,
    shown_value,
)
from dgr_forge.core.urls import check_url

PATCH_NAME = re.compile(r"^(\d{4})-[A-Za-z0-9][A-Za-z0-9._-]*\.patch$")
# llama.cpp is past b10000; a number far beyond any real history is a typo or hostile
MAX_BUILD_NUMBER = 10**9


class PatchEntry(Record, frozen=True):
    """One patch of the series, in order."""

    file: Annotated[str, about("`NNNN-<slug>.patch` in `patches.dir`")]
    sha256: Annotated[str, about("the patch file's sha256, hex")]
    tree: (
        Annotated[str, about("the tree after applying it (40 hex), recorded by export")] | None
    ) = None


class Result(Record, frozen=True):
    """What the whole series gives."""

    tree: Annotated[str, about("the patched tree (40 hex), recorded by export")] | None = None


class Budget(Record, frozen=True):
    """How big the series may grow in upstream's own files (`check` enforces it)."""

    upstream_lines: Annotated[
        int,
        about(
            "the most lines the series may add plus remove in files upstream already has "
            "(files the series adds are not counted)",
            ge=1,
            le=10**9,
            fix="a positive integer, e.g. `budget = { upstream_lines = 400 }`",
        ),
    ]


class Patches(Record, frozen=True):
    """The patch series on top of the pin."""

    dir: (
        Annotated[
            str, about("the series' directory, inside the root (default: patches/<upstream.name>)")
        ]
        | None
    ) = None
    series: Annotated[tuple[PatchEntry, ...], about("the patches, in ascending NNNN order")] = ()
    result: Result = msgspec.field(default_factory=Result)
    budget: Budget | None = None


class Upstream(Record, frozen=True):
    """The upstream repository and the exact commit it is pinned at."""

    name: Annotated[str, about("a plain directory name, e.g. `llama.cpp`")]
    url: Annotated[NonEmpty, about("the upstream's git URL", fix="set the upstream's git URL")]
    commit: Annotated[str, about("the pin: a full 40-hex commit id, never a branch or tag")]
    tree: Annotated[str, about("the pin's tree id (40 hex)")] | None = None
    build_number: (
        Annotated[
            int,
            about(
                "the upstream's own build number at the pin (its commit count there, "
                "llama.cpp's `b<N>`), recorded by fetch",
                ge=1,
                le=MAX_BUILD_NUMBER,
                fix="remove it: `dgr-forge fetch` records the upstream's own count at the pin "
                "(`git rev-list --count <commit>` in a full clone)",
            ),
        ]
        | None
    ) = None


class UpstreamManifest(Record, frozen=True):
    """`manifests/llama.cpp.toml`: the upstream pin and its patch series."""

    LOADED = ("path", "root")
    schema: Version1
    upstream: Upstream
    patches: Patches = msgspec.field(default_factory=Patches)
    path: Path = msgspec.field(default_factory=Path)
    root: Path = msgspec.field(default_factory=Path)  # the forge root paths resolve against

    # the keys callers read most, by their short names
    @property
    def name(self) -> str:
        return self.upstream.name

    @property
    def url(self) -> str:
        return self.upstream.url

    @property
    def commit(self) -> str:
        return self.upstream.commit

    @property
    def tree(self) -> str | None:
        return self.upstream.tree

    @property
    def build_number(self) -> int | None:
        return self.upstream.build_number

    @property
    def series(self) -> tuple[PatchEntry, ...]:
        return self.patches.series

    @property
    def result_tree(self) -> str | None:
        return self.patches.result.tree

    @property
    def patches_dir_rel(self) -> str:
        return self.patches.dir or f"patches/{self.upstream.name}"

    @cached_property
    def patches_dir(self) -> Path:
        return (self.root / self.patches_dir_rel).resolve()

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


def _object_id(shown: str, value: str | None, key: str) -> None:
    if value is None or HEX40.fullmatch(value):
        return
    what = "commit" if key.endswith("commit") else "tree"
    problem = f"{shown_value(value)} is not a full 40-hex {what} id"
    if what == "commit" and not re.fullmatch(r"[0-9a-fA-F]*", value):
        problem += " (branch and tag names are refused: a pin must not move)"
    fix_text = f"use the full tree id (`git rev-parse <commit>^{{tree}}`) or remove {key}"
    if what == "commit":
        fix_text = "pin the full lowercase commit id, e.g. the output of `git rev-parse <ref>`"
    raise fail(shown, key, problem, fix_text)


_HINT = (
    "create it (see docs/patches-and-rebase.md, 'The manifest') "
    "or pass --root to the right checkout"
)


def read_raw(path: Path) -> bytes:
    """The manifest's bytes now, read bounded as `load` reads it (a FIFO never waited on)."""
    return read_regular(path, what="manifest", hint=_HINT, limit=MAX_BYTES)


def load(path: Path, root: Path) -> UpstreamManifest:
    """The manifest at `path`, validated; paths resolve against `root`. Pure: a write a
    kill interrupted is finished by the command context before this runs."""
    resolved, top = path.resolve(), root.resolve()
    shown = str(resolved.relative_to(top) if resolved.is_relative_to(top) else path)
    _, data = Checker(shown).load(path, what="manifest", hint=_HINT, root=root)
    m = decode(shown, data, UpstreamManifest, path=path, root=root)
    if not NAME.fullmatch(m.name):
        raise fail(
            shown,
            "upstream.name",
            f"{shown_value(m.name)} is not a plain directory name",
            "use letters, digits, '.', '_' or '-', e.g. \"llama.cpp\"",
        )
    _object_id(shown, m.commit, "upstream.commit")
    _object_id(shown, m.tree, "upstream.tree")
    dir_rel = m.patches_dir_rel
    if Path(dir_rel).is_absolute() or not m.patches_dir.is_relative_to(top):
        raise fail(
            shown,
            "patches.dir",
            f"{shown_value(dir_rel)} is outside the forge root",
            "use a relative path",
        )
    _series(shown, m.series, dir_rel)
    _object_id(shown, m.result_tree, "patches.result.tree")
    try:
        for i, entry in enumerate(m.series):
            if not (m.patches_dir / entry.file).is_file():
                raise fail(
                    shown,
                    f"patches.series[{i}].file",
                    f"{dir_rel}/{entry.file} does not exist",
                    "restore the file, or remove its [[patches.series]] entry",
                )
        listed = {e.file for e in m.series}
        for name in sorted(p.name for p in m.patches_dir.glob("*.patch")):  # (none: no dir)
            if name not in listed:
                raise fail(
                    shown,
                    "patches.series",
                    f"{dir_rel}/{name} is on disk but not listed in the series",
                    "add a [[patches.series]] entry for it (`dgr-forge export` does), or delete it",
                )
    except BadInput as err:
        # where the series lives: a half-written one there may be why (cli/app says so)
        err.details.setdefault("patches_dir", str(m.patches_dir))
        raise
    check_url(m.url, f"{shown}: [upstream] url")  # data, never a git option
    return m


def _series(shown: str, series: tuple[PatchEntry, ...], dir_rel: str) -> None:
    for i, entry in enumerate(series):
        where = f"patches.series[{i}]"
        file = entry.file
        if not (m := PATCH_NAME.fullmatch(file)):
            raise fail(
                shown,
                f"{where}.file",
                f"{shown_value(file)} is not named NNNN-<slug>.patch",
                "run `dgr-forge export` to regenerate canonical names",
            )
        if not HEX64.fullmatch(entry.sha256):
            raise fail(
                shown,
                f"{where}.sha256",
                f"{shown_value(entry.sha256)} is not a 64-hex sha256",
                f"set it to `sha256sum {dir_rel}/{file}` (or run `dgr-forge export`)",
            )
        _object_id(shown, entry.tree, f"{where}.tree")
        last = series[i - 1] if i else None
        if last and int(m.group(1)) == int(last.file[:4]):
            raise fail(
                shown,
                f"{where}.file",
                f"duplicate patch number {m.group(1)} ({last.file} and {file})",
                "renumber the series (`dgr-forge export` does it)",
            )
        if last and int(m.group(1)) < int(last.file[:4]):
            raise fail(
                shown,
                f"{where}.file",
                f"{file} is listed after {last.file}: series out of numeric order",
                "list [[patches.series]] in ascending NNNN order",
            )
