// The one FNV-1a behind every checksum, cache key and kernel name: it must
// give the published values, or every plan file, state file and NVRTC cache
// entry written before a change would stop loading.

#include "ampjit/runtime/Fnv1a.h"

#include <gtest/gtest.h>

#include <array>
#include <string>

namespace ampjit::runtime {
namespace {

TEST(Fnv1a, GivesThePublishedValues) {
  // From the FNV reference's test vectors (64-bit FNV-1a).
  EXPECT_EQ(fnv1a64(std::string_view("")), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64(std::string_view("a")), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64(std::string_view("foobar")), 0x85944171f73967e8ull);
  static_assert(fnv1a64(std::string_view("foobar")) == 0x85944171f73967e8ull,
                "usable where a constant is needed");
}

TEST(Fnv1a, BytesAndTextHashAlikeAndHighBytesAreUnsigned) {
  // A char above 0x7f must hash as the byte it is, not as a negative number
  // widened to 64 bits.
  std::array<uint8_t, 3> bytes = {0xff, 0x00, 0x80};
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  EXPECT_EQ(fnv1a64(bytes), 0xf920891be415651eull);
  EXPECT_EQ(fnv1a64(std::string_view(text)), fnv1a64(bytes));
}

TEST(Fnv1a, ASeedGivesAnotherHashOfTheSameBytes) {
  std::string_view text = "ampjit";
  EXPECT_EQ(fnv1a64(text, kFnv1a64OffsetBasis), fnv1a64(text));
  EXPECT_NE(fnv1a64(text, 0x84222325cbf29ce4ull), fnv1a64(text));
}

TEST(Fnv1a, Hex64SpellsEveryHashInSixteenLowercaseDigits) {
  // File names, cache keys and report fields compare these spellings as text.
  EXPECT_EQ(hex64(0), "0000000000000000");
  EXPECT_EQ(hex64(0xaf63dc4c8601ec8cull), "af63dc4c8601ec8c");
  EXPECT_EQ(hex64(0x00000000000abcdeull), "00000000000abcde");
  EXPECT_EQ(hex64(~0ull), "ffffffffffffffff");
}

} // namespace
} // namespace ampjit::runtime
