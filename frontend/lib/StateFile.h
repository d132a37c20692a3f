#ifndef JIT_LIB_STATEFILE_H
#define JIT_LIB_STATEFILE_H

// ampjit's state files: what Module, Optimizer, GradScaler and LRScheduler
// save and load, alone or together as a jit::Checkpoint. One format, one
// reader, one set of checks (StateFile.cpp describes the layout).
//
// A load is all or nothing: the file is parsed and checked completely (magic,
// version, truncation, checksum, then every part against the object it loads
// into), and only then is any tensor written. Tensors are written with copy_,
// so a traced step that holds them sees the new values (a pending deferred
// update completes first; O2's low-precision copies are re-derived).

#include "jit/Tensor.h"
#include "jit/amp.h"
#include "jit/nn.h"
#include "jit/optim.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace jit::detail {

/// What one object saves, and how a load checks and restores it.
struct SavedState {
  /// The class that saved it ("Module", "SGD", "GradScaler", "StepLR"): a
  /// file of another class does not load.
  std::string kind;
  /// How errors name the object ("module", "optimizer", "scaler", "scheduler").
  std::string noun;
  /// State a load writes back; each entry must match by name, dtype and shape.
  std::vector<NamedTensor> tensors;
  /// The object's constructor settings (momentum, growth_interval, ...). A
  /// traced step bakes them in, so a load does not change them: it requires
  /// the file's to be the same.
  std::vector<std::pair<std::string, double>> settings;
  /// Settings added after files were first written, with the value a file
  /// without them was saved under.
  std::vector<std::pair<std::string, double>> settingsOlderFilesLack{};
  /// Runs before anything is written, with this part's values in the order
  /// of `tensors`: throws (its message after `at`) for values the object
  /// cannot take, though the file is whole (a schedule's epoch past its end).
  std::function<void(const std::vector<Tensor>& loaded, const std::string& at)> checkLoaded{};
  /// Runs after every tensor of every part is written: host-side state
  /// derived from the loaded tensors.
  std::function<void()> restore;
};

/// A named part of a file; a single object's file has one part named "".
struct StatePart {
  std::string name;
  SavedState state;
};

/// Each class's state, defined beside the class (the tensors are the
/// object's own handles: a load writes into them).
SavedState savedStateOf(const nn::Module& module);
SavedState savedStateOf(optim::Optimizer& optimizer);
SavedState savedStateOf(amp::GradScaler& scaler);
SavedState savedStateOf(optim::LRScheduler& scheduler);
SavedState savedStateOf(Generator& generator); // declared with Generator (jit/Tensor.h)

/// Writes `parts` to `path` through a temporary file renamed into place, so a
/// failed save never leaves a half-written file where a good one was. `who`
/// starts every error message ("nn::save").
void writeStateFile(const std::string& path, const std::vector<StatePart>& parts, const std::string& who);

/// Loads `parts` from `path`. Parts are matched by name; a part the file has
/// but `parts` does not name is left unread (a checkpoint's model loads
/// without its optimizer). Errors are jit::Error naming the file, the part and
/// the entry; on any error nothing has been written.
void readStateFile(const std::string& path, const std::vector<StatePart>& parts, const std::string& who);

/// A single object's file (one part named ""): `object.save(path)`.
/// savedStateOf takes the object non-const because the same description also
/// loads into it; a save only reads it.
template <typename Object> void saveAlone(const std::string& path, const Object& object, const std::string& who) {
  writeStateFile(path, {{"", savedStateOf(const_cast<Object&>(object))}}, who);
}
/// `object.load(path)` from a single object's file.
template <typename Object> void loadAlone(const std::string& path, Object& object, const std::string& who) {
  readStateFile(path, {{"", savedStateOf(object)}}, who);
}

/// Writes each (target, value) with copy_, outside autograd (parameters
/// require grad). Called once every check has passed.
void writeLoaded(const std::vector<std::pair<Tensor, Tensor>>& updates);

} // namespace jit::detail

#endif // JIT_LIB_STATEFILE_H
