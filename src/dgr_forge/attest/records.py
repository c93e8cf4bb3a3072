"""What one lane build produced: the hand-off from `build` (which fills a `LaneBuild`) to
the signed report (`provenance.statement`), each side testable without the other; and where
the signing key comes from: the one lookup, without the cryptography import (`lanes.signing`
fingerprints what it names cheaply for a no-op build). A set but empty value (what CI
passes when a secret is missing) is exit 2, never a fallback."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from msgspec import Struct, field

from dgr_forge.core.errors import BadInput
from dgr_forge.upstream.surface import Surface


class Artifact(Struct, frozen=True):
    name: str  # CMake target name
    kind: str  # File API type: EXECUTABLE, SHARED_LIBRARY, STATIC_LIBRARY, MODULE_LIBRARY
    path: Path  # absolute path on disk (the real file, never a symlink)
    sha256: str
    aliases: tuple[str, ...] = ()  # symlink names pointing at it (libfoo.so -> libfoo.so.1)


class Tool(Struct, frozen=True):
    name: str  # cmake, ninja, c-compiler, cxx-compiler, nvcc, ...
    path: str
    version: str
    sha256: str | None = None  # as stamped when configure resolved it (else at report time)


class PatchInput(Struct, frozen=True):
    file: str  # patches/llama.cpp/0001-....patch (relative to the forge root)
    sha256: str


class WorkerSource(Struct, frozen=True):
    location: str  # a path, or a git URL
    commit: str | None  # exact commit when the worker is a git checkout
    dirty: bool  # uncommitted changes at build time


class LinkInput(Struct, frozen=True):
    """A file the build linked against that is no artifact: the CUDA driver link stub."""

    path: Path  # absolute, in the lane's build directory
    sha256: str
    note: str  # "link stub, not shipped"


class LaneBuild(Struct):
    lane: str
    recipe_file: str  # relative to the forge root
    recipe_sha256: str
    manifest_file: str
    manifest_sha256: str
    upstream_name: str
    upstream_url: str
    upstream_commit: str
    upstream_tree: str
    patches: list[PatchInput]
    series_digest: str  # sha256 over the ordered (file, sha256) list
    result_tree: str  # git tree of the patched upstream
    worker: WorkerSource | None
    tools: list[Tool]
    cmake_args: list[str]
    compiler_launcher: str | None
    source_date_epoch: int
    build_dir: Path
    log_file: Path
    cmake_cache: Path
    started_on: datetime
    finished_on: datetime
    artifacts: list[Artifact] = field(default_factory=list)
    toolchain_file: str | None = None  # relative to the forge root
    toolchain_sha256: str | None = None
    cache: dict[str, Any] | None = None  # cache.select.Cache: tool, version, backend, mode
    # absolute machine paths -> named placeholders (tools, an outside worker), so the
    # statement never carries a path of the building machine
    placeholders: dict[str, str] = field(default_factory=dict)
    reproducible: bool = True  # False: the lane cannot promise identical bytes elsewhere
    # the upstream's own build number at the pin and the commit string the binaries carry
    upstream_build_number: int | None = None
    upstream_build_commit: str | None = None
    # what the worker used of upstream (lanes.boundary); None: no worker was built
    surface: Surface | None = None
    link_inputs: list[LinkInput] = field(default_factory=list)  # never subjects
    # a toolkit installed from a lock (`toolchain install`): its lock digest and versions
    toolkit: dict[str, Any] | None = None


SIGNING_KEY_ENV = "DGR_SIGNING_KEY"
PEM_MARKER = "-----BEGIN"


def default_key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "dgr-forge" / "signing-key.pem"


class KeySource(Struct, frozen=True):
    kind: Literal["option", "env-pem", "env-path", "default"]
    value: str  # the option or variable as given (a path, or PEM text for env-pem)
    path: Path | None  # the key file (None for inline PEM)


def signing_key_source(key: str | None) -> KeySource:
    if key is not None:
        if not key.strip():
            raise BadInput("--key: empty", hint="pass the path of a private key (PEM)")
        return KeySource("option", key, Path(key).expanduser())
    if SIGNING_KEY_ENV in os.environ:
        value = os.environ[SIGNING_KEY_ENV]
        if not value.strip():
            raise BadInput(
                f"{SIGNING_KEY_ENV} is set but empty (a CI secret that is not available here?)",
                hint=f"set {SIGNING_KEY_ENV} to the key's PEM text or path, unset it to use "
                "your default key, or pass --no-sign to build without a signed report",
                details={"variable": SIGNING_KEY_ENV},
            )
        if PEM_MARKER in value:
            return KeySource("env-pem", value, None)
        return KeySource("env-path", value, Path(value).expanduser())
    path = default_key_path()
    return KeySource("default", str(path), path)
