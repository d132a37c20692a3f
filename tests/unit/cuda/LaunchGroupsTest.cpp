//===- LaunchGroupsTest.cpp - which optimizer updates share a launch -------===//
//
// cuda::launchGroups decides which updates run as one multi-tensor launch:
// a plan question, so it is tested here without a GPU (tests/gpu runs the
// launches against the CPU).
//
//===----------------------------------------------------------------------===//

#include "cuda/DeviceStep.h"

#include "RuntimeTestUtil.h"

#include <gtest/gtest.h>

namespace ampjit::runtime {
namespace {

using test::PlanBuilder;
using test::tt;

using Groups = std::vector<std::pair<size_t, size_t>>;

/// An O2 network's SGD updates in layer order: a weight with an f16 gradient
/// and an f16 copy, a batch-norm weight with an f32 gradient and no copy,
/// then a weight whose copy has `lastCopy`.
Plan networkUpdates(DType lastCopy) {
  PlanBuilder b("updates");
  BufferId lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper, "lr");
  BufferId inv = b.argument(tt(DType::F32, {}), BufferRole::Hyper, "inv_scale");
  BufferId ok = b.argument(tt(DType::I1, {}), BufferRole::Input, "all_finite");
  auto update = [&](std::vector<int64_t> shape, DType grad, std::optional<DType> copy) {
    BufferId w = b.argument(tt(DType::F32, shape), BufferRole::Param);
    BufferId g = b.argument(tt(grad, shape), BufferRole::Input);
    BufferId m = b.argument(tt(DType::F32, shape), BufferRole::OptState);
    BufferId c = copy ? b.argument(tt(*copy, shape), BufferRole::Param) : kNoBuffer;
    std::vector<BufferId> results = {w, m};
    if (copy)
      results.push_back(c);
    b.op("jit.sgd_update", {w, g, m, kNoBuffer, lr, inv, ok, c}, results, {{"momentum", 0.9}});
  };
  update({8, 4}, DType::F16, DType::F16);
  update({4}, DType::F32, std::nullopt);
  update({16, 4}, DType::F16, lastCopy);
  return b.finish();
}

TEST(LaunchGroups, GradientDTypesAndCopiesMayDifferWithinALaunch) {
  Plan plan = networkUpdates(DType::F16);
  EXPECT_TRUE(cuda::canShareOptimizerLaunch(plan, plan.steps[0], plan.steps[1]))
      << "an f16-gradient weight with a copy and an f32 batch-norm weight without one";
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 3}}));
}

TEST(LaunchGroups, CopiesOfTwoDTypesDoNot) {
  Plan plan = networkUpdates(DType::BF16);
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 2}, {2, 3}}));
}

TEST(LaunchGroups, NorUpdatesWithAnotherLearningRate) {
  Plan plan = networkUpdates(DType::F16);
  BufferId otherLr = BufferId(plan.buffers.size());
  plan.buffers.push_back(BufferDesc{.type = tt(DType::F32, {}), .role = BufferRole::Hyper});
  plan.steps[1].inputs[sgd_slot::kLr] = otherLr;
  EXPECT_FALSE(cuda::canShareOptimizerLaunch(plan, plan.steps[0], plan.steps[1]));
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 1}, {1, 2}, {2, 3}}));
}

} // namespace
} // namespace ampjit::runtime
