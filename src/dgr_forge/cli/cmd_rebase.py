"""`rebase` (move the series to a new upstream commit), `check` (the CI gate) and `bump` (the
roller: move the pin to the newest upstream commit the series takes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from dgr_forge.cli.app import Env, Outcome, app, command
from dgr_forge.cli.options import MarkdownReport, Mirror, Offline
from dgr_forge.core.errors import BadInput

if TYPE_CHECKING:
    from dgr_forge.upstream.rebase.state import Rebase, RebaseAbort


@command(app)
def rebase(
    env: Env,
    onto: Annotated[
        str | None,
        typer.Option(
            "--onto",
            metavar="REV",
            help="New upstream commit: a commit id (full or abbreviated), a tag or a branch; "
            "peeled to the commit, which is what gets pinned.",
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", metavar="URL", help="Pin this upstream URL from now on."),
    ] = None,
    continue_: Annotated[
        bool, typer.Option("--continue", help="Resume after resolving a conflict or a crash.")
    ] = False,
    abort: Annotated[
        bool, typer.Option("--abort", help="Undo: workspace, manifest and patches/ as before.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="The upstream canary: replay in a scratch workspace and report per patch, "
            "touching nothing (exit 3 when a patch would conflict).",
        ),
    ] = False,
    report: MarkdownReport = None,
    mirror: Mirror = None,
    offline: Offline = False,
) -> Rebase | RebaseAbort | Outcome:
    """Replay the patch series onto a new upstream commit (3-way); resumable.

    `--report` goes with `--dry-run` (a real rebase writes its report to reports/)."""
    from dgr_forge.upstream import rebase as rebase_mod
    from dgr_forge.upstream.fetch import resolve_mirror
    from dgr_forge.upstream.rebase.state import RebaseDryRun

    modes = [
        name for name, on in (("--onto", onto), ("--continue", continue_), ("--abort", abort)) if on
    ]
    if len(modes) != 1:
        raise BadInput(
            "rebase: give exactly one of --onto REV, --continue, --abort"
            + (f" (got {' '.join(modes)})" if modes else ""),
            hint="start with `dgr-forge rebase --onto <commit>`",
        )
    if (url or mirror or offline or dry_run) and not onto:
        raise BadInput(
            "rebase: --url, --mirror, --offline and --dry-run only go with --onto",
            hint="`dgr-forge rebase --continue` reuses what the rebase started with",
        )
    if report is not None and not dry_run:
        raise BadInput(
            "rebase: --report only goes with --dry-run",
            hint="a real rebase writes its report to the workspace's reports/",
        )
    # each mode under the workspace lock, after recovery, the manifest loaded once
    if abort:
        with env.session(lock=True, recover=True, manifest=False) as s:
            return rebase_mod.abort(s.forge, env.out)
    # the surface the worker's last builds recorded, read before the rebase re-pins
    from dgr_forge.lanes.boundary import recorded_surface

    if continue_:
        with env.session(lock=True, recover=True, manifest_may_fail=True) as s:
            surface = recorded_surface(s.forge)
            return rebase_mod.resume(s.forge, env.out, s.manifest_or_none, surface)
    assert onto is not None
    request = rebase_mod.Onto(
        rev=onto, url=url, mirror=resolve_mirror(mirror), offline=offline, dry_run=dry_run,
        report=report,
    )  # fmt: skip
    with env.session(lock=True, recover=True) as s:
        done = rebase_mod.onto(s.forge, env.out, s.manifest, request, recorded_surface(s.forge))
    return Outcome(done, done.exit_code) if isinstance(done, RebaseDryRun) else done


@command(app)
def check(env: Env, mirror: Mirror = None, offline: Offline = False) -> Outcome:
    """CI gate: a fresh fetch, apply and re-export reproduce patches/ and the manifest.

    Byte for byte; and upstream must still declare every CMake option the recipes pass."""
    from dgr_forge.lanes import check as check_mod
    from dgr_forge.upstream.fetch import resolve_mirror

    fetch_from = resolve_mirror(mirror)
    # read-only on the forge (it works in a scratch copy): no lock, no recovery
    with env.session(recipes=True) as s:
        result = check_mod.check(
            s.forge, env.out, s.manifest, s.recipes, mirror=fetch_from, offline=offline
        )
    return Outcome(result, result.exit_code)


@command(app)
def bump(
    env: Env,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="REV",
            help="How far to go: a commit id, tag or branch of the upstream, peeled to the "
            "commit (default: the upstream's default branch head).",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Find and report the newest clean commit and the first breaking one; "
            "touch nothing (manifest, patches/, workspace).",
        ),
    ] = False,
    report: MarkdownReport = None,
    mirror: Mirror = None,
) -> Outcome:
    """Move the pin to the newest upstream commit (up to --to) the whole series replays onto.

    Found by bisecting first-parent history; names the first commit that breaks a patch."""
    from dgr_forge.upstream.fetch import resolve_mirror
    from dgr_forge.upstream.rebase.bump import bump as bump_

    with env.session(lock=True, recover=True, refuse_rebase=True) as s:
        from dgr_forge.lanes.boundary import recorded_surface

        result = bump_(
            env.forge,
            env.out,
            s.manifest,
            to,
            dry_run=dry_run,
            report=report,
            mirror=resolve_mirror(mirror),
            surface=recorded_surface(s.forge),
        )
    return Outcome(result, result.exit_code)
