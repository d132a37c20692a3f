// Which hand-written kernel family runs a step (DeviceStep.h).

#include "DeviceStep.h"

#include "ampjit/runtime/Environment.h"

#include <cstdlib>
#include <string_view>

namespace ampjit::runtime::cuda {

bool wideIndexArithmeticForced() {
  const char* value = std::getenv("AMPJIT_CUDA_WIDE_INDEX");
  return value != nullptr && std::string_view(value) == "1";
}

bool evictFirstHints() {
  return std::getenv("AMPJIT_CUDA_CACHE_HINTS") == nullptr || environmentFlag("AMPJIT_CUDA_CACHE_HINTS");
}

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
