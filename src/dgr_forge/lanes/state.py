"""`<workspace>/state.json`: what the forge remembers per lane (never authoritative).

A missing or unreadable file is an empty state: the next build configures again. The
typed `LaneState` is the one shape `build`, `lanes` and `status` read and write.

A last build's paths (report, logs, artifacts, byproducts) are all the workspace's; the
file keeps them relative to it, so a workspace copied or moved (`cp -a`, `mv`) shows its
own copy of its last build, never the files of the one it was copied from. In memory they
are absolute. A path that is not the workspace's (an absolute one another workspace wrote,
schema 1, or a hand-edited `..`) makes that last build another workspace's: not built here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, NamedTuple

import msgspec
from msgspec import Struct, field
from msgspec.structs import fields

from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_json, refuse_shared, write_json
from dgr_forge.core.structs import SHA, asdict, d
from dgr_forge.lanes import programs, stamps

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

    def public(self) -> dict[str, Any]:
        """What `status` and `lanes` show of it (`PUBLIC`), as state.json's `last_build`."""
        return {k: v for k in PUBLIC if (v := getattr(self, k)) is not None}

    def relocated(self, move: Callable[[str], str | None]) -> LastBuild | None:
        """This last build with `move` applied to each of its paths; None when `move`
        refuses one (it names a file that is not the workspace's)."""
        moved: dict[str, str | None] = {}

        def to(path: str) -> str:
            moved[path] = new = moved[path] if path in moved else move(path)
            return new if new is not None else path

        arts = [{**a, "path": to(a["path"])} if isinstance(a.get("path"), str) else a
                for a in self.artifacts]  # fmt: skip
        last = msgspec.structs.replace(
            self,
            log=to(self.log),
            report=to(self.report) if self.report is not None else None,
            log_file=to(self.log_file) if self.log_file is not None else None,
            artifacts=arts,
            byproducts={to(p): v for p, v in self.byproducts.items()},
            subject_stats={to(p): v for p, v in self.subject_stats.items()},
        )
        return None if None in moved.values() else last


def stored_path(workspace: Path, path: str) -> str:
    """A path as state.json keeps it: relative to the workspace when inside it."""
    try:
        return PurePosixPath(Path(path).relative_to(workspace)).as_posix()
    except ValueError:
        return path


def loaded_path(workspace: Path, path: str) -> str | None:
    """A path state.json keeps, absolute again; None when it is not this workspace's (an
    absolute path elsewhere, a `..`, a NUL: another workspace's or hand-edited)."""
    if "\0" in path or ".." in PurePosixPath(path).parts:
        return None
    if PurePosixPath(path).is_absolute():
        return path if Path(path).is_relative_to(workspace) else None
    return str(workspace / path) if path else None


class Loaded(NamedTuple):
    state: LaneState
    # its last build names another workspace's files (a copied or moved root, recorded by
    # an older forge): not built here, and said so
    elsewhere: bool


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
    if not isinstance(data, dict) or data.get("schema") not in READ_SCHEMAS:
        return {"schema": STATE_SCHEMA, "lanes": {}}
    if not isinstance(data.get("lanes"), dict):
        data["lanes"] = {}
    return data


def loaded(forge: Forge, entry: Any) -> Loaded:
    """One lane's entry as read from the file, its paths this workspace's again."""
    state = LaneState.from_dict(entry)
    last = state.last_build
    if last is None:
        return Loaded(state, False)
    here = last.relocated(lambda p: loaded_path(forge.workspace, p))
    return Loaded(msgspec.structs.replace(state, last_build=here), here is None)


def lane_states(forge: Forge) -> dict[str, Loaded]:
    """Every lane the file names, by name."""
    return {str(k): loaded(forge, v) for k, v in sorted(load_lanes_state(forge)["lanes"].items())}


def lane_state(forge: Forge, lane: str) -> LaneState:
    return loaded(forge, load_lanes_state(forge)["lanes"].get(lane)).state


def save_lane_state(forge: Forge, lane: str, state: LaneState) -> None:
    data = load_lanes_state(forge)  # re-read: another lane of this run may have written
    last = state.last_build
    if last is not None:
        kept = last.relocated(lambda p: stored_path(forge.workspace, p))
        state = msgspec.structs.replace(state, last_build=kept)
    data["schema"] = STATE_SCHEMA  # every lane's paths are read the same way
    data["lanes"][lane] = state.as_dict()
    write_json(forge.state_file, data)
