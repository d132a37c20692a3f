//===- GradientReshapes.cpp - read a gradient before its reshape ----------===//
//
// An optimizer update and a finiteness check read a gradient as flat memory,
// element by element (runtime Plan.h: the gradient has the parameter's
// element count). A gradient that only changes shape on the way to them,
// such as a 1x1 convolution's weight gradient moved from the NHWC filter
// layout [K, 1, 1, C] back to the parameter's [K, C, 1, 1], has the same
// elements in the same order before its reshape, so they read it there and
// the reshape (a copy on both backends) goes. Values are bit for bit the
// same.
//
// A gradient that is transposed on its way to them (a convolution's weight
// gradient moved from OHWI back to OIHW) keeps its transpose, which moves
// down to just before the finiteness check, next to the other gradients'
// transposes: one launch on the CUDA backend, instead of one per layer
// between the backward's convolutions.
//
//===----------------------------------------------------------------------===//

#include "PlanFusion.h"

#include "ampjit/Codegen/PlanBuilder.h"

#include <algorithm>
#include <vector>

namespace rt = ampjit::runtime;

namespace ampjit::codegen {

namespace {

/// Whether `reader` reads `id` only where a flat element order is all it needs.
bool readsFlat(const rt::Step &reader, rt::BufferId id) {
  if (reader.kind == rt::StepKind::AllFinite)
    return true;
  if (reader.kind != rt::StepKind::OptimizerUpdate)
    return false;
  for (size_t slot = 0; slot < reader.inputs.size(); ++slot)
    if (reader.inputs[slot] == id && slot != rt::sgd_slot::kGrad)
      return false;
  return true;
}

} // namespace

void readGradientsBeforeTheirReshape(rt::Plan &plan) {
  static_assert(rt::sgd_slot::kGrad == rt::adam_slot::kGrad, "one gradient slot for both optimizers");
  detail::Readers readers = detail::findReaders(plan);
  std::vector<int> writers(plan.buffers.size(), 0);
  for (const rt::Step &step : plan.steps)
    for (rt::BufferId id : step.outputs)
      if (id != rt::kNoBuffer)
        ++writers[id];
  auto isTemporary = [&](rt::BufferId id) { return plan.buffers[id].role == rt::BufferRole::Temporary; };
  std::vector<bool> removed(plan.steps.size(), false);
  for (size_t r = 0; r < plan.steps.size(); ++r) {
    const rt::Step &reshape = plan.steps[r];
    if (reshape.kind != rt::StepKind::Reshape)
      continue;
    rt::BufferId before = reshape.inputs[0], after = reshape.outputs[0];
    // Both written once, so `before` still holds the values wherever `after`
    // is read; nothing returns `after`.
    if (!isTemporary(before) || !isTemporary(after) || writers[before] != 1 || writers[after] != 1 ||
        readers.returned[after] || readers.steps[after].empty())
      continue;
    const std::vector<size_t> &uses = readers.steps[after];
    if (!std::all_of(uses.begin(), uses.end(), [&](size_t s) { return readsFlat(plan.steps[s], after); }))
      continue;
    for (size_t s : uses)
      std::replace(plan.steps[s].inputs.begin(), plan.steps[s].inputs.end(), after, before);
    for (size_t s : uses)
      readers.steps[before].push_back(s);
    removed[r] = true;
  }
  detail::removeSteps(plan, removed);
}

void sinkGradientTransposesToTheirCheck(rt::Plan &plan) {
  detail::Readers readers = detail::findReaders(plan);
  std::vector<rt::Step> &steps = plan.steps;
  // Last first, so each transpose lands just before the check, after those
  // already moved: they keep their order.
  std::vector<bool> moved(steps.size(), false);
  for (size_t t = steps.size(); t-- > 0;) {
    if (steps[t].kind != rt::StepKind::Transpose || readers.returned[steps[t].outputs[0]])
      continue;
    const std::vector<size_t> &uses = readers.steps[steps[t].outputs[0]];
    if (uses.empty())
      continue;
    size_t check = *std::min_element(uses.begin(), uses.end());
    // Nothing between may write what the transpose reads, or touch what it
    // writes: the first step that must follow it is the check.
    if (steps[check].kind != rt::StepKind::AllFinite || detail::firstDependent(steps, t) != check)
      continue;
    detail::sinkStep(steps, moved, t, check);
    readers = detail::findReaders(plan); // the steps after t moved
  }
}

} // namespace ampjit::codegen
