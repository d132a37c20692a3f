// Placeholder until the kernels land.
#include "CpuKernels.h"
namespace ampjit::runtime::cpu {
Status runPool2d(const Step&, const StepIO&) { return Status::error("pool2d: no CPU kernel yet"); }
Status runPool2dGrad(const Step&, const StepIO&) { return Status::error("pool2d_grad: no CPU kernel yet"); }
}
