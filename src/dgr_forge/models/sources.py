"""Where a model file comes from: the manifest's URL or the `--mirror` base; a `file://`
source only under a directory the operator allowed, opened with no link followed; over
HTTP, a session whose every response must finish its header phase within a deadline.
"""

from __future__ import annotations

import errno
import functools
import http.client
import os
import socket
import threading
from contextlib import suppress
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import requests.adapters
import urllib3.connection
import urllib3.connectionpool

from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import open_nofollow
from dgr_forge.core.urls import check_url, mask
from dgr_forge.models import manifest as models


def source_url(f: models.ModelFile, mirror: str | None) -> str:
    return models.file_url(mirror, f.name) if mirror else f.url


FILE_ROOTS_ENV = "DGR_ARTIFACTS_FILE_ROOTS"


def file_source_path(url: str) -> Path:
    return Path(url2pathname(unquote(urlsplit(url).path)))


def check_file_sources(
    files: tuple[models.ModelFile, ...], mirror: str | None, shown_manifest: str
) -> None:
    """A `file://` URL reads this host's files with the rights of whoever provisions: one
    outside `file_roots` is exit 2 before any file is looked at (not even its size)."""
    roots = file_roots(mirror)
    for f in files:
        if urlsplit(url := source_url(f, mirror)).scheme != "file":
            continue
        if not allowed(os.path.realpath(file_source_path(url)), roots):
            raise outside_roots(f"{shown_manifest}: {f.name}", url, f.name)


def file_roots(mirror: str | None) -> tuple[str, ...]:
    """The directories file:// sources may come from, resolved: --mirror, FILE_ROOTS_ENV."""
    listed = os.environ.get(FILE_ROOTS_ENV, "").split(os.pathsep)
    roots = [os.path.realpath(Path(entry).expanduser()) for entry in listed if entry.strip()]
    if mirror is not None and urlsplit(mirror).scheme == "file":
        roots.insert(0, os.path.realpath(file_source_path(mirror)))
    return tuple(roots)


def allowed(real: str, roots: tuple[str, ...]) -> bool:
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


def outside_roots(where: str, url: str, name: str) -> BadInput:
    return BadInput(
        f"{where}: the file URL {mask(url)} is outside the directories allowed for file:// sources",
        hint=f"pass --mirror DIR, or allow the directory with {FILE_ROOTS_ENV}=DIR "
        "(a manifest may not read any file of this host on its own)",
        details={"file": name, "variable": FILE_ROOTS_ENV},
    )


class OutsideRoots(PermissionError):
    """A file:// source outside the allowed directories, found on its descriptor."""


def open_file_source(path: Path, roots: tuple[str, ...]) -> int:
    """A read-only, non-blocking descriptor of the file:// source `path`, opened with no
    link followed at any component, and checked on the descriptor to lie under `roots`:
    OSError (ELOOP for a link, EACCES for a file outside them) otherwise."""
    fd = open_nofollow(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:  # the path the kernel holds for `fd`
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: no link was followed to open it, so the path is its own
        real = os.path.normpath(path)
    if not allowed(real, roots):
        os.close(fd)
        raise OutsideRoots(errno.EACCES, "outside the directories allowed for file://")
    return fd


def check_mirror(mirror: str | None) -> str | None:
    """A mirror base URL; a plain directory path becomes a file:// URL."""
    if mirror is None:
        return None
    if "://" not in mirror and not mirror.startswith("-"):
        path = Path(mirror).expanduser()
        if path.is_dir():
            return path.resolve().as_uri()
    check_url(mirror, "--mirror", schemes=models.URL_SCHEMES)
    if problem := models.check_url(mirror):
        raise BadInput(
            f"--mirror: {problem}",
            hint="pass a base URL (http://, https://, file://) or a directory holding the files",
            details={"mirror": mask(mirror)},
        )
    return mirror


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


@functools.lru_cache(maxsize=8)
def _pool_classes(deadline: float) -> dict[str, type[urllib3.connectionpool.HTTPConnectionPool]]:
    pools, fields = urllib3.connectionpool, {"header_deadline": deadline}
    plain = type("_Conn", (_HeaderDeadline,), fields)
    tls = type("_ConnTLS", (_HeaderDeadline, urllib3.connection.HTTPSConnection), fields)
    return {
        "http": type("_Pool", (pools.HTTPConnectionPool,), {"ConnectionCls": plain}),
        "https": type("_PoolTLS", (pools.HTTPSConnectionPool,), {"ConnectionCls": tls}),
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
    session, adapter = requests.Session(), _DeadlineAdapter(deadline)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
