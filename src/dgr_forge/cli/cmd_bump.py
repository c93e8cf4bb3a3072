"""`bump`: the roller (move the pin to the newest upstream commit the series takes)."""

from __future__ import annotations

from typing import Annotated

import typer

from dgr_forge.cli.app import Env, Outcome, app, command
from dgr_forge.cli.options import MarkdownReport, Mirror


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
