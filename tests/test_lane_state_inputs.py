"""The lane state's new evidence (issue 20) is data, never a crash: malformed program
records and stamps are dropped; stamps re-hash on any stat change; the forge's presets
file is recognised by content only (no symlink, no `include`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dgr_forge.lanes import programs, stamps
from dgr_forge.lanes.state import LaneState
from dgr_forge.upstream import trees


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
    progs = {"CMAKE_AR": {"path": "/bin/sh", "as": "/bin/sh", "version": "", "stamp": None}}
    stamp = stamps.stamp(Path("/bin/sh"))
    assert stamp is not None
    progs["CMAKE_AR"]["stamp"] = [programs.CHANGED, *stamp[1:]]
    assert programs.changed(progs) == ["CMAKE_AR"]


def test_forge_presets_by_content_only(tmp_path: Path) -> None:
    good = {"version": 3, "configurePresets": [{"name": "dgr-cpu", "generator": "Ninja"}]}
    path = tmp_path / trees.OWN_PRESETS
    path.write_text(json.dumps(good))
    assert trees.forge_presets(path)
    for bad in (
        {**good, "include": ["/tmp/x.json"]},
        {"version": 3, "configurePresets": [{"name": "mine"}]},
        {"version": 3, "configurePresets": [{"name": "dgr-x", "environment": {"X": "1"}}]},
        [1, 2],
    ):
        path.write_text(json.dumps(bad))
        assert not trees.forge_presets(path), bad
    path.write_text("\0 not json")
    assert not trees.forge_presets(path)
    target = tmp_path / "real.json"
    target.write_text(json.dumps(good))
    path.unlink()
    path.symlink_to(target)
    assert not trees.forge_presets(path)
