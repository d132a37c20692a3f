//===- ConvertLayoutTest.cpp - jit-convert-layout keeps every bit ---------===//
//
// A small residual conv net's training step (conv2d + bias, batch norm,
// ReLU, max pooling, a second conv2d and batch norm, the residual add, the
// spatial mean, a linear classifier, cross-entropy; every gradient; SGD)
// compiled to a plan with and without jit-convert-layout and run on the CPU
// backend from the same random state. The pass only moves data and the CPU
// kernels compute in one canonical order whatever the layout, so every
// result and every piece of updated state must agree bit for bit, step after
// step. The converted plan must really run NHWC (conv, pool and batch-norm
// steps) with only the edge transposes left.
//
//===----------------------------------------------------------------------===//

#include "CompileExample.h"

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/CpuBackend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace rt = ampjit::runtime;
using ampjit::testing::snapshot;

namespace {

// Arguments: 0 images, 1 labels, 2-10 parameters, 11-14 running statistics,
// 15 learning rate. Results: the loss, the first filter's gradient (a
// function result, which must stay OIHW), then the tied state.
constexpr size_t kImages = 0, kLabels = 1, kFirstRunningStat = 11, kLearningRate = 15;

constexpr const char *kResidualStep = R"mlir(
func.func @residual_step(
    %x: tensor<4x3x12x12xf32> {jit.role = "input"}, %labels: tensor<4xi64> {jit.role = "input"},
    %w1: tensor<8x3x3x3xf32> {jit.role = "param"}, %b1: tensor<8xf32> {jit.role = "param"},
    %g1: tensor<8xf32> {jit.role = "param"}, %beta1: tensor<8xf32> {jit.role = "param"},
    %w2: tensor<8x8x3x3xf32> {jit.role = "param"}, %g2: tensor<8xf32> {jit.role = "param"},
    %beta2: tensor<8xf32> {jit.role = "param"}, %wfc: tensor<10x8xf32> {jit.role = "param"},
    %bfc: tensor<10xf32> {jit.role = "param"},
    %rm1: tensor<8xf32> {jit.role = "hyper"}, %rv1: tensor<8xf32> {jit.role = "hyper"},
    %rm2: tensor<8xf32> {jit.role = "hyper"}, %rv2: tensor<8xf32> {jit.role = "hyper"},
    %lr: tensor<f32> {jit.role = "hyper"})
    -> (tensor<f32>, tensor<8x3x3x3xf32>,
        tensor<8x3x3x3xf32> {jit.tied = 2 : i64}, tensor<8xf32> {jit.tied = 3 : i64},
        tensor<8xf32> {jit.tied = 4 : i64}, tensor<8xf32> {jit.tied = 5 : i64},
        tensor<8x8x3x3xf32> {jit.tied = 6 : i64}, tensor<8xf32> {jit.tied = 7 : i64},
        tensor<8xf32> {jit.tied = 8 : i64}, tensor<10x8xf32> {jit.tied = 9 : i64},
        tensor<10xf32> {jit.tied = 10 : i64},
        tensor<8xf32> {jit.tied = 11 : i64}, tensor<8xf32> {jit.tied = 12 : i64},
        tensor<8xf32> {jit.tied = 13 : i64}, tensor<8xf32> {jit.tied = 14 : i64}) {
  %c1 = jit.conv2d %x, %w1 bias %b1 stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<4x3x12x12xf32>, tensor<8x3x3x3xf32>, tensor<8xf32>) -> tensor<4x8x12x12xf32>
  %y1, %mean1, %invstd1, %rm1_new, %rv1_new = jit.batch_norm %c1 weight %g1 bias %beta1
      running_mean %rm1 running_var %rv1 axis = 1 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<4x8x12x12xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<4x8x12x12xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %r1 = jit.relu %y1 : tensor<4x8x12x12xf32>
  %p = jit.max_pool2d %r1 kernel_size = [3, 3] stride = [2, 2] padding = [1, 1]
      : tensor<4x8x12x12xf32> -> tensor<4x8x6x6xf32>
  %c2 = jit.conv2d %p, %w2 stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<4x8x6x6xf32>, tensor<8x8x3x3xf32>) -> tensor<4x8x6x6xf32>
  %y2, %mean2, %invstd2, %rm2_new, %rv2_new = jit.batch_norm %c2 weight %g2 bias %beta2
      running_mean %rm2 running_var %rv2 axis = 1 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<4x8x6x6xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<4x8x6x6xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %a = jit.add %y2, %p : (tensor<4x8x6x6xf32>, tensor<4x8x6x6xf32>) -> tensor<4x8x6x6xf32>
  %r2 = jit.relu %a : tensor<4x8x6x6xf32>
  %m = jit.mean %r2 axes = [2, 3] : tensor<4x8x6x6xf32> -> tensor<4x8xf32>
  %h = jit.matmul %m, %wfc {transpose_rhs} : (tensor<4x8xf32>, tensor<10x8xf32>) -> tensor<4x10xf32>
  %logits = jit.add %h, %bfc : (tensor<4x10xf32>, tensor<10xf32>) -> tensor<4x10xf32>
  %loss = jit.cross_entropy %logits, %labels reduction = mean : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>

  %seed = jit.constant dense<1.0> : tensor<f32>
  %d_logits = jit.cross_entropy_grad %seed, %logits, %labels reduction = mean
      : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
  %d_bfc = jit.sum %d_logits axes = [0] : tensor<4x10xf32> -> tensor<10xf32>
  %d_wfc = jit.matmul %d_logits, %m {transpose_lhs} : (tensor<4x10xf32>, tensor<4x8xf32>) -> tensor<10x8xf32>
  %d_m = jit.matmul %d_logits, %wfc : (tensor<4x10xf32>, tensor<10x8xf32>) -> tensor<4x8xf32>
  %d_m4 = jit.reshape %d_m : tensor<4x8xf32> -> tensor<4x8x1x1xf32>
  %d_mb = jit.broadcast_to %d_m4 : tensor<4x8x1x1xf32> -> tensor<4x8x6x6xf32>
  %inv_hw = jit.constant dense<0.027777778> : tensor<f32>
  %d_r2 = jit.mul %d_mb, %inv_hw : (tensor<4x8x6x6xf32>, tensor<f32>) -> tensor<4x8x6x6xf32>
  %d_a = jit.relu_grad %d_r2, %r2 : tensor<4x8x6x6xf32>
  %d_c2, %d_g2, %d_beta2 = jit.batch_norm_grad %d_a, %c2, %mean2, %invstd2 weight %g2 axis = 1
      : (tensor<4x8x6x6xf32>, tensor<4x8x6x6xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<4x8x6x6xf32>, tensor<8xf32>, tensor<8xf32>)
  %d_w2 = jit.conv2d_grad_weight %d_c2, %p stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<4x8x6x6xf32>, tensor<4x8x6x6xf32>) -> tensor<8x8x3x3xf32>
  %d_p2 = jit.conv2d_grad_input %d_c2, %w2 stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<4x8x6x6xf32>, tensor<8x8x3x3xf32>) -> tensor<4x8x6x6xf32>
  %d_p = jit.add %d_a, %d_p2 : (tensor<4x8x6x6xf32>, tensor<4x8x6x6xf32>) -> tensor<4x8x6x6xf32>
  %d_r1 = jit.max_pool2d_grad %d_p, %r1 kernel_size = [3, 3] stride = [2, 2] padding = [1, 1]
      : (tensor<4x8x6x6xf32>, tensor<4x8x12x12xf32>) -> tensor<4x8x12x12xf32>
  %d_y1 = jit.relu_grad %d_r1, %r1 : tensor<4x8x12x12xf32>
  %d_c1, %d_g1, %d_beta1 = jit.batch_norm_grad %d_y1, %c1, %mean1, %invstd1 weight %g1 axis = 1
      : (tensor<4x8x12x12xf32>, tensor<4x8x12x12xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<4x8x12x12xf32>, tensor<8xf32>, tensor<8xf32>)
  %d_w1 = jit.conv2d_grad_weight %d_c1, %x stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<4x8x12x12xf32>, tensor<4x3x12x12xf32>) -> tensor<8x3x3x3xf32>
  %d_b1 = jit.sum %d_c1 axes = [0, 2, 3] : tensor<4x8x12x12xf32> -> tensor<8xf32>

  %w1_new = jit.sgd_update %w1, %d_w1 lr %lr : (tensor<8x3x3x3xf32>, tensor<8x3x3x3xf32>, tensor<f32>) -> tensor<8x3x3x3xf32>
  %b1_new = jit.sgd_update %b1, %d_b1 lr %lr : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %g1_new = jit.sgd_update %g1, %d_g1 lr %lr : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %beta1_new = jit.sgd_update %beta1, %d_beta1 lr %lr : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %w2_new = jit.sgd_update %w2, %d_w2 lr %lr : (tensor<8x8x3x3xf32>, tensor<8x8x3x3xf32>, tensor<f32>) -> tensor<8x8x3x3xf32>
  %g2_new = jit.sgd_update %g2, %d_g2 lr %lr : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %beta2_new = jit.sgd_update %beta2, %d_beta2 lr %lr : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %wfc_new = jit.sgd_update %wfc, %d_wfc lr %lr : (tensor<10x8xf32>, tensor<10x8xf32>, tensor<f32>) -> tensor<10x8xf32>
  %bfc_new = jit.sgd_update %bfc, %d_bfc lr %lr : (tensor<10xf32>, tensor<10xf32>, tensor<f32>) -> tensor<10xf32>
  return %loss, %d_w1, %w1_new, %b1_new, %g1_new, %beta1_new, %w2_new, %g2_new, %beta2_new, %wfc_new,
         %bfc_new, %rm1_new, %rv1_new, %rm2_new, %rv2_new
      : tensor<f32>, tensor<8x3x3x3xf32>, tensor<8x3x3x3xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>,
        tensor<8x8x3x3xf32>, tensor<8xf32>, tensor<8xf32>, tensor<10x8xf32>, tensor<10xf32>,
        tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}
)mlir";

/// The step after `pipeline` (none when empty), in its IR and as a plan.
ampjit::testing::CompiledModule compileStep(const std::string &pipeline) {
  return ampjit::testing::compileSource(kResidualStep, "residual-step", pipeline);
}

size_t countOccurrences(const std::string &text, const std::string &what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size()))
    ++count;
  return count;
}

/// The same random state for any plan of the step: normal images and
/// parameters, labels in [0, 10), running variances in [0.5, 1.5) (derived
/// state, which O2 adds after the traced arguments, is rounded from its
/// source).
std::vector<rt::Tensor> randomArguments(const rt::Plan &plan) {
  std::mt19937_64 generator(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.5, 1.5);
  std::vector<rt::Tensor> arguments;
  for (size_t index = 0; index < plan.argumentCount(); ++index) {
    const rt::BufferDesc &buffer = plan.buffers[plan.argumentBuffer(index)];
    std::vector<double> values(size_t(buffer.type.elementCount()));
    for (size_t i = 0; i < values.size(); ++i) {
      if (index == kLabels)
        values[i] = double(generator() % 10);
      else if (index == kLearningRate)
        values[i] = 0.05;
      else if (index >= kFirstRunningStat && (index - kFirstRunningStat) % 2 == 1)
        values[i] = uniform(generator);
      else
        values[i] = normal(generator) * (index == kImages ? 1.0 : 0.3);
    }
    rt::Expected<rt::Tensor> tensor = rt::Tensor::fromDoubles(buffer.type.dtype, buffer.type.shape, values);
    EXPECT_TRUE(tensor.ok()) << tensor.message();
    arguments.push_back(std::move(*tensor));
  }
  // O2's low-precision parameter copies follow their fp32 masters.
  rt::Status derived = rt::rederiveArguments(plan, arguments);
  EXPECT_TRUE(derived.ok()) << derived.message();
  return arguments;
}

size_t countSteps(const rt::Plan &plan, rt::StepKind kind) {
  size_t count = 0;
  for (const rt::Step &step : plan.steps)
    count += step.kind == kind;
  return count;
}

/// Every conv, pool and batch-norm step of `plan` runs in `nhwc` (or NCHW);
/// returns how many there are.
size_t checkLayoutSteps(const rt::Plan &plan, bool nhwc) {
  size_t checked = 0;
  for (const rt::Step &step : plan.steps) {
    switch (step.kind) {
    case rt::StepKind::Conv2d:
    case rt::StepKind::Conv2dGradInput:
    case rt::StepKind::Conv2dGradWeight:
      EXPECT_EQ(step.as<rt::Conv2dParams>().nhwc, nhwc) << step.origin;
      break;
    case rt::StepKind::MaxPool2d:
    case rt::StepKind::MaxPool2dGrad:
      EXPECT_EQ(step.as<rt::Pool2dParams>().nhwc, nhwc) << step.origin;
      break;
    case rt::StepKind::BatchNorm:
      EXPECT_EQ(step.as<rt::BatchNormParams>().axis, nhwc ? 3 : 1) << step.origin;
      break;
    case rt::StepKind::BatchNormGrad:
      EXPECT_EQ(step.as<rt::BatchNormGradParams>().axis, nhwc ? 3 : 1) << step.origin;
      break;
    default:
      continue;
    }
    ++checked;
  }
  return checked;
}

/// Runs both plans `steps` times from the same state and expects the same
/// bits in every result and every argument after every step.
void expectBitwiseEqualRuns(const rt::Plan &nchw, const rt::Plan &nhwc, int steps) {
  std::vector<rt::Tensor> nchwArguments = randomArguments(nchw), nhwcArguments = randomArguments(nhwc);
  ASSERT_EQ(snapshot(nchwArguments), snapshot(nhwcArguments));
  std::unique_ptr<rt::Backend> backend = rt::createCpuBackend();
  auto nchwExecutable = backend->prepare(nchw), nhwcExecutable = backend->prepare(nhwc);
  ASSERT_TRUE(nchwExecutable.ok()) << nchwExecutable.message();
  ASSERT_TRUE(nhwcExecutable.ok()) << nhwcExecutable.message();
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    auto nchwResults = (*nchwExecutable)->run(nchwArguments);
    auto nhwcResults = (*nhwcExecutable)->run(nhwcArguments);
    ASSERT_TRUE(nchwResults.ok()) << nchwResults.message();
    ASSERT_TRUE(nhwcResults.ok()) << nhwcResults.message();
    ASSERT_EQ(nchwResults->size(), nhwcResults->size());
    std::vector<std::vector<std::byte>> expected = snapshot(*nchwResults), actual = snapshot(*nhwcResults);
    for (size_t index = 0; index < expected.size(); ++index)
      EXPECT_EQ(expected[index], actual[index]) << "result " << index;
    expected = snapshot(nchwArguments);
    actual = snapshot(nhwcArguments);
    for (size_t index = 0; index < expected.size(); ++index)
      EXPECT_EQ(expected[index], actual[index]) << "argument " << index;
    // NaNs would compare equal however they came about.
    EXPECT_TRUE(std::isfinite(nchwResults->front().at(0)));
  }
}

TEST(ConvertLayout, NhwcStepComputesTheNchwStepsBits) {
  ampjit::testing::CompiledModule nchw = compileStep("");
  ampjit::testing::CompiledModule nhwc = compileStep("jit-convert-layout");
  ASSERT_FALSE(nchw.plan.steps.empty());
  ASSERT_FALSE(nhwc.plan.steps.empty());

  // 5 conv steps, 2 pooling, 4 batch norm.
  EXPECT_EQ(checkLayoutSteps(nchw.plan, /*nhwc=*/false), 11u);
  EXPECT_EQ(checkLayoutSteps(nhwc.plan, /*nhwc=*/true), 11u);
  // Only the edges keep a transpose: the images and the two filters in, the
  // two filter gradients out (the first one's serves both its update and the
  // function result). The mean's gradient is built NHWC by reshapes.
  EXPECT_EQ(countSteps(nchw.plan, rt::StepKind::Transpose), 0u);
  EXPECT_EQ(countSteps(nhwc.plan, rt::StepKind::Transpose), 5u);
  EXPECT_EQ(countOccurrences(nhwc.ir, "jit.transpose"), 5u) << nhwc.ir;
  EXPECT_EQ(countOccurrences(nhwc.ir, "perm = [0, 3, 1, 2]"), 2u) << nhwc.ir;

  expectBitwiseEqualRuns(nchw.plan, nhwc.plan, 3);
}

TEST(ConvertLayout, NchwOptionChangesNothing) {
  ampjit::testing::CompiledModule traced = compileStep("");
  ampjit::testing::CompiledModule unchanged = compileStep("jit-convert-layout{layout=nchw}");
  EXPECT_EQ(traced.ir, unchanged.ir);
  EXPECT_EQ(traced.plan, unchanged.plan);
}

TEST(ConvertLayout, AfterAmpTheNhwcStepStillComputesTheSameBits) {
  for (const char *amp : {"level=O1 dtype=f16", "level=O1 dtype=bf16", "level=O2 dtype=bf16"}) {
    SCOPED_TRACE(amp);
    std::string pipeline = std::string("amp-pipeline{") + amp + "}";
    ampjit::testing::CompiledModule nchw = compileStep(pipeline);
    ampjit::testing::CompiledModule nhwc = compileStep(pipeline + ",jit-convert-layout");
    ASSERT_FALSE(nchw.plan.steps.empty());
    ASSERT_FALSE(nhwc.plan.steps.empty());
    EXPECT_EQ(checkLayoutSteps(nhwc.plan, /*nhwc=*/true), 11u);
    EXPECT_EQ(countOccurrences(nhwc.ir, "jit.transpose"), 5u) << nhwc.ir;
    expectBitwiseEqualRuns(nchw.plan, nhwc.plan, 2);
  }
}

} // namespace
