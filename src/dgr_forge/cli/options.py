"""Every option several commands take, declared once: its names, placeholder and check.
A name that does a different thing in different commands has a declaration per command,
each with the help for that command only (`build --help` says what `--jobs` counts in a
build, nothing about downloads). `--out` is always the file a command writes, `--report`
the Markdown report a rebase or bump writes (`certify`'s build report: `--build-report`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from dgr_forge.cli.helpstyle import complete_lanes
from dgr_forge.core.errors import BadInput


def _jobs(value: int | None) -> int | None:
    """1 to 4096 (what `build` checks in the library too)."""
    if value is not None and not 1 <= value <= MAX_JOBS:
        raise BadInput(f"--jobs {value}: must be 1 to {MAX_JOBS}", hint="e.g. --jobs 2")
    return value


MAX_JOBS = 4096


def _option(*names: str, **kw: Any) -> Callable[[str], Any]:
    """An option's names, placeholder and check, awaiting each command's help."""
    return lambda help: typer.Option(*names, help=help, **kw)


_jobs_option = _option("--jobs", "-j", metavar="N", callback=_jobs)
_lane_option = _option("--lane", "-l", metavar="LANE", autocompletion=complete_lanes)
_mirror_option = _option("--mirror", metavar="URL")
_force_option = _option("--force")
_key_option = _option("--key", metavar="PATH")
_out_option = _option("--out", metavar="PATH")


Mirror = Annotated[
    str | None,
    _mirror_option(
        "Fetch the upstream from this git mirror (URL or path; default: DGR_MIRROR); what "
        "arrives is verified against the pin all the same."
    ),
]
FileMirror = Annotated[
    str | None,
    _mirror_option(
        "Fetch each file from BASE/NAME instead of its URL (a URL or a directory); what "
        "arrives is verified against the manifest all the same."
    ),
]
Offline = Annotated[
    bool,
    typer.Option(
        "--offline", help="Never touch the network; fail if something it needs is not here."
    ),
]

FetchForce = Annotated[
    bool,
    _force_option(
        "Discard local changes in the workspace (saved as a patch under its logs/ first)."
    ),
]
ExportForce = Annotated[
    bool,
    _force_option(
        "Overwrite a series that moved on disk since this workspace was patched (the "
        "replaced files are saved under its logs/ first)."
    ),
]
BuildForce = Annotated[
    bool,
    _force_option(
        "Move a git worker checkout that holds edits or commits of yours (saved under the "
        "workspace's logs/ first)."
    ),
]
KeygenForce = Annotated[bool, _force_option("Replace an existing key (and its .pub).")]

SigningKey = Annotated[
    str | None, _key_option("Sign with this private key (default: DGR_SIGNING_KEY, then yours).")
]
VerifyKey = Annotated[
    str | None, _key_option("Verify with this public key (default: DGR_VERIFY_KEY, then yours).")
]
# `lanes` trusts any number of public keys besides trusted-keys/
TrustedKeys = Annotated[
    list[str] | None, _key_option("Also trust this public key (besides trusted-keys/; repeatable).")
]

BuildJobs = Annotated[int | None, _jobs_option("Parallel compile jobs (default: the cores).")]
HashJobs = Annotated[int | None, _jobs_option("Files hashed or read at once (default: the cores).")]
DownloadJobs = Annotated[int, _jobs_option("Files downloaded at once.")]

BuildLanes = Annotated[
    list[str] | None, _lane_option("A lane to build (recipes/LANE.toml); repeatable; default: cpu.")
]
Lanes = Annotated[
    list[str] | None, _lane_option("A lane (recipes/LANE.toml); repeatable; default: every lane.")
]
ReportLane = Annotated[
    list[str] | None,
    _lane_option("Use this lane's latest report in the workspace, instead of naming one."),
]
CertifyLane = Annotated[list[str] | None, _lane_option("The lane to certify (recipes/LANE.toml).")]

KeygenOut = Annotated[
    Path | None,
    _out_option(
        "Write the private key here, its public key beside it as PATH.pub (default: "
        "signing-key.pem in the user's config directory)."
    ),
]
ManifestOut = Annotated[
    Path | None, _out_option("Write the model manifest here (default: manifests/models/NAME.toml).")
]
WorkflowOut = Annotated[
    Path | None, _out_option("Write the workflow here (atomically) instead of stdout.")
]
PresetsOut = Annotated[
    Path | None,
    _out_option(
        "Write into this CMakeUserPresets.json (or the one in this directory; "
        "default: the worker's directory, else the upstream tree)."
    ),
]

BuildReport = Annotated[
    Path | None,
    typer.Option(
        "--build-report", metavar="PATH", help="The lane's signed report (default: its latest)."
    ),
]
# the spelling `certify` took before `--build-report` (docs and scripts name it)
BuildReportAsReport = Annotated[Path | None, typer.Option("--report", metavar="PATH", hidden=True)]
MarkdownReport = Annotated[
    Path | None, typer.Option("--report", metavar="PATH", help="Write the Markdown report here.")
]

Worker = Annotated[
    Path | None,
    typer.Option("--worker", help="Worker CMake project (overrides manifests/shard-worker.toml)."),
]

ModelDest = Annotated[Path, typer.Option("--dest", help="Directory the model files live in.")]
HeaderDest = Annotated[
    Path | None,
    typer.Option("--dest", help="Read the headers from the files here (default: over HTTP Range)."),
]
CertifyDest = Annotated[
    Path | None, typer.Option("--dest", help="Model directory (default: <workspace>/models/NAME).")
]
