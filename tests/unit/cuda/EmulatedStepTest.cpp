//===- EmulatedStepTest.cpp - whole train steps on the CUDA path, emulated ===//
//
// The MNIST train step compiled as the CUDA pipeline compiles it (GEMM
// epilogues, fused elementwise kernels) and run the way the CUDA backend
// runs it, on the host emulation (tests/emulation): the backend's launch
// groups, its multi-tensor update, convert and classification-head launches,
// every generated kernel, and its GEMM steps with their epilogues on the
// host model of cuBLASLt. Compared with the CPU backend's run of the same
// plan over several steps, with DESIGN's tolerances.
//
//===----------------------------------------------------------------------===//

#include "CompileExample.h"
#include "CudaResNetStep.h"
#include "EmulatedCudaPlan.h"
#include "GpuTestUtil.h"

#include "ampjit/runtime/CpuBackend.h"
#include "cuda/DeviceStep.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace ampjit::emulation {
namespace {

namespace rt = ampjit::runtime;
using namespace ampjit::testing::mnist_step;
using ampjit::testing::initialArguments;

rt::Plan cudaPipelineMnistStep(const std::string& ampOptions) {
  return ampjit::testing::compileExample("mnist_train_step.mlir", ampOptions,
                                         {.fuseElementwise = true, .fuseGemmEpilogues = true});
}

struct BothSteps {
  std::unique_ptr<rt::Executable> cpu, emulated;
  std::vector<rt::Tensor> cpuArguments, emulatedArguments;
};

BothSteps prepareBoth(const rt::Plan& plan, rt::Backend& cpu, EmulatedCudaBackend& emulated) {
  BothSteps both;
  rt::Expected<std::unique_ptr<rt::Executable>> cpuExecutable = cpu.prepare(plan);
  EXPECT_TRUE(cpuExecutable.ok()) << cpuExecutable.message();
  rt::Expected<std::unique_ptr<rt::Executable>> emulatedExecutable = emulated.prepare(plan);
  EXPECT_TRUE(emulatedExecutable.ok()) << emulatedExecutable.message();
  if (!cpuExecutable || !emulatedExecutable)
    return both;
  both.cpu = std::move(*cpuExecutable);
  both.emulated = std::move(*emulatedExecutable);
  both.cpuArguments = initialArguments(plan);
  for (const rt::Tensor& argument : both.cpuArguments)
    both.emulatedArguments.push_back(*argument.clone());
  return both;
}

/// Every result and every piece of state within `slack` times DESIGN's
/// tolerance of the CPU's (a GEMM's K of 784 and the steps the difference
/// has to grow over set the slack), for the precision the step computes in:
/// the GEMMs sum in another order than the CPU's, so a low-precision
/// gradient may round to the neighbouring value, and the f32 state it
/// updates differs by that much.
void expectStateAgrees(const BothSteps& both, const std::vector<rt::Tensor>& cpuResults,
                       const std::vector<rt::Tensor>& emulatedResults, double slack, rt::DType computedIn,
                       const std::string& what) {
  ASSERT_EQ(cpuResults.size(), emulatedResults.size()) << what;
  for (size_t k = 0; k < cpuResults.size(); ++k)
    EXPECT_TRUE(rt::gputest::allClose(cpuResults[k], emulatedResults[k], slack, computedIn))
        << what << ", result " << k;
  for (size_t k = 0; k < both.cpuArguments.size(); ++k)
    EXPECT_TRUE(rt::gputest::allClose(both.cpuArguments[k], both.emulatedArguments[k], slack, computedIn))
        << what << ", argument " << k;
}

TEST(EmulatedStep, TheMnistStepOnTheCudaPathMatchesTheCpuAtEveryLevel) {
  std::unique_ptr<rt::Backend> cpu = rt::createCpuBackend();
  EmulatedCudaBackend emulated;
  struct Setting {
    const char* options;
    rt::DType computedIn;
  };
  for (auto [options, computedIn] :
       {Setting{"level=O0", rt::DType::F32}, Setting{"level=O1 dtype=f16", rt::DType::F16},
        Setting{"level=O1 dtype=bf16", rt::DType::BF16}, Setting{"level=O2 dtype=f16", rt::DType::F16},
        Setting{"level=O2 dtype=bf16", rt::DType::BF16}}) {
    SCOPED_TRACE(options);
    rt::Plan plan = cudaPipelineMnistStep(options);
    ASSERT_FALSE(plan.steps.empty());
    BothSteps both = prepareBoth(plan, *cpu, emulated);
    ASSERT_TRUE(both.cpu && both.emulated);
    size_t gemms = 0;
    for (const rt::Step& step : plan.steps)
      gemms += step.kind == rt::StepKind::Gemm;
    for (int step = 0; step < 3; ++step) {
      rt::Expected<std::vector<rt::Tensor>> cpuResults = both.cpu->run(both.cpuArguments);
      ASSERT_TRUE(cpuResults.ok()) << cpuResults.message();
      rt::Expected<std::vector<rt::Tensor>> emulatedResults = both.emulated->run(both.emulatedArguments);
      ASSERT_TRUE(emulatedResults.ok()) << emulatedResults.message();
      expectStateAgrees(both, *cpuResults, *emulatedResults, 16.0, computedIn,
                        std::string(options) + ", step " + std::to_string(step));
    }
    // Everything ran on the emulated device path, the GEMMs through the
    // backend's GemmStep on the cuBLASLt model.
    const EmulationCounts& counts = EmulatedCudaBackend::countsOf(*both.emulated);
    EXPECT_EQ(counts.libraryStandIns, 0);
    EXPECT_EQ(size_t(counts.gemmSteps), gemms);
    EXPECT_GT(counts.generatedLaunches, 0);
    EXPECT_GT(counts.handwrittenLaunches, 0);
    EXPECT_EQ(size_t(counts.handwrittenLaunches + counts.generatedLaunches + counts.gemmSteps),
              rt::cuda::launchGroups(plan).size());
    EXPECT_EQ(both.emulatedArguments[kSkippedSteps].at(0), 0.0);
  }
}

TEST(EmulatedStep, AnInjectedInfSkipsTheStepOnTheCudaPath) {
  std::unique_ptr<rt::Backend> cpu = rt::createCpuBackend();
  EmulatedCudaBackend emulated;
  for (const char* options : {"level=O1 dtype=f16", "level=O2 dtype=f16"}) {
    SCOPED_TRACE(options);
    rt::Plan plan = cudaPipelineMnistStep(options);
    BothSteps both = prepareBoth(plan, *cpu, emulated);
    ASSERT_TRUE(both.emulated);
    ASSERT_TRUE(both.emulated->run(both.emulatedArguments).ok());
    std::vector<std::vector<std::byte>> before = ampjit::testing::snapshot(both.emulatedArguments);
    both.emulatedArguments[kImages].set(0, std::numeric_limits<double>::infinity());
    rt::Expected<std::vector<rt::Tensor>> skipped = both.emulated->run(both.emulatedArguments);
    ASSERT_TRUE(skipped.ok()) << skipped.message();
    std::vector<std::vector<std::byte>> after = ampjit::testing::snapshot(both.emulatedArguments);
    for (size_t index = kFirstParam; index < kLearningRate; ++index)
      EXPECT_EQ(before[index], after[index]) << "argument " << index << " changed on a skipped step";
    EXPECT_EQ(both.emulatedArguments[kScale].at(0), 32768.0);
    EXPECT_EQ(both.emulatedArguments[kGoodSteps].at(0), 0.0);
    EXPECT_EQ(both.emulatedArguments[kSkippedSteps].at(0), 1.0);
  }
}

TEST(EmulatedStep, AResNetStepOnTheCudaPathMatchesTheCpu) {
  // torchvision's ResNet-18 (ImageNet stem: its max pool) on 32x32 images,
  // traced and compiled as jit::trace compiles for CUDA at O1-f16 (kept
  // parameter casts, NHWC, fused batch-norm tails), the update not deferred
  // (the emulation runs no side stream). Convolutions and batch norms run
  // the CPU's kernels, standing in for cuDNN; the classifier's GEMMs run on
  // the cuBLASLt model; the layout moves, the pooling, every fused tail, the
  // loss, the scaler and the updates are emulated.
  jit::Generator generator(3);
  auto model = jit::nn::resnet18({.num_classes = 10, .init = {.generator = &generator}});
  rt::Plan plan = ampjit::testing::cudaResNetStepPlan(model, generator, /*deferUpdates=*/false);
  ASSERT_FALSE(plan.steps.empty());
  size_t pools = 0, gemms = 0, library = 0;
  for (const rt::Step& s : plan.steps) {
    pools += s.kind == rt::StepKind::MaxPool2d || s.kind == rt::StepKind::MaxPool2dGrad;
    gemms += s.kind == rt::StepKind::Gemm;
    library += s.kind == rt::StepKind::Conv2d ||
               s.kind == rt::StepKind::Conv2dGradInput || s.kind == rt::StepKind::Conv2dGradWeight ||
               s.kind == rt::StepKind::BatchNorm || s.kind == rt::StepKind::BatchNormGrad;
  }
  ASSERT_EQ(pools, 2u) << "the stem's max pool and its gradient";

  std::unique_ptr<rt::Backend> cpu = rt::createCpuBackend();
  EmulatedCudaBackend emulated;
  rt::Expected<std::unique_ptr<rt::Executable>> cpuStep = cpu->prepare(plan);
  ASSERT_TRUE(cpuStep.ok()) << cpuStep.message();
  rt::Expected<std::unique_ptr<rt::Executable>> emulatedStep = emulated.prepare(plan);
  ASSERT_TRUE(emulatedStep.ok()) << emulatedStep.message();
  // Random state in [-1, 1), with the f16 parameter copies derived from it.
  std::vector<rt::Tensor> cpuArguments = rt::gputest::randomArguments(plan, 7), emulatedArguments;
  ASSERT_TRUE(rt::rederiveArguments(plan, cpuArguments).ok());
  for (const rt::Tensor& argument : cpuArguments)
    emulatedArguments.push_back(*argument.clone());
  for (int run = 0; run < 2; ++run) {
    rt::Expected<std::vector<rt::Tensor>> cpuResults = (*cpuStep)->run(cpuArguments);
    ASSERT_TRUE(cpuResults.ok()) << cpuResults.message();
    rt::Expected<std::vector<rt::Tensor>> emulatedResults = (*emulatedStep)->run(emulatedArguments);
    ASSERT_TRUE(emulatedResults.ok()) << emulatedResults.message();
    // The stand-ins compute alike; what differs is the emulated kernels' and
    // the cuBLASLt model's summation order and host exp, carried through a
    // second step's convolutions.
    for (size_t k = 0; k < cpuResults->size(); ++k)
      EXPECT_TRUE(rt::gputest::allClose((*cpuResults)[k], (*emulatedResults)[k], 64.0))
          << "run " << run << ", result " << k;
    for (size_t k = 0; k < cpuArguments.size(); ++k)
      EXPECT_TRUE(rt::gputest::allClose(cpuArguments[k], emulatedArguments[k], 64.0))
          << "run " << run << ", argument " << k;
  }
  const EmulationCounts& counts = EmulatedCudaBackend::countsOf(**emulatedStep);
  EXPECT_EQ(size_t(counts.libraryStandIns), library);
  EXPECT_GT(gemms, 0u);
  EXPECT_EQ(size_t(counts.gemmSteps), gemms);
  EXPECT_GT(counts.generatedLaunches, 0);
  EXPECT_GT(counts.handwrittenLaunches, int64_t(pools));
}

} // namespace
} // namespace ampjit::emulation
