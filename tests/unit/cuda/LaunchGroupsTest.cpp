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

/// Two SGD updates, then the scaler's update_scale, whose new scale goes to
/// `scaleOut`: its own state, or the inv_scale buffer the updates read.
enum class ScaleOut { OwnState, TheUpdatesInvScale };
Plan updatesThenScaleUpdate(ScaleOut scaleOut) {
  PlanBuilder b("updates_then_scale");
  BufferId lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper, "lr");
  BufferId inv = b.argument(tt(DType::F32, {}), BufferRole::ScalerState, "inv_scale");
  BufferId ok = b.argument(tt(DType::I1, {}), BufferRole::Input, "all_finite");
  BufferId scale = b.argument(tt(DType::F32, {}), BufferRole::ScalerState, "scale");
  BufferId good = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "good");
  BufferId bad = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "bad");
  BufferId skipped = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "skipped");
  for (int64_t size : {32, 4}) {
    BufferId w = b.argument(tt(DType::F32, {size}), BufferRole::Param);
    BufferId g = b.argument(tt(DType::F16, {size}), BufferRole::Input);
    BufferId m = b.argument(tt(DType::F32, {size}), BufferRole::OptState);
    b.op("jit.sgd_update", {w, g, m, kNoBuffer, lr, inv, ok, kNoBuffer}, {w, m}, {{"momentum", 0.9}});
  }
  BufferId newScale = scaleOut == ScaleOut::OwnState ? scale : inv;
  b.op("amp.update_scale", {scale, good, bad, skipped, ok}, {newScale, good, bad, skipped},
       {{"growth_interval", int64_t(1000)}});
  return b.finish();
}

TEST(LaunchGroups, TheScalersUpdateJoinsTheLaunchOfTheUpdatesBeforeIt) {
  Plan plan = updatesThenScaleUpdate(ScaleOut::OwnState);
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 3}}));
  EXPECT_EQ(cuda::launchesPerRun(plan, cuda::launchGroups(plan)), 1u);
}

TEST(LaunchGroups, NotWhenItWritesWhatTheUpdatesRead) {
  Plan plan = updatesThenScaleUpdate(ScaleOut::TheUpdatesInvScale);
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 2}, {2, 3}}));
}

/// A finiteness check of two gradients, then inv_scale = one / scale; with
/// `divisionWritesAGradient` the quotient goes into the f32 scalar gradient
/// the check reads.
Plan checkThenInverse(bool divisionWritesAGradient) {
  PlanBuilder b("check_then_inverse");
  BufferId grad = b.argument(tt(DType::F16, {64, 8}), BufferRole::Input, "grad");
  BufferId scalarGrad = b.argument(tt(DType::F32, {}), BufferRole::Input, "scalar_grad");
  BufferId one = b.argument(tt(DType::F32, {}), BufferRole::Hyper, "one");
  BufferId scale = b.argument(tt(DType::F32, {}), BufferRole::ScalerState, "scale");
  BufferId ok = b.output(tt(DType::I1, {}));
  b.op("amp.all_finite", {grad, scalarGrad}, {ok});
  BufferId inverse = divisionWritesAGradient ? scalarGrad : b.output(tt(DType::F32, {}));
  b.op("jit.div", {one, scale}, {inverse});
  b.result(ok);
  b.result(inverse);
  return b.finish();
}

TEST(LaunchGroups, TheScalersInverseScaleJoinsTheFinitenessCheck) {
  Plan plan = checkThenInverse(false);
  EXPECT_TRUE(cuda::finiteCheckTakesQuotient(plan, 0));
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 2}}));
}

TEST(LaunchGroups, NotWhenTheDivisionWritesWhatTheCheckReads) {
  Plan plan = checkThenInverse(true);
  EXPECT_FALSE(cuda::finiteCheckTakesQuotient(plan, 0));
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 1}, {1, 2}}));
}

/// An O1 step's start: the casts of the input and of two parameters, then a
/// cast of a cast (which must wait for the first) and a widening cast.
struct Casts {
  Plan plan;
  BufferId weight, bias;
};
Casts castPlan() {
  PlanBuilder b("casts");
  BufferId x = b.argument(tt(DType::F32, {64, 784}), BufferRole::Input, "x");
  BufferId w = b.argument(tt(DType::F32, {512, 784}), BufferRole::Param, "w");
  BufferId bias = b.argument(tt(DType::F32, {512}), BufferRole::Param, "b");
  BufferId x16 = b.output(tt(DType::F16, {64, 784}));
  BufferId w16 = b.output(tt(DType::F16, {512, 784}));
  BufferId b16 = b.temporary(tt(DType::F16, {512}));
  BufferId bAgain = b.output(tt(DType::BF16, {512}));
  BufferId widened = b.output(tt(DType::F32, {512}));
  b.op("amp.cast", {x}, {x16});
  b.op("amp.cast", {w}, {w16});
  b.op("amp.cast", {bias}, {b16});
  b.op("amp.cast", {b16}, {widened});
  b.op("amp.cast", {bias}, {bAgain});
  for (BufferId id : {x16, w16, widened, bAgain})
    b.result(id);
  return {b.finish(), w, bias};
}

TEST(LaunchGroups, ConsecutiveCastsOfOneDTypePairShareALaunch) {
  Casts casts = castPlan();
  const Plan& plan = casts.plan;
  // The three f32 -> f16 casts; the widening cast reads the third, and the
  // f32 -> bf16 one converts to another dtype.
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 3}, {3, 4}, {4, 5}})) << printPlan(plan);
  EXPECT_FALSE(cuda::canShareConvertLaunch(plan, plan.steps[2], plan.steps[3]));
  EXPECT_FALSE(cuda::canShareConvertLaunch(plan, plan.steps[0], plan.steps[4]));
}

TEST(LaunchGroups, ALaunchAfterTheDeferredUpdateWaitsForWhatAnyOfItsStepsNeeds) {
  // The deferred updates of w and b are two side-stream launches (their
  // learning rates differ); the casts of w and b are one launch, which must
  // wait for b's update too, not only for w's.
  Casts casts = castPlan();
  Plan plan = casts.plan;
  auto addBuffer = [&](BufferDesc buffer) {
    plan.buffers.push_back(std::move(buffer));
    return BufferId(plan.buffers.size() - 1);
  };
  std::vector<Step> updates;
  for (BufferId param : {casts.weight, casts.bias}) {
    // A copy: adding buffers below may move plan.buffers.
    const TensorType type = plan.buffers[param].type;
    BufferId lr = addBuffer({.type = tt(DType::F32, {}), .role = BufferRole::Carried});
    BufferId grad = addBuffer({.type = type, .role = BufferRole::Carried});
    std::vector<std::optional<TensorType>> operandTypes = {type,         type,         std::nullopt,
                                                           std::nullopt, tt(DType::F32, {}), std::nullopt,
                                                           std::nullopt, std::nullopt};
    std::vector<TensorType> resultTypes = {type};
    Expected<Step> update = buildStep("jit.sgd_update", operandTypes, resultTypes, {});
    ASSERT_TRUE(update.ok()) << update.message();
    std::vector<BufferId> operands = {param, grad, kNoBuffer, kNoBuffer, lr, kNoBuffer, kNoBuffer, kNoBuffer};
    std::vector<BufferId> results = {param};
    ASSERT_TRUE(bindStep(*update, operands, results).ok());
    updates.push_back(std::move(*update));
  }
  // Without the input's cast, the parameters' casts come first.
  plan.steps.erase(plan.steps.begin());
  plan.steps.insert(plan.steps.begin(), updates.begin(), updates.end());
  plan.deferredSteps = 2;
  Groups groups = cuda::launchGroups(plan);
  ASSERT_EQ(groups, (Groups{{0, 1}, {1, 2}, {2, 4}, {4, 5}, {5, 6}})) << printPlan(plan);
  EXPECT_EQ(cuda::deferredJoins(plan, groups), (std::vector<std::ptrdiff_t>{-1, -1, 1, 1, 1}));
}

/// A classifier's loss and its gradient: cross-entropy over `scores`
/// ([rows, classes]) and labels, then the gradient for the seed `seed`.
Plan lossPlan(Shape scores, std::string reduction, bool gradientOfOtherScores = false) {
  PlanBuilder b("loss");
  BufferId x = b.argument(tt(DType::F32, scores), BufferRole::Input, "scores");
  BufferId other = b.argument(tt(DType::F32, scores), BufferRole::Input, "other_scores");
  BufferId labels = b.argument(tt(DType::I64, {scores[0]}), BufferRole::Input, "labels");
  Shape lossShape = reduction == "none" ? Shape{scores[0]} : Shape{};
  BufferId seed = b.argument(tt(DType::F32, lossShape), BufferRole::ScalerState, "scale");
  BufferId loss = b.output(tt(DType::F32, lossShape));
  BufferId grad = b.output(tt(DType::F32, scores));
  AttributeMap attributes = {{"reduction", reduction}};
  b.op("jit.cross_entropy", {x, labels}, {loss}, attributes);
  b.op("jit.cross_entropy_grad", {seed, gradientOfOtherScores ? other : x, labels}, {grad}, attributes);
  b.result(loss);
  b.result(grad);
  return b.finish();
}

TEST(LaunchGroups, ASmallLossAndItsGradientShareALaunch) {
  EXPECT_EQ(cuda::launchGroups(lossPlan({64, 10}, "mean")), (Groups{{0, 2}}));
  EXPECT_EQ(cuda::launchGroups(lossPlan({1024, 32}, "sum")), (Groups{{0, 2}}));
  // Not past one block's worth of scores, nor unreduced, nor over other scores.
  EXPECT_EQ(cuda::launchGroups(lossPlan({64, 1000}, "mean")), (Groups{{0, 1}, {1, 2}}));
  EXPECT_EQ(cuda::launchGroups(lossPlan({64, 10}, "none")), (Groups{{0, 1}, {1, 2}}));
  EXPECT_EQ(cuda::launchGroups(lossPlan({64, 10}, "mean", true)), (Groups{{0, 1}, {1, 2}}));
}

/// An O2 classifier's head: f16 scores widened to f32, the loss and its
/// gradient, the gradient back to f16 (and, when `lossOfOtherScores`, the
/// loss on other scores than the widened ones).
Plan headPlan(bool narrow, bool lossOfOtherScores) {
  PlanBuilder b("head");
  BufferId low = b.argument(tt(DType::F16, {64, 10}), BufferRole::Input, "scores");
  BufferId labels = b.argument(tt(DType::I64, {64}), BufferRole::Input, "labels");
  BufferId seed = b.argument(tt(DType::F32, {}), BufferRole::ScalerState, "scale");
  BufferId scores = b.temporary(tt(DType::F32, {64, 10}));
  BufferId loss = b.output(tt(DType::F32, {}));
  BufferId grad = b.temporary(tt(DType::F32, {64, 10}));
  BufferId lowGrad = b.output(tt(DType::F16, {64, 10}));
  BufferId gradSum = b.output(tt(DType::F32, {10}));
  AttributeMap attributes = {{"reduction", std::string("mean")}};
  BufferId other = b.argument(tt(DType::F32, {64, 10}), BufferRole::Input, "other_scores");
  b.op("amp.cast", {low}, {scores});
  b.op("jit.cross_entropy", {lossOfOtherScores ? other : scores, labels}, {loss}, attributes);
  b.op("jit.cross_entropy_grad", {seed, scores, labels}, {grad}, attributes);
  if (narrow)
    b.op("amp.cast", {grad}, {lowGrad});
  b.op("jit.sum", {grad}, {gradSum}, {{"axes", std::vector<int64_t>{0}}});
  b.result(loss);
  if (narrow)
    b.result(lowGrad);
  b.result(gradSum);
  return b.finish();
}

TEST(LaunchGroups, AClassifiersHeadIsOneLaunch) {
  // Widen, loss, gradient, narrow and the gradient's column sum (the last
  // layer's bias gradient); without the narrowing.
  EXPECT_EQ(cuda::launchGroups(headPlan(true, false)), (Groups{{0, 5}}));
  EXPECT_EQ(cuda::launchGroups(headPlan(false, false)), (Groups{{0, 4}}));
  // Without the widening (O1: the scores are f32 already), from the loss on.
  Plan o1 = headPlan(true, false);
  o1.steps.erase(o1.steps.begin());
  o1.steps[0].inputs[0] = o1.steps[1].inputs[1] = o1.argumentBuffer(3);
  EXPECT_EQ(cuda::launchGroups(o1), (Groups{{0, 4}})) << printPlan(o1);
  // Not when the loss reads other scores than the widened ones.
  EXPECT_EQ(cuda::launchGroups(headPlan(true, true)), (Groups{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}));
}

TEST(LaunchGroups, AHeadRunsStepByStepWhenItsBuffersShareBytesUnsafely) {
  // Step by step, codegen gives dead temporaries' bytes to later outputs.
  // The fused kernel works on all rows at once: an f32 gradient in the f16
  // scores' bytes would overwrite scores of rows not yet read. The f16
  // gradient in the f16 scores' bytes, element for element, is safe (each
  // row is read in full before its gradient is written): the MNIST head.
  enum class Alias { None, GradientOverScores, LowGradientOverScores };
  auto build = [](Alias alias) {
    PlanBuilder b("aliased_head");
    BufferId logits = b.argument(tt(DType::F32, {64, 10}), BufferRole::Input, "logits");
    BufferId labels = b.argument(tt(DType::I64, {64}), BufferRole::Input, "labels");
    BufferId seed = b.argument(tt(DType::F32, {}), BufferRole::ScalerState, "scale");
    BufferId low = b.temporary(tt(DType::F16, {64, 10}));
    BufferId scores = b.temporary(tt(DType::F32, {64, 10}));
    BufferId loss = b.output(tt(DType::F32, {}));
    BufferId grad = b.temporary(tt(DType::F32, {64, 10}));
    BufferId lowGrad = b.temporary(tt(DType::F16, {64, 10}));
    BufferId out = b.output(tt(DType::F32, {64, 10}));
    AttributeMap attributes = {{"reduction", std::string("mean")}};
    b.op("amp.cast", {logits}, {low});
    b.op("amp.cast", {low}, {scores});
    b.op("jit.cross_entropy", {scores, labels}, {loss}, attributes);
    b.op("jit.cross_entropy_grad", {seed, scores, labels}, {grad}, attributes);
    b.op("amp.cast", {grad}, {lowGrad});
    b.op("amp.cast", {lowGrad}, {out}); // reads the narrowed gradient after the head
    b.result(loss);
    b.result(out);
    Plan plan = b.finish();
    // A fresh range for the two, so they overlap nothing else.
    BufferId over = alias == Alias::GradientOverScores ? grad : lowGrad;
    if (alias != Alias::None) {
      plan.buffers[low].arenaOffset = plan.buffers[over].arenaOffset = plan.arenaBytes;
      plan.arenaBytes += uint64_t(plan.buffers[grad].type.byteSize());
    }
    return plan;
  };
  EXPECT_EQ(cuda::launchGroups(build(Alias::None)), (Groups{{0, 1}, {1, 5}, {5, 6}}));
  EXPECT_EQ(cuda::launchGroups(build(Alias::LowGradientOverScores)), (Groups{{0, 1}, {1, 5}, {5, 6}}));
  // From the loss on, the head reads the wide scores, which nothing overlaps.
  EXPECT_EQ(cuda::launchGroups(build(Alias::GradientOverScores)), (Groups{{0, 1}, {1, 2}, {2, 5}, {5, 6}}));
}

/// AMP's fp32 bias gradient of an f16 output gradient: the gradient widened
/// to f32 and summed over its rows; `alsoRead` gives the widened copy a
/// second reader.
Plan widenedBiasGradient(bool alsoRead) {
  PlanBuilder b("bias_gradient");
  BufferId dy = b.argument(tt(DType::F16, {256, 32}), BufferRole::Input, "dy");
  BufferId wide = b.temporary(tt(DType::F32, {256, 32}));
  BufferId bias = b.output(tt(DType::F32, {32}));
  b.op("amp.cast", {dy}, {wide});
  b.op("jit.sum", {wide}, {bias}, {{"axes", std::vector<int64_t>{0}}});
  b.result(bias);
  if (alsoRead) {
    BufferId doubled = b.output(tt(DType::F32, {256, 32}));
    b.op("jit.add", {wide, wide}, {doubled});
    b.result(doubled);
  }
  return b.finish();
}

TEST(LaunchGroups, AWidenedGradientAndItsSumShareALaunch) {
  Plan plan = widenedBiasGradient(false);
  EXPECT_TRUE(cuda::widenedReductionAt(plan, 0));
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 2}})) << printPlan(plan);
  EXPECT_EQ(cuda::launchesPerRun(plan, cuda::launchGroups(plan)), 1u);
}

TEST(LaunchGroups, NotWhenAnotherStepReadsTheWidenedCopy) {
  // The launch never writes the copy.
  Plan plan = widenedBiasGradient(true);
  EXPECT_FALSE(cuda::widenedReductionAt(plan, 0));
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 1}, {1, 2}, {2, 3}})) << printPlan(plan);
}

TEST(LaunchGroups, NotWhenTheSumWritesOverTheNarrowInput) {
  // Step by step the narrow gradient is dead once widened, and the arena
  // gives its bytes to the sum (as here); one launch would read it while it
  // writes the sum.
  auto build = [](bool narrowReadLater) {
    PlanBuilder b("aliased_bias_gradient");
    BufferId x = b.argument(tt(DType::F16, {256, 32}), BufferRole::Input, "x");
    BufferId dy = b.temporary(tt(DType::F16, {256, 32}));
    BufferId wide = b.temporary(tt(DType::F32, {256, 32}));
    BufferId summed = b.temporary(tt(DType::F32, {32}));
    BufferId bias = b.output(tt(DType::F32, {32}));
    b.op("jit.neg", {x}, {dy});
    b.op("amp.cast", {dy}, {wide});
    b.op("jit.sum", {wide}, {summed}, {{"axes", std::vector<int64_t>{0}}});
    b.op("jit.neg", {summed}, {bias});
    b.result(bias);
    if (narrowReadLater) { // the input gradient's GEMMs read it after the sum
      BufferId again = b.output(tt(DType::F16, {256, 32}));
      b.op("jit.neg", {dy}, {again});
      b.result(again);
    }
    return std::tuple{b.finish(), dy, summed};
  };
  auto [aliased, dy, summed] = build(false);
  EXPECT_TRUE(cuda::sameMemory(aliased, summed, dy)) << printPlan(aliased);
  EXPECT_FALSE(cuda::widenedReductionAt(aliased, 1));
  EXPECT_EQ(cuda::launchGroups(aliased), (Groups{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  auto [live, liveDy, liveSum] = build(true);
  EXPECT_FALSE(cuda::sameMemory(live, liveSum, liveDy)) << printPlan(live);
  EXPECT_EQ(cuda::launchGroups(live), (Groups{{0, 1}, {1, 3}, {3, 4}, {4, 5}})) << printPlan(live);
}

/// An O1 classifier's last layer: its f16 product widened and the f32 bias
/// combined by `op` in one FusedElementwise step, then the cross-entropy,
/// its gradient and the gradient's narrowing.
Plan widenedProductWithBias(ElementwiseOp op, Shape biasShape = {10}) {
  PlanBuilder b("biased_head");
  BufferId product = b.argument(tt(DType::F16, {64, 10}), BufferRole::Input, "product");
  BufferId bias = b.argument(tt(DType::F32, biasShape), BufferRole::Param, "bias");
  BufferId labels = b.argument(tt(DType::I64, {64}), BufferRole::Input, "labels");
  BufferId seed = b.argument(tt(DType::F32, {}), BufferRole::ScalerState, "scale");
  BufferId scores = b.temporary(tt(DType::F32, {64, 10}));
  b.fused({{ElementwiseOp::Load, DType::F16, {0, 0, 0}, 0.0},
           {ElementwiseOp::Convert, DType::F32, {0, 0, 0}, 0.0},
           {ElementwiseOp::Load, DType::F32, {1, 0, 0}, 0.0},
           {op, DType::F32, {1, 2, 0}, 0.0}},
          {3}, {product, bias}, {scores});
  BufferId loss = b.output(tt(DType::F32, {}));
  BufferId grad = b.temporary(tt(DType::F32, {64, 10}));
  BufferId lowGrad = b.output(tt(DType::F16, {64, 10}));
  b.op("jit.cross_entropy", {scores, labels}, {loss});
  b.op("jit.cross_entropy_grad", {seed, scores, labels}, {grad});
  b.op("amp.cast", {grad}, {lowGrad});
  b.result(loss);
  b.result(lowGrad);
  return b.finish();
}

TEST(LaunchGroups, AnO1HeadTakesTheWideningAndBiasAddBeforeIt) {
  Plan plan = widenedProductWithBias(ElementwiseOp::Add);
  EXPECT_EQ(cuda::classificationHeadLength(plan, 0), 4u) << printPlan(plan);
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 4}}));
  // Any other program, or a bias that is not one per class, stays apart.
  for (Plan other : {widenedProductWithBias(ElementwiseOp::Mul), widenedProductWithBias(ElementwiseOp::Add, {64, 10})}) {
    EXPECT_EQ(cuda::classificationHeadLength(other, 0), 0u) << printPlan(other);
    EXPECT_EQ(cuda::launchGroups(other), (Groups{{0, 1}, {1, 4}})) << printPlan(other);
  }
}

TEST(LaunchGroups, ConsecutiveIndependentTransposesOfOneElementSizeShareALaunch) {
  auto transposes = [](DType second, bool chained, Shape firstShape) {
    PlanBuilder b("transposes");
    BufferId x = b.argument(tt(DType::F16, firstShape), BufferRole::Input);
    Shape transposedShape(firstShape.rbegin(), firstShape.rend());
    std::vector<int64_t> reversed;
    for (size_t d = firstShape.size(); d-- > 0;)
      reversed.push_back(int64_t(d));
    BufferId xt = b.output(tt(DType::F16, transposedShape));
    b.op("jit.transpose", {x}, {xt}, {{"perm", reversed}});
    BufferId y = chained ? xt : b.argument(tt(second, {4, 6}), BufferRole::Input);
    Shape yShape = chained ? transposedShape : Shape{4, 6};
    std::vector<int64_t> back;
    for (size_t d = yShape.size(); d-- > 0;)
      back.push_back(int64_t(d));
    BufferId yt = b.output(tt(chained ? DType::F16 : second, Shape(yShape.rbegin(), yShape.rend())));
    b.op("jit.transpose", {y}, {yt}, {{"perm", back}});
    b.result(xt);
    b.result(yt);
    return b.finish();
  };
  EXPECT_EQ(cuda::launchGroups(transposes(DType::BF16, false, {3, 5})), (Groups{{0, 2}}));
  // Another element size; the second reading the first's result; a copy of
  // more strided dimensions than the grouped kernel takes (5: a reversal).
  EXPECT_EQ(cuda::launchGroups(transposes(DType::F32, false, {3, 5})), (Groups{{0, 1}, {1, 2}}));
  EXPECT_EQ(cuda::launchGroups(transposes(DType::F16, true, {3, 5})), (Groups{{0, 1}, {1, 2}}));
  EXPECT_EQ(cuda::launchGroups(transposes(DType::F16, false, {2, 3, 2, 3, 2})), (Groups{{0, 1}, {1, 2}}));
}

TEST(LaunchGroups, ASideStepIsALaunchOfItsOwnAndNoLaunchSpansOne) {
  // Three independent transposes share a launch; marking one a side step
  // (Plan::sideSteps) gives it a launch of its own, and the launch that would
  // have spanned it goes step by step.
  PlanBuilder b("three_transposes");
  std::vector<BufferId> results;
  for (int k = 0; k < 3; ++k) {
    BufferId x = b.argument(tt(DType::F16, {3, 5}), BufferRole::Input);
    BufferId xt = b.output(tt(DType::F16, {5, 3}));
    b.op("jit.transpose", {x}, {xt}, {{"perm", std::vector<int64_t>{1, 0}}});
    results.push_back(xt);
  }
  for (BufferId result : results)
    b.result(result);
  Plan plan = b.finish();
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 3}}));
  plan.sideSteps = {{1, 3}};
  ASSERT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).message();
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 1}, {1, 2}, {2, 3}}));
  plan.sideSteps = {{0, 2}};
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 1}, {1, 3}}));
  plan.sideSteps = {{2, 3}};
  EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 1}, {1, 2}, {2, 3}}));
}

TEST(LaunchGroups, AnMseLossWithItsGradientAndTheirCastsIsOneRegressionHead) {
  // An f16 product widened, the mse loss and gradient, the gradient rounded
  // back; not with reduction none (a per-element loss), nor when the
  // gradient's target is another tensor than the loss's.
  auto head = [](std::string reduction, bool otherTarget) {
    PlanBuilder b("regression_head");
    BufferId product = b.argument(tt(DType::F16, {16, 8}), BufferRole::Input, "product");
    BufferId target = b.argument(tt(DType::F32, {16, 8}), BufferRole::Input, "target");
    BufferId other = b.argument(tt(DType::F32, {16, 8}), BufferRole::Input, "other");
    Shape lossShape = reduction == "none" ? Shape{16, 8} : Shape{};
    BufferId seed = b.argument(tt(DType::F32, lossShape), BufferRole::ScalerState, "scale");
    BufferId scores = b.temporary(tt(DType::F32, {16, 8}));
    BufferId loss = b.output(tt(DType::F32, lossShape));
    BufferId grad = b.temporary(tt(DType::F32, {16, 8}));
    BufferId low = b.output(tt(DType::F16, {16, 8}));
    AttributeMap attributes = {{"reduction", reduction}};
    b.op("amp.cast", {product}, {scores});
    b.op("jit.mse_loss", {scores, target}, {loss}, attributes);
    b.op("jit.mse_loss_grad", {seed, scores, otherTarget ? other : target}, {grad}, attributes);
    b.op("amp.cast", {grad}, {low});
    b.result(loss);
    b.result(low);
    return b.finish();
  };
  EXPECT_EQ(cuda::mseHeadLength(head("mean", false), 0), 4u);
  EXPECT_EQ(cuda::launchGroups(head("sum", false)), (Groups{{0, 4}}));
  EXPECT_EQ(cuda::mseHeadLength(head("none", false), 0), 0u);
  EXPECT_EQ(cuda::mseHeadLength(head("mean", true), 0), 0u);
}

/// A relu gradient in f32 and its sum over the first dimension (a bias
/// gradient); `extraReader` also reads the gradient after the sum,
/// `returned` makes it a result.
Plan reluGradientAndSum(Shape shape, std::vector<int64_t> axes = {0}, bool extraReader = false,
                        bool returned = false) {
  PlanBuilder b("relu_gradient_and_sum");
  BufferId dy = b.argument(tt(DType::F32, shape), BufferRole::Input, "dy");
  BufferId y = b.argument(tt(DType::F32, shape), BufferRole::Input, "y");
  BufferId gradient = returned ? b.output(tt(DType::F32, shape)) : b.temporary(tt(DType::F32, shape));
  Shape reduced = shape;
  for (auto axis = axes.rbegin(); axis != axes.rend(); ++axis)
    reduced.erase(reduced.begin() + *axis);
  BufferId sums = b.output(tt(DType::F32, reduced));
  b.op("jit.relu_grad", {dy, y}, {gradient});
  b.op("jit.sum", {gradient}, {sums}, {{"axes", axes}});
  b.result(sums);
  if (returned)
    b.result(gradient);
  if (extraReader) {
    BufferId again = b.output(tt(DType::F32, shape));
    b.op("jit.neg", {gradient}, {again});
    b.result(again);
  }
  return b.finish();
}

TEST(LaunchGroups, AnElementwiseStepAndTheColumnSumsOfItsOutputShareALaunch) {
  Plan plan = reluGradientAndSum({64, 512});
  EXPECT_TRUE(cuda::columnSummedElementwiseAt(plan, 0)) << printPlan(plan);
  std::vector<std::pair<size_t, size_t>> groups = cuda::launchGroups(plan);
  EXPECT_EQ(groups, (Groups{{0, 2}}));
  EXPECT_EQ(cuda::launchesPerRun(plan, groups), 1u);
  // Its one kernel: the group's slots, the sums its last output.
  Expected<std::vector<std::optional<cuda::ElementwiseKernel>>> kernels = cuda::generatedKernels(plan, groups);
  ASSERT_TRUE(kernels.ok()) << kernels.message();
  ASSERT_TRUE((*kernels)[0].has_value());
  const cuda::ElementwiseLaunch& launch = (*kernels)[0]->launch;
  EXPECT_EQ(launch.summedRows, 64);
  EXPECT_EQ(launch.outputs, (std::vector<BufferId>{plan.steps[1].outputs[0]}));
  EXPECT_EQ(launch.groupInputs, 3u);
  EXPECT_EQ(launch.groupOutputs, 2u);
  EXPECT_EQ(launch.outputSlots, (std::vector<size_t>{1}));
  EXPECT_EQ(launch.gridSizeOn(132), 512 / cuda::kColumnTileColumns);
  // Run as a group of its own it is refused, with the reason.
  std::vector<const Step*> members = {&plan.steps[0], &plan.steps[1]};
  cuda::DeviceContext context;
  Expected<std::unique_ptr<cuda::DeviceStep>> group = cuda::makeLaunchGroupStep(context, plan, members);
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.message().find("one generated kernel"), std::string::npos) << group.message();
}

TEST(LaunchGroups, NotWhenTheSumIsNotOnePassOfTheColumnKernel) {
  // The bits would differ from the sum's own launch: a thread per output
  // (few rows), partials over several parts (many rows, few columns), a
  // sum over another axis, or a rank-1 tensor.
  for (auto [shape, axes] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{20, 512}, {0}}, {{4000, 16}, {0}}, {{64, 512}, {1}}, {{4096}, {0}}}) {
    Plan plan = reluGradientAndSum(shape, axes);
    EXPECT_FALSE(cuda::columnSummedElementwiseAt(plan, 0)) << printPlan(plan);
    EXPECT_EQ(cuda::launchGroups(plan), (Groups{{0, 1}, {1, 2}})) << printPlan(plan);
  }
}

TEST(LaunchGroups, NorWhenTheSummedOutputIsReadElsewhereOrReturned) {
  // The launch never stores the summed output.
  EXPECT_FALSE(cuda::columnSummedElementwiseAt(reluGradientAndSum({64, 512}, {0}, /*extraReader=*/true), 0));
  EXPECT_FALSE(cuda::columnSummedElementwiseAt(reluGradientAndSum({64, 512}, {0}, false, /*returned=*/true), 0));
}

TEST(LaunchGroups, NorWhenTheSumsShareBytesWithTheElementwiseInputs) {
  // Blocks store their sums while others still read the inputs. Step by
  // step the negated dy is dead once the relu gradient read it, and the
  // test arena gives its bytes to the sums (codegen's keeps them live).
  PlanBuilder b("aliased_sums");
  BufferId dy = b.argument(tt(DType::F32, {64, 512}), BufferRole::Input, "dy");
  BufferId y = b.argument(tt(DType::F32, {64, 512}), BufferRole::Input, "y");
  BufferId negated = b.temporary(tt(DType::F32, {64, 512}));
  BufferId gradient = b.temporary(tt(DType::F32, {64, 512}));
  BufferId sums = b.temporary(tt(DType::F32, {512}));
  BufferId bias = b.output(tt(DType::F32, {512}));
  b.op("jit.neg", {dy}, {negated});
  b.op("jit.relu_grad", {negated, y}, {gradient});
  b.op("jit.sum", {gradient}, {sums}, {{"axes", std::vector<int64_t>{0}}});
  b.op("jit.neg", {sums}, {bias});
  b.result(bias);
  Plan plan = b.finish();
  ASSERT_TRUE(cuda::sameMemory(plan, sums, negated)) << printPlan(plan);
  EXPECT_FALSE(cuda::columnSummedElementwiseAt(plan, 1)) << printPlan(plan);
  // Apart from that, the same two steps group.
  plan.buffers[sums].arenaOffset = plan.arenaBytes;
  plan.arenaBytes += 512 * 4;
  EXPECT_TRUE(cuda::columnSummedElementwiseAt(plan, 1)) << printPlan(plan);
}

} // namespace
} // namespace ampjit::runtime
