// ExponentialMovingAverage: averages of parameters kept beside them, updated
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

void refuseInsideTrace(const char* what) {
  detail::refuseInsideTrace(std::string("ExponentialMovingAverage::") + what,
                            "swap the averages in between calls of the step (a traced eval step sees them)");
}

} // namespace

ExponentialMovingAverage::ExponentialMovingAverage(std::vector<Tensor> parameters, double decay)
    : parameters_(std::move(parameters)), decay_(decay) {
  if (!(decay >= 0.0 && decay <= 1.0))
    throw Error("ExponentialMovingAverage: decay must be in [0, 1], got " + ampjit::runtime::formatDouble(decay));
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!parameters_[i].defined())
      throw Error("ExponentialMovingAverage: parameter " + std::to_string(i) + " is undefined");
    if (!is_floating_point(parameters_[i].dtype()))
      throw Error("ExponentialMovingAverage: parameter " + std::to_string(i) + " is " +
                  std::string(dtype_name(parameters_[i].dtype())) + "; only floating-point tensors are averaged");
    shadows_.push_back(copyOf(parameters_[i]));
    jit::detail::nameState(shadows_.back(), "ema", parameters_[i]);
  }
}

void ExponentialMovingAverage::update(std::source_location where) {
  detail::UserFrame frame(where);
  NoGradGuard noGrad;
  for (size_t i = 0; i < shadows_.size(); ++i) {
    Tensor keep = scalar_tensor(decay_, shadows_[i].dtype());
    shadows_[i].mul_(keep).add_(parameters_[i] * (1.0 - decay_));
  }
}

void ExponentialMovingAverage::copy_to() {
  refuseInsideTrace("copy_to()");
  NoGradGuard noGrad;
  for (size_t i = 0; i < parameters_.size(); ++i)
    parameters_[i].copy_(shadows_[i]);
}

void ExponentialMovingAverage::store() {
  refuseInsideTrace("store()");
  stored_.clear();
  for (const Tensor& parameter : parameters_)
    stored_.push_back(copyOf(parameter));
}

void ExponentialMovingAverage::restore() {
  refuseInsideTrace("restore()");
  if (stored_.empty() && !parameters_.empty())
    throw Error("ExponentialMovingAverage::restore(): nothing stored; call store() before copy_to()");
  NoGradGuard noGrad;
  for (size_t i = 0; i < parameters_.size(); ++i)
    parameters_[i].copy_(stored_[i]);
  stored_.clear();
}

void ExponentialMovingAverage::save(const std::string& path) const {
  detail::saveAlone(path, *this, "ExponentialMovingAverage::save");
}

void ExponentialMovingAverage::load(const std::string& path) {
  detail::loadAlone(path, *this, "ExponentialMovingAverage::load");
}

} // namespace jit::optim

namespace jit::detail {

SavedState savedStateOf(optim::ExponentialMovingAverage& average) {
  SavedState state{.kind = average.name(),
                   .noun = "moving average",
                   .tensors = {},
                   .settings = {{"decay", average.decay_}},
                   .restore = {}};
  for (size_t i = 0; i < average.shadows_.size(); ++i)
    state.tensors.emplace_back(std::to_string(i), average.shadows_[i]);
  return state;
}

} // namespace jit::detail
