#ifndef AMPJIT_RUNTIME_LIB_CUDA_MULTITENSOR_CUH
#define AMPJIT_RUNTIME_LIB_CUDA_MULTITENSOR_CUH

// The grid of a multi-tensor launch (the finiteness check, the optimizers,
// unscale, conversions, grouped layout copies): each block covers one chunk
// of one tensor. For .cu files only (nvcc, C++17).

#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>

namespace ampjit::runtime::cuda {

/// Which blocks of a multi-tensor launch cover which tensor: tensor t owns
/// blocks [firstBlock[t], firstBlock[t + 1]), each of them one chunk of the
/// tensor's units (elements, or 16-byte vectors for the finiteness check)
/// in order. The host fills it as tensors join a table (add) and launches
/// blocks() blocks.
template <int N>
struct BlockChunks {
  int32_t firstBlock[N + 1];

  /// Tensor `size`'s blocks start where the last tensor's end; false when
  /// the grid would pass what a launch takes.
  __host__ bool add(int size, int64_t units, int64_t unitsPerBlock) {
    int64_t next = int64_t(firstBlock[size]) + (units + unitsPerBlock - 1) / unitsPerBlock;
    if (next > int64_t(INT32_MAX))
      return false;
    firstBlock[size + 1] = int32_t(next);
    return true;
  }
  __host__ int32_t blocks(int size) const { return firstBlock[size]; }
};

/// This block's tensor and the index of its chunk within it, by binary
/// search over firstBlock (log2 of the table's size steps).
struct BlockChunk {
  int tensor;
  int64_t chunk;
};
template <int N>
__device__ BlockChunk blockChunk(const BlockChunks<N>& chunks, int size) {
  int32_t block = int32_t(blockIdx.x);
  int low = 0, high = size - 1; // the last t with firstBlock[t] <= block
  while (low < high) {
    int middle = (low + high + 1) / 2;
    if (chunks.firstBlock[middle] <= block)
      low = middle;
    else
      high = middle - 1;
  }
  return BlockChunk{low, int64_t(block - chunks.firstBlock[low])};
}

/// A multi-tensor launch's table, passed by value as one kernel argument
/// (keep it under the 4 KB parameter limit).
template <typename Tensor, int N>
struct TensorTable {
  static constexpr int kCapacity = N;
  Tensor tensors[N];
  BlockChunks<N> chunks;
  int size;
};

/// Puts `tensors` with elements (`count` > 0), in order, into Tables
/// (chunks of `chunkElements` per block) and calls `launch(table)` for each
/// full table and the last; the first error ends it.
template <typename Table, typename Tensor, typename Launch>
__host__ cudaError_t launchInTables(const Tensor* tensors, std::size_t tensorCount, int64_t chunkElements,
                                    Launch launch) {
  const int capacity = Table::kCapacity;
  Table table{};
  for (std::size_t k = 0; k < tensorCount; ++k) {
    if (tensors[k].count > 0) {
      if (!table.chunks.add(table.size, tensors[k].count, chunkElements))
        return cudaErrorInvalidValue;
      table.tensors[table.size++] = tensors[k];
    }
    bool last = k + 1 == tensorCount;
    if (table.size == capacity || (last && table.size > 0)) {
      cudaError_t error = launch(table);
      if (error != cudaSuccess)
        return error;
      table.size = 0;
    }
  }
  return cudaSuccess;
}

} // namespace ampjit::runtime::cuda

#endif // AMPJIT_RUNTIME_LIB_CUDA_MULTITENSOR_CUH
