"""`<workspace>/state.json`: what the forge remembers per lane (never authoritative).

A missing or unreadable file is an empty state: the next build configures again. The
typed `LaneState` is the one shape `build`, `lanes` and `status` read and write.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct, field
from msgspec.structs import fields

from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_json, refuse_shared, write_json
from dgr_forge.core.structs import asdict
from dgr_forge.lanes import programs, stamps

STATE_SCHEMA = 1
# what `status` and `lanes` show of a last build; the rest is the evidence a reuse checks,
# kept beside it (`evidence`) so their --json output stays what it was
PUBLIC = ("time", "result", "report", "log", "phase", "artifacts")


class LastBuild(Struct):
    time: str
    result: str  # ok | failed
    log: str  # the latest log link, logs/build-<lane>.log
    report: str | None = None
    report_sha256: str | None = None
    log_file: str | None = None  # the build's own timestamped log (a byproduct)
    phase: str | None = None  # configure | build | report, when failed
    signed_by: str | None = None  # keyid, None when unsigned
    signer_fingerprint: str | None = None  # of the key material asked for (cheap re-check)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    byproducts: dict[str, str] = field(default_factory=dict)  # path -> sha256, as reported
    # path -> [size, mtime_ns, ctime_ns, inode, recorded_ns] when it last hashed true
    subject_stats: dict[str, list[int]] = field(default_factory=dict)
    # the lane's whole input (`lanes.inputs.whole_digest`) this report was built from
    input_digest: str | None = None
    # the movable inputs (`lanes.inputs.report_inputs`) the report was built from: what
    # `status` and `lanes` compare to say a last build is stale
    inputs: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Any) -> LastBuild | None:
        if not isinstance(data, dict) or not isinstance(data.get("result"), str):
            return None
        known = {f.name for f in fields(cls)}
        try:
            last = cls(**{k: v for k, v in data.items() if k in known})
        except TypeError:
            return None
        # a hand-edited or damaged file is no state, never a crash
        if not all(isinstance(getattr(last, k), str) for k in ("time", "log")):
            return None
        for name in ("report", "report_sha256", "log_file", "phase", "signed_by", "input_digest"):
            if not isinstance(getattr(last, name), str | None):
                setattr(last, name, None)
        if not isinstance(last.signer_fingerprint, str | None):
            last.signer_fingerprint = None
        if not isinstance(last.artifacts, list) or not all(
            isinstance(a, dict) for a in last.artifacts
        ):
            last.artifacts = []
        if not isinstance(last.inputs, dict | None):
            last.inputs = None
        if not isinstance(last.byproducts, dict):
            last.byproducts = {}
        stats = last.subject_stats
        if not isinstance(stats, dict) or not all(
            isinstance(v, list) and len(v) == 5 and all(type(n) is int for n in v)
            for v in stats.values()
        ):
            last.subject_stats = {}
        return last


class LaneState(Struct):
    inputs_digest: str | None = None
    head_commit: str | None = None
    source_date_epoch: int | None = None
    configured_at: str | None = None
    # the upstream's launcher auto-detection switches at head_commit, pinned OFF
    launcher_switches: list[str] = field(default_factory=list)
    # the build-info variables the tree at head_commit takes as given (`options`)
    build_info: list[str] = field(default_factory=list)
    # every program configure resolved (`lanes.programs`): name -> path, version, stamp
    programs: dict[str, Any] = field(default_factory=dict)
    # the input files' stamps (`lanes.inputs`): path -> [sha256, size, mtime, ctime, ino, t]
    input_stamps: dict[str, Any] = field(default_factory=dict)
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
        state = cls(last_build=LastBuild.from_dict(last))
        for name in ("inputs_digest", "head_commit", "configured_at", "in_progress"):
            value = data.get(name)
            setattr(state, name, value if isinstance(value, str) else None)
        switches = data.get("launcher_switches")
        if isinstance(switches, list) and all(isinstance(n, str) for n in switches):
            state.launcher_switches = list(switches)
        given = data.get("build_info")
        if isinstance(given, list) and all(isinstance(n, str) for n in given):
            state.build_info = list(given)
        state.programs = programs.valid(data.get("programs"))
        state.input_stamps = stamps.valid_map(data.get("input_stamps"))
        epoch = data.get("source_date_epoch")
        state.source_date_epoch = epoch if type(epoch) is int else None
        return state

    def as_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if v is not None and v != [] and v != {}}
        last = data.pop("last_build", None)
        if last is not None:
            data["last_build"] = {k: last[k] for k in PUBLIC if last.get(k) is not None}
            data["evidence"] = {k: v for k, v in last.items() if k not in PUBLIC}
        return data


def load_lanes_state(forge: Forge) -> dict[str, Any]:
    """The raw state (`{"schema": 1, "lanes": {lane: {...}}}`); bad or missing is empty;
    one another user may write is refused (exit 2), never trusted."""
    refuse_shared(forge.workspace, "workspace")
    refuse_shared(forge.state_file, "state file")
    try:
        data = read_json(forge.state_file)
    except (OSError, ValueError):
        return {"schema": STATE_SCHEMA, "lanes": {}}
    if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
        return {"schema": STATE_SCHEMA, "lanes": {}}
    if not isinstance(data.get("lanes"), dict):
        data["lanes"] = {}
    return data


def lane_state(forge: Forge, lane: str) -> LaneState:
    return LaneState.from_dict(load_lanes_state(forge)["lanes"].get(lane))


def save_lane_state(forge: Forge, lane: str, state: LaneState) -> None:
    data = load_lanes_state(forge)  # re-read: another lane of this run may have written
    data["lanes"][lane] = state.as_dict()
    write_json(forge.state_file, data)
