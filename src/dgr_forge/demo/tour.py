"""The demo's tour: the real commands, each `dgr-forge --json ...` in a child process as a
user would type it; its JSON says in one line what the step proved. A step that does not
end as expected stops the tour (exit 1), naming the step, its exit code and its error.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from dgr_forge.attest.reports import ReportVerify
from dgr_forge.certify.records import Lanes
from dgr_forge.certify.shapes import BenchFigures, Certified, OpsFigures, ParityFigures
from dgr_forge.core import proc
from dgr_forge.core.errors import ExitCode, OperationFailed
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form
from dgr_forge.demo import sources
from dgr_forge.demo.generate import Demo, DemoStep
from dgr_forge.lanes.build import BuildResult
from dgr_forge.models.sources import FILE_ROOTS_ENV
from dgr_forge.upstream.fetch import Fetch
from dgr_forge.upstream.local_replay import Patch
from dgr_forge.upstream.rebase.state import RebaseDryRun

# what a child inherits of the caller's DGR_* settings: none that would point it elsewhere
# (DGR_ROOT, DGR_MIRROR, DGR_SIGNING_KEY, DGR_FAULT ...); these only change how it reports
KEEP_ENV = ("DGR_DEBUG", "DGR_LOCK_TIMEOUT")


def _short(commit: object) -> str:
    return str(commit or "?")[:12]


def _rel(demo: Demo, path: object) -> str:
    p = Path(str(path))
    return str(p.relative_to(demo.root)) if p.is_relative_to(demo.root) else str(p)


def _fetched(demo: Demo, r: Fetch) -> str:
    return (
        f"the upstream is at exactly the pinned commit {_short(r.commit)}, its tree "
        f"{_short(r.tree)} verified before checkout ({r.method})"
    )


def _patched(demo: Demo, r: Patch) -> str:
    return (
        f"{len(r.patches)} patches applied in order, one commit each, every sha256 "
        f"checked; the result tree {_short(r.result_tree)} is the one the manifest pins"
    )


def _built(demo: Demo, r: BuildResult) -> str:
    lane = r.lanes[0]
    runs = ""  # what the built worker prints first
    for path in (Path(art.path) for art in lane.artifacts):
        if path.name == "shard-worker" and path.is_file():
            ran = proc.capture([str(path)], cwd=demo.root, timeout=30)
            first = (ran.stdout.strip().splitlines() or [""])[0]
            runs = f"; it runs: {first}" if ran.returncode == 0 and first else ""
            break
    return (
        f"the worker was configured and built (CMake + Ninja) against the patched tree; "
        f"{len(lane.artifacts)} artifact(s) hashed into the signed report "
        f"{_rel(demo, lane.report)}{runs}"
    )


def _verified(demo: Demo, r: ReportVerify) -> str:
    return (
        f"the report's DSSE signature verifies with the demo key {_short(r.key and r.key.keyid)} "
        f"({sources.KEYS_DIR}/{sources.KEY_FILE}.pub), and all {len(r.artifacts)} "
        "artifact(s) re-hash to the digests it names"
    )


def _canary(demo: Demo, r: RebaseDryRun) -> str:
    parts = []
    for row in r.patches:
        by = "".join(f" {_short(c.commit)} ({c.subject})" for c in (row.upstream_commits or [])[:1])
        if row.outcome == "conflict":
            parts.append(
                f"{row.file} would conflict in {', '.join(row.files or [])} with upstream{by}"
            )
        elif row.outcome == "dropped":
            parts.append(f"{row.file} is upstreamed by{by or ' upstream'}")
        else:
            parts.append(f"{row.file} {row.outcome}")
    return f"onto {_short(r.new_commit)}: " + "; ".join(parts) + "; nothing was changed"


def _certified(demo: Demo, r: Certified) -> str:
    parts = []
    for f in (s.figures for s in r.steps):
        if isinstance(f, OpsFigures):
            parts.append(f"{f.ops_passed}/{f.ops_total} op cases match the reference")
        elif isinstance(f, BenchFigures):
            parts.append(f"pp {f.prompt_ts or 0:.0f} t/s, tg {f.gen_ts or 0:.0f} t/s")
        elif isinstance(f, ParityFigures):
            parts.append(f"PPL {f.ppl}, the unpatched pin's {f.reference_ppl}")
    return (
        f"a {r.kind} certification of lane {r.lane} with model {r.model} on "
        f"{r.hardware_class}: " + "; ".join(parts) + f", signed by "
        f"{_short(r.keyid)} into {_rel(demo, r.certification)}"
    )


def _advertised(demo: Demo, r: Lanes) -> str:
    shown = [f"{e.lane} / {e.model} / {e.hardware_class}" for e in r.entries or []]
    return "advertised (a trusted key's valid certification): " + (", ".join(shown) or "none")


def _path(kind: type, value: Any) -> Any:  # `--json` writes a path as its string
    if kind is Path and isinstance(value, str):
        return Path(value)
    raise NotImplementedError(kind)


class _Failure(Struct):  # what the tour reads of a step that failed: its error, if any
    error: str | None = None


class Step(Struct):
    name: str
    args: list[str]
    # the step's `--json` object as its command's own result type, and what it proved
    proved: Callable[[Demo, Any], str]
    reads: type[Form]
    expect: tuple[int, ...] = (ExitCode.OK,)
    env: dict[str, str] = {}  # this step's own settings
    exit_code: int | None = None


def _run(demo: Demo, step: Step) -> Form:
    # -P: nothing is imported from DIR, the child's working directory
    cmd = [sys.executable, "-P", "-m", "dgr_forge", "--root", str(demo.root), "--json", *step.args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGR_") or k in KEEP_ENV}
    done = proc.capture(cmd, cwd=demo.root, env={**env, **step.env})
    step.exit_code = done.returncode
    said: str | None = None
    if done.returncode in step.expect:
        keys = step.reads.__struct_encode_fields__  # the result's own: not the envelope's
        try:
            data = msgspec.json.decode(done.stdout, type=dict[str, Any])
            mine = {k: v for k, v in data.items() if k in keys}
            return msgspec.convert(mine, step.reads, dec_hook=_path)
        except msgspec.DecodeError as err:  # no JSON object, or not of the result's shape
            said = f"its --json object is not `{step.reads.title}`'s: {err}"
    else:
        with contextlib.suppress(msgspec.DecodeError):
            said = msgspec.json.decode(done.stdout, type=_Failure).error
    said = said or (done.stderr.strip().splitlines() or ["no output"])[-1]
    raise OperationFailed(
        f"demo step {step.name} (`dgr-forge {' '.join(step.args)}`) exited "
        f"{done.returncode}: {said}",
        hint=f"run it yourself in {demo.root} to see all of its output; "
        "`dgr-forge doctor` says what this host lacks",
        details={"step": step.name, "step_exit_code": done.returncode},
    )


def steps(demo: Demo) -> list[Step]:
    key = f"{sources.KEYS_DIR}/{sources.KEY_FILE}"
    return [
        Step("fetch", ["fetch"], _fetched, Fetch),
        Step("patch", ["patch"], _patched, Patch),
        Step(
            "build", ["build", "--lane", "cpu", "--key", key, "--cache", "off"], _built, BuildResult
        ),
        Step("report verify", [], _verified, ReportVerify),
        Step(
            "rebase --dry-run",
            ["rebase", "--onto", sources.BRANCH, "--dry-run"],
            _canary,
            RebaseDryRun,
            expect=(ExitCode.OK, ExitCode.NEEDS_HUMAN),
        ),
        Step(
            "certify",
            [
                *("certify", "--lane", "cpu", "--model", sources.MODEL, "--key", key),
                *("--report-key", f"{key}.pub"),
            ],
            _certified,
            Certified,
            # the model's file:// source, allowed for this step only; relative to
            # its working directory, DIR, so a `:` in DIR's name splits no path list
            env={FILE_ROOTS_ENV: sources.MODEL_SOURCE_DIR},
        ),
        Step("lanes --advertised", ["lanes", "--advertised"], _advertised, Lanes),
    ]


def run_tour(demo: Demo, out: Reporter) -> list[DemoStep]:
    done: list[DemoStep] = []
    report: str | None = None
    for step in steps(demo):
        if step.name == "report verify":
            step.args = ["report", "verify", _rel(demo, report) if report else "?", "--artifacts"]
            step.args += ["--key", f"{sources.KEYS_DIR}/{sources.KEY_FILE}.pub"]
        out.step(f"dgr-forge {' '.join(step.args)}")
        result = _run(demo, step)
        proved = step.proved(demo, result)
        out.info(f"    proved: {proved}")
        if isinstance(result, BuildResult):
            report = result.lanes[0].report
        argv = ["dgr-forge", *step.args]
        done.append(DemoStep(step=step.name, command=argv, exit_code=step.exit_code, proved=proved))
    return done
