"""The `--json` forms of lanes and builds: build, lanes, doctor, presets."""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, UnsetType

from dgr_forge.certify.shapes import Entry
from dgr_forge.cli.results.base import (
    Form,
    Nested,
    Strs,
    d,
)
from dgr_forge.host.doctor import ProbeResult
from dgr_forge.lanes.status import BuildShown

# --- lanes and builds -------------------------------------------------------------------------


class LaneCertification(Nested, kw_only=True):
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


class LaneRow(Nested, kw_only=True):
    """a lane"""

    lane: Annotated[str, d("the lane")]
    backend: Annotated[str, d("the recipe's backend")]
    host_os: Annotated[Strs, d("the OSes it builds on")]
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
    title = "lanes [--advertised]"

    lanes: Annotated[list[LaneRow], d("per lane")]
    advertised: Annotated[Strs | UnsetType, d("with `--advertised`: the lanes of `entries`")] = (
        UNSET
    )
    entries: Annotated[
        list[Entry] | UnsetType,
        d("with `--advertised`: the (lane, model, hardware class) entries advertised"),
    ] = UNSET
