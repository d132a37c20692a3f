// A finite-difference gradient check in f64 for every differentiable op.
//
// Each check differentiates L = sum(f(inputs) * w) for fixed random weights w
// (so every output element's gradient matters) and compares the tape's
// gradient with central differences (L(x + h) - L(x - h)) / 2h, h = 1e-6.
// In f64 the truncation error is about h^2/6 * |L'''| ~ 1e-13 and the
// rounding error about eps * |L| / h ~ 1e-9 for |L| ~ 10, so a tolerance of
// 1e-6 + 1e-5 * |gradient| leaves a wide margin, while a wrong rule (a
// missing factor, a wrong transpose, an unreduced broadcast) is off by O(0.1).
// Inputs avoid non-differentiable points (relu's kink, ties of max).

#include "FrontendTestUtil.h"

using namespace jit;

namespace {

using Function = std::function<Tensor(const std::vector<Tensor>&)>;

constexpr double kStep = 1e-6;
constexpr double kAbsoluteTolerance = 1e-6;
constexpr double kRelativeTolerance = 1e-5;

Tensor weightedSum(const Tensor& output, const Tensor& weights) { return sum(output * weights); }

/// Checks the gradient of every floating-point input (integer and boolean
/// inputs, such as labels, are data).
void gradcheck(const std::string& name, const Function& f, const std::vector<Tensor>& inputs) {
  SCOPED_TRACE(name);
  std::vector<Tensor> leaves;
  for (const Tensor& input : inputs) {
    Tensor leaf = input.detach();
    if (leaf.dtype() == f64)
      leaf.requires_grad_();
    leaves.push_back(leaf);
  }
  Tensor output = f(leaves);
  Generator generator(1234);
  Tensor weights = randn(output.shape(), f64, &generator);
  weightedSum(output, weights).backward();

  NoGradGuard noGrad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype() != f64)
      continue;
    ASSERT_TRUE(leaves[i].grad().defined()) << "no gradient for input " << i;
    ASSERT_EQ(leaves[i].grad().shape(), inputs[i].shape());
    std::vector<double> analytic = leaves[i].grad().to_vector();
    std::vector<double> values = inputs[i].to_vector();
    for (size_t k = 0; k < values.size(); ++k) {
      auto lossAt = [&](double delta) {
        std::vector<double> moved = values;
        moved[k] += delta;
        std::vector<Tensor> perturbed = inputs;
        perturbed[i] = tensor(std::span<const double>(moved), inputs[i].shape(), f64);
        return weightedSum(f(perturbed), weights).item();
      };
      double numeric = (lossAt(kStep) - lossAt(-kStep)) / (2 * kStep);
      EXPECT_NEAR(analytic[k], numeric, kAbsoluteTolerance + kRelativeTolerance * std::fabs(numeric))
          << "input " << i << " element " << k;
    }
  }
}

Generator gGenerator(99);
Tensor normal(Shape shape) { return randn(std::move(shape), f64, &gGenerator); }
/// Normal values moved at least 0.2 away from zero.
Tensor awayFromZero(Shape shape) {
  Tensor x = normal(std::move(shape));
  return where(x >= zeros_like(x), x + 0.2, x - 0.2);
}
Tensor positive(Shape shape) { return rand(std::move(shape), f64, &gGenerator) + 0.5; }
Tensor labels(std::vector<int64_t> values) {
  return tensor(std::span<const int64_t>(values), {int64_t(values.size())});
}

} // namespace

TEST(GradCheck, Unary) {
  gradcheck("neg", [](auto& x) { return -x[0]; }, {normal({3, 4})});
  gradcheck("relu", [](auto& x) { return relu(x[0]); }, {awayFromZero({3, 4})});
  gradcheck("gelu", [](auto& x) { return gelu(x[0]); }, {normal({3, 4})});
  gradcheck("gelu tanh", [](auto& x) { return gelu(x[0], GeluApproximate::tanh); }, {normal({3, 4})});
  gradcheck("tanh", [](auto& x) { return tanh(x[0]); }, {normal({3, 4})});
  gradcheck("sigmoid", [](auto& x) { return sigmoid(x[0]); }, {normal({3, 4})});
  gradcheck("exp", [](auto& x) { return exp(x[0]); }, {normal({3, 4})});
  gradcheck("log", [](auto& x) { return log(x[0]); }, {positive({3, 4})});
  gradcheck("sqrt", [](auto& x) { return sqrt(x[0]); }, {positive({3, 4})});
  gradcheck("rsqrt", [](auto& x) { return rsqrt(x[0]); }, {positive({3, 4})});
  gradcheck("pow 2.5", [](auto& x) { return pow(x[0], 2.5); }, {positive({3, 4})});
  gradcheck("pow 3", [](auto& x) { return pow(x[0], 3.0); }, {normal({3, 4})});
  gradcheck("pow 0", [](auto& x) { return pow(x[0], 0.0) * x[0]; }, {normal({3})});
  // The composed activations of jit::nn.
  gradcheck("SiLU", [](auto& x) { return nn::SiLU()(x[0]); }, {normal({3, 4})});
  gradcheck("LeakyReLU", [](auto& x) { return nn::LeakyReLU(0.1)(x[0]); }, {awayFromZero({3, 4})});
}

TEST(GradCheck, BinaryWithBroadcasting) {
  gradcheck("add", [](auto& x) { return x[0] + x[1]; }, {normal({3, 4}), normal({4})});
  gradcheck("sub", [](auto& x) { return x[0] - x[1]; }, {normal({3, 1}), normal({1, 4})});
  gradcheck("mul", [](auto& x) { return x[0] * x[1]; }, {normal({2, 3, 4}), normal({3, 1})});
  gradcheck("div", [](auto& x) { return x[0] / x[1]; }, {normal({3, 4}), awayFromZero({4})});
  gradcheck("scalar rhs", [](auto& x) { return 2.0 - x[0] / 3.0; }, {normal({3})});
  gradcheck("same operand twice", [](auto& x) { return x[0] * x[0] + x[0]; }, {normal({3})});
}

TEST(GradCheck, Select) {
  Tensor condition = tensor({1, 0, 1, 0, 0, 1}, {2, 3}, i1);
  gradcheck("where", [&](auto& x) { return where(condition, x[0], x[1]); }, {normal({2, 3}), normal({3})});
  gradcheck("where i1 operand", [](auto& x) { return where(x[0] > x[1], x[0], x[1]); },
            {normal({2, 3}), normal({2, 3}) + 3.0});
}

TEST(GradCheck, Matmul) {
  for (bool tl : {false, true})
    for (bool tr : {false, true}) {
      Tensor a = tl ? normal({4, 3}) : normal({3, 4});
      Tensor b = tr ? normal({5, 4}) : normal({4, 5});
      // (Built with += : GCC 12's -Wrestrict misfires on chained std::string + at -O3.)
      std::string name = "matmul";
      name += tl ? " transpose_lhs" : "";
      name += tr ? " transpose_rhs" : "";
      gradcheck(name,
                [=](auto& x) { return matmul(x[0], x[1], {.transpose_lhs = tl, .transpose_rhs = tr}); }, {a, b});
    }
  gradcheck("batched, rhs broadcast", [](auto& x) { return matmul(x[0], x[1]); }, {normal({2, 3, 4}), normal({4, 2})});
  gradcheck("batched, lhs broadcast", [](auto& x) { return matmul(x[0], x[1], {.transpose_rhs = true}); },
            {normal({1, 3, 4}), normal({2, 2, 4})});
}

TEST(GradCheck, Reductions) {
  gradcheck("sum all", [](auto& x) { return sum(x[0]); }, {normal({3, 4})});
  gradcheck("sum axis", [](auto& x) { return sum(x[0], {-1}); }, {normal({2, 3, 4})});
  gradcheck("sum keepdim", [](auto& x) { return sum(x[0], {0, 2}, true); }, {normal({2, 3, 4})});
  gradcheck("mean", [](auto& x) { return mean(x[0], {1}); }, {normal({2, 3, 4})});
  gradcheck("mean all", [](auto& x) { return mean(x[0]); }, {normal({2, 3})});
  gradcheck("max", [](auto& x) { return max(x[0], {1}); }, {normal({3, 5})});
  gradcheck("max keepdim", [](auto& x) { return max(x[0], {0}, true); }, {normal({3, 5})});
  gradcheck("max all", [](auto& x) { return max(x[0]); }, {normal({3, 5})});
}

TEST(GradCheck, ShapeOps) {
  gradcheck("broadcast_to", [](auto& x) { return broadcast_to(x[0], {2, 3, 4}); }, {normal({3, 1})});
  gradcheck("reshape", [](auto& x) { return reshape(x[0], {4, -1}); }, {normal({2, 3, 2})});
  gradcheck("transpose", [](auto& x) { return transpose(x[0], 0, -1); }, {normal({2, 3, 4})});
  gradcheck("permute", [](auto& x) { return permute(x[0], {1, 2, 0}); }, {normal({2, 3, 4})});
}

TEST(GradCheck, Convert) {
  // f64 -> f32 -> f64 rounds, so finite differences cannot see through it;
  // the rule is a convert of the gradient back to the input's dtype.
  Tensor x = normal({3});
  x.requires_grad_();
  sum(x.to(f32) * tensor({1, 2, 3})).backward();
  EXPECT_EQ(x.grad().dtype(), f64);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{1, 2, 3}));
  gradcheck("identity convert", [](auto& x) { return x[0].to(f64) * 2.0; }, {normal({3})});
}

TEST(GradCheck, SoftmaxAndLayerNorm) {
  gradcheck("softmax", [](auto& x) { return softmax(x[0], 1); }, {normal({3, 5})});
  gradcheck("softmax axis 0", [](auto& x) { return softmax(x[0], 0); }, {normal({3, 5})});
  gradcheck("log_softmax", [](auto& x) { return log_softmax(x[0], -1); }, {normal({3, 5})});
  gradcheck("layer_norm affine", [](auto& x) { return layer_norm(x[0], {5}, x[1], x[2]); },
            {normal({3, 5}), normal({5}), normal({5})});
  gradcheck("layer_norm plain", [](auto& x) { return layer_norm(x[0], {2, 3}); }, {normal({2, 2, 3})});
  gradcheck("layer_norm weight only", [](auto& x) { return layer_norm(x[0], {4}, x[1]); },
            {normal({3, 4}), normal({4})});
}

TEST(GradCheck, Dropout) {
  // The same rng state gives the same mask at every evaluation.
  Tensor state = tensor(std::span<const int64_t>(std::vector<int64_t>{17, 0}), {2});
  gradcheck("dropout", [&](auto& x) { return std::get<0>(dropout_with_state(x[0], state, 0.3)); }, {normal({4, 6})});
}

TEST(GradCheck, Losses) {
  for (Reduction reduction : {Reduction::mean, Reduction::sum, Reduction::none}) {
    std::string suffix = reduction == Reduction::mean ? " mean" : reduction == Reduction::sum ? " sum" : " none";
    gradcheck("mse_loss" + suffix, [=](auto& x) { return mse_loss(x[0], x[1], {.reduction = reduction}); },
              {normal({3, 4}), normal({3, 4})});
    gradcheck("cross_entropy" + suffix,
              [=](auto& x) { return cross_entropy(x[0], x[1], {.reduction = reduction}); },
              {normal({4, 5}), labels({0, 4, 2, 2})});
    gradcheck("nll_loss" + suffix, [=](auto& x) { return nll_loss(x[0], x[1], {.reduction = reduction}); },
              {normal({4, 5}), labels({1, 0, 3, 4})});
  }
  gradcheck("cross_entropy smoothing, ignore_index",
            [](auto& x) { return cross_entropy(x[0], x[1], {.ignore_index = 1, .label_smoothing = 0.1}); },
            {normal({4, 5}), labels({0, 1, 3, 2})});
  gradcheck("nll of log_softmax", [](auto& x) { return nll_loss(log_softmax(x[0], 1), x[1]); },
            {normal({4, 5}), labels({0, 1, 3, 2})});
}

// The convolution's three gradients (input, filter, bias) through stride,
// padding, dilation and groups, and the layout the compiler uses on the GPU.
TEST(GradCheck, CompositeLosses) {
  // Away from the kinks (x = 0, |d| = beta or delta).
  Tensor target = normal({3, 4});
  gradcheck("bce with logits", [&](auto& x) { return binary_cross_entropy_with_logits(x[0], x[1], {.reduction = Reduction::none}); },
            {awayFromZero({3, 4}), rand({3, 4}, f64, &gGenerator)});
  gradcheck("bce with logits pos_weight",
            [&](auto& x) { return binary_cross_entropy_with_logits(x[0], x[1], {.pos_weight = x[2]}); },
            {awayFromZero({3, 4}), rand({3, 4}, f64, &gGenerator), positive({4})});
  gradcheck("l1", [&](auto& x) { return l1_loss(x[0] + 0.0, target, {.reduction = Reduction::none}); },
            {target + awayFromZero({3, 4})});
  gradcheck("smooth l1", [&](auto& x) { return smooth_l1_loss(x[0], x[1], {.reduction = Reduction::sum, .beta = 0.3}); },
            {normal({3, 4}), normal({3, 4})});
  gradcheck("huber", [&](auto& x) { return huber_loss(x[0], x[1], {.reduction = Reduction::none, .delta = 0.7}); },
            {normal({3, 4}), normal({3, 4})});
}

TEST(GradCheck, Embedding) {
  // Repeated rows: the table's gradient; the indices are data. (padding_idx
  // departs from the derivative on purpose: EmbeddingTest checks it.)
  Tensor ids = tensor(std::span<const int64_t>(std::vector<int64_t>{2, 0, 2, 4, 1, 2}), {2, 3});
  gradcheck("embedding", [&](auto& x) { return embedding(ids, x[0]); }, {normal({5, 3})});
}

TEST(GradCheck, Conv2d) {
  gradcheck("conv2d 3x3 pad 1 with bias",
            [](auto& x) { return conv2d(x[0], x[1], x[2], {.padding = {1, 1}}); },
            {normal({2, 3, 5, 5}), normal({4, 3, 3, 3}), normal({4})});
  gradcheck("conv2d stride 2, dilation 2, non-square kernel",
            [](auto& x) { return conv2d(x[0], x[1], {}, {.stride = {2, 1}, .padding = {1, 0}, .dilation = {2, 1}}); },
            {normal({1, 2, 7, 6}), normal({3, 2, 2, 3})});
  gradcheck("conv2d groups 2",
            [](auto& x) { return conv2d(x[0], x[1], x[2], {.stride = {2, 2}, .padding = {1, 1}, .groups = 2}); },
            {normal({2, 4, 5, 5}), normal({6, 2, 3, 3}), normal({6})});
  gradcheck("conv2d depthwise nhwc",
            [](auto& x) { return conv2d(x[0], x[1], x[2], {.padding = {1, 1}, .groups = 3, .layout = Layout::nhwc}); },
            {normal({2, 4, 4, 3}), normal({3, 3, 3, 1}), normal({3})});
}

TEST(GradCheck, BatchNorm) {
  // Training mode: the batch statistics depend on the input, so dx has the
  // two extra terms of batch norm's backward.
  gradcheck("batch_norm training NCHW",
            [](auto& x) {
              Tensor mean = zeros({3}, f64), var = ones({3}, f64);
              return batch_norm(x[0], mean, var, x[1], x[2], /*training=*/true);
            },
            {normal({4, 3, 2, 3}), positive({3}), normal({3})});
  gradcheck("batch_norm training [N, C] without affine",
            [](auto& x) { return batch_norm(x[0], Tensor(), Tensor(), {}, {}, /*training=*/true); }, {normal({5, 4})});
  gradcheck("batch_norm training NHWC (axis 3)",
            [](auto& x) {
              return std::get<0>(batch_norm_with_stats(x[0], x[1], x[2], zeros({3}, f64), ones({3}, f64), 3));
            },
            {normal({2, 3, 2, 3}), positive({3}), normal({3})});
  // The running statistics are state, not inputs: no gradient flows to them.
  Tensor runningMean = normal({2}), runningVar = positive({2});
  gradcheck("batch_norm evaluation",
            [&](auto& x) { return batch_norm(x[0], runningMean, runningVar, x[1], x[2], /*training=*/false, 0.1, 1e-3); },
            {normal({3, 2, 2, 2}), positive({2}), normal({2})});
}

TEST(GradCheck, Pooling) {
  // Distinct values (a permutation scaled apart by 0.1) keep every window's
  // maximum unique, away from max's non-differentiable ties.
  std::vector<double> distinct(2 * 2 * 6 * 6);
  for (size_t i = 0; i < distinct.size(); ++i)
    distinct[i] = 0.1 * double((i * 37) % distinct.size());
  Tensor x = tensor(std::span<const double>(distinct), {2, 2, 6, 6}, f64);
  gradcheck("max_pool2d 3x3 stride 2 pad 1 (overlapping windows)",
            [](auto& v) { return max_pool2d(v[0], {.kernel_size = {3, 3}, .stride = Pair{2, 2}, .padding = {1, 1}}); },
            {x});
  gradcheck("max_pool2d ceil_mode",
            [](auto& v) { return max_pool2d(v[0], {.kernel_size = {2, 2}, .ceil_mode = true}); },
            {tensor(std::span<const double>(distinct.data(), 2 * 2 * 5 * 5), {2, 2, 5, 5}, f64)});
  gradcheck("avg_pool2d with padding counted",
            [](auto& v) { return avg_pool2d(v[0], {.kernel_size = {3, 3}, .stride = Pair{2, 2}, .padding = {1, 1}}); },
            {normal({2, 3, 5, 5})});
  gradcheck("avg_pool2d padding excluded, ceil_mode",
            [](auto& v) {
              return avg_pool2d(v[0], {.kernel_size = {2, 2}, .padding = {1, 1}, .ceil_mode = true,
                                       .count_include_pad = false});
            },
            {normal({1, 2, 5, 4})});
  gradcheck("adaptive_avg_pool2d", [](auto& v) { return adaptive_avg_pool2d(v[0], {1, 1}); }, {normal({2, 3, 3, 4})});
}
