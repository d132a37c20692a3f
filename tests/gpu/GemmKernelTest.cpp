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
#include <string>
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

} // namespace
} // namespace ampjit::runtime::gputest
