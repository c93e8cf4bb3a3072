"""Helpers for the compiler-cache tests and bench: a small real CMake C project in a
"workspace", built with CMake + Ninja through `cache.select`'s launcher and env (as
`build` does, with its `-ffile-prefix-map`s), the tools' own statistics, and a loopback
HTTP server that stores what ccache's http remote storage PUTs."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from dgr_forge.cache.select import CacheSetup
from dgr_forge.host.doctor import Doctor
from dgr_forge.host.probes import load_probes

from .roots import REPO

CMAKE_LISTS = """\
cmake_minimum_required(VERSION 3.18)
project(cachetest C)
file(GLOB SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/src/*.c)
list(SORT SOURCES)
add_library(cachetest STATIC ${SOURCES})
target_include_directories(cachetest PRIVATE include)
"""


def doctor(path_env: str | None = None) -> Doctor:
    return Doctor(load_probes(REPO / "toolchains" / "probes.toml"), path_env)


def make_project(workspace: Path, sources: int = 10, heavy: int = 0) -> Path:
    """`<workspace>/src/proj`: a C project whose every file uses __FILE__ (a path in the
    object) and a shared header."""
    src = workspace / "src" / "proj"
    (src / "src").mkdir(parents=True, exist_ok=True)
    (src / "include").mkdir(exist_ok=True)
    (src / "CMakeLists.txt").write_text(CMAKE_LISTS)
    (src / "include" / "common.h").write_text("#define COMMON 3\n")
    for i in range(sources):
        body = f'int f{i}(int x) {{ printf("%s %d\\n", __FILE__, x); return x * {i} + COMMON; }}\n'
        if heavy:  # `heavy` functions more per file: compile time dominates, as in ggml (bench)
            body += "".join(
                f"static double g{i}_{j}(double v) {{ double a = v; "
                f"for (int k = 0; k < {j + 3}; k++) a = a * 1.0001 + k / (a + 1.0); "
                f"return a; }}\ndouble h{i}_{j}(double v) {{ return g{i}_{j}(v) + f{i}(1); }}\n"
                for j in range(heavy)
            )
        (src / "src" / f"f{i:03d}.c").write_text('#include <stdio.h>\n#include "common.h"\n' + body)
    return src


def clean_env(**extra: str) -> dict[str, str]:
    """The process env without the user's own cache settings (tests must not use them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CCACHE_", "SCCACHE_", "DGR_"))}
    env.update(extra)
    return env


def prefix_maps(workspace: Path) -> str:
    """What `build` passes: source and build paths mapped to fixed names."""
    ws = os.path.abspath(workspace)
    return f"-ffile-prefix-map={ws}/src/proj=/dgr/src -ffile-prefix-map={ws}/build/cpu=/dgr/build"


def build(
    workspace: Path,
    setup: CacheSetup,
    env: dict[str, str],
    *,
    maps: bool = True,
    jobs: int = 2,
    build_type: str = "RelWithDebInfo",
) -> dict[str, object] | None:
    """Configure + build `<workspace>/src/proj` in `<workspace>/build/cpu` as `build` does;
    for sccache, the server's statistics once its cache writes are done, else None.

    sccache compiles run in the build's own server, as `build`'s do (cache_session): left
    to themselves, `-j N` compiles each start a server on the same socket and only the last
    one's stay reachable, so the counts read afterwards miss the others' compiles."""
    if setup.tool == "sccache" and "SCCACHE_SERVER_UDS" in setup.env:
        from dgr_forge.cache.session import open_cache_session

        with open_cache_session(setup, env):
            _build(workspace, setup, env, maps=maps, jobs=jobs, build_type=build_type)
            return _settled_stats(setup, env)
    _build(workspace, setup, env, maps=maps, jobs=jobs, build_type=build_type)
    return None


def _settled_stats(setup: CacheSetup, env: dict[str, str]) -> dict[str, object]:
    """The server's statistics once every miss's cache write has finished: the server
    answers a compile before its write (it runs after, in the background), and a server
    stopped or read too early has not written (nor counted) the last entries."""
    deadline = time.monotonic() + 60
    while True:
        stats = sccache_stats(setup, env)
        if setup.mode == "ro":
            return stats  # writes nothing
        hits, calls = sccache_hits(stats)
        written = sum(int(str(stats.get(k, 0))) for k in ("cache_writes", "cache_write_errors"))
        if written >= calls - hits or time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


def _build(
    workspace: Path,
    setup: CacheSetup,
    env: dict[str, str],
    *,
    maps: bool,
    jobs: int,
    build_type: str,
) -> None:
    d = doctor()
    cmake, ninja = d.tool("cmake").path, d.tool("ninja").path
    assert cmake and ninja
    full = {**env, **setup.env}
    args = [
        cmake,
        "-G",
        "Ninja",
        "-S",
        str(workspace / "src" / "proj"),
        "-B",
        str(workspace / "build" / "cpu"),
        f"-DCMAKE_MAKE_PROGRAM={ninja}",
        f"-DCMAKE_BUILD_TYPE={build_type}",
    ]
    if maps:
        args.append(f"-DCMAKE_C_FLAGS={prefix_maps(workspace)}")
    if setup.launcher:
        args.append(f"-DCMAKE_C_COMPILER_LAUNCHER={setup.launcher}")
    subprocess.run(args, env=full, check=True, capture_output=True, cwd=workspace)
    subprocess.run(
        [cmake, "--build", str(workspace / "build" / "cpu"), "-j", str(jobs)],
        env=full,
        check=True,
        capture_output=True,
        cwd=workspace,
    )


def ccache_stats(setup: CacheSetup, env: dict[str, str]) -> dict[str, int]:
    """ccache's own counters (`ccache --print-stats`) for the cache dir in `env`."""
    assert setup.launcher
    out = subprocess.run(
        [setup.launcher, "--print-stats"],
        env={**env, **setup.env},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    stats: dict[str, int] = {}
    for line in out.splitlines():
        key, _, value = line.partition("\t")
        if value.strip().isdigit():
            stats[key] = int(value)
    return stats


def ccache_hits(stats: dict[str, int]) -> tuple[int, int]:
    """(hits, compile calls) from ccache's counters."""
    hits = stats.get("direct_cache_hit", 0) + stats.get("preprocessed_cache_hit", 0)
    return hits, hits + stats.get("cache_miss", 0)


def sccache_stats(setup: CacheSetup, env: dict[str, str]) -> dict[str, object]:
    assert setup.launcher
    out = subprocess.run(
        [setup.launcher, "--show-stats", "--stats-format", "json"],
        env={**env, **setup.env},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    stats: dict[str, object] = json.loads(out)["stats"]
    return stats


def sccache_hits(stats: dict[str, object]) -> tuple[int, int]:
    def total(key: str) -> int:
        value = stats.get(key)
        counts = value.get("counts", {}) if isinstance(value, dict) else {}
        return sum(int(v) for v in counts.values())

    hits = total("cache_hits")
    return hits, hits + total("cache_misses")


def snapshot(directory: Path, skip_stats: bool = True) -> dict[str, bytes]:
    """Every cache entry file and its bytes (counters, locks, directory tags and the
    tool's own scratch left out)."""
    out: dict[str, bytes] = {}
    for path in sorted(directory.rglob("*")):
        if not path.is_file() or (skip_stats and path.name in ("stats", "stats.lock")):
            continue
        if path.suffix == ".lock" or path.name.endswith(".tmp") or path.name == "CACHEDIR.TAG":
            continue
        if path.name.startswith(".") or path.relative_to(directory).parts[0] == "tmp":
            continue
        out[str(path.relative_to(directory))] = path.read_bytes()
    return out


# ----------------------------------------------------------------------------- loopback


@dataclass
class Store:
    """What the loopback server holds, and what it was asked."""

    objects: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, str, int]] = field(default_factory=list)
    auth: str | None = None  # "user:password" the server demands (basic auth)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, method: str, status: int | None = None) -> int:
        return sum(
            1 for m, _, s in self.requests if m == method and (status is None or s == status)
        )


def _handler(store: Store) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def _reply(self, status: int, body: bytes = b"") -> None:
            if self.command != "PUT":  # a request body left unread breaks the next request
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with store.lock:
                store.requests.append((self.command, self.path, status))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body and self.command != "HEAD":
                self.wfile.write(body)

        def _allowed(self) -> bool:
            if store.auth is None:
                return True
            want = "Basic " + base64.b64encode(store.auth.encode()).decode()
            return self.headers.get("Authorization") == want

        def do_GET(self) -> None:
            if not self._allowed():
                return self._reply(401)
            with store.lock:
                body = store.objects.get(self.path)
            self._reply(200, body) if body is not None else self._reply(404)

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_PUT(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            if not self._allowed():
                return self._reply(401)
            with store.lock:
                store.objects[self.path] = body
            self._reply(201)

        def do_MKCOL(self) -> None:  # WebDAV (sccache's webdav backend makes directories)
            self._reply(201)

        def do_MOVE(self) -> None:  # WebDAV: opendal writes a temporary file, then moves it
            from urllib.parse import urlsplit

            target = urlsplit(self.headers.get("Destination", "")).path
            with store.lock:
                body = store.objects.pop(self.path, None)
                if body is not None and target:
                    store.objects[target] = body
            self._reply(201 if body is not None and target else 404)

        def do_PROPFIND(self) -> None:  # WebDAV: "does the directory exist?" - make it
            self._reply(404)

        def do_DELETE(self) -> None:
            with store.lock:
                store.objects.pop(self.path, None)
            self._reply(204)

    return Handler


@contextmanager
def loopback_server(auth: str | None = None) -> Iterator[tuple[str, Store]]:
    """An HTTP server on 127.0.0.1 (free port) storing PUTs and serving GETs."""
    store = Store(auth=auth)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(store))
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", store
    finally:
        server.shutdown()
        server.server_close()
