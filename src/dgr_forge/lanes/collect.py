"""Collect a finished lane build: its artifacts (by real file) and the report's record."""

from __future__ import annotations

import os
import stat
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import Struct, to_builtins

from dgr_forge.attest.records import Artifact, LaneBuild, LinkInput, PatchInput, Tool
from dgr_forge.core import gitutil
from dgr_forge.core.fsutil import sha256_bytes, sha256_file
from dgr_forge.core.urls import mask
from dgr_forge.host import cudakit, toolkit, worker
from dgr_forge.lanes import cmake_api
from dgr_forge.lanes.programs import Program, first_line
from dgr_forge.lanes.stamps import RACY_NS, Stamp, digest_of
from dgr_forge.upstream.manifest import UpstreamManifest, read_raw

if TYPE_CHECKING:
    from dgr_forge.cache.select import Cache
    from dgr_forge.core.forge import Forge
    from dgr_forge.host.doctor import Doctor
    from dgr_forge.lanes.plan import LanePlan


def collect_artifacts(
    shipped: list[tuple[cmake_api.Target, Path]],
) -> tuple[list[Artifact], dict[str, list[int]]]:
    """`shipped` by their real file (links: aliases), and their stat records."""
    found: dict[Path, tuple[str, str, set[str]]] = {}
    for target, path in shipped:
        real = path.resolve()
        aliases = found.setdefault(real, (target.name, target.kind, set()))[2]
        if path.is_symlink():
            aliases.add(path.name)
        if target.kind in ("SHARED_LIBRARY", "MODULE_LIBRARY"):
            for entry in os.scandir(real.parent):
                if entry.is_symlink() and Path(entry.path).resolve() == real:
                    aliases.add(entry.name)
    # a stat taken right after the link is racy (re-hashed by the next no-op): wait out
    # the rest of the window once, a few ms of a cold build, so the next no-op is cheap
    newest = max((os.stat(p).st_ctime_ns for p in found), default=0)
    if 0 < (wait := RACY_NS - (time.time_ns() - newest)) <= RACY_NS:
        time.sleep(wait / 1e9 + 0.002)
    artifacts, stats = [], {}
    for real, (name, kind, a) in sorted(found.items()):
        taken = time.time_ns()
        st = os.stat(real)
        artifacts.append(Artifact(name, kind, real, sha256_file(real), tuple(sorted(a))))
        stats[str(real)] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, taken]
    return artifacts, stats


def _placeholder(name: str) -> str:
    return "${" + "".join(c if c.isalnum() else "_" for c in name).upper() + "}"


def _probed_version(path: str) -> str:
    """Its own `--version`, else why there is none: a report never has an empty version."""
    if not path or not Path(path).is_absolute():
        return "unknown: CMake named no program path"
    return first_line([path, "--version"]) or f"unknown: `{Path(path).name} --version` said none"


class BuildRun(Struct, frozen=True):
    """What one lane build did, as the report records it."""

    forge: Forge
    m: UpstreamManifest
    plan: LanePlan
    doctor: Doctor
    head: str  # the patched upstream commit built
    cmake_args: list[str]  # the configure command, as run
    epoch: int  # SOURCE_DATE_EPOCH
    log_path: Path
    started: datetime
    cache: Cache  # the cache setup and this build's own figures (cache/session)
    snap: dict[str, Stamp]  # the input files' stamps, taken under the lock (lanes/inputs)
    programs: dict[str, Program]  # every program configure resolved (lanes/programs)
    launcher: str | None  # read back from the generated rules (lanes/cmake_api)


def make_record(run: BuildRun, reply: cmake_api.Reply, artifacts: list[Artifact]) -> LaneBuild:
    forge, m, plan = run.forge, run.m, run.plan
    # toolchain versions, and placeholders for their machine paths in the statement
    found = [Tool("cmake", plan.cmake, reply.cmake_version)]
    found.append(Tool("ninja", plan.ninja, run.doctor.version("ninja") or ""))
    for comp in reply.compilers:
        version = f"{comp.id} {comp.version}".strip() or _probed_version(comp.path)
        found.append(Tool(f"{comp.language.lower()}-compiler", comp.path, version))
    known = {t.path for t in found}
    for name in plan.recipe.requires.tools:
        probe = run.doctor.tool(name)
        if probe.path and probe.path not in known and name not in ("cmake", "ninja"):
            found.append(Tool(name, probe.path, run.doctor.version(name) or ""))
    if run.launcher and plan.cache.tool:
        found.append(Tool(plan.cache.tool, run.launcher, plan.cache.version))
    # every program configure resolved, with the sha256 stamped then
    by_path = {p.named: p for p in run.programs.values()}
    found = [
        Tool(t.name, t.path, t.version, by_path[t.path].stamp[0]) if t.path in by_path else t
        for t in found
    ]
    listed = {t.path for t in found}
    compilers = {c.path: c for c in reply.compilers}
    for name, p in sorted(run.programs.items()):
        if p.named in listed or name == "launcher":
            continue
        driver = run.programs.get(name.split(":")[0])
        owner = compilers.get(driver.named) if driver else None
        version = (
            p.version
            or (f"{owner.id} {owner.version}".strip() if owner else "")
            or _probed_version(p.named)  # never empty: the version, or why there is none
        )
        label = name.replace("CMAKE_", "").lower().replace("_", "-").replace(":", " ")
        found.append(Tool(label, p.named, version, p.stamp[0]))
    placeholders = {t.path: _placeholder(t.name) for t in found if Path(t.path).is_absolute()}
    if (tree := worker.path_tree(plan.spec)) is not None:
        placeholders.setdefault(str(tree), "${DGR_WORKER}")
    toolchain = plan.toolchain_file
    # the pinned toolkit's identity when the lane's nvcc came from `toolchain install`
    lock, nvcc = forge.toolchains_dir / toolkit.LOCK_NAME, plan.tool_paths.get("nvcc")
    pinned = toolkit.identity(lock, nvcc) if nvcc is not None else None
    return LaneBuild(
        lane=plan.lane,
        recipe_file=forge.rel(plan.recipe.path),
        recipe_sha256=plan.recipe.sha256,
        manifest_file=forge.rel(m.path),
        manifest_sha256=digest_of(run.snap, m.path) or sha256_bytes(read_raw(m.path)),
        upstream_name=m.name,
        upstream_url=mask(m.url),
        upstream_commit=m.commit,
        upstream_tree=m.tree or gitutil.tree_of(plan.upstream_dir, m.commit),
        patches=[
            PatchInput(file=f"{m.patches_dir_rel}/{e.file}", sha256=e.sha256) for e in m.series
        ],
        series_digest=m.series_digest,
        result_tree=gitutil.tree_of(plan.upstream_dir, run.head),
        worker=worker.describe(plan.spec) if plan.spec else None,
        tools=found,
        cmake_args=run.cmake_args,
        compiler_launcher=run.launcher,
        source_date_epoch=run.epoch,
        build_dir=plan.build_dir,
        log_file=run.log_path,
        cmake_cache=plan.build_dir / "CMakeCache.txt",
        started_on=run.started,
        finished_on=datetime.now(UTC),
        artifacts=artifacts,
        toolchain_file=forge.rel(toolchain) if toolchain else None,
        toolchain_sha256=digest_of(run.snap, toolchain),
        cache=to_builtins(run.cache),
        placeholders=placeholders,
        # nvcc has no prefix map for its device code: a CUDA lane's bytes may carry paths
        reproducible="GGML_CUDA" not in plan.recipe.cmake_options,
        upstream_build_number=m.build_number,
        upstream_build_commit=m.build_commit,
        link_inputs=[
            LinkInput(path=path, sha256=sha, note=cudakit.STUB_NOTE)
            for path, sha in cudakit.recorded(plan.cuda)
        ],
        toolkit=None if pinned is None else {**pinned, "lock": forge.rel(lock)},
    )


def strip_runpaths(plan: LanePlan) -> None:
    """After Ninja wrote, before anything hashes them: `strip_empty_runpath` of each."""
    reply = cmake_api.read_reply(plan.build_dir)
    extra = tuple(plan.recipe.certify.targets) if plan.recipe.certify else ()
    shipped = cmake_api.shipped_artifacts(reply, plan.recipe.cmake.targets, extra)
    for real in {path.resolve() for target, path in shipped if target.kind != "STATIC_LIBRARY"}:
        strip_empty_runpath(real)


def strip_empty_runpath(path: Path) -> bool:
    """Take the empty elements out of an ELF file's RUNPATH/RPATH in place (CMake ends an
    installed target's with `:`, and the loader reads an empty element as the current
    directory); one another dynamic string points into stays. Whether it changed."""
    from elftools.common.exceptions import ELFError
    from elftools.common.utils import parse_cstring_from_stream
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    # a file the build linked, never a link or a FIFO swapped in
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "r+b") as fh:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            return False
        try:
            elf = ELFFile(fh)
            if not isinstance(dynamic := elf.get_section_by_name(".dynamic"), DynamicSection):
                return False
            base = elf.get_section(dynamic["sh_link"])["sh_offset"]
            tags = list(dynamic.iter_tags())
            paths = [t["d_val"] for t in tags if t.entry.d_tag in ("DT_RUNPATH", "DT_RPATH")]
            found = [(at, parse_cstring_from_stream(fh, base + at) or b"") for at in paths]
            padded = [(at, old) for at, old in found if old and b"" in old.split(b":")]
            if not padded:
                return False  # the common case: the symbol table is never walked
            names = [t["d_val"] for t in tags if t.entry.d_tag in _STRING_TAGS]
            dynsym = elf.get_section_by_name(".dynsym")
            if isinstance(dynsym, SymbolTableSection):
                names += [sym["st_name"] for sym in dynsym.iter_symbols()]
        except (ELFError, ValueError, KeyError):
            return False  # not a linked ELF file: nothing the loader reads a RUNPATH of
        free = [(at, old) for at, old in padded if not any(at < n <= at + len(old) for n in names)]
        for at, old in free:
            new = b":".join(e for e in old.split(b":") if e)
            os.pwrite(fd, new.ljust(len(old), b"\0"), base + at)
        if free:  # Ninja's mtime kept: a newer one would relink everything linking it
            os.utime(fd, ns=(before.st_atime_ns, before.st_mtime_ns))
        return bool(free)


# the dynamic entries whose value is an offset into .dynstr
_STRING_TAGS = ("DT_NEEDED", "DT_SONAME", "DT_RUNPATH", "DT_RPATH", "DT_AUXILIARY", "DT_FILTER")
