"""Scratch directories of export, rebase and check, under the workspace's `tmp/`.

Each is named `<prefix><pid>-<random>`, so a run that was killed leaves a directory the
next run recognises as orphaned (its owner is dead) and removes; a live run's is kept.
Without a forge (library callers) the system temp directory is used as before.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dgr_forge.core import gitutil
from dgr_forge.core.output import Reporter
from dgr_forge.upstream.series_journal import owner_alive, owner_pid


def clean_orphans(tmp_root: Path, prefix: str) -> None:
    """Remove `prefix*` directories whose owner process is gone."""
    if not tmp_root.is_dir():
        return
    for entry in tmp_root.glob(f"{prefix}*"):
        pid = owner_pid(entry)
        if pid is not None and pid != os.getpid() and not owner_alive(pid):
            shutil.rmtree(entry, ignore_errors=True)


@contextlib.contextmanager
def scratch_dir(tmp_root: Path | None, prefix: str) -> Iterator[Path]:
    """A fresh directory for the block, removed after it (and after a kill, by the next)."""
    if tmp_root is None:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            yield Path(tmp)
        return
    tmp_root.mkdir(parents=True, exist_ok=True)
    clean_orphans(tmp_root, prefix)
    path = tmp_root / f"{prefix}{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def borrow_objects(own: Path, scratch_src: Path, out: Reporter) -> None:
    """Let a scratch repository read the objects of this root's own workspace (git
    alternates), so no network is needed for what it already has (check --offline, the
    rebase dry run); ids are still verified by fetch, and the own workspace is only read."""
    objects = own / ".git" / "objects"
    if not objects.is_dir():
        return
    gitutil.git(None, "init", "-q", str(scratch_src))
    info = scratch_src / ".git" / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "alternates").write_text(f"{objects.resolve()}\n", encoding="utf-8")
    shallow = own / ".git" / "shallow"
    if shallow.is_file():
        shutil.copyfile(shallow, scratch_src / ".git" / "shallow")
    out.info(f"scratch workspace: reading objects from {own}")
