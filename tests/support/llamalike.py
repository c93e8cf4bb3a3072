"""A test upstream that builds like llama.cpp where it matters to reproducibility (issue 20).

On top of the plain test upstream (`git.make_upstream`), one more upstream commit makes it:

* auto-detect a compiler cache, as ggml's `GGML_CCACHE` (default ON) does: when no
  launcher is set, `find_program(ccache)` and `RULE_LAUNCH_COMPILE`, so a build whose
  PATH has ccache compiles through it unless told `GGML_CCACHE=OFF`;
* compile in `git rev-parse --short HEAD` and `git rev-list --count HEAD` at configure
  time into a generated `build-info.cpp` in the build tree, as llama.cpp's
  `cmake/build-info.cmake` + `common/build-info.cpp.in` do;
* compile in `__FILE__` (ggml's asserts), from a source and through a header;
* build shared libraries by default (`BUILD_SHARED_LIBS`), so the report's subjects are
  two libraries and the tool.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from .git import BASE_FILES, Upstream, make_upstream

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

FILES: dict[str, str] = {
    "CMakeLists.txt": BASE_FILES["CMakeLists.txt"]
    .replace(
        'option(GGML_NATIVE "optimize for the build host" ON)',
        'option(BUILD_SHARED_LIBS "build shared libraries" ON)\n'
        'option(GGML_NATIVE "optimize for the build host" ON)',
    )
    .replace(
        "add_subdirectory(ggml)",
        "add_subdirectory(ggml)\ninclude(cmake/build-info.cmake)\nadd_subdirectory(common)",
    )
    .replace(
        "target_link_libraries(llama-cli PRIVATE llama)",
        "target_link_libraries(llama-cli PRIVATE llama build_info)",
    ),
    "ggml/CMakeLists.txt": CCACHE_DETECT + BASE_FILES["ggml/CMakeLists.txt"],
    "ggml/src/ggml-impl.h": textwrap.dedent(
        """\
        #pragma once
        #define GGML_WHERE __FILE__
        """
    ),
    "ggml/src/ggml.c": textwrap.dedent(
        """\
        #include "ggml.h"
        #include "ggml-impl.h"

        const char * ggml_where_c = __FILE__;
        const char * ggml_where_h = GGML_WHERE;

        int ggml_backend_count(void) {
            return 1;
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
        int LLAMA_BUILD_NUMBER = @BUILD_NUMBER@;
        char const * LLAMA_COMMIT = "@BUILD_COMMIT@";
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


def make_llamalike_upstream(path: Path, extra_commits: int = 3) -> Upstream:
    """The test upstream, then one commit that makes it build like llama.cpp (above)."""
    up = make_upstream(path, extra_commits)
    up.commit(dict(FILES), "build: ccache auto-detection, build info from git, shared libs")
    return up
