"""`dgr-forge artifacts provision|verify|manifest|map`: exact model artifacts (split GGUF)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dgr_forge.cli import options as opt
from dgr_forge.cli.app import Env, Outcome, command, group
from dgr_forge.core.errors import BadInput, ForgeError

if TYPE_CHECKING:
    from dgr_forge.models.make_manifest import ArtifactsManifest, ArtifactsMap
    from dgr_forge.models.manifest import ModelManifest
    from dgr_forge.models.provision import ArtifactsProvision
    from dgr_forge.models.subset import Selection
    from dgr_forge.models.verify import ArtifactsVerify

artifacts_app = group(
    "artifacts", "Exact model artifacts: provision (resumable download), verify, manifest, map."
)

ManifestArg = Annotated[
    str,
    typer.Argument(
        metavar="M", help="Model manifest: a path to a .toml, or a name under manifests/models/."
    ),
]
LayersOpt = Annotated[
    str | None,
    typer.Option(
        "--layers",
        metavar="RANGES",
        help="Layer ranges A-B[,C-D]: only the files holding their tensors (and the "
        "metadata split); needs a layer map in the manifest (`artifacts map`).",
    ),
]
FirstOpt = Annotated[
    bool, typer.Option("--first", help="Also the embeddings' files (implied by layer 0).")
]
LastOpt = Annotated[
    bool, typer.Option("--last", help="Also the output head's files (implied by the last layer).")
]


def _load(env: Env, spec: str) -> ModelManifest:
    from dgr_forge.models import manifest as models

    try:
        root: Path | None = env.forge.root
    except ForgeError:
        if not (spec.endswith(".toml") or "/" in spec or Path(spec).exists()):
            raise
        root = None  # a manifest path works outside a forge checkout too
    return models.load(models.resolve_path(spec, root), root)


def _selection(m: ModelManifest, layers: str | None, first: bool, last: bool) -> Selection | None:
    """The files `--layers` / `--first` / `--last` need; None for the whole model."""
    if layers is None and not first and not last:
        return None
    from dgr_forge.models import subset

    ranges = subset.parse_layers(m, layers) if layers is not None else ()
    return subset.select(m, ranges, first, last)


@command(artifacts_app)
def provision(
    env: Env,
    manifest: ManifestArg,
    dest: opt.ModelDest,
    mirror: opt.FileMirror = None,
    jobs: opt.DownloadJobs = 4,
    layers: LayersOpt = None,
    first: FirstOpt = False,
    last: LastOpt = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say which files and how many bytes; write nothing.")
    ] = False,
) -> ArtifactsProvision | Outcome:
    """Download the model's files (or a layer range's) into DEST: resumable, verified.

    With --layers, only the split files holding those layers' tensors, the metadata split
    and (--first / --last) the embeddings' and output head's; --dry-run says which.
    `--jobs`: files downloaded at once (default 4)."""
    from dgr_forge.models.provision import provision

    m = _load(env, manifest)
    selection = _selection(m, layers, first, last)
    result = provision(
        m, dest, env.out, mirror=mirror, jobs=jobs or 4, selection=selection, dry_run=dry_run
    )
    return Outcome.of(result, result.ok)


@command(artifacts_app)
def verify(
    env: Env,
    manifest: ManifestArg,
    dest: opt.ModelDest,
    jobs: opt.HashJobs = None,
    layers: LayersOpt = None,
) -> ArtifactsVerify | Outcome:
    """Check size, sha256 and GGUF split headers of the files in DEST.

    With --layers, the files those layers need; without it, what DEST records it was
    provisioned for (or every file), and which layer ranges the files can serve."""
    from dgr_forge.models.verify import verify

    m = _load(env, manifest)
    result = verify(m, dest, env.out, jobs=jobs, selection=_selection(m, layers, False, False))
    return Outcome.of(result, not result.bad)


@command(artifacts_app, "manifest")
def make_manifest(
    env: Env,
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Directory of model files.")],
    name: Annotated[
        str, typer.Option("--name", metavar="NAME", help="Model name, e.g. deepseek-v4.")
    ],
    url_base: Annotated[
        str,
        typer.Option(
            "--url-base", metavar="URL", help="Where the files are served: URL = BASE/NAME."
        ),
    ],
    source_revision: Annotated[
        str | None,
        typer.Option(
            "--source-revision", metavar="REV", help="The upstream checkpoint revision (40 hex)."
        ),
    ] = None,
    out_path: opt.ManifestOut = None,
    jobs: opt.HashJobs = None,
) -> ArtifactsManifest:
    """Write a model manifest from the files in DIR (sizes and sha256 from disk)."""
    from dgr_forge.models import manifest as models
    from dgr_forge.models.hashing import human
    from dgr_forge.models.make_manifest import build_manifest, write_manifest

    target = out_path
    if target is None:  # before hashing: a missing root should not cost a 500 GB read
        try:
            target = env.forge.root / models.MODELS_DIR / f"{name}.toml"
        except ForgeError as err:
            raise BadInput(
                f"no --out and no forge root to write {models.MODELS_DIR}/{name}.toml into",
                hint="pass --out PATH, or run inside a dgr-forge checkout (or --root DIR)",
            ) from err
    built, text = build_manifest(
        directory, name, url_base, env.out, source_revision=source_revision, jobs=jobs
    )
    result = write_manifest(built, text, target)
    size = human(result.total_size)
    env.out.answer(f"{target}: {result.state} ({len(result.files)} files, {size})")
    if url_base.startswith("file:"):  # said now, not by the first provision or certify
        from dgr_forge.models.sources import FILE_ROOTS_ENV

        env.out.warn(
            f"its URLs are file:// URLs: reading them needs {FILE_ROOTS_ENV} to allow the "
            f"directory ({FILE_ROOTS_ENV}={directory.resolve()}), or --mirror"
        )
    return result


@command(artifacts_app, "map")
def map_layers(
    env: Env,
    manifest: ManifestArg,
    dest: opt.HeaderDest = None,
    mirror: opt.FileMirror = None,
    jobs: opt.HashJobs = None,
) -> ArtifactsMap:
    """Add the layer map to manifest M, read from the GGUF split headers.

    From the files in DEST, or without --dest by HTTP Range requests for the header bytes
    only."""
    from dgr_forge.models.make_manifest import map_manifest

    return map_manifest(_load(env, manifest), env.out, dest=dest, mirror=mirror, jobs=jobs)
