"""Atomic writes keep file modes: a rewritten manifest or patch stays readable."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dgr_forge.core.fsutil import atomic_write_text


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
