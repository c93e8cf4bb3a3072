"""`rebase --onto REV --dry-run`: the upstream canary.

The same replay as a real rebase, run on a scratch copy of the inputs (manifest and patch
files) with a scratch workspace under `<workspace>/tmp/`; the scratch repository reads
the real workspace's objects (git alternates) and writes only its own. A conflicting
patch is recorded with its files and the upstream commits that touched them, and the
replay goes on without it, so every patch gets an outcome. Nothing of the root or the
workspace changes; exit 3 when a patch would conflict.
"""

from __future__ import annotations

from pathlib import Path

from msgspec import UNSET

from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import UPSTREAM_MANIFEST, Forge
from dgr_forge.core.fsutil import atomic_write_bytes
from dgr_forge.core.output import Reporter
from dgr_forge.core.urls import mask
from dgr_forge.upstream import manifest
from dgr_forge.upstream.export import slug
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.rebase.commands import reject_in_progress, start
from dgr_forge.upstream.rebase.finish import stage
from dgr_forge.upstream.rebase.report import render_markdown, report_of, rows_of, summary
from dgr_forge.upstream.rebase.state import (
    REPORT_KIND,
    PinSide,
    RebaseDryRun,
    RebaseRow,
    RebaseState,
    counts_of,
    load_rebase_state,
)
from dgr_forge.upstream.series import copy_inputs
from dgr_forge.upstream.series_journal import borrow_objects, scratch_dir
from dgr_forge.upstream.surface import Recorded, across


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
    objects, and the copy's manifest (its paths resolve against the scratch root): a dry
    run's, where nothing of the root or the workspace changes."""
    root = tmp / "root"
    copy_inputs(m, root, UPSTREAM_MANIFEST)
    scratch = Forge(root=root, workspace=tmp / "workspace")
    borrow_objects(forge.src_dir(m.name), scratch.src_dir(m.name), out_)
    return scratch, manifest.load(scratch.upstream_manifest, scratch.root)


def _already_pinned(m: UpstreamManifest, onto: str, commit: str) -> RebaseDryRun:
    """Onto the current pin: the same keys as a replay's report, every patch unchanged."""
    rows = [
        RebaseRow(
            file=e.file,
            new_file=e.file,
            subject=None,
            outcome="unchanged",
            old_commit=None,
            new_commit=None,
            upstream_commits=[],
            files=[],
        )
        for e in m.series
    ]
    pin = PinSide(url=mask(m.url), commit=m.commit, tree=m.tree)
    return RebaseDryRun(
        status="dry-run",
        kind=REPORT_KIND,
        version=1,
        upstream=m.name,
        onto=onto,
        old=pin,
        new=pin,
        result_tree=m.result_tree,
        counts=counts_of(rows),
        patches=rows,
        old_commit=m.commit,
        new_commit=commit,
        would_conflict=False,
        report_markdown=None,
    )


def _name_as_the_rebase_writes(state: RebaseState) -> None:
    """The canary's replay goes on without a conflicting patch, so its export numbers the
    patches after it one lower; the real rebase stops there and keeps that patch once
    resolved. So every patch that is not dropped keeps its place: number them in order,
    each named from its subject as `export` names it."""
    n = 0
    for step in state.patches:
        if step.outcome == "dropped":
            continue
        n += 1
        step.new_file = f"{n:04d}-{slug(step.subject)}.patch"


def dry_run(
    forge: Forge,
    out_: Reporter,
    m: UpstreamManifest,
    onto: str,
    *,
    url: str | None = None,
    mirror: str | None = None,
    offline: bool = False,
    report: Path | None = None,
    surface: Recorded | None = None,  # asked by the command: the worker surface's moves
) -> RebaseDryRun:
    target = check_report_path(report, forge) if report is not None else None
    # the caller holds the workspace lock and loaded `m` under it
    reject_in_progress(forge)
    with scratch_dir(forge.tmp_dir, "dgr-canary-") as tmp:
        scratch, sm = scratch_forge(forge, m, tmp, out_)
        out_.step(f"dry run: replaying {len(m.series)} patch(es) in a scratch workspace")
        result = start(
            scratch, out_, sm, onto, url=url, mirror=mirror, offline=offline, canary=True
        )
        state = load_rebase_state(scratch)
        if state is None:  # already pinned there: nothing to replay
            return _already_pinned(m, onto, result.new_commit)
        stage(scratch, state, sm)
        _name_as_the_rebase_writes(state)
        rows = rows_of(state)
        moved = None
        if surface is not None:
            moved = across(scratch.src_dir(m.name), state.old_commit, state.new_commit, surface)
        text = render_markdown(state, None, rows, "Upstream canary (dry run)", moved)
    conflicts = [r for r in rows if r.outcome == "conflict"]
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
    out_.answer(summary(counts_of(rows)) + "; nothing was changed (dry run)")
    if target is not None:
        atomic_write_bytes(target, text.encode("utf-8"))
        out_.answer(f"report: {target}")
    return report_of(
        RebaseDryRun,
        state,
        None,
        rows,
        status="dry-run",
        old_commit=state.old_commit,
        new_commit=state.new_commit,
        surface=UNSET if moved is None else moved,
        would_conflict=bool(conflicts),
        report_markdown=str(target) if target is not None else None,
    )
