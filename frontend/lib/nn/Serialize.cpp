// Module state files (save/load, in the state file format of
// lib/StateFile.cpp) and NumPy .npy import.

#include "jit/nn.h"

#include "StateFile.h"

#include "jit/Autograd.h"

#include "ampjit/runtime/LowPrecision.h"
#include "ampjit/runtime/Shape.h"

#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>

namespace jit::nn {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy reader copies little-endian data as is");

using ampjit::runtime::elementCount;
using detail::readUnaligned;
using detail::shapeString;
using detail::tensorFromBytes;
using detail::writeLoaded;

std::string quoted(const std::string& path) { return "'" + path + "'"; }

// --- .npy --------------------------------------------------------------------------

struct NpyArray {
  DType dtype;
  Shape shape;
  std::vector<uint8_t> file;
  size_t dataOffset;
};

/// The text after `'key':` in a .npy header dict, or nullopt.
std::optional<std::string> npyField(const std::string& header, const std::string& key) {
  size_t at = header.find("'" + key + "'");
  if (at == std::string::npos)
    return std::nullopt;
  size_t colon = header.find(':', at);
  if (colon == std::string::npos)
    return std::nullopt;
  size_t start = header.find_first_not_of(' ', colon + 1);
  if (start == std::string::npos)
    return std::nullopt;
  if (header[start] == '(') {
    size_t close = header.find(')', start);
    return close == std::string::npos ? std::nullopt : std::optional(header.substr(start, close - start + 1));
  }
  size_t stop = header.find_first_of(",}", start);
  return header.substr(start, stop == std::string::npos ? std::string::npos : stop - start);
}

NpyArray readNpy(const std::string& path, const std::string& entry) {
  std::string where = "nn::load_npy: " + quoted(path) + " (entry '" + entry + "')";
  NpyArray array;
  array.file = detail::readFileBytes(path, "nn::load_npy: entry '" + entry + "'");
  const std::vector<uint8_t>& f = array.file;
  static constexpr uint8_t kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (f.size() < 10 || std::memcmp(f.data(), kNpyMagic, 6) != 0)
    throw Error(where + " is not a NumPy .npy file (wrong magic)");
  uint8_t major = f[6];
  size_t headerLength, headerStart;
  if (major == 1) {
    headerLength = readUnaligned<uint16_t>(&f[8]);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (f.size() < 12)
      throw Error(where + " is truncated in its header");
    headerLength = readUnaligned<uint32_t>(&f[8]);
    headerStart = 12;
  } else {
    throw Error(where + " has .npy format version " + std::to_string(major) + "; versions 1 to 3 are read");
  }
  if (headerLength > f.size() - headerStart)
    throw Error(where + " is truncated in its header");
  std::string header(reinterpret_cast<const char*>(&f[headerStart]), headerLength);
  array.dataOffset = headerStart + headerLength;

  auto descr = npyField(header, "descr");
  auto fortran = npyField(header, "fortran_order");
  auto shape = npyField(header, "shape");
  if (!descr || !fortran || !shape)
    throw Error(where + " has a malformed header: " + header);
  if (*descr == "'<f4'")
    array.dtype = DType::F32;
  else if (*descr == "'<f8'")
    array.dtype = DType::F64;
  else if (*descr == "'<f2'")
    array.dtype = DType::F16;
  else
    throw Error(where + " has dtype " + *descr + "; only little-endian float16/float32/float64 ('<f2', '<f4', '<f8') are read");
  if (*fortran != "False")
    throw Error(where + " is in Fortran order; save a C-order array (np.ascontiguousarray)");
  // "(3, 4)", "(5,)" or "()".
  std::string dims = shape->substr(1, shape->size() - 2);
  size_t pos = 0;
  while (pos < dims.size()) {
    size_t comma = dims.find(',', pos);
    std::string item = dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t first = item.find_first_not_of(' ');
    if (first != std::string::npos) {
      try {
        array.shape.push_back(std::stoll(item.substr(first)));
      } catch (const std::exception&) {
        throw Error(where + " has a malformed shape " + *shape);
      }
    }
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  size_t expected = size_t(elementCount(array.shape)) * ampjit::runtime::dtypeSize(array.dtype);
  size_t available = f.size() - array.dataOffset;
  if (available < expected)
    throw Error(where + " is truncated: shape " + shapeString(array.shape) + " needs " + std::to_string(expected) +
                " data bytes but the file has " + std::to_string(available));
  if (available > expected)
    throw Error(where + " has " + std::to_string(available - expected) + " bytes after its data");
  return array;
}

/// Reads `path` for `entry` and checks it against the module's tensor.
Tensor npyValueFor(const std::string& entry, const Tensor& target, const std::string& path) {
  NpyArray array = readNpy(path, entry);
  if (array.shape != target.shape())
    throw Error("nn::load_npy: " + quoted(path) + " holds shape " + shapeString(array.shape) + " but entry '" +
                entry + "' has shape " + shapeString(target.shape()) +
                " (PyTorch's layout: Linear weight is [out_features, in_features])");
  if (!is_floating_point(target.dtype()))
    throw Error("nn::load_npy: entry '" + entry + "' is " + std::string(dtype_name(target.dtype())) +
                "; only floating-point entries load from .npy");
  return tensorFromBytes(array.file.data() + array.dataOffset, array.dtype, array.shape, target.dtype());
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
  detail::writeStateFile(path, {{"", detail::savedStateOf(*this)}}, "nn::save");
}

void Module::load(const std::string& path) {
  detail::readStateFile(path, {{"", detail::savedStateOf(*this)}}, "nn::load");
}

void Module::load_npy(const std::string& name, const std::string& path) {
  Tensor target = stateEntry(*this, name, "nn::load_npy");
  std::vector<std::pair<Tensor, Tensor>> updates{{target, npyValueFor(name, target, path)}};
  writeLoaded(updates);
}

void Module::load_npy_dir(const std::string& dir) {
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
