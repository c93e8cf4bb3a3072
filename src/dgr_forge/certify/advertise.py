"""What `lanes` shows: every recipe, whether this host can build it, its last build, its
certification; a lane is advertised while one of its checked records is
(`records.entries`). (The CI matrix, one job per recipe, is `ci.render.matrix`.)"""

from __future__ import annotations

from typing import Any

import msgspec

from dgr_forge.attest.keys import PublicKey
from dgr_forge.certify import records
from dgr_forge.certify.trust import CERT_DIR
from dgr_forge.core.forge import Forge
from dgr_forge.host.doctor import Doctor
from dgr_forge.host.recipes import Recipe
from dgr_forge.host.worker import WorkerSpec
from dgr_forge.lanes.inputs import report_inputs, staleness, tool_versions, worker_identity
from dgr_forge.lanes.state import lane_states
from dgr_forge.upstream.manifest import UpstreamManifest


def overview(
    forge: Forge,
    m: UpstreamManifest,
    recipes: dict[str, Recipe],
    doctor: Doctor,
    trusted: list[PublicKey] | None = None,
    spec: WorkerSpec | None = None,
) -> list[dict[str, Any]]:
    # the host's tool versions, asked only of lanes that have a certification to check
    tools = tool_versions(
        doctor,
        {n: r for n, r in recipes.items() if (forge.root / CERT_DIR / n).is_dir()},
    )
    runs = records.entries(forge, recipes, m, trusted, worker_identity(spec), tools)
    state = lane_states(forge)
    rows: list[dict[str, Any]] = []
    for name, recipe in recipes.items():
        check = doctor.check_lane(recipe)
        entry = state.get(name)
        last = entry.state.last_build if entry is not None else None  # this workspace's
        mine = [e for e in runs if e.lane == name and e.kind == "checked"]
        atts = [e for e in runs if e.lane == name and e.kind == "attested"]
        valid = [e for e in atts if e.reason == "attested, not checked"]
        attested = next(iter(valid or atts), None)
        certified = any(e.advertised for e in mine)
        reason = (
            "certified"
            if certified
            else "attested, not checked"
            if attested is not None and attested.reason == "attested, not checked"
            else next((e.reason for e in mine), attested.reason if attested else "none")
        )
        rows.append(
            {
                "lane": name,
                "backend": recipe.backend,
                "host_os": list(recipe.host_os),
                "buildable": check.buildable,
                # the same rows (and one-line summary) as `doctor`'s lanes
                "missing": msgspec.to_builtins(check.missing),
                "summary": check.summary,
                "last_build": (
                    {
                        "time": last.time,
                        "result": last.result,
                        "report": last.report,
                        "log": last.log,
                        **staleness(last.inputs, report_inputs(m, recipe, spec)),
                    }
                    if last
                    else None
                ),
                "certified": certified,
                "certification": {
                    "reason": reason,
                    "attested": attested.reason if attested else "none",
                    "record": msgspec.to_builtins(attested) if attested else None,
                },
                "certifications": msgspec.to_builtins(mine),
            }
        )
    return rows
