#ifndef AMPJIT_FRONTEND_LIB_OPTIM_UPDATEFORMULAS_H
#define AMPJIT_FRONTEND_LIB_OPTIM_UPDATEFORMULAS_H

// The pieces of the optimizers written with the public elementwise ops
// (ElementwiseOptimizers.cpp, NormScaledOptimizers.cpp): the gradient as
// they read it, weight decay, running averages, norms. Each is an
// expression of Tensor ops, so a traced step records it and codegen fuses it.

#include "jit/Ops.h"
#include "jit/Tensor.h"

#include <cmath>
#include <utility>

namespace jit::detail::update_formulas {

inline Tensor inDtype(const Tensor& tensor, DType dtype) { return tensor.dtype() == dtype ? tensor : tensor.to(dtype); }

/// The gradient as the fused updates read it: unscaled in fp32 (f64 for an
/// f64 gradient) as it is read, then in the parameter's precision, negated
/// under maximize (PyTorch negates before weight decay).
inline Tensor unscaledGradient(const Tensor& grad, const Tensor& param, const Tensor& inv_scale, bool maximize) {
  Tensor g = grad;
  if (inv_scale.defined()) {
    DType unscaleIn = grad.dtype() == f64 ? f64 : f32;
    g = inDtype(grad, unscaleIn) * inDtype(inv_scale, unscaleIn);
  }
  g = inDtype(g, param.dtype());
  return maximize ? -g : g;
}

/// base^exponent for a host base and a tensor exponent (a function of the
/// step count): exp(exponent * log(base)), in the exponent's dtype.
inline Tensor powerOf(double base, const Tensor& exponent) { return exp(exponent * std::log(base)); }

/// The gradient with PyTorch's coupled (L2) weight decay:
/// g + weight_decay * param, or `g` itself when weight_decay is 0.
inline Tensor withL2(const Tensor& g, const Tensor& param, double weight_decay) {
  return weight_decay == 0.0 ? g : g + param * weight_decay;
}

/// Weight decay as RAdam, NAdam and Adafactor take it, before the moments:
/// AdamW's param *= 1 - lr * weight_decay (`param` is rebound), or the L2
/// term added to the gradient `g`.
inline void applyWeightDecay(Tensor& param, Tensor& g, const Tensor& lr, double weight_decay, bool decoupled) {
  if (weight_decay == 0.0)
    return;
  if (decoupled)
    param = param * inDtype(1.0 - lr.to(f64) * weight_decay, param.dtype());
  else
    g = withL2(g, param, weight_decay);
}

/// start.lerp_(end, weight) as these optimizers use it, with a host weight:
/// start + (end - start) * weight (a running average's update).
inline Tensor lerpToward(const Tensor& start, const Tensor& end, double weight) { return start + (end - start) * weight; }
inline Tensor lerpToward(const Tensor& start, const Tensor& end, const Tensor& weight) { return start + (end - start) * weight; }

/// A running average of g^2 (Adam's exp_avg_sq, RMSprop's square_avg):
/// average * decay + (1 - decay) g^2.
inline Tensor squareAverage(const Tensor& average, const Tensor& g, double decay) {
  return average * decay + g * g * (1.0 - decay);
}

/// Where a parameter's norms and squares accumulate: f64 for f64, else f32
/// (low-precision squares would overflow).
inline DType accumulationOf(const Tensor& param) { return param.dtype() == f64 ? f64 : f32; }

/// |x| from a comparison and a select (the dialect has no abs): -0 < 0 is
/// false, so -0 stays -0, and a NaN stays NaN.
inline Tensor magnitudeOf(const Tensor& x) { return where(lt(x, scalar_tensor(0.0, x.dtype())), -x, x); }

/// sum(x^2), in `accumulate`.
inline Tensor sumOfSquares(const Tensor& x, DType accumulate) {
  Tensor wide = inDtype(x, accumulate);
  return sum(wide * wide);
}

/// sqrt(sum(x^2)), in `accumulate`.
inline Tensor l2Norm(const Tensor& x, DType accumulate) { return sqrt(sumOfSquares(x, accumulate)); }

/// Adam's running moments after gradient `g`: exp_avg.lerp_(g, 1 - beta1)
/// and exp_avg_sq * beta2 + (1 - beta2) g^2.
inline std::pair<Tensor, Tensor> adamMoments(const Tensor& expAvg, const Tensor& expAvgSq, const Tensor& g,
                                      std::pair<double, double> betas) {
  return {lerpToward(expAvg, g, 1.0 - betas.first), squareAverage(expAvgSq, g, betas.second)};
}

} // namespace jit::detail::update_formulas

#endif // AMPJIT_FRONTEND_LIB_OPTIM_UPDATEFORMULAS_H
