"""Several people, one series (issue 19): two workspaces on one forge root with real git.

A exports a new patch; B, still on the old series, cannot export over it (exit 3, nothing
written); `patch` brings B up to date and replays B's own commits on top; B's export then
appends after A's patch; a fresh workspace applies everything. A conflicting commit of
B's stops `patch` (exit 3) and `--continue` / `--abort` finish or undo it exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import Result
from support.git import Upstream, committed_head, sh_git
from support.rebase import make_series
from support.roots import Series

from dgr_forge.upstream.workspace import inspect

B_AUTHOR = {
    "GIT_AUTHOR_NAME": "Bea Teammate",
    "GIT_AUTHOR_EMAIL": "bea@team.invalid",
    "GIT_COMMITTER_NAME": "Bea Teammate",
    "GIT_COMMITTER_EMAIL": "bea@team.invalid",
    "GIT_AUTHOR_DATE": "2025-04-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2025-04-01T00:00:00Z",
}


@pytest.fixture
def team(tmp_path: Path, upstream: Upstream) -> Series:
    """A root with a three-patch series, patched in A (.dgr) and in B (tmp/wsB)."""
    s = make_series(tmp_path, upstream)
    assert b(s, "patch").code == 0
    return s


def b_ws(s: Series) -> Path:
    return s.root.parent / "wsB"


def b_src(s: Series) -> Path:
    return b_ws(s) / "src" / "llama.cpp"


def b(s: Series, *args: str) -> Result:
    return s.forge("--workspace", str(b_ws(s)), *args)


def commit(src: Path, rel: str, text: str, subject: str, env: dict[str, str] | None = None) -> str:
    path = src / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    sh_git(src, "add", "-A")
    sh_git(src, "commit", "-q", "-m", subject, "-m", f"Why: {subject}.", env=env or B_AUTHOR)
    return committed_head(src)


def a_exports_0004(s: Series) -> None:
    commit(s.src, "docs/team.md", "A's notes\n", "docs: team notes", env={})
    r = s.forge("export")
    assert r.code == 0, r
    assert "0004-docs-team-notes.patch" in s.patch_files()


def state_of(src: Path) -> tuple[str, str, str, dict[str, bytes]]:
    """HEAD, the symbolic ref, the history and every file: what --abort must restore."""
    files = {
        str(p.relative_to(src)): p.read_bytes()
        for p in sorted(src.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(src).parts
    }
    symbolic = sh_git(src, "rev-parse", "--symbolic-full-name", "HEAD")
    return sh_git(src, "rev-parse", "HEAD"), symbolic, sh_git(src, "log", "--format=%H %T"), files


def test_stale_export_stops_and_patch_keeps_own_commits(team: Series) -> None:
    s = team
    a_exports_0004(s)
    # B never saw 0004: its export would delete it
    before = s.snapshot()
    r = b(s, "--json", "export")
    assert r.code == 3, r
    assert "0004-docs-team-notes.patch" in r.json["error"] and "added" in r.json["error"]
    assert "dgr-forge patch" in r.json["hint"] and "export --force" in r.json["hint"]
    assert r.json["drift"]["added"] == ["0004-docs-team-notes.patch"]
    assert s.snapshot() == before
    st = b(s, "--json", "status")
    assert st.json["patches"]["moved_since_patched"]["added"] == ["0004-docs-team-notes.patch"]
    assert "moved since this workspace was patched" in b(s, "status").stdout
    # B commits its own work, then `patch` brings 0004 in and keeps B's commit on top
    mine = commit(b_src(s), "docs/bea.md", "Bea's notes\n", "docs: bea's notes")
    r = b(s, "--json", "patch")
    assert r.code == 0, r
    assert r.json["replayed"] == [mine]
    ws = inspect(b_src(s), s.pin, 4)
    assert len(ws.series) == 4 and len(ws.local_commits) == 1
    top = ws.local_commits[0]
    assert sh_git(b_src(s), "log", "-1", "--format=%an <%ae>|%cn|%B", top) == (
        "Bea Teammate <bea@team.invalid>|Bea Teammate|docs: bea's notes\n\nWhy: docs: bea's notes."
    )
    assert (b_src(s) / "docs" / "team.md").read_text() == "A's notes\n"
    assert (b_src(s) / "docs" / "bea.md").read_text() == "Bea's notes\n"
    # B's export appends 0005 and leaves A's 0004 byte-identical
    a4 = (s.patches_dir / "0004-docs-team-notes.patch").read_bytes()
    r = b(s, "--json", "export")
    assert r.code == 0, r
    assert r.json["written"] == ["0005-docs-bea-s-notes.patch"] and r.json["removed"] == []
    assert (s.patches_dir / "0004-docs-team-notes.patch").read_bytes() == a4
    # a fresh workspace applies all five; A, now stale, is refused in turn
    r = s.forge("--workspace", str(s.root.parent / "wsC"), "--json", "patch")
    assert r.code == 0 and len(r.json["patches"]) == 5, r
    assert s.forge("export").code == 3
    assert s.forge("patch").code == 0 and s.forge("export").code == 0
    assert len(s.patch_files()) == 5


def test_export_force_saves_what_it_replaces(team: Series) -> None:
    s = team
    a_exports_0004(s)
    before = s.snapshot()
    r = b(s, "--json", "export", "--force")
    assert r.code == 0, r
    assert r.json["removed"] == ["0004-docs-team-notes.patch"]
    saved = sorted((b_ws(s) / "logs").glob("export-replaced-llama.cpp-*"))
    assert len(saved) == 1 and r.json["replaced_saved"] == str(saved[0])
    assert (saved[0] / "llama.cpp.toml").read_bytes() == before["manifest"]
    for name, data in before.items():
        if name.endswith(".patch"):
            assert (saved[0] / "patches" / name).read_bytes() == data


def test_conflicting_own_commit_continue_and_abort(team: Series) -> None:
    s = team
    a_exports_0004(s)
    src = b_src(s)
    mine = commit(src, "docs/team.md", "B's notes\n", "docs: bea's team notes")
    sh_git(src, "switch", "-q", "-c", "bea")  # on a branch: --abort puts it back on it
    before = state_of(src)
    r = b(s, "--json", "patch")
    assert r.code == 3, r
    assert mine[:12] in r.json["error"] and "docs/team.md" in r.json["error"]
    assert "patch --continue" in r.json["hint"] and "patch --abort" in r.json["hint"]
    # everything else waits for the replay; status shows where it stands
    assert b(s, "export").code == 3 and b(s, "fetch").code == 3
    st = b(s, "--json", "status")
    states = [p["state"] for p in st.json["patches"]["series"]]
    assert states == ["applied"] * 4, st
    assert st.json["patches"]["replay"]["conflict"] == mine
    # --abort restores B exactly: HEAD, branch, history, files
    r = b(s, "patch", "--abort")
    assert r.code == 0, r
    assert state_of(src) == before
    assert b(s, "export").code == 3  # still stale, still refused
    # again, resolved this time
    assert b(s, "patch").code == 3
    (src / "docs" / "team.md").write_text("A's notes\nB's notes\n")
    assert b(s, "patch", "--continue").code == 3  # not yet added: still unmerged
    sh_git(src, "add", "docs/team.md")
    r = b(s, "--json", "patch", "--continue")
    assert r.code == 0, r
    assert sh_git(src, "rev-parse", "--symbolic-full-name", "HEAD") == "refs/heads/bea"
    ws = inspect(src, s.pin, 4)
    assert len(ws.series) == 4 and len(ws.local_commits) == 1
    a4 = (s.patches_dir / "0004-docs-team-notes.patch").read_bytes()
    r = b(s, "--json", "export")
    assert r.code == 0, r
    assert r.json["written"] == ["0005-docs-bea-s-team-notes.patch"]
    assert (s.patches_dir / "0004-docs-team-notes.patch").read_bytes() == a4
    r = s.forge("--workspace", str(s.root.parent / "wsC"), "patch")
    assert r.code == 0, r


def test_patch_without_a_replay_has_nothing_to_continue(team: Series) -> None:
    r = b(team, "--json", "patch", "--continue")
    assert r.code == 2 and "no patch replay" in r.json["error"], r
    assert b(team, "patch", "--continue", "--abort").code == 2


HOSTILE_STATES = [
    "not json",
    '{"orig_head": "--exec=touch PWNED", "orig_ref": null, "commits": [], '
    '"stopped_at": "' + "a" * 40 + '"}',
    '{"orig_head": "' + "a" * 40 + '", "orig_ref": "refs/heads/../../x", "commits": [], '
    '"stopped_at": "' + "a" * 40 + '"}',
    '{"orig_head": "' + "a" * 40 + '", "orig_ref": null, "commits": ["-x"], "position": 9}',
]


def test_hostile_replay_state_runs_nothing_and_blocks_nothing(team: Series) -> None:
    src = b_src(team)
    head_before = sh_git(src, "rev-parse", "HEAD")
    for state in HOSTILE_STATES:
        (src / ".git" / "dgr-replay.json").write_text(state)
        r = b(team, "--json", "patch", "--abort")
        assert r.code == 2 and "not a readable patch replay state" in r.json["error"], r
        assert not (src / ".git" / "dgr-replay.json").exists()
        assert not list(src.rglob("PWNED")) and not (src.parent / "PWNED").exists()
        assert sh_git(src, "rev-parse", "HEAD") == head_before
    # one that claims a stop: plain commands wait for it, and the --abort they name clears it
    (src / ".git" / "dgr-replay.json").write_text(HOSTILE_STATES[1])
    r = b(team, "--json", "patch")
    assert r.code == 3 and "patch --abort" in r.json["hint"], r
    assert b(team, "patch", "--abort").code == 2
    assert b(team, "patch").code == 0


def test_garbage_series_record_falls_back_to_the_trees(team: Series) -> None:
    """A record that is not one (hand-edited, truncated) is ignored: a workspace whose
    commits carry the manifest's trees exports; a stale one is still refused."""
    record = b_src(team) / ".git" / "dgr" / "series.json"
    record.write_text('{"commit": "-x", "series": [["../../etc/passwd", 1]]}')
    assert b(team, "export").code == 0
    a_exports_0004(team)
    record.write_text("garbage")
    before = team.snapshot()
    r = b(team, "--json", "export")
    assert r.code == 3 and "no record" in r.json["error"], r
    assert team.snapshot() == before


def test_teammates_rebase_moved_the_pin_patch_replays_onto_it(team: Series) -> None:
    """A's rebase moves the pin and re-exports; B (own commit, old pin) is refused by
    export naming the pin move, and `patch` carries B's commit onto the new pin."""
    s = team
    new = s.upstream.commit({"docs/upstream-later.md": "later\n"}, "docs: later")
    assert s.forge("rebase", "--onto", new).code == 0
    mine = commit(b_src(s), "docs/bea.md", "Bea's notes\n", "docs: bea's notes")
    before = s.snapshot()
    r = b(s, "--json", "export")
    assert r.code == 3 and "pin moved" in r.json["error"], r
    assert r.json["drift"]["pin_moved"][1] == new
    assert s.snapshot() == before
    r = b(s, "--json", "patch")
    assert r.code == 0 and r.json["replayed"] == [mine] and r.json["base_commit"] == new, r
    r = b(s, "--json", "export")
    assert r.code == 0 and r.json["written"] == ["0004-docs-bea-s-notes.patch"], r


def test_git_pull_of_a_teammates_patch_then_patch_and_export(team: Series, tmp_path: Path) -> None:
    """The same through git: B's own clone of the forge root pulls A's exported patch."""
    s = team
    (s.root / ".gitignore").write_text(".dgr/\n")
    sh_git(s.root, "init", "-q")
    sh_git(s.root, "add", "-A")
    sh_git(s.root, "commit", "-qm", "series")
    clone = tmp_path / "clone"
    sh_git(tmp_path, "clone", "-q", str(s.root), str(clone))
    mine_root = Series(clone, s.upstream, s.pin)
    assert mine_root.forge("patch").code == 0
    a_exports_0004(s)
    sh_git(s.root, "add", "-A")
    sh_git(s.root, "commit", "-qm", "0004")
    src = clone / ".dgr" / "src" / "llama.cpp"
    mine = commit(src, "docs/bea.md", "Bea's notes\n", "docs: bea's notes")
    sh_git(clone, "pull", "-q", "--ff-only")
    before = mine_root.snapshot()
    r = mine_root.forge("--json", "export")
    assert r.code == 3 and r.json["drift"]["added"] == ["0004-docs-team-notes.patch"], r
    assert mine_root.snapshot() == before
    r = mine_root.forge("--json", "patch")
    assert r.code == 0 and r.json["replayed"] == [mine], r
    r = mine_root.forge("--json", "export")
    assert r.code == 0 and r.json["written"] == ["0005-docs-bea-s-notes.patch"], r
    # the pulled patch untouched: only the manifest changes and 0005 is new
    assert sh_git(clone, "diff", "--name-only") == "manifests/llama.cpp.toml"
    new_files = sh_git(clone, "ls-files", "--others", "--exclude-standard")
    assert new_files == "patches/llama.cpp/0005-docs-bea-s-notes.patch"


@pytest.mark.parametrize(
    "text",
    [
        '{"commit": 7, "series": []}',
        '{"commit": "%s", "series": [["0001.patch", 5]]}' % ("a" * 40),
        '{"commit": "%s", "series": "0001.patch"}' % ("a" * 40),
        '{"series": []}',
        '{"commit": "not hex", "series": []}',
        "[]",
        "{",
        "",
    ],
)
def test_a_damaged_series_record_is_no_record(tmp_path: Path, text: str) -> None:
    """`.git/dgr/series.json` is decoded as its type (series_base.SeriesBase): a damaged
    one is no record (export then asks, as for a workspace without one), never a crash; a
    written one reads back equal, its trees kept."""
    from dgr_forge.upstream import series_base

    (tmp_path / ".git" / "dgr").mkdir(parents=True)
    path = tmp_path / ".git" / series_base.BASE_FILE
    path.write_text(text)
    assert series_base.load(tmp_path) is None
    base = series_base.SeriesBase("b" * 40, (("0001-x.patch", "0" * 64),), ("c" * 40,))
    series_base.record(tmp_path, base)
    again = series_base.load(tmp_path)
    assert again == base and again is not None and again.trees == base.trees


def test_own_commits_are_replayed_by_the_engine_without_a_cherry_pick(team: Series) -> None:
    """`patch` replays a person's commits onto the moved series in memory (the replay
    engine): no `git cherry-pick` moves HEAD through the work tree once a commit, the work
    tree moves once, and each commit keeps its author, committer, date and message."""
    s = team
    a_exports_0004(s)
    mine = [commit(b_src(s), f"docs/b{i}.md", f"b{i}\n", f"docs: b{i}") for i in range(3)]
    before = [sh_git(b_src(s), "log", "-1", "--format=%an|%ae|%ad|%cn|%ce|%cd|%B", c) for c in mine]
    r = b(s, "--json", "patch")
    assert r.code == 0, r
    assert r.json["replayed"] == mine
    moves = sh_git(b_src(s), "reflog", "--format=%gs").splitlines()
    assert [m for m in moves if m.startswith("cherry-pick")] == [], moves
    top = sh_git(b_src(s), "rev-list", "--reverse", "-3", "HEAD").split()
    assert [
        sh_git(b_src(s), "log", "-1", "--format=%an|%ae|%ad|%cn|%ce|%cd|%B", c) for c in top
    ] == before
    assert sorted(p.name for p in (b_src(s) / "docs").glob("b*.md")) == ["b0.md", "b1.md", "b2.md"]
    assert (b_src(s) / "docs" / "team.md").read_text() == "A's notes\n"
    assert sh_git(b_src(s), "status", "--porcelain") == ""
