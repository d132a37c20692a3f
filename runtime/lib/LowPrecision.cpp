#include "ampjit/runtime/LowPrecision.h"

#include "ampjit/runtime/Environment.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

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
// runtime/CMakeLists.txt sets for this file). These are the portable versions;
// on x86-64 the bulk entry points below pick faster ones once per process.

namespace {

namespace portable {

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

void roundToHalf(float* values, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    values[i] = halfToFloat(floatToHalf(values[i]));
}

void roundToBFloat16(float* values, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    values[i] = bfloat16ToFloat(floatToBFloat16(values[i]));
}

} // namespace portable

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AMPJIT_LOW_PRECISION_X86_PATHS 1

// Why F16C may be used although the header rules it out for the scalar
// functions: VCVTPS2PH with an immediate rounding control of 0 rounds to
// nearest even whatever MXCSR says, ignores flush-to-zero, and quiets a NaN by
// setting its top mantissa bit while keeping the rest of the payload that
// fits, which is floatToHalf's rule; an f32 subnormal that denormals-are-zero
// would zero rounds to a signed f16 zero either way. LowPrecisionTest's sweeps
// check the bulk functions against the scalar ones on every f32 and f16 input
// (the f16 sweep needs F16C for its reference), and
// ConversionsGiveTheSameBitsInEveryFloatingPointEnvironment checks that both
// give the same bits under every rounding mode and FTZ/DAZ setting, on a
// spread of inputs and every 16-bit pattern.
//
// VCVTPH2PS is exact, but it quiets a signalling NaN, which halfToFloat keeps
// signalling: those lanes get the quiet bit cleared again.

namespace x86 {

constexpr int kRoundToNearestEven = 0; // VCVTPS2PH imm8: RC = 00, MXCSR.RC not used

__attribute__((target("avx2,f16c"))) inline __m256 widenEightHalves(__m128i halves) {
  __m256 widened = _mm256_cvtph_ps(halves);
  __m128i exponentAndQuiet = _mm_and_si128(halves, _mm_set1_epi16(0x7E00));
  __m128i payload = _mm_and_si128(halves, _mm_set1_epi16(0x01FF));
  __m128i signalling = _mm_andnot_si128(_mm_cmpeq_epi16(payload, _mm_setzero_si128()),
                                        _mm_cmpeq_epi16(exponentAndQuiet, _mm_set1_epi16(0x7C00)));
  __m256i quietBitToClear = _mm256_and_si256(_mm256_cvtepi16_epi32(signalling), _mm256_set1_epi32(0x00400000));
  return _mm256_castsi256_ps(_mm256_andnot_si256(quietBitToClear, _mm256_castps_si256(widened)));
}

__attribute__((target("avx2,f16c"))) void widenHalf(const uint16_t* in, float* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, widenEightHalves(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i)
    out[i] = halfToFloat(in[i]);
}

__attribute__((target("avx2,f16c"))) void narrowToHalf(const float* in, uint16_t* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), kRoundToNearestEven));
  for (; i < n; ++i)
    out[i] = floatToHalf(in[i]);
}

// A narrowed value is never a signalling NaN, so the plain widening is exact.
__attribute__((target("avx2,f16c"))) void roundToHalf(float* values, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(values + i,
                     _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(values + i), kRoundToNearestEven)));
  for (; i < n; ++i)
    values[i] = halfToFloat(floatToHalf(values[i]));
}

// bf16 has no conversion instruction before AVX512-BF16 (which rounds NaNs
// and flushes subnormals its own way); the portable integer code, twice as
// wide.
__attribute__((target("avx2"))) void widenBFloat16(const uint16_t* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = bfloat16ToFloat(in[i]);
}

__attribute__((target("avx2"))) void narrowToBFloat16(const float* in, uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = floatToBFloat16(in[i]);
}

__attribute__((target("avx2"))) void roundToBFloat16(float* values, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    values[i] = bfloat16ToFloat(floatToBFloat16(values[i]));
}

} // namespace x86
#endif

struct BulkConversions {
  void (*widenHalf)(const uint16_t*, float*, std::size_t) = portable::widenHalf;
  void (*narrowToHalf)(const float*, uint16_t*, std::size_t) = portable::narrowToHalf;
  void (*roundToHalf)(float*, std::size_t) = portable::roundToHalf;
  void (*widenBFloat16)(const uint16_t*, float*, std::size_t) = portable::widenBFloat16;
  void (*narrowToBFloat16)(const float*, uint16_t*, std::size_t) = portable::narrowToBFloat16;
  void (*roundToBFloat16)(float*, std::size_t) = portable::roundToBFloat16;
  const char* name = "portable";
};

BulkConversions chooseBulkConversions() {
  BulkConversions chosen;
#ifdef AMPJIT_LOW_PRECISION_X86_PATHS
  if (environmentFlag("AMPJIT_CPU_PORTABLE_CONVERSIONS"))
    return chosen;
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    chosen.widenBFloat16 = x86::widenBFloat16;
    chosen.narrowToBFloat16 = x86::narrowToBFloat16;
    chosen.roundToBFloat16 = x86::roundToBFloat16;
    chosen.name = "avx2";
  }
  if (avx2 && __builtin_cpu_supports("f16c")) {
    chosen.widenHalf = x86::widenHalf;
    chosen.narrowToHalf = x86::narrowToHalf;
    chosen.roundToHalf = x86::roundToHalf;
    chosen.name = "avx2+f16c";
  }
#endif
  return chosen;
}

const BulkConversions& bulk() {
  static const BulkConversions chosen = chooseBulkConversions();
  return chosen;
}

} // namespace

void widenHalf(const uint16_t* in, float* out, std::size_t n) { bulk().widenHalf(in, out, n); }
void narrowToHalf(const float* in, uint16_t* out, std::size_t n) { bulk().narrowToHalf(in, out, n); }
void roundToHalf(float* values, std::size_t n) { bulk().roundToHalf(values, n); }
void widenBFloat16(const uint16_t* in, float* out, std::size_t n) { bulk().widenBFloat16(in, out, n); }
void narrowToBFloat16(const float* in, uint16_t* out, std::size_t n) { bulk().narrowToBFloat16(in, out, n); }
void roundToBFloat16(float* values, std::size_t n) { bulk().roundToBFloat16(values, n); }
const char* bulkConversionPath() { return bulk().name; }

} // namespace ampjit::runtime
