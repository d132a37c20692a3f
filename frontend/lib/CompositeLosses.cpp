// Losses PyTorch users expect that need no op of their own: each is written
// with the public ops, so autograd, autocast, tracing and every backend take
// it as it is. The absolute value and maxima are selects chosen so the
// gradients at the kinks are PyTorch's (sign(0) = 0; sigmoid(0) - y).

#include "Dispatch.h"

#include "jit/Ops.h"

#include <string>
#include <utility>

namespace jit {

namespace {

/// Input and target in the type the loss computes in: the wider of theirs,
/// and fp32 for f16/bf16 (PyTorch's autocast runs these losses in fp32).
std::pair<Tensor, Tensor> lossOperands(const char* loss, const Tensor& input, const Tensor& target) {
  if (!input.defined() || !target.defined())
    throw Error(std::string(loss) + ": input and target must be defined");
  if (input.shape() != target.shape() || !is_floating_point(input.dtype()) || !is_floating_point(target.dtype()))
    throw Error(std::string(loss) + ": target " + detail::describe(target) + " must be floating-point of the shape of input " +
                detail::describe(input));
  DType type = input.dtype() == f64 || target.dtype() == f64 ? f64 : f32;
  // Converted even when already of that type: a traced step sees every
  // tensor as its fp32 trace type, and the recorded convert is what keeps
  // the loss (and the sum of its gradients) in fp32 there, as eagerly.
  return {input.to(type), target.to(type)};
}

Tensor reduce(const Tensor& elementwise, Reduction reduction) {
  switch (reduction) {
  case Reduction::none: return elementwise;
  case Reduction::sum: return sum(elementwise);
  case Reduction::mean: break;
  }
  return mean(elementwise);
}

/// A rank-0 zero of `t`'s dtype.
Tensor zeroOf(const Tensor& t) { return full({}, 0.0, t.dtype()); }

/// |d| with gradient sign(d), 0 at 0.
Tensor absolute(const Tensor& d) {
  Tensor zero = zeroOf(d);
  return where(d > zero, d, zero) + where(d < zero, -d, zero);
}

} // namespace

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, BceWithLogitsOptions options,
                                        std::source_location where) {
  detail::UserFrame frame(where);
  auto [x, y] = lossOperands("binary_cross_entropy_with_logits", input, target);
  Tensor zero = zeroOf(x);
  // |x| with gradient +1 at 0, so that with max(-x, 0)'s 0 there the
  // gradient at 0 is sigmoid(0) - y.
  Tensor magnitude = jit::where(x < zero, -x, x);
  Tensor softplusOfMinusX = log(exp(-magnitude) + 1.0) + relu(-x); // log(1 + exp(-x)), stably
  Tensor weighted = softplusOfMinusX;
  if (options.pos_weight.defined()) {
    if (!is_floating_point(options.pos_weight.dtype()))
      throw Error("binary_cross_entropy_with_logits: pos_weight " + detail::describe(options.pos_weight) +
                  " must be floating-point");
    Tensor positive = options.pos_weight.dtype() == x.dtype() ? options.pos_weight : options.pos_weight.to(x.dtype());
    weighted = (y * (positive - 1.0) + 1.0) * softplusOfMinusX;
  }
  return reduce((1.0 - y) * x + weighted, options.reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, L1LossOptions options, std::source_location where) {
  detail::UserFrame frame(where);
  auto [x, y] = lossOperands("l1_loss", input, target);
  return reduce(absolute(x - y), options.reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, SmoothL1LossOptions options,
                      std::source_location where) {
  detail::UserFrame frame(where);
  auto [x, y] = lossOperands("smooth_l1_loss", input, target);
  if (!(options.beta >= 0.0))
    throw Error("smooth_l1_loss: beta must be >= 0, got " + std::to_string(options.beta));
  Tensor d = x - y, size = absolute(d);
  if (options.beta == 0.0)
    return reduce(size, options.reduction);
  Tensor quadratic = d * d * (0.5 / options.beta), linear = size - 0.5 * options.beta;
  return reduce(jit::where(size < full({}, options.beta, d.dtype()), quadratic, linear), options.reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, HuberLossOptions options, std::source_location where) {
  detail::UserFrame frame(where);
  auto [x, y] = lossOperands("huber_loss", input, target);
  if (!(options.delta > 0.0))
    throw Error("huber_loss: delta must be > 0, got " + std::to_string(options.delta));
  Tensor d = x - y, size = absolute(d);
  Tensor quadratic = d * d * 0.5, linear = (size - 0.5 * options.delta) * options.delta;
  return reduce(jit::where(size <= full({}, options.delta, d.dtype()), quadratic, linear), options.reduction);
}

} // namespace jit
