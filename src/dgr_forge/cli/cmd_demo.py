"""`demo DIR`: the tour without network (thin: the library writes and runs it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from dgr_forge.cli.app import Env, app, run

if TYPE_CHECKING:
    from dgr_forge.demo import Demo


@app.command()
def demo(
    ctx: typer.Context,
    directory: Annotated[
        str, typer.Argument(metavar="DIR", help="A new or empty directory for the demo root.")
    ],
) -> None:
    """A tour without network: fetch, patch, build, verify, rebase --dry-run in a new DIR.

    DIR gets a generated upstream, series and worker, and is then an ordinary forge root."""

    def body(env: Env) -> Demo:
        from dgr_forge import demo as demo_mod

        result = demo_mod.run(directory, env.out)
        env.out.answer(
            f"done: {result.root} is a forge root; try `cd {result.root} && dgr-forge status`"
        )
        return result

    run(ctx, "demo", body)
