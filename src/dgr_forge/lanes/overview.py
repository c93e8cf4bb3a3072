"""What `lanes` shows: every recipe, whether this host can build it, its last build, its
certification. (The CI matrix, one job per recipe, is `ci.render.matrix`.)"""

from __future__ import annotations

from typing import Any

from dgr_forge.attest import checked
from dgr_forge.attest.certify import CERT_DIR, cert_path, certification_status
from dgr_forge.attest.keys import PublicKey
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
        {
            n: r
            for n, r in recipes.items()
            if cert_path(forge, n).is_file() or (forge.root / CERT_DIR / n).is_dir()
        },
    )
    bound_worker = worker_identity(spec)
    certs = certification_status(forge, recipes, m, trusted, bound_worker, tools)
    runs = checked.entries(forge, recipes, m, trusted, bound_worker, tools)
    state = lane_states(forge)
    rows: list[dict[str, Any]] = []
    for name, recipe in recipes.items():
        check = doctor.check_lane(recipe)
        entry = state.get(name)
        last = entry.state.last_build if entry is not None else None  # this workspace's
        mine = [e for e in runs if e.lane == name]
        certified = any(e.advertised for e in mine)
        attested = certs[name]
        reason = (
            "certified"
            if certified
            else "attested, not checked"
            if attested.certified
            else next((e.reason for e in mine), attested.reason)
        )
        rows.append(
            {
                "lane": name,
                "backend": recipe.backend,
                "host_os": list(recipe.host_os),
                "buildable": check.buildable,
                # the same rows (and one-line summary) as `doctor`'s lanes
                "missing": [probe.as_dict() for probe in check.missing],
                "summary": check.summary(),
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
                    "attested": attested.reason,
                    "record": (c.as_dict() if (c := attested.certification) else None),
                },
                "certifications": [e.as_dict(forge) for e in mine],
            }
        )
    return rows
