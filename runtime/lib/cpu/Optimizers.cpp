// The fused optimizer updates (jit.sgd_update, jit.adam_update), following
// PyTorch's single-tensor SGD and Adam/AdamW (with AMSGrad). The gradient is read in its own
// precision and multiplied by inv_scale in fp32 as it is read; the update
// computes in the parameter's precision (f32, or f64); O2's low-precision
// parameter copy is written from the new value with one rounding.
//
// With the predicate false nothing is computed and every new value is the
// old one, bit for bit (copied when codegen gave it a separate buffer).

#include "CpuKernels.h"

namespace ampjit::runtime::cpu {

namespace {

/// Copies state to its new-value slot when that is a different buffer.
void carryOver(const BufferView& from, const BufferView& to) {
  if (to.present && to.data != from.data)
    std::memcpy(to.data, from.data, size_t(from.count) * dtypeSize(from.dtype));
}

/// Elements processed together: state the update reads is read in place
/// when it holds the compute type and otherwise widened a chunk at a time
/// into plain arrays (the bulk conversions); the new values go to arrays of
/// their own and are rounded back (or copied) a chunk at a time. Per element
/// the arithmetic is the one PyTorch's loop does, in the same order.
constexpr int64_t kChunk = 256;

/// Elements [begin, begin + n) of `view` as T: the buffer's own when it holds
/// T (an f32 master's state, every step), else widened into `scratch`. The
/// loops then never read and write one array: an array that is both (the
/// same pointer in and out) fails GCC's overlap check and runs scalar.
template <typename T>
const T* readInPlaceOrWiden(const BufferView& view, int64_t begin, int64_t n, T* scratch) {
  if (view.dtype == (std::is_same_v<T, float> ? DType::F32 : DType::F64))
    return view.as<const T>() + begin;
  loadRange<T>(view, begin, n, scratch);
  return scratch;
}

/// Gradient elements [begin, begin + n), unscaled and with maximize applied
/// (PyTorch negates the gradient before weight decay).
template <typename T>
struct GradientReader {
  const BufferView& grad;
  float invScale;
  bool hasInvScale;
  bool maximize;
  void operator()(int64_t begin, int64_t n, T* out) const {
    if (grad.dtype == DType::F64) {
      double factor = hasInvScale ? double(invScale) : 1.0;
      for (int64_t i = 0; i < n; ++i)
        out[i] = T(loadAs<double>(grad, begin + i) * factor);
    } else {
      // Low-precision and f32 gradients are unscaled in fp32, as they are read.
      float unscaled[kChunk];
      loadRange<float>(grad, begin, n, unscaled);
      if (hasInvScale)
        for (int64_t i = 0; i < n; ++i)
          unscaled[i] *= invScale;
      for (int64_t i = 0; i < n; ++i)
        out[i] = T(unscaled[i]);
    }
    if (maximize)
      for (int64_t i = 0; i < n; ++i)
        out[i] = -out[i];
  }
};

/// torch.maximum: NaN when either is NaN.
template <typename T>
T maximumPropagatingNan(T a, T b) {
  if (std::isnan(a))
    return a;
  return b > a || std::isnan(b) ? b : a;
}

template <typename T>
void sgd(const OptimizerParams& params, const StepIO& io) {
  using namespace sgd_slot;
  const BufferView &param = io.in[kParam], &buffer = io.in[kMomentumBuffer], &copy = io.in[kParamCopy];
  const BufferView &newParam = io.out[kNewParam], &newBuffer = io.out[kNewMomentumBuffer],
                   &newCopy = io.out[kNewParamCopy];
  bool firstStep = io.in[kStep].present && io.in[kStep].as<const int64_t>()[0] == 0;
  GradientReader<T> readGrad{io.in[kGrad], io.in[kInvScale].present ? io.in[kInvScale].as<const float>()[0] : 1.0f,
                             io.in[kInvScale].present, params.maximize};
  T lr = T(io.in[kLr].as<const float>()[0]);
  T momentum = T(params.momentum), weightDecay = T(params.weightDecay);
  T undamped = T(1.0 - params.dampening);
  bool useMomentum = params.momentum != 0.0;
  T pWide[kChunk], bWide[kChunk];
  T p[kChunk], g[kChunk], b[kChunk];
  for (int64_t begin = 0; begin < param.count; begin += kChunk) {
    int64_t n = std::min(kChunk, param.count - begin);
    const T* pIn = readInPlaceOrWiden<T>(param, begin, n, pWide);
    readGrad(begin, n, g);
    if (params.weightDecay != 0.0)
      for (int64_t i = 0; i < n; ++i)
        g[i] = g[i] + weightDecay * pIn[i];
    const T* direction = g;
    if (useMomentum) {
      // PyTorch starts the buffer as the gradient itself on the first step.
      if (firstStep) {
        std::copy(g, g + n, b);
      } else {
        const T* bIn = readInPlaceOrWiden<T>(buffer, begin, n, bWide);
        for (int64_t i = 0; i < n; ++i)
          b[i] = momentum * bIn[i] + undamped * g[i];
      }
      storeRange<T>(newBuffer, begin, n, b);
      if (params.nesterov)
        for (int64_t i = 0; i < n; ++i)
          g[i] = g[i] + momentum * b[i];
      else
        direction = b;
    }
    for (int64_t i = 0; i < n; ++i)
      p[i] = pIn[i] - lr * direction[i];
    storeRange<T>(newParam, begin, n, p);
    if (copy.present)
      storeRange<T>(newCopy, begin, n, p);
  }
}

template <typename T>
void adam(const OptimizerParams& params, const StepIO& io) {
  using namespace adam_slot;
  const BufferView &param = io.in[kParam], &expAvg = io.in[kExpAvg], &expAvgSq = io.in[kExpAvgSq],
                   &maxExpAvgSq = io.in[kMaxExpAvgSq], &copy = io.in[kParamCopy];
  const BufferView &newParam = io.out[kNewParam], &newExpAvg = io.out[kNewExpAvg],
                   &newExpAvgSq = io.out[kNewExpAvgSq], &newMaxExpAvgSq = io.out[kNewMaxExpAvgSq],
                   &newCopy = io.out[kNewParamCopy];
  GradientReader<T> readGrad{io.in[kGrad], io.in[kInvScale].present ? io.in[kInvScale].as<const float>()[0] : 1.0f,
                             io.in[kInvScale].present, params.maximize};
  // Scalars in double, as PyTorch computes them from Python floats.
  double lr = io.in[kLr].as<const float>()[0];
  double step = double(io.in[kStep].as<const int64_t>()[0] + 1);
  double biasCorrection1 = 1.0 - std::pow(params.beta1, step);
  double biasCorrection2 = 1.0 - std::pow(params.beta2, step);
  T stepSize = T(lr / biasCorrection1);
  T biasCorrection2Sqrt = T(std::sqrt(biasCorrection2));
  T decay = T(1.0 - lr * params.weightDecay);
  T weightDecay = T(params.weightDecay), eps = T(params.eps);
  T beta2 = T(params.beta2), oneMinusBeta1 = T(1.0 - params.beta1), oneMinusBeta2 = T(1.0 - params.beta2);
  bool decoupledDecay = params.weightDecay != 0.0 && params.decoupledWeightDecay;
  T pWide[kChunk], mWide[kChunk], vWide[kChunk], vMaxWide[kChunk];
  T p[kChunk], g[kChunk], m[kChunk], v[kChunk], vMax[kChunk];
  for (int64_t begin = 0; begin < param.count; begin += kChunk) {
    int64_t n = std::min(kChunk, param.count - begin);
    const T* pIn = readInPlaceOrWiden<T>(param, begin, n, pWide);
    readGrad(begin, n, g);
    const T* mIn = readInPlaceOrWiden<T>(expAvg, begin, n, mWide);
    const T* vIn = readInPlaceOrWiden<T>(expAvgSq, begin, n, vWide);
    if (params.weightDecay != 0.0 && !decoupledDecay)
      for (int64_t i = 0; i < n; ++i)
        g[i] = g[i] + weightDecay * pIn[i];
    for (int64_t i = 0; i < n; ++i) {
      m[i] = mIn[i] + oneMinusBeta1 * (g[i] - mIn[i]); // lerp(m, g, 1 - beta1)
      v[i] = vIn[i] * beta2 + oneMinusBeta2 * (g[i] * g[i]);
    }
    const T* denominatorSource = v;
    if (maxExpAvgSq.present) {
      const T* vMaxIn = readInPlaceOrWiden<T>(maxExpAvgSq, begin, n, vMaxWide);
      for (int64_t i = 0; i < n; ++i)
        vMax[i] = maximumPropagatingNan(vMaxIn[i], v[i]);
      storeRange<T>(newMaxExpAvgSq, begin, n, vMax);
      denominatorSource = vMax;
    }
    // AdamW decays the parameter (rounded, as PyTorch's p.mul_) before the step.
    for (int64_t i = 0; i < n; ++i) {
      T denominator = std::sqrt(denominatorSource[i]) / biasCorrection2Sqrt + eps;
      T decayed = decoupledDecay ? pIn[i] * decay : pIn[i];
      p[i] = decayed - stepSize * (m[i] / denominator);
    }
    storeRange<T>(newExpAvg, begin, n, m);
    storeRange<T>(newExpAvgSq, begin, n, v);
    storeRange<T>(newParam, begin, n, p);
    if (copy.present)
      storeRange<T>(newCopy, begin, n, p);
  }
}

} // namespace

Status runOptimizerUpdate(const Step& step, const StepIO& io) {
  const OptimizerParams& params = step.as<OptimizerParams>();
  bool adamStep = params.optimizer == OptimizerKind::Adam;
  size_t predicateSlot = adamStep ? adam_slot::kPredicate : sgd_slot::kPredicate;
  const BufferView& predicate = io.in[predicateSlot];
  if (predicate.present && predicate.as<const uint8_t>()[0] == 0) {
    // Skipped step: each new value is its state input, untouched.
    if (adamStep) {
      carryOver(io.in[adam_slot::kParam], io.out[adam_slot::kNewParam]);
      carryOver(io.in[adam_slot::kExpAvg], io.out[adam_slot::kNewExpAvg]);
      carryOver(io.in[adam_slot::kExpAvgSq], io.out[adam_slot::kNewExpAvgSq]);
      carryOver(io.in[adam_slot::kMaxExpAvgSq], io.out[adam_slot::kNewMaxExpAvgSq]);
      carryOver(io.in[adam_slot::kParamCopy], io.out[adam_slot::kNewParamCopy]);
    } else {
      carryOver(io.in[sgd_slot::kParam], io.out[sgd_slot::kNewParam]);
      carryOver(io.in[sgd_slot::kMomentumBuffer], io.out[sgd_slot::kNewMomentumBuffer]);
      carryOver(io.in[sgd_slot::kParamCopy], io.out[sgd_slot::kNewParamCopy]);
    }
    return Status::success();
  }
  withComputeType(step.computeType, [&](auto zero) {
    using T = decltype(zero);
    if (adamStep)
      adam<T>(params, io);
    else
      sgd<T>(params, io);
    return 0;
  });
  return Status::success();
}

} // namespace ampjit::runtime::cpu
