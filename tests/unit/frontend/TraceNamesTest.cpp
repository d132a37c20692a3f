// jit::trace names the state it captures after the model, the optimizer and
// the scaler, so a plan, an AMPJIT_DUMP and every message about an argument
// say "fc1.weight.exp_avg" where they would say "arg17".

#include "ClassifierNet.h"
#include "FrontendTestUtil.h"

#include "jit/trace.h"

#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>

namespace jit::testing {
namespace {

struct PlanArgument {
  std::string role, type, name;
};

/// The arguments of a printed plan, in order: `%3 = arg 3 param f32[8x4] "fc1.weight"`.
std::vector<PlanArgument> planArguments(const std::string& planText) {
  static const std::regex line(R"re(= arg (\d+) (\S+) (\S+).* "([^"]*)"$)re");
  std::vector<PlanArgument> arguments;
  std::istringstream lines(planText);
  for (std::string text; std::getline(lines, text);)
    if (std::smatch match; std::regex_search(text, match, line)) {
      EXPECT_EQ(std::stoul(match[1]), arguments.size()) << text;
      arguments.push_back({match[2], match[3], match[4]});
    }
  return arguments;
}

std::vector<std::string> namesWithRole(const std::vector<PlanArgument>& arguments, const std::string& role,
                                       const std::string& type = "") {
  std::vector<std::string> names;
  for (const PlanArgument& argument : arguments)
    if (argument.role == role && (type.empty() || argument.type.starts_with(type)))
      names.push_back(argument.name);
  return names;
}

/// A model two levels deep, so names are dotted twice.
struct Encoder : nn::Module {
  explicit Encoder(Generator& generator) {
    layers = register_module("layers", nn::Sequential(nn::Linear(8, 6, true, {.generator = &generator}), nn::ReLU(),
                                                      nn::Linear(6, 6, true, {.generator = &generator})));
    norm = register_module("norm", nn::LayerNorm({6}));
  }
  Tensor forward(const Tensor& x) override { return (*norm)((*layers)(x)); }
  std::shared_ptr<nn::Sequential> layers;
  std::shared_ptr<nn::LayerNorm> norm;
};

struct Net : nn::Module {
  explicit Net(Generator& generator) {
    encoder = register_module("encoder", Encoder(generator));
    head = register_module("head", nn::Linear(6, 3, true, {.generator = &generator}));
  }
  Tensor forward(const Tensor& x) override { return (*head)(relu((*encoder)(x))); }
  std::shared_ptr<Encoder> encoder;
  std::shared_ptr<nn::Linear> head;
};

TEST(TraceNames, AnO2PlanNamesStateAfterTheModelTheOptimizerAndTheScaler) {
  Generator generator(5);
  Net net(generator);
  std::vector<Tensor> encoderParameters = net.encoder->parameters(), headParameters = net.head->parameters();
  optim::Adam opt({{.params = encoderParameters}, {.params = headParameters, .lr = 1e-2}}, {.lr = 1e-3});
  amp::GradScaler scaler;
  auto step = trace([&](const Tensor& x, const Tensor& y) { return scaledTrainStep(net, opt, scaler, x, y); },
                    {.amp = {.level = amp::O2, .dtype = f16}, .backend = Backend::cpu});
  auto [x, y] = batch(4, 8, 3, 1);
  step(x, y);

  std::vector<PlanArgument> arguments = planArguments(step.plan_text());
  ASSERT_FALSE(arguments.empty()) << step.plan_text();
  EXPECT_EQ(namesWithRole(arguments, "input"), (std::vector<std::string>{"input0", "input1"}));
  // The parameters as state_dict() names them, in the order the forward reads them.
  std::vector<std::string> parameterNames;
  for (const auto& [name, tensor] : net.named_parameters())
    parameterNames.push_back(name);
  ASSERT_EQ(parameterNames.front(), "encoder.layers.0.weight");
  EXPECT_EQ(namesWithRole(arguments, "param", "f32"), parameterNames);
  // O2's copies are named after their masters.
  std::vector<std::string> copyNames;
  for (const std::string& name : parameterNames)
    if (!name.starts_with("encoder.norm")) // layer norm's parameters stay fp32 at O2
      copyNames.push_back(name + ".f16");
  EXPECT_EQ(namesWithRole(arguments, "param", "f16"), copyNames);
  // Adam's buffers and step counts are parts of their parameter, with PyTorch's state keys.
  std::multiset<std::string> expectedOptimizerState, optimizerState;
  for (const std::string& name : parameterNames)
    for (const char* key : {"exp_avg", "exp_avg_sq", "step"})
      expectedOptimizerState.insert(name + "." + key);
  for (const std::string& name : namesWithRole(arguments, "opt_state"))
    optimizerState.insert(name);
  EXPECT_EQ(optimizerState, expectedOptimizerState);
  EXPECT_EQ(namesWithRole(arguments, "hyper"), (std::vector<std::string>{"param_groups.0.lr", "param_groups.1.lr"}));
  EXPECT_EQ(namesWithRole(arguments, "scaler_state"),
            (std::vector<std::string>{"scaler.scale", "scaler.growth_tracker", "scaler.bad_steps",
                                      "scaler.skipped_steps", "scaler.last_step_finite"}));
  // The traced module carries the names as the arguments' locations.
  EXPECT_NE(step.traced_module().find("loc(\"encoder.layers.2.bias\""), std::string::npos) << step.traced_module();
}

TEST(TraceNames, NamesFollowTheModuleTreeAsItStandsWhenTheStepIsTraced) {
  // Names are read off the module tree when the step is traced, not when the
  // tensors are made: the optimizer's buffers exist before Outer registers the
  // Sequential, and a layer is appended after it did.
  Generator generator(2);
  auto inner = std::make_shared<nn::Sequential>(nn::Linear(4, 4, true, {.generator = &generator}), nn::ReLU(),
                                                nn::Linear(4, 2, true, {.generator = &generator}));
  optim::SGD opt(inner->parameters(), {.lr = 0.1, .momentum = 0.9});
  struct Outer : nn::Module {
    explicit Outer(std::shared_ptr<nn::Sequential> body) { this->body = register_module("body", std::move(body)); }
    Tensor forward(const Tensor& x) override { return (*body)(x); }
    std::shared_ptr<nn::Sequential> body;
  } outer(inner);
  // A layer appended once the Sequential is already Outer's child is named under it too.
  inner->push_back(nn::Linear(2, 2, false, {.generator = &generator}));
  auto step = trace([&](const Tensor& x, const Tensor& y) { return plainTrainStep(outer, opt, x, y); },
                    {.backend = Backend::cpu});
  auto [x, y] = batch(4, 4, 2, 3);
  step(x, y);
  std::vector<PlanArgument> arguments = planArguments(step.plan_text());
  EXPECT_EQ(namesWithRole(arguments, "param"),
            (std::vector<std::string>{"body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias",
                                      "body.3.weight"}));
  EXPECT_EQ(namesWithRole(arguments, "opt_state"),
            (std::vector<std::string>{"body.0.weight.momentum_buffer", "body.0.bias.momentum_buffer",
                                      "body.2.weight.momentum_buffer", "body.2.bias.momentum_buffer"}));
  EXPECT_EQ(namesWithRole(arguments, "hyper"), std::vector<std::string>{"lr"});
  // Every update is recorded at the one opt.step() line; each step names its parameter.
  for (const char* name : {"body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias"})
    EXPECT_NE(step.plan_text().find(std::string("// jit.sgd_update into '") + name + "' at "), std::string::npos)
        << name << "\n"
        << step.plan_text();
}

TEST(TraceNames, ModelsBuiltAlikeGetDistinctNamesAndATiedWeightKeepsItsFirstName) {
  Generator generator(4);
  nn::Sequential first(nn::Linear(4, 4, false, {.generator = &generator})),
      second(nn::Linear(4, 4, false, {.generator = &generator}));
  // A module that registers another module's weight as its own (tied weights).
  struct Tied : nn::Module {
    explicit Tied(const Tensor& shared) { weight = register_parameter("tied", shared); }
    Tensor forward(const Tensor& x) override { return matmul(x, weight); }
    Tensor weight;
  } tied(first.parameters()[0]);
  auto step = trace([&](const Tensor& x) { return sum(tied(second(first(x)))); }, {.backend = Backend::cpu});
  step(randn({2, 4}, f32, &generator));
  EXPECT_EQ(namesWithRole(planArguments(step.plan_text()), "param"),
            (std::vector<std::string>{"0.weight", "0.weight#2"}));
}

TEST(TraceNames, GradientsKeptBetweenStepsAreNamedAfterTheirParameter) {
  Classifier net(8, 8, 3, 3);
  auto accumulate = trace([&](const Tensor& x, const Tensor& y) { return accumulateGradients(net, x, y); },
                          {.backend = Backend::cpu, .log_retraces = false});
  auto apply = trace([&] { applyGradients(net); }, {.backend = Backend::cpu});
  for (uint64_t i = 0; i < 2; ++i) {
    auto [x, y] = batch(4, 8, 3, 20 + i);
    accumulate(x, y);
  }
  apply();
  std::vector<std::string> expected;
  for (const auto& [name, tensor] : net.model.named_parameters())
    expected.push_back(name + ".grad");
  EXPECT_EQ(namesWithRole(planArguments(apply.plan_text()), "grad"), expected);
  // The accumulating step captures them in the order its backward reaches them.
  std::vector<std::string> accumulated = namesWithRole(planArguments(accumulate.plan_text()), "grad");
  EXPECT_EQ(std::multiset<std::string>(accumulated.begin(), accumulated.end()),
            std::multiset<std::string>(expected.begin(), expected.end()));
}

TEST(TraceNames, TraceMessagesNameTheStateTheyAreAbout) {
  Classifier net(8, 8, 3, 3);
  auto [x, y] = batch(4, 8, 3, 5);
  // Read after an op captured it, and before.
  Tensor weight = net.model.parameters()[2];
  auto peekCaptured = trace(
      [&](const Tensor& a) {
        Tensor product = matmul(a, weight);
        return product * weight.to_vector()[0];
      },
      {.backend = Backend::cpu});
  std::string message = errorOf([&] { peekCaptured(x); });
  EXPECT_NE(message.find("made by captured param '2.weight'"), std::string::npos) << message;
  auto peekFirst = trace([&](const Tensor& a) { return a * weight.to_vector()[0]; }, {.backend = Backend::cpu});
  message = errorOf([&] { peekFirst(x); });
  EXPECT_NE(message.find("reads the value of a tensor ('2.weight' f32[8x8])"), std::string::npos) << message;

  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); }, {.backend = Backend::cpu});
  step(x, y);
  net.model.parameters()[0].requires_grad_(false);
  step(x, y);
  ASSERT_EQ(step.stats().retrace_reasons.size(), 1u);
  EXPECT_EQ(step.stats().retrace_reasons[0],
            "the tensor '0.weight' f32[8x8] the step reads required grad, now does not (frozen)");
}

} // namespace
} // namespace jit::testing
