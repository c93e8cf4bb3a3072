"""`<workspace>/state.json`: what the forge remembers per lane (never authoritative).

A missing or unreadable file is an empty state. A last build's paths are kept relative to
the workspace, so a workspace copied or moved shows its own copy of its last build; one
naming a path outside it (schema 1, a hand-edited `..`) is another's: not built here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, NamedTuple

import msgspec
from msgspec import Meta, Struct, field

from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_json, refuse_shared, write_json
from dgr_forge.core.structs import SHA, d, lenient
from dgr_forge.lanes import stamps
from dgr_forge.lanes.inputs import ReportInputs
from dgr_forge.lanes.programs import Program

# 2: a last build's paths relative to the workspace (1, still read: absolute); an older
# forge reads a newer file as no state (it configures again, never misreads a path)
STATE_SCHEMA = 2
READ_SCHEMAS = (1, 2)
# what `status` and `lanes` show of a last build; the rest is the evidence a reuse checks,
# kept beside it (`evidence`) so their --json output stays what it was
PUBLIC = ("time", "result", "report", "log", "phase", "artifacts")


class Artifact(Struct, kw_only=True):
    """a built artifact"""

    name: Annotated[str, d("the target's artifact name")]
    kind: Annotated[str, d("CMake target type, e.g. `EXECUTABLE`")]
    path: Annotated[str, d("where it is")]
    sha256: Annotated[str, SHA]


class LastBuild(Struct, omit_defaults=True):
    """Read by `structs.lenient`: one without a well-typed time, log or result is none."""

    time: str
    result: str  # ok | failed
    log: str  # the latest log link, logs/build-<lane>.log
    report: str | None = None
    report_sha256: str | None = None
    log_file: str | None = None  # the build's own timestamped log (a byproduct)
    phase: str | None = None  # configure | build | report, when failed
    signed_by: str | None = None  # keyid, None when unsigned
    signer_fingerprint: str | None = None  # of the key material asked for (cheap re-check)
    artifacts: list[Artifact] = field(default_factory=list)
    byproducts: dict[str, str] = field(default_factory=dict)  # path -> sha256, as reported
    # path -> [size, mtime_ns, ctime_ns, inode, recorded_ns] when it last hashed true
    subject_stats: dict[str, Annotated[list[int], Meta(min_length=5, max_length=5)]] = field(
        default_factory=dict
    )
    # the lane's whole input (`LaneBuilder._whole`) this report was built from
    input_digest: str | None = None
    # the movable inputs the report was built from: what says a last build is stale
    inputs: ReportInputs | None = None

    def relocated(self, move: Callable[[str], str | None]) -> LastBuild | None:
        """`move` applied to each of its paths; None when `move` refuses one."""
        moved: dict[str, str | None] = {}

        def to(path: str) -> str:
            moved[path] = new = moved[path] if path in moved else move(path)
            return new if new is not None else path

        last = msgspec.structs.replace(
            self,
            log=to(self.log),
            report=to(self.report) if self.report is not None else None,
            log_file=to(self.log_file) if self.log_file is not None else None,
            artifacts=[msgspec.structs.replace(a, path=to(a.path)) for a in self.artifacts],
            byproducts={to(p): v for p, v in self.byproducts.items()},
            subject_stats={to(p): v for p, v in self.subject_stats.items()},
        )
        return None if None in moved.values() else last


def stored_path(workspace: Path, path: str) -> str:
    full = Path(path)
    return full.relative_to(workspace).as_posix() if full.is_relative_to(workspace) else path


def loaded_path(workspace: Path, path: str) -> str | None:
    """A path state.json keeps, absolute again; None when it is not this workspace's."""
    if "\0" in path or ".." in PurePosixPath(path).parts:
        return None
    if PurePosixPath(path).is_absolute():
        return path if Path(path).is_relative_to(workspace) else None
    return str(workspace / path) if path else None


class Loaded(NamedTuple):
    state: LaneState
    # its last build names another workspace's files: not built here, and said so
    elsewhere: bool


class LaneState(Struct, omit_defaults=True):
    """Read by `structs.lenient`: a damaged entry costs a reconfigure, never a crash."""

    inputs_digest: str | None = None
    head_commit: str | None = None
    source_date_epoch: int | None = None
    configured_at: str | None = None
    # the upstream's launcher auto-detection switches at head_commit, pinned OFF
    launcher_switches: list[str] = field(default_factory=list)
    # the build-info variables the tree at head_commit takes as given (`options`)
    build_info: list[str] = field(default_factory=list)
    # every program configure resolved (`lanes.programs`): name -> path, version, stamp
    programs: dict[str, Program] = field(default_factory=dict)
    # the input files' stamps (`lanes.inputs`): path -> [sha256, size, mtime, ctime, ino, t]
    input_stamps: dict[str, stamps.Stamp] = field(default_factory=dict)
    # set before configure/compile, cleared once the report is written: a run killed in
    # between never lets the next one hand back a report of other bytes
    in_progress: str | None = None
    last_build: LastBuild | None = None

    @classmethod
    def from_dict(cls, data: Any) -> LaneState:
        if not isinstance(data, dict):
            return cls()
        last, evidence = data.get("last_build"), data.get("evidence")
        if isinstance(last, dict) and isinstance(evidence, dict):
            last = {**evidence, **last}
        apart = ("last_build", "programs", "input_stamps")
        state = lenient(cls, {k: v for k, v in data.items() if k not in apart}) or cls()
        state.last_build = lenient(LastBuild, last)
        raw, state.programs = data.get("programs"), {}
        for key, value in raw.items() if isinstance(raw, dict) else ():
            try:
                program = msgspec.convert(value, Program)
            except msgspec.ValidationError:
                continue
            if stamps.valid(program.stamp):
                state.programs[str(key)] = program
        state.input_stamps = stamps.valid_map(data.get("input_stamps"))
        return state

    def stored(self) -> dict[str, Any]:
        """The last build's public keys apart from the evidence a reuse checks."""
        data = dict(msgspec.to_builtins(self))
        if (last := data.pop("last_build", None)) is not None:
            data["last_build"] = {k: last[k] for k in PUBLIC if k in last}
            data["evidence"] = {k: v for k, v in last.items() if k not in PUBLIC}
        return data


def load_lanes_state(forge: Forge) -> dict[str, Any]:
    """Bad or missing is empty; one another user may write is refused (exit 2)."""
    refuse_shared(forge.workspace, "workspace")
    refuse_shared(forge.state_file, "state file")
    try:
        data = read_json(forge.state_file)
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict) or data.get("schema") not in READ_SCHEMAS:
        return {"schema": STATE_SCHEMA, "lanes": {}}
    if not isinstance(data.get("lanes"), dict):
        data["lanes"] = {}
    return data


def loaded(forge: Forge, entry: Any) -> Loaded:
    state = LaneState.from_dict(entry)
    if (last := state.last_build) is None:
        return Loaded(state, False)
    here = last.relocated(lambda p: loaded_path(forge.workspace, p))
    return Loaded(msgspec.structs.replace(state, last_build=here), here is None)


def lane_states(forge: Forge) -> dict[str, Loaded]:
    return {str(k): loaded(forge, v) for k, v in sorted(load_lanes_state(forge)["lanes"].items())}


def lane_state(forge: Forge, lane: str) -> LaneState:
    return loaded(forge, load_lanes_state(forge)["lanes"].get(lane)).state


def save_lane_state(forge: Forge, lane: str, state: LaneState) -> None:
    data = load_lanes_state(forge)  # re-read: another lane of this run may have written
    if (last := state.last_build) is not None:
        kept = last.relocated(lambda p: stored_path(forge.workspace, p))
        state = msgspec.structs.replace(state, last_build=kept)
    data["schema"] = STATE_SCHEMA  # every lane's paths are read the same way
    data["lanes"][lane] = state.stored()
    write_json(forge.state_file, data)
