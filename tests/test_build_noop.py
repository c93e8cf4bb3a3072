"""A no-op build is a no-op on an upstream with an always-run step (issue 46).

llama.cpp's `llama-ui-assets` is a custom target with no outputs: Ninja runs it at every
build (tools/ui/CMakeLists.txt:72-91 at the pin), rewriting its byproduct only when
different. The llama-like test upstream has the same step. A build whose inputs and
subjects are the last report's hands that report back: without asking Ninja or the
compiler cache when nothing moved, and by content when Ninja ran anyway. The programs the
forge starts are counted where it starts them (`subprocess.Popen`, the build in process).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.build import BuiltLane, LaneSnapshot, built_snapshot, forge_build
from support.cache import clean_env
from support.cli import Result
from support.llamalike import make_llamalike_upstream

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def _always_run_lane(tmp_path_factory: pytest.TempPathFactory) -> LaneSnapshot:
    directory = tmp_path_factory.mktemp("always-run")
    up = make_llamalike_upstream(directory / "template", history=0)
    options = ("--cache", "ccache")
    return built_snapshot(directory, up, worker=None, sign=True, options=options, env=_env())


def _env() -> dict[str, str]:
    return clean_env(CCACHE_DIR=os.environ["CCACHE_DIR"])  # the session's own cache


@pytest.fixture
def built(_always_run_lane: LaneSnapshot) -> BuiltLane:
    return _always_run_lane.restore()


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every program the forge (run in this process) starts from now on: its name and
    first argument."""
    names: list[str] = []
    real = subprocess.Popen.__init__

    def counted(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> None:
        argv = [args] if isinstance(args, str | os.PathLike) else list(args)
        names.append(" ".join([Path(os.fsdecode(argv[0])).name, *map(str, argv[1:2])]))
        real(self, args, *rest, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", counted)
    return names


def _build(built: BuiltLane) -> Result:
    res = forge_build(built.root, *built.args(), env=_env())
    assert res.code == 0, res
    return res


def _lane(res: Result) -> dict:  # type: ignore[type-arg]
    return res.json["lanes"][0]  # type: ignore[no-any-return]


def _reports(built: BuiltLane) -> list[Path]:
    return sorted((built.root / ".dgr" / "reports").glob("cpu-*.intoto.jsonl"))


def test_no_op_builds_reuse_the_report_and_ask_neither_ninja_nor_the_cache(
    built: BuiltLane, spawned: list[str]
) -> None:
    first = _lane(built.first)
    assert first["status"] == "built" and first["cache"]["tool"] == "ccache"
    assert "Provisioning UI assets" in Path(first["log_file"]).read_text()  # the step is there
    logs = sorted((built.root / ".dgr" / "logs").glob("build-cpu-*.log"))
    for _ in range(5):
        cpu = _lane(_build(built))
        assert cpu["status"] == "up-to-date" and cpu["report_reused"], cpu
        assert cpu["report"] == first["report"] and cpu["artifacts"] == first["artifacts"]
        assert cpu["ninja_steps"] == 0 and cpu["log_file"] == first["log_file"]
    assert _reports(built) == [Path(first["report"])]  # five no-ops: one report
    names = {call.split()[0] for call in spawned}
    assert "git" in names  # the spy sees the forge's children (the tree is still checked)
    assert "ninja" not in names and "cmake" not in names, spawned
    # ccache is asked its setup (version, remote storage), never its statistics
    assert {c for c in spawned if c.startswith("ccache")} <= {
        "ccache --version",
        "ccache --get-config",
    }, spawned
    assert sorted((built.root / ".dgr" / "logs").glob("build-cpu-*.log")) == logs


def test_a_ninja_run_that_changes_no_subject_hands_the_report_back(
    built: BuiltLane, spawned: list[str]
) -> None:
    first = _lane(built.first)
    tool = Path(next(a["path"] for a in first["artifacts"] if a["name"] == "llama-cli"))
    tool.unlink()  # a deleted artifact: Ninja relinks it, the always-run step runs too
    cpu = _lane(_build(built))
    assert tool.is_file() and cpu["rebuilt"] == [str(tool)]
    assert "Provisioning UI assets" in Path(cpu["log_file"]).read_text()
    assert [c for c in spawned if c.startswith("ninja")] == ["ninja -C"], spawned
    # the same inputs, the same bytes: the report is still true, handed back
    assert cpu["status"] == "up-to-date" and cpu["report_reused"], cpu
    assert cpu["report"] == first["report"] and cpu["artifacts"] == first["artifacts"]
    assert _reports(built) == [Path(first["report"])]


def test_a_recipe_edit_still_builds_and_an_upstream_edit_is_refused(built: BuiltLane) -> None:
    first = _lane(built.first)
    src = built.root / ".dgr" / "src" / "llama.cpp" / "src" / "llama.cpp"
    kept = src.read_text()
    src.write_text(kept + "// mine\n")
    res = forge_build(built.root, *built.args(), env=_env())
    assert res.code == 3 and "src/llama.cpp" in res.stderr, res
    assert src.read_text() == kept + "// mine\n"  # nothing lost
    src.write_text(kept)

    recipe = built.root / "recipes" / "cpu.toml"
    recipe.write_text(recipe.read_text().replace('"Release"', '"MinSizeRel"'))
    cpu = _lane(_build(built))
    assert cpu["status"] == "built" and cpu["configured"] and not cpu["report_reused"], cpu
    assert cpu["report"] != first["report"] and len(_reports(built)) == 2
