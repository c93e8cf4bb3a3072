"""HTTP for model files: a requests session whose every response must finish its header
phase within a deadline (`_HeaderDeadline`), after at most `MAX_INTERIM` interim responses.
Used by `download` (whole files) and `map_headers` (split headers by Range requests).
"""

from __future__ import annotations

import functools
import http.client
import socket
import threading
from contextlib import suppress

import requests
import requests.adapters
import urllib3
import urllib3.connection
import urllib3.connectionpool

# Interim responses (`100 Continue`) allowed before the real one: a server sending them
# forever would otherwise hold the request before any timeout applies.
MAX_INTERIM = 16

# why this thread's last request was cut in the header phase (read by `_brief`)
HEADER_PHASE = threading.local()


class _CappedResponse(http.client.HTTPResponse):
    """http.client's response, counting the interim `100 Continue` responses it skips."""

    def _read_status(self) -> tuple[str, int, str]:
        version, status, reason = super()._read_status()  # type: ignore[misc]
        if status == http.client.CONTINUE:
            self._interim = getattr(self, "_interim", 0) + 1
            if self._interim > MAX_INTERIM:
                HEADER_PHASE.why = f"more than {MAX_INTERIM} interim (1xx) responses"
                raise http.client.HTTPException(HEADER_PHASE.why)
        return version, status, reason


class _HeaderDeadline(urllib3.connection.HTTPConnection):
    """A connection whose whole header phase (status line, interim responses, header
    lines) must end within `header_deadline` seconds: the read timeout bounds each read
    only, so a server trickling a header byte at a time would never trip it."""

    header_deadline = 60.0
    response_class = _CappedResponse

    def getresponse(self) -> urllib3.response.HTTPResponse:  # type: ignore[override]
        sock = self.sock
        expired = threading.Event()

        def cut() -> None:
            expired.set()
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns at once

        timer = threading.Timer(self.header_deadline, cut)
        timer.daemon = True
        timer.start()
        try:
            response = super().getresponse()
        except Exception:
            if expired.is_set():
                raise self._too_slow() from None
            raise
        finally:
            timer.cancel()
        if expired.is_set():  # cut mid-headers: what arrived is not a whole response
            response.release_conn()
            raise self._too_slow()
        return response

    def _too_slow(self) -> TimeoutError:
        HEADER_PHASE.why = (
            f"no complete response headers within {self.header_deadline:g}s (DGR_ARTIFACTS_TIMEOUT)"
        )
        return TimeoutError(HEADER_PHASE.why)


class _HeaderDeadlineTLS(_HeaderDeadline, urllib3.connection.HTTPSConnection):
    pass


@functools.lru_cache(maxsize=8)
def _pool_classes(deadline: float) -> dict[str, type[urllib3.connectionpool.HTTPConnectionPool]]:
    plain = type("_Conn", (_HeaderDeadline,), {"header_deadline": deadline})
    tls = type("_ConnTLS", (_HeaderDeadlineTLS,), {"header_deadline": deadline})
    return {
        "http": type(
            "_Pool", (urllib3.connectionpool.HTTPConnectionPool,), {"ConnectionCls": plain}
        ),
        "https": type(
            "_PoolTLS", (urllib3.connectionpool.HTTPSConnectionPool,), {"ConnectionCls": tls}
        ),
    }


class _DeadlineAdapter(requests.adapters.HTTPAdapter):
    """requests' adapter whose connections bound the header phase (see `_HeaderDeadline`)."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline
        super().__init__()

    def init_poolmanager(self, *args: object, **kwargs: object) -> None:
        super().init_poolmanager(*args, **kwargs)  # type: ignore[arg-type]
        self.poolmanager.pool_classes_by_scheme = _pool_classes(self._deadline)

    def proxy_manager_for(self, proxy: str, **kwargs: object) -> urllib3.PoolManager:
        manager: urllib3.PoolManager = super().proxy_manager_for(proxy, **kwargs)
        if not proxy.lower().startswith("socks"):  # SOCKS pools bring their own connections
            manager.pool_classes_by_scheme = _pool_classes(self._deadline)
        return manager


def http_session(deadline: float) -> requests.Session:
    """A requests session whose every request (redirects too) has a header deadline."""
    session = requests.Session()
    adapter = _DeadlineAdapter(deadline)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
