"""`demo DIR` writes only where no one else can plant a link (issue 33 #3): an existing DIR
it did not create is refused unless the caller owns it and no one else may write to it
(an empty directory another user left in /tmp, or one with mode 0777, is exit 2 naming
it); a DIR it creates ignores a permissive umask; the files it writes itself are opened
with O_NOFOLLOW|O_EXCL inside DIR, so a link planted meanwhile is refused, never written
through."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.cli import run_forge

from dgr_forge.core.errors import BadInput
from dgr_forge.demo.generate import check_target, write_new

NOBODY = 65534


def _sticky_tmp(tmp_path: Path) -> Path:
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_an_empty_dir_another_user_owns_is_refused(tmp_path: Path) -> None:
    planted = _sticky_tmp(tmp_path) / "demo"
    planted.mkdir(mode=0o755)
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(BadInput, match="owned by another user"):
        check_target(str(planted))
    res = run_forge("demo", str(planted), subprocess=True, timeout=60)
    assert res.code == 2 and str(planted) in res.stderr, res
    assert list(planted.iterdir()) == []


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_an_empty_dir_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    """The variant: the caller's own directory, but group- or world-writable."""
    d = tmp_path / "demo"
    d.mkdir()
    d.chmod(mode)
    with pytest.raises(BadInput, match="writable by other users"):
        check_target(str(d))
    assert list(d.iterdir()) == []


def test_a_new_dir_ignores_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        made = check_target(str(tmp_path / "a" / "b" / "demo"))
    finally:
        os.umask(old)
    for d in (made, made.parent, made.parent.parent):
        assert d.stat().st_mode & 0o022 == 0, oct(d.stat().st_mode)


def test_a_link_planted_in_dir_is_never_written_through(tmp_path: Path) -> None:
    root = check_target(str(tmp_path / "demo"))
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    (root / ".gitignore").symlink_to(victim)
    with pytest.raises(BadInput, match=r"\.gitignore"):
        write_new(root, ".gitignore", "build/\n")
    # the variant: a directory on the way replaced by a link out of DIR
    (root / "worker").symlink_to(tmp_path)
    with pytest.raises(BadInput, match="worker"):
        write_new(root, "worker/victim", "x")
    assert victim.read_text() == "root's file\n"
