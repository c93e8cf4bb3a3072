"""What `status` shows of the upstream work tree, the series and a rebase in progress,
from one `workspace.inspect`. Read-only: takes no lock, changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from msgspec import UNSET, Struct, UnsetType

from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_bytes
from dgr_forge.core.structs import d
from dgr_forge.core.urls import mask
from dgr_forge.upstream import series as series_mod
from dgr_forge.upstream import series_base, workspace
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.workspace import Workspace, pin_tree

if TYPE_CHECKING:
    from dgr_forge.upstream.rebase.state import RebaseState


class UpstreamStatus(Struct):
    """the upstream checkout"""

    name: Annotated[str, d("the upstream's name")]
    url: Annotated[str, d("masked")]
    commit: Annotated[str, d("the pin")]
    tree: Annotated[str | None, d("the pinned tree")]
    src_dir: Annotated[Path, d("the workspace's checkout")]
    present: Annotated[bool, d("the workspace has a checkout")]
    build_number: Annotated[
        int | None, d("the upstream's build number at the pin, from the manifest")
    ] = None
    head: Annotated[str | None, d("its HEAD")] = None
    pin_present: Annotated[bool, d("the pinned commit and its whole tree are here")] = False
    at_pin: Annotated[bool, d("HEAD is exactly the pin")] = False
    commits_on_top: Annotated[int, d("commits between the pin and HEAD")] = 0
    commit_verified: Annotated[bool, d("HEAD is the pin or descends from it")] = False
    pin_tree: Annotated[str | None, d("the pinned commit's tree, as found here")] = None
    tree_verified: Annotated[bool | None, d("the tree matches (null: none pinned)")] = None
    shallow: Annotated[bool, d("the checkout is shallow")] = False
    interrupted: Annotated[
        bool, d("a fetch, checkout or patch was cut short; the next run ends it")
    ] = False
    local_changes: Annotated[list[workspace.LocalChange], d("uncommitted changes")] = []
    ignored: Annotated[
        list[str],
        d(
            "ignored files in the tree, which `build` refuses (the forge's presets file left "
            "out); `verified` is false while there are any"
        ),
    ] = []
    local_commits: Annotated[list[str], d("commits not the forge's, as `<id> <subject>`")] = []
    verified: Annotated[
        bool, d("commit and tree verified, nothing interrupted, changed or ignored")
    ] = False


def workspace_status(
    m: UpstreamManifest, ws: Workspace, *, rebasing: bool = False
) -> UpstreamStatus:
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
    st.head, st.local_changes, st.shallow = ws.head, ws.changes, ws.shallow
    # what `build` refuses beyond git's changes (the presets it lets through left out), from
    # the walk that measured the workspace
    st.ignored = [rel for rel in ws.ignored if not workspace.forge_written(ws.src, rel)]
    st.interrupted = bool(ws.journals)
    st.pin_tree = pin_tree(ws, m.commit)
    if st.pin_tree is not None and workspace.FETCH_JOURNAL in ws.journals:
        # a killed transfer can leave the commit without its trees: check them all
        st.pin_tree = st.pin_tree if workspace.connected(ws.src, m.commit) else None
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
    clean = not (st.interrupted or st.local_changes or st.ignored)
    st.verified = st.commit_verified and st.tree_verified is not False and clean
    return st


class PatchState(Struct, frozen=True):
    """a patch"""

    file: Annotated[str, d("the patch file")]
    state: Annotated[
        str,
        d(
            "`applied`, `pending`, `changed on disk`, `conflict`; mid-rebase `replayed`, "
            "`conflict`, `pending`"
        ),
    ]
    detail: Annotated[str, d("more on the state")] = ""


class LocalEdits(Struct, frozen=True):
    """what the workspace holds beyond the series"""

    uncommitted: Annotated[list[str], d("`git status --porcelain` lines")]
    local_commits: Annotated[list[str], d("commits of your own on top")]


class ReplayCommit(Struct, frozen=True):
    """one of your commits in a `patch` replay"""

    commit: Annotated[str, d("its id before the replay")]
    subject: Annotated[str, d("its subject")]
    state: Annotated[str, d("`replayed`, `skipped`, `conflict` or `pending`")]


class Replay(Struct, frozen=True):
    """a `patch` replay of your commits"""

    commits: Annotated[list[ReplayCommit], d("per commit")]
    conflict: Annotated[str | None, d("the commit it stopped on")]


class SeriesStatus(Struct, frozen=True):
    """the series"""

    series: Annotated[list[PatchState], d("per patch file")]
    applied: Annotated[bool, d("the whole series, exactly, and no local edits")]
    local_edits: LocalEdits
    operation_in_progress: Annotated[str | None, d("a git operation in the workspace")]
    replay: Replay | None = None
    moved_since_patched: series_base.Drift | None = None
    footprint: Annotated[series_mod.Footprint | None, d("null: a patch file cannot be read")] = None


def series_status(
    forge: Forge, m: UpstreamManifest, ws: Workspace, *, have_pin: bool, rebasing: bool = False
) -> SeriesStatus:
    """Per-patch state; the series is tried on a scratch index only when it is not all
    applied (pending or conflicting?). Mid-rebase, as the rebase's own state says."""
    replay = None
    if ws.exists and (ws.src / ".git" / workspace.REPLAY_STATE).exists():
        from dgr_forge.upstream.local_replay import replay_rows

        if (rows := replay_rows(ws.src)) is not None:
            commits = [ReplayCommit(*row) for row in rows]
            stopped = [c.commit for c in commits if c.state == "conflict"]
            replay = Replay(commits, stopped[0] if stopped else None)
    state, conflicted = _rebase_state(forge) if rebasing else (None, False)
    if state is not None:
        steps = []
        for i, step in enumerate(state.patches):
            if i < state.next:
                steps.append(PatchState(step.file, "replayed", step.outcome or ""))
            elif i == state.next and conflicted:
                steps.append(PatchState(step.file, "conflict", ", ".join(step.files)))
            else:
                steps.append(PatchState(step.file, "pending"))
        return SeriesStatus(steps, False, LocalEdits(ws.dirty, []), ws.operation, replay)
    base = series_base.load(ws.src) if ws.exists else None
    moved = series_base.drift(base, m) if base is not None else None
    datas = [series_mod.read_patch(m, e) for e in m.series]
    changed = [sha256_bytes(d) != e.sha256 for e, d in zip(m.series, datas, strict=True)]
    checks: list[series_mod.CheckResult] = []
    problem = ""

    def prefix(trees: Sequence[str | None]) -> int:  # how many of the series ws holds
        if ws.base != m.commit:
            return 0
        for i, commit in enumerate(ws.series[: len(m.series)]):
            if commit.tree != (m.series[i].tree or (None if changed[i] else trees[i])):
                return i
        return min(len(ws.series), len(m.series))

    applied_prefix = prefix(series_mod.cached_trees(ws.src, m.commit, datas))
    if have_pin and applied_prefix < len(m.series):
        try:
            parsed = series_mod.parse_series(m, datas)
            checks = series_mod.check_series(
                ws.src, m, datas, parsed, compare_trees=False, tmp_root=forge.tmp_dir
            )
            series_mod.cache_trees(ws.src, m.commit, datas, [c.tree for c in checks])
            applied_prefix = prefix([c.tree for c in checks])
        except BadInput as err:
            problem = err.message
    states: list[PatchState] = []
    for i, entry in enumerate(m.series):
        if changed[i]:
            note = "; the workspace has the manifest's version" if i < applied_prefix else ""
            states.append(PatchState(entry.file, "changed on disk", "sha256 differs" + note))
        elif i < applied_prefix:
            states.append(PatchState(entry.file, "applied"))
        elif checks and (check := checks[i]).status == "conflict":
            states.append(PatchState(entry.file, "conflict", "; ".join(map(str, check.conflicts))))
        else:
            states.append(PatchState(entry.file, "pending", problem))
    applied = applied_prefix == len(m.series) and not ws.has_local_edits and have_pin
    # mid-rebase the commits above the old pin are the replay's, not a person's
    edits = LocalEdits(ws.dirty, [] if rebasing else ws.local_commits)
    return SeriesStatus(states, applied, edits, ws.operation, replay, moved or None)


def _rebase_state(forge: Forge) -> tuple[RebaseState | None, bool]:
    """The rebase's state file (its package imported only now: ~25 ms; None: unreadable)
    and whether it stopped on a conflict."""
    from dgr_forge.upstream.rebase.state import load_rebase_state

    try:
        state = load_rebase_state(forge)
    except BadInput:
        return None, False
    return state, state is not None and (state.phase == "conflict" or state.conflict is not None)


class RebaseProgress(Struct, kw_only=True, omit_defaults=True):
    """the rebase in progress (from its state file; an unreadable one: only `state`)"""

    state: Annotated[str, d("its state file")]
    onto: Annotated[str | UnsetType, d("`--onto` as given")] = UNSET
    new_commit: Annotated[str | UnsetType, d("the commit it replays onto")] = UNSET
    old_commit: Annotated[str | UnsetType, d("the pin")] = UNSET
    phase: Annotated[str | UnsetType, d("where it is")] = UNSET
    patches_total: Annotated[int | UnsetType, d("patches in the series")] = UNSET
    patches_done: Annotated[int | UnsetType, d("patches replayed")] = UNSET
    stopped_at: Annotated[str | UnsetType, d("the patch it stopped on")] = UNSET


def rebase_progress(forge: Forge) -> RebaseProgress | None:
    if not (path := forge.rebase_state).exists():
        return None
    state, stopped = _rebase_state(forge)
    if state is None:
        return RebaseProgress(state=str(path))
    steps, nxt = state.patches, state.next
    stop = steps[nxt].file if stopped and 0 <= nxt < len(steps) else UNSET
    return RebaseProgress(
        state=str(path),
        onto=state.onto,
        new_commit=state.new_commit,
        old_commit=state.old_commit,
        phase=state.phase,
        patches_total=len(steps),
        patches_done=min(nxt, len(steps)),
        stopped_at=stop,
    )
