#ifndef AMPJIT_TESTS_EMULATION_EMULATEDCUDARUNTIME_H
#define AMPJIT_TESTS_EMULATION_EMULATEDCUDARUNTIME_H

// The CUDA runtime calls the backend's kernel and step sources make, mapped
// to host memory (CudaEmulation.h). Included first by the sources built for
// the emulation (tests/emulation/CMakeLists.txt), after the CUDA headers so
// their declarations keep their meaning: only calls are redirected.

#include "CudaEmulation.h"

#define cudaMemcpyAsync(destination, source, bytes, kind, stream)                                     \
  ::ampjit::emulation::copyBytes(destination, source, bytes)
#define cudaMemcpy(destination, source, bytes, kind) ::ampjit::emulation::copyBytes(destination, source, bytes)
#define cudaMemsetAsync(destination, value, bytes, stream) ::ampjit::emulation::fillBytes(destination, value, bytes)
#define cudaMalloc(pointer, bytes) ::ampjit::emulation::allocateBytes(reinterpret_cast<void**>(pointer), bytes)
#define cudaFree(pointer) ::ampjit::emulation::releaseBytes(pointer)
#define cudaStreamSynchronize(stream) cudaSuccess
#define cudaGetLastError() ::ampjit::emulation::takeLastError()

#endif // AMPJIT_TESTS_EMULATION_EMULATEDCUDARUNTIME_H
