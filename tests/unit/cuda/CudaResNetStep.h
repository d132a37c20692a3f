#ifndef AMPJIT_TESTS_UNIT_CUDA_CUDARESNETSTEP_H
#define AMPJIT_TESTS_UNIT_CUDA_CUDARESNETSTEP_H

// A ResNet train step as jit::trace compiles it for the CUDA backend, for the
// tests that look at such a plan without a GPU (CompileKernelsTest,
// EmulatedStepTest).

#include "CompileExample.h"
#include "jit/amp.h"
#include "jit/jit.h"
#include "jit/optim.h"
#include "jit/trace.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace ampjit::testing {

/// `model`'s SGD (momentum 0.9) step with a dynamic loss scaler on a batch of
/// two 3 x `imageSize` x `imageSize` images, traced on the CPU and compiled as
/// the CUDA backend compiles it at O1-f16: parameter casts kept, NHWC, GEMM
/// and batch-norm epilogues, filter gradients as side steps (unless
/// `overlapWeightGradients` is false), and with `deferUpdates` the update
/// deferred into the next step.
inline runtime::Plan cudaResNetStepPlan(const std::shared_ptr<jit::nn::ResNet>& model, jit::Generator& generator,
                                        bool deferUpdates, int64_t imageSize = 32,
                                        bool overlapWeightGradients = true) {
  jit::optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  jit::amp::GradScaler scaler;
  auto step = jit::trace(
      [&](const jit::Tensor& x, const jit::Tensor& y) {
        opt.zero_grad();
        jit::Tensor loss = jit::cross_entropy((*model)(x), y);
        scaler.scale(loss).backward();
        scaler.step(opt);
        scaler.update();
        return loss;
      },
      {.backend = jit::Backend::cpu});
  step(jit::randn({2, 3, imageSize, imageSize}, jit::f32, &generator), jit::tensor(std::vector<int64_t>{1, 7}, {2}));
  return compileSource(step.traced_module(), "resnet",
                       "amp-pipeline{level=O1 dtype=f16 target=sm_90 keep-parameter-casts=true},"
                       "jit-convert-layout{layout=nhwc}",
                       {.fuseElementwise = true, .fuseGemmEpilogues = true, .fuseBatchNormEpilogues = true,
                        .fuseGradientAccumulation = true,
                        .deferOptimizerUpdates = deferUpdates, .deferMinimumElements = int64_t(16) << 20,
                        .overlapWeightGradients = overlapWeightGradients})
      .plan;
}

} // namespace ampjit::testing

#endif // AMPJIT_TESTS_UNIT_CUDA_CUDARESNETSTEP_H
