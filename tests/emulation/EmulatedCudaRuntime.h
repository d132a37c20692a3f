#ifndef AMPJIT_TESTS_EMULATION_EMULATEDCUDARUNTIME_H
#define AMPJIT_TESTS_EMULATION_EMULATEDCUDARUNTIME_H

// The CUDA runtime calls the backend's kernel and step sources make, mapped
// to host memory (CudaEmulation.h), and their cuBLASLt calls, sent to the
// host model of cuBLASLt (EmulatedCublasLt.h). Included first by the sources
// built for the emulation (tests/emulation/CMakeLists.txt), after the CUDA
// headers so their declarations keep their meaning: only calls are
// redirected.

#include "CudaEmulation.h"
#include "EmulatedCublasLt.h"

#define cudaMemcpyAsync(destination, source, bytes, kind, stream)                                     \
  ::ampjit::emulation::copyBytes(destination, source, bytes)
#define cudaMemcpy(destination, source, bytes, kind) ::ampjit::emulation::copyBytes(destination, source, bytes)
#define cudaMemsetAsync(destination, value, bytes, stream) ::ampjit::emulation::fillBytes(destination, value, bytes)
#define cudaMalloc(pointer, bytes) ::ampjit::emulation::allocateBytes(reinterpret_cast<void**>(pointer), bytes)
#define cudaFree(pointer) ::ampjit::emulation::releaseBytes(pointer)
#define cudaStreamSynchronize(stream) cudaSuccess
#define cudaGetLastError() ::ampjit::emulation::takeLastError()

#define cublasLtCreate ::ampjit::emulation::cublasLtCreate
#define cublasLtDestroy ::ampjit::emulation::cublasLtDestroy
#define cublasLtMatmulDescCreate ::ampjit::emulation::cublasLtMatmulDescCreate
#define cublasLtMatmulDescDestroy ::ampjit::emulation::cublasLtMatmulDescDestroy
#define cublasLtMatmulDescSetAttribute ::ampjit::emulation::cublasLtMatmulDescSetAttribute
#define cublasLtMatrixLayoutCreate ::ampjit::emulation::cublasLtMatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy ::ampjit::emulation::cublasLtMatrixLayoutDestroy
#define cublasLtMatrixLayoutSetAttribute ::ampjit::emulation::cublasLtMatrixLayoutSetAttribute
#define cublasLtMatmulPreferenceCreate ::ampjit::emulation::cublasLtMatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy ::ampjit::emulation::cublasLtMatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute ::ampjit::emulation::cublasLtMatmulPreferenceSetAttribute
#define cublasLtMatmulAlgoGetHeuristic ::ampjit::emulation::cublasLtMatmulAlgoGetHeuristic
#define cublasLtMatmul ::ampjit::emulation::cublasLtMatmul

#endif // AMPJIT_TESTS_EMULATION_EMULATEDCUDARUNTIME_H
