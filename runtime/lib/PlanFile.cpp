#include "ampjit/runtime/PlanFile.h"

#include "PlanEnums.h"

#include "ampjit/runtime/Files.h"
#include "ampjit/runtime/Fnv1a.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace ampjit::runtime {

namespace {

constexpr char kMagic[8] = {'A', 'M', 'P', 'J', 'P', 'L', 'A', 'N'};
constexpr size_t kHeaderBytes = 24;  // magic, version, section count, payload bytes
constexpr size_t kChecksumBytes = 8;
constexpr size_t kSectionHeaderBytes = 16; // tag, reserved, length

// The sections, in the order they must appear.
constexpr char kSectionTags[4][5] = {"INFO", "BUFS", "RSLT", "STEP"};

uint32_t tagValue(const char* tag) {
  return uint32_t(uint8_t(tag[0])) | uint32_t(uint8_t(tag[1])) << 8 | uint32_t(uint8_t(tag[2])) << 16 |
         uint32_t(uint8_t(tag[3])) << 24;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

class Writer {
public:
  std::vector<uint8_t> bytes;

  void u8(uint8_t value) { bytes.push_back(value); }
  void u32(uint32_t value) { little(value, 4); }
  void i32(int32_t value) { little(uint32_t(value), 4); }
  void u64(uint64_t value) { little(value, 8); }
  void i64(int64_t value) { little(uint64_t(value), 8); }
  void f64(double value) { little(std::bit_cast<uint64_t>(value), 8); }
  void string(const std::string& value) {
    u32(uint32_t(value.size()));
    append(reinterpret_cast<const uint8_t*>(value.data()), value.size());
  }
  void blob(const std::vector<uint8_t>& value) {
    u64(value.size());
    append(value.data(), value.size());
  }
  // Growing, then copying: GCC 12 warns falsely (-Wstringop-overflow) about
  // vector::insert of a range once enough of encodePlan is inlined.
  void append(const uint8_t* data, std::size_t count) {
    std::size_t end = bytes.size();
    bytes.resize(end + count);
    if (count > 0)
      std::memcpy(bytes.data() + end, data, count);
  }
  void shape(const Shape& value) {
    u32(uint32_t(value.size()));
    for (int64_t dim : value)
      i64(dim);
  }
  void ids(const std::vector<BufferId>& value) {
    u32(uint32_t(value.size()));
    for (BufferId id : value)
      u32(id);
  }

  /// One parameter field, by type (the encodings are listed in docs/plan-format.md).
  template <typename T>
  void field(const T& value) {
    if constexpr (std::is_same_v<T, bool>)
      u8(value ? 1 : 0);
    else if constexpr (detail::PlanEnum<T>)
      u8(uint8_t(value));
    else if constexpr (std::is_same_v<T, int64_t>)
      i64(value);
    else if constexpr (std::is_same_v<T, double>)
      f64(value);
    else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
      shape(value);
    else if constexpr (std::is_same_v<T, std::vector<uint8_t>>)
      blob(value);
    else if constexpr (std::is_same_v<T, std::vector<uint32_t>>)
      ids(value);
    else if constexpr (std::is_same_v<T, std::vector<FusedInstruction>>) {
      u32(uint32_t(value.size()));
      for (const FusedInstruction& instruction : value) {
        u8(uint8_t(instruction.op));
        u8(uint8_t(instruction.type));
        for (uint32_t operand : instruction.operands)
          u32(operand);
        f64(instruction.scalar);
      }
    } else
      static_assert(sizeof(T) == 0, "no encoding for this parameter field type");
  }

private:
  void little(uint64_t value, int count) {
    for (int i = 0; i < count; ++i)
      bytes.push_back(uint8_t(value >> (8 * i)));
  }
};

void writeSection(Writer& file, const char* tag, const Writer& section) {
  file.u32(tagValue(tag));
  file.u32(0);
  file.u64(section.bytes.size());
  file.bytes.insert(file.bytes.end(), section.bytes.begin(), section.bytes.end());
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

/// A bounds-checked cursor over one section. The first error sticks: later
/// reads return zeros, and the caller checks `failed()` at record boundaries,
/// so parsing code stays linear.
class Reader {
public:
  Reader(std::span<const uint8_t> bytes, size_t fileOffset) : bytes_(bytes), fileOffset_(fileOffset) {}

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  size_t remaining() const { return bytes_.size() - position_; }
  size_t fileOffset() const { return fileOffset_ + position_; }

  /// Records the context ("buffer %3", "field 'axes'") the next errors belong to.
  void setContext(std::string context) { context_ = std::move(context); }

  void fail(const std::string& message) {
    if (error_.empty())
      error_ = (context_.empty() ? "" : context_ + ": ") + message;
  }

  uint8_t u8() { return uint8_t(little(1)); }
  uint32_t u32() { return uint32_t(little(4)); }
  int32_t i32() { return int32_t(uint32_t(little(4))); }
  uint64_t u64() { return little(8); }
  int64_t i64() { return int64_t(little(8)); }
  double f64() { return std::bit_cast<double>(little(8)); }

  bool boolean() {
    uint8_t value = u8();
    if (value > 1)
      fail("a boolean must be 0 or 1, not " + std::to_string(value));
    return value == 1;
  }

  template <detail::PlanEnum E>
  E enumeration() {
    uint8_t value = u8();
    if (value >= detail::EnumInfo<E>::count)
      fail("invalid value " + std::to_string(value) + " (expected 0.." +
           std::to_string(detail::EnumInfo<E>::count - 1) + ")");
    return failed() ? E{} : E(value);
  }

  /// A count of records each at least `minRecordBytes` long; refuses counts
  /// the rest of the section cannot hold, before anything is allocated.
  size_t count(size_t minRecordBytes, std::string_view what) {
    uint32_t value = u32();
    if (!failed() && minRecordBytes > 0 && value > remaining() / minRecordBytes)
      fail("claims " + std::to_string(value) + " " + std::string(what) + " but only " +
           std::to_string(remaining()) + " bytes remain");
    return failed() ? 0 : value;
  }

  std::string string() {
    size_t length = count(1, "characters");
    std::string value;
    if (take(length))
      value.assign(reinterpret_cast<const char*>(bytes_.data() + position_ - length), length);
    return value;
  }

  std::vector<uint8_t> blob() {
    uint64_t length = u64();
    std::vector<uint8_t> value;
    if (!failed() && length > remaining()) {
      fail("claims " + std::to_string(length) + " bytes of data but only " + std::to_string(remaining()) +
           " remain");
      return value;
    }
    if (take(size_t(length)))
      value.assign(bytes_.data() + position_ - length, bytes_.data() + position_);
    return value;
  }

  Shape shape() {
    size_t rank = count(8, "dimensions");
    Shape value(rank);
    for (int64_t& dim : value)
      dim = i64();
    return value;
  }

  std::vector<BufferId> ids() {
    size_t size = count(4, "buffer ids");
    std::vector<BufferId> value(size);
    for (BufferId& id : value)
      id = u32();
    return value;
  }

  template <typename T>
  void field(T& value) {
    if constexpr (std::is_same_v<T, bool>)
      value = boolean();
    else if constexpr (detail::PlanEnum<T>)
      value = enumeration<T>();
    else if constexpr (std::is_same_v<T, int64_t>)
      value = i64();
    else if constexpr (std::is_same_v<T, double>)
      value = f64();
    else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
      value = shape();
    else if constexpr (std::is_same_v<T, std::vector<uint8_t>>)
      value = blob();
    else if constexpr (std::is_same_v<T, std::vector<uint32_t>>)
      value = ids();
    else if constexpr (std::is_same_v<T, std::vector<FusedInstruction>>) {
      size_t size = count(22, "instructions");
      value.resize(size);
      for (FusedInstruction& instruction : value) {
        instruction.op = enumeration<ElementwiseOp>();
        instruction.type = enumeration<DType>();
        for (uint32_t& operand : instruction.operands)
          operand = u32();
        instruction.scalar = f64();
      }
    } else
      static_assert(sizeof(T) == 0, "no decoding for this parameter field type");
  }

private:
  bool take(size_t count) {
    if (failed())
      return false;
    if (count > remaining()) {
      fail("truncated: needs " + std::to_string(count) + " bytes at file offset " +
           std::to_string(fileOffset()) + " but the section ends at " +
           std::to_string(fileOffset_ + bytes_.size()));
      return false;
    }
    position_ += count;
    return true;
  }

  uint64_t little(int count) {
    if (!take(size_t(count)))
      return 0;
    uint64_t value = 0;
    for (int i = 0; i < count; ++i)
      value |= uint64_t(bytes_[position_ - count + i]) << (8 * i);
    return value;
  }

  std::span<const uint8_t> bytes_;
  size_t fileOffset_;
  size_t position_ = 0;
  std::string context_;
  std::string error_;
};

uint64_t readLittle(std::span<const uint8_t> bytes, size_t offset, int count) {
  uint64_t value = 0;
  for (int i = 0; i < count; ++i)
    value |= uint64_t(bytes[offset + i]) << (8 * i);
  return value;
}

void decodeInfo(Reader& reader, Plan& plan) {
  plan.name = reader.string();
  plan.arenaBytes = reader.u64();
  plan.deferredSteps = reader.u32();
  size_t sideSteps = reader.count(4 + 4, "side steps");
  plan.sideSteps.resize(sideSteps);
  for (SideStep& side : plan.sideSteps) {
    side.step = reader.u32();
    side.joinBefore = reader.u32();
  }
}

void decodeBuffers(Reader& reader, Plan& plan) {
  // dtype, role, rank, argument, derived, offset, view, name length, data length
  size_t count = reader.count(1 + 1 + 4 + 4 + 4 + 8 + 4 + 4 + 8, "buffers");
  plan.buffers.resize(count);
  for (size_t id = 0; id < count && !reader.failed(); ++id) {
    reader.setContext("buffer %" + std::to_string(id));
    BufferDesc& buffer = plan.buffers[id];
    buffer.type.dtype = reader.enumeration<DType>();
    buffer.role = reader.enumeration<BufferRole>();
    buffer.type.shape = reader.shape();
    buffer.argument = reader.i32();
    buffer.derivedFrom = reader.i32();
    buffer.arenaOffset = reader.u64();
    buffer.viewOf = reader.i32();
    buffer.name = reader.string();
    buffer.constantData = reader.blob();
  }
}

void decodeResults(Reader& reader, Plan& plan) {
  size_t count = reader.count(8, "results");
  plan.results.resize(count);
  for (size_t i = 0; i < count && !reader.failed(); ++i) {
    reader.setContext("result " + std::to_string(i));
    plan.results[i].buffer = reader.u32();
    plan.results[i].tiedArgument = reader.i32();
  }
}

void decodeSteps(Reader& reader, Plan& plan) {
  // kind, compute type, two id counts, origin length
  size_t count = reader.count(1 + 1 + 4 + 4 + 4, "steps");
  plan.steps.resize(count);
  for (size_t index = 0; index < count && !reader.failed(); ++index) {
    std::string where = "step " + std::to_string(index);
    reader.setContext(where);
    Step& step = plan.steps[index];
    step.kind = reader.enumeration<StepKind>();
    step.computeType = reader.enumeration<DType>();
    step.inputs = reader.ids();
    step.outputs = reader.ids();
    step.origin = reader.string();
    if (reader.failed())
      return;
    where += " (" + std::string(stepKindName(step.kind)) + ")";
    step.params = defaultParamsFor(step.kind);
    std::visit(
        [&](auto& params) {
          params.forEachField([&](const char* name, auto& field) {
            reader.setContext(where + ", field '" + std::string(name) + "'");
            reader.field(field);
          });
        },
        step.params);
  }
}

} // namespace

uint64_t planChecksum(std::span<const uint8_t> bytes) { return fnv1a64(bytes); }

std::vector<uint8_t> encodePlan(const Plan& plan) {
  Writer info, buffers, results, steps;
  info.string(plan.name);
  info.u64(plan.arenaBytes);
  info.u32(plan.deferredSteps);
  info.u32(uint32_t(plan.sideSteps.size()));
  for (const SideStep& side : plan.sideSteps) {
    info.u32(side.step);
    info.u32(side.joinBefore);
  }

  buffers.u32(uint32_t(plan.buffers.size()));
  for (const BufferDesc& buffer : plan.buffers) {
    buffers.u8(uint8_t(buffer.type.dtype));
    buffers.u8(uint8_t(buffer.role));
    buffers.shape(buffer.type.shape);
    buffers.i32(buffer.argument);
    buffers.i32(buffer.derivedFrom);
    buffers.u64(buffer.arenaOffset);
    buffers.i32(buffer.viewOf);
    buffers.string(buffer.name);
    buffers.blob(buffer.constantData);
  }

  results.u32(uint32_t(plan.results.size()));
  for (const PlanResult& result : plan.results) {
    results.u32(result.buffer);
    results.i32(result.tiedArgument);
  }

  steps.u32(uint32_t(plan.steps.size()));
  for (const Step& step : plan.steps) {
    steps.u8(uint8_t(step.kind));
    steps.u8(uint8_t(step.computeType));
    steps.ids(step.inputs);
    steps.ids(step.outputs);
    steps.string(step.origin);
    std::visit([&](const auto& params) {
      detail::forEachConstField(params, [&](const char*, const auto& field) { steps.field(field); });
    }, step.params);
  }

  Writer payload;
  writeSection(payload, kSectionTags[0], info);
  writeSection(payload, kSectionTags[1], buffers);
  writeSection(payload, kSectionTags[2], results);
  writeSection(payload, kSectionTags[3], steps);

  Writer file;
  file.bytes.insert(file.bytes.end(), std::begin(kMagic), std::end(kMagic));
  file.u32(kPlanFormatVersion);
  file.u32(uint32_t(std::size(kSectionTags)));
  file.u64(payload.bytes.size());
  file.bytes.insert(file.bytes.end(), payload.bytes.begin(), payload.bytes.end());
  file.u64(planChecksum(file.bytes));
  return std::move(file.bytes);
}

Expected<Plan> decodePlan(std::span<const uint8_t> bytes, std::string_view sourceName) {
  std::string source(sourceName);
  auto error = [&](const std::string& message) { return Status::error(source + ": " + message); };

  size_t magicBytes = std::min(bytes.size(), sizeof kMagic);
  if (magicBytes > 0 && std::memcmp(bytes.data(), kMagic, magicBytes) != 0)
    return error("not an ampjit plan (the file does not start with \"AMPJPLAN\")");
  if (bytes.size() < kHeaderBytes)
    return error("truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the " +
                 std::to_string(kHeaderBytes) + "-byte header");
  uint32_t version = uint32_t(readLittle(bytes, 8, 4));
  if (version != kPlanFormatVersion)
    return error("plan format version " + std::to_string(version) + ", but this runtime reads version " +
                 std::to_string(kPlanFormatVersion) + "; recompile the step with this version of ampjit");
  uint32_t sectionCount = uint32_t(readLittle(bytes, 12, 4));
  uint64_t payloadBytes = readLittle(bytes, 16, 8);
  uint64_t available = bytes.size() - kHeaderBytes;
  if (payloadBytes > available || available - payloadBytes < kChecksumBytes)
    return error("truncated: the header announces " + std::to_string(payloadBytes) +
                 " bytes of sections and an 8-byte checksum, but only " + std::to_string(available) +
                 " bytes follow the header");
  if (available - payloadBytes > kChecksumBytes)
    return error(std::to_string(available - payloadBytes - kChecksumBytes) +
                 " unexpected bytes after the checksum");
  size_t checksumOffset = kHeaderBytes + size_t(payloadBytes);
  uint64_t stored = readLittle(bytes, checksumOffset, 8);
  uint64_t computed = planChecksum(bytes.first(checksumOffset));
  if (stored != computed)
    return error("checksum mismatch (the file is corrupted)");
  if (sectionCount != std::size(kSectionTags))
    return error("has " + std::to_string(sectionCount) + " sections; version " +
                 std::to_string(kPlanFormatVersion) + " has exactly 4 (INFO, BUFS, RSLT, STEP)");

  Plan plan;
  size_t offset = kHeaderBytes;
  for (const char* tag : kSectionTags) {
    std::string where = std::string("section '") + tag + "'";
    if (checksumOffset - offset < kSectionHeaderBytes)
      return error(where + ": truncated section header at offset " + std::to_string(offset));
    uint32_t foundTag = uint32_t(readLittle(bytes, offset, 4));
    uint64_t length = readLittle(bytes, offset + 8, 8);
    if (foundTag != tagValue(tag)) {
      char found[5] = {char(foundTag), char(foundTag >> 8), char(foundTag >> 16), char(foundTag >> 24), 0};
      for (int i = 0; i < 4; ++i)
        if (found[i] < 0x20 || found[i] > 0x7e)
          found[i] = '?';
      return error("expected " + where + " at offset " + std::to_string(offset) + ", found '" + found + "'");
    }
    offset += kSectionHeaderBytes;
    if (length > checksumOffset - offset)
      return error(where + " claims " + std::to_string(length) + " bytes but only " +
                   std::to_string(checksumOffset - offset) + " remain before the checksum");
    Reader reader(bytes.subspan(offset, size_t(length)), offset);
    switch (tag[0]) {
    case 'I': decodeInfo(reader, plan); break;
    case 'B': decodeBuffers(reader, plan); break;
    case 'R': decodeResults(reader, plan); break;
    default: decodeSteps(reader, plan); break;
    }
    if (reader.failed())
      return error(where + ", " + reader.error());
    if (reader.remaining() != 0)
      return error(where + " has " + std::to_string(reader.remaining()) + " bytes left over after its records");
    offset += size_t(length);
  }
  if (offset != checksumOffset)
    return error(std::to_string(checksumOffset - offset) + " bytes after the last section");

  Status valid = verifyPlan(plan);
  if (!valid)
    return error("invalid plan: " + valid.message());
  return plan;
}

Status savePlan(const Plan& plan, const std::string& path) {
  Status valid = verifyPlan(plan);
  if (!valid)
    return Status::error("refusing to save an invalid plan to " + path + ": " + valid.message());
  std::vector<uint8_t> bytes = encodePlan(plan);
  return writeFileAtomically(path, bytes);
}

Expected<Plan> loadPlan(const std::string& path) {
  Expected<std::string> bytes = readWholeFile(path);
  if (!bytes.ok())
    return bytes.status();
  return decodePlan(bytesOf(*bytes), path);
}

} // namespace ampjit::runtime
