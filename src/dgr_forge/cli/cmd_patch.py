"""`patch` and `export`: the numbered patch series on the pinned upstream."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from dgr_forge.cli.app import Env, Outcome, app, command
from dgr_forge.cli.options import ExportForce, Mirror, Offline

if TYPE_CHECKING:
    from dgr_forge.upstream.export import Export
    from dgr_forge.upstream.local_replay import Patch, PatchAbort


@command(app)
def patch(
    env: Env,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Apply in a scratch index and report per patch; touch nothing."
        ),
    ] = False,
    mirror: Mirror = None,
    offline: Offline = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--continue", help="Resume replaying your commits after resolving a conflict."
        ),
    ] = False,
    abort: Annotated[
        bool, typer.Option("--abort", help="Undo the update: the workspace exactly as it was.")
    ] = False,
) -> Patch | PatchAbort | Outcome:
    """Apply the series on the pinned commit (one commit per patch, reproducible ids).

    Commits of your own on top are kept: when the series on disk moved, they are replayed
    on the new series (a conflict stops; `--continue` / `--abort`)."""
    from dgr_forge.core.errors import BadInput
    from dgr_forge.upstream import local_replay, patches
    from dgr_forge.upstream.transfer import resolve_mirror
    from dgr_forge.upstream.workspace import refuse_during_rebase

    if sum((check, resume, abort)) > 1:
        raise BadInput(
            "--check, --continue and --abort exclude each other", hint="give one of them"
        )
    url = resolve_mirror(mirror)
    # under the lock from before the manifest is read: a patch started during an
    # export waits for it and then sees the new manifest and files
    with env.session(lock=True, recover=True) as s:
        forge, m = s.forge, s.manifest
        if check:
            checked = patches.check_workspace(forge, m, env.out, mirror=url, offline=offline)
            rows = []
            for r in checked.patches:
                detail = "; ".join(str(c) for c in r.conflicts)
                if r.status == "tree-mismatch":
                    detail = f"tree {r.tree} != manifest {r.expected_tree}"
                if r.changed_on_disk:
                    detail = ("changed on disk; " + detail).strip("; ")
                rows.append((r.file, r.status, detail))
            env.out.table("patch --check", ["patch", "result", "detail"], rows, empty="no patches")
            if checked.applies:
                env.out.answer(f"all {len(rows)} patches apply exactly on {m.commit[:12]}")
            if changed := checked.changed_on_disk:
                # applying is not enough: the files are not the series the manifest pins
                env.out.answer(
                    f"{len(changed)} patch file(s) differ from the manifest's sha256: "
                    f"{', '.join(changed)}; run `dgr-forge export` to record them, or restore "
                    f"them (`git checkout -- {m.patches_dir_rel}`)"
                )
            return Outcome.of(checked, checked.ok)
        # --continue/--abort are how a stopped replay ends; plain patch is refused
        refuse_during_rebase(forge, replay=not (resume or abort))
        result = local_replay.patch(
            forge, m, env.out, mirror=url, offline=offline, resume_=resume, abort_=abort
        )
        if not isinstance(result, local_replay.Patch):
            return result
        where = forge.rel(result.src_dir)
        env.out.answer(
            f"{m.name}: {len(m.series)} patches applied in {where} (HEAD "
            f"{result.head_commit[:12]}, tree {result.result_tree[:12]}, {result.seconds} s)"
            if result.changed
            else f"{m.name}: series already applied in {where} (verified, nothing to do)"
        )
        return result


@command(app)
def export(env: Env, force: ExportForce = False) -> Export:
    """Regenerate patches/ and the manifest's hashes and trees from the workspace's commits.

    `--force` overwrites a series that moved on disk since this workspace was patched (the
    replaced files are saved under the workspace's logs/ first)."""
    from dgr_forge.upstream.export import export_workspace

    # both locks before the manifest is read: another workspace's export of the same
    # root finishes first, and this one sees what it wrote
    with env.session(lock=True, root_lock=True, recover=True, refuse_rebase=True) as s:
        forge, m = s.forge, s.manifest
        result = export_workspace(forge, m, env.out, before=s.manifest_before, force=force)
    env.out.answer(
        f"{len(result.patches)} patches: {len(result.written)} written, "
        f"{len(result.unchanged)} unchanged, {len(result.removed)} removed; commit "
        f"{m.patches_dir_rel}/ and {forge.rel(m.path)}"
        if result.changed
        else f"{len(result.patches)} patches, nothing changed"
    )
    return result
