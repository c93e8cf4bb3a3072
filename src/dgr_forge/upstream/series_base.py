"""Which series a workspace was patched from (`.git/dgr/series.json`, written by patch,
export and rebase), and whether the series on disk moved since: `export` is a fast-forward
of that base (docs/design.md: "a stale workspace cannot export over a teammate's patches").
The record lives in the work tree's repository so that deleting the workspace deletes it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, cast

import msgspec
from msgspec import Struct

from dgr_forge.core import gitutil
from dgr_forge.core.errors import NeedsHuman
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_bytes, atomic_write_text, read_tree_file
from dgr_forge.core.structs import d, values_without
from dgr_forge.upstream.manifest import UpstreamManifest

BASE_FILE = "dgr/series.json"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_NOT_COMPARED = frozenset({"trees", "commits"})  # what "the same base" is not about


class SeriesBase(Struct, frozen=True, omit_defaults=True):
    commit: str  # the pin
    series: tuple[tuple[str, str], ...]  # (file, sha256), in series order
    trees: tuple[str, ...] = ()  # after each patch (how an older record tells its commits)
    # the forge's own commits, oldest first: how it tells them from a person's, who cannot
    # make one of these ids by accident (an empty commit, a revert, an amend). None: an
    # older record, which told them by email and trees
    commits: tuple[str, ...] | None = None

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return values_without(self, _NOT_COMPARED) == values_without(other, _NOT_COMPARED)

    def __hash__(self) -> int:
        return hash(values_without(self, _NOT_COMPARED))

    @staticmethod
    def of(m: UpstreamManifest, commits: Sequence[str] | None = None) -> SeriesBase:
        trees = tuple(e.tree for e in m.series if e.tree)
        own = None if commits is None else tuple(commits)
        return SeriesBase(m.commit, tuple((e.file, e.sha256) for e in m.series), trees, own)


class Drift(Struct, frozen=True):
    """what changed on disk since this workspace was patched"""

    added: Annotated[tuple[str, ...], d("patch files added")]
    changed: Annotated[tuple[str, ...], d("patch files changed")]
    removed: Annotated[tuple[str, ...], d("patch files removed")]
    pin_moved: Annotated[
        tuple[str, str] | None,
        d("the manifest's pin moved (e.g. a teammate's rebase): `[old, new]`; null: it did not"),
    ]
    unknown: Annotated[
        bool, d("no record, and the workspace's commits do not match the files on disk")
    ] = False

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed or self.pin_moved or self.unknown)

    def describe(self) -> str:
        parts = []
        if self.pin_moved:
            parts.append(f"the pin moved from {self.pin_moved[0][:12]} to {self.pin_moved[1][:12]}")
        for label in ("added", "changed", "removed"):
            if files := getattr(self, label):
                parts.append(f"{label}: {', '.join(files)}")
        if self.unknown:
            parts.append("this workspace has no record of the series it was patched from")
        return "; ".join(parts)


def _path(src: Path) -> Path:
    return src / ".git" / BASE_FILE


def load(src: Path) -> SeriesBase | None:
    try:
        base = msgspec.json.decode(_path(src).read_bytes(), type=SeriesBase)
    except (OSError, msgspec.DecodeError):  # a damaged record is no record
        return None
    if not gitutil.HEX40.fullmatch(base.commit):
        return None
    if not all(gitutil.HEX40.fullmatch(t) for t in base.trees):
        base = msgspec.structs.replace(base, trees=())
    if base.commits is not None and not all(gitutil.HEX40.fullmatch(c) for c in base.commits):
        base = msgspec.structs.replace(base, commits=None)
    return base


def record(src: Path, base: SeriesBase) -> None:
    """`base` recorded for `src`, written only when it differs (a no-op `patch` stays cheap)."""
    text = msgspec.json.format(msgspec.json.encode(base), indent=1).decode() + "\n"
    if (src / ".git").is_dir() and text_of(src) != text:
        restore_text(src, text)


def text_of(src: Path) -> str | None:
    try:
        return _path(src).read_text(encoding="utf-8")
    except OSError:
        return None


def restore_text(src: Path, text: str | None) -> None:
    if text is None:
        _path(src).unlink(missing_ok=True)
    else:
        _path(src).parent.mkdir(exist_ok=True)
        atomic_write_text(_path(src), text)


def drift(base: SeriesBase, m: UpstreamManifest) -> Drift:
    now = {e.file: e.sha256 for e in m.series}
    was = dict(base.series)
    added = tuple(f for f in now if f not in was)
    removed = tuple(f for f in was if f not in now)
    changed = tuple(f for f in now if f in was and was[f] != now[f])
    pin = (base.commit, m.commit) if base.commit != m.commit else None
    return Drift(added, changed, removed, pin)


def harmful(
    base: SeriesBase | None,
    m: UpstreamManifest,
    rendered: Sequence[tuple[str, str]],
    workspace_trees: Sequence[str],
) -> Drift:
    """The changes on disk since `base` that writing `rendered` (file, sha256) would undo
    (one the workspace already holds is not). Without a record the workspace counts as
    patched from the disk's series when its commits carry exactly the manifest's trees;
    else only an export that changes nothing passes."""
    disk = {e.file: e.sha256 for e in m.series}
    new = dict(rendered)
    if base is None:
        trees = [e.tree for e in m.series]
        if None in trees or list(workspace_trees) != trees:
            return Drift((), (), (), None, unknown=new != disk)
        base = SeriesBase.of(m)
    d = drift(base, m)
    return Drift(
        added=tuple(f for f in d.added if new.get(f) != disk[f]),
        changed=tuple(f for f in d.changed if new.get(f) != disk[f]),
        removed=tuple(f for f in d.removed if f in new),
        pin_moved=None,  # the export's base is the pin on disk (series_commits checks HEAD on it)
    )


def stale_error(forge: Forge, m: UpstreamManifest, d: Drift, *, waited: bool) -> NeedsHuman:
    why = " (it changed while this export waited for the root lock: another workspace exported)"
    why = why if waited else ""
    return NeedsHuman(
        f"the series on disk is not the one this workspace was patched from{why}: "
        f"{d.describe()}; exporting would undo those patches",
        hint="bring the workspace up to date with `dgr-forge patch` (it applies the new "
        "series and replays your own commits on top), then export again; or overwrite the "
        "series on purpose with `dgr-forge export --force` (the replaced files are saved "
        f"under {forge.rel(forge.logs_dir)} first)",
        details={"drift": d, "manifest": forge.rel(m.path)},
    )


def log_path(forge: Forge, stem: str, suffix: str = "") -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    forge.logs_dir.mkdir(parents=True, exist_ok=True)
    target = forge.logs_dir / f"{stem}-{stamp}{suffix}"
    n = 1
    while target.exists():
        n += 1
        target = forge.logs_dir / f"{stem}-{stamp}-{n}{suffix}"
    return target


def save_replaced(forge: Forge, m: UpstreamManifest) -> Path:
    target = log_path(forge, f"export-replaced-{m.name}")
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "patches").mkdir(parents=True)
    for p in sorted(m.patches_dir.glob("*.patch")):  # (none without the directory)
        _save_copy(m.patches_dir, p.name, tmp / "patches" / p.name)
    _save_copy(m.path.parent, m.path.name, tmp / m.path.name)
    tmp.rename(target)  # complete or absent
    return target


def _save_copy(top: Path, name: str, to: Path) -> None:
    """A root file saved as git stores it: a link as a link (shutil.copy2 followed one to
    /dev/zero until the disk ran out), bytes read bounded, a FIFO exit 2."""
    if (top / name).is_symlink():
        os.symlink(os.readlink(top / name), to)
        return
    hint = "remove it from patches/ (only patch files and the manifest belong there)"
    to.write_bytes(read_tree_file(top, name, what="file to save before --force", hint=hint) or b"")


def save_changes(forge: Forge, stem: str, src: Path, head: str | None, by: str) -> Path | None:
    """Every change in `src`'s work tree against `head` (new files git does not ignore too)
    as one binary patch under logs/ before `by` discards them; None when nothing changed.
    Built in a copy of the index: the real one (a stopped cherry-pick's) is left as it is."""
    base = gitutil.rev_parse(src, head) if head else None
    tmp_index = src / ".git" / "dgr-save.index"
    if (src / ".git" / "index").exists():
        shutil.copyfile(src / ".git" / "index", tmp_index)
    else:
        tmp_index.unlink(missing_ok=True)
    env = {"GIT_INDEX_FILE": str(tmp_index)}
    try:
        gitutil.git(src, "add", "-A", env=env)
        diff = gitutil.git(
            src, "diff", "--cached", "--binary", "--full-index", "--no-color", "--no-ext-diff",
            base or EMPTY_TREE, "--", env=env, text=False
        )  # fmt: skip
    finally:
        tmp_index.unlink(missing_ok=True)
    if not (data := cast(bytes, diff.stdout)).strip():
        return None
    target = log_path(forge, stem, ".patch")
    header = (
        f"# Local changes of {src}, saved by `{by}`.\n"
        f"# Base commit: {base or '(none)'}\n"
        f"# Re-apply on that base: git -C {src} apply {target}\n\n"
    ).encode()
    atomic_write_bytes(target, header + data, mode=0o600)
    return target
