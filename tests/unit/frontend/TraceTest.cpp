// jit::trace: capture, guards, eager-vs-traced agreement and trace-time errors.

#include "ClassifierNet.h"
#include "ElementwiseOptimizerChoices.h"
#include "FrontendTestUtil.h"
#include "ScopedEnvironment.h"
#include "TemporaryDirectory.h"

#include "ampjit/runtime/BuildInfo.h"
#include "jit/cuda.h"
#include "jit/trace.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace jit::testing {
namespace {

constexpr int64_t kIn = 32, kHidden = 48, kClasses = 10, kBatch = 16;

/// The classifier at a size that keeps eager comparisons quick.
#define SMALL_NET(...) (kIn, kHidden, kClasses, 3 __VA_OPT__(, ) __VA_ARGS__)

/// How often `what` occurs in `text` (GEMMs of a type in a plan, say).
size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

TEST(Trace, TheClassifierStepIsCapturedWholeWithRolesAndTies) {
  Classifier net(784, 512, 10);
  auto [x, y] = batch(64, 784, 10, 7);
  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); });
  step(x, y);
  const std::string& module = step.traced_module();
  // 2 inputs, 6 parameters, 6 momentum buffers, lr, 5 scaler tensors.
  for (auto [role, count] : {std::pair{"\"input\"", 2}, {"\"param\"", 6}, {"\"opt_state\"", 6},
                             {"\"hyper\"", 1}, {"\"scaler_state\"", 5}})
    EXPECT_EQ(occurrences(module, role), size_t(count)) << role;
  EXPECT_NE(module.find("jit.tied = 19 : i64"), std::string::npos);
  // The one returned tensor, the loss, is marked as the step's output.
  EXPECT_EQ(occurrences(module, "jit.returned"), 1u);
  EXPECT_NE(module.find("-> (tensor<f32> {jit.returned}"), std::string::npos);
  EXPECT_NE(module.find("amp.update_scale"), std::string::npos);
  EXPECT_EQ(step.stats().traces, 1u);
  // Ops carry the user's source location.
  EXPECT_NE(module.find("TraceTest.cpp"), std::string::npos);
}

TEST(Trace, EagerAndTracedAgreeBitwiseAtO0) {
  Classifier eager SMALL_NET(), traced SMALL_NET();
  auto step = trace([&](const Tensor& a, const Tensor& b) { return traced.step(a, b); });
  for (uint64_t i = 0; i < 5; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 100 + i);
    Tensor expected = eager.step(x, y);
    Tensor got = step(x, y);
    EXPECT_EQ(got.item(), expected.item()) << "step " << i;
  }
  EXPECT_EQ(stateOf(traced), stateOf(eager));
  EXPECT_EQ(step.stats().traces, 1u);
  EXPECT_EQ(step.stats().cache_hits, 4u);
  // Gradients the step consumed are temporaries of the compiled step.
  EXPECT_FALSE(traced.model.parameters()[0].grad().defined());
}

/// The classifier's step eagerly, forward under jit::amp::autocast (f16).
Tensor eagerAutocastStep(Classifier& net, const Tensor& x, const Tensor& y) { return net.autocastStep(x, y); }

TEST(Trace, AutocastSemanticsEqualEagerAutocastBitwise) {
  Classifier eager SMALL_NET(), traced SMALL_NET();
  auto step = trace([&](const Tensor& a, const Tensor& b) { return traced.step(a, b); },
                    {.amp = {.level = amp::O1, .dtype = f16}, .semantics = amp::Semantics::autocast});
  for (uint64_t i = 0; i < 4; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 200 + i);
    Tensor expected = eagerAutocastStep(eager, x, y);
    EXPECT_EQ(step(x, y).item(), expected.item()) << "step " << i;
  }
  EXPECT_EQ(stateOf(traced), stateOf(eager));
  // Each Linear's bias add ran in f16 as eager autocast (torch's linear)
  // runs it, and the report says why.
  EXPECT_NE(step.amp_report().find("a linear layer's bias add (jit.linear_bias) runs in its product's type (f16)"),
            std::string::npos)
      << step.amp_report();
}

TEST(Trace, MindSporesAutoLevelEqualsEagerAutocastBitwiseWhateverTheSemantics) {
  // Auto decides op by op (allow low, deny fp32, the rest the widest of its
  // inputs), which is eager autocast's rule: even under paint semantics the
  // step is eager autocast's, where O1 with paint only agrees within tolerance.
  for (amp::Semantics semantics : {amp::Semantics::paint, amp::Semantics::autocast}) {
    SCOPED_TRACE(semantics == amp::Semantics::paint ? "paint" : "autocast");
    Classifier eager SMALL_NET(), traced SMALL_NET();
    auto step = trace([&](const Tensor& a, const Tensor& b) { return traced.step(a, b); },
                      {.amp = {.level = amp::Auto, .dtype = f16}, .semantics = semantics, .backend = Backend::cpu});
    for (uint64_t i = 0; i < 4; ++i) {
      auto [x, y] = batch(kBatch, kIn, kClasses, 200 + i);
      Tensor expected = eagerAutocastStep(eager, x, y);
      EXPECT_EQ(step(x, y).item(), expected.item()) << "step " << i;
    }
    EXPECT_EQ(stateOf(traced), stateOf(eager));
    // The matmuls ran in f16 (a step that kept everything in fp32 would
    // differ from eager autocast in its loss, but say so here too).
    EXPECT_NE(step.amp_report().find("\"f16\":"), std::string::npos) << step.amp_report();
  }
}

TEST(Trace, AutocastSemanticsEqualEagerForLayerNormGeluAndAdamW) {
  // Beyond the classifier: LayerNorm (deny), GELU, AdamW with weight decay
  // (and with AMSGrad) and a scaler that starts by overflowing, in f16 and bf16.
  struct Net {
    explicit Net(bool amsgrad)
        : g(5), model(nn::Linear(8, 16, true, {.generator = &g}), nn::LayerNorm({16}), nn::GELU(),
                      nn::Linear(16, 3, true, {.generator = &g})),
          opt(model.parameters(), {.lr = 1e-2, .betas = {0.9, 0.5}, .weight_decay = 0.01, .amsgrad = amsgrad}),
          scaler({.init_scale = 1e5, .growth_interval = 2}) {}
    Tensor step(const Tensor& x, const Tensor& y) { return scaledTrainStep(model, opt, scaler, x, y); }
    Generator g;
    nn::Sequential model;
    optim::AdamW opt;
    amp::GradScaler scaler;
  };
  for (auto [dtype, amsgrad] : {std::pair{f16, false}, {bf16, false}, {f16, true}}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + (amsgrad ? " AMSGrad" : ""));
    Net eager(amsgrad), traced(amsgrad);
    auto step = trace([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); },
                      {.amp = {.level = amp::O1, .dtype = dtype},
                       .semantics = amp::Semantics::autocast,
                       .backend = Backend::cpu});
    for (uint64_t i = 0; i < 6; ++i) {
      auto [x, y] = batch(4, 8, 3, 90 + i);
      amp::autocast scope({.dtype = dtype});
      EXPECT_EQ(step(x, y).item(), eager.step(x, y).item()) << "call " << i;
    }
    auto tracedState = traced.model.state_dict(), eagerState = eager.model.state_dict();
    for (size_t i = 0; i < eagerState.size(); ++i)
      EXPECT_EQ(tracedState[i].second.to_vector(), eagerState[i].second.to_vector()) << eagerState[i].first;
    auto tracedOptimizer = traced.opt.state_dict(), eagerOptimizer = eager.opt.state_dict();
    ASSERT_EQ(tracedOptimizer.size(), eagerOptimizer.size());
    for (size_t i = 0; i < eagerOptimizer.size(); ++i)
      EXPECT_EQ(tracedOptimizer[i].second.to_vector(), eagerOptimizer[i].second.to_vector())
          << eagerOptimizer[i].first;
    EXPECT_EQ(traced.scaler.get_scale(), eager.scaler.get_scale());
  }
}

TEST(Trace, PaintSemanticsAgreeWithEagerAutocastWithinTolerance) {
  Classifier eager SMALL_NET(), traced SMALL_NET();
  auto step = trace([&](const Tensor& a, const Tensor& b) { return traced.step(a, b); },
                    {.amp = {.level = amp::O1, .dtype = f16}});
  for (uint64_t i = 0; i < 4; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 300 + i);
    Tensor expected = eagerAutocastStep(eager, x, y);
    // Paint runs the infer/clear ops between low-precision ops low too; the
    // loss sees f16 rounding of a few more values (a loss-level tolerance).
    double got = step(x, y).item();
    EXPECT_NEAR(got, expected.item(), 1e-2 * std::fabs(expected.item())) << "step " << i;
  }
  auto a = stateOf(traced), b = stateOf(eager);
  for (size_t i = 0; i + 1 < a.size(); ++i)
    expectClose(a[i], b[i], {1e-2, 1e-4}, "state " + std::to_string(i));
}

TEST(Trace, AnOverflowingStepIsSkippedOnTheCompiledStep) {
  Classifier net SMALL_NET({.growth_interval = 2});
  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); },
                    {.amp = {.level = amp::O1, .dtype = f16}});
  auto [x, y] = batch(kBatch, kIn, kClasses, 5);
  step(x, y);
  EXPECT_EQ(net.scaler.get_scale(), 65536.0);
  std::vector<std::vector<double>> before = stateOf(net);

  Tensor poisoned = withInfAt(x, 3);
  step(poisoned, y);
  std::vector<std::vector<double>> after = stateOf(net);
  for (size_t i = 0; i + 1 < after.size(); ++i)
    EXPECT_EQ(after[i], before[i]) << "state " << i << " changed on a skipped step";
  EXPECT_EQ(net.scaler.get_scale(), 32768.0);
  EXPECT_EQ(net.scaler.skipped_steps(), 1);
  EXPECT_EQ(net.scaler.growth_tracker(), 0);

  // Two clean steps grow the scale back (growth_interval 2), and update.
  step(x, y);
  EXPECT_NE(stateOf(net)[0], before[0]);
  EXPECT_EQ(net.scaler.growth_tracker(), 1);
  step(x, y);
  EXPECT_EQ(net.scaler.get_scale(), 65536.0);
  EXPECT_EQ(net.scaler.growth_tracker(), 0);
  EXPECT_EQ(step.stats().traces, 1u);
}

/// Every parameter's and momentum buffer's values, NaNs equal to each other
/// (stateOf also asks the scaler whether the last step overflowed).
std::vector<std::vector<double>> weightsOf(Classifier& net) {
  std::vector<std::vector<double>> weights;
  for (size_t i = 0; i < net.model.parameters().size(); ++i)
    for (Tensor values : {net.model.parameters()[i], net.opt.momentum_buffer(i)}) {
      weights.push_back(values.to_vector());
      for (double& value : weights.back())
        value = std::isnan(value) ? std::numeric_limits<double>::max() : value;
    }
  return weights;
}

TEST(Trace, AScalerThatNeverDropsAnUpdateChecksNothingAndAppliesAnOverflowAsEagerly) {
  // MindSpore's FixedLossScaleManager(drop_overflow_update=False): the
  // compiled step has no finiteness check and no predicated update.
  amp::GradScalerOptions never{.dynamic = false, .drop_overflow_update = false, .init_scale = 1024.0};
  Classifier eager SMALL_NET(never), traced SMALL_NET(never),
      checked SMALL_NET(amp::GradScalerOptions{.dynamic = false, .init_scale = 1024.0});
  TraceOptions options{.amp = {.level = amp::O1, .dtype = f16}, .semantics = amp::Semantics::autocast};
  auto step = trace([&](const Tensor& a, const Tensor& b) { return traced.step(a, b); }, options);
  auto checkedStep = trace([&](const Tensor& a, const Tensor& b) { return checked.step(a, b); }, options);
  auto [x, y] = batch(kBatch, kIn, kClasses, 17);
  for (int call = 0; call < 2; ++call) {
    EXPECT_EQ(step(x, y).item(), eagerAutocastStep(eager, x, y).item()) << "call " << call;
    checkedStep(x, y);
  }
  EXPECT_EQ(weightsOf(traced), weightsOf(eager));
  EXPECT_EQ(weightsOf(traced), weightsOf(checked)) << "with nothing to skip, the checking scaler's step";
  EXPECT_EQ(step.traced_module().find("all_finite"), std::string::npos) << step.traced_module();
  EXPECT_EQ(step.traced_module().find("predicate"), std::string::npos) << step.traced_module();
  EXPECT_NE(checkedStep.traced_module().find("all_finite"), std::string::npos);

  Tensor poisoned = withInfAt(x, 3);
  std::vector<std::vector<double>> before = weightsOf(traced);
  step(poisoned, y);
  eagerAutocastStep(eager, poisoned, y);
  checkedStep(poisoned, y);
  EXPECT_NE(weightsOf(traced), before) << "the overflowing update was applied";
  EXPECT_EQ(weightsOf(traced), weightsOf(eager));
  EXPECT_EQ(traced.scaler.skipped_steps(), 0);
  EXPECT_EQ(traced.scaler.get_scale(), 1024.0);
  EXPECT_EQ(checked.scaler.skipped_steps(), 1);
  EXPECT_FALSE(traced.scaler.state_tensors().last_step_finite.defined());
  std::string message = errorOf([&] { traced.scaler.found_inf(); });
  EXPECT_NE(message.find("never check their gradients"), std::string::npos) << message;
  EXPECT_EQ(step.stats().traces, 1u);
}

/// Two Linear layers (the first without a bias, so that under eager autocast
/// its activations are f16) and SGD; with `fp32Head` the second runs inside
/// the user's autocast(false), as PyTorch users keep a sensitive head in fp32.
struct TwoLayerStep {
  explicit TwoLayerStep(bool fp32Head)
      : generator(11), first(kIn, kHidden, false, {.generator = &generator}),
        second(kHidden, kClasses, true, {.generator = &generator}), opt(parametersOf(first, second), {.lr = 0.1}),
        fp32Head(fp32Head) {}
  static std::vector<Tensor> parametersOf(nn::Linear& a, nn::Linear& b) {
    std::vector<Tensor> all = a.parameters();
    for (const Tensor& p : b.parameters())
      all.push_back(p);
    return all;
  }
  Tensor operator()(const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor h = relu(first(x));
    Tensor logits;
    if (fp32Head) {
      amp::autocast off(false);
      // In the types it is given, as eagerly: f16 under eager autocast.
      Tensor damped = h * h;
      logits = second(damped.to(f32));
    } else {
      logits = second(h);
    }
    Tensor loss = cross_entropy(logits, y);
    loss.backward();
    opt.step();
    return loss;
  }
  Generator generator;
  nn::Linear first, second;
  optim::SGD opt;
  bool fp32Head;
};

TEST(Trace, AnAutocastFalseRegionInATracedStepKeepsItsOpsAndTheirGradientsFp32) {
  TwoLayerStep regioned(true), plain(false);
  TraceOptions options{.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cpu};
  auto regionStep = trace([&](const Tensor& x, const Tensor& y) { return regioned(x, y); }, options);
  auto plainStep = trace([&](const Tensor& x, const Tensor& y) { return plain(x, y); }, options);
  auto [x, y] = batch(kBatch, kIn, kClasses, 4);
  regionStep(x, y);
  plainStep(x, y);
  // The head's forward GEMM and its two gradient GEMMs run in f32, the first
  // layer's forward and weight gradient in f16; without the region all five in f16.
  EXPECT_EQ(occurrences(regionStep.plan_text(), "gemm f32 x f32"), 3u) << regionStep.plan_text();
  EXPECT_EQ(occurrences(regionStep.plan_text(), "gemm f16 x f16"), 2u) << regionStep.plan_text();
  EXPECT_EQ(occurrences(plainStep.plan_text(), "gemm f32 x f32"), 0u) << plainStep.plan_text();
  EXPECT_EQ(occurrences(plainStep.plan_text(), "gemm f16 x f16"), 5u) << plainStep.plan_text();
  EXPECT_EQ(occurrences(plainStep.traced_module(), "amp.disabled"), 0u);
  EXPECT_NE(regionStep.amp_report().find("AMP disabled by a region (amp.disabled)"), std::string::npos);
}

TEST(Trace, AnAutocastFalseRegionUnderAutocastSemanticsEqualsEagerAutocastBitwise) {
  TwoLayerStep eager(true), traced(true);
  expectTracedLossesEqualEager(
      amp::O1, [&](const Tensor& x, const Tensor& y) { return eager(x, y); },
      [&](const Tensor& x, const Tensor& y) { return traced(x, y); },
      [](uint64_t call) { return batch(kBatch, kIn, kClasses, 30 + call); }, 3);
  for (size_t i = 0; i < traced.opt.parameters().size(); ++i)
    EXPECT_EQ(traced.opt.parameters()[i].to_vector(), eager.opt.parameters()[i].to_vector()) << "parameter " << i;
}

TEST(Trace, AUsersOwnAutocastInsideTheTracedStepCompilesAtEveryLevel) {
  // A PyTorch user's step as written (eagerAutocastStep: autocast around the
  // forward, the scaler outside), traced with and without the trace's own
  // AMP. The user's autocast records its casts as conversions, so the traced
  // function holds f16 values before AMP decides anything. Until 2026-12-02
  // amp-verify refused the widening conversions and the step never compiled
  // at O1, O2 or auto. Deciding op by op (O0, O1 under autocast semantics,
  // auto) gives eager autocast's bits; painting and O2 decide otherwise and
  // agree to f16's precision.
  struct Case {
    const char* name;
    std::optional<amp::Level> level;
    amp::Semantics semantics;
    bool bitwise;
  };
  for (const Case& c : {Case{"O0", std::nullopt, amp::Semantics::paint, true},
                        Case{"O1 paint", amp::O1, amp::Semantics::paint, false},
                        Case{"O1 autocast", amp::O1, amp::Semantics::autocast, true},
                        Case{"O2", amp::O2, amp::Semantics::paint, false},
                        Case{"auto", amp::Auto, amp::Semantics::paint, true}}) {
    SCOPED_TRACE(c.name);
    // A scale that overflows the first step's f16 gradients.
    Classifier eager SMALL_NET({.init_scale = 1e6}), traced SMALL_NET({.init_scale = 1e6});
    TraceOptions options{.semantics = c.semantics, .backend = Backend::cpu};
    if (c.level)
      options.amp = {.level = *c.level, .dtype = f16};
    auto step = trace([&](const Tensor& x, const Tensor& y) { return eagerAutocastStep(traced, x, y); }, options);
    for (uint64_t i = 0; i < 4; ++i) {
      auto [x, y] = batch(kBatch, kIn, kClasses, 200 + i);
      double expected = eagerAutocastStep(eager, x, y).item();
      double got = step(x, y).item();
      if (c.bitwise) {
        EXPECT_EQ(got, expected) << "step " << i;
      } else {
        EXPECT_NEAR(got, expected, 1e-2 * std::abs(expected)) << "step " << i;
      }
    }
    EXPECT_EQ(step.stats().traces, 1u);
    EXPECT_EQ(step.stats().eager_calls, 0u);
    EXPECT_GE(traced.scaler.skipped_steps(), 1);
    if (c.bitwise) {
      EXPECT_EQ(traced.scaler.skipped_steps(), eager.scaler.skipped_steps());
      EXPECT_EQ(stateOf(traced), stateOf(eager));
    } else {
      // Painting and O2 sum the bias gradients in fp32 where eager autocast
      // (torch's linear) sums them in f16, which overflows for longer: the
      // eager step may skip more steps, never fewer.
      EXPECT_GE(eager.scaler.skipped_steps(), traced.scaler.skipped_steps());
    }
  }
}

TEST(Trace, AUsersOwnAutocastWithCustomListsInsideTheTracedStepEqualsEager) {
  // Paddle's auto_cast(custom_black_list=['matmul']) around the forward:
  // the matmuls, and so their gradients, stay fp32, traced as eagerly.
  auto listsStep = [](Classifier& net, const Tensor& x, const Tensor& y) {
    return net.autocastStep(x, y, {.custom_deny = {"jit.matmul"}});
  };
  Classifier eager SMALL_NET(), traced SMALL_NET(), listless SMALL_NET();
  auto step = trace([&](const Tensor& x, const Tensor& y) { return listsStep(traced, x, y); }, {.backend = Backend::cpu});
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 300 + i);
    double expected = listsStep(eager, x, y).item();
    EXPECT_EQ(step(x, y).item(), expected) << "step " << i;
    if (i == 0) {
      EXPECT_NE(eagerAutocastStep(listless, x, y).item(), expected) << "the list should change the loss";
    }
  }
  EXPECT_EQ(stateOf(traced), stateOf(eager));
  EXPECT_EQ(occurrences(step.plan_text(), "gemm f16"), 0u) << step.plan_text();
  EXPECT_GE(occurrences(step.plan_text(), "gemm f32 x f32"), 5u) << step.plan_text();
}

TEST(Trace, ADenyOpOnTheUsersOwnF16ValueComputesInFp32AtEveryLevel) {
  // The user runs a log-softmax on f16 logits of their own making
  // (`.to(f16)`) and widens the result for the loss. Eager autocast runs the
  // log-softmax, a deny op, in fp32 on a cast-up copy, so must the traced
  // step. Before 2026-12-02 AMP left every op on such a value alone and
  // amp-verify refused the f16 log-softmax (and the widening conversion) at
  // O1, O2 and auto. Where the pass follows eager autocast (O1 autocast,
  // auto) it is bit for bit: the gradient of the user's widening converts to
  // the f32 the log-softmax now computes in, so it is rounded to f16 once,
  // after the log-softmax's backward, as at eager autocast's own cast (until
  // 2026-12-03 it was rounded at the user's conversion too). Where the value
  // the user narrows is fp32 eagerly (a softmax's, a deny op), the gradient
  // of that narrowing reads the gradient rounded to f16, as eager autocast's
  // cast rounds it, before widening it. The loss is an MSE against soft
  // targets so that the gradient rounding can show: an NLL gradient
  // (-scale/N at one class) is exact in f16.
  auto halfLogSoftmaxStep = [](Classifier& net, const Tensor& x, const Tensor& softTargets, bool ofASoftmax) {
    net.opt.zero_grad();
    Tensor logits = net.model(x);
    Tensor logProbs = log_softmax((ofASoftmax ? softmax(logits, 1) : logits).to(f16), 1).to(f32);
    Tensor loss = mse_loss(logProbs, softTargets);
    net.scaler.scale(loss).backward();
    net.scaler.step(net.opt);
    net.scaler.update();
    return loss;
  };
  auto softBatch = [](uint64_t call) {
    auto [x, labels] = batch(kBatch, kIn, kClasses, 60 + call);
    Generator generator(90 + call);
    return std::pair{x, rand({kBatch, kClasses}, f32, &generator)};
  };
  for (bool ofASoftmax : {false, true})
  for (auto [level, semantics] : {std::pair{amp::O1, amp::Semantics::paint}, {amp::O1, amp::Semantics::autocast},
                                  {amp::O2, amp::Semantics::paint}, {amp::Auto, amp::Semantics::paint}}) {
    SCOPED_TRACE(std::string(amp::level_name(level)) + (semantics == amp::Semantics::paint ? " paint" : " autocast") +
                 (ofASoftmax ? ", of a softmax" : ""));
    Classifier eager SMALL_NET(), traced SMALL_NET();
    auto step = trace([&](const Tensor& x, const Tensor& t) { return halfLogSoftmaxStep(traced, x, t, ofASoftmax); },
                      {.amp = {.level = level, .dtype = f16}, .semantics = semantics, .backend = Backend::cpu});
    bool bitwise = level == amp::Auto || semantics == amp::Semantics::autocast;
    for (uint64_t i = 0; i < 3; ++i) {
      auto [x, t] = softBatch(i);
      amp::autocast scope({.dtype = f16});
      double expected = halfLogSoftmaxStep(eager, x, t, ofASoftmax).item();
      double got = step(x, t).item();
      if (bitwise)
        EXPECT_EQ(got, expected) << "step " << i;
      else
        EXPECT_NEAR(got, expected, 1e-2 * std::abs(expected)) << "step " << i;
    }
    EXPECT_EQ(step.stats().eager_calls, 0u);
    EXPECT_EQ(traced.scaler.skipped_steps(), eager.scaler.skipped_steps());
    if (bitwise) {
      EXPECT_EQ(stateOf(traced), stateOf(eager));
    }
    // The report's decision for the log-softmax (one JSON object).
    const std::string& report = step.amp_report();
    size_t at = report.find("\"op\": \"jit.log_softmax\"");
    ASSERT_NE(at, std::string::npos) << report;
    size_t begin = report.rfind('{', at), end = report.find('}', at);
    std::string decision = report.substr(begin, end - begin);
    EXPECT_NE(decision.find("\"compute_type\": \"f32\""), std::string::npos) << decision;
  }
}

TEST(Trace, AnF16BatchMeetsTheFp32WeightsOfATracedAmpStepAsUnderEagerAutocast) {
  // Eagerly, an f16 batch and fp32 weights meet only under autocast, which
  // casts both for the matmul; the trace records with autocast off, so
  // until 2026-12-02 the first Linear refused the mix at every level.
  auto halfBatch = [](uint64_t call) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 80 + call);
    return std::pair{x.to(f16), y};
  };
  for (amp::Level level : {amp::O1, amp::Auto}) {
    SCOPED_TRACE(amp::level_name(level));
    Classifier eager SMALL_NET(), traced SMALL_NET();
    expectTracedLossesEqualEager(
        level, [&](const Tensor& x, const Tensor& y) { return eager.step(x, y); },
        [&](const Tensor& x, const Tensor& y) { return traced.step(x, y); }, halfBatch, 3);
    EXPECT_EQ(stateOf(traced), stateOf(eager));
  }
  for (amp::Level level : {amp::O1, amp::O2}) {
    SCOPED_TRACE(std::string(amp::level_name(level)) + " paint");
    Classifier eager SMALL_NET(), traced SMALL_NET();
    auto step = trace([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); },
                      {.amp = {.level = level, .dtype = f16}, .backend = Backend::cpu});
    for (uint64_t i = 0; i < 3; ++i) {
      auto [x, y] = halfBatch(i);
      amp::autocast scope({.dtype = f16});
      double expected = eager.step(x, y).item();
      EXPECT_NEAR(step(x, y).item(), expected, 1e-2 * std::abs(expected)) << "step " << i;
    }
    // The widening the trace recorded folds into the matmul's cast: the
    // first GEMM reads the batch (%0) as it came, and no conversion does.
    EXPECT_NE(step.plan_text().find("gemm f16 x f16 -> f16 (acc f32) A=%0 "), std::string::npos) << step.plan_text();
    EXPECT_EQ(occurrences(step.plan_text(), "x=%0 "), 0u) << step.plan_text();
  }
  // Past the variant limit the call runs eagerly, and takes the f16 batch too.
  {
    Classifier net SMALL_NET();
    auto step = trace([&](const Tensor& x, const Tensor& y) { return net.step(x, y); },
                      {.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cpu, .max_variants = 1,
                       .log_retraces = false});
    for (int64_t size : {kBatch, kBatch / 2}) {
      auto [x, y] = batch(size, kIn, kClasses, 90);
      EXPECT_TRUE(std::isfinite(step(x.to(f16), y).item())) << "batch " << size;
    }
    EXPECT_EQ(step.stats().eager_calls, 1u);
  }
  // At O0 nothing casts, as eagerly without autocast: the mix is an error
  // that names the op and both types.
  Classifier fp32 SMALL_NET();
  auto step = trace([&](const Tensor& x, const Tensor& y) { return fp32.step(x, y); }, {.backend = Backend::cpu});
  auto [x, y] = halfBatch(0);
  try {
    step(x, y);
    ADD_FAILURE() << "an f16 batch met fp32 weights at O0";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("jit.matmul: operand 'rhs' f32[48x32] must have the element type of "
                                             "operand 'lhs' f16[16x32]"),
              std::string::npos)
        << error.what();
  }
}

TEST(Trace, ACxxNumberInAnExpressionTakesItsTensorsTypeAsUnderEagerAutocast) {
  // `h * 0.3` on an f16 h is an f16 product eagerly (PyTorch's wrapped
  // number). The trace sees h as f32, so its 0.3 is an f32 constant; the
  // pass must not let it widen the op. Each loss and weight bit for bit.
  for (DType low : {f16, bf16}) {
    SCOPED_TRACE(dtype_name(low));
    struct Net {
      Net() : init(11), first(kIn, kHidden, false, {.generator = &init}), second(kHidden, kClasses, true, {.generator = &init}) {}
      Tensor operator()(const Tensor& x, const Tensor& y) {
        Tensor h = relu(first(x)); // no bias: the product's type, low
        Tensor scaled = (h * 0.3 + 0.1) / 3.0;
        return cross_entropy(second(scaled), y);
      }
      Generator init;
      nn::Linear first, second;
    } eager, traced;
    expectTracedLossesEqualEager(
        amp::O1, [&](const Tensor& x, const Tensor& y) { return eager(x, y); },
        [&](const Tensor& x, const Tensor& y) { return traced(x, y); },
        [](uint64_t call) { return batch(kBatch, kIn, kClasses, 50 + call); }, 2, low);
  }
}

namespace {

/// softplus(x) = log(1 + exp(x)) as an autograd::function whose backward
/// recomputes sigmoid(x) = 1 / (1 + exp(-x)) from the input: an exp (a
/// deny op) on the low-precision activation, which eagerly runs outside
/// autocast, in f16 or bf16.
Tensor customSoftplus(const Tensor& x, autograd::FunctionOptions options = {}) {
  return autograd::function(
      "Softplus", {x}, [](const std::vector<Tensor>& in) { return std::vector<Tensor>{log(exp(in[0]) + 1.0)}; },
      [](const autograd::FunctionContext& c) {
        const Tensor& g = c.grad_outputs[0];
        return std::vector<Tensor>{g / (exp(-c.inputs[0]) + 1.0).type_as(g)};
      },
      options)[0];
}

/// PyTorch's custom_fwd/custom_bwd example: a matmul with its own backward.
Tensor customMatmul(const Tensor& a, const Tensor& b, autograd::FunctionOptions options) {
  return autograd::function(
      "MyMM", {a, b}, [](const std::vector<Tensor>& in) { return std::vector<Tensor>{matmul(in[0], in[1])}; },
      [](const autograd::FunctionContext& c) {
        const Tensor& g = c.grad_outputs[0];
        return std::vector<Tensor>{matmul(g, c.inputs[1], {.transpose_rhs = true}),
                                   matmul(c.inputs[0], g, {.transpose_lhs = true})};
      },
      options)[0];
}

/// A two-layer classifier with `middle` between the layers. The first has
/// no bias, so its output is the product's type, low under eager autocast.
struct CustomMiddleStep {
  explicit CustomMiddleStep(std::function<Tensor(const Tensor&, const Tensor&)> middle)
      : generator(11), first(kIn, kHidden, false, {.generator = &generator}),
        mixing(randn({kHidden, kHidden}, f32, &generator) * 0.1),
        second(kHidden, kClasses, true, {.generator = &generator}), middle(std::move(middle)),
        opt(parameters(), {.lr = 0.1}) {
    mixing.requires_grad_();
  }
  std::vector<Tensor> parameters() {
    std::vector<Tensor> all = first.parameters();
    all.push_back(mixing);
    for (const Tensor& p : second.parameters())
      all.push_back(p);
    return all;
  }
  Tensor operator()(const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(second(middle(first(x), mixing)), y);
    loss.backward();
    opt.step();
    return loss;
  }
  Generator generator;
  nn::Linear first;
  Tensor mixing;
  nn::Linear second;
  std::function<Tensor(const Tensor&, const Tensor&)> middle;
  optim::SGD opt;
};

void expectCustomMiddleTracesAsEager(const std::function<Tensor(const Tensor&, const Tensor&)>& middle) {
  for (DType low : {f16, bf16}) {
    SCOPED_TRACE(dtype_name(low));
    CustomMiddleStep eager(middle), traced(middle);
    expectTracedLossesEqualEager(
        amp::O1, [&](const Tensor& x, const Tensor& y) { return eager(x, y); },
        [&](const Tensor& x, const Tensor& y) { return traced(x, y); },
        [](uint64_t call) { return batch(kBatch, kIn, kClasses, 70 + call); }, 3, low);
    for (size_t i = 0; i < traced.parameters().size(); ++i)
      EXPECT_EQ(traced.parameters()[i].to_vector(), eager.parameters()[i].to_vector()) << "parameter " << i;
  }
}

} // namespace

TEST(Trace, AFunctionsBackwardRunsOutsideAutocastInATracedStepAsEagerly) {
  // Its exp reads the f16 activation: eagerly (autocast off in backward) an
  // f16 exp, where the policy's list would say fp32. The gradient arrives
  // in the output's type, f32 (log is a deny op), through a type_as.
  expectCustomMiddleTracesAsEager(
      [](const Tensor& h, const Tensor& mixing) { return matmul(customSoftplus(h), mixing); });
}

TEST(Trace, AFunctionWithAutocastBackwardLowersItsBackwardsMatmulsAsEagerly) {
  // custom_bwd: the backward's matmuls run under the forward's autocast,
  // f16 products whose gradients go back to the f32 inputs' types.
  expectCustomMiddleTracesAsEager([](const Tensor& h, const Tensor& mixing) {
    return customMatmul(relu(h), mixing, {.autocast_backward = true});
  });
}

TEST(Trace, AFunctionWithCastInputsStaysFp32AtEveryLevelAndEqualsEagerAutocast) {
  auto middle = [](const Tensor& h, const Tensor& mixing) {
    return customMatmul(customSoftplus(h), mixing, {.cast_inputs = f32});
  };
  expectCustomMiddleTracesAsEager(middle);
  // Painted and at O2 too: the function's matmul and its two gradient
  // matmuls are f32; the layers' five (the first has no input gradient) f16.
  for (amp::Level level : {amp::O1, amp::O2}) {
    SCOPED_TRACE(int(level));
    CustomMiddleStep net(middle);
    auto step = trace([&](const Tensor& x, const Tensor& y) { return net(x, y); },
                      {.amp = {.level = level, .dtype = f16}, .backend = Backend::cpu});
    auto [x, y] = batch(kBatch, kIn, kClasses, 4);
    step(x, y);
    EXPECT_EQ(occurrences(step.plan_text(), "gemm f32 x f32"), 3u) << step.plan_text();
    EXPECT_EQ(occurrences(step.plan_text(), "gemm f16 x f16"), 5u) << step.plan_text();
  }
}

TEST(Trace, AFunctionWithF16CastInputsRunsInF16AtEveryAmpLevelAndEqualsEagerAutocast) {
  // custom_fwd(cast_inputs=torch.float16): the function's values are the
  // user's f16 ones, in an AMP-off region, whatever the step's AMP type.
  auto middle = [](const Tensor& h, const Tensor& mixing) {
    return customMatmul(h, mixing, {.cast_inputs = f16});
  };
  expectCustomMiddleTracesAsEager(middle);
  // Painted and at O2 in bf16: the function's matmul and its two gradient
  // matmuls are f16, the layers' five bf16. At O0 (code without autocast)
  // nothing is converted: all eight fp32.
  for (auto [level, gemms] : {std::pair{amp::O1, "gemm bf16 x bf16"}, {amp::O2, "gemm bf16 x bf16"},
                              {amp::O0, "gemm f32 x f32"}}) {
    SCOPED_TRACE(amp::level_name(level));
    CustomMiddleStep net(middle);
    TraceOptions options{.backend = Backend::cpu};
    if (level != amp::O0)
      options.amp = {.level = level, .dtype = bf16};
    auto step = trace([&](const Tensor& x, const Tensor& y) { return net(x, y); }, options);
    auto [x, y] = batch(kBatch, kIn, kClasses, 4);
    EXPECT_TRUE(std::isfinite(step(x, y).item()));
    EXPECT_EQ(occurrences(step.plan_text(), "gemm f16 x f16"), level == amp::O0 ? 0u : 3u) << step.plan_text();
    EXPECT_EQ(occurrences(step.plan_text(), gemms), level == amp::O0 ? 8u : 5u) << step.plan_text();
  }
}

TEST(Trace, ADetachedParameterInsideTheStepReadsItsCurrentValueEveryCall) {
  // A penalty on the weights' detached values (a target the gradient does
  // not flow through): eagerly it reads the weights as each step finds them.
  // Its handle, made inside the trace, was captured as a state of its own
  // and kept the first call's weights once the update wrote the parameter.
  struct Net {
    Net() : generator(3), layer(kIn, kClasses, true, {.generator = &generator}), opt(layer.parameters(), {.lr = 0.5}) {}
    Tensor operator()(const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor anchor = layer.weight.detach();
      Tensor loss = cross_entropy(layer(x), y) + sum(layer.weight * anchor) * 0.01;
      loss.backward();
      opt.step();
      return loss;
    }
    Generator generator;
    nn::Linear layer;
    optim::SGD opt;
  } eager, traced;
  expectTracedLossesEqualEager(
      amp::O0, [&](const Tensor& x, const Tensor& y) { return eager(x, y); },
      [&](const Tensor& x, const Tensor& y) { return traced(x, y); },
      [](uint64_t call) { return batch(kBatch, kIn, kClasses, 90 + call); }, 3);
  EXPECT_EQ(traced.layer.weight.to_vector(), eager.layer.weight.to_vector());
}

TEST(Trace, TypeAsGivesTheTypeAmpDecidesForItsReference) {
  // An RMSNorm as PyTorch code writes it: normalise in fp32, then back to the
  // activations' type. `.to(h.dtype())` would fix the trace's f32 there;
  // type_as is f16 (bf16) where eager autocast's h is.
  auto rmsNorm = [](const Tensor& h, const Tensor& mixing) {
    Tensor wide = h.to(f32);
    Tensor normalised = wide * rsqrt(mean(wide * wide, {1}, true) + 1e-6);
    return matmul(normalised.type_as(h), mixing);
  };
  expectCustomMiddleTracesAsEager(rmsNorm);
  CustomMiddleStep net(rmsNorm);
  auto step = trace([&](const Tensor& x, const Tensor& y) { return net(x, y); },
                    {.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cpu});
  auto [x, y] = batch(kBatch, kIn, kClasses, 4);
  step(x, y);
  EXPECT_NE(step.traced_module().find("jit.type_as"), std::string::npos);
  EXPECT_NE(step.amp_report().find("converts to the type of its reference (f16)"), std::string::npos)
      << step.amp_report();
}

TEST(Trace, TheScalersOverflowFlagAndItsTensorsFollowTheCompiledStep) {
  // found_inf() after a traced call is the compiled step's flag (a state it
  // writes), as eager's is; state_tensors() are the state each call writes,
  // so a copy asked for after a call holds that call's values.
  Classifier eager SMALL_NET({.growth_interval = 2}), traced SMALL_NET({.growth_interval = 2});
  auto step = trace([&](const Tensor& a, const Tensor& b) { return traced.step(a, b); },
                    {.amp = {.level = amp::O1, .dtype = f16}});
  EXPECT_FALSE(traced.scaler.found_inf()) << "no step has run";
  auto [x, y] = batch(kBatch, kIn, kClasses, 5);
  Tensor poisoned = withInfAt(x, 3);
  for (const auto& [call, input] : std::vector<std::pair<int, Tensor>>{{0, x}, {1, poisoned}, {2, x}, {3, poisoned}}) {
    SCOPED_TRACE("call " + std::to_string(call));
    step(input, y);
    {
      amp::autocast scope({.dtype = f16});
      eager.step(input, y);
    }
    bool overflowed = call % 2 == 1;
    EXPECT_EQ(traced.scaler.found_inf(), overflowed);
    EXPECT_EQ(eager.scaler.found_inf(), overflowed);
    amp::GradScaler::StateTensors state = traced.scaler.state_tensors();
    cuda::HostCopy scale = cuda::copy_to_host_async(state.scale),
                   skipped = cuda::copy_to_host_async(state.skipped_steps),
                   growth = cuda::copy_to_host_async(state.growth_tracker),
                   finite = cuda::copy_to_host_async(state.last_step_finite);
    EXPECT_EQ(scale.item(), eager.scaler.get_scale());
    EXPECT_EQ(skipped.item(), double(eager.scaler.skipped_steps()));
    EXPECT_EQ(growth.item(), double(eager.scaler.growth_tracker()));
    EXPECT_EQ(finite.item(), overflowed ? 0.0 : 1.0);
  }
  EXPECT_EQ(traced.scaler.skipped_steps(), 2);
  EXPECT_EQ(step.stats().traces, 1u);

  // The one optimizer's own flag is the scaler's, as eagerly.
  EXPECT_TRUE(traced.scaler.found_inf(traced.opt));
  EXPECT_TRUE(eager.scaler.found_inf(eager.opt));

  // Asking inside the traced function names the caller's line, not the scaler's.
  auto asking = trace([&](const Tensor& a, const Tensor& b) {
    Tensor loss = eager.step(a, b);
    eager.scaler.get_scale();
    return loss;
  });
  std::string inside = errorOf([&] { asking(x, y); });
  EXPECT_NE(inside.find("TraceTest.cpp"), std::string::npos) << inside;
  EXPECT_EQ(inside.find("GradScaler.cpp"), std::string::npos) << inside;
}

TEST(Trace, EachOptimizersOverflowFlagFollowsATracedStepThatSteppedSeveral) {
  // Two optimizers stepped by one scaler, as PyTorch's "multiple models"
  // recipe: each skips on its own gradients' overflow, the update backs off
  // on either's, and found_inf(optimizer) answers for each after the compiled
  // step as eagerly (each optimizer's flag is state the step writes).
  struct TwoModels {
    TwoModels()
        : generator(7), first(nn::Linear(kIn, kClasses, true, {.generator = &generator})),
          second(nn::Linear(kIn, kClasses, true, {.generator = &generator})),
          firstOpt(first.parameters(), {.lr = 1e-2}), secondOpt(second.parameters(), {.lr = 1e-2, .momentum = 0.5}),
          scaler({.growth_interval = 2}) {}
    Tensor step(const Tensor& x1, const Tensor& x2, const Tensor& y) {
      firstOpt.zero_grad();
      secondOpt.zero_grad();
      Tensor loss = cross_entropy(first(x1), y) + cross_entropy(second(x2), y);
      scaler.scale(loss).backward();
      scaler.step(firstOpt);
      scaler.step(secondOpt);
      scaler.update();
      return loss;
    }
    std::vector<std::vector<double>> everything() {
      std::vector<std::vector<double>> out;
      for (nn::Linear* model : {&first, &second})
        for (const Tensor& p : model->parameters())
          out.push_back(p.to_vector());
      return out;
    }
    Generator generator;
    nn::Linear first, second;
    optim::SGD firstOpt, secondOpt;
    amp::GradScaler scaler;
  };
  TwoModels eager, traced;
  auto step = trace([&](const Tensor& x1, const Tensor& x2, const Tensor& y) { return traced.step(x1, x2, y); },
                    {.amp = {.level = amp::O1, .dtype = f16}, .semantics = amp::Semantics::autocast});
  auto [x, y] = batch(kBatch, kIn, kClasses, 9);
  Tensor poisoned = withInfAt(x, 5);
  // Which model's input holds an inf on each call.
  const std::vector<std::pair<bool, bool>> overflows = {{false, false}, {true, false}, {false, false},
                                                        {false, true}, {true, true},  {false, false}};
  for (size_t call = 0; call < overflows.size(); ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    auto [firstOverflows, secondOverflows] = overflows[call];
    const Tensor& x1 = firstOverflows ? poisoned : x;
    const Tensor& x2 = secondOverflows ? poisoned : x;
    step(x1, x2, y);
    {
      amp::autocast scope({.dtype = f16});
      eager.step(x1, x2, y);
    }
    for (TwoModels* run : {&traced, &eager}) {
      EXPECT_EQ(run->scaler.found_inf(run->firstOpt), firstOverflows);
      EXPECT_EQ(run->scaler.found_inf(run->secondOpt), secondOverflows);
      EXPECT_EQ(run->scaler.found_inf(), firstOverflows || secondOverflows);
    }
    EXPECT_EQ(traced.everything(), eager.everything());
    EXPECT_EQ(traced.scaler.get_scale(), eager.scaler.get_scale());
  }
  // Backed off on calls 1, 3 and 4; it grows after two clean calls in a row, which never came.
  EXPECT_EQ(traced.scaler.get_scale(), 8192.0);
  EXPECT_EQ(traced.scaler.skipped_steps(), 3);
  EXPECT_EQ(step.stats().traces, 1u);
  // Each optimizer's flag is a state result of the step, beside the scaler's.
  const std::string& module = step.traced_module();
  for (const char* name : {"scaler.optimizer0.last_step_finite", "scaler.optimizer1.last_step_finite"})
    EXPECT_NE(module.find(name), std::string::npos) << name;

  // A load clears every flag, as the file knows none.
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = (scratch.path / "scaler.ampjit").string();
  traced.scaler.save(path);
  traced.scaler.load(path);
  EXPECT_FALSE(traced.scaler.found_inf(traced.firstOpt));
  EXPECT_FALSE(traced.scaler.found_inf(traced.secondOpt));
  step(x, poisoned, y);
  EXPECT_FALSE(traced.scaler.found_inf(traced.firstOpt));
  EXPECT_TRUE(traced.scaler.found_inf(traced.secondOpt));
}

TEST(Trace, AnOptimizersFlagAfterAReplayThatFollowedALoadIsTheReplays) {
  // A load resets the flags; the next calls replay the compiled step without
  // the scaler's host code, and found_inf(optimizer) still follows them.
  Classifier net SMALL_NET();
  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); },
                    {.amp = {.level = amp::O1, .dtype = f16}});
  auto [x, y] = batch(kBatch, kIn, kClasses, 5);
  Tensor poisoned = withInfAt(x, 3);
  step(poisoned, y);
  ASSERT_TRUE(net.scaler.found_inf(net.opt));
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = (scratch.path / "scaler.ampjit").string();
  net.scaler.save(path);
  net.scaler.load(path);
  EXPECT_FALSE(net.scaler.found_inf(net.opt)) << "a load clears the flag";
  step(poisoned, y);
  EXPECT_TRUE(net.scaler.found_inf(net.opt)) << "the replay after the load overflowed";
  step(x, y);
  EXPECT_FALSE(net.scaler.found_inf(net.opt));
  EXPECT_EQ(step.stats().traces, 1u);
}

TEST(Trace, AnOptimizersFlagFromAnUpdateOfItsOwnThatALaterUpdateRewroteIsAClearError) {
  // Two traced steps, each stepping one optimizer with the same scaler: an
  // update that covers one optimizer keeps only the scaler's flag, so after
  // the other's step the first's flag is gone, which is an error naming the
  // caller's line, not an answer about the other optimizer's step.
  Generator generator(7);
  nn::Sequential model(nn::Linear(kIn, kHidden, true, {.generator = &generator}), nn::ReLU(),
                       nn::Linear(kHidden, kClasses, true, {.generator = &generator}));
  std::vector<Tensor> parameters = model.parameters();
  optim::SGD first({parameters[0], parameters[1]}, {.lr = 1e-2}), second({parameters[2], parameters[3]}, {.lr = 1e-2});
  amp::GradScaler scaler;
  auto firstOnly = trace([&](const Tensor& x, const Tensor& y) { return scaledTrainStep(model, first, scaler, x, y); },
                         {.amp = {.level = amp::O1, .dtype = f16}, .name = "first_only"});
  auto secondOnly = trace([&](const Tensor& x, const Tensor& y) { return scaledTrainStep(model, second, scaler, x, y); },
                          {.amp = {.level = amp::O1, .dtype = f16}, .name = "second_only"});
  auto [x, y] = batch(kBatch, kIn, kClasses, 9);
  firstOnly(x, y);
  EXPECT_FALSE(scaler.found_inf(first));
  secondOnly(x, y);
  EXPECT_FALSE(scaler.found_inf(second));
  std::string message = errorOf([&] { scaler.found_inf(first); });
  EXPECT_NE(message.find("covered it alone"), std::string::npos) << message;
  EXPECT_NE(message.find("ask found_inf()"), std::string::npos) << message;
  EXPECT_NE(message.find("TraceTest.cpp"), std::string::npos) << message;
  // A single optimizer's step adds no flag of its own to the compiled step.
  EXPECT_EQ(firstOnly.traced_module().find("scaler.optimizer"), std::string::npos);
}

TEST(Trace, ApexLossScaleBoundsHoldOnTheCompiledStepAsEagerly) {
  // apex: growth capped at max_loss_scale, backoff floored at min_loss_scale.
  amp::GradScalerOptions bounded{
      .init_scale = 4.0, .growth_interval = 1, .min_loss_scale = 2.0, .max_loss_scale = 16.0};
  Classifier eager SMALL_NET(bounded), traced SMALL_NET(bounded);
  auto step = trace([&](const Tensor& a, const Tensor& b) { return traced.step(a, b); },
                    {.amp = {.level = amp::O1, .dtype = f16}});
  auto [x, y] = batch(kBatch, kIn, kClasses, 9);
  Tensor poisoned = withInfAt(x, 0);
  std::vector<std::pair<bool, double>> sequence = {{true, 8},  {true, 16},  {true, 16}, {false, 8},
                                                   {false, 4}, {false, 2}, {false, 2}, {true, 4}};
  for (size_t i = 0; i < sequence.size(); ++i) {
    const Tensor& input = sequence[i].first ? x : poisoned;
    step(input, y);
    {
      amp::autocast scope({.dtype = f16});
      eager.step(input, y);
    }
    EXPECT_EQ(traced.scaler.get_scale(), sequence[i].second) << "step " << i;
    EXPECT_EQ(eager.scaler.get_scale(), sequence[i].second) << "step " << i;
  }
  EXPECT_EQ(traced.scaler.skipped_steps(), 4);
  EXPECT_NE(step.traced_module().find("max_scale = 1.6"), std::string::npos) << step.traced_module();
}

TEST(Trace, AScaleSetByUpdateFromATensorIsReadOnEveryCall) {
  // PyTorch's scaler.update(new_scale) with a tensor the loop changes: the
  // traced step reads it each call, as eagerly, and so does a step whose
  // update (the scale's copy among it) is deferred into the next call.
  for (DeferUpdates defer : {DeferUpdates::off, DeferUpdates::on}) {
    SCOPED_TRACE(defer == DeferUpdates::on ? "deferred" : "in line");
    Classifier eager SMALL_NET(), traced SMALL_NET();
    Tensor eagerScale = scalar_tensor(1024.0, f32), tracedScale = scalar_tensor(1024.0, f32);
    auto step =
        trace([&](const Tensor& a, const Tensor& b) { return stepSettingTheScale(traced, tracedScale, a, b); },
              {.backend = Backend::cpu, .defer_updates = defer});
    for (uint64_t i = 0; i < 3; ++i) {
      auto [x, y] = batch(kBatch, kIn, kClasses, 40 + i);
      EXPECT_EQ(step(x, y).item(), stepSettingTheScale(eager, eagerScale, x, y).item()) << "call " << i;
      EXPECT_EQ(traced.scaler.get_scale(), 1024.0 * double(1 << i)) << "call " << i;
      EXPECT_EQ(eager.scaler.get_scale(), traced.scaler.get_scale());
      for (Tensor* scale : {&eagerScale, &tracedScale})
        scale->copy_(*scale * 2.0);
    }
    EXPECT_EQ(stateOf(traced), stateOf(eager));
    EXPECT_EQ(step.stats().traces, 1u);
    EXPECT_EQ(step.plan_text().find("deferred steps 0..") != std::string::npos, defer == DeferUpdates::on)
        << step.plan_text();
  }
}

TEST(Trace, ANewBatchSizeRetracesOnceAndIsReused) {
  Classifier net SMALL_NET();
  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); }, {.log_retraces = false});
  auto [x16, y16] = batch(16, kIn, kClasses, 1);
  auto [x8, y8] = batch(8, kIn, kClasses, 2);
  step(x16, y16);
  step(x8, y8);
  step(x16, y16);
  step(x8, y8);
  EXPECT_EQ(step.stats().traces, 2u);
  EXPECT_EQ(step.stats().cache_hits, 2u);
  ASSERT_EQ(step.stats().retrace_reasons.size(), 1u);
  EXPECT_EQ(step.stats().retrace_reasons[0], "input #0 was f32[16x32], now f32[8x32]");
}

TEST(Trace, AChangedAmpDtypeRetraces) {
  Classifier net SMALL_NET();
  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); },
                    {.amp = {.level = amp::O1, .dtype = f16}, .log_retraces = false});
  auto [x, y] = batch(kBatch, kIn, kClasses, 1);
  step(x, y);
  step.set_amp({.level = amp::O1, .dtype = bf16});
  step(x, y);
  EXPECT_EQ(step.stats().traces, 2u);
  ASSERT_EQ(step.stats().retrace_reasons.size(), 1u);
  EXPECT_NE(step.stats().retrace_reasons[0].find("dtype=bf16"), std::string::npos)
      << step.stats().retrace_reasons[0];
  EXPECT_NE(step.amp_report().find("bf16"), std::string::npos);
}

TEST(Trace, PastTheVariantLimitCallsRunEagerlyWithAWarning) {
  Classifier traced SMALL_NET(), eager SMALL_NET();
  auto step = trace([&](const Tensor& a, const Tensor& b) { return traced.step(a, b); }, {.max_variants = 2});
  ::testing::internal::CaptureStderr();
  for (int64_t size : {4, 5, 6, 7}) {
    auto [x, y] = batch(size, kIn, kClasses, uint64_t(size));
    EXPECT_EQ(step(x, y).item(), eager.step(x, y).item()) << "batch " << size;
  }
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(step.stats().traces, 2u);
  EXPECT_EQ(step.stats().eager_calls, 2u);
  EXPECT_NE(log.find("running this and further new variants eagerly"), std::string::npos) << log;
  EXPECT_NE(log.find("retraces (variant 2)"), std::string::npos) << log;
  EXPECT_EQ(stateOf(traced), stateOf(eager));
}

TEST(Trace, AnO0StepFollowsTheCallersAutocastAndRetracesWhenItChanges) {
  // torch.compile follows the autocast around a compiled call, and so does
  // an O0 step (no AMP options of its own): traced under the caller's
  // autocast it records the casts that autocast makes, so it is bit for bit
  // the eager step under the same autocast, and a call under another
  // autocast (dtype or lists), or none, retraces and says why. Until
  // 2026-12-03 such a step ran fp32 and only warned, while a call past
  // max_variants, run eagerly, did follow the caller's autocast.
  Classifier traced SMALL_NET(), eager SMALL_NET();
  auto step = trace([&](const Tensor& a, const Tensor& b) { return traced.step(a, b); }, {.backend = Backend::cpu});
  struct Call {
    std::optional<amp::AutocastOptions> callers;
    size_t traces;
    const char* gemm; // the plan's GEMMs' operand types, as printed
  };
  const Call calls[] = {
      {amp::AutocastOptions{.dtype = f16}, 1, "gemm f16 x f16"},
      {amp::AutocastOptions{.dtype = f16}, 1, "gemm f16 x f16"},
      {std::nullopt, 2, "gemm f32 x f32"},
      {amp::AutocastOptions{.dtype = bf16}, 3, "gemm bf16 x bf16"},
      {amp::AutocastOptions{.dtype = bf16, .custom_deny = {"jit.matmul"}}, 4, "gemm f32 x f32"},
      {amp::AutocastOptions{.dtype = f16}, 4, "gemm f16 x f16"},
  };
  ::testing::internal::CaptureStderr();
  for (size_t i = 0; i < std::size(calls); ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    auto [x, y] = batch(kBatch, kIn, kClasses, 40 + i);
    std::optional<amp::autocast> scope;
    if (calls[i].callers)
      scope.emplace(*calls[i].callers);
    double expected = eager.step(x, y).item();
    EXPECT_EQ(step(x, y).item(), expected);
    EXPECT_EQ(step.stats().traces, calls[i].traces);
    EXPECT_NE(step.plan_text().find(calls[i].gemm), std::string::npos) << step.plan_text();
    EXPECT_EQ(stateOf(traced), stateOf(eager));
  }
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(step.stats().eager_calls, 0u);
  EXPECT_NE(log.find("the caller's autocast changed (traced under jit::amp::autocast(f16, policy 'default' #"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("now called with autocast off)"), std::string::npos) << log;
  // Custom lists key on the policy's content, not its name.
  ASSERT_EQ(step.stats().retrace_reasons.size(), 3u);
  EXPECT_NE(step.stats().retrace_reasons[2].find("now called under jit::amp::autocast(bf16, policy "),
            std::string::npos)
      << step.stats().retrace_reasons[2];

  // With AMP options of its own a step's precision is its options': the
  // caller's bf16 autocast neither changes an f16 step nor retraces it.
  Classifier amped SMALL_NET(), reference SMALL_NET();
  TraceOptions o1{.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cpu};
  auto ampStep = trace([&](const Tensor& a, const Tensor& b) { return amped.step(a, b); }, o1);
  auto referenceStep = trace([&](const Tensor& a, const Tensor& b) { return reference.step(a, b); }, o1);
  for (uint64_t i = 0; i < 2; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 50 + i);
    double expected = referenceStep(x, y).item();
    amp::autocast scope({.dtype = bf16});
    EXPECT_EQ(ampStep(x, y).item(), expected) << "call " << i;
  }
  EXPECT_EQ(ampStep.stats().traces, 1u);
  EXPECT_EQ(occurrences(ampStep.plan_text(), "bf16"), 0u) << ampStep.plan_text();
}

TEST(Trace, AnLrScheduleChangesTheLrTensorWithoutRetracing) {
  Classifier traced SMALL_NET(), eager SMALL_NET();
  optim::StepLR tracedSchedule(traced.opt, 1, 0.5), eagerSchedule(eager.opt, 1, 0.5);
  auto step = trace([&](const Tensor& a, const Tensor& b) { return traced.step(a, b); });
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 40 + i);
    EXPECT_EQ(step(x, y).item(), eager.step(x, y).item());
    tracedSchedule.step();
    eagerSchedule.step();
  }
  EXPECT_EQ(traced.opt.lr().item(), eager.opt.lr().item());
  EXPECT_NEAR(traced.opt.lr().item(), 1e-2 * 0.125, 1e-9);
  EXPECT_EQ(stateOf(traced), stateOf(eager));
  EXPECT_EQ(step.stats().traces, 1u);
}

TEST(Trace, ReadingAValueWhileTracingNamesTheOpAndTheLine) {
  Classifier net SMALL_NET();
  std::vector<std::vector<double>> before = stateOf(net);
  int line = 0;
  auto step = trace([&](const Tensor& a, const Tensor& b) {
    net.opt.zero_grad();
    Tensor loss = cross_entropy(net.model(a), b);
    line = __LINE__ + 1;
    if (loss.item() > 100.0) // data-dependent control flow
      return loss;
    net.scaler.scale(loss).backward();
    net.scaler.step(net.opt);
    net.scaler.update();
    return loss;
  });
  auto [x, y] = batch(kBatch, kIn, kClasses, 1);
  std::string message = errorOf([&] { step(x, y); });
  EXPECT_NE(message.find("item() at "), std::string::npos) << message;
  EXPECT_NE(message.find("TraceTest.cpp:" + std::to_string(line)), std::string::npos) << message;
  EXPECT_NE(message.find("made by jit.cross_entropy"), std::string::npos) << message;
  // Nothing the failed trace touched changed, and the state still trains eagerly.
  EXPECT_EQ(stateOf(net), before);
  net.step(x, y);
  EXPECT_NE(stateOf(net), before);
}

TEST(Trace, AutomaticResolvesToTheBackendTheTracedStepRunsOn) {
  EXPECT_EQ(resolve_backend(Backend::cpu), Backend::cpu);
  EXPECT_EQ(resolve_backend(Backend::cuda), Backend::cuda);
  EXPECT_EQ(resolve_backend(Backend::automatic), cuda::is_available() ? Backend::cuda : Backend::cpu);
  // And a step traced with `automatic` runs there: on the CPU no device stats.
  Classifier net SMALL_NET();
  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); });
  auto [x, y] = batch(kBatch, kIn, kClasses, 4);
  step(x, y);
  EXPECT_EQ(step.stats().device_launches_per_step > 0, resolve_backend(Backend::automatic) == Backend::cuda);
}

TEST(Trace, ToDeviceWithoutAGpuSaysSo) {
  if (cuda::is_available())
    GTEST_SKIP() << "this machine has a GPU";
  std::string message = errorOf([] { cuda::to_device(ones({3}, f32)); });
  EXPECT_NE(message.find("jit::cuda::to_device"), std::string::npos) << message;
  // A CUDA build says there is no device; a build without the backend says that.
  EXPECT_NE(message.find(ampjit::runtime::cudaBackendBuilt() ? "no CUDA device" : "has no CUDA backend"),
            std::string::npos)
      << message;
}

TEST(Trace, ACopyToTheHostOfAHostValueArrivesAtOnceAndCannotBeAskedForInsideAStep) {
  // On the CPU the loss is a host value: copy_to_host_async has it at once,
  // as it was then. Inside a trace, asking for a value is the same error as
  // item(), naming the caller's line.
  Classifier net SMALL_NET();
  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); }, {.backend = Backend::cpu});
  auto [x, y] = batch(kBatch, kIn, kClasses, 3);
  Tensor loss = step(x, y);
  cuda::HostCopy copy = cuda::copy_to_host_async(loss);
  EXPECT_TRUE(copy.ready());
  EXPECT_EQ(copy.item(), loss.item());
  Tensor weight = net.model.parameters()[0];
  cuda::HostCopy weightBefore = cuda::copy_to_host_async(weight);
  std::vector<double> before = weight.to_vector();
  step(x, y);
  EXPECT_NE(weight.to_vector(), before);
  EXPECT_EQ(weightBefore.wait().to_vector(), before) << "the copy is of the value when it was asked for";
  EXPECT_NE(errorOf([] { cuda::HostCopy().wait(); }).find("never started"), std::string::npos);

  int line = 0;
  auto asking = trace([&](const Tensor& a, const Tensor& b) {
    line = __LINE__ + 1;
    cuda::copy_to_host_async(net.model.parameters()[0]);
    return net.step(a, b);
  });
  std::string message = errorOf([&] { asking(x, y); });
  EXPECT_NE(message.find("jit::cuda::copy_to_host_async at "), std::string::npos) << message;
  EXPECT_NE(message.find("TraceTest.cpp:" + std::to_string(line)), std::string::npos) << message;
  EXPECT_NE(message.find("while jit::trace records"), std::string::npos) << message;
}

TEST(Trace, ATensorLeftInsideAStepHasNoValueAfterIt) {
  Classifier net SMALL_NET();
  Tensor logits;
  auto step = trace([&](const Tensor& a, const Tensor& b) {
    net.opt.zero_grad();
    logits = net.model(a);
    Tensor loss = cross_entropy(logits, b);
    loss.backward();
    net.opt.step();
    return loss;
  });
  auto [x, y] = batch(kBatch, kIn, kClasses, 1);
  step(x, y);
  std::string message = errorOf([&] { logits.to_vector(); });
  EXPECT_NE(message.find("computed inside the traced step 'train_step'"), std::string::npos) << message;
  EXPECT_NE(message.find("return it from the step"), std::string::npos) << message;
}

TEST(Trace, GradientAccumulationIsTwoTracedFunctionsSharingGradients) {
  Classifier eager SMALL_NET(), traced SMALL_NET();
  auto accumulate = accumulateGradients;
  auto apply = applyGradients;
  auto tracedAccumulate = trace([&](const Tensor& x, const Tensor& y) { return accumulate(traced, x, y); },
                                {.log_retraces = false, .name = "accumulate"});
  auto tracedApply = trace([&]() { apply(traced); }, {.log_retraces = false, .name = "apply"});
  for (uint64_t round = 0; round < 3; ++round) {
    for (uint64_t micro = 0; micro < 2; ++micro) {
      auto [x, y] = batch(kBatch, kIn, kClasses, 10 * round + micro);
      EXPECT_EQ(tracedAccumulate(x, y).item(), accumulate(eager, x, y).item());
    }
    tracedApply();
    apply(eager);
  }
  EXPECT_EQ(stateOf(traced), stateOf(eager));
  for (size_t i = 0; i < traced.model.parameters().size(); ++i)
    EXPECT_EQ(traced.model.parameters()[i].grad().to_vector(), eager.model.parameters()[i].grad().to_vector());
  // The first call had no gradients to accumulate into; later ones do.
  EXPECT_EQ(tracedAccumulate.stats().traces, 2u);
  EXPECT_EQ(tracedApply.stats().traces, 1u);
}

TEST(Trace, DropoutDrawsNewMasksOnEveryCallAsEagerDoes) {
  // The generator's [seed, offset] is state the step captures and advances:
  // each call draws the masks eager execution would draw, and the generator
  // stays readable and reseedable between calls.
  DropoutClassifier eager(6, 16, 3, 11), traced(6, 16, 3, 11);
  auto step = trace([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); }, {.backend = Backend::cpu});
  std::vector<double> tracedLosses, eagerLosses;
  for (uint64_t i = 0; i < 4; ++i) {
    if (i == 3) { // reseeding between calls reaches the compiled step
      eager.dropoutGenerator.manual_seed(99);
      traced.dropoutGenerator.manual_seed(99);
    }
    auto [x, y] = batch(5, 6, 3, 40);
    tracedLosses.push_back(step(x, y).item());
    eagerLosses.push_back(eager.step(x, y).item());
  }
  EXPECT_EQ(tracedLosses, eagerLosses);
  EXPECT_EQ(traced.dropoutGenerator.rng_state().to_vector(), eager.dropoutGenerator.rng_state().to_vector());
  for (size_t i = 0; i < eager.model.parameters().size(); ++i)
    EXPECT_EQ(traced.model.parameters()[i].to_vector(), eager.model.parameters()[i].to_vector()) << i;
  EXPECT_EQ(step.stats().traces, 1u);
}

TEST(Trace, TrainAndEvalAreGuardsOfTheModulesThatReadThem) {
  // Dropout reads its module's training flag, so the flag is a guard: eval()
  // retraces once, and train() goes back to the first variant. Each call
  // equals eager execution in the same mode.
  DropoutClassifier eager(6, 16, 3, 11), traced(6, 16, 3, 11);
  auto step = trace([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); }, {.backend = Backend::cpu});
  auto [x, y] = batch(5, 6, 3, 41);
  std::vector<double> tracedLosses, eagerLosses;
  for (bool training : {true, false, true, false}) {
    traced.model.train(training);
    eager.model.train(training);
    tracedLosses.push_back(step(x, y).item());
    eagerLosses.push_back(eager.step(x, y).item());
  }
  EXPECT_EQ(tracedLosses, eagerLosses);
  EXPECT_EQ(traced.dropoutGenerator.rng_state().to_vector(), eager.dropoutGenerator.rng_state().to_vector());
  EXPECT_EQ(step.stats().traces, 2u);
  ASSERT_EQ(step.stats().retrace_reasons.size(), 1u);
  EXPECT_EQ(step.stats().retrace_reasons[0],
            "a jit::nn::Dropout the step reads was in training mode, now in eval mode (train()/eval())");
}

TEST(Trace, HostWorkATraceWouldFreezeIsAnErrorInsideTheStep) {
  // Random numbers drawn on the host and a schedule's epoch counter would
  // run once, at trace time, and every call would replay their result.
  Classifier net(kIn, kHidden, kClasses, 3);
  optim::StepLR schedule(net.opt, 2);
  auto [x, y] = batch(kBatch, kIn, kClasses, 5);
  auto noisy = trace([&](const Tensor& a, const Tensor& b) { return net.step(a + randn(a.shape()), b); },
                     {.backend = Backend::cpu, .name = "noisy_step"});
  std::string message = errorOf([&] { noisy(x, y); });
  EXPECT_NE(message.find("jit::randn inside the traced step 'noisy_step'"), std::string::npos) << message;
  EXPECT_NE(message.find("pass them as an input"), std::string::npos) << message;
  auto scheduled = trace(
      [&](const Tensor& a, const Tensor& b) {
        Tensor loss = net.step(a, b);
        schedule.step();
        return loss;
      },
      {.backend = Backend::cpu, .name = "scheduled_step"});
  message = errorOf([&] { scheduled(x, y); });
  EXPECT_NE(message.find("StepLR::step() inside the traced step 'scheduled_step'"), std::string::npos) << message;
  EXPECT_EQ(schedule.last_epoch(), 0);
  // The step itself is fine: traced without them, it runs.
  auto plain = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); }, {.backend = Backend::cpu});
  EXPECT_TRUE(std::isfinite(plain(x, y).item()));
}

TEST(Trace, FreezingOrUnfreezingAParameterRetraces) {
  // requires_grad decides which gradients the step computes and what the
  // optimizer updates: fine-tuning that freezes a layer between calls must
  // not keep training it.
  Classifier eager(8, 8, 3, 3), traced(8, 8, 3, 3);
  auto step = trace([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); }, {.backend = Backend::cpu});
  for (uint64_t i = 0; i < 6; ++i) {
    if (i == 2 || i == 4) { // freeze the first layer's weight, then unfreeze it
      eager.model.parameters()[0].requires_grad_(i == 4);
      traced.model.parameters()[0].requires_grad_(i == 4);
    }
    auto [x, y] = batch(4, 8, 3, 80 + i);
    EXPECT_EQ(step(x, y).item(), eager.step(x, y).item()) << "call " << i;
  }
  for (size_t i = 0; i < eager.model.parameters().size(); ++i)
    EXPECT_EQ(traced.model.parameters()[i].to_vector(), eager.model.parameters()[i].to_vector()) << i;
  EXPECT_EQ(step.stats().traces, 2u);
  ASSERT_EQ(step.stats().retrace_reasons.size(), 1u);
  EXPECT_EQ(step.stats().retrace_reasons[0], "the tensor '0.weight' f32[8x8] the step reads required grad, now does not (frozen)");
}

TEST(Trace, UnscaleClipAndTwoOptimizersThroughOneScalerMatchEagerBitwise) {
  // PyTorch's pattern: unscale_ one optimizer's gradients to clip them, then
  // step both through the scaler, with an initial scale that overflows. The
  // AMP pass hands optimizers and the finiteness check backward's f16
  // gradients as they are, but not amp.unscale_and_check, which yields its
  // results in its operands' types: given f16 it failed to compile against
  // its traced f32 results, and would have rounded the unscaled gradients
  // to f16 where eager unscales the f32 gradients of f32 parameters.
  struct Net {
    explicit Net(bool clip)
        : clip(clip), g(3), a(nn::Linear(8, 8, true, {.generator = &g})), b(nn::Linear(8, 3, true, {.generator = &g})),
          optA(a.parameters(), {.lr = 0.1, .momentum = 0.9}), optB(b.parameters(), {.lr = 1e-2}),
          scaler({.init_scale = 1e6}) {}
    Tensor step(const Tensor& x, const Tensor& y) {
      optA.zero_grad();
      optB.zero_grad();
      Tensor loss = cross_entropy(b(relu(a(x))), y);
      scaler.scale(loss).backward();
      scaler.unscale_(optA);
      if (clip)
        clip_grad_norm_(a.parameters(), 0.05);
      scaler.step(optA);
      scaler.step(optB);
      scaler.update();
      return loss;
    }
    bool clip;
    Generator g;
    nn::Linear a, b;
    optim::SGD optA;
    optim::Adam optB;
    amp::GradScaler scaler;
  };
  std::vector<std::vector<double>> lossesPerCase;
  for (bool clip : {false, true}) {
    SCOPED_TRACE(clip ? "with clipping" : "without clipping");
    Net eager(clip), traced(clip);
    auto step = trace([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); },
                      {.amp = {.level = amp::O1, .dtype = f16},
                       .semantics = amp::Semantics::autocast,
                       .backend = Backend::cpu});
    std::vector<double> tracedLosses, eagerLosses;
    for (uint64_t i = 0; i < 6; ++i) {
      auto [x, y] = batch(4, 8, 3, 70 + i);
      amp::autocast scope({.dtype = f16});
      tracedLosses.push_back(step(x, y).item());
      eagerLosses.push_back(eager.step(x, y).item());
    }
    EXPECT_EQ(traced.scaler.get_scale(), eager.scaler.get_scale());
    EXPECT_EQ(traced.scaler.skipped_steps(), eager.scaler.skipped_steps());
    EXPECT_GT(eager.scaler.skipped_steps(), 0);
    std::vector<std::vector<double>> tracedState, eagerState;
    for (Net* net : {&traced, &eager})
      for (nn::Linear* layer : {&net->a, &net->b})
        for (const Tensor& parameter : layer->parameters())
          (net == &traced ? tracedState : eagerState).push_back(parameter.to_vector());
    EXPECT_EQ(tracedLosses, eagerLosses);
    EXPECT_EQ(tracedState, eagerState);
    lossesPerCase.push_back(tracedLosses);
  }
  EXPECT_NE(lossesPerCase[0], lossesPerCase[1]) << "the clipping should have changed some step";
}

/// The classifier's step with PyTorch's clip-under-AMP pattern, the loss
/// multiplied by 2000 so that the unscaled gradients' squares pass f16's
/// 65504. Returns the loss and the gradient norm clip_grad_norm_ measured.
std::pair<Tensor, Tensor> largeGradientClipStep(Classifier& net, const Tensor& x, const Tensor& y) {
  net.opt.zero_grad();
  Tensor loss = cross_entropy(net.model(x), y) * 2000.0;
  net.scaler.scale(loss).backward();
  net.scaler.unscale_(net.opt);
  Tensor norm = clip_grad_norm_(net.model.parameters(), 1e9);
  net.scaler.step(net.opt);
  net.scaler.update();
  return {loss, norm};
}

TEST(Trace, O2AndO3ClipTheUnscaledGradientsInFp32) {
  // O2 and O3 lower the model's forward and backward. Ops after the backward
  // follow their inputs, as PyTorch's type promotion does over apex O2's
  // fp32 master gradients: lowering clip_grad_norm_ rounded the unscaled
  // gradients back to f16 and summed their squares there, which overflowed
  // to an infinite norm, a clip coefficient of 0 and a silently lost update.
  for (amp::Level level : {amp::O2, amp::O3}) {
    SCOPED_TRACE(level == amp::O2 ? "O2" : "O3");
    Classifier eager SMALL_NET({.init_scale = 1.0}), traced SMALL_NET({.init_scale = 1.0});
    auto step = trace([&](const Tensor& x, const Tensor& y) { return largeGradientClipStep(traced, x, y); },
                      {.amp = {.level = level, .dtype = f16}, .backend = Backend::cpu});
    for (uint64_t i = 0; i < 3; ++i) {
      auto [x, y] = batch(kBatch, kIn, kClasses, 40 + i);
      auto [tracedLoss, tracedNorm] = step(x, y);
      Tensor eagerNorm;
      {
        amp::autocast scope({.dtype = f16});
        eagerNorm = largeGradientClipStep(eager, x, y).second;
      }
      ASSERT_GT(eagerNorm.item(), 256.0) << "the squares must pass f16's range for this test to mean anything";
      // The forward differs (f16 weights against autocast's per-op casts), so
      // the norms agree to f16's precision, not bit for bit.
      EXPECT_NEAR(tracedNorm.item(), eagerNorm.item(), 1e-2 * eagerNorm.item()) << "step " << i;
    }
    EXPECT_EQ(traced.scaler.skipped_steps(), 0);
  }
}

TEST(Trace, AWeightEmaUpdatedInsideAnO2StepStaysFp32) {
  // ema = 0.999 ema + 0.001 w after each update: in f16 the 0.001 w steps
  // are below half an ulp of the EMA and it never moves.
  Classifier traced SMALL_NET();
  std::vector<Tensor> ema;
  for (const Tensor& parameter : traced.model.parameters()) {
    NoGradGuard noGrad;
    ema.push_back(zeros_like(parameter).copy_(parameter));
  }
  auto step = trace(
      [&](const Tensor& x, const Tensor& y) {
        Tensor loss = traced.step(x, y);
        NoGradGuard noGrad;
        for (size_t i = 0; i < ema.size(); ++i)
          ema[i].mul_(scalar_tensor(0.999)).add_(traced.model.parameters()[i] * 0.001);
        return loss;
      },
      {.amp = {.level = amp::O2, .dtype = f16}, .backend = Backend::cpu});
  for (uint64_t i = 0; i < 3; ++i) {
    std::vector<Tensor> expected;
    for (const Tensor& average : ema) {
      NoGradGuard noGrad;
      expected.push_back(zeros_like(average).copy_(average));
    }
    auto [x, y] = batch(kBatch, kIn, kClasses, 60 + i);
    step(x, y);
    // The same arithmetic eagerly, in fp32, from the updated parameters.
    for (size_t k = 0; k < ema.size(); ++k) {
      Tensor want = expected[k] * scalar_tensor(0.999) + traced.model.parameters()[k] * 0.001;
      EXPECT_EQ(ema[k].to_vector(), want.to_vector()) << "step " << i << ", parameter " << k;
    }
  }
}

/// A no-grad evaluation of `net` on one batch.
Tensor evaluationLoss(Classifier& net, const Tensor& x, const Tensor& y) {
  NoGradGuard noGrad;
  return cross_entropy(net.model(x), y);
}

TEST(Trace, AnEvalStepSeesTheWeightsAnotherStepUpdated) {
  // O2 (and O1 with kept parameter casts, CUDA's default) give each traced
  // function low-precision copies of the parameters. A train step's update
  // rewrites the fp32 parameters in place: an eval step traced beside it
  // must re-derive its copies, not keep evaluating the weights it first
  // copied (which it did: the same loss after every epoch). A function traced
  // afresh each time is the reference: it derives from the current weights.
  struct Case {
    const char* name;
    amp::Level level;
    bool keepCasts;
    DeferUpdates defer;
  };
  for (Case c : {Case{"O2", amp::O2, false, DeferUpdates::off}, Case{"O1 kept casts", amp::O1, true, DeferUpdates::off},
                 Case{"O2 deferred update", amp::O2, false, DeferUpdates::on}}) {
    SCOPED_TRACE(c.name);
    Classifier net SMALL_NET();
    TraceOptions options{.amp = {.level = c.level, .dtype = f16},
                         .backend = Backend::cpu,
                         .defer_updates = c.defer,
                         .keep_parameter_casts = c.keepCasts ? std::optional<bool>(true) : std::nullopt};
    auto train = trace([&](const Tensor& x, const Tensor& y) { return net.step(x, y); }, options);
    TraceOptions evalOptions = options;
    evalOptions.name = "eval_step";
    auto evaluate = trace([&](const Tensor& x, const Tensor& y) { return evaluationLoss(net, x, y); }, evalOptions);
    auto [vx, vy] = batch(kBatch, kIn, kClasses, 300);
    std::vector<double> evaluations;
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      for (uint64_t i = 0; i < 4; ++i) {
        auto [x, y] = batch(kBatch, kIn, kClasses, 10 * epoch + i);
        train(x, y);
      }
      double loss = evaluate(vx, vy).item();
      auto fresh = trace([&](const Tensor& x, const Tensor& y) { return evaluationLoss(net, x, y); }, evalOptions);
      EXPECT_EQ(loss, fresh(vx, vy).item()) << "epoch " << epoch;
      evaluations.push_back(loss);
    }
    EXPECT_NE(evaluations[0], evaluations[2]) << "training should move the evaluation loss";
    EXPECT_EQ(evaluate.stats().traces, 1u);
  }
}

TEST(Trace, VariantsOfOneStepFollowEachOthersUpdatesAtO2) {
  // A smaller batch retraces: each variant's O2 copies must follow the
  // weights the other variant's updates wrote. The reference runs each batch
  // through a function traced afresh on an identical network.
  Classifier once SMALL_NET(), fresh SMALL_NET();
  TraceOptions options{.amp = {.level = amp::O2, .dtype = f16}, .backend = Backend::cpu, .log_retraces = false};
  auto stepOnce = trace([&](const Tensor& x, const Tensor& y) { return once.step(x, y); }, options);
  auto stepFresh = trace([&](const Tensor& x, const Tensor& y) { return fresh.step(x, y); }, options);
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 20 + i);
    EXPECT_EQ(stepOnce(x, y).item(), stepFresh(x, y).item());
  }
  // A half batch (the second variant), then full batches again (back to
  // the first, whose copies the second variant's update made stale).
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(i == 0 ? kBatch / 2 : kBatch, kIn, kClasses, 30 + i);
    auto reference = trace([&](const Tensor& a, const Tensor& b) { return fresh.step(a, b); }, options);
    EXPECT_EQ(stepOnce(x, y).item(), reference(x, y).item()) << "call " << i;
  }
  EXPECT_EQ(stepOnce.stats().traces, 2u);
  EXPECT_EQ(stateOf(once), stateOf(fresh));
}

TEST(Trace, GradientAccumulationAtO2AccumulatesAtTheUpdatedWeights) {
  // The accumulate and apply functions each hold O2 copies: after apply's
  // update, accumulate must compute with the new weights (it kept the first
  // ones, so the run trained on the initial weights' gradients forever).
  Classifier net SMALL_NET();
  TraceOptions options{.amp = {.level = amp::O2, .dtype = f16}, .backend = Backend::cpu, .log_retraces = false};
  auto accumulateStep = [&](const Tensor& x, const Tensor& y) { return accumulateGradients(net, x, y); };
  auto accumulate = trace(accumulateStep, options);
  auto apply = trace([&]() { applyGradients(net); }, options);
  for (uint64_t round = 0; round < 3; ++round) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 50 + round);
    // The reference: a function traced afresh derives its copies from the
    // current weights. It accumulates into the gradients too, so they are
    // zeroed before the function under test accumulates its own.
    double expected = trace(accumulateStep, options)(x, y).item();
    net.opt.zero_grad(false);
    EXPECT_EQ(accumulate(x, y).item(), expected) << "round " << round;
    apply();
  }
}

TEST(Trace, AnEmaUpdatedInAnO2StepEvaluatesThroughATracedEvalStep) {
  // optim::ExponentialMovingAverage inside the traced O2 train step, then
  // store / copy_to / evaluate / restore around a traced eval step: the eval
  // step sees the averages (its O2 copies re-derived after copy_to) and, after
  // restore, the trained weights again, with no retrace.
  Classifier net SMALL_NET();
  optim::ExponentialMovingAverage ema(net.model.parameters(), 0.9);
  TraceOptions options{.amp = {.level = amp::O2, .dtype = f16}, .backend = Backend::cpu};
  auto train = trace(
      [&](const Tensor& x, const Tensor& y) {
        Tensor loss = net.step(x, y);
        ema.update();
        return loss;
      },
      options);
  options.name = "eval_step";
  auto evaluate = trace([&](const Tensor& x, const Tensor& y) { return evaluationLoss(net, x, y); }, options);
  auto [vx, vy] = batch(kBatch, kIn, kClasses, 300);
  for (uint64_t i = 0; i < 4; ++i) {
    std::vector<Tensor> before = ema.shadow_params();
    std::vector<std::vector<double>> expected;
    for (const Tensor& shadow : before)
      expected.push_back(shadow.to_vector());
    auto [x, y] = batch(kBatch, kIn, kClasses, 40 + i);
    train(x, y);
    // The same update eagerly in fp32 from the new weights.
    for (size_t k = 0; k < expected.size(); ++k) {
      Tensor want = tensor(expected[k], net.model.parameters()[k].shape()) * scalar_tensor(0.9) +
                    net.model.parameters()[k] * (1.0 - 0.9);
      EXPECT_EQ(ema.shadow_params()[k].to_vector(), want.to_vector()) << "call " << i << ", parameter " << k;
    }
  }
  double trainedLoss = evaluate(vx, vy).item();
  ema.store();
  ema.copy_to();
  double averagedLoss = evaluate(vx, vy).item();
  auto fresh = trace([&](const Tensor& x, const Tensor& y) { return evaluationLoss(net, x, y); }, options);
  EXPECT_EQ(averagedLoss, fresh(vx, vy).item());
  EXPECT_NE(averagedLoss, trainedLoss);
  ema.restore();
  EXPECT_EQ(evaluate(vx, vy).item(), trainedLoss);
  EXPECT_EQ(evaluate.stats().traces, 1u);
  EXPECT_EQ(train.stats().traces, 1u);
}

TEST(Trace, AStochasticWeightAverageUpdatedInATracedStepEqualsTheEagerOne) {
  // The count is state the traced step carries: the first update copies,
  // the later ones divide by the count + 1, bit for bit as eagerly.
  Classifier eager SMALL_NET(), traced SMALL_NET();
  optim::StochasticWeightAverage eagerSwa(eager.model.parameters()), tracedSwa(traced.model.parameters());
  auto step = trace(
      [&](const Tensor& x, const Tensor& y) {
        Tensor loss = traced.step(x, y);
        tracedSwa.update();
        return loss;
      },
      {.backend = Backend::cpu});
  for (uint64_t i = 0; i < 4; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 60 + i);
    EXPECT_EQ(step(x, y).item(), eager.step(x, y).item()) << "call " << i;
    eagerSwa.update();
  }
  EXPECT_EQ(tracedSwa.n_averaged(), 4);
  for (size_t k = 0; k < eagerSwa.shadow_params().size(); ++k) {
    EXPECT_EQ(tracedSwa.shadow_params()[k].to_vector(), eagerSwa.shadow_params()[k].to_vector()) << "parameter " << k;
    EXPECT_NE(tracedSwa.shadow_params()[k].to_vector(), traced.model.parameters()[k].to_vector())
        << "an average of four steps is not the last step's weights";
  }
  EXPECT_EQ(step.stats().traces, 1u);
}

TEST(Trace, EveryLevelTracksFp32OnALayerNormGeluAdamWStepWithClippingAndAnEma) {
  // LayerNorm, GELU, AdamW, unscale_ + clip_grad_norm_ and an EMA through
  // one scaler: every level compiles (O3 did not: it cast the fp32 statistics
  // layer_norm_grad reads to f16) and its losses stay within a few
  // low-precision roundings of O0's over five steps.
  for (DType dtype : {f16, bf16}) {
    std::vector<std::vector<double>> losses;
    for (amp::Level level : {amp::O0, amp::O1, amp::O2, amp::O3}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " level " + std::to_string(int(level)));
      Generator generator(3);
      nn::Sequential model(nn::Linear(kIn, kHidden, true, {.generator = &generator}), nn::LayerNorm({kHidden}),
                           nn::GELU(), nn::Linear(kHidden, kClasses, true, {.generator = &generator}));
      optim::AdamW opt(model.parameters(), {.lr = 1e-3});
      amp::GradScaler scaler;
      optim::ExponentialMovingAverage ema(model.parameters(), 0.99);
      amp::Policy policy = policyAt(level, dtype);
      auto step = trace(
          [&](const Tensor& x, const Tensor& y) {
            opt.zero_grad();
            Tensor loss = cross_entropy(model(x), y);
            scaler.scale(loss).backward();
            scaler.unscale_(opt);
            clip_grad_norm_(model.parameters(), 1.0);
            scaler.step(opt);
            scaler.update();
            ema.update();
            return loss;
          },
          {.amp = policy, .backend = Backend::cpu, .log_retraces = false});
      losses.emplace_back();
      for (uint64_t i = 0; i < 5; ++i) {
        auto [x, y] = batch(kBatch, kIn, kClasses, 7 + i);
        losses.back().push_back(step(x, y).item());
      }
    }
    // Half a percent for f16, two for bf16: a loss of ~2.3 after five
    // steps, each a few roundings away (O3 also skips its first step, see
    // docs/architecture.md).
    double bound = dtype == f16 ? 5e-3 : 2e-2;
    for (size_t level = 1; level < losses.size(); ++level)
      for (size_t i = 0; i < losses[0].size(); ++i)
        EXPECT_NEAR(losses[level][i], losses[0][i], bound * losses[0][i])
            << dtype_name(dtype) << " O" << level << " step " << i;
  }
}

/// A model, one of the element-wise optimizers and a scaler (by default one
/// that starts by overflowing f16), for the element-wise optimizers' trace
/// tests.
struct ElementwiseOptimizerNet {
  explicit ElementwiseOptimizerNet(const std::string& which, double initialScale = 1e6)
      : generator(6), model(nn::Linear(kIn, kHidden, true, {.generator = &generator}), nn::ReLU(),
                            nn::Linear(kHidden, kClasses, true, {.generator = &generator})),
        opt(makeElementwiseOptimizer(which, model.parameters())),
        scaler({.init_scale = initialScale, .growth_interval = 2}) {}
  Tensor step(const Tensor& x, const Tensor& y) { return scaledTrainStep(model, *opt, scaler, x, y); }
  std::vector<std::vector<double>> state() const {
    std::vector<std::vector<double>> out;
    for (const Tensor& parameter : model.parameters())
      out.push_back(parameter.to_vector());
    for (const auto& [name, tensor] : opt->state_dict())
      out.push_back(tensor.to_vector());
    return out;
  }
  Generator generator;
  nn::Sequential model;
  std::unique_ptr<optim::Optimizer> opt;
  amp::GradScaler scaler;
};

TEST(Trace, TheElementwiseOptimizersStepsTraceAsTheyRunEagerly) {
  // Bitwise at O0, and under autocast semantics at O1 with skipped steps.
  for (const std::string& which : elementwiseOptimizerNames()) {
    for (amp::Level level : {amp::O0, amp::O1}) {
      SCOPED_TRACE(which + " O" + std::to_string(int(level)));
      ElementwiseOptimizerNet eager(which), traced(which);
      expectTracedLossesEqualEager(
          level, [&](const Tensor& x, const Tensor& y) { return eager.step(x, y); },
          [&](const Tensor& x, const Tensor& y) { return traced.step(x, y); },
          [](uint64_t i) { return batch(kBatch, kIn, kClasses, 140 + i); }, 6);
      EXPECT_EQ(traced.state(), eager.state());
      EXPECT_EQ(traced.scaler.skipped_steps(), eager.scaler.skipped_steps());
      if (level != amp::O0) {
        EXPECT_GT(eager.scaler.skipped_steps(), 0);
      }
    }
  }
}

TEST(Trace, TheElementwiseOptimizersStepsAtO2AndO3TrackO0) {
  // The updates are not the model's computation, so O2 and O3 leave them in
  // fp32; the model's f16 forward and backward keep the losses near O0's.
  for (const std::string& which : elementwiseOptimizerNames()) {
    std::vector<std::vector<double>> losses;
    for (amp::Level level : {amp::O0, amp::O2, amp::O3}) {
      SCOPED_TRACE(which + " O" + std::to_string(int(level)));
      // A scale f16 gradients do not overflow: every level takes every step.
      ElementwiseOptimizerNet net(which, 1024.0);
      auto step = trace([&](const Tensor& x, const Tensor& y) { return net.step(x, y); },
                        {.amp = policyAt(level), .backend = Backend::cpu, .log_retraces = false});
      losses.emplace_back();
      for (uint64_t i = 0; i < 8; ++i) {
        auto [x, y] = batch(kBatch, kIn, kClasses, 150 + i);
        losses.back().push_back(step(x, y).item());
      }
    }
    for (size_t level = 1; level < losses.size(); ++level)
      for (size_t i = 0; i < losses[0].size(); ++i)
        EXPECT_NEAR(losses[level][i], losses[0][i], 5e-3 * losses[0][i]) << "level " << level << " step " << i;
    EXPECT_NE(losses[0].front(), losses[0].back()) << "the steps must train";
  }
}

TEST(Trace, AWeightUsedTwiceMatchesEagerBitwise) {
  Generator g(4);
  Tensor w = randn({6, 6}, f32, &g).requires_grad_(true), control = w.detach().requires_grad_(true);
  optim::SGD opt({w}, {.lr = 0.1}), controlOpt({control}, {.lr = 0.1});
  auto body = [](Tensor& p, optim::SGD& o, const Tensor& x) {
    o.zero_grad();
    Tensor loss = sum(matmul(matmul(x, p), p));
    loss.backward();
    o.step();
    return loss;
  };
  auto step = trace([&](const Tensor& x) { return body(w, opt, x); }, {.backend = Backend::cpu});
  Tensor x = randn({3, 6}, f32, &g);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(step(x).item(), body(control, controlOpt, x).item()) << "call " << i;
  EXPECT_EQ(w.to_vector(), control.to_vector());
}

TEST(Trace, AnInPlaceWriteIntoAnInputReachesTheCaller) {
  // Eagerly x.mul_() changes the caller's tensor; the compiled step returns
  // the input's final value and writes it back, so it does too.
  Classifier eager(8, 8, 3, 3), traced(8, 8, 3, 3);
  auto body = [](Classifier& net, const Tensor& x, const Tensor& y) {
    Tensor input = x; // a handle: writes through it are writes into x
    input.mul_(scalar_tensor(2.0, f32));
    Tensor loss = net.step(x, y); // reads the doubled input
    input.sub_(scalar_tensor(0.5, f32));
    return loss;
  };
  auto step = trace([&](const Tensor& x, const Tensor& y) { return body(traced, x, y); },
                    {.backend = Backend::cpu, .name = "normalising_step"});
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(4, 8, 3, 80 + i);
    auto [eagerX, eagerY] = batch(4, 8, 3, 80 + i);
    EXPECT_EQ(step(x, y).item(), body(eager, eagerX, eagerY).item()) << "call " << i;
    EXPECT_EQ(x.to_vector(), eagerX.to_vector()) << "call " << i;
  }
  EXPECT_EQ(stateOf(traced), stateOf(eager));
  EXPECT_EQ(step.stats().traces, 1u);
}

TEST(Trace, ReturningAParameterReturnsItsUpdatedValue) {
  Classifier eager(8, 8, 3, 3), traced(8, 8, 3, 3);
  auto step = trace(
      [&](const Tensor& x, const Tensor& y) {
        traced.step(x, y);
        return traced.model.parameters()[0];
      },
      {.backend = Backend::cpu});
  for (uint64_t i = 0; i < 2; ++i) {
    auto [x, y] = batch(4, 8, 3, 80 + i);
    Tensor returned = step(x, y);
    eager.step(x, y);
    EXPECT_EQ(returned.to_vector(), eager.model.parameters()[0].to_vector()) << "call " << i;
    EXPECT_EQ(returned.to_vector(), traced.model.parameters()[0].to_vector()) << "call " << i;
  }
}

TEST(Trace, ParameterGroupsWithTheirOwnLrsMatchEagerBitwise) {
  // Each group's lr is its own state tensor: a schedule between calls moves
  // both without retracing.
  struct Net {
    Net()
        : g(3), model(nn::Linear(8, 8, true, {.generator = &g}), nn::ReLU(), nn::Linear(8, 3, true, {.generator = &g})),
          opt({{.params = {model.parameters()[0], model.parameters()[2]}, .weight_decay = 0.05},
               {.params = {model.parameters()[1], model.parameters()[3]}, .lr = 0.2}},
              {.lr = 0.1, .momentum = 0.9}),
          schedule(opt, 1, 0.5) {}
    Tensor step(const Tensor& x, const Tensor& y) { return plainTrainStep(model, opt, x, y); }
    Generator g;
    nn::Sequential model;
    optim::SGD opt;
    optim::StepLR schedule;
  };
  Net eager, traced;
  auto step = trace([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); }, {.backend = Backend::cpu});
  for (uint64_t i = 0; i < 4; ++i) {
    auto [x, y] = batch(4, 8, 3, 110 + i);
    EXPECT_EQ(step(x, y).item(), eager.step(x, y).item()) << "call " << i;
    traced.schedule.step();
    eager.schedule.step();
  }
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(traced.model.parameters()[i].to_vector(), eager.model.parameters()[i].to_vector()) << i;
  EXPECT_EQ(step.stats().traces, 1u);
}

TEST(Trace, O2ReDerivesItsParameterCopiesWhenTheUserWritesAParameter) {
  Classifier net SMALL_NET();
  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); },
                    {.amp = {.level = amp::O2, .dtype = f16}});
  auto [x, y] = batch(kBatch, kIn, kClasses, 9);
  double first = step(x, y).item();
  for (int i = 0; i < 5; ++i)
    step(x, y);
  EXPECT_LT(step(x, y).item(), first);
  // All-zero parameters: every logit is 0, the loss is ln(10). Stale f16
  // copies of the old weights would give the trained loss instead.
  for (Tensor& parameter : net.model.parameters()) {
    NoGradGuard noGrad;
    parameter.copy_(zeros_like(parameter));
  }
  EXPECT_NEAR(step(x, y).item(), std::log(10.0), 1e-3);
  EXPECT_EQ(step.stats().traces, 1u);
}

TEST(Trace, CheckNumericsNamesTheFirstOpAndLineThatMadeAnInf) {
  // Eager work first: the eager backend reads the variable when it is made.
  Classifier net SMALL_NET();
  auto [x, y] = batch(kBatch, kIn, kClasses, 1);
  std::vector<double> values = x.to_vector();
  Tensor firstWeight = net.model.parameters()[0];
  Tensor hugeWeight = full(firstWeight.shape(), 1e20, f32);
  ampjit::testing::ScopedEnvironment numerics("AMPJIT_CHECK_NUMERICS", "1");
  int line = 0;
  auto step = trace(
      [&](const Tensor& a, const Tensor& b) {
        net.opt.zero_grad();
        line = __LINE__ + 1;
        Tensor loss = cross_entropy(net.model(a), b);
        loss.backward();
        net.opt.step();
        return loss;
      },
      {.amp = {.level = amp::O1, .dtype = f16}});

  // O1's cast of the batch to f16 overflows (1e5 is finite in f32): the step
  // is named after the argument it casts.
  values[0] = 1e5;
  std::string message = errorOf([&] { step(tensor(values, x.shape()), y); });
  EXPECT_NE(message.find("AMPJIT_CHECK_NUMERICS"), std::string::npos) << message;
  EXPECT_NE(message.find("(elementwise from amp.cast of 'input0' at "), std::string::npos) << message;

  // An op's own overflow names the op and the user's line: 1e20 * 1e20 is beyond f32.
  step.set_amp({.level = amp::O0});
  {
    NoGradGuard noGrad;
    firstWeight.copy_(hugeWeight);
  }
  values[0] = 1e20;
  message = errorOf([&] { step(tensor(values, x.shape()), y); });
  EXPECT_NE(message.find("jit.matmul #0"), std::string::npos) << message;
  EXPECT_NE(message.find("TraceTest.cpp:" + std::to_string(line)), std::string::npos) << message;

  // An inf that arrives with the batch is the batch's, not the first op's that reads it.
  values[0] = std::numeric_limits<double>::infinity();
  message = errorOf([&] { step(tensor(values, x.shape()), y); });
  EXPECT_NE(message.find("argument 0 'input0' (input f32[16x32]) holds an inf or NaN before the step runs"),
            std::string::npos)
      << message;
}

TEST(Trace, AmpjitDumpWritesEveryStage) {
  ::ampjit::testing::TemporaryDirectory scratch;
  // A directory the dump makes itself.
  std::filesystem::path dir = scratch.path / "dumps";
  {
    ampjit::testing::ScopedEnvironment dump("AMPJIT_DUMP", dir.c_str());
    Classifier net SMALL_NET();
    auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); },
                      {.amp = {.level = amp::O1, .dtype = f16}, .name = "dumped"});
    auto [x, y] = batch(kBatch, kIn, kClasses, 1);
    step(x, y);
  }
  for (const char* suffix : {".0-traced.mlir", ".1-passes.mlir", ".2-amp.mlir", ".3-plan.txt", ".amp-report.json"}) {
    std::ifstream in(dir / (std::string("dumped.v1") + suffix));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(text.empty()) << suffix;
  }
  std::ifstream passes(dir / "dumped.v1.1-passes.mlir");
  std::string text((std::istreambuf_iterator<char>(passes)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("IR Dump After AmpPipeline"), std::string::npos);
}


TEST(Trace, ALossAmpWidensFromTheUsersF16IsScaledInFp32AsEagerly) {
  // The user's MSE on f16 values of their own making: a deny op, so eager
  // autocast computes it, the scaled loss and its backward's seed in f32.
  // Until 2026-12-03 the trace's scale_loss kept the recorded f16: the seed
  // times the scale (2^16) overflowed f16 and the first step was skipped
  // where eager autocast's was not. The step returns the loss in f32 as
  // eager autocast does (`jit.returned`); until 2026-12-04 it came back in
  // the f16 the trace recorded, eager's loss rounded once more.
  auto lowLossStep = [](Classifier& net, const Tensor& x, const Tensor& softTargets) {
    net.opt.zero_grad();
    Tensor loss = mse_loss(softmax(net.model(x), 1).to(f16), softTargets.to(f16));
    net.scaler.scale(loss).backward();
    net.scaler.step(net.opt);
    net.scaler.update();
    return loss;
  };
  for (auto [level, semantics] : {std::pair{amp::O1, amp::Semantics::autocast}, {amp::Auto, amp::Semantics::paint},
                                  {amp::O1, amp::Semantics::paint}, {amp::O2, amp::Semantics::paint}}) {
    bool bitwise = level == amp::Auto || semantics == amp::Semantics::autocast;
    SCOPED_TRACE(std::string(amp::level_name(level)) + (semantics == amp::Semantics::paint ? " paint" : " autocast"));
    Classifier eager SMALL_NET(), traced SMALL_NET();
    auto step = trace([&](const Tensor& x, const Tensor& t) { return lowLossStep(traced, x, t); },
                      {.amp = {.level = level, .dtype = f16}, .semantics = semantics, .backend = Backend::cpu});
    for (uint64_t i = 0; i < 3; ++i) {
      auto [x, labels] = batch(kBatch, kIn, kClasses, 60 + i);
      Generator generator(90 + i);
      Tensor softTargets = rand({kBatch, kClasses}, f32, &generator);
      amp::autocast scope({.dtype = f16});
      Tensor expected = lowLossStep(eager, x, softTargets);
      ASSERT_EQ(expected.dtype(), f32);
      Tensor got = step(x, softTargets);
      EXPECT_EQ(got.dtype(), f32) << "step " << i;
      if (bitwise) {
        EXPECT_EQ(got.item(), expected.item()) << "step " << i;
      } else {
        EXPECT_NEAR(got.item(), expected.item(), 1e-2 * std::abs(expected.item())) << "step " << i;
      }
    }
    EXPECT_EQ(eager.scaler.skipped_steps(), 0);
    EXPECT_EQ(traced.scaler.skipped_steps(), 0);
    if (bitwise) {
      EXPECT_EQ(stateOf(traced), stateOf(eager));
    }
  }
}

} // namespace
} // namespace jit::testing
