// The plan model: verification rules, the text form, and the binary file
// (round trip, and a clear error for every kind of bad file).

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/PlanFile.h"
#include "ampjit/runtime/StepBuilder.h"

#include "RuntimeTestUtil.h"
#include "TemporaryDirectory.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>

namespace {

using namespace ampjit::runtime;
using namespace ampjit::runtime::test;

TEST(Plan, SampleTrainStepVerifies) {
  Plan plan = sampleTrainStep();
  Status status = verifyPlan(plan);
  EXPECT_TRUE(status.ok()) << status.message() << "\n" << printPlan(plan);
  EXPECT_EQ(plan.argumentCount(), 12u);
}

TEST(Plan, PrintsStableReadableText) {
  PlanBuilder b("linear");
  BufferId x = b.argument(tt(DType::F16, {64, 784}), BufferRole::Input, "x");
  BufferId w = b.argument(tt(DType::F16, {512, 784}), BufferRole::Param, "w");
  BufferId y = b.temporary(tt(DType::F16, {64, 512}));
  b.op("jit.matmul", {x, w}, {y}, {{"transpose_rhs", true}});
  BufferId out = b.output(tt(DType::F32, {64}));
  BufferId mean = b.temporary(tt(DType::F16, {64}));
  b.op("jit.mean", {y}, {mean}, {{"axes", std::vector<int64_t>{1}}});
  b.op("jit.convert", {mean}, {out});
  b.result(out);
  Plan plan = b.finish();
  ASSERT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).message();
  EXPECT_EQ(printPlan(plan), "plan @linear\n"
                             "  arena 65664 bytes\n"
                             "  %0 = arg 0 input f16[64x784] \"x\"\n"
                             "  %1 = arg 1 param f16[512x784] \"w\"\n"
                             "  %2 = temporary f16[64x512] @0\n"
                             "  %3 = output f32[64]\n"
                             "  %4 = temporary f16[64] @65536\n"
                             "  return %3\n"
                             "  step 0: gemm f16 x f16 -> f16 (acc f32) A=%0 B=%1^T C=%2  // jit.matmul\n"
                             "  step 1: reduction mean axes=[1] f16 -> f16 (acc f32) x=%2 y=%4  // jit.mean\n"
                             "  step 2: elementwise convert f16 -> f32 (compute f32) x=%4 out=%3  // jit.convert\n");
}

TEST(Plan, PrintsFusedProgramsOptimizerAndConstants) {
  Plan plan = sampleTrainStep();
  std::string text = printPlan(plan);
  EXPECT_NE(text.find("%2 = arg 2 param f16[3x8] derived_from arg 1 \"w16\""), std::string::npos) << text;
  EXPECT_NE(text.find("fused_elementwise f16, f16 -> f16, f32 (compute f32) in0=%13 in1=%14 out0=%15 out1=%16  // fused(jit.add, jit.relu, amp.cast, jit.pow)\n"
                      "    r0 = load in0 : f16\n"
                      "    r1 = load in1 : f16\n"
                      "    r2 = add r0, r1 : f16\n"
                      "    r3 = relu r2 : f16\n"
                      "    r4 = convert r3 : f32\n"
                      "    r5 = constant 0.5 : f32\n"
                      "    r6 = pow r4 exponent=2 : f32\n"
                      "    out0 = r3\n"
                      "    out1 = r6"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("optimizer_update sgd momentum=0.9 dampening=0 nesterov weight_decay=0 "
                      "f32, f32, f32, f32, f32, i1, f16 -> f32, f32, f16 (compute f32) param=%1 grad=%22 "
                      "momentum_buffer=%5 lr=%6 inv_scale=%24 predicate=%23 param_copy=%2 "
                      "new_param=%1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("= constant f32[3] = [0.5, 1.5, -2]"), std::string::npos) << text;
  EXPECT_NE(text.find("update_scale growth_factor=2 backoff_factor=0.5 growth_interval=1000 backoff_interval=1 "
                      "min_scale=0 max_scale=inf"),
            std::string::npos)
      << text;
}

//===----------------------------------------------------------------------===//
// File round trip
//===----------------------------------------------------------------------===//

TEST(PlanFile, RoundTripIsBitExact) {
  Plan plan = sampleTrainStep();
  std::vector<uint8_t> bytes = encodePlan(plan);
  Expected<Plan> decoded = decodePlan(bytes, "memory");
  ASSERT_TRUE(decoded.ok()) << decoded.message();
  EXPECT_TRUE(*decoded == plan);
  EXPECT_EQ(encodePlan(*decoded), bytes);
  EXPECT_EQ(printPlan(*decoded), printPlan(plan));
}

TEST(PlanFile, SaveAndLoadThroughAFile) {
  Plan plan = sampleTrainStep();
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = scratch.file("plan.bin");
  ASSERT_TRUE(savePlan(plan, path).ok());
  Expected<Plan> loaded = loadPlan(path);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  EXPECT_TRUE(*loaded == plan);
}

TEST(PlanFile, MissingFileIsAnError) {
  Expected<Plan> loaded = loadPlan("/nonexistent/dir/plan.bin");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.message(), "cannot open '/nonexistent/dir/plan.bin': No such file or directory");
  Status unwritable = savePlan(sampleTrainStep(), "/nonexistent/dir/plan.bin");
  ASSERT_FALSE(unwritable.ok());
  EXPECT_NE(unwritable.message().find("cannot open '/nonexistent/dir/plan.bin' for writing"), std::string::npos)
      << unwritable.message();
}

// A process that has the plan file open (here: a second name for it) keeps
// reading the plan it opened while a new one is saved, and a save that
// fails midway cannot have cut the old one short: the new bytes go to a file
// of their own, renamed over the old name.
TEST(PlanFile, ASaveReplacesThePlanFileRatherThanRewritingIt) {
  ::ampjit::testing::TemporaryDirectory scratch;
  Plan first = sampleTrainStep(), second = sampleTrainStep();
  second.name = "another_step";
  std::string path = scratch.file("plan.bin"), opened = scratch.file("opened.bin");
  ASSERT_TRUE(savePlan(first, path).ok());
  std::filesystem::create_hard_link(path, opened);
  ASSERT_TRUE(savePlan(second, path).ok());
  Expected<Plan> now = loadPlan(path), before = loadPlan(opened);
  ASSERT_TRUE(now.ok() && before.ok()) << now.message() << before.message();
  EXPECT_TRUE(*now == second);
  EXPECT_TRUE(*before == first) << "the saved-over file was rewritten in place";
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(scratch.path), {}), 2) << "a temporary file left";
}

TEST(PlanFile, SaveRefusesAnInvalidPlan) {
  Plan plan = sampleTrainStep();
  plan.steps[1].inputs[0] = 999;
  Status status = savePlan(plan, "/tmp/never-written.bin");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("refusing to save an invalid plan"), std::string::npos);
}

TEST(PlanFile, EveryTruncationIsAClearError) {
  std::vector<uint8_t> bytes = encodePlan(sampleTrainStep());
  for (size_t length = 0; length < bytes.size(); ++length) {
    Expected<Plan> decoded = decodePlan(std::span(bytes).first(length), "cut.bin");
    ASSERT_FALSE(decoded.ok()) << "length " << length;
    EXPECT_EQ(decoded.message().rfind("cut.bin: truncated", 0), 0u) << decoded.message();
  }
}

TEST(PlanFile, WrongMagicIsAClearError) {
  std::vector<uint8_t> bytes = encodePlan(sampleTrainStep());
  bytes[0] = 'X';
  Expected<Plan> decoded = decodePlan(bytes, "x.bin");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.message(), "x.bin: not an ampjit plan (the file does not start with \"AMPJPLAN\")");
}

TEST(PlanFile, OtherVersionIsAClearError) {
  std::vector<uint8_t> bytes = encodePlan(sampleTrainStep());
  bytes[8] = 7; // before update_scale's max_scale
  Expected<Plan> decoded = decodePlan(bytes, "old.bin");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.message(), "old.bin: plan format version 7, but this runtime reads version 8; "
                               "recompile the step with this version of ampjit");
}

TEST(PlanFile, CorruptionFailsTheChecksum) {
  std::vector<uint8_t> bytes = encodePlan(sampleTrainStep());
  bytes[bytes.size() / 2] ^= 0x10;
  Expected<Plan> decoded = decodePlan(bytes, "bad.bin");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.message(), "bad.bin: checksum mismatch (the file is corrupted)");
}

TEST(PlanFile, TrailingBytesAreAnError) {
  std::vector<uint8_t> bytes = encodePlan(sampleTrainStep());
  bytes.push_back(0);
  Expected<Plan> decoded = decodePlan(bytes, "long.bin");
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.message().find("unexpected bytes after the checksum"), std::string::npos);
}

/// Re-seals a file after a deliberate edit, so that the checks past the
/// checksum are what reject it.
void reseal(std::vector<uint8_t>& bytes) {
  uint64_t checksum = planChecksum(std::span(bytes).first(bytes.size() - 8));
  for (int i = 0; i < 8; ++i)
    bytes[bytes.size() - 8 + i] = uint8_t(checksum >> (8 * i));
}

TEST(PlanFile, BadBufferIdNamesTheStepAndSlot) {
  Plan plan = sampleTrainStep();
  plan.steps[1].inputs[1] = 77;
  Expected<Plan> decoded = decodePlan(encodePlan(plan), "ids.bin");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.message(), "ids.bin: invalid plan: step 1 (gemm from jit.matmul): input 'B' refers to "
                               "buffer %77 but the plan has " +
                                   std::to_string(plan.buffers.size()) + " buffers");
}

TEST(PlanFile, MismatchedShapesNameTheOperands) {
  Plan plan = sampleTrainStep();
  plan.buffers[2].type.shape = {3, 9}; // w16: the gemm's B no longer matches x16
  plan.buffers[1].type.shape = {3, 9}; // keep the derived-from pair consistent
  Expected<Plan> decoded = decodePlan(encodePlan(plan), "shapes.bin");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.message(),
            "shapes.bin: invalid plan: step 1 (gemm from jit.matmul): contraction dimensions differ: "
            "input 'A' (f16[4x8]) has 8 columns but input 'B' (f16[3x9]) transposed has 9 rows");
}

TEST(PlanFile, InvalidEnumValueIsNamed) {
  Plan plan;
  plan.name = "p";
  plan.buffers.push_back(BufferDesc{.type = tt(DType::F32, {2}), .role = BufferRole::Input, .argument = 0});
  std::vector<uint8_t> bytes = encodePlan(plan);
  // The BUFS section starts after the header (24), the INFO section header
  // (16) and its payload (4-byte length, "p", 8-byte arena size, 4-byte
  // deferred step count, 4-byte side step count).
  size_t bufs = 24 + 16 + 4 + 1 + 8 + 4 + 4;
  size_t firstDType = bufs + 16 + 4;
  ASSERT_EQ(bytes[firstDType], uint8_t(DType::F32));
  bytes[firstDType] = 42;
  reseal(bytes);
  Expected<Plan> decoded = decodePlan(bytes, "enum.bin");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.message(), "enum.bin: section 'BUFS', buffer %0: invalid value 42 (expected 0..5)");
}

TEST(PlanFile, HugeCountsAreRefusedBeforeAllocating) {
  Plan plan;
  plan.name = "p";
  std::vector<uint8_t> bytes = encodePlan(plan);
  size_t sideStepCount = 24 + 16 + 4 + 1 + 8 + 4;
  size_t bufferCount = sideStepCount + 4 + 16;
  std::vector<uint8_t> sideSteps = bytes;
  for (int i = 0; i < 4; ++i) {
    bytes[bufferCount + i] = 0xFF;
    sideSteps[sideStepCount + i] = 0xFF;
  }
  reseal(bytes);
  reseal(sideSteps);
  Expected<Plan> decoded = decodePlan(bytes, "huge.bin");
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.message().find("section 'BUFS', claims 4294967295 buffers but only 0 bytes remain"),
            std::string::npos)
      << decoded.message();
  decoded = decodePlan(sideSteps, "huge.bin");
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.message().find("section 'INFO', claims 4294967295 side steps but only 0 bytes remain"),
            std::string::npos)
      << decoded.message();
}

TEST(PlanFile, RandomCorruptionNeverCrashes) {
  std::vector<uint8_t> original = encodePlan(sampleTrainStep());
  std::mt19937_64 rng(7);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> bytes = original;
    int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e)
      bytes[24 + rng() % (bytes.size() - 32)] = uint8_t(rng());
    reseal(bytes);
    Expected<Plan> decoded = decodePlan(bytes, "fuzz.bin");
    if (!decoded.ok()) {
      ++rejected;
      EXPECT_EQ(decoded.message().rfind("fuzz.bin: ", 0), 0u);
    } else {
      EXPECT_TRUE(verifyPlan(*decoded).ok());
    }
  }
  EXPECT_GT(rejected, 1000);
}

//===----------------------------------------------------------------------===//
// Verifier rules
//===----------------------------------------------------------------------===//

std::string verifyMessage(const Plan& plan) { return verifyPlan(plan).message(); }

TEST(PlanVerifier, ADeferredStepVerifiesPrintsAndRoundTrips) {
  Plan plan = deferredSgdStep().plan;
  EXPECT_EQ(verifyMessage(plan), "");
  std::string text = printPlan(plan);
  EXPECT_NE(text.find("deferred steps 0..0 (the previous run's update, done first)"), std::string::npos) << text;
  EXPECT_NE(text.find("= carried f32[4] \"grad\""), std::string::npos) << text;
  Expected<Plan> decoded = decodePlan(encodePlan(plan), "memory");
  ASSERT_TRUE(decoded.ok()) << decoded.message();
  EXPECT_TRUE(*decoded == plan);
}

TEST(PlanVerifier, DeferredStepDeadlinesAndArguments) {
  DeferredSgdStep parts = deferredSgdStep();
  // The update writes w, which the product (step 1) reads first.
  EXPECT_EQ(deferredStepDeadlines(parts.plan), std::vector<size_t>{1});
  EXPECT_EQ(deferredArguments(parts.plan), std::vector<size_t>{1});
  // Without that reader, the step rewriting the carried gradient is the first to wait.
  parts.plan.steps[1].inputs[0] = parts.x;
  EXPECT_EQ(deferredStepDeadlines(parts.plan), std::vector<size_t>{3});
}

TEST(PlanVerifier, DeferredStepsKeepToCarriedBuffersConstantsAndState) {
  {
    DeferredSgdStep parts = deferredSgdStep();
    parts.plan.steps[0].inputs[4] = parts.lr; // the lr of the run, not of the update's own run
    EXPECT_EQ(verifyMessage(parts.plan),
              "step 0 (optimizer_update from jit.sgd_update) is deferred to the next run but reads buffer %2 'lr', "
              "which is the next run's (a deferred step reads carried buffers, constants and state)");
  }
  {
    DeferredSgdStep parts = deferredSgdStep();
    parts.plan.steps.pop_back(); // nothing carries lr over any more
    EXPECT_EQ(verifyMessage(parts.plan), "buffer %4 'lr.deferred' is read by the deferred steps but written by no "
                                         "other step, so it would never hold a value");
  }
  {
    DeferredSgdStep parts = deferredSgdStep();
    parts.plan.deferredSteps = 0;
    EXPECT_EQ(verifyMessage(parts.plan), "buffer %3 'grad' is carried, but the plan defers no steps");
  }
  {
    DeferredSgdStep parts = deferredSgdStep();
    parts.plan.deferredSteps = 9;
    EXPECT_EQ(verifyMessage(parts.plan), "the plan defers 9 steps but has 5");
  }
  {
    // The rest of the run writing the state the update owns.
    DeferredSgdStep parts = deferredSgdStep();
    Step write = parts.plan.steps[4];
    write.inputs = {parts.lrCopy};
    write.outputs = {parts.w};
    write.kind = StepKind::BroadcastTo;
    write.params = NoParams{};
    parts.plan.steps.push_back(write);
    EXPECT_EQ(verifyMessage(parts.plan), "buffer %1 'w' is updated by the deferred steps and by the rest of the "
                                         "run; deferring would reorder the two writes");
  }
  {
    // After the deferred steps, a carried value must be written before it is read.
    DeferredSgdStep parts = deferredSgdStep();
    Step readEarly = parts.plan.steps[3]; // the cast x -> grad, now grad -> a new output
    readEarly.inputs = {parts.gradient};
    readEarly.outputs = {BufferId(parts.plan.buffers.size())};
    parts.plan.buffers.push_back(BufferDesc{.type = tt(DType::F32, {4}), .role = BufferRole::Output});
    parts.plan.results.push_back(PlanResult{readEarly.outputs[0], -1});
    parts.plan.steps.insert(parts.plan.steps.begin() + 1, readEarly);
    EXPECT_EQ(verifyMessage(parts.plan),
              "step 1 (elementwise from amp.cast): input 'x' reads buffer %3 'grad' before any step writes it");
  }
  {
    DeferredSgdStep parts = deferredSgdStep();
    parts.plan.results.push_back(PlanResult{parts.gradient, -1});
    EXPECT_EQ(verifyMessage(parts.plan), "result 2 is the carried buffer %3 'grad', which is not the run's to return");
  }
}

/// relu, then a side step (neg of the relu) beside exp and neg, joined
/// before the add that reads it: steps 0..4, the side step 1 joining before
/// step 4. Laid out by PlanBuilder, which knows nothing of side steps.
struct SideStepPlan {
  Plan plan;
  BufferId x, relu, negated, exp, abs, sum;
};
SideStepPlan sideStepPlan() {
  PlanBuilder b("side");
  SideStepPlan p;
  p.x = b.argument(tt(DType::F32, {16}), BufferRole::Input, "x");
  p.relu = b.temporary(tt(DType::F32, {16}));
  p.negated = b.temporary(tt(DType::F32, {16}));
  p.exp = b.temporary(tt(DType::F32, {16}));
  p.abs = b.temporary(tt(DType::F32, {16}));
  p.sum = b.output(tt(DType::F32, {16}));
  b.op("jit.relu", {p.x}, {p.relu});
  b.op("jit.neg", {p.relu}, {p.negated});
  b.op("jit.exp", {p.relu}, {p.exp});
  b.op("jit.neg", {p.exp}, {p.abs});
  b.op("jit.add", {p.abs, p.negated}, {p.sum});
  b.result(p.sum);
  p.plan = b.finish();
  p.plan.sideSteps = {{1, 4}};
  return p;
}

TEST(PlanVerifier, ASideStepsBuffersHoldTheirBytesUntilItJoins) {
  SideStepPlan p = sideStepPlan();
  // In line, abs may take the relu's bytes (its last reader, exp, is done);
  // beside the side step, which may still be reading them, it may not.
  ASSERT_EQ(p.plan.buffers[p.abs].arenaOffset, p.plan.buffers[p.relu].arenaOffset);
  EXPECT_EQ(verifyMessage(p.plan),
            "buffer %1 (steps 0..3) and buffer %4 (steps 3..4) share arena bytes while both are live");
  p.plan.sideSteps.clear();
  EXPECT_EQ(verifyMessage(p.plan), "");
}

TEST(PlanVerifier, ASideStepVerifiesPrintsAndRoundTrips) {
  SideStepPlan p = sideStepPlan();
  p.plan.buffers[p.abs].arenaOffset = p.plan.arenaBytes;
  p.plan.arenaBytes += 64;
  ASSERT_EQ(verifyMessage(p.plan), "");
  std::string text = printPlan(p.plan);
  EXPECT_NE(text.find("\n  side steps: 1 joins before 4\n"), std::string::npos) << text;
  Expected<Plan> decoded = decodePlan(encodePlan(p.plan), "memory");
  ASSERT_TRUE(decoded.ok()) << decoded.message();
  EXPECT_TRUE(*decoded == p.plan);
  // A side step that joins at the end of the run, after one it reads.
  p.plan.sideSteps = {{1, 4}, {4, 5}};
  EXPECT_EQ(verifyMessage(p.plan), "");
}

TEST(PlanVerifier, SideStepRules) {
  SideStepPlan p = sideStepPlan();
  p.plan.buffers[p.abs].arenaOffset = p.plan.arenaBytes;
  p.plan.arenaBytes += 64;
  auto withSideSteps = [&](std::vector<SideStep> sideSteps) {
    Plan plan = p.plan;
    plan.sideSteps = std::move(sideSteps);
    return verifyMessage(plan);
  };
  EXPECT_EQ(withSideSteps({{1, 5}}), "step 4 (elementwise from jit.add) reads buffer %2 before step 1 (elementwise "
                                     "from jit.neg), a side step, joins at step 5 (it writes that buffer)");
  EXPECT_EQ(withSideSteps({{1, 1}}), "side step 0 (step 1) joins before step 1, which is not after it and at most "
                                     "the plan's 5 steps");
  EXPECT_EQ(withSideSteps({{2, 6}}), "side step 0 (step 2) joins before step 6, which is not after it and at most "
                                     "the plan's 5 steps");
  EXPECT_EQ(withSideSteps({{5, 6}}), "side step 0 (step 5) is past the plan's 5 steps");
  EXPECT_EQ(withSideSteps({{2, 4}, {1, 4}}), "side step 1 (step 1) does not follow side step 0 (step 2): side "
                                             "steps are in step order");
  // Two side steps on one lane: exp reads the relu it follows, and abs runs
  // in line after both.
  EXPECT_EQ(withSideSteps({{1, 4}, {2, 3}}), "");
  // A step in between that rewrites what the side step reads, in place.
  Plan inPlace = p.plan;
  inPlace.steps[3].inputs = {p.relu};
  inPlace.steps[3].outputs = {p.relu};
  inPlace.steps[4].inputs = {p.relu, p.negated};
  inPlace.sideSteps = {{1, 4}};
  EXPECT_EQ(verifyMessage(inPlace), "step 3 (elementwise from jit.neg) writes buffer %1 before step 1 (elementwise "
                                    "from jit.neg), a side step, joins at step 4 (it reads or writes that buffer)");
  Plan deferred = deferredSgdStep().plan;
  deferred.sideSteps = {{0, 1}};
  EXPECT_EQ(verifyMessage(deferred), "side step 0 (step 0) is one of the deferred steps, which have a lane of their "
                                     "own");
}

TEST(PlanVerifier, WritingAnInputIsRejected) {
  PlanBuilder b("p");
  BufferId x = b.argument(tt(DType::F32, {4}), BufferRole::Input);
  b.op("jit.relu", {x}, {x});
  b.result(x);
  EXPECT_EQ(verifyMessage(b.finish()),
            "step 0 (elementwise from jit.relu): output 'out' writes buffer %0, which is an input and read-only");
}

TEST(PlanVerifier, WritingUntiedStateIsRejected) {
  PlanBuilder b("p");
  BufferId w = b.argument(tt(DType::F32, {4}), BufferRole::Param);
  b.op("jit.relu", {w}, {w});
  EXPECT_EQ(verifyMessage(b.finish()),
            "step 0 (elementwise from jit.relu): output 'out' writes argument 0 (buffer %0) but no result is "
            "tied to it");
}

TEST(PlanVerifier, ReadingBeforeWritingIsRejected) {
  PlanBuilder b("p");
  BufferId t = b.temporary(tt(DType::F32, {4}));
  BufferId out = b.output(tt(DType::F32, {4}));
  b.op("jit.relu", {t}, {out});
  b.result(out);
  EXPECT_EQ(verifyMessage(b.finish()),
            "step 0 (elementwise from jit.relu): input 'x' reads buffer %0 before any step writes it");
}

TEST(PlanVerifier, EveryOutputSlotIsRequired) {
  // Rank-0 statistics of an axis-0 layer norm have the default type, so
  // without this rule an absent mean or rstd would pass the type checks and
  // a kernel would write through a null pointer.
  PlanBuilder b("p");
  BufferId x = b.argument(tt(DType::F32, {4}), BufferRole::Input);
  BufferId y = b.output(tt(DType::F32, {4}));
  BufferId mean = b.output(tt(DType::F32, {})), rstd = b.output(tt(DType::F32, {}));
  b.op("jit.layer_norm", {x, kNoBuffer, kNoBuffer}, {y, mean, rstd}, {{"axis", int64_t(0)}, {"eps", 1e-5}});
  b.result(y);
  Plan plan = b.finish();
  EXPECT_EQ(verifyMessage(plan), "");
  plan.steps[0].outputs[1] = kNoBuffer;
  EXPECT_EQ(verifyMessage(plan), "step 0 (layer_norm from jit.layer_norm): output 'mean' is required but absent");
}

TEST(PlanVerifier, BatchNormWithoutChannelsIsAnErrorNotACrash) {
  PlanBuilder b("p");
  BufferId x = b.argument(tt(DType::F32, {4, 0}), BufferRole::Input);
  BufferId mean = b.argument(tt(DType::F32, {0}), BufferRole::Hyper);
  BufferId variance = b.argument(tt(DType::F32, {0}), BufferRole::Hyper);
  BufferId y = b.output(tt(DType::F32, {4, 0}));
  std::vector<BufferId> statistics;
  for (int i = 0; i < 4; ++i)
    statistics.push_back(b.output(tt(DType::F32, {0})));
  Step step;
  step.kind = StepKind::BatchNorm;
  step.params = BatchNormParams{};
  step.inputs = {x, kNoBuffer, kNoBuffer, mean, variance};
  step.outputs = {y, statistics[0], statistics[1], statistics[2], statistics[3]};
  b.step(step);
  b.result(y);
  EXPECT_EQ(verifyMessage(b.finish()), "step 0 (batch_norm): input 'x' (f32[4x0]) has no channels (dimension 1 is 0)");
}

TEST(PlanVerifier, GemmEpilogueBiasIsOneValuePerColumnInCsDtype) {
  auto plan = [](TensorType biasType, bool withBias) {
    PlanBuilder b("p");
    BufferId a = b.argument(tt(DType::F16, {4, 8}), BufferRole::Input);
    BufferId w = b.argument(tt(DType::F16, {8, 3}), BufferRole::Param);
    BufferId bias = b.argument(biasType, BufferRole::Param);
    BufferId c = b.output(tt(DType::F16, {4, 3}));
    b.op("jit.matmul", {a, w}, {c});
    b.result(c);
    Plan built = b.finish();
    built.steps[0].as<GemmParams>().epilogue = GemmEpilogue::BiasRelu;
    if (withBias)
      built.steps[0].inputs.push_back(bias);
    return built;
  };
  EXPECT_EQ(verifyMessage(plan(tt(DType::F16, {3}), true)), "");
  EXPECT_EQ(verifyMessage(plan(tt(DType::F32, {3}), true)),
            "step 0 (gemm from jit.matmul): input 'bias' (f32[3]) must be f16[3] (one value per column of C, in "
            "C's dtype)");
  EXPECT_NE(verifyMessage(plan(tt(DType::F16, {3}), false)).find("needs 3 and 1"), std::string::npos)
      << verifyMessage(plan(tt(DType::F16, {3}), false));
}

TEST(PlanVerifier, InPlaceOnlyForElementwiseKinds) {
  PlanBuilder b("p");
  BufferId w = b.argument(tt(DType::F32, {4, 4}), BufferRole::Param);
  b.op("jit.softmax", {w}, {w}, {{"axis", int64_t(1)}});
  b.result(w, 0);
  EXPECT_NE(verifyMessage(b.finish()).find("which it also reads; only elementwise, optimizer and scaler steps, "
                                           "batch norm's running statistics and a convolution's input gradient "
                                           "added to its 'accumulate' input update in place"),
            std::string::npos);
}

TEST(PlanVerifier, AConvolutionsInputGradientAddsToItsAccumulateInputInPlace) {
  // dx = conv2d_grad_input(dy, w) + z, written over z (cuDNN's beta = 1).
  PlanBuilder b("p");
  BufferId dy = b.argument(tt(DType::F16, {1, 2, 4, 4}), BufferRole::Input, "dy");
  BufferId w = b.argument(tt(DType::F16, {2, 3, 3, 3}), BufferRole::Input, "w");
  BufferId x = b.argument(tt(DType::F16, {1, 3, 4, 4}), BufferRole::Input, "x");
  BufferId z = b.output(tt(DType::F16, {1, 3, 4, 4}));
  b.op("jit.neg", {x}, {z});
  AttributeMap conv{{"stride", std::vector<int64_t>{1, 1}},
                    {"padding", std::vector<int64_t>{1, 1}},
                    {"dilation", std::vector<int64_t>{1, 1}}};
  b.op("jit.conv2d_grad_input", {dy, w}, {z}, conv);
  b.result(z);
  Plan plan = b.finish();
  plan.steps[1].inputs.push_back(z);
  EXPECT_EQ(verifyMessage(plan), "");
  EXPECT_NE(printPlan(plan).find("conv2d_grad_input stride=[1, 1] padding=[1, 1] dilation=[1, 1] groups=1 f16, f16, "
                                 "f16 -> f16 (compute f32) dy=%0 weight=%1 accumulate=%3 dx=%3"),
            std::string::npos)
      << printPlan(plan);
  Expected<Plan> decoded = decodePlan(encodePlan(plan), "memory");
  ASSERT_TRUE(decoded.ok()) << decoded.message();
  EXPECT_TRUE(*decoded == plan);

  Plan elsewhere = plan;
  BufferId other = BufferId(elsewhere.buffers.size());
  elsewhere.buffers.push_back(elsewhere.buffers[z]);
  elsewhere.steps[1].outputs = {other};
  elsewhere.results.push_back(PlanResult{other, -1});
  EXPECT_EQ(verifyMessage(elsewhere), "step 1 (conv2d_grad_input from jit.conv2d_grad_input): output 'dx' must be "
                                      "input 'accumulate' (buffer %3), which it adds to in place, but is buffer %4");
  Plan mistyped = plan;
  mistyped.steps[1].inputs[2] = x;
  mistyped.steps[1].outputs = {x};
  EXPECT_NE(verifyMessage(mistyped).find("writes buffer %2"), std::string::npos) << verifyMessage(mistyped);
  Plan wrongShape = plan;
  BufferId small = BufferId(wrongShape.buffers.size());
  wrongShape.buffers.push_back(BufferDesc{.type = tt(DType::F16, {1, 3, 2, 2}), .role = BufferRole::Constant,
                                          .constantData = std::vector<uint8_t>(24, 0)});
  wrongShape.steps[1].inputs[2] = small;
  EXPECT_EQ(verifyMessage(wrongShape), "step 1 (conv2d_grad_input from jit.conv2d_grad_input): input 'accumulate' "
                                       "(f16[1x3x2x2]) must be f16[1x3x4x4], the gradient it adds to");
  // A plan file's window parameters are held to what cuDNN's int takes, so
  // the size arithmetic cannot overflow.
  Plan hugeDilation = plan;
  hugeDilation.steps[1].as<Conv2dParams>().dilation = {1, int64_t(1) << 62};
  EXPECT_EQ(verifyMessage(hugeDilation), "step 1 (conv2d_grad_input from jit.conv2d_grad_input): dilation entries "
                                         "must be in [1, 2147483647], got [1x4611686018427387904]");
}

TEST(PlanVerifier, LiveTemporariesMustNotShareArenaBytes) {
  PlanBuilder b("p");
  BufferId x = b.argument(tt(DType::F32, {16}), BufferRole::Input);
  BufferId t1 = b.temporary(tt(DType::F32, {16}));
  BufferId t2 = b.temporary(tt(DType::F32, {16}));
  BufferId out = b.output(tt(DType::F32, {16}));
  b.op("jit.relu", {x}, {t1});
  b.op("jit.neg", {x}, {t2});
  b.op("jit.add", {t1, t2}, {out});
  b.result(out);
  Plan plan = b.finish();
  ASSERT_TRUE(verifyPlan(plan).ok()) << verifyMessage(plan);
  plan.buffers[t2].arenaOffset = plan.buffers[t1].arenaOffset;
  EXPECT_EQ(verifyMessage(plan),
            "buffer %1 (steps 0..2) and buffer %2 (steps 1..2) share arena bytes while both are live");
}

TEST(PlanVerifier, AReshapeMayViewItsInputsBytes) {
  ViewPlan v = reshapeViewPlan();
  EXPECT_TRUE(verifyPlan(v.plan).ok()) << verifyMessage(v.plan);
  std::vector<BufferId> roots = arenaViewRoots(v.plan);
  EXPECT_EQ(roots[v.view], v.t);
  EXPECT_EQ(roots[v.t], v.t);
  // Not when another step rewrites the bytes the view shares.
  Plan rewritten = v.plan;
  Step again = rewritten.steps[0];
  again.inputs = {v.t};
  rewritten.steps.insert(rewritten.steps.begin() + 1, again);
  EXPECT_EQ(verifyMessage(rewritten), "buffer %2 is a reshape's view of the arena bytes of buffer %1, but buffer %1 "
                                      "is written by 2 steps");
  // Nor is an elementwise step's output at its input's bytes a view.
  Plan notAView = v.plan;
  notAView.steps[2].outputs = {v.t};
  notAView.steps[2].inputs = {v.view};
  notAView.buffers[v.t].type = tt(DType::F32, {2, 3});
  EXPECT_NE(verifyMessage(notAView), "");
}

TEST(PlanVerifier, AReshapeMayViewAnArgumentsMemory) {
  // w -> reshape -> view (of w's memory) -> neg -> out, then an update of w.
  PlanBuilder b("p");
  BufferId w = b.argument(tt(DType::F32, {2, 3}), BufferRole::Param);
  BufferId g = b.argument(tt(DType::F32, {2, 3}), BufferRole::Input);
  BufferId lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper);
  BufferId view = b.temporary(tt(DType::F32, {6}));
  BufferId out = b.output(tt(DType::F32, {6}));
  b.op("jit.reshape", {w}, {view});
  b.op("jit.neg", {view}, {out});
  b.op("jit.sgd_update", {w, g, kNoBuffer, kNoBuffer, lr, kNoBuffer, kNoBuffer, kNoBuffer}, {w});
  b.result(out);
  b.result(w, 0);
  Plan plan = b.finish();
  plan.buffers[view].viewOf = int32_t(w);
  ASSERT_TRUE(verifyPlan(plan).ok()) << verifyMessage(plan);
  EXPECT_EQ(arenaViewRoots(plan)[view], w);
  EXPECT_NE(printPlan(plan).find("%3 = temporary f32[6] view of %0"), std::string::npos) << printPlan(plan);
  Expected<Plan> decoded = decodePlan(encodePlan(plan), "in-memory");
  ASSERT_TRUE(decoded.ok()) << decoded.message();
  EXPECT_EQ(*decoded, plan);

  // Not while a step writes w: the update before the view's last reader.
  Plan late = plan;
  std::swap(late.steps[1], late.steps[2]);
  EXPECT_EQ(verifyMessage(late), "step 1 (optimizer_update from jit.sgd_update) writes buffer %0 while buffer %3, a "
                                 "view of it, is live");
  // Only a temporary views, and only an argument, constant or carried buffer.
  Plan notTemporary = plan;
  notTemporary.buffers[out].viewOf = int32_t(w);
  EXPECT_EQ(verifyMessage(notTemporary),
            "buffer %4 is a view of buffer %0, but only a temporary can view another buffer that exists");
  Plan ofOutput = plan;
  ofOutput.buffers[view].viewOf = int32_t(out);
  EXPECT_EQ(verifyMessage(ofOutput),
            "buffer %3 is a view of buffer %4, which is not an argument, constant or carried buffer of its size");
  // Nor is a view anything but the output of a reshape of what it views.
  Plan written = plan;
  written.steps[0].inputs = {g};
  EXPECT_EQ(verifyMessage(written), "buffer %3 is a view of buffer %0 but is not the output of one reshape step of it");
}

TEST(PlanVerifier, TemporaryOutsideTheArena) {
  PlanBuilder b("p");
  BufferId x = b.argument(tt(DType::F32, {16}), BufferRole::Input);
  BufferId t = b.temporary(tt(DType::F32, {16}));
  BufferId out = b.output(tt(DType::F32, {16}));
  b.op("jit.relu", {x}, {t});
  b.op("jit.relu", {t}, {out});
  b.result(out);
  Plan plan = b.finish();
  plan.arenaBytes = 32;
  EXPECT_EQ(verifyMessage(plan), "buffer %1 (64 bytes at offset 0) does not fit in the arena of 32 bytes");
  plan.arenaBytes = 1024;
  plan.buffers[t].arenaOffset = 8;
  EXPECT_EQ(verifyMessage(plan), "buffer %1 has arena offset 8, not a multiple of 64");
}

TEST(PlanVerifier, TiesAndResults) {
  PlanBuilder b("p");
  BufferId x = b.argument(tt(DType::F32, {4}), BufferRole::Input);
  BufferId w = b.argument(tt(DType::F32, {4}), BufferRole::Param);
  BufferId t = b.temporary(tt(DType::F32, {4}));
  b.op("jit.relu", {x}, {t});
  b.op("jit.add", {w, t}, {w});
  b.result(w, 1);
  Plan plan = b.finish();
  ASSERT_TRUE(verifyPlan(plan).ok()) << verifyMessage(plan);

  Plan tiedToInput = plan;
  tiedToInput.results[0] = PlanResult{x, 0};
  EXPECT_EQ(verifyMessage(tiedToInput), "result 0 is tied to argument 0, which is an input, not state");
  Plan wrongBuffer = plan;
  wrongBuffer.results[0] = PlanResult{t, 1};
  EXPECT_NE(verifyMessage(wrongBuffer).find("is the temporary buffer %2"), std::string::npos);
  Plan twice = plan;
  twice.results.push_back(PlanResult{w, 1});
  EXPECT_EQ(verifyMessage(twice), "result 1 ties argument 1, which another result already ties");
  Plan gap = plan;
  gap.buffers[w].argument = 2;
  EXPECT_EQ(verifyMessage(gap), "no buffer is argument 1 (arguments are numbered from 0 without gaps)");
}

TEST(PlanVerifier, DerivedStateMustMatchItsSource) {
  PlanBuilder b("p");
  b.argument(tt(DType::F32, {4}), BufferRole::Param);
  BufferId copy = b.argument(tt(DType::F16, {5}), BufferRole::Param);
  b.raw().buffers[copy].derivedFrom = 0;
  EXPECT_EQ(verifyMessage(b.finish()),
            "buffer %1 of type f16[5] cannot be derived from argument 0 of type f32[4]: both must be "
            "floating-point of one shape");
}

TEST(PlanVerifier, ConstantDataSizeIsChecked) {
  PlanBuilder b("p");
  BufferId c = b.constant(tt(DType::F32, {2}), std::vector<double>{1, 2});
  b.raw().buffers[c].constantData.pop_back();
  EXPECT_EQ(verifyMessage(b.finish()),
            "buffer %0 is a constant of type f32[2] (8 bytes) but holds 7 bytes of data");
}

TEST(PlanVerifier, FusedProgramRules) {
  Plan plan = sampleTrainStep();
  size_t fusedIndex = 3;
  ASSERT_EQ(plan.steps[fusedIndex].kind, StepKind::FusedElementwise);
  auto message = [&](auto edit) {
    Plan copy = plan;
    edit(copy.steps[fusedIndex].template as<FusedElementwiseParams>());
    return verifyMessage(copy);
  };
  EXPECT_NE(message([](FusedElementwiseParams& p) { p.program[2].operands[1] = 5; })
                .find("instruction r2 (add) reads r5, which is not defined before it"),
            std::string::npos);
  EXPECT_NE(message([](FusedElementwiseParams& p) { p.program[1].operands[0] = 9; })
                .find("instruction r1 (load) loads input slot 9 but the step has 2 inputs"),
            std::string::npos);
  EXPECT_NE(message([](FusedElementwiseParams& p) { p.program[2].type = DType::F32; })
                .find("instruction r2 (add): 'add' yields its operands' dtype f16, not f32"),
            std::string::npos);
  EXPECT_NE(message([](FusedElementwiseParams& p) { p.outputs[1] = 3; })
                .find("output 'out1' (f32[4x3]) stores r3 of dtype f16"),
            std::string::npos);
}

TEST(PlanVerifier, ComputeTypeIsChecked) {
  Plan plan = sampleTrainStep();
  plan.steps[1].computeType = DType::F16;
  EXPECT_NE(verifyMessage(plan).find("compute type is f16 but must be f32"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// StepBuilder
//===----------------------------------------------------------------------===//

std::vector<std::optional<TensorType>> operands(std::initializer_list<std::optional<TensorType>> list) {
  return list;
}

TEST(StepBuilder, UnknownOpIsAClearError) {
  Expected<Step> step = buildStep("jit.conv9d", {}, {}, {});
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.message(), "'jit.conv9d' has no runtime step: the StepBuilder does not know this op");
}

TEST(StepBuilder, UnknownAndMissingAttributes) {
  TensorType x = tt(DType::F32, {4, 4});
  auto in = operands({x});
  std::vector<TensorType> out = {x};
  Expected<Step> typo = buildStep("jit.softmax", in, out, {{"axis", int64_t(1)}, {"axes", int64_t(1)}});
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.message(), "jit.softmax: unknown attribute 'axes'");
  Expected<Step> missing = buildStep("jit.softmax", in, out, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.message(), "jit.softmax: missing required attribute 'axis'");
  Expected<Step> discardable = buildStep("jit.softmax", in, out, {{"axis", int64_t(1)}, {"jit.op_id", int64_t(3)}});
  EXPECT_TRUE(discardable.ok()) << discardable.message();
  Expected<Step> keyword = buildStep("jit.gelu", in, out, {{"approximate", std::string("erf")}});
  ASSERT_FALSE(keyword.ok());
  EXPECT_EQ(keyword.message(), "jit.gelu: attribute 'approximate' is 'erf'; expected one of none, tanh");
}

TEST(StepBuilder, UnsupportedCombinationsAreClearErrors) {
  Expected<Step> matmul = buildStep("jit.matmul", operands({tt(DType::F16, {4, 8}), tt(DType::F16, {7, 3})}),
                                    std::vector<TensorType>{tt(DType::F16, {4, 3})}, {});
  ASSERT_FALSE(matmul.ok());
  EXPECT_EQ(matmul.message(), "jit.matmul: contraction dimensions differ: input 'A' (f16[4x8]) has 8 columns but "
                              "input 'B' (f16[7x3]) has 7 rows");
  Expected<Step> mixed = buildStep("jit.add", operands({tt(DType::F16, {4}), tt(DType::F32, {4})}),
                                   std::vector<TensorType>{tt(DType::F32, {4})}, {});
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.message(), "jit.add: 'add' needs operands of one dtype, got (f16, f32); convert first");
  Expected<Step> intCast = buildStep("amp.cast", operands({tt(DType::I64, {4})}),
                                     std::vector<TensorType>{tt(DType::F32, {4})}, {});
  ASSERT_FALSE(intCast.ok());
  EXPECT_NE(intCast.message().find("floating-point types only"), std::string::npos);
  Expected<Step> sgd = buildStep("jit.sgd_update", operands({tt(DType::F32, {4})}), {}, {});
  ASSERT_FALSE(sgd.ok());
  EXPECT_NE(sgd.message().find("expects 8 operand positions"), std::string::npos);
}

TEST(StepBuilder, OptimizerResultsFollowTheOptionalState) {
  TensorType p = tt(DType::F32, {8}), g = tt(DType::F16, {8}), copy = tt(DType::F16, {8});
  TensorType f32 = tt(DType::F32, {}), flag = tt(DType::I1, {});
  // No momentum buffer, but a param copy: results are [new_param, new_param_copy].
  Expected<Step> step = buildStep("jit.sgd_update",
                                  operands({p, g, std::nullopt, std::nullopt, f32, f32, flag, copy}),
                                  std::vector<TensorType>{p, copy}, {});
  ASSERT_TRUE(step.ok()) << step.message();
  EXPECT_EQ(step->outputs, (std::vector<BufferId>{0, kNoBuffer, 1}));
  EXPECT_EQ(step->inputs[sgd_slot::kMomentumBuffer], kNoBuffer);
  Expected<Step> wrong = buildStep("jit.sgd_update",
                                   operands({p, g, std::nullopt, std::nullopt, f32, f32, flag, copy}),
                                   std::vector<TensorType>{p}, {});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("has 1 results but its state operands need 2"), std::string::npos);
}

TEST(StepBuilder, AGradientMayHaveAnyShapeOfItsParametersElementCount) {
  // A 1x1 convolution's NHWC weight gradient updates its KCRS parameter.
  TensorType p = tt(DType::F32, {8, 4, 1, 1}), f32 = tt(DType::F32, {});
  for (Shape grad : {Shape{8, 1, 1, 4}, Shape{32}, Shape{8, 4, 1, 2}}) {
    Expected<Step> step =
        buildStep("jit.sgd_update", operands({p, tt(DType::F16, grad), std::nullopt, std::nullopt, f32, std::nullopt,
                                              std::nullopt, std::nullopt}),
                  std::vector<TensorType>{p}, {});
    if (grad != Shape{8, 4, 1, 2}) {
      EXPECT_TRUE(step.ok()) << step.message();
      continue;
    }
    ASSERT_FALSE(step.ok());
    EXPECT_EQ(step.message(), "jit.sgd_update: input 'grad' (f16[8x4x1x2]) must have the element count of input "
                              "'param' (f32[8x4x1x1])");
  }
}

TEST(StepBuilder, EveryOpMapsToOneKindOnce) {
  std::set<std::string_view> seen;
  for (const OpDescription& op : supportedOps()) {
    EXPECT_TRUE(seen.insert(op.name).second) << op.name;
    EXPECT_EQ(stepKindOf(op.name), op.kind);
  }
  // Every op of JitOps.td (55) and AmpOps.td (5).
  EXPECT_EQ(seen.size(), 60u);
}

TEST(PlanFile, EmbeddingAndAmsgradStepsRoundTripAndPrintTheirSlots) {
  // The step kinds and slots of format version 6.
  Expected<Plan> gradient = buildSingleOpPlan(
      "jit.embedding_grad", operands({tt(DType::F32, {6, 4}), tt(DType::I64, {6})}),
      std::vector<TensorType>{tt(DType::F32, {10, 4})}, {{"num_weights", int64_t(10)}, {"padding_idx", int64_t(3)}});
  TensorType p = tt(DType::F32, {8});
  Expected<Plan> amsgrad = buildSingleOpPlan(
      "jit.adam_update",
      operands({p, p, p, p, p, tt(DType::I64, {}), tt(DType::F32, {}), std::nullopt, std::nullopt, std::nullopt}),
      std::vector<TensorType>{p, p, p, p}, {});
  for (Expected<Plan>* plan : {&gradient, &amsgrad}) {
    ASSERT_TRUE(plan->ok()) << plan->message();
    std::vector<uint8_t> bytes = encodePlan(**plan);
    Expected<Plan> decoded = decodePlan(bytes, "memory");
    ASSERT_TRUE(decoded.ok()) << decoded.message();
    EXPECT_TRUE(*decoded == **plan);
  }
  std::string text = printPlan(*gradient);
  EXPECT_NE(text.find("embedding_grad padding_idx=3 f32, i64 -> f32 (compute f32) dy=%0 indices=%1 dweight=%2"),
            std::string::npos)
      << text;
  text = printPlan(*amsgrad);
  EXPECT_NE(text.find("exp_avg_sq=%3 max_exp_avg_sq=%4 step=%5 lr=%6"), std::string::npos) << text;
  EXPECT_NE(text.find("new_max_exp_avg_sq=%10"), std::string::npos) << text;
}

TEST(StepBuilder, SingleOpPlanForEagerExecution) {
  Expected<Plan> plan = buildSingleOpPlan("jit.add", operands({tt(DType::F32, {2, 3}), tt(DType::F32, {3})}),
                                          std::vector<TensorType>{tt(DType::F32, {2, 3})}, {});
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(printPlan(*plan), "plan @jit.add\n"
                              "  arena 0 bytes\n"
                              "  %0 = arg 0 input f32[2x3]\n"
                              "  %1 = arg 1 input f32[3]\n"
                              "  %2 = output f32[2x3]\n"
                              "  return %2\n"
                              "  step 0: elementwise add f32, f32 -> f32 (compute f32) lhs=%0 rhs=%1 out=%2  "
                              "// jit.add\n");
}

} // namespace
