// The GEMM epilogues beyond bias/relu (Plan.h, GemmEpilogue) on the CPU
// backend: each fused step against the unfused steps it replaces (the same
// bits in f32), against an f64 reference from the rounded inputs in every
// low-precision dtype, and the verifier's and the plan file's handling of
// their extra slots.

#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/PlanFile.h"

#include "RuntimeTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>

namespace {

using namespace ampjit::runtime;
using namespace ampjit::runtime::test;

constexpr double kEps32 = 0x1p-23;
constexpr int64_t kM = 6, kK = 40, kN = 16;

double geluTanhReference(double x) {
  const double beta = std::sqrt(2.0 / std::numbers::pi), kappa = 0.044715;
  return 0.5 * x * (1.0 + std::tanh(beta * (x + kappa * x * x * x)));
}

double geluTanhGradReference(double dy, double x) {
  const double beta = std::sqrt(2.0 / std::numbers::pi), kappa = 0.044715;
  double t = std::tanh(beta * (x + kappa * x * x * x));
  return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * beta * (1.0 + 3.0 * kappa * x * x));
}

/// One epilogue's fused step and the unfused steps it stands for, over the
/// same arguments [A, B, extra input?] and with the same results [C, extra
/// output?].
struct EpiloguePlans {
  Plan fused, unfused;
};

EpiloguePlans buildPlans(GemmEpilogue epilogue, DType dtype, bool transposeA) {
  bool extraInput = gemmEpilogueHasBias(epilogue) || gemmEpilogueReadsGeluInput(epilogue);
  bool extraOutput = gemmEpilogueWritesGeluInput(epilogue) || gemmEpilogueWritesBiasGrad(epilogue);
  AttributeMap matmulAttributes = {{"transpose_rhs", true}};
  if (transposeA)
    matmulAttributes["transpose_lhs"] = true;
  AttributeMap tanh = {{"approximate", std::string("tanh")}};
  TensorType cType = tt(dtype, {kM, kN});
  TensorType extraInputType = gemmEpilogueHasBias(epilogue) ? tt(dtype, {kN}) : cType;
  TensorType extraOutputType = epilogue == GemmEpilogue::BiasGeluAux     ? cType
                               : epilogue == GemmEpilogue::DGeluBiasGrad ? tt(dtype, {kN})
                                                                         : tt(dtype, {kM});
  auto start = [&](PlanBuilder& b, BufferId& a, BufferId& w, BufferId& extra) {
    a = b.argument(tt(dtype, transposeA ? Shape{kK, kM} : Shape{kM, kK}), BufferRole::Input, "a");
    w = b.argument(tt(dtype, {kN, kK}), BufferRole::Param, "w");
    extra = extraInput ? b.argument(extraInputType, BufferRole::Input, "extra") : kNoBuffer;
  };

  EpiloguePlans plans;
  {
    PlanBuilder b("fused");
    BufferId a, w, extra;
    start(b, a, w, extra);
    BufferId c = b.output(cType);
    b.op("jit.matmul", {a, w}, {c}, matmulAttributes);
    b.result(c);
    BufferId extraOut = extraOutput ? b.output(extraOutputType) : kNoBuffer;
    if (extraOutput)
      b.result(extraOut);
    plans.fused = b.finish();
    Step& gemm = plans.fused.steps[0];
    gemm.as<GemmParams>().epilogue = epilogue;
    if (extraInput)
      gemm.inputs.push_back(extra);
    if (extraOutput)
      gemm.outputs.push_back(extraOut);
  }
  {
    PlanBuilder b("unfused");
    BufferId a, w, extra;
    start(b, a, w, extra);
    BufferId product = b.temporary(cType), c = b.output(cType);
    BufferId extraOut = extraOutput ? b.output(extraOutputType) : kNoBuffer;
    b.op("jit.matmul", {a, w}, {product}, matmulAttributes);
    switch (epilogue) {
    case GemmEpilogue::BiasGelu:
    case GemmEpilogue::BiasGeluAux: {
      BufferId sum = extraOutput ? extraOut : b.temporary(cType);
      b.op("jit.add", {product, extra}, {sum});
      b.op("jit.gelu", {sum}, {c}, tanh);
      break;
    }
    case GemmEpilogue::DGelu:
    case GemmEpilogue::DGeluBiasGrad:
      b.op("jit.gelu_grad", {product, extra}, {c}, tanh);
      if (extraOutput)
        b.op("jit.sum", {c}, {extraOut}, {{"axes", std::vector<int64_t>{0}}});
      break;
    case GemmEpilogue::BiasGradA:
      b.op("jit.reshape", {product}, {c});
      b.op("jit.sum", {a}, {extraOut}, {{"axes", std::vector<int64_t>{transposeA ? 0 : 1}}});
      break;
    default: ADD_FAILURE() << "no unfused form for " << gemmEpilogueName(epilogue);
    }
    b.result(c);
    if (extraOutput)
      b.result(extraOut);
    plans.unfused = b.finish();
  }
  return plans;
}

std::vector<Tensor> run(const Plan& plan, std::vector<Tensor> arguments) {
  Status status = verifyPlan(plan);
  EXPECT_TRUE(status.ok()) << status.message() << "\n" << printPlan(plan);
  Expected<std::vector<Tensor>> results = cpuBackend().run(plan, arguments);
  EXPECT_TRUE(results.ok()) << results.message();
  return results.ok() ? std::move(*results) : std::vector<Tensor>{};
}

struct Reference {
  std::vector<double> c, cBound, extra, extraBound;
};

/// The f64 result of each epilogue from the rounded arguments, with bounds
/// for the f32 accumulation over K (and over M for a bias gradient).
Reference reference(GemmEpilogue epilogue, bool transposeA, const std::vector<Tensor>& arguments) {
  const Tensor &a = arguments[0], &w = arguments[1];
  Reference ref;
  std::vector<double> columnSum(kN, 0.0), columnBound(kN, 0.0);
  for (int64_t i = 0; i < kM; ++i)
    for (int64_t j = 0; j < kN; ++j) {
      double product = 0, magnitude = 0;
      for (int64_t p = 0; p < kK; ++p) {
        double term = a.at(transposeA ? p * kM + i : i * kK + p) * w.at(j * kK + p);
        product += term;
        magnitude += std::abs(term);
      }
      // gelu and its gradient have slopes below 1.2 in the product.
      double accumulation = 1.2 * 2.0 * double(kK) * kEps32 * magnitude;
      // The f32 formulas cancel where gelu or its gradient is near 0: their
      // error is a few ulps of the terms, not of the result.
      double value = product, bound = accumulation;
      switch (epilogue) {
      case GemmEpilogue::BiasGelu:
      case GemmEpilogue::BiasGeluAux:
        value = geluTanhReference(product + arguments[2].at(j));
        bound += 16.0 * kEps32 * std::abs(product + arguments[2].at(j));
        if (epilogue == GemmEpilogue::BiasGeluAux) {
          ref.extra.push_back(product + arguments[2].at(j));
          ref.extraBound.push_back(accumulation);
        }
        break;
      case GemmEpilogue::DGelu:
      case GemmEpilogue::DGeluBiasGrad:
        value = geluTanhGradReference(product, arguments[2].at(i * kN + j));
        bound += 16.0 * kEps32 * std::abs(product) * (1.0 + std::pow(arguments[2].at(i * kN + j), 2));
        columnSum[size_t(j)] += value;
        columnBound[size_t(j)] += bound + (2.0 * double(kM) + 8.0) * kEps32 * std::abs(value);
        break;
      default: break;
      }
      ref.c.push_back(value);
      ref.cBound.push_back(bound + 8.0 * kEps32 * std::abs(value));
    }
  if (epilogue == GemmEpilogue::DGeluBiasGrad) {
    ref.extra = columnSum;
    ref.extraBound = columnBound;
  }
  if (epilogue == GemmEpilogue::BiasGradA)
    for (int64_t i = 0; i < kM; ++i) {
      double sum = 0, magnitude = 0;
      for (int64_t p = 0; p < kK; ++p) {
        double value = a.at(transposeA ? p * kM + i : i * kK + p);
        sum += value;
        magnitude += std::abs(value);
      }
      ref.extra.push_back(sum);
      ref.extraBound.push_back(2.0 * double(kK) * kEps32 * magnitude);
    }
  return ref;
}

struct EpilogueCase {
  GemmEpilogue epilogue;
  bool transposeA;
};

constexpr EpilogueCase kCases[] = {
    {GemmEpilogue::BiasGelu, false},      {GemmEpilogue::BiasGeluAux, false}, {GemmEpilogue::DGelu, false},
    {GemmEpilogue::DGeluBiasGrad, false}, {GemmEpilogue::BiasGradA, true},    {GemmEpilogue::BiasGradA, false},
};

TEST(GemmEpilogue, F32GivesTheUnfusedStepsBits) {
  // In f32 the unfused plan rounds nothing the epilogue keeps unrounded, and
  // the bias gradients sum in the Reduction step's order.
  std::mt19937_64 rng(11);
  for (const EpilogueCase& c : kCases) {
    SCOPED_TRACE(std::string(gemmEpilogueName(c.epilogue)) + (c.transposeA ? " A^T" : ""));
    EpiloguePlans plans = buildPlans(c.epilogue, DType::F32, c.transposeA);
    std::vector<Tensor> arguments;
    for (size_t i = 0; i < plans.fused.argumentCount(); ++i)
      arguments.push_back(randomTensor(DType::F32, plans.fused.buffers[plans.fused.argumentBuffer(i)].type.shape, rng,
                                       -2.0, 2.0));
    std::vector<Tensor> fused = run(plans.fused, arguments), unfused = run(plans.unfused, arguments);
    ASSERT_EQ(fused.size(), unfused.size());
    for (size_t r = 0; r < fused.size(); ++r)
      EXPECT_TRUE(fused[r].bitwiseEqual(unfused[r])) << "result " << r;
  }
}

TEST(GemmEpilogue, EveryDtypeMatchesTheF64Reference) {
  std::mt19937_64 rng(12);
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (const EpilogueCase& c : kCases) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " " + std::string(gemmEpilogueName(c.epilogue)) +
                   (c.transposeA ? " A^T" : ""));
      EpiloguePlans plans = buildPlans(c.epilogue, dtype, c.transposeA);
      std::vector<Tensor> arguments;
      for (size_t i = 0; i < plans.fused.argumentCount(); ++i)
        arguments.push_back(
            randomTensor(dtype, plans.fused.buffers[plans.fused.argumentBuffer(i)].type.shape, rng, -2.0, 2.0));
      std::vector<Tensor> fused = run(plans.fused, arguments);
      ASSERT_FALSE(fused.empty());
      Reference ref = reference(c.epilogue, c.transposeA, arguments);
      EXPECT_TRUE(allClose(fused[0], ref.c, toleranceFor(dtype), ref.cBound)) << "C";
      if (fused.size() > 1) {
        EXPECT_TRUE(allClose(fused[1], ref.extra, toleranceFor(dtype), ref.extraBound)) << "extra output";
      }
    }
  }
}

TEST(GemmEpilogue, DGeluBiasGradSumsTheUnroundedGradient) {
  // Plan.h: dgelu_bgrad sums C's values before their rounding. Each row's
  // product is 1 + 2^-11 - 2^-20 (exact in f32) and gelu'(P, 40) = P, so f16
  // rounds every C element down to 1, while the sum of the unrounded values,
  // 6 + 6 * (2^-11 - 2^-20), lies above the midpoint 6 + 2^-9 and rounds to
  // 6 + 2^-8. The unfused plan sums the rounded C: exactly 6.
  std::vector<double> rows;
  for (int64_t i = 0; i < kM; ++i)
    rows.insert(rows.end(), {1.0, 0x1p-11 - 0x1p-20});
  std::vector<Tensor> arguments = {filled(DType::F16, {kM, 2}, rows), filled(DType::F16, {8, 2}, {1.0}),
                                   filled(DType::F16, {kM, 8}, {40.0})};
  for (bool fused : {true, false}) {
    PlanBuilder b("p");
    BufferId a = b.argument(tt(DType::F16, {kM, 2}), BufferRole::Input);
    BufferId w = b.argument(tt(DType::F16, {8, 2}), BufferRole::Param);
    BufferId x = b.argument(tt(DType::F16, {kM, 8}), BufferRole::Input);
    BufferId product = b.temporary(tt(DType::F16, {kM, 8}));
    BufferId c = b.output(tt(DType::F16, {kM, 8})), grad = b.output(tt(DType::F16, {8}));
    b.op("jit.matmul", {a, w}, {fused ? c : product}, {{"transpose_rhs", true}});
    if (!fused) {
      b.op("jit.gelu_grad", {product, x}, {c}, {{"approximate", std::string("tanh")}});
      b.op("jit.sum", {c}, {grad}, {{"axes", std::vector<int64_t>{0}}});
    }
    b.result(c);
    b.result(grad);
    Plan plan = b.finish();
    if (fused) {
      plan.steps[0].as<GemmParams>().epilogue = GemmEpilogue::DGeluBiasGrad;
      plan.steps[0].inputs.push_back(x);
      plan.steps[0].outputs.push_back(grad);
    }
    std::vector<Tensor> results = run(plan, arguments);
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(results[0].at(0), 1.0);
    EXPECT_EQ(results[1].at(0), fused ? 6.0 + 0x1p-8 : 6.0) << (fused ? "fused" : "unfused");
  }
}

//===----------------------------------------------------------------------===//
// Verifier and plan file
//===----------------------------------------------------------------------===//

std::string verifyMessage(const Plan& plan) {
  Status status = verifyPlan(plan);
  return status.ok() ? "" : status.message();
}

TEST(GemmEpilogue, VerifierNamesMissingAndMistypedSlots) {
  // Well-formed plans of each epilogue verify.
  for (const EpilogueCase& c : kCases)
    EXPECT_EQ(verifyMessage(buildPlans(c.epilogue, DType::F16, c.transposeA).fused), "")
        << gemmEpilogueName(c.epilogue);

  Plan noGeluInput = buildPlans(GemmEpilogue::DGelu, DType::F16, false).fused;
  noGeluInput.steps[0].inputs.pop_back();
  EXPECT_EQ(verifyMessage(noGeluInput), "step 0 (gemm from jit.matmul): has 2 inputs and 1 outputs but needs 3 and 1");

  Plan absentGeluInput = buildPlans(GemmEpilogue::DGelu, DType::F16, false).fused;
  absentGeluInput.steps[0].inputs[2] = kNoBuffer;
  EXPECT_EQ(verifyMessage(absentGeluInput), "step 0 (gemm from jit.matmul): input 'gelu_input' is required but absent");

  Plan noAux = buildPlans(GemmEpilogue::BiasGeluAux, DType::F16, false).fused;
  noAux.steps[0].outputs.pop_back();
  EXPECT_EQ(verifyMessage(noAux), "step 0 (gemm from jit.matmul): has 3 inputs and 1 outputs but needs 3 and 2");

  Plan wideGeluInput = buildPlans(GemmEpilogue::DGelu, DType::F16, false).fused;
  wideGeluInput.buffers[wideGeluInput.steps[0].inputs[2]].type = tt(DType::F32, {kM, kN});
  EXPECT_EQ(verifyMessage(wideGeluInput),
            "step 0 (gemm from jit.matmul): input 'gelu_input' (f32[6x16]) must be f16[6x16] (the GELU input the "
            "forward saved: C's shape and dtype)");

  Plan wideBiasGrad = buildPlans(GemmEpilogue::DGeluBiasGrad, DType::BF16, false).fused;
  wideBiasGrad.buffers[wideBiasGrad.steps[0].outputs[1]].type = tt(DType::F32, {kN});
  EXPECT_EQ(verifyMessage(wideBiasGrad),
            "step 0 (gemm from jit.matmul): output 'bias_grad' (f32[16]) must be bf16[16] (the sum over C's rows, one "
            "value per column, in C's dtype)");

  Plan rowsNotColumns = buildPlans(GemmEpilogue::BiasGradA, DType::F32, true).fused;
  rowsNotColumns.buffers[rowsNotColumns.steps[0].outputs[1]].type = tt(DType::F32, {kN});
  EXPECT_EQ(verifyMessage(rowsNotColumns),
            "step 0 (gemm from jit.matmul): output 'bias_grad' (f32[16]) must be f32[6] (the sum over K of op(A), "
            "one value per row of C, in C's dtype)");

  // The GELU and gradient epilogues are unbatched.
  PlanBuilder b("batched");
  BufferId a = b.argument(tt(DType::F32, {2, kM, kK}), BufferRole::Input);
  BufferId w = b.argument(tt(DType::F32, {kN, kK}), BufferRole::Param);
  BufferId bias = b.argument(tt(DType::F32, {kN}), BufferRole::Param);
  BufferId c = b.output(tt(DType::F32, {2, kM, kN}));
  b.op("jit.matmul", {a, w}, {c}, {{"transpose_rhs", true}});
  b.result(c);
  Plan batched = b.finish();
  batched.steps[0].as<GemmParams>().epilogue = GemmEpilogue::BiasGelu;
  batched.steps[0].inputs.push_back(bias);
  EXPECT_EQ(verifyMessage(batched), "step 0 (gemm from jit.matmul): input 'A' (f32[2x6x40]) must have rank 2: "
                                    "epilogue 'bias_gelu' works on unbatched products only");
}

TEST(GemmEpilogue, PlansPrintAndRoundTripThroughTheFile) {
  for (const EpilogueCase& c : kCases) {
    Plan plan = buildPlans(c.epilogue, DType::F16, c.transposeA).fused;
    std::string text = printStep(plan, 0);
    EXPECT_NE(text.find("epilogue=" + std::string(gemmEpilogueName(c.epilogue))), std::string::npos) << text;
    Expected<Plan> decoded = decodePlan(encodePlan(plan), "in-memory");
    ASSERT_TRUE(decoded.ok()) << decoded.message();
    EXPECT_EQ(*decoded, plan) << text;
  }
  Plan aux = buildPlans(GemmEpilogue::BiasGeluAux, DType::F16, false).fused;
  EXPECT_EQ(printStep(aux, 0), "step 0: gemm f16 x f16 -> f16, f16 (acc f32) epilogue=bias_gelu_aux A=%0 B=%1^T "
                               "bias=%2 C=%3 gelu_input=%4  // jit.matmul");
  Plan backward = buildPlans(GemmEpilogue::DGeluBiasGrad, DType::F16, false).fused;
  EXPECT_EQ(printStep(backward, 0), "step 0: gemm f16 x f16 -> f16, f16 (acc f32) epilogue=dgelu_bgrad A=%0 B=%1^T "
                                    "gelu_input=%2 C=%3 bias_grad=%4  // jit.matmul");
}

} // namespace
