"""The test upstream's private parts, as llama.cpp has them: a private header in `src/`
(an include directory of the `llama` target, PRIVATE, as llama.cpp's own
`target_include_directories(llama PRIVATE .)` in src/CMakeLists.txt), an internal C++
function defined there, and two private headers with hostile names (a space, a newline).
The worker's boundary tests build workers against it (tests/test_boundary.py)."""

from __future__ import annotations

import textwrap

from .git import BASE_FILES, Upstream

PRIVATE_HEADER = "src/llama-model.h"
SPACED_HEADER = "src/llama model.h"
NEWLINE_HEADER = "src/llama\nmodel.h"

PRIVATE_FILES = {
    "CMakeLists.txt": BASE_FILES["CMakeLists.txt"].replace(
        "add_library(llama src/llama.cpp)\ntarget_include_directories(llama PUBLIC include)",
        "add_library(llama src/llama.cpp src/llama-model.cpp)\n"
        "target_include_directories(llama PRIVATE src)\n"
        "target_include_directories(llama PUBLIC include)",
    ),
    PRIVATE_HEADER: "#pragma once\nnamespace llm { int model_internal(int n); }\n",
    "src/llama-model.cpp": textwrap.dedent(
        """\
        #include "llama-model.h"
        namespace llm { int model_internal(int n) { return n * 2; } }
        """
    ),
    SPACED_HEADER: "#pragma once\nint llama_spaced_internal(void);\n",
    NEWLINE_HEADER: "#pragma once\nint llama_newline_internal(void);\n",
}


def add_private_parts(up: Upstream) -> str:
    """Commit the private header and the internal function to `up`; its new head."""
    assert "add_library(llama src/llama.cpp src/llama-model.cpp)" in PRIVATE_FILES["CMakeLists.txt"]
    return up.commit(dict(PRIVATE_FILES), "llama: a private model header and an internal function")
