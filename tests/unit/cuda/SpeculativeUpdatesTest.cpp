//===- SpeculativeUpdatesTest.cpp - which updates may run before the check ===//
//
// Which optimizer updates the CUDA backend runs speculatively, after which
// step, and what it hoists for them: a plan question, tested here without a
// GPU (the runs are tests/gpu's SpeculativeUpdates* tests).
//
//===----------------------------------------------------------------------===//

#include "cuda/SpeculativeUpdates.h"

#include "RuntimeTestUtil.h"

#include <gtest/gtest.h>

namespace ampjit::runtime {
namespace {

using test::PlanBuilder;
using test::ScaledTwoLayerStep;
using test::scaledTwoLayerStep;
using test::tt;

TEST(SpeculativeUpdates, EachUpdateIsReadyAfterItsGradientAndInvScaleRunsFirst) {
  ScaledTwoLayerStep parts = scaledTwoLayerStep(8, 16);
  std::string whyNot;
  std::optional<cuda::SpeculationSchedule> schedule = cuda::scheduleSpeculativeUpdates(parts.plan, 1, &whyNot);
  ASSERT_TRUE(schedule.has_value()) << whyNot;
  ASSERT_EQ(schedule->updates.size(), 2u);
  const cuda::SpeculativeUpdate &w0 = schedule->updates[0], &w1 = schedule->updates[1];
  EXPECT_EQ(w0.step, parts.w0Update);
  EXPECT_EQ(w0.readyAfter, parts.gw0Step);
  EXPECT_EQ(w0.predicateWriter, parts.checkStep);
  EXPECT_EQ(w0.rewritten, (std::vector<BufferId>{parts.w0, kNoBuffer, parts.w0Copy}));
  EXPECT_EQ(w1.step, parts.w1Update);
  EXPECT_EQ(w1.readyAfter, parts.gw1Step) << "w1's gradient is final two GEMMs before the check";
  EXPECT_EQ(w1.predicateWriter, parts.checkStep);
  EXPECT_EQ(w1.rewritten, (std::vector<BufferId>{parts.w1, parts.momentum, kNoBuffer}));
  // 1 / scale reads state no step writes before it: it runs first, so the
  // updates need not wait for the check it stands behind.
  EXPECT_EQ(schedule->hoisted, std::vector<std::size_t>{parts.inverseStep});
}

TEST(SpeculativeUpdates, SmallUpdatesAreNotWorthTheirSecondBuffers) {
  ScaledTwoLayerStep parts = scaledTwoLayerStep(8, 16);
  std::string whyNot;
  EXPECT_FALSE(cuda::scheduleSpeculativeUpdates(parts.plan, 2 * 16 * 16 + 1, &whyNot).has_value());
  EXPECT_EQ(whyNot, "its speculative updates would cover 512 parameter elements, under the 513 that pay");
  EXPECT_TRUE(cuda::scheduleSpeculativeUpdates(parts.plan, 2 * 16 * 16).has_value());
  EXPECT_FALSE(cuda::scheduleSpeculativeUpdates(parts.plan, cuda::kMinSpeculativeUpdateElements).has_value());
}

TEST(SpeculativeUpdates, AStepReadingTheNewStateKeepsItsUpdateInLine) {
  // A step after the update that reads w1 must see the new value, which
  // only the hand-over at the end of the run would give it.
  ScaledTwoLayerStep parts = scaledTwoLayerStep(8, 16);
  Plan plan = parts.plan;
  std::size_t readsW1 = plan.steps.size();
  BufferDesc out;
  out.type = plan.buffers[parts.w1].type;
  out.role = BufferRole::Output;
  plan.buffers.push_back(out);
  Step copy;
  copy.kind = StepKind::Elementwise;
  copy.params = ElementwiseParams{.op = ElementwiseOp::Convert};
  copy.computeType = DType::F32;
  copy.inputs = {parts.w1};
  copy.outputs = {BufferId(plan.buffers.size() - 1)};
  copy.origin = "jit.convert";
  plan.steps.push_back(copy);
  plan.results.push_back(PlanResult{BufferId(plan.buffers.size() - 1), -1});
  ASSERT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).message();
  std::string whyNot;
  std::optional<cuda::SpeculationSchedule> schedule = cuda::scheduleSpeculativeUpdates(plan, 1, &whyNot);
  ASSERT_TRUE(schedule.has_value()) << whyNot;
  ASSERT_EQ(schedule->updates.size(), 1u) << "w0's update still qualifies";
  EXPECT_EQ(schedule->updates[0].step, parts.w0Update);
  EXPECT_FALSE(cuda::scheduleSpeculativeUpdates(plan, 2 * 16 * 16, &whyNot).has_value());
  EXPECT_EQ(whyNot, "its speculative updates would cover 256 parameter elements, under the 512 that pay");
  // With w0's update unpredicated, the reason given is w1's.
  plan.steps[parts.w0Update].inputs[sgd_slot::kPredicate] = kNoBuffer;
  EXPECT_FALSE(cuda::scheduleSpeculativeUpdates(plan, 1, &whyNot).has_value());
  EXPECT_EQ(whyNot, describeStep(plan, parts.w1Update) + " rewrites state that " + describeStep(plan, readsW1) +
                        " reads after it");
}

TEST(SpeculativeUpdates, AnUnpredicatedOrDeferredUpdateIsNotSpeculated) {
  ScaledTwoLayerStep parts = scaledTwoLayerStep(8, 16);
  Plan plan = parts.plan;
  for (std::size_t update : {parts.w0Update, parts.w1Update})
    plan.steps[update].inputs[sgd_slot::kPredicate] = kNoBuffer;
  std::string whyNot;
  EXPECT_FALSE(cuda::scheduleSpeculativeUpdates(plan, 1, &whyNot).has_value());
  EXPECT_EQ(whyNot, describeStep(plan, parts.w1Update) + " is not predicated on a finiteness check");

  test::DeferredSgdStep deferred = test::deferredSgdStep();
  EXPECT_FALSE(cuda::scheduleSpeculativeUpdates(deferred.plan, 1, &whyNot).has_value());
  EXPECT_EQ(whyNot, "its update is deferred to the next run");
}

TEST(SpeculativeUpdates, AnUpdateWhoseGradientIsWrittenAfterItsCheckGainsNothing) {
  // The check reading a gradient passed in, and the update reading one an
  // elementwise step writes after the check, too large to hoist: it could
  // start no earlier.
  PlanBuilder b("late_gradient");
  BufferId w = b.argument(tt(DType::F32, {128}), BufferRole::Param, "w");
  BufferId g = b.argument(tt(DType::F16, {128}), BufferRole::Input, "g");
  BufferId lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper, "lr");
  BufferId ok = b.temporary(tt(DType::I1, {}));
  b.op("amp.all_finite", {g}, {ok});
  BufferId late = b.temporary(tt(DType::F16, {128}));
  b.op("jit.neg", {g}, {late});
  b.op("jit.sgd_update", {w, late, kNoBuffer, kNoBuffer, lr, kNoBuffer, ok, kNoBuffer}, {w});
  b.result(w, 0);
  Plan plan = b.finish();
  std::string whyNot;
  EXPECT_FALSE(cuda::scheduleSpeculativeUpdates(plan, 1, &whyNot).has_value());
  EXPECT_EQ(whyNot, describeStep(plan, 2) + " reads " + describeStep(plan, 1) +
                        "'s output, written no earlier than its predicate: nothing to gain");
}

/// scaledTwoLayerStep's schedule, which speculates on both updates.
cuda::SpeculationSchedule twoLayerSchedule(const Plan& plan) {
  std::string whyNot;
  std::optional<cuda::SpeculationSchedule> schedule = cuda::scheduleSpeculativeUpdates(plan, 1, &whyNot);
  EXPECT_TRUE(schedule.has_value()) << whyNot;
  EXPECT_EQ(schedule ? schedule->updates.size() : 0u, 2u);
  return schedule ? *schedule : cuda::SpeculationSchedule{};
}

TEST(SpeculativeUpdates, APlainSgdUpdateFoldsIntoTheGemmOfItsGradientAndMomentumDoesNot) {
  ScaledTwoLayerStep parts = scaledTwoLayerStep(8, 16);
  cuda::SpeculationSchedule schedule = twoLayerSchedule(parts.plan);
  ASSERT_EQ(schedule.updates.size(), 2u);
  std::string whyNot;
  std::optional<cuda::GemmFold> w0 = cuda::gemmFoldOf(parts.plan, schedule.updates[0], whyNot);
  ASSERT_TRUE(w0.has_value()) << whyNot;
  EXPECT_EQ(w0->gemm, parts.gw0Step);
  EXPECT_FALSE(cuda::gemmFoldOf(parts.plan, schedule.updates[1], whyNot).has_value());
  EXPECT_EQ(whyNot, "has momentum, which a GEMM's epilogue cannot keep");
}

TEST(SpeculativeUpdates, AGradientAnotherStepReadsOrWeightDecayKeepsItsUpdateOutOfTheGemm) {
  ScaledTwoLayerStep parts = scaledTwoLayerStep(8, 16);
  BufferId gw0 = parts.plan.steps[parts.w0Update].inputs[sgd_slot::kGrad];
  std::string whyNot;
  {
    // A second reader of the gradient (here, a square of it into an output)
    // would find no gradient: the folded GEMM writes the parameter instead.
    Plan plan = parts.plan;
    BufferDesc out;
    out.type = plan.buffers[gw0].type;
    out.role = BufferRole::Output;
    plan.buffers.push_back(out);
    BufferId squared = BufferId(plan.buffers.size() - 1);
    Step square;
    square.kind = StepKind::Elementwise;
    square.params = ElementwiseParams{.op = ElementwiseOp::Mul};
    square.computeType = DType::F32;
    square.inputs = {gw0, gw0};
    square.outputs = {squared};
    square.origin = "jit.mul";
    plan.steps.insert(plan.steps.begin() + std::ptrdiff_t(parts.checkStep), square);
    plan.results.push_back(PlanResult{squared, -1});
    ASSERT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).message();
    cuda::SpeculationSchedule schedule = twoLayerSchedule(plan);
    ASSERT_EQ(schedule.updates.size(), 2u);
    EXPECT_FALSE(cuda::gemmFoldOf(plan, schedule.updates[0], whyNot).has_value());
    EXPECT_EQ(whyNot, "reads " + describeBuffer(plan, gw0) + ", which " + describeStep(plan, parts.checkStep) +
                          " reads too");
  }
  {
    Plan plan = parts.plan;
    plan.steps[parts.w0Update].as<OptimizerParams>().weightDecay = 0.01;
    cuda::SpeculationSchedule schedule = twoLayerSchedule(plan);
    ASSERT_EQ(schedule.updates.size(), 2u);
    EXPECT_FALSE(cuda::gemmFoldOf(plan, schedule.updates[0], whyNot).has_value());
    EXPECT_EQ(whyNot, "has weight decay");
  }
}

} // namespace
} // namespace ampjit::runtime
