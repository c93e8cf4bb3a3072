"""The pieces every result type is made of: `Form` (one shape of a command's object),
`Nested`, `Command`, the description helper `d`, and the shapes several commands share.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import UNSET, Struct, UnsetType

from dgr_forge.core.structs import COMMIT as COMMIT
from dgr_forge.core.structs import SHA as SHA
from dgr_forge.core.structs import Form as Form
from dgr_forge.core.structs import Nested as Nested
from dgr_forge.core.structs import d as d


class Command(Struct, frozen=True):
    words: str  # "report verify"
    summary: str
    forms: tuple[type[Form], ...]
    prose: str = ""  # hand-written text shown above the key tables in docs/json.md

    @property
    def name(self) -> str:
        return self.words.replace(" ", "-")


Strs = list[str]
Obj = dict[str, Any]

# --- shared shapes --------------------------------------------------------------------


class Artifact(Nested, kw_only=True):
    """a built artifact"""

    name: Annotated[str, d("the target's artifact name")]
    kind: Annotated[str, d("CMake target type, e.g. `EXECUTABLE`")]
    path: Annotated[str, d("where it is")]
    sha256: Annotated[str, SHA]


class LastBuild(Nested, kw_only=True):
    """the lane's last build in this workspace (null: never built here)"""

    time: Annotated[str, d("when it finished (ISO 8601, UTC)")]
    result: Annotated[str, d("`ok` or `failed`")]
    report: Annotated[str | UnsetType | None, d("the signed report's path (null without one)")] = (
        UNSET
    )
    log: Annotated[str | UnsetType | None, d("the `build-<lane>.log` link")] = UNSET
    artifacts: Annotated[list[Artifact] | UnsetType, d("`status` only: the artifacts it made")] = (
        UNSET
    )
    stale: Annotated[
        Strs | UnsetType,
        d(
            "what moved since this build's report was made: `pin`, `series`, `recipe`, "
            "`worker` (empty: it is current; a build recorded by an older forge: all)"
        ),
    ] = UNSET
    inputs_recorded: Annotated[
        bool | UnsetType,
        d(
            "false when the build was recorded by an older forge, with no inputs to compare: "
            "stale until rebuilt, whatever moved (with `stale`)"
        ),
    ] = UNSET


class Cache(Nested, kw_only=True):
    """the compiler cache this build used; the same object is the report's `compilerCache`
    (see docs/distributed-compilation.md)"""

    tool: Annotated[str | None, d("`ccache`, `sccache`, or null: no cache")]
    version: Annotated[str, d('the tool\'s version (`""` when none)')]
    backend: Annotated[str, d("`none`, `local`, or `local + remote <masked URL or kind>`")]
    mode: Annotated[str, d("`rw`, `ro` or `off`")]
    hits: Annotated[
        int | UnsetType | None,
        d("this build's cache hits (with a cache; null when the tool would not say)"),
    ] = UNSET
    misses: Annotated[int | UnsetType | None, d("this build's cache misses (with a cache)")] = UNSET
    distributed: Annotated[
        Obj | UnsetType | None,
        d(
            "with an sccache-dist scheduler: `scheduler` (masked), `remoteCompiles`, "
            "`localCompiles`"
        ),
    ] = UNSET


class Missing(Nested, kw_only=True):
    """a tool or library a lane needs that this host lacks (as in `doctor`'s `tools`)"""

    name: Annotated[str, d("probe name")]
    found: Annotated[bool, d("false here")]


class DoctorLane(Nested, kw_only=True):
    """a lane and whether it can build on this host"""

    lane: Annotated[str, d("the lane (recipes/<lane>.toml)")]
    backend: Annotated[str, d("the recipe's backend")]
    buildable: Annotated[bool, d("every requirement is met here")]
    host_os_ok: Annotated[bool, d("this host's OS is one the lane builds on")]
    missing: Annotated[list[Missing], d("what is missing")]
    summary: Annotated[str, d("one line: `buildable`, or what is missing")]


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
