"""The one three-way replay engine: a chain of commits merged onto a new head, in memory.

Each commit is cherry-pick's 3-way merge by `git merge-tree`, restamped or kept as it is; one
merge and one `fast-import` stand for many only where that gives every patch's exact tree
(docs/architecture.md, 'The replay engine').
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, Self, cast

from msgspec import Struct

from dgr_forge.core import gitutil
from dgr_forge.core.errors import OperationFailed
from dgr_forge.core.gitutil import FORGE_IDENTITY, HEX40, c_quote, git

Meta = tuple[bytes, bytes, bytes]  # (author line, date, message) of a restamped commit

COMMITTER = (
    f"committer {FORGE_IDENTITY['GIT_COMMITTER_NAME']} <{FORGE_IDENTITY['GIT_COMMITTER_EMAIL']}> "
).encode()
# the identity and date of the merge's scratch base: fixed, so the same merge writes the
# same object (git's own commit-tree would stamp it with the clock)
_SCRATCH_IDENT = "dgr-forge <dgr-forge@invalid> 0 +0000"
_SCRATCH_TAIL = f"author {_SCRATCH_IDENT}\ncommitter {_SCRATCH_IDENT}\n\ndgr-forge replay base\n"

# what git's ident code strips from the ends of a name or email ('.' too: older gits did)
_CRUD = frozenset(range(33)) | frozenset(b",:;<>\"\\'.")
_AUTHOR = re.compile(rb"author ([^<>\n\0]+) <([^<>\n\0]+)> ((0|[1-9][0-9]{0,11}) ([+-][0-9]{4}))")
# code points commit-tree's UTF-8 check rejects (it would re-encode the message as Latin-1)
_NONCHARS = re.compile(
    "[\ufdd0-\ufdef" + "".join(chr(p << 16 | 0xFFFE) + chr(p << 16 | 0xFFFF) for p in range(17))
    + "\0]"
)  # fmt: skip


# ----------------------------------------------------------------------------- objects


def git_bytes(
    repo: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None
) -> bytes:
    return cast(bytes, git(repo, *args, input=input, env=env, text=False).stdout)


def subject_of(repo: Path, commit: str) -> str:
    return gitutil.out(repo, "log", "-1", "--format=%s", commit, "--")


def commit_objects(repo: Path, commits: list[str]) -> dict[str, bytes]:
    """The raw commit objects of `commits`, from one `git cat-file --batch`."""
    if not commits:
        return {}
    data = git_bytes(repo, "cat-file", "--batch", input="".join(f"{c}\n" for c in commits).encode())
    found: dict[str, bytes] = {}
    pos = 0
    while pos < len(data):
        end = data.index(b"\n", pos)
        header = data[pos:end].decode("ascii", "replace").split()
        if len(header) != 3:  # "<id> missing": left to the caller's own read to report
            pos = end + 1
            continue
        size = int(header[2])
        if header[1] == "commit":
            found[header[0]] = data[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1  # the object, then a newline
    return found


def commit_parents(raw: bytes) -> list[str]:
    header = raw.partition(b"\n\n")[0].decode("utf-8", "replace")
    return [ln[7:] for ln in header.splitlines() if ln.startswith("parent ")]


def committable(raw: bytes) -> Meta | None:
    """(author line, date, message) of a commit when commit-tree (`commit_tree`) would
    write them back byte for byte; None when it would rewrite them (crud around a name,
    a date it normalizes, a message it re-encodes)."""
    header, _, message = raw.partition(b"\n\n")
    authors = [ln for ln in header.split(b"\n") if ln.startswith(b"author ")]
    m = _AUTHOR.fullmatch(authors[0]) if len(authors) == 1 else None
    if m is None:
        return None
    name, email, date, _stamp, zone = m.groups()
    if any(s[0] in _CRUD or s[-1] in _CRUD for s in (name, email)):
        return None
    if zone == b"-0000" or int(zone[3:]) >= 60 or int(zone[1:]) > 1400:
        return None
    try:
        text = (authors[0] + b"\n" + message).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if _NONCHARS.search(text) else (authors[0], date, message)


def commit_tree(repo: Path, commit: str, tree: str, parent: str, raw: bytes | None = None) -> str:
    """`commit` restamped on `tree` and `parent` by commit-tree (its author, the forge's
    committer on the author's date); `raw`: its object, when read already."""
    if raw is None:
        raw = git_bytes(repo, "cat-file", "commit", commit)
    header, _, message = raw.partition(b"\n\n")
    lines = header.decode("utf-8", "replace").splitlines()
    line = next((ln for ln in lines if ln.startswith("author ")), None)
    m = re.match(r"^author (.*) <(.*)> (\d+ [+-]\d{4})$", line or "")
    if line is None or not m:
        raise OperationFailed(
            f"{commit}: " + (f"unparseable author line {line!r}" if line else "no author line")
        )
    env = {
        "GIT_AUTHOR_NAME": m.group(1),
        "GIT_AUTHOR_EMAIL": m.group(2),
        "GIT_AUTHOR_DATE": f"@{m.group(3)}",
        "GIT_COMMITTER_DATE": f"@{m.group(3)}",
        **FORGE_IDENTITY,
    }
    made = git_bytes(repo, "commit-tree", tree, "-p", parent, input=message, env=env)
    return made.decode().strip()


def kept(raw: bytes, tree: str, parent: str) -> bytes | None:
    """`raw` on a new tree and parent; None when its header holds more than author and
    committer (a signature, an encoding: cherry-pick's to decide)."""
    header, sep, message = raw.partition(b"\n\n")
    lines = header.split(b"\n")
    if not sep or [ln.split(b" ", 1)[0] for ln in lines] != [b"tree", b"parent", b"author",
                                                              b"committer"]:  # fmt: skip
        return None
    return f"tree {tree}\nparent {parent}\n".encode() + b"\n".join(lines[2:]) + b"\n\n" + message


class CommitWriter:
    """Commit objects written through one `git hash-object -t commit -w --stdin-paths`;
    `write` answers None when it cannot, and the caller runs commit-tree (docs/architecture.md,
    "The replay engine"). `git_dir`: the repository's (its user's `workspace.git_dir`)."""

    def __init__(self, repo: Path, git_dir: Path) -> None:
        self._repo = repo
        self._file = git_dir / "dgr" / "commit-object"
        self._proc: subprocess.Popen[bytes] | None = None
        self._broken = False

    def commit(self, tree: str, parent: str, meta: Meta) -> str | None:
        author, date, message = meta
        head = f"tree {tree}\nparent {parent}\n".encode()
        return self.write(head + author + b"\n" + COMMITTER + date + b"\n\n" + message)

    def scratch_base(self, tree: str, parent: str) -> str | None:
        return self.write(_scratch_object(tree, parent))

    def write(self, raw: bytes) -> str | None:
        if self._broken:
            return None
        try:
            if self._proc is None:
                self._file.parent.mkdir(parents=True, exist_ok=True)
                self._file.touch()
                # GIT_FLUSH: each id is written as soon as its object is
                self._proc = gitutil.start(
                    self._repo, "hash-object", "-t", "commit", "-w", "--stdin-paths",
                    env={"GIT_FLUSH": "1"},
                )  # fmt: skip
            proc = self._proc
            assert proc.stdin is not None and proc.stdout is not None
            with open(self._file, "r+b") as f:
                f.write(raw)
                f.truncate()
            proc.stdin.write(os.path.relpath(self._file, self._repo).encode() + b"\n")
            proc.stdin.flush()
            answer = proc.stdout.readline().decode("ascii", "replace").strip()
        except OSError:
            answer = ""
        if not HEX40.fullmatch(answer):
            self._broken = True
            self.close()
            return None
        return answer

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with proc:  # its pipes closed, then waited for
                pass
        self._file.unlink(missing_ok=True)


def _scratch_object(tree: str, parent: str) -> bytes:
    return f"tree {tree}\nparent {parent}\n{_SCRATCH_TAIL}".encode()


# ----------------------------------------------------------------------------- merges


class Merged(Struct, frozen=True):
    """A merge-tree result: its tree (markers in it when `files`); tree None when git could
    not merge at all (a work tree must)."""

    tree: str | None
    files: list[str]
    error: str = ""


def merge(
    repo: Path, head_tree: str, base: str, commit: str, writer: CommitWriter | None = None
) -> Merged:
    """The 3-way merge of base..commit onto `head_tree` in memory, markers in diff3 style."""
    ours = writer.scratch_base(head_tree, base) if writer is not None else None
    if ours is None:
        made = git_bytes(repo, "hash-object", "-t", "commit", "-w", "--stdin",
                         input=_scratch_object(head_tree, base))  # fmt: skip
        ours = made.decode("ascii", "replace").strip()
    proc = git(
        repo, "merge-tree", "--write-tree", "-z", "--name-only", "--no-messages",
        ours, commit, check=False, config=("merge.conflictStyle=diff3",),
    )  # fmt: skip
    tree, *rest = proc.stdout.split("\0\0", 1)[0].split("\0")
    if proc.returncode not in (0, 1) or not HEX40.fullmatch(tree):
        return Merged(None, [], (proc.stderr or "").strip()[-500:])
    return Merged(tree, sorted({f for f in rest if f}) if proc.returncode == 1 else [])


# ----------------------------------------------------------------------------- one merge for many


def _dirs(paths: set[bytes]) -> set[bytes]:
    return {p[:i] for p in paths for i, c in enumerate(p) if c == 0x2F}


def replay_batch(
    repo: Path,
    commits: list[str],
    head: str,
    head_tree: str | None,
    objects: dict[str, bytes],
    ref: str = "refs/dgr/replay/batch",
    writer: CommitWriter | None = None,
) -> list[str | None]:
    """The new commits (None: became empty) of the first of `commits` restamped onto
    `head`, as far as one merge gives each exactly (the module doc). `ref`: the ref
    fast-import writes (the caller's to drop)."""
    if len(commits) < 2:
        return []  # one commit: the per-commit merge costs no more
    parents = [commit_parents(objects.get(c, b"")) for c in commits]
    if len(parents[0]) != 1 or parents[1:] != [[c] for c in commits[:-1]]:
        return []
    base = parents[0][0]
    by_upstream, *changes = gitutil.tree_changes(repo, [f"{base} {head}", *commits])
    upstream = {c.path for c in by_upstream}
    touched = Counter(c.path for cs in changes for c in cs)
    attributes = any(p.rsplit(b"/", 1)[-1] == b".gitattributes" for p in touched)
    if attributes or _dirs(upstream) & touched.keys() or _dirs(set(touched)) & upstream:
        return []
    merged: dict[bytes, gitutil.Change] = {}
    conflicted: set[bytes] = set()
    if upstream & touched.keys():
        head_tree = head_tree or gitutil.tree_of(repo, head)
        whole = merge(repo, head_tree, base, commits[-1], writer)
        if whole.tree is None:
            return []
        # a path in conflict is one patch's (a path two patches change stops the batch
        # before either): the patches before it merge as the one merge did
        conflicted = {f.encode() for f in whole.files}
        if not conflicted <= touched.keys():
            return []  # a name not read back as git wrote it: no batch, never a wrong one
        if conflicted & {c.path for c in changes[0]}:
            return []  # the first commit is the one in conflict: nothing before it to batch
        merged = {c.path: c for c in gitutil.changes_between(repo, head_tree, whole.tree)}
    plan: list[tuple[Meta, list[gitutil.Change]] | None] = []
    for commit, cs in zip(commits, changes, strict=True):
        meta = committable(objects[commit])
        if meta is None or any(
            c.path in conflicted or (c.path in upstream and touched[c.path] > 1) for c in cs
        ):
            break
        # outside U the commit's own version; in U the merge's (absent: H's, no change)
        picked = [c if c.path not in upstream else merged.get(c.path) for c in cs]
        effective = [c for c in picked if c is not None]
        plan.append((meta, effective) if effective else None)
    made = _fast_import(repo, head, [p for p in plan if p is not None], ref)
    if made is None:
        return []
    ids = iter(made)
    return [next(ids) if p is not None else None for p in plan]


def _fast_import(
    repo: Path, head: str, plan: list[tuple[Meta, list[gitutil.Change]]], ref: str
) -> list[str] | None:
    """Commit each (meta, changes) on the one before, the first on `head`, in one
    fast-import; None when it refuses (the per-commit replay then makes them)."""
    if not plan:
        return []
    stream = bytearray()
    for n, ((author, date, message), changes) in enumerate(plan, start=1):
        stream += b"commit %s\nmark :%d\n" % (ref.encode(), n)
        stream += author + b"\n" + COMMITTER + date + b"\n"
        stream += b"data %d\n" % len(message) + message + b"\n"
        if n == 1:
            stream += b"from %s\n" % head.encode()
        # deletions first: a file that gives way to a directory of the same name goes
        # before the directory's files arrive
        for c in sorted(changes, key=lambda c: c.mode != gitutil.DELETED):
            op = b"D " if c.mode == gitutil.DELETED else f"M {c.mode} {c.oid} ".encode()
            stream += op + c_quote(c.path) + b"\n"
        stream += b"\n"
    stream += b"".join(b"get-mark :%d\n" % n for n in range(1, len(plan) + 1)) + b"done\n"
    proc = git(
        repo,
        "fast-import",
        "--quiet",
        "--force",  # the batch ref of a killed run may point anywhere
        "--done",
        "--date-format=raw",
        "--cat-blob-fd=1",  # get-mark answers on stdout
        input=bytes(stream),
        text=False,
        check=False,
        config=("core.ignoreCase=false",),  # paths compared as merge-tree compares them
    )
    ids = cast(bytes, proc.stdout).decode("ascii", "replace").split()
    if proc.returncode != 0 or len(ids) != len(plan) or not all(HEX40.match(i) for i in ids):
        return None
    return ids


# ----------------------------------------------------------------------------- the replay


class Step(Struct, frozen=True):
    """What became of commit `index`: "picked" (`commit` on `tree`), "dropped", "conflict"
    (`files`; `tree` with the markers) or "worktree" (only cherry-pick can); the chain
    stops after the last two."""

    index: int
    kind: Literal["picked", "dropped", "conflict", "worktree"]
    commit: str | None = None
    tree: str | None = None
    files: list[str] = []
    batched: bool = False  # made by the one merge for many (the caller may save once)
    error: str = ""


class Replay:
    """A replay of the chain `commits` (each the parent of the next), "restamp"ed or
    "keep"ing their committer (the module doc). A context manager: it closes its writer."""

    def __init__(
        self,
        repo: Path,
        commits: list[str],
        git_dir: Path,
        *,
        stamp: Literal["restamp", "keep"] = "restamp",
        batch_ref: str | None = None,
    ) -> None:
        self.repo = repo
        self.commits = commits
        self.stamp = stamp
        self.batch_ref = batch_ref  # None: no batch (one merge a commit)
        self.objects = commit_objects(repo, commits)
        self.writer = CommitWriter(repo, git_dir)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.writer.close()

    def onto(self, head: str, head_tree: str | None = None, start: int = 0) -> Iterator[Step]:
        """The steps of commits `start`.. onto `head`, up to a conflict or a work-tree step."""
        i = start
        if self.batch_ref is not None and self.stamp == "restamp":
            made = replay_batch(
                self.repo, self.commits[i:], head, head_tree, self.objects, self.batch_ref,
                self.writer,
            )  # fmt: skip
            for commit in made:
                if commit is not None:
                    head, head_tree = commit, None  # the batch's trees: asked for when needed
                yield Step(i, "picked" if commit else "dropped", commit, None, batched=True)
                i += 1
        while i < len(self.commits):
            commit = self.commits[i]
            parents = commit_parents(self.objects.get(commit, b""))
            if len(parents) != 1:
                yield Step(i, "worktree")
                return
            head_tree = head_tree or gitutil.tree_of(self.repo, head)
            found = merge(self.repo, head_tree, parents[0], commit, self.writer)
            if found.tree is None:
                yield Step(i, "worktree", error=found.error)
                return
            if found.files:
                yield Step(i, "conflict", None, found.tree, found.files)
                return
            if found.tree == head_tree:
                yield Step(i, "dropped", None, head_tree)
            else:
                if (new := self.rewrite(commit, found.tree, head)) is None:
                    yield Step(i, "worktree")
                    return
                head, head_tree = new, found.tree
                yield Step(i, "picked", new, found.tree)
            i += 1

    def rewrite(self, commit: str, tree: str, parent: str) -> str | None:
        """`commit` as the replay writes it on `tree` and `parent`; None when only
        cherry-pick may ("keep" and a header beyond the four lines)."""
        raw = self.objects.get(commit, b"")
        if self.stamp == "keep":
            body = kept(raw, tree, parent)
            return self.writer.write(body) if body is not None else None
        meta = committable(raw)
        written = self.writer.commit(tree, parent, meta) if meta is not None else None
        return written or commit_tree(self.repo, commit, tree, parent, raw or None)
