// Data movement (broadcast_to, transpose, constant splats): element bytes
// are copied, never converted, so every dtype is exact (i1 is one byte).
// Launchers are declared in UpdateKernels.h.

#include "UpdateKernels.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace ampjit::runtime::cuda::update {

namespace {

/// Output element i (row-major over shape.dims) reads the input element its
/// multi-index selects through shape.inStrides.
template <typename Element>
__global__ void stridedCopyKernel(const Element* in, Element* out, int64_t count, StridedCopyShape shape) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, offset = 0;
    for (int d = shape.rank - 1; d >= 0; --d) {
      offset += (rest % shape.dims[d]) * shape.inStrides[d];
      rest /= shape.dims[d];
    }
    out[i] = in[offset];
  }
}

template <typename Element>
__global__ void fillKernel(Element* out, int64_t count, Element value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <typename Element>
cudaError_t stridedCopyAs(const void* in, void* out, int64_t count, const StridedCopyShape& shape,
                          cudaStream_t stream) {
  stridedCopyKernel<Element><<<blocksFor(count), kThreads, 0, stream>>>(static_cast<const Element*>(in),
                                                                        static_cast<Element*>(out), count, shape);
  return cudaGetLastError();
}

template <typename Element>
cudaError_t fillAs(void* out, int64_t count, uint64_t bits, cudaStream_t stream) {
  fillKernel<Element><<<blocksFor(count), kThreads, 0, stream>>>(static_cast<Element*>(out), count, Element(bits));
  return cudaGetLastError();
}

} // namespace

cudaError_t launchStridedCopy(const void* in, void* out, int64_t count, int32_t elementBytes,
                              const StridedCopyShape& shape, cudaStream_t stream) {
  if (count <= 0)
    return cudaSuccess;
  if (shape.rank < 0 || shape.rank > kMaxLayoutRank)
    return cudaErrorInvalidValue;
  switch (elementBytes) {
  case 1: return stridedCopyAs<uint8_t>(in, out, count, shape, stream);
  case 2: return stridedCopyAs<uint16_t>(in, out, count, shape, stream);
  case 4: return stridedCopyAs<uint32_t>(in, out, count, shape, stream);
  case 8: return stridedCopyAs<unsigned long long>(in, out, count, shape, stream);
  default: return cudaErrorInvalidValue;
  }
}

cudaError_t launchFill(void* out, int64_t count, int32_t elementBytes, uint64_t bits, cudaStream_t stream) {
  if (count <= 0)
    return cudaSuccess;
  switch (elementBytes) {
  case 1: return fillAs<uint8_t>(out, count, bits, stream);
  case 2: return fillAs<uint16_t>(out, count, bits, stream);
  case 4: return fillAs<uint32_t>(out, count, bits, stream);
  case 8: return fillAs<unsigned long long>(out, count, bits, stream);
  default: return cudaErrorInvalidValue;
  }
}

} // namespace ampjit::runtime::cuda::update
