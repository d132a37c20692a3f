// Module state files (save/load, in the state file format of
// lib/StateFile.cpp) and NumPy .npy import.

#include "jit/nn.h"

#include "Dispatch.h"
#include "StateFile.h"
#include "trace/TraceSession.h"

#include "ampjit/runtime/Npy.h"
#include "ampjit/runtime/Shape.h"

namespace jit::nn {
namespace {

using ampjit::runtime::shapeToString;
using detail::writeLoaded;

std::string quoted(const std::string& path) { return "'" + path + "'"; }

/// The value of `entry` from the .npy file at `path`, checked against the
/// module's tensor and rounded once to its dtype.
Tensor npyValueFor(const std::string& entry, const Tensor& target, const std::string& path) {
  std::string who = "nn::load_npy: entry '" + entry + "'";
  ampjit::runtime::Expected<ampjit::runtime::Tensor> array = ampjit::runtime::readNpy(path);
  if (!array)
    throw Error(who + ": " + array.message());
  if (array->shape() != target.shape())
    throw Error("nn::load_npy: " + quoted(path) + " holds shape " + shapeToString(array->shape()) + " but entry '" +
                entry + "' has shape " + shapeToString(target.shape()) +
                " (PyTorch's layout: Linear weight is [out_features, in_features])");
  if (!is_floating_point(target.dtype()))
    throw Error(who + " is " + std::string(dtype_name(target.dtype())) +
                "; only floating-point entries load from .npy");
  if (!is_floating_point(array->dtype()))
    throw Error(who + ": " + quoted(path) + " holds " + std::string(dtype_name(array->dtype())) +
                " values; a floating-point entry loads from a float .npy");
  return detail::makeTensor(std::move(*array)).to(target.dtype());
}

Tensor stateEntry(const Module& module, const std::string& name, const char* who) {
  std::string known;
  for (const auto& [entryName, tensor] : module.state_dict()) {
    if (entryName == name)
      return tensor;
    if (!known.empty())
      known += ", ";
    known += entryName;
  }
  throw Error(std::string(who) + ": the module has no state entry '" + name + "' (it has: " + known + ")");
}

} // namespace

void Module::save(const std::string& path) const {
  detail::saveAlone(path, *this, "nn::save");
}

void Module::load(const std::string& path) {
  detail::loadAlone(path, *this, "nn::load");
}

void Module::load_npy(const std::string& name, const std::string& path) {
  detail::refuseInsideTrace("nn::load_npy", "load weights before tracing the step, not in it");
  Tensor target = stateEntry(*this, name, "nn::load_npy");
  std::vector<std::pair<Tensor, Tensor>> updates{{target, npyValueFor(name, target, path)}};
  writeLoaded(updates);
}

void Module::load_npy_dir(const std::string& dir) {
  detail::refuseInsideTrace("nn::load_npy_dir", "load weights before tracing the step, not in it");
  std::vector<std::pair<Tensor, Tensor>> updates;
  for (const auto& [name, target] : state_dict())
    updates.emplace_back(target, npyValueFor(name, target, dir + "/" + name + ".npy"));
  writeLoaded(updates);
}

} // namespace jit::nn

namespace jit::detail {

SavedState savedStateOf(const nn::Module& module) {
  return {.kind = "Module", .noun = "module", .tensors = module.state_dict(), .settings = {}, .restore = {}};
}

} // namespace jit::detail
