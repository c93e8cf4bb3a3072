"""The compiler cache while one `build` runs: its sccache server, and what it did.

The forge owns the server (docs/distributed-compilation.md, 'One sccache server per
build'); per lane, `begin` and `figures` give the lane's own counters (docs/compiler-cache.md).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import struct
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import msgspec
from msgspec import Meta, Struct, field

from dgr_forge.cache import dist as sccache_dist
from dgr_forge.cache.select import Cache, CacheSetup, Distributed, sccache_config
from dgr_forge.core import proc
from dgr_forge.core.errors import OperationFailed
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import repr_without

if TYPE_CHECKING:
    import socket  # ~3 ms: imported where a server is started (`_spawn`), never on a no-op

_TIMEOUT = 60.0  # seconds for one sccache/ccache control command
_STARTUP = 30.0  # seconds for the sccache server to say it listens
_STOP = 30.0  # seconds for it to finish after --stop-server, before it is killed


class CacheSession(Struct):
    setup: CacheSetup
    env: dict[str, str]  # the server's environment: may hold secrets (not in the repr)
    out: Reporter | None = None
    own_server: bool = False  # we started it (on our socket) and stop it
    warned: bool = False
    _before: tuple[int, int, int, int] = (0, 0, 0, 0)
    _statslog: Path | None = None
    _server: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return repr_without(self, frozenset({"env"}))

    def begin(self, statslog: Path) -> dict[str, str]:
        """Start counting for one lane; what its processes need in their environment."""
        if self.setup.tool == "ccache":
            statslog.parent.mkdir(parents=True, exist_ok=True)
            self._statslog = statslog
            statslog.write_bytes(b"")  # this lane's compiles only
            return {"CCACHE_STATSLOG": str(self._statslog)}
        if self.setup.tool == "sccache":
            self._before = self._sccache_counts() or (0, 0, 0, 0)
        return {}

    def figures(self) -> Cache | None:
        """The cache with this lane's `hits` and `misses` (with a scheduler, what ran on the
        pool and here); None without a cache or for a count the tool would not give."""
        base = Cache.of(self.setup)
        if self.setup.tool == "ccache" and self._statslog is not None:
            done = self._run("--print-log-stats", CCACHE_STATSLOG=str(self._statslog))
            if done is None or done.returncode != 0:
                return msgspec.structs.replace(base, hits=None, misses=None)
            pairs = (line.partition("\t") for line in done.stdout.splitlines())
            counters = {key: int(value) for key, _, value in pairs if value.strip().isdigit()}
            hit = counters.get("direct_cache_hit", 0) + counters.get("preprocessed_cache_hit", 0)
            return msgspec.structs.replace(base, hits=hit, misses=counters.get("cache_miss", 0))
        if self.setup.tool != "sccache":
            return None
        after = self._sccache_counts()
        hits = misses = remote = local = None
        if after is not None:  # this lane's, since `begin`
            hits, misses, remote, compiles = (
                max(0, a - b) for a, b in zip(after, self._before, strict=True)
            )
            local = max(0, compiles - remote)
        used = msgspec.structs.replace(base, hits=hits, misses=misses)
        if self.setup.distributed:
            used.distributed = Distributed(
                scheduler=self.setup.distributed, remote_compiles=remote, local_compiles=local
            )
            if local and not remote and not self.warned and self.out is not None:
                self.warned = True
                self.out.warn(
                    f"sccache-dist: none of {local} compile(s) ran on the pool "
                    f"({self.setup.distributed}); they ran locally"
                )
        return used

    def _run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str] | None:
        assert self.setup.launcher
        try:
            return proc.capture(
                [self.setup.launcher, *args], env={**self.env, **env}, timeout=_TIMEOUT
            )
        except (OSError, subprocess.TimeoutExpired):
            return None

    def _sccache_counts(self) -> tuple[int, int, int, int] | None:
        """Hits, misses, pool compiles, compiles."""
        done = self._run("--show-stats", "--stats-format=json")
        if done is None or done.returncode != 0:
            return None
        try:
            stats = msgspec.json.decode(done.stdout, type=_Shown).stats
        except msgspec.DecodeError:
            return None
        hits, misses = (sum(c.counts.values()) for c in (stats.cache_hits, stats.cache_misses))
        return hits, misses, sum(stats.dist_compiles.values()), stats.compilations

    def start(self) -> None:
        sock = self.setup.env.get("SCCACHE_SERVER_UDS")
        if sock is None:  # the user's own server address: theirs to run, ours only to use
            done = self._run("--show-stats")  # connects, or starts the one server there
            if done is None or done.returncode != 0:
                self._failed("" if done is None else (done.stderr or done.stdout))
            return
        self.own_server = True
        if os.path.lexists(sock):
            self._run("--stop-server")  # a server a killed build left: it holds old settings
            Path(sock).unlink(missing_ok=True)
        if (refused := self._spawn(Path(sock))) is not None:
            self.stop()
            self._failed(refused)

    def _spawn(self, sock: Path) -> str | None:
        """Start the server as our child; None once it says it listens, else what it said."""
        import socket
        import tempfile

        assert self.setup.launcher
        with tempfile.TemporaryDirectory(prefix="dgr-sccache-") as tmp:
            notify = Path(tmp) / "started"
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
                listener.bind(str(notify))
                listener.listen(1)
                listener.settimeout(_STARTUP)
                env = dict(self.env, SCCACHE_START_SERVER="1", SCCACHE_NO_DAEMON="1")
                env["SCCACHE_STARTUP_NOTIFY"] = str(notify)
                log = sock.with_suffix(".log")
                self._server = proc.spawn([self.setup.launcher], env=env, log=log)
                if not _await_either(listener, self._server.pid):
                    return _tail(log) or "it exited, or said nothing within the deadline"
                try:
                    conn, _ = listener.accept()
                    with conn:
                        conn.settimeout(_STARTUP)
                        data = b""
                        while len(data) < 1 << 16 and (chunk := conn.recv(4096)):
                            data += chunk
                except OSError:
                    return _tail(log) or "no startup notification"
        # u32 length (big-endian), then bincode: variant 0 is Ok { addr }
        if len(data) >= 8 and struct.unpack("<I", data[4:8])[0] == 0:
            return None
        return data[8:].decode("utf-8", "replace") or _tail(log) or "it refused to start"

    def _failed(self, said: str) -> None:
        client = sccache_dist.client(sccache_config(self.env))
        raise OperationFailed(
            "sccache: its server did not start: " + sccache_dist.clean(said, client, 400),
            hint="run `SCCACHE_LOG=debug sccache --start-server` with the same settings to see "
            "why, or build with --cache ccache|off",
        )

    def stop(self) -> None:
        if not self.own_server:
            return
        self._run("--stop-server")
        if self._server is not None:
            try:
                self._server.wait(_STOP)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
            self._server = None


@contextmanager
def open_cache_session(
    setup: CacheSetup, environ: Mapping[str, str], out: Reporter | None = None
) -> Iterator[CacheSession]:
    """The build's cache session: for sccache its own server, stopped however it ends."""
    env = {**environ, **setup.env, **setup.server_env}
    session = CacheSession(setup, env, out)
    if setup.tool != "sccache" or not setup.launcher:
        yield session
        return
    client = sccache_dist.client(sccache_config(env)) if setup.distributed else None
    if client is not None:
        if (check := sccache_dist.check(client)).status == "unauthorized":
            raise OperationFailed(
                check.line().split("\n", 1)[0],
                hint=check.fix,
                details={"scheduler": check.scheduler, "status": check.status},
            )
        if check.status != "ok" and out is not None:
            out.warn(check.line())
            session.warned = True
    session.start()
    try:
        yield session
    finally:
        session.stop()


Count = Annotated[int, Meta(ge=0)]


class _Counts(Struct):
    counts: dict[str, Count] = field(default_factory=dict)  # per language


class _Stats(Struct):  # what a lane's figures use of `sccache --show-stats --stats-format=json`
    cache_hits: _Counts = field(default_factory=_Counts)
    cache_misses: _Counts = field(default_factory=_Counts)
    dist_compiles: dict[str, Count] = field(default_factory=dict)  # per server
    compilations: Count = 0


class _Shown(Struct):
    stats: _Stats


def _await_either(listener: socket.socket, pid: int) -> bool:
    """The server's startup notification came: False when it exits first (seen through a
    pidfd where there is one) or the deadline passes."""
    with selectors.DefaultSelector() as sel:
        sel.register(listener, selectors.EVENT_READ)
        pidfd = None
        with contextlib.suppress(AttributeError, OSError):
            pidfd = os.pidfd_open(pid)
            sel.register(pidfd, selectors.EVENT_READ)
        try:
            ready = sel.select(_STARTUP)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        return any(key.fileobj is listener for key, _ in ready)


def _tail(log: Path) -> str:
    try:
        with log.open("rb") as fh:
            fh.seek(max(0, log.stat().st_size - 2000))
            return fh.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def describe(used: Cache) -> str:
    """What the cache did in this lane's build, in one line."""
    line = f"compiler cache {used.tool}: {used.hits} hit(s), {used.misses} miss(es)"
    if isinstance(dist := used.distributed, Distributed):
        line += (
            f"; {dist.remote_compiles} compile(s) on the pool ({dist.scheduler}), "
            f"{dist.local_compiles} here"
        )
    return line
