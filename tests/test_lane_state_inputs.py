"""The lane state's new evidence (issue 20) is data, never a crash: malformed program
records and stamps are dropped; stamps re-hash on any stat change; the forge's presets
file is recognised by content only (no symlink, no `include`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dgr_forge.core.forge import Forge
from dgr_forge.lanes import programs, stamps
from dgr_forge.lanes.state import STATE_SCHEMA, LaneState, lane_state, loaded, save_lane_state
from dgr_forge.upstream import workspace


@pytest.mark.parametrize(
    "bad",
    [
        {"programs": "x", "input_stamps": [1]},
        {"programs": {"CMAKE_AR": {"path": 3}}, "input_stamps": {"a": ["x", 1, 2]}},
        {"programs": {"CMAKE_AR": {"path": "/x", "stamp": [1, 2, 3, 4, 5, 6]}}},
        {"programs": {"-x": {"path": "/x", "stamp": ["s", 1, 2, 3, 4, True]}}},
        {"launcher_switches": ["A", 3], "input_stamps": {"\0": ["s", 1, 2, 3, 4, 5.5]}},
    ],
)
def test_damaged_evidence_is_dropped(bad: dict[str, object]) -> None:
    state = LaneState.from_dict({"inputs_digest": "d", **bad})
    assert state.programs == {} and state.input_stamps == {}
    assert state.launcher_switches == [] or all(isinstance(n, str) for n in state.launcher_switches)


def test_stamp_rehashes_when_content_changes_under_an_old_mtime(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("one\n")
    old = os.stat(path)
    first = stamps.stamp(path)
    assert first is not None
    first[5] = old.st_ctime_ns + 10 * stamps.RACY_NS  # a settled record
    path.write_text("two\n")
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert stamps.changed({str(path): first}) == [str(path)]
    assert stamps.changed({str(tmp_path / "gone"): first}) == [str(tmp_path / "gone")]


def test_program_changed_during_hashing_is_never_recorded_as_what_it_became() -> None:
    stamp = stamps.stamp(Path("/bin/sh"))
    assert stamp is not None
    progs = {"CMAKE_AR": programs.Program("/bin/sh", [programs.CHANGED, *stamp[1:]], "/bin/sh")}
    assert programs.changed(progs) == ["CMAKE_AR"]


def test_forge_presets_by_content_only(tmp_path: Path) -> None:
    good = {"version": 3, "configurePresets": [{"name": "dgr-cpu", "generator": "Ninja"}]}
    path = tmp_path / workspace.OWN_PRESETS
    path.write_text(json.dumps(good))
    assert workspace.forge_presets(path)
    for bad in (
        {**good, "include": ["/tmp/x.json"]},
        {"version": 3, "configurePresets": [{"name": "mine"}]},
        {"version": 3, "configurePresets": [{"name": "dgr-x", "environment": {"X": "1"}}]},
        [1, 2],
    ):
        path.write_text(json.dumps(bad))
        assert not workspace.forge_presets(path), bad
    path.write_text("\0 not json")
    assert not workspace.forge_presets(path)
    target = tmp_path / "real.json"
    target.write_text(json.dumps(good))
    path.unlink()
    path.symlink_to(target)
    assert not workspace.forge_presets(path)


def _entry(report: str, artifact: str) -> dict[str, object]:
    """A lane entry as state.json keeps it, with the paths given."""
    return {
        "inputs_digest": "d",
        "last_build": {
            "time": "2026-01-01T00:00:00+00:00",
            "result": "ok",
            "report": report,
            "log": "logs/build-cpu.log",
            "artifacts": [{"name": "x", "kind": "EXECUTABLE", "path": artifact, "sha256": "0"}],
        },
        "evidence": {"byproducts": {"logs/build-cpu-1.log": "1"}, "subject_stats": {}},
    }


@pytest.mark.parametrize(
    "path",
    [
        "../../a/forge/.dgr/reports/cpu.intoto.jsonl",  # out of the workspace by `..`
        "reports/../../x",
        "/elsewhere/forge/.dgr/reports/cpu.intoto.jsonl",  # another workspace's, absolute
        "{ws}-other/reports/cpu.intoto.jsonl",  # a sibling whose name starts the same
        "{ws}/../x",
        "reports/\0cpu",
        "",
    ],
)
def test_a_last_build_naming_a_path_not_the_workspaces_is_not_built_here(
    tmp_path: Path, path: str
) -> None:
    """state.json keeps a last build's paths relative to the workspace; one that is not
    the workspace's (another root's, as an older forge wrote it in a root since copied, or
    hand-edited) makes the whole last build another workspace's: none is shown or reused,
    and no path of it is ever opened."""
    ws = tmp_path / "forge" / ".dgr"
    forge = Forge(root=ws.parent, workspace=ws)
    for entry in (
        _entry(path.format(ws=ws), "build/cpu/x"),
        _entry("reports/cpu.intoto.jsonl", path.format(ws=ws)),
    ):
        state, elsewhere = loaded(forge, entry)
        assert state.last_build is None and elsewhere, entry
        assert state.inputs_digest == "d"  # the rest of the lane's state is kept


def test_workspace_paths_are_kept_relative_and_read_back_here(tmp_path: Path) -> None:
    ws = tmp_path / "forge" / ".dgr"
    forge = Forge(root=ws.parent, workspace=ws)
    # relative (this forge), absolute inside the workspace (an older forge, in place), and a
    # name with a leading `-` (a file name, never an option)
    entry = _entry("-reports/cpu.intoto.jsonl", str(ws / "build" / "cpu" / "x"))
    state, elsewhere = loaded(forge, entry)
    last = state.last_build
    assert last is not None and not elsewhere
    assert last.report == str(ws / "-reports" / "cpu.intoto.jsonl")
    assert last.log == str(ws / "logs" / "build-cpu.log")
    assert last.artifacts[0].path == str(ws / "build" / "cpu" / "x")
    assert last.byproducts == {str(ws / "logs" / "build-cpu-1.log"): "1"}

    save_lane_state(forge, "cpu", state)
    kept = json.loads(forge.state_file.read_text())
    assert kept["schema"] == STATE_SCHEMA
    assert str(ws) not in json.dumps(kept)  # nothing of where this workspace is
    assert kept["lanes"]["cpu"]["last_build"]["artifacts"][0]["path"] == "build/cpu/x"
    assert lane_state(forge, "cpu") == state  # read back as it was


def test_an_entry_an_older_forge_wrote_reads_as_the_types() -> None:
    """state.json as the forge wrote it before its records were Structs (every evidence
    key, nulls included; artifacts, inputs and programs as plain objects) reads back as
    the typed records, and is written again in the same shape."""
    from dgr_forge.lanes.inputs import ReportInputs, WorkerIdentity
    from dgr_forge.lanes.state import Artifact, LaneState

    stamp = ["a" * 64, 1, 2, 3, 4, 5]
    art = {"name": "w", "kind": "EXECUTABLE", "path": "build/cpu/w", "sha256": "b" * 64}
    inputs = {"pin": "p", "series": "s", "recipe": "r", "worker": {"location": "u", "commit": "c"}}
    old = {
        "inputs_digest": "d",
        "programs": {
            "CMAKE_AR": {"path": "/bin/ar", "as": "/usr/bin/ar", "version": "v", "stamp": stamp}
        },
        "input_stamps": {"/x": stamp},
        "last_build": {
            "time": "t",
            "result": "ok",
            "report": "r.jsonl",
            "log": "l",
            "artifacts": [art],
        },
        "evidence": {
            "report_sha256": "c" * 64,
            "log_file": None,
            "phase": None,
            "signed_by": None,
            "byproducts": {},
            "subject_stats": {},
            "input_digest": "w",
            "inputs": inputs,
        },
    }
    state = LaneState.from_dict(old)
    last = state.last_build
    assert last is not None and last.artifacts == [Artifact(**art)]
    assert last.inputs == ReportInputs("p", "s", "r", WorkerIdentity("u", commit="c"))
    assert state.programs["CMAKE_AR"].named == "/usr/bin/ar"
    assert state.input_stamps == {"/x": stamp}
    again = state.stored()
    assert again["last_build"] == old["last_build"]
    assert again["evidence"]["inputs"] == inputs
    assert LaneState.from_dict(again) == state
