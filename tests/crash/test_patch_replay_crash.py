"""Crash safety of `patch` replaying a person's commits on a moved series (issue 19): a
SIGKILL at each fault point, then the next plain `patch` completes with the commits kept,
exactly as an uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.git import Upstream, sh_git
from support.rebase import make_series
from support.roots import Series

from dgr_forge.upstream.workspace import inspect

KILLED = (-9, 137)
MINE = {
    "GIT_AUTHOR_NAME": "Bea",
    "GIT_AUTHOR_EMAIL": "bea@team.invalid",
    "GIT_COMMITTER_NAME": "Bea",
    "GIT_COMMITTER_EMAIL": "bea@team.invalid",
    "GIT_AUTHOR_DATE": "2025-04-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2025-04-01T00:00:00Z",
}


def _commit(src: Path, rel: str, text: str, subject: str, env: dict[str, str]) -> str:
    (src / rel).parent.mkdir(parents=True, exist_ok=True)
    (src / rel).write_text(text)
    sh_git(src, "add", "-A")
    sh_git(src, "commit", "-q", "-m", subject, env=env)
    return sh_git(src, "rev-parse", "HEAD")


@pytest.mark.parametrize("point", ["patch.replay-saved", "patch.replayed", "patch.applied"])
def test_replay_killed_then_patch_completes(tmp_path: Path, upstream: Upstream, point: str) -> None:
    s: Series = make_series(tmp_path, upstream)
    ws_b = tmp_path / "wsB"
    b_src = ws_b / "src" / "llama.cpp"
    assert s.forge("--workspace", str(ws_b), "patch").code == 0
    _commit(s.src, "docs/team.md", "A\n", "docs: team", {})
    assert s.forge("export").code == 0
    mine = [
        _commit(b_src, "docs/b1.md", "b1\n", "docs: b1", MINE),
        _commit(b_src, "docs/b2.md", "b2\n", "docs: b2", MINE),
    ]
    r = s.forge("--workspace", str(ws_b), "patch", env={"DGR_FAULT": f"{point}:kill"})
    assert r.code in KILLED, r
    # nothing lost meanwhile: the commits are reachable, and the next plain run completes
    assert sh_git(b_src, "cat-file", "-t", mine[-1]) == "commit"
    r = s.forge("--workspace", str(ws_b), "--json", "patch")
    assert r.code == 0, r
    ws = inspect(b_src, s.pin, 4)
    assert len(ws.series) == 4 and len(ws.local_commits) == 2
    subjects = sh_git(b_src, "log", "-2", "--format=%s|%ae|%ce").splitlines()
    assert subjects == [f"docs: {n}|bea@team.invalid|bea@team.invalid" for n in ("b2", "b1")]
    assert not (b_src / ".git" / "dgr-replay.json").exists()
    assert sh_git(b_src, "status", "--porcelain") == ""
    r = s.forge("--workspace", str(ws_b), "--json", "export")
    assert r.code == 0 and len(r.json["written"]) == 2, r
