#ifndef AMPJIT_RUNTIME_LIB_CUDA_GEMMTUNING_H
#define AMPJIT_RUNTIME_LIB_CUDA_GEMMTUNING_H

// Choosing a GEMM's cuBLASLt algorithm by timing it (CudaBackendOptions::
// gemmTuningMinimumFlops, AMPJIT_CUDA_GEMM_TUNING).
//
// cuBLASLt's heuristic ranks algorithms by a model of the device; its first
// choice is good but not always the fastest (a split that balances the last
// wave, a tile that suits a short K). At prepare, a GEMM large enough to be
// worth it asks the heuristic for up to GemmTuner::candidates algorithms
// (kDefaultGemmTuningCandidates, AMPJIT_CUDA_GEMM_TUNING_CANDIDATES), runs
// each on scratch operands of the GEMM's shapes, and keeps the fastest when
// it beats the heuristic's first by more than kGemmTuningMargin (closer than
// that is noise, and the first choice is the one cuBLASLt stands behind).
// Timing is in two rounds, so a longer list costs little: every candidate is
// screened by one short timed run, and only the heuristic's first and the
// kGemmTuningFinalists fastest of the screen get the full trials the choice
// is made from (gemmTuningFinalists). CublasLtGemm.cpp does the timing.
//
// The choice is remembered per problem (the device, cuBLASLt's version and
// everything the heuristic is given) in the process, and on disk beside the
// generated kernels (Nvrtc.h's cache directory), as the candidate's rank in
// the heuristic's list: the heuristic is deterministic for one problem, so a
// later process asks it again and takes the same rank without timing
// anything, and picks the same algorithm. An entry that does not parse,
// names another problem, or counts other candidates than the heuristic now
// offers (its list changed, so the rank means another algorithm) is ignored
// and replaced, never trusted.
//
// Built only with the CUDA backend (AMPJIT_CUDA_ENABLED).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ampjit::runtime::cuda {

/// How many algorithms a tuned GEMM asks the heuristic for, unless
/// CudaBackendOptions::gemmTuningCandidates says otherwise; at most
/// kMaxGemmTuningCandidates.
inline constexpr int kDefaultGemmTuningCandidates = 8;
inline constexpr int kMaxGemmTuningCandidates = 64;
/// How many of the screened candidates, besides the heuristic's first, get
/// full trials: the fastest of the screen. A single short run ranks them
/// well enough to drop the clearly slower; the trials settle the close ones.
inline constexpr int kGemmTuningFinalists = 4;
/// What AMPJIT_CUDA_GEMM_TUNING=1 tunes: GEMMs of at least 2^34
/// floating-point operations (2 m n k), about 25 us on an H100 at peak. A
/// smaller product's time is close to its launch's, which the host's enqueue
/// would distort, and a better algorithm saves it little.
inline constexpr int64_t kDefaultGemmTuningMinimumFlops = int64_t(1) << 34;
/// How much faster than the heuristic's first choice another must be.
inline constexpr double kGemmTuningMargin = 0.02;

/// The candidate to run, given each one's time in milliseconds in the
/// heuristic's order (NaN: cuBLASLt refused to run it): the fastest, if it
/// beats the first by more than `margin` (a fraction of the first's time),
/// else the first; when the first did not run, the fastest that did. -1 when
/// none ran.
int chooseGemmCandidate(std::span<const double> milliseconds, double margin = kGemmTuningMargin);

/// The candidates that get full trials, in the heuristic's order, given each
/// one's screening time (NaN: refused): the heuristic's first, if it ran,
/// and the `finalists` fastest others that ran (the earlier on a tie).
std::vector<int> gemmTuningFinalists(std::span<const double> screenMilliseconds,
                                     int finalists = kGemmTuningFinalists);

/// What the disk remembers of one problem's tuning.
struct GemmTuningRecord {
  /// How many candidates the heuristic offered, and which of them won.
  int candidates = 0;
  int choice = 0;
  /// Each candidate's time, for whoever reads the entry (NaN: refused): a
  /// finalist's median trial, the others' screening run.
  std::vector<double> milliseconds;
};

/// The entry's text: a header, the problem's key, the record, and a checksum
/// of all of it.
std::string encodeGemmTuning(std::string_view key, const GemmTuningRecord& record);
/// The record of a well-formed entry for `key`; nothing for anything else (a
/// truncated or edited entry, another key, a choice outside the candidates).
std::optional<GemmTuningRecord> decodeGemmTuning(std::string_view text, std::string_view key);
/// Where `key`'s entry lives in `directory` (`<128-bit hash>.gemm`).
std::filesystem::path gemmTuningEntryPath(const std::filesystem::path& directory, std::string_view key);

/// What tuning has done; CudaRunStats reports the change over one prepare.
struct GemmTuningCounts {
  int64_t stepsTuned = 0;           ///< GEMM steps given a timed choice (now, earlier, or from disk)
  int64_t stepsOffHeuristic = 0;    ///< of those, steps that run another than the heuristic's first
  int64_t problemsTimed = 0;        ///< problems whose candidates ran here
  int64_t cacheHits = 0;            ///< choices read from disk
  int64_t cacheEntriesRejected = 0; ///< entries on disk ignored as malformed or stale
  int64_t stepsUntuned = 0;         ///< GEMMs that wanted tuning but kept the heuristic's first (no memory)
  int64_t candidatesScreened = 0;   ///< candidates of the problems timed that ran their screening run
  int64_t finalistsTimed = 0;       ///< of those, the ones that ran the full trials
  double timingMilliseconds = 0;    ///< host time spent timing candidates

  GemmTuningCounts since(const GemmTuningCounts& before) const {
    return {stepsTuned - before.stepsTuned,
            stepsOffHeuristic - before.stepsOffHeuristic,
            problemsTimed - before.problemsTimed,
            cacheHits - before.cacheHits,
            cacheEntriesRejected - before.cacheEntriesRejected,
            stepsUntuned - before.stepsUntuned,
            candidatesScreened - before.candidatesScreened,
            finalistsTimed - before.finalistsTimed,
            timingMilliseconds - before.timingMilliseconds};
  }
};

/// What tuning shares across a backend's prepares: the device, its memory
/// and the choices made so far.
struct GemmTuner {
  /// GEMMs of fewer floating-point operations keep the heuristic's choice.
  int64_t minimumFlops = 0;
  /// How many algorithms to ask the heuristic for (1 to kMaxGemmTuningCandidates).
  int candidates = kDefaultGemmTuningCandidates;
  /// Empty: no disk cache, choices last as long as the process.
  std::filesystem::path cacheDirectory;
  /// The device and cuBLASLt's version, the start of every problem's key.
  std::string deviceKey;
  /// Scratch operands come from the backend's pool, on its stream.
  cudaMemPool_t pool = nullptr;
  cudaStream_t stream = nullptr;
  /// Choices made in this process, by problem key.
  std::map<std::string, int> chosen;
  GemmTuningCounts counts;
  /// Why the latest GEMM that wanted tuning went without (counts.stepsUntuned).
  std::string untunedReason;

  bool wants(double flops) const { return minimumFlops > 0 && flops >= double(minimumFlops); }
};

} // namespace ampjit::runtime::cuda

#endif // AMPJIT_RUNTIME_LIB_CUDA_GEMMTUNING_H
