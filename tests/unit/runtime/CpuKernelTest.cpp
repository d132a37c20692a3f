// Every CPU kernel against a double-precision reference computed from the
// already-rounded inputs, within DESIGN's tolerances for the result dtype
// (accumulating kernels get a bound that grows with the accumulation length),
// and the gradient kernels against finite differences of their forward ops
// in f64.

#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/Philox.h"

#include "RuntimeTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>

namespace {

using namespace ampjit::runtime;
using namespace ampjit::runtime::test;

std::string name(DType dtype) { return std::string(dtypeName(dtype)); }

constexpr double kEps32 = 0x1p-24; // unit roundoff of f32 accumulation

double geluReference(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }
double geluTanhReference(double x) {
  double k = std::sqrt(2 / std::numbers::pi);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

struct UnaryCase {
  std::string op;
  AttributeMap attributes;
  std::function<double(double)> reference;
  double low, high;
};

TEST(CpuElementwise, UnaryOpsMatchTheReferenceInEveryDtype) {
  std::vector<UnaryCase> cases = {
      {"jit.neg", {}, [](double x) { return -x; }, -4, 4},
      {"jit.relu", {}, [](double x) { return x < 0 ? 0 : x; }, -4, 4},
      {"jit.tanh", {}, [](double x) { return std::tanh(x); }, -4, 4},
      {"jit.sigmoid", {}, [](double x) { return 1 / (1 + std::exp(-x)); }, -6, 6},
      {"jit.exp", {}, [](double x) { return std::exp(x); }, -4, 4},
      {"jit.log", {}, [](double x) { return std::log(x); }, 0.01, 50},
      {"jit.sqrt", {}, [](double x) { return std::sqrt(x); }, 0, 50},
      {"jit.rsqrt", {}, [](double x) { return 1 / std::sqrt(x); }, 0.01, 50},
      {"jit.gelu", {}, geluReference, -4, 4},
      {"jit.gelu", {{"approximate", std::string("tanh")}}, geluTanhReference, -4, 4},
      {"jit.pow", {{"exponent", 2.0}}, [](double x) { return x * x; }, -4, 4},
      {"jit.pow", {{"exponent", 0.5}}, [](double x) { return std::sqrt(x); }, 0, 9},
  };
  std::mt19937_64 rng(1);
  for (const UnaryCase& c : cases) {
    for (DType dtype : kFloatTypes) {
      Tensor x = randomTensor(dtype, {3, 37}, rng, c.low, c.high);
      std::vector<Tensor> y = runOp(c.op, {&x}, {x.type()}, c.attributes);
      ASSERT_EQ(y.size(), 1u);
      std::vector<double> expected;
      for (double v : x.toDoubles())
        expected.push_back(c.reference(v));
      EXPECT_TRUE(allClose(y[0], expected, toleranceFor(dtype))) << c.op << " " << name(dtype);
    }
  }
}

TEST(CpuElementwise, BinaryOpsBroadcastLikeNumpy) {
  using Reference = double (*)(double, double);
  std::vector<std::pair<std::string, Reference>> cases = {
      {"jit.add", [](double a, double b) { return a + b; }},
      {"jit.sub", [](double a, double b) { return a - b; }},
      {"jit.mul", [](double a, double b) { return a * b; }},
      {"jit.div", [](double a, double b) { return a / b; }},
  };
  std::mt19937_64 rng(2);
  for (auto& [op, reference] : cases) {
    for (DType dtype : kFloatTypes) {
      Tensor a = randomTensor(dtype, {3, 1, 5}, rng, -2, 2);
      Tensor b = randomTensor(dtype, {4, 1}, rng, 0.5, 2);
      std::vector<Tensor> y = runOp(op, {&a, &b}, {tt(dtype, {3, 4, 5})});
      std::vector<double> expected;
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j)
          for (int64_t k = 0; k < 5; ++k)
            expected.push_back(reference(a.at(i * 5 + k), b.at(j)));
      EXPECT_TRUE(allClose(y[0], expected, toleranceFor(dtype))) << op << " " << name(dtype);
    }
  }
}

TEST(CpuElementwise, F16ArithmeticRoundsOnceFromF32) {
  // 1 + 2^-11 is a tie between f16 neighbours 1 and 1 + 2^-10: nearest even is 1.
  Tensor one = filled(DType::F16, {2}, {1.0, 1.0});
  Tensor tiny = filled(DType::F16, {2}, {0x1p-11, 0x1p-11 + 0x1p-21});
  std::vector<Tensor> sum = runOp("jit.add", {&one, &tiny}, {tt(DType::F16, {2})});
  EXPECT_EQ(sum[0].at(0), 1.0);
  EXPECT_EQ(sum[0].at(1), 1.0 + 0x1p-10);
  // Overflow to inf and the largest finite value.
  Tensor big = filled(DType::F16, {2}, {65504, 32768});
  Tensor two = filled(DType::F16, {2}, {1, 2});
  std::vector<Tensor> product = runOp("jit.mul", {&big, &two}, {tt(DType::F16, {2})});
  EXPECT_EQ(product[0].at(0), 65504);
  EXPECT_TRUE(std::isinf(product[0].at(1)));
}

TEST(CpuElementwise, GradientsOfActivations) {
  std::mt19937_64 rng(3);
  for (DType dtype : kFloatTypes) {
    Tensor dy = randomTensor(dtype, {64}, rng, -2, 2);
    Tensor x = randomTensor(dtype, {64}, rng, -3, 3);
    std::vector<double> reluExpected, geluExpected, geluTanhExpected;
    for (int64_t i = 0; i < 64; ++i) {
      double g = dy.at(i), v = x.at(i);
      reluExpected.push_back(v > 0 ? g : 0);
      double pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * std::numbers::pi);
      geluExpected.push_back(g * (0.5 * (1 + std::erf(v / std::numbers::sqrt2)) + v * pdf));
      double k = std::sqrt(2 / std::numbers::pi), inner = k * (v + 0.044715 * v * v * v);
      double t = std::tanh(inner);
      geluTanhExpected.push_back(g * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v)));
    }
    EXPECT_TRUE(allClose(runOp("jit.relu_grad", {&dy, &x}, {dy.type()})[0], reluExpected, toleranceFor(dtype)));
    EXPECT_TRUE(allClose(runOp("jit.gelu_grad", {&dy, &x}, {dy.type()})[0], geluExpected, toleranceFor(dtype)))
        << name(dtype);
    EXPECT_TRUE(allClose(runOp("jit.gelu_grad", {&dy, &x}, {dy.type()}, {{"approximate", std::string("tanh")}})[0],
                         geluTanhExpected, toleranceFor(dtype)))
        << name(dtype);
  }
}

TEST(CpuElementwise, CompareSelectAndConvert) {
  Tensor a = filled(DType::F32, {5}, {1, 2, 3, NAN, -1});
  Tensor b = filled(DType::F32, {}, {2});
  const std::vector<std::pair<std::string, std::vector<double>>> predicates = {
      {"eq", {0, 1, 0, 0, 0}}, {"ne", {1, 0, 1, 1, 1}}, {"lt", {1, 0, 0, 0, 1}},
      {"le", {1, 1, 0, 0, 1}}, {"gt", {0, 0, 1, 0, 0}}, {"ge", {0, 1, 1, 0, 0}}};
  for (auto& [predicate, expected] : predicates) {
    std::vector<Tensor> mask = runOp("jit.compare", {&a, &b}, {tt(DType::I1, {5})}, {{"predicate", predicate}});
    EXPECT_EQ(mask[0].toDoubles(), expected) << predicate;
  }
  Tensor labels = filled(DType::I64, {3}, {4, -100, 7});
  Tensor ignore = filled(DType::I64, {}, {-100});
  EXPECT_EQ(runOp("jit.compare", {&labels, &ignore}, {tt(DType::I1, {3})}, {{"predicate", std::string("ne")}})[0]
                .toDoubles(),
            (std::vector<double>{1, 0, 1}));

  Tensor condition = filled(DType::I1, {2, 1}, {1, 0});
  Tensor x = filled(DType::BF16, {3}, {1, 2, 3});
  Tensor zero = filled(DType::BF16, {}, {0});
  EXPECT_EQ(runOp("jit.select", {&condition, &x, &zero}, {tt(DType::BF16, {2, 3})})[0].toDoubles(),
            (std::vector<double>{1, 2, 3, 0, 0, 0}));

  // Float to float rounds to nearest even; to i64 truncates toward zero
  // (saturating, NaN to 0); to i1 tests for non-zero.
  Tensor values = filled(DType::F32, {6}, {1 + 0x1p-11, 2.5, -2.7, 70000, NAN, 0});
  EXPECT_EQ(runOp("jit.convert", {&values}, {tt(DType::F16, {6})})[0].bits16()[0], 0x3C00);
  std::vector<double> asInt = runOp("jit.convert", {&values}, {tt(DType::I64, {6})})[0].toDoubles();
  EXPECT_EQ(asInt, (std::vector<double>{1, 2, -2, 70000, 0, 0}));
  std::vector<double> asBool = runOp("jit.convert", {&values}, {tt(DType::I1, {6})})[0].toDoubles();
  EXPECT_EQ(asBool, (std::vector<double>{1, 1, 1, 1, 1, 0}));
  Tensor flags = filled(DType::I1, {2}, {1, 0});
  EXPECT_EQ(runOp("jit.convert", {&flags}, {tt(DType::F16, {2})})[0].toDoubles(), (std::vector<double>{1, 0}));
  Tensor big = filled(DType::I64, {2}, {65519, 65520});
  std::vector<double> halves = runOp("jit.convert", {&big}, {tt(DType::F16, {2})})[0].toDoubles();
  EXPECT_EQ(halves[0], 65504);
  EXPECT_TRUE(std::isinf(halves[1]));
  // f64 -> f16 rounds once: this value is just above a tie in f64 but lands on
  // the tie (and would round down to even) if it went through f32 first.
  Tensor precise = filled(DType::F64, {1}, {1 + 0x1p-11 + 0x1p-40});
  EXPECT_EQ(runOp("amp.cast", {&precise}, {tt(DType::F16, {1})})[0].bits16()[0], 0x3C01);
}

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

struct GemmCase {
  Shape a, b;
  bool transposeA, transposeB;
  Shape c;
};

TEST(CpuGemm, MatchesTheReferenceWithBatchBroadcastAndTransposes) {
  std::vector<GemmCase> cases = {
      {{5, 7}, {7, 3}, false, false, {5, 3}},
      {{7, 5}, {7, 3}, true, false, {5, 3}},
      {{5, 7}, {3, 7}, false, true, {5, 3}},
      {{7, 5}, {3, 7}, true, true, {5, 3}},
      {{2, 1, 4, 96}, {3, 96, 6}, false, false, {2, 3, 4, 6}},
      {{4, 64}, {2, 6, 64}, false, true, {2, 4, 6}},
  };
  std::mt19937_64 rng(4);
  for (DType dtype : kFloatTypes) {
    for (const GemmCase& c : cases) {
      Tensor a = randomTensor(dtype, c.a, rng), b = randomTensor(dtype, c.b, rng);
      AttributeMap attributes;
      if (c.transposeA)
        attributes["transpose_lhs"] = true;
      if (c.transposeB)
        attributes["transpose_rhs"] = true;
      std::vector<Tensor> out = runOp("jit.matmul", {&a, &b}, {tt(dtype, c.c)}, attributes);
      ASSERT_EQ(out.size(), 1u);
      // Reference: double dot products of the rounded operands, with a bound
      // for f32 accumulation over K that grows with sum |a_i b_i|.
      size_t rank = c.c.size();
      int64_t m = c.c[rank - 2], n = c.c[rank - 1];
      int64_t k = c.transposeA ? c.a[c.a.size() - 2] : c.a.back();
      Shape batch(c.c.begin(), c.c.end() - 2);
      std::vector<int64_t> aStrides = broadcastStrides(Shape(c.a.begin(), c.a.end() - 2), batch);
      std::vector<int64_t> bStrides = broadcastStrides(Shape(c.b.begin(), c.b.end() - 2), batch);
      int64_t batches = elementCount(batch);
      std::vector<double> expected, bound;
      for (int64_t bi = 0; bi < batches; ++bi) {
        int64_t rest = bi, aBase = 0, bBase = 0;
        for (size_t d = batch.size(); d-- > 0;) {
          int64_t index = rest % batch[d];
          rest /= batch[d];
          aBase += index * aStrides[d];
          bBase += index * bStrides[d];
        }
        aBase *= c.a[c.a.size() - 2] * c.a.back();
        bBase *= c.b[c.b.size() - 2] * c.b.back();
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double sum = 0, magnitude = 0;
            for (int64_t p = 0; p < k; ++p) {
              double av = a.at(aBase + (c.transposeA ? p * m + i : i * k + p));
              double bv = b.at(bBase + (c.transposeB ? j * k + p : p * n + j));
              sum += av * bv;
              magnitude += std::abs(av * bv);
            }
            expected.push_back(sum);
            bound.push_back(dtype == DType::F64 ? double(k) * 0x1p-52 * magnitude
                                                : 2.0 * double(k) * kEps32 * magnitude);
          }
      }
      EXPECT_TRUE(allClose(out[0], expected, toleranceFor(dtype), bound))
          << name(dtype) << " " << shapeToString(c.a) << " x " << shapeToString(c.b);
    }
  }
}

TEST(CpuGemm, LowPrecisionProductsAccumulateInF32) {
  // 2048 products of 1 * 2^-12 sum to 0.5 in f32; an f16 accumulator would
  // stall at 0.125 + ... (its spacing near 0.25 exceeds 2^-12 / 2).
  Tensor a = filled(DType::F16, {1, 2048}, {1.0});
  Tensor b = filled(DType::F16, {2048, 1}, {0x1p-12});
  EXPECT_EQ(runOp("jit.matmul", {&a, &b}, {tt(DType::F16, {1, 1})})[0].at(0), 0.5);
}

//===----------------------------------------------------------------------===//
// Reductions, softmax, layer norm
//===----------------------------------------------------------------------===//

TEST(CpuReduction, SumMeanMaxOverAxes) {
  struct Case {
    std::vector<int64_t> axes;
    bool keepdim;
    Shape out;
  };
  std::vector<Case> cases = {{{1}, false, {3, 5}}, {{1}, true, {3, 1, 5}}, {{0, 1}, false, {5}},
                             {{0, 2}, false, {4}}, {{0, 1, 2}, false, {}}, {{2}, true, {3, 4, 1}}};
  std::mt19937_64 rng(5);
  Shape shape = {3, 4, 5};
  for (DType dtype : kFloatTypes) {
    Tensor x = randomTensor(dtype, shape, rng, -2, 2);
    for (const Case& c : cases) {
      for (std::string op : {"jit.sum", "jit.mean", "jit.max"}) {
        std::vector<Tensor> y = runOp(op, {&x}, {tt(dtype, c.out)}, {{"axes", c.axes}, {"keepdim", c.keepdim}});
        std::vector<double> expected, bound;
        // Enumerate output elements: kept dims row-major; reduce over the rest.
        std::vector<int64_t> keptDims;
        for (int64_t d = 0; d < 3; ++d)
          if (std::find(c.axes.begin(), c.axes.end(), d) == c.axes.end())
            keptDims.push_back(d);
        int64_t outputs = 1;
        for (int64_t d : keptDims)
          outputs *= shape[size_t(d)];
        for (int64_t o = 0; o < outputs; ++o) {
          std::vector<int64_t> fixed(3, -1);
          int64_t rest = o;
          for (size_t k = keptDims.size(); k-- > 0;) {
            fixed[size_t(keptDims[k])] = rest % shape[size_t(keptDims[k])];
            rest /= shape[size_t(keptDims[k])];
          }
          double sum = 0, magnitude = 0, max = -INFINITY;
          int64_t count = 0;
          for (int64_t i = 0; i < 3; ++i)
            for (int64_t j = 0; j < 4; ++j)
              for (int64_t k = 0; k < 5; ++k) {
                if ((fixed[0] >= 0 && fixed[0] != i) || (fixed[1] >= 0 && fixed[1] != j) ||
                    (fixed[2] >= 0 && fixed[2] != k))
                  continue;
                double v = x.at((i * 4 + j) * 5 + k);
                sum += v;
                magnitude += std::abs(v);
                max = std::max(max, v);
                ++count;
              }
          double value = op == "jit.sum" ? sum : op == "jit.mean" ? sum / double(count) : max;
          expected.push_back(value);
          bound.push_back(op == "jit.max" ? 0.0 : double(count) * kEps32 * magnitude);
        }
        EXPECT_TRUE(allClose(y[0], expected, toleranceFor(dtype), bound))
            << op << " " << name(dtype) << " axes " << c.axes.size();
      }
    }
  }
}

TEST(CpuReduction, MaxPropagatesNan) {
  Tensor x = filled(DType::F32, {2, 3}, {1, NAN, 3, 4, 5, 6});
  std::vector<double> y = runOp("jit.max", {&x}, {tt(DType::F32, {2})}, {{"axes", std::vector<int64_t>{1}}})[0]
                              .toDoubles();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 6);
}

/// Softmax along `axis` of a [2, 5, 3] tensor, in double.
std::vector<double> softmaxReference(const std::vector<double>& x, const Shape& shape, int64_t axis, bool log) {
  int64_t outer = 1, inner = 1, length = shape[size_t(axis)];
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < shape.size(); ++d)
    inner *= shape[d];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double max = -INFINITY, sum = 0;
      for (int64_t j = 0; j < length; ++j)
        max = std::max(max, x[size_t((o * length + j) * inner + i)]);
      for (int64_t j = 0; j < length; ++j)
        sum += std::exp(x[size_t((o * length + j) * inner + i)] - max);
      for (int64_t j = 0; j < length; ++j) {
        double v = x[size_t((o * length + j) * inner + i)];
        y[size_t((o * length + j) * inner + i)] = log ? v - max - std::log(sum) : std::exp(v - max) / sum;
      }
    }
  return y;
}

TEST(CpuSoftmax, ForwardAndBackwardAlongAnyAxis) {
  std::mt19937_64 rng(6);
  Shape shape = {2, 5, 3};
  for (DType dtype : kFloatTypes) {
    for (int64_t axis : {1, 2}) {
      Tensor x = randomTensor(dtype, shape, rng, -3, 3);
      Tensor dy = randomTensor(dtype, shape, rng, -1, 1);
      AttributeMap attributes = {{"axis", axis}};
      for (bool log : {false, true}) {
        std::vector<double> expected = softmaxReference(x.toDoubles(), shape, axis, log);
        Tensor y = runOp(log ? "jit.log_softmax" : "jit.softmax", {&x}, {x.type()}, attributes)[0];
        EXPECT_TRUE(allClose(y, expected, toleranceFor(dtype))) << name(dtype) << " log " << log;
        // Gradients from the rounded y, as the backward pass receives it.
        std::vector<double> yv = y.toDoubles(), dyv = dy.toDoubles(), dx(yv.size());
        int64_t length = shape[size_t(axis)], inner = axis == 1 ? 3 : 1, outer = axis == 1 ? 2 : 10;
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            double s = 0;
            for (int64_t j = 0; j < length; ++j) {
              size_t at = size_t((o * length + j) * inner + i);
              s += log ? dyv[at] : dyv[at] * yv[at];
            }
            for (int64_t j = 0; j < length; ++j) {
              size_t at = size_t((o * length + j) * inner + i);
              dx[at] = log ? dyv[at] - std::exp(yv[at]) * s : yv[at] * (dyv[at] - s);
            }
          }
        Tensor grad = runOp(log ? "jit.log_softmax_grad" : "jit.softmax_grad", {&dy, &y}, {x.type()}, attributes)[0];
        EXPECT_TRUE(allClose(grad, dx, toleranceFor(dtype), std::vector<double>(dx.size(), 8 * kEps32)))
            << name(dtype) << " grad log " << log;
      }
    }
  }
}

TEST(CpuLayerNorm, ForwardMatchesTheReferenceWithF32Statistics) {
  std::mt19937_64 rng(7);
  for (DType dtype : kFloatTypes) {
    DType statistics = dtype == DType::F64 ? DType::F64 : DType::F32;
    Tensor x = randomTensor(dtype, {3, 4, 8}, rng, -2, 3);
    Tensor weight = randomTensor(dtype, {4, 8}, rng, 0.5, 1.5);
    Tensor bias = randomTensor(dtype, {4, 8}, rng, -0.5, 0.5);
    for (bool affine : {false, true}) {
      std::vector<Tensor> out =
          runOp("jit.layer_norm", {&x, affine ? &weight : nullptr, affine ? &bias : nullptr},
                {x.type(), tt(statistics, {3}), tt(statistics, {3})}, {{"axis", int64_t(1)}, {"eps", 1e-5}});
      std::vector<double> y, means, rstds;
      for (int64_t r = 0; r < 3; ++r) {
        double mean = 0, variance = 0;
        for (int64_t c = 0; c < 32; ++c)
          mean += x.at(r * 32 + c) / 32;
        for (int64_t c = 0; c < 32; ++c)
          variance += (x.at(r * 32 + c) - mean) * (x.at(r * 32 + c) - mean) / 32;
        double rstd = 1 / std::sqrt(variance + 1e-5);
        for (int64_t c = 0; c < 32; ++c)
          y.push_back((x.at(r * 32 + c) - mean) * rstd * (affine ? weight.at(c) : 1) + (affine ? bias.at(c) : 0));
        means.push_back(mean);
        rstds.push_back(rstd);
      }
      std::vector<double> rowBound(3, 64 * kEps32 * 3), elementBound(y.size(), 64 * kEps32 * 3);
      if (dtype == DType::F64)
        rowBound.assign(3, 0), elementBound.assign(y.size(), 0);
      EXPECT_TRUE(allClose(out[0], y, toleranceFor(dtype), elementBound)) << name(dtype);
      EXPECT_TRUE(allClose(out[1], means, toleranceFor(statistics), rowBound)) << name(dtype);
      EXPECT_TRUE(allClose(out[2], rstds, toleranceFor(statistics), rowBound)) << name(dtype);
    }
  }
}

TEST(CpuLayerNorm, BackwardMatchesTheReferenceInLowPrecision) {
  std::mt19937_64 rng(13);
  for (DType dtype : kFloatTypes) {
    DType statistics = dtype == DType::F64 ? DType::F64 : DType::F32;
    Tensor x = randomTensor(dtype, {5, 16}, rng, -2, 2), dy = randomTensor(dtype, {5, 16}, rng);
    Tensor weight = randomTensor(dtype, {16}, rng, 0.5, 1.5);
    std::vector<Tensor> forward = runOp("jit.layer_norm", {&x, &weight, nullptr},
                                        {x.type(), tt(statistics, {5}), tt(statistics, {5})}, {{"axis", int64_t(1)}});
    std::vector<Tensor> grads = runOp("jit.layer_norm_grad", {&dy, &x, &forward[1], &forward[2], &weight},
                                      {x.type(), weight.type(), weight.type()}, {{"axis", int64_t(1)}});
    // The reference uses the saved statistics, as the kernel does.
    std::vector<double> dx, dweight(16, 0), dbias(16, 0), magnitude(16, 0);
    for (int64_t r = 0; r < 5; ++r) {
      double mean = forward[1].at(r), rstd = forward[2].at(r), sumG = 0, sumGX = 0;
      std::vector<double> xhat(16), g(16);
      for (int64_t c = 0; c < 16; ++c) {
        xhat[size_t(c)] = (x.at(r * 16 + c) - mean) * rstd;
        g[size_t(c)] = dy.at(r * 16 + c) * weight.at(c);
        sumG += g[size_t(c)];
        sumGX += g[size_t(c)] * xhat[size_t(c)];
        dweight[size_t(c)] += dy.at(r * 16 + c) * xhat[size_t(c)];
        dbias[size_t(c)] += dy.at(r * 16 + c);
        magnitude[size_t(c)] += std::abs(dy.at(r * 16 + c)) * (1 + std::abs(xhat[size_t(c)]));
      }
      for (int64_t c = 0; c < 16; ++c)
        dx.push_back(rstd * (g[size_t(c)] - sumG / 16 - xhat[size_t(c)] * sumGX / 16));
    }
    double accumulation = dtype == DType::F64 ? 0.0 : 64 * kEps32;
    std::vector<double> columnBound;
    for (double m : magnitude)
      columnBound.push_back(accumulation * m);
    EXPECT_TRUE(allClose(grads[0], dx, toleranceFor(dtype), std::vector<double>(dx.size(), accumulation * 16)))
        << name(dtype);
    EXPECT_TRUE(allClose(grads[1], dweight, toleranceFor(dtype), columnBound)) << name(dtype);
    EXPECT_TRUE(allClose(grads[2], dbias, toleranceFor(dtype), columnBound)) << name(dtype);
  }
}

//===----------------------------------------------------------------------===//
// Gradient checks in f64: each *_grad kernel against central differences of
// its forward kernel (DESIGN: f64 support exists for exactly this).
//===----------------------------------------------------------------------===//

TEST(CpuGradientCheck, ActivationsSoftmaxAndLayerNorm) {
  std::mt19937_64 rng(8);
  Tensor x = randomTensor(DType::F64, {3, 4}, rng, -2, 2);
  Tensor dy = randomTensor(DType::F64, {3, 4}, rng, -1, 1);
  std::vector<double> weights = dy.toDoubles();
  for (std::string approximate : {"none", "tanh"}) {
    AttributeMap attributes = {{"approximate", approximate}};
    auto gelu = [&](const Tensor& v) { return runOp("jit.gelu", {&v}, {v.type()}, attributes)[0]; };
    EXPECT_TRUE(allClose(runOp("jit.gelu_grad", {&dy, &x}, {x.type()}, attributes)[0],
                         numericalGradient(gelu, x, weights), kGradientCheck))
        << approximate;
  }
  for (bool log : {false, true}) {
    AttributeMap attributes = {{"axis", int64_t(1)}};
    auto forward = [&](const Tensor& v) {
      return runOp(log ? "jit.log_softmax" : "jit.softmax", {&v}, {v.type()}, attributes)[0];
    };
    Tensor y = forward(x);
    EXPECT_TRUE(allClose(runOp(log ? "jit.log_softmax_grad" : "jit.softmax_grad", {&dy, &y}, {x.type()}, attributes)[0],
                         numericalGradient(forward, x, weights), kGradientCheck))
        << "log " << log;
  }
  Tensor weight = randomTensor(DType::F64, {4}, rng, 0.5, 1.5), bias = randomTensor(DType::F64, {4}, rng);
  AttributeMap attributes = {{"axis", int64_t(1)}, {"eps", 1e-5}};
  std::vector<TensorType> types = {x.type(), tt(DType::F64, {3}), tt(DType::F64, {3})};
  std::vector<Tensor> forward = runOp("jit.layer_norm", {&x, &weight, &bias}, types, attributes);
  std::vector<Tensor> grads =
      runOp("jit.layer_norm_grad", {&dy, &x, &forward[1], &forward[2], &weight},
            {x.type(), weight.type(), bias.type()}, {{"axis", int64_t(1)}});
  auto normOfX = [&](const Tensor& v) { return runOp("jit.layer_norm", {&v, &weight, &bias}, types, attributes)[0]; };
  auto normOfWeight = [&](const Tensor& w) { return runOp("jit.layer_norm", {&x, &w, &bias}, types, attributes)[0]; };
  auto normOfBias = [&](const Tensor& b) { return runOp("jit.layer_norm", {&x, &weight, &b}, types, attributes)[0]; };
  EXPECT_TRUE(allClose(grads[0], numericalGradient(normOfX, x, weights), kGradientCheck));
  EXPECT_TRUE(allClose(grads[1], numericalGradient(normOfWeight, weight, weights), kGradientCheck));
  EXPECT_TRUE(allClose(grads[2], numericalGradient(normOfBias, bias, weights), kGradientCheck));
}

TEST(CpuGradientCheck, Losses) {
  std::mt19937_64 rng(9);
  Tensor logits = randomTensor(DType::F64, {4, 5}, rng, -2, 2);
  Tensor labels = filled(DType::I64, {4}, {3, -100, 0, 4});
  Tensor target = randomTensor(DType::F64, {4, 5}, rng);
  for (std::string reduction : {"none", "mean", "sum"}) {
    Shape lossShape = reduction == "none" ? Shape{4} : Shape{};
    Tensor g = randomTensor(DType::F64, lossShape, rng, 0.5, 1.5);
    std::vector<double> weights = g.toDoubles();
    for (double smoothing : {0.0, 0.2}) {
      AttributeMap attributes = {{"reduction", reduction}, {"label_smoothing", smoothing}};
      auto forward = [&](const Tensor& v) {
        return runOp("jit.cross_entropy", {&v, &labels}, {tt(DType::F64, lossShape)}, attributes)[0];
      };
      EXPECT_TRUE(allClose(runOp("jit.cross_entropy_grad", {&g, &logits, &labels}, {logits.type()}, attributes)[0],
                           numericalGradient(forward, logits, weights), kGradientCheck))
          << reduction << " smoothing " << smoothing;
    }
    AttributeMap attributes = {{"reduction", reduction}};
    auto nll = [&](const Tensor& v) {
      return runOp("jit.nll_loss", {&v, &labels}, {tt(DType::F64, lossShape)}, attributes)[0];
    };
    EXPECT_TRUE(allClose(runOp("jit.nll_loss_grad", {&g, &logits, &labels}, {logits.type()}, attributes)[0],
                         numericalGradient(nll, logits, weights), kGradientCheck))
        << reduction;
    Shape mseShape = reduction == "none" ? Shape{4, 5} : Shape{};
    Tensor gm = randomTensor(DType::F64, mseShape, rng, 0.5, 1.5);
    auto mse = [&](const Tensor& v) {
      return runOp("jit.mse_loss", {&v, &target}, {tt(DType::F64, mseShape)}, attributes)[0];
    };
    EXPECT_TRUE(allClose(runOp("jit.mse_loss_grad", {&gm, &logits, &target}, {logits.type()}, attributes)[0],
                         numericalGradient(mse, logits, gm.toDoubles()), kGradientCheck))
        << reduction;
  }
}

//===----------------------------------------------------------------------===//
// Losses in low precision
//===----------------------------------------------------------------------===//

TEST(CpuLoss, CrossEntropyMatchesTheReference) {
  std::mt19937_64 rng(10);
  for (DType dtype : kFloatTypes) {
    Tensor logits = randomTensor(dtype, {6, 10}, rng, -3, 3);
    Tensor labels = filled(DType::I64, {6}, {1, 9, -1, 0, 5, -1});
    AttributeMap attributes = {{"ignore_index", int64_t(-1)}, {"label_smoothing", 0.1}};
    double total = 0;
    std::vector<double> rows;
    for (int64_t n = 0; n < 6; ++n) {
      int64_t label = int64_t(labels.at(n));
      if (label == -1) {
        rows.push_back(0);
        continue;
      }
      double max = -INFINITY, sum = 0, mean = 0;
      for (int64_t c = 0; c < 10; ++c)
        max = std::max(max, logits.at(n * 10 + c));
      for (int64_t c = 0; c < 10; ++c) {
        sum += std::exp(logits.at(n * 10 + c) - max);
        mean += logits.at(n * 10 + c) / 10;
      }
      double lse = max + std::log(sum);
      rows.push_back(0.9 * (lse - logits.at(n * 10 + label)) + 0.1 * (lse - mean));
      total += rows.back();
    }
    attributes["reduction"] = std::string("mean");
    EXPECT_TRUE(allClose(runOp("jit.cross_entropy", {&logits, &labels}, {tt(dtype, {})}, attributes)[0],
                         {total / 4}, toleranceFor(dtype), {64 * kEps32 * total}))
        << name(dtype);
    attributes["reduction"] = std::string("none");
    EXPECT_TRUE(allClose(runOp("jit.cross_entropy", {&logits, &labels}, {tt(dtype, {6})}, attributes)[0], rows,
                         toleranceFor(dtype), std::vector<double>(6, 32 * kEps32 * 4)))
        << name(dtype);
  }
}

TEST(CpuLoss, MseAndNllMatchTheReference) {
  std::mt19937_64 rng(11);
  for (DType dtype : kFloatTypes) {
    Tensor input = randomTensor(dtype, {4, 6}, rng), target = randomTensor(dtype, {4, 6}, rng);
    double sum = 0;
    std::vector<double> squares;
    for (int64_t i = 0; i < 24; ++i) {
      squares.push_back((input.at(i) - target.at(i)) * (input.at(i) - target.at(i)));
      sum += squares.back();
    }
    std::vector<double> bound = {24 * kEps32 * sum};
    EXPECT_TRUE(allClose(runOp("jit.mse_loss", {&input, &target}, {tt(dtype, {})})[0], {sum / 24},
                         toleranceFor(dtype), bound));
    EXPECT_TRUE(allClose(runOp("jit.mse_loss", {&input, &target}, {tt(dtype, {})}, {{"reduction", std::string("sum")}})[0],
                         {sum}, toleranceFor(dtype), bound));
    EXPECT_TRUE(allClose(
        runOp("jit.mse_loss", {&input, &target}, {input.type()}, {{"reduction", std::string("none")}})[0], squares,
        toleranceFor(dtype)));
    Tensor labels = filled(DType::I64, {4}, {5, 0, -100, 2});
    double nll = -(input.at(5) + input.at(6) + input.at(18 + 2)) / 3;
    EXPECT_TRUE(allClose(runOp("jit.nll_loss", {&input, &labels}, {tt(dtype, {})})[0], {nll}, toleranceFor(dtype)))
        << name(dtype);
  }
}

TEST(CpuLoss, GradientsMatchTheReferenceInLowPrecision) {
  std::mt19937_64 rng(14);
  for (DType dtype : kFloatTypes) {
    Tensor logits = randomTensor(dtype, {4, 7}, rng, -3, 3), target = randomTensor(dtype, {4, 7}, rng);
    Tensor labels = filled(DType::I64, {4}, {6, 0, -100, 3});
    Tensor g = filled(dtype, {}, {1.5});
    // cross_entropy_grad: g * (softmax - smoothed one-hot) / rows counted.
    std::vector<double> ce(28, 0.0), nll(28, 0.0), mse;
    for (int64_t n = 0; n < 4; ++n) {
      int64_t label = int64_t(labels.at(n));
      if (label == -100)
        continue;
      double max = -INFINITY, sum = 0;
      for (int64_t c = 0; c < 7; ++c)
        max = std::max(max, logits.at(n * 7 + c));
      for (int64_t c = 0; c < 7; ++c)
        sum += std::exp(logits.at(n * 7 + c) - max);
      for (int64_t c = 0; c < 7; ++c) {
        double p = std::exp(logits.at(n * 7 + c) - max) / sum;
        double wanted = (c == label ? 0.8 : 0.0) + 0.2 / 7;
        ce[size_t(n * 7 + c)] = g.at(0) * (p - wanted) / 3;
      }
      nll[size_t(n * 7 + label)] = -g.at(0) / 3;
    }
    for (int64_t i = 0; i < 28; ++i)
      mse.push_back(2.0 / 28 * (logits.at(i) - target.at(i)) * g.at(0));
    std::vector<double> softmaxBound(28, dtype == DType::F64 ? 0.0 : 16 * kEps32);
    EXPECT_TRUE(allClose(runOp("jit.cross_entropy_grad", {&g, &logits, &labels}, {logits.type()},
                               {{"label_smoothing", 0.2}})[0],
                         ce, toleranceFor(dtype), softmaxBound))
        << name(dtype);
    EXPECT_TRUE(allClose(runOp("jit.nll_loss_grad", {&g, &logits, &labels}, {logits.type()})[0], nll,
                         toleranceFor(dtype)))
        << name(dtype);
    EXPECT_TRUE(allClose(runOp("jit.mse_loss_grad", {&g, &logits, &target}, {logits.type()})[0], mse,
                         toleranceFor(dtype)))
        << name(dtype);
  }
}

TEST(CpuLoss, OutOfRangeLabelIsAnErrorNamingTheRow) {
  Tensor logits = filled(DType::F32, {2, 3}, {0.0});
  Tensor labels = filled(DType::I64, {2}, {1, 3});
  Expected<std::vector<Tensor>> result = tryRunOp("jit.cross_entropy", {&logits, &labels}, {tt(DType::F32, {})});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.message(), "plan @jit.cross_entropy, step 0 (loss from jit.cross_entropy): label 3 of row 1 "
                              "is outside [0, 3) and is not ignore_index -100");
}

TEST(CpuLoss, MeanOverOnlyIgnoredRowsIsNan) {
  Tensor logits = filled(DType::F32, {2, 3}, {0.0});
  Tensor labels = filled(DType::I64, {2}, {-100, -100});
  EXPECT_TRUE(std::isnan(runOp("jit.cross_entropy", {&logits, &labels}, {tt(DType::F32, {})})[0].at(0)));
}

//===----------------------------------------------------------------------===//
// Data movement and dropout
//===----------------------------------------------------------------------===//

TEST(CpuLayout, BroadcastReshapeTransposeConstant) {
  for (DType dtype : {DType::F16, DType::F32, DType::I64, DType::I1}) {
    std::vector<double> values = {1, 0, 1};
    Tensor row = filled(dtype, {3}, values);
    EXPECT_EQ(runOp("jit.broadcast_to", {&row}, {tt(dtype, {2, 3})})[0].toDoubles(),
              (std::vector<double>{1, 0, 1, 1, 0, 1}));
    Tensor column = filled(dtype, {2, 1}, {1, 0});
    EXPECT_EQ(runOp("jit.broadcast_to", {&column}, {tt(dtype, {2, 3})})[0].toDoubles(),
              (std::vector<double>{1, 1, 1, 0, 0, 0}));
  }
  std::vector<double> counting(24);
  for (int i = 0; i < 24; ++i)
    counting[size_t(i)] = i;
  Tensor x = filled(DType::BF16, {2, 3, 4}, counting);
  EXPECT_EQ(runOp("jit.reshape", {&x}, {tt(DType::BF16, {6, 4})})[0].toDoubles(), counting);
  std::vector<double> transposed = runOp("jit.transpose", {&x}, {tt(DType::BF16, {4, 2, 3})},
                                         {{"perm", std::vector<int64_t>{2, 0, 1}}})[0]
                                       .toDoubles();
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        EXPECT_EQ(transposed[size_t((k * 2 + i) * 3 + j)], double((i * 3 + j) * 4 + k));

  DenseData splat{tt(DType::F16, {2, 2}), {0x00, 0x3C}}; // 1.0 in f16, little-endian
  EXPECT_EQ(runOp("jit.constant", {}, {tt(DType::F16, {2, 2})}, {{"value", splat}})[0].toDoubles(),
            (std::vector<double>{1, 1, 1, 1}));
  Tensor full = filled(DType::I64, {3}, {7, -8, 9});
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(full.bytes());
  DenseData dense{full.type(), std::vector<uint8_t>(bytes, bytes + full.byteSize())};
  EXPECT_EQ(runOp("jit.constant", {}, {full.type()}, {{"value", dense}})[0].toDoubles(),
            (std::vector<double>{7, -8, 9}));
}

TEST(Philox, KnownAnswerVectorsOfRandom123) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(CpuDropout, KeepsOneMinusPScalesSurvivorsAndAdvancesTheState) {
  std::mt19937_64 rng(12);
  for (DType dtype : kFloatTypes) {
    Tensor x = randomTensor(dtype, {64, 64}, rng, 0.5, 1.5);
    Tensor state = filled(DType::I64, {2}, {1234, 10});
    std::vector<TensorType> types = {x.type(), tt(DType::I1, {64, 64}), tt(DType::I64, {2})};
    std::vector<Tensor> out = runOp("jit.dropout", {&x, &state}, types, {{"p", 0.25}});
    int64_t kept = 0;
    std::vector<double> expected;
    for (int64_t i = 0; i < x.elementCount(); ++i) {
      bool keep = philoxUniform(philoxBitsAt(1234, uint64_t(10 + i))) >= 0.25;
      EXPECT_EQ(out[1].at(i), keep ? 1.0 : 0.0);
      kept += keep;
      expected.push_back(keep ? x.at(i) / 0.75 : 0.0);
    }
    EXPECT_TRUE(allClose(out[0], expected, toleranceFor(dtype))) << name(dtype);
    EXPECT_NEAR(double(kept) / 4096, 0.75, 0.03);
    EXPECT_EQ(out[2].toDoubles(), (std::vector<double>{1234, 10 + 4096}));
    // Same state, same mask; the advanced state, a different one.
    EXPECT_TRUE(runOp("jit.dropout", {&x, &state}, types, {{"p", 0.25}})[1].bitwiseEqual(out[1]));
    EXPECT_FALSE(runOp("jit.dropout", {&x, &out[2]}, types, {{"p", 0.25}})[1].bitwiseEqual(out[1]));
  }
  Tensor x = randomTensor(DType::F16, {100}, rng);
  Tensor state = filled(DType::I64, {2}, {1, 0});
  std::vector<Tensor> identity = runOp("jit.dropout", {&x, &state},
                                       {x.type(), tt(DType::I1, {100}), tt(DType::I64, {2})}, {{"p", 0.0}});
  EXPECT_TRUE(identity[0].bitwiseEqual(x));
}

TEST(CpuDropout, UpdatesItsStateInPlace) {
  Tensor x = filled(DType::F32, {8}, {1.0});
  Tensor state = filled(DType::I64, {2}, {5, 100});
  std::vector<Tensor> out = runOp("jit.dropout", {&x, &state}, {x.type(), tt(DType::I1, {8}), state.type()},
                                  {{"p", 0.5}}, {-1, -1, 1});
  EXPECT_TRUE(out[2].sharesStorageWith(state));
  EXPECT_EQ(state.toDoubles(), (std::vector<double>{5, 108}));
}

} // namespace
