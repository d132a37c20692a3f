// Placeholder until the kernels land.
#include "CpuKernels.h"
namespace ampjit::runtime::cpu {
Status runConv2d(const Step&, const StepIO&) { return Status::error("conv2d: no CPU kernel yet"); }
Status runConv2dGradInput(const Step&, const StepIO&) { return Status::error("conv2d_grad_input: no CPU kernel yet"); }
Status runConv2dGradWeight(const Step&, const StepIO&) { return Status::error("conv2d_grad_weight: no CPU kernel yet"); }
}
