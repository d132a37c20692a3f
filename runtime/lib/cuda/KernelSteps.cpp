// Which hand-written kernel family runs a step (DeviceStep.h).

#include "DeviceStep.h"

#include "ampjit/runtime/Environment.h"

#include <string>

namespace ampjit::runtime::cuda {

bool wideIndexArithmeticForced() { return environmentFlag("AMPJIT_CUDA_WIDE_INDEX"); }

bool evictFirstHints() { return environmentFlag("AMPJIT_CUDA_CACHE_HINTS", /*whenUnset=*/true); }

bool vectorUpdates() { return environmentFlag("AMPJIT_CUDA_VECTOR_UPDATES", /*whenUnset=*/true); }

bool runsAsHandwrittenKernel(StepKind kind) { return runsAsNumericKernel(kind) || runsAsUpdateKernel(kind); }

Expected<std::unique_ptr<DeviceStep>> makeHandwrittenStep(DeviceContext& context, const Plan& plan,
                                                          const Step& step) {
  if (runsAsNumericKernel(step.kind))
    return makeNumericStep(context, plan, step);
  if (runsAsUpdateKernel(step.kind))
    return makeUpdateStep(context, plan, step);
  return Status::error("no hand-written CUDA kernel runs " + std::string(stepKindName(step.kind)) + " steps");
}

} // namespace ampjit::runtime::cuda
