//===- FiniteCheckScheduleTest.cpp - the side stream's finiteness chunks ---===//
//
// Which gradients the CUDA backend checks on its side stream, and after which
// step: a plan question, so it is tested here without a GPU (the device run
// is tests/gpu's SplitFiniteCheckEqualsOneCheck).
//
//===----------------------------------------------------------------------===//

#include "cuda/FiniteCheckSchedule.h"

#include "RuntimeTestUtil.h"

#include <gtest/gtest.h>

namespace ampjit::runtime {
namespace {

using test::PlanBuilder;
using test::tt;

/// Three gradients written by steps 0, 1 and 3 (the last one accumulated at
/// step 3 after a first write at step 2), one gradient passed in as an
/// argument, then the check at step 4.
struct GradientPlan {
  Plan plan;
  BufferId first, second, third, passedIn;
};

GradientPlan gradientPlan(int64_t elements) {
  PlanBuilder b("gradients");
  BufferId x = b.argument(tt(DType::F16, {elements}), BufferRole::Input, "x");
  BufferId passedIn = b.argument(tt(DType::F16, {elements}), BufferRole::Input, "g_in");
  BufferId first = b.temporary(tt(DType::F16, {elements}));
  BufferId second = b.temporary(tt(DType::F16, {elements}));
  BufferId partial = b.temporary(tt(DType::F16, {elements}));
  BufferId third = b.temporary(tt(DType::F16, {elements}));
  BufferId ok = b.output(tt(DType::I1, {}));
  b.op("jit.neg", {x}, {first});
  b.op("jit.exp", {x}, {second});
  b.op("jit.neg", {second}, {partial});
  b.op("jit.add", {partial, first}, {third});
  b.op("amp.all_finite", {first, passedIn, second, third}, {ok});
  b.result(ok);
  return {b.finish(), first, second, third, passedIn};
}

TEST(FiniteCheckSchedule, ChunksCloseAfterTheLastWriterOfTheirGradients) {
  GradientPlan g = gradientPlan(100);
  std::optional<cuda::FiniteCheckSchedule> schedule = cuda::scheduleFiniteCheck(g.plan, 4, 100);
  ASSERT_TRUE(schedule.has_value());
  ASSERT_EQ(schedule->early.size(), 3u);
  EXPECT_EQ(schedule->early[0].afterStep, 0u);
  EXPECT_EQ(schedule->early[0].buffers, std::vector<BufferId>{g.first});
  EXPECT_EQ(schedule->early[1].afterStep, 1u);
  EXPECT_EQ(schedule->early[1].buffers, std::vector<BufferId>{g.second});
  EXPECT_EQ(schedule->early[2].afterStep, 3u) << "the accumulated gradient waits for its last write";
  EXPECT_EQ(schedule->early[2].buffers, std::vector<BufferId>{g.third});
  EXPECT_EQ(schedule->atStep, std::vector<BufferId>{g.passedIn}) << "no step writes it: checked at the step";
}

TEST(FiniteCheckSchedule, SmallGradientsShareAChunkAndTheTailWaitsForTheStep) {
  GradientPlan g = gradientPlan(100);
  std::optional<cuda::FiniteCheckSchedule> schedule = cuda::scheduleFiniteCheck(g.plan, 4, 200);
  ASSERT_TRUE(schedule.has_value());
  ASSERT_EQ(schedule->early.size(), 1u);
  EXPECT_EQ(schedule->early[0].afterStep, 1u);
  EXPECT_EQ(schedule->early[0].buffers, (std::vector<BufferId>{g.first, g.second}));
  EXPECT_EQ(schedule->atStep, (std::vector<BufferId>{g.passedIn, g.third}));
}

TEST(FiniteCheckSchedule, GradientsBelowOneChunkAreCheckedByTheStepAlone) {
  GradientPlan g = gradientPlan(100);
  EXPECT_FALSE(cuda::scheduleFiniteCheck(g.plan, 4, 301).has_value());
  // The default threshold keeps small models (the classifier) on one stream.
  EXPECT_FALSE(cuda::scheduleFiniteCheck(g.plan, 4).has_value());
  GradientPlan large = gradientPlan(cuda::kMinEarlyFiniteCheckElements);
  std::optional<cuda::FiniteCheckSchedule> schedule = cuda::scheduleFiniteCheck(large.plan, 4);
  ASSERT_TRUE(schedule.has_value());
  EXPECT_EQ(schedule->early.size(), 3u);
}

} // namespace
} // namespace ampjit::runtime
