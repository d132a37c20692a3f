// RMSprop and Adagrad, following PyTorch's single-tensor implementations op
// for op, written with the public elementwise ops. Eagerly each op runs on the
// CPU backend; a traced step records them and codegen fuses them, so they need
// no kernel of their own on any backend.

#include "Dispatch.h"

#include "jit/Ops.h"
#include "jit/optim.h"

#include "ParameterGroups.h"

namespace jit::optim {

using detail::groupLabel;
using detail::requireFiniteNonNegative;
using detail::lrsOf;
using detail::parametersOf;

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
    squareAvg_.push_back(zeros_like(params_[i]));
    momentumBuffer_.push_back(options.momentum > 0.0 ? zeros_like(params_[i]) : Tensor());
    gradAvg_.push_back(options.centered ? zeros_like(params_[i]) : Tensor());
    for (const Tensor* buffer : {&squareAvg_.back(), &momentumBuffer_.back(), &gradAvg_.back()})
      if (buffer->defined())
        jit::detail::markState(*buffer, jit::detail::StateRole::OptState);
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
  Tensor g = unscaledGradient(grad, param, inv_scale, options.maximize);
  if (options.weight_decay != 0.0)
    g = g + param * options.weight_decay;
  Tensor squareAvg = squareAvg_[i] * options.alpha + g * g * (1.0 - options.alpha);
  Tensor average;
  if (options.centered) {
    Tensor gradAvg = gradAvg_[i] + (g - gradAvg_[i]) * (1.0 - options.alpha); // lerp
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
    stateSum_.push_back(full(param.shape(), groupOptions_[groupOf_[i]].initial_accumulator_value, param.dtype()));
    jit::detail::markState(stateSum_.back(), jit::detail::StateRole::OptState);
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
  Tensor g = unscaledGradient(grad, param, inv_scale, options.maximize);
  if (options.weight_decay != 0.0)
    g = g + param * options.weight_decay;
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

} // namespace jit::optim
