#include "ampjit/runtime/StepBuilder.h"

#include <algorithm>
#include <set>

namespace ampjit::runtime {

namespace {

/// What one build call reads: operands, results, attributes. Attribute
/// getters record the first error and return a harmless value, so builders
/// read straight through; the caller reports the error afterwards. Every
/// attribute read is remembered, to reject the ones no builder reads.
class OpContext {
public:
  OpContext(std::string_view op, std::span<const std::optional<TensorType>> operands,
            std::span<const TensorType> results, const AttributeMap& attributes)
      : op(op), operands(operands), results(results), attributes_(attributes) {}

  std::string_view op;
  std::span<const std::optional<TensorType>> operands;
  std::span<const TensorType> results;

  const Status& error() const { return error_; }
  void fail(const std::string& message) {
    if (error_.ok())
      error_ = Status::error(message);
  }

  bool present(size_t i) const { return i < operands.size() && operands[i].has_value(); }

  /// Operand positions and results must be exactly these counts.
  void expectCounts(size_t operandCount, size_t resultCount, std::string_view operandNames) {
    if (operands.size() != operandCount)
      fail("expects " + std::to_string(operandCount) + " operand positions (" + std::string(operandNames) +
           "; optional ones as nullopt when absent), got " + std::to_string(operands.size()));
    else if (results.size() != resultCount)
      fail("expects " + std::to_string(resultCount) + " results, got " + std::to_string(results.size()));
  }

  double f64(std::string_view name, std::optional<double> fallback) {
    const AttributeValue* value = find(name);
    if (!value)
      return missing(name, fallback).value_or(0.0);
    if (auto* number = std::get_if<double>(value))
      return *number;
    if (auto* integer = std::get_if<int64_t>(value))
      return double(*integer);
    fail("attribute '" + std::string(name) + "' must be a number");
    return 0.0;
  }

  int64_t i64(std::string_view name, std::optional<int64_t> fallback) {
    const AttributeValue* value = find(name);
    if (!value)
      return missing(name, fallback).value_or(0);
    if (auto* integer = std::get_if<int64_t>(value))
      return *integer;
    fail("attribute '" + std::string(name) + "' must be an integer");
    return 0;
  }

  /// A unit attribute: absent is false.
  bool flag(std::string_view name) {
    const AttributeValue* value = find(name);
    if (!value)
      return false;
    if (auto* boolean = std::get_if<bool>(value))
      return *boolean;
    fail("attribute '" + std::string(name) + "' must be a boolean (unit attribute)");
    return false;
  }

  std::vector<int64_t> i64List(std::string_view name) {
    const AttributeValue* value = find(name);
    if (!value) {
      missing(name, std::optional<int>());
      return {};
    }
    if (auto* list = std::get_if<std::vector<int64_t>>(value))
      return *list;
    fail("attribute '" + std::string(name) + "' must be a list of integers");
    return {};
  }

  /// An enum attribute given as its keyword; returns the keyword's index in `keywords`.
  size_t keyword(std::string_view name, std::optional<std::string_view> fallback,
                 std::initializer_list<std::string_view> keywords) {
    const AttributeValue* value = find(name);
    std::string_view text;
    if (!value) {
      if (!fallback) {
        missing(name, std::optional<int>());
        return 0;
      }
      text = *fallback;
    } else if (auto* string = std::get_if<std::string>(value)) {
      text = *string;
    } else {
      fail("attribute '" + std::string(name) + "' must be a keyword string");
      return 0;
    }
    auto found = std::find(keywords.begin(), keywords.end(), text);
    if (found == keywords.end()) {
      std::string allowed;
      for (std::string_view keyword : keywords)
        allowed += (allowed.empty() ? "" : ", ") + std::string(keyword);
      fail("attribute '" + std::string(name) + "' is '" + std::string(text) + "'; expected one of " + allowed);
      return 0;
    }
    return size_t(found - keywords.begin());
  }

  const DenseData* dense(std::string_view name) {
    const AttributeValue* value = find(name);
    if (!value) {
      missing(name, std::optional<int>());
      return nullptr;
    }
    if (auto* data = std::get_if<DenseData>(value))
      return data;
    fail("attribute '" + std::string(name) + "' must be dense tensor data");
    return nullptr;
  }

  /// Attributes nobody read (discardable `dialect.name` ones aside).
  void rejectUnreadAttributes() {
    for (const auto& [name, value] : attributes_)
      if (name.find('.') == std::string::npos && !read_.count(name))
        fail("unknown attribute '" + name + "'");
  }

private:
  const AttributeValue* find(std::string_view name) {
    read_.insert(std::string(name));
    auto found = attributes_.find(name);
    return found == attributes_.end() ? nullptr : &found->second;
  }

  template <typename T>
  std::optional<T> missing(std::string_view name, std::optional<T> fallback) {
    if (!fallback)
      fail("missing required attribute '" + std::string(name) + "'");
    return fallback;
  }

  const AttributeMap& attributes_;
  std::set<std::string, std::less<>> read_;
  Status error_ = Status::success();
};

using BuildFunction = void (*)(OpContext&, Step&);

void setElementwise(Step& step, ElementwiseOp op, double scalar = 0.0) {
  step.as<ElementwiseParams>() = ElementwiseParams{op, scalar};
}

template <ElementwiseOp Op>
void buildUnary(OpContext& ctx, Step& step) {
  ctx.expectCounts(1, 1, "input");
  setElementwise(step, Op);
}

template <ElementwiseOp Op>
void buildBinary(OpContext& ctx, Step& step) {
  ctx.expectCounts(2, 1, "lhs, rhs");
  setElementwise(step, Op);
}

void buildGelu(OpContext& ctx, Step& step) {
  ctx.expectCounts(1, 1, "input");
  bool tanh = ctx.keyword("approximate", "none", {"none", "tanh"}) == 1;
  setElementwise(step, tanh ? ElementwiseOp::GeluTanh : ElementwiseOp::Gelu);
}

void buildGeluGrad(OpContext& ctx, Step& step) {
  ctx.expectCounts(2, 1, "grad_output, input");
  bool tanh = ctx.keyword("approximate", "none", {"none", "tanh"}) == 1;
  setElementwise(step, tanh ? ElementwiseOp::GeluTanhGrad : ElementwiseOp::GeluGrad);
}

void buildPow(OpContext& ctx, Step& step) {
  ctx.expectCounts(1, 1, "input");
  setElementwise(step, ElementwiseOp::Pow, ctx.f64("exponent", std::nullopt));
}

void buildCompare(OpContext& ctx, Step& step) {
  ctx.expectCounts(2, 1, "lhs, rhs");
  size_t predicate = ctx.keyword("predicate", std::nullopt, {"eq", "ne", "lt", "le", "gt", "ge"});
  setElementwise(step, ElementwiseOp(int(ElementwiseOp::CmpEq) + int(predicate)));
}

void buildSelect(OpContext& ctx, Step& step) {
  ctx.expectCounts(3, 1, "condition, true_value, false_value");
  setElementwise(step, ElementwiseOp::Select);
}

void buildConvert(OpContext& ctx, Step& step) {
  ctx.expectCounts(1, 1, "input");
  setElementwise(step, ElementwiseOp::Convert);
}

void buildCast(OpContext& ctx, Step& step) {
  buildConvert(ctx, step);
  if (ctx.error().ok() && (!isFloating(ctx.operands[0]->dtype) || !isFloating(ctx.results[0].dtype)))
    ctx.fail("casts between floating-point types only (use jit.convert for integers and booleans)");
}

/// A conversion to the reference's type, which the result type already
/// states: the step does not read the reference.
void buildTypeAs(OpContext& ctx, Step& step) {
  ctx.expectCounts(2, 1, "input, reference");
  setElementwise(step, ElementwiseOp::Convert);
  step.inputs.resize(1);
}

void buildMatmul(OpContext& ctx, Step& step) {
  ctx.expectCounts(2, 1, "lhs, rhs");
  step.as<GemmParams>() = GemmParams{ctx.flag("transpose_lhs"), ctx.flag("transpose_rhs")};
}

template <ReduceOp Op>
void buildReduction(OpContext& ctx, Step& step) {
  ctx.expectCounts(1, 1, "input");
  step.as<ReductionParams>() = ReductionParams{Op, ctx.i64List("axes"), ctx.flag("keepdim")};
}

void buildLayoutCopy(OpContext& ctx, Step&) { ctx.expectCounts(1, 1, "input"); }

void buildTranspose(OpContext& ctx, Step& step) {
  ctx.expectCounts(1, 1, "input");
  step.as<TransposeParams>().perm = ctx.i64List("perm");
}

void buildConstant(OpContext& ctx, Step& step) {
  ctx.expectCounts(0, 1, "none");
  const DenseData* value = ctx.dense("value");
  if (!value || !ctx.error().ok())
    return;
  if (value->type != ctx.results[0])
    return ctx.fail("attribute 'value' of type " + typeToString(value->type) +
                    " must have the result type " + typeToString(ctx.results[0]));
  step.as<ConstantParams>().data = value->bytes;
}

void buildAxis(OpContext& ctx, Step& step) {
  bool isGrad = step.kind == StepKind::SoftmaxGrad || step.kind == StepKind::LogSoftmaxGrad;
  ctx.expectCounts(isGrad ? 2 : 1, 1, isGrad ? "grad_output, output" : "input");
  step.as<AxisParams>().axis = ctx.i64("axis", std::nullopt);
}

void buildLayerNorm(OpContext& ctx, Step& step) {
  ctx.expectCounts(3, 3, "input, weight?, bias?");
  step.as<LayerNormParams>() = LayerNormParams{ctx.i64("axis", std::nullopt), ctx.f64("eps", 1e-5)};
}

void buildLayerNormGrad(OpContext& ctx, Step& step) {
  ctx.expectCounts(5, 3, "grad_output, input, mean, rstd, weight?");
  step.as<AxisParams>().axis = ctx.i64("axis", std::nullopt);
}

void buildDropout(OpContext& ctx, Step& step) {
  ctx.expectCounts(2, 3, "input, rng_state");
  step.as<DropoutParams>().p = ctx.f64("p", std::nullopt);
}

LossReduction readReduction(OpContext& ctx) {
  return LossReduction(ctx.keyword("reduction", "mean", {"none", "mean", "sum"}));
}

template <LossKind Kind>
void buildLoss(OpContext& ctx, Step& step) {
  bool isGrad = step.kind == StepKind::LossGrad;
  std::string_view names = Kind == LossKind::Mse ? "input, target"
                           : Kind == LossKind::CrossEntropy ? "logits, labels"
                                                            : "log_probs, labels";
  std::string operandNames = isGrad ? "grad_output, " + std::string(names) : std::string(names);
  ctx.expectCounts(isGrad ? 3 : 2, 1, operandNames);
  LossParams& params = step.as<LossParams>();
  params.loss = Kind;
  params.reduction = readReduction(ctx);
  if (Kind != LossKind::Mse)
    params.ignoreIndex = ctx.i64("ignore_index", -100);
  if (Kind == LossKind::CrossEntropy)
    params.labelSmoothing = ctx.f64("label_smoothing", 0.0);
}

/// Output slot k of an optimizer holds the new value of state input
/// `stateInputs[k]`; results list only the present ones, in order.
void mapOptimizerOutputs(OpContext& ctx, Step& step, std::span<const size_t> stateInputs) {
  step.outputs.assign(stateInputs.size(), kNoBuffer);
  uint32_t next = 0;
  for (size_t k = 0; k < stateInputs.size(); ++k)
    if (ctx.present(stateInputs[k]))
      step.outputs[k] = next++;
  if (ctx.results.size() != next)
    ctx.fail("has " + std::to_string(ctx.results.size()) + " results but its state operands need " +
             std::to_string(next) + " (the new parameter, then one per optional state operand given)");
}

void buildSgd(OpContext& ctx, Step& step) {
  if (ctx.operands.size() != sgd_slot::kInputs)
    return ctx.fail("expects 8 operand positions (param, grad, momentum_buffer?, step?, lr, inv_scale?, "
                    "predicate?, param_copy?; optional ones as nullopt when absent), got " +
                    std::to_string(ctx.operands.size()));
  OptimizerParams& params = step.as<OptimizerParams>();
  params.optimizer = OptimizerKind::Sgd;
  params.momentum = ctx.f64("momentum", 0.0);
  params.dampening = ctx.f64("dampening", 0.0);
  params.weightDecay = ctx.f64("weight_decay", 0.0);
  params.nesterov = ctx.flag("nesterov");
  params.maximize = ctx.flag("maximize");
  const size_t state[] = {sgd_slot::kParam, sgd_slot::kMomentumBuffer, sgd_slot::kParamCopy};
  mapOptimizerOutputs(ctx, step, state);
}

void buildAdam(OpContext& ctx, Step& step) {
  if (ctx.operands.size() != adam_slot::kInputs)
    return ctx.fail("expects 10 operand positions (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq?, step, lr, "
                    "inv_scale?, predicate?, param_copy?; optional ones as nullopt when absent), got " +
                    std::to_string(ctx.operands.size()));
  OptimizerParams& params = step.as<OptimizerParams>();
  params.optimizer = OptimizerKind::Adam;
  params.beta1 = ctx.f64("beta1", 0.9);
  params.beta2 = ctx.f64("beta2", 0.999);
  params.eps = ctx.f64("eps", 1e-8);
  params.weightDecay = ctx.f64("weight_decay", 0.0);
  params.decoupledWeightDecay = ctx.flag("decoupled_weight_decay");
  params.maximize = ctx.flag("maximize");
  const size_t state[] = {adam_slot::kParam, adam_slot::kExpAvg, adam_slot::kExpAvgSq, adam_slot::kMaxExpAvgSq,
                          adam_slot::kParamCopy};
  mapOptimizerOutputs(ctx, step, state);
}

void buildScaleLoss(OpContext& ctx, Step&) { ctx.expectCounts(2, 1, "loss, scale"); }

void buildAllFinite(OpContext& ctx, Step&) {
  if (ctx.operands.empty() || ctx.results.size() != 1)
    ctx.fail("expects at least one gradient and one result");
}

void buildUnscaleAndCheck(OpContext& ctx, Step&) {
  if (ctx.operands.size() < 2 || ctx.results.size() != ctx.operands.size())
    ctx.fail("expects operands (inv_scale, grads...) and results (one unscaled gradient per gradient, "
             "then all_finite)");
}

void buildUpdateScale(OpContext& ctx, Step& step) {
  ctx.expectCounts(5, 4, "scale, good_steps, bad_steps, skipped_steps, all_finite");
  UpdateScaleParams& params = step.as<UpdateScaleParams>();
  params.growthFactor = ctx.f64("growth_factor", 2.0);
  params.backoffFactor = ctx.f64("backoff_factor", 0.5);
  params.growthInterval = ctx.i64("growth_interval", 2000);
  params.backoffInterval = ctx.i64("backoff_interval", 1);
  params.minScale = ctx.f64("min_scale", 0.0);
  params.maxScale = ctx.f64("max_scale", std::numeric_limits<double>::infinity());
}

bool readLayoutIsNhwc(OpContext& ctx) { return ctx.keyword("layout", "nchw", {"nchw", "nhwc"}) == 1; }

void buildConv(OpContext& ctx, Step& step) {
  if (step.kind == StepKind::Conv2d)
    ctx.expectCounts(3, 1, "input, weight, bias?");
  else if (step.kind == StepKind::Conv2dGradInput)
    ctx.expectCounts(2, 1, "grad_output, weight");
  else
    ctx.expectCounts(2, 1, "grad_output, input");
  Conv2dParams& params = step.as<Conv2dParams>();
  params.stride = ctx.i64List("stride");
  params.padding = ctx.i64List("padding");
  params.dilation = ctx.i64List("dilation");
  params.groups = ctx.i64("groups", 1);
  params.nhwc = readLayoutIsNhwc(ctx);
}

void buildBatchNorm(OpContext& ctx, Step& step) {
  bool training = step.kind == StepKind::BatchNorm;
  ctx.expectCounts(5, training ? 5 : 1, "input, weight?, bias?, running_mean, running_var");
  BatchNormParams& params = step.as<BatchNormParams>();
  params.axis = ctx.i64("axis", std::nullopt);
  params.eps = ctx.f64("eps", 1e-5);
  if (training)
    params.momentum = ctx.f64("momentum", 0.1);
}

void buildBatchNormGrad(OpContext& ctx, Step& step) {
  ctx.expectCounts(5, 3, "grad_output, input, save_mean, save_invstd, weight?");
  step.as<BatchNormGradParams>().axis = ctx.i64("axis", std::nullopt);
}

void buildPool(OpContext& ctx, Step& step) {
  bool forward = step.kind == StepKind::MaxPool2d || step.kind == StepKind::AvgPool2d;
  ctx.expectCounts(forward ? 1 : 2, 1, forward ? "input" : "grad_output, input");
  Pool2dParams& params = step.as<Pool2dParams>();
  params.kernel = ctx.i64List("kernel_size");
  params.stride = ctx.i64List("stride");
  params.padding = ctx.i64List("padding");
  params.ceilMode = ctx.flag("ceil_mode");
  if (step.kind == StepKind::AvgPool2d || step.kind == StepKind::AvgPool2dGrad)
    params.countIncludePad = !ctx.flag("exclude_padding");
  params.nhwc = readLayoutIsNhwc(ctx);
}

void buildEmbedding(OpContext& ctx, Step&) {
  ctx.expectCounts(2, 1, "indices, weight");
  ctx.i64("padding_idx", -1); // only the gradient reads it
}

void buildEmbeddingGrad(OpContext& ctx, Step& step) {
  ctx.expectCounts(2, 1, "grad_output, indices");
  step.as<EmbeddingGradParams>().paddingIdx = ctx.i64("padding_idx", -1);
  // The result's rows (the step checker compares them with it).
  int64_t rows = ctx.i64("num_weights", std::nullopt);
  if (!ctx.results.empty() && (ctx.results[0].shape.empty() || ctx.results[0].shape[0] != rows))
    ctx.fail("num_weights = " + std::to_string(rows) + " but the result has shape " +
             shapeToString(ctx.results[0].shape));
}

struct OpEntry {
  OpDescription description;
  BuildFunction build;
};

using EW = ElementwiseOp;
using SK = StepKind;

// The one table of op -> step kind (DESIGN principle 1), in ODS order.
const OpEntry kOps[] = {
    {{"jit.neg", SK::Elementwise}, buildUnary<EW::Neg>},
    {{"jit.relu", SK::Elementwise}, buildUnary<EW::Relu>},
    {{"jit.tanh", SK::Elementwise}, buildUnary<EW::Tanh>},
    {{"jit.sigmoid", SK::Elementwise}, buildUnary<EW::Sigmoid>},
    {{"jit.exp", SK::Elementwise}, buildUnary<EW::Exp>},
    {{"jit.log", SK::Elementwise}, buildUnary<EW::Log>},
    {{"jit.sqrt", SK::Elementwise}, buildUnary<EW::Sqrt>},
    {{"jit.rsqrt", SK::Elementwise}, buildUnary<EW::Rsqrt>},
    {{"jit.gelu", SK::Elementwise}, buildGelu},
    {{"jit.pow", SK::Elementwise}, buildPow},
    {{"jit.add", SK::Elementwise}, buildBinary<EW::Add>},
    {{"jit.sub", SK::Elementwise}, buildBinary<EW::Sub>},
    {{"jit.mul", SK::Elementwise}, buildBinary<EW::Mul>},
    {{"jit.div", SK::Elementwise}, buildBinary<EW::Div>},
    {{"jit.compare", SK::Elementwise}, buildCompare},
    {{"jit.select", SK::Elementwise}, buildSelect},
    {{"jit.matmul", SK::Gemm}, buildMatmul},
    {{"jit.sum", SK::Reduction}, buildReduction<ReduceOp::Sum>},
    {{"jit.mean", SK::Reduction}, buildReduction<ReduceOp::Mean>},
    {{"jit.max", SK::Reduction}, buildReduction<ReduceOp::Max>},
    {{"jit.broadcast_to", SK::BroadcastTo}, buildLayoutCopy},
    {{"jit.reshape", SK::Reshape}, buildLayoutCopy},
    {{"jit.transpose", SK::Transpose}, buildTranspose},
    {{"jit.constant", SK::Constant}, buildConstant},
    {{"jit.convert", SK::Elementwise}, buildConvert},
    {{"jit.type_as", SK::Elementwise}, buildTypeAs},
    {{"jit.softmax", SK::Softmax}, buildAxis},
    {{"jit.log_softmax", SK::LogSoftmax}, buildAxis},
    {{"jit.layer_norm", SK::LayerNorm}, buildLayerNorm},
    {{"jit.dropout", SK::Dropout}, buildDropout},
    {{"jit.mse_loss", SK::Loss}, buildLoss<LossKind::Mse>},
    {{"jit.cross_entropy", SK::Loss}, buildLoss<LossKind::CrossEntropy>},
    {{"jit.nll_loss", SK::Loss}, buildLoss<LossKind::Nll>},
    {{"jit.relu_grad", SK::Elementwise}, buildBinary<EW::ReluGrad>},
    {{"jit.gelu_grad", SK::Elementwise}, buildGeluGrad},
    {{"jit.softmax_grad", SK::SoftmaxGrad}, buildAxis},
    {{"jit.log_softmax_grad", SK::LogSoftmaxGrad}, buildAxis},
    {{"jit.layer_norm_grad", SK::LayerNormGrad}, buildLayerNormGrad},
    {{"jit.mse_loss_grad", SK::LossGrad}, buildLoss<LossKind::Mse>},
    {{"jit.cross_entropy_grad", SK::LossGrad}, buildLoss<LossKind::CrossEntropy>},
    {{"jit.nll_loss_grad", SK::LossGrad}, buildLoss<LossKind::Nll>},
    {{"jit.embedding", SK::Embedding}, buildEmbedding},
    {{"jit.embedding_grad", SK::EmbeddingGrad}, buildEmbeddingGrad},
    {{"jit.sgd_update", SK::OptimizerUpdate}, buildSgd},
    {{"jit.adam_update", SK::OptimizerUpdate}, buildAdam},
    {{"jit.conv2d", SK::Conv2d}, buildConv},
    {{"jit.batch_norm", SK::BatchNorm}, buildBatchNorm},
    {{"jit.batch_norm_inference", SK::BatchNormInference}, buildBatchNorm},
    {{"jit.max_pool2d", SK::MaxPool2d}, buildPool},
    {{"jit.avg_pool2d", SK::AvgPool2d}, buildPool},
    {{"jit.conv2d_grad_input", SK::Conv2dGradInput}, buildConv},
    {{"jit.conv2d_grad_weight", SK::Conv2dGradWeight}, buildConv},
    {{"jit.batch_norm_grad", SK::BatchNormGrad}, buildBatchNormGrad},
    {{"jit.max_pool2d_grad", SK::MaxPool2dGrad}, buildPool},
    {{"jit.avg_pool2d_grad", SK::AvgPool2dGrad}, buildPool},
    {{"amp.cast", SK::Elementwise}, buildCast},
    {{"amp.scale_loss", SK::ScaleLoss}, buildScaleLoss},
    {{"amp.all_finite", SK::AllFinite}, buildAllFinite},
    {{"amp.unscale_and_check", SK::UnscaleAndCheck}, buildUnscaleAndCheck},
    {{"amp.update_scale", SK::UpdateScale}, buildUpdateScale},
};

const OpEntry* findOp(std::string_view name) {
  for (const OpEntry& entry : kOps)
    if (entry.description.name == name)
      return &entry;
  return nullptr;
}

} // namespace

std::span<const OpDescription> supportedOps() {
  static const std::vector<OpDescription> descriptions = [] {
    std::vector<OpDescription> list;
    for (const OpEntry& entry : kOps)
      list.push_back(entry.description);
    return list;
  }();
  return descriptions;
}

std::optional<StepKind> stepKindOf(std::string_view op) {
  if (const OpEntry* entry = findOp(op))
    return entry->description.kind;
  return std::nullopt;
}

/// Ops whose last operand position is optional and which have no other
/// optional one, so MLIR records no segment sizes for them: read off an MLIR
/// op, an absent trailing operand is simply missing. Their position counts.
std::optional<size_t> positionsWithTrailingOptional(std::string_view op) {
  if (op == "jit.conv2d")
    return 3;
  if (op == "jit.layer_norm_grad" || op == "jit.batch_norm_grad")
    return 5;
  return std::nullopt;
}

Expected<Step> buildStep(std::string_view op, std::span<const std::optional<TensorType>> givenOperands,
                         std::span<const TensorType> results, const AttributeMap& attributes) {
  const OpEntry* entry = findOp(op);
  if (!entry)
    return Status::error("'" + std::string(op) + "' has no runtime step: the StepBuilder does not know this op");
  std::string name(op);
  std::vector<std::optional<TensorType>> padded(givenOperands.begin(), givenOperands.end());
  if (std::optional<size_t> positions = positionsWithTrailingOptional(op); positions && padded.size() + 1 == *positions)
    padded.push_back(std::nullopt);
  std::span<const std::optional<TensorType>> operands = padded;

  Step step;
  step.kind = entry->description.kind;
  step.params = defaultParamsFor(step.kind);
  step.origin = name;
  for (size_t i = 0; i < operands.size(); ++i)
    step.inputs.push_back(operands[i] ? BufferId(i) : kNoBuffer);
  for (size_t i = 0; i < results.size(); ++i)
    step.outputs.push_back(BufferId(i));

  OpContext ctx(op, operands, results, attributes);
  entry->build(ctx, step);
  if (ctx.error().ok())
    ctx.rejectUnreadAttributes();
  if (!ctx.error().ok())
    return Status::error(name + ": " + ctx.error().message());

  bool anyF64 = false;
  std::vector<TensorType> inTypes, outTypes;
  for (BufferId slot : step.inputs) {
    inTypes.push_back(slot == kNoBuffer ? TensorType{} : *operands[slot]);
    anyF64 |= slot != kNoBuffer && operands[slot]->dtype == DType::F64;
  }
  for (BufferId slot : step.outputs) {
    outTypes.push_back(slot == kNoBuffer ? TensorType{} : results[slot]);
    anyF64 |= slot != kNoBuffer && results[slot].dtype == DType::F64;
  }
  step.computeType = anyF64 ? DType::F64 : DType::F32;
  Status valid = verifyStepTypes(step, inTypes, outTypes);
  if (!valid)
    return Status::error(name + ": " + valid.message());
  return step;
}

Status bindStep(Step& step, std::span<const BufferId> operandBuffers, std::span<const BufferId> resultBuffers) {
  for (BufferId& slot : step.inputs) {
    if (slot == kNoBuffer)
      continue;
    if (slot >= operandBuffers.size())
      return Status::error("bindStep: the step reads operand " + std::to_string(slot) + " but only " +
                           std::to_string(operandBuffers.size()) + " operand buffers were given");
    slot = operandBuffers[slot];
  }
  for (BufferId& slot : step.outputs) {
    if (slot == kNoBuffer)
      continue;
    if (slot >= resultBuffers.size())
      return Status::error("bindStep: the step writes result " + std::to_string(slot) + " but only " +
                           std::to_string(resultBuffers.size()) + " result buffers were given");
    slot = resultBuffers[slot];
  }
  return Status::success();
}

Expected<Plan> buildSingleOpPlan(std::string_view op, std::span<const std::optional<TensorType>> operands,
                                 std::span<const TensorType> results, const AttributeMap& attributes,
                                 std::span<const int> resultTiedToOperand) {
  Expected<Step> step = buildStep(op, operands, results, attributes);
  if (!step)
    return step.status();
  if (!resultTiedToOperand.empty() && resultTiedToOperand.size() != results.size())
    return Status::error(std::string(op) + ": resultTiedToOperand needs one entry per result");

  Plan plan;
  plan.name = std::string(op);
  std::vector<BufferId> operandBuffers(operands.size(), kNoBuffer);
  int32_t argument = 0;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i])
      continue;
    bool updated = std::find(resultTiedToOperand.begin(), resultTiedToOperand.end(), int(i)) !=
                   resultTiedToOperand.end();
    operandBuffers[i] = BufferId(plan.buffers.size());
    plan.buffers.push_back(BufferDesc{.type = *operands[i],
                                      .role = updated ? BufferRole::Param : BufferRole::Input,
                                      .argument = argument++});
  }
  std::vector<BufferId> resultBuffers;
  for (size_t j = 0; j < results.size(); ++j) {
    int tied = resultTiedToOperand.empty() ? -1 : resultTiedToOperand[j];
    if (tied >= 0) {
      if (size_t(tied) >= operands.size() || !operands[tied] || *operands[tied] != results[j])
        return Status::error(std::string(op) + ": result " + std::to_string(j) + " cannot update operand " +
                             std::to_string(tied) + " in place: it must be a present operand of the same type");
      resultBuffers.push_back(operandBuffers[tied]);
      plan.results.push_back(PlanResult{operandBuffers[tied], plan.buffers[operandBuffers[tied]].argument});
      continue;
    }
    resultBuffers.push_back(BufferId(plan.buffers.size()));
    plan.results.push_back(PlanResult{BufferId(plan.buffers.size()), -1});
    plan.buffers.push_back(BufferDesc{.type = results[j], .role = BufferRole::Output});
  }
  AMPJIT_RETURN_IF_ERROR(bindStep(*step, operandBuffers, resultBuffers));
  plan.steps.push_back(std::move(*step));
  Status valid = verifyPlan(plan);
  if (!valid)
    return Status::error(std::string(op) + ": " + valid.message());
  return plan;
}

} // namespace ampjit::runtime
