//===- FuseBatchNorm.cpp - batch norm + (add) + relu as one step ----------===//
//
// The CUDA pipeline's batch-norm epilogues (PlanOptions::fuseBatchNormEpilogues,
// Plan.h's BatchNormActivation), the pattern of every ResNet block:
//
//   forward   y = relu(batch_norm(x))            -> batch_norm activation=relu
//             y = relu(batch_norm(x) + z)        -> batch_norm activation=add_relu
//   backward  g = relu_grad(dy, y)
//             dx, dw, db = batch_norm_grad(g, x, ...)
//                                                -> batch_norm_grad activation=...
//             (g, the residual's gradient, stays an output: dz)
//
// A forward fuses when the normalised output is a temporary read only by the
// add (or the relu), the sum only by the relu, and every type matches x's
// (no broadcast, no cast between). A backward fuses only with a fused
// forward: its relu_grad reads that forward's y, and the batch_norm_grad
// reads g and the forward's x, statistics and weight; with a plain relu, g
// must have no other reader (there is no dz to hand it to). Pairing them is
// what lets cuDNN pass its reserve space from one to the other.
//
// The steps of a pattern need not be adjacent (a block's downsample branch
// runs between its batch norm and its add; the residual gradient's other
// uses run between relu_grad and batch_norm_grad). The fused forward takes
// the relu's place and the fused backward the relu_grad's, and each fusion
// is made only when the steps it jumps over neither touch what the moved
// step writes nor write what it reads, so every value is still written
// before it is read and read before it is overwritten.
//
//===----------------------------------------------------------------------===//

#include "PlanFusion.h"

#include "ampjit/Codegen/PlanBuilder.h"

#include <algorithm>
#include <map>
#include <optional>

namespace rt = ampjit::runtime;

namespace ampjit::codegen {

namespace {

using detail::Readers;

bool isElementwise(const rt::Step &step, rt::ElementwiseOp op) {
  return step.kind == rt::StepKind::Elementwise && step.as<rt::ElementwiseParams>().op == op;
}

bool contains(const std::vector<rt::BufferId> &ids, rt::BufferId id) {
  return id != rt::kNoBuffer && std::find(ids.begin(), ids.end(), id) != ids.end();
}

bool touchesAny(const std::vector<rt::BufferId> &ids, const std::vector<rt::BufferId> &buffers) {
  return std::any_of(buffers.begin(), buffers.end(), [&](rt::BufferId id) { return contains(ids, id); });
}

/// Whether moving step `moved` to position `target` keeps every dependence
/// with the steps strictly between them, those fused away (`gone`) aside:
/// none of them reads or writes what `moved` writes, or writes what `moved`
/// reads (`reads`: its inputs after the fusion).
bool canMove(const rt::Plan &plan, size_t moved, size_t target, const std::vector<rt::BufferId> &reads,
             const std::vector<rt::BufferId> &writes, const std::vector<bool> &gone) {
  size_t low = std::min(moved, target), high = std::max(moved, target);
  for (size_t s = low + 1; s < high; ++s) {
    if (gone[s])
      continue;
    const rt::Step &step = plan.steps[s];
    if (touchesAny(step.inputs, writes) || touchesAny(step.outputs, writes) || touchesAny(step.outputs, reads))
      return false;
  }
  return true;
}

/// A fused forward: where it now sits and what its backward must match.
struct FusedForward {
  rt::BatchNormActivation activation;
  rt::BufferId x, weight, bias, saveMean, saveInvstd;
};

/// Folds add + relu or relu into each batch norm that allows it; the fused
/// step replaces the relu, the others are dropped.
void fuseForwards(rt::Plan &plan) {
  namespace slot = rt::batch_norm_slot;
  Readers readers = detail::findReaders(plan);
  std::vector<bool> removed(plan.steps.size(), false);
  for (size_t b = 0; b < plan.steps.size(); ++b) {
    const rt::Step &norm = plan.steps[b];
    if ((norm.kind != rt::StepKind::BatchNorm && norm.kind != rt::StepKind::BatchNormInference) ||
        norm.as<rt::BatchNormParams>().activation != rt::BatchNormActivation::None)
      continue;
    rt::BufferId normalised = norm.outputs[slot::kY];
    const rt::TensorType &type = plan.buffers[normalised].type;
    const std::vector<size_t> &normalisedReaders = readers.steps[normalised];
    if (normalisedReaders.size() != 1 || !readers.onlyReader(plan, normalised, normalisedReaders[0]))
      continue;
    size_t first = normalisedReaders[0];
    const rt::Step &next = plan.steps[first];
    if (plan.buffers[next.outputs[0]].type != type)
      continue;
    rt::BatchNormActivation activation = rt::BatchNormActivation::Relu;
    std::optional<rt::BufferId> residual;
    size_t relu = first;
    if (isElementwise(next, rt::ElementwiseOp::Add)) {
      rt::BufferId other = next.inputs[0] == normalised ? next.inputs[1] : next.inputs[0];
      rt::BufferId sum = next.outputs[0];
      if (other == normalised || plan.buffers[other].type != type || readers.steps[sum].size() != 1 ||
          !readers.onlyReader(plan, sum, readers.steps[sum][0]))
        continue;
      relu = readers.steps[sum][0];
      if (!isElementwise(plan.steps[relu], rt::ElementwiseOp::Relu) ||
          plan.buffers[plan.steps[relu].outputs[0]].type != type)
        continue;
      activation = rt::BatchNormActivation::AddRelu;
      residual = other;
    } else if (!isElementwise(next, rt::ElementwiseOp::Relu)) {
      continue;
    }
    std::vector<rt::BufferId> reads = norm.inputs, writes = norm.outputs;
    if (residual)
      reads.push_back(*residual);
    std::vector<bool> gone = removed;
    gone[first] = true;
    if (!canMove(plan, b, relu, reads, writes, gone))
      continue;
    // The residual must not change between the add that read it and the relu.
    if (residual && !canMove(plan, first, relu, {*residual}, {}, removed))
      continue;

    rt::Step fused = norm;
    fused.as<rt::BatchNormParams>().activation = activation;
    if (residual)
      fused.inputs.push_back(*residual);
    fused.outputs[slot::kY] = plan.steps[relu].outputs[0];
    fused.origin += (residual ? " + " + next.origin : "") + " + " + plan.steps[relu].origin;
    plan.steps[relu] = std::move(fused);
    removed[b] = true;
    if (first != relu)
      removed[first] = true;
  }
  std::vector<rt::Step> steps;
  for (size_t s = 0; s < plan.steps.size(); ++s)
    if (!removed[s])
      steps.push_back(std::move(plan.steps[s]));
  plan.steps = std::move(steps);
}

/// Folds each relu_grad into the batch_norm_grad of a fused forward; the
/// fused gradient replaces the relu_grad.
void fuseBackwards(rt::Plan &plan) {
  namespace slot = rt::batch_norm_grad_slot;
  Readers readers = detail::findReaders(plan);
  std::map<rt::BufferId, FusedForward> forwardOf; // by the forward's output y
  for (const rt::Step &step : plan.steps) {
    if (step.kind != rt::StepKind::BatchNorm)
      continue;
    rt::BatchNormActivation activation = step.as<rt::BatchNormParams>().activation;
    if (activation == rt::BatchNormActivation::None)
      continue;
    namespace fwd = rt::batch_norm_slot;
    forwardOf[step.outputs[fwd::kY]] = {activation,           step.inputs[fwd::kX],
                                        step.inputs[fwd::kWeight], step.inputs[fwd::kBias],
                                        step.outputs[fwd::kSaveMean], step.outputs[fwd::kSaveInvstd]};
  }
  std::vector<bool> removed(plan.steps.size(), false);
  for (size_t q = 0; q < plan.steps.size(); ++q) {
    const rt::Step &reluGrad = plan.steps[q];
    if (!isElementwise(reluGrad, rt::ElementwiseOp::ReluGrad))
      continue;
    rt::BufferId dy = reluGrad.inputs[0], y = reluGrad.inputs[1], g = reluGrad.outputs[0];
    auto forward = forwardOf.find(y);
    if (forward == forwardOf.end())
      continue;
    const FusedForward &f = forward->second;
    const rt::TensorType &type = plan.buffers[f.x].type;
    if (plan.buffers[dy].type != type || plan.buffers[g].type != type)
      continue;
    // The batch_norm_grad of that forward, reading g as its dy.
    std::optional<size_t> found;
    for (size_t k : readers.steps[g]) {
      const rt::Step &grad = plan.steps[k];
      if (k > q && grad.kind == rt::StepKind::BatchNormGrad && grad.inputs[slot::kDy] == g &&
          grad.as<rt::BatchNormGradParams>().activation == rt::BatchNormActivation::None &&
          grad.inputs[slot::kX] == f.x && grad.inputs[slot::kSaveMean] == f.saveMean &&
          grad.inputs[slot::kSaveInvstd] == f.saveInvstd && grad.inputs[slot::kWeight] == f.weight)
        found = k;
    }
    if (!found)
      continue;
    size_t k = *found;
    bool keepsG = f.activation == rt::BatchNormActivation::AddRelu;
    if (!keepsG && !readers.onlyReader(plan, g, k))
      continue;
    const rt::Step &grad = plan.steps[k];
    rt::Step fused = grad;
    fused.as<rt::BatchNormGradParams>().activation = f.activation;
    fused.inputs[slot::kDy] = dy;
    fused.inputs.push_back(y);
    fused.inputs.push_back(f.bias);
    if (keepsG)
      fused.outputs.push_back(g);
    // g is written where it was (at q), so only the gradient's own outputs move.
    if (!canMove(plan, k, q, fused.inputs, grad.outputs, removed))
      continue;
    fused.origin = reluGrad.origin + " + " + grad.origin;
    plan.steps[q] = std::move(fused);
    removed[k] = true;
  }
  std::vector<rt::Step> steps;
  for (size_t s = 0; s < plan.steps.size(); ++s)
    if (!removed[s])
      steps.push_back(std::move(plan.steps[s]));
  plan.steps = std::move(steps);
}

} // namespace

void fuseBatchNormEpilogues(rt::Plan &plan) {
  fuseForwards(plan);
  fuseBackwards(plan);
  detail::dropUnusedTemporaries(plan);
}

} // namespace ampjit::codegen
