"""No-op commands are cheap: count every git process with a shim on PATH.

The shim is a real executable named `git` that appends one line per invocation to a file
and then execs the real git, so nothing about git's behaviour changes.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from forgetest import Upstream, run_forge
from patch_support import make_series


def _shim(tmp_path: Path) -> tuple[dict[str, str], Path]:
    real = shutil.which("git")
    assert real is not None
    bindir = tmp_path / "shim-bin"
    bindir.mkdir()
    log = tmp_path / "git-calls.log"
    shim = bindir / "git"
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{real}" "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}, log


def _count(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_no_op_status_and_patch_run_git_few_times(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    make_series(forge_root, upstream)
    assert run_forge("patch", cwd=forge_root).code == 0
    env, log = _shim(tmp_path)

    res = run_forge("status", cwd=forge_root, env=env)
    assert res.code == 0 and "applied" in res.stderr, res
    calls = _count(log)
    assert 1 <= len(calls) <= 5, calls

    log.unlink()
    res = run_forge("patch", cwd=forge_root, env=env)
    assert res.code == 0 and "nothing to do" in res.stderr, res
    calls = _count(log)
    assert 1 <= len(calls) <= 3, calls

    log.unlink()
    res = run_forge("fetch", cwd=forge_root, env=env)
    assert res.code == 0 and "nothing to do" in res.stderr, res
    assert len(_count(log)) <= 2, _count(log)
