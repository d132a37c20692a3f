// GEMM through OpenBLAS, as tensor cores do it: low-precision operands are
// widened exactly to f32 (f64 for f64 data), products accumulate in that
// precision inside sgemm/dgemm, and C is rounded once to its dtype. beta is
// always 0; a GEMM epilogue (bias, activation, gradients) is applied to the
// accumulated product afterwards, with the elementwise kernels' formulas.
//
// OpenBLAS is linked statically and pinned to a fixed thread count (1 by
// default): its GEMM splits M and N across threads, never K, but a fixed
// count keeps results independent of the machine's load and core count.

#include "CpuKernels.h"

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <type_traits>

namespace ampjit::runtime {
const char* blasKernelName() { return openblas_get_corename(); }
} // namespace ampjit::runtime

namespace ampjit::runtime::cpu {

void setBlasThreads(int threads) {
  static std::mutex mutex;
  static int current = -1;
  std::lock_guard<std::mutex> lock(mutex);
  if (threads < 1)
    threads = 1;
  if (threads != current) {
    openblas_set_num_threads(threads);
    current = threads;
  }
}

namespace {

// BLAS may leave C untouched when K = 0, and some builds reject empty M or N.
template <typename T>
void gemmThroughBlas(bool transA, bool transB, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                     const T* b, int64_t ldb, T* c) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    std::fill(c, c + m * n, T(0));
    return;
  }
  auto opA = transA ? CblasTrans : CblasNoTrans, opB = transB ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, opA, opB, blasint(m), blasint(n), blasint(k), 1.0f, a, blasint(lda), b,
                blasint(ldb), 0.0f, c, blasint(n));
  else
    cblas_dgemm(CblasRowMajor, opA, opB, blasint(m), blasint(n), blasint(k), 1.0, a, blasint(lda), b,
                blasint(ldb), 0.0, c, blasint(n));
}

} // namespace

void blasGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
              const float* b, int64_t ldb, float* c) {
  gemmThroughBlas(transA, transB, m, n, k, a, lda, b, ldb, c);
}

void blasGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
              const double* b, int64_t ldb, double* c) {
  gemmThroughBlas(transA, transB, m, n, k, a, lda, b, ldb, c);
}

namespace {


/// The operand as a contiguous T array: the buffer itself when it already
/// holds T, otherwise a widened copy in `scratch`.
template <typename T>
const T* operandAs(const BufferView& view, std::vector<T>& scratch) {
  if ((std::is_same_v<T, float> && view.dtype == DType::F32) ||
      (std::is_same_v<T, double> && view.dtype == DType::F64))
    return view.as<const T>();
  scratch = loadAll<T>(view);
  return scratch.data();
}

template <typename T>
Status gemm(const Step& step, const StepIO& io) {
  const GemmParams& params = step.as<GemmParams>();
  const BufferView &aView = io.in[0], &bView = io.in[1], &cView = io.out[0];
  const Shape &aShape = aView.dims(), &bShape = bView.dims(), &cShape = cView.dims();
  size_t rank = cShape.size();
  int64_t m = cShape[rank - 2], n = cShape[rank - 1];
  int64_t aRows = aShape[aShape.size() - 2], aCols = aShape[aShape.size() - 1];
  int64_t bRows = bShape[bShape.size() - 2], bCols = bShape[bShape.size() - 1];
  int64_t k = params.transposeA ? aRows : aCols;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || aCols > INT32_MAX || bCols > INT32_MAX)
    return Status::error("matrix dimensions exceed what BLAS can index (2^31 - 1)");

  Shape resultBatch(cShape.begin(), cShape.end() - 2);
  std::vector<int64_t> aOffsets = broadcastOffsets(Shape(aShape.begin(), aShape.end() - 2), resultBatch);
  std::vector<int64_t> bOffsets = broadcastOffsets(Shape(bShape.begin(), bShape.end() - 2), resultBatch);

  std::vector<T> aScratch, bScratch, cScratch;
  const T* a = operandAs<T>(aView, aScratch);
  const T* b = operandAs<T>(bView, bScratch);
  bool writeDirectly = (std::is_same_v<T, float> && cView.dtype == DType::F32) ||
                       (std::is_same_v<T, double> && cView.dtype == DType::F64);
  if (!writeDirectly)
    cScratch.resize(size_t(m * n));

  int64_t aMatrix = aRows * aCols, bMatrix = bRows * bCols, cMatrix = m * n;
  // Every epilogue works on the accumulated product in T, before C's one
  // rounding (Plan.h, GemmEpilogue). The epilogues that need more than a bias
  // are unbatched (the verifier checks it), so their extra buffers are one matrix.
  GemmEpilogue epilogue = params.epilogue;
  std::vector<T> bias, geluInput, geluInputOut, biasGrad;
  if (gemmEpilogueHasBias(epilogue))
    bias = loadAll<T>(io.in[2]);
  if (gemmEpilogueReadsGeluInput(epilogue))
    geluInput = loadAll<T>(io.in[2]);
  if (gemmEpilogueWritesGeluInput(epilogue))
    geluInputOut.resize(size_t(cMatrix));
  if (epilogue == GemmEpilogue::DGeluBiasGrad)
    biasGrad.assign(size_t(n), T(0));
  if (epilogue == GemmEpilogue::BiasGradA) {
    // bias_grad[r] = sum over k of op(A)[r, k], k in increasing order: the
    // order a Reduction step sums A's rows (transposed) or columns in.
    biasGrad.assign(size_t(m), T(0));
    for (int64_t row = 0; row < m; ++row)
      for (int64_t inner = 0; inner < k; ++inner)
        biasGrad[size_t(row)] += params.transposeA ? a[inner * aCols + row] : a[row * aCols + inner];
  }
  auto applyEpilogue = [&](T* c) {
    for (int64_t row = 0; row < m; ++row)
      for (int64_t column = 0; column < n; ++column) {
        T& value = c[row * n + column];
        switch (epilogue) {
        case GemmEpilogue::None:
        case GemmEpilogue::BiasGradA: break;
        case GemmEpilogue::Bias: value += bias[size_t(column)]; break;
        case GemmEpilogue::BiasRelu:
          value += bias[size_t(column)];
          // relu as the elementwise kernel computes it: NaN propagates.
          value = value < T(0) ? T(0) : value;
          break;
        case GemmEpilogue::BiasGelu:
        case GemmEpilogue::BiasGeluAux:
          value += bias[size_t(column)];
          if (!geluInputOut.empty())
            geluInputOut[size_t(row * n + column)] = value;
          value = geluTanh(value);
          break;
        case GemmEpilogue::DGelu:
        case GemmEpilogue::DGeluBiasGrad:
          value = geluTanhGrad(value, geluInput[size_t(row * n + column)]);
          // Rows in increasing order, as a Reduction over axis 0 sums them.
          if (!biasGrad.empty())
            biasGrad[size_t(column)] += value;
          break;
        }
      }
  };
  for (size_t batch = 0; batch < aOffsets.size(); ++batch) {
    T* c = writeDirectly ? cView.as<T>() + int64_t(batch) * cMatrix : cScratch.data();
    if (cMatrix == 0)
      continue;
    blasGemm(params.transposeA, params.transposeB, m, n, k, a + aOffsets[batch] * aMatrix, aCols,
             b + bOffsets[batch] * bMatrix, bCols, c);
    if (epilogue != GemmEpilogue::None && epilogue != GemmEpilogue::BiasGradA)
      applyEpilogue(c);
    if (!writeDirectly)
      storeRange<T>(cView, int64_t(batch) * cMatrix, cMatrix, c);
  }
  if (!geluInputOut.empty())
    storeRange<T>(io.out[1], 0, cMatrix, geluInputOut.data());
  if (gemmEpilogueWritesBiasGrad(epilogue))
    storeRange<T>(io.out[1], 0, int64_t(biasGrad.size()), biasGrad.data());
  return Status::success();
}

} // namespace

Status runGemm(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return gemm<decltype(zero)>(step, io); });
}

} // namespace ampjit::runtime::cpu
