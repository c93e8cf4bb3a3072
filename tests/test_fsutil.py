"""Atomic writes keep file modes: a rewritten manifest or patch stays readable."""

from __future__ import annotations

import os
import stat
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
