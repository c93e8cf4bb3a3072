"""Forge child processes forked from a prepared interpreter instead of started afresh.

Most of a `python -m dgr_forge` child's cost is the interpreter's start and the forge's
imports (~0.15 s of CPU); the suite starts a few hundred such children, most of them to be
killed at a fault point. The zygote is one interpreter per test process, started as
`forge_cmd` starts a child (this executable, the environment `forge_env` gives), that has
imported the forge and waits on a Unix socket. Each run is a fork of it: a real process
with its own pid, file descriptors (0, 1 and 2 are the caller's; nothing else is open), working
directory, environment and umask, that runs `python -m dgr_forge ARGS` through runpy and
ends as the interpreter ends (threads joined, atexit handlers run, streams flushed). A
kill, a pause, a lock it holds, its exit code (-9 for SIGKILL) are a process's own.

A run takes the exec path instead where a fork would not be the same child: an
environment whose interpreter or locale settings (PYTHON*, LANG, LC_*) differ from the
zygote's, a working directory that does not exist, FORGETEST_EXEC=1, or no pidfd (Linux
only).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

# The zygote itself: preload the forge, then serve forks. Run with `-c`; argv[1] is the
# socket path, argv[2] the read end of a pipe whose EOF means the test process is gone.
_SERVER = r"""
import json, os, pkgutil, selectors, socket, sys, importlib

import dgr_forge
for info in pkgutil.walk_packages(dgr_forge.__path__, "dgr_forge."):
    if not info.name.endswith("__main__"):
        try:
            importlib.import_module(info.name)
        except Exception:
            pass
import gc
gc.collect()
gc.freeze()  # the preloaded modules: never walked by a child's collector (nor copied by it)

def child(req, fds):
    os.dup2(fds[0], 0); os.dup2(fds[1], 1); os.dup2(fds[2], 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    if req.get("setsid"):
        os.setsid()
    os.umask(req["umask"])
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    code = 0
    try:
        import runpy
        sys.argv = ["dgr_forge", *req["argv"]]
        runpy.run_module("dgr_forge", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    try:  # the interpreter's own end: threads, atexit, streams
        import threading
        threading._shutdown()
    except BaseException:
        pass
    try:
        import atexit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code & 0xFF)

def read_request(conn):
    head, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    size = int.from_bytes(head[:8], "big")
    body = head[8:]
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise OSError("short request")
        body += more
    return json.loads(body), fds

listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(64)
gone = int(sys.argv[2])
sel = selectors.DefaultSelector()
sel.register(listener, selectors.EVENT_READ, "accept")
sel.register(gone, selectors.EVENT_READ, "gone")
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        if key.data == "gone":
            sys.exit(0)
        if key.data == "accept":
            conn, _ = listener.accept()
            try:
                req, fds = read_request(conn)
            except (OSError, ValueError):
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                child(req, fds)
            for fd in fds:
                os.close(fd)
            try:
                conn.sendall(b"%d\n" % pid)
            except OSError:
                pass
            sel.register(os.pidfd_open(pid), selectors.EVENT_READ, (pid, conn))
        else:
            pid, conn = key.data
            sel.unregister(key.fileobj)
            os.close(key.fileobj)
            _, status = os.waitpid(pid, 0)
            try:
                conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
            except OSError:
                pass
            conn.close()
"""

# what decides how an interpreter starts (and so what a fork of the zygote already is)
_STARTUP = ("PYTHON", "LANG", "LC_")


def _startup(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_STARTUP)}


class Zygote:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.dir = tempfile.mkdtemp(prefix="dgr-zygote-")
        atexit.register(shutil.rmtree, self.dir, ignore_errors=True)
        self.path = os.path.join(self.dir, "s")
        read, self._alive = os.pipe()  # the zygote ends when this process's end closes
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, self.path, str(read)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env=env,
            cwd="/",
            pass_fds=(read,),
            text=True,
        )
        os.close(read)
        atexit.register(self.close)
        ready = self.proc.stdout.readline() if self.proc.stdout else ""
        if ready.strip() != "ready":
            raise OSError(f"the zygote did not start: {ready!r}")

    def close(self) -> None:
        """End the zygote and reap it, so that the CPU of its children counts in this
        process's (what `time` and getrusage(RUSAGE_CHILDREN) report of the run)."""
        with contextlib.suppress(OSError):
            os.close(self._alive)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def serves(self, env: dict[str, str], cwd: Path | None) -> bool:
        return (
            self.proc.poll() is None
            and _startup(env) == _startup(self.env)
            and (cwd is None or os.path.isdir(cwd))
        )

    def launch(
        self,
        argv: list[str],
        cwd: Path | str | None,
        env: dict[str, str],
        fds: list[int],
        *,
        umask: int | None = None,
        setsid: bool = False,
    ) -> tuple[int, socket.socket]:
        """Fork a child running `dgr-forge ARGV` with `fds` as its 0, 1 and 2: its pid, and
        the connection on which the zygote sends its exit code when it ends."""
        if umask is None:
            umask = os.umask(0)
            os.umask(umask)
        req = {"argv": argv, "cwd": str(cwd or os.getcwd()), "env": env, "umask": umask}
        body = json.dumps({**req, "setsid": setsid}).encode()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            socket.send_fds(conn, [len(body).to_bytes(8, "big") + body], fds)
            return int(_line(conn)), conn
        except BaseException:
            conn.close()
            raise


class ForkedPopen(subprocess.Popen):  # type: ignore[type-arg]
    """`subprocess.Popen` of `dgr-forge ARGS` whose child is a fork of the zygote: pipes,
    `communicate`, `poll`, `wait`, `kill` and `send_signal` as Popen has them (the exit
    code comes from the zygote, which is the child's parent)."""

    def __init__(self, zygote: Zygote, argv: list[str], **kwargs: Any) -> None:
        self._zygote, self._argv = zygote, argv
        self._conn: socket.socket | None = None
        super().__init__(["dgr-forge", *argv], **kwargs)

    def _execute_child(
        self, args: Any, executable: Any, preexec_fn: Any, close_fds: Any, pass_fds: Any,
        cwd: Any, env: Any, startupinfo: Any, creationflags: Any, shell: Any,
        p2cread: int, p2cwrite: int, c2pread: int, c2pwrite: int, errread: int,
        errwrite: int, restore_signals: Any, gid: Any, gids: Any, uid: Any, umask: int,
        start_new_session: bool, *rest: Any,
    ) -> None:  # fmt: skip
        fds = [p2cread, c2pwrite, errwrite]
        fds = [fd if fd != -1 else i for i, fd in enumerate(fds)]  # not redirected: ours
        self.pid, self._conn = self._zygote.launch(
            self._argv, cwd, dict(env if env is not None else os.environ), fds,
            umask=None if umask < 0 else umask, setsid=start_new_session,
        )  # fmt: skip
        pairs = ((p2cread, p2cwrite), (c2pwrite, c2pread), (errwrite, errread))
        devnull = getattr(self, "_devnull", None)
        for child_end, parent_end in pairs:  # as Popen closes them once the child has them
            if child_end != -1 and parent_end != -1 and child_end != devnull:
                os.close(child_end)
        if devnull is not None:
            os.close(devnull)
        self._closed_child_pipe_fds = True

    def _exit_code(self, timeout: float | None) -> int | None:
        if self._conn is None:
            return self.returncode
        self._conn.settimeout(timeout)
        try:
            code = int(_line(self._conn))
        except (TimeoutError, BlockingIOError):
            return None
        self._conn.close()
        self._conn = None
        return code

    def _internal_poll(self, *_: Any, **__: Any) -> int | None:
        if self.returncode is None:
            self.returncode = self._exit_code(0)
        return self.returncode

    def _wait(self, timeout: float | None) -> int:
        if self.returncode is None:
            self.returncode = self._exit_code(timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode


def _line(conn: socket.socket) -> bytes:
    """One reply line from the zygote (its pid, then its exit code), byte by byte: a child
    that ends at once has both lines in one segment, and the second is the next call's."""
    got = b""
    while not got.endswith(b"\n"):
        more = conn.recv(1)
        if not more:
            raise OSError("the zygote closed the connection")
        got += more
    return got


_ZYGOTES: dict[int, Zygote | None] = {}
_LOCK = threading.Lock()


def get() -> Zygote | None:
    """This process's zygote (started at the first call, in the environment `forge_env`
    gives a forge child), or None where none can serve."""
    if os.environ.get("FORGETEST_EXEC") == "1" or not hasattr(os, "pidfd_open"):
        return None
    from .cli import forge_env

    with _LOCK:
        pid = os.getpid()
        if pid not in _ZYGOTES:
            try:
                _ZYGOTES[pid] = Zygote(forge_env())
            except OSError:
                _ZYGOTES[pid] = None
        return _ZYGOTES[pid]
