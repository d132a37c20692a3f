// ampjit's state file (all integers little-endian):
//
//   magic          8 bytes  "AMPJITNN"
//   version        u32      2
//   part count     u32
//   per part:
//     name         string   "" for a single object's file; "model", "optimizer", ... in a checkpoint
//     kind         string   the class that saved it ("Module", "SGD", "GradScaler", "StepLR")
//     settings     u32 count, then per setting: name string, value f64
//     entries      u32 count, then per entry:
//       name       string   ("0.weight", "3.exp_avg", "scale")
//       dtype      u8 code (kDTypeCodes: part of the format, not DType's value)
//       shape      u32 rank, then rank i64 sizes
//       data       u64 byte count (numel * element size), then the row-major bytes
//   checksum       u64 FNV-1a over every byte before it
//
// A string is a u32 byte count, then UTF-8 bytes. Version 1 (what
// Module::save wrote before optimizers and scalers had files) is the magic,
// version 1, then one Module's entries and the checksum; it still loads.
//
// Loading parses the whole file (so truncation is reported as such, where the
// bytes ran out), verifies the checksum, checks every requested part against
// its object, and only then writes any tensor.

#include "StateFile.h"

#include "Dispatch.h"
#include "trace/TraceSession.h"

#include "jit/Autograd.h"

#include "ampjit/runtime/Files.h"
#include "ampjit/runtime/Fnv1a.h"
#include "ampjit/runtime/LowPrecision.h"
#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/Shape.h"

#include <array>
#include <bit>
#include <cstring>
#include <span>

namespace jit::detail {
namespace {

using ampjit::runtime::shapeToString;

static_assert(std::endian::native == std::endian::little, "the state file copies little-endian data as is");

constexpr char kMagic[8] = {'A', 'M', 'P', 'J', 'I', 'T', 'N', 'N'};
constexpr uint32_t kFormatVersion = 2;
constexpr uint32_t kModuleOnlyVersion = 1;
// Index = the code stored in the file. Never reorder: old files keep their codes.
constexpr std::array<DType, 6> kDTypeCodes = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I1};

uint8_t dtypeCode(DType dtype) {
  for (size_t i = 0; i < kDTypeCodes.size(); ++i)
    if (kDTypeCodes[i] == dtype)
      return uint8_t(i);
  throw Error("state file: unknown dtype");
}

std::string inQuotes(const std::string& text) { return "'" + text + "'"; }

/// The raw row-major bytes of a tensor (its dtype's storage). Reading the
/// data completes a pending deferred update and fetches a device copy.
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
  void putString(const std::string& text) {
    put<uint32_t>(uint32_t(text.size()));
    putBytes(text.data(), text.size());
  }
  std::vector<uint8_t> bytes;
};

/// A T from possibly unaligned little-endian bytes.
template <typename T> T readUnaligned(const uint8_t* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

/// Bounds-checked reading; running out is a "truncated" error naming what was being read.
class Reader {
public:
  Reader(std::span<const uint8_t> bytes, std::string where, size_t end)
      : bytes_(bytes), where_(std::move(where)), end_(end) {}
  const uint8_t* take(size_t size, const std::string& what) {
    if (size > end_ - pos_)
      throw Error(where_ + " is truncated: " + what + " needs " + std::to_string(size) + " bytes at offset " +
                  std::to_string(pos_) + " but only " + std::to_string(end_ - pos_) + " remain");
    const uint8_t* p = bytes_.data() + pos_;
    pos_ += size;
    return p;
  }
  template <typename T> T get(const std::string& what) { return readUnaligned<T>(take(sizeof(T), what)); }
  std::string getString(const std::string& what) {
    uint32_t length = get<uint32_t>("the length of " + what);
    const uint8_t* text = take(length, what);
    return std::string(reinterpret_cast<const char*>(text), length);
  }
  size_t pos() const { return pos_; }

private:
  std::span<const uint8_t> bytes_;
  std::string where_;
  size_t end_;
  size_t pos_ = 0;
};

struct FileEntry {
  std::string name;
  DType dtype;
  Shape shape;
  const uint8_t* data;
};

/// The entry's bytes as a tensor, bit for bit (NaN payloads included); a
/// corrupt boolean byte reads as true, as a bool does.
Tensor tensorOf(const FileEntry& entry, const std::string& at) {
  rt::Expected<rt::Tensor> value = rt::Tensor::allocate(entry.dtype, entry.shape);
  if (!value)
    throw Error(at + "entry " + inQuotes(entry.name) + ": " + value.message());
  if (value->byteSize() != 0)
    std::memcpy(value->bytes(), entry.data, value->byteSize());
  if (entry.dtype == DType::I1)
    for (uint8_t& flag : value->elements<uint8_t>())
      flag = flag ? 1 : 0;
  return makeTensor(std::move(*value));
}

struct FilePart {
  std::string name;
  std::string kind;
  std::vector<std::pair<std::string, double>> settings;
  std::vector<FileEntry> entries;
};

/// "part 'optimizer'" in a checkpoint; nothing in a single object's file.
std::string partLabel(const std::string& name) { return name.empty() ? std::string() : "part " + inQuotes(name); }

std::vector<FileEntry> readEntries(Reader& r, const std::string& where, const std::string& part) {
  std::string inPart = part.empty() ? "" : " of " + partLabel(part);
  uint32_t count = r.get<uint32_t>("the entry count" + inPart);
  std::vector<FileEntry> entries;
  for (uint32_t i = 0; i < count; ++i) {
    FileEntry entry;
    entry.name = r.getString("the name of entry " + std::to_string(i) + inPart);
    std::string label = "entry " + inQuotes(entry.name) + inPart;
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
    int64_t elements = ampjit::runtime::checkedElementCount(entry.shape);
    if (elements < 0)
      throw Error(where + ": " + label + " has shape " + shapeToString(entry.shape) + ", more elements than any tensor");
    uint64_t expected = uint64_t(elements) * ampjit::runtime::dtypeSize(entry.dtype);
    if (byteCount != expected)
      throw Error(where + ": " + label + " stores " + std::to_string(byteCount) + " bytes but " +
                  std::string(dtype_name(entry.dtype)) + shapeToString(entry.shape) + " needs " +
                  std::to_string(expected));
    entry.data = r.take(byteCount, "the data of " + label);
    entries.push_back(std::move(entry));
  }
  return entries;
}

/// Parses and verifies the whole file; `bytes` must outlive the entries' data pointers.
std::vector<FilePart> parse(std::span<const uint8_t> bytes, const std::string& where) {
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    throw Error(where + " is not an ampjit state file (wrong magic)");
  // The last 8 bytes are the checksum; everything else is parsed from what precedes them.
  size_t bodyEnd = bytes.size() >= sizeof kMagic + 8 ? bytes.size() - 8 : sizeof kMagic;
  Reader r(bytes, where, bodyEnd);
  r.take(sizeof kMagic, "the magic");
  uint32_t version = r.get<uint32_t>("the format version");
  std::vector<FilePart> parts;
  if (version == kModuleOnlyVersion) {
    parts.push_back({"", "Module", {}, readEntries(r, where, "")});
  } else if (version == kFormatVersion) {
    uint32_t count = r.get<uint32_t>("the part count");
    for (uint32_t i = 0; i < count; ++i) {
      FilePart part;
      part.name = r.getString("the name of part " + std::to_string(i));
      std::string label = part.name.empty() ? std::string("the state") : partLabel(part.name);
      part.kind = r.getString("the kind of " + label);
      uint32_t settings = r.get<uint32_t>("the setting count of " + label);
      for (uint32_t s = 0; s < settings; ++s) {
        std::string name = r.getString("a setting name of " + label);
        part.settings.emplace_back(name, r.get<double>("setting " + inQuotes(name) + " of " + label));
      }
      part.entries = readEntries(r, where, part.name);
      parts.push_back(std::move(part));
    }
  } else {
    throw Error(where + " has format version " + std::to_string(version) + "; this build reads versions " +
                std::to_string(kModuleOnlyVersion) + " and " + std::to_string(kFormatVersion));
  }
  if (bytes.size() < r.pos() + 8)
    throw Error(where + " is truncated: the checksum (8 bytes) is missing");
  if (r.pos() + 8 != bytes.size())
    throw Error(where + " has " + std::to_string(bytes.size() - r.pos() - 8) + " unexpected bytes after its state");
  if (readUnaligned<uint64_t>(bytes.data() + r.pos()) != rt::fnv1a64(std::span(bytes.data(), r.pos())))
    throw Error(where + ": checksum mismatch (the file is corrupt)");
  return parts;
}

std::string partNames(const std::vector<FilePart>& parts) {
  std::string names;
  for (const FilePart& part : parts)
    names += (names.empty() ? "" : ", ") + part.name;
  return names;
}

const FilePart& findPart(const std::vector<FilePart>& file, const StatePart& wanted, const std::string& where) {
  for (const FilePart& part : file)
    if (part.name == wanted.name)
      return part;
  bool singleObject = file.size() == 1 && file[0].name.empty();
  if (wanted.name.empty())
    throw Error(where + " is a checkpoint (parts: " + partNames(file) + "), not one " + wanted.state.noun +
                "'s state: load it with jit::Checkpoint");
  if (singleObject)
    throw Error(where + " holds one " + file[0].kind + "'s state, not a checkpoint: it has no part " +
                inQuotes(wanted.name) + " (load it with the " + file[0].kind + "'s own load())");
  throw Error(where + " has no part " + inQuotes(wanted.name) + " (it has: " + partNames(file) + ")");
}

void checkSettings(const FilePart& part, const SavedState& state, const std::string& at) {
  for (const auto& [name, value] : state.settings) {
    const std::pair<std::string, double>* stored = nullptr;
    for (const auto& setting : part.settings)
      if (setting.first == name)
        stored = &setting;
    if (!stored)
      for (const auto& setting : state.settingsOlderFilesLack)
        if (setting.first == name)
          stored = &setting; // a file from before the setting existed
    if (!stored)
      throw Error(at + "the file has no setting " + inQuotes(name) + " of the " + state.noun);
    if (stored->second != value)
      throw Error(at + state.noun + " setting " + inQuotes(name) + " is " + ampjit::runtime::formatDouble(stored->second) +
                  " in the file but " + ampjit::runtime::formatDouble(value) + " here. A load keeps the " + state.noun + "'s settings: construct it with the file's " + name);
  }
  for (const auto& setting : part.settings) {
    bool known = false;
    for (const auto& own : state.settings)
      known = known || own.first == setting.first;
    if (!known)
      throw Error(at + "setting " + inQuotes(setting.first) + " is unknown to the " + state.noun + " (a " +
                  state.kind + ")");
  }
}

/// Checks one part and appends its (target, value) writes.
void matchPart(const FilePart& part, const SavedState& state, const std::string& at,
               std::vector<std::pair<Tensor, Tensor>>& updates) {
  if (part.kind != state.kind)
    throw Error(at + "the file holds state saved by " + part.kind + ", not by " + state.kind);
  checkSettings(part, state, at);
  std::vector<bool> seen(state.tensors.size(), false);
  std::vector<Tensor> loaded(state.tensors.size());
  for (const FileEntry& entry : part.entries) {
    size_t index = 0;
    while (index < state.tensors.size() && state.tensors[index].first != entry.name)
      ++index;
    if (index == state.tensors.size())
      throw Error(at + "entry " + inQuotes(entry.name) + " is unknown to the " + state.noun);
    if (seen[index])
      throw Error(at + "entry " + inQuotes(entry.name) + " appears twice");
    seen[index] = true;
    const Tensor& target = state.tensors[index].second;
    if (entry.dtype != target.dtype())
      throw Error(at + "entry " + inQuotes(entry.name) + " has dtype " + std::string(dtype_name(entry.dtype)) +
                  " but the " + state.noun + "'s is " + std::string(dtype_name(target.dtype())));
    if (entry.shape != target.shape())
      throw Error(at + "entry " + inQuotes(entry.name) + " has shape " + shapeToString(entry.shape) + " but the " +
                  state.noun + "'s is " + shapeToString(target.shape()));
    loaded[index] = tensorOf(entry, at);
    updates.emplace_back(target, loaded[index]);
  }
  for (size_t i = 0; i < state.tensors.size(); ++i)
    if (!seen[i])
      throw Error(at + "entry " + inQuotes(state.tensors[i].first) + " of the " + state.noun +
                  " is missing from the file");
  if (state.checkLoaded)
    state.checkLoaded(loaded, at);
}

} // namespace

void writeLoaded(const std::vector<std::pair<Tensor, Tensor>>& updates) {
  NoGradGuard noGrad;
  for (auto [target, value] : updates)
    target.copy_(value);
}

void writeStateFile(const std::string& path, const std::vector<StatePart>& parts, const std::string& who) {
  // Saving reads values and loading writes them: inside a step neither has
  // values to read, and a load would be compiled in as constants.
  refuseInsideTrace(who, "save and load between calls of the step, not in it");
  Writer w;
  w.putBytes(kMagic, sizeof kMagic);
  w.put<uint32_t>(kFormatVersion);
  w.put<uint32_t>(uint32_t(parts.size()));
  for (const StatePart& part : parts) {
    w.putString(part.name);
    w.putString(part.state.kind);
    w.put<uint32_t>(uint32_t(part.state.settings.size()));
    for (const auto& [name, value] : part.state.settings) {
      w.putString(name);
      w.put<double>(value);
    }
    w.put<uint32_t>(uint32_t(part.state.tensors.size()));
    for (const auto& [name, tensor] : part.state.tensors) {
      w.putString(name);
      w.put<uint8_t>(dtypeCode(tensor.dtype()));
      w.put<uint32_t>(uint32_t(tensor.dim()));
      for (int64_t d : tensor.shape())
        w.put<int64_t>(d);
      std::vector<uint8_t> data = bytesOf(tensor);
      w.put<uint64_t>(data.size());
      w.putBytes(data.data(), data.size());
    }
  }
  w.put<uint64_t>(rt::fnv1a64(w.bytes));

  // A save that fails (disk full, killed) leaves the previous file whole.
  ampjit::runtime::Status written = ampjit::runtime::writeFileAtomically(
      path, std::string_view(reinterpret_cast<const char*>(w.bytes.data()), w.bytes.size()));
  if (!written)
    throw Error(who + ": " + written.message());
}

void readStateFile(const std::string& path, const std::vector<StatePart>& parts, const std::string& who) {
  // Saving reads values and loading writes them: inside a step neither has
  // values to read, and a load would be compiled in as constants.
  refuseInsideTrace(who, "save and load between calls of the step, not in it");
  ampjit::runtime::Expected<std::string> bytes = ampjit::runtime::readWholeFile(path);
  if (!bytes.ok())
    throw Error(who + ": " + bytes.message());
  std::string where = who + ": " + inQuotes(path);
  std::vector<FilePart> file = parse(ampjit::runtime::bytesOf(*bytes), where);
  std::vector<std::pair<Tensor, Tensor>> updates;
  for (const StatePart& wanted : parts) {
    const FilePart& part = findPart(file, wanted, where);
    std::string at = where + ": " + (wanted.name.empty() ? "" : partLabel(wanted.name) + ": ");
    matchPart(part, wanted.state, at, updates);
  }
  writeLoaded(updates);
  for (const StatePart& part : parts)
    if (part.state.restore)
      part.state.restore();
}

} // namespace jit::detail
