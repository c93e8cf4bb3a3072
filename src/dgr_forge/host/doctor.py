"""Which tools and libraries this machine has (`toolchains/probes.toml`), and so which
lanes it can build: `build` runs the same checks, so `doctor` and `build` never disagree."""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import platform
import re
import shutil
import sysconfig
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated

from msgspec import Struct

from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import file_identity
from dgr_forge.core.proc import probe as run_probe
from dgr_forge.core.structs import d
from dgr_forge.host.probes import LibraryProbe, Probes, ToolProbe
from dgr_forge.host.recipes import Recipe

_LIB_SUFFIXES = (".so", ".dylib", ".a", ".lib", ".tbd")


def host_os() -> str:
    return platform.system().lower()


class ProbeResult(Struct):
    """a probe: a tool or library the lanes may need"""

    name: Annotated[str, d("probe name")]
    kind: Annotated[str, d("`tool` or `library`")]
    description: Annotated[str, d("what it is")]
    found: Annotated[bool, d("found on this host")]
    path: Annotated[str | None, d("the executable, or the library file")]
    detail: Annotated[str, d("where it was found, or where the probe looked")]
    packages: Annotated[dict[str, list[str]], d("what installs it, per package system")]
    version: Annotated[str | None, d("its version, when asked")] = None
    include_dir: Annotated[str | None, d("a library's headers")] = None


class LaneCheck(Struct):
    """a lane and whether it can build on this host"""

    lane: Annotated[str, d("the lane (recipes/<lane>.toml)")]
    backend: Annotated[str, d("the recipe's backend")]
    buildable: Annotated[bool, d("every requirement is met here")]
    missing: Annotated[list[ProbeResult], d("what is missing")]
    host_os_ok: Annotated[bool, d("this host's OS is one the lane builds on")]
    host_os: Annotated[tuple[str, ...], d("the OSes it builds on")]
    summary: Annotated[str, d("one line: `buildable`, or what is missing")] = ""

    def __post_init__(self) -> None:
        if self.buildable:
            self.summary = "buildable"
            return
        parts = [] if self.host_os_ok else [f"needs {'/'.join(self.host_os)}"]
        parts += [item.description.split(" (")[0] for item in self.missing]
        self.summary = "missing " + ", ".join(parts) if self.host_os_ok else "; ".join(parts)

    def reasons(self) -> list[str]:
        """One line per missing thing, with each way to get it as the command to run."""
        lines: list[str] = []
        if not self.host_os_ok:
            lines.append(
                f"host OS {host_os()!r}: the {self.lane} lane builds only on "
                + ", ".join(self.host_os)
            )
        for item in self.missing:
            lines.append(f"{item.description} ({item.kind} {item.name}): {item.detail}")
            hint = " · ".join(
                f"{system}: {INSTALL_COMMANDS.get(system, '{}').format(' '.join(names))}"
                for system, names in item.packages.items()
            )
            if hint:
                lines.append(f"  install: {hint}")
        return lines


# the exact command of each way to get a package: `{}` is the names
INSTALL_COMMANDS = {
    "pip": "pip install {}",
    "debian": "apt-get install {} (Debian/Ubuntu)",
    "nvidia": "apt-get install {} (NVIDIA's CUDA apt repository: "
    "https://developer.download.nvidia.com/compute/cuda/repos/)",
    "rocm": "apt-get install {} (AMD's ROCm apt repository: https://repo.radeon.com/rocm/apt/)",
    "lunarg": "apt-get install {} (LunarG's Vulkan SDK repository: https://vulkan.lunarg.com)",
    "brew": "brew install {}",
    "cargo": "cargo install {}",
    "forge": "dgr-forge {} (the toolkit this root pins, toolchains/cuda.lock)",
}


def _expand(entry: str) -> str | None:
    """ "$VAR/sub" -> value of VAR + "/sub"; None when VAR is unset or empty."""
    if not (m := re.match(r"^\$([A-Za-z_][A-Za-z0-9_]*)(.*)$", entry)):
        return entry
    value = os.environ.get(m.group(1))
    return value + m.group(2) if value else None


def _inside(path: str, fenced: set[tuple[int, int]]) -> bool:
    """`path`, resolved, is one of the `fenced` directories (inode, device) or beneath one."""
    here = Path(os.path.realpath(path))
    return any((i := file_identity(str(up))) and i[4:] in fenced for up in (here, *here.parents))


def _python_dir(spec: str, sites: tuple[Path, ...] = ()) -> str | None:
    """A directory an installed wheel ships binaries in. "pkg/sub/dir": found without
    importing it (the cmake wheel's import costs ~0.1 s of a no-op build), first under
    `sites` (`toolchain install`'s prefix), then in every portion of a namespace package
    here; "@scripts": this Python's; "module:ATTR": the imported module's attribute."""
    if spec == "@scripts":
        return sysconfig.get_path("scripts")
    if ":" not in spec:
        package, _, sub = spec.partition("/")
        for site in sites:
            if (site / spec).is_dir():
                return str(site / spec)
        try:
            found = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            return None
        locations = list(found.submodule_search_locations or []) if found else []
        return next((str(p) for loc in locations if (p := Path(loc) / sub).is_dir()), None)
    module, _, attr = spec.partition(":")
    try:
        value = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None
    return str(value) if value else None


# The versions this process read, by the program's path and identity (a rewritten or
# replaced program is another key), the probe's arguments and the environment: a process
# that loads a doctor again does not run an unchanged program again. No failure is kept.
_READ_VERSIONS: dict[tuple[object, ...], str] = {}


class Doctor:
    """Runs probes on demand and caches the results for one process."""

    def __init__(
        self,
        probes: Probes,
        path_env: str | None = None,
        fenced: tuple[Path, ...] = (),
        sites: tuple[Path, ...] = (),
        pinned: bool = False,
    ) -> None:
        self.probes = probes
        self.sites = sites  # wheel directories searched before this Python's own
        self.pinned = pinned  # the root pins a toolkit: `toolchain install` is a way to it
        path_env = os.environ.get("PATH", "") if path_env is None else path_env
        # a relative PATH entry is the working directory: the checkout
        self.path_env = os.pathsep.join(p for p in path_env.split(os.pathsep) if os.path.isabs(p))
        # never searched for a program: the forge root, workspace, checkout (as given by
        # the caller and by the CI's own variables)
        places = list(fenced)
        places += [Path(os.environ[v]) for v in ("GITHUB_WORKSPACE", "CI_PROJECT_DIR")
                   if os.environ.get(v)]  # fmt: skip
        self._fenced = {i[4:] for p in places if (i := file_identity(str(p)))}
        self._results: dict[str, ProbeResult] = {}
        self._versions: dict[str, str | None] = {}

    def _probe(self, kind: str, name: str) -> ProbeResult:  # once per process
        if (key := f"{kind}:{name}") not in self._results:
            probe = (self.probes.tools if kind == "tool" else self.probes.libraries).get(name)
            if probe is None:
                raise BadInput(
                    f"unknown {kind} probe {name!r}",
                    hint=f"add [{kind}s.{name}] to toolchains/probes.toml or fix the recipe",
                    details={"probe": name},
                )
            # the package names; {cuda_series} becomes nvcc's "13-0" when nvcc is found
            series = None
            templated = any("{cuda_series}" in n for ns in probe.packages.values() for n in ns)
            if templated and name != "nvcc" and "nvcc" in self.probes.tools:
                version = self.version("nvcc")
                series = "-".join(version.split(".")[:2]) if version else None
            packages = {  # "forge" without toolchains/cuda.lock: nothing to install from
                system: [n.replace("{cuda_series}", series or "<cuda-version>") for n in names]
                for system, names in probe.packages.items()
                if system != "forge" or self.pinned
            }
            result = partial(ProbeResult, name, kind, probe.description or name, packages=packages)
            if isinstance(probe, LibraryProbe):
                self._results[key] = self._probe_library(probe, result)
            else:
                self._results[key] = self._probe_tool(probe, result)
        return self._results[key]

    def tool(self, name: str) -> ProbeResult:
        return self._probe("tool", name)

    def library(self, name: str) -> ProbeResult:
        return self._probe("library", name)

    def _probe_tool(self, probe: ToolProbe, result: Callable[..., ProbeResult]) -> ProbeResult:
        if probe.host_os and host_os() not in probe.host_os:
            return result(False, None, f"only on {', '.join(probe.host_os)}")
        dirs: list[str] = []
        for spec in probe.python_dirs:  # lazily: the first wheel directory that has it wins
            if (wheel := _python_dir(spec, self.sites)) and not _inside(wheel, self._fenced):
                dirs.append(wheel)
                for exe in probe.executables:
                    if found := shutil.which(exe, path=wheel):
                        return result(True, found, found)
        # absolute, outside the checkout, else left out
        hints = [d for h in probe.hints if (d := _expand(h)) and os.path.isabs(d)]
        hints = [d for d in hints if not _inside(d, self._fenced)]
        dirs += hints
        for exe in probe.executables:
            found = shutil.which(exe, path=os.pathsep.join(hints)) if hints else None
            if found is None and probe.path_search:
                found = shutil.which(exe, path=self.path_env)
            if found:
                return result(True, found, found)
        if probe.find_command:
            finder = shutil.which(probe.find_command[0], path=self.path_env)
            proc = run_probe([finder, *probe.find_command[1:]]) if finder else None
            path = proc.stdout.strip() if proc is not None and proc.returncode == 0 else ""
            if path and Path(path).exists():
                return result(True, path, path)
        where = " or ".join(probe.executables) or " ".join(probe.find_command)
        looked = " and ".join(filter(None, [", ".join(dirs), "PATH" if probe.path_search else ""]))
        return result(False, None, f"{where} not found in {looked}")

    def version(self, name: str) -> str | None:  # runs it once
        if name in self._versions:
            return self._versions[name]
        result = self.tool(name)
        probe = self.probes.tools[name]
        version: str | None = None
        if result.found and result.path and probe.version_regex:
            ident = file_identity(result.path)
            args = (*probe.version_args, probe.version_regex)
            key = (result.path, ident, args, tuple(sorted(os.environ.items())))
            if (version := _READ_VERSIONS.get(key)) is None:
                if (proc := run_probe([result.path, *probe.version_args], timeout=30)) is not None:
                    m = re.search(probe.version_regex, proc.stdout + proc.stderr, re.MULTILINE)
                    version = m.group(1) if m else None
                if version is not None and ident is not None:
                    _READ_VERSIONS[key] = version
        self._versions[name] = version
        result.version = version
        return version

    def _probe_library(
        self, probe: LibraryProbe, result: Callable[..., ProbeResult]
    ) -> ProbeResult:
        found: list[Path] = []
        for entry in probe.roots:
            if entry.startswith("tool:"):
                if (tool := self.tool(entry[5:])).found and tool.path:
                    found.append(Path(tool.path).resolve().parent.parent)
            elif entry.startswith("python:"):
                if wheel := _python_dir(entry[7:], self.sites):
                    found.append(Path(wheel))
            elif expanded := _expand(entry):
                found.append(Path(expanded))
        # a root inside the checkout (a $CUDA_PATH linked into it) is never searched
        roots = [r for r in dict.fromkeys(found) if not _inside(str(r), self._fenced)]
        for root in roots:
            dirs = [root / d for d in probe.include_dirs] if probe.headers else []
            include = next((d for d in dirs if all((d / h).is_file() for h in probe.headers)), None)
            if probe.headers and include is None:
                continue
            lib = next((path for d in probe.lib_dirs for n in probe.names
                        for path in _library_files(root / d, n)), None)  # fmt: skip
            if probe.names and lib is None:
                continue
            shown = str(lib or include)
            return result(True, shown, shown, include_dir=str(include) if include else None)
        wanted = ", ".join([*probe.headers, *(f"lib{n}" for n in probe.names)])
        looked = ", ".join(str(r) for r in roots) or "(no search roots exist)"
        return result(False, None, f"{wanted} not found under {looked}")

    def check_lane(self, recipe: Recipe) -> LaneCheck:
        host_ok = host_os() in recipe.lane.host_os
        req = recipe.requires  # probed only on a host the lane builds on
        probed = [*map(self.tool, req.tools), *map(self.library, req.libraries)] if host_ok else []
        missing = [r for r in probed if not r.found]
        return LaneCheck(
            lane=recipe.name,
            backend=recipe.lane.backend,
            buildable=host_ok and not missing,
            missing=missing,
            host_os_ok=host_ok,
            host_os=recipe.lane.host_os,
        )

    def launcher(self) -> ProbeResult | None:
        """ccache, else sccache: the compiler launcher builds use."""
        probed = (self.tool(n) for n in ("ccache", "sccache") if n in self.probes.tools)
        return next((result for result in probed if result.found), None)


def _library_files(directory: Path, name: str) -> list[Path]:
    candidates = [*(directory / f"lib{name}{s}" for s in _LIB_SUFFIXES), directory / f"{name}.lib"]
    if not (found := [c for c in candidates if c.exists()]):
        # a wheel ships only the versioned file (libcudart.so.13): the lane makes the
        # unversioned link in its own build directory (host/cudakit)
        found = sorted(directory.glob(f"lib{glob.escape(name)}.so.[0-9]*"))[:1]
    return found
