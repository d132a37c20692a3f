#ifndef AMPJIT_TESTS_UNIT_FRONTEND_TWONETWORKGAN_H
#define AMPJIT_TESTS_UNIT_FRONTEND_TWONETWORKGAN_H

// A small GAN (a generator and a discriminator, each with its own optimizer),
// shared by the frontend's traced-pattern tests and the device suite.

#include "jit/jit.h"

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace jit::testing {

struct Gan {
  Gan()
      : g(7), generator(nn::Linear(4, 8, true, {.generator = &g}), nn::ReLU(), nn::Linear(8, 6, true, {.generator = &g})),
        discriminator(nn::Linear(6, 8, true, {.generator = &g}), nn::ReLU(), nn::Linear(8, 2, true, {.generator = &g})),
        optG(generator.parameters(), {.lr = 1e-2}), optD(discriminator.parameters(), {.lr = 1e-2, .momentum = 0.5}) {}
  Tensor stepD(const Tensor& real, const Tensor& noise, const Tensor& realLabels, const Tensor& fakeLabels) {
    optD.zero_grad();
    Tensor fake = generator(noise).detach();
    Tensor loss = cross_entropy(discriminator(real), realLabels) + cross_entropy(discriminator(fake), fakeLabels);
    loss.backward();
    optD.step();
    return loss;
  }
  Tensor stepG(const Tensor& noise, const Tensor& realLabels) {
    optG.zero_grad();
    Tensor loss = cross_entropy(discriminator(generator(noise)), realLabels);
    loss.backward();
    optG.step();
    return loss;
  }
  std::vector<std::vector<double>> everything() {
    std::vector<std::vector<double>> out;
    for (const Tensor& p : generator.parameters())
      out.push_back(p.to_vector());
    for (const Tensor& p : discriminator.parameters())
      out.push_back(p.to_vector());
    return out;
  }
  Generator g;
  nn::Sequential generator, discriminator;
  optim::Adam optG;
  optim::SGD optD;
};

/// apex's one loss scaler per loss (amp.initialize(num_losses=2)), as a GAN
/// writes it with PyTorch: each network's loss, gradients, step and scale are
/// its own, in one traced step.
struct GanWithTwoScalers : Gan {
  Tensor step(const Tensor& real, const Tensor& noise, const Tensor& realLabels, const Tensor& fakeLabels,
              const Tensor& boostD, const Tensor& boostG) {
    optD.zero_grad();
    Tensor fake = generator(noise).detach();
    Tensor lossD = (cross_entropy(discriminator(real), realLabels) + cross_entropy(discriminator(fake), fakeLabels)) * boostD;
    scalerD.scale(lossD).backward();
    scalerD.step(optD);
    scalerD.update();
    optG.zero_grad();
    Tensor lossG = cross_entropy(discriminator(generator(noise)), realLabels) * boostG;
    scalerG.scale(lossG).backward();
    scalerG.step(optG);
    scalerG.update();
    return lossD + lossG;
  }
  amp::GradScaler scalerD{{.growth_interval = 3}}, scalerG{{.growth_interval = 2}};
};

/// PyTorch's recipe for several optimizers under one scaler
/// (torch.amp's "multiple models, losses and optimizers"): each network's
/// loss is scaled and stepped by the same scaler, each step skipped on its
/// own gradients' overflow, and one update() backs the scale off when
/// either overflowed.
struct GanWithOneScaler : Gan {
  Tensor step(const Tensor& real, const Tensor& noise, const Tensor& realLabels, const Tensor& fakeLabels,
              const Tensor& boostD, const Tensor& boostG) {
    optD.zero_grad();
    Tensor fake = generator(noise).detach();
    Tensor lossD = (cross_entropy(discriminator(real), realLabels) + cross_entropy(discriminator(fake), fakeLabels)) * boostD;
    scaler.scale(lossD).backward();
    scaler.step(optD);
    optG.zero_grad();
    Tensor lossG = cross_entropy(discriminator(generator(noise)), realLabels) * boostG;
    scaler.scale(lossG).backward();
    scaler.step(optG);
    scaler.update();
    return lossD + lossG;
  }
  amp::GradScaler scaler{{.growth_interval = 2}};
};

/// Per call, the factors GanWithTwoScalers::step multiplies the
/// discriminator's and the generator's losses by: 1e30 overflows f16, so that
/// network's scaler skips its step and backs off while the other goes on.
inline std::vector<std::pair<double, double>> ganLossFactors() {
  const double overflow = 1e30;
  return {{1, 1}, {overflow, 1}, {1, 1}, {1, overflow}, {1, 1}, {overflow, overflow}, {1, 1}};
}
/// The inputs of GanWithTwoScalers::step for call `call` of ganLossFactors():
/// a batch of 4 real samples and noise drawn from `seed + call`, the labels,
/// and that call's loss factors.
struct GanCall {
  Tensor real, noise, realLabels, fakeLabels, factorD, factorG;
  /// `step` (GanWithTwoScalers::step, or a trace of it) on these inputs.
  template <typename Step>
  Tensor operator()(Step& step) const {
    return step(real, noise, realLabels, fakeLabels, factorD, factorG);
  }
};
/// GanWithTwoScalers::step (or GanWithOneScaler's) as a function of its inputs, for jit::trace.
template <typename TwoLossGan>
inline auto ganStepOf(TwoLossGan& gan) {
  return [&gan](const Tensor& real, const Tensor& noise, const Tensor& realLabels, const Tensor& fakeLabels,
                const Tensor& factorD, const Tensor& factorG) {
    return gan.step(real, noise, realLabels, fakeLabels, factorD, factorG);
  };
}
inline GanCall ganCall(size_t call, uint64_t seed) {
  Generator data(seed + call);
  std::pair<double, double> factors = ganLossFactors().at(call);
  GanCall inputs;
  inputs.real = rand({4, 6}, f32, &data);
  inputs.noise = rand({4, 4}, f32, &data);
  inputs.realLabels = tensor(std::vector<int64_t>{1, 1, 1, 1}, {4});
  inputs.fakeLabels = tensor(std::vector<int64_t>{0, 0, 0, 0}, {4});
  inputs.factorD = scalar_tensor(factors.first, f32);
  inputs.factorG = scalar_tensor(factors.second, f32);
  return inputs;
}

/// Each scale after each call of ganLossFactors(), by PyTorch's rule
/// (growth intervals 3 and 2).
inline std::vector<double> ganDiscriminatorScales() { return {65536, 32768, 32768, 32768, 65536, 32768, 32768}; }
inline std::vector<double> ganGeneratorScales() { return {65536, 131072, 131072, 65536, 65536, 32768, 32768}; }
/// GanWithOneScaler's one scale after each call (growth interval 2): it
/// backs off whenever either network overflowed.
inline std::vector<double> ganSharedScales() { return {65536, 32768, 32768, 16384, 16384, 8192, 8192}; }

} // namespace jit::testing

#endif // AMPJIT_TESTS_UNIT_FRONTEND_TWONETWORKGAN_H
