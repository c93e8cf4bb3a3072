"""Fixtures for the build/doctor/presets tests: a forge root with the real recipes,
toolchains and CMake modules, a one-patch series that changes upstream behaviour, and a
small C++ shard worker that includes DgrUpstream/DgrBuildInfo and links llama.

`snapshot_lane` builds such a root once and keeps a pristine copy of it;
`LaneSnapshot.restore()` puts that copy back at the same path for each test, so a test
whose first build is only a precondition ("a lane that was built") starts from it.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .cli import Result, run_forge
from .git import Upstream, copy_upstream
from .roots import CANONICAL, UPSTREAM_AUTHOR, Edit, copy_product, make_root
from .snapshot import copy_tree, put_back

if TYPE_CHECKING:
    import pytest

__all__ = [
    "PATCHED_LLAMA",
    "PATCH_FILE",
    "TEST_CUDA_RECIPE",
    "WORKER_FILES",
    "BuiltLane",
    "LaneSnapshot",
    "add_path_worker",
    "built_snapshot",
    "copy_product",
    "forge_build",
    "keygen",
    "make_patched_root",
    "make_worker",
    "nvcc_path",
    "path_without",
    "shared_snapshot",
    "snapshot_lane",
]

PATCH_FILE = "0001-layer-owner-round-robin.patch"

WORKER_FILES = {
    "CMakeLists.txt": textwrap.dedent(
        """\
        cmake_minimum_required(VERSION 3.18)
        project(dgr_test_worker C CXX)
        include(DgrUpstream)
        include(DgrBuildInfo)
        add_executable(shard-worker src/main.cpp src/util.cpp)
        target_link_libraries(shard-worker PRIVATE llama)
        dgr_build_info(shard-worker)
        """
    ),
    "src/util.cpp": textwrap.dedent(
        """\
        #include "llama.h"
        int worker_owner(int layer) { return llama_layer_owner(layer); }
        """
    ),
    "src/main.cpp": textwrap.dedent(
        """\
        #include <cstdio>
        #include <dgr_build_info.h>
        int worker_owner(int layer);
        int main() {
            std::printf("owner(7)=%d commit=%s head=%s series=%s patches=%d lane=%s\\n",
                        worker_owner(7), DGR_UPSTREAM_COMMIT, DGR_UPSTREAM_HEAD,
                        DGR_SERIES_DIGEST, DGR_PATCH_COUNT, DGR_LANE);
            return 0;
        }
        """
    ),
}

PATCHED_LLAMA = textwrap.dedent(
    """\
    #include "llama.h"

    const char * llama_version(void) {
        return "upstream+dgr";
    }

    int llama_layer_owner(int layer) {
        return layer % 4;
    }
    """
)


def make_patched_root(path: Path, upstream: Upstream) -> Path:
    """A forge root pinning upstream's head with one real patch (llama_layer_owner)."""
    # the date upstream.commit would give its next commit: the bytes the patch always had
    tick = upstream._tick + 1
    date = f"2025-01-01T00:{tick // 60:02d}:{tick % 60:02d}Z"
    make_root(
        path,
        upstream,
        [Edit({"src/llama.cpp": PATCHED_LLAMA}, "llama: round-robin layer owner")],
        product=True,
        flags=CANONICAL,
        names=[PATCH_FILE],
        author=UPSTREAM_AUTHOR,
        date=lambda _: date,
    )
    return path


def make_worker(path: Path, files: dict[str, str] | None = None) -> Path:
    for rel, content in {**WORKER_FILES, **(files or {})}.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    return path


def add_path_worker(root: Path) -> Path:
    """The test worker at ROOT/worker, named as the root's path worker by its
    manifests/shard-worker.toml."""
    worker = make_worker(root / "worker")
    (root / "manifests" / "shard-worker.toml").write_text('schema = 1\n[worker]\npath = "worker"\n')
    return worker


# The user's own toolkits (`toolchain install`), as the forge finds them, read before the
# suite gives every test an empty home of its own (conftest): only a test that asks for
# them sees them.
USER_TOOLCHAINS = Path(
    os.environ.get("DGR_TOOLCHAINS_DIR")
    or Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    / "dgr-forge"
    / "toolchains"
)


def nvcc_path() -> str | None:
    return shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None
    )


def path_without(tool: str) -> str:
    """PATH with every directory that holds `tool` removed."""
    keep = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and not (Path(d) / tool).exists()
    ]
    return os.pathsep.join(keep)


TEST_CUDA_RECIPE = textwrap.dedent(
    """\
    # test lane: the test upstream's ggml-cuda.cu needs nvcc and cudart only (no cuBLAS)
    schema = 1
    [lane]
    backend = "CUDA"
    host_os = ["linux"]
    toolchain = "cuda"
    [cmake]
    options = { GGML_CUDA = "ON", GGML_NATIVE = "OFF", CMAKE_CUDA_ARCHITECTURES = "75-real" }
    [requires]
    tools = ["cmake", "ninja", "gcc", "g++", "nvcc"]
    libraries = ["cudart"]
    """
)


def forge_build(root: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    """`dgr-forge --root ROOT --json build --jobs 2 ARGS`: the build tests' one build."""
    return run_forge("--root", str(root), "--json", "build", "--jobs", "2", *args, env=env)


def keygen(base: Path, name: str) -> Path:
    """A fresh Ed25519 signing key at BASE/keys/NAME.pem (its public half beside it)."""
    key = base / "keys" / f"{name}.pem"
    res = run_forge("keygen", "--out", str(key))
    assert res.code == 0, res
    return key


@dataclass(frozen=True)
class BuiltLane:
    """A patched root whose cpu lane was built once (what a test gets from a snapshot)."""

    base: Path  # holds all of it: upstream/, forge/ (the root), worker/, keys/
    root: Path
    worker: Path | None  # base/worker (given as --worker), root/worker (a path worker)
    key: Path | None  # the signing key of the first build; None: it ran with --no-sign
    first: Result  # what the real first build returned
    upstream: Upstream  # base/upstream, the copy the root pins (a test may commit to it)
    build_args: tuple[str, ...]  # the first build's arguments after `build --jobs 2`

    def args(self) -> tuple[str, ...]:
        """The first build's arguments after `build --jobs 2`: the same build again."""
        return self.build_args


@dataclass(frozen=True)
class LaneSnapshot:
    built: BuiltLane
    pristine: Path  # the base right after the first build

    def restore(self) -> BuiltLane:
        """The base as the first build left it, at the same path (support.snapshot);
        whatever an earlier test wrote beside it in the snapshot's directory is removed.
        The upstream's record (its commits) is a fresh copy too: an earlier test's
        `upstream.commit` was put back with the repository."""
        put_back(self.pristine, self.built.base)
        up = self.built.upstream
        return replace(self.built, upstream=up.record_at(up.path))


def snapshot_lane(
    directory: Path,
    upstream: Upstream,
    *,
    worker: Literal["option", "path"] | None = "option",
    sign: bool = False,
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> LaneSnapshot:
    """Under the empty `directory`: a copy of `upstream`, a patched root pinning it, the
    test worker (`option`: base/worker given as --worker; `path`: root/worker, the root's
    path worker; None: none) and a signing key made by `keygen` (with `sign`, else
    --no-sign), built once with `forge_build`, `options` (e.g. `--cache off`) and `env`; and a
    pristine copy of all of it. The caller asserts what it needs of `built.first` (a failed
    build is kept as it is)."""
    base = directory / "lane"
    up = copy_upstream(upstream, base / "upstream")
    root = make_patched_root(base / "forge", up)
    worker_dir: Path | None = None
    if worker == "option":
        worker_dir = make_worker(base / "worker")
    elif worker == "path":
        worker_dir = add_path_worker(root)
    key = keygen(base, "a") if sign else None
    args = (
        *(("--worker", str(worker_dir)) if worker == "option" else ()),
        *(("--key", str(key)) if key else ("--no-sign",)),
        *options,
    )
    first = forge_build(root, *args, env=env)
    built = BuiltLane(base, root, worker_dir, key, first, up, args)
    pristine = directory / "pristine"
    copy_tree(base, pristine)
    return LaneSnapshot(built, pristine)


def built_snapshot(
    directory: Path,
    upstream: Upstream,
    *,
    worker: Literal["option", "path"] | None = "option",
    sign: bool = False,
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> LaneSnapshot:
    """`snapshot_lane` whose first build must have succeeded: a module's precondition."""
    snap = snapshot_lane(directory, upstream, worker=worker, sign=sign, options=options, env=env)
    assert snap.built.first.code == 0, snap.built.first
    return snap


_SHARED: dict[tuple[object, ...], LaneSnapshot] = {}


def shared_snapshot(
    factory: pytest.TempPathFactory,
    upstream: Upstream,
    *,
    worker: Literal["option", "path"] | None = "option",
    sign: bool = False,
    options: tuple[str, ...] = (),
) -> LaneSnapshot:
    """`built_snapshot` of `upstream` made once per test process for each variant and
    handed to every module that asks for the same one (files in one xdist scope,
    support.schedule): the same first build, ~0.9 CPU-s of CMake, compilers and git, once."""
    key = (str(upstream.path), worker, sign, options)
    if key not in _SHARED:
        directory = factory.mktemp(f"shared-lane-{worker}-{'signed' if sign else 'unsigned'}")
        _SHARED[key] = built_snapshot(
            directory, upstream, worker=worker, sign=sign, options=options
        )
    return _SHARED[key]
