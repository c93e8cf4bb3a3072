"""A built lane handed out again (support.build.snapshot_lane) is the lane its first build
left: the same bytes, modes and mtimes at the same path, whatever an earlier test changed,
so the next plain build is the no-op it would have been there."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.build import LaneSnapshot, built_snapshot, forge_build
from support.git import Upstream, sh_git

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def _snapshot(
    tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream
) -> LaneSnapshot:
    return built_snapshot(tmp_path_factory.mktemp("lane"), _upstream_template)


def _tree(top: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under `top`: kind, mode, mtime and content (a link: its target)."""
    seen: dict[str, tuple[Any, ...]] = {}
    for path in [top, *top.rglob("*")]:
        st = path.lstat()
        rel = path.relative_to(top).as_posix()
        if path.is_symlink():
            seen[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            seen[rel] = ("dir", st.st_mode, st.st_mtime_ns)
        else:
            seen[rel] = ("file", st.st_mode, st.st_mtime_ns, path.read_bytes())
    return seen


def lane(result: Any) -> dict[str, Any]:
    return result.json["lanes"][0]  # type: ignore[no-any-return]


def test_a_restored_lane_is_the_snapshot_and_its_next_build_a_no_op(
    _snapshot: LaneSnapshot,
) -> None:
    pristine = _tree(_snapshot.pristine)
    built = _snapshot.restore()
    assert built.worker is not None and built.key is None
    assert _tree(built.base) == pristine

    # what an earlier test may leave: an edited worker source, a rebuilt lane (new binary,
    # state.json, report, logs), a stray file in the root and one beside the base
    util = built.worker / "src" / "util.cpp"
    original = util.read_bytes()
    util.write_text(util.read_text().replace("(layer);", "(layer) + 10;"))
    changed = forge_build(built.root, *built.args())
    assert changed.code == 0 and lane(changed)["status"] == "built", changed
    (built.root / "stray.txt").write_text("mine\n")
    (built.base.parent / "beside").mkdir()

    again = _snapshot.restore()
    assert again == built  # the same paths and the very Result of the first build
    assert util.read_bytes() == original
    assert not (built.root / "stray.txt").exists()
    assert not (built.base.parent / "beside").exists()
    assert _tree(built.base) == pristine

    res = forge_build(built.root, *built.args())
    assert res.code == 0, res
    cpu, first = lane(res), lane(built.first)
    assert cpu["status"] == "up-to-date" and cpu["report_reused"], res
    assert cpu["ninja_steps"] == 0
    assert not cpu["configured"] and not cpu["patched"]
    assert cpu["report"] == first["report"] and cpu["artifacts"] == first["artifacts"]


def test_a_restored_lanes_upstream_is_the_copy_its_root_pins_as_the_build_left_it(
    _snapshot: LaneSnapshot,
) -> None:
    """A test may commit to the lane's upstream (a later pin to rebase onto): the next test
    gets the repository and its record (`commits`) as the first build left them."""
    built = _snapshot.restore()
    pinned = built.upstream.head
    assert built.upstream.path == built.base / "upstream"
    assert built.upstream.url in (built.root / "manifests" / "llama.cpp.toml").read_text()
    later = built.upstream.commit({"NEWS.txt": "a later upstream commit\n"}, "news")

    again = _snapshot.restore()
    assert again.upstream.head == pinned and later not in again.upstream.commits
    assert sh_git(again.upstream.path, "rev-parse", "HEAD") == pinned
