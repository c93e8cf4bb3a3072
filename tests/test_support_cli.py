"""The test runner itself: an in-process CLI run is what a child process gives, and leaves
this process as it was; kill/pause faults and held locks go to a child process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.cli import (
    forge_env,
    needs_subprocess,
    run_forge,
    run_forge_in_process,
    run_forge_subprocess,
)

from dgr_forge.core.forge import Forge
from dgr_forge.core.lock import workspace_lock
from dgr_forge.core.output import Reporter

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["--json", "--version"],
        ["--no-such-flag"],
        ["status", "--json", "--no-such-flag"],
        ["--root", str(REPO), "--workspace", "{ws}", "lanes"],
        ["--root", str(REPO), "--workspace", "{ws}", "lanes", "--json"],
        ["--root", "{ws}/nowhere", "status"],
    ],
)
def test_in_process_run_is_what_a_child_process_gives(tmp_path: Path, args: list[str]) -> None:
    argv = [a.replace("{ws}", str(tmp_path / "ws")) for a in args]
    child = run_forge_subprocess(*argv)
    here = run_forge_in_process(*argv)
    assert (here.code, here.stdout, here.stderr) == (child.code, child.stdout, child.stderr)


def test_in_process_run_leaves_environ_cwd_and_fds_as_they_were(
    forge_root: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DGR_ROOT", "/nonexistent")  # stripped, as for a child process
    before = (dict(os.environ), os.getcwd())
    res = run_forge("status", "--json", cwd=forge_root, env={"DGR_LOCK_TIMEOUT": "5"})
    assert res.code == 0, res
    assert res.json["command"] == "status"
    assert (dict(os.environ), os.getcwd()) == before
    print("after")
    assert capfd.readouterr().out == "after\n"


@pytest.mark.parametrize(
    ("env", "child"),
    [
        ({}, False),
        ({"DGR_FAULT": "patch.applied:enospc"}, False),
        ({"DGR_FAULT": "patch.applied:fail@2"}, False),
        ({"DGR_FAULT": "patch.applied"}, True),
        ({"DGR_FAULT": "patch.applied:0002"}, True),
        ({"DGR_FAULT": "patch.applied:0002:kill@3"}, True),
        ({"DGR_FAULT": "a.b:fail,export.swapped:pause"}, True),
        ({"DGR_TEST_PAUSE_AT": "replay:0001"}, True),
    ],
)
def test_kill_and_pause_faults_run_in_a_child_process(env: dict[str, str], child: bool) -> None:
    assert needs_subprocess(env) is child


def test_a_lock_held_here_sends_the_run_to_a_child_process(forge_root: Path) -> None:
    holder = Forge(root=forge_root, workspace=forge_root / ".dgr")
    assert not needs_subprocess(None)
    with workspace_lock(holder, Reporter(quiet=True)):
        assert needs_subprocess(None)
    assert not needs_subprocess(None)


def test_other_threads_of_the_test_do_not_write_into_the_result(tmp_path: Path) -> None:
    """A test server's handler thread printing during an in-process run (a traceback when the
    client hangs up) is not the CLI's output, as with a child process."""
    import sys
    import threading

    stop = threading.Event()
    wrote = threading.Event()

    def noise() -> None:
        while not stop.is_set():
            print("noise from the test's thread", file=sys.stderr)
            wrote.set()
            stop.wait(0.001)

    thread = threading.Thread(target=noise, daemon=True)
    thread.start()
    try:
        wrote.wait(10)
        args = ["--root", str(REPO), "--workspace", str(tmp_path / "ws"), "lanes"]
        res = run_forge_in_process(*args)
    finally:
        stop.set()
        thread.join(10)
    assert res.code == 0, res
    assert "cpu" in res.stdout and "noise" not in res.stderr + res.stdout


# ----------------------------------------------------------------------------- the zygote


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["--no-such-flag"],
        ["status", "--json", "--no-such-flag"],
        ["--root", str(REPO), "--workspace", "{ws}", "lanes", "--json"],
        ["--root", "{ws}/nowhere", "status"],
    ],
)
def test_a_forked_child_is_what_a_fresh_interpreter_gives(
    tmp_path: Path, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = [a.replace("{ws}", str(tmp_path / "ws")) for a in args]
    forked = run_forge_subprocess(*argv)
    monkeypatch.setenv("FORGETEST_EXEC", "1")
    fresh = run_forge_subprocess(*argv)
    assert (forked.code, forked.stdout, forked.stderr) == (fresh.code, fresh.stdout, fresh.stderr)


def test_a_forked_child_is_a_process_of_its_own(forge_root: Path, tmp_path: Path) -> None:
    """Killed at a fault point it is -9 (as a killed child is) and the next one still runs;
    its working directory and environment are the run's, not the zygote's."""
    from support import zygote

    if not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd here (Linux 5.3+): every child is a fresh interpreter")
    forks = zygote.get()  # this platform forks, and the runs below are forks: the test means it
    assert forks is not None and forks.serves(forge_env(), forge_root)
    killed = run_forge("patch", cwd=forge_root, env={"DGR_FAULT": "patch.journal"})
    assert killed.code == -9, killed
    here = run_forge_subprocess("status", "--json", cwd=forge_root)  # the root found from cwd
    assert here.code == 0 and here.json["command"] == "status", here
    (tmp_path / "empty").mkdir()
    elsewhere = run_forge_subprocess("status", cwd=tmp_path / "empty")
    assert elsewhere.code == 2, elsewhere
    assert f"no forge root found from {tmp_path / 'empty'}" in elsewhere.stderr, elsewhere
    named = run_forge_subprocess(
        "status", cwd=tmp_path / "empty", env={"DGR_ROOT": str(forge_root)}
    )
    assert named.code == 0, named  # the run's environment, not the zygote's


def test_a_forked_child_past_its_timeout_is_killed(forge_root: Path) -> None:
    import subprocess
    import time

    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_forge("patch", cwd=forge_root, env={"DGR_FAULT": "patch.journal:pause"}, timeout=1)
    assert time.monotonic() - started < 20
    again = run_forge("patch", cwd=forge_root)  # the killed run held the lock: gone with it
    assert again.code == 0, again


def test_a_forked_popen_is_what_popen_gives(forge_root: Path) -> None:
    """Pipes, poll, a wait past its timeout, a session of its own, a group kill: -9."""
    import signal
    import subprocess

    from support.cli import forge_popen
    from support.zygote import ForkedPopen

    if not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd here (Linux 5.3+): forge_popen starts a fresh interpreter")
    with forge_popen("--version", env=forge_env(), stdout=subprocess.PIPE, text=True) as version:
        out, _ = version.communicate(timeout=60)
    assert isinstance(version, ForkedPopen) and version.returncode == 0
    assert out == run_forge_subprocess("--version").stdout

    paused = forge_popen(
        "patch", cwd=forge_root, env=forge_env({"DGR_FAULT": "patch.journal:pause"}),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    assert isinstance(paused, ForkedPopen) and paused.stderr is not None
    with paused, paused.stderr:
        assert any("paused at patch.journal" in line for line in paused.stderr)
        assert paused.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            paused.wait(timeout=0.2)
        assert os.getpgid(paused.pid) == paused.pid != os.getpgid(0)
        os.killpg(paused.pid, signal.SIGKILL)
        assert paused.wait(timeout=30) == -9


def test_the_harness_keeps_only_the_caches_it_names_between_runs() -> None:
    """An in-process run clears the forge's functools caches (a run must not see the last
    one's answers) but keeps the CI templates' jinja environment (package data): without
    the exception every rendering test compiled its templates again."""
    from support import cli

    from dgr_forge.ci import render
    from dgr_forge.upstream import surface

    env = render._environment()
    cli._reset_module_state()  # lists the caches of the modules now imported
    surface._token()
    assert surface._token.cache_info().currsize == 1
    cli._reset_module_state()
    assert surface._token.cache_info().currsize == 0
    assert render._environment() is env


def test_the_zygotes_two_reply_lines_read_apart_when_they_arrive_together() -> None:
    """A child that ends at once: its pid and its exit code reach the socket in one segment;
    each read takes its own line (the pid was once read as b"4299\\n2\\n")."""
    import socket

    from support.zygote import _line

    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(b"4299\n2\n")
        assert (_line(ours), _line(ours)) == (b"4299\n", b"2\n")
