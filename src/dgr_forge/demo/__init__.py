"""`dgr-forge demo DIR`: a self-contained tour without network or key setup.

`generate` writes a demo forge root (an upstream repository with history, a pinned patch
series, a worker, a demo signing key), `tour` runs the real commands on it. `run` is both.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Struct

from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import COMMIT, Form, d
from dgr_forge.demo.generate import DemoRoot, check_target, generate, product_dir
from dgr_forge.demo.tour import run_tour

__all__ = ["Demo", "DemoRoot", "check_target", "generate", "run", "run_tour"]


class DemoStep(Struct, kw_only=True):
    """a step"""

    step: Annotated[
        str,
        d(
            "`fetch`, `patch`, `build`, `report verify`, `rebase --dry-run`, `certify`, "
            "`lanes --advertised`"
        ),
    ]
    command: Annotated[list[str], d("the argv, from `dgr-forge`")]
    exit_code: Annotated[int | None, d("its exit code (null: it did not run)")]
    proved: Annotated[str, d("one line")]


class Demo(Form, kw_only=True):
    """`demo`'s result (its `--json` object)."""

    title = "demo DIR"
    note = (
        "a step that does not end as expected is exit 1 with `step` and `step_exit_code`; a "
        "non-empty DIR is exit 2"
    )

    root: Annotated[str, d("DIR: the demo forge root")]
    upstream: Annotated[str, d("the demo upstream's directory")]
    pin: Annotated[str, COMMIT]
    onto: Annotated[str, d("the newer upstream commit the dry run replays onto")]
    patches: Annotated[list[str], d("file names")]
    key: Annotated[str, d("the demo key")]
    public_key: Annotated[str, d("its public key")]
    steps: Annotated[list[DemoStep], d("per step")]


def run(raw_dir: str, out: Reporter) -> Demo:
    """Check DIR, write the demo root into it, run the tour."""
    product_dir()  # an installation without the forge's recipes refuses before DIR exists
    root = check_target(raw_dir)
    out.step(f"writing a demo forge root into {root}")
    demo = generate(root)
    out.info(
        f"    upstream {demo.upstream.name}/ (branch master, pinned at {demo.pin[:12]}), "
        f"{len(demo.patches)} patches, worker/, demo key {demo.key.relative_to(root)}"
    )
    steps = run_tour(demo, out)
    return Demo(
        root=str(demo.root),
        upstream=str(demo.upstream),
        pin=demo.pin,
        onto=demo.newer,
        patches=list(demo.patches),
        key=str(demo.key),
        public_key=str(demo.public_key),
        steps=[
            DemoStep(
                step=s.name, command=["dgr-forge", *s.args], exit_code=s.exit_code, proved=s.proved
            )
            for s in steps
        ],
    )
