"""What `dgr-forge demo` writes: the demo upstream's history, its patch series and a worker.

The upstream is a one-file CMake C++ library shaped like llama.cpp (its option names, its
`llama` target), so the real recipes, toolchain files and CMake modules build it. Its
history is chosen so the tour shows each outcome of a rebase: after the pinned commit,
upstream rewrites the lines patch 0001 changes (a conflict) and makes exactly the change
of patch 0002 (the patch is dropped, upstreamed); patch 0003 replays unchanged.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dgr_forge.demo import programs

# The upstream's history, oldest first; its branch is llama.cpp's (`master`).
BRANCH = "master"
UPSTREAM_DIR = "upstream"
WORKER_DIR = "worker"
KEYS_DIR = "keys"
KEY_FILE = "demo-signing-key.pem"
# the demo key is also the certification's trust anchor (`certifications/trusted-keys/`)
TRUSTED_KEY = "certifications/trusted-keys/demo.pub"
# the tiny model `certify` measures, and where it is served from (file://, inside DIR)
MODEL = "demo-tiny"
MODEL_PARTS = 2
MODEL_SOURCE_DIR = "model-source"

CMAKELISTS = (
    """\
cmake_minimum_required(VERSION 3.14)
project(llama CXX)

# llama.cpp's own switch names: the forge's recipes pass them
option(GGML_NATIVE "optimize for the build host" ON)
option(LLAMA_CURL "use libcurl" OFF)
option(LLAMA_BUILD_TESTS "build tests" OFF)
option(LLAMA_BUILD_EXAMPLES "build examples" OFF)
option(LLAMA_BUILD_TOOLS "build tools" ON)
option(LLAMA_BUILD_UI "build the server's web UI" ON)
option(LLAMA_USE_PREBUILT_UI "download the prebuilt web UI" ON)

add_library(llama src/llama.cpp src/ggml-ops.cpp)
target_include_directories(llama PUBLIC include)
"""
    + programs.CMAKE
)

HEADER = """\
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// the worker that owns `layer` when `n_workers` share a model
int llama_layer_owner(int layer, int n_workers);

int llama_n_layers(void);

const char * llama_version(void);

#ifdef __cplusplus
}
#endif
"""

OWNER_PIN = """\
int llama_layer_owner(int layer, int n_workers) {
    (void) layer;
    (void) n_workers;
    return 0;
}
"""

OWNER_VALIDATED = """\
int llama_layer_owner(int layer, int n_workers) {
    if (layer < 0 || n_workers < 1) {
        return -1;
    }
    return 0;
}
"""

OWNER_ROUND_ROBIN = """\
int llama_layer_owner(int layer, int n_workers) {
    return n_workers > 0 ? layer % n_workers : 0;
}
"""

LIBRARY_TAIL = """
int llama_n_layers(void) {
    return 32;
}

const char * llama_version(void) {
    return "demo-1";
}
"""


def library(owner: str) -> str:
    return '#include "llama.h"\n\n' + owner + LIBRARY_TAIL


MAX_WORKERS = HEADER.replace(
    "#pragma once\n\n", "#pragma once\n\n#define LLAMA_MAX_WORKERS 64\n\n", 1
)

README = "# llama (dgr-forge demo upstream)\n\nA one-file stand-in for llama.cpp.\n"
README_PIN = README + "\nLayers are owned by worker 0 until a scheduler is written.\n"
README_PATCHED = README_PIN + "\nThis tree is patched by dgr-forge (see patches/llama.cpp/).\n"


@dataclass(frozen=True)
class Commit:
    subject: str
    files: dict[str, str]


# upstream history: the pin is PIN_INDEX; later commits are what a rebase moves onto
HISTORY: tuple[Commit, ...] = (
    Commit(
        "initial import",
        {
            "CMakeLists.txt": CMAKELISTS,
            "include/llama.h": HEADER,
            "src/llama.cpp": library(OWNER_PIN),
            "README.md": README,
            **programs.FILES,
        },
    ),
    Commit("docs: say who owns a layer", {"README.md": README_PIN}),
    Commit("llama: validate the layer index", {"src/llama.cpp": library(OWNER_VALIDATED)}),
    Commit("llama: a cap on the number of workers", {"include/llama.h": MAX_WORKERS}),
)
PIN_INDEX = 1

# the forge's patch series on the pin, in order
SERIES: tuple[Commit, ...] = (
    Commit("llama: own layers round-robin", {"src/llama.cpp": library(OWNER_ROUND_ROBIN)}),
    Commit("llama: add LLAMA_MAX_WORKERS", {"include/llama.h": MAX_WORKERS}),
    Commit("README: say the tree is patched", {"README.md": README_PATCHED}),
)

WORKER_FILES = {
    "CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.18)
project(demo_shard_worker CXX)
include(DgrUpstream)     # the patched upstream (dgr-forge build passes its path)
include(DgrBuildInfo)
add_executable(shard-worker src/main.cpp)
target_link_libraries(shard-worker PRIVATE llama)
dgr_build_info(shard-worker)
""",
    "src/main.cpp": """\
#include <cstdio>
#include <dgr_build_info.h>
#include "llama.h"

// LLAMA_MAX_WORKERS comes from patch 0002, round-robin ownership from patch 0001
int main() {
    std::printf("shard-worker: layer 7 of %d -> worker %d of 4 (at most %d workers)\\n",
                llama_n_layers(), llama_layer_owner(7, 4), LLAMA_MAX_WORKERS);
    std::printf("built from %s %s + %d patches, lane %s\\n", DGR_UPSTREAM_NAME,
                DGR_UPSTREAM_COMMIT, DGR_PATCH_COUNT, DGR_LANE);
    return 0;
}
""",
}

WORKER_MANIFEST = """\
# The shard worker the demo builds: a CMake project in this root (see worker/).
schema = 1

[worker]
path = "worker"
"""

GITIGNORE = f"""\
# the workspace (deleting it loses nothing)
/.dgr/
/.dgr-root.lock
# the demo upstream is its own repository; the private key never goes into git
/{UPSTREAM_DIR}/
/{KEYS_DIR}/{KEY_FILE}
# the tiny model's source: a stand-in for its download server
/{MODEL_SOURCE_DIR}/
"""

# a fixed identity and clock: the demo's commit ids are the same on every machine
IDENTITY = {
    "GIT_AUTHOR_NAME": "Upstream Dev",
    "GIT_AUTHOR_EMAIL": "dev@upstream.invalid",
    "GIT_COMMITTER_NAME": "Upstream Dev",
    "GIT_COMMITTER_EMAIL": "dev@upstream.invalid",
}
ROOT_IDENTITY = {
    "GIT_AUTHOR_NAME": "dgr-forge demo",
    "GIT_AUTHOR_EMAIL": "demo@dgr-forge.invalid",
    "GIT_COMMITTER_NAME": "dgr-forge demo",
    "GIT_COMMITTER_EMAIL": "demo@dgr-forge.invalid",
}


def date(n: int) -> str:
    return f"2025-03-01T12:{n // 60:02d}:{n % 60:02d}Z"


# The demo's tiny model: a real split GGUF served from a `file://` source inside DIR. Two
# parts, each a GGUF v3 file with the `split.*` keys llama.cpp's gguf-split writes and one
# float32 tensor, hashed into a model manifest by the forge's own writer, so `certify
# --model demo-tiny` provisions, verifies and binds it as it would any model.
_U16, _I32, _STRING = 2, 5, 8  # GGUF value types
_F32 = 0  # the tensor type
_ALIGN = 32  # general.alignment's default
_ELEMS = 256


def _str(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _part(no: int, count: int) -> bytes:
    kvs = [
        _str("general.architecture") + struct.pack("<I", _STRING) + _str("llama"),
        _str("split.no") + struct.pack("<IH", _U16, no),
        _str("split.count") + struct.pack("<IH", _U16, count),
        _str("split.tensors.count") + struct.pack("<Ii", _I32, count),
    ]
    tensor = _str(f"blk.{no}.weight") + struct.pack("<IQIQ", 1, _ELEMS, _F32, 0)
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs)) + b"".join(kvs) + tensor
    head += b"\0" * (-len(head) % _ALIGN)
    data = b"".join(struct.pack("<f", (no * _ELEMS + i) / 1024.0) for i in range(_ELEMS))
    return head + data


def model_parts() -> dict[str, bytes]:
    """The tiny model's split parts (`demo-tiny-0000N-of-00002.gguf`) by file name."""
    n = MODEL_PARTS
    return {f"{MODEL}-{no + 1:05d}-of-{n:05d}.gguf": _part(no, n) for no in range(n)}
