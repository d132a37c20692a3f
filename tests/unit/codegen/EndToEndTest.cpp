//===- EndToEndTest.cpp - the MNIST train step compiled and run on the CPU ===//
//
// The golden train-step module (examples/mnist_train_step.mlir) through the
// AMP pipeline, codegen and the CPU backend, on fixed data: training makes
// progress at every level, O1 tracks O0, and an overflowing step is skipped
// with every piece of state bit-identical and the loss scale backed off.
//
//===----------------------------------------------------------------------===//

#include "CompileExample.h"

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/PlanFile.h"


#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace rt = ampjit::runtime;
using ampjit::testing::snapshot;

namespace {

// Argument positions of examples/mnist_train_step.mlir.
constexpr size_t kImages = 0, kLabels = 1, kFirstParam = 2, kLearningRate = 14, kScale = 15,
                 kGoodSteps = 16, kBadSteps = 17, kSkippedSteps = 18;

rt::Plan compileMnistStep(const std::string &ampOptions, bool fuseElementwise = false) {
  return ampjit::testing::compileExample("mnist_train_step.mlir", ampOptions,
                                         {.fuseElementwise = fuseElementwise});
}

/// Fixed, learnable data: each label's images share a random prototype plus
/// noise, so the classifier has something to learn in a few steps.
std::vector<rt::Tensor> initialArguments(const rt::Plan &plan) {
  std::mt19937_64 generator(42);
  std::vector<rt::Tensor> arguments;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::vector<double>> prototypes(10, std::vector<double>(784));
  for (auto &prototype : prototypes)
    for (double &value : prototype)
      value = normal(generator);
  for (size_t index = 0; index < plan.argumentCount(); ++index) {
    const rt::BufferDesc &buffer = plan.buffers[plan.argumentBuffer(index)];
    std::vector<double> values(size_t(buffer.type.elementCount()), 0.0);
    if (index == kImages) {
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = prototypes[(i / 784) % 10][i % 784] + 0.5 * normal(generator);
    } else if (index == kLabels) {
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = double(i % 10);
    } else if (buffer.role == rt::BufferRole::Param && buffer.derivedFrom < 0) {
      int64_t fanIn = buffer.type.shape.size() == 2 ? buffer.type.shape[1] : 512;
      std::uniform_real_distribution<double> uniform(-1 / std::sqrt(double(fanIn)),
                                                     1 / std::sqrt(double(fanIn)));
      for (double &value : values)
        value = uniform(generator);
    } else if (index == kLearningRate) {
      values[0] = 0.01;
    } else if (index == kScale) {
      values[0] = 65536.0;
    }
    rt::Expected<rt::Tensor> tensor = rt::Tensor::fromDoubles(buffer.type.dtype, buffer.type.shape, values);
    EXPECT_TRUE(tensor.ok()) << tensor.message();
    arguments.push_back(std::move(*tensor));
  }
  rt::Status derived = rt::rederiveArguments(plan, arguments);
  EXPECT_TRUE(derived.ok()) << derived.message();
  return arguments;
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
          index == kSkippedSteps)
        continue;
      EXPECT_EQ(before[index], after[index]) << "argument " << index << " changed on a skipped step";
    }
    EXPECT_EQ(arguments[kScale].at(0), 32768.0);
    EXPECT_EQ(arguments[kGoodSteps].at(0), 0.0);
    EXPECT_EQ(arguments[kSkippedSteps].at(0), 1.0);

    // The next clean step updates again.
    std::vector<std::byte> param = snapshot(arguments)[kFirstParam];
    ASSERT_TRUE((*executable)->run(arguments).ok());
    EXPECT_NE(snapshot(arguments)[kFirstParam], param);
    EXPECT_EQ(arguments[kGoodSteps].at(0), 1.0);
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
  if (sameFinalState)
    EXPECT_EQ(snapshot(firstArguments), snapshot(secondArguments));
}

TEST(EndToEnd, FusedAndUnfusedPlansGiveTheSameBits) {
  for (const char *options : {"level=O0", "level=O1 dtype=f16", "level=O1 dtype=bf16", "level=O2 dtype=f16"}) {
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
    size_t withEpilogue = 0;
    for (const rt::Step &step : fused.steps)
      withEpilogue += step.kind == rt::StepKind::Gemm &&
                      step.as<rt::GemmParams>().epilogue == rt::GemmEpilogue::BiasRelu;
    EXPECT_EQ(withEpilogue, 2u) << "both hidden layers: matmul + bias + relu";
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

} // namespace
