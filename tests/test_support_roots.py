"""The suite's shortcuts give what the long way gives: an authored series handed out again
is the series plain git makes, a canonical root copied from another worker is the root the
forge makes at that path, the run's scratch directory is chosen as documented, and the
longest-first order names files that exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import roots, scratch
from support.cli import run_forge
from support.git import Upstream, committed_head, copy_upstream, sh_git
from support.rebase import SERIES, _replace
from support.roots import CANONICAL, UPSTREAM_AUTHOR, Edit, make_root
from support.schedule import LONGEST_FIRST

REPO = Path(__file__).resolve().parent.parent


def _edits() -> list[Edit]:
    return [Edit({rel: _replace(old, new)}, subject) for subject, rel, old, new in SERIES]


def _own_edits() -> list[Edit]:
    """A series no other test makes: the caches cannot already hold it."""
    return [Edit(e.files, e.subject, "Made by test_support_roots only.") for e in _edits()]


def test_a_series_handed_out_again_is_the_one_plain_git_makes(
    upstream: Upstream, tmp_path: Path
) -> None:
    key = roots._authoring_key(upstream, _edits(), upstream.head, CANONICAL, None, roots.fixed_date)
    assert key is not None
    first = roots.author_patches(upstream, _edits())
    assert key in roots._AUTHORED
    again = roots.author_patches(copy_upstream(upstream, tmp_path / "other"), _edits())
    made = roots.author_patches(upstream, _edits(), scratch=tmp_path / "scratch")  # no cache
    assert first == again == made


def test_the_authoring_key_tells_inputs_apart_and_gives_up_when_unsure(
    upstream: Upstream,
) -> None:
    def key(edits: list[Edit], **kw: object) -> str | None:
        args: dict[str, Any] = {
            "pin": upstream.head,
            "flags": CANONICAL,
            "author": None,
            "date": roots.fixed_date,
            **kw,
        }
        return roots._authoring_key(upstream, edits, **args)

    base = key(_edits())
    other_subject = [*_edits()[:2], Edit(_edits()[2].files, "tools: another subject")]
    other_text = [*_edits()[:2], Edit({"tools/main.cpp": "int main() { return 1; }\n"}, "t")]
    variants = [
        key(other_subject),
        key(other_text),
        key(_edits(), flags=roots.PLAIN),
        key(_edits(), author=UPSTREAM_AUTHOR),
        key(_edits(), date=lambda i: f"2025-03-01T00:00:{i:02d}Z"),
    ]
    assert None not in variants and len({base, *variants}) == 6
    assert key(_edits(), pin=upstream.commits[0]) is None  # not the checked-out commit
    assert key([Edit({"no/such/file.c": lambda t: t + "x"}, "s")]) is None
    (upstream.path / "README.md").write_text("a local edit\n")
    assert key(_edits()) is None  # a dirty work tree: what the clone sees is unknown


def test_a_canonical_root_from_another_worker_is_the_one_made_here(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker A canonicalizes a root and shares it; worker B (another process) copies it to
    its own path. B's root holds the bytes and the workspace a fresh `patch` + `export` at
    that path gives."""
    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.setenv(roots.SHARED_DIR_ENV, str(shared))
    made_here = make_root(
        tmp_path / "a" / "forge", upstream, _own_edits(), how="forge", names="git", trees=False
    ).root
    assert len(list((shared / "canonical").iterdir())) == 1
    # worker B: another process, another upstream copy at another (longer) path
    other_up = copy_upstream(upstream, tmp_path / "b-worker" / "upstream")
    script = (
        "import sys; sys.path[:0] = sys.argv[3:]\n"
        "from pathlib import Path\n"
        "from support.git import Upstream\n"
        "from support.roots import make_root\n"
        "from test_support_roots import _own_edits\n"
        "up = Upstream(Path(sys.argv[1]), [])\n"
        "up.commits.append(__import__('support.git').git.sh_git(up.path, 'rev-parse', 'HEAD'))\n"
        "make_root(Path(sys.argv[2]), up, _own_edits(), how='forge', names='git', trees=False)\n"
    )
    copied = tmp_path / "b-worker" / "deeper" / "forge"
    tests = str(REPO / "tests")
    subprocess.run(
        [sys.executable, "-c", script, str(other_up.path), str(copied), tests, str(REPO / "src")],
        check=True,
        env={**_env(), roots.SHARED_DIR_ENV: str(shared)},
    )
    # the long way, as canonicalize takes it on a miss: the real `patch` and `export`
    fresh_up = copy_upstream(upstream, tmp_path / "c" / "upstream")
    fresh = make_root(
        tmp_path / "c" / "forge", fresh_up, _own_edits(), names="git", trees=False
    ).root
    for command in ("patch", "export"):
        assert run_forge("--root", str(fresh), command).code == 0
    assert _series_bytes(copied) == _series_bytes(fresh) == _series_bytes(made_here)
    manifest = (copied / "manifests" / "llama.cpp.toml").read_text()
    assert other_up.url in manifest and str(upstream.path) not in manifest
    src = copied / ".dgr" / "src" / "llama.cpp"
    assert sh_git(src, "rev-parse", "HEAD^{tree}") == sh_git(
        fresh / ".dgr" / "src" / "llama.cpp", "rev-parse", "HEAD^{tree}"
    )
    assert sh_git(src, "status", "--porcelain", "--untracked-files=all") == ""
    for path in [*copied.rglob("*")]:
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 1 << 20:
            data = path.read_bytes()
            for a_path in (tmp_path / "a", upstream.path):  # nothing of A's paths
                assert str(a_path).encode() not in data, path
    status = run_forge("--root", str(copied), "--json", "status")
    assert status.code == 0, status
    assert [p["state"] for p in status.json["patches"]["series"]] == ["applied"] * 3, status


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DGR_")}


def _series_bytes(root: Path) -> dict[str, bytes]:
    files = {
        p.name: p.read_bytes() for p in sorted((root / "patches" / "llama.cpp").glob("*.patch"))
    }
    text = (root / "manifests" / "llama.cpp.toml").read_text()
    files["manifest (URL left out)"] = "\n".join(
        line for line in text.splitlines() if not line.startswith("url = ")
    ).encode()
    return files


def test_the_scratch_directory_is_chosen_as_documented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(scratch.CHOICE_ENV, "system")
    assert scratch.choose() is None
    monkeypatch.setenv(scratch.CHOICE_ENV, str(tmp_path / "mine"))
    assert scratch.choose() == tmp_path / "mine"
    monkeypatch.delenv(scratch.CHOICE_ENV)
    # the default: /dev/shm only when it is a tmpfs with room (never a disk directory)
    chosen = scratch.choose()
    assert chosen in (None, scratch.SHM)
    assert (chosen is not None) == (scratch._is_tmpfs(scratch.SHM) and scratch._roomy(scratch.SHM))
    assert not scratch._is_tmpfs(tmp_path) or str(tmp_path).startswith(str(scratch.SHM))
    assert not scratch._roomy(tmp_path / "missing")


def test_the_longest_first_order_names_test_files_that_exist() -> None:
    """A renamed or removed file would drop out of the order silently."""
    names = {p.name for p in (REPO / "tests").rglob("test_*.py")}
    assert set(LONGEST_FIRST) <= names, set(LONGEST_FIRST) - names
    assert "--no-loadscope-reorder" in (REPO / "pyproject.toml").read_text()


def test_the_head_read_after_a_commit_is_the_one_git_names(upstream: Upstream) -> None:
    """committed_head reads what `git commit` wrote: on a branch whose ref was packed, on a
    detached HEAD, and in a linked worktree (where .git is a file) it asks git."""
    repo = upstream.path
    sh_git(repo, "pack-refs", "--all")
    for step in ("on a branch", "detached"):
        if step == "detached":
            sh_git(repo, "checkout", "-q", "--detach")
        (repo / "step.txt").write_text(step)
        sh_git(repo, "add", "-A")
        sh_git(repo, "commit", "-q", "-m", step)
        assert committed_head(repo) == sh_git(repo, "rev-parse", "HEAD"), step
    linked = repo.parent / "linked"
    sh_git(repo, "worktree", "add", "-q", "--detach", str(linked))
    (linked / "step.txt").write_text("linked")
    sh_git(linked, "commit", "-q", "-am", "in a linked worktree")
    assert committed_head(linked) == sh_git(linked, "rev-parse", "HEAD")
    assert committed_head(linked) != committed_head(repo)
