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
#include <string_view>

namespace ampjit::runtime {

inline constexpr uint64_t kFnv1a64OffsetBasis = 0xcbf29ce484222325ull;

/// `seed` other than the offset basis gives an independent second hash of the
/// same bytes (the NVRTC cache's key is two).
constexpr uint64_t fnv1a64(std::span<const uint8_t> bytes, uint64_t seed = kFnv1a64OffsetBasis) {
  uint64_t hash = seed;
  for (uint8_t byte : bytes) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

constexpr uint64_t fnv1a64(std::string_view text, uint64_t seed = kFnv1a64OffsetBasis) {
  uint64_t hash = seed;
  for (char c : text) {
    hash ^= uint8_t(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_FNV1A_H
