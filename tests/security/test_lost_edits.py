"""No edit is lost (issue 33 #7): `patch --abort` saves what a person changed during the
stop under the workspace's logs/ and says where; a commit the forge did not make is a
person's even when its committer email is the forge's (it is told by the trees of the
series the forge recorded); an unreadable replay state names the ref that holds the
person's commits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.git import sh_git
from support.roots import Series
from test_rebase import conflicting_upstream, series
from test_team_series import B_AUTHOR, a_exports_0004, b, b_src, b_ws, commit, team

__all__ = ["series", "team"]  # the fixtures


def _stopped(s: Series) -> Path:
    a_exports_0004(s)
    src = b_src(s)
    commit(src, "docs/team.md", "B's notes\n", "docs: bea's team notes")
    r = b(s, "--json", "patch")
    assert r.code == 3, r
    return src


def _saved(r_text: str, ws: Path) -> list[Path]:
    saved = sorted((ws / "logs").glob("patch-abort-*"))
    assert saved and any(str(p) in r_text for p in saved), (r_text, saved)
    return saved


def test_abort_saves_a_tracked_edit_made_during_the_stop(team: Series) -> None:
    src = _stopped(team)
    (src / "docs" / "notes-0.md").write_text("an unrelated edit during the stop\n")
    r = b(team, "patch", "--abort")
    assert r.code == 0, r
    (saved,) = _saved(r.stderr, b_ws(team))
    assert "an unrelated edit during the stop" in saved.read_text()
    # the saved edit applies back onto the restored workspace
    sh_git(src, "apply", str(saved), "--include=docs/notes-0.md")
    assert (src / "docs" / "notes-0.md").read_text() == "an unrelated edit during the stop\n"


def test_abort_saves_a_staged_resolution_and_a_new_file(team: Series) -> None:
    """The variant: the resolution written and added, and a new untracked file."""
    src = _stopped(team)
    (src / "docs" / "team.md").write_text("A's notes\nB's notes, resolved\n")
    sh_git(src, "add", "docs/team.md")
    (src / "docs" / "new.md").write_text("written during the stop\n")
    r = b(team, "--json", "patch", "--abort")
    assert r.code == 0, r
    (saved,) = _saved(r.stdout + r.stderr, b_ws(team))
    text = saved.read_text()
    assert "B's notes, resolved" in text and "written during the stop" in text


def test_an_amend_with_the_forge_email_is_a_persons_commit(team: Series) -> None:
    src = b_src(team)
    (src / "docs" / "notes-1.md").write_text("my change, amended into the last patch\n")
    sh_git(src, "add", "-A")
    forge_like = {**B_AUTHOR, "GIT_COMMITTER_EMAIL": "dgr-forge@invalid"}
    sh_git(src, "commit", "-q", "--amend", "--no-edit", env=forge_like)
    r = b(team, "--json", "patch")
    # kept (a person's commit on top, or a refusal naming it): never re-applied away
    assert r.code in (0, 3), r
    assert (src / "docs" / "notes-1.md").read_text() == "my change, amended into the last patch\n"


def test_a_new_commit_posing_as_a_forge_patch_commit_is_a_persons(team: Series) -> None:
    """The variant: not an amend but a new commit on top that copies a forge patch
    commit's whole identity (its author, dates and the forge's committer name and email):
    only the recorded series' trees tell it apart, so it is kept."""
    src = b_src(team)
    who = sh_git(src, "log", "-1", "--format=%an%x00%ae%x00%ad%x00%cn%x00%ce%x00%cd",
                 "--date=raw").split("\0")  # fmt: skip
    keys = ["AUTHOR_NAME", "AUTHOR_EMAIL", "AUTHOR_DATE", "COMMITTER_NAME", "COMMITTER_EMAIL"]
    posing = {f"GIT_{k}": v for k, v in zip([*keys, "COMMITTER_DATE"], who, strict=True)}
    assert posing["GIT_COMMITTER_EMAIL"] == "dgr-forge@invalid"
    commit(src, "docs/notes-2.md", "my change, in a forge-looking commit\n", "docs: x", posing)
    r = b(team, "--json", "patch")
    assert r.code in (0, 3), r
    assert (src / "docs" / "notes-2.md").read_text() == "my change, in a forge-looking commit\n"


# well-formed JSON, a key of another type than the state's: the file is not a replay state
_WRONG_TYPES = {
    "hostile-ids": {"orig_head": "--output=/tmp/dgr-pwned"},
    "phase": {"phase": "rm -rf"},
    "position-text": {"position": "0"},
    "commits-text": {"commits": "HEAD"},
    "base-text-number": {"base_text": 7},
    "unknown-key": {"exec": "true"},
}


@pytest.mark.parametrize("state", ["truncated", *_WRONG_TYPES, "directory"])
def test_an_unreadable_replay_state_names_the_ref_with_the_commits(
    team: Series, state: str
) -> None:
    """The attack: a truncated file. The variants: well-formed JSON whose ids are not
    commit ids (an option for git) or whose keys are of another type (read as its type,
    every key), and a directory where the file was."""
    src = _stopped(team)
    path = src / ".git" / "dgr-replay.json"
    if state == "truncated":
        path.write_text("{ truncated")
    elif state in _WRONG_TYPES:
        data = json.loads(path.read_text())
        path.write_text(json.dumps({**data, **_WRONG_TYPES[state]}))
    else:
        path.unlink()
        (path / "sub").mkdir(parents=True)
    r = b(team, "--json", "patch")
    assert r.code in (2, 3), r
    assert "refs/dgr/replay-orig" in r.json["error"] + r.json["hint"], r


def test_rebase_abort_saves_an_edit_made_during_the_stop(series: Series) -> None:
    """The same for `rebase --abort` (it resets the tree hard)."""
    s = series
    conflicting_upstream(s)
    r = s.forge("rebase", "--onto", s.upstream.head)
    assert r.code == 3, r
    (s.src / "docs" / "notes-0.md").write_text("edited while the rebase was stopped\n")
    r = s.forge("rebase", "--abort")
    assert r.code == 0, r
    saved = sorted((s.root / ".dgr" / "logs").glob("rebase-abort-*"))
    assert len(saved) == 1 and str(saved[0]) in r.stderr, r
    assert "edited while the rebase was stopped" in saved[0].read_text()
