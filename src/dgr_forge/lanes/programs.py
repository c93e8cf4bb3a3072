"""Every program a lane's build runs, as configure resolved it (issue 20 #4).

After configure: the compilers, archiver, ranlib, linker and the other programs CMake
put in its cache (`genbuild.programs`), each compiler's own programs as GCC resolves
them through its driver (`-print-prog-name`: cc1/cc1plus, as, collect2, ld), and the
launcher, each by resolved path, version and a `stamps` stamp. A change of any of them
since configure (a compiler replaced at the same path) means a fresh configure and a full
rebuild of the lane, never objects of two compilers in one binary; a change during the
build means no report.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from dgr_forge.core import proc
from dgr_forge.lanes import genbuild, stamps

# what each GCC driver runs: its compiler proper, assembler and linker
_INTERNAL = {"C": ("cc1",), "CXX": ("cc1plus",), "": ("as", "collect2", "ld")}
# programs whose version the report needs from `--version` (compilers: the File API's)
_VERSIONED = ("CMAKE_AR", "CMAKE_RANLIB", "CMAKE_LINKER")


def _first_line(cmd: list[str]) -> str:
    try:
        done = proc.capture(cmd, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    text = (done.stdout or done.stderr or "").strip()
    return text.splitlines()[0][:200] if done.returncode == 0 and text else ""


def _internal(compiler: str, lang: str) -> dict[str, str]:
    """GCC's own programs behind `compiler` (absolute paths only; other drivers: none)."""
    out = {}
    for name in (*_INTERNAL.get(lang, ()), *_INTERNAL[""]):
        found = _first_line([compiler, f"-print-prog-name={name}"])
        if found and not found.startswith("/"):
            found = shutil.which(found) or ""  # the driver runs it from PATH
        if found.startswith("/") and os.path.isfile(found):
            out[name] = found
    return out


def snapshot(build_dir: Path, launcher: str | None) -> dict[str, dict[str, Any]]:
    """name -> {path (resolved), version, stamp} for every program of the configured lane."""
    found: dict[str, tuple[str, str]] = {}
    for var, path in genbuild.programs(build_dir).items():
        if var.endswith("_COMMAND") or not os.path.isabs(path):  # cmake, ctest, cpack
            continue
        version = _first_line([path, "--version"]) if var in _VERSIONED else ""
        found[var] = (path, version)
        if var.endswith("_COMPILER") and var.count("_") == 2:
            lang = var.split("_")[1]
            for name, internal in _internal(path, lang).items():
                found.setdefault(f"{var}:{name}", (internal, ""))
    if launcher:
        found["launcher"] = (launcher, "")
    out: dict[str, dict[str, Any]] = {}
    for name, (path, version) in sorted(found.items()):
        real = os.path.realpath(path)
        stamp = stamps.stamp(Path(real))
        if stamp is not None:
            out[name] = {"path": real, "as": path, "version": version, "stamp": stamp}
    return out


def changed(programs: dict[str, dict[str, Any]]) -> list[str]:
    """Names of the programs whose file is no longer what was recorded."""
    known = {p["path"]: p["stamp"] for p in programs.values()}
    gone = set(stamps.changed(known))
    return [name for name, p in programs.items() if p["path"] in gone]


def refresh(programs: dict[str, dict[str, Any]]) -> None:
    """Re-stamp in place (a settled, non-racy stamp makes the next check cheap)."""
    for p in programs.values():
        new = stamps.stamp(Path(p["path"]), p["stamp"])
        if new is not None and new[0] == p["stamp"][0]:
            p["stamp"] = new


def valid(data: Any) -> dict[str, dict[str, Any]]:
    """The programs record read from state.json; malformed entries dropped."""
    if not isinstance(data, dict):
        return {}
    out = {}
    for name, p in data.items():
        if (
            isinstance(p, dict)
            and isinstance(p.get("path"), str)
            and isinstance(p.get("version", ""), str)
            and stamps.valid_map({"x": p.get("stamp")})
        ):
            out[str(name)] = p
    return out
