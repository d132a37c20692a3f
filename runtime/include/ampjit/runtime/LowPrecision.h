#ifndef AMPJIT_RUNTIME_LOWPRECISION_H
#define AMPJIT_RUNTIME_LOWPRECISION_H

// Exact conversions between fp32/fp64 and the 16-bit float formats.
//
// The scalar functions use no F16C, AVX512-FP16, NEON fp16 or _Float16: the
// CPU backend is the numerical reference for the CUDA backend and must give
// the same bits on every host and with every compiler. (The bulk functions at
// the end may use an instruction where it is proven to give those bits.)
// Narrowing rounds to nearest, ties to even, like CUDA's __float2half_rn /
// __float2bfloat16_rn, so CPU and GPU results can be compared bitwise.
//
// The work is integer bit manipulation, except that the f16 subnormal range
// borrows the FPU's normaliser (widening) and shifter (narrowing) through a
// few floating-point operations that are exact. Exact operations give the same
// result under every rounding mode and flush-to-zero setting, and raise no
// exception other than inexact; a test runs the conversions under each of
// them. Without them the SSE2 baseline needs a leading-zero count and per-lane
// variable shifts, which it lacks: the pure-integer versions measured 4x
// (widening) and 2x (narrowing) slower per element.
//
// The scalar functions are inline so that CPU kernels can convert inside their
// own loops and still vectorise. Each computes every path and picks one with
// bit masks rather than `?:`: GCC turns a conditional around a floating-point
// operation into a branch it cannot vectorise (the operation might trap).

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
  uint32_t magnitude = halfBits & 0x7FFFu;
  uint32_t exponent = magnitude & 0x7C00u;

  // Normal numbers only need the exponent rebiased; infinities and NaNs need
  // their all-ones exponent kept all ones, mantissa (payload) untouched.
  uint32_t normalBits = (magnitude << 13) + ((127u - 15u) << 23);
  uint32_t infOrNanBits = normalBits + ((128u - 16u) << 23);

  // A subnormal is mantissa * 2^-24, an f32 normal. Writing the mantissa into
  // the low bits of 0.5f gives 0.5 + mantissa * 2^-24; subtracting 0.5 leaves
  // the value, normalised by the FPU. The subtraction is exact (Sterbenz), so
  // neither the rounding mode nor flush-to-zero can change it (all operands
  // and results are normal), except that rounding downward makes 0.5 - 0.5 a
  // -0: the sign bit is cleared for that reason. Other lanes compute a
  // harmless value in [0, 0.5) that is masked away.
  float shiftedUp = std::bit_cast<float>(magnitude | (126u << 23));
  uint32_t subnormalBits = std::bit_cast<uint32_t>(shiftedUp - 0.5f) & 0x7FFFFFFFu;

  uint32_t subnormalMask = 0u - uint32_t(exponent == 0);
  uint32_t infOrNanMask = 0u - uint32_t(exponent == 0x7C00u);
  uint32_t normalMask = ~(subnormalMask | infOrNanMask);
  uint32_t floatBits =
      sign | (subnormalBits & subnormalMask) | (infOrNanBits & infOrNanMask) | (normalBits & normalMask);
  return std::bit_cast<float>(floatBits);
}

/// Round to nearest even. Magnitudes >= 65520 (half an ulp above the largest
/// finite f16, 65504) become infinity; f16 subnormals are produced exactly,
/// and magnitudes <= 2^-25 become zero of the same sign. A NaN stays a NaN
/// with its sign, the quiet bit set and the top 9 payload bits kept.
constexpr uint16_t floatToHalf(float value) {
  constexpr int32_t kFloatInfinity = 0x7F800000;
  constexpr int32_t kOverflowThreshold = 0x477FF000; // 65520.0f
  constexpr int32_t kSmallestNormalHalf = 0x38800000; // 2^-14

  uint32_t floatBits = std::bit_cast<uint32_t>(value);
  uint32_t sign = (floatBits >> 16) & 0x8000u;
  uint32_t magnitude = floatBits & 0x7FFFFFFFu;
  // Compared as signed: the magnitude is below 2^31, and SSE2 has no unsigned
  // vector compare.
  int32_t orderedMagnitude = int32_t(magnitude);

  uint32_t nanBits = 0x7E00u | ((magnitude >> 13) & 0x3FFu);

  // Rebias the exponent and round away the low 13 mantissa bits. A carry out
  // of the mantissa correctly bumps the exponent. Only meaningful for
  // magnitudes in [2^-14, 65520); elsewhere the unsigned arithmetic wraps
  // harmlessly and the result is masked away.
  uint32_t rebiased = magnitude - ((127u - 15u) << 23);
  uint32_t normalBits = (rebiased + 0xFFFu + ((rebiased >> 13) & 1u)) >> 13;

  // Below 2^-14 the result is |value| * 2^24 rounded to an integer (up to
  // 1024, which is the encoding of 2^-14, so rounding up out of the subnormal
  // range needs no special case). |value| * 2^25 is exact (a power-of-two
  // scaling whose result, if nonzero, is an f32 normal) and the truncating
  // conversion ignores the rounding mode, giving the integer part and the
  // rounding bit; whether the conversion dropped anything is the sticky bit.
  // Flush-to-zero cannot matter: f32 subnormals round to zero either way.
  // Other lanes convert 0, so the conversion never overflows.
  uint32_t subnormalMask = 0u - uint32_t(orderedMagnitude < kSmallestNormalHalf);
  float doubledUnits = std::bit_cast<float>(magnitude & subnormalMask) * 0x1p25f;
  int32_t truncatedDoubledUnits = int32_t(doubledUnits);
  uint32_t sticky = uint32_t(doubledUnits != float(truncatedDoubledUnits));
  uint32_t doubled = uint32_t(truncatedDoubledUnits);
  uint32_t subnormalBits = (doubled + (sticky | ((doubled >> 1) & 1u))) >> 1;

  uint32_t nanMask = 0u - uint32_t(orderedMagnitude > kFloatInfinity);
  uint32_t overflowMask = 0u - uint32_t(orderedMagnitude >= kOverflowThreshold);
  uint32_t finiteBits = (subnormalBits & subnormalMask) | (normalBits & ~subnormalMask);
  uint32_t notNanBits = (0x7C00u & overflowMask) | (finiteBits & ~overflowMask);
  uint32_t halfBits = (nanBits & nanMask) | (notNanBits & ~nanMask);
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
// scalar functions element by element. `in` and `out` must not overlap. On an
// x86-64 CPU with AVX2 (and F16C for f16) they run vector code chosen once per
// process (LowPrecision.cpp says why F16C gives the same bits);
// the switch AMPJIT_CPU_PORTABLE_CONVERSIONS keeps the portable loops.
void widenHalf(const uint16_t* in, float* out, std::size_t n);
void narrowToHalf(const float* in, uint16_t* out, std::size_t n);
void widenBFloat16(const uint16_t* in, float* out, std::size_t n);
void narrowToBFloat16(const float* in, uint16_t* out, std::size_t n);
/// values[i] = halfToFloat(floatToHalf(values[i])): what an f16 register holds.
void roundToHalf(float* values, std::size_t n);
/// values[i] = bfloat16ToFloat(floatToBFloat16(values[i])).
void roundToBFloat16(float* values, std::size_t n);
/// Which bulk code this process runs: "portable", "avx2" (bf16 only) or "avx2+f16c".
const char* bulkConversionPath();

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_LOWPRECISION_H
