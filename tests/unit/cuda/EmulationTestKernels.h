#ifndef AMPJIT_TESTS_UNIT_CUDA_EMULATIONTESTKERNELS_H
#define AMPJIT_TESTS_UNIT_CUDA_EMULATIONTESTKERNELS_H

// Launchers of EmulationTestKernels.cu (host memory: they run emulated).

#include <cuda_runtime_api.h>

namespace ampjit::emulation::testkernels {

/// out[b*256 + t] = in[b*256 + (t+1) % 256] through shared memory.
cudaError_t rotate(const int* in, int* out, int blocks);
/// out[i] = the sum of `in` over i's warp, on every lane.
cudaError_t sumWarps(const float* in, float* out, int blocks, int threads);
/// out[t] = t reversed over the first `exiting` threads, the rest exiting
/// before the barrier.
cudaError_t exitEarly(int exiting, int* out);
/// A launch whose threads wait at barriers that can never all be reached.
cudaError_t deadlock(float* out);
/// out[linear block * threads + linear thread] = block * 1000 + thread.
cudaError_t ids(dim3 grid, dim3 block, unsigned* out);

} // namespace ampjit::emulation::testkernels

#endif // AMPJIT_TESTS_UNIT_CUDA_EMULATIONTESTKERNELS_H
