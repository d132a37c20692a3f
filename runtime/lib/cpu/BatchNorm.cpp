// Batch normalisation: statistics per index of the channel axis over every
// other dimension, for any axis (1 for NCHW and [N, C], 3 for NHWC).
//
// The per-channel sums (mean, centred squares, and the gradient's sum(dy) and
// sum(dy * xhat)) accumulate in double whatever the data type, as PyTorch's
// CPU kernel does, and each statistic is rounded once to the statistics type
// (f32, f64 for f64 data). The elementwise parts (normalising, dx) run in the
// step's compute type with those rounded per-channel values, so y and dx are
// computed from exactly the save_mean/save_invstd the plan stores.
//
// Sums visit elements in row-major order of the reduced index. For NCHW
// (axis 1) and NHWC (axis 3) that is (n, h, w) in both, so the two layouts
// produce identical bits.
//
// The fused epilogues (Plan.h, BatchNormActivation) are the unfused steps'
// arithmetic without the stores between them: relu(bn + z) in the compute
// type with the Elementwise relu (`v < 0 ? 0 : v`), and in the gradient the
// ReluGrad select applied to dy before the sums. So f32/f64 plans give the
// unfused bits, and f16/bf16 forwards differ only by the skipped roundings.

#include "CpuKernels.h"

namespace ampjit::runtime::cpu {

namespace {

/// The data as [outer, channels, inner] around the channel axis.
struct ChannelLayout {
  int64_t outer = 1, channels = 1, inner = 1;
  ChannelLayout(const Shape& shape, int64_t axis) : channels(shape[size_t(axis)]) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (int64_t(d) < axis)
        outer *= shape[d];
      else if (int64_t(d) > axis)
        inner *= shape[d];
    }
  }
  /// Elements per channel.
  int64_t perChannel() const { return outer * inner; }

  /// Calls f(channel, index) for every element, each channel's elements in
  /// row-major order of the reduced index.
  template <typename F>
  void forEach(F&& f) const {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < channels; ++c) {
        int64_t base = (o * channels + c) * inner;
        for (int64_t i = 0; i < inner; ++i)
          f(c, base + i);
      }
  }
};

/// An optional per-channel operand, or `fill` when the slot is absent.
template <typename T>
std::vector<T> loadOr(const BufferView& view, int64_t channels, T fill) {
  return view.present ? loadAll<T>(view) : std::vector<T>(size_t(channels), fill);
}

template <typename T>
Status batchNorm(const Step& step, const StepIO& io) {
  const BatchNormParams& params = step.as<BatchNormParams>();
  bool training = step.kind == StepKind::BatchNorm;
  ChannelLayout layout(io.in[0].dims(), params.axis);
  int64_t channels = layout.channels;
  size_t channelCount = size_t(channels); // (`vector<T> v(size_t(channels))` would declare a function)
  // Everything is read before anything is written: the new running
  // statistics may be the running-statistics buffers themselves (state
  // updated in place).
  std::vector<T> x = loadAll<T>(io.in[0]);
  std::vector<T> weight = loadOr<T>(io.in[1], channels, T(1));
  std::vector<T> bias = loadOr<T>(io.in[2], channels, T(0));
  std::vector<T> runningMean = loadAll<T>(io.in[3]);
  std::vector<T> runningVar = loadAll<T>(io.in[4]);

  std::vector<T> mean(channelCount), invstd(channelCount);
  std::vector<T> newRunningMean, newRunningVar;
  if (training) {
    double count = double(layout.perChannel());
    // Two passes (mean, then centred squares): no cancellation for data far from zero.
    std::vector<double> sums(size_t(channels), 0.0), squares(size_t(channels), 0.0);
    layout.forEach([&](int64_t c, int64_t i) { sums[size_t(c)] += double(x[size_t(i)]); });
    std::vector<double> batchMean(channelCount);
    for (int64_t c = 0; c < channels; ++c)
      batchMean[size_t(c)] = sums[size_t(c)] / count;
    layout.forEach([&](int64_t c, int64_t i) {
      double centred = double(x[size_t(i)]) - batchMean[size_t(c)];
      squares[size_t(c)] += centred * centred;
    });
    double momentum = params.momentum;
    newRunningMean.resize(channelCount);
    newRunningVar.resize(channelCount);
    for (int64_t c = 0; c < channels; ++c) {
      size_t k = size_t(c);
      double biasedVar = squares[k] / count, unbiasedVar = squares[k] / (count - 1);
      mean[k] = T(batchMean[k]);
      invstd[k] = T(1.0 / std::sqrt(biasedVar + params.eps));
      newRunningMean[k] = T((1 - momentum) * double(runningMean[k]) + momentum * batchMean[k]);
      newRunningVar[k] = T((1 - momentum) * double(runningVar[k]) + momentum * unbiasedVar);
    }
  } else {
    for (int64_t c = 0; c < channels; ++c) {
      mean[size_t(c)] = runningMean[size_t(c)];
      invstd[size_t(c)] = T(1.0 / std::sqrt(double(runningVar[size_t(c)]) + params.eps));
    }
  }

  std::vector<T> y(x.size());
  layout.forEach([&](int64_t c, int64_t i) {
    size_t k = size_t(c);
    y[size_t(i)] = (x[size_t(i)] - mean[k]) * invstd[k] * weight[k] + bias[k];
  });
  if (params.activation == BatchNormActivation::AddRelu) {
    std::vector<T> z = loadAll<T>(io.in[batch_norm_slot::kZ]);
    for (size_t e = 0; e < y.size(); ++e)
      y[e] = y[e] + z[e];
  }
  if (params.activation != BatchNormActivation::None)
    for (T& value : y)
      value = value < T(0) ? T(0) : value;
  storeRange<T>(io.out[0], 0, int64_t(y.size()), y.data());
  if (training) {
    storeRange<T>(io.out[1], 0, channels, mean.data());
    storeRange<T>(io.out[2], 0, channels, invstd.data());
    storeRange<T>(io.out[3], 0, channels, newRunningMean.data());
    storeRange<T>(io.out[4], 0, channels, newRunningVar.data());
  }
  return Status::success();
}

/// xhat = (x - mean) * invstd; dbias = sum(dy); dweight = sum(dy * xhat);
/// dx = weight * invstd * (dy - dbias/M - xhat * dweight/M), which is
/// weight*invstd/M * (M*dy - dbias - xhat*dweight) with the 1/M folded into
/// the per-channel sums.
template <typename T>
Status batchNormGrad(const Step& step, const StepIO& io) {
  const BatchNormGradParams& params = step.as<BatchNormGradParams>();
  ChannelLayout layout(io.in[1].dims(), params.axis);
  int64_t channels = layout.channels;
  size_t channelCount = size_t(channels); // (`vector<T> v(size_t(channels))` would declare a function)
  std::vector<T> dy = loadAll<T>(io.in[0]), x = loadAll<T>(io.in[1]);
  if (params.activation != BatchNormActivation::None) {
    // The relu's gradient: from here on `dy` is g. The bias slot is unused.
    std::vector<T> y = loadAll<T>(io.in[batch_norm_grad_slot::kY]);
    for (size_t e = 0; e < dy.size(); ++e)
      dy[e] = y[e] > T(0) ? dy[e] : T(0);
    if (params.activation == BatchNormActivation::AddRelu)
      storeRange<T>(io.out[batch_norm_grad_slot::kDz], 0, int64_t(dy.size()), dy.data());
  }
  std::vector<T> mean = loadAll<T>(io.in[2]), invstd = loadAll<T>(io.in[3]);
  std::vector<T> weight = loadOr<T>(io.in[4], channels, T(1));

  std::vector<T> xhat(x.size());
  std::vector<double> sumDy(size_t(channels), 0.0), sumDyXhat(size_t(channels), 0.0);
  layout.forEach([&](int64_t c, int64_t i) {
    size_t k = size_t(c), e = size_t(i);
    xhat[e] = (x[e] - mean[k]) * invstd[k];
    sumDy[k] += double(dy[e]);
    sumDyXhat[k] += double(dy[e]) * double(xhat[e]);
  });

  double count = double(layout.perChannel());
  std::vector<T> dweight(channelCount), dbias(channelCount);
  std::vector<T> meanDy(channelCount), meanDyXhat(channelCount), scale(channelCount);
  for (int64_t c = 0; c < channels; ++c) {
    size_t k = size_t(c);
    dbias[k] = T(sumDy[k]);
    dweight[k] = T(sumDyXhat[k]);
    meanDy[k] = T(sumDy[k] / count);
    meanDyXhat[k] = T(sumDyXhat[k] / count);
    scale[k] = T(double(weight[k]) * double(invstd[k]));
  }
  std::vector<T> dx(x.size());
  layout.forEach([&](int64_t c, int64_t i) {
    size_t k = size_t(c), e = size_t(i);
    dx[e] = scale[k] * (dy[e] - meanDy[k] - xhat[e] * meanDyXhat[k]);
  });
  storeRange<T>(io.out[0], 0, int64_t(dx.size()), dx.data());
  storeRange<T>(io.out[1], 0, channels, dweight.data());
  storeRange<T>(io.out[2], 0, channels, dbias.data());
  return Status::success();
}

} // namespace

Status runBatchNorm(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return batchNorm<decltype(zero)>(step, io); });
}

Status runBatchNormGrad(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return batchNormGrad<decltype(zero)>(step, io); });
}

} // namespace ampjit::runtime::cpu
