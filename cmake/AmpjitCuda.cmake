# Turns CUDA on when a toolkit is found (AMPJIT_ENABLE_CUDA=AUTO, the default);
# ON makes a missing toolkit an error, OFF builds the CPU-only project.
set(AMPJIT_ENABLE_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set_property(CACHE AMPJIT_ENABLE_CUDA PROPERTY STRINGS AUTO ON OFF)

set(AMPJIT_CUDA_ENABLED OFF)
if(NOT AMPJIT_ENABLE_CUDA STREQUAL "OFF")
  if(NOT CUDAToolkit_ROOT AND EXISTS "/usr/local/cuda")
    set(CUDAToolkit_ROOT "/usr/local/cuda")
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(AMPJIT_CUDA_ENABLED ON)
    # The hand-written kernels are compiled by nvcc into the runtime library,
    # for the benchmark GPU (sm_90) unless told otherwise.
    set(AMPJIT_CUDA_ARCHITECTURES "90" CACHE STRING "GPU architectures the runtime's kernels are built for")
    set(CMAKE_CUDA_ARCHITECTURES ${AMPJIT_CUDA_ARCHITECTURES})
    if(NOT CMAKE_CUDA_COMPILER)
      set(CMAKE_CUDA_COMPILER "${CUDAToolkit_BIN_DIR}/nvcc")
    endif()
    # C++17: CMake 3.25 cannot ask nvcc for C++20. The .cu files include only
    # their plain launcher headers, never the C++20 runtime headers.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # The runtime links CUDA::cudart_static itself; CMake's implicit
    # -lcudart_static/-lcudadevrt would reach the C++ linker without their
    # directory.
    set(CMAKE_CUDA_RUNTIME_LIBRARY None)
    enable_language(CUDA)
    # cuDNN ships beside the toolkit on the development machines and in the
    # system library folder on the GPU machine.
    find_library(AMPJIT_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE})
    find_path(AMPJIT_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
    if(NOT AMPJIT_CUDNN_LIBRARY OR NOT AMPJIT_CUDNN_INCLUDE_DIR)
      message(FATAL_ERROR "The CUDA backend needs cuDNN 9 (libcudnn.so and cudnn.h) beside the CUDA toolkit")
    endif()
    message(STATUS "CUDA backend: on (toolkit ${CUDAToolkit_VERSION} at ${CUDAToolkit_BIN_DIR})")
  elseif(AMPJIT_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "AMPJIT_ENABLE_CUDA=ON but no CUDA toolkit was found; "
                        "set CUDAToolkit_ROOT or configure with -DAMPJIT_ENABLE_CUDA=OFF")
  else()
    message(STATUS "CUDA backend: off (no toolkit found)")
  endif()
else()
  message(STATUS "CUDA backend: off (AMPJIT_ENABLE_CUDA=OFF)")
endif()

# Cached so that scripts (CI) can read what this build tree decided.
set(AMPJIT_CUDA_ENABLED ${AMPJIT_CUDA_ENABLED} CACHE INTERNAL "Whether this build contains the CUDA backend")
