"""Every network phase has a deadline (issue 21 #2): a server that answers `100 Continue`
forever, or trickles its header bytes one at a time (each read well inside the read
timeout), cannot hold `artifacts provision`: the whole header phase is bounded by
DGR_ARTIFACTS_TIMEOUT and interim responses are capped."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from support.cli import run_forge

from dgr_forge.models import manifest as models
from dgr_forge.models.manifest import ModelFile

DEADLINE = 1.0


@contextmanager
def raw_server(talk: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A loopback TCP server: `talk` answers each connection until the client goes away
    or the test ends (`stop`); yields the base URL."""
    stop = threading.Event()
    lsock = socket.create_server(("127.0.0.1", 0))
    lsock.settimeout(0.2)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except TimeoutError:
                continue
            except OSError:
                return

            def one(c: socket.socket = conn) -> None:
                with c:
                    c.recv(65536)  # the request
                    with suppress(OSError):  # the client cut the connection: what we want
                        talk(c, stop)

            threading.Thread(target=one, daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{lsock.getsockname()[1]}"
    finally:
        stop.set()
        lsock.close()
        thread.join(5)


def continue_forever(c: socket.socket, stop: threading.Event) -> None:
    until = time.monotonic() + 30
    while not stop.is_set() and time.monotonic() < until:
        c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        stop.wait(0.02)  # pacing only: the client decides when it ends


def trickle_headers(c: socket.socket, stop: threading.Event) -> None:
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nX-Slow: ")
    until = time.monotonic() + 30
    while not stop.is_set() and time.monotonic() < until:
        c.sendall(b"a")  # one byte each 50 ms: every read is far inside the read timeout
        stop.wait(0.05)


@pytest.mark.parametrize(
    ("talk", "said"),
    [(continue_forever, "interim"), (trickle_headers, "no complete response headers")],
)
def test_a_server_holding_the_header_phase_is_cut_within_the_deadline(
    tmp_path: Path, talk: Callable[[socket.socket, threading.Event], None], said: str
) -> None:
    with raw_server(talk) as base:
        m = tmp_path / "m.toml"
        f = ModelFile("x.gguf", 10, "0" * 64, f"{base}/x.gguf")
        m.write_text(models.dumps("x", [f]))
        started = time.monotonic()
        res = run_forge(
            "artifacts", "provision", str(m), "--dest", str(tmp_path / "d"),
            env={
                "DGR_ARTIFACTS_TIMEOUT": str(DEADLINE),
                "DGR_ARTIFACTS_TRIES": "1",
                "DGR_ARTIFACTS_BACKOFF": "0.01",
            },
            subprocess=True,  # a hang must fail this test, not hold the run
            timeout=60,
        )  # fmt: skip
        took = time.monotonic() - started
    assert res.code == 1, res
    assert said in res.stderr, res
    assert "Traceback" not in res.stderr
    assert took < DEADLINE + 8, took  # cut at the deadline, not held


def test_the_header_deadline_holds_through_a_proxy(tmp_path: Path) -> None:
    with raw_server(trickle_headers) as proxy:
        m = tmp_path / "m.toml"
        m.write_text(
            models.dumps("x", [ModelFile("x.gguf", 10, "0" * 64, "http://models.invalid/x.gguf")])
        )
        res = run_forge(
            "artifacts", "provision", str(m), "--dest", str(tmp_path / "d"),
            env={
                "DGR_ARTIFACTS_TIMEOUT": str(DEADLINE),
                "DGR_ARTIFACTS_TRIES": "1",
                "http_proxy": proxy,
                "HTTP_PROXY": proxy,
                "no_proxy": "",
                "NO_PROXY": "",
            },
            subprocess=True,
            timeout=60,
        )  # fmt: skip
    assert res.code == 1, res
    assert "no complete response headers" in res.stderr, res
