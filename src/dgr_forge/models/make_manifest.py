"""Writing model manifests: `artifacts manifest` (one from the files in a directory) and
`artifacts map M` (the layer map added to one, from the split headers).

Headers are read only by the bounded parser in `gguf_split`, from files that match the
manifest's size and sha256 or by bounded, closed Range requests (docs/model-artifacts.md).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import requests
import urllib3
from msgspec import Struct

from dgr_forge.core.errors import BadInput, OperationFailed, env_number
from dgr_forge.core.fsutil import atomic_write_text
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import SHA, Form, d
from dgr_forge.core.urls import check_url, mask
from dgr_forge.models import gguf_split, sources
from dgr_forge.models import manifest as models
from dgr_forge.models.dest import check_destination
from dgr_forge.models.download import NET_CHUNK, RateFloor, RetryPolicy, TooSlow, content_range
from dgr_forge.models.hashing import hash_many, human
from dgr_forge.models.sources import check_file_sources, http_session


class ManifestFile(Struct, kw_only=True):
    """a file"""

    name: Annotated[str, d("file name")]
    size: Annotated[int, d("bytes")]
    sha256: Annotated[str, SHA]
    url: Annotated[str, d("credentials masked")]


class ArtifactsManifest(Form, kw_only=True):
    """`artifacts manifest`'s result (its `--json` object)."""

    title = "artifacts manifest"

    model: Annotated[str, d("the model's name")]
    manifest: Annotated[Path, d("where it was written")]
    state: Annotated[str, d("`written`, `updated` or `unchanged`")]
    files: Annotated[list[ManifestFile], d("per file")]
    total_size: Annotated[int, d("bytes")]
    block_count: Annotated[int | None, d("with a layer map: the model's layers")]


def save(target: Path, text: str) -> str:
    """Write `text` at `target` unless it holds exactly that already: `written` (there was
    none), `updated` or `unchanged`. What is there is read bounded (a FIFO or a huge file
    at the target is simply replaced, never read)."""
    old = None
    if target.is_file():
        with contextlib.suppress(BadInput, UnicodeDecodeError):
            old = models.read_raw(target, str(target)).decode("utf-8")
    if old == text:
        return "unchanged"
    atomic_write_text(target, text)
    return "updated" if old else "written"


def write_manifest(m: models.ModelManifest, text: str, target: Path) -> ArtifactsManifest:
    return ArtifactsManifest(
        model=m.name,
        manifest=target,
        state=save(target, text),
        files=[
            ManifestFile(name=f.name, size=f.size, sha256=f.sha256, url=mask(f.url))
            for f in m.files
        ],
        total_size=m.total_size,
        block_count=m.layer_map.block_count if m.layer_map else None,
    )


def build_manifest(
    directory: Path,
    name: str,
    url_base: str,
    out: Reporter,
    *,
    source_revision: str | None = None,
    jobs: int | None = None,
) -> tuple[models.ModelManifest, str]:
    """Hash the files in `directory` into a model manifest: as loaded, and its text."""
    if not directory.is_dir():
        raise BadInput(
            f"{directory}: not a directory",
            hint="pass the directory that holds the model files",
            details={"dir": str(directory)},
        )
    if problem := models.name_problem(name):
        raise BadInput(f"--name: {problem}", hint=models.NAME_FIX)
    if source_revision is not None and (problem := models.revision_problem(source_revision)):
        raise BadInput(
            f"--source-revision: {problem}",
            hint="pass the checkpoint's full lowercase commit id (branch or tag names move)",
        )
    if problem := models.check_url(url_base):
        raise BadInput(
            f"--url-base: {problem}",
            hint="pass the base URL the files will be served from, e.g. https://host/models/NAME",
        )
    check_url(url_base, "--url-base", schemes=models.URL_SCHEMES)
    entries = sorted(  # one directory's files: by name
        p
        for p in directory.iterdir()
        if p.is_file() and not p.name.startswith(".") and not p.name.endswith(models.PART_SUFFIX)
    )
    if not entries:
        raise BadInput(
            f"{directory}: no model files in it",
            hint="pass the directory that holds the model files (hidden and .part files "
            "are skipped, subdirectories are not read)",
            details={"dir": str(directory)},
        )
    for p in entries:
        if bad := models.check_file_name(p.name):
            raise BadInput(
                f"{directory}: {bad}",
                hint="rename the file to letters, digits, '.', '_' and '-'",
                details={"dir": str(directory), "file": p.name},
            )
    shas = hash_many(entries, out, jobs, "hashing")
    files = [
        models.ModelFile(
            name=models.FileName(p.name),
            size=p.stat().st_size,
            sha256=shas[p],
            url=models.file_url(url_base, p.name),
        )
        for p in entries
    ]
    models.loads(  # the listing's own rules first: names, split sets
        models.dumps(name, files, source_revision).encode(), shown=f"manifest for {directory}"
    )
    headers = gguf_split.read_headers(directory, files, follow=True)
    if split_problems := gguf_split.check_headers(headers):
        listed = "; ".join(f"{n}: {', '.join(ps)}" for n, ps in split_problems.items())
        raise BadInput(
            f"{directory}: the GGUF split set is inconsistent: {listed}",
            hint="re-split the model (llama-gguf-split) so every part's header matches its name",
            details={"dir": str(directory), "split_problems": split_problems},
        )
    layer_map, files = gguf_split.with_map(files, headers, str(directory), out)
    text = models.dumps(name, files, source_revision, layer_map)
    return models.loads(text.encode(), shown=f"manifest for {directory}"), text  # its rules


FIRST_BLOCK = 4 << 10  # most splits' headers are a few KiB (only part 1 holds a vocabulary)
MAX_BLOCK = 1 << 20  # each further request asks for twice as much, up to this
HEADER_MAX_ENV = "DGR_ARTIFACTS_HEADER_MAX"
HEADER_MAX = 64 << 20  # a 150,000-token vocabulary is ~5 MiB of header
# what a map reads: the headers, the header bytes read per file, the HTTP Range requests made
_Read = tuple[gguf_split.Headers, dict[str, int], int]


class RangeFile:
    """Read-only, seekable view of a remote file of `size` bytes, fetched by closed ranges
    (`bytes=A-B`) of only the bytes the reader needs: skipped arrays are never fetched; a
    server answering anything but 206 within the pinned size is refused."""

    def __init__(
        self, url: str, size: int, session: requests.Session, policy: RetryPolicy, limit: int
    ) -> None:
        self.url, self.size, self.session, self.policy = url, size, session, policy
        self.limit = min(size, limit)  # never a byte past the header limit is asked for
        # cuts: answers cut below the minimum rate, all ranges together
        self.pos = self.received = self.requests = self.cuts = self._start = 0
        self.deadline = time.monotonic() + policy.range_deadline
        self.floor = RateFloor(policy)  # across requests: a byte per quick 206 is slow too
        self._block, self._want = b"", FIRST_BLOCK

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: 0, 1: self.pos, 2: self.size}[whence] + offset
        return self.pos

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            raise ValueError("RangeFile reads bounded sizes only")
        out = bytearray()
        while n > 0 and self.pos < self.limit:
            if not 0 <= (at := self.pos - self._start) < len(self._block):
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
                self._block, self._start = self._get(start, end), start
                return
            except (OSError, urllib3.exceptions.HTTPError, TooSlow) as err:  # requests': OSErrors
                failures += 1
                if isinstance(err, TooSlow):  # a cut counts for the whole header read:
                    self.cuts += 1  # the next range would start the count afresh
                    failures = max(failures, self.cuts)
                if failures >= self.policy.tries:
                    why = str(err) if isinstance(err, TooSlow) else type(err).__name__
                    raise OperationFailed(
                        f"{mask(self.url)}: reading the header (bytes {start}-{end}) failed "
                        f"{failures} times: {why}",
                        hint="check that the host is reachable from here, or pass --mirror URL",
                    ) from None
                time.sleep(min(self.policy.delay(failures), self._left()))
                self.floor.restart()

    def _unsupported(self, why: str) -> OperationFailed:
        """The server cannot serve this header by ranges: exit 1, not retried."""
        return OperationFailed(
            f"{mask(self.url)}: {why}",
            hint="map from the files on disk instead (`--dest DIR`), or use a server "
            "that answers Range requests (HTTP 206)",
        )

    def _left(self) -> float:
        """Seconds left of the header's deadline; exit 1 when none are."""
        if (left := self.deadline - time.monotonic()) <= 0:
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
                raise self._unsupported(
                    f"HTTP {r.status_code} to a Range request (a header is read by ranges only)"
                )
            first, last, total = content_range(r.headers.get("Content-Range", ""))
            if first != start or last is None or last > end or total != self.size:
                raise self._unsupported(
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
                    raise TooSlow(slow)
                self._left()
            if len(data) != want:
                raise requests.ConnectionError(f"{len(data)} of {want} bytes arrived")
            if slow := self.floor.add(0):  # answers of a byte each, quickly: slow all the same
                raise TooSlow(slow)
            return bytes(data)


class MappedFile(Struct, kw_only=True):
    """a file"""

    name: Annotated[str, d("file name")]
    layers: Annotated[str | None, d('layer ranges it holds tensors of (`""`: none)')]
    tensors: Annotated[list[str] | None, d("its other tensor groups, e.g. `token_embd`")]
    header_bytes: Annotated[int, d("header bytes read")]


class ArtifactsMap(Form, kw_only=True):
    """`artifacts map`'s result (its `--json` object)."""

    title = "artifacts map"

    model: Annotated[str, d("the model's name")]
    manifest: Annotated[Path, d("the manifest written")]
    state: Annotated[str, d("`updated` or `unchanged`")]
    source: Annotated[str, d("`dest` (files on disk) or `url` (headers by HTTP Range requests)")]
    arch: Annotated[str | None, d("`general.architecture`")]
    block_count: Annotated[int | None, d("`<arch>.block_count`: the model's layers")]
    files: Annotated[list[MappedFile], d("per file (null `layers`/`tensors`: not a .gguf)")]
    header_bytes: Annotated[int, d("header bytes read in all")]
    requests: Annotated[int, d("HTTP Range requests made")]


def _from_dest(m: models.ModelManifest, dest: Path, out: Reporter, jobs: int | None) -> _Read:
    target = check_destination(dest)  # every --dest, read or written, under one rule
    if not target.is_dir():
        raise BadInput(
            f"--dest {dest}: {target} is not a directory",
            hint="pass the directory holding the model's files, or leave --dest out to read "
            "the headers over HTTP",
            details={"dest": str(dest)},
        )
    ggufs = gguf_split.gguf_files(m.files)
    bad: list[str] = []
    for f in ggufs:
        try:
            st = os.lstat(target / f.name)
        except FileNotFoundError:
            bad.append(f"{f.name}: missing")
            continue
        if not stat.S_ISREG(st.st_mode):
            bad.append(f"{f.name}: not a regular file")
        elif st.st_size != f.size:
            bad.append(f"{f.name}: {st.st_size} bytes, the manifest says {f.size}")
    if not bad:
        shas = hash_many([target / f.name for f in ggufs], out, jobs, "hashing", follow=False)
        bad = [
            f"{f.name}: sha256 {shas[target / f.name]}, the manifest says {f.sha256}"
            for f in ggufs
            if shas[target / f.name] != f.sha256
        ]
    if bad:
        raise OperationFailed(
            f"{target}: the files are not the manifest's: {'; '.join(bad)[:1500]}",
            hint=f"provision them first (`dgr-forge artifacts provision {m.shown} --dest "
            f"{dest}`), or leave --dest out to read the headers over HTTP",
        )
    headers = gguf_split.read_headers(target, ggufs, follow=False)
    return headers, {n: h.end for n, h in headers.items() if isinstance(h, gguf_split.Header)}, 0


def _from_urls(m: models.ModelManifest, mirror: str | None, out: Reporter) -> _Read:
    mirror = sources.check_mirror(mirror)
    check_file_sources(m.files, mirror, m.shown)
    roots = sources.file_roots(mirror)
    policy = RetryPolicy.from_env()
    limit = env_number(HEADER_MAX_ENV, HEADER_MAX, 64, 1 << 40)  # header bytes per split
    headers: gguf_split.Headers = {}
    read: dict[str, int] = {}
    requests = 0
    for f in gguf_split.gguf_files(m.files):
        url = sources.source_url(f, mirror)
        try:
            if urlsplit(url).scheme == "file":
                # opened once, no link followed, checked on the descriptor (issue 33 #5)
                fd = sources.open_file_source(sources.file_source_path(url), roots)
                have = os.fstat(fd).st_size
                h = gguf_split.read_header_fd(fd, limit=limit)
                if have != f.size:
                    headers[f.name] = f"the source has {have} bytes, the manifest says {f.size}"
                    continue
                headers[f.name], read[f.name] = h, h.end
            else:  # http(s): by Range requests only
                with http_session(min(policy.read_timeout, policy.range_deadline)) as session:
                    rf = RangeFile(url, f.size, session, policy, limit)
                    h = gguf_split.parse_header(rf, f.size, limit)  # type: ignore[arg-type]
                headers[f.name], read[f.name] = h, rf.received
                requests += rf.requests
        except gguf_split.GGUFError as err:
            headers[f.name] = f"unreadable GGUF header: {str(err)[:200]} ({mask(url)})"
        except OSError as err:
            headers[f.name] = f"cannot read {mask(url)}: {err.strerror or err}"
        out.info(f"{f.name}: header read ({human(read.get(f.name, 0))})")
    return headers, read, requests


def map_manifest(
    m: models.ModelManifest,
    out: Reporter,
    *,
    dest: Path | None = None,
    mirror: str | None = None,
    jobs: int | None = None,
) -> ArtifactsMap:
    """Write `m` again with its layer map (from the headers); the rest of it unchanged."""
    if m.path is None:
        raise BadInput("the manifest has no file to write the map into", hint="pass a path")
    got = _from_dest(m, dest, out, jobs) if dest is not None else _from_urls(m, mirror, out)
    headers, read, requests = got
    layer_map, files = gguf_split.with_map(list(m.files), headers, m.shown, out)
    if layer_map is None:
        raise BadInput(
            f"{m.shown}: no layer map can be made for this model",
            hint="a layer map needs one GGUF model whose metadata split holds "
            "general.architecture and <arch>.block_count",
        )
    text = models.dumps(m.name, files, m.model.source_revision, layer_map)
    models.loads(text.encode(), shown=m.shown)  # the map passes the loader's rules
    # compared with what is there now: the file may have changed since `m` was loaded
    state = "unchanged" if save(m.path, text) == "unchanged" else "updated"
    out.info(
        f"{m.shown}: layer map {state}: {layer_map.arch}, {layer_map.block_count} layers in "
        f"{len(gguf_split.gguf_files(files))} files ({human(sum(read.values()))} of headers read)"
    )
    return ArtifactsMap(
        model=m.name,
        manifest=m.path,
        state=state,
        source="dest" if dest is not None else "url",
        arch=layer_map.arch,
        block_count=layer_map.block_count,
        files=[
            MappedFile(
                name=f.name,
                layers=f.layers,
                tensors=list(f.tensors) if f.tensors is not None else None,
                header_bytes=read.get(f.name, 0),
            )
            for f in files
        ],
        header_bytes=sum(read.values()),
        requests=requests,
    )
