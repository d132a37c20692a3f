//===- CudaBackendTest.cpp - the CUDA backend's core against the CPU ------===//
//
// Generated elementwise kernels (NVRTC) against the CPU backend; graph
// capture and replay against step-by-step runs; that a replayed run only
// enqueues; input staging, state rules, re-derivation and asynchronous
// reads. Skipped without a device. (GEMMs: GemmKernelTest.cpp.)
//
//===----------------------------------------------------------------------===//

#include "GpuTestUtil.h"
#include "cuda/DeviceStep.h"
#include "cuda/FiniteCheckSchedule.h"
#include "cuda/UpdateKernels.h"
#include "RuntimeTestUtil.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <limits>
#include <map>

namespace ampjit::runtime::gputest {
namespace {

using test::PlanBuilder;
using test::tt;
using test::DeferredSgdStep;
using test::deferredSgdStep;

/// The number after "\"name\":" in a JSON line, or NaN.
double jsonNumber(const std::string& line, const std::string& name) {
  std::size_t at = line.find("\"" + name + "\":");
  return at == std::string::npos ? std::nan("") : std::stod(line.substr(at + name.size() + 3));
}

Plan elementwiseChain() {
  PlanBuilder b("chain");
  BufferId x = b.argument(tt(DType::F16, {33, 129}), BufferRole::Input, "x");
  BufferId bias = b.argument(tt(DType::F16, {129}), BufferRole::Input, "bias");
  BufferId scale = b.argument(tt(DType::F32, {}), BufferRole::Input, "scale");
  BufferId t1 = b.temporary(tt(DType::F16, {33, 129})), t2 = b.output(tt(DType::F16, {33, 129}));
  b.op("jit.add", {x, bias}, {t1});
  b.op("jit.relu", {t1}, {t2});
  BufferId t3 = b.temporary(tt(DType::F32, {33, 129})), t4 = b.temporary(tt(DType::F32, {33, 129}));
  BufferId t5 = b.output(tt(DType::F32, {33, 129}));
  b.op("jit.convert", {t2}, {t3});
  b.op("jit.mul", {t3, scale}, {t4});
  b.op("jit.gelu", {t4}, {t5}, {{"approximate", std::string("tanh")}});
  BufferId mask = b.temporary(tt(DType::I1, {33, 129})), index = b.output(tt(DType::I64, {33, 129}));
  b.op("jit.compare", {t3, t5}, {mask}, {{"predicate", std::string("gt")}});
  b.op("jit.convert", {mask}, {index});
  BufferId bf = b.output(tt(DType::BF16, {33, 129}));
  b.op("amp.cast", {t5}, {bf});
  for (BufferId out : {t2, t5, index, bf})
    b.result(out);
  return b.finish();
}

#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
TEST_F(GpuTest, EqualStreamPrioritiesOnRequestForMeasuringWhatTheyBuy) {
  // AMPJIT_CUDA_EQUAL_STREAM_PRIORITIES=1: both streams at the default
  // priority and a graph without per-node priorities (the A/B of
  // gpu-bundle's priority-ab stage). The deferred update still runs on the
  // side stream, captured in the graph's second lane.
  ScopedEnvironment equal("AMPJIT_CUDA_EQUAL_STREAM_PRIORITIES", "1");
  Expected<std::unique_ptr<CudaBackend>> backend = createCudaBackend();
  ASSERT_TRUE(backend.ok()) << backend.message();
  DeferredSgdStep parts = deferredSgdStep();
  Expected<std::unique_ptr<Executable>> executable = (*backend)->prepare(parts.plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  std::vector<Tensor> arguments;
  for (const Tensor& argument : randomArguments(parts.plan, 3))
    arguments.push_back(*(*backend)->toDevice(argument));
  for (int run = 0; run < 3; ++run)
    ASSERT_TRUE((*executable)->run(arguments).ok()) << "run " << run;
  EXPECT_EQ((*backend)->stats(**executable).captures, 1);
  emulation::GraphInstantiation instantiation = emulation::lastGraphInstantiation();
  EXPECT_EQ(instantiation.flags, 0u);
  ASSERT_GE(instantiation.lanePriorities.size(), 2u);
  for (const std::vector<int>& lane : instantiation.lanePriorities)
    for (int priority : lane)
      EXPECT_EQ(priority, 0);
}

TEST_F(GpuTest, AGraphStillReplaysOnADriverWithoutNodePriorities) {
  // A driver that does not know cudaGraphInstantiateFlagUseNodePriority
  // refuses it; the step is still captured and replayed, without it.
  emulation::setUnknownGraphInstantiateFlags(cudaGraphInstantiateFlagUseNodePriority);
  Plan plan = elementwiseChain();
  Expected<std::unique_ptr<Executable>> executable = cuda->prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  std::vector<Tensor> arguments;
  for (const Tensor& argument : randomArguments(plan, 12, -3.0, 3.0))
    arguments.push_back(*cuda->toDevice(argument));
  for (int run = 0; run < 3; ++run)
    ASSERT_TRUE((*executable)->run(arguments).ok()) << "run " << run;
  emulation::setUnknownGraphInstantiateFlags(0);
  CudaRunStats stats = cuda->stats(**executable);
  EXPECT_EQ(stats.graphDisabledReason, "");
  EXPECT_EQ(stats.captures, 1);
  EXPECT_EQ(stats.graphReplays, 2);
  EXPECT_EQ(emulation::lastGraphInstantiation().flags, 0u);
}
#endif

/// Runs `plan` twice on each backend from the same random arguments (seed,
/// in [low, high]) and expects the CPU's bits from the device: every result,
/// and argument `state`, which both runs update in place.
void expectTheCpusBitsOverTwoRuns(Backend& cpu, CudaBackend& cuda, const Plan& plan, uint32_t seed, double low,
                                  double high, size_t state) {
  Expected<BothRuns> both = runOnBoth(cpu, cuda, plan, randomArguments(plan, seed, low, high), 2);
  ASSERT_TRUE(both.ok()) << both.message();
  ASSERT_EQ(both->cpuResults.size(), both->cudaResults.size());
  for (size_t i = 0; i < both->cpuResults.size(); ++i)
    EXPECT_TRUE(both->cudaResults[i].bitwiseEqual(both->cpuResults[i])) << "result " << i;
  EXPECT_TRUE(both->cudaArguments[state].bitwiseEqual(both->cpuArguments[state]))
      << "the state, updated in place twice";
}

TEST_F(GpuTest, GeneratedElementwiseKernelsMatchCpu) {
  Plan plan = elementwiseChain();
  Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, randomArguments(plan, 11, -3.0, 3.0));
  ASSERT_TRUE(both.ok()) << both.message();
  ASSERT_EQ(both->cpuResults.size(), both->cudaResults.size());
  for (size_t i = 0; i < both->cpuResults.size(); ++i) {
    SCOPED_TRACE("result " + std::to_string(i));
    // The device's tanh may differ from the host's in the last ulp.
    EXPECT_TRUE(allClose(both->cpuResults[i], both->cudaResults[i], 2.0));
  }
}

TEST_F(GpuTest, GeneratedKernelsMatchTheCpuWhenEachThreadTakesSeveralElements) {
  // 2.2M elements: past the grid's cap (16 blocks of 256 per SM), so each
  // thread loads all four slots of a pass before it computes them, through
  // a broadcast (the dividing path), a same-shape conversion and an in-place
  // update.
  PlanBuilder b("wide");
  const Shape shape = {1100, 2000};
  BufferId x = b.argument(tt(DType::F16, shape), BufferRole::Input, "x");
  BufferId bias = b.argument(tt(DType::F16, {2000}), BufferRole::Input, "bias");
  BufferId state = b.argument(tt(DType::F32, shape), BufferRole::Param, "state");
  BufferId sum = b.output(tt(DType::F16, shape)), widened = b.output(tt(DType::F32, shape));
  b.op("jit.add", {x, bias}, {sum});
  b.op("jit.convert", {sum}, {widened});
  b.op("jit.sub", {state, widened}, {state});
  b.result(sum);
  b.result(widened);
  b.result(state, 2);
  expectTheCpusBitsOverTwoRuns(*cpu, *cuda, b.finish(), 21, -3.0, 3.0, /*state=*/2);
}

TEST_F(GpuTest, GeneratedKernelsGiveTheCpusBitsInChunksAndOutOfThem) {
  // Steps whose operands are contiguous or broadcast along the innermost
  // dimension take chunks of consecutive elements in whole accesses: a row
  // broadcast (a bias), a column broadcast (inner stride 0), a scalar, an
  // i1 mask written and read (8-byte chunks), an i64 conversion (64-byte
  // chunks), an update in place, and a rank-1 tensor whose last chunk is
  // partial. A row of 1001 elements cannot keep chunks in rows and takes
  // the grid-stride loop.
  PlanBuilder b("chunks");
  const Shape shape = {300, 64}, ragged = {300, 1001};
  BufferId x = b.argument(tt(DType::F16, shape), BufferRole::Input, "x");
  BufferId bias = b.argument(tt(DType::F16, {64}), BufferRole::Input, "bias");
  BufferId rowScale = b.argument(tt(DType::F32, {300, 1}), BufferRole::Input, "row_scale");
  BufferId scalar = b.argument(tt(DType::F32, {}), BufferRole::Input, "scalar");
  BufferId tail = b.argument(tt(DType::F32, {1003}), BufferRole::Input, "tail");
  BufferId wide = b.argument(tt(DType::F16, ragged), BufferRole::Input, "wide");
  BufferId wideBias = b.argument(tt(DType::F16, {1001}), BufferRole::Input, "wide_bias");
  BufferId state = b.argument(tt(DType::F32, shape), BufferRole::Param, "state");
  BufferId biased = b.output(tt(DType::F16, shape)), widened = b.temporary(tt(DType::F32, shape));
  BufferId scaled = b.output(tt(DType::F32, shape)), timesScalar = b.output(tt(DType::F32, shape));
  BufferId mask = b.output(tt(DType::I1, shape)), truncated = b.output(tt(DType::I64, shape));
  BufferId halfTail = b.output(tt(DType::F16, {1003})), wideSum = b.output(tt(DType::F16, ragged));
  BufferId chosen = b.output(tt(DType::F32, shape));
  b.op("jit.add", {x, bias}, {biased});
  b.op("jit.convert", {biased}, {widened});
  b.op("jit.mul", {widened, rowScale}, {scaled});
  b.op("jit.mul", {widened, scalar}, {timesScalar});
  b.op("jit.compare", {scaled, timesScalar}, {mask}, {{"predicate", std::string("gt")}});
  b.op("jit.select", {mask, scaled, timesScalar}, {chosen});
  b.op("jit.convert", {timesScalar}, {truncated});
  b.op("jit.sub", {state, scaled}, {state});
  b.op("jit.convert", {tail}, {halfTail});
  b.op("jit.add", {wide, wideBias}, {wideSum});
  for (BufferId result : {biased, scaled, timesScalar, mask, truncated, halfTail, wideSum, chosen})
    b.result(result);
  b.result(state, 7);
  expectTheCpusBitsOverTwoRuns(*cpu, *cuda, b.finish(), 31, -40.0, 40.0, /*state=*/7);
}

/// p <- p - 0.5 * (x @ w), with p and w state: a plan with a GEMM, generated
/// kernels and a tied result, enough to tell replays from re-runs.
Plan statefulPlan() {
  PlanBuilder b("stateful");
  BufferId x = b.argument(tt(DType::F32, {16, 32}), BufferRole::Input, "x");
  BufferId w = b.argument(tt(DType::F32, {32, 8}), BufferRole::Param, "w");
  BufferId p = b.argument(tt(DType::F32, {16, 8}), BufferRole::Param, "p");
  BufferId half = b.constant(tt(DType::F32, {}), std::vector<double>{0.5});
  BufferId product = b.temporary(tt(DType::F32, {16, 8})), scaled = b.temporary(tt(DType::F32, {16, 8}));
  b.op("jit.matmul", {x, w}, {product});
  b.op("jit.mul", {product, half}, {scaled});
  b.op("jit.sub", {p, scaled}, {p}); // the state, updated in place
  BufferId loss = b.output(tt(DType::F32, {16, 8}));
  b.op("jit.relu", {p}, {loss});
  b.result(loss);
  b.result(p, 2);
  return b.finish();
}

TEST_F(GpuTest, AProfiledRunTimesEveryLaunchAndStillComputesTheStep) {
  // AMPJIT_PROFILE: run 2 of this executable goes launch by launch with an
  // event after each, in held segments of 64 launches. 70 generated
  // kernels make two segments.
  PlanBuilder b("profiled");
  BufferId value = b.argument(tt(DType::F32, {257}), BufferRole::Input, "x");
  for (int i = 0; i < 70; ++i) {
    BufferId next = i + 1 == 70 ? b.output(tt(DType::F32, {257})) : b.temporary(tt(DType::F32, {257}));
    b.op("jit.neg", {value}, {next});
    value = next;
  }
  b.result(value);
  Plan plan = b.finish();
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = scratch.file("profile.jsonl");
  std::vector<std::string> lines;
  {
    ScopedEnvironment profile("AMPJIT_PROFILE", path.c_str());
    ScopedEnvironment run("AMPJIT_PROFILE_RUN", "2");
    Expected<std::unique_ptr<Executable>> executable = cuda->prepare(plan);
    ASSERT_TRUE(executable.ok()) << executable.message();
    std::vector<Tensor> host = randomArguments(plan, 9, -2.0, 2.0);
    Expected<std::unique_ptr<Executable>> onCpu = cpu->prepare(plan);
    ASSERT_TRUE(onCpu.ok()) << onCpu.message();
    Expected<std::vector<Tensor>> expected = (*onCpu)->run(host);
    ASSERT_TRUE(expected.ok()) << expected.message();
    for (int run = 0; run < 3; ++run) {
      std::vector<Tensor> arguments = {*cuda->toDevice(host[0])};
      Expected<std::vector<Tensor>> results = (*executable)->run(arguments);
      ASSERT_TRUE(results.ok()) << "run " << run << ": " << results.message();
      EXPECT_TRUE(cuda->toHost((*results)[0])->bitwiseEqual((*expected)[0])) << "run " << run;
    }
    std::ifstream file(path);
    for (std::string line; std::getline(file, line);)
      lines.push_back(line);
  }
  // One line per launch, then the total: one profiled run, not three.
  ASSERT_EQ(lines.size(), 71u);
  double sum = 0;
  for (size_t i = 0; i < 70; ++i) {
    SCOPED_TRACE(lines[i]);
    EXPECT_NE(lines[i].find("\"steps\":[" + std::to_string(i) + "," + std::to_string(i) + "]"), std::string::npos);
    double value = jsonNumber(lines[i], "ms");
    EXPECT_GT(value, 0.0);
    sum += value;
  }
  const std::string& total = lines.back();
  EXPECT_NE(total.find("\"launches\":70,"), std::string::npos) << total;
  EXPECT_NE(total.find("\"segments\":2,"), std::string::npos) << total;
  EXPECT_NE(total.find("\"segments_with_host_time\":0}"), std::string::npos) << total;
  EXPECT_NEAR(jsonNumber(total, "total_ms"), sum, 1e-3 * sum) << total;
}

TEST_F(GpuTest, GraphReplayEqualsStepByStepRuns) {
  Plan plan = statefulPlan();
  std::vector<Tensor> host = randomArguments(plan, 5);
  Expected<std::unique_ptr<CudaBackend>> eagerBackend = createCudaBackend({.useGraphs = false});
  ASSERT_TRUE(eagerBackend.ok()) << eagerBackend.message();
  std::vector<std::vector<Tensor>> results(2);
  std::vector<Tensor> finalState(2);
  for (int variant = 0; variant < 2; ++variant) {
    CudaBackend& backend = variant == 0 ? **eagerBackend : *cuda;
    std::vector<Tensor> arguments;
    for (const Tensor& argument : host)
      arguments.push_back(*backend.toDevice(argument));
    Expected<std::unique_ptr<Executable>> executable = backend.prepare(plan);
    ASSERT_TRUE(executable.ok()) << executable.message();
    for (int run = 0; run < 5; ++run) {
      // A new batch every run: staged into the graph's input buffer.
      arguments[0] = *backend.toDevice(randomArguments(plan, 100 + run)[0]);
      Expected<std::vector<Tensor>> ran = (*executable)->run(arguments);
      ASSERT_TRUE(ran.ok()) << ran.message();
      results[variant].push_back(*backend.toHost((*ran)[0]));
      EXPECT_TRUE((*ran)[1].sharesStorageWith(arguments[2])) << "tied state is updated in place";
    }
    finalState[variant] = *backend.toHost(arguments[2]);
    CudaRunStats stats = backend.stats(**executable);
    if (variant == 0) {
      EXPECT_EQ(stats.eagerRuns, 5);
      EXPECT_EQ(stats.captures, 0);
    } else {
      EXPECT_EQ(stats.eagerRuns, 1);
      EXPECT_EQ(stats.captures, 1);
      EXPECT_EQ(stats.graphReplays, 4);
      EXPECT_EQ(stats.graphDisabledReason, "");
    }
  }
  for (int run = 0; run < 5; ++run)
    EXPECT_TRUE(results[0][size_t(run)].bitwiseEqual(results[1][size_t(run)])) << "run " << run;
  EXPECT_TRUE(finalState[0].bitwiseEqual(finalState[1]));
}

TEST_F(GpuTest, StateMovingToOtherStorageRecapturesTheGraph) {
  Plan plan = statefulPlan();
  std::vector<Tensor> arguments;
  for (const Tensor& argument : randomArguments(plan, 9))
    arguments.push_back(*cuda->toDevice(argument));
  Expected<std::unique_ptr<Executable>> executable = cuda->prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  for (int run = 0; run < 3; ++run)
    ASSERT_TRUE((*executable)->run(arguments).ok());
  Tensor before = *cuda->toHost(arguments[2]);
  arguments[2] = *cuda->toDevice(before); // same value, new storage
  ASSERT_TRUE((*executable)->run(arguments).ok());
  CudaRunStats stats = cuda->stats(**executable);
  EXPECT_EQ(stats.captures, 2);
  // The new storage, not the old, was updated.
  EXPECT_FALSE(cuda->toHost(arguments[2])->bitwiseEqual(before));
}

TEST_F(GpuTest, ReplayedRunOnlyEnqueues) {
  // Ten 2048^3 fp32 products (~170 GFLOP, tens of ms on an H100) against the
  // host time of run(): a run that waited for the GPU would take as long.
  // (On the emulated runtime, whose streams run only when the host waits,
  // 256^3 products take the host as long.)
  PlanBuilder b("heavy");
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
  const int64_t size = 256;
#else
  const int64_t size = 2048;
#endif
  BufferId x = b.argument(tt(DType::F32, {size, size}), BufferRole::Input, "x");
  BufferId w = b.argument(tt(DType::F32, {size, size}), BufferRole::Param, "w");
  BufferId current = x;
  for (int i = 0; i < 10; ++i) {
    BufferId next = i == 9 ? b.output(tt(DType::F32, {size, size})) : b.temporary(tt(DType::F32, {size, size}));
    b.op("jit.matmul", {current, w}, {next});
    current = next;
  }
  b.result(current);
  Plan plan = b.finish();
  std::vector<Tensor> arguments;
  for (const Tensor& argument : randomArguments(plan, 1, -0.02, 0.02))
    arguments.push_back(*cuda->toDevice(argument));
  Expected<std::unique_ptr<Executable>> executable = cuda->prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  for (int run = 0; run < 3; ++run)
    ASSERT_TRUE((*executable)->run(arguments).ok());
  ASSERT_TRUE(cuda->synchronize().ok());
  using Clock = std::chrono::steady_clock;
  Clock::time_point start = Clock::now();
  ASSERT_TRUE((*executable)->run(arguments).ok());
  double enqueued = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_TRUE(cuda->synchronize().ok());
  double completed = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(cuda->stats(**executable).graphReplays, 3);
  EXPECT_LT(enqueued, completed / 4) << "enqueue " << enqueued << " s, completion " << completed << " s";
}

TEST_F(GpuTest, InputsComeFromHostOrDeviceButStateMustBeOnTheDevice) {
  Plan plan = statefulPlan();
  std::vector<Tensor> host = randomArguments(plan, 21);
  std::vector<Tensor> arguments = {host[0], *cuda->toDevice(host[1]), *cuda->toDevice(host[2])};
  Expected<std::unique_ptr<Executable>> executable = cuda->prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  EXPECT_TRUE((*executable)->run(arguments).ok()) << "a host input is staged";
  arguments[2] = host[2];
  Expected<std::vector<Tensor>> refused = (*executable)->run(arguments);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("argument 2 'p' (param f32[16x8]) is in host memory"), std::string::npos)
      << refused.message();
}

TEST_F(GpuTest, RederivingRoundsTheSourceOnTheDevice) {
  PlanBuilder b("derived");
  b.argument(tt(DType::F32, {1000}), BufferRole::Param, "w");
  BufferId low = b.argument(tt(DType::F16, {1000}), BufferRole::Param, "w.f16");
  BufferId out = b.output(tt(DType::F16, {1000}));
  b.op("jit.relu", {low}, {out});
  b.result(out);
  Plan plan = b.finish();
  plan.buffers[low].derivedFrom = 0;
  ASSERT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).message();

  std::vector<Tensor> host = randomArguments(plan, 4, -70000.0, 70000.0);
  std::vector<Tensor> onCpu = {*host[0].clone(), *host[1].clone()};
  ASSERT_TRUE(rederiveArguments(plan, onCpu).ok());
  std::vector<Tensor> onDevice = {*cuda->toDevice(host[0]), *cuda->toDevice(host[1])};
  Expected<std::unique_ptr<Executable>> executable = cuda->prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  ASSERT_TRUE((*executable)->rederive(onDevice).ok());
  // Out-of-range values become infinities in both, rounding to nearest even.
  EXPECT_TRUE(onCpu[1].bitwiseEqual(*cuda->toHost(onDevice[1])));
}

TEST_F(GpuTest, AsyncHostCopyDeliversTheValueAfterTheRun) {
  Plan plan = statefulPlan();
  std::vector<Tensor> host = randomArguments(plan, 13);
  std::vector<Tensor> arguments;
  for (const Tensor& argument : host)
    arguments.push_back(*cuda->toDevice(argument));
  Expected<std::unique_ptr<Executable>> executable = cuda->prepare(plan);
  ASSERT_TRUE(executable.ok());
  Expected<std::vector<Tensor>> ran = (*executable)->run(arguments);
  ASSERT_TRUE(ran.ok()) << ran.message();
  Expected<std::unique_ptr<AsyncHostCopy>> pending = cuda->copyToHostAsync((*ran)[0]);
  ASSERT_TRUE(pending.ok()) << pending.message();
  Expected<Tensor> value = (*pending)->wait();
  ASSERT_TRUE(value.ok());
  EXPECT_TRUE((*pending)->ready());
  EXPECT_TRUE(value->bitwiseEqual(*cuda->toHost((*ran)[0])));
  EXPECT_GT(cuda->peakDeviceBytes(), 0);
}

TEST_F(GpuTest, AReadDroppedBeforeItArrivesWaitsForNothingAndTheNextReadTakesItsBuffer) {
  // A caller who asks for a loss every step and looks at only some: the
  // others are dropped in flight. Dropping one must not wait for the GPU,
  // and the next copy reuses its pinned buffer and event, landing after it.
  Plan plan = statefulPlan();
  std::vector<Tensor> arguments;
  for (const Tensor& argument : randomArguments(plan, 17))
    arguments.push_back(*cuda->toDevice(argument));
  Expected<std::unique_ptr<Executable>> executable = cuda->prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  Expected<std::vector<Tensor>> first = (*executable)->run(arguments);
  ASSERT_TRUE(first.ok()) << first.message();
  Expected<std::unique_ptr<AsyncHostCopy>> dropped = cuda->copyToHostAsync((*first)[0]);
  ASSERT_TRUE(dropped.ok()) << dropped.message();
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
  uint64_t ranBefore = emulation::operationsRun(), pinnedBefore = emulation::pinnedAllocations(),
           eventsBefore = emulation::eventsCreated();
#endif
  dropped->reset();
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
  EXPECT_EQ(emulation::operationsRun(), ranBefore) << "dropping a read waited for the GPU";
#endif

  Expected<std::vector<Tensor>> second = (*executable)->run(arguments);
  ASSERT_TRUE(second.ok()) << second.message();
  Expected<std::unique_ptr<AsyncHostCopy>> kept = cuda->copyToHostAsync((*second)[0]);
  ASSERT_TRUE(kept.ok()) << kept.message();
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
  EXPECT_EQ(emulation::pinnedAllocations(), pinnedBefore) << "the dropped read's buffer was not reused";
  EXPECT_EQ(emulation::eventsCreated(), eventsBefore) << "the dropped read's event was not reused";
  EXPECT_EQ(emulation::operationsRun(), ranBefore) << "the second run or its read waited for the GPU";
#endif
  Expected<Tensor> value = (*kept)->wait();
  ASSERT_TRUE(value.ok()) << value.message();
  Expected<Tensor> expected = cuda->toHost((*second)[0]);
  ASSERT_TRUE(expected.ok()) << expected.message();
  EXPECT_TRUE(value->bitwiseEqual(*expected)) << "the read holds the second run's value";
  EXPECT_FALSE(value->bitwiseEqual(*cuda->toHost((*first)[0])))
      << "the runs gave the same value, so the test cannot tell the reads apart";
}

TEST_F(GpuTest, CheckNumericsNamesTheSameFirstStepAsTheCpu) {
  // exp overflows in f16 at step 0's input 12; log of -3 is NaN at step 1;
  // the first bad step is 0, and both backends must say so in the same words.
  PlanBuilder builder("numerics");
  BufferId x = builder.argument(tt(DType::F16, {4}), BufferRole::Input, "x");
  BufferId e = builder.temporary(tt(DType::F16, {4}));
  BufferId l = builder.output(tt(DType::F16, {4}));
  builder.op("jit.exp", {x}, {e});
  builder.op("jit.log", {e}, {l});
  builder.result(l);
  Plan plan = builder.finish();
  std::vector<Tensor> arguments = {test::filled(DType::F16, {4}, {1, 12, -3, 4})};
  Expected<std::vector<Tensor>> onCpu = createCpuBackend({.checkNumerics = true})->run(plan, arguments);
  ASSERT_FALSE(onCpu.ok());
  Expected<std::unique_ptr<CudaBackend>> checking = createCudaBackend({.checkNumerics = true});
  ASSERT_TRUE(checking.ok()) << checking.message();
  Expected<std::unique_ptr<Executable>> executable = (*checking)->prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  for (int run = 0; run < 3; ++run) { // never a graph: every run checks
    Expected<std::vector<Tensor>> onDevice = (*executable)->run(arguments);
    ASSERT_FALSE(onDevice.ok()) << "run " << run;
    EXPECT_EQ(onDevice.message(), onCpu.message());
  }
  EXPECT_EQ((*checking)->stats(**executable).captures, 0);
  // Without the option an inf is data.
  Expected<std::unique_ptr<Executable>> plain = cuda->prepare(plan);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_TRUE((*plain)->run(arguments).ok());
}

TEST_F(GpuTest, CheckNumericsBlamesAnArgumentHoldingANanInTheCpusWords) {
  PlanBuilder builder("numerics");
  BufferId x = builder.argument(tt(DType::F16, {4}), BufferRole::Input, "x");
  BufferId y = builder.argument(tt(DType::F16, {4}), BufferRole::Input, "y");
  BufferId sum = builder.output(tt(DType::F16, {4}));
  builder.op("jit.add", {x, y}, {sum});
  builder.result(sum);
  Plan plan = builder.finish();
  std::vector<Tensor> arguments = {test::filled(DType::F16, {4}, {1, 2, 3, 4}),
                                   test::filled(DType::F16, {4}, {0, 0, std::nan(""), 0})};
  Expected<std::vector<Tensor>> onCpu = createCpuBackend({.checkNumerics = true})->run(plan, arguments);
  ASSERT_FALSE(onCpu.ok());
  EXPECT_NE(onCpu.message().find("argument 1 'y' (input f16[4]) holds an inf or NaN"), std::string::npos)
      << onCpu.message();
  Expected<std::unique_ptr<CudaBackend>> checking = createCudaBackend({.checkNumerics = true});
  ASSERT_TRUE(checking.ok()) << checking.message();
  Expected<std::unique_ptr<Executable>> executable = (*checking)->prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  Expected<std::vector<Tensor>> onDevice = (*executable)->run(arguments);
  ASSERT_FALSE(onDevice.ok());
  EXPECT_EQ(onDevice.message(), onCpu.message());
  // Once the batch is finite the same executable runs.
  arguments[1] = test::filled(DType::F16, {4}, {0, 0, 1, 0});
  EXPECT_TRUE((*executable)->run(arguments).ok());
}

TEST_F(GpuTest, AWidenedReductionInOneLaunchGivesTheBitsOfTheConversionAndTheReduction) {
  // AMP's fp32 bias gradient of an f16/bf16 gradient: the widening and the
  // sum as one launch that reads the narrow tensor, against the same plan
  // under AMPJIT_CHECK_NUMERICS, which runs the two steps apart (and checks
  // every output), bit for bit; and against the CPU.
  Expected<std::unique_ptr<CudaBackend>> apart = createCudaBackend({.checkNumerics = true});
  ASSERT_TRUE(apart.ok()) << apart.message();
  struct Case {
    Shape shape, reduced;
    std::vector<int64_t> axes;
  };
  const Case cases[] = {
      {{300, 7}, {7}, {0}},      // the column kernel
      {{2000, 40}, {40}, {0}},   // the column kernel in several parts
      {{700, 130}, {130}, {0}},  // paired columns: three tiles, the last partial, two parts
      {{7, 300}, {7}, {1}},      // a block per output
      {{70001}, {}, {0}},        // split over blocks
      {{4, 5, 6}, {5}, {0, 2}}   // a thread per output
  };
  for (DType narrow : {DType::F16, DType::BF16})
    for (const Case& c : cases)
      for (std::string op : {"jit.sum", "jit.mean", "jit.max"}) {
        std::string what = op + " " + std::string(dtypeName(narrow)) + " " + shapeToString(c.shape);
        PlanBuilder b("widened_reduction");
        BufferId x = b.argument(tt(narrow, c.shape), BufferRole::Input, "x");
        BufferId wide = b.temporary(tt(DType::F32, c.shape));
        BufferId y = b.output(tt(DType::F32, c.reduced));
        b.op("amp.cast", {x}, {wide});
        b.op(op, {wide}, {y}, {{"axes", c.axes}});
        b.result(y);
        Plan plan = b.finish();
        std::vector<Tensor> arguments = randomArguments(plan, 5);
        // Non-finite values travel as they do through the f32 copy.
        arguments[0].set(3, std::numeric_limits<double>::infinity());
        arguments[0].set(arguments[0].elementCount() - 1, std::numeric_limits<double>::quiet_NaN());
        Expected<std::unique_ptr<Executable>> fused = cuda->prepare(plan);
        Expected<std::unique_ptr<Executable>> twoSteps = (*apart)->prepare(plan);
        ASSERT_TRUE(fused.ok() && twoSteps.ok()) << what << ": " << fused.message() << twoSteps.message();
        EXPECT_EQ(cuda->stats(**fused).launchesPerRun, 1) << what;
        EXPECT_EQ((*apart)->stats(**twoSteps).launchesPerRun, 2) << what;
        // Finite data: the split plan's numerics check would stop at an inf.
        std::vector<Tensor> finite = randomArguments(plan, 6, -4, 4);
        std::vector<Tensor> split = {*(*apart)->toDevice(finite[0])};
        Expected<std::vector<Tensor>> expected = (*twoSteps)->run(split);
        ASSERT_TRUE(expected.ok()) << what << ": " << expected.message();
        for (int run = 0; run < 2; ++run) { // step by step, then the replayed graph
          std::vector<Tensor> onDevice = {*cuda->toDevice(finite[0])};
          Expected<std::vector<Tensor>> got = (*fused)->run(onDevice);
          ASSERT_TRUE(got.ok()) << what << ": " << got.message();
          EXPECT_TRUE(cuda->toHost((*got)[0])->bitwiseEqual(*(*apart)->toHost((*expected)[0]))) << what << ", run " << run;
        }
        Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments, 2);
        ASSERT_TRUE(both.ok()) << what << ": " << both.message();
        int64_t reduced = 1;
        for (int64_t axis : c.axes)
          reduced *= c.shape[size_t(axis)];
        EXPECT_TRUE(allClose(both->cpuResults[0], both->cudaResults[0], 1.0 + double(reduced) / 64))
            << what << " with inf and NaN";
      }
}

/// A layer's bias-gradient tail as elementwise fusion leaves it at O1: the
/// relu gradient of dy [shape] at y (y of `yShape`, which broadcasts), kept
/// in the low dtype (an output) and widened to f32 in one FusedElementwise
/// step, the widened copy summed over the first dimension.
Plan reluGradientWithColumnSums(DType low, const Shape& shape, const Shape& yShape) {
  PlanBuilder b("bias_gradient_tail");
  BufferId dy = b.argument(tt(low, shape), BufferRole::Input, "dy");
  BufferId y = b.argument(tt(low, yShape), BufferRole::Input, "y");
  BufferId gradient = b.output(tt(low, shape));
  BufferId wide = b.temporary(tt(DType::F32, shape));
  b.fused(
      {
          {ElementwiseOp::Load, low, {0, 0, 0}, 0.0},
          {ElementwiseOp::Load, low, {1, 0, 0}, 0.0},
          {ElementwiseOp::ReluGrad, low, {0, 1, 0}, 0.0},
          {ElementwiseOp::Convert, DType::F32, {2, 0, 0}, 0.0},
      },
      {2, 3}, {dy, y}, {gradient, wide}, "fused(jit.relu_grad, amp.cast)");
  Shape reduced(shape.begin() + 1, shape.end());
  BufferId sums = b.output(tt(DType::F32, reduced));
  b.op("jit.sum", {wide}, {sums}, {{"axes", std::vector<int64_t>{0}}});
  b.result(gradient);
  b.result(sums);
  return b.finish();
}

TEST_F(GpuTest, AnElementwiseStepAndItsColumnSumsInOneLaunchGiveTheBitsOfTheTwoSteps) {
  // The generated kernel that also sums an output over the rows
  // (columnSummedElementwiseAt), against the same plan under
  // AMPJIT_CHECK_NUMERICS, which runs the two steps apart, bit for bit in
  // both outputs; and against the CPU. Where the sum alone would not run as
  // one pass of the column kernel, the steps stay apart.
  Expected<std::unique_ptr<CudaBackend>> apart = createCudaBackend({.checkNumerics = true});
  ASSERT_TRUE(apart.ok()) << apart.message();
  struct Case {
    Shape shape, yShape;
    int64_t launches;
  };
  const Case cases[] = {
      {{64, 512}, {64, 512}, 1},   // the MNIST classifier's hidden layers
      {{300, 7}, {300, 7}, 1},     // one partial tile
      {{40, 100}, {100}, 1},       // y broadcast over the rows: the dividing path
      {{40, 5, 20}, {40, 5, 20}, 1}, // rank 3: 100 columns
      {{2000, 40}, {2000, 40}, 2}, // the column kernel in several parts
      {{20, 30}, {20, 30}, 2},     // a thread per output
  };
  for (DType low : {DType::F16, DType::BF16})
    for (const Case& c : cases) {
      std::string what = std::string(dtypeName(low)) + " " + shapeToString(c.shape) + " y " + shapeToString(c.yShape);
      Plan plan = reluGradientWithColumnSums(low, c.shape, c.yShape);
      Expected<std::unique_ptr<Executable>> fused = cuda->prepare(plan);
      Expected<std::unique_ptr<Executable>> twoSteps = (*apart)->prepare(plan);
      ASSERT_TRUE(fused.ok() && twoSteps.ok()) << what << ": " << fused.message() << twoSteps.message();
      EXPECT_EQ(cuda->stats(**fused).launchesPerRun, c.launches) << what;
      EXPECT_EQ((*apart)->stats(**twoSteps).launchesPerRun, 2) << what;
      // Bit for bit with dy over 20 binades, so that the f32 sums round and
      // their bits depend on the order of the additions.
      std::vector<Tensor> arguments = randomArguments(plan, 7, -4, 4);
      std::vector<Tensor> spread = randomArguments(plan, 7, -4, 4);
      std::mt19937 generator(8);
      for (int64_t e = 0; e < spread[0].elementCount(); ++e)
        spread[0].set(e, spread[0].at(e) * std::ldexp(1.0, std::uniform_int_distribution<int>(-10, 10)(generator)));
      auto onDevice = [&](CudaBackend& backend) {
        std::vector<Tensor> staged;
        for (const Tensor& argument : spread)
          staged.push_back(*backend.toDevice(argument));
        return staged;
      };
      std::vector<Tensor> splitArguments = onDevice(**apart);
      Expected<std::vector<Tensor>> expected = (*twoSteps)->run(splitArguments);
      ASSERT_TRUE(expected.ok()) << what << ": " << expected.message();
      for (int run = 0; run < 2; ++run) { // step by step, then the replayed graph
        std::vector<Tensor> fusedArguments = onDevice(*cuda);
        Expected<std::vector<Tensor>> got = (*fused)->run(fusedArguments);
        ASSERT_TRUE(got.ok()) << what << ": " << got.message();
        for (size_t k = 0; k < 2; ++k)
          EXPECT_TRUE(cuda->toHost((*got)[k])->bitwiseEqual(*(*apart)->toHost((*expected)[k])))
              << what << ", result " << k << ", run " << run;
      }
      Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments, 2);
      ASSERT_TRUE(both.ok()) << what << ": " << both.message();
      EXPECT_TRUE(both->cpuResults[0].bitwiseEqual(both->cudaResults[0])) << what << ": the relu gradient";
      EXPECT_TRUE(allClose(both->cpuResults[1], both->cudaResults[1], 1.0 + double(c.shape[0]) / 64))
          << what << ": the sums";
    }
}

TEST_F(GpuTest, ConsecutiveTransposesInOneLaunchCopyTheCpusBits) {
  // A ResNet's weight-gradient transposes, gathered before the finiteness
  // check (OHWI back to OIHW), and a transpose of several chunks: one
  // multi-tensor launch for the f16 ones; the f32 one has another element
  // size and a launch of its own; the last reads what the first wrote.
  PlanBuilder b("transposes");
  struct Case {
    Shape shape;
    std::vector<int64_t> perm;
    DType dtype;
  };
  const Case cases[] = {{{64, 3, 3, 32}, {0, 3, 1, 2}, DType::F16},
                        {{8, 7, 7, 3}, {0, 3, 1, 2}, DType::F16},
                        {{5, 1000}, {1, 0}, DType::F16},
                        {{6, 3, 3, 4}, {0, 3, 1, 2}, DType::F32}};
  std::vector<BufferId> outputs;
  for (const Case& c : cases) {
    Shape transposed;
    for (int64_t axis : c.perm)
      transposed.push_back(c.shape[size_t(axis)]);
    BufferId x = b.argument(tt(c.dtype, c.shape), BufferRole::Input);
    BufferId y = b.output(tt(c.dtype, transposed));
    b.op("jit.transpose", {x}, {y}, {{"perm", c.perm}});
    outputs.push_back(y);
  }
  BufferId back = b.output(tt(DType::F16, {64, 3, 3, 32}));
  b.op("jit.transpose", {outputs[0]}, {back}, {{"perm", std::vector<int64_t>{0, 2, 3, 1}}});
  for (BufferId y : outputs)
    b.result(y);
  b.result(back);
  Plan plan = b.finish();
  EXPECT_EQ(cuda::launchGroups(plan), (std::vector<std::pair<size_t, size_t>>{{0, 3}, {3, 4}, {4, 5}}));
  Expected<std::unique_ptr<Executable>> executable = cuda->prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  EXPECT_EQ(cuda->stats(**executable).launchesPerRun, 3);
  Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, randomArguments(plan, 9, -8, 8), 2);
  ASSERT_TRUE(both.ok()) << both.message();
  for (size_t k = 0; k < both->cpuResults.size(); ++k)
    EXPECT_TRUE(both->cpuResults[k].bitwiseEqual(both->cudaResults[k])) << "result " << k;
}

/// The split_check plan of SplitFiniteCheckEqualsOneCheck, prepared by
/// `cuda` with `sideStreamChunks` of its check on the side stream, against
/// the CPU: finite, exp overflowing at the last element, finite again, NaN
/// at the first.
void expectFiniteChecksOfTheCpu(Backend& cpu, CudaBackend& cuda, int64_t sideStreamChunks) {
  const int64_t n = ampjit::runtime::cuda::kMinEarlyFiniteCheckElements;
  PlanBuilder builder("split_check");
  BufferId x = builder.argument(tt(DType::F16, {n}), BufferRole::Input, "x");
  BufferId g1 = builder.temporary(tt(DType::F16, {n}));
  BufferId g2 = builder.temporary(tt(DType::F16, {n}));
  BufferId g3 = builder.temporary(tt(DType::F16, {n}));
  BufferId ok = builder.output(tt(DType::I1, {}));
  builder.op("jit.neg", {x}, {g1});
  builder.op("jit.exp", {x}, {g2});
  builder.op("jit.add", {g1, g2}, {g3});
  builder.op("amp.all_finite", {g1, g2, g3}, {ok});
  builder.result(ok);
  Plan plan = builder.finish();
  Expected<std::unique_ptr<Executable>> executable = cuda.prepare(plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  EXPECT_EQ(cuda.stats(**executable).sideStreamChunks, sideStreamChunks);
  std::vector<std::pair<int64_t, double>> pokes{{0, 0.5}, {n - 1, 12.0}, {0, 0.25}, {0, std::nan("")}};
  for (std::size_t run = 0; run < pokes.size(); ++run) {
    std::vector<Tensor> arguments = randomArguments(plan, uint32_t(40 + run));
    std::vector<double> values = arguments[0].toDoubles();
    for (double& value : values)
      value = std::fmod(std::fabs(value), 1.0);
    values[std::size_t(pokes[run].first)] = pokes[run].second;
    arguments[0] = *Tensor::fromDoubles(DType::F16, {n}, values);
    Expected<std::vector<Tensor>> expected = cpu.run(plan, arguments);
    ASSERT_TRUE(expected.ok()) << expected.message();
    Expected<std::vector<Tensor>> got = (*executable)->run(arguments);
    ASSERT_TRUE(got.ok()) << got.message();
    EXPECT_TRUE(cuda.toHost((*got)[0])->bitwiseEqual((*expected)[0])) << "run " << run;
  }
  CudaRunStats stats = cuda.stats(**executable);
  EXPECT_EQ(stats.captures, 1);
  EXPECT_EQ(stats.graphDisabledReason, "") << "forking to the side stream must stay capturable";
}

TEST_F(GpuTest, SplitFiniteCheckEqualsOneCheck) {
  // Gradients large enough for the side stream: each is its own chunk,
  // forked after its writer; the flag must be reset inside every replay.
  expectFiniteChecksOfTheCpu(*cpu, *cuda, 3);
}

TEST_F(GpuTest, AFiniteCheckKeptInLineOnRequestChecksTheSame) {
  // AMPJIT_CUDA_FINITE_CHECK_IN_LINE=1 (the bundle's overlap-ab stage):
  // the check stays one launch on the main stream.
  ScopedEnvironment inLine("AMPJIT_CUDA_FINITE_CHECK_IN_LINE", "1");
  expectFiniteChecksOfTheCpu(*cpu, *cuda, 0);
}

/// loss = sum((x w0) w1) with both weights' SGD updates deferred to the next
/// run, each its own side-stream launch (2^20 elements, not merged with a
/// later one's: kSmallDeferredLaunchElements). While the first GEMM runs,
/// w1's update may still run beside it; the second GEMM waits for all of it.
/// The gradients are copies of the weights (any deterministic values do).
Plan deferredTwoLayerStep() {
  PlanBuilder b("two_layers_deferred");
  const int64_t width = 1024;
  BufferId x = b.argument(tt(DType::F32, {8, width}), BufferRole::Input, "x");
  BufferId w0 = b.argument(tt(DType::F32, {width, width}), BufferRole::Param, "w0");
  BufferId w1 = b.argument(tt(DType::F32, {width, width}), BufferRole::Param, "w1");
  BufferId lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper, "lr");
  BufferId g0 = b.carried(tt(DType::F32, {width, width}), "g0");
  BufferId g1 = b.carried(tt(DType::F32, {width, width}), "g1");
  BufferId lrCopy = b.carried(tt(DType::F32, {}), "lr.deferred");
  for (auto [w, g] : {std::pair{w0, g0}, std::pair{w1, g1}})
    b.op("jit.sgd_update", {w, g, kNoBuffer, kNoBuffer, lrCopy, kNoBuffer, kNoBuffer, kNoBuffer}, {w});
  BufferId hidden = b.temporary(tt(DType::F32, {8, width})), out = b.temporary(tt(DType::F32, {8, width}));
  b.op("jit.matmul", {x, w0}, {hidden});
  b.op("jit.matmul", {hidden, w1}, {out});
  BufferId loss = b.output(tt(DType::F32, {}));
  b.op("jit.sum", {out}, {loss}, {{"axes", std::vector<int64_t>{0, 1}}});
  b.op("amp.cast", {w1}, {g0});
  b.op("amp.cast", {w0}, {g1});
  b.op("amp.cast", {lr}, {lrCopy});
  b.result(loss);
  b.result(w0, 1);
  b.result(w1, 2);
  Plan plan = b.finish();
  plan.deferredSteps = 2;
  return plan;
}

TEST_F(GpuTest, AGemmBesideTheDeferredUpdateLeavesItTheReservedSms) {
  // CudaBackendOptions::gemmSmReserve: the first GEMM, beside w1's pending
  // update, is planned for the device's SMs less the reserve (cuBLASLt's
  // SM_COUNT_TARGET); the second, after every update's join, for all. The
  // algorithm cuBLASLt picks for fewer SMs may sum in another order: on the
  // H100 the f32 losses differed in their last bits (the emulation computes
  // every algorithm one way). So each backend's losses are held to the CPU's
  // within the products' bound, and the updates, which no GEMM feeds here,
  // to each other's bits.
  Plan plan = deferredTwoLayerStep();
  Expected<std::unique_ptr<CudaBackend>> reserving = createCudaBackend({.gemmSmReserve = 32});
  Expected<std::unique_ptr<CudaBackend>> whole = createCudaBackend({.gemmSmReserve = 0});
  ASSERT_TRUE(reserving.ok() && whole.ok()) << reserving.message() << whole.message();
  Expected<std::unique_ptr<Executable>> onCpu = cpu->prepare(plan);
  Expected<std::unique_ptr<Executable>> withReserve = (*reserving)->prepare(plan);
  Expected<std::unique_ptr<Executable>> without = (*whole)->prepare(plan);
  ASSERT_TRUE(onCpu.ok() && withReserve.ok() && without.ok()) << withReserve.message() << without.message();
  EXPECT_EQ((*reserving)->stats(**withReserve).deferredUpdateGroups, 2);
  EXPECT_EQ((*reserving)->stats(**withReserve).gemmsBesideDeferredUpdate, 1);
  EXPECT_EQ((*whole)->stats(**without).gemmsBesideDeferredUpdate, 0);

  std::vector<Tensor> cpuArguments = randomArguments(plan, 5, -0.05, 0.05);
  std::vector<Tensor> reservedArguments, wholeArguments;
  for (const Tensor& argument : cpuArguments) {
    reservedArguments.push_back(*(*reserving)->toDevice(argument));
    wholeArguments.push_back(*(*whole)->toDevice(argument));
  }
  for (int run = 0; run < 4; ++run) { // step by step, captured, replayed twice
    Expected<std::vector<Tensor>> expected = (*onCpu)->run(cpuArguments);
    Expected<std::vector<Tensor>> reserved = (*withReserve)->run(reservedArguments);
    Expected<std::vector<Tensor>> plain = (*without)->run(wholeArguments);
    ASSERT_TRUE(expected.ok() && reserved.ok() && plain.ok()) << reserved.message() << plain.message();
    // Two products over K = 1024 and a sum of 8192 terms, each summed in its
    // own order on each backend.
    EXPECT_TRUE(allClose((*expected)[0], *(*reserving)->toHost((*reserved)[0]), 64)) << "run " << run;
    EXPECT_TRUE(allClose((*expected)[0], *(*whole)->toHost((*plain)[0]), 64)) << "run " << run;
  }
  ASSERT_TRUE((*withReserve)->completeDeferred(reservedArguments).ok());
  ASSERT_TRUE((*without)->completeDeferred(wholeArguments).ok());
  ASSERT_TRUE((*onCpu)->completeDeferred(cpuArguments).ok());
  for (size_t weight : {1, 2}) {
    Tensor reservedWeight = *(*reserving)->toHost(reservedArguments[weight]);
    EXPECT_TRUE(reservedWeight.bitwiseEqual(*(*whole)->toHost(wholeArguments[weight]))) << "weight " << weight;
    EXPECT_TRUE(reservedWeight.bitwiseEqual(cpuArguments[weight])) << "weight " << weight;
  }
  EXPECT_EQ((*reserving)->stats(**withReserve).captures, 1);
  EXPECT_EQ((*reserving)->stats(**withReserve).graphReplays, 3);
}

TEST_F(GpuTest, AGemmSmReserveOutsideTheDeviceIsAClearError) {
  Expected<std::unique_ptr<CudaBackend>> all = createCudaBackend({.gemmSmReserve = 100000});
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.message().find("gemmSmReserve 100000"), std::string::npos) << all.message();
  for (std::string value : {"lots", "-3", "12x", "100000"}) {
    ScopedEnvironment reserve("AMPJIT_CUDA_GEMM_SM_RESERVE", value.c_str());
    Expected<std::unique_ptr<CudaBackend>> backend = createCudaBackend();
    ASSERT_FALSE(backend.ok()) << value;
    EXPECT_NE(backend.message().find("AMPJIT_CUDA_GEMM_SM_RESERVE='" + value + "'"), std::string::npos)
        << backend.message();
  }
  ScopedEnvironment reserve("AMPJIT_CUDA_GEMM_SM_RESERVE", "16");
  EXPECT_TRUE(createCudaBackend().ok());
}

TEST_F(GpuTest, AGemmTuningCandidateCountOutsideOneToSixtyFourIsAClearError) {
  for (int count : {0, 65, 1000}) { // any negative takes the variable
    Expected<std::unique_ptr<CudaBackend>> backend = createCudaBackend({.gemmTuningCandidates = count});
    ASSERT_FALSE(backend.ok()) << count;
    EXPECT_NE(backend.message().find("gemmTuningCandidates " + std::to_string(count) + ": "), std::string::npos)
        << backend.message();
  }
  for (std::string value : {"many", "0", "65", "8x"}) {
    ScopedEnvironment candidates("AMPJIT_CUDA_GEMM_TUNING_CANDIDATES", value.c_str());
    Expected<std::unique_ptr<CudaBackend>> backend = createCudaBackend();
    ASSERT_FALSE(backend.ok()) << value;
    EXPECT_NE(backend.message().find("AMPJIT_CUDA_GEMM_TUNING_CANDIDATES='" + value + "'"), std::string::npos)
        << backend.message();
  }
  for (auto [value, resolved] : {std::pair<const char*, int>{nullptr, 8}, {"1", 1}, {"64", 64}}) {
    ScopedEnvironment candidates("AMPJIT_CUDA_GEMM_TUNING_CANDIDATES", value);
    Expected<std::unique_ptr<CudaBackend>> backend = createCudaBackend();
    ASSERT_TRUE(backend.ok()) << backend.message();
    EXPECT_EQ((*backend)->resolvedOptions().gemmTuningCandidates, resolved) << (value ? value : "unset");
  }
}

TEST_F(GpuTest, TheUpdateSwitchesAreOnUnlessSetToZeroAndOptionsOverrideThem) {
  // Speculative updates, folded updates and GEMM tuning are the defaults since
  // the H200 measured them on mlp9 (bench/results/2026-11-27-h200); each
  // switch turns its own off, and an option the caller set is kept as given.
  const char* switches[] = {"AMPJIT_CUDA_SPECULATIVE_UPDATE", "AMPJIT_CUDA_GEMM_FOLDED_UPDATE",
                            "AMPJIT_CUDA_GEMM_TUNING"};
  for (const char* value : {static_cast<const char*>(nullptr), "1", "0", ""}) {
    std::string label = value ? "'" + std::string(value) + "'" : "unset";
    bool on = value == nullptr || std::string(value) == "1";
    for (const char* off : {static_cast<const char*>(nullptr), switches[0], switches[1], switches[2]}) {
      std::vector<std::unique_ptr<ScopedEnvironment>> environment;
      for (const char* name : switches)
        environment.push_back(std::make_unique<ScopedEnvironment>(name, name == off ? "0" : value));
      Expected<std::unique_ptr<CudaBackend>> backend = createCudaBackend();
      ASSERT_TRUE(backend.ok()) << backend.message();
      CudaBackendOptions resolved = (*backend)->resolvedOptions();
      std::string where = label + (off ? std::string(", ") + off + "=0" : "");
      EXPECT_EQ(resolved.speculativeUpdateMinimumElements, on && off != switches[0] ? int64_t(1) << 24 : 0)
          << where;
      EXPECT_EQ((*backend)->speculatesOptimizerUpdates(), on && off != switches[0]) << where;
      EXPECT_EQ(resolved.foldUpdatesIntoGemms, on && off != switches[1] ? 1 : 0) << where;
      EXPECT_EQ(resolved.gemmTuningMinimumFlops, on && off != switches[2] ? int64_t(1) << 34 : 0) << where;
    }
  }
  ScopedEnvironment speculate("AMPJIT_CUDA_SPECULATIVE_UPDATE", "0");
  ScopedEnvironment fold("AMPJIT_CUDA_GEMM_FOLDED_UPDATE", nullptr);
  Expected<std::unique_ptr<CudaBackend>> given = createCudaBackend(
      {.speculativeUpdateMinimumElements = 7, .foldUpdatesIntoGemms = 0, .gemmTuningMinimumFlops = 5});
  ASSERT_TRUE(given.ok()) << given.message();
  EXPECT_EQ((*given)->resolvedOptions().speculativeUpdateMinimumElements, 7);
  EXPECT_EQ((*given)->resolvedOptions().foldUpdatesIntoGemms, 0);
  EXPECT_EQ((*given)->resolvedOptions().gemmTuningMinimumFlops, 5);
}

TEST_F(GpuTest, ADeferredUpdateKeptInLineOnRequestGivesTheCpusState) {
  // AMPJIT_CUDA_DEFERRED_UPDATE_IN_LINE=1 (the bundle's overlap-ab stage):
  // the deferred update runs first on the main stream, so no GEMM is beside
  // it, even with SMs to leave it.
  ScopedEnvironment inLine("AMPJIT_CUDA_DEFERRED_UPDATE_IN_LINE", "1");
  Plan plan = deferredTwoLayerStep();
  Expected<std::unique_ptr<CudaBackend>> reserving = createCudaBackend({.gemmSmReserve = 32});
  ASSERT_TRUE(reserving.ok()) << reserving.message();
  Expected<std::unique_ptr<Executable>> onCpu = cpu->prepare(plan), onGpu = (*reserving)->prepare(plan);
  ASSERT_TRUE(onCpu.ok() && onGpu.ok()) << onGpu.message();
  EXPECT_EQ((*reserving)->stats(**onGpu).deferredUpdateGroups, 0);
  EXPECT_EQ((*reserving)->stats(**onGpu).gemmsBesideDeferredUpdate, 0);
  std::vector<Tensor> cpuArguments = randomArguments(plan, 7, -0.05, 0.05);
  std::vector<Tensor> gpuArguments;
  for (const Tensor& argument : cpuArguments)
    gpuArguments.push_back(*(*reserving)->toDevice(argument));
  for (int run = 0; run < 4; ++run) {
    Expected<std::vector<Tensor>> expected = (*onCpu)->run(cpuArguments);
    Expected<std::vector<Tensor>> got = (*onGpu)->run(gpuArguments);
    ASSERT_TRUE(expected.ok() && got.ok()) << got.message();
    EXPECT_TRUE(allClose((*expected)[0], *(*reserving)->toHost((*got)[0]), 64)) << "run " << run;
    for (size_t weight : {1, 2})
      EXPECT_TRUE((*(*reserving)->toHost(gpuArguments[weight])).bitwiseEqual(cpuArguments[weight]))
          << "weight " << weight << " after run " << run;
  }
  CudaRunStats stats = (*reserving)->stats(**onGpu);
  EXPECT_EQ(stats.captures, 1);
  EXPECT_EQ(stats.graphDisabledReason, "");
}

TEST_F(GpuTest, ATimelineRunStampsEachLaunchOnItsStreamAndStillComputesTheStep) {
  // AMPJIT_TIMELINE: run 3 of the two-layer step runs as replayed, each
  // launch between two stamps on its stream: with graphs, a graph of its
  // own; without, step by step. Either way it is one real step: the state
  // after every run is the CPU's.
  Plan plan = deferredTwoLayerStep();
  Expected<std::unique_ptr<CudaBackend>> eager = createCudaBackend({.useGraphs = false});
  ASSERT_TRUE(eager.ok()) << eager.message();
  for (bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "with graphs" : "step by step");
    CudaBackend& backend = graphs ? *cuda : **eager;
    ::ampjit::testing::TemporaryDirectory scratch;
    std::string path = scratch.file("timeline.jsonl");
    std::vector<std::string> lines;
    CudaRunStats stats;
    {
      ScopedEnvironment timeline("AMPJIT_TIMELINE", path.c_str());
      ScopedEnvironment run("AMPJIT_TIMELINE_RUN", "3");
      Expected<std::unique_ptr<Executable>> onCpu = cpu->prepare(plan), onGpu = backend.prepare(plan);
      ASSERT_TRUE(onCpu.ok() && onGpu.ok()) << onGpu.message();
      std::vector<Tensor> cpuArguments = randomArguments(plan, 11, -0.05, 0.05);
      std::vector<Tensor> gpuArguments;
      for (const Tensor& argument : cpuArguments)
        gpuArguments.push_back(*backend.toDevice(argument));
      for (int run = 0; run < 4; ++run) {
        Expected<std::vector<Tensor>> expected = (*onCpu)->run(cpuArguments);
        Expected<std::vector<Tensor>> got = (*onGpu)->run(gpuArguments);
        ASSERT_TRUE(expected.ok() && got.ok()) << got.message();
        EXPECT_TRUE(allClose((*expected)[0], *backend.toHost((*got)[0]), 64)) << "run " << run;
        for (size_t weight : {1, 2})
          EXPECT_TRUE(backend.toHost(gpuArguments[weight])->bitwiseEqual(cpuArguments[weight]))
              << "weight " << weight << " after run " << run;
      }
      stats = backend.stats(**onGpu);
      std::ifstream file(path);
      for (std::string line; std::getline(file, line);)
        lines.push_back(line);
    }
    EXPECT_EQ(stats.timelineRuns, 1);
    EXPECT_EQ(stats.graphReplays, graphs ? 2 : 0);
    EXPECT_EQ(stats.captures, graphs ? 1 : 0) << "the timeline's graph is its own, not the executable's";
    ASSERT_EQ(lines.size(), std::size_t(stats.launchesPerRun) + 1) << "a line per launch, then the summary";

    // The two deferred updates (steps 0 and 1) on the side stream, the rest
    // on the main one; each stream's launches one after another.
    std::map<std::string, std::pair<double, double>> byLaunch; // "[first,last]" -> start, end
    std::map<std::string, double> streamEnd;
    int sideLaunches = 0;
    for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
      SCOPED_TRACE(lines[i]);
      double start = jsonNumber(lines[i], "start_us"), end = jsonNumber(lines[i], "end_us");
      double beside = jsonNumber(lines[i], "beside_other_stream_us");
      ASSERT_FALSE(std::isnan(start) || std::isnan(end) || std::isnan(beside));
      EXPECT_LE(start, end);
      EXPECT_GE(beside, 0.0);
      EXPECT_LE(beside, (end - start) * (1 + 1e-6) + 1e-3);
      std::size_t steps = lines[i].find("\"steps\":[");
      ASSERT_NE(steps, std::string::npos);
      std::string key = lines[i].substr(steps + 9, lines[i].find(']', steps) - steps - 9);
      bool side = lines[i].find("\"stream\":\"side\"") != std::string::npos;
      ASSERT_TRUE(side || lines[i].find("\"stream\":\"main\"") != std::string::npos);
      sideLaunches += side;
      EXPECT_EQ(side, key == "0,0" || key == "1,1");
      std::string stream = side ? "side" : "main";
      if (streamEnd.count(stream)) {
        EXPECT_GE(start, streamEnd[stream]) << "a stream's launches run one after another";
      }
      streamEnd[stream] = end;
      byLaunch[key] = {start, end};
    }
    EXPECT_EQ(sideLaunches, 2);
    // Each stamp follows its stream's waits: the first GEMM starts after w0's
    // update, the second after w1's too.
    ASSERT_TRUE(byLaunch.count("0,0") && byLaunch.count("1,1") && byLaunch.count("2,2") && byLaunch.count("3,3"));
    EXPECT_GE(byLaunch["2,2"].first, byLaunch["0,0"].second);
    EXPECT_GE(byLaunch["3,3"].first, byLaunch["1,1"].second);
    // And the stamp after a launch follows the launch: an update of 1M
    // elements or a GEMM takes microseconds.
    for (std::string key : {"0,0", "1,1", "2,2", "3,3"})
      EXPECT_GT(byLaunch[key].second, byLaunch[key].first) << key;

    const std::string& summary = lines.back();
    SCOPED_TRACE(summary);
    EXPECT_EQ(jsonNumber(summary, "timeline_launches"), double(stats.launchesPerRun));
    EXPECT_NE(summary.find(graphs ? "\"graph\":true" : "\"graph\":false"), std::string::npos);
    double span = jsonNumber(summary, "span_us"), mainBusy = jsonNumber(summary, "main_busy_us");
    double sideBusy = jsonNumber(summary, "side_busy_us"), both = jsonNumber(summary, "both_busy_us");
    EXPECT_GT(mainBusy, 0.0);
    EXPECT_GT(sideBusy, 0.0);
    EXPECT_LE(mainBusy, span * (1 + 1e-6));
    EXPECT_LE(both, std::min(mainBusy, sideBusy) * (1 + 1e-6));
  }
}

TEST_F(GpuTest, AnObservedRunThatIsNoRunNumberOrWithAnUnwritableFileIsAClearError) {
  // AMPJIT_PROFILE_RUN and AMPJIT_TIMELINE_RUN count from 1. A value that is
  // not such a number is refused by name where its path asks for the run,
  // rather than silently observing some other run (or none); so is a path
  // that cannot be written.
  Plan plan = statefulPlan();
  for (auto [pathVariable, runVariable] : {std::pair{"AMPJIT_PROFILE", "AMPJIT_PROFILE_RUN"},
                                           std::pair{"AMPJIT_TIMELINE", "AMPJIT_TIMELINE_RUN"}}) {
    for (std::string value : {"abc", "0", "-2", "3x"}) {
      SCOPED_TRACE(std::string(runVariable) + "=" + value);
      ScopedEnvironment path(pathVariable, "/nonexistent/never-written.jsonl");
      ScopedEnvironment run(runVariable, value.c_str());
      Expected<std::unique_ptr<Executable>> executable = cuda->prepare(plan);
      ASSERT_FALSE(executable.ok());
      EXPECT_NE(executable.message().find("plan @" + plan.name + ": " + runVariable + "='" + value + "'"),
                std::string::npos)
          << executable.message();
    }
    {
      // A file the run could not write once its step has run is refused
      // before any step runs.
      ScopedEnvironment path(pathVariable, "/nonexistent/never-written.jsonl");
      Expected<std::unique_ptr<Executable>> executable = cuda->prepare(plan);
      ASSERT_FALSE(executable.ok());
      EXPECT_NE(executable.message().find(std::string(pathVariable) +
                                          "='/nonexistent/never-written.jsonl': cannot open the file for appending"),
                std::string::npos)
          << executable.message();
    }
    ScopedEnvironment run(runVariable, "abc");
    EXPECT_TRUE(cuda->prepare(plan).ok()) << "without " << pathVariable << ", nothing reads " << runVariable;
  }
}

TEST_F(GpuTest, DeferredUpdateOnTheSideStreamMatchesTheCpu) {
  DeferredSgdStep parts = deferredSgdStep();
  Expected<std::unique_ptr<Executable>> onCpu = cpu->prepare(parts.plan), onGpu = cuda->prepare(parts.plan);
  ASSERT_TRUE(onCpu.ok() && onGpu.ok()) << onGpu.message();
  EXPECT_EQ(cuda->stats(**onGpu).deferredUpdateGroups, 1);
  std::vector<Tensor> cpuArguments = randomArguments(parts.plan, 3);
  std::vector<Tensor> gpuArguments;
  for (const Tensor& argument : cpuArguments)
    gpuArguments.push_back(*cuda->toDevice(argument));
  auto compareState = [&](const std::string& when) {
    Tensor w = *cuda->toHost(gpuArguments[1]);
    EXPECT_TRUE(w.bitwiseEqual(cpuArguments[1])) << when;
  };
  // Runs 0 and 1 step by step and captured; after a completion, one step by
  // step without the update, then the captured graph again. A new batch x
  // each run; the state stays where it is (a state tensor at a new address
  // is a new capture, and whether the pool hands back an old address is its
  // business, not this test's).
  for (int run = 0; run < 6; ++run) {
    cpuArguments[0] = randomArguments(parts.plan, uint32_t(10 + run))[0];
    gpuArguments[0] = *cuda->toDevice(cpuArguments[0]);
    Expected<std::vector<Tensor>> expected = (*onCpu)->run(cpuArguments);
    Expected<std::vector<Tensor>> got = (*onGpu)->run(gpuArguments);
    ASSERT_TRUE(expected.ok() && got.ok()) << got.message();
    EXPECT_TRUE(cuda->toHost((*got)[0])->bitwiseEqual((*expected)[0])) << "loss of run " << run;
    compareState("after run " + std::to_string(run));
    if (run == 3) {
      ASSERT_TRUE((*onCpu)->completeDeferred(cpuArguments).ok());
      ASSERT_TRUE((*onGpu)->completeDeferred(gpuArguments).ok());
      EXPECT_FALSE((*onGpu)->deferredPending());
      compareState("after completing run 3's update");
    }
  }
  CudaRunStats stats = cuda->stats(**onGpu);
  EXPECT_EQ(stats.graphDisabledReason, "") << "forking the update to the side stream must stay capturable";
  EXPECT_EQ(stats.captures, 1);
  EXPECT_EQ(stats.eagerRuns, 2) << "the first run and the run after the completion";
  EXPECT_EQ(stats.graphReplays, 4);
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
  // The deferred update (the side stream, a lane of its own in the graph)
  // was captured at the device's least priority and the step at its
  // greatest, and the graph runs at those node priorities.
  emulation::GraphInstantiation instantiation = emulation::lastGraphInstantiation();
  EXPECT_NE(instantiation.flags & cudaGraphInstantiateFlagUseNodePriority, 0u);
  int least = 0, greatest = 0;
  ASSERT_EQ(emulation::cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  ASSERT_LT(greatest, least);
  ASSERT_GE(instantiation.lanePriorities.size(), 2u);
  size_t sideWork = 0;
  for (size_t lane = 0; lane < instantiation.lanePriorities.size(); ++lane)
    for (int priority : instantiation.lanePriorities[lane]) {
      EXPECT_EQ(priority, lane == 0 ? greatest : least) << "lane " << lane;
      sideWork += lane > 0;
    }
  EXPECT_GT(sideWork, 0u);
#endif
}

/// scaledTwoLayerStep's host arguments for run `run`: a new batch, and the
/// scaler's state where a step starts (scale 1024, counts 0, lr 0.01). With
/// `overflow`, one target element of 1e30 makes the loss and every gradient
/// non-finite, so the scaler skips the step.
std::vector<Tensor> scaledTwoLayerArguments(const test::ScaledTwoLayerStep& parts, uint32_t run, bool overflow) {
  std::vector<Tensor> arguments = randomArguments(parts.plan, 70 + run);
  arguments[parts.lr] = *Tensor::fromDoubles(DType::F32, {}, std::vector<double>{0.01});
  arguments[parts.scale] = *Tensor::fromDoubles(DType::F32, {}, std::vector<double>{1024.0});
  for (std::size_t count = 8; count <= 10; ++count)
    arguments[count] = *Tensor::fromDoubles(DType::I64, {}, std::vector<double>{0.0});
  if (overflow) {
    std::vector<double> target = arguments[parts.target].toDoubles();
    target[5] = 1e30;
    arguments[parts.target] = *Tensor::fromDoubles(DType::F32, arguments[parts.target].shape(), target);
  }
  return arguments;
}

TEST_F(GpuTest, SpeculativeUpdatesGiveTheInLineUpdatesBitsAndSkipWhatTheCheckSkips) {
  // Six runs: step by step, captured (one graph per buffer of the state),
  // replayed; runs 1 and 4 overflow, one before and one after both graphs
  // exist. After each, every state tensor and the loss equal, bit for bit,
  // those of a backend that updates in line, and each state tensor holds
  // the other of its two buffers.
  test::ScaledTwoLayerStep parts = test::scaledTwoLayerStep(32, 64);
  Expected<std::unique_ptr<CudaBackend>> speculating =
      createCudaBackend({.speculativeUpdateMinimumElements = 1, .foldUpdatesIntoGemms = 0});
  Expected<std::unique_ptr<CudaBackend>> inLine = createCudaBackend({.speculativeUpdateMinimumElements = 0});
  ASSERT_TRUE(speculating.ok() && inLine.ok()) << speculating.message();
  EXPECT_TRUE((*speculating)->speculatesOptimizerUpdates());
  EXPECT_FALSE((*inLine)->speculatesOptimizerUpdates());
  Expected<std::unique_ptr<Executable>> ahead = (*speculating)->prepare(parts.plan);
  Expected<std::unique_ptr<Executable>> behind = (*inLine)->prepare(parts.plan);
  ASSERT_TRUE(ahead.ok() && behind.ok()) << ahead.message() << behind.message();
  CudaRunStats prepared = (*speculating)->stats(**ahead);
  EXPECT_EQ(prepared.speculativeUpdates, 2);
  EXPECT_EQ(prepared.speculationDeclined, "");
  EXPECT_EQ(prepared.gradientsCheckedByTheirUpdate, 2) << "the check reads neither gradient again";
  EXPECT_EQ((*inLine)->stats(**behind).speculationDeclined, "switched off (AMPJIT_CUDA_SPECULATIVE_UPDATE=0)");

  std::vector<Tensor> host = scaledTwoLayerArguments(parts, 0, false);
  std::vector<Tensor> aheadArguments, behindArguments;
  for (const Tensor& argument : host) {
    aheadArguments.push_back(*(*speculating)->toDevice(argument));
    behindArguments.push_back(*(*inLine)->toDevice(argument));
  }
  const std::vector<BufferId> state = {parts.w0, parts.w0Copy, parts.w1, parts.momentum, parts.scale, 8, 9, 10};
  int skipped = 0;
  for (uint32_t run = 0; run < 6; ++run) {
    bool overflow = run == 1 || run == 4;
    std::vector<Tensor> batch = scaledTwoLayerArguments(parts, run, overflow);
    for (BufferId input : {parts.x, parts.target}) {
      aheadArguments[input] = *(*speculating)->toDevice(batch[input]);
      behindArguments[input] = *(*inLine)->toDevice(batch[input]);
    }
    std::vector<const std::byte*> before;
    for (BufferId id : state)
      before.push_back(aheadArguments[id].bytes());
    std::vector<Tensor> aheadBefore;
    for (BufferId id : state)
      aheadBefore.push_back(*(*speculating)->toHost(aheadArguments[id]));
    Expected<std::vector<Tensor>> aheadResults = (*ahead)->run(aheadArguments);
    Expected<std::vector<Tensor>> behindResults = (*behind)->run(behindArguments);
    ASSERT_TRUE(aheadResults.ok()) << aheadResults.message();
    ASSERT_TRUE(behindResults.ok()) << behindResults.message();
    std::string when = "run " + std::to_string(run);
    EXPECT_TRUE((*speculating)->toHost((*aheadResults)[0])->bitwiseEqual(*(*inLine)->toHost((*behindResults)[0])))
        << "the loss of " << when;
    for (std::size_t k = 0; k < state.size(); ++k) {
      Tensor got = *(*speculating)->toHost(aheadArguments[state[k]]);
      EXPECT_TRUE(got.bitwiseEqual(*(*inLine)->toHost(behindArguments[state[k]])))
          << "argument " << state[k] << " after " << when;
      if (k < 4) {
        EXPECT_NE(aheadArguments[state[k]].bytes(), before[k]) << "argument " << state[k] << " moved after " << when;
        if (overflow) {
          EXPECT_TRUE(got.bitwiseEqual(aheadBefore[k])) << "a skipped step keeps argument " << state[k];
        } else {
          EXPECT_FALSE(got.bitwiseEqual(aheadBefore[k])) << "a taken step moves argument " << state[k];
        }
      } else {
        EXPECT_EQ(aheadArguments[state[k]].bytes(), before[k]) << "the scaler's state stays where it is";
      }
    }
    skipped += overflow ? 1 : 0;
    EXPECT_EQ((*speculating)->toHost(aheadArguments[10])->at(0), double(skipped)) << "steps skipped after " << when;
  }
  CudaRunStats stats = (*speculating)->stats(**ahead);
  EXPECT_EQ(stats.graphDisabledReason, "") << "the speculative run must stay capturable";
  EXPECT_EQ(stats.eagerRuns, 1);
  EXPECT_EQ(stats.captures, 2) << "one graph for each buffer the state alternates between";
  EXPECT_EQ(stats.graphReplays, 5);
  // w0 (f32) and its f16 copy, w1 and its momentum: second buffers of each.
  EXPECT_GE(stats.speculativeStateBytes, int64_t(64 * 64 * (4 + 2 + 4 + 4)));
}

#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
/// What scaledTwoLayerStep's plan did in `runs` runs on an emulated backend
/// with `options`, from its first arguments, each run with its own batch:
/// the nodes of each graph it captured, and the state the runs left.
struct CapturedRuns {
  std::vector<std::vector<std::string>> graphs;
  std::vector<Tensor> arguments; ///< on the device
  CudaRunStats stats;
};

CapturedRuns runCapturingGraphs(const test::ScaledTwoLayerStep& parts, const CudaBackendOptions& options,
                                uint32_t runs) {
  CapturedRuns captured;
  Expected<std::unique_ptr<CudaBackend>> backend = createCudaBackend(options);
  if (!backend.ok()) {
    ADD_FAILURE() << backend.message();
    return captured;
  }
  Expected<std::unique_ptr<Executable>> executable = (*backend)->prepare(parts.plan);
  if (!executable.ok()) {
    ADD_FAILURE() << executable.message();
    return captured;
  }
  for (const Tensor& argument : scaledTwoLayerArguments(parts, 0, false))
    captured.arguments.push_back(*(*backend)->toDevice(argument));
  for (uint32_t run = 0; run < runs; ++run) {
    std::vector<Tensor> batch = scaledTwoLayerArguments(parts, run, false);
    for (BufferId input : {parts.x, parts.target})
      captured.arguments[input] = *(*backend)->toDevice(batch[input]);
    int64_t capturesBefore = (*backend)->stats(**executable).captures;
    Expected<std::vector<Tensor>> results = (*executable)->run(captured.arguments);
    if (!results.ok() || !(*backend)->toHost((*results)[0]).ok()) { // waits for the run
      ADD_FAILURE() << "run " << run << ": " << results.message();
      break;
    }
    if ((*backend)->stats(**executable).captures > capturesBefore)
      captured.graphs.push_back(emulation::lastGraphInstantiation().nodes);
  }
  for (Tensor& argument : captured.arguments)
    argument = *(*backend)->toHost(argument);
  captured.stats = (*backend)->stats(**executable);
  return captured;
}

TEST_F(GpuTest, ASpeculatingStepsTwoGraphsDoTheSameWorkInTheSameOrder) {
  // A speculating step replays two graphs in turn, one for each buffer of
  // its state. If on the device one of them steps slower than the other
  // (the bundle's `step parity:` lines), it must not be because the
  // backend captured different work: the two graphs launch the same
  // kernels with the same configurations, the same GEMM problems with the
  // same algorithms and epilogues, on the same lanes, with the same forks
  // and joins. Only the addresses differ. Folded and not; the two kinds of
  // graph differ from each other, which shows the descriptions can tell.
  std::vector<std::vector<std::string>> firstGraphOf;
  for (int fold : {0, 1}) {
    SCOPED_TRACE("foldUpdatesIntoGemms " + std::to_string(fold));
    CapturedRuns captured = runCapturingGraphs(
        test::scaledTwoLayerStep(32, 64), {.speculativeUpdateMinimumElements = 1, .foldUpdatesIntoGemms = fold}, 5);
    const CudaRunStats& stats = captured.stats;
    EXPECT_EQ(stats.speculativeUpdates, 2);
    EXPECT_EQ(stats.graphDisabledReason, "");
    EXPECT_EQ(stats.eagerRuns, 1);
    EXPECT_EQ(stats.graphReplays, 4) << "runs 1 and 2 launch the graphs they capture, runs 3 and 4 launch them again";
    ASSERT_EQ(captured.graphs.size(), 2u) << "one graph for each buffer of the state";
    const std::vector<std::string>& first = captured.graphs[0];
    const std::vector<std::string>& second = captured.graphs[1];
    for (std::size_t node = 0; node < std::min(first.size(), second.size()); ++node)
      ASSERT_EQ(first[node], second[node]) << "node " << node << " of the two graphs";
    EXPECT_EQ(first.size(), second.size());
    // The graph is the step: its GEMMs, and updates forked to a lane of
    // their own.
    auto count = [&](const std::string& part) {
      return std::count_if(first.begin(), first.end(),
                           [&](const std::string& node) { return node.find(part) != std::string::npos; });
    };
    EXPECT_GE(count("cublasLtMatmul"), 4) << "two layers' forward, their weight gradients and x's gradient";
    EXPECT_GT(count("lane 1: "), 0) << "the speculative updates run beside the step";
    firstGraphOf.push_back(first);
  }
  ASSERT_EQ(firstGraphOf.size(), 2u);
  EXPECT_NE(firstGraphOf[0], firstGraphOf[1]) << "a folded update changes what the graph launches";
}

TEST_F(GpuTest, TheCheckAfterAFoldedUpdateStaysWithinTheSmsTheGemmsAfterItLeave) {
  // Both weights' plain SGD folded into their GEMMs: w1's first, its check
  // forked to the side stream beside the two GEMMs that follow (dh's and
  // w0's), then w0's, last, with no GEMM after its check. Planned to leave
  // the side stream one SM (gemmSmReserve 1), those GEMMs would still share
  // the rest with a check of 65536 elements sized by its data (16 blocks);
  // held to what one SM holds (2048 threads: 8 blocks), it stays out of
  // their way. The last check has nothing to stay out of the way of, and a
  // limit would only lengthen the step's tail: it keeps its 16. The results
  // are the same either way (the emulation computes every GEMM algorithm
  // one way, so here bit for bit).
  test::ScaledTwoLayerStep parts = test::scaledTwoLayerStep(16, 256, /*w1Momentum=*/false);
  std::vector<std::vector<Tensor>> finalStates;
  for (int reserve : {0, 1}) {
    SCOPED_TRACE("gemmSmReserve " + std::to_string(reserve));
    CapturedRuns captured = runCapturingGraphs(
        parts, {.gemmSmReserve = reserve, .speculativeUpdateMinimumElements = 1, .foldUpdatesIntoGemms = 1}, 3);
    ASSERT_EQ(captured.stats.updatesFoldedIntoGemms, 2) << captured.stats.gemmFoldDeclined;
    ASSERT_FALSE(captured.graphs.empty());
    for (const std::vector<std::string>& graph : captured.graphs) {
      std::vector<std::string> checks; // w1's, then w0's
      for (const std::string& node : graph)
        if (node.find("checkFoldedUpdateKernel") != std::string::npos)
          checks.push_back(node);
      ASSERT_EQ(checks.size(), 2u);
      for (const std::string& check : checks)
        EXPECT_NE(check.find("lane 1: "), std::string::npos) << check;
      EXPECT_NE(checks[0].find(reserve > 0 ? "<<<8x1x1, 256x1x1, 0>>>" : "<<<16x1x1, 256x1x1, 0>>>"),
                std::string::npos)
          << "w1's check: " << checks[0];
      EXPECT_NE(checks[1].find("<<<16x1x1, 256x1x1, 0>>>"), std::string::npos) << "w0's check: " << checks[1];
    }
    finalStates.push_back(captured.arguments);
  }
  ASSERT_EQ(finalStates.size(), 2u);
  std::vector<Tensor> initial = scaledTwoLayerArguments(parts, 0, false);
  for (BufferId weight : {parts.w0, parts.w1}) {
    EXPECT_TRUE(finalStates[0][weight].bitwiseEqual(finalStates[1][weight])) << "argument " << weight;
    EXPECT_FALSE(finalStates[0][weight].bitwiseEqual(initial[weight])) << "argument " << weight << " was never updated";
  }
}
#endif

/// A backend that folds every update it can into its gradient's GEMM, and
/// one that updates in line, whatever the environment says.
const CudaBackendOptions kFoldsUpdatesIntoGemms{.speculativeUpdateMinimumElements = 1, .foldUpdatesIntoGemms = 1};
const CudaBackendOptions kUpdatesInLine{.speculativeUpdateMinimumElements = 0, .foldUpdatesIntoGemms = 0};

TEST_F(GpuTest, TheCheckAfterAFoldedUpdateFindsEveryNonFiniteElementAndWritesTheRoundedCopy) {
  // 6149 elements: 768 vectors of 8, which two blocks of threads take two
  // at a time (a first and a second round), then a tail of 5; or, held to
  // one block (beside GEMMs that leave the check few SMs), which strides
  // over the rest. An inf or NaN in any part clears the flag; the copy is
  // each element rounded once.
  namespace update = ampjit::runtime::cuda::update;
  auto stream = static_cast<cudaStream_t>(cuda->stream());
  const int64_t count = 6149;
  std::vector<double> values(count);
  std::mt19937 generator(5);
  std::uniform_real_distribution<double> uniform(-70000.0, 70000.0); // some round to f16's inf
  for (double& value : values)
    value = double(float(uniform(generator)));
  double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    DType copyType;
    bool evictFirst;
    int64_t bad;
    double badValue;
    int64_t maxBlocks;
  };
  std::vector<Case> cases;
  for (DType copyType : {DType::F16, DType::BF16})
    for (int64_t bad : {int64_t(-1), int64_t(3), int64_t(4500), int64_t(6147)})
      for (double badValue : {inf, nan})
        for (int64_t maxBlocks : {0, 1})
          cases.push_back({copyType, bad == 3, bad, badValue, maxBlocks});
  for (const Case& c : cases) {
    std::vector<double> param = values;
    if (c.bad >= 0)
      param[std::size_t(c.bad)] = c.badValue;
    std::string when = std::string(dtypeName(c.copyType)) + " copy, bad element " + std::to_string(c.bad) + " (" +
                       std::to_string(c.badValue) + ")" + (c.evictFirst ? ", evict-first" : "") +
                       (c.maxBlocks > 0 ? ", one block" : "");
    Tensor deviceParam = *cuda->toDevice(*Tensor::fromDoubles(DType::F32, {count}, param));
    Tensor copy = *cuda->toDevice(*Tensor::fromDoubles(c.copyType, {count}, std::vector<double>(count, 0.0)));
    Tensor flag = *cuda->toDevice(*Tensor::fromDoubles(DType::I1, {}, std::vector<double>{1.0}));
    ASSERT_EQ(update::launchCheckFoldedUpdate(reinterpret_cast<const float*>(deviceParam.bytes()), copy.bytes(),
                                              update::ElementType(int32_t(c.copyType)), count,
                                              reinterpret_cast<uint8_t*>(flag.bytes()), c.evictFirst, c.maxBlocks,
                                              stream),
              cudaSuccess);
    EXPECT_EQ(cuda->toHost(flag)->at(0), c.bad >= 0 ? 0.0 : 1.0) << when;
    // (A NaN's payload may differ: the step it is in is skipped.)
    std::vector<double> got = cuda->toHost(copy)->toDoubles(),
                        want = Tensor::fromDoubles(c.copyType, {count}, param)->toDoubles();
    int wrong = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (!(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) && ++wrong <= 3)
        ADD_FAILURE() << when << ": element " << i << " is " << got[i] << ", not " << want[i];
  }
  // Without a copy, only the check.
  Tensor deviceParam = *cuda->toDevice(*Tensor::fromDoubles(DType::F32, {count}, values));
  Tensor flag = *cuda->toDevice(*Tensor::fromDoubles(DType::I1, {}, std::vector<double>{1.0}));
  ASSERT_EQ(update::launchCheckFoldedUpdate(reinterpret_cast<const float*>(deviceParam.bytes()), nullptr,
                                            update::ElementType::F16, count,
                                            reinterpret_cast<uint8_t*>(flag.bytes()), false, 0, stream),
            cudaSuccess);
  EXPECT_EQ(cuda->toHost(flag)->at(0), 1.0);
  EXPECT_EQ(update::launchCheckFoldedUpdate(reinterpret_cast<const float*>(deviceParam.bytes()), nullptr,
                                            update::ElementType::F16, count,
                                            reinterpret_cast<uint8_t*>(flag.bytes()), false, -1, stream),
            cudaErrorInvalidValue)
      << "a negative block limit";
}

TEST_F(GpuTest, AFoldedUpdatesGemmScalesByMinusLrTimesInvScaleAndAddsTheParameterOnce) {
  namespace update = ampjit::runtime::cuda::update;
  auto stream = static_cast<cudaStream_t>(cuda->stream());
  Tensor lr = *cuda->toDevice(*Tensor::fromDoubles(DType::F32, {}, std::vector<double>{0.01}));
  Tensor invScale = *cuda->toDevice(*Tensor::fromDoubles(DType::F32, {}, std::vector<double>{1.0 / 3072}));
  Tensor scaled = *cuda->toDevice(*Tensor::fromDoubles(DType::F32, {2}, std::vector<double>{7.0, 7.0}));
  Tensor unscaled = *cuda->toDevice(*Tensor::fromDoubles(DType::F32, {2}, std::vector<double>{7.0, 7.0}));
  auto* lrPointer = reinterpret_cast<const float*>(lr.bytes());
  update::FoldedUpdateScalars folds[2] = {
      {lrPointer, reinterpret_cast<const float*>(invScale.bytes()), false, reinterpret_cast<float*>(scaled.bytes())},
      {lrPointer, nullptr, true, reinterpret_cast<float*>(unscaled.bytes())}};
  ASSERT_EQ(update::launchFoldedUpdateScalars(folds, 2, stream), cudaSuccess);
  // As the update in line: the gradient times inv_scale, then times lr, in f32.
  float step = 0.01f * float(1.0 / 3072);
  EXPECT_EQ(cuda->toHost(scaled)->toDoubles(), (std::vector<double>{-double(step), 1.0}));
  EXPECT_EQ(cuda->toHost(unscaled)->toDoubles(), (std::vector<double>{double(0.01f), 1.0})) << "maximizing, no scaler";
}

TEST_F(GpuTest, AnSgdUpdateFoldedIntoItsGemmUpdatesFromTheUnroundedGradientAndSkipsWhatTheCheckSkips) {
  // w0's plain SGD folds into its gradient's GEMM; w1's, with momentum, runs
  // speculatively on its own. Each run starts the backend that updates in
  // line from the folding backend's state, so the two differ only in that
  // run's w0 update: the folded one adds -lr * inv_scale times the f32
  // product, the one in line the product rounded to f16 first. Runs 1 and 4
  // overflow and must leave every piece of state as it was.
  test::ScaledTwoLayerStep parts = test::scaledTwoLayerStep(32, 64);
  Expected<std::unique_ptr<CudaBackend>> folding = createCudaBackend(kFoldsUpdatesIntoGemms);
  Expected<std::unique_ptr<CudaBackend>> inLine = createCudaBackend(kUpdatesInLine);
  ASSERT_TRUE(folding.ok() && inLine.ok()) << folding.message();
  Expected<std::unique_ptr<Executable>> folded = (*folding)->prepare(parts.plan);
  Expected<std::unique_ptr<Executable>> reference = (*inLine)->prepare(parts.plan);
  ASSERT_TRUE(folded.ok() && reference.ok()) << folded.message() << reference.message();
  CudaRunStats prepared = (*folding)->stats(**folded);
  EXPECT_EQ(prepared.speculativeUpdates, 2);
  EXPECT_EQ(prepared.updatesFoldedIntoGemms, 1);
  EXPECT_EQ(prepared.gemmFoldDeclined, describeStep(parts.plan, parts.w1Update) +
                                           " has momentum, which a GEMM's epilogue cannot keep");
  EXPECT_EQ(prepared.gradientsCheckedByTheirUpdate, 2);

  std::vector<Tensor> foldedArguments;
  for (const Tensor& argument : scaledTwoLayerArguments(parts, 0, false))
    foldedArguments.push_back(*(*folding)->toDevice(argument));
  const std::vector<BufferId> state = {parts.w0, parts.w0Copy, parts.w1, parts.momentum, parts.scale, 8, 9, 10};
  const double lr = 0.01;
  int takenWithOtherBits = 0;
  for (uint32_t run = 0; run < 6; ++run) {
    std::string when = "run " + std::to_string(run);
    bool overflow = run == 1 || run == 4;
    std::vector<Tensor> batch = scaledTwoLayerArguments(parts, run, overflow);
    for (BufferId input : {parts.x, parts.target})
      foldedArguments[input] = *(*folding)->toDevice(batch[input]);
    std::vector<Tensor> before, referenceArguments;
    for (const Tensor& argument : foldedArguments) {
      before.push_back(*(*folding)->toHost(argument));
      referenceArguments.push_back(*(*inLine)->toDevice(before.back()));
    }
    double inverseScale = 1.0 / before[parts.scale].at(0);
    Expected<std::vector<Tensor>> foldedResults = (*folded)->run(foldedArguments);
    Expected<std::vector<Tensor>> referenceResults = (*reference)->run(referenceArguments);
    ASSERT_TRUE(foldedResults.ok()) << foldedResults.message();
    ASSERT_TRUE(referenceResults.ok()) << referenceResults.message();
    EXPECT_TRUE((*folding)->toHost((*foldedResults)[0])->bitwiseEqual(*(*inLine)->toHost((*referenceResults)[0])))
        << "the loss of " << when << " comes before any update";
    std::vector<Tensor> got, want;
    for (BufferId id : state) {
      got.push_back(*(*folding)->toHost(foldedArguments[id]));
      want.push_back(*(*inLine)->toHost(referenceArguments[id]));
    }
    // w1, its momentum and the scaler's state do not read w0's update.
    for (std::size_t k = 2; k < state.size(); ++k)
      EXPECT_TRUE(got[k].bitwiseEqual(want[k])) << "argument " << state[k] << " after " << when;
    if (overflow) {
      for (std::size_t k = 0; k < 2; ++k)
        EXPECT_TRUE(got[k].bitwiseEqual(before[state[k]])) << "a skipped step keeps argument " << state[k];
      continue;
    }
    // The folded step is the in-line one up to the f16 rounding of the
    // scaled gradient (half an f16 ulp of it, 2^-11 relative) and the f32
    // roundings of the product and the sum.
    std::vector<double> w0 = got[0].toDoubles(), inLineW0 = want[0].toDoubles(), old = before[parts.w0].toDoubles();
    std::vector<double> copy = got[1].toDoubles();
    int differing = 0, outside = 0;
    for (std::size_t i = 0; i < w0.size(); ++i) {
      double step = std::abs(inLineW0[i] - old[i]);
      double bound = step * std::ldexp(1.0, -10) + std::abs(old[i]) * std::ldexp(1.0, -22) + 1e-30;
      if (std::abs(w0[i] - inLineW0[i]) > bound && ++outside <= 3)
        ADD_FAILURE() << "w0[" << i << "] after " << when << ": folded " << w0[i] << ", in line " << inLineW0[i]
                      << ", from " << old[i] << " (lr * inv_scale = " << lr * inverseScale << ")";
      differing += w0[i] != inLineW0[i];
      double narrowed = double(halfToFloat(floatToHalf(float(w0[i]))));
      if (copy[i] != narrowed && ++outside <= 3)
        ADD_FAILURE() << "w0's f16 copy [" << i << "] after " << when << " is " << copy[i]
                      << ", not the new w0 rounded: " << narrowed;
    }
    takenWithOtherBits += differing > 0;
  }
  EXPECT_EQ(takenWithOtherBits, 4) << "every taken step's w0 comes from the unrounded product, not the update in line";
  EXPECT_EQ((*folding)->toHost(foldedArguments[10])->at(0), 2.0) << "both overflows skipped";
  CudaRunStats stats = (*folding)->stats(**folded);
  EXPECT_EQ(stats.graphDisabledReason, "");
  EXPECT_EQ(stats.graphReplays, 5);
}

#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
/// The two-layer step prepared on a backend that tunes every GEMM (its
/// entries in a directory of the test's own) and on one that tunes none,
/// both folding what they can.
struct TunedBesideUntuned {
  test::ScaledTwoLayerStep parts = test::scaledTwoLayerStep(32, 64);
  CacheDirectory cache;
  std::unique_ptr<CudaBackend> tuning, untuned;
  std::unique_ptr<Executable> tuned, reference;

  /// "" once both are prepared, else why not.
  std::string prepare() {
    CudaBackendOptions tunedOptions = kFoldsUpdatesIntoGemms;
    tunedOptions.gemmTuningMinimumFlops = 1;
    tunedOptions.kernelCacheDirectory = cache.path;
    Expected<std::unique_ptr<CudaBackend>> madeTuning = createCudaBackend(tunedOptions);
    Expected<std::unique_ptr<CudaBackend>> madeUntuned = createCudaBackend(kFoldsUpdatesIntoGemms);
    if (!madeTuning.ok() || !madeUntuned.ok())
      return madeTuning.message() + madeUntuned.message();
    tuning = std::move(*madeTuning);
    untuned = std::move(*madeUntuned);
    Expected<std::unique_ptr<Executable>> preparedTuned = tuning->prepare(parts.plan);
    Expected<std::unique_ptr<Executable>> preparedReference = untuned->prepare(parts.plan);
    if (!preparedTuned.ok() || !preparedReference.ok())
      return preparedTuned.message() + preparedReference.message();
    tuned = std::move(*preparedTuned);
    reference = std::move(*preparedReference);
    return "";
  }

  /// Over 4 runs (the second overflows) the losses and every argument are
  /// the same bits. The emulation's algorithms compute the same bits, so a
  /// difference is timing that touched the step's buffers.
  void expectTheSameSteps() const {
    std::vector<Tensor> tunedArguments, referenceArguments;
    for (const Tensor& argument : scaledTwoLayerArguments(parts, 0, false)) {
      tunedArguments.push_back(*tuning->toDevice(argument));
      referenceArguments.push_back(*untuned->toDevice(argument));
    }
    for (uint32_t run = 0; run < 4; ++run) {
      std::string when = "run " + std::to_string(run);
      std::vector<Tensor> batch = scaledTwoLayerArguments(parts, run, run == 1);
      for (BufferId input : {parts.x, parts.target}) {
        tunedArguments[input] = *tuning->toDevice(batch[input]);
        referenceArguments[input] = *untuned->toDevice(batch[input]);
      }
      Expected<std::vector<Tensor>> got = tuned->run(tunedArguments);
      Expected<std::vector<Tensor>> want = reference->run(referenceArguments);
      ASSERT_TRUE(got.ok() && want.ok()) << got.message() << want.message();
      EXPECT_TRUE(tuning->toHost((*got)[0])->bitwiseEqual(*untuned->toHost((*want)[0]))) << "the loss, " << when;
      for (std::size_t a = 0; a < tunedArguments.size(); ++a)
        EXPECT_TRUE(tuning->toHost(tunedArguments[a])->bitwiseEqual(*untuned->toHost(referenceArguments[a])))
            << "argument " << a << " after " << when;
    }
    EXPECT_EQ(tuning->toHost(tunedArguments[10])->at(0), 1.0) << "the overflow skipped";
  }
};

int64_t gemmStepsOf(const Plan& plan) {
  return std::count_if(plan.steps.begin(), plan.steps.end(),
                       [](const Step& step) { return step.kind == StepKind::Gemm; });
}

TEST_F(GpuTest, TunedGemmsAndAFoldedUpdatesTunedGemmStepAsTheUntunedOnes) {
  // Every GEMM of the two-layer step is tuned but the plain product w0's
  // update folds into, which only a run that does not fold (a profiled
  // one) runs: the folded product is tuned in its place. Each is timed on
  // scratch operands, never on the step's buffers, and runs the second of
  // two algorithms.
  ModelledAlgorithms algorithms({40, 10});
  TunedBesideUntuned backends;
  ASSERT_EQ(backends.prepare(), "");
  CudaRunStats stats = backends.tuning->stats(*backends.tuned);
  EXPECT_EQ(stats.updatesFoldedIntoGemms, 1);
  EXPECT_EQ(stats.gemmsTuned, gemmStepsOf(backends.parts.plan)) << "each GEMM but w0's plain one, and w0's folded one";
  EXPECT_EQ(stats.gemmsOffHeuristic, stats.gemmsTuned);
  EXPECT_EQ(backends.untuned->stats(*backends.reference).gemmsTuned, 0);
  backends.expectTheSameSteps();
}

TEST_F(GpuTest, AGemmNoUpdateFoldsIntoAfterAllIsTunedAsAnyOther) {
  // A cuBLASLt without device scalars cannot fold w0's update into its
  // gradient's GEMM, which was made untimed while the fold was undecided:
  // it is then timed like every other, and the update runs on its own.
  ModelledAlgorithms algorithms({40, 10});
  CublasLtWithoutDeviceScalars noFolds;
  TunedBesideUntuned backends;
  ASSERT_EQ(backends.prepare(), "");
  const test::ScaledTwoLayerStep& parts = backends.parts;
  CudaRunStats stats = backends.tuning->stats(*backends.tuned);
  EXPECT_EQ(stats.updatesFoldedIntoGemms, 0);
  const std::string declined = describeStep(parts.plan, parts.w0Update) + " was not folded into its GEMM: ";
  EXPECT_EQ(stats.gemmFoldDeclined.rfind(declined, 0), 0u) << stats.gemmFoldDeclined;
  EXPECT_EQ(stats.speculativeUpdates, 2) << "w0's update still runs beside the backward";
  EXPECT_EQ(stats.gemmsTuned, gemmStepsOf(parts.plan)) << "every plain GEMM, w0's gradient's included";
  EXPECT_EQ(stats.gemmsOffHeuristic, stats.gemmsTuned);
  int64_t fastestBefore = emulation::cublasLtMatmulsWithAlgorithm(1);
  int64_t firstBefore = emulation::cublasLtMatmulsWithAlgorithm(0);
  backends.expectTheSameSteps();
  EXPECT_EQ(emulation::cublasLtMatmulsWithAlgorithm(1) - fastestBefore, 4 * gemmStepsOf(parts.plan))
      << "every GEMM of the tuned backend's 4 runs, and none of the untuned one's";
  EXPECT_EQ(emulation::cublasLtMatmulsWithAlgorithm(0) - firstBefore, 4 * gemmStepsOf(parts.plan));
}
#endif

TEST_F(GpuTest, AProfiledRunAfterFoldedOnesUpdatesInLine) {
  // AMPJIT_PROFILE's run 3 goes launch by launch, every step as written,
  // after two runs with w0's update folded into its GEMM: from the same
  // state it gives the bits of a backend that updates in line, and hands no
  // buffer over.
  test::ScaledTwoLayerStep parts = test::scaledTwoLayerStep(32, 64);
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = scratch.file("folded-profile.jsonl");
  {
    Expected<std::unique_ptr<CudaBackend>> folding = createCudaBackend(kFoldsUpdatesIntoGemms);
    Expected<std::unique_ptr<CudaBackend>> inLine = createCudaBackend(kUpdatesInLine);
    ASSERT_TRUE(folding.ok() && inLine.ok()) << folding.message();
    Expected<std::unique_ptr<Executable>> reference = (*inLine)->prepare(parts.plan);
    ScopedEnvironment profile("AMPJIT_PROFILE", path.c_str());
    ScopedEnvironment run("AMPJIT_PROFILE_RUN", "3");
    Expected<std::unique_ptr<Executable>> folded = (*folding)->prepare(parts.plan);
    ASSERT_TRUE(folded.ok() && reference.ok()) << folded.message() << reference.message();
    ASSERT_EQ((*folding)->stats(**folded).updatesFoldedIntoGemms, 1);
    std::vector<Tensor> arguments;
    for (const Tensor& argument : scaledTwoLayerArguments(parts, 0, false))
      arguments.push_back(*(*folding)->toDevice(argument));
    for (int run = 0; run < 2; ++run)
      ASSERT_TRUE((*folded)->run(arguments).ok());
    std::vector<Tensor> referenceArguments;
    for (const Tensor& argument : arguments)
      referenceArguments.push_back(*(*inLine)->toDevice(*(*folding)->toHost(argument)));
    const std::byte* w0Bytes = arguments[parts.w0].bytes();
    ASSERT_TRUE((*folded)->run(arguments).ok());
    ASSERT_TRUE((*reference)->run(referenceArguments).ok());
    EXPECT_EQ(arguments[parts.w0].bytes(), w0Bytes) << "an in-line run hands nothing over";
    for (BufferId id : {parts.w0, parts.w0Copy, parts.w1, parts.momentum, parts.scale})
      EXPECT_TRUE((*folding)->toHost(arguments[id])->bitwiseEqual(*(*inLine)->toHost(referenceArguments[id])))
          << "argument " << id;
  }
  EXPECT_TRUE(std::filesystem::exists(path)) << "the run was profiled";
}

TEST_F(GpuTest, ASpeculativeUpdateChecksItsGradientForASplitCheckWhichChecksTheRest) {
  // A gradient large enough for a side-stream chunk, which its speculative
  // update checks instead (the chunk is left out), and a small one no update
  // reads, which the check still checks where it stands. Overflowing either
  // skips the step, as in line.
  const int64_t n = ampjit::runtime::cuda::kMinEarlyFiniteCheckElements;
  PlanBuilder b("split_and_speculative");
  BufferId x = b.argument(tt(DType::F16, {n}), BufferRole::Input, "x");
  BufferId y = b.argument(tt(DType::F16, {64}), BufferRole::Input, "y");
  BufferId w = b.argument(tt(DType::F32, {n}), BufferRole::Param, "w");
  BufferId lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper, "lr");
  BufferId scale = b.argument(tt(DType::F32, {}), BufferRole::ScalerState, "scale");
  BufferId good = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "good");
  BufferId bad = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "bad");
  BufferId skipped = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "skipped");
  BufferId large = b.temporary(tt(DType::F16, {n})), small = b.temporary(tt(DType::F16, {64}));
  b.op("jit.neg", {x}, {large});
  b.op("jit.exp", {y}, {small});
  BufferId ok = b.temporary(tt(DType::I1, {}));
  b.op("amp.all_finite", {large, small}, {ok});
  BufferId one = b.constant(tt(DType::F32, {}), std::vector<double>{1.0});
  BufferId inverse = b.temporary(tt(DType::F32, {}));
  b.op("jit.div", {one, scale}, {inverse});
  b.op("jit.sgd_update", {w, large, kNoBuffer, kNoBuffer, lr, inverse, ok, kNoBuffer}, {w});
  b.op("amp.update_scale", {scale, good, bad, skipped, ok}, {scale, good, bad, skipped});
  b.result(w, 2);
  b.result(scale, 4);
  b.result(good, 5);
  b.result(bad, 6);
  b.result(skipped, 7);
  Plan plan = b.finish();

  Expected<std::unique_ptr<CudaBackend>> speculating =
      createCudaBackend({.speculativeUpdateMinimumElements = 1, .foldUpdatesIntoGemms = 0});
  Expected<std::unique_ptr<CudaBackend>> inLine = createCudaBackend({.speculativeUpdateMinimumElements = 0});
  ASSERT_TRUE(speculating.ok() && inLine.ok()) << speculating.message();
  Expected<std::unique_ptr<Executable>> ahead = (*speculating)->prepare(plan);
  Expected<std::unique_ptr<Executable>> behind = (*inLine)->prepare(plan);
  ASSERT_TRUE(ahead.ok() && behind.ok()) << ahead.message() << behind.message();
  CudaRunStats prepared = (*speculating)->stats(**ahead);
  EXPECT_EQ(prepared.speculativeUpdates, 1);
  EXPECT_EQ(prepared.sideStreamChunks, 1);
  EXPECT_EQ(prepared.gradientsCheckedByTheirUpdate, 1);

  std::vector<Tensor> host = randomArguments(plan, 90);
  host[3] = *Tensor::fromDoubles(DType::F32, {}, std::vector<double>{0.01});
  host[4] = *Tensor::fromDoubles(DType::F32, {}, std::vector<double>{1024.0});
  for (std::size_t count = 5; count <= 7; ++count)
    host[count] = *Tensor::fromDoubles(DType::I64, {}, std::vector<double>{0.0});
  std::vector<Tensor> aheadArguments, behindArguments;
  for (const Tensor& argument : host) {
    aheadArguments.push_back(*(*speculating)->toDevice(argument));
    behindArguments.push_back(*(*inLine)->toDevice(argument));
  }
  // Finite; x overflowing (the update's own gradient); finite; y
  // overflowing (the gradient the check reads); finite.
  std::vector<std::pair<BufferId, double>> pokes{{x, 0.5}, {x, std::numeric_limits<double>::infinity()}, {x, 0.25},
                                                 {y, 12.0}, {y, 0.5}};
  for (std::size_t run = 0; run < pokes.size(); ++run) {
    std::vector<double> xs = host[x].toDoubles(), ys = host[y].toDoubles();
    for (std::vector<double>* values : {&xs, &ys})
      for (double& value : *values)
        value = std::fmod(std::fabs(value), 1.0);
    (pokes[run].first == x ? xs[n - 1] : ys[63]) = pokes[run].second;
    Tensor batchX = *Tensor::fromDoubles(DType::F16, {n}, xs), batchY = *Tensor::fromDoubles(DType::F16, {64}, ys);
    aheadArguments[x] = *(*speculating)->toDevice(batchX);
    behindArguments[x] = *(*inLine)->toDevice(batchX);
    aheadArguments[y] = *(*speculating)->toDevice(batchY);
    behindArguments[y] = *(*inLine)->toDevice(batchY);
    ASSERT_TRUE((*ahead)->run(aheadArguments).ok());
    ASSERT_TRUE((*behind)->run(behindArguments).ok());
    for (BufferId id : {w, skipped, scale})
      EXPECT_TRUE((*speculating)->toHost(aheadArguments[id])->bitwiseEqual(*(*inLine)->toHost(behindArguments[id])))
          << "argument " << id << " after run " << run;
  }
  EXPECT_EQ((*speculating)->toHost(aheadArguments[skipped])->at(0), 2.0) << "runs 1 and 3 skipped";
  EXPECT_EQ((*speculating)->stats(**ahead).graphDisabledReason, "");
}

/// One launch of an AMPJIT_TIMELINE file: its plan steps ("first,last"),
/// whether it ran on the side stream, when (us), and the line itself.
struct StampedLaunch {
  std::string steps;
  bool side = false;
  std::pair<double, double> when;
  std::string line;
};

/// The launches of the timeline file at `path` (its last line, the
/// summary, left out).
std::vector<StampedLaunch> readStampedLaunches(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);)
    lines.push_back(line);
  std::vector<StampedLaunch> launches;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    std::size_t steps = lines[i].find("\"steps\":[");
    if (steps == std::string::npos) {
      ADD_FAILURE() << "a timeline launch without steps: " << lines[i];
      continue;
    }
    launches.push_back({lines[i].substr(steps + 9, lines[i].find(']', steps) - steps - 9),
                        lines[i].find("\"stream\":\"side\"") != std::string::npos,
                        {jsonNumber(lines[i], "start_us"), jsonNumber(lines[i], "end_us")}, lines[i]});
  }
  return launches;
}

/// A one-step launch's steps as stampedLaunches gives them.
std::string stepsKey(std::size_t step) { return std::to_string(step) + "," + std::to_string(step); }

TEST_F(GpuTest, ATimelineOfASpeculativeRunShowsEachUpdateAfterItsGradientAndTheRestoreAfterBoth) {
  // The third run, stamped: each update on the side stream, marked
  // speculative, after the GEMM that wrote its gradient; one restore for
  // both on the main stream after both; the state as in line.
  test::ScaledTwoLayerStep parts = test::scaledTwoLayerStep(32, 64);
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = scratch.file("speculative-timeline.jsonl");
  std::vector<StampedLaunch> launches;
  {
    Expected<std::unique_ptr<CudaBackend>> speculating =
        createCudaBackend({.speculativeUpdateMinimumElements = 1, .foldUpdatesIntoGemms = 0});
    Expected<std::unique_ptr<CudaBackend>> inLine = createCudaBackend({.speculativeUpdateMinimumElements = 0});
    ASSERT_TRUE(speculating.ok() && inLine.ok()) << speculating.message();
    Expected<std::unique_ptr<Executable>> behind = (*inLine)->prepare(parts.plan);
    // Only the speculative executable records (prepare reads the variables).
    ScopedEnvironment timeline("AMPJIT_TIMELINE", path.c_str());
    ScopedEnvironment run("AMPJIT_TIMELINE_RUN", "3");
    Expected<std::unique_ptr<Executable>> ahead = (*speculating)->prepare(parts.plan);
    ASSERT_TRUE(ahead.ok() && behind.ok()) << ahead.message() << behind.message();
    std::vector<Tensor> aheadArguments, behindArguments;
    for (const Tensor& argument : scaledTwoLayerArguments(parts, 0, false)) {
      aheadArguments.push_back(*(*speculating)->toDevice(argument));
      behindArguments.push_back(*(*inLine)->toDevice(argument));
    }
    for (int run = 0; run < 4; ++run) {
      ASSERT_TRUE((*ahead)->run(aheadArguments).ok());
      ASSERT_TRUE((*behind)->run(behindArguments).ok());
    }
    for (BufferId id : {parts.w0, parts.w0Copy, parts.w1, parts.momentum})
      EXPECT_TRUE((*speculating)->toHost(aheadArguments[id])->bitwiseEqual(*(*inLine)->toHost(behindArguments[id])))
          << "argument " << id;
    EXPECT_EQ((*speculating)->stats(**ahead).timelineRuns, 1);
    launches = readStampedLaunches(path);
  }
  auto key = stepsKey;
  std::map<std::string, std::pair<double, double>> mainLaunches, speculative;
  for (const StampedLaunch& launch : launches) {
    if (launch.line.find("\"speculative\":true") != std::string::npos) {
      EXPECT_TRUE(launch.side) << launch.line;
      speculative[launch.steps] = launch.when;
    } else if (!launch.side) {
      mainLaunches[launch.steps] = launch.when;
    }
  }
  ASSERT_EQ(speculative.size(), 2u);
  ASSERT_TRUE(speculative.count(key(parts.w0Update)) && speculative.count(key(parts.w1Update)));
  ASSERT_TRUE(mainLaunches.count(key(parts.gw0Step)) && mainLaunches.count(key(parts.gw1Step)));
  EXPECT_GE(speculative[key(parts.w1Update)].first, mainLaunches[key(parts.gw1Step)].second);
  EXPECT_GE(speculative[key(parts.w0Update)].first, mainLaunches[key(parts.gw0Step)].second);
  // The restore stands at w0's update, the first of the two.
  ASSERT_TRUE(mainLaunches.count(key(parts.w0Update)));
  EXPECT_EQ(mainLaunches.count(key(parts.w1Update)), 0u) << "one restore for both";
  for (const auto& [launch, when] : speculative)
    EXPECT_GE(mainLaunches[key(parts.w0Update)].first, when.second) << launch;
  // inv_scale ran first: before the first GEMM.
  ASSERT_TRUE(mainLaunches.count(key(parts.inverseStep)) && mainLaunches.count("0,0"));
  EXPECT_LE(mainLaunches[key(parts.inverseStep)].second, mainLaunches["0,0"].first);
}

TEST_F(GpuTest, ATimelineOfAFoldedRunShowsTheUpdateInItsGemmAndTheCheckAfterIt) {
  // The third run, stamped: w0's gradient GEMM marked as carrying its
  // update, on the main stream after the scalars' launch; the check of the
  // new w0 on the side stream after that GEMM; one restore on the main
  // stream after both speculative launches (w0's check, w1's update).
  test::ScaledTwoLayerStep parts = test::scaledTwoLayerStep(32, 64);
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = scratch.file("folded-timeline.jsonl");
  std::vector<StampedLaunch> launches;
  {
    Expected<std::unique_ptr<CudaBackend>> folding = createCudaBackend(kFoldsUpdatesIntoGemms);
    ASSERT_TRUE(folding.ok()) << folding.message();
    ScopedEnvironment timeline("AMPJIT_TIMELINE", path.c_str());
    ScopedEnvironment run("AMPJIT_TIMELINE_RUN", "3");
    Expected<std::unique_ptr<Executable>> folded = (*folding)->prepare(parts.plan);
    ASSERT_TRUE(folded.ok()) << folded.message();
    std::vector<Tensor> arguments;
    for (const Tensor& argument : scaledTwoLayerArguments(parts, 0, false))
      arguments.push_back(*(*folding)->toDevice(argument));
    for (int run = 0; run < 4; ++run)
      ASSERT_TRUE((*folded)->run(arguments).ok());
    EXPECT_EQ((*folding)->stats(**folded).timelineRuns, 1);
    launches = readStampedLaunches(path);
  }
  auto key = stepsKey;
  std::map<std::string, std::pair<double, double>> mainLaunches, speculative;
  std::pair<double, double> scalars{-1, -1}, foldedGemm{-1, -1};
  for (const StampedLaunch& launch : launches) {
    bool foldedUpdate = launch.line.find("\"folded_update\":true") != std::string::npos;
    if (launch.line.find("alpha and beta") != std::string::npos) {
      scalars = launch.when;
    } else if (foldedUpdate && !launch.side) {
      foldedGemm = launch.when;
      EXPECT_EQ(launch.steps, key(parts.gw0Step)) << launch.line;
    } else if (launch.line.find("\"speculative\":true") != std::string::npos) {
      speculative[launch.steps] = launch.when;
      EXPECT_TRUE(launch.side) << launch.line;
    } else if (!launch.side) {
      mainLaunches[launch.steps] = launch.when;
    }
  }
  ASSERT_GE(scalars.first, 0.0) << "the scalars' launch";
  ASSERT_GE(foldedGemm.first, 0.0) << "w0's gradient GEMM with its update";
  EXPECT_GE(foldedGemm.first, scalars.second);
  ASSERT_EQ(speculative.size(), 2u);
  ASSERT_TRUE(speculative.count(key(parts.w0Update)) && speculative.count(key(parts.w1Update)));
  EXPECT_GE(speculative[key(parts.w0Update)].first, foldedGemm.second) << "the check reads what the GEMM wrote";
  ASSERT_TRUE(mainLaunches.count(key(parts.w0Update)));
  for (const auto& [launch, when] : speculative)
    EXPECT_GE(mainLaunches[key(parts.w0Update)].first, when.second) << launch;
}

} // namespace
} // namespace ampjit::runtime::gputest
