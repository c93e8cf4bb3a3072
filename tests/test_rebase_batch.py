"""The batch replay (one squash merge, one fast-import) makes exactly the commits the
per-patch replay makes (one merge and one commit-tree a patch), and stops where it cannot.

Each case builds a base B, an upstream N on it and a series O_1..O_n on B, then replays
the series onto N both ways and compares commit ids: the batch's must be the per-patch
replay's first ones, and it must cover as many patches as the case says.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.git import committed_head, sh_git

from dgr_forge.core import gitutil
from dgr_forge.upstream.rebase.replay import Known, record
from dgr_forge.upstream.rebase.state import PatchStep, RebaseState
from dgr_forge.upstream.replay import (
    CommitWriter,
    commit_objects,
    commit_parents,
    committable,
    merge,
    replay_batch,
)
from dgr_forge.upstream.workspace import git_dir

Files = dict[str, str | None]  # path -> text (None: delete)
LINES = "".join(f"line {n}\n" for n in range(1, 41))


def _write(repo: Path, files: Files) -> None:
    for rel, text in sorted(files.items(), key=lambda kv: kv[1] is not None):  # deletes first
        path = repo / rel
        if text is None:
            if path.is_symlink() or path.is_file():
                path.unlink()
            while path.parent != repo and not any(path.parent.iterdir()):
                path.parent.rmdir()  # git keeps no empty directories: nor does the test
                path = path.parent
            continue
        if path.is_file() and not path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        if text.startswith("->"):  # a symlink to the rest
            path.unlink(missing_ok=True)
            os.symlink(text[2:], path)
        elif text.startswith("+x "):
            path.write_text(text[3:])
            path.chmod(0o755)
        else:
            path.write_text(text)
            path.chmod(0o644)


def _commit(repo: Path, parent: str, files: Files, message: str, env: dict[str, str]) -> str:
    # HEAD already at `parent` right after its own `add -A` + commit: a clean tree there
    if committed_head(repo) != parent:
        sh_git(repo, "checkout", "-q", "-f", "--detach", parent)
    _write(repo, files)
    sh_git(repo, "add", "-A")
    sh_git(repo, "commit", "-q", "--allow-empty", "-m", message, env=env)
    return committed_head(repo)


def _raw_commit(repo: Path, like: str, author: bytes, message: bytes) -> str:
    """A copy of commit `like` with its author line and message replaced, written as is."""
    head = sh_git(repo, "cat-file", "commit", like).split("\n\n", 1)[0].splitlines()
    keep = [ln.encode() for ln in head if ln.startswith(("tree ", "parent ", "committer "))]
    body = b"\n".join([*keep[:-1], b"author " + author, keep[-1]]) + b"\n\n" + message
    proc = subprocess.run(
        ["git", "hash-object", "-t", "commit", "-w", "--stdin", "--literally"],
        cwd=repo,
        input=body,
        capture_output=True,
        check=True,
    )
    return proc.stdout.decode().strip()


@dataclass
class Case:
    upstream: Files
    series: list[Files]
    covered: int  # how many patches the batch must replay
    # (index, author line, message): a patch commit rewritten with these raw bytes
    raw: list[tuple[int, bytes, bytes]] | None = None


AUTHOR = {
    "GIT_AUTHOR_NAME": "Pat Cher",
    "GIT_AUTHOR_EMAIL": "pat@example.invalid",
    "GIT_AUTHOR_DATE": "@1700000000 +0200",
}


def _edit(n: int, text: str = LINES, what: str = "dgr") -> str:
    return text.replace(f"line {n}\n", f"line {n} {what}\n")


BASE: Files = {
    "src/a.c": LINES,
    "src/b.c": LINES,
    "src/c.c": LINES,
    "docs/x.md": "x\n",
    "tool.sh": "+x echo\n",
    "link": "->src/a.c",
    'odd name/it\'s "q"\tz.c': LINES,
}

CASES: dict[str, Case] = {
    # like bench.rebase: upstream moves lines in some patched files
    "refreshed-and-unchanged": Case(
        {"src/a.c": "/* up */\n" + LINES, "docs/x.md": "x2\n"},
        [{"src/a.c": _edit(20)}, {"src/b.c": _edit(20)}, {"src/c.c": _edit(5)}],
        covered=3,
    ),
    # a file only the series changes, changed by several patches; adds, deletes, modes,
    # symlinks, a file that becomes a directory, awkward paths (non-ASCII, a control byte)
    "many-kinds": Case(
        {"src/a.c": "/* up */\n" + LINES},
        [
            {"src/b.c": _edit(3), "new/file.txt": "n\n", "src/café ✓\x01.c": "c\n"},
            {"src/b.c": _edit(3, _edit(9)), "docs/x.md": None},
            {"tool.sh": "echo\n", "link": "->src/b.c"},
            {"new/file.txt": None, "new": "now a file\n"},
            {'odd name/it\'s "q"\tz.c': _edit(1), "src/a.c": _edit(30)},
        ],
        covered=5,
    ),
    # upstream took patch 2 already: it drops; the rest goes on
    "upstreamed": Case(
        {"src/b.c": _edit(7)},
        [{"src/a.c": _edit(1)}, {"src/b.c": _edit(7)}, {"src/c.c": _edit(2)}],
        covered=3,
    ),
    # a path upstream changed that two patches change: the batch stops at the first
    "shared-upstream-path": Case(
        {"src/a.c": "/* up */\n" + LINES},
        [{"src/b.c": _edit(1)}, {"src/a.c": _edit(10)}, {"src/a.c": _edit(10, _edit(30))}],
        covered=1,
    ),
    # a conflict: the batch stops before its patch (the per-patch replay shows it)
    "conflict": Case(
        {"src/c.c": _edit(5, what="upstream")},
        [{"src/a.c": _edit(1)}, {"src/c.c": _edit(5)}],
        covered=1,
    ),
    # ... the patches before it, in upstream's paths too, are batched; none after it
    "conflict-mid-series": Case(
        {"src/a.c": "/* up */\n" + LINES, "src/c.c": _edit(5, what="upstream")},
        [{"src/a.c": _edit(9)}, {"src/b.c": _edit(1)}, {"src/c.c": _edit(5)}, {"d.c": "x\n"}],
        covered=2,
    ),
    # the first patch conflicts: no batch
    "conflict-first": Case(
        {"src/c.c": _edit(5, what="upstream")},
        [{"src/c.c": _edit(5)}, {"src/a.c": _edit(1)}],
        covered=0,
    ),
    # the series changes .gitattributes, which steers merges: no batch
    "gitattributes": Case(
        {"src/a.c": "/* up */\n" + LINES},
        [{".gitattributes": "*.c text\n"}, {"src/a.c": _edit(3)}],
        covered=0,
    ),
    # a path one side changes is a directory of one the other changes: no batch
    "directory-crossing": Case(
        {"docs/x.md": None, "docs": "a file now\n"},
        [{"src/a.c": _edit(3)}, {"docs/x.md": "patched\n"}],
        covered=0,
    ),
    # author lines and messages: the ones commit-tree writes back as they are go in the
    # batch; the first it would rewrite stops it
    "idents": Case(
        {"src/a.c": "/* up */\n" + LINES},
        [{"src/a.c": _edit(3)}, {"src/b.c": _edit(3)}, {"src/c.c": _edit(3)}],
        covered=2,
        raw=[
            (0, "Zoë Ünïcode <z@x.invalid> 1700000000 +0530".encode(), "ünï ✓\n\nbody\n".encode()),
            (1, b"A <a@x.invalid> 0 -0130", b"no newline at the end"),
            (2, b"Trailing Dot. <t@x.invalid> 1700000000 +0000", b"dot\n"),
        ],
    ),
}


def _build(tmp_path: Path, case: Case) -> tuple[Path, str, list[str]]:
    repo = tmp_path / "repo"
    repo.mkdir()
    sh_git(repo, "init", "-q")
    _write(repo, BASE)
    sh_git(repo, "add", "-A")
    sh_git(repo, "commit", "-q", "-m", "base")
    base = committed_head(repo)
    new = _commit(repo, base, case.upstream, "upstream", {})
    commits: list[str] = []
    parent = base
    for n, files in enumerate(case.series):
        commit = _commit(repo, parent, files, f"dgr: patch {n}\n\nwhy {n}", AUTHOR)
        for index, author, message in case.raw or []:
            if index == n:
                commit = _raw_commit(repo, commit, author, message)
        commits.append(commit)
        parent = commit
    return repo, new, commits


def _state(repo: Path, new: str, commits: list[str]) -> RebaseState:
    steps = [
        PatchStep(file=f"{n:04d}-p.patch", subject="", old_commit=c) for n, c in enumerate(commits)
    ]
    return RebaseState(
        upstream="u",
        src_dir=str(repo),
        old_url="",
        new_url="",
        old_commit="",
        old_tree="",
        old_head=commits[-1],
        new_commit=new,
        new_tree=gitutil.tree_of(repo, new),
        onto=new,
        inputs_sha256="",
        fetch_url="",
        patches=steps,
        head=new,
    )


def _per_patch(repo: Path, state: RebaseState) -> list[str | None]:
    """The per-patch replay's commits (None: dropped) up to the first conflict."""
    objects = commit_objects(repo, [s.old_commit for s in state.patches])
    made: list[str | None] = []
    for step in state.patches:
        head_tree = gitutil.tree_of(repo, state.head)
        parent = commit_parents(objects[step.old_commit])[0]
        found = merge(repo, head_tree, parent, step.old_commit)
        tree = found.tree if not found.files else None
        if tree is None:
            break
        gitutil.git(repo, "read-tree", tree)
        record(repo, state, resolved=False)
        made.append(step.new_commit)
    return made


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_batch_makes_the_per_patch_replays_commits(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    repo, new, commits = _build(tmp_path, case)
    state = _state(repo, new, commits)
    objects = commit_objects(repo, commits)
    batch = replay_batch(repo, commits, new, state.new_tree, objects)
    assert len(batch) == case.covered, batch
    expected = _per_patch(repo, _state(repo, new, commits))
    assert batch == expected[: len(batch)]
    if name == "upstreamed":
        assert batch[1] is None and batch[0] is not None and batch[2] is not None


@pytest.mark.parametrize(
    ("author", "message", "ok"),
    [
        (b"A B <a@b.invalid> 1700000000 +0000", b"m\n", True),
        (b"A B <a@b.invalid> 1700000000 -0000", b"m\n", False),  # commit-tree writes +0000
        (b"A B <a@b.invalid> 1700000000 +0099", b"m\n", False),  # ... +0139
        (b"A B <a@b.invalid> 01700000000 +0000", b"m\n", False),  # ... no leading zero
        (b" A B <a@b.invalid> 1700000000 +0000", b"m\n", False),  # ... no leading space
        (b"A B, <a@b.invalid> 1700000000 +0000", b"m\n", False),  # ... no trailing comma
        (b"A B <a@b.invalid> 1700000000 +0000", b"caf\xe9\n", False),  # Latin-1: re-encoded
        (b"A B <a@b.invalid> 1700000000 +0000", "\ufffe\n".encode(), False),
        (b"A B <a@b.invalid> 1700000000 +0000", b"nul\0\n", False),
        (b"A B <> 1700000000 +0000", b"m\n", False),
    ],
)
def test_committable_only_what_commit_tree_writes_back(
    author: bytes, message: bytes, ok: bool
) -> None:
    raw = b"tree " + b"0" * 40 + b"\nauthor " + author + b"\ncommitter c <c> 1 +0000\n\n" + message
    got = committable(raw)
    assert (got is not None) == ok, got


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_commit_writer_makes_the_commits_commit_tree_makes(tmp_path: Path, name: str) -> None:
    """The per-patch replay with its one long-running writer (the scratch bases and the
    patch commits) against the same replay with a commit-tree process for each."""
    repo, new, commits = _build(tmp_path, CASES[name])
    expected = _per_patch(repo, _state(repo, new, commits))
    state = _state(repo, new, commits)
    known = Known(repo, state, state.new_tree)
    made: list[str | None] = []
    try:
        for step in state.patches:
            head_tree = gitutil.tree_of(repo, state.head)
            parent = commit_parents(known.objects[step.old_commit])[0]
            assert known.writer.scratch_base(head_tree, parent) is not None
            found = merge(repo, head_tree, parent, step.old_commit, known.writer)
            tree = found.tree if not found.files else None
            if tree is None:
                break
            gitutil.git(repo, "read-tree", tree)
            record(repo, state, resolved=False, known=known)
            made.append(step.new_commit)
    finally:
        known.writer.close()
    assert made == expected
    assert not (git_dir(repo) / "dgr" / "commit-object").exists()  # nothing left behind


def test_an_object_git_refuses_leaves_the_writer_to_commit_tree(tmp_path: Path) -> None:
    repo, new, _ = _build(tmp_path, CASES[sorted(CASES)[0]])
    writer = CommitWriter(repo, git_dir(repo))
    tree = gitutil.tree_of(repo, new)
    assert writer.write(b"not a commit\n") is None  # hash-object refused it, and exited
    assert writer.commit(tree, new, (b"author A <a@b> 1 +0000", b"1 +0000", b"m\n")) is None
    writer.close()
    # a fresh writer writes what commit-tree writes
    writer = CommitWriter(repo, git_dir(repo))
    made = writer.commit(tree, new, (b"author A <a@b> 1 +0000", b"1 +0000", b"m\n"))
    writer.close()
    env = {
        "GIT_AUTHOR_NAME": "A",
        "GIT_AUTHOR_EMAIL": "a@b",
        "GIT_AUTHOR_DATE": "@1 +0000",
        "GIT_COMMITTER_DATE": "@1 +0000",
        **gitutil.FORGE_IDENTITY,
    }
    by_git = gitutil.out(repo, "commit-tree", tree, "-p", new, input="m\n", env=env)
    assert made == by_git
