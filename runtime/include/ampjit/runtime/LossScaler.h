#ifndef AMPJIT_RUNTIME_LOSSSCALER_H
#define AMPJIT_RUNTIME_LOSSSCALER_H

// The dynamic loss scaler's state update (amp.update_scale), written once for
// every backend and for tests: PyTorch GradScaler's _amp_update_scale_, plus
// the bad-step counter, skipped-step count and minimum scale of Paddle's
// variant (AmpOps.td describes the op; DESIGN.md "Loss scaling in the graph").

#include "ampjit/runtime/Plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ampjit::runtime {

struct LossScalerState {
  float scale = 65536.0f;
  int64_t goodSteps = 0;    ///< consecutive finite steps since the last growth or overflow
  int64_t badSteps = 0;     ///< consecutive overflowing steps since the last backoff
  int64_t skippedSteps = 0; ///< optimizer steps skipped because of an overflow, ever
  friend bool operator==(const LossScalerState&, const LossScalerState&) = default;
};

/// One update from the step's all-finite flag.
///
/// Finite: bad = 0, good + 1; when good reaches growth_interval it resets to
/// 0 and the scale becomes min(scale * growth_factor, max_scale), unless that
/// is not finite (the scale never grows to inf). Overflow: good = 0, bad + 1,
/// skipped + 1; when bad reaches backoff_interval it resets to 0 and the
/// scale becomes max(scale * backoff_factor, min_scale). Products are formed
/// in double and rounded once to float, as PyTorch's kernel does with its
/// double factors. "Reaches" is `>=`: the same as PyTorch's `==` for every
/// state the update itself produces, and it still fires if a user lowers the
/// interval below a running counter.
inline LossScalerState updateLossScale(LossScalerState state, bool allFinite, const UpdateScaleParams& params) {
  if (allFinite) {
    state.badSteps = 0;
    int64_t good = state.goodSteps + 1;
    if (good >= params.growthInterval) {
      float grown = float(std::min(double(state.scale) * params.growthFactor, params.maxScale));
      if (std::isfinite(grown))
        state.scale = grown;
      good = 0;
    }
    state.goodSteps = good;
  } else {
    state.goodSteps = 0;
    state.skippedSteps += 1;
    int64_t bad = state.badSteps + 1;
    if (bad >= params.backoffInterval) {
      state.scale = float(std::max(double(state.scale) * params.backoffFactor, params.minScale));
      bad = 0;
    }
    state.badSteps = bad;
  }
  return state;
}

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_LOSSSCALER_H
