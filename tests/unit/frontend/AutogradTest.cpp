// The autograd tape: backward from scalars and seeds, accumulation, the
// no-grad scope, broadcast gradients, jit.op_id / jit.vjp_of marks on the
// dispatched ops, and a small MLP trained eagerly.

#include "Dispatch.h"
#include "FrontendTestUtil.h"

using namespace jit;
using jit::testing::errorOf;

namespace {

Tensor leaf(std::initializer_list<double> values, Shape shape, DType dtype = f64) {
  Tensor t = tensor(values, std::move(shape), dtype);
  t.requires_grad_();
  return t;
}

} // namespace

TEST(Autograd, BackwardFromAScalarAndWithASeed) {
  Tensor x = leaf({1, -2, 3}, {3});
  EXPECT_TRUE(x.is_leaf());
  Tensor y = sum(x * x);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn_name(), "jit.sum");
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, -4, 6}));

  Tensor z = leaf({1, 2, 3, 4}, {2, 2});
  (z * 3.0).backward(tensor({1, 0, -1, 2}, {2, 2}, f64));
  EXPECT_EQ(z.grad().to_vector(), (std::vector<double>{3, 0, -3, 6}));

  Tensor w = leaf({2}, {1, 1});
  (w * w).backward(); // any one-element tensor, as in PyTorch
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{4}));
}

TEST(Autograd, BackwardErrors) {
  Tensor x = leaf({1, 2}, {2});
  EXPECT_EQ(errorOf([&] { (x * 2.0).backward(); }),
            "backward() without a gradient needs a one-element tensor, but this is f64[2]; pass a seed "
            "gradient of that type: backward(gradient)");
  EXPECT_NE(errorOf([&] { (x * 2.0).backward(ones({3}, f64)); }).find("the gradient must have the tensor's type f64[2]"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { sum(tensor({1, 2})).backward(); }).find("does not require grad"), std::string::npos);
  EXPECT_NE(errorOf([&] { tensor({1}, i64).requires_grad_(); }).find("only floating-point"), std::string::npos);
  EXPECT_NE(errorOf([&] { (x * 2.0).requires_grad_(); }).find("leaf tensors"), std::string::npos);
  EXPECT_NE(errorOf([&] { relu_grad(x, x); }).find("jit.relu_grad has no VJP rule"), std::string::npos);
  EXPECT_NE(errorOf([&] { x.sub_(x); }).find("under jit::NoGradGuard"), std::string::npos);
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor w = leaf({1, 2}, {2});
  Tensor x = tensor({3, 4}, f64);
  sum(w * x).backward();
  sum(w * w).backward();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{3 + 2, 4 + 4}));

  // The graph is kept: a second backward through it adds the same again.
  Tensor loss = sum(w * x);
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
  loss.backward();
  loss.backward();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{6, 8}));
  w.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{0, 0}));
}

TEST(Autograd, SharedSubexpressionsAndBroadcastGradients) {
  // b = a + a * a with a = 2x: db/dx = 2 + 8x; a reaches b along two paths.
  Tensor x = leaf({1, 2}, {2});
  Tensor a = x * 2.0;
  sum(a + a * a).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{10, 18}));

  Tensor input = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, f64);
  Tensor bias = leaf({0, 0, 0}, {3});
  Tensor column = leaf({1, 1}, {2, 1});
  sum((input + bias) * column).backward();
  EXPECT_EQ(bias.grad().shape(), (Shape{3}));
  EXPECT_EQ(bias.grad().to_vector(), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(column.grad().shape(), (Shape{2, 1}));
  EXPECT_EQ(column.grad().to_vector(), (std::vector<double>{6, 15}));
}

TEST(Autograd, NoGradGuard) {
  Tensor w = leaf({1, 2}, {2});
  EXPECT_TRUE(is_grad_enabled());
  {
    NoGradGuard noGrad;
    EXPECT_FALSE(is_grad_enabled());
    Tensor y = w * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    w.sub_(w.detach() * 0.5); // an in-place update of a leaf is allowed here
    {
      NoGradGuard nested;
    }
    EXPECT_FALSE(is_grad_enabled());
  }
  EXPECT_TRUE(is_grad_enabled());
  EXPECT_EQ(w.to_vector(), (std::vector<double>{0.5, 1}));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE((w * 2.0).requires_grad());
}

namespace {

/// Forwards to the eager handler and remembers each op's name and marks.
class RecordingHandler final : public jit::detail::OpHandler {
public:
  struct Call {
    std::string op;
    std::optional<int64_t> opId, vjpOf;
  };
  std::vector<Call> calls;

  std::vector<Tensor> run(const jit::detail::OpCall& call) override {
    auto mark = [&](const char* name) -> std::optional<int64_t> {
      auto found = call.attributes.find(name);
      return found == call.attributes.end() ? std::nullopt : std::optional(std::get<int64_t>(found->second));
    };
    calls.push_back({std::string(call.op), mark("jit.op_id"), mark("jit.vjp_of")});
    return jit::detail::eagerHandler().run(call);
  }
};

} // namespace

TEST(Autograd, BackwardOpsCarryTheForwardOpId) {
  Tensor x = leaf({1, -2, 3}, {3});
  Tensor labels = tensor(std::span<const int64_t>(std::vector<int64_t>{1}), {1});
  RecordingHandler recorder;
  {
    jit::detail::ScopedOpHandler scope(recorder);
    Tensor loss = cross_entropy(reshape(relu(x), {1, 3}), labels);
    loss.backward();
  }
  std::map<std::string, int64_t> forwardIds;
  for (const auto& call : recorder.calls)
    if (call.opId)
      forwardIds[call.op] = *call.opId;
  ASSERT_TRUE(forwardIds.count("jit.relu") && forwardIds.count("jit.cross_entropy"));
  std::map<std::string, int64_t> backwardMarks;
  for (const auto& call : recorder.calls)
    if (call.vjpOf)
      backwardMarks[call.op] = *call.vjpOf;
  EXPECT_EQ(backwardMarks.at("jit.relu_grad"), forwardIds["jit.relu"]);
  EXPECT_EQ(backwardMarks.at("jit.cross_entropy_grad"), forwardIds["jit.cross_entropy"]);
  EXPECT_EQ(backwardMarks.at("jit.reshape"), forwardIds["jit.reshape"]);
}

TEST(Autograd, SmallMlpTrainsWithEagerSgd) {
  // 784-16-10 on a fixed batch; parameters in nn.Linear's [out, in] layout.
  Generator generator(2024);
  const int64_t batch = 32;
  Tensor images = randn({batch, 784}, f32, &generator);
  std::vector<int64_t> classes;
  for (int64_t i = 0; i < batch; ++i)
    classes.push_back(int64_t(generator.next_uniform() * 10));
  Tensor labels = tensor(std::span<const int64_t>(classes), {batch});

  auto parameter = [&](Shape shape, double scale) {
    Tensor p = randn(std::move(shape), f32, &generator) * scale;
    p.requires_grad_();
    return p;
  };
  Tensor w1 = parameter({16, 784}, 1.0 / std::sqrt(784.0)), b1 = parameter({16}, 0.0);
  Tensor w2 = parameter({10, 16}, 1.0 / std::sqrt(16.0)), b2 = parameter({10}, 0.0);
  std::vector<Tensor> parameters = {w1, b1, w2, b2};

  std::vector<double> losses;
  for (int step = 0; step < 20; ++step) {
    for (Tensor& p : parameters)
      p.zero_grad();
    Tensor hidden = relu(matmul(images, w1, {.transpose_rhs = true}) + b1);
    Tensor loss = cross_entropy(matmul(hidden, w2, {.transpose_rhs = true}) + b2, labels);
    loss.backward();
    losses.push_back(loss.item());
    NoGradGuard noGrad;
    for (Tensor& p : parameters)
      p.sub_(p.grad() * 0.1);
  }
  EXPECT_GT(losses.front(), 1.5);
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << "first " << losses.front() << ", last " << losses.back();
  for (size_t i = 1; i < losses.size(); ++i)
    EXPECT_LT(losses[i], losses[i - 1] + 1e-3) << "step " << i;
}

//===----------------------------------------------------------------------===//
// autograd::function
//===----------------------------------------------------------------------===//

namespace {

/// A gradient reversal layer (domain-adversarial training): the identity
/// forward, the gradient times -lambda backward.
Tensor reverseGradient(const Tensor& x, double lambda) {
  return autograd::function(
      "GradientReversal", {x}, [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0]}; },
      [lambda](const autograd::FunctionContext& c) {
        return std::vector<Tensor>{c.grad_outputs[0] * -lambda};
      })[0];
}

/// sign(x) with the straight-through estimator: the gradient passes where |x| <= 1.
Tensor signStraightThrough(const Tensor& x) {
  return autograd::function(
      "SignSTE", {x},
      [](const std::vector<Tensor>& in) {
        Tensor zero = scalar_tensor(0.0, in[0].dtype());
        return std::vector<Tensor>{where(in[0] > zero, full({}, 1.0, in[0].dtype()), full({}, -1.0, in[0].dtype()))};
      },
      [](const autograd::FunctionContext& c) {
        const Tensor& x = c.inputs[0];
        Tensor one = scalar_tensor(1.0, x.dtype());
        return std::vector<Tensor>{where(x <= one, where(x >= -one, c.grad_outputs[0], zeros_like(x)), zeros_like(x))};
      })[0];
}

} // namespace

TEST(Autograd, AFunctionRecordsOneNodeWithTheUsersBackward) {
  Tensor x = tensor({-2.0, -0.5, 0.25, 3.0}, {4}, f64).requires_grad_();
  Tensor weights = tensor({1.0, 2.0, 3.0, 4.0}, {4}, f64);
  Tensor y = reverseGradient(x, 0.5);
  EXPECT_EQ(y.grad_fn_name(), "GradientReversal");
  EXPECT_TRUE(x.is_leaf()) << "the input keeps its own history";
  EXPECT_EQ(y.to_vector(), x.to_vector());
  sum(y * weights).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{-0.5, -1.0, -1.5, -2.0}));

  Tensor z = tensor({-2.0, -0.5, 0.25, 3.0}, {4}, f64).requires_grad_();
  Tensor s = signStraightThrough(z);
  EXPECT_EQ(s.to_vector(), (std::vector<double>{-1.0, -1.0, 1.0, 1.0}));
  sum(s * weights).backward();
  EXPECT_EQ(z.grad().to_vector(), (std::vector<double>{0.0, 2.0, 3.0, 0.0}));

  // Without an input requiring grad nothing is recorded.
  Tensor plain = reverseGradient(tensor({1.0}, {1}, f64), 1.0);
  EXPECT_EQ(plain.grad_fn_name(), "");
  EXPECT_FALSE(plain.requires_grad());
}

TEST(Autograd, AFunctionsResultsAndHistoryGoWithTheLastHandle) {
  // Its node keeps the results for backward: were those the results
  // themselves, each result would hold the node that holds it, and neither
  // (nor the inputs behind them) would ever be freed.
  std::weak_ptr<detail::TensorImpl> input, result;
  {
    Tensor x = tensor({-2.0, -0.5, 0.25, 3.0}, {4}, f64).requires_grad_();
    Tensor y = reverseGradient(x, 0.5);
    sum(y).backward();
    EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{-0.5, -0.5, -0.5, -0.5}));
    input = x.impl_ptr();
    result = y.impl_ptr();
  }
  EXPECT_TRUE(result.expired()) << "the function's result outlives its last handle";
  EXPECT_TRUE(input.expired()) << "the function's input outlives its last handle";
}

TEST(Autograd, AFunctionsMistakesAreClearErrors) {
  Tensor x = tensor({1.0, 2.0}, {2}, f64).requires_grad_();
  auto identity = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0]}; };
  std::string message = errorOf([&] {
    Tensor y = autograd::function("TwoGradients", {x}, identity, [](const autograd::FunctionContext& c) {
      return std::vector<Tensor>{c.grad_outputs[0], c.grad_outputs[0]};
    })[0];
    sum(y).backward();
  });
  EXPECT_NE(message.find("autograd::function 'TwoGradients': backward returned 2 gradients for 1 inputs"),
            std::string::npos)
      << message;
  message = errorOf([&] {
    Tensor y = autograd::function("WrongShape", {x}, identity, [](const autograd::FunctionContext& c) {
      return std::vector<Tensor>{sum(c.grad_outputs[0])};
    })[0];
    sum(y).backward();
  });
  EXPECT_NE(message.find("autograd::function 'WrongShape': backward gave input 0 a gradient of type f64[], but the "
                         "input is f64[2]"),
            std::string::npos)
      << message;
  auto passThrough = [](const autograd::FunctionContext& c) { return c.grad_outputs; };
  message = errorOf([&] { autograd::function("Indices", {x}, identity, passThrough, {.cast_inputs = i64}); });
  EXPECT_NE(message.find("'Indices': cast_inputs must be a floating-point type (f16, bf16, f32 or f64), not i64"),
            std::string::npos)
      << message;
  message = errorOf([&] { autograd::function("", {x}, identity, {}); });
  EXPECT_NE(message.find("give it a name"), std::string::npos) << message;
}

TEST(Autograd, AGradientOfAnotherFloatTypeGoesToTheInputsTypeAsInPyTorch) {
  // PyTorch's engine converts a custom backward's gradient to its input's
  // dtype; under autocast the user does not choose the types backward sees.
  Tensor x = tensor({1.0, 2.0}, {2}, f64).requires_grad_();
  Tensor y = autograd::function(
      "Narrowing", {x}, [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0]}; },
      [](const autograd::FunctionContext& c) { return std::vector<Tensor>{c.grad_outputs[0].to(f16) * 0.1}; })[0];
  sum(y * tensor({3.0, 5.0}, {2}, f64)).backward();
  EXPECT_EQ(x.grad().dtype(), f64);
  EXPECT_EQ(x.grad().to_vector(), (tensor({3.0, 5.0}, {2}, f16) * 0.1).to(f64).to_vector());
}

TEST(Autograd, TypeAsConvertsToTheOthersTypeAndItsGradientBack) {
  Tensor x = tensor({0.1, 2.0, -3.3}, {3}, f32).requires_grad_();
  Tensor reference = tensor({1.0}, {1}, f16); // its shape does not matter
  Tensor y = x.type_as(reference);
  EXPECT_EQ(y.dtype(), f16);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_EQ(y.to_vector(), x.to(f16).to_vector());
  EXPECT_EQ(y.grad_fn_name(), "jit.type_as");
  sum(y * tensor({0.1, 1.0, 2.0}, {3}, f16)).backward();
  EXPECT_EQ(x.grad().dtype(), f32);
  EXPECT_EQ(x.grad().to_vector(), tensor({0.1, 1.0, 2.0}, {3}, f16).to(f32).to_vector());
  EXPECT_EQ(x.type_as(x).to_vector(), x.to_vector());
  EXPECT_NE(errorOf([&] { x.type_as(tensor(std::span<const int64_t>(std::vector<int64_t>{1}), {1})); })
                .find("jit.type_as: operand 'reference' i64[1] must be floating-point"),
            std::string::npos);
}

TEST(Autograd, AFunctionWithCastInputsRunsInFp32UnderAutocastOnly) {
  // torch.amp.custom_fwd(cast_inputs=torch.float32): under autocast the
  // function sees fp32 inputs and runs with autocast off; the gradient for
  // its f16 input goes back to f16. Outside autocast nothing is converted.
  Generator g(5);
  Tensor x = randn({4, 6}, f32, &g);
  Tensor w = (randn({6, 3}, f32, &g) * 0.3).requires_grad_();
  Tensor v = (randn({3, 5}, f32, &g) * 0.3).requires_grad_();
  std::vector<DType> seen;
  std::vector<bool> autocastInBackward;
  auto custom = [&](const Tensor& h) {
    return autograd::function(
        "Fp32Matmul", {h, v},
        [&](const std::vector<Tensor>& in) {
          seen.push_back(in[0].dtype());
          return std::vector<Tensor>{matmul(in[0], in[1].type_as(in[0]))};
        },
        [&](const autograd::FunctionContext& c) {
          autocastInBackward.push_back(amp::autocast::is_enabled());
          const Tensor& grad = c.grad_outputs[0];
          return std::vector<Tensor>{matmul(grad, c.inputs[1], {.transpose_rhs = true}),
                                     matmul(c.inputs[0], grad, {.transpose_lhs = true})};
        },
        {.cast_inputs = f32})[0];
  };
  Tensor out, h;
  {
    amp::autocast scope({.dtype = f16});
    h = matmul(x, w);
    out = custom(h);
  }
  EXPECT_EQ(h.dtype(), f16);
  ASSERT_EQ(seen, std::vector<DType>{f32});
  EXPECT_EQ(out.dtype(), f32);
  EXPECT_EQ(out.to_vector(), matmul(h.detach().to(f32), v.detach()).to_vector());
  sum(out).backward();
  EXPECT_EQ(autocastInBackward, std::vector<bool>{false});
  // v's gradient is the fp32 product of the f16 activations, converted exactly.
  EXPECT_EQ(v.grad().to_vector(),
            matmul(h.detach().to(f32), ones(out.shape(), f32), {.transpose_lhs = true}).to_vector());
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), f32);

  seen.clear();
  Tensor plain = custom(h.detach().requires_grad_());
  EXPECT_EQ(seen, std::vector<DType>{f16}) << "no autocast, no conversion";
  EXPECT_EQ(plain.dtype(), f16);
}

TEST(Autograd, AFunctionWithF16CastInputsRunsInF16UnderAnyAutocast) {
  // custom_fwd(cast_inputs=torch.float16), a kernel that takes only f16:
  // under a bf16 autocast the function still sees f16, and its gradients go
  // back to the f32 inputs' type. Outside autocast nothing is converted.
  Generator g(7);
  Tensor h = randn({4, 6}, f32, &g).requires_grad_();
  std::vector<DType> seen;
  auto custom = [&](const Tensor& input) {
    return autograd::function(
        "F16Square", {input},
        [&](const std::vector<Tensor>& in) {
          seen.push_back(in[0].dtype());
          return std::vector<Tensor>{in[0] * in[0]};
        },
        [](const autograd::FunctionContext& c) {
          return std::vector<Tensor>{c.grad_outputs[0] * c.inputs[0] * 2.0};
        },
        {.cast_inputs = f16})[0];
  };
  Tensor out;
  {
    amp::autocast scope({.dtype = bf16});
    out = custom(h);
  }
  ASSERT_EQ(seen, std::vector<DType>{f16});
  EXPECT_EQ(out.dtype(), f16);
  Tensor h16 = h.detach().to(f16);
  EXPECT_EQ(out.to_vector(), (h16 * h16).to_vector());
  sum(out).backward();
  EXPECT_EQ(h.grad().dtype(), f32);
  EXPECT_EQ(h.grad().to_vector(), (ones({4, 6}, f16) * h16 * 2.0).to(f32).to_vector());
  seen.clear();
  EXPECT_EQ(custom(h).dtype(), f32);
  EXPECT_EQ(seen, std::vector<DType>{f32}) << "no autocast, no conversion";
}

TEST(Autograd, AFunctionWithAutocastBackwardRunsItsBackwardUnderTheForwardsAutocast) {
  // custom_bwd: PyTorch's MyMM example. The backward's matmuls are f16 as
  // the forward's, and their gradients go back to the f32 inputs' type:
  // bit for bit what the built-in matmul's VJP gives.
  Generator g(6);
  Tensor a = (randn({4, 6}, f32, &g)).requires_grad_(), b = (randn({6, 3}, f32, &g)).requires_grad_();
  Tensor a2 = a.detach().requires_grad_(), b2 = b.detach().requires_grad_();
  std::vector<std::optional<DType>> autocastInBackward;
  auto myMatmul = [&](const Tensor& lhs, const Tensor& rhs, bool autocastBackward) {
    return autograd::function(
        "MyMM", {lhs, rhs}, [](const std::vector<Tensor>& in) { return std::vector<Tensor>{matmul(in[0], in[1])}; },
        [&](const autograd::FunctionContext& c) {
          autocastInBackward.push_back(amp::autocast::current_dtype());
          const Tensor& grad = c.grad_outputs[0];
          if (!amp::autocast::is_enabled())
            return std::vector<Tensor>{Tensor(), Tensor()};
          return std::vector<Tensor>{matmul(grad, c.inputs[1], {.transpose_rhs = true}),
                                     matmul(c.inputs[0], grad, {.transpose_lhs = true})};
        },
        {.autocast_backward = autocastBackward})[0];
  };
  Tensor custom, builtin;
  {
    amp::autocast scope({.dtype = f16});
    custom = myMatmul(a, b, true);
    builtin = matmul(a2, b2);
  }
  EXPECT_EQ(custom.dtype(), f16);
  Tensor weights = tensor({1.0, -2.0, 0.5}, {3}, f16);
  sum(custom * weights).backward();
  sum(builtin * weights).backward();
  ASSERT_EQ(autocastInBackward, (std::vector<std::optional<DType>>{f16}));
  EXPECT_EQ(a.grad().dtype(), f32);
  EXPECT_EQ(a.grad().to_vector(), a2.grad().to_vector());
  EXPECT_EQ(b.grad().to_vector(), b2.grad().to_vector());

  // Without it backward runs with autocast off, as PyTorch's does.
  autocastInBackward.clear();
  {
    amp::autocast scope({.dtype = f16});
    custom = myMatmul(a, b, false);
  }
  sum(custom).backward();
  EXPECT_EQ(autocastInBackward, (std::vector<std::optional<DType>>{std::nullopt}));
}

TEST(Autograd, ATracedStepWithAGradientReversalLayerMatchesEager) {
  // Domain-adversarial training: a shared feature layer, a label head, and
  // a domain head behind a gradient reversal; bitwise at O0 and at O1.
  struct Net {
    Net()
        : g(21), features(nn::Linear(8, 16, true, {.generator = &g})),
          labels(nn::Linear(16, 3, true, {.generator = &g})), domains(nn::Linear(16, 2, true, {.generator = &g})),
          opt(parameters(), {.lr = 0.05, .momentum = 0.9}) {}
    std::vector<Tensor> parameters() {
      std::vector<Tensor> all;
      for (nn::Linear* layer : {&features, &labels, &domains})
        for (const Tensor& p : layer->parameters())
          all.push_back(p);
      return all;
    }
    Tensor step(const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor h = relu(features(x));
      Tensor domain = tensor(std::span<const int64_t>(std::vector<int64_t>(size_t(x.shape()[0]), 1)), {x.shape()[0]});
      Tensor loss = cross_entropy(labels(h), y) + cross_entropy(domains(reverseGradient(h, 0.3)), domain);
      loss.backward();
      opt.step();
      return loss;
    }
    Generator g;
    nn::Linear features, labels, domains;
    optim::SGD opt;
  };
  for (amp::Level level : {amp::O0, amp::O1}) {
    SCOPED_TRACE(::testing::Message() << "O" << int(level));
    Net eager, traced;
    jit::testing::expectTracedLossesEqualEager(
        level, [&](const Tensor& x, const Tensor& y) { return eager.step(x, y); },
        [&](const Tensor& x, const Tensor& y) { return traced.step(x, y); },
        [](uint64_t i) {
          Generator g(40 + i);
          std::vector<int64_t> classes;
          for (int64_t n = 0; n < 6; ++n)
            classes.push_back(int64_t((i + uint64_t(n)) % 3));
          return std::pair{randn({6, 8}, f32, &g), tensor(std::span<const int64_t>(classes), {6})};
        },
        4);
    for (size_t k = 0; k < eager.parameters().size(); ++k)
      EXPECT_EQ(traced.parameters()[k].to_vector(), eager.parameters()[k].to_vector()) << k;
  }
}
