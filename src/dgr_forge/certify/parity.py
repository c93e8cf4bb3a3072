"""A `parity` step's reference: the lane's program built from the pin without the series,
by the same recipe and the lane's own machinery on another tree, so a rebuild is cheap. The
pin's tree is exported through a scratch index, never the real one, and kept while git
finds it still the pin's.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from dgr_forge.cache import select as cache_mod
from dgr_forge.cache import session as cache_session
from dgr_forge.certify.run import Program
from dgr_forge.certify.shapes import StepProgram
from dgr_forge.core import gitutil
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_bytes, sha256_file
from dgr_forge.core.output import Reporter
from dgr_forge.host.doctor import Doctor
from dgr_forge.host.recipes import Recipe, Suite
from dgr_forge.lanes import cmake_api, logs, steps
from dgr_forge.lanes.lane_build import BuildOptions
from dgr_forge.lanes.plan import configure_args, plan_lane
from dgr_forge.lanes.state import lane_state
from dgr_forge.upstream.manifest import UpstreamManifest


def _read(stamp: Path) -> str | None:
    try:
        return stamp.read_text()
    except OSError:
        return None


def pin_tree(forge: Forge, m: UpstreamManifest, top: Path) -> Path:
    """The pin's tree in `top/src`: kept when git finds every file the pin's (against the
    scratch index of its export), nothing added (ignored files too); else exported afresh."""
    src, stamp, repo = top / "src", top / "commit", forge.src_dir(m.name)
    env = {"GIT_INDEX_FILE": str(top / "index"), "GIT_WORK_TREE": str(src)}
    kept = _read(stamp) == m.commit and src.is_dir()
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
    log_path = logs.new_log(forge.logs_dir, f"{lane}-pin")
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
        if not (plan.build_dir / "build.ninja").is_file() or _read(done) != digest:
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
