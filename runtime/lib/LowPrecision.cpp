#include "ampjit/runtime/LowPrecision.h"

namespace ampjit::runtime {

namespace {

/// Rounds an f64 to nearest even in a 16-bit IEEE-style format with the given
/// field widths, directly from the f64 bits. f16 and bf16 differ only in the
/// widths, so one routine keeps their special cases from drifting apart.
/// Scalar and branchy: f64 narrowing is rare (constants, host-side values),
/// unlike the f32 paths that kernels run per element.
template <int ExponentBits, int MantissaBits>
uint16_t roundDoubleTo16BitFloat(double value) {
  static_assert(1 + ExponentBits + MantissaBits == 16);
  constexpr int kBias = (1 << (ExponentBits - 1)) - 1;
  constexpr int kDroppedBits = 52 - MantissaBits;
  constexpr uint64_t kMantissaMask = (uint64_t(1) << MantissaBits) - 1;
  constexpr uint64_t kInfinity = uint64_t((1 << ExponentBits) - 1) << MantissaBits;
  constexpr uint64_t kQuietBit = uint64_t(1) << (MantissaBits - 1);

  uint64_t doubleBits = std::bit_cast<uint64_t>(value);
  uint64_t sign = (doubleBits >> 63) << 15;
  uint64_t magnitude = doubleBits & 0x7FFF'FFFF'FFFF'FFFFu;

  if (magnitude > 0x7FF0'0000'0000'0000u)
    return uint16_t(sign | kInfinity | kQuietBit | ((magnitude >> kDroppedBits) & kMantissaMask));

  // f64 subnormals come out as -1023 and take the underflow-to-zero path.
  int exponent = int(magnitude >> 52) - 1023;
  if (exponent > kBias) // at least 2^(bias+1), past every finite value (f64 infinity included)
    return uint16_t(sign | kInfinity);

  if (exponent >= 1 - kBias) {
    // Normal target: rebias, then drop the low bits. A carry out of the
    // mantissa moves to the next binade, and from the largest binade into the
    // infinity encoding, which is the correct overflow.
    uint64_t rebiased = magnitude - (uint64_t(1023 - kBias) << 52);
    uint64_t lsb = (rebiased >> kDroppedBits) & 1;
    uint64_t rounded = (rebiased + ((uint64_t(1) << (kDroppedBits - 1)) - 1) + lsb) >> kDroppedBits;
    return uint16_t(sign | rounded);
  }

  // Subnormal target: express the value in units of the smallest subnormal,
  // 2^(1 - bias - mantissaBits), and round that integer to nearest even.
  int shift = 53 - kBias - MantissaBits - exponent;
  if (shift > 53) // below half the smallest subnormal (the tie at exactly half goes to zero, handled below)
    return uint16_t(sign);
  uint64_t significand = (magnitude & 0x000F'FFFF'FFFF'FFFFu) | (uint64_t(1) << 52);
  uint64_t lsb = (significand >> shift) & 1;
  uint64_t rounded = (significand + ((uint64_t(1) << (shift - 1)) - 1) + lsb) >> shift;
  return uint16_t(sign | rounded);
}

} // namespace

uint16_t doubleToHalf(double value) { return roundDoubleTo16BitFloat<5, 10>(value); }

uint16_t doubleToBFloat16(double value) { return roundDoubleTo16BitFloat<8, 7>(value); }

// Plain indexed loops over the inline scalar conversions, which are branch-free
// so that these loops vectorise (GCC: at -O3, or -O2 with the cost model that
// runtime/CMakeLists.txt sets for this file).

void widenHalf(const uint16_t* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = halfToFloat(in[i]);
}

void narrowToHalf(const float* in, uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = floatToHalf(in[i]);
}

void widenBFloat16(const uint16_t* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = bfloat16ToFloat(in[i]);
}

void narrowToBFloat16(const float* in, uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = floatToBFloat16(in[i]);
}

} // namespace ampjit::runtime
