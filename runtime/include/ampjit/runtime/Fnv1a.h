#ifndef AMPJIT_RUNTIME_FNV1A_H
#define AMPJIT_RUNTIME_FNV1A_H

// 64-bit FNV-1a, the one hash behind everything ampjit names or checks across
// processes and machines: plan and state files' checksums, the NVRTC cache's
// keys and entries, generated kernels' names, GEMM tuning records, a policy's
// hash. Two constants define it, so it gives the same value on every platform
// and in every run, which std::hash does not promise. It detects corruption;
// it does not resist tampering. Header-only and free of other dependencies,
// because the AMP policy library hashes with it and does not link the runtime.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ampjit::runtime {

inline constexpr uint64_t kFnv1a64OffsetBasis = 0xcbf29ce484222325ull;

namespace detail {
/// The one loop, over bytes or chars; a char above 0x7f hashes as the byte it is.
template <typename Byte> constexpr uint64_t fnv1a64Over(std::span<const Byte> bytes, uint64_t seed) {
  uint64_t hash = seed;
  for (Byte byte : bytes) {
    hash ^= uint8_t(byte);
    hash *= 0x100000001b3ull;
  }
  return hash;
}
} // namespace detail

/// `seed` other than the offset basis gives an independent second hash of the
/// same bytes (the NVRTC cache's key is two).
constexpr uint64_t fnv1a64(std::span<const uint8_t> bytes, uint64_t seed = kFnv1a64OffsetBasis) {
  return detail::fnv1a64Over(bytes, seed);
}

constexpr uint64_t fnv1a64(std::string_view text, uint64_t seed = kFnv1a64OffsetBasis) {
  return detail::fnv1a64Over(std::span<const char>(text.data(), text.size()), seed);
}

/// A hash as names, keys and files spell it: 16 lowercase hex digits, the
/// leading zeros kept, so every spelling of a 64-bit hash has one length.
inline std::string hex64(uint64_t value) {
  std::string text(16, '0');
  for (int digit = 15; digit >= 0; --digit, value >>= 4)
    text[size_t(digit)] = "0123456789abcdef"[value & 0xf];
  return text;
}

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_FNV1A_H
