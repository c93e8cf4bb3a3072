"""`dgr-forge build`: CMake + Ninja builds of the shard worker (or the upstream) per lane.

For each lane: refuse before creating anything when the host lacks what the recipe
needs; otherwise make sure the upstream is patched, configure with Ninja (a CMake File
API query first), build, find artifacts through the File API reply, hash them and hand a
`LaneBuild` to the report writer.

Incremental: a digest of everything configure depends on is kept per lane in
`<workspace>/state.json`. When it matches (and the patched tree is where we left it),
fetch, patch and configure are skipped and only Ninja runs; when Ninja then has no work,
the last report is reused (nothing is re-signed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dgr_forge import __version__
from dgr_forge.attest.records import Artifact, LaneBuild, PatchInput, Tool
from dgr_forge.core import gitutil
from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_json, sha256_file, write_json
from dgr_forge.core.lock import workspace_lock
from dgr_forge.core.output import Reporter
from dgr_forge.lanes import cmake_api, worker
from dgr_forge.lanes.doctor import Doctor, LaneCheck, load_probes
from dgr_forge.lanes.recipes import Recipe, load_all, select
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.manifest import load as load_manifest
from dgr_forge.upstream.workspace import refuse_during_rebase

if TYPE_CHECKING:
    from dgr_forge.upstream.patches import PatchedTree

STATE_SCHEMA = 1
NINJA_STATUS = re.compile(r"^\[(\d+)/(\d+)\]\s*(.*)$")
NO_WORK = "ninja: no work to do."
# extra compiler probes a lane's language needs passed to CMake explicitly, so CMake
# uses exactly the binary `doctor` found
COMPILER_VARS = {"nvcc": "CMAKE_CUDA_COMPILER", "hip-clang": "CMAKE_HIP_COMPILER"}


@dataclass
class BuildOptions:
    lanes: list[str] = field(default_factory=list)
    worker: Path | None = None
    jobs: int | None = None
    key: str | None = None
    sign: bool = True
    mirror: str | None = None
    offline: bool = False


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
    log: str = ""
    build_dir: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    error_lines: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "lane": self.lane,
            "status": self.status,
            "configured": self.configured,
            "patched": self.patched,
            "ninja_steps": self.ninja_steps,
            "artifacts": self.artifacts,
            "report": self.report,
            "report_reused": self.report_reused,
            "log": self.log,
            "build_dir": self.build_dir,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
            **({"error_lines": self.error_lines} if self.error_lines else {}),
        }


# ----------------------------------------------------------------------------- state.json


def load_state(forge: Forge) -> dict[str, Any]:
    """The per-lane build state (never authoritative: a missing or bad file is empty)."""
    try:
        data = read_json(forge.state_file)
    except (OSError, ValueError):
        return {"schema": STATE_SCHEMA, "lanes": {}}
    if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
        return {"schema": STATE_SCHEMA, "lanes": {}}
    data.setdefault("lanes", {})
    return data


def save_lane_state(forge: Forge, lane: str, entry: dict[str, Any]) -> None:
    state = load_state(forge)  # re-read: another lane of this run may have written
    state["lanes"][lane] = entry
    write_json(forge.state_file, state)


# ----------------------------------------------------------------------------- reports


def write_report(
    forge: Forge, record: LaneBuild, key: str | None, sign: bool, out: Reporter
) -> Path:
    # imported here: a no-op rebuild never signs, so it never pays for the crypto imports
    from dgr_forge.attest import keys, reports

    signer = keys.resolve_signer(key, out) if sign else None
    return reports.write_report(forge, record, signer, out)


# ----------------------------------------------------------------------------- planning


@dataclass
class LanePlan:
    recipe: Recipe
    toolchain_file: Path | None
    build_dir: Path
    log_file: Path
    cmake: str
    ninja: str
    launcher: str | None
    compiler_args: list[str]  # -DCMAKE_CUDA_COMPILER=... from probes
    # every tool the recipe requires, where this host has it: a compiler that moved
    # (a new gcc on PATH) must reconfigure, CMake would keep the cached one
    tool_paths: dict[str, str] = field(default_factory=dict)


def toolchain_file(forge: Forge, recipe: Recipe) -> Path | None:
    if recipe.toolchain is None:
        return None
    path = forge.toolchains_dir / f"{recipe.toolchain}.cmake"
    if not path.is_file():
        raise BadInput(
            f"{forge.rel(recipe.path)}: lane.toolchain: {forge.rel(path)} does not exist",
            hint="name a toolchain file in toolchains/ (gcc, clang, cuda, rocm)",
            details={"file": forge.rel(recipe.path), "key": "lane.toolchain"},
        )
    return path


def refuse_unbuildable(checks: list[LaneCheck]) -> None:
    """Exit 2 naming everything missing, before anything is created."""
    bad = [c for c in checks if not c.buildable]
    if not bad:
        return
    lines = []
    for check in bad:
        lines.append(f"{check.lane} lane cannot build on this host: {check.summary()}")
        lines += [f"  {line}" for line in check.reasons()]
    raise BadInput(
        "\n".join(lines),
        hint="install what is listed (see `dgr-forge doctor`), or build another --lane",
        details={"lanes": {c.lane: c.as_dict() for c in bad}},
    )


def configure_args(
    forge: Forge,
    m: UpstreamManifest,
    plan: LanePlan,
    spec: worker.WorkerSpec | None,
    upstream_dir: Path,
) -> list[str]:
    """Everything after `cmake` for configure, minus the per-run DGR_UPSTREAM_HEAD."""
    source = spec.source_dir if spec else upstream_dir
    args = ["-G", "Ninja", "-S", str(source), "-B", str(plan.build_dir)]
    args.append(f"-DCMAKE_MAKE_PROGRAM={plan.ninja}")
    if plan.toolchain_file:
        args.append(f"-DCMAKE_TOOLCHAIN_FILE={plan.toolchain_file}")
    args.append("-DCMAKE_EXPORT_COMPILE_COMMANDS=ON")
    if plan.launcher:
        languages = ["C", "CXX"]
        if "GGML_CUDA" in plan.recipe.cmake_options:
            languages.append("CUDA")
        if "GGML_HIP" in plan.recipe.cmake_options:
            languages.append("HIP")
        args += [f"-DCMAKE_{lang}_COMPILER_LAUNCHER={plan.launcher}" for lang in languages]
    args += plan.compiler_args
    args += plan.recipe.cmake_args()
    if spec is not None:
        args += [
            f"-DDGR_UPSTREAM_SOURCE_DIR={upstream_dir}",
            f"-DCMAKE_MODULE_PATH={forge.cmake_dir}",
            f"-DDGR_LANE={plan.recipe.name}",
            f"-DDGR_UPSTREAM_NAME={m.name}",
            f"-DDGR_UPSTREAM_COMMIT={m.commit}",
            f"-DDGR_SERIES_DIGEST={m.series_digest}",
            f"-DDGR_PATCH_COUNT={len(m.series)}",
            f"-DDGR_FORGE_VERSION={__version__}",
        ]
    return args


def _file_digest(path: Path | None) -> str | None:
    return sha256_file(path) if path and path.is_file() else None


def inputs_digest(
    forge: Forge,
    m: UpstreamManifest,
    plan: LanePlan,
    spec: worker.WorkerSpec | None,
    args: list[str],
) -> str:
    """Everything configure depends on; a change means reconfigure (worker *sources* are
    Ninja's business, only the worker's identity counts here)."""
    modules = sorted(forge.cmake_dir.glob("*.cmake")) if forge.cmake_dir.is_dir() else []
    data = {
        "forge": __version__,
        "manifest": _file_digest(m.path),
        "series": m.series_digest,
        "recipe": plan.recipe.sha256,
        "toolchain": _file_digest(plan.toolchain_file),
        "cmake_modules": {p.name: sha256_file(p) for p in modules},
        "worker": spec.identity if spec else None,
        "cmake": plan.cmake,
        "tools": plan.tool_paths,
        "args": args,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


# ----------------------------------------------------------------------------- running


def _run_logged(
    cmd: list[str],
    log: Any,
    env: dict[str, str],
    on_line: Callable[[str], None] | None = None,
) -> tuple[int, list[str]]:
    """Run, teeing stdout+stderr into the log; returns (exit code, all lines)."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    lines: list[str] = []
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        text=True,
        errors="replace",
        bufsize=1,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        stripped = line.rstrip("\n")
        lines.append(stripped)
        if on_line:
            on_line(stripped)
    code = proc.wait()
    log.flush()
    return code, lines


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


# ----------------------------------------------------------------------------- the command


def build(forge: Forge, out: Reporter, opts: BuildOptions) -> dict[str, Any]:
    m = load_manifest(forge.upstream_manifest, forge.root)
    recipes = load_all(forge.recipes_dir, forge.root)
    selected = select(recipes, opts.lanes or ["cpu"])
    if opts.jobs is not None and opts.jobs < 1:
        raise BadInput(f"--jobs {opts.jobs}: must be 1 or more", hint="e.g. --jobs 2")
    doctor = Doctor(load_probes(forge.toolchains_dir / "probes.toml", "toolchains/probes.toml"))

    # Everything that can refuse does so here, before the workspace is touched.
    checks = [doctor.check_lane(r) for r in selected]
    refuse_unbuildable(checks)
    for name in ("cmake", "ninja"):
        if not doctor.tool(name).found:
            refuse_unbuildable(
                [
                    LaneCheck(r.name, r.backend, False, [doctor.tool(name)], True, r.host_os)
                    for r in selected
                ]
            )
    spec = worker.resolve(forge, opts.worker)
    launcher = doctor.launcher()
    plans = []
    for recipe in selected:
        compiler_args = [
            f"-D{var}={doctor.tool(tool).path}"
            for tool, var in COMPILER_VARS.items()
            if tool in recipe.tools
        ]
        plans.append(
            LanePlan(
                recipe=recipe,
                toolchain_file=toolchain_file(forge, recipe),
                build_dir=forge.build_dir(recipe.name),
                log_file=forge.logs_dir / f"build-{recipe.name}.log",
                cmake=str(doctor.tool("cmake").path),
                ninja=str(doctor.tool("ninja").path),
                launcher=launcher.path if launcher else None,
                compiler_args=compiler_args,
                tool_paths={t: str(doctor.tool(t).path) for t in recipe.tools},
            )
        )

    results: list[LaneResult] = []
    with workspace_lock(forge, out):
        refuse_during_rebase(forge)
        patched: PatchedTree | None = None
        upstream_dir = forge.src_dir(m.name)
        for plan in plans:
            state = load_state(forge)["lanes"].get(plan.recipe.name, {})
            args = configure_args(forge, m, plan, spec, upstream_dir)
            digest = inputs_digest(forge, m, plan, spec, args)
            up_to_date = (
                state.get("inputs_digest") == digest
                and (plan.build_dir / "CMakeCache.txt").is_file()
                and (plan.build_dir / "build.ninja").is_file()
                and state.get("head_commit")
                and (upstream_dir / ".git").exists()
                and gitutil.rev_parse(upstream_dir, "HEAD") == state.get("head_commit")
                # local edits to tracked upstream files: ensure_patched decides (it refuses
                # to build them silently); a report must never claim the patched tree
                # while Ninja compiles something else
                and not gitutil.git(
                    upstream_dir, "status", "--porcelain", "--untracked-files=no"
                ).stdout.strip()
            )
            result = LaneResult(
                lane=plan.recipe.name,
                status="failed",
                log=str(plan.log_file),
                build_dir=str(plan.build_dir),
            )
            results.append(result)
            started = datetime.now(UTC)
            t0 = time.monotonic()
            if not up_to_date and patched is None:
                t = time.monotonic()
                if spec is not None:
                    worker.ensure_worker(spec, out, offline=opts.offline)
                from dgr_forge.upstream.patches import (
                    ensure_patched,  # not needed on the no-op path
                )

                patched = ensure_patched(forge, m, out, mirror=opts.mirror, offline=opts.offline)
                result.patched = patched.changed
                result.timings["patch"] = time.monotonic() - t
            head = patched.head_commit if patched else str(state.get("head_commit"))
            ok = _build_lane(
                forge,
                m,
                out,
                opts,
                plan,
                spec,
                args,
                digest,
                head,
                bool(up_to_date),
                state,
                result,
                doctor,
                started,
                t0,
            )
            if not ok:
                break
    failed = [r for r in results if r.status == "failed"]
    payload: dict[str, Any] = {
        "upstream": {"name": m.name, "commit": m.commit, "series_digest": m.series_digest},
        "worker": spec.location if spec else None,
        "lanes": [r.as_dict() for r in results],
    }
    if failed:
        payload["exit_code"] = 1
        payload["error"] = f"{failed[0].lane} lane build failed; log: {failed[0].log}"
    return payload


def _build_lane(
    forge: Forge,
    m: UpstreamManifest,
    out: Reporter,
    opts: BuildOptions,
    plan: LanePlan,
    spec: worker.WorkerSpec | None,
    args: list[str],
    digest: str,
    head: str,
    up_to_date: bool,
    state: dict[str, Any],
    result: LaneResult,
    doctor: Doctor,
    started: datetime,
    t0: float,
) -> bool:
    lane = plan.recipe.name
    upstream_dir = forge.src_dir(m.name)
    env = dict(os.environ)
    env["SOURCE_DATE_EPOCH"] = str(
        state.get("source_date_epoch") if up_to_date else source_date_epoch(upstream_dir, m.commit)
    )
    env["NINJA_STATUS"] = "[%f/%t] "
    env.setdefault("CLICOLOR_FORCE", "0")
    plan.log_file.parent.mkdir(parents=True, exist_ok=True)
    entry: dict[str, Any] = dict(state)
    with plan.log_file.open("w", encoding="utf-8") as log:
        if not up_to_date:
            out.step(f"{lane}: configure ({'worker ' + spec.location if spec else m.name})")
            t = time.monotonic()
            cmake_api.write_query(plan.build_dir)
            full = (
                [plan.cmake, *args, f"-DDGR_UPSTREAM_HEAD={head}"] if spec else [plan.cmake, *args]
            )
            if (plan.build_dir / "CMakeCache.txt").exists():
                full.insert(1, "--fresh")  # inputs changed: no stale cache entries survive
            code, lines = _run_logged(full, log, env)
            result.timings["configure"] = time.monotonic() - t
            result.configured = True
            if code != 0:
                entry.pop("inputs_digest", None)
                return _fail(forge, out, plan, result, lines, entry, started, "configure")
            entry.update(
                inputs_digest=digest,
                head_commit=head,
                source_date_epoch=int(env["SOURCE_DATE_EPOCH"]),
                configured_at=datetime.now(UTC).isoformat(),
            )
            save_lane_state(forge, lane, entry)

        out.step(f"{lane}: build")
        t = time.monotonic()
        cmd = [plan.ninja, "-C", str(plan.build_dir)]
        if opts.jobs:
            cmd += ["-j", str(opts.jobs)]
        cmd += list(plan.recipe.targets)
        steps = [0]
        with out.progress() as sink:
            task = sink.add(f"{lane}: compile", total=None)

            def on_line(line: str) -> None:
                match = NINJA_STATUS.match(line)
                if match:
                    done, total = int(match.group(1)), int(match.group(2))
                    steps[0] = done
                    sink.update(task, done, total, f"{lane}: {match.group(3)[:60]}")

            code, lines = _run_logged(cmd, log, env, on_line)
        result.timings["build"] = time.monotonic() - t
        result.ninja_steps = steps[0]
        if code != 0:
            return _fail(forge, out, plan, result, lines, entry, started, "build")
        no_work = any(line.strip() == NO_WORK for line in lines)

    last = entry.get("last_build") or {}
    reuse = (
        up_to_date
        and no_work
        and last.get("result") == "ok"
        and last.get("report")
        and Path(last["report"]).is_file()
    )
    if reuse:
        result.status = "up-to-date"
        result.report = last["report"]
        result.report_reused = True
        result.artifacts = list(last.get("artifacts", []))
        out.info(f"{lane}: up to date (report {forge.rel(Path(last['report']))})")
        result.timings["total"] = time.monotonic() - t0
        return True

    t = time.monotonic()
    reply = cmake_api.read_reply(plan.build_dir)
    found = cmake_api.shipped_artifacts(reply, plan.recipe.targets)
    artifacts = [
        Artifact(name=target.name, kind=target.kind, path=path, sha256=sha256_file(path))
        for target, path in found
    ]
    record = LaneBuild(
        lane=lane,
        recipe_file=forge.rel(plan.recipe.path),
        recipe_sha256=plan.recipe.sha256,
        manifest_file=forge.rel(m.path),
        manifest_sha256=sha256_file(m.path),
        upstream_name=m.name,
        upstream_url=m.url,
        upstream_commit=m.commit,
        upstream_tree=m.tree or gitutil.tree_of(upstream_dir, m.commit),
        patches=[
            PatchInput(file=f"{m.patches_dir_rel}/{e.file}", sha256=e.sha256) for e in m.series
        ],
        series_digest=m.series_digest,
        result_tree=gitutil.tree_of(upstream_dir, head),
        worker=worker.describe(spec) if spec else None,
        tools=_tools(reply, doctor, plan),
        cmake_args=[plan.cmake, *args, *([f"-DDGR_UPSTREAM_HEAD={head}"] if spec else [])],
        compiler_launcher=plan.launcher,
        source_date_epoch=int(env["SOURCE_DATE_EPOCH"]),
        build_dir=plan.build_dir,
        log_file=plan.log_file,
        cmake_cache=plan.build_dir / "CMakeCache.txt",
        started_on=started,
        finished_on=datetime.now(UTC),
        artifacts=artifacts,
    )
    report = write_report(forge, record, opts.key, opts.sign, out)
    result.timings["report"] = time.monotonic() - t
    result.status = "built"
    result.report = str(report)
    result.artifacts = [
        {"name": a.name, "kind": a.kind, "path": str(a.path), "sha256": a.sha256} for a in artifacts
    ]
    entry["last_build"] = {
        "time": record.finished_on.isoformat(),
        "result": "ok",
        "report": str(report),
        "log": str(plan.log_file),
        "artifacts": result.artifacts,
    }
    save_lane_state(forge, lane, entry)
    for a in artifacts:
        out.info(f"  {a.kind.lower():15} {forge.rel(a.path)}  sha256:{a.sha256[:16]}")
    out.info(f"{lane}: built; report {forge.rel(report)}")
    result.timings["total"] = time.monotonic() - t0
    return True


def _fail(
    forge: Forge,
    out: Reporter,
    plan: LanePlan,
    result: LaneResult,
    lines: list[str],
    entry: dict[str, Any],
    started: datetime,
    phase: str,
) -> bool:
    lane = plan.recipe.name
    result.status = "failed"
    result.error_lines = error_lines(lines)
    out.error(f"{lane}: {phase} failed")
    for line in result.error_lines:
        out.info(f"  {line}")
    out.info(f"full log: {plan.log_file}")
    entry["last_build"] = {
        **(entry.get("last_build") or {}),
        "time": datetime.now(UTC).isoformat(),
        "result": "failed",
        "phase": phase,
        "log": str(plan.log_file),
    }
    save_lane_state(forge, lane, entry)
    return False


def _tools(reply: cmake_api.Reply, doctor: Doctor, plan: LanePlan) -> list[Tool]:
    """Toolchain versions: compilers from the File API, the rest from the probes."""
    tools = [Tool("cmake", plan.cmake, reply.cmake_version)]
    tools.append(Tool("ninja", plan.ninja, doctor.version("ninja") or ""))
    for comp in reply.compilers:
        tools.append(
            Tool(
                f"{comp.language.lower()}-compiler", comp.path, f"{comp.id} {comp.version}".strip()
            )
        )
    known = {t.path for t in tools}
    for name in plan.recipe.tools:
        probe = doctor.tool(name)
        if probe.path and probe.path not in known and name not in ("cmake", "ninja"):
            tools.append(Tool(name, probe.path, doctor.version(name) or ""))
    if plan.launcher:
        name = Path(plan.launcher).name
        tools.append(Tool(name, plan.launcher, doctor.version(name) or ""))
    return tools
