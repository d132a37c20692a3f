#ifndef AMPJIT_TESTS_UNIT_FRONTEND_CLASSIFIERNET_H
#define AMPJIT_TESTS_UNIT_FRONTEND_CLASSIFIERNET_H

// The MindSpore tutorial's classifier with SGD and a GradScaler: the train
// step the trace tests (CPU) and the compiled-step GPU tests share.

#include "jit/amp.h"
#include "jit/jit.h"
#include "jit/optim.h"

#include <utility>
#include <vector>

namespace jit::testing {

/// One mixed-precision training step as a user writes it: zero the
/// gradients, `lossOf(model(x), y)`, a scaled backward, the scaler's step
/// and update.
template <typename LossOf, typename Model, typename Optimizer>
Tensor scaledTrainStepWith(LossOf lossOf, Model& model, Optimizer& opt, amp::GradScaler& scaler, const Tensor& x,
                           const Tensor& y) {
  opt.zero_grad();
  Tensor loss = lossOf(model(x), y);
  scaler.scale(loss).backward();
  scaler.step(opt);
  scaler.update();
  return loss;
}

/// The same step with a cross-entropy loss.
template <typename Model, typename Optimizer>
Tensor scaledTrainStep(Model& model, Optimizer& opt, amp::GradScaler& scaler, const Tensor& x, const Tensor& y) {
  return scaledTrainStepWith([](const Tensor& out, const Tensor& labels) { return cross_entropy(out, labels); }, model,
                             opt, scaler, x, y);
}

/// The same step without a scaler: zero the gradients, the loss, backward,
/// the optimizer's step.
template <typename Model, typename Optimizer>
Tensor plainTrainStep(Model& model, Optimizer& opt, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = cross_entropy(model(x), y);
  loss.backward();
  opt.step();
  return loss;
}

/// The MindSpore tutorial's classifier at a test-sized width.
struct Classifier {
  explicit Classifier(int64_t in = 784, int64_t hidden = 512, int64_t classes = 10, uint64_t seed = 1,
                      amp::GradScalerOptions scalerOptions = {})
      : generator(seed),
        model(nn::Linear(in, hidden, true, {.generator = &generator}), nn::ReLU(),
              nn::Linear(hidden, hidden, true, {.generator = &generator}), nn::ReLU(),
              nn::Linear(hidden, classes, true, {.generator = &generator})),
        opt(model.parameters(), {.lr = 1e-2, .momentum = 0.9}),
        scaler(scalerOptions) {}

  Tensor step(const Tensor& x, const Tensor& y) { return scaledTrainStep(model, opt, scaler, x, y); }

  /// The step as PyTorch users write it: autocast around the forward only,
  /// the scaler and the update outside it.
  Tensor autocastStep(const Tensor& x, const Tensor& y, amp::AutocastOptions autocast = {}) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::autocast scope(std::move(autocast));
      loss = cross_entropy(model(x), y);
    }
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

/// A classifier with dropout between its layers and plain SGD: the traced
/// step must advance the dropout generator's [seed, offset] every call.
struct DropoutClassifier {
  DropoutClassifier(int64_t in, int64_t hidden, int64_t classes, uint64_t dropoutSeed)
      : init(7), dropoutGenerator(dropoutSeed),
        model(nn::Linear(in, hidden, true, {.generator = &init}), nn::ReLU(), nn::Dropout(0.5, &dropoutGenerator),
              nn::Linear(hidden, classes, true, {.generator = &init})),
        opt(model.parameters(), {.lr = 0.1}) {}

  Tensor step(const Tensor& x, const Tensor& y) { return plainTrainStep(model, opt, x, y); }

  Generator init, dropoutGenerator;
  nn::Sequential model;
  optim::SGD opt;
};

inline std::pair<Tensor, Tensor> batch(int64_t size, int64_t in, int64_t classes, uint64_t seed) {
  Generator generator(seed);
  Tensor x = rand({size, in}, f32, &generator);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < size; ++i)
    labels.push_back(int64_t(generator.next_uniform() * double(classes)));
  return {x, tensor(labels, {size})};
}

/// The classifier's step with PyTorch's scaler.update(new_scale): the scale
/// becomes `newScale` instead of growing or backing off.
inline Tensor stepSettingTheScale(Classifier& net, const Tensor& newScale, const Tensor& x, const Tensor& y) {
  net.opt.zero_grad();
  Tensor loss = cross_entropy(net.model(x), y);
  net.scaler.scale(loss).backward();
  net.scaler.step(net.opt);
  net.scaler.update(newScale);
  return loss;
}

/// Gradient accumulation as two functions: a micro-batch's scaled backward
/// into the gradients, and the scaler's step, update and zeroing.
inline Tensor accumulateGradients(Classifier& net, const Tensor& x, const Tensor& y) {
  Tensor loss = cross_entropy(net.model(x), y);
  net.scaler.scale(loss).backward();
  return loss;
}
inline void applyGradients(Classifier& net) {
  net.scaler.step(net.opt);
  net.scaler.update();
  net.opt.zero_grad(false);
}

/// Every parameter's and momentum buffer's values, the scaler's state and
/// its last step's overflow flag.
inline std::vector<std::vector<double>> stateOf(Classifier& net) {
  std::vector<std::vector<double>> state;
  for (size_t i = 0; i < net.model.parameters().size(); ++i) {
    state.push_back(net.model.parameters()[i].to_vector());
    state.push_back(net.opt.momentum_buffer(i).to_vector());
  }
  state.push_back({net.scaler.get_scale(), double(net.scaler.growth_tracker()), double(net.scaler.skipped_steps()),
                   double(net.scaler.found_inf())});
  return state;
}

} // namespace jit::testing

#endif // AMPJIT_TESTS_UNIT_FRONTEND_CLASSIFIERNET_H
