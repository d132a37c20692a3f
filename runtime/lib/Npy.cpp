// NumPy .npy reading and writing (format:
// numpy.org/doc/stable/reference/generated/numpy.lib.format.html). The header
// is a Python dict literal; it is parsed as one, not searched for substrings,
// so a key inside another key's string or a reordered dict reads correctly.

#include "ampjit/runtime/Npy.h"

#include "ampjit/runtime/Files.h"

#include <bit>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

namespace ampjit::runtime {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy reader copies little-endian data as is");

constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/// The header dict's three fields, as written.
struct NpyHeader {
  std::optional<std::string> descr;
  std::optional<bool> fortranOrder;
  std::optional<Shape> shape;
};

/// A recursive-descent parser for the header's dict literal:
/// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
public:
  explicit HeaderParser(const std::string& text) : text_(text) {}

  Expected<NpyHeader> parse() {
    NpyHeader header;
    if (!consume('{'))
      return fail("expected '{'");
    while (!consume('}')) {
      std::optional<std::string> key = quoted();
      if (!key)
        return fail("expected a quoted key");
      if (!consume(':'))
        return fail("expected ':' after '" + *key + "'");
      if (*key == "descr") {
        header.descr = quoted();
        if (!header.descr)
          return fail("'descr' is not a quoted string");
      } else if (*key == "fortran_order") {
        header.fortranOrder = boolean();
        if (!header.fortranOrder)
          return fail("'fortran_order' is not True or False");
      } else if (*key == "shape") {
        header.shape = tuple();
        if (!header.shape)
          return fail("'shape' is not a tuple of non-negative integers");
      } else {
        return fail("unknown key '" + *key + "' (a .npy header has descr, fortran_order and shape)");
      }
      if (!consume(',') && !peek('}'))
        return fail("expected ',' or '}' after '" + *key + "'");
    }
    skipSpace();
    if (position_ != text_.size())
      return fail("text after the closing '}'");
    if (!header.descr || !header.fortranOrder || !header.shape)
      return Status::error(std::string("the header lacks '") +
                           (!header.descr ? "descr" : !header.fortranOrder ? "fortran_order" : "shape") + "'");
    return header;
  }

private:
  Status fail(const std::string& what) const {
    return Status::error("malformed header at character " + std::to_string(position_) + ": " + what);
  }
  void skipSpace() {
    while (position_ < text_.size() && (text_[position_] == ' ' || text_[position_] == '\n'))
      ++position_;
  }
  bool peek(char c) {
    skipSpace();
    return position_ < text_.size() && text_[position_] == c;
  }
  bool consume(char c) {
    if (!peek(c))
      return false;
    ++position_;
    return true;
  }
  std::optional<std::string> quoted() {
    skipSpace();
    if (position_ >= text_.size() || (text_[position_] != '\'' && text_[position_] != '"'))
      return std::nullopt;
    char quote = text_[position_++];
    size_t close = text_.find(quote, position_);
    if (close == std::string::npos)
      return std::nullopt;
    std::string value = text_.substr(position_, close - position_);
    position_ = close + 1;
    return value;
  }
  std::optional<bool> boolean() {
    skipSpace();
    for (auto [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      size_t length = std::strlen(word);
      if (text_.compare(position_, length, word) == 0) {
        position_ += length;
        return value;
      }
    }
    return std::nullopt;
  }
  /// "()", "(5,)", "(3, 4)"; each entry at most 2^62 so no parse overflows.
  std::optional<Shape> tuple() {
    if (!consume('('))
      return std::nullopt;
    Shape shape;
    while (!consume(')')) {
      skipSpace();
      size_t start = position_;
      int64_t value = 0;
      while (position_ < text_.size() && text_[position_] >= '0' && text_[position_] <= '9') {
        if (value > (int64_t(1) << 58))
          return std::nullopt;
        value = value * 10 + (text_[position_++] - '0');
      }
      if (position_ == start)
        return std::nullopt;
      // Python 2's numpy wrote "(3L, 4L)".
      if (position_ < text_.size() && text_[position_] == 'L')
        ++position_;
      shape.push_back(value);
      if (!consume(',') && !peek(')'))
        return std::nullopt;
    }
    return shape;
  }

  const std::string& text_;
  size_t position_ = 0;
};

/// What a descr string holds and how its bytes become a runtime tensor.
struct FileElementType {
  const char* descr;
  DType dtype;       // the tensor's dtype
  size_t fileBytes;  // bytes per element in the file
};
constexpr FileElementType kReadable[] = {
    {"<f2", DType::F16, 2}, {"<f4", DType::F32, 4}, {"<f8", DType::F64, 8},
    {"<i8", DType::I64, 8}, {"<i4", DType::I64, 4}, {"|b1", DType::I1, 1},
};

/// Header text as an error message quotes it: on one line, without np.save's
/// padding, bytes outside printable ASCII as \xNN, and at most kExcerptChars
/// long. A corrupt length can make the "header" the file's binary data, which
/// would otherwise go to the terminal whole.
constexpr size_t kExcerptChars = 160;
std::string printableExcerpt(std::string_view text) {
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n'))
    text.remove_suffix(1);
  std::string shown;
  for (size_t i = 0; i < text.size(); ++i) {
    if (shown.size() >= kExcerptChars) {
      shown += "... (" + std::to_string(text.size() - i) + " more bytes)";
      break;
    }
    unsigned char c = text[i];
    if (c >= 0x20 && c <= 0x7e) {
      shown += char(c);
    } else {
      const char* hex = "0123456789abcdef";
      shown += {'\\', 'x', hex[c >> 4], hex[c & 15]};
    }
  }
  return shown;
}

uint32_t littleEndian(const uint8_t* bytes, size_t count) {
  uint32_t value = 0;
  for (size_t i = 0; i < count; ++i)
    value |= uint32_t(bytes[i]) << (8 * i);
  return value;
}

} // namespace

Expected<Tensor> parseNpy(std::span<const uint8_t> bytes, const std::string& source) {
  auto error = [&](const std::string& what) { return Status::error("'" + source + "' " + what); };
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return error("is not a NumPy .npy file (wrong magic)");
  uint8_t major = bytes[6];
  if (major < 1 || major > 3)
    return error("has .npy format version " + std::to_string(major) + "; versions 1 to 3 are read");
  size_t lengthBytes = major == 1 ? 2 : 4;
  size_t headerStart = 8 + lengthBytes;
  if (bytes.size() < headerStart)
    return error("is truncated in its header");
  size_t headerLength = littleEndian(&bytes[8], lengthBytes);
  if (headerLength > bytes.size() - headerStart)
    return error("is truncated in its header (it declares " + std::to_string(headerLength) + " header bytes)");
  std::string text(reinterpret_cast<const char*>(&bytes[headerStart]), headerLength);
  Expected<NpyHeader> header = HeaderParser(text).parse();
  if (!header)
    return error("has a " + header.message() + " (header: " + printableExcerpt(text) + ")");

  const FileElementType* element = nullptr;
  for (const FileElementType& readable : kReadable)
    if (*header->descr == readable.descr)
      element = &readable;
  if (!element)
    return error("has dtype '" + printableExcerpt(*header->descr) +
                 "'; read are little-endian '<f2', '<f4', '<f8', '<i8', '<i4' and '|b1'");
  if (*header->fortranOrder)
    return error("is in Fortran order; save a C-order array (np.ascontiguousarray)");
  int64_t count = checkedElementCount(*header->shape);
  if (count < 0)
    return error("has shape " + shapeToString(*header->shape) + ", more elements than a tensor may hold");

  size_t dataStart = headerStart + headerLength;
  size_t expected = size_t(count) * element->fileBytes;
  size_t available = bytes.size() - dataStart;
  if (available < expected)
    return error("is truncated: shape " + shapeToString(*header->shape) + " of " + element->descr + " needs " +
                 std::to_string(expected) + " data bytes but the file has " + std::to_string(available));
  if (available > expected)
    return error("has " + std::to_string(available - expected) + " bytes after its data");

  Expected<Tensor> tensor = Tensor::allocate(element->dtype, *header->shape);
  if (!tensor)
    return error("could not be allocated: " + tensor.message());
  const uint8_t* data = bytes.data() + dataStart;
  if (element->fileBytes == dtypeSize(element->dtype) && element->dtype != DType::I1) {
    std::memcpy(tensor->bytes(), data, expected);
  } else if (element->dtype == DType::I1) {
    std::span<uint8_t> flags = tensor->elements<uint8_t>();
    for (int64_t i = 0; i < count; ++i)
      flags[size_t(i)] = data[i] ? 1 : 0;
  } else { // <i4 widened
    std::span<int64_t> values = tensor->elements<int64_t>();
    for (int64_t i = 0; i < count; ++i) {
      int32_t value;
      std::memcpy(&value, data + 4 * i, 4);
      values[size_t(i)] = value;
    }
  }
  return tensor;
}

Expected<Tensor> readNpy(const std::string& path) {
  Expected<std::string> bytes = readWholeFile(path);
  if (!bytes.ok())
    return bytes.status();
  return parseNpy(bytesOf(*bytes), path);
}

Status writeNpy(const std::string& path, const Tensor& tensor) {
  if (tensor.device() != Device::Host)
    return Status::error("cannot write '" + path + "': the tensor is on the device (bring it to the host first)");
  const char* descr = nullptr;
  switch (tensor.dtype()) {
  case DType::F16: descr = "<f2"; break;
  case DType::F32: descr = "<f4"; break;
  case DType::BF16: descr = "<f4"; break;
  case DType::F64: descr = "<f8"; break;
  case DType::I64: descr = "<i8"; break;
  case DType::I1: descr = "|b1"; break;
  }
  std::string shape = "(";
  for (int64_t dim : tensor.shape())
    shape += std::to_string(dim) + ", ";
  if (tensor.rank() > 1)
    shape.resize(shape.size() - 2);
  else if (tensor.rank() == 1)
    shape.pop_back();
  shape += ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // np.save pads the header with spaces and a newline so the data starts at a
  // multiple of 64 bytes (magic 6 + version 2 + length 2 = 10).
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';

  std::vector<uint8_t> out(kMagic, kMagic + sizeof kMagic);
  out.insert(out.end(), {1, 0, uint8_t(header.size() & 0xFF), uint8_t(header.size() >> 8)});
  out.insert(out.end(), header.begin(), header.end());
  if (tensor.dtype() == DType::BF16) {
    for (uint16_t bits : tensor.bits16()) {
      float value = bfloat16ToFloat(bits);
      const uint8_t* raw = reinterpret_cast<const uint8_t*>(&value);
      out.insert(out.end(), raw, raw + sizeof value);
    }
  } else {
    const uint8_t* raw = reinterpret_cast<const uint8_t*>(tensor.bytes());
    out.insert(out.end(), raw, raw + tensor.byteSize());
  }
  return writeFileAtomically(path, out);
}

} // namespace ampjit::runtime
