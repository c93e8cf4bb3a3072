"""`dgr-forge demo DIR`: a self-contained tour without network or key setup: `generate`
writes a demo forge root, `tour` runs the real commands on it, `run` is both.
"""

from __future__ import annotations

from dgr_forge.core import product
from dgr_forge.core.output import Reporter
from dgr_forge.demo.generate import Demo as Demo
from dgr_forge.demo.generate import check_target, generate
from dgr_forge.demo.tour import run_tour


def run(raw_dir: str, out: Reporter) -> Demo:
    product.require("the demo")  # an installation without the recipes: before DIR exists
    root = check_target(raw_dir)
    out.step(f"writing a demo forge root into {root}")
    demo = generate(root)
    out.info(
        f"    upstream {demo.upstream.name}/ (branch master, pinned at {demo.pin[:12]}), "
        f"{len(demo.patches)} patches, worker/, demo key {demo.key.relative_to(root)}"
    )
    demo.steps = run_tour(demo, out)
    return demo
