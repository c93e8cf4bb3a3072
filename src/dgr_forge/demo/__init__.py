"""`dgr-forge demo DIR`: a self-contained tour without network or key setup.

`generate` writes a demo forge root (an upstream repository with history, a pinned patch
series, a worker, a demo signing key), `tour` runs the real commands on it. `run` is both.
"""

from __future__ import annotations

from typing import Annotated

from dgr_forge.core import product
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import COMMIT, Form, d
from dgr_forge.demo.generate import check_target, generate
from dgr_forge.demo.tour import DemoStep, run_tour


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
    product.require("the demo")  # an installation without the recipes: before DIR exists
    root = check_target(raw_dir)
    out.step(f"writing a demo forge root into {root}")
    demo = generate(root)
    out.info(
        f"    upstream {demo.upstream.name}/ (branch master, pinned at {demo.pin[:12]}), "
        f"{len(demo.patches)} patches, worker/, demo key {demo.key.relative_to(root)}"
    )
    return Demo(
        root=str(demo.root),
        upstream=str(demo.upstream),
        pin=demo.pin,
        onto=demo.newer,
        patches=list(demo.patches),
        key=str(demo.key),
        public_key=str(demo.public_key),
        steps=run_tour(demo, out),
    )
