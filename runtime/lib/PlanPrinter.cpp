// The text form of a plan. It is what lit tests of codegen check, so it is
// stable: fields print in declaration order, doubles as the shortest text that
// reads back exactly, and nothing depends on addresses or hash order.

#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/Tensor.h"

#include "PlanEnums.h"

#include <algorithm>
#include <set>

namespace ampjit::runtime {

namespace {

/// Up to eight values in full, otherwise the first four and the count.
std::string formatValues(DType dtype, const std::vector<uint8_t>& data) {
  size_t size = dtypeSize(dtype);
  size_t count = size == 0 ? 0 : data.size() / size;
  const std::byte* bytes = reinterpret_cast<const std::byte*>(data.data());
  auto value = [&](size_t i) { return formatDouble(loadElementAsDouble(dtype, bytes, int64_t(i))); };
  if (count == 1)
    return value(0);
  std::string text = "[";
  size_t shown = count <= 8 ? count : 4;
  for (size_t i = 0; i < shown; ++i)
    text += (i ? ", " : "") + value(i);
  if (shown < count)
    text += ", ... (" + std::to_string(count) + " values)";
  return text + "]";
}

// Appending rather than `"%" + std::to_string(id)`: GCC 12 warns falsely
// (-Wrestrict, bug 105651) about a one-character literal plus a temporary string.
std::string bufferRef(BufferId id) { return std::string("%").append(std::to_string(id)); }

std::string typeList(const Plan& plan, const std::vector<BufferId>& ids) {
  std::string text;
  for (BufferId id : ids) {
    if (id == kNoBuffer)
      continue;
    if (!text.empty())
      text += ", ";
    text += id < plan.buffers.size() ? std::string(dtypeName(plan.buffers[id].type.dtype)) : "?";
  }
  return text.empty() ? "()" : text;
}

std::string slotList(const Step& step, const std::vector<BufferId>& ids, bool outputs,
                     const std::vector<std::string>& transposedSuffix = {}) {
  std::vector<std::string> names = slotNames(step, outputs);
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == kNoBuffer)
      continue;
    std::string name = i < names.size() ? names[i] : (outputs ? "out" : "in") + std::to_string(i);
    text += " " + name + "=" + bufferRef(ids[i]);
    if (i < transposedSuffix.size())
      text += transposedSuffix[i];
  }
  return text;
}

/// Which fields of the parameters are worth printing for this step.
bool isRelevantField(const Step& step, std::string_view field) {
  if (step.kind != StepKind::OptimizerUpdate)
    return true;
  static const std::set<std::string_view> sgd = {"momentum", "dampening", "nesterov", "weight_decay",
                                                 "maximize"};
  static const std::set<std::string_view> adam = {"beta1", "beta2", "eps", "decoupled_weight_decay",
                                                  "weight_decay", "maximize"};
  if (field == "optimizer")
    return true;
  return (step.as<OptimizerParams>().optimizer == OptimizerKind::Adam ? adam : sgd).count(field) > 0;
}

class FieldPrinter {
public:
  FieldPrinter(const Step& step, const Plan& plan, std::string& text)
      : step_(step), plan_(plan), text_(text) {}

  template <typename T>
  void operator()(const char* name, const T& value) {
    bool first = first_;
    first_ = false;
    if (!isRelevantField(step_, name))
      return;
    // Most batch norms have no epilogue; say so only when they have one.
    if constexpr (std::is_same_v<T, BatchNormActivation>)
      if (value == BatchNormActivation::None)
        return;
    if constexpr (std::is_same_v<T, bool>) {
      if (value)
        text_ += std::string(" ") + name;
    } else if constexpr (detail::PlanEnum<T>) {
      // The leading enum names the variant of the kind ("reduction sum").
      text_ += first ? " " : std::string(" ") + name + "=";
      text_ += detail::EnumInfo<T>::name(value);
    } else if constexpr (std::is_same_v<T, int64_t>) {
      text_ += std::string(" ") + name + "=" + std::to_string(value);
    } else if constexpr (std::is_same_v<T, double>) {
      text_ += std::string(" ") + name + "=" + formatDouble(value);
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      text_ += std::string(" ") + name + "=[";
      for (size_t i = 0; i < value.size(); ++i)
        text_ += (i ? ", " : "") + std::to_string(value[i]);
      text_ += "]";
    } else if constexpr (std::is_same_v<T, std::vector<uint8_t>>) {
      // Constant data, in the output's dtype.
      BufferId out = step_.outputs.empty() ? kNoBuffer : step_.outputs[0];
      if (out < plan_.buffers.size())
        text_ += (value.size() == dtypeSize(plan_.buffers[out].type.dtype) ? " splat " : " ") +
                 formatValues(plan_.buffers[out].type.dtype, value);
      else
        text_ += " <" + std::to_string(value.size()) + " bytes>";
    }
    // Fused programs (instruction and register lists) print on their own lines.
  }

private:
  const Step& step_;
  const Plan& plan_;
  std::string& text_;
  bool first_ = true;
};

std::string registerRef(uint32_t reg) { return std::string("r").append(std::to_string(reg)); }

std::string printInstruction(const FusedInstruction& instruction, uint32_t reg) {
  std::string text = registerRef(reg) + " = " + std::string(elementwiseOpName(instruction.op));
  switch (instruction.op) {
  case ElementwiseOp::Load: text += " in" + std::to_string(instruction.operands[0]); break;
  case ElementwiseOp::Constant: text += " " + formatDouble(instruction.scalar); break;
  default:
    for (int k = 0; k < elementwiseOpArity(instruction.op); ++k)
      text += (k ? ", " : " ") + registerRef(instruction.operands[k]);
    if (instruction.op == ElementwiseOp::Pow)
      text += " exponent=" + formatDouble(instruction.scalar);
    break;
  }
  return text + " : " + std::string(dtypeName(instruction.type));
}

std::string computeSuffix(const Step& step, bool accumulates) {
  return std::string(accumulates ? " (acc " : " (compute ") + std::string(dtypeName(step.computeType)) + ")";
}

} // namespace

std::string printStep(const Plan& plan, std::size_t index) {
  const Step& step = plan.steps[index];
  std::string text = "step " + std::to_string(index) + ": " + std::string(stepKindName(step.kind));
  if (step.params.index() != paramsIndexOf(step.kind))
    return text + " <parameters of another kind>";
  std::string types = " " + typeList(plan, step.inputs) + " -> " + typeList(plan, step.outputs);
  std::string body; // lines under the step (a fused program), after the origin comment

  switch (step.kind) {
  case StepKind::Gemm: {
    const GemmParams& params = step.as<GemmParams>();
    text += " " + typeList(plan, {step.inputs[0]}) + " x " + typeList(plan, {step.inputs[1]}) + " -> " +
            typeList(plan, step.outputs) + computeSuffix(step, true);
    BufferId c = step.outputs.empty() ? kNoBuffer : step.outputs[0];
    if (c < plan.buffers.size() && plan.buffers[c].type.shape.size() > 2) {
      const Shape& shape = plan.buffers[c].type.shape;
      text += " batch=" + shapeToString(std::span(shape).first(shape.size() - 2));
    }
    if (params.epilogue != GemmEpilogue::None)
      text += " epilogue=" + std::string(gemmEpilogueName(params.epilogue));
    text += slotList(step, step.inputs, false,
                     {params.transposeA ? "^T" : "", params.transposeB ? "^T" : ""});
    text += slotList(step, step.outputs, true);
    break;
  }
  case StepKind::Elementwise: {
    const ElementwiseParams& params = step.as<ElementwiseParams>();
    text += " " + std::string(elementwiseOpName(params.op));
    if (params.op == ElementwiseOp::Pow)
      text += " exponent=" + formatDouble(params.scalar);
    text += types + computeSuffix(step, false) + slotList(step, step.inputs, false) +
            slotList(step, step.outputs, true);
    break;
  }
  case StepKind::FusedElementwise: {
    const FusedElementwiseParams& params = step.as<FusedElementwiseParams>();
    text += types + computeSuffix(step, false) + slotList(step, step.inputs, false) +
            slotList(step, step.outputs, true);
    for (uint32_t reg = 0; reg < params.program.size(); ++reg)
      body += "\n    " + printInstruction(params.program[reg], reg);
    for (size_t k = 0; k < params.outputs.size(); ++k)
      body += "\n    out" + std::to_string(k) + " = " + registerRef(params.outputs[k]);
    break;
  }
  default: {
    std::visit(
        [&](const auto& params) { detail::forEachConstField(params, FieldPrinter(step, plan, text)); },
        step.params);
    bool accumulates = step.kind == StepKind::Reduction;
    text += types + computeSuffix(step, accumulates) + slotList(step, step.inputs, false) +
            slotList(step, step.outputs, true);
    break;
  }
  }
  if (!step.origin.empty())
    text += "  // " + step.origin;
  return text + body;
}

std::string printPlan(const Plan& plan) {
  std::string text = "plan @" + plan.name + "\n";
  text += "  arena " + std::to_string(plan.arenaBytes) + " bytes\n";
  if (plan.deferredSteps > 0)
    text += "  deferred steps 0.." + std::to_string(plan.deferredSteps - 1) +
            " (the previous run's update, done first)\n";
  if (!plan.sideSteps.empty()) {
    text += "  side steps:";
    for (size_t k = 0; k < plan.sideSteps.size(); ++k)
      text += std::string(k ? "," : "") + " " + std::to_string(plan.sideSteps[k].step) + " joins before " +
              std::to_string(plan.sideSteps[k].joinBefore);
    text += "\n";
  }
  for (BufferId id = 0; id < plan.buffers.size(); ++id) {
    const BufferDesc& buffer = plan.buffers[id];
    text += "  " + bufferRef(id) + " = ";
    if (buffer.argument >= 0)
      text += "arg " + std::to_string(buffer.argument) + " ";
    text += std::string(bufferRoleName(buffer.role)) + " " + typeToString(buffer.type);
    if (buffer.derivedFrom >= 0)
      text += " derived_from arg " + std::to_string(buffer.derivedFrom);
    if (buffer.viewOf >= 0)
      text += " view of " + bufferRef(BufferId(buffer.viewOf));
    else if (buffer.role == BufferRole::Temporary)
      text += " @" + std::to_string(buffer.arenaOffset);
    if (buffer.role == BufferRole::Constant)
      text += " = " + formatValues(buffer.type.dtype, buffer.constantData);
    if (!buffer.name.empty())
      text += " \"" + buffer.name + "\"";
    text += "\n";
  }
  text += "  return";
  for (size_t i = 0; i < plan.results.size(); ++i) {
    text += (i ? ", " : " ") + bufferRef(plan.results[i].buffer);
    if (plan.results[i].tiedArgument >= 0)
      text += " tied arg " + std::to_string(plan.results[i].tiedArgument);
  }
  text += "\n";
  for (size_t index = 0; index < plan.steps.size(); ++index)
    text += "  " + printStep(plan, index) + "\n";
  return text;
}

} // namespace ampjit::runtime
