"""The lower findings of issue 33 (#8): the bump report's words follow its answer; a
closed stdout or stderr is a clean exit with the documented code; a lock path that is
not a regular file is exit 2 naming it."""

from __future__ import annotations

import os
import subprocess as sp
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support.cli import forge_cmd, forge_env, run_forge

from dgr_forge.upstream.rebase.bump import Bump, render

PIN = "a" * 40
NEWER = "b" * 40


def _bump(**over: Any) -> Bump:
    d: dict[str, Any] = {
        "status": "ok", "upstream": "llama.cpp", "pin": PIN, "url": "https://h/x.git",
        "newest_clean": PIN, "target": NEWER, "dry_run": True, "moved": False,
        "target_subject": "t", "to": "HEAD", "newest_clean_subject": "s", "taken": 0,
        "candidates": 4, "first_breaking": None, "dropped": [], "replays": 2,
        "max_replays": 4, "rebase_report_markdown": None, "patches": [],
        "rebase_report": None, "report_markdown": None,
    }  # fmt: skip
    d.update(over)
    return msgspec.convert(d, Bump)


def test_a_dry_run_that_stays_at_the_pin_does_not_say_it_would_move() -> None:
    text = render(_bump(), "")
    assert "would move" not in text and "the pin would stay" in text, text
    # the variant: a dry run that would move says so, a real run that moved says moved
    assert "the pin would move" in render(_bump(newest_clean=NEWER), "")
    assert "the pin moved" in render(_bump(newest_clean=NEWER, dry_run=False, moved=True), "")


def _closed(args: list[str], fd: int, cwd: Path) -> sp.CompletedProcess[bytes]:
    """`dgr-forge ARGS` with fd 1 or 2 closed (`>&-` / `2>&-`)."""
    return sp.run(
        forge_cmd(*args),
        cwd=cwd,
        env=forge_env({}),
        stdin=sp.DEVNULL,
        capture_output=True,
        preexec_fn=lambda: os.close(fd),
        timeout=60,
    )


@pytest.mark.parametrize(("args", "fd", "code"), [
    (["--json", "status"], 1, 1),  # the JSON answer had nowhere to go: docs/cli.md
    (["status"], 2, 0),  # the variant: stderr closed, the human lines have nowhere to go
    (["--json", "report", "show", "/nonexistent"], 1, 2),
])  # fmt: skip
def test_a_closed_stdout_or_stderr_is_a_clean_exit(
    forge_root: Path, args: list[str], fd: int, code: int
) -> None:
    proc = _closed(args, fd, forge_root)
    err = (proc.stderr + proc.stdout).decode()
    assert "Traceback" not in err, err
    assert proc.returncode == code, (proc.returncode, err)
    if fd == 1 and code == 1:
        assert "stdout is closed" in err, err


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_lock_path_that_is_not_a_file_is_exit_2_naming_it(forge_root: Path, kind: str) -> None:
    lock = forge_root / ".dgr-root.lock"
    if kind == "fifo":
        os.mkfifo(lock)
    else:  # the variant: a directory planted where the lock goes
        lock.mkdir()
    res = run_forge("export", cwd=forge_root, subprocess=True, timeout=60)
    assert res.code == 2, res
    assert ".dgr-root.lock" in res.stderr and "Traceback" not in res.stderr, res
