// The CUDA update kernels (loss scaler, optimizer updates and their
// multi-tensor groups, layout copies) against the CPU backend. Kernels whose
// arithmetic is the CPU's operation for operation must agree exactly (slack
// 0: equal values, NaN for NaN); Adam's bias corrections go through the
// device's pow, so Adam agrees within the usual tolerance.

#include "GpuTestUtil.h"
#include "cuda/DeviceStep.h"
#include "cuda/UpdateKernels.h"

#include "ampjit/runtime/LossScaler.h"
#include "ampjit/runtime/StepBuilder.h"

#include "RuntimeTestUtil.h"

#ifdef AMPJIT_GPU_TESTS_ON_EMULATION
#include "CudaEmulation.h"
#endif

#include <cfloat>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

namespace ampjit::runtime::gputest {
namespace {

using test::PlanBuilder;
using test::tt;

constexpr DType kGradTypes[] = {DType::F32, DType::F16, DType::BF16};

/// A one-op plan (every result tied as `tied` says) or a failed assertion.
Plan singleOp(std::string_view op, std::vector<std::optional<TensorType>> operands, std::vector<TensorType> results,
              const AttributeMap& attributes = {}, std::vector<int> tied = {}) {
  Expected<Plan> plan = buildSingleOpPlan(op, operands, results, attributes, tied);
  EXPECT_TRUE(plan.ok()) << op << ": " << plan.message();
  return plan.ok() ? std::move(*plan) : Plan{};
}

/// Every result and every argument after the run, CUDA against CPU.
void expectAgree(const BothRuns& both, double slack) {
  ASSERT_EQ(both.cpuResults.size(), both.cudaResults.size());
  for (size_t i = 0; i < both.cpuResults.size(); ++i)
    EXPECT_TRUE(allClose(both.cpuResults[i], both.cudaResults[i], slack)) << "result " << i;
  ASSERT_EQ(both.cpuArguments.size(), both.cudaArguments.size());
  for (size_t i = 0; i < both.cpuArguments.size(); ++i)
    EXPECT_TRUE(allClose(both.cpuArguments[i], both.cudaArguments[i], slack)) << "argument " << i;
}

Tensor scalar(DType dtype, double value) { return *Tensor::fromDoubles(dtype, {}, std::vector<double>{value}); }

//===----------------------------------------------------------------------===//
// Loss scaler
//===----------------------------------------------------------------------===//

TEST_F(GpuTest, ScaleLossInEveryPrecision) {
  struct Case {
    DType dtype;
    Shape shape;
    double loss, scale;
  };
  const Case cases[] = {
      {DType::F32, {}, 0.75, 65536},  {DType::F16, {1}, 2, 65536}, // overflows f16 to inf
      {DType::BF16, {}, -1.5, 1024},  {DType::F64, {1}, 0.1, 3},
      {DType::F16, {}, 0.001, 0.5},   {DType::F32, {}, std::numeric_limits<double>::quiet_NaN(), 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtypeName(c.dtype)));
    Plan plan = singleOp("amp.scale_loss", {tt(c.dtype, c.shape), tt(DType::F32, {})}, {tt(c.dtype, c.shape)});
    std::vector<Tensor> arguments = {*Tensor::fromDoubles(c.dtype, c.shape, std::vector<double>{c.loss}),
                                     scalar(DType::F32, c.scale)};
    Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments);
    ASSERT_TRUE(both.ok()) << both.message();
    expectAgree(*both, 0.0);
  }
}

/// `count` gradients of rotating dtypes and sizes, some odd and some larger
/// than a block.
std::vector<TensorType> manyGradientTypes(size_t count) {
  const int64_t sizes[] = {1, 3, 257, 1000, 1029, 64, 5};
  const DType dtypes[] = {DType::F16, DType::BF16, DType::F32, DType::F64};
  std::vector<TensorType> types;
  for (size_t i = 0; i < count; ++i)
    types.push_back(tt(dtypes[i % 4], {sizes[i % 7]}));
  return types;
}

double runAllFinite(CudaBackend& cuda, Backend& cpu, const std::vector<TensorType>& types,
                    const std::function<void(std::vector<Tensor>&)>& edit) {
  std::vector<std::optional<TensorType>> operands(types.begin(), types.end());
  Plan plan = singleOp("amp.all_finite", operands, {tt(DType::I1, {})});
  std::vector<Tensor> arguments = randomArguments(plan, 3, -100, 100);
  edit(arguments);
  Expected<BothRuns> both = runOnBoth(cpu, cuda, plan, arguments);
  EXPECT_TRUE(both.ok()) << both.message();
  if (!both.ok())
    return -1;
  expectAgree(*both, 0.0);
  return both->cudaResults[0].at(0);
}

TEST_F(GpuTest, AllFiniteFindsOneBadElementAmongManyTensors) {
  // 300 tensors: three launches of the multi-tensor kernel.
  for (size_t count : {size_t(1), size_t(7), size_t(300)}) {
    SCOPED_TRACE(count);
    std::vector<TensorType> types = manyGradientTypes(count);
    EXPECT_EQ(runAllFinite(*cuda, *cpu, types, [](std::vector<Tensor>&) {}), 1.0);
    double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    for (double bad : {inf, -inf, nan}) {
      // The last element of the last tensor.
      EXPECT_EQ(runAllFinite(*cuda, *cpu, types,
                             [&](std::vector<Tensor>& a) { a.back().set(a.back().elementCount() - 1, bad); }),
                0.0);
      // One element in the middle of one tensor (in the second chunk when there is one).
      size_t victim = count > 150 ? 150 : count / 2;
      EXPECT_EQ(runAllFinite(*cuda, *cpu, types,
                             [&](std::vector<Tensor>& a) {
                               Tensor& t = a[victim];
                               t.set(t.elementCount() / 2, bad);
                             }),
                0.0);
    }
  }
}

TEST_F(GpuTest, AllFiniteFindsABadElementAtEveryPositionOfEveryFloatingType) {
  // The kernel reads 16 bytes at a time and the tail element by element: an
  // inf or NaN in any lane of a vector (either half of a 32-bit word, either
  // word of an f64) or in the tail clears the flag.
  const double bads[] = {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                         std::numeric_limits<double>::quiet_NaN()};
  for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    for (int64_t size : {int64_t(1), int64_t(37), int64_t(64)}) {
      std::vector<TensorType> types = {tt(dtype, {size}), tt(DType::F32, {5})};
      for (int64_t position = 0; position < size; ++position)
        ASSERT_EQ(runAllFinite(*cuda, *cpu, types,
                               [&](std::vector<Tensor>& a) { a[0].set(position, bads[position % 3]); }),
                  0.0)
            << dtypeName(dtype) << "[" << size << "] element " << position;
    }
  }
}

TEST_F(GpuTest, AllFiniteFindsABadElementInEveryChunkOfALargeTensor) {
  // Each block checks 16 KB of one tensor: a bad element at either edge of
  // every 16 KB chunk of a tensor of three chunks and a tail, beside a
  // tensor of one, is found whichever block holds it.
  constexpr int64_t kChunkBytes = 16 * 1024;
  for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    int64_t perChunk = kChunkBytes / int64_t(dtypeSize(dtype));
    int64_t size = 3 * perChunk + 5;
    std::vector<TensorType> types = {tt(DType::F16, {7}), tt(dtype, {size})};
    ASSERT_EQ(runAllFinite(*cuda, *cpu, types, [](std::vector<Tensor>&) {}), 1.0) << dtypeName(dtype);
    for (int64_t position : {int64_t(0), perChunk - 1, perChunk, 2 * perChunk - 1, 2 * perChunk, 3 * perChunk - 1,
                             3 * perChunk, size - 1})
      EXPECT_EQ(runAllFinite(*cuda, *cpu, types,
                             [&](std::vector<Tensor>& a) { a[1].set(position, std::numeric_limits<double>::infinity()); }),
                0.0)
          << dtypeName(dtype) << "[" << size << "] element " << position;
  }
}

TEST_F(GpuTest, TheInverseScaleInTheFinitenessChecksLaunchMatchesTheCpu) {
  // inv_scale = one / scale runs in the check's last launch (one thread),
  // and alone when the check has nothing to read (empty tensors only).
  struct Case {
    std::vector<TensorType> grads;
    bool bad;
  };
  const Case cases[] = {
      {{tt(DType::F16, {3000}), tt(DType::F32, {0})}, false},
      {{tt(DType::F16, {3000}), tt(DType::F32, {0})}, true},
      {{tt(DType::F32, {0}), tt(DType::BF16, {0, 4})}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.grads.size() << " gradients, the first " << typeToString(c.grads[0])
                                      << (c.bad ? ", an inf" : ""));
    PlanBuilder b("check_then_inverse");
    std::vector<BufferId> grads;
    for (const TensorType& type : c.grads)
      grads.push_back(b.argument(type, BufferRole::Input));
    BufferId one = b.argument(tt(DType::F32, {}), BufferRole::Hyper);
    BufferId scale = b.argument(tt(DType::F32, {}), BufferRole::ScalerState);
    BufferId ok = b.output(tt(DType::I1, {})), inverse = b.output(tt(DType::F32, {}));
    b.op("amp.all_finite", grads, {ok});
    b.op("jit.div", {one, scale}, {inverse});
    b.result(ok);
    b.result(inverse);
    Plan plan = b.finish();
    ASSERT_EQ(cuda::launchGroups(plan), (std::vector<std::pair<size_t, size_t>>{{0, 2}}));
    std::vector<Tensor> arguments = randomArguments(plan, 62, -4.0, 4.0);
    if (c.bad)
      arguments[0].set(1234, std::numeric_limits<double>::infinity());
    arguments[c.grads.size()].set(0, 1.0);
    arguments[c.grads.size() + 1].set(0, 3.0); // 1/3: rounded, not exact
    Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments);
    ASSERT_TRUE(both.ok()) << both.message();
    expectAgree(*both, 0.0);
    EXPECT_EQ(both->cudaResults[0].at(0), c.bad ? 0.0 : 1.0);
    EXPECT_EQ(both->cudaResults[1].at(0), double(1.0f / 3.0f));
  }
}

TEST_F(GpuTest, AllFiniteIsResetEveryRun) {
  // The flag is set to 1 by each run: a finite run after a non-finite one says 1.
  Plan plan = singleOp("amp.all_finite", {tt(DType::F16, {1000})}, {tt(DType::I1, {})});
  std::vector<Tensor> finite = randomArguments(plan, 4);
  std::vector<Tensor> bad = randomArguments(plan, 4);
  bad[0].set(999, std::numeric_limits<double>::infinity());
  Expected<std::unique_ptr<Executable>> executable = cuda->prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  for (int run = 0; run < 4; ++run) {
    std::vector<Tensor> arguments = {*cuda->toDevice(run % 2 == 0 ? bad[0] : finite[0])};
    Expected<std::vector<Tensor>> results = (*executable)->run(arguments);
    ASSERT_TRUE(results.ok()) << results.message();
    EXPECT_EQ(cuda->toHost((*results)[0])->at(0), run % 2 == 0 ? 0.0 : 1.0) << "run " << run;
  }
}

TEST_F(GpuTest, AllFiniteSkipsEmptyTensors) {
  std::vector<TensorType> types = {tt(DType::F32, {0}), tt(DType::F16, {3}), tt(DType::BF16, {0, 4})};
  EXPECT_EQ(runAllFinite(*cuda, *cpu, types, [](std::vector<Tensor>&) {}), 1.0);
  EXPECT_EQ(runAllFinite(*cuda, *cpu, types,
                         [](std::vector<Tensor>& a) { a[1].set(2, std::numeric_limits<double>::quiet_NaN()); }),
            0.0);
}

TEST_F(GpuTest, UnscaleAndCheckInPlaceAndIntoNewBuffers) {
  for (size_t count : {size_t(2), size_t(130)}) {
    std::vector<TensorType> grads = manyGradientTypes(count);
    std::vector<std::optional<TensorType>> operands = {tt(DType::F32, {})};
    std::vector<TensorType> results;
    std::vector<int> tiedInPlace;
    for (size_t i = 0; i < grads.size(); ++i) {
      operands.push_back(grads[i]);
      results.push_back(grads[i]);
      tiedInPlace.push_back(int(i) + 1);
    }
    results.push_back(tt(DType::I1, {}));
    tiedInPlace.push_back(-1);
    for (bool inPlace : {true, false}) {
      // 1/1024 underflows some f16 values; 1024 overflows some to inf.
      for (double invScale : {1.0 / 1024, 1024.0, 0.3}) {
        for (bool plantNan : {false, true}) {
          SCOPED_TRACE(::testing::Message() << count << " grads, in place " << inPlace << ", inv_scale " << invScale
                                            << ", nan " << plantNan);
          Plan plan = singleOp("amp.unscale_and_check", operands, results, {},
                               inPlace ? tiedInPlace : std::vector<int>{});
          std::vector<Tensor> arguments = randomArguments(plan, 5, -100, 100);
          arguments[0] = scalar(DType::F32, invScale);
          if (plantNan)
            arguments.back().set(arguments.back().elementCount() - 1, std::numeric_limits<double>::quiet_NaN());
          Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments);
          ASSERT_TRUE(both.ok()) << both.message();
          expectAgree(*both, 0.0);
          // (An inv_scale above 1 may or may not overflow a small f16 gradient.)
          if (plantNan) {
            EXPECT_EQ(both->cudaResults.back().at(0), 0.0);
          } else if (invScale <= 1) {
            EXPECT_EQ(both->cudaResults.back().at(0), 1.0);
          }
        }
      }
    }
  }
}

/// Runs amp.update_scale (state tied in place) once per flag on both
/// backends and on the host reference, checking all three agree exactly
/// after every update.
void checkScalerSequence(Backend& cpu, CudaBackend& cuda, float initialScale, const std::vector<bool>& flags,
                         const AttributeMap& attributes, const UpdateScaleParams& params) {
  TensorType scaleType = tt(DType::F32, {}), counter = tt(DType::I64, {}), flag = tt(DType::I1, {});
  Plan plan = singleOp("amp.update_scale", {scaleType, counter, counter, counter, flag},
                       {scaleType, counter, counter, counter}, attributes, {0, 1, 2, 3});
  std::vector<Tensor> cpuState = {scalar(DType::F32, initialScale), scalar(DType::I64, 0), scalar(DType::I64, 0),
                                  scalar(DType::I64, 0)};
  std::vector<Tensor> cudaState;
  for (const Tensor& t : cpuState)
    cudaState.push_back(*cuda.toDevice(t));
  Expected<std::unique_ptr<Executable>> cpuExecutable = cpu.prepare(plan);
  Expected<std::unique_ptr<Executable>> cudaExecutable = cuda.prepare(plan);
  ASSERT_TRUE(cpuExecutable.ok() && cudaExecutable.ok()) << cudaExecutable.message();
  LossScalerState reference{initialScale, 0, 0, 0};
  for (size_t i = 0; i < flags.size(); ++i) {
    reference = updateLossScale(reference, flags[i], params);
    Tensor flagTensor = scalar(DType::I1, flags[i] ? 1 : 0);
    std::vector<Tensor> cpuArguments = cpuState, cudaArguments = cudaState;
    cpuArguments.push_back(flagTensor);
    cudaArguments.push_back(*cuda.toDevice(flagTensor));
    ASSERT_TRUE((*cpuExecutable)->run(cpuArguments).ok());
    Expected<std::vector<Tensor>> results = (*cudaExecutable)->run(cudaArguments);
    ASSERT_TRUE(results.ok()) << results.message();
    float cpuScale = cpuState[0].elements<float>()[0];
    Tensor cudaScaleTensor = *cuda.toHost(cudaState[0]);
    float cudaScale = cudaScaleTensor.elements<float>()[0];
    ASSERT_EQ(std::memcmp(&cpuScale, &cudaScale, sizeof(float)), 0)
        << "update " << i << ": cpu " << cpuScale << ", cuda " << cudaScale;
    ASSERT_EQ(cudaScale, reference.scale) << "update " << i;
    int64_t expected[] = {reference.goodSteps, reference.badSteps, reference.skippedSteps};
    for (int k = 0; k < 3; ++k) {
      ASSERT_EQ(cpuState[size_t(k) + 1].elements<int64_t>()[0], expected[k]) << "update " << i << " counter " << k;
      ASSERT_EQ(cuda.toHost(cudaState[size_t(k) + 1])->elements<int64_t>()[0], expected[k])
          << "update " << i << " counter " << k;
    }
  }
}

TEST_F(GpuTest, UpdateScaleSequencesMatchTheCpuBitForBit) {
  std::mt19937 rng(6);
  std::vector<bool> mostlyFinite;
  for (int i = 0; i < 60; ++i)
    mostlyFinite.push_back(rng() % 5 != 0);
  {
    SCOPED_TRACE("PyTorch defaults with a short growth interval");
    UpdateScaleParams params;
    params.growthInterval = 3;
    checkScalerSequence(*cpu, *cuda, 65536.0f, mostlyFinite, {{"growth_interval", int64_t(3)}}, params);
  }
  {
    SCOPED_TRACE("growth after the interval, then backoff by 0.25");
    UpdateScaleParams params;
    params.growthInterval = 2;
    params.backoffFactor = 0.25;
    checkScalerSequence(*cpu, *cuda, 4.0f, {true, true, false, true, true, true, false, false},
                        {{"growth_interval", int64_t(2)}, {"backoff_factor", 0.25}}, params);
  }
  {
    SCOPED_TRACE("Paddle: backoff every 2 overflows, min_scale 1");
    UpdateScaleParams params;
    params.growthInterval = 2;
    params.backoffInterval = 2;
    params.minScale = 1.0;
    std::vector<bool> flags = {false, true, false, false, false, false, false, false, true, true};
    flags.insert(flags.end(), mostlyFinite.begin(), mostlyFinite.end());
    checkScalerSequence(*cpu, *cuda, 3.0f, flags,
                        {{"growth_interval", int64_t(2)}, {"backoff_interval", int64_t(2)}, {"min_scale", 1.0}},
                        params);
  }
  {
    SCOPED_TRACE("never grows to inf");
    UpdateScaleParams params;
    params.growthInterval = 1;
    checkScalerSequence(*cpu, *cuda, FLT_MAX / 1.5f, {true, true, false, true}, {{"growth_interval", int64_t(1)}},
                        params);
  }
  {
    SCOPED_TRACE("apex: growth capped at max_loss_scale, backoff floored at min_loss_scale");
    UpdateScaleParams params;
    params.growthInterval = 1;
    params.growthFactor = 3.0;
    params.minScale = 2.0;
    params.maxScale = 100.0;
    checkScalerSequence(*cpu, *cuda, 5.0f, {true, true, true, false, true, false, false, false, false, true},
                        {{"growth_interval", int64_t(1)}, {"growth_factor", 3.0}, {"min_scale", 2.0},
                         {"max_scale", 100.0}},
                        params);
  }
  {
    SCOPED_TRACE("a growth factor that is not a power of two rounds once");
    UpdateScaleParams params;
    params.growthInterval = 1;
    params.growthFactor = 1.1;
    params.backoffFactor = 0.3;
    checkScalerSequence(*cpu, *cuda, 3.3f, {true, true, true, false, true, false},
                        {{"growth_interval", int64_t(1)}, {"growth_factor", 1.1}, {"backoff_factor", 0.3}}, params);
  }
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

struct SgdConfig {
  double momentum = 0, dampening = 0, weightDecay = 0;
  bool nesterov = false, maximize = false, withStep = false;
};

const SgdConfig kSgdConfigs[] = {
    {},
    {.momentum = 0.9},
    {.momentum = 0.9, .dampening = 0.5, .withStep = true},
    {.momentum = 0.9, .nesterov = true},
    {.momentum = 0.9, .nesterov = true, .withStep = true},
    {.weightDecay = 0.01, .maximize = true},
    {.momentum = 0.5, .weightDecay = 0.1, .maximize = true, .withStep = true},
};

AttributeMap sgdAttributes(const SgdConfig& c) {
  return {{"momentum", c.momentum},
          {"dampening", c.dampening},
          {"weight_decay", c.weightDecay},
          {"nesterov", c.nesterov},
          {"maximize", c.maximize}};
}

struct AdamConfig {
  double weightDecay = 0;
  bool decoupled = false, maximize = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool amsgrad = false; ///< with operand max_exp_avg_sq
};

const AdamConfig kAdamConfigs[] = {
    {},
    {.weightDecay = 0.01},
    {.weightDecay = 0.01, .decoupled = true},
    {.weightDecay = 0.1, .decoupled = true, .maximize = true, .beta1 = 0.5, .beta2 = 0.9, .eps = 1e-3},
    {.maximize = true},
    {.weightDecay = 0.01, .amsgrad = true},
    {.weightDecay = 0.1, .decoupled = true, .maximize = true, .beta1 = 0.5, .beta2 = 0.9, .eps = 1e-3, .amsgrad = true},
};
const AdamConfig& kAmsgradConfig = kAdamConfigs[6];

AttributeMap adamAttributes(const AdamConfig& c) {
  return {{"weight_decay", c.weightDecay}, {"decoupled_weight_decay", c.decoupled}, {"maximize", c.maximize},
          {"beta1", c.beta1},             {"beta2", c.beta2},                       {"eps", c.eps}};
}

/// One optimizer update's operand and result types and ties, as the
/// StepBuilder takes them. `copy` is the O2 copy's dtype or nullopt.
struct OptimizerOp {
  std::string name;
  std::vector<std::optional<TensorType>> operands;
  std::vector<TensorType> results;
  std::vector<int> tied;
  AttributeMap attributes;
};

OptimizerOp sgdOp(const SgdConfig& c, DType paramType, DType gradType, Shape shape, std::optional<DType> copy,
                  bool withInvScale, bool withPredicate) {
  OptimizerOp op{"jit.sgd_update", {}, {}, {}, sgdAttributes(c)};
  TensorType param = tt(paramType, shape);
  bool momentum = c.momentum != 0;
  op.operands = {param,
                 tt(gradType, shape),
                 momentum ? std::optional(param) : std::nullopt,
                 c.withStep ? std::optional(tt(DType::I64, {})) : std::nullopt,
                 tt(DType::F32, {}),
                 withInvScale ? std::optional(tt(DType::F32, {})) : std::nullopt,
                 withPredicate ? std::optional(tt(DType::I1, {})) : std::nullopt,
                 copy ? std::optional(tt(*copy, shape)) : std::nullopt};
  op.results = {param};
  op.tied = {0};
  if (momentum) {
    op.results.push_back(param);
    op.tied.push_back(2);
  }
  if (copy) {
    op.results.push_back(tt(*copy, shape));
    op.tied.push_back(7);
  }
  return op;
}

OptimizerOp adamOp(const AdamConfig& c, DType paramType, DType gradType, Shape shape, std::optional<DType> copy,
                   bool withInvScale, bool withPredicate) {
  OptimizerOp op{"jit.adam_update", {}, {}, {}, adamAttributes(c)};
  TensorType param = tt(paramType, shape);
  op.operands = {param,
                 tt(gradType, shape),
                 param,
                 param,
                 c.amsgrad ? std::optional(param) : std::nullopt,
                 tt(DType::I64, {}),
                 tt(DType::F32, {}),
                 withInvScale ? std::optional(tt(DType::F32, {})) : std::nullopt,
                 withPredicate ? std::optional(tt(DType::I1, {})) : std::nullopt,
                 copy ? std::optional(tt(*copy, shape)) : std::nullopt};
  op.results = {param, param, param};
  op.tied = {0, 2, 3};
  if (c.amsgrad) {
    op.results.push_back(param);
    op.tied.push_back(int(adam_slot::kMaxExpAvgSq));
  }
  if (copy) {
    op.results.push_back(tt(*copy, shape));
    op.tied.push_back(int(adam_slot::kParamCopy));
  }
  return op;
}

/// Arguments for a one-op optimizer plan: random state and gradients, a
/// small lr, exp_avg_sq non-negative, the given inv_scale, step and predicate.
std::vector<Tensor> optimizerArguments(const Plan& plan, const OptimizerOp& op, uint32_t seed, double invScale,
                                       int64_t step, bool predicate) {
  std::vector<Tensor> arguments = randomArguments(plan, seed, -2, 2);
  bool adam = op.name == "jit.adam_update";
  size_t stepSlot = adam ? adam_slot::kStep : sgd_slot::kStep, lrSlot = adam ? adam_slot::kLr : sgd_slot::kLr;
  size_t invSlot = adam ? adam_slot::kInvScale : sgd_slot::kInvScale;
  size_t predicateSlot = adam ? adam_slot::kPredicate : sgd_slot::kPredicate;
  size_t argument = 0;
  for (size_t slot = 0; slot < op.operands.size(); ++slot) {
    if (!op.operands[slot])
      continue;
    Tensor& t = arguments[argument++];
    if (slot == stepSlot)
      t.set(0, double(step));
    else if (slot == lrSlot)
      t.set(0, 0.01);
    else if (slot == invSlot)
      t.set(0, invScale);
    else if (slot == predicateSlot)
      t.set(0, predicate ? 1 : 0);
    else if (adam && (slot == adam_slot::kExpAvgSq || slot == adam_slot::kMaxExpAvgSq))
      for (int64_t i = 0; i < t.elementCount(); ++i)
        t.set(i, std::fabs(t.at(i)));
    else if (slot == 1) // gradients as a scaled-up loss would give them
      for (int64_t i = 0; i < t.elementCount(); ++i)
        t.set(i, t.at(i) * 64);
  }
  return arguments;
}

void checkOptimizer(Backend& cpu, CudaBackend& cuda, const OptimizerOp& op, double slack, uint32_t seed,
                    double invScale, int64_t step) {
  Plan plan = singleOp(op.name, op.operands, op.results, op.attributes, op.tied);
  ASSERT_FALSE(plan.steps.empty());
  std::vector<Tensor> arguments = optimizerArguments(plan, op, seed, invScale, step, true);
  Expected<BothRuns> both = runOnBoth(cpu, cuda, plan, arguments, 2);
  ASSERT_TRUE(both.ok()) << both.message();
  expectAgree(*both, slack);
}

TEST_F(GpuTest, SgdEveryConfigurationMatchesTheCpu) {
  const int64_t sizes[] = {1, 3, 1000, 4099};
  uint32_t seed = 10;
  for (const SgdConfig& c : kSgdConfigs) {
    for (DType grad : kGradTypes) {
      for (std::optional<DType> copy : {std::optional<DType>(), std::optional(DType::F16), std::optional(DType::BF16)}) {
        for (bool withInvScale : {false, true}) {
          int64_t size = sizes[seed % 4];
          SCOPED_TRACE(::testing::Message() << "momentum " << c.momentum << " dampening " << c.dampening
                                            << " nesterov " << c.nesterov << " wd " << c.weightDecay << " maximize "
                                            << c.maximize << " step " << c.withStep << " grad " << dtypeName(grad)
                                            << " copy " << (copy ? dtypeName(*copy) : "none") << " inv_scale "
                                            << withInvScale << " size " << size);
          // Step 0 starts the momentum buffer from the gradient; step 3 does not.
          for (int64_t step : {0, 3}) {
            OptimizerOp op = sgdOp(c, DType::F32, grad, {size}, copy, withInvScale, (seed & 1) != 0);
            checkOptimizer(*cpu, *cuda, op, 0.0, seed++, 1.0 / 64, step);
          }
        }
      }
    }
  }
}

TEST_F(GpuTest, SgdOverSeveralVectorChunksWithTailsMatchesTheCpu) {
  // The 16-byte path's blocks take 4096 elements, a thread two runs of 8:
  // sizes spanning several blocks, ending mid-run and right after a whole one.
  const int64_t sizes[] = {3 * 4096 + 13, 2 * 4096 + 8, 4096 + 2048 + 7};
  uint32_t seed = 500;
  for (const SgdConfig& c : {kSgdConfigs[0], kSgdConfigs[std::size(kSgdConfigs) - 1]})
    for (DType grad : kGradTypes)
      for (std::optional<DType> copy : {std::optional<DType>(), std::optional(DType::F16), std::optional(DType::BF16)})
        for (int64_t step : {0, 3}) {
          int64_t size = sizes[seed % 3];
          SCOPED_TRACE(::testing::Message() << "momentum " << c.momentum << " grad " << dtypeName(grad) << " copy "
                                            << (copy ? dtypeName(*copy) : "none") << " size " << size << " step "
                                            << step);
          OptimizerOp op = sgdOp(c, DType::F32, grad, {size}, copy, true, true);
          checkOptimizer(*cpu, *cuda, op, 0.0, seed++, 1.0 / 64, step);
        }
}

TEST_F(GpuTest, TheUpdatesAndTheCheckGiveTheSameBitsWithAndWithoutEvictFirstHints) {
  // The 16-byte SGD and Adam paths and the finiteness check load (and the
  // updates store) what they touch once with the evict-first hint, unless
  // AMPJIT_CUDA_CACHE_HINTS is 0: the bits are the CPU's either way (Adam's
  // within its tolerance). On the emulation, which counts the hinted bytes:
  // per element and run, SGD with momentum hints the f32 parameter, the f16
  // gradient and the f32 momentum loaded and the parameter and momentum
  // stored (18 bytes); Adam the parameter, the gradient, exp_avg and
  // exp_avg_sq loaded and all but the gradient stored (26 bytes, and 8 more
  // with AMSGrad's max_exp_avg_sq); never the f16 copy, which the next
  // forward reads. The check hints the f16 gradient (2 bytes).
  const int64_t n = 2 * 4096 + 8; // whole 16-byte runs only: no element-wise tail
  const int runs = 2;
  struct Update {
    OptimizerOp op;
    int64_t hintedBytesPerElement;
    double slack;
  };
  const Update updates[] = {
      {sgdOp(kSgdConfigs[1], DType::F32, DType::F16, {n}, DType::F16, true, true), 18, 0.0},
      {adamOp(kAdamConfigs[2], DType::F32, DType::F16, {n}, DType::F16, true, true), 26, 1.0},
      {adamOp(kAmsgradConfig, DType::F32, DType::F16, {n}, DType::F16, true, true), 34, 1.0},
  };
  Plan checkPlan = singleOp("amp.all_finite", {tt(DType::F16, {n})}, {tt(DType::I1, {})});
  for (bool hints : {true, false}) {
    SCOPED_TRACE(hints ? "hints" : "AMPJIT_CUDA_CACHE_HINTS=0");
    std::optional<ScopedEnvironment> off;
    if (!hints)
      off.emplace("AMPJIT_CUDA_CACHE_HINTS", "0");
    for (const Update& update : updates) {
      SCOPED_TRACE(update.op.name + (update.hintedBytesPerElement == 34 ? " amsgrad" : ""));
      const OptimizerOp& op = update.op;
      Plan plan = singleOp(op.name, op.operands, op.results, op.attributes, op.tied);
#ifdef AMPJIT_GPU_TESTS_ON_EMULATION
      int64_t before = emulation::counters().evictFirstBytes;
#endif
      Expected<BothRuns> updated = runOnBoth(*cpu, *cuda, plan, optimizerArguments(plan, op, 77, 1.0 / 64, 3, true), runs);
      ASSERT_TRUE(updated.ok()) << updated.message();
      expectAgree(*updated, update.slack);
#ifdef AMPJIT_GPU_TESTS_ON_EMULATION
      EXPECT_EQ(emulation::counters().evictFirstBytes - before, hints ? runs * n * update.hintedBytesPerElement : 0);
#endif
    }
#ifdef AMPJIT_GPU_TESTS_ON_EMULATION
    int64_t beforeCheck = emulation::counters().evictFirstBytes;
#endif
    Expected<BothRuns> checked = runOnBoth(*cpu, *cuda, checkPlan, randomArguments(checkPlan, 78, -100, 100), runs);
    ASSERT_TRUE(checked.ok()) << checked.message();
    expectAgree(*checked, 0.0);
#ifdef AMPJIT_GPU_TESTS_ON_EMULATION
    EXPECT_EQ(emulation::counters().evictFirstBytes - beforeCheck, hints ? runs * n * 2 : 0);
#endif
  }
}

TEST_F(GpuTest, UpdatesVectorizeOnlyAlignedF32StateWithF32OrNarrowGradients) {
  using namespace cuda::update;
  alignas(64) static float storage[128];
  OptimizerConfig config{};
  config.paramType = ElementType::F32;
  config.copyType = ElementType::F16;
  config.vectorize = true;
  OptimizerTensor weight{};
  weight.param = weight.newParam = storage;
  weight.grad = storage + 16;
  weight.copy = weight.newCopy = storage + 32;
  weight.count = 100;
  weight.gradType = ElementType::F16;
  OptimizerTensor bias = weight; // f32 gradient, no copy, momentum
  bias.gradType = ElementType::F32;
  bias.copy = bias.newCopy = nullptr;
  bias.state0 = bias.newState0 = storage + 48;
  OptimizerTensor both[] = {weight, bias};
  EXPECT_TRUE(optimizerLaunchVectorizes(config, both, 2));
  // Adam's exp_avg_sq and AMSGrad's max_exp_avg_sq beside exp_avg (state0).
  OptimizerConfig adam = config;
  adam.adam = true;
  OptimizerTensor adamBias = bias;
  adamBias.state1 = adamBias.newState1 = storage + 64;
  adamBias.state2 = adamBias.newState2 = storage + 80;
  OptimizerTensor adamTensors[] = {weight, adamBias};
  EXPECT_TRUE(optimizerLaunchVectorizes(adam, adamTensors, 2));

  auto refused = [&](const OptimizerConfig& base, const OptimizerTensor& second, auto change) {
    OptimizerConfig c = base;
    OptimizerTensor tensors[] = {weight, second};
    change(c, tensors[1]);
    return !optimizerLaunchVectorizes(c, tensors, 2);
  };
  auto sgdRefused = [&](auto change) { return refused(config, bias, change); };
  auto adamRefused = [&](auto change) { return refused(adam, adamBias, change); };
  EXPECT_TRUE(sgdRefused([](OptimizerConfig& c, OptimizerTensor&) { c.vectorize = false; }));
  EXPECT_TRUE(adamRefused([](OptimizerConfig& c, OptimizerTensor&) { c.vectorize = false; }));
  EXPECT_TRUE(sgdRefused([](OptimizerConfig& c, OptimizerTensor&) { c.computeF64 = true; }));
  EXPECT_TRUE(adamRefused([](OptimizerConfig& c, OptimizerTensor&) { c.computeF64 = true; }));
  EXPECT_TRUE(sgdRefused([](OptimizerConfig& c, OptimizerTensor&) { c.paramType = ElementType::F64; }));
  EXPECT_TRUE(sgdRefused([](OptimizerConfig&, OptimizerTensor& t) { t.gradType = ElementType::F64; }));
  EXPECT_TRUE(sgdRefused([](OptimizerConfig& c, OptimizerTensor& t) {
    c.copyType = ElementType::F32;
    t.copy = t.newCopy = storage + 32;
  }));
  // A view 4 bytes into a buffer, in any slot.
  EXPECT_TRUE(sgdRefused([](OptimizerConfig&, OptimizerTensor& t) { t.newParam = storage + 1; }));
  EXPECT_TRUE(sgdRefused([](OptimizerConfig&, OptimizerTensor& t) { t.grad = storage + 17; }));
  EXPECT_TRUE(sgdRefused([](OptimizerConfig&, OptimizerTensor& t) { t.newState0 = storage + 49; }));
  EXPECT_TRUE(adamRefused([](OptimizerConfig&, OptimizerTensor& t) { t.state1 = storage + 65; }));
  EXPECT_TRUE(adamRefused([](OptimizerConfig&, OptimizerTensor& t) { t.newState1 = storage + 65; }));
  EXPECT_TRUE(adamRefused([](OptimizerConfig&, OptimizerTensor& t) { t.state2 = storage + 81; }));
  EXPECT_TRUE(adamRefused([](OptimizerConfig&, OptimizerTensor& t) { t.newState2 = storage + 81; }));
  // An empty tensor's pointers are never read.
  EXPECT_FALSE(sgdRefused([](OptimizerConfig&, OptimizerTensor& t) {
    t.count = 0;
    t.grad = storage + 17;
  }));
}

TEST_F(GpuTest, AdamAndSgd16BytesAtATimeGiveTheElementKernelsBits) {
  // AMPJIT_CUDA_VECTOR_UPDATES=0 sends every update to the element-by-element
  // kernel. Against the CPU, Adam agrees only within tolerance (the device's
  // pow), so the two device kernels are compared with each other, bit for
  // bit: sizes spanning several 4096-element blocks and ending mid-run, every
  // gradient type and copy, AdamW, AMSGrad and maximize. On the emulation,
  // which counts the bytes loaded and stored with the evict-first hint, the
  // 16-byte kernels are seen to run (the element kernels give no hints).
  const int64_t sizes[] = {3 * 4096 + 13, 2 * 4096 + 8, 4096 + 2048 + 7};
  uint32_t seed = 900;
  for (std::string_view kind : {"adam", "adamw", "amsgrad", "sgd"})
    for (DType grad : kGradTypes)
      for (std::optional<DType> copy : {std::optional<DType>(), std::optional(DType::F16), std::optional(DType::BF16)}) {
        int64_t size = sizes[seed % 3];
        SCOPED_TRACE(::testing::Message() << kind << " grad " << dtypeName(grad) << " copy "
                                          << (copy ? dtypeName(*copy) : "none") << " size " << size);
        OptimizerOp op = kind == "sgd"      ? sgdOp(kSgdConfigs[std::size(kSgdConfigs) - 1], DType::F32, grad, {size},
                                                    copy, true, true)
                         : kind == "adam"   ? adamOp(kAdamConfigs[4], DType::F32, grad, {size}, copy, true, true)
                         : kind == "adamw"  ? adamOp(kAdamConfigs[3], DType::F32, grad, {size}, copy, true, true)
                                            : adamOp(kAmsgradConfig, DType::F32, grad, {size}, copy, true, true);
        Plan plan = singleOp(op.name, op.operands, op.results, op.attributes, op.tied);
        std::vector<Tensor> arguments = optimizerArguments(plan, op, seed++, 1.0 / 64, 4, true);
        std::optional<Expected<BothRuns>> runs[2];
        for (bool vectorized : {true, false}) {
          std::optional<ScopedEnvironment> off;
          if (!vectorized)
            off.emplace("AMPJIT_CUDA_VECTOR_UPDATES", "0");
#ifdef AMPJIT_GPU_TESTS_ON_EMULATION
          int64_t before = emulation::counters().evictFirstBytes;
#endif
          runs[vectorized].emplace(runOnBoth(*cpu, *cuda, plan, arguments, 2));
          ASSERT_TRUE(runs[vectorized]->ok()) << runs[vectorized]->message();
#ifdef AMPJIT_GPU_TESTS_ON_EMULATION
          int64_t hinted = emulation::counters().evictFirstBytes - before;
          if (vectorized)
            EXPECT_GT(hinted, 0);
          else
            EXPECT_EQ(hinted, 0);
#endif
        }
        const BothRuns &wide = **runs[1], &narrow = **runs[0];
        ASSERT_EQ(wide.cudaResults.size(), narrow.cudaResults.size());
        for (size_t i = 0; i < wide.cudaResults.size(); ++i)
          EXPECT_TRUE(allClose(narrow.cudaResults[i], wide.cudaResults[i], 0.0)) << "result " << i;
        for (size_t i = 0; i < wide.cudaArguments.size(); ++i)
          EXPECT_TRUE(allClose(narrow.cudaArguments[i], wide.cudaArguments[i], 0.0)) << "argument " << i;
        // And both within Adam's tolerance of the CPU (SGD: exactly).
        expectAgree(wide, kind == "sgd" ? 0.0 : 1.0);
      }
}

TEST_F(GpuTest, SgdWithF64ParametersOrGradientsMatchesTheCpu) {
  SgdConfig c{.momentum = 0.9, .weightDecay = 0.01, .withStep = true};
  checkOptimizer(*cpu, *cuda, sgdOp(c, DType::F64, DType::F16, {777}, DType::BF16, true, true), 0.0, 1, 0.125, 2);
  checkOptimizer(*cpu, *cuda, sgdOp(c, DType::F64, DType::F64, {5}, DType::F16, true, false), 0.0, 2, 0.125, 0);
  checkOptimizer(*cpu, *cuda, sgdOp(c, DType::F32, DType::F64, {1025}, std::nullopt, true, true), 0.0, 3, 0.125, 1);
}

TEST_F(GpuTest, AdamEveryConfigurationMatchesTheCpu) {
  const int64_t sizes[] = {1, 3, 1000, 4099};
  uint32_t seed = 100;
  for (const AdamConfig& c : kAdamConfigs) {
    for (DType grad : kGradTypes) {
      for (std::optional<DType> copy : {std::optional<DType>(), std::optional(DType::F16), std::optional(DType::BF16)}) {
        for (bool withInvScale : {false, true}) {
          int64_t size = sizes[seed % 4];
          SCOPED_TRACE(::testing::Message() << "wd " << c.weightDecay << " decoupled " << c.decoupled << " maximize "
                                            << c.maximize << " beta1 " << c.beta1 << " amsgrad " << c.amsgrad
                                            << " grad " << dtypeName(grad)
                                            << " copy " << (copy ? dtypeName(*copy) : "none") << " inv_scale "
                                            << withInvScale << " size " << size);
          for (int64_t step : {0, 9}) {
            OptimizerOp op = adamOp(c, DType::F32, grad, {size}, copy, withInvScale, (seed & 1) != 0);
            checkOptimizer(*cpu, *cuda, op, 1.0, seed++, 1.0 / 64, step);
          }
        }
      }
    }
  }
  checkOptimizer(*cpu, *cuda, adamOp(kAdamConfigs[2], DType::F64, DType::BF16, {333}, DType::F16, true, true), 1.0, 7,
                 0.5, 4);
  checkOptimizer(*cpu, *cuda, adamOp(kAmsgradConfig, DType::F64, DType::F16, {333}, DType::BF16, true, true), 1.0, 8,
                 0.5, 4);
}

TEST_F(GpuTest, FalsePredicateLeavesEveryStateOutputBitIdentical) {
  for (std::string_view kind : {"sgd", "adam", "amsgrad"}) {
    bool adam = kind != "sgd", amsgrad = kind == "amsgrad";
    for (bool inPlace : {true, false}) {
      for (std::optional<DType> copy : {std::optional<DType>(), std::optional(DType::BF16), std::optional(DType::F16)}) {
        for (DType grad : kGradTypes) {
          SCOPED_TRACE(::testing::Message() << kind << " in place " << inPlace << " copy "
                                            << (copy ? dtypeName(*copy) : "none") << " grad " << dtypeName(grad));
          OptimizerOp op = adam ? adamOp(amsgrad ? kAmsgradConfig : kAdamConfigs[3], DType::F32, grad, {1029}, copy,
                                         true, true)
                                : sgdOp(kSgdConfigs[6], DType::F32, grad, {1029}, copy, true, true);
          if (!inPlace)
            op.tied.clear();
          Plan plan = singleOp(op.name, op.operands, op.results, op.attributes, op.tied);
          std::vector<Tensor> arguments = optimizerArguments(plan, op, 40, 1.0 / 8, 3, false);
          // A NaN in the gradient must not leak into skipped state.
          arguments[1].set(7, std::numeric_limits<double>::quiet_NaN());
          Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments, 2);
          ASSERT_TRUE(both.ok()) << both.message();
          // Each result is the state input it replaces, bit for bit, on both backends.
          std::vector<size_t> stateArguments = {0};
          if (amsgrad)
            stateArguments.insert(stateArguments.end(), {2, 3, 4});
          else if (adam)
            stateArguments.insert(stateArguments.end(), {2, 3});
          else
            stateArguments.push_back(2); // momentum_buffer is argument 2 (the step follows it)
          if (copy)
            stateArguments.push_back(plan.argumentCount() - 1);
          ASSERT_EQ(both->cudaResults.size(), stateArguments.size());
          for (size_t r = 0; r < stateArguments.size(); ++r) {
            EXPECT_TRUE(both->cudaResults[r].bitwiseEqual(arguments[stateArguments[r]])) << "result " << r;
            EXPECT_TRUE(both->cpuResults[r].bitwiseEqual(arguments[stateArguments[r]])) << "result " << r;
          }
          for (size_t a = 0; a < arguments.size(); ++a) {
            EXPECT_TRUE(both->cudaArguments[a].bitwiseEqual(arguments[a])) << "argument " << a;
            EXPECT_TRUE(both->cpuArguments[a].bitwiseEqual(arguments[a])) << "argument " << a;
          }
        }
      }
    }
  }
}

/// A plan of `count` consecutive updates of different parameters sharing
/// lr, step, inv_scale and predicate: the CUDA backend runs them as one
/// multi-tensor group (chunked past the kernel-argument limit).
/// Mixed, parameter i's gradient has kGradTypes[i % 3]'s dtype and only even
/// ones have a copy (a network's weights beside its batch-norm parameters).
/// With `amsgrad` (Adam only) each update also has a max_exp_avg_sq.
Plan groupedPlan(bool adam, size_t count, DType gradType, std::optional<DType> copyType, bool predicate,
                 bool mixed = false, bool amsgrad = false) {
  PlanBuilder b(amsgrad ? "grouped_amsgrad" : adam ? "grouped_adam" : "grouped_sgd");
  const int64_t sizes[] = {1, 3, 300, 1000, 2049, 17};
  BufferId lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper, "lr");
  BufferId step = b.argument(tt(DType::I64, {}), BufferRole::OptState, "step");
  BufferId inv = b.argument(tt(DType::F32, {}), BufferRole::ScalerState, "inv_scale");
  BufferId flag = predicate ? b.argument(tt(DType::I1, {}), BufferRole::Input, "found_finite") : kNoBuffer;
  struct State {
    BufferId param, grad, s0, s1, s2, copy;
    int32_t paramArg, s0Arg, s1Arg, s2Arg, copyArg;
  };
  std::vector<State> states;
  int32_t next = predicate ? 4 : 3;
  for (size_t i = 0; i < count; ++i) {
    Shape shape = {sizes[i % 6]};
    State s{};
    s.paramArg = next++;
    s.param = b.argument(tt(DType::F32, shape), BufferRole::Param);
    next++;
    s.grad = b.argument(tt(mixed ? kGradTypes[i % 3] : gradType, shape), BufferRole::Grad);
    s.s0Arg = next++;
    s.s0 = b.argument(tt(DType::F32, shape), BufferRole::OptState);
    s.s1 = kNoBuffer;
    if (adam) {
      s.s1Arg = next++;
      s.s1 = b.argument(tt(DType::F32, shape), BufferRole::OptState);
    }
    s.s2 = kNoBuffer;
    if (amsgrad) {
      s.s2Arg = next++;
      s.s2 = b.argument(tt(DType::F32, shape), BufferRole::OptState);
    }
    s.copy = kNoBuffer;
    if (copyType && !(mixed && i % 2 == 1)) {
      s.copyArg = next++;
      s.copy = b.argument(tt(*copyType, shape), BufferRole::Param);
    }
    states.push_back(s);
  }
  for (const State& s : states) {
    if (adam) {
      std::vector<BufferId> outs = {s.param, s.s0, s.s1};
      if (s.s2 != kNoBuffer)
        outs.push_back(s.s2);
      if (s.copy != kNoBuffer)
        outs.push_back(s.copy);
      b.op("jit.adam_update", {s.param, s.grad, s.s0, s.s1, s.s2, step, lr, inv, flag, s.copy}, outs,
           adamAttributes(amsgrad ? kAmsgradConfig : kAdamConfigs[2]));
    } else {
      std::vector<BufferId> outs = {s.param, s.s0};
      if (s.copy != kNoBuffer)
        outs.push_back(s.copy);
      b.op("jit.sgd_update", {s.param, s.grad, s.s0, step, lr, inv, flag, s.copy}, outs,
           sgdAttributes(kSgdConfigs[2]));
    }
  }
  for (const State& s : states) {
    b.result(s.param, s.paramArg);
    b.result(s.s0, s.s0Arg);
    if (adam)
      b.result(s.s1, s.s1Arg);
    if (s.s2 != kNoBuffer)
      b.result(s.s2, s.s2Arg);
    if (s.copy != kNoBuffer)
      b.result(s.copy, s.copyArg);
  }
  return b.finish();
}

std::vector<Tensor> groupedArguments(const Plan& plan, bool predicate) {
  std::vector<Tensor> arguments = randomArguments(plan, 50, 0, 2);
  arguments[0].set(0, 0.01);
  arguments[1].set(0, 4);
  arguments[2].set(0, 1.0 / 16);
  if (predicate)
    arguments[3].set(0, 1);
  return arguments;
}

TEST_F(GpuTest, GroupedOptimizerStepsMatchTheCpu) {
  for (bool adam : {false, true}) {
    // 40 parameters: more than one launch's table.
    for (size_t count : {size_t(2), size_t(40)}) {
      for (DType grad : kGradTypes) {
        for (std::optional<DType> copy : {std::optional<DType>(), std::optional(DType::BF16)}) {
          SCOPED_TRACE(::testing::Message() << (adam ? "adam" : "sgd") << " x" << count << " grad "
                                            << dtypeName(grad) << " copy " << (copy ? dtypeName(*copy) : "none"));
          Plan plan = groupedPlan(adam, count, grad, copy, true);
          Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, groupedArguments(plan, true), 3);
          ASSERT_TRUE(both.ok()) << both.message();
          expectAgree(*both, adam ? 1.0 : 0.0);
        }
      }
    }
  }
}

TEST_F(GpuTest, GroupedOptimizerStepsOfMixedGradientsAndCopiesMatchTheCpu) {
  for (bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "adam" : "sgd");
    Plan plan = groupedPlan(adam, 40, DType::F16, DType::F16, true, /*mixed=*/true);
    ASSERT_EQ(cuda::launchGroups(plan).size(), 1u) << "one group, in two launches (32 tensors each at most)";
    Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, groupedArguments(plan, true), 3);
    ASSERT_TRUE(both.ok()) << both.message();
    expectAgree(*both, adam ? 1.0 : 0.0);
  }
}

TEST_F(GpuTest, GroupedOptimizerStepsWithAFalsePredicateChangeNothing) {
  for (bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "adam" : "sgd");
    Plan plan = groupedPlan(adam, 40, DType::F16, DType::F16, true);
    std::vector<Tensor> arguments = groupedArguments(plan, true);
    arguments[3].set(0, 0);
    Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments, 2);
    ASSERT_TRUE(both.ok()) << both.message();
    for (size_t a = 0; a < arguments.size(); ++a) {
      EXPECT_TRUE(both->cudaArguments[a].bitwiseEqual(arguments[a])) << "argument " << a;
      EXPECT_TRUE(both->cpuArguments[a].bitwiseEqual(arguments[a])) << "argument " << a;
    }
  }
}

TEST_F(GpuTest, GroupedAmsgradStepsMatchTheCpuAndSkipBitIdentically) {
  // AMSGrad's two extra pointers per tensor still fit 40 mixed tensors in
  // two launches' tables; a false predicate changes nothing.
  Plan plan = groupedPlan(true, 40, DType::F16, DType::F16, true, /*mixed=*/true, /*amsgrad=*/true);
  ASSERT_EQ(cuda::launchGroups(plan).size(), 1u);
  Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, groupedArguments(plan, true), 3);
  ASSERT_TRUE(both.ok()) << both.message();
  expectAgree(*both, 1.0);
  std::vector<Tensor> arguments = groupedArguments(plan, true);
  arguments[3].set(0, 0);
  both = runOnBoth(*cpu, *cuda, plan, arguments, 2);
  ASSERT_TRUE(both.ok()) << both.message();
  for (size_t a = 0; a < arguments.size(); ++a) {
    EXPECT_TRUE(both->cudaArguments[a].bitwiseEqual(arguments[a])) << "argument " << a;
    EXPECT_TRUE(both->cpuArguments[a].bitwiseEqual(arguments[a])) << "argument " << a;
  }
}

TEST_F(GpuTest, TwoUpdatesOfOneParameterInARowRunInOrder) {
  // The second update reads what the first wrote: the group must not merge them.
  PlanBuilder b("twice");
  BufferId lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper);
  BufferId param = b.argument(tt(DType::F32, {1000}), BufferRole::Param);
  BufferId grad = b.argument(tt(DType::F16, {1000}), BufferRole::Grad);
  BufferId other = b.argument(tt(DType::F32, {64}), BufferRole::Param);
  BufferId otherGrad = b.argument(tt(DType::F32, {64}), BufferRole::Grad);
  AttributeMap attributes = sgdAttributes(kSgdConfigs[5]);
  b.op("jit.sgd_update", {param, grad, kNoBuffer, kNoBuffer, lr, kNoBuffer, kNoBuffer, kNoBuffer}, {param}, attributes);
  b.op("jit.sgd_update", {other, otherGrad, kNoBuffer, kNoBuffer, lr, kNoBuffer, kNoBuffer, kNoBuffer}, {other},
       attributes);
  b.op("jit.sgd_update", {param, grad, kNoBuffer, kNoBuffer, lr, kNoBuffer, kNoBuffer, kNoBuffer}, {param}, attributes);
  b.result(param, 1);
  b.result(other, 3);
  Plan plan = b.finish();
  Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, randomArguments(plan, 60), 2);
  ASSERT_TRUE(both.ok()) << both.message();
  expectAgree(*both, 0.0);
}

TEST_F(GpuTest, TheScalersUpdateInTheUpdatesLaunchMatchesTheCpu) {
  // update_scale joins the launch of the updates before it (one thread of
  // the last launch runs it), even when every parameter is empty and there
  // is no launch to join; a found inf backs the scale off, a finite step
  // grows it.
  for (int64_t size : {int64_t(3000), int64_t(0)}) {
    for (double finite : {0.0, 1.0}) {
      SCOPED_TRACE(::testing::Message() << "parameters of " << size << " elements, all_finite " << finite);
      PlanBuilder b("updates_then_scale");
      BufferId lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper);
      BufferId inv = b.argument(tt(DType::F32, {}), BufferRole::ScalerState);
      BufferId ok = b.argument(tt(DType::I1, {}), BufferRole::Input);
      BufferId scale = b.argument(tt(DType::F32, {}), BufferRole::ScalerState);
      BufferId good = b.argument(tt(DType::I64, {}), BufferRole::ScalerState);
      BufferId bad = b.argument(tt(DType::I64, {}), BufferRole::ScalerState);
      BufferId skipped = b.argument(tt(DType::I64, {}), BufferRole::ScalerState);
      std::vector<BufferId> params;
      for (int k = 0; k < 2; ++k) {
        params.push_back(b.argument(tt(DType::F32, {size}), BufferRole::Param));
        BufferId grad = b.argument(tt(DType::F16, {size}), BufferRole::Grad);
        b.op("jit.sgd_update", {params.back(), grad, kNoBuffer, kNoBuffer, lr, inv, ok, kNoBuffer}, {params.back()},
             sgdAttributes(kSgdConfigs[0]));
      }
      b.op("amp.update_scale", {scale, good, bad, skipped, ok}, {scale, good, bad, skipped},
           {{"growth_interval", int64_t(1)}});
      b.result(params[0], 7);
      b.result(params[1], 9);
      b.result(scale, 3);
      b.result(good, 4);
      b.result(bad, 5);
      b.result(skipped, 6);
      Plan plan = b.finish();
      ASSERT_EQ(cuda::launchGroups(plan), (std::vector<std::pair<size_t, size_t>>{{0, 3}}));
      std::vector<Tensor> arguments = randomArguments(plan, 61, 0.5, 2.0);
      arguments[2].set(0, finite);
      arguments[3].set(0, 1024.0);
      for (size_t state : {4, 5, 6})
        arguments[state].set(0, 0.0);
      Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments, 2);
      ASSERT_TRUE(both.ok()) << both.message();
      expectAgree(*both, 0.0);
      EXPECT_EQ(both->cudaArguments[3].at(0), finite != 0.0 ? 4096.0 : 256.0) << "the scale after two steps";
      EXPECT_EQ(both->cudaArguments[6].at(0), finite != 0.0 ? 0.0 : 2.0) << "skipped steps";
    }
  }
}

//===----------------------------------------------------------------------===//
// Conversions
//===----------------------------------------------------------------------===//

TEST_F(GpuTest, ConsecutiveCastsInOneLaunchGiveTheCpusBits) {
  // 200 f32 -> f16 casts (two launches' tables) of 1 to 5000 elements, then
  // f32 -> bf16 and f16 -> f32 groups; values include NaN, infinities,
  // subnormals and values past f16's range.
  PlanBuilder b("casts");
  std::vector<BufferId> sources, casts;
  const int64_t sizes[] = {1, 7, 5000, 300};
  for (int i = 0; i < 200; ++i)
    sources.push_back(b.argument(tt(DType::F32, {sizes[i % 4]}), BufferRole::Param));
  auto castAll = [&](DType to, int count) {
    for (int i = 0; i < count; ++i) {
      casts.push_back(b.output(tt(to, {sizes[i % 4]})));
      b.op("amp.cast", {sources[size_t(i)]}, {casts.back()});
    }
  };
  castAll(DType::F16, 200);
  castAll(DType::BF16, 5);
  for (int i = 0; i < 3; ++i) {
    BufferId widened = b.output(tt(DType::F32, {sizes[i % 4]}));
    b.op("amp.cast", {casts[size_t(i)]}, {widened});
    casts.push_back(widened);
  }
  for (BufferId id : casts)
    b.result(id);
  Plan plan = b.finish();
  ASSERT_EQ(cuda::launchGroups(plan).size(), 3u) << "the three runs of casts are one launch each";
  std::vector<Tensor> arguments = randomArguments(plan, 70, -70000.0, 70000.0);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const double specials[] = {nan, inf, -inf, 1e-6, -3e-8, 65519.0, 65520.0, 1e-45, 0.0, -0.0};
  for (size_t k = 0; k < std::size(specials); ++k)
    arguments[2].set(int64_t(k), specials[k]);
  Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments, 1);
  ASSERT_TRUE(both.ok()) << both.message();
  ASSERT_EQ(both->cpuResults.size(), both->cudaResults.size());
  // The same value and sign everywhere, NaN where the CPU has NaN (its
  // payload is the one thing a conversion may choose).
  for (size_t r = 0; r < both->cpuResults.size(); ++r) {
    const Tensor &expected = both->cpuResults[r], &actual = both->cudaResults[r];
    int64_t wrong = 0;
    for (int64_t e = 0; e < expected.elementCount(); ++e) {
      double want = expected.at(e), got = actual.at(e);
      bool same = std::isnan(want) ? std::isnan(got) : (want == got && std::signbit(want) == std::signbit(got));
      wrong += same ? 0 : 1;
    }
    EXPECT_EQ(wrong, 0) << "result " << r << " differs in " << wrong << " elements";
  }
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

constexpr DType kAllTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I1};

/// Random arguments with varied integers and booleans (randomArguments sets every i1 to 1).
std::vector<Tensor> layoutArguments(const Plan& plan, uint32_t seed) {
  std::vector<Tensor> arguments = randomArguments(plan, seed, -8, 8, 1000000);
  for (Tensor& t : arguments)
    if (t.dtype() == DType::I1)
      for (int64_t i = 0; i < t.elementCount(); ++i)
        t.set(i, double((i * 7 + seed) % 3 == 0));
  return arguments;
}

void checkLayout(Backend& cpu, CudaBackend& cuda, std::string_view op, const TensorType& in, const TensorType& out,
                 const AttributeMap& attributes = {}) {
  SCOPED_TRACE(::testing::Message() << op << " " << typeToString(in) << " -> " << typeToString(out));
  Plan plan = singleOp(op, {in}, {out}, attributes);
  ASSERT_FALSE(plan.steps.empty());
  std::vector<Tensor> arguments = layoutArguments(plan, 70);
  Expected<BothRuns> both = runOnBoth(cpu, cuda, plan, arguments);
  ASSERT_TRUE(both.ok()) << both.message();
  ASSERT_EQ(both->cudaResults.size(), 1u);
  EXPECT_TRUE(both->cudaResults[0].bitwiseEqual(both->cpuResults[0]));
}

TEST_F(GpuTest, ReshapeCopiesEveryDtype) {
  for (DType dtype : kAllTypes) {
    checkLayout(*cpu, *cuda, "jit.reshape", tt(dtype, {1}), tt(dtype, {}));
    checkLayout(*cpu, *cuda, "jit.reshape", tt(dtype, {3, 7}), tt(dtype, {21}));
    checkLayout(*cpu, *cuda, "jit.reshape", tt(dtype, {1031}), tt(dtype, {1, 1031, 1}));
  }
}

TEST_F(GpuTest, BroadcastToEveryDtypeAndShape) {
  struct Case {
    Shape from, to;
  };
  const Case cases[] = {
      {{}, {7}},          {{1}, {1000}},           {{3}, {4, 3}},         {{4, 1, 5}, {2, 4, 3, 5}},
      {{1, 1}, {33, 65}}, {{5, 1}, {5, 257}},      {{2, 1, 3, 1}, {2, 5, 3, 7}},
      {{3}, {3}},         {{1, 2, 1, 2, 1, 2, 1, 2}, {3, 2, 3, 2, 3, 2, 3, 2}},
      // Ten dimensions that merge into few, and ten that do not.
      {{1, 1, 2, 3, 1, 1, 1, 1, 1, 4}, {5, 1, 2, 3, 1, 1, 1, 1, 1, 4}},
      {{1, 2, 1, 2, 1, 2, 1, 2, 1, 2}, {3, 2, 3, 2, 3, 2, 3, 2, 3, 2}},
  };
  for (const char* wide : {"0", "1"}) {
    SCOPED_TRACE(::testing::Message() << "AMPJIT_CUDA_WIDE_INDEX=" << wide);
    ScopedEnvironment indexWidth("AMPJIT_CUDA_WIDE_INDEX", wide);
    for (DType dtype : kAllTypes)
      for (const Case& c : cases)
        checkLayout(*cpu, *cuda, "jit.broadcast_to", tt(dtype, c.from), tt(dtype, c.to));
  }
}

TEST_F(GpuTest, TransposeEveryDtypeAndRankUpToEight) {
  struct Case {
    Shape from;
    std::vector<int64_t> perm;
  };
  const Case cases[] = {
      {{7}, {0}},
      {{33, 65}, {1, 0}},
      {{1, 1000}, {1, 0}},
      {{2, 3, 5}, {2, 0, 1}},
      {{4, 1, 6, 3}, {3, 1, 0, 2}},
      {{2, 3, 2, 3, 2, 3, 2, 3}, {7, 0, 6, 1, 5, 2, 4, 3}},
      {{2, 3, 4, 5}, {0, 1, 2, 3}},
  };
  // Both index widths: 32-bit arithmetic wherever offsets fit, 64-bit (the
  // path of tensors of 2^31 elements or more) when forced.
  for (const char* wide : {"0", "1"}) {
    SCOPED_TRACE(::testing::Message() << "AMPJIT_CUDA_WIDE_INDEX=" << wide);
    ScopedEnvironment indexWidth("AMPJIT_CUDA_WIDE_INDEX", wide);
    for (DType dtype : kAllTypes) {
      for (const Case& c : cases) {
        Shape to;
        for (int64_t d : c.perm)
          to.push_back(c.from[size_t(d)]);
        checkLayout(*cpu, *cuda, "jit.transpose", tt(dtype, c.from), tt(dtype, to), {{"perm", c.perm}});
      }
    }
  }
}

TEST_F(GpuTest, ConstantSplatAndFullDataInEveryDtype) {
  for (DType dtype : kAllTypes) {
    for (Shape shape : {Shape{}, Shape{1}, Shape{3}, Shape{1000}, Shape{17, 61}}) {
      for (bool splat : {true, false}) {
        SCOPED_TRACE(::testing::Message() << dtypeName(dtype) << " " << shapeToString(shape) << " splat " << splat);
        TensorType type = tt(dtype, shape);
        Tensor values = *Tensor::allocate(type);
        for (int64_t i = 0; i < values.elementCount(); ++i)
          values.set(i, dtype == DType::I1 ? double(i % 2 == 0) : double(i % 19) * 0.75 - 3);
        DenseData data{type, {}};
        const uint8_t* bytes = reinterpret_cast<const uint8_t*>(values.bytes());
        size_t size = splat ? dtypeSize(dtype) : values.byteSize();
        data.bytes.assign(bytes, bytes + size);
        if (splat && values.elementCount() > 0 && dtype != DType::I1)
          std::memcpy(data.bytes.data(), bytes + dtypeSize(dtype) * size_t(values.elementCount() - 1), size);
        Plan plan = singleOp("jit.constant", {}, {type}, {{"value", data}});
        ASSERT_FALSE(plan.steps.empty());
        Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, {}, 2);
        ASSERT_TRUE(both.ok()) << both.message();
        EXPECT_TRUE(both->cudaResults[0].bitwiseEqual(both->cpuResults[0]));
      }
    }
  }
}

} // namespace
} // namespace ampjit::runtime::gputest
