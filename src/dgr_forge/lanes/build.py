"""`dgr-forge build`: CMake + Ninja builds of the shard worker (or the upstream) per lane.

For each lane: refuse before creating anything when the host lacks what the recipe
needs; otherwise plan the lane (`lanes.plan`), make sure the upstream is patched and
clean, configure with Ninja (a CMake File API query first), build, find artifacts through
the File API reply, hash them and hand a `LaneBuild` to the report writer.

Incremental, but never at the cost of truth: a digest of everything configure depends on
is kept per lane in `<workspace>/state.json`. When it matches (and the patched tree is
where we left it, with nothing untracked or modified), fetch, patch and configure are
skipped and only Ninja runs. The last report is handed back only when Ninja had no work,
the last build completed, every subject still re-hashes to its digest, every byproduct
too, and it was signed by the key asked for now; a changed artifact is removed so Ninja
rebuilds it, and a new report is written.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from dgr_forge.cache import select as cache_mod
from dgr_forge.cache import session as cache_session
from dgr_forge.core import fault, gitutil
from dgr_forge.core.errors import BadInput, NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_file
from dgr_forge.core.output import Reporter
from dgr_forge.core.urls import mask
from dgr_forge.host import cmake_options as options
from dgr_forge.host import worker
from dgr_forge.host.recipes import Recipe, select
from dgr_forge.lanes import gitview, inputs, logs, programs, stamps, truth
from dgr_forge.lanes.collect import BuildRun, collect_artifacts, make_record
from dgr_forge.lanes.doctor import Doctor, LaneCheck
from dgr_forge.lanes.plan import (
    LanePlan,
    configure_args,
    inputs_digest,
    launcher_switches,
    plan_lane,
    refuse_unbuildable,
)
from dgr_forge.lanes.signing import SigningKey
from dgr_forge.lanes.state import LastBuild, lane_state, save_lane_state
from dgr_forge.upstream import trees
from dgr_forge.upstream.manifest import UpstreamManifest

if TYPE_CHECKING:
    from dgr_forge.upstream.patches import PatchedTree

NINJA_STATUS = re.compile(r"^\[(\d+)/(\d+)\]\s*(.*)$")
NO_WORK = "ninja: no work to do."


@dataclass(frozen=True)
class BuildOptions:
    """What one `build` was asked, resolved once (`resolve`): defaults, then the
    environment (DGR_CACHE, DGR_CACHE_MODE), then the command's options; validated."""

    lanes: tuple[str, ...] = ("cpu",)
    worker: Path | None = None
    jobs: int | None = None
    key: str | None = None
    sign: bool = True
    mirror: str | None = None
    offline: bool = False
    cache: str = "auto"  # auto | ccache | sccache | off
    cache_mode: str = "rw"  # rw | ro
    force: bool = False  # a git worker checkout holding a person's work: save it, then move

    @classmethod
    def resolve(
        cls,
        *,
        lanes: Sequence[str] = (),
        worker: Path | None = None,
        jobs: int | None = None,
        key: str | None = None,
        sign: bool = True,
        mirror: str | None = None,
        offline: bool = False,
        cache: str | None = None,
        cache_mode: str | None = None,
        force: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> BuildOptions:
        """Exit 2, naming the option or variable, for a value that is not allowed."""
        env = os.environ if environ is None else environ
        if jobs is not None and not 1 <= jobs <= 4096:
            raise BadInput(f"--jobs {jobs}: must be 1 to 4096", hint="e.g. --jobs 2")
        choice, where = (cache, "--cache") if cache is not None else (None, "DGR_CACHE")
        choice = choice or env.get("DGR_CACHE") or "auto"
        if choice not in cache_mod.CHOICES:
            raise BadInput(
                f"{where} {choice!r}: not a cache choice",
                hint=f"use one of {', '.join(cache_mod.CHOICES)} (or DGR_CACHE)",
            )
        mode, where = (cache_mode, "--cache-mode") if cache_mode is not None else (None, "")
        where = where or "DGR_CACHE_MODE"
        mode = mode or env.get("DGR_CACHE_MODE") or "rw"
        if mode not in cache_mod.MODES:
            raise BadInput(
                f"{where} {mode!r}: not a cache mode",
                hint=f"use one of {', '.join(cache_mod.MODES)} (or DGR_CACHE_MODE)",
            )
        return cls(
            lanes=tuple(lanes) or ("cpu",),
            worker=worker,
            jobs=jobs,
            key=key,
            sign=sign,
            mirror=mirror,
            offline=offline,
            cache=choice,
            cache_mode=mode,
            force=force,
        )


@dataclass
class LaneResult:
    lane: str
    status: str  # built | up-to-date | failed
    configured: bool = False
    patched: bool = False
    ninja_steps: int = 0
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    report: str | None = None
    report_reused: bool = False
    log: str = ""  # logs/build-<lane>.log, the link to the latest log
    log_file: str = ""  # this build's own log
    build_dir: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    error_lines: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)  # artifacts found changed on disk
    cache: dict[str, Any] = field(default_factory=dict)


@dataclass
class BuildResult:
    upstream: dict[str, Any]
    worker: str | None
    lanes: list[LaneResult]

    @property
    def failed(self) -> LaneResult | None:
        return next((r for r in self.lanes if r.status == "failed"), None)


def error_lines(lines: list[str], limit: int = 40) -> list[str]:
    """The part of a failed build worth showing: Ninja's FAILED block(s) or CMake Errors."""
    start = next((i for i, line in enumerate(lines) if line.startswith("FAILED:")), None)
    if start is None:
        start = next((i for i, line in enumerate(lines) if "CMake Error" in line), None)
    if start is None:
        start = max(0, len(lines) - limit)
    picked = [line for line in lines[start:] if not line.startswith("ninja: build stopped")]
    return picked[:limit]


def source_date_epoch(src: Path, commit: str) -> int:
    return int(gitutil.out(src, "show", "-s", "--format=%ct", commit))


def _changes(src: Path) -> list[str]:
    """Tracked edits, untracked and ignored files (porcelain v1 lines; `lanes.trees`)."""
    return trees.changes(src)


def refuse_unclean(src: Path, what: str, forge: Forge) -> None:
    """Exit 3: the tree built must be exactly the tree pinned (nothing untracked either)."""
    changes = _changes(src)
    if not changes:
        return
    shown = [c[3:] for c in changes[:10]] + (["..."] if len(changes) > 10 else [])
    raise NeedsHuman(
        f"{forge.rel(src)}: the {what} tree has modified, untracked or ignored files, which a "
        f"build could compile while the report claims the pinned tree: {', '.join(shown)}",
        hint=f"remove them (git -C {forge.rel(src)} status --ignored), or commit them as a "
        "patch and `dgr-forge export`; build output belongs in the lane's build directory",
        details={"tree": str(src), "changes": changes},
    )


def _worker_at(spec: worker.WorkerSpec) -> bool:
    """A git worker checkout is there, at its commit, clean (a deleted one is fetched
    again, an edited one refused by the build)."""
    src = spec.source_dir
    if not (src / ".git").exists() or gitutil.rev_parse(src, "HEAD") != spec.commit:
        return False
    return not _changes(src)


class BuildContext:
    """What every lane of one `build` shares: inputs, host, key, the patched tree."""

    def __init__(
        self, forge: Forge, m: UpstreamManifest, out: Reporter, opts: BuildOptions, doctor: Doctor
    ) -> None:
        self.forge, self.m, self.out, self.opts, self.doctor = forge, m, out, opts, doctor
        self.signing = SigningKey(opts.key, opts.sign, out)
        self.patched: PatchedTree | None = None
        # of the manifest bytes `m` was parsed from: build() sets it from before the parse
        self.manifest_sha256 = sha256_file(m.path)
        self.cache: cache_session.CacheSession | None = None  # the build's cache session

    def ensure_patched(self, spec: worker.WorkerSpec | None) -> PatchedTree:
        if self.patched is None:
            if spec is not None:
                opts = self.opts
                worker.ensure_worker(
                    spec, self.out, offline=opts.offline, force=opts.force, forge=self.forge
                )
            from dgr_forge.upstream.patches import ensure_patched  # not on the no-op path

            self.patched = ensure_patched(
                self.forge, self.m, self.out, mirror=self.opts.mirror, offline=self.opts.offline
            )
            refuse_unclean(self.patched.src_dir, "upstream", self.forge)
            if spec is not None and spec.url is not None:
                refuse_unclean(spec.source_dir, "worker", self.forge)
        return self.patched


class LaneBuilder:
    """One lane: configure (when its inputs changed), compile, collect (report)."""

    def __init__(self, ctx: BuildContext, plan: LanePlan) -> None:
        self.ctx, self.plan = ctx, plan
        self.forge, self.m, self.out = ctx.forge, ctx.m, ctx.out
        self.state = lane_state(self.forge, plan.lane)
        # every input file, read once here (under the workspace lock, before configure)
        self.snap = inputs.snapshot(self.forge, self.m, plan, self.state.input_stamps)
        # the switches found at the configured head: right while the tree is still there
        self.switches = tuple(self.state.launcher_switches)
        self.given = tuple(self.state.build_info)
        self.args = configure_args(self.forge, self.m, plan, self.switches, self.given)
        self.digest = inputs_digest(self.forge, self.m, plan, self.args, self.snap)
        self.result = LaneResult(
            lane=plan.lane,
            status="failed",
            log=str(plan.log_link),
            build_dir=str(plan.build_dir),
            cache=plan.cache.record(),
        )
        self.started = datetime.now(UTC)
        self.t0 = time.monotonic()
        self.head = ""
        self.epoch = 0
        self.log_path = plan.log_link
        self.lines: list[str] = []
        self.programs: Future[dict[str, Any]] | None = None

    # -- decisions

    def _configured(self) -> bool:
        st, plan = self.state, self.plan
        up = plan.upstream_dir
        return bool(
            st.inputs_digest == self.digest
            and (plan.build_dir / "CMakeCache.txt").is_file()
            and (plan.build_dir / "build.ninja").is_file()
            and st.head_commit
            and st.source_date_epoch is not None
            and (up / ".git").exists()
            and gitutil.rev_parse(up, "HEAD") == st.head_commit
            # edits or untracked files: ensure_patched decides (it refuses); a report
            # must never claim the patched tree while Ninja compiles something else
            and not _changes(up)
            and not (plan.spec and plan.spec.url and not _worker_at(plan.spec))
        )

    def _key_matches(self, last: LastBuild) -> str | None:
        """The key's fingerprint when the last report was signed by the key asked for
        now (or unsigned when --no-sign is asked), else None. A bad key raises (exit 2)."""
        signing = self.ctx.signing
        fp = signing.fingerprint()
        if fp is not None and fp == last.signer_fingerprint:
            return fp
        keyid = signing.keyid()  # the full load: refuses a missing or garbage key
        return fp if keyid == last.signed_by and fp is not None else None

    # -- the run

    def run(self) -> LaneResult:
        plan, ctx, st = self.plan, self.ctx, self.state
        truth.refuse_moved_inputs(self.forge, plan, self.m, self.snap, ctx.manifest_sha256)
        if st.in_progress == "wipe":  # a removal a kill cut short: finish it first
            self._wipe()
        swapped = programs.changed(st.programs) if st.programs else []
        if swapped:
            # never objects of two compilers in one binary: configure and build it all again
            shown = ", ".join(f"{n} ({st.programs[n]['path']})" for n in swapped)
            self.out.warn(f"{plan.lane}: changed since configure: {shown}; full rebuild")
            self._wipe()
        up_to_date = self._configured()
        last = st.last_build if st.last_build and st.last_build.result == "ok" else None
        interrupted = st.in_progress is not None
        fp: str | None = None
        if up_to_date and last and not interrupted:
            fp = self._key_matches(last)
        else:
            ctx.signing.signer()  # a bad key refuses before anything is built
        if not up_to_date:
            t = time.monotonic()
            patched = ctx.ensure_patched(plan.spec)
            self.result.patched = patched.changed
            self.result.timings["patch"] = time.monotonic() - t
            self.head = patched.head_commit
            self.epoch = source_date_epoch(plan.upstream_dir, self.m.commit)
            # recipes mean what they say, on the tree about to be configured
            options.refuse_undeclared(self.forge, plan.recipe, plan.upstream_dir, self.m.commit)
            given = options.taken_as_given(plan.upstream_dir)
            if "LLAMA_BUILD_NUMBER" in given and self.m.build_number is None:
                raise _unknown_build_number(self.forge, self.m)
            self._pin_switches(launcher_switches(plan.upstream_dir), given)
        else:
            self.head = str(st.head_commit)
            self.epoch = int(st.source_date_epoch or 0)
        changed = truth.changed_subjects(last) if up_to_date else []
        for path in changed:
            # restore truth: Ninja relinks what is missing, whatever touched it
            self.out.warn(f"{plan.lane}: {self.forge.rel(path)} changed on disk; rebuilding it")
            path.unlink(missing_ok=True)
        self.result.rebuilt = [str(p) for p in changed]

        st.in_progress = "configure" if not up_to_date else "build"
        save_lane_state(self.forge, plan.lane, st)
        self.log_path = logs.new_log(plan.logs_dir, plan.lane)
        self.result.log_file = str(self.log_path)
        env = self._env()
        with self.log_path.open("w", encoding="utf-8") as log:
            logs.point_link(plan.log_link, self.log_path)
            if not up_to_date and not self.configure(log, env):
                return self.result
            no_work = self.compile(log, env)
            if no_work is None:
                return self.result
            self._take_programs()
            whole = self._whole()
            if no_work and not (last is not None and last.input_digest == whole):
                # inputs Ninja cannot see changed (an edit with an old mtime, a state
                # lost): what it has is of unknown inputs, so build it all again
                self.out.warn(
                    f"{plan.lane}: inputs changed but Ninja found nothing to do "
                    "(a file with an old mtime?); fresh build directory"
                )
                self._wipe()
                env = self._env()
                if not self.configure(log, env) or self.compile(log, env) is None:
                    return self.result
                self._take_programs()
                no_work, whole = False, self._whole()
        fault.point("build.linked", plan.lane)
        truth.refuse_changed_during(
            self.forge, plan, self.snap, self.state.programs, self._mark_failed
        )

        reuse = (
            up_to_date
            and no_work
            and last is not None
            and last.input_digest == whole
            and not interrupted
            and not changed
            and fp is not None
            and truth.report_true(last)
        )
        if reuse and last is not None:
            return self._reuse(last)
        return self.collect(changed, whole)

    def _take_programs(self) -> None:
        """The programs configure resolved, hashed meanwhile (`programs.start`)."""
        if self.programs is not None:
            self.state.programs, self.programs = self.programs.result(), None
            save_lane_state(self.forge, self.plan.lane, self.state)

    def _whole(self) -> str:
        spec = self.plan.spec
        return inputs.whole_digest(
            self.digest,
            self.snap,
            self.head,
            spec.commit if spec is not None and spec.url else None,
            self.state.programs,
        )

    def _wipe(self) -> None:
        """A fresh build directory: nothing of what configure or Ninja kept survives. The
        state says so first (`in_progress = "wipe"`): a run killed halfway through the
        removal leaves objects Ninja would take for current, so the next run removes the
        rest before anything else."""
        st = self.state
        st.inputs_digest, st.programs, st.in_progress = None, {}, "wipe"
        save_lane_state(self.forge, self.plan.lane, st)
        fault.point("build.wipe", self.plan.lane)
        shutil.rmtree(self.plan.build_dir, ignore_errors=True)
        st.in_progress = None
        save_lane_state(self.forge, self.plan.lane, st)

    def _pin_switches(self, switches: tuple[str, ...], given: tuple[str, ...]) -> None:
        """Arguments and digest for the tree about to be configured."""
        self.switches, self.given = switches, given
        self.args = configure_args(self.forge, self.m, self.plan, switches, given)
        self.digest = inputs_digest(self.forge, self.m, self.plan, self.args, self.snap)

    def _view_commits(self) -> list[str]:
        spec = self.plan.spec
        return [self.m.commit, *([spec.commit] if spec and spec.url and spec.commit else [])]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        gitview.apply(env, gitview.write_view(self.plan.build_dir, self._view_commits()))
        env.update(self.plan.cache.env)
        if self.ctx.cache is not None:  # this lane's own cache counters start here
            statslog = self.plan.logs_dir / f"ccache-stats-{self.plan.lane}.log"
            env.update(self.ctx.cache.begin(statslog))
        env["SOURCE_DATE_EPOCH"] = str(self.epoch)
        env["NINJA_STATUS"] = "[%f/%t] "
        env.setdefault("CLICOLOR_FORCE", "0")
        return env

    def configure(self, log: IO[str], env: dict[str, str]) -> bool:
        plan, lane = self.plan, self.plan.lane
        shown = "worker " + mask(plan.spec.location) if plan.spec else self.m.name
        self.out.step(f"{lane}: configure ({shown})")
        t = time.monotonic()
        from dgr_forge.lanes import cmake_api

        cmake_api.write_query(plan.build_dir)
        full = self.cmake_command()
        if (plan.build_dir / "CMakeCache.txt").exists():
            full.insert(1, "--fresh")  # inputs changed: no stale cache entries survive
        code, lines = logs.run_logged(full, log, env)
        self.result.timings["configure"] = time.monotonic() - t
        self.result.configured = True
        st = self.state
        st.inputs_digest = None
        if code != 0:
            return self.fail("configure", lines)
        unused = self._recipe_unused(options.unused_variables(lines))
        if unused:
            self._mark_failed("configure")  # not configured: the next run re-checks
            raise BadInput(
                f"{lane}: CMake did not use recipe option(s) {', '.join(unused)}: "
                "the project never reads them, so they would change nothing",
                hint=f"remove them from {self.forge.rel(plan.recipe.path)}, or fix their names",
                details={"lane": lane, "unused": unused, "log": str(self.log_path)},
            )
        truth.check_launchers(self.plan, self._mark_failed)
        # hashed while Ninja runs; stamps shared through the forge's cache directory
        self.programs = programs.start(plan.build_dir, plan.launcher, _program_stamps(self.forge))
        st.inputs_digest = self.digest
        st.launcher_switches = list(self.switches)
        st.build_info = list(self.given)
        st.head_commit = self.head
        st.source_date_epoch = self.epoch
        st.configured_at = datetime.now(UTC).isoformat()
        save_lane_state(self.forge, lane, st)
        return True

    def cmake_command(self) -> list[str]:
        """The configure command: the plan's arguments, and the upstream head a worker
        project is built against."""
        head = [f"-DDGR_UPSTREAM_HEAD={self.head}"] if self.plan.spec else []
        return [self.plan.cmake, *self.args, *head]

    def _recipe_unused(self, names: list[str]) -> list[str]:
        """The recipe's own options CMake did not use. A variable the forge set itself
        (CMAKE_C_FLAGS on a project without C, the toolchain's settings) is not the
        user's to act on: CMake's list stays in the log, no warning is printed."""
        own = set(self.plan.recipe.cmake_options)
        return [n for n in names if n in own]

    def compile(self, log: IO[str], env: dict[str, str]) -> bool | None:
        """Run Ninja; True when it had no work, None when it failed."""
        plan, lane = self.plan, self.plan.lane
        self.out.step(f"{lane}: build")
        t = time.monotonic()
        cmd = [plan.ninja, "-C", str(plan.build_dir)]
        if self.ctx.opts.jobs:
            cmd += ["-j", str(self.ctx.opts.jobs)]
        cmd += list(plan.recipe.targets)
        steps = [0]
        with self.out.progress() as sink:
            task = sink.add(f"{lane}: compile", total=None)

            def on_line(line: str) -> None:
                match = NINJA_STATUS.match(line)
                if match:
                    done, total = int(match.group(1)), int(match.group(2))
                    steps[0] = done
                    sink.update(task, done, total, f"{lane}: {match.group(3)[:60]}")

            code, lines = logs.run_logged(cmd, log, env, on_line)
        self.result.timings["build"] = time.monotonic() - t
        if self.ctx.cache is not None:  # what the cache did in this build, for the report
            figures = self.ctx.cache.figures()
            self.result.cache = {**self.plan.cache.record(), **figures}
            if figures:
                self.out.info(f"{lane}: {cache_session.describe(self.result.cache)}")
        self.result.ninja_steps = steps[0]
        if code != 0:
            self.fail("build", lines)
            return None
        return any(line.strip() == NO_WORK for line in lines)

    def _reuse(self, last: LastBuild) -> LaneResult:
        r, st = self.result, self.state
        r.status, r.report, r.report_reused = "up-to-date", last.report, True
        r.artifacts = list(last.artifacts)
        st.in_progress = None
        self._settle()
        save_lane_state(self.forge, self.plan.lane, st)
        shown = self.forge.rel(Path(str(last.report)))
        self.out.answer(f"{self.plan.lane}: up to date (report {shown})")
        logs.prune(self.plan.logs_dir, self.plan.lane, keep={last.log_file, str(self.log_path)})
        r.timings["total"] = time.monotonic() - self.t0
        return r

    def _settle(self) -> None:
        """Keep the stamps (re-taken: a settled stamp makes the next no-op cheap)."""
        self.state.input_stamps = stamps.restamp(self.snap)
        programs.refresh(self.state.programs)

    def collect(self, changed: list[Path], whole: str) -> LaneResult:
        from dgr_forge.lanes import cmake_api

        plan, lane, r = self.plan, self.plan.lane, self.result
        t = time.monotonic()
        reply = cmake_api.read_reply(plan.build_dir)
        artifacts, stats = collect_artifacts(reply, plan.recipe.targets)
        gone = [p for p in changed if not p.is_file()]
        if gone:
            self._mark_failed("report")
            raise OperationFailed(
                f"{lane}: {', '.join(self.forge.rel(p) for p in gone)} changed on disk and "
                "Ninja did not rebuild it: no report can say what it is",
                hint=f"delete {self.forge.rel(plan.build_dir)} and build again",
                details={"lane": lane, "artifacts": [str(p) for p in gone]},
            )
        run = BuildRun(
            forge=self.forge,
            m=self.m,
            plan=plan,
            doctor=self.ctx.doctor,
            head=self.head,
            cmake_args=self.cmake_command(),
            epoch=self.epoch,
            log_path=self.log_path,
            started=self.started,
            cache=self.result.cache,
            snap=self.snap,
            programs=self.state.programs,
            launcher=truth.check_launchers(self.plan, self._mark_failed),
        )
        record = make_record(run, reply, artifacts)
        from dgr_forge.attest import reports

        signer = self.ctx.signing.signer()
        why = self.ctx.signing.unsigned_reason()
        report = reports.write_report(self.forge, record, signer, self.out, unsigned_reason=why)
        r.timings["report"] = time.monotonic() - t
        r.status, r.report = "built", str(report)
        r.artifacts = [
            {"name": a.name, "kind": a.kind, "path": str(a.path), "sha256": a.sha256}
            for a in artifacts
        ]
        st = self.state
        st.in_progress = None
        st.last_build = LastBuild(
            time=record.finished_on.isoformat(),
            result="ok",
            log=str(plan.log_link),
            log_file=str(self.log_path),
            report=str(report),
            report_sha256=sha256_file(report),
            signed_by=signer.keyid if signer else None,
            signer_fingerprint=self.ctx.signing.fingerprint(),
            artifacts=r.artifacts,
            subject_stats=stats,
            input_digest=whole,
            inputs=inputs.report_inputs(self.m, plan.recipe, plan.spec),
            byproducts={
                str(p): sha256_file(p) for p in (record.log_file, record.cmake_cache) if p.is_file()
            },
        )
        self._settle()
        save_lane_state(self.forge, lane, st)
        logs.prune(plan.logs_dir, lane, keep={str(self.log_path)})
        for a in artifacts:
            self.out.answer(
                f"  {a.kind.lower():15} {self.forge.rel(a.path)}  sha256:{a.sha256[:16]}"
            )
        self.out.answer(f"{lane}: built; report {self.forge.rel(report)}")
        r.timings["total"] = time.monotonic() - self.t0
        return r

    def _mark_failed(self, phase: str) -> None:
        st = self.state
        previous = st.last_build
        st.last_build = LastBuild(
            time=datetime.now(UTC).isoformat(),
            result="failed",
            phase=phase,
            log=str(self.plan.log_link),
            log_file=str(self.log_path),
            report=previous.report if previous else None,
            inputs=previous.inputs if previous else None,  # the kept report's inputs
        )
        st.in_progress = None
        save_lane_state(self.forge, self.plan.lane, st)

    def fail(self, phase: str, lines: list[str]) -> bool:
        r = self.result
        r.status = "failed"
        r.error_lines = error_lines(lines)
        self.out.error(f"{self.plan.lane}: {phase} failed")
        for line in r.error_lines:
            self.out.info(f"  {line}")
        self.out.info(f"full log: {self.plan.log_link}")
        self._mark_failed(phase)
        r.timings["total"] = time.monotonic() - self.t0
        return False


def _unknown_build_number(forge: Forge, m: UpstreamManifest) -> BadInput:
    return BadInput(
        f"{forge.rel(m.path)}: [upstream] build_number is missing, and upstream {m.name} "
        f"compiles its build number in (LLAMA_BUILD_NUMBER): the binaries would claim the "
        "count of this workspace's history instead of the upstream's",
        hint="run `dgr-forge fetch` with network access (or --mirror a full clone) to count "
        f"and record it, or set it to `git rev-list --count {m.commit}` of a full clone",
        details={"file": forge.rel(m.path), "key": "upstream.build_number"},
    )


def _program_stamps(forge: Forge) -> Path | None:
    """Where program stamps are kept between builds: `<DGR_CACHE_DIR or <workspace>/cache>/
    programs` (a cache: an unusable place keeps none, the build hashes again)."""
    try:
        base = cache_mod.cache_dir(os.environ, forge.workspace)
    except BadInput:
        return None
    return base / "programs" if base is not None else None


# ----------------------------------------------------------------------------- the command


def build(
    forge: Forge,
    out: Reporter,
    opts: BuildOptions,
    m: UpstreamManifest,
    recipes: dict[str, Recipe],
    doctor: Doctor,
    spec: worker.WorkerSpec | None,
) -> BuildResult:
    """Build each lane `opts` asks for. The caller (the command context) holds the
    workspace lock, refused during a rebase, and loaded the manifest, recipes, host probes
    and worker under it: what is built is what is signed."""
    selected = select(recipes, list(opts.lanes))

    # Everything that can refuse does so here, before the workspace is touched.
    refuse_unbuildable([doctor.check_lane(r) for r in selected])
    for name in ("cmake", "ninja"):
        if not doctor.tool(name).found:
            refuse_unbuildable(
                [
                    LaneCheck(r.name, r.backend, False, [doctor.tool(name)], True, r.host_os)
                    for r in selected
                ]
            )
    cache = cache_mod.select(
        doctor,
        opts.cache,
        opts.cache_mode,
        workspace=forge.workspace,
        root=forge.root,
        worker=spec.source_dir if spec is not None and spec.url is None else None,
    )
    if m.build_number is None:
        # the upstream's own version at the pin, once, where the history is (issue 29)
        from dgr_forge.core.lock import root_lock
        from dgr_forge.upstream import build_number

        with root_lock(forge, out):  # a manifest write, as export's
            m = build_number.record(forge, m, None if opts.offline else opts.mirror or m.url, out)
    plans = [plan_lane(forge, m, r, doctor, spec, cache) for r in selected]

    results: list[LaneResult] = []
    # the workspace exists now (the caller holds its lock): the base directories (and the
    # sccache server's socket) of a first build are those of every later one
    ctx = BuildContext(forge, m, out, opts, doctor)  # the manifest digest: as loaded, locked
    with cache_session.open_cache_session(cache, os.environ, out) as session:
        ctx.cache = session
        for plan in plans:
            builder = LaneBuilder(ctx, plan)
            results.append(builder.result)
            builder.run()
            if builder.result.status == "failed":
                break
    return BuildResult(
        upstream={"name": m.name, "commit": m.commit, "series_digest": m.series_digest},
        worker=mask(spec.location) if spec else None,
        lanes=results,
    )
