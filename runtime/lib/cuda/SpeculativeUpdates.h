#ifndef AMPJIT_RUNTIME_LIB_CUDA_SPECULATIVEUPDATES_H
#define AMPJIT_RUNTIME_LIB_CUDA_SPECULATIVEUPDATES_H

// Which optimizer updates the CUDA backend may run before the loss scaler
// has decided whether the step is skipped (AMPJIT_CUDA_SPECULATIVE_UPDATE).
//
// An update predicated on the finiteness check must wait for the whole
// backward pass: the check reads every gradient. On mlp9 that leaves the
// 7.25 GB of the update (2.4 ms at 3 TB/s) nothing to hide under but the next
// forward, where layer k's update is due at layer k's GEMM, a window of one
// to eight GEMMs that the update cannot meet beside them. Run speculatively,
// layer k's update starts on the side stream as soon as its gradient is
// final, under the backward GEMMs of the layers below, and writes the new
// state into a second buffer of each piece of state it rewrites. At the
// update's own place in the plan, where the check's flag is final, a copy
// of the old state into that buffer runs only when the step is skipped; the
// run then hands the state tensors the second buffers, and the next run
// writes into the first. Every value is the in-line update's, bit for bit.
//
// Plain C++ on the plan (no CUDA), so the schedule is tested without a GPU.

#include "ampjit/runtime/Plan.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace ampjit::runtime::cuda {

/// Below this many parameter elements the speculative updates together move
/// less than their side-stream forks, restores and second buffers cost.
inline constexpr int64_t kMinSpeculativeUpdateElements = int64_t(1) << 24;

/// `readyAfter` of an update whose inputs are final when the run starts.
inline constexpr std::size_t kReadyAtRunStart = std::numeric_limits<std::size_t>::max();

/// One OptimizerUpdate step run speculatively.
struct SpeculativeUpdate {
  std::size_t step = 0;
  /// The plan step after whose enqueue every input but the predicate holds
  /// its final value (its last writer), or kReadyAtRunStart.
  std::size_t readyAfter = kReadyAtRunStart;
  /// The step that writes its predicate (the finiteness check).
  std::size_t predicateWriter = 0;
  /// Per output slot, the state argument the step rewrites in place
  /// (kNoBuffer where the slot is absent): the buffers that get a second one.
  std::vector<BufferId> rewritten;
};

struct SpeculationSchedule {
  std::vector<SpeculativeUpdate> updates; ///< in step order
  /// Steps that compute an update's small input from state and constants
  /// alone (inv_scale = 1 / scale), run at the start of the run instead of
  /// where they stand, into memory of their own, so that the updates need
  /// not wait for them.
  std::vector<std::size_t> hoisted;
};

/// The input slot of an OptimizerUpdate step's overflow predicate.
std::size_t optimizerPredicateSlot(const Step& step);

/// The updates of `plan` that may run speculatively, and what they need; or
/// nothing, with the reason in `whyNot`, when none may or together they
/// update fewer than `minimumElements` parameter elements. An update
/// qualifies when it is predicated, rewrites only state arguments, each in
/// place and through no view, that no other step writes and no later step
/// reads, and its inputs are final before its predicate is written.
std::optional<SpeculationSchedule> scheduleSpeculativeUpdates(const Plan& plan, int64_t minimumElements,
                                                              std::string* whyNot = nullptr);

/// A speculative SGD update computed in its gradient's GEMM
/// (AMPJIT_CUDA_GEMM_FOLDED_UPDATE). Without momentum or weight decay, SGD
/// is new_param = param - lr * inv_scale * grad, and the weight gradient is
/// the product dW = op(A) op(B): cuBLASLt's D = alpha * op(A) op(B) + beta * C
/// with alpha = -lr * inv_scale (read from the device), beta = 1 and C the
/// f32 parameter is the whole update, in the GEMM's epilogue, where its
/// memory traffic overlaps the GEMM's arithmetic. D is the parameter's second
/// buffer, so the step can still be skipped; a kernel after the GEMM checks
/// the new parameter for inf and NaN (an inf or NaN gradient makes it so)
/// and writes the low-precision copy. What differs from the update in line:
/// the gradient is never rounded to its f16 or bf16 dtype, so a gradient
/// that would overflow that dtype but not f32 updates the parameter instead
/// of skipping the step, and the bits are not the in-line update's.
struct GemmFold {
  std::size_t gemm = 0; ///< the Gemm step that writes the gradient
};

/// The GEMM `update` (one of a schedule's) can be folded into, or why not:
/// a plain SGD update (no momentum, no weight decay) of an f32 matrix whose
/// f32 lr and inv_scale are scalars; its gradient a temporary of its own,
/// written only by a Gemm step without an epilogue (one product, no batch)
/// in f32 arithmetic, and read by nothing but the update and the finiteness
/// check that writes its predicate; and that GEMM the last step its other
/// inputs wait for.
std::optional<GemmFold> gemmFoldOf(const Plan& plan, const SpeculativeUpdate& update, std::string& whyNot);

} // namespace ampjit::runtime::cuda

#endif // AMPJIT_RUNTIME_LIB_CUDA_SPECULATIVEUPDATES_H
