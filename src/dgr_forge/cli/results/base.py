"""The shapes the forms still in `cli.results` share (a rebase's rows and sides)."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import UNSET, UnsetType

from dgr_forge.core.structs import COMMIT as COMMIT
from dgr_forge.core.structs import SHA as SHA
from dgr_forge.core.structs import Form as Form
from dgr_forge.core.structs import Nested as Nested
from dgr_forge.core.structs import d as d

Strs = list[str]
Obj = dict[str, Any]


class UpstreamCommit(Nested, kw_only=True):
    """an upstream commit"""

    commit: Annotated[str, COMMIT]
    subject: Annotated[str, d("its subject")]


class RebaseRow(Nested, kw_only=True):
    """a patch's outcome"""

    file: Annotated[str, d("the patch file before")]
    new_file: Annotated[
        str | None,
        d(
            "its file after (null when dropped); a dry run's `conflict` row names the file the "
            "real rebase writes once it is resolved (it keeps its place)"
        ),
    ]
    subject: Annotated[str | UnsetType | None, d("its subject")] = UNSET
    outcome: Annotated[
        str,
        d(
            "`unchanged`, `refreshed`, `merged`, `resolved`, `dropped` (upstreamed), "
            "`dropped-by-hand`, `conflict`"
        ),
    ]
    old_commit: Annotated[str | UnsetType | None, d("its commit on the old pin")] = UNSET
    new_commit: Annotated[str | UnsetType | None, d("its commit on the new pin")] = UNSET
    upstream_commits: Annotated[
        list[UpstreamCommit] | UnsetType,
        d("the upstream commits that touched its files (that upstreamed it, or conflict)"),
    ] = UNSET
    files: Annotated[Strs | UnsetType, d("the conflicted files")] = UNSET


COUNTS = d(
    "patches per outcome: `unchanged`, `refreshed`, `merged`, `resolved`, `dropped`, "
    "`dropped-by-hand`, `conflict`"
)


class PinSide(Nested, kw_only=True):
    """a side of the rebase"""

    url: Annotated[str, d("the upstream URL, masked")]
    commit: Annotated[str, COMMIT]
    tree: Annotated[str | None, d("its tree")]
