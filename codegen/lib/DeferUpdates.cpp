//===- DeferUpdates.cpp - move a step's optimizer update into the next run ===//
//
// PlanOptions::deferOptimizerUpdates (DESIGN's mlp9 note): the optimizer
// update is memory-bound work that, at the end of a step, has nothing to hide
// under. Moved to the front of the next run it can run beside that run's
// forward GEMMs, each parameter's update finishing before the first step that
// reads the parameter. The run that computed it keeps what the update reads
// in carried buffers (runtime Plan.h): its gradients, found-inf flag and
// inv_scale become carried, and values the caller may change before the next
// run (the learning rate, an output) are snapshot into carried copies where
// the update would have read them.
//
// The update U is every optimizer step plus every later step that reads or
// rewrites what U writes or rewrites state U reads (Adam's step count), in
// their order; the rest keeps its order. U is ordered by deadline, the first
// remaining step that needs its result or overwrites its inputs, so that a
// backend can start the update of the first layer first. Steps that only
// prepare updated state for use (an O1 weight's cast to f16) move down to
// the step that needs them, so each layer's update is due at its layer.
//
//===----------------------------------------------------------------------===//

#include "PlanFusion.h"

#include "ampjit/Codegen/PlanBuilder.h"
#include "ampjit/runtime/Backend.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <string>
#include <vector>

namespace ampjit::codegen {
namespace rt = ampjit::runtime;

namespace {

bool isSnapshotRole(rt::BufferRole role) {
  return role == rt::BufferRole::Input || role == rt::BufferRole::Hyper || role == rt::BufferRole::Output;
}

std::set<rt::BufferId> present(const std::vector<rt::BufferId> &ids) {
  std::set<rt::BufferId> set;
  for (rt::BufferId id : ids)
    if (id != rt::kNoBuffer)
      set.insert(id);
  return set;
}

bool touchesAny(const std::vector<rt::BufferId> &ids, const std::set<rt::BufferId> &set) {
  return std::any_of(ids.begin(), ids.end(), [&](rt::BufferId id) { return set.count(id) > 0; });
}

bool preparesState(rt::StepKind kind) {
  return kind == rt::StepKind::Elementwise || kind == rt::StepKind::FusedElementwise ||
         kind == rt::StepKind::BroadcastTo || kind == rt::StepKind::Reshape || kind == rt::StepKind::Transpose;
}

/// Moves each step that prepares updated state for its use (an O1 weight's
/// cast to f16, its layout transpose: elementwise and layout steps computed
/// from the update's results and other arguments alone) to just before the
/// first step that needs it. The front end places such casts at the top of
/// the function; there, every layer's update would be due at the first step,
/// and the update could hide under none of the forward.
void sinkStepsPreparingUpdatedState(const rt::Plan &plan, std::vector<rt::Step> &rest,
                                    const std::set<rt::BufferId> &writtenByUpdate) {
  std::set<rt::BufferId> prepared = writtenByUpdate;
  std::vector<bool> sinks(rest.size(), false);
  for (size_t i = 0; i < rest.size(); ++i) {
    const rt::Step &step = rest[i];
    bool fromStateAlone = std::all_of(step.inputs.begin(), step.inputs.end(), [&](rt::BufferId id) {
      return id == rt::kNoBuffer || plan.buffers[id].argument >= 0 ||
             plan.buffers[id].role == rt::BufferRole::Constant || prepared.count(id) > 0;
    });
    bool writesTemporaries = std::all_of(step.outputs.begin(), step.outputs.end(), [&](rt::BufferId id) {
      return id != rt::kNoBuffer && plan.buffers[id].role == rt::BufferRole::Temporary;
    });
    if (!preparesState(step.kind) || !fromStateAlone || !writesTemporaries || !touchesAny(step.inputs, prepared))
      continue;
    sinks[i] = true;
    for (rt::BufferId id : step.outputs)
      prepared.insert(id);
  }
  // Last first, so a chain (cast, then transpose) follows its reader down;
  // steps sunk to the same reader keep their order.
  std::vector<bool> sunk(rest.size(), false);
  for (size_t i = rest.size(); i-- > 0;) {
    if (!sinks[i])
      continue;
    size_t next = detail::firstDependent(rest, i);
    if (next < rest.size())
      detail::sinkStep(rest, sunk, i, next);
  }
}

} // namespace

DeferralResult deferOptimizerUpdates(rt::Plan &original, int64_t minimumElements) {
  // Rewritten in a copy: a refusal leaves the plan as it was.
  rt::Plan plan = original;
  const size_t stepCount = plan.steps.size();
  if (plan.deferredSteps > 0)
    return {0, "the plan already defers its update"};
  size_t first = stepCount;
  for (size_t i = 0; i < stepCount && first == stepCount; ++i)
    if (plan.steps[i].kind == rt::StepKind::OptimizerUpdate)
      first = i;
  if (first == stepCount)
    return {0, "the step has no optimizer update"};
  int64_t elements = rt::optimizerUpdateElements(plan);
  if (elements < minimumElements)
    return {0, "its update covers " + std::to_string(elements) + " parameter elements, fewer than the " +
                   std::to_string(minimumElements) + " that make deferring pay"};

  // The update: optimizer steps, what depends on their results, and what
  // later rewrites state they read (Adam's step count), in their order, so
  // every piece of state they touch keeps its order of reads and writes.
  std::vector<bool> inUpdate(stepCount, false);
  std::set<rt::BufferId> writtenByUpdate, stateReadByUpdate;
  for (size_t i = first; i < stepCount; ++i) {
    const rt::Step &step = plan.steps[i];
    inUpdate[i] = step.kind == rt::StepKind::OptimizerUpdate || touchesAny(step.inputs, writtenByUpdate) ||
                  touchesAny(step.outputs, writtenByUpdate) || touchesAny(step.outputs, stateReadByUpdate);
    if (!inUpdate[i])
      continue;
    for (rt::BufferId id : present(step.outputs)) {
      const rt::BufferDesc &buffer = plan.buffers[id];
      if (buffer.role != rt::BufferRole::Temporary && buffer.argument < 0)
        return {0, rt::describeStep(plan, i) + " computes a result of the run from the updated state"};
      writtenByUpdate.insert(id);
    }
    for (rt::BufferId id : present(step.inputs))
      if (plan.buffers[id].argument >= 0 && !isSnapshotRole(plan.buffers[id].role))
        stateReadByUpdate.insert(id);
  }

  for (const rt::PlanResult &result : plan.results)
    if (result.tiedArgument < 0 && writtenByUpdate.count(result.buffer))
      return {0, "the run returns " + rt::describeBuffer(plan, result.buffer) + ", which its update writes"};

  // What the update reads from the rest of the run: temporaries are carried
  // over as they are, and what the caller passes per run (inputs, the
  // learning rate) or receives (outputs) is copied where the update reads
  // it. State keeps its value: every later writer of it is in the update.
  struct Snapshot {
    rt::BufferId source, copy;
    size_t before; // original index of the first update step reading it
  };
  std::vector<Snapshot> snapshots;
  std::vector<rt::BufferId> replacement(plan.buffers.size(), rt::kNoBuffer);
  for (size_t i = first; i < stepCount; ++i) {
    if (!inUpdate[i])
      continue;
    for (rt::BufferId id : present(plan.steps[i].inputs)) {
      rt::BufferDesc &buffer = plan.buffers[id];
      if (buffer.role == rt::BufferRole::Temporary) {
        buffer.role = rt::BufferRole::Carried;
        continue;
      }
      if (!isSnapshotRole(buffer.role) || replacement[id] != rt::kNoBuffer)
        continue;
      if (!rt::isFloating(buffer.type.dtype))
        return {0, "the update reads " + rt::describeBuffer(plan, id) +
                       ", which would need a snapshot, and only floating-point values are copied"};
      rt::BufferDesc copy{.type = buffer.type, .role = rt::BufferRole::Carried};
      copy.name = (buffer.name.empty() ? "%" + std::to_string(id) : buffer.name) + ".deferred";
      replacement[id] = rt::BufferId(plan.buffers.size());
      snapshots.push_back({id, replacement[id], i});
      plan.buffers.push_back(std::move(copy));
    }
    // Temporaries the update writes for itself stay out of the arena, which
    // the next run's forward uses while the update runs beside it.
    for (rt::BufferId id : present(plan.steps[i].outputs))
      if (plan.buffers[id].role == rt::BufferRole::Temporary)
        plan.buffers[id].role = rt::BufferRole::Carried;
  }

  std::vector<rt::Step> update, rest;
  for (size_t i = 0; i < stepCount; ++i) {
    for (const Snapshot &snapshot : snapshots) {
      if (snapshot.before != i)
        continue;
      rt::Step copy;
      copy.kind = rt::StepKind::Elementwise;
      copy.computeType = plan.buffers[snapshot.source].type.dtype == rt::DType::F64 ? rt::DType::F64 : rt::DType::F32;
      copy.params = rt::ElementwiseParams{.op = rt::ElementwiseOp::Convert};
      copy.inputs = {snapshot.source};
      copy.outputs = {snapshot.copy};
      copy.origin = "snapshot for the deferred update";
      rest.push_back(std::move(copy));
    }
    rt::Step step = plan.steps[i];
    if (inUpdate[i]) {
      for (rt::BufferId &id : step.inputs)
        if (id != rt::kNoBuffer && replacement[id] != rt::kNoBuffer)
          id = replacement[id];
      update.push_back(std::move(step));
    } else {
      rest.push_back(std::move(step));
    }
  }

  sinkStepsPreparingUpdatedState(plan, rest, writtenByUpdate);

  plan.steps.clear();
  for (rt::Step &step : update)
    plan.steps.push_back(std::move(step));
  for (rt::Step &step : rest)
    plan.steps.push_back(std::move(step));
  plan.deferredSteps = uint32_t(update.size());

  // Ordered by deadline; an update step's is lowered to that of any later
  // update step depending on it, so the stable sort keeps such pairs.
  std::vector<size_t> deadline = rt::deferredStepDeadlines(plan);
  for (size_t later = update.size(); later-- > 0;)
    for (size_t earlier = 0; earlier < later; ++earlier)
      if (rt::mustFollow(plan.steps[earlier], plan.steps[later]))
        deadline[earlier] = std::min(deadline[earlier], deadline[later]);
  std::vector<size_t> order(update.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return deadline[a] < deadline[b]; });
  std::vector<rt::Step> sorted;
  for (size_t u : order)
    sorted.push_back(std::move(plan.steps[u]));
  std::move(sorted.begin(), sorted.end(), plan.steps.begin());
  original = std::move(plan);
  return {update.size(), ""};
}

} // namespace ampjit::codegen
