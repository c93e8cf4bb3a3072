"""The rebase commands: start (`--onto`), resume (`--continue`), abort (`--abort`)."""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dgr_forge.core import fault, gitutil
from dgr_forge.core.errors import BadInput, NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.gitutil import HEX40, git
from dgr_forge.core.output import Reporter
from dgr_forge.core.urls import check_url
from dgr_forge.upstream import series_base
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.patches import ensure_patched
from dgr_forge.upstream.rebase.finish import (
    check_manifest_untouched,
    count_build_number,
    drop_refs,
    finish,
    inputs_digest,
    noop_result,
    restore_journal,
)
from dgr_forge.upstream.rebase.gitops import (
    check_rev,
    clear_leftovers,
    peel,
    pin_commit,
    refuse_stale,
    resolve_rev,
    stale_git_state,
)
from dgr_forge.upstream.rebase.replay import Known, replay, take_resolution
from dgr_forge.upstream.rebase.state import (
    REF_NEW,
    REF_OLD,
    PatchStep,
    Rebase,
    RebaseAbort,
    RebaseState,
    journal_dir,
    load_rebase_state,
    save_state,
    state_path,
)
from dgr_forge.upstream.surface import Recorded

# ----------------------------------------------------------------------------- commands


def in_progress(forge: Forge) -> str | None:
    """A one-line description of a rebase in progress in this workspace, else None.
    Commands that would move the workspace (fetch, patch, build) may refuse on it."""
    state = load_rebase_state(forge)
    if state is None:
        return None
    at = state.patches[state.next].file if state.next < len(state.patches) else "the end"
    return (
        f"a rebase from {state.old_commit[:12]} onto {state.new_commit[:12]} is in "
        f"progress ({state.phase} at {at}; state in {state_path(forge)})"
    )


def reject_in_progress(forge: Forge) -> None:
    state = load_rebase_state(forge)
    if state is not None:
        raise NeedsHuman(
            in_progress(forge) or "",
            hint="finish it with `dgr-forge rebase --continue`, or undo it with "
            "`dgr-forge rebase --abort`",
            details={"state": str(state_path(forge)), "phase": state.phase},
        )


def patch_commits(src: Path, m: UpstreamManifest, head: str) -> list[tuple[str, str]]:
    """The patch commits on the pin up to `head` and their subjects, oldest first (one log);
    one for each patch of the series, else exit 1."""
    listed = git(src, "log", "--reverse", "--format=%H %s", f"{m.commit}..{head}").stdout
    commits = [(c, subject) for c, _, subject in (ln.partition(" ") for ln in listed.splitlines())]
    if len(commits) != len(m.series):
        raise OperationFailed(
            f"{src}: expected {len(m.series)} patch commits on {m.commit[:12]}, "
            f"found {len(commits)}",
            hint="reset the workspace with `dgr-forge fetch --force` and retry",
        )
    return commits


def start(
    forge: Forge,
    out_: Reporter,
    m: UpstreamManifest,
    onto: str,
    *,
    url: str | None = None,
    mirror: str | None = None,
    offline: bool = False,
    canary: bool = False,
    surface: Recorded | None = None,
) -> Rebase:
    """`--onto REV`. With `canary` (a --dry-run's scratch forge) a conflict is recorded and
    the replay goes on without that patch, so every patch gets an outcome. With `surface`
    (the one the worker's last builds recorded, read before the rebase re-pins) the result
    and the report carry its moves. The caller holds the workspace lock, ran recovery and
    loaded `m` under it."""
    if url is not None:
        url = check_url(url, "--url")
    onto = check_rev(onto)
    reject_in_progress(forge)
    src = forge.src_dir(m.name)
    refuse_stale(src, out_)
    # the manifest's URL is data as much as --url is (`--` comes before it as well)
    check_url(m.url, f"{forge.rel(m.path)}: [upstream] url")
    new_url = url or m.url
    fetch_url = mirror or new_url
    if offline and not re.fullmatch(r"[0-9a-fA-F]{4,40}", onto):
        raise BadInput(
            f"--onto {onto}: --offline cannot resolve a ref name",
            hint="pass the commit id (it must already be in the workspace)",
        )
    sha = None if offline else resolve_rev(fetch_url, onto, src if src.is_dir() else None)
    if offline and HEX40.match(onto.lower()):
        sha = onto.lower()
    if sha == m.commit and new_url == m.url:
        out_.answer(f"already pinned at {sha}: nothing to rebase")
        return noop_result(m, src, surface, out_)
    if offline and not (src.is_dir() and peel(src, sha or onto)):
        raise BadInput(
            f"--offline: {onto} is not in the workspace",
            hint="run without --offline, or pass --mirror with a reachable mirror",
        )

    patched = ensure_patched(forge, m, out_, mirror=mirror, offline=offline)
    src = patched.src_dir
    old_head = patched.head_commit
    # the range after the old pin comes with the new one (what explains a conflict)
    commit, new_tree = pin_commit(src, fetch_url, onto, sha, out_, since=m.commit)
    if commit != onto.lower():
        out_.info(f"--onto {onto} resolves to {commit}: that is what will be pinned")
    if commit == m.commit and new_url == m.url:
        out_.answer(f"already pinned at {commit}: nothing to rebase")
        return noop_result(m, src, surface, out_)
    steps = [
        PatchStep(file=e.file, subject=subject, old_commit=c)
        for e, (c, subject) in zip(m.series, patch_commits(src, m, old_head), strict=True)
    ]
    # keep the fetched commit and the old series from any gc (one transaction)
    git(
        src,
        "update-ref",
        "--stdin",
        input=f"update {REF_NEW} {commit}\nupdate {REF_OLD} {old_head}\n",
    )
    state = RebaseState(
        upstream=m.name,
        src_dir=str(src),
        old_url=m.url,
        new_url=new_url,
        old_commit=m.commit,
        old_tree=m.tree or gitutil.tree_of(src, m.commit),
        old_head=old_head,
        new_commit=commit,
        new_tree=new_tree,
        onto=onto,
        inputs_sha256=inputs_digest(m),
        fetch_url=fetch_url,
        patches=steps,
        head=commit,
        canary=canary,
    )
    save_state(forge, state)
    out_.step(f"rebasing {len(steps)} patch(es) from {m.commit[:12]} onto {commit[:12]}")
    # HEAD and the work tree stay where they are: the replay merges in memory, checks out
    # where a patch needs the work tree, and finishing checks out the result; the new
    # pin's build number is counted beside it (a commit-only fetch where the workspace
    # cannot), kept for the finish, also one after a conflict's `--continue`
    with ThreadPoolExecutor(1) as pool:
        if not canary:
            pool.submit(count_build_number, forge, state, m)
        replay(forge, state, out_)
    if canary:  # the dry run reads the state; nothing is written
        return noop_result(m, src, None, out_)
    return finish(forge, state, out_, m, surface)


def resume(
    forge: Forge, out_: Reporter, m: UpstreamManifest | None, surface: Recorded | None = None
) -> Rebase:
    """`--continue`: after a resolved conflict, or after a crash at any step. The caller
    holds the workspace lock, ran recovery and loaded the manifest (`m`, None when it
    does not load: then it changed since the rebase started); `surface` as `start`'s."""
    state = require_state(forge)
    if state.canary:
        # a replay that must change nothing (bump's) was killed: never finish it
        raise NeedsHuman(
            "the interrupted replay was a dry run: there is nothing to continue",
            hint="`dgr-forge rebase --abort` puts the workspace back",
        )
    fault.point("rebase.continue")
    src = Path(state.src_dir)
    if state.phase == "write":
        out_.info("finishing the interrupted write of the manifest and patches/")
        # a kill in the final checkout leaves git's index.lock: ours, under our lock
        clear_leftovers(src, out_, index_lock=True)
        return finish(forge, state, out_, None, surface)
    m = check_manifest_untouched(forge, state, m)
    if state.phase == "conflict":
        # one replay from the resolved patch on: its commit objects read once, its
        # commit written by the writer the rest of the replay goes on with
        with Known(src, state) as known:
            take_resolution(forge, state, out_, known)
            replay(forge, state, out_, known)
        return finish(forge, state, out_, m, surface)
    # interrupted between automatic steps: redo the step from its recorded head
    stale = stale_git_state(src)
    if stale:
        out_.warn("interrupted rebase step left: " + "; ".join(stale))
    clear_leftovers(src, out_, index_lock=True)
    # (detached: HEAD may still be on the branch the rebase started from)
    git(src, "checkout", "-q", "-f", "--detach", state.head)
    replay(forge, state, out_)
    return finish(forge, state, out_, m, surface)


def abort(forge: Forge, out_: Reporter) -> RebaseAbort:
    """`--abort`: the workspace back at old pin + series; manifest and patches/ as before.
    The caller holds the workspace lock and ran recovery."""
    state = require_state(forge)
    src = Path(state.src_dir)
    if state.phase == "write":
        restore_journal(forge, out_)
    stale = stale_git_state(src)
    if stale:
        out_.warn("cleaning up: " + "; ".join(stale))
    fault.point("rebase.abort")
    clear_leftovers(src, out_, index_lock=True)
    by = "dgr-forge rebase --abort"  # its reset --hard loses nothing
    saved = series_base.save_changes(forge, "rebase-abort", src, "HEAD", by)
    if saved is not None:
        out_.warn(
            f"what you changed during the stop is saved in {saved} "
            f"(`git -C {forge.rel(src)} apply {saved}` brings it back)"
        )
    git(src, "reset", "-q", "--hard")
    git(src, "checkout", "-q", "-f", "--detach", state.old_head)
    drop_refs(src)
    shutil.rmtree(journal_dir(forge), ignore_errors=True)
    state_path(forge).unlink()
    out_.answer(
        f"rebase aborted: workspace back at {state.old_commit[:12]} + "
        f"{len(state.patches)} patch(es); manifest and patches/ unchanged"
    )
    return RebaseAbort(
        status="aborted",
        old_commit=state.old_commit,
        new_commit=state.new_commit,
        head=state.old_head,
    )


def require_state(forge: Forge) -> RebaseState:
    state = load_rebase_state(forge)
    if state is None:
        raise BadInput(
            f"no rebase in progress (no {state_path(forge)})",
            hint="start one with `dgr-forge rebase --onto <commit>`",
        )
    return state
