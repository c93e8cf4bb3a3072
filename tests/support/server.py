"""Test helpers for model artifacts: a loopback HTTP server with Range and injected faults
(500s, cuts, stalls, redirects, a 1-byte-per-second trickle), small real split GGUF files
written with the `gguf` package, and hostile GGUF headers.

The bench (bench/artifacts.py) reuses the server, so it serves straight from a directory
with sendfile and keeps no file in memory.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote


@dataclass
class Request:
    name: str
    range: str | None  # the Range header as sent, None when absent
    status: int
    sent: int = 0  # body bytes the server sent (or began to send) for it


@dataclass
class Faults:
    cut: dict[str, int] = field(default_factory=dict)  # name -> byte offset; fires once
    fail: dict[str, int] = field(default_factory=dict)  # name -> how many 500s to answer first
    ignore_range: set[str] = field(default_factory=set)  # answer 200 + whole file regardless
    stall: dict[str, int] = field(default_factory=dict)  # name -> offset to go silent at, once
    range_from_zero: set[str] = field(default_factory=set)  # 206, but always from byte 0
    stall_seconds: float = 2.0
    redirect: dict[str, str] = field(default_factory=dict)  # name -> Location of a 302
    trickle: dict[str, int] = field(default_factory=dict)  # name -> offset to drip from
    trickle_interval: float = 1.0  # seconds per byte once trickling (for at most 30 s)
    range_only: bool = False  # a GET without Range is refused (403): nothing in full
    range_max: int | None = None  # a 206 carries at most this many bytes (legal, if mean)
    answer_delay: float = 0.0  # seconds before each answer's status line


class FaultyServer:
    """ThreadingHTTPServer on 127.0.0.1 (port 0) serving `root`; logs every GET."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.faults = Faults()
        self.log: list[Request] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server._serve(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False  # a stalled handler must not hold up the test
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> FaultyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=10)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def url(self, name: str) -> str:
        return f"{self.base_url}/{quote(name)}"

    def requests_for(self, name: str) -> list[Request]:
        with self._lock:
            return [r for r in self.log if r.name == name]

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        name = unquote(h.path.lstrip("/").split("?", 1)[0])
        range_header = h.headers.get("Range")
        path = self.root / name
        with self._lock:
            failing = self.faults.fail.get(name, 0) > 0
            if failing:
                self.faults.fail[name] -= 1
            cut = self.faults.cut.pop(name, None)
            stall = self.faults.stall.pop(name, None)
            if cut is None:
                cut = stall
            ignore = name in self.faults.ignore_range
            from_zero = name in self.faults.range_from_zero
            location = self.faults.redirect.get(name)
            trickle = self.faults.trickle.get(name)

        def answer(status: int, headers: dict[str, str], body: bytes = b"") -> Request:
            req = Request(name, range_header, status, len(body))
            with self._lock:
                self.log.append(req)
            h.send_response(status)
            for k, v in headers.items():
                h.send_header(k, v)
            h.end_headers()
            if body:
                h.wfile.write(body)
            return req

        if self.faults.answer_delay:
            time.sleep(self.faults.answer_delay)
        if self.faults.range_only and not range_header:
            answer(403, {"Content-Length": "10"}, b"range only")
            return
        if failing:
            answer(500, {"Content-Length": "6"}, b"broken")
            return
        if location is not None:
            answer(302, {"Location": location, "Content-Length": "0"})
            return
        if "/" in name or not path.is_file():
            answer(404, {"Content-Length": "9"}, b"not found")
            return
        size = path.stat().st_size
        start, last = 0, size - 1
        if range_header and not ignore:
            spec = range_header.removeprefix("bytes=")
            first, _, closed = spec.partition("-")
            start = 0 if from_zero else int(first)
            last = min(last, int(closed)) if closed and not from_zero else last
            if self.faults.range_max is not None:
                last = min(last, start + self.faults.range_max - 1)
            if start >= size:
                answer(416, {"Content-Range": f"bytes */{size}", "Content-Length": "0"})
                return
            req = answer(
                206,
                {
                    "Content-Range": f"bytes {start}-{last}/{size}",
                    "Content-Length": str(last + 1 - start),
                },
            )
        else:
            req = answer(200, {"Content-Length": str(size)})
        size = last + 1  # what this response carries ends there
        end = size if cut is None or cut <= start else cut
        req.sent = end - start
        h.wfile.flush()
        if trickle is not None and trickle < end:
            end = max(trickle, start)  # the rest drips, a byte per interval
        with path.open("rb") as f:
            if end > start:
                h.connection.sendfile(f, offset=start, count=end - start)
            if trickle is not None:
                self._drip(h, f, end, size)
                return
        if end < size:  # the injected fault: go silent, or drop the connection mid-file
            if stall is not None:
                time.sleep(self.faults.stall_seconds)
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)

    def _drip(self, h: BaseHTTPRequestHandler, f: Any, offset: int, size: int) -> None:
        """Send one byte per trickle_interval: alive, never timed out by a read timeout."""
        deadline = time.monotonic() + 30
        f.seek(offset)
        while offset < size and time.monotonic() < deadline:
            time.sleep(self.faults.trickle_interval)
            try:
                h.wfile.write(f.read(1))
                h.wfile.flush()
            except OSError:  # the client gave up on us
                return
            offset += 1
        h.close_connection = True


# ----------------------------------------------------------------------------- GGUF files


def split_names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def write_split_gguf(
    directory: Path,
    prefix: str = "tiny",
    count: int = 3,
    tensor_elems: int = 16 * 1024,
    header: dict[int, dict[str, int]] | None = None,
) -> list[Path]:
    """A real split GGUF set: part i holds one float32 tensor and split.* KV fields.

    `header` overrides KV values per 0-based part, e.g. {2: {"split.count": 4}}.
    """
    import gguf
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, name in enumerate(split_names(prefix, count)):
        kv = {"split.no": i, "split.count": count, "split.tensors.count": count}
        kv.update((header or {}).get(i, {}))
        path = directory / name
        w = gguf.GGUFWriter(path, arch="llama")
        rng = np.random.default_rng(seed=i + 1)
        _write_part(w, kv, [(f"blk.{i}.weight", rng.random(tensor_elems, dtype=np.float32))])
        paths.append(path)
    return paths


def _write_part(w: Any, kv: dict[str, int], tensors: Iterable[tuple[str, Any]]) -> None:
    """A part's split.* keys (after any KV data the caller added), its tensors, written."""
    w.add_uint16("split.no", kv["split.no"])
    w.add_uint16("split.count", kv["split.count"])
    w.add_int32("split.tensors.count", kv["split.tensors.count"])
    for name, data in tensors:
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def layered_tensors(layers: int, *, tied: bool = False) -> list[str]:
    """Tensor names in llama.cpp's order: embeddings, two per layer, then the head."""
    names = ["token_embd.weight"]
    for n in range(layers):
        names += [f"blk.{n}.attn_q.weight", f"blk.{n}.ffn_down.weight"]
    return names + ["output_norm.weight"] + ([] if tied else ["output.weight"])


def split_by_count(names: list[str], splits: int) -> list[list[str]]:
    """What `gguf-split --split-max-tensors N` does: N tensors per part, in order."""
    per = -(-len(names) // splits)
    return [names[i : i + per] for i in range(0, len(names), per)]


def write_layered_gguf(
    directory: Path,
    prefix: str = "m43",
    layers: int = 43,
    splits: int = 9,
    elems: int = 64,
    *,
    arch: str = "llama",
    tied: bool = False,
    rename: dict[str, str] | None = None,
    header: dict[int, dict[str, int]] | None = None,
    parts: list[list[str]] | None = None,
) -> list[Path]:
    """A real split GGUF model as `gguf-split` writes it: part 1 holds the model's KV
    data (`<arch>.block_count`) and every part its `split.*` keys; tensors go to the parts
    in order, `len/splits` (rounded up) each. `rename` changes tensor names (a hostile
    `blk.99.*`), `header` overrides KV values per 0-based part, `parts` the assignment."""
    import gguf
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    names = [(rename or {}).get(t, t) for t in layered_tensors(layers, tied=tied)]
    parts = parts or split_by_count(names, splits)
    assert len(parts) == splits, (len(parts), splits)
    total = sum(len(p) for p in parts)
    paths = []
    for i, (name, tensors) in enumerate(zip(split_names(prefix, splits), parts, strict=True)):
        kv = {"split.no": i, "split.count": splits, "split.tensors.count": total}
        kv.update((header or {}).get(i, {}))
        path = directory / name
        w = gguf.GGUFWriter(path, arch=arch)
        if i == 0:
            w.add_block_count(kv.pop("block_count", layers))
        data = (
            (t, np.random.default_rng(sum(t.encode()) + i).random(elems, dtype=np.float32))
            for t in tensors
        )
        _write_part(w, kv, data)
        paths.append(path)
    return paths


def flip_byte(path: Path, offset: int) -> None:
    """Corrupt one byte in place, size unchanged."""
    with path.open("r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())


def hostile_gguf(path: Path, item_type: int = 0, count: int = 10**12) -> Path:
    """A tiny GGUF v3 file whose one KV claims an array of `count` items (UINT8 by default).

    The `gguf` package's reader spends minutes and gigabytes on it; the forge's bounded
    reader refuses it at once.
    """
    import struct

    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)  # version 3, 0 tensors, 1 KV
    data += struct.pack("<Q", 1) + b"a" + struct.pack("<IIQ", 9, item_type, count)  # ARRAY
    path.write_bytes(data)
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest_of(source: Path, base_url: str, out: Path, name: str) -> Path:
    """A model manifest (no layer map) of every file in `source`, served from `base_url`,
    written independently of the code under test."""
    from dgr_forge.models import manifest as models

    files = [
        models.ModelFile(
            models.FileName(p.name), p.stat().st_size, sha(p), models.file_url(base_url, p.name)
        )
        for p in sorted(source.iterdir())
    ]
    out.write_text(models.dumps(name, files))
    return out
