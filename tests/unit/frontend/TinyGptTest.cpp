// TinyGpt.h's GPT-style model traced beside eager: bitwise at O0 and O1
// (autocast semantics), within a few roundings at O2 and O3, and it learns
// to continue a counting sequence.

#include "FrontendTestUtil.h"
#include "TemporaryDirectory.h"
#include "TinyGpt.h"

#include "jit/jit.h"

#include <cmath>
#include <filesystem>
#include <optional>


namespace jit::testing {
namespace {

using namespace gpt;

TEST(TinyGpt, TracesAsItRunsEagerlyAtO0AndO1) {
  for (amp::Level level : {amp::O0, amp::O1}) {
    SCOPED_TRACE(::testing::Message() << "O" << int(level));
    GptTrainer eager(65536.0), traced(65536.0);
    expectTracedLossesEqualEager(
        level, [&](const Tensor& x, const Tensor& y) { return eager.step(x, y); },
        [&](const Tensor& x, const Tensor& y) { return traced.step(x, y); }, countingBatch, 4);
    expectSameState(traced.model.state_dict(), eager.model.state_dict());
  }
}

TEST(TinyGpt, WithDropoutTracesAsItRunsEagerly) {
  // Attention and residual dropout: each call draws new masks, the same
  // ones eagerly and traced.
  for (amp::Level level : {amp::O0, amp::O1}) {
    SCOPED_TRACE(::testing::Message() << "O" << int(level));
    GptTrainer eager(65536.0, 0.1), traced(65536.0, 0.1);
    expectTracedLossesEqualEager(
        level, [&](const Tensor& x, const Tensor& y) { return eager.step(x, y); },
        [&](const Tensor& x, const Tensor& y) { return traced.step(x, y); }, countingBatch, 4);
    expectSameState(traced.model.state_dict(), eager.model.state_dict());
    EXPECT_EQ(traced.model.dropoutGenerator.rng_state().to_vector(), eager.model.dropoutGenerator.rng_state().to_vector());
  }
  // Dropout changes the losses (the masks are not all ones).
  GptTrainer with(65536.0, 0.1), without(65536.0);
  auto [ids, next] = countingBatch(0);
  EXPECT_NE(with.step(ids, next).item(), without.step(ids, next).item());
}

TEST(TinyGpt, LearnsToCountAtEveryLevel) {
  std::vector<std::vector<double>> losses;
  for (amp::Level level : {amp::O0, amp::O1, amp::O2, amp::O3}) {
    SCOPED_TRACE(::testing::Message() << "O" << int(level));
    GptTrainer trainer(1024.0);
    auto step = trace([&](const Tensor& x, const Tensor& y) { return trainer.step(x, y); },
                      {.amp = policyAt(level), .backend = Backend::cpu, .log_retraces = false});
    losses.emplace_back();
    for (uint64_t i = 0; i < 150; ++i) {
      auto [ids, next] = countingBatch(i);
      losses.back().push_back(step(ids, next).item());
    }
    EXPECT_EQ(trainer.scaler.skipped_steps(), 0);
    // From ln(13) = 2.56 to well under a third of it.
    EXPECT_LT(losses.back().back(), 0.8) << "first loss " << losses.back().front();
  }
  // The first steps, before the trajectories part: within a few roundings.
  for (size_t level = 1; level < losses.size(); ++level)
    for (size_t i = 0; i < 5; ++i)
      EXPECT_NEAR(losses[level][i], losses[0][i], 5e-3 * losses[0][i]) << "level " << level << " step " << i;
}

TEST(TinyGpt, AccumulatedMicroBatchesAndAnEvalStepTraceAsTheyRunEagerly) {
  // Two scaled backwards into the same .grad (leaf sums across backwards)
  // before one step, under f16 autocast, and a no-grad eval step traced
  // beside it that must see each update.
  GptTrainer eager(65536.0), traced(65536.0);
  auto train = [](GptTrainer& t, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d) {
    t.opt.zero_grad();
    Tensor first = cross_entropy(t.model(a), b) * 0.5;
    t.scaler.scale(first).backward();
    Tensor second = cross_entropy(t.model(c), d) * 0.5;
    t.scaler.scale(second).backward();
    t.scaler.step(t.opt);
    t.scaler.update();
    return first + second;
  };
  auto evaluate = [](GptTrainer& t, const Tensor& ids, const Tensor& next) {
    NoGradGuard noGrad;
    return cross_entropy(t.model(ids), next);
  };
  TraceOptions options{.amp = {.level = amp::O1, .dtype = f16},
                       .semantics = amp::Semantics::autocast,
                       .backend = Backend::cpu};
  auto trainStep = trace([&](const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d) {
    return train(traced, a, b, c, d);
  }, options);
  auto evalStep = trace([&](const Tensor& ids, const Tensor& next) { return evaluate(traced, ids, next); }, options);
  for (uint64_t i = 0; i < 4; ++i) {
    auto [a, b] = countingBatch(2 * i);
    auto [c, d] = countingBatch(2 * i + 1);
    amp::autocast scope({.dtype = f16});
    EXPECT_EQ(trainStep(a, b, c, d).item(), train(eager, a, b, c, d).item()) << "train call " << i;
    auto [x, y] = countingBatch(100 + i);
    EXPECT_EQ(evalStep(x, y).item(), evaluate(eager, x, y).item()) << "eval call " << i;
  }
  expectSameState(traced.model.state_dict(), eager.model.state_dict());
  EXPECT_EQ(trainStep.stats().traces, 1u);
  EXPECT_EQ(evalStep.stats().traces, 1u);
}

/// A language-model training loop as people write it: AdamW with weight
/// decay on matrices only (biases, norms and embeddings in a no-decay group),
/// a per-iteration warmup-then-cosine schedule, unscale_ and clipping, all in
/// one checkpoint.
struct LmRun {
  explicit LmRun(uint64_t seed)
      : model(seed), opt(groups(model), {.lr = 3e-3, .weight_decay = 0.1}),
        scaler({.init_scale = 1e7, .growth_interval = 3}),
        schedule(opt,
                 {std::make_shared<optim::LinearWarmup>(opt, 4, 0.1),
                  std::make_shared<optim::CosineAnnealingLR>(opt, 20, 1e-4)},
                 {4}) {
    checkpoint.add("model", model).add("optimizer", opt).add("scaler", scaler).add("schedule", schedule);
    checkpoint.add("iteration", iteration);
  }
  static std::vector<optim::AdamGroup> groups(TinyGpt& model) {
    std::vector<Tensor> decay, noDecay;
    for (const auto& [name, parameter] : model.named_parameters())
      (parameter.dim() == 2 && name.find("tokens") == std::string::npos &&
               name.find("positions") == std::string::npos
           ? decay
           : noDecay)
          .push_back(parameter);
    return {{.params = decay}, {.params = noDecay, .weight_decay = 0.0}};
  }
  Tensor step(const Tensor& ids, const Tensor& next) { return clippedScaledStep(model, opt, scaler, ids, next, 0.5); }
  TinyGpt model;
  optim::AdamW opt;
  amp::GradScaler scaler;
  optim::SequentialLR schedule;
  int64_t iteration = 0;
  Checkpoint checkpoint;
};

TEST(TinyGpt, ALanguageModelLoopResumesFromACheckpointBitForBitAtO2) {
  auto train = [](LmRun& run, auto& step, int count) {
    std::vector<double> losses;
    for (int i = 0; i < count; ++i) {
      auto [ids, next] = countingBatch(uint64_t(run.iteration));
      losses.push_back(step(ids, next).item());
      run.schedule.step();
      ++run.iteration;
    }
    return losses;
  };
  auto traced = [](LmRun& run) {
    return trace([&run](const Tensor& x, const Tensor& y) { return run.step(x, y); },
                 {.amp = policyAt(amp::O2), .backend = Backend::cpu, .defer_updates = DeferUpdates::on});
  };
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = scratch.file("lm.ampjit");
  LmRun original(7);
  auto step = traced(original);
  std::vector<double> first = train(original, step, 6);
  EXPECT_GT(original.scaler.skipped_steps(), 0) << "the first scales overflow f16";
  original.checkpoint.save(path);
  std::vector<double> expected = train(original, step, 8);
  EXPECT_LT(expected.back(), first.front());

  LmRun resumed(99); // other initial weights: the file must replace them all
  resumed.checkpoint.load(path);
  EXPECT_EQ(resumed.iteration, 6);
  auto resumedStep = traced(resumed);
  EXPECT_EQ(train(resumed, resumedStep, 8), expected);
  expectSameState(resumed.model.state_dict(), original.model.state_dict());
  expectSameState(resumed.opt.state_dict(), original.opt.state_dict());
  EXPECT_EQ(resumed.schedule.get_last_lr(1), original.schedule.get_last_lr(1));
}

} // namespace
} // namespace jit::testing
