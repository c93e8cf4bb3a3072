"""A split's GGUF header over HTTP, with Range requests only: never the file's tensor data.

`RangeFile` is the file object the bounded reader (`gguf_split.parse_header`) reads from:
it asks for one closed range at a time (`bytes=A-B`: 4 KiB, then twice as much each time,
up to 1 MiB), only for the bytes the reader needs (skipped arrays are never fetched),
refuses a server that answers anything but 206 with a Content-Range inside the size the
manifest pins, and stops at the header limit (`DGR_ARTIFACTS_HEADER_MAX`), so a header
that never ends costs at most that. A server that answers each request with a byte, or
drips its bytes, is bounded as downloads are: at most `DGR_ARTIFACTS_RANGE_REQUESTS`
requests and `DGR_ARTIFACTS_RANGE_DEADLINE` seconds per header, and the downloads'
minimum rate (`DGR_ARTIFACTS_MIN_RATE` over `DGR_ARTIFACTS_STALL_S`) over the whole read.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass

import requests
import urllib3

from dgr_forge.core.envnum import env_number
from dgr_forge.core.errors import OperationFailed
from dgr_forge.core.urls import mask
from dgr_forge.models import gguf_split
from dgr_forge.models.download import NET_CHUNK, RateFloor, RetryPolicy, content_range
from dgr_forge.models.gguf_split import Header
from dgr_forge.models.http import http_session

FIRST_BLOCK = 4 << 10  # most splits' headers are a few KiB (only part 1 holds a vocabulary)
MAX_BLOCK = 1 << 20  # each further request asks for twice as much, up to this
HEADER_MAX_ENV = "DGR_ARTIFACTS_HEADER_MAX"
HEADER_MAX = 64 << 20  # a 150,000-token vocabulary is ~5 MiB of header


def header_limit() -> int:
    """DGR_ARTIFACTS_HEADER_MAX: the most header bytes read per split (exit 2 when bad)."""
    return env_number(HEADER_MAX_ENV, HEADER_MAX, 64, 1 << 40)


class _Unsupported(Exception):
    """The server cannot serve this header by ranges: not retried."""


class _TooSlow(requests.ConnectionError):
    """Below the minimum rate: retried, and it counts as a try, as for downloads."""


@dataclass
class Fetched:
    header: Header
    bytes: int  # body bytes received
    requests: int


class RangeFile(io.RawIOBase):
    """Read-only, seekable view of a remote file of `size` bytes, fetched by closed ranges."""

    def __init__(
        self, url: str, size: int, session: requests.Session, policy: RetryPolicy, limit: int
    ) -> None:
        super().__init__()
        self.url, self.size, self.session, self.policy = url, size, session, policy
        self.limit = min(size, limit)  # never a byte past the header limit is asked for
        self.pos = 0
        self.received = 0
        self.requests = 0
        self.deadline = time.monotonic() + policy.range_deadline
        self.floor = RateFloor(policy)  # across requests: a byte per quick 206 is slow too
        self.cuts = 0  # answers cut below the minimum rate, all ranges together
        self._start = 0
        self._block = b""
        self._want = FIRST_BLOCK

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            raise ValueError("RangeFile reads bounded sizes only")
        out = bytearray()
        while n > 0 and self.pos < self.limit:
            at = self.pos - self._start
            if not 0 <= at < len(self._block):
                self._fetch(self.pos)
                at = 0
            piece = self._block[at : at + n]
            out += piece
            self.pos += len(piece)
            n -= len(piece)
        return bytes(out)

    def _fetch(self, start: int) -> None:
        end = min(self.limit, start + self._want) - 1
        self._want = min(MAX_BLOCK, self._want * 2)
        failures = 0
        while True:
            try:
                self._block = self._get(start, end)
                self._start = start
                return
            except _Unsupported as err:
                raise OperationFailed(
                    f"{mask(self.url)}: {err}",
                    hint="map from the files on disk instead (`--dest DIR`), or use a server "
                    "that answers Range requests (HTTP 206)",
                ) from None
            except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as err:
                failures += 1
                if isinstance(err, _TooSlow):  # a cut counts for the whole header read:
                    self.cuts += 1  # the next range would start the count afresh
                    failures = max(failures, self.cuts)
                if failures >= self.policy.tries:
                    why = str(err) if isinstance(err, _TooSlow) else type(err).__name__
                    raise OperationFailed(
                        f"{mask(self.url)}: reading the header (bytes {start}-{end}) failed "
                        f"{failures} times: {why}",
                        hint="check that the host is reachable from here, or pass --mirror URL",
                    ) from None
                time.sleep(min(self.policy.delay(failures), self._left()))
                self.floor.restart()

    def _left(self) -> float:
        """Seconds left of the header's deadline; exit 1 when none are."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OperationFailed(
                f"{mask(self.url)}: the header was not read within "
                f"{self.policy.range_deadline:g}s ({self.received} bytes in {self.requests} "
                "requests; DGR_ARTIFACTS_RANGE_DEADLINE)",
                hint="the server answers too slowly: use another one (--mirror URL), or map "
                "from the files on disk (`--dest DIR`)",
            )
        return left

    def _get(self, start: int, end: int) -> bytes:
        headers = {"Accept-Encoding": "identity", "Range": f"bytes={start}-{end}"}
        if self.requests >= self.policy.range_requests:
            raise OperationFailed(
                f"{mask(self.url)}: the header needs more than {self.policy.range_requests} "
                f"Range requests ({self.received} bytes so far; DGR_ARTIFACTS_RANGE_REQUESTS)",
                hint="the server answers each request with a few bytes: use another one "
                "(--mirror URL), or map from the files on disk (`--dest DIR`)",
            )
        left = self._left()
        timeout = (min(self.policy.connect_timeout, left), min(self.policy.read_timeout, left))
        self.requests += 1
        with self.session.get(self.url, headers=headers, stream=True, timeout=timeout) as r:
            if r.status_code >= 500 or r.status_code in (408, 429):
                raise requests.ConnectionError(f"HTTP {r.status_code}")
            if r.status_code != 206:  # a 200 is the whole file: not one byte of it is read
                raise _Unsupported(
                    f"HTTP {r.status_code} to a Range request (a header is read by ranges only)"
                )
            first, last, total = content_range(r.headers.get("Content-Range", ""))
            if first != start or last is None or last > end or total != self.size:
                raise _Unsupported(
                    f"Content-Range {r.headers.get('Content-Range', '')[:80]!r} does not "
                    f"answer bytes {start}-{end} of a {self.size}-byte file"
                )
            want = last - start + 1
            data = bytearray()
            while len(data) < want:
                chunk = r.raw.read1(min(NET_CHUNK, want - len(data)), decode_content=False)
                if not chunk:
                    break
                data += chunk
                self.received += len(chunk)
                if slow := self.floor.add(len(chunk)):
                    raise _TooSlow(slow)
                self._left()
            if len(data) != want:
                raise requests.ConnectionError(f"{len(data)} of {want} bytes arrived")
            if slow := self.floor.add(0):  # answers of a byte each, quickly: slow all the same
                raise _TooSlow(slow)
            return bytes(data)


def read_remote_header(url: str, size: int, policy: RetryPolicy, limit: int) -> Fetched:
    """The header of the `size`-byte file at `url` (http/https), by Range requests only."""
    with http_session(min(policy.read_timeout, policy.range_deadline)) as session:
        f = RangeFile(url, size, session, policy, limit)
        header = gguf_split.parse_header(f, size, limit)  # type: ignore[arg-type]
        return Fetched(header=header, bytes=f.received, requests=f.requests)
