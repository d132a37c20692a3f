//===- AccumulateGradients.cpp - a gradient sum folded into a convolution --===//
//
// Where a value feeds two branches (a residual block's input: the block's
// first convolution and the shortcut), backward adds the two branches'
// gradients. One of them is a convolution's input gradient, and cuDNN can
// add its result to what its output already holds (beta = 1): the sum is
// then one call instead of the call and an elementwise launch, and the
// convolution's output buffer is the other gradient's, rewritten in place
// (runtime Plan.h: conv2d_grad_input's 'accumulate' input). The sum is
// rounded once, in the convolution's compute type before the store, instead
// of once for the convolution and again for the add (as cuDNN does; the CPU
// kernel does the same). For f32 data nothing changes; in f16 and bf16 the
// sum is the better rounded of the two.
//
//===----------------------------------------------------------------------===//

#include "PlanFusion.h"

#include "ampjit/Codegen/PlanBuilder.h"

#include <vector>

namespace rt = ampjit::runtime;

namespace ampjit::codegen {

namespace {

constexpr size_t kNone = ~size_t(0);

/// The last step before `before` that writes `id`, or kNone.
size_t lastWriterBefore(const rt::Plan &plan, rt::BufferId id, size_t before) {
  for (size_t index = before; index-- > 0;)
    for (rt::BufferId out : plan.steps[index].outputs)
      if (out == id)
        return index;
  return kNone;
}

/// Folds one sum into its convolution; false when none is left.
bool foldOneSum(rt::Plan &plan) {
  detail::Readers readers = detail::findReaders(plan);
  auto isTemporary = [&](rt::BufferId id) { return plan.buffers[id].role == rt::BufferRole::Temporary; };
  for (size_t index = 0; index < plan.steps.size(); ++index) {
    const rt::Step &add = plan.steps[index];
    if (add.kind != rt::StepKind::Elementwise || add.as<rt::ElementwiseParams>().op != rt::ElementwiseOp::Add ||
        add.inputs.size() != 2 || add.outputs.size() != 1 || !isTemporary(add.outputs[0]))
      continue;
    const rt::TensorType &type = plan.buffers[add.outputs[0]].type;
    bool sameTypes = true;
    for (rt::BufferId id : add.inputs)
      sameTypes &= id != rt::kNoBuffer && isTemporary(id) && plan.buffers[id].type == type &&
                   readers.onlyReader(plan, id, index);
    if (!sameTypes || add.inputs[0] == add.inputs[1])
      continue;
    // The operand a plain convolution gradient wrote last, after the other
    // operand was final, so that the convolution may add to it.
    for (int side = 1; side >= 0; --side) {
      rt::BufferId gradient = add.inputs[size_t(side)], other = add.inputs[size_t(1 - side)];
      size_t convolution = lastWriterBefore(plan, gradient, index);
      if (convolution == kNone || plan.steps[convolution].kind != rt::StepKind::Conv2dGradInput ||
          rt::accumulatesInPlace(plan.steps[convolution]) ||
          plan.steps[convolution].computeType != add.computeType)
        continue;
      size_t otherWriter = lastWriterBefore(plan, other, index);
      if (otherWriter == kNone || otherWriter >= convolution)
        continue;
      rt::BufferId sum = add.outputs[0];
      rt::Step &folded = plan.steps[convolution];
      folded.inputs.push_back(other);
      folded.outputs[0] = other;
      folded.origin += " + " + add.origin;
      for (size_t later = index + 1; later < plan.steps.size(); ++later)
        for (rt::BufferId &id : plan.steps[later].inputs)
          if (id == sum)
            id = other;
      std::vector<bool> removed(plan.steps.size(), false);
      removed[index] = true;
      detail::removeSteps(plan, removed);
      return true;
    }
  }
  return false;
}

} // namespace

void fuseGradientAccumulation(rt::Plan &plan) {
  while (foldOneSum(plan)) {
  }
}

} // namespace ampjit::codegen
