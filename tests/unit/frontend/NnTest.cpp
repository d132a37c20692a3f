// jit::nn: layers against hand computations, parameter naming and order,
// init, train/eval, state files (round trip and every corruption), .npy
// import in PyTorch's layout, and a small MLP trained eagerly.

#include "FrontendTestUtil.h"
#include "TemporaryDirectory.h"

#include "ampjit/runtime/Fnv1a.h"
#include "ampjit/runtime/LowPrecision.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

using namespace jit;
using jit::testing::errorOf;
namespace fs = std::filesystem;

namespace {

/// A fresh directory per test (pid-qualified, so parallel ctest runs do not collide).
std::vector<uint8_t> readBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void writeBytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

/// Writes a .npy (format 1.0) the way np.save does: a dict header padded with
/// spaces to a multiple of 64 bytes and ended by '\n', then the raw data.
void writeNpy(const fs::path& path, const std::string& descr, const Shape& shape, const void* data, size_t size,
              bool fortran = false) {
  std::string dims;
  for (int64_t d : shape)
    dims += std::to_string(d) + ", ";
  if (shape.size() > 1)
    dims.resize(dims.size() - 2); // "(2, 3)" but "(5, )" -> numpy writes "(5,)"
  else if (shape.size() == 1)
    dims.resize(dims.size() - 1);
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  std::vector<uint8_t> bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  bytes.push_back(uint8_t(header.size() & 0xff));
  bytes.push_back(uint8_t(header.size() >> 8));
  bytes.insert(bytes.end(), header.begin(), header.end());
  auto p = static_cast<const uint8_t*>(data);
  bytes.insert(bytes.end(), p, p + size);
  writeBytes(path, bytes);
}

/// y[n][o] = sum_i x[n][i] * w[o][i] + b[o], in double, w in [out, in].
std::vector<double> linearByHand(const std::vector<double>& x, const std::vector<double>& w,
                                 const std::vector<double>& b, int64_t rows, int64_t in, int64_t out) {
  std::vector<double> y(size_t(rows * out));
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[size_t(o)];
      for (int64_t i = 0; i < in; ++i)
        acc += x[size_t(n * in + i)] * w[size_t(o * in + i)];
      y[size_t(n * out + o)] = acc;
    }
  return y;
}

std::vector<std::string> namesOf(const std::vector<NamedTensor>& entries) {
  std::vector<std::string> names;
  for (const auto& entry : entries)
    names.push_back(entry.first);
  return names;
}

bool bitIdentical(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return false;
  size_t size = size_t(a.numel()) * ampjit::runtime::dtypeSize(a.dtype());
  switch (a.dtype()) {
  case DType::F32: return std::memcmp(a.data_ptr<float>(), b.data_ptr<float>(), size) == 0;
  case DType::F64: return std::memcmp(a.data_ptr<double>(), b.data_ptr<double>(), size) == 0;
  case DType::F16:
  case DType::BF16: return std::memcmp(a.data_ptr<uint16_t>(), b.data_ptr<uint16_t>(), size) == 0;
  default: return a.to_vector() == b.to_vector();
  }
}

struct TwoLayer : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  Tensor scale;
  explicit TwoLayer(Generator* generator) {
    scale = register_parameter("scale", ones({2}));
    fc1 = register_module("fc1", nn::Linear(3, 4, true, {.generator = generator}));
    fc2 = register_module("fc2", nn::Linear(4, 2, false, {.generator = generator}));
    register_buffer("steps", zeros({}, i64));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(relu((*fc1)(x))) * scale; }
};

} // namespace

TEST(Nn, LinearForwardIsXWTransposePlusB) {
  Generator generator(11);
  nn::Linear linear(3, 2, true, {.dtype = f64, .generator = &generator});
  EXPECT_EQ(linear.weight.shape(), (Shape{2, 3})); // PyTorch's [out, in]
  EXPECT_EQ(linear.bias.shape(), (Shape{2}));
  Tensor x = tensor({1, -2, 0.5, 3, 0.25, -1, 2, 2, 2, -0.75, 4, 1.5}, {4, 3}, f64);
  std::vector<double> expected =
      linearByHand(x.to_vector(), linear.weight.to_vector(), linear.bias.to_vector(), 4, 3, 2);
  Tensor y = linear(x);
  EXPECT_EQ(y.shape(), (Shape{4, 2}));
  jit::testing::expectClose(y.to_vector(), expected, {1e-14, 1e-14}, "Linear f64");

  // A vector input is one row; without bias there is no addend.
  nn::Linear noBias(3, 2, false, {.dtype = f64, .generator = &generator});
  EXPECT_FALSE(noBias.bias.defined());
  EXPECT_EQ(namesOf(noBias.named_parameters()), (std::vector<std::string>{"weight"}));
  Tensor v = tensor({1, 2, 3}, f64);
  Tensor yv = noBias(v);
  EXPECT_EQ(yv.shape(), (Shape{2}));
  jit::testing::expectClose(yv.to_vector(), linearByHand(v.to_vector(), noBias.weight.to_vector(), {}, 1, 3, 2),
                            {1e-14, 1e-14}, "Linear vector");

  EXPECT_NE(errorOf([&] { linear(tensor({1, 2}, {1, 2}, f64)); }).find("must have last dimension 3"),
            std::string::npos);
}

TEST(Nn, SequentialParameterNamesAndOrder) {
  nn::Sequential model(nn::Flatten(), nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 512), nn::ReLU(),
                       nn::Linear(512, 10));
  EXPECT_EQ(model.size(), 6u);
  auto named = model.named_parameters();
  EXPECT_EQ(namesOf(named), (std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias", "5.weight",
                                                      "5.bias"}));
  std::vector<Tensor> parameters = model.parameters();
  ASSERT_EQ(parameters.size(), 6u);
  for (size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_TRUE(parameters[i].is_same(named[i].second)) << i;
    EXPECT_TRUE(parameters[i].requires_grad()) << i;
  }
  EXPECT_EQ(parameters[0].shape(), (Shape{512, 784}));
  EXPECT_EQ(parameters[5].shape(), (Shape{10}));
  EXPECT_TRUE(parameters[2].is_same(dynamic_cast<nn::Linear&>(model[3]).weight));
  EXPECT_TRUE(model.named_buffers().empty());

  // A [N, 1, 28, 28] batch flattens to [N, 784].
  Tensor out = model(zeros({2, 1, 28, 28}));
  EXPECT_EQ(out.shape(), (Shape{2, 10}));

  // A user-built module: own entries first, then children; buffers in the state only.
  Generator generator(5);
  TwoLayer user(&generator);
  EXPECT_EQ(namesOf(user.named_parameters()),
            (std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "fc2.weight"}));
  EXPECT_EQ(namesOf(user.state_dict()),
            (std::vector<std::string>{"scale", "steps", "fc1.weight", "fc1.bias", "fc2.weight"}));
  EXPECT_FALSE(user.named_buffers()[0].second.requires_grad());
  // Nested Sequential names are dotted paths.
  nn::Sequential outer;
  outer.push_back(nn::Sequential(nn::Linear(2, 2), nn::LayerNorm({2})));
  EXPECT_EQ(namesOf(outer.named_parameters()),
            (std::vector<std::string>{"0.0.weight", "0.0.bias", "0.1.weight", "0.1.bias"}));
}

TEST(Nn, RegistrationErrorsAndTrainEvalZeroGrad) {
  struct Bad : nn::Module {
    Bad() { register_parameter("w", zeros({1})); }
    void again() { register_parameter("w", zeros({1})); }
    void dotted() { register_parameter("a.b", zeros({1})); }
    Tensor forward(const Tensor& x) override { return x; }
  } bad;
  EXPECT_NE(errorOf([&] { bad.again(); }).find("'w' is already registered"), std::string::npos);
  EXPECT_NE(errorOf([&] { bad.dotted(); }).find("contain no '.'"), std::string::npos);

  Generator generator(3);
  TwoLayer model(&generator);
  EXPECT_TRUE(model.is_training());
  model.eval();
  EXPECT_FALSE(model.is_training());
  EXPECT_FALSE(model.fc1->is_training()); // recursive, as in PyTorch
  model.train();
  EXPECT_TRUE(model.fc2->is_training());

  sum(model(ones({2, 3}))).backward();
  for (const Tensor& p : model.parameters())
    EXPECT_TRUE(p.grad().defined());
  model.zero_grad();
  for (const Tensor& p : model.parameters())
    EXPECT_FALSE(p.grad().defined());
}

TEST(Nn, LinearInitIsPyTorchsUniformOverTheGeneratorsDraws) {
  // kaiming_uniform(a=sqrt(5)) on [out, in]: U(-1/sqrt(in), 1/sqrt(in)) drawn
  // weight first, then the bias, each value (2u - 1) * bound in order.
  Generator init(8), direct(8);
  nn::Linear layer(6, 4, true, {.generator = &init});
  const double bound = 1.0 / std::sqrt(6.0);
  std::vector<double> weight(24), bias(4);
  for (double& v : weight)
    v = (2.0 * direct.next_uniform() - 1.0) * bound;
  for (double& v : bias)
    v = (2.0 * direct.next_uniform() - 1.0) * bound;
  EXPECT_TRUE(bitIdentical(layer.weight, tensor(std::span<const double>(weight), {4, 6}, f32)));
  EXPECT_TRUE(bitIdentical(layer.bias, tensor(std::span<const double>(bias), {4}, f32)));
}

TEST(Nn, LinearInitBoundsAndSeedDeterminism) {
  Generator g1(42), g2(42), g3(43);
  nn::Linear a(100, 50, true, {.generator = &g1});
  nn::Linear b(100, 50, true, {.generator = &g2});
  nn::Linear c(100, 50, true, {.generator = &g3});
  const double bound = 1.0 / std::sqrt(100.0);
  for (const Tensor& p : {a.weight, a.bias}) {
    double largest = 0, total = 0;
    for (double v : p.to_vector()) {
      EXPECT_LE(std::fabs(v), bound);
      largest = std::max(largest, std::fabs(v));
      total += v;
    }
    // Uniform over the whole interval: near the bound, centred on zero.
    EXPECT_GT(largest, 0.9 * bound);
    EXPECT_LT(std::fabs(total / double(p.numel())), 0.2 * bound);
  }
  EXPECT_TRUE(bitIdentical(a.weight, b.weight));
  EXPECT_TRUE(bitIdentical(a.bias, b.bias));
  EXPECT_FALSE(bitIdentical(a.weight, c.weight));

  // The default generator is seeded by jit::manual_seed.
  manual_seed(9);
  nn::Linear d(4, 3);
  manual_seed(9);
  nn::Linear e(4, 3);
  EXPECT_TRUE(bitIdentical(d.weight, e.weight));
  EXPECT_TRUE(bitIdentical(d.bias, e.bias));

  nn::LayerNorm norm({3}, 1e-5, true, {.dtype = f64});
  EXPECT_EQ(norm.weight.to_vector(), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(norm.bias.to_vector(), (std::vector<double>{0, 0, 0}));
  EXPECT_TRUE(nn::LayerNorm({3}, 1e-5, false).parameters().empty());
}

TEST(Nn, ActivationsNormAndFlatten) {
  Tensor x = tensor({-1, 0.5, 2, -3, 4, 0.25}, {2, 3}, f64);
  EXPECT_EQ(nn::ReLU()(x).to_vector(), relu(x).to_vector());
  EXPECT_EQ(nn::GELU(GeluApproximate::tanh)(x).to_vector(), gelu(x, GeluApproximate::tanh).to_vector());
  nn::LayerNorm norm({3}, 1e-5, true, {.dtype = f64});
  EXPECT_EQ(norm(x).to_vector(), layer_norm(x, {3}, norm.weight, norm.bias).to_vector());
  EXPECT_EQ(nn::Flatten()(zeros({2, 3, 4, 5})).shape(), (Shape{2, 60}));
  EXPECT_EQ(nn::Flatten(0)(zeros({2, 3, 4})).shape(), (Shape{24}));
  EXPECT_EQ(nn::Flatten(1, 2)(zeros({2, 3, 4, 5})).shape(), (Shape{2, 12, 5}));
}

TEST(Nn, TanhSigmoidSiluLeakyReluAndSoftmaxModulesFollowTheirFormulas) {
  std::vector<double> values = {-2.5, -0.5, 0.0, 0.75, 3.0, std::nan("")};
  Tensor x = tensor(values, {2, 3}, f64);
  auto expectEach = [&](nn::Module& module, auto formula, const char* name) {
    std::vector<double> got = module(x).to_vector();
    ASSERT_EQ(got.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      double expected = formula(values[i]);
      if (std::isnan(expected))
        EXPECT_TRUE(std::isnan(got[i])) << name << " element " << i;
      else
        EXPECT_NEAR(got[i], expected, 1e-15 * (1 + std::abs(expected))) << name << " element " << i;
    }
  };
  nn::Tanh tanhModule;
  nn::Sigmoid sigmoidModule;
  nn::SiLU silu;
  nn::LeakyReLU leaky(0.2), leakyDefault;
  expectEach(tanhModule, [](double v) { return std::tanh(v); }, "Tanh");
  expectEach(sigmoidModule, [](double v) { return 1 / (1 + std::exp(-v)); }, "Sigmoid");
  expectEach(silu, [](double v) { return v / (1 + std::exp(-v)); }, "SiLU");
  expectEach(leaky, [](double v) { return v > 0 ? v : 0.2 * v; }, "LeakyReLU(0.2)");
  expectEach(leakyDefault, [](double v) { return v > 0 ? v : 0.01 * v; }, "LeakyReLU()");
  Tensor finite = tensor({-1.0, 0.5, 2.0, 3.0, -4.0, 0.25}, {2, 3}, f64);
  EXPECT_EQ(nn::Softmax(-1)(finite).to_vector(), softmax(finite, 1).to_vector());
  EXPECT_EQ(nn::LogSoftmax(0)(finite).to_vector(), log_softmax(finite, 0).to_vector());
  // PyTorch's LeakyReLU gradient at 0 is the slope (x > 0 is false there).
  Tensor zero = tensor({0.0}, {1}, f64).requires_grad_();
  sum(leaky(zero)).backward();
  EXPECT_EQ(zero.grad().to_vector(), std::vector<double>{0.2});
}

TEST(Nn, NamedModulesApplyAndFreezingALayer) {
  Generator generator(13);
  nn::Sequential model(nn::Linear(4, 8, true, {.generator = &generator}), nn::ReLU(),
                       nn::Sequential(nn::Linear(8, 3, true, {.generator = &generator})));
  std::vector<std::string> names;
  for (const auto& [name, module] : model.named_modules())
    names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"", "0", "1", "2", "2.0"}));
  EXPECT_EQ(model.named_modules()[0].second.get(), &model);

  // apply: children before parents; a custom initialisation of every Linear.
  std::vector<std::string> order;
  model.apply([&](nn::Module& module) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&module)) {
      NoGradGuard noGrad;
      linear->weight.copy_(full(linear->weight.shape(), 0.25));
      order.push_back("linear");
    } else {
      order.push_back(dynamic_cast<nn::Sequential*>(&module) ? "sequential" : "other");
    }
  });
  EXPECT_EQ(order, (std::vector<std::string>{"linear", "other", "linear", "sequential", "sequential"}));
  EXPECT_EQ(model.state_dict()[2].second.to_vector(), std::vector<double>(24, 0.25));

  // Freezing the first layer between calls of a traced step: it retraces,
  // the frozen layer stays, the rest trains; unfreezing trains it again.
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  auto step = trace([&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    return loss;
  }, {.backend = Backend::cpu, .log_retraces = false});
  Tensor x = randn({5, 4}, f32, &generator);
  Tensor y = tensor(std::span<const int64_t>(std::vector<int64_t>{0, 1, 2, 1, 0}), {5});
  step(x, y);
  auto* first = dynamic_cast<nn::Linear*>(model.named_modules()[1].second.get());
  ASSERT_NE(first, nullptr);
  first->requires_grad_(false);
  std::vector<double> frozen = first->weight.to_vector(), head = model.state_dict()[2].second.to_vector();
  step(x, y);
  step(x, y);
  EXPECT_EQ(first->weight.to_vector(), frozen);
  EXPECT_NE(model.state_dict()[2].second.to_vector(), head);
  EXPECT_EQ(step.stats().traces, 2u);
  first->requires_grad_(true);
  step(x, y);
  EXPECT_NE(first->weight.to_vector(), frozen);
}

TEST(Nn, DropoutIsTheIdentityInEvalMode) {
  Generator generator(1);
  nn::Sequential model(nn::Dropout(0.5, &generator));
  Tensor x = ones({64});
  Tensor trained = model(x);
  std::vector<double> values = trained.to_vector();
  EXPECT_TRUE(std::count(values.begin(), values.end(), 0.0) > 0);
  EXPECT_TRUE(std::count(values.begin(), values.end(), 2.0) > 0); // kept ones scaled by 1/(1-p)
  model.eval();
  Tensor evaluated = model(x);
  EXPECT_TRUE(evaluated.is_same(x));
  EXPECT_NE(errorOf([] { nn::Dropout(1.0); }).find("p must be in [0, 1)"), std::string::npos);
}

TEST(Nn, SaveThenLoadIsBitIdentical) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  Generator g1(1), g2(2);
  auto make = [](Generator* g) {
    return nn::Sequential(nn::Linear(5, 4, true, {.generator = g}), nn::GELU(),
                          nn::LayerNorm({4}, 1e-5, true, {.dtype = f32}),
                          nn::Linear(4, 3, true, {.dtype = f32, .generator = g}));
  };
  nn::Sequential source = make(&g1), target = make(&g2);
  // Make the LayerNorm parameters non-trivial so the round trip shows on them too.
  {
    NoGradGuard noGrad;
    dynamic_cast<nn::LayerNorm&>(source[2]).weight.copy_(tensor({0.5, 1.5, -2, 0.125}, {4}));
  }
  Tensor x = randn({6, 5}, f32, &g1);
  ASSERT_NE(source(x).to_vector(), target(x).to_vector());

  std::string path = (dir / "model.ampjit").string();
  source.save(path);
  target.load(path);
  auto a = source.state_dict(), b = target.state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(bitIdentical(a[i].second, b[i].second)) << a[i].first;
    EXPECT_TRUE(b[i].second.requires_grad()) << a[i].first;
  }
  EXPECT_EQ(source(x).to_vector(), target(x).to_vector());

  // Other dtypes and buffers round-trip too.
  Generator g3(3), g4(4);
  TwoLayer user1(&g3), user2(&g4);
  {
    NoGradGuard noGrad;
    user1.scale.copy_(tensor({0.1, -7}, {2}));
    user1.named_buffers()[0].second.copy_(tensor(std::vector<int64_t>{123456789012345}, {}));
  }
  user1.save(path);
  user2.load(path);
  EXPECT_TRUE(bitIdentical(user1.scale, user2.scale));
  EXPECT_EQ(user2.named_buffers()[0].second.to_vector(), (std::vector<double>{123456789012345.0}));
}

TEST(Nn, CorruptStateFilesAreClearErrors) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  Generator generator(7);
  auto make = [&] { return nn::Sequential(nn::Linear(3, 2, true, {.generator = &generator})); };
  nn::Sequential model = make();
  std::string good = (dir / "good.ampjit").string();
  model.save(good);
  std::vector<uint8_t> bytes = readBytes(good);
  Tensor before = model.parameters()[0].detach();

  auto loadError = [&](const std::vector<uint8_t>& contents) {
    std::string path = (dir / "bad.ampjit").string();
    writeBytes(path, contents);
    return errorOf([&] { model.load(path); });
  };
  auto expectError = [](const std::string& message, std::initializer_list<const char*> parts) {
    for (const char* part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  };

  expectError(errorOf([&] { model.load((dir / "absent.ampjit").string()); }),
              {"absent.ampjit", "cannot open", "No such file or directory"});

  std::vector<uint8_t> magic = bytes;
  magic[0] = 'X';
  expectError(loadError(magic), {"bad.ampjit", "wrong magic"});

  std::vector<uint8_t> version = bytes;
  version[8] = 9; // the u32 version follows the 8-byte magic
  expectError(loadError(version), {"bad.ampjit", "format version 9", "reads versions 1 and 2"});

  std::vector<uint8_t> truncated(bytes.begin(), bytes.end() - 20);
  expectError(loadError(truncated), {"bad.ampjit", "truncated", "entry '0.bias'"});
  expectError(loadError(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 10)), {"truncated"});

  // The first entry's first dimension (after the magic, version, part count,
  // the part's name "" and kind "Module", its setting and entry counts, the
  // entry's name "0.weight", dtype and rank): a shape no tensor can have.
  std::vector<uint8_t> huge = bytes;
  size_t firstDimension = 8 + 4 + 4 + 4 + (4 + 6) + 4 + 4 + (4 + 8) + 1 + 4;
  ASSERT_EQ(huge[firstDimension], 2); // 0.weight is [2x3]
  huge[firstDimension + 7] = 0x40;    // 2^62 + 2
  expectError(loadError(huge), {"bad.ampjit", "entry '0.weight' has shape", "more elements than any tensor"});

  std::vector<uint8_t> flipped = bytes;
  flipped[bytes.size() - 12] ^= 0x40; // a data byte of the last entry
  expectError(loadError(flipped), {"bad.ampjit", "checksum mismatch"});

  // Structurally valid files (right checksum) that do not fit the module.
  auto saveOf = [&](nn::Module& other) {
    std::string path = (dir / "other.ampjit").string();
    other.save(path);
    return errorOf([&] { model.load(path); });
  };
  nn::Sequential renamed(nn::ReLU(), nn::Linear(3, 2));
  expectError(saveOf(renamed), {"other.ampjit", "entry '1.weight' is unknown"});
  nn::Sequential fewer(nn::Linear(3, 2, false));
  expectError(saveOf(fewer), {"other.ampjit", "entry '0.bias'", "missing from the file"});
  nn::Sequential wider(nn::Linear(4, 2));
  expectError(saveOf(wider), {"entry '0.weight'", "shape [2x4]", "module's is [2x3]"});
  nn::Sequential doubled(nn::Linear(3, 2, true, {.dtype = f64}));
  expectError(saveOf(doubled), {"entry '0.weight'", "dtype f64", "module's is f32"});

  // No failed load changed the module.
  EXPECT_TRUE(bitIdentical(model.parameters()[0], before));
}

TEST(Nn, StateFilesOfFormatVersion1StillLoad) {
  // What Module::save wrote before optimizers and scalers had state files:
  // the magic, version 1, the entry count, the entries, an FNV-1a checksum.
  std::vector<uint8_t> bytes = {'A', 'M', 'P', 'J', 'I', 'T', 'N', 'N'};
  auto put = [&](const auto& value) {
    auto raw = reinterpret_cast<const uint8_t*>(&value);
    bytes.insert(bytes.end(), raw, raw + sizeof value);
  };
  auto entry = [&](const std::string& name, const std::vector<float>& values, const Shape& shape) {
    put(uint32_t(name.size()));
    bytes.insert(bytes.end(), name.begin(), name.end());
    put(uint8_t(0)); // f32
    put(uint32_t(shape.size()));
    for (int64_t d : shape)
      put(d);
    put(uint64_t(values.size() * sizeof(float)));
    for (float v : values)
      put(v);
  };
  put(uint32_t(1));
  put(uint32_t(2));
  entry("0.weight", {0.5f, -1.5f}, {1, 2});
  entry("0.bias", {2.0f}, {1});
  put(ampjit::runtime::fnv1a64(bytes));

  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  writeBytes(dir / "v1.ampjit", bytes);
  nn::Sequential model(nn::Linear(2, 1));
  model.load((dir / "v1.ampjit").string());
  EXPECT_EQ(model.parameters()[0].to_vector(), (std::vector<double>{0.5, -1.5}));
  EXPECT_EQ(model.parameters()[1].to_vector(), (std::vector<double>{2.0}));
}

TEST(Nn, NpyWeightsInPyTorchLayout) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  // What np.save(f"{dir}/{name}.npy", p.detach().numpy()) writes for a
  // torch.nn.Sequential(nn.Linear(3, 2)): weight [out=2, in=3] (here f64), bias f32.
  const double w[2][3] = {{0.5, -1.25, 2}, {0.125, 3, -0.75}};
  const float b[2] = {0.25f, -1.5f};
  writeNpy(dir / "0.weight.npy", "<f8", {2, 3}, w, sizeof w);
  writeNpy(dir / "0.bias.npy", "<f4", {2}, b, sizeof b);
  nn::Sequential model(nn::Linear(3, 2));
  model.load_npy_dir(dir.string());
  EXPECT_EQ(model.parameters()[0].to_vector(), (std::vector<double>{0.5, -1.25, 2, 0.125, 3, -0.75}));
  EXPECT_TRUE(model.parameters()[0].requires_grad());

  Tensor x = tensor({1, 2, 3, -4, 0.5, 8}, {2, 3});
  std::vector<double> expected(4);
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 2; ++o) {
      double acc = b[o];
      for (int i = 0; i < 3; ++i)
        acc += x.to_vector()[size_t(n * 3 + i)] * w[o][i];
      expected[size_t(n * 2 + o)] = acc;
    }
  jit::testing::expectClose(model(x).to_vector(), expected, jit::testing::toleranceFor(f32), "npy Linear");

  // f16 .npy through load_npy for one entry.
  uint16_t half[2] = {ampjit::runtime::floatToHalf(0.5f), ampjit::runtime::floatToHalf(-2.0f)};
  writeNpy(dir / "half.npy", "<f2", {2}, half, sizeof half);
  model.load_npy("0.bias", (dir / "half.npy").string());
  EXPECT_EQ(model.parameters()[1].to_vector(), (std::vector<double>{0.5, -2.0}));

  auto error = [&](const std::string& name, const std::string& file) {
    return errorOf([&] { model.load_npy(name, (dir / file).string()); });
  };
  auto expectHas = [](const std::string& message, const char* part) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  };
  const double wt[3][2] = {{0.5, 0.125}, {-1.25, 3}, {2, -0.75}};
  writeNpy(dir / "transposed.npy", "<f8", {3, 2}, wt, sizeof wt);
  expectHas(error("0.weight", "transposed.npy"), "holds shape [3x2] but entry '0.weight' has shape [2x3]");
  writeNpy(dir / "fortran.npy", "<f8", {2, 3}, w, sizeof w, true);
  expectHas(error("0.weight", "fortran.npy"), "Fortran order");
  writeNpy(dir / "big.npy", ">f4", {2}, b, sizeof b);
  expectHas(error("0.bias", "big.npy"), "dtype '>f4'");
  writeNpy(dir / "short.npy", "<f4", {2}, b, sizeof b - 2);
  expectHas(error("0.bias", "short.npy"), "truncated");
  writeBytes(dir / "garbage.npy", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  expectHas(error("0.bias", "garbage.npy"), "not a NumPy .npy file");
  expectHas(error("0.bias", "absent.npy"), "cannot open");
  expectHas(error("1.weight", "half.npy"), "no state entry '1.weight'");
  const int64_t labels[2] = {1, 2};
  writeNpy(dir / "labels.npy", "<i8", {2}, labels, sizeof labels);
  expectHas(error("0.bias", "labels.npy"), "holds i64 values; a floating-point entry loads from a float .npy");
  // Inside a traced step a load would be compiled in as constants.
  auto step = trace(std::function<Tensor(const Tensor&)>([&](const Tensor& input) {
                      model.load_npy("0.bias", (dir / "half.npy").string());
                      return model(input);
                    }),
                    {.backend = Backend::cpu, .name = "loading_step"});
  expectHas(errorOf([&] { step(x); }), "nn::load_npy inside the traced step 'loading_step'");
  fs::remove(dir / "0.bias.npy");
  std::string missing = errorOf([&] { model.load_npy_dir(dir.string()); });
  expectHas(missing, "0.bias.npy");
  expectHas(missing, "entry '0.bias'");
}

TEST(Nn, Mlp784x32x10TrainsWithEagerSgd) {
  Generator generator(2024);
  nn::Sequential model(nn::Flatten(), nn::Linear(784, 32, true, {.generator = &generator}), nn::ReLU(),
                       nn::Linear(32, 10, true, {.generator = &generator}));
  const int64_t batch = 32;
  Tensor images = randn({batch, 1, 28, 28}, f32, &generator);
  std::vector<int64_t> classes;
  for (int64_t i = 0; i < batch; ++i)
    classes.push_back(int64_t(generator.next_uniform() * 10));
  Tensor labels = tensor(std::span<const int64_t>(classes), {batch});

  std::vector<double> losses;
  for (int step = 0; step < 20; ++step) {
    model.zero_grad();
    Tensor loss = cross_entropy(model(images), labels);
    loss.backward();
    losses.push_back(loss.item());
    NoGradGuard noGrad;
    for (Tensor& p : model.parameters())
      p.sub_(p.grad() * 0.1);
  }
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << "first " << losses.front() << ", last " << losses.back();
}
