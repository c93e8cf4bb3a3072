"""`dgr-forge build`: CMake + Ninja builds of the shard worker (or the upstream) per lane;
everything that can refuse does so before the workspace is touched."""

from __future__ import annotations

import os
from typing import Annotated

from msgspec import UNSET, Struct, UnsetType

from dgr_forge.cache import select as cache_mod
from dgr_forge.cache import session as cache_session
from dgr_forge.core.forge import Forge
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import COMMIT, Form, d
from dgr_forge.core.urls import mask
from dgr_forge.host import worker
from dgr_forge.host.doctor import Doctor, LaneCheck
from dgr_forge.host.recipes import Recipe, select
from dgr_forge.lanes.lane_build import BuildContext, BuildOptions, LaneBuilder, LaneResult
from dgr_forge.lanes.plan import plan_lane, refuse_unbuildable, refuse_unbuildable_tree
from dgr_forge.lanes.signing import SigningKey
from dgr_forge.upstream.manifest import UpstreamManifest


class BuildUpstream(Struct, kw_only=True):
    """what was built"""

    name: Annotated[str, d("the upstream's name")]
    commit: Annotated[str, COMMIT]
    series_digest: Annotated[str, d("sha256 over the series")]


class BuildResult(Form, kw_only=True):
    """`build`'s result (its `--json` object)."""

    title = "build"
    may_fail = True
    note = (
        "exit 1 when a lane's build failed; a git worker checkout holding edits or commits of "
        "your own that a move would lose is exit 3 with `worker`, `dirty`, `local_commits` "
        "(`--force` saves them under logs/ first); a lane that cannot build here is exit 2 with "
        "`lanes` (`doctor` rows); a launcher in the generated rules other than the forge's "
        "choice, or an input file or program changed during the build, is exit 1 with "
        "`changed` (the paths) or `compile`/`link`/`code_check`/`chosen` (the launchers found, "
        "the one chosen), and no report; an ignored, untracked or modified file in the "
        "upstream or git-worker tree is exit 3 with `changes`; a worker that reads an upstream "
        "file outside the boundary or imports an upstream symbol no boundary header declares "
        "fails its lane (exit 1, no report) with the lane's `leaks`"
    )

    upstream: BuildUpstream
    worker: Annotated[str | None, d("the worker project")]
    lanes: Annotated[list[LaneResult], d("per lane")]
    error: Annotated[str | UnsetType, d("a failed lane's build: which, and its log")] = UNSET

    @property
    def failed(self) -> LaneResult | None:
        return next((r for r in self.lanes if r.status == "failed"), None)


def build(
    forge: Forge,
    out: Reporter,
    opts: BuildOptions,
    m: UpstreamManifest,
    recipes: dict[str, Recipe],
    doctor: Doctor,
    spec: worker.WorkerSpec | None,
) -> BuildResult:
    """The caller loaded every input under the workspace lock: what is built is signed."""
    selected = select(recipes, list(opts.lanes))
    refuse_unbuildable_tree(forge, spec)
    refuse_unbuildable([doctor.check_lane(r) for r in selected])
    for t in (doctor.tool("cmake"), doctor.tool("ninja")):
        if not t.found:
            refuse_unbuildable(
                [
                    LaneCheck(r.name, r.lane.backend, False, [t], True, r.lane.host_os)
                    for r in selected
                ]
            )
    tree = worker.path_tree(spec)
    cache = cache_mod.select(
        doctor, opts.cache, opts.cache_mode, workspace=forge.workspace, root=forge.root, worker=tree
    )
    plans = [plan_lane(forge, m, r, doctor, spec, cache) for r in selected]
    signing = SigningKey(opts.key, opts.sign, out)
    after_fetch: list[str] = []  # said once the upstream fetch got through (issue 44)
    if m.build_number is None:
        # a bad key is refused before the count's fetch and the manifest write
        signing.signer()
        # the upstream's own version at the pin, once, where the history is (issue 29)
        from dgr_forge.core.lock import root_lock
        from dgr_forge.upstream import build_number

        with root_lock(forge.root, out):  # a manifest write, as export's
            url = None if opts.offline else opts.mirror or m.url
            m = build_number.record(forge, m, url, out, deferred=after_fetch)

    results: list[LaneResult] = []
    # the workspace exists now: a first build's base directories are every later one's
    ctx = BuildContext(forge, m, out, opts, doctor, signing, after_fetch)  # the manifest: as loaded
    with cache_session.open_cache_session(cache, os.environ, out) as session:
        ctx.cache = session
        for plan in plans:
            builder = LaneBuilder(ctx, plan)
            results.append(builder.result)
            builder.run()
            if builder.result.status == "failed":
                break
    for r in results:
        r.timings = {k: round(v, 3) for k, v in r.timings.items()}
    failed = next((r for r in results if r.status == "failed"), None)
    return BuildResult(
        upstream=BuildUpstream(name=m.name, commit=m.commit, series_digest=m.series_digest),
        worker=mask(spec.location) if spec else None,
        lanes=results,
        error=f"{failed.lane} lane build failed; log: {failed.log}" if failed else UNSET,
    )
