#ifndef AMPJIT_RUNTIME_LIB_CUDA_DEVICESCALARS_CUH
#define AMPJIT_RUNTIME_LIB_CUDA_DEVICESCALARS_CUH

// The hand-written kernels' one rule for numbers, as the CPU kernels have it:
// a storage type is widened exactly into its compute type (f64 for f64, f32
// otherwise), the math runs there, and a stored result is rounded once to
// nearest even. For .cu files only (nvcc, C++17).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ampjit::runtime::cuda {

template <typename S> struct ComputeOf { using type = float; };
template <> struct ComputeOf<double> { using type = double; };
template <typename S> using Compute = typename ComputeOf<S>::type;

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ double widen(double v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename S> __device__ __forceinline__ S narrow(float v);
template <> __device__ __forceinline__ __half narrow<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ float narrow<float>(float v) { return v; }

/// A compute-type value stored as S (f64 stays f64).
template <typename S, typename T> __device__ __forceinline__ S store(T v) { return narrow<S>(v); }
template <> __device__ __forceinline__ double store<double, double>(double v) { return v; }

} // namespace ampjit::runtime::cuda

#endif // AMPJIT_RUNTIME_LIB_CUDA_DEVICESCALARS_CUH
