"""CMakeUserPresets.json: one configure + build preset per lane, so IDEs build what the
forge builds (same source, build directory, toolchain file and cache variables: the lane
plan from `lanes.plan`, the one `build` runs).

The file goes where `cmake --preset dgr-<lane>` finds a CMakeLists.txt next to it: the
worker's directory when one is configured, else the patched upstream tree, where it is
listed in the repository's `.git/info/exclude` so `patch` and `build` still see a clean
tree.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dgr_forge.core import gitutil
from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_text
from dgr_forge.lanes import cache as cache_mod
from dgr_forge.lanes import worker
from dgr_forge.lanes.doctor import Doctor
from dgr_forge.lanes.plan import configure_args, launcher_switches, plan_lane
from dgr_forge.lanes.recipes import Recipe, select
from dgr_forge.upstream.manifest import UpstreamManifest

FILE_NAME = "CMakeUserPresets.json"


def _cache_variables(args: list[str]) -> dict[str, str]:
    """-DNAME=VALUE arguments as presets' cacheVariables (the rest is preset fields)."""
    out: dict[str, str] = {}
    for arg in args:
        if arg.startswith("-D") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            if name not in ("CMAKE_TOOLCHAIN_FILE", "CMAKE_MAKE_PROGRAM"):
                out[name] = value
    return out


def render(
    forge: Forge,
    m: UpstreamManifest,
    all_recipes: dict[str, Recipe],
    doctor: Doctor,
    spec: worker.WorkerSpec | None,
    lanes: list[str],
    cache: str | None = None,
) -> dict[str, Any]:
    """The presets of `lanes` (all when empty); `cache` defaults to DGR_CACHE, else auto."""
    recipes = select(all_recipes, lanes)
    cache = cache or os.environ.get("DGR_CACHE") or "auto"
    choice = cache if cache in cache_mod.CHOICES else "auto"
    try:
        setup = cache_mod.select(
            doctor,
            choice,
            "rw",
            workspace=forge.workspace,
            root=forge.root,
            worker=spec.source_dir if spec is not None and spec.url is None else None,
        )
    except BadInput:
        setup = cache_mod.OFF  # a tool named but missing: presets still render
    configure: list[dict[str, Any]] = []
    build: list[dict[str, Any]] = []
    src = forge.src_dir(m.name)
    # the upstream's launcher auto-detection, pinned as `build` pins it (once patched)
    switches = launcher_switches(src) if (src / ".git").exists() else ()
    from dgr_forge.lanes.options import taken_as_given  # not on the no-op path

    given = taken_as_given(src) if (src / ".git").exists() else ()
    for recipe in recipes:
        plan = plan_lane(forge, m, recipe, doctor, spec, setup)
        args = configure_args(forge, m, plan, switches, given)
        preset: dict[str, Any] = {
            "name": f"dgr-{recipe.name}",
            "displayName": f"dgr-forge {recipe.name} ({recipe.backend})",
            "description": recipe.description or f"{recipe.backend} lane",
            "generator": "Ninja",
            "binaryDir": str(plan.build_dir),
            "cacheVariables": _cache_variables(args),
        }
        if plan.toolchain_file:
            preset["toolchainFile"] = str(plan.toolchain_file)
        if doctor.tool("ninja").found:
            preset["cacheVariables"]["CMAKE_MAKE_PROGRAM"] = str(doctor.tool("ninja").path)
        configure.append(preset)
        step: dict[str, Any] = {
            "name": f"dgr-{recipe.name}",
            "configurePreset": f"dgr-{recipe.name}",
        }
        if recipe.targets:
            step["targets"] = list(recipe.targets)
        build.append(step)
    return {
        "version": 3,
        "cmakeMinimumRequired": {"major": 3, "minor": 21, "patch": 0},
        "configurePresets": configure,
        "buildPresets": build,
    }


def default_dest(forge: Forge, m: UpstreamManifest, spec: worker.WorkerSpec | None) -> Path:
    """The worker's directory when one is configured, else the upstream tree."""
    if spec is not None:
        return spec.source_dir
    src = forge.src_dir(m.name)
    if not (src / "CMakeLists.txt").is_file():
        raise BadInput(
            f"{forge.rel(src)}: no upstream tree to write {FILE_NAME} into",
            hint="run `dgr-forge patch` (or `build`) first, configure a worker, or pass --out",
        )
    return src


def _inside(path: Path, *bases: Path) -> bool:
    real = Path(os.path.realpath(path))
    return any(real.is_relative_to(os.path.realpath(b)) for b in bases)


def _linked_out(forge: Forge, path: Path, spec: worker.WorkerSpec | None) -> bool:
    """Whether the manifest's worker `path` is reached through a symlink that leaves the
    root and workspace (an explicit "../worker" in the manifest is not: reviewers see it)."""
    if spec is None or spec.url is not None:
        return False
    lexical = Path(os.path.normpath(Path(os.path.realpath(forge.root)) / spec.location))
    return Path(os.path.realpath(lexical)) != lexical and not _inside(
        path, forge.root, forge.workspace
    )


def exclude_from_git(path: Path, forge: Forge | None = None) -> None:
    """List `path` in its repository's `.git/info/exclude` (once), so `git status`, `patch`
    and `build` do not count a file the forge wrote as a local change. Only a repository
    in the forge root or workspace (or the checkout holding the root) is edited: never
    another repository's `.git/`."""
    top = gitutil.git(path.parent, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        return
    root = Path(top.stdout.strip())
    if forge is not None and not (
        _inside(root, forge.root, forge.workspace) or _inside(forge.root, root)
    ):
        return  # another repository: its .git/ is not ours to edit
    common = gitutil.git(root, "rev-parse", "--git-common-dir").stdout.strip()
    exclude = (root / common) / "info" / "exclude"
    rel = "/" + path.resolve().relative_to(root.resolve()).as_posix()
    lines = exclude.read_text(encoding="utf-8").splitlines() if exclude.is_file() else []
    if rel not in lines:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(exclude, "\n".join([*lines, rel]) + "\n")


def write(
    forge: Forge,
    presets: dict[str, Any],
    dest: Path | None,
    m: UpstreamManifest,
    spec: worker.WorkerSpec | None,
    *,
    worker_override: bool = False,
) -> Path:
    """Write the presets (`dest`, else the default place); `worker_override`: the worker
    came from --worker, a place the person chose, not one a checkout committed."""
    path = dest or default_dest(forge, m, spec)
    if dest is None and not worker_override and _linked_out(forge, path, spec):
        # a committed symlink on the worker path leads out of the root: a checkout must
        # not make the forge write into another directory or repository
        raise BadInput(
            f"{path}: the worker directory named in manifests/shard-worker.toml leads out of "
            f"the forge root ({forge.root}) through a symlink; presets are not written there",
            hint="pass --out PATH (or --worker DIR) to write there on purpose, or point "
            "[worker] path at a directory inside the root",
            details={"path": str(path)},
        )
    if path.is_dir():
        path = path / FILE_NAME
    if path.is_symlink():
        raise BadInput(f"{path}: is a symlink; the forge does not write through it")
    exclude_from_git(path, forge)  # before the file appears: never a moment of a dirty tree
    atomic_write_text(path, json.dumps(presets, indent=2) + "\n")
    return path
