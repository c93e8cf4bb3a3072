# DgrUpstream.cmake: add the pinned, patched llama.cpp to a worker build.
#
#   list(APPEND CMAKE_MODULE_PATH ...)   # dgr-forge passes -DCMAKE_MODULE_PATH=<root>/cmake
#   include(DgrUpstream)                 # targets llama, ggml, ... now exist
#   target_link_libraries(my-worker PRIVATE llama)
#
# `dgr-forge build` configures the worker with
#   -DDGR_UPSTREAM_SOURCE_DIR=<workspace>/src/llama.cpp   (the verified, patched tree)
#   the lane's recipe options (GGML_CUDA=ON, GGML_NATIVE=OFF, ...) as cache variables,
# so upstream's own option() calls pick them up unchanged. Upstream is added
# EXCLUDE_FROM_ALL: only what the worker links gets built.
include_guard(GLOBAL)
cmake_minimum_required(VERSION 3.18)

set(DGR_UPSTREAM_SOURCE_DIR "" CACHE PATH "The patched upstream tree (set by dgr-forge build)")
if(NOT DGR_UPSTREAM_SOURCE_DIR)
  message(FATAL_ERROR
    "DGR_UPSTREAM_SOURCE_DIR is not set. Build the worker with `dgr-forge build --worker <dir>`, "
    "or pass -DDGR_UPSTREAM_SOURCE_DIR=<workspace>/src/llama.cpp after `dgr-forge patch`.")
endif()
if(NOT EXISTS "${DGR_UPSTREAM_SOURCE_DIR}/CMakeLists.txt")
  message(FATAL_ERROR
    "DGR_UPSTREAM_SOURCE_DIR=${DGR_UPSTREAM_SOURCE_DIR} has no CMakeLists.txt. "
    "Run `dgr-forge patch` to create the patched tree.")
endif()

# A worker needs upstream's libraries, not its tools, examples, tests or server;
# a recipe or -D on the command line still wins (these are only defaults).
foreach(_dgr_opt LLAMA_BUILD_TESTS LLAMA_BUILD_EXAMPLES LLAMA_BUILD_TOOLS LLAMA_BUILD_SERVER)
  if(NOT DEFINED ${_dgr_opt})
    set(${_dgr_opt} OFF CACHE BOOL "${_dgr_opt} (default from DgrUpstream.cmake)")
  endif()
endforeach()

add_subdirectory("${DGR_UPSTREAM_SOURCE_DIR}" "${CMAKE_BINARY_DIR}/_dgr_upstream" EXCLUDE_FROM_ALL)
