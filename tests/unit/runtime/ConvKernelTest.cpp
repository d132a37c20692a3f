// The convolutional-network CPU kernels (conv2d, batch norm, 2-D pooling and
// their gradients) against naive double-precision references computed from
// the already-rounded inputs, within DESIGN's tolerances for the result dtype
// plus a bound that grows with the accumulation length; NCHW against NHWC
// bit for bit; PyTorch's corner cases (ties, NaN, ceil mode, padding
// divisors, in-place running statistics); and every gradient kernel against
// central differences of its forward kernel in f64.

#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/WindowShape.h"

#include "ConvTestShapes.h"
#include "RuntimeTestUtil.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>

namespace {

using namespace ampjit::runtime;
using namespace ampjit::runtime::test;

std::string name(DType dtype) { return std::string(dtypeName(dtype)); }

DType statisticsTypeOf(DType dtype) { return dtype == DType::F64 ? DType::F64 : DType::F32; }

/// Unit roundoff of the accumulation: f32 for f16/bf16/f32 data, f64 for f64.
double accumulationRoundoff(DType dtype) { return dtype == DType::F64 ? 0x1p-53 : 0x1p-24; }

/// A rank-4 tensor with its dimensions permuted: output dim i is input dim perm[i].
Tensor permuted(const Tensor& in, std::array<int, 4> perm) {
  const Shape& inShape = in.shape();
  Shape outShape(4);
  for (int d = 0; d < 4; ++d)
    outShape[size_t(d)] = inShape[size_t(perm[size_t(d)])];
  Tensor out = *Tensor::allocate(in.dtype(), outShape);
  std::vector<int64_t> inStrides = contiguousStrides(inShape);
  std::array<int64_t, 4> index{};
  for (int64_t i = 0; i < out.elementCount(); ++i) {
    int64_t source = 0;
    for (int d = 0; d < 4; ++d)
      source += index[size_t(d)] * inStrides[size_t(perm[size_t(d)])];
    out.set(i, in.at(source)); // exact: the value is already in the dtype
    for (int d = 3; d >= 0; --d) {
      if (++index[size_t(d)] < outShape[size_t(d)])
        break;
      index[size_t(d)] = 0;
    }
  }
  return out;
}

/// NCHW -> NHWC (and OIHW -> OHWI), and back.
Tensor toChannelsLast(const Tensor& t) { return permuted(t, {0, 2, 3, 1}); }
Tensor toChannelsFirst(const Tensor& t) { return permuted(t, {0, 3, 1, 2}); }

/// A reference value per element with what bounds its rounding error: the
/// sum of |terms| and their number.
struct Accumulation {
  std::vector<double> value, magnitude;
  std::vector<int64_t> terms;
  explicit Accumulation(int64_t size)
      : value(size_t(size), 0.0), magnitude(size_t(size), 0.0), terms(size_t(size), 0) {}
  void add(int64_t i, double term) {
    value[size_t(i)] += term;
    magnitude[size_t(i)] += std::abs(term);
    ++terms[size_t(i)];
  }
  /// Sequential (or blocked) summation in the accumulation type: at most
  /// (terms + 1) roundings of partial sums bounded by the magnitude; doubled for slack.
  std::vector<double> bound(DType dtype) const {
    std::vector<double> result;
    for (size_t i = 0; i < value.size(); ++i)
      result.push_back(2.0 * double(terms[i] + 1) * accumulationRoundoff(dtype) * magnitude[i]);
    return result;
  }
};

//===----------------------------------------------------------------------===//
// Conv2d
//===----------------------------------------------------------------------===//

/// Calls f(xIndex, wIndex, yIndex) for every product of the convolution
/// whose input element is inside the input (NCHW / OIHW indices).
template <typename F>
void forEachTap(const ConvShape& c, F&& f) {
  const Shape &x = c.x, &w = c.w;
  Shape out = c.y();
  int64_t groupIn = w[1], groupOut = w[0] / c.groups;
  for (int64_t n = 0; n < out[0]; ++n)
    for (int64_t o = 0; o < out[1]; ++o)
      for (int64_t oh = 0; oh < out[2]; ++oh)
        for (int64_t ow = 0; ow < out[3]; ++ow) {
          int64_t group = o / groupOut;
          int64_t yIndex = ((n * out[1] + o) * out[2] + oh) * out[3] + ow;
          for (int64_t ch = 0; ch < groupIn; ++ch)
            for (int64_t kh = 0; kh < w[2]; ++kh)
              for (int64_t kw = 0; kw < w[3]; ++kw) {
                int64_t ih = oh * c.stride[0] - c.padding[0] + kh * c.dilation[0];
                int64_t iw = ow * c.stride[1] - c.padding[1] + kw * c.dilation[1];
                if (ih < 0 || ih >= x[2] || iw < 0 || iw >= x[3])
                  continue;
                int64_t xIndex = ((n * x[1] + group * groupIn + ch) * x[2] + ih) * x[3] + iw;
                int64_t wIndex = ((o * groupIn + ch) * w[2] + kh) * w[3] + kw;
                f(xIndex, wIndex, yIndex);
              }
        }
}

Accumulation forwardReference(const ConvShape& c, const Tensor& xv, const Tensor& wv, const Tensor* bias) {
  Accumulation y(elementCount(c.y()));
  forEachTap(c, [&](int64_t xi, int64_t wi, int64_t yi) { y.add(yi, xv.at(xi) * wv.at(wi)); });
  if (bias) {
    Shape out = c.y();
    int64_t plane = out[2] * out[3];
    for (int64_t i = 0; i < elementCount(out); ++i) {
      // Added to the finished sum: one more rounding, bounded through the magnitude.
      double b = bias->at((i / plane) % out[1]);
      y.value[size_t(i)] += b;
      y.magnitude[size_t(i)] += std::abs(b);
    }
  }
  return y;
}

Accumulation gradInputReference(const ConvShape& c, const Tensor& dy, const Tensor& wv) {
  Accumulation dx(elementCount(c.x));
  forEachTap(c, [&](int64_t xi, int64_t wi, int64_t yi) { dx.add(xi, dy.at(yi) * wv.at(wi)); });
  return dx;
}

Accumulation gradWeightReference(const ConvShape& c, const Tensor& dy, const Tensor& xv) {
  Accumulation dw(elementCount(c.w));
  forEachTap(c, [&](int64_t xi, int64_t wi, int64_t yi) { dw.add(wi, dy.at(yi) * xv.at(xi)); });
  return dw;
}

std::vector<ConvShape> convConfigs() {
  std::vector<ConvShape> configs;
  configs.push_back({.label = "3x3", .x = {2, 3, 7, 6}, .w = {4, 3, 3, 3}});
  configs.push_back({.label = "stride 2, padding 1", .x = {2, 4, 9, 8}, .w = {6, 4, 3, 3}, .stride = {2, 2},
                     .padding = {1, 1}});
  configs.push_back({.label = "dilation 2, non-square kernel, no bias", .x = {1, 3, 10, 9}, .w = {5, 3, 3, 2},
                     .padding = {2, 1}, .dilation = {2, 2}, .bias = false});
  configs.push_back({.label = "groups 2, mixed strides", .x = {2, 4, 6, 7}, .w = {6, 2, 3, 3}, .stride = {1, 2},
                     .padding = {1, 0}, .groups = 2});
  configs.push_back({.label = "depthwise", .x = {2, 5, 6, 6}, .w = {5, 1, 3, 3}, .padding = {1, 1}, .groups = 5,
                     .bias = false});
  configs.push_back({.label = "depthwise with multiplier 2, stride 2", .x = {2, 3, 7, 7}, .w = {6, 1, 3, 3},
                     .stride = {2, 2}, .padding = {1, 1}, .groups = 3});
  configs.push_back({.label = "1x5 kernel", .x = {2, 3, 5, 8}, .w = {3, 3, 1, 5}, .stride = {2, 1},
                     .padding = {0, 2}});
  configs.push_back({.label = "1x1", .x = {3, 8, 4, 4}, .w = {16, 8, 1, 1}});
  configs.push_back({.label = "K = 288", .x = {2, 32, 6, 6}, .w = {8, 32, 3, 3}, .padding = {1, 1}});
  return configs;
}

struct ConvResults {
  Tensor y, dx, dw;
};

/// Runs the three kernels on NCHW operands; with `nhwc`, transposes the
/// operands to NHWC/OHWI, runs the NHWC plans and transposes the results back.
ConvResults runConv(const ConvShape& c, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& dy,
                    bool nhwc) {
  AttributeMap attributes = c.attributes(nhwc);
  auto toLayout = [&](const Tensor& t) { return nhwc ? toChannelsLast(t) : t; };
  auto fromLayout = [&](const Tensor& t) { return nhwc ? toChannelsFirst(t) : t; };
  Tensor xl = toLayout(x), wl = toLayout(w), dyl = toLayout(dy);
  DType dtype = x.dtype();
  std::vector<Tensor> y = runOp("jit.conv2d", {&xl, &wl, bias}, {tt(dtype, dyl.shape())}, attributes);
  std::vector<Tensor> dx = runOp("jit.conv2d_grad_input", {&dyl, &wl}, {xl.type()}, attributes);
  std::vector<Tensor> dw = runOp("jit.conv2d_grad_weight", {&dyl, &xl}, {wl.type()}, attributes);
  if (y.empty() || dx.empty() || dw.empty())
    return {};
  return {fromLayout(y[0]), fromLayout(dx[0]), fromLayout(dw[0])};
}

TEST(WindowShape, OutputSizesFollowTheFormulaAndExtremesAreRefusedWithoutOverflow) {
  EXPECT_EQ(windowOutputSize(8, 3, 1, 0, 1), 6);
  EXPECT_EQ(windowOutputSize(8, 3, 2, 1, 1), 4);
  EXPECT_EQ(windowOutputSize(8, 3, 2, 1, 2), 3);
  EXPECT_EQ(windowOutputSize(4, 3, 1, 0, 2), -1); // dilated extent 5 > 4
  // ceil mode: a last window that would start in the right padding is dropped.
  EXPECT_EQ(windowOutputSize(5, 2, 2, 0, 1, /*ceilMode=*/true), 3);
  EXPECT_EQ(windowOutputSize(6, 3, 3, 1, 1, /*ceilMode=*/true), 3);
  EXPECT_EQ(windowOutputSize(6, 3, 3, 1, 1, /*ceilMode=*/false), 2);
  // Parameters at the limit are exact; past it, refused (the dilated extent
  // and twice the padding would overflow int64 long before they stop fitting).
  const int64_t big = kMaxWindowParameter;
  EXPECT_EQ(windowOutputSize(1, 1, 1, big, 1), 2 * big + 1);
  EXPECT_EQ(windowOutputSize(int64_t(1) << 40, 2, big, 0, big), ((int64_t(1) << 40) - big - 1) / big + 1);
  EXPECT_EQ(windowOutputSize(8, 3, 1, 1, int64_t(1) << 62), -1);
  EXPECT_EQ(windowOutputSize(8, 3, 1, int64_t(1) << 62, 1), -1);
  EXPECT_EQ(windowOutputSize(8, 3, big + 1, 0, 1), -1);
  EXPECT_EQ(windowOutputSize(8, big + 1, 1, 0, 1), -1);
  // A dimension near INT64_MAX with padding: exact, not wrapped.
  EXPECT_EQ(windowOutputSize(INT64_MAX - 2, 1, 1, 1, 1), INT64_MAX);
  EXPECT_EQ(windowOutputSize(INT64_MAX, 1, 1, 1, 1), -1); // INT64_MAX + 2 outputs
  EXPECT_EQ(windowOutputSize(INT64_MAX, 3, 2, 1, 1, /*ceilMode=*/true), INT64_MAX / 2 + 1);
}

TEST(CpuConv2d, ForwardAndGradientsMatchTheReferenceInEveryDtype) {
  std::mt19937_64 rng(21);
  for (DType dtype : kFloatTypes) {
    for (const ConvShape& c : convConfigs()) {
      Tensor x = randomTensor(dtype, c.x, rng), w = randomTensor(dtype, c.w, rng);
      Tensor bias = randomTensor(dtype, {c.w[0]}, rng), dy = randomTensor(dtype, c.y(), rng);
      ConvResults results = runConv(c, x, w, c.bias ? &bias : nullptr, dy, false);
      ASSERT_TRUE(results.y.defined()) << c.label;
      Accumulation y = forwardReference(c, x, w, c.bias ? &bias : nullptr);
      Accumulation dx = gradInputReference(c, dy, w), dw = gradWeightReference(c, dy, x);
      EXPECT_TRUE(allClose(results.y, y.value, toleranceFor(dtype), y.bound(dtype))) << name(dtype) << " " << c.label;
      EXPECT_TRUE(allClose(results.dx, dx.value, toleranceFor(dtype), dx.bound(dtype)))
          << name(dtype) << " " << c.label;
      EXPECT_TRUE(allClose(results.dw, dw.value, toleranceFor(dtype), dw.bound(dtype)))
          << name(dtype) << " " << c.label;
    }
  }
}

TEST(CpuConv2d, NhwcIsBitIdenticalToNchw) {
  std::mt19937_64 rng(22);
  for (DType dtype : kFloatTypes) {
    for (const ConvShape& c : convConfigs()) {
      Tensor x = randomTensor(dtype, c.x, rng), w = randomTensor(dtype, c.w, rng);
      Tensor bias = randomTensor(dtype, {c.w[0]}, rng), dy = randomTensor(dtype, c.y(), rng);
      ConvResults nchw = runConv(c, x, w, c.bias ? &bias : nullptr, dy, false);
      ConvResults nhwc = runConv(c, x, w, c.bias ? &bias : nullptr, dy, true);
      ASSERT_TRUE(nchw.y.defined() && nhwc.y.defined()) << c.label;
      EXPECT_TRUE(nhwc.y.bitwiseEqual(nchw.y)) << name(dtype) << " " << c.label;
      EXPECT_TRUE(nhwc.dx.bitwiseEqual(nchw.dx)) << name(dtype) << " " << c.label;
      EXPECT_TRUE(nhwc.dw.bitwiseEqual(nchw.dw)) << name(dtype) << " " << c.label;
    }
  }
}

TEST(CpuConv2d, LowPrecisionAccumulatesInF32AndRoundsOnce) {
  // 1x1 convolution over 4096 channels of 1 * 2^-12: 1.0 in f32, exact in
  // f16. An f16 accumulator would stall at 0.5, where adding 2^-12 is a tie
  // that rounds back to even.
  Tensor x = filled(DType::F16, {1, 4096, 1, 1}, std::vector<double>(4096, 1.0));
  Tensor w = filled(DType::F16, {1, 4096, 1, 1}, std::vector<double>(4096, 0x1p-12));
  AttributeMap attributes = ConvShape{.x = {1, 4096, 1, 1}, .w = {1, 4096, 1, 1}}.attributes(false);
  std::vector<Tensor> y = runOp("jit.conv2d", {&x, &w, nullptr}, {tt(DType::F16, {1, 1, 1, 1})}, attributes);
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].at(0), 1.0);
  // The bias joins the f32 sum before the single rounding: 0.5 + 2^-12 +
  // 2^-12 = 0.5 + 2^-11 is an f16 value. Rounding the sum to f16 first would
  // give 0.5 (a tie, to even), and 0.5 + 2^-12 rounds to 0.5 again.
  Tensor x2 = filled(DType::F16, {1, 2, 1, 1}, {0.5, 0x1p-12});
  Tensor w2 = filled(DType::F16, {1, 2, 1, 1}, {1.0, 1.0});
  Tensor bias = filled(DType::F16, {1}, {0x1p-12});
  AttributeMap two = ConvShape{.x = {1, 2, 1, 1}, .w = {1, 2, 1, 1}}.attributes(false);
  std::vector<Tensor> biased = runOp("jit.conv2d", {&x2, &w2, &bias}, {tt(DType::F16, {1, 1, 1, 1})}, two);
  ASSERT_EQ(biased.size(), 1u);
  EXPECT_EQ(biased[0].at(0), 0.5 + 0x1p-11);
}

TEST(CpuConv2d, AnInputGradientAddedToItsAccumulateInputRoundsOnce) {
  // out = -(conv2d_grad_input(dy, w) + t), t = -z, written over t in place
  // (what cuDNN's beta = 1 gives the CUDA plan): the f32 sum of the products
  // plus t, rounded once to the dtype. The f32 sum is the same kernel's on
  // the operands widened to f32 (one code path, one order), so the result is
  // compared bit for bit; in f32 it is the unfused add's.
  std::mt19937_64 rng(23);
  for (DType dtype : {DType::F16, DType::BF16, DType::F32}) {
    for (const ConvShape& c : convConfigs()) {
      for (bool nhwc : {false, true}) {
        SCOPED_TRACE(name(dtype) + " " + c.label + (nhwc ? " NHWC" : " NCHW"));
        AttributeMap attributes = c.attributes(nhwc);
        Shape xShape = nhwc ? Shape{c.x[0], c.x[2], c.x[3], c.x[1]} : c.x;
        Shape wShape = nhwc ? Shape{c.w[0], c.w[2], c.w[3], c.w[1]} : c.w;
        Shape yShape = c.y();
        if (nhwc)
          yShape = {yShape[0], yShape[2], yShape[3], yShape[1]};
        Tensor dy = randomTensor(dtype, yShape, rng), w = randomTensor(dtype, wShape, rng);
        Tensor z = randomTensor(dtype, xShape, rng);

        PlanBuilder b("accumulate");
        BufferId dyId = b.argument(dy.type(), BufferRole::Input, "dy");
        BufferId wId = b.argument(w.type(), BufferRole::Input, "w");
        BufferId zId = b.argument(z.type(), BufferRole::Input, "z");
        BufferId t = b.temporary(z.type()), out = b.output(z.type());
        b.op("jit.neg", {zId}, {t});
        b.op("jit.conv2d_grad_input", {dyId, wId}, {t}, attributes);
        b.op("jit.neg", {t}, {out});
        b.result(out);
        Plan plan = b.finish();
        plan.steps[1].inputs.push_back(t);
        ASSERT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).message();
        std::vector<Tensor> arguments{dy, w, z};
        Expected<std::vector<Tensor>> got = createCpuBackend()->run(plan, arguments);
        ASSERT_TRUE(got.ok()) << got.message();

        Tensor dy32 = *Tensor::fromDoubles(DType::F32, yShape, dy.toDoubles());
        Tensor w32 = *Tensor::fromDoubles(DType::F32, wShape, w.toDoubles());
        std::vector<Tensor> sums =
            runOp("jit.conv2d_grad_input", {&dy32, &w32}, {tt(DType::F32, xShape)}, attributes);
        ASSERT_EQ(sums.size(), 1u);
        std::vector<double> expected, zs = z.toDoubles(), products = sums[0].toDoubles();
        for (size_t i = 0; i < zs.size(); ++i)
          expected.push_back(-double(float(products[i]) + float(-zs[i])));
        EXPECT_TRUE((*got)[0].bitwiseEqual(*Tensor::fromDoubles(dtype, xShape, expected)));
      }
    }
  }
}

/// A tensor of random integers in [low, high]: small enough that every
/// product and sum below is exact in f32, so results can be compared exactly.
Tensor randomIntegers(DType dtype, Shape shape, std::mt19937_64& rng, int low, int high) {
  Tensor tensor = *Tensor::allocate(dtype, std::move(shape));
  std::uniform_int_distribution<int> uniform(low, high);
  for (int64_t i = 0; i < tensor.elementCount(); ++i)
    tensor.set(i, uniform(rng));
  return tensor;
}

TEST(CpuConv2d, BatchesLargerThanOneColumnChunkMatchTheReference) {
  // One image's column matrix here (16 taps x 725^2 positions) exceeds half
  // the kernel's column budget, so each image is its own chunk and the weight
  // gradient adds three per-chunk GEMMs. Integer data keeps every sum exact
  // (|dw| < 3 * 725^2 * 4 < 2^24), so a lost or doubled chunk cannot hide
  // inside a rounding bound.
  ConvShape c{.label = "chunked", .x = {3, 1, 728, 728}, .w = {1, 1, 4, 4}};
  std::mt19937_64 rng(23);
  Tensor x = randomIntegers(DType::F32, c.x, rng, -2, 2), w = randomIntegers(DType::F32, c.w, rng, -2, 2);
  Tensor bias = randomIntegers(DType::F32, {1}, rng, -2, 2), dy = randomIntegers(DType::F32, c.y(), rng, -2, 2);
  ConvResults results = runConv(c, x, w, &bias, dy, false);
  ASSERT_TRUE(results.y.defined());
  EXPECT_TRUE(allClose(results.y, forwardReference(c, x, w, &bias).value, {0, 0}));
  EXPECT_TRUE(allClose(results.dx, gradInputReference(c, dy, w).value, {0, 0}));
  EXPECT_TRUE(allClose(results.dw, gradWeightReference(c, dy, x).value, {0, 0}));
}

//===----------------------------------------------------------------------===//
// Gradient checks in f64
//===----------------------------------------------------------------------===//

TEST(CpuGradientCheck, Conv2dBothGradients) {
  std::mt19937_64 rng(24);
  std::vector<ConvShape> configs = {
      {.label = "stride 2, padding 1", .x = {2, 2, 5, 5}, .w = {3, 2, 3, 3}, .stride = {2, 2}, .padding = {1, 1}},
      {.label = "groups 2, dilation 2", .x = {1, 4, 6, 5}, .w = {4, 2, 2, 3}, .padding = {1, 2},
       .dilation = {2, 2}, .groups = 2},
  };
  for (const ConvShape& c : configs) {
    for (bool nhwc : {false, true}) {
      Tensor x = randomTensor(DType::F64, c.x, rng), w = randomTensor(DType::F64, c.w, rng);
      Tensor bias = randomTensor(DType::F64, {c.w[0]}, rng), dy = randomTensor(DType::F64, c.y(), rng);
      if (nhwc)
        x = toChannelsLast(x), w = toChannelsLast(w), dy = toChannelsLast(dy);
      AttributeMap attributes = c.attributes(nhwc);
      auto ofX = [&](const Tensor& v) {
        return runOp("jit.conv2d", {&v, &w, &bias}, {dy.type()}, attributes)[0];
      };
      auto ofW = [&](const Tensor& v) {
        return runOp("jit.conv2d", {&x, &v, &bias}, {dy.type()}, attributes)[0];
      };
      std::vector<double> weights = dy.toDoubles();
      EXPECT_TRUE(allClose(runOp("jit.conv2d_grad_input", {&dy, &w}, {x.type()}, attributes)[0],
                           numericalGradient(ofX, x, weights), kGradientCheck))
          << c.label << " nhwc " << nhwc;
      EXPECT_TRUE(allClose(runOp("jit.conv2d_grad_weight", {&dy, &x}, {w.type()}, attributes)[0],
                           numericalGradient(ofW, w, weights), kGradientCheck))
          << c.label << " nhwc " << nhwc;
    }
  }
}

//===----------------------------------------------------------------------===//
// Batch norm
//===----------------------------------------------------------------------===//

/// [outer, channels, inner] around the channel axis.
struct ChannelSplit {
  int64_t outer = 1, channels = 1, inner = 1;
  ChannelSplit(const Shape& shape, int64_t axis) : channels(shape[size_t(axis)]) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (int64_t(d) < axis)
        outer *= shape[d];
      else if (int64_t(d) > axis)
        inner *= shape[d];
    }
  }
  int64_t channelOf(int64_t i) const { return (i / inner) % channels; }
  int64_t perChannel() const { return outer * inner; }
};

struct BatchNormReference {
  std::vector<double> y, yBound, mean, invstd, runningMean, runningVar;
};

/// Training (batch statistics) or inference (running statistics).
BatchNormReference batchNormReference(const Tensor& x, int64_t axis, const Tensor* weight, const Tensor* bias,
                                      const Tensor& runningMean, const Tensor& runningVar, double eps,
                                      double momentum, bool training) {
  ChannelSplit split(x.shape(), axis);
  int64_t channels = split.channels;
  double count = double(split.perChannel());
  BatchNormReference r;
  std::vector<double> sums(size_t(channels), 0.0), squares(size_t(channels), 0.0);
  for (int64_t i = 0; i < x.elementCount(); ++i)
    sums[size_t(split.channelOf(i))] += x.at(i);
  for (int64_t c = 0; c < channels; ++c)
    r.mean.push_back(sums[size_t(c)] / count);
  for (int64_t i = 0; i < x.elementCount(); ++i) {
    double centred = x.at(i) - r.mean[size_t(split.channelOf(i))];
    squares[size_t(split.channelOf(i))] += centred * centred;
  }
  for (int64_t c = 0; c < channels; ++c) {
    double var = squares[size_t(c)] / count;
    r.invstd.push_back(1 / std::sqrt(var + eps));
    r.runningMean.push_back((1 - momentum) * runningMean.at(c) + momentum * r.mean[size_t(c)]);
    r.runningVar.push_back((1 - momentum) * runningVar.at(c) + momentum * var * count / (count - 1));
  }
  double roundoff = accumulationRoundoff(x.dtype());
  for (int64_t i = 0; i < x.elementCount(); ++i) {
    int64_t c = split.channelOf(i);
    double mean = training ? r.mean[size_t(c)] : runningMean.at(c);
    double invstd = training ? r.invstd[size_t(c)] : 1 / std::sqrt(runningVar.at(c) + eps);
    double w = weight ? weight->at(c) : 1.0, b = bias ? bias->at(c) : 0.0;
    r.y.push_back((x.at(i) - mean) * invstd * w + b);
    // The kernel normalises in the compute type with the rounded statistics.
    r.yBound.push_back(8 * roundoff * ((std::abs(x.at(i)) + std::abs(mean)) * invstd * std::abs(w) + std::abs(b)));
  }
  return r;
}

struct BatchNormCase {
  Shape x;
  int64_t axis;
};

AttributeMap batchNormAttributes(int64_t axis, bool training) {
  AttributeMap attributes = {{"axis", axis}, {"eps", 1e-3}};
  if (training)
    attributes["momentum"] = 0.25;
  return attributes;
}

TEST(CpuBatchNorm, TrainingMatchesTheReferenceWithUnbiasedRunningVariance) {
  std::mt19937_64 rng(31);
  std::vector<BatchNormCase> cases = {{{4, 3, 5, 2}, 1}, {{6, 4}, 1}, {{2, 3, 5}, 2}, {{3, 2, 2, 4}, 3}};
  for (DType dtype : kFloatTypes) {
    DType statistics = statisticsTypeOf(dtype);
    for (const BatchNormCase& c : cases) {
      int64_t channels = c.x[size_t(c.axis)];
      // Offset from zero, so a one-pass variance would lose digits.
      Tensor x = randomTensor(dtype, c.x, rng, 2, 5);
      Tensor weight = randomTensor(statistics, {channels}, rng, 0.5, 1.5);
      Tensor bias = randomTensor(statistics, {channels}, rng, -0.5, 0.5);
      Tensor runningMean = randomTensor(statistics, {channels}, rng);
      Tensor runningVar = randomTensor(statistics, {channels}, rng, 0.5, 2);
      for (bool affine : {false, true}) {
        TensorType channel = tt(statistics, {channels});
        std::vector<Tensor> out =
            runOp("jit.batch_norm", {&x, affine ? &weight : nullptr, affine ? &bias : nullptr, &runningMean, &runningVar},
                  {x.type(), channel, channel, channel, channel}, batchNormAttributes(c.axis, true));
        ASSERT_EQ(out.size(), 5u);
        BatchNormReference r = batchNormReference(x, c.axis, affine ? &weight : nullptr, affine ? &bias : nullptr,
                                                  runningMean, runningVar, 1e-3, 0.25, true);
        std::string label = name(dtype) + " " + shapeToString(c.x) + " axis " + std::to_string(c.axis);
        EXPECT_TRUE(allClose(out[0], r.y, toleranceFor(dtype), r.yBound)) << label;
        EXPECT_TRUE(allClose(out[1], r.mean, toleranceFor(statistics))) << label;
        EXPECT_TRUE(allClose(out[2], r.invstd, toleranceFor(statistics))) << label;
        EXPECT_TRUE(allClose(out[3], r.runningMean, toleranceFor(statistics))) << label;
        EXPECT_TRUE(allClose(out[4], r.runningVar, toleranceFor(statistics))) << label;
      }
    }
  }
}

TEST(CpuBatchNorm, RunningStatisticsUpdatedInPlaceMatchSeparateOutputs) {
  std::mt19937_64 rng(32);
  for (DType dtype : kFloatTypes) {
    DType statistics = statisticsTypeOf(dtype);
    Tensor x = randomTensor(dtype, {4, 3, 3, 3}, rng, -1, 3);
    Tensor weight = randomTensor(statistics, {3}, rng, 0.5, 1.5), bias = randomTensor(statistics, {3}, rng);
    Tensor runningMean = randomTensor(statistics, {3}, rng), runningVar = randomTensor(statistics, {3}, rng, 0.5, 2);
    TensorType channel = tt(statistics, {3});
    std::vector<TensorType> types = {x.type(), channel, channel, channel, channel};
    AttributeMap attributes = batchNormAttributes(1, true);
    std::vector<Tensor> separate =
        runOp("jit.batch_norm", {&x, &weight, &bias, &runningMean, &runningVar}, types, attributes);
    ASSERT_EQ(separate.size(), 5u);
    Tensor meanState = *runningMean.clone(), varState = *runningVar.clone();
    Expected<std::vector<Tensor>> tied = tryRunOp("jit.batch_norm", {&x, &weight, &bias, &meanState, &varState},
                                                  types, attributes, {-1, -1, -1, 3, 4});
    // runtime/lib/Plan.cpp's mayWriteInPlace() does not list BatchNorm yet,
    // so verifyPlan rejects this plan; the test runs once it does.
    if (!tied.ok() && tied.message().find("which it also reads") != std::string::npos)
      GTEST_SKIP() << "the plan verifier rejects in-place running statistics: " << tied.message();
    ASSERT_TRUE(tied.ok()) << tied.message();
    std::vector<Tensor>& inPlace = *tied;
    ASSERT_EQ(inPlace.size(), 5u);
    EXPECT_TRUE(inPlace[3].sharesStorageWith(meanState)) << name(dtype);
    EXPECT_TRUE(inPlace[4].sharesStorageWith(varState)) << name(dtype);
    EXPECT_FALSE(meanState.bitwiseEqual(runningMean)) << name(dtype) << ": the state was not updated";
    EXPECT_TRUE(meanState.bitwiseEqual(separate[3])) << name(dtype);
    EXPECT_TRUE(varState.bitwiseEqual(separate[4])) << name(dtype);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_TRUE(inPlace[i].bitwiseEqual(separate[i])) << name(dtype) << " output " << i;
  }
}

TEST(CpuBatchNorm, InferenceNormalisesWithTheRunningStatistics) {
  std::mt19937_64 rng(33);
  for (DType dtype : kFloatTypes) {
    DType statistics = statisticsTypeOf(dtype);
    Tensor x = randomTensor(dtype, {2, 4, 3, 3}, rng, -2, 2);
    Tensor weight = randomTensor(statistics, {4}, rng, 0.5, 1.5), bias = randomTensor(statistics, {4}, rng);
    Tensor runningMean = randomTensor(statistics, {4}, rng), runningVar = randomTensor(statistics, {4}, rng, 0.5, 2);
    for (bool affine : {false, true}) {
      std::vector<Tensor> y =
          runOp("jit.batch_norm_inference",
                {&x, affine ? &weight : nullptr, affine ? &bias : nullptr, &runningMean, &runningVar}, {x.type()},
                batchNormAttributes(1, false));
      ASSERT_EQ(y.size(), 1u);
      BatchNormReference r = batchNormReference(x, 1, affine ? &weight : nullptr, affine ? &bias : nullptr,
                                                runningMean, runningVar, 1e-3, 0.0, false);
      EXPECT_TRUE(allClose(y[0], r.y, toleranceFor(dtype), r.yBound)) << name(dtype) << " affine " << affine;
    }
  }
}

TEST(CpuBatchNorm, GradientMatchesTheReferenceWithSavedStatistics) {
  std::mt19937_64 rng(34);
  std::vector<BatchNormCase> cases = {{{4, 3, 3, 2}, 1}, {{5, 6}, 1}, {{2, 3, 2, 4}, 3}};
  for (DType dtype : kFloatTypes) {
    DType statistics = statisticsTypeOf(dtype);
    double roundoff = accumulationRoundoff(dtype);
    for (const BatchNormCase& c : cases) {
      int64_t channels = c.x[size_t(c.axis)];
      TensorType channel = tt(statistics, {channels});
      Tensor x = randomTensor(dtype, c.x, rng, -1, 3), dy = randomTensor(dtype, c.x, rng);
      Tensor weight = randomTensor(statistics, {channels}, rng, 0.5, 1.5);
      Tensor runningMean = randomTensor(statistics, {channels}, rng);
      Tensor runningVar = randomTensor(statistics, {channels}, rng, 0.5, 2);
      std::vector<Tensor> forward = runOp("jit.batch_norm", {&x, &weight, nullptr, &runningMean, &runningVar},
                                          {x.type(), channel, channel, channel, channel},
                                          batchNormAttributes(c.axis, true));
      ASSERT_EQ(forward.size(), 5u);
      for (bool affine : {false, true}) {
        std::vector<Tensor> grads =
            runOp("jit.batch_norm_grad", {&dy, &x, &forward[1], &forward[2], affine ? &weight : nullptr},
                  {x.type(), channel, channel}, {{"axis", c.axis}});
        ASSERT_EQ(grads.size(), 3u);
        // The reference uses the saved statistics, as the kernel does.
        ChannelSplit split(c.x, c.axis);
        double count = double(split.perChannel());
        std::vector<double> dbias(size_t(channels), 0), dweight(size_t(channels), 0);
        std::vector<double> sumAbsDy(size_t(channels), 0), sumAbsDyXhat(size_t(channels), 0);
        std::vector<double> dweightBound(size_t(channels), 0), xhat;
        auto statistic = [&](const Tensor& t, int64_t i) { return t.at(split.channelOf(i)); };
        for (int64_t i = 0; i < x.elementCount(); ++i) {
          size_t k = size_t(split.channelOf(i));
          double mean = statistic(forward[1], i), invstd = statistic(forward[2], i);
          xhat.push_back((x.at(i) - mean) * invstd);
          dbias[k] += dy.at(i);
          dweight[k] += dy.at(i) * xhat.back();
          sumAbsDy[k] += std::abs(dy.at(i));
          sumAbsDyXhat[k] += std::abs(dy.at(i) * xhat.back());
          // xhat is computed in the compute type before the products are summed.
          dweightBound[k] += 4 * roundoff * std::abs(dy.at(i)) * (std::abs(x.at(i)) + std::abs(mean)) * invstd;
        }
        std::vector<double> dx, dxBound;
        for (int64_t i = 0; i < x.elementCount(); ++i) {
          size_t k = size_t(split.channelOf(i));
          double scale = (affine ? weight.at(int64_t(k)) : 1.0) * statistic(forward[2], i);
          double mean = statistic(forward[1], i), invstd = statistic(forward[2], i);
          dx.push_back(scale / count * (count * dy.at(i) - dbias[k] - xhat[size_t(i)] * dweight[k]));
          double terms = std::abs(dy.at(i)) + sumAbsDy[k] / count +
                         (std::abs(xhat[size_t(i)]) + (std::abs(x.at(i)) + std::abs(mean)) * invstd) *
                             sumAbsDyXhat[k] / count;
          dxBound.push_back(8 * roundoff * std::abs(scale) * terms);
        }
        std::string label = name(dtype) + " " + shapeToString(c.x) + " affine " + std::to_string(affine);
        EXPECT_TRUE(allClose(grads[0], dx, toleranceFor(dtype), dxBound)) << label;
        EXPECT_TRUE(allClose(grads[1], dweight, toleranceFor(statistics), dweightBound)) << label;
        EXPECT_TRUE(allClose(grads[2], dbias, toleranceFor(statistics))) << label;
      }
    }
  }
}

TEST(CpuBatchNorm, NhwcWithAxis3IsBitIdenticalToNchw) {
  std::mt19937_64 rng(35);
  for (DType dtype : kFloatTypes) {
    DType statistics = statisticsTypeOf(dtype);
    TensorType channel = tt(statistics, {3});
    Tensor x = randomTensor(dtype, {2, 3, 4, 5}, rng, -1, 3), dy = randomTensor(dtype, {2, 3, 4, 5}, rng);
    Tensor weight = randomTensor(statistics, {3}, rng, 0.5, 1.5), bias = randomTensor(statistics, {3}, rng);
    Tensor runningMean = randomTensor(statistics, {3}, rng), runningVar = randomTensor(statistics, {3}, rng, 0.5, 2);
    Tensor xLast = toChannelsLast(x), dyLast = toChannelsLast(dy);
    std::vector<TensorType> types = {x.type(), channel, channel, channel, channel};
    std::vector<Tensor> first = runOp("jit.batch_norm", {&x, &weight, &bias, &runningMean, &runningVar}, types,
                                      batchNormAttributes(1, true));
    types[0] = xLast.type();
    std::vector<Tensor> last = runOp("jit.batch_norm", {&xLast, &weight, &bias, &runningMean, &runningVar}, types,
                                     batchNormAttributes(3, true));
    ASSERT_EQ(first.size(), 5u);
    ASSERT_EQ(last.size(), 5u);
    EXPECT_TRUE(toChannelsFirst(last[0]).bitwiseEqual(first[0])) << name(dtype);
    for (size_t i = 1; i < 5; ++i)
      EXPECT_TRUE(last[i].bitwiseEqual(first[i])) << name(dtype) << " output " << i;

    std::vector<Tensor> inference = runOp("jit.batch_norm_inference", {&x, &weight, &bias, &runningMean, &runningVar},
                                          {x.type()}, batchNormAttributes(1, false));
    std::vector<Tensor> inferenceLast =
        runOp("jit.batch_norm_inference", {&xLast, &weight, &bias, &runningMean, &runningVar}, {xLast.type()},
              batchNormAttributes(3, false));
    EXPECT_TRUE(toChannelsFirst(inferenceLast[0]).bitwiseEqual(inference[0])) << name(dtype);

    std::vector<Tensor> grads = runOp("jit.batch_norm_grad", {&dy, &x, &first[1], &first[2], &weight},
                                      {x.type(), channel, channel}, {{"axis", int64_t(1)}});
    std::vector<Tensor> gradsLast = runOp("jit.batch_norm_grad", {&dyLast, &xLast, &last[1], &last[2], &weight},
                                          {xLast.type(), channel, channel}, {{"axis", int64_t(3)}});
    ASSERT_EQ(grads.size(), 3u);
    ASSERT_EQ(gradsLast.size(), 3u);
    EXPECT_TRUE(toChannelsFirst(gradsLast[0]).bitwiseEqual(grads[0])) << name(dtype);
    EXPECT_TRUE(gradsLast[1].bitwiseEqual(grads[1])) << name(dtype);
    EXPECT_TRUE(gradsLast[2].bitwiseEqual(grads[2])) << name(dtype);
  }
}

TEST(CpuGradientCheck, BatchNorm) {
  std::mt19937_64 rng(36);
  for (int64_t axis : {int64_t(1), int64_t(3)}) {
    Tensor x = randomTensor(DType::F64, {3, 2, 2, 2}, rng, -1, 2), dy = randomTensor(DType::F64, {3, 2, 2, 2}, rng);
    int64_t channels = x.shape()[size_t(axis)];
    TensorType channel = tt(DType::F64, {channels});
    Tensor weight = randomTensor(DType::F64, {channels}, rng, 0.5, 1.5), bias = randomTensor(DType::F64, {channels}, rng);
    Tensor runningMean = randomTensor(DType::F64, {channels}, rng);
    Tensor runningVar = randomTensor(DType::F64, {channels}, rng, 0.5, 2);
    std::vector<TensorType> types = {x.type(), channel, channel, channel, channel};
    AttributeMap attributes = batchNormAttributes(axis, true);
    auto normalise = [&](const Tensor& v, const Tensor& w, const Tensor& b) {
      return runOp("jit.batch_norm", {&v, &w, &b, &runningMean, &runningVar}, types, attributes);
    };
    std::vector<Tensor> forward = normalise(x, weight, bias);
    ASSERT_EQ(forward.size(), 5u);
    std::vector<Tensor> grads = runOp("jit.batch_norm_grad", {&dy, &x, &forward[1], &forward[2], &weight},
                                      {x.type(), channel, channel}, {{"axis", axis}});
    ASSERT_EQ(grads.size(), 3u);
    std::vector<double> weights = dy.toDoubles();
    auto ofX = [&](const Tensor& v) { return normalise(v, weight, bias)[0]; };
    auto ofWeight = [&](const Tensor& w) { return normalise(x, w, bias)[0]; };
    auto ofBias = [&](const Tensor& b) { return normalise(x, weight, b)[0]; };
    EXPECT_TRUE(allClose(grads[0], numericalGradient(ofX, x, weights), kGradientCheck)) << "axis " << axis;
    EXPECT_TRUE(allClose(grads[1], numericalGradient(ofWeight, weight, weights), kGradientCheck)) << "axis " << axis;
    EXPECT_TRUE(allClose(grads[2], numericalGradient(ofBias, bias, weights), kGradientCheck)) << "axis " << axis;
  }
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

/// Calls f(yIndex, window, divisor) per output element, with the NCHW
/// indices of the window's in-bounds elements in row-major order.
template <typename F>
void forEachWindow(const PoolShape& c, F&& f) {
  const std::vector<int64_t> &kernel = c.kernel, &stride = c.stride, &padding = c.padding;
  Shape out = c.y();
  int64_t height = c.x[2], width = c.x[3];
  for (int64_t plane = 0; plane < out[0] * out[1]; ++plane)
    for (int64_t oh = 0; oh < out[2]; ++oh)
      for (int64_t ow = 0; ow < out[3]; ++ow) {
        std::vector<int64_t> window;
        int64_t paddedRows = 0, paddedColumns = 0;
        for (int64_t kh = 0; kh < kernel[0]; ++kh) {
          int64_t ih = oh * stride[0] - padding[0] + kh;
          paddedRows += ih < height + padding[0] ? 1 : 0;
        }
        for (int64_t kw = 0; kw < kernel[1]; ++kw) {
          int64_t iw = ow * stride[1] - padding[1] + kw;
          paddedColumns += iw < width + padding[1] ? 1 : 0;
        }
        for (int64_t kh = 0; kh < kernel[0]; ++kh)
          for (int64_t kw = 0; kw < kernel[1]; ++kw) {
            int64_t ih = oh * stride[0] - padding[0] + kh, iw = ow * stride[1] - padding[1] + kw;
            if (ih >= 0 && ih < height && iw >= 0 && iw < width)
              window.push_back((plane * height + ih) * width + iw);
          }
        double divisor = c.countIncludePad ? double(paddedRows * paddedColumns) : double(window.size());
        f(((plane * out[2]) + oh) * out[3] + ow, window, divisor);
      }
}

/// The index PyTorch's CPU max pooling picks: the first element greater
/// than all before it, or NaN (so the last NaN).
int64_t windowArgmax(const Tensor& x, const std::vector<int64_t>& window) {
  int64_t best = window.front();
  double max = -INFINITY;
  for (int64_t i : window)
    if (x.at(i) > max || std::isnan(x.at(i)))
      max = x.at(i), best = i;
  return best;
}

std::vector<PoolShape> poolConfigs() {
  return {
      {.label = "2x2 stride 2", .x = {2, 3, 6, 6}, .kernel = {2, 2}, .stride = {2, 2}},
      {.label = "3x3 stride 2 padding 1 (ResNet)", .x = {2, 2, 7, 8}, .kernel = {3, 3}, .stride = {2, 2},
       .padding = {1, 1}},
      {.label = "overlapping 3x2 stride 1x2", .x = {1, 3, 5, 6}, .kernel = {3, 2}, .stride = {1, 2},
       .padding = {1, 0}},
      {.label = "ceil mode", .x = {2, 2, 8, 7}, .kernel = {3, 2}, .stride = {2, 2}, .ceilMode = true},
      {.label = "ceil mode with padding", .x = {1, 2, 6, 7}, .kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1},
       .ceilMode = true},
      {.label = "ceil mode with padding, excluding padding", .x = {1, 2, 6, 7}, .kernel = {3, 3}, .stride = {2, 2},
       .padding = {1, 1}, .ceilMode = true, .countIncludePad = false},
      {.label = "padding, excluding padding", .x = {2, 2, 5, 5}, .kernel = {2, 3}, .stride = {1, 2},
       .padding = {1, 1}, .countIncludePad = false},
  };
}

TEST(CpuPool2d, MaxPoolForwardAndBackwardMatchTheReference) {
  std::mt19937_64 rng(41);
  for (DType dtype : kFloatTypes) {
    for (const PoolShape& c : poolConfigs()) {
      Tensor x = randomTensor(dtype, c.x, rng), dy = randomTensor(dtype, c.y(), rng);
      AttributeMap attributes = c.attributes(false, false);
      std::vector<Tensor> y = runOp("jit.max_pool2d", {&x}, {dy.type()}, attributes);
      std::vector<Tensor> dx = runOp("jit.max_pool2d_grad", {&dy, &x}, {x.type()}, attributes);
      ASSERT_EQ(y.size(), 1u);
      ASSERT_EQ(dx.size(), 1u);
      std::vector<double> expectedY(size_t(dy.elementCount()));
      Accumulation expectedDx(x.elementCount());
      forEachWindow(c, [&](int64_t yi, const std::vector<int64_t>& window, double) {
        int64_t best = windowArgmax(x, window);
        expectedY[size_t(yi)] = x.at(best);
        expectedDx.add(best, dy.at(yi));
      });
      // The maximum is an input value: exact in every dtype.
      EXPECT_EQ(y[0].toDoubles(), expectedY) << name(dtype) << " " << c.label;
      EXPECT_TRUE(allClose(dx[0], expectedDx.value, toleranceFor(dtype), expectedDx.bound(dtype)))
          << name(dtype) << " " << c.label;
    }
  }
}

TEST(CpuPool2d, AvgPoolForwardAndBackwardMatchTheReference) {
  std::mt19937_64 rng(42);
  for (DType dtype : kFloatTypes) {
    for (const PoolShape& c : poolConfigs()) {
      Tensor x = randomTensor(dtype, c.x, rng), dy = randomTensor(dtype, c.y(), rng);
      AttributeMap attributes = c.attributes(true, false);
      std::vector<Tensor> y = runOp("jit.avg_pool2d", {&x}, {dy.type()}, attributes);
      std::vector<Tensor> dx = runOp("jit.avg_pool2d_grad", {&dy, &x}, {x.type()}, attributes);
      ASSERT_EQ(y.size(), 1u);
      ASSERT_EQ(dx.size(), 1u);
      Accumulation expectedY(dy.elementCount()), expectedDx(x.elementCount());
      forEachWindow(c, [&](int64_t yi, const std::vector<int64_t>& window, double divisor) {
        for (int64_t i : window) {
          expectedY.add(yi, x.at(i) / divisor);
          expectedDx.add(i, dy.at(yi) / divisor);
        }
      });
      EXPECT_TRUE(allClose(y[0], expectedY.value, toleranceFor(dtype), expectedY.bound(dtype)))
          << name(dtype) << " " << c.label;
      EXPECT_TRUE(allClose(dx[0], expectedDx.value, toleranceFor(dtype), expectedDx.bound(dtype)))
          << name(dtype) << " " << c.label;
    }
  }
}

TEST(CpuPool2d, AvgPoolDivisorsFollowPyTorch) {
  // x = 1..16 in a 4x4 plane; 3x3 windows, stride 2, padding 1, ceil mode:
  // output 3x3 (the last window starts at row 3, inside the input). Window
  // (0,0) covers rows/cols -1..1: 4 elements in bounds, 9 with padding.
  // Window (2,2) covers rows/cols 3..5, clipped to the padded input (..4):
  // 2x2 = 4 padded positions, of which 1 is in the input.
  std::vector<double> values;
  for (int i = 1; i <= 16; ++i)
    values.push_back(i);
  Tensor x = filled(DType::F64, {1, 1, 4, 4}, values);
  PoolShape c{.x = {1, 1, 4, 4}, .kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceilMode = true};
  ASSERT_EQ(c.y(), (Shape{1, 1, 3, 3}));
  std::vector<Tensor> included = runOp("jit.avg_pool2d", {&x}, {tt(DType::F64, c.y())}, c.attributes(true, false));
  c.countIncludePad = false;
  std::vector<Tensor> excluded = runOp("jit.avg_pool2d", {&x}, {tt(DType::F64, c.y())}, c.attributes(true, false));
  ASSERT_EQ(included.size(), 1u);
  ASSERT_EQ(excluded.size(), 1u);
  EXPECT_EQ(included[0].at(0), (1 + 2 + 5 + 6) / 9.0);
  EXPECT_EQ(excluded[0].at(0), (1 + 2 + 5 + 6) / 4.0);
  EXPECT_EQ(included[0].at(8), 16 / 4.0);
  EXPECT_EQ(excluded[0].at(8), 16 / 1.0);
  // Window (0,1) covers rows -1..1 and columns 1..3: 2x3 in bounds.
  EXPECT_EQ(included[0].at(1), (2 + 3 + 4 + 6 + 7 + 8) / 9.0);
  EXPECT_EQ(excluded[0].at(1), (2 + 3 + 4 + 6 + 7 + 8) / 6.0);

  // The gradient spreads dy / divisor over the in-bounds elements only.
  Tensor dy = filled(DType::F64, {1, 1, 3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 8});
  c.countIncludePad = true;
  std::vector<Tensor> dx = runOp("jit.avg_pool2d_grad", {&dy, &x}, {x.type()}, c.attributes(true, false));
  ASSERT_EQ(dx.size(), 1u);
  std::vector<double> expected(16, 0.0);
  expected[15] = 2; // 8 / 4
  EXPECT_EQ(dx[0].toDoubles(), expected);
}

TEST(CpuPool2d, MaxPoolTiesGoToTheFirstMaximumAndOverlapsAccumulate) {
  // All equal: each 2x2 window (stride 1) routes its gradient to its own
  // top-left element, the first in row-major order.
  Tensor equal = filled(DType::F32, {1, 1, 3, 3}, std::vector<double>(9, 1.0));
  Tensor dy = filled(DType::F32, {1, 1, 2, 2}, {1, 2, 3, 4});
  PoolShape c{.x = {1, 1, 3, 3}, .kernel = {2, 2}, .stride = {1, 1}};
  std::vector<Tensor> dx = runOp("jit.max_pool2d_grad", {&dy, &equal}, {equal.type()}, c.attributes(false, false));
  ASSERT_EQ(dx.size(), 1u);
  EXPECT_EQ(dx[0].toDoubles(), (std::vector<double>{1, 2, 0, 3, 4, 0, 0, 0, 0}));

  // A single peak in the centre is the maximum of all four windows: its
  // gradient is the sum of theirs.
  Tensor peak = filled(DType::F32, {1, 1, 3, 3}, {0, 0, 0, 0, 5, 0, 0, 0, 0});
  dx = runOp("jit.max_pool2d_grad", {&dy, &peak}, {peak.type()}, c.attributes(false, false));
  ASSERT_EQ(dx.size(), 1u);
  EXPECT_EQ(dx[0].toDoubles(), (std::vector<double>{0, 0, 0, 0, 10, 0, 0, 0, 0}));

  // Padding is -inf, never a maximum: a window of -inf inputs and padding
  // picks its first in-bounds element. The four 3x3 windows (stride 2,
  // padding 1) over a 3x3 input start at (-1,-1), (-1,1), (1,-1) and (1,1),
  // so their first in-bounds elements are (0,0), (0,1), (1,0) and (1,1).
  Tensor negative = filled(DType::F32, {1, 1, 3, 3}, std::vector<double>(9, -INFINITY));
  PoolShape padded{.x = {1, 1, 3, 3}, .kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  ASSERT_EQ(padded.y(), (Shape{1, 1, 2, 2}));
  std::vector<Tensor> y =
      runOp("jit.max_pool2d", {&negative}, {tt(DType::F32, padded.y())}, padded.attributes(false, false));
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].toDoubles(), std::vector<double>(4, -INFINITY));
  dx = runOp("jit.max_pool2d_grad", {&dy, &negative}, {negative.type()}, padded.attributes(false, false));
  ASSERT_EQ(dx.size(), 1u);
  EXPECT_EQ(dx[0].toDoubles(), (std::vector<double>{1, 2, 0, 3, 4, 0, 0, 0, 0}));
}

TEST(CpuPool2d, MaxPoolPropagatesNanAndRoutesItsGradientThere) {
  for (DType dtype : kFloatTypes) {
    // One 2x3 window: 1, NaN, 7 / 3, NaN, 2.
    Tensor x = filled(dtype, {1, 1, 2, 3}, {1, NAN, 7, 3, NAN, 2});
    Tensor dy = filled(dtype, {1, 1, 1, 1}, {5});
    PoolShape c{.x = {1, 1, 2, 3}, .kernel = {2, 3}, .stride = {2, 3}};
    std::vector<Tensor> y = runOp("jit.max_pool2d", {&x}, {dy.type()}, c.attributes(false, false));
    std::vector<Tensor> dx = runOp("jit.max_pool2d_grad", {&dy, &x}, {x.type()}, c.attributes(false, false));
    ASSERT_EQ(y.size(), 1u);
    ASSERT_EQ(dx.size(), 1u);
    EXPECT_TRUE(std::isnan(y[0].at(0))) << name(dtype);
    // PyTorch's CPU rule (value > max || isnan(value)) lets every NaN take
    // over, so the gradient goes to the last NaN of the window.
    EXPECT_EQ(dx[0].toDoubles(), (std::vector<double>{0, 0, 0, 0, 5, 0})) << name(dtype);

    // A NaN before a larger value still wins: nothing compares greater than NaN.
    Tensor early = filled(dtype, {1, 1, 2, 3}, {NAN, 1, 7, 3, 4, 2});
    dx = runOp("jit.max_pool2d_grad", {&dy, &early}, {early.type()}, c.attributes(false, false));
    ASSERT_EQ(dx.size(), 1u);
    EXPECT_EQ(dx[0].toDoubles(), (std::vector<double>{5, 0, 0, 0, 0, 0})) << name(dtype);
  }
}

TEST(CpuPool2d, NhwcIsBitIdenticalToNchw) {
  std::mt19937_64 rng(43);
  for (DType dtype : kFloatTypes) {
    for (const PoolShape& c : poolConfigs()) {
      Tensor x = randomTensor(dtype, c.x, rng), dy = randomTensor(dtype, c.y(), rng);
      // Ties, so that the first-maximum rule is exercised in both layouts.
      x.set(0, 1.0), x.set(1, 1.0), x.set(c.x[3], 1.0);
      Tensor xLast = toChannelsLast(x), dyLast = toChannelsLast(dy);
      for (bool average : {false, true}) {
        std::string forward = average ? "jit.avg_pool2d" : "jit.max_pool2d";
        std::string backward = forward + "_grad";
        std::vector<Tensor> y = runOp(forward, {&x}, {dy.type()}, c.attributes(average, false));
        std::vector<Tensor> yLast = runOp(forward, {&xLast}, {dyLast.type()}, c.attributes(average, true));
        std::vector<Tensor> dx = runOp(backward, {&dy, &x}, {x.type()}, c.attributes(average, false));
        std::vector<Tensor> dxLast = runOp(backward, {&dyLast, &xLast}, {xLast.type()}, c.attributes(average, true));
        ASSERT_TRUE(y.size() == 1 && yLast.size() == 1 && dx.size() == 1 && dxLast.size() == 1) << c.label;
        EXPECT_TRUE(toChannelsFirst(yLast[0]).bitwiseEqual(y[0])) << name(dtype) << " " << forward << " " << c.label;
        EXPECT_TRUE(toChannelsFirst(dxLast[0]).bitwiseEqual(dx[0])) << name(dtype) << " " << backward << " " << c.label;
      }
    }
  }
}

TEST(CpuGradientCheck, AvgPool) {
  std::mt19937_64 rng(44);
  for (const PoolShape& c : poolConfigs()) {
    for (bool nhwc : {false, true}) {
      Tensor x = randomTensor(DType::F64, c.x, rng), dy = randomTensor(DType::F64, c.y(), rng);
      if (nhwc)
        x = toChannelsLast(x), dy = toChannelsLast(dy);
      AttributeMap attributes = c.attributes(true, nhwc);
      auto pool = [&](const Tensor& v) { return runOp("jit.avg_pool2d", {&v}, {dy.type()}, attributes)[0]; };
      EXPECT_TRUE(allClose(runOp("jit.avg_pool2d_grad", {&dy, &x}, {x.type()}, attributes)[0],
                           numericalGradient(pool, x, dy.toDoubles()), kGradientCheck))
          << c.label << " nhwc " << nhwc;
    }
  }
}

} // namespace
