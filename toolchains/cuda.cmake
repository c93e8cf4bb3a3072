# dgr-forge toolchain: GNU host compilers + nvcc. nvcc is taken from
# -DCMAKE_CUDA_COMPILER (dgr-forge passes the one `doctor` found), else $CUDA_PATH,
# $CUDA_HOME, /usr/local/cuda, PATH. The host compiler for nvcc is the C++ compiler.
include_guard(GLOBAL)
include("${CMAKE_CURRENT_LIST_DIR}/gcc.cmake")

if(NOT CMAKE_CUDA_COMPILER)
  find_program(DGR_NVCC NAMES nvcc
               HINTS "$ENV{CUDA_PATH}/bin" "$ENV{CUDA_HOME}/bin" "/usr/local/cuda/bin")
  if(DGR_NVCC)
    set(CMAKE_CUDA_COMPILER "${DGR_NVCC}" CACHE FILEPATH "CUDA compiler (dgr-forge cuda toolchain)")
  endif()
endif()
if(NOT CMAKE_CUDA_HOST_COMPILER AND CMAKE_CXX_COMPILER)
  set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}" CACHE FILEPATH "nvcc host compiler")
endif()
