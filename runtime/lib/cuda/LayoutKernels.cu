// Data movement (broadcast_to, transpose, constant splats): element bytes
// are copied, never converted, so every dtype is exact (i1 is one byte).
// Also the profile's stream hold, the other kernel that only moves words.
// Launchers are declared in UpdateKernels.h.

#include "UpdateKernels.h"
#include "DeviceIndexing.cuh"
#include "MultiTensor.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>

namespace ampjit::runtime::cuda::update {

namespace {

/// Output element i (row-major over shape.dims) reads the input element its
/// multi-index selects through shape.inStrides (stridedOffset). Index
/// arithmetic is in `I`: int32_t whenever every offset fits
/// (indexFitsInt32), because 64-bit division is a software routine on the
/// GPU and a rank-3 weight transpose spent its time there (18 us for 4.7 MB
/// on the H200).
template <typename Element, typename I>
__global__ void stridedCopyKernel(const Element* in, Element* out, I count, StridedCopyShape shape) {
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < count; i += I(gridDim.x) * I(blockDim.x))
    out[i] = in[stridedOffset<I>(shape.rank, shape.dims, shape.inStrides, i)];
}

/// Whether the output index (up to one grid stride past count) and every
/// input offset fit in int32_t.
bool indexFitsInt32(int64_t count, const StridedCopyShape& shape) {
  int64_t largestOffset = 0;
  for (int d = 0; d < shape.rank; ++d)
    largestOffset += (shape.dims[d] - 1) * shape.inStrides[d];
  int64_t limit = int64_t(INT32_MAX) - kMaxBlocks * kThreads;
  return count < limit && largestOffset < limit;
}

using StridedCopyTable = TensorTable<StridedCopyTensor, 32>;
static_assert(sizeof(StridedCopyTable) < 4096, "kernel arguments must stay under 4 KB");

/// Grouped layout copies (a ResNet's weight-gradient transposes): each block
/// one chunk of one tensor, every load before any store.
template <typename Element>
__global__ void stridedCopiesKernel(StridedCopyTable table) {
  BlockChunk at = blockChunk(table.chunks, table.size);
  const StridedCopyTensor& x = table.tensors[at.tensor];
  const Element* in = static_cast<const Element*>(x.in);
  int32_t begin = int32_t(at.chunk * kChunkElements) + int32_t(threadIdx.x);
  Element values[kElementsPerThread];
  for (int k = 0; k < kElementsPerThread; ++k) {
    int32_t i = begin + k * kThreads;
    if (i < x.count)
      values[k] = in[stridedOffset<int32_t>(x.rank, x.dims, x.inStrides, i)];
  }
  for (int k = 0; k < kElementsPerThread; ++k) {
    int32_t i = begin + k * kThreads;
    if (i < x.count)
      static_cast<Element*>(x.out)[i] = values[k];
  }
}

template <typename Element>
cudaError_t stridedCopiesAs(const StridedCopyTensor* tensors, std::size_t tensorCount, cudaStream_t stream) {
  auto launch = [&](const StridedCopyTable& table) {
    unsigned blocks = unsigned(table.chunks.blocks(table.size));
    stridedCopiesKernel<Element><<<blocks, kThreads, 0, stream>>>(table);
    return cudaGetLastError();
  };
  return launchInTables<StridedCopyTable>(tensors, tensorCount, kChunkElements, launch);
}

__global__ void streamHoldKernel(StreamHold* hold, long long maxPolls) {
  long long polls = 0;
  while (hold->released == 0 && polls < maxPolls)
    ++polls;
  if (hold->released == 0)
    hold->gaveUp = 1;
}

/// The device's global nanosecond timer (PTX %globaltimer). The CUDA
/// emulation compiles this file for the host, where the steady clock stands in.
__device__ inline unsigned long long globalTimerNanoseconds() {
#ifdef __CUDA_ARCH__
  unsigned long long nanoseconds;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(nanoseconds));
  return nanoseconds;
#else
  return (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
#endif
}

__global__ void timelineStampKernel(unsigned long long* slot) { *slot = globalTimerNanoseconds(); }

template <typename Element>
__global__ void fillKernel(Element* out, int64_t count, Element value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <typename Element>
cudaError_t stridedCopyAs(const void* in, void* out, int64_t count, const StridedCopyShape& shape,
                          cudaStream_t stream) {
  if (!shape.wideIndex && indexFitsInt32(count, shape))
    stridedCopyKernel<Element, int32_t><<<blocksFor(count), kThreads, 0, stream>>>(
        static_cast<const Element*>(in), static_cast<Element*>(out), int32_t(count), shape);
  else
    stridedCopyKernel<Element, int64_t><<<blocksFor(count), kThreads, 0, stream>>>(
        static_cast<const Element*>(in), static_cast<Element*>(out), count, shape);
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

bool groupsStridedCopy(int64_t count, const StridedCopyShape& shape) {
  // The chunk index times the chunk, plus a chunk, must fit too.
  return !shape.wideIndex && shape.rank <= kMaxGroupedCopyRank && count + kChunkElements < int64_t(INT32_MAX) &&
         indexFitsInt32(count, shape);
}

cudaError_t launchStridedCopies(int32_t elementBytes, const StridedCopyTensor* tensors, std::size_t tensorCount,
                                cudaStream_t stream) {
  for (std::size_t k = 0; k < tensorCount; ++k)
    if (tensors[k].rank < 0 || tensors[k].rank > kMaxGroupedCopyRank)
      return cudaErrorInvalidValue;
  switch (elementBytes) {
  case 1: return stridedCopiesAs<uint8_t>(tensors, tensorCount, stream);
  case 2: return stridedCopiesAs<uint16_t>(tensors, tensorCount, stream);
  case 4: return stridedCopiesAs<uint32_t>(tensors, tensorCount, stream);
  case 8: return stridedCopiesAs<unsigned long long>(tensors, tensorCount, stream);
  default: return cudaErrorInvalidValue;
  }
}

cudaError_t launchStreamHold(StreamHold* hold, long long maxPolls, cudaStream_t stream) {
  streamHoldKernel<<<1, 1, 0, stream>>>(hold, maxPolls);
  return cudaGetLastError();
}

cudaError_t launchTimelineStamp(unsigned long long* slot, cudaStream_t stream) {
  timelineStampKernel<<<1, 1, 0, stream>>>(slot);
  return cudaGetLastError();
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
