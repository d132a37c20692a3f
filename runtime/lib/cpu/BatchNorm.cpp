// Placeholder until the kernels land.
#include "CpuKernels.h"
namespace ampjit::runtime::cpu {
Status runBatchNorm(const Step&, const StepIO&) { return Status::error("batch_norm: no CPU kernel yet"); }
Status runBatchNormGrad(const Step&, const StepIO&) { return Status::error("batch_norm_grad: no CPU kernel yet"); }
}
