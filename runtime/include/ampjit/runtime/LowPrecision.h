#ifndef AMPJIT_RUNTIME_LOWPRECISION_H
#define AMPJIT_RUNTIME_LOWPRECISION_H

// Exact conversions between fp32/fp64 and the 16-bit float formats.
//
// Everything here is integer bit manipulation, not F16C, AVX512-FP16 or
// _Float16: the CPU backend is the numerical reference for the CUDA backend
// and must give the same bits on every host and with every compiler flag.
// Narrowing rounds to nearest, ties to even, like the CUDA __float2half_rn /
// __float2bfloat16_rn intrinsics, so CPU and GPU results can be compared
// bitwise.
//
// The scalar functions are inline so that CPU kernels can convert inside their
// own loops and still vectorise; they are written without branches (each path
// is computed and one is selected) for the same reason.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ampjit::runtime {

/// IEEE binary16 storage: 1 sign, 5 exponent, 10 mantissa bits.
struct Half {
  uint16_t bits;
};

/// bfloat16 storage: the upper half of an fp32 (1 sign, 8 exponent, 7 mantissa bits).
struct BFloat16 {
  uint16_t bits;
};

// Buffers are reinterpreted as arrays of these, so the layout must be exactly
// the 16 bits.
static_assert(sizeof(Half) == 2 && std::is_trivially_copyable_v<Half>);
static_assert(sizeof(BFloat16) == 2 && std::is_trivially_copyable_v<BFloat16>);

/// Exact: every f16 value is an f32 value. A NaN keeps its sign and payload
/// (a signalling NaN stays signalling), so widening never loses information.
constexpr float halfToFloat(uint16_t halfBits) {
  uint32_t sign = uint32_t(halfBits & 0x8000u) << 16;
  uint32_t exponent = (halfBits >> 10) & 0x1Fu;
  uint32_t mantissa = halfBits & 0x3FFu;

  uint32_t normalBits = sign | ((exponent + (127u - 15u)) << 23) | (mantissa << 13);
  uint32_t infOrNanBits = sign | 0x7F800000u | (mantissa << 13);

  // An f16 subnormal, mantissa * 2^-24, is an f32 normal: shift the mantissa
  // left until its leading one reaches bit 10 (the implicit-bit position),
  // lowering the exponent by the shift. The shift is found by a fixed binary
  // search with constant shifts rather than a leading-zero count or an
  // int-to-float conversion: both of those stop GCC from vectorising the
  // loops that call this (no vector lzcnt before AVX-512; a float operation
  // cannot be if-converted under the default -ftrapping-math).
  uint32_t normalized = mantissa;
  uint32_t leftShift = 0;
  bool below8 = normalized < (1u << 3);
  normalized = below8 ? normalized << 8 : normalized;
  leftShift += below8 ? 8u : 0u;
  bool below4 = normalized < (1u << 7);
  normalized = below4 ? normalized << 4 : normalized;
  leftShift += below4 ? 4u : 0u;
  bool below2 = normalized < (1u << 9);
  normalized = below2 ? normalized << 2 : normalized;
  leftShift += below2 ? 2u : 0u;
  bool below1 = normalized < (1u << 10);
  normalized = below1 ? normalized << 1 : normalized;
  leftShift += below1 ? 1u : 0u;
  // mantissa * 2^-24 = (normalized / 2^10) * 2^(10 - leftShift - 24); the f32
  // biased exponent is therefore 127 - 14 - leftShift.
  uint32_t subnormalBits = sign | ((113u - leftShift) << 23) | ((normalized & 0x3FFu) << 13);

  uint32_t floatBits = exponent == 0 ? (mantissa == 0 ? sign : subnormalBits)
                       : exponent == 0x1F ? infOrNanBits
                                          : normalBits;
  return std::bit_cast<float>(floatBits);
}

/// Round to nearest even. Magnitudes >= 65520 (half an ulp above the largest
/// finite f16, 65504) become infinity; f16 subnormals are produced exactly,
/// and magnitudes <= 2^-25 become zero of the same sign. A NaN stays a NaN
/// with its sign, the quiet bit set and the top 9 payload bits kept.
constexpr uint16_t floatToHalf(float value) {
  uint32_t floatBits = std::bit_cast<uint32_t>(value);
  uint32_t sign = (floatBits >> 16) & 0x8000u;
  uint32_t magnitude = floatBits & 0x7FFFFFFFu;

  constexpr uint32_t kFloatInfinity = 0x7F800000u;
  constexpr uint32_t kOverflowThreshold = 0x477FF000u; // 65520.0f
  constexpr uint32_t kSmallestNormalHalf = 0x38800000u; // 2^-14

  uint32_t nanBits = 0x7E00u | ((magnitude >> 13) & 0x3FFu);

  // Rebias the exponent and round away the low 13 mantissa bits. A carry out
  // of the mantissa correctly bumps the exponent. Only meaningful for
  // magnitudes in [2^-14, 65520); elsewhere the unsigned arithmetic wraps
  // harmlessly and the result is not selected.
  uint32_t rebiased = magnitude - ((127u - 15u) << 23);
  uint32_t normalBits = (rebiased + 0xFFFu + ((rebiased >> 13) & 1u)) >> 13;

  // Below 2^-14 the f16 value is an integer multiple of 2^-24: shift the full
  // significand (implicit bit included) right by 126 - exponent so its units
  // are 2^-24, rounding to nearest even. Rounding up to 1024 yields the
  // encoding of 2^-14, the smallest normal, as it should. SSE2 has no
  // per-lane variable shift, so the variable part (1..12 bits) is done as
  // conditional constant shifts that collect the shifted-out bits into a
  // sticky bit, and the last 13 bits are rounded with a constant shift. The
  // shift is clamped to [14, 25]: 25 already turns everything below 2^-25
  // (f32 subnormals included) into zero, and lanes where this path is not
  // selected stay well defined.
  uint32_t exponent = magnitude >> 23;
  uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  int32_t unclampedShift = 126 - int32_t(exponent);
  uint32_t variableShift = uint32_t(unclampedShift < 14 ? 14 : unclampedShift > 25 ? 25 : unclampedShift) - 13;
  uint32_t sticky = 0;
  bool shift8 = (variableShift & 8u) != 0;
  sticky |= shift8 ? significand & 0xFFu : 0u;
  significand = shift8 ? significand >> 8 : significand;
  bool shift4 = (variableShift & 4u) != 0;
  sticky |= shift4 ? significand & 0xFu : 0u;
  significand = shift4 ? significand >> 4 : significand;
  bool shift2 = (variableShift & 2u) != 0;
  sticky |= shift2 ? significand & 0x3u : 0u;
  significand = shift2 ? significand >> 2 : significand;
  bool shift1 = (variableShift & 1u) != 0;
  sticky |= shift1 ? significand & 0x1u : 0u;
  significand = shift1 ? significand >> 1 : significand;
  // Bit 0 lies below the rounding bit (bit 12), so OR-ing the sticky bit into
  // it breaks exact-looking ties the way the discarded bits would have.
  significand |= sticky != 0 ? 1u : 0u;
  uint32_t subnormalBits = (significand + 0xFFFu + ((significand >> 13) & 1u)) >> 13;

  uint32_t halfBits = magnitude > kFloatInfinity        ? nanBits
                      : magnitude >= kOverflowThreshold ? 0x7C00u
                      : magnitude >= kSmallestNormalHalf ? normalBits
                                                         : subnormalBits;
  return uint16_t(sign | halfBits);
}

/// Exact: a bfloat16 is the upper half of an f32 (NaN payloads kept).
constexpr float bfloat16ToFloat(uint16_t bfloat16Bits) {
  return std::bit_cast<float>(uint32_t(bfloat16Bits) << 16);
}

/// Round to nearest even. bfloat16 has f32's exponent range, so the only
/// overflow is rounding up past 0x7F7F (largest finite) into infinity, and f32
/// subnormals round like any other value. A NaN becomes a quiet NaN with the
/// same sign and top payload bits; it is never rounded into infinity.
constexpr uint16_t floatToBFloat16(float value) {
  uint32_t floatBits = std::bit_cast<uint32_t>(value);
  uint32_t lsb = (floatBits >> 16) & 1u;
  uint32_t roundedBits = (floatBits + 0x7FFFu + lsb) >> 16;
  uint32_t quietNanBits = (floatBits >> 16) | 0x0040u;
  bool isNan = (floatBits & 0x7FFFFFFFu) > 0x7F800000u;
  return uint16_t(isNan ? quietNanBits : roundedBits);
}

/// Round an f64 straight to f16/bf16 (nearest even), with the same special
/// cases as the f32 versions. Rounding once matters: going through f32 first
/// can land exactly on an f16 tie that the f64 value was not on, and then
/// round the wrong way.
uint16_t doubleToHalf(double value);
uint16_t doubleToBFloat16(double value);

// Bulk conversions of n contiguous elements; bit-identical to calling the
// scalar functions element by element, and compiled so that the loops
// vectorise. `in` and `out` must not overlap.
void widenHalf(const uint16_t* in, float* out, std::size_t n);
void narrowToHalf(const float* in, uint16_t* out, std::size_t n);
void widenBFloat16(const uint16_t* in, float* out, std::size_t n);
void narrowToBFloat16(const float* in, uint16_t* out, std::size_t n);

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_LOWPRECISION_H
