// The fused update ops, the optimizers over them and clip_grad_norm_.

#include "Dispatch.h"
#include "StateFile.h"

#include "jit/Autograd.h"
#include "jit/Ops.h"
#include "jit/optim.h"

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

std::tuple<Tensor, Tensor, Tensor> adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                               const Tensor& exp_avg_sq, const Tensor& step, const Tensor& lr,
                                               const AdamUpdateOptions& options, const Tensor& inv_scale,
                                               const Tensor& predicate) {
  detail::AttributeMap attributes{{"beta1", options.beta1}, {"beta2", options.beta2}, {"eps", options.eps}};
  if (options.weight_decay != 0.0)
    attributes["weight_decay"] = options.weight_decay;
  if (options.decoupled_weight_decay)
    attributes["decoupled_weight_decay"] = true;
  if (options.maximize)
    attributes["maximize"] = true;
  std::vector<Tensor> results = detail::apply(
      detail::ops::adam_update, {param, grad, exp_avg, exp_avg_sq, step, lr, inv_scale, predicate, Tensor()},
      std::move(attributes));
  return {results[0], results[1], results[2]};
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  NoGradGuard noGrad;
  bool infinity = std::isinf(norm_type) && norm_type > 0;
  if (!infinity && norm_type != 2.0)
    throw Error("clip_grad_norm_: norm_type " + std::to_string(norm_type) + " is not supported (2 or infinity)");
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
    Tensor part = infinity ? max(where(lt(g, scalar_tensor(0.0, accumulate)), -g, g)) : sum(g * g);
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

namespace optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr)
    : params_(std::move(params)), lr_(scalar_tensor(lr, f32)), initialLr_(lr) {
  for (const Tensor& param : params_) {
    if (!param.defined() || !is_floating_point(param.dtype()) || !param.is_leaf())
      throw Error("optimizer: parameter " + detail::describe(param) +
                  " must be a floating-point leaf tensor (one that requires_grad_ made)");
    steps_.push_back(scalar_tensor(0.0, i64));
    detail::markState(steps_.back(), detail::StateRole::OptState);
  }
  detail::markState(lr_, detail::StateRole::Hyper);
}

void Optimizer::zero_grad(bool set_to_none, std::source_location where) {
  detail::UserFrame frame(where);
  for (Tensor& param : params_)
    param.zero_grad(set_to_none);
}

void Optimizer::set_lr(double lr) { lr_.copy_(scalar_tensor(lr, f32)); }

void Optimizer::assign(Tensor& state, const Tensor& value) { state.copy_(value); }

std::vector<NamedTensor> Optimizer::state_dict() const {
  std::vector<NamedTensor> out{{"lr", lr_}};
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back(std::to_string(i) + ".step", steps_[i]);
    collect_buffers(i, out);
  }
  return out;
}

void Optimizer::save(const std::string& path) const {
  // savedStateOf hands out the state's handles; saving only reads them.
  detail::writeStateFile(path, {{"", detail::savedStateOf(const_cast<Optimizer&>(*this))}}, std::string(name()) + "::save");
}

void Optimizer::load(const std::string& path) {
  detail::readStateFile(path, {{"", detail::savedStateOf(*this)}}, std::string(name()) + "::load");
}

void Optimizer::step(const Tensor& inv_scale, const Tensor& predicate, std::source_location caller) {
  detail::UserFrame frame(caller);
  NoGradGuard noGrad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor grad = params_[i].grad();
    if (!grad.defined())
      continue; // PyTorch skips parameters without a gradient, step count included
    update(i, grad, inv_scale, predicate);
    if (!counts_steps())
      continue;
    // step + 1 through f64, since jit.add is float-only: exact below 2^53 updates.
    Tensor next = (steps_[i].to(f64) + 1.0).to(i64);
    assign(steps_[i], predicate.defined() ? where(predicate, next, steps_[i]) : next);
  }
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : Optimizer(std::move(params), options.lr), options_(options) {
  if (options.nesterov && (options.momentum <= 0.0 || options.dampening != 0.0))
    throw Error("SGD: nesterov needs momentum > 0 and dampening 0 (as in PyTorch)");
  if (options.lr < 0.0 || options.momentum < 0.0 || options.weight_decay < 0.0)
    throw Error("SGD: lr, momentum and weight_decay must be >= 0");
  for (const Tensor& param : params_)
    buffers_.push_back(options.momentum != 0.0 ? zeros_like(param) : Tensor());
  for (const Tensor& buffer : buffers_)
    detail::markState(buffer, detail::StateRole::OptState);
}

bool SGD::counts_steps() const {
  // The count only decides how the momentum buffer starts: PyTorch's first
  // step sets it to the gradient, which with dampening 0 is what the general
  // rule gives from a zero buffer (0.9 * 0 + g == g), so no count is kept.
  return options_.momentum != 0.0 && options_.dampening != 0.0;
}

std::vector<std::pair<std::string, double>> SGD::hyperparameters() const {
  return {{"momentum", options_.momentum},
          {"dampening", options_.dampening},
          {"weight_decay", options_.weight_decay},
          {"nesterov", options_.nesterov ? 1.0 : 0.0},
          {"maximize", options_.maximize ? 1.0 : 0.0}};
}

void SGD::collect_buffers(size_t i, std::vector<NamedTensor>& out) const {
  if (buffers_[i].defined())
    out.emplace_back(std::to_string(i) + ".momentum_buffer", buffers_[i]);
}

void SGD::update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) {
  SgdUpdateOptions update{.momentum = options_.momentum,
                          .dampening = options_.dampening,
                          .weight_decay = options_.weight_decay,
                          .nesterov = options_.nesterov,
                          .maximize = options_.maximize};
  Tensor step = counts_steps() ? steps_[i] : Tensor();
  auto [param, buffer] = sgd_update(params_[i], grad, buffers_[i], step, lr(), update, inv_scale, predicate);
  assign(params_[i], param);
  if (buffer.defined())
    assign(buffers_[i], buffer);
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, false) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled)
    : Optimizer(std::move(params), options.lr),
      update_{.beta1 = options.betas.first,
              .beta2 = options.betas.second,
              .eps = options.eps,
              .weight_decay = options.weight_decay,
              .decoupled_weight_decay = decoupled,
              .maximize = options.maximize} {
  auto inUnit = [](double beta) { return beta >= 0.0 && beta < 1.0; };
  if (!inUnit(options.betas.first) || !inUnit(options.betas.second))
    throw Error("Adam: betas must be in [0, 1)");
  if (options.lr < 0.0 || options.eps < 0.0 || options.weight_decay < 0.0)
    throw Error("Adam: lr, eps and weight_decay must be >= 0");
  for (const Tensor& param : params_) {
    expAvg_.push_back(zeros_like(param));
    expAvgSq_.push_back(zeros_like(param));
    detail::markState(expAvg_.back(), detail::StateRole::OptState);
    detail::markState(expAvgSq_.back(), detail::StateRole::OptState);
  }
}

std::vector<std::pair<std::string, double>> Adam::hyperparameters() const {
  return {{"beta1", update_.beta1},
          {"beta2", update_.beta2},
          {"eps", update_.eps},
          {"weight_decay", update_.weight_decay},
          {"maximize", update_.maximize ? 1.0 : 0.0}};
}

void Adam::collect_buffers(size_t i, std::vector<NamedTensor>& out) const {
  out.emplace_back(std::to_string(i) + ".exp_avg", expAvg_[i]);
  out.emplace_back(std::to_string(i) + ".exp_avg_sq", expAvgSq_[i]);
}

void Adam::update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) {
  auto [param, m, v] =
      adam_update(params_[i], grad, expAvg_[i], expAvgSq_[i], steps_[i], lr(), update_, inv_scale, predicate);
  assign(params_[i], param);
  assign(expAvg_[i], m);
  assign(expAvgSq_[i], v);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(std::move(params),
           AdamOptions{.lr = options.lr,
                       .betas = options.betas,
                       .eps = options.eps,
                       .weight_decay = options.weight_decay,
                       .maximize = options.maximize},
           true) {}

} // namespace optim

detail::SavedState detail::savedStateOf(optim::Optimizer& optimizer) {
  return {.kind = optimizer.name(),
          .noun = "optimizer",
          .tensors = optimizer.state_dict(),
          .settings = optimizer.hyperparameters(),
          .restore = {}};
}

} // namespace jit
