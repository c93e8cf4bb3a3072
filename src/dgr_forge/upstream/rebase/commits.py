"""The patch commits the replay writes: when their bytes are known without commit-tree,
and one long-running writer for them.

A replayed patch commit is the patch's author line and message, the forge's committer on
the patch's own date, on the new tree and parent (`replay.record`; `gitops.commit_meta`
gives commit-tree the same). Where commit-tree would write those bytes back unchanged
(`committable`), the forge writes the object itself, through one
`git hash-object -t commit -w --stdin-paths` for the whole replay (`CommitWriter`), instead
of a commit-tree process for each patch and another for its merge's scratch base: on a
series the batch cannot take (rebase/batch.py), those two processes were 2 of every
patch's 5. The objects are loose, so the next merge-tree sees them at once.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from dgr_forge.core import gitutil
from dgr_forge.core.gitutil import FORGE_IDENTITY, HEX40
from dgr_forge.upstream.rebase.gitops import git_dir

COMMITTER = (
    f"committer {FORGE_IDENTITY['GIT_COMMITTER_NAME']} <{FORGE_IDENTITY['GIT_COMMITTER_EMAIL']}> "
).encode()
# the identity commit-tree gives the merge's scratch base (gitutil.CONFIG's user.*)
_SCRATCH_IDENT = b"dgr-forge <dgr-forge@invalid>"

# what git's ident code strips from the ends of a name or email ('.' too: older gits did)
_CRUD = frozenset(range(33)) | frozenset(b",:;<>\"\\'.")
_AUTHOR = re.compile(rb"author ([^<>\n\0]+) <([^<>\n\0]+)> ((0|[1-9][0-9]{0,11}) ([+-][0-9]{4}))")
# code points commit-tree's UTF-8 check rejects (it would re-encode the message as Latin-1)
_NONCHARS = re.compile(
    "[\ufdd0-\ufdef" + "".join(chr(p << 16 | 0xFFFE) + chr(p << 16 | 0xFFFF) for p in range(17))
    + "\0]"
)  # fmt: skip


def committable(raw: bytes) -> tuple[bytes, bytes, bytes] | None:
    """(author line, date, message) of a patch commit when commit-tree, given them the way
    `gitops.commit_meta` gives them, writes them back byte for byte; None when it would
    rewrite them (crud around a name, a date it normalizes, a message it re-encodes)."""
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
    if _NONCHARS.search(text):
        return None
    return authors[0], date, message


class CommitWriter:
    """Commit objects written through one `git hash-object -t commit -w --stdin-paths`.
    Each object's bytes go through one file in the repository's `.git/dgr/`, rewritten in
    place for the next (no path of the user's reaches the process, and no new file per
    object: on a slow disk, creating one costs more than the process it saves). `write`
    answers None when the writer cannot (git refused the object, or is gone); the caller
    then runs commit-tree, which says why in its own words."""

    def __init__(self, src: Path) -> None:
        self._src = src
        self._file = git_dir(src) / "dgr" / "commit-object"
        self._proc: subprocess.Popen[bytes] | None = None
        self._broken = False

    def commit(self, tree: str, parent: str, meta: tuple[bytes, bytes, bytes]) -> str | None:
        """A replayed patch commit: `meta` as `committable` gave it."""
        author, date, message = meta
        head = f"tree {tree}\nparent {parent}\n".encode()
        return self.write(head + author + b"\n" + COMMITTER + date + b"\n\n" + message)

    def scratch_base(self, tree: str, parent: str) -> str | None:
        """The merge's scratch base (`gitops.merge_onto`): `tree` on `parent`, now."""
        when = b"%d +0000" % int(time.time())
        ident = _SCRATCH_IDENT + b" " + when
        head = f"tree {tree}\nparent {parent}\n".encode()
        return self.write(head + b"author " + ident + b"\ncommitter " + ident + b"\n\n"
                          + b"dgr-forge replay base\n")  # fmt: skip

    def write(self, raw: bytes) -> str | None:
        if self._broken:
            return None
        try:
            proc = self._started()
            assert proc.stdin is not None and proc.stdout is not None
            with open(self._file, "r+b") as f:
                f.write(raw)
                f.truncate()
            proc.stdin.write(os.path.relpath(self._file, self._src).encode() + b"\n")
            proc.stdin.flush()
            answer = proc.stdout.readline().decode("ascii", "replace").strip()
        except OSError:
            answer = ""
        if not HEX40.fullmatch(answer):
            self._broken = True
            self.close()
            return None
        return answer

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            self._file.parent.mkdir(parents=True, exist_ok=True)
            self._file.touch()
            # GIT_FLUSH: each id is written as soon as its object is
            self._proc = gitutil.start(
                self._src, "hash-object", "-t", "commit", "-w", "--stdin-paths",
                env={"GIT_FLUSH": "1"},
            )  # fmt: skip
        return self._proc

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            if proc.stdout is not None:
                proc.stdout.close()
            proc.wait()
        self._file.unlink(missing_ok=True)
