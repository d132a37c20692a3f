//===- EndToEndTest.cpp - the MNIST train step compiled and run on the CPU ===//
//
// The golden train-step module (examples/mnist_train_step.mlir) through the
// AMP pipeline, codegen and the CPU backend, on fixed data: training makes
// progress at every level, O1 tracks O0, and an overflowing step is skipped
// with every piece of state bit-identical and the loss scale backed off.
//
//===----------------------------------------------------------------------===//

#include "CompileExample.h"
#include "Tolerance.h"

#include "ampjit/Codegen/PlanBuilder.h"
#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/PlanFile.h"


#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace rt = ampjit::runtime;
using ampjit::testing::snapshot;

namespace {

using namespace ampjit::testing::mnist_step;
using ampjit::testing::initialArguments;
using ampjit::testing::StepData;

rt::Plan compileMnistStep(const std::string &ampOptions, bool fuseElementwise = false) {
  return ampjit::testing::compileExample("mnist_train_step.mlir", ampOptions,
                                         {.fuseElementwise = fuseElementwise});
}

std::vector<double> trainLosses(const std::string &ampOptions, int steps) {
  rt::Plan plan = compileMnistStep(ampOptions);
  std::vector<rt::Tensor> arguments = initialArguments(plan);
  std::unique_ptr<rt::Backend> backend = rt::createCpuBackend();
  rt::Expected<std::unique_ptr<rt::Executable>> executable = backend->prepare(plan);
  EXPECT_TRUE(executable.ok()) << executable.message();
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    rt::Expected<std::vector<rt::Tensor>> results = (*executable)->run(arguments);
    EXPECT_TRUE(results.ok()) << results.message();
    if (!results.ok())
      break;
    losses.push_back(results->front().at(0));
  }
  return losses;
}

TEST(EndToEnd, EveryLevelLearnsAndO1TracksO0) {
  constexpr int kSteps = 50;
  std::vector<double> fp32 = trainLosses("level=O0", kSteps);
  ASSERT_EQ(fp32.size(), size_t(kSteps));
  EXPECT_LT(fp32.back(), 0.9 * fp32.front());
  for (const char *options : {"level=O1 dtype=f16", "level=O1 dtype=bf16", "level=O2 dtype=f16"}) {
    SCOPED_TRACE(options);
    std::vector<double> mixed = trainLosses(options, kSteps);
    ASSERT_EQ(mixed.size(), size_t(kSteps));
    EXPECT_LT(mixed.back(), 0.9 * mixed.front());
    if (std::string(options).find("O1") != std::string::npos) {
      for (int step = 0; step < kSteps; ++step)
        EXPECT_NEAR(mixed[step], fp32[step], 1e-2 * std::abs(fp32[step])) << "step " << step;
    }
  }
}

TEST(EndToEnd, AnInfInOneStepSkipsExactlyThatStep) {
  for (const char *options : {"level=O1 dtype=f16", "level=O2 dtype=f16"}) {
    SCOPED_TRACE(options);
    rt::Plan plan = compileMnistStep(options);
    std::vector<rt::Tensor> arguments = initialArguments(plan);
    std::unique_ptr<rt::Backend> backend = rt::createCpuBackend();
    auto executable = backend->prepare(plan);
    ASSERT_TRUE(executable.ok()) << executable.message();
    ASSERT_TRUE((*executable)->run(arguments).ok());
    ASSERT_EQ(arguments[kGoodSteps].at(0), 1.0);

    // One image element becomes inf: every gradient of the first layer is
    // non-finite, so the update must not happen.
    std::vector<std::vector<std::byte>> before = snapshot(arguments);
    double images0 = arguments[kImages].at(0);
    arguments[kImages].set(0, std::numeric_limits<double>::infinity());
    ASSERT_TRUE((*executable)->run(arguments).ok());
    arguments[kImages].set(0, images0);
    std::vector<std::vector<std::byte>> after = snapshot(arguments);
    for (size_t index = 0; index < arguments.size(); ++index) {
      if (index == kImages || index == kScale || index == kGoodSteps || index == kBadSteps ||
          index == kSkippedSteps || index == kLastStepFinite)
        continue;
      EXPECT_EQ(before[index], after[index]) << "argument " << index << " changed on a skipped step";
    }
    EXPECT_EQ(arguments[kScale].at(0), 32768.0);
    EXPECT_EQ(arguments[kGoodSteps].at(0), 0.0);
    EXPECT_EQ(arguments[kSkippedSteps].at(0), 1.0);
    EXPECT_EQ(arguments[kLastStepFinite].at(0), 0.0) << "the step that overflowed is kept as not finite";

    // The next clean step updates again.
    std::vector<std::byte> param = snapshot(arguments)[kFirstParam];
    ASSERT_TRUE((*executable)->run(arguments).ok());
    EXPECT_NE(snapshot(arguments)[kFirstParam], param);
    EXPECT_EQ(arguments[kGoodSteps].at(0), 1.0);
    EXPECT_EQ(arguments[kLastStepFinite].at(0), 1.0);
  }
}

/// Runs two plans of the same step for 3 steps from the same initial
/// arguments on the CPU, handing each step's results to `compare`; with
/// `sameFinalState`, the state must end bit for bit equal.
template <typename Compare>
void runSideBySide(const rt::Plan &first, const rt::Plan &second, Compare compare, bool sameFinalState) {
  std::vector<rt::Tensor> firstArguments = initialArguments(first), secondArguments = initialArguments(second);
  std::unique_ptr<rt::Backend> backend = rt::createCpuBackend();
  auto firstExecutable = backend->prepare(first), secondExecutable = backend->prepare(second);
  ASSERT_TRUE(firstExecutable.ok()) << firstExecutable.message();
  ASSERT_TRUE(secondExecutable.ok()) << secondExecutable.message();
  for (int step = 0; step < 3; ++step) {
    auto firstResults = (*firstExecutable)->run(firstArguments);
    auto secondResults = (*secondExecutable)->run(secondArguments);
    ASSERT_TRUE(firstResults.ok() && secondResults.ok());
    compare(step, *firstResults, *secondResults);
  }
  if (sameFinalState) {
    EXPECT_EQ(snapshot(firstArguments), snapshot(secondArguments));
  }
}

TEST(EndToEnd, FusedAndUnfusedPlansGiveTheSameBits) {
  for (const char *options : {"level=O0", "level=O1 dtype=f16", "level=O1 dtype=bf16", "level=O2 dtype=f16",
                              "level=O2 dtype=bf16", "level=O3 dtype=f16", "level=O3 dtype=bf16"}) {
    SCOPED_TRACE(options);
    rt::Plan unfused = compileMnistStep(options), fused = compileMnistStep(options, true);
    size_t fusedSteps = 0;
    for (const rt::Step &step : fused.steps)
      fusedSteps += step.kind == rt::StepKind::FusedElementwise;
    EXPECT_GT(fusedSteps, 0u);
    EXPECT_LT(fused.steps.size(), unfused.steps.size());
    runSideBySide(unfused, fused, [](int step, const auto &plainResults, const auto &fusedResults) {
      EXPECT_EQ(snapshot(plainResults), snapshot(fusedResults)) << "step " << step;
    }, /*sameFinalState=*/true);
  }
}

size_t countEpilogues(const rt::Plan &plan, rt::GemmEpilogue epilogue) {
  size_t count = 0;
  for (const rt::Step &step : plan.steps)
    count += step.kind == rt::StepKind::Gemm && step.as<rt::GemmParams>().epilogue == epilogue;
  return count;
}

TEST(EndToEnd, GemmEpiloguesKeepF32BitsAndRoundOnceLess) {
  // The CUDA pipeline folds bias adds and relus into the GEMMs. In f32 the
  // epilogue computes exactly the unfused steps' bits; in f16 it skips one
  // rounding of the product, so the losses stay within f16's tolerance.
  for (const char *options : {"level=O0", "level=O1 dtype=f16"}) {
    SCOPED_TRACE(options);
    bool lowPrecision = std::string(options) != "level=O0";
    rt::Plan unfused = compileMnistStep(options, true);
    rt::Plan fused = ampjit::testing::compileExample("mnist_train_step.mlir", options,
                                                     {.fuseElementwise = true, .fuseGemmEpilogues = true});
    EXPECT_EQ(countEpilogues(fused, rt::GemmEpilogue::BiasRelu), 2u) << "both hidden layers: matmul + bias + relu";
    // Each weight gradient takes its bias gradient in f32; AMP sums the
    // low-precision gradients in f32, which cuBLASLt's C-typed bias
    // gradient cannot hold, so those sums stay steps.
    EXPECT_EQ(countEpilogues(fused, rt::GemmEpilogue::BiasGradA), lowPrecision ? 0u : 3u);
    EXPECT_LT(fused.steps.size(), unfused.steps.size());
    runSideBySide(unfused, fused, [&](int step, const auto &plainResults, const auto &fusedResults) {
      double plainLoss = plainResults.front().at(0), fusedLoss = fusedResults.front().at(0);
      if (lowPrecision)
        EXPECT_NEAR(fusedLoss, plainLoss, 1e-2 * std::fabs(plainLoss)) << "step " << step;
      else
        EXPECT_EQ(snapshot(plainResults), snapshot(fusedResults)) << "step " << step;
    }, /*sameFinalState=*/!lowPrecision);
  }
}

/// Arguments of examples/gelu_mlp_train_step.mlir, laid out as the MNIST
/// step's (x, labels, 6 parameters, 6 momentum buffers, lr, the scaler's state).
std::vector<rt::Tensor> geluStepArguments(const rt::Plan &plan) {
  return initialArguments(plan, {.seed = 7, .classes = 8, .defaultFanIn = 64, .learningRate = 0.05});
}

TEST(EndToEnd, GeluAndGradientEpiloguesOnATracedStep) {
  // A traced GELU(tanh) MLP step with every epilogue the CUDA pipeline
  // folds, run on the CPU against the same plan without them: in f32 the
  // same bits (losses, parameters, momentum, scaler), in f16/bf16 the same
  // training within the dtype's tolerance.
  // The hidden layers' bias gradients fold into gelu's gradient, and the
  // logits' into its weight gradient, where the sum is in C's dtype: f32 at
  // O0, bf16 at O2-bf16; elsewhere AMP sums in f32 and the sums stay steps.
  struct Case {
    const char *options;
    bool lowPrecision, biasGradientsFold;
  };
  for (Case c : {Case{"level=O0", false, true}, Case{"level=O1 dtype=f16", true, false},
                 Case{"level=O1 dtype=bf16", true, false}, Case{"level=O2 dtype=f16", true, false},
                 Case{"level=O2 dtype=bf16", true, true}}) {
    SCOPED_TRACE(c.options);
    rt::Plan unfused = ampjit::testing::compileExample("gelu_mlp_train_step.mlir", c.options, {.fuseElementwise = true});
    rt::Plan fused = ampjit::testing::compileExample("gelu_mlp_train_step.mlir", c.options,
                                                     {.fuseElementwise = true, .fuseGemmEpilogues = true});
    EXPECT_EQ(countEpilogues(fused, rt::GemmEpilogue::BiasGeluAux), 2u) << "both hidden layers keep gelu's input";
    EXPECT_EQ(countEpilogues(fused, rt::GemmEpilogue::DGeluBiasGrad), c.biasGradientsFold ? 2u : 0u);
    EXPECT_EQ(countEpilogues(fused, rt::GemmEpilogue::DGelu), c.biasGradientsFold ? 0u : 2u);
    EXPECT_EQ(countEpilogues(fused, rt::GemmEpilogue::BiasGradA), c.biasGradientsFold ? 1u : 0u) << "the logits' layer";
    EXPECT_LT(fused.steps.size(), unfused.steps.size());

    std::vector<rt::Tensor> plainArguments = geluStepArguments(unfused), fusedArguments = geluStepArguments(fused);
    std::unique_ptr<rt::Backend> backend = rt::createCpuBackend();
    auto plainExecutable = backend->prepare(unfused), fusedExecutable = backend->prepare(fused);
    ASSERT_TRUE(plainExecutable.ok()) << plainExecutable.message();
    ASSERT_TRUE(fusedExecutable.ok()) << fusedExecutable.message();
    double firstLoss = 0, lastLoss = 0;
    for (int step = 0; step < 5; ++step) {
      auto plainResults = (*plainExecutable)->run(plainArguments);
      auto fusedResults = (*fusedExecutable)->run(fusedArguments);
      ASSERT_TRUE(plainResults.ok() && fusedResults.ok());
      double plainLoss = plainResults->front().at(0), fusedLoss = fusedResults->front().at(0);
      (step == 0 ? firstLoss : lastLoss) = fusedLoss;
      if (c.lowPrecision)
        EXPECT_NEAR(fusedLoss, plainLoss, 1e-2 * std::fabs(plainLoss)) << "step " << step;
      else
        EXPECT_EQ(snapshot(*plainResults), snapshot(*fusedResults)) << "step " << step;
    }
    EXPECT_LT(lastLoss, firstLoss) << "the fused step trains";
    if (!c.lowPrecision) {
      EXPECT_EQ(snapshot(plainArguments), snapshot(fusedArguments));
      continue;
    }
    // The parameters' (f32 masters') change over the 5 steps: the same within
    // a few roundings of the dtype, norm-wise (an element's own change may be
    // near 0 where its gradient's rounding is not).
    std::vector<rt::Tensor> initial = geluStepArguments(unfused);
    bool bf16 = std::string(c.options).find("bf16") != std::string::npos;
    double rtol = ampjit::testing::toleranceFor(bf16 ? rt::DType::BF16 : rt::DType::F16).rtol;
    for (size_t index = kFirstParam; index < kFirstParam + 6; ++index) {
      double difference = 0, change = 0;
      for (int64_t e = 0; e < plainArguments[index].elementCount(); ++e) {
        double plainChange = plainArguments[index].at(e) - initial[index].at(e);
        double fusedChange = fusedArguments[index].at(e) - initial[index].at(e);
        difference += (fusedChange - plainChange) * (fusedChange - plainChange);
        change += plainChange * plainChange;
      }
      EXPECT_LE(std::sqrt(difference), 4.0 * rtol * std::sqrt(change)) << "argument " << index;
    }
  }
}

TEST(EndToEnd, SavedPlanLoadsAndRunsIdentically) {
  rt::Plan plan = compileMnistStep("level=O1 dtype=bf16");
  rt::Expected<rt::Plan> decoded = rt::decodePlan(rt::encodePlan(plan), "in-memory");
  ASSERT_TRUE(decoded.ok()) << decoded.message();
  EXPECT_EQ(*decoded, plan);
}

TEST(EndToEnd, PoisonedFreedTemporariesDoNotChangeResults) {
  rt::Plan plan = compileMnistStep("level=O1 dtype=f16");
  std::vector<rt::Tensor> plain = initialArguments(plan), poisoned = initialArguments(plan);
  auto run = [&](rt::CpuBackendOptions options, std::vector<rt::Tensor> &arguments) {
    std::unique_ptr<rt::Backend> backend = rt::createCpuBackend(options);
    auto executable = backend->prepare(plan);
    EXPECT_TRUE(executable.ok()) << executable.message();
    for (int step = 0; step < 3; ++step)
      EXPECT_TRUE((*executable)->run(arguments).ok());
  };
  run({}, plain);
  run({.poisonFreedTemporaries = true}, poisoned);
  EXPECT_EQ(snapshot(plain), snapshot(poisoned));
}

TEST(EndToEnd, DeferredUpdatesGiveTheSameBitsOnceCompleted) {
  // Also on the CUDA pipeline's plans (GEMM epilogues), run here on the CPU.
  for (bool epilogues : {false, true})
  for (const char *options : {"level=O0", "level=O1 dtype=f16", "level=O2 dtype=f16", "level=O2 dtype=bf16"}) {
    SCOPED_TRACE(std::string(options) + (epilogues ? ", GEMM epilogues" : ""));
    rt::Plan plain = ampjit::testing::compileExample("mnist_train_step.mlir", options,
                                                     {.fuseElementwise = true, .fuseGemmEpilogues = epilogues});
    rt::Plan deferred = ampjit::testing::compileExample(
        "mnist_train_step.mlir", options,
        {.fuseElementwise = true, .fuseGemmEpilogues = epilogues, .deferOptimizerUpdates = true});
    ASSERT_EQ(deferred.deferredSteps, 6u) << rt::printPlan(deferred);
    // Freed temporaries poisoned: carried values live outside the arena.
    std::unique_ptr<rt::Backend> backend = rt::createCpuBackend({.poisonFreedTemporaries = true});
    auto plainStep = backend->prepare(plain), deferredStep = backend->prepare(deferred);
    ASSERT_TRUE(plainStep.ok() && deferredStep.ok()) << deferredStep.message();
    std::vector<rt::Tensor> plainArguments = initialArguments(plain), deferredArguments = initialArguments(deferred);
    std::vector<std::vector<std::byte>> initial = snapshot(deferredArguments);
    for (int step = 0; step < 4; ++step) {
      auto plainResults = (*plainStep)->run(plainArguments);
      auto deferredResults = (*deferredStep)->run(deferredArguments);
      ASSERT_TRUE(plainResults.ok() && deferredResults.ok()) << deferredResults.message();
      EXPECT_EQ(snapshot(*plainResults).front(), snapshot(*deferredResults).front()) << "loss of step " << step;
      if (step == 0) { // the first update is still pending: the parameters are the initial ones
        EXPECT_EQ(snapshot(deferredArguments)[kFirstParam], initial[kFirstParam]);
      }
    }
    ASSERT_TRUE((*deferredStep)->completeDeferred(deferredArguments).ok());
    EXPECT_EQ(snapshot(plainArguments), snapshot(deferredArguments));
  }
}

TEST(EndToEnd, TheDeferredUpdateIsOrderedByTheStepsThatNeedIt) {
  rt::Plan plan = ampjit::testing::compileExample("mnist_train_step.mlir", "level=O2 dtype=f16",
                                                  {.fuseElementwise = true, .deferOptimizerUpdates = true});
  ASSERT_EQ(plan.deferredSteps, 6u);
  const size_t deferred = plan.deferredSteps;
  // The first update writes the low-precision weight the first GEMM reads.
  size_t firstGemm = deferred;
  while (plan.steps[firstGemm].kind != rt::StepKind::Gemm)
    ++firstGemm;
  const rt::Step &firstUpdate = plan.steps[0];
  ASSERT_EQ(firstUpdate.kind, rt::StepKind::OptimizerUpdate);
  EXPECT_NE(std::find(firstUpdate.outputs.begin(), firstUpdate.outputs.end(), plan.steps[firstGemm].inputs[1]),
            firstUpdate.outputs.end())
      << rt::printPlan(plan);
  // The learning rate the update reads is the run's own, copied before the
  // run ends; the scale update stays in the run.
  rt::BufferId lrRead = firstUpdate.inputs[4];
  EXPECT_EQ(plan.buffers[lrRead].role, rt::BufferRole::Carried);
  bool copied = false, scaleUpdated = false;
  for (size_t index = deferred; index < plan.steps.size(); ++index) {
    const rt::Step &step = plan.steps[index];
    copied |= step.kind == rt::StepKind::Elementwise && step.outputs[0] == lrRead &&
              step.inputs[0] == plan.argumentBuffer(kLearningRate);
    scaleUpdated |= step.kind == rt::StepKind::UpdateScale;
  }
  EXPECT_TRUE(copied);
  EXPECT_TRUE(scaleUpdated);
  for (size_t index = 0; index < deferred; ++index)
    EXPECT_EQ(plan.steps[index].kind, rt::StepKind::OptimizerUpdate) << index;
  rt::Expected<rt::Plan> decoded = rt::decodePlan(rt::encodePlan(plan), "in-memory");
  ASSERT_TRUE(decoded.ok()) << decoded.message();
  EXPECT_EQ(*decoded, plan);
}

TEST(EndToEnd, DeferringMovesEachParameterCastToItsLayer) {
  // At O1 the parameters' casts to f16 come first in the traced step; left
  // there, every layer's deferred update would be due before the first GEMM.
  rt::Plan plan = ampjit::testing::compileExample(
      "mnist_train_step.mlir", "level=O1 dtype=f16",
      {.fuseElementwise = true, .fuseGemmEpilogues = true, .deferOptimizerUpdates = true});
  ASSERT_EQ(plan.deferredSteps, 6u);
  std::vector<size_t> deadlines = rt::deferredStepDeadlines(plan);
  auto gemmsBefore = [&](size_t index) {
    return std::count_if(plan.steps.begin() + plan.deferredSteps, plan.steps.begin() + index,
                         [](const rt::Step &step) { return step.kind == rt::StepKind::Gemm; });
  };
  std::vector<size_t> gemmsBeforeDeadline;
  for (size_t u = 0; u < plan.deferredSteps; ++u) {
    const rt::Step &due = plan.steps[deadlines[u]];
    SCOPED_TRACE(rt::printStep(plan, deadlines[u]));
    rt::BufferId param = plan.steps[u].inputs[rt::sgd_slot::kParam];
    EXPECT_NE(std::find(due.inputs.begin(), due.inputs.end(), param), due.inputs.end());
    gemmsBeforeDeadline.push_back(size_t(gemmsBefore(deadlines[u])));
  }
  // Each hidden layer's weight and bias are due at their casts, just before
  // the layer's GEMM; the last bias, added in f32, after the last GEMM.
  std::sort(gemmsBeforeDeadline.begin(), gemmsBeforeDeadline.end());
  EXPECT_EQ(gemmsBeforeDeadline, (std::vector<size_t>{0, 0, 1, 1, 2, 3})) << rt::printPlan(plan);
}

/// A linear layer's backward on a batch of `rows`: the weight gradient
/// dW = dY^T X (checked and returned), then the input gradient dX = dY W.
std::string linearBackward(int64_t rows, int64_t features) {
  std::string x = "tensor<" + std::to_string(rows) + "x" + std::to_string(features) + "xf16>";
  std::string w = "tensor<" + std::to_string(features) + "x" + std::to_string(features) + "xf16>";
  return "func.func @step(%x: " + x + " {jit.role = \"input\"}, %dy: " + x + " {jit.role = \"input\"}, %w: " + w +
         " {jit.role = \"input\"}) -> (tensor<i1>, " + x + ", " + w + ") {\n"
         "  %dw = jit.matmul %dy, %x {transpose_lhs} : (" + x + ", " + x + ") -> " + w + "\n"
         "  %dx = jit.matmul %dy, %w : (" + x + ", " + w + ") -> " + x + "\n"
         "  %ok = amp.all_finite %dw : " + w + "\n"
         "  return %ok, %dx, %dw : tensor<i1>, " + x + ", " + w + "\n}\n";
}

TEST(EndToEnd, SmallGemmsWeightGradientsRunBesideAndLargeOnesInLine) {
  // 64 x 512 x 512: launch-bound, so dW runs beside dX until the check.
  rt::Plan small = ampjit::testing::compileSource(linearBackward(64, 512), "small", "",
                                                  {.overlapWeightGradients = true})
                       .plan;
  ASSERT_EQ(small.sideSteps.size(), 1u) << rt::printPlan(small);
  EXPECT_EQ(small.sideSteps[0], (rt::SideStep{0, 2}));
  // mlp9's 2048 x 8192 x 8192 fills the GPU on its own: in line.
  rt::Plan large = ampjit::testing::compileSource(linearBackward(2048, 8192), "large", "",
                                                  {.overlapWeightGradients = true})
                       .plan;
  ASSERT_EQ(large.steps.size(), 3u);
  EXPECT_GT(2.0 * 2048 * 8192 * 8192, ampjit::codegen::kMaxSideGemmFlops);
  EXPECT_TRUE(large.sideSteps.empty()) << rt::printPlan(large);
  // A product something other than the update reads is no weight gradient.
  std::string readTwice = linearBackward(64, 512);
  readTwice.replace(readTwice.find("%dx = jit.matmul %dy, %w"), 24, "%dx = jit.matmul %x, %dw");
  rt::Plan read = ampjit::testing::compileSource(readTwice, "read", "", {.overlapWeightGradients = true}).plan;
  ASSERT_EQ(read.steps.size(), 3u);
  EXPECT_TRUE(read.sideSteps.empty()) << rt::printPlan(read);
}

TEST(EndToEnd, DeferringSaysWhyItDoesNot) {
  rt::Plan plan = compileMnistStep("level=O1 dtype=f16", true), original = plan;
  ampjit::codegen::DeferralResult small = ampjit::codegen::deferOptimizerUpdates(plan, int64_t(1) << 30);
  EXPECT_EQ(small.deferredSteps, 0u);
  EXPECT_EQ(small.whyNot, "its update covers 669706 parameter elements, fewer than the 1073741824 that make "
                          "deferring pay");
  EXPECT_EQ(plan, original);

  // Nor can a result that is a parameter the update writes (returned untied).
  rt::BufferId weight = plan.argumentBuffer(kFirstParam);
  rt::Plan returnsWeight = original;
  returnsWeight.results.push_back(rt::PlanResult{weight, -1});
  ampjit::codegen::DeferralResult returned = ampjit::codegen::deferOptimizerUpdates(returnsWeight);
  EXPECT_EQ(returned.deferredSteps, 0u);
  EXPECT_EQ(returned.whyNot, "the run returns buffer %2 'arg2', which its update writes");

  // A result computed from the updated parameters cannot wait for the next run.
  rt::BufferId copy = rt::BufferId(plan.buffers.size());
  plan.buffers.push_back(rt::BufferDesc{.type = plan.buffers[weight].type, .role = rt::BufferRole::Output});
  rt::Step read;
  read.kind = rt::StepKind::Elementwise;
  read.params = rt::ElementwiseParams{.op = rt::ElementwiseOp::Convert};
  read.inputs = {weight};
  read.outputs = {copy};
  read.origin = "jit.convert";
  plan.steps.push_back(read);
  plan.results.push_back(rt::PlanResult{copy, -1});
  rt::Plan withResult = plan;
  ampjit::codegen::DeferralResult refused = ampjit::codegen::deferOptimizerUpdates(plan);
  EXPECT_EQ(refused.deferredSteps, 0u);
  EXPECT_NE(refused.whyNot.find("(elementwise from jit.convert) computes a result of the run from the updated state"),
            std::string::npos)
      << refused.whyNot;
  EXPECT_EQ(plan, withResult);
}

} // namespace
