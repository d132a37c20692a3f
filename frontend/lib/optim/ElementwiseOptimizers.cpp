// RMSprop, Adagrad, RAdam, NAdam, Adamax, Adadelta and Adafactor, following PyTorch's single-tensor implementations op
// for op, and apex's LAMB, written with the public elementwise ops and
// reductions. Eagerly each op runs on the CPU backend; a traced step records
// them and codegen fuses them, so they need no kernel of their own on any
// backend.

#include "Dispatch.h"

#include "jit/Ops.h"
#include "jit/optim.h"

#include "ParameterGroups.h"

#include <cmath>

namespace jit::optim {

using detail::groupLabel;
using detail::requireFiniteNonNegative;
using detail::requireBetas;
using detail::lrsOf;
using detail::parametersOf;
using detail::optimizerState;
using detail::zeroedStateLike;

namespace {

Tensor inDtype(const Tensor& tensor, DType dtype) { return tensor.dtype() == dtype ? tensor : tensor.to(dtype); }

/// The gradient as the fused updates read it: unscaled in fp32 (f64 for an
/// f64 gradient) as it is read, then in the parameter's precision, negated
/// under maximize (PyTorch negates before weight decay).
Tensor unscaledGradient(const Tensor& grad, const Tensor& param, const Tensor& inv_scale, bool maximize) {
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
Tensor powerOf(double base, const Tensor& exponent) { return exp(exponent * std::log(base)); }

/// The gradient with PyTorch's coupled (L2) weight decay:
/// g + weight_decay * param, or `g` itself when weight_decay is 0.
Tensor withL2(const Tensor& g, const Tensor& param, double weight_decay) {
  return weight_decay == 0.0 ? g : g + param * weight_decay;
}

/// Weight decay as RAdam and NAdam take it, before the moments: AdamW's
/// param *= 1 - lr * weight_decay (`param` is rebound), or the L2 term added
/// to the gradient `g`.
void applyWeightDecay(Tensor& param, Tensor& g, const Tensor& lr, double weight_decay, bool decoupled) {
  if (weight_decay == 0.0)
    return;
  if (decoupled)
    param = param * inDtype(1.0 - lr.to(f64) * weight_decay, param.dtype());
  else
    g = withL2(g, param, weight_decay);
}

/// start.lerp_(end, weight) as these optimizers use it, with a host weight:
/// start + (end - start) * weight (a running average's update).
Tensor lerpToward(const Tensor& start, const Tensor& end, double weight) { return start + (end - start) * weight; }
Tensor lerpToward(const Tensor& start, const Tensor& end, const Tensor& weight) { return start + (end - start) * weight; }

/// A running average of g^2 (Adam's exp_avg_sq, RMSprop's square_avg):
/// average * decay + (1 - decay) g^2.
Tensor squareAverage(const Tensor& average, const Tensor& g, double decay) {
  return average * decay + g * g * (1.0 - decay);
}

/// Where a parameter's norms and squares accumulate: f64 for f64, else f32
/// (low-precision squares would overflow).
DType accumulationOf(const Tensor& param) { return param.dtype() == f64 ? f64 : f32; }

/// sqrt(sum(x^2)), in `accumulate`.
Tensor l2Norm(const Tensor& x, DType accumulate) {
  Tensor wide = inDtype(x, accumulate);
  return sqrt(sum(wide * wide));
}

/// Adam's running moments after gradient `g`: exp_avg.lerp_(g, 1 - beta1)
/// and exp_avg_sq * beta2 + (1 - beta2) g^2.
std::pair<Tensor, Tensor> adamMoments(const Tensor& expAvg, const Tensor& expAvgSq, const Tensor& g,
                                      std::pair<double, double> betas) {
  return {lerpToward(expAvg, g, 1.0 - betas.first), squareAverage(expAvgSq, g, betas.second)};
}

} // namespace

//===----------------------------------------------------------------------===//
// RMSprop
//===----------------------------------------------------------------------===//

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(std::vector<RMSpropGroup>{{.params = std::move(params)}}, options) {}

RMSprop::RMSprop(std::vector<RMSpropGroup> groups, RMSpropOptions defaults)
    : Optimizer(parametersOf(groups), lrsOf(groups, defaults.lr)) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const RMSpropGroup& group = groups[g];
    RMSpropOptions options{.lr = group.lr.value_or(defaults.lr),
                           .alpha = group.alpha.value_or(defaults.alpha),
                           .eps = group.eps.value_or(defaults.eps),
                           .weight_decay = group.weight_decay.value_or(defaults.weight_decay),
                           .momentum = group.momentum.value_or(defaults.momentum),
                           .centered = group.centered.value_or(defaults.centered),
                           .maximize = group.maximize.value_or(defaults.maximize)};
    std::string label = groupLabel("RMSprop", g, groups.size());
    requireFiniteNonNegative(label, "lr", options.lr);
    requireFiniteNonNegative(label, "alpha", options.alpha);
    requireFiniteNonNegative(label, "eps", options.eps);
    requireFiniteNonNegative(label, "weight_decay", options.weight_decay);
    requireFiniteNonNegative(label, "momentum", options.momentum);
    groupOptions_.push_back(options);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const RMSpropOptions& options = groupOptions_[groupOf_[i]];
    squareAvg_.push_back(zeroedStateLike(params_[i]));
    momentumBuffer_.push_back(options.momentum > 0.0 ? zeroedStateLike(params_[i]) : Tensor());
    gradAvg_.push_back(options.centered ? zeroedStateLike(params_[i]) : Tensor());
  }
  name_state_for_traces();
}

std::vector<std::pair<std::string, double>> RMSprop::group_hyperparameters(size_t group) const {
  const RMSpropOptions& options = groupOptions_.at(group);
  return {{"alpha", options.alpha},
          {"eps", options.eps},
          {"weight_decay", options.weight_decay},
          {"momentum", options.momentum},
          {"centered", options.centered ? 1.0 : 0.0},
          {"maximize", options.maximize ? 1.0 : 0.0}};
}

void RMSprop::collect_buffers(size_t i, std::vector<NamedTensor>& out) const {
  out.emplace_back(std::to_string(i) + ".square_avg", squareAvg_[i]);
  if (momentumBuffer_[i].defined())
    out.emplace_back(std::to_string(i) + ".momentum_buffer", momentumBuffer_[i]);
  if (gradAvg_[i].defined())
    out.emplace_back(std::to_string(i) + ".grad_avg", gradAvg_[i]);
}

void RMSprop::update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) {
  const RMSpropOptions& options = groupOptions_[groupOf_[i]];
  const Tensor& param = params_[i];
  Tensor g = withL2(unscaledGradient(grad, param, inv_scale, options.maximize), param, options.weight_decay);
  Tensor squareAvg = squareAverage(squareAvg_[i], g, options.alpha);
  Tensor average;
  if (options.centered) {
    Tensor gradAvg = lerpToward(gradAvg_[i], g, 1.0 - options.alpha);
    average = sqrt(squareAvg - gradAvg * gradAvg);
    assign(gradAvg_[i], predicated(predicate, gradAvg, gradAvg_[i]));
  } else {
    average = sqrt(squareAvg);
  }
  average = average + options.eps;
  Tensor lr = inDtype(this->lr(groupOf_[i]), param.dtype());
  Tensor newParam;
  if (options.momentum > 0.0) {
    Tensor buffer = momentumBuffer_[i] * options.momentum + g / average;
    newParam = param - buffer * lr;
    assign(momentumBuffer_[i], predicated(predicate, buffer, momentumBuffer_[i]));
  } else {
    newParam = param - g / average * lr;
  }
  assign(squareAvg_[i], predicated(predicate, squareAvg, squareAvg_[i]));
  assign(params_[i], predicated(predicate, newParam, param));
}

//===----------------------------------------------------------------------===//
// Adagrad
//===----------------------------------------------------------------------===//

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(std::vector<AdagradGroup>{{.params = std::move(params)}}, options) {}

Adagrad::Adagrad(std::vector<AdagradGroup> groups, AdagradOptions defaults)
    : Optimizer(parametersOf(groups), lrsOf(groups, defaults.lr)) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const AdagradGroup& group = groups[g];
    AdagradOptions options{
        .lr = group.lr.value_or(defaults.lr),
        .lr_decay = group.lr_decay.value_or(defaults.lr_decay),
        .weight_decay = group.weight_decay.value_or(defaults.weight_decay),
        .initial_accumulator_value = group.initial_accumulator_value.value_or(defaults.initial_accumulator_value),
        .eps = group.eps.value_or(defaults.eps),
        .maximize = group.maximize.value_or(defaults.maximize)};
    std::string label = groupLabel("Adagrad", g, groups.size());
    requireFiniteNonNegative(label, "lr", options.lr);
    requireFiniteNonNegative(label, "lr_decay", options.lr_decay);
    requireFiniteNonNegative(label, "weight_decay", options.weight_decay);
    requireFiniteNonNegative(label, "initial_accumulator_value", options.initial_accumulator_value);
    requireFiniteNonNegative(label, "eps", options.eps);
    groupOptions_.push_back(options);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& param = params_[i];
    stateSum_.push_back(
        optimizerState(full(param.shape(), groupOptions_[groupOf_[i]].initial_accumulator_value, param.dtype())));
  }
  name_state_for_traces();
}

bool Adagrad::counts_steps(size_t i) const { return groupOptions_[groupOf_[i]].lr_decay != 0.0; }

std::vector<std::pair<std::string, double>> Adagrad::group_hyperparameters(size_t group) const {
  const AdagradOptions& options = groupOptions_.at(group);
  return {{"lr_decay", options.lr_decay},
          {"weight_decay", options.weight_decay},
          {"initial_accumulator_value", options.initial_accumulator_value},
          {"eps", options.eps},
          {"maximize", options.maximize ? 1.0 : 0.0}};
}

void Adagrad::collect_buffers(size_t i, std::vector<NamedTensor>& out) const {
  out.emplace_back(std::to_string(i) + ".sum", stateSum_[i]);
}

void Adagrad::update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) {
  const AdagradOptions& options = groupOptions_[groupOf_[i]];
  const Tensor& param = params_[i];
  Tensor g = withL2(unscaledGradient(grad, param, inv_scale, options.maximize), param, options.weight_decay);
  Tensor lr = inDtype(this->lr(groupOf_[i]), param.dtype());
  if (options.lr_decay != 0.0) {
    // PyTorch's clr = lr / (1 + (step - 1) * lr_decay) with step counted
    // from 1, in double; the count here is of the updates before this one.
    Tensor decayed = this->lr(groupOf_[i]).to(f64) / (steps_[i].to(f64) * options.lr_decay + 1.0);
    lr = inDtype(decayed, param.dtype());
  }
  Tensor stateSum = stateSum_[i] + g * g;
  Tensor deviation = sqrt(stateSum) + options.eps;
  assign(stateSum_[i], predicated(predicate, stateSum, stateSum_[i]));
  assign(params_[i], predicated(predicate, param - g / deviation * lr, param));
}

//===----------------------------------------------------------------------===//
// RAdam
//===----------------------------------------------------------------------===//

RAdam::RAdam(std::vector<Tensor> params, RAdamOptions options)
    : RAdam(std::vector<RAdamGroup>{{.params = std::move(params)}}, options) {}

RAdam::RAdam(std::vector<RAdamGroup> groups, RAdamOptions defaults)
    : Optimizer(parametersOf(groups), lrsOf(groups, defaults.lr)) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const RAdamGroup& group = groups[g];
    RAdamOptions options{.lr = group.lr.value_or(defaults.lr),
                         .betas = group.betas.value_or(defaults.betas),
                         .eps = group.eps.value_or(defaults.eps),
                         .weight_decay = group.weight_decay.value_or(defaults.weight_decay),
                         .decoupled_weight_decay = group.decoupled_weight_decay.value_or(defaults.decoupled_weight_decay),
                         .maximize = group.maximize.value_or(defaults.maximize)};
    std::string label = groupLabel("RAdam", g, groups.size());
    requireFiniteNonNegative(label, "lr", options.lr);
    requireFiniteNonNegative(label, "eps", options.eps);
    requireFiniteNonNegative(label, "weight_decay", options.weight_decay);
    requireBetas(label, options.betas);
    groupOptions_.push_back(options);
  }
  for (const Tensor& param : params_) {
    expAvg_.push_back(zeroedStateLike(param));
    expAvgSq_.push_back(zeroedStateLike(param));
  }
  name_state_for_traces();
}

std::vector<std::pair<std::string, double>> RAdam::group_hyperparameters(size_t group) const {
  const RAdamOptions& options = groupOptions_.at(group);
  return {{"beta1", options.betas.first},
          {"beta2", options.betas.second},
          {"eps", options.eps},
          {"weight_decay", options.weight_decay},
          {"decoupled_weight_decay", options.decoupled_weight_decay ? 1.0 : 0.0},
          {"maximize", options.maximize ? 1.0 : 0.0}};
}

void RAdam::collect_buffers(size_t i, std::vector<NamedTensor>& out) const {
  out.emplace_back(std::to_string(i) + ".exp_avg", expAvg_[i]);
  out.emplace_back(std::to_string(i) + ".exp_avg_sq", expAvgSq_[i]);
}

void RAdam::update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) {
  size_t group = groupOf_[i];
  const RAdamOptions& options = groupOptions_[group];
  const double beta2 = options.betas.second;
  const Tensor& param = params_[i];
  DType dtype = param.dtype();
  Tensor g = unscaledGradient(grad, param, inv_scale, options.maximize);
  Tensor lr = inDtype(this->lr(group), dtype);
  Tensor decayed = param;
  applyWeightDecay(decayed, g, this->lr(group), options.weight_decay, options.decoupled_weight_decay);
  auto [expAvg, expAvgSq] = adamMoments(expAvg_[i], expAvgSq_[i], g, options.betas);

  // The corrections are functions of the update's count (from 1), computed
  // in f64 as PyTorch's Python floats.
  Tensor step = steps_[i].to(f64) + 1.0;
  Tensor beta2Power = powerOf(beta2, step);
  Tensor biasCorrection1 = 1.0 - powerOf(options.betas.first, step);
  Tensor biasCorrection2 = 1.0 - beta2Power;
  Tensor correctedExpAvg = expAvg / inDtype(biasCorrection1, dtype);
  Tensor change = correctedExpAvg * lr;
  // rho_t rises towards rho_inf from 1; with rho_inf <= 5 (beta2 <= 2/3) it
  // never passes 5, and every update is the unrectified one.
  double rhoInf = 2.0 / (1.0 - beta2) - 1.0;
  if (rhoInf > 5.0) {
    Tensor rho = rhoInf - step * 2.0 * beta2Power / biasCorrection2;
    Tensor tractable = gt(rho, scalar_tensor(5.0, f64));
    // Where the variance is intractable the rectifier is not used: rho_inf
    // stands in for rho_t there so that its square root stays real.
    Tensor rhoUsed = where(tractable, rho, scalar_tensor(rhoInf, f64));
    Tensor rectifier =
        sqrt((rhoUsed - 4.0) * (rhoUsed - 2.0) * rhoInf / (rhoUsed * ((rhoInf - 4.0) * (rhoInf - 2.0))));
    Tensor adaptiveLr = inDtype(sqrt(biasCorrection2), dtype) / (sqrt(expAvgSq) + options.eps);
    change = where(tractable, change * adaptiveLr * inDtype(rectifier, dtype), change);
  }
  assign(expAvg_[i], predicated(predicate, expAvg, expAvg_[i]));
  assign(expAvgSq_[i], predicated(predicate, expAvgSq, expAvgSq_[i]));
  assign(params_[i], predicated(predicate, decayed - change, param));
}

//===----------------------------------------------------------------------===//
// NAdam
//===----------------------------------------------------------------------===//

NAdam::NAdam(std::vector<Tensor> params, NAdamOptions options)
    : NAdam(std::vector<NAdamGroup>{{.params = std::move(params)}}, options) {}

NAdam::NAdam(std::vector<NAdamGroup> groups, NAdamOptions defaults)
    : Optimizer(parametersOf(groups), lrsOf(groups, defaults.lr)) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const NAdamGroup& group = groups[g];
    NAdamOptions options{.lr = group.lr.value_or(defaults.lr),
                         .betas = group.betas.value_or(defaults.betas),
                         .eps = group.eps.value_or(defaults.eps),
                         .weight_decay = group.weight_decay.value_or(defaults.weight_decay),
                         .momentum_decay = group.momentum_decay.value_or(defaults.momentum_decay),
                         .decoupled_weight_decay = group.decoupled_weight_decay.value_or(defaults.decoupled_weight_decay),
                         .maximize = group.maximize.value_or(defaults.maximize)};
    std::string label = groupLabel("NAdam", g, groups.size());
    requireFiniteNonNegative(label, "lr", options.lr);
    requireFiniteNonNegative(label, "eps", options.eps);
    requireFiniteNonNegative(label, "weight_decay", options.weight_decay);
    requireFiniteNonNegative(label, "momentum_decay", options.momentum_decay);
    requireBetas(label, options.betas);
    groupOptions_.push_back(options);
  }
  for (const Tensor& param : params_) {
    muProduct_.push_back(optimizerState(scalar_tensor(1.0, param.dtype() == f64 ? f64 : f32)));
    expAvg_.push_back(zeroedStateLike(param));
    expAvgSq_.push_back(zeroedStateLike(param));
  }
  name_state_for_traces();
}

std::vector<std::pair<std::string, double>> NAdam::group_hyperparameters(size_t group) const {
  const NAdamOptions& options = groupOptions_.at(group);
  return {{"beta1", options.betas.first},
          {"beta2", options.betas.second},
          {"eps", options.eps},
          {"weight_decay", options.weight_decay},
          {"momentum_decay", options.momentum_decay},
          {"decoupled_weight_decay", options.decoupled_weight_decay ? 1.0 : 0.0},
          {"maximize", options.maximize ? 1.0 : 0.0}};
}

void NAdam::collect_buffers(size_t i, std::vector<NamedTensor>& out) const {
  out.emplace_back(std::to_string(i) + ".mu_product", muProduct_[i]);
  out.emplace_back(std::to_string(i) + ".exp_avg", expAvg_[i]);
  out.emplace_back(std::to_string(i) + ".exp_avg_sq", expAvgSq_[i]);
}

void NAdam::update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) {
  size_t group = groupOf_[i];
  const NAdamOptions& options = groupOptions_[group];
  const double beta1 = options.betas.first;
  const Tensor& param = params_[i];
  DType dtype = param.dtype();
  Tensor g = unscaledGradient(grad, param, inv_scale, options.maximize);
  Tensor decayed = param;
  applyWeightDecay(decayed, g, this->lr(group), options.weight_decay, options.decoupled_weight_decay);

  // The momenta of this update and the next, mu_t = beta1 * (1 - 0.5 *
  // 0.96^(t * psi)), in f64 as PyTorch's Python floats; the running product
  // in its own dtype, as PyTorch's scalar tensor, read back as a double.
  Tensor step = steps_[i].to(f64) + 1.0;
  auto momentumAt = [&](const Tensor& t) { return (1.0 - powerOf(0.96, t * options.momentum_decay) * 0.5) * beta1; };
  Tensor mu = momentumAt(step), muNext = momentumAt(step + 1.0);
  Tensor muProduct = muProduct_[i] * inDtype(mu, muProduct_[i].dtype());
  Tensor muProductNow = muProduct.to(f64);
  Tensor lr = this->lr(group).to(f64);
  Tensor gradientCoefficient = -lr * (1.0 - mu) / (1.0 - muProductNow);
  Tensor momentumCoefficient = -lr * muNext / (1.0 - muProductNow * muNext);

  auto [expAvg, expAvgSq] = adamMoments(expAvg_[i], expAvgSq_[i], g, options.betas);
  Tensor biasCorrection2 = 1.0 - powerOf(options.betas.second, step);
  Tensor denominator = sqrt(expAvgSq / inDtype(biasCorrection2, dtype)) + options.eps;
  Tensor updated = decayed + g / denominator * inDtype(gradientCoefficient, dtype);
  updated = updated + expAvg / denominator * inDtype(momentumCoefficient, dtype);
  assign(muProduct_[i], predicated(predicate, muProduct, muProduct_[i]));
  assign(expAvg_[i], predicated(predicate, expAvg, expAvg_[i]));
  assign(expAvgSq_[i], predicated(predicate, expAvgSq, expAvgSq_[i]));
  assign(params_[i], predicated(predicate, updated, param));
}

//===----------------------------------------------------------------------===//
// Adamax
//===----------------------------------------------------------------------===//

Adamax::Adamax(std::vector<Tensor> params, AdamaxOptions options)
    : Adamax(std::vector<AdamaxGroup>{{.params = std::move(params)}}, options) {}

Adamax::Adamax(std::vector<AdamaxGroup> groups, AdamaxOptions defaults)
    : Optimizer(parametersOf(groups), lrsOf(groups, defaults.lr)) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const AdamaxGroup& group = groups[g];
    AdamaxOptions options{.lr = group.lr.value_or(defaults.lr),
                          .betas = group.betas.value_or(defaults.betas),
                          .eps = group.eps.value_or(defaults.eps),
                          .weight_decay = group.weight_decay.value_or(defaults.weight_decay),
                          .maximize = group.maximize.value_or(defaults.maximize)};
    std::string label = groupLabel("Adamax", g, groups.size());
    requireFiniteNonNegative(label, "lr", options.lr);
    requireFiniteNonNegative(label, "eps", options.eps);
    requireFiniteNonNegative(label, "weight_decay", options.weight_decay);
    requireBetas(label, options.betas);
    groupOptions_.push_back(options);
  }
  for (const Tensor& param : params_) {
    expAvg_.push_back(zeroedStateLike(param));
    expInf_.push_back(zeroedStateLike(param));
  }
  name_state_for_traces();
}

std::vector<std::pair<std::string, double>> Adamax::group_hyperparameters(size_t group) const {
  const AdamaxOptions& options = groupOptions_.at(group);
  return {{"beta1", options.betas.first},
          {"beta2", options.betas.second},
          {"eps", options.eps},
          {"weight_decay", options.weight_decay},
          {"maximize", options.maximize ? 1.0 : 0.0}};
}

void Adamax::collect_buffers(size_t i, std::vector<NamedTensor>& out) const {
  out.emplace_back(std::to_string(i) + ".exp_avg", expAvg_[i]);
  out.emplace_back(std::to_string(i) + ".exp_inf", expInf_[i]);
}

void Adamax::update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) {
  size_t group = groupOf_[i];
  const AdamaxOptions& options = groupOptions_[group];
  const Tensor& param = params_[i];
  DType dtype = param.dtype();
  Tensor g = withL2(unscaledGradient(grad, param, inv_scale, options.maximize), param, options.weight_decay);
  Tensor expAvg = lerpToward(expAvg_[i], g, 1.0 - options.betas.first);
  // |g| + eps, and then torch.maximum, from the elementwise ops: -0 < 0 is
  // false, and -0 + eps is +0 even for eps 0, as |-0| + 0 is; a NaN on
  // either side is the result, as torch.maximum gives it.
  Tensor zero = scalar_tensor(0.0, dtype);
  Tensor magnitude = where(lt(g, zero), -g, g) + options.eps;
  Tensor decayedNorm = expInf_[i] * options.betas.second;
  Tensor larger = where(lt(decayedNorm, magnitude), magnitude, decayedNorm);
  Tensor expInf = where(ne(magnitude, magnitude), magnitude, larger);
  // lr / (1 - beta1^t) for the update's count t (from 1), in f64 as
  // PyTorch's Python float; multiplied before the division, as addcdiv_
  // computes value * t1 / t2.
  Tensor step = steps_[i].to(f64) + 1.0;
  Tensor stepSize = this->lr(group).to(f64) / (1.0 - powerOf(options.betas.first, step));
  assign(expAvg_[i], predicated(predicate, expAvg, expAvg_[i]));
  assign(expInf_[i], predicated(predicate, expInf, expInf_[i]));
  assign(params_[i], predicated(predicate, param - expAvg * inDtype(stepSize, dtype) / expInf, param));
}

//===----------------------------------------------------------------------===//
// Adadelta
//===----------------------------------------------------------------------===//

Adadelta::Adadelta(std::vector<Tensor> params, AdadeltaOptions options)
    : Adadelta(std::vector<AdadeltaGroup>{{.params = std::move(params)}}, options) {}

Adadelta::Adadelta(std::vector<AdadeltaGroup> groups, AdadeltaOptions defaults)
    : Optimizer(parametersOf(groups), lrsOf(groups, defaults.lr)) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const AdadeltaGroup& group = groups[g];
    AdadeltaOptions options{.lr = group.lr.value_or(defaults.lr),
                            .rho = group.rho.value_or(defaults.rho),
                            .eps = group.eps.value_or(defaults.eps),
                            .weight_decay = group.weight_decay.value_or(defaults.weight_decay),
                            .maximize = group.maximize.value_or(defaults.maximize)};
    std::string label = groupLabel("Adadelta", g, groups.size());
    requireFiniteNonNegative(label, "lr", options.lr);
    requireFiniteNonNegative(label, "eps", options.eps);
    requireFiniteNonNegative(label, "weight_decay", options.weight_decay);
    if (!(options.rho >= 0.0 && options.rho <= 1.0))
      throw Error(label + ": rho must be in [0, 1], got " + ampjit::runtime::formatDouble(options.rho));
    groupOptions_.push_back(options);
  }
  for (const Tensor& param : params_) {
    squareAvg_.push_back(zeroedStateLike(param));
    accDelta_.push_back(zeroedStateLike(param));
  }
  name_state_for_traces();
}

std::vector<std::pair<std::string, double>> Adadelta::group_hyperparameters(size_t group) const {
  const AdadeltaOptions& options = groupOptions_.at(group);
  return {{"rho", options.rho},
          {"eps", options.eps},
          {"weight_decay", options.weight_decay},
          {"maximize", options.maximize ? 1.0 : 0.0}};
}

void Adadelta::collect_buffers(size_t i, std::vector<NamedTensor>& out) const {
  out.emplace_back(std::to_string(i) + ".square_avg", squareAvg_[i]);
  out.emplace_back(std::to_string(i) + ".acc_delta", accDelta_[i]);
}

void Adadelta::update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) {
  size_t group = groupOf_[i];
  const AdadeltaOptions& options = groupOptions_[group];
  const Tensor& param = params_[i];
  Tensor g = withL2(unscaledGradient(grad, param, inv_scale, options.maximize), param, options.weight_decay);
  Tensor squareAvg = squareAverage(squareAvg_[i], g, options.rho);
  // PyTorch's order: sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g.
  Tensor delta = sqrt(accDelta_[i] + options.eps) / sqrt(squareAvg + options.eps) * g;
  Tensor accDelta = squareAverage(accDelta_[i], delta, options.rho);
  Tensor lr = inDtype(this->lr(group), param.dtype());
  assign(squareAvg_[i], predicated(predicate, squareAvg, squareAvg_[i]));
  assign(accDelta_[i], predicated(predicate, accDelta, accDelta_[i]));
  assign(params_[i], predicated(predicate, param - delta * lr, param));
}

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
  if (options.weight_decay != 0.0)
    decayed = param * inDtype(1.0 - lr * options.weight_decay, dtype);

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
    requireFiniteNonNegative(label, "lr", options.lr);
    requireFiniteNonNegative(label, "eps", options.eps);
    requireFiniteNonNegative(label, "weight_decay", options.weight_decay);
    requireBetas(label, options.betas);
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
    Tensor g = inDtype(unscaledGradient(param.grad(), param, inv_scale, false), accumulate);
    Tensor part = sum(g * g);
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
