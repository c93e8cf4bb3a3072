"""The rebase's replay: each patch commit merged (3-way) onto the new head by the replay
engine (`upstream.replay`), in memory, and recorded in the rebase state; a conflict is
cherry-picked in the work tree, where a person resolves it (`take_resolution`)."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dgr_forge.core import fault, gitutil
from dgr_forge.core.errors import NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_tree_file
from dgr_forge.core.gitutil import git, out
from dgr_forge.core.output import Reporter
from dgr_forge.upstream.fetch import PARALLEL_CHECKOUT
from dgr_forge.upstream.rebase.conflicts import (
    CONFLICT_HINT,
    conflict_error,
    explain,
    upstreamed_by,
)
from dgr_forge.upstream.rebase.gitops import clear_leftovers, ensure_history
from dgr_forge.upstream.rebase.state import (
    REF_BATCH,
    Conflict,
    PatchStep,
    RebaseState,
    save_state,
    unique,
)
from dgr_forge.upstream.replay import Replay, Step, commit_tree
from dgr_forge.upstream.workspace import git_dir


class Known(Replay):
    """The engine's replay of the patches from state.next on, plus state.head's tree if known."""

    def __init__(self, src: Path, state: RebaseState, head_tree: str | None = None) -> None:
        commits = [s.old_commit for s in state.patches[state.next :]]
        super().__init__(src, commits, git_dir(src), batch_ref=REF_BATCH)
        self.first = state.next  # the patch the chain starts at
        self.head_tree = head_tree


def record(
    src: Path,
    state: RebaseState,
    i: int,
    resolved: bool,
    known: Known | None = None,
    tree: str | None = None,
) -> None:
    """Commit the index (or `tree`, merged in memory: HEAD stays) as patch i on state.head;
    drop it when it changes nothing."""
    step = state.patches[i]
    move_head = tree is None
    if tree is None:
        tree = out(src, "write-tree")
    head_tree = known.head_tree if known and known.head_tree else gitutil.tree_of(src, state.head)
    if tree == head_tree:
        # by itself: the change is upstream; after a conflict: a person chose upstream's side
        step.new_commit, step.outcome = None, "dropped-by-hand" if resolved else "dropped"
    else:
        if known is not None:
            commit = known.rewrite(step.old_commit, tree, state.head) or ""
        else:
            commit = commit_tree(src, step.old_commit, tree, state.head)
        fault.point("rebase.commit", step.file[:4])
        if move_head:
            git(src, "update-ref", "--no-deref", "HEAD", commit)
        step.new_commit, step.outcome = commit, "resolved" if resolved else "picked"
        state.head = commit
        head_tree = tree
    if known is not None:
        known.head_tree = head_tree
    state.next, state.phase, state.conflict = i + 1, "replay", None


def _took(forge: Forge, state: RebaseState, step: Step, out_: Reporter) -> None:
    """A patch the engine replayed in memory, recorded (saved unless batched)."""
    patch = state.patches[state.next]
    if step.kind == "picked":
        fault.point("rebase.commit", patch.file[:4])
        patch.new_commit, patch.outcome = step.commit, "picked"
        state.head = step.commit or state.head
    else:
        patch.new_commit, patch.outcome = None, "dropped"
    state.next, state.phase, state.conflict = state.next + 1, "replay", None
    _replayed(Path(state.src_dir), state, patch, out_)
    if not step.batched:
        save_state(forge, state, durable=False)


def replay(forge: Forge, state: RebaseState, out_: Reporter, known: Known | None = None) -> None:
    """Replay the patches from state.next on (`known`: the replay a resolution was recorded
    with). HEAD and the work tree move only where a patch needs them; finish checks out."""
    if known is None:
        # the new pin's tree is known when nothing is replayed yet
        head_tree = state.new_tree if state.head == state.new_commit else None
        known = Known(Path(state.src_dir), state, head_tree)
    with known:
        while state.next < len(state.patches):
            unsaved = False
            stopped: Step | None = None
            for step in known.onto(state.head, known.head_tree, state.next - known.first):
                fault.point("rebase.replay", state.patches[state.next].file[:4])
                if step.kind in ("conflict", "worktree"):
                    stopped = step
                    break
                _took(forge, state, step, out_)
                unsaved = step.batched
                known.head_tree = step.tree
            if unsaved:
                save_state(forge, state, durable=False)
            if stopped is None:
                return
            _in_worktree(forge, state, out_, known=stopped.kind == "conflict")
            known.head_tree = None


def _in_worktree(forge: Forge, state: RebaseState, out_: Reporter, *, known: bool) -> None:
    """Patch state.next by cherry-pick in the work tree at state.head (a conflict is
    resolved there). A conflict `known` already: its explaining range is fetched while the
    work tree moves."""
    src = Path(state.src_dir)
    i = state.next
    step = state.patches[i]
    with ThreadPoolExecutor(1) as pool:
        history = pool.submit(_history, state) if known else None
        git(src, "checkout", "-q", "-f", "--detach", state.head, config=PARALLEL_CHECKOUT)
        proc = git(
            src, "-c", "merge.conflictStyle=diff3", "cherry-pick", "--no-commit",
            step.old_commit, check=False,
        )  # fmt: skip
        fetched = history.result() if history is not None else None
    if proc.returncode != 0:
        _conflict(forge, state, out_, proc, fetched)
        return
    record(src, state, i, resolved=False)
    clear_leftovers(src, out_, index_lock=False)
    _replayed(src, state, step, out_)
    save_state(forge, state, durable=False)


def _history(state: RebaseState) -> bool:
    return ensure_history(Path(state.src_dir), state.fetch_url, state.old_commit, state.new_commit)


def _conflict(
    forge: Forge,
    state: RebaseState,
    out_: Reporter,
    proc: subprocess.CompletedProcess[str],
    fetched: bool | None,
) -> None:
    """The cherry-pick of state.next stopped: a conflict, named, saved and raised (in a
    --dry-run noted, and the replay goes on)."""
    src = Path(state.src_dir)
    i = state.next
    step = state.patches[i]
    # the index alone (`git diff` would stat the whole work tree)
    listed = out(src, "ls-files", "-u").splitlines()
    unmerged = sorted({ln.split("\t", 1)[1] for ln in listed if ln})
    if not unmerged:
        raise OperationFailed(
            f"replaying {step.file} failed: {(proc.stderr or proc.stdout).strip()}",
            hint="`dgr-forge rebase --abort` restores the workspace",
        )
    out_.info(f"{step.file}: conflict in {', '.join(unmerged)}")
    history = _history(state) if fetched is None else fetched
    found = Conflict(files=unmerged)
    if history:
        found = explain(src, state.old_commit, state.new_commit, state.head, unmerged)
    step.upstream_commits = unique(c for f in unmerged for c in found.upstream.get(f, []))
    step.files = unmerged
    if state.canary:
        # a --dry-run: note it and go on without this patch
        step.new_commit, step.outcome = None, "conflict"
        git(src, "reset", "-q", "--hard", state.head)
        clear_leftovers(src, out_, index_lock=False)
        state.next = i + 1
        save_state(forge, state, durable=False)
        return
    state.phase = "conflict"
    state.conflict = found
    save_state(forge, state)
    raise conflict_error(forge, state)


def _replayed(src: Path, state: RebaseState, step: PatchStep, out_: Reporter) -> None:
    verb = "replayed"
    if step.outcome == "dropped":
        step.upstream_commits = upstreamed_by(src, state, step)
        verb = (
            "dropped (already upstream"
            + "".join(f", {c.commit[:12]} {c.subject}" for c in step.upstream_commits[:3])
            + ")"
        )
    out_.info(f"{step.file}: {verb}")


def take_resolution(forge: Forge, state: RebaseState, out_: Reporter, known: Known) -> None:
    """Record the person's resolution of patch state.next, written by `known` (the replay
    of the rest goes on from it)."""
    src = Path(state.src_dir)
    step = state.patches[state.next]
    gdir = git_dir(src)
    if (gdir / "index.lock").exists():
        raise NeedsHuman(
            f"{gdir / 'index.lock'} exists: a git command is running in {src}, or one crashed",
            hint="wait for it to finish; if none is running, delete the file and retry",
        )
    head, _, head_tree = out(src, "rev-parse", "HEAD", "HEAD^{tree}").partition("\n")
    known.head_tree = head_tree if head == state.head else None
    if head != state.head:
        parent = gitutil.rev_parse(src, "HEAD^")
        if parent != state.head:
            raise NeedsHuman(
                f"{src}: HEAD moved to {head[:12]} during the rebase (expected {state.head[:12]})",
                hint=f"`git -C {src} reset --soft {state.head}` keeps your resolution "
                "staged; then `dgr-forge rebase --continue`",
            )
        # the engineer committed the resolution: take its tree, keep our own commit metadata
        out_.info(f"taking the resolution from your commit {head[:12]}")
        git(src, "reset", "-q", "--soft", state.head)
    listed = out(src, "diff", "--name-status", "-z").split("\0")
    pairs = list(zip(listed[::2], listed[1::2], strict=False))
    unmerged = sorted({path for status, path in pairs if status == "U"})
    if unmerged:
        raise NeedsHuman(
            f"patch {step.file}: still unresolved: {', '.join(unmerged)}",
            hint=f"edit them in {src}, `git -C {src} add {' '.join(unmerged)}`, then "
            "`dgr-forge rebase --continue`",
            details={"patch": step.file, "files": unmerged},
        )
    marked = [f for f in (state.conflict.files if state.conflict else []) if has_markers(src, f)]
    if marked:
        raise NeedsHuman(
            f"patch {step.file}: conflict markers left in {', '.join(marked)}",
            hint="remove the <<<<<<< ======= >>>>>>> blocks, `git add` again, then "
            "`dgr-forge rebase --continue`",
            details={"patch": step.file, "files": marked},
        )
    unstaged = [path for status, path in pairs if status != "U"]
    if unstaged:
        raise NeedsHuman(
            f"patch {step.file}: changes not staged: {', '.join(unstaged)}",
            hint=f"`git -C {src} add` what belongs to the resolution (or `git -C {src} "
            "checkout -- <file>` to drop it), then `dgr-forge rebase --continue`",
            details={"patch": step.file, "files": unstaged},
        )
    record(src, state, state.next, resolved=True, known=known)
    clear_leftovers(src, out_, index_lock=False)
    if step.outcome == "dropped-by-hand":
        out_.info(f"{step.file}: resolved to no change: dropped by hand")
    else:
        out_.info(f"{step.file}: resolved by hand")
    save_state(forge, state)


def has_markers(src: Path, rel: str) -> bool:
    data = read_tree_file(src, rel, what="conflicted file", hint=CONFLICT_HINT, missing_ok=True)
    if data is None:
        return False
    return bool(re.search(r"^(<<<<<<< |>>>>>>> )", data.decode("utf-8", errors="replace"), re.M))
