"""A lane's inputs as one snapshot, taken under the workspace lock before configure.

The report records those digests, and one that changed while the build ran means no
report, never a digest configure did not read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import UNSET, Struct, UnsetType

from dgr_forge.core.errors import OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_bytes
from dgr_forge.core.urls import mask
from dgr_forge.host import worker
from dgr_forge.lanes import stamps
from dgr_forge.upstream.workspace import forge_written

if TYPE_CHECKING:
    from dgr_forge.host.doctor import Doctor
    from dgr_forge.host.recipes import Recipe
    from dgr_forge.host.worker import WorkerSpec
    from dgr_forge.lanes.plan import LanePlan
    from dgr_forge.upstream.manifest import UpstreamManifest

MAX_WORKER_FILES = 100_000  # a path worker's tree; beyond it, point --worker elsewhere
_SKIP_DIRS = {".git", ".dgr", "__pycache__"}


def _worker_files(top: Path) -> Iterable[Path]:
    count = 0
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if dirpath == str(top) and forge_written(top, name):  # for IDEs: inert
                continue
            count += 1
            if count > MAX_WORKER_FILES:
                raise OperationFailed(
                    f"worker {top}: more than {MAX_WORKER_FILES} files",
                    hint="point --worker at the worker's CMake project, not a directory "
                    "holding build output",
                )
            yield Path(dirpath) / name


def snapshot(
    forge: Forge, m: UpstreamManifest, plan: LanePlan, known: dict[str, stamps.Stamp]
) -> dict[str, stamps.Stamp]:
    """path -> stamp of every input file now (a missing file is simply not there)."""
    files = [m.path, plan.recipe.path]
    files += [forge.root / m.patches_dir_rel / e.file for e in m.series]
    if plan.toolchain_file is not None:
        files.append(plan.toolchain_file)
    files.append(forge.toolchains_dir / "probes.toml")
    files += sorted(forge.cmake_dir.glob("*.cmake"))  # none when there is no cmake/
    if (tree := worker.path_tree(plan.spec)) is not None:
        files += _worker_files(tree)
    return stamps.restamp({str(p): known.get(str(p), []) for p in files}, tree)


class WorkerIdentity(Struct):
    """What a certification binds of the worker (a path worker: the digest of its files)."""

    location: str
    commit: str | UnsetType | None = UNSET
    tree: str | UnsetType = UNSET


def worker_identity(spec: WorkerSpec | None) -> WorkerIdentity | None:
    if spec is None:
        return None
    if spec.url is not None:
        return WorkerIdentity(mask(spec.url), commit=spec.commit)
    top = spec.source_dir
    rels = (p.relative_to(top).as_posix() for p in _worker_files(top))
    # as git stores each file (`stamps.worker_file`: a link to /dev/zero was hashed forever)
    lines = "".join(f"{rel} {sha256_bytes(stamps.worker_file(top, rel) or b'')}\n" for rel in rels)
    return WorkerIdentity(spec.location, tree=sha256_bytes(lines.encode()))


# what `status` and `lanes` compare a last build's inputs against, in the order they say it
MOVABLE = ("pin", "series", "recipe", "worker")


class ReportInputs(Struct):
    """The inputs a person moves (`MOVABLE`) a report was built from."""

    pin: str | None = None
    series: str | None = None
    recipe: str | None = None
    # "(unreadable)": the worker could not be resolved now, never what a build recorded
    worker: WorkerIdentity | str | None = None


def report_inputs(
    m: UpstreamManifest, recipe: Recipe | None, spec: WorkerSpec | None
) -> ReportInputs:
    """The movable inputs as this checkout has them now (no program runs)."""
    recipe_sha = recipe.sha256 if recipe is not None else None
    return ReportInputs(m.commit, m.series_digest, recipe_sha, worker_identity(spec))


def tool_versions(doctor: Doctor, recipes: Mapping[str, Recipe]) -> dict[str, dict[str, str]]:
    """Per lane, the versions of this host's tools a certification binds (cmake, ninja, ...)."""
    out: dict[str, dict[str, str]] = {}
    for lane, recipe in recipes.items():
        found = {}
        for name in sorted({"cmake", "ninja", *recipe.requires.tools}):
            if doctor.tool(name).found:  # its version: one run of it, with fixed arguments
                found[name] = doctor.version(name) or "(version unknown)"
        out[lane] = found
    return out
