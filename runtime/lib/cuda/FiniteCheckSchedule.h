#ifndef AMPJIT_RUNTIME_LIB_CUDA_FINITECHECKSCHEDULE_H
#define AMPJIT_RUNTIME_LIB_CUDA_FINITECHECKSCHEDULE_H

// Where the CUDA backend's second stream pays: an AllFinite step reads every
// gradient once, a memory-bound pass that would otherwise run after the last
// backward GEMM (about 0.4 ms over mlp9's 604M f16 gradients). Checked in
// chunks on the side stream, each as soon as its gradients are final, the pass
// runs under the compute-bound GEMMs that produce the next gradients; the
// step itself only joins the side stream and checks what is left.
//
// Plain C++ on the plan (no CUDA), so the schedule is tested without a GPU.

#include "ampjit/runtime/Plan.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace ampjit::runtime::cuda {

/// Fewer elements than this per chunk cost more in fork, join and launch than
/// their check takes (16M f16 elements are about 11 us of bandwidth on an H100).
inline constexpr int64_t kMinEarlyFiniteCheckElements = int64_t(1) << 24;

/// Buffers checked together on the side stream once plan step `afterStep`
/// (their last writer, or the latest of them) has been enqueued.
struct FiniteCheckChunk {
  std::size_t afterStep = 0;
  std::vector<BufferId> buffers;
};

struct FiniteCheckSchedule {
  std::vector<FiniteCheckChunk> early; ///< in step order
  /// Checked at the AllFinite step itself, after joining the side stream:
  /// inputs written too late to fill a chunk, and inputs no step writes.
  std::vector<BufferId> atStep;
};

/// The schedule for AllFinite step `allFiniteStep`, or nothing when no chunk
/// reaches `minChunkElements` (the step then runs as it is).
std::optional<FiniteCheckSchedule> scheduleFiniteCheck(const Plan& plan, std::size_t allFiniteStep,
                                                       int64_t minChunkElements = kMinEarlyFiniteCheckElements);

} // namespace ampjit::runtime::cuda

#endif // AMPJIT_RUNTIME_LIB_CUDA_FINITECHECKSCHEDULE_H
