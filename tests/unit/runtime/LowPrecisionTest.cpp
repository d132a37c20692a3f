#include "ampjit/runtime/LowPrecision.h"
#include "ampjit/runtime/Environment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

// The references below must not share code with the library: f16 is checked
// against the compiler's own _Float16 conversions (libgcc soft-float, or the
// F16C instruction where the CPU has it), bf16 against a separately written
// integer formula, and f64 narrowing against an exact-midpoint search.
#if !defined(__FLT16_MAX__)
#error "these tests need a compiler with _Float16 (g++ >= 12 or clang on x86-64/AArch64)"
#endif

namespace {

using namespace ampjit::runtime;

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

bool halfIsNan(uint16_t bits) { return (bits & 0x7C00u) == 0x7C00u && (bits & 0x03FFu) != 0; }
bool bfloat16IsNan(uint16_t bits) { return (bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu) != 0; }
bool halfIsQuietNan(uint16_t bits) { return halfIsNan(bits) && (bits & 0x0200u) != 0; }
bool bfloat16IsQuietNan(uint16_t bits) { return bfloat16IsNan(bits) && (bits & 0x0040u) != 0; }
bool floatBitsAreNan(uint32_t bits) { return (bits & 0x7FFFFFFFu) > 0x7F800000u; }

//===----------------------------------------------------------------------===//
// References
//===----------------------------------------------------------------------===//

float referenceHalfToFloat(uint16_t bits) { return static_cast<float>(std::bit_cast<_Float16>(bits)); }

// libgcc's __truncsfhf2 takes ~70 ns a call here, which would make the 2^32
// sweep take minutes; the F16C instruction gives the same IEEE result in ~1 ns.
// Each variant converts a whole block so that the choice costs one indirect
// call per block, not per element.
void referenceNarrowToHalfSoftware(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i)
    out[i] = std::bit_cast<uint16_t>(static_cast<_Float16>(in[i]));
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("f16c"))) void referenceNarrowToHalfF16c(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i)
    out[i] = std::bit_cast<uint16_t>(static_cast<_Float16>(in[i]));
}
#endif

using BlockNarrowing = void (*)(const float*, uint16_t*, size_t);

/// The fastest available reference, or nullptr where only the slow software
/// conversion is available on an x86 CPU (pre-2013 hardware).
BlockNarrowing fastReferenceNarrowToHalf() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("f16c") ? referenceNarrowToHalfF16c : nullptr;
#else
  return referenceNarrowToHalfSoftware; // AArch64 converts _Float16 in hardware
#endif
}

/// Round-to-nearest-even written the textbook way (compare the discarded half
/// word against the halfway point), unlike the library's add-and-shift.
/// Not meaningful for NaN inputs.
uint16_t referenceFloatToBFloat16(uint32_t floatBits) {
  uint32_t kept = floatBits >> 16;
  uint32_t discarded = floatBits & 0xFFFFu;
  if (discarded > 0x8000u || (discarded == 0x8000u && (kept & 1u) != 0))
    ++kept;
  return static_cast<uint16_t>(kept);
}

/// Rounds an f64 to a 16-bit format by binary-searching the non-negative
/// encodings (ordered like their values) for the neighbours of |value| and
/// comparing against their midpoint, which is exact in f64. The encoding
/// after the largest finite one (infinity) stands for 2^(emax+1), where the
/// next binade would start, so overflow follows the IEEE rule. Not meaningful
/// for NaN inputs.
uint16_t referenceRoundDouble(double value, float (*widen)(uint16_t), uint16_t infinityBits, int mantissaBits) {
  auto valueOf = [&](uint16_t bits) -> double {
    if (bits == infinityBits)
      return 2.0 * static_cast<double>(widen(static_cast<uint16_t>(infinityBits - (1u << mantissaBits))));
    return static_cast<double>(widen(bits));
  };
  double magnitude = std::fabs(value);
  uint16_t sign = std::signbit(value) ? 0x8000u : 0u;
  if (magnitude >= valueOf(infinityBits))
    return sign | infinityBits;
  uint16_t low = 0, high = infinityBits; // invariant: valueOf(low) <= magnitude < valueOf(high)
  while (high - low > 1) {
    uint16_t middle = static_cast<uint16_t>((low + high) / 2);
    (valueOf(middle) <= magnitude ? low : high) = middle;
  }
  double midpoint = (valueOf(low) + valueOf(high)) / 2;
  uint16_t rounded = magnitude < midpoint ? low : magnitude > midpoint ? high : (low % 2 == 0 ? low : high);
  return sign | rounded;
}

uint16_t referenceDoubleToHalf(double value) { return referenceRoundDouble(value, halfToFloat, 0x7C00u, 10); }
uint16_t referenceDoubleToBFloat16(double value) {
  return referenceRoundDouble(value, bfloat16ToFloat, 0x7F80u, 7);
}

//===----------------------------------------------------------------------===//
// Exhaustive sweep over every f32 bit pattern
//===----------------------------------------------------------------------===//

struct Mismatch {
  uint32_t input;
  uint32_t actual;
  uint32_t expected;
  const char* what;
};

struct MismatchLog {
  uint64_t count = 0;
  std::vector<Mismatch> examples;
  void record(Mismatch mismatch) {
    ++count;
    if (examples.size() < 10)
      examples.push_back(mismatch);
  }
};

void reportMismatches(const MismatchLog& log) {
  EXPECT_EQ(log.count, 0u) << "f32 bit patterns that disagreed";
  for (const Mismatch& mismatch : log.examples)
    ADD_FAILURE() << mismatch.what << ": input " << hex(mismatch.input) << " gave " << hex(mismatch.actual)
                  << ", expected " << hex(mismatch.expected);
}

constexpr size_t kBlockSize = 4096;
constexpr uint64_t kChunkSize = uint64_t(1) << 22;
constexpr uint64_t kChunkCount = (uint64_t(1) << 32) / kChunkSize;
// Two threads bring the f16 sweep to a few seconds; the CI machines have two cores.
constexpr unsigned kSweepThreads = 2;

/// Calls checkBlock(firstBits, inputs, count, log) on consecutive blocks that
/// together cover all 2^32 f32 bit patterns, spread over kSweepThreads threads,
/// and returns every thread's mismatches merged in input order.
template <typename CheckBlock>
MismatchLog sweepAllFloatBitPatterns(CheckBlock checkBlock) {
  std::atomic<uint64_t> nextChunk{0};
  std::vector<std::vector<std::pair<uint64_t, MismatchLog>>> logsPerThread(kSweepThreads);
  auto work = [&](std::vector<std::pair<uint64_t, MismatchLog>>& chunkLogs) {
    alignas(64) std::array<float, kBlockSize> inputs;
    for (uint64_t chunk; (chunk = nextChunk.fetch_add(1)) < kChunkCount;) {
      MismatchLog chunkLog;
      for (uint64_t blockStart = chunk * kChunkSize; blockStart < (chunk + 1) * kChunkSize; blockStart += kBlockSize) {
        for (size_t i = 0; i < kBlockSize; ++i)
          inputs[i] = std::bit_cast<float>(static_cast<uint32_t>(blockStart + i));
        checkBlock(static_cast<uint32_t>(blockStart), inputs.data(), kBlockSize, chunkLog);
      }
      if (chunkLog.count != 0)
        chunkLogs.emplace_back(chunk, std::move(chunkLog));
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < kSweepThreads; ++t)
    threads.emplace_back(work, std::ref(logsPerThread[t]));
  work(logsPerThread[0]);
  for (std::thread& thread : threads)
    thread.join();

  std::vector<std::pair<uint64_t, MismatchLog>> chunkLogs;
  for (auto& logs : logsPerThread)
    for (auto& entry : logs)
      chunkLogs.push_back(std::move(entry));
  std::sort(chunkLogs.begin(), chunkLogs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  MismatchLog merged;
  for (const auto& [chunk, log] : chunkLogs) {
    merged.count += log.count;
    for (const Mismatch& mismatch : log.examples)
      if (merged.examples.size() < 10)
        merged.examples.push_back(mismatch);
  }
  return merged;
}

TEST(LowPrecision, NarrowingEveryFloatToHalfMatchesFloat16Conversion) {
  BlockNarrowing reference = fastReferenceNarrowToHalf();
  if (reference == nullptr)
    GTEST_SKIP() << "no F16C: the software _Float16 reference would take minutes over 2^32 inputs";

  MismatchLog log = sweepAllFloatBitPatterns([&](uint32_t firstBits, const float* inputs, size_t count,
                                                 MismatchLog& blockLog) {
    std::array<uint16_t, kBlockSize> expected, bulk;
    std::array<float, kBlockSize> rounded;
    reference(inputs, expected.data(), count);
    narrowToHalf(inputs, bulk.data(), count);
    std::copy(inputs, inputs + count, rounded.begin());
    roundToHalf(rounded.data(), count);
    for (size_t i = 0; i < count; ++i) {
      uint32_t inputBits = firstBits + static_cast<uint32_t>(i);
      uint16_t actual = floatToHalf(inputs[i]);
      if (bulk[i] != actual)
        blockLog.record({inputBits, bulk[i], actual, "narrowToHalf differs from floatToHalf"});
      uint32_t scalarRounded = std::bit_cast<uint32_t>(halfToFloat(actual));
      if (std::bit_cast<uint32_t>(rounded[i]) != scalarRounded)
        blockLog.record({inputBits, std::bit_cast<uint32_t>(rounded[i]), scalarRounded,
                         "roundToHalf differs from halfToFloat(floatToHalf)"});
      if (!floatBitsAreNan(inputBits)) {
        if (actual != expected[i])
          blockLog.record({inputBits, actual, expected[i], "floatToHalf"});
        continue;
      }
      // NaN: only NaN-ness and sign are specified by IEEE; this library also
      // promises a quiet NaN.
      bool sameSign = (actual & 0x8000u) == ((inputBits >> 16) & 0x8000u);
      if (!halfIsQuietNan(actual) || !sameSign)
        blockLog.record({inputBits, actual, expected[i], "floatToHalf of NaN is not a quiet NaN of the same sign"});
      if (!halfIsNan(expected[i]))
        blockLog.record({inputBits, expected[i], actual, "_Float16 reference lost a NaN"});
    }
  });
  reportMismatches(log);
}

TEST(LowPrecision, NarrowingEveryFloatToBFloat16MatchesIntegerRoundToNearestEven) {
  MismatchLog log = sweepAllFloatBitPatterns([](uint32_t firstBits, const float* inputs, size_t count,
                                                MismatchLog& blockLog) {
    std::array<uint16_t, kBlockSize> bulk;
    std::array<float, kBlockSize> rounded;
    narrowToBFloat16(inputs, bulk.data(), count);
    std::copy(inputs, inputs + count, rounded.begin());
    roundToBFloat16(rounded.data(), count);
    for (size_t i = 0; i < count; ++i) {
      uint32_t inputBits = firstBits + static_cast<uint32_t>(i);
      uint16_t actual = floatToBFloat16(inputs[i]);
      if (bulk[i] != actual)
        blockLog.record({inputBits, bulk[i], actual, "narrowToBFloat16 differs from floatToBFloat16"});
      uint32_t scalarRounded = std::bit_cast<uint32_t>(bfloat16ToFloat(actual));
      if (std::bit_cast<uint32_t>(rounded[i]) != scalarRounded)
        blockLog.record({inputBits, std::bit_cast<uint32_t>(rounded[i]), scalarRounded,
                         "roundToBFloat16 differs from bfloat16ToFloat(floatToBFloat16)"});
      if (!floatBitsAreNan(inputBits)) {
        uint16_t expected = referenceFloatToBFloat16(inputBits);
        if (actual != expected)
          blockLog.record({inputBits, actual, expected, "floatToBFloat16"});
        continue;
      }
      bool sameSign = (actual & 0x8000u) == ((inputBits >> 16) & 0x8000u);
      if (!bfloat16IsQuietNan(actual) || !sameSign)
        blockLog.record({inputBits, actual, inputBits >> 16, "floatToBFloat16 of NaN is not a quiet NaN of the same sign"});
    }
  });
  reportMismatches(log);
}

// The fast F16C reference stands in for the software _Float16 conversion in
// the sweep above; this shows the two agree (a spread of inputs that hits
// every exponent, all rounding cases and the subnormal range).
TEST(LowPrecision, HardwareAndSoftwareFloat16ReferencesAgree) {
  BlockNarrowing fast = fastReferenceNarrowToHalf();
  if (fast == nullptr || fast == referenceNarrowToHalfSoftware)
    GTEST_SKIP() << "only the software reference is in use";
  std::vector<float> inputs;
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 4093) // prime stride: varied low bits
    inputs.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  std::vector<uint16_t> hardware(inputs.size()), software(inputs.size());
  fast(inputs.data(), hardware.data(), inputs.size());
  referenceNarrowToHalfSoftware(inputs.data(), software.data(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (std::isnan(inputs[i]))
      continue;
    ASSERT_EQ(hardware[i], software[i]) << "input " << hex(std::bit_cast<uint32_t>(inputs[i]));
  }
}

//===----------------------------------------------------------------------===//
// Widening and round trips over every 16-bit pattern
//===----------------------------------------------------------------------===//

TEST(LowPrecision, WideningEveryHalfMatchesFloat16Conversion) {
  for (uint32_t bits = 0; bits <= 0xFFFFu; ++bits) {
    uint16_t halfBits = static_cast<uint16_t>(bits);
    float actual = halfToFloat(halfBits);
    float expected = referenceHalfToFloat(halfBits);
    uint32_t actualBits = std::bit_cast<uint32_t>(actual);
    if (halfIsNan(halfBits)) {
      ASSERT_TRUE(std::isnan(expected)) << hex(bits);
      ASSERT_TRUE(std::isnan(actual)) << hex(bits);
      ASSERT_EQ(std::signbit(actual), std::signbit(expected)) << hex(bits);
      // Widening keeps the payload, so a NaN survives a round trip unchanged
      // apart from quieting.
      uint32_t payloadKept = ((bits & 0x8000u) << 16) | 0x7F800000u | ((bits & 0x3FFu) << 13);
      ASSERT_EQ(actualBits, payloadKept) << hex(bits);
    } else {
      ASSERT_EQ(actualBits, std::bit_cast<uint32_t>(expected)) << hex(bits);
    }
  }
}

TEST(LowPrecision, WideningEveryBFloat16IsTheUpperHalfOfAFloat) {
  for (uint32_t bits = 0; bits <= 0xFFFFu; ++bits) {
    uint16_t bfloat16Bits = static_cast<uint16_t>(bits);
    float actual = bfloat16ToFloat(bfloat16Bits);
    float expected = std::bit_cast<float>(bits << 16);
    if (bfloat16IsNan(bfloat16Bits)) {
      ASSERT_TRUE(std::isnan(actual)) << hex(bits);
      ASSERT_EQ(std::signbit(actual), std::signbit(expected)) << hex(bits);
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(actual), std::bit_cast<uint32_t>(expected)) << hex(bits);
    }
  }
}

// Which bulk code ran the sweeps above. On a CPU with AVX2 and F16C it must
// be the vector code, or the sweeps proved nothing about what the kernels
// run; AMPJIT_CPU_PORTABLE_CONVERSIONS=1 (the ctest entry
// LowPrecisionPortableConversions) must select the portable loops.
TEST(LowPrecision, BulkConversionsRunTheCodeThisCpuAndTheEnvironmentAskFor) {
  std::string path = bulkConversionPath();
  if (ampjit::runtime::environmentFlag("AMPJIT_CPU_PORTABLE_CONVERSIONS")) {
    EXPECT_EQ(path, "portable");
    return;
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
    EXPECT_EQ(path, "avx2+f16c");
  else if (__builtin_cpu_supports("avx2"))
    EXPECT_EQ(path, "avx2");
  else
    EXPECT_EQ(path, "portable");
#else
  EXPECT_EQ(path, "portable");
#endif
}

/// Every conversion's results over a spread of inputs, as bits: a prime
/// stride through the f32 patterns and every 16-bit pattern.
struct ConversionResults {
  std::vector<uint16_t> scalarHalf, bulkHalf, scalarBFloat16, bulkBFloat16, doubleHalf, doubleBFloat16;
  std::vector<uint32_t> roundedHalf, roundedBFloat16, scalarWidenedHalf, bulkWidenedHalf, bulkWidenedBFloat16;
  bool operator==(const ConversionResults&) const = default;
};

struct ConversionInputs {
  std::vector<float> floats;
  std::vector<double> doubles; // the floats, widened here, where denormals-are-zero cannot touch them
  std::vector<uint16_t> patterns;
};

ConversionInputs spreadOfInputs() {
  std::vector<float> floats;
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 65521)
    floats.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  for (float edge : {0x1p-25f, 3 * 0x1p-25f, 65520.0f, 1.0f + 0x1p-11f, 0x1p-14f, 1023.5f * 0x1p-24f})
    for (float sign : {1.0f, -1.0f})
      floats.push_back(sign * edge);
  std::vector<uint16_t> patterns(0x10000);
  for (uint32_t bits = 0; bits <= 0xFFFFu; ++bits)
    patterns[bits] = static_cast<uint16_t>(bits);
  std::vector<double> doubles(floats.begin(), floats.end());
  return {std::move(floats), std::move(doubles), std::move(patterns)};
}

ConversionResults convertSpread(const ConversionInputs& inputs) {
  const std::vector<float>& floats = inputs.floats;
  const std::vector<uint16_t>& patterns = inputs.patterns;
  ConversionResults r;
  size_t n = floats.size();
  r.bulkHalf.resize(n);
  r.bulkBFloat16.resize(n);
  narrowToHalf(floats.data(), r.bulkHalf.data(), n);
  narrowToBFloat16(floats.data(), r.bulkBFloat16.data(), n);
  std::vector<float> roundedHalf = floats, roundedBFloat16 = floats;
  roundToHalf(roundedHalf.data(), n);
  roundToBFloat16(roundedBFloat16.data(), n);
  for (size_t i = 0; i < n; ++i) {
    r.scalarHalf.push_back(floatToHalf(floats[i]));
    r.scalarBFloat16.push_back(floatToBFloat16(floats[i]));
    r.doubleHalf.push_back(doubleToHalf(inputs.doubles[i]));
    r.doubleBFloat16.push_back(doubleToBFloat16(inputs.doubles[i]));
    r.roundedHalf.push_back(std::bit_cast<uint32_t>(roundedHalf[i]));
    r.roundedBFloat16.push_back(std::bit_cast<uint32_t>(roundedBFloat16[i]));
  }
  std::vector<float> widenedHalf(patterns.size()), widenedBFloat16(patterns.size());
  widenHalf(patterns.data(), widenedHalf.data(), patterns.size());
  widenBFloat16(patterns.data(), widenedBFloat16.data(), patterns.size());
  for (size_t i = 0; i < patterns.size(); ++i) {
    r.scalarWidenedHalf.push_back(std::bit_cast<uint32_t>(halfToFloat(patterns[i])));
    r.bulkWidenedHalf.push_back(std::bit_cast<uint32_t>(widenedHalf[i]));
    r.bulkWidenedBFloat16.push_back(std::bit_cast<uint32_t>(widenedBFloat16[i]));
  }
  return r;
}

/// Restores the rounding mode (and on x86-64 MXCSR's FTZ/DAZ bits) it found.
class FloatingPointEnvironmentGuard {
public:
  FloatingPointEnvironmentGuard() : rounding_(std::fegetround()) {
#if defined(__x86_64__)
    csr_ = _mm_getcsr();
#endif
  }
  ~FloatingPointEnvironmentGuard() {
    std::fesetround(rounding_);
#if defined(__x86_64__)
    _mm_setcsr(csr_);
#endif
  }

private:
  int rounding_;
#if defined(__x86_64__)
  unsigned csr_ = 0;
#endif
};

// LowPrecision.h promises the same bits under every rounding mode and with
// subnormals flushed (a library may run inside a program that changed
// either): the scalar functions use only exact floating-point operations, the
// F16C instruction takes its rounding from its immediate.
TEST(LowPrecision, ConversionsGiveTheSameBitsInEveryFloatingPointEnvironment) {
  ConversionInputs inputs = spreadOfInputs();
  ConversionResults expected = convertSpread(inputs);
  struct Mode {
    int rounding;
    const char* name;
  };
  const Mode modes[] = {{FE_TONEAREST, "to nearest"}, {FE_DOWNWARD, "downward"},
                        {FE_UPWARD, "upward"}, {FE_TOWARDZERO, "toward zero"}};
  for (bool flushSubnormals : {false, true}) {
#if !defined(__x86_64__)
    if (flushSubnormals)
      continue;
#endif
    for (const Mode& mode : modes) {
      ConversionResults actual;
      {
        FloatingPointEnvironmentGuard guard;
        ASSERT_EQ(std::fesetround(mode.rounding), 0) << mode.name;
#if defined(__x86_64__)
        if (flushSubnormals)
          _mm_setcsr(_mm_getcsr() | 0x8040u); // FTZ | DAZ
#endif
        actual = convertSpread(inputs);
      }
      // Field by field, so a failure names the conversion.
      auto check = [&](const auto& a, const auto& e, const char* what) {
        size_t differing = 0, first = a.size();
        for (size_t i = 0; i < a.size(); ++i)
          if (a[i] != e[i] && differing++ == 0)
            first = i;
        EXPECT_EQ(differing, 0u) << what << " rounding " << mode.name << (flushSubnormals ? ", FTZ+DAZ" : "")
                                 << ": first at index " << first;
      };
      check(actual.scalarHalf, expected.scalarHalf, "floatToHalf");
      check(actual.bulkHalf, expected.bulkHalf, "narrowToHalf");
      check(actual.scalarBFloat16, expected.scalarBFloat16, "floatToBFloat16");
      check(actual.bulkBFloat16, expected.bulkBFloat16, "narrowToBFloat16");
      check(actual.doubleHalf, expected.doubleHalf, "doubleToHalf");
      check(actual.doubleBFloat16, expected.doubleBFloat16, "doubleToBFloat16");
      check(actual.roundedHalf, expected.roundedHalf, "roundToHalf");
      check(actual.roundedBFloat16, expected.roundedBFloat16, "roundToBFloat16");
      check(actual.scalarWidenedHalf, expected.scalarWidenedHalf, "halfToFloat");
      check(actual.bulkWidenedHalf, expected.bulkWidenedHalf, "widenHalf");
      check(actual.bulkWidenedBFloat16, expected.bulkWidenedBFloat16, "widenBFloat16");
    }
  }
}

TEST(LowPrecision, EveryFiniteHalfSurvivesWideningAndNarrowing) {
  for (uint32_t bits = 0; bits <= 0xFFFFu; ++bits) {
    uint16_t halfBits = static_cast<uint16_t>(bits);
    if ((halfBits & 0x7C00u) == 0x7C00u)
      continue; // infinities and NaNs
    float widened = halfToFloat(halfBits);
    ASSERT_EQ(floatToHalf(widened), halfBits) << hex(bits);
    ASSERT_EQ(doubleToHalf(static_cast<double>(widened)), halfBits) << hex(bits);
  }
}

TEST(LowPrecision, EveryFiniteBFloat16SurvivesWideningAndNarrowing) {
  for (uint32_t bits = 0; bits <= 0xFFFFu; ++bits) {
    uint16_t bfloat16Bits = static_cast<uint16_t>(bits);
    if ((bfloat16Bits & 0x7F80u) == 0x7F80u)
      continue;
    float widened = bfloat16ToFloat(bfloat16Bits);
    ASSERT_EQ(floatToBFloat16(widened), bfloat16Bits) << hex(bits);
    ASSERT_EQ(doubleToBFloat16(static_cast<double>(widened)), bfloat16Bits) << hex(bits);
  }
}

TEST(LowPrecision, InfinitiesSurviveWideningAndNarrowing) {
  for (uint16_t infinity : {uint16_t(0x7C00u), uint16_t(0xFC00u)})
    EXPECT_EQ(floatToHalf(halfToFloat(infinity)), infinity);
  for (uint16_t infinity : {uint16_t(0x7F80u), uint16_t(0xFF80u)})
    EXPECT_EQ(floatToBFloat16(bfloat16ToFloat(infinity)), infinity);
}

//===----------------------------------------------------------------------===//
// Named edge cases
//===----------------------------------------------------------------------===//

struct FloatCase {
  const char* name;
  float input;
  uint16_t expected;
};

float fromBits(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(LowPrecision, FloatToHalfEdgeCases) {
  const FloatCase cases[] = {
      {"one", 1.0f, 0x3C00},
      {"largest finite", 65504.0f, 0x7BFF},
      {"65519.99 rounds down to the largest finite", 65519.99f, 0x7BFF},
      {"the f32 just below 65520 rounds down", std::nextafter(65520.0f, 0.0f), 0x7BFF},
      {"65520 is the tie with 2^16 and rounds to even: infinity", 65520.0f, 0x7C00},
      {"-65520 rounds to -infinity", -65520.0f, 0xFC00},
      {"1e10 overflows", 1e10f, 0x7C00},
      {"largest f32 overflows", std::numeric_limits<float>::max(), 0x7C00},
      {"infinity", std::numeric_limits<float>::infinity(), 0x7C00},
      {"-infinity", -std::numeric_limits<float>::infinity(), 0xFC00},
      {"1 + 2^-11 is a tie and rounds to even (down)", 1.0f + 0x1p-11f, 0x3C00},
      {"1 + 3*2^-11 is a tie and rounds to even (up)", 1.0f + 3 * 0x1p-11f, 0x3C02},
      {"just above the 1 + 2^-11 tie rounds up", std::nextafter(1.0f + 0x1p-11f, 2.0f), 0x3C01},
      {"2047.5 rounds up across a binade to 2048", 2047.5f, 0x6800},
      {"smallest normal 2^-14", 0x1p-14f, 0x0400},
      {"largest subnormal 1023*2^-24", 1023 * 0x1p-24f, 0x03FF},
      {"1023.5*2^-24 rounds up from the subnormals into the smallest normal", 1023.5f * 0x1p-24f, 0x0400},
      {"smallest subnormal 2^-24", 0x1p-24f, 0x0001},
      {"-2^-24", -0x1p-24f, 0x8001},
      {"2^-25 is the tie with zero and rounds to even: zero", 0x1p-25f, 0x0000},
      {"-2^-25 rounds to -0", -0x1p-25f, 0x8000},
      {"just above 2^-25 rounds up to 2^-24", std::nextafter(0x1p-25f, 1.0f), 0x0001},
      {"3*2^-26 rounds up to 2^-24", 3 * 0x1p-26f, 0x0001},
      {"3*2^-25 = 1.5*2^-24 is a tie and rounds to even 2*2^-24", 3 * 0x1p-25f, 0x0002},
      {"5*2^-25 = 2.5*2^-24 is a tie and rounds to even 2*2^-24", 5 * 0x1p-25f, 0x0002},
      {"2^-26 rounds to zero", 0x1p-26f, 0x0000},
      {"smallest f32 subnormal rounds to zero", std::numeric_limits<float>::denorm_min(), 0x0000},
      {"negative f32 subnormal rounds to -0", -std::numeric_limits<float>::denorm_min(), 0x8000},
      {"+0", 0.0f, 0x0000},
      {"-0 keeps its sign", -0.0f, 0x8000},
      {"quiet NaN", fromBits(0x7FC00000u), 0x7E00},
      {"negative quiet NaN keeps its sign", fromBits(0xFFC00000u), 0xFE00},
      {"signalling NaN with only low payload bits is quieted, not turned into infinity", fromBits(0x7F800001u), 0x7E00},
      {"signalling NaN keeps its top payload bits", fromBits(0x7FA00000u), 0x7F00},
  };
  for (const FloatCase& c : cases)
    EXPECT_EQ(hex(floatToHalf(c.input)), hex(c.expected)) << c.name;
}

TEST(LowPrecision, FloatToBFloat16EdgeCases) {
  const FloatCase cases[] = {
      {"one", 1.0f, 0x3F80},
      {"largest f32 0x7F7FFFFF rounds up to infinity", fromBits(0x7F7FFFFFu), 0x7F80},
      {"0x7F7F8000 is a tie with an odd lower neighbour: rounds up to infinity", fromBits(0x7F7F8000u), 0x7F80},
      {"0x7F7F7FFF is below the tie: largest finite bf16", fromBits(0x7F7F7FFFu), 0x7F7F},
      {"0x7F7E8000 is a tie with an even lower neighbour: rounds down", fromBits(0x7F7E8000u), 0x7F7E},
      {"1 + 2^-8 is a tie and rounds to even (down)", fromBits(0x3F808000u), 0x3F80},
      {"1 + 3*2^-8 is a tie and rounds to even (up)", fromBits(0x3F818000u), 0x3F82},
      {"just above a tie rounds up", fromBits(0x3F808001u), 0x3F81},
      {"infinity", std::numeric_limits<float>::infinity(), 0x7F80},
      {"-infinity", -std::numeric_limits<float>::infinity(), 0xFF80},
      {"+0", 0.0f, 0x0000},
      {"-0 keeps its sign", -0.0f, 0x8000},
      {"f32 subnormal 0x00008000 is a tie with zero: rounds to zero", fromBits(0x00008000u), 0x0000},
      {"f32 subnormal 0x00018000 is a tie: rounds to even 0x0002", fromBits(0x00018000u), 0x0002},
      {"smallest f32 subnormal rounds to zero", fromBits(0x00000001u), 0x0000},
      {"negative f32 subnormal rounds to -0", fromBits(0x80000001u), 0x8000},
      {"largest f32 subnormal rounds up to the smallest normal bf16", fromBits(0x007FFFFFu), 0x0080},
      {"quiet NaN", fromBits(0x7FC00000u), 0x7FC0},
      {"signalling NaN with only low payload bits is quieted, not rounded to infinity", fromBits(0x7F800001u), 0x7FC0},
      {"negative signalling NaN keeps its sign", fromBits(0xFF800001u), 0xFFC0},
      {"NaN with all payload bits set does not wrap around", fromBits(0x7FFFFFFFu), 0x7FFF},
  };
  for (const FloatCase& c : cases)
    EXPECT_EQ(hex(floatToBFloat16(c.input)), hex(c.expected)) << c.name;
}

TEST(LowPrecision, WideningEdgeCases) {
  EXPECT_EQ(halfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(halfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(halfToFloat(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(halfToFloat(0x0400), 0x1p-14f);
  EXPECT_EQ(halfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(halfToFloat(0xC000), -2.0f);
  EXPECT_EQ(halfToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(halfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(halfToFloat(0x8000)) && halfToFloat(0x8000) == 0.0f) << "-0 keeps its sign";
  EXPECT_TRUE(std::isnan(halfToFloat(0x7E00)));
  EXPECT_EQ(bfloat16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(bfloat16ToFloat(0x7F7F), std::bit_cast<float>(0x7F7F0000u));
  EXPECT_EQ(bfloat16ToFloat(0x0001), std::bit_cast<float>(0x00010000u)) << "bf16 subnormals widen to f32 subnormals";
  EXPECT_TRUE(std::signbit(bfloat16ToFloat(0x8000)));
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(0xFFC1)) && std::signbit(bfloat16ToFloat(0xFFC1)));
}

struct DoubleCase {
  const char* name;
  double input;
  uint16_t expected;
};

TEST(LowPrecision, DoubleToHalfRoundsOnceWhereGoingThroughFloatWouldRoundTwice) {
  // 1 + 2^-11 + 2^-40 lies just above the f16 tie between 1 and 1 + 2^-10,
  // but converting to f32 first drops the 2^-40 and lands exactly on the tie,
  // which then rounds to even (down).
  double aboveTie = 1.0 + 0x1p-11 + 0x1p-40;
  EXPECT_EQ(hex(floatToHalf(static_cast<float>(aboveTie))), hex(0x3C00)) << "the double-rounding trap is real";
  EXPECT_EQ(hex(doubleToHalf(aboveTie)), hex(0x3C01));
  double aboveUnderflowTie = 0x1p-25 + 0x1p-70;
  EXPECT_EQ(hex(floatToHalf(static_cast<float>(aboveUnderflowTie))), hex(0x0000));
  EXPECT_EQ(hex(doubleToHalf(aboveUnderflowTie)), hex(0x0001));
  double belowOverflowTie = 65520.0 - 0x1p-30;
  EXPECT_EQ(hex(floatToHalf(static_cast<float>(belowOverflowTie))), hex(0x7C00));
  EXPECT_EQ(hex(doubleToHalf(belowOverflowTie)), hex(0x7BFF));
}

TEST(LowPrecision, DoubleToBFloat16RoundsOnceWhereGoingThroughFloatWouldRoundTwice) {
  double aboveTie = 1.0 + 0x1p-8 + 0x1p-40;
  EXPECT_EQ(hex(floatToBFloat16(static_cast<float>(aboveTie))), hex(0x3F80)) << "the double-rounding trap is real";
  EXPECT_EQ(hex(doubleToBFloat16(aboveTie)), hex(0x3F81));
}

TEST(LowPrecision, DoubleNarrowingEdgeCases) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const DoubleCase halfCases[] = {
      {"largest finite", 65504.0, 0x7BFF},
      {"65520 rounds to infinity", 65520.0, 0x7C00},
      {"largest f64 overflows", std::numeric_limits<double>::max(), 0x7C00},
      {"-infinity", -std::numeric_limits<double>::infinity(), 0xFC00},
      {"2^-24", 0x1p-24, 0x0001},
      {"2^-25 ties to zero", 0x1p-25, 0x0000},
      {"3*2^-26 rounds up to 2^-24", 3 * 0x1p-26, 0x0001},
      {"1023.5*2^-24 rounds into the smallest normal", 1023.5 * 0x1p-24, 0x0400},
      {"f64 subnormal underflows to -0", -std::numeric_limits<double>::denorm_min(), 0x8000},
      {"-0", -0.0, 0x8000},
      {"quiet NaN", nan, 0x7E00},
      {"negative NaN keeps its sign", -nan, 0xFE00},
      {"signalling NaN with only low payload bits stays NaN", std::bit_cast<double>(uint64_t(0x7FF0000000000001u)), 0x7E00},
  };
  for (const DoubleCase& c : halfCases)
    EXPECT_EQ(hex(doubleToHalf(c.input)), hex(c.expected)) << c.name;

  const DoubleCase bfloat16Cases[] = {
      {"largest f32 rounds to infinity", static_cast<double>(std::numeric_limits<float>::max()), 0x7F80},
      {"just below the overflow tie (2 - 2^-8) * 2^127", std::nextafter(0x1.ffp127, 0.0), 0x7F7F},
      {"the overflow tie (2 - 2^-8) * 2^127 rounds to infinity", 0x1.ffp127, 0x7F80},
      {"1e300 overflows", 1e300, 0x7F80},
      {"smallest bf16 subnormal 2^-133", 0x1p-133, 0x0001},
      {"2^-134 ties to zero", 0x1p-134, 0x0000},
      {"just above 2^-134 rounds up", 0x1p-134 + 0x1p-170, 0x0001},
      {"f64 subnormal underflows to zero", std::numeric_limits<double>::denorm_min(), 0x0000},
      {"-0", -0.0, 0x8000},
      {"quiet NaN", nan, 0x7FC0},
      {"negative NaN keeps its sign", -nan, 0xFFC0},
      {"signalling NaN with only low payload bits stays NaN", std::bit_cast<double>(uint64_t(0xFFF0000000000001u)), 0xFFC0},
  };
  for (const DoubleCase& c : bfloat16Cases)
    EXPECT_EQ(hex(doubleToBFloat16(c.input)), hex(c.expected)) << c.name;
}

/// Doubles concentrated where rounding is hard: random bits over the format's
/// whole range and beyond, plus values within a few f64 ulps of the midpoint
/// between two neighbouring 16-bit values.
std::vector<double> hardDoubleInputs(float (*widen)(uint16_t), uint16_t infinityBits, int minExponent, int maxExponent) {
  std::mt19937_64 random(20240611);
  std::vector<double> inputs;
  std::uniform_int_distribution<int> exponent(minExponent, maxExponent);
  std::uniform_int_distribution<uint64_t> mantissa(0, (uint64_t(1) << 52) - 1);
  for (int i = 0; i < 1'000'000; ++i) {
    uint64_t biased = static_cast<uint64_t>(exponent(random) + 1023);
    uint64_t sign = (random() & 1) << 63;
    inputs.push_back(std::bit_cast<double>(sign | (biased << 52) | mantissa(random)));
  }
  std::uniform_int_distribution<uint32_t> pattern(0, infinityBits - 1u);
  std::uniform_int_distribution<int> ulpSteps(-3, 3);
  for (int i = 0; i < 1'000'000; ++i) {
    uint16_t low = static_cast<uint16_t>(pattern(random));
    double lowValue = widen(low);
    // Above the largest finite value the next neighbour is 2^(emax+1), where
    // the next binade would start.
    double highValue = low + 1u == infinityBits ? std::ldexp(1.0, std::ilogb(lowValue) + 1)
                                                : static_cast<double>(widen(static_cast<uint16_t>(low + 1u)));
    double midpoint = (lowValue + highValue) / 2;
    int steps = ulpSteps(random);
    for (; steps > 0; --steps)
      midpoint = std::nextafter(midpoint, HUGE_VAL);
    for (; steps < 0; ++steps)
      midpoint = std::nextafter(midpoint, -HUGE_VAL);
    inputs.push_back((random() & 1) ? -midpoint : midpoint);
  }
  return inputs;
}

TEST(LowPrecision, DoubleToHalfMatchesReferencesOnHardInputs) {
  for (double input : hardDoubleInputs(halfToFloat, 0x7C00u, -40, 20)) {
    uint16_t actual = doubleToHalf(input);
    ASSERT_EQ(hex(actual), hex(referenceDoubleToHalf(input))) << "input " << std::hexfloat << input;
    // libgcc's __truncdfhf2 also rounds f64 to f16 directly.
    ASSERT_EQ(hex(actual), hex(std::bit_cast<uint16_t>(static_cast<_Float16>(input))))
        << "input " << std::hexfloat << input;
  }
}

TEST(LowPrecision, DoubleToBFloat16MatchesReferenceOnHardInputs) {
  for (double input : hardDoubleInputs(bfloat16ToFloat, 0x7F80u, -140, 130))
    ASSERT_EQ(hex(doubleToBFloat16(input)), hex(referenceDoubleToBFloat16(input))) << "input " << std::hexfloat << input;
}

//===----------------------------------------------------------------------===//
// Bulk helpers
//===----------------------------------------------------------------------===//

// NaN payloads included: a signalling NaN must stay signalling, which the
// F16C instruction the x86-64 bulk code uses would not do on its own.
TEST(LowPrecision, BulkWideningMatchesScalarForEveryPattern) {
  std::vector<uint16_t> patterns(0x10000);
  for (uint32_t bits = 0; bits <= 0xFFFFu; ++bits)
    patterns[bits] = static_cast<uint16_t>(bits);
  std::vector<float> widened(patterns.size());

  widenHalf(patterns.data(), widened.data(), patterns.size());
  for (uint32_t bits = 0; bits <= 0xFFFFu; ++bits)
    ASSERT_EQ(std::bit_cast<uint32_t>(widened[bits]), std::bit_cast<uint32_t>(halfToFloat(patterns[bits])))
        << hex(bits);

  widenBFloat16(patterns.data(), widened.data(), patterns.size());
  for (uint32_t bits = 0; bits <= 0xFFFFu; ++bits)
    ASSERT_EQ(std::bit_cast<uint32_t>(widened[bits]), std::bit_cast<uint32_t>(bfloat16ToFloat(patterns[bits])))
        << hex(bits);
}

// Vectorised loops have a scalar prologue/epilogue; lengths and offsets that
// are not multiples of the vector width exercise them. (The exhaustive sweeps
// above cover the narrowing helpers on aligned, full blocks.)
TEST(LowPrecision, BulkHelpersHandleOddLengthsAndMisalignedBuffers) {
  std::mt19937 random(7);
  std::vector<uint16_t> sixteenBit(1100);
  std::vector<float> floats(1100);
  for (size_t i = 0; i < sixteenBit.size(); ++i) {
    sixteenBit[i] = static_cast<uint16_t>(random());
    floats[i] = std::bit_cast<float>(static_cast<uint32_t>(random()));
  }
  for (size_t offset : {0u, 1u, 3u}) {
    for (size_t count : {0u, 1u, 7u, 15u, 33u, 1001u}) {
      std::vector<float> widenedHalf(count + 1, -1.0f), widenedBFloat16(count + 1, -1.0f);
      std::vector<uint16_t> narrowedHalf(count + 1, 0xAAAA), narrowedBFloat16(count + 1, 0xAAAA);
      widenHalf(sixteenBit.data() + offset, widenedHalf.data(), count);
      widenBFloat16(sixteenBit.data() + offset, widenedBFloat16.data(), count);
      narrowToHalf(floats.data() + offset, narrowedHalf.data(), count);
      narrowToBFloat16(floats.data() + offset, narrowedBFloat16.data(), count);
      for (size_t i = 0; i < count; ++i) {
        SCOPED_TRACE("offset " + std::to_string(offset) + ", count " + std::to_string(count) + ", element " +
                     std::to_string(i));
        ASSERT_EQ(std::bit_cast<uint32_t>(widenedHalf[i]), std::bit_cast<uint32_t>(halfToFloat(sixteenBit[offset + i])));
        ASSERT_EQ(std::bit_cast<uint32_t>(widenedBFloat16[i]),
                  std::bit_cast<uint32_t>(bfloat16ToFloat(sixteenBit[offset + i])));
        ASSERT_EQ(narrowedHalf[i], floatToHalf(floats[offset + i]));
        ASSERT_EQ(narrowedBFloat16[i], floatToBFloat16(floats[offset + i]));
      }
      // Nothing is written past the requested count.
      EXPECT_EQ(widenedHalf[count], -1.0f);
      EXPECT_EQ(widenedBFloat16[count], -1.0f);
      EXPECT_EQ(narrowedHalf[count], 0xAAAA);
      EXPECT_EQ(narrowedBFloat16[count], 0xAAAA);
    }
  }
}

TEST(LowPrecision, StorageTypesAreTwoBytesAndTriviallyCopyable) {
  static_assert(sizeof(Half) == 2 && alignof(Half) == 2 && std::is_trivially_copyable_v<Half>);
  static_assert(sizeof(BFloat16) == 2 && alignof(BFloat16) == 2 && std::is_trivially_copyable_v<BFloat16>);
  Half one{floatToHalf(1.0f)};
  BFloat16 two{floatToBFloat16(2.0f)};
  EXPECT_EQ(std::bit_cast<uint16_t>(one), 0x3C00);
  EXPECT_EQ(std::bit_cast<uint16_t>(two), 0x4000);
}

TEST(LowPrecision, ScalarConversionsAreUsableInConstantExpressions) {
  static_assert(floatToHalf(65504.0f) == 0x7BFF);
  static_assert(halfToFloat(0x0001) == 0x1p-24f);
  static_assert(floatToBFloat16(1.0f) == 0x3F80);
  static_assert(bfloat16ToFloat(0x3F80) == 1.0f);
  SUCCEED();
}

} // namespace
