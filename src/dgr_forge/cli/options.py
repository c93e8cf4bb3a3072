"""The options several commands take, each declared once with one help text.

A command names the option by its type here (`mirror: Mirror = None`); what the option
does in that command beyond this text (what `--force` replaces, what `--jobs` counts)
is said in the command's own help, so the option reads the same everywhere.
"""

from __future__ import annotations

from typing import Annotated

import typer

from dgr_forge.cli.helpstyle import complete_lanes
from dgr_forge.core.errors import BadInput

Mirror = Annotated[
    str | None,
    typer.Option(
        "--mirror",
        help="Fetch from this mirror instead (URL or path): the upstream's git mirror "
        "(default: DGR_MIRROR), or for `artifacts` a base replacing each file's "
        "URL (BASE/NAME); what arrives is verified all the same.",
    ),
]
Offline = Annotated[
    bool,
    typer.Option(
        "--offline", help="Never touch the network; fail if something it needs is not here."
    ),
]
Force = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Go on where the command would refuse to replace something (what, and where a "
        "copy is saved first: the command's description).",
    ),
]
Key = Annotated[
    str | None,
    typer.Option(
        "--key",
        help="A key file: the signing key where the command signs (default: "
        "DGR_SIGNING_KEY, then yours), the public key where it verifies (default: "
        "DGR_VERIFY_KEY, then yours).",
    ),
]
# `lanes` trusts any number of public keys besides trusted-keys/
TrustedKeys = Annotated[
    list[str] | None,
    typer.Option("--key", help="Also trust this public key (besides trusted-keys/; repeatable)."),
]


def _jobs(value: int | None) -> int | None:
    """1 to 4096, for every command (what `build` checks in the library too)."""
    if value is not None and not 1 <= value <= MAX_JOBS:
        raise BadInput(f"--jobs {value}: must be 1 to {MAX_JOBS}", hint="e.g. --jobs 2")
    return value


MAX_JOBS = 4096
Jobs = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        callback=_jobs,
        help="How many at once: compile jobs (`build`), files (`artifacts`); default: the "
        "cores (4 downloads).",
    ),
]
Lanes = Annotated[
    list[str] | None,
    typer.Option(
        "--lane",
        "-l",
        help="A lane (recipes/LANE.toml); repeatable; default: every lane (`build`: cpu).",
        autocompletion=complete_lanes,
    ),
]
