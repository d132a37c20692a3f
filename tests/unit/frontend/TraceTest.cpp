// jit::trace: capture, guards, eager-vs-traced agreement and trace-time errors.

#include "FrontendTestUtil.h"

#include "jit/trace.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace jit::testing {
namespace {

/// The MindSpore tutorial's classifier at a test-sized width.
struct Classifier {
  explicit Classifier(int64_t in = 784, int64_t hidden = 512, int64_t classes = 10, uint64_t seed = 1)
      : generator(seed),
        model(nn::Linear(in, hidden, true, {.generator = &generator}), nn::ReLU(),
              nn::Linear(hidden, hidden, true, {.generator = &generator}), nn::ReLU(),
              nn::Linear(hidden, classes, true, {.generator = &generator})),
        opt(model.parameters(), {.lr = 1e-2, .momentum = 0.9}) {}

  Tensor step(const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss;
  }

  Generator generator;
  nn::Sequential model;
  optim::SGD opt;
  amp::GradScaler scaler;
};

std::pair<Tensor, Tensor> batch(int64_t size, int64_t in, int64_t classes, uint64_t seed) {
  Generator generator(seed);
  Tensor x = rand({size, in}, f32, &generator);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < size; ++i)
    labels.push_back(int64_t(generator.next_uniform() * double(classes)));
  return {x, tensor(labels, {size})};
}

TEST(Trace, ClassifierStepPrintsItsModule) {
  Classifier net;
  auto [x, y] = batch(64, 784, 10, 7);
  auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); });
  Tensor loss = step(x, y);
  std::cout << step.traced_module() << "\n" << loss << "\n";
}

} // namespace
} // namespace jit::testing
