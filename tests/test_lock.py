"""The workspace lock's inputs: DGR_LOCK_TIMEOUT and the lock file itself."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import forge_env, forge_popen, run_forge


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "1e300", "99999999", "soon", "-"])
def test_lock_timeout_must_be_finite_bounded_and_not_negative(forge_root: Path, value: str) -> None:
    res = run_forge("--json", "fetch", cwd=forge_root, env={"DGR_LOCK_TIMEOUT": value})
    assert res.code == 2, res
    assert "DGR_LOCK_TIMEOUT" in res.stderr and "Traceback" not in res.stderr, res
    assert not (forge_root / ".dgr" / "src").exists()


@pytest.mark.parametrize("value", ["0", "0.5", "600"])
def test_lock_timeout_sane_values_work(forge_root: Path, value: str) -> None:
    res = run_forge("fetch", cwd=forge_root, env={"DGR_LOCK_TIMEOUT": value})
    assert res.code == 0, res


@contextlib.contextmanager
def _held_lock(forge_root: Path) -> Iterator[int]:
    """The workspace lock held by this test process, as another run would hold it."""
    lock = forge_root / ".dgr" / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps({"pid": os.getpid(), "command": "holder"}).encode())
        yield fd
    finally:
        os.close(fd)  # closing releases the flock


@pytest.mark.parametrize("value", ["0", "0.5"])
def test_lock_timeout_is_applied(forge_root: Path, value: str) -> None:
    """The run waits exactly as long as DGR_LOCK_TIMEOUT says, naming the holder, then
    fails (exit 1) without touching the workspace."""
    with _held_lock(forge_root):
        started = time.monotonic()
        res = run_forge("fetch", cwd=forge_root, env={"DGR_LOCK_TIMEOUT": value})
        waited = time.monotonic() - started
    assert res.code == 1, res
    assert f"pid {os.getpid()} (holder" in res.stderr, res
    assert ("after 0.5 s" in res.stderr) == (value == "0.5"), res
    assert waited >= float(value)
    assert not (forge_root / ".dgr" / "src").exists()


def test_lock_timeout_waits_for_the_holder_to_finish(forge_root: Path) -> None:
    with _held_lock(forge_root):
        child = forge_popen(
            "fetch",
            cwd=forge_root,
            env={**forge_env(), "DGR_LOCK_TIMEOUT": "600"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stderr is not None
        line = child.stderr.readline()  # the child is waiting: now release the lock
        assert f"waiting for pid {os.getpid()}" in line and "up to 600 s" in line, line
    _out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert (forge_root / ".dgr" / "src").is_dir()


def test_lock_that_is_a_directory_is_one_clear_error(forge_root: Path) -> None:
    (forge_root / ".dgr" / "lock").mkdir(parents=True)
    for args in (["fetch"], ["patch"], ["--json", "fetch"]):
        res = run_forge(*args, cwd=forge_root)
        assert res.code == 2, res
        assert "Traceback" not in res.stderr, res
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "lock" in errors[0], res
    assert (forge_root / ".dgr" / "lock").is_dir()  # nothing of the user's is removed


def test_lock_that_is_a_symlink_is_refused(tmp_path: Path, forge_root: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (forge_root / ".dgr").mkdir()
    (forge_root / ".dgr" / "lock").symlink_to(victim)
    res = run_forge("fetch", cwd=forge_root)
    assert res.code == 2 and "lock" in res.stderr, res
    assert victim.read_text() == "keep\n"


@pytest.mark.parametrize(
    "args",
    [
        ["fetch"],
        ["patch"],
        ["patch", "--check"],
        ["export"],
        ["build", "--no-sign"],
        ["rebase", "--onto", "HEAD"],
        ["rebase", "--onto", "HEAD", "--dry-run"],
        ["rebase", "--continue"],
        ["rebase", "--abort"],
    ],
    ids=lambda a: " ".join(a),
)
def test_commands_take_the_lock_before_reading_any_input(forge_root: Path, args: list[str]) -> None:
    """The command context locks first: with the lock held (and no wait allowed), a
    command fails on the lock, naming its holder, before it reads the (here broken)
    manifest, recipes or probes; a run that waits then sees what the holder wrote."""
    manifest = forge_root / "manifests" / "llama.cpp.toml"
    manifest.write_text("this is [not toml\n")
    with _held_lock(forge_root):
        res = run_forge(*args, cwd=forge_root, env={"DGR_LOCK_TIMEOUT": "0"})
    assert res.code == 1, res
    assert f"pid {os.getpid()} (holder" in res.stderr and "not toml" not in res.stderr, res
    assert manifest.read_text() == "this is [not toml\n"
