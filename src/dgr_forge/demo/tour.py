"""The demo's tour: the real commands, run on the demo root as a user would type them.

Each step is `dgr-forge --json ...` in a child process (the command as shipped, with its
own lock, error boundary and exit code), and its JSON is read to say in one line what the
step proved. A step that does not end as the tour expects stops it (exit 1), naming the
step, its exit code and its error.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from msgspec import Struct

from dgr_forge.core import proc
from dgr_forge.core.errors import ExitCode, OperationFailed
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import d
from dgr_forge.demo import sources
from dgr_forge.demo.generate import DemoRoot
from dgr_forge.models.sources import FILE_ROOTS_ENV

# what a child inherits of the caller's DGR_* settings: none that would point it elsewhere
# (DGR_ROOT, DGR_MIRROR, DGR_SIGNING_KEY, DGR_FAULT ...); these only change how it reports
KEEP_ENV = ("DGR_DEBUG", "DGR_LOCK_TIMEOUT")


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


@dataclass
class Step:
    name: str
    args: list[str]
    expect: tuple[int, ...] = (ExitCode.OK,)
    env: dict[str, str] = field(default_factory=dict)  # this step's own settings
    exit_code: int | None = None


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DGR_") or k in KEEP_ENV}


def _run(demo: DemoRoot, step: Step) -> dict[str, Any]:
    # -P: nothing is imported from DIR, the child's working directory
    cmd = [sys.executable, "-P", "-m", "dgr_forge", "--root", str(demo.root), "--json"]
    cmd += step.args
    done = proc.capture(cmd, cwd=demo.root, env={**_env(), **step.env})
    step.exit_code = done.returncode
    try:
        data: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        data = {}
    if done.returncode not in step.expect:
        said = data.get("error") or (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise OperationFailed(
            f"demo step {step.name} (`dgr-forge {' '.join(step.args)}`) exited "
            f"{done.returncode}: {said}",
            hint=f"run it yourself in {demo.root} to see all of its output; "
            "`dgr-forge doctor` says what this host lacks",
            details={"step": step.name, "step_exit_code": done.returncode},
        )
    return data


def _short(commit: object) -> str:
    return str(commit or "?")[:12]


def _fetched(demo: DemoRoot, d: dict[str, Any]) -> str:
    return (
        f"the upstream is at exactly the pinned commit {_short(d.get('commit'))}, its tree "
        f"{_short(d.get('tree'))} verified before checkout ({d.get('method')})"
    )


def _patched(demo: DemoRoot, d: dict[str, Any]) -> str:
    n = len(d.get("patches") or [])
    return (
        f"{n} patches applied in order, one commit each, every sha256 checked; the result "
        f"tree {_short(d.get('result_tree'))} is the one the manifest pins"
    )


def _worker_says(demo: DemoRoot, lane: dict[str, Any]) -> str:
    for art in lane.get("artifacts") or []:
        path = Path(str(art.get("path", "")))
        if path.name == "shard-worker" and path.is_file():
            ran = proc.capture([str(path)], cwd=demo.root, timeout=30)
            first = (ran.stdout.strip().splitlines() or [""])[0]
            return f"; it runs: {first}" if ran.returncode == 0 and first else ""
    return ""


def _rel(demo: DemoRoot, path: object) -> str:
    p = Path(str(path))
    return str(p.relative_to(demo.root)) if p.is_relative_to(demo.root) else str(p)


def _built(demo: DemoRoot, d: dict[str, Any]) -> str:
    lane = (d.get("lanes") or [{}])[0]
    arts = len(lane.get("artifacts") or [])
    return (
        f"the worker was configured and built (CMake + Ninja) against the patched tree; "
        f"{arts} artifact(s) hashed into the signed report {_rel(demo, lane.get('report'))}"
        + _worker_says(demo, lane)
    )


def _verified(demo: DemoRoot, d: dict[str, Any]) -> str:
    arts = len(d.get("artifacts") or [])
    keyid = (d.get("key") or {}).get("keyid")
    return (
        f"the report's DSSE signature verifies with the demo key {_short(keyid)} "
        f"({sources.KEYS_DIR}/{sources.KEY_FILE}.pub), and all {arts} artifact(s) re-hash "
        "to the digests it names"
    )


def _canary(demo: DemoRoot, d: dict[str, Any]) -> str:
    parts = []
    for row in d.get("patches") or []:
        name, outcome = row.get("file", "?"), row.get("outcome", "?")
        commits = row.get("upstream_commits") or []
        by = f" {_short(commits[0].get('commit'))} ({commits[0].get('subject')})" if commits else ""
        if outcome == "conflict":
            files = ", ".join(row.get("files") or [])
            parts.append(f"{name} would conflict in {files} with upstream{by}")
        elif outcome == "dropped":
            parts.append(f"{name} is upstreamed by{by or ' upstream'}")
        else:
            parts.append(f"{name} {outcome}")
    return f"onto {_short(d.get('new_commit'))}: " + "; ".join(parts) + "; nothing was changed"


def _certified(demo: DemoRoot, d: dict[str, Any]) -> str:
    parts = []
    for s in d.get("steps") or []:
        f = s.get("figures") or {}
        if f.get("parser") == "test-backend-ops":
            parts.append(f"{f.get('ops_passed')}/{f.get('ops_total')} op cases match the reference")
        elif f.get("parser") == "llama-bench":
            parts.append(f"pp {f.get('prompt_ts', 0):.0f} t/s, tg {f.get('gen_ts', 0):.0f} t/s")
        elif f.get("parser") == "parity":
            parts.append(f"PPL {f.get('ppl')}, the unpatched pin's {f.get('reference_ppl')}")
    return (
        f"a {d.get('kind')} certification of lane {d.get('lane')} with model {d.get('model')} on "
        f"{d.get('hardware_class')}: " + "; ".join(parts) + f", signed by "
        f"{_short(d.get('keyid'))} into {_rel(demo, d.get('certification'))}"
    )


def _advertised(demo: DemoRoot, d: dict[str, Any]) -> str:
    shown = [
        f"{e.get('lane')} / {e.get('model')} / {e.get('hardware_class')}"
        for e in d.get("entries") or []
    ]
    return "advertised (a trusted key's valid certification): " + (", ".join(shown) or "none")


def steps(demo: DemoRoot) -> list[tuple[Step, Callable[[DemoRoot, dict[str, Any]], str]]]:
    key = f"{sources.KEYS_DIR}/{sources.KEY_FILE}"
    return [
        (Step("fetch", ["fetch"]), _fetched),
        (Step("patch", ["patch"]), _patched),
        (Step("build", ["build", "--lane", "cpu", "--key", key, "--cache", "off"]), _built),
        (Step("report verify", []), _verified),
        (
            Step(
                "rebase --dry-run",
                ["rebase", "--onto", sources.BRANCH, "--dry-run"],
                expect=(ExitCode.OK, ExitCode.NEEDS_HUMAN),
            ),
            _canary,
        ),
        (
            Step(
                "certify",
                [
                    *("certify", "--lane", "cpu", "--model", sources.MODEL, "--key", key),
                    *("--report-key", f"{key}.pub"),
                ],
                # the model's file:// source, allowed for this step only; relative to
                # its working directory, DIR, so a `:` in DIR's name splits no path list
                env={FILE_ROOTS_ENV: sources.MODEL_SOURCE_DIR},
            ),
            _certified,
        ),
        (Step("lanes --advertised", ["lanes", "--advertised"]), _advertised),
    ]


def run_tour(demo: DemoRoot, out: Reporter) -> list[DemoStep]:
    """Run every step; each prints one line on what it proved. Raises on the first that
    does not end as expected."""
    done: list[DemoStep] = []
    report: str | None = None
    for step, describe in steps(demo):
        if step.name == "report verify":
            shown = _rel(demo, report) if report else "?"
            step.args = ["report", "verify", shown, "--artifacts"]
            step.args += ["--key", f"{sources.KEYS_DIR}/{sources.KEY_FILE}.pub"]
        out.step(f"dgr-forge {' '.join(step.args)}")
        result = _run(demo, step)
        proved = describe(demo, result)
        out.info(f"    proved: {proved}")
        if step.name == "build":
            report = (result.get("lanes") or [{}])[0].get("report")
        argv = ["dgr-forge", *step.args]
        done.append(DemoStep(step=step.name, command=argv, exit_code=step.exit_code, proved=proved))
    return done
