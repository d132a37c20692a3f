// Training patterns users write, each traced and run beside the same code
// eagerly: at O0 a trace must agree bit for bit, whatever the step does
// between its forward and its update (an EMA of the weights, two backwards,
// an input gradient, a gradient norm, a weight changed between calls), and a
// step that fails while tracing leaves every tensor usable.

#include "ClassifierNet.h"
#include "FrontendTestUtil.h"
#include "TwoNetworkGan.h"

#include "jit/trace.h"

#include <string>
#include <vector>

namespace jit::testing {
namespace {

constexpr int64_t kIn = 32, kHidden = 48, kClasses = 10, kBatch = 16;
#define SMALL_NET(...) (kIn, kHidden, kClasses, 3 __VA_OPT__(, ) __VA_ARGS__)

std::vector<std::vector<double>> values(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<double>> out;
  for (const Tensor& t : tensors)
    out.push_back(t.to_vector());
  return out;
}

std::vector<Tensor> clones(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  NoGradGuard noGrad;
  for (const Tensor& t : tensors)
    out.push_back(zeros_like(t).copy_(t));
  return out;
}

/// Runs `body(net, x, y)` (returning the loss) on two identical classifiers,
/// one through jit::trace, for three batches: the losses and the final
/// parameters must agree bit for bit.
template <typename Body> void expectTracedEqualsEager(Body body) {
  Classifier eager SMALL_NET(), traced SMALL_NET();
  auto step = trace([&](const Tensor& x, const Tensor& y) { return body(traced, x, y); });
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 100 + i);
    EXPECT_EQ(step(x, y).item(), body(eager, x, y).item()) << "call " << i;
  }
  EXPECT_EQ(values(traced.model.parameters()), values(eager.model.parameters()));
}

TEST(TracedPattern, AnEmaOfTheWeightsUpdatedInPlace) {
  Classifier eager SMALL_NET(), traced SMALL_NET();
  std::vector<Tensor> eagerEma = clones(eager.model.parameters()), tracedEma = clones(traced.model.parameters());
  auto body = [](Classifier& net, std::vector<Tensor>& ema, const Tensor& x, const Tensor& y) {
    Tensor loss = plainTrainStep(net.model, net.opt, x, y);
    NoGradGuard noGrad;
    for (size_t i = 0; i < ema.size(); ++i)
      ema[i].mul_(scalar_tensor(0.9)).add_(net.model.parameters()[i] * 0.1);
    return loss;
  };
  auto step = trace([&](const Tensor& x, const Tensor& y) { return body(traced, tracedEma, x, y); });
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 100 + i);
    EXPECT_EQ(step(x, y).item(), body(eager, eagerEma, x, y).item()) << i;
  }
  EXPECT_EQ(values(tracedEma), values(eagerEma));
}

TEST(TracedPattern, ALossWeightTensorChangedBetweenCalls) {
  Classifier eager SMALL_NET(), traced SMALL_NET();
  Tensor eagerWeight = scalar_tensor(2.0), tracedWeight = scalar_tensor(2.0);
  auto body = [](Classifier& net, const Tensor& weight, const Tensor& x, const Tensor& y) {
    net.opt.zero_grad();
    Tensor loss = cross_entropy(net.model(x), y) * weight;
    loss.backward();
    net.opt.step();
    return loss;
  };
  auto step = trace([&](const Tensor& x, const Tensor& y) { return body(traced, tracedWeight, x, y); });
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 100 + i);
    EXPECT_EQ(step(x, y).item(), body(eager, eagerWeight, x, y).item()) << i;
    NoGradGuard noGrad;
    eagerWeight.copy_(scalar_tensor(3.0 + double(i)));
    tracedWeight.copy_(scalar_tensor(3.0 + double(i)));
  }
  EXPECT_EQ(values(traced.model.parameters()), values(eager.model.parameters()));
}

TEST(TracedPattern, AUserCounterIncrementedInsideTheStep) {
  Classifier traced SMALL_NET();
  Tensor counter = scalar_tensor(0.0);
  auto step = trace([&](const Tensor& x, const Tensor& y) {
    Tensor loss = plainTrainStep(traced.model, traced.opt, x, y);
    NoGradGuard noGrad;
    counter.add_(scalar_tensor(1.0));
    return loss;
  });
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 100 + i);
    step(x, y);
  }
  EXPECT_EQ(counter.item(), 3.0);
}

TEST(TracedPattern, TwoBackwardsAccumulateBeforeOneStep) {
  Classifier eager SMALL_NET(), traced SMALL_NET();
  auto body = [](Classifier& net, const Tensor& x1, const Tensor& y1, const Tensor& x2, const Tensor& y2) {
    net.opt.zero_grad();
    Tensor first = cross_entropy(net.model(x1), y1);
    first.backward();
    Tensor second = cross_entropy(net.model(x2), y2);
    second.backward();
    net.opt.step();
    return first + second;
  };
  auto step = trace([&](const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d) {
    return body(traced, a, b, c, d);
  });
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x1, y1] = batch(kBatch, kIn, kClasses, 100 + i);
    auto [x2, y2] = batch(kBatch, kIn, kClasses, 200 + i);
    EXPECT_EQ(step(x1, y1, x2, y2).item(), body(eager, x1, y1, x2, y2).item()) << i;
  }
  EXPECT_EQ(values(traced.model.parameters()), values(eager.model.parameters()));
}

TEST(TracedPattern, AnAdversarialStepFromTheInputGradient) {
  expectTracedEqualsEager([](Classifier& net, const Tensor& x, const Tensor& y) {
    Tensor input = zeros_like(x);
    {
      NoGradGuard noGrad;
      input.copy_(x);
    }
    input.requires_grad_();
    Tensor probe = cross_entropy(net.model(input), y);
    probe.backward();
    Tensor adversarial = (input + input.grad() * 0.5).detach();
    net.opt.zero_grad();
    Tensor loss = cross_entropy(net.model(adversarial), y);
    loss.backward();
    net.opt.step();
    return loss;
  });
}

TEST(TracedPattern, AGradientNormReturnedWithTheLoss) {
  Classifier eager SMALL_NET(), traced SMALL_NET();
  auto body = [](Classifier& net, const Tensor& x, const Tensor& y) {
    net.opt.zero_grad();
    Tensor loss = cross_entropy(net.model(x), y);
    loss.backward();
    Tensor squares = scalar_tensor(0.0);
    for (const Tensor& p : net.model.parameters())
      squares = squares + sum(p.grad() * p.grad());
    net.opt.step();
    return std::pair{loss, sqrt(squares)};
  };
  auto step = trace([&](const Tensor& x, const Tensor& y) { return body(traced, x, y); });
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 100 + i);
    auto [tracedLoss, tracedNorm] = step(x, y);
    auto [eagerLoss, eagerNorm] = body(eager, x, y);
    EXPECT_EQ(tracedLoss.item(), eagerLoss.item()) << i;
    EXPECT_EQ(tracedNorm.item(), eagerNorm.item()) << i;
  }
}

TEST(TracedPattern, TrainAndEvalStepsInterleaved) {
  Classifier eager SMALL_NET(), traced SMALL_NET();
  auto evalBody = [](Classifier& net, const Tensor& x, const Tensor& y) {
    NoGradGuard noGrad;
    return cross_entropy(net.model(x), y);
  };
  auto train = trace([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); });
  auto evaluate = trace([&](const Tensor& x, const Tensor& y) { return evalBody(traced, x, y); },
                        {.name = "eval_step"});
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 100 + i);
    EXPECT_EQ(train(x, y).item(), eager.step(x, y).item()) << i;
    auto [vx, vy] = batch(kBatch, kIn, kClasses, 300 + i);
    EXPECT_EQ(evaluate(vx, vy).item(), evalBody(eager, vx, vy).item()) << i;
  }
}

TEST(TracedPattern, ZeroGradWithoutSetToNoneBeforeAnyGradientExists) {
  expectTracedEqualsEager([](Classifier& net, const Tensor& x, const Tensor& y) {
    net.opt.zero_grad(false);
    Tensor loss = cross_entropy(net.model(x), y);
    loss.backward();
    net.opt.step();
    return loss;
  });
}

TEST(TracedPattern, AFailedTraceLeavesStateUsable) {
  Classifier eager SMALL_NET(), traced SMALL_NET();
  auto step = trace([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); });
  auto [bad, badLabels] = batch(kBatch, kIn + 1, kClasses, 5);
  std::string message = errorOf([&] { step(bad, badLabels); });
  EXPECT_NE(message.find("nn::Linear(32, 48): input f32[16x33] must have last dimension 32"), std::string::npos)
      << message;
  // Every parameter still has its value and can be read.
  EXPECT_EQ(values(traced.model.parameters()), values(eager.model.parameters()));
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 100 + i);
    EXPECT_EQ(step(x, y).item(), eager.step(x, y).item()) << i;
  }
  EXPECT_EQ(stateOf(traced), stateOf(eager));
  // And eagerly too.
  auto [x, y] = batch(kBatch, kIn, kClasses, 9);
  EXPECT_EQ(traced.step(x, y).item(), eager.step(x, y).item());
}

TEST(TracedPattern, ATracedFunctionCalledInsideAnotherTraceIsAnError) {
  Classifier traced SMALL_NET();
  auto inner = trace([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); }, {.name = "inner"});
  auto outer = trace([&](const Tensor& x, const Tensor& y) { return inner(x, y); }, {.name = "outer"});
  auto [x, y] = batch(kBatch, kIn, kClasses, 5);
  std::string message = errorOf([&] { outer(x, y); });
  EXPECT_NE(message.find("calling the traced function 'inner' inside the traced step 'outer'"), std::string::npos)
      << message;
  // Each alone still works.
  EXPECT_EQ(errorOf([&] { inner(x, y); }), "");
}

TEST(TracedPattern, AnErrorThrownByTheStepWhileTracingLeavesStateUsable) {
  Classifier eager SMALL_NET(), traced SMALL_NET();
  bool fail = true;
  auto step = trace([&](const Tensor& x, const Tensor& y) {
    traced.opt.zero_grad();
    Tensor loss = cross_entropy(traced.model(x), y);
    loss.backward();
    if (fail)
      throw Error("user error mid-step");
    traced.opt.step();
    return loss;
  });
  auto [x0, y0] = batch(kBatch, kIn, kClasses, 5);
  EXPECT_EQ(errorOf([&] { step(x0, y0); }), "user error mid-step");
  fail = false;
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 100 + i);
    EXPECT_EQ(step(x, y).item(), plainTrainStep(eager.model, eager.opt, x, y).item()) << i;
  }
  EXPECT_EQ(values(traced.model.parameters()), values(eager.model.parameters()));
}

} // namespace
} // namespace jit::testing

namespace jit::testing {
namespace {

TEST(TracedPattern, ClippingOpsCarryTheLineThatClipped) {
  // Dumps, AMP reports and AMPJIT_CHECK_NUMERICS name the user's line: the
  // ops clip_grad_norm_ and clip_grad_value_ make are located where they
  // were called, not at the jit::trace call.
  Classifier net SMALL_NET();
  int normLine = 0, valueLine = 0;
  auto step = trace([&](const Tensor& x, const Tensor& y) {
    net.opt.zero_grad();
    Tensor loss = cross_entropy(net.model(x), y);
    loss.backward();
    normLine = __LINE__ + 1;
    Tensor norm = clip_grad_norm_(net.model.parameters(), 1.0);
    valueLine = __LINE__ + 1;
    clip_grad_value_(net.model.parameters(), 0.5);
    net.opt.step();
    return norm;
  });
  auto [x, y] = batch(kBatch, kIn, kClasses, 3);
  step(x, y);
  const std::string& module = step.traced_module();
  auto opAtLine = [&](const std::string& op, int line) {
    std::string location = "TracedPatternsTest.cpp\":" + std::to_string(line) + ":";
    for (size_t at = module.find(op); at != std::string::npos; at = module.find(op, at + 1)) {
      size_t end = module.find('\n', at);
      if (module.substr(at, end - at).find(location) != std::string::npos)
        return true;
    }
    return false;
  };
  EXPECT_TRUE(opAtLine("jit.sqrt", normLine)) << module;
  EXPECT_TRUE(opAtLine("jit.select", valueLine)) << module;
}

} // namespace
} // namespace jit::testing


namespace jit::testing {
namespace {

/// A tiny GAN: the discriminator's step and the generator's step, each its
/// own function with its own optimizer; the generator's loss backpropagates
/// through the discriminator, whose gradients that step leaves behind.
TEST(TracedPattern, AnMlpOfSiluLeakyReluTanhAndLogSoftmaxModules) {
  // The activations users reach for beside ReLU, with an NLL loss over a
  // LogSoftmax module: bitwise at O0, and at O1 with autocast semantics.
  for (amp::Level level : {amp::O0, amp::O1}) {
    SCOPED_TRACE(::testing::Message() << "O" << int(level));
    auto build = [] {
      Generator generator(12);
      return nn::Sequential(nn::Linear(kIn, kHidden, true, {.generator = &generator}), nn::SiLU(),
                            nn::Linear(kHidden, kHidden, true, {.generator = &generator}), nn::LeakyReLU(0.1),
                            nn::Linear(kHidden, kHidden, true, {.generator = &generator}), nn::Tanh(),
                            nn::Linear(kHidden, kClasses, true, {.generator = &generator}), nn::LogSoftmax(-1));
    };
    nn::Sequential eagerModel = build(), tracedModel = build();
    optim::SGD eagerOpt(eagerModel.parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD tracedOpt(tracedModel.parameters(), {.lr = 0.1, .momentum = 0.9});
    auto body = [](nn::Sequential& model, optim::SGD& opt, const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = nll_loss(model(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
    std::vector<double> losses;
    expectTracedLossesEqualEager(
        level,
        [&](const Tensor& x, const Tensor& y) {
          Tensor loss = body(eagerModel, eagerOpt, x, y);
          losses.push_back(loss.item());
          return loss;
        },
        [&](const Tensor& x, const Tensor& y) { return body(tracedModel, tracedOpt, x, y); },
        [](uint64_t i) { return batch(kBatch, kIn, kClasses, 60 + i); }, 4);
    EXPECT_EQ(values(tracedModel.parameters()), values(eagerModel.parameters()));
    EXPECT_LT(losses.back(), losses.front()) << "the MLP should train";
  }
}

TEST(TracedPattern, AGansTwoStepsSharingTheDiscriminator) {
  Gan eager, traced;
  auto stepD = trace([&](const Tensor& r, const Tensor& n, const Tensor& rl, const Tensor& fl) {
    return traced.stepD(r, n, rl, fl);
  }, {.log_retraces = false, .name = "discriminator_step"});
  auto stepG = trace([&](const Tensor& n, const Tensor& rl) { return traced.stepG(n, rl); },
                     {.log_retraces = false, .name = "generator_step"});
  Tensor realLabels = tensor(std::vector<int64_t>{1, 1, 1, 1}, {4}), fakeLabels = tensor(std::vector<int64_t>{0, 0, 0, 0}, {4});
  for (uint64_t i = 0; i < 4; ++i) {
    Generator data(100 + i);
    Tensor real = rand({4, 6}, f32, &data), noise = rand({4, 4}, f32, &data);
    EXPECT_EQ(stepD(real, noise, realLabels, fakeLabels).item(), eager.stepD(real, noise, realLabels, fakeLabels).item())
        << "call " << i;
    EXPECT_EQ(stepG(noise, realLabels).item(), eager.stepG(noise, realLabels).item()) << "call " << i;
  }
  EXPECT_EQ(traced.everything(), eager.everything());
  // The discriminator's gradients the generator's step leaves behind are
  // dropped by zero_grad before the next discriminator step reads any.
  EXPECT_EQ(stepD.stats().traces, 1u);
  EXPECT_EQ(stepG.stats().traces, 1u);
}

/// A GAN's whole step (GanWithTwoScalers's or GanWithOneScaler's) traced
/// with eager autocast's casts, so with eager's bits.
template <typename TwoLossGan>
auto tracedGanStep(TwoLossGan& gan) {
  return trace(ganStepOf(gan),
               {.amp = policyAt(amp::O1), .semantics = amp::Semantics::autocast, .log_retraces = false, .name = "gan_step"});
}

/// One call of the traced step and of its eager twin under autocast: the same loss.
template <typename Traced, typename Eager>
void expectTheSameLoss(const GanCall& inputs, Traced& step, Eager& eagerStep) {
  double tracedLoss = inputs(step).item();
  amp::autocast scope({.dtype = f16});
  EXPECT_EQ(tracedLoss, inputs(eagerStep).item());
}

TEST(TracedPattern, AGanWithALossScalerPerNetworkInOneTracedStep) {
  GanWithTwoScalers eager, traced;
  auto step = tracedGanStep(traced);
  auto eagerStep = ganStepOf(eager);
  // Each network's loss overflows f16 on its own calls.
  const std::vector<std::pair<double, double>> factors = ganLossFactors();
  std::vector<double> scalesD, scalesG;
  for (size_t call = 0; call < factors.size(); ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    GanCall inputs = ganCall(call, 200);
    expectTheSameLoss(inputs, step, eagerStep);
    EXPECT_EQ(traced.scalerD.found_inf(traced.optD), factors[call].first != 1.0);
    EXPECT_EQ(traced.scalerG.found_inf(traced.optG), factors[call].second != 1.0);
    EXPECT_EQ(traced.scalerD.get_scale(), eager.scalerD.get_scale());
    EXPECT_EQ(traced.scalerG.get_scale(), eager.scalerG.get_scale());
    scalesD.push_back(traced.scalerD.get_scale());
    scalesG.push_back(traced.scalerG.get_scale());
  }
  EXPECT_EQ(traced.everything(), eager.everything());
  EXPECT_EQ(traced.scalerD.skipped_steps(), 2);
  EXPECT_EQ(traced.scalerG.skipped_steps(), 2);
  EXPECT_EQ(traced.scalerD.growth_tracker(), eager.scalerD.growth_tracker());
  EXPECT_EQ(traced.scalerG.growth_tracker(), eager.scalerG.growth_tracker());
  // Each scale followed its own network's overflows and growth interval.
  EXPECT_EQ(scalesD, ganDiscriminatorScales());
  EXPECT_EQ(scalesG, ganGeneratorScales());
  EXPECT_EQ(step.stats().traces, 1u);
}

TEST(TracedPattern, AGanWithOneLossScalerForBothNetworksSkipsEachNetworksOverflowAlone) {
  GanWithOneScaler eager, traced;
  auto step = tracedGanStep(traced);
  auto eagerStep = ganStepOf(eager);
  const std::vector<std::pair<double, double>> factors = ganLossFactors();
  for (size_t call = 0; call < factors.size(); ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    GanCall inputs = ganCall(call, 400);
    std::vector<std::vector<double>> before = traced.everything();
    expectTheSameLoss(inputs, step, eagerStep);
    bool overflowD = factors[call].first != 1.0, overflowG = factors[call].second != 1.0;
    EXPECT_EQ(traced.scaler.found_inf(traced.optD), overflowD);
    EXPECT_EQ(traced.scaler.found_inf(traced.optG), overflowG);
    EXPECT_EQ(traced.scaler.found_inf(), overflowD || overflowG);
    EXPECT_EQ(traced.scaler.get_scale(), ganSharedScales()[call]);
    EXPECT_EQ(traced.everything(), eager.everything());
    // The network that overflowed kept its parameters; the other stepped.
    std::vector<std::vector<double>> after = traced.everything();
    size_t generatorTensors = traced.generator.parameters().size();
    for (size_t i = 0; i < after.size(); ++i) {
      bool overflowed = i < generatorTensors ? overflowG : overflowD;
      if (overflowed)
        EXPECT_EQ(after[i], before[i]) << "tensor " << i;
      else
        EXPECT_NE(after[i], before[i]) << "tensor " << i;
    }
  }
  EXPECT_EQ(traced.scaler.skipped_steps(), 3);
  EXPECT_EQ(traced.scaler.skipped_steps(), eager.scaler.skipped_steps());
  EXPECT_EQ(traced.scaler.growth_tracker(), eager.scaler.growth_tracker());
  EXPECT_EQ(step.stats().traces, 1u);
}

} // namespace
} // namespace jit::testing
