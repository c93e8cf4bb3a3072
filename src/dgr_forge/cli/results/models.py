"""The `--json` forms of model artifacts: artifacts provision, verify, manifest, map."""

from __future__ import annotations

from typing import Annotated

from dgr_forge.cli.results.base import SHA, Form, Nested, Strs, d

# --- model artifacts ----------------------------------------------------------------------------


class Layers(Nested, kw_only=True):
    """with `--layers` (or, for `verify`, the destination's record): the layers the files
    listed were chosen for"""

    layers: Annotated[str, d("merged layer ranges, e.g. `11-21`")]
    first: Annotated[bool, d("the embeddings' files included (`--first`, or a range from layer 0)")]
    last: Annotated[
        bool, d("the output head's files included (`--last`, or a range to the last layer)")
    ]


class Record(Nested, kw_only=True):
    """with a layer map: what the destination records it was provisioned for (the union of
    every successful run's ranges)"""

    model: Annotated[str, d("the model's name")]
    layers: Annotated[str, d("layer ranges")]
    first: Annotated[bool, d("the embeddings")]
    last: Annotated[bool, d("the output head")]


class ProvisionedFile(Nested, kw_only=True):
    """a file"""

    name: Annotated[str, d("file name")]
    size: Annotated[int, d("bytes, from the manifest")]
    sha256: Annotated[str, d("the manifest's sha256: what it was verified against")]
    status: Annotated[str, d("`present`, `downloaded` or `failed`; `planned` with `--dry-run`")]
    downloaded_bytes: Annotated[int, d("bytes downloaded this run")]
    resumed_from: Annotated[int, d("bytes of NAME.part reused")]
    restarts: Annotated[int, d("times it started over from byte 0")]
    retries: Annotated[int, d("retries")]
    error: Annotated[str | None, d("why it failed")]


class ArtifactsProvision(Form, kw_only=True):
    title = "artifacts provision"
    may_fail = True
    note = (
        "exit 1 when a file fails; a busy provision lock adds `lock` and `holder` to the "
        "error, a bad `DGR_ARTIFACTS_*` number `variable` and `value`"
    )

    model: Annotated[str, d("the model's name")]
    dest: Annotated[str, d("the `--dest` directory")]
    files: Annotated[list[ProvisionedFile], d("per file")]
    downloaded_bytes: Annotated[int, d("total downloaded this run")]
    seconds: Annotated[float, d("time taken")]
    failed: Annotated[Strs, d("the files that failed")]
    split_problems: Annotated[
        dict[str, Strs], d("GGUF split problems per file, and headers contradicting the layer map")
    ]
    layers: Layers | None
    bytes: Annotated[int, d("the size of the files listed (the subset with `--layers`)")]
    model_bytes: Annotated[int, d("the size of the whole model")]
    missing_bytes: Annotated[int, d("what was still to download when the run began")]
    dry_run: Annotated[bool, d("`--dry-run`: nothing was written, every file is `planned`")]
    provisioned: Record | None


class VerifiedFile(Nested, kw_only=True):
    """a file"""

    name: Annotated[str, d("file name")]
    size: Annotated[int, d("bytes, from the manifest")]
    status: Annotated[str, d("`ok`, `missing` or `bad`")]
    ok: Annotated[bool, d("`status` is `ok`")]
    problems: Annotated[Strs, d("what is wrong (size, sha256, split header)")]
    sha256: Annotated[str | None, d("what is on disk, when it was hashed")]


class Serves(Nested, kw_only=True):
    """with a layer map: what the files that verified can serve"""

    layers: Annotated[str, d('layer ranges, e.g. `0-10,22-32` (`""`: none)')]
    first: Annotated[bool, d("the embeddings' files verified")]
    last: Annotated[bool, d("the output head's files verified")]


class ArtifactsVerify(Form, kw_only=True):
    title = "artifacts verify"
    may_fail = True
    note = "exit 1 when a file is not `ok`"

    model: Annotated[str, d("the model's name")]
    dest: Annotated[str, d("the `--dest` directory")]
    files: Annotated[
        list[VerifiedFile],
        d("per file required (all, or those the layers checked need) or present"),
    ]
    bad: Annotated[Strs, d("the files not `ok`")]
    bytes: Annotated[int, d("total size of the files listed")]
    seconds: Annotated[float, d("time taken")]
    layers: Layers | None
    serves: Serves | None
    provisioned: Record | None


class ManifestFile(Nested, kw_only=True):
    """a file"""

    name: Annotated[str, d("file name")]
    size: Annotated[int, d("bytes")]
    sha256: Annotated[str, SHA]
    url: Annotated[str, d("credentials masked")]


class ArtifactsManifest(Form, kw_only=True):
    title = "artifacts manifest"

    model: Annotated[str, d("the model's name")]
    manifest: Annotated[str, d("where it was written")]
    state: Annotated[str, d("e.g. `written`")]
    files: Annotated[list[ManifestFile], d("per file")]
    total_size: Annotated[int, d("bytes")]
    block_count: Annotated[int | None, d("with a layer map: the model's layers")]


class MappedFile(Nested, kw_only=True):
    """a file"""

    name: Annotated[str, d("file name")]
    layers: Annotated[str | None, d('layer ranges it holds tensors of (`""`: none)')]
    tensors: Annotated[Strs | None, d("its other tensor groups, e.g. `token_embd`")]
    header_bytes: Annotated[int, d("header bytes read")]


class ArtifactsMap(Form, kw_only=True):
    title = "artifacts map"

    model: Annotated[str, d("the model's name")]
    manifest: Annotated[str, d("the manifest written")]
    state: Annotated[str, d("`updated` or `unchanged`")]
    source: Annotated[str, d("`dest` (files on disk) or `url` (headers by HTTP Range requests)")]
    arch: Annotated[str | None, d("`general.architecture`")]
    block_count: Annotated[int | None, d("`<arch>.block_count`: the model's layers")]
    files: Annotated[list[MappedFile], d("per file (null `layers`/`tensors`: not a .gguf)")]
    header_bytes: Annotated[int, d("header bytes read in all")]
    requests: Annotated[int, d("HTTP Range requests made")]
