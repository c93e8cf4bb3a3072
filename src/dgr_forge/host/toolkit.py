"""A pinned CUDA toolkit (docs/build-and-reports.md, "A pinned toolkit"):
`toolchains/cuda.lock` and what `toolchain install cuda` installs from it, by hash, into a
prefix outside the root named by the lock's digest.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import Struct

from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.fsutil import read_json, read_regular, sha256_bytes, write_json
from dgr_forge.core.proc import capture
from dgr_forge.core.structs import Form, d
from dgr_forge.core.tominput import Checker, Record, Version1, about, decode, fail

LOCK_NAME = "cuda.lock"
MARKER = "dgr-toolchain.json"
MAX_WHEELS = 64
MAX_LOCK_BYTES = 1 << 20
PIP_TIMEOUT = 3600.0  # the whole toolkit is ~1.1 GB from an index
# a wheel from the index, by its project name: never a URL, a path or a direct reference
_PROJECT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")
_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+){0,7}(?:(?:a|b|rc|\.post|\.dev)[0-9]+)*")
_HEX64 = re.compile(r"[0-9a-f]{64}")


class _Wheel(Record, frozen=True):
    """One wheel of the toolkit, as the index serves it."""

    name: Annotated[str, about("the project's name on the index (`nvidia-cuda-nvcc`)")]
    version: Annotated[str, about("its exact version (`13.0.88`)")]
    sha256: Annotated[str, about("the wheel file's sha256 (one entry per platform's file)")]


class Lock(Record, frozen=True):
    """`toolchains/cuda.lock`: the CUDA toolkit a root pins, wheel by wheel."""

    LOADED = ("path", "sha256")
    schema: Version1
    toolkit: Annotated[str, about("what it installs: `cuda`")]
    version: Annotated[str, about("the toolkit release (`cuda-toolkit`'s version)")]
    wheel: Annotated[tuple[_Wheel, ...], about("every wheel, by name, version and sha256")]
    path: Path = msgspec.field(default_factory=Path)
    sha256: str = ""  # of the file's bytes: the prefix's name and the report's identity

    @property
    def wheels(self) -> tuple[tuple[str, str, str], ...]:
        """(name, version, sha256) of each wheel, the name as the index normalizes it."""
        return tuple((w.name.lower().replace("_", "-"), w.version, w.sha256) for w in self.wheel)

    def versions(self) -> dict[str, str]:
        return {n: v for n, v, _ in self.wheels}


class Wheel(Struct, frozen=True):
    name: Annotated[str, d("the wheel's project name on the index")]
    version: Annotated[str, d("its exact version")]


class InstallResult(Form, kw_only=True, forbid_unknown_fields=True):
    """`toolchain install cuda`: the toolkit the root's lock pins, installed or found."""

    title = "toolchain install cuda"

    toolkit: Annotated[str, d("the toolkit: `cuda`")]
    lock: Annotated[str, d("the lock file, relative to the forge root")]
    lock_sha256: Annotated[str, d("the lock file's sha256: the toolkit's identity")]
    version: Annotated[str, d("the toolkit release the lock names")]
    prefix: Annotated[str, d("where it is installed (outside the root)")]
    installed: Annotated[bool, d("false: it was already there (a no-op)")]
    wheels: Annotated[list[Wheel], d("every wheel installed, by name and version")]


def load_lock(path: Path, shown: str, root: Path | None) -> Lock:
    """A wheel named by URL or path, a loose version, a bad hash: exit 2."""
    raw, data = Checker(shown).load(
        path, what="toolkit lock", hint="restore toolchains/cuda.lock from the repository",
        root=root,
    )  # fmt: skip
    lock = decode(shown, data, Lock, path=path, sha256=sha256_bytes(raw))
    if lock.toolkit != "cuda":
        raise fail(shown, "toolkit", f"{lock.toolkit[:40]!r} is not a toolkit the forge installs",
                   'toolkit = "cuda"')  # fmt: skip
    if not lock.wheel or len(lock.wheel) > MAX_WHEELS:
        raise fail(shown, "wheel", f"lists {len(lock.wheel)} wheels (1 to {MAX_WHEELS})",
                   "list every wheel of the toolkit once per platform file")  # fmt: skip
    for i, w in enumerate(lock.wheel):
        key = f"wheel[{i}]"
        if not _PROJECT.fullmatch(w.name):
            raise fail(
                shown,
                f"{key}.name",
                f"{w.name[:80]!r} is not a project name on the index (a lock never names "
                "a URL, a path or a file)",
                'name the wheel\'s project, e.g. name = "nvidia-cuda-nvcc"',
            )
        if not _VERSION.fullmatch(w.version):
            raise fail(shown, f"{key}.version", f"{w.version[:40]!r} is not an exact version",
                       'version = "13.0.88"')  # fmt: skip
        if not _HEX64.fullmatch(w.sha256):
            raise fail(shown, f"{key}.sha256", "is not 64 lowercase hex digits",
                       "the sha256 of the wheel file, as the index lists it")  # fmt: skip
    versions: dict[str, str] = {}
    for name, version, _ in lock.wheels:
        if versions.setdefault(name, version) != version:
            raise fail(shown, "wheel", f"{name} is listed at {versions[name]} and {version}",
                       "one version per wheel (one entry per platform's file)")  # fmt: skip
    return lock


def prefix_for(lock_sha256: str) -> Path:
    if not (home := os.environ.get("DGR_TOOLCHAINS_DIR")):
        data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        home = str(Path(data) / "dgr-forge" / "toolchains")
    return Path(home).absolute() / f"cuda-{lock_sha256[:16]}"


def installed_site(lock_path: Path) -> Path | None:
    """The site directory of the lock's installed prefix (`doctor` searches it first), or None."""
    try:  # none, or not a regular file of sane size: `toolchain install` says what is wrong
        raw = read_regular(lock_path, what="toolkit lock", hint="", limit=MAX_LOCK_BYTES)
    except BadInput:
        return None
    prefix = prefix_for(sha256_bytes(raw))
    return prefix / "site" if (prefix / MARKER).is_file() else None


def identity(lock_path: Path, nvcc: str | None) -> dict[str, object] | None:
    """The report's toolchain identity: the lock's digest and versions, when the lane's
    nvcc is the one installed from that lock."""
    site = installed_site(lock_path)
    if site is None or nvcc is None or not Path(nvcc).absolute().is_relative_to(site):
        return None
    if not isinstance(marker := read_json(site.parent / MARKER), dict):
        return None
    return {k: marker.get(k) for k in ("toolkit", "version", "lock_sha256", "wheels")}


def _refuse_inside(prefix: Path, fenced: tuple[Path, ...]) -> None:
    here = prefix.resolve()
    for place in fenced:
        if here.is_relative_to(place.resolve()):
            raise BadInput(
                f"the toolchains directory {prefix} lies inside {place}: a toolkit is never "
                "installed into the root or the workspace",
                hint="set DGR_TOOLCHAINS_DIR to a directory outside the forge root",
                details={"file": str(prefix)},
            )


def install(
    lock: Lock,
    shown: str,
    fenced: tuple[Path, ...],
    *,
    offline: bool = False,
    wheelhouse: Path | None = None,
) -> InstallResult:
    """A no-op when installed; exit 1 when pip refuses (a hash mismatch), nothing installed."""
    prefix = prefix_for(lock.sha256)
    _refuse_inside(prefix.parent, fenced)
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise BadInput(
            f"--wheelhouse {wheelhouse}: not a directory",
            hint="name the directory holding the lock's wheel files",
            details={"argument": "--wheelhouse"},
        )
    result = InstallResult(
        toolkit="cuda",
        lock=shown,
        lock_sha256=lock.sha256,
        version=lock.version,
        prefix=str(prefix),
        installed=False,
        wheels=[Wheel(name=n, version=v) for n, v in lock.versions().items()],
    )
    prefix.parent.mkdir(parents=True, exist_ok=True)
    _refuse_inside(prefix.parent, fenced)  # as created: a link planted meanwhile
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    held = os.open(prefix.parent / ".lock", flags, 0o600)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # one install of a prefix at a time
        if (prefix / MARKER).is_file():
            return result
        scratch = prefix.parent / f".{prefix.name}.tmp-{os.getpid()}"
        for stale in prefix.parent.glob(f".{prefix.name}.tmp-*"):  # scratch's name too
            shutil.rmtree(stale, ignore_errors=True)  # a killed install's (we hold the lock)
        scratch.mkdir()
        try:
            _pip(lock, scratch, offline=offline, wheelhouse=wheelhouse)
            marker = {k: getattr(result, k) for k in ("toolkit", "version", "lock_sha256")}
            write_json(scratch / MARKER, {**marker, "wheels": lock.versions()})
            shutil.rmtree(prefix, ignore_errors=True)  # no marker: not an install
            os.replace(scratch, prefix)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    finally:
        os.close(held)
    result.installed = True
    return result


def _pip(lock: Lock, scratch: Path, *, offline: bool, wheelhouse: Path | None) -> None:
    hashes: dict[tuple[str, str], list[str]] = {}
    for name, version, sha in lock.wheels:
        hashes.setdefault((name, version), []).append(sha)
    requirements = scratch / "requirements.txt"
    requirements.write_text(
        "".join(
            f"{name}=={version} " + " ".join(f"--hash=sha256:{h}" for h in shas) + "\n"
            for (name, version), shas in hashes.items()
        )
    )
    cmd = [sys.executable, "-m", "pip", "install", "--require-hashes", "--no-deps",
           "--only-binary=:all:", "--no-compile", "--no-input", "--disable-pip-version-check",
           "--target", str(scratch / "site"), "-r", str(requirements)]  # fmt: skip
    if offline or wheelhouse is not None:
        cmd.append("--no-index")
    if wheelhouse is not None:
        cmd += ["--find-links", str(wheelhouse.absolute())]
    # the lock is the whole truth: no constraints file of the host's pip configuration
    env = {**os.environ, "PIP_CONSTRAINT": "", "PIP_REQUIRE_VIRTUALENV": "0"}
    if (proc := capture(cmd, env=env, timeout=PIP_TIMEOUT)).returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        mismatch = any("DO NOT MATCH THE HASHES" in ln for ln in lines)
        raise OperationFailed(
            ("a wheel does not match the lock's sha256; nothing was installed"
             if mismatch else "pip could not install the lock's wheels; nothing was installed")
            + "\n" + "\n".join(lines[-12:]),
            hint="check toolchains/cuda.lock against the index (or --wheelhouse), or fetch "
            "the wheels again",
        )  # fmt: skip
