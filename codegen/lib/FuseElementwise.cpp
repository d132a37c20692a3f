//===- FuseElementwise.cpp - runs of elementwise steps as one program -----===//
//
// A run of consecutive Elementwise steps (amp.cast's Convert included) whose
// outputs share one shape becomes one FusedElementwise step: each external
// input is loaded once, every op is one instruction of the program, and only
// the values that something after the run reads (or the function returns) are
// stored. A register holds one element of its dtype, rounded exactly where the
// unfused plan stores to a buffer of that dtype, so fused and unfused plans
// give the same bits. Only consecutive steps are grouped, and the one move
// made first keeps every dependence: in a stretch of Elementwise steps, a
// scalar step (rank 0) goes up ahead of the tensor steps it does not depend
// on (runtime mustFollow). An optimizer written with the elementwise ops
// (RAdam's and NAdam's functions of the step count, the 1/scale of the
// unscale) interleaves such scalars with each parameter's tensor update, and
// each would otherwise cut that update into runs of its own: gathered, the
// scalars become one run and each parameter's update another.
//
//
// GEMM epilogues (for the CUDA backend; Plan.h's GemmEpilogue says what each
// computes), the patterns traced Linear layers produce:
//   product -> + bias [-> relu | gelu_tanh]      bias, bias_relu, bias_gelu(_aux)
//   product -> gelu_tanh_grad(., x) [-> sum_0]   dgelu(_bgrad)
//   sum_0(dY) ... dY^T @ X                       bgrad_a
// Every folded intermediate is a temporary read only by the folded steps
// (the GELU input excepted: the forward keeps it as an aux output); K > 0,
// f16/bf16/f32 only, and the GELU and gradient epilogues need unbatched
// products with the shapes cuBLASLt accepts. Not folded: relu_grad (cuBLASLt's
// DRELU reads a bit mask the forward would have to write, see
// docs/architecture.md) and bias gradients in another dtype than C's.
//
//===----------------------------------------------------------------------===//

#include "PlanFusion.h"

#include "ampjit/Codegen/PlanBuilder.h"
#include "ampjit/runtime/Backend.h"

#include <algorithm>
#include <map>
#include <set>

namespace rt = ampjit::runtime;

namespace ampjit::codegen {

namespace detail {

Readers findReaders(const rt::Plan &plan) {
  Readers readers{std::vector<std::vector<size_t>>(plan.buffers.size()),
                  std::vector<bool>(plan.buffers.size(), false)};
  for (size_t s = 0; s < plan.steps.size(); ++s)
    for (rt::BufferId id : plan.steps[s].inputs)
      if (id != rt::kNoBuffer)
        readers.steps[id].push_back(s);
  for (const rt::PlanResult &result : plan.results)
    readers.returned[result.buffer] = true;
  return readers;
}

bool Readers::onlyReader(const rt::Plan &plan, rt::BufferId id, size_t step) const {
  return plan.buffers[id].role == rt::BufferRole::Temporary && !returned[id] &&
         steps[id] == std::vector<size_t>{step};
}

} // namespace detail

namespace {

using detail::Readers;

/// One fused step for the steps [first, last] (all Elementwise, one output shape).
rt::Step fuseRun(const rt::Plan &plan, const Readers &readers, size_t first, size_t last) {
  rt::Step fused;
  fused.kind = rt::StepKind::FusedElementwise;
  fused.params = rt::FusedElementwiseParams{};
  auto &params = fused.as<rt::FusedElementwiseParams>();
  std::map<rt::BufferId, uint32_t> registerOf;
  fused.computeType = rt::DType::F32;
  auto registerFor = [&](rt::BufferId input) {
    auto found = registerOf.find(input);
    if (found != registerOf.end())
      return found->second;
    uint32_t slot = uint32_t(fused.inputs.size());
    fused.inputs.push_back(input);
    rt::FusedInstruction load;
    load.op = rt::ElementwiseOp::Load;
    load.type = plan.buffers[input].type.dtype;
    load.operands = {slot, 0, 0};
    params.program.push_back(load);
    return registerOf[input] = uint32_t(params.program.size() - 1);
  };
  std::string origin = "fused:";
  for (size_t s = first; s <= last; ++s) {
    const rt::Step &step = plan.steps[s];
    const auto &elementwise = step.as<rt::ElementwiseParams>();
    rt::FusedInstruction instruction;
    instruction.op = elementwise.op;
    instruction.scalar = elementwise.scalar;
    instruction.type = plan.buffers[step.outputs[0]].type.dtype;
    for (size_t k = 0; k < step.inputs.size(); ++k)
      instruction.operands[k] = registerFor(step.inputs[k]);
    params.program.push_back(instruction);
    registerOf[step.outputs[0]] = uint32_t(params.program.size() - 1);
    if (step.computeType == rt::DType::F64)
      fused.computeType = rt::DType::F64;
    origin += " " + step.origin + (s < last ? "," : "");
  }
  // Store what is read after the run or returned; a value nobody reads was
  // dead in the unfused plan too, but the last one is kept so the step writes
  // something.
  for (size_t s = first; s <= last; ++s) {
    rt::BufferId output = plan.steps[s].outputs[0];
    bool readLater = readers.returned[output] ||
                     std::any_of(readers.steps[output].begin(), readers.steps[output].end(),
                                 [&](size_t reader) { return reader > last; });
    if (readLater || (s == last && fused.outputs.empty())) {
      fused.outputs.push_back(output);
      params.outputs.push_back(registerOf.at(output));
    }
  }
  fused.origin = origin;
  return fused;
}

} // namespace

namespace detail {

void dropUnusedTemporaries(rt::Plan &plan) {
  std::vector<bool> used(plan.buffers.size(), false);
  for (const rt::Step &step : plan.steps) {
    for (rt::BufferId id : step.inputs)
      if (id != rt::kNoBuffer)
        used[id] = true;
    for (rt::BufferId id : step.outputs)
      if (id != rt::kNoBuffer)
        used[id] = true;
  }
  for (const rt::PlanResult &result : plan.results)
    used[result.buffer] = true;
  std::vector<rt::BufferId> renumbered(plan.buffers.size(), rt::kNoBuffer);
  std::vector<rt::BufferDesc> kept;
  for (size_t id = 0; id < plan.buffers.size(); ++id) {
    bool removable = plan.buffers[id].role == rt::BufferRole::Temporary && !used[id];
    if (removable)
      continue;
    renumbered[id] = rt::BufferId(kept.size());
    kept.push_back(std::move(plan.buffers[id]));
  }
  plan.buffers = std::move(kept);
  auto remap = [&](rt::BufferId &id) {
    if (id != rt::kNoBuffer)
      id = renumbered[id];
  };
  for (rt::Step &step : plan.steps) {
    std::for_each(step.inputs.begin(), step.inputs.end(), remap);
    std::for_each(step.outputs.begin(), step.outputs.end(), remap);
  }
  for (rt::PlanResult &result : plan.results)
    remap(result.buffer);
}

size_t firstDependent(const std::vector<rt::Step> &steps, size_t index) {
  size_t next = index + 1;
  while (next < steps.size() && !rt::mustFollow(steps[index], steps[next]))
    ++next;
  return next;
}

void sinkStep(std::vector<rt::Step> &steps, std::vector<bool> &sunk, size_t index, size_t before) {
  while (before > index + 1 && sunk[before - 1])
    --before;
  std::rotate(steps.begin() + std::ptrdiff_t(index), steps.begin() + std::ptrdiff_t(index) + 1,
              steps.begin() + std::ptrdiff_t(before));
  std::rotate(sunk.begin() + std::ptrdiff_t(index), sunk.begin() + std::ptrdiff_t(index) + 1,
              sunk.begin() + std::ptrdiff_t(before));
  sunk[before - 1] = true;
}

} // namespace detail

using detail::dropUnusedTemporaries;
using detail::findReaders;

namespace {

bool isScalarElementwise(const rt::Plan &plan, const rt::Step &step) {
  return step.kind == rt::StepKind::Elementwise && plan.buffers[step.outputs[0]].type.shape.empty();
}

/// Moves each scalar Elementwise step up past the tensor Elementwise steps
/// before it that it need not follow; scalar steps keep their order among
/// themselves, and nothing crosses a step of another kind.
void gatherScalarSteps(rt::Plan &plan) {
  std::vector<rt::Step> steps;
  steps.reserve(plan.steps.size());
  size_t stretchBegin = 0; // where the current stretch of Elementwise steps starts in `steps`
  for (rt::Step &step : plan.steps) {
    if (step.kind != rt::StepKind::Elementwise) {
      steps.push_back(std::move(step));
      stretchBegin = steps.size();
      continue;
    }
    size_t position = steps.size();
    if (isScalarElementwise(plan, step))
      while (position > stretchBegin && !isScalarElementwise(plan, steps[position - 1]) &&
             !rt::mustFollow(steps[position - 1], step))
        --position;
    steps.insert(steps.begin() + std::ptrdiff_t(position), std::move(step));
  }
  plan.steps = std::move(steps);
}

} // namespace

void fuseElementwiseSteps(rt::Plan &plan) {
  gatherScalarSteps(plan);
  Readers readers = findReaders(plan);
  std::vector<rt::Step> steps;
  size_t s = 0;
  while (s < plan.steps.size()) {
    const rt::Step &step = plan.steps[s];
    if (step.kind != rt::StepKind::Elementwise) {
      steps.push_back(std::move(plan.steps[s++]));
      continue;
    }
    const rt::Shape &shape = plan.buffers[step.outputs[0]].type.shape;
    size_t last = s;
    while (last + 1 < plan.steps.size() && plan.steps[last + 1].kind == rt::StepKind::Elementwise &&
           plan.buffers[plan.steps[last + 1].outputs[0]].type.shape == shape)
      ++last;
    if (last == s)
      steps.push_back(std::move(plan.steps[s]));
    else
      steps.push_back(fuseRun(plan, readers, s, last));
    s = last + 1;
  }
  plan.steps = std::move(steps);
  dropUnusedTemporaries(plan);
}

void detail::removeSteps(rt::Plan &plan, const std::vector<bool> &removed) {
  std::vector<rt::Step> steps;
  for (size_t s = 0; s < plan.steps.size(); ++s)
    if (!removed[s])
      steps.push_back(std::move(plan.steps[s]));
  plan.steps = std::move(steps);
  dropUnusedTemporaries(plan);
}

namespace {

using detail::removeSteps;

/// A Gemm step's M, N, K, and whether it is unbatched (the GELU and gradient
/// epilogues need rank-2 operands).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool unbatched = false;
};

GemmShape shapeOf(const rt::Plan &plan, const rt::Step &gemm) {
  const rt::GemmParams &params = gemm.as<rt::GemmParams>();
  const rt::Shape &aShape = plan.buffers[gemm.inputs[0]].type.shape;
  const rt::Shape &bShape = plan.buffers[gemm.inputs[1]].type.shape;
  const rt::Shape &cShape = plan.buffers[gemm.outputs[0]].type.shape;
  GemmShape shape;
  shape.k = aShape[aShape.size() - (params.transposeA ? 2 : 1)];
  shape.m = cShape[cShape.size() - 2];
  shape.n = cShape.back();
  shape.unbatched = aShape.size() == 2 && bShape.size() == 2;
  return shape;
}

bool isPlainGemm(const rt::Step &step) {
  return step.kind == rt::StepKind::Gemm && step.as<rt::GemmParams>().epilogue == rt::GemmEpilogue::None &&
         step.computeType != rt::DType::F64;
}

/// cuBLASLt reads and writes the GELU input with a leading dimension of C's
/// row length, which must be a multiple of 8 (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD).
constexpr int64_t kGeluInputLeadingMultiple = 8;

/// Whether `step` sums its input over axis 0 of a matrix into a vector.
bool isColumnSum(const rt::Plan &plan, const rt::Step &step) {
  if (step.kind != rt::StepKind::Reduction || step.computeType == rt::DType::F64)
    return false;
  const rt::ReductionParams &params = step.as<rt::ReductionParams>();
  return params.op == rt::ReduceOp::Sum && params.axes == std::vector<int64_t>{0} && !params.keepdim &&
         plan.buffers[step.inputs[0]].type.shape.size() == 2;
}

} // namespace

void fuseGemmEpilogues(rt::Plan &plan) {
  // Forward (bias, relu, gelu) and GELU-gradient epilogues: a product read
  // only by the next step, folded with up to two steps after it.
  Readers readers = findReaders(plan);
  auto onlyReader = [&](rt::BufferId id, size_t step) { return readers.onlyReader(plan, id, step); };
  auto isElementwise = [&](size_t index, rt::ElementwiseOp op) {
    return index < plan.steps.size() && plan.steps[index].kind == rt::StepKind::Elementwise &&
           plan.steps[index].as<rt::ElementwiseParams>().op == op;
  };
  auto typeOf = [&](rt::BufferId id) -> const rt::TensorType & { return plan.buffers[id].type; };
  std::vector<bool> removed(plan.steps.size(), false);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    rt::Step &gemm = plan.steps[s];
    if (!isPlainGemm(gemm))
      continue;
    GemmShape shape = shapeOf(plan, gemm);
    rt::BufferId product = gemm.outputs[0];
    const rt::TensorType &productType = typeOf(product);
    if (shape.k == 0 || !onlyReader(product, s + 1))
      continue;
    bool geluMatrices = shape.unbatched && shape.m > 0 && shape.n > 0 && shape.n % kGeluInputLeadingMultiple == 0;
    rt::GemmParams &params = gemm.as<rt::GemmParams>();
    auto fold = [&](rt::GemmEpilogue epilogue, size_t last) {
      params.epilogue = epilogue;
      for (size_t i = s + 1; i <= last; ++i) {
        gemm.origin += " + " + plan.steps[i].origin;
        removed[i] = true;
      }
      s = last;
    };

    // dgelu(_bgrad): gelu_grad(product, x) [, its sum over the batch].
    if (isElementwise(s + 1, rt::ElementwiseOp::GeluTanhGrad)) {
      const rt::Step &geluGrad = plan.steps[s + 1];
      rt::BufferId geluInput = geluGrad.inputs[1], gradient = geluGrad.outputs[0];
      if (!geluMatrices || geluGrad.inputs[0] != product || geluInput == product ||
          typeOf(geluInput) != productType || typeOf(gradient) != productType)
        continue;
      gemm.inputs.push_back(geluInput);
      gemm.outputs[0] = gradient;
      // cuBLASLt writes the bias gradient in C's type: a sum in another
      // dtype (AMP's fp32 sums of low-precision gradients) stays a step.
      if (s + 2 < plan.steps.size() && isColumnSum(plan, plan.steps[s + 2]) &&
          plan.steps[s + 2].inputs[0] == gradient &&
          plan.buffers[plan.steps[s + 2].outputs[0]].role == rt::BufferRole::Temporary &&
          typeOf(plan.steps[s + 2].outputs[0]) == rt::TensorType{productType.dtype, {shape.n}}) {
        gemm.outputs.push_back(plan.steps[s + 2].outputs[0]);
        fold(rt::GemmEpilogue::DGeluBiasGrad, s + 2);
      } else {
        fold(rt::GemmEpilogue::DGelu, s + 1);
      }
      continue;
    }

    if (!isElementwise(s + 1, rt::ElementwiseOp::Add))
      continue;
    const rt::Step &add = plan.steps[s + 1];
    rt::BufferId bias = add.inputs[0] == product ? add.inputs[1] : add.inputs[0];
    rt::BufferId sum = add.outputs[0];
    if (bias == product || typeOf(sum) != productType ||
        typeOf(bias) != rt::TensorType{productType.dtype, {productType.shape.back()}})
      continue;
    gemm.inputs.push_back(bias);
    gemm.outputs[0] = sum;
    size_t activation = s + 2;
    bool activationFollows = activation < plan.steps.size() &&
                             plan.steps[activation].kind == rt::StepKind::Elementwise &&
                             plan.steps[activation].inputs[0] == sum &&
                             typeOf(plan.steps[activation].outputs[0]) == productType;
    if (activationFollows && onlyReader(sum, activation) && isElementwise(activation, rt::ElementwiseOp::Relu)) {
      gemm.outputs[0] = plan.steps[activation].outputs[0];
      fold(rt::GemmEpilogue::BiasRelu, activation);
    } else if (activationFollows && geluMatrices && isElementwise(activation, rt::ElementwiseOp::GeluTanh) &&
               plan.buffers[sum].role == rt::BufferRole::Temporary) {
      // The pre-activation keeps its buffer when anything else reads it (the
      // backward's gelu_grad): cuBLASLt stores it as the aux output, rounded
      // to C's dtype exactly as the add step stored it.
      gemm.outputs[0] = plan.steps[activation].outputs[0];
      bool keepPreActivation = !onlyReader(sum, activation);
      if (keepPreActivation)
        gemm.outputs.push_back(sum);
      fold(keepPreActivation ? rt::GemmEpilogue::BiasGeluAux : rt::GemmEpilogue::BiasGelu, activation);
    } else {
      fold(rt::GemmEpilogue::Bias, s + 1);
    }
  }
  removeSteps(plan, removed);

  // bgrad_a: a weight gradient dW = dY^T X whose dY is also summed over the
  // batch (a bias gradient) gets that sum as its epilogue. The sum's result is
  // then written later, by the gemm: every reader must come after it.
  readers = findReaders(plan);
  removed.assign(plan.steps.size(), false);
  for (size_t r = 0; r < plan.steps.size(); ++r) {
    const rt::Step &sum = plan.steps[r];
    if (!isColumnSum(plan, sum))
      continue;
    rt::BufferId summed = sum.inputs[0], biasGrad = sum.outputs[0];
    if (plan.buffers[biasGrad].role != rt::BufferRole::Temporary || readers.returned[biasGrad])
      continue;
    for (size_t s = r + 1; s < plan.steps.size(); ++s) {
      rt::Step &gemm = plan.steps[s];
      // State updated in place between the two would give the gemm another dY.
      const std::vector<rt::BufferId> &written = gemm.outputs;
      if (std::find(written.begin(), written.end(), summed) != written.end())
        break;
      if (!isPlainGemm(gemm) || gemm.inputs[0] != summed)
        continue;
      GemmShape shape = shapeOf(plan, gemm);
      // cuBLASLt's BGRADB (our A is its B) needs B transposed; dW = dY^T X is.
      bool fits = gemm.as<rt::GemmParams>().transposeA && shape.unbatched && shape.k > 0 && shape.m > 0 &&
                  shape.n > 0 && typeOf(biasGrad) == rt::TensorType{typeOf(gemm.outputs[0]).dtype, {shape.m}} &&
                  std::all_of(readers.steps[biasGrad].begin(), readers.steps[biasGrad].end(),
                              [&](size_t reader) { return reader > s; });
      if (!fits)
        continue;
      gemm.as<rt::GemmParams>().epilogue = rt::GemmEpilogue::BiasGradA;
      gemm.outputs.push_back(biasGrad);
      gemm.origin += " + " + sum.origin;
      removed[r] = true;
      break;
    }
  }
  removeSteps(plan, removed);
}

} // namespace ampjit::codegen
