//===- GemmTuningTest.cpp - choosing among timed GEMM algorithms ----------===//
//
// GemmTuning.h's host side: which timed candidate wins, and the disk entry
// that remembers it, refused whenever it is not exactly what was written for
// this problem. (The timing itself: GemmKernelTest.cpp, on the emulated
// runtime and on a device.)
//
//===----------------------------------------------------------------------===//

#include "cuda/GemmTuning.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace ampjit::runtime::cuda {
namespace {

const double kRefused = std::nan("");

TEST(GemmTuning, TheFastestCandidateWinsOnlyWhereItBeatsTheHeuristicsFirstByTheMargin) {
  EXPECT_EQ(chooseGemmCandidate(std::vector<double>{1.0, 0.9, 0.95}), 1);
  // 1% faster is within the 2% margin: the heuristic's first stays.
  EXPECT_EQ(chooseGemmCandidate(std::vector<double>{1.0, 0.99, 1.2}), 0);
  EXPECT_EQ(chooseGemmCandidate(std::vector<double>{1.0, 0.99}, 0.005), 1);
  EXPECT_EQ(chooseGemmCandidate(std::vector<double>{1.0, 1.5}), 0);
  EXPECT_EQ(chooseGemmCandidate(std::vector<double>{0.4}), 0);
  // A refused candidate never wins; with the first refused, the fastest
  // that ran does, by any margin.
  EXPECT_EQ(chooseGemmCandidate(std::vector<double>{1.0, kRefused, 0.5}), 2);
  EXPECT_EQ(chooseGemmCandidate(std::vector<double>{kRefused, 0.7, 0.69}), 2);
  EXPECT_EQ(chooseGemmCandidate(std::vector<double>{kRefused, kRefused}), -1);
  EXPECT_EQ(chooseGemmCandidate(std::vector<double>{}), -1);
}

TEST(GemmTuning, TheFinalistsAreTheHeuristicsFirstAndTheFastestOfTheScreen) {
  using Finalists = std::vector<int>;
  // The four fastest others, whatever their rank, and the first however slow.
  EXPECT_EQ(gemmTuningFinalists(std::vector<double>{9.0, 5.0, 1.0, 7.0, 2.0, 8.0, 3.0, 6.0}),
            (Finalists{0, 1, 2, 4, 6}));
  EXPECT_EQ(gemmTuningFinalists(std::vector<double>{1.0, 2.0, 3.0}, 1), (Finalists{0, 1}));
  EXPECT_EQ(gemmTuningFinalists(std::vector<double>{1.0, 2.0, 3.0}, 0), (Finalists{0}));
  // Fewer than four that ran: all of them. A refused one never is a finalist,
  // the first included.
  EXPECT_EQ(gemmTuningFinalists(std::vector<double>{kRefused, 4.0, kRefused, 3.0}), (Finalists{1, 3}));
  EXPECT_EQ(gemmTuningFinalists(std::vector<double>{kRefused, 0.5, 0.4, 0.3, 0.2, 0.1}, 2), (Finalists{4, 5}));
  // Equal screens: the heuristic's earlier candidate goes first.
  EXPECT_EQ(gemmTuningFinalists(std::vector<double>{1.0, 3.0, 2.0, 2.0, 2.0}, 2), (Finalists{0, 2, 3}));
  EXPECT_EQ(gemmTuningFinalists(std::vector<double>{kRefused, kRefused}), Finalists{});
  EXPECT_EQ(gemmTuningFinalists(std::vector<double>{}), Finalists{});
}

TEST(GemmTuning, AnEntryReadsBackOnlyForItsOwnProblemAndOnlyAsWritten) {
  const std::string key = "sm_90 sms=132 | f16[64x96] x f16[96x80] -> f16[64x80] in f32 AB align=64 none";
  GemmTuningRecord record{3, 2, {0.25, kRefused, 0.125}};
  std::string text = encodeGemmTuning(key, record);
  std::optional<GemmTuningRecord> read = decodeGemmTuning(text, key);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->candidates, 3);
  EXPECT_EQ(read->choice, 2);
  ASSERT_EQ(read->milliseconds.size(), 3u);
  EXPECT_DOUBLE_EQ(read->milliseconds[0], 0.25);
  EXPECT_TRUE(std::isnan(read->milliseconds[1]));
  EXPECT_DOUBLE_EQ(read->milliseconds[2], 0.125);

  EXPECT_FALSE(decodeGemmTuning(text, key + " sms=100").has_value()) << "another problem's entry";
  EXPECT_FALSE(decodeGemmTuning(text.substr(0, text.size() - 1), key).has_value()) << "truncated";
  EXPECT_FALSE(decodeGemmTuning(text.substr(0, text.size() / 2), key).has_value()) << "truncated";
  EXPECT_FALSE(decodeGemmTuning("", key).has_value());
  std::string edited = text;
  edited.replace(edited.find("choice 2"), 8, "choice 1");
  EXPECT_FALSE(decodeGemmTuning(edited, key).has_value()) << "an edit the checksum catches";
  // Well-formed entries (their checksums recomputed) that still cannot be trusted.
  EXPECT_FALSE(decodeGemmTuning(encodeGemmTuning(key, {2, 2, {0.1, 0.2}}), key).has_value())
      << "a choice past the candidates";
  EXPECT_FALSE(decodeGemmTuning(encodeGemmTuning(key, {3, 0, {0.1, 0.2}}), key).has_value())
      << "fewer times than candidates";
  std::string otherFormat = encodeGemmTuning(key, record);
  otherFormat.replace(0, std::string("ampjit-gemm-tuning 1").size(), "ampjit-gemm-tuning 2");
  EXPECT_FALSE(decodeGemmTuning(otherFormat, key).has_value()) << "another format";
}

TEST(GemmTuning, EveryProblemHasItsOwnEntryInTheCacheDirectory) {
  std::filesystem::path directory = "/cache";
  std::filesystem::path first = gemmTuningEntryPath(directory, "problem one");
  EXPECT_EQ(first.parent_path(), directory);
  EXPECT_EQ(first.extension(), ".gemm");
  EXPECT_EQ(first.stem().string().size(), 32u);
  EXPECT_EQ(first, gemmTuningEntryPath(directory, "problem one"));
  EXPECT_NE(first, gemmTuningEntryPath(directory, "problem two"));
}

TEST(GemmTuning, OnlyGemmsOfTheMinimumSizeAreTuned) {
  GemmTuner tuner;
  EXPECT_FALSE(tuner.wants(1e15)) << "a minimum of 0 tunes nothing";
  tuner.minimumFlops = kDefaultGemmTuningMinimumFlops;
  // mlp9's products: 2 x 2048 x 8192 x 8192.
  EXPECT_TRUE(tuner.wants(2.0 * 2048 * 8192 * 8192));
  // A classifier's: 2 x 64 x 784 x 512.
  EXPECT_FALSE(tuner.wants(2.0 * 64 * 784 * 512));
  EXPECT_TRUE(tuner.wants(double(kDefaultGemmTuningMinimumFlops)));
}

} // namespace
} // namespace ampjit::runtime::cuda
