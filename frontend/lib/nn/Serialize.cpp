// Module state files: save/load in ampjit's own format, and NumPy .npy import.
//
// The state file (all integers little-endian):
//
//   magic          8 bytes  "AMPJITNN"
//   version        u32      kFormatVersion
//   entry count    u32
//   per entry, in state_dict() order:
//     name         u32 length, then the UTF-8 bytes ("0.weight")
//     dtype        u8 code (kDTypeCodes: part of the format, not DType's value)
//     shape        u32 rank, then rank i64 sizes
//     data         u64 byte count (numel * element size), then the row-major bytes
//   checksum       u64 FNV-1a over every byte before it
//
// Loading parses the whole file (so truncation is reported as such, at the
// entry where the bytes ran out), then verifies the checksum, then matches
// the entries against the module, and only then writes any tensor: a failed
// load leaves the module unchanged.

#include "jit/nn.h"

#include "jit/Autograd.h"

#include "ampjit/runtime/LowPrecision.h"

#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>

namespace jit::nn {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the state file and .npy readers copy little-endian data as is");

constexpr char kMagic[8] = {'A', 'M', 'P', 'J', 'I', 'T', 'N', 'N'};
constexpr uint32_t kFormatVersion = 1;
// Index = the code stored in the file. Never reorder: old files keep their codes.
constexpr std::array<DType, 6> kDTypeCodes = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I1};

uint8_t dtypeCode(DType dtype) {
  for (size_t i = 0; i < kDTypeCodes.size(); ++i)
    if (kDTypeCodes[i] == dtype)
      return uint8_t(i);
  throw Error("nn::save: unknown dtype");
}

uint64_t fnv1a(const uint8_t* data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string shapeString(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      out += 'x';
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

int64_t numelOf(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string quoted(const std::string& path) { return "'" + path + "'"; }

std::vector<uint8_t> readFile(const std::string& path, const char* who) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(std::string(who) + ": cannot open " + quoted(path) + " (missing or unreadable)");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// The raw row-major bytes of a tensor (its dtype's storage).
std::vector<uint8_t> bytesOf(const Tensor& t) {
  size_t size = size_t(t.numel()) * ampjit::runtime::dtypeSize(t.dtype());
  const void* data = nullptr;
  switch (t.dtype()) {
  case DType::F32: data = t.data_ptr<float>(); break;
  case DType::F64: data = t.data_ptr<double>(); break;
  case DType::F16:
  case DType::BF16: data = t.data_ptr<uint16_t>(); break;
  case DType::I64: data = t.data_ptr<int64_t>(); break;
  case DType::I1: data = t.data_ptr<uint8_t>(); break;
  }
  std::vector<uint8_t> out(size);
  if (size)
    std::memcpy(out.data(), data, size);
  return out;
}

template <typename T> T loadAs(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

/// A tensor of `dtype` holding exactly the given storage bytes. Every float
/// format converts exactly to double, so going through jit::tensor's double
/// values rounds nothing and the result is bit-identical.
Tensor tensorFromBytes(const uint8_t* bytes, DType storage, const Shape& shape, DType dtype) {
  size_t n = size_t(numelOf(shape));
  if (storage == DType::I64) {
    std::vector<int64_t> values(n);
    std::memcpy(values.data(), bytes, n * sizeof(int64_t));
    Tensor t = tensor(std::span<const int64_t>(values), shape);
    return dtype == DType::I64 ? t : t.to(dtype);
  }
  std::vector<double> values(n);
  for (size_t i = 0; i < n; ++i) {
    switch (storage) {
    case DType::F32: values[i] = loadAs<float>(bytes + 4 * i); break;
    case DType::F64: values[i] = loadAs<double>(bytes + 8 * i); break;
    case DType::F16: values[i] = ampjit::runtime::halfToFloat(loadAs<uint16_t>(bytes + 2 * i)); break;
    case DType::BF16: values[i] = ampjit::runtime::bfloat16ToFloat(loadAs<uint16_t>(bytes + 2 * i)); break;
    case DType::I1: values[i] = bytes[i] ? 1.0 : 0.0; break;
    case DType::I64: break; // handled above
    }
  }
  return tensor(std::span<const double>(values), shape, dtype);
}

/// Writes every tensor's new value; called only after every check passed.
void assignAll(std::vector<std::pair<Tensor, Tensor>>& updates) {
  // Parameters require grad; copy_ on them is an update outside autograd.
  NoGradGuard noGrad;
  for (auto& [target, value] : updates)
    target.copy_(value);
}

class Writer {
public:
  template <typename T> void put(T value) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    bytes.insert(bytes.end(), raw, raw + sizeof(T));
  }
  void putBytes(const void* data, size_t size) {
    auto p = static_cast<const uint8_t*>(data);
    bytes.insert(bytes.end(), p, p + size);
  }
  std::vector<uint8_t> bytes;
};

/// Bounds-checked reading; running out is a "truncated" error naming what was being read.
class Reader {
public:
  Reader(const std::vector<uint8_t>& bytes, std::string path, size_t end)
      : bytes_(bytes), path_(std::move(path)), end_(end) {}
  const uint8_t* take(size_t size, const std::string& what) {
    if (size > end_ - pos_)
      throw Error("nn::load: " + quoted(path_) + " is truncated: " + what + " needs " + std::to_string(size) +
                  " bytes at offset " + std::to_string(pos_) + " but only " + std::to_string(end_ - pos_) +
                  " remain");
    const uint8_t* p = bytes_.data() + pos_;
    pos_ += size;
    return p;
  }
  template <typename T> T get(const std::string& what) { return loadAs<T>(take(sizeof(T), what)); }
  size_t pos() const { return pos_; }

private:
  const std::vector<uint8_t>& bytes_;
  std::string path_;
  size_t end_;
  size_t pos_ = 0;
};

struct FileEntry {
  std::string name;
  DType dtype;
  Shape shape;
  const uint8_t* data;
};

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
  array.file = readFile(path, ("nn::load_npy: entry '" + entry + "'").c_str());
  const std::vector<uint8_t>& f = array.file;
  static constexpr uint8_t kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (f.size() < 10 || std::memcmp(f.data(), kNpyMagic, 6) != 0)
    throw Error(where + " is not a NumPy .npy file (wrong magic)");
  uint8_t major = f[6];
  size_t headerLength, headerStart;
  if (major == 1) {
    headerLength = loadAs<uint16_t>(&f[8]);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (f.size() < 12)
      throw Error(where + " is truncated in its header");
    headerLength = loadAs<uint32_t>(&f[8]);
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
  size_t expected = size_t(numelOf(array.shape)) * ampjit::runtime::dtypeSize(array.dtype);
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
  Writer w;
  w.putBytes(kMagic, sizeof kMagic);
  w.put<uint32_t>(kFormatVersion);
  auto state = state_dict();
  w.put<uint32_t>(uint32_t(state.size()));
  for (const auto& [name, tensor] : state) {
    w.put<uint32_t>(uint32_t(name.size()));
    w.putBytes(name.data(), name.size());
    w.put<uint8_t>(dtypeCode(tensor.dtype()));
    w.put<uint32_t>(uint32_t(tensor.dim()));
    for (int64_t d : tensor.shape())
      w.put<int64_t>(d);
    std::vector<uint8_t> data = bytesOf(tensor);
    w.put<uint64_t>(data.size());
    w.putBytes(data.data(), data.size());
  }
  w.put<uint64_t>(fnv1a(w.bytes.data(), w.bytes.size()));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    throw Error("nn::save: cannot open " + quoted(path) + " for writing");
  out.write(reinterpret_cast<const char*>(w.bytes.data()), std::streamsize(w.bytes.size()));
  out.close();
  if (!out)
    throw Error("nn::save: writing " + quoted(path) + " failed");
}

void Module::load(const std::string& path) {
  std::vector<uint8_t> bytes = readFile(path, "nn::load");
  std::string where = "nn::load: " + quoted(path);
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    throw Error(where + " is not an ampjit module state file (wrong magic)");
  // The last 8 bytes are the checksum; entries are parsed from what precedes them.
  size_t bodyEnd = bytes.size() >= sizeof kMagic + 8 ? bytes.size() - 8 : sizeof kMagic;
  Reader r(bytes, path, bodyEnd);
  r.take(sizeof kMagic, "the magic");
  uint32_t version = r.get<uint32_t>("the format version");
  if (version != kFormatVersion)
    throw Error(where + " has format version " + std::to_string(version) + "; this build reads version " +
                std::to_string(kFormatVersion));
  uint32_t count = r.get<uint32_t>("the entry count");
  std::vector<FileEntry> entries;
  for (uint32_t i = 0; i < count; ++i) {
    std::string label = "entry " + std::to_string(i);
    uint32_t nameLength = r.get<uint32_t>("the name length of " + label);
    const uint8_t* name = r.take(nameLength, "the name of " + label);
    FileEntry entry;
    entry.name.assign(reinterpret_cast<const char*>(name), nameLength);
    label = "entry '" + entry.name + "'";
    uint8_t code = r.get<uint8_t>("the dtype of " + label);
    if (code >= kDTypeCodes.size())
      throw Error(where + ": " + label + " has unknown dtype code " + std::to_string(code));
    entry.dtype = kDTypeCodes[code];
    uint32_t rank = r.get<uint32_t>("the rank of " + label);
    for (uint32_t d = 0; d < rank; ++d) {
      int64_t size = r.get<int64_t>("the shape of " + label);
      if (size < 0)
        throw Error(where + ": " + label + " has negative dimension " + std::to_string(size));
      entry.shape.push_back(size);
    }
    uint64_t byteCount = r.get<uint64_t>("the byte count of " + label);
    uint64_t expected = uint64_t(numelOf(entry.shape)) * ampjit::runtime::dtypeSize(entry.dtype);
    if (byteCount != expected)
      throw Error(where + ": " + label + " stores " + std::to_string(byteCount) + " bytes but " +
                  std::string(dtype_name(entry.dtype)) + shapeString(entry.shape) + " needs " +
                  std::to_string(expected));
    entry.data = r.take(byteCount, "the data of " + label);
    entries.push_back(std::move(entry));
  }
  if (bytes.size() < r.pos() + 8)
    throw Error(where + " is truncated: the checksum (8 bytes) is missing");
  if (r.pos() + 8 != bytes.size())
    throw Error(where + " has " + std::to_string(bytes.size() - r.pos() - 8) + " unexpected bytes after its entries");
  uint64_t stored = loadAs<uint64_t>(bytes.data() + r.pos());
  uint64_t computed = fnv1a(bytes.data(), r.pos());
  if (stored != computed)
    throw Error(where + ": checksum mismatch (the file is corrupt)");

  auto state = state_dict();
  std::vector<std::pair<Tensor, Tensor>> updates;
  std::vector<bool> seen(state.size(), false);
  for (const FileEntry& entry : entries) {
    size_t index = 0;
    while (index < state.size() && state[index].first != entry.name)
      ++index;
    if (index == state.size())
      throw Error(where + ": entry '" + entry.name + "' is unknown to the module");
    if (seen[index])
      throw Error(where + ": entry '" + entry.name + "' appears twice");
    seen[index] = true;
    const Tensor& target = state[index].second;
    if (entry.dtype != target.dtype())
      throw Error(where + ": entry '" + entry.name + "' has dtype " + std::string(dtype_name(entry.dtype)) +
                  " but the module's is " + std::string(dtype_name(target.dtype())));
    if (entry.shape != target.shape())
      throw Error(where + ": entry '" + entry.name + "' has shape " + shapeString(entry.shape) +
                  " but the module's is " + shapeString(target.shape()));
    updates.emplace_back(target, tensorFromBytes(entry.data, entry.dtype, entry.shape, entry.dtype));
  }
  for (size_t i = 0; i < state.size(); ++i)
    if (!seen[i])
      throw Error(where + ": entry '" + state[i].first + "' of the module is missing from the file");
  assignAll(updates);
}

void Module::load_npy(const std::string& name, const std::string& path) {
  Tensor target = stateEntry(*this, name, "nn::load_npy");
  std::vector<std::pair<Tensor, Tensor>> updates{{target, npyValueFor(name, target, path)}};
  assignAll(updates);
}

void Module::load_npy_dir(const std::string& dir) {
  std::vector<std::pair<Tensor, Tensor>> updates;
  for (const auto& [name, target] : state_dict())
    updates.emplace_back(target, npyValueFor(name, target, dir + "/" + name + ".npy"));
  assignAll(updates);
}

} // namespace jit::nn
