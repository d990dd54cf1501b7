# The oldest CUDA Toolkit the course builds with, checked before project() asks
# nvcc anything, so an older toolkit stops the configure with one line instead of
# CUB errors halfway through the build. CI proves the minimum: .ci/run builds
# every stage with nvcc 12.4 for sm_75 and runs the CPU tests of that build.
set(WB_CUDA_MIN_VERSION 12.4)
set(WB_CUDA_DOWNLOAD "https://developer.nvidia.com/cuda-downloads")

# nvcc as project() finds it: -DCMAKE_CUDA_COMPILER, then $CUDACXX, then the PATH.
# A toolkit installed in /usr/local/cuda but not on the PATH (NVIDIA's packages
# leave it so) is taken from there, and project() is told to use the same one.
if(CMAKE_CUDA_COMPILER)
  set(_wb_nvcc "${CMAKE_CUDA_COMPILER}")
elseif(DEFINED ENV{CUDACXX} AND NOT "$ENV{CUDACXX}" STREQUAL "")
  set(_wb_nvcc "$ENV{CUDACXX}")
else()
  find_program(WB_NVCC nvcc HINTS /usr/local/cuda/bin)
  if(NOT WB_NVCC)
    message(FATAL_ERROR " No CUDA compiler (nvcc) found on the PATH or in /usr/local/cuda/bin: the course needs the "
                        "CUDA Toolkit ${WB_CUDA_MIN_VERSION} or newer (${WB_CUDA_DOWNLOAD}), its bin/ on the PATH.")
  endif()
  set(_wb_nvcc "${WB_NVCC}")
  set(CMAKE_CUDA_COMPILER "${WB_NVCC}" CACHE FILEPATH "CUDA compiler")
endif()

execute_process(COMMAND "${_wb_nvcc}" --version OUTPUT_VARIABLE _wb_nvcc_out RESULT_VARIABLE _wb_nvcc_rc
                ERROR_QUIET)
if(NOT _wb_nvcc_rc EQUAL 0 OR NOT _wb_nvcc_out MATCHES "release ([0-9]+\\.[0-9]+)")
  message(FATAL_ERROR " ${_wb_nvcc} --version does not name a CUDA release: the course needs the CUDA Toolkit "
                      "${WB_CUDA_MIN_VERSION} or newer (${WB_CUDA_DOWNLOAD}).")
endif()
set(WB_CUDA_VERSION "${CMAKE_MATCH_1}")
if(WB_CUDA_VERSION VERSION_LESS WB_CUDA_MIN_VERSION)
  message(FATAL_ERROR " CUDA Toolkit ${WB_CUDA_VERSION} found (${_wb_nvcc}); the course needs ${WB_CUDA_MIN_VERSION} "
                      "or newer: ${WB_CUDA_DOWNLOAD}, or pick one with -DCMAKE_CUDA_COMPILER=/path/to/bin/nvcc.")
endif()
