"""rebase.json is decoded as its type: a conflict as written before it was a Struct (a
plain object with the same keys) still reads; one that is not a conflict is refused,
naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.upstream.rebase.state import Conflict, UpstreamCommit, load_rebase_state

C = "c" * 40


def _state(conflict: object) -> dict[str, object]:
    step = {"file": "0001-a.patch", "subject": "a", "old_commit": C}
    return {
        **dict.fromkeys(("upstream", "src_dir", "old_url", "new_url", "onto"), "x"),
        **dict.fromkeys(("old_commit", "old_tree", "old_head", "new_commit", "new_tree"), C),
        "inputs_sha256": "0" * 64,
        "fetch_url": "x",
        "patches": [{**step, "upstream_commits": [{"commit": C, "subject": "up"}]}],
        "phase": "conflict",
        "conflict": conflict,
        "version": 1,
    }


def _forge(tmp_path: Path, state: dict[str, object]) -> Forge:
    forge = Forge(root=tmp_path / "root", workspace=tmp_path / "ws")
    forge.rebase_state.parent.mkdir(parents=True)
    forge.rebase_state.write_text(json.dumps(state), encoding="utf-8")
    return forge


def test_a_conflict_written_as_a_plain_object_still_reads(tmp_path: Path) -> None:
    old = {
        "files": ["src/a.c"],
        "upstream": {"src/a.c": [{"commit": C, "subject": "up"}]},
        "line_level": {"src/a.c": True},
    }
    state = load_rebase_state(_forge(tmp_path, _state(old)))
    assert state is not None
    assert state.conflict == Conflict(
        files=["src/a.c"],
        upstream={"src/a.c": [UpstreamCommit(commit=C, subject="up")]},
        line_level={"src/a.c": True},
    )
    assert state.patches[0].upstream_commits == [UpstreamCommit(commit=C, subject="up")]


@pytest.mark.parametrize("conflict", [{"files": "src/a.c"}, {"files": [], "why": "x"}, ["src/a.c"]])
def test_a_conflict_that_is_not_one_is_refused_naming_the_key(
    tmp_path: Path, conflict: object
) -> None:
    forge = _forge(tmp_path, _state(conflict))
    with pytest.raises(BadInput) as err:
        load_rebase_state(forge)
    assert "unreadable rebase state" in err.value.message
    assert "$.conflict" in err.value.message
    assert "fetch --force" in (err.value.hint or "")
