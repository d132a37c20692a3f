// Kernels that test the CUDA emulation itself (EmulatedKernelTest.cpp):
// built for the host through RewriteLaunches.cmake, never by nvcc. Each
// launcher returns the launch's cudaGetLastError().

#include "EmulationTestKernels.h"

namespace {

constexpr int kThreads = 256;

/// Thread t stores, after a barrier, what thread (t + 1) % n wrote before it.
__global__ void rotateThroughSharedMemory(const int* in, int* out) {
  __shared__ int shared[kThreads];
  int t = threadIdx.x;
  shared[t] = in[blockIdx.x * kThreads + t];
  __syncthreads();
  out[blockIdx.x * kThreads + t] = shared[(t + 1) % kThreads];
}

/// Every lane of every warp ends with the sum over its warp (a butterfly);
/// lane 0 of each warp stores it.
__global__ void warpSums(const float* in, float* out) {
  float value = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  out[blockIdx.x * blockDim.x + threadIdx.x] = value;
}

/// Threads past `exiting` return before the barrier the others wait at: an
/// exited thread counts as arrived, as on sm_70 and later.
__global__ void someThreadsExitEarly(int exiting, int* out) {
  if (int(threadIdx.x) >= exiting)
    return;
  __shared__ int shared[kThreads];
  shared[threadIdx.x] = int(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = shared[exiting - 1 - int(threadIdx.x)];
}

/// Lane 0 of warp 0 waits at a shuffle while every other thread waits at a
/// block barrier: neither can finish.
__global__ void divergentBarriers(float* out) {
  if (threadIdx.x == 0)
    out[0] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  else
    __syncthreads();
}

__global__ void writeIds(unsigned* out) {
  unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads + thread] = block * 1000u + thread;
}

} // namespace

namespace ampjit::emulation::testkernels {

cudaError_t rotate(const int* in, int* out, int blocks) {
  rotateThroughSharedMemory<<<blocks, kThreads>>>(in, out);
  return cudaGetLastError();
}

cudaError_t sumWarps(const float* in, float* out, int blocks, int threads) {
  warpSums<<<blocks, threads, 0, nullptr>>>(in, out);
  return cudaGetLastError();
}

cudaError_t exitEarly(int exiting, int* out) {
  someThreadsExitEarly<<<1, kThreads>>>(exiting, out);
  return cudaGetLastError();
}

cudaError_t deadlock(float* out) {
  divergentBarriers<<<1, 64>>>(out);
  return cudaGetLastError();
}

cudaError_t ids(dim3 grid, dim3 block, unsigned* out) {
  writeIds<<<grid, block>>>(out);
  return cudaGetLastError();
}

} // namespace ampjit::emulation::testkernels
