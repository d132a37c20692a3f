#ifndef AMPJIT_RUNTIME_LIB_CUDA_BATCHNORMKERNELS_H
#define AMPJIT_RUNTIME_LIB_CUDA_BATCHNORMKERNELS_H

// The small kernels around cuDNN's batch norm (BatchNormKernels.cu), for
// what cuDNN is not asked to do (Cudnn.cpp, BatchNormStep):
//  * staging: f16/bf16 data widened to f32 and f32 results rounded back,
//    so batch norm computes in f32 and rounds once (the CPU's rule);
//  * the epilogue fallback, y = relu(pre [+ z]) rounded once, where pre is
//    the batch norm's output in the compute type (Plan.h, BatchNormActivation);
//  * the gradient fallback, g = y > 0 ? dy : 0 (exact), which the ordinary
//    batch-norm backward then differentiates.
// Plain C++17 so nvcc compiles the kernels without the runtime's headers.

#include "PoolingKernels.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ampjit::runtime::cuda::batchnorm {

/// The floating storage types (the compute type is f64 for F64, f32 otherwise).
using Storage = pooling::Storage;

/// f16/bf16 -> f32 (exact), and f32 -> f16/bf16 rounding to nearest even.
/// `storage` must be F16 or BF16.
cudaError_t launchWidenToF32(Storage storage, const void* source, float* target, int64_t count,
                             cudaStream_t stream);
cudaError_t launchNarrowFromF32(Storage storage, const float* source, void* target, int64_t count,
                                cudaStream_t stream);

/// y = relu(pre + z) (z may be null: relu(pre)), the relu being `v < 0 ? 0 :
/// v` as the CPU's; pre holds the compute type (f64 for F64, f32 otherwise)
/// and may be y itself when y is f32 or f64; z and y are in `storage`; y is
/// rounded once.
cudaError_t launchEpilogue(Storage storage, const void* pre, const void* z, void* y, int64_t count,
                           cudaStream_t stream);

/// g = y > 0 ? dy : 0, all three in `storage` (a select: exact).
cudaError_t launchReluGrad(Storage storage, const void* dy, const void* y, void* g, int64_t count,
                           cudaStream_t stream);

} // namespace ampjit::runtime::cuda::batchnorm

#endif // AMPJIT_RUNTIME_LIB_CUDA_BATCHNORMKERNELS_H
