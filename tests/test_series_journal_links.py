"""The series journal links what a caller's own journal already holds, synced (rebase's
staged series), instead of writing and syncing the bytes again (issue 46: a rebase of
50 patches flushed the disk 134 times). Only a regular file with exactly the wanted
bytes is linked: a symlink, a FIFO or a file with other bytes put there is never
followed, opened or taken; those files are written as before."""

from __future__ import annotations

import os
from pathlib import Path

from dgr_forge.core.output import Reporter
from dgr_forge.upstream import series_journal

FILES = {
    "0001-same.patch": b"patch one\n",
    "0002-link.patch": b"patch two\n",
    "0003-fifo.patch": b"patch three\n",
    "0004-other.patch": b"patch four\n",
    "0005-missing.patch": b"patch five\n",
    "0006--leading-dash.patch": b"patch six\n",
}


def test_only_a_regular_file_with_the_same_bytes_is_linked(tmp_path: Path) -> None:
    root = tmp_path / "root"
    pdir = root / "patches" / "up"
    pdir.mkdir(parents=True)
    (pdir / "0001-same.patch").write_bytes(b"the old bytes\n")
    manifest = root / "manifests" / "up.toml"
    manifest.parent.mkdir()
    manifest.write_text("schema = 1\n")
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "0001-same.patch").write_bytes(FILES["0001-same.patch"])
    (staged / "0006--leading-dash.patch").write_bytes(FILES["0006--leading-dash.patch"])
    outside = tmp_path / "outside"
    outside.write_bytes(FILES["0002-link.patch"])
    (staged / "0002-link.patch").symlink_to(outside)
    os.mkfifo(staged / "0003-fifo.patch")  # never opened: a read would hang
    (staged / "0004-other.patch").write_bytes(b"not what is wanted\n")

    series_journal.write(
        root,
        pdir,
        FILES,
        manifest,
        b"schema = 1\n# new\n",
        points="test",
        out=Reporter(quiet=True),
        linked=staged,
    )

    assert {p.name: p.read_bytes() for p in pdir.glob("*.patch")} == FILES
    assert manifest.read_text() == "schema = 1\n# new\n"
    for name in FILES:
        assert not (pdir / name).is_symlink(), name
    ino = {name: (pdir / name).stat().st_ino for name in FILES}
    assert ino["0001-same.patch"] == (staged / "0001-same.patch").stat().st_ino
    assert ino["0006--leading-dash.patch"] == (staged / "0006--leading-dash.patch").stat().st_ino
    assert ino["0002-link.patch"] != outside.stat().st_ino
    assert ino["0004-other.patch"] != (staged / "0004-other.patch").stat().st_ino
    assert (staged / "0004-other.patch").read_bytes() == b"not what is wanted\n"  # untouched
    assert outside.read_bytes() == FILES["0002-link.patch"]
    assert not list(pdir.parent.glob(".*journal*"))  # the journal is gone
