"""`status` and `lanes` tell the truth about a lane's last build (issue 29): once the pin,
the series, the recipe or the worker moved, a lane whose last report was built from other
inputs is marked stale, naming what moved, never shown as a plain "ok"."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.build import PATCH_FILE, make_patched_root, make_worker
from support.cli import run_forge
from support.git import Upstream

pytestmark = pytest.mark.slow


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


def test_a_moved_input_marks_the_last_build_stale(tmp_path: Path, upstream: Upstream) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    make_worker(root / "worker")
    (root / "manifests" / "shard-worker.toml").write_text('schema = 1\n[worker]\npath = "worker"\n')
    built = run_forge("--root", str(root), "--json", "build", "--jobs", "2", "--no-sign")
    assert built.code == 0, built

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
    tmp_path: Path, upstream: Upstream
) -> None:
    """h7 finding 4: a lane state without recorded inputs (an older forge) showed "stale
    (pin, series, recipe, worker moved)" although nothing moved: it cannot tell, and says
    so. `--json` keeps `stale` (all, as documented) and says `inputs_recorded: false`."""
    root = make_patched_root(tmp_path / "forge", upstream)
    built = run_forge("--root", str(root), "--json", "build", "--jobs", "2", "--no-sign")
    assert built.code == 0, built
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

    rebuilt = run_forge("--root", str(root), "--json", "build", "--jobs", "2", "--no-sign")
    assert rebuilt.code == 0, rebuilt
    in_status, in_lanes, status_text, _ = _lane_rows(root)
    assert in_status["inputs_recorded"] is True and in_status["stale"] == []
    assert "stale" not in status_text
