// PLACEHOLDER until the numeric kernels land: every kind reports it has no kernel.
#include "DeviceStep.h"
namespace ampjit::runtime::cuda {
bool runsAsNumericKernel(StepKind) { return false; }
Expected<std::unique_ptr<DeviceStep>> makeNumericStep(DeviceContext&, const Plan&, const Step& step) {
  return Status::error("no CUDA kernel for " + std::string(stepKindName(step.kind)) + " steps yet");
}
} // namespace ampjit::runtime::cuda
