"""A test upstream that builds like llama.cpp where it matters to reproducibility (issue 20).

On top of the plain test upstream (`git.make_upstream`), one more upstream commit makes it:

* auto-detect a compiler cache, as ggml's `GGML_CCACHE` (default ON) does: when no
  launcher is set, `find_program(ccache)` and `RULE_LAUNCH_COMPILE`, so a build whose
  PATH has ccache compiles through it unless told `GGML_CCACHE=OFF`;
* compile in `git rev-parse --short HEAD` and `git rev-list --count HEAD` at configure
  time into a generated `build-info.cpp` in the build tree, as llama.cpp's
  `cmake/build-info.cmake` + `common/build-info.cpp.in` do;
* compile in `__FILE__` (ggml's asserts), from a source and through a header;
* build shared libraries by default (`BUILD_SHARED_LIBS`), ggml split as ggml's own is
  (`ggml-base`, `ggml-cpu`, and `ggml` linking both): `llama` loads three libraries at
  run time (issue 29);
* take `LLAMA_BUILD_NUMBER` / `LLAMA_BUILD_COMMIT` as given when defined (`if (NOT
  DEFINED LLAMA_BUILD_NUMBER)`), else from git, and version the library
  `libllama.so.0.0.<number>`, as llama.cpp's top CMakeLists.txt does;
* declare llama.cpp's current option set with its deprecation shims: `LLAMA_CURL` only
  as `llama_option_depr(WARNING LLAMA_CURL)` (ignored, no replacement), `LLAMA_CUBLAS`
  a fatal alias of `GGML_CUDA`, `LLAMA_CUDA` a warning one;
* provision the server's web UI at build time as llama.cpp's `llama-ui-assets` does (an
  ALL target: npm with `LLAMA_BUILD_UI`, a download with `LLAMA_USE_PREBUILT_UI`, both
  default ON), here a failed build unless both are OFF: a recipe that leaves them on
  would use the network while building;
* install what llama.cpp installs (`install(TARGETS llama LIBRARY)`, ggml and its CPU
  backend, the tools `RUNTIME`: its CMakeLists.txt:254, ggml/CMakeLists.txt:346-347,
  ggml/src/CMakeLists.txt:280, tools/*/CMakeLists.txt), and build a host helper it never
  installs, as tools/ui/CMakeLists.txt:64 builds `llama-ui-embed` (no install() there);
* a history of `HISTORY` upstream commits before that commit (one `git fast-import`, so
  cheap), so a depth-1 workspace's count and the upstream's differ by a hundred and more.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

from .git import BASE_FILES, GIT_ENV, Upstream, make_upstream, sh_git

# upstream commits before the llama.cpp-like one: more than one deepening step fetches
HISTORY = 120

CCACHE_DETECT = textwrap.dedent(
    """\
    # as ggml/src/CMakeLists.txt: a compiler cache whenever one is found and none is set
    option(GGML_CCACHE "ggml: use ccache if available" ON)
    if (GGML_CCACHE AND NOT CMAKE_C_COMPILER_LAUNCHER AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
        find_program(GGML_CCACHE_FOUND ccache)
        if (GGML_CCACHE_FOUND)
            set_property(GLOBAL PROPERTY RULE_LAUNCH_COMPILE "${GGML_CCACHE_FOUND}")
            message(STATUS "ccache found, compilation results will be cached")
        endif()
    endif()
    """
)

# our own deprecation shim with the shape of llama.cpp's: the old name is read (so CMake
# never calls it unused), a warning or a fatal error when it is set, and the new name
# switched on when there is one
DEPRECATION = textwrap.dedent(
    """\
    # the rest of llama.cpp's current switches the shipped recipes or its CI pass
    option(LLAMA_BUILD_COMMON "build the common library" ON)
    option(LLAMA_BUILD_SERVER "build the server" ON)
    option(LLAMA_BUILD_UI "build the embedded Web UI for server" ON)
    option(LLAMA_USE_PREBUILT_UI "use the prebuilt UI from a download" ON)
    option(GGML_METAL_EMBED_LIBRARY "embed the Metal library" OFF)
    option(GGML_RPC "use RPC" OFF)

    function (llama_option_depr TYPE OLD)
        if (${OLD})
            set(NEW "${ARGV2}")
            if (NEW)
                message(${TYPE} "${OLD} is deprecated, use ${NEW} instead")
                set(${NEW} ON PARENT_SCOPE)
            else()
                message(${TYPE} "${OLD} is deprecated and will be ignored")
            endif()
        endif()
    endfunction()

    llama_option_depr(FATAL_ERROR LLAMA_CUBLAS GGML_CUDA)
    llama_option_depr(WARNING     LLAMA_CUDA   GGML_CUDA)
    llama_option_depr(WARNING     LLAMA_CURL)
    """
)

# as llama.cpp's top CMakeLists.txt: a number and a commit given from outside win
BUILD_NUMBER = textwrap.dedent(
    """\
    include(cmake/build-info.cmake)
    if (NOT DEFINED LLAMA_BUILD_NUMBER)
        set(LLAMA_BUILD_NUMBER ${BUILD_NUMBER})
    endif()
    if (NOT DEFINED LLAMA_BUILD_COMMIT)
        set(LLAMA_BUILD_COMMIT ${BUILD_COMMIT})
    endif()
    set(LLAMA_INSTALL_VERSION 0.0.${LLAMA_BUILD_NUMBER})
    add_subdirectory(common)
    if (LLAMA_BUILD_SERVER)
        add_subdirectory(tools/ui)
    endif()"""
)

# as llama.cpp's tools/ui (since May 2026): an ALL target that provisions the server's web
# UI at build time, by `npm` (LLAMA_BUILD_UI) or a download (LLAMA_USE_PREBUILT_UI), else
# builds without it. Here either way is a failed build (a test never uses the network).
# A custom target with no outputs: Ninja runs it at every build (tools/ui/CMakeLists.txt:
# 72-91 at the pin); its byproduct is rewritten only when different (embed.cpp's
# write_if_different), so nothing else is rebuilt.
UI_CMAKE = textwrap.dedent(
    """\
    add_custom_target(llama-ui-assets ALL
        BYPRODUCTS "${CMAKE_CURRENT_BINARY_DIR}/ui.cpp"
        COMMAND ${CMAKE_COMMAND}
            "-DBUILD_UI=${LLAMA_BUILD_UI}"
            "-DHF_ENABLED=${LLAMA_USE_PREBUILT_UI}"
            "-DUI_BINARY_DIR=${CMAKE_CURRENT_BINARY_DIR}"
            -P "${PROJECT_SOURCE_DIR}/scripts/ui-assets.cmake"
        COMMENT "Provisioning UI assets"
        VERBATIM)
    # a build-host helper that generates the embedded UI's sources: built, never installed
    add_executable(llama-ui-embed embed.c)
    add_dependencies(llama-ui-assets llama-ui-embed)
    """
)
UI_ASSETS = textwrap.dedent(
    """\
    if (BUILD_UI)
        message(FATAL_ERROR "UI: would run npm install at build time (network)")
    endif()
    if (HF_ENABLED)
        message(FATAL_ERROR "UI: would download the prebuilt UI at build time (network)")
    endif()
    message(WARNING "UI: no assets available - building without an embedded UI")
    file(WRITE "${UI_BINARY_DIR}/ui.cpp.new" "// no embedded UI\\n")
    execute_process(COMMAND "${CMAKE_COMMAND}" -E copy_if_different
        "${UI_BINARY_DIR}/ui.cpp.new" "${UI_BINARY_DIR}/ui.cpp")
    """
)

GGML_CMAKE = CCACHE_DETECT + textwrap.dedent(
    """\
    # as ggml's project(ggml C CXX ASM): an assembler the report must name with its version
    enable_language(ASM)
    add_library(ggml-base src/ggml-base.c)
    target_include_directories(ggml-base PUBLIC include)
    add_library(ggml-cpu src/ggml-cpu.c)
    target_link_libraries(ggml-cpu PUBLIC ggml-base)
    add_library(ggml src/ggml.c)
    target_link_libraries(ggml PUBLIC ggml-base ggml-cpu)
    install(TARGETS ggml LIBRARY)
    install(TARGETS ggml-base LIBRARY)
    install(TARGETS ggml-cpu LIBRARY)
    if (GGML_CUDA)
        enable_language(CUDA)
        target_sources(ggml PRIVATE src/ggml-cuda.cu)
        target_compile_definitions(ggml PUBLIC GGML_USE_CUDA)
    endif()
    """
)

FILES: dict[str, str] = {
    "CMakeLists.txt": BASE_FILES["CMakeLists.txt"]
    .replace(
        'option(GGML_NATIVE "optimize for the build host" ON)',
        'option(BUILD_SHARED_LIBS "build shared libraries" ON)\n'
        'option(GGML_NATIVE "optimize for the build host" ON)',
    )
    .replace('option(LLAMA_CURL "use libcurl" OFF)\n', DEPRECATION)
    .replace("add_subdirectory(ggml)", "add_subdirectory(ggml)\n" + BUILD_NUMBER)
    .replace(
        "target_link_libraries(llama PUBLIC ggml)",
        "target_link_libraries(llama PUBLIC ggml)\n"
        "set_target_properties(llama PROPERTIES VERSION ${LLAMA_INSTALL_VERSION} SOVERSION 0)\n"
        "install(TARGETS llama LIBRARY)",
    )
    .replace(
        "target_link_libraries(llama-cli PRIVATE llama)",
        "target_link_libraries(llama-cli PRIVATE llama build_info)\n"
        "    install(TARGETS llama-cli RUNTIME)",
    ),
    "tools/ui/embed.c": textwrap.dedent(
        """\
        #include <stdio.h>
        int main(void) { return puts("// no assets") < 0; }
        """
    ),
    "ggml/CMakeLists.txt": GGML_CMAKE,
    "tools/ui/CMakeLists.txt": UI_CMAKE,
    "scripts/ui-assets.cmake": UI_ASSETS,
    "ggml/src/ggml-impl.h": textwrap.dedent(
        """\
        #pragma once
        #define GGML_WHERE __FILE__
        """
    ),
    "ggml/src/ggml-base.c": textwrap.dedent(
        """\
        int ggml_base_tensor_count(void) {
            return 2;
        }
        """
    ),
    "ggml/src/ggml-cpu.c": textwrap.dedent(
        """\
        int ggml_base_tensor_count(void);

        int ggml_cpu_threads(void) {
            return ggml_base_tensor_count() + 1;
        }
        """
    ),
    "ggml/src/ggml.c": textwrap.dedent(
        """\
        #include "ggml.h"
        #include "ggml-impl.h"

        int ggml_cpu_threads(void);

        const char * ggml_where_c = __FILE__;
        const char * ggml_where_h = GGML_WHERE;

        int ggml_backend_count(void) {
            return ggml_cpu_threads() - 2;
        }
        """
    ),
    # as llama.cpp's cmake/build-info.cmake: git at configure time
    "cmake/build-info.cmake": textwrap.dedent(
        """\
        set(BUILD_NUMBER 0)
        set(BUILD_COMMIT "unknown")
        find_package(Git)
        if (Git_FOUND)
            execute_process(
                COMMAND ${GIT_EXECUTABLE} rev-parse --short HEAD
                WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
                OUTPUT_VARIABLE OUT OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE RES)
            if (RES EQUAL 0)
                set(BUILD_COMMIT ${OUT})
            endif()
            execute_process(
                COMMAND ${GIT_EXECUTABLE} rev-list --count HEAD
                WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
                OUTPUT_VARIABLE OUT OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE RES)
            if (RES EQUAL 0)
                set(BUILD_NUMBER ${OUT})
            endif()
            execute_process(
                COMMAND ${GIT_EXECUTABLE} describe --always --tags
                WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
                OUTPUT_VARIABLE OUT OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE RES)
            if (RES EQUAL 0)
                set(BUILD_DESCRIBE ${OUT})
            endif()
        endif()
        """
    ),
    "common/CMakeLists.txt": textwrap.dedent(
        """\
        configure_file(build-info.cpp.in ${CMAKE_CURRENT_BINARY_DIR}/build-info.cpp)
        add_library(build_info OBJECT ${CMAKE_CURRENT_BINARY_DIR}/build-info.cpp)
        set_target_properties(build_info PROPERTIES POSITION_INDEPENDENT_CODE ON)
        """
    ),
    "common/build-info.cpp.in": textwrap.dedent(
        """\
        int LLAMA_BUILD_NUMBER = @LLAMA_BUILD_NUMBER@;
        char const * LLAMA_COMMIT = "@LLAMA_BUILD_COMMIT@";
        char const * LLAMA_DESCRIBE = "@BUILD_DESCRIBE@";
        char const * LLAMA_BUILD_INFO_FILE = __FILE__;
        """
    ),
    "tools/main.cpp": textwrap.dedent(
        """\
        #include <cstdio>
        #include "llama.h"

        extern int LLAMA_BUILD_NUMBER;
        extern char const * LLAMA_COMMIT;
        extern char const * LLAMA_DESCRIBE;

        int main() {
            std::printf("llama %s build %d commit %s describe %s owner(7)=%d\\n",
                        llama_version(), LLAMA_BUILD_NUMBER, LLAMA_COMMIT, LLAMA_DESCRIBE,
                        llama_layer_owner(7));
            return 0;
        }
        """
    ),
}


def _history(up: Upstream, count: int) -> None:
    """`count` commits on the branch in one `git fast-import` (a commit each through
    `Upstream.commit` would take seconds), dated on from the upstream's clock."""
    tip = up.head
    stream = [f"reset refs/heads/main\nfrom {tip}\n"]
    for i in range(count):
        up._tick += 1
        stamp = 1735689600 + up._tick  # 2025-01-01T00:00:00Z + tick, as Upstream.commit
        who = f"{GIT_ENV['GIT_AUTHOR_NAME']} <{GIT_ENV['GIT_AUTHOR_EMAIL']}> {stamp} +0000"
        text = f"change {i}\n"
        message = f"docs: changelog entry {i}\n"
        stream.append(
            f"commit refs/heads/main\nmark :{i + 1}\nauthor {who}\ncommitter {who}\n"
            f"data {len(message)}\n{message}"
            f"M 100644 inline docs/changelog.md\ndata {len(text)}\n{text}\n"
        )
    marks = up.path / ".git" / "dgr-test-marks"
    subprocess.run(
        ["git", "fast-import", "--quiet", f"--export-marks={marks}"],
        cwd=up.path,
        env={**os.environ, **GIT_ENV},
        input="".join(stream).encode(),
        check=True,
    )
    by_mark = dict(line.split() for line in marks.read_text().splitlines())
    marks.unlink()
    up.commits += [by_mark[f":{i + 1}"] for i in range(count)]
    sh_git(up.path, "reset", "-q", "--hard", "main")


def make_llamalike_upstream(path: Path, extra_commits: int = 3, history: int = HISTORY) -> Upstream:
    """The test upstream, `history` more commits, then one commit that makes it build
    like llama.cpp (above)."""
    up = make_upstream(path, extra_commits)
    _history(up, history)
    up.commit(dict(FILES), "build: ccache auto-detection, build info, shared ggml, shims")
    return up
