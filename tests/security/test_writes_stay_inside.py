"""Writes stay in the root and workspace (issue 21 #6, #7): `presets` never follows a
committed worker symlink out of the root, never edits another repository's `.git/`; the
`/home` rule compares identities (device, inode), so a bind mount of /home elsewhere is
refused like /home itself."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.build import make_patched_root, make_worker
from support.cli import run_forge
from support.git import Upstream, sh_git

from dgr_forge.core.errors import BadInput
from dgr_forge.models.dest import check_destination


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Another repository: a CMake project someone else owns."""
    repo = make_worker(tmp_path / "victim")
    sh_git(repo, "init", "-q")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("# theirs\n")
    return repo


def test_presets_refuses_a_committed_worker_symlink_out_of_the_root(
    tmp_path: Path, upstream: Upstream, victim: Path
) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    (root / "worker").symlink_to(victim)
    (root / "manifests" / "shard-worker.toml").write_text('schema = 1\n[worker]\npath = "worker"\n')
    res = run_forge("--root", str(root), "presets", "--lane", "cpu")
    assert res.code == 2, res
    assert "leads out of" in res.stderr and "--out" in res.stderr, res
    assert not (victim / "CMakeUserPresets.json").exists()
    assert (victim / ".git" / "info" / "exclude").read_text() == "# theirs\n"


def test_presets_out_into_another_repository_leaves_its_git_alone(
    tmp_path: Path, upstream: Upstream, victim: Path
) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    res = run_forge("--root", str(root), "presets", "--lane", "cpu", "--out", str(victim))
    assert res.code == 0, res  # written where asked: the user's explicit choice
    assert (victim / "CMakeUserPresets.json").exists()
    assert (victim / ".git" / "info" / "exclude").read_text() == "# theirs\n"


# ----------------------------------------------------------------------------- /home by identity


def _bind(source: str, target: Path) -> bool:
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "--bind", source, str(target)], capture_output=True, check=False
    )
    return done.returncode == 0


def test_a_bind_mount_of_home_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not Path("/home").is_dir():
        pytest.skip("bind mounts need root and a /home")
    mnt = tmp_path / "h"
    if not _bind("/home", mnt):
        pytest.skip("mount --bind is not permitted here")
    try:
        for dest in (mnt, mnt / "models" / "x"):
            with pytest.raises(BadInput) as info:
                check_destination(dest)
            assert "/home" in str(info.value), info.value
        assert check_destination(tmp_path / "elsewhere") == tmp_path / "elsewhere"
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
