// The losses written with ops (binary_cross_entropy_with_logits, l1, smooth
// l1, huber) against their formulas in f64, their gradients at the kinks
// against PyTorch's, the f64 gradient check away from them, and a multi-label
// classifier traced beside eager.

#include "FrontendTestUtil.h"

#include <cmath>

namespace jit::testing {
namespace {

const std::vector<double> kInput = {-3.0, -0.5, 0.0, 0.25, 1.5, 4.0};
const std::vector<double> kTarget = {0.0, 1.0, 1.0, 0.0, 1.0, 0.5};

Tensor vectorOf(const std::vector<double>& values) { return tensor(values, {int64_t(values.size())}, f64); }

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(Losses, BinaryCrossEntropyWithLogitsMatchesItsFormulaAndPyTorchsGradient) {
  for (bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "pos_weight" : "plain");
    Tensor x = vectorOf(kInput).requires_grad_(), y = vectorOf(kTarget);
    Tensor positive = vectorOf({2.0, 0.5, 3.0, 1.0, 1.5, 0.25});
    BceWithLogitsOptions options{.reduction = Reduction::sum};
    if (weighted)
      options.pos_weight = positive;
    Tensor loss = binary_cross_entropy_with_logits(x, y, options);
    loss.backward();
    double expected = 0;
    std::vector<double> gradient = x.grad().to_vector(), w = positive.to_vector();
    for (size_t i = 0; i < kInput.size(); ++i) {
      double xi = kInput[i], yi = kTarget[i], pw = weighted ? w[i] : 1.0;
      // PyTorch: -[pw y log s(x) + (1 - y) log(1 - s(x))].
      expected += -(pw * yi * std::log(sigmoid(xi)) + (1 - yi) * std::log(1 - sigmoid(xi)));
      double derivative = (1 + (pw - 1) * yi) * sigmoid(xi) - pw * yi;
      EXPECT_NEAR(gradient[i], derivative, 1e-12) << "element " << i << " (x = " << xi << ")";
    }
    EXPECT_NEAR(loss.item(), expected, 1e-12);
  }
  // mean divides by the element count; none keeps the shape.
  Tensor x = vectorOf(kInput), y = vectorOf(kTarget);
  EXPECT_NEAR(binary_cross_entropy_with_logits(x, y).item() * 6,
              binary_cross_entropy_with_logits(x, y, {.reduction = Reduction::sum}).item(), 1e-12);
  EXPECT_EQ(binary_cross_entropy_with_logits(x, y, {.reduction = Reduction::none}).shape(), (Shape{6}));
  // Large logits do not overflow.
  Tensor big = tensor({100.0, -100.0}, {2}, f32), labels = tensor({0.0, 1.0}, {2}, f32);
  EXPECT_NEAR(binary_cross_entropy_with_logits(big, labels, {.reduction = Reduction::sum}).item(), 200.0, 1e-3);
}

TEST(Losses, L1SmoothL1AndHuberMatchTheirFormulasWithZeroGradientAtZero) {
  std::vector<double> input = {-3.0, -0.5, 0.0, 0.25, 1.5, 4.0}, target = {0.0, 0.0, 0.0, 0.0, 1.0, 2.0};
  auto check = [&](const char* name, auto loss, auto formula, auto derivative) {
    SCOPED_TRACE(name);
    Tensor x = vectorOf(input).requires_grad_();
    Tensor value = loss(x, vectorOf(target));
    value.backward();
    double expected = 0;
    std::vector<double> gradient = x.grad().to_vector();
    for (size_t i = 0; i < input.size(); ++i) {
      double d = input[i] - target[i];
      expected += formula(d);
      EXPECT_NEAR(gradient[i], derivative(d), 1e-12) << "d = " << d;
    }
    EXPECT_NEAR(value.item(), expected, 1e-12);
  };
  auto sign = [](double d) { return d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0; };
  check("l1", [](const Tensor& a, const Tensor& b) { return l1_loss(a, b, {.reduction = Reduction::sum}); },
        [](double d) { return std::abs(d); }, sign);
  check("smooth_l1 beta 0.5",
        [](const Tensor& a, const Tensor& b) { return smooth_l1_loss(a, b, {.reduction = Reduction::sum, .beta = 0.5}); },
        [](double d) { return std::abs(d) < 0.5 ? d * d : std::abs(d) - 0.25; },
        [&](double d) { return std::abs(d) < 0.5 ? 2 * d : sign(d); });
  check("huber delta 2",
        [](const Tensor& a, const Tensor& b) { return huber_loss(a, b, {.reduction = Reduction::sum, .delta = 2.0}); },
        [](double d) { return std::abs(d) <= 2 ? 0.5 * d * d : 2 * (std::abs(d) - 1.0); },
        [&](double d) { return std::abs(d) <= 2 ? d : 2 * sign(d); });
  Tensor a = vectorOf(input), b = vectorOf(target);
  EXPECT_EQ(smooth_l1_loss(a, b, {.beta = 0.0}).item(), l1_loss(a, b).item());
}

TEST(Losses, BadTargetsAndOptionsAreClearErrors) {
  Tensor x = zeros({2, 3}), y = zeros({3});
  std::string message = errorOf([&] { l1_loss(x, y); });
  EXPECT_NE(message.find("l1_loss: target f32[3] must be floating-point of the shape of input f32[2x3]"),
            std::string::npos)
      << message;
  message = errorOf([&] { binary_cross_entropy_with_logits(x, zeros({2, 3}, i64)); });
  EXPECT_NE(message.find("binary_cross_entropy_with_logits: target i64[2x3]"), std::string::npos) << message;
  // Low-precision logits are widened: the loss is fp32.
  EXPECT_EQ(binary_cross_entropy_with_logits(zeros({2, 3}, f16), zeros({2, 3}, f32)).dtype(), f32);
  EXPECT_EQ(l1_loss(zeros({2}, bf16), zeros({2}, bf16)).dtype(), f32);
  message = errorOf([&] { huber_loss(x, x, {.delta = 0.0}); });
  EXPECT_NE(message.find("huber_loss: delta must be > 0"), std::string::npos) << message;
  message = errorOf([&] { smooth_l1_loss(x, x, {.beta = -1.0}); });
  EXPECT_NE(message.find("smooth_l1_loss: beta must be >= 0"), std::string::npos) << message;
}

TEST(Losses, AMultiLabelClassifierTracesAsItRunsEagerly) {
  // Five independent labels per example, BCE with logits, plus an L1
  // penalty on a regression head; bitwise at O0 and at O1.
  struct Net {
    Net()
        : g(31), body(nn::Linear(12, 24, true, {.generator = &g}), nn::ReLU(),
                      nn::Linear(24, 6, true, {.generator = &g})),
          opt(body.parameters(), {.lr = 1e-2}) {}
    Tensor step(const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor out = body(x);
      Tensor logits = matmul(out, eye()); // f16 logits under autocast
      Tensor loss = binary_cross_entropy_with_logits(logits, y) + smooth_l1_loss(logits, y, {.beta = 0.5}) * 0.1;
      loss.backward();
      opt.step();
      return loss;
    }
    Tensor eye() {
      std::vector<double> identity(36, 0.0);
      for (int k = 0; k < 6; ++k)
        identity[size_t(k * 7)] = 1.0;
      return tensor(identity, {6, 6}, f32);
    }
    Generator g;
    nn::Sequential body;
    optim::Adam opt;
  };
  for (amp::Level level : {amp::O0, amp::O1}) {
    SCOPED_TRACE(::testing::Message() << "O" << int(level));
    Net eager, traced;
    expectTracedLossesEqualEager(
        level, [&](const Tensor& x, const Tensor& y) { return eager.step(x, y); },
        [&](const Tensor& x, const Tensor& y) { return traced.step(x, y); },
        [](uint64_t i) {
          Generator g(50 + i);
          Tensor x = randn({8, 12}, f32, &g);
          Tensor y = where(rand({8, 6}, f32, &g) > full({}, 0.5, f32), full({}, 1.0, f32), full({}, 0.0, f32));
          return std::pair{x, y};
        },
        4);
    expectSameState(traced.body.state_dict(), eager.body.state_dict());
  }
}

} // namespace
} // namespace jit::testing
