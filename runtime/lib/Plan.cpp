#include "ampjit/runtime/Plan.h"

#include "PlanEnums.h"

#include "ampjit/runtime/WindowShape.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <numeric>

namespace ampjit::runtime {

static_assert(std::endian::native == std::endian::little,
              "plans store constants little-endian and kernels read them in place");

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

std::string_view bufferRoleName(BufferRole role) {
  switch (role) {
  case BufferRole::Input: return "input";
  case BufferRole::Param: return "param";
  case BufferRole::Grad: return "grad";
  case BufferRole::OptState: return "opt_state";
  case BufferRole::ScalerState: return "scaler_state";
  case BufferRole::Hyper: return "hyper";
  case BufferRole::Temporary: return "temporary";
  case BufferRole::Constant: return "constant";
  case BufferRole::Output: return "output";
  case BufferRole::Carried: return "carried";
  }
  return "<invalid role>";
}

bool isArgumentRole(BufferRole role) {
  switch (role) {
  case BufferRole::Input:
  case BufferRole::Param:
  case BufferRole::Grad:
  case BufferRole::OptState:
  case BufferRole::ScalerState:
  case BufferRole::Hyper: return true;
  case BufferRole::Temporary:
  case BufferRole::Constant:
  case BufferRole::Output:
  case BufferRole::Carried: return false;
  }
  return false;
}

namespace {

struct ElementwiseOpInfo {
  std::string_view name;
  int arity;
};

// Indexed by ElementwiseOp; the static_assert below keeps it in step.
constexpr ElementwiseOpInfo kElementwiseOps[] = {
    {"load", 0},      {"constant", 0},  {"neg", 1},        {"relu", 1},     {"tanh", 1},
    {"sigmoid", 1},   {"exp", 1},       {"log", 1},        {"sqrt", 1},     {"rsqrt", 1},
    {"gelu", 1},      {"gelu_tanh", 1}, {"pow", 1},        {"add", 2},      {"sub", 2},
    {"mul", 2},       {"div", 2},       {"relu_grad", 2},  {"gelu_grad", 2}, {"gelu_tanh_grad", 2},
    {"cmp_eq", 2},    {"cmp_ne", 2},    {"cmp_lt", 2},     {"cmp_le", 2},   {"cmp_gt", 2},
    {"cmp_ge", 2},    {"select", 3},    {"convert", 1},
};
static_assert(std::size(kElementwiseOps) == kElementwiseOpCount);

bool isComparison(ElementwiseOp op) { return op >= ElementwiseOp::CmpEq && op <= ElementwiseOp::CmpGe; }

} // namespace

std::string_view elementwiseOpName(ElementwiseOp op) {
  return int(op) < kElementwiseOpCount ? kElementwiseOps[int(op)].name : "<invalid op>";
}

int elementwiseOpArity(ElementwiseOp op) {
  return int(op) < kElementwiseOpCount ? kElementwiseOps[int(op)].arity : 0;
}

bool elementwiseOpChoosesResultType(ElementwiseOp op) {
  return op == ElementwiseOp::Load || op == ElementwiseOp::Constant || op == ElementwiseOp::Convert;
}

Status checkElementwiseTypes(ElementwiseOp op, std::span<const DType> operands, DType result) {
  std::string name(elementwiseOpName(op));
  if (int(operands.size()) != elementwiseOpArity(op))
    return Status::error("'" + name + "' takes " + std::to_string(elementwiseOpArity(op)) +
                         " operands, not " + std::to_string(operands.size()));
  auto typeList = [&] {
    std::string text;
    for (size_t i = 0; i < operands.size(); ++i)
      text += (i ? ", " : "") + std::string(dtypeName(operands[i]));
    return text;
  };
  if (op == ElementwiseOp::Load || op == ElementwiseOp::Constant || op == ElementwiseOp::Convert)
    return Status::success();
  if (op == ElementwiseOp::Select) {
    if (operands[0] != DType::I1 || operands[1] != operands[2] || result != operands[1])
      return Status::error("'select' needs (i1, T, T) -> T, got (" + typeList() + ") -> " +
                           std::string(dtypeName(result)));
    return Status::success();
  }
  bool sameOperands = std::all_of(operands.begin(), operands.end(),
                                  [&](DType type) { return type == operands[0]; });
  if (!sameOperands)
    return Status::error("'" + name + "' needs operands of one dtype, got (" + typeList() +
                         "); convert first");
  if (isComparison(op)) {
    if (result != DType::I1)
      return Status::error("'" + name + "' yields i1, not " + std::string(dtypeName(result)));
    return Status::success();
  }
  if (!isFloating(operands[0]))
    return Status::error("'" + name + "' needs floating-point operands, got (" + typeList() + ")");
  if (result != operands[0])
    return Status::error("'" + name + "' yields its operands' dtype " +
                         std::string(dtypeName(operands[0])) + ", not " +
                         std::string(dtypeName(result)));
  return Status::success();
}

std::string_view stepKindName(StepKind kind) {
  switch (kind) {
  case StepKind::Gemm: return "gemm";
  case StepKind::Elementwise: return "elementwise";
  case StepKind::FusedElementwise: return "fused_elementwise";
  case StepKind::Reduction: return "reduction";
  case StepKind::Softmax: return "softmax";
  case StepKind::LogSoftmax: return "log_softmax";
  case StepKind::SoftmaxGrad: return "softmax_grad";
  case StepKind::LogSoftmaxGrad: return "log_softmax_grad";
  case StepKind::LayerNorm: return "layer_norm";
  case StepKind::LayerNormGrad: return "layer_norm_grad";
  case StepKind::Dropout: return "dropout";
  case StepKind::Loss: return "loss";
  case StepKind::LossGrad: return "loss_grad";
  case StepKind::BroadcastTo: return "broadcast_to";
  case StepKind::Reshape: return "reshape";
  case StepKind::Transpose: return "transpose";
  case StepKind::Constant: return "constant";
  case StepKind::OptimizerUpdate: return "optimizer_update";
  case StepKind::ScaleLoss: return "scale_loss";
  case StepKind::AllFinite: return "all_finite";
  case StepKind::UnscaleAndCheck: return "unscale_and_check";
  case StepKind::UpdateScale: return "update_scale";
  case StepKind::Conv2d: return "conv2d";
  case StepKind::Conv2dGradInput: return "conv2d_grad_input";
  case StepKind::Conv2dGradWeight: return "conv2d_grad_weight";
  case StepKind::BatchNorm: return "batch_norm";
  case StepKind::BatchNormInference: return "batch_norm_inference";
  case StepKind::BatchNormGrad: return "batch_norm_grad";
  case StepKind::MaxPool2d: return "max_pool2d";
  case StepKind::MaxPool2dGrad: return "max_pool2d_grad";
  case StepKind::AvgPool2d: return "avg_pool2d";
  case StepKind::AvgPool2dGrad: return "avg_pool2d_grad";
  case StepKind::Embedding: return "embedding";
  case StepKind::EmbeddingGrad: return "embedding_grad";
  }
  return "<invalid step kind>";
}

std::string_view gemmEpilogueName(GemmEpilogue epilogue) {
  switch (epilogue) {
  case GemmEpilogue::None: return "none";
  case GemmEpilogue::Bias: return "bias";
  case GemmEpilogue::BiasRelu: return "bias_relu";
  case GemmEpilogue::BiasGelu: return "bias_gelu";
  case GemmEpilogue::BiasGeluAux: return "bias_gelu_aux";
  case GemmEpilogue::DGelu: return "dgelu";
  case GemmEpilogue::DGeluBiasGrad: return "dgelu_bgrad";
  case GemmEpilogue::BiasGradA: return "bgrad_a";
  }
  return "<invalid epilogue>";
}

std::string_view batchNormActivationName(BatchNormActivation activation) {
  switch (activation) {
  case BatchNormActivation::None: return "none";
  case BatchNormActivation::Relu: return "relu";
  case BatchNormActivation::AddRelu: return "add_relu";
  }
  return "<invalid activation>";
}

std::string_view reduceOpName(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return "sum";
  case ReduceOp::Mean: return "mean";
  case ReduceOp::Max: return "max";
  }
  return "<invalid reduction>";
}

std::string_view lossKindName(LossKind kind) {
  switch (kind) {
  case LossKind::Mse: return "mse";
  case LossKind::CrossEntropy: return "cross_entropy";
  case LossKind::Nll: return "nll";
  }
  return "<invalid loss>";
}

std::string_view lossReductionName(LossReduction reduction) {
  switch (reduction) {
  case LossReduction::None: return "none";
  case LossReduction::Mean: return "mean";
  case LossReduction::Sum: return "sum";
  }
  return "<invalid reduction>";
}

std::string_view optimizerKindName(OptimizerKind kind) {
  switch (kind) {
  case OptimizerKind::Sgd: return "sgd";
  case OptimizerKind::Adam: return "adam";
  }
  return "<invalid optimizer>";
}

template <typename T>
static constexpr std::size_t variantIndex() {
  StepParams probe{T{}};
  return probe.index();
}

std::size_t paramsIndexOf(StepKind kind) {
  switch (kind) {
  case StepKind::Gemm: return variantIndex<GemmParams>();
  case StepKind::Elementwise: return variantIndex<ElementwiseParams>();
  case StepKind::FusedElementwise: return variantIndex<FusedElementwiseParams>();
  case StepKind::Reduction: return variantIndex<ReductionParams>();
  case StepKind::Softmax:
  case StepKind::LogSoftmax:
  case StepKind::SoftmaxGrad:
  case StepKind::LogSoftmaxGrad:
  case StepKind::LayerNormGrad: return variantIndex<AxisParams>();
  case StepKind::BatchNormGrad: return variantIndex<BatchNormGradParams>();
  case StepKind::Conv2d:
  case StepKind::Conv2dGradInput:
  case StepKind::Conv2dGradWeight: return variantIndex<Conv2dParams>();
  case StepKind::BatchNorm:
  case StepKind::BatchNormInference: return variantIndex<BatchNormParams>();
  case StepKind::MaxPool2d:
  case StepKind::MaxPool2dGrad:
  case StepKind::AvgPool2d:
  case StepKind::AvgPool2dGrad: return variantIndex<Pool2dParams>();
  case StepKind::EmbeddingGrad: return variantIndex<EmbeddingGradParams>();
  case StepKind::LayerNorm: return variantIndex<LayerNormParams>();
  case StepKind::Dropout: return variantIndex<DropoutParams>();
  case StepKind::Loss:
  case StepKind::LossGrad: return variantIndex<LossParams>();
  case StepKind::Transpose: return variantIndex<TransposeParams>();
  case StepKind::Constant: return variantIndex<ConstantParams>();
  case StepKind::OptimizerUpdate: return variantIndex<OptimizerParams>();
  case StepKind::UpdateScale: return variantIndex<UpdateScaleParams>();
  case StepKind::BroadcastTo:
  case StepKind::Reshape:
  case StepKind::ScaleLoss:
  case StepKind::AllFinite:
  case StepKind::UnscaleAndCheck:
  case StepKind::Embedding: return variantIndex<NoParams>();
  }
  return variantIndex<NoParams>();
}

StepParams defaultParamsFor(StepKind kind) {
  StepParams params;
  std::size_t wanted = paramsIndexOf(kind);
  // Walk the alternatives to default-construct the one at `wanted`.
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((I == wanted ? (params.emplace<I>(), 0) : 0), ...);
  }(std::make_index_sequence<std::variant_size_v<StepParams>>{});
  return params;
}

std::size_t Plan::argumentCount() const {
  std::size_t count = 0;
  for (const BufferDesc& buffer : buffers)
    if (buffer.argument >= 0)
      ++count;
  return count;
}

BufferId Plan::argumentBuffer(std::size_t index) const {
  for (std::size_t id = 0; id < buffers.size(); ++id)
    if (buffers[id].argument >= 0 && std::size_t(buffers[id].argument) == index)
      return BufferId(id);
  return kNoBuffer;
}

std::string formatDouble(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  char text[32];
  auto result = std::to_chars(text, text + sizeof text, value);
  return std::string(text, result.ptr);
}

//===----------------------------------------------------------------------===//
// Slots
//===----------------------------------------------------------------------===//

namespace {

const std::vector<std::string> kSgdInputs = {"param", "grad", "momentum_buffer", "step",
                                             "lr", "inv_scale", "predicate", "param_copy"};
const std::vector<std::string> kSgdOutputs = {"new_param", "new_momentum_buffer", "new_param_copy"};
const std::vector<std::string> kAdamInputs = {"param", "grad",      "exp_avg",   "exp_avg_sq",
                                              "max_exp_avg_sq", "step", "lr", "inv_scale",
                                              "predicate",      "param_copy"};
const std::vector<std::string> kAdamOutputs = {"new_param", "new_exp_avg", "new_exp_avg_sq",
                                               "new_max_exp_avg_sq", "new_param_copy"};

std::vector<std::string> numbered(std::string_view prefix, size_t count) {
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i)
    names.push_back(std::string(prefix) + std::to_string(i));
  return names;
}

std::vector<std::string> elementwiseInputNames(ElementwiseOp op) {
  switch (op) {
  case ElementwiseOp::ReluGrad: return {"dy", "y"};
  case ElementwiseOp::GeluGrad:
  case ElementwiseOp::GeluTanhGrad: return {"dy", "x"};
  case ElementwiseOp::Select: return {"condition", "true_value", "false_value"};
  default: break;
  }
  switch (elementwiseOpArity(op)) {
  case 1: return {"x"};
  case 2: return {"lhs", "rhs"};
  default: return {};
  }
}

std::vector<std::string> lossInputNames(LossKind kind) {
  switch (kind) {
  case LossKind::Mse: return {"input", "target"};
  case LossKind::CrossEntropy: return {"logits", "labels"};
  case LossKind::Nll: return {"log_probs", "labels"};
  }
  return {"input", "target"};
}

} // namespace

std::string describeStep(const Plan& plan, std::size_t index) {
  const Step& step = plan.steps[index];
  std::string text = "step " + std::to_string(index) + " (" + std::string(stepKindName(step.kind));
  if (!step.origin.empty())
    text += " from " + step.origin;
  return text + ")";
}

std::string describeStepOfPlan(const Plan& plan, std::size_t index) {
  return "plan @" + plan.name + ", " + describeStep(plan, index);
}

Status nonFiniteOutputError(const Plan& plan, std::size_t index, std::size_t slot) {
  const Step& step = plan.steps[index];
  std::vector<std::string> names = slotNames(step, true);
  return Status::error("AMPJIT_CHECK_NUMERICS: " + describeStepOfPlan(plan, index) + " produced an inf or NaN in output '" +
                       (slot < names.size() ? names[slot] : std::to_string(slot)) + "' (buffer %" +
                       std::to_string(step.outputs[slot]) + ")");
}

std::vector<std::string> slotNames(const Step& step, bool outputs) {
  // A step whose params do not match its kind is reported by the verifier;
  // here it only needs names, so fall back to numbered slots.
  if (step.params.index() != paramsIndexOf(step.kind))
    return numbered(outputs ? "out" : "in", outputs ? step.outputs.size() : step.inputs.size());
  auto pick = [&](std::vector<std::string> in, std::vector<std::string> out) {
    return outputs ? out : in;
  };
  switch (step.kind) {
  case StepKind::Gemm: {
    GemmEpilogue epilogue = step.as<GemmParams>().epilogue;
    std::vector<std::string> in = {"A", "B"}, out = {"C"};
    if (gemmEpilogueHasBias(epilogue))
      in.push_back("bias");
    if (gemmEpilogueReadsGeluInput(epilogue))
      in.push_back("gelu_input");
    if (gemmEpilogueWritesGeluInput(epilogue))
      out.push_back("gelu_input");
    if (gemmEpilogueWritesBiasGrad(epilogue))
      out.push_back("bias_grad");
    return pick(in, out);
  }
  case StepKind::Elementwise: return pick(elementwiseInputNames(step.as<ElementwiseParams>().op), {"out"});
  case StepKind::FusedElementwise:
    return outputs ? numbered("out", step.outputs.size()) : numbered("in", step.inputs.size());
  case StepKind::Reduction:
  case StepKind::Softmax:
  case StepKind::LogSoftmax:
  case StepKind::BroadcastTo:
  case StepKind::Reshape:
  case StepKind::Transpose: return pick({"x"}, {"y"});
  case StepKind::SoftmaxGrad:
  case StepKind::LogSoftmaxGrad: return pick({"dy", "y"}, {"dx"});
  case StepKind::LayerNorm: return pick({"x", "weight", "bias"}, {"y", "mean", "rstd"});
  case StepKind::LayerNormGrad:
    return pick({"dy", "x", "mean", "rstd", "weight"}, {"dx", "dweight", "dbias"});
  case StepKind::Dropout: return pick({"x", "rng_state"}, {"y", "mask", "next_rng_state"});
  case StepKind::Loss: return pick(lossInputNames(step.as<LossParams>().loss), {"loss"});
  case StepKind::LossGrad: {
    std::vector<std::string> names = {"grad_output"};
    for (std::string& name : lossInputNames(step.as<LossParams>().loss))
      names.push_back(std::move(name));
    return pick(names, {"grad"});
  }
  case StepKind::Constant: return pick({}, {"y"});
  case StepKind::OptimizerUpdate:
    if (step.as<OptimizerParams>().optimizer == OptimizerKind::Adam)
      return pick(kAdamInputs, kAdamOutputs);
    return pick(kSgdInputs, kSgdOutputs);
  case StepKind::ScaleLoss: return pick({"loss", "scale"}, {"scaled"});
  case StepKind::AllFinite: return pick(numbered("grad", step.inputs.size()), {"all_finite"});
  case StepKind::UnscaleAndCheck: {
    size_t grads = step.inputs.empty() ? 0 : step.inputs.size() - 1;
    std::vector<std::string> in = {"inv_scale"};
    for (std::string& name : numbered("grad", grads))
      in.push_back(std::move(name));
    std::vector<std::string> out = numbered("unscaled", grads);
    out.push_back("all_finite");
    return pick(in, out);
  }
  case StepKind::UpdateScale:
    return pick({"scale", "good_steps", "bad_steps", "skipped_steps", "all_finite"},
                {"new_scale", "new_good_steps", "new_bad_steps", "new_skipped_steps"});
  case StepKind::Conv2d: return pick({"x", "weight", "bias"}, {"y"});
  case StepKind::Conv2dGradInput:
    return pick(accumulatesInPlace(step) ? std::vector<std::string>{"dy", "weight", "accumulate"}
                                         : std::vector<std::string>{"dy", "weight"},
                {"dx"});
  case StepKind::Conv2dGradWeight: return pick({"dy", "x"}, {"dweight"});
  case StepKind::BatchNorm:
  case StepKind::BatchNormInference: {
    std::vector<std::string> in = {"x", "weight", "bias", "running_mean", "running_var"};
    if (step.as<BatchNormParams>().activation == BatchNormActivation::AddRelu)
      in.push_back("z");
    if (step.kind == StepKind::BatchNormInference)
      return pick(in, {"y"});
    return pick(in, {"y", "save_mean", "save_invstd", "new_running_mean", "new_running_var"});
  }
  case StepKind::BatchNormGrad: {
    std::vector<std::string> in = {"dy", "x", "save_mean", "save_invstd", "weight"};
    std::vector<std::string> out = {"dx", "dweight", "dbias"};
    BatchNormActivation activation = step.as<BatchNormGradParams>().activation;
    if (activation != BatchNormActivation::None) {
      in.push_back("y");
      in.push_back("bias");
    }
    if (activation == BatchNormActivation::AddRelu)
      out.push_back("dz");
    return pick(in, out);
  }
  case StepKind::MaxPool2d:
  case StepKind::AvgPool2d: return pick({"x"}, {"y"});
  case StepKind::MaxPool2dGrad:
  case StepKind::AvgPool2dGrad: return pick({"dy", "x"}, {"dx"});
  case StepKind::Embedding: return pick({"indices", "weight"}, {"y"});
  case StepKind::EmbeddingGrad: return pick({"dy", "indices"}, {"dweight"});
  }
  return {};
}

bool isOptionalInputSlot(const Step& step, std::size_t slot) {
  if (step.params.index() != paramsIndexOf(step.kind))
    return false;
  switch (step.kind) {
  case StepKind::LayerNorm: return slot == 1 || slot == 2;
  case StepKind::LayerNormGrad: return slot == 4;
  case StepKind::Conv2d: return slot == 2;
  case StepKind::BatchNorm:
  case StepKind::BatchNormInference: return slot == 1 || slot == 2;
  case StepKind::BatchNormGrad:
    return slot == batch_norm_grad_slot::kWeight || slot == batch_norm_grad_slot::kBias;
  case StepKind::OptimizerUpdate:
    if (step.as<OptimizerParams>().optimizer == OptimizerKind::Adam)
      return slot == adam_slot::kMaxExpAvgSq || slot == adam_slot::kInvScale ||
             slot == adam_slot::kPredicate || slot == adam_slot::kParamCopy;
    return slot == sgd_slot::kMomentumBuffer || slot == sgd_slot::kStep ||
           slot == sgd_slot::kInvScale || slot == sgd_slot::kPredicate ||
           slot == sgd_slot::kParamCopy;
  default: return false;
  }
}

//===----------------------------------------------------------------------===//
// Step type checks
//===----------------------------------------------------------------------===//

namespace {

/// Kinds whose kernels compute element i of every output from element i of
/// the inputs only, so an output may be the very buffer of an input (in-place
/// state updates).
bool mayWriteInPlace(StepKind kind) {
  switch (kind) {
  case StepKind::Elementwise:
  case StepKind::FusedElementwise:
  case StepKind::Dropout:
  case StepKind::OptimizerUpdate:
  case StepKind::ScaleLoss:
  case StepKind::UnscaleAndCheck:
  case StepKind::UpdateScale: return true;
  default: return false;
  }
}

/// Whether output slot `output` of `step` may be the buffer of the input it
/// reads: the in-place kinds above, and batch norm's running statistics
/// (new_running_mean/var over running_mean/var, state the kernel reads in
/// full before writing).
bool mayWriteSlotInPlace(const Step& step, size_t output, BufferId buffer) {
  if (mayWriteInPlace(step.kind))
    return true;
  // An input gradient added to what its output already holds (cuDNN's beta = 1).
  if (step.kind == StepKind::Conv2dGradInput) {
    using namespace conv2d_grad_input_slot;
    return accumulatesInPlace(step) && step.inputs[kAccumulate] == buffer && step.inputs[kDy] != buffer &&
           step.inputs[kWeight] != buffer;
  }
  if (step.kind != StepKind::BatchNorm || (output != 3 && output != 4))
    return false;
  for (size_t input = 0; input < step.inputs.size(); ++input)
    if (step.inputs[input] == buffer && input != output)
      return false;
  return true;
}

TensorType scalarOf(DType dtype) { return TensorType{dtype, {}}; }

DType statisticsType(DType input) { return input == DType::F64 ? DType::F64 : DType::F32; }

class StepChecker {
public:
  StepChecker(const Step& step, std::span<const TensorType> in, std::span<const TensorType> out)
      : step_(step), in_(in), out_(out), inNames_(slotNames(step, false)),
        outNames_(slotNames(step, true)) {}

  Status run();

private:
  bool hasIn(size_t i) const { return i < step_.inputs.size() && step_.inputs[i] != kNoBuffer; }
  bool hasOut(size_t i) const { return i < step_.outputs.size() && step_.outputs[i] != kNoBuffer; }
  const TensorType& in(size_t i) const { return in_[i]; }
  const TensorType& out(size_t i) const { return out_[i]; }

  std::string inName(size_t i) const {
    return "input '" + (i < inNames_.size() ? inNames_[i] : std::to_string(i)) + "' (" +
           typeToString(in_[i]) + ")";
  }
  std::string outName(size_t i) const {
    return "output '" + (i < outNames_.size() ? outNames_[i] : std::to_string(i)) + "' (" +
           typeToString(out_[i]) + ")";
  }

  Status expectIn(size_t i, const TensorType& expected, std::string_view why) const {
    if (in(i) != expected)
      return Status::error(inName(i) + " must be " + typeToString(expected) + std::string(why));
    return Status::success();
  }
  Status expectOut(size_t i, const TensorType& expected, std::string_view why = "") const {
    if (out(i) != expected)
      return Status::error(outName(i) + " must be " + typeToString(expected) + std::string(why));
    return Status::success();
  }
  Status expectFloatIn(size_t i) const {
    if (!isFloating(in(i).dtype))
      return Status::error(inName(i) + " must be f16, bf16, f32 or f64");
    return Status::success();
  }
  Status expectAxis(int64_t axis, size_t rank, std::string_view what) const {
    if (axis < 0 || axis >= int64_t(rank))
      return Status::error(std::string(what) + " " + std::to_string(axis) +
                           " is out of range for rank " + std::to_string(rank));
    return Status::success();
  }

  Status checkSlotCounts(size_t inputs, size_t outputs) const;
  Status checkRequiredSlots() const;
  Status checkComputeType() const;

  Status checkGemm() const;
  Status checkElementwise() const;
  Status checkFused() const;
  Status checkReduction() const;
  Status checkAxisKind() const;
  Status checkLayerNorm() const;
  Status checkLayerNormGrad() const;
  Status checkDropout() const;
  Status checkLoss() const;
  Status checkLayout() const;
  Status checkConstant() const;
  Status checkOptimizer() const;
  Status checkScaler() const;
  Status checkConv() const;
  Status checkBatchNorm() const;
  Status checkBatchNormGrad() const;
  Status checkPool() const;
  Status checkEmbedding() const;

  const Step& step_;
  std::span<const TensorType> in_;
  std::span<const TensorType> out_;
  std::vector<std::string> inNames_;
  std::vector<std::string> outNames_;
};

Status StepChecker::checkSlotCounts(size_t inputs, size_t outputs) const {
  if (step_.inputs.size() != inputs || step_.outputs.size() != outputs)
    return Status::error("has " + std::to_string(step_.inputs.size()) + " inputs and " +
                         std::to_string(step_.outputs.size()) + " outputs but needs " +
                         std::to_string(inputs) + " and " + std::to_string(outputs));
  return Status::success();
}

Status StepChecker::checkRequiredSlots() const {
  for (size_t i = 0; i < step_.inputs.size(); ++i)
    if (step_.inputs[i] == kNoBuffer && !isOptionalInputSlot(step_, i))
      return Status::error("input '" + (i < inNames_.size() ? inNames_[i] : std::to_string(i)) +
                           "' is required but absent");
  // Only an optimizer update's state outputs follow its optional state inputs
  // (checked with its types); every other kernel writes every output slot.
  if (step_.kind == StepKind::OptimizerUpdate)
    return Status::success();
  for (size_t i = 0; i < step_.outputs.size(); ++i)
    if (step_.outputs[i] == kNoBuffer)
      return Status::error("output '" + (i < outNames_.size() ? outNames_[i] : std::to_string(i)) +
                           "' is required but absent");
  return Status::success();
}

Status StepChecker::checkComputeType() const {
  bool anyF64 = false;
  for (size_t i = 0; i < in_.size(); ++i)
    anyF64 |= hasIn(i) && in(i).dtype == DType::F64;
  for (size_t i = 0; i < out_.size(); ++i)
    anyF64 |= hasOut(i) && out(i).dtype == DType::F64;
  if (step_.kind == StepKind::FusedElementwise)
    for (const FusedInstruction& instruction : step_.as<FusedElementwiseParams>().program)
      anyF64 |= instruction.type == DType::F64;
  DType expected = anyF64 ? DType::F64 : DType::F32;
  if (step_.computeType != expected)
    return Status::error("compute type is " + std::string(dtypeName(step_.computeType)) + " but must be " +
                         std::string(dtypeName(expected)) +
                         " (f64 when any operand or register is f64, f32 otherwise)");
  return Status::success();
}

Status StepChecker::run() {
  if (step_.params.index() != paramsIndexOf(step_.kind))
    return Status::error("carries the parameters of another step kind");
  if (in_.size() != step_.inputs.size() || out_.size() != step_.outputs.size())
    return Status::error("internal: slot types do not match the slot lists");
  switch (step_.kind) {
  case StepKind::Gemm: AMPJIT_RETURN_IF_ERROR(checkGemm()); break;
  case StepKind::Elementwise: AMPJIT_RETURN_IF_ERROR(checkElementwise()); break;
  case StepKind::FusedElementwise: AMPJIT_RETURN_IF_ERROR(checkFused()); break;
  case StepKind::Reduction: AMPJIT_RETURN_IF_ERROR(checkReduction()); break;
  case StepKind::Softmax:
  case StepKind::LogSoftmax:
  case StepKind::SoftmaxGrad:
  case StepKind::LogSoftmaxGrad: AMPJIT_RETURN_IF_ERROR(checkAxisKind()); break;
  case StepKind::LayerNorm: AMPJIT_RETURN_IF_ERROR(checkLayerNorm()); break;
  case StepKind::LayerNormGrad: AMPJIT_RETURN_IF_ERROR(checkLayerNormGrad()); break;
  case StepKind::Dropout: AMPJIT_RETURN_IF_ERROR(checkDropout()); break;
  case StepKind::Loss:
  case StepKind::LossGrad: AMPJIT_RETURN_IF_ERROR(checkLoss()); break;
  case StepKind::BroadcastTo:
  case StepKind::Reshape:
  case StepKind::Transpose: AMPJIT_RETURN_IF_ERROR(checkLayout()); break;
  case StepKind::Constant: AMPJIT_RETURN_IF_ERROR(checkConstant()); break;
  case StepKind::OptimizerUpdate: AMPJIT_RETURN_IF_ERROR(checkOptimizer()); break;
  case StepKind::ScaleLoss:
  case StepKind::AllFinite:
  case StepKind::UnscaleAndCheck:
  case StepKind::UpdateScale: AMPJIT_RETURN_IF_ERROR(checkScaler()); break;
  case StepKind::Conv2d:
  case StepKind::Conv2dGradInput:
  case StepKind::Conv2dGradWeight: AMPJIT_RETURN_IF_ERROR(checkConv()); break;
  case StepKind::BatchNorm:
  case StepKind::BatchNormInference: AMPJIT_RETURN_IF_ERROR(checkBatchNorm()); break;
  case StepKind::BatchNormGrad: AMPJIT_RETURN_IF_ERROR(checkBatchNormGrad()); break;
  case StepKind::MaxPool2d:
  case StepKind::MaxPool2dGrad:
  case StepKind::AvgPool2d:
  case StepKind::AvgPool2dGrad: AMPJIT_RETURN_IF_ERROR(checkPool()); break;
  case StepKind::Embedding:
  case StepKind::EmbeddingGrad: AMPJIT_RETURN_IF_ERROR(checkEmbedding()); break;
  }
  return checkComputeType();
}

Status StepChecker::checkGemm() const {
  const GemmParams& params = step_.as<GemmParams>();
  GemmEpilogue epilogue = params.epilogue;
  bool extraInput = gemmEpilogueHasBias(epilogue) || gemmEpilogueReadsGeluInput(epilogue);
  bool extraOutput = gemmEpilogueWritesGeluInput(epilogue) || gemmEpilogueWritesBiasGrad(epilogue);
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(extraInput ? 3 : 2, extraOutput ? 2 : 1));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  for (size_t i = 0; i < 2; ++i) {
    AMPJIT_RETURN_IF_ERROR(expectFloatIn(i));
    if (in(i).shape.size() < 2)
      return Status::error(inName(i) + " must have rank >= 2");
    if (gemmEpilogueNeedsMatrices(epilogue) && in(i).shape.size() != 2)
      return Status::error(inName(i) + " must have rank 2: epilogue '" + std::string(gemmEpilogueName(epilogue)) +
                           "' works on unbatched products only");
  }
  if (!isFloating(out(0).dtype))
    return Status::error(outName(0) + " must be floating-point");
  auto matrix = [](const Shape& shape, bool transposed) {
    int64_t rows = shape[shape.size() - 2], cols = shape[shape.size() - 1];
    return transposed ? std::pair{cols, rows} : std::pair{rows, cols};
  };
  auto [m, kA] = matrix(in(0).shape, params.transposeA);
  auto [kB, n] = matrix(in(1).shape, params.transposeB);
  if (kA != kB)
    return Status::error("contraction dimensions differ: " + inName(0) +
                         (params.transposeA ? " transposed" : "") + " has " + std::to_string(kA) +
                         " columns but " + inName(1) + (params.transposeB ? " transposed" : "") +
                         " has " + std::to_string(kB) + " rows");
  Shape batchShapes[2] = {Shape(in(0).shape.begin(), in(0).shape.end() - 2),
                          Shape(in(1).shape.begin(), in(1).shape.end() - 2)};
  Expected<Shape> batch = broadcastShapes(batchShapes);
  if (!batch)
    return Status::error("batch dimensions do not broadcast: " + batch.message());
  Shape expected = *batch;
  expected.push_back(m);
  expected.push_back(n);
  AMPJIT_RETURN_IF_ERROR(expectOut(0, TensorType{out(0).dtype, expected}));
  DType cType = out(0).dtype;
  if (gemmEpilogueHasBias(epilogue) && in(2) != TensorType{cType, {n}})
    return Status::error(inName(2) + " must be " + typeToString(TensorType{cType, {n}}) +
                         " (one value per column of C, in C's dtype)");
  if (gemmEpilogueReadsGeluInput(epilogue) && in(2) != out(0))
    return Status::error(inName(2) + " must be " + typeToString(out(0)) +
                         " (the GELU input the forward saved: C's shape and dtype)");
  if (gemmEpilogueWritesGeluInput(epilogue))
    AMPJIT_RETURN_IF_ERROR(expectOut(1, out(0), " (the GELU input, saved for the backward: C's shape and dtype)"));
  if (epilogue == GemmEpilogue::DGeluBiasGrad)
    AMPJIT_RETURN_IF_ERROR(expectOut(1, TensorType{cType, {n}},
                                     " (the sum over C's rows, one value per column, in C's dtype)"));
  if (epilogue == GemmEpilogue::BiasGradA)
    AMPJIT_RETURN_IF_ERROR(expectOut(1, TensorType{cType, {m}},
                                     " (the sum over K of op(A), one value per row of C, in C's dtype)"));
  return Status::success();
}

Status StepChecker::checkElementwise() const {
  const ElementwiseParams& params = step_.as<ElementwiseParams>();
  if (params.op == ElementwiseOp::Load || params.op == ElementwiseOp::Constant)
    return Status::error("elementwise op '" + std::string(elementwiseOpName(params.op)) +
                         "' exists only inside fused programs");
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(size_t(elementwiseOpArity(params.op)), 1));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  for (const TensorType& type : in_) {
    dtypes.push_back(type.dtype);
    shapes.push_back(type.shape);
  }
  AMPJIT_RETURN_IF_ERROR(checkElementwiseTypes(params.op, dtypes, out(0).dtype));
  Expected<Shape> shape = broadcastShapes(shapes);
  if (!shape)
    return Status::error("inputs do not broadcast: " + shape.message());
  return expectOut(0, TensorType{out(0).dtype, *shape}, ", the broadcast of the inputs");
}

Status StepChecker::checkFused() const {
  const FusedElementwiseParams& params = step_.as<FusedElementwiseParams>();
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  if (step_.outputs.empty())
    return Status::error("a fused elementwise step needs at least one output");
  if (params.outputs.size() != step_.outputs.size())
    return Status::error("the program names " + std::to_string(params.outputs.size()) +
                         " output registers for " + std::to_string(step_.outputs.size()) +
                         " output slots");
  const Shape& shape = out(0).shape;
  for (size_t i = 0; i < out_.size(); ++i)
    if (out(i).shape != shape)
      return Status::error(outName(i) + " must have the shape of " + outName(0) +
                           ": all outputs of a fused step have one shape");
  for (size_t i = 0; i < in_.size(); ++i)
    if (!broadcastsTo(in(i).shape, shape))
      return Status::error(inName(i) + " does not broadcast to the output shape " +
                           shapeToString(shape));
  for (size_t r = 0; r < params.program.size(); ++r) {
    const FusedInstruction& instruction = params.program[r];
    std::string where = "instruction r" + std::to_string(r) + " (" +
                        std::string(elementwiseOpName(instruction.op)) + ")";
    if (int(instruction.op) >= kElementwiseOpCount)
      return Status::error(where + " has an invalid opcode");
    if (instruction.op == ElementwiseOp::Load) {
      uint32_t slot = instruction.operands[0];
      if (slot >= in_.size())
        return Status::error(where + " loads input slot " + std::to_string(slot) + " but the step has " +
                             std::to_string(in_.size()) + " inputs");
      if (instruction.type != in(slot).dtype)
        return Status::error(where + " has dtype " + std::string(dtypeName(instruction.type)) +
                             " but loads " + inName(slot));
      continue;
    }
    std::vector<DType> operandTypes;
    for (int k = 0; k < elementwiseOpArity(instruction.op); ++k) {
      uint32_t operand = instruction.operands[k];
      if (operand >= r)
        return Status::error(where + " reads r" + std::to_string(operand) +
                             ", which is not defined before it");
      operandTypes.push_back(params.program[operand].type);
    }
    Status types = checkElementwiseTypes(instruction.op, operandTypes, instruction.type);
    if (!types)
      return Status::error(where + ": " + types.message());
  }
  for (size_t k = 0; k < params.outputs.size(); ++k) {
    uint32_t reg = params.outputs[k];
    if (reg >= params.program.size())
      return Status::error("output " + std::to_string(k) + " stores r" + std::to_string(reg) +
                           " but the program has " + std::to_string(params.program.size()) +
                           " instructions");
    if (params.program[reg].type != out(k).dtype)
      return Status::error(outName(k) + " stores r" + std::to_string(reg) + " of dtype " +
                           std::string(dtypeName(params.program[reg].type)));
  }
  return Status::success();
}

Status StepChecker::checkReduction() const {
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(1, 1));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  AMPJIT_RETURN_IF_ERROR(expectFloatIn(0));
  const ReductionParams& params = step_.as<ReductionParams>();
  size_t rank = in(0).shape.size();
  if (params.axes.empty() && rank != 0)
    return Status::error("axes must not be empty for " + inName(0) + "; list every axis to reduce");
  for (size_t i = 0; i < params.axes.size(); ++i) {
    AMPJIT_RETURN_IF_ERROR(expectAxis(params.axes[i], rank, "axis"));
    if (i > 0 && params.axes[i] <= params.axes[i - 1])
      return Status::error("axes must be strictly increasing");
  }
  Shape expected;
  for (size_t dim = 0; dim < rank; ++dim) {
    bool reduced = std::find(params.axes.begin(), params.axes.end(), int64_t(dim)) != params.axes.end();
    if (!reduced)
      expected.push_back(in(0).shape[dim]);
    else if (params.keepdim)
      expected.push_back(1);
  }
  return expectOut(0, TensorType{in(0).dtype, expected});
}

Status StepChecker::checkAxisKind() const {
  bool isGrad = step_.kind == StepKind::SoftmaxGrad || step_.kind == StepKind::LogSoftmaxGrad;
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(isGrad ? 2 : 1, 1));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  AMPJIT_RETURN_IF_ERROR(expectFloatIn(0));
  if (isGrad)
    AMPJIT_RETURN_IF_ERROR(expectIn(1, in(0), ", the type of 'dy'"));
  AMPJIT_RETURN_IF_ERROR(expectAxis(step_.as<AxisParams>().axis, in(0).shape.size(), "axis"));
  return expectOut(0, in(0));
}

Status StepChecker::checkLayerNorm() const {
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(3, 3));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  AMPJIT_RETURN_IF_ERROR(expectFloatIn(0));
  const LayerNormParams& params = step_.as<LayerNormParams>();
  const Shape& shape = in(0).shape;
  AMPJIT_RETURN_IF_ERROR(expectAxis(params.axis, shape.size(), "axis"));
  if (!(params.eps >= 0.0) || std::isinf(params.eps))
    return Status::error("eps = " + formatDouble(params.eps) + " must be finite and non-negative");
  TensorType affine{in(0).dtype, Shape(shape.begin() + params.axis, shape.end())};
  TensorType stats{statisticsType(in(0).dtype), Shape(shape.begin(), shape.begin() + params.axis)};
  for (size_t i : {1, 2})
    if (hasIn(i))
      AMPJIT_RETURN_IF_ERROR(expectIn(i, affine, ": the normalised dimensions in the input's dtype"));
  AMPJIT_RETURN_IF_ERROR(expectOut(0, in(0)));
  AMPJIT_RETURN_IF_ERROR(expectOut(1, stats, ": one statistic per row"));
  return expectOut(2, stats, ": one statistic per row");
}

Status StepChecker::checkLayerNormGrad() const {
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(5, 3));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  AMPJIT_RETURN_IF_ERROR(expectFloatIn(1));
  int64_t axis = step_.as<AxisParams>().axis;
  const Shape& shape = in(1).shape;
  AMPJIT_RETURN_IF_ERROR(expectAxis(axis, shape.size(), "axis"));
  TensorType affine{in(1).dtype, Shape(shape.begin() + axis, shape.end())};
  TensorType stats{statisticsType(in(1).dtype), Shape(shape.begin(), shape.begin() + axis)};
  AMPJIT_RETURN_IF_ERROR(expectIn(0, in(1), ", the type of 'x'"));
  AMPJIT_RETURN_IF_ERROR(expectIn(2, stats, ", as layer_norm yields it"));
  AMPJIT_RETURN_IF_ERROR(expectIn(3, stats, ", as layer_norm yields it"));
  if (hasIn(4))
    AMPJIT_RETURN_IF_ERROR(expectIn(4, affine, ": the normalised dimensions in the input's dtype"));
  AMPJIT_RETURN_IF_ERROR(expectOut(0, in(1)));
  AMPJIT_RETURN_IF_ERROR(expectOut(1, affine));
  return expectOut(2, affine);
}

Status StepChecker::checkDropout() const {
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(2, 3));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  AMPJIT_RETURN_IF_ERROR(expectFloatIn(0));
  double p = step_.as<DropoutParams>().p;
  if (!(p >= 0.0 && p < 1.0))
    return Status::error("p = " + formatDouble(p) + " must be in [0, 1)");
  TensorType rng{DType::I64, {2}};
  AMPJIT_RETURN_IF_ERROR(expectIn(1, rng, ": [seed, offset]"));
  AMPJIT_RETURN_IF_ERROR(expectOut(0, in(0)));
  AMPJIT_RETURN_IF_ERROR(expectOut(1, TensorType{DType::I1, in(0).shape}));
  return expectOut(2, rng);
}

Status StepChecker::checkLoss() const {
  const LossParams& params = step_.as<LossParams>();
  bool isGrad = step_.kind == StepKind::LossGrad;
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(isGrad ? 3 : 2, 1));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  size_t scores = isGrad ? 1 : 0, target = scores + 1;
  AMPJIT_RETURN_IF_ERROR(expectFloatIn(scores));
  const TensorType& input = in(scores);
  if (int(params.reduction) >= kLossReductionCount || int(params.loss) >= kLossKindCount)
    return Status::error("invalid loss kind or reduction");
  if (!(params.labelSmoothing >= 0.0 && params.labelSmoothing <= 1.0))
    return Status::error("label_smoothing = " + formatDouble(params.labelSmoothing) + " must be in [0, 1]");
  if (params.loss != LossKind::CrossEntropy && params.labelSmoothing != 0.0)
    return Status::error("label_smoothing applies to cross_entropy only");
  Shape unreduced;
  if (params.loss == LossKind::Mse) {
    AMPJIT_RETURN_IF_ERROR(expectIn(target, input, ", the type of the input"));
    unreduced = input.shape;
  } else {
    if (input.shape.size() != 2)
      return Status::error(inName(scores) + " must have rank 2: [batch, classes]");
    AMPJIT_RETURN_IF_ERROR(expectIn(target, TensorType{DType::I64, {input.shape[0]}},
                                    ": one class index per row"));
    unreduced = {input.shape[0]};
  }
  TensorType lossType{input.dtype, params.reduction == LossReduction::None ? unreduced : Shape{}};
  if (!isGrad)
    return expectOut(0, lossType);
  AMPJIT_RETURN_IF_ERROR(expectIn(0, lossType, ", the type of the loss it differentiates"));
  return expectOut(0, input);
}

Status StepChecker::checkLayout() const {
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(1, 1));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  if (out(0).dtype != in(0).dtype)
    return Status::error(outName(0) + " must have the dtype of " + inName(0));
  if (step_.kind == StepKind::BroadcastTo) {
    if (!broadcastsTo(in(0).shape, out(0).shape))
      return Status::error(inName(0) + " does not broadcast to " + outName(0));
    return Status::success();
  }
  if (step_.kind == StepKind::Reshape) {
    if (in(0).elementCount() != out(0).elementCount())
      return Status::error(inName(0) + " and " + outName(0) + " have different element counts");
    return Status::success();
  }
  const std::vector<int64_t>& perm = step_.as<TransposeParams>().perm;
  size_t rank = in(0).shape.size();
  if (perm.size() != rank)
    return Status::error("perm has " + std::to_string(perm.size()) + " entries for " + inName(0));
  std::vector<bool> seen(rank, false);
  Shape expected;
  for (int64_t dim : perm) {
    if (dim < 0 || dim >= int64_t(rank) || seen[dim])
      return Status::error("perm is not a permutation of [0, " + std::to_string(rank) + ")");
    seen[dim] = true;
    expected.push_back(in(0).shape[dim]);
  }
  return expectOut(0, TensorType{in(0).dtype, expected});
}

Status StepChecker::checkConstant() const {
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(0, 1));
  size_t size = step_.as<ConstantParams>().data.size();
  size_t element = dtypeSize(out(0).dtype);
  if (size != element && size != size_t(out(0).byteSize()))
    return Status::error("holds " + std::to_string(size) + " bytes of data for " + outName(0) +
                         ": needs one element (" + std::to_string(element) + " bytes) or all (" +
                         std::to_string(out(0).byteSize()) + ")");
  if (out(0).dtype == DType::I1)
    for (uint8_t byte : step_.as<ConstantParams>().data)
      if (byte > 1)
        return Status::error("i1 constant data must be 0 or 1");
  return Status::success();
}

Status StepChecker::checkOptimizer() const {
  const OptimizerParams& params = step_.as<OptimizerParams>();
  bool adam = params.optimizer == OptimizerKind::Adam;
  if (int(params.optimizer) >= kOptimizerKindCount)
    return Status::error("invalid optimizer");
  AMPJIT_RETURN_IF_ERROR(adam ? checkSlotCounts(adam_slot::kInputs, adam_slot::kOutputs)
                              : checkSlotCounts(sgd_slot::kInputs, sgd_slot::kOutputs));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  size_t paramSlot = 0, gradSlot = 1;
  size_t stepSlot = adam ? adam_slot::kStep : sgd_slot::kStep;
  size_t lrSlot = adam ? adam_slot::kLr : sgd_slot::kLr;
  size_t invScaleSlot = adam ? adam_slot::kInvScale : sgd_slot::kInvScale;
  size_t predicateSlot = adam ? adam_slot::kPredicate : sgd_slot::kPredicate;
  size_t copySlot = adam ? adam_slot::kParamCopy : sgd_slot::kParamCopy;
  const TensorType& param = in(paramSlot);
  if (param.dtype != DType::F32 && param.dtype != DType::F64)
    return Status::error(inName(paramSlot) + " must be f32 or f64: updates run on full-precision "
                                             "parameters (O2 keeps a low-precision param_copy)");
  AMPJIT_RETURN_IF_ERROR(expectFloatIn(gradSlot));
  // Read element by element: a gradient still in its producer's shape (a
  // 1x1 convolution's NHWC filter gradient) serves as well.
  if (in(gradSlot).elementCount() != param.elementCount())
    return Status::error(inName(gradSlot) + " must have the element count of " + inName(paramSlot));
  if (hasIn(stepSlot))
    AMPJIT_RETURN_IF_ERROR(expectIn(stepSlot, scalarOf(DType::I64), ": the update count"));
  AMPJIT_RETURN_IF_ERROR(expectIn(lrSlot, scalarOf(DType::F32), ""));
  if (hasIn(invScaleSlot))
    AMPJIT_RETURN_IF_ERROR(expectIn(invScaleSlot, scalarOf(DType::F32), ""));
  if (hasIn(predicateSlot))
    AMPJIT_RETURN_IF_ERROR(expectIn(predicateSlot, scalarOf(DType::I1), ""));
  if (hasIn(copySlot)) {
    DType copy = in(copySlot).dtype;
    if ((copy != DType::F16 && copy != DType::BF16) || in(copySlot).shape != param.shape)
      return Status::error(inName(copySlot) + " must be f16 or bf16 of the shape of " + inName(paramSlot));
  }
  // Each optional output exists exactly when its state input does.
  auto pairOutput = [&](size_t inputSlot, size_t outputSlot) -> Status {
    if (hasIn(inputSlot) != hasOut(outputSlot))
      return Status::error("output '" + outNames_[outputSlot] + "' must be present exactly when input '" +
                           inNames_[inputSlot] + "' is");
    if (hasOut(outputSlot))
      return expectOut(outputSlot, in(inputSlot), ", the type of the state it replaces");
    return Status::success();
  };
  AMPJIT_RETURN_IF_ERROR(pairOutput(paramSlot, 0));
  if (!(params.weightDecay >= 0.0))
    return Status::error("weight_decay must be non-negative");
  if (adam) {
    AMPJIT_RETURN_IF_ERROR(expectIn(adam_slot::kExpAvg, param, ", the type of 'param'"));
    AMPJIT_RETURN_IF_ERROR(expectIn(adam_slot::kExpAvgSq, param, ", the type of 'param'"));
    AMPJIT_RETURN_IF_ERROR(pairOutput(adam_slot::kExpAvg, adam_slot::kNewExpAvg));
    AMPJIT_RETURN_IF_ERROR(pairOutput(adam_slot::kExpAvgSq, adam_slot::kNewExpAvgSq));
    if (hasIn(adam_slot::kMaxExpAvgSq))
      AMPJIT_RETURN_IF_ERROR(expectIn(adam_slot::kMaxExpAvgSq, param, ", the type of 'param'"));
    AMPJIT_RETURN_IF_ERROR(pairOutput(adam_slot::kMaxExpAvgSq, adam_slot::kNewMaxExpAvgSq));
    AMPJIT_RETURN_IF_ERROR(pairOutput(adam_slot::kParamCopy, adam_slot::kNewParamCopy));
    if (!(params.beta1 >= 0.0 && params.beta1 < 1.0 && params.beta2 >= 0.0 && params.beta2 < 1.0))
      return Status::error("beta1 and beta2 must be in [0, 1)");
    if (!(params.eps >= 0.0))
      return Status::error("eps must be non-negative");
    return Status::success();
  }
  bool hasBuffer = hasIn(sgd_slot::kMomentumBuffer);
  if (hasBuffer)
    AMPJIT_RETURN_IF_ERROR(expectIn(sgd_slot::kMomentumBuffer, param, ", the type of 'param'"));
  AMPJIT_RETURN_IF_ERROR(pairOutput(sgd_slot::kMomentumBuffer, sgd_slot::kNewMomentumBuffer));
  AMPJIT_RETURN_IF_ERROR(pairOutput(sgd_slot::kParamCopy, sgd_slot::kNewParamCopy));
  if (!(params.momentum >= 0.0))
    return Status::error("momentum must be non-negative");
  if ((params.momentum != 0.0) != hasBuffer)
    return Status::error("input 'momentum_buffer' must be present exactly when momentum != 0");
  if (params.nesterov && (params.momentum <= 0.0 || params.dampening != 0.0))
    return Status::error("nesterov needs momentum > 0 and dampening = 0");
  if (hasBuffer && params.dampening != 0.0 && !hasIn(sgd_slot::kStep))
    return Status::error("dampening != 0 needs input 'step' to start the momentum buffer");
  return Status::success();
}

Status StepChecker::checkScaler() const {
  TensorType flag = scalarOf(DType::I1);
  switch (step_.kind) {
  case StepKind::ScaleLoss:
    AMPJIT_RETURN_IF_ERROR(checkSlotCounts(2, 1));
    AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
    AMPJIT_RETURN_IF_ERROR(expectFloatIn(0));
    if (in(0).elementCount() != 1)
      return Status::error(inName(0) + " must hold a single value");
    AMPJIT_RETURN_IF_ERROR(expectIn(1, scalarOf(DType::F32), ""));
    return expectOut(0, in(0));
  case StepKind::AllFinite:
    if (step_.inputs.empty() || step_.outputs.size() != 1)
      return Status::error("needs at least one input and exactly one output");
    AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
    for (size_t i = 0; i < in_.size(); ++i)
      AMPJIT_RETURN_IF_ERROR(expectFloatIn(i));
    return expectOut(0, flag);
  case StepKind::UnscaleAndCheck: {
    if (step_.inputs.size() < 2 || step_.outputs.size() != step_.inputs.size())
      return Status::error("needs inputs [inv_scale, grad...] and outputs [unscaled..., all_finite], "
                           "one unscaled gradient per gradient");
    AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
    AMPJIT_RETURN_IF_ERROR(expectIn(0, scalarOf(DType::F32), ""));
    for (size_t i = 1; i < in_.size(); ++i) {
      AMPJIT_RETURN_IF_ERROR(expectFloatIn(i));
      AMPJIT_RETURN_IF_ERROR(expectOut(i - 1, in(i), ", the type of its gradient"));
    }
    return expectOut(out_.size() - 1, flag);
  }
  case StepKind::UpdateScale: {
    AMPJIT_RETURN_IF_ERROR(checkSlotCounts(5, 4));
    AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
    TensorType counter = scalarOf(DType::I64);
    AMPJIT_RETURN_IF_ERROR(expectIn(0, scalarOf(DType::F32), ""));
    for (size_t i : {1, 2, 3})
      AMPJIT_RETURN_IF_ERROR(expectIn(i, counter, ""));
    AMPJIT_RETURN_IF_ERROR(expectIn(4, flag, ""));
    for (size_t i = 0; i < 4; ++i)
      AMPJIT_RETURN_IF_ERROR(expectOut(i, in(i), ", the type of the state it replaces"));
    const UpdateScaleParams& params = step_.as<UpdateScaleParams>();
    if (!(params.growthFactor > 1.0) || std::isinf(params.growthFactor))
      return Status::error("growth_factor must be finite and greater than 1");
    if (!(params.backoffFactor > 0.0 && params.backoffFactor < 1.0))
      return Status::error("backoff_factor must be in (0, 1)");
    if (params.growthInterval < 1 || params.backoffInterval < 1)
      return Status::error("growth_interval and backoff_interval must be at least 1");
    if (!(params.minScale >= 0.0) || std::isinf(params.minScale))
      return Status::error("min_scale must be finite and non-negative");
    if (!(params.maxScale > 0.0) || params.maxScale < params.minScale)
      return Status::error("max_scale must be positive and at least min_scale");
    return Status::success();
  }
  default: return Status::error("internal: not a scaler step");
  }
}

/// The two spatial entries of a window parameter, or an error naming it.
Status checkPair(std::string_view name, const std::vector<int64_t>& values, int64_t minimum) {
  if (values.size() != 2)
    return Status::error(std::string(name) + " must have 2 entries [height, width], got " +
                         std::to_string(values.size()));
  for (int64_t value : values)
    if (!windowParameterInRange(value, minimum))
      return Status::error(std::string(name) + " entries must be in [" + std::to_string(minimum) + ", " +
                           std::to_string(kMaxWindowParameter) + "], got " + shapeToString(values));
  return Status::success();
}

Status StepChecker::checkConv() const {
  const Conv2dParams& params = step_.as<Conv2dParams>();
  bool forward = step_.kind == StepKind::Conv2d;
  bool accumulates = accumulatesInPlace(step_);
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(forward || accumulates ? 3 : 2, 1));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  AMPJIT_RETURN_IF_ERROR(checkPair("stride", params.stride, 1));
  AMPJIT_RETURN_IF_ERROR(checkPair("padding", params.padding, 0));
  AMPJIT_RETURN_IF_ERROR(checkPair("dilation", params.dilation, 1));
  if (params.groups < 1)
    return Status::error("groups = " + std::to_string(params.groups) + " must be at least 1");
  // Name the three tensors whatever slot they are in.
  const TensorType& x = step_.kind == StepKind::Conv2d           ? in(0)
                        : step_.kind == StepKind::Conv2dGradInput ? out(0)
                                                                  : in(1);
  const TensorType& w = step_.kind == StepKind::Conv2dGradWeight ? out(0) : in(1);
  std::string xName = step_.kind == StepKind::Conv2d ? inName(0)
                      : step_.kind == StepKind::Conv2dGradInput ? outName(0) : inName(1);
  std::string wName = step_.kind == StepKind::Conv2dGradWeight ? outName(0) : inName(1);
  for (const auto& [type, name] : {std::pair{&x, xName}, std::pair{&w, wName}}) {
    if (!isFloating(type->dtype))
      return Status::error(name + " must be f16, bf16, f32 or f64");
    if (type->shape.size() != 4)
      return Status::error(name + " must have rank 4");
  }
  if (w.dtype != x.dtype)
    return Status::error(wName + " must have the dtype of " + xName);
  ActivationDims a = activationDims(params.nhwc);
  FilterDims f = filterDims(params.nhwc);
  const char* layout = params.nhwc ? "NHWC" : "NCHW";
  int64_t channels = x.shape[size_t(a.channel)], outChannels = w.shape[size_t(f.out)];
  if (channels % params.groups != 0 || outChannels % params.groups != 0)
    return Status::error("groups = " + std::to_string(params.groups) + " must divide the input channels (" +
                         std::to_string(channels) + ") and the output channels (" +
                         std::to_string(outChannels) + ")");
  if (w.shape[size_t(f.in)] != channels / params.groups)
    return Status::error(wName + " must have " + std::to_string(channels / params.groups) +
                         " input channels per group (" + layout + " " + xName + " has " +
                         std::to_string(channels) + " channels in " + std::to_string(params.groups) +
                         " groups)");
  Shape expected(4);
  expected[size_t(a.batch)] = x.shape[size_t(a.batch)];
  expected[size_t(a.channel)] = outChannels;
  for (int d = 0; d < 2; ++d) {
    int64_t in = x.shape[size_t(d == 0 ? a.height : a.width)];
    int64_t kernel = w.shape[size_t(d == 0 ? f.height : f.width)];
    int64_t size = windowOutputSize(in, kernel, params.stride[d], params.padding[d], params.dilation[d]);
    if (size < 1)
      return Status::error(std::string("the ") + (d == 0 ? "height" : "width") + " " + std::to_string(in) +
                           " of " + xName + " is smaller than the dilated kernel (" + std::to_string(kernel) +
                           ", dilation " + std::to_string(params.dilation[d]) + ", padding " +
                           std::to_string(params.padding[d]) + ")");
    expected[size_t(d == 0 ? a.height : a.width)] = size;
  }
  TensorType yType{x.dtype, expected};
  if (forward) {
    if (hasIn(2))
      AMPJIT_RETURN_IF_ERROR(expectIn(2, TensorType{x.dtype, {outChannels}}, ": one bias per output channel"));
    return expectOut(0, yType, std::string(", the convolution of ") + layout + " input and filter");
  }
  AMPJIT_RETURN_IF_ERROR(expectIn(0, yType, std::string(", the shape the convolution of the ") +
                                               (step_.kind == StepKind::Conv2dGradInput ? "input" : "filter") +
                                               " it yields would produce"));
  if (accumulates)
    return expectIn(conv2d_grad_input_slot::kAccumulate, x, ", the gradient it adds to");
  return Status::success();
}

Status StepChecker::checkBatchNorm() const {
  bool training = step_.kind == StepKind::BatchNorm;
  const BatchNormParams& params = step_.as<BatchNormParams>();
  if (int(params.activation) >= kBatchNormActivationCount)
    return Status::error("has an invalid activation " + std::to_string(int(params.activation)));
  bool addsResidual = params.activation == BatchNormActivation::AddRelu;
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(addsResidual ? 6 : 5, training ? 5 : 1));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  AMPJIT_RETURN_IF_ERROR(expectFloatIn(0));
  const Shape& shape = in(0).shape;
  if (shape.size() < 2)
    return Status::error(inName(0) + " must have rank >= 2 (a batch and channels)");
  AMPJIT_RETURN_IF_ERROR(expectAxis(params.axis, shape.size(), "axis"));
  if (!(params.eps >= 0.0) || std::isinf(params.eps))
    return Status::error("eps = " + formatDouble(params.eps) + " must be finite and non-negative");
  if (!(params.momentum >= 0.0 && params.momentum <= 1.0))
    return Status::error("momentum = " + formatDouble(params.momentum) + " must be in [0, 1]");
  if (shape[size_t(params.axis)] == 0)
    return Status::error(inName(0) + " has no channels (dimension " + std::to_string(params.axis) + " is 0)");
  if (training && in(0).elementCount() / shape[size_t(params.axis)] < 2)
    return Status::error(inName(0) + " has one value per channel: training statistics need more than one");
  TensorType channel{statisticsType(in(0).dtype), {shape[size_t(params.axis)]}};
  for (size_t i = 1; i < 5; ++i)
    if (hasIn(i))
      AMPJIT_RETURN_IF_ERROR(expectIn(i, channel, ": one value per channel in the statistics type"));
  if (addsResidual)
    AMPJIT_RETURN_IF_ERROR(expectIn(batch_norm_slot::kZ, in(0), ", the type of 'x' (the residual added before the relu)"));
  AMPJIT_RETURN_IF_ERROR(expectOut(0, in(0)));
  if (training)
    for (size_t i = 1; i < 5; ++i)
      AMPJIT_RETURN_IF_ERROR(expectOut(i, channel, ": one value per channel in the statistics type"));
  return Status::success();
}

Status StepChecker::checkBatchNormGrad() const {
  namespace slot = batch_norm_grad_slot;
  BatchNormActivation activation = step_.as<BatchNormGradParams>().activation;
  if (int(activation) >= kBatchNormActivationCount)
    return Status::error("has an invalid activation " + std::to_string(int(activation)));
  bool folded = activation != BatchNormActivation::None;
  bool residual = activation == BatchNormActivation::AddRelu;
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(folded ? 7 : 5, residual ? 4 : 3));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  AMPJIT_RETURN_IF_ERROR(expectFloatIn(slot::kX));
  const Shape& shape = in(slot::kX).shape;
  if (shape.size() < 2)
    return Status::error(inName(slot::kX) + " must have rank >= 2 (a batch and channels)");
  int64_t axis = step_.as<BatchNormGradParams>().axis;
  AMPJIT_RETURN_IF_ERROR(expectAxis(axis, shape.size(), "axis"));
  TensorType channel{statisticsType(in(slot::kX).dtype), {shape[size_t(axis)]}};
  AMPJIT_RETURN_IF_ERROR(expectIn(slot::kDy, in(slot::kX), ", the type of 'x'"));
  for (size_t i : {slot::kSaveMean, slot::kSaveInvstd, slot::kWeight})
    if (hasIn(i))
      AMPJIT_RETURN_IF_ERROR(expectIn(i, channel, ": one value per channel in the statistics type"));
  if (folded) {
    AMPJIT_RETURN_IF_ERROR(
        expectIn(slot::kY, in(slot::kX), ", the type of 'x' (the forward's output after the relu)"));
    if (hasIn(slot::kBias))
      AMPJIT_RETURN_IF_ERROR(expectIn(slot::kBias, channel, ": one value per channel in the statistics type"));
  }
  AMPJIT_RETURN_IF_ERROR(expectOut(slot::kDx, in(slot::kX)));
  AMPJIT_RETURN_IF_ERROR(expectOut(slot::kDweight, channel));
  AMPJIT_RETURN_IF_ERROR(expectOut(slot::kDbias, channel));
  if (residual)
    AMPJIT_RETURN_IF_ERROR(expectOut(slot::kDz, in(slot::kX), ", the type of 'x' (the residual's gradient)"));
  return Status::success();
}

Status StepChecker::checkPool() const {
  bool forward = step_.kind == StepKind::MaxPool2d || step_.kind == StepKind::AvgPool2d;
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(forward ? 1 : 2, 1));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  const Pool2dParams& params = step_.as<Pool2dParams>();
  AMPJIT_RETURN_IF_ERROR(checkPair("kernel", params.kernel, 1));
  AMPJIT_RETURN_IF_ERROR(checkPair("stride", params.stride, 1));
  AMPJIT_RETURN_IF_ERROR(checkPair("padding", params.padding, 0));
  for (int d = 0; d < 2; ++d)
    if (2 * params.padding[d] > params.kernel[d])
      return Status::error("padding " + shapeToString(params.padding) + " must be at most half the kernel " +
                           shapeToString(params.kernel));
  size_t xSlot = forward ? 0 : 1;
  AMPJIT_RETURN_IF_ERROR(expectFloatIn(xSlot));
  const TensorType& x = in(xSlot);
  if (x.shape.size() != 4)
    return Status::error(inName(xSlot) + " must have rank 4");
  ActivationDims a = activationDims(params.nhwc);
  Shape expected = x.shape;
  for (int d = 0; d < 2; ++d) {
    size_t dim = size_t(d == 0 ? a.height : a.width);
    int64_t size = windowOutputSize(x.shape[dim], params.kernel[d], params.stride[d], params.padding[d], 1,
                                    params.ceilMode);
    if (size < 1)
      return Status::error(std::string("the ") + (d == 0 ? "height" : "width") + " " +
                           std::to_string(x.shape[dim]) + " of " + inName(xSlot) + " is smaller than the kernel " +
                           shapeToString(params.kernel));
    expected[dim] = size;
  }
  TensorType yType{x.dtype, expected};
  if (forward)
    return expectOut(0, yType, std::string(", the pooled ") + (params.nhwc ? "NHWC" : "NCHW") + " input");
  AMPJIT_RETURN_IF_ERROR(expectIn(0, yType, ", the shape of the pooled input"));
  return expectOut(0, x);
}

Status StepChecker::checkEmbedding() const {
  bool forward = step_.kind == StepKind::Embedding;
  AMPJIT_RETURN_IF_ERROR(checkSlotCounts(2, 1));
  AMPJIT_RETURN_IF_ERROR(checkRequiredSlots());
  size_t indicesSlot = forward ? 0 : 1, floatSlot = forward ? 1 : 0;
  if (in(indicesSlot).dtype != DType::I64)
    return Status::error(inName(indicesSlot) + " must be i64");
  AMPJIT_RETURN_IF_ERROR(expectFloatIn(floatSlot));
  const Shape& indices = in(indicesSlot).shape;
  if (forward) {
    const TensorType& table = in(1);
    if (table.shape.size() != 2)
      return Status::error(inName(1) + " must have rank 2: [num_embeddings, embedding_dim]");
    Shape shape = indices;
    shape.push_back(table.shape[1]);
    return expectOut(0, {table.dtype, shape}, ": the indices' shape, then embedding_dim");
  }
  const TensorType& dy = in(0);
  if (dy.shape.size() != indices.size() + 1 || !std::equal(indices.begin(), indices.end(), dy.shape.begin()))
    return Status::error(inName(0) + " must have the shape of " + inName(1) + " followed by embedding_dim");
  if (out(0).dtype != dy.dtype || out(0).shape.size() != 2 || out(0).shape[1] != dy.shape.back() ||
      out(0).shape[0] < 1)
    return Status::error(outName(0) + " must be [num_weights, " + std::to_string(dy.shape.back()) + "] of " +
                         std::string(dtypeName(dy.dtype)));
  int64_t padding = step_.as<EmbeddingGradParams>().paddingIdx;
  if (padding < -1 || padding >= out(0).shape[0])
    return Status::error("padding_idx " + std::to_string(padding) + " is not a row of " + outName(0) +
                         " (-1 for none)");
  return Status::success();
}

} // namespace

std::string describeBuffer(const Plan& plan, BufferId id) {
  std::string text = "buffer %" + std::to_string(id);
  if (id < plan.buffers.size() && !plan.buffers[id].name.empty())
    text += " '" + plan.buffers[id].name + "'";
  return text;
}

Status verifyStepTypes(const Step& step, std::span<const TensorType> inputTypes,
                       std::span<const TensorType> outputTypes) {
  if (int(step.kind) >= kStepKindCount)
    return Status::error("invalid step kind " + std::to_string(int(step.kind)));
  return StepChecker(step, inputTypes, outputTypes).run();
}

//===----------------------------------------------------------------------===//
// Plan verification
//===----------------------------------------------------------------------===//

namespace {

Status verifyBuffers(const Plan& plan, size_t& argumentCount) {
  std::vector<int> argumentSeen;
  for (BufferId id = 0; id < plan.buffers.size(); ++id) {
    const BufferDesc& buffer = plan.buffers[id];
    std::string where = describeBuffer(plan, id);
    if (int(buffer.role) >= kBufferRoleCount)
      return Status::error(where + " has an invalid role");
    if (int(buffer.type.dtype) >= int(allDTypes.size()))
      return Status::error(where + " has an invalid dtype");
    if (checkedElementCount(buffer.type.shape) < 0)
      return Status::error(where + " has an invalid shape " + shapeToString(buffer.type.shape) +
                           " (negative dimension or more than 2^48 elements)");
    bool argumentRole = isArgumentRole(buffer.role);
    if (argumentRole != (buffer.argument >= 0))
      return Status::error(where + " has role " + std::string(bufferRoleName(buffer.role)) +
                           (argumentRole ? " but no argument index" : " but an argument index"));
    if (buffer.argument >= 0) {
      if (size_t(buffer.argument) >= plan.buffers.size())
        return Status::error(where + " is argument " + std::to_string(buffer.argument) +
                             ", more than there are buffers");
      if (argumentSeen.size() <= size_t(buffer.argument))
        argumentSeen.resize(buffer.argument + 1, 0);
      if (argumentSeen[buffer.argument]++)
        return Status::error(where + " is argument " + std::to_string(buffer.argument) +
                             ", which another buffer already is");
    }
    if (buffer.viewOf >= 0) {
      if (buffer.role != BufferRole::Temporary || size_t(buffer.viewOf) >= plan.buffers.size())
        return Status::error(where + " is a view of buffer %" + std::to_string(buffer.viewOf) +
                             ", but only a temporary can view another buffer that exists");
      const BufferDesc& viewed = plan.buffers[size_t(buffer.viewOf)];
      if (viewed.role == BufferRole::Temporary || viewed.role == BufferRole::Output ||
          viewed.type.byteSize() != buffer.type.byteSize())
        return Status::error(where + " is a view of " + describeBuffer(plan, BufferId(buffer.viewOf)) +
                             ", which is not an argument, constant or carried buffer of its size");
    } else if (buffer.role == BufferRole::Temporary) {
      uint64_t size = uint64_t(buffer.type.byteSize());
      if (buffer.arenaOffset % kArenaAlignment != 0)
        return Status::error(where + " has arena offset " + std::to_string(buffer.arenaOffset) +
                             ", not a multiple of 64");
      if (buffer.arenaOffset > plan.arenaBytes || size > plan.arenaBytes - buffer.arenaOffset)
        return Status::error(where + " (" + std::to_string(size) + " bytes at offset " +
                             std::to_string(buffer.arenaOffset) + ") does not fit in the arena of " +
                             std::to_string(plan.arenaBytes) + " bytes");
    }
    if (buffer.role == BufferRole::Constant) {
      if (buffer.constantData.size() != size_t(buffer.type.byteSize()))
        return Status::error(where + " is a constant of type " + typeToString(buffer.type) + " (" +
                             std::to_string(buffer.type.byteSize()) + " bytes) but holds " +
                             std::to_string(buffer.constantData.size()) + " bytes of data");
    } else if (!buffer.constantData.empty()) {
      return Status::error(where + " has constant data but role " +
                           std::string(bufferRoleName(buffer.role)));
    }
  }
  argumentCount = argumentSeen.size();
  for (size_t i = 0; i < argumentSeen.size(); ++i)
    if (!argumentSeen[i])
      return Status::error("no buffer is argument " + std::to_string(i) + " (arguments are numbered from 0 "
                                                                         "without gaps)");
  for (BufferId id = 0; id < plan.buffers.size(); ++id) {
    const BufferDesc& buffer = plan.buffers[id];
    if (buffer.derivedFrom < 0)
      continue;
    std::string where = describeBuffer(plan, id);
    if (buffer.argument < 0 || buffer.role == BufferRole::Input)
      return Status::error(where + " is derived state but not a state argument");
    if (size_t(buffer.derivedFrom) >= argumentCount || buffer.derivedFrom == buffer.argument)
      return Status::error(where + " is derived from argument " + std::to_string(buffer.derivedFrom) +
                           ", which is not another argument");
    const BufferDesc& source = plan.buffers[plan.argumentBuffer(size_t(buffer.derivedFrom))];
    if (source.type.shape != buffer.type.shape || !isFloating(source.type.dtype) ||
        !isFloating(buffer.type.dtype))
      return Status::error(where + " of type " + typeToString(buffer.type) +
                           " cannot be derived from argument " + std::to_string(buffer.derivedFrom) +
                           " of type " + typeToString(source.type) +
                           ": both must be floating-point of one shape");
  }
  return Status::success();
}

Status verifyResults(const Plan& plan, size_t argumentCount, std::vector<bool>& tiedArguments) {
  tiedArguments.assign(argumentCount, false);
  for (size_t i = 0; i < plan.results.size(); ++i) {
    const PlanResult& result = plan.results[i];
    std::string where = "result " + std::to_string(i);
    if (result.buffer >= plan.buffers.size())
      return Status::error(where + " refers to buffer %" + std::to_string(result.buffer) + " but the plan has " +
                           std::to_string(plan.buffers.size()) + " buffers");
    const BufferDesc& buffer = plan.buffers[result.buffer];
    if (buffer.role == BufferRole::Temporary || buffer.role == BufferRole::Carried)
      return Status::error(where + " is the " + std::string(bufferRoleName(buffer.role)) + " " +
                           describeBuffer(plan, result.buffer) + ", which is not the run's to return");
    if (result.tiedArgument < 0)
      continue;
    if (size_t(result.tiedArgument) >= argumentCount)
      return Status::error(where + " is tied to argument " + std::to_string(result.tiedArgument) +
                           " but the plan has " + std::to_string(argumentCount) + " arguments");
    if (buffer.argument != result.tiedArgument)
      return Status::error(where + " is tied to argument " + std::to_string(result.tiedArgument) +
                           " but is " + describeBuffer(plan, result.buffer) +
                           ", not that argument's buffer (state is updated in place)");
    if (buffer.role == BufferRole::Input)
      return Status::error(where + " is tied to argument " + std::to_string(result.tiedArgument) +
                           ", which is an input, not state");
    if (tiedArguments[result.tiedArgument])
      return Status::error(where + " ties argument " + std::to_string(result.tiedArgument) +
                           ", which another result already ties");
    tiedArguments[result.tiedArgument] = true;
  }
  return Status::success();
}

/// The rules of a deferred update (Plan::deferredSteps): what its steps may
/// touch, that the state it updates is its own, and that every carried value
/// it reads is produced by the rest of the run.
Status verifyDeferredSteps(const Plan& plan) {
  size_t deferred = plan.deferredSteps;
  if (deferred > plan.steps.size())
    return Status::error("the plan defers " + std::to_string(deferred) + " steps but has " +
                         std::to_string(plan.steps.size()));
  std::vector<bool> readByDeferred(plan.buffers.size(), false), writtenByDeferred(plan.buffers.size(), false),
      writtenByRest(plan.buffers.size(), false);
  auto valid = [&](BufferId id) { return id != kNoBuffer && id < plan.buffers.size(); };
  for (size_t index = 0; index < plan.steps.size(); ++index) {
    const Step& step = plan.steps[index];
    for (size_t slot = 0; slot < step.outputs.size(); ++slot)
      if (valid(step.outputs[slot]))
        (index < deferred ? writtenByDeferred : writtenByRest)[step.outputs[slot]] = true;
    if (index >= deferred)
      continue;
    for (BufferId id : step.inputs) {
      if (!valid(id))
        continue;
      BufferRole role = plan.buffers[id].role;
      if (role == BufferRole::Temporary || role == BufferRole::Output || role == BufferRole::Input ||
          role == BufferRole::Hyper)
        return Status::error(describeStep(plan, index) + " is deferred to the next run but reads " +
                             describeBuffer(plan, id) + ", which is the " +
                             (role == BufferRole::Temporary || role == BufferRole::Output ? "current" : "next") +
                             " run's (a deferred step reads carried buffers, constants and state)");
      readByDeferred[id] = true;
    }
    for (BufferId id : step.outputs) {
      if (!valid(id))
        continue;
      BufferRole role = plan.buffers[id].role;
      if (role == BufferRole::Temporary || role == BufferRole::Output)
        return Status::error(describeStep(plan, index) + " is deferred to the next run but writes " +
                             describeBuffer(plan, id) + " (a deferred step writes carried buffers and state)");
    }
  }
  for (BufferId id = 0; id < plan.buffers.size(); ++id) {
    const BufferDesc& buffer = plan.buffers[id];
    if (buffer.role == BufferRole::Carried && deferred == 0)
      return Status::error(describeBuffer(plan, id) + " is carried, but the plan defers no steps");
    if (buffer.role == BufferRole::Carried && readByDeferred[id] && !writtenByRest[id])
      return Status::error(describeBuffer(plan, id) + " is read by the deferred steps but written by no other "
                                                     "step, so it would never hold a value");
    if (buffer.argument >= 0 && writtenByDeferred[id] && writtenByRest[id])
      return Status::error(describeBuffer(plan, id) + " is updated by the deferred steps and by the rest of the "
                                                     "run; deferring would reorder the two writes");
  }
  return Status::success();
}

/// The rules of Plan::sideSteps: in step order after the deferred steps,
/// each joined at a later step (or the end), and nothing on the main lane
/// before its join reads what it writes or writes what it touches (a view
/// counts as what it views). Arena bytes are verifyPlan's liveness check.
Status verifySideSteps(const Plan& plan, const std::vector<BufferId>& viewRoot) {
  for (size_t k = 0; k < plan.sideSteps.size(); ++k) {
    const SideStep& side = plan.sideSteps[k];
    std::string which = "side step " + std::to_string(k) + " (step " + std::to_string(side.step) + ")";
    if (side.step >= plan.steps.size())
      return Status::error(which + " is past the plan's " + std::to_string(plan.steps.size()) + " steps");
    if (side.step < plan.deferredSteps)
      return Status::error(which + " is one of the deferred steps, which have a lane of their own");
    if (k > 0 && side.step <= plan.sideSteps[k - 1].step)
      return Status::error(which + " does not follow side step " + std::to_string(k - 1) + " (step " +
                           std::to_string(plan.sideSteps[k - 1].step) + "): side steps are in step order");
    if (side.joinBefore <= side.step || side.joinBefore > plan.steps.size())
      return Status::error(which + " joins before step " + std::to_string(side.joinBefore) +
                           ", which is not after it and at most the plan's " + std::to_string(plan.steps.size()) +
                           " steps");
  }
  std::vector<bool> isSide = sideStepMask(plan);
  auto valid = [&](BufferId id) { return id != kNoBuffer && id < plan.buffers.size(); };
  for (const SideStep& side : plan.sideSteps) {
    const Step& step = plan.steps[side.step];
    std::vector<BufferId> written, touched;
    for (BufferId id : step.outputs)
      if (valid(id))
        written.push_back(viewRoot[id]);
    touched = written;
    for (BufferId id : step.inputs)
      if (valid(id))
        touched.push_back(viewRoot[id]);
    auto among = [&](const std::vector<BufferId>& roots, BufferId id) {
      return valid(id) && std::find(roots.begin(), roots.end(), viewRoot[id]) != roots.end();
    };
    std::string until = " before " + describeStep(plan, side.step) + ", a side step, joins at step " +
                        std::to_string(side.joinBefore);
    for (size_t index = size_t(side.step) + 1; index < side.joinBefore; ++index) {
      if (isSide[index])
        continue; // the same lane, after it
      const Step& later = plan.steps[index];
      for (BufferId id : later.inputs)
        if (among(written, id))
          return Status::error(describeStep(plan, index) + " reads " + describeBuffer(plan, id) + until +
                               " (it writes that buffer)");
      // A reshape into a view of its input's bytes moves nothing.
      if (later.kind == StepKind::Reshape && later.outputs.size() == 1 && valid(later.outputs[0]) &&
          viewRoot[later.outputs[0]] != later.outputs[0])
        continue;
      for (BufferId id : later.outputs)
        if (among(touched, id))
          return Status::error(describeStep(plan, index) + " writes " + describeBuffer(plan, id) + until +
                               " (it reads or writes that buffer)");
    }
  }
  return Status::success();
}

} // namespace

std::vector<bool> sideStepMask(const Plan& plan) {
  std::vector<bool> mask(plan.steps.size(), false);
  for (const SideStep& side : plan.sideSteps)
    if (side.step < plan.steps.size())
      mask[side.step] = true;
  return mask;
}

int64_t optimizerUpdateElements(const Plan& plan) {
  int64_t elements = 0;
  for (const Step& step : plan.steps)
    if (step.kind == StepKind::OptimizerUpdate && !step.inputs.empty() && step.inputs[0] < plan.buffers.size())
      elements += plan.buffers[step.inputs[0]].type.elementCount();
  return elements;
}

std::vector<int64_t> heldBySideSteps(const Plan& plan) {
  std::vector<int64_t> until(plan.buffers.size(), -1);
  for (const SideStep& side : plan.sideSteps) {
    if (side.step >= plan.steps.size())
      continue;
    for (const std::vector<BufferId>* slots : {&plan.steps[side.step].inputs, &plan.steps[side.step].outputs})
      for (BufferId id : *slots)
        if (id != kNoBuffer && id < plan.buffers.size())
          until[id] = std::max(until[id], int64_t(side.joinBefore) - 1);
  }
  return until;
}

std::vector<BufferId> arenaViewRoots(const Plan& plan) {
  std::vector<BufferId> root(plan.buffers.size());
  for (BufferId id = 0; id < plan.buffers.size(); ++id)
    root[id] = id;
  auto isTemporary = [&](BufferId id) {
    return id != kNoBuffer && id < plan.buffers.size() && plan.buffers[id].role == BufferRole::Temporary;
  };
  // Steps run in order, so a chain's earlier reshape has its root already.
  for (const Step& step : plan.steps) {
    if (step.kind != StepKind::Reshape || step.inputs.size() != 1 || step.outputs.size() != 1)
      continue;
    BufferId in = step.inputs[0], out = step.outputs[0];
    if (!isTemporary(out) || in == kNoBuffer || in >= plan.buffers.size() || in == out || root[out] != out)
      continue;
    const BufferDesc &from = plan.buffers[in], &to = plan.buffers[out];
    if (from.type.byteSize() != to.type.byteSize() || from.type.byteSize() == 0)
      continue;
    bool arenaView = isTemporary(in) && from.viewOf < 0 && to.viewOf < 0 && from.arenaOffset == to.arenaOffset;
    bool externalView = to.viewOf >= 0 && BufferId(to.viewOf) == in;
    if (arenaView || externalView)
      root[out] = root[in];
  }
  return root;
}

Status verifyPlan(const Plan& plan) {
  size_t argumentCount = 0;
  AMPJIT_RETURN_IF_ERROR(verifyBuffers(plan, argumentCount));
  std::vector<bool> tiedArguments;
  AMPJIT_RETURN_IF_ERROR(verifyResults(plan, argumentCount, tiedArguments));

  // Which buffers hold a value at the current point of the run, and each
  // temporary's live range [first write, last access] for the arena check.
  // Carried buffers hold the previous run's values during the deferred
  // steps; after them they follow the rules of temporaries.
  std::vector<bool> defined(plan.buffers.size(), false);
  for (BufferId id = 0; id < plan.buffers.size(); ++id)
    defined[id] = plan.buffers[id].argument >= 0 || plan.buffers[id].role == BufferRole::Constant ||
                  plan.buffers[id].role == BufferRole::Carried;
  constexpr size_t kNever = ~size_t(0);
  std::vector<size_t> firstWrite(plan.buffers.size(), kNever), lastAccess(plan.buffers.size(), 0);
  AMPJIT_RETURN_IF_ERROR(verifyDeferredSteps(plan));

  for (size_t index = 0; index < plan.steps.size(); ++index) {
    const Step& step = plan.steps[index];
    std::string where = describeStep(plan, index);
    if (index == plan.deferredSteps)
      for (BufferId id = 0; id < plan.buffers.size(); ++id)
        if (plan.buffers[id].role == BufferRole::Carried)
          defined[id] = false;
    if (int(step.kind) >= kStepKindCount)
      return Status::error("step " + std::to_string(index) + " has an invalid kind");
    if (step.params.index() != paramsIndexOf(step.kind))
      return Status::error(where + " carries the parameters of another step kind");
    std::vector<std::string> inNames = slotNames(step, false), outNames = slotNames(step, true);
    auto slotName = [&](bool output, size_t slot) {
      const std::vector<std::string>& names = output ? outNames : inNames;
      return std::string(output ? "output '" : "input '") +
             (slot < names.size() ? names[slot] : std::to_string(slot)) + "'";
    };
    std::vector<TensorType> inTypes, outTypes;
    for (size_t slot = 0; slot < step.inputs.size(); ++slot) {
      BufferId id = step.inputs[slot];
      if (id == kNoBuffer) {
        inTypes.emplace_back();
        continue;
      }
      if (id >= plan.buffers.size())
        return Status::error(where + ": " + slotName(false, slot) + " refers to buffer %" + std::to_string(id) +
                             " but the plan has " + std::to_string(plan.buffers.size()) + " buffers");
      if (!defined[id])
        return Status::error(where + ": " + slotName(false, slot) + " reads " + describeBuffer(plan, id) +
                             " before any step writes it");
      inTypes.push_back(plan.buffers[id].type);
      lastAccess[id] = index;
    }
    for (size_t slot = 0; slot < step.outputs.size(); ++slot) {
      BufferId id = step.outputs[slot];
      if (id == kNoBuffer) {
        outTypes.emplace_back();
        continue;
      }
      if (id >= plan.buffers.size())
        return Status::error(where + ": " + slotName(true, slot) + " refers to buffer %" + std::to_string(id) +
                             " but the plan has " + std::to_string(plan.buffers.size()) + " buffers");
      outTypes.push_back(plan.buffers[id].type);
    }
    Status types = verifyStepTypes(step, inTypes, outTypes);
    if (!types)
      return Status::error(where + ": " + types.message());
    if (accumulatesInPlace(step) && step.outputs[0] != step.inputs[conv2d_grad_input_slot::kAccumulate])
      return Status::error(where + ": output 'dx' must be input 'accumulate' (" +
                           describeBuffer(plan, step.inputs[conv2d_grad_input_slot::kAccumulate]) +
                           "), which it adds to in place, but is " + describeBuffer(plan, step.outputs[0]));

    for (size_t slot = 0; slot < step.outputs.size(); ++slot) {
      BufferId id = step.outputs[slot];
      if (id == kNoBuffer)
        continue;
      const BufferDesc& buffer = plan.buffers[id];
      if (buffer.role == BufferRole::Input || buffer.role == BufferRole::Constant)
        return Status::error(where + ": " + slotName(true, slot) + " writes " + describeBuffer(plan, id) +
                             ", which is " + (buffer.role == BufferRole::Input ? "an input" : "a constant") +
                             " and read-only");
      if (buffer.argument >= 0 && !tiedArguments[buffer.argument])
        return Status::error(where + ": " + slotName(true, slot) + " writes argument " +
                             std::to_string(buffer.argument) + " (" + describeBuffer(plan, id) +
                             ") but no result is tied to it");
      for (size_t other = 0; other < slot; ++other)
        if (step.outputs[other] == id)
          return Status::error(where + ": " + slotName(true, other) + " and " + slotName(true, slot) +
                               " both write " + describeBuffer(plan, id));
      bool alsoRead = std::find(step.inputs.begin(), step.inputs.end(), id) != step.inputs.end();
      if (alsoRead && !mayWriteSlotInPlace(step, slot, id))
        return Status::error(where + ": " + slotName(true, slot) + " writes " + describeBuffer(plan, id) +
                             ", which it also reads; only elementwise, optimizer and scaler steps, "
                             "batch norm's running statistics and a convolution's input gradient added to "
                             "its 'accumulate' input update in place");
      defined[id] = true;
      if (firstWrite[id] == kNever)
        firstWrite[id] = index;
      lastAccess[id] = index;
    }
  }

  // A side step's buffers hold their bytes until it joins.
  std::vector<BufferId> viewRoot = arenaViewRoots(plan);
  AMPJIT_RETURN_IF_ERROR(verifySideSteps(plan, viewRoot));
  std::vector<int64_t> held = heldBySideSteps(plan);
  for (BufferId id = 0; id < plan.buffers.size(); ++id)
    if (held[id] >= 0)
      lastAccess[id] = std::max(lastAccess[id], size_t(held[id]));

  for (size_t i = 0; i < plan.results.size(); ++i)
    if (!defined[plan.results[i].buffer])
      return Status::error("result " + std::to_string(i) + " is " + describeBuffer(plan, plan.results[i].buffer) +
                           ", which no step writes");

  // Temporaries that share arena bytes must not be live at the same time. A
  // step's outputs may not reuse the bytes of its own inputs: in-place
  // updates name the same buffer instead. The one exception is a reshape's
  // view of its input's bytes, which holds only while no step rewrites
  // either of them.
  std::vector<size_t> writers(plan.buffers.size(), 0);
  for (const Step& step : plan.steps)
    for (BufferId id : step.outputs)
      if (id != kNoBuffer)
        ++writers[id];
  for (BufferId id = 0; id < plan.buffers.size(); ++id) {
    int32_t viewed = plan.buffers[id].viewOf;
    if (viewed < 0)
      continue;
    // arenaViewRoots made it a view only if its reshape reads `viewed`.
    if (viewRoot[id] == id || writers[id] != 1)
      return Status::error(describeBuffer(plan, id) + " is a view of " + describeBuffer(plan, BufferId(viewed)) +
                           " but is not the output of one reshape step of it");
    // Nothing may write the viewed memory while the view is live.
    for (size_t index = firstWrite[id] + 1; index <= lastAccess[id]; ++index)
      for (BufferId out : plan.steps[index].outputs)
        if (out == BufferId(viewed))
          return Status::error(describeStep(plan, index) + " writes " + describeBuffer(plan, out) + " while " +
                               describeBuffer(plan, id) + ", a view of it, is live");
  }
  for (BufferId id = 0; id < plan.buffers.size(); ++id) {
    if (viewRoot[id] == id)
      continue;
    for (BufferId member : {id, viewRoot[id]})
      if (writers[member] > 1)
        return Status::error(describeBuffer(plan, id) + " is a reshape's view of the arena bytes of " +
                             describeBuffer(plan, viewRoot[id]) + ", but " + describeBuffer(plan, member) +
                             " is written by " + std::to_string(writers[member]) + " steps");
  }
  std::vector<BufferId> temporaries;
  for (BufferId id = 0; id < plan.buffers.size(); ++id)
    if (plan.buffers[id].role == BufferRole::Temporary && plan.buffers[id].viewOf < 0 &&
        firstWrite[id] != kNever && plan.buffers[id].type.byteSize() > 0)
      temporaries.push_back(id);
  std::sort(temporaries.begin(), temporaries.end(), [&](BufferId a, BufferId b) {
    return plan.buffers[a].arenaOffset < plan.buffers[b].arenaOffset;
  });
  for (size_t i = 0; i < temporaries.size(); ++i) {
    BufferId a = temporaries[i];
    uint64_t endA = plan.buffers[a].arenaOffset + uint64_t(plan.buffers[a].type.byteSize());
    for (size_t j = i + 1; j < temporaries.size(); ++j) {
      BufferId b = temporaries[j];
      if (plan.buffers[b].arenaOffset >= endA)
        break;
      bool overlapInTime = firstWrite[a] <= lastAccess[b] && firstWrite[b] <= lastAccess[a];
      if (overlapInTime && viewRoot[a] != viewRoot[b])
        return Status::error(describeBuffer(plan, a) + " (steps " + std::to_string(firstWrite[a]) + ".." +
                             std::to_string(lastAccess[a]) + ") and " + describeBuffer(plan, b) + " (steps " +
                             std::to_string(firstWrite[b]) + ".." + std::to_string(lastAccess[b]) +
                             ") share arena bytes while both are live");
    }
  }
  return Status::success();
}

} // namespace ampjit::runtime
