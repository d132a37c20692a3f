// ExponentialMovingAverage and StochasticWeightAverage: averages of
// parameters kept beside them, updated
// with the same in-place ops a user would write (so a traced step records
// them) and swapped into the parameters for evaluation.

#include "jit/optim.h"

#include "StateFile.h"
#include "trace/TraceSession.h"
#include "ampjit/runtime/Plan.h"

#include "jit/Autograd.h"

#include <cmath>

namespace jit::optim {
namespace {

/// A copy of `value` with storage of its own, outside autograd.
Tensor copyOf(const Tensor& value) {
  NoGradGuard noGrad;
  Tensor copy = zeros_like(value);
  copy.copy_(value);
  return copy;
}

} // namespace

ParameterAverage::ParameterAverage(std::vector<Tensor> parameters, const char* who, const char* shadowName)
    : parameters_(std::move(parameters)) {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!parameters_[i].defined())
      throw Error(std::string(who) + ": parameter " + std::to_string(i) + " is undefined");
    if (!is_floating_point(parameters_[i].dtype()))
      throw Error(std::string(who) + ": parameter " + std::to_string(i) + " is " +
                  std::string(dtype_name(parameters_[i].dtype())) + "; only floating-point tensors are averaged");
    shadows_.push_back(copyOf(parameters_[i]));
    jit::detail::nameState(shadows_.back(), shadowName, parameters_[i]);
  }
}

void ParameterAverage::refuseInsideTrace(const char* what) const {
  detail::refuseInsideTrace(std::string(name()) + "::" + what,
                            "swap the averages in between calls of the step (a traced eval step sees them)");
}

ExponentialMovingAverage::ExponentialMovingAverage(std::vector<Tensor> parameters, double decay)
    : ParameterAverage(std::move(parameters), "ExponentialMovingAverage", "ema"), decay_(decay) {
  if (!(decay >= 0.0 && decay <= 1.0))
    throw Error("ExponentialMovingAverage: decay must be in [0, 1], got " + ampjit::runtime::formatDouble(decay));
}

void ExponentialMovingAverage::update(std::source_location where) {
  detail::UserFrame frame(where);
  NoGradGuard noGrad;
  for (size_t i = 0; i < shadows_.size(); ++i) {
    Tensor keep = scalar_tensor(decay_, shadows_[i].dtype());
    shadows_[i].mul_(keep).add_(parameters_[i] * (1.0 - decay_));
  }
}

StochasticWeightAverage::StochasticWeightAverage(std::vector<Tensor> parameters)
    : ParameterAverage(std::move(parameters), "StochasticWeightAverage", "swa"), count_(scalar_tensor(0.0, i64)) {
  jit::detail::nameState(count_, "swa.n_averaged");
}

void StochasticWeightAverage::update(std::source_location caller) {
  detail::UserFrame frame(caller);
  NoGradGuard noGrad;
  // The count through f64, as the optimizers' step counts (jit.add is float-only).
  Tensor count = count_.to(f64);
  Tensor first = eq(count, scalar_tensor(0.0, f64));
  for (size_t i = 0; i < shadows_.size(); ++i) {
    DType dtype = shadows_[i].dtype();
    Tensor averaged = shadows_[i] + (parameters_[i] - shadows_[i]) / (count + 1.0).to(dtype);
    shadows_[i].copy_(where(first, parameters_[i], averaged));
  }
  count_.copy_((count + 1.0).to(i64));
}

int64_t StochasticWeightAverage::n_averaged() const { return int64_t(count_.item()); }

void ParameterAverage::copy_to() {
  refuseInsideTrace("copy_to()");
  NoGradGuard noGrad;
  for (size_t i = 0; i < parameters_.size(); ++i)
    parameters_[i].copy_(shadows_[i]);
}

void ParameterAverage::store() {
  refuseInsideTrace("store()");
  stored_.clear();
  for (const Tensor& parameter : parameters_)
    stored_.push_back(copyOf(parameter));
}

void ParameterAverage::restore() {
  refuseInsideTrace("restore()");
  if (stored_.empty() && !parameters_.empty())
    throw Error(std::string(name()) + "::restore(): nothing stored; call store() before copy_to()");
  NoGradGuard noGrad;
  for (size_t i = 0; i < parameters_.size(); ++i)
    parameters_[i].copy_(stored_[i]);
  stored_.clear();
}

void ParameterAverage::save(const std::string& path) const {
  detail::saveAlone(path, *this, std::string(name()) + "::save");
}

void ParameterAverage::load(const std::string& path) {
  detail::loadAlone(path, *this, std::string(name()) + "::load");
}

} // namespace jit::optim

namespace jit::detail {

SavedState savedStateOf(optim::ParameterAverage& average) {
  SavedState state{.kind = average.name(),
                   .noun = "parameter average",
                   .tensors = {},
                   .settings = average.settings(),
                   .restore = {}};
  for (size_t i = 0; i < average.shadows_.size(); ++i)
    state.tensors.emplace_back(std::to_string(i), average.shadows_[i]);
  for (auto& extra : average.extra_state())
    state.tensors.push_back(std::move(extra));
  return state;
}

} // namespace jit::detail
