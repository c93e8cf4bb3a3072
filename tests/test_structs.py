"""The no-op path's records are msgspec Structs where they were dataclasses: what the
dataclass said per field (left out of repr, hash or ==; a deep asdict) still holds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec

from dgr_forge.cache.select import CacheSetup
from dgr_forge.core import structs
from dgr_forge.upstream.series_base import SeriesBase


def test_a_credential_field_is_left_out_of_the_repr_as_the_dataclass_did() -> None:
    @dataclasses.dataclass(frozen=True)
    class DistClient:  # the dataclass it was
        url: str = dataclasses.field(repr=False)
        shown: str
        auth: str
        token: str | None = dataclasses.field(default=None, repr=False)

    args = ("https://u:secret@sched", "https://sched", "token", "s3cr3t")
    mine = DistClient(*args)
    from dgr_forge.cache import dist

    shown = repr(dist.DistClient(*args))
    assert shown == "DistClient(shown='https://sched', auth='token')"
    assert repr(mine).endswith("." + shown)  # a local class: its qualname has a prefix
    setup = CacheSetup(tool="sccache", env={"AWS_SECRET_ACCESS_KEY": "k"}, server_env={"X": "y"})
    assert "AWS_SECRET" not in repr(setup) and "server_env" not in repr(setup)
    assert repr(setup).startswith("CacheSetup(tool='sccache', launcher=None, ")


def test_a_dict_field_is_left_out_of_the_hash_and_trees_out_of_equality() -> None:
    @dataclasses.dataclass(frozen=True)
    class Old:
        name: str
        packages: dict[str, tuple[str, ...]] = dataclasses.field(hash=False)
        tools: tuple[str, ...] = ()

    class New(msgspec.Struct, frozen=True):
        name: str
        packages: dict[str, tuple[str, ...]]
        tools: tuple[str, ...] = ()

        def __hash__(self) -> int:
            return hash(structs.values_without(self, frozenset({"packages"})))

    assert hash(New("a", {"apt": ("x",)}, ("t",))) == hash(Old("a", {"apt": ("x",)}, ("t",)))
    one = SeriesBase("c" * 40, (("0001.patch", "0" * 64),), ("t1",))
    other = SeriesBase("c" * 40, (("0001.patch", "0" * 64),), ("t2",))
    assert one == other and hash(one) == hash(other)
    assert one != SeriesBase("d" * 40, one.series, one.trees)
    assert one != ("c" * 40, one.series)  # another class is never equal


def test_a_damaged_state_entry_keeps_its_good_fields_and_defaults_each_bad_one() -> None:
    """The rule on `LaneState` / `LastBuild` (`structs.lenient`): a field whose value does
    not decode as its type takes its default; a last build without a good time, log or
    result is none; nothing raises, whatever a hand edit left."""
    from dgr_forge.lanes.inputs import ReportInputs
    from dgr_forge.lanes.state import LaneState

    last = {"time": "t", "result": "ok", "log": "logs/build-cpu.log", "report": 7,
            "byproducts": {"a": "0" * 64, "b": 1}, "subject_stats": {"x": [1, 2, 3, 4, 5]},
            "artifacts": [{"name": "w"}], "inputs": {"pin": "p"}}  # fmt: skip
    entry = {"head_commit": "c" * 40, "source_date_epoch": True, "configured_at": ["x"],
             "launcher_switches": ["A", 1], "build_info": ["B"], "last_build": last,
             "unknown_key": 1}  # fmt: skip
    state = LaneState.from_dict(entry)
    assert state.head_commit == "c" * 40 and state.build_info == ["B"]
    assert state.source_date_epoch is None and state.configured_at is None
    assert state.launcher_switches == []
    got = state.last_build
    assert got is not None and (got.time, got.result, got.report) == ("t", "ok", None)
    assert got.byproducts == {}  # one bad digest: the field is its default, as a whole
    assert got.subject_stats == {"x": [1, 2, 3, 4, 5]} and got.inputs == ReportInputs(pin="p")
    assert got.artifacts == []  # an artifact without its kind, path and digest: the default
    bad_stats = {**last, "subject_stats": {"x": [1, 2, 3]}}
    assert LaneState.from_dict({"last_build": bad_stats}).last_build.subject_stats == {}  # type: ignore[union-attr]
    for broken in ({**last, "time": 5}, {k: v for k, v in last.items() if k != "log"}, []):
        assert LaneState.from_dict({"last_build": broken}).last_build is None, broken
    for hostile in (None, [], "x", {"programs": [1], "input_stamps": "s"}):
        assert LaneState.from_dict(hostile) == LaneState(), hostile


def test_results_are_their_structs_with_no_hand_written_serializer() -> None:
    """A command's result is the msgspec Struct its library returns (issue 40): no
    `as_dict`/`to_json`/`to_dict` beside the type, no `cli/results/` forms beside the data."""
    import re

    src = Path(structs.__file__).resolve().parents[1]
    found = [
        f"{path.relative_to(src)}:{n}"
        for path in sorted(src.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.match(r"\s*def (as_dict|to_json|to_dict)\b", line)
    ]
    assert found == []
    assert not (src / "cli" / "results").exists()
