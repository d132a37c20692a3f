#ifndef AMPJIT_TESTS_EMULATION_EMULATEDELEMENTS_H
#define AMPJIT_TESTS_EMULATION_EMULATEDELEMENTS_H

// Reading and writing one element of a library operand by its storage type,
// shared by the host models of the CUDA libraries (EmulatedCublasLt.h,
// EmulatedCudnn.h), which each map their own data-type enum onto it.
//
// Test-only: never part of a shipped binary.

#include "ampjit/runtime/LowPrecision.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ampjit::emulation {

enum class ElementStorage { F16, BF16, F32, F64 };

inline std::size_t bytesOf(ElementStorage storage) {
  switch (storage) {
  case ElementStorage::F16:
  case ElementStorage::BF16: return 2;
  case ElementStorage::F32: return 4;
  default: return 8;
  }
}

inline double loadElement(ElementStorage storage, const void* base, int64_t index) {
  const auto* bytes = static_cast<const std::byte*>(base) + index * int64_t(bytesOf(storage));
  switch (storage) {
  case ElementStorage::F16: {
    uint16_t bits;
    std::memcpy(&bits, bytes, 2);
    return runtime::halfToFloat(bits);
  }
  case ElementStorage::BF16: {
    uint16_t bits;
    std::memcpy(&bits, bytes, 2);
    return runtime::bfloat16ToFloat(bits);
  }
  case ElementStorage::F32: {
    float value;
    std::memcpy(&value, bytes, 4);
    return value;
  }
  default: {
    double value;
    std::memcpy(&value, bytes, 8);
    return value;
  }
  }
}

/// Stores `value`, already in the compute type's precision (f32 for the
/// 16-bit types), rounding it once to the storage type.
inline void storeElement(ElementStorage storage, void* base, int64_t index, double value) {
  auto* bytes = static_cast<std::byte*>(base) + index * int64_t(bytesOf(storage));
  switch (storage) {
  case ElementStorage::F16: {
    uint16_t bits = runtime::floatToHalf(float(value));
    std::memcpy(bytes, &bits, 2);
    break;
  }
  case ElementStorage::BF16: {
    uint16_t bits = runtime::floatToBFloat16(float(value));
    std::memcpy(bytes, &bits, 2);
    break;
  }
  case ElementStorage::F32: {
    float single = float(value);
    std::memcpy(bytes, &single, 4);
    break;
  }
  default: std::memcpy(bytes, &value, 8); break;
  }
}

/// f32 with its mantissa rounded to TF32's 10 bits, to nearest (ties away),
/// as tensor cores take f32 inputs; infinities and NaN pass unchanged.
inline float roundToTf32(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7f800000u) != 0x7f800000u)
    bits = (bits + 0x1000u) & ~0x1fffu;
  std::memcpy(&value, &bits, 4);
  return value;
}

} // namespace ampjit::emulation

#endif // AMPJIT_TESTS_EMULATION_EMULATEDELEMENTS_H
