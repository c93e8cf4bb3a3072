"""`patch` and `export`: the numbered patch series on the pinned upstream."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dgr_forge.cli.app import Env, app, run
from dgr_forge.cli.context import Session
from dgr_forge.core.errors import ExitCode

# Library modules are imported inside the commands: every CLI start registers all
# commands, and each should pay only for what it uses.
if TYPE_CHECKING:
    from dgr_forge.upstream.manifest import UpstreamManifest
    from dgr_forge.upstream.workspace import Workspace


@app.command()
def patch(
    ctx: typer.Context,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Apply in a scratch index and report per patch; touch nothing.",
        ),
    ] = False,
    mirror: Annotated[
        str | None,
        typer.Option("--mirror", metavar="URL", help="Fetch from this mirror if needed."),
    ] = None,
    offline: Annotated[bool, typer.Option("--offline", help="Never touch the network.")] = False,
) -> None:
    """Apply the series on the pinned commit (one commit per patch, reproducible ids)."""

    def body(env: Env) -> dict[str, Any]:
        from dgr_forge.upstream.transfer import resolve_mirror

        url = resolve_mirror(mirror)
        # under the lock from before the manifest is read: a patch started during an
        # export waits for it and then sees the new manifest and files
        with env.session(lock=True, recover=True, refuse_rebase=not check) as s:
            return _patch(env, s, url, offline) if not check else _check(env, s, url, offline)

    run(ctx, "patch", body)


def _patch(env: Env, s: Session, mirror: str | None, offline: bool) -> dict[str, Any]:
    from dgr_forge.upstream import patches

    forge, m = s.forge, s.manifest
    started = time.monotonic()
    result = patches.patch_locked(forge, m, env.out, mirror=mirror, offline=offline)
    seconds = round(time.monotonic() - started, 3)
    where = forge.rel(result.src_dir)
    if result.changed:
        env.out.info(
            f"{m.name}: {len(m.series)} patches applied in {where} "
            f"(HEAD {result.head_commit[:12]}, tree {result.result_tree[:12]}, {seconds} s)"
        )
    else:
        env.out.info(f"{m.name}: series already applied in {where} (verified, nothing to do)")
    return {
        "upstream": m.name,
        "src_dir": str(result.src_dir),
        "base_commit": result.base_commit,
        "head_commit": result.head_commit,
        "result_tree": result.result_tree,
        "patches": [e.file for e in m.series],
        "changed": result.changed,
        "seconds": seconds,
    }


def _check(env: Env, s: Session, mirror: str | None, offline: bool) -> dict[str, Any]:
    from dgr_forge.upstream import patches

    m = s.manifest
    results = patches.check_workspace(s.forge, m, env.out, mirror=mirror, offline=offline)
    rows = []
    for r in results:
        detail = "; ".join(str(c) for c in r.conflicts)
        if r.status == "tree-mismatch":
            detail = f"tree {r.tree} != manifest {r.expected_tree}"
        if r.changed_on_disk:
            detail = ("changed on disk; " + detail).strip("; ")
        rows.append((r.file, r.status, detail))
    env.out.table("patch --check", ["patch", "result", "detail"], rows)
    applies = all(r.status == "applies" for r in results)
    changed = [r.file for r in results if r.changed_on_disk]
    ok = applies and not changed
    if applies:
        env.out.info(f"all {len(results)} patches apply exactly on {m.commit[:12]}")
    if changed:
        # applying is not enough: the files are not the series the manifest pins
        env.out.info(
            f"{len(changed)} patch file(s) differ from the manifest's sha256: "
            f"{', '.join(changed)}; run `dgr-forge export` to record them, or restore them "
            f"(`git checkout -- {m.patches_dir_rel}`)"
        )
    return {
        "exit_code": ExitCode.OK if ok else ExitCode.FAILED,
        "upstream": m.name,
        "commit": m.commit,
        "applies": applies,
        "changed_on_disk": changed,
        "patches": [r.as_dict() for r in results],
    }


@app.command()
def export(ctx: typer.Context) -> None:
    """Regenerate patches/ and the manifest's hashes and trees from the workspace's commits."""

    def body(env: Env) -> dict[str, Any]:
        from dgr_forge.upstream.export import export_workspace

        # both locks before the manifest is read: another workspace's export of the same
        # root finishes first, and this one sees what it wrote
        with env.session(lock=True, root_lock=True, recover=True, refuse_rebase=True) as s:
            forge, m = s.forge, s.manifest
            result = export_workspace(forge, m, env.out, before=s.manifest_before)
        if not result.changed:
            env.out.info(f"{len(result.patches)} patches, nothing changed")
        else:
            env.out.info(
                f"{len(result.patches)} patches: {len(result.written)} written, "
                f"{len(result.unchanged)} unchanged, {len(result.removed)} removed; commit "
                f"{m.patches_dir_rel}/ and {forge.rel(m.path)}"
            )
        return {"upstream": m.name, **result.as_dict()}

    run(ctx, "export", body)


def status_section(
    env: Env, m: UpstreamManifest, ws: Workspace, *, have_pin: bool, rebasing: bool = False
) -> dict[str, Any]:
    """The `patches` part of `status` (called by the status command): one row per patch."""
    from dgr_forge.upstream.status import series_status

    info = series_status(env.forge, m, ws, have_pin=have_pin, rebasing=rebasing)
    rows = [(p.file, p.state, p.detail) for p in info.series]
    if rows:
        env.out.table("patches", ["patch", "state", "detail"], rows)
    else:
        env.out.info("patches: none (empty series)")
    if info.local_commits:
        env.out.info(
            f"local commits on top of the series: {len(info.local_commits)} "
            "(`dgr-forge export` turns them into patches)"
        )
    if info.operation:
        env.out.info(f"in progress in the workspace: {info.operation}")
    return info.as_dict()
