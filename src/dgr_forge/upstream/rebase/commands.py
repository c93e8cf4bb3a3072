"""The rebase commands: `--onto` (`start`, `--dry-run`: `dry_run`), `--continue` (`resume`),
`--abort`."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from msgspec import UNSET

from dgr_forge.core import fault, gitutil
from dgr_forge.core.errors import BadInput, NeedsHuman, OperationFailed
from dgr_forge.core.forge import UPSTREAM_MANIFEST, Forge
from dgr_forge.core.fsutil import atomic_write_bytes
from dgr_forge.core.gitutil import HEX40, git
from dgr_forge.core.output import Reporter
from dgr_forge.core.urls import check_url, mask
from dgr_forge.upstream import manifest, series_base
from dgr_forge.upstream.export import slug
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.patches import ensure_patched
from dgr_forge.upstream.rebase import finish, gitops
from dgr_forge.upstream.rebase import state as rs
from dgr_forge.upstream.rebase.replay import Known, replay, take_resolution
from dgr_forge.upstream.series import copy_inputs
from dgr_forge.upstream.series_journal import borrow_objects, scratch_dir
from dgr_forge.upstream.surface import Recorded, across


def reject_in_progress(forge: Forge) -> None:
    """A rebase in progress refused (exit 3): commands that would move the workspace."""
    if (state := rs.load_rebase_state(forge)) is not None:
        at = state.patches[state.next].file if state.next < len(state.patches) else "the end"
        raise NeedsHuman(
            f"a rebase from {state.old_commit[:12]} onto {state.new_commit[:12]} is in "
            f"progress ({state.phase} at {at}; state in {forge.rebase_state})",
            hint="finish it with `dgr-forge rebase --continue`, or undo it with "
            "`dgr-forge rebase --abort`",
            details={"state": str(forge.rebase_state), "phase": state.phase},
        )


def patch_commits(src: Path, m: UpstreamManifest, head: str) -> list[tuple[str, str]]:
    """The patch commits on the pin up to `head` and their subjects, oldest first; one
    for each patch of the series, else exit 1."""
    listed = git(src, "log", "--reverse", "--format=%H %s", f"{m.commit}..{head}").stdout
    commits = [(c, subject) for c, _, subject in (ln.partition(" ") for ln in listed.splitlines())]
    if len(commits) != len(m.series):
        raise OperationFailed(
            f"{src}: expected {len(m.series)} patch commits on {m.commit[:12]}, "
            f"found {len(commits)}",
            hint="reset the workspace with `dgr-forge fetch --force` and retry",
        )
    return commits


def onto(
    forge: Forge, out_: Reporter, m: UpstreamManifest, req: rs.Onto, surface: Recorded | None
) -> rs.Rebase | rs.RebaseDryRun:
    """`rebase --onto REV` (`--dry-run`: the canary); `surface`: the worker's recorded one
    (the result carries its moves). The caller holds the workspace lock."""
    if req.url is not None:
        check_url(req.url, "--url")
    if req.dry_run:
        return dry_run(forge, out_, m, req, surface)
    return start(forge, out_, m, req, surface=surface)


def start(
    forge: Forge,
    out_: Reporter,
    m: UpstreamManifest,
    req: rs.Onto,
    *,
    canary: bool = False,
    surface: Recorded | None = None,
) -> rs.Rebase:
    """The replay onto `req.rev`. With `canary` (a --dry-run's scratch forge, bump's
    probes) a conflict is recorded and the replay goes on without that patch."""
    new_url = check_url(req.url, "--url") if req.url is not None else m.url
    mirror, offline = req.mirror, req.offline
    onto = gitops.check_rev(req.rev)
    reject_in_progress(forge)
    src = forge.src_dir(m.name)
    gitops.refuse_stale(src, out_)
    # the manifest's URL is data as much as --url is (`--` comes before it as well)
    check_url(m.url, f"{forge.rel(m.path)}: [upstream] url")
    fetch_url = mirror or new_url
    if offline and not re.fullmatch(r"[0-9a-fA-F]{4,40}", onto):
        raise BadInput(
            f"--onto {onto}: --offline cannot resolve a ref name",
            hint="pass the commit id (it must already be in the workspace)",
        )
    sha = None if offline else gitops.resolve_rev(fetch_url, onto, src if src.is_dir() else None)
    if offline and HEX40.match(onto.lower()):
        sha = onto.lower()
    if sha == m.commit and new_url == m.url:
        out_.answer(f"already pinned at {sha}: nothing to rebase")
        return finish.noop_result(m, src, surface, out_)
    if offline and not (src.is_dir() and gitutil.rev_parse(src, sha or onto)):
        raise BadInput(
            f"--offline: {onto} is not in the workspace",
            hint="run without --offline, or pass --mirror with a reachable mirror",
        )

    old_head = ensure_patched(forge, m, out_, mirror=mirror, offline=offline).head_commit
    # the range after the old pin comes with the new one (what explains a conflict)
    commit, new_tree = gitops.pin_commit(src, fetch_url, onto, sha, out_, since=m.commit)
    if commit != onto.lower():
        out_.info(f"--onto {onto} resolves to {commit}: that is what will be pinned")
    if commit == m.commit and new_url == m.url:
        out_.answer(f"already pinned at {commit}: nothing to rebase")
        return finish.noop_result(m, src, surface, out_)
    steps = [
        rs.PatchStep(file=e.file, subject=subject, old_commit=c)
        for e, (c, subject) in zip(m.series, patch_commits(src, m, old_head), strict=True)
    ]
    # keep the fetched commit and the old series from any gc (one transaction)
    refs = f"update {rs.REF_NEW} {commit}\nupdate {rs.REF_OLD} {old_head}\n"
    git(src, "update-ref", "--stdin", input=refs)
    state = rs.RebaseState(
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
        inputs_sha256=finish.inputs_digest(m),
        fetch_url=fetch_url,
        patches=steps,
        head=commit,
        canary=canary,
    )
    rs.save_state(forge, state)
    out_.step(f"rebasing {len(steps)} patch(es) from {m.commit[:12]} onto {commit[:12]}")
    # the new pin's build number is counted beside the replay (a commit-only fetch where
    # the workspace cannot), kept for the finish, also one after a `--continue`
    with ThreadPoolExecutor(1) as pool:
        if not canary:
            pool.submit(finish.count_build_number, forge, state, m)
        replay(forge, state, out_)
    if canary:  # its caller reads the state; nothing is written
        return finish.noop_result(m, src, None, out_)
    return finish.finish(forge, state, out_, m, surface)


def resume(
    forge: Forge, out_: Reporter, m: UpstreamManifest | None, surface: Recorded | None = None
) -> rs.Rebase:
    """`--continue`: after a resolved conflict, or a crash at any step (`m`: None when the
    manifest does not load: it changed since); the caller holds the workspace lock."""
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
        gitops.clear_leftovers(src, out_, index_lock=True)
        return finish.finish(forge, state, out_, None, surface)
    # `m` (None: it did not load) must be what the rebase started from
    if m is None or finish.inputs_digest(m) != state.inputs_sha256:
        raise NeedsHuman(
            f"{forge.rel(forge.upstream_manifest)} or the patch files changed since the "
            "rebase started; the rebase would overwrite those edits",
            hint="restore them (e.g. `git checkout -- manifests/ patches/`), or "
            "`dgr-forge rebase --abort` (it leaves your edits alone) and start again",
        )
    if state.phase == "conflict":
        # one replay from the resolved patch on: its objects read once, one writer
        with Known(src, state) as known:
            take_resolution(forge, state, out_, known)
            replay(forge, state, out_, known)
    else:  # interrupted between automatic steps: redo the step from its recorded head
        if stale := gitops.stale_git_state(src):
            out_.warn("interrupted rebase step left: " + "; ".join(stale))
        gitops.clear_leftovers(src, out_, index_lock=True)
        # (detached: HEAD may still be on the branch the rebase started from)
        git(src, "checkout", "-q", "-f", "--detach", state.head)
        replay(forge, state, out_)
    return finish.finish(forge, state, out_, m, surface)


def abort(forge: Forge, out_: Reporter) -> rs.RebaseAbort:
    """`--abort`: the workspace back at old pin + series; manifest and patches/ as before."""
    state = require_state(forge)
    src = Path(state.src_dir)
    if state.phase == "write":
        out_.info("restoring the manifest and patches/ from the rebase journal")
        finish.write_side(forge, "old", out_)
    if stale := gitops.stale_git_state(src):
        out_.warn("cleaning up: " + "; ".join(stale))
    fault.point("rebase.abort")
    gitops.clear_leftovers(src, out_, index_lock=True)
    by = "dgr-forge rebase --abort"  # its reset --hard loses nothing
    if (saved := series_base.save_changes(forge, "rebase-abort", src, "HEAD", by)) is not None:
        out_.warn(
            f"what you changed during the stop is saved in {saved} "
            f"(`git -C {forge.rel(src)} apply {saved}` brings it back)"
        )
    git(src, "reset", "-q", "--hard")
    git(src, "checkout", "-q", "-f", "--detach", state.old_head)
    finish.end(forge, src)
    out_.answer(
        f"rebase aborted: workspace back at {state.old_commit[:12]} + "
        f"{len(state.patches)} patch(es); manifest and patches/ unchanged"
    )
    return rs.RebaseAbort(
        status="aborted",
        old_commit=state.old_commit,
        new_commit=state.new_commit,
        head=state.old_head,
    )


def require_state(forge: Forge) -> rs.RebaseState:
    if (state := rs.load_rebase_state(forge)) is None:
        raise BadInput(
            f"no rebase in progress (no {forge.rebase_state})",
            hint="start one with `dgr-forge rebase --onto <commit>`",
        )
    return state


# ----------------------------------------------------------------------------- --dry-run


def check_report_path(path: Path, forge: Forge) -> Path:
    """`--report PATH`: a file we may write, never one of the inputs (exit 2)."""
    if "\0" in str(path):
        raise BadInput("--report: the path contains a NUL byte", hint="give a file path")
    target = path.absolute()
    if target.is_symlink() or target.is_dir():
        raise BadInput(
            f"--report {path}: is a directory or a symbolic link",
            hint="give the path of a regular file to write (e.g. canary.md)",
        )
    inputs = (forge.root / "manifests", forge.root / "patches")
    resolved = target.parent.resolve() / target.name
    if any(resolved.is_relative_to(p.resolve()) for p in inputs):
        raise BadInput(
            f"--report {path}: inside manifests/ or patches/, which a dry run never touches",
            hint="write the report elsewhere, e.g. --report canary.md",
        )
    if not target.parent.is_dir():
        raise BadInput(
            f"--report {path}: no such directory {target.parent}",
            hint="create the directory first, or give another path",
        )
    return resolved  # the one path it is: written there and printed without a `..`


def scratch_forge(
    forge: Forge, m: UpstreamManifest, tmp: Path, out_: Reporter
) -> tuple[Forge, UpstreamManifest]:
    """A copy of the inputs and a scratch workspace under `tmp` that reads the real one's
    objects, and the copy's manifest: where a dry run changes nothing real."""
    root = tmp / "root"
    copy_inputs(m, root, UPSTREAM_MANIFEST)
    scratch = Forge(root=root, workspace=tmp / "workspace")
    borrow_objects(forge.src_dir(m.name), scratch.src_dir(m.name), out_)
    return scratch, manifest.load(scratch.upstream_manifest, scratch.root)


def _already_pinned(m: UpstreamManifest, onto: str) -> rs.RebaseDryRun:
    """Onto the current pin: every patch unchanged."""
    none = {"subject": None, "old_commit": None, "new_commit": None}
    rows = [
        rs.RebaseRow(
            file=e.file, new_file=e.file, outcome="unchanged", upstream_commits=[], files=[], **none
        )
        for e in m.series
    ]
    pin = rs.PinSide(url=mask(m.url), commit=m.commit, tree=m.tree)
    return rs.RebaseDryRun(
        status="dry-run",
        kind=rs.REPORT_KIND,
        version=1,
        upstream=m.name,
        onto=onto,
        old=pin,
        new=pin,
        result_tree=m.result_tree,
        counts=rs.counts_of(rows),
        patches=rows,
        old_commit=m.commit,
        new_commit=m.commit,
        would_conflict=False,
        report_markdown=None,
    )


def dry_run(
    forge: Forge, out_: Reporter, m: UpstreamManifest, req: rs.Onto, surface: Recorded | None
) -> rs.RebaseDryRun:
    """`--onto REV --dry-run`, the upstream canary: the same replay in a scratch forge
    (`scratch_forge`), a conflicting patch recorded and left out; exit 3 on one."""
    target = check_report_path(req.report, forge) if req.report is not None else None
    reject_in_progress(forge)
    with scratch_dir(forge.tmp_dir, "dgr-canary-") as tmp:
        scratch, sm = scratch_forge(forge, m, tmp, out_)
        out_.step(f"dry run: replaying {len(m.series)} patch(es) in a scratch workspace")
        start(scratch, out_, sm, req, canary=True)
        if (state := rs.load_rebase_state(scratch)) is None:  # already pinned: nothing to replay
            return _already_pinned(m, req.rev)
        finish.stage(scratch, state, sm)
        # every patch not dropped keeps its place, named as `export` names it: the canary's
        # export goes on without a conflicting patch, which the real rebase keeps
        for n, step in enumerate([s for s in state.patches if s.outcome != "dropped"], start=1):
            step.new_file = f"{n:04d}-{slug(step.subject)}.patch"
        rows = rs.rows_of(state)
        moved = None
        if surface is not None:
            moved = across(scratch.src_dir(m.name), state.old_commit, state.new_commit, surface)
        text = rs.render_markdown(state, None, rows, "Upstream canary (dry run)", moved)
    out_.table(
        f"dry run {state.old_commit[:12]} -> {state.new_commit[:12]}",
        ["patch", "would be", "outcome"],
        [(r.file, r.new_file or "-", r.outcome) for r in rows],
        empty="no patches to replay",
    )
    for r in rows:
        if r.outcome == "conflict":
            out_.answer(f"{r.file}: would conflict in {', '.join(r.files or [])}")
            for c in r.upstream_commits or []:
                out_.answer(f"    upstream {c.commit[:12]} {c.subject}")
        if r.outcome == "dropped" and r.upstream_commits:
            taken = ", ".join(c.commit[:12] for c in r.upstream_commits)
            out_.answer(f"{r.file}: upstreamed by {taken}")
    for line in moved.lines() if moved is not None else []:
        out_.answer(line)
    out_.answer(rs.summary(rs.counts_of(rows)) + "; nothing was changed (dry run)")
    if target is not None:
        atomic_write_bytes(target, text.encode("utf-8"))
        out_.answer(f"report: {target}")
    return rs.report_of(
        rs.RebaseDryRun,
        state,
        None,
        rows,
        status="dry-run",
        old_commit=state.old_commit,
        new_commit=state.new_commit,
        surface=UNSET if moved is None else moved,
        would_conflict=any(r.outcome == "conflict" for r in rows),
        report_markdown=str(target) if target is not None else None,
    )
