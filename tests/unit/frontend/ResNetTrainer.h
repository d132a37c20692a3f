#ifndef AMPJIT_TESTS_UNIT_FRONTEND_RESNETTRAINER_H
#define AMPJIT_TESTS_UNIT_FRONTEND_RESNETTRAINER_H

// A ResNet-18 with SGD and a GradScaler, one training step per call: what the
// conv-net tests (CPU) and the compiled-step GPU tests train.

#include "ClassifierNet.h"

#include "jit/amp.h"
#include "jit/jit.h"
#include "jit/optim.h"

#include <memory>
#include <vector>

namespace jit::testing {

struct ResNetTrainer {
  explicit ResNetTrainer(nn::ResNetOptions options, amp::GradScalerOptions scalerOptions = {}, double lr = 0.05)
      : model(nn::resnet18(options)), opt(model->parameters(), {.lr = lr, .momentum = 0.9}), scaler(scalerOptions) {}

  Tensor step(const Tensor& x, const Tensor& y) { return scaledTrainStep(*model, opt, scaler, x, y); }

  std::vector<std::vector<double>> state() const {
    std::vector<std::vector<double>> values;
    for (const NamedTensor& entry : model->state_dict())
      values.push_back(entry.second.to_vector());
    return values;
  }

  std::shared_ptr<nn::ResNet> model;
  optim::SGD opt;
  amp::GradScaler scaler;
};

} // namespace jit::testing

#endif // AMPJIT_TESTS_UNIT_FRONTEND_RESNETTRAINER_H
