"""`dgr-forge artifacts provision|verify|manifest`: exact model artifacts (split GGUF)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dgr_forge.cli.app import Env, app, run
from dgr_forge.core.errors import BadInput, ExitCode, ForgeError

# Library modules are imported inside the commands: every CLI start registers all
# commands, and only `artifacts` itself should pay for requests/urllib3.
if TYPE_CHECKING:
    from dgr_forge.models.manifest import ModelManifest

artifacts_app = typer.Typer(
    name="artifacts",
    help="Exact model artifacts: provision (resumable download), verify, manifest.",
    no_args_is_help=True,
)
app.add_typer(artifacts_app, name="artifacts")

ManifestArg = Annotated[
    str,
    typer.Argument(
        metavar="M",
        help="Model manifest: a path to a .toml, or a name under manifests/models/.",
    ),
]
DestOpt = Annotated[Path, typer.Option("--dest", help="Directory the model files live in.")]
HashJobsOpt = Annotated[
    int | None,
    typer.Option("--jobs", "-j", min=1, help="Files hashed in parallel (default: cores)."),
]


def _load(env: Env, spec: str) -> ModelManifest:
    from dgr_forge.models import manifest as models

    path = Path(spec)
    if spec.endswith(".toml") or "/" in spec or path.exists():
        try:
            root: Path | None = env.forge.root
        except ForgeError:
            root = None  # a manifest path works outside a forge checkout too
        return models.load(path, root)
    root = env.forge.root
    return models.load(models.resolve_path(spec, root), root)


@artifacts_app.command()
def provision(
    ctx: typer.Context,
    manifest: ManifestArg,
    dest: DestOpt,
    mirror: Annotated[
        str | None,
        typer.Option("--mirror", help="Base URL (or directory) replacing each URL: BASE/NAME."),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Files in parallel.")] = 4,
) -> None:
    """Download the model's files into DEST: resumable, retried, verified, atomic."""

    def body(env: Env) -> dict[str, Any]:
        from dgr_forge.models import artifacts

        m = _load(env, manifest)
        result = artifacts.provision(m, dest, env.out, mirror=mirror, jobs=jobs)
        fields = result.to_json()
        if not result.ok:
            fields["exit_code"] = ExitCode.FAILED
        return fields

    run(ctx, "artifacts provision", body)


@artifacts_app.command()
def verify(
    ctx: typer.Context,
    manifest: ManifestArg,
    dest: DestOpt,
    jobs: HashJobsOpt = None,
) -> None:
    """Check size, sha256 and GGUF split headers of every file in DEST."""

    def body(env: Env) -> dict[str, Any]:
        from dgr_forge.models import artifacts

        m = _load(env, manifest)
        result = artifacts.verify(m, dest, env.out, jobs=jobs)
        fields = result.to_json()
        if result.bad:
            fields["exit_code"] = ExitCode.FAILED
        return fields

    run(ctx, "artifacts verify", body)


@artifacts_app.command("manifest")
def make_manifest(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Directory of model files.")],
    name: Annotated[str, typer.Option("--name", help="Model name, e.g. deepseek-v4.")],
    url_base: Annotated[
        str, typer.Option("--url-base", help="Where the files are served: URL = BASE/NAME.")
    ],
    source_revision: Annotated[
        str | None,
        typer.Option("--source-revision", help="The upstream checkpoint revision (40 hex)."),
    ] = None,
    out_path: Annotated[
        Path | None,
        typer.Option("--out", help="Where to write (default: manifests/models/NAME.toml)."),
    ] = None,
    jobs: HashJobsOpt = None,
) -> None:
    """Write a model manifest from the files in DIR (sizes and sha256 from disk)."""

    def body(env: Env) -> dict[str, Any]:
        from dgr_forge.core.fsutil import atomic_write_text
        from dgr_forge.core.urls import mask
        from dgr_forge.models import artifacts
        from dgr_forge.models import manifest as models

        target = out_path
        if target is None:  # before hashing: a missing root should not cost a 500 GB read
            try:
                target = env.forge.root / models.MODELS_DIR / f"{name}.toml"
            except ForgeError as err:
                raise BadInput(
                    f"no --out and no forge root to write {models.MODELS_DIR}/{name}.toml into",
                    hint="pass --out PATH, or run inside a dgr-forge checkout (or --root DIR)",
                ) from err
        built = artifacts.build_manifest(
            directory, name, url_base, env.out, source_revision=source_revision, jobs=jobs
        )
        old = target.read_text(encoding="utf-8") if target.is_file() else None
        state = "unchanged" if old == built.text else ("updated" if old else "written")
        if state != "unchanged":
            atomic_write_text(target, built.text)
        total = sum(f.size for f in built.files)
        env.out.info(f"{target}: {state} ({len(built.files)} files, {artifacts.human(total)})")
        return {
            "model": name,
            "manifest": str(target),
            "state": state,
            "files": [
                {"name": f.name, "size": f.size, "sha256": f.sha256, "url": mask(f.url)}
                for f in built.files
            ],
            "total_size": total,
        }

    run(ctx, "artifacts manifest", body)
