// Batch norm with its epilogues (Plan.h, BatchNormActivation) on the CPU:
// the fused steps against the unfused steps they replace (bit for bit where
// the arithmetic is the same: f32/f64 forwards and every gradient), f16/bf16
// forwards within DESIGN's tolerance of an f64 reference from the rounded
// inputs, the fused gradient (dx, dweight, dbias, dz) against an f64
// reference and against central differences of the fused forward, and the
// verifier, printer and plan file on fused steps.

#include "BatchNormTestPlans.h"
#include "RuntimeTestUtil.h"

#include "ampjit/runtime/PlanFile.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

using namespace ampjit::runtime;
using namespace ampjit::runtime::test;

constexpr BatchNormActivation kActivations[] = {BatchNormActivation::Relu, BatchNormActivation::AddRelu};

std::string labelOf(const BatchNormBlockShape& shape, const BatchNormBlockOptions& options) {
  return shape.label + " " + std::string(dtypeName(options.dtype)) + " " +
         std::string(batchNormActivationName(options.activation)) + (options.training ? " training" : " inference") +
         (options.affine ? "" : " without weight/bias");
}

/// Arguments for batchNormBlockPlan: data around 0 so the relu cuts about
/// half of it, positive running variances.
std::vector<Tensor> blockArguments(const Plan& plan, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> arguments;
  for (size_t i = 0; i < plan.argumentCount(); ++i) {
    const BufferDesc& buffer = plan.buffers[plan.argumentBuffer(i)];
    bool variance = buffer.name == "running_var", weight = buffer.name == "weight";
    arguments.push_back(randomTensor(buffer.type.dtype, buffer.type.shape, rng, variance || weight ? 0.5 : -1.5,
                                     variance || weight ? 1.5 : 1.5));
  }
  return arguments;
}

std::vector<Tensor> runPlan(const Plan& plan, std::vector<Tensor> arguments) {
  Expected<std::vector<Tensor>> results = cpuBackend().run(plan, arguments);
  EXPECT_TRUE(results.ok()) << results.message();
  return results.ok() ? std::move(*results) : std::vector<Tensor>{};
}

size_t argumentIndex(const Plan& plan, std::string_view name) {
  for (size_t i = 0; i < plan.argumentCount(); ++i)
    if (plan.buffers[plan.argumentBuffer(i)].name == name)
      return i;
  ADD_FAILURE() << "no argument " << name;
  return 0;
}

TEST(FusedBatchNorm, PlansVerifyAndFuseToTwoSteps) {
  for (BatchNormActivation activation : kActivations) {
    BatchNormBlockShape shape{"nhwc", {2, 3, 3, 4}, 3};
    Plan fused = batchNormBlockPlan(shape, {.activation = activation});
    Plan unfused = batchNormBlockPlan(shape, {.activation = activation, .fused = false});
    EXPECT_TRUE(verifyPlan(fused).ok()) << verifyPlan(fused).message();
    EXPECT_TRUE(verifyPlan(unfused).ok()) << verifyPlan(unfused).message();
    EXPECT_EQ(fused.steps.size(), 2u);
    EXPECT_EQ(unfused.steps.size(), activation == BatchNormActivation::AddRelu ? 5u : 4u);
  }
}

TEST(FusedBatchNorm, F32AndF64GiveTheUnfusedBits) {
  // relu(bn + z) in the compute type is what bn, add and relu compute when
  // each rounds to the compute type anyway; the gradient folds an exact select.
  uint64_t seed = 100;
  for (const BatchNormBlockShape& shape : batchNormBlockShapes())
    for (DType dtype : {DType::F32, DType::F64})
      for (BatchNormActivation activation : kActivations)
        for (bool training : {true, false})
          for (bool affine : {true, false}) {
            BatchNormBlockOptions options{dtype, activation, training, affine};
            std::string label = labelOf(shape, options);
            Plan fused = batchNormBlockPlan(shape, options);
            options.fused = false;
            Plan unfused = batchNormBlockPlan(shape, options);
            std::vector<Tensor> arguments = blockArguments(fused, seed++);
            std::vector<Tensor> fusedResults = runPlan(fused, arguments), unfusedResults = runPlan(unfused, arguments);
            ASSERT_EQ(fusedResults.size(), unfusedResults.size()) << label;
            for (size_t i = 0; i < fusedResults.size(); ++i)
              EXPECT_TRUE(fusedResults[i].bitwiseEqual(unfusedResults[i])) << label << ", result " << i;
          }
}

TEST(FusedBatchNorm, FoldedGradientGivesTheUnfusedBitsInEveryDtype) {
  // Fed the same y (the fused forward's), the fused gradient and relu_grad +
  // batch_norm_grad agree exactly: g is a select, exact in dy's dtype.
  uint64_t seed = 200;
  for (const BatchNormBlockShape& shape : batchNormBlockShapes())
    for (DType dtype : kFloatTypes)
      for (BatchNormActivation activation : kActivations) {
        BatchNormBlockOptions options{.dtype = dtype, .activation = activation};
        std::string label = labelOf(shape, options);
        Plan fused = batchNormBlockPlan(shape, options);
        std::vector<Tensor> arguments = blockArguments(fused, seed++);
        std::vector<Tensor> forward = runPlan(fused, arguments);
        ASSERT_FALSE(forward.empty()) << label;
        bool residual = activation == BatchNormActivation::AddRelu;
        const Tensor &y = forward[0], &saveMean = forward[residual ? 5 : 4], &saveInvstd = forward[residual ? 6 : 5];
        const Tensor& dy = arguments[argumentIndex(fused, "dy")];
        const Tensor& x = arguments[argumentIndex(fused, "x")];
        const Tensor& weight = arguments[argumentIndex(fused, "weight")];
        TensorType channel = saveMean.type();
        AttributeMap axis = {{"axis", shape.axis}};
        std::vector<Tensor> g = runOp("jit.relu_grad", {&dy, &y}, {dy.type()});
        ASSERT_EQ(g.size(), 1u) << label;
        std::vector<Tensor> unfused =
            runOp("jit.batch_norm_grad", {&g[0], &x, &saveMean, &saveInvstd, &weight}, {x.type(), channel, channel}, axis);
        ASSERT_EQ(unfused.size(), 3u) << label;
        for (size_t i = 0; i < 3; ++i)
          EXPECT_TRUE(forward[1 + i].bitwiseEqual(unfused[i])) << label << ", gradient " << i;
        if (residual) {
          EXPECT_TRUE(forward[4].bitwiseEqual(g[0])) << label << ", dz";
        }
      }
}

/// relu(bn(x) [+ z]) in double from the rounded inputs, with the batch's
/// (training) or the running (inference) statistics, and a bound for the
/// f32 arithmetic before the one rounding.
struct ForwardReference {
  std::vector<double> y, bound;
};

ForwardReference forwardReference(const std::vector<Tensor>& arguments, const Plan& plan,
                                  const BatchNormBlockShape& shape, const BatchNormBlockOptions& options) {
  const Tensor& x = arguments[argumentIndex(plan, "x")];
  const Tensor* z = options.activation == BatchNormActivation::AddRelu ? &arguments[argumentIndex(plan, "z")] : nullptr;
  const Tensor& weight = arguments[argumentIndex(plan, "weight")];
  const Tensor& bias = arguments[argumentIndex(plan, "bias")];
  const Tensor& runningMean = arguments[argumentIndex(plan, "running_mean")];
  const Tensor& runningVar = arguments[argumentIndex(plan, "running_var")];
  int64_t channels = shape.x[size_t(shape.axis)], inner = 1;
  for (size_t d = size_t(shape.axis) + 1; d < shape.x.size(); ++d)
    inner *= shape.x[d];
  auto channelOf = [&](int64_t i) { return (i / inner) % channels; };
  std::vector<double> mean(size_t(channels), 0), variance(size_t(channels), 0), count(size_t(channels), 0);
  for (int64_t i = 0; i < x.elementCount(); ++i) {
    mean[size_t(channelOf(i))] += x.at(i);
    count[size_t(channelOf(i))] += 1;
  }
  for (int64_t c = 0; c < channels; ++c)
    mean[size_t(c)] /= count[size_t(c)];
  for (int64_t i = 0; i < x.elementCount(); ++i) {
    double centred = x.at(i) - mean[size_t(channelOf(i))];
    variance[size_t(channelOf(i))] += centred * centred / count[size_t(channelOf(i))];
  }
  ForwardReference r;
  for (int64_t i = 0; i < x.elementCount(); ++i) {
    int64_t c = channelOf(i);
    double m = options.training ? mean[size_t(c)] : runningMean.at(c);
    double v = options.training ? variance[size_t(c)] : runningVar.at(c);
    double invstd = 1 / std::sqrt(v + 1e-3);
    double normalised = (x.at(i) - m) * invstd * weight.at(c) + bias.at(c);
    double sum = normalised + (z ? z->at(i) : 0.0);
    r.y.push_back(sum < 0 ? 0.0 : sum);
    // f32 statistics and arithmetic before the rounding to the data's dtype.
    r.bound.push_back(8 * 0x1p-24 *
                      ((std::abs(x.at(i)) + std::abs(m)) * invstd * std::abs(weight.at(c)) + std::abs(bias.at(c)) +
                       (z ? std::abs(z->at(i)) : 0.0)));
  }
  return r;
}

TEST(FusedBatchNorm, LowPrecisionForwardRoundsOnceWithinTolerance) {
  uint64_t seed = 300;
  for (const BatchNormBlockShape& shape : batchNormBlockShapes())
    for (DType dtype : {DType::F16, DType::BF16})
      for (BatchNormActivation activation : kActivations)
        for (bool training : {true, false}) {
          BatchNormBlockOptions options{.dtype = dtype, .activation = activation, .training = training};
          std::string label = labelOf(shape, options);
          Plan fused = batchNormBlockPlan(shape, options);
          std::vector<Tensor> arguments = blockArguments(fused, seed++);
          std::vector<Tensor> results = runPlan(fused, arguments);
          ASSERT_FALSE(results.empty()) << label;
          ForwardReference r = forwardReference(arguments, fused, shape, options);
          EXPECT_TRUE(allClose(results[0], r.y, toleranceFor(dtype), r.bound)) << label;
        }
}

TEST(FusedBatchNorm, LowPrecisionForwardSkipsTheUnfusedRoundings) {
  // The unfused f16 plan rounds bn(x) and the sum; the fused one does not,
  // so it is never further from the f64 reference by more than the final
  // rounding, and somewhere it differs from the unfused plan. (A fused step
  // that rounded in between would equal the unfused plan everywhere.)
  BatchNormBlockShape shape{"nhwc", {4, 5, 5, 8}, 3};
  for (DType dtype : {DType::F16, DType::BF16}) {
    BatchNormBlockOptions options{.dtype = dtype, .activation = BatchNormActivation::AddRelu};
    Plan fused = batchNormBlockPlan(shape, options);
    options.fused = false;
    Plan unfused = batchNormBlockPlan(shape, options);
    std::vector<Tensor> arguments = blockArguments(fused, 400);
    std::vector<Tensor> fusedResults = runPlan(fused, arguments), unfusedResults = runPlan(unfused, arguments);
    ASSERT_FALSE(fusedResults.empty());
    ASSERT_FALSE(unfusedResults.empty());
    EXPECT_FALSE(fusedResults[0].bitwiseEqual(unfusedResults[0])) << dtypeName(dtype);
    ForwardReference r = forwardReference(arguments, fused, shape, {.dtype = dtype, .activation = options.activation});
    double fusedError = 0, unfusedError = 0;
    for (size_t i = 0; i < r.y.size(); ++i) {
      fusedError += std::abs(fusedResults[0].at(int64_t(i)) - r.y[i]);
      unfusedError += std::abs(unfusedResults[0].at(int64_t(i)) - r.y[i]);
    }
    EXPECT_LT(fusedError, unfusedError) << dtypeName(dtype);
  }
}

TEST(FusedBatchNorm, GradientMatchesAnF64Reference) {
  // dx, dweight, dbias and dz from the rounded dy, x and y and the saved
  // statistics the step reads, in double.
  uint64_t seed = 500;
  for (const BatchNormBlockShape& shape : batchNormBlockShapes())
    for (DType dtype : kFloatTypes)
      for (BatchNormActivation activation : kActivations) {
        BatchNormBlockOptions options{.dtype = dtype, .activation = activation};
        std::string label = labelOf(shape, options);
        Plan fused = batchNormBlockPlan(shape, options);
        std::vector<Tensor> arguments = blockArguments(fused, seed++);
        std::vector<Tensor> results = runPlan(fused, arguments);
        ASSERT_FALSE(results.empty()) << label;
        bool residual = activation == BatchNormActivation::AddRelu;
        const Tensor &y = results[0], &dx = results[1], &dweight = results[2], &dbias = results[3];
        const Tensor &saveMean = results[residual ? 5 : 4], &saveInvstd = results[residual ? 6 : 5];
        const Tensor& dy = arguments[argumentIndex(fused, "dy")];
        const Tensor& x = arguments[argumentIndex(fused, "x")];
        const Tensor& weight = arguments[argumentIndex(fused, "weight")];
        int64_t channels = shape.x[size_t(shape.axis)], inner = 1;
        for (size_t d = size_t(shape.axis) + 1; d < shape.x.size(); ++d)
          inner *= shape.x[d];
        auto channelOf = [&](int64_t i) { return size_t((i / inner) % channels); };
        double count = double(x.elementCount() / channels);
        double roundoff = dtype == DType::F64 ? 0x1p-53 : 0x1p-24;
        std::vector<double> g, xhat, sumG(size_t(channels), 0), sumGXhat(size_t(channels), 0);
        std::vector<double> sumAbsG(size_t(channels), 0), sumAbsGXhat(size_t(channels), 0), dweightBound(size_t(channels), 0);
        for (int64_t i = 0; i < x.elementCount(); ++i) {
          size_t c = channelOf(i);
          double mean = saveMean.at(int64_t(c)), invstd = saveInvstd.at(int64_t(c));
          g.push_back(y.at(i) > 0 ? dy.at(i) : 0.0);
          xhat.push_back((x.at(i) - mean) * invstd);
          sumG[c] += g.back();
          sumGXhat[c] += g.back() * xhat.back();
          sumAbsG[c] += std::abs(g.back());
          sumAbsGXhat[c] += std::abs(g.back() * xhat.back());
          dweightBound[c] += 4 * roundoff * std::abs(g.back()) * (std::abs(x.at(i)) + std::abs(mean)) * invstd;
        }
        std::vector<double> expectedDx, dxBound;
        for (int64_t i = 0; i < x.elementCount(); ++i) {
          size_t c = channelOf(i);
          double invstd = saveInvstd.at(int64_t(c)), mean = saveMean.at(int64_t(c));
          double scale = weight.at(int64_t(c)) * invstd;
          expectedDx.push_back(scale / count * (count * g[size_t(i)] - sumG[c] - xhat[size_t(i)] * sumGXhat[c]));
          double terms = std::abs(g[size_t(i)]) + sumAbsG[c] / count +
                         (std::abs(xhat[size_t(i)]) + (std::abs(x.at(i)) + std::abs(mean)) * invstd) *
                             sumAbsGXhat[c] / count;
          dxBound.push_back(8 * roundoff * std::abs(scale) * terms);
        }
        Tolerance statisticsTolerance = toleranceFor(saveMean.dtype());
        EXPECT_TRUE(allClose(dx, expectedDx, toleranceFor(dtype), dxBound)) << label << ", dx";
        EXPECT_TRUE(allClose(dweight, sumGXhat, statisticsTolerance, dweightBound)) << label << ", dweight";
        EXPECT_TRUE(allClose(dbias, sumG, statisticsTolerance)) << label << ", dbias";
        if (residual) {
          EXPECT_TRUE(allClose(results[4], g, {0, 0})) << label << ", dz is g exactly";
        }
      }
}

TEST(FusedBatchNorm, GradientMatchesCentralDifferencesOfTheFusedForward) {
  // In f64: d(sum(dy * y))/d(x, weight, bias, z) of the fused forward (batch
  // statistics included) against the fused gradient's dx, dweight, dbias, dz.
  for (const BatchNormBlockShape& shape : {BatchNormBlockShape{"nhwc", {2, 2, 3, 4}, 3},
                                           BatchNormBlockShape{"nchw", {3, 2, 2, 3}, 1}})
    for (BatchNormActivation activation : kActivations) {
      BatchNormBlockOptions options{.dtype = DType::F64, .activation = activation};
      std::string label = labelOf(shape, options);
      Plan plan = batchNormBlockPlan(shape, options);
      std::vector<Tensor> arguments = blockArguments(plan, 600);
      std::vector<Tensor> results = runPlan(plan, arguments);
      ASSERT_FALSE(results.empty()) << label;
      std::vector<double> weights = arguments[argumentIndex(plan, "dy")].toDoubles();
      auto yWith = [&](size_t argument) {
        return [&, argument](const Tensor& value) {
          std::vector<Tensor> perturbed = arguments;
          perturbed[argument] = value;
          return runPlan(plan, perturbed)[0];
        };
      };
      auto check = [&](std::string_view name, const Tensor& gradient) {
        size_t argument = argumentIndex(plan, name);
        EXPECT_TRUE(allClose(gradient, numericalGradient(yWith(argument), arguments[argument], weights),
                             kGradientCheck))
            << label << ", d/d" << name;
      };
      check("x", results[1]);
      check("weight", results[2]);
      check("bias", results[3]);
      if (activation == BatchNormActivation::AddRelu)
        check("z", results[4]);
    }
}

//===----------------------------------------------------------------------===//
// Verifier, printer, plan file
//===----------------------------------------------------------------------===//

std::string verifyMessage(const Plan& plan) { return verifyPlan(plan).message(); }

Plan fusedBlock(BatchNormActivation activation, DType dtype = DType::F16) {
  return batchNormBlockPlan({"nhwc", {2, 3, 3, 4}, 3}, {.dtype = dtype, .activation = activation});
}

TEST(FusedBatchNormVerifier, ResidualIsRequiredAndHasXsType) {
  Plan plan = fusedBlock(BatchNormActivation::AddRelu);
  ASSERT_EQ(verifyMessage(plan), "");
  Plan missing = plan;
  missing.steps[0].inputs.pop_back();
  EXPECT_EQ(verifyMessage(missing), "step 0 (batch_norm from jit.batch_norm): has 5 inputs and 5 outputs but needs 6 and 5");
  Plan absent = plan;
  absent.steps[0].inputs.back() = kNoBuffer;
  EXPECT_EQ(verifyMessage(absent), "step 0 (batch_norm from jit.batch_norm): input 'z' is required but absent");
  Plan wrongType = plan;
  wrongType.steps[0].inputs.back() = wrongType.steps[0].inputs[batch_norm_slot::kRunningMean];
  EXPECT_EQ(verifyMessage(wrongType), "step 0 (batch_norm from jit.batch_norm): input 'z' (f32[4]) must be "
                                      "f16[2x3x3x4], the type of 'x' (the residual added before the relu)");
  Plan reluWithResidual = plan;
  reluWithResidual.steps[0].as<BatchNormParams>().activation = BatchNormActivation::Relu;
  EXPECT_EQ(verifyMessage(reluWithResidual),
            "step 0 (batch_norm from jit.batch_norm): has 6 inputs and 5 outputs but needs 5 and 5");
}

TEST(FusedBatchNormVerifier, GradientNeedsYAndMatchingOutputs) {
  Plan plan = fusedBlock(BatchNormActivation::AddRelu);
  ASSERT_EQ(verifyMessage(plan), "");
  std::string step1 = "step 1 (batch_norm_grad from jit.batch_norm_grad): ";
  Plan noDz = plan;
  noDz.steps[1].outputs.pop_back();
  EXPECT_EQ(verifyMessage(noDz), step1 + "has 7 inputs and 3 outputs but needs 7 and 4");
  Plan noY = plan;
  noY.steps[1].inputs[batch_norm_grad_slot::kY] = kNoBuffer;
  EXPECT_EQ(verifyMessage(noY), step1 + "input 'y' is required but absent");
  Plan yIsStatistics = plan;
  yIsStatistics.steps[1].inputs[batch_norm_grad_slot::kY] = plan.steps[1].inputs[batch_norm_grad_slot::kSaveMean];
  EXPECT_EQ(verifyMessage(yIsStatistics),
            step1 + "input 'y' (f32[4]) must be f16[2x3x3x4], the type of 'x' (the forward's output after the relu)");
  Plan biasIsData = plan;
  biasIsData.steps[1].inputs[batch_norm_grad_slot::kBias] = plan.steps[1].inputs[batch_norm_grad_slot::kX];
  EXPECT_EQ(verifyMessage(biasIsData),
            step1 + "input 'bias' (f16[2x3x3x4]) must be f32[4]: one value per channel in the statistics type");
  Plan dzIsStatistics = plan;
  dzIsStatistics.steps[1].outputs[batch_norm_grad_slot::kDz] = plan.steps[1].outputs[batch_norm_grad_slot::kDweight];
  EXPECT_EQ(verifyMessage(dzIsStatistics),
            step1 + "output 'dz' (f32[4]) must be f16[2x3x3x4], the type of 'x' (the residual's gradient)");
  Plan dzIsDx = plan;
  dzIsDx.steps[1].outputs[batch_norm_grad_slot::kDz] = plan.steps[1].outputs[batch_norm_grad_slot::kDx];
  EXPECT_EQ(verifyMessage(dzIsDx), step1 + "output 'dx' and output 'dz' both write buffer %" +
                                       std::to_string(plan.steps[1].outputs[batch_norm_grad_slot::kDx]));
  Plan plainWithExtras = plan;
  plainWithExtras.steps[1].as<BatchNormGradParams>().activation = BatchNormActivation::None;
  EXPECT_EQ(verifyMessage(plainWithExtras), step1 + "has 7 inputs and 4 outputs but needs 5 and 3");
  Plan reluWithDz = plan;
  reluWithDz.steps[1].as<BatchNormGradParams>().activation = BatchNormActivation::Relu;
  EXPECT_EQ(verifyMessage(reluWithDz), step1 + "has 7 inputs and 4 outputs but needs 7 and 3");
}

TEST(FusedBatchNormVerifier, InvalidActivationIsNamed) {
  Plan plan = fusedBlock(BatchNormActivation::Relu);
  plan.steps[0].as<BatchNormParams>().activation = BatchNormActivation(7);
  EXPECT_EQ(verifyMessage(plan), "step 0 (batch_norm from jit.batch_norm): has an invalid activation 7");
}

TEST(FusedBatchNormPlan, PrintsTheEpilogueAndItsSlots) {
  Plan plan = fusedBlock(BatchNormActivation::AddRelu);
  std::string forward = printStep(plan, 0), backward = printStep(plan, 1);
  EXPECT_NE(forward.find("batch_norm axis=3 eps=0.001 momentum=0.25 activation=add_relu f16, f32, f32, f32, f32, f16 "),
            std::string::npos)
      << forward;
  EXPECT_NE(forward.find(" z=%1 "), std::string::npos) << forward;
  EXPECT_NE(backward.find("batch_norm_grad axis=3 activation=add_relu "), std::string::npos) << backward;
  for (const char* slot : {" y=%", " bias=%", " dz=%"})
    EXPECT_NE(backward.find(slot), std::string::npos) << slot << " in " << backward;
  // No epilogue, no mention of one.
  Plan unfused = batchNormBlockPlan({"nhwc", {2, 3, 3, 4}, 3}, {.fused = false});
  EXPECT_EQ(printPlan(unfused).find("activation"), std::string::npos);
}

TEST(FusedBatchNormPlan, FileRoundTripKeepsTheEpilogues) {
  for (BatchNormActivation activation : kActivations)
    for (bool training : {true, false}) {
      Plan plan = batchNormBlockPlan({"nhwc", {2, 3, 3, 4}, 3},
                                     {.dtype = DType::BF16, .activation = activation, .training = training});
      ASSERT_EQ(verifyMessage(plan), "");
      Expected<Plan> decoded = decodePlan(encodePlan(plan), "in-memory");
      ASSERT_TRUE(decoded.ok()) << decoded.message();
      EXPECT_EQ(*decoded, plan);
    }
}

TEST(FusedBatchNormPlan, OutOfRangeActivationInAFileIsNamed) {
  Plan plan = fusedBlock(BatchNormActivation::Relu);
  std::vector<uint8_t> bytes = encodePlan(plan);
  // The forward's activation is the one byte that differs from the same plan
  // encoded with another activation (encoding does not verify).
  Plan other = plan;
  other.steps[0].as<BatchNormParams>().activation = BatchNormActivation::None;
  std::vector<uint8_t> otherBytes = encodePlan(other);
  ASSERT_EQ(bytes.size(), otherBytes.size());
  std::vector<size_t> differing;
  for (size_t i = 0; i + 8 < bytes.size(); ++i)
    if (bytes[i] != otherBytes[i])
      differing.push_back(i);
  ASSERT_EQ(differing.size(), 1u);
  bytes[differing[0]] = 9;
  uint64_t checksum = planChecksum(std::span(bytes).first(bytes.size() - 8));
  for (int k = 0; k < 8; ++k)
    bytes[bytes.size() - 8 + size_t(k)] = uint8_t(checksum >> (8 * k));
  Expected<Plan> decoded = decodePlan(bytes, "activation.bin");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.message(),
            "activation.bin: section 'STEP', step 0 (batch_norm), field 'activation': invalid value 9 (expected 0..2)");
}

} // namespace
