#ifndef AMPJIT_TESTS_EMULATION_EMULATEDCUDALANGUAGE_H
#define AMPJIT_TESTS_EMULATION_EMULATEDCUDALANGUAGE_H

// The CUDA language on the host, for kernel sources only (CudaEmulation.h
// says how they run): the execution-space keywords vanish, a block's shared
// memory is a function-local static (one block runs at a time), and the
// built-in variables and intrinsics call the emulation. After the CUDA
// headers, so their own declarations keep their meaning.

#include "EmulatedCudaRuntime.h"

#include <algorithm>
#include <cmath>

// Device code calls these unqualified, as CUDA's math headers declare them.
using std::isfinite;
using std::isinf;
using std::isnan;
using std::max;
using std::min;

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define threadIdx (::ampjit::emulation::currentThread().threadIdx)
#define blockIdx (::ampjit::emulation::currentThread().blockIdx)
#define blockDim (::ampjit::emulation::currentThread().blockDim)
#define gridDim (::ampjit::emulation::currentThread().gridDim)
#define __syncthreads() ::ampjit::emulation::synchronizeBlock()
#define __syncwarp(...) ::ampjit::emulation::synchronizeWarp(__VA_ARGS__)
#define __shfl_xor_sync(...) ::ampjit::emulation::shuffleXor(__VA_ARGS__)
#define __int_as_float(bits) ::ampjit::emulation::intAsFloat(bits)
#define __longlong_as_double(bits) ::ampjit::emulation::longLongAsDouble(bits)
#define __ldcs(pointer) ::ampjit::emulation::loadEvictFirst(pointer)
#define __stcs(pointer, value) ::ampjit::emulation::storeEvictFirst(pointer, value)

#endif // AMPJIT_TESTS_EMULATION_EMULATEDCUDALANGUAGE_H
