"""Re-exports `support.build` (a root with the real product files and a one-patch series,
the test shard worker, CUDA helpers)."""

from __future__ import annotations

from support.build import (
    PATCH_FILE,
    PATCHED_LLAMA,
    TEST_CUDA_RECIPE,
    WORKER_FILES,
    copy_product,
    make_patched_root,
    make_worker,
    nvcc_path,
    path_without,
)

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
