# dgr-forge toolchain: GNU compilers from PATH (or $DGR_GCC_PREFIX/bin).
# Passed as CMAKE_TOOLCHAIN_FILE by `dgr-forge build` and the generated presets; a
# compiler given on the command line (-DCMAKE_C_COMPILER=...) wins.
include_guard(GLOBAL)

set(_dgr_gcc_hints "")
if(DEFINED ENV{DGR_GCC_PREFIX})
  list(APPEND _dgr_gcc_hints "$ENV{DGR_GCC_PREFIX}/bin")
endif()

if(NOT CMAKE_C_COMPILER)
  find_program(DGR_GCC NAMES gcc HINTS ${_dgr_gcc_hints} REQUIRED)
  set(CMAKE_C_COMPILER "${DGR_GCC}" CACHE FILEPATH "C compiler (dgr-forge gcc toolchain)")
endif()
if(NOT CMAKE_CXX_COMPILER)
  find_program(DGR_GXX NAMES g++ HINTS ${_dgr_gcc_hints} REQUIRED)
  set(CMAKE_CXX_COMPILER "${DGR_GXX}" CACHE FILEPATH "C++ compiler (dgr-forge gcc toolchain)")
endif()
