"""`demo DIR`: the tour without network (thin: the library writes and runs it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from dgr_forge.cli.app import Env, app, command

if TYPE_CHECKING:
    from dgr_forge.demo import Demo


@command(app)
def demo(
    env: Env,
    directory: Annotated[
        str, typer.Argument(metavar="DIR", help="A new or empty directory for the demo root.")
    ],
) -> Demo:
    """A tour without network: fetch, patch, build, verify, rebase --dry-run in a new DIR.

    DIR gets a generated upstream, series and worker, and is then an ordinary forge root."""
    from dgr_forge import demo as demo_mod

    result = demo_mod.run(directory, env.out)
    env.out.answer(
        f"done: {result.root} is a forge root; try `cd {result.root} && dgr-forge status`"
    )
    return result
