#ifndef AMPJIT_RUNTIME_LIB_CUDA_POOLINGKERNELS_H
#define AMPJIT_RUNTIME_LIB_CUDA_POOLINGKERNELS_H

// Launchers of the 2-D pooling kernels (PoolingKernels.cu). Plain C++17 so
// nvcc compiles the kernels without the runtime's C++20 headers; Cudnn.cpp
// turns plan steps into these descriptions.
//
// The kernels are ours rather than cuDNN's because they must reproduce the
// CPU kernel (runtime/lib/cpu/Pooling.cpp) exactly: PyTorch's ceil-mode
// windows, its count_include_pad divisor, the first-maximum tie rule and the
// last-NaN-wins rule, and a max gradient that recomputes the argmax from x
// (PyTorch keeps indices from the forward; the plan's op has none).
// They visit window elements, and gradients visit contributing windows, in
// the CPU's order, so every result is bit-identical to the CPU's.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ampjit::runtime::cuda::pooling {

/// The floating storage types; the compute type is f64 for F64, f32 otherwise.
enum class Storage : int { F32, F16, BF16, F64 };

enum class PoolKind : int { Max, Average };

/// One pooling in canonical terms (sizes, not layout positions); `nhwc`
/// picks the memory layout of x, y, dy and dx.
struct PoolGeometry {
  int64_t batch = 0, channels = 0, height = 0, width = 0;
  int64_t outHeight = 0, outWidth = 0;
  int64_t kernelH = 1, kernelW = 1, strideH = 1, strideW = 1, padH = 0, padW = 0;
  bool countIncludePad = true;
  bool nhwc = false;
  /// 64-bit index arithmetic even where 32 bits hold every offset.
  bool wideIndex = false;
};

/// y = pool(x), one thread per output element.
cudaError_t launchPool2d(Storage storage, PoolKind kind, const PoolGeometry& geometry, const void* x, void* y,
                         cudaStream_t stream);

/// Device scratch launchPool2dGrad needs: each max window's argmax offset.
std::size_t poolGradWorkspaceBytes(PoolKind kind, const PoolGeometry& geometry);

/// dx from dy (and x for max pooling; unused for average), one thread per
/// input element gathering the windows that route gradient to it; a max
/// gradient first stores the windows' argmaxes in `workspace` (at least
/// poolGradWorkspaceBytes, not read before the launch writes it).
cudaError_t launchPool2dGrad(Storage storage, PoolKind kind, const PoolGeometry& geometry, const void* dy,
                             const void* x, void* dx, void* workspace, cudaStream_t stream);

} // namespace ampjit::runtime::cuda::pooling

#endif // AMPJIT_RUNTIME_LIB_CUDA_POOLINGKERNELS_H
