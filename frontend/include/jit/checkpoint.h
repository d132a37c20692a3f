#ifndef JIT_CHECKPOINT_H
#define JIT_CHECKPOINT_H

// jit::Checkpoint: a training run's whole state in one file, for resuming.
//
//   jit::Checkpoint checkpoint;
//   checkpoint.add("model", model).add("optimizer", opt).add("scaler", scaler)
//             .add("scheduler", schedule).add("rng", generator).add("epoch", epoch);
//   checkpoint.save("run.ampjit");      // after an epoch
//   ...
//   checkpoint.load("run.ampjit");      // in a new process, before training on
//
// Each part is what that object's own save() writes: a module's state_dict,
// an optimizer's lr, step counts and buffers, the scaler's scale and
// counters, a schedule's epoch, a generator's states, plus their settings. A load checks the whole
// file (checksum, then every added part: same class, same settings, every
// entry by name, dtype and shape) before anything changes, and then writes the
// state in place, so steps traced before the load continue from the file
// without retracing. Parts the file has but the checkpoint did not add are
// left unread (load only "model" to evaluate). The save is written to a
// temporary file and renamed into place: a failed save leaves the old file.

#include "jit/Tensor.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace jit {
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
class LRScheduler;
class ReduceLROnPlateau;
class ParameterAverage;
} // namespace optim
namespace amp {
class GradScaler;
}
namespace detail {
struct SavedState;
struct StatePart;
} // namespace detail

class Checkpoint {
public:
  Checkpoint();
  ~Checkpoint();
  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;

  /// Adds an object under `name` (unique, non-empty). The checkpoint keeps a
  /// reference: the object must outlive it.
  Checkpoint& add(std::string name, nn::Module& module);
  Checkpoint& add(std::string name, optim::Optimizer& optimizer);
  Checkpoint& add(std::string name, amp::GradScaler& scaler);
  Checkpoint& add(std::string name, optim::LRScheduler& scheduler);
  Checkpoint& add(std::string name, optim::ReduceLROnPlateau& scheduler);
  /// An ExponentialMovingAverage or a StochasticWeightAverage.
  Checkpoint& add(std::string name, optim::ParameterAverage& average);
  /// A random generator: dropout's [seed, offset] and the host engine that
  /// rand/randn draw from, so a resumed run draws what the unbroken one would.
  Checkpoint& add(std::string name, Generator& generator);
  /// A counter of the training loop (epoch, global step), restored by load().
  Checkpoint& add(std::string name, int64_t& counter);
  /// Tensors the loop keeps beside the model (an EMA of the weights, a
  /// teacher's outputs), saved as entries "0", "1", ... A load writes them in
  /// place, so a traced step that holds them sees the loaded values; the
  /// vector's length, each dtype and shape must match the file.
  Checkpoint& add(std::string name, std::vector<Tensor>& tensors);
  /// One such tensor, held by handle: the load writes into its storage.
  Checkpoint& add(std::string name, Tensor tensor);

  void save(const std::string& path) const;
  void load(const std::string& path) const;

private:
  struct Part;
  Checkpoint& append(std::string name, std::function<detail::SavedState()> state);
  /// Every part's state, built now (a schedule's epoch, a counter's value).
  std::vector<detail::StatePart> states() const;
  std::vector<Part> parts_;
};

} // namespace jit

#endif // JIT_CHECKPOINT_H
