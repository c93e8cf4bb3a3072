"""What `lanes` shows: every recipe, whether this host can build it, its last build, its
certification; a lane is advertised while one of its checked records is
(`records.entries`). (The CI matrix, one job per recipe, is `ci.render.matrix`.)"""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, Struct, UnsetType, to_builtins

from dgr_forge.attest.keys import PublicKey
from dgr_forge.certify import records
from dgr_forge.certify.shapes import Entry
from dgr_forge.certify.trust import CERT_DIR
from dgr_forge.core.forge import Forge
from dgr_forge.core.structs import Form, d
from dgr_forge.host.doctor import Doctor, ProbeResult
from dgr_forge.host.recipes import Recipe
from dgr_forge.host.worker import WorkerSpec
from dgr_forge.lanes.inputs import report_inputs, tool_versions, worker_identity
from dgr_forge.lanes.state import lane_states
from dgr_forge.lanes.status import BuildShown
from dgr_forge.upstream.manifest import UpstreamManifest


class LaneCertification(Struct, kw_only=True):
    """the lane's certification status"""

    reason: Annotated[
        str,
        d(
            "`certified`, `attested, not checked` for a valid record of a person's evidence, "
            "or why not: `none`, `untrusted: ...`, `lapsed: ...`: recipe, pin, series, "
            "toolchain file, `cmake/` modules, worker, the host's tool versions, the model "
            "manifest"
        ),
    ]
    attested: Annotated[str, d("the `--attested` record's own status")]
    record: Annotated[Entry | None, d("that record (null: none)")]


class LaneRow(Struct, kw_only=True):
    """a lane"""

    lane: Annotated[str, d("the lane")]
    backend: Annotated[str, d("the recipe's backend")]
    host_os: Annotated[list[str], d("the OSes it builds on")]
    buildable: Annotated[bool, d("it can build on this host")]
    missing: Annotated[list[ProbeResult], d("what is missing (the same rows as `doctor`'s)")]
    summary: Annotated[str, d("one line: `buildable`, or what is missing")]
    last_build: BuildShown | None
    certified: Annotated[
        bool,
        d(
            "a certification the forge ran (`certify --lane`), signed by a trusted key and "
            "matching every input"
        ),
    ]
    certification: LaneCertification
    certifications: Annotated[list[Entry], d("the lane's checked records")]


class Lanes(Form, kw_only=True):
    """`lanes`' result."""

    title = "lanes [--advertised]"

    lanes: Annotated[list[LaneRow], d("per lane")]
    advertised: Annotated[
        list[str] | UnsetType, d("with `--advertised`: the lanes of `entries`")
    ] = UNSET
    entries: Annotated[
        list[Entry] | UnsetType,
        d("with `--advertised`: the (lane, model, hardware class) entries advertised"),
    ] = UNSET


def overview(
    forge: Forge,
    m: UpstreamManifest,
    recipes: dict[str, Recipe],
    doctor: Doctor,
    trusted: list[PublicKey] | None = None,
    spec: WorkerSpec | None = None,
    *,
    advertised: bool = False,
) -> Lanes:
    # the host's tool versions, asked only of lanes that have a certification to check
    tools = tool_versions(
        doctor, {n: r for n, r in recipes.items() if (forge.root / CERT_DIR / n).is_dir()}
    )
    runs = records.entries(forge, recipes, m, trusted, to_builtins(worker_identity(spec)), tools)
    state = lane_states(forge)
    rows: list[LaneRow] = []
    for name, recipe in recipes.items():
        check = doctor.check_lane(recipe)
        entry = state.get(name)
        last = entry.state.last_build if entry is not None else None  # this workspace's
        mine = [e for e in runs if e.lane == name and e.kind == "checked"]
        atts = [e for e in runs if e.lane == name and e.kind == "attested"]
        valid = [e for e in atts if e.reason == "attested, not checked"]
        attested = next(iter(valid or atts), None)
        certified = any(e.advertised for e in mine)
        reason = next((e.reason for e in mine), attested.reason if attested else "none")
        reason = "certified" if certified else "attested, not checked" if valid else reason
        rows.append(
            LaneRow(
                lane=name,
                backend=recipe.lane.backend,
                host_os=list(recipe.lane.host_os),
                buildable=check.buildable,
                # the same rows (and one-line summary) as `doctor`'s lanes
                missing=list(check.missing),
                summary=check.summary,
                last_build=(BuildShown.of(last, report_inputs(m, recipe, spec)) if last else None),
                certified=certified,
                certification=LaneCertification(
                    reason=reason, attested=attested.reason if attested else "none", record=attested
                ),
                certifications=mine,
            )
        )
    if not advertised:
        return Lanes(lanes=rows)
    rows = [r for r in rows if r.certified]
    entries = [e for r in rows for e in r.certifications if e.advertised]
    return Lanes(lanes=rows, advertised=sorted({e.lane for e in entries}), entries=entries)
