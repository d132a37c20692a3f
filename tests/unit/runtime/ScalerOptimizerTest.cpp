// The loss scaler (PyTorch GradScaler's arithmetic and Paddle's variant) and
// the fused optimizer updates, including their predicated (skipped) form.

#include "ampjit/runtime/LossScaler.h"

#include "RuntimeTestUtil.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>

namespace {

using namespace ampjit::runtime;
using namespace ampjit::runtime::test;

/// Scaler state tensors updated in place by amp.update_scale, as a traced step holds them.
struct ScalerTensors {
  Tensor scale, good, bad, skipped;
  explicit ScalerTensors(float initialScale)
      : scale(filled(DType::F32, {}, {initialScale})), good(filled(DType::I64, {}, {0})),
        bad(filled(DType::I64, {}, {0})), skipped(filled(DType::I64, {}, {0})) {}

  void update(bool finite, const AttributeMap& attributes) {
    Tensor flag = filled(DType::I1, {}, {finite ? 1.0 : 0.0});
    std::vector<Tensor> out =
        runOp("amp.update_scale", {&scale, &good, &bad, &skipped, &flag},
              {scale.type(), good.type(), bad.type(), skipped.type()}, attributes, {0, 1, 2, 3});
    ASSERT_EQ(out.size(), 4u);
    EXPECT_TRUE(out[0].sharesStorageWith(scale)); // updated in place, not copied
  }
  float value() const { return scale.elements<float>()[0]; }
  int64_t counter(const Tensor& t) const { return t.elements<int64_t>()[0]; }
};

TEST(LossScaler, PyTorchSequence) {
  // GradScaler(init_scale=4, growth_factor=2, backoff_factor=0.25, growth_interval=2):
  // the scale after each update is 4, 8, then 2 on an overflow.
  ScalerTensors scaler(4.0f);
  AttributeMap attributes = {{"growth_factor", 2.0}, {"backoff_factor", 0.25}, {"growth_interval", int64_t(2)}};
  scaler.update(true, attributes);
  EXPECT_EQ(scaler.value(), 4.0f);
  EXPECT_EQ(scaler.counter(scaler.good), 1);
  scaler.update(true, attributes);
  EXPECT_EQ(scaler.value(), 8.0f);
  EXPECT_EQ(scaler.counter(scaler.good), 0);
  scaler.update(false, attributes);
  EXPECT_EQ(scaler.value(), 2.0f);
  EXPECT_EQ(scaler.counter(scaler.good), 0);
  EXPECT_EQ(scaler.counter(scaler.skipped), 1);
  // The growth counter restarts after an overflow.
  scaler.update(true, attributes);
  EXPECT_EQ(scaler.value(), 2.0f);
  scaler.update(true, attributes);
  EXPECT_EQ(scaler.value(), 4.0f);
  EXPECT_EQ(scaler.counter(scaler.skipped), 1);
}

TEST(LossScaler, NeverGrowsToInfinity) {
  ScalerTensors scaler(FLT_MAX / 1.5f);
  AttributeMap attributes = {{"growth_interval", int64_t(1)}};
  scaler.update(true, attributes);
  EXPECT_EQ(scaler.value(), FLT_MAX / 1.5f);
  EXPECT_EQ(scaler.counter(scaler.good), 0); // the counter resets whether or not the scale grew
  EXPECT_TRUE(std::isfinite(scaler.value()));
}

TEST(LossScaler, PaddleVariantBacksOffEveryNOverflowsAndKeepsTheScaleAtLeastOne) {
  // Paddle: incr_ratio 2, decr_ratio 0.5, incr_every_n_steps 2, decr_every_n_nan_or_inf 2.
  ScalerTensors scaler(3.0f);
  AttributeMap attributes = {{"growth_factor", 2.0},     {"backoff_factor", 0.5}, {"growth_interval", int64_t(2)},
                             {"backoff_interval", int64_t(2)}, {"min_scale", 1.0}};
  scaler.update(false, attributes);
  EXPECT_EQ(scaler.value(), 3.0f); // one overflow is not enough
  EXPECT_EQ(scaler.counter(scaler.bad), 1);
  scaler.update(true, attributes); // a finite step resets the bad-step counter
  EXPECT_EQ(scaler.counter(scaler.bad), 0);
  EXPECT_EQ(scaler.counter(scaler.good), 1);
  scaler.update(false, attributes);
  scaler.update(false, attributes);
  EXPECT_EQ(scaler.value(), 1.5f);
  EXPECT_EQ(scaler.counter(scaler.bad), 0);
  scaler.update(false, attributes);
  scaler.update(false, attributes);
  EXPECT_EQ(scaler.value(), 1.0f); // max(0.75, min_scale)
  EXPECT_EQ(scaler.counter(scaler.skipped), 5);
}

TEST(LossScaler, ApexMaxLossScaleCapsTheGrowthAndMinLossScaleTheBackoff) {
  // apex: scale = min(max_loss_scale, scale * 2) on growth, max(min_loss_scale, scale / 2) on backoff.
  ScalerTensors scaler(3.0f);
  AttributeMap attributes = {{"growth_interval", int64_t(1)}, {"min_scale", 2.0}, {"max_scale", 10.0}};
  std::vector<std::pair<bool, float>> sequence = {{true, 6.0f},  {true, 10.0f}, {true, 10.0f}, {false, 5.0f},
                                                  {false, 2.5f}, {false, 2.0f},  {true, 4.0f}};
  for (auto [finite, expected] : sequence) {
    scaler.update(finite, attributes);
    EXPECT_EQ(scaler.value(), expected) << (finite ? "a finite step" : "an overflow");
  }
  // No cap unless given; a cap beyond float's range still never makes inf.
  ScalerTensors uncapped(FLT_MAX / 1.5f);
  uncapped.update(true, {{"growth_interval", int64_t(1)}, {"max_scale", 1e300}});
  EXPECT_EQ(uncapped.value(), FLT_MAX / 1.5f);
}

TEST(LossScaler, AMaxScaleBelowTheMinOrNotPositiveIsRefused) {
  ScalerTensors scaler(4.0f);
  Tensor flag = filled(DType::I1, {}, {1.0});
  for (double maxScale : {0.0, -1.0, 0.5, std::nan("")}) {
    Expected<std::vector<Tensor>> out =
        tryRunOp("amp.update_scale", {&scaler.scale, &scaler.good, &scaler.bad, &scaler.skipped, &flag},
                 {scaler.scale.type(), scaler.good.type(), scaler.bad.type(), scaler.skipped.type()},
                 {{"min_scale", 1.0}, {"max_scale", maxScale}});
    ASSERT_FALSE(out.ok()) << maxScale;
    EXPECT_NE(out.message().find("max_scale must be positive and at least min_scale"), std::string::npos)
        << out.message();
  }
  EXPECT_EQ(scaler.value(), 4.0f);
}

/// PyTorch's _amp_update_scale_cpu_ as written there (with `==`), for a
/// cross-check over long random sequences.
void pytorchUpdate(float& scale, int64_t& tracker, bool foundInf, double growth, double backoff, int64_t interval) {
  if (foundInf) {
    scale = float(scale * backoff);
    tracker = 0;
  } else {
    int64_t successful = tracker + 1;
    if (successful == interval) {
      float grown = float(scale * growth);
      if (std::isfinite(grown))
        scale = grown;
      tracker = 0;
    } else {
      tracker = successful;
    }
  }
}

TEST(LossScaler, AgreesWithPyTorchOverLongSequences) {
  std::mt19937_64 rng(20);
  UpdateScaleParams params;
  params.growthFactor = 2.0;
  params.backoffFactor = 0.5;
  params.growthInterval = 3;
  LossScalerState state{65536.0f, 0, 0, 0};
  float scale = 65536.0f;
  int64_t tracker = 0, skipped = 0;
  for (int i = 0; i < 20000; ++i) {
    bool finite = rng() % 5 != 0;
    state = updateLossScale(state, finite, params);
    pytorchUpdate(scale, tracker, !finite, 2.0, 0.5, 3);
    skipped += !finite;
    ASSERT_EQ(state.scale, scale) << "update " << i;
    ASSERT_EQ(state.goodSteps, tracker);
    ASSERT_EQ(state.skippedSteps, skipped);
  }
}

TEST(LossScaler, AllFiniteOverMixedPrecisions) {
  Tensor half = filled(DType::F16, {3}, {1, 2, 3});
  Tensor bf = filled(DType::BF16, {2}, {1, -2});
  Tensor single = filled(DType::F32, {2, 2}, {0.5});
  auto check = [&]() {
    return runOp("amp.all_finite", {&half, &bf, &single}, {tt(DType::I1, {})})[0].at(0);
  };
  EXPECT_EQ(check(), 1.0);
  half.bits16()[1] = 0x7C00; // +inf
  EXPECT_EQ(check(), 0.0);
  half.bits16()[1] = 0x3C00;
  bf.bits16()[0] = 0xFFC1; // a negative NaN
  EXPECT_EQ(check(), 0.0);
  bf.bits16()[0] = 0x3F80;
  single.elements<float>()[3] = -INFINITY;
  EXPECT_EQ(check(), 0.0);
}

// The check reads bits a chunk at a time: one inf or NaN at either end of a
// chunk, or in the short last chunk, of a buffer in each dtype must be found,
// and the largest finite values and negative zero must not count.
TEST(LossScaler, AllFiniteFindsOneNonFiniteValueAnywhereInEachDtype) {
  const int64_t count = 2051; // two full chunks of 1024 and three in the tail
  for (DType dtype : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    double largest = dtype == DType::F16    ? 65504.0
                     : dtype == DType::BF16 ? 0x1.FEp127
                     : dtype == DType::F32  ? double(std::numeric_limits<float>::max())
                                            : std::numeric_limits<double>::max();
    std::vector<double> values(size_t(count), 1.5);
    values[0] = largest;
    values[1] = -largest;
    values[2] = -0.0;
    Tensor grad = filled(dtype, {count}, values);
    auto check = [&]() { return runOp("amp.all_finite", {&grad}, {tt(DType::I1, {})})[0].at(0); };
    ASSERT_EQ(check(), 1.0) << dtypeName(dtype);
    for (int64_t at : {int64_t(5), int64_t(1023), int64_t(1024), int64_t(2047), int64_t(2048), count - 1}) {
      for (double bad : {double(INFINITY), -double(INFINITY), double(NAN)}) {
        grad.set(at, bad);
        EXPECT_EQ(check(), 0.0) << dtypeName(dtype) << " with " << bad << " at " << at;
        grad.set(at, 1.5);
      }
    }
    EXPECT_EQ(check(), 1.0) << dtypeName(dtype);
  }
}

TEST(LossScaler, ScaleLossAndUnscaleAndCheck) {
  Tensor loss = filled(DType::F32, {}, {0.75});
  Tensor scale = filled(DType::F32, {}, {65536});
  EXPECT_EQ(runOp("amp.scale_loss", {&loss, &scale}, {loss.type()})[0].at(0), 49152.0);
  Tensor halfLoss = filled(DType::F16, {1}, {2});
  EXPECT_TRUE(std::isinf(runOp("amp.scale_loss", {&halfLoss, &scale}, {halfLoss.type()})[0].at(0)));

  // Gradients unscaled in fp32 and rounded to their own dtype, in place.
  Tensor inv = filled(DType::F32, {}, {1.0 / 1024});
  Tensor g16 = filled(DType::F16, {3}, {1024, 3, -2048});
  Tensor g32 = filled(DType::F32, {2}, {1, 1e30});
  std::vector<Tensor> out = runOp("amp.unscale_and_check", {&inv, &g16, &g32},
                                  {g16.type(), g32.type(), tt(DType::I1, {})}, {}, {1, 2, -1});
  EXPECT_TRUE(out[0].sharesStorageWith(g16));
  EXPECT_EQ(g16.toDoubles(), (std::vector<double>{1, 3.0 / 1024, -2}));
  EXPECT_EQ(g32.at(1), double(float(1e30f * float(1.0 / 1024))));
  EXPECT_EQ(out[2].at(0), 1.0);
  g16.bits16()[0] = 0x7E00; // NaN
  out = runOp("amp.unscale_and_check", {&inv, &g16, &g32}, {g16.type(), g32.type(), tt(DType::I1, {})});
  EXPECT_EQ(out[2].at(0), 0.0);
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

struct SgdReference {
  double momentum = 0, dampening = 0, weightDecay = 0;
  bool nesterov = false, maximize = false;
  /// PyTorch's _single_tensor_sgd on one element, in double.
  void step(double& p, double& buffer, double grad, double lr, bool first) const {
    double g = maximize ? -grad : grad;
    if (weightDecay != 0)
      g += weightDecay * p;
    if (momentum != 0) {
      buffer = first ? g : momentum * buffer + (1 - dampening) * g;
      g = nesterov ? g + momentum * buffer : buffer;
    }
    p -= lr * g;
  }
};

TEST(Optimizer, SgdMatchesPyTorchInEveryVariant) {
  struct Case {
    SgdReference reference;
    bool withStep;
  };
  std::vector<Case> cases = {
      {{}, false},
      {{.momentum = 0.9}, false},
      {{.momentum = 0.9, .dampening = 0.5}, true},
      {{.momentum = 0.9, .nesterov = true}, false},
      {{.weightDecay = 0.01, .maximize = true}, false},
      {{.momentum = 0.5, .weightDecay = 0.1, .maximize = true}, true},
  };
  std::mt19937_64 rng(21);
  for (const Case& c : cases) {
    const SgdReference& r = c.reference;
    Tensor param = randomTensor(DType::F32, {40}, rng);
    Tensor buffer = filled(DType::F32, {40}, {0.0});
    Tensor lr = filled(DType::F32, {}, {0.1});
    Tensor inv = filled(DType::F32, {}, {0.25});
    Tensor copy = filled(DType::BF16, {40}, {0.0});
    std::vector<double> p = param.toDoubles(), b(40, 0.0);
    bool useMomentum = r.momentum != 0;
    AttributeMap attributes = {{"momentum", r.momentum},         {"dampening", r.dampening},
                               {"weight_decay", r.weightDecay}, {"nesterov", r.nesterov},
                               {"maximize", r.maximize}};
    for (int64_t step = 0; step < 3; ++step) {
      Tensor grad = randomTensor(DType::F16, {40}, rng, -4, 4);
      Tensor stepCount = filled(DType::I64, {}, {double(step)});
      std::vector<TensorType> results = {param.type()};
      std::vector<int> tied = {0};
      if (useMomentum) {
        results.push_back(buffer.type());
        tied.push_back(2);
      }
      results.push_back(copy.type());
      tied.push_back(7);
      runOp("jit.sgd_update",
            {&param, &grad, useMomentum ? &buffer : nullptr, c.withStep ? &stepCount : nullptr, &lr, &inv, nullptr,
             &copy},
            results, attributes, tied);
      for (size_t i = 0; i < 40; ++i)
        r.step(p[i], b[i], grad.at(int64_t(i)) * 0.25, double(0.1f), step == 0);
    }
    EXPECT_TRUE(allClose(param, p, {1e-5, 1e-6})) << "momentum " << r.momentum << " nesterov " << r.nesterov;
    if (useMomentum) {
      EXPECT_TRUE(allClose(buffer, b, {1e-5, 1e-6}));
    }
    // The low-precision copy is the new parameter rounded once.
    for (int64_t i = 0; i < 40; ++i)
      EXPECT_EQ(copy.bits16()[size_t(i)], floatToBFloat16(param.elements<float>()[size_t(i)]));
  }
}

TEST(Optimizer, AdamAndAdamWMatchPyTorchWithAndWithoutAmsgrad) {
  std::mt19937_64 rng(22);
  for (bool amsgrad : {false, true}) {
    for (bool decoupled : {false, true}) {
      Tensor param = randomTensor(DType::F32, {50}, rng);
      Tensor m = filled(DType::F32, {50}, {0.0}), v = filled(DType::F32, {50}, {0.0});
      Tensor vmax = filled(DType::F32, {50}, {0.0});
      Tensor lr = filled(DType::F32, {}, {1e-2});
      // beta2 = 0.5 forgets the large gradients fast enough for the maximum to matter.
      double beta1 = 0.9, beta2 = 0.5, eps = 1e-8, decay = 0.01, lrValue = double(1e-2f);
      std::vector<double> p = param.toDoubles(), mr(50, 0), vr(50, 0), vmaxr(50, 0);
      AttributeMap attributes = {{"weight_decay", decay}, {"decoupled_weight_decay", decoupled}, {"beta2", beta2}};
      bool maximumDiffered = false;
      for (int64_t step = 0; step < 6; ++step) {
        // Large gradients first, then small ones: exp_avg_sq falls below its
        // running maximum, which AMSGrad's denominator then keeps.
        double scale = step < 2 ? 1.0 : 0.01;
        Tensor grad = randomTensor(DType::F32, {50}, rng, -scale, scale);
        Tensor count = filled(DType::I64, {}, {double(step)});
        std::vector<TensorType> results = {param.type(), m.type(), v.type()};
        std::vector<int> tied = {0, 2, 3};
        if (amsgrad) {
          results.push_back(vmax.type());
          tied.push_back(4);
        }
        runOp("jit.adam_update",
              {&param, &grad, &m, &v, amsgrad ? &vmax : nullptr, &count, &lr, nullptr, nullptr, nullptr}, results,
              attributes, tied);
        double t = double(step + 1);
        for (size_t i = 0; i < 50; ++i) {
          double g = grad.at(int64_t(i));
          if (decoupled)
            p[i] *= 1 - lrValue * decay;
          else
            g += decay * p[i];
          mr[i] = beta1 * mr[i] + (1 - beta1) * g;
          vr[i] = beta2 * vr[i] + (1 - beta2) * g * g;
          vmaxr[i] = std::max(vmaxr[i], vr[i]); // torch.maximum(max_exp_avg_sq, exp_avg_sq)
          maximumDiffered = maximumDiffered || vmaxr[i] > vr[i] * 1.01;
          double denominator = std::sqrt(amsgrad ? vmaxr[i] : vr[i]) / std::sqrt(1 - std::pow(beta2, t)) + eps;
          p[i] -= lrValue / (1 - std::pow(beta1, t)) * mr[i] / denominator;
        }
      }
      ASSERT_TRUE(maximumDiffered) << "the case must tell AMSGrad from Adam";
      EXPECT_TRUE(allClose(param, p, {1e-5, 1e-6})) << "decoupled " << decoupled << " amsgrad " << amsgrad;
      EXPECT_TRUE(allClose(m, mr, {1e-5, 1e-7}));
      EXPECT_TRUE(allClose(v, vr, {1e-5, 1e-9}));
      if (amsgrad) {
        EXPECT_TRUE(allClose(vmax, vmaxr, {1e-5, 1e-9}));
      }
    }
  }
}

TEST(Optimizer, AmsgradMaximumPropagatesNanAsTorchMaximum) {
  // Without a loss scaler nothing skips a NaN gradient; torch.maximum keeps
  // the NaN in max_exp_avg_sq rather than silently dropping it.
  Tensor param = filled(DType::F32, {3}, {1.0, 1.0, 1.0});
  Tensor m = filled(DType::F32, {3}, {0.0}), v = filled(DType::F32, {3}, {0.0});
  Tensor vmax = filled(DType::F32, {3}, {5.0, std::nan(""), 5.0});
  Tensor lr = filled(DType::F32, {}, {1e-2});
  Tensor count = filled(DType::I64, {}, {0});
  Tensor grad = filled(DType::F32, {3}, {std::nan(""), 1.0, 1.0});
  std::vector<Tensor> out = runOp("jit.adam_update", {&param, &grad, &m, &v, &vmax, &count, &lr, nullptr, nullptr, nullptr},
                                  {param.type(), m.type(), v.type(), vmax.type()}, {});
  EXPECT_TRUE(std::isnan(out[3].at(0)));
  EXPECT_TRUE(std::isnan(out[3].at(1)));
  EXPECT_EQ(out[3].at(2), 5.0);
}

TEST(Optimizer, FalsePredicateLeavesEveryPieceOfStateBitIdentical) {
  std::mt19937_64 rng(23);
  Tensor flag = filled(DType::I1, {}, {0});
  Tensor lr = filled(DType::F32, {}, {0.5});
  Tensor inv = filled(DType::F32, {}, {1.0 / 8});
  Tensor grad = randomTensor(DType::F16, {16}, rng);
  Tensor count = filled(DType::I64, {}, {3});
  // In place (state tied) and into separate output buffers.
  for (bool inPlace : {true, false}) {
    Tensor param = randomTensor(DType::F32, {16}, rng), buffer = randomTensor(DType::F32, {16}, rng);
    Tensor copy = randomTensor(DType::F16, {16}, rng);
    Tensor paramBefore = *param.clone(), bufferBefore = *buffer.clone(), copyBefore = *copy.clone();
    std::vector<Tensor> out =
        runOp("jit.sgd_update", {&param, &grad, &buffer, &count, &lr, &inv, &flag, &copy},
              {param.type(), buffer.type(), copy.type()}, {{"momentum", 0.9}, {"dampening", 0.1}},
              inPlace ? std::vector<int>{0, 2, 7} : std::vector<int>{});
    EXPECT_TRUE(out[0].bitwiseEqual(paramBefore));
    EXPECT_TRUE(out[1].bitwiseEqual(bufferBefore));
    EXPECT_TRUE(out[2].bitwiseEqual(copyBefore));
    EXPECT_TRUE(param.bitwiseEqual(paramBefore));

    Tensor m = randomTensor(DType::F32, {16}, rng), v = randomTensor(DType::F32, {16}, rng, 0, 1);
    Tensor vmax = randomTensor(DType::F32, {16}, rng, 0, 1);
    Tensor mBefore = *m.clone(), vBefore = *v.clone(), vmaxBefore = *vmax.clone();
    out = runOp("jit.adam_update", {&param, &grad, &m, &v, &vmax, &count, &lr, &inv, &flag, &copy},
                {param.type(), m.type(), v.type(), vmax.type(), copy.type()}, {},
                inPlace ? std::vector<int>{0, 2, 3, 4, 9} : std::vector<int>{});
    EXPECT_TRUE(out[0].bitwiseEqual(paramBefore));
    EXPECT_TRUE(out[1].bitwiseEqual(mBefore));
    EXPECT_TRUE(out[2].bitwiseEqual(vBefore));
    EXPECT_TRUE(out[3].bitwiseEqual(vmaxBefore));
    EXPECT_TRUE(out[4].bitwiseEqual(copyBefore));
  }
}

} // namespace
