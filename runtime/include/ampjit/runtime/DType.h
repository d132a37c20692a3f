#ifndef AMPJIT_RUNTIME_DTYPE_H
#define AMPJIT_RUNTIME_DTYPE_H

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace ampjit::runtime {

/// Element types a runtime buffer can hold. The names match the MLIR element
/// types (f32, bf16, i1, ...) so plans and IR print the same spelling.
enum class DType { F32, F64, F16, BF16, I64, I1 };

/// Every DType, in declaration order, so tests and parsers cannot miss one.
inline constexpr std::array<DType, 6> allDTypes = {DType::F32, DType::F64, DType::F16,
                                                   DType::BF16, DType::I64, DType::I1};

// The switches below have no `default:` so that -Wswitch points at each of
// them when an enumerator is added; the trailing return only covers values
// cast from out-of-range integers.

constexpr std::string_view dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32: return "f32";
  case DType::F64: return "f64";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::I64: return "i64";
  case DType::I1: return "i1";
  }
  return "<invalid dtype>";
}

/// The inverse of dtypeName; nullopt for any other spelling (no aliases such
/// as "float" or "half", so a plan file has exactly one way to say a type).
constexpr std::optional<DType> parseDType(std::string_view name) {
  for (DType dtype : allDTypes)
    if (dtypeName(dtype) == name)
      return dtype;
  return std::nullopt;
}

/// Bytes per element in a runtime buffer. i1 takes a whole byte: kernels
/// address booleans individually and never bit-pack them.
constexpr std::size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F32: return 4;
  case DType::F64: return 8;
  case DType::F16: return 2;
  case DType::BF16: return 2;
  case DType::I64: return 8;
  case DType::I1: return 1;
  }
  return 0;
}

constexpr bool isFloating(DType dtype) {
  switch (dtype) {
  case DType::F32:
  case DType::F64:
  case DType::F16:
  case DType::BF16: return true;
  case DType::I64:
  case DType::I1: return false;
  }
  return false;
}

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_DTYPE_H
