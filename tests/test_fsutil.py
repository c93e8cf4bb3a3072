"""Atomic writes keep file modes: a rewritten manifest or patch stays readable."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from dgr_forge.core.fsutil import atomic_write_many, atomic_write_text


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_file_gets_the_umask_default(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.toml", "x = 1\n")
    finally:
        os.umask(old)
    assert mode(tmp_path / "a.toml") == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["a.toml"]  # no temp file left


def test_rewrite_keeps_the_existing_mode(tmp_path: Path) -> None:
    path = tmp_path / "run.sh"
    path.write_text("old\n")
    path.chmod(0o751)
    atomic_write_text(path, "new\n")
    assert path.read_text() == "new\n" and mode(path) == 0o751


def test_explicit_mode_wins(tmp_path: Path) -> None:
    path = tmp_path / "key.pem"
    atomic_write_text(path, "secret\n", mode=0o600)
    assert mode(path) == 0o600


def test_a_batch_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    keep = tmp_path / "a.txt"
    keep.write_text("old\n")
    keep.chmod(0o640)
    atomic_write_many([(keep, b"new\n"), (tmp_path / "sub" / "b.txt", b"b\n")])
    assert keep.read_text() == "new\n" and stat.S_IMODE(keep.stat().st_mode) == 0o640
    assert (tmp_path / "sub" / "b.txt").read_text() == "b\n"
    # a file that cannot be made (its parent is a file): nothing renamed, no temp left
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    with pytest.raises(OSError):
        atomic_write_many([(keep, b"newer\n"), (blocker / "c.txt", b"c\n")])
    assert keep.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "blocker", "sub"]


def test_a_batch_is_synced_file_by_file_before_any_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each file's own fsync (concurrent: the syncs share the file system's commits), all of
    them before the first rename; a sync that fails renames nothing and leaves no temp."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(f"sync {os.readlink(f'/proc/self/fd/{fd}').rsplit('/', 1)[-1][:2]}")
        real_fsync(fd)

    def replace(src: str, dst: Path) -> None:
        events.append(f"rename {Path(dst).name}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    names = [f"p{i}.patch" for i in range(20)]
    atomic_write_many([(tmp_path / n, n.encode()) for n in names])
    syncs, renames = events[:20], events[20:]
    assert sorted(syncs) == sorted(f"sync .{n[:1]}" for n in names)  # ".p<n>.patch.<x>.tmp"
    assert renames == [f"rename {n}" for n in names]
    assert [(tmp_path / n).read_bytes() for n in names] == [n.encode() for n in names]

    # concurrent: two syncs wait on each other (one after another, this would time out)
    meet = threading.Barrier(2, timeout=10)
    monkeypatch.setattr(os, "fsync", lambda fd: (meet.wait(), real_fsync(fd)))
    atomic_write_many([(tmp_path / n, b"again") for n in names[:2]])
    events.clear()

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError, match="Input/output"):
        atomic_write_many([(tmp_path / n, b"lost") for n in names])
    assert not [e for e in events if e.startswith("rename")]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    assert (tmp_path / "p3.patch").read_bytes() == b"p3.patch"
