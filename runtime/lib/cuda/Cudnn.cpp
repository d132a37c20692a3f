// PLACEHOLDER until the cuDNN steps land: every kind reports it has no kernel.
#include "DeviceStep.h"
namespace ampjit::runtime::cuda {
bool runsThroughCudnn(StepKind) { return false; }
Expected<std::unique_ptr<DeviceStep>> makeCudnnStep(DeviceContext&, const Plan&, const Step& step) {
  return Status::error("no cuDNN path for " + std::string(stepKindName(step.kind)) + " steps yet");
}
} // namespace ampjit::runtime::cuda
