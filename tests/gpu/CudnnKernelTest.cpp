// The CUDA backend's convolution, batch norm and pooling steps (Cudnn.cpp,
// PoolingKernels.cu) against the CPU kernels, one-op plans from the same
// host arguments: every kind in f32, f16, bf16 and f64, NCHW and NHWC.
//
// Convolutions differ from the CPU only in summation order (cuDNN's
// algorithms), so the slack grows with the reduction length; a bias in
// f16/bf16 is added after cuDNN rounded the sum (the CPU rounds sum + bias
// once), an error relative to the pre-bias magnitude. Batch norm sums in f32
// on the GPU and in double on the CPU. Pooling mirrors the CPU's order, so it
// must agree to the dtype's tolerance with no slack, ties and NaN included.
//
// Built with AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME (tests/unit/cuda), every
// test runs in CI against the backend itself on the emulated runtime, its
// cuDNN calls going to the host model of cuDNN (tests/emulation/EmulatedCudnn.h).

#include "BatchNormTestPlans.h"
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
#include "EmulatedCudnn.h"
#endif
#include "ConvTestShapes.h"
#include "GpuTestUtil.h"

#include "ampjit/runtime/StepBuilder.h"
#include "ampjit/runtime/WindowShape.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>

namespace ampjit::runtime::gputest {
namespace {

using test::ConvShape;
using test::PoolShape;

constexpr DType kDTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};

std::string nameOf(DType dtype) { return std::string(dtypeName(dtype)); }
std::string layoutName(bool nhwc) { return nhwc ? "nhwc" : "nchw"; }

/// An NCHW shape (OIHW for filters) in the plan's layout.
Shape inLayout(const Shape& nchw, bool nhwc) {
  return nhwc ? Shape{nchw[0], nchw[2], nchw[3], nchw[1]} : nchw;
}

Expected<Plan> planFor(std::string_view op, const std::vector<std::optional<TensorType>>& operands,
                       const std::vector<TensorType>& results, const AttributeMap& attributes,
                       const std::vector<int>& tied = {}) {
  return buildSingleOpPlan(op, operands, results, attributes, tied);
}

/// Every result of the CUDA run within `slack` of the CPU run's.
void expectResultsMatch(const BothRuns& both, double slack, const std::string& label) {
  ASSERT_EQ(both.cpuResults.size(), both.cudaResults.size()) << label;
  for (size_t i = 0; i < both.cpuResults.size(); ++i)
    EXPECT_TRUE(allClose(both.cpuResults[i], both.cudaResults[i], slack)) << label << ", result " << i;
}

DType statisticsTypeOf(DType dtype) { return dtype == DType::F64 ? DType::F64 : DType::F32; }

/// Within slack * (atol + rtol * (|expected| + scale)): for results whose
/// rounding error is relative to a magnitude (`scale`) other than their own.
::testing::AssertionResult closeAtScale(const Tensor& expected, const Tensor& actual, double slack, double scale) {
  if (expected.type() != actual.type())
    return ::testing::AssertionFailure() << "types differ";
  testing::Tolerance tolerance = testing::toleranceFor(expected.dtype());
  for (int64_t i = 0; i < expected.elementCount(); ++i) {
    double e = expected.at(i), a = actual.at(i);
    if (std::isnan(e) || std::isnan(a) || std::isinf(e) || std::isinf(a)) {
      if (!(std::isnan(e) && std::isnan(a)) && e != a)
        return ::testing::AssertionFailure() << "element " << i << ": expected " << e << ", got " << a;
      continue;
    }
    if (std::fabs(a - e) > slack * (tolerance.atol + tolerance.rtol * (std::fabs(e) + scale)))
      return ::testing::AssertionFailure() << "element " << i << ": expected " << e << ", got " << a;
  }
  return ::testing::AssertionSuccess();
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

std::vector<ConvShape> convCases() {
  return {
      {"plain 3x3 with bias", {2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, true},
      {"stride, padding, dilation", {2, 4, 9, 8}, {6, 4, 3, 2}, {2, 1}, {1, 2}, {2, 1}, 1, false},
      {"two groups with bias", {1, 4, 6, 6}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2, true},
      {"depthwise, strided", {2, 5, 7, 7}, {5, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 5, true},
      {"1x1", {3, 8, 4, 5}, {2, 8, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, false},
  };
}

/// Slack for a sum of `length` products in f32 (f64) compared with another
/// order of the same sum.
double reductionSlack(int64_t length) { return std::max(2.0, double(length) / 4.0); }

/// cuDNN may lack some f64 convolutions (NHWC, grouped); the factory then
/// says so, which is the documented behaviour rather than a wrong result.
bool unsupportedDouble(DType dtype, const Status& status) {
  return dtype == DType::F64 && status.message().find("cuDNN has no algorithm") != std::string::npos;
}

TEST_F(GpuTest, Conv2dAndItsGradientsMatchTheCpu) {
  uint32_t seed = 100;
  for (const ConvShape& c : convCases())
    for (DType dtype : kDTypes)
      for (bool nhwc : {false, true}) {
        std::string label = c.label + " " + nameOf(dtype) + " " + layoutName(nhwc);
        TensorType x{dtype, inLayout(c.x, nhwc)}, w{dtype, inLayout(c.w, nhwc)}, y{dtype, inLayout(c.y(), nhwc)};
        TensorType bias{dtype, {c.w[0]}};
        int64_t groupOut = c.w[0] / c.groups;
        struct Op {
          std::string name;
          std::vector<std::optional<TensorType>> operands;
          TensorType result;
          int64_t reduction;
        };
        std::vector<Op> ops = {
            {"jit.conv2d",
             {x, w, c.bias ? std::optional(bias) : std::nullopt},
             y,
             c.w[1] * c.w[2] * c.w[3]},
            {"jit.conv2d_grad_input", {y, w}, x, groupOut * c.w[2] * c.w[3]},
            {"jit.conv2d_grad_weight", {y, x}, w, c.x[0] * c.y()[2] * c.y()[3]},
        };
        for (const Op& op : ops) {
          Expected<Plan> plan = planFor(op.name, op.operands, {op.result}, c.attributes(nhwc));
          ASSERT_TRUE(plan.ok()) << label << " " << op.name << ": " << plan.message();
          Expected<BothRuns> both = runOnBoth(*cpu, *cuda, *plan, randomArguments(*plan, seed++));
          if (!both.ok() && unsupportedDouble(dtype, both.status())) {
            std::cout << "[ note ] " << label << " " << op.name << ": " << both.message() << "\n";
            continue;
          }
          ASSERT_TRUE(both.ok()) << label << " " << op.name << ": " << both.message();
          double slack = reductionSlack(op.reduction);
          bool roundedBeforeBias = op.name == "jit.conv2d" && c.bias && (dtype == DType::F16 || dtype == DType::BF16);
          if (roundedBeforeBias) {
            // The pre-bias sum is at most |y| + |bias| <= |y| + 1.
            EXPECT_TRUE(closeAtScale(both->cpuResults[0], both->cudaResults[0], 2.0, 1.0)) << label << " " << op.name;
          } else {
            expectResultsMatch(*both, slack, label + " " + op.name);
          }
        }
      }
}

TEST_F(GpuTest, AnInputGradientAddedToItsAccumulateInputMatchesTheCpu) {
  // out = -(conv2d_grad_input(dy, w) + t), t = -z, the convolution writing
  // over t in place: cuDNN with beta = 1 against the CPU kernel, both
  // rounding the sum once (plus z's magnitude in the bound).
  uint32_t seed = 300;
  for (const ConvShape& c : convCases())
    for (DType dtype : {DType::F32, DType::F16, DType::BF16})
      for (bool nhwc : {false, true}) {
        std::string label = c.label + " " + nameOf(dtype) + " " + layoutName(nhwc);
        TensorType x{dtype, inLayout(c.x, nhwc)}, w{dtype, inLayout(c.w, nhwc)}, y{dtype, inLayout(c.y(), nhwc)};
        test::PlanBuilder b("accumulate");
        BufferId dy = b.argument(y, BufferRole::Input, "dy"), weight = b.argument(w, BufferRole::Input, "w");
        BufferId z = b.argument(x, BufferRole::Input, "z");
        BufferId t = b.temporary(x), out = b.output(x);
        b.op("jit.neg", {z}, {t});
        b.op("jit.conv2d_grad_input", {dy, weight}, {t}, c.attributes(nhwc));
        b.op("jit.neg", {t}, {out});
        b.result(out);
        Plan plan = b.finish();
        plan.steps[1].inputs.push_back(t);
        ASSERT_TRUE(verifyPlan(plan).ok()) << label << ": " << verifyPlan(plan).message();
        Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, randomArguments(plan, seed++));
        ASSERT_TRUE(both.ok()) << label << ": " << both.message();
        // |z| <= 1 and the products' sum: the scale of the rounding.
        EXPECT_TRUE(closeAtScale(both->cpuResults[0], both->cudaResults[0],
                                 reductionSlack(c.w[0] / c.groups * c.w[2] * c.w[3]), 1.0))
            << label;
      }
}

TEST_F(GpuTest, Conv2dWithAnEmptyBatchYieldsAZeroWeightGradient) {
  for (bool nhwc : {false, true}) {
    ConvShape c{.label = "empty batch", .x = {0, 3, 5, 5}, .w = {4, 3, 3, 3}, .bias = false};
    TensorType x{DType::F32, inLayout(c.x, nhwc)}, w{DType::F32, inLayout(c.w, nhwc)};
    TensorType y{DType::F32, inLayout(c.y(), nhwc)};
    Expected<Plan> plan = planFor("jit.conv2d_grad_weight", {y, x}, {w}, c.attributes(nhwc));
    ASSERT_TRUE(plan.ok()) << plan.message();
    Expected<BothRuns> both = runOnBoth(*cpu, *cuda, *plan, randomArguments(*plan, 7));
    ASSERT_TRUE(both.ok()) << both.message();
    expectResultsMatch(*both, 1.0, "empty batch " + layoutName(nhwc));
  }
}

//===----------------------------------------------------------------------===//
// Batch norm
//===----------------------------------------------------------------------===//

struct BatchNormCase {
  Shape x;
  int64_t axis;
};

const std::vector<BatchNormCase>& batchNormCases() {
  static const std::vector<BatchNormCase> cases = {
      {{4, 3, 5, 2}, 1}, // NCHW
      {{3, 2, 2, 4}, 3}, // NHWC
      {{6, 4}, 1},       // [N, C]
      {{2, 3, 5}, 2},    // channels last, rank 3
      {{2, 3, 5}, 1},    // [N, C, L]
  };
  return cases;
}

std::string labelOf(const BatchNormCase& c, DType dtype) {
  return nameOf(dtype) + " " + shapeToString(c.x) + " axis " + std::to_string(c.axis);
}

/// Replaces argument `index` with values uniform in [low, high) (variances
/// and inverse deviations must be positive to mean anything).
void fillPositive(std::vector<Tensor>& arguments, size_t index, uint32_t seed, double low = 0.5, double high = 1.5) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<double> uniform(low, high);
  for (int64_t e = 0; e < arguments[index].elementCount(); ++e)
    arguments[index].set(e, uniform(generator));
}

TEST_F(GpuTest, BatchNormTrainingMatchesTheCpu) {
  uint32_t seed = 200;
  for (const BatchNormCase& c : batchNormCases())
    for (DType dtype : kDTypes)
      for (bool affine : {true, false}) {
        std::string label = labelOf(c, dtype) + (affine ? " affine" : " no weight/bias");
        TensorType x{dtype, c.x}, channel{statisticsTypeOf(dtype), {c.x[size_t(c.axis)]}};
        std::optional<TensorType> parameter = affine ? std::optional(channel) : std::nullopt;
        Expected<Plan> plan = planFor("jit.batch_norm", {x, parameter, parameter, channel, channel},
                                      {x, channel, channel, channel, channel},
                                      {{"axis", c.axis}, {"eps", 1e-3}, {"momentum", 0.25}});
        ASSERT_TRUE(plan.ok()) << label << ": " << plan.message();
        std::vector<Tensor> arguments = randomArguments(*plan, seed++);
        fillPositive(arguments, arguments.size() - 1, seed++);
        Expected<BothRuns> both = runOnBoth(*cpu, *cuda, *plan, arguments);
        ASSERT_TRUE(both.ok()) << label << ": " << both.message();
        expectResultsMatch(*both, 8.0, label);
      }
}

TEST_F(GpuTest, BatchNormRunningStatisticsInPlaceMatchTheCpu) {
  uint32_t seed = 300;
  for (DType dtype : kDTypes)
    for (const BatchNormCase& c : {BatchNormCase{{4, 3, 3, 3}, 1}, BatchNormCase{{2, 3, 3, 4}, 3}}) {
      std::string label = labelOf(c, dtype);
      TensorType x{dtype, c.x}, channel{statisticsTypeOf(dtype), {c.x[size_t(c.axis)]}};
      Expected<Plan> plan = planFor("jit.batch_norm", {x, channel, channel, channel, channel},
                                    {x, channel, channel, channel, channel},
                                    {{"axis", c.axis}, {"eps", 1e-5}, {"momentum", 0.1}}, {-1, -1, -1, 3, 4});
      if (!plan.ok() && plan.message().find("which it also reads") != std::string::npos)
        GTEST_SKIP() << "the plan verifier rejects in-place running statistics: " << plan.message();
      ASSERT_TRUE(plan.ok()) << label << ": " << plan.message();
      std::vector<Tensor> arguments = randomArguments(*plan, seed++);
      fillPositive(arguments, 4, seed++);
      // Two runs: the second must start from the first's updated state.
      Expected<BothRuns> both = runOnBoth(*cpu, *cuda, *plan, arguments, 2);
      ASSERT_TRUE(both.ok()) << label << ": " << both.message();
      expectResultsMatch(*both, 8.0, label);
      ASSERT_EQ(both->cpuArguments.size(), both->cudaArguments.size());
      for (size_t i = 0; i < both->cpuArguments.size(); ++i)
        EXPECT_TRUE(allClose(both->cpuArguments[i], both->cudaArguments[i], 8.0)) << label << ", argument " << i;
    }
}

TEST_F(GpuTest, BatchNormInferenceMatchesTheCpu) {
  uint32_t seed = 400;
  for (const BatchNormCase& c : batchNormCases())
    for (DType dtype : kDTypes)
      for (bool affine : {true, false}) {
        std::string label = labelOf(c, dtype) + (affine ? " affine" : " no weight/bias");
        TensorType x{dtype, c.x}, channel{statisticsTypeOf(dtype), {c.x[size_t(c.axis)]}};
        std::optional<TensorType> parameter = affine ? std::optional(channel) : std::nullopt;
        Expected<Plan> plan = planFor("jit.batch_norm_inference", {x, parameter, parameter, channel, channel}, {x},
                                      {{"axis", c.axis}, {"eps", 1e-3}});
        ASSERT_TRUE(plan.ok()) << label << ": " << plan.message();
        std::vector<Tensor> arguments = randomArguments(*plan, seed++);
        fillPositive(arguments, arguments.size() - 1, seed++);
        Expected<BothRuns> both = runOnBoth(*cpu, *cuda, *plan, arguments);
        ASSERT_TRUE(both.ok()) << label << ": " << both.message();
        expectResultsMatch(*both, 4.0, label);
      }
}

TEST_F(GpuTest, BatchNormGradMatchesTheCpu) {
  uint32_t seed = 500;
  for (const BatchNormCase& c : batchNormCases())
    for (DType dtype : kDTypes)
      for (bool withWeight : {true, false}) {
        std::string label = labelOf(c, dtype) + (withWeight ? " with weight" : " without weight");
        TensorType x{dtype, c.x}, channel{statisticsTypeOf(dtype), {c.x[size_t(c.axis)]}};
        Expected<Plan> plan =
            planFor("jit.batch_norm_grad", {x, x, channel, channel, withWeight ? std::optional(channel) : std::nullopt},
                    {x, channel, channel}, {{"axis", c.axis}});
        ASSERT_TRUE(plan.ok()) << label << ": " << plan.message();
        std::vector<Tensor> arguments = randomArguments(*plan, seed++);
        fillPositive(arguments, 3, seed++); // save_invstd
        Expected<BothRuns> both = runOnBoth(*cpu, *cuda, *plan, arguments);
        ASSERT_TRUE(both.ok()) << label << ": " << both.message();
        int64_t perChannel = x.elementCount() / c.x[size_t(c.axis)];
        expectResultsMatch(*both, reductionSlack(perChannel * 2), label);
      }
}

TEST_F(GpuTest, FusedBatchNormMatchesTheCpuOnCudnnsPathAndTheFallback) {
  // The epilogues (BatchNormActivation) against the CPU's definition. f16
  // training on rank-4 NHWC with channels a multiple of 4 runs cuDNN's fused
  // calls (reserve space passed from forward to backward); every other case,
  // and every case under AMPJIT_CUDA_FUSED_BN=0, the fallback kernels. Three
  // runs: step by step, captured, replayed.
  uint32_t seed = 550;
  for (const char* fusedCalls : {"1", "0"}) {
    ScopedEnvironment fused("AMPJIT_CUDA_FUSED_BN", fusedCalls);
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
    int64_t fusedBefore = ::ampjit::emulation::cudnnCounts().fusedBatchNorms;
#endif
    for (const test::BatchNormBlockShape& shape : test::batchNormBlockShapes())
      for (DType dtype : kDTypes)
        for (BatchNormActivation activation : {BatchNormActivation::Relu, BatchNormActivation::AddRelu})
          for (bool training : {true, false})
            for (bool affine : {true, false}) {
              test::BatchNormBlockOptions options{dtype, activation, training, affine};
              std::string label = shape.label + " " + nameOf(dtype) + " " +
                                  std::string(batchNormActivationName(activation)) +
                                  (training ? " training" : " inference") + (affine ? "" : " no weight/bias") +
                                  " AMPJIT_CUDA_FUSED_BN=" + fusedCalls;
              Plan plan = test::batchNormBlockPlan(shape, options);
              std::vector<Tensor> arguments = randomArguments(plan, seed++);
              for (size_t i = 0; i < plan.argumentCount(); ++i) {
                const std::string& name = plan.buffers[plan.argumentBuffer(i)].name;
                if (name == "running_var" || name == "weight")
                  fillPositive(arguments, i, seed++);
              }
              Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments, 3);
              ASSERT_TRUE(both.ok()) << label << ": " << both.message();
              int64_t perChannel = test::tt(dtype, shape.x).elementCount() / shape.x[size_t(shape.axis)];
              expectResultsMatch(*both, reductionSlack(perChannel * 2), label);
            }
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
    // cuDNN's fused calls ran, and only where they were allowed.
    EXPECT_EQ(::ampjit::emulation::cudnnCounts().fusedBatchNorms > fusedBefore, std::string(fusedCalls) == "1");
#endif
  }
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

std::vector<PoolShape> poolCases() {
  return {
      {"3x3 stride 2 padding 1", {2, 3, 7, 7}, {3, 3}, {2, 2}, {1, 1}},
      {"ceil mode", {1, 2, 6, 6}, {3, 3}, {2, 2}, {0, 0}, true},
      {"ceil mode, padding, excluded", {2, 2, 5, 6}, {2, 3}, {2, 2}, {1, 1}, true, false},
      {"overlapping, excluded", {1, 3, 5, 4}, {3, 3}, {1, 1}, {1, 1}, false, false},
      {"non-square", {2, 2, 8, 5}, {2, 1}, {2, 1}, {1, 0}},
  };
}

/// Small integers (many ties within a window) and two NaNs.
void makeTiesAndNaN(Tensor& x, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int> value(-2, 2);
  for (int64_t e = 0; e < x.elementCount(); ++e)
    x.set(e, double(value(generator)));
  x.set(x.elementCount() / 3, std::nan(""));
  x.set(x.elementCount() / 3 + 1, std::nan(""));
}

TEST_F(GpuTest, PoolingAndItsGradientsMatchTheCpu) {
  uint32_t seed = 600;
  // 32-bit index arithmetic (every case here fits) and, forced, 64-bit.
  for (const char* wide : {"0", "1"}) {
    ScopedEnvironment indexWidth("AMPJIT_CUDA_WIDE_INDEX", wide);
    for (const PoolShape& c : poolCases())
      for (DType dtype : kDTypes)
        for (bool nhwc : {false, true})
          for (bool average : {false, true})
            for (bool ties : {false, true}) {
              std::string label = c.label + " " + nameOf(dtype) + " " + layoutName(nhwc) +
                                  (average ? " average" : " max") + (ties ? " ties and NaN" : "") +
                                  " AMPJIT_CUDA_WIDE_INDEX=" + wide;
              TensorType x{dtype, inLayout(c.x, nhwc)}, y{dtype, inLayout(c.y(), nhwc)};
              std::string forward = average ? "jit.avg_pool2d" : "jit.max_pool2d";
              std::string backward = forward + "_grad";
              AttributeMap attributes = c.attributes(average, nhwc);

              Expected<Plan> pool = planFor(forward, {x}, {y}, attributes);
              ASSERT_TRUE(pool.ok()) << label << ": " << pool.message();
              std::vector<Tensor> arguments = randomArguments(*pool, seed++);
              if (ties)
                makeTiesAndNaN(arguments[0], seed++);
              Expected<BothRuns> both = runOnBoth(*cpu, *cuda, *pool, arguments);
              ASSERT_TRUE(both.ok()) << label << ": " << both.message();
              expectResultsMatch(*both, 1.0, label + " " + forward);

              Expected<Plan> grad = planFor(backward, {y, x}, {x}, attributes);
              ASSERT_TRUE(grad.ok()) << label << ": " << grad.message();
              std::vector<Tensor> gradArguments = randomArguments(*grad, seed++);
              if (ties)
                gradArguments[1] = std::move(arguments[0]);
              both = runOnBoth(*cpu, *cuda, *grad, gradArguments);
              ASSERT_TRUE(both.ok()) << label << ": " << both.message();
              expectResultsMatch(*both, 1.0, label + " " + backward);
            }
  }
}

} // namespace
} // namespace ampjit::runtime::gputest
