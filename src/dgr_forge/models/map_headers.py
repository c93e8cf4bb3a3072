"""`artifacts map M`: add the layer map to an existing manifest, from the split headers.

The headers come from the files on disk (`--dest DIR`: each must match the manifest's
size and sha256 first, so the map describes exactly the pinned bytes) or, without
`--dest`, from the manifest's URLs (or `--mirror`): over HTTP only the header bytes, by
Range requests (`remote`), at most DGR_ARTIFACTS_HEADER_MAX per split; a `file://` source
is read in place under the same limit. Nothing else of a file is read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from msgspec import Struct

from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form, d
from dgr_forge.core.urls import mask
from dgr_forge.models import gguf_split, mapping
from dgr_forge.models import manifest as models
from dgr_forge.models.dest import check_destination
from dgr_forge.models.download import RetryPolicy
from dgr_forge.models.gguf_split import GGUFError, Header
from dgr_forge.models.hashing import default_jobs, hash_many, human
from dgr_forge.models.make_manifest import save, with_map
from dgr_forge.models.manifest import ModelManifest
from dgr_forge.models.remote import header_limit, read_remote_header
from dgr_forge.models.sources import (
    check_file_sources,
    check_mirror,
    file_roots,
    file_source_path,
    open_file_source,
    source_url,
)


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


def _from_dest(
    m: ModelManifest, dest: Path, out: Reporter, jobs: int | None
) -> tuple[dict[str, Header | str], dict[str, int]]:
    target = check_destination(dest)  # every --dest, read or written, under one rule
    if not target.is_dir():
        raise BadInput(
            f"--dest {dest}: {target} is not a directory",
            hint="pass the directory holding the model's files, or leave --dest out to read "
            "the headers over HTTP",
            details={"dest": str(dest)},
        )
    ggufs = mapping.gguf_files(m.files)
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
        shas = hash_many([target / f.name for f in ggufs], out, jobs or default_jobs(),
                         "hashing", follow=False)  # fmt: skip
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
    sizes = {n: h.end for n, h in headers.items() if isinstance(h, Header)}
    return headers, sizes


def _from_urls(
    m: ModelManifest, mirror: str | None, out: Reporter
) -> tuple[dict[str, Header | str], dict[str, int], int]:
    mirror = check_mirror(mirror)
    check_file_sources(m.files, mirror, m.shown)
    roots = file_roots(mirror)
    policy = RetryPolicy.from_env()
    limit = header_limit()
    headers: dict[str, Header | str] = {}
    read: dict[str, int] = {}
    requests = 0
    for f in mapping.gguf_files(m.files):
        url = source_url(f, mirror)
        try:
            if urlsplit(url).scheme == "file":
                # opened once, no link followed, checked on the descriptor (issue 33 #5)
                fd = open_file_source(file_source_path(url), roots)
                have = os.fstat(fd).st_size
                h = gguf_split.read_header_fd(fd, limit=limit)
                if have != f.size:
                    headers[f.name] = f"the source has {have} bytes, the manifest says {f.size}"
                    continue
                headers[f.name], read[f.name] = h, h.end
            else:
                got = read_remote_header(url, f.size, policy, limit)
                headers[f.name], read[f.name] = got.header, got.bytes
                requests += got.requests
        except GGUFError as err:
            headers[f.name] = f"unreadable GGUF header: {str(err)[:200]} ({mask(url)})"
        except OSError as err:
            headers[f.name] = f"cannot read {mask(url)}: {err.strerror or err}"
        out.info(f"{f.name}: header read ({human(read.get(f.name, 0))})")
    return headers, read, requests


def map_manifest(
    m: ModelManifest,
    out: Reporter,
    *,
    dest: Path | None = None,
    mirror: str | None = None,
    jobs: int | None = None,
) -> ArtifactsMap:
    """Write `m` again with its layer map (from the headers); the rest of it unchanged."""
    if m.path is None:
        raise BadInput("the manifest has no file to write the map into", hint="pass a path")
    requests = 0
    if dest is not None:
        headers, read = _from_dest(m, dest, out, jobs)
    else:
        headers, read, requests = _from_urls(m, mirror, out)
    layer_map, files = with_map(list(m.files), headers, m.shown, out)
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
        f"{len(mapping.gguf_files(files))} files ({human(sum(read.values()))} of headers read)"
    )
    return ArtifactsMap(
        model=m.name,
        manifest=m.path,
        state=state,
        source="dest" if dest is not None else "url",
        arch=layer_map.arch if layer_map else None,
        block_count=layer_map.block_count if layer_map else None,
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
