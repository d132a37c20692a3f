//===- PlanFusion.h - what the plan-level fusions share ---------*- C++ -*-===//
//
// The fusions of PlanOptions (elementwise runs, GEMM epilogues, batch-norm
// epilogues, gradient sums) and the passes that move or mark steps
// (deferral, gradient transposes, side steps) rewrite a plan before its
// arena is laid out, when every temporary is still its own buffer, written
// by one step, or by two where a convolution adds its input gradient to it
// in place (fuseGradientAccumulation; the passes after it go by buffer
// identity, which that keeps). These are the questions they all ask of it,
// answered once.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_CODEGEN_LIB_PLANFUSION_H
#define AMPJIT_CODEGEN_LIB_PLANFUSION_H

#include "ampjit/runtime/Plan.h"

#include <cstddef>
#include <vector>

namespace ampjit::codegen::detail {

/// Where each buffer is read: step indices, and whether the function returns it.
struct Readers {
  std::vector<std::vector<size_t>> steps;
  std::vector<bool> returned;

  /// Whether `id` is a temporary that step `step` alone reads (so a fusion
  /// that consumes it inside `step`'s kernel may drop it).
  bool onlyReader(const runtime::Plan &plan, runtime::BufferId id, size_t step) const;
};

Readers findReaders(const runtime::Plan &plan);

/// Drops temporaries no step reads or writes any more and renumbers the rest.
void dropUnusedTemporaries(runtime::Plan &plan);

/// Removes the marked steps and the temporaries nothing uses any more.
void removeSteps(runtime::Plan &plan, const std::vector<bool> &removed);

/// The first step after `index` that must follow steps[index]
/// (runtime mustFollow), or steps.size().
size_t firstDependent(const std::vector<runtime::Step> &steps, size_t index);

/// Moves steps[index] down to just before steps[before], ahead of the steps
/// already sunk there (marked in `sunk`, which moves along), and marks it:
/// steps sunk to the same place, last first, keep their order.
void sinkStep(std::vector<runtime::Step> &steps, std::vector<bool> &sunk, size_t index, size_t before);

} // namespace ampjit::codegen::detail

#endif // AMPJIT_CODEGEN_LIB_PLANFUSION_H
