"""Every program a lane's build runs, as configure resolved it (issue 20 #4): CMake's
programs, GCC's own behind its driver (cc1plus, as, collect2, ld) and the launcher.

A change since configure means a full rebuild, never objects of two compilers in one
binary. Hashing a compiler proper is ~70 MB: `start()` does it while Ninja compiles.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import Struct, field

from dgr_forge.core import proc
from dgr_forge.core.fsutil import file_identity
from dgr_forge.lanes import stamps

# concurrent.futures (~3 ms) and cmake_api: imported where programs are hashed, past a no-op
if TYPE_CHECKING:
    from concurrent.futures import Future

# what each GCC driver runs: its compiler proper, assembler and linker
_INTERNAL = {"C": ("cc1",), "CXX": ("cc1plus",), "": ("as", "collect2", "ld")}
# what the build runs besides the compilers (the other binutils CMake finds are not run)
_VERSIONED = ("CMAKE_AR", "CMAKE_RANLIB", "CMAKE_LINKER")
CHANGED = "changed-during-build"  # a stamp's digest when the file moved while being hashed


class Program(Struct):
    path: str  # resolved
    stamp: stamps.Stamp
    as_: str | None = field(default=None, name="as")  # the path as CMake has it
    version: str = ""

    @property
    def named(self) -> str:
        return self.as_ or self.path


_VERSION = r"\d+\.\d+"
_PROBES: dict[str, str] = {}  # this run's answers, from and for the per-user cache


def first_line(cmd: list[str]) -> str:
    """The first line `cmd` prints that names a version, kept per exact file and argument."""
    found = file_identity(cmd[0])
    # "v": the line naming a version (an earlier forge kept the first line)
    key = None if found is None else "|".join(str(x) for x in (*found[:5], cmd[1], "v"))
    if key is not None and key in _PROBES:
        return _PROBES[key]
    done = proc.probe(cmd, timeout=30)
    text = (done.stdout or done.stderr or "").strip() if done and done.returncode == 0 else ""
    lines = text.splitlines()
    # the first line naming a version: nvcc's first is its banner, its release comes 4th
    line = next((x for x in lines if re.search(_VERSION, x)), lines[0])[:200] if lines else ""
    if key is not None:
        _PROBES[key] = line
    return line


def _internal(compiler: str, lang: str) -> dict[str, tuple[str, str]]:
    """GCC's own programs behind `compiler`, each with its version: the compiler proper
    answers no `--version`, it has the driver's; collect2, as and ld have binutils' own."""
    if not (proper := _INTERNAL.get(lang, ())):
        return {}
    found = first_line([compiler, f"-print-prog-name={proper[0]}"])
    if not found.startswith("/") or not os.path.isfile(found):
        return {}
    out = {proper[0]: (found, first_line([compiler, "--version"]))}
    libexec = os.path.dirname(found)
    for name in _INTERNAL[""]:
        beside = os.path.join(libexec, name)
        where = beside if os.path.isfile(beside) else shutil.which(name)
        if where:
            out[name] = (where, first_line([where, "--version"]))
    return out


def start(
    build_dir: Path, launcher: str | None, host: Path | None, drivers: dict[str, str]
) -> Future[dict[str, Program]]:
    """`snapshot()` on a worker thread, from stat records taken now; `host`: shared stamps."""
    from concurrent.futures import ThreadPoolExecutor

    from dgr_forge.lanes import cmake_api

    cache = cmake_api.programs(build_dir)
    early = {i[0]: i for p in [*cache.values(), *drivers.values()] if (i := file_identity(p))}
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(snapshot, cache, launcher, early, host, drivers)
    pool.shutdown(wait=False)
    return future


def snapshot(
    cache: dict[str, str],  # CMakeCache.txt's programs (`cmake_api.programs`)
    launcher: str | None,
    early: dict[str, tuple[str, int, int, int, int, int]],  # `file_identity`s, by real path
    host_dir: Path | None,
    drivers: dict[str, str],
) -> dict[str, Program]:
    """With `early` (stat records taken before), a file whose stat differs is CHANGED."""
    from concurrent.futures import ThreadPoolExecutor

    _PROBES.update(stamps.load_host_probes(host_dir))
    compilers = {v: p for v, p in cache.items() if v.endswith("_COMPILER") and v.count("_") == 2}
    with ThreadPoolExecutor(max_workers=4) as pool:
        versions = {
            v: pool.submit(first_line, [cache[v], "--version"]) for v in _VERSIONED if v in cache
        }
        internal = {v: pool.submit(_internal, p, v.split("_")[1]) for v, p in compilers.items()}
        # name -> (path as CMake has it, version) of every program the build runs
        found = {v: (p, "") for v, p in {**compilers, **drivers}.items() if os.path.isabs(p)}
        found |= {v: (cache[v], f.result()) for v, f in versions.items() if os.path.isabs(cache[v])}
        found |= {f"{v}:{n}": e for v, f in internal.items() for n, e in f.result().items()}
    if launcher:
        found["launcher"] = (launcher, "")
    stamps.save_host_probes(host_dir, dict(_PROBES))
    real = {name: os.path.realpath(path) for name, (path, _) in found.items()}
    host = stamps.load_host(host_dir)  # settled stamps of this user's programs: a stat, no hash
    with ThreadPoolExecutor(max_workers=2) as pool:
        stamped = {
            p: pool.submit(stamps.stamp, Path(p), host.get(p)) for p in sorted(set(real.values()))
        }
        done = {p: f.result() for p, f in stamped.items()}
    settled = {p: s for p, s in done.items() if s is not None and s != host.get(p)}
    stamps.save_host(host_dir, settled)
    out: dict[str, Program] = {}
    for name, (path, version) in sorted(found.items()):
        if (stamp := done[real[name]]) is None:
            continue
        if (before := early.get(real[name])) is not None:
            seen = list(before[1:5])  # size, mtime, ctime, inode
            if seen != stamp[1:5]:
                stamp = [CHANGED, *seen, stamp[5]]
        out[name] = Program(real[name], stamp, path, version)
    return out


def changed(programs: dict[str, Program]) -> list[str]:
    gone = set(stamps.changed({p.path: p.stamp for p in programs.values()}))
    return [name for name, p in programs.items() if p.path in gone or p.stamp[0] == CHANGED]


def refresh(programs: dict[str, Program]) -> None:
    """Re-stamp in place (a settled, non-racy stamp makes the next check cheap)."""
    for p in programs.values():
        if (new := stamps.stamp(Path(p.path), p.stamp)) is not None and new[0] == p.stamp[0]:
            p.stamp = new
