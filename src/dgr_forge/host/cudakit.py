"""A CUDA toolkit as a lane links against it (docs/build-and-reports.md, "The driver link
stub"): `dgr-cuda/lib/` in the build directory links `lib<name>.so` to each versioned-only
library of NVIDIA's wheels, `dgr-cuda/stubs/libcuda.so` stands in for the driver's; both
on the link path only (`-Wl,-rpath-link`): no RUNPATH names the build machine.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shlex
from pathlib import Path

from msgspec import Struct

from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import atomic_write_bytes, read_regular, sha256_regular
from dgr_forge.core.proc import capture

CUDA_ERROR_STUB_LIBRARY = 34  # cuda.h: CUDA_ERROR_STUB_LIBRARY = 34
STUB_SONAME = "libcuda.so.1"
STUB_NOTE = "link stub, not shipped"
MAX_HEADER_BYTES = 16 << 20  # CUDA 13.0's cuda.h is 1.1 MB
MAX_FUNCTIONS = 20_000  # CUDA 13.0's declares about 640
MAX_STUB_BYTES = 64 << 20  # ~40 KB for CUDA 13.0's
MAX_DIR_ENTRIES = 4096  # a toolkit's lib directory holds a few dozen files
_DECL = re.compile(rb"\bCUresult\s+CUDAAPI\s+([^\s(;]*)\s*\(")
# `#define cuMemAlloc cuMemAlloc_v2`, `#define cuMemcpy __CUDA_API_PTDS(cuMemcpy)`: the
# names callers link against
_ALIAS = re.compile(
    rb"^[ \t]*#[ \t]*define[ \t]+cu\w+[ \t]+(?:(cu\w+)|__CUDA_API_(PTDS|PTSZ)\((cu\w+)\))[ \t]*$",
    re.MULTILINE,
)
_NAME = re.compile(r"cu[A-Za-z0-9_]{1,126}")
_VERSIONED = re.compile(r"lib([A-Za-z0-9_+-]+)\.so\.[0-9]+")
# where a driver's libcuda is installed (the distributions' and NVIDIA's packages)
DRIVER_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
)


class CudaLink(Struct, frozen=True):
    """How a CUDA lane links: decided by the plan, made before configure (`prepare`)."""

    cuda_h: str  # the toolkit's cuda.h, the stub's declarations
    lib_dirs: tuple[str, ...]  # the toolkit's library directories
    driver: str | None  # a real libcuda on this host: no stub then
    base: str  # <build dir>/dgr-cuda
    links: tuple[tuple[str, str], ...] = ()  # (lib<name>.so, the versioned file)
    # nvcc's own library directory when its profile's `-L$(TOP)/lib64` misses it (NVIDIA's
    # wheels have `lib/` only: nvcc cannot find libcudart_static, configure fails)
    nvcc_lib: str | None = None

    @property
    def stub_dir(self) -> Path | None:
        return None if self.driver else Path(self.base) / "stubs"

    @property
    def stub(self) -> Path | None:
        return self.stub_dir / "libcuda.so" if self.stub_dir else None

    @property
    def links_dir(self) -> Path:
        return Path(self.base) / "lib"

    def cmake_args(self) -> tuple[str, ...]:
        args: list[str] = []
        if (library := self.stub or (Path(self.driver) if self.driver else None)) is not None:
            args.append(f"-DCUDA_cuda_driver_LIBRARY={library}")
        if self.links:
            args.append(f"-DCMAKE_LIBRARY_PATH={self.links_dir}")
        # CMake puts the directory of every library linked by path into the build RPATH
        # unless it is an implicit link directory: these are the link path only
        if link_only := [*self.link_dirs, *([str(self.links_dir)] if self.links else [])]:
            args.append(f"-DCMAKE_PLATFORM_IMPLICIT_LINK_DIRECTORIES={';'.join(link_only)}")
        return tuple(args)

    def cuda_flags(self) -> str:
        return shlex.quote(f"-L{self.nvcc_lib}") if self.nvcc_lib else ""

    @property
    def link_dirs(self) -> list[str]:  # the link path, never a RUNPATH
        return list(dict.fromkeys((*(str(d) for d in [self.stub_dir] if d), *self.lib_dirs)))

    def link_flags(self) -> str:
        return " ".join(shlex.quote(f"-Wl,-rpath-link,{d}") for d in self.link_dirs)


def find_driver(lib_dirs: tuple[str, ...], system: tuple[str, ...] = DRIVER_DIRS) -> str | None:
    """A real driver library (or a toolkit's own `stubs/libcuda.so`), else None."""
    for d in (*lib_dirs, *(f"{d}/stubs" for d in lib_dirs), *system):
        for name in ("libcuda.so", STUB_SONAME):
            if (path := Path(d) / name).is_file():
                return str(path)
    return None


def plan(
    include_dir: str,
    lib_dirs: tuple[str, ...],
    build_dir: Path,
    driver: str | None,
    nvcc: str | None = None,
) -> CudaLink:
    """The lane's CUDA link setup (nothing written)."""
    links: dict[str, str] = {}
    for d in lib_dirs:
        names: set[str] = set()
        with contextlib.suppress(OSError), os.scandir(d) as it:
            names = {entry.name for entry in itertools.islice(it, MAX_DIR_ENTRIES + 1)}
        for name in sorted(names):
            if (m := _VERSIONED.fullmatch(name)) and f"lib{m.group(1)}.so" not in names:
                links.setdefault(f"lib{m.group(1)}.so", str(Path(d) / name))
    # nvcc.profile's $(TOP), unresolved: only beside a real nvcc (not a wrapper script)
    real = nvcc is not None and (Path(nvcc).parent / "nvcc.profile").is_file()
    top = Path(nvcc).parent.parent if nvcc and real else None
    wheel_lib = top is not None and not (top / "lib64").exists() and (top / "lib").is_dir()
    return CudaLink(
        nvcc_lib=str(top / "lib") if top is not None and wheel_lib else None,
        cuda_h=str(Path(include_dir) / "cuda.h"),
        lib_dirs=lib_dirs,
        driver=driver,
        base=str(build_dir / "dgr-cuda"),
        links=tuple(sorted(links.items())),
    )


def stub_functions(text: bytes, shown: str) -> list[str]:
    """Every function `cuda.h` declares and each name its macros send callers to, sorted."""

    def refused(problem: str) -> BadInput:
        return BadInput(
            f"{shown}: {problem}",
            hint="reinstall the CUDA toolkit: its include/cuda.h is not NVIDIA's",
            details={"file": shown},
        )

    names: set[str] = set()
    for m in _DECL.finditer(text):
        if not _NAME.fullmatch(raw := m.group(1).decode("utf-8", "replace")):
            raise refused(f"declares a function named {raw[:60]!r}, not a CUDA identifier")
        names.add(raw)
        if len(names) > MAX_FUNCTIONS:
            raise refused(f"declares more than {MAX_FUNCTIONS} functions")
    for m in _ALIAS.finditer(text):
        name = (m.group(1) or m.group(3) + b"_" + m.group(2).lower()).decode()
        if _NAME.fullmatch(name) and name not in names and len(names) < MAX_FUNCTIONS:
            names.add(name)
    if not names:
        raise refused("declares no CUDA driver function")
    return sorted(names)


def prepare(link: CudaLink, cc: str) -> None:
    """Write the links and the stub (compiled with `cc`), unless they are there (a toolkit
    that changed is a new program, a fresh build dir)."""
    links_dir = link.links_dir
    links_dir.mkdir(parents=True, exist_ok=True)
    for name, target in link.links:
        if os.path.islink(path := links_dir / name) and os.readlink(path) == target:
            continue
        path.unlink(missing_ok=True)
        path.symlink_to(target)
    stub, stub_dir = link.stub, link.stub_dir
    if stub is None or stub_dir is None or (stub.is_file() and (stub_dir / STUB_SONAME).exists()):
        return
    hint = "reinstall the CUDA toolkit (its include/cuda.h)"
    text = read_regular(Path(link.cuda_h), what="CUDA header", hint=hint, limit=MAX_HEADER_BYTES)
    source = stub_dir / "libcuda-stub.c"
    stub_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        "/* dgr-forge: link stub for libcuda.so.1, generated from the toolkit's cuda.h.",
        "   Every function returns CUDA_ERROR_STUB_LIBRARY; never shipped, never loaded. */",
    ]
    lines += [
        f"int {n}(void) {{ return {CUDA_ERROR_STUB_LIBRARY}; }}"
        for n in stub_functions(text, link.cuda_h)
    ]
    atomic_write_bytes(source, ("\n".join(lines) + "\n").encode())
    tmp = stub_dir / "libcuda.so.tmp"
    # relative names, run in its directory: the same bytes in every workspace
    cmd = [cc, "-shared", "-fPIC", "-O0", f"-Wl,-soname,{STUB_SONAME}", "-o", tmp.name, source.name]
    if (proc := capture(cmd, cwd=stub_dir, timeout=300)).returncode != 0:
        raise BadInput(
            f"the CUDA link stub did not compile: {(proc.stderr or proc.stdout).strip()[:400]}",
            hint="check the lane's C compiler (`dgr-forge doctor`)",
            details={"file": str(source)},
        )
    os.replace(tmp, stub)
    soname = stub_dir / STUB_SONAME
    soname.unlink(missing_ok=True)
    soname.symlink_to("libcuda.so")


def recorded(link: CudaLink | None) -> list[tuple[Path, str]]:
    """The stub as a build input."""
    if link is None or link.stub is None or not link.stub.is_file():
        return []
    digest = sha256_regular(
        link.stub, what="CUDA link stub", hint="build the lane again", limit=MAX_STUB_BYTES
    )
    return [(link.stub, digest)]
