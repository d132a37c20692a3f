// Training holds the same host memory from one step to the next: whatever a
// step allocates (activations, gradients, autograd's graph, a compiled step's
// outputs) is given back by the step after. Counted exactly by the runtime's
// host tensor count (ampjit/runtime/HostMemory.h).

#include "ClassifierNet.h"
#include "FrontendTestUtil.h"

#include "jit/trace.h"

#include "ampjit/runtime/HostMemory.h"

#include <vector>

namespace jit::testing {
namespace {

using ampjit::runtime::hostBytesHeld;

constexpr int64_t kIn = 32, kHidden = 48, kClasses = 10, kBatch = 16;

/// Host bytes held after each of `steps` calls of `step`, the loss dropped each time.
template <typename Step>
std::vector<std::size_t> heldAfterEachStep(Step&& step, int steps) {
  std::vector<std::size_t> held;
  for (int i = 0; i < steps; ++i) {
    step();
    held.push_back(hostBytesHeld());
  }
  return held;
}

TEST(HostMemoryLeak, EagerStepsHoldTheSameAfterTheFirst) {
  Classifier net(kIn, kHidden, kClasses, 3);
  auto [x, y] = batch(kBatch, kIn, kClasses, 5);
  std::vector<std::size_t> held = heldAfterEachStep([&] { net.step(x, y).item(); }, 5);
  for (std::size_t i = 2; i < held.size(); ++i)
    EXPECT_EQ(held[i], held[1]) << "step " << i;
}

TEST(HostMemoryLeak, TracedStepsHoldTheSameAfterTheFirst) {
  // Each way a step's state can be carried from call to call: plain, master
  // weights, parameter casts kept, the update deferred to the next call, and
  // the gradients handed back.
  std::vector<std::pair<const char*, TraceOptions>> variants = {
      {"O0", {}},
      {"O1 f16", {.amp = {.level = amp::O1, .dtype = f16}}},
      {"O2 bf16", {.amp = {.level = amp::O2, .dtype = bf16}}},
      {"O1 f16, casts kept", {.amp = {.level = amp::O1, .dtype = f16}, .keep_parameter_casts = true}},
      {"O1 f16, deferred", {.amp = {.level = amp::O1, .dtype = f16}, .defer_updates = DeferUpdates::on}},
      {"O1 f16, gradients kept", {.amp = {.level = amp::O1, .dtype = f16}, .keep_grads = true}},
  };
  for (const auto& [name, options] : variants) {
    Classifier net(kIn, kHidden, kClasses, 3);
    auto [x, y] = batch(kBatch, kIn, kClasses, 5);
    auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); }, options);
    std::vector<std::size_t> held = heldAfterEachStep([&] { step(x, y).item(); }, 5);
    for (std::size_t i = 2; i < held.size(); ++i)
      EXPECT_EQ(held[i], held[1]) << name << ", step " << i;
    EXPECT_EQ(step.stats().traces, 1u) << name;
  }
}

TEST(HostMemoryLeak, EverythingATrainingRunHeldIsGivenBackAtItsEnd) {
  std::size_t before = hostBytesHeld();
  {
    Classifier net(kIn, kHidden, kClasses, 3);
    auto [x, y] = batch(kBatch, kIn, kClasses, 5);
    auto step = trace([&](const Tensor& a, const Tensor& b) { return net.step(a, b); },
                      {.amp = {.level = amp::O1, .dtype = f16}});
    for (int i = 0; i < 3; ++i)
      step(x, y).item();
    net.step(x, y).item();
  }
  EXPECT_EQ(hostBytesHeld(), before);
}

} // namespace
} // namespace jit::testing
