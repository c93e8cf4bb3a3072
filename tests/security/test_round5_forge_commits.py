"""Hostile inputs, fifth round (issue 45, cause 10): a person's own new commit (not an
amend), made with the forge's committer identity and their own author, was re-applied
away by a plain `build`: not in HEAD afterwards, not saved under `.dgr/logs/`. The forge
told its commits by committer email and by the trees of the series, and an empty commit
or a revert carries a tree of the series. It now tells them by the ids of the commits it
recorded making (`.git/dgr/series.json` `commits`), which nobody makes by accident.
The attack itself, through a real `build`, is in tests/test_build.py (it reuses that
module's built lane)."""

from __future__ import annotations

import json
from pathlib import Path

from support.git import sh_git
from support.roots import Series
from test_team_series import B_AUTHOR, b, b_src, team

from dgr_forge.core.gitutil import FORGE_IDENTITY

__all__ = ["team"]  # the fixture

POSING = {**B_AUTHOR, **FORGE_IDENTITY}  # the person's author, the forge's committer


def kept(src: Path, mine: str, logs: Path) -> None:
    """The person's commit is in HEAD's history, or saved under logs/ and named."""
    history = sh_git(src, "rev-list", "HEAD").split()
    saved = [p for p in logs.glob("*") if p.is_file() and mine[:12] in p.read_text("latin-1")]
    assert mine in history or saved, (mine, sorted(logs.glob("*")))


def test_a_new_empty_commit_with_the_forge_committer_survives_a_plain_patch(
    team: Series,
) -> None:
    src = b_src(team)
    sh_git(src, "commit", "-q", "--allow-empty", "-m", "release: mark 1.2", env=POSING)
    mine = sh_git(src, "rev-parse", "HEAD")
    r = b(team, "--json", "patch")
    assert r.code in (0, 3), r  # kept as a person's commit (or a refusal naming it)
    kept(src, mine, team.root.parent / "wsB" / "logs")


def test_a_revert_posing_as_the_forge_is_a_persons_commit(team: Series) -> None:
    """The variant: a revert of the last patch (its tree is the series' previous one),
    committed with the forge's committer name, email and date."""
    src = b_src(team)
    dated = sh_git(src, "log", "-1", "--format=%cd", "--date=raw")
    sh_git(src, "revert", "--no-edit", "HEAD", env={**POSING, "GIT_COMMITTER_DATE": dated})
    mine = sh_git(src, "rev-parse", "HEAD")
    r = b(team, "--json", "patch")
    assert r.code in (0, 3), r
    kept(src, mine, team.root.parent / "wsB" / "logs")


def test_the_record_names_the_commits_the_forge_made(team: Series) -> None:
    src = b_src(team)
    record = json.loads((src / ".git" / "dgr" / "series.json").read_text())
    made = sh_git(src, "rev-list", "--reverse", "--max-count=3", "HEAD").split()
    assert record["commits"] == made
    # a plain no-op patch keeps them; an export rewrites them to the canonical ones
    assert b(team, "patch").code == 0
    again = json.loads((src / ".git" / "dgr" / "series.json").read_text())
    assert again["commits"] == made
