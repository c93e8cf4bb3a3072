"""Fixtures for the build/doctor/presets tests: a forge root with the real recipes,
toolchains and CMake modules, a one-patch series that changes upstream behaviour, and a
small C++ shard worker that includes DgrUpstream/DgrBuildInfo and links llama."""

from __future__ import annotations

import hashlib
import os
import shutil
import textwrap
from pathlib import Path

from forgetest import Upstream, make_forge_root, manifest_text, sh_git

REPO = Path(__file__).resolve().parent.parent
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


def copy_product(root: Path) -> None:
    """The real recipes/, toolchains/ and cmake/ of this repository into a test root."""
    for name in ("recipes", "toolchains", "cmake"):
        shutil.rmtree(root / name, ignore_errors=True)
        shutil.copytree(REPO / name, root / name)


def make_patched_root(path: Path, upstream: Upstream) -> Path:
    """A forge root pinning upstream's head with one real patch (llama_layer_owner)."""
    root = make_forge_root(path, upstream)
    copy_product(root)
    pin = upstream.head
    sh_git(upstream.path, "checkout", "-q", "-b", "dgr-patch-source")
    patched = upstream.commit({"src/llama.cpp": PATCHED_LLAMA}, "llama: round-robin layer owner")
    patch = sh_git(
        upstream.path,
        "format-patch",
        "--zero-commit",
        "--no-signature",
        "--full-index",
        "--no-numbered",
        "--keep-subject",
        "--no-stat",
        "--stdout",
        "-1",
        patched,
    )
    result_tree = upstream.tree(patched)
    sh_git(upstream.path, "checkout", "-q", "main")
    sh_git(upstream.path, "branch", "-q", "-D", "dgr-patch-source")
    upstream.commits.pop()
    data = (patch + "\n").encode()
    (root / "patches" / "llama.cpp" / PATCH_FILE).write_bytes(data)
    series = [{"file": PATCH_FILE, "sha256": hashlib.sha256(data).hexdigest(), "tree": result_tree}]
    (root / "manifests" / "llama.cpp.toml").write_text(
        manifest_text(upstream.url, pin, upstream.tree(pin), series, result_tree)
    )
    return root


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
