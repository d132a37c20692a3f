#ifndef AMPJIT_RUNTIME_LIB_CPU_CPUKERNELS_H
#define AMPJIT_RUNTIME_LIB_CPU_CPUKERNELS_H

// The CPU backend's reference kernels: one entry point per step kind, and
// the widening loads and rounding stores every kernel uses, so that "compute
// in f32 (f64 for f64 data), round once when storing" is written once.

#include "ampjit/runtime/LowPrecision.h"
#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/Status.h"
#include "ampjit/runtime/Tensor.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <span>
#include <vector>

namespace ampjit::runtime::cpu {

/// One slot's buffer as a kernel sees it. `present` is false for an absent
/// optional slot.
struct BufferView {
  bool present = false;
  DType dtype = DType::F32;
  const Shape* shape = nullptr;
  std::byte* data = nullptr;
  int64_t count = 0;

  const Shape& dims() const { return *shape; }
  template <typename T> T* as() const { return reinterpret_cast<T*>(data); }
};

/// A step's slots, in the kind's order.
struct StepIO {
  std::span<const BufferView> in;
  std::span<const BufferView> out;
};

/// Runs one verified step.
Status runStep(const Step& step, const StepIO& io);

// Entry points, one per group of kinds (each in its own file).
Status runElementwise(const Step& step, const StepIO& io);
Status runFusedElementwise(const Step& step, const StepIO& io);
Status runGemm(const Step& step, const StepIO& io);
Status runReduction(const Step& step, const StepIO& io);
Status runSoftmaxFamily(const Step& step, const StepIO& io);
Status runLayerNorm(const Step& step, const StepIO& io);
Status runLayerNormGrad(const Step& step, const StepIO& io);
Status runDropout(const Step& step, const StepIO& io);
Status runLoss(const Step& step, const StepIO& io);
Status runLossGrad(const Step& step, const StepIO& io);
Status runLayout(const Step& step, const StepIO& io);
Status runConstant(const Step& step, const StepIO& io);
Status runOptimizerUpdate(const Step& step, const StepIO& io);
Status runScaler(const Step& step, const StepIO& io);
Status runConv2d(const Step& step, const StepIO& io);          // Convolution.cpp
Status runConv2dGradInput(const Step& step, const StepIO& io); // Convolution.cpp
Status runConv2dGradWeight(const Step& step, const StepIO& io);// Convolution.cpp
Status runBatchNorm(const Step& step, const StepIO& io);       // BatchNorm.cpp (both modes)
Status runBatchNormGrad(const Step& step, const StepIO& io);   // BatchNorm.cpp
Status runPool2d(const Step& step, const StepIO& io);          // Pooling.cpp (max and avg)
Status runPool2dGrad(const Step& step, const StepIO& io);      // Pooling.cpp
Status runEmbedding(const Step& step, const StepIO& io);       // Embedding.cpp
Status runEmbeddingGrad(const Step& step, const StepIO& io);   // Embedding.cpp

/// C[m, n] = op(A) @ op(B), row-major with leading dimensions lda/ldb, beta 0,
/// through OpenBLAS (Gemm.cpp); C is zeros when k = 0. Shared by the GEMM and
/// convolution kernels.
void blasGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
              const float* b, int64_t ldb, float* c);
void blasGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
              const double* b, int64_t ldb, double* c);

/// Sets the thread count OpenBLAS uses (once per process; see Gemm.cpp).
void setBlasThreads(int threads);

// GELU's tanh approximation and its gradient, shared by the elementwise ops
// (GeluTanh, GeluTanhGrad) and the GEMM epilogues, so a fused epilogue
// computes exactly what the unfused steps compute. PyTorch's constants:
// sqrt(2 / pi) and 0.044715.
template <typename T> inline constexpr T kGeluBeta = T(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
template <typename T> inline constexpr T kGeluKappa = T(0.044715);

template <typename T> T geluTanh(T x) {
  T inner = kGeluBeta<T> * (x + kGeluKappa<T> * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(inner));
}

// As PyTorch's GeluBackward with approximate='tanh'.
template <typename T> T geluTanhGrad(T dy, T x) {
  T xSquared = x * x;
  T inner = kGeluBeta<T> * (x + kGeluKappa<T> * xSquared * x);
  T tanhInner = std::tanh(inner);
  T left = T(0.5) * x;
  T right = T(1) + tanhInner;
  T leftDerivative = T(0.5) * right;
  T tanhDerivative = T(1) - tanhInner * tanhInner;
  T innerDerivative = kGeluBeta<T> * (T(1) + T(3) * kGeluKappa<T> * xSquared);
  T rightDerivative = left * tanhDerivative * innerDerivative;
  return dy * (leftDerivative + rightDerivative);
}

//===----------------------------------------------------------------------===//
// Widening loads and rounding stores
//===----------------------------------------------------------------------===//

/// Element i of `view` in compute type T (float or double). Exact for every
/// floating dtype that T can hold (f16/bf16/f32 in float, all in double).
template <typename T>
inline T loadAs(const BufferView& view, int64_t i) {
  switch (view.dtype) {
  case DType::F32: return T(view.as<const float>()[i]);
  case DType::F64: return T(view.as<const double>()[i]);
  case DType::F16: return T(halfToFloat(view.as<const uint16_t>()[i]));
  case DType::BF16: return T(bfloat16ToFloat(view.as<const uint16_t>()[i]));
  case DType::I64: return T(view.as<const int64_t>()[i]);
  case DType::I1: return view.as<const uint8_t>()[i] ? T(1) : T(0);
  }
  return T(0);
}

/// Stores `value` to element i, rounding once to nearest even.
template <typename T>
inline void storeAs(const BufferView& view, int64_t i, T value) {
  switch (view.dtype) {
  case DType::F32: view.as<float>()[i] = float(value); return;
  case DType::F64: view.as<double>()[i] = double(value); return;
  case DType::F16:
    if constexpr (std::is_same_v<T, float>)
      view.as<uint16_t>()[i] = floatToHalf(value);
    else
      view.as<uint16_t>()[i] = doubleToHalf(double(value));
    return;
  case DType::BF16:
    if constexpr (std::is_same_v<T, float>)
      view.as<uint16_t>()[i] = floatToBFloat16(value);
    else
      view.as<uint16_t>()[i] = doubleToBFloat16(double(value));
    return;
  case DType::I64: view.as<int64_t>()[i] = truncateToInt64(double(value)); return;
  case DType::I1: view.as<uint8_t>()[i] = value != T(0) ? 1 : 0; return;
  }
}

/// Elements [begin, begin + n) of `view` into `out`, widened to T.
template <typename T>
inline void loadRange(const BufferView& view, int64_t begin, int64_t n, T* out) {
  // An empty buffer's data and `out` may be null, which memcpy may not take
  // even for no bytes.
  if (n <= 0)
    return;
  if constexpr (std::is_same_v<T, float>) {
    if (view.dtype == DType::F32) {
      std::memcpy(out, view.as<const float>() + begin, size_t(n) * sizeof(float));
      return;
    }
    if (view.dtype == DType::F16)
      return widenHalf(view.as<const uint16_t>() + begin, out, size_t(n));
    if (view.dtype == DType::BF16)
      return widenBFloat16(view.as<const uint16_t>() + begin, out, size_t(n));
  }
  if constexpr (std::is_same_v<T, double>) {
    if (view.dtype == DType::F64) {
      std::memcpy(out, view.as<const double>() + begin, size_t(n) * sizeof(double));
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i)
    out[i] = loadAs<T>(view, begin + i);
}

/// `in[0..n)` into elements [begin, begin + n) of `view`, rounded once.
template <typename T>
inline void storeRange(const BufferView& view, int64_t begin, int64_t n, const T* in) {
  if (n <= 0) // as loadRange
    return;
  if constexpr (std::is_same_v<T, float>) {
    if (view.dtype == DType::F32) {
      std::memmove(view.as<float>() + begin, in, size_t(n) * sizeof(float));
      return;
    }
    if (view.dtype == DType::F16)
      return narrowToHalf(in, view.as<uint16_t>() + begin, size_t(n));
    if (view.dtype == DType::BF16)
      return narrowToBFloat16(in, view.as<uint16_t>() + begin, size_t(n));
  }
  if constexpr (std::is_same_v<T, double>) {
    if (view.dtype == DType::F64) {
      std::memmove(view.as<double>() + begin, in, size_t(n) * sizeof(double));
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i)
    storeAs<T>(view, begin + i, in[i]);
}

/// The whole buffer widened to T.
template <typename T>
inline std::vector<T> loadAll(const BufferView& view) {
  std::vector<T> values(size_t(view.count));
  loadRange<T>(view, 0, view.count, values.data());
  return values;
}

/// Whether every floating element of `view` is finite (integer dtypes:
/// always).
bool allFinite(const BufferView& view);

/// Calls f(T) with T = float or double per the step's compute type.
template <typename F>
inline decltype(auto) withComputeType(DType computeType, F&& f) {
  if (computeType == DType::F64)
    return f(double{});
  return f(float{});
}

} // namespace ampjit::runtime::cpu

#endif // AMPJIT_RUNTIME_LIB_CPU_CPUKERNELS_H
