// 2-D max and average pooling and their gradients (PoolingKernels.h), a
// line-by-line mirror of runtime/lib/cpu/Pooling.cpp: the same windows, the
// same scan order, the same compute type, one rounding per stored value.
// Gradients are gathers (one thread per input element adds up, in output
// row-major order, the windows that route gradient to it), which is the
// CPU's scatter order restricted to one element, so no atomics are needed
// and the sums are bit-identical to the CPU's.

#include "PoolingKernels.h"
#include "DeviceScalars.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ampjit::runtime::cuda::pooling {

namespace {

constexpr int kThreads = 256;
// Grid-stride loops cover the rest; this keeps the grid within every limit.
constexpr int64_t kMaxBlocks = int64_t(1) << 20;



/// Element offsets of a rank-4 activation of `h` x `w` spatial size.
struct Strides {
  int64_t batch, channel, height, width;
};
__device__ inline Strides stridesOf(const PoolGeometry& g, int64_t h, int64_t w) {
  return g.nhwc ? Strides{h * w * g.channels, 1, w * g.channels, g.channels}
                : Strides{g.channels * h * w, h * w, w, 1};
}

/// (n, c, h, w) of the element at memory offset `i`.
struct Position {
  int64_t n, c, h, w;
};
__device__ inline Position positionOf(const PoolGeometry& g, int64_t i, int64_t h, int64_t w) {
  Position p;
  if (g.nhwc) {
    p.c = i % g.channels;
    i /= g.channels;
    p.w = i % w;
    i /= w;
    p.h = i % h;
    p.n = i / h;
  } else {
    p.w = i % w;
    i /= w;
    p.h = i % h;
    i /= h;
    p.c = i % g.channels;
    p.n = i / g.channels;
  }
  return p;
}

/// The in-bounds part of one window and the average's divisor, exactly as
/// PoolGeometry::at on the CPU.
struct Window {
  int64_t hStart, hEnd, wStart, wEnd, divisor;
};
__device__ inline Window windowAt(const PoolGeometry& g, int64_t oh, int64_t ow) {
  int64_t hStart = oh * g.strideH - g.padH;
  int64_t wStart = ow * g.strideW - g.padW;
  int64_t hEnd = min(hStart + g.kernelH, g.height + g.padH);
  int64_t wEnd = min(wStart + g.kernelW, g.width + g.padW);
  int64_t paddedSize = (hEnd - hStart) * (wEnd - wStart);
  Window window{max(hStart, int64_t(0)), min(hEnd, g.height), max(wStart, int64_t(0)), min(wEnd, g.width), 0};
  window.divisor = g.countIncludePad ? paddedSize
                                     : (window.hEnd - window.hStart) * (window.wEnd - window.wStart);
  return window;
}

/// The offset of the window's maximum and the maximum, by the CPU's rule: a
/// value replaces the maximum when greater or NaN (first of equal maxima,
/// last NaN); the scan starts at the first in-bounds element.
template <typename S, typename T>
__device__ inline void windowMax(const S* x, int64_t plane, const Strides& in, const Window& window, int64_t& best,
                                 T& maximum) {
  best = plane + window.hStart * in.height + window.wStart * in.width;
  maximum = -T(INFINITY);
  for (int64_t h = window.hStart; h < window.hEnd; ++h)
    for (int64_t w = window.wStart; w < window.wEnd; ++w) {
      int64_t offset = plane + h * in.height + w * in.width;
      T value = widen(x[offset]);
      if (value > maximum || isnan(value)) {
        maximum = value;
        best = offset;
      }
    }
}

template <typename S>
__global__ void poolKernel(PoolGeometry g, bool isMax, const S* __restrict__ x, S* __restrict__ y, int64_t total) {
  using T = typename ComputeOf<S>::type;
  Strides in = stridesOf(g, g.height, g.width);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    Position p = positionOf(g, i, g.outHeight, g.outWidth);
    int64_t plane = p.n * in.batch + p.c * in.channel;
    Window window = windowAt(g, p.h, p.w);
    if (isMax) {
      int64_t best;
      T maximum;
      windowMax(x, plane, in, window, best, maximum);
      y[i] = store<S, T>(maximum);
      continue;
    }
    T sum = 0;
    for (int64_t h = window.hStart; h < window.hEnd; ++h)
      for (int64_t w = window.wStart; w < window.wEnd; ++w)
        sum += widen(x[plane + h * in.height + w * in.width]);
    y[i] = store<S, T>(sum / T(window.divisor));
  }
}

template <typename S>
__global__ void poolGradKernel(PoolGeometry g, bool isMax, const S* __restrict__ dy, const S* __restrict__ x,
                               S* __restrict__ dx, int64_t total) {
  using T = typename ComputeOf<S>::type;
  Strides in = stridesOf(g, g.height, g.width);
  Strides out = stridesOf(g, g.outHeight, g.outWidth);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    Position p = positionOf(g, i, g.height, g.width);
    int64_t inPlane = p.n * in.batch + p.c * in.channel;
    int64_t outPlane = p.n * out.batch + p.c * out.channel;
    // Windows starting at oh * stride - pad contain row h iff
    // start <= h < start + kernel; the membership test below is the rule,
    // these bounds only skip windows that cannot contain h.
    int64_t hLow = p.h + g.padH - g.kernelH, wLow = p.w + g.padW - g.kernelW;
    int64_t ohFirst = hLow < 0 ? 0 : hLow / g.strideH + 1;
    int64_t owFirst = wLow < 0 ? 0 : wLow / g.strideW + 1;
    int64_t ohLast = min((p.h + g.padH) / g.strideH, g.outHeight - 1);
    int64_t owLast = min((p.w + g.padW) / g.strideW, g.outWidth - 1);
    T sum = 0;
    for (int64_t oh = ohFirst; oh <= ohLast; ++oh)
      for (int64_t ow = owFirst; ow <= owLast; ++ow) {
        Window window = windowAt(g, oh, ow);
        if (p.h < window.hStart || p.h >= window.hEnd || p.w < window.wStart || p.w >= window.wEnd)
          continue;
        T gradient = widen(dy[outPlane + oh * out.height + ow * out.width]);
        if (isMax) {
          int64_t best;
          T maximum;
          windowMax(x, inPlane, in, window, best, maximum);
          if (best == i)
            sum += gradient;
        } else {
          sum += gradient / T(window.divisor);
        }
      }
    dx[i] = store<S, T>(sum);
  }
}

int blocksFor(int64_t total) {
  int64_t blocks = (total + kThreads - 1) / kThreads;
  return int(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

template <typename S>
cudaError_t pool(PoolKind kind, const PoolGeometry& g, const void* x, void* y, cudaStream_t stream) {
  int64_t total = g.batch * g.channels * g.outHeight * g.outWidth;
  if (total == 0)
    return cudaSuccess;
  poolKernel<S><<<blocksFor(total), kThreads, 0, stream>>>(g, kind == PoolKind::Max, static_cast<const S*>(x),
                                                           static_cast<S*>(y), total);
  return cudaGetLastError();
}

template <typename S>
cudaError_t poolGrad(PoolKind kind, const PoolGeometry& g, const void* dy, const void* x, void* dx,
                     cudaStream_t stream) {
  int64_t total = g.batch * g.channels * g.height * g.width;
  if (total == 0)
    return cudaSuccess;
  poolGradKernel<S><<<blocksFor(total), kThreads, 0, stream>>>(
      g, kind == PoolKind::Max, static_cast<const S*>(dy), static_cast<const S*>(x), static_cast<S*>(dx), total);
  return cudaGetLastError();
}

} // namespace

cudaError_t launchPool2d(Storage storage, PoolKind kind, const PoolGeometry& geometry, const void* x, void* y,
                         cudaStream_t stream) {
  switch (storage) {
  case Storage::F32: return pool<float>(kind, geometry, x, y, stream);
  case Storage::F16: return pool<__half>(kind, geometry, x, y, stream);
  case Storage::BF16: return pool<__nv_bfloat16>(kind, geometry, x, y, stream);
  case Storage::F64: return pool<double>(kind, geometry, x, y, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launchPool2dGrad(Storage storage, PoolKind kind, const PoolGeometry& geometry, const void* dy,
                             const void* x, void* dx, cudaStream_t stream) {
  switch (storage) {
  case Storage::F32: return poolGrad<float>(kind, geometry, dy, x, dx, stream);
  case Storage::F16: return poolGrad<__half>(kind, geometry, dy, x, dx, stream);
  case Storage::BF16: return poolGrad<__nv_bfloat16>(kind, geometry, dy, x, dx, stream);
  case Storage::F64: return poolGrad<double>(kind, geometry, dy, x, dx, stream);
  }
  return cudaErrorInvalidValue;
}

} // namespace ampjit::runtime::cuda::pooling
