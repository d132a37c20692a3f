// The amp ops and GradScaler (PyTorch's torch.amp.GradScaler semantics).

#include "Dispatch.h"
#include "StateFile.h"

#include "jit/Autograd.h"
#include "jit/Ops.h"
#include "jit/amp.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace jit::amp {

Tensor scale_loss(const Tensor& loss, const Tensor& scale) {
  return detail::apply1(detail::ops::scale_loss, {loss, scale});
}

Tensor all_finite(const std::vector<Tensor>& grads) {
  if (grads.empty()) // nothing to check: the op needs one gradient
    return scalar_tensor(1.0, i1);
  return detail::apply1(detail::ops::all_finite, grads);
}

std::pair<std::vector<Tensor>, Tensor> unscale_and_check(const Tensor& inv_scale, const std::vector<Tensor>& grads) {
  if (grads.empty())
    return {{}, scalar_tensor(1.0, i1)};
  std::vector<Tensor> operands = {inv_scale};
  operands.insert(operands.end(), grads.begin(), grads.end());
  std::vector<Tensor> results = detail::apply(detail::ops::unscale_and_check, std::move(operands));
  Tensor finite = results.back();
  results.pop_back();
  return {std::move(results), finite};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> update_scale(const Tensor& scale, const Tensor& good_steps,
                                                        const Tensor& bad_steps, const Tensor& skipped_steps,
                                                        const Tensor& all_finite, const UpdateScaleOptions& options) {
  detail::AttributeMap attributes{{"growth_factor", options.growth_factor},
                                  {"backoff_factor", options.backoff_factor},
                                  {"growth_interval", options.growth_interval},
                                  {"backoff_interval", options.backoff_interval},
                                  {"min_scale", options.min_scale}};
  // No cap is the op's default: traced modules only spell out a real one.
  if (std::isfinite(options.max_scale))
    attributes.emplace("max_scale", options.max_scale);
  std::vector<Tensor> r = detail::apply(detail::ops::update_scale,
                                        {scale, good_steps, bad_steps, skipped_steps, all_finite}, attributes);
  return {r[0], r[1], r[2], r[3]};
}

namespace {

/// The one value given under a setting's names (PyTorch's first), or `fallback`.
template <typename T>
T pick(std::initializer_list<std::pair<const char*, std::optional<T>>> names, T fallback) {
  const std::pair<const char*, std::optional<T>>* given = nullptr;
  for (const auto& name : names)
    if (name.second) {
      if (given)
        throw Error(std::string("GradScaler: ") + given->first + " and " + name.first +
                    " name the same setting; give one");
      given = &name;
    }
  return given ? *given->second : fallback;
}

std::vector<Tensor> gradsOf(const optim::Optimizer& optimizer) {
  std::vector<Tensor> grads;
  for (const Tensor& param : optimizer.parameters())
    if (param.grad().defined())
      grads.push_back(param.grad());
  return grads;
}

/// An i1[] holding true with a value of its own, even while jit::trace
/// records (scalar_tensor would then be a symbol of the trace): state made
/// inside a traced step must hold data for the compiled step to write into.
Tensor concreteTrue() {
  const double one = 1.0;
  namespace rt = ampjit::runtime;
  rt::Expected<rt::Tensor> value = rt::Tensor::fromDoubles(i1, {}, std::span<const double>(&one, 1));
  if (!value)
    throw Error("GradScaler: " + value.message());
  return detail::makeTensor(std::move(*value));
}

/// Pointers to the scaler's per-optimizer entries in the order it met their
/// optimizers (their `ordinal`), const where the map is.
template <typename Entries>
auto inOrderMet(Entries& entries) {
  std::vector<decltype(&entries.begin()->second)> ordered;
  for (auto& entry : entries)
    ordered.push_back(&entry.second);
  std::sort(ordered.begin(), ordered.end(), [](auto* a, auto* b) { return a->ordinal < b->ordinal; });
  return ordered;
}

/// a && b for i1 scalars (select(a, b, a)); jit has no logical op.
Tensor logicalAnd(const Tensor& a, const Tensor& b) { return where(a, b, a); }

} // namespace

GradScaler::GradScaler(GradScalerOptions o)
    : enabled_(o.enabled), dynamic_(o.dynamic), dropOverflowUpdate_(o.drop_overflow_update) {
  double init = pick<double>(
      {{"init_scale", o.init_scale},
       {"init_loss_scaling", o.init_loss_scaling},
       {"init_loss_scale", o.init_loss_scale}},
      65536.0);
  // MindSpore's one scale_factor: multiply on growth, divide on backoff.
  std::optional<double> mindsporeBackoff;
  if (o.scale_factor)
    mindsporeBackoff = 1.0 / *o.scale_factor;
  update_.growth_factor = pick<double>(
      {{"growth_factor", o.growth_factor}, {"incr_ratio", o.incr_ratio}, {"scale_factor", o.scale_factor}}, 2.0);
  update_.backoff_factor = pick<double>(
      {{"backoff_factor", o.backoff_factor}, {"decr_ratio", o.decr_ratio}, {"scale_factor", mindsporeBackoff}}, 0.5);
  update_.growth_interval = pick<int64_t>({{"growth_interval", o.growth_interval},
                                           {"incr_every_n_steps", o.incr_every_n_steps},
                                           {"scale_window", o.scale_window}},
                                          2000);
  update_.backoff_interval = o.decr_every_n_nan_or_inf.value_or(1);
  bool paddle = o.init_loss_scaling || o.incr_ratio || o.decr_ratio || o.incr_every_n_steps ||
                o.decr_every_n_nan_or_inf;
  bool mindspore = o.init_loss_scale || o.scale_factor || o.scale_window;
  update_.min_scale = o.min_loss_scale.value_or(paddle || mindspore ? 1.0 : 0.0);
  update_.max_scale = o.max_loss_scale.value_or(std::numeric_limits<double>::infinity());
  if (!(init > 0.0) || !std::isfinite(init))
    throw Error("GradScaler: the initial scale must be positive and finite");
  if (!(update_.min_scale >= 0.0) || !std::isfinite(update_.min_scale))
    throw Error("GradScaler: min_loss_scale must be finite and non-negative");
  if (!(update_.max_scale > 0.0) || update_.max_scale < update_.min_scale)
    throw Error("GradScaler: max_loss_scale must be positive and at least min_loss_scale");
  // Below the floor is allowed (Paddle starts anywhere; the floor binds backoffs),
  // above the cap is not: the first growth would shrink the scale.
  if (enabled_ && init > update_.max_scale)
    throw Error("GradScaler: the initial scale " + ampjit::runtime::formatDouble(init) + " is above max_loss_scale " +
                ampjit::runtime::formatDouble(update_.max_scale));
  if (!(update_.growth_factor > 1.0) || !(update_.backoff_factor > 0.0 && update_.backoff_factor < 1.0))
    throw Error("GradScaler: growth_factor must be > 1 and backoff_factor in (0, 1)");
  if (update_.growth_interval <= 0 || update_.backoff_interval <= 0)
    throw Error("GradScaler: growth_interval and decr_every_n_nan_or_inf must be positive");
  if (enabled_ && dynamic_ && !dropOverflowUpdate_)
    throw Error("GradScaler: drop_overflow_update = false needs dynamic = false (MindSpore's FixedLossScaleManager): "
                "a dynamic scale backs off from an overflow by skipping the step that overflowed");
  // Static scaling: the same op with intervals never reached (the op
  // requires growth_factor > 1), so the scale stays while skips are counted.
  if (!dynamic_)
    update_.growth_interval = update_.backoff_interval = std::numeric_limits<int64_t>::max();
  scale_ = scalar_tensor(enabled_ ? init : 1.0, f32);
  good_ = scalar_tensor(0.0, i64);
  bad_ = scalar_tensor(0.0, i64);
  skipped_ = scalar_tensor(0.0, i64);
  lastStepFinite_ = scalar_tensor(1.0, i1);
  for (const auto& [name, state] : detail::savedStateOf(*this).tensors) {
    detail::markState(state, detail::StateRole::ScalerState);
    detail::nameState(state, "scaler." + name); // traced steps' names: the checkpoint's
  }
  detail::markState(lastStepFinite_, detail::StateRole::ScalerState);
  detail::nameState(lastStepFinite_, "scaler.last_step_finite");
}

namespace {
GradScalerOptions optionsFor(const Policy& policy, GradScalerOptions options) {
  Policy::Resolved resolved = policy.resolve();
  if (const double* fixed = std::get_if<double>(&resolved.loss_scale)) {
    if (*fixed == 1.0) {
      options.enabled = false;
    } else {
      if (options.init_scale || options.init_loss_scaling || options.init_loss_scale)
        throw Error("GradScaler: the policy's loss_scale " + ampjit::runtime::formatDouble(*fixed) +
                    " and the options' initial scale both set the scale; give one");
      options.dynamic = false;
      options.init_scale = *fixed;
    }
  }
  if (resolved.dtype == bf16 && policy.loss_scale && resolved.loss_scale != LossScale(1.0))
    std::fprintf(stderr, "ampjit: loss scaling under bf16, as the policy asks; bf16 has f32's exponent range, so "
                         "its gradients do not underflow and its default is no scaling\n");
  return options;
}
} // namespace

GradScaler::GradScaler(const Policy& policy, GradScalerOptions options)
    : GradScaler(optionsFor(policy, std::move(options))) {}
GradScaler::GradScaler(const Policy& policy) : GradScaler(policy, GradScalerOptions{}) {}

Tensor GradScaler::invScale() const { return scalar_tensor(1.0, f32) / scale_; }

GradScaler::PerOptimizer& GradScaler::entryFor(const optim::Optimizer& optimizer) {
  auto [entry, added] = perOptimizer_.try_emplace(&optimizer);
  if (added)
    entry->second.ordinal = perOptimizer_.size() - 1;
  return entry->second;
}

Tensor GradScaler::scale(const Tensor& loss, std::source_location where) const {
  detail::UserFrame frame(where);
  return enabled_ ? scale_loss(loss, scale_) : loss;
}

void GradScaler::unscale_(optim::Optimizer& optimizer, std::source_location where) {
  detail::UserFrame frame(where);
  if (!enabled_)
    return;
  PerOptimizer& state = entryFor(optimizer);
  if (state.stage == Stage::Unscaled)
    throw Error("GradScaler: unscale_() has already been called on this optimizer since the last update()");
  if (state.stage == Stage::Stepped)
    throw Error("GradScaler: unscale_() is being called after step()");
  NoGradGuard noGrad;
  std::vector<Tensor> grads = gradsOf(optimizer);
  auto [unscaled, finite] = unscale_and_check(invScale(), grads);
  for (size_t i = 0; i < grads.size(); ++i)
    grads[i].copy_(unscaled[i]);
  // A scaler that never skips keeps no flag, so no state is written from it.
  state.allFinite = dropOverflowUpdate_ ? finite : Tensor();
  state.stage = Stage::Unscaled;
}

void GradScaler::step(optim::Optimizer& optimizer, std::source_location where) {
  detail::UserFrame frame(where);
  if (!enabled_)
    return optimizer.step();
  PerOptimizer& state = entryFor(optimizer);
  if (state.stage == Stage::Stepped)
    throw Error("GradScaler: step() has already been called since the last update()");
  NoGradGuard noGrad;
  if (!dropOverflowUpdate_) {
    // Nothing checked, nothing skipped: unscaled by unscale_() or as the update reads them.
    optimizer.step(state.stage == Stage::Unscaled ? Tensor() : invScale(), Tensor());
  } else if (state.stage == Stage::Unscaled) {
    optimizer.step(Tensor(), state.allFinite);
  } else {
    // One check over the still-scaled gradients; the update unscales as it reads them.
    state.allFinite = all_finite(gradsOf(optimizer));
    optimizer.step(invScale(), state.allFinite);
  }
  state.stage = Stage::Stepped;
}

Tensor GradScaler::stepsFinite() const {
  Tensor finite;
  bool stepped = false;
  for (const PerOptimizer* state : inOrderMet(perOptimizer_)) {
    if (state->stage == Stage::Ready)
      continue;
    stepped = true;
    if (state->allFinite.defined())
      finite = finite.defined() ? logicalAnd(finite, state->allFinite) : state->allFinite;
  }
  if (!stepped)
    throw Error("GradScaler: update() without a step() or unscale_() since the last update()");
  return finite;
}

void GradScaler::finishUpdate(const Tensor& finite) {
  if (finite.defined())
    lastStepFinite_.copy_(finite);
  std::vector<PerOptimizer*> entries = inOrderMet(perOptimizer_);
  bool shared = std::count_if(entries.begin(), entries.end(),
                              [](const PerOptimizer* entry) { return entry->stage != Stage::Ready; }) > 1;
  for (PerOptimizer* entry : entries) {
    entry->inLastUpdate = entry->stage != Stage::Ready;
    if (entry->inLastUpdate) {
      entry->lastUpdateShared = shared;
      if (shared && entry->allFinite.defined()) {
        if (!entry->sharedUpdateFinite.defined()) {
          // Made the first time an update covers several optimizers, inside
          // a trace too: state written before anything read it is captured.
          entry->sharedUpdateFinite = concreteTrue();
          detail::markState(entry->sharedUpdateFinite, detail::StateRole::ScalerState);
          detail::nameState(entry->sharedUpdateFinite,
                            "scaler.optimizer" + std::to_string(entry->ordinal) + ".last_step_finite");
        }
        entry->sharedUpdateFinite.copy_(entry->allFinite);
      }
    }
    entry->stage = Stage::Ready;
  }
}

void GradScaler::update(std::source_location where) {
  detail::UserFrame frame(where);
  if (!enabled_)
    return;
  NoGradGuard noGrad;
  Tensor finite = stepsFinite();
  if (!dropOverflowUpdate_) // a fixed scale, and no step was skipped
    return finishUpdate(finite);
  auto [scale, good, bad, skipped] = update_scale(scale_, good_, bad_, skipped_, finite, update_);
  scale_.copy_(scale);
  good_.copy_(good);
  bad_.copy_(bad);
  skipped_.copy_(skipped);
  finishUpdate(finite);
}

void GradScaler::update(double new_scale, std::source_location where) {
  if (!(new_scale > 0.0) || !std::isfinite(new_scale))
    throw Error("GradScaler: update(new_scale): the scale must be positive and finite, got " +
                ampjit::runtime::formatDouble(new_scale));
  update(scalar_tensor(new_scale, f32), where);
}

void GradScaler::update(const Tensor& new_scale, std::source_location where) {
  detail::UserFrame frame(where);
  if (!new_scale.defined() || new_scale.numel() != 1 || !is_floating_point(new_scale.dtype()))
    throw Error("GradScaler: update(new_scale) takes one floating-point element, not " +
                detail::describe(new_scale));
  if (!enabled_)
    return;
  NoGradGuard noGrad;
  Tensor finite = stepsFinite();
  // PyTorch leaves its growth tracker alone here, and so do we; the skipped-step
  // count is ampjit's own and counts this step as any other (the op's other
  // results are dropped).
  if (dropOverflowUpdate_)
    skipped_.copy_(std::get<3>(update_scale(scale_, good_, bad_, skipped_, finite, update_)));
  // Not detached: a traced step must capture the caller's tensor itself, to
  // read it on every call (the guard above keeps autograd out).
  scale_.copy_(reshape(new_scale, {})); // copy_ converts to f32
  finishUpdate(finite);
}

double GradScaler::get_scale(std::source_location where) const { return enabled_ ? scale_.item(where) : 1.0; }
int64_t GradScaler::growth_tracker(std::source_location where) const { return int64_t(good_.item(where)); }
int64_t GradScaler::skipped_steps(std::source_location where) const { return int64_t(skipped_.item(where)); }

void GradScaler::requireChecks(std::source_location where) const {
  if (!dropOverflowUpdate_)
    throw Error("GradScaler::found_inf at " + detail::callerLine(where) +
                ": this scaler was made with drop_overflow_update = false, so its steps never check their "
                "gradients for an inf or NaN");
}

bool GradScaler::found_inf(const optim::Optimizer& optimizer, std::source_location where) const {
  requireChecks(where);
  auto found = perOptimizer_.find(&optimizer);
  if (found == perOptimizer_.end())
    return false;
  const PerOptimizer& state = found->second;
  // Between step() and update(): this step's own flag.
  if (state.stage != Stage::Ready && state.allFinite.defined())
    return state.allFinite.item(where) == 0.0;
  // After an update, state a traced step writes too: the optimizer's own
  // flag where its last update covered others, the scaler's where that
  // update covered it alone and is the last.
  if (state.lastUpdateShared && state.sharedUpdateFinite.defined())
    return state.sharedUpdateFinite.item(where) == 0.0;
  if (state.inLastUpdate)
    return lastStepFinite_.item(where) == 0.0;
  // Its last update covered it alone and a later one covered other
  // optimizers; eagerly its flag is still a value, traced it was a symbol of
  // that trace.
  if (!state.allFinite.defined())
    return false;
  if (detail::leftOverFromATrace(state.allFinite.impl()))
    throw Error("GradScaler::found_inf(optimizer) at " + detail::callerLine(where) + ": the " + optimizer.name() +
                " optimizer's last step was inside a traced step whose update() covered it alone, and a later "
                "update() has rewritten the scaler's flag, the only one that update kept; ask found_inf() after "
                "the step you want to know about");
  return state.allFinite.item(where) == 0.0;
}

bool GradScaler::found_inf(std::source_location where) const {
  requireChecks(where);
  for (const auto& entry : perOptimizer_)
    if (entry.second.stage != Stage::Ready && entry.second.allFinite.defined() &&
        entry.second.allFinite.item(where) == 0.0)
      return true;
  return lastStepFinite_.item(where) == 0.0;
}

GradScaler::StateTensors GradScaler::state_tensors() const {
  return {.scale = scale_,
          .growth_tracker = good_,
          .skipped_steps = skipped_,
          .last_step_finite = dropOverflowUpdate_ ? lastStepFinite_ : Tensor()};
}

void GradScaler::save(const std::string& path) const {
  // savedStateOf hands out the state's handles; saving only reads them.
  detail::saveAlone(path, *this, "GradScaler::save");
}

void GradScaler::load(const std::string& path) {
  detail::loadAlone(path, *this, "GradScaler::load");
}

} // namespace jit::amp

namespace jit::detail {

SavedState savedStateOf(amp::GradScaler& scaler) {
  return {.kind = "GradScaler",
          .noun = "scaler",
          .tensors = {{"scale", scaler.scale_},
                      {"growth_tracker", scaler.good_},
                      {"bad_steps", scaler.bad_},
                      {"skipped_steps", scaler.skipped_}},
          .settings = {{"enabled", scaler.enabled_ ? 1.0 : 0.0},
                       {"dynamic", scaler.dynamic_ ? 1.0 : 0.0},
                       {"drop_overflow_update", scaler.dropOverflowUpdate_ ? 1.0 : 0.0},
                       {"growth_factor", scaler.update_.growth_factor},
                       {"backoff_factor", scaler.update_.backoff_factor},
                       {"growth_interval", double(scaler.update_.growth_interval)},
                       {"backoff_interval", double(scaler.update_.backoff_interval)},
                       {"min_scale", scaler.update_.min_scale},
                       {"max_scale", scaler.update_.max_scale}},
          // Files from before max_scale had no cap; those from before
          // drop_overflow_update always skipped.
          .settingsOlderFilesLack = {{"max_scale", std::numeric_limits<double>::infinity()},
                                     {"drop_overflow_update", 1.0}},
          // The per-step bookkeeping belongs to the step in flight, not to the file.
          // The optimizers' entries stay: which updates cover which optimizers
          // is what a traced step's replays repeat without the host code.
          .restore = [&scaler] {
            for (auto& [optimizer, state] : scaler.perOptimizer_) {
              state.stage = amp::GradScaler::Stage::Ready;
              state.allFinite = Tensor();
              if (state.sharedUpdateFinite.defined())
                state.sharedUpdateFinite.copy_(scalar_tensor(1.0, i1));
            }
            scaler.lastStepFinite_.copy_(scalar_tensor(1.0, i1));
          }};
}

} // namespace jit::detail
