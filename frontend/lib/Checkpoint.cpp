// jit::Checkpoint: several objects' saved states as the named parts of one
// state file (StateFile.cpp); each part is built by the object's own
// savedStateOf when the checkpoint is saved or loaded.

#include "jit/checkpoint.h"

#include "StateFile.h"

#include "jit/amp.h"
#include "jit/nn.h"
#include "jit/optim.h"

#include <functional>

namespace jit {

struct Checkpoint::Part {
  std::string name;
  std::function<detail::SavedState()> state;
};

Checkpoint::Checkpoint() = default;
Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;

namespace {

/// A loop counter's part: the value travels through a tensor of its own.
detail::SavedState counterState(int64_t& counter) {
  Tensor value = scalar_tensor(double(counter), i64);
  return {.kind = "Counter",
          .noun = "counter",
          .tensors = {{"value", value}},
          .settings = {},
          .restore = [&counter, value] { counter = int64_t(value.item()); }};
}

/// Loose tensors' part: entries "0", "1", ... written in place on load.
detail::SavedState tensorsState(const std::vector<Tensor>& tensors) {
  detail::SavedState state{.kind = "Tensors", .noun = "tensor list", .tensors = {}, .settings = {}, .restore = {}};
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined())
      throw Error("Checkpoint: tensor " + std::to_string(i) + " of a tensor list is undefined");
    state.tensors.emplace_back(std::to_string(i), tensors[i]);
  }
  return state;
}

} // namespace

Checkpoint& Checkpoint::append(std::string name, std::function<detail::SavedState()> state) {
  if (name.empty())
    throw Error("Checkpoint::add: a part needs a non-empty name");
  for (const Part& part : parts_)
    if (part.name == name)
      throw Error("Checkpoint::add: part '" + name + "' is already added");
  parts_.push_back({std::move(name), std::move(state)});
  return *this;
}

Checkpoint& Checkpoint::add(std::string name, nn::Module& module) {
  return append(std::move(name), [&module] { return detail::savedStateOf(module); });
}
Checkpoint& Checkpoint::add(std::string name, optim::Optimizer& optimizer) {
  return append(std::move(name), [&optimizer] { return detail::savedStateOf(optimizer); });
}
Checkpoint& Checkpoint::add(std::string name, amp::GradScaler& scaler) {
  return append(std::move(name), [&scaler] { return detail::savedStateOf(scaler); });
}
Checkpoint& Checkpoint::add(std::string name, optim::LRScheduler& scheduler) {
  return append(std::move(name), [&scheduler] { return detail::savedStateOf(scheduler); });
}
Checkpoint& Checkpoint::add(std::string name, optim::ReduceLROnPlateau& scheduler) {
  return append(std::move(name), [&scheduler] { return detail::savedStateOf(scheduler); });
}
Checkpoint& Checkpoint::add(std::string name, optim::ParameterAverage& average) {
  return append(std::move(name), [&average] { return detail::savedStateOf(average); });
}
Checkpoint& Checkpoint::add(std::string name, Generator& generator) {
  return append(std::move(name), [&generator] { return detail::savedStateOf(generator); });
}
Checkpoint& Checkpoint::add(std::string name, int64_t& counter) {
  return append(std::move(name), [&counter] { return counterState(counter); });
}

Checkpoint& Checkpoint::add(std::string name, std::vector<Tensor>& tensors) {
  return append(std::move(name), [&tensors] { return tensorsState(tensors); });
}
Checkpoint& Checkpoint::add(std::string name, Tensor tensor) {
  if (!tensor.defined())
    throw Error("Checkpoint::add: part '" + name + "' is an undefined tensor");
  return append(std::move(name), [tensor] { return tensorsState({tensor}); });
}

std::vector<detail::StatePart> Checkpoint::states() const {
  std::vector<detail::StatePart> parts;
  for (const Part& part : parts_)
    parts.push_back({part.name, part.state()});
  return parts;
}

void Checkpoint::save(const std::string& path) const { detail::writeStateFile(path, states(), "Checkpoint::save"); }

void Checkpoint::load(const std::string& path) const {
  if (parts_.empty())
    throw Error("Checkpoint::load: nothing to load into; add() the objects first");
  detail::readStateFile(path, states(), "Checkpoint::load");
}

} // namespace jit
