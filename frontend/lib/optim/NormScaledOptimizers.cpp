// Adafactor (torch.optim's) and LAMB (apex's FusedLAMB): optimizers whose
// step is scaled by norms, of the parameter and of the update (Adafactor's
// relative step size and update clipping, LAMB's trust ratio and global
// gradient clipping). Written like ElementwiseOptimizers.cpp with the public
// ops, the norms as reductions between the elementwise ones.

#include "Dispatch.h"

#include "jit/Ops.h"
#include "jit/optim.h"

#include "ParameterGroups.h"
#include "UpdateFormulas.h"

#include <cmath>

namespace jit::optim {

using detail::groupLabel;
using detail::requireFiniteNonNegative;
using detail::requireAdamSettings;
using detail::lrsOf;
using detail::parametersOf;
using detail::optimizerState;
using detail::zeroedStateLike;
using namespace detail::update_formulas;

//===----------------------------------------------------------------------===//
// Adafactor
//===----------------------------------------------------------------------===//

namespace {

/// torch.finfo(dtype).eps: Adafactor's eps1 when none is given.
double machineEpsilon(DType dtype) {
  switch (dtype) {
  case f64: return 0x1p-52;
  case f16: return 0x1p-10;
  case bf16: return 0x1p-7;
  default: return 0x1p-23;
  }
}

/// max(value, floor) as clamp_(min=floor): a NaN stays NaN.
Tensor atLeast(const Tensor& value, const Tensor& floor) { return where(lt(value, floor), floor, value); }

} // namespace

Adafactor::Adafactor(std::vector<Tensor> params, AdafactorOptions options)
    : Adafactor(std::vector<AdafactorGroup>{{.params = std::move(params)}}, options) {}

Adafactor::Adafactor(std::vector<AdafactorGroup> groups, AdafactorOptions defaults)
    : Optimizer(parametersOf(groups), lrsOf(groups, defaults.lr)) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const AdafactorGroup& group = groups[g];
    AdafactorOptions options{.lr = group.lr.value_or(defaults.lr),
                             .beta2_decay = group.beta2_decay.value_or(defaults.beta2_decay),
                             .eps = group.eps.value_or(defaults.eps),
                             .d = group.d.value_or(defaults.d),
                             .weight_decay = group.weight_decay.value_or(defaults.weight_decay),
                             .maximize = group.maximize.value_or(defaults.maximize)};
    std::string label = groupLabel("Adafactor", g, groups.size());
    requireFiniteNonNegative(label, "lr", options.lr);
    requireFiniteNonNegative(label, "weight_decay", options.weight_decay);
    if (options.eps.first)
      requireFiniteNonNegative(label, "eps1", *options.eps.first);
    requireFiniteNonNegative(label, "eps2", options.eps.second);
    if (!(options.beta2_decay <= 0.0) || !std::isfinite(options.beta2_decay))
      throw Error(label + ": beta2_decay must be finite and <= 0, got " +
                  ampjit::runtime::formatDouble(options.beta2_decay));
    if (!(options.d >= 1.0) || !std::isfinite(options.d))
      throw Error(label + ": the clipping threshold d must be finite and >= 1, got " +
                  ampjit::runtime::formatDouble(options.d));
    groupOptions_.push_back(options);
  }
  for (const Tensor& param : params_) {
    const Shape& shape = param.shape();
    if (shape.size() >= 2) {
      Shape rows = shape, cols = shape;
      rows.back() = 1;
      cols[cols.size() - 2] = 1;
      rowVar_.push_back(optimizerState(zeros(rows, param.dtype())));
      colVar_.push_back(optimizerState(zeros(cols, param.dtype())));
      variance_.emplace_back();
    } else {
      rowVar_.emplace_back();
      colVar_.emplace_back();
      variance_.push_back(zeroedStateLike(param));
    }
  }
  name_state_for_traces();
}

std::vector<std::pair<std::string, double>> Adafactor::group_hyperparameters(size_t group) const {
  const AdafactorOptions& options = groupOptions_.at(group);
  // eps1 -1: the parameter dtype's epsilon (a given eps1 is >= 0).
  return {{"beta2_decay", options.beta2_decay},
          {"eps1", options.eps.first.value_or(-1.0)},
          {"eps2", options.eps.second},
          {"d", options.d},
          {"weight_decay", options.weight_decay},
          {"maximize", options.maximize ? 1.0 : 0.0}};
}

void Adafactor::collect_buffers(size_t i, std::vector<NamedTensor>& out) const {
  if (variance_[i].defined()) {
    out.emplace_back(std::to_string(i) + ".variance", variance_[i]);
    return;
  }
  out.emplace_back(std::to_string(i) + ".row_var", rowVar_[i]);
  out.emplace_back(std::to_string(i) + ".col_var", colVar_[i]);
}

void Adafactor::update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) {
  size_t group = groupOf_[i];
  const AdafactorOptions& options = groupOptions_[group];
  const Tensor& param = params_[i];
  DType dtype = param.dtype();
  double eps1 = options.eps.first.value_or(machineEpsilon(dtype));
  Tensor g = unscaledGradient(grad, param, inv_scale, options.maximize);
  // PyTorch's host floats, here f64 scalars of the step count t (from 1):
  // 1 - beta2_t = t^beta2_decay, rho_t = min(lr, 1/sqrt(t)), and
  // alpha = max(eps2, RMS(param)) * rho_t with the parameter before decay.
  Tensor step = steps_[i].to(f64) + 1.0;
  Tensor lr = this->lr(group).to(f64);
  Tensor newWeight = inDtype(pow(step, options.beta2_decay), dtype);
  Tensor inverseRoot = 1.0 / sqrt(step);
  Tensor rho = where(lt(inverseRoot, lr), inverseRoot, lr);
  double rootCount = std::sqrt(double(param.numel()));
  Tensor rms = l2Norm(param, accumulationOf(param)).to(f64) / rootCount;
  Tensor alpha = atLeast(rms, scalar_tensor(options.eps.second, f64)) * rho;
  Tensor decayed = param;
  applyWeightDecay(decayed, g, this->lr(group), options.weight_decay, /*decoupled=*/true);

  Tensor squared = g * g, estimate, rowVar, colVar, variance;
  if (param.dim() >= 2) {
    // Row and column means of g^2 over the last two dimensions.
    int64_t rowAxis = param.dim() - 1, colAxis = param.dim() - 2;
    Tensor rowMean = sum(squared, {rowAxis}, true) / double(param.shape()[rowAxis]);
    Tensor colMean = sum(squared, {colAxis}, true) / double(param.shape()[colAxis]);
    rowVar = lerpToward(rowVar_[i], rowMean, newWeight);
    colVar = lerpToward(colVar_[i], colMean, newWeight);
    Tensor rowVarMean = sum(rowVar, {colAxis}, true) / double(param.shape()[colAxis]);
    estimate = rowVar * colVar / atLeast(rowVarMean, scalar_tensor(eps1, dtype));
  } else {
    variance = lerpToward(variance_[i], squared, newWeight);
    estimate = variance;
  }
  // eps1 squared under the root, so it keeps eps1's magnitude.
  Tensor change = rsqrt(atLeast(estimate, scalar_tensor(eps1 * eps1, dtype))) * g;
  Tensor changeRms = l2Norm(change, accumulationOf(param)).to(f64) / (rootCount * options.d);
  Tensor denominator = atLeast(changeRms, scalar_tensor(1.0, f64));
  Tensor stepSize = inDtype(-alpha / denominator, dtype);
  if (variance.defined()) {
    assign(variance_[i], predicated(predicate, variance, variance_[i]));
  } else {
    assign(rowVar_[i], predicated(predicate, rowVar, rowVar_[i]));
    assign(colVar_[i], predicated(predicate, colVar, colVar_[i]));
  }
  assign(params_[i], predicated(predicate, decayed + change * stepSize, param));
}

//===----------------------------------------------------------------------===//
// LAMB
//===----------------------------------------------------------------------===//

LAMB::LAMB(std::vector<Tensor> params, LAMBOptions options)
    : LAMB(std::vector<LAMBGroup>{{.params = std::move(params)}}, options) {}

LAMB::LAMB(std::vector<LAMBGroup> groups, LAMBOptions defaults)
    : Optimizer(parametersOf(groups), lrsOf(groups, defaults.lr)) {
  requireFiniteNonNegative("LAMB", "max_grad_norm", defaults.max_grad_norm);
  for (size_t g = 0; g < groups.size(); ++g) {
    const LAMBGroup& group = groups[g];
    LAMBOptions options = defaults;
    options.lr = group.lr.value_or(defaults.lr);
    options.betas = group.betas.value_or(defaults.betas);
    options.eps = group.eps.value_or(defaults.eps);
    options.weight_decay = group.weight_decay.value_or(defaults.weight_decay);
    options.bias_correction = group.bias_correction.value_or(defaults.bias_correction);
    options.grad_averaging = group.grad_averaging.value_or(defaults.grad_averaging);
    std::string label = groupLabel("LAMB", g, groups.size());
    requireAdamSettings(label, options.lr, options.eps, options.weight_decay, options.betas);
    groupOptions_.push_back(options);
  }
  for (const Tensor& param : params_) {
    expAvg_.push_back(zeroedStateLike(param));
    expAvgSq_.push_back(zeroedStateLike(param));
  }
  name_state_for_traces();
}

std::vector<std::pair<std::string, double>> LAMB::group_hyperparameters(size_t group) const {
  const LAMBOptions& options = groupOptions_.at(group);
  return {{"beta1", options.betas.first},
          {"beta2", options.betas.second},
          {"eps", options.eps},
          {"weight_decay", options.weight_decay},
          {"bias_correction", options.bias_correction ? 1.0 : 0.0},
          {"grad_averaging", options.grad_averaging ? 1.0 : 0.0},
          {"adam_w_mode", options.adam_w_mode ? 1.0 : 0.0},
          {"max_grad_norm", options.max_grad_norm},
          {"use_nvlamb", options.use_nvlamb ? 1.0 : 0.0}};
}

void LAMB::collect_buffers(size_t i, std::vector<NamedTensor>& out) const {
  out.emplace_back(std::to_string(i) + ".exp_avg", expAvg_[i]);
  out.emplace_back(std::to_string(i) + ".exp_avg_sq", expAvgSq_[i]);
}

void LAMB::prepare_step(const Tensor& inv_scale) {
  gradientDivisor_ = Tensor();
  double maxNorm = groupOptions_.front().max_grad_norm;
  if (maxNorm == 0.0)
    return;
  // apex's global norm: of every unscaled gradient together, in f32 (f64
  // where a parameter is f64), as sqrt of the summed squares.
  DType accumulate = f32;
  for (const Tensor& param : params_)
    if (param.grad().defined() && param.dtype() == f64)
      accumulate = f64;
  Tensor squares;
  for (const Tensor& param : params_) {
    if (!param.grad().defined())
      continue;
    Tensor part = sumOfSquares(unscaledGradient(param.grad(), param, inv_scale, false), accumulate);
    squares = squares.defined() ? squares + part : part;
  }
  if (!squares.defined())
    return;
  Tensor globalNorm = sqrt(squares);
  // A NaN norm compares false and divides by 1, as apex's kernel does; the
  // scaler's predicate discards such a step.
  Tensor one = scalar_tensor(1.0, accumulate);
  gradientDivisor_ = where(gt(globalNorm, scalar_tensor(maxNorm, accumulate)), globalNorm / maxNorm, one);
}

void LAMB::update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) {
  size_t group = groupOf_[i];
  const LAMBOptions& options = groupOptions_[group];
  const Tensor& param = params_[i];
  DType dtype = param.dtype(), accumulate = accumulationOf(param);
  auto [beta1, beta2] = options.betas;
  Tensor g = unscaledGradient(grad, param, inv_scale, false);
  if (gradientDivisor_.defined())
    g = g / inDtype(gradientDivisor_, dtype);
  if (!options.adam_w_mode)
    g = withL2(g, param, options.weight_decay);
  // apex's moments: beta1 * m + beta3 * g (not a lerp), beta3 = 1 - beta1
  // with grad_averaging, else 1.
  Tensor expAvg = expAvg_[i] * beta1 + g * (options.grad_averaging ? 1.0 - beta1 : 1.0);
  Tensor expAvgSq = squareAverage(expAvgSq_[i], g, beta2);
  Tensor mHat = expAvg, vHat = expAvgSq;
  if (options.bias_correction) {
    Tensor step = steps_[i].to(f64) + 1.0;
    mHat = expAvg / inDtype(1.0 - powerOf(beta1, step), dtype);
    vHat = expAvgSq / inDtype(1.0 - powerOf(beta2, step), dtype);
  }
  Tensor change = mHat / (sqrt(vHat) + options.eps);
  if (options.adam_w_mode && options.weight_decay != 0.0)
    change = change + param * options.weight_decay;
  // The trust ratio lr * ||param|| / ||update||, or lr alone where either norm
  // is 0 (a NaN norm is not 0 and gives a NaN ratio, as in apex).
  Tensor lr = inDtype(this->lr(group), accumulate);
  Tensor ratio = lr;
  if (options.use_nvlamb || options.weight_decay != 0.0) {
    Tensor paramNorm = l2Norm(param, accumulate), changeNorm = l2Norm(change, accumulate);
    Tensor zero = scalar_tensor(0.0, accumulate);
    ratio = where(eq(paramNorm, zero), lr, where(eq(changeNorm, zero), lr, lr * (paramNorm / changeNorm)));
  }
  assign(expAvg_[i], predicated(predicate, expAvg, expAvg_[i]));
  assign(expAvgSq_[i], predicated(predicate, expAvgSq, expAvgSq_[i]));
  assign(params_[i], predicated(predicate, param - change * inDtype(ratio, dtype), param));
}

} // namespace jit::optim
