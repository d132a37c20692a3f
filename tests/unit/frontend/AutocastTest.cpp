// Eager autocast (jit::amp::autocast) against the same ops run on inputs cast
// by hand, and the AMP Policy's levels, overrides and pipeline options.

#include "FrontendTestUtil.h"
#include "TemporaryDirectory.h"

#include "jit/amp.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace jit {
namespace {

using testing::errorOf;

/// Bitwise: CPU kernels are deterministic, so autocast and the hand-cast
/// computation must run the very same kernels on the very same bits.
void expectSameTensor(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.dtype(), expected.dtype()) << what;
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  std::vector<double> a = actual.to_vector(), e = expected.to_vector();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i], e[i]) << what << " element " << i;
}

std::string writeFile(const ::ampjit::testing::TemporaryDirectory& scratch, const std::string& name,
                      const std::string& text) {
  std::string path = scratch.file(name);
  std::ofstream(path) << text;
  return path;
}

TEST(Autocast, MatmulRunsInTheLowTypeBitwiseAsHandCast) {
  for (DType low : {f16, bf16}) {
    Generator generator(1);
    Tensor a = randn({4, 8}, f32, &generator), b = randn({8, 3}, f32, &generator);
    Tensor expected = matmul(a.to(low), b.to(low));
    Tensor actual;
    {
      amp::autocast scope({.dtype = low});
      EXPECT_TRUE(amp::autocast::is_enabled());
      EXPECT_EQ(amp::autocast::current_dtype(), low);
      actual = matmul(a, b);
    }
    EXPECT_FALSE(amp::autocast::is_enabled());
    expectSameTensor(actual, expected, std::string(dtype_name(low)));
  }
}

TEST(Autocast, DenyRunsInF32OnLowPrecisionInput) {
  Generator generator(2);
  Tensor x = randn({3, 5}, f16, &generator);
  amp::autocast scope;
  Tensor y = softmax(x, 1);
  EXPECT_EQ(y.dtype(), f32);
  NoGradGuard noGrad;
  amp::autocast off(false);
  expectSameTensor(y, softmax(x.to(f32), 1), "softmax");
}

TEST(Autocast, InferTakesTheWidestInput) {
  Generator generator(3);
  Tensor h = randn({2, 3}, f16, &generator), f = randn({2, 3}, f32, &generator);
  Tensor b = randn({2, 3}, bf16, &generator);
  amp::autocast scope;
  EXPECT_EQ(add(h, f).dtype(), f32);
  EXPECT_EQ(add(h, h).dtype(), f16);
  // f16 and bf16 each hold values the other cannot: they meet at f32.
  EXPECT_EQ(add(h, b).dtype(), f32);
  // Integer operands are never cast.
  Tensor labels = tensor({0, 2}, {2}, i64);
  EXPECT_EQ(cross_entropy(h, labels).dtype(), f32);
}

TEST(Autocast, DisabledScopeRestoresFp32AndNestingRestores) {
  Generator generator(4);
  Tensor a = randn({2, 2}, f32, &generator);
  amp::autocast outer({.dtype = bf16});
  EXPECT_EQ(matmul(a, a).dtype(), bf16);
  {
    amp::autocast off(false);
    EXPECT_FALSE(amp::autocast::is_enabled());
    EXPECT_EQ(matmul(a, a).dtype(), f32);
    {
      amp::autocast inner({.dtype = f16});
      EXPECT_EQ(matmul(a, a).dtype(), f16);
    }
    EXPECT_EQ(matmul(a, a).dtype(), f32);
  }
  EXPECT_EQ(matmul(a, a).dtype(), bf16);
}

TEST(Autocast, BackwardGivesGradientsInTheParametersTypeAsHandCast) {
  Generator generator(5);
  Tensor x0 = randn({4, 6}, f32, &generator), w0 = randn({6, 3}, f32, &generator);
  Tensor target = randn({4, 3}, f32, &generator);

  Tensor x = x0.detach(), w = w0.detach();
  w.requires_grad_();
  {
    amp::autocast scope;
    // matmul in f16, relu follows it (clear), mse_loss in f32 (deny).
    Tensor loss = mse_loss(relu(matmul(x, w)), target);
    EXPECT_EQ(loss.dtype(), f32);
    loss.backward();
  }
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), f32);

  Tensor wh = w0.detach();
  wh.requires_grad_();
  Tensor loss = mse_loss(relu(matmul(x.to(f16), wh.to(f16))).to(f32), target);
  loss.backward();
  expectSameTensor(w.grad(), wh.grad(), "grad w");
}

TEST(Autocast, ALinearOverTokensGetsItsWeightGradientFromOneFp32AccumulatedGemm) {
  // x [64, 4, 8] through a Linear under f16 autocast: dW sums 256 rows of
  // outer products. As one GEMM (the batch folded into rows, as PyTorch's
  // linear does) it is rounded to f16 once; as 64 per-batch f16 products
  // summed in f16 it collects 64 more roundings.
  Generator generator(17);
  Tensor x = randn({64, 4, 8}, f32, &generator);
  Tensor w = randn({3, 8}, f32, &generator).requires_grad_();
  Tensor dy = randn({64, 4, 3}, f32, &generator);
  {
    amp::autocast scope({.dtype = f16});
    sum(matmul(x, w, {.transpose_rhs = true}) * dy.to(f16)).backward();
  }
  // The reference from the f16-rounded operands, in f64.
  std::vector<double> x16 = x.to(f16).to_vector(), dy16 = dy.to(f16).to_vector(), got = w.grad().to_vector();
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t i = 0; i < 8; ++i) {
      double exact = 0;
      for (int64_t r = 0; r < 256; ++r)
        exact += dy16[size_t(r * 3 + o)] * x16[size_t(r * 8 + i)];
      // One f16 rounding of the exact sum (2^-11 relative), the rest fp32.
      EXPECT_NEAR(got[size_t(o * 8 + i)], exact, std::abs(exact) * 0x1p-11 + 1e-5) << o << ", " << i;
    }
}

TEST(Autocast, ALinearLayerAddsItsBiasInItsProductsTypeAsTorchsLinear) {
  // torch's linear (addmm) is one op under autocast: a biased nn.Linear
  // returns f16. A user's own matmul + b promotes to f32, as in torch.
  for (DType low : {f16, bf16}) {
    SCOPED_TRACE(std::string(dtype_name(low)));
    Generator generator(23);
    Tensor x = randn({4, 8}, f32, &generator), single = randn({8}, f32, &generator);
    nn::Linear layer(8, 3);
    Tensor expected = matmul(x.to(low), layer.weight.to(low), {.transpose_rhs = true}) + layer.bias.to(low);
    Tensor actual, ownAdd, vector;
    {
      amp::autocast scope({.dtype = low});
      actual = layer(x);
      ownAdd = matmul(x, layer.weight, {.transpose_rhs = true}) + layer.bias;
      vector = linear(single, layer.weight, layer.bias);
    }
    expectSameTensor(actual, expected, "linear");
    EXPECT_EQ(ownAdd.dtype(), f32);
    EXPECT_EQ(vector.dtype(), low);
    EXPECT_EQ(vector.shape(), (Shape{3}));
  }
}

TEST(Autocast, ALinearLayersBiasGradientComesFromItsLowPrecisionOutputGradient) {
  // As torch: the bias gradient is the batch sum of the f16 output gradient,
  // widened to the f32 parameter; the same bits as the hand-cast layer.
  Generator generator(24);
  Tensor x = randn({6, 5}, f32, &generator), dy = randn({6, 4}, f32, &generator);
  nn::Linear layer(5, 4);
  {
    amp::autocast scope;
    sum(layer(x) * dy.to(f16)).backward();
  }
  Tensor w = layer.weight.detach().requires_grad_(), b = layer.bias.detach().requires_grad_();
  sum((matmul(x.to(f16), w.to(f16), {.transpose_rhs = true}) + b.to(f16)) * dy.to(f16)).backward();
  ASSERT_EQ(layer.bias.grad().dtype(), f32);
  expectSameTensor(layer.bias.grad(), b.grad(), "bias gradient");
  expectSameTensor(layer.weight.grad(), w.grad(), "weight gradient");
}

TEST(Autocast, ALinearWhoseMatmulIsDeniedAddsItsBiasInFp32) {
  // The bias follows the product, whatever decided the product's type.
  Generator generator(25);
  Tensor x = randn({2, 3}, f32, &generator);
  nn::Linear layer(3, 2);
  amp::autocast scope({.custom_deny = {"jit.matmul"}});
  EXPECT_EQ(layer(x).dtype(), f32);
  // And an f64 layer is the user's precision: autocast leaves it alone.
  nn::Linear wide(3, 2, true, {.dtype = f64});
  EXPECT_EQ(wide(x.to(f64)).dtype(), f64);
}

TEST(Autocast, LinearRefusesAWeightThatIsNotOutByIn) {
  Tensor x = zeros({2, 3}), w = zeros({3, 4}), b = zeros({3});
  EXPECT_NE(errorOf([&] { linear(x, w, b); }).find("jit::linear: operand 'input' f32[2x3] and operand 'weight' f32[3x4]"),
            std::string::npos)
      << errorOf([&] { linear(x, w, b); });
  EXPECT_NE(errorOf([&] { linear(x, zeros({4, 3}), b); }).find("operand 'bias' f32[3] must be a vector of the weight's 4"),
            std::string::npos)
      << errorOf([&] { linear(x, zeros({4, 3}), b); });
}

TEST(Autocast, BackwardCalledInsideAScopeRunsWithoutAutocast) {
  // The VJP of a f32 softmax under f16 autocast would otherwise be cast.
  Tensor x = tensor({0.5, -1.0, 2.0}, {1, 3});
  x.requires_grad_();
  amp::autocast scope;
  Tensor y = sum(softmax(x, 1) * tensor({1.0, 2.0, 3.0}, {1, 3}));
  y.backward();
  EXPECT_EQ(x.grad().dtype(), f32);
}

TEST(Autocast, PytorchPolicyKeepsSumFp32ForBf16) {
  Tensor x = tensor({1.0, 2.0, 3.0}, {3}, bf16);
  {
    amp::autocast scope({.dtype = bf16});
    EXPECT_EQ(sum(x).dtype(), bf16); // default: sum is infer for bf16
  }
  amp::autocast scope({.dtype = bf16, .policy = "pytorch"});
  EXPECT_EQ(sum(x).dtype(), f32);
}

TEST(Autocast, UserPolicyMovesSoftmaxToAllow) {
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = writeFile(scratch, "allow-softmax.yaml", "version: 1\nallow:\n  add: [jit.softmax]\n");
  Tensor x = tensor({0.5, -1.0, 2.0}, {1, 3});
  amp::autocast scope({.policy = path});
  Tensor y = softmax(x, 1);
  EXPECT_EQ(y.dtype(), f16);
  amp::autocast off(false);
  expectSameTensor(y, softmax(x.to(f16), 1), "softmax");
}

TEST(Autocast, CustomListsMoveOpsAsPaddlesWhiteAndBlackLists) {
  // paddle.amp.auto_cast(custom_white_list={'softmax'}, custom_black_list={'matmul'}).
  Generator g(3);
  Tensor x = randn({2, 3}, f32, &g), w = randn({3, 3}, f32, &g);
  {
    amp::autocast scope({.custom_allow = {"jit.softmax"}, .custom_deny = {"jit.matmul"}});
    Tensor y = softmax(x, 1);
    Tensor product = matmul(x, w);
    amp::autocast off(false);
    expectSameTensor(y, softmax(x.to(f16), 1), "softmax");
    expectSameTensor(product, matmul(x, w), "matmul");
  }
  {
    amp::autocast scope({.dtype = bf16, .policy = "pytorch", .custom_allow = {"jit.softmax"}});
    EXPECT_EQ(softmax(x, 1).dtype(), bf16);
    EXPECT_EQ(matmul(x, w).dtype(), bf16);
  }
  amp::autocast plain(amp::AutocastOptions{});
  EXPECT_EQ(softmax(x, 1).dtype(), f32);
  EXPECT_EQ(matmul(x, w).dtype(), f16);
}

TEST(Autocast, BadCustomListsAreErrorsThatLeaveAutocastAsItWas) {
  EXPECT_NE(errorOf([] { amp::autocast scope({.custom_allow = {"jit.softmx"}}); }).find("<custom lists>"),
            std::string::npos);
  EXPECT_NE(errorOf([] { amp::autocast scope({.custom_allow = {"jit.exp"}, .custom_deny = {"jit.exp"}}); })
                .find("'jit.exp' is in both custom_allow and custom_deny"),
            std::string::npos);
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = writeFile(scratch, "plain.yaml", "version: 1\n");
  EXPECT_NE(errorOf([&] { amp::autocast scope({.policy = path, .custom_deny = {"jit.exp"}}); })
                .find("put the lists in that file"),
            std::string::npos);
  EXPECT_FALSE(amp::autocast::is_enabled());
}

TEST(Autocast, BadPolicyFileIsAnErrorNamingFileAndLine) {
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = writeFile(scratch, "bad.yaml", "version: 1\nallow:\n  add: [jit.softmx]\n");
  std::string message = errorOf([&] { amp::autocast scope({.policy = path}); });
  EXPECT_NE(message.find(path + ":3:"), std::string::npos) << message;
  EXPECT_NE(message.find("jit.softmax"), std::string::npos) << message; // the suggestion
  EXPECT_FALSE(amp::autocast::is_enabled());
  EXPECT_NE(errorOf([] { amp::autocast scope({.policy = "nonesuch"}); }).find("unknown policy 'nonesuch'"),
            std::string::npos);
  EXPECT_NE(errorOf([] { amp::autocast scope({.dtype = f32}); }).find("f16 or bf16"), std::string::npos);
}

TEST(AmpPolicy, LevelDefaults) {
  auto o0 = amp::Policy{.level = amp::O0}.resolve();
  EXPECT_EQ(o0.dtype, f32);
  EXPECT_FALSE(o0.master_weights);
  EXPECT_EQ(o0.loss_scale, amp::LossScale(1.0));
  auto o1 = amp::Policy{.level = amp::O1}.resolve();
  EXPECT_EQ(o1.dtype, f16);
  EXPECT_EQ(o1.cast_model_type, f32);
  EXPECT_FALSE(o1.master_weights);
  EXPECT_EQ(o1.loss_scale, amp::LossScale(amp::dynamic));
  auto o2 = amp::Policy{.level = amp::O2, .dtype = bf16}.resolve();
  EXPECT_EQ(o2.cast_model_type, bf16);
  EXPECT_TRUE(o2.master_weights);
  EXPECT_TRUE(o2.keep_batchnorm_fp32);
  EXPECT_EQ(o2.loss_scale, amp::LossScale(1.0)); // bf16 needs no scaling
  auto o3 = amp::Policy{.level = amp::O3}.resolve();
  EXPECT_FALSE(o3.master_weights);
  EXPECT_FALSE(o3.keep_batchnorm_fp32);
  auto o2static = amp::Policy{.level = amp::O2, .loss_scale = 128.0}.resolve();
  EXPECT_EQ(o2static.loss_scale, amp::LossScale(128.0));
  // MindSpore's auto: fp32 parameters cast per use, as O1; scaled in f16, not in bf16.
  auto automatic = amp::Policy{.level = amp::Auto}.resolve();
  EXPECT_EQ(automatic.dtype, f16);
  EXPECT_EQ(automatic.cast_model_type, f32);
  EXPECT_FALSE(automatic.master_weights);
  EXPECT_FALSE(automatic.keep_batchnorm_fp32);
  EXPECT_EQ(automatic.loss_scale, amp::LossScale(amp::dynamic));
  EXPECT_EQ((amp::Policy{.level = amp::Auto, .dtype = bf16}.resolve().loss_scale), amp::LossScale(1.0));
}

TEST(AmpPolicy, ThePreferredDtypeOnTheCpuIsBf16AndItsPolicyScalesNothing) {
  EXPECT_EQ(amp::preferred_dtype(Backend::cpu), bf16);
  amp::Policy policy{.level = amp::O1, .dtype = amp::preferred_dtype(Backend::cpu)};
  EXPECT_EQ(policy.resolve().loss_scale, amp::LossScale(1.0));
  EXPECT_NE(policy.pipelineOptions().find("dtype=bf16"), std::string::npos);
  if (!cuda::is_available()) {
    std::string message = errorOf([] { amp::preferred_dtype(Backend::cuda); });
    EXPECT_NE(message.find("jit::amp::preferred_dtype"), std::string::npos) << message;
  }
}

TEST(AmpPolicy, EveryLevelIsFoundByItsName) {
  for (amp::Level level : amp::kLevels)
    EXPECT_EQ(amp::level_from_name(amp::level_name(level)), level) << amp::level_name(level);
  EXPECT_EQ(amp::level_from_name("auto"), amp::Auto);
  EXPECT_FALSE(amp::level_from_name("O4").has_value());
  EXPECT_FALSE(amp::level_from_name("o1").has_value());
  EXPECT_FALSE(amp::level_from_name("").has_value());
}

TEST(AmpPolicy, NonsensicalOverridesSayWhy) {
  auto expectError = [](const amp::Policy& policy, const std::string& part) {
    std::string message = errorOf([&] { policy.resolve(); });
    EXPECT_NE(message.find(part), std::string::npos) << "got: " << message;
  };
  expectError({.level = amp::O1, .master_weights = true}, "O1 keeps parameters in fp32");
  expectError({.level = amp::O1, .keep_batchnorm_fp32 = true}, "O2's property");
  expectError({.level = amp::Auto, .master_weights = true}, "auto keeps parameters in fp32");
  expectError({.level = amp::Auto, .keep_batchnorm_fp32 = false}, "O2's property");
  expectError({.level = amp::Auto, .dtype = f32}, "f16 or bf16");
  expectError({.level = amp::O0, .dtype = f16}, "O0 runs every op in fp32");
  expectError({.level = amp::O0, .loss_scale = 1024.0}, "no low-precision gradients");
  expectError({.level = amp::O0, .master_weights = true}, "nothing to be the master of");
  expectError({.level = amp::O3, .keep_batchnorm_fp32 = true}, "O3 is pure low precision");
  expectError({.level = amp::O3, .custom_allow = {"jit.softmax"}}, "consults no op lists");
  expectError({.level = amp::O2, .keep_batchnorm_fp32 = false}, "deny");
  expectError({.level = amp::O1, .dtype = f32}, "f16 or bf16");
  expectError({.level = amp::O1, .loss_scale = -1.0}, "positive and finite");
  expectError({.level = amp::O1, .custom_allow = {"jit.exp"}, .custom_deny = {"jit.exp"}}, "both");
  expectError({.level = amp::O1, .custom_allow = {"jit.softmx"}}, "did you mean 'jit.softmax'");
  expectError({.level = amp::O1, .policy = "x.yaml", .custom_deny = {"jit.gelu"}}, "put the lists in that file");
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string bad = writeFile(scratch, "policy-bad.yaml", "version: 1\ndeny:\n  add: [jit.nope]\n");
  expectError({.level = amp::O1, .policy = bad}, bad + ":3:");
}

TEST(AmpPolicy, PipelineOptions) {
  EXPECT_EQ(amp::Policy{}.pipelineOptions(), "level=O1 dtype=f16 policy=default master-weights=off");
  EXPECT_EQ((amp::Policy{.level = amp::O0}.pipelineOptions()), "level=O0 policy=default master-weights=off");
  EXPECT_EQ((amp::Policy{.level = amp::O2, .dtype = bf16}.pipelineOptions()),
            "level=O2 dtype=bf16 policy=default master-weights=on");
  EXPECT_EQ((amp::Policy{.level = amp::O3, .policy = "pytorch"}.pipelineOptions()),
            "level=O3 dtype=f16 policy=pytorch master-weights=off");
  EXPECT_EQ((amp::Policy{.level = amp::O2, .master_weights = false}.pipelineOptions()),
            "level=O2 dtype=f16 policy=default master-weights=off");
  EXPECT_EQ((amp::Policy{.level = amp::Auto, .dtype = bf16}.pipelineOptions()),
            "level=auto dtype=bf16 policy=default master-weights=off");

  // Custom lists travel as a user policy file that the same loader accepts.
  amp::Policy custom{.level = amp::O1, .custom_allow = {"jit.softmax"}, .custom_deny = {"jit.gelu"}};
  std::string options = custom.pipelineOptions();
  const std::string prefix = "level=O1 dtype=f16 policy=", suffix = " master-weights=off";
  ASSERT_EQ(options.rfind(prefix, 0), 0u) << options;
  ASSERT_TRUE(options.ends_with(suffix)) << options;
  std::string file = options.substr(prefix.size(), options.size() - prefix.size() - suffix.size());
  EXPECT_TRUE(file.ends_with(".yaml")) << file;
  EXPECT_EQ(custom.pipelineOptions(), options); // content-named: stable
  Tensor x = tensor({0.5, -1.0, 2.0}, {1, 3});
  amp::autocast scope({.policy = file});
  EXPECT_EQ(softmax(x, 1).dtype(), f16);
  EXPECT_EQ(gelu(x.to(f16)).dtype(), f32);
}

TEST(AmpPolicy, ACustomListsFileIsLeftAloneWhenWholeAndReplacedWhenNot) {
  // Processes side by side share the content-named file: one must not
  // rewrite it under another that is compiling from it, and a file cut
  // short (a writer killed before this one wrote whole files) is replaced.
  amp::Policy custom{.level = amp::O2, .custom_deny = {"jit.exp", "jit.log"}};
  std::string options = custom.pipelineOptions();
  std::size_t begin = options.find("policy=") + 7;
  std::filesystem::path file = options.substr(begin, options.find(' ', begin) - begin);
  auto contents = [&] {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string yaml = *custom.custom_policy_yaml();
  ASSERT_EQ(contents(), yaml);

  const auto longAgo = std::filesystem::file_time_type::clock::now() - std::chrono::hours(24);
  std::filesystem::last_write_time(file, longAgo);
  EXPECT_EQ(custom.pipelineOptions(), options);
  EXPECT_EQ(std::filesystem::last_write_time(file), longAgo) << "a whole file is not rewritten";

  std::filesystem::resize_file(file, yaml.size() / 2);
  EXPECT_EQ(custom.pipelineOptions(), options);
  EXPECT_EQ(contents(), yaml) << "a file cut short is written whole again";
  for (const auto& entry : std::filesystem::directory_iterator(file.parent_path()))
    EXPECT_EQ(entry.path().string().find(file.string() + ".tmp"), std::string::npos)
        << entry.path() << " was left beside the policy";
}

} // namespace
} // namespace jit
