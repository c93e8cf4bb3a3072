"""`dgr-forge status` (upstream part): pin, workspace commit, verification, local changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run_forge
from support.git import Upstream, sh_git
from support.roots import manifest_text

FORGE_COMMITTER = {"GIT_COMMITTER_NAME": "dgr-forge", "GIT_COMMITTER_EMAIL": "dgr-forge@invalid"}

# the documented `--json` fields of the "upstream" object
FIELDS = {
    "name",
    "url",
    "commit",
    "tree",
    "src_dir",
    "present",
    "head",
    "pin_present",
    "at_pin",
    "commits_on_top",
    "commit_verified",
    "pin_tree",
    "tree_verified",
    "shallow",
    "interrupted",
    "ignored",
    "local_changes",
    "local_commits",
    "build_number",
    "verified",
}


@pytest.fixture(autouse=True)
def _wide_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "10000")


def status(root: Path) -> dict[str, object]:
    r = run_forge("status", "--json", cwd=root)
    assert r.code == 0, r
    assert r.json["command"] == "status" and r.json["ok"] is True
    up = r.json["upstream"]
    assert set(up) == FIELDS
    return dict(up)


def src_of(root: Path) -> Path:
    return root / ".dgr" / "src" / "llama.cpp"


def test_status_before_any_fetch(forge_root: Path, upstream: Upstream) -> None:
    up = status(forge_root)
    assert up["present"] is False and up["verified"] is False and up["head"] is None
    assert up["commit"] == upstream.head and up["url"] == upstream.url
    r = run_forge("status", cwd=forge_root)
    assert "not fetched yet" in r.stdout and "dgr-forge fetch" in r.stdout
    assert not (forge_root / ".dgr").exists()  # status writes nothing


def test_status_after_fetch_is_verified(forge_root: Path, upstream: Upstream) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    up = status(forge_root)
    assert up["present"] is True and up["verified"] is True
    assert up["head"] == upstream.head and up["at_pin"] is True
    assert up["commit_verified"] is True and up["tree_verified"] is True
    assert up["pin_tree"] == upstream.tree(upstream.head) and up["shallow"] is True
    assert up["local_changes"] == [] and up["commits_on_top"] == 0
    r = run_forge("status", cwd=forge_root)
    assert f"at {upstream.head}" in r.stdout
    assert "verified  yes  (commit: yes, tree: yes, shallow)" in r.stdout


def test_status_lists_local_changes(forge_root: Path) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    (src / "README.md").write_text("edited\n")
    (src / "docs" / "notes-0.md").unlink()
    (src / "scratch.txt").write_text("new\n")
    up = status(forge_root)
    assert up["verified"] is False and up["commit_verified"] is True
    assert up["local_changes"] == [
        {"path": "README.md", "change": "modified"},
        {"path": "docs/notes-0.md", "change": "deleted"},
        {"path": "scratch.txt", "change": "untracked"},
    ]
    r = run_forge("status", cwd=forge_root)
    assert "local changes (3):" in r.stdout and "scratch.txt" in r.stdout


def test_status_lists_ignored_files_with_hostile_names_exactly(forge_root: Path) -> None:
    """The ignored files come from the walk that measures the workspace (porcelain v2, NUL
    separated): a name with a newline, a space or a leading dash is itself, an ignored
    directory is one entry, and none of them is a local change."""
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    exclude = src / ".git" / "info" / "exclude"
    exclude.write_text(exclude.read_text() + "*.o\n/out/\n")
    names = ["a\nb.o", "-rf .o", "docs/x y.o"]
    for name in names:
        (src / name).write_bytes(b"\0")
    (src / "out" / "deep").mkdir(parents=True)
    (src / "out" / "deep" / "z.bin").write_bytes(b"")
    up = status(forge_root)
    assert sorted(up["ignored"]) == sorted([*names, "out/"]), up["ignored"]
    assert up["local_changes"] == [] and up["verified"] is False


def test_status_counts_the_forges_commits_on_top(forge_root: Path) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    (src / "README.md").write_text("patched\n")
    sh_git(src, "commit", "-qam", "0001 patch", env=FORGE_COMMITTER)
    up = status(forge_root)
    assert up["verified"] is True and up["at_pin"] is False and up["commits_on_top"] == 1
    assert "(pin + 1 commits)" in run_forge("status", cwd=forge_root).stdout


def test_status_names_commits_not_made_by_the_forge(forge_root: Path) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    (src / "README.md").write_text("mine\n")
    sh_git(src, "commit", "-qam", "my commit")
    up = status(forge_root)
    assert up["verified"] is False and up["commit_verified"] is False
    assert up["local_commits"] == [f"{sh_git(src, 'rev-parse', 'HEAD')[:12]} my commit"]


def test_status_shows_a_tree_mismatch(forge_root: Path, upstream: Upstream) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    wrong = upstream.tree(upstream.commits[0])
    (forge_root / "manifests" / "llama.cpp.toml").write_text(
        manifest_text(upstream.url, upstream.head, wrong)
    )
    up = status(forge_root)
    assert up["tree_verified"] is False and up["verified"] is False and up["tree"] == wrong
    assert "tree: NO (mismatch)" in run_forge("status", cwd=forge_root).stdout


def test_status_with_a_bad_manifest_is_bad_input(forge_root: Path) -> None:
    (forge_root / "manifests" / "llama.cpp.toml").write_text("schema = 1\n[upstream]\n")
    r = run_forge("status", "--json", cwd=forge_root)
    assert r.code == 2, r
    assert "manifests/llama.cpp.toml" in r.stderr and r.json["ok"] is False


# ---------------------------------------------------------------------- truthful in every state


def test_status_during_a_rebase_conflict_shows_progress_not_local_commits(
    tmp_path: Path, upstream: Upstream
) -> None:
    from support.rebase import GGML_OLD, upstream_edit
    from support.rebase import make_series as make_rebase_series

    s = make_rebase_series(tmp_path, upstream)
    for i in range(12):  # upstream moves on: these are upstream's commits, nobody's local ones
        s.upstream.commit({f"docs/later-{i}.md": f"{i}\n"}, f"docs: later {i}")
    upstream_edit(s.upstream, "ggml/src/ggml.c", GGML_OLD, "    return -1;\n", "ggml: x")
    new = s.upstream.commit({"docs/last.md": "last\n"}, "docs: last")
    r = s.forge("rebase", "--onto", new)
    assert r.code == 3, r

    res = run_forge("--root", str(s.root), "--json", "status")
    assert res.code == 0, res
    # and its help says so: 0 covers a stopped rebase, 3 is only a killed write (issue 44)
    from dgr_forge.cli.options import USAGE

    zero, *_, three = USAGE["status"][1].split(" · ")
    assert zero.startswith("0 ") and "rebase" in zero and "conflict" in zero, zero
    assert three.startswith("3 ") and "killed" in three, three
    data = res.json
    assert data["rebase_in_progress"] is True
    assert data["patches"]["local_edits"]["local_commits"] == []
    assert data["upstream"]["local_commits"] == []
    rebase = data["rebase"]
    assert rebase["new_commit"] == new and rebase["patches_total"] == 3
    assert rebase["patches_done"] == 1 and rebase["stopped_at"].startswith("0002-")
    # each patch's own state matches the progress line (issue 19)
    states = [(p["file"][:5], p["state"]) for p in data["patches"]["series"]]
    assert states == [("0001-", "replayed"), ("0002-", "conflict"), ("0003-", "pending")]
    assert "ggml/src/ggml.c" in data["patches"]["series"][1]["detail"]
    human = run_forge("--root", str(s.root), "status").stdout
    assert "local commits" not in human, human
    assert "1 of 3 patches replayed" in human and "0002-" in human, human


def test_status_after_an_interrupted_fetch_is_truthful(forge_root: Path) -> None:
    r = run_forge("fetch", cwd=forge_root, env={"DGR_FAULT": "fetch.objects"})
    assert r.code in (-9, 137), r
    res = run_forge("--json", "status", cwd=forge_root)
    assert res.code == 0, res
    up = res.json["upstream"]
    assert up["interrupted"] is True and up["verified"] is False
    human = run_forge("status", cwd=forge_root).stdout
    assert "interrupted fetch" in human and "dgr-forge fetch" in human, human
    assert run_forge("fetch", cwd=forge_root).code == 0
    up = run_forge("--json", "status", cwd=forge_root).json["upstream"]
    assert up["verified"] is True and up["interrupted"] is False
