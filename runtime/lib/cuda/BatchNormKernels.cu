// Staging, epilogue and relu-gradient kernels around cuDNN's batch norm
// (BatchNormKernels.h). Each is a grid-stride loop over elements and mirrors
// the CPU (runtime/lib/cpu/BatchNorm.cpp, Elementwise.cpp): arithmetic in the
// compute type, one rounding per stored value.

#include "BatchNormKernels.h"
#include "DeviceScalars.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ampjit::runtime::cuda::batchnorm {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

int blocksFor(int64_t count) {
  int64_t blocks = (count + kThreads - 1) / kThreads;
  return int(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}


template <typename S> __device__ inline S positiveZero();
template <> __device__ inline __half positiveZero<__half>() { return __ushort_as_half(0); }
template <> __device__ inline __nv_bfloat16 positiveZero<__nv_bfloat16>() { return __ushort_as_bfloat16(0); }
template <> __device__ inline float positiveZero<float>() { return 0.0f; }
template <> __device__ inline double positiveZero<double>() { return 0.0; }


#define AMPJIT_GRID_STRIDE(i, count)                                                                         \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (count); i += int64_t(gridDim.x) * blockDim.x)

template <typename S>
__global__ void widenKernel(const S* __restrict__ source, float* __restrict__ target, int64_t count) {
  AMPJIT_GRID_STRIDE(i, count) target[i] = widen(source[i]);
}

template <typename S>
__global__ void narrowKernel(const float* __restrict__ source, S* __restrict__ target, int64_t count) {
  AMPJIT_GRID_STRIDE(i, count) target[i] = narrow<S>(source[i]);
}

// `pre` may alias `y` (f32 and f64 data are normalised in place), so no
// __restrict__ on either.
template <typename S>
__global__ void epilogueKernel(const typename ComputeOf<S>::type* pre, const S* __restrict__ z, S* y,
                               int64_t count) {
  using T = typename ComputeOf<S>::type;
  AMPJIT_GRID_STRIDE(i, count) {
    T value = pre[i];
    if (z != nullptr)
      value = value + T(widen(z[i]));
    y[i] = store<S, T>(value < T(0) ? T(0) : value);
  }
}

template <typename S>
__global__ void reluGradKernel(const S* __restrict__ dy, const S* __restrict__ y, S* __restrict__ g,
                               int64_t count) {
  AMPJIT_GRID_STRIDE(i, count) g[i] = widen(y[i]) > 0 ? dy[i] : positiveZero<S>();
}

#undef AMPJIT_GRID_STRIDE

template <typename S>
cudaError_t epilogue(const void* pre, const void* z, void* y, int64_t count, cudaStream_t stream) {
  using T = typename ComputeOf<S>::type;
  epilogueKernel<S><<<blocksFor(count), kThreads, 0, stream>>>(static_cast<const T*>(pre), static_cast<const S*>(z),
                                                               static_cast<S*>(y), count);
  return cudaGetLastError();
}

template <typename S>
cudaError_t reluGrad(const void* dy, const void* y, void* g, int64_t count, cudaStream_t stream) {
  reluGradKernel<S><<<blocksFor(count), kThreads, 0, stream>>>(static_cast<const S*>(dy), static_cast<const S*>(y),
                                                               static_cast<S*>(g), count);
  return cudaGetLastError();
}

} // namespace

cudaError_t launchWidenToF32(Storage storage, const void* source, float* target, int64_t count,
                             cudaStream_t stream) {
  if (count == 0)
    return cudaSuccess;
  switch (storage) {
  case Storage::F16:
    widenKernel<<<blocksFor(count), kThreads, 0, stream>>>(static_cast<const __half*>(source), target, count);
    return cudaGetLastError();
  case Storage::BF16:
    widenKernel<<<blocksFor(count), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(source), target, count);
    return cudaGetLastError();
  default: return cudaErrorInvalidValue;
  }
}

cudaError_t launchNarrowFromF32(Storage storage, const float* source, void* target, int64_t count,
                                cudaStream_t stream) {
  if (count == 0)
    return cudaSuccess;
  switch (storage) {
  case Storage::F16:
    narrowKernel<<<blocksFor(count), kThreads, 0, stream>>>(source, static_cast<__half*>(target), count);
    return cudaGetLastError();
  case Storage::BF16:
    narrowKernel<<<blocksFor(count), kThreads, 0, stream>>>(source, static_cast<__nv_bfloat16*>(target), count);
    return cudaGetLastError();
  default: return cudaErrorInvalidValue;
  }
}

cudaError_t launchEpilogue(Storage storage, const void* pre, const void* z, void* y, int64_t count,
                           cudaStream_t stream) {
  if (count == 0)
    return cudaSuccess;
  switch (storage) {
  case Storage::F32: return epilogue<float>(pre, z, y, count, stream);
  case Storage::F16: return epilogue<__half>(pre, z, y, count, stream);
  case Storage::BF16: return epilogue<__nv_bfloat16>(pre, z, y, count, stream);
  case Storage::F64: return epilogue<double>(pre, z, y, count, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launchReluGrad(Storage storage, const void* dy, const void* y, void* g, int64_t count,
                           cudaStream_t stream) {
  if (count == 0)
    return cudaSuccess;
  switch (storage) {
  case Storage::F32: return reluGrad<float>(dy, y, g, count, stream);
  case Storage::F16: return reluGrad<__half>(dy, y, g, count, stream);
  case Storage::BF16: return reluGrad<__nv_bfloat16>(dy, y, g, count, stream);
  case Storage::F64: return reluGrad<double>(dy, y, g, count, stream);
  }
  return cudaErrorInvalidValue;
}

} // namespace ampjit::runtime::cuda::batchnorm
