// The fused update ops, the optimizers over them and clip_grad_norm_.

#include "Dispatch.h"
#include "StateFile.h"

#include "jit/Autograd.h"
#include "jit/Ops.h"
#include "jit/optim.h"

#include "ParameterGroups.h"
#include "UpdateFormulas.h"

#include <cmath>
#include <limits>

namespace jit {

std::pair<Tensor, Tensor> sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                                     const Tensor& step, const Tensor& lr, const SgdUpdateOptions& options,
                                     const Tensor& inv_scale, const Tensor& predicate) {
  detail::AttributeMap attributes;
  // Defaults stay absent, as the IR prints them (DefaultValuedAttr).
  if (options.momentum != 0.0)
    attributes["momentum"] = options.momentum;
  if (options.dampening != 0.0)
    attributes["dampening"] = options.dampening;
  if (options.weight_decay != 0.0)
    attributes["weight_decay"] = options.weight_decay;
  if (options.nesterov)
    attributes["nesterov"] = true;
  if (options.maximize)
    attributes["maximize"] = true;
  std::vector<Tensor> results = detail::apply(
      detail::ops::sgd_update, {param, grad, momentum_buffer, step, lr, inv_scale, predicate, Tensor()},
      std::move(attributes));
  return {results[0], results.size() > 1 ? results[1] : Tensor()};
}

namespace {
/// jit.adam_update's results; max_exp_avg_sq undefined for plain Adam.
std::vector<Tensor> applyAdamUpdate(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                    const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq, const Tensor& step,
                                    const Tensor& lr, const AdamUpdateOptions& options, const Tensor& inv_scale,
                                    const Tensor& predicate) {
  detail::AttributeMap attributes{{"beta1", options.beta1}, {"beta2", options.beta2}, {"eps", options.eps}};
  if (options.weight_decay != 0.0)
    attributes["weight_decay"] = options.weight_decay;
  if (options.decoupled_weight_decay)
    attributes["decoupled_weight_decay"] = true;
  if (options.maximize)
    attributes["maximize"] = true;
  return detail::apply(detail::ops::adam_update,
                       {param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, inv_scale, predicate, Tensor()},
                       std::move(attributes));
}
} // namespace

std::tuple<Tensor, Tensor, Tensor> adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                               const Tensor& exp_avg_sq, const Tensor& step, const Tensor& lr,
                                               const AdamUpdateOptions& options, const Tensor& inv_scale,
                                               const Tensor& predicate) {
  std::vector<Tensor> results =
      applyAdamUpdate(param, grad, exp_avg, exp_avg_sq, Tensor(), step, lr, options, inv_scale, predicate);
  return {results[0], results[1], results[2]};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                                       const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                                                       const Tensor& step, const Tensor& lr,
                                                       const AdamUpdateOptions& options, const Tensor& inv_scale,
                                                       const Tensor& predicate) {
  if (!max_exp_avg_sq.defined())
    throw Error("jit.adam_update: AMSGrad needs operand 'max_exp_avg_sq' (undefined here); without it, call the "
                "overload without max_exp_avg_sq");
  std::vector<Tensor> results =
      applyAdamUpdate(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, options, inv_scale, predicate);
  return {results[0], results[1], results[2], results[3]};
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       std::source_location caller) {
  detail::UserFrame frame(caller);
  NoGradGuard noGrad;
  bool infinity = std::isinf(norm_type) && norm_type > 0;
  if (!infinity && norm_type != 2.0)
    throw Error("clip_grad_norm_: norm_type " + ampjit::runtime::formatDouble(norm_type) + " is not supported (2 or infinity)");
  std::vector<Tensor> grads;
  DType accumulate = f32;
  for (const Tensor& param : params)
    if (param.grad().defined()) {
      grads.push_back(param.grad());
      if (param.grad().dtype() == f64)
        accumulate = f64;
    }
  if (grads.empty())
    return scalar_tensor(0.0, accumulate);
  // Per-gradient norms in the accumulation type (low-precision squares would
  // overflow), combined like PyTorch's norm of the stacked norms.
  Tensor total;
  for (const Tensor& grad : grads) {
    Tensor g = grad.to(accumulate);
    Tensor part = infinity ? max(detail::update_formulas::magnitudeOf(g)) : sum(g * g);
    total = !total.defined() ? part : infinity ? where(gt(part, total), part, total) : total + part;
  }
  if (!infinity)
    total = sqrt(total);
  Tensor coefficient = scalar_tensor(max_norm, accumulate) / (total + 1e-6);
  Tensor one = scalar_tensor(1.0, accumulate);
  Tensor clamped = where(lt(coefficient, one), coefficient, one);
  for (Tensor& grad : grads)
    grad.mul_(clamped.to(grad.dtype()));
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value, std::source_location caller) {
  detail::UserFrame frame(caller);
  if (!(clip_value >= 0.0) || !std::isfinite(clip_value))
    throw Error("clip_grad_value_: clip_value must be finite and >= 0, got " + ampjit::runtime::formatDouble(clip_value));
  NoGradGuard noGrad;
  for (const Tensor& param : params) {
    Tensor grad = param.grad();
    if (!grad.defined())
      continue;
    Tensor high = scalar_tensor(clip_value, grad.dtype()), low = scalar_tensor(-clip_value, grad.dtype());
    // Two selects, not min/max: a NaN compares false both ways and stays.
    grad.copy_(where(gt(grad, high), high, where(lt(grad, low), low, grad)));
  }
}

namespace optim {

Optimizer::Optimizer(std::vector<std::vector<Tensor>> groups, std::vector<double> lrs) : initialLrs_(lrs) {
  if (groups.empty())
    throw Error("optimizer: no parameter groups");
  for (size_t group = 0; group < groups.size(); ++group) {
    if (groups[group].empty() && groups.size() > 1)
      throw Error("optimizer: parameter group " + std::to_string(group) + " has no parameters");
    for (const Tensor& param : groups[group]) {
      if (!param.defined() || !is_floating_point(param.dtype()) || !param.is_leaf())
        throw Error("optimizer: parameter " + detail::describe(param) +
                    " must be a floating-point leaf tensor (one that requires_grad_ made)");
      for (size_t i = 0; i < params_.size(); ++i)
        if (params_[i].is_same(param))
          throw Error("optimizer: a parameter " + detail::describe(param) + " is in group " +
                      std::to_string(groupOf_[i]) + " and again in group " + std::to_string(group) +
                      " (each parameter belongs to one group)");
      params_.push_back(param);
      groupOf_.push_back(group);
      steps_.push_back(detail::optimizerState(scalar_tensor(0.0, i64)));
    }
    lrs_.push_back(scalar_tensor(lrs.at(group), f32));
    detail::markState(lrs_.back(), detail::StateRole::Hyper);
  }
}

void Optimizer::zero_grad(bool set_to_none, std::source_location where) {
  detail::UserFrame frame(where);
  for (Tensor& param : params_)
    param.zero_grad(set_to_none);
}

void Optimizer::set_lr(double lr) {
  for (size_t group = 0; group < lrs_.size(); ++group)
    set_lr(group, lr);
}

void Optimizer::set_lr(size_t group, double lr) {
  if (group >= lrs_.size())
    throw Error(std::string(name()) + "::set_lr: no group " + std::to_string(group) + " (it has " +
                std::to_string(lrs_.size()) + ")");
  detail::requireFiniteNonNegative(detail::groupLabel(name(), group, lrs_.size()) + " set_lr", "lr", lr);
  lrs_[group].copy_(scalar_tensor(lr, f32));
}

void Optimizer::assign(Tensor& state, const Tensor& value) { state.copy_(value); }

void Optimizer::name_state_for_traces() {
  for (const auto& [key, tensor] : state_dict()) {
    size_t dot = key.find('.');
    std::string head = key.substr(0, dot), rest = dot == std::string::npos ? "" : key.substr(dot + 1);
    if (head == "lr") // PyTorch's param_groups[g]["lr"]; state_dict's "lr" is group 0's
      detail::nameState(tensor, lrs_.size() == 1 ? "lr" : "param_groups." + (rest.empty() ? "0" : rest) + ".lr");
    else
      detail::nameState(tensor, rest, params_.at(std::stoul(head)));
  }
}

std::vector<NamedTensor> Optimizer::state_dict() const {
  std::vector<NamedTensor> out{{"lr", lrs_[0]}};
  for (size_t group = 1; group < lrs_.size(); ++group)
    out.emplace_back("lr." + std::to_string(group), lrs_[group]);
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back(std::to_string(i) + ".step", steps_[i]);
    collect_buffers(i, out);
  }
  return out;
}

std::vector<std::pair<std::string, double>> Optimizer::hyperparameters() const {
  std::vector<std::pair<std::string, double>> settings{{"groups", double(lrs_.size())}};
  for (size_t group = 0; group < lrs_.size(); ++group)
    for (auto& [name, value] : group_hyperparameters(group))
      settings.emplace_back(group == 0 ? name : "group" + std::to_string(group) + "." + name, value);
  return settings;
}

void Optimizer::save(const std::string& path) const {
  // savedStateOf hands out the state's handles; saving only reads them.
  detail::saveAlone(path, *this, std::string(name()) + "::save");
}

void Optimizer::load(const std::string& path) {
  detail::loadAlone(path, *this, std::string(name()) + "::load");
}

Tensor Optimizer::predicated(const Tensor& predicate, const Tensor& updated, const Tensor& old) {
  return predicate.defined() ? where(predicate, updated, old) : updated;
}

void Optimizer::step(const Tensor& inv_scale, const Tensor& predicate, std::source_location caller) {
  detail::UserFrame frame(caller);
  NoGradGuard noGrad;
  prepare_step(inv_scale);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor grad = params_[i].grad();
    if (!grad.defined())
      continue; // PyTorch skips parameters without a gradient, step count included
    update(i, grad, inv_scale, predicate);
    if (!counts_steps(i))
      continue;
    // step + 1 through f64, since jit.add is float-only: exact below 2^53 updates.
    Tensor next = (steps_[i].to(f64) + 1.0).to(i64);
    assign(steps_[i], predicated(predicate, next, steps_[i]));
  }
}

using detail::groupLabel;
using detail::requireFiniteNonNegative;
using detail::lrsOf;
using detail::parametersOf;

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD(std::vector<SGDGroup>{{.params = std::move(params)}}, options) {}

SGD::SGD(std::vector<SGDGroup> groups, SGDOptions defaults)
    : Optimizer(parametersOf(groups), lrsOf(groups, defaults.lr)) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const SGDGroup& group = groups[g];
    SGDOptions options{.lr = group.lr.value_or(defaults.lr),
                       .momentum = group.momentum.value_or(defaults.momentum),
                       .dampening = group.dampening.value_or(defaults.dampening),
                       .weight_decay = group.weight_decay.value_or(defaults.weight_decay),
                       .nesterov = group.nesterov.value_or(defaults.nesterov),
                       .maximize = group.maximize.value_or(defaults.maximize)};
    std::string label = groupLabel("SGD", g, groups.size());
    if (options.nesterov && (options.momentum <= 0.0 || options.dampening != 0.0))
      throw Error(label + ": nesterov needs momentum > 0 and dampening 0 (as in PyTorch)");
    requireFiniteNonNegative(label, "lr", options.lr);
    requireFiniteNonNegative(label, "momentum", options.momentum);
    requireFiniteNonNegative(label, "weight_decay", options.weight_decay);
    groupOptions_.push_back(options);
  }
  for (size_t i = 0; i < params_.size(); ++i)
    buffers_.push_back(options(groupOf_[i]).momentum != 0.0 ? detail::zeroedStateLike(params_[i]) : Tensor());
  name_state_for_traces();
}

bool SGD::counts_steps(size_t i) const {
  // The count only decides how the momentum buffer starts: PyTorch's first
  // step sets it to the gradient, which with dampening 0 is what the general
  // rule gives from a zero buffer (0.9 * 0 + g == g), so no count is kept.
  const SGDOptions& options = groupOptions_[groupOf_[i]];
  return options.momentum != 0.0 && options.dampening != 0.0;
}

std::vector<std::pair<std::string, double>> SGD::group_hyperparameters(size_t group) const {
  const SGDOptions& options = groupOptions_.at(group);
  return {{"momentum", options.momentum},
          {"dampening", options.dampening},
          {"weight_decay", options.weight_decay},
          {"nesterov", options.nesterov ? 1.0 : 0.0},
          {"maximize", options.maximize ? 1.0 : 0.0}};
}

void SGD::collect_buffers(size_t i, std::vector<NamedTensor>& out) const {
  if (buffers_[i].defined())
    out.emplace_back(std::to_string(i) + ".momentum_buffer", buffers_[i]);
}

void SGD::update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) {
  size_t group = groupOf_[i];
  const SGDOptions& options = groupOptions_[group];
  SgdUpdateOptions update{.momentum = options.momentum,
                          .dampening = options.dampening,
                          .weight_decay = options.weight_decay,
                          .nesterov = options.nesterov,
                          .maximize = options.maximize};
  Tensor step = counts_steps(i) ? steps_[i] : Tensor();
  auto [param, buffer] = sgd_update(params_[i], grad, buffers_[i], step, lr(group), update, inv_scale, predicate);
  assign(params_[i], param);
  if (buffer.defined())
    assign(buffers_[i], buffer);
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<AdamGroup>{{.params = std::move(params)}}, options, false) {}

Adam::Adam(std::vector<AdamGroup> groups, AdamOptions defaults) : Adam(std::move(groups), defaults, false) {}

Adam::Adam(std::vector<AdamGroup> groups, const AdamOptions& defaults, bool decoupled)
    : Optimizer(parametersOf(groups), lrsOf(groups, defaults.lr)), decoupled_(decoupled) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const AdamGroup& group = groups[g];
    std::pair<double, double> betas = group.betas.value_or(defaults.betas);
    AdamUpdateOptions update{.beta1 = betas.first,
                             .beta2 = betas.second,
                             .eps = group.eps.value_or(defaults.eps),
                             .weight_decay = group.weight_decay.value_or(defaults.weight_decay),
                             .decoupled_weight_decay = decoupled,
                             .maximize = group.maximize.value_or(defaults.maximize)};
    std::string label = groupLabel(name(), g, groups.size());
    detail::requireAdamSettings(label, initial_lr(g), update.eps, update.weight_decay, betas);
    groupUpdates_.push_back(update);
    groupAmsgrad_.push_back(group.amsgrad.value_or(defaults.amsgrad));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& param = params_[i];
    expAvg_.push_back(detail::zeroedStateLike(param));
    expAvgSq_.push_back(detail::zeroedStateLike(param));
    // PyTorch keeps max_exp_avg_sq only in amsgrad groups.
    maxExpAvgSq_.push_back(groupAmsgrad_[groupOf_[i]] ? detail::zeroedStateLike(param) : Tensor());
  }
  name_state_for_traces();
}

std::vector<std::pair<std::string, double>> Adam::group_hyperparameters(size_t group) const {
  const AdamUpdateOptions& update = groupUpdates_.at(group);
  std::vector<std::pair<std::string, double>> settings = {{"beta1", update.beta1},
                                                          {"beta2", update.beta2},
                                                          {"eps", update.eps},
                                                          {"weight_decay", update.weight_decay},
                                                          {"maximize", update.maximize ? 1.0 : 0.0}};
  // Only when set, so checkpoints saved before AMSGrad existed still load.
  if (groupAmsgrad_.at(group))
    settings.emplace_back("amsgrad", 1.0);
  return settings;
}

void Adam::collect_buffers(size_t i, std::vector<NamedTensor>& out) const {
  out.emplace_back(std::to_string(i) + ".exp_avg", expAvg_[i]);
  out.emplace_back(std::to_string(i) + ".exp_avg_sq", expAvgSq_[i]);
  if (maxExpAvgSq_[i].defined())
    out.emplace_back(std::to_string(i) + ".max_exp_avg_sq", maxExpAvgSq_[i]);
}

void Adam::update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) {
  size_t group = groupOf_[i];
  std::vector<Tensor> results = applyAdamUpdate(params_[i], grad, expAvg_[i], expAvgSq_[i], maxExpAvgSq_[i],
                                                steps_[i], lr(group), groupUpdates_[group], inv_scale, predicate);
  assign(params_[i], results[0]);
  assign(expAvg_[i], results[1]);
  assign(expAvgSq_[i], results[2]);
  if (maxExpAvgSq_[i].defined())
    assign(maxExpAvgSq_[i], results[3]);
}

namespace {
AdamOptions asAdamOptions(const AdamWOptions& options) {
  return {.lr = options.lr,
          .betas = options.betas,
          .eps = options.eps,
          .weight_decay = options.weight_decay,
          .amsgrad = options.amsgrad,
          .maximize = options.maximize};
}
} // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(std::vector<AdamGroup>{{.params = std::move(params)}}, asAdamOptions(options), true) {}

AdamW::AdamW(std::vector<AdamGroup> groups, AdamWOptions defaults)
    : Adam(std::move(groups), asAdamOptions(defaults), true) {}

} // namespace optim

detail::SavedState detail::savedStateOf(optim::Optimizer& optimizer) {
  return {.kind = optimizer.name(),
          .noun = "optimizer",
          .tensors = optimizer.state_dict(),
          .settings = optimizer.hyperparameters(),
          .restore = {}};
}

} // namespace jit
