// jit::optim against PyTorch's update formulas, computed by hand in f64.

#include "FrontendTestUtil.h"
#include "TemporaryDirectory.h"

#include "jit/checkpoint.h"
#include "jit/optim.h"

#include "ampjit/runtime/Fnv1a.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <numbers>


namespace jit {
namespace {

using testing::errorOf;
namespace fs = std::filesystem;

const std::vector<double> kInit = {0.5, -1.25, 2.0, 0.75};

Tensor param(DType dtype) { return tensor(kInit, {int64_t(kInit.size())}, dtype); }

/// Runs loss = sum(p^3) / 3 (so grad = p^2) then opt.step(), `steps` times.
template <typename Opt>
void train(Tensor& p, Opt& opt, int steps) {
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    (sum(p * p * p) / 3.0).backward();
    opt.step();
  }
}

void expectNear(const std::vector<double>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], 1e-12 * (1 + std::abs(expected[i]))) << "element " << i;
}

struct SgdCase {
  optim::SGDOptions options;
};

/// The gradient of sum(p^3) / 3 as PyTorch's single-tensor optimizers take
/// it: negated under maximize, then weight decay added.
template <typename Options>
double referenceGradient(const Options& o, double p) {
  double g = p * p;
  if (o.maximize)
    g = -g;
  return g + o.weight_decay * p;
}

std::vector<double> sgdReference(const optim::SGDOptions& o, int steps) {
  std::vector<double> p = kInit, buf(p.size(), 0.0);
  for (int s = 0; s < steps; ++s)
    for (size_t i = 0; i < p.size(); ++i) {
      double g = referenceGradient(o, p[i]);
      if (o.momentum != 0.0) {
        buf[i] = s == 0 ? g : o.momentum * buf[i] + (1 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * g;
    }
  return p;
}

TEST(OptimTest, SgdMatchesPyTorchFormulasForThreeSteps) {
  // lr values exact in f32 (the lr state tensor is f32, as in the dialect).
  const optim::SGDOptions cases[] = {
      {.lr = 0.125},
      {.lr = 0.125, .momentum = 0.9},
      {.lr = 0.0625, .momentum = 0.9, .dampening = 0.25, .weight_decay = 0.01},
      {.lr = 0.0625, .momentum = 0.5, .weight_decay = 0.1, .nesterov = true},
      {.lr = 0.25, .weight_decay = 0.05, .maximize = true},
  };
  for (const auto& options : cases) {
    Tensor p = param(f64).requires_grad_();
    optim::SGD opt({p}, options);
    train(p, opt, 3);
    expectNear(p.to_vector(), sgdReference(options, 3));
    // SGD counts steps only where the count changes the update.
    bool counts = options.momentum != 0.0 && options.dampening != 0.0;
    EXPECT_EQ(opt.step_count(0).item(), counts ? 3.0 : 0.0);
  }
}

struct AdamReference {
  std::vector<double> p, vmax;
};

/// PyTorch's _single_tensor_adam on loss = sum(p^3) / 3, in f64.
AdamReference adamReference(double lr, double b1, double b2, double eps, double wd, bool decoupled, int steps,
                            bool amsgrad = false) {
  std::vector<double> p = kInit, m(p.size(), 0.0), v(p.size(), 0.0), vmax(p.size(), 0.0);
  for (int t = 1; t <= steps; ++t)
    for (size_t i = 0; i < p.size(); ++i) {
      double g = p[i] * p[i];
      if (decoupled)
        p[i] *= 1 - lr * wd;
      else
        g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      double denominator = std::sqrt(amsgrad ? vmax[i] : v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps;
      p[i] -= lr / (1 - std::pow(b1, t)) * m[i] / denominator;
    }
  return {p, vmax};
}

TEST(OptimTest, AdamMatchesPyTorchFormulasForThreeSteps) {
  Tensor p = param(f64).requires_grad_();
  optim::Adam opt({p}, {.lr = 0.125, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.1});
  train(p, opt, 3);
  expectNear(p.to_vector(), adamReference(0.125, 0.8, 0.99, 1e-6, 0.1, false, 3).p);
  EXPECT_EQ(opt.step_count(0).item(), 3.0);
}

TEST(OptimTest, AdamWMatchesPyTorchFormulasForThreeSteps) {
  Tensor p = param(f64).requires_grad_();
  optim::AdamW opt({p}, {.lr = 0.25});
  train(p, opt, 3);
  expectNear(p.to_vector(), adamReference(0.25, 0.9, 0.999, 1e-8, 1e-2, true, 3).p);
}

TEST(OptimTest, AmsgradAdamAndAdamWMatchPyTorchFormulas) {
  // beta2 = 0.5 forgets fast: as p = 2 shrinks, its gradient p^2 does, and
  // exp_avg_sq falls below its running maximum, which AMSGrad keeps.
  for (bool decoupled : {false, true}) {
    SCOPED_TRACE(decoupled ? "AdamW" : "Adam");
    Tensor p = param(f64).requires_grad_();
    std::unique_ptr<optim::Adam> opt;
    if (decoupled)
      opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p},
                                           optim::AdamWOptions{.lr = 0.25, .betas = {0.9, 0.5}, .amsgrad = true});
    else
      opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p},
                                          optim::AdamOptions{.lr = 0.25, .betas = {0.9, 0.5}, .amsgrad = true});
    train(p, *opt, 6);
    double decay = decoupled ? 1e-2 : 0.0;
    AdamReference expected = adamReference(0.25, 0.9, 0.5, 1e-8, decay, decoupled, 6, true);
    expectNear(p.to_vector(), expected.p);
    expectNear(opt->max_exp_avg_sq(0).to_vector(), expected.vmax);
    // Plain Adam would have gone elsewhere: the case tells them apart.
    std::vector<double> plain = adamReference(0.25, 0.9, 0.5, 1e-8, decay, decoupled, 6, false).p;
    EXPECT_GT(std::abs(plain[2] - expected.p[2]), 1e-3);
    std::vector<std::string> names;
    for (const auto& [name, tensor] : opt->state_dict())
      names.push_back(name);
    EXPECT_EQ(names, (std::vector<std::string>{"lr", "0.step", "0.exp_avg", "0.exp_avg_sq", "0.max_exp_avg_sq"}));
  }
}

TEST(OptimTest, AmsgradIsPerParameterGroup) {
  Tensor a = param(f64).requires_grad_();
  Tensor b = param(f64).requires_grad_();
  optim::Adam opt({{.params = {a}, .amsgrad = true}, {.params = {b}}}, {.lr = 0.25, .betas = {0.9, 0.5}});
  EXPECT_TRUE(opt.max_exp_avg_sq(0).defined());
  EXPECT_FALSE(opt.max_exp_avg_sq(1).defined()); // PyTorch keeps none without amsgrad
  for (int s = 0; s < 6; ++s) {
    opt.zero_grad();
    (sum(a * a * a) / 3.0 + sum(b * b * b) / 3.0).backward();
    opt.step();
  }
  expectNear(a.to_vector(), adamReference(0.25, 0.9, 0.5, 1e-8, 0.0, false, 6, true).p);
  expectNear(b.to_vector(), adamReference(0.25, 0.9, 0.5, 1e-8, 0.0, false, 6, false).p);
  std::vector<std::string> settings;
  for (const auto& [name, value] : opt.hyperparameters())
    settings.push_back(name);
  EXPECT_NE(std::find(settings.begin(), settings.end(), "amsgrad"), settings.end());
  EXPECT_EQ(std::find(settings.begin(), settings.end(), "group1.amsgrad"), settings.end());
}

TEST(OptimTest, AnAmsgradUpdateWithoutItsMaximumIsAnError) {
  Tensor p = param(f32), g = param(f32), m = zeros_like(p), v = zeros_like(p);
  Tensor step = scalar_tensor(0.0, i64), lr = scalar_tensor(0.1, f32);
  std::string message = errorOf([&] { adam_update(p, g, m, v, Tensor(), step, lr, {}); });
  EXPECT_NE(message.find("max_exp_avg_sq"), std::string::npos) << message;
  message = errorOf([&] { adam_update(p, g, m, v, zeros({2}, f32), step, lr, {}); });
  EXPECT_NE(message.find("max_exp_avg_sq"), std::string::npos) << message;
}

/// PyTorch's _single_tensor_rmsprop on loss = sum(p^3) / 3, in f64.
std::vector<double> rmspropReference(const optim::RMSpropOptions& o, int steps) {
  std::vector<double> p = kInit, square(p.size(), 0.0), buffer(p.size(), 0.0), gradAvg(p.size(), 0.0);
  for (int s = 0; s < steps; ++s)
    for (size_t i = 0; i < p.size(); ++i) {
      double g = referenceGradient(o, p[i]);
      square[i] = o.alpha * square[i] + (1 - o.alpha) * g * g;
      double average;
      if (o.centered) {
        gradAvg[i] += (1 - o.alpha) * (g - gradAvg[i]);
        average = std::sqrt(square[i] - gradAvg[i] * gradAvg[i]);
      } else {
        average = std::sqrt(square[i]);
      }
      average += o.eps;
      if (o.momentum > 0) {
        buffer[i] = o.momentum * buffer[i] + g / average;
        p[i] -= o.lr * buffer[i];
      } else {
        p[i] -= o.lr * g / average;
      }
    }
  return p;
}

TEST(OptimTest, RMSpropMatchesPyTorchFormulasInEveryVariant) {
  const optim::RMSpropOptions cases[] = {
      {.lr = 0.125},
      {.lr = 0.0625, .alpha = 0.5, .eps = 1e-4, .weight_decay = 0.1},
      {.lr = 0.0625, .momentum = 0.9},
      {.lr = 0.0625, .alpha = 0.75, .centered = true},
      {.lr = 0.03125, .alpha = 0.9, .weight_decay = 0.01, .momentum = 0.5, .centered = true, .maximize = true},
  };
  std::vector<std::vector<double>> results;
  for (const auto& options : cases) {
    SCOPED_TRACE(::testing::Message() << "alpha " << options.alpha << " momentum " << options.momentum
                                      << " centered " << options.centered << " maximize " << options.maximize);
    Tensor p = param(f64).requires_grad_();
    optim::RMSprop opt({p}, options);
    train(p, opt, 4);
    expectNear(p.to_vector(), rmspropReference(options, 4));
    EXPECT_EQ(opt.momentum_buffer(0).defined(), options.momentum > 0);
    EXPECT_EQ(opt.grad_avg(0).defined(), options.centered);
    std::vector<std::string> names;
    for (const auto& [name, tensor] : opt.state_dict())
      names.push_back(name);
    std::vector<std::string> expected = {"lr", "0.step", "0.square_avg"};
    if (options.momentum > 0)
      expected.push_back("0.momentum_buffer");
    if (options.centered)
      expected.push_back("0.grad_avg");
    EXPECT_EQ(names, expected);
    results.push_back(p.to_vector());
  }
  for (size_t c = 1; c < results.size(); ++c)
    EXPECT_NE(results[c], results[0]) << "case " << c << " must differ from the plain update";
}

/// PyTorch's _single_tensor_adagrad on loss = sum(p^3) / 3, in f64.
std::vector<double> adagradReference(const optim::AdagradOptions& o, int steps) {
  std::vector<double> p = kInit, sum(p.size(), o.initial_accumulator_value);
  for (int step = 1; step <= steps; ++step)
    for (size_t i = 0; i < p.size(); ++i) {
      double g = referenceGradient(o, p[i]);
      double clr = o.lr / (1 + (step - 1) * o.lr_decay);
      sum[i] += g * g;
      p[i] -= clr * g / (std::sqrt(sum[i]) + o.eps);
    }
  return p;
}

TEST(OptimTest, AdagradMatchesPyTorchFormulasInEveryVariant) {
  const optim::AdagradOptions cases[] = {
      {.lr = 0.125},
      {.lr = 0.25, .lr_decay = 0.5},
      {.lr = 0.125, .weight_decay = 0.1, .initial_accumulator_value = 0.5, .eps = 1e-3},
      {.lr = 0.125, .lr_decay = 0.25, .maximize = true},
  };
  for (const auto& options : cases) {
    SCOPED_TRACE(::testing::Message() << "lr_decay " << options.lr_decay << " initial "
                                      << options.initial_accumulator_value << " maximize " << options.maximize);
    Tensor p = param(f64).requires_grad_();
    optim::Adagrad opt({p}, options);
    train(p, opt, 4);
    expectNear(p.to_vector(), adagradReference(options, 4));
    // Only lr_decay reads the update count.
    EXPECT_EQ(opt.step_count(0).item(), options.lr_decay != 0.0 ? 4.0 : 0.0);
    EXPECT_EQ(opt.state_dict().back().first, "0.sum");
  }
}

/// PyTorch's _single_tensor_radam on loss = sum(p^3) / 3, in f64; counts
/// the rectified updates in `rectified`.
std::vector<double> radamReference(const optim::RAdamOptions& o, int steps, int* rectified = nullptr) {
  std::vector<double> p = kInit, m(p.size(), 0.0), v(p.size(), 0.0);
  auto [beta1, beta2] = o.betas;
  for (int step = 1; step <= steps; ++step) {
    double bc1 = 1 - std::pow(beta1, step), bc2 = 1 - std::pow(beta2, step);
    double rhoInf = 2 / (1 - beta2) - 1;
    double rho = rhoInf - 2 * step * std::pow(beta2, step) / bc2;
    if (rectified && rho > 5)
      ++*rectified;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = o.maximize ? -p[i] * p[i] : p[i] * p[i];
      if (o.decoupled_weight_decay)
        p[i] *= 1 - o.lr * o.weight_decay;
      else
        g += o.weight_decay * p[i];
      m[i] += (g - m[i]) * (1 - beta1);
      v[i] = v[i] * beta2 + (1 - beta2) * g * g;
      double corrected = m[i] / bc1;
      if (rho > 5) {
        double rect = std::sqrt((rho - 4) * (rho - 2) * rhoInf / ((rhoInf - 4) * (rhoInf - 2) * rho));
        p[i] -= corrected * o.lr * (std::sqrt(bc2) / (std::sqrt(v[i]) + o.eps)) * rect;
      } else {
        p[i] -= corrected * o.lr;
      }
    }
  }
  return p;
}

TEST(OptimTest, RAdamMatchesPyTorchFormulasInEveryVariant) {
  // Eight updates: rho_t passes 5 at the sixth with beta2 0.999, so both the
  // plain and the rectified update are taken; beta2 0.5 never rectifies.
  const optim::RAdamOptions cases[] = {
      {.lr = 0.125},
      {.lr = 0.0625, .betas = {0.8, 0.99}, .eps = 1e-4, .weight_decay = 0.1},
      {.lr = 0.0625, .weight_decay = 0.25, .decoupled_weight_decay = true},
      {.lr = 0.03125, .betas = {0.9, 0.5}, .maximize = true},
  };
  std::vector<std::vector<double>> results;
  for (const auto& options : cases) {
    SCOPED_TRACE(::testing::Message() << "betas " << options.betas.first << ", " << options.betas.second
                                      << " decoupled " << options.decoupled_weight_decay << " maximize "
                                      << options.maximize);
    Tensor p = param(f64).requires_grad_();
    optim::RAdam opt({p}, options);
    train(p, opt, 8);
    int rectified = 0;
    expectNear(p.to_vector(), radamReference(options, 8, &rectified));
    if (options.betas.second > 0.9) {
      EXPECT_GT(rectified, 0);
      EXPECT_LT(rectified, 8);
    } else {
      EXPECT_EQ(rectified, 0);
    }
    EXPECT_EQ(opt.step_count(0).item(), 8.0);
    std::vector<std::string> names;
    for (const auto& [name, tensor] : opt.state_dict())
      names.push_back(name);
    EXPECT_EQ(names, (std::vector<std::string>{"lr", "0.step", "0.exp_avg", "0.exp_avg_sq"}));
    results.push_back(p.to_vector());
  }
  for (size_t c = 1; c < results.size(); ++c)
    EXPECT_NE(results[c], results[0]) << "case " << c << " must differ from the plain update";

  // Groups take their own settings; bad settings name the group.
  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::RAdam groups({{.params = {a}}, {.params = {b}, .lr = 0.0625, .decoupled_weight_decay = true}},
                      {.lr = 0.125, .weight_decay = 0.1});
  for (int s = 0; s < 7; ++s) {
    groups.zero_grad();
    (sum(a * a * a) / 3.0 + sum(b * b * b) / 3.0).backward();
    groups.step();
  }
  expectNear(a.to_vector(), radamReference({.lr = 0.125, .weight_decay = 0.1}, 7));
  expectNear(b.to_vector(), radamReference({.lr = 0.0625, .weight_decay = 0.1, .decoupled_weight_decay = true}, 7));
  std::string message = errorOf([&] { optim::RAdam({{.params = {a}}, {.params = {b}, .betas = {{0.9, 1.0}}}}, {}); });
  EXPECT_NE(message.find("RAdam group 1: betas must be in [0, 1), got 1"), std::string::npos) << message;
  message = errorOf([&] { optim::RAdam({a}, {.eps = -1.0}); });
  EXPECT_NE(message.find("RAdam: eps must be finite and >= 0"), std::string::npos) << message;
}

/// PyTorch's _single_tensor_nadam on loss = sum(p^3) / 3, in f64 (its
/// mu_product an f64 scalar, as PyTorch keeps it under an f64 default dtype).
std::vector<double> nadamReference(const optim::NAdamOptions& o, int steps) {
  std::vector<double> p = kInit, m(p.size(), 0.0), v(p.size(), 0.0);
  auto [beta1, beta2] = o.betas;
  double muProduct = 1.0;
  for (int step = 1; step <= steps; ++step) {
    double bc2 = 1 - std::pow(beta2, step);
    double mu = beta1 * (1 - 0.5 * std::pow(0.96, step * o.momentum_decay));
    double muNext = beta1 * (1 - 0.5 * std::pow(0.96, (step + 1) * o.momentum_decay));
    muProduct *= mu;
    double muProductNext = muProduct * muNext;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = o.maximize ? -p[i] * p[i] : p[i] * p[i];
      if (o.decoupled_weight_decay)
        p[i] *= 1 - o.lr * o.weight_decay;
      else
        g += o.weight_decay * p[i];
      m[i] += (g - m[i]) * (1 - beta1);
      v[i] = v[i] * beta2 + (1 - beta2) * g * g;
      double denom = std::sqrt(v[i] / bc2) + o.eps;
      p[i] += (-o.lr * (1 - mu) / (1 - muProduct)) * (g / denom);
      p[i] += (-o.lr * muNext / (1 - muProductNext)) * (m[i] / denom);
    }
  }
  return p;
}

TEST(OptimTest, NAdamMatchesPyTorchFormulasInEveryVariant) {
  const optim::NAdamOptions cases[] = {
      {.lr = 0.125},
      {.lr = 0.0625, .betas = {0.8, 0.99}, .eps = 1e-4, .weight_decay = 0.1},
      {.lr = 0.0625, .weight_decay = 0.25, .momentum_decay = 0.5, .decoupled_weight_decay = true},
      {.lr = 0.03125, .betas = {0.5, 0.9}, .momentum_decay = 0.0, .maximize = true},
  };
  std::vector<std::vector<double>> results;
  for (const auto& options : cases) {
    SCOPED_TRACE(::testing::Message() << "betas " << options.betas.first << ", " << options.betas.second
                                      << " momentum_decay " << options.momentum_decay << " decoupled "
                                      << options.decoupled_weight_decay << " maximize " << options.maximize);
    Tensor p = param(f64).requires_grad_();
    optim::NAdam opt({p}, options);
    train(p, opt, 6);
    expectNear(p.to_vector(), nadamReference(options, 6));
    EXPECT_EQ(opt.step_count(0).item(), 6.0);
    EXPECT_EQ(opt.mu_product(0).dtype(), f64);
    std::vector<std::string> names;
    for (const auto& [name, tensor] : opt.state_dict())
      names.push_back(name);
    EXPECT_EQ(names, (std::vector<std::string>{"lr", "0.step", "0.mu_product", "0.exp_avg", "0.exp_avg_sq"}));
    results.push_back(p.to_vector());
  }
  for (size_t c = 1; c < results.size(); ++c)
    EXPECT_NE(results[c], results[0]) << "case " << c << " must differ from the plain update";

  // The product of the momenta is f32 for an f32 parameter, PyTorch's default.
  Tensor narrow = param(f32).requires_grad_();
  optim::NAdam f32Opt({narrow}, {.lr = 0.125});
  train(narrow, f32Opt, 2);
  EXPECT_EQ(f32Opt.mu_product(0).dtype(), f32);
  double mu1 = 0.9 * (1 - 0.5 * std::pow(0.96, 0.004)), mu2 = 0.9 * (1 - 0.5 * std::pow(0.96, 0.008));
  EXPECT_EQ(f32Opt.mu_product(0).item(), double(float(float(mu1) * float(mu2))));

  // Groups take their own settings; bad settings name the group.
  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::NAdam groups({{.params = {a}}, {.params = {b}, .lr = 0.0625, .momentum_decay = 0.1}}, {.lr = 0.125});
  for (int s = 0; s < 4; ++s) {
    groups.zero_grad();
    (sum(a * a * a) / 3.0 + sum(b * b * b) / 3.0).backward();
    groups.step();
  }
  expectNear(a.to_vector(), nadamReference({.lr = 0.125}, 4));
  expectNear(b.to_vector(), nadamReference({.lr = 0.0625, .momentum_decay = 0.1}, 4));
  std::string message = errorOf([&] { optim::NAdam({{.params = {a}}, {.params = {b}, .momentum_decay = -1.0}}, {}); });
  EXPECT_NE(message.find("NAdam group 1: momentum_decay must be finite and >= 0, got -1"), std::string::npos)
      << message;
  message = errorOf([&] { optim::NAdam({a}, {.betas = {-0.1, 0.9}}); });
  EXPECT_NE(message.find("NAdam: betas must be in [0, 1), got -0.1"), std::string::npos) << message;
}

/// PyTorch's _single_tensor_adamax on loss = sum(p^3) / 3, in f64.
std::vector<double> adamaxReference(const optim::AdamaxOptions& o, int steps) {
  std::vector<double> p = kInit, m(p.size(), 0.0), u(p.size(), 0.0);
  auto [beta1, beta2] = o.betas;
  for (int step = 1; step <= steps; ++step) {
    double clr = o.lr / (1 - std::pow(beta1, step));
    for (size_t i = 0; i < p.size(); ++i) {
      double g = o.maximize ? -p[i] * p[i] : p[i] * p[i];
      g += o.weight_decay * p[i];
      m[i] += (g - m[i]) * (1 - beta1);
      u[i] = std::max(u[i] * beta2, std::abs(g) + o.eps);
      p[i] += -clr * m[i] / u[i];
    }
  }
  return p;
}

TEST(OptimTest, AdamaxMatchesPyTorchFormulasInEveryVariant) {
  // Under maximize the gradients are negative, so |g| is taken of both signs;
  // beta2 0.5 makes the decayed norm fall below |g| + eps, so both sides of
  // the max are taken.
  const optim::AdamaxOptions cases[] = {
      {.lr = 0.125},
      {.lr = 0.0625, .betas = {0.8, 0.5}, .eps = 1e-3, .weight_decay = 0.1},
      {.lr = 0.03125, .maximize = true},
  };
  std::vector<std::vector<double>> results;
  for (const auto& options : cases) {
    SCOPED_TRACE(::testing::Message() << "betas " << options.betas.first << ", " << options.betas.second
                                      << " maximize " << options.maximize);
    Tensor p = param(f64).requires_grad_();
    optim::Adamax opt({p}, options);
    train(p, opt, 6);
    expectNear(p.to_vector(), adamaxReference(options, 6));
    EXPECT_EQ(opt.step_count(0).item(), 6.0);
    std::vector<std::string> names;
    for (const auto& [name, tensor] : opt.state_dict())
      names.push_back(name);
    EXPECT_EQ(names, (std::vector<std::string>{"lr", "0.step", "0.exp_avg", "0.exp_inf"}));
    results.push_back(p.to_vector());
  }
  for (size_t c = 1; c < results.size(); ++c)
    EXPECT_NE(results[c], results[0]) << "case " << c << " must differ from the plain update";

  // torch.maximum's NaN: a NaN gradient makes exp_inf NaN, and a NaN
  // exp_inf stays NaN on the next, finite gradient (the gradient of
  // sum(w * c) * scale is c * scale, whatever w has become).
  Tensor nan = tensor({1.0, 2.0}, {2}, f32).requires_grad_();
  Tensor coefficients = tensor({0.5, -3.0}, {2}, f32);
  optim::Adamax nanOpt({nan}, {.lr = 0.125});
  for (double scale : {std::nan(""), 1.0}) {
    nanOpt.zero_grad();
    (sum(nan * coefficients) * scale).backward();
    nanOpt.step();
  }
  for (double value : nanOpt.exp_inf(0).to_vector())
    EXPECT_TRUE(std::isnan(value)) << value;

  // Groups take their own settings; bad settings name the group.
  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::Adamax groups({{.params = {a}}, {.params = {b}, .lr = 0.0625, .maximize = true}},
                       {.lr = 0.125, .weight_decay = 0.1});
  for (int s = 0; s < 5; ++s) {
    groups.zero_grad();
    (sum(a * a * a) / 3.0 + sum(b * b * b) / 3.0).backward();
    groups.step();
  }
  expectNear(a.to_vector(), adamaxReference({.lr = 0.125, .weight_decay = 0.1}, 5));
  expectNear(b.to_vector(), adamaxReference({.lr = 0.0625, .weight_decay = 0.1, .maximize = true}, 5));
  std::string message = errorOf([&] { optim::Adamax({{.params = {a}}, {.params = {b}, .betas = {{1.0, 0.9}}}}, {}); });
  EXPECT_NE(message.find("Adamax group 1: betas must be in [0, 1), got 1"), std::string::npos) << message;
  message = errorOf([&] { optim::Adamax({a}, {.weight_decay = -1.0}); });
  EXPECT_NE(message.find("Adamax: weight_decay must be finite and >= 0"), std::string::npos) << message;
}

/// PyTorch's _single_tensor_adadelta on loss = sum(p^3) / 3, in f64.
std::vector<double> adadeltaReference(const optim::AdadeltaOptions& o, int steps) {
  std::vector<double> p = kInit, squareAvg(p.size(), 0.0), accDelta(p.size(), 0.0);
  for (int step = 1; step <= steps; ++step)
    for (size_t i = 0; i < p.size(); ++i) {
      double g = referenceGradient(o, p[i]);
      squareAvg[i] = squareAvg[i] * o.rho + (1 - o.rho) * g * g;
      double delta = std::sqrt(accDelta[i] + o.eps) / std::sqrt(squareAvg[i] + o.eps) * g;
      accDelta[i] = accDelta[i] * o.rho + (1 - o.rho) * delta * delta;
      p[i] -= o.lr * delta;
    }
  return p;
}

TEST(OptimTest, AdadeltaMatchesPyTorchFormulasInEveryVariant) {
  const optim::AdadeltaOptions cases[] = {
      {},
      {.lr = 0.5, .rho = 0.5, .eps = 1e-3, .weight_decay = 0.1},
      {.lr = 0.25, .maximize = true},
  };
  std::vector<std::vector<double>> results;
  for (const auto& options : cases) {
    SCOPED_TRACE(::testing::Message() << "rho " << options.rho << " maximize " << options.maximize);
    Tensor p = param(f64).requires_grad_();
    optim::Adadelta opt({p}, options);
    train(p, opt, 6);
    expectNear(p.to_vector(), adadeltaReference(options, 6));
    std::vector<std::string> names;
    for (const auto& [name, tensor] : opt.state_dict())
      names.push_back(name);
    EXPECT_EQ(names, (std::vector<std::string>{"lr", "0.step", "0.square_avg", "0.acc_delta"}));
    results.push_back(p.to_vector());
  }
  for (size_t c = 1; c < results.size(); ++c)
    EXPECT_NE(results[c], results[0]) << "case " << c << " must differ from the plain update";

  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::Adadelta groups({{.params = {a}}, {.params = {b}, .lr = 0.5, .rho = 0.75}}, {.weight_decay = 0.1});
  for (int s = 0; s < 5; ++s) {
    groups.zero_grad();
    (sum(a * a * a) / 3.0 + sum(b * b * b) / 3.0).backward();
    groups.step();
  }
  expectNear(a.to_vector(), adadeltaReference({.weight_decay = 0.1}, 5));
  expectNear(b.to_vector(), adadeltaReference({.lr = 0.5, .rho = 0.75, .weight_decay = 0.1}, 5));
  std::string message = errorOf([&] { optim::Adadelta({{.params = {a}}, {.params = {b}, .rho = 1.5}}, {}); });
  EXPECT_NE(message.find("Adadelta group 1: rho must be in [0, 1], got 1.5"), std::string::npos) << message;
  message = errorOf([&] { optim::Adadelta({a}, {.eps = -1e-6}); });
  EXPECT_NE(message.find("Adadelta: eps must be finite and >= 0, got -1e-06"), std::string::npos) << message;
}

/// PyTorch's _single_tensor_adafactor on loss = sum(p^3) / 3, in f64: `p` a
/// `rows` x (size / rows) matrix, factored, or with rows 0 a vector.
std::vector<double> adafactorReference(const optim::AdafactorOptions& o, std::vector<double> p, size_t rows,
                                       int steps) {
  const size_t n = p.size(), cols = rows ? n / rows : n;
  const double eps1 = o.eps.first.value_or(0x1p-52), eps2 = o.eps.second;
  const double lr = double(float(o.lr)); // the lr is an f32 state tensor (the default 1e-2 is not exact)
  std::vector<double> rowVar(rows, 0.0), colVar(cols, 0.0), variance(n, 0.0), g(n), estimate(n), change(n);
  for (int step = 1; step <= steps; ++step) {
    double squares = 0;
    for (size_t k = 0; k < n; ++k) {
      g[k] = o.maximize ? -p[k] * p[k] : p[k] * p[k];
      squares += p[k] * p[k];
    }
    double newWeight = std::pow(double(step), o.beta2_decay);
    double rho = std::min(lr, 1.0 / std::sqrt(double(step)));
    double alpha = std::max(eps2, std::sqrt(squares) / std::sqrt(double(n))) * rho;
    for (double& value : p)
      value *= 1 - lr * o.weight_decay;
    if (rows) {
      for (size_t r = 0; r < rows; ++r) {
        double mean = 0;
        for (size_t c = 0; c < cols; ++c)
          mean += g[r * cols + c] * g[r * cols + c] / double(cols);
        rowVar[r] += (mean - rowVar[r]) * newWeight;
      }
      for (size_t c = 0; c < cols; ++c) {
        double mean = 0;
        for (size_t r = 0; r < rows; ++r)
          mean += g[r * cols + c] * g[r * cols + c] / double(rows);
        colVar[c] += (mean - colVar[c]) * newWeight;
      }
      double rowVarMean = 0;
      for (double value : rowVar)
        rowVarMean += value / double(rows);
      for (size_t k = 0; k < n; ++k)
        estimate[k] = rowVar[k / cols] * colVar[k % cols] / std::max(rowVarMean, eps1);
    } else {
      for (size_t k = 0; k < n; ++k) {
        variance[k] += (g[k] * g[k] - variance[k]) * newWeight;
        estimate[k] = variance[k];
      }
    }
    double changeSquares = 0;
    for (size_t k = 0; k < n; ++k) {
      change[k] = g[k] / std::sqrt(std::max(estimate[k], eps1 * eps1));
      changeSquares += change[k] * change[k];
    }
    double denominator = std::max(1.0, std::sqrt(changeSquares) / (std::sqrt(double(n)) * o.d));
    for (size_t k = 0; k < n; ++k)
      p[k] += -alpha / denominator * change[k];
  }
  return p;
}

TEST(OptimTest, AdafactorMatchesPyTorchFormulasForMatricesAndVectors) {
  // A 2 x 3 matrix keeps a row and a column average of g^2 (2 + 3 numbers)
  // where a vector keeps one per element. lr 0.5 makes rho_t = 1/sqrt(t)
  // from t = 4 on; eps1 1e-3 and eps2 0.25 put both floors to work.
  const std::vector<double> matrix = {0.5, -1.25, 2.0, 0.75, -0.4, 1.1};
  const optim::AdafactorOptions cases[] = {
      {},
      {.lr = 0.5, .beta2_decay = -0.5, .eps = {1e-3, 0.25}, .d = 1.5, .weight_decay = 0.1},
      {.lr = 0.25, .maximize = true},
  };
  std::vector<std::vector<double>> results;
  for (const auto& options : cases) {
    SCOPED_TRACE(::testing::Message() << "lr " << options.lr << " maximize " << options.maximize);
    Tensor w = tensor(matrix, {2, 3}, f64).requires_grad_(), v = param(f64).requires_grad_();
    optim::Adafactor opt({w, v}, options);
    EXPECT_EQ(opt.row_var(0).shape(), (Shape{2, 1}));
    EXPECT_EQ(opt.col_var(0).shape(), (Shape{1, 3}));
    EXPECT_FALSE(opt.variance(0).defined());
    EXPECT_FALSE(opt.row_var(1).defined());
    for (int s = 0; s < 6; ++s) {
      opt.zero_grad();
      (sum(w * w * w) / 3.0 + sum(v * v * v) / 3.0).backward();
      opt.step();
    }
    expectNear(w.to_vector(), adafactorReference(options, matrix, 2, 6));
    expectNear(v.to_vector(), adafactorReference(options, kInit, 0, 6));
    std::vector<std::string> names;
    for (const auto& [name, tensor] : opt.state_dict())
      names.push_back(name);
    EXPECT_EQ(names, (std::vector<std::string>{"lr", "0.step", "0.row_var", "0.col_var", "1.step", "1.variance"}));
    results.push_back(w.to_vector());
  }
  for (size_t c = 1; c < results.size(); ++c)
    EXPECT_NE(results[c], results[0]) << "case " << c << " must differ from the default update";
  // eps1 unset is the parameter dtype's epsilon. For f32 (2^-23) a gradient
  // of 1e-8 has g^2 below eps1^2, so its update is g / eps1, not the g / |g|
  // = 1 that f64's epsilon would give: each element moves by alpha * 1e-8 *
  // 2^23 with alpha = RMS(p) * lr = 0.01.
  Tensor small = tensor({1.0, -1.0}, {2}, f32).requires_grad_();
  optim::Adafactor f32Opt({small}, {});
  f32Opt.zero_grad();
  sum(small * tensor({1e-8, 1e-8}, {2}, f32)).backward();
  f32Opt.step();
  std::vector<double> moved = small.to_vector();
  EXPECT_NEAR(moved[0], 1.0 - 0.01 * 1e-8 * 0x1p23, 1e-6);
  EXPECT_NEAR(moved[1], -1.0 - 0.01 * 1e-8 * 0x1p23, 1e-6);

  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::Adafactor groups({{.params = {a}}, {.params = {b}, .lr = 0.5, .d = 2.0}}, {.weight_decay = 0.1});
  for (int s = 0; s < 5; ++s) {
    groups.zero_grad();
    (sum(a * a * a) / 3.0 + sum(b * b * b) / 3.0).backward();
    groups.step();
  }
  expectNear(a.to_vector(), adafactorReference({.weight_decay = 0.1}, kInit, 0, 5));
  expectNear(b.to_vector(), adafactorReference({.lr = 0.5, .d = 2.0, .weight_decay = 0.1}, kInit, 0, 5));
  std::string message = errorOf([&] { optim::Adafactor({{.params = {a}}, {.params = {b}, .beta2_decay = 0.5}}, {}); });
  EXPECT_NE(message.find("Adafactor group 1: beta2_decay must be finite and <= 0, got 0.5"), std::string::npos)
      << message;
  message = errorOf([&] { optim::Adafactor({a}, {.d = 0.5}); });
  EXPECT_NE(message.find("Adafactor: the clipping threshold d must be finite and >= 1, got 0.5"), std::string::npos)
      << message;
  message = errorOf([&] { optim::Adafactor({a}, {.eps = {-1.0, 1e-3}}); });
  EXPECT_NE(message.find("Adafactor: eps1 must be finite and >= 0, got -1"), std::string::npos) << message;
}

/// apex's FusedLAMB (multi_tensor_lamb.cu) written out in f64: parameters
/// `init[k]` with options `options[k]` (the global settings from
/// options[0]), gradients gradient(k, i, p) for `steps` steps.
std::vector<std::vector<double>> lambReference(std::vector<std::vector<double>> p,
                                               const std::vector<optim::LAMBOptions>& options,
                                               const std::function<double(size_t, size_t, double)>& gradient,
                                               int steps) {
  std::vector<std::vector<double>> m, v;
  for (const auto& values : p) {
    m.emplace_back(values.size(), 0.0);
    v.emplace_back(values.size(), 0.0);
  }
  const optim::LAMBOptions& global = options[0];
  for (int step = 1; step <= steps; ++step) {
    std::vector<std::vector<double>> g = p;
    double squares = 0;
    for (size_t k = 0; k < p.size(); ++k)
      for (size_t i = 0; i < p[k].size(); ++i) {
        g[k][i] = gradient(k, i, p[k][i]);
        squares += g[k][i] * g[k][i];
      }
    double norm = std::sqrt(squares);
    double divisor = global.max_grad_norm > 0 && norm > global.max_grad_norm ? norm / global.max_grad_norm : 1.0;
    for (size_t k = 0; k < p.size(); ++k) {
      const optim::LAMBOptions& o = options[k];
      auto [beta1, beta2] = o.betas;
      double beta3 = o.grad_averaging ? 1 - beta1 : 1.0;
      double c1 = o.bias_correction ? 1 - std::pow(beta1, step) : 1.0;
      double c2 = o.bias_correction ? 1 - std::pow(beta2, step) : 1.0;
      std::vector<double> update(p[k].size());
      double paramSquares = 0, updateSquares = 0;
      for (size_t i = 0; i < p[k].size(); ++i) {
        double scaled = g[k][i] / divisor;
        if (!global.adam_w_mode)
          scaled += o.weight_decay * p[k][i];
        m[k][i] = m[k][i] * beta1 + beta3 * scaled;
        v[k][i] = v[k][i] * beta2 + (1 - beta2) * scaled * scaled;
        update[i] = (m[k][i] / c1) / (std::sqrt(v[k][i] / c2) + o.eps);
        if (global.adam_w_mode)
          update[i] += o.weight_decay * p[k][i];
        paramSquares += p[k][i] * p[k][i];
        updateSquares += update[i] * update[i];
      }
      double ratio = o.lr;
      if ((global.use_nvlamb || o.weight_decay != 0) && paramSquares != 0 && updateSquares != 0)
        ratio = o.lr * std::sqrt(paramSquares) / std::sqrt(updateSquares);
      for (size_t i = 0; i < p[k].size(); ++i)
        p[k][i] -= ratio * update[i];
    }
  }
  return p;
}

TEST(OptimTest, LAMBMatchesApexFormulasInEveryVariant) {
  // Two parameters of different norms, so the global norm, the clipping and
  // each trust ratio are taken over more than one tensor. The gradients
  // (p^2) have a global norm near 10 at the start, growing as the negative
  // entries do: max_grad_norm 1 clips them, 1000 does not.
  const std::vector<double> second = {-0.25, 1.5, 0.125, -3.0};
  auto cube = [](size_t, size_t, double p) { return p * p; };
  const optim::LAMBOptions cases[] = {
      {.lr = 0.125},
      {.lr = 0.125, .max_grad_norm = 1000.0},
      {.lr = 0.0625, .betas = {0.8, 0.5}, .eps = 1e-3, .weight_decay = 0.1, .bias_correction = false,
       .grad_averaging = false, .adam_w_mode = false, .max_grad_norm = 0.0},
      {.lr = 0.125, .weight_decay = 0.0},
      {.lr = 0.125, .weight_decay = 0.0, .use_nvlamb = true},
  };
  std::vector<std::vector<double>> results;
  for (const auto& options : cases) {
    SCOPED_TRACE(::testing::Message() << "weight_decay " << options.weight_decay << " max_grad_norm "
                                      << options.max_grad_norm << " adam_w_mode " << options.adam_w_mode
                                      << " use_nvlamb " << options.use_nvlamb);
    Tensor a = param(f64).requires_grad_(), b = tensor(second, {4}, f64).requires_grad_();
    optim::LAMB opt({a, b}, options);
    for (int s = 0; s < 6; ++s) {
      opt.zero_grad();
      (sum(a * a * a) / 3.0 + sum(b * b * b) / 3.0).backward();
      opt.step();
    }
    std::vector<std::vector<double>> expected = lambReference({kInit, second}, {options, options}, cube, 6);
    expectNear(a.to_vector(), expected[0]);
    expectNear(b.to_vector(), expected[1]);
    EXPECT_EQ(opt.step_count(1).item(), 6.0);
    std::vector<std::string> names;
    for (const auto& [name, tensor] : opt.state_dict())
      names.push_back(name);
    EXPECT_EQ(names, (std::vector<std::string>{"lr", "0.step", "0.exp_avg", "0.exp_avg_sq", "1.step", "1.exp_avg",
                                               "1.exp_avg_sq"}));
    std::vector<double> both = a.to_vector(), ofB = b.to_vector();
    both.insert(both.end(), ofB.begin(), ofB.end());
    results.push_back(both);
  }
  for (size_t c = 1; c < results.size(); ++c)
    EXPECT_NE(results[c], results[0]) << "case " << c << " must differ from the default update";
  EXPECT_NE(results[4], results[3]) << "use_nvlamb must apply the trust ratio without weight decay";

  // A parameter of norm 0 steps by lr alone (its trust ratio would be 0).
  Tensor zero = tensor({0.0, 0.0, 0.0}, {3}, f64).requires_grad_();
  const std::vector<double> coefficients = {0.5, -2.0, 0.25};
  optim::LAMB zeroOpt({zero}, {.lr = 0.125});
  zeroOpt.zero_grad();
  sum(zero * tensor(coefficients, {3}, f64)).backward();
  zeroOpt.step();
  auto linear = [&](size_t, size_t i, double) { return coefficients[i]; };
  std::vector<double> expected = lambReference({{0.0, 0.0, 0.0}}, {{.lr = 0.125}}, linear, 1)[0];
  expectNear(zero.to_vector(), expected);
  EXPECT_NE(expected[0], 0.0);

  // Groups take their own settings, under one global norm; bad settings name the group.
  Tensor a = param(f64).requires_grad_(), b = tensor(second, {4}, f64).requires_grad_();
  optim::LAMB groups({{.params = {a}}, {.params = {b}, .lr = 0.0625, .weight_decay = 0.0, .grad_averaging = false}},
                     {.lr = 0.125, .weight_decay = 0.1});
  for (int s = 0; s < 5; ++s) {
    groups.zero_grad();
    (sum(a * a * a) / 3.0 + sum(b * b * b) / 3.0).backward();
    groups.step();
  }
  std::vector<std::vector<double>> grouped = lambReference(
      {kInit, second},
      {{.lr = 0.125, .weight_decay = 0.1}, {.lr = 0.0625, .weight_decay = 0.0, .grad_averaging = false}}, cube, 5);
  expectNear(a.to_vector(), grouped[0]);
  expectNear(b.to_vector(), grouped[1]);
  std::string message = errorOf([&] { optim::LAMB({{.params = {a}}, {.params = {b}, .betas = {{0.9, 1.0}}}}, {}); });
  EXPECT_NE(message.find("LAMB group 1: betas must be in [0, 1), got 1"), std::string::npos) << message;
  message = errorOf([&] { optim::LAMB({a}, {.max_grad_norm = -1.0}); });
  EXPECT_NE(message.find("LAMB: max_grad_norm must be finite and >= 0, got -1"), std::string::npos) << message;
}

TEST(OptimTest, TheElementwiseOptimizersUnscaleAndSkipAsTheFusedUpdatesDo) {
  // Gradients 1024x too large with inv_scale 1/1024: the update of the true
  // gradient; a false predicate leaves every buffer bit-identical. Seven
  // steps take RAdam past its first rectified update.
  for (std::string which : {"RMSprop", "Adagrad", "RAdam", "NAdam", "Adamax", "Adadelta", "Adafactor", "LAMB"}) {
    SCOPED_TRACE(which);
    Tensor p = param(f32).requires_grad_(), reference = param(f32).requires_grad_();
    auto make = [&](Tensor& parameter) -> std::unique_ptr<optim::Optimizer> {
      if (which == "Adagrad")
        return std::make_unique<optim::Adagrad>(std::vector<Tensor>{parameter},
                                                optim::AdagradOptions{.lr = 0.125, .lr_decay = 0.5});
      if (which == "RAdam")
        return std::make_unique<optim::RAdam>(std::vector<Tensor>{parameter},
                                              optim::RAdamOptions{.lr = 0.0625, .weight_decay = 0.01});
      if (which == "NAdam")
        return std::make_unique<optim::NAdam>(std::vector<Tensor>{parameter},
                                              optim::NAdamOptions{.lr = 0.0625, .weight_decay = 0.01});
      if (which == "Adamax")
        return std::make_unique<optim::Adamax>(std::vector<Tensor>{parameter},
                                               optim::AdamaxOptions{.lr = 0.0625, .weight_decay = 0.01});
      if (which == "Adadelta")
        return std::make_unique<optim::Adadelta>(std::vector<Tensor>{parameter},
                                                 optim::AdadeltaOptions{.lr = 0.5, .weight_decay = 0.01});
      if (which == "Adafactor")
        return std::make_unique<optim::Adafactor>(std::vector<Tensor>{parameter},
                                                  optim::AdafactorOptions{.lr = 0.25, .weight_decay = 0.01});
      if (which == "LAMB")
        return std::make_unique<optim::LAMB>(std::vector<Tensor>{parameter}, optim::LAMBOptions{.lr = 0.0625});
      return std::make_unique<optim::RMSprop>(std::vector<Tensor>{parameter},
                                              optim::RMSpropOptions{.lr = 0.0625, .momentum = 0.9, .centered = true});
    };
    std::unique_ptr<optim::Optimizer> opt = make(p), referenceOpt = make(reference);
    Tensor inv = scalar_tensor(1.0 / 1024, f32), yes = scalar_tensor(1.0, i1), no = scalar_tensor(0.0, i1);
    for (int s = 0; s < 7; ++s) {
      opt->zero_grad();
      referenceOpt->zero_grad();
      (sum(p * p) * 1024.0).backward();
      sum(reference * reference).backward();
      opt->step(inv, yes);
      referenceOpt->step();
    }
    EXPECT_EQ(p.to_vector(), reference.to_vector());
    auto before = opt->state_dict();
    std::vector<std::vector<double>> values;
    for (const auto& [name, tensor] : before)
      values.push_back(tensor.to_vector());
    opt->zero_grad();
    (sum(p * p) * 1024.0).backward();
    opt->step(inv, no);
    auto after = opt->state_dict();
    for (size_t k = 0; k < after.size(); ++k)
      EXPECT_EQ(after[k].second.to_vector(), values[k]) << after[k].first << " changed on a skipped step";
  }
}

TEST(OptimTest, RMSpropAndAdagradGroupsAndBadOptions) {
  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::RMSprop opt({{.params = {a}, .momentum = 0.9}, {.params = {b}, .lr = 0.0625}}, {.lr = 0.125});
  EXPECT_TRUE(opt.momentum_buffer(0).defined());
  EXPECT_FALSE(opt.momentum_buffer(1).defined());
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    (sum(a * a * a) / 3.0 + sum(b * b * b) / 3.0).backward();
    opt.step();
  }
  expectNear(a.to_vector(), rmspropReference({.lr = 0.125, .momentum = 0.9}, 3));
  expectNear(b.to_vector(), rmspropReference({.lr = 0.0625}, 3));
  Tensor p = param(f32).requires_grad_();
  std::string message = errorOf([&] { optim::RMSprop({p}, {.momentum = -0.5}); });
  EXPECT_NE(message.find("RMSprop: momentum must be finite and >= 0, got -0.5"), std::string::npos) << message;
  message = errorOf([&] { optim::Adagrad({{.params = {p}}, {.params = {a}, .lr_decay = -1.0}}, {}); });
  EXPECT_NE(message.find("Adagrad group 1: lr_decay must be finite and >= 0"), std::string::npos) << message;
  message = errorOf([&] { optim::Adagrad({p}, {.initial_accumulator_value = -0.1}); });
  EXPECT_NE(message.find("initial_accumulator_value"), std::string::npos) << message;
}

TEST(OptimTest, ARateThatIsNaNInfOrNegativeIsRefusedAndChangesNothing) {
  double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Tensor p = param(f32).requires_grad_();
  std::string message = errorOf([&] { optim::SGD({p}, {.lr = nan}); });
  EXPECT_NE(message.find("SGD: lr must be finite and >= 0, got nan"), std::string::npos) << message;
  message = errorOf([&] { optim::SGD({p}, {.lr = 0.1, .momentum = inf}); });
  EXPECT_NE(message.find("SGD: momentum must be finite and >= 0, got inf"), std::string::npos) << message;
  message = errorOf([&] { optim::SGD({p}, {.lr = 0.1, .weight_decay = -1.0}); });
  EXPECT_NE(message.find("SGD: weight_decay must be finite and >= 0"), std::string::npos) << message;
  message = errorOf([&] { optim::Adam({p}, {.lr = inf}); });
  EXPECT_NE(message.find("Adam: lr must be finite and >= 0, got inf"), std::string::npos) << message;
  message = errorOf([&] { optim::Adam({p}, {.eps = nan}); });
  EXPECT_NE(message.find("Adam: eps must be finite and >= 0, got nan"), std::string::npos) << message;
  message = errorOf([&] { optim::RMSprop({p}, {.lr = nan}); });
  EXPECT_NE(message.find("RMSprop: lr must be finite and >= 0"), std::string::npos) << message;

  // set_lr checks the same, and an error leaves the rate it had.
  Tensor q = param(f32).requires_grad_();
  optim::SGD two({{.params = {p}}, {.params = {q}, .lr = 0.5}}, {.lr = 0.25});
  message = errorOf([&] { two.set_lr(1, nan); });
  EXPECT_NE(message.find("SGD group 1 set_lr: lr must be finite and >= 0, got nan"), std::string::npos) << message;
  message = errorOf([&] { two.set_lr(inf); });
  EXPECT_NE(message.find("SGD group 0 set_lr: lr must be finite and >= 0, got inf"), std::string::npos) << message;
  message = errorOf([&] { two.set_lr(2, 0.1); });
  EXPECT_NE(message.find("SGD::set_lr: no group 2 (it has 2)"), std::string::npos) << message;
  EXPECT_EQ(two.lr(0).to_vector(), std::vector<double>{0.25});
  EXPECT_EQ(two.lr(1).to_vector(), std::vector<double>{0.5});
  two.set_lr(1, 0.0);
  EXPECT_EQ(two.lr(1).to_vector(), std::vector<double>{0.0});
}

TEST(OptimTest, RMSpropAndAdagradResumeFromTheirFiles) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  std::string path = (dir / "optimizer.ampjit").string();
  const optim::RMSpropOptions rmsprop{.lr = 0.0625, .momentum = 0.5, .centered = true};
  const optim::AdagradOptions adagrad{.lr = 0.125, .lr_decay = 0.5, .initial_accumulator_value = 0.25};
  auto make = [&](bool isAdagrad, Tensor& p) -> std::unique_ptr<optim::Optimizer> {
    if (isAdagrad)
      return std::make_unique<optim::Adagrad>(std::vector<Tensor>{p}, adagrad);
    return std::make_unique<optim::RMSprop>(std::vector<Tensor>{p}, rmsprop);
  };
  for (bool isAdagrad : {false, true}) {
    SCOPED_TRACE(isAdagrad ? "Adagrad" : "RMSprop");
    Tensor unbroken = param(f32).requires_grad_();
    auto unbrokenOpt = make(isAdagrad, unbroken);
    train(unbroken, *unbrokenOpt, 2);
    unbrokenOpt->save(path);
    Tensor resumed = tensor(unbroken.to_vector(), unbroken.shape(), f32).requires_grad_();
    auto resumedOpt = make(isAdagrad, resumed);
    resumedOpt->load(path);
    train(unbroken, *unbrokenOpt, 3);
    train(resumed, *resumedOpt, 3);
    EXPECT_EQ(resumed.to_vector(), unbroken.to_vector());
    // The other optimizer's file is refused, naming both.
    Tensor other = param(f32).requires_grad_();
    auto otherOpt = make(!isAdagrad, other);
    std::string message = errorOf([&] { otherOpt->load(path); });
    EXPECT_NE(message.find(isAdagrad ? "Adagrad" : "RMSprop"), std::string::npos) << message;
  }
}

TEST(OptimTest, RAdamResumesFromItsFileAcrossItsFirstRectifiedUpdate) {
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = (scratch.path / "radam.ampjit").string();
  const optim::RAdamOptions options{.lr = 0.0625, .weight_decay = 0.05, .decoupled_weight_decay = true};
  Tensor unbroken = param(f32).requires_grad_();
  optim::RAdam unbrokenOpt({unbroken}, options);
  train(unbroken, unbrokenOpt, 4);
  unbrokenOpt.save(path);
  Tensor resumed = tensor(unbroken.to_vector(), unbroken.shape(), f32).requires_grad_();
  optim::RAdam resumedOpt({resumed}, options);
  resumedOpt.load(path);
  EXPECT_EQ(resumedOpt.step_count(0).item(), 4.0);
  // Updates 5 to 8: the count decides where the rectified update starts.
  train(unbroken, unbrokenOpt, 4);
  train(resumed, resumedOpt, 4);
  EXPECT_EQ(resumed.to_vector(), unbroken.to_vector());
  optim::RAdam coupled({param(f32).requires_grad_()}, {.lr = 0.0625, .weight_decay = 0.05});
  std::string message = errorOf([&] { coupled.load(path); });
  EXPECT_NE(message.find("decoupled_weight_decay"), std::string::npos) << message;
}

TEST(OptimTest, NAdamResumesFromItsFileWithItsProductOfMomenta) {
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = (scratch.path / "nadam.ampjit").string();
  const optim::NAdamOptions options{.lr = 0.0625, .weight_decay = 0.05, .decoupled_weight_decay = true};
  Tensor unbroken = param(f32).requires_grad_();
  optim::NAdam unbrokenOpt({unbroken}, options);
  train(unbroken, unbrokenOpt, 3);
  unbrokenOpt.save(path);
  Tensor resumed = tensor(unbroken.to_vector(), unbroken.shape(), f32).requires_grad_();
  optim::NAdam resumedOpt({resumed}, options);
  resumedOpt.load(path);
  EXPECT_EQ(resumedOpt.mu_product(0).item(), unbrokenOpt.mu_product(0).item());
  EXPECT_LT(resumedOpt.mu_product(0).item(), 1.0);
  train(unbroken, unbrokenOpt, 3);
  train(resumed, resumedOpt, 3);
  EXPECT_EQ(resumed.to_vector(), unbroken.to_vector());
  optim::NAdam other({param(f32).requires_grad_()}, {.lr = 0.0625, .weight_decay = 0.05, .momentum_decay = 0.01,
                                                      .decoupled_weight_decay = true});
  std::string message = errorOf([&] { other.load(path); });
  EXPECT_NE(message.find("momentum_decay"), std::string::npos) << message;
}

TEST(OptimTest, ParametersWithoutGradientsAreLeftAlone) {
  Tensor a = param(f64).requires_grad_();
  Tensor b = param(f64).requires_grad_();
  optim::Adam opt({a, b}, {.lr = 0.125});
  (sum(a * a)).backward();
  opt.step();
  EXPECT_EQ(b.to_vector(), kInit);
  EXPECT_EQ(opt.step_count(0).item(), 1.0);
  EXPECT_EQ(opt.step_count(1).item(), 0.0);
}

TEST(OptimTest, AFalsePredicateLeavesEveryStateBitIdentical) {
  Tensor p = param(f32).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.125, .momentum = 0.9});
  (sum(p * p)).backward();
  opt.step(Tensor(), scalar_tensor(0.0, i1));
  EXPECT_EQ(p.to_vector(), param(f32).to_vector());
  EXPECT_EQ(opt.momentum_buffer(0).to_vector(), std::vector<double>(4, 0.0));
  EXPECT_EQ(opt.step_count(0).item(), 0.0);
}

TEST(OptimTest, TheLrTensorIsWrittenInPlace) {
  Tensor p = param(f64).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.5});
  Tensor lr = opt.lr(); // a second handle, as a traced step holds one
  opt.set_lr(0.25);
  EXPECT_EQ(lr.item(), 0.25);
  EXPECT_EQ(lr.dtype(), f32);
}

TEST(OptimTest, StepLRFollowsPyTorch) {
  Tensor p = param(f64).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR schedule(opt, 2, 0.5);
  std::vector<double> lrs;
  for (int e = 0; e < 6; ++e, schedule.step())
    lrs.push_back(opt.lr().item());
  EXPECT_EQ(lrs, (std::vector<double>{1.0, 1.0, 0.5, 0.5, 0.25, 0.25}));
}

TEST(OptimTest, CosineAnnealingLRFollowsPyTorch) {
  Tensor p = param(f64).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::CosineAnnealingLR schedule(opt, 4, 0.01);
  for (int e = 0; e <= 4; ++e, schedule.step()) {
    double expected = 0.01 + (0.1 - 0.01) * (1 + std::cos(std::numbers::pi * e / 4)) / 2;
    EXPECT_EQ(opt.lr().item(), double(float(expected))) << "epoch " << e;
    EXPECT_DOUBLE_EQ(schedule.get_last_lr(), expected);
  }
}

TEST(OptimTest, LinearWarmupFollowsPyTorchLinearLR) {
  Tensor p = param(f64).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::LinearWarmup schedule(opt, 4, 0.5);
  std::vector<double> lrs;
  for (int e = 0; e < 6; ++e, schedule.step())
    lrs.push_back(opt.lr().item());
  EXPECT_EQ(lrs, (std::vector<double>{0.5, 0.625, 0.75, 0.875, 1.0, 1.0}));
}

TEST(OptimTest, ConstantLRFollowsPyTorch) {
  // ConstantLR(opt, factor=0.25, total_iters=3) over two groups, then its
  // PyTorch defaults (factor 1/3 for 5 epochs) and a factor of 0.
  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::SGD opt({{.params = {a}}, {.params = {b}, .lr = 0.5}}, {.lr = 1.0});
  optim::ConstantLR schedule(opt, 0.25, 3);
  std::vector<double> first, second;
  for (int e = 0; e < 5; ++e, schedule.step()) {
    first.push_back(schedule.get_last_lr(0));
    second.push_back(schedule.get_last_lr(1));
  }
  EXPECT_EQ(first, (std::vector<double>{0.25, 0.25, 0.25, 1.0, 1.0}));
  EXPECT_EQ(second, (std::vector<double>{0.125, 0.125, 0.125, 0.5, 0.5}));
  EXPECT_EQ(opt.lr(1).item(), 0.5);

  Tensor c = param(f64).requires_grad_();
  optim::SGD defaults({c}, {.lr = 0.75});
  optim::ConstantLR byDefault(defaults);
  std::vector<double> lrs;
  for (int e = 0; e < 7; ++e, byDefault.step())
    lrs.push_back(byDefault.get_last_lr());
  const double third = 0.75 * (1.0 / 3.0), restored = 0.75 * (1.0 / 3.0 + (1.0 - 1.0 / 3.0));
  EXPECT_EQ(lrs, (std::vector<double>{third, third, third, third, third, restored, restored}));
  // A factor of 0 holds the lr at 0 (frozen weights) until total_iters.
  optim::ConstantLR frozen(defaults, 0.0, 1);
  EXPECT_EQ(frozen.get_last_lr(), 0.0);
  frozen.step();
  EXPECT_EQ(frozen.get_last_lr(), 0.75);

  std::string message = errorOf([&] { optim::ConstantLR(opt, 1.5); });
  EXPECT_NE(message.find("ConstantLR: factor must be in [0, 1], got 1.5"), std::string::npos) << message;
  message = errorOf([&] { optim::ConstantLR(opt, 0.5, -2); });
  EXPECT_NE(message.find("ConstantLR: total_iters must be >= 0, got -2"), std::string::npos) << message;
}

TEST(OptimTest, AConstantLRResumesFromItsFileAndRefusesAnotherFactor) {
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = (scratch.path / "schedule.ampjit").string();
  optim::SGD opt({param(f64).requires_grad_()}, {.lr = 1.0});
  optim::ConstantLR schedule(opt, 0.5, 4);
  for (int e = 0; e < 3; ++e)
    schedule.step();
  schedule.save(path);
  optim::SGD resumedOpt({param(f64).requires_grad_()}, {.lr = 1.0});
  optim::ConstantLR resumed(resumedOpt, 0.5, 4);
  resumed.load(path);
  EXPECT_EQ(resumed.last_epoch(), 3);
  EXPECT_EQ(resumed.get_last_lr(), 0.5);
  resumed.step();
  EXPECT_EQ(resumed.get_last_lr(), 1.0) << "the fourth epoch ends the constant factor";
  optim::ConstantLR other(resumedOpt, 0.25, 4);
  std::string message = errorOf([&] { other.load(path); });
  EXPECT_NE(message.find("setting 'factor' is 0.5 in the file but 0.25 here"), std::string::npos) << message;
}

TEST(OptimTest, CyclicLRFollowsPyTorch) {
  // Amplitude 0.5 - 0.1 = 0.4, every value worked by hand. Both groups take
  // CyclicLR's own base_lr, whatever their initial lrs.
  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::SGD opt({{.params = {a}}, {.params = {b}, .lr = 0.25}}, {.lr = 1.0});
  auto lrsOver = [](optim::LRScheduler& schedule, int epochs, size_t group = 0) {
    std::vector<double> lrs;
    for (int e = 0; e < epochs; ++e, schedule.step())
      lrs.push_back(schedule.get_last_lr(group));
    return lrs;
  };
  auto expectLrs = [](const std::vector<double>& actual, const std::vector<double>& expected) {
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t e = 0; e < actual.size(); ++e)
      EXPECT_NEAR(actual[e], expected[e], 1e-15) << "epoch " << e;
  };
  // Triangular, up 2 and down 2: 0.1 0.3 0.5 0.3 | 0.1 ...
  optim::CyclicLR triangular(opt, 0.1, 0.5, {.step_size_up = 2});
  EXPECT_EQ(triangular.get_last_lr(1), 0.1);
  expectLrs(lrsOver(triangular, 9), {0.1, 0.3, 0.5, 0.3, 0.1, 0.3, 0.5, 0.3, 0.1});
  EXPECT_NEAR(opt.lr(1).item(), 0.3, 1e-7) << "the group's lr tensor follows the schedule";
  // Up 3, down 1: a saw with a one-epoch fall.
  optim::CyclicLR saw(opt, 0.1, 0.5, {.step_size_up = 3, .step_size_down = 1});
  expectLrs(lrsOver(saw, 6, 1), {0.1, 0.1 + 0.4 / 3, 0.1 + 0.8 / 3, 0.5, 0.1, 0.1 + 0.4 / 3});
  // triangular2 halves the amplitude each cycle.
  optim::CyclicLR halving(opt, 0.1, 0.5, {.step_size_up = 2, .mode = optim::CyclicLROptions::Mode::triangular2});
  expectLrs(lrsOver(halving, 10), {0.1, 0.3, 0.5, 0.3, 0.1, 0.2, 0.3, 0.2, 0.1, 0.15});
  // exp_range scales by gamma^epoch.
  optim::CyclicLR decaying(opt, 0.1, 0.5,
                           {.step_size_up = 2, .mode = optim::CyclicLROptions::Mode::exp_range, .gamma = 0.5});
  expectLrs(lrsOver(decaying, 5), {0.1, 0.1 + 0.2 * 0.5, 0.1 + 0.4 * 0.25, 0.1 + 0.2 * 0.125, 0.1});
  // A scale of one's own, of the cycle or of the epoch.
  std::vector<double> seen;
  optim::CyclicLR ofCycle(opt, 0.1, 0.5, {.step_size_up = 1, .scale_fn = [&](double c) {
                                            seen.push_back(c);
                                            return 1.0 / c;
                                          }});
  expectLrs(lrsOver(ofCycle, 4), {0.1, 0.5, 0.1, 0.1 + 0.4 / 2});
  // Called for each of the two groups at epochs 0 to 4.
  EXPECT_EQ(seen, (std::vector<double>{1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0}));
  optim::CyclicLR ofEpoch(opt, 0.1, 0.5,
                          {.step_size_up = 1,
                           .scale_fn = [](double epoch) { return epoch == 3.0 ? 0.5 : 1.0; },
                           .scale_mode = optim::CyclicLROptions::ScaleMode::iterations});
  expectLrs(lrsOver(ofEpoch, 4), {0.1, 0.5, 0.1, 0.3});

  std::string message = errorOf([&] { optim::CyclicLR(opt, 0.1, -0.5); });
  EXPECT_NE(message.find("CyclicLR: max_lr must be finite and >= 0, got -0.5"), std::string::npos) << message;
  message = errorOf([&] { optim::CyclicLR(opt, 0.1, 0.5, {.step_size_up = 0}); });
  EXPECT_NE(message.find("CyclicLR: step_size_up must be >= 1, got 0"), std::string::npos) << message;
  message = errorOf([&] { optim::CyclicLR(opt, 0.1, 0.5, {.step_size_down = -1}); });
  EXPECT_NE(message.find("CyclicLR: step_size_down must be >= 0, got -1"), std::string::npos) << message;
  message = errorOf([&] { optim::CyclicLR(opt, 0.1, 0.5, {.gamma = 0.0}); });
  EXPECT_NE(message.find("CyclicLR: gamma must be finite and positive, got 0"), std::string::npos) << message;
  // A scale that makes the lr negative is refused at the epoch it would.
  optim::CyclicLR negative(opt, 0.1, 0.5, {.step_size_up = 1, .scale_fn = [](double c) { return c > 1 ? -1.0 : 1.0; }});
  negative.step();
  negative.step();
  message = errorOf([&] { negative.step(); });
  EXPECT_NE(message.find("CyclicLR: the lr of group 0 at epoch 3 would be -0.3"), std::string::npos) << message;
  EXPECT_EQ(negative.last_epoch(), 2);
}

TEST(OptimTest, ACyclicLRResumesMidCycleAndRefusesAnotherMode) {
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = (scratch.path / "schedule.ampjit").string();
  optim::SGD opt({param(f64).requires_grad_()}, {.lr = 1.0});
  const optim::CyclicLROptions options{.step_size_up = 2, .mode = optim::CyclicLROptions::Mode::triangular2};
  optim::CyclicLR schedule(opt, 0.1, 0.5, options);
  for (int e = 0; e < 5; ++e)
    schedule.step();
  schedule.save(path);
  optim::SGD resumedOpt({param(f64).requires_grad_()}, {.lr = 1.0});
  optim::CyclicLR resumed(resumedOpt, 0.1, 0.5, options);
  resumed.load(path);
  EXPECT_EQ(resumed.last_epoch(), 5);
  EXPECT_EQ(resumed.get_last_lr(), schedule.get_last_lr());
  resumed.step();
  schedule.step();
  EXPECT_EQ(resumed.get_last_lr(), schedule.get_last_lr());
  EXPECT_NEAR(resumed.get_last_lr(), 0.3, 1e-15) << "the second cycle's peak, at half the amplitude";
  optim::CyclicLR other(resumedOpt, 0.1, 0.5, {.step_size_up = 2});
  std::string message = errorOf([&] { other.load(path); });
  EXPECT_NE(message.find("setting 'mode' is 1 in the file but 0 here"), std::string::npos) << message;
}

TEST(OptimTest, LambdaLRScalesEachGroupsInitialLrByTheFactor) {
  // Linear warmup for 2 epochs, then cosine decay to 0 at epoch 6.
  auto factor = [](int64_t epoch) {
    return epoch < 2 ? double(epoch + 1) / 2.0 : (1.0 + std::cos(std::numbers::pi * double(epoch - 2) / 4.0)) / 2.0;
  };
  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::SGD opt({{.params = {a}}, {.params = {b}, .lr = 0.5}}, {.lr = 1.0});
  optim::LambdaLR schedule(opt, factor);
  for (int64_t e = 0; e <= 6; ++e, schedule.step()) {
    EXPECT_EQ(schedule.get_last_lr(0), factor(e)) << "epoch " << e;
    EXPECT_EQ(schedule.get_last_lr(1), 0.5 * factor(e)) << "epoch " << e;
    EXPECT_EQ(opt.lr(1).item(), double(float(0.5 * factor(e)))) << "epoch " << e;
  }
  std::string message = errorOf([&] { optim::LambdaLR(opt, [](int64_t) { return -1.0; }); });
  EXPECT_NE(message.find("LambdaLR: the factor at epoch 0 is -1"), std::string::npos) << message;
}

TEST(OptimTest, ClipGradValueClampsEachGradientElementInPlace) {
  Tensor a = tensor({3.0, -0.5, -7.0, 0.25}, f64).requires_grad_(), b = tensor({1.0}, f32).requires_grad_(),
         untouched = tensor({1.0}, f32).requires_grad_();
  sum(a * tensor({2.0, -2.0, 0.5, std::nan("")}, f64)).backward(); // gradient {2, -2, 0.5, NaN}
  sum(b * b * 4.0).backward();                                    // gradient {8}
  Tensor aGrad = a.grad();                                        // a second handle: written in place
  clip_grad_value_({a, b, untouched}, 0.75);
  std::vector<double> clipped = aGrad.to_vector();
  EXPECT_EQ(std::vector<double>(clipped.begin(), clipped.begin() + 3), (std::vector<double>{0.75, -0.75, 0.5}));
  EXPECT_TRUE(std::isnan(clipped[3])) << "a NaN stays NaN for the scaler to see";
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{0.75}));
  EXPECT_FALSE(untouched.grad().defined());
  EXPECT_NE(errorOf([&] { clip_grad_value_({a}, -2.5e-7); }).find("clip_value must be finite and >= 0, got -2.5e-07"),
            std::string::npos);
}

TEST(OptimTest, ClipGradNormScalesToMaxNormAndReturnsTheTotal) {
  Tensor a = tensor({3.0, 0.0}, f64).requires_grad_();
  Tensor b = tensor({4.0}, f64).requires_grad_();
  (sum(a * tensor({1.0, 1.0}, f64) * a) * 0.5 + sum(b * b) * 0.5).backward(); // grads = a, b
  Tensor norm = clip_grad_norm_({a, b}, 1.0);
  EXPECT_DOUBLE_EQ(norm.item(), 5.0);
  double coefficient = 1.0 / (5.0 + 1e-6);
  expectNear(a.grad().to_vector(), {3.0 * coefficient, 0.0});
  expectNear(b.grad().to_vector(), {4.0 * coefficient});
  // Below max_norm nothing changes (the coefficient is clamped to 1).
  Tensor again = clip_grad_norm_({a, b}, 10.0);
  EXPECT_NEAR(again.item(), 1.0, 1e-6);
  expectNear(b.grad().to_vector(), {4.0 * coefficient});
  EXPECT_DOUBLE_EQ(clip_grad_norm_({a, b}, 10.0, INFINITY).item(), 4.0 * coefficient);
}

/// Two layers' weights and biases, and a loss over them.
struct TwoLayers {
  explicit TwoLayers(uint64_t seed) {
    Generator g(seed);
    for (Tensor* t : {&w1, &b1, &w2, &b2})
      *t = randn(t == &w1 || t == &w2 ? Shape{4, 4} : Shape{4}, f32, &g).requires_grad_(true);
  }
  Tensor loss(const Tensor& x) const { return sum(tanh(matmul(tanh(matmul(x, w1) + b1), w2) + b2)); }
  std::vector<Tensor> weights() const { return {w1, w2}; }
  std::vector<Tensor> biases() const { return {b1, b2}; }
  Tensor w1, b1, w2, b2;
};

/// Three steps of `net` on seeded inputs, stepping every optimizer given.
void trainThreeSteps(const TwoLayers& net, std::initializer_list<optim::Optimizer*> optimizers) {
  Generator g(9);
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({3, 4}, f32, &g);
    for (optim::Optimizer* optimizer : optimizers)
      optimizer->zero_grad();
    net.loss(x).backward();
    for (optim::Optimizer* optimizer : optimizers)
      optimizer->step();
  }
}

TEST(OptimTest, ParameterGroupsTrainAsOneOptimizerPerGroupWould) {
  // PyTorch's param_groups: weights with weight decay, biases without, each
  // group its own lr; the same as a separate optimizer per group.
  TwoLayers grouped(1), separate(1);
  optim::SGD groups({{.params = grouped.weights(), .weight_decay = 0.1}, {.params = grouped.biases(), .lr = 0.05}},
                    {.lr = 0.1, .momentum = 0.9});
  optim::SGD forWeights(separate.weights(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
  optim::SGD forBiases(separate.biases(), {.lr = 0.05, .momentum = 0.9});
  trainThreeSteps(grouped, {&groups});
  trainThreeSteps(separate, {&forWeights, &forBiases});
  for (auto [a, b] : {std::pair{grouped.w1, separate.w1}, {grouped.b1, separate.b1}, {grouped.w2, separate.w2},
                      {grouped.b2, separate.b2}})
    EXPECT_EQ(a.to_vector(), b.to_vector());
  EXPECT_EQ(groups.group_count(), 2u);
  EXPECT_EQ(groups.group_of(2), 1u); // parameters() lists group 0's, then group 1's
  EXPECT_EQ(groups.options(0).weight_decay, 0.1);
  EXPECT_EQ(groups.options(1).weight_decay, 0.0);
  EXPECT_EQ(groups.options(1).momentum, 0.9);
  EXPECT_EQ(groups.lr(1).item(), double(float(0.05)));

  // AdamW: decay on the weights only.
  TwoLayers adamGrouped(2), adamSeparate(2);
  optim::AdamW adamGroups({{.params = adamGrouped.weights()}, {.params = adamGrouped.biases(), .weight_decay = 0.0}},
                          {.lr = 1e-2});
  optim::AdamW adamWeights(adamSeparate.weights(), {.lr = 1e-2});
  optim::AdamW adamBiases(adamSeparate.biases(), {.lr = 1e-2, .weight_decay = 0.0});
  trainThreeSteps(adamGrouped, {&adamGroups});
  trainThreeSteps(adamSeparate, {&adamWeights, &adamBiases});
  EXPECT_EQ(adamGrouped.w1.to_vector(), adamSeparate.w1.to_vector());
  EXPECT_EQ(adamGrouped.b2.to_vector(), adamSeparate.b2.to_vector());
  EXPECT_EQ(std::string(adamGroups.name()), "AdamW");
}

TEST(OptimTest, SchedulesMoveEveryGroupFromItsOwnInitialLr) {
  TwoLayers net(1);
  optim::SGD opt({{.params = net.weights()}, {.params = net.biases(), .lr = 0.4}}, {.lr = 0.1});
  optim::StepLR schedule(opt, 1, 0.5);
  schedule.step();
  schedule.step();
  EXPECT_EQ(opt.lr(0).item(), double(float(0.025)));
  EXPECT_EQ(opt.lr(1).item(), double(float(0.1)));
  EXPECT_EQ(schedule.get_last_lr(1), 0.1);
  opt.set_lr(1, 0.3);
  EXPECT_EQ(opt.lr(1).item(), double(float(0.3)));
  EXPECT_EQ(opt.lr(0).item(), double(float(0.025)));
}

TEST(OptimTest, BadParameterGroupsAreErrors) {
  TwoLayers net(1);
  std::string message =
      errorOf([&] { optim::SGD({{.params = net.weights()}, {.params = {net.w1, net.b1}}}, {.lr = 0.1}); });
  EXPECT_NE(message.find("is in group 0 and again in group 1"), std::string::npos) << message;
  message = errorOf([&] { optim::Adam({{.params = net.weights()}, {.params = {}}}, {.lr = 0.1}); });
  EXPECT_NE(message.find("parameter group 1 has no parameters"), std::string::npos) << message;
  message = errorOf([&] { optim::SGD({{.params = net.weights()}, {.params = net.biases(), .nesterov = true}}, {.lr = 0.1}); });
  EXPECT_NE(message.find("SGD group 1: nesterov needs momentum > 0"), std::string::npos) << message;
  message = errorOf([&] { optim::AdamW({{.params = net.weights(), .betas = std::pair{1.5, 0.9}}}, {.lr = 0.1}); });
  EXPECT_NE(message.find("AdamW: betas must be in [0, 1), got 1.5"), std::string::npos) << message;
}

TEST(OptimTest, BadOptionsAreErrors) {
  Tensor p = param(f64).requires_grad_();
  EXPECT_NE(errorOf([&] { optim::SGD({p}, {.lr = 0.1, .nesterov = true}); }).find("nesterov"), std::string::npos);
  EXPECT_NE(errorOf([&] { optim::Adam({p}, {.betas = {1.0, 0.9}}); }).find("betas"), std::string::npos);
  EXPECT_NE(errorOf([&] { clip_grad_norm_({p}, 1.0, 1.0); }).find("norm_type"), std::string::npos);
}

/// The lr tensor at epochs 0..count-1 of `schedule` over `opt`.
std::vector<double> lrsOver(optim::LRScheduler& schedule, optim::Optimizer& opt, int count) {
  std::vector<double> lrs;
  for (int e = 0; e < count; ++e, schedule.step())
    lrs.push_back(opt.lr().item());
  return lrs;
}

TEST(OptimTest, MultiStepExponentialAndPolynomialLRFollowPyTorch) {
  Tensor p = param(f64).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  // torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[2, 4, 4], gamma=0.5)
  optim::MultiStepLR multiStep(opt, {2, 4, 4}, 0.5);
  EXPECT_EQ(lrsOver(multiStep, opt, 6), (std::vector<double>{1.0, 1.0, 0.5, 0.5, 0.125, 0.125}));
  optim::ExponentialLR exponential(opt, 0.5);
  EXPECT_EQ(lrsOver(exponential, opt, 4), (std::vector<double>{1.0, 0.5, 0.25, 0.125}));
  // PolynomialLR(opt, total_iters=4, power=2): (1 - e/4)^2, then 0.
  optim::PolynomialLR polynomial(opt, 4, 2.0);
  EXPECT_EQ(lrsOver(polynomial, opt, 6), (std::vector<double>{1.0, 0.5625, 0.25, 0.0625, 0.0, 0.0}));
  EXPECT_NE(errorOf([&] { optim::MultiStepLR(opt, {3, 2}); }).find("increasing, got 3 then 2"), std::string::npos);
  EXPECT_NE(errorOf([&] { optim::ExponentialLR(opt, 0.0); }).find("gamma must be finite and positive"),
            std::string::npos);
  // A setting prints as the user wrote it, not rounded to six decimals
  // (which would print -1e-9 as -0.000000).
  std::string message = errorOf([&] { optim::ExponentialLR(opt, -1e-9); });
  EXPECT_NE(message.find("gamma must be finite and positive, got -1e-09"), std::string::npos) << message;
  message = errorOf([&] { optim::PolynomialLR(opt, 4, -0.25); });
  EXPECT_NE(message.find("power must be finite and >= 0, got -0.25"), std::string::npos) << message;
}

TEST(OptimTest, SequentialLRWarmsUpThenDecaysAsPyTorchDoes) {
  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::SGD opt({{.params = {a}}, {.params = {b}, .lr = 0.5}}, {.lr = 1.0});
  // SequentialLR(opt, [LinearLR(opt, 0.25, total_iters=2), CosineAnnealingLR(opt, T_max=4)], milestones=[2])
  auto warmup = std::make_shared<optim::LinearWarmup>(opt, 2, 0.25);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, 4);
  optim::SequentialLR schedule(opt, {warmup, cosine}, {2});
  for (int64_t e = 0; e <= 7; ++e, schedule.step()) {
    for (size_t group = 0; group < 2; ++group) {
      double base = group == 0 ? 1.0 : 0.5;
      double expected = e < 2 ? base * (0.25 + 0.75 * double(e) / 2.0)
                              : base * (1.0 + std::cos(std::numbers::pi * double(e - 2) / 4.0)) / 2.0;
      EXPECT_DOUBLE_EQ(schedule.get_last_lr(group), expected) << "epoch " << e << " group " << group;
      EXPECT_EQ(opt.lr(group).item(), double(float(schedule.get_last_lr(group)))) << "epoch " << e;
    }
  }
  std::string message = errorOf([&] { optim::SequentialLR(opt, {warmup, cosine}, {}); });
  EXPECT_NE(message.find("2 schedules need 1 milestones, got 0"), std::string::npos) << message;
  optim::SGD other({param(f64).requires_grad_()}, {.lr = 1.0});
  auto elsewhere = std::make_shared<optim::ExponentialLR>(other, 0.9);
  message = errorOf([&] { optim::SequentialLR(opt, {warmup, elsewhere}, {2}); });
  EXPECT_NE(message.find("schedule 1 (ExponentialLR) drives another optimizer"), std::string::npos) << message;
}

TEST(OptimTest, ChainedSchedulerMultipliesTheFactorsAsPyTorchsChain) {
  // ChainedScheduler([ConstantLR(factor=0.1, total_iters=2), ExponentialLR(gamma=0.9)])
  // as PyTorch's recursive steps give it: 0.1, 0.09, then the factor ends
  // (x 10) and the decay goes on: 0.81, 0.729, 0.6561.
  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::SGD opt({{.params = {a}}, {.params = {b}, .lr = 0.5}}, {.lr = 1.0});
  auto constant = std::make_shared<optim::ConstantLR>(opt, 0.1, 2);
  auto decay = std::make_shared<optim::ExponentialLR>(opt, 0.9);
  optim::ChainedScheduler chain(opt, {constant, decay});
  const std::vector<double> factors = {0.1, 0.09, 0.81, 0.729, 0.6561};
  for (size_t e = 0; e < factors.size(); ++e, chain.step())
    for (size_t group = 0; group < 2; ++group) {
      double base = group == 0 ? 1.0 : 0.5;
      EXPECT_NEAR(chain.get_last_lr(group), base * factors[e], 1e-15) << "epoch " << e << " group " << group;
      EXPECT_EQ(opt.lr(group).item(), double(float(chain.get_last_lr(group)))) << "epoch " << e;
    }
  // Three at once: a warmup, a step decay and an exponential decay.
  auto warmup = std::make_shared<optim::LinearLR>(opt, 2, 0.5);
  auto steps = std::make_shared<optim::MultiStepLR>(opt, std::vector<int64_t>{1, 3}, 0.5);
  optim::ChainedScheduler three(opt, {warmup, steps, decay});
  std::vector<double> lrs;
  for (int e = 0; e < 4; ++e, three.step())
    lrs.push_back(three.get_last_lr(0));
  const std::vector<double> expected = {0.5, 0.75 * 0.5 * 0.9, 0.5 * 0.81, 0.25 * 0.729};
  for (size_t e = 0; e < lrs.size(); ++e)
    EXPECT_NEAR(lrs[e], expected[e], 1e-15) << "epoch " << e;

  std::string message = errorOf([&] { optim::ChainedScheduler(opt, {}); });
  EXPECT_NE(message.find("ChainedScheduler: no schedules given"), std::string::npos) << message;
  message = errorOf([&] { optim::ChainedScheduler(opt, {constant, nullptr}); });
  EXPECT_NE(message.find("ChainedScheduler: schedule 1 is null"), std::string::npos) << message;
  optim::SGD other({param(f64).requires_grad_()}, {.lr = 1.0});
  auto elsewhere = std::make_shared<optim::ExponentialLR>(other, 0.9);
  message = errorOf([&] { optim::ChainedScheduler(opt, {constant, elsewhere}); });
  EXPECT_NE(message.find("ChainedScheduler: schedule 1 (ExponentialLR) drives another optimizer"), std::string::npos)
      << message;
}

TEST(OptimTest, AChainedSchedulerResumesFromItsFileAndRefusesAnotherChain) {
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = (scratch.path / "schedule.ampjit").string();
  auto makeChain = [](optim::Optimizer& opt, double gamma) {
    return optim::ChainedScheduler(
        opt, {std::make_shared<optim::ConstantLR>(opt, 0.1, 2), std::make_shared<optim::ExponentialLR>(opt, gamma)});
  };
  optim::SGD opt({param(f64).requires_grad_()}, {.lr = 1.0});
  optim::ChainedScheduler chain = makeChain(opt, 0.9);
  chain.step();
  chain.save(path);
  optim::SGD resumedOpt({param(f64).requires_grad_()}, {.lr = 1.0});
  optim::ChainedScheduler resumed = makeChain(resumedOpt, 0.9);
  resumed.load(path);
  EXPECT_EQ(resumed.last_epoch(), 1);
  resumed.step();
  chain.step();
  EXPECT_EQ(resumed.get_last_lr(), chain.get_last_lr());
  EXPECT_NEAR(resumed.get_last_lr(), 0.81, 1e-15) << "the constant factor ends at epoch 2";
  optim::ChainedScheduler otherChain = makeChain(resumedOpt, 0.8);
  std::string message = errorOf([&] { otherChain.load(path); });
  EXPECT_NE(message.find("setting '1.ExponentialLR.gamma' is 0.9 in the file but 0.8 here"), std::string::npos)
      << message;
}

TEST(OptimTest, ASequentialLRResumesFromItsFileAndRefusesAnotherSequence) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  std::string path = (dir / "schedule.ampjit").string();
  Tensor p = param(f64).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  auto makeSchedule = [&](double gamma) {
    return optim::SequentialLR(
        opt, {std::make_shared<optim::LinearWarmup>(opt, 3), std::make_shared<optim::ExponentialLR>(opt, gamma)}, {3});
  };
  optim::SequentialLR schedule = makeSchedule(0.5);
  for (int e = 0; e < 5; ++e)
    schedule.step();
  schedule.save(path);
  optim::SequentialLR resumed = makeSchedule(0.5);
  resumed.load(path);
  EXPECT_EQ(resumed.last_epoch(), 5);
  EXPECT_EQ(resumed.get_last_lr(), 0.25); // ExponentialLR's epoch 2
  optim::SequentialLR otherGamma = makeSchedule(0.9);
  std::string message = errorOf([&] { otherGamma.load(path); });
  EXPECT_NE(message.find("1.ExponentialLR.gamma"), std::string::npos) << message;
}

TEST(OptimTest, AStepThatWouldSetANegativeLrIsRefusedAndChangesNoGroup) {
  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::SGD opt({{.params = {a}}, {.params = {b}, .lr = 0.25}}, {.lr = 1.0});
  // eta_min -0.5: at epoch 1 group 0's lr is 0.25 but group 1's -0.125.
  optim::CosineAnnealingLR schedule(opt, 2, -0.5);
  std::string message = errorOf([&] { schedule.step(); });
  EXPECT_NE(message.find("CosineAnnealingLR: the lr of group 1 at epoch 1 would be -0.125"), std::string::npos)
      << message;
  EXPECT_EQ(schedule.last_epoch(), 0);
  EXPECT_EQ(schedule.get_last_lr(0), 1.0);
  EXPECT_EQ(opt.lr(0).item(), 1.0);
  EXPECT_EQ(opt.lr(1).item(), 0.25);
}

TEST(OptimTest, CosineAnnealingWarmRestartsRestartsAsPyTorchsStepByStepCount) {
  Tensor p = param(f64).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  // CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=0.1): cycles
  // of 3, 6 and 12 steps, restarting at epochs 3 and 9.
  optim::CosineAnnealingWarmRestarts schedule(opt, 3, 2, 0.1);
  const int64_t cycleOf[] = {3, 3, 3, 6, 6, 6, 6, 6, 6, 12, 12, 12};
  const int64_t intoCycle[] = {0, 1, 2, 0, 1, 2, 3, 4, 5, 0, 1, 2};
  for (int64_t e = 0; e < 12; ++e, schedule.step()) {
    double expected =
        0.1 + 0.9 * (1.0 + std::cos(std::numbers::pi * double(intoCycle[e]) / double(cycleOf[e]))) / 2.0;
    EXPECT_EQ(schedule.get_last_lr(), expected) << "epoch " << e;
    EXPECT_EQ(opt.lr().item(), double(float(expected))) << "epoch " << e;
  }
  EXPECT_EQ(schedule.lr_at(3, 1.0), 1.0);
  EXPECT_EQ(schedule.lr_at(9, 1.0), 1.0);
  EXPECT_EQ(schedule.lr_at(21, 1.0), 1.0); // 3 + 6 + 12: the fourth restart
  EXPECT_EQ(schedule.lr_at(20, 1.0), 0.1 + 0.9 * (1.0 + std::cos(std::numbers::pi * 11.0 / 12.0)) / 2.0);

  // T_mult 1: every T_0 steps, however far on.
  optim::SGD plainOpt({param(f64).requires_grad_()}, {.lr = 2.0});
  optim::CosineAnnealingWarmRestarts restarts(plainOpt, 4);
  EXPECT_EQ(restarts.lr_at(4'000'000'002, 2.0), restarts.lr_at(2, 2.0));
  EXPECT_EQ(restarts.lr_at(2, 2.0), 1.0);

  std::string message = errorOf([&] { optim::CosineAnnealingWarmRestarts(opt, 0); });
  EXPECT_NE(message.find("T_0 must be positive, got 0"), std::string::npos) << message;
  message = errorOf([&] { optim::CosineAnnealingWarmRestarts(opt, 3, 0); });
  EXPECT_NE(message.find("T_mult must be an integer >= 1, got 0"), std::string::npos) << message;

  // Its settings travel with its file: another T_mult does not load.
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = (scratch.path / "restarts.ampjit").string();
  schedule.save(path);
  optim::SGD resumedOpt({param(f64).requires_grad_()}, {.lr = 1.0});
  optim::CosineAnnealingWarmRestarts resumed(resumedOpt, 3, 2, 0.1);
  resumed.load(path);
  EXPECT_EQ(resumed.last_epoch(), 12);
  EXPECT_EQ(resumed.get_last_lr(), schedule.get_last_lr());
  optim::CosineAnnealingWarmRestarts other(resumedOpt, 3, 3, 0.1);
  message = errorOf([&] { other.load(path); });
  EXPECT_NE(message.find("setting 'T_mult' is 2 in the file but 3 here"), std::string::npos) << message;
}

TEST(OptimTest, OneCycleLRRisesThenAnnealsAsPyTorchsOneCycleLR) {
  Tensor p = param(f64).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.3});
  // OneCycleLR(opt, max_lr=1.0, total_steps=10, cycle_momentum=False): the
  // rise ends at step 0.3 * 10 - 1 = 2, the annealing at step 9, from
  // 1 / 25 = 0.04 up to 1 and down to 0.04 / 1e4.
  optim::OneCycleLR schedule(opt, 10, {.max_lr = 1.0});
  const double initial = 0.04, last = 4e-6, pi = std::numbers::pi;
  for (int64_t e = 0; e <= 10; ++e) {
    if (e > 0)
      schedule.step();
    double expected = e == 0 ? initial
                      : e == 1 ? 1.0 - 0.48 * (std::cos(pi / 2) + 1.0)
                      : e == 2 ? 1.0
                      : e <= 9 ? last + (1.0 - last) / 2.0 * (std::cos(pi * double(e - 2) / 7.0) + 1.0)
                               : last;
    EXPECT_NEAR(schedule.get_last_lr(), expected, 1e-15) << "step " << e;
    EXPECT_EQ(opt.lr().item(), double(float(schedule.get_last_lr()))) << "step " << e;
  }
  EXPECT_NEAR(schedule.lr_at(9, 0.3), last, 1e-20);
  EXPECT_NEAR(schedule.lr_at(1, 0.3), 0.52, 1e-15); // 0.04 + (1 - 0.04) / 2: the optimizer's own lr plays no part
  // Past the end PyTorch raises; here the schedule and the lr stay at step 10.
  double atTheEnd = schedule.get_last_lr();
  std::string message = errorOf([&] { schedule.step(); });
  EXPECT_NE(message.find("OneCycleLR: stepped 11 times, past its total_steps of 10"), std::string::npos) << message;
  EXPECT_EQ(schedule.last_epoch(), 10);
  EXPECT_EQ(schedule.get_last_lr(), atTheEnd);
  EXPECT_EQ(opt.lr().item(), double(float(atTheEnd)));
}

TEST(OptimTest, OneCycleLRsThreePhasesPeakAtEachGroupsLrWhenMaxLrIsUnset) {
  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::SGD opt({{.params = {a}}, {.params = {b}, .lr = 0.5}}, {.lr = 1.0});
  // OneCycleLR(opt, max_lr=[1.0, 0.5], total_steps=10, three_phase=True,
  // anneal_strategy="linear"): phases end at steps 2, 4 and 9.
  optim::OneCycleLR schedule(opt, 10, {.anneal_strategy = optim::OneCycleLROptions::Anneal::linear, .three_phase = true});
  for (int64_t e = 0; e <= 9; ++e, schedule.step()) {
    for (size_t group = 0; group < 2; ++group) {
      double peak = group == 0 ? 1.0 : 0.5, initial = peak / 25.0, last = initial / 1e4;
      double expected = e <= 2   ? (peak - initial) * (double(e) / 2.0) + initial
                        : e <= 4 ? (initial - peak) * (double(e - 2) / 2.0) + peak
                                 : (last - initial) * (double(e - 4) / 5.0) + initial;
      EXPECT_NEAR(schedule.get_last_lr(group), expected, 1e-15 * peak) << "step " << e << " group " << group;
    }
  }
  // Step 9 ends the cycle at each group's last lr, and step 10 stays there
  // (PyTorch's line would run on to -0.008). The bound is a few ulps of the
  // initial lr 0.04, which (last - initial) * 1 + initial cancels.
  EXPECT_NEAR(schedule.get_last_lr(0), 4e-6, 1e-16);
  EXPECT_NEAR(schedule.get_last_lr(1), 2e-6, 1e-16);
  EXPECT_EQ(schedule.lr_at(9, 1.0), schedule.get_last_lr(0));
}

TEST(OptimTest, OneCycleLRRefusesBadSettingsAndACycleWithAnEmptyPhase) {
  Tensor p = param(f64).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  auto refusal = [&](int64_t total, optim::OneCycleLROptions options) {
    return errorOf([&] { optim::OneCycleLR(opt, total, options); });
  };
  EXPECT_NE(refusal(0, {}).find("total_steps must be positive, got 0"), std::string::npos);
  EXPECT_NE(refusal(10, {.pct_start = 1.5}).find("pct_start must be in [0, 1]"), std::string::npos);
  EXPECT_NE(refusal(10, {.max_lr = -1.0}).find("max_lr must be finite and positive"), std::string::npos);
  EXPECT_NE(refusal(10, {.div_factor = 0.0}).find("div_factor must be finite and positive"), std::string::npos);
  EXPECT_NE(refusal(10, {.final_div_factor = std::numeric_limits<double>::infinity()}).find("final_div_factor"),
            std::string::npos);
  // 0.2 * 5 - 1 = 0: the rise would end where it starts (PyTorch divides by zero there).
  std::string message = refusal(5, {.pct_start = 0.2});
  EXPECT_NE(message.find("phase 1 of the cycle has no steps"), std::string::npos) << message;
  message = refusal(10, {.pct_start = 1.0});
  EXPECT_NE(message.find("phase 2 of the cycle has no steps"), std::string::npos) << message;
  EXPECT_EQ(opt.lr().item(), double(float(0.1))); // a refused schedule wrote nothing
}

TEST(OptimTest, AOneCycleLRResumesFromItsFileAndRefusesAnEpochPastItsEnd) {
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = (scratch.path / "schedule.ampjit").string();
  Tensor p = param(f64).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::OneCycleLR schedule(opt, 10);
  for (int e = 0; e < 4; ++e)
    schedule.step();
  schedule.save(path);
  optim::SGD resumedOpt({param(f64).requires_grad_()}, {.lr = 1.0});
  optim::OneCycleLR resumed(resumedOpt, 10);
  resumed.load(path);
  EXPECT_EQ(resumed.last_epoch(), 4);
  EXPECT_EQ(resumed.get_last_lr(), schedule.get_last_lr());
  optim::OneCycleLR longer(resumedOpt, 20);
  std::string message = errorOf([&] { longer.load(path); });
  EXPECT_NE(message.find("setting 'total_steps' is 10 in the file but 20 here"), std::string::npos) << message;

  // A whole file whose epoch the cycle cannot take: last_epoch rewritten,
  // the checksum sealed again. The load refuses it and changes nothing.
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  auto sealedWithEpoch = [&](int64_t epoch) {
    std::vector<uint8_t> edited(bytes.begin(), bytes.end() - 8);
    const std::string name = "last_epoch";
    auto at = std::search(edited.begin(), edited.end(), name.begin(), name.end());
    int64_t four = 4;
    const auto* fourBytes = reinterpret_cast<const uint8_t*>(&four);
    auto value = std::search(at, edited.end(), fourBytes, fourBytes + 8);
    EXPECT_NE(value, edited.end());
    std::memcpy(&*value, &epoch, 8);
    uint64_t checksum = ampjit::runtime::fnv1a64(edited);
    const auto* checksumBytes = reinterpret_cast<const uint8_t*>(&checksum);
    edited.insert(edited.end(), checksumBytes, checksumBytes + 8);
    std::string editedPath = (scratch.path / ("epoch" + std::to_string(epoch) + ".ampjit")).string();
    std::ofstream(editedPath, std::ios::binary).write(reinterpret_cast<const char*>(edited.data()),
                                                     std::streamsize(edited.size()));
    return editedPath;
  };
  optim::OneCycleLR fresh(resumedOpt, 10);
  double lrBefore = resumedOpt.lr().item();
  message = errorOf([&] { fresh.load(sealedWithEpoch(11)); });
  EXPECT_NE(message.find("last_epoch 11: OneCycleLR: stepped 11 times, past its total_steps of 10"),
            std::string::npos) << message;
  message = errorOf([&] { fresh.load(sealedWithEpoch(-3)); });
  EXPECT_NE(message.find("last_epoch is -3, not a count of steps"), std::string::npos) << message;
  message = errorOf([&] { fresh.load(sealedWithEpoch(std::numeric_limits<int64_t>::max())); });
  EXPECT_NE(message.find("last_epoch is 9.22337e+18, not a count of steps"), std::string::npos) << message;
  EXPECT_EQ(fresh.last_epoch(), 0);
  EXPECT_EQ(resumedOpt.lr().item(), lrBefore);
  fresh.load(sealedWithEpoch(10)); // the cycle's last step is one it can take
  EXPECT_EQ(fresh.last_epoch(), 10);
}

TEST(OptimTest, ReduceLROnPlateauFollowsPyTorch) {
  Tensor p = param(f64).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  // ReduceLROnPlateau(opt, factor=0.5, patience=2, threshold=0.1, cooldown=1, min_lr=0.1)
  optim::ReduceLROnPlateau plateau(opt, {.factor = 0.5, .patience = 2, .threshold = 0.1, .cooldown = 1, .min_lr = {0.1}});
  std::vector<double> metrics = {1.0, 0.95, 0.92, 0.91, 0.5};
  metrics.resize(20, 0.6);
  // What PyTorch's scheduler gives after each step (worked through in the
  // order it applies best, the bad-epoch count, the cooldown and min_lr).
  std::vector<double> expected = {1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25,
                                  0.25, 0.125, 0.125, 0.125, 0.125, 0.1, 0.1, 0.1, 0.1, 0.1};
  std::vector<double> lrs, tensorLrs;
  for (double metric : metrics) {
    plateau.step(metric);
    lrs.push_back(plateau.get_last_lr());
    tensorLrs.push_back(opt.lr().item());
  }
  EXPECT_EQ(lrs, expected);
  for (size_t e = 0; e < expected.size(); ++e)
    EXPECT_EQ(tensorLrs[e], double(float(expected[e]))) << "the lr tensor after step " << e + 1;
  EXPECT_EQ(plateau.best(), 0.5);
  EXPECT_EQ(plateau.last_epoch(), 20);

  // max mode with an absolute threshold: equal is not better; NaN never is.
  optim::SGD other({param(f64).requires_grad_()}, {.lr = 1.0});
  optim::ReduceLROnPlateau accuracy(other, {.mode = optim::ReduceLROnPlateauOptions::Mode::max, .patience = 0,
                                            .threshold = 0.05,
                                            .threshold_mode = optim::ReduceLROnPlateauOptions::ThresholdMode::abs});
  accuracy.step(0.5);
  EXPECT_EQ(accuracy.get_last_lr(), 1.0);
  accuracy.step(0.55);
  EXPECT_DOUBLE_EQ(accuracy.get_last_lr(), 0.1);
  accuracy.step(0.7);
  accuracy.step(std::nan(""));
  EXPECT_DOUBLE_EQ(accuracy.get_last_lr(), 0.01);
  EXPECT_EQ(accuracy.best(), 0.7);

  // A reduction starts from the lr the optimizer holds, when something else set it.
  optim::SGD warmedUp({param(f64).requires_grad_()}, {.lr = 1.0});
  optim::ReduceLROnPlateau afterWarmup(warmedUp, {.patience = 0});
  warmedUp.set_lr(0.5);
  afterWarmup.step(1.0);
  afterWarmup.step(1.0);
  EXPECT_DOUBLE_EQ(afterWarmup.get_last_lr(), 0.05);

  EXPECT_NE(errorOf([&] { optim::ReduceLROnPlateau(opt, {.factor = 1.0}); }).find("factor must be in [0, 1)"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { optim::ReduceLROnPlateau(opt, {.min_lr = {0.1, 0.2}}); })
                .find("min_lr has 2 values for 1 parameter groups"),
            std::string::npos);
}

TEST(OptimTest, ReduceLROnPlateauResumesFromItsFile) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  std::string path = (dir / "plateau.ampjit").string();
  auto metricAt = [](int e) { return e < 3 ? 1.0 - 0.2 * e : 0.7; };
  Tensor a = param(f64).requires_grad_(), b = param(f64).requires_grad_();
  optim::SGD unbrokenOpt({a}, {.lr = 1.0}), resumedOpt({b}, {.lr = 1.0});
  optim::ReduceLROnPlateauOptions options{.patience = 1, .cooldown = 2};
  optim::ReduceLROnPlateau unbroken(unbrokenOpt, options);
  {
    optim::ReduceLROnPlateau first(resumedOpt, options);
    for (int e = 0; e < 5; ++e) {
      unbroken.step(metricAt(e));
      first.step(metricAt(e));
    }
    Checkpoint checkpoint;
    checkpoint.add("optimizer", resumedOpt).add("plateau", first);
    checkpoint.save(path);
  }
  optim::SGD freshOpt({param(f64).requires_grad_()}, {.lr = 1.0});
  optim::ReduceLROnPlateau resumed(freshOpt, options);
  Checkpoint checkpoint;
  checkpoint.add("optimizer", freshOpt).add("plateau", resumed);
  checkpoint.load(path);
  EXPECT_EQ(resumed.last_epoch(), 5);
  EXPECT_EQ(resumed.best(), unbroken.best());
  for (int e = 5; e < 12; ++e) {
    unbroken.step(metricAt(e));
    resumed.step(metricAt(e));
    EXPECT_EQ(resumed.get_last_lr(), unbroken.get_last_lr()) << "epoch " << e;
    EXPECT_EQ(freshOpt.lr().item(), unbrokenOpt.lr().item()) << "epoch " << e;
  }
  EXPECT_LT(unbroken.get_last_lr(), 0.05) << "the run should have reduced the lr more than once";
  optim::ReduceLROnPlateau impatient(freshOpt, {.patience = 3, .cooldown = 2});
  std::string message = errorOf([&] {
    Checkpoint other;
    other.add("plateau", impatient);
    other.load(path);
  });
  EXPECT_NE(message.find("patience"), std::string::npos) << message;
}

TEST(OptimTest, ExponentialMovingAverageFollowsItsFormulaAndSwapsForEvaluation) {
  Tensor w = tensor({1.0, -2.0, 0.5}, f32).requires_grad_(), b = tensor({4.0}, f64).requires_grad_();
  optim::ExponentialMovingAverage ema({w, b}, 0.75);
  std::vector<double> shadowW = w.to_vector(), shadowB = b.to_vector();
  for (double step : {1.0, 2.0, 3.0}) {
    {
      NoGradGuard noGrad;
      w.copy_(w + tensor({step, step, step}, f32));
      b.copy_(b * 2.0);
    }
    ema.update();
    // In each tensor's own precision: f32 for w (0.75 and 0.25 are exact), f64 for b.
    for (size_t i = 0; i < 3; ++i)
      shadowW[i] = double(float(float(shadowW[i] * 0.75f) + float(float(w.to_vector()[i]) * 0.25f)));
    shadowB[0] = shadowB[0] * 0.75 + b.to_vector()[0] * 0.25;
    EXPECT_EQ(ema.shadow_params()[0].to_vector(), shadowW) << "after step " << step;
    EXPECT_EQ(ema.shadow_params()[1].to_vector(), shadowB) << "after step " << step;
  }
  std::vector<double> trained = w.to_vector();
  ema.store();
  ema.copy_to();
  EXPECT_EQ(w.to_vector(), shadowW);
  ema.restore();
  EXPECT_EQ(w.to_vector(), trained);
  EXPECT_NE(errorOf([&] { ema.restore(); }).find("nothing stored"), std::string::npos);
  EXPECT_TRUE(errorOf([&] { optim::ExponentialMovingAverage({w}, 1.5); }).ends_with("decay must be in [0, 1], got 1.5"));
  EXPECT_NE(errorOf([&] { optim::ExponentialMovingAverage({tensor(std::vector<int64_t>{1}, {1})}, 0.9); })
                .find("only floating-point tensors are averaged"),
            std::string::npos);

  // Saved and loaded with its decay; another decay does not load.
  ::ampjit::testing::TemporaryDirectory scratch;
  const fs::path& dir = scratch.path;
  std::string path = (dir / "ema.ampjit").string();
  ema.save(path);
  Tensor w2 = tensor({0.0, 0.0, 0.0}, f32).requires_grad_(), b2 = tensor({0.0}, f64).requires_grad_();
  optim::ExponentialMovingAverage resumed({w2, b2}, 0.75), otherDecay({w2, b2}, 0.5);
  resumed.load(path);
  EXPECT_EQ(resumed.shadow_params()[0].to_vector(), shadowW);
  EXPECT_EQ(resumed.shadow_params()[1].to_vector(), shadowB);
  EXPECT_NE(errorOf([&] { otherDecay.load(path); }).find("decay"), std::string::npos);
}

TEST(OptimTest, StochasticWeightAverageIsTheEqualAverageOfTheUpdates) {
  // Parameters 10, 20, 60 and 30 at the updates: the averages 10, 15, 30,
  // 30 (exact in f32); the construction-time copy (1) is not in them, as
  // PyTorch's first update copies.
  Tensor w = tensor({1.0, -1.0}, f32).requires_grad_(), b = tensor({1.0}, f64).requires_grad_();
  optim::StochasticWeightAverage swa({w, b});
  EXPECT_EQ(swa.n_averaged(), 0);
  const std::vector<double> values = {10.0, 20.0, 60.0, 30.0}, averages = {10.0, 15.0, 30.0, 30.0};
  for (size_t k = 0; k < values.size(); ++k) {
    {
      NoGradGuard noGrad;
      w.copy_(tensor({values[k], -values[k]}, f32));
      b.copy_(tensor({values[k] / 4}, f64));
    }
    swa.update();
    EXPECT_EQ(swa.n_averaged(), int64_t(k + 1));
    EXPECT_EQ(swa.shadow_params()[0].to_vector(), (std::vector<double>{averages[k], -averages[k]})) << "update " << k;
    EXPECT_EQ(swa.shadow_params()[1].to_vector(), (std::vector<double>{averages[k] / 4})) << "update " << k;
  }
  // A first update copies bit for bit, where shadow + (p - shadow) / 1
  // rounds: 5 + (0.1 - 5) is 0.0999999 in f32.
  Tensor odd = tensor({5.0}, f32).requires_grad_();
  optim::StochasticWeightAverage copying({odd});
  {
    NoGradGuard noGrad;
    odd.copy_(tensor({0.1}, f32));
  }
  copying.update();
  EXPECT_EQ(copying.shadow_params()[0].to_vector(), odd.to_vector());

  std::vector<double> trained = w.to_vector();
  swa.store();
  swa.copy_to();
  EXPECT_EQ(w.to_vector(), (std::vector<double>{30.0, -30.0}));
  swa.restore();
  EXPECT_EQ(w.to_vector(), trained);
  EXPECT_NE(errorOf([&] { swa.restore(); }).find("StochasticWeightAverage::restore(): nothing stored"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { optim::StochasticWeightAverage({tensor(std::vector<int64_t>{1}, {1})}); })
                .find("StochasticWeightAverage: parameter 0 is i64; only floating-point tensors are averaged"),
            std::string::npos);

  // Saved with its count: a resumed average goes on as the unbroken one.
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = (scratch.path / "swa.ampjit").string();
  swa.save(path);
  Tensor w2 = tensor({0.0, 0.0}, f32).requires_grad_(), b2 = tensor({0.0}, f64).requires_grad_();
  optim::StochasticWeightAverage resumed({w2, b2});
  resumed.load(path);
  EXPECT_EQ(resumed.n_averaged(), 4);
  EXPECT_EQ(resumed.shadow_params()[0].to_vector(), swa.shadow_params()[0].to_vector());
  {
    NoGradGuard noGrad;
    w2.copy_(tensor({80.0, -80.0}, f32));
  }
  resumed.update();
  EXPECT_EQ(resumed.shadow_params()[0].to_vector(), (std::vector<double>{40.0, -40.0})) << "(4 * 30 + 80) / 5";
  // An EMA's file is not an SWA's, nor the other way round.
  optim::ExponentialMovingAverage ema({w2, b2}, 0.5);
  EXPECT_NE(errorOf([&] { ema.load(path); }).find("StochasticWeightAverage"), std::string::npos);

  // In a jit::Checkpoint beside the model's parameters.
  std::string checkpointPath = (scratch.path / "run.ampjit").string();
  Checkpoint checkpoint;
  checkpoint.add("swa", swa);
  checkpoint.save(checkpointPath);
  optim::StochasticWeightAverage fromCheckpoint({w2, b2});
  Checkpoint reader;
  reader.add("swa", fromCheckpoint);
  reader.load(checkpointPath);
  EXPECT_EQ(fromCheckpoint.n_averaged(), 4);
  EXPECT_EQ(fromCheckpoint.shadow_params()[1].to_vector(), swa.shadow_params()[1].to_vector());
}

} // namespace
} // namespace jit
