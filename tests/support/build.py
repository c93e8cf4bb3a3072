"""Fixtures for the build/doctor/presets tests: a forge root with the real recipes,
toolchains and CMake modules, a one-patch series that changes upstream behaviour, and a
small C++ shard worker that includes DgrUpstream/DgrBuildInfo and links llama."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

from .git import Upstream
from .roots import CANONICAL, UPSTREAM_AUTHOR, Edit, copy_product, make_root

__all__ = [
    "PATCHED_LLAMA",
    "PATCH_FILE",
    "TEST_CUDA_RECIPE",
    "WORKER_FILES",
    "copy_product",
    "make_patched_root",
    "make_worker",
    "nvcc_path",
    "path_without",
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
