#ifndef AMPJIT_RUNTIME_LIB_CUDA_DEVICEINDEXING_CUH
#define AMPJIT_RUNTIME_LIB_CUDA_DEVICEINDEXING_CUH

// Element offsets of strided views in the hand-written kernels. For .cu
// files only (nvcc, C++17). Generated kernels print the same arithmetic
// (KernelSource.cpp's kernelBody).

#include <cstdint>

namespace ampjit::runtime::cuda {

/// The memory offset of row-major element `index` (below the product of
/// `sizes`) of a view of `rank` dimensions with element `strides`, in I.
/// The outermost coordinate is what is left of the index, so a rank-1 view
/// (a bias gradient's rows and columns) divides nothing; an int64_t index
/// divides in 32 bits when both operands fit. 64-bit division is a software
/// routine on the GPU: it made mlp9's bias-gradient sums and a ResNet's
/// weight transposes compute-bound on the H200.
template <typename I>
__device__ __forceinline__ I stridedOffset(int rank, const int64_t* sizes, const int64_t* strides, I index) {
  I offset = 0;
  for (int d = rank - 1; d > 0; --d) {
    I size = I(sizes[d]), quotient;
    if (sizeof(I) > sizeof(uint32_t) && ((uint64_t(index) | uint64_t(size)) >> 32) == 0)
      quotient = I(uint32_t(index) / uint32_t(size));
    else
      quotient = index / size;
    offset += (index - quotient * size) * I(strides[d]);
    index = quotient;
  }
  return rank > 0 ? offset + index * I(strides[0]) : offset;
}

} // namespace ampjit::runtime::cuda

#endif // AMPJIT_RUNTIME_LIB_CUDA_DEVICEINDEXING_CUH
