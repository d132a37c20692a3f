// RMSprop, Adagrad, RAdam, NAdam, Adamax and Adadelta, following PyTorch's
// single-tensor implementations op for op, written with the public
// elementwise ops (UpdateFormulas.h). Eagerly each op runs on the CPU
// backend; a traced step records them and codegen fuses them, so they need
// no kernel of their own on any backend.

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
    requireAdamSettings(label, options.lr, options.eps, options.weight_decay, options.betas);
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
    requireAdamSettings(label, options.lr, options.eps, options.weight_decay, options.betas);
    requireFiniteNonNegative(label, "momentum_decay", options.momentum_decay);
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
    requireAdamSettings(label, options.lr, options.eps, options.weight_decay, options.betas);
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
  Tensor magnitude = magnitudeOf(g) + options.eps;
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

} // namespace jit::optim
