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
