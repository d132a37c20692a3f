//===- EmulatedCublasLtTest.cpp - the host model of cuBLASLt itself -------===//
//
// tests/emulation/EmulatedCublasLt.h stands in for cuBLASLt when the
// backend's GEMM steps run without a GPU; these tests show that it keeps
// cuBLASLt's documented contract on small products worked out by hand
// (column-major operands, transposes, leading dimensions, a bias per row of
// D, BGRADA per row and BGRADB per column, the GELU input in the aux
// matrix, strided batches, TF32 rounding its inputs) and refuses what the
// library refuses, so a GEMM test passing on it means the backend drives
// the library as documented. Calls are made directly, not through
// CublasLtGemm.cpp, whose mapping the GEMM and step tests check; they are
// qualified, since the argument types would also find cuBLASLt's own.
//
//===----------------------------------------------------------------------===//

#include "EmulatedCublasLt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ampjit::emulation {
namespace {

/// One product's descriptors, all f32 unless a test changes them.
class Product {
public:
  Product(uint64_t m, uint64_t n, uint64_t k, bool transposeA = false, bool transposeB = false,
          cublasComputeType_t compute = CUBLAS_COMPUTE_32F) {
    EXPECT_EQ(emulation::cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(emulation::cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    cublasOperation_t opA = transposeA ? CUBLAS_OP_T : CUBLAS_OP_N, opB = transposeB ? CUBLAS_OP_T : CUBLAS_OP_N;
    EXPECT_EQ(emulation::cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(emulation::cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB),
              CUBLAS_STATUS_SUCCESS);
    uint64_t aRows = transposeA ? k : m, aColumns = transposeA ? m : k;
    uint64_t bRows = transposeB ? n : k, bColumns = transposeB ? k : n;
    EXPECT_EQ(emulation::cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, aRows, aColumns, int64_t(aRows)), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(emulation::cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, bRows, bColumns, int64_t(bRows)), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(emulation::cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, m, n, int64_t(m)), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(emulation::cublasLtMatmulPreferenceCreate(&preference), CUBLAS_STATUS_SUCCESS);
  }
  ~Product() {
    emulation::cublasLtMatmulPreferenceDestroy(preference);
    emulation::cublasLtMatrixLayoutDestroy(d);
    emulation::cublasLtMatrixLayoutDestroy(b);
    emulation::cublasLtMatrixLayoutDestroy(a);
    emulation::cublasLtMatmulDescDestroy(desc);
    emulation::cublasLtDestroy(handle);
  }

  template <typename T> cublasStatus_t set(cublasLtMatmulDescAttributes_t attribute, T value) {
    return emulation::cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value);
  }

  cublasStatus_t chooseAlgorithm() {
    int found = 0;
    cublasLtMatmulHeuristicResult_t result{};
    cublasStatus_t status = emulation::cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, preference, 1, &result, &found);
    algorithm = result.algo;
    return status == CUBLAS_STATUS_SUCCESS && found != 1 ? CUBLAS_STATUS_INTERNAL_ERROR : status;
  }

  cublasStatus_t run(const void* aData, const void* bData, void* dData) {
    float alpha = 1.0f, beta = 0.0f;
    return emulation::cublasLtMatmul(handle, desc, &alpha, aData, a, bData, b, &beta, dData, d, dData, d, &algorithm,
                          nullptr, 0, nullptr);
  }

  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
};

// Column-major A [2, 3] = [[1, 2, 3], [4, 5, 6]] and B [3, 2] = [[1, 0], [2, 1], [0, 3]].
const std::vector<float> kA = {1, 4, 2, 5, 3, 6}, kB = {1, 2, 0, 0, 1, 3};
// A x B = [[5, 11], [14, 23]], column-major.
const std::vector<float> kProduct = {5, 14, 11, 23};

TEST(CublasLtModel, MultipliesColumnMajorOperands) {
  Product product(2, 2, 3);
  ASSERT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
  std::vector<float> d(4, -1.0f);
  int64_t before = cublasLtMatmulCount();
  ASSERT_EQ(product.run(kA.data(), kB.data(), d.data()), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
  EXPECT_EQ(d, kProduct);
  EXPECT_EQ(cublasLtMatmulCount() - before, 1);
}

TEST(CublasLtModel, TransposedOperandsAreReadAcrossTheirLeadingDimension) {
  // A^T stored as [3, 2] (its columns are A's rows), B^T as [2, 3].
  std::vector<float> aT = {1, 2, 3, 4, 5, 6}, bT = {1, 0, 2, 1, 0, 3};
  Product product(2, 2, 3, /*transposeA=*/true, /*transposeB=*/true);
  ASSERT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
  std::vector<float> d(4);
  ASSERT_EQ(product.run(aT.data(), bT.data(), d.data()), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
  EXPECT_EQ(d, kProduct);
}

TEST(CublasLtModel, BiasIsOneValuePerRowOfD) {
  Product product(2, 2, 3);
  std::vector<float> bias = {100, 200};
  ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.data())),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
  std::vector<float> d(4);
  ASSERT_EQ(product.run(kA.data(), kB.data(), d.data()), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
  EXPECT_EQ(d, (std::vector<float>{105, 214, 111, 223}));
}

TEST(CublasLtModel, BgradaSumsAPerRowOfDAndBgradbSumsBPerColumn) {
  for (cublasLtEpilogue_t epilogue : {CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB}) {
    Product product(2, 2, 3);
    std::vector<float> gradient(2, -1.0f);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(gradient.data())),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
    std::vector<float> d(4);
    ASSERT_EQ(product.run(kA.data(), kB.data(), d.data()), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
    EXPECT_EQ(d, kProduct) << "D is the plain product";
    if (epilogue == CUBLASLT_EPILOGUE_BGRADA)
      EXPECT_EQ(gradient, (std::vector<float>{6, 15})) << "A's rows summed over k";
    else
      EXPECT_EQ(gradient, (std::vector<float>{3, 4})) << "B's columns summed over k";
  }
}

TEST(CublasLtModel, GeluAuxKeepsThePreActivationAndDgeluReadsIt) {
  // D [8, 1] so the aux leading dimension can be 8: x = A (a column) times 1.
  std::vector<float> a = {-3, -1, -0.5f, 0, 0.25f, 1, 2, 4}, one = {1};
  std::vector<float> bias(8, 0.5f), aux(8, -7.0f), d(8), grad(8);
  {
    Product product(8, 1, 1);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.data())),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux.data())),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(8)), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
    ASSERT_EQ(product.run(a.data(), one.data(), d.data()), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
  }
  {
    std::vector<float> upstream(8, 1.0f);
    Product product(8, 1, 1);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(aux.data())),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(8)), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
    ASSERT_EQ(product.run(upstream.data(), one.data(), grad.data()), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    double x = double(a[i]) + 0.5;
    double inner = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = std::tanh(inner);
    EXPECT_EQ(aux[i], float(x)) << "the GELU input is the product plus the bias, row " << i;
    EXPECT_NEAR(d[i], 0.5 * x * (1 + t), 1e-6) << "row " << i;
    double slope = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
    EXPECT_NEAR(grad[i], slope, 1e-6) << "row " << i;
  }
}

TEST(CublasLtModel, StridedBatchesStepEachOperandByItsOwnStride) {
  // Two products sharing B (stride 0), A and D strided.
  Product product(2, 2, 3);
  int32_t batches = 2;
  int64_t aStride = 6, shared = 0, dStride = 4;
  for (auto [layout, stride] : {std::pair{product.a, aStride}, {product.b, shared}, {product.d, dStride}}) {
    ASSERT_EQ(emulation::cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batches, sizeof batches),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(emulation::cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                               sizeof stride),
              CUBLAS_STATUS_SUCCESS);
  }
  std::vector<float> a = kA;
  for (float value : kA)
    a.push_back(2 * value);
  ASSERT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
  std::vector<float> d(8);
  ASSERT_EQ(product.run(a.data(), kB.data(), d.data()), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
  EXPECT_EQ(d, (std::vector<float>{5, 14, 11, 23, 10, 28, 22, 46}));
}

TEST(CublasLtModel, Tf32RoundsTheInputsTrueFp32DoesNot) {
  // 1 + 2^-12 is exact in fp32 and rounds to 1 in TF32's 10-bit mantissa.
  std::vector<float> a = {1.0f + 1.0f / 4096}, b = {1.0f};
  for (cublasComputeType_t compute : {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32}) {
    Product product(1, 1, 1, false, false, compute);
    ASSERT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
    std::vector<float> d(1);
    ASSERT_EQ(product.run(a.data(), b.data(), d.data()), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
    EXPECT_EQ(d[0], compute == CUBLAS_COMPUTE_32F ? a[0] : 1.0f);
  }
}

TEST(CublasLtModel, RefusesWhatTheLibraryRefuses) {
  std::vector<float> d(64), aux(64), bias(8);
  {
    // An attribute given with the wrong size.
    Product product(2, 2, 3);
    int64_t wide = CUBLAS_OP_T;
    EXPECT_EQ(emulation::cublasLtMatmulDescSetAttribute(product.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
              CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(lastCublasLtRefusal().find("TRANSA takes 4 bytes"), std::string::npos) << lastCublasLtRefusal();
  }
  {
    // Shapes that do not chain: B has 4 rows for a K of 3.
    Product product(2, 2, 3);
    emulation::cublasLtMatrixLayoutDestroy(product.b);
    ASSERT_EQ(emulation::cublasLtMatrixLayoutCreate(&product.b, CUDA_R_32F, 4, 2, 4), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(lastCublasLtRefusal().find("do not chain"), std::string::npos) << lastCublasLtRefusal();
  }
  {
    // A leading dimension shorter than a column.
    Product product(2, 2, 3);
    emulation::cublasLtMatrixLayoutDestroy(product.a);
    ASSERT_EQ(emulation::cublasLtMatrixLayoutCreate(&product.a, CUDA_R_32F, 2, 3, 1), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_INVALID_VALUE);
  }
  {
    // f16 A with bf16 B.
    Product product(2, 2, 3);
    emulation::cublasLtMatrixLayoutDestroy(product.a);
    emulation::cublasLtMatrixLayoutDestroy(product.b);
    ASSERT_EQ(emulation::cublasLtMatrixLayoutCreate(&product.a, CUDA_R_16F, 2, 3, 2), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(emulation::cublasLtMatrixLayoutCreate(&product.b, CUDA_R_16BF, 3, 2, 3), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {
    // A GELU input leading dimension that is not a multiple of 8.
    Product product(12, 2, 3);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(12)), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(lastCublasLtRefusal().find("divisible by 8"), std::string::npos) << lastCublasLtRefusal();
  }
  {
    // A bias epilogue run without its pointer.
    Product product(2, 2, 3);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
    EXPECT_EQ(product.run(kA.data(), kB.data(), d.data()), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(lastCublasLtRefusal().find("BIAS_POINTER"), std::string::npos) << lastCublasLtRefusal();
  }
  {
    // An algorithm used after the epilogue changed under it.
    Product product(2, 2, 3);
    ASSERT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_RELU), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(product.run(kA.data(), kB.data(), d.data()), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(lastCublasLtRefusal().find("another problem"), std::string::npos) << lastCublasLtRefusal();
  }
  {
    // A bias less aligned at the call than its pointer was at the heuristic.
    Product product(2, 2, 3);
    alignas(16) float storage[8] = {};
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(storage)), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(storage + 1)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(product.run(kA.data(), kB.data(), d.data()), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(lastCublasLtRefusal().find("aligned"), std::string::npos) << lastCublasLtRefusal();
  }
  {
    // A long product's algorithm needs workspace; the call gives none.
    Product product(2, 2, 4096);
    uint64_t workspace = 32u << 20;
    ASSERT_EQ(emulation::cublasLtMatmulPreferenceSetAttribute(product.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &workspace, sizeof workspace),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
    std::vector<float> a(2 * 4096, 1.0f), b(4096 * 2, 1.0f);
    EXPECT_EQ(product.run(a.data(), b.data(), d.data()), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(lastCublasLtRefusal().find("workspace"), std::string::npos) << lastCublasLtRefusal();
  }
  {
    // An attribute the model does not implement is refused by name, not ignored.
    Product product(2, 2, 3);
    void* amax = nullptr;
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_NE(lastCublasLtRefusal().find("does not model"), std::string::npos) << lastCublasLtRefusal();
  }
  {
    // An SM count target shapes the choice only: an int32 count of SMs.
    Product product(2, 2, 3);
    int32_t smCount = 100;
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, smCount), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_SUCCESS) << lastCublasLtRefusal();
    int64_t wide = 100;
    EXPECT_EQ(product.set(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, wide), CUBLAS_STATUS_INVALID_VALUE);
    int32_t negative = -4;
    ASSERT_EQ(product.set(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, negative), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(product.chooseAlgorithm(), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(lastCublasLtRefusal().find("SM_COUNT_TARGET -4"), std::string::npos) << lastCublasLtRefusal();
  }
}

} // namespace
} // namespace ampjit::emulation
