// Whole plans on the CPU backend: fused and unfused plans agree bit for bit,
// poisoning freed temporaries changes nothing, state is updated in place, an
// overflowing step is skipped with all state bit-identical, and bad
// arguments are clear errors.

#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/Environment.h"
#include "ampjit/runtime/PlanFile.h"

#include "RuntimeTestUtil.h"
#include "ScopedEnvironment.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>

namespace {

using namespace ampjit::runtime;
using namespace ampjit::runtime::test;

/// What elementwise fusion in codegen does: turns a plan whose steps are all
/// Elementwise into one FusedElementwise step that loads each argument once
/// and stores each result once.
Plan fuseElementwiseSteps(const Plan& unfused) {
  Plan fused;
  fused.name = unfused.name + "_fused";
  std::map<BufferId, BufferId> renumbered;
  for (BufferId id = 0; id < unfused.buffers.size(); ++id) {
    if (unfused.buffers[id].role == BufferRole::Temporary)
      continue;
    renumbered[id] = BufferId(fused.buffers.size());
    fused.buffers.push_back(unfused.buffers[id]);
  }
  Step step;
  step.kind = StepKind::FusedElementwise;
  FusedElementwiseParams params;
  std::map<BufferId, uint32_t> registerOf;
  for (const Step& original : unfused.steps) {
    const ElementwiseParams& op = original.as<ElementwiseParams>();
    FusedInstruction instruction{op.op, unfused.buffers[original.outputs[0]].type.dtype, {}, op.scalar};
    for (size_t k = 0; k < original.inputs.size(); ++k) {
      BufferId id = original.inputs[k];
      if (!registerOf.count(id)) {
        registerOf[id] = uint32_t(params.program.size());
        params.program.push_back(FusedInstruction{ElementwiseOp::Load, unfused.buffers[id].type.dtype,
                                                  {uint32_t(step.inputs.size()), 0, 0}, 0.0});
        step.inputs.push_back(renumbered.at(id));
      }
      instruction.operands[k] = registerOf[id];
    }
    registerOf[original.outputs[0]] = uint32_t(params.program.size());
    params.program.push_back(instruction);
  }
  for (const PlanResult& result : unfused.results) {
    params.outputs.push_back(registerOf.at(result.buffer));
    step.outputs.push_back(renumbered.at(result.buffer));
    fused.results.push_back(PlanResult{renumbered.at(result.buffer), -1});
  }
  step.computeType = DType::F32;
  step.params = params;
  fused.steps.push_back(step);
  return fused;
}

Plan unfusedElementwiseChain() {
  PlanBuilder b("chain");
  BufferId x = b.argument(tt(DType::F16, {4, 6}), BufferRole::Input, "x");
  BufferId bias = b.argument(tt(DType::F16, {6}), BufferRole::Input, "b");
  BufferId scale = b.argument(tt(DType::F32, {}), BufferRole::Input, "scale");
  BufferId w = b.argument(tt(DType::BF16, {4, 6}), BufferRole::Input, "w");
  auto f16 = [&] { return b.temporary(tt(DType::F16, {4, 6})); };
  auto f32 = [&] { return b.temporary(tt(DType::F32, {4, 6})); };
  BufferId t1 = f16(), t2 = b.output(tt(DType::F16, {4, 6}));
  b.op("jit.add", {x, bias}, {t1});
  b.op("jit.relu", {t1}, {t2});
  BufferId t3 = f32(), t4 = f32(), t5 = f32(), t6 = f32(), t7 = f32(), t8 = f32(), t9 = f32();
  b.op("jit.convert", {t2}, {t3});
  b.op("jit.mul", {t3, scale}, {t4});
  b.op("jit.gelu", {t4}, {t5}, {{"approximate", std::string("tanh")}});
  b.op("jit.exp", {t5}, {t6});
  b.op("jit.log", {t6}, {t7});
  b.op("jit.sigmoid", {t7}, {t8});
  b.op("jit.pow", {t8}, {t9}, {{"exponent", 3.0}});
  BufferId mask = b.temporary(tt(DType::I1, {4, 6}));
  b.op("jit.compare", {t3, t9}, {mask}, {{"predicate", std::string("gt")}});
  BufferId t10 = b.output(tt(DType::F32, {4, 6}));
  b.op("jit.select", {mask, t4, t9}, {t10});
  BufferId t11 = b.temporary(tt(DType::BF16, {4, 6})), t12 = b.temporary(tt(DType::BF16, {4, 6}));
  BufferId t13 = b.output(tt(DType::BF16, {4, 6}));
  b.op("amp.cast", {t10}, {t11});
  b.op("jit.sub", {t11, w}, {t12});
  b.op("jit.div", {t12, w}, {t13});
  BufferId n1 = f32(), n2 = f32(), n3 = f32(), n4 = b.output(tt(DType::F32, {4, 6}));
  b.op("jit.neg", {t4}, {n1});
  b.op("jit.tanh", {n1}, {n2});
  b.op("jit.sqrt", {n2}, {n3});
  b.op("jit.rsqrt", {n3}, {n4});
  BufferId gradient = b.output(tt(DType::F16, {4, 6}));
  b.op("jit.relu_grad", {x, t1}, {gradient});
  BufferId asIndex = b.output(tt(DType::I64, {4, 6}));
  b.op("jit.convert", {mask}, {asIndex});
  for (BufferId out : {t2, t10, t13, n4, gradient, asIndex})
    b.result(out);
  return b.finish();
}

TEST(CpuBackend, FusedAndUnfusedPlansAreBitIdentical) {
  Plan unfused = unfusedElementwiseChain();
  Plan fused = fuseElementwiseSteps(unfused);
  ASSERT_TRUE(verifyPlan(fused).ok()) << verifyPlan(fused).message() << printPlan(fused);
  ASSERT_EQ(fused.steps.size(), 1u);
  std::mt19937_64 rng(30);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<Tensor> arguments = {randomTensor(DType::F16, {4, 6}, rng, -8, 8),
                                     randomTensor(DType::F16, {6}, rng, -8, 8),
                                     filled(DType::F32, {}, {trial == 0 ? 3000.0 : 1.5}),
                                     randomTensor(DType::BF16, {4, 6}, rng, -1, 1)};
    arguments[3].set(5, 0.0); // a division by zero
    Expected<std::vector<Tensor>> a = cpuBackend().run(unfused, arguments);
    Expected<std::vector<Tensor>> b = cpuBackend().run(fused, arguments);
    ASSERT_TRUE(a.ok() && b.ok()) << a.message() << b.message();
    for (size_t i = 0; i < a->size(); ++i)
      EXPECT_TRUE((*a)[i].bitwiseEqual((*b)[i])) << "result " << i << " trial " << trial;
  }
}

/// Arguments for sampleTrainStep() with values that exercise every step.
std::vector<Tensor> sampleArguments(const Plan& plan, std::mt19937_64& rng) {
  std::vector<Tensor> arguments;
  for (size_t i = 0; i < plan.argumentCount(); ++i) {
    const BufferDesc& buffer = plan.buffers[plan.argumentBuffer(i)];
    if (buffer.name == "labels")
      arguments.push_back(filled(DType::I64, {4}, {0, 2, 1, 2}));
    else if (buffer.name == "lr")
      arguments.push_back(filled(DType::F32, {}, {0.1}));
    else if (buffer.name == "scale")
      arguments.push_back(filled(DType::F32, {}, {1024}));
    else if (buffer.name == "rng")
      arguments.push_back(filled(DType::I64, {2}, {42, 0}));
    else if (buffer.type.dtype == DType::I64)
      arguments.push_back(filled(DType::I64, {}, {0}));
    else
      arguments.push_back(randomTensor(buffer.type.dtype, buffer.type.shape, rng));
  }
  EXPECT_TRUE(rederiveArguments(plan, arguments).ok());
  return arguments;
}

std::vector<Tensor> cloneAll(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> copies;
  for (const Tensor& tensor : tensors)
    copies.push_back(*tensor.clone());
  return copies;
}

TEST(CpuBackend, PoisoningFreedTemporariesChangesNoResult) {
  Plan plan = sampleTrainStep();
  // The plan really reuses arena bytes, so poisoning has something to hit.
  uint64_t temporaryBytes = 0;
  for (const BufferDesc& buffer : plan.buffers)
    if (buffer.role == BufferRole::Temporary)
      temporaryBytes += uint64_t(buffer.type.byteSize());
  ASSERT_LT(plan.arenaBytes, temporaryBytes);

  std::mt19937_64 rng(31);
  std::vector<Tensor> plainState = sampleArguments(plan, rng);
  std::vector<Tensor> poisonedState = cloneAll(plainState);
  std::unique_ptr<Backend> poisoning = createCpuBackend({.poisonFreedTemporaries = true});
  Expected<std::unique_ptr<Executable>> plain = cpuBackend().prepare(plan);
  Expected<std::unique_ptr<Executable>> poisoned = poisoning->prepare(plan);
  ASSERT_TRUE(plain.ok() && poisoned.ok());
  for (int step = 0; step < 3; ++step) {
    Expected<std::vector<Tensor>> a = (*plain)->run(plainState);
    Expected<std::vector<Tensor>> b = (*poisoned)->run(poisonedState);
    ASSERT_TRUE(a.ok()) << a.message();
    ASSERT_TRUE(b.ok()) << b.message();
    for (size_t i = 0; i < a->size(); ++i)
      EXPECT_TRUE((*a)[i].bitwiseEqual((*b)[i])) << "step " << step << " result " << i;
    for (size_t i = 0; i < plainState.size(); ++i)
      EXPECT_TRUE(plainState[i].bitwiseEqual(poisonedState[i])) << "step " << step << " argument " << i;
  }
}

TEST(CpuBackend, AReshapesViewKeepsItsBytesPastItsInputsLastRead) {
  // neg -> reshape (a view of neg's bytes) -> exp: poisoning neg's output
  // after its last read, the reshape, would poison the view.
  Plan plan = reshapeViewPlan().plan;
  ASSERT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).message();
  std::unique_ptr<Backend> poisoning = createCpuBackend({.poisonFreedTemporaries = true});
  Expected<std::unique_ptr<Executable>> executable = poisoning->prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  std::vector<Tensor> arguments = {*Tensor::fromDoubles(DType::F32, {6}, std::vector<double>{0, 1, -1, 2, -2, 0.5})};
  Expected<std::vector<Tensor>> results = (*executable)->run(arguments);
  ASSERT_TRUE(results.ok()) << results.message();
  for (int64_t e = 0; e < 6; ++e)
    EXPECT_EQ(results->front().at(e), double(std::exp(-float(arguments[0].at(e))))) << e;
}

TEST(CpuBackend, RunsAreDeterministicAndStateIsUpdatedInPlace) {
  Plan plan = sampleTrainStep();
  std::mt19937_64 rng(32);
  std::vector<Tensor> first = sampleArguments(plan, rng);
  std::vector<Tensor> second = cloneAll(first);
  Expected<std::vector<Tensor>> a = cpuBackend().run(plan, first);
  Expected<std::vector<Tensor>> b = cpuBackend().run(plan, second);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->size(); ++i)
    EXPECT_TRUE((*a)[i].bitwiseEqual((*b)[i]));
  for (size_t i = 0; i < plan.results.size(); ++i) {
    if (plan.results[i].tiedArgument >= 0) {
      EXPECT_TRUE((*a)[i].sharesStorageWith(first[size_t(plan.results[i].tiedArgument)]));
    }
  }
  // The O2 copy the optimizer wrote is the new parameter rounded to f16.
  for (int64_t i = 0; i < first[1].elementCount(); ++i)
    EXPECT_EQ(first[2].bits16()[size_t(i)], floatToHalf(first[1].elements<float>()[size_t(i)]));
}

TEST(CpuBackend, PlanLoadedFromAFileRunsLikeTheOriginal) {
  Plan plan = sampleTrainStep();
  Expected<Plan> loaded = decodePlan(encodePlan(plan), "memory");
  ASSERT_TRUE(loaded.ok());
  std::mt19937_64 rng(33);
  std::vector<Tensor> first = sampleArguments(plan, rng);
  std::vector<Tensor> second = cloneAll(first);
  Expected<std::vector<Tensor>> a = cpuBackend().run(plan, first);
  Expected<std::vector<Tensor>> b = cpuBackend().run(*loaded, second);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->size(); ++i)
    EXPECT_TRUE((*a)[i].bitwiseEqual((*b)[i]));
}

TEST(CpuBackend, BadArgumentsAreClearErrors) {
  Plan plan = sampleTrainStep();
  std::mt19937_64 rng(34);
  std::vector<Tensor> arguments = sampleArguments(plan, rng);

  std::vector<Tensor> missing(arguments.begin(), arguments.end() - 1);
  Expected<std::vector<Tensor>> result = cpuBackend().run(plan, missing);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.message(), "plan @train_step takes 12 arguments but got 11: argument 11 'rng' "
                              "(opt_state i64[2]) is missing");

  std::vector<Tensor> empty = arguments;
  empty[4] = Tensor();
  result = cpuBackend().run(plan, empty);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.message(), "plan @train_step: argument 4 'labels' (input i64[4]) is missing (an empty tensor)");

  std::vector<Tensor> wrongShape = arguments;
  wrongShape[0] = randomTensor(DType::F32, {4, 9}, rng);
  result = cpuBackend().run(plan, wrongShape);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.message(),
            "plan @train_step: argument 0 'x' (input f32[4x8]) was given a tensor of type f32[4x9]");

  std::vector<Tensor> aliased = arguments;
  aliased[5] = aliased[1]; // the momentum buffer would be the parameter itself
  result = cpuBackend().run(plan, aliased);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.message(), "plan @train_step: argument 1 'w' (param f32[3x8]) is updated in place but shares "
                              "its storage with argument 5 'buf' (opt_state f32[3x8])");

  Plan broken = plan;
  broken.steps[2].inputs[0] = 500;
  Expected<std::unique_ptr<Executable>> prepared = cpuBackend().prepare(broken);
  ASSERT_FALSE(prepared.ok());
  EXPECT_EQ(prepared.message().rfind("plan @train_step is invalid: step 2 (elementwise from amp.cast): input 'x' "
                                     "refers to buffer %500",
                                     0),
            0u);
}

TEST(CpuBackend, RederivingStateRoundsTheSourceOnce) {
  Plan plan = sampleTrainStep();
  std::mt19937_64 rng(35);
  std::vector<Tensor> arguments = sampleArguments(plan, rng);
  arguments[1].elements<float>()[0] = 1.0f + 0x1p-11f;            // a tie: rounds to even (1.0)
  arguments[1].elements<float>()[1] = 1.0f + 0x1p-11f + 0x1p-20f; // above the tie: rounds up
  ASSERT_TRUE(rederiveArguments(plan, arguments).ok());
  EXPECT_EQ(arguments[2].bits16()[0], 0x3C00);
  EXPECT_EQ(arguments[2].bits16()[1], 0x3C01);
}

TEST(CpuBackend, CheckNumericsNamesTheFirstStepProducingNan) {
  PlanBuilder b("numerics");
  BufferId x = b.argument(tt(DType::F32, {4}), BufferRole::Input, "x");
  BufferId y = b.temporary(tt(DType::F32, {4}));
  BufferId z = b.output(tt(DType::F32, {4}));
  b.op("jit.exp", {x}, {y});
  b.op("jit.log", {x}, {z});
  b.result(z);
  Plan plan = b.finish();
  std::vector<Tensor> arguments = {filled(DType::F32, {4}, {1, 2, -3, 4})};
  std::unique_ptr<Backend> checking = createCpuBackend({.checkNumerics = true});
  Expected<std::vector<Tensor>> result = checking->run(plan, arguments);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.message(), "AMPJIT_CHECK_NUMERICS: plan @numerics, step 1 (elementwise from jit.log) produced "
                              "an inf or NaN in output 'out' (buffer %2)");
  // Without the option a NaN is data.
  EXPECT_TRUE(cpuBackend().run(plan, arguments).ok());
}

TEST(CpuBackend, CheckNumericsBlamesAnArgumentThatArrivesHoldingAnInf) {
  // The first step reads the inf and passes it on; the message must name the
  // argument it came in, not that step.
  PlanBuilder b("numerics");
  BufferId x = b.argument(tt(DType::F32, {4}), BufferRole::Input, "x");
  BufferId w = b.argument(tt(DType::F32, {4}), BufferRole::Param, "fc1.weight");
  BufferId labels = b.argument(tt(DType::I64, {4}), BufferRole::Input, "labels");
  BufferId z = b.output(tt(DType::F32, {4}));
  b.op("jit.add", {x, w}, {z});
  b.result(z);
  (void)labels;
  Plan plan = b.finish();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<Tensor> arguments = {filled(DType::F32, {4}, {1, 2, 3, 4}), filled(DType::F32, {4}, {0, inf, 0, 0}),
                                   filled(DType::I64, {4}, {0, 1, 2, 3})};
  std::unique_ptr<Backend> checking = createCpuBackend({.checkNumerics = true});
  Expected<std::vector<Tensor>> result = checking->run(plan, arguments);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.message(), "AMPJIT_CHECK_NUMERICS: plan @numerics: argument 1 'fc1.weight' (param f32[4]) holds "
                              "an inf or NaN before the step runs");
  // A finite argument passes, and the step's own inf is still the step's.
  arguments[1] = filled(DType::F32, {4}, {0, 3.0e38, 0, 0});
  arguments[0] = filled(DType::F32, {4}, {1, 3.0e38, 3, 4});
  result = checking->run(plan, arguments);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.message().find("step 0 (elementwise from jit.add) produced an inf or NaN"), std::string::npos)
      << result.message();
}

TEST(CpuBackend, CheckNumericsSwitchIsOnForAnyValueButEmptyOrZero) {
  // The frontend reads the same variable to compile unfused; both layers
  // share environmentFlag, so "yes" cannot turn on one and not the other.
  PlanBuilder b("numerics");
  BufferId x = b.argument(tt(DType::F32, {2}), BufferRole::Input, "x");
  BufferId y = b.output(tt(DType::F32, {2}));
  b.op("jit.log", {x}, {y});
  b.result(y);
  Plan plan = b.finish();
  std::vector<Tensor> arguments = {filled(DType::F32, {2}, {-1, 1})};
  for (auto [value, checks] : {std::pair{"1", true}, {"yes", true}, {"0", false}, {"", false}}) {
    ampjit::testing::ScopedEnvironment numerics("AMPJIT_CHECK_NUMERICS", value);
    EXPECT_EQ(environmentFlag("AMPJIT_CHECK_NUMERICS"), checks) << "'" << value << "'";
    EXPECT_EQ(createCpuBackend()->run(plan, arguments).ok(), !checks) << "'" << value << "'";
  }
  EXPECT_FALSE(environmentFlag("AMPJIT_CHECK_NUMERICS"));
}

TEST(Environment, ASwitchOnByDefaultIsOnUnsetAndOffAtEmptyOrZero) {
  // AMPJIT_CUDA_CACHE_HINTS and AMPJIT_CUDA_FUSED_BN: the same rule as every
  // switch once set.
  const char* name = "AMPJIT_TEST_SWITCH_ON_BY_DEFAULT";
  EXPECT_TRUE(environmentFlag(name, /*whenUnset=*/true));
  EXPECT_FALSE(environmentFlag(name));
  for (auto [value, on] : {std::pair{"1", true}, {"yes", true}, {"0", false}, {"", false}}) {
    ampjit::testing::ScopedEnvironment set(name, value);
    EXPECT_EQ(environmentFlag(name, /*whenUnset=*/true), on) << "'" << value << "'";
    EXPECT_EQ(environmentFlag(name), on) << "'" << value << "'";
  }
}

//===----------------------------------------------------------------------===//
// A mixed-precision train step with the scaler in the graph
//===----------------------------------------------------------------------===//

/// y = x @ w in f16, mse loss in f32, scaled backward, all_finite over the
/// f16 gradient, SGD with momentum predicated on it, the step count
/// incremented under the same predicate, then the scale update.
Plan scaledTrainStep() {
  PlanBuilder b("scaled_step");
  BufferId x = b.argument(tt(DType::F16, {8, 4}), BufferRole::Input, "x");
  BufferId target = b.argument(tt(DType::F32, {8, 3}), BufferRole::Input, "y");
  BufferId w = b.argument(tt(DType::F32, {4, 3}), BufferRole::Param, "w");
  BufferId momentum = b.argument(tt(DType::F32, {4, 3}), BufferRole::OptState, "buf");
  BufferId stepCount = b.argument(tt(DType::I64, {}), BufferRole::OptState, "step");
  BufferId lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper, "lr");
  BufferId scale = b.argument(tt(DType::F32, {}), BufferRole::ScalerState, "scale");
  BufferId good = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "good");
  BufferId bad = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "bad");
  BufferId skipped = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "skipped");

  BufferId w16 = b.temporary(tt(DType::F16, {4, 3}));
  b.op("amp.cast", {w}, {w16});
  BufferId y16 = b.temporary(tt(DType::F16, {8, 3}));
  b.op("jit.matmul", {x, w16}, {y16});
  BufferId y32 = b.temporary(tt(DType::F32, {8, 3}));
  b.op("amp.cast", {y16}, {y32});
  BufferId loss = b.output(tt(DType::F32, {}));
  b.op("jit.mse_loss", {y32, target}, {loss});
  BufferId scaled = b.temporary(tt(DType::F32, {}));
  b.op("amp.scale_loss", {loss, scale}, {scaled});
  BufferId dy32 = b.temporary(tt(DType::F32, {8, 3}));
  b.op("jit.mse_loss_grad", {scaled, y32, target}, {dy32});
  BufferId dy16 = b.temporary(tt(DType::F16, {8, 3}));
  b.op("amp.cast", {dy32}, {dy16});
  BufferId gw16 = b.temporary(tt(DType::F16, {4, 3}));
  b.op("jit.matmul", {x, dy16}, {gw16}, {{"transpose_lhs", true}});
  BufferId ok = b.temporary(tt(DType::I1, {}));
  b.op("amp.all_finite", {gw16}, {ok});
  BufferId one = b.constant(tt(DType::F32, {}), std::vector<double>{1.0});
  BufferId inv = b.temporary(tt(DType::F32, {}));
  b.op("jit.div", {one, scale}, {inv});
  b.op("jit.sgd_update", {w, gw16, momentum, stepCount, lr, inv, ok, kNoBuffer}, {w, momentum},
       {{"momentum", 0.9}, {"dampening", 0.1}});
  // step = ok ? step + 1 : step, as one fused program over i64 and f64.
  Step increment;
  increment.kind = StepKind::FusedElementwise;
  increment.computeType = DType::F64;
  FusedElementwiseParams program;
  program.program = {
      {ElementwiseOp::Load, DType::I64, {0, 0, 0}, 0},  {ElementwiseOp::Load, DType::I1, {1, 0, 0}, 0},
      {ElementwiseOp::Convert, DType::F64, {0, 0, 0}, 0}, {ElementwiseOp::Constant, DType::F64, {0, 0, 0}, 1},
      {ElementwiseOp::Add, DType::F64, {2, 3, 0}, 0},     {ElementwiseOp::Convert, DType::I64, {4, 0, 0}, 0},
      {ElementwiseOp::Select, DType::I64, {1, 5, 0}, 0},
  };
  program.outputs = {6};
  increment.params = program;
  increment.inputs = {stepCount, ok};
  increment.outputs = {stepCount};
  b.step(increment);
  b.op("amp.update_scale", {scale, good, bad, skipped, ok}, {scale, good, bad, skipped},
       {{"growth_interval", int64_t(2)}});
  b.result(loss);
  b.result(w, 2);
  b.result(momentum, 3);
  b.result(stepCount, 4);
  b.result(scale, 6);
  b.result(good, 7);
  b.result(bad, 8);
  b.result(skipped, 9);
  return b.finish();
}

TEST(CpuBackend, ADeferredUpdateRunsAtTheNextRunOrWhenCompleted) {
  DeferredSgdStep parts = deferredSgdStep();
  Expected<std::unique_ptr<Executable>> executable = cpuBackend().prepare(parts.plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  Executable& step = **executable;
  std::vector<double> w = {1, 2, 3, 4};
  std::vector<Tensor> arguments = {*Tensor::fromDoubles(DType::F32, {4}, std::vector<double>{1, 1, 1, 1}),
                                   *Tensor::fromDoubles(DType::F32, {4}, w),
                                   *Tensor::fromDoubles(DType::F32, {}, std::vector<double>{0.5})};
  auto loss = [&](const std::vector<double>& x) {
    double sum = 0;
    for (size_t i = 0; i < 4; ++i)
      sum += double(float(w[i] * x[i]));
    return sum;
  };

  // The first run has no earlier update to do, and leaves its own pending.
  Expected<std::vector<Tensor>> results = step.run(arguments);
  ASSERT_TRUE(results.ok()) << results.message();
  EXPECT_EQ(results->at(0).at(0), loss({1, 1, 1, 1}));
  EXPECT_TRUE(step.deferredPending());
  EXPECT_EQ(arguments[1].toDoubles(), w);

  // The second run first does the first run's update, with the first run's
  // gradient and lr (this run's lr is 4).
  for (size_t i = 0; i < 4; ++i)
    w[i] -= 0.5 * 1;
  arguments[0] = *Tensor::fromDoubles(DType::F32, {4}, std::vector<double>{1, 2, 3, 4});
  arguments[2] = *Tensor::fromDoubles(DType::F32, {}, std::vector<double>{4});
  results = step.run(arguments);
  ASSERT_TRUE(results.ok()) << results.message();
  EXPECT_EQ(results->at(0).at(0), loss({1, 2, 3, 4}));
  EXPECT_EQ(arguments[1].toDoubles(), w);

  // Another w while an update is pending for this one is refused, naming it.
  std::vector<Tensor> otherState = arguments;
  otherState[1] = *Tensor::fromDoubles(DType::F32, {4}, w);
  Expected<std::vector<Tensor>> refused = step.run(otherState);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.message(), "plan @deferred_sgd: the last run's optimizer update is still pending (deferred) for "
                               "other state than argument 1 'w' (param f32[4]) of this run; complete it first "
                               "(Executable::completeDeferred)");
  Status wrongCompletion = step.completeDeferred(otherState);
  EXPECT_EQ(wrongCompletion.message(), "plan @deferred_sgd: completing its deferred update: argument 1 'w' (param "
                                       "f32[4]) is not the tensor the pending update was left for");

  // Completing does the second run's update alone, once; inputs may be empty.
  std::vector<Tensor> stateOnly = {Tensor(), arguments[1], Tensor()};
  ASSERT_TRUE(step.completeDeferred(stateOnly).ok());
  EXPECT_FALSE(step.deferredPending());
  for (size_t i = 0; i < 4; ++i)
    w[i] -= 4 * double(i + 1);
  EXPECT_EQ(arguments[1].toDoubles(), w);
  ASSERT_TRUE(step.completeDeferred(stateOnly).ok());
  EXPECT_EQ(arguments[1].toDoubles(), w);

  // Nothing pending: the next run skips the deferred steps, and another w is fine.
  results = step.run(otherState);
  ASSERT_TRUE(results.ok()) << results.message();
  EXPECT_EQ(arguments[1].toDoubles(), w);
}

TEST(CpuBackend, AnInfInOneStepSkipsExactlyThatStep) {
  Plan plan = scaledTrainStep();
  ASSERT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).message();
  Expected<std::unique_ptr<Executable>> executable = cpuBackend().prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  std::mt19937_64 rng(36);
  std::vector<Tensor> state = {Tensor(),
                               Tensor(),
                               randomTensor(DType::F32, {4, 3}, rng),
                               filled(DType::F32, {4, 3}, {0.0}),
                               filled(DType::I64, {}, {0}),
                               filled(DType::F32, {}, {0.05}),
                               filled(DType::F32, {}, {256}),
                               filled(DType::I64, {}, {0}),
                               filled(DType::I64, {}, {0}),
                               filled(DType::I64, {}, {0})};
  const int kBadStep = 3;
  std::vector<double> losses;
  for (int step = 0; step < 6; ++step) {
    state[0] = randomTensor(DType::F16, {8, 4}, rng);
    state[1] = randomTensor(DType::F32, {8, 3}, rng);
    if (step == kBadStep)
      state[0].bits16()[5] = 0x7C00; // an inf in the data: the gradient overflows
    std::vector<Tensor> before = cloneAll(state);
    Expected<std::vector<Tensor>> results = (*executable)->run(state);
    ASSERT_TRUE(results.ok()) << results.message();
    losses.push_back((*results)[0].at(0));
    float scaleBefore = before[6].elements<float>()[0];
    float scaleAfter = state[6].elements<float>()[0];
    if (step == kBadStep) {
      // Parameter, momentum buffer and step count bit-identical; the scale backed off.
      EXPECT_TRUE(state[2].bitwiseEqual(before[2]));
      EXPECT_TRUE(state[3].bitwiseEqual(before[3]));
      EXPECT_TRUE(state[4].bitwiseEqual(before[4]));
      EXPECT_EQ(scaleAfter, scaleBefore * 0.5f);
      EXPECT_EQ(state[7].at(0), 0);
      EXPECT_EQ(state[9].at(0), 1);
    } else {
      EXPECT_FALSE(state[2].bitwiseEqual(before[2])) << "step " << step;
      EXPECT_EQ(state[4].at(0), before[4].at(0) + 1);
    }
  }
  EXPECT_EQ(state[4].at(0), 5);  // six steps, one skipped
  EXPECT_EQ(state[9].at(0), 1);  // skipped steps
  // 256 -> (2 clean) 512 -> (1 clean) -> overflow 256 -> (2 clean) 512.
  EXPECT_EQ(state[6].elements<float>()[0], 512.0f);
  EXPECT_TRUE(std::isnan(losses[kBadStep]) || std::isinf(losses[kBadStep]));
}

} // namespace
