//===- OverlapWeightGradients.cpp - weight gradients on the side lane ------===//
//
// In a backward pass, each layer's weight gradient and its input gradient
// both read the layer's output gradient, and nothing on the way back to the
// loss's input needs the weight gradient: only the finiteness check and the
// update read it, at the end. When one library call does not fill the
// device, the weight gradients can run as side steps (runtime
// Plan::sideSteps): on a second stream, beside the batch-norm and input
// gradients that the next layers wait for. That is every convolution's
// filter gradient at the sizes ResNet-50 trains 32x32 images at (8x8 down to
// 1x1 feature maps), and a GEMM's weight gradient when the GEMM is small
// enough to be bound by its launch (the MNIST classifier's, the ResNet's
// fc layer), not mlp9's, whose 8192 x 8192 x 2048 products each fill the GPU
// for about 0.35 ms on their own.
//
// A convolution's input gradient that nothing needs for a few steps runs
// beside them too: in a downsampling block's backward, the shortcut's input
// gradient is computed before the main branch's three convolutions, and
// only the last of those adds it in (fuseGradientAccumulation).
//
// A bias gradient of a large layer (the column sums of its output gradient,
// widened from f16 first) goes beside too: only the update reads it, and in
// line it sat between an mlp's backward GEMMs (8 x 65 us of mlp9's step on an
// H200, 2026-11-29).
//
// A side step joins before the weight gradient kWeightGradientLag places
// later starts, so at most that many wait on the side lane and the arena
// holds each one's inputs only that long; or earlier, before the first step
// that reads what it writes or writes what it touches (runtime mustFollow).
//
//===----------------------------------------------------------------------===//

#include "PlanFusion.h"

#include "ampjit/Codegen/PlanBuilder.h"

#include <algorithm>
#include <vector>

namespace rt = ampjit::runtime;

namespace ampjit::codegen {

namespace {

/// Whether `id` is a parameter's gradient: the scaler's check or the
/// optimizer reads it after step `after` (through reshapes and transposes),
/// or the next run's deferred update does (a carried buffer), and no other
/// step reads it after `after`. (A deferred update reading it before
/// `after` reads the previous run's.)
bool onlyTheUpdateReads(const rt::Plan &plan, const detail::Readers &readers, rt::BufferId id, size_t after) {
  bool read = plan.buffers[id].role == rt::BufferRole::Carried;
  for (size_t reader : readers.steps[id]) {
    if (reader <= after)
      continue;
    const rt::Step &step = plan.steps[reader];
    switch (step.kind) {
    case rt::StepKind::AllFinite:
    case rt::StepKind::UnscaleAndCheck:
    case rt::StepKind::OptimizerUpdate: break;
    case rt::StepKind::Reshape:
    case rt::StepKind::Transpose:
      if (!onlyTheUpdateReads(plan, readers, step.outputs[0], reader))
        return false;
      break;
    default: return false;
    }
    read = true;
  }
  return read;
}

/// 2 x M x N x K (x batch) of a Gemm step.
double gemmFlops(const rt::Plan &plan, const rt::Step &gemm) {
  const rt::Shape &a = plan.buffers[gemm.inputs[0]].type.shape;
  int64_t k = a.size() < 2 ? 1 : gemm.as<rt::GemmParams>().transposeA ? a[a.size() - 2] : a.back();
  return 2.0 * double(plan.buffers[gemm.outputs[0]].type.elementCount()) * double(k);
}

bool isWeightGradient(const rt::Plan &plan, const detail::Readers &readers, size_t index) {
  const rt::Step &step = plan.steps[index];
  if (step.kind != rt::StepKind::Conv2dGradWeight &&
      (step.kind != rt::StepKind::Gemm || gemmFlops(plan, step) > kMaxSideGemmFlops))
    return false;
  return std::all_of(step.outputs.begin(), step.outputs.end(), [&](rt::BufferId id) {
    return id == rt::kNoBuffer || onlyTheUpdateReads(plan, readers, id, index);
  });
}

/// A bias gradient: a sum at `index` over an input of at least
/// `minimumElements` elements, whose result only the finiteness check and
/// the optimizer read.
bool isBiasGradient(const rt::Plan &plan, const detail::Readers &readers, size_t index, int64_t minimumElements) {
  const rt::Step &step = plan.steps[index];
  if (step.kind != rt::StepKind::Reduction || step.as<rt::ReductionParams>().op != rt::ReduceOp::Sum ||
      step.inputs.size() != 1 || step.outputs.size() != 1 ||
      plan.buffers[step.inputs[0]].type.elementCount() < minimumElements)
    return false;
  return onlyTheUpdateReads(plan, readers, step.outputs[0], index);
}

/// Whether the step before the bias gradient at `index` widens what it sums
/// (an f16 or bf16 output gradient to f32) and nothing else reads the
/// widened copy: the CUDA backend runs the two as one launch, beside
/// together.
bool widenedFor(const rt::Plan &plan, const detail::Readers &readers, size_t index) {
  if (index <= plan.deferredSteps)
    return false;
  const rt::Step &convert = plan.steps[index - 1];
  if (convert.kind != rt::StepKind::Elementwise ||
      convert.as<rt::ElementwiseParams>().op != rt::ElementwiseOp::Convert || convert.inputs.size() != 1 ||
      convert.outputs.size() != 1 || convert.outputs[0] != plan.steps[index].inputs[0])
    return false;
  rt::DType narrow = plan.buffers[convert.inputs[0]].type.dtype;
  rt::BufferId widened = convert.outputs[0];
  return (narrow == rt::DType::F16 || narrow == rt::DType::BF16) &&
         plan.buffers[widened].type.dtype == rt::DType::F32 && readers.onlyReader(plan, widened, index);
}

} // namespace

void overlapWeightGradients(rt::Plan &plan, size_t lag, int64_t reductionMinimumElements) {
  detail::Readers readers = detail::findReaders(plan);
  std::vector<size_t> gradients;
  for (size_t index = plan.deferredSteps; index < plan.steps.size(); ++index)
    if (isWeightGradient(plan, readers, index))
      gradients.push_back(index);
  lag = std::max<size_t>(lag, 1);
  plan.sideSteps.clear();
  for (size_t k = 0; k < gradients.size(); ++k) {
    size_t index = gradients[k];
    size_t join = k + lag < gradients.size() ? gradients[k + lag] : plan.steps.size();
    join = std::min(join, detail::firstDependent(plan.steps, index));
    // Joined at the very next step, it would overlap nothing.
    if (join > index + 1)
      plan.sideSteps.push_back({uint32_t(index), uint32_t(join)});
  }
  // Bias gradients widened from f16 or bf16, each pair's first step (the
  // widening). A sum of an f32 gradient stays in line: it may share its
  // producer's pass (the regression head's, a column-summed elementwise step).
  std::vector<size_t> biasGradients;
  for (size_t index = plan.deferredSteps + 1; index < plan.steps.size(); ++index)
    if (isBiasGradient(plan, readers, index, reductionMinimumElements) && widenedFor(plan, readers, index))
      biasGradients.push_back(index - 1);
  for (size_t k = 0; k < biasGradients.size(); ++k) {
    size_t widening = biasGradients[k], sum = widening + 1;
    size_t join = k + lag < biasGradients.size() ? biasGradients[k + lag] : plan.steps.size();
    // The widening's only dependent is the sum, beside with it.
    join = std::min(join, detail::firstDependent(plan.steps, sum));
    if (join > sum + 1)
      for (size_t index : {widening, sum})
        plan.sideSteps.push_back({uint32_t(index), uint32_t(join)});
  }
  // An input gradient that kMinSideStepSpan or more main-lane steps pass
  // before anything needs it (a downsampling shortcut's, which the block's
  // first convolution adds its own to at the end of the block) runs beside
  // them. Side steps between do not count: they overlap nothing of the main
  // lane. The last are decided first, so each counts those after it.
  std::vector<bool> beside = rt::sideStepMask(plan);
  for (size_t index = plan.steps.size(); index-- > plan.deferredSteps;) {
    if (plan.steps[index].kind != rt::StepKind::Conv2dGradInput)
      continue;
    size_t join = detail::firstDependent(plan.steps, index);
    size_t mainSteps = 0;
    for (size_t between = index + 1; between < join; ++between)
      mainSteps += !beside[between];
    if (mainSteps >= kMinSideStepSpan) {
      plan.sideSteps.push_back({uint32_t(index), uint32_t(join)});
      beside[index] = true;
    }
  }
  std::sort(plan.sideSteps.begin(), plan.sideSteps.end(),
            [](const rt::SideStep &a, const rt::SideStep &b) { return a.step < b.step; });
}

} // namespace ampjit::codegen
