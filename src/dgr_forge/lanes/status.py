"""What `status` shows of the lanes (the same rows `lanes` gives), and its result."""

from __future__ import annotations

import contextlib
import re
from typing import Annotated

import msgspec
from msgspec import UNSET, Struct, UnsetType

from dgr_forge.core.errors import ForgeError
from dgr_forge.core.forge import Forge
from dgr_forge.core.structs import Form, d
from dgr_forge.lanes.inputs import MOVABLE, ReportInputs, report_inputs
from dgr_forge.lanes.state import Artifact, LastBuild, lane_states
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.status import RebaseProgress, SeriesStatus, UpstreamStatus


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
    def of(last: LastBuild, current: ReportInputs, *, full: bool = False) -> BuildShown:
        """`last` as `lanes` shows it (`full`: as `status` does, with its artifacts); a build
        that recorded no inputs (an older forge) cannot be shown current: everything moved."""
        was = last.inputs
        return BuildShown(
            time=last.time,
            result=last.result,
            report=last.report,
            log=last.log,
            phase=last.phase if full and last.phase is not None else UNSET,
            artifacts=list(last.artifacts) if full else UNSET,
            stale=[k for k in MOVABLE if was is None or getattr(was, k) != getattr(current, k)],
            inputs_recorded=was is not None,
        )

    def line(self) -> str:
        """The result as `status` and `lanes` print it."""
        if not self.inputs_recorded:
            return f"{self.result}, stale (inputs not recorded: rebuild to record them)"
        return (
            f"{self.result}, stale ({', '.join(self.stale)} moved)" if self.stale else self.result
        )


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
    """Lanes built here and their last build, each with whether its state is elsewhere's."""
    from dgr_forge.host import worker
    from dgr_forge.host.recipes import load

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
            # the lane's recipe as it is now; none when gone or unreadable (then stale by it)
            path, recipe = forge.recipes_dir / f"{name}.toml", None
            if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) and path.is_file():
                with contextlib.suppress(ForgeError):
                    recipe = load(path, forge.rel(path), root=forge.root)
            current = report_inputs(m, recipe, spec)
            if not worker_known:
                current = msgspec.structs.replace(current, worker="(unreadable)")
            last = BuildShown.of(recorded, current, full=True)
        rows.append((LaneLastBuild(lane=name, last_build=last), entry.elsewhere))
    return rows
