"""One model of the upstream work tree (`<workspace>/src/<name>`), measured exactly by
`inspect()` in one `git status` and one history walk; what the forge owns in that
repository (journals, pin ref, identity); and the clean-up of what a killed git leaves.
"""

from __future__ import annotations

import json
import shutil
from contextlib import suppress
from itertools import takewhile
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct
from msgspec.structs import replace

from dgr_forge.core import fsutil, gitutil
from dgr_forge.core.errors import BadInput, ForgeError, NeedsHuman
from dgr_forge.core.forge import Forge
from dgr_forge.core.urls import mask_text
from dgr_forge.upstream import series_base

PIN_REF = "refs/dgr/pin"  # the pin fetch last checked out (upstream, not the forge's)
# journals in .git: a run that died mid-transition is completed or rolled back, never
# mistaken for a person's edits
CHECKOUT_JOURNAL = "dgr-checkout"  # fetch is moving HEAD to the pin
PATCH_JOURNAL = "dgr-patching"  # patch is running `git am` on the pin
FETCH_JOURNAL = "dgr-fetching"  # fetch is transferring objects: the pin may be incomplete
JOURNALS = (CHECKOUT_JOURNAL, PATCH_JOURNAL, FETCH_JOURNAL)
# `patch` replaying a person's commits on a new series (local_replay.py); --continue/--abort
REPLAY_STATE = "dgr-replay.json"
# the person's commits from before a replay, kept reachable until it is done or undone
REPLAY_REF = "refs/dgr/replay-orig"
# read-only git calls must not take index.lock (status would otherwise refresh the index)
READ_ONLY_ENV = {"GIT_OPTIONAL_LOCKS": "0"}
FORGE_EMAIL = gitutil.FORGE_IDENTITY["GIT_COMMITTER_EMAIL"]
# git's own markers of an operation in progress (relative to the git dir)
OPERATIONS = (
    ("rebase-apply", "git am / rebase"),
    ("rebase-merge", "git rebase"),
    ("MERGE_HEAD", "git merge"),
    ("CHERRY_PICK_HEAD", "git cherry-pick"),
)
_LONG_WALK = 1000


class LocalChange(Struct, frozen=True):
    path: str
    change: str  # modified, added, deleted, renamed, type-changed, untracked, unmerged


class ChainCommit(Struct, frozen=True):
    commit: str
    tree: str
    parents: tuple[str, ...]
    forge_made: bool  # committed by the forge identity (not by a person)


class Workspace(Struct):
    src: Path
    exists: bool
    head: str | None = None  # None: unborn HEAD (or no repository)
    changes: list[LocalChange] = []
    dirty: list[str] = []  # the same changes as "XY path" lines
    ignored: list[str] = []  # ignored files (paths), git's word
    operation: str | None = None  # an am/rebase/merge/cherry-pick left in progress
    journals: frozenset[str] = frozenset()
    shallow: bool = False
    chain: list[ChainCommit] = []  # first-parent, newest first
    series: list[ChainCommit] = []  # forge commits, oldest first
    base: str | None = None  # the commit under them
    local_commits: list[str] = []  # a person's commits on top

    @property
    def has_local_edits(self) -> bool:
        return bool(self.dirty or self.local_commits)

    def tree_of(self, commit: str) -> str | None:
        return next((c.tree for c in self.chain if c.commit == commit), None)

    def commits_on(self, pin: str) -> int | None:
        """How many forge commits (a linear chain) HEAD has on `pin`; None when it is not on it
        so (an unborn HEAD has no chain). Whether they are right is patch's tree check."""
        for n, c in enumerate(self.chain):
            if c.commit == pin:
                return n
            if not c.forge_made or len(c.parents) != 1:
                return None
        return None


def record_fetch_failure(gitdir: Path, commit: str, cause: str) -> None:
    """Why the transfer failed, kept in the fetch journal (masked, one line): `status` says
    the fetch failed and why, not that it was interrupted."""
    line = " ".join(mask_text(cause).split())[:2000]
    (gitdir / FETCH_JOURNAL).write_text(f"{commit}\nfailed: {line}\n", encoding="utf-8")


def fetch_failure(src: Path) -> str | None:
    journal = git_dir(src) / FETCH_JOURNAL
    try:  # the forge's own small file: anything else there (a link, a FIFO) tells nothing
        data = fsutil.read_regular(journal, what="fetch journal", hint="", limit=8192, follow=False)
    except (ForgeError, OSError):
        return None
    for line in data.decode("utf-8", "replace").splitlines()[1:]:
        if line.startswith("failed: "):
            return line.removeprefix("failed: ").strip() or "(no cause recorded)"
    return None


def git_dir(src: Path) -> Path:
    dot = src / ".git"
    return dot if dot.is_dir() else Path(gitutil.out(src, "rev-parse", "--absolute-git-dir"))


def operation_in_progress(src: Path) -> str | None:
    gd = git_dir(src)
    return next((what for name, what in OPERATIONS if (gd / name).exists()), None)


def refuse_during_rebase(forge: Forge, *, replay: bool = True) -> None:
    if forge.rebase_state.exists():
        raise NeedsHuman(
            f"a rebase is in progress in this workspace (state in {forge.rel(forge.rebase_state)})",
            hint="finish it with `dgr-forge rebase --continue`, or undo it with "
            "`dgr-forge rebase --abort`",
            details={"state": str(forge.rebase_state)},
        )
    if replay:
        refuse_during_replay(forge)


class _Stopped(Struct):
    stopped_at: object = None  # a replay's state, read no further (`local_replay`'s)


def refuse_during_replay(forge: Forge) -> None:
    for state in forge.workspace.glob(f"src/*/.git/{REPLAY_STATE}"):
        try:  # only whether it stopped (a killed one: `patch` redoes it)
            stopped = msgspec.json.decode(state.read_bytes(), type=_Stopped).stopped_at is not None
        except (OSError, ValueError):  # not a replay's: `patch` ignores it, writes its own
            stopped = False
        if stopped:
            src = state.parent.parent
            raise NeedsHuman(
                f"{forge.rel(src)}: a patch replay is in progress (your commits on the new series)",
                hint="resolve and `git add` the files, then `dgr-forge patch --continue`; or "
                "`dgr-forge patch --abort` to put the workspace back as it was (your commits "
                f"from before the update are kept at {REPLAY_REF})",
                details={"workspace": forge.rel(src), "ref": REPLAY_REF},
            )


_XY = {"M": "modified", "A": "added", "D": "deleted", "R": "renamed", "C": "added"}
_XY["T"] = "type-changed"


def read_status(src: Path) -> tuple[str | None, list[LocalChange], list[str], list[str]]:
    """HEAD, local changes, their "XY path" lines and the ignored files, in one git call."""
    proc = gitutil.git(
        src, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all",
        "--ignored=matching", "--ignore-submodules=none",
        env=READ_ONLY_ENV,  # a no-op must not even refresh the index
    )  # fmt: skip
    head: str | None = None
    changes: list[LocalChange] = []
    lines: list[str] = []
    ignored: list[str] = []
    fields = iter(proc.stdout.split("\0"))
    for entry in fields:
        if entry.startswith("# branch.oid "):
            oid = entry.split(" ", 2)[2]
            head = oid if gitutil.HEX40.fullmatch(oid) else None
        elif entry.startswith("1 "):
            parts = entry.split(" ", 8)
            xy = parts[1].replace(".", " ")
            changes.append(LocalChange(parts[8], _XY.get(xy.strip()[-1:], "modified")))
            lines.append(f"{xy} {parts[8]}")
        elif entry.startswith("2 "):
            parts = entry.split(" ", 9)
            changes.append(LocalChange(parts[9], "renamed"))
            orig = next(fields, "")  # the original path follows in its own field
            lines.append(f"{parts[1].replace('.', ' ')} {orig} -> {parts[9]}")
        elif entry.startswith("u "):
            path = entry.split(" ", 10)[10]
            changes.append(LocalChange(path, "unmerged"))
            lines.append(f"{entry.split(' ', 2)[1]} {path}")
        elif entry.startswith("? "):
            changes.append(LocalChange(entry[2:], "untracked"))
            lines.append(f"?? {entry[2:]}")
        elif entry.startswith("! "):
            ignored.append(entry[2:])
    return head, changes, lines, ignored


def read_chain(src: Path, limit: int) -> list[ChainCommit]:
    proc = gitutil.git(
        src, "log", "--first-parent", "--no-show-signature", f"--max-count={limit}",
        "--format=%H%x00%T%x00%ce%x00%P", "HEAD", "--",
        check=False, env=READ_ONLY_ENV,  # an unborn HEAD is an empty chain
    )  # fmt: skip
    rows = [line.split("\0") for line in proc.stdout.splitlines()]
    return [ChainCommit(c, tree, tuple(ps.split()), e == FORGE_EMAIL) for c, tree, e, ps in rows]


def inspect(src: Path, pin: str, series_len: int) -> Workspace:
    """The workspace measured: its base is the pin, or the pin fetch last checked out
    (`refs/dgr/pin`) after the manifest moved; commits above it not the forge's are a person's."""
    ws = Workspace(
        src=src, exists=(src / ".git/HEAD").is_file() and (src / ".git/objects").is_dir()
    )
    if not ws.exists:
        return ws
    gd = src / ".git"
    ws.operation = operation_in_progress(src)
    ws.journals = frozenset(j for j in JOURNALS if (gd / j).exists())
    ws.shallow = (gd / "shallow").exists()
    ws.head, ws.changes, ws.dirty, ws.ignored = read_status(src)
    if ws.head is None:
        return ws
    limit = series_len + 1
    chain = read_chain(src, limit)
    bases = {pin}
    if len(chain) < limit or chain[series_len].commit != pin:
        if len(chain) == limit:  # a shorter walk met the root (or a shallow graft): all
            chain = read_chain(src, limit + _LONG_WALK)
        # HEAD at the pin (fetched, not patched): the walk stops there, at no other base
        if not (chain and chain[0].commit == pin) and (fetched := gitutil.rev_parse(src, PIN_REF)):
            bases.add(fetched)
    # the forge's commits are those it recorded making, by id: not whatever a person
    # committed with the forge's email and a tree of the series (an empty commit or a
    # revert would be re-applied away); an older record: the trees it names
    recorded = series_base.load(src)
    if recorded is not None and recorded.commits is not None:
        own = frozenset(recorded.commits)
        chain = [replace(c, forge_made=c.commit in own) for c in chain]
    elif recorded is not None and recorded.trees:
        trees = set(recorded.trees)
        chain = [replace(c, forge_made=c.forge_made and c.tree in trees) for c in chain]
    ws.chain = chain
    top = list(takewhile(lambda c: not c.forge_made and c.commit not in bases, chain))
    rest = chain[len(top) :]
    made = list(takewhile(lambda c: c.forge_made and c.commit not in bases, rest))
    if rest:  # (no forge commits: a person's commits right on the base)
        ws.local_commits = [c.commit for c in top]
        ws.series = made[::-1]
        ws.base = rest[len(made)].commit if len(made) < len(rest) else None
    else:
        ws.base = ws.head  # unknown history (no fetch recorded it): fetch decides
    return ws


def pin_tree(ws: Workspace, pin: str) -> str | None:
    if (found := ws.tree_of(pin)) is not None or not ws.exists:
        return found
    proc = gitutil.git(
        ws.src, "rev-parse", "--verify", "--quiet", f"{pin}^{{tree}}", check=False,
        env=READ_ONLY_ENV
    )  # fmt: skip
    return proc.stdout.strip() if proc.returncode == 0 else None


def connected(src: Path, commit: str) -> bool:
    """Every object of `commit`'s tree is here, and its parents (or a shallow graft): a
    killed fetch can leave neither. Costs a walk of one tree: run it only when unsure."""
    proc = gitutil.git(
        src, "rev-list", "--objects", "--quiet", "--max-count=1", commit, "--",
        check=False, env=READ_ONLY_ENV
    )  # fmt: skip
    return proc.returncode == 0


def remove_git_leftovers(gitdir: Path) -> None:
    """Remove a killed git's lock files and temporary packs. Safe only under the workspace
    lock: every git call on this repository is the forge's, so a lock is a dead run's."""
    for entry in gitdir.iterdir():
        if entry.name == "objects":
            continue
        for lock in entry.rglob("*.lock") if entry.is_dir() else [entry]:
            if lock.name.endswith(".lock"):
                lock.unlink(missing_ok=True)
    objects = gitdir / "objects"
    remove_partial_objects(gitdir)
    for pack in objects.glob("pack/pack-*.pack"):
        if not pack.with_suffix(".idx").exists():  # renamed into place, never indexed
            for sibling in pack.parent.glob(pack.stem + ".*"):
                sibling.unlink(missing_ok=True)
    for keep in objects.glob("pack/pack-*.keep"):
        with suppress(OSError):
            if keep.read_text().startswith("fetch-pack"):  # fetch's own, only kept mid-fetch
                keep.unlink()


def remove_partial_objects(gitdir: Path) -> None:
    """A failed or killed fetch's temporary packs and objects (never part of the repository).
    Call after a failed fetch, or under the workspace lock."""
    for pattern in ("incoming-*", "pack/tmp_*", "*/tmp_obj_*"):
        for tmp in (gitdir / "objects").glob(pattern):
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)


# The source trees a build compiles hold exactly the patched tree and the worker's commit:
# `source_changes()` is every path git sees beyond it, ignored ones too (a shadow
# `include/cstdio` in `.git/info/exclude` is still on the include path), except the presets
# files the forge writes, recognised by name and content (a person's own may include anything).

USER_PRESETS = "CMakeUserPresets.json"  # CMake's name; the person's file
OWN_PRESETS = "dgr-forge.presets.json"  # the forge's presets; the user's file includes it
# the CMakeUserPresets.json the forge creates where there is none: its include alone
USER_PRESETS_STUB = f'{{\n  "version": 4,\n  "include": ["{OWN_PRESETS}"]\n}}\n'
_PRESET_KEYS = {"version", "cmakeMinimumRequired", "configurePresets", "buildPresets"}
_CONFIGURE_KEYS = {
    "name",
    "displayName",
    "description",
    "generator",
    "binaryDir",
    "cacheVariables",
    "toolchainFile",
}
_BUILD_KEYS = {"name", "configurePreset", "targets"}
_MAX_PRESETS = 1 << 20


def source_changes(src: Path) -> list[str]:
    """Porcelain v1 lines ("XY path", "!! path") of everything in `src` beyond its commit.
    Under the workspace lock: git may write the refreshed index back, else racily clean
    files are re-hashed at every call (~1 s on llama.cpp's 3,000 files)."""
    proc = gitutil.git(
        src, "status", "--porcelain", "-z", "--untracked-files=all", "--ignored=matching",
        "--ignore-submodules"
    )  # fmt: skip
    out = []
    fields = iter(proc.stdout.split("\0"))
    for entry in fields:
        if not entry:
            continue
        if entry[0] in "RC":  # a rename's original path follows in its own field
            next(fields, None)
        if entry[:3] == "!! " and forge_written(src, entry[3:]):
            continue
        out.append(entry)
    return out


def forge_written(src: Path, rel: str) -> bool:
    if rel == OWN_PRESETS:
        return forge_presets(src / rel)
    if rel == USER_PRESETS:
        try:  # a tree file: bounded, a link read as its text (never equal to the stub)
            data = fsutil.read_tree_file(src, rel, hint="", limit=_MAX_PRESETS, missing_ok=True)
        except (OSError, ForgeError):
            return False
        return data == USER_PRESETS_STUB.encode() and not (src / rel).is_symlink()
    return False


def forge_presets(path: Path) -> bool:
    """`path` is as `dgr-forge presets` writes it: JSON of exactly its keys (no `include`,
    which would load other files), every preset `dgr-*`."""
    try:
        # in the upstream tree: a link is its text (not JSON), a FIFO exit 2, never a wait
        raw = fsutil.read_tree_file(path.parent, path.name, hint="", limit=_MAX_PRESETS)
        data: Any = json.loads(raw or b"")
    except (OSError, ValueError, BadInput):
        return False
    if not isinstance(data, dict) or set(data) - _PRESET_KEYS:
        return False
    for key, allowed in (("configurePresets", _CONFIGURE_KEYS), ("buildPresets", _BUILD_KEYS)):
        if not isinstance(presets := data.get(key, []), list):
            return False
        for preset in presets:
            if not isinstance(preset, dict) or set(preset) - allowed:
                return False
            if not str(preset.get("name", "")).startswith("dgr-"):
                return False
    return True
