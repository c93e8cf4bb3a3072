"""Run a lane's certification steps on this host: the shipped binaries (a report subject
each, re-hashed right before it runs), no shell, stdin closed, bounded in time and output,
in an environment of `STEP_ENV` only; a `parity` step's reference built from the pin
without the series (docs/build-and-reports.md, *Certification*, steps 5 and 6)."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from dgr_forge.cache import select as cache_mod
from dgr_forge.cache import session as cache_session
from dgr_forge.certify import parsers, trust
from dgr_forge.certify.shapes import CertStep, ParityFigures, StepLog, StepProgram
from dgr_forge.core import gitutil
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_bytes, sha256_file
from dgr_forge.core.output import Reporter
from dgr_forge.core.proc import Bounded, bounded
from dgr_forge.core.urls import mask_text
from dgr_forge.host.doctor import Doctor
from dgr_forge.host.recipes import Gate, Recipe, Step, Suite
from dgr_forge.lanes import cmake_api, steps
from dgr_forge.lanes.lane_build import BuildOptions
from dgr_forge.lanes.logs import new_log
from dgr_forge.lanes.plan import configure_args, plan_lane
from dgr_forge.lanes.state import lane_state
from dgr_forge.upstream.manifest import UpstreamManifest

DEVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
# the backend's first device as ggml names it, the default `{device}`
DEFAULT_DEVICE = {"cpu": "CPU", "cuda": "CUDA0", "rocm/hip": "ROCm0", "rocm": "ROCm0",
                  "vulkan": "Vulkan0", "metal": "Metal"}  # fmt: skip
# All a step's program sees of the forge's environment: never a key, token, CI credential,
# cache or mirror URL (the program is the lane's build, and CI uploads its log).
STEP_ENV = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
    "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "HSA_OVERRIDE_GFX_VERSION",
    "VK_ICD_FILENAMES", "VK_DRIVER_FILES", "ONEAPI_DEVICE_SELECTOR", "OMP_NUM_THREADS",
})  # fmt: skip
STEP_ENV_PREFIXES = ("LC_", "GGML_")  # the locale's categories, ggml's own switches


@dataclass(frozen=True)
class Program:
    target: str
    path: Path  # absolute, in the lane's build directory
    name: str  # the report subject's name (workspace-relative)
    sha256: str
    libraries: tuple[StepProgram, ...] = ()  # a parity reference's shared libraries

    def bound(self) -> StepProgram:
        return StepProgram(target=self.target, path=self.name, sha256=self.sha256)


def programs(
    forge: Forge, lane: str, suite: Suite, subjects: Mapping[str, str]
) -> dict[str, Program]:
    """Each suite target's file, checked to be a report subject and to re-hash to it."""
    build_dir = forge.build_dir(lane)
    try:
        reply = cmake_api.read_reply(build_dir)
    except OperationFailed as err:
        raise OperationFailed(
            f"lane {lane}: no CMake File API reply in {forge.rel(build_dir)} ({err.message})",
            hint=f"build the lane here first (`dgr-forge build --lane {lane}`)",
        ) from None
    base = forge.workspace.resolve()
    found: dict[str, Program] = {}
    for target in suite.targets:
        t = next((t for t in reply.targets if t.name == target), None)
        if t is None or t.kind != "EXECUTABLE":
            raise OperationFailed(
                f"certify target {target!r} is not an executable target of lane {lane}'s "
                "build (CMake File API)",
                hint="name a program the upstream builds (with its option on in the recipe)",
                details={"target": target},
            )
        if not (files := [p for p in t.artifacts if p.is_file()]):
            raise OperationFailed(
                f"certify target {target!r} of lane {lane} was not built: it is not a subject "
                "of the report",
                hint="turn its option on in the recipe (e.g. LLAMA_BUILD_TESTS) and rebuild",
                details={"target": target},
            )
        real = files[0].resolve()
        name = real.relative_to(base).as_posix() if real.is_relative_to(base) else str(real)
        if (want := subjects.get(name)) is None:
            raise OperationFailed(
                f"certify target {target!r} ({name}) is not a subject of the report: only "
                "the shipped binary is certified",
                hint=f"certify the report of the build that produced it "
                f"(`dgr-forge build --lane {lane}` writes one)",
                details={"target": target, "file": name},
            )
        if (got := sha256_file(real)) != want:
            raise OperationFailed(
                f"certify target {target!r} ({name}) changed since the report: sha256 {got}, "
                f"the report says {want}",
                hint=f"rebuild the lane (`dgr-forge build --lane {lane}`) and certify its report",
                details={"target": target, "file": name},
            )
        found[target] = Program(target, real, name, got)
    return found


def substitute(step: Step, values: Mapping[str, str | None]) -> tuple[str, ...]:
    """The values are checked by the caller and never start with '-'."""
    argv = []
    for arg in step.args:
        for key, value in values.items():
            if (token := "{" + key + "}") in arg:
                if value is None:
                    raise BadInput(
                        f"certify step {step.name!r} needs {token}",
                        hint="pass --model M (a manifest under manifests/models/)"
                        if key == "model"
                        else f"pass the value of {token}",
                        details={"step": step.name},
                    )
                arg = arg.replace(token, value)
        argv.append(arg)
    return tuple(argv)


def child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in STEP_ENV or k.startswith(STEP_ENV_PREFIXES)}


def _keep_log(path: Path, raw: bytes) -> None:
    """As kept (and uploaded by a CI job): masked as every other output is."""
    text = mask_text(raw.decode("utf-8", "surrogateescape"))
    with path.open("xb") as f:
        f.write(text.encode("utf-8", "surrogateescape"))


def run_steps(
    forge: Forge,
    lane: str,
    suite: Suite,
    found: Mapping[str, Program],
    values: Mapping[str, str | None],
    out: Reporter,
    model: str | None = None,
    references: Mapping[str, Program] | None = None,
    model_size: int | str | None = None,
) -> list[CertStep]:
    """Every step runs, so a failure report is complete; `model` picks a step's per-model
    gate; `model_size` is the verified model's tensor bytes (`parsers.judge`)."""
    logs = forge.logs_dir
    logs.mkdir(parents=True, exist_ok=True)
    scratch = forge.tmp_dir / f"certify-{lane}"
    scratch.mkdir(parents=True, exist_ok=True)
    # each step's `text` copied where its program reads it: (the copy, its sha256)
    texts: dict[str, tuple[Path, str]] = {}
    for s in suite.steps:
        if s.text is not None:
            data = trust.step_text(forge, s, s.text)
            copy = scratch / f"{s.name}.txt"
            copy.unlink(missing_ok=True)
            copy.write_bytes(data)
            texts[s.name] = (copy, sha256_bytes(data))
    argvs = [  # exit 2 before anything runs
        substitute(s, {**values, "text": str(texts[s.name][0]) if s.name in texts else None})
        for s in suite.steps
    ]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    results = []
    for step, argv in zip(suite.steps, argvs, strict=True):
        program = found[step.program]
        log = logs / f"certify-{lane}-{stamp}-{step.name}.log"
        out.step(f"certify {lane}: step {step.name}: {step.program} {' '.join(argv)}")
        gate = step.gate(model)
        run = _run_whole(program, argv, step, scratch, log)
        (done, _), (figures, problems) = run, _read(step, run)
        if figures is not None:
            problems += parsers.judge(figures, gate, model_size).problems
            # the program's own failure report is judged by the gate; any other exit fails
            counted = parsers.failed_count(figures.figures)
            if done.returncode != 0 and not (done.returncode == 1 and counted):
                problems.append(f"exit code {done.returncode}")
        result = CertStep(
            name=step.name,
            program=program.bound(),
            args=list(argv),
            parser=step.parser,
            thresholds=gate,
            figures=None if figures is None else figures.figures,
            exit_code=done.returncode,
            seconds=round(done.seconds, 3),
            verdict="fail" if problems else "pass",
            problems=tuple(problems),
            log=StepLog(path=forge.rel(log), sha256=sha256_file(log)),
            failed_cases=[] if figures is None else list(figures.failing),
        )
        reference = (references or {}).get(step.program) if step.reference else None
        if reference is not None:
            pin_log = logs / f"certify-{lane}-{stamp}-{step.name}-pin.log"
            out.step(f"certify {lane}: step {step.name}: the pin's {step.program}")
            pin = _run_whole(reference, argv, step, scratch, pin_log)
            result = _compare(result, step, gate, reference, pin, StepLog(
                path=forge.rel(pin_log), sha256=sha256_file(pin_log)))  # fmt: skip
        if step.name in texts:
            result = msgspec.structs.replace(result, text_sha256=texts[step.name][1])
        results.append(result)
    return results


# llama-perplexity logs through common/log's worker thread, which upstream leaks by design
# (common/log.cpp:374-378 at the pin): on a busy host a run that exited 0 lost its final
# entries (once in four, by hand) and says nothing, so it runs again, at most this often.
RUNS_FOR_A_LOST_ENTRY = 3


def _run_whole(
    program: Program, argv: tuple[str, ...], step: Step, scratch: Path, log: Path
) -> tuple[Bounded, bytes]:
    """The run and what its parser reads (for `parsers.BOTH_STREAMS` stdout, then stderr);
    a parity run that exits 0 with no final figure runs again (its log: the last)."""
    runs = RUNS_FOR_A_LOST_ENTRY if step.parser == "parity" else 1
    both = step.parser in parsers.BOTH_STREAMS  # each stream's lines whole, not interleaved
    for left in reversed(range(runs)):
        log.unlink(missing_ok=True)  # the run before's, this process's own
        raw = io.BytesIO()  # bounded by the step's output limit
        try:
            done = bounded(
                [str(program.path), *argv],
                timeout=step.timeout,
                limit=parsers.MAX_OUTPUT_BYTES,
                cwd=scratch,
                env=child_env(),
                log=raw,
            )
        except OSError as err:
            raise OperationFailed(
                f"certify step {step.name!r}: {program.name} cannot run: {err.strerror}",
                hint="rebuild the lane on this host",
                details={"step": step.name},
            ) from None
        _keep_log(log, raw.getvalue())
        run = done, done.stdout + b"\n" + done.stderr if both else done.stdout
        # read here only while another run may follow (the step's parser reads it after)
        if not left or done.returncode != 0 or _read(step, run)[0] is not None:
            break
    return run


def _read(step: Step, run: tuple[Bounded, bytes]) -> tuple[parsers.Figures | None, list[str]]:
    done, data = run
    if done.timed_out:
        return None, [f"stopped at its time limit ({step.timeout} s)"]
    if done.over_limit:
        return None, [f"stopped: output over {parsers.MAX_OUTPUT_BYTES} bytes"]
    try:
        return parsers.PARSE[step.parser](data), []
    except parsers.Unreadable as err:
        return None, [f"unreadable {step.parser} output: {err}"]


def _compare(
    result: CertStep,
    step: Step,
    gate: Gate,
    reference: Program,
    pin: tuple[Bounded, bytes],
    log: StepLog,
) -> CertStep:
    """A parity step's result with the pin's run, judged again."""
    figures, problems = _read(step, pin)
    problems = [f"the pin's build: {p}" for p in problems]
    if pin[0].returncode not in (0, None):
        problems.append(f"the pin's build: exit code {pin[0].returncode}")
    ref = figures.figures if figures is not None else None
    ref_ppl = ref.ppl if isinstance(ref, ParityFigures) else None
    if not isinstance(result.figures, ParityFigures):
        return msgspec.structs.replace(
            result, problems=(*result.problems, *problems), verdict="fail"
        )
    mine = msgspec.structs.replace(
        result.figures,
        reference_ppl=ref_ppl,
        rel_diff=None if ref_ppl is None else abs(result.figures.ppl - ref_ppl) / ref_ppl,
        reference=reference.bound(),
        reference_libraries=list(reference.libraries),
        reference_log=log,
    )
    kept = [p for p in result.problems if p.startswith("exit code")]
    all_problems = (*kept, *problems, *parsers.judge(parsers.Figures(mine), gate).problems)
    return msgspec.structs.replace(
        result, figures=mine, problems=all_problems, verdict="fail" if all_problems else "pass"
    )


def _stamp(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def pin_tree(forge: Forge, m: UpstreamManifest, top: Path) -> Path:
    """The pin's tree in `top/src`: kept when git finds every file the pin's (against the
    scratch index of its export), nothing added (ignored files too); else exported afresh."""
    src, stamp, repo = top / "src", top / "commit", forge.src_dir(m.name)
    env = {"GIT_INDEX_FILE": str(top / "index"), "GIT_WORK_TREE": str(src)}
    kept = _stamp(stamp) == m.commit and src.is_dir()
    if kept:  # every file the index's (the pin's), nothing else there, ignored or not
        gitutil.git(repo, "update-index", "-q", "--refresh", env=env, check=False)
        same = gitutil.git(repo, "diff-files", "--quiet", env=env, check=False)
        others = gitutil.git(repo, "ls-files", "--others", "-z", env=env, check=False)
        kept = same.returncode == 0 and others.returncode == 0 and not others.stdout
    if not kept:
        stamp.unlink(missing_ok=True)
        (top / "configured").unlink(missing_ok=True)
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        gitutil.git(repo, "read-tree", "--end-of-options", m.commit, env=env)
        gitutil.git(repo, "checkout-index", "--all", "--force", f"--prefix={src}/", env=env)
        stamp.write_text(m.commit)
    return src


def references(
    forge: Forge,
    m: UpstreamManifest,
    recipe: Recipe,
    doctor: Doctor | None,
    suite: Suite,
    out: Reporter,
) -> dict[str, Program]:
    targets = sorted({s.program for s in suite.steps if s.reference == "pin"})
    if not targets:
        return {}
    lane = recipe.name
    if doctor is None:
        raise BadInput(
            f"lane {lane}: a parity step builds the pin's program, and this root has no "
            "toolchains/probes.toml to find cmake and ninja with",
            hint="restore toolchains/probes.toml (the lane's build reads it too)",
            details={"lane": lane},
        )
    top = forge.tmp_dir / f"certify-{lane}" / "pin"
    top.mkdir(parents=True, exist_ok=True)
    out.step(f"certify {lane}: the pin's own {', '.join(targets)}, without the series")
    src = pin_tree(forge, m, top)
    opts = BuildOptions.resolve()  # the cache as DGR_CACHE / DGR_CACHE_MODE say
    cache = cache_mod.select(
        doctor, opts.cache, opts.cache_mode, workspace=forge.workspace, root=forge.root
    )
    plan = plan_lane(forge, m, recipe, doctor, None, cache, tree=(src, top / "build"))
    st = lane_state(forge, lane)  # the launcher switches and build-info the lane configured
    args = configure_args(forge, m, plan, tuple(st.launcher_switches), tuple(st.build_info))
    log_path = new_log(forge.logs_dir, f"{lane}-pin")
    env = {**os.environ, **cache.env, "SOURCE_DATE_EPOCH": str(st.source_date_epoch or 0)}
    env["GIT_CEILING_DIRECTORIES"] = str(top)  # the exported tree is no git checkout
    with (
        log_path.open("w", encoding="utf-8") as log,
        cache_session.open_cache_session(cache, os.environ, out),
    ):
        # configured once per tree and arguments (a `--fresh` configure drops the objects)
        done = top / "configured"
        digest = sha256_bytes(json.dumps([plan.cmake, *args, env["SOURCE_DATE_EPOCH"]]).encode())
        ran = steps.Ran(0, [], 0.0)
        if not (plan.build_dir / "build.ninja").is_file() or _stamp(done) != digest:
            done.unlink(missing_ok=True)
            ran = steps.configure([plan.cmake, *args], plan.build_dir, log, env)
            if ran.code == 0:
                done.write_text(digest)
        if ran.code == 0:
            ran = steps.compile_lane(plan, out, None, log, env, targets=targets)
    if ran.code != 0:
        raise OperationFailed(
            f"lane {lane}: the pin's own {', '.join(targets)} (the parity reference) did not "
            f"build: {' / '.join(steps.error_lines(ran.lines, 6))[:800]}",
            hint=f"see {forge.rel(log_path)}; the recipe must build the unpatched pin too",
            details={"lane": lane, "log": forge.rel(log_path)},
        )
    reply = cmake_api.read_reply(plan.build_dir)
    libraries = tuple(
        StepProgram(target=t.name, path=forge.rel(f.resolve()), sha256=sha256_file(f.resolve()))
        for t in reply.targets
        if t.kind == "SHARED_LIBRARY"
        for f in t.artifacts
        if f.is_file()
    )
    found: dict[str, Program] = {}
    for target in targets:
        t = next((t for t in reply.targets if t.name == target and t.kind == "EXECUTABLE"), None)
        files = [p for p in t.artifacts if p.is_file()] if t is not None else []
        if not files:
            raise OperationFailed(
                f"lane {lane}: the pin's tree has no program {target!r} to compare with",
                hint="a parity step's program must exist at the pin (and be built by the "
                "recipe's options)",
                details={"lane": lane, "target": target},
            )
        real = files[0].resolve()
        found[target] = Program(target, real, forge.rel(real), sha256_file(real), libraries)
    return found
