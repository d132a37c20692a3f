// TraceOptions::defer_updates: a call's optimizer update runs at the start of
// the next call (or when the program touches the state), and what the program
// sees is bit for bit what it sees without deferral.

#include "ClassifierNet.h"
#include "FrontendTestUtil.h"

#include "jit/trace.h"

#include <functional>
#include <limits>
#include <memory>

namespace jit::testing {
namespace {

constexpr int64_t kIn = 32, kHidden = 48, kClasses = 10, kBatch = 16;

struct Level {
  amp::Level level;
  DType dtype;
};

class DeferredUpdate : public ::testing::TestWithParam<Level> {};

using Step = std::function<Tensor(const Tensor&, const Tensor&)>;

/// The same classifier traced with and without deferral.
struct Pair {
  explicit Pair(Level level, amp::GradScalerOptions scaler = {})
      : deferredNet(kIn, kHidden, kClasses, 3, scaler), plainNet(kIn, kHidden, kClasses, 3, scaler),
        deferred(trace(Step([this](const Tensor& a, const Tensor& b) { return deferredNet.step(a, b); }),
                       {.amp = {.level = level.level, .dtype = level.dtype},
                        .defer_updates = DeferUpdates::on})),
        plain(trace(Step([this](const Tensor& a, const Tensor& b) { return plainNet.step(a, b); }),
                    {.amp = {.level = level.level, .dtype = level.dtype}, .defer_updates = DeferUpdates::off})) {}

  /// One call of each; their losses must agree bitwise.
  void step(const Tensor& x, const Tensor& y, const std::string& what) {
    double got = deferred(x, y).item(), expected = plain(x, y).item();
    EXPECT_EQ(got, expected) << what;
  }

  Classifier deferredNet, plainNet;
  TracedFunction<Step> deferred, plain;
};

TEST_P(DeferredUpdate, LossesAndFinalStateAgreeBitwise) {
  Pair pair(GetParam());
  for (uint64_t i = 0; i < 6; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 500 + i);
    pair.step(x, y, "step " + std::to_string(i));
  }
  EXPECT_NE(pair.deferred.plan_text().find("deferred steps 0.."), std::string::npos) << pair.deferred.plan_text();
  EXPECT_EQ(pair.plain.plan_text().find("deferred steps"), std::string::npos);
  // Reading only the loss never forced an update early.
  EXPECT_EQ(pair.deferred.stats().early_update_completions, 0u);
  EXPECT_EQ(stateOf(pair.deferredNet), stateOf(pair.plainNet));
  EXPECT_EQ(pair.deferred.stats().early_update_completions, 1u);
  EXPECT_EQ(pair.deferred.stats().traces, 1u);
}

INSTANTIATE_TEST_SUITE_P(Levels, DeferredUpdate,
                         ::testing::Values(Level{amp::O0, f32}, Level{amp::O1, f16}, Level{amp::O2, f16},
                                           Level{amp::O2, bf16}),
                         [](const ::testing::TestParamInfo<Level>& info) {
                           return std::string(info.param.level == amp::O0   ? "O0"
                                              : info.param.level == amp::O1 ? "O1"
                                                                            : "O2") +
                                  (info.param.dtype == f16 ? "f16" : info.param.dtype == bf16 ? "bf16" : "f32");
                         });

TEST(DeferredUpdates, AutomaticDefersNothingOnTheCpu) {
  Classifier net(kIn, kHidden, kClasses, 3);
  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); },
                    {.amp = {.level = amp::O1, .dtype = f16}, .backend = Backend::cpu});
  auto [x, y] = batch(kBatch, kIn, kClasses, 1);
  step(x, y);
  EXPECT_EQ(step.plan_text().find("deferred steps"), std::string::npos);
}

TEST(DeferredUpdates, ReadingStateBetweenCallsSeesTheUpdatedValues) {
  Pair pair({amp::O2, f16});
  for (uint64_t i = 0; i < 4; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 600 + i);
    pair.step(x, y, "step " + std::to_string(i));
    EXPECT_EQ(stateOf(pair.deferredNet), stateOf(pair.plainNet)) << "after step " << i;
  }
  EXPECT_EQ(pair.deferred.stats().early_update_completions, 4u);
}

TEST(DeferredUpdates, AnLrChangeBetweenCallsReachesOnlyLaterUpdates) {
  Pair pair({amp::O1, f16});
  optim::StepLR deferredSchedule(pair.deferredNet.opt, 1, 0.5), plainSchedule(pair.plainNet.opt, 1, 0.5);
  for (uint64_t i = 0; i < 4; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 700 + i);
    pair.step(x, y, "step " + std::to_string(i));
    // The schedule writes the lr while the call's update is still pending:
    // that update must use the lr it was computed with.
    deferredSchedule.step();
    plainSchedule.step();
  }
  EXPECT_EQ(pair.deferred.stats().early_update_completions, 0u);
  EXPECT_EQ(stateOf(pair.deferredNet), stateOf(pair.plainNet));
}

TEST(DeferredUpdates, AnOverflowingStepIsStillSkipped) {
  Pair pair({amp::O1, f16});
  auto [x, y] = batch(kBatch, kIn, kClasses, 8);
  pair.step(x, y, "clean step");
  Tensor poisoned = withInfAt(x, 5);
  pair.deferred(poisoned, y);
  pair.plain(poisoned, y);
  pair.step(x, y, "step after the skip");
  EXPECT_EQ(pair.deferredNet.scaler.skipped_steps(), 1);
  EXPECT_EQ(stateOf(pair.deferredNet), stateOf(pair.plainNet));
}

TEST(DeferredUpdates, ACopyIntoAParameterLandsAfterThePendingUpdate) {
  Pair pair({amp::O2, f16});
  auto [x, y] = batch(kBatch, kIn, kClasses, 9);
  pair.step(x, y, "step 0");
  pair.step(x, y, "step 1");
  for (Classifier* net : {&pair.deferredNet, &pair.plainNet}) {
    NoGradGuard noGrad;
    Tensor weight = net->model.parameters()[2];
    weight.copy_(zeros_like(weight));
  }
  pair.step(x, y, "step 2, after the write");
  pair.step(x, y, "step 3");
  EXPECT_EQ(stateOf(pair.deferredNet), stateOf(pair.plainNet));
}

TEST(DeferredUpdates, KeptParameterCastsChangeNoBitAtO1) {
  // TraceOptions::keep_parameter_casts: the update writes each parameter's
  // f16/bf16 cast for the next call (the CUDA default at O1), deferred or
  // not; a host write to a parameter re-derives its cast.
  for (DeferUpdates defer : {DeferUpdates::off, DeferUpdates::on})
    for (DType dtype : {f16, bf16}) {
      SCOPED_TRACE(std::string(dtype == f16 ? "f16" : "bf16") + (defer == DeferUpdates::on ? ", deferred" : ""));
      Classifier keptNet(kIn, kHidden, kClasses, 3), castNet(kIn, kHidden, kClasses, 3);
      auto kept = trace(Step([&](const Tensor& a, const Tensor& b) { return keptNet.step(a, b); }),
                        {.amp = {.level = amp::O1, .dtype = dtype}, .defer_updates = defer,
                         .keep_parameter_casts = true});
      auto cast = trace(Step([&](const Tensor& a, const Tensor& b) { return castNet.step(a, b); }),
                        {.amp = {.level = amp::O1, .dtype = dtype}, .defer_updates = DeferUpdates::off,
                         .keep_parameter_casts = false});
      for (uint64_t i = 0; i < 6; ++i) {
        if (i == 3)
          for (Classifier* net : {&keptNet, &castNet}) {
            NoGradGuard noGrad;
            Tensor weight = net->model.parameters()[0];
            weight.copy_(weight * 0.5);
          }
        auto [x, y] = batch(kBatch, kIn, kClasses, 700 + i);
        EXPECT_EQ(kept(x, y).item(), cast(x, y).item()) << "call " << i;
      }
      EXPECT_NE(kept.plan_text().find("param_copy="), std::string::npos) << kept.plan_text();
      EXPECT_EQ(cast.plan_text().find("param_copy="), std::string::npos);
      EXPECT_EQ(stateOf(keptNet), stateOf(castNet));
    }
  EXPECT_EQ(errorOf([] {
              trace(Step([](const Tensor& a, const Tensor&) { return a; }),
                    {.amp = {.level = amp::O0}, .keep_parameter_casts = true});
            }),
            "jit::trace 'train_step': keep_parameter_casts needs O1-O3 or auto: at O0 no parameter is cast to keep");
}

TEST(DeferredUpdates, DestroyingTheTracedFunctionCompletesItsUpdate) {
  Classifier deferredNet(kIn, kHidden, kClasses, 3), plainNet(kIn, kHidden, kClasses, 3);
  auto [x, y] = batch(kBatch, kIn, kClasses, 10);
  {
    auto step = trace([&](const Tensor& a, const Tensor& b) { return deferredNet.step(a, b); },
                      {.amp = {.level = amp::O1, .dtype = f16}, .defer_updates = DeferUpdates::on});
    step(x, y);
    step(x, y);
  }
  auto step = trace([&](const Tensor& a, const Tensor& b) { return plainNet.step(a, b); },
                    {.amp = {.level = amp::O1, .dtype = f16}, .defer_updates = DeferUpdates::off});
  step(x, y);
  step(x, y);
  EXPECT_EQ(stateOf(deferredNet), stateOf(plainNet));
}

TEST(DeferredUpdates, AnotherFunctionAndEagerOpsSeeTheUpdatedParameters) {
  Pair pair({amp::O1, f16});
  auto [x, y] = batch(kBatch, kIn, kClasses, 11);
  auto evaluate = [](Classifier& net) {
    return trace([&net](const Tensor& a, const Tensor& b) { return cross_entropy(net.model(a), b); },
                 {.defer_updates = DeferUpdates::off});
  };
  auto deferredEval = evaluate(pair.deferredNet), plainEval = evaluate(pair.plainNet);
  for (uint64_t i = 0; i < 3; ++i) {
    pair.step(x, y, "train step " + std::to_string(i));
    EXPECT_EQ(deferredEval(x, y).item(), plainEval(x, y).item()) << "traced evaluation after step " << i;
  }
  pair.step(x, y, "train step 3");
  {
    NoGradGuard noGrad;
    EXPECT_EQ(cross_entropy(pair.deferredNet.model(x), y).item(), cross_entropy(pair.plainNet.model(x), y).item())
        << "eager evaluation";
  }
  EXPECT_EQ(pair.deferred.stats().early_update_completions, 4u);
  EXPECT_EQ(stateOf(pair.deferredNet), stateOf(pair.plainNet));
}

TEST(DeferredUpdates, GradientAccumulationWithADeferredApplyAgreesWithEager) {
  // The apply step's update reads the accumulated gradients and its
  // zero_grad rewrites them: both are deferred, and the next accumulation
  // (another traced function on that state) completes them first.
  Classifier eager(kIn, kHidden, kClasses, 3), traced(kIn, kHidden, kClasses, 3);
  auto accumulate = accumulateGradients;
  auto apply = applyGradients;
  auto tracedAccumulate = trace([&](const Tensor& x, const Tensor& y) { return accumulate(traced, x, y); },
                                {.log_retraces = false, .name = "accumulate"});
  auto tracedApply = trace([&]() { apply(traced); },
                           {.defer_updates = DeferUpdates::on, .log_retraces = false, .name = "apply"});
  for (uint64_t round = 0; round < 3; ++round) {
    for (uint64_t micro = 0; micro < 2; ++micro) {
      auto [x, y] = batch(kBatch, kIn, kClasses, 10 * round + micro);
      EXPECT_EQ(tracedAccumulate(x, y).item(), accumulate(eager, x, y).item()) << "round " << round;
    }
    tracedApply();
    apply(eager);
  }
  EXPECT_NE(tracedApply.plan_text().find("deferred steps"), std::string::npos);
  // Rounds 1 and 2 began by completing the previous round's update.
  EXPECT_EQ(tracedApply.stats().early_update_completions, 2u);
  EXPECT_EQ(stateOf(traced), stateOf(eager));
  for (size_t i = 0; i < traced.model.parameters().size(); ++i)
    EXPECT_EQ(traced.model.parameters()[i].grad().to_vector(), eager.model.parameters()[i].grad().to_vector());
}

/// Adam's step counts and moments are state the update owns.
struct AdamNet {
  explicit AdamNet(uint64_t seed)
      : generator(seed), model(nn::Linear(kIn, kHidden, true, {.generator = &generator}), nn::GELU(),
                               nn::Linear(kHidden, kClasses, true, {.generator = &generator})),
        opt(model.parameters(), {.lr = 1e-3, .weight_decay = 1e-2}) {}

  Tensor step(const Tensor& x, const Tensor& y) { return scaledTrainStep(model, opt, scaler, x, y); }

  std::vector<std::vector<double>> state() {
    std::vector<std::vector<double>> values;
    for (size_t i = 0; i < model.parameters().size(); ++i) {
      values.push_back(model.parameters()[i].to_vector());
      values.push_back(opt.exp_avg(i).to_vector());
      values.push_back(opt.exp_avg_sq(i).to_vector());
    }
    return values;
  }

  Generator generator;
  nn::Sequential model;
  optim::AdamW opt;
  amp::GradScaler scaler;
};

TEST(DeferredUpdates, AdamWAtO2Bf16AgreesBitwise) {
  AdamNet deferredNet(4), plainNet(4);
  auto deferred = trace([&](const Tensor& a, const Tensor& b) { return deferredNet.step(a, b); },
                        {.amp = {.level = amp::O2, .dtype = bf16}, .defer_updates = DeferUpdates::on});
  auto plain = trace([&](const Tensor& a, const Tensor& b) { return plainNet.step(a, b); },
                     {.amp = {.level = amp::O2, .dtype = bf16}, .defer_updates = DeferUpdates::off});
  for (uint64_t i = 0; i < 5; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 800 + i);
    EXPECT_EQ(deferred(x, y).item(), plain(x, y).item()) << "step " << i;
  }
  EXPECT_NE(deferred.plan_text().find("deferred steps"), std::string::npos);
  EXPECT_EQ(deferredNet.state(), plainNet.state());
}

} // namespace
} // namespace jit::testing
