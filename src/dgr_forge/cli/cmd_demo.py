"""`demo DIR`: the tour without network (thin: the library writes and runs it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from dgr_forge.cli.app import Env, app, run

if TYPE_CHECKING:
    from dgr_forge.cli import results


@app.command()
def demo(
    ctx: typer.Context,
    directory: Annotated[
        str, typer.Argument(metavar="DIR", help="A new or empty directory for the demo root.")
    ],
) -> None:
    """A tour without network: fetch, patch, build, verify, rebase --dry-run in a new DIR.

    DIR gets a generated upstream, series and worker, and is then an ordinary forge root."""

    def body(env: Env) -> results.Demo:
        from dgr_forge import demo as demo_mod
        from dgr_forge.cli import results

        result = demo_mod.run(directory, env.out)
        d = result.demo
        env.out.answer(f"done: {d.root} is a forge root; try `cd {d.root} && dgr-forge status`")
        return results.Demo(
            root=str(d.root),
            upstream=str(d.upstream),
            pin=d.pin,
            onto=d.newer,
            patches=list(d.patches),
            key=str(d.key),
            public_key=str(d.public_key),
            steps=[
                results.DemoStep(
                    step=s.name,
                    command=["dgr-forge", *s.args],
                    exit_code=s.exit_code,
                    proved=s.proved,
                )
                for s in result.steps
            ],
        )

    run(ctx, "demo", body)
