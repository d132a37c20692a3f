// Eager results in f32, f16 and bf16 against a double reference computed
// from the rounded inputs, within DESIGN's tolerances per dtype (one
// rounding of the result, plus f32 arithmetic inside the kernels).

#include "FrontendTestUtil.h"

#include <cmath>
#include <numbers>

using namespace jit;
using jit::testing::expectClose;
using jit::testing::Tolerance;
using jit::testing::toleranceFor;

namespace {

const DType kDTypes[] = {f32, f16, bf16};

std::string nameOf(DType dtype) { return std::string(dtype_name(dtype)); }

Tensor sample(Shape shape, double low, double high, uint64_t seed) {
  Generator generator(seed);
  return rand(std::move(shape), f64, &generator) * (high - low) + low;
}

using Reference = std::function<double(double)>;

void checkUnary(const char* name, Tensor (*op)(const Tensor&), Reference reference, double low, double high) {
  for (DType dtype : kDTypes) {
    Tensor x = sample({7, 9}, low, high, 5).to(dtype);
    std::vector<double> expected;
    for (double v : x.to_vector()) // the rounded inputs
      expected.push_back(reference(v));
    Tensor y = op(x);
    EXPECT_EQ(y.dtype(), dtype);
    expectClose(y.to_vector(), expected, toleranceFor(dtype), std::string(name) + " " + nameOf(dtype));
  }
}

double geluExact(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }
double geluTanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

} // namespace

TEST(EagerNumerics, Unary) {
  checkUnary("neg", [](const Tensor& x) { return -x; }, [](double v) { return -v; }, -3, 3);
  checkUnary("relu", relu, [](double v) { return v > 0 ? v : 0.0; }, -3, 3);
  checkUnary("tanh", tanh, [](double v) { return std::tanh(v); }, -3, 3);
  checkUnary("sigmoid", sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }, -4, 4);
  checkUnary("exp", exp, [](double v) { return std::exp(v); }, -3, 3);
  checkUnary("log", log, [](double v) { return std::log(v); }, 0.1, 5);
  checkUnary("sqrt", sqrt, [](double v) { return std::sqrt(v); }, 0.1, 5);
  checkUnary("rsqrt", rsqrt, [](double v) { return 1 / std::sqrt(v); }, 0.1, 5);
  checkUnary("gelu", [](const Tensor& x) { return gelu(x); }, geluExact, -3, 3);
  checkUnary("gelu tanh", [](const Tensor& x) { return gelu(x, GeluApproximate::tanh); }, geluTanh, -3, 3);
  checkUnary("pow", [](const Tensor& x) { return pow(x, 1.5); }, [](double v) { return std::pow(v, 1.5); }, 0.1, 3);
}

TEST(EagerNumerics, BinaryBroadcastCompareSelect) {
  for (DType dtype : kDTypes) {
    Tensor a = sample({4, 3}, -2, 2, 1).to(dtype);
    Tensor b = sample({3}, 0.5, 2, 2).to(dtype);
    std::vector<double> av = a.to_vector(), bv = b.to_vector();
    std::vector<double> sum, difference, product, quotient, greater, chosen;
    for (size_t i = 0; i < av.size(); ++i) {
      double x = av[i], y = bv[i % 3];
      sum.push_back(x + y);
      difference.push_back(x - y);
      product.push_back(x * y);
      quotient.push_back(x / y);
      greater.push_back(x > y ? 1 : 0);
      chosen.push_back(x > y ? x : y);
    }
    std::string what = nameOf(dtype);
    expectClose((a + b).to_vector(), sum, toleranceFor(dtype), "add " + what);
    expectClose((a - b).to_vector(), difference, toleranceFor(dtype), "sub " + what);
    expectClose((a * b).to_vector(), product, toleranceFor(dtype), "mul " + what);
    expectClose((a / b).to_vector(), quotient, toleranceFor(dtype), "div " + what);
    EXPECT_EQ((a > b).to_vector(), greater) << what;
    EXPECT_EQ(where(a > b, a, b).to_vector(), chosen) << what;
    EXPECT_EQ((a + b).shape(), (Shape{4, 3}));
  }
}

TEST(EagerNumerics, MatmulReductionsSoftmaxLayerNormLosses) {
  for (DType dtype : kDTypes) {
    std::string what = nameOf(dtype);
    Tolerance tolerance = toleranceFor(dtype);
    Tensor a = sample({3, 8}, -1, 1, 3).to(dtype), b = sample({5, 8}, -1, 1, 4).to(dtype);
    std::vector<double> av = a.to_vector(), bv = b.to_vector();

    std::vector<double> product(15, 0.0);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j)
        for (int k = 0; k < 8; ++k)
          product[size_t(i * 5 + j)] += av[size_t(i * 8 + k)] * bv[size_t(j * 8 + k)];
    expectClose(matmul(a, b, {.transpose_rhs = true}).to_vector(), product, tolerance, "matmul " + what);

    std::vector<double> rowSum(3, 0.0), rowMax(3, -INFINITY);
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 8; ++k) {
        rowSum[size_t(i)] += av[size_t(i * 8 + k)];
        rowMax[size_t(i)] = std::max(rowMax[size_t(i)], av[size_t(i * 8 + k)]);
      }
    expectClose(sum(a, {1}).to_vector(), rowSum, tolerance, "sum " + what);
    std::vector<double> rowMean = rowSum;
    for (double& v : rowMean)
      v /= 8;
    expectClose(mean(a, {1}).to_vector(), rowMean, tolerance, "mean " + what);
    EXPECT_EQ(max(a, {-1}).to_vector(), rowMax) << what;

    std::vector<double> soft(av.size()), logSoft(av.size()), normed(av.size());
    for (int i = 0; i < 3; ++i) {
      double total = 0, mu = rowMean[size_t(i)], variance = 0;
      for (int k = 0; k < 8; ++k) {
        total += std::exp(av[size_t(i * 8 + k)] - rowMax[size_t(i)]);
        variance += std::pow(av[size_t(i * 8 + k)] - mu, 2) / 8;
      }
      for (int k = 0; k < 8; ++k) {
        size_t e = size_t(i * 8 + k);
        soft[e] = std::exp(av[e] - rowMax[size_t(i)]) / total;
        logSoft[e] = av[e] - rowMax[size_t(i)] - std::log(total);
        normed[e] = (av[e] - mu) / std::sqrt(variance + 1e-5);
      }
    }
    expectClose(softmax(a, 1).to_vector(), soft, tolerance, "softmax " + what);
    expectClose(log_softmax(a, 1).to_vector(), logSoft, tolerance, "log_softmax " + what);
    expectClose(layer_norm(a, {8}).to_vector(), normed, tolerance, "layer_norm " + what);

    const int64_t classes[] = {2, 7, 0};
    Tensor y = tensor(std::span<const int64_t>(classes), {3});
    Tensor target = sample({3, 8}, -1, 1, 6).to(dtype);
    std::vector<double> tv = target.to_vector();
    double ce = 0, nll = 0, mse = 0;
    for (int i = 0; i < 3; ++i) {
      ce -= logSoft[size_t(i * 8 + classes[i])] / 3;
      nll -= av[size_t(i * 8 + classes[i])] / 3;
    }
    for (size_t e = 0; e < av.size(); ++e)
      mse += std::pow(av[e] - tv[e], 2) / double(av.size());
    expectClose({cross_entropy(a, y).item()}, {ce}, tolerance, "cross_entropy " + what);
    expectClose({nll_loss(a, y).item()}, {nll}, tolerance, "nll_loss " + what);
    expectClose({mse_loss(a, target).item()}, {mse}, tolerance, "mse_loss " + what);
  }
}
