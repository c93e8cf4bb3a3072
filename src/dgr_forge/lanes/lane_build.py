"""One lane of a `build`: observe, decide (`lanes.decision`), run the steps (`lanes.steps`).

Each transition of the lane's state is written to state.json once; a refusal in a phase
records the lane failed in that phase."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

import msgspec
from msgspec import UNSET, Struct, UnsetType, field

from dgr_forge.cache import select as cache_mod
from dgr_forge.cache import session as cache_session
from dgr_forge.cache.select import Cache
from dgr_forge.core import fault, gitutil
from dgr_forge.core.errors import BadInput, ForgeError, NeedsHuman
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_bytes, sha256_file
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import d
from dgr_forge.core.urls import mask
from dgr_forge.host import cudakit, worker
from dgr_forge.host.doctor import Doctor
from dgr_forge.lanes import boundary, decision, inputs, logs, programs, stamps
from dgr_forge.lanes.boundary import Leaks
from dgr_forge.lanes.plan import LanePlan, configure_args, inputs_digest, launcher_switches
from dgr_forge.lanes.signing import SigningKey
from dgr_forge.lanes.state import Artifact, LaneState, LastBuild, lane_state, save_lane_state
from dgr_forge.upstream.manifest import UpstreamManifest, read_raw
from dgr_forge.upstream.workspace import source_changes

# steps, collect and cmake_options (~3 ms): imported where a build runs them, past the no-op
if TYPE_CHECKING:
    from concurrent.futures import Future  # ~3 ms: the pool is lanes.programs', on a rebuild

    from dgr_forge.lanes.steps import Ran
    from dgr_forge.upstream.patches import PatchedTree


class LaneResult(Struct, kw_only=True):
    """a lane's build"""

    lane: Annotated[str, d("the lane")]
    status: Annotated[str, d("`built`, `up-to-date` or `failed`")]
    configured: Annotated[bool, d("CMake configured this run")] = False
    patched: Annotated[bool, d("the series was applied this run")] = False
    ninja_steps: Annotated[int, d("Ninja steps run")] = 0
    artifacts: Annotated[list[Artifact], d("the artifacts, hashed")] = field(default_factory=list)
    report: Annotated[str | None, d("the signed report")] = None
    report_reused: Annotated[
        bool,
        d(
            "an earlier report was kept: only when the lane's whole input digest (input "
            "files, patched tree, worker, programs, by content) is the one recorded with that "
            "report"
        ),
    ] = False
    log: Annotated[str, d("the `build-<lane>.log` link")] = ""
    log_file: Annotated[str, d("this build's own log")] = ""
    build_dir: Annotated[str, d("the lane's build directory")] = ""
    cache: Cache
    timings: Annotated[dict[str, float], d("seconds per phase")] = field(default_factory=dict)
    rebuilt: Annotated[
        list[str] | UnsetType, d("artifacts found changed on disk and rebuilt (only when any)")
    ] = UNSET
    error_lines: Annotated[
        list[str] | UnsetType, d("a failed build's first error lines (only when failed)")
    ] = UNSET
    leaks: Annotated[
        Leaks | UnsetType, d("what crossed the worker boundary (only when the lane failed so)")
    ] = UNSET


def refuse_unclean(src: Path, what: str, forge: Forge) -> None:
    """Exit 3: the tree built must be exactly the tree pinned (nothing untracked either)."""
    # under the workspace lock git keeps its index's stat records fresh for the next no-op
    if not (changes := source_changes(src)):
        return
    shown = [c[3:] for c in changes[:10]] + (["..."] if len(changes) > 10 else [])
    raise NeedsHuman(
        f"{forge.rel(src)}: the {what} tree has modified, untracked or ignored files, which a "
        f"build could compile while the report claims the pinned tree: {', '.join(shown)}",
        hint=f"remove them (git -C {forge.rel(src)} status --ignored), or commit them as a "
        "patch and `dgr-forge export`; build output belongs in the lane's build directory",
        details={"tree": str(src), "changes": changes},
    )


class BuildOptions(Struct, frozen=True):
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
        cls, *, cache: str | None = None, cache_mode: str | None = None, **given: Any
    ) -> BuildOptions:
        """`given`: the other fields; a bad value is exit 2 naming its option or variable."""
        if (jobs := given.get("jobs")) is not None and not 1 <= jobs <= 4096:
            raise BadInput(f"--jobs {jobs}: must be 1 to 4096", hint="e.g. --jobs 2")
        choice = cache or os.environ.get("DGR_CACHE") or "auto"
        mode = cache_mode or os.environ.get("DGR_CACHE_MODE") or "rw"
        cache_mod.check_choice(
            choice,
            mode,
            "--cache" if cache is not None else "DGR_CACHE",
            "--cache-mode" if cache_mode is not None else "DGR_CACHE_MODE",
        )
        given["lanes"] = tuple(given.get("lanes") or ("cpu",))
        return cls(cache=choice, cache_mode=mode, **given)


@dataclass
class BuildContext:
    """What every lane of one `build` shares: inputs, host, key, the patched tree."""

    forge: Forge
    m: UpstreamManifest
    out: Reporter
    opts: BuildOptions
    doctor: Doctor
    signing: SigningKey
    after_fetch: list[str]  # warnings that only make sense once fetched
    patched: PatchedTree | None = None
    cache: cache_session.CacheSession | None = None  # the build's cache session

    def __post_init__(self) -> None:
        # the manifest's bytes when the build starts (under the lock, after any build-number
        # record); each lane's snapshot must hold the same (`_observe`)
        self.manifest_sha256 = sha256_bytes(read_raw(self.m.path))  # bounded, as loaded

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
            for warning in self.after_fetch:
                self.out.warn(warning)
            self.after_fetch = []
            refuse_unclean(self.patched.src_dir, "upstream", self.forge)
            if spec is not None and spec.url is not None:
                refuse_unclean(spec.source_dir, "worker", self.forge)
        return self.patched


class LaneBuilder:
    def __init__(self, ctx: BuildContext, plan: LanePlan) -> None:
        self.ctx, self.plan = ctx, plan
        self.forge, self.m, self.out = ctx.forge, ctx.m, ctx.out
        self.state = lane_state(self.forge, plan.lane)
        # every input file, read once here (under the workspace lock, before configure)
        self.snap = inputs.snapshot(self.forge, self.m, plan, self.state.input_stamps)
        # the switches found at the configured head: right while the tree is still there
        st = self.state
        head, epoch = str(st.head_commit), int(st.source_date_epoch or 0)
        switches, given = tuple(st.launcher_switches), tuple(st.build_info)
        self.conf = self._configuration(head, epoch, switches, given)
        log, build_dir, cache = str(plan.log_link), str(plan.build_dir), Cache.of(plan.cache)
        self.result = LaneResult(
            lane=plan.lane, status="failed", log=log, build_dir=build_dir, cache=cache
        )
        self.started = datetime.now(UTC)
        self.t0 = time.monotonic()
        self.log_path = plan.log_link  # this build's own log, once it has one
        self.hashing: Future[dict[str, programs.Program]] | None = None  # while Ninja runs

    def _configuration(
        self, head: str, epoch: int, switches: tuple[str, ...], given: tuple[str, ...]
    ) -> decision.Configuration:
        args = configure_args(self.forge, self.m, self.plan, switches, given)
        digest = inputs_digest(self.forge, self.m, self.plan, args, self.snap)
        return decision.Configuration(head, epoch, switches, given, args, digest)

    def _record(self, state: LaneState) -> None:
        self.state = state
        save_lane_state(self.forge, self.plan.lane, state)

    @contextmanager
    def _failing(self, phase: str) -> Iterator[None]:
        """A refusal in `phase` records the lane failed there (the next run re-checks)."""
        try:
            yield
        except ForgeError:
            self._record_failed(phase)
            raise

    def _observe(self) -> decision.Snapshot:
        """What `decision.decide` reads; artifacts hashed, the key loaded only if it can tell."""
        ctx, plan, state = self.ctx, self.plan, self.state
        up, spec = plan.upstream_dir, plan.spec
        head = gitutil.rev_parse(up, "HEAD") if (up / ".git").exists() else None
        worker_at = not (spec and spec.url) or (
            (spec.source_dir / ".git").exists()
            and gitutil.rev_parse(spec.source_dir, "HEAD") == spec.commit
            and not source_changes(spec.source_dir)
        )
        # the recipe and manifest this run parsed, unless the bytes stamped under the lock
        parsed = ((plan.recipe.path, plan.recipe.sha256), (ctx.m.path, ctx.manifest_sha256))
        moved = [p for p, sha in parsed if stamps.digest_of(self.snap, p) != sha]
        now = decision.Snapshot(
            configure_digest=self.conf.digest,
            build_files=all(
                (plan.build_dir / n).is_file() for n in ("CMakeCache.txt", "build.ninja")
            ),
            upstream_head=head,
            upstream_clean=head is not None
            and head == state.head_commit
            and not source_changes(up),
            worker_at=worker_at,
            moved=tuple(str(p) for p in moved),
            programs_changed=tuple(programs.changed(state.programs)) if state.programs else (),
        )
        if (last := decision.last_ok(state)) is None:
            return now
        if decision.decide(state, now).configured:  # a configure's build relinks them anyway
            changed = tuple(str(p) for p in decision.changed_subjects(last))
            now = msgspec.structs.replace(now, subjects_changed=changed)
        # whatever runs, the last report is handed back only if signed by the key asked for
        fp = ctx.signing.fingerprint()
        signer = ctx.signing.signer() if decision.needs_key_id(state, fp) else None
        key_id = signer.keyid if signer else None
        return msgspec.structs.replace(now, key_fingerprint=fp, key_id=key_id)

    def run(self) -> LaneResult:
        plan, ctx, lane = self.plan, self.ctx, self.plan.lane
        last = decision.last_ok(self.state)
        d = decision.decide(self.state, self._observe())
        recorded = last.input_digest if last is not None else None
        if (
            last is not None
            and decision.skips_ninja(d, recorded, self._whole())
            and decision.report_true(last)
        ):
            return self._reuse(last, ran=False)  # nothing moved: nothing is asked
        if d.action == "refuse":
            decision.changed_error(self.forge, lane, d.moved, decision.BEFORE_LOCK)
        if d.action == "rebuild":
            if self.state.in_progress != "wipe":  # never objects of two compilers in one binary
                progs = self.state.programs
                shown = ", ".join(f"{n} ({progs[n].path})" for n in programs.changed(progs))
                self.out.warn(f"{lane}: changed since configure: {shown}; full rebuild")
            self._wipe()
        if d.action != "reuse":
            ctx.signing.signer()  # a bad key refuses before anything is built
        if not d.configured:
            self._patch()
        rebuilt = [Path(p) for p in d.rebuilt]
        for path in rebuilt:
            # restore truth: Ninja relinks what is missing, whatever touched it
            self.out.warn(f"{lane}: {self.forge.rel(path)} changed on disk; rebuilding it")
            path.unlink(missing_ok=True)
        self.result.rebuilt = list(d.rebuilt) or UNSET

        self._record(decision.started(self.state, d))
        self.log_path = logs.new_log(plan.logs_dir, lane)
        self.result.log_file = str(self.log_path)
        with self.log_path.open("w", encoding="utf-8") as log:
            logs.point_link(plan.log_link, self.log_path)
            env = self._env()
            if not d.configured and not self._configure(log, env):
                return self.result
            if (ran := self._compile(log, env)) is None:
                return self.result
            whole = self._whole()
            same = last is not None and not decision.changed_subjects(last)
            outcome = decision.after_compile(d, ran.wrote, recorded, whole, same)
            if outcome == "rebuild":
                self.out.warn(
                    f"{lane}: inputs changed but Ninja found nothing to do "
                    "(a file with an old mtime?); fresh build directory"
                )
                self._wipe()
                env = self._env()
                if not self._configure(log, env) or self._compile(log, env) is None:
                    return self.result
                outcome, whole = "report", self._whole()
        fault.point("build.linked", lane)
        with self._failing("build"):  # no report for inputs or programs changed meanwhile
            progs = self.state.programs
            moved = stamps.changed(self.snap, worker.path_tree(plan.spec))
            moved += [progs[n].path for n in programs.changed(progs)]
            if moved:
                decision.changed_error(self.forge, lane, moved, "while the build ran")
        if outcome == "reuse" and last is not None and decision.report_true(last):
            return self._reuse(last)
        return self._collect(rebuilt, whole)

    def _patch(self) -> None:
        """The pinned, patched tree, checked, and the configuration for it."""
        plan, m = self.plan, self.m
        t = time.monotonic()
        patched = self.ctx.ensure_patched(plan.spec)
        self.result.patched = patched.changed
        self.result.timings["patch"] = time.monotonic() - t
        epoch = int(gitutil.out(plan.upstream_dir, "show", "-s", "--format=%ct", m.commit))
        from dgr_forge.host import cmake_options as options

        # recipes mean what they say, on the tree about to be configured
        options.refuse_undeclared(self.forge, plan.recipe, plan.upstream_dir, m.commit)
        given = options.taken_as_given(plan.upstream_dir)
        if "LLAMA_BUILD_NUMBER" in given and m.build_number is None:
            raise BadInput(
                f"{self.forge.rel(m.path)}: [upstream] build_number is missing, and upstream "
                f"{m.name} compiles its build number in (LLAMA_BUILD_NUMBER): the binaries "
                "would claim the count of this workspace's history instead of the upstream's",
                hint="run `dgr-forge fetch` with network access (or --mirror a full clone) to "
                f"count and record it, or set it to `git rev-list --count {m.commit}` of a full "
                "clone",
                details={"file": self.forge.rel(m.path), "key": "upstream.build_number"},
            )
        switches = launcher_switches(plan.upstream_dir)
        self.conf = self._configuration(patched.head_commit, epoch, switches, given)

    def _whole(self) -> str:
        """The lane's whole input now, with the programs hashed while Ninja ran."""
        if self.hashing is not None:
            progs, self.hashing = self.hashing.result(), None
            self._record(msgspec.structs.replace(self.state, programs=progs))
        spec, conf = self.plan.spec, self.conf
        data = {
            "configure": conf.digest,
            "files": {path: s[0] for path, s in sorted(self.snap.items())},
            "head": conf.head,
            "worker": spec.commit if spec is not None and spec.url else None,
            "programs": {name: p.stamp[0] for name, p in sorted(self.state.programs.items())},
        }
        return sha256_bytes(json.dumps(data, sort_keys=True).encode())

    def _wipe(self) -> None:
        self._record(decision.wiping(self.state))
        fault.point("build.wipe", self.plan.lane)
        shutil.rmtree(self.plan.build_dir, ignore_errors=True)
        self._record(decision.wiped(self.state))

    def _env(self) -> dict[str, str]:
        from dgr_forge.lanes import steps

        env = dict(os.environ)
        spec = self.plan.spec
        commits = [self.m.commit, *([spec.commit] if spec and spec.url and spec.commit else [])]
        steps.see_git_through(env, steps.write_git_view(self.plan.build_dir, commits))
        env.update(self.plan.cache.env)
        if self.ctx.cache is not None:  # this lane's own cache counters start here
            statslog = self.plan.logs_dir / f"ccache-stats-{self.plan.lane}.log"
            env.update(self.ctx.cache.begin(statslog))
        env.update(SOURCE_DATE_EPOCH=str(self.conf.epoch), NINJA_STATUS="[%f/%t] ")
        env.setdefault("CLICOLOR_FORCE", "0")
        return env

    def cmake_command(self) -> list[str]:
        """The plan's arguments, and the upstream head a worker project is built against."""
        head = [f"-DDGR_UPSTREAM_HEAD={self.conf.head}"] if self.plan.spec else []
        return [self.plan.cmake, *self.conf.args, *head]

    def _configure(self, log: IO[str], env: dict[str, str]) -> bool:
        from dgr_forge.lanes import steps

        plan, lane = self.plan, self.plan.lane
        shown = "worker " + mask(plan.spec.location) if plan.spec else self.m.name
        self.out.step(f"{lane}: configure ({shown})")
        if plan.cuda is not None:  # the links and the driver stub configure links against
            # the stub built by the lane's own C compiler (its recipe's tools)
            cc = next((plan.tool_paths[t] for t in ("gcc", "clang") if t in plan.tool_paths), "cc")
            with self._failing("configure"):
                cudakit.prepare(plan.cuda, cc)
        ran = steps.configure(self.cmake_command(), plan.build_dir, log, env)
        self.result.timings["configure"] = ran.seconds
        self.result.configured = True
        self.state = decision.unconfigured(self.state)  # written with the outcome
        if ran.code != 0:
            return self._fail("configure", ran.lines)
        with self._failing("configure"):  # not configured: the next run re-checks
            steps.refuse_unused(self.forge, plan, ran.lines, self.log_path)
            decision.check_launchers(plan)
        # hashed while Ninja runs; stamps shared through the forge's cache directory
        base = None
        with suppress(BadInput):
            base = cache_mod.cache_dir(os.environ, self.forge.workspace)
        host = base / "programs" if base is not None else None
        drivers = {"cmake": plan.cmake, "ninja": plan.ninja}
        self.hashing = programs.start(plan.build_dir, plan.cache.launcher, host, drivers)
        self._record(decision.configured(self.state, self.conf, datetime.now(UTC).isoformat()))
        return True

    def _compile(self, log: IO[str], env: dict[str, str]) -> Ran | None:
        """Ninja; None when it failed."""
        from dgr_forge.lanes import steps
        from dgr_forge.lanes.collect import strip_runpaths

        lane = self.plan.lane
        self.out.step(f"{lane}: build")
        # the ELF reader imported while Ninja compiles, off strip_runpaths' time
        jobs = self.ctx.opts.jobs
        ran = steps.compile_lane(self.plan, self.out, jobs, log, env, boundary.preload)
        self.result.timings["build"] = ran.seconds
        if self.ctx.cache is not None and (used := self.ctx.cache.figures()) is not None:
            self.result.cache = used
            self.out.info(f"{lane}: {cache_session.describe(used)}")
        self.result.ninja_steps = ran.steps
        if ran.code != 0:
            self._fail("build", ran.lines)
            return None
        if ran.wrote:
            with self._failing("build"):
                strip_runpaths(self.plan)
        return ran

    def _settled(self, last: LastBuild) -> None:
        """The stamps re-taken make the next no-op cheap (written only when changed)."""
        programs.refresh(self.state.programs)
        restamped = stamps.restamp(self.snap, worker.path_tree(self.plan.spec))
        settled = msgspec.structs.replace(
            self.state, last_build=last, in_progress=None, input_stamps=restamped
        )
        if settled != self.state:
            self._record(settled)

    def _reuse(self, last: LastBuild, *, ran: bool = True) -> LaneResult:
        """The last report handed back; `ran`: after Ninja (else nothing ran: no new log)."""
        r = self.result
        r.status, r.report, r.report_reused = "up-to-date", last.report, True
        if not ran:
            r.log_file = str(last.log_file or "")
        r.artifacts = list(last.artifacts)
        if last.inputs is None:
            # an older forge recorded none; the report was built from these whole inputs
            # (`input_digest` matched), so its movable inputs are today's
            now = inputs.report_inputs(self.m, self.plan.recipe, self.plan.spec)
            last = msgspec.structs.replace(last, inputs=now)
        if (fp := self.ctx.signing.fingerprint()) is not None and fp != last.signer_fingerprint:
            # handed back: the key asked for, told by its keyid; the next no-op by this
            last = msgspec.structs.replace(last, signer_fingerprint=fp)
        self._settled(last)
        if last.signed_by is None:
            self.ctx.signing.warn_unsigned()  # the report handed back is unsigned: said
        shown = self.forge.rel(Path(str(last.report)))
        self.out.answer(f"{self.plan.lane}: up to date (report {shown})")
        if ran:
            logs.prune(self.plan.logs_dir, self.plan.lane, keep={last.log_file, str(self.log_path)})
        r.timings["total"] = time.monotonic() - self.t0
        return r

    def _collect(self, changed: list[Path], whole: str) -> LaneResult:
        from dgr_forge.lanes import steps
        from dgr_forge.lanes.collect import BuildRun, make_record

        plan, lane, r, conf, ctx = self.plan, self.plan.lane, self.result, self.conf, self.ctx
        t = time.monotonic()
        with self._failing("report"):
            found = steps.collect(self.forge, plan, changed, self.out)
        with self._failing("configure"):
            launcher = decision.check_launchers(plan)
        run = BuildRun(
            forge=self.forge,
            m=self.m,
            plan=plan,
            doctor=ctx.doctor,
            head=conf.head,
            cmake_args=self.cmake_command(),
            epoch=conf.epoch,
            log_path=self.log_path,
            started=self.started,
            cache=r.cache,
            snap=self.snap,
            programs=self.state.programs,
            launcher=launcher,
        )
        surface = None
        if plan.spec is not None:  # the worker boundary, proven before anything is signed
            tb = time.monotonic()
            with self._failing("boundary"):
                checked = boundary.check(
                    plan.ninja, plan.build_dir, plan.upstream_dir, plan.spec.source_dir
                )
            r.timings["boundary"] = time.monotonic() - tb
            if not checked.ok:
                r.leaks = checked.leaks
                self._fail("boundary", checked.messages())
                return r
            surface = checked.surface
        record = make_record(run, found.reply, found.artifacts)
        record.surface = surface
        from dgr_forge.attest import reports

        signer = ctx.signing.signer()  # unsigned when so asked
        why = ctx.signing.unsigned_reason()
        report = reports.write_report(self.forge, record, signer, self.out, unsigned_reason=why)
        r.timings["report"] = time.monotonic() - t
        r.status, r.report = "built", str(report)
        r.artifacts = [
            Artifact(name=a.name, kind=a.kind, path=str(a.path), sha256=a.sha256)
            for a in found.artifacts
        ]
        # what state.json keeps of the written report: what a later no-op re-checks
        byproducts = (record.log_file, record.cmake_cache)
        last = LastBuild(
            time=record.finished_on.isoformat(),
            result="ok",
            log=str(plan.log_link),
            log_file=str(record.log_file),
            report=str(report),
            report_sha256=sha256_file(report),
            signed_by=signer.keyid if signer else None,
            signer_fingerprint=ctx.signing.fingerprint(),
            artifacts=list(r.artifacts),
            subject_stats=found.stats,
            input_digest=whole,
            inputs=inputs.report_inputs(self.m, plan.recipe, plan.spec),
            byproducts={str(p): sha256_file(p) for p in byproducts if p.is_file()},
        )
        self._settled(last)  # the state names the new report before any old one goes
        logs.prune(plan.logs_dir, lane, keep={str(self.log_path)})
        _prune_reports(self.forge, lane, report)
        for a in found.artifacts:
            shown = self.forge.rel(a.path)
            self.out.answer(f"  {a.kind.lower():15} {shown}  sha256:{a.sha256[:16]}")
        self.out.answer(f"{lane}: built; report {self.forge.rel(report)}")
        r.timings["total"] = time.monotonic() - self.t0
        return r

    def _record_failed(self, phase: str) -> None:
        at, log_file = datetime.now(UTC).isoformat(), str(self.log_path)
        log = str(self.plan.log_link)
        self._record(decision.failed(self.state, phase=phase, at=at, log=log, log_file=log_file))

    def _fail(self, phase: str, lines: list[str]) -> bool:
        from dgr_forge.lanes import steps

        r = self.result  # "failed" since it was made
        r.error_lines = errors = steps.error_lines(lines)
        self.out.error(f"{self.plan.lane}: {phase} failed")
        for line in errors:
            self.out.info(f"  {line}")
        self.out.info(f"full log: {self.plan.log_link}")
        self._record_failed(phase)
        r.timings["total"] = time.monotonic() - self.t0
        return False


def _prune_reports(forge: Forge, lane: str, report: Path) -> None:
    """The lane's old reports beyond `reports.KEEP_REPORTS`, except any a record names."""
    from dgr_forge.attest import reports  # only once a report was written

    named = reports.named_reports(forge)
    if named is not None:  # a certification unread: nothing may go
        names, digests = named
        reports.prune(forge, lane, names | {report.name}, digests)
