# dgr-forge toolchain: GNU host compilers + ROCm's clang as the HIP compiler, as
# llama.cpp's CI does (CMAKE_HIP_COMPILER = "$(hipconfig -l)/clang"). ROCm is found at
# -DCMAKE_HIP_COMPILER, else $ROCM_PATH, $HIP_PATH, /opt/rocm.
include_guard(GLOBAL)
include("${CMAKE_CURRENT_LIST_DIR}/gcc.cmake")

set(_dgr_rocm "")
foreach(_candidate "$ENV{ROCM_PATH}" "$ENV{HIP_PATH}" "/opt/rocm")
  if(_candidate AND EXISTS "${_candidate}")
    set(_dgr_rocm "${_candidate}")
    break()
  endif()
endforeach()
if(_dgr_rocm)
  list(APPEND CMAKE_PREFIX_PATH "${_dgr_rocm}" "${_dgr_rocm}/lib/cmake")
endif()

if(NOT CMAKE_HIP_COMPILER)
  find_program(DGR_HIP_CLANG NAMES clang HINTS "${_dgr_rocm}/llvm/bin" "${_dgr_rocm}/lib/llvm/bin"
               NO_DEFAULT_PATH)
  if(DGR_HIP_CLANG)
    set(CMAKE_HIP_COMPILER "${DGR_HIP_CLANG}" CACHE FILEPATH "HIP compiler (dgr-forge rocm toolchain)")
  endif()
endif()
