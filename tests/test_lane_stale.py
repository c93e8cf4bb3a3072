"""`status` and `lanes` tell the truth about a lane's last build (issue 29): once the pin,
the series, the recipe or the worker moved, a lane whose last report was built from other
inputs is marked stale, naming what moved, never shown as a plain "ok"."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.build import (
    PATCH_FILE,
    BuiltLane,
    LaneSnapshot,
    forge_build,
    shared_snapshot,
)
from support.cli import run_forge
from support.git import Upstream

pytestmark = pytest.mark.slow


# a root without a worker whose cpu lane was built once, signed: made once per module, each
# test that starts from "a lane that was built" gets it back as that build left it


@pytest.fixture(scope="module")
def _signed_lane(
    tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream
) -> LaneSnapshot:
    return shared_snapshot(tmp_path_factory, _upstream_template, worker=None, sign=True)


@pytest.fixture
def signed(_signed_lane: LaneSnapshot) -> BuiltLane:
    return _signed_lane.restore()


@pytest.fixture(autouse=True)
def _wide_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "10000")  # table cells are asserted whole


def _lane_rows(root: Path) -> tuple[dict, dict, str, str]:  # type: ignore[type-arg]
    st = run_forge("--root", str(root), "--json", "status")
    assert st.code == 0, st
    lanes = run_forge("--root", str(root), "--json", "lanes")
    assert lanes.code == 0, lanes
    from_status = next(r for r in st.json["lanes"] if r["lane"] == "cpu")["last_build"]
    from_lanes = next(r for r in lanes.json["lanes"] if r["lane"] == "cpu")["last_build"]
    return from_status, from_lanes, st.stderr, lanes.stderr


def _assert_stale(root: Path, moved: list[str]) -> None:
    in_status, in_lanes, status_text, lanes_text = _lane_rows(root)
    assert in_status["stale"] == moved and in_lanes["stale"] == moved, (in_status, in_lanes)
    assert in_status["result"] == "ok"  # the build did succeed, from other inputs
    words = f"stale ({', '.join(moved)} moved)"
    assert words in status_text, status_text
    assert words in lanes_text, lanes_text


@pytest.fixture
def path_worker_lane(
    tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream
) -> BuiltLane:
    """A root with its path worker, built once with --no-sign (shared with
    test_build_truth.py, one xdist scope: support.schedule), each test gets its copy back."""
    return shared_snapshot(tmp_path_factory, _upstream_template, worker="path").restore()


def test_a_moved_input_marks_the_last_build_stale(path_worker_lane: BuiltLane) -> None:
    root, upstream, built = path_worker_lane.root, path_worker_lane.upstream, path_worker_lane.first
    assert built.code == 0, built  # `build --jobs 2 --no-sign`

    in_status, in_lanes, status_text, _ = _lane_rows(root)
    assert in_status["stale"] == [] and in_lanes["stale"] == []
    assert "stale" not in status_text

    # the worker moved (an edit in the path worker's tree)
    source = root / "worker" / "src" / "util.cpp"
    original = source.read_text()
    source.write_text(original + "// moved\n")
    _assert_stale(root, ["worker"])
    source.write_text(original)
    assert _lane_rows(root)[0]["stale"] == []  # content, not mtimes

    # the recipe moved
    recipe = root / "recipes" / "cpu.toml"
    text = recipe.read_text()
    recipe.write_text(text + "# a comment is a change of the recipe's bytes\n")
    _assert_stale(root, ["recipe"])
    recipe.write_text(text)

    # the series moved (a teammate's edit of the patch, pulled in with its manifest line)
    manifest = root / "manifests" / "llama.cpp.toml"
    pinned = manifest.read_text()
    patch = root / "patches" / "llama.cpp" / PATCH_FILE
    patch_bytes = patch.read_bytes()
    old = hashlib.sha256(patch_bytes).hexdigest()
    patch.write_text(patch.read_text().replace("Subject: ", "Subject: reworded ", 1))
    new = hashlib.sha256(patch.read_bytes()).hexdigest()
    manifest.write_text(pinned.replace(old, new))
    _assert_stale(root, ["series"])

    # and the pin moved (`rebase` onto a later upstream commit re-pins and re-exports)
    manifest.write_text(pinned)
    patch.write_bytes(patch_bytes)
    later = upstream.commit({"NEWS.txt": "a later upstream commit\n"}, "news")
    rebased = run_forge("--root", str(root), "rebase", "--onto", later)
    assert rebased.code == 0, rebased
    in_status, in_lanes, status_text, lanes_text = _lane_rows(root)
    assert "pin" in in_status["stale"] and in_status["stale"] == in_lanes["stale"]
    assert "stale (pin" in status_text and "stale (pin" in lanes_text
    assert ": ok " not in status_text  # never a plain "ok"


def test_a_build_recorded_by_an_older_forge_says_its_inputs_were_not_recorded(
    signed: BuiltLane,
) -> None:
    """h7 finding 4: a lane state without recorded inputs (an older forge) showed "stale
    (pin, series, recipe, worker moved)" although nothing moved: it cannot tell, and says
    so. `--json` keeps `stale` (all, as documented) and says `inputs_recorded: false`."""
    root = signed.root
    state_file = root / ".dgr" / "state.json"
    state = json.loads(state_file.read_text())
    assert state["lanes"]["cpu"]["evidence"].pop("inputs")  # as an older forge wrote it
    state_file.write_text(json.dumps(state))

    in_status, in_lanes, status_text, lanes_text = _lane_rows(root)
    for row in (in_status, in_lanes):
        assert row["inputs_recorded"] is False, row
        assert row["stale"] == ["pin", "series", "recipe", "worker"], row
    words = "stale (inputs not recorded: rebuild to record them)"
    assert words in status_text and words in lanes_text, (status_text, lanes_text)
    assert "moved" not in status_text + lanes_text

    rebuilt = forge_build(root, *signed.args())
    assert rebuilt.code == 0, rebuilt
    in_status, in_lanes, status_text, _ = _lane_rows(root)
    assert in_status["inputs_recorded"] is True and in_status["stale"] == []
    assert "stale" not in status_text


def _absolute_state(root: Path) -> None:
    """state.json as a forge before the workspace-relative paths wrote it: schema 1, every
    path of the last build absolute (a no-op on a file that is already so)."""
    state_file = root / ".dgr" / "state.json"
    data = json.loads(state_file.read_text())
    ws = root / ".dgr"

    def absolute(p: str) -> str:
        return p if Path(p).is_absolute() else str(ws / p)

    for entry in data["lanes"].values():
        last, evidence = entry["last_build"], entry["evidence"]
        last["report"], last["log"] = absolute(last["report"]), absolute(last["log"])
        for art in last["artifacts"]:
            art["path"] = absolute(art["path"])
        evidence["log_file"] = absolute(evidence["log_file"])
        for name in ("byproducts", "subject_stats"):
            evidence[name] = {absolute(k): v for k, v in evidence[name].items()}
    data["schema"] = 1
    state_file.write_text(json.dumps(data))


def _relocate(a: Path, b: Path, how: str) -> None:
    b.parent.mkdir(parents=True)
    if how == "copied":
        shutil.copytree(a, b, symlinks=True)
    else:
        os.rename(a, b)


def _never_names(a: Path, *results: Any) -> None:
    """No byte of the other root in what a command says (stdout, and the text on stderr)."""
    for res in results:
        assert str(a) not in res.stdout and str(a) not in res.stderr, res


@pytest.mark.parametrize("how", ["copied", "moved"])
def test_a_copied_or_moved_root_shows_its_own_last_build(
    tmp_path: Path, signed: BuiltLane, how: str
) -> None:
    """A root built in a/forge, then copied (cp -a) or moved to b/forge: `status` and `lanes`
    in b named a's report, log and artifacts with `stale: []` (state.json kept absolute
    paths). The workspace's paths are kept relative to it: b shows its own copy of the
    report, the same bytes (re-hashed, verified with its artifacts); a `build` in b
    reconfigures the copied build directory (CMake's cache names a) and writes b's own
    report, never handing back a's."""
    key, a, b = signed.key, signed.root, tmp_path / "b" / "forge"
    name = Path(signed.first.json["lanes"][0]["report"]).name
    recorded = json.loads((a / ".dgr" / "state.json").read_text())["lanes"]["cpu"]
    _relocate(a, b, how)

    st = run_forge("--root", str(b), "--json", "status")
    lanes = run_forge("--root", str(b), "--json", "lanes")
    text = run_forge("--root", str(b), "status")
    assert st.code == lanes.code == text.code == 0, (st, lanes, text)
    _never_names(a, st, lanes, text)
    in_status, in_lanes, _, _ = _lane_rows(b)
    report = b / ".dgr" / "reports" / name
    for row in (in_status, in_lanes):
        assert row["result"] == "ok" and row["stale"] == [], row
        assert row["report"] == str(report) and row["log"] == str(b / ".dgr/logs/build-cpu.log")
    assert [x["path"] for x in in_status["artifacts"]] == [str(b / ".dgr/build/cpu/llama-cli")]
    # the same file as the one a's build recorded, and it verifies here, artifacts included
    assert hashlib.sha256(report.read_bytes()).hexdigest() == recorded["evidence"]["report_sha256"]
    pub = Path(f"{key}.pub")
    verified = run_forge(
        "--root", str(b), "report", "verify", str(report), "--key", str(pub), "--artifacts"
    )
    assert verified.code == 0, verified

    again = run_forge("--root", str(b), "--json", "build", "--jobs", "2", "--key", str(key))
    assert again.code == 0, again
    _never_names(a, again)
    row = again.json["lanes"][0]
    assert row["status"] == "built" and row["configured"] and not row["report_reused"], row
    assert Path(row["report"]).parent == b / ".dgr" / "reports" and Path(row["report"]).name != name
    assert _lane_rows(b)[0]["report"] == row["report"]
    if how == "copied":  # the original root is its own still: up to date with its report
        kept = run_forge("--root", str(a), "--json", "build", "--jobs", "2", "--key", str(key))
        assert kept.code == 0, kept
        assert kept.json["lanes"][0]["status"] == "up-to-date", kept
        assert kept.json["lanes"][0]["report"] == str(a / ".dgr" / "reports" / name)
        assert str(b) not in kept.stdout


def test_an_older_forges_state_naming_another_workspace_is_not_a_build_here(
    tmp_path: Path, signed: BuiltLane
) -> None:
    """A state.json an older forge wrote (absolute paths) in a root since copied: its last
    build is another workspace's files; `status` and `lanes` say the lane was not built
    here (`last_build: null`, the text says why) and never name the other root. In place,
    the same file still reads as the build it records."""
    a, b = signed.root, tmp_path / "b" / "forge"
    _absolute_state(a)
    assert _lane_rows(a)[0]["report"] == signed.first.json["lanes"][0]["report"]  # in place
    _relocate(a, b, "copied")

    st = run_forge("--root", str(b), "--json", "status")
    lanes = run_forge("--root", str(b), "--json", "lanes")
    text = run_forge("--root", str(b), "status")
    _never_names(a, st, lanes, text)
    in_status, in_lanes, status_text, _ = _lane_rows(b)
    assert in_status is None and in_lanes is None
    words = "not built in this workspace (its state names another workspace's files"
    assert words in status_text and words in text.stdout, (status_text, text)

    again = forge_build(b, *signed.args())
    assert again.code == 0, again
    _never_names(a, again)
    assert again.json["lanes"][0]["status"] == "built"
    assert Path(again.json["lanes"][0]["report"]).parent == b / ".dgr" / "reports"
