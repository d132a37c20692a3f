// 2-D max and average pooling and their gradients (PoolingKernels.h), a
// line-by-line mirror of runtime/lib/cpu/Pooling.cpp: the same windows, the
// same scan order, the same compute type, one rounding per stored value.
// Gradients are gathers (one thread per input element adds up, in output
// row-major order, the windows that route gradient to it), which is the
// CPU's scatter order restricted to one element, so no atomics are needed
// and the sums are bit-identical to the CPU's. A max gradient first writes
// each window's argmax to the workspace (one scan per window, not one per
// window per element in it).

#include "PoolingKernels.h"
#include "DeviceScalars.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstddef>

namespace ampjit::runtime::cuda::pooling {

namespace {

constexpr int kThreads = 256;
// Grid-stride loops cover the rest; this keeps the grid within every limit.
constexpr int64_t kMaxBlocks = int64_t(1) << 20;



/// Offsets and sizes in `I`: int32_t when every offset of the launch fits
/// (selected on the host by indexFits), so the per-element divisions are 32-bit
/// ones rather than the 64-bit software routine, which dominated these
/// kernels on the H200 (a ResNet's max-pool gradient took 0.22 ms).
template <typename I>
struct Geometry {
  I batch, channels, height, width, outHeight, outWidth;
  I kernelH, kernelW, strideH, strideW, padH, padW;
  bool countIncludePad, nhwc;
};

template <typename I>
Geometry<I> narrowed(const PoolGeometry& g) {
  return Geometry<I>{I(g.batch),   I(g.channels), I(g.height),  I(g.width),   I(g.outHeight), I(g.outWidth),
                     I(g.kernelH), I(g.kernelW),  I(g.strideH), I(g.strideW), I(g.padH),      I(g.padW),
                     g.countIncludePad, g.nhwc};
}

/// Element offsets of a rank-4 activation of `h` x `w` spatial size.
template <typename I>
struct Strides {
  I batch, channel, height, width;
};
template <typename I>
__device__ inline Strides<I> stridesOf(const Geometry<I>& g, I h, I w) {
  return g.nhwc ? Strides<I>{h * w * g.channels, 1, w * g.channels, g.channels}
                : Strides<I>{g.channels * h * w, h * w, w, 1};
}

/// (n, c, h, w) of the element at memory offset `i`.
template <typename I>
struct Position {
  I n, c, h, w;
};
template <typename I>
__device__ inline Position<I> positionOf(const Geometry<I>& g, I i, I h, I w) {
  Position<I> p;
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
template <typename I>
struct Window {
  I hStart, hEnd, wStart, wEnd, divisor;
};
template <typename I>
__device__ inline Window<I> windowAt(const Geometry<I>& g, I oh, I ow) {
  I hStart = oh * g.strideH - g.padH;
  I wStart = ow * g.strideW - g.padW;
  I hEnd = min(hStart + g.kernelH, g.height + g.padH);
  I wEnd = min(wStart + g.kernelW, g.width + g.padW);
  I paddedSize = (hEnd - hStart) * (wEnd - wStart);
  Window<I> window{max(hStart, I(0)), min(hEnd, g.height), max(wStart, I(0)), min(wEnd, g.width), 0};
  window.divisor = g.countIncludePad ? paddedSize : (window.hEnd - window.hStart) * (window.wEnd - window.wStart);
  return window;
}

/// The offset of the window's maximum and the maximum, by the CPU's rule: a
/// value replaces the maximum when greater or NaN (first of equal maxima,
/// last NaN); the scan starts at the first in-bounds element.
template <typename S, typename T, typename I>
__device__ inline void windowMax(const S* x, I plane, const Strides<I>& in, const Window<I>& window, I& best,
                                 T& maximum) {
  best = plane + window.hStart * in.height + window.wStart * in.width;
  maximum = -T(INFINITY);
  for (I h = window.hStart; h < window.hEnd; ++h)
    for (I w = window.wStart; w < window.wEnd; ++w) {
      I offset = plane + h * in.height + w * in.width;
      T value = widen(x[offset]);
      if (value > maximum || isnan(value)) {
        maximum = value;
        best = offset;
      }
    }
}

template <typename S, typename I>
__global__ void poolKernel(Geometry<I> g, bool isMax, const S* __restrict__ x, S* __restrict__ y, I total) {
  using T = typename ComputeOf<S>::type;
  Strides<I> in = stridesOf(g, g.height, g.width);
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < total; i += I(gridDim.x) * I(blockDim.x)) {
    Position<I> p = positionOf(g, i, g.outHeight, g.outWidth);
    I plane = p.n * in.batch + p.c * in.channel;
    Window<I> window = windowAt(g, p.h, p.w);
    if (isMax) {
      I best;
      T maximum;
      windowMax(x, plane, in, window, best, maximum);
      y[i] = store<S, T>(maximum);
      continue;
    }
    T sum = 0;
    for (I h = window.hStart; h < window.hEnd; ++h)
      for (I w = window.wStart; w < window.wEnd; ++w)
        sum += widen(x[plane + h * in.height + w * in.width]);
    y[i] = store<S, T>(sum / T(window.divisor));
  }
}

/// argmax[o] = the offset in x of output element o's maximum (windowMax),
/// so the gradient below compares offsets instead of rescanning every
/// window that contains its element (up to four 3x3 scans per element).
template <typename S, typename I>
__global__ void windowArgmaxKernel(Geometry<I> g, const S* __restrict__ x, I* __restrict__ argmax, I total) {
  using T = typename ComputeOf<S>::type;
  Strides<I> in = stridesOf(g, g.height, g.width);
  for (I o = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); o < total; o += I(gridDim.x) * I(blockDim.x)) {
    Position<I> p = positionOf(g, o, g.outHeight, g.outWidth);
    I best;
    T maximum;
    windowMax(x, p.n * in.batch + p.c * in.channel, in, windowAt(g, p.h, p.w), best, maximum);
    argmax[o] = best;
  }
}

/// dx, one thread per input element: the windows that contain it, in output
/// row-major order (the CPU's scatter order restricted to this element), each
/// adding its gradient when (max) the element is the window's argmax, or
/// (average) divided by the window's divisor.
template <typename S, typename I>
__global__ void poolGradKernel(Geometry<I> g, bool isMax, const S* __restrict__ dy, const I* __restrict__ argmax,
                               S* __restrict__ dx, I total) {
  using T = typename ComputeOf<S>::type;
  Strides<I> out = stridesOf(g, g.outHeight, g.outWidth);
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < total; i += I(gridDim.x) * I(blockDim.x)) {
    Position<I> p = positionOf(g, i, g.height, g.width);
    I outPlane = p.n * out.batch + p.c * out.channel;
    // Windows starting at oh * stride - pad contain row h iff
    // start <= h < start + kernel; the membership test below is the rule,
    // these bounds only skip windows that cannot contain h.
    I hLow = p.h + g.padH - g.kernelH, wLow = p.w + g.padW - g.kernelW;
    I ohFirst = hLow < 0 ? 0 : hLow / g.strideH + 1;
    I owFirst = wLow < 0 ? 0 : wLow / g.strideW + 1;
    I ohLast = min((p.h + g.padH) / g.strideH, g.outHeight - 1);
    I owLast = min((p.w + g.padW) / g.strideW, g.outWidth - 1);
    T sum = 0;
    for (I oh = ohFirst; oh <= ohLast; ++oh)
      for (I ow = owFirst; ow <= owLast; ++ow) {
        Window<I> window = windowAt(g, oh, ow);
        if (p.h < window.hStart || p.h >= window.hEnd || p.w < window.wStart || p.w >= window.wEnd)
          continue;
        I o = outPlane + oh * out.height + ow * out.width;
        if (isMax) {
          if (argmax[o] == i)
            sum += widen(dy[o]);
        } else {
          sum += widen(dy[o]) / T(window.divisor);
        }
      }
    dx[i] = store<S, T>(sum);
  }
}

int blocksFor(int64_t total) {
  int64_t blocks = (total + kThreads - 1) / kThreads;
  return int(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

/// Whether every offset of the launch (of x, y and the grid-stride index,
/// which runs up to a block past the larger tensor) fits in int32_t.
bool fitsInt32(const PoolGeometry& g) {
  if (g.wideIndex)
    return false;
  int64_t largest = std::max(g.batch * g.channels * g.height * g.width, g.batch * g.channels * g.outHeight * g.outWidth);
  return largest + int64_t(kMaxBlocks) * kThreads < int64_t(INT32_MAX);
}

template <typename S, typename I>
cudaError_t pool(PoolKind kind, const PoolGeometry& g, const void* x, void* y, cudaStream_t stream) {
  int64_t total = g.batch * g.channels * g.outHeight * g.outWidth;
  if (total == 0)
    return cudaSuccess;
  poolKernel<S, I><<<blocksFor(total), kThreads, 0, stream>>>(narrowed<I>(g), kind == PoolKind::Max,
                                                              static_cast<const S*>(x), static_cast<S*>(y), I(total));
  return cudaGetLastError();
}

template <typename S, typename I>
cudaError_t poolGrad(PoolKind kind, const PoolGeometry& g, const void* dy, const void* x, void* dx, void* workspace,
                     cudaStream_t stream) {
  int64_t total = g.batch * g.channels * g.height * g.width;
  if (total == 0)
    return cudaSuccess;
  I* argmax = nullptr;
  if (kind == PoolKind::Max) {
    int64_t outputs = g.batch * g.channels * g.outHeight * g.outWidth;
    if (workspace == nullptr)
      return cudaErrorInvalidValue;
    argmax = static_cast<I*>(workspace);
    if (outputs > 0)
      windowArgmaxKernel<S, I><<<blocksFor(outputs), kThreads, 0, stream>>>(narrowed<I>(g), static_cast<const S*>(x),
                                                                            argmax, I(outputs));
    cudaError_t launched = cudaGetLastError();
    if (launched != cudaSuccess)
      return launched;
  }
  poolGradKernel<S, I><<<blocksFor(total), kThreads, 0, stream>>>(narrowed<I>(g), kind == PoolKind::Max,
                                                                  static_cast<const S*>(dy), argmax,
                                                                  static_cast<S*>(dx), I(total));
  return cudaGetLastError();
}

template <typename S>
cudaError_t poolAs(PoolKind kind, const PoolGeometry& g, const void* x, void* y, cudaStream_t stream) {
  return fitsInt32(g) ? pool<S, int32_t>(kind, g, x, y, stream) : pool<S, int64_t>(kind, g, x, y, stream);
}

template <typename S>
cudaError_t poolGradAs(PoolKind kind, const PoolGeometry& g, const void* dy, const void* x, void* dx, void* workspace,
                       cudaStream_t stream) {
  return fitsInt32(g) ? poolGrad<S, int32_t>(kind, g, dy, x, dx, workspace, stream)
                      : poolGrad<S, int64_t>(kind, g, dy, x, dx, workspace, stream);
}

} // namespace

std::size_t poolGradWorkspaceBytes(PoolKind kind, const PoolGeometry& geometry) {
  if (kind != PoolKind::Max)
    return 0;
  int64_t outputs = geometry.batch * geometry.channels * geometry.outHeight * geometry.outWidth;
  return std::size_t(outputs) * (fitsInt32(geometry) ? sizeof(int32_t) : sizeof(int64_t));
}

cudaError_t launchPool2d(Storage storage, PoolKind kind, const PoolGeometry& geometry, const void* x, void* y,
                         cudaStream_t stream) {
  switch (storage) {
  case Storage::F32: return poolAs<float>(kind, geometry, x, y, stream);
  case Storage::F16: return poolAs<__half>(kind, geometry, x, y, stream);
  case Storage::BF16: return poolAs<__nv_bfloat16>(kind, geometry, x, y, stream);
  case Storage::F64: return poolAs<double>(kind, geometry, x, y, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launchPool2dGrad(Storage storage, PoolKind kind, const PoolGeometry& geometry, const void* dy,
                             const void* x, void* dx, void* workspace, cudaStream_t stream) {
  switch (storage) {
  case Storage::F32: return poolGradAs<float>(kind, geometry, dy, x, dx, workspace, stream);
  case Storage::F16: return poolGradAs<__half>(kind, geometry, dy, x, dx, workspace, stream);
  case Storage::BF16: return poolGradAs<__nv_bfloat16>(kind, geometry, dy, x, dx, workspace, stream);
  case Storage::F64: return poolGradAs<double>(kind, geometry, dy, x, dx, workspace, stream);
  }
  return cudaErrorInvalidValue;
}

} // namespace ampjit::runtime::cuda::pooling
