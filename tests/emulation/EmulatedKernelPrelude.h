#ifndef AMPJIT_TESTS_EMULATION_EMULATEDKERNELPRELUDE_H
#define AMPJIT_TESTS_EMULATION_EMULATEDKERNELPRELUDE_H

// What every library of generated kernels built on the host opens with
// (EmulatedGeneratedKernels.cpp): the emulation's interface and the CUDA
// language on the host, with the CUDA headers the kernels include. It is
// precompiled once per build (tests/emulation/CMakeLists.txt), so a library
// compiles only its kernels; the emulation's own code comes from an archive
// built with the tests, linked into each library.

#include "CudaEmulation.h"
#include "EmulatedCudaLanguage.h"

#include <cstddef>
#include <type_traits>
#include <utility>

#endif // AMPJIT_TESTS_EMULATION_EMULATEDKERNELPRELUDE_H
