// The numeric kernels: reductions, the softmax family, layer norm, losses
// and dropout. Each mirrors its CPU kernel (runtime/lib/cpu/Normalization.cpp,
// Losses.cpp, Layout.cpp) expression by expression, so that values, dtypes,
// NaN/inf propagation and edge cases agree; only sums run as parallel trees
// instead of the CPU's sequential order. Row-wise work runs one block per
// row (grid-stride over rows, so every thread of a block takes the same
// path and may join the block reductions).

#include "NumericKernels.h"
#include "DeviceIndexing.cuh"
#include "DeviceScalars.cuh"

#include "ampjit/runtime/cuda/ColumnTile.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

namespace ampjit::runtime::cuda::numeric {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

//===----------------------------------------------------------------------===//
// Widening loads, rounding stores, math in the compute type
//===----------------------------------------------------------------------===//

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(double* p, double v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

__device__ __forceinline__ float dexp(float v) { return expf(v); }
__device__ __forceinline__ double dexp(double v) { return exp(v); }
__device__ __forceinline__ float dlog(float v) { return logf(v); }
__device__ __forceinline__ double dlog(double v) { return log(v); }
__device__ __forceinline__ float dsqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double dsqrt(double v) { return sqrt(v); }

__device__ __forceinline__ float negativeInfinity(float) { return -__int_as_float(0x7f800000); }
__device__ __forceinline__ double negativeInfinity(double) { return -__longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ float quietNaN(float) { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double quietNaN(double) { return __longlong_as_double(0x7ff8000000000000LL); }

/// The CPU's max step: a NaN value replaces the accumulator and a NaN
/// accumulator is never replaced, so max propagates NaN in any order.
template <typename T> __device__ __forceinline__ T maxCombine(T acc, T value) {
  return (value > acc || value != value) ? value : acc;
}

struct SumOp {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <typename T> __device__ T operator()(T a, T b) const { return maxCombine(a, b); }
};

/// Combines one value per thread of a kThreads-thread block; every thread
/// gets the result. Every thread of the block must call it.
template <typename T, typename Op> __device__ T blockReduce(T value, Op op) {
  __shared__ T shared[kThreads];
  __syncthreads(); // a previous call's readers are done with shared[0]
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half)
      shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  return shared[0];
}

unsigned blocksFor(int64_t items) { return unsigned(std::min<int64_t>(std::max<int64_t>(items, 1), kMaxBlocks)); }
unsigned blocksForElements(int64_t count) { return blocksFor((count + kThreads - 1) / kThreads); }

/// Calls f with a value of the storage type.
template <typename F> cudaError_t dispatch(Storage storage, F&& f) {
  switch (storage) {
  case Storage::F32: return f(float{});
  case Storage::F16: return f(__half{});
  case Storage::BF16: return f(__nv_bfloat16{});
  case Storage::F64: return f(double{});
  }
  return cudaErrorInvalidValue;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

__device__ int64_t keptOffset(const ReductionGeometry& g, int64_t index) {
  return stridedOffset(g.keptRank, g.keptSizes, g.keptStrides, index);
}

__device__ int64_t reducedOffset(const ReductionGeometry& g, int64_t index) {
  return stridedOffset(g.reducedRank, g.reducedSizes, g.reducedStrides, index);
}

template <typename T> __device__ T reduceIdentity(const ReductionGeometry& g) {
  return g.op == ReduceKind::Max ? negativeInfinity(T()) : T(0);
}

template <typename T> __device__ T reduceCombine(const ReductionGeometry& g, T acc, T value) {
  return g.op == ReduceKind::Max ? maxCombine(acc, value) : acc + value;
}

template <typename T> __device__ T reduceFinish(const ReductionGeometry& g, T acc) {
  return g.op == ReduceKind::Mean ? acc / T(g.reducedCount) : acc;
}

// The reductions read In and store S, computing in Compute<S>. In is S but
// for a widened sum (f16/bf16 read into an f32 sum): widening is exact, so
// it gives the bits of a sum over the converted input.

/// Few reduced elements: one thread per output, sequential (the CPU's order).
template <typename In, typename S> __global__ void reduceSmallKernel(ReductionGeometry g, const In* x, S* y) {
  using T = Compute<S>;
  for (int64_t out = int64_t(blockIdx.x) * kThreads + threadIdx.x; out < g.outputCount;
       out += int64_t(gridDim.x) * kThreads) {
    int64_t base = keptOffset(g, out);
    T acc;
    if (g.reducedRank == 0) { // a rank-0 input: the CPU copies the element
      acc = widen(x[base]);
    } else {
      acc = reduceIdentity<T>(g);
      for (int64_t r = 0; r < g.reducedCount; ++r)
        acc = reduceCombine(g, acc, T(widen(x[base + reducedOffset(g, r)])));
    }
    store(y + out, reduceFinish(g, acc));
  }
}

/// Many reduced elements: one block per output.
template <typename In, typename S> __global__ void reduceBlockKernel(ReductionGeometry g, const In* x, S* y) {
  using T = Compute<S>;
  for (int64_t out = blockIdx.x; out < g.outputCount; out += gridDim.x) {
    int64_t base = keptOffset(g, out);
    T acc = reduceIdentity<T>(g);
    for (int64_t r = threadIdx.x; r < g.reducedCount; r += kThreads)
      acc = reduceCombine(g, acc, T(widen(x[base + reducedOffset(g, r)])));
    acc = g.op == ReduceKind::Max ? blockReduce(acc, MaxOp{}) : blockReduce(acc, SumOp{});
    if (threadIdx.x == 0)
      store(y + out, reduceFinish(g, acc));
  }
}

/// Split reductions, stage one: block b reduces chunk b % splits of output
/// b / splits into partials[b] (not finished: mean divides in stage two).
template <typename In, typename S>
__global__ void reducePartialKernel(ReductionGeometry g, int64_t splits, int64_t chunk, const In* x,
                                    Compute<S>* partials) {
  using T = Compute<S>;
  for (int64_t b = blockIdx.x; b < g.outputCount * splits; b += gridDim.x) {
    int64_t out = b / splits, begin = (b % splits) * chunk;
    int64_t end = begin + chunk < g.reducedCount ? begin + chunk : g.reducedCount;
    int64_t base = keptOffset(g, out);
    T acc = reduceIdentity<T>(g);
    for (int64_t r = begin + threadIdx.x; r < end; r += kThreads)
      acc = reduceCombine(g, acc, T(widen(x[base + reducedOffset(g, r)])));
    acc = g.op == ReduceKind::Max ? blockReduce(acc, MaxOp{}) : blockReduce(acc, SumOp{});
    if (threadIdx.x == 0)
      partials[b] = acc;
  }
}

// The generated column-summed kernels (KernelSource.h) tile as this kernel
// does and add in its order (ColumnTile.h).
constexpr int kColumnOutputs = kColumnTileColumns, kColumnLanes = kColumnTileLanes;

/// Rows a column lane loads before it adds any of them (the additions keep
/// their order). mlp9's f16 bias gradients (2048 x 8192) were summed at
/// 1.3 TB/s on the H100 (0.026 ms each) with one row of one column in flight
/// per thread, 64 bytes a warp request, and at 0.9 TB/s on an H200 with four
/// rows (another card: no A/B). Far from either card's bandwidth, so the
/// kernel waits on memory latency: 16 rows of two columns (kColumnLoadBytes)
/// give each thread 64 bytes in flight and each warp request a whole
/// 128-byte line. Not yet measured on a GPU (2026-11-27).
constexpr int kColumnRowsInFlight = 16;

/// Bytes a thread loads from each row it adds: two f16/bf16 outputs' elements
/// at once, so that a warp reads 128 consecutive bytes of the row, as one f32
/// output each already does.
constexpr int kColumnLoadBytes = 4;

/// Consecutive outputs one thread of the column kernel sums.
template <typename In> constexpr int columnsPerThread() {
  return sizeof(In) >= kColumnLoadBytes ? 1 : int(kColumnLoadBytes / sizeof(In));
}

/// The elements of V consecutive outputs in one row: one aligned load.
template <typename In, int V> struct alignas(sizeof(In) * V) ColumnVector {
  In values[V];
};

/// One row's elements of V consecutive outputs, in one load. The host build
/// (the tests' CUDA emulation) stops where the device would fault on a
/// misaligned vector.
template <int V, typename In> __device__ __forceinline__ ColumnVector<In, V> loadColumns(const In* at) {
#if !defined(__CUDA_ARCH__)
  if (reinterpret_cast<std::uintptr_t>(at) % alignof(ColumnVector<In, V>) != 0)
    __builtin_trap();
#endif
  return *reinterpret_cast<const ColumnVector<In, V>*>(at);
}

/// Outputs whose innermost kept dimension is contiguous (a bias gradient's
/// sum over rows): 32 threads per block, each summing V consecutive outputs
/// (columnsLoadAsVectors says when V > 1 may load them as one vector), so
/// loads coalesce; 8 lanes striding over the block's part of the reduced
/// range (blockIdx.y of gridDim.y parts of `chunk` elements), lanes combined
/// in order. Each output adds in the same order whatever V is. One part
/// stores the finished outputs, several write partials[out * parts + part].
template <int V, typename In, typename S>
__global__ void reduceColumnsKernel(ReductionGeometry g, int64_t chunk, const In* x, S* y, Compute<S>* partials) {
  using T = Compute<S>;
  using Vector = ColumnVector<In, V>;
  constexpr int kTileOutputs = kColumnOutputs * V;
  __shared__ T lanes[kColumnLanes][kTileOutputs];
  int64_t begin = int64_t(blockIdx.y) * chunk;
  int64_t end = begin + chunk < g.reducedCount ? begin + chunk : g.reducedCount;
  for (int64_t tile = blockIdx.x; tile * kTileOutputs < g.outputCount; tile += gridDim.x) {
    int64_t first = tile * kTileOutputs + int64_t(threadIdx.x) * V;
    T acc[V];
    for (int j = 0; j < V; ++j)
      acc[j] = reduceIdentity<T>(g);
    if (first < g.outputCount) {
      const In* columns = x + keptOffset(g, first);
      int64_t r = begin + threadIdx.y;
      for (; r + (kColumnRowsInFlight - 1) * kColumnLanes < end; r += kColumnRowsInFlight * kColumnLanes) {
        // Unrolled, so that the rows stay in registers.
        Vector rows[kColumnRowsInFlight];
#pragma unroll
        for (int k = 0; k < kColumnRowsInFlight; ++k)
          rows[k] = loadColumns<V>(columns + reducedOffset(g, r + k * kColumnLanes));
#pragma unroll
        for (int k = 0; k < kColumnRowsInFlight; ++k)
#pragma unroll
          for (int j = 0; j < V; ++j)
            acc[j] = reduceCombine(g, acc[j], T(widen(rows[k].values[j])));
      }
      for (; r < end; r += kColumnLanes) {
        Vector row = loadColumns<V>(columns + reducedOffset(g, r));
        for (int j = 0; j < V; ++j)
          acc[j] = reduceCombine(g, acc[j], T(widen(row.values[j])));
      }
    }
    for (int j = 0; j < V; ++j)
      lanes[threadIdx.y][threadIdx.x * V + j] = acc[j];
    __syncthreads();
    if (threadIdx.y == 0 && first < g.outputCount) {
      for (int j = 0; j < V; ++j) {
        T total = lanes[0][threadIdx.x * V + j];
        for (int lane = 1; lane < kColumnLanes; ++lane)
          total = reduceCombine(g, total, lanes[lane][threadIdx.x * V + j]);
        if (gridDim.y == 1)
          store(y + first + j, reduceFinish(g, total));
        else
          partials[(first + j) * gridDim.y + blockIdx.y] = total;
      }
    }
    __syncthreads();
  }
}

/// Stage two: one thread per output combines its partials in order.
template <typename S>
__global__ void reduceCombinePartialsKernel(ReductionGeometry g, int64_t splits, const Compute<S>* partials, S* y) {
  using T = Compute<S>;
  for (int64_t out = int64_t(blockIdx.x) * kThreads + threadIdx.x; out < g.outputCount;
       out += int64_t(gridDim.x) * kThreads) {
    T acc = reduceIdentity<T>(g);
    for (int64_t s = 0; s < splits; ++s)
      acc = reduceCombine(g, acc, partials[out * splits + s]);
    store(y + out, reduceFinish(g, acc));
  }
}

//===----------------------------------------------------------------------===//
// Softmax family
//===----------------------------------------------------------------------===//

template <typename S>
__global__ void softmaxKernel(SoftmaxKind kind, AxisGeometry g, const S* first, const S* second, S* out) {
  using T = Compute<S>;
  int64_t rows = g.outer * g.inner;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t base = (row / g.inner) * g.length * g.inner + row % g.inner, stride = g.inner;
    if (kind == SoftmaxKind::Softmax || kind == SoftmaxKind::LogSoftmax) {
      T max = negativeInfinity(T());
      for (int64_t j = threadIdx.x; j < g.length; j += kThreads)
        max = maxCombine(max, T(widen(first[base + j * stride])));
      max = blockReduce(max, MaxOp{});
      T sum = 0;
      for (int64_t j = threadIdx.x; j < g.length; j += kThreads)
        sum += dexp(T(widen(first[base + j * stride])) - max);
      sum = blockReduce(sum, SumOp{});
      if (kind == SoftmaxKind::Softmax) {
        for (int64_t j = threadIdx.x; j < g.length; j += kThreads)
          store(out + base + j * stride, dexp(T(widen(first[base + j * stride])) - max) / sum);
      } else {
        T logSum = dlog(sum);
        for (int64_t j = threadIdx.x; j < g.length; j += kThreads)
          store(out + base + j * stride, T(widen(first[base + j * stride])) - max - logSum);
      }
    } else if (kind == SoftmaxKind::SoftmaxGrad) {
      T dot = 0;
      for (int64_t j = threadIdx.x; j < g.length; j += kThreads)
        dot += T(widen(first[base + j * stride])) * T(widen(second[base + j * stride]));
      dot = blockReduce(dot, SumOp{});
      for (int64_t j = threadIdx.x; j < g.length; j += kThreads) {
        T dy = widen(first[base + j * stride]), y = widen(second[base + j * stride]);
        store(out + base + j * stride, y * (dy - dot));
      }
    } else {
      T sum = 0;
      for (int64_t j = threadIdx.x; j < g.length; j += kThreads)
        sum += T(widen(first[base + j * stride]));
      sum = blockReduce(sum, SumOp{});
      for (int64_t j = threadIdx.x; j < g.length; j += kThreads) {
        T dy = widen(first[base + j * stride]), y = widen(second[base + j * stride]);
        store(out + base + j * stride, dy - dexp(y) * sum);
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Layer norm
//===----------------------------------------------------------------------===//

template <typename S>
__global__ void layerNormKernel(RowGeometry g, double eps, const S* x, const S* weight, const S* bias, S* y,
                                Compute<S>* means, Compute<S>* rstds) {
  using T = Compute<S>;
  T epsilon = T(eps);
  for (int64_t row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const S* xRow = x + row * g.cols;
    // Two passes (mean, then centred squares), as the CPU.
    T sum = 0;
    for (int64_t c = threadIdx.x; c < g.cols; c += kThreads)
      sum += T(widen(xRow[c]));
    sum = blockReduce(sum, SumOp{});
    T mean = sum / T(g.cols);
    T squares = 0;
    for (int64_t c = threadIdx.x; c < g.cols; c += kThreads) {
      T centred = T(widen(xRow[c])) - mean;
      squares += centred * centred;
    }
    squares = blockReduce(squares, SumOp{});
    T rstd = T(1) / dsqrt(squares / T(g.cols) + epsilon);
    for (int64_t c = threadIdx.x; c < g.cols; c += kThreads) {
      T w = weight ? T(widen(weight[c])) : T(1);
      T b = bias ? T(widen(bias[c])) : T(0);
      store(y + row * g.cols + c, (T(widen(xRow[c])) - mean) * rstd * w + b);
    }
    if (threadIdx.x == 0) {
      means[row] = mean;
      rstds[row] = rstd;
    }
  }
}

template <typename S>
__global__ void layerNormGradInputKernel(RowGeometry g, const S* dy, const S* x, const Compute<S>* means,
                                         const Compute<S>* rstds, const S* weight, S* dx) {
  using T = Compute<S>;
  for (int64_t row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const S* dyRow = dy + row * g.cols;
    const S* xRow = x + row * g.cols;
    T mean = means[row], rstd = rstds[row];
    T sumG = 0, sumGXhat = 0;
    for (int64_t c = threadIdx.x; c < g.cols; c += kThreads) {
      T xhat = (T(widen(xRow[c])) - mean) * rstd;
      T gradient = T(widen(dyRow[c])) * (weight ? T(widen(weight[c])) : T(1));
      sumG += gradient;
      sumGXhat += gradient * xhat;
    }
    sumG = blockReduce(sumG, SumOp{});
    sumGXhat = blockReduce(sumGXhat, SumOp{});
    T meanG = sumG / T(g.cols), meanGXhat = sumGXhat / T(g.cols);
    for (int64_t c = threadIdx.x; c < g.cols; c += kThreads) {
      T xhat = (T(widen(xRow[c])) - mean) * rstd;
      T gradient = T(widen(dyRow[c])) * (weight ? T(widen(weight[c])) : T(1));
      store(dx + row * g.cols + c, rstd * (gradient - meanG - xhat * meanGXhat));
    }
  }
}

constexpr int kColumnTile = 32, kRowLanes = 8;

/// dweight and dbias: 32 columns per block, 8 row lanes each summing every
/// 8th row of the block's row range (blockIdx.y picks one of gridDim.y
/// ranges of rowChunk rows), then the lanes in order. One range stores the
/// results; several write per-range partials for layerNormGradParamsCombineKernel.
template <typename S>
__global__ void layerNormGradParamsKernel(RowGeometry g, int64_t rowChunk, const S* dy, const S* x,
                                          const Compute<S>* means, const Compute<S>* rstds, S* dweight, S* dbias,
                                          Compute<S>* partials) {
  using T = Compute<S>;
  __shared__ T partialWeight[kRowLanes][kColumnTile];
  __shared__ T partialBias[kRowLanes][kColumnTile];
  int64_t rowBegin = int64_t(blockIdx.y) * rowChunk;
  int64_t rowEnd = rowBegin + rowChunk < g.rows ? rowBegin + rowChunk : g.rows;
  for (int64_t tile = blockIdx.x; tile * kColumnTile < g.cols; tile += gridDim.x) {
    int64_t c = tile * kColumnTile + threadIdx.x;
    T w = 0, b = 0;
    if (c < g.cols)
      for (int64_t r = rowBegin + threadIdx.y; r < rowEnd; r += kRowLanes) {
        T d = widen(dy[r * g.cols + c]);
        T xhat = (T(widen(x[r * g.cols + c])) - means[r]) * rstds[r];
        w += d * xhat;
        b += d;
      }
    partialWeight[threadIdx.y][threadIdx.x] = w;
    partialBias[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < g.cols) {
      T totalWeight = 0, totalBias = 0;
      for (int lane = 0; lane < kRowLanes; ++lane) {
        totalWeight += partialWeight[lane][threadIdx.x];
        totalBias += partialBias[lane][threadIdx.x];
      }
      if (gridDim.y == 1) {
        if (dweight)
          store(dweight + c, totalWeight);
        if (dbias)
          store(dbias + c, totalBias);
      } else {
        // partials: [2][ranges][cols], weight then bias.
        partials[int64_t(blockIdx.y) * g.cols + c] = totalWeight;
        partials[(int64_t(gridDim.y) + blockIdx.y) * g.cols + c] = totalBias;
      }
    }
    __syncthreads();
  }
}

template <typename S>
__global__ void layerNormGradParamsCombineKernel(RowGeometry g, int64_t ranges, const Compute<S>* partials,
                                                 S* dweight, S* dbias) {
  using T = Compute<S>;
  for (int64_t c = int64_t(blockIdx.x) * kThreads + threadIdx.x; c < g.cols; c += int64_t(gridDim.x) * kThreads) {
    T totalWeight = 0, totalBias = 0;
    for (int64_t range = 0; range < ranges; ++range) {
      totalWeight += partials[range * g.cols + c];
      totalBias += partials[(ranges + range) * g.cols + c];
    }
    if (dweight)
      store(dweight + c, totalWeight);
    if (dbias)
      store(dbias + c, totalBias);
  }
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

template <typename S>
__global__ void mseElementsKernel(int64_t count, const S* input, const S* target, S* out) {
  using T = Compute<S>;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < count; i += int64_t(gridDim.x) * kThreads) {
    T difference = T(widen(input[i])) - T(widen(target[i]));
    store(out + i, difference * difference);
  }
}

/// Stage one of a reduced mse: block b sums its grid-stride share of the
/// squared differences into partials[b].
template <typename S>
__global__ void msePartialKernel(int64_t count, const S* input, const S* target, Compute<S>* partials) {
  using T = Compute<S>;
  T total = 0;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < count; i += int64_t(gridDim.x) * kThreads) {
    T difference = T(widen(input[i])) - T(widen(target[i]));
    total += difference * difference;
  }
  total = blockReduce(total, SumOp{});
  if (threadIdx.x == 0)
    partials[blockIdx.x] = total;
}

/// Stage two, one block: the sum of the partials, divided by the element
/// count for mean (0/0 = NaN for an empty input, as the CPU).
template <typename S>
__global__ void mseTotalKernel(LossGeometry g, int64_t partialCount, const Compute<S>* partials, S* out) {
  using T = Compute<S>;
  T total = 0;
  for (int64_t i = threadIdx.x; i < partialCount; i += kThreads)
    total += partials[i];
  total = blockReduce(total, SumOp{});
  if (threadIdx.x == 0)
    store(out, g.reduction == LossReduction::Mean ? total / T(g.count) : total);
}

__device__ __forceinline__ bool labelInRange(const LossGeometry& g, int64_t label) {
  return label >= 0 && label < g.classes;
}

/// The threads that work on one row together, and their reductions (every
/// thread of the team must call them and gets the result): a whole block,
/// or one warp of a block that works on several rows at once.
struct BlockTeam {
  __device__ int lane() const { return threadIdx.x; }
  __device__ int size() const { return kThreads; }
  template <typename T> __device__ T sum(T value) const { return blockReduce(value, SumOp{}); }
  template <typename T> __device__ T max(T value) const { return blockReduce(value, MaxOp{}); }
};
struct WarpTeam {
  __device__ int lane() const { return threadIdx.x % 32; }
  __device__ int size() const { return 32; }
  // A butterfly: every lane combines the same pairs (up to their order, and
  // + and max commute), so every lane gets the same bits.
  template <typename T, typename Op> __device__ T reduce(T value, Op op) const {
    for (int offset = 16; offset > 0; offset /= 2)
      value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
    return value;
  }
  template <typename T> __device__ T sum(T value) const { return reduce(value, SumOp{}); }
  template <typename T> __device__ T max(T value) const { return reduce(value, MaxOp{}); }
};

/// log(sum(exp(row))) as the CPU's logSumExp: max + log(sum exp(x - max)).
template <typename S, typename Team> __device__ Compute<S> logSumExp(const S* row, int64_t classes, Team team) {
  using T = Compute<S>;
  T max = negativeInfinity(T());
  for (int64_t c = team.lane(); c < classes; c += team.size())
    max = maxCombine(max, T(widen(row[c])));
  max = team.max(max);
  T sum = 0;
  for (int64_t c = team.lane(); c < classes; c += team.size())
    sum += dexp(T(widen(row[c])) - max);
  sum = team.sum(sum);
  return max + dlog(sum);
}

/// Row n's log(sum(exp(row))) where its cross-entropy loss or gradient needs
/// it (a counted row of a cross-entropy), else 0: computed once for a row
/// whose loss and gradient one launch writes.
template <typename S, typename Team>
__device__ Compute<S> rowLogSumExp(const LossGeometry& g, const S* input, const int64_t* labels, int64_t n,
                                   Team team) {
  int64_t label = labels[n];
  if (g.loss == LossKind::Nll || label == g.ignoreIndex || !labelInRange(g, label))
    return Compute<S>(0);
  return logSumExp(input + n * g.classes, g.classes, team);
}

/// Row n's cross-entropy or nll loss, on every thread of the team, from
/// its rowLogSumExp. Ignored rows are 0; a label outside [0, classes) that
/// is not ignored is an error on the CPU, which a kernel cannot report: its
/// row becomes NaN.
template <typename S, typename Team>
__device__ Compute<S> classificationRowLoss(const LossGeometry& g, const S* input, const int64_t* labels, int64_t n,
                                            Compute<S> lse, Team team) {
  using T = Compute<S>;
  int64_t label = labels[n];
  if (label == g.ignoreIndex || !labelInRange(g, label))
    return label == g.ignoreIndex ? T(0) : quietNaN(T());
  const S* row = input + n * g.classes;
  if (g.loss == LossKind::Nll)
    return -T(widen(row[label]));
  T nll = lse - T(widen(row[label]));
  if (g.labelSmoothing == 0.0)
    return nll;
  // The uniform part: mean over classes of -log_softmax = lse - mean(row).
  T rowSum = 0;
  for (int64_t c = team.lane(); c < g.classes; c += team.size())
    rowSum += T(widen(row[c]));
  rowSum = team.sum(rowSum);
  T uniform = lse - rowSum / T(g.classes);
  T smoothing = T(g.labelSmoothing);
  return (T(1) - smoothing) * nll + smoothing * uniform;
}

/// The per-row loss of cross-entropy or nll into perRow (the output itself
/// for reduction none, else the compute-type workspace): one block per row.
template <typename S, typename O>
__global__ void classificationRowsKernel(LossGeometry g, const S* input, const int64_t* labels, O* perRow) {
  for (int64_t n = blockIdx.x; n < g.rows; n += gridDim.x) {
    auto lse = rowLogSumExp(g, input, labels, n, BlockTeam{});
    auto value = classificationRowLoss(g, input, labels, n, lse, BlockTeam{});
    if (threadIdx.x == 0)
      store(perRow + n, value);
  }
}

/// Whether row n's label is counted (not ignored, in range; the CPU fails
/// on any other label).
__device__ __forceinline__ bool rowCounted(const LossGeometry& g, const int64_t* labels, int64_t n) {
  return labels[n] != g.ignoreIndex && labelInRange(g, labels[n]);
}

/// One block: how many rows are counted.
__device__ long long blockCountRows(const LossGeometry& g, const int64_t* labels) {
  long long counted = 0;
  for (int64_t n = threadIdx.x; n < g.rows; n += kThreads)
    counted += rowCounted(g, labels, n) ? 1 : 0;
  return blockReduce(counted, SumOp{});
}

/// One warp: how many rows are counted, on every lane. Each warp of a small
/// loss's block counts them all: no block-wide reduction (a barrier per
/// halving) before the rows' work, and the labels are then in L1.
__device__ long long warpCountRows(const LossGeometry& g, const int64_t* labels) {
  long long counted = 0;
  for (int64_t n = threadIdx.x % 32; n < g.rows; n += 32)
    counted += rowCounted(g, labels, n) ? 1 : 0;
  return WarpTeam{}.sum(counted);
}

constexpr int kWarps = kThreads / 32;

/// The end of a one-block loss whose warps each summed their rows in order
/// into `total` (the same on every lane): thread 0 adds the warps' totals in
/// warp order, divides by the counted rows for mean (0/0 = NaN when every
/// row is ignored, as the CPU and PyTorch) and stores the loss. Every thread
/// of the block calls it; it synchronises the block, after which the block's
/// earlier global stores are visible to all of it.
template <int Warps = kWarps, typename T, typename O>
__device__ void storeBlockLoss(const LossGeometry& g, T total, long long counted, O* out) {
  __shared__ T warpTotals[Warps];
  if (threadIdx.x % 32 == 0)
    warpTotals[threadIdx.x / 32] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    T sum = 0;
    for (int w = 0; w < Warps; ++w)
      sum += warpTotals[w];
    store(out, g.reduction == LossReduction::Mean ? sum / T(counted) : sum);
  }
}

/// A small reduced loss in one launch (a classifier's batch): one block,
/// each warp summing its rows in order, the warps' sums added in order.
template <typename S>
__global__ void classificationSmallKernel(LossGeometry g, const S* input, const int64_t* labels, S* out) {
  using T = Compute<S>;
  long long counted = blockCountRows(g, labels);
  T total = 0;
  for (int64_t n = threadIdx.x / 32; n < g.rows; n += kWarps) {
    auto lse = rowLogSumExp(g, input, labels, n, WarpTeam{});
    total += classificationRowLoss(g, input, labels, n, lse, WarpTeam{});
  }
  storeBlockLoss(g, total, counted, out);
}

/// One block: the sum of the per-row losses, divided by the counted rows for
/// mean (0/0 = NaN when every row is ignored, as the CPU and PyTorch).
template <typename S>
__global__ void classificationTotalKernel(LossGeometry g, const Compute<S>* perRow, const int64_t* labels, S* out) {
  using T = Compute<S>;
  T total = 0;
  for (int64_t n = threadIdx.x; n < g.rows; n += kThreads)
    total += perRow[n];
  total = blockReduce(total, SumOp{});
  long long counted = blockCountRows(g, labels);
  if (threadIdx.x == 0)
    store(out, g.reduction == LossReduction::Mean ? total / T(counted) : total);
}

__global__ void countRowsKernel(LossGeometry g, const int64_t* labels, long long* counted) {
  long long value = blockCountRows(g, labels);
  if (threadIdx.x == 0)
    *counted = value;
}

template <typename S>
__global__ void mseGradKernel(LossGeometry g, double norm, const S* gradOutput, const S* input, const S* target,
                              S* grad) {
  using T = Compute<S>;
  T normT = T(norm);
  bool perElement = g.reduction == LossReduction::None;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < g.count; i += int64_t(gridDim.x) * kThreads) {
    T incoming = widen(gradOutput[perElement ? i : 0]);
    store(grad + i, normT * (T(widen(input[i])) - T(widen(target[i]))) * incoming);
  }
}

/// Row n of the cross-entropy or nll gradient, by a team (every thread of it
/// calls this): `put(index, value)` stores element `index` of the gradient
/// (in the compute type). `countedRows` divides for mean. Rows with an
/// out-of-range label become NaN.
template <typename S, typename G, typename Team, typename Put>
__device__ void writeClassificationGradRow(const LossGeometry& g, const G* gradOutput, const S* input,
                                           const int64_t* labels, long long countedRows, int64_t n, Compute<S> lse,
                                           Team team, Put put) {
  using T = Compute<S>;
  int64_t label = labels[n];
  int64_t first = n * g.classes;
  if (label == g.ignoreIndex || !labelInRange(g, label)) {
    T value = label == g.ignoreIndex ? T(0) : quietNaN(T());
    for (int64_t c = team.lane(); c < g.classes; c += team.size())
      put(first + c, value);
    return;
  }
  T scale = T(widen(gradOutput[g.reduction == LossReduction::None ? n : 0]));
  if (g.reduction == LossReduction::Mean)
    scale /= T(countedRows);
  if (g.loss == LossKind::Nll) {
    for (int64_t c = team.lane(); c < g.classes; c += team.size())
      put(first + c, c == label ? -scale : T(0));
    return;
  }
  const S* row = input + first;
  T smoothing = T(g.labelSmoothing);
  T uniform = smoothing / T(g.classes);
  for (int64_t c = team.lane(); c < g.classes; c += team.size()) {
    T probability = dexp(T(widen(row[c])) - lse);
    T wanted = (c == label ? T(1) - smoothing : T(0)) + uniform;
    put(first + c, scale * (probability - wanted));
  }
}

/// Stores into one gradient buffer, rounding once.
template <typename S> struct StoreInto {
  S* grad;
  template <typename T> __device__ void operator()(int64_t index, T value) const { store(grad + index, value); }
};

/// One block per row of the cross-entropy or nll gradient; `counted` (mean
/// only) is countRowsKernel's result, or null for each block to count the
/// rows itself (few rows).
template <typename S>
__global__ void classificationGradKernel(LossGeometry g, const S* gradOutput, const S* input,
                                         const int64_t* labels, const long long* counted, S* grad) {
  long long countedRows = 0;
  if (g.reduction == LossReduction::Mean)
    countedRows = counted != nullptr ? *counted : blockCountRows(g, labels);
  for (int64_t n = blockIdx.x; n < g.rows; n += gridDim.x)
    writeClassificationGradRow(g, gradOutput, input, labels, countedRows, n,
                               rowLogSumExp(g, input, labels, n, BlockTeam{}), BlockTeam{}, StoreInto<S>{grad});
}

/// A small reduced loss and its gradient (a plan's loss step and the
/// loss_grad step after it, on the same scores and labels) in one block: a
/// warp per row, as classificationSmallKernel.
template <typename S>
__global__ void classificationSmallWithGradKernel(LossGeometry g, const S* input, const int64_t* labels,
                                                  const S* gradOutput, S* out, S* grad) {
  using T = Compute<S>;
  long long counted = blockCountRows(g, labels);
  T total = 0;
  for (int64_t n = threadIdx.x / 32; n < g.rows; n += kWarps) {
    auto lse = rowLogSumExp(g, input, labels, n, WarpTeam{});
    total += classificationRowLoss(g, input, labels, n, lse, WarpTeam{});
    writeClassificationGradRow(g, gradOutput, input, labels, counted, n, lse, WarpTeam{}, StoreInto<S>{grad});
  }
  storeBlockLoss(g, total, counted, out);
}

/// One warp's row n of a classifier's head: its loss added into `total`,
/// its gradient stored through `put`.
template <typename S, typename Put>
__device__ void classificationHeadRow(const LossGeometry& g, const S* scores, const int64_t* labels,
                                      const float* gradOutput, long long counted, int64_t n, float& total, Put put) {
  auto lse = rowLogSumExp(g, scores, labels, n, WarpTeam{});
  total += classificationRowLoss(g, scores, labels, n, lse, WarpTeam{});
  writeClassificationGradRow(g, gradOutput, scores, labels, counted, n, lse, WarpTeam{}, put);
}

/// Warps of the classifier head's one block. Its time is latency: a warp
/// works through its rows one after another, each a chain of loads and
/// shuffles, so more warps mean fewer rows per chain (a classifier's 64 rows:
/// 2 a warp instead of 8).
constexpr int kHeadWarps = 32;

/// An AMP classifier's head (launchClassificationHead): the scores (widened
/// from Low into wideScores when given, the bias added when given), the f32
/// loss and its gradient on them, the gradient rounded to Low (lowGrad) and
/// summed over the rows (columnSums) when given, in one block of kHeadWarps
/// warps; every value is the one the separate steps store, the column sums
/// in the CPU's row order.
template <typename In, typename Low>
__global__ void __launch_bounds__(kHeadWarps * 32)
    classificationHeadKernel(LossGeometry g, const In* scores, const float* bias, const int64_t* labels,
                             const float* gradOutput, float* wideScores, float* out, float* grad, Low* lowGrad,
                             float* columnSums) {
  long long counted = warpCountRows(g, labels);
  int lane = threadIdx.x % 32;
  float total = 0;
  auto put = [&](int64_t index, float value) {
    grad[index] = value;
    if (lowGrad != nullptr)
      store(lowGrad + index, value);
  };
  for (int64_t n = threadIdx.x / 32; n < g.rows; n += kHeadWarps) {
    if (wideScores == nullptr) {
      classificationHeadRow(g, scores, labels, gradOutput, counted, n, total, put);
      continue;
    }
    // The warp writes its wide row, then works on it (the same values as
    // the narrow row when there is no bias: widening is exact).
    for (int64_t c = lane; c < g.classes; c += 32) {
      float value = widen(scores[n * g.classes + c]);
      wideScores[n * g.classes + c] = bias != nullptr ? value + bias[c] : value;
    }
    __syncwarp();
    classificationHeadRow(g, static_cast<const float*>(wideScores), labels, gradOutput, counted, n, total, put);
  }
  storeBlockLoss<kHeadWarps>(g, total, counted, out); // the gradient's stores are visible after it
  if (columnSums != nullptr)
    for (int64_t c = threadIdx.x; c < g.classes; c += kHeadWarps * 32) {
      // The loads are independent and unrolled ahead of the adds, which
      // stay in row order.
      float sum = 0;
#pragma unroll 8
      for (int64_t n = 0; n < g.rows; ++n)
        sum += grad[n * g.classes + c];
      columnSums[c] = sum;
    }
}

/// Loads a regression head's pass keeps in flight per thread, rows
/// kColumnLanes apart. With 4, mlp9's head (2048 x 8192 f16 scores and f32
/// targets) moved its 128 MB at 1.5 TB/s on the H100 (0.087 ms), waiting on
/// memory latency as the column reduction did; 16 keep four times the bytes
/// in flight (not yet measured on a GPU, 2026-11-27). Every value adds in
/// the same order whatever the count.
constexpr int kMseHeadSlots = 16;

/// launchMseHead's pass: tiles of kColumnOutputs columns, kColumnLanes lanes
/// of rows (kMseHeadSlots rows loaded before any is computed), each lane
/// adding its column's gradient in row order and the lanes added in lane
/// order; every thread adds its squared differences, and the block's total
/// goes to partials[blockIdx.x].
template <typename In, typename Low>
__global__ void mseHeadKernel(MseHead h, const In* scores, MseHeadPointers p, float* partials) {
  __shared__ float lanes[kColumnLanes][kColumnOutputs];
  int column = threadIdx.x % kColumnOutputs, lane = threadIdx.x / kColumnOutputs;
  int64_t count = h.rows * h.columns;
  // PyTorch: norm * (input - target) * grad_output, norm = 2 (or 2 / numel for mean).
  float norm = float(h.reduction == LossReduction::Mean ? 2.0 / double(count) : 2.0);
  float seed = *p.seed, squares = 0;
  for (int64_t tile = blockIdx.x; tile * kColumnOutputs < h.columns; tile += gridDim.x) {
    int64_t c = tile * kColumnOutputs + column;
    float sum = 0;
    if (c < h.columns) {
      float bias = p.bias != nullptr ? p.bias[c] : 0.0f;
      for (int64_t first = lane; first < h.rows; first += int64_t(kColumnLanes) * kMseHeadSlots) {
        float x[kMseHeadSlots], t[kMseHeadSlots];
        for (int k = 0; k < kMseHeadSlots; ++k) {
          int64_t r = first + int64_t(k) * kColumnLanes;
          if (r < h.rows) {
            x[k] = widen(scores[r * h.columns + c]);
            t[k] = p.target[r * h.columns + c];
          }
        }
        for (int k = 0; k < kMseHeadSlots; ++k) {
          int64_t r = first + int64_t(k) * kColumnLanes;
          if (r >= h.rows)
            break;
          int64_t i = r * h.columns + c;
          float value = p.bias != nullptr ? x[k] + bias : x[k];
          if (p.wide != nullptr)
            p.wide[i] = value;
          float difference = value - t[k];
          squares += difference * difference;
          float gradient = norm * difference * seed;
          if (p.grad != nullptr)
            p.grad[i] = gradient;
          if (p.lowGrad != nullptr)
            store(static_cast<Low*>(p.lowGrad) + i, gradient);
          sum += gradient;
        }
      }
    }
    if (p.columnSums != nullptr) {
      lanes[lane][column] = sum;
      __syncthreads();
      if (lane == 0 && c < h.columns) {
        float total = lanes[0][column];
        for (int l = 1; l < kColumnLanes; ++l)
          total += lanes[l][column];
        p.columnSums[c] = total;
      }
      __syncthreads();
    }
  }
  squares = blockReduce(squares, SumOp{});
  if (threadIdx.x == 0)
    partials[blockIdx.x] = squares;
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

/// Philox.h's philoxBitsAt, word for word.
__device__ uint32_t philoxBitsAt(uint64_t seed, uint64_t position) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint64_t block = position / 4;
  uint32_t c0 = uint32_t(block), c1 = uint32_t(block >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    uint64_t product0 = uint64_t(kMultiplier0) * c0;
    uint64_t product1 = uint64_t(kMultiplier1) * c2;
    uint32_t n0 = uint32_t(product1 >> 32) ^ c1 ^ k0, n1 = uint32_t(product1);
    uint32_t n2 = uint32_t(product0 >> 32) ^ c3 ^ k1, n3 = uint32_t(product0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
  }
  switch (position % 4) {
  case 0: return c0;
  case 1: return c1;
  case 2: return c2;
  default: return c3;
  }
}

template <typename S>
__global__ void dropoutKernel(int64_t count, double p, double scale, const S* x, const int64_t* state, S* y,
                              uint8_t* mask) {
  using T = Compute<S>;
  uint64_t seed = uint64_t(state[0]), offset = uint64_t(state[1]);
  T scaleT = T(scale);
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < count; i += int64_t(gridDim.x) * kThreads) {
    uint32_t bits = philoxBitsAt(seed, offset + uint64_t(i));
    bool keep = double(bits >> 8) * 0x1p-24 >= p;
    T value = widen(x[i]);
    store(y + i, keep ? value * scaleT : T(0));
    mask[i] = keep ? 1 : 0;
  }
}

/// Runs after dropoutKernel (stream order): next_rng_state is usually
/// rng_state itself, which every thread of dropoutKernel reads.
__global__ void dropoutAdvanceKernel(int64_t count, const int64_t* state, int64_t* next) {
  int64_t seed = state[0], offset = state[1];
  next[0] = seed;
  next[1] = int64_t(uint64_t(offset) + uint64_t(count));
}

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

template <typename S>
__global__ void embeddingKernel(EmbeddingGeometry g, const int64_t* indices, const S* table, S* y) {
  using T = Compute<S>;
  int64_t total = g.count * g.width;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < total; i += int64_t(gridDim.x) * kThreads) {
    int64_t n = i / g.width, d = i - n * g.width;
    int64_t row = indices[n];
    if (row >= 0 && row < g.rows)
      y[i] = table[row * g.width + d];
    else
      store(y + i, quietNaN(T(0)));
  }
}

/// Column blocks of kThreads columns, times row ranges: the thread of
/// (range, column) owns that column of every row in its range, zeroes it,
/// then adds the rows of dy that index into the range, in index order. No
/// two threads write one element, so the sum order is the CPU's.
template <typename S>
__global__ void embeddingGradKernel(EmbeddingGeometry g, int64_t rowsPerRange, int64_t columnBlocks,
                                    int64_t paddingIdx, const S* dy, const int64_t* indices, S* dweight) {
  int64_t range = int64_t(blockIdx.x) / columnBlocks;
  int64_t column = (int64_t(blockIdx.x) % columnBlocks) * kThreads + threadIdx.x;
  if (column >= g.width)
    return;
  int64_t first = range * rowsPerRange, last = first + rowsPerRange < g.rows ? first + rowsPerRange : g.rows;
  for (int64_t row = first; row < last; ++row)
    dweight[row * g.width + column] = S(0);
  for (int64_t n = 0; n < g.count; ++n) {
    int64_t row = indices[n];
    if (row >= first && row < last && row != paddingIdx)
      dweight[row * g.width + column] += dy[n * g.width + column];
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Launchers
//===----------------------------------------------------------------------===//

namespace {

std::size_t computeSize(Storage storage) { return storage == Storage::F64 ? sizeof(double) : sizeof(float); }

/// Elements one block of a split reduction reduces; ranges of at most two
/// chunks stay one block per output.
constexpr int64_t kSplitChunk = 16384;
/// Outputs below which a long reduction is split (a block per output would
/// leave most of the GPU idle).
constexpr int64_t kSplitBelowOutputs = 256;

int64_t reductionSplits(const ReductionGeometry& geometry) {
  if (geometry.outputCount == 0 || geometry.outputCount >= kSplitBelowOutputs ||
      geometry.reducedCount <= 2 * kSplitChunk)
    return 1;
  return std::min<int64_t>((geometry.reducedCount + kSplitChunk - 1) / kSplitChunk, 4096);
}

/// Whether the column kernel runs the reduction: many outputs, each over
/// more than a few elements, consecutive outputs adjacent in memory. Never
/// with no outputs ([40, 0] over rows), for which columnParts would divide
/// by zero tiles.
bool reducesColumns(const ReductionGeometry& geometry) {
  return geometry.outputCount > 0 && reductionSplits(geometry) == 1 && geometry.reducedCount > 32 &&
         geometry.keptRank > 0 && geometry.keptStrides[geometry.keptRank - 1] == 1;
}

/// Parts the column kernel splits the reduced range into: enough blocks to
/// fill the GPU, at least 256 elements a part.
int64_t columnParts(const ReductionGeometry& geometry) {
  int64_t tiles = (geometry.outputCount + kColumnOutputs - 1) / kColumnOutputs;
  int64_t wanted = std::max<int64_t>(1, 512 / tiles);
  return std::max<int64_t>(1, std::min<int64_t>(wanted, geometry.reducedCount / 256));
}

/// Whether the column kernel may load `columns` consecutive outputs'
/// elements of a row as one vector: every such group lies in one innermost
/// kept row (its size a multiple of `columns`), and every group's address,
/// in each row, is a multiple of the vector's size.
template <typename In> bool columnsLoadAsVectors(const ReductionGeometry& geometry, const In* x, int columns) {
  if (columns == 1)
    return true;
  if (reinterpret_cast<std::uintptr_t>(x) % (sizeof(In) * std::size_t(columns)) != 0 ||
      geometry.keptSizes[geometry.keptRank - 1] % columns != 0)
    return false;
  for (int d = 0; d + 1 < geometry.keptRank; ++d)
    if (geometry.keptStrides[d] % columns != 0)
      return false;
  for (int d = 0; d < geometry.reducedRank; ++d)
    if (geometry.reducedStrides[d] % columns != 0)
      return false;
  return true;
}

/// Partial results (per output and part) a reduction keeps in the workspace.
int64_t reductionPartials(const ReductionGeometry& geometry) {
  if (reducesColumns(geometry)) {
    int64_t parts = columnParts(geometry);
    return parts > 1 ? geometry.outputCount * parts : 0;
  }
  int64_t splits = reductionSplits(geometry);
  return splits > 1 ? geometry.outputCount * splits : 0;
}

} // namespace

bool columnSumInOnePass(const ReductionGeometry& geometry) {
  return reducesColumns(geometry) && columnParts(geometry) == 1;
}

std::size_t reductionWorkspaceBytes(Storage storage, const ReductionGeometry& geometry) {
  return std::size_t(reductionPartials(geometry)) * computeSize(storage);
}

namespace {

template <typename In, typename S>
cudaError_t launchReductionOf(const ReductionGeometry& geometry, const In* in, S* out, void* workspace,
                              cudaStream_t stream) {
  using T = Compute<S>;
  int64_t splits = reductionSplits(geometry);
  if (reducesColumns(geometry)) {
    int64_t parts = columnParts(geometry);
    int64_t chunk = (geometry.reducedCount + parts - 1) / parts;
    T* partials = static_cast<T*>(workspace);
    constexpr int kVector = columnsPerThread<In>();
    int columns = columnsLoadAsVectors(geometry, in, kVector) ? kVector : 1;
    dim3 threads(kColumnOutputs, kColumnLanes);
    dim3 blocks(blocksFor((geometry.outputCount + kColumnOutputs * columns - 1) / (kColumnOutputs * columns)),
                unsigned(parts));
    if (columns > 1)
      reduceColumnsKernel<kVector, In, S><<<blocks, threads, 0, stream>>>(geometry, chunk, in, out, partials);
    else
      reduceColumnsKernel<1, In, S><<<blocks, threads, 0, stream>>>(geometry, chunk, in, out, partials);
    cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess || parts == 1)
      return error;
    reduceCombinePartialsKernel<S><<<blocksForElements(geometry.outputCount), kThreads, 0, stream>>>(
        geometry, parts, partials, out);
  } else if (splits > 1) {
    int64_t chunk = (geometry.reducedCount + splits - 1) / splits;
    T* partials = static_cast<T*>(workspace);
    reducePartialKernel<In, S><<<blocksFor(geometry.outputCount * splits), kThreads, 0, stream>>>(
        geometry, splits, chunk, in, partials);
    cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess)
      return error;
    reduceCombinePartialsKernel<S><<<blocksForElements(geometry.outputCount), kThreads, 0, stream>>>(
        geometry, splits, partials, out);
  } else if (geometry.reducedCount <= 32)
    reduceSmallKernel<In, S><<<blocksForElements(geometry.outputCount), kThreads, 0, stream>>>(geometry, in, out);
  else
    reduceBlockKernel<In, S><<<blocksFor(geometry.outputCount), kThreads, 0, stream>>>(geometry, in, out);
  return cudaGetLastError();
}

} // namespace

cudaError_t launchReduction(Storage storage, const ReductionGeometry& geometry, const void* x, void* y,
                            void* workspace, cudaStream_t stream) {
  if (geometry.outputCount == 0)
    return cudaSuccess;
  return dispatch(storage, [&](auto zero) {
    using S = decltype(zero);
    return launchReductionOf<S, S>(geometry, static_cast<const S*>(x), static_cast<S*>(y), workspace, stream);
  });
}

cudaError_t launchWidenedReduction(Storage input, const ReductionGeometry& geometry, const void* x, float* y,
                                   void* workspace, cudaStream_t stream) {
  if (geometry.outputCount == 0)
    return cudaSuccess;
  if (input != Storage::F16 && input != Storage::BF16)
    return cudaErrorInvalidValue;
  return dispatch(input, [&](auto zero) {
    using In = decltype(zero);
    return launchReductionOf<In, float>(geometry, static_cast<const In*>(x), y, workspace, stream);
  });
}

cudaError_t launchSoftmax(Storage storage, SoftmaxKind kind, AxisGeometry geometry, const void* first,
                          const void* second, void* out, cudaStream_t stream) {
  if (geometry.outer * geometry.length * geometry.inner == 0)
    return cudaSuccess;
  return dispatch(storage, [&](auto zero) {
    using S = decltype(zero);
    softmaxKernel<S><<<blocksFor(geometry.outer * geometry.inner), kThreads, 0, stream>>>(
        kind, geometry, static_cast<const S*>(first), static_cast<const S*>(second), static_cast<S*>(out));
    return cudaGetLastError();
  });
}

cudaError_t launchLayerNorm(Storage storage, RowGeometry geometry, double eps, const void* x, const void* weight,
                            const void* bias, void* y, void* mean, void* rstd, cudaStream_t stream) {
  if (geometry.rows == 0)
    return cudaSuccess;
  return dispatch(storage, [&](auto zero) {
    using S = decltype(zero);
    using T = Compute<S>;
    layerNormKernel<S><<<blocksFor(geometry.rows), kThreads, 0, stream>>>(
        geometry, eps, static_cast<const S*>(x), static_cast<const S*>(weight), static_cast<const S*>(bias),
        static_cast<S*>(y), static_cast<T*>(mean), static_cast<T*>(rstd));
    return cudaGetLastError();
  });
}

namespace {

/// Row ranges the parameter gradients split their rows into: one per 1024
/// rows beyond the first 4096 (each block sums its range serially).
int64_t layerNormGradRowRanges(RowGeometry geometry) {
  if (geometry.rows <= 4096)
    return 1;
  return std::min<int64_t>((geometry.rows + 1023) / 1024, 256);
}

} // namespace

std::size_t layerNormGradWorkspaceBytes(Storage storage, RowGeometry geometry) {
  int64_t ranges = layerNormGradRowRanges(geometry);
  return ranges > 1 ? std::size_t(2 * ranges * geometry.cols) * computeSize(storage) : 0;
}

cudaError_t launchLayerNormGrad(Storage storage, RowGeometry geometry, const void* dy, const void* x,
                                const void* mean, const void* rstd, const void* weight, void* dx, void* dweight,
                                void* dbias, void* workspace, cudaStream_t stream) {
  return dispatch(storage, [&](auto zero) {
    using S = decltype(zero);
    using T = Compute<S>;
    if (geometry.rows > 0 && geometry.cols > 0 && dx) {
      layerNormGradInputKernel<S><<<blocksFor(geometry.rows), kThreads, 0, stream>>>(
          geometry, static_cast<const S*>(dy), static_cast<const S*>(x), static_cast<const T*>(mean),
          static_cast<const T*>(rstd), static_cast<const S*>(weight), static_cast<S*>(dx));
      cudaError_t error = cudaGetLastError();
      if (error != cudaSuccess)
        return error;
    }
    // With no rows the parameter gradients are zeros, which this kernel writes too.
    if (geometry.cols > 0 && (dweight || dbias)) {
      int64_t ranges = layerNormGradRowRanges(geometry);
      int64_t rowChunk = ranges > 1 ? (geometry.rows + ranges - 1) / ranges : geometry.rows;
      T* partials = static_cast<T*>(workspace);
      dim3 threads(kColumnTile, kRowLanes);
      dim3 blocks(blocksFor((geometry.cols + kColumnTile - 1) / kColumnTile), unsigned(ranges));
      layerNormGradParamsKernel<S><<<blocks, threads, 0, stream>>>(
          geometry, rowChunk, static_cast<const S*>(dy), static_cast<const S*>(x), static_cast<const T*>(mean),
          static_cast<const T*>(rstd), static_cast<S*>(dweight), static_cast<S*>(dbias), partials);
      cudaError_t error = cudaGetLastError();
      if (error != cudaSuccess || ranges == 1)
        return error;
      layerNormGradParamsCombineKernel<S><<<blocksForElements(geometry.cols), kThreads, 0, stream>>>(
          geometry, ranges, partials, static_cast<S*>(dweight), static_cast<S*>(dbias));
      return cudaGetLastError();
    }
    return cudaSuccess;
  });
}

namespace {

bool isClassification(const LossGeometry& geometry) { return geometry.loss != LossKind::Mse; }

/// A reduced classification loss this small runs as one block
/// (classificationSmallKernel): a launch instead of two.
bool smallClassification(const LossGeometry& geometry) {
  return geometry.rows <= 1024 && geometry.rows * geometry.classes <= 32768;
}

/// With this few rows every block of the gradient counts them itself (a few
/// KB of labels from L2) rather than a launch before it counting them once.
bool gradientCountsRowsPerBlock(const LossGeometry& geometry) { return geometry.rows <= 512; }

/// Blocks (and partial sums) of a reduced mse's first stage.
int64_t msePartialCount(const LossGeometry& geometry) {
  return geometry.count == 0 ? 0 : std::min<int64_t>(blocksForElements(geometry.count), 1024);
}

} // namespace

std::size_t lossWorkspaceBytes(Storage storage, const LossGeometry& geometry) {
  if (geometry.reduction == LossReduction::None)
    return 0;
  if (!isClassification(geometry))
    return std::size_t(msePartialCount(geometry)) * computeSize(storage);
  return smallClassification(geometry) ? 0 : std::size_t(geometry.rows) * computeSize(storage);
}

std::size_t lossGradWorkspaceBytes(Storage, const LossGeometry& geometry) {
  if (!isClassification(geometry) || geometry.reduction != LossReduction::Mean ||
      gradientCountsRowsPerBlock(geometry))
    return 0;
  return sizeof(long long);
}

cudaError_t launchLoss(Storage storage, const LossGeometry& geometry, const void* input, const void* target,
                       void* loss, void* workspace, cudaStream_t stream) {
  return dispatch(storage, [&](auto zero) {
    using S = decltype(zero);
    using T = Compute<S>;
    const S* in = static_cast<const S*>(input);
    S* out = static_cast<S*>(loss);
    if (!isClassification(geometry)) {
      const S* tg = static_cast<const S*>(target);
      if (geometry.reduction == LossReduction::None) {
        if (geometry.count == 0)
          return cudaSuccess;
        mseElementsKernel<S><<<blocksForElements(geometry.count), kThreads, 0, stream>>>(geometry.count, in, tg, out);
      } else {
        int64_t partialCount = msePartialCount(geometry);
        T* partials = static_cast<T*>(workspace);
        if (partialCount > 0) {
          msePartialKernel<S><<<unsigned(partialCount), kThreads, 0, stream>>>(geometry.count, in, tg, partials);
          cudaError_t error = cudaGetLastError();
          if (error != cudaSuccess)
            return error;
        }
        mseTotalKernel<S><<<1, kThreads, 0, stream>>>(geometry, partialCount, partials, out);
      }
      return cudaGetLastError();
    }
    const int64_t* labels = static_cast<const int64_t*>(target);
    if (geometry.reduction == LossReduction::None) {
      if (geometry.rows == 0)
        return cudaSuccess;
      classificationRowsKernel<S, S><<<blocksFor(geometry.rows), kThreads, 0, stream>>>(geometry, in, labels, out);
      return cudaGetLastError();
    }
    if (smallClassification(geometry)) {
      classificationSmallKernel<S><<<1, kThreads, 0, stream>>>(geometry, in, labels, out);
      return cudaGetLastError();
    }
    T* perRow = static_cast<T*>(workspace);
    if (geometry.rows > 0) {
      classificationRowsKernel<S, T><<<blocksFor(geometry.rows), kThreads, 0, stream>>>(geometry, in, labels, perRow);
      cudaError_t error = cudaGetLastError();
      if (error != cudaSuccess)
        return error;
    }
    classificationTotalKernel<S><<<1, kThreads, 0, stream>>>(geometry, perRow, labels, out);
    return cudaGetLastError();
  });
}

cudaError_t launchLossGrad(Storage storage, const LossGeometry& geometry, const void* gradOutput,
                           const void* input, const void* target, void* grad, void* workspace,
                           cudaStream_t stream) {
  return dispatch(storage, [&](auto zero) {
    using S = decltype(zero);
    const S* incoming = static_cast<const S*>(gradOutput);
    const S* in = static_cast<const S*>(input);
    S* out = static_cast<S*>(grad);
    if (!isClassification(geometry)) {
      if (geometry.count == 0)
        return cudaSuccess;
      // PyTorch: norm * (input - target) * grad_output, norm = 2 (or 2 / numel for mean).
      double norm = geometry.reduction == LossReduction::Mean ? 2.0 / double(geometry.count) : 2.0;
      mseGradKernel<S><<<blocksForElements(geometry.count), kThreads, 0, stream>>>(
          geometry, norm, incoming, in, static_cast<const S*>(target), out);
      return cudaGetLastError();
    }
    if (geometry.rows == 0)
      return cudaSuccess;
    const int64_t* labels = static_cast<const int64_t*>(target);
    long long* counted = nullptr;
    if (geometry.reduction == LossReduction::Mean && !gradientCountsRowsPerBlock(geometry)) {
      counted = static_cast<long long*>(workspace);
      countRowsKernel<<<1, kThreads, 0, stream>>>(geometry, labels, counted);
      cudaError_t error = cudaGetLastError();
      if (error != cudaSuccess)
        return error;
    }
    classificationGradKernel<S><<<blocksFor(geometry.rows), kThreads, 0, stream>>>(geometry, incoming, in, labels,
                                                                                   counted, out);
    return cudaGetLastError();
  });
}

bool lossAndGradientShareALaunch(const LossGeometry& geometry) {
  return isClassification(geometry) && geometry.reduction != LossReduction::None && smallClassification(geometry);
}

cudaError_t launchLossAndGradient(Storage storage, const LossGeometry& geometry, const void* input,
                                  const void* target, const void* gradOutput, void* loss, void* grad,
                                  cudaStream_t stream) {
  if (!lossAndGradientShareALaunch(geometry))
    return cudaErrorInvalidValue;
  return dispatch(storage, [&](auto zero) {
    using S = decltype(zero);
    classificationSmallWithGradKernel<S><<<1, kThreads, 0, stream>>>(
        geometry, static_cast<const S*>(input), static_cast<const int64_t*>(target),
        static_cast<const S*>(gradOutput), static_cast<S*>(loss), static_cast<S*>(grad));
    return cudaGetLastError();
  });
}

namespace {

/// Blocks of a regression head's pass: one per tile of columns, at most
/// 4096 (the tiles are a grid-stride loop), each leaving a partial loss.
int64_t mseHeadBlocks(const MseHead& head) {
  int64_t tiles = (head.columns + kColumnOutputs - 1) / kColumnOutputs;
  return std::max<int64_t>(1, std::min<int64_t>(tiles, 4096));
}

} // namespace

std::size_t mseHeadWorkspaceBytes(const MseHead& head) { return std::size_t(mseHeadBlocks(head)) * sizeof(float); }

cudaError_t launchMseHead(const MseHead& head, const MseHeadPointers& pointers, void* workspace, cudaStream_t stream) {
  if (head.reduction == LossReduction::None || head.rows < 0 || head.columns < 0 || pointers.loss == nullptr)
    return cudaErrorInvalidValue;
  int64_t blocks = mseHeadBlocks(head);
  float* partials = static_cast<float*>(workspace);
  auto launch = [&](auto in, auto low) {
    using In = decltype(in);
    using Low = decltype(low);
    mseHeadKernel<In, Low><<<unsigned(blocks), kThreads, 0, stream>>>(head, static_cast<const In*>(pointers.scores),
                                                                        pointers, partials);
    cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess)
      return error;
    LossGeometry total;
    total.loss = LossKind::Mse;
    total.reduction = head.reduction;
    total.count = head.rows * head.columns;
    mseTotalKernel<float><<<1, kThreads, 0, stream>>>(total, blocks, partials, pointers.loss);
    return cudaGetLastError();
  };
  bool lowIsBf16 = head.low == Storage::BF16;
  switch (head.scores) {
  case Storage::F16: return lowIsBf16 ? launch(__half{}, __nv_bfloat16{}) : launch(__half{}, __half{});
  case Storage::BF16: return lowIsBf16 ? launch(__nv_bfloat16{}, __nv_bfloat16{}) : launch(__nv_bfloat16{}, __half{});
  case Storage::F32: return lowIsBf16 ? launch(float{}, __nv_bfloat16{}) : launch(float{}, __half{});
  default: return cudaErrorInvalidValue;
  }
}

cudaError_t launchClassificationHead(const ClassificationHead& head, const LossGeometry& geometry, const void* scores,
                                     const float* bias, const int64_t* labels, const float* gradOutput,
                                     float* wideScores, float* loss, float* grad, void* lowGrad, float* columnSums,
                                     cudaStream_t stream) {
  if (!lossAndGradientShareALaunch(geometry) || (bias != nullptr && wideScores == nullptr))
    return cudaErrorInvalidValue;
  auto launch = [&](auto in, auto low) {
    using In = decltype(in);
    using Low = decltype(low);
    classificationHeadKernel<In, Low><<<1, kHeadWarps * 32, 0, stream>>>(geometry, static_cast<const In*>(scores), bias,
                                                                   labels, gradOutput, wideScores, loss, grad,
                                                                   static_cast<Low*>(lowGrad), columnSums);
    return cudaGetLastError();
  };
  // The narrowed gradient has the low dtype; without one, Low is unused.
  bool lowIsBf16 = head.low == Storage::BF16;
  switch (head.scores) {
  case Storage::F16: return launch(__half{}, __half{});
  case Storage::BF16: return launch(__nv_bfloat16{}, __nv_bfloat16{});
  case Storage::F32: return lowIsBf16 ? launch(float{}, __nv_bfloat16{}) : launch(float{}, __half{});
  default: return cudaErrorInvalidValue;
  }
}

cudaError_t launchDropout(Storage storage, int64_t count, double p, const void* x, const int64_t* state, void* y,
                          uint8_t* mask, int64_t* nextState, cudaStream_t stream) {
  return dispatch(storage, [&](auto zero) {
    using S = decltype(zero);
    if (count > 0) {
      dropoutKernel<S><<<blocksForElements(count), kThreads, 0, stream>>>(
          count, p, 1.0 / (1.0 - p), static_cast<const S*>(x), state, static_cast<S*>(y), mask);
      cudaError_t error = cudaGetLastError();
      if (error != cudaSuccess)
        return error;
    }
    dropoutAdvanceKernel<<<1, 1, 0, stream>>>(count, state, nextState);
    return cudaGetLastError();
  });
}

cudaError_t launchEmbedding(Storage storage, EmbeddingGeometry geometry, const int64_t* indices, const void* table,
                            void* y, cudaStream_t stream) {
  int64_t total = geometry.count * geometry.width;
  if (total == 0)
    return cudaSuccess;
  return dispatch(storage, [&](auto zero) {
    using S = decltype(zero);
    embeddingKernel<S><<<blocksForElements(total), kThreads, 0, stream>>>(geometry, indices,
                                                                          static_cast<const S*>(table),
                                                                          static_cast<S*>(y));
    return cudaGetLastError();
  });
}

cudaError_t launchEmbeddingGrad(Storage storage, EmbeddingGeometry geometry, int64_t paddingIdx, const void* dy,
                                const int64_t* indices, void* dweight, cudaStream_t stream) {
  if (storage != Storage::F32 && storage != Storage::F64)
    return cudaErrorInvalidValue; // in-place accumulation needs fp32 or wider
  if (geometry.rows == 0 || geometry.width == 0)
    return cudaSuccess;
  // About 64K owning threads: each scans every index once.
  int64_t columnBlocks = (geometry.width + kThreads - 1) / kThreads;
  int64_t ranges = std::clamp<int64_t>(65536 / (columnBlocks * kThreads), 1, geometry.rows);
  ranges = std::min<int64_t>(ranges, kMaxBlocks / columnBlocks);
  int64_t rowsPerRange = (geometry.rows + ranges - 1) / ranges;
  ranges = (geometry.rows + rowsPerRange - 1) / rowsPerRange;
  unsigned blocks = unsigned(ranges * columnBlocks);
  if (storage == Storage::F64)
    embeddingGradKernel<double><<<blocks, kThreads, 0, stream>>>(geometry, rowsPerRange, columnBlocks, paddingIdx,
                                                                 static_cast<const double*>(dy), indices,
                                                                 static_cast<double*>(dweight));
  else
    embeddingGradKernel<float><<<blocks, kThreads, 0, stream>>>(geometry, rowsPerRange, columnBlocks, paddingIdx,
                                                                static_cast<const float*>(dy), indices,
                                                                static_cast<float*>(dweight));
  return cudaGetLastError();
}

} // namespace ampjit::runtime::cuda::numeric
