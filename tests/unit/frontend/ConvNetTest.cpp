// Convolutional networks through the frontend: nn modules, the ResNet
// builder, eager versus traced steps, and a ResNet-18 that learns with AMP.

#include "ClassifierNet.h"
#include "CompileExample.h"
#include "FrontendTestUtil.h"
#include "ResNetTrainer.h"

#include "jit/trace.h"

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/CpuBackend.h"

#include <cmath>
#include <random>

namespace rt = ampjit::runtime;

namespace jit::testing {
namespace {

int64_t parameterCount(const nn::Module& module) {
  int64_t count = 0;
  for (const Tensor& parameter : module.parameters())
    count += parameter.numel();
  return count;
}

TEST(ConvNet, Conv2dModuleHasPyTorchShapesAndInitBounds) {
  Generator generator(5);
  nn::Conv2d conv(6, 8, {3, 5}, {.padding = {1, 2}, .groups = 2}, true, {.generator = &generator});
  EXPECT_EQ(conv.weight.shape(), (Shape{8, 3, 3, 5}));
  EXPECT_EQ(conv.bias.shape(), (Shape{8}));
  // PyTorch's default: uniform in +-1/sqrt(fan_in), fan_in = 3 * 3 * 5.
  double bound = 1.0 / std::sqrt(45.0), largest = 0.0;
  for (double v : conv.weight.to_vector())
    largest = std::max(largest, std::fabs(v));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, 0.8 * bound);
  Tensor y = conv(randn({2, 6, 7, 9}, f32, &generator));
  EXPECT_EQ(y.shape(), (Shape{2, 8, 7, 9}));
  EXPECT_THROW(nn::Conv2d(6, 8, {3, 3}, {.groups = 4}), Error);
  EXPECT_THROW(conv(randn({6, 7, 9})), Error);
}

TEST(ConvNet, WindowParametersPastInt32AreAClearError) {
  Generator generator(5);
  Tensor x = randn({1, 2, 8, 8}, f32, &generator), w = randn({2, 2, 3, 3}, f32, &generator);
  std::string message = errorOf([&] { conv2d(x, w, {}, {.dilation = {1, int64_t(1) << 62}}); });
  EXPECT_NE(message.find("dilation must be two values [height, width], each in [1, 2147483647], got [1x4611686018427387904]"),
            std::string::npos)
      << message;
  message = errorOf([&] { conv2d(x, w, {}, {.padding = {int64_t(1) << 62, 0}}); });
  EXPECT_NE(message.find("padding must be two values"), std::string::npos) << message;
}

TEST(ConvNet, BatchNorm2dTrainsOnBatchStatisticsAndUpdatesRunningOnes) {
  nn::BatchNorm2d bn(3, 1e-5, 0.25);
  Generator generator(8);
  Tensor x = randn({4, 3, 2, 2}, f32, &generator) * 2.0 + 1.0;
  Tensor y = bn(x);
  // Each channel of the output has mean 0 and biased variance 1.
  std::vector<double> values = y.to_vector(), input = x.to_vector();
  for (int64_t c = 0; c < 3; ++c) {
    double sum = 0, squares = 0, inputSum = 0, inputSquares = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 4; ++i) {
        size_t at = size_t((n * 3 + c) * 4 + i);
        sum += values[at];
        squares += values[at] * values[at];
        inputSum += input[at];
        inputSquares += input[at] * input[at];
      }
    EXPECT_NEAR(sum / 16, 0.0, 1e-5);
    EXPECT_NEAR(squares / 16, 1.0, 1e-3);
    double mean = inputSum / 16, unbiased = (inputSquares - 16 * mean * mean) / 15;
    EXPECT_NEAR(bn.running_mean.to_vector()[size_t(c)], 0.25 * mean, 1e-5);
    EXPECT_NEAR(bn.running_var.to_vector()[size_t(c)], 0.75 + 0.25 * unbiased, 1e-4);
  }
  // Evaluation mode normalises with the running statistics and leaves them alone.
  bn.eval();
  std::vector<double> runningMean = bn.running_mean.to_vector();
  Tensor z = bn(x);
  EXPECT_EQ(bn.running_mean.to_vector(), runningMean);
  double expected = (input[0] - runningMean[0]) / std::sqrt(bn.running_var.to_vector()[0] + 1e-5);
  EXPECT_NEAR(z.to_vector()[0], expected, 1e-5);
  EXPECT_EQ(bn.weight.dtype(), f32);
}

TEST(ConvNet, BatchNorm1dNormalisesFeaturesAndSequencesPerChannel) {
  // [N, C] (an MLP's features) and [N, C, L] (channels of a sequence): each
  // channel to mean 0 and biased variance 1 over every other axis, the
  // running statistics updated with the unbiased variance.
  for (const Shape& shape : {Shape{16, 3}, Shape{4, 3, 5}}) {
    SCOPED_TRACE(::testing::Message() << "rank " << shape.size());
    nn::BatchNorm1d bn(3, 1e-5, 0.5);
    Generator generator(9);
    Tensor x = randn(shape, f32, &generator) * 3.0 - 2.0;
    std::vector<double> values = bn(x).to_vector(), input = x.to_vector();
    int64_t length = shape.size() == 3 ? shape[2] : 1, count = shape[0] * length;
    for (int64_t c = 0; c < 3; ++c) {
      double sum = 0, squares = 0, inputSum = 0, inputSquares = 0;
      for (int64_t n = 0; n < shape[0]; ++n)
        for (int64_t l = 0; l < length; ++l) {
          size_t at = size_t((n * 3 + c) * length + l);
          sum += values[at];
          squares += values[at] * values[at];
          inputSum += input[at];
          inputSquares += input[at] * input[at];
        }
      EXPECT_NEAR(sum / double(count), 0.0, 1e-5);
      EXPECT_NEAR(squares / double(count), 1.0, 1e-3);
      double mean = inputSum / double(count);
      double unbiased = (inputSquares - double(count) * mean * mean) / double(count - 1);
      EXPECT_NEAR(bn.running_mean.to_vector()[size_t(c)], 0.5 * mean, 1e-5);
      EXPECT_NEAR(bn.running_var.to_vector()[size_t(c)], 0.5 + 0.5 * unbiased, 1e-4);
    }
  }
  nn::BatchNorm1d bn(3);
  std::string message = errorOf([&] { bn(zeros({2, 3, 4, 5})); });
  EXPECT_NE(message.find("nn::BatchNorm1d(3): input"), std::string::npos) << message;
  EXPECT_NE(message.find("must be [N, C] or [N, C, L] with 3 channels"), std::string::npos) << message;
  message = errorOf([&] { nn::BatchNorm2d(3)(zeros({2, 3})); });
  EXPECT_NE(message.find("must be NCHW with 3 channels"), std::string::npos) << message;
}

TEST(ConvNet, AnMlpWithBatchNorm1dTracesAsItRunsEagerly) {
  // Bitwise at O0 and with autocast semantics at O1, then an eval step.
  for (amp::Level level : {amp::O0, amp::O1}) {
    SCOPED_TRACE(::testing::Message() << "O" << int(level));
    auto build = [] {
      Generator generator(10);
      return nn::Sequential(nn::Linear(12, 32, false, {.generator = &generator}), nn::BatchNorm1d(32), nn::ReLU(),
                            nn::Linear(32, 5, true, {.generator = &generator}));
    };
    nn::Sequential eagerModel = build(), tracedModel = build();
    optim::SGD eagerOpt(eagerModel.parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD tracedOpt(tracedModel.parameters(), {.lr = 0.1, .momentum = 0.9});
    auto body = [](nn::Sequential& model, optim::SGD& opt, const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = cross_entropy(model(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
    expectTracedLossesEqualEager(
        level, [&](const Tensor& x, const Tensor& y) { return body(eagerModel, eagerOpt, x, y); },
        [&](const Tensor& x, const Tensor& y) { return body(tracedModel, tracedOpt, x, y); },
        [](uint64_t i) { return batch(16, 12, 5, 80 + i); }, 4);
    expectSameState(tracedModel.state_dict(), eagerModel.state_dict());
    EXPECT_EQ(tracedModel.state_dict()[3].first, "1.running_mean");
  }
}

TEST(ConvNet, ATracedStepFollowsBatchNormIntoEvalModeAndBack) {
  // BatchNorm2d reads its training flag: eval() retraces onto the running
  // statistics (which then stay put), train() reuses the first variant.
  struct Net {
    Net()
        : g(5), model(nn::Conv2d(3, 4, {3, 3}, {.padding = {1, 1}}, true, {.generator = &g}), nn::BatchNorm2d(4),
                      nn::ReLU(), nn::Flatten(), nn::Linear(4 * 6 * 6, 3, true, {.generator = &g})),
          opt(model.parameters(), {.lr = 0.1, .momentum = 0.9}) {}
    Tensor step(const Tensor& x, const Tensor& y) { return plainTrainStep(model, opt, x, y); }
    Generator g;
    nn::Sequential model;
    optim::SGD opt;
  };
  Net eager, traced;
  auto step = trace([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); }, {.backend = Backend::cpu});
  Generator data(9);
  Tensor x = rand({2, 3, 6, 6}, f32, &data);
  Tensor y = tensor(std::vector<int64_t>{1, 2}, {2});
  for (bool training : {true, false, true, false}) {
    eager.model.train(training);
    traced.model.train(training);
    EXPECT_EQ(step(x, y).item(), eager.step(x, y).item()) << (training ? "training" : "eval");
  }
  auto tracedState = traced.model.state_dict(), eagerState = eager.model.state_dict();
  for (size_t i = 0; i < eagerState.size(); ++i)
    EXPECT_EQ(tracedState[i].second.to_vector(), eagerState[i].second.to_vector()) << eagerState[i].first;
  EXPECT_EQ(step.stats().traces, 2u);
}

TEST(ConvNet, ResNetsHaveTorchvisionNamesAndParameterCounts) {
  auto resnet18 = nn::resnet18({.num_classes = 10});
  auto resnet50 = nn::resnet50({.num_classes = 10});
  // torchvision.models.resnet18/50(num_classes=10): 11,181,642 and 23,528,522.
  EXPECT_EQ(parameterCount(*resnet18), 11181642);
  EXPECT_EQ(parameterCount(*resnet50), 23528522);
  std::vector<NamedTensor> named = resnet50->named_parameters();
  EXPECT_EQ(named.size(), 161u);
  EXPECT_EQ(named.front().first, "conv1.weight");
  EXPECT_EQ(named.back().first, "fc.bias");
  bool sawDownsample = false;
  for (const auto& [name, tensor] : named)
    sawDownsample |= name == "layer2.0.downsample.0.weight";
  EXPECT_TRUE(sawDownsample);
  EXPECT_EQ(resnet18->named_buffers().size(), 40u); // running mean and var of 20 batch norms
  EXPECT_EQ(resnet18->named_buffers()[0].first, "bn1.running_mean");
}

/// Images whose class is visible (a class-dependent bright patch), so a
/// network can learn them quickly.
std::pair<Tensor, Tensor> images(int64_t batch, int64_t size, int64_t classes, uint64_t seed) {
  Generator generator(seed);
  std::vector<double> pixels(size_t(batch * 3 * size * size));
  std::vector<int64_t> labels;
  for (int64_t n = 0; n < batch; ++n) {
    int64_t label = n % classes;
    labels.push_back(label);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < size; ++h)
        for (int64_t w = 0; w < size; ++w) {
          bool patch = (h * classes / size) == label && c == label % 3;
          pixels[size_t(((n * 3 + c) * size + h) * size + w)] = generator.next_normal() * 0.5 + (patch ? 2.0 : 0.0);
        }
  }
  return {tensor(std::span<const double>(pixels), {batch, 3, size, size}), tensor(labels, {batch})};
}

TEST(ConvNet, SmallResNetEagerAndTracedAgreeBitwiseAtO0) {
  nn::ResNetOptions options{.num_classes = 4, .stem = nn::ResNetOptions::Stem::cifar, .base_width = 4};
  Generator first(21), second(21);
  options.init.generator = &first;
  ResNetTrainer eager(options);
  options.init.generator = &second;
  ResNetTrainer traced(options);
  ASSERT_EQ(eager.state(), traced.state());
  auto step = trace([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); });
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = images(4, 8, 4, 300 + i);
    Tensor expected = eager.step(x, y);
    Tensor got = step(x, y);
    EXPECT_EQ(got.item(), expected.item()) << "step " << i;
  }
  // Parameters, and the batch norms' running statistics updated inside the step.
  EXPECT_EQ(traced.state(), eager.state());
  for (size_t i = 0; i < traced.model->parameters().size(); ++i)
    EXPECT_EQ(traced.opt.momentum_buffer(i).to_vector(), eager.opt.momentum_buffer(i).to_vector()) << i;
  EXPECT_EQ(step.stats().traces, 1u);
  EXPECT_NE(step.traced_module().find("jit.batch_norm_grad"), std::string::npos);
  EXPECT_NE(step.traced_module().find("jit.conv2d_grad_weight"), std::string::npos);
}

TEST(ConvNet, DeferringTheUpdateKeepsTheResNetStepBitwise) {
  // Batch norms' weights are read in the forward and their running
  // statistics rewritten there, beside an update deferred into that forward.
  nn::ResNetOptions options{.num_classes = 4, .stem = nn::ResNetOptions::Stem::cifar, .base_width = 4};
  Generator first(22), second(22);
  options.init.generator = &first;
  ResNetTrainer deferredNet(options);
  options.init.generator = &second;
  ResNetTrainer plainNet(options);
  TraceOptions traceOptions{.amp = {.level = amp::O1, .dtype = f16}, .defer_updates = DeferUpdates::on};
  auto deferred = trace([&](const Tensor& x, const Tensor& y) { return deferredNet.step(x, y); }, traceOptions);
  traceOptions.defer_updates = DeferUpdates::off;
  auto plain = trace([&](const Tensor& x, const Tensor& y) { return plainNet.step(x, y); }, traceOptions);
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = images(4, 8, 4, 320 + i);
    EXPECT_EQ(deferred(x, y).item(), plain(x, y).item()) << "step " << i;
  }
  EXPECT_NE(deferred.plan_text().find("deferred steps"), std::string::npos);
  EXPECT_EQ(deferredNet.state(), plainNet.state());
  for (size_t i = 0; i < deferredNet.model->parameters().size(); ++i)
    EXPECT_EQ(deferredNet.opt.momentum_buffer(i).to_vector(), plainNet.opt.momentum_buffer(i).to_vector()) << i;
}

TEST(ConvNet, ResNet18LearnsWithO1Float16) {
  // torchvision's ResNet-18 with its ImageNet stem on 32x32 images, as
  // PyTorch's peer runs ResNet-50; one fixed batch, so the loss must fall.
  Generator generator(3);
  ResNetTrainer net({.num_classes = 4, .init = {.generator = &generator}});
  auto step = trace([&](const Tensor& x, const Tensor& y) { return net.step(x, y); },
                    {.amp = {.level = amp::O1, .dtype = f16}});
  auto [x, y] = images(8, 32, 4, 11);
  std::vector<double> losses;
  for (int i = 0; i < 20; ++i)
    losses.push_back(step(x, y).item());
  for (double loss : losses)
    EXPECT_TRUE(std::isfinite(loss));
  double firstThree = (losses[0] + losses[1] + losses[2]) / 3, lastThree = (losses[17] + losses[18] + losses[19]) / 3;
  EXPECT_LT(lastThree, 0.5 * firstThree) << "first " << losses[0] << ", last " << losses[19];
  EXPECT_EQ(step.stats().traces, 1u);
  // Convolutions ran in f16 and batch-norm statistics in f32.
  std::string report = step.amp_report();
  EXPECT_NE(report.find("jit.conv2d"), std::string::npos);
}

/// Initial values for a compiled ResNet step's arguments, by role and
/// rank: images and labels, small weights, BN-like per-channel parameters,
/// zero optimizer state, running statistics around 1, scale 2^16, and an lr
/// small enough (0.0005) that two runs a rounding apart stay close for a
/// few steps (this small net with random weights has large gradients).
std::vector<rt::Tensor> resNetStepArguments(const rt::Plan& plan, int64_t classes) {
  std::mt19937_64 generator(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> weight(-0.3, 0.3), perChannel(-0.5, 1.0), positive(0.5, 1.5);
  std::vector<rt::Tensor> arguments;
  for (size_t index = 0; index < plan.argumentCount(); ++index) {
    const rt::BufferDesc& buffer = plan.buffers[plan.argumentBuffer(index)];
    size_t rank = buffer.type.shape.size();
    std::vector<double> values(size_t(buffer.type.elementCount()), 0.0);
    for (size_t i = 0; i < values.size(); ++i) {
      switch (buffer.role) {
      case rt::BufferRole::Input:
        values[i] = buffer.type.dtype == rt::DType::I64 ? double(int64_t(i) % classes) : normal(generator);
        break;
      case rt::BufferRole::Param: values[i] = rank == 1 ? perChannel(generator) : weight(generator); break;
      case rt::BufferRole::Hyper: values[i] = rank == 0 ? 0.0005 : positive(generator); break;
      case rt::BufferRole::ScalerState: values[i] = buffer.type.dtype == rt::DType::F32 ? 65536.0 : 0.0; break;
      default: break;
      }
    }
    rt::Expected<rt::Tensor> tensor = rt::Tensor::fromDoubles(buffer.type.dtype, buffer.type.shape, values);
    EXPECT_TRUE(tensor.ok()) << tensor.message();
    arguments.push_back(std::move(*tensor));
  }
  EXPECT_TRUE(rt::rederiveArguments(plan, arguments).ok());
  return arguments;
}

/// The traced module of a small ResNet-18's step (CIFAR stem, widths 4-32,
/// 4 classes) on 8x8 images, whose last stage is 1x1.
std::string tracedSmallResNetStep(uint64_t initSeed, uint64_t dataSeed) {
  nn::ResNetOptions options{.num_classes = 4, .stem = nn::ResNetOptions::Stem::cifar, .base_width = 4};
  Generator generator(initSeed);
  options.init.generator = &generator;
  ResNetTrainer trainer(options);
  auto step = trace([&](const Tensor& x, const Tensor& y) { return trainer.step(x, y); });
  auto [x, y] = images(4, 8, 4, dataSeed);
  step(x, y);
  return step.traced_module();
}

/// Two plans of one step run on the CPU for `steps` steps, each from
/// resNetStepArguments: their losses and results' bytes per step, and the
/// state each ends with.
struct TwoPlansRun {
  std::vector<double> firstLosses, secondLosses;
  std::vector<std::vector<std::vector<std::byte>>> firstResults, secondResults;
  std::vector<std::vector<std::byte>> firstState, secondState;
};
TwoPlansRun runTwoPlans(const rt::Plan& first, const rt::Plan& second, int steps = 3) {
  TwoPlansRun run;
  std::unique_ptr<rt::Backend> backend = rt::createCpuBackend();
  auto firstExecutable = backend->prepare(first), secondExecutable = backend->prepare(second);
  EXPECT_TRUE(firstExecutable.ok()) << firstExecutable.message();
  EXPECT_TRUE(secondExecutable.ok()) << secondExecutable.message();
  if (!firstExecutable.ok() || !secondExecutable.ok())
    return run;
  std::vector<rt::Tensor> firstState = resNetStepArguments(first, 4), secondState = resNetStepArguments(second, 4);
  for (int i = 0; i < steps; ++i) {
    auto firstResults = (*firstExecutable)->run(firstState);
    auto secondResults = (*secondExecutable)->run(secondState);
    EXPECT_TRUE(firstResults.ok()) << firstResults.message();
    EXPECT_TRUE(secondResults.ok()) << secondResults.message();
    if (!firstResults.ok() || !secondResults.ok())
      break;
    run.firstLosses.push_back(firstResults->front().at(0));
    run.secondLosses.push_back(secondResults->front().at(0));
    run.firstResults.push_back(ampjit::testing::snapshot(*firstResults));
    run.secondResults.push_back(ampjit::testing::snapshot(*secondResults));
  }
  run.firstState = ampjit::testing::snapshot(firstState);
  run.secondState = ampjit::testing::snapshot(secondState);
  return run;
}

TEST(ConvNet, ResNetStepRunsNhwcWithTheNchwStepsBits) {
  // 8x8 images through the CIFAR stem leave the last stage 1x1, where the
  // layout pass's moves are reshapes that sink through the relus, adds and
  // relu gradients: the converted step must still compute every bit of the
  // NCHW one, for three steps (losses, parameters, running statistics).
  std::string traced = tracedSmallResNetStep(6, 18);
  for (const char* amp : {"level=O0", "level=O1 dtype=f16"}) {
    SCOPED_TRACE(amp);
    std::string pipeline = std::string("amp-pipeline{") + amp + " target=sm_90}";
    rt::Plan nchw = ampjit::testing::compileSource(traced, "traced", pipeline).plan;
    rt::Plan nhwc =
        ampjit::testing::compileSource(traced, "traced", pipeline + ",jit-convert-layout{layout=nhwc}").plan;
    ASSERT_FALSE(nchw.steps.empty() || nhwc.steps.empty());
    TwoPlansRun run = runTwoPlans(nchw, nhwc);
    ASSERT_EQ(run.firstResults.size(), 3u);
    for (size_t i = 0; i < run.firstResults.size(); ++i)
      EXPECT_EQ(run.secondResults[i], run.firstResults[i]) << "step " << i;
    EXPECT_EQ(run.secondState, run.firstState);
  }
}

TEST(ConvNet, ResNetStepWithItsGradientSumsInItsConvolutionsMatchesTheUnfusedStep) {
  // PlanOptions::fuseGradientAccumulation on the CUDA pipeline's plan, run on
  // the CPU for three steps from the same state: each block's two input
  // gradients (its first convolution's and the shortcut's) are summed by the
  // convolution that computes the later one, in place. In f32 bit for bit
  // (one rounding either way); in f16 the sum is rounded once, not twice.
  std::string traced = tracedSmallResNetStep(5, 17);
  for (const char* amp : {"level=O0", "level=O1 dtype=f16"}) {
    SCOPED_TRACE(amp);
    std::string pipeline = std::string("amp-pipeline{") + amp + " target=sm_90},jit-convert-layout{layout=nhwc}";
    auto compile = [&](bool fuse) {
      return ampjit::testing::compileSource(traced, "traced", pipeline,
                                            {.fuseBatchNormEpilogues = true, .fuseGradientAccumulation = fuse})
          .plan;
    };
    rt::Plan unfused = compile(false), fused = compile(true);
    ASSERT_FALSE(fused.steps.empty());
    size_t accumulating = 0;
    for (const rt::Step& s : fused.steps)
      if (rt::accumulatesInPlace(s)) {
        ++accumulating;
        EXPECT_EQ(s.outputs[0], s.inputs[rt::conv2d_grad_input_slot::kAccumulate]);
      }
    // ResNet-18's 8 blocks, one sum each; every add of the backward goes.
    EXPECT_EQ(accumulating, 8u);
    EXPECT_EQ(unfused.steps.size() - fused.steps.size(), 8u);
    bool exact = std::string(amp) == "level=O0";
    TwoPlansRun run = runTwoPlans(unfused, fused);
    ASSERT_EQ(run.firstLosses.size(), 3u);
    for (size_t i = 0; i < run.firstLosses.size(); ++i) {
      double unfusedLoss = run.firstLosses[i], fusedLoss = run.secondLosses[i];
      ASSERT_TRUE(std::isfinite(unfusedLoss));
      if (exact) {
        EXPECT_EQ(fusedLoss, unfusedLoss) << "step " << i;
      } else {
        EXPECT_NEAR(fusedLoss, unfusedLoss, 1e-2 * std::fabs(unfusedLoss)) << "step " << i;
      }
    }
    if (exact) {
      EXPECT_EQ(run.secondState, run.firstState);
    }
  }
}

TEST(ConvNet, ResNetStepWithFusedBatchNormEpiloguesMatchesTheUnfusedStep) {
  // What jit::trace compiles for the CUDA backend (AMP, then NHWC), lowered
  // with and without PlanOptions::fuseBatchNormEpilogues and run on the CPU
  // for three steps from the same state: at O0 bit for bit (losses and every
  // piece of state, running statistics included), with f16/bf16 activations
  // within tolerance (the fused forward skips two roundings per block).
  std::string traced = tracedSmallResNetStep(5, 17);
  double f32FirstLoss = NAN;
  for (const char* amp : {"level=O0", "level=O1 dtype=f16", "level=O1 dtype=bf16", "level=O2 dtype=f16"}) {
    SCOPED_TRACE(amp);
    std::string pipeline = std::string("amp-pipeline{") + amp + " target=sm_90},jit-convert-layout{layout=nhwc}";
    auto compile = [&](bool fuse) {
      return ampjit::testing::compileSource(traced, "traced", pipeline,
                                            {.fuseBatchNormEpilogues = fuse})
          .plan;
    };
    rt::Plan unfused = compile(false), fused = compile(true);
    ASSERT_FALSE(fused.steps.empty());
    size_t forwards = 0, gradients = 0;
    for (const rt::Step& s : fused.steps) {
      forwards += s.kind == rt::StepKind::BatchNorm &&
                  s.as<rt::BatchNormParams>().activation != rt::BatchNormActivation::None;
      gradients += s.kind == rt::StepKind::BatchNormGrad &&
                   s.as<rt::BatchNormGradParams>().activation != rt::BatchNormActivation::None;
    }
    // 17 relus follow a batch norm (stem, 8 blocks x 2), all fused: in the
    // last stage, whose activations are 1x1, the layout pass's moves are
    // reshapes and sink like transposes.
    EXPECT_EQ(forwards, 17u);
    EXPECT_EQ(gradients, 17u);
    // Per block tail: relu -1 step, add + relu -2, relu_grad -1.
    size_t reluOnly = 0;
    for (const rt::Step& s : fused.steps)
      reluOnly += s.kind == rt::StepKind::BatchNorm && s.as<rt::BatchNormParams>().activation == rt::BatchNormActivation::Relu;
    EXPECT_EQ(unfused.steps.size() - fused.steps.size(), reluOnly + 2 * (forwards - reluOnly) + gradients);

    bool exact = std::string(amp) == "level=O0";
    // Each of the 17 fused forwards skips two roundings of the activations;
    // bf16 keeps 8 bits, f16 11.
    double relativeTolerance = std::string(amp).find("bf16") != std::string::npos ? 4e-2 : 1e-2;
    TwoPlansRun run = runTwoPlans(unfused, fused);
    ASSERT_EQ(run.firstLosses.size(), 3u);
    for (size_t i = 0; i < run.firstLosses.size(); ++i) {
      double unfusedLoss = run.firstLosses[i], fusedLoss = run.secondLosses[i];
      ASSERT_TRUE(std::isfinite(unfusedLoss));
      // The same arguments at O0 are the reference for the first loss.
      if (i == 0 && exact)
        f32FirstLoss = unfusedLoss;
      if (i == 0 && !exact) {
        EXPECT_NEAR(fusedLoss, f32FirstLoss, relativeTolerance * f32FirstLoss);
        EXPECT_NEAR(unfusedLoss, f32FirstLoss, relativeTolerance * f32FirstLoss);
      }
      if (exact) {
        EXPECT_EQ(fusedLoss, unfusedLoss) << "step " << i;
      } else {
        EXPECT_NEAR(fusedLoss, unfusedLoss, relativeTolerance * std::fabs(unfusedLoss)) << "step " << i;
      }
    }
    if (exact) {
      EXPECT_EQ(run.secondState, run.firstState);
    }
  }
}

} // namespace
} // namespace jit::testing

namespace jit::testing {
namespace {

TEST(ConvNet, AnEvalStepAtO2SeesTheTrainedWeightsAndRunningStatistics) {
  // A ResNet trained by one traced step and evaluated (model.eval(), no grad)
  // by another, both at O2: the eval step's f16 copies of the convolution
  // weights follow the train step's updates, and its batch norms read the
  // running statistics the train step wrote. The reference is an eval
  // function traced afresh after each epoch.
  nn::ResNetOptions options{.num_classes = 4, .stem = nn::ResNetOptions::Stem::cifar, .base_width = 4};
  Generator generator(5);
  options.init.generator = &generator;
  ResNetTrainer trainer(options);
  TraceOptions traceOptions{.amp = {.level = amp::O2, .dtype = f16}, .backend = Backend::cpu, .log_retraces = false};
  auto train = trace([&](const Tensor& x, const Tensor& y) { return trainer.step(x, y); }, traceOptions);
  auto evaluation = [&](const Tensor& x, const Tensor& y) {
    NoGradGuard noGrad;
    return cross_entropy((*trainer.model)(x), y);
  };
  traceOptions.name = "eval_step";
  auto evaluate = trace(evaluation, traceOptions);
  auto [vx, vy] = images(4, 8, 4, 99);
  std::vector<double> losses;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    trainer.model->train();
    for (uint64_t i = 0; i < 2; ++i) {
      auto [x, y] = images(4, 8, 4, 10 * epoch + i);
      train(x, y);
    }
    trainer.model->eval();
    losses.push_back(evaluate(vx, vy).item());
    EXPECT_EQ(losses.back(), trace(evaluation, traceOptions)(vx, vy).item()) << "epoch " << epoch;
  }
  EXPECT_NE(losses.front(), losses.back());
  EXPECT_EQ(train.stats().traces, 1u);
  EXPECT_EQ(evaluate.stats().traces, 1u);
}

} // namespace
} // namespace jit::testing
