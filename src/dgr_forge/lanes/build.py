"""`dgr-forge build`: CMake + Ninja builds of the shard worker (or the upstream) per lane.

For each lane: refuse before creating anything when the host lacks what the recipe
needs; otherwise plan the lane (`lanes.plan`), then `LaneBuilder` observes what is there
(`observe`), decides what to do (`lanes.decision`: reuse, compile, reconfigure, rebuild,
refuse, with the reason) and runs the steps the decision asks for (`lanes.steps`:
configure with a CMake File API query, compile with Ninja, collect artifacts through the
File API reply, sign the report), recording each transition of the lane's state in
`<workspace>/state.json` once.

Incremental, but never at the cost of truth: a digest of everything configure depends on
is kept per lane. When it matches (and the patched tree is where we left it, with
nothing untracked or modified), fetch, patch and configure are skipped and only Ninja
runs, and not even Ninja when the lane's whole input is the last report's. The last
report is handed back only when its whole input is this build's, the last build
completed, every subject still re-hashes to its digest (after whatever Ninja ran), every
byproduct too, and it was signed by the key asked for now; a changed artifact is removed
so Ninja rebuilds it (the report handed back when it is the same bytes again).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from dgr_forge.cache import select as cache_mod
from dgr_forge.cache import session as cache_session
from dgr_forge.core.forge import Forge
from dgr_forge.core.output import Reporter
from dgr_forge.core.urls import mask
from dgr_forge.host import worker
from dgr_forge.host.doctor import Doctor, LaneCheck
from dgr_forge.host.recipes import Recipe, select
from dgr_forge.lanes.build_options import BuildOptions
from dgr_forge.lanes.lane_build import BuildContext, LaneBuilder, LaneResult
from dgr_forge.lanes.plan import (
    plan_lane,
    refuse_unbuildable,
)
from dgr_forge.lanes.signing import SigningKey
from dgr_forge.upstream.manifest import UpstreamManifest

if TYPE_CHECKING:
    pass


class BuildResult(Struct):
    upstream: dict[str, Any]
    worker: str | None
    lanes: list[LaneResult]

    @property
    def failed(self) -> LaneResult | None:
        return next((r for r in self.lanes if r.status == "failed"), None)


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
    plans = [plan_lane(forge, m, r, doctor, spec, cache) for r in selected]
    signing = SigningKey(opts.key, opts.sign, out)
    after_fetch: list[str] = []  # said once the upstream fetch got through (issue 44)
    if m.build_number is None:
        # bad input is refused before the count's fetch and the manifest write: the key
        # is loaded now (a no-op build, whose number is recorded, never pays for it)
        signing.signer()
        # the upstream's own version at the pin, once, where the history is (issue 29)
        from dgr_forge.core.lock import root_lock
        from dgr_forge.upstream import build_number

        with root_lock(forge, out):  # a manifest write, as export's
            url = None if opts.offline else opts.mirror or m.url
            m = build_number.record(forge, m, url, out, deferred=after_fetch)

    results: list[LaneResult] = []
    # the workspace exists now (the caller holds its lock): the base directories (and the
    # sccache server's socket) of a first build are those of every later one
    ctx = BuildContext(forge, m, out, opts, doctor, signing)  # the manifest digest: as loaded
    ctx.after_fetch = after_fetch
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
