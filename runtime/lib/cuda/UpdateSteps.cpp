// PLACEHOLDER until the update kernels land: every kind reports it has no kernel.
#include "DeviceStep.h"
namespace ampjit::runtime::cuda {
bool runsAsUpdateKernel(StepKind) { return false; }
Expected<std::unique_ptr<DeviceStep>> makeUpdateStep(DeviceContext&, const Plan&, const Step& step) {
  return Status::error("no CUDA kernel for " + std::string(stepKindName(step.kind)) + " steps yet");
}
bool canShareOptimizerLaunch(const Plan&, const Step&, const Step&) { return false; }
Expected<std::unique_ptr<DeviceStep>> makeOptimizerGroupStep(DeviceContext&, const Plan&,
                                                             std::span<const Step* const>) {
  return Status::error("no CUDA optimizer kernel yet");
}
} // namespace ampjit::runtime::cuda
