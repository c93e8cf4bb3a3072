"""What the forge makes for itself is never writable by others (issue 33 #6): under
`umask 000` the workspace, its cache (compiler cache, program stamps, probe answers),
state, logs and reports come out with no group or world write bit (the cache 0700), and
an existing one writable by others is refused, exit 2 naming it, whether it is the
default `<workspace>/cache` or DGR_CACHE_DIR."""

from __future__ import annotations

import os
import stat
import subprocess as sp
from pathlib import Path

import pytest
from support.build import make_patched_root
from support.cli import forge_cmd, forge_env, run_forge
from support.git import Upstream

from dgr_forge.cache import select as cache
from dgr_forge.core.errors import BadInput


def _build_under_umask_000(root: Path) -> sp.CompletedProcess[str]:
    return sp.run(
        forge_cmd("--root", str(root), "build", "--lane", "cpu", "--no-sign"),
        env=forge_env({"DGR_CACHE_DIR": ""}),  # the default: <workspace>/cache
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=lambda: os.umask(0),
    )


@pytest.mark.slow  # a real CMake build
def test_a_build_under_umask_000_makes_nothing_others_may_write(
    tmp_path: Path, upstream: Upstream
) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    res = _build_under_umask_000(root)
    assert res.returncode == 0, res.stderr
    ws = root / ".dgr"
    made = [ws, ws / "cache", ws / "state.json", ws / "logs", ws / "reports"]
    made += list((ws / "cache").iterdir()) + list((ws / "logs").iterdir())
    for path in made:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            continue
        assert mode & 0o022 == 0, f"{path}: {oct(mode)}"
    assert stat.S_IMODE((ws / "cache").stat().st_mode) == 0o700


@pytest.mark.parametrize("what", ["cache", "workspace"])
def test_an_existing_default_cache_writable_by_others_is_refused(tmp_path: Path, what: str) -> None:
    ws = tmp_path / ".dgr"
    (ws / "cache").mkdir(parents=True)
    (ws if what == "workspace" else ws / "cache").chmod(0o777)
    with pytest.raises(BadInput, match="writable by other users") as info:
        cache.cache_dir({}, ws)
    assert str(ws if what == "workspace" else ws / "cache") in str(info.value)


def test_state_logs_and_reports_writable_by_others_are_refused(
    tmp_path: Path, upstream: Upstream
) -> None:
    """The variant: the workspace's other files, a world-writable state.json first."""
    root = make_patched_root(tmp_path / "forge", upstream)
    ws = root / ".dgr"
    ws.mkdir(exist_ok=True)
    state = ws / "state.json"
    state.write_text('{"schema": 1, "lanes": {}}')
    state.chmod(0o666)
    res = run_forge("--root", str(root), "status")
    assert res.code == 2 and "state.json" in res.stderr, res
    assert "writable by other users" in res.stderr, res


def test_the_cli_tightens_a_permissive_umask(tmp_path: Path, upstream: Upstream) -> None:
    """Every file the forge (and the git it runs) creates: no group/world write bit."""
    root = make_patched_root(tmp_path / "forge", upstream)
    proc = sp.run(
        forge_cmd("--root", str(root), "patch"),
        env=forge_env({}),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.umask(0),
    )
    assert proc.returncode == 0, proc.stderr
    ws = root / ".dgr"
    for path in [ws, *ws.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode):
            assert mode & 0o022 == 0, f"{path}: {oct(mode)}"


@pytest.mark.parametrize("what", ["logs", "reports"])
def test_logs_or_reports_writable_by_others_are_refused(
    tmp_path: Path, upstream: Upstream, what: str
) -> None:
    """The variant's other two: a world-writable logs/ or reports/ in the workspace (the
    test above covers state.json only) stops `build`, exit 2 naming it, no report."""
    root = make_patched_root(tmp_path / "forge", upstream)
    shared = root / ".dgr" / what
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    res = run_forge("--root", str(root), "build", "--lane", "cpu", "--no-sign", "--jobs", "2")
    assert res.code == 2, res
    assert str(shared) in res.stderr and "writable by other users" in res.stderr, res
    assert not list((root / ".dgr" / "reports").glob("*.intoto.jsonl"))
