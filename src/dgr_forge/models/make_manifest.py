"""`artifacts manifest`: a model manifest from the files in a directory (release engineers).

Files are hashed, then their GGUF split headers are read by the bounded parser in
`gguf_split`, so a hostile header costs at most a read of its own bytes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from msgspec import Struct

from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import atomic_write_text
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import SHA, Form, d
from dgr_forge.core.urls import check_url, mask
from dgr_forge.models import gguf_split
from dgr_forge.models import manifest as models
from dgr_forge.models.hashing import hash_many
from dgr_forge.models.layermap import LayerMap
from dgr_forge.models.manifest import ModelFile


@dataclass
class BuiltManifest:
    name: str
    files: list[ModelFile]
    text: str
    layer_map: LayerMap | None = None


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


def write_manifest(built: BuiltManifest, target: Path) -> ArtifactsManifest:
    """Write `built` at `target` unless it holds exactly that text already."""
    state = save(target, built.text)
    return ArtifactsManifest(
        model=built.name,
        manifest=target,
        state=state,
        files=[
            ManifestFile(name=f.name, size=f.size, sha256=f.sha256, url=mask(f.url))
            for f in built.files
        ],
        total_size=sum(f.size for f in built.files),
        block_count=built.layer_map.block_count if built.layer_map else None,
    )


def build_manifest(
    directory: Path,
    name: str,
    url_base: str,
    out: Reporter,
    *,
    source_revision: str | None = None,
    jobs: int | None = None,
) -> BuiltManifest:
    """Hash the files in `directory` into a model manifest (validated by the loader)."""
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
    problem = models.check_url(url_base)
    if problem:
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
        bad = models.check_file_name(p.name)
        if bad:
            raise BadInput(
                f"{directory}: {bad}",
                hint="rename the file to letters, digits, '.', '_' and '-'",
                details={"dir": str(directory), "file": p.name},
            )
    shas = hash_many(entries, out, jobs, "hashing")
    files = [
        ModelFile(
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
    split_problems = gguf_split.check_headers(headers)
    if split_problems:
        listed = "; ".join(f"{n}: {', '.join(ps)}" for n, ps in split_problems.items())
        raise BadInput(
            f"{directory}: the GGUF split set is inconsistent: {listed}",
            hint="re-split the model (llama-gguf-split) so every part's header matches its name",
            details={"dir": str(directory), "split_problems": split_problems},
        )
    layer_map, files = gguf_split.with_map(files, headers, str(directory), out)
    text = models.dumps(name, files, source_revision, layer_map)
    models.loads(text.encode(), shown=f"manifest for {directory}")  # same rules as on load
    return BuiltManifest(name=name, files=files, text=text, layer_map=layer_map)
