#ifndef AMPJIT_FRONTEND_LIB_OPTIM_PARAMETERGROUPS_H
#define AMPJIT_FRONTEND_LIB_OPTIM_PARAMETERGROUPS_H

// What every optimizer's constructor does with its parameter groups
// (SGDGroup, AdamGroup, RMSpropGroup, AdagradGroup, RAdamGroup, NAdamGroup,
// AdamaxGroup): each has `params` and an optional `lr`; how each makes its
// state buffers; and the setting checks (requireFiniteNonNegative, which the
// schedules use too).

#include "Dispatch.h"

#include "jit/Tensor.h"

#include "ampjit/runtime/Plan.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace jit::detail {

template <typename Group> std::vector<std::vector<Tensor>> parametersOf(const std::vector<Group>& groups) {
  std::vector<std::vector<Tensor>> params;
  for (const Group& group : groups)
    params.push_back(group.params);
  return params;
}

template <typename Group> std::vector<double> lrsOf(const std::vector<Group>& groups, double fallback) {
  std::vector<double> lrs;
  for (const Group& group : groups)
    lrs.push_back(group.lr.value_or(fallback));
  return lrs;
}

/// "Adam", or "Adam group 2" when there are several groups (error messages).
inline std::string groupLabel(const char* optimizer, size_t group, size_t count) {
  return count == 1 ? std::string(optimizer) : std::string(optimizer) + " group " + std::to_string(group);
}

/// A rate, decay or epsilon must be a finite number >= 0. NaN and inf are
/// refused too: either turns every parameter into NaN at the first step, after
/// which the loss scaler skips every step and nothing says why.
inline void requireFiniteNonNegative(const std::string& label, const char* name, double value) {
  if (!(value >= 0.0 && value <= std::numeric_limits<double>::max()))
    throw Error(label + ": " + name + " must be finite and >= 0, got " + ampjit::runtime::formatDouble(value));
}

/// Adam-style betas: each a decay in [0, 1), as PyTorch requires.
inline void requireBetas(const std::string& label, std::pair<double, double> betas) {
  for (double beta : {betas.first, betas.second})
    if (!(beta >= 0.0 && beta < 1.0))
      throw Error(label + ": betas must be in [0, 1), got " + ampjit::runtime::formatDouble(beta));
}

/// The settings Adam's family shares: lr, eps and weight_decay finite and
/// >= 0, betas in [0, 1).
inline void requireAdamSettings(const std::string& label, double lr, double eps, double weight_decay,
                                std::pair<double, double> betas) {
  requireFiniteNonNegative(label, "lr", lr);
  requireFiniteNonNegative(label, "eps", eps);
  requireFiniteNonNegative(label, "weight_decay", weight_decay);
  requireBetas(label, betas);
}

/// `buffer` marked as optimizer state, so a traced step carries it from step
/// to step and a checkpoint holds it; an undefined buffer (state a group's
/// settings leave out) stays undefined.
inline Tensor optimizerState(Tensor buffer) {
  markState(buffer, StateRole::OptState);
  return buffer;
}

/// An optimizer buffer that starts at zero, of `param`'s shape and dtype
/// (PyTorch's torch.zeros_like in an optimizer's state init).
inline Tensor zeroedStateLike(const Tensor& param) { return optimizerState(zeros_like(param)); }

} // namespace jit::detail

#endif // AMPJIT_FRONTEND_LIB_OPTIM_PARAMETERGROUPS_H
