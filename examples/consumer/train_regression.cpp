// A user's program, built against the installed ampjit package only
// (examples/consumer/CMakeLists.txt). It trains a small regression MLP with a
// jit::trace'd O1-f16 step (forward, MSE loss, backward, GradScaler, SGD) and
// checks what a user relies on across the library boundary: the compiled first
// step agrees with the same step run eagerly, training converges, later calls
// replay without tracing, and a mistake surfaces as a catchable jit::Error
// that names it. Exits non-zero, saying why, when any of that fails.

#include <jit/jit.h>

#include <cmath>
#include <cstdio>
#include <string>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  failures += ok ? 0 : 1;
}

} // namespace

int main() {
  constexpr int64_t kBatch = 64, kFeatures = 16, kHidden = 32;
  constexpr int kSteps = 300;
  jit::Generator generator(11);
  jit::nn::Sequential model(jit::nn::Linear(kFeatures, kHidden, true, {.generator = &generator}), jit::nn::Tanh(),
                            jit::nn::Linear(kHidden, 1, true, {.generator = &generator}));
  jit::optim::SGD optimizer(model.parameters(), {.lr = 0.05});
  jit::amp::GradScaler scaler;

  // A target the model can fit: a fixed linear function of the features.
  jit::Tensor truth = jit::randn({kFeatures, 1}, jit::f32, &generator);
  jit::Tensor x = jit::randn({kBatch, kFeatures}, jit::f32, &generator);
  jit::Tensor y = jit::matmul(x, truth);

  // The loss an eager fp32 forward gives before any update.
  double eagerLoss = jit::mse_loss(model(x), y).item();

  auto step = jit::trace(
      [&](const jit::Tensor& input, const jit::Tensor& target) {
        optimizer.zero_grad();
        jit::Tensor loss = jit::mse_loss(model(input), target);
        scaler.scale(loss).backward();
        scaler.step(optimizer);
        scaler.update();
        return loss;
      },
      {.amp = {.level = jit::amp::O1, .dtype = jit::f16}, .backend = jit::Backend::cpu});

  double firstLoss = step(x, y).item();
  // O1 runs the Linear layers in f16: the loss may differ from fp32 eager by
  // the activations' rounding, a few f16 ulps relative.
  expect(std::abs(firstLoss - eagerLoss) <= 1e-2 * std::abs(eagerLoss),
         "the compiled first step's loss " + std::to_string(firstLoss) + " is the eager loss " +
             std::to_string(eagerLoss) + " within f16 rounding");

  double lastLoss = firstLoss;
  for (int i = 1; i < kSteps; ++i)
    lastLoss = step(x, y).item();
  expect(lastLoss < firstLoss / 20, "training converges: loss " + std::to_string(firstLoss) + " -> " +
                                        std::to_string(lastLoss) + " in " + std::to_string(kSteps) + " steps");
  expect(step.stats().traces == 1 && step.stats().cache_hits == size_t(kSteps - 1),
         "one trace, then replays: " + std::to_string(step.stats().traces) + " traces, " +
             std::to_string(step.stats().cache_hits) + " replays");
  expect(scaler.get_scale() > 0, "the loss scale is " + std::to_string(scaler.get_scale()));

  // A batch with the wrong feature count retraces, and the trace stops at the
  // first Linear: the error comes out of the library as a jit::Error.
  try {
    step(jit::randn({kBatch, kFeatures + 1}, jit::f32, &generator), y);
    expect(false, "a batch of the wrong width is an error");
  } catch (const jit::Error& error) {
    std::string message = error.what();
    expect(message.find(std::to_string(kFeatures + 1)) != std::string::npos,
           "a batch of the wrong width is a jit::Error that names its size: " + message);
  }

  std::printf("%s\n", failures == 0 ? "consumer: all checks passed" : "consumer: checks failed");
  return failures == 0 ? 0 : 1;
}
