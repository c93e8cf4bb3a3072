"""The rebase's replay: each patch commit merged (3-way) onto the new head by the replay
engine (`upstream.replay`), in memory, and recorded in the rebase state; a conflict is
cherry-picked in the work tree, where a person resolves it (`take_resolution`), and
explained: the files, the upstream commits on those lines, the next commands."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

import msgspec

from dgr_forge.core import fault, gitutil
from dgr_forge.core.errors import NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_tree_file
from dgr_forge.core.gitutil import git, out
from dgr_forge.core.output import Reporter
from dgr_forge.upstream.fetch import PARALLEL_CHECKOUT
from dgr_forge.upstream.rebase import state as rs
from dgr_forge.upstream.rebase.gitops import clear_leftovers, ensure_history
from dgr_forge.upstream.rebase.state import UpstreamCommit
from dgr_forge.upstream.replay import Replay, Step, commit_tree, subject_of
from dgr_forge.upstream.workspace import git_dir

CONFLICT_HINT = (
    "resolve it in the checkout so it is a regular file (or the link git should store), "
    "or `dgr-forge rebase --abort`"
)


def _ours_ranges(
    src: Path, path: str, head_blob: str, data: bytes | None = None
) -> list[tuple[int, int]]:
    """Line ranges (1-based) in HEAD's blob of the "ours" side of each conflict region of
    the conflicted file (its bytes `data`, else the work tree's): located in HEAD's blob,
    so exact even where clean hunks of the same pick shifted lines in the merged file."""
    if data is None:
        data = read_tree_file(
            src, path, what="conflicted file", hint=CONFLICT_HINT, missing_ok=True
        )
    if data is None:
        return []
    head_lines = head_blob.splitlines()
    ranges: list[tuple[int, int]] = []
    region: list[str] | None = None
    in_ours = False
    for line in data.decode("utf-8", errors="replace").splitlines():
        if line.startswith("<<<<<<< "):
            region, in_ours = [], True
        elif line.startswith(("||||||| ", "=======")) and region is not None:
            in_ours = False
        elif line.startswith(">>>>>>> ") and region is not None:
            if n := len(region):
                for start in range(len(head_lines) - n + 1):
                    if head_lines[start : start + n] == region:
                        ranges.append((start + 1, start + n))
                        break
            region = None
        elif region is not None and in_ours:
            region.append(line)
    return ranges


def upstream_commits_for(
    src: Path,
    old: str,
    new: str,
    head: str,
    path: str,
    merged: bytes | None,
    upstream: Callable[[], set[str]],
) -> tuple[list[UpstreamCommit], bool]:
    """Upstream commits in old..new (`upstream()` lists them) on the conflicted lines of
    `path` (`git log -L`; its bytes `merged`, else the work tree's), else every one that
    touched it; and whether they were found by line."""
    file_commits = _touching(src, f"{old}..{new}", [path])
    blob = git(src, "show", f"{head}:{path}", check=False)
    seen: dict[str, None] = {}  # in the order found
    for a, b in _ours_ranges(src, path, blob.stdout, merged) if blob.returncode == 0 else []:
        proc = git(
            src, "log", "--format=%x00%H", f"-L{a},{b}:{path}", f"{old}..{head}", check=False
        )
        shas = (ln[1:].strip() for ln in proc.stdout.splitlines() if ln.startswith("\x00"))
        seen |= dict.fromkeys(sha for sha in shas if sha in upstream())
    if not seen:
        return file_commits, False
    subjects = {c.commit: c.subject for c in file_commits}
    # (a subject asked of git only for a commit the file's log does not list)
    found = [UpstreamCommit(commit=c, subject=subjects.get(c) or subject_of(src, c)) for c in seen]
    return found, True


def explain(
    src: Path, old: str, new: str, head: str, files: list[str], merged: str | None = None
) -> rs.Conflict:
    """The conflict in `files`, each named with its upstream commits (`upstream_commits_for`;
    the markers from the `merged` tree when given, else the work tree's files)."""
    found = rs.Conflict(files=files)

    @functools.cache
    def upstream() -> set[str]:  # once for all the files, and only if a line asks
        return set(out(src, "rev-list", f"{old}..{new}").split())

    for path in files:
        data: bytes | None = None
        if merged is not None:
            blob = git(src, "cat-file", "blob", f"{merged}:{path}", check=False, text=False)
            data = cast(bytes, blob.stdout) if blob.returncode == 0 else None
        found.upstream[path], found.line_level[path] = upstream_commits_for(
            src, old, new, head, path, data, upstream
        )
    return found


def _touching(src: Path, span: str, paths: list[str]) -> list[UpstreamCommit]:
    log = git(src, "log", "--format=%H%x09%s", span, "--", *paths, check=False).stdout
    return [
        UpstreamCommit(commit=c, subject=s)
        for c, _, s in (ln.partition("\t") for ln in log.splitlines() if ln)
    ]


def _changed_lines(diff: str) -> set[str]:
    """The lines a diff removes ("-...") and adds ("+..."), without context or positions."""
    return {
        line[0] + line[1:].strip()
        for line in diff.splitlines()
        if line[:1] in ("-", "+") and line[1:].strip() and not line.startswith(("--- ", "+++ "))
    }


def upstreamed_by(src: Path, state: rs.RebaseState, step: rs.PatchStep) -> list[UpstreamCommit]:
    """The upstream commits (old..new pin) that took a dropped patch: those whose diff
    removes and adds every line the patch does (context and positions aside), else every
    one that touched its files. Empty when the history cannot be fetched."""
    if not _history(state):
        return []
    files = out(src, "diff-tree", "--no-commit-id", "--name-only", "-r", step.old_commit)
    span = f"{state.old_commit}..{state.new_commit}"
    paths = files.splitlines()
    touching = _touching(src, span, paths)
    if len(touching) > 1:
        mine = _changed_lines(git(src, "show", "--format=", step.old_commit).stdout)
        log = git(src, "log", "-p", "--format=%x00%H", span, "--", *paths, check=False).stdout
        chunks = (chunk.partition("\n") for chunk in log.split("\0")[1:])
        took = {commit.strip() for commit, _, diff in chunks if mine <= _changed_lines(diff)}
        if exact := [c for c in touching if c.commit in took]:
            return exact
    return touching


class Known(Replay):
    """The engine's replay of the patches from state.next on, plus state.head's tree if known."""

    def __init__(self, src: Path, state: rs.RebaseState, head_tree: str | None = None) -> None:
        commits = [s.old_commit for s in state.patches[state.next :]]
        super().__init__(src, commits, git_dir(src), batch_ref=rs.REF_BATCH)
        self.first = state.next  # the patch the chain starts at
        self.head_tree = head_tree


def record(src: Path, state: rs.RebaseState, resolved: bool, known: Known | None = None) -> None:
    """Commit the index as patch state.next on state.head; drop it when it changes nothing."""
    step = state.patches[state.next]
    tree = out(src, "write-tree")
    head_tree = known.head_tree if known and known.head_tree else gitutil.tree_of(src, state.head)
    if tree == head_tree:
        # by itself: the change is upstream; after a conflict: a person chose upstream's side
        step.new_commit, step.outcome = None, "dropped-by-hand" if resolved else "dropped"
    else:
        made = known.rewrite(step.old_commit, tree, state.head) if known else None
        commit = made or commit_tree(src, step.old_commit, tree, state.head)
        fault.point("rebase.commit", step.file[:4])
        git(src, "update-ref", "--no-deref", "HEAD", commit)
        step.new_commit, step.outcome = commit, "resolved" if resolved else "picked"
        state.head = commit
        head_tree = tree
    if known is not None:
        known.head_tree = head_tree
    state.next, state.phase, state.conflict = state.next + 1, "replay", None


def replay(forge: Forge, state: rs.RebaseState, out_: Reporter, known: Known | None = None) -> None:
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
                patch = state.patches[state.next]
                fault.point("rebase.replay", patch.file[:4])
                if step.kind in ("conflict", "worktree"):
                    stopped = step
                    break
                if step.kind == "picked":
                    fault.point("rebase.commit", patch.file[:4])
                    state.head = step.commit or state.head
                patch.new_commit, patch.outcome = step.commit, step.kind
                state.next, state.phase, state.conflict = state.next + 1, "replay", None
                _replayed(Path(state.src_dir), state, patch, out_)
                if not step.batched:
                    rs.save_state(forge, state, durable=False)
                unsaved = step.batched
                known.head_tree = step.tree
            if unsaved:
                rs.save_state(forge, state, durable=False)
            if stopped is None:
                return
            _in_worktree(forge, state, out_, known=stopped.kind == "conflict")
            known.head_tree = None


def _in_worktree(forge: Forge, state: rs.RebaseState, out_: Reporter, *, known: bool) -> None:
    """Patch state.next by cherry-pick in the work tree at state.head (a conflict is
    resolved there). A conflict `known` already: its explaining range is fetched while the
    work tree moves."""
    src = Path(state.src_dir)
    step = state.patches[state.next]
    with ThreadPoolExecutor(1) as pool:
        history = pool.submit(_history, state) if known else None
        git(src, "checkout", "-q", "-f", "--detach", state.head, config=PARALLEL_CHECKOUT)
        proc = git(
            src, "-c", "merge.conflictStyle=diff3", "cherry-pick", "--no-commit",
            step.old_commit, check=False,
        )  # fmt: skip
        fetched = history.result() if history is not None else None
    if proc.returncode == 0:
        record(src, state, resolved=False)
        clear_leftovers(src, out_, index_lock=False)
        _replayed(src, state, step, out_)
        rs.save_state(forge, state, durable=False)
        return
    # a conflict, named, saved and raised (a --dry-run notes it); the index alone (`git
    # diff` would stat the whole work tree)
    files = sorted({ln.split("\t", 1)[1] for ln in out(src, "ls-files", "-u").splitlines() if ln})
    if not files:
        raise OperationFailed(
            f"replaying {step.file} failed: {(proc.stderr or proc.stdout).strip()}",
            hint="`dgr-forge rebase --abort` restores the workspace",
        )
    out_.info(f"{step.file}: conflict in {', '.join(files)}")
    c = rs.Conflict(files=files)
    if _history(state) if fetched is None else fetched:
        c = explain(src, state.old_commit, state.new_commit, state.head, files)
    step.upstream_commits = rs.unique(uc for f in files for uc in c.upstream.get(f, []))
    step.files = files
    if state.canary:
        # a --dry-run: note it and go on without this patch
        step.new_commit, step.outcome = None, "conflict"
        git(src, "reset", "-q", "--hard", state.head)
        clear_leftovers(src, out_, index_lock=False)
        state.next += 1
        rs.save_state(forge, state, durable=False)
        return
    state.phase = "conflict"
    state.conflict = c
    rs.save_state(forge, state)
    lines = [f"patch {step.file} ({step.subject}) conflicts with {state.new_commit[:12]}:"]
    for f in files:
        lines.append(f"  conflict: {f}")
        for uc in c.upstream.get(f, []):
            lines.append(f"    upstream {uc.commit[:12]} {uc.subject}")
    if not c.upstream:
        lines.append(
            f"  (the upstream history between {state.old_commit[:12]} and "
            f"{state.new_commit[:12]} could not be fetched: see `git log` there yourself)"
        )
    lines += [
        "next:",
        f"  edit the files in {src} (conflict markers <<<<<<< ======= >>>>>>>),",
        f"  git -C {src} add {' '.join(files)}",
        "  dgr-forge rebase --continue",
        "or give up: dgr-forge rebase --abort",
    ]
    raise NeedsHuman(
        "\n".join(lines),
        hint=f"resolve in {src}, `git add` the files, then `dgr-forge rebase --continue` "
        "(or `dgr-forge rebase --abort` to restore everything)",
        details={
            "patch": step.file,
            "subject": step.subject,
            "files": files,
            "upstream_commits": msgspec.to_builtins(c.upstream),
            "src_dir": str(src),
            "next_commands": [
                f"git -C {src} add {' '.join(files)}",
                "dgr-forge rebase --continue",
                "dgr-forge rebase --abort",
            ],
        },
    )


def _history(state: rs.RebaseState) -> bool:
    return ensure_history(Path(state.src_dir), state.fetch_url, state.old_commit, state.new_commit)


def _replayed(src: Path, state: rs.RebaseState, step: rs.PatchStep, out_: Reporter) -> None:
    verb = "replayed"
    if step.outcome == "dropped":
        step.upstream_commits = upstreamed_by(src, state, step)
        took = "".join(f", {c.commit[:12]} {c.subject}" for c in step.upstream_commits[:3])
        verb = f"dropped (already upstream{took})"
    out_.info(f"{step.file}: {verb}")


def take_resolution(forge: Forge, state: rs.RebaseState, out_: Reporter, known: Known) -> None:
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
        if gitutil.rev_parse(src, "HEAD^") != state.head:
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
    if unmerged := sorted({path for status, path in pairs if status == "U"}):
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
    if unstaged := [path for status, path in pairs if status != "U"]:
        raise NeedsHuman(
            f"patch {step.file}: changes not staged: {', '.join(unstaged)}",
            hint=f"`git -C {src} add` what belongs to the resolution (or `git -C {src} "
            "checkout -- <file>` to drop it), then `dgr-forge rebase --continue`",
            details={"patch": step.file, "files": unstaged},
        )
    record(src, state, resolved=True, known=known)
    clear_leftovers(src, out_, index_lock=False)
    how = "to no change: dropped by hand" if step.outcome == "dropped-by-hand" else "by hand"
    out_.info(f"{step.file}: resolved {how}")
    rs.save_state(forge, state)


def has_markers(src: Path, rel: str) -> bool:
    data = read_tree_file(src, rel, what="conflicted file", hint=CONFLICT_HINT, missing_ok=True)
    return data is not None and re.search(rb"^(<<<<<<< |>>>>>>> )", data, re.M) is not None
