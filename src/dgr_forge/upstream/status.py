"""What `status` shows: the upstream work tree and the patch series, from one reading of
the workspace (`workspace.inspect`: one `git status` and one history walk), plus a rebase
in progress. Read-only: takes no lock, changes nothing in the work tree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msgspec import Struct, field

from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_bytes
from dgr_forge.core.structs import asdict
from dgr_forge.core.urls import mask
from dgr_forge.upstream import series_base, tree_cache
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.series import CheckResult, check_series, parse_series, read_patch
from dgr_forge.upstream.workspace import (
    FETCH_JOURNAL,
    REPLAY_STATE,
    LocalChange,
    Workspace,
    connected,
    pin_tree,
)

# `fetch` and `replay` are imported where a workspace needs them: a no-op status (the
# series applied, no replay) does without them.


class UpstreamStatus(Struct):
    """The workspace as `status` shows it; `to_dict()` is the `--json` `upstream` object."""

    name: str
    url: str
    commit: str  # the pin
    tree: str | None  # the pinned tree, when the manifest has one
    src_dir: Path
    present: bool  # the work tree exists and is a git repository
    # the upstream's own build number at the pin, as the manifest records it
    build_number: int | None = None
    head: str | None = None
    pin_present: bool = False  # the pinned commit and its whole tree are in the workspace
    at_pin: bool = False  # HEAD is exactly the pin
    commits_on_top: int = 0  # commits between the pin and HEAD (the applied patches)
    commit_verified: bool = False  # HEAD is the pin or descends from it
    pin_tree: str | None = None  # the tree of the pinned commit, as found here
    tree_verified: bool | None = None  # pin_tree == tree (None: no tree pinned)
    shallow: bool = False
    interrupted: bool = False  # a fetch, checkout or patch was cut short; the next run ends it
    local_changes: list[LocalChange] = field(default_factory=list)
    # ignored files in the tree (the forge's presets file left out): `build` refuses them
    ignored: list[str] = field(default_factory=list)
    local_commits: list[str] = field(default_factory=list)  # "<id> <subject>", not the forge's

    @property
    def verified(self) -> bool:
        return (
            self.commit_verified
            and self.tree_verified is not False
            and not self.interrupted
            and not self.local_changes
            and not self.ignored
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["src_dir"] = str(self.src_dir)
        data["verified"] = self.verified
        return data


def workspace_status(
    forge: Forge, m: UpstreamManifest, ws: Workspace, *, rebasing: bool = False
) -> UpstreamStatus:
    """The upstream part of `status`, from the workspace model `ws`."""
    st = UpstreamStatus(
        name=m.name,
        url=mask(m.url),
        commit=m.commit,
        tree=m.tree,
        src_dir=ws.src,
        build_number=m.build_number,
        present=ws.exists,
    )
    if not st.present:
        return st
    st.head = ws.head
    st.local_changes = ws.changes
    from dgr_forge.upstream.trees import forge_written  # the presets `build` lets through

    # what `build` refuses beyond git's changes, from the walk that measured the workspace
    st.ignored = [rel for rel in ws.ignored if not forge_written(ws.src, rel)]
    st.shallow = ws.shallow
    st.interrupted = ws.interrupted
    st.pin_tree = pin_tree(ws, m.commit)
    if st.pin_tree is not None and FETCH_JOURNAL in ws.journals:
        # a killed transfer can leave the commit without its trees: check them all
        st.pin_tree = st.pin_tree if connected(ws.src, m.commit) else None
    st.pin_present = st.pin_tree is not None
    if st.pin_tree is not None and m.tree is not None:
        st.tree_verified = st.pin_tree == m.tree
    if ws.head is not None and st.pin_present:
        st.at_pin = ws.head == m.commit
        on_top = ws.commits_on(m.commit)
        st.commit_verified = on_top is not None
        st.commits_on_top = on_top or 0
    if ws.head is not None and not st.commit_verified and not rebasing:
        # (mid-rebase, HEAD is on the new upstream: its history is not anyone's commits)
        from dgr_forge.upstream.fetch import local_commits

        st.local_commits = local_commits(ws.src, ws.head, m.commit if st.pin_present else None)
    return st


class PatchState(Struct, frozen=True):
    file: str
    state: str  # applied | pending | changed on disk | conflict
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"file": self.file, "state": self.state, "detail": self.detail}


class SeriesStatus(Struct, frozen=True):
    series: list[PatchState]
    applied: bool  # the whole series, exactly, and no local edits
    uncommitted: list[str]  # porcelain lines
    local_commits: list[str]
    operation: str | None
    # a `patch` replay of a person's commits: per commit replayed / conflict / pending
    replay: list[dict[str, str]] | None = None
    # the series on disk moved since this workspace was patched (series_base), or None
    moved: dict[str, object] | None = None

    def as_dict(self) -> dict[str, object]:
        """The `patches` object of `status --json`."""
        replay = None
        if self.replay is not None:
            stopped = [r["commit"] for r in self.replay if r["state"] == "conflict"]
            replay = {"commits": self.replay, "conflict": stopped[0] if stopped else None}
        return {
            "series": [s.as_dict() for s in self.series],
            "applied": self.applied,
            "local_edits": {"uncommitted": self.uncommitted, "local_commits": self.local_commits},
            "operation_in_progress": self.operation,
            "replay": replay,
            "moved_since_patched": self.moved,
        }


def _applied_prefix(
    m: UpstreamManifest,
    ws: Workspace,
    changed: list[bool],
    checks: list[CheckResult | None],
    cached: list[str | None],
) -> int:
    applied = 0
    if ws.base == m.commit:
        for i, commit in enumerate(ws.series[: len(m.series)]):
            check = checks[i]
            computed = check.tree if check else cached[i]
            expected = m.series[i].tree or (None if changed[i] else computed)
            if commit.tree != expected:
                break
            applied = i + 1
    return applied


def series_status(
    forge: Forge,
    m: UpstreamManifest,
    ws: Workspace,
    *,
    have_pin: bool,
    rebasing: bool = False,
) -> SeriesStatus:
    """Per-patch state for `status`. The series is tried on a scratch index only when it
    is not all applied (to tell pending from conflicting patches). Mid-rebase each patch
    is replayed, conflict or pending as the rebase's own state says."""
    replay = None
    if ws.exists and (ws.src / ".git" / REPLAY_STATE).exists():
        from dgr_forge.upstream.local_replay import replay_rows

        replay = replay_rows(ws.src)
    if rebasing:
        mid_rebase = _rebase_states(forge)
        if mid_rebase is not None:
            return SeriesStatus(mid_rebase, False, ws.dirty, [], ws.operation, replay)
    base = series_base.load(ws.src) if ws.exists else None
    moved = series_base.drift(base, m) if base is not None else None
    datas = [read_patch(m, e) for e in m.series]
    changed = [sha256_bytes(d) != e.sha256 for e, d in zip(m.series, datas, strict=True)]
    checks: list[CheckResult | None] = [None] * len(m.series)
    problem = ""
    # trees the manifest does not record: from the workspace's cache (computed once)
    cached: list[str | None] = [None] * len(datas)
    if ws.exists:
        cached = tree_cache.lookup(ws.src, m.commit, datas)
    applied_prefix = _applied_prefix(m, ws, changed, checks, cached)
    if have_pin and applied_prefix < len(m.series):
        try:
            parsed = parse_series(m, datas)
            checks = list(
                check_series(ws.src, m, datas, parsed, compare_trees=False, tmp_root=forge.tmp_dir)
            )
            tree_cache.store(ws.src, m.commit, datas, [c.tree if c else None for c in checks])
        except BadInput as err:
            problem = err.message
        applied_prefix = _applied_prefix(m, ws, changed, checks, cached)
    states: list[PatchState] = []
    for i, entry in enumerate(m.series):
        check = checks[i]
        if changed[i]:
            note = "; the workspace has the manifest's version" if i < applied_prefix else ""
            states.append(PatchState(entry.file, "changed on disk", "sha256 differs" + note))
        elif i < applied_prefix:
            states.append(PatchState(entry.file, "applied"))
        elif check is not None and check.status == "conflict":
            states.append(PatchState(entry.file, "conflict", "; ".join(map(str, check.conflicts))))
        else:
            states.append(PatchState(entry.file, "pending", problem))
    return SeriesStatus(
        series=states,
        applied=applied_prefix == len(m.series) and not ws.has_local_edits and have_pin,
        uncommitted=ws.dirty,
        # mid-rebase the commits above the old pin are the replay's, not a person's
        local_commits=[] if rebasing else ws.local_commits,
        operation=ws.operation,
        replay=replay,
        moved=moved.as_dict() if moved else None,
    )


def _rebase_states(forge: Forge) -> list[PatchState] | None:
    """Per patch from the rebase's state file (read by the rebase's own parser): replayed
    (with its outcome so far), conflict (the files), pending; the same count as the
    progress line."""
    from dgr_forge.upstream.rebase.state import load_rebase_state

    try:
        state = load_rebase_state(forge)
    except BadInput:
        return None
    if state is None:
        return None
    stopped = state.phase == "conflict" or state.conflict is not None
    states = []
    for i, step in enumerate(state.patches):
        if i < state.next:
            states.append(PatchState(step.file, "replayed", step.outcome or ""))
        elif i == state.next and stopped:
            states.append(PatchState(step.file, "conflict", ", ".join(step.files)))
        else:
            states.append(PatchState(step.file, "pending"))
    return states


def rebase_progress(forge: Forge) -> dict[str, Any] | None:
    """A rebase in progress as `status` shows it (from its state file, read by the rebase's
    own parser; best effort: an unreadable one shows only where it is)."""
    path = forge.rebase_state
    if not path.exists():
        return None
    # (imported only now: the rebase package costs a no-op `status` about 25 ms)
    from dgr_forge.upstream.rebase.state import load_rebase_state

    info: dict[str, Any] = {"state": str(path)}
    try:
        state = load_rebase_state(forge)
    except BadInput:
        return info
    if state is None:
        return info
    steps, nxt = state.patches, state.next
    info.update(
        onto=state.onto,
        new_commit=state.new_commit,
        old_commit=state.old_commit,
        phase=state.phase,
        patches_total=len(steps),
        patches_done=min(nxt, len(steps)),
    )
    stopped = state.conflict is not None or state.phase == "conflict"
    if stopped and 0 <= nxt < len(steps):
        info["stopped_at"] = steps[nxt].file
    return info
