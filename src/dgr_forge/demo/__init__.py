"""`dgr-forge demo DIR`: a self-contained tour without network or key setup.

`generate` writes a demo forge root (an upstream repository with history, a pinned patch
series, a worker, a demo signing key), `tour` runs the real commands on it. `run` is both.
"""

from __future__ import annotations

from dataclasses import dataclass

from dgr_forge.core.output import Reporter
from dgr_forge.demo.generate import DemoRoot, check_target, generate, product_dir
from dgr_forge.demo.tour import Step, run_tour

__all__ = ["DemoResult", "DemoRoot", "check_target", "generate", "run", "run_tour"]


@dataclass(frozen=True)
class DemoResult:
    demo: DemoRoot
    steps: list[Step]


def run(raw_dir: str, out: Reporter) -> DemoResult:
    """Check DIR, write the demo root into it, run the tour."""
    product_dir()  # an installation without the forge's recipes refuses before DIR exists
    root = check_target(raw_dir)
    out.step(f"writing a demo forge root into {root}")
    demo = generate(root)
    out.info(
        f"    upstream {demo.upstream.name}/ (branch master, pinned at {demo.pin[:12]}), "
        f"{len(demo.patches)} patches, worker/, demo key {demo.key.relative_to(root)}"
    )
    return DemoResult(demo, run_tour(demo, out))
