// Max and average pooling over [height, width] windows, and their gradients,
// with PyTorch's CPU semantics (Pool2dParams in Plan.h).
//
// The kernels address NCHW and NHWC data through strides and visit output
// positions and window elements in the same order for both layouts, so the
// arithmetic, and therefore every bit of the result, is the same. Values are
// widened to the compute type; gradients accumulate there (overlapping
// windows add up in output row-major order) and are rounded once.

#include "CpuKernels.h"

#include "ampjit/runtime/WindowShape.h"

#include <algorithm>

namespace ampjit::runtime::cpu {

namespace {

/// Element offsets of a rank-4 activation in either layout.
struct ActivationStrides {
  int64_t batch, channel, height, width;
  ActivationStrides(const Shape& shape, bool nhwc) {
    std::vector<int64_t> strides = contiguousStrides(shape);
    ActivationDims a = activationDims(nhwc);
    batch = strides[size_t(a.batch)];
    channel = strides[size_t(a.channel)];
    height = strides[size_t(a.height)];
    width = strides[size_t(a.width)];
  }
  int64_t plane(int64_t n, int64_t c) const { return n * batch + c * channel; }
};

/// The part of one window that lies inside the input, and the average's divisor.
struct Window {
  int64_t hStart, hEnd, wStart, wEnd;
  int64_t divisor;
};

struct PoolGeometry {
  int64_t batch, channels, height, width, outHeight, outWidth;
  const Pool2dParams& params;

  PoolGeometry(const Pool2dParams& params, const Shape& x, const Shape& y) : params(params) {
    ActivationDims a = activationDims(params.nhwc);
    batch = x[size_t(a.batch)];
    channels = x[size_t(a.channel)];
    height = x[size_t(a.height)];
    width = x[size_t(a.width)];
    outHeight = y[size_t(a.height)];
    outWidth = y[size_t(a.width)];
  }

  /// PyTorch's window: the end is first clipped to the padded input (the
  /// count_include_pad divisor, which ceil mode can leave smaller than the
  /// kernel), then both ends to the input itself. The verifier's padding <=
  /// kernel/2 rule and ceil mode's start-inside rule keep every window
  /// non-empty.
  Window at(int64_t oh, int64_t ow) const {
    int64_t hStart = oh * params.stride[0] - params.padding[0];
    int64_t wStart = ow * params.stride[1] - params.padding[1];
    int64_t hEnd = std::min(hStart + params.kernel[0], height + params.padding[0]);
    int64_t wEnd = std::min(wStart + params.kernel[1], width + params.padding[1]);
    int64_t paddedSize = (hEnd - hStart) * (wEnd - wStart);
    Window window{std::max<int64_t>(hStart, 0), std::min(hEnd, height), std::max<int64_t>(wStart, 0),
                  std::min(wEnd, width), 0};
    window.divisor = params.countIncludePad
                         ? paddedSize
                         : (window.hEnd - window.hStart) * (window.wEnd - window.wStart);
    return window;
  }

  /// Calls f(inputPlane, outputPlane, oh, ow) for every output element, in
  /// (n, c, oh, ow) order whatever the layout.
  template <typename F>
  void forEachOutput(const ActivationStrides& in, const ActivationStrides& out, F&& f) const {
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t oh = 0; oh < outHeight; ++oh)
          for (int64_t ow = 0; ow < outWidth; ++ow)
            f(in.plane(n, c), out.plane(n, c) + oh * out.height + ow * out.width, oh, ow);
  }
};

/// The offset of the window's maximum, and the maximum. PyTorch's CPU rule:
/// scanning in row-major order, a value replaces the current maximum when it
/// is greater or NaN, so among equal maxima the first wins and a NaN always
/// takes over (the last NaN of the window wins). Padding is -inf, i.e. never
/// chosen: the scan starts at the window's first in-bounds element.
template <typename T>
std::pair<int64_t, T> windowMax(const T* x, int64_t plane, const ActivationStrides& in, const Window& window) {
  int64_t best = plane + window.hStart * in.height + window.wStart * in.width;
  T max = -std::numeric_limits<T>::infinity();
  for (int64_t h = window.hStart; h < window.hEnd; ++h)
    for (int64_t w = window.wStart; w < window.wEnd; ++w) {
      int64_t offset = plane + h * in.height + w * in.width;
      T value = x[offset];
      if (value > max || std::isnan(value)) {
        max = value;
        best = offset;
      }
    }
  return {best, max};
}

template <typename T>
Status pool(const Step& step, const StepIO& io) {
  const Pool2dParams& params = step.as<Pool2dParams>();
  const BufferView &xView = io.in[0], &yView = io.out[0];
  PoolGeometry geometry(params, xView.dims(), yView.dims());
  ActivationStrides in(xView.dims(), params.nhwc), out(yView.dims(), params.nhwc);
  std::vector<T> x = loadAll<T>(xView);
  std::vector<T> y(size_t(yView.count));
  bool max = step.kind == StepKind::MaxPool2d;
  geometry.forEachOutput(in, out, [&](int64_t plane, int64_t target, int64_t oh, int64_t ow) {
    Window window = geometry.at(oh, ow);
    if (max) {
      y[size_t(target)] = windowMax(x.data(), plane, in, window).second;
      return;
    }
    T sum = 0;
    for (int64_t h = window.hStart; h < window.hEnd; ++h)
      for (int64_t w = window.wStart; w < window.wEnd; ++w)
        sum += x[size_t(plane + h * in.height + w * in.width)];
    y[size_t(target)] = sum / T(window.divisor);
  });
  storeRange<T>(yView, 0, int64_t(y.size()), y.data());
  return Status::success();
}

/// Max: each dy goes to its window's maximum (windowMax, recomputed from x).
/// Average: each dy / divisor goes to every in-bounds element of its window.
template <typename T>
Status poolGrad(const Step& step, const StepIO& io) {
  const Pool2dParams& params = step.as<Pool2dParams>();
  const BufferView &dyView = io.in[0], &xView = io.in[1], &dxView = io.out[0];
  PoolGeometry geometry(params, xView.dims(), dyView.dims());
  ActivationStrides in(xView.dims(), params.nhwc), out(dyView.dims(), params.nhwc);
  std::vector<T> dy = loadAll<T>(dyView);
  std::vector<T> dx(size_t(dxView.count), T(0));
  if (step.kind == StepKind::MaxPool2dGrad) {
    std::vector<T> x = loadAll<T>(xView);
    geometry.forEachOutput(in, out, [&](int64_t plane, int64_t source, int64_t oh, int64_t ow) {
      int64_t argmax = windowMax(x.data(), plane, in, geometry.at(oh, ow)).first;
      dx[size_t(argmax)] += dy[size_t(source)];
    });
  } else {
    geometry.forEachOutput(in, out, [&](int64_t plane, int64_t source, int64_t oh, int64_t ow) {
      Window window = geometry.at(oh, ow);
      T share = dy[size_t(source)] / T(window.divisor);
      for (int64_t h = window.hStart; h < window.hEnd; ++h)
        for (int64_t w = window.wStart; w < window.wEnd; ++w)
          dx[size_t(plane + h * in.height + w * in.width)] += share;
    });
  }
  storeRange<T>(dxView, 0, int64_t(dx.size()), dx.data());
  return Status::success();
}

} // namespace

Status runPool2d(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return pool<decltype(zero)>(step, io); });
}

Status runPool2dGrad(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return poolGrad<decltype(zero)>(step, io); });
}

} // namespace ampjit::runtime::cpu
