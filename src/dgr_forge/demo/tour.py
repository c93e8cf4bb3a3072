"""The demo's tour: the real commands, each `dgr-forge --json ...` in a child process as a
user would type it; its JSON says in one line what the step proved. A step that does not
end as expected stops the tour (exit 1), naming the step, its exit code and its error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import msgspec
from msgspec import Struct

from dgr_forge.core import proc
from dgr_forge.core.errors import ExitCode, OperationFailed
from dgr_forge.core.output import Reporter
from dgr_forge.demo import sources
from dgr_forge.demo.generate import Demo, DemoStep
from dgr_forge.models.sources import FILE_ROOTS_ENV

# what a child inherits of the caller's DGR_* settings: none that would point it elsewhere
# (DGR_ROOT, DGR_MIRROR, DGR_SIGNING_KEY, DGR_FAULT ...); these only change how it reports
KEEP_ENV = ("DGR_DEBUG", "DGR_LOCK_TIMEOUT")


def _short(commit: object) -> str:
    return str(commit or "?")[:12]


def _rel(demo: Demo, path: object) -> str:
    p = Path(str(path))
    return str(p.relative_to(demo.root)) if p.is_relative_to(demo.root) else str(p)


class _Said(Struct):  # what the tour reads of a step's `--json` object
    error: str | None = None

    def proved(self, demo: Demo) -> str:
        raise NotImplementedError


class _Fetched(_Said):
    commit: str | None = None
    tree: str | None = None
    method: str | None = None

    def proved(self, demo: Demo) -> str:
        return (
            f"the upstream is at exactly the pinned commit {_short(self.commit)}, its tree "
            f"{_short(self.tree)} verified before checkout ({self.method})"
        )


class _Patched(_Said):
    patches: list[str] = []
    result_tree: str | None = None

    def proved(self, demo: Demo) -> str:
        return (
            f"{len(self.patches)} patches applied in order, one commit each, every sha256 "
            f"checked; the result tree {_short(self.result_tree)} is the one the manifest pins"
        )


class _Artifact(Struct):
    path: str = ""


class _Lane(Struct):
    artifacts: list[_Artifact] = []
    report: str | None = None


class _Built(_Said):
    lanes: list[_Lane] = []

    @property
    def lane(self) -> _Lane:
        return (self.lanes or [_Lane()])[0]

    def proved(self, demo: Demo) -> str:
        runs = ""  # what the built worker prints first
        for path in (Path(art.path) for art in self.lane.artifacts):
            if path.name == "shard-worker" and path.is_file():
                ran = proc.capture([str(path)], cwd=demo.root, timeout=30)
                first = (ran.stdout.strip().splitlines() or [""])[0]
                runs = f"; it runs: {first}" if ran.returncode == 0 and first else ""
                break
        return (
            f"the worker was configured and built (CMake + Ninja) against the patched tree; "
            f"{len(self.lane.artifacts)} artifact(s) hashed into the signed report "
            f"{_rel(demo, self.lane.report)}{runs}"
        )


class _Key(Struct):
    keyid: str | None = None


class _Verified(_Said):
    artifacts: list[_Artifact] = []
    key: _Key | None = None

    def proved(self, demo: Demo) -> str:
        keyid = self.key.keyid if self.key else None
        return (
            f"the report's DSSE signature verifies with the demo key {_short(keyid)} "
            f"({sources.KEYS_DIR}/{sources.KEY_FILE}.pub), and all {len(self.artifacts)} "
            "artifact(s) re-hash to the digests it names"
        )


class _Upstreamed(Struct):
    commit: str | None = None
    subject: str | None = None


class _Row(Struct):
    file: str = "?"
    outcome: str = "?"
    upstream_commits: list[_Upstreamed] = []
    files: list[str] = []


class _Canary(_Said):
    patches: list[_Row] = []
    new_commit: str | None = None

    def proved(self, demo: Demo) -> str:
        parts = []
        for row in self.patches:
            by = "".join(f" {_short(c.commit)} ({c.subject})" for c in row.upstream_commits[:1])
            if row.outcome == "conflict":
                files = ", ".join(row.files)
                parts.append(f"{row.file} would conflict in {files} with upstream{by}")
            elif row.outcome == "dropped":
                parts.append(f"{row.file} is upstreamed by{by or ' upstream'}")
            else:
                parts.append(f"{row.file} {row.outcome}")
        return f"onto {_short(self.new_commit)}: " + "; ".join(parts) + "; nothing was changed"


class _Figures(Struct):
    parser: str | None = None
    ops_passed: int | None = None
    ops_total: int | None = None
    prompt_ts: float | None = None
    gen_ts: float | None = None
    ppl: float | None = None
    reference_ppl: float | None = None


class _CertStep(Struct):
    figures: _Figures | None = None


class _Certified(_Said):
    kind: str | None = None
    lane: str | None = None
    model: str | None = None
    hardware_class: str | None = None
    keyid: str | None = None
    certification: str | None = None
    steps: list[_CertStep] = []

    def proved(self, demo: Demo) -> str:
        parts = []
        for f in (s.figures or _Figures() for s in self.steps):
            if f.parser == "test-backend-ops":
                parts.append(f"{f.ops_passed}/{f.ops_total} op cases match the reference")
            elif f.parser == "llama-bench":
                parts.append(f"pp {f.prompt_ts or 0:.0f} t/s, tg {f.gen_ts or 0:.0f} t/s")
            elif f.parser == "parity":
                parts.append(f"PPL {f.ppl}, the unpatched pin's {f.reference_ppl}")
        return (
            f"a {self.kind} certification of lane {self.lane} with model {self.model} on "
            f"{self.hardware_class}: " + "; ".join(parts) + f", signed by "
            f"{_short(self.keyid)} into {_rel(demo, self.certification)}"
        )


class _Advertised(_Said):
    entries: list[_Certified] = []  # records: a certification's lane, model, hardware_class

    def proved(self, demo: Demo) -> str:
        shown = [f"{e.lane} / {e.model} / {e.hardware_class}" for e in self.entries]
        return "advertised (a trusted key's valid certification): " + (", ".join(shown) or "none")


class Step(Struct):
    name: str
    args: list[str]
    reads: type[_Said] = _Said  # what the step's `--json` object is read as
    expect: tuple[int, ...] = (ExitCode.OK,)
    env: dict[str, str] = {}  # this step's own settings
    exit_code: int | None = None


def _decode(raw: str, reads: type[_Said]) -> _Said:
    try:
        return msgspec.json.decode(raw, type=reads)
    except msgspec.DecodeError:  # no JSON, or not of its shape
        return reads()


def _run(demo: Demo, step: Step) -> _Said:
    # -P: nothing is imported from DIR, the child's working directory
    cmd = [sys.executable, "-P", "-m", "dgr_forge", "--root", str(demo.root), "--json", *step.args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGR_") or k in KEEP_ENV}
    done = proc.capture(cmd, cwd=demo.root, env={**env, **step.env})
    step.exit_code = done.returncode
    if done.returncode not in step.expect:
        said = _decode(done.stdout, _Said).error
        said = said or (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise OperationFailed(
            f"demo step {step.name} (`dgr-forge {' '.join(step.args)}`) exited "
            f"{done.returncode}: {said}",
            hint=f"run it yourself in {demo.root} to see all of its output; "
            "`dgr-forge doctor` says what this host lacks",
            details={"step": step.name, "step_exit_code": done.returncode},
        )
    return _decode(done.stdout, step.reads)


def steps(demo: Demo) -> list[Step]:
    key = f"{sources.KEYS_DIR}/{sources.KEY_FILE}"
    return [
        Step("fetch", ["fetch"], _Fetched),
        Step("patch", ["patch"], _Patched),
        Step("build", ["build", "--lane", "cpu", "--key", key, "--cache", "off"], _Built),
        Step("report verify", [], _Verified),
        Step(
            "rebase --dry-run",
            ["rebase", "--onto", sources.BRANCH, "--dry-run"],
            _Canary,
            expect=(ExitCode.OK, ExitCode.NEEDS_HUMAN),
        ),
        Step(
            "certify",
            [
                *("certify", "--lane", "cpu", "--model", sources.MODEL, "--key", key),
                *("--report-key", f"{key}.pub"),
            ],
            _Certified,
            # the model's file:// source, allowed for this step only; relative to
            # its working directory, DIR, so a `:` in DIR's name splits no path list
            env={FILE_ROOTS_ENV: sources.MODEL_SOURCE_DIR},
        ),
        Step("lanes --advertised", ["lanes", "--advertised"], _Advertised),
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
        proved = result.proved(demo)
        out.info(f"    proved: {proved}")
        if isinstance(result, _Built):
            report = result.lane.report
        argv = ["dgr-forge", *step.args]
        done.append(DemoStep(step=step.name, command=argv, exit_code=step.exit_code, proved=proved))
    return done
