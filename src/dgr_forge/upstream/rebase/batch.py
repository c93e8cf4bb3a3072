"""The replay of many patches with one merge, where that is exactly one merge per patch.

Each patch i is a 3-way merge: base O_(i-1), ours the replayed head N_(i-1), theirs O_i
(`replay`, three git processes a patch). Rename detection is off (the pinned
`diff.renames=false`, which `merge.renames` follows), so a merge decides each path from
that path's three versions alone, as long as no path one side changes is a directory of a
path the other side changes. For the patches from state.next on, with B = O_(next-1),
H = the replayed head and U = the paths B..H changes (the two differ nowhere else):

* a path outside U that patch i changes: N_(i-1) still holds O_(i-1)'s version of it (an
  induction: each step below keeps N and O equal outside U), so the merge takes O_i's;
* a path in U that only patch i changes: its three versions are B's, H's and O_i's, the
  same the one merge of B..O_last onto H sees (base B: a "squash" merge), so that merge's
  result for the path is patch i's.

So one `merge-tree` gives every patch's tree and one `fast-import` writes the commits, with
the bytes `replay.record` gives them (the patch's author line and message, the forge's
committer on the patch's date). Where the argument does not hold (a path in U that two
patches change, a series that changes a .gitattributes, which steers merges, a path that is
a directory of one the other side changes, a conflict, an author line or message that
commit-tree would rewrite), the batch stops before that patch and the per-patch replay
goes on from there, as before.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from dgr_forge.core.gitutil import (
    DELETED,
    HEX40,
    Change,
    changes_between,
    git,
    tree_changes,
    tree_of,
)
from dgr_forge.upstream.rebase.commits import COMMITTER, committable
from dgr_forge.upstream.rebase.gitops import commit_parents, merge_onto
from dgr_forge.upstream.rebase.state import REF_BATCH, PatchStep


def _dirs(paths: set[bytes]) -> set[bytes]:
    return {p[:i] for p in paths for i, c in enumerate(p) if c == 0x2F}


def _quote(path: bytes) -> bytes:
    """A path as fast-import reads it (C-style quoted, so no byte is special)."""
    out = bytearray(b'"')
    for c in path:
        if c in (0x22, 0x5C):
            out += b"\\" + bytes([c])
        elif c < 0x20 or c == 0x7F:
            out += b"\\%03o" % c
        else:
            out.append(c)
    return bytes(out + b'"')


def replay_batch(
    src: Path,
    steps: list[PatchStep],
    head: str,
    head_tree: str | None,
    objects: dict[str, bytes],
) -> list[str | None]:
    """The new commits (None: the patch became empty) of the first patches of `steps`
    replayed onto `head` (its tree `head_tree`, when known), as far as the batch gives
    each exactly; empty when it gives none. `objects`: the patch commits' raw objects."""
    if len(steps) < 2:
        return []  # one patch: the per-patch merge costs no more
    parents = [commit_parents(objects.get(s.old_commit, b"")) for s in steps]
    chain = [[s.old_commit] for s in steps[:-1]]
    if len(parents[0]) != 1 or parents[1:] != chain:
        return []
    base = parents[0][0]
    diffs = tree_changes(src, [f"{base} {head}", *(s.old_commit for s in steps)])
    upstream = {c.path for c in diffs[0]}
    changes = diffs[1:]
    touched = Counter(c.path for cs in changes for c in cs)
    if any(p.rsplit(b"/", 1)[-1] == b".gitattributes" for p in touched):
        return []
    if _dirs(upstream) & touched.keys() or _dirs(set(touched)) & upstream:
        return []
    merged: dict[bytes, Change] = {}
    if upstream & touched.keys():
        head_tree = head_tree or tree_of(src, head)
        tree = merge_onto(src, head_tree, base, steps[-1].old_commit)
        if tree is None:
            return []
        merged = {c.path: c for c in changes_between(src, head_tree, tree)}
    plan: list[tuple[tuple[bytes, bytes, bytes], list[Change]] | None] = []
    for step, cs in zip(steps, changes, strict=True):
        meta = committable(objects[step.old_commit])
        if meta is None or any(touched[c.path] > 1 for c in cs if c.path in upstream):
            break
        # outside U the patch's own version; in U the merge's (absent: H's, no change)
        picked = [c if c.path not in upstream else merged.get(c.path) for c in cs]
        effective = [c for c in picked if c is not None]
        plan.append((meta, effective) if effective else None)
    commits = _fast_import(src, head, [p for p in plan if p is not None])
    if commits is None:
        return []
    made = iter(commits)
    return [next(made) if p is not None else None for p in plan]


def _fast_import(
    src: Path, head: str, plan: list[tuple[tuple[bytes, bytes, bytes], list[Change]]]
) -> list[str] | None:
    """Commit each (meta, changes) on the one before, the first on `head`: one fast-import
    for all of them; their ids, None when fast-import refuses (the per-patch replay then
    makes them)."""
    if not plan:
        return []
    stream = bytearray()
    for n, ((author, date, message), changes) in enumerate(plan, start=1):
        stream += b"commit %s\nmark :%d\n" % (REF_BATCH.encode(), n)
        stream += author + b"\n" + COMMITTER + date + b"\n"
        stream += b"data %d\n" % len(message) + message + b"\n"
        if n == 1:
            stream += b"from %s\n" % head.encode()
        # deletions first: a file that gives way to a directory of the same name goes
        # before the directory's files arrive
        for c in sorted(changes, key=lambda c: c.mode != DELETED):
            if c.mode == DELETED:
                stream += b"D " + _quote(c.path) + b"\n"
            else:
                stream += b"M %s %s " % (c.mode.encode(), c.oid.encode()) + _quote(c.path) + b"\n"
        stream += b"\n"
    stream += b"".join(b"get-mark :%d\n" % n for n in range(1, len(plan) + 1)) + b"done\n"
    proc = git(
        src,
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
    raw: bytes | str = proc.stdout
    ids = (raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw).split()
    if proc.returncode != 0 or len(ids) != len(plan) or not all(HEX40.match(i) for i in ids):
        return None
    return ids
