"""Serving a test upstream over `git daemon` on 127.0.0.1, optionally throttled.

The throttle is a real `uploadpack.packObjectsHook` that forwards pack-objects' output in
small chunks with a pause, so a fetch is reliably mid-transfer when a test kills it or
starts a second run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

from .cli import forge_env, forge_popen
from .git import GIT_ENV

# git config that makes a client speak protocol v0 (no SHA wants unless the server allows)
PROTOCOL_V0 = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "protocol.version",
    "GIT_CONFIG_VALUE_0": "0",
}

_SLOW_HOOK = textwrap.dedent(
    f"""\
    #!{sys.executable}
    import os, subprocess, sys, time
    proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
    delay = float(os.environ.get("DGR_TEST_SLOW", "0"))
    while True:
        chunk = proc.stdout.read(4096)
        if not chunk:
            break
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        time.sleep(delay)
    sys.exit(proc.wait())
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def git_daemon(base: Path, slow: float = 0.0) -> Iterator[str]:
    """Serve every repository under `base` at git://127.0.0.1:PORT/<dir>; yields that prefix."""
    port = free_port()
    cmd = ["git"]
    env = {**os.environ, **GIT_ENV}
    if slow:
        hook = base / "slow-pack-objects"
        hook.write_text(_SLOW_HOOK)
        hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
        cmd += ["-c", f"uploadpack.packObjectsHook={hook}"]
        env["DGR_TEST_SLOW"] = str(slow)
    cmd += [
        "daemon",
        "--export-all",
        f"--base-path={base}",
        "--reuseaddr",
        "--informative-errors",
        "--listen=127.0.0.1",
        f"--port={port}",
        str(base),
    ]
    # stderr: the readiness probe makes the daemon log "hung up unexpectedly"
    proc = subprocess.Popen(
        cmd, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"git daemon did not start on port {port}") from None
                time.sleep(0.05)
        yield f"git://127.0.0.1:{port}"
    finally:
        # the daemon forks a child per connection: stop the whole group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


class Background:
    """`dgr-forge ...` running in its own process group; stderr read line by line."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.proc = forge_popen(
            *args,
            cwd=cwd,
            env=forge_env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []

    def wait_for(self, needle: str, timeout: float = 60) -> str:
        """Read stderr until a line contains `needle` (fails if the process ends first)."""
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise AssertionError(f"process ended before {needle!r}: {''.join(self.lines)}")
            self.lines.append(line)
            if needle in line:
                return line
        raise AssertionError(f"timed out waiting for {needle!r}: {''.join(self.lines)}")

    def kill_group(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, "".join(self.lines) + err
