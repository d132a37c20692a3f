// jit::Checkpoint and the optimizers', scaler's and schedules' own
// save/load: a run resumed from a file continues bit for bit as the run that
// never stopped, eager or traced; a bad file is a clear error and changes
// nothing.
//
// Only jit/jit.h is included (besides the test helpers): it is all a training
// program needs.

#include "ClassifierNet.h"
#include "FrontendTestUtil.h"
#include "TemporaryDirectory.h"

#include "jit/jit.h"

#include "ampjit/runtime/Fnv1a.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>


namespace jit::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kIn = 12, kHidden = 16, kClasses = 5, kBatch = 8;

/// A mixed-precision run whose every piece of state matters for the next
/// step: dropout's generator, Adam's moments and step counts, a GradScaler that starts far too
/// high (f16 gradients overflow, steps are skipped, the scale backs off and
/// grows again every 2 clean steps), a StepLR halving the lr every 2 steps.
struct TrainingRun {
  explicit TrainingRun(uint64_t seed, int64_t hidden = kHidden, std::pair<double, double> betas = {0.9, 0.999},
                       bool amsgrad = false)
      : generator(seed), dropoutGenerator(seed + 100),
        model(nn::Linear(kIn, hidden, true, {.generator = &generator}), nn::ReLU(),
              nn::Dropout(0.25, &dropoutGenerator), nn::Linear(hidden, kClasses, true, {.generator = &generator})),
        opt(model.parameters(), {.lr = 1e-2, .betas = betas, .amsgrad = amsgrad}),
        scaler({.init_scale = 1048576.0, .growth_interval = 2}),
        schedule(opt, 2, 0.5) {
    checkpoint.add("model", model).add("optimizer", opt).add("scaler", scaler).add("scheduler", schedule);
    checkpoint.add("dropout", dropoutGenerator).add("steps", stepsDone);
  }

  Tensor step(const Tensor& x, const Tensor& y) { return scaledTrainStep(model, opt, scaler, x, y); }

  /// Every value a continued run depends on, bit for bit (doubles hold f32 and i64 exactly).
  std::vector<std::vector<double>> everything() const {
    std::vector<std::vector<double>> out;
    for (const auto& [name, tensor] : model.state_dict())
      out.push_back(tensor.to_vector());
    for (const auto& [name, tensor] : opt.state_dict())
      out.push_back(tensor.to_vector());
    out.push_back(dropoutGenerator.rng_state().to_vector());
    out.push_back({scaler.get_scale(), double(scaler.growth_tracker()), double(scaler.skipped_steps()),
                   double(schedule.last_epoch()), schedule.get_last_lr(), double(stepsDone)});
    return out;
  }

  Generator generator, dropoutGenerator;
  nn::Sequential model;
  optim::Adam opt;
  amp::GradScaler scaler;
  optim::StepLR schedule;
  int64_t stepsDone = 0;
  Checkpoint checkpoint;
};

using StepFunction = std::function<Tensor(const Tensor&, const Tensor&)>;

/// `count` steps from step `stepsDone`, each on its own seeded batch, with the
/// schedule stepped between calls (outside any traced step, as a user does).
std::vector<double> train(TrainingRun& run, const StepFunction& step, int count) {
  std::vector<double> losses;
  for (int i = 0; i < count; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 1000 + uint64_t(run.stepsDone));
    losses.push_back(step(x, y).item());
    run.schedule.step();
    ++run.stepsDone;
  }
  return losses;
}

StepFunction eagerF16(TrainingRun& run) {
  return [&run](const Tensor& x, const Tensor& y) {
    amp::autocast scope({.dtype = f16});
    return run.step(x, y);
  };
}

TracedFunction<StepFunction> tracedO2(TrainingRun& run) {
  return trace(StepFunction([&run](const Tensor& x, const Tensor& y) { return run.step(x, y); }),
               {.amp = {.level = amp::O2, .dtype = f16}, .backend = Backend::cpu, .defer_updates = DeferUpdates::on});
}

TEST(Checkpoint, AResumedEagerRunContinuesBitForBit) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  std::string path = (dir / "run.ampjit").string();
  TrainingRun original(1);
  train(original, eagerF16(original), 5);
  ASSERT_GT(original.scaler.skipped_steps(), 0) << "the scaler's state should matter: some steps overflow";
  ASSERT_GT(original.opt.step_count(0).item(), 0) << "and some steps update";
  original.checkpoint.save(path);
  std::vector<double> expected = train(original, eagerF16(original), 6);

  TrainingRun resumed(2); // another initialisation: everything must come from the file
  ASSERT_NE(resumed.everything(), original.everything());
  resumed.checkpoint.load(path);
  EXPECT_EQ(resumed.stepsDone, 5);
  EXPECT_EQ(resumed.schedule.last_epoch(), 5);
  EXPECT_EQ(train(resumed, eagerF16(resumed), 6), expected);
  EXPECT_EQ(resumed.everything(), original.everything());

  // The test sees the optimizer's and scaler's state: a run that resumes only
  // the model (a checkpoint's model loads alone) does not continue the same way.
  TrainingRun modelOnly(3);
  Checkpoint justTheModel;
  justTheModel.add("model", modelOnly.model).add("steps", modelOnly.stepsDone);
  justTheModel.load(path);
  EXPECT_NE(train(modelOnly, eagerF16(modelOnly), 6), expected);
}

TEST(Checkpoint, AResumedTracedRunContinuesBitForBit) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  std::string path = (dir / "run.ampjit").string();
  TrainingRun original(1);
  auto step = tracedO2(original);
  train(original, step, 5);
  ASSERT_GT(original.scaler.skipped_steps(), 0);
  ASSERT_GT(original.opt.step_count(0).item(), 0);
  // The last call's update is still pending (deferred): saving completes it first.
  original.checkpoint.save(path);
  std::vector<double> expected = train(original, step, 6);

  // Rolling back the live run, straight after a call whose update is still
  // pending: the load writes into the state the compiled step holds
  // (parameters, their O2 f16 copies, moments, scale) and the pending update
  // must not land on top of it. The same plan replays the same 6 steps again,
  // without retracing.
  original.checkpoint.load(path);
  EXPECT_EQ(train(original, step, 6), expected);
  EXPECT_EQ(step.stats().traces, 1u) << (step.stats().retrace_reasons.empty() ? ""
                                                                              : step.stats().retrace_reasons[0]);

  // A new process: new objects, a new trace, the file.
  TrainingRun resumed(2);
  resumed.checkpoint.load(path);
  auto resumedStep = tracedO2(resumed);
  EXPECT_EQ(train(resumed, resumedStep, 6), expected);
  EXPECT_EQ(resumed.everything(), original.everything());
}

TEST(Checkpoint, AnAmsgradRunResumesTracedAtO2AndNeedsAnAmsgradOptimizer) {
  // AMSGrad's third buffer through O2's master weights and the deferred
  // update, into a file and back.
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  std::string path = (dir / "run.ampjit").string();
  const std::pair<double, double> betas = {0.9, 0.5};
  TrainingRun original(1, kHidden, betas, true);
  auto step = tracedO2(original);
  train(original, step, 5);
  ASSERT_GT(original.scaler.skipped_steps(), 0);
  original.checkpoint.save(path);
  std::vector<double> expected = train(original, step, 6);
  // The running maximum is state the step carries: it has left exp_avg_sq.
  std::vector<double> maximum = original.opt.max_exp_avg_sq(0).to_vector(),
                      average = original.opt.exp_avg_sq(0).to_vector();
  EXPECT_NE(maximum, average);
  for (size_t i = 0; i < maximum.size(); ++i)
    EXPECT_GE(maximum[i], average[i]) << i;

  TrainingRun resumed(2, kHidden, betas, true);
  resumed.checkpoint.load(path);
  auto resumedStep = tracedO2(resumed);
  EXPECT_EQ(train(resumed, resumedStep, 6), expected);
  EXPECT_EQ(resumed.everything(), original.everything());

  // Adam without AMSGrad cannot continue an AMSGrad run, nor the other way.
  TrainingRun plain(3, kHidden, betas);
  std::vector<double> before = plain.everything()[0];
  std::string message = errorOf([&] { plain.checkpoint.load(path); });
  EXPECT_NE(message.find("'amsgrad'"), std::string::npos) << message;
  EXPECT_EQ(plain.everything()[0], before);
  plain.checkpoint.save(path);
  message = errorOf([&] { resumed.checkpoint.load(path); });
  EXPECT_NE(message.find("no setting 'amsgrad'"), std::string::npos) << message;
}

/// Every failed load below must leave all of this unchanged.
TEST(Checkpoint, BadFilesAreClearErrorsThatChangeNothing) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  TrainingRun source(1);
  train(source, eagerF16(source), 3);
  std::string good = (dir / "good.ampjit").string();
  source.checkpoint.save(good);

  TrainingRun target(2);
  train(target, eagerF16(target), 1);
  std::vector<std::vector<double>> before = target.everything();
  auto loadError = [&](const std::string& path) { return errorOf([&] { target.checkpoint.load(path); }); };
  auto expectError = [](const std::string& message, std::initializer_list<const char*> parts) {
    ASSERT_FALSE(message.empty()) << "no error";
    for (const char* part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  };
  auto writeVariant = [&](const std::string& name, const std::function<void(std::vector<char>&)>& change) {
    std::ifstream in(good, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    change(bytes);
    std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return path;
  };

  expectError(loadError((dir / "absent.ampjit").string()), {"Checkpoint::load", "absent.ampjit", "cannot open"});
  expectError(loadError(writeVariant("flipped.ampjit", [](auto& b) { b[b.size() - 30] ^= 0x10; })),
              {"flipped.ampjit", "checksum mismatch"});
  expectError(loadError(writeVariant("short.ampjit", [](auto& b) { b.resize(b.size() / 2); })),
              {"short.ampjit", "truncated", "needs"});

  // Well-formed files that do not fit.
  auto savedBy = [&](const std::string& name, const std::function<void(Checkpoint&)>& fill) {
    Checkpoint other;
    fill(other);
    std::string path = (dir / name).string();
    other.save(path);
    return path;
  };
  TrainingRun wider(3, kHidden + 1), otherBetas(4, kHidden, {0.8, 0.999});
  optim::SGD sgd(source.model.parameters(), {.lr = 0.1, .momentum = 0.9});
  expectError(loadError(savedBy("sgd.ampjit",
                                [&](Checkpoint& c) {
                                  c.add("model", source.model).add("optimizer", sgd).add("scaler", source.scaler);
                                  c.add("scheduler", source.schedule).add("dropout", source.dropoutGenerator);
                                  c.add("steps", source.stepsDone);
                                })),
              {"sgd.ampjit", "part 'optimizer'", "saved by SGD, not by Adam"});
  expectError(loadError(savedBy("betas.ampjit", [&](Checkpoint& c) { c = std::move(otherBetas.checkpoint); })),
              {"part 'optimizer'", "setting 'beta1' is 0.8 in the file but 0.9 here",
               "construct it with the file's beta1"});
  expectError(loadError(savedBy("wider.ampjit", [&](Checkpoint& c) { c = std::move(wider.checkpoint); })),
              {"part 'model'", "entry '0.weight' has shape [17x12] but the module's is [16x12]"});
  expectError(loadError(savedBy("noscaler.ampjit",
                                [&](Checkpoint& c) { c.add("model", source.model).add("optimizer", source.opt); })),
              {"noscaler.ampjit", "has no part 'scaler' (it has: model, optimizer)"});
  std::string moduleFile = (dir / "module.ampjit").string();
  source.model.save(moduleFile);
  expectError(loadError(moduleFile), {"module.ampjit", "holds one Module's state, not a checkpoint"});
  expectError(errorOf([&] { target.model.load(good); }),
              {"nn::load", "good.ampjit", "is a checkpoint (parts: model, optimizer, scaler, scheduler, dropout, steps)",
               "jit::Checkpoint"});
  expectError(errorOf([&] { target.opt.load(moduleFile); }),
              {"Adam::load", "module.ampjit", "saved by Module, not by Adam"});
  EXPECT_EQ(target.everything(), before);

  expectError(errorOf([&] { target.checkpoint.add("model", target.model); }), {"part 'model' is already added"});
  expectError(errorOf([] { Checkpoint().load("anything"); }), {"nothing to load into"});
}

bool sameBits(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
  });
}

/// Edits (overwrites, deletions, insertions) are resealed with the right
/// checksum, so the parser and the checks against the objects are what must
/// refuse them.
TEST(Checkpoint, ARandomlyEditedFileLoadsOrIsAnErrorThatChangesNothing) {
  ::ampjit::testing::TemporaryDirectory scratch;
  TrainingRun source(1);
  train(source, eagerF16(source), 3);
  std::string good = (scratch.path / "good.ampjit").string(), edited = (scratch.path / "edited.ampjit").string();
  source.checkpoint.save(good);
  std::ifstream in(good, std::ios::binary);
  const std::vector<uint8_t> original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  TrainingRun target(2);
  std::mt19937_64 rng(11);
  int rejected = 0, loaded = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> bytes(original.begin(), original.end() - 8);
    int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = 8 + rng() % (bytes.size() - 8);
      switch (rng() % 4) {
      case 0: bytes.erase(bytes.begin() + std::ptrdiff_t(at)); break;
      case 1: bytes.insert(bytes.begin() + std::ptrdiff_t(at), uint8_t(rng())); break;
      default: bytes[at] = uint8_t(rng()); break;
      }
    }
    uint64_t checksum = ::ampjit::runtime::fnv1a64(std::span<const uint8_t>(bytes));
    for (int i = 0; i < 8; ++i)
      bytes.push_back(uint8_t(checksum >> (8 * i)));
    std::ofstream(edited, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    std::vector<std::vector<double>> before = target.everything();
    std::string message = errorOf([&] { target.checkpoint.load(edited); });
    if (message.empty()) {
      ++loaded;
      continue;
    }
    ++rejected;
    EXPECT_NE(message.find("edited.ampjit"), std::string::npos) << message;
    // Bitwise: an edited file that loaded may have left NaNs behind.
    ASSERT_TRUE(sameBits(target.everything(), before)) << "trial " << trial << " changed state: " << message;
  }
  // Most edits break the structure; some only change a value and load.
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(loaded, 100);
}

TEST(Checkpoint, SavingOrLoadingInsideATracedStepIsAnError) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  std::string path = (dir / "run.ampjit").string();
  TrainingRun run(1);
  run.checkpoint.save(path);
  for (bool load : {false, true}) {
    auto step = trace(StepFunction([&](const Tensor& x, const Tensor& y) {
                        Tensor loss = run.step(x, y);
                        if (load)
                          run.checkpoint.load(path); // would compile the file's values in as constants
                        else
                          run.checkpoint.save(path);
                        return loss;
                      }),
                      {.backend = Backend::cpu, .name = "step_with_checkpoint"});
    auto [x, y] = batch(kBatch, kIn, kClasses, 1);
    std::string message = errorOf([&] { step(x, y); });
    EXPECT_NE(message.find(load ? "Checkpoint::load inside the traced step 'step_with_checkpoint'"
                                : "Checkpoint::save inside the traced step 'step_with_checkpoint'"),
              std::string::npos)
        << message;
  }
}

TEST(Checkpoint, AFailedSaveLeavesNoFileBehind) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  TrainingRun run(1);
  std::string message = errorOf([&] { run.checkpoint.save((dir / "missing" / "run.ampjit").string()); });
  EXPECT_NE(message.find("missing/run.ampjit"), std::string::npos) << message;
  EXPECT_NE(message.find("cannot open"), std::string::npos) << message;
  // A folder where the file should go: the temporary file cannot be renamed
  // over it, and is removed.
  fs::create_directories(dir / "taken");
  message = errorOf([&] { run.checkpoint.save((dir / "taken").string()); });
  EXPECT_NE(message.find("cannot replace"), std::string::npos) << message;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << "a temporary file was left";
}

TEST(Checkpoint, AGeneratorResumesItsHostDrawsAndDropoutState) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  std::string path = (dir / "rng.ampjit").string();
  Generator original(uint64_t(1) << 60); // a seed past 2^53: the file keeps all 64 bits
  for (int i = 0; i < 5; ++i)
    original.next_uniform();
  Tensor masked = dropout(ones({4, 4}, f32), 0.5, true, &original);
  Checkpoint checkpoint;
  checkpoint.add("rng", original);
  checkpoint.save(path);
  std::vector<double> expectedDraws;
  for (int i = 0; i < 400; ++i) // past the engine's 312-word block: the whole state matters
    expectedDraws.push_back(original.next_uniform());
  std::vector<double> expectedMask = dropout(ones({4, 4}, f32), 0.5, true, &original).to_vector();

  Generator resumed(2);
  Checkpoint resumedCheckpoint;
  resumedCheckpoint.add("rng", resumed);
  resumedCheckpoint.load(path);
  EXPECT_EQ(resumed.initial_seed(), uint64_t(1) << 60);
  std::vector<double> draws;
  for (int i = 0; i < 400; ++i)
    draws.push_back(resumed.next_uniform());
  EXPECT_EQ(draws, expectedDraws);
  EXPECT_EQ(dropout(ones({4, 4}, f32), 0.5, true, &resumed).to_vector(), expectedMask);
  EXPECT_NE(masked.to_vector(), expectedMask) << "the second mask should differ from the first";
}

TEST(Checkpoint, EachObjectSavesAndLoadsAlone) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  Generator g1(1), g2(2);
  Tensor a = randn({3, 4}, f32, &g1).requires_grad_(true), b = randn({3, 4}, f32, &g2).requires_grad_(true);
  optim::SGD sgdA({a}, {.lr = 0.5, .momentum = 0.9}), sgdB({b}, {.lr = 0.5, .momentum = 0.9});
  optim::CosineAnnealingLR cosineA(sgdA, 10), cosineB(sgdB, 10);
  for (int i = 0; i < 3; ++i) {
    sgdA.zero_grad();
    sum(a * a).backward();
    sgdA.step();
    cosineA.step();
  }
  std::string optimizerFile = (dir / "sgd.ampjit").string(), scheduleFile = (dir / "cosine.ampjit").string();
  sgdA.save(optimizerFile);
  cosineA.save(scheduleFile);
  sgdB.load(optimizerFile);
  cosineB.load(scheduleFile);
  EXPECT_EQ(sgdB.momentum_buffer(0).to_vector(), sgdA.momentum_buffer(0).to_vector());
  EXPECT_EQ(sgdB.lr().item(), sgdA.lr().item());
  EXPECT_NE(sgdB.lr().item(), 0.5) << "the schedule should have moved the lr";
  EXPECT_EQ(cosineB.last_epoch(), 3);
  EXPECT_EQ(cosineB.get_last_lr(), cosineA.get_last_lr());
  // The parameter is the module's state, not the optimizer's.
  EXPECT_NE(b.to_vector(), a.to_vector());

  optim::CosineAnnealingLR longer(sgdB, 20);
  std::string message = errorOf([&] { longer.load(scheduleFile); });
  EXPECT_NE(message.find("scheduler setting 'T_max' is 10 in the file but 20 here"), std::string::npos) << message;
  // A file of one group into two groups: the group count is a setting.
  Tensor c = randn({2}, f32, &g2).requires_grad_(true);
  optim::SGD twoGroups({{.params = {b}}, {.params = {c}, .lr = 0.1}}, {.lr = 0.5, .momentum = 0.9});
  message = errorOf([&] { twoGroups.load(optimizerFile); });
  EXPECT_NE(message.find("optimizer setting 'groups' is 1 in the file but 2 here"), std::string::npos) << message;
  // Two groups round-trip, each with its own lr.
  twoGroups.set_lr(1, 0.025);
  std::string groupsFile = (dir / "groups.ampjit").string();
  twoGroups.save(groupsFile);
  Tensor b2 = b.detach().requires_grad_(true), c2 = c.detach().requires_grad_(true);
  optim::SGD twoGroupsAgain({{.params = {b2}}, {.params = {c2}, .lr = 0.1}}, {.lr = 0.5, .momentum = 0.9});
  twoGroupsAgain.load(groupsFile);
  EXPECT_EQ(twoGroupsAgain.lr(1).item(), double(float(0.025)));
  EXPECT_EQ(twoGroupsAgain.lr(0).item(), double(float(0.5)));
  optim::SGD noMomentum({b}, {.lr = 0.1});
  message = errorOf([&] { noMomentum.load(optimizerFile); });
  EXPECT_NE(message.find("setting 'momentum' is 0.9 in the file but 0 here"), std::string::npos)
      << message;
}

} // namespace
} // namespace jit::testing

namespace jit::testing {
namespace {

/// A plain SGD run that keeps an EMA of its weights inside the step.
struct EmaRun {
  explicit EmaRun(uint64_t seed)
      : generator(seed), model(nn::Linear(kIn, kHidden, true, {.generator = &generator}), nn::ReLU(),
                               nn::Linear(kHidden, kClasses, true, {.generator = &generator})),
        opt(model.parameters(), {.lr = 0.1, .momentum = 0.9}), averageOfLoss(scalar_tensor(0.0)) {
    NoGradGuard noGrad;
    for (const Tensor& parameter : model.parameters())
      ema.push_back(zeros_like(parameter).copy_(parameter));
    checkpoint.add("model", model).add("optimizer", opt).add("ema", ema).add("loss_average", averageOfLoss);
  }
  Tensor step(const Tensor& x, const Tensor& y) {
    Tensor loss = plainTrainStep(model, opt, x, y);
    NoGradGuard noGrad;
    for (size_t i = 0; i < ema.size(); ++i)
      ema[i].mul_(scalar_tensor(0.99)).add_(model.parameters()[i] * 0.01);
    averageOfLoss.mul_(scalar_tensor(0.9)).add_(loss * 0.1);
    return loss;
  }
  std::vector<std::vector<double>> everything() const {
    std::vector<std::vector<double>> out;
    for (const Tensor& average : ema)
      out.push_back(average.to_vector());
    out.push_back(averageOfLoss.to_vector());
    for (const auto& [name, tensor] : model.state_dict())
      out.push_back(tensor.to_vector());
    return out;
  }
  Generator generator;
  nn::Sequential model;
  optim::SGD opt;
  std::vector<Tensor> ema;
  Tensor averageOfLoss;
  Checkpoint checkpoint;
};

TEST(Checkpoint, TensorsTheLoopKeepsResumeIntoATracedStepWithoutRetracing) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  std::string path = (dir / "run.ampjit").string();
  EmaRun unbroken(5), resumed(5);
  auto tracedStep = [](EmaRun& run) {
    return trace([&run](const Tensor& x, const Tensor& y) { return run.step(x, y); }, {.backend = Backend::cpu});
  };
  auto unbrokenStep = tracedStep(unbroken), resumedStep = tracedStep(resumed);
  for (uint64_t i = 0; i < 3; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 200 + i);
    unbrokenStep(x, y);
    resumedStep(x, y);
  }
  resumed.checkpoint.save(path);
  std::vector<std::vector<double>> atSave = resumed.everything();
  // Two more steps, then back to the saved point: the EMA and the average
  // must come back too, into the tensors the compiled step holds.
  for (uint64_t i = 0; i < 2; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 900 + i);
    resumedStep(x, y);
  }
  ASSERT_NE(resumed.everything(), atSave);
  resumed.checkpoint.load(path);
  EXPECT_EQ(resumed.everything(), atSave);
  for (uint64_t i = 3; i < 6; ++i) {
    auto [x, y] = batch(kBatch, kIn, kClasses, 200 + i);
    EXPECT_EQ(resumedStep(x, y).item(), unbrokenStep(x, y).item()) << "step " << i;
  }
  EXPECT_EQ(resumed.everything(), unbroken.everything());
  EXPECT_EQ(resumedStep.stats().traces, 1u);

  // A list of another length or shape is an error that names the part and changes nothing.
  std::vector<Tensor> shorter(resumed.ema.begin(), resumed.ema.end() - 1);
  std::vector<std::vector<double>> before = resumed.everything();
  Checkpoint wrongLength;
  wrongLength.add("ema", shorter);
  std::string message = errorOf([&] { wrongLength.load(path); });
  EXPECT_NE(message.find("part 'ema'"), std::string::npos) << message;
  EXPECT_NE(message.find("entry '3' is unknown to the tensor list"), std::string::npos) << message;
  Checkpoint wrongShape;
  wrongShape.add("loss_average", zeros({2}));
  message = errorOf([&] { wrongShape.load(path); });
  EXPECT_NE(message.find("has shape [] but the tensor list's is [2]"), std::string::npos) << message;
  EXPECT_EQ(resumed.everything(), before);
  EXPECT_NE(errorOf([] { Checkpoint().add("nothing", Tensor()); }).find("undefined tensor"), std::string::npos);
}

} // namespace
} // namespace jit::testing
