//===- FuseElementwise.cpp - runs of elementwise steps as one program -----===//
//
// A run of consecutive Elementwise steps (amp.cast's Convert included) whose
// outputs share one shape becomes one FusedElementwise step: each external
// input is loaded once, every op is one instruction of the program, and only
// the values that something after the run reads (or the function returns) are
// stored. A register holds one element of its dtype, rounded exactly where the
// unfused plan stores to a buffer of that dtype, so fused and unfused plans
// give the same bits. Only consecutive steps are grouped, so no step moves and
// every dependence is kept.
//
//
// GEMM epilogues (for the CUDA backend): a product read only by a bias add,
// itself read only by a relu, becomes one Gemm step whose epilogue adds the
// bias and applies the relu before C's one rounding, as cuBLASLt does.
//
//===----------------------------------------------------------------------===//

#include "PlanFusion.h"

#include "ampjit/Codegen/PlanBuilder.h"

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

} // namespace detail

using detail::dropUnusedTemporaries;
using detail::findReaders;

void fuseElementwiseSteps(rt::Plan &plan) {
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

void fuseGemmEpilogues(rt::Plan &plan) {
  Readers readers = findReaders(plan);
  auto onlyReader = [&](rt::BufferId id, size_t step) { return readers.onlyReader(plan, id, step); };
  auto isElementwise = [&](size_t index, rt::ElementwiseOp op) {
    return index < plan.steps.size() && plan.steps[index].kind == rt::StepKind::Elementwise &&
           plan.steps[index].as<rt::ElementwiseParams>().op == op;
  };
  std::vector<bool> removed(plan.steps.size(), false);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    rt::Step &gemm = plan.steps[s];
    if (gemm.kind != rt::StepKind::Gemm || gemm.as<rt::GemmParams>().epilogue != rt::GemmEpilogue::None ||
        gemm.computeType == rt::DType::F64)
      continue;
    const rt::GemmParams &params = gemm.as<rt::GemmParams>();
    const rt::Shape &aShape = plan.buffers[gemm.inputs[0]].type.shape;
    int64_t k = aShape[aShape.size() - (params.transposeA ? 2 : 1)];
    rt::BufferId product = gemm.outputs[0];
    const rt::TensorType &productType = plan.buffers[product].type;
    if (k == 0 || !onlyReader(product, s + 1) || !isElementwise(s + 1, rt::ElementwiseOp::Add))
      continue;
    const rt::Step &add = plan.steps[s + 1];
    rt::BufferId bias = add.inputs[0] == product ? add.inputs[1] : add.inputs[0];
    rt::BufferId sum = add.outputs[0];
    if (bias == product || plan.buffers[sum].type != productType ||
        plan.buffers[bias].type != rt::TensorType{productType.dtype, {productType.shape.back()}})
      continue;
    rt::GemmEpilogue epilogue = rt::GemmEpilogue::Bias;
    rt::BufferId result = sum;
    size_t last = s + 1;
    if (onlyReader(sum, s + 2) && isElementwise(s + 2, rt::ElementwiseOp::Relu) &&
        plan.buffers[plan.steps[s + 2].outputs[0]].type == productType) {
      epilogue = rt::GemmEpilogue::BiasRelu;
      result = plan.steps[s + 2].outputs[0];
      last = s + 2;
    }
    gemm.as<rt::GemmParams>().epilogue = epilogue;
    gemm.inputs.push_back(bias);
    gemm.outputs[0] = result;
    gemm.origin += " + " + plan.steps[s + 1].origin + (last == s + 2 ? " + " + plan.steps[s + 2].origin : "");
    for (size_t i = s + 1; i <= last; ++i)
      removed[i] = true;
    s = last;
  }
  std::vector<rt::Step> steps;
  for (size_t s = 0; s < plan.steps.size(); ++s)
    if (!removed[s])
      steps.push_back(std::move(plan.steps[s]));
  plan.steps = std::move(steps);
  dropUnusedTemporaries(plan);
}

} // namespace ampjit::codegen
