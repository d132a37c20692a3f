#ifndef AMPJIT_RUNTIME_LIB_CUDA_TIMELINE_H
#define AMPJIT_RUNTIME_LIB_CUDA_TIMELINE_H

// AMPJIT_TIMELINE: when each launch of one replayed step ran, on which
// stream, read from the device's global timer by one-thread kernels before
// and after it. AMPJIT_PROFILE times launches one after another, so it cannot
// say whether the side stream's work (the deferred update, side steps,
// finiteness chunks) runs beside the main stream's GEMMs or only in the gaps
// between them, nor how fast it runs there: the question mlp9's step turns
// on (bench/results/2026-11-26-h100). This is the arithmetic on the stamps:
// plain C++, tested without a GPU.

#include <cstdint>
#include <span>
#include <vector>

namespace ampjit::runtime::cuda {

/// One launch: whether it ran on the side stream, and the global timer (ns)
/// when its stream reached it (after its waits) and when it had finished.
struct TimelineLaunch {
  bool side = false;
  uint64_t startNs = 0;
  uint64_t endNs = 0;
};

/// Microseconds from the first launch's start to the last one's end; how
/// long each stream had a launch running (overlapping launches of one stream
/// counted once); and how long both had, the side stream's work that ran
/// beside the main stream's rather than alone. Per launch, in order, how
/// long the other stream had a launch running during it: an update that
/// took 0.6 ms with 0.5 of them beside GEMMs ran there, slowly.
struct TimelineSummary {
  double spanUs = 0;
  double mainBusyUs = 0;
  double sideBusyUs = 0;
  double bothBusyUs = 0;
  std::vector<double> besideOtherStreamUs;
};

TimelineSummary summarizeTimeline(std::span<const TimelineLaunch> launches);

} // namespace ampjit::runtime::cuda

#endif // AMPJIT_RUNTIME_LIB_CUDA_TIMELINE_H
