"""The `--json` forms of lanes and builds: build, lanes, doctor, presets."""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, UnsetType

from dgr_forge.certify.shapes import Entry
from dgr_forge.cli.results.base import (
    DoctorLane,
    Form,
    LastBuild,
    Missing,
    Nested,
    Obj,
    Strs,
    d,
)
from dgr_forge.host.toolkit import InstallResult

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
    missing: Annotated[list[Missing], d("what is missing (the same rows as `doctor`'s)")]
    summary: Annotated[str, d("one line: `buildable`, or what is missing")]
    last_build: LastBuild | None
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


class DoctorCache(Nested, kw_only=True):
    """what `build` would use now as compiler cache (from `DGR_CACHE` / `DGR_CACHE_MODE`,
    default `auto` / `rw`); never a credential: URLs are masked"""

    choice: Annotated[
        str,
        d(
            "`auto`, `ccache`, `sccache` or `off` (as asked; an unknown word is reported in "
            "`problem`)"
        ),
    ]
    tool: Annotated[str | UnsetType | None, d("`ccache` or `sccache`; null: no cache")] = UNSET
    launcher: Annotated[str | UnsetType | None, d("the launcher's file name")] = UNSET
    path: Annotated[
        str | UnsetType | None, d("where the launcher was found (absent when `problem` is set)")
    ] = UNSET
    version: Annotated[str | UnsetType, d('the tool\'s version (`""` when none)')] = UNSET
    backend: Annotated[
        str | UnsetType,
        d(
            "`none`, `local`, or `local + remote <masked URL or backend kind>` (`|read-only` "
            "marks a read-only ccache remote)"
        ),
    ] = UNSET
    mode: Annotated[str | UnsetType, d("`rw`, `ro` or `off`")] = UNSET
    distributed: Annotated[str | UnsetType | None, d("the sccache-dist scheduler URL, masked")] = (
        UNSET
    )
    dist: Annotated[
        Obj | UnsetType | None,
        d(
            "with a scheduler: what it answered when asked with the client's token: "
            "`scheduler` (masked), `status` (`ok`, `no-servers`, `unauthorized`, "
            "`unreachable`, `error`, `unchecked`), `detail`, `fix` (null when ok), "
            "`servers`, `cpus` (null when unknown); never the token"
        ),
    ] = UNSET
    tools: Annotated[Obj, d("per tool (`ccache`, `sccache`): `found`, `path`, `version`")]
    problem: Annotated[
        str | None,
        d(
            "why `build` would refuse the cache settings (exit 2 there), e.g. an explicit tool "
            "that is not installed"
        ),
    ]


class Doctor(Form, kw_only=True):
    title = "doctor [--lane L]"
    may_fail = True
    note = "with `--lane`, exit 2 when `unbuildable` is not empty (as `build`); unknown lane too"

    host_os: Annotated[str, d("`linux` or `darwin`")]
    machine: Annotated[str, d("e.g. `x86_64`")]
    tools: Annotated[list[Obj], d("tools")]
    libraries: Annotated[list[Obj], d("libraries")]
    compiler_launcher: Annotated[str | None, d("the compiler launcher")]
    cache: DoctorCache
    lanes: Annotated[list[DoctorLane], d("per lane (narrowed by `--lane`)")]
    selected: Annotated[Strs | UnsetType, d("with `--lane`: the lanes asked for")] = UNSET
    unbuildable: Annotated[Strs | UnsetType, d("with `--lane`: those that cannot build here")] = (
        UNSET
    )


class ToolchainInstall(InstallResult, Form, kw_only=True, forbid_unknown_fields=True):
    title = "toolchain install cuda"
