//===- GemmKernelTest.cpp - cuBLASLt GEMMs and epilogues against the CPU ---===//
//
// The backend's Gemm steps (CublasLtGemm.cpp) against the CPU backend: every
// dtype, transpose and batch broadcast, K = 0, each epilogue with its extra
// input or output, what cuBLASLt cannot run refused at prepare, and true
// fp32 (no TF32). Skipped without a device; also built on the emulation
// (GpuTestUtil.h), where cuBLASLt is its host model (EmulatedCublasLt.h).
//
//===----------------------------------------------------------------------===//

#include "GpuTestUtil.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace ampjit::runtime::gputest {
namespace {

using test::PlanBuilder;
using test::tt;

Plan matmulPlan(DType dtype, Shape a, Shape b, Shape c, bool transposeA, bool transposeB) {
  PlanBuilder builder("matmul");
  BufferId x = builder.argument(tt(dtype, a), BufferRole::Input, "a");
  BufferId y = builder.argument(tt(dtype, b), BufferRole::Input, "b");
  BufferId z = builder.output(tt(dtype, c));
  AttributeMap attributes;
  if (transposeA)
    attributes["transpose_lhs"] = true;
  if (transposeB)
    attributes["transpose_rhs"] = true;
  builder.op("jit.matmul", {x, y}, {z}, attributes);
  builder.result(z);
  return builder.finish();
}

TEST_F(GpuTest, GemmMatchesCpuForEveryDtypeTransposeAndBatchBroadcast) {
  struct Case {
    Shape a, b, c;
    bool transposeA, transposeB;
  };
  const int64_t m = 37, k = 300, n = 53;
  std::vector<Case> cases = {
      {{m, k}, {k, n}, {m, n}, false, false},
      {{k, m}, {k, n}, {m, n}, true, false},
      {{m, k}, {n, k}, {m, n}, false, true},
      {{k, m}, {n, k}, {m, n}, true, true},
      {{4, m, k}, {k, n}, {4, m, n}, false, false},          // B broadcast: stride 0
      {{3, 1, m, k}, {1, 2, n, k}, {3, 2, m, n}, false, true}, // not evenly strided: one call per entry
      {{1, k}, {k, 1}, {1, 1}, false, false},
      {{m, 0}, {0, n}, {m, n}, false, false}, // K = 0: zeros
  };
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " " + shapeToString(c.a) + " x " + shapeToString(c.b));
      Plan plan = matmulPlan(dtype, c.a, c.b, c.c, c.transposeA, c.transposeB);
      Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, randomArguments(plan, 7));
      ASSERT_TRUE(both.ok()) << both.message();
      // The reduction order differs from OpenBLAS's: the bound grows with K.
      EXPECT_TRUE(allClose(both->cpuResults[0], both->cudaResults[0], 1.0 + double(k) / 16.0));
    }
  }
}

TEST_F(GpuTest, GemmEpiloguesMatchCpu) {
  // cuBLASLt's bias and relu-bias epilogues against the CPU's, which add the
  // bias and apply relu to the accumulated product before its one rounding.
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (GemmEpilogue epilogue : {GemmEpilogue::Bias, GemmEpilogue::BiasRelu}) {
      for (bool batched : {false, true}) {
        SCOPED_TRACE(std::string(dtypeName(dtype)) + " " + std::string(gemmEpilogueName(epilogue)) +
                     (batched ? " batched" : ""));
        Shape a = batched ? Shape{3, 45, 200} : Shape{45, 200}, c = batched ? Shape{3, 45, 70} : Shape{45, 70};
        PlanBuilder builder("epilogue");
        BufferId x = builder.argument(tt(dtype, a), BufferRole::Input, "x");
        BufferId w = builder.argument(tt(dtype, {70, 200}), BufferRole::Param, "w");
        BufferId bias = builder.argument(tt(dtype, {70}), BufferRole::Param, "bias");
        BufferId y = builder.output(tt(dtype, c));
        builder.op("jit.matmul", {x, w}, {y}, {{"transpose_rhs", true}});
        builder.result(y);
        Plan plan = builder.finish();
        plan.steps[0].as<GemmParams>().epilogue = epilogue;
        plan.steps[0].inputs.push_back(bias);
        ASSERT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).message();
        Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, randomArguments(plan, 17));
        ASSERT_TRUE(both.ok()) << both.message();
        EXPECT_TRUE(allClose(both->cpuResults[0], both->cudaResults[0], 1.0 + 200.0 / 16.0));
      }
    }
  }
}

TEST_F(GpuTest, TheReluBiasEpilogueTurnsANanIntoZeroWhereTheCpusReluKeepsIt) {
  // cuBLASLt does not document relu(NaN) in its epilogues. PTX's max returns
  // the operand that is not NaN, and the emulation models the epilogue so, so
  // on a device this checks that model. The CPU's relu keeps the NaN, as
  // PyTorch's does; docs/architecture.md says what the difference can change.
  const int64_t rows = 45, inner = 200, columns = 70, poisonedRow = 2;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtypeName(dtype));
    PlanBuilder builder("relu_nan");
    BufferId x = builder.argument(tt(dtype, {rows, inner}), BufferRole::Input, "x");
    BufferId w = builder.argument(tt(dtype, {columns, inner}), BufferRole::Param, "w");
    BufferId bias = builder.argument(tt(dtype, {columns}), BufferRole::Param, "bias");
    BufferId y = builder.output(tt(dtype, {rows, columns}));
    builder.op("jit.matmul", {x, w}, {y}, {{"transpose_rhs", true}});
    builder.result(y);
    Plan plan = builder.finish();
    plan.steps[0].as<GemmParams>().epilogue = GemmEpilogue::BiasRelu;
    plan.steps[0].inputs.push_back(bias);
    std::vector<Tensor> arguments = randomArguments(plan, 23);
    std::vector<double> input = arguments[0].toDoubles();
    input[size_t(poisonedRow * inner + 7)] = std::numeric_limits<double>::quiet_NaN();
    Expected<Tensor> poisoned = Tensor::fromDoubles(dtype, {rows, inner}, input);
    ASSERT_TRUE(poisoned.ok()) << poisoned.message();
    arguments[0] = std::move(*poisoned);
    Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments);
    ASSERT_TRUE(both.ok()) << both.message();
    std::vector<double> onCpu = both->cpuResults[0].toDoubles(), onDevice = both->cudaResults[0].toDoubles();
    for (int64_t column = 0; column < columns; ++column) {
      size_t at = size_t(poisonedRow * columns + column);
      EXPECT_TRUE(std::isnan(onCpu[at])) << "column " << column;
      EXPECT_EQ(onDevice[at], 0.0) << "column " << column;
      onCpu[at] = 0.0;
    }
    Expected<Tensor> expected = Tensor::fromDoubles(dtype, {rows, columns}, onCpu);
    ASSERT_TRUE(expected.ok()) << expected.message();
    EXPECT_TRUE(allClose(*expected, both->cudaResults[0], 1.0 + double(inner) / 16.0)) << "the other rows";
  }
}

TEST_F(GpuTest, GeluAndGradientEpiloguesMatchCpu) {
  // cuBLASLt's GELU_BIAS, GELU_AUX_BIAS, DGELU, DGELU_BGRAD and BGRADB (our
  // bgrad_a) against the CPU's definitions (Plan.h): every output, C and the
  // aux matrix or bias gradient, within the dtype's tolerance grown with K
  // (the product) or with M and K (a bias gradient sums M rows of it).
  // Shapes as a Linear layer's: A [M, K] (dY [K, M] for bgrad_a), W [N, K].
  constexpr int64_t m = 48, k = 200, n = 72;
  struct Case {
    GemmEpilogue epilogue;
    bool transposeA;
  };
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (Case c : {Case{GemmEpilogue::BiasGelu, false}, Case{GemmEpilogue::BiasGeluAux, false},
                   Case{GemmEpilogue::DGelu, false}, Case{GemmEpilogue::DGeluBiasGrad, false},
                   Case{GemmEpilogue::BiasGradA, true}}) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " " + std::string(gemmEpilogueName(c.epilogue)));
      bool extraInput = gemmEpilogueHasBias(c.epilogue) || gemmEpilogueReadsGeluInput(c.epilogue);
      bool extraOutput = gemmEpilogueWritesGeluInput(c.epilogue) || gemmEpilogueWritesBiasGrad(c.epilogue);
      PlanBuilder builder("epilogue");
      BufferId a = builder.argument(tt(dtype, c.transposeA ? Shape{k, m} : Shape{m, k}), BufferRole::Input, "a");
      BufferId w = builder.argument(tt(dtype, {n, k}), BufferRole::Param, "w");
      BufferId extra = kNoBuffer;
      if (extraInput)
        extra = builder.argument(gemmEpilogueHasBias(c.epilogue) ? tt(dtype, {n}) : tt(dtype, {m, n}),
                                 BufferRole::Input, "extra");
      BufferId y = builder.output(tt(dtype, {m, n}));
      AttributeMap attributes = {{"transpose_rhs", true}};
      if (c.transposeA)
        attributes["transpose_lhs"] = true;
      builder.op("jit.matmul", {a, w}, {y}, attributes);
      builder.result(y);
      BufferId extraOut = kNoBuffer;
      if (extraOutput) {
        TensorType type = c.epilogue == GemmEpilogue::BiasGeluAux     ? tt(dtype, {m, n})
                          : c.epilogue == GemmEpilogue::DGeluBiasGrad ? tt(dtype, {n})
                                                                      : tt(dtype, {m});
        extraOut = builder.output(type);
        builder.result(extraOut);
      }
      Plan plan = builder.finish();
      plan.steps[0].as<GemmParams>().epilogue = c.epilogue;
      if (extraInput)
        plan.steps[0].inputs.push_back(extra);
      if (extraOutput)
        plan.steps[0].outputs.push_back(extraOut);
      ASSERT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).message();
      Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, randomArguments(plan, 23));
      ASSERT_TRUE(both.ok()) << both.message();
      ASSERT_EQ(both->cudaResults.size(), extraOutput ? 2u : 1u);
      EXPECT_TRUE(allClose(both->cpuResults[0], both->cudaResults[0], 1.0 + double(k) / 16.0)) << "C";
      if (extraOutput) {
        // dgelu_bgrad's sum of M products of random sign has errors adding
        // up as M terms against a result growing as sqrt(M).
        double slack = c.epilogue == GemmEpilogue::DGeluBiasGrad ? (1.0 + double(k) / 16.0) * std::sqrt(double(m))
                                                                 : 1.0 + double(k) / 16.0;
        EXPECT_TRUE(allClose(both->cpuResults[1], both->cudaResults[1], slack)) << "extra output";
      }
    }
  }
}

TEST_F(GpuTest, EpiloguesCuBlasLtCannotRunAreRefusedAtPrepare) {
  // GELU input whose leading dimension (C's N = 12) is not a multiple of 8.
  PlanBuilder builder("odd");
  BufferId a = builder.argument(tt(DType::F16, {8, 16}), BufferRole::Input, "a");
  BufferId w = builder.argument(tt(DType::F16, {12, 16}), BufferRole::Param, "w");
  BufferId x = builder.argument(tt(DType::F16, {8, 12}), BufferRole::Input, "x");
  BufferId y = builder.output(tt(DType::F16, {8, 12}));
  builder.op("jit.matmul", {a, w}, {y}, {{"transpose_rhs", true}});
  builder.result(y);
  Plan plan = builder.finish();
  plan.steps[0].as<GemmParams>().epilogue = GemmEpilogue::DGelu;
  plan.steps[0].inputs.push_back(x);
  ASSERT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).message();
  Expected<std::unique_ptr<Executable>> prepared = cuda->prepare(plan);
  ASSERT_FALSE(prepared.ok());
  EXPECT_NE(prepared.message().find("multiple of 8"), std::string::npos) << prepared.message();
}

TEST_F(GpuTest, TrueFp32GemmIsNotTf32) {
  // Against the exact product of the f32 inputs (in double), each element's
  // error stays below sqrt(K) u sum_p |a_ip b_pj| (u = 2^-24), which true
  // fp32 accumulation meets with a wide margin in any summation order
  // (rounding errors of random sign grow as sqrt(K)). TF32 rounds every
  // input to a 10-bit mantissa first (u = 2^-11): its errors are about
  // 2^13 times larger, and almost every element misses the bound.
  const int64_t m = 64, k = 512, n = 64;
  Plan plan = matmulPlan(DType::F32, {m, k}, {k, n}, {m, n}, false, false);
  std::vector<Tensor> arguments = randomArguments(plan, 3);
  Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments);
  ASSERT_TRUE(both.ok()) << both.message();
  const Tensor &a = arguments[0], &b = arguments[1], &actual = both->cudaResults[0];
  const double unitRoundoff = std::ldexp(1.0, -24);
  double worst = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0, magnitude = 0;
      for (int64_t p = 0; p < k; ++p) {
        exact += a.at(i * k + p) * b.at(p * n + j);
        magnitude += std::fabs(a.at(i * k + p) * b.at(p * n + j));
      }
      double bound = std::sqrt(double(k)) * unitRoundoff * magnitude;
      worst = std::max(worst, std::fabs(actual.at(i * n + j) - exact) / bound);
    }
  }
  EXPECT_LT(worst, 1.0) << "the worst element's error, in units of the bound";
}

#ifndef AMPJIT_GPU_TESTS_ON_EMULATION
//===----------------------------------------------------------------------===//
// Tuning (CudaBackendOptions::gemmTuningMinimumFlops): the CUDA backend
// itself, on a device or on the emulated runtime.
//===----------------------------------------------------------------------===//

/// A backend that tunes GEMMs of `minimumFlops` and more, caching in `directory`.
std::unique_ptr<CudaBackend> tuningBackend(const std::filesystem::path& directory, int64_t minimumFlops = 1,
                                           CudaBackendOptions options = {}) {
  options.kernelCacheDirectory = directory;
  options.gemmTuningMinimumFlops = minimumFlops;
  Expected<std::unique_ptr<CudaBackend>> backend = createCudaBackend(options);
  EXPECT_TRUE(backend.ok()) << backend.message();
  return backend.ok() ? std::move(*backend) : nullptr;
}

/// What a backend made of a plan: its statistics after prepare and the
/// results of `runs` runs (the last's, on the host).
struct PreparedAndRun {
  CudaRunStats stats;
  std::vector<Tensor> results;
};

Expected<PreparedAndRun> prepareAndRun(CudaBackend& backend, const Plan& plan, const std::vector<Tensor>& arguments,
                                       int runs = 1) {
  Expected<std::unique_ptr<Executable>> executable = backend.prepare(plan);
  if (!executable)
    return executable.status();
  PreparedAndRun done;
  done.stats = backend.stats(**executable);
  std::vector<Tensor> onDevice;
  for (const Tensor& argument : arguments)
    onDevice.push_back(*backend.toDevice(argument));
  for (int run = 0; run < runs; ++run) {
    Expected<std::vector<Tensor>> results = (*executable)->run(onDevice);
    if (!results)
      return results.status();
    done.results.clear();
    for (const Tensor& result : *results)
      done.results.push_back(*backend.toHost(result));
  }
  return done;
}

std::vector<Tensor> cpuResults(Backend& cpu, const Plan& plan, std::vector<Tensor> arguments) {
  return *(*cpu.prepare(plan))->run(arguments);
}

TEST_F(GpuTest, ATunedGemmMatchesTheCpuAndALaterBackendTakesItsChoiceFromTheDiskWithoutTiming) {
  // 2 x 256 x 384 x 512 flops: a device's heuristic offers several algorithms.
  const int64_t m = 256, k = 512, n = 384;
  Plan plan = matmulPlan(DType::F16, {m, k}, {k, n}, {m, n}, false, false);
  std::vector<Tensor> arguments = randomArguments(plan, 31);
  std::vector<Tensor> expected = cpuResults(*cpu, plan, arguments);
  CacheDirectory cache;
  std::unique_ptr<CudaBackend> timing = tuningBackend(cache.path);
  ASSERT_TRUE(timing);
  Expected<PreparedAndRun> first = prepareAndRun(*timing, plan, arguments, 3);
  ASSERT_TRUE(first.ok()) << first.message();
  EXPECT_TRUE(allClose(expected[0], first->results[0], 1.0 + double(k) / 16.0));
  EXPECT_EQ(first->stats.gemmProblemsTimed, first->stats.gemmsTuned);
  EXPECT_EQ(first->stats.gemmTuningCacheHits, 0);
  EXPECT_EQ(cache.gemmTuningEntries().size(), std::size_t(first->stats.gemmsTuned));
#ifndef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
  EXPECT_EQ(first->stats.gemmsTuned, 1);
  EXPECT_GT(first->stats.gemmTuningMilliseconds, 0.0);
#endif

  std::unique_ptr<CudaBackend> reading = tuningBackend(cache.path);
  ASSERT_TRUE(reading);
  Expected<PreparedAndRun> second = prepareAndRun(*reading, plan, arguments, 3);
  ASSERT_TRUE(second.ok()) << second.message();
  EXPECT_EQ(second->stats.gemmProblemsTimed, 0);
  EXPECT_EQ(second->stats.gemmTuningCacheHits, first->stats.gemmsTuned);
  EXPECT_EQ(second->stats.gemmsTuned, first->stats.gemmsTuned);
  EXPECT_EQ(second->stats.gemmsOffHeuristic, first->stats.gemmsOffHeuristic);
  EXPECT_TRUE(second->results[0].bitwiseEqual(first->results[0])) << "the same algorithm, the same bits";
}

#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
std::string fileText(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

/// Products each modelled algorithm computes while `run` runs.
std::vector<int64_t> productsByAlgorithm(const std::function<void()>& run) {
  std::vector<int64_t> before, after;
  for (int variant = 0; variant < int(emulation::kModelledVariants); ++variant)
    before.push_back(emulation::cublasLtMatmulsWithAlgorithm(variant));
  run();
  for (int variant = 0; variant < int(emulation::kModelledVariants); ++variant)
    after.push_back(emulation::cublasLtMatmulsWithAlgorithm(variant) - before[std::size_t(variant)]);
  return after;
}

/// Three products on the `variant`-th algorithm, none on any other.
std::vector<int64_t> threeRunsOn(std::size_t variant) {
  std::vector<int64_t> products(emulation::kModelledVariants, 0);
  products.at(variant) = 3;
  return products;
}
const std::vector<int64_t> kOnlyAlgorithm0 = threeRunsOn(0);
const std::vector<int64_t> kOnlyAlgorithm1 = threeRunsOn(1);
const std::vector<int64_t> kOnlyAlgorithm2 = threeRunsOn(2);

TEST_F(GpuTest, TuningRunsTheFastestOfTheHeuristicsAlgorithmsAndRemembersItInTheProcessAndOnDisk) {
  // Four algorithms: the second is fastest, the third does not run.
  ModelledAlgorithms algorithms({50, 20, emulation::kRefusedAlgorithm, 30});
  Plan plan = matmulPlan(DType::F16, {64, 96}, {96, 80}, {64, 80}, false, false);
  std::vector<Tensor> arguments = randomArguments(plan, 5);
  std::vector<Tensor> expected = cpuResults(*cpu, plan, arguments);
  CacheDirectory cache;
  auto check = [&](CudaBackend& backend, const std::string& when) {
    SCOPED_TRACE(when);
    std::optional<Expected<PreparedAndRun>> prepared;
    // Three runs: step by step, captured, replayed.
    std::vector<int64_t> products =
        productsByAlgorithm([&] { prepared.emplace(prepareAndRun(backend, plan, arguments, 3)); });
    Expected<PreparedAndRun>& done = *prepared;
    EXPECT_TRUE(done.ok()) << done.message();
    if (!done.ok())
      return CudaRunStats{};
    EXPECT_TRUE(allClose(expected[0], done->results[0], 1.0 + 96.0 / 16.0));
    EXPECT_EQ(done->stats.gemmsTuned, 1);
    EXPECT_EQ(done->stats.gemmsOffHeuristic, 1);
    if (done->stats.gemmProblemsTimed == 0)
      EXPECT_EQ(products, kOnlyAlgorithm1) << "no timing, and every run on the fastest";
    else
      // Each candidate that runs is timed as often, but the first also runs
      // once more to size the trials; the fastest then runs the three runs.
      EXPECT_EQ(products[1] + 1, products[0] + 3) << "the runs on the fastest";
    return done->stats;
  };

  std::unique_ptr<CudaBackend> timing = tuningBackend(cache.path);
  ASSERT_TRUE(timing);
  CudaRunStats timed = check(*timing, "timed");
  EXPECT_EQ(timed.gemmProblemsTimed, 1);
  EXPECT_EQ(timed.gemmTuningCacheHits, 0);
  ASSERT_EQ(cache.gemmTuningEntries().size(), 1u);
  std::string entry = fileText(cache.gemmTuningEntries()[0]);
  EXPECT_NE(entry.find("\ncandidates 4\nchoice 1\n"), std::string::npos) << entry;
  EXPECT_NE(entry.find(" refused "), std::string::npos) << entry;
  CudaRunStats again = check(*timing, "prepared again in the same process");
  EXPECT_EQ(again.gemmProblemsTimed, 0);
  EXPECT_EQ(again.gemmTuningCacheHits, 0);

  std::unique_ptr<CudaBackend> reading = tuningBackend(cache.path);
  ASSERT_TRUE(reading);
  CudaRunStats read = check(*reading, "read from the disk");
  EXPECT_EQ(read.gemmProblemsTimed, 0);
  EXPECT_EQ(read.gemmTuningCacheHits, 1);

  // A damaged entry is never trusted: timed again and replaced.
  std::ofstream(cache.gemmTuningEntries()[0]) << entry.substr(0, entry.size() / 2);
  std::unique_ptr<CudaBackend> retiming = tuningBackend(cache.path);
  ASSERT_TRUE(retiming);
  CudaRunStats retimed = check(*retiming, "after the entry was damaged");
  EXPECT_EQ(retimed.gemmTuningEntriesRejected, 1);
  EXPECT_EQ(retimed.gemmProblemsTimed, 1);
  EXPECT_EQ(fileText(cache.gemmTuningEntries()[0]), entry);
}

TEST_F(GpuTest, TuningScreensEveryCandidateItAskedForAndTrialsOnlyTheFirstAndTheFastestFour) {
  // Twelve algorithms. Among the first eight, the fourth (90 us) is the
  // fastest; the eleventh (40 us) beats it, but only a list of more than ten
  // reaches it.
  const std::vector<uint64_t> microseconds = {100, 97, 300, 90, 300, 300, 300, 95, 300, 300, 40, 92};
  ModelledAlgorithms algorithms(microseconds);
  Plan plan = matmulPlan(DType::F16, {64, 96}, {96, 80}, {64, 80}, false, false);
  std::vector<Tensor> arguments = randomArguments(plan, 12);
  std::vector<Tensor> expected = cpuResults(*cpu, plan, arguments);
  CacheDirectory cache;
  struct Case {
    const char* how;
    std::optional<int> option;       // CudaBackendOptions::gemmTuningCandidates
    const char* environment;         // AMPJIT_CUDA_GEMM_TUNING_CANDIDATES
    int offered;
    std::vector<int> finalists;      // the first and the four fastest others of the screen
    int chosen;
  };
  for (const Case& c : {Case{"the default", std::nullopt, nullptr, 8, {0, 1, 2, 3, 7}, 3},
                        Case{"the option", 12, nullptr, 12, {0, 3, 7, 10, 11}, 10},
                        Case{"the variable", std::nullopt, "16", 12, {0, 3, 7, 10, 11}, 10}}) {
    SCOPED_TRACE(c.how);
    ScopedEnvironment candidates("AMPJIT_CUDA_GEMM_TUNING_CANDIDATES", c.environment);
    CudaBackendOptions options;
    if (c.option)
      options.gemmTuningCandidates = *c.option;
    std::unique_ptr<CudaBackend> backend = tuningBackend(cache.path, 1, options);
    ASSERT_TRUE(backend);
    std::optional<Expected<PreparedAndRun>> prepared;
    std::vector<int64_t> products =
        productsByAlgorithm([&] { prepared.emplace(prepareAndRun(*backend, plan, arguments, 3)); });
    ASSERT_TRUE(prepared->ok()) << prepared->message();
    const PreparedAndRun& done = **prepared;
    EXPECT_TRUE(allClose(expected[0], done.results[0], 1.0 + 96.0 / 16.0));
    EXPECT_EQ(done.stats.gemmProblemsTimed, 1) << "each list length has an entry of its own";
    EXPECT_EQ(done.stats.gemmTuningCandidatesScreened, c.offered);
    EXPECT_EQ(done.stats.gemmTuningFinalistsTimed, int64_t(c.finalists.size()));
    EXPECT_EQ(done.stats.gemmsOffHeuristic, 1);
    // Every candidate offered ran its warm-up and screen alike; the finalists
    // ran their trials as well, the first once more to size them, and the
    // chosen one then ran the three runs.
    std::vector<int64_t> screenedOnly, finalist;
    for (int variant = 0; variant < int(microseconds.size()); ++variant) {
      int64_t ran = products[std::size_t(variant)] - (variant == 0 ? 1 : 0) - (variant == c.chosen ? 3 : 0);
      if (variant >= c.offered)
        EXPECT_EQ(ran, 0) << "algorithm " << variant << " was not offered";
      else if (std::find(c.finalists.begin(), c.finalists.end(), variant) != c.finalists.end())
        finalist.push_back(ran);
      else
        screenedOnly.push_back(ran);
    }
    ASSERT_FALSE(finalist.empty());
    EXPECT_EQ(std::count(finalist.begin(), finalist.end(), finalist[0]), std::ptrdiff_t(finalist.size()))
        << ::testing::PrintToString(products);
    if (!screenedOnly.empty()) {
      EXPECT_GE(screenedOnly[0], 2) << "a warm-up and at least one timed run";
      EXPECT_EQ(std::count(screenedOnly.begin(), screenedOnly.end(), screenedOnly[0]),
                std::ptrdiff_t(screenedOnly.size()))
          << ::testing::PrintToString(products);
      EXPECT_GE(finalist[0], screenedOnly[0] + 3) << "three trials more than the screen";
    }
  }
  EXPECT_EQ(cache.gemmTuningEntries().size(), 3u) << "8, 12 and 16 asked for: three entries";
  std::vector<std::string> choices;
  for (const std::filesystem::path& entry : cache.gemmTuningEntries()) {
    std::string text = fileText(entry);
    choices.push_back(text.substr(text.find("\ncandidates "), text.find("\nmilliseconds") - text.find("\ncandidates ")));
  }
  std::sort(choices.begin(), choices.end());
  EXPECT_EQ(choices, (std::vector<std::string>{"\ncandidates 12\nchoice 10", "\ncandidates 12\nchoice 10",
                                               "\ncandidates 8\nchoice 3"}));
}

TEST_F(GpuTest, TuningKeepsTheHeuristicsFirstAlgorithmUnlessAnotherIsClearlyFasterOrItDoesNotRun) {
  Plan plan = matmulPlan(DType::F32, {32, 48}, {48, 40}, {32, 40}, false, false);
  const double flops = 2.0 * 32 * 40 * 48;
  std::vector<Tensor> arguments = randomArguments(plan, 6);
  std::vector<Tensor> expected = cpuResults(*cpu, plan, arguments);
  struct Case {
    std::vector<uint64_t> microseconds;
    int64_t minimumFlops;
    const std::vector<int64_t>& runsOn;
    int64_t tuned;
  };
  const uint64_t refused = emulation::kRefusedAlgorithm;
  for (const Case& c : {Case{{100, 99}, 1, kOnlyAlgorithm0, 1},         // 1% faster: within the margin
                        Case{{100, 90, 95}, 1, kOnlyAlgorithm1, 1},     // 10% faster
                        Case{{refused, 40, 30}, 1, kOnlyAlgorithm2, 1}, // the first does not run
                        Case{{100, 10}, int64_t(flops) + 1, kOnlyAlgorithm0, 0}, // below the minimum
                        Case{{100, 10}, 0, kOnlyAlgorithm0, 0}}) {               // tuning off
    SCOPED_TRACE(::testing::PrintToString(c.microseconds) + " minimum " + std::to_string(c.minimumFlops));
    ModelledAlgorithms algorithms(c.microseconds);
    CacheDirectory cache;
    std::unique_ptr<CudaBackend> backend = tuningBackend(cache.path, c.minimumFlops);
    ASSERT_TRUE(backend);
    // Timing runs the candidates before the three runs: count the runs alone.
    Expected<std::unique_ptr<Executable>> executable = backend->prepare(plan);
    ASSERT_TRUE(executable.ok()) << executable.message();
    EXPECT_EQ(backend->stats(**executable).gemmsTuned, c.tuned);
    std::vector<Tensor> onDevice;
    for (const Tensor& argument : arguments)
      onDevice.push_back(*backend->toDevice(argument));
    std::optional<Expected<std::vector<Tensor>>> results;
    std::vector<int64_t> products = productsByAlgorithm([&] {
      for (int run = 0; run < 3; ++run)
        results.emplace((*executable)->run(onDevice));
      EXPECT_TRUE(backend->synchronize().ok());
    });
    ASSERT_TRUE(results->ok()) << results->message();
    EXPECT_EQ(products, c.runsOn);
    EXPECT_TRUE(allClose(expected[0], *backend->toHost((**results)[0]), 1.0 + 48.0 / 16.0));
  }
}

TEST_F(GpuTest, TunedGemmsWithAnEpilogueBufferOrOneCallPerBatchEntryMatchTheCpu) {
  // Timing enqueues them on scratch operands: the bias read, the GELU input
  // written, every batch entry's call, all at the slots' sizes.
  ModelledAlgorithms algorithms({30, 10});
  auto expectTunedRunsMatchTheCpu = [&](const Plan& plan, uint32_t seed, double slack) {
    std::vector<Tensor> arguments = randomArguments(plan, seed);
    std::vector<Tensor> expected = cpuResults(*cpu, plan, arguments);
    CacheDirectory cache;
    std::unique_ptr<CudaBackend> backend = tuningBackend(cache.path);
    ASSERT_TRUE(backend);
    Expected<PreparedAndRun> done = prepareAndRun(*backend, plan, arguments, 2);
    ASSERT_TRUE(done.ok()) << done.message();
    EXPECT_EQ(done->stats.gemmsOffHeuristic, 1);
    ASSERT_EQ(done->results.size(), expected.size());
    for (std::size_t r = 0; r < expected.size(); ++r)
      EXPECT_TRUE(allClose(expected[r], done->results[r], slack)) << "result " << r;
  };
  for (GemmEpilogue epilogue : {GemmEpilogue::BiasRelu, GemmEpilogue::BiasGeluAux}) {
    SCOPED_TRACE(std::string(gemmEpilogueName(epilogue)));
    constexpr int64_t m = 24, k = 40, n = 32;
    PlanBuilder builder("epilogue");
    BufferId a = builder.argument(tt(DType::F16, {m, k}), BufferRole::Input, "a");
    BufferId w = builder.argument(tt(DType::F16, {n, k}), BufferRole::Param, "w");
    BufferId bias = builder.argument(tt(DType::F16, {n}), BufferRole::Param, "bias");
    BufferId y = builder.output(tt(DType::F16, {m, n}));
    builder.op("jit.matmul", {a, w}, {y}, {{"transpose_rhs", true}});
    builder.result(y);
    BufferId geluInput = kNoBuffer;
    if (epilogue == GemmEpilogue::BiasGeluAux) {
      geluInput = builder.output(tt(DType::F16, {m, n}));
      builder.result(geluInput);
    }
    Plan plan = builder.finish();
    plan.steps[0].as<GemmParams>().epilogue = epilogue;
    plan.steps[0].inputs.push_back(bias);
    if (geluInput != kNoBuffer)
      plan.steps[0].outputs.push_back(geluInput);
    ASSERT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).message();
    expectTunedRunsMatchTheCpu(plan, 8, 1.0 + double(k) / 16.0);
  }
  SCOPED_TRACE("one call per batch entry");
  expectTunedRunsMatchTheCpu(matmulPlan(DType::BF16, {3, 1, 16, 24}, {1, 2, 20, 24}, {3, 2, 16, 20}, false, true), 9,
                             1.0 + 24.0 / 16.0);
}

TEST_F(GpuTest, AGemmWhoseTimingScratchDoesNotFitInMemoryKeepsTheHeuristicsChoiceAndRuns) {
  // The pool refuses more than 32 MiB at once: the plan's own workspace
  // fits, the timing's scratch (that workspace and the operands) does not.
  ModelledAlgorithms algorithms({50, 10});
  struct PoolLimit {
    PoolLimit() { emulation::setLargestPoolAllocation(32u << 20); }
    ~PoolLimit() { emulation::setLargestPoolAllocation(0); }
  } limit;
  Plan plan = matmulPlan(DType::F16, {16, 32}, {32, 24}, {16, 24}, false, false);
  std::vector<Tensor> arguments = randomArguments(plan, 10);
  std::vector<Tensor> expected = cpuResults(*cpu, plan, arguments);
  CacheDirectory cache;
  std::unique_ptr<CudaBackend> backend = tuningBackend(cache.path);
  ASSERT_TRUE(backend);
  std::vector<int64_t> products = productsByAlgorithm([&] {
    Expected<PreparedAndRun> run = prepareAndRun(*backend, plan, arguments, 3);
    ASSERT_TRUE(run.ok()) << run.message();
    EXPECT_TRUE(allClose(expected[0], run->results[0], 1.0 + 32.0 / 16.0));
    EXPECT_EQ(run->stats.gemmsTuned, 0);
    EXPECT_EQ(run->stats.gemmProblemsTimed, 0);
    EXPECT_NE(run->stats.gemmTuningDeclined.find("keeps the heuristic's first algorithm: its "), std::string::npos)
        << run->stats.gemmTuningDeclined;
    EXPECT_NE(run->stats.gemmTuningDeclined.find(" bytes of scratch operands do not fit in device memory"),
              std::string::npos)
        << run->stats.gemmTuningDeclined;
  });
  EXPECT_EQ(products, kOnlyAlgorithm0);
  EXPECT_TRUE(cache.gemmTuningEntries().empty()) << "nothing was chosen";
}

TEST_F(GpuTest, PrepareNamesTheGemmWhoseEveryAlgorithmCuBlasLtRefusesToRun) {
  ModelledAlgorithms algorithms({emulation::kRefusedAlgorithm, emulation::kRefusedAlgorithm});
  Plan plan = matmulPlan(DType::F16, {16, 32}, {32, 24}, {16, 24}, false, false);
  CacheDirectory cache;
  std::unique_ptr<CudaBackend> backend = tuningBackend(cache.path);
  ASSERT_TRUE(backend);
  Expected<std::unique_ptr<Executable>> executable = backend->prepare(plan);
  ASSERT_FALSE(executable.ok());
  EXPECT_NE(executable.message().find("jit.matmul"), std::string::npos) << executable.message();
  EXPECT_NE(executable.message().find("cuBLASLt refused to run each of the 2 algorithms its heuristic offered"),
            std::string::npos)
      << executable.message();
  EXPECT_TRUE(cache.gemmTuningEntries().empty()) << "nothing to remember";
}
#endif // AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
#endif // AMPJIT_GPU_TESTS_ON_EMULATION

} // namespace
} // namespace ampjit::runtime::gputest
