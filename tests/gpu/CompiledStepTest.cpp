//===- CompiledStepTest.cpp - traced train steps on the GPU vs the CPU ----===//
//
// The classifier's whole traced step (forward, backward, scaler, SGD) compiled
// for the CUDA backend against the same step compiled for the CPU backend, at
// O0, O1 and O2 with f16 and bf16; and an injected inf skipping the step on
// the device, state left bit for bit; a checkpoint of device-resident state
// resuming bit for bit; an eval step seeing the weights the train step wrote. Skipped without a device. Built with
// AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME (tests/unit/cuda), jit::trace runs on
// the CUDA backend over the emulated runtime (tests/emulation) in CI, its
// convolutions and batch norms on the host model of cuDNN.
//
//===----------------------------------------------------------------------===//

#include "ClassifierNet.h"
#include "ElementwiseOptimizerChoices.h"
#include "FrontendTestUtil.h"
#include "ResNetTrainer.h"
#include "ScopedEnvironment.h"
#include "TemporaryDirectory.h"
#include "TinyGpt.h"
#include "TokenClassifier.h"
#include "TwoNetworkGan.h"

#include "CudaDevice.h"
#include "jit/cuda.h"
#include "jit/trace.h"

#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
#include "EmulatedCudnn.h"
#include "EmulatedStreams.h"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>


namespace jit::testing {
namespace {

constexpr int64_t kIn = 64, kHidden = 96, kClasses = 10, kBatch = 32;

#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
// Reported apart from the device runs of the same tests.
#define CompiledStepOnGpu CompiledStepOnEmulatedRuntime
#endif
class CompiledStepOnGpu : public ::testing::Test {
protected:
  void SetUp() override {
    if (!cuda::is_available())
      GTEST_SKIP() << "no CUDA device";
  }
};

struct Level {
  amp::Level level;
  DType dtype;
};

/// Traces `onCpu(x, y)` and `onGpu(x, y)` (two copies of one model) at
/// `level` in f16 on the two backends and expects each of `calls` losses on
/// batches from `batchAt(i)` within `slack` f16 roundings of the CPU's.
template <typename CpuStep, typename GpuStep, typename BatchAt>
void expectGpuLossesTrackTheCpu(amp::Level level, CpuStep onCpu, GpuStep onGpu, BatchAt batchAt, int calls,
                                double slack = 4.0) {
  TraceOptions options{.amp = {.level = level, .dtype = f16}, .backend = Backend::cpu};
  auto cpuStep = trace([&](const Tensor& x, const Tensor& y) { return onCpu(x, y); }, options);
  options.backend = Backend::cuda;
  auto gpuStep = trace([&](const Tensor& x, const Tensor& y) { return onGpu(x, y); }, options);
  for (int i = 0; i < calls; ++i) {
    auto [x, y] = batchAt(uint64_t(i));
    expectClose({gpuStep(x, y).item()}, {cpuStep(x, y).item()},
                ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F16), slack),
                "loss of call " + std::to_string(i));
  }
}

/// `onCpu.step` and `onGpu.step` (two copies of one model) traced under
/// `options` on the CPU backend and on CUDA.
template <typename Net> auto traceOnCpuAndGpu(Net& onCpu, Net& onGpu, TraceOptions options = {}) {
  options.backend = Backend::cpu;
  auto cpuStep = trace([&onCpu](const Tensor& x, const Tensor& y) { return onCpu.step(x, y); }, options);
  options.backend = Backend::cuda;
  auto gpuStep = trace([&onGpu](const Tensor& x, const Tensor& y) { return onGpu.step(x, y); }, options);
  return std::pair{std::move(cpuStep), std::move(gpuStep)};
}

/// A classifier trained on the device against its twin on the CPU. stateOf
/// alternates each parameter and its momentum buffer, then the scaler's
/// state. The parameters agree element by element. The momentum buffers,
/// sums of the gradients, agree in norm: the CUDA pipeline's GEMM epilogues
/// add the bias and apply ReLU before the one rounding, the CPU's plan rounds
/// in between, so a pre-activation within an ulp of zero can be ReLU'd away
/// in one and not the other, and that unit's whole row of its layer's weight
/// gradient moves for that sample (about one such unit per layer and step at
/// f16, several at bf16: the buffers then differ by 0.9% (f16) and 5.7%
/// (bf16) in norm, while compiled unfused, as under AMPJIT_CHECK_NUMERICS,
/// they differ by 1e-5 or not at all). The scaler's state is exact.
void expectTrainedAlike(Classifier& onGpu, Classifier& onCpu, Tolerance tolerance) {
  std::vector<std::vector<double>> cpuState = stateOf(onCpu), gpuState = stateOf(onGpu);
  ASSERT_EQ(cpuState.size(), gpuState.size());
  for (size_t i = 0; i + 1 < cpuState.size(); ++i) {
    std::string what = "state " + std::to_string(i);
    if (i % 2 == 0)
      expectClose(gpuState[i], cpuState[i], ampjit::testing::scaled(tolerance, 64.0), what);
    else
      expectCloseInNorm(gpuState[i], cpuState[i], ampjit::testing::scaled(tolerance, 32.0), what);
  }
  EXPECT_EQ(cpuState.back(), gpuState.back()) << "scaler state";
}


TEST_F(CompiledStepOnGpu, ThePreferredDtypeIsTheDevicesAndTrainsWithoutAScaleThere) {
  std::string architecture = detail::sharedCudaBackend("the test")->architecture();
  ASSERT_EQ(architecture.rfind("sm_", 0), 0u) << architecture;
  DType expected = std::stoi(architecture.substr(3)) >= 80 ? bf16 : f16;
  DType preferred = amp::preferred_dtype(Backend::cuda);
  EXPECT_EQ(preferred, expected) << architecture;
  // Automatic resolves to the device here, as jit::trace does.
  EXPECT_EQ(amp::preferred_dtype(), preferred);
  amp::Policy policy{.level = amp::O1, .dtype = preferred};
  Classifier onCpu(kIn, kHidden, kClasses, 3), onGpu(kIn, kHidden, kClasses, 3);
  onCpu.scaler = amp::GradScaler(policy);
  onGpu.scaler = amp::GradScaler(policy);
  auto [cpuStep, gpuStep] = traceOnCpuAndGpu(onCpu, onGpu, {.amp = policy});
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 40 + i);
    expectClose({gpuStep(x, y).item()}, {cpuStep(x, y).item()},
                ampjit::testing::scaled(toleranceFor(preferred == bf16 ? ampjit::runtime::DType::BF16
                                                                       : ampjit::runtime::DType::F16),
                                        4.0),
                "loss of call " + std::to_string(i));
  }
  EXPECT_EQ(onGpu.scaler.get_scale(), preferred == bf16 ? 1.0 : 65536.0);
}

TEST_F(CompiledStepOnGpu, ClassifierStepMatchesTheCpuStepAtEveryLevel) {
  for (Level config : {Level{amp::O0, f32}, Level{amp::O1, f16}, Level{amp::O1, bf16}, Level{amp::O2, f16},
                       Level{amp::O2, bf16}}) {
    SCOPED_TRACE(std::string(amp::level_name(config.level)) + " " + std::string(dtype_name(config.dtype)));
    Classifier onCpu(kIn, kHidden, kClasses, 3), onGpu(kIn, kHidden, kClasses, 3);
    amp::Policy policy{.level = config.level, .dtype = config.dtype};
    auto [cpuStep, gpuStep] = traceOnCpuAndGpu(onCpu, onGpu, {.amp = policy});
    // Results are rounded to the low-precision type where AMP put it; GEMMs
    // sum in a different order on the device.
    Tolerance tolerance = toleranceFor(config.level == amp::O0 ? ampjit::runtime::DType::F32
                                       : config.dtype == f16   ? ampjit::runtime::DType::F16
                                                               : ampjit::runtime::DType::BF16);
    for (int stepIndex = 0; stepIndex < 4; ++stepIndex) {
      auto [x, y] = batch(kBatch, kIn, kClasses, 40 + uint64_t(stepIndex));
      double cpuLoss = cpuStep(x, y).item();
      double gpuLoss = gpuStep(x, y).item();
      expectClose({gpuLoss}, {cpuLoss}, ampjit::testing::scaled(tolerance, 8.0 * (stepIndex + 1)),
                  "loss of step " + std::to_string(stepIndex));
    }
    expectTrainedAlike(onGpu, onCpu, tolerance);
    EXPECT_EQ(gpuStep.stats().traces, 1u);
  }
}

TEST_F(CompiledStepOnGpu, AUsersOwnAutocastAndAnF16BatchTrackTheCpuAtO1AndO2) {
  // A PyTorch user's step as written, autocast around the forward inside the
  // traced function, on f16 batches: the trace holds the user's f16 values
  // and their conversions before AMP decides anything, and the device runs
  // what the CPU runs.
  for (amp::Level level : {amp::O1, amp::O2}) {
    SCOPED_TRACE(amp::level_name(level));
    Classifier onCpu(kIn, kHidden, kClasses, 3), onGpu(kIn, kHidden, kClasses, 3);
    expectGpuLossesTrackTheCpu(
        level, [&](const Tensor& x, const Tensor& y) { return onCpu.autocastStep(x, y); },
        [&](const Tensor& x, const Tensor& y) { return onGpu.autocastStep(x, y); },
        [](uint64_t call) {
          auto [x, y] = batch(kBatch, kIn, kClasses, 60 + call);
          return std::pair{x.to(f16), y};
        },
        3);
    expectTrainedAlike(onGpu, onCpu, toleranceFor(ampjit::runtime::DType::F16));
  }
}

TEST_F(CompiledStepOnGpu, DeferredUpdateGivesTheSameBitsAsTheUndeferredStep) {
  for (Level config : {Level{amp::O1, f16}, Level{amp::O2, f16}, Level{amp::O2, bf16}}) {
    SCOPED_TRACE(std::string(amp::level_name(config.level)) + " " + std::string(dtype_name(config.dtype)));
    Classifier deferredNet(kIn, kHidden, kClasses, 3), plainNet(kIn, kHidden, kClasses, 3);
    amp::Policy policy{.level = config.level, .dtype = config.dtype};
    auto deferred = trace([&](const Tensor& x, const Tensor& y) { return deferredNet.step(x, y); },
                          {.amp = policy, .backend = Backend::cuda, .defer_updates = DeferUpdates::on});
    auto plain = trace([&](const Tensor& x, const Tensor& y) { return plainNet.step(x, y); },
                       {.amp = policy, .backend = Backend::cuda, .defer_updates = DeferUpdates::off});
    // The same kernels on the same shapes: only where the update runs differs.
    for (int stepIndex = 0; stepIndex < 6; ++stepIndex) {
      auto [x, y] = batch(kBatch, kIn, kClasses, 60 + uint64_t(stepIndex));
      EXPECT_EQ(deferred(x, y).item(), plain(x, y).item()) << "loss of step " << stepIndex;
      if (stepIndex == 2) { // a host read in the middle completes the update
        EXPECT_EQ(stateOf(deferredNet), stateOf(plainNet)) << "after step 2";
      }
    }
    EXPECT_NE(deferred.plan_text().find("deferred steps"), std::string::npos);
    EXPECT_EQ(stateOf(deferredNet), stateOf(plainNet));
  }
}

/// A small ResNet-18 (CIFAR stem, widths 4-32: every batch norm's channel
/// count a multiple of 4). The lr is small and the images 16x16, so the last
/// stage's batch norms see 4x2x2 values each: with 8x8 images they saw 4, an
/// ill-conditioned step in which scaling the input by 1 + 1e-3 moved the
/// CPU's own bf16 second loss by 19%, as far as the device's (found on the
/// emulated runtime). The scaler starts at 2^10, where no f16 gradient
/// overflows: at 2^16 every f16 step was skipped, on both backends.
constexpr double kResNetInitialScale = 1024.0;
ResNetTrainer smallResNet(Generator& generator) {
  return ResNetTrainer({.num_classes = 4, .stem = nn::ResNetOptions::Stem::cifar, .base_width = 4,
                        .init = {.generator = &generator}},
                       {.init_scale = kResNetInitialScale}, /*lr=*/5e-4);
}

TEST_F(CompiledStepOnGpu, ResNetStepWithFusedBatchNormsMatchesTheCpuStep) {
  // On CUDA the step is NHWC with its batch-norm tails fused (cuDNN's fused
  // calls for f16, the fallback kernels otherwise); on the CPU it is NCHW and
  // unfused. Three steps under AMPJIT_CUDA_FUSED_BN=1 and =0.
  for (const char* fusedCalls : {"1", "0"})
    for (Level config : {Level{amp::O0, f32}, Level{amp::O1, f16}, Level{amp::O1, bf16}}) {
      ampjit::testing::ScopedEnvironment fused("AMPJIT_CUDA_FUSED_BN", fusedCalls);
      SCOPED_TRACE(std::string(amp::level_name(config.level)) + " " + std::string(dtype_name(config.dtype)) +
                   " AMPJIT_CUDA_FUSED_BN=" + fusedCalls);
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
      int64_t fusedBefore = ampjit::emulation::cudnnCounts().fusedBatchNorms;
#endif
      Generator first(9), second(9);
      ResNetTrainer onCpu = smallResNet(first), onGpu = smallResNet(second);
      amp::Policy policy{.level = config.level, .dtype = config.dtype};
      auto [cpuStep, gpuStep] = traceOnCpuAndGpu(onCpu, onGpu, {.amp = policy});
      Generator data(31);
      std::vector<double> pixels(4 * 3 * 16 * 16);
      for (double& pixel : pixels)
        pixel = data.next_normal();
      Tensor x = tensor(std::span<const double>(pixels), {4, 3, 16, 16});
      Tensor y = tensor(std::vector<int64_t>{0, 1, 2, 3}, {4});
      std::vector<double> gpuLosses;
      for (int stepIndex = 0; stepIndex < 3; ++stepIndex) {
        double cpuLoss = cpuStep(x, y).item();
        double gpuLoss = gpuStep(x, y).item();
        gpuLosses.push_back(gpuLoss);
        // Convolutions and batch-norm sums run in another order on the
        // device, and every block's epilogue rounds once instead of twice
        // (on the CPU, fused and unfused first losses differ by ~1% in bf16).
        double relative = config.level == amp::O0 ? 1e-3 : config.dtype == bf16 ? 4e-2 : 1e-2;
        EXPECT_NEAR(gpuLoss, cpuLoss, relative * std::fabs(cpuLoss)) << "step " << stepIndex;
      }
      // Every step was taken, and trained.
      EXPECT_EQ(onGpu.scaler.get_scale(), kResNetInitialScale);
      EXPECT_LT(gpuLosses.back(), gpuLosses.front());
      EXPECT_EQ(gpuStep.stats().traces, 1u);
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
      // cuDNN's fused calls ran exactly where they apply.
      bool fusedPath = config.dtype == f16 && std::string(fusedCalls) == "1";
      EXPECT_EQ(ampjit::emulation::cudnnCounts().fusedBatchNorms > fusedBefore, fusedPath);
#endif
    }
}

/// What a traced step left after some calls, to compare two runs of it.
struct StepsTrail {
  std::vector<double> losses;
  std::vector<std::vector<double>> state;
  size_t sideSteps = 0, graphReplays = 0;
  std::string graphDisabledReason;
};

/// Runs `makeAndRun(inLine)` with AMPJIT_CUDA_SIDE_STEPS_IN_LINE=0 and =1 and
/// expects the same losses and state (bit for bit on the emulated runtime,
/// where cuDNN's model and cuBLASLt's sum in one order; on a GPU, filter
/// gradients may add in any order), side steps only where allowed.
template <typename MakeAndRun>
void expectSideStepsGiveTheBitsInLine(MakeAndRun makeAndRun, size_t minimumSideSteps) {
  StepsTrail runs[2];
  for (int inLine = 0; inLine < 2; ++inLine) {
    ampjit::testing::ScopedEnvironment environment("AMPJIT_CUDA_SIDE_STEPS_IN_LINE", inLine ? "1" : "0");
    runs[inLine] = makeAndRun();
  }
  EXPECT_GE(runs[0].sideSteps, minimumSideSteps);
  EXPECT_EQ(runs[1].sideSteps, 0u);
  // The side stream's forks and joins capture into one graph, replayed.
  for (const StepsTrail& run : runs) {
    EXPECT_EQ(run.graphDisabledReason, "");
    EXPECT_GE(run.graphReplays, 2u);
  }
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
  EXPECT_EQ(runs[0].losses, runs[1].losses);
  EXPECT_TRUE(runs[0].state == runs[1].state) << "the state after the calls differs";
#else
  for (size_t call = 0; call < runs[0].losses.size(); ++call)
    EXPECT_NEAR(runs[0].losses[call], runs[1].losses[call], 1e-2 * std::fabs(runs[1].losses[call])) << call;
#endif
}

TEST_F(CompiledStepOnGpu, WeightGradientsBesideTheBackwardGiveTheBitsOfTheStepInLine) {
  // Weight gradients run on the side stream, each joined a few steps later
  // (codegen's overlapWeightGradients); with AMPJIT_CUDA_SIDE_STEPS_IN_LINE=1
  // the same plan runs them in line. Four calls each: the first step by
  // step, then captured and replayed. On the emulated runtime every run's
  // streams interleave in another random order, so a join missing or placed
  // late reads or overwrites bytes that another step owns by then.
  {
    SCOPED_TRACE("ResNet-18, O1 f16: its convolutions' filter gradients and its fc layer's");
    expectSideStepsGiveTheBitsInLine(
        [] {
          StepsTrail trail;
          Generator generator(9);
          ResNetTrainer net = smallResNet(generator);
          auto step = trace([&](const Tensor& x, const Tensor& y) { return net.step(x, y); },
                            {.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cuda});
          Generator data(31);
          for (int call = 0; call < 4; ++call) {
            std::vector<double> pixels(4 * 3 * 16 * 16);
            for (double& pixel : pixels)
              pixel = data.next_normal();
            Tensor x = tensor(std::span<const double>(pixels), {4, 3, 16, 16});
            trail.losses.push_back(step(x, tensor(std::vector<int64_t>{0, 1, 2, 3}, {4})).item());
          }
          trail.state = net.state();
          trail.sideSteps = step.stats().device_side_steps_per_step;
          trail.graphReplays = step.stats().device_graph_replays;
          trail.graphDisabledReason = step.stats().device_graph_disabled_reason;
          EXPECT_EQ(net.scaler.get_scale(), kResNetInitialScale) << "a step was skipped";
          return trail;
        },
        // ResNet-18's 20 filter gradients and the fc layer's, but one whose
        // join would come right after it.
        20);
  }
  for (Level config : {Level{amp::O1, f16}, Level{amp::O2, bf16}}) {
    SCOPED_TRACE(std::string("the classifier, ") + std::string(amp::level_name(config.level)) + " " +
                 std::string(dtype_name(config.dtype)) + ": its GEMMs' weight gradients");
    expectSideStepsGiveTheBitsInLine(
        [&] {
          StepsTrail trail;
          Classifier net(kIn, kHidden, kClasses, 3);
          auto step = trace([&](const Tensor& x, const Tensor& y) { return net.step(x, y); },
                            {.amp = {.level = config.level, .dtype = config.dtype}, .backend = Backend::cuda});
          for (int call = 0; call < 4; ++call) {
            auto [x, y] = batch(kBatch, kIn, kClasses, 40 + uint64_t(call));
            trail.losses.push_back(step(x, y).item());
          }
          trail.state = stateOf(net);
          trail.sideSteps = step.stats().device_side_steps_per_step;
          trail.graphReplays = step.stats().device_graph_replays;
          trail.graphDisabledReason = step.stats().device_graph_disabled_reason;
          return trail;
        },
        // Three layers: the first layer's weight gradient is the backward's
        // last GEMM, right before the check, so it stays in line.
        2);
  }
}

TEST_F(CompiledStepOnGpu, AnInjectedInfSkipsTheStepOnTheDevice) {
  Classifier net(kIn, kHidden, kClasses, 3, {.growth_interval = 2});
  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); },
                    {.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cuda});
  auto [x, y] = batch(kBatch, kIn, kClasses, 5);
  step(x, y);
  std::vector<std::vector<double>> before = stateOf(net);
  EXPECT_EQ(net.scaler.get_scale(), 65536.0);

  step(withInfAt(x, 3), y);
  // The scaler's state read without waiting for the step: on the emulated
  // runtime, asking runs nothing; what arrives is the skipped step's.
  amp::GradScaler::StateTensors state = net.scaler.state_tensors();
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
  uint64_t ranBefore = ampjit::emulation::operationsRun();
#endif
  cuda::HostCopy finite = cuda::copy_to_host_async(state.last_step_finite),
                 skipped = cuda::copy_to_host_async(state.skipped_steps),
                 scale = cuda::copy_to_host_async(state.scale);
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
  EXPECT_EQ(ampjit::emulation::operationsRun(), ranBefore) << "asking for the scaler's state waited for the GPU";
#endif
  EXPECT_EQ(finite.item(), 0.0);
  EXPECT_EQ(skipped.item(), 1.0);
  EXPECT_EQ(scale.item(), 32768.0);
  std::vector<std::vector<double>> after = stateOf(net);
  for (size_t i = 0; i + 1 < after.size(); ++i)
    EXPECT_EQ(after[i], before[i]) << "state " << i << " changed on a skipped step";
  EXPECT_EQ(net.scaler.get_scale(), 32768.0);
  EXPECT_EQ(net.scaler.skipped_steps(), 1);
  EXPECT_TRUE(net.scaler.found_inf());

  step(x, y);
  EXPECT_NE(stateOf(net)[0], before[0]) << "a clean step updates again";
  EXPECT_FALSE(net.scaler.found_inf());
}

TEST_F(CompiledStepOnGpu, AScalerThatNeverDropsAnUpdateTracksTheCpuAndAppliesAnOverflowOnTheDevice) {
  // MindSpore's FixedLossScaleManager(drop_overflow_update=False): the step
  // has no check and no predicate, and the device applies what the CPU does.
  amp::GradScalerOptions never{.dynamic = false, .drop_overflow_update = false, .init_scale = 1024.0};
  Classifier onCpu(kIn, kHidden, kClasses, 3, never), onGpu(kIn, kHidden, kClasses, 3, never);
  auto [cpuStep, gpuStep] = traceOnCpuAndGpu(onCpu, onGpu, {.amp = {.level = amp::O1, .dtype = f16}});
  auto [x, y] = batch(kBatch, kIn, kClasses, 5);
  Tolerance f16 = toleranceFor(ampjit::runtime::DType::F16);
  for (int call = 0; call < 2; ++call)
    expectClose({gpuStep(x, y).item()}, {cpuStep(x, y).item()}, ampjit::testing::scaled(f16, 4.0),
                "loss of call " + std::to_string(call));
  const std::vector<Tensor>& cpuParams = onCpu.model.parameters();
  const std::vector<Tensor>& gpuParams = onGpu.model.parameters();
  for (size_t i = 0; i < cpuParams.size(); ++i)
    expectClose(gpuParams[i].to_vector(), cpuParams[i].to_vector(), ampjit::testing::scaled(f16, 64.0),
                "parameter " + std::to_string(i));

  // The inf reaches the first layer's weight gradient (inf * 0 is NaN) on
  // both. Which later parameters go NaN differs: cuBLASLt's ReLU epilogue
  // turns a NaN into 0 where the CPU's relu keeps it
  // (GpuTest.TheReluBiasEpilogueTurnsANanIntoZeroWhereTheCpusReluKeepsIt),
  // so the device's deeper layers take a finite update.
  std::vector<std::vector<double>> before;
  for (const Tensor& param : gpuParams)
    before.push_back(param.to_vector());
  Tensor poisoned = withInfAt(x, 3);
  gpuStep(poisoned, y);
  cpuStep(poisoned, y);
  auto nonFinite = [](const Tensor& values) {
    std::vector<double> all = values.to_vector();
    return std::count_if(all.begin(), all.end(), [](double value) { return !std::isfinite(value); });
  };
  EXPECT_GT(nonFinite(gpuParams[0]), 0);
  EXPECT_GT(nonFinite(cpuParams[0]), 0);
  for (size_t i = 0; i < gpuParams.size(); ++i)
    EXPECT_NE(gpuParams[i].to_vector(), before[i]) << "parameter " << i << " was not updated";
  EXPECT_EQ(onGpu.scaler.skipped_steps(), 0);
  EXPECT_EQ(onGpu.scaler.get_scale(), 1024.0);
  EXPECT_EQ(gpuStep.stats().traces, 1u);
}

TEST_F(CompiledStepOnGpu, GradientsAccumulatedOverTwoTracedFunctionsMatchTheCpu) {
  // The README's gradient accumulation at O1-f16: `accumulate` adds each
  // micro-batch's scaled gradients into state, `apply` steps the scaler and
  // the optimizer and zeroes them in place. On the device the gradients stay
  // device state between the two functions' graphs. Round 1's second
  // micro-batch overflows: that round is skipped on both backends.
  Classifier onCpu(kIn, kHidden, kClasses, 3), onGpu(kIn, kHidden, kClasses, 3);
  auto traceBoth = [](Classifier& net, Backend backend) {
    TraceOptions options{.amp = {.level = amp::O1, .dtype = f16}, .backend = backend, .log_retraces = false};
    options.name = "accumulate";
    auto accumulate = trace([&net](const Tensor& x, const Tensor& y) { return accumulateGradients(net, x, y); },
                            options);
    options.name = "apply";
    auto apply = trace([&net]() { applyGradients(net); }, options);
    return std::pair{std::move(accumulate), std::move(apply)};
  };
  auto [cpuAccumulate, cpuApply] = traceBoth(onCpu, Backend::cpu);
  auto [gpuAccumulate, gpuApply] = traceBoth(onGpu, Backend::cuda);
  Tolerance tolerance = toleranceFor(ampjit::runtime::DType::F16);
  for (uint64_t round = 0; round < 3; ++round) {
    for (uint64_t micro = 0; micro < 2; ++micro) {
      auto [x, y] = batch(kBatch, kIn, kClasses, 60 + 10 * round + micro);
      if (round == 1 && micro == 1) {
        x = withInfAt(x, 7);
      }
      double cpuLoss = cpuAccumulate(x, y).item(), gpuLoss = gpuAccumulate(x, y).item();
      if (std::isfinite(cpuLoss))
        expectClose({gpuLoss}, {cpuLoss}, ampjit::testing::scaled(tolerance, 8.0 * double(round + 1)),
                    "round " + std::to_string(round) + " micro-batch " + std::to_string(micro));
    }
    cpuApply();
    gpuApply();
    EXPECT_EQ(onGpu.scaler.found_inf(), round == 1) << "round " << round;
    EXPECT_EQ(onCpu.scaler.found_inf(), round == 1) << "round " << round;
  }
  EXPECT_EQ(onGpu.scaler.skipped_steps(), 1);
  EXPECT_EQ(onGpu.scaler.get_scale(), onCpu.scaler.get_scale());
  Classifier untrained(kIn, kHidden, kClasses, 3);
  EXPECT_NE(stateOf(onGpu)[0], stateOf(untrained)[0]) << "the clean rounds updated the weights";
  expectTrainedAlike(onGpu, onCpu, tolerance);
  for (const Tensor& parameter : onGpu.model.parameters())
    for (double value : parameter.grad().to_vector())
      ASSERT_EQ(value, 0.0) << "apply zeroes the accumulated gradients in place";
  EXPECT_EQ(gpuAccumulate.stats().traces, 2u) << "once without gradients to add into, once with";
  EXPECT_EQ(gpuApply.stats().traces, 1u);
}

TEST_F(CompiledStepOnGpu, AnLrScheduleReachesTheCapturedGraphWithoutARecapture) {
  // StepLR writes the lr tensor from the host between calls: the write lands
  // in the lr's device tensor, which the captured graph reads, so the step
  // follows the schedule as the CPU step does and the graph is captured once.
  Classifier onCpu(kIn, kHidden, kClasses, 3), onGpu(kIn, kHidden, kClasses, 3);
  optim::StepLR cpuSchedule(onCpu.opt, 2, 0.25), gpuSchedule(onGpu.opt, 2, 0.25);
  auto [cpuStep, gpuStep] = traceOnCpuAndGpu(onCpu, onGpu, {.amp = {.level = amp::O1, .dtype = f16}});
  Tolerance tolerance = toleranceFor(ampjit::runtime::DType::F16);
  for (int call = 0; call < 6; ++call) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 70 + uint64_t(call));
    double cpuLoss = cpuStep(x, y).item(), gpuLoss = gpuStep(x, y).item();
    expectClose({gpuLoss}, {cpuLoss}, ampjit::testing::scaled(tolerance, 8.0 * (call + 1)),
                "loss of call " + std::to_string(call));
    cpuSchedule.step();
    gpuSchedule.step();
    EXPECT_EQ(onGpu.opt.lr().item(), onCpu.opt.lr().item()) << "after call " << call;
  }
  EXPECT_EQ(onGpu.opt.lr().item(), double(float(1e-2 * 0.25 * 0.25 * 0.25))) << "lr is an f32 tensor";
  expectTrainedAlike(onGpu, onCpu, tolerance);
  EXPECT_EQ(gpuStep.stats().traces, 1u);
  EXPECT_EQ(gpuStep.stats().device_graph_captures, 1u) << "an lr write must not recapture the graph";
}

TEST_F(CompiledStepOnGpu, ALastSmallerBatchRetracesAndBothVariantsShareTheDeviceState) {
  // An epoch's last batch is often smaller: the shape guard misses, the step
  // is traced and compiled again, and the two variants (two plans, two
  // graphs) then alternate on the same device-resident state.
  Classifier onCpu(kIn, kHidden, kClasses, 3), onGpu(kIn, kHidden, kClasses, 3);
  auto [cpuStep, gpuStep] =
      traceOnCpuAndGpu(onCpu, onGpu, {.amp = {.level = amp::O1, .dtype = f16}, .log_retraces = false});
  Tolerance tolerance = toleranceFor(ampjit::runtime::DType::F16);
  const int64_t sizes[] = {kBatch, kBatch, kBatch - 4, kBatch, kBatch, kBatch - 4, kBatch};
  for (size_t call = 0; call < std::size(sizes); ++call) {
    auto [x, y] = batch(sizes[call], kIn, kClasses, 80 + call);
    double cpuLoss = cpuStep(x, y).item(), gpuLoss = gpuStep(x, y).item();
    expectClose({gpuLoss}, {cpuLoss}, ampjit::testing::scaled(tolerance, 8.0 * double(call + 1)),
                "loss of call " + std::to_string(call));
  }
  expectTrainedAlike(onGpu, onCpu, tolerance);
  EXPECT_EQ(gpuStep.stats().traces, 2u);
  // The device stats are the variant's the last call ran: each captured its
  // graph once (at its second call, which launches it), and the small one's
  // third call replays it again.
  EXPECT_EQ(gpuStep.stats().device_graph_captures, 1u);
  auto [x, y] = batch(kBatch - 4, kIn, kClasses, 90);
  gpuStep(x, y);
  EXPECT_EQ(gpuStep.stats().device_graph_captures, 1u);
  EXPECT_EQ(gpuStep.stats().device_graph_replays, 2u);
  EXPECT_EQ(gpuStep.stats().traces, 2u);
}

TEST_F(CompiledStepOnGpu, ParameterGroupsAndKeptGradientsMatchTheCpu) {
  // Two SGD groups (weights with weight decay and momentum, biases with
  // neither and their own lr), and keep_grads: after each call the
  // gradients are device tensors the host reads back.
  struct Net {
    explicit Net(uint64_t seed)
        : generator(seed), model(nn::Linear(kIn, kHidden, true, {.generator = &generator}), nn::ReLU(),
                                 nn::Linear(kHidden, kClasses, true, {.generator = &generator})),
          opt({{.params = {model.parameters()[0], model.parameters()[2]}, .weight_decay = 1e-2},
               {.params = {model.parameters()[1], model.parameters()[3]}, .lr = 5e-2, .momentum = 0.0}},
              {.lr = 1e-2, .momentum = 0.9}) {}
    Tensor step(const Tensor& x, const Tensor& y) { return scaledTrainStep(model, opt, scaler, x, y); }
    Generator generator;
    nn::Sequential model;
    optim::SGD opt;
    amp::GradScaler scaler;
  };
  Net onCpu(5), onGpu(5);
  auto [cpuStep, gpuStep] =
      traceOnCpuAndGpu(onCpu, onGpu, {.amp = {.level = amp::O1, .dtype = f16}, .keep_grads = true});
  Tolerance tolerance = toleranceFor(ampjit::runtime::DType::F16);
  for (int call = 0; call < 4; ++call) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 100 + uint64_t(call));
    double cpuLoss = cpuStep(x, y).item(), gpuLoss = gpuStep(x, y).item();
    expectClose({gpuLoss}, {cpuLoss}, ampjit::testing::scaled(tolerance, 8.0 * (call + 1)),
                "loss of call " + std::to_string(call));
    for (size_t i = 0; i < onCpu.model.parameters().size(); ++i) {
      const Tensor &cpuGrad = onCpu.model.parameters()[i].grad(), &gpuGrad = onGpu.model.parameters()[i].grad();
      ASSERT_TRUE(cpuGrad.defined() && gpuGrad.defined()) << "keep_grads keeps parameter " << i << "'s gradient";
      expectCloseInNorm(gpuGrad.to_vector(), cpuGrad.to_vector(), ampjit::testing::scaled(tolerance, 32.0),
                        "gradient " + std::to_string(i) + " after call " + std::to_string(call));
    }
  }
  for (size_t i = 0; i < onCpu.model.parameters().size(); ++i)
    expectClose(onGpu.model.parameters()[i].to_vector(), onCpu.model.parameters()[i].to_vector(),
                ampjit::testing::scaled(tolerance, 64.0), "parameter " + std::to_string(i));
  EXPECT_EQ(onGpu.opt.lr(1).item(), double(float(5e-2)));
}

/// A GAN's whole step (GanWithTwoScalers's or GanWithOneScaler's) traced at O1 f16 on `backend`.
template <typename TwoLossGan>
auto ganStepOn(TwoLossGan& gan, Backend backend) {
  return trace(ganStepOf(gan), {.amp = {.level = amp::O1, .dtype = f16}, .backend = backend});
}

/// A GAN step's loss on the device against the CPU's, within f16's
/// tolerance grown with the calls before it.
template <typename Step>
void expectTheCpusLoss(const GanCall& inputs, Step& cpuStep, Step& gpuStep, size_t call) {
  double cpuLoss = inputs(cpuStep).item(), gpuLoss = inputs(gpuStep).item();
  expectClose({gpuLoss}, {cpuLoss}, ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F16), 8.0 * double(call + 1)),
              "loss");
}

/// Both networks' parameters after the calls, within 64 times f16's tolerance.
void expectTheCpusParameters(Gan& onGpu, Gan& onCpu) {
  std::vector<std::vector<double>> cpuState = onCpu.everything(), gpuState = onGpu.everything();
  for (size_t i = 0; i < cpuState.size(); ++i)
    expectClose(gpuState[i], cpuState[i], ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F16), 64.0),
                "parameter " + std::to_string(i));
}

TEST_F(CompiledStepOnGpu, AGanWithALossScalerPerNetworkMatchesTheCpu) {
  // Two scalers in one step, each network's loss overflowing on its own
  // calls: each scaler's skips and scale follow its own network on the
  // device as on the CPU, and the Adam and SGD updates agree.
  GanWithTwoScalers onCpu, onGpu;
  auto cpuStep = ganStepOn(onCpu, Backend::cpu), gpuStep = ganStepOn(onGpu, Backend::cuda);
  std::vector<std::pair<double, double>> factors = ganLossFactors();
  for (size_t call = 0; call < factors.size(); ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    GanCall inputs = ganCall(call, 300);
    expectTheCpusLoss(inputs, cpuStep, gpuStep, call);
    EXPECT_EQ(onGpu.scalerD.get_scale(), ganDiscriminatorScales()[call]);
    EXPECT_EQ(onGpu.scalerG.get_scale(), ganGeneratorScales()[call]);
    EXPECT_EQ(onGpu.scalerD.found_inf(onGpu.optD), factors[call].first != 1.0);
    EXPECT_EQ(onGpu.scalerG.found_inf(onGpu.optG), factors[call].second != 1.0);
  }
  EXPECT_EQ(onGpu.scalerD.skipped_steps(), onCpu.scalerD.skipped_steps());
  EXPECT_EQ(onGpu.scalerG.skipped_steps(), onCpu.scalerG.skipped_steps());
  EXPECT_EQ(onGpu.scalerD.growth_tracker(), onCpu.scalerD.growth_tracker());
  EXPECT_EQ(onGpu.scalerG.growth_tracker(), onCpu.scalerG.growth_tracker());
  expectTheCpusParameters(onGpu, onCpu);
  EXPECT_EQ(gpuStep.stats().traces, 1u);
}

TEST_F(CompiledStepOnGpu, AGanWithOneLossScalerForBothNetworksMatchesTheCpu) {
  // One scaler stepping both networks' optimizers: each skips on its own
  // overflow and each optimizer's flag is state the device writes.
  GanWithOneScaler onCpu, onGpu;
  auto cpuStep = ganStepOn(onCpu, Backend::cpu), gpuStep = ganStepOn(onGpu, Backend::cuda);
  std::vector<std::pair<double, double>> factors = ganLossFactors();
  for (size_t call = 0; call < factors.size(); ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    GanCall inputs = ganCall(call, 500);
    expectTheCpusLoss(inputs, cpuStep, gpuStep, call);
    EXPECT_EQ(onGpu.scaler.get_scale(), ganSharedScales()[call]);
    EXPECT_EQ(onGpu.scaler.found_inf(onGpu.optD), factors[call].first != 1.0);
    EXPECT_EQ(onGpu.scaler.found_inf(onGpu.optG), factors[call].second != 1.0);
  }
  EXPECT_EQ(onGpu.scaler.skipped_steps(), onCpu.scaler.skipped_steps());
  EXPECT_EQ(onGpu.scaler.growth_tracker(), onCpu.scaler.growth_tracker());
  expectTheCpusParameters(onGpu, onCpu);
  EXPECT_EQ(gpuStep.stats().traces, 1u);
}

TEST_F(CompiledStepOnGpu, AScaleSetFromTheCallersTensorIsCopiedOnTheDevice) {
  // scaler.update(new_scale) makes the scale state a copy of another argument,
  // a copy step at the end of the plan; each call reads the tensor's new value,
  // and a graph replay does too.
  Classifier net(kIn, kHidden, kClasses, 3);
  Tensor newScale = scalar_tensor(1024.0, f32);
  auto step = trace([&](const Tensor& a, const Tensor& b) { return stepSettingTheScale(net, newScale, a, b); },
                    {.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cuda});
  auto [x, y] = batch(kBatch, kIn, kClasses, 8);
  for (int call = 0; call < 4; ++call) {
    step(x, y);
    EXPECT_EQ(net.scaler.get_scale(), 1024.0 * double(1 << call)) << "call " << call;
    newScale.copy_(newScale * 2.0);
  }
  EXPECT_NE(step.plan_text().find("copied into 'scaler.scale'"), std::string::npos) << step.plan_text();
}

TEST_F(CompiledStepOnGpu, AHostWriteBetweenStepsReachesTheDevice) {
  Classifier net(kIn, kHidden, kClasses, 3);
  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); },
                    {.amp = {.level = amp::O2, .dtype = f16}, .backend = Backend::cuda});
  auto [x, y] = batch(kBatch, kIn, kClasses, 6);
  step(x, y);
  // Zero every weight on the host: the next step must start from zeros (and
  // O2's f16 copies must be re-derived), so all logits and the loss are
  // those of a zero network: log(classes).
  {
    NoGradGuard noGrad; // a parameter is written outside autograd
    for (Tensor& parameter : net.model.parameters())
      parameter.copy_(zeros(parameter.shape(), f32));
  }
  EXPECT_NEAR(step(x, y).item(), std::log(double(kClasses)), 1e-3);
}

TEST_F(CompiledStepOnGpu, HostWritesToTheWeightsLandInTheCapturedGraphsBuffers) {
  // Weights set from the host between replays (a checkpoint's, or scaled, as
  // a user might every few steps) are copied into the device tensors the
  // state already has: the captured graph keeps replaying, and every step
  // after a write starts from the written weights, as the CPU step does (at
  // O2 through f16 copies derived again from them).
  for (amp::Level level : {amp::O1, amp::O2}) {
    SCOPED_TRACE(std::string(amp::level_name(level)) + " f16");
    Classifier onCpu(kIn, kHidden, kClasses, 3), onGpu(kIn, kHidden, kClasses, 3), donor(kIn, kHidden, kClasses, 11);
    amp::Policy policy{.level = level, .dtype = f16};
    auto [cpuStep, gpuStep] = traceOnCpuAndGpu(onCpu, onGpu, {.amp = policy});
    Tolerance tolerance = toleranceFor(ampjit::runtime::DType::F16);
    int call = 0;
    auto stepBoth = [&] {
      auto [x, y] = batch(kBatch, kIn, kClasses, 70 + uint64_t(call));
      expectClose({gpuStep(x, y).item()}, {cpuStep(x, y).item()},
                  ampjit::testing::scaled(tolerance, 8.0 * (call + 1)), "loss of call " + std::to_string(call));
      ++call;
    };
    for (int i = 0; i < 3; ++i) // step by step, captured, replayed
      stepBoth();
    ASSERT_TRUE(gpuStep.stats().device_graph_disabled_reason.empty()) << gpuStep.stats().device_graph_disabled_reason;
    size_t captures = gpuStep.stats().device_graph_captures;
    ASSERT_GE(captures, 1u);
    for (double factor : {1.0, 0.5}) {
      {
        NoGradGuard noGrad; // a parameter is written outside autograd
        for (size_t i = 0; i < donor.model.parameters().size(); ++i) {
          Tensor written = donor.model.parameters()[i] * factor;
          onCpu.model.parameters()[i].copy_(written);
          onGpu.model.parameters()[i].copy_(written);
        }
      }
      size_t replays = gpuStep.stats().device_graph_replays;
      for (int i = 0; i < 2; ++i)
        stepBoth();
      EXPECT_EQ(gpuStep.stats().device_graph_captures, captures) << "a host write moved the state: a new graph";
      EXPECT_EQ(gpuStep.stats().device_graph_replays, replays + 2) << "a step after a host write ran step by step";
    }
    std::vector<std::vector<double>> cpuState = stateOf(onCpu), gpuState = stateOf(onGpu);
    ASSERT_EQ(cpuState.size(), gpuState.size());
    for (size_t i = 0; i + 1 < cpuState.size(); i += 2) // the parameters (stateOf alternates them with momenta)
      expectClose(gpuState[i], cpuState[i], ampjit::testing::scaled(tolerance, 64.0),
                  "parameter " + std::to_string(i / 2));
  }
}

TEST_F(CompiledStepOnGpu, AnEvalStepSeesTheWeightsTheTrainStepUpdatedOnTheDevice) {
  // On CUDA, O1 keeps each function's parameter casts and O2 its copies: an
  // eval step traced beside the train step re-derives them from the weights
  // the train step wrote on the device, as a function traced afresh does.
  for (amp::Level level : {amp::O1, amp::O2}) {
    SCOPED_TRACE(level == amp::O1 ? "O1" : "O2");
    Classifier net(kIn, kHidden, kClasses, 3);
    TraceOptions options{.amp = {.level = level, .dtype = f16}, .backend = Backend::cuda};
    auto train = trace([&](const Tensor& x, const Tensor& y) { return net.step(x, y); }, options);
    auto evaluation = [&](const Tensor& x, const Tensor& y) {
      NoGradGuard noGrad;
      return cross_entropy(net.model(x), y);
    };
    options.name = "eval_step";
    auto evaluate = trace(evaluation, options);
    auto [vx, vy] = batch(kBatch, kIn, kClasses, 300);
    std::vector<double> losses;
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      for (uint64_t i = 0; i < 3; ++i) {
        auto [x, y] = batch(kBatch, kIn, kClasses, 10 * epoch + i);
        train(x, y);
      }
      losses.push_back(evaluate(vx, vy).item());
      EXPECT_EQ(losses.back(), trace(evaluation, options)(vx, vy).item()) << "epoch " << epoch;
    }
    EXPECT_NE(losses.front(), losses.back());
  }
}

TEST_F(CompiledStepOnGpu, ACpuStepAndACudaStepTakeTurnsOnTheSameState) {
  // A train step on the device and an eval step on the CPU (or the other
  // way round) share the model: each reads what the other wrote last,
  // through the host, and the CUDA step's next call picks up a CPU write.
  Classifier shared(kIn, kHidden, kClasses, 3), reference(kIn, kHidden, kClasses, 3);
  TraceOptions onDevice{.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cuda};
  auto train = trace([&](const Tensor& x, const Tensor& y) { return shared.step(x, y); }, onDevice);
  auto evaluation = [](Classifier& net, const Tensor& x, const Tensor& y) {
    NoGradGuard noGrad;
    return cross_entropy(net.model(x), y);
  };
  auto evaluateOnCpu = trace([&](const Tensor& x, const Tensor& y) { return evaluation(shared, x, y); },
                             {.backend = Backend::cpu, .name = "eval_on_cpu"});
  auto trainReference = trace([&](const Tensor& x, const Tensor& y) { return reference.step(x, y); }, onDevice);
  auto [vx, vy] = batch(kBatch, kIn, kClasses, 301);
  for (uint64_t round = 0; round < 3; ++round) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 20 + round);
    EXPECT_EQ(train(x, y).item(), trainReference(x, y).item()) << "round " << round;
    // The CPU step reads the weights the device wrote...
    EXPECT_EQ(evaluateOnCpu(vx, vy).item(), evaluation(reference, vx, vy).item()) << "round " << round;
  }
  // ...and a host write between calls reaches the device step.
  {
    NoGradGuard noGrad;
    shared.model.parameters()[0].copy_(zeros_like(shared.model.parameters()[0]));
    reference.model.parameters()[0].copy_(zeros_like(reference.model.parameters()[0]));
  }
  auto [x, y] = batch(kBatch, kIn, kClasses, 40);
  EXPECT_EQ(train(x, y).item(), trainReference(x, y).item());
  EXPECT_EQ(stateOf(shared), stateOf(reference));
}

TEST_F(CompiledStepOnGpu, AnInputWrittenInPlaceOnTheDeviceReachesTheCallersTensor) {
  Classifier onCpu(kIn, kHidden, kClasses, 3), onGpu(kIn, kHidden, kClasses, 3);
  auto body = [](Classifier& net, const Tensor& x, const Tensor& y) {
    Tensor input = x;
    input.mul_(scalar_tensor(2.0, f32)); // exact: the written-back values must agree bit for bit
    return net.step(x, y);
  };
  auto cpuStep = trace([&](const Tensor& x, const Tensor& y) { return body(onCpu, x, y); }, {.backend = Backend::cpu});
  auto gpuStep = trace([&](const Tensor& x, const Tensor& y) { return body(onGpu, x, y); }, {.backend = Backend::cuda});
  for (uint64_t i = 0; i < 2; ++i) {
    auto [cpuX, cpuY] = batch(kBatch, kIn, kClasses, 70 + i);
    auto [gpuX, gpuY] = batch(kBatch, kIn, kClasses, 70 + i);
    std::vector<double> original = gpuX.to_vector();
    expectClose({gpuStep(gpuX, gpuY).item()}, {cpuStep(cpuX, cpuY).item()},
                ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F32), 8.0), "loss");
    EXPECT_EQ(gpuX.to_vector(), cpuX.to_vector()) << "call " << i;
    EXPECT_EQ(gpuX.to_vector()[0], 2.0 * original[0]);
  }
}

TEST_F(CompiledStepOnGpu, ABatchAlreadyOnTheDeviceGivesTheBitsOfTheSameBatchFromTheHost) {
  // jit::cuda::to_device: the step reads the batch on the GPU, with no
  // round trip through host memory, and computes exactly what it computes
  // from the host's copy; the batch reads back unchanged.
  Classifier fromHost(kIn, kHidden, kClasses, 3), fromDevice(kIn, kHidden, kClasses, 3);
  TraceOptions options{.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cuda};
  auto hostStep = trace([&](const Tensor& x, const Tensor& y) { return fromHost.step(x, y); }, options);
  auto deviceStep = trace([&](const Tensor& x, const Tensor& y) { return fromDevice.step(x, y); }, options);
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 90 + i);
    Tensor deviceX = cuda::to_device(x), deviceY = cuda::to_device(y);
    EXPECT_EQ(&cuda::to_device(deviceX).impl(), &deviceX.impl()) << "already on the device";
    EXPECT_EQ(deviceStep(deviceX, deviceY).item(), hostStep(x, y).item()) << "call " << i;
    EXPECT_EQ(deviceX.to_vector(), x.to_vector());
    EXPECT_EQ(deviceY.to_vector(), y.to_vector());
  }
  EXPECT_EQ(stateOf(fromDevice), stateOf(fromHost));
  EXPECT_EQ(deviceStep.stats().traces, 1u);
}

TEST_F(CompiledStepOnGpu, ToDeviceInsideATracedStepIsAClearError) {
  // A traced tensor has no value to upload: moving a batch is the caller's
  // business, before the step.
  Classifier net(kIn, kHidden, kClasses, 3);
  int line = __LINE__ + 1;
  auto step = trace([&](const Tensor& x, const Tensor& y) { return net.step(cuda::to_device(x), y); },
                    {.backend = Backend::cuda});
  auto [x, y] = batch(kBatch, kIn, kClasses, 130);
  std::string message = errorOf([&] { step(x, y); });
  EXPECT_NE(message.find("jit::cuda::to_device"), std::string::npos) << message;
  EXPECT_NE(message.find("CompiledStepTest.cpp:" + std::to_string(line)), std::string::npos) << message;
}

TEST_F(CompiledStepOnGpu, HostBatchesEnqueuedBackToBackEachReachTheirOwnStep) {
  // Host batches go through one pinned buffer per input, which a step's
  // copy reads after the call returns: the next call must wait for that copy
  // before it writes the buffer again. Nothing is read between the calls,
  // so no step waits for the GPU on its own; the losses equal those of the
  // same batches uploaded first.
  Classifier fromHost(kIn, kHidden, kClasses, 3), fromDevice(kIn, kHidden, kClasses, 3);
  TraceOptions options{.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cuda};
  auto hostStep = trace([&](const Tensor& x, const Tensor& y) { return fromHost.step(x, y); }, options);
  auto deviceStep = trace([&](const Tensor& x, const Tensor& y) { return fromDevice.step(x, y); }, options);
  std::vector<Tensor> hostLosses, deviceLosses;
  for (uint64_t i = 0; i < 5; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 120 + i);
    hostLosses.push_back(hostStep(x, y));
    deviceLosses.push_back(deviceStep(cuda::to_device(x), cuda::to_device(y)));
  }
  for (size_t i = 0; i < hostLosses.size(); ++i)
    EXPECT_EQ(hostLosses[i].item(), deviceLosses[i].item()) << "call " << i;
  EXPECT_EQ(stateOf(fromHost), stateOf(fromDevice));
}

TEST_F(CompiledStepOnGpu, LossesAndWeightsComeBackWithoutTheStepsWaitingForThem) {
  // Each call's loss, and the first weight after it, are asked for at once
  // with copy_to_host_async and read after the last call. They equal what
  // item() and to_vector() read from a twin after each call (the same
  // weights, batches and plan, so the same bits). On the emulated runtime,
  // where queued work runs only while the host waits, neither the calls nor
  // the asking ran any: nothing waited for the GPU. And a second round of
  // copies pins no host memory and creates no event: the first round's
  // are reused.
  Classifier asked(kIn, kHidden, kClasses, 3), read(kIn, kHidden, kClasses, 3);
  TraceOptions options{.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cuda};
  auto askedStep = trace([&](const Tensor& x, const Tensor& y) { return asked.step(x, y); }, options);
  auto readStep = trace([&](const Tensor& x, const Tensor& y) { return read.step(x, y); }, options);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (uint64_t i = 0; i < 10; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 140 + i);
    batches.emplace_back(cuda::to_device(x), cuda::to_device(y));
  }
  std::vector<double> expectedLosses;
  std::vector<std::vector<double>> expectedWeights;
  for (const auto& [x, y] : batches) {
    expectedLosses.push_back(readStep(x, y).item());
    expectedWeights.push_back(read.model.parameters()[0].to_vector());
  }

  // Two calls first: the graph is captured on the second.
  askedStep(batches[0].first, batches[0].second);
  askedStep(batches[1].first, batches[1].second);
  cuda::synchronize();
  for (size_t round = 0, call = 2; round < 2; ++round) {
    std::vector<cuda::HostCopy> losses, weights;
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
    uint64_t ranBefore = ampjit::emulation::operationsRun(), pinnedBefore = ampjit::emulation::pinnedAllocations(),
             eventsBefore = ampjit::emulation::eventsCreated();
#endif
    for (size_t end = call + 4; call < end; ++call) {
      losses.push_back(cuda::copy_to_host_async(askedStep(batches[call].first, batches[call].second)));
      weights.push_back(cuda::copy_to_host_async(asked.model.parameters()[0]));
    }
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
    EXPECT_EQ(ampjit::emulation::operationsRun(), ranBefore) << "round " << round << ": something waited for the GPU";
    if (round == 1) {
      EXPECT_EQ(ampjit::emulation::pinnedAllocations(), pinnedBefore) << "the first round's buffers were not reused";
      EXPECT_EQ(ampjit::emulation::eventsCreated(), eventsBefore) << "the first round's events were not reused";
    }
#endif
    for (size_t i = 0; i < losses.size(); ++i) {
      size_t at = call - losses.size() + i;
      EXPECT_EQ(losses[i].item(), expectedLosses[at]) << "call " << at;
      EXPECT_TRUE(losses[i].ready());
      EXPECT_EQ(weights[i].wait().to_vector(), expectedWeights[at]) << "the weight after call " << at;
    }
  }

  // A value on the host arrives at once, as it was when asked for.
  Tensor onHost = tensor({1.0, 2.0}, {2});
  cuda::HostCopy early = cuda::copy_to_host_async(onHost);
  onHost.copy_(tensor({5.0, 6.0}, {2}));
  EXPECT_TRUE(early.ready());
  EXPECT_EQ(early.wait().to_vector(), (std::vector<double>{1.0, 2.0}));
}

TEST_F(CompiledStepOnGpu, AnInputOnTheDeviceWrittenInPlaceByTheStepReadsBackTheWrite) {
  Classifier net(kIn, kHidden, kClasses, 3);
  auto step = trace(
      [&](const Tensor& x, const Tensor& y) {
        Tensor input = x;
        input.mul_(scalar_tensor(2.0, f32));
        return net.step(x, y);
      },
      {.backend = Backend::cuda});
  auto [x, y] = batch(kBatch, kIn, kClasses, 95);
  std::vector<double> original = x.to_vector();
  Tensor deviceX = cuda::to_device(x);
  step(deviceX, cuda::to_device(y));
  std::vector<double> written = deviceX.to_vector();
  ASSERT_EQ(written.size(), original.size());
  for (size_t i = 0; i < original.size(); ++i)
    ASSERT_EQ(written[i], 2.0 * original[i]) << "element " << i;
  EXPECT_EQ(x.to_vector(), original) << "the host tensor to_device copied from is its own";
}

TEST_F(CompiledStepOnGpu, ALayerNormStepAtO3MatchesTheCpu) {
  // O3 lowers layer_norm_grad with its data but keeps the fp32 statistics
  // the forward saved: the device's kernel reads them as fp32 (Compute<S>).
  struct Net {
    Net()
        : generator(3), model(nn::Linear(kIn, kHidden, true, {.generator = &generator}), nn::LayerNorm({kHidden}),
                              nn::GELU(), nn::Linear(kHidden, kClasses, true, {.generator = &generator})),
          opt(model.parameters(), {.lr = 1e-3}) {}
    Tensor step(const Tensor& x, const Tensor& y) { return plainTrainStep(model, opt, x, y); }
    Generator generator;
    nn::Sequential model;
    optim::AdamW opt;
  };
  Net onCpu, onGpu;
  auto [cpuStep, gpuStep] = traceOnCpuAndGpu(onCpu, onGpu, {.amp = {.level = amp::O3, .dtype = f16}});
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 90 + i);
    expectClose({gpuStep(x, y).item()}, {cpuStep(x, y).item()},
                ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F16), 4.0), "loss of call " + std::to_string(i));
  }
  for (size_t k = 0; k < onCpu.model.parameters().size(); ++k)
    expectCloseInNorm(onGpu.model.parameters()[k].to_vector(), onCpu.model.parameters()[k].to_vector(),
                      ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F16), 4.0),
                      "parameter " + std::to_string(k));
}

TEST_F(CompiledStepOnGpu, AnAmsgradStepAtO2MatchesTheCpuAndSkipsOverflows) {
  // AMSGrad's running maximum through the multi-tensor kernel, beside O2's
  // f16 copies, under a scaler that starts by overflowing.
  struct Net {
    Net()
        : generator(4), model(nn::Linear(kIn, kHidden, true, {.generator = &generator}), nn::ReLU(),
                              nn::Linear(kHidden, kClasses, true, {.generator = &generator})),
          opt(model.parameters(), {.lr = 1e-2, .betas = {0.9, 0.5}, .amsgrad = true}),
          scaler({.init_scale = 1e6, .growth_interval = 2}) {}
    Tensor step(const Tensor& x, const Tensor& y) { return scaledTrainStep(model, opt, scaler, x, y); }
    Generator generator;
    nn::Sequential model;
    optim::AdamW opt;
    amp::GradScaler scaler;
  };
  Net onCpu, onGpu;
  expectGpuLossesTrackTheCpu(
      amp::O2, [&](const Tensor& x, const Tensor& y) { return onCpu.step(x, y); },
      [&](const Tensor& x, const Tensor& y) { return onGpu.step(x, y); },
      [](uint64_t i) { return batch(kBatch, kIn, kClasses, 110 + i); }, 6);
  EXPECT_GT(onGpu.scaler.skipped_steps(), 0);
  EXPECT_EQ(onGpu.scaler.skipped_steps(), onCpu.scaler.skipped_steps());
  EXPECT_EQ(onGpu.scaler.get_scale(), onCpu.scaler.get_scale());
  auto gpuState = onGpu.opt.state_dict(), cpuState = onCpu.opt.state_dict();
  ASSERT_EQ(gpuState.size(), cpuState.size());
  for (size_t k = 0; k < cpuState.size(); ++k)
    expectCloseInNorm(gpuState[k].second.to_vector(), cpuState[k].second.to_vector(),
                      ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F16), 4.0), cpuState[k].first);
}

TEST_F(CompiledStepOnGpu, TheElementwiseOptimizersStepsMatchTheCpuAndSkipOverflows) {
  // Element-wise optimizers become generated kernels (LAMB's norms and
  // Adafactor's row and column averages generated reductions): their
  // predicated selects must keep every buffer on a skipped step, on the
  // device too. The same optimizers and settings as the trace tests'.
  for (const std::string& which : elementwiseOptimizerNames()) {
    SCOPED_TRACE(which);
    struct Net {
      explicit Net(const std::string& which)
          : generator(5), model(nn::Linear(kIn, kHidden, true, {.generator = &generator}), nn::ReLU(),
                                nn::Linear(kHidden, kClasses, true, {.generator = &generator})),
            opt(makeElementwiseOptimizer(which, model.parameters())), scaler({.init_scale = 1e6, .growth_interval = 2}) {}
      Tensor step(const Tensor& x, const Tensor& y) { return scaledTrainStep(model, *opt, scaler, x, y); }
      Generator generator;
      nn::Sequential model;
      std::unique_ptr<optim::Optimizer> opt;
      amp::GradScaler scaler;
    };
    Net onCpu(which), onGpu(which);
    expectGpuLossesTrackTheCpu(
        amp::O1, [&](const Tensor& x, const Tensor& y) { return onCpu.step(x, y); },
        [&](const Tensor& x, const Tensor& y) { return onGpu.step(x, y); },
        [](uint64_t i) { return batch(kBatch, kIn, kClasses, 120 + i); }, 6);
    EXPECT_GT(onGpu.scaler.skipped_steps(), 0);
    EXPECT_EQ(onGpu.scaler.skipped_steps(), onCpu.scaler.skipped_steps());
    auto gpuState = onGpu.opt->state_dict(), cpuState = onCpu.opt->state_dict();
    ASSERT_EQ(gpuState.size(), cpuState.size());
    for (size_t k = 0; k < cpuState.size(); ++k)
      expectCloseInNorm(gpuState[k].second.to_vector(), cpuState[k].second.to_vector(),
                        ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F16), 4.0), cpuState[k].first);
  }
}

TEST_F(CompiledStepOnGpu, ATokenClassifierWithAnEmbeddingMatchesTheCpuAtO1AndO2) {
  // The gather and the table's fp32 gradient (repeated tokens, a padding
  // row) on the device, beside f16 GEMMs.
  for (amp::Level level : {amp::O1, amp::O2}) {
    SCOPED_TRACE(level == amp::O1 ? "O1" : "O2");
    TokenClassifier onCpu, onGpu;
    expectGpuLossesTrackTheCpu(
        level, [&](const Tensor& x, const Tensor& y) { return onCpu.step(x, y); },
        [&](const Tensor& x, const Tensor& y) { return onGpu.step(x, y); },
        [](uint64_t i) { return tokenBatch(i + 1); }, 6);
    EXPECT_GT(onGpu.scaler.skipped_steps(), 0);
    EXPECT_EQ(onGpu.scaler.skipped_steps(), onCpu.scaler.skipped_steps());
    expectCloseInNorm(onGpu.embed.weight.to_vector(), onCpu.embed.weight.to_vector(),
                      ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F16), 4.0), "the table");
    std::vector<double> table = onGpu.embed.weight.to_vector();
    for (int64_t d = 0; d < TokenClassifier::kDim; ++d)
      EXPECT_EQ(table[size_t(d)], 0.0) << "the padding row moved";
  }
}

TEST_F(CompiledStepOnGpu, AGptBlockMatchesTheCpuAtO1O2AndO3) {
  // Embeddings (one tied to the output), 3-D LayerNorm, batched attention
  // GEMMs, a broadcast causal select, softmax, GELU, unscale_ and clipping.
  for (amp::Level level : {amp::O1, amp::O2, amp::O3}) {
    SCOPED_TRACE(::testing::Message() << "O" << int(level));
    gpt::GptTrainer onCpu(1024.0), onGpu(1024.0);
    expectGpuLossesTrackTheCpu(
        level, [&](const Tensor& x, const Tensor& y) { return onCpu.step(x, y); },
        [&](const Tensor& x, const Tensor& y) { return onGpu.step(x, y); }, gpt::countingBatch, 4, 8.0);
    auto gpuState = onGpu.model.state_dict(), cpuState = onCpu.model.state_dict();
    ASSERT_EQ(gpuState.size(), cpuState.size());
    for (size_t k = 0; k < cpuState.size(); ++k) {
      // The key's bias adds one constant to a row of scores, which softmax
      // ignores: its gradient is rounding noise, which AdamW scales to full
      // steps, so each backend moves it its own way.
      if (cpuState[k].first == "key.bias")
        continue;
      expectCloseInNorm(gpuState[k].second.to_vector(), cpuState[k].second.to_vector(),
                        ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F16), 8.0), cpuState[k].first);
    }
  }
}

TEST_F(CompiledStepOnGpu, AnMlpWithBatchNorm1dMatchesTheCpu) {
  // Batch norm over [N, C] features (not cuDNN's NCHW) on the device, O1 and O2.
  for (amp::Level level : {amp::O1, amp::O2}) {
    SCOPED_TRACE(level == amp::O1 ? "O1" : "O2");
    auto build = [] {
      Generator generator(11);
      return nn::Sequential(nn::Linear(kIn, kHidden, false, {.generator = &generator}), nn::BatchNorm1d(kHidden),
                            nn::ReLU(), nn::Linear(kHidden, kClasses, true, {.generator = &generator}));
    };
    nn::Sequential cpuModel = build(), gpuModel = build();
    optim::SGD cpuOpt(cpuModel.parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD gpuOpt(gpuModel.parameters(), {.lr = 0.1, .momentum = 0.9});
    amp::GradScaler cpuScaler, gpuScaler;
    expectGpuLossesTrackTheCpu(
        level, [&](const Tensor& x, const Tensor& y) { return scaledTrainStep(cpuModel, cpuOpt, cpuScaler, x, y); },
        [&](const Tensor& x, const Tensor& y) { return scaledTrainStep(gpuModel, gpuOpt, gpuScaler, x, y); },
        [](uint64_t i) { return batch(kBatch, kIn, kClasses, 130 + i); }, 4);
    auto gpuState = gpuModel.state_dict(), cpuState = cpuModel.state_dict();
    for (size_t k = 0; k < cpuState.size(); ++k)
      expectCloseInNorm(gpuState[k].second.to_vector(), cpuState[k].second.to_vector(),
                        ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F16), 4.0), cpuState[k].first);
  }
}

/// mlp9's shape at test size: three Linear(64, 64) with biases, drawn from `seed`.
nn::Sequential mlpAtTestSize(uint64_t seed) {
  Generator generator(seed);
  nn::Sequential model;
  for (int i = 0; i < 3; ++i)
    model.push_back(nn::Linear(64, 64, true, {.generator = &generator}));
  return model;
}

/// mlpAtTestSize(9) trained with SGD (lr 0.05) under a scaler that grows
/// every 2 steps: the update tests' model.
struct MlpTrainer {
  nn::Sequential model = mlpAtTestSize(9);
  optim::SGD optimizer;
  amp::GradScaler scaler{{.growth_interval = 2}};
  explicit MlpTrainer(double momentum = 0.0)
      : optimizer(model.parameters(), {.lr = 0.05, .momentum = momentum}) {}
  Tensor step(const Tensor& x, const Tensor& y) {
    return scaledTrainStepWith([](const Tensor& out, const Tensor& target) { return mse_loss(out, target); }, model,
                               optimizer, scaler, x, y);
  }
};

/// The batch of call `call` of the update tests; call 3's input holds an
/// inf, so that step overflows.
std::pair<Tensor, Tensor> mlpBatchOfCall(int call) {
  Generator generator(300 + uint64_t(call));
  Tensor x = rand({32, 64}, f32, &generator), y = rand({32, 64}, f32, &generator);
  if (call == 3) {
    x = withInfAt(x, 7);
  }
  return {x, y};
}

TEST_F(CompiledStepOnGpu, AnMseMlpsFp32BiasGradientsMatchTheCpuAtO1) {
  // mlp9's shape at test size: at O1 each hidden layer's bias gradient is
  // its f16 output gradient widened and summed over the batch, which CUDA
  // runs as one launch reading the f16 gradient (widenedReductionAt).
  nn::Sequential cpuModel = mlpAtTestSize(5), gpuModel = mlpAtTestSize(5);
  optim::SGD cpuOpt(cpuModel.parameters(), {.lr = 0.05}), gpuOpt(gpuModel.parameters(), {.lr = 0.05});
  amp::GradScaler cpuScaler, gpuScaler;
  auto mseStep = [](nn::Sequential& model, optim::SGD& opt, amp::GradScaler& scaler, const Tensor& x,
                    const Tensor& y) {
    return scaledTrainStepWith([](const Tensor& out, const Tensor& target) { return mse_loss(out, target); }, model,
                               opt, scaler, x, y);
  };
  expectGpuLossesTrackTheCpu(
      amp::O1, [&](const Tensor& x, const Tensor& y) { return mseStep(cpuModel, cpuOpt, cpuScaler, x, y); },
      [&](const Tensor& x, const Tensor& y) { return mseStep(gpuModel, gpuOpt, gpuScaler, x, y); },
      [](uint64_t i) {
        Generator generator(200 + i);
        return std::pair{rand({32, 64}, f32, &generator), rand({32, 64}, f32, &generator)};
      },
      4);
  auto gpuState = gpuModel.state_dict(), cpuState = cpuModel.state_dict();
  for (size_t k = 0; k < cpuState.size(); ++k)
    expectClose(gpuState[k].second.to_vector(), cpuState[k].second.to_vector(),
                ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F16), 4.0), cpuState[k].first);
}

TEST_F(CompiledStepOnGpu, SpeculativeUpdatesGiveTheBitsOfTheDeferredStepAndSkipAnOverflow) {
  // mlp9's shape at test size: one step deferring its update into the next
  // call, one (traced on a backend that speculates from the first parameter
  // element) running each update under the backward pass before the
  // scaler's check. Call 3 overflows. Every loss, the scaler's state and
  // every parameter agree bit for bit. O1 rewrites each weight's kept f16
  // copy too, O2 its derived one; with momentum, the buffers alternate too.
  struct Case {
    amp::Level level;
    DType dtype;
    double momentum;
  };
  for (Case config : {Case{amp::O1, f16, 0.0}, Case{amp::O2, f16, 0.9}, Case{amp::O2, bf16, 0.0}}) {
    SCOPED_TRACE(std::string(amp::level_name(config.level)) + " " + std::string(dtype_name(config.dtype)));
    MlpTrainer deferring(config.momentum), speculating(config.momentum);
    TraceOptions options{.amp = {.level = config.level, .dtype = config.dtype}, .backend = Backend::cuda};
    options.defer_updates = DeferUpdates::on;
    auto deferredStep = trace([&](const Tensor& x, const Tensor& y) { return deferring.step(x, y); }, options);
    options.defer_updates = DeferUpdates::automatic;
    detail::replaceSharedCudaBackend({.speculativeUpdateMinimumElements = 1, .foldUpdatesIntoGemms = 0},
                                     "the speculative step's backend");
    auto speculativeStep = trace([&](const Tensor& x, const Tensor& y) { return speculating.step(x, y); }, options);
    for (int call = 0; call < 6; ++call) {
      auto [x, y] = mlpBatchOfCall(call);
      double speculated = speculativeStep(x, y).item(), deferred = deferredStep(x, y).item();
      if (std::isnan(deferred))
        EXPECT_TRUE(std::isnan(speculated)) << "loss of call " << call;
      else
        EXPECT_EQ(speculated, deferred) << "loss of call " << call;
    }
    detail::replaceSharedCudaBackend({}, "the default backend");
    const TraceStats& stats = speculativeStep.stats();
    EXPECT_EQ(stats.device_speculative_updates_per_step, 6u) << stats.device_speculation_declined;
    EXPECT_EQ(stats.device_speculation_declined, "");
    EXPECT_GT(stats.device_graph_replays, 0u);
    EXPECT_EQ(stats.device_graph_disabled_reason, "");
    EXPECT_EQ(speculativeStep.plan_text().find("deferred steps"), std::string::npos)
        << "a backend that speculates is not given a deferred update";
    EXPECT_EQ(deferredStep.stats().device_speculative_updates_per_step, 0u);
    EXPECT_EQ(speculating.scaler.skipped_steps(), 1);
    EXPECT_EQ(speculating.scaler.get_scale(), deferring.scaler.get_scale());
    auto speculated = speculating.model.state_dict(), deferred = deferring.model.state_dict();
    ASSERT_EQ(speculated.size(), deferred.size());
    for (size_t k = 0; k < deferred.size(); ++k)
      EXPECT_EQ(speculated[k].second.to_vector(), deferred[k].second.to_vector()) << deferred[k].first;
  }
}

TEST_F(CompiledStepOnGpu, BiasGradientsBesideTheBackwardGiveTheBitsOfTheStepInLine) {
  // mlp9's hidden bias gradients (each f16 output gradient widened and
  // summed, one launch) go beside the GEMMs after them once their input is
  // large enough (AMPJIT_SIDE_REDUCTION_MIN_ELEMENTS; here every size), with
  // the updates speculative (folded into their GEMMs and not) and deferred.
  // Five calls each, the fourth overflowing: losses, scaler and weights equal
  // those of the same plan with its side steps in line. On the emulated
  // runtime the streams interleave in a random order each run, so a bias
  // update that read its gradient before the side stream wrote it, or a
  // step that overwrote the output gradient the sum still reads, fails.
  ampjit::testing::ScopedEnvironment floor("AMPJIT_SIDE_REDUCTION_MIN_ELEMENTS", "1");
  struct Case {
    const char* what;
    ampjit::runtime::CudaBackendOptions backend;
    DeferUpdates defer;
  };
  const Case cases[] = {
      {"speculative, folded", {.speculativeUpdateMinimumElements = 1, .foldUpdatesIntoGemms = 1}, DeferUpdates::automatic},
      {"speculative", {.speculativeUpdateMinimumElements = 1, .foldUpdatesIntoGemms = 0}, DeferUpdates::automatic},
      {"deferred", {.speculativeUpdateMinimumElements = 0}, DeferUpdates::on}};
  for (const Case& config : cases) {
    SCOPED_TRACE(config.what);
    expectSideStepsGiveTheBitsInLine(
        [&] {
          detail::replaceSharedCudaBackend(config.backend, "the bias-gradient test's backend");
          StepsTrail trail;
          MlpTrainer net;
          auto step = trace([&](const Tensor& x, const Tensor& y) { return net.step(x, y); },
                            {.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cuda,
                             .defer_updates = config.defer});
          for (int call = 0; call < 5; ++call) {
            auto [x, y] = mlpBatchOfCall(call);
            double loss = step(x, y).item();
            trail.losses.push_back(std::isnan(loss) ? -1.0 : loss); // comparable: the overflow's
          }
          for (const auto& [name, value] : net.model.state_dict())
            trail.state.push_back(value.to_vector());
          trail.state.push_back({net.scaler.get_scale(), double(net.scaler.skipped_steps())});
          trail.sideSteps = step.stats().device_side_steps_per_step;
          trail.graphReplays = step.stats().device_graph_replays;
          trail.graphDisabledReason = step.stats().device_graph_disabled_reason;
          EXPECT_EQ(net.scaler.skipped_steps(), 1);
          detail::replaceSharedCudaBackend({}, "the default backend");
          return trail;
        },
        // The two hidden layers' bias gradients and the two weight
        // gradients small enough to go beside anyway (2 without the floor);
        // the last layer's sum stays in the regression head's launch.
        4);
  }
}

TEST_F(CompiledStepOnGpu, AFloorForBesideReductionsThatIsNoCountIsAClearError) {
  ampjit::testing::ScopedEnvironment floor("AMPJIT_SIDE_REDUCTION_MIN_ELEMENTS", "a million");
  MlpTrainer net;
  auto step = trace([&](const Tensor& x, const Tensor& y) { return net.step(x, y); },
                    {.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cuda});
  auto [x, y] = mlpBatchOfCall(0);
  try {
    step(x, y);
    FAIL() << "traced with an unreadable floor";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("AMPJIT_SIDE_REDUCTION_MIN_ELEMENTS='a million'"), std::string::npos)
        << error.what();
  }
}

TEST_F(CompiledStepOnGpu, ALargeUpdateTheBackendWouldNotSpeculateIsDeferredInstead) {
  // One Linear(4096, 4096): 16.8M parameter elements, enough for automatic
  // deferral. A backend that speculates gets the update undeferred, but one
  // whose threshold this plan's updates do not reach (ResNet-50's case, its
  // qualifying updates too few) gets it deferred, as a backend that never
  // speculates does, rather than in line after the check.
  struct Case {
    const char* backend;
    ampjit::runtime::CudaBackendOptions options;
    bool deferred;
    size_t speculative;
  };
  const Case cases[] = {
      {"speculating from 1 element", {.speculativeUpdateMinimumElements = 1, .foldUpdatesIntoGemms = 0}, false, 2},
      {"speculating from 2^40 elements", {.speculativeUpdateMinimumElements = int64_t(1) << 40}, true, 0},
      {"never speculating", {.speculativeUpdateMinimumElements = 0}, true, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.backend);
    detail::replaceSharedCudaBackend(c.options, c.backend);
    Generator generator(11);
    nn::Sequential model;
    model.push_back(nn::Linear(4096, 4096, true, {.generator = &generator}));
    optim::SGD optimizer(model.parameters(), {.lr = 0.05});
    amp::GradScaler scaler;
    auto step = trace(
        [&](const Tensor& x, const Tensor& y) {
          return scaledTrainStepWith([](const Tensor& out, const Tensor& target) { return mse_loss(out, target); },
                                     model, optimizer, scaler, x, y);
        },
        {.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cuda});
    Tensor x = rand({2, 4096}, f32, &generator), y = rand({2, 4096}, f32, &generator);
    EXPECT_TRUE(std::isfinite(step(x, y).item()));
    EXPECT_EQ(step.plan_text().find("deferred steps") != std::string::npos, c.deferred) << step.plan_text();
    EXPECT_EQ(step.stats().device_speculative_updates_per_step, c.speculative)
        << step.stats().device_speculation_declined;
  }
  detail::replaceSharedCudaBackend({}, "the default backend");
}

TEST_F(CompiledStepOnGpu, UpdatesFoldedIntoTheirGemmsTrackTheDeferredStepAndSkipTheSameOverflow) {
  // mlp9's shape at test size, its three weights' plain SGD updates folded
  // into their gradients' GEMMs (the biases run speculatively on their own:
  // no matrices). The folded update adds the unrounded f32 product, the
  // deferred one the product rounded to the low dtype: losses and weights
  // agree within that dtype's tolerance, the overflow of call 3 is skipped
  // by both, and the scaler's state is equal. At O2 in bf16 each weight
  // gradient's GEMM also sums the bias gradient in its epilogue, which
  // keeps the updates out of it.
  struct Case {
    amp::Level level;
    DType dtype;
    size_t folded;
    std::string declined;
  };
  for (const auto& [level, dtype, expectedFolds, declined] :
       {Case{amp::O1, f16, 3, "no f32 matrix"}, Case{amp::O2, f16, 3, "no f32 matrix"},
        Case{amp::O2, bf16, 0, "writes other than as a plain f32-accumulated product"}}) {
    std::string config = std::string(amp::level_name(level)) + " " + std::string(dtype_name(dtype));
    SCOPED_TRACE(config);
    MlpTrainer deferring, folding;
    TraceOptions options{.amp = {.level = level, .dtype = dtype}, .backend = Backend::cuda};
    options.defer_updates = DeferUpdates::on;
    auto deferredStep = trace([&](const Tensor& x, const Tensor& y) { return deferring.step(x, y); }, options);
    options.defer_updates = DeferUpdates::automatic;
    detail::replaceSharedCudaBackend({.speculativeUpdateMinimumElements = 1, .foldUpdatesIntoGemms = 1},
                                     "the folding step's backend");
    auto foldedStep = trace([&](const Tensor& x, const Tensor& y) { return folding.step(x, y); }, options);
    Tolerance tolerance = ampjit::testing::scaled(toleranceFor(dtype == f16 ? ampjit::runtime::DType::F16
                                                                            : ampjit::runtime::DType::BF16),
                                                  4.0);
    for (int call = 0; call < 6; ++call) {
      auto [x, y] = mlpBatchOfCall(call);
      double folded = foldedStep(x, y).item(), deferred = deferredStep(x, y).item();
      if (std::isnan(deferred))
        EXPECT_TRUE(std::isnan(folded)) << "loss of call " << call;
      else
        expectClose({folded}, {deferred}, tolerance, "loss of call " + std::to_string(call));
    }
    detail::replaceSharedCudaBackend({}, "the default backend");
    const TraceStats& stats = foldedStep.stats();
    EXPECT_EQ(stats.device_speculative_updates_per_step, 6u) << stats.device_speculation_declined;
    EXPECT_EQ(stats.device_updates_folded_into_gemms, expectedFolds) << stats.device_gemm_fold_declined;
    EXPECT_NE(stats.device_gemm_fold_declined.find(declined), std::string::npos) << stats.device_gemm_fold_declined;
    EXPECT_EQ(stats.device_graph_disabled_reason, "");
    EXPECT_EQ(folding.scaler.skipped_steps(), 1);
    EXPECT_EQ(folding.scaler.get_scale(), deferring.scaler.get_scale());
    auto folded = folding.model.state_dict(), deferred = deferring.model.state_dict();
    ASSERT_EQ(folded.size(), deferred.size());
    bool someWeightDiffers = false;
    for (size_t k = 0; k < deferred.size(); ++k) {
      expectClose(folded[k].second.to_vector(), deferred[k].second.to_vector(), tolerance, deferred[k].first);
      someWeightDiffers = someWeightDiffers || folded[k].second.to_vector() != deferred[k].second.to_vector();
    }
    EXPECT_EQ(someWeightDiffers, expectedFolds > 0) << "a folded update never rounds its gradient";
  }
}

TEST_F(CompiledStepOnGpu, AGptBlockWithDropoutDrawsTheCpusMasksAtO2) {
  // Attention and residual dropout: the device draws the CPU's masks
  // (Philox), so the two trainings stay together, and both generators end
  // at the same offset.
  gpt::GptTrainer onCpu(1024.0, 0.1), onGpu(1024.0, 0.1);
  expectGpuLossesTrackTheCpu(
      amp::O2, [&](const Tensor& x, const Tensor& y) { return onCpu.step(x, y); },
      [&](const Tensor& x, const Tensor& y) { return onGpu.step(x, y); }, gpt::countingBatch, 4, 8.0);
  EXPECT_EQ(onGpu.model.dropoutGenerator.rng_state().to_vector(), onCpu.model.dropoutGenerator.rng_state().to_vector());
  expectCloseInNorm(onGpu.model.tokens->weight.to_vector(), onCpu.model.tokens->weight.to_vector(),
                    ampjit::testing::scaled(toleranceFor(ampjit::runtime::DType::F16), 8.0), "tokens.weight");
}

TEST_F(CompiledStepOnGpu, DropoutDrawsTheCpusMasksAndAdvancesItsGeneratorOnTheDevice) {
  // The generator's [seed, offset] is state the compiled step advances on the
  // device; the masks are a function of it alone, so the device draws the
  // CPU's masks call after call.
  DropoutClassifier onCpu(kIn, kHidden, kClasses, 11), onGpu(kIn, kHidden, kClasses, 11);
  auto [cpuStep, gpuStep] = traceOnCpuAndGpu(onCpu, onGpu);
  Tolerance tolerance = toleranceFor(ampjit::runtime::DType::F32);
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 60); // one batch: only the masks and weights move the loss
    expectClose({gpuStep(x, y).item()}, {cpuStep(x, y).item()}, ampjit::testing::scaled(tolerance, 8.0 * double(i + 1)),
                "loss of call " + std::to_string(i));
  }
  EXPECT_EQ(onGpu.dropoutGenerator.rng_state().to_vector(), onCpu.dropoutGenerator.rng_state().to_vector());
  EXPECT_EQ(onGpu.dropoutGenerator.rng_state().to_vector()[1], double(3 * kBatch * kHidden));
}

TEST_F(CompiledStepOnGpu, UnscaleAndClipBeforeTheScalersStepMatchTheCpu) {
  // PyTorch's gradient-clipping pattern under AMP: unscale_, clip_grad_norm_,
  // then the scaler's step, at O1 and O2 with f16.
  struct Net {
    Net() : classifier(kIn, kHidden, kClasses, 3, {.init_scale = 4194304.0}) {}
    Tensor step(const Tensor& x, const Tensor& y) {
      classifier.opt.zero_grad();
      Tensor loss = cross_entropy(classifier.model(x), y);
      classifier.scaler.scale(loss).backward();
      classifier.scaler.unscale_(classifier.opt);
      clip_grad_norm_(classifier.model.parameters(), 0.5);
      classifier.scaler.step(classifier.opt);
      classifier.scaler.update();
      return loss;
    }
    Classifier classifier;
  };
  for (amp::Level level : {amp::O1, amp::O2}) {
    SCOPED_TRACE(std::string(amp::level_name(level)));
    Net onCpu, onGpu;
    amp::Policy policy{.level = level, .dtype = f16};
    auto [cpuStep, gpuStep] = traceOnCpuAndGpu(onCpu, onGpu, {.amp = policy});
    Tolerance tolerance = toleranceFor(ampjit::runtime::DType::F16);
    for (uint64_t i = 0; i < 4; ++i) {
      auto [x, y] = batch(kBatch, kIn, kClasses, 50 + i);
      expectClose({gpuStep(x, y).item()}, {cpuStep(x, y).item()}, ampjit::testing::scaled(tolerance, 8.0 * double(i + 1)),
                  "loss of call " + std::to_string(i));
    }
    EXPECT_EQ(onGpu.classifier.scaler.skipped_steps(), onCpu.classifier.scaler.skipped_steps());
    EXPECT_GT(onCpu.classifier.scaler.skipped_steps(), 0);
    EXPECT_LT(onCpu.classifier.scaler.skipped_steps(), 4);
    for (size_t i = 0; i < onCpu.classifier.model.parameters().size(); ++i)
      expectClose(onGpu.classifier.model.parameters()[i].to_vector(), onCpu.classifier.model.parameters()[i].to_vector(),
                  ampjit::testing::scaled(tolerance, 64.0), "parameter " + std::to_string(i));
  }
}

TEST_F(CompiledStepOnGpu, ACheckpointSavedFromTheDeviceResumesThereBitForBit) {
  // O2 keeps f16 copies of the parameters, and O1 on CUDA keeps their casts
  // from call to call: a load must re-derive both.
  for (amp::Level level : {amp::O1, amp::O2}) {
    SCOPED_TRACE(std::string(amp::level_name(level)));
    ::ampjit::testing::TemporaryDirectory scratch;
    std::string path = scratch.file("checkpoint.ampjit");
    TraceOptions options{.amp = {.level = level, .dtype = f16},
                         .backend = Backend::cuda,
                         .defer_updates = DeferUpdates::on};
    auto losses = [](auto& step, uint64_t firstBatch) {
      std::vector<double> out;
      for (uint64_t i = 0; i < 3; ++i) {
        auto [x, y] = batch(kBatch, kIn, kClasses, firstBatch + i);
        out.push_back(step(x, y).item());
      }
      return out;
    };
    Classifier net(kIn, kHidden, kClasses, 3);
    auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); }, options);
    Checkpoint checkpoint;
    checkpoint.add("model", net.model).add("optimizer", net.opt).add("scaler", net.scaler);
    losses(step, 10);
    // The state lives on the device and the last update is pending on the side
    // stream: the save reads it back after that update.
    checkpoint.save(path);
    std::vector<double> expected = losses(step, 20);

    // Rolled back on the host while the last update is still pending: that
    // update must not land on the loaded state, and the next replay uploads it
    // (and re-derives the low-precision copies).
    checkpoint.load(path);
    EXPECT_EQ(losses(step, 20), expected);
    std::vector<std::vector<double>> expectedState = stateOf(net);
    EXPECT_EQ(step.stats().traces, 1u);

    // A new run resumed from the file.
    Classifier resumed(kIn, kHidden, kClasses, 4);
    Checkpoint resumedCheckpoint;
    resumedCheckpoint.add("model", resumed.model).add("optimizer", resumed.opt).add("scaler", resumed.scaler);
    resumedCheckpoint.load(path);
    auto resumedStep = trace([&](const Tensor& a, const Tensor& b) { return resumed.step(a, b); }, options);
    EXPECT_EQ(losses(resumedStep, 20), expected);
    EXPECT_EQ(stateOf(resumed), expectedState);
  }
}

} // namespace
} // namespace jit::testing
