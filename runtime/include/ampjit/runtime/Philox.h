#ifndef AMPJIT_RUNTIME_PHILOX_H
#define AMPJIT_RUNTIME_PHILOX_H

// The counter-based random stream of jit.dropout, specified here so every
// backend draws the same numbers (a CUDA kernel includes the same
// arithmetic): Philox-4x32-10 (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC'11; the generator of cuRAND and PyTorch's CUDA RNG).
//
// With rng_state = [seed, offset], element i of a dropout draws the 32-bit
// number at stream position e = offset + i: the output lane e % 4 of Philox
// applied to the counter (e / 4 as a 64-bit value in words 0-1, 0 in words
// 2-3) under the key seed (low word first). It becomes u = (bits >> 8) *
// 2^-24, uniform in [0, 1), and the element is kept when u >= p. The state
// then advances by the element count, so consecutive dropouts never reuse a
// position and replaying a step with the same state reproduces its mask.

#include <array>
#include <cstdint>

namespace ampjit::runtime {

/// Philox-4x32 with 10 rounds.
constexpr std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    uint64_t product0 = uint64_t(kMultiplier0) * counter[0];
    uint64_t product1 = uint64_t(kMultiplier1) * counter[2];
    counter = {uint32_t(product1 >> 32) ^ counter[1] ^ key[0], uint32_t(product1),
               uint32_t(product0 >> 32) ^ counter[3] ^ key[1], uint32_t(product0)};
  }
  return counter;
}

/// The 32 random bits at stream position `position` for `seed`.
constexpr uint32_t philoxBitsAt(uint64_t seed, uint64_t position) {
  uint64_t block = position / 4;
  std::array<uint32_t, 4> out = philox4x32({uint32_t(block), uint32_t(block >> 32), 0, 0},
                                           {uint32_t(seed), uint32_t(seed >> 32)});
  return out[position % 4];
}

/// Uniform in [0, 1) with 24 random bits (exact in float and double).
constexpr double philoxUniform(uint32_t bits) { return double(bits >> 8) * 0x1p-24; }

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_PHILOX_H
