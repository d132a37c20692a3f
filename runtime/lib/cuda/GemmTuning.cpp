// The host side of GEMM tuning: the choice among timed candidates and the
// disk entries (see GemmTuning.h). The timing is CublasLtGemm.cpp's.

#include "GemmTuning.h"

#include "Nvrtc.h"

#include "ampjit/runtime/Fnv1a.h"
#include "ampjit/runtime/cuda/KernelSource.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace ampjit::runtime::cuda {

namespace {

constexpr std::string_view kEntryHeader = "ampjit-gemm-tuning 1";

std::string checksumOf(std::string_view text) { return hex64(fnv1a64(text)); }

/// The rest of `line` after `field` and a space, or nothing.
std::optional<std::string_view> fieldValue(std::string_view line, std::string_view field) {
  if (line.size() <= field.size() || !line.starts_with(field) || line[field.size()] != ' ')
    return std::nullopt;
  return line.substr(field.size() + 1);
}

std::optional<int> parseCount(std::string_view text) {
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0)
    return std::nullopt;
  return value;
}

} // namespace

int chooseGemmCandidate(std::span<const double> milliseconds, double margin) {
  int fastest = -1;
  for (std::size_t i = 0; i < milliseconds.size(); ++i)
    if (!std::isnan(milliseconds[i]) && (fastest < 0 || milliseconds[i] < milliseconds[std::size_t(fastest)]))
      fastest = int(i);
  if (fastest <= 0 || std::isnan(milliseconds[0]))
    return fastest;
  return milliseconds[std::size_t(fastest)] < milliseconds[0] * (1.0 - margin) ? fastest : 0;
}

std::vector<int> gemmTuningFinalists(std::span<const double> screenMilliseconds, int finalists) {
  std::vector<int> ran;
  for (std::size_t i = 1; i < screenMilliseconds.size(); ++i)
    if (!std::isnan(screenMilliseconds[i]))
      ran.push_back(int(i));
  // Stable: of two equal screens, the heuristic's earlier is kept.
  std::stable_sort(ran.begin(), ran.end(), [&](int a, int b) {
    return screenMilliseconds[std::size_t(a)] < screenMilliseconds[std::size_t(b)];
  });
  ran.resize(std::min(ran.size(), std::size_t(std::max(finalists, 0))));
  if (!screenMilliseconds.empty() && !std::isnan(screenMilliseconds[0]))
    ran.push_back(0);
  std::sort(ran.begin(), ran.end());
  return ran;
}

std::string encodeGemmTuning(std::string_view key, const GemmTuningRecord& record) {
  std::ostringstream text;
  text << kEntryHeader << "\nkey " << key << "\ncandidates " << record.candidates << "\nchoice " << record.choice
       << "\nmilliseconds";
  for (double ms : record.milliseconds) {
    if (std::isnan(ms)) {
      text << " refused";
    } else {
      char value[32];
      std::snprintf(value, sizeof value, " %.6f", ms);
      text << value;
    }
  }
  text << "\n";
  std::string body = text.str();
  return body + "checksum " + checksumOf(body) + "\n";
}

std::optional<GemmTuningRecord> decodeGemmTuning(std::string_view text, std::string_view key) {
  std::size_t checksumAt = text.rfind("checksum ");
  if (checksumAt == std::string_view::npos || (checksumAt > 0 && text[checksumAt - 1] != '\n'))
    return std::nullopt;
  std::string_view body = text.substr(0, checksumAt);
  if (text.substr(checksumAt) != "checksum " + checksumOf(body) + "\n")
    return std::nullopt;
  std::vector<std::string_view> lines;
  for (std::size_t at = 0; at < body.size();) {
    std::size_t end = body.find('\n', at);
    if (end == std::string_view::npos)
      return std::nullopt;
    lines.push_back(body.substr(at, end - at));
    at = end + 1;
  }
  if (lines.size() != 5 || lines[0] != kEntryHeader || fieldValue(lines[1], "key") != key)
    return std::nullopt;
  std::optional<std::string_view> candidates = fieldValue(lines[2], "candidates"),
                                  choice = fieldValue(lines[3], "choice");
  if (!candidates || !choice)
    return std::nullopt;
  GemmTuningRecord record;
  std::optional<int> count = parseCount(*candidates), chosen = parseCount(*choice);
  if (!count || !chosen || *chosen >= *count)
    return std::nullopt;
  record.candidates = *count;
  record.choice = *chosen;
  if (lines[4] != "milliseconds" && !lines[4].starts_with("milliseconds "))
    return std::nullopt;
  std::istringstream times{std::string(lines[4].substr(std::string_view("milliseconds").size()))};
  for (std::string word; times >> word;) {
    if (word == "refused") {
      record.milliseconds.push_back(std::nan(""));
      continue;
    }
    double ms = 0;
    auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), ms);
    if (error != std::errc() || end != word.data() + word.size())
      return std::nullopt;
    record.milliseconds.push_back(ms);
  }
  if (record.milliseconds.size() != std::size_t(record.candidates))
    return std::nullopt;
  return record;
}

std::filesystem::path gemmTuningEntryPath(const std::filesystem::path& directory, std::string_view key) {
  return directory / (CacheKey::of("ampjit-gemm-tuning\n" + std::string(key)).hex() + ".gemm");
}

} // namespace ampjit::runtime::cuda
