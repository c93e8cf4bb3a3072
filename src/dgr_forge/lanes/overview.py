"""What `lanes` and `status` show of the lanes: every recipe, whether this host can build
it, its last build, its certification; `status`'s whole result (`Status`). (The CI
matrix, one job per recipe, is `ci.render.matrix`.) Certification is imported by
`overview` alone: a no-op `status` does without it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

from msgspec import UNSET, Struct, UnsetType, convert

from dgr_forge.core.errors import ForgeError
from dgr_forge.core.forge import Forge
from dgr_forge.core.structs import Form, d
from dgr_forge.lanes.inputs import (
    report_inputs,
    staleness,
    tool_versions,
    with_stale,
    worker_identity,
)
from dgr_forge.lanes.state import Artifact, LastBuild, lane_states
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.status import RebaseProgress, SeriesStatus, UpstreamStatus

if TYPE_CHECKING:
    from dgr_forge.attest.keys import PublicKey
    from dgr_forge.host.doctor import Doctor
    from dgr_forge.host.recipes import Recipe
    from dgr_forge.host.worker import WorkerSpec


class BuildShown(Struct, kw_only=True):
    """the lane's last build in this workspace (null: never built here)"""

    time: Annotated[str, d("when it finished (ISO 8601, UTC)")]
    result: Annotated[str, d("`ok` or `failed`")]
    report: Annotated[str | None, d("the signed report's path (null without one)")]
    log: Annotated[str, d("the `build-<lane>.log` link")]
    phase: Annotated[str | UnsetType, d("`status` only: where a failed build stopped")] = UNSET
    artifacts: Annotated[list[Artifact] | UnsetType, d("`status` only: the artifacts it made")] = (
        UNSET
    )
    stale: Annotated[
        list[str],
        d(
            "what moved since this build's report was made: `pin`, `series`, `recipe`, "
            "`worker` (empty: it is current; a build recorded by an older forge: all)"
        ),
    ]
    inputs_recorded: Annotated[
        bool,
        d(
            "false when the build was recorded by an older forge, with no inputs to compare: "
            "stale until rebuilt, whatever moved (with `stale`)"
        ),
    ]

    @staticmethod
    def of(last: LastBuild, current: dict[str, Any], *, full: bool = False) -> BuildShown:
        """`last` as `lanes` shows it (`full`: as `status` does, with its artifacts)."""
        moved = staleness(last.inputs, current)
        return BuildShown(
            time=last.time,
            result=last.result,
            report=last.report,
            log=last.log,
            phase=last.phase if full and last.phase is not None else UNSET,
            artifacts=convert(last.artifacts, list[Artifact]) if full else UNSET,
            stale=moved["stale"],
            inputs_recorded=moved["inputs_recorded"],
        )

    def line(self) -> str:
        return with_stale({"result": self.result, "stale": self.stale,
                           "inputs_recorded": self.inputs_recorded})  # fmt: skip


class LaneLastBuild(Struct, kw_only=True):
    """a lane built in this workspace"""

    lane: Annotated[str, d("the lane")]
    last_build: BuildShown | None


class Status(Form, kw_only=True):
    """`status`'s result (its `--json` object)."""

    title = "status"

    upstream: UpstreamStatus
    patches: SeriesStatus
    lanes: Annotated[
        list[LaneLastBuild],
        d(
            "lanes built in this workspace, by name: the same `{lane, last_build}` rows "
            "`lanes` gives"
        ),
    ]
    rebase_in_progress: Annotated[bool, d("a rebase is in progress")]
    rebase: RebaseProgress | None


def built_lanes(forge: Forge, m: UpstreamManifest) -> list[tuple[LaneLastBuild, bool]]:
    """Lanes built in this workspace and their last build (from the build state), each
    with whether its state names another workspace's files (then it has no last build
    here). `stale` names what moved (pin, series, recipe, worker) since the last report."""
    from dgr_forge.host import worker

    entries = lane_states(forge)
    spec, worker_known = None, True
    if entries:
        try:
            spec = worker.resolve(forge, None)
        except ForgeError:
            worker_known = False
    rows = []
    for name, entry in entries.items():
        recorded = entry.state.last_build  # this workspace's paths, or None
        last = None
        if recorded is not None:
            current = report_inputs(m, _current_recipe(forge, name), spec)
            if not worker_known:
                current["worker"] = "(unreadable)"  # never what a build recorded
            last = BuildShown.of(recorded, current, full=True)
        rows.append((LaneLastBuild(lane=name, last_build=last), entry.elsewhere))
    return rows


def _current_recipe(forge: Forge, lane: str) -> Recipe | None:
    """The lane's recipe as it is now; None when it is gone or unreadable (status still
    answers: the last build is then stale by its recipe)."""
    from dgr_forge.host.recipes import load

    path = forge.recipes_dir / f"{lane}.toml"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", lane) or not path.is_file():
        return None
    try:
        return load(path, forge.rel(path))
    except ForgeError:
        return None


def overview(
    forge: Forge,
    m: UpstreamManifest,
    recipes: dict[str, Recipe],
    doctor: Doctor,
    trusted: list[PublicKey] | None = None,
    spec: WorkerSpec | None = None,
) -> list[dict[str, Any]]:
    from dgr_forge.attest import checked
    from dgr_forge.attest.certify import CERT_DIR, cert_path, certification_status

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
