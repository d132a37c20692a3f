// The frontend's op table: for every op of the `jit` dialect, its operand
// names, its result-type inference and its VJP rule, in JitOps.td order.
// (The StepBuilder's table in the runtime says how an op executes; this one
// says how the frontend calls it and differentiates it.)
//
// Type inference repeats what ODS's InferTypeOpAdaptor computes, in plain
// C++ because the frontend does not include MLIR; the runtime's step
// verifier re-checks every type it is given, so a disagreement is an error,
// never a wrong kernel. VJP rules are written with the public jit:: ops, so
// under jit::trace they record like any op and carry `jit.vjp_of`.

#include "Dispatch.h"

#include "jit/Ops.h"

#include "ampjit/runtime/WindowShape.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace jit::detail {

namespace {

//===----------------------------------------------------------------------===//
// Attribute access (the public functions build the maps, so types are known)
//===----------------------------------------------------------------------===//

int64_t attrI64(const AttributeMap& attributes, std::string_view name, int64_t fallback) {
  auto found = attributes.find(name);
  return found == attributes.end() ? fallback : std::get<int64_t>(found->second);
}

double attrF64(const AttributeMap& attributes, std::string_view name, double fallback) {
  auto found = attributes.find(name);
  return found == attributes.end() ? fallback : std::get<double>(found->second);
}

bool attrFlag(const AttributeMap& attributes, std::string_view name) {
  auto found = attributes.find(name);
  return found != attributes.end() && std::get<bool>(found->second);
}

std::vector<int64_t> attrList(const AttributeMap& attributes, std::string_view name) {
  auto found = attributes.find(name);
  return found == attributes.end() ? std::vector<int64_t>() : std::get<std::vector<int64_t>>(found->second);
}

std::string attrKeyword(const AttributeMap& attributes, std::string_view name, std::string_view fallback) {
  auto found = attributes.find(name);
  return found == attributes.end() ? std::string(fallback) : std::get<std::string>(found->second);
}

//===----------------------------------------------------------------------===//
// Inference helpers: every message names the op and the operands
//===----------------------------------------------------------------------===//

[[noreturn]] void fail(const OpDef& op, const std::string& message) {
  throw Error(std::string(op.name) + ": " + message);
}

std::string operand(const OpDef& op, std::span<const Tensor> operands, size_t i) {
  return "operand '" + std::string(op.operandNames[i]) + "' " + describe(operands[i]);
}

const TensorType& typeOf(const OpDef& op, std::span<const Tensor> operands, size_t i) {
  if (!operands[i].defined())
    fail(op, "operand '" + std::string(op.operandNames[i]) + "' is undefined");
  return operands[i].impl().type;
}

void requireFloat(const OpDef& op, std::span<const Tensor> operands, size_t i) {
  if (!rt::isFloating(typeOf(op, operands, i).dtype))
    fail(op, operand(op, operands, i) + " must be floating-point (f16, bf16, f32 or f64)");
}

void requireSameDType(const OpDef& op, std::span<const Tensor> operands, size_t i, size_t j) {
  if (typeOf(op, operands, i).dtype != typeOf(op, operands, j).dtype)
    fail(op, operand(op, operands, j) + " must have the element type of " + operand(op, operands, i) +
                 " (ops never convert implicitly; use Tensor::to)");
}

void requireType(const OpDef& op, std::span<const Tensor> operands, size_t i, const TensorType& expected,
                 const std::string& why) {
  if (typeOf(op, operands, i) != expected)
    fail(op, operand(op, operands, i) + " must be " + describe(expected) + why);
}

int64_t requireAxis(const OpDef& op, std::span<const Tensor> operands, size_t i, int64_t axis) {
  int64_t rank = int64_t(typeOf(op, operands, i).shape.size());
  if (axis < 0 || axis >= rank)
    fail(op, "axis " + std::to_string(axis) + " is out of range for " + operand(op, operands, i));
  return axis;
}

/// A shape and how messages name it ("operand 'lhs' f32[2x3]").
struct NamedShape {
  Shape shape;
  std::string name;
};

/// The numpy broadcast of `shapes`, or an error naming the two that disagree.
Shape broadcastNamed(const OpDef& op, std::span<const NamedShape> shapes) {
  Shape result;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& shape = shapes[i].shape;
    Shape merged(std::max(result.size(), shape.size()), 1);
    for (size_t k = 0; k < merged.size(); ++k) {
      int64_t a = k < result.size() ? result[result.size() - 1 - k] : 1;
      int64_t b = k < shape.size() ? shape[shape.size() - 1 - k] : 1;
      if (a != b && a != 1 && b != 1)
        fail(op, shapes[i].name + " does not broadcast with " + shapes[0].name +
                     (i > 1 ? " and the others" : "") + ": dimension -" + std::to_string(k + 1) +
                     " would be both " + std::to_string(a) + " and " + std::to_string(b));
      merged[merged.size() - 1 - k] = a == 1 ? b : a;
    }
    result = std::move(merged);
  }
  return result;
}

/// The numpy broadcast of the listed operands' shapes.
Shape broadcastOf(const OpDef& op, std::span<const Tensor> operands, std::initializer_list<size_t> which) {
  std::vector<NamedShape> shapes;
  for (size_t i : which)
    shapes.push_back({typeOf(op, operands, i).shape, operand(op, operands, i)});
  return broadcastNamed(op, shapes);
}

Shape reducedShape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdim) {
  Shape result;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), int64_t(d)) != axes.end();
    if (!reduced)
      result.push_back(shape[d]);
    else if (keepdim)
      result.push_back(1);
  }
  return result;
}

DType statisticsType(DType input) { return input == f64 ? f64 : f32; }

Shape lossShape(const AttributeMap& attributes, const Shape& unreduced) {
  return attrKeyword(attributes, "reduction", "mean") == "none" ? unreduced : Shape{};
}

using Operands = std::span<const Tensor>;
using Types = std::vector<TensorType>;

//===----------------------------------------------------------------------===//
// Inference per op family
//===----------------------------------------------------------------------===//

Types inferUnary(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult&) {
  requireFloat(op, operands, 0);
  return {typeOf(op, operands, 0)};
}

Types inferBinary(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult&) {
  requireFloat(op, operands, 0);
  requireFloat(op, operands, 1);
  requireSameDType(op, operands, 0, 1);
  return {{typeOf(op, operands, 0).dtype, broadcastOf(op, operands, {0, 1})}};
}

Types inferCompare(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult&) {
  requireSameDType(op, operands, 0, 1);
  return {{i1, broadcastOf(op, operands, {0, 1})}};
}

Types inferSelect(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult&) {
  if (typeOf(op, operands, 0).dtype != i1)
    fail(op, operand(op, operands, 0) + " must be i1 (a comparison's result)");
  requireSameDType(op, operands, 1, 2);
  return {{typeOf(op, operands, 1).dtype, broadcastOf(op, operands, {0, 1, 2})}};
}

Types inferMatmul(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  for (size_t i : {0, 1}) {
    requireFloat(op, operands, i);
    if (typeOf(op, operands, i).shape.size() < 2)
      fail(op, operand(op, operands, i) + " must have rank >= 2");
  }
  requireSameDType(op, operands, 0, 1);
  const Shape& lhs = typeOf(op, operands, 0).shape;
  const Shape& rhs = typeOf(op, operands, 1).shape;
  bool tl = attrFlag(attributes, "transpose_lhs"), tr = attrFlag(attributes, "transpose_rhs");
  int64_t m = lhs[lhs.size() - (tl ? 1 : 2)], kl = lhs[lhs.size() - (tl ? 2 : 1)];
  int64_t kr = rhs[rhs.size() - (tr ? 1 : 2)], n = rhs[rhs.size() - (tr ? 2 : 1)];
  if (kl != kr)
    fail(op, "contraction dimensions differ: " + operand(op, operands, 0) + (tl ? " transposed" : "") + " has " +
                 std::to_string(kl) + " columns but " + operand(op, operands, 1) + (tr ? " transposed" : "") +
                 " has " + std::to_string(kr) + " rows");
  const NamedShape batches[] = {
      {Shape(lhs.begin(), lhs.end() - 2), "the batch dimensions of " + operand(op, operands, 0)},
      {Shape(rhs.begin(), rhs.end() - 2), "the batch dimensions of " + operand(op, operands, 1)}};
  Shape result = broadcastNamed(op, batches);
  result.push_back(m);
  result.push_back(n);
  return {{typeOf(op, operands, 0).dtype, result}};
}

Types inferReduction(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  requireFloat(op, operands, 0);
  const TensorType& input = typeOf(op, operands, 0);
  std::vector<int64_t> axes = attrList(attributes, "axes");
  for (size_t i = 0; i < axes.size(); ++i) {
    requireAxis(op, operands, 0, axes[i]);
    if (i > 0 && axes[i] <= axes[i - 1])
      fail(op, "axes must be distinct");
  }
  return {{input.dtype, reducedShape(input.shape, axes, attrFlag(attributes, "keepdim"))}};
}

Types inferBroadcastTo(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult& requested) {
  const TensorType& input = typeOf(op, operands, 0);
  if (!rt::broadcastsTo(input.shape, *requested.shape))
    fail(op, operand(op, operands, 0) + " does not broadcast to " + rt::shapeToString(*requested.shape) +
                 " (dimensions align from the right and each must be 1 or equal)");
  return {{input.dtype, *requested.shape}};
}

Types inferReshape(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult& requested) {
  const TensorType& input = typeOf(op, operands, 0);
  if (rt::checkedElementCount(*requested.shape) != input.elementCount())
    fail(op, "cannot reshape " + operand(op, operands, 0) + " (" + std::to_string(input.elementCount()) +
                 " elements) to " + rt::shapeToString(*requested.shape));
  return {{input.dtype, *requested.shape}};
}

Types inferTranspose(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  const TensorType& input = typeOf(op, operands, 0);
  std::vector<int64_t> perm = attrList(attributes, "perm");
  std::vector<bool> seen(input.shape.size(), false);
  Shape result;
  for (int64_t d : perm) {
    if (perm.size() != input.shape.size() || d < 0 || d >= int64_t(seen.size()) || seen[size_t(d)])
      fail(op, "perm is not a permutation of the " + std::to_string(seen.size()) + " dimensions of " +
                   operand(op, operands, 0));
    seen[size_t(d)] = true;
    result.push_back(input.shape[size_t(d)]);
  }
  if (perm.size() != input.shape.size())
    fail(op, "perm has " + std::to_string(perm.size()) + " entries for " + operand(op, operands, 0));
  return {{input.dtype, result}};
}

Types inferConstant(const OpDef&, Operands, const AttributeMap& attributes, const RequestedResult&) {
  return {std::get<rt::DenseData>(attributes.find("value")->second).type};
}

Types inferConvert(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult& requested) {
  return {{*requested.dtype, typeOf(op, operands, 0).shape}};
}

Types inferTypeAs(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult&) {
  requireFloat(op, operands, 0);
  requireFloat(op, operands, 1);
  return {{typeOf(op, operands, 1).dtype, typeOf(op, operands, 0).shape}};
}

Types inferAxis(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  requireFloat(op, operands, 0);
  if (attributes.count("axis")) // softmax and its gradients; not relu_grad/gelu_grad
    requireAxis(op, operands, 0, attrI64(attributes, "axis", 0));
  for (size_t i = 1; i < operands.size(); ++i)
    requireType(op, operands, i, typeOf(op, operands, 0), ", the type of '" + std::string(op.operandNames[0]) + "'");
  return {typeOf(op, operands, 0)};
}

Types inferLayerNorm(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  requireFloat(op, operands, 0);
  const TensorType& input = typeOf(op, operands, 0);
  int64_t axis = requireAxis(op, operands, 0, attrI64(attributes, "axis", 0));
  TensorType affine{input.dtype, Shape(input.shape.begin() + axis, input.shape.end())};
  for (size_t i : {1, 2})
    if (operands[i].defined())
      requireType(op, operands, i, affine, ": the normalised dimensions, in the input's dtype");
  TensorType stats{statisticsType(input.dtype), Shape(input.shape.begin(), input.shape.begin() + axis)};
  return {input, stats, stats};
}

Types inferDropout(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  requireFloat(op, operands, 0);
  requireType(op, operands, 1, {i64, {2}}, " ([seed, offset])");
  double p = attrF64(attributes, "p", 0.0);
  if (!(p >= 0.0 && p < 1.0))
    fail(op, "p = " + std::to_string(p) + " must be in [0, 1)");
  const TensorType& input = typeOf(op, operands, 0);
  return {input, {i1, input.shape}, {i64, {2}}};
}

/// Checks [.., scores, target] of a loss (scores at `first`) and returns the unreduced shape.
Shape checkLossOperands(const OpDef& op, Operands operands, size_t first) {
  requireFloat(op, operands, first);
  const TensorType& scores = typeOf(op, operands, first);
  if (op.operandNames[first + 1] == "target") {
    requireType(op, operands, first + 1, scores, ", the type of '" + std::string(op.operandNames[first]) + "'");
    return scores.shape;
  }
  if (scores.shape.size() != 2)
    fail(op, operand(op, operands, first) + " must have rank 2: [batch, classes]");
  requireType(op, operands, first + 1, {i64, {scores.shape[0]}}, ": one class index per row");
  return {scores.shape[0]};
}

Types inferLoss(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  Shape unreduced = checkLossOperands(op, operands, 0);
  if (op.name == "jit.cross_entropy") {
    double smoothing = attrF64(attributes, "label_smoothing", 0.0);
    if (!(smoothing >= 0.0 && smoothing <= 1.0))
      fail(op, "label_smoothing = " + std::to_string(smoothing) + " must be in [0, 1]");
  }
  return {{typeOf(op, operands, 0).dtype, lossShape(attributes, unreduced)}};
}

Types inferLossGrad(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  Shape unreduced = checkLossOperands(op, operands, 1);
  requireType(op, operands, 0, {typeOf(op, operands, 1).dtype, lossShape(attributes, unreduced)},
              ", the type of the loss it differentiates");
  return {typeOf(op, operands, 1)};
}

/// padding_idx (absent: -1) must be a row of a table of `rows` rows.
void checkPaddingIndex(const OpDef& op, const AttributeMap& attributes, int64_t rows) {
  if (attributes.count("padding_idx") == 0)
    return;
  int64_t padding = attrI64(attributes, "padding_idx", 0);
  if (padding < 0 || padding >= rows)
    fail(op, "padding_idx = " + std::to_string(padding) + " is not a row of the table (0 <= padding_idx < " +
                 std::to_string(rows) + ")");
}

void requireIndices(const OpDef& op, Operands operands, size_t i) {
  if (typeOf(op, operands, i).dtype != i64)
    fail(op, operand(op, operands, i) + " must hold i64 indices");
}

// indices, weight [V, D] -> [indices..., D]
Types inferEmbedding(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  requireIndices(op, operands, 0);
  requireFloat(op, operands, 1);
  const TensorType& table = typeOf(op, operands, 1);
  if (table.shape.size() != 2)
    fail(op, operand(op, operands, 1) + " must have rank 2: [num_embeddings, embedding_dim]");
  checkPaddingIndex(op, attributes, table.shape[0]);
  Shape shape = typeOf(op, operands, 0).shape;
  shape.push_back(table.shape[1]);
  return {{table.dtype, shape}};
}

// grad_output [indices..., D], indices -> [num_weights, D]
Types inferEmbeddingGrad(const OpDef& op, Operands operands, const AttributeMap& attributes,
                         const RequestedResult&) {
  requireFloat(op, operands, 0);
  requireIndices(op, operands, 1);
  const TensorType& grad = typeOf(op, operands, 0);
  const Shape& indexShape = typeOf(op, operands, 1).shape;
  if (grad.shape.size() != indexShape.size() + 1 || !std::equal(indexShape.begin(), indexShape.end(), grad.shape.begin()))
    fail(op, operand(op, operands, 0) + " must have the shape of " + operand(op, operands, 1) +
                 " followed by embedding_dim");
  int64_t rows = attrI64(attributes, "num_weights", 0);
  if (rows <= 0)
    fail(op, "num_weights = " + std::to_string(rows) + " must be positive");
  checkPaddingIndex(op, attributes, rows);
  return {{grad.dtype, {rows, grad.shape.back()}}};
}

Types inferLayerNormGrad(const OpDef& op, Operands operands, const AttributeMap& attributes,
                         const RequestedResult&) {
  requireFloat(op, operands, 1);
  const TensorType& input = typeOf(op, operands, 1);
  int64_t axis = requireAxis(op, operands, 1, attrI64(attributes, "axis", 0));
  TensorType affine{input.dtype, Shape(input.shape.begin() + axis, input.shape.end())};
  TensorType stats{statisticsType(input.dtype), Shape(input.shape.begin(), input.shape.begin() + axis)};
  requireType(op, operands, 0, input, ", the type of 'input'");
  requireType(op, operands, 2, stats, ", as layer_norm yields it");
  requireType(op, operands, 3, stats, ", as layer_norm yields it");
  if (operands[4].defined())
    requireType(op, operands, 4, affine, ": the normalised dimensions, in the input's dtype");
  return {input, affine, affine};
}


//===----------------------------------------------------------------------===//
// Optimizer updates and loss scaling (JitOps.td, AmpOps.td)
//===----------------------------------------------------------------------===//

const TensorType kF32Scalar{f32, {}};
const TensorType kI64Scalar{i64, {}};
const TensorType kBoolScalar{i1, {}};

void requireOptional(const OpDef& op, Operands operands, size_t i, const TensorType& expected, const std::string& why) {
  if (operands[i].defined())
    requireType(op, operands, i, expected, why);
}

/// The state every update has: a float param, a gradient of its shape in
/// any float type, an f32 lr, and the scaler's optional operands.
void checkUpdateCommon(const OpDef& op, Operands operands, size_t lr, size_t paramCopy) {
  requireFloat(op, operands, 0);
  requireFloat(op, operands, 1);
  const TensorType& param = typeOf(op, operands, 0);
  if (typeOf(op, operands, 1).shape != param.shape)
    fail(op, operand(op, operands, 1) + " must have the shape of " + operand(op, operands, 0));
  requireType(op, operands, lr, kF32Scalar, " (the learning rate is an f32 state tensor)");
  requireOptional(op, operands, lr + 1, kF32Scalar, " (1 / scale)");
  requireOptional(op, operands, lr + 2, kBoolScalar, " (the scaler's all-finite flag)");
  if (operands[paramCopy].defined()) {
    DType copy = typeOf(op, operands, paramCopy).dtype;
    if ((copy != f16 && copy != bf16) || typeOf(op, operands, paramCopy).shape != param.shape)
      fail(op, operand(op, operands, paramCopy) + " must be the f16 or bf16 copy of " + operand(op, operands, 0));
  }
}

// param, grad, momentum_buffer?, step?, lr, inv_scale?, predicate?, param_copy?
Types inferSgdUpdate(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  checkUpdateCommon(op, operands, 4, 7);
  const TensorType& param = typeOf(op, operands, 0);
  bool momentum = attrF64(attributes, "momentum", 0.0) != 0.0;
  if (momentum != operands[2].defined())
    fail(op, momentum ? "momentum != 0 needs operand 'momentum_buffer'"
                      : "operand 'momentum_buffer' is given but momentum is 0");
  requireOptional(op, operands, 2, param, ", the type of 'param'");
  requireOptional(op, operands, 3, kI64Scalar, " (the update count)");
  Types results = {param};
  if (operands[2].defined())
    results.push_back(param);
  if (operands[7].defined())
    results.push_back(typeOf(op, operands, 7));
  return results;
}

// param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq?, step, lr, inv_scale?, predicate?, param_copy?
Types inferAdamUpdate(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult&) {
  checkUpdateCommon(op, operands, 6, 9);
  const TensorType& param = typeOf(op, operands, 0);
  requireType(op, operands, 2, param, ", the type of 'param'");
  requireType(op, operands, 3, param, ", the type of 'param'");
  requireOptional(op, operands, 4, param, ", the type of 'param'");
  requireType(op, operands, 5, kI64Scalar, " (the update count)");
  Types results = {param, param, param};
  if (operands[4].defined())
    results.push_back(param);
  if (operands[9].defined())
    results.push_back(typeOf(op, operands, 9));
  return results;
}

Types inferScaleLoss(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult&) {
  requireFloat(op, operands, 0);
  requireType(op, operands, 1, kF32Scalar, " (the loss scale)");
  return {typeOf(op, operands, 0)};
}

/// The variadic gradients from position `first` on, each floating-point.
Types variadicGrads(const OpDef& op, Operands operands, size_t first) {
  Types grads;
  for (size_t i = first; i < operands.size(); ++i) {
    if (!operands[i].defined() || !is_floating_point(operands[i].dtype()))
      fail(op, "gradient " + std::to_string(i - first) + " " + describe(operands[i]) + " must be floating-point");
    grads.push_back(operands[i].impl().type);
  }
  return grads;
}

Types inferAllFinite(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult&) {
  variadicGrads(op, operands, 0);
  return {kBoolScalar};
}

Types inferUnscaleAndCheck(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult&) {
  requireType(op, operands, 0, kF32Scalar, " (1 / scale)");
  Types results = variadicGrads(op, operands, 1);
  if (results.empty())
    fail(op, "needs at least one gradient");
  results.push_back(kBoolScalar);
  return results;
}

Types inferUpdateScale(const OpDef& op, Operands operands, const AttributeMap&, const RequestedResult&) {
  requireType(op, operands, 0, kF32Scalar, "");
  for (size_t i : {1, 2, 3})
    requireType(op, operands, i, kI64Scalar, " (a counter)");
  requireType(op, operands, 4, kBoolScalar, "");
  return {kF32Scalar, kI64Scalar, kI64Scalar, kI64Scalar};
}

//===----------------------------------------------------------------------===//
// VJP rules
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Convolutional networks (window rules: ampjit/runtime/WindowShape.h)
//===----------------------------------------------------------------------===//

bool isNhwc(const AttributeMap& attributes) { return attrKeyword(attributes, "layout", "nchw") == "nhwc"; }

std::vector<int64_t> windowPair(const OpDef& op, const AttributeMap& attributes, std::string_view name,
                                int64_t minimum) {
  std::vector<int64_t> values = attrList(attributes, name);
  if (values.size() != 2 || !rt::windowParameterInRange(values[0], minimum) ||
      !rt::windowParameterInRange(values[1], minimum))
    fail(op, std::string(name) + " must be two values [height, width], each in [" + std::to_string(minimum) + ", " +
                 std::to_string(rt::kMaxWindowParameter) + "], got " + rt::shapeToString(values));
  return values;
}

void requireRank4(const OpDef& op, Operands operands, size_t i) {
  requireFloat(op, operands, i);
  if (typeOf(op, operands, i).shape.size() != 4)
    fail(op, operand(op, operands, i) + " must have rank 4");
}

/// The convolution of `input` with `weight` (described by `inputName` and
/// `weightName` for messages) under the op's attributes.
TensorType convOutput(const OpDef& op, const TensorType& input, const std::string& inputName,
                      const TensorType& weight, const std::string& weightName, const AttributeMap& attributes) {
  std::vector<int64_t> stride = windowPair(op, attributes, "stride", 1);
  std::vector<int64_t> padding = windowPair(op, attributes, "padding", 0);
  std::vector<int64_t> dilation = windowPair(op, attributes, "dilation", 1);
  int64_t groups = attrI64(attributes, "groups", 1);
  if (input.dtype != weight.dtype)
    fail(op, weightName + " must have the element type of " + inputName + " (ops never convert implicitly)");
  bool nhwc = isNhwc(attributes);
  rt::ActivationDims a = rt::activationDims(nhwc);
  rt::FilterDims f = rt::filterDims(nhwc);
  int64_t channels = input.shape[size_t(a.channel)], outChannels = weight.shape[size_t(f.out)];
  if (groups < 1 || channels % groups != 0 || outChannels % groups != 0)
    fail(op, "groups = " + std::to_string(groups) + " must divide the input channels (" + std::to_string(channels) +
                 ") and the output channels (" + std::to_string(outChannels) + ")");
  if (weight.shape[size_t(f.in)] != channels / groups)
    fail(op, weightName + " must have " + std::to_string(channels / groups) + " input channels per group (" +
                 inputName + " has " + std::to_string(channels) + " channels in " + std::to_string(groups) +
                 " groups; the filter is " + (nhwc ? "[out, kh, kw, in/groups]" : "[out, in/groups, kh, kw]") + ")");
  Shape shape(4);
  shape[size_t(a.batch)] = input.shape[size_t(a.batch)];
  shape[size_t(a.channel)] = outChannels;
  for (int d = 0; d < 2; ++d) {
    size_t inDim = size_t(d == 0 ? a.height : a.width), kernelDim = size_t(d == 0 ? f.height : f.width);
    int64_t size =
        rt::windowOutputSize(input.shape[inDim], weight.shape[kernelDim], stride[d], padding[d], dilation[d]);
    if (size < 1)
      fail(op, std::string("the ") + (d == 0 ? "height" : "width") + " of " + inputName +
                   " is smaller than the dilated kernel (" + std::to_string(weight.shape[kernelDim]) + ", dilation " +
                   std::to_string(dilation[d]) + ", padding " + std::to_string(padding[d]) + ")");
    shape[inDim] = size;
  }
  return {input.dtype, shape};
}

Types inferConv2d(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  requireRank4(op, operands, 0);
  requireRank4(op, operands, 1);
  TensorType output = convOutput(op, typeOf(op, operands, 0), operand(op, operands, 0), typeOf(op, operands, 1),
                                 operand(op, operands, 1), attributes);
  int64_t outChannels = output.shape[size_t(rt::activationDims(isNhwc(attributes)).channel)];
  requireOptional(op, operands, 2, {output.dtype, {outChannels}}, ": one bias per output channel");
  return {output};
}

/// conv2d_grad_input and conv2d_grad_weight: the result type is requested
/// (the forward operand's), and convolving with it must give grad_output.
Types inferConv2dGrad(const OpDef& op, Operands operands, const AttributeMap& attributes,
                      const RequestedResult& requested) {
  requireRank4(op, operands, 0);
  requireRank4(op, operands, 1);
  if (!requested.shape || requested.shape->size() != 4)
    fail(op, "needs the forward operand's 4-D shape as the result shape");
  TensorType result{typeOf(op, operands, 1).dtype, *requested.shape};
  bool gradInput = op.name == "jit.conv2d_grad_input";
  std::string resultName = "the result " + describe(result);
  TensorType forward = gradInput ? convOutput(op, result, resultName, typeOf(op, operands, 1),
                                              operand(op, operands, 1), attributes)
                                 : convOutput(op, typeOf(op, operands, 1), operand(op, operands, 1), result,
                                              resultName, attributes);
  requireType(op, operands, 0, forward, ", what the forward convolution yields");
  return {result};
}

/// Batch norm's per-channel type after checking the data operand at `input`
/// and the per-channel operands `perChannel` (absent ones skipped).
TensorType batchNormChannel(const OpDef& op, Operands operands, size_t input, std::initializer_list<size_t> perChannel,
                            const AttributeMap& attributes) {
  requireFloat(op, operands, input);
  const TensorType& type = typeOf(op, operands, input);
  if (type.shape.size() < 2)
    fail(op, operand(op, operands, input) + " must have rank >= 2 (a batch and channels)");
  int64_t axis = requireAxis(op, operands, input, attrI64(attributes, "axis", 1));
  TensorType channel{statisticsType(type.dtype), {type.shape[size_t(axis)]}};
  for (size_t i : perChannel)
    requireOptional(op, operands, i, channel, ": one value per channel, f32 (f64 for f64 input)");
  return channel;
}

Types inferBatchNorm(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  TensorType channel = batchNormChannel(op, operands, 0, {1, 2, 3, 4}, attributes);
  for (size_t i : {3, 4})
    typeOf(op, operands, i); // required
  double eps = attrF64(attributes, "eps", 1e-5);
  if (!(eps >= 0.0) || std::isinf(eps))
    fail(op, "eps = " + std::to_string(eps) + " must be finite and non-negative");
  const TensorType& input = typeOf(op, operands, 0);
  if (op.name == "jit.batch_norm_inference")
    return {input};
  double momentum = attrF64(attributes, "momentum", 0.1);
  if (!(momentum >= 0.0 && momentum <= 1.0))
    fail(op, "momentum = " + std::to_string(momentum) + " must be in [0, 1]");
  if (input.elementCount() / channel.shape[0] < 2)
    fail(op, operand(op, operands, 0) + " has one value per channel: training statistics need more than one");
  return {input, channel, channel, channel, channel};
}

Types inferBatchNormGrad(const OpDef& op, Operands operands, const AttributeMap& attributes,
                         const RequestedResult&) {
  TensorType channel = batchNormChannel(op, operands, 1, {2, 3, 4}, attributes);
  typeOf(op, operands, 2);
  typeOf(op, operands, 3);
  const TensorType& input = typeOf(op, operands, 1);
  requireType(op, operands, 0, input, ", the type of 'input'");
  return {input, channel, channel};
}

TensorType pooledType(const OpDef& op, Operands operands, size_t input, const AttributeMap& attributes) {
  requireRank4(op, operands, input);
  std::vector<int64_t> kernel = windowPair(op, attributes, "kernel_size", 1);
  std::vector<int64_t> stride = windowPair(op, attributes, "stride", 1);
  std::vector<int64_t> padding = windowPair(op, attributes, "padding", 0);
  if (2 * padding[0] > kernel[0] || 2 * padding[1] > kernel[1])
    fail(op, "padding " + rt::shapeToString(padding) + " must be at most half the kernel " +
                 rt::shapeToString(kernel));
  TensorType type = typeOf(op, operands, input);
  rt::ActivationDims a = rt::activationDims(isNhwc(attributes));
  for (int d = 0; d < 2; ++d) {
    size_t dim = size_t(d == 0 ? a.height : a.width);
    int64_t size = rt::windowOutputSize(type.shape[dim], kernel[d], stride[d], padding[d], 1,
                                        attrFlag(attributes, "ceil_mode"));
    if (size < 1)
      fail(op, std::string("the ") + (d == 0 ? "height" : "width") + " of " + operand(op, operands, input) +
                   " is smaller than the kernel " + rt::shapeToString(kernel));
    type.shape[dim] = size;
  }
  return type;
}

Types inferPool(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  return {pooledType(op, operands, 0, attributes)};
}

Types inferPoolGrad(const OpDef& op, Operands operands, const AttributeMap& attributes, const RequestedResult&) {
  requireType(op, operands, 0, pooledType(op, operands, 1, attributes), ", the pooled shape of 'input'");
  return {typeOf(op, operands, 1)};
}

using Grads = std::vector<Tensor>;

const Tensor& g0(const VjpContext& c) { return c.gradOutputs[0]; }
const Tensor& in(const VjpContext& c, size_t i) { return c.inputs[i]; }
const Tensor& out0(const VjpContext& c) { return c.outputs[0]; }

Grads vjpNeg(const VjpContext& c) { return {-g0(c)}; }
Grads vjpRelu(const VjpContext& c) { return {relu_grad(g0(c), out0(c))}; }
Grads vjpTanh(const VjpContext& c) { return {g0(c) * (1.0 - out0(c) * out0(c))}; }
Grads vjpSigmoid(const VjpContext& c) { return {g0(c) * (out0(c) * (1.0 - out0(c)))}; }
Grads vjpExp(const VjpContext& c) { return {g0(c) * out0(c)}; }
Grads vjpLog(const VjpContext& c) { return {g0(c) / in(c, 0)}; }
Grads vjpSqrt(const VjpContext& c) { return {(g0(c) / out0(c)) * 0.5}; }
// d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
Grads vjpRsqrt(const VjpContext& c) { return {g0(c) * (out0(c) * out0(c) * out0(c)) * -0.5}; }
Grads vjpGelu(const VjpContext& c) { return {gelu_grad(g0(c), in(c, 0), approximateOf(c.attributes))}; }

Grads vjpPow(const VjpContext& c) {
  double p = attrF64(c.attributes, "exponent", 1.0);
  if (p == 0.0)
    return {zeros_like(in(c, 0))};
  return {g0(c) * pow(in(c, 0), p - 1.0) * p};
}

Grads vjpAdd(const VjpContext& c) {
  return {sum_to_shape(g0(c), in(c, 0).shape()), sum_to_shape(g0(c), in(c, 1).shape())};
}
Grads vjpSub(const VjpContext& c) {
  return {sum_to_shape(g0(c), in(c, 0).shape()), c.needsGrad[1] ? sum_to_shape(-g0(c), in(c, 1).shape()) : Tensor()};
}
Grads vjpMul(const VjpContext& c) {
  return {c.needsGrad[0] ? sum_to_shape(g0(c) * in(c, 1), in(c, 0).shape()) : Tensor(),
          c.needsGrad[1] ? sum_to_shape(g0(c) * in(c, 0), in(c, 1).shape()) : Tensor()};
}
// d(a/b)/db = -a/b^2 = -(g/b) * (a/b): reuse the forward result.
Grads vjpDiv(const VjpContext& c) {
  Tensor dlhs = g0(c) / in(c, 1);
  return {sum_to_shape(dlhs, in(c, 0).shape()),
          c.needsGrad[1] ? sum_to_shape(-(dlhs * out0(c)), in(c, 1).shape()) : Tensor()};
}

Grads vjpSelect(const VjpContext& c) {
  Tensor zero = scalar_tensor(0.0, g0(c).dtype());
  return {Tensor(), c.needsGrad[1] ? sum_to_shape(where(in(c, 0), g0(c), zero), in(c, 1).shape()) : Tensor(),
          c.needsGrad[2] ? sum_to_shape(where(in(c, 0), zero, g0(c)), in(c, 2).shape()) : Tensor()};
}

// C = op(A) op(B). With A, B as stored and G = dC:
//   neither transposed: dA = G B^T,    dB = A^T G
//   A transposed:       dA = B G^T,    dB = A G
//   B transposed:       dA = G B,      dB = G^T A
//   both:               dA = B^T G^T,  dB = G^T A^T
// then summed over broadcast batch dimensions.
Grads vjpMatmul(const VjpContext& c) {
  const Tensor &a = in(c, 0), &b = in(c, 1), &g = g0(c);
  bool ta = attrFlag(c.attributes, "transpose_lhs"), tb = attrFlag(c.attributes, "transpose_rhs");
  Tensor da, db;
  // The weight's gradient first (a Linear layer's rhs), then the one that
  // flows on: the order of the recorded joint graph.
  // A matrix rhs against a batched lhs (a Linear layer over [batch, tokens,
  // features]): its gradient sums the batch's products. Folding the batch
  // into the rows makes that one GEMM accumulated in fp32, as PyTorch's
  // linear does, not per-batch products summed in their (f16) dtype.
  bool foldBatchIntoRows = b.dim() == 2 && a.dim() >= 3 && !ta;
  if (c.needsGrad[1] && foldBatchIntoRows) {
    int64_t k = a.shape().back(), n = g.shape().back(), rows = a.numel() / k;
    Tensor a2 = reshape(a, {rows, k}), g2 = reshape(g, {rows, n});
    db = tb ? matmul(g2, a2, {.transpose_lhs = true}) : matmul(a2, g2, {.transpose_lhs = true});
  } else if (c.needsGrad[1]) {
    db = tb ? matmul(g, a, {.transpose_lhs = true, .transpose_rhs = ta})
            : matmul(a, g, {.transpose_lhs = !ta, .transpose_rhs = false});
  }
  if (c.needsGrad[0])
    da = ta ? matmul(b, g, {.transpose_lhs = tb, .transpose_rhs = true})
            : matmul(g, b, {.transpose_lhs = false, .transpose_rhs = !tb});
  return {da.defined() ? sum_to_shape(da, a.shape()) : da, db.defined() ? sum_to_shape(db, b.shape()) : db};
}

/// The result gradient of a reduction, broadcast back over the input.
Tensor unreduce(const VjpContext& c, const Tensor& gradient) {
  const Shape& inputShape = in(c, 0).shape();
  Shape kept = reducedShape(inputShape, attrList(c.attributes, "axes"), true);
  return broadcast_to(reshape(gradient, kept), inputShape);
}

Grads vjpSum(const VjpContext& c) { return {unreduce(c, g0(c))}; }

Grads vjpMean(const VjpContext& c) {
  const Shape& shape = in(c, 0).shape();
  int64_t count = 1;
  for (int64_t axis : attrList(c.attributes, "axes"))
    count *= shape[size_t(axis)];
  return {unreduce(c, g0(c)) * (1.0 / double(count))};
}

// PyTorch's amax: ties share the gradient evenly.
Grads vjpMax(const VjpContext& c) {
  const Tensor& x = in(c, 0);
  std::vector<int64_t> axes = attrList(c.attributes, "axes");
  Tensor isMax = eq(x, unreduce(c, out0(c))).to(x.dtype());
  Tensor ties = axes.empty() ? isMax : sum(isMax, axes, true);
  Shape kept = reducedShape(x.shape(), axes, true);
  return {isMax * (reshape(g0(c), kept) / ties)};
}

Grads vjpBroadcastTo(const VjpContext& c) { return {sum_to_shape(g0(c), in(c, 0).shape())}; }
Grads vjpReshape(const VjpContext& c) { return {reshape(g0(c), in(c, 0).shape())}; }

Grads vjpTranspose(const VjpContext& c) {
  std::vector<int64_t> perm = attrList(c.attributes, "perm"), inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[size_t(perm[i])] = int64_t(i);
  return {permute(g0(c), inverse)};
}

Grads vjpConvert(const VjpContext& c) {
  if (!is_floating_point(in(c, 0).dtype()))
    return {Tensor()};
  return {g0(c).to(in(c, 0).dtype())};
}

// The gradient goes back to the input's type, which in a traced step is the
// type AMP decides for the input: a type_as again, not a fixed conversion.
Grads vjpTypeAs(const VjpContext& c) { return {g0(c).type_as(in(c, 0)), Tensor()}; }

Grads vjpSoftmax(const VjpContext& c) { return {softmax_grad(g0(c), out0(c), attrI64(c.attributes, "axis", 0))}; }
Grads vjpLogSoftmax(const VjpContext& c) {
  return {log_softmax_grad(g0(c), out0(c), attrI64(c.attributes, "axis", 0))};
}

// Only the normalised output is differentiated: mean and rstd are saved
// statistics (PyTorch does not return them from layer_norm either).
Grads vjpLayerNorm(const VjpContext& c) {
  auto [dx, dweight, dbias] = layer_norm_grad(g0(c), in(c, 0), c.outputs[1], c.outputs[2], in(c, 1),
                                              attrI64(c.attributes, "axis", 0));
  return {dx, in(c, 1).defined() ? dweight : Tensor(), in(c, 2).defined() ? dbias : Tensor()};
}

Grads vjpDropout(const VjpContext& c) {
  double p = attrF64(c.attributes, "p", 0.0);
  const Tensor& mask = c.outputs[1];
  return {g0(c) * mask.to(g0(c).dtype()) * (1.0 / (1.0 - p)), Tensor()};
}

Grads vjpMseLoss(const VjpContext& c) {
  Tensor dinput = mse_loss_grad(g0(c), in(c, 0), in(c, 1), {.reduction = reductionOf(c.attributes)});
  return {dinput, c.needsGrad[1] ? -dinput : Tensor()};
}

Grads vjpCrossEntropy(const VjpContext& c) {
  CrossEntropyOptions options{.reduction = reductionOf(c.attributes),
                              .ignore_index = attrI64(c.attributes, "ignore_index", -100),
                              .label_smoothing = attrF64(c.attributes, "label_smoothing", 0.0)};
  return {cross_entropy_grad(g0(c), in(c, 0), in(c, 1), options), Tensor()};
}

// Only the table has a gradient: indices are data.
Grads vjpEmbedding(const VjpContext& c) {
  AttributeMap attributes{{"num_weights", in(c, 1).shape()[0]}};
  if (auto padding = c.attributes.find("padding_idx"); padding != c.attributes.end())
    attributes.emplace("padding_idx", padding->second);
  return {Tensor(), apply1(ops::embedding_grad, {g0(c), in(c, 0)}, std::move(attributes))};
}

Grads vjpNllLoss(const VjpContext& c) {
  NllLossOptions options{.reduction = reductionOf(c.attributes),
                         .ignore_index = attrI64(c.attributes, "ignore_index", -100)};
  return {nll_loss_grad(g0(c), in(c, 0), in(c, 1), options), Tensor()};
}

// backward starts from loss * scale, so the loss's gradient is the incoming
// one times the scale: the same op (scale in fp32, rounded to the gradient's
// type), which keeps the low-precision gradient path PyTorch's.
Grads vjpScaleLoss(const VjpContext& c) { return {apply1(ops::scale_loss, {g0(c), in(c, 1)}), Tensor()}; }

// The convolution's gradients: the two library-shaped ops, and the bias's
// as one sum over every dimension but the channel.
Grads vjpConv2d(const VjpContext& c) {
  const Tensor& dy = g0(c);
  Grads grads(3);
  if (c.needsGrad[0])
    grads[0] = apply1(ops::conv2d_grad_input, {dy, in(c, 1)}, c.attributes, RequestedResult{.shape = in(c, 0).shape()});
  if (c.needsGrad[1])
    grads[1] = apply1(ops::conv2d_grad_weight, {dy, in(c, 0)}, c.attributes, RequestedResult{.shape = in(c, 1).shape()});
  if (in(c, 2).defined() && c.needsGrad[2])
    grads[2] = isNhwc(c.attributes) ? sum(dy, {0, 1, 2}) : sum(dy, {0, 2, 3});
  return grads;
}

// As layer norm: only the normalised output is differentiated; the saved
// and running statistics are not functions anyone differentiates.
Grads vjpBatchNorm(const VjpContext& c) {
  auto [dx, dweight, dbias] = batch_norm_grad(g0(c), in(c, 0), c.outputs[1], c.outputs[2], in(c, 1),
                                              attrI64(c.attributes, "axis", 1));
  return {dx, in(c, 1).defined() ? dweight : Tensor(), in(c, 2).defined() ? dbias : Tensor(), Tensor(), Tensor()};
}

// Evaluation mode is an affine map per channel: composed from elementwise ops.
Grads vjpBatchNormInference(const VjpContext& c) {
  const Tensor& dy = g0(c);
  const Tensor& input = in(c, 0);
  int64_t axis = attrI64(c.attributes, "axis", 1);
  Shape perChannel(input.shape().size(), 1);
  perChannel[size_t(axis)] = input.shape()[size_t(axis)];
  std::vector<int64_t> others;
  for (int64_t d = 0; d < input.dim(); ++d)
    if (d != axis)
      others.push_back(d);
  Tensor invstd = rsqrt(in(c, 4) + attrF64(c.attributes, "eps", 1e-5));
  Tensor scale = in(c, 1).defined() ? invstd * in(c, 1) : invstd;
  Grads grads(5);
  grads[0] = dy * reshape(scale, perChannel).to(dy.dtype());
  Tensor dyWide = dy.to(invstd.dtype());
  if (in(c, 1).defined() && c.needsGrad[1]) {
    Tensor normalized = (input.to(invstd.dtype()) - reshape(in(c, 3), perChannel)) * reshape(invstd, perChannel);
    grads[1] = sum(dyWide * normalized, others);
  }
  if (in(c, 2).defined() && c.needsGrad[2])
    grads[2] = sum(dyWide, others);
  return grads;
}

Grads vjpMaxPool2d(const VjpContext& c) { return {apply1(ops::max_pool2d_grad, {g0(c), in(c, 0)}, c.attributes)}; }
Grads vjpAvgPool2d(const VjpContext& c) { return {apply1(ops::avg_pool2d_grad, {g0(c), in(c, 0)}, c.attributes)}; }

using D = Differentiability;

} // namespace

//===----------------------------------------------------------------------===//
// Keywords
//===----------------------------------------------------------------------===//

std::string keywordOf(Reduction reduction) {
  switch (reduction) {
  case Reduction::none: return "none";
  case Reduction::mean: return "mean";
  case Reduction::sum: return "sum";
  }
  return "mean";
}

std::string keywordOf(GeluApproximate approximate) {
  return approximate == GeluApproximate::tanh ? "tanh" : "none";
}

Reduction reductionOf(const AttributeMap& attributes) {
  std::string keyword = attrKeyword(attributes, "reduction", "mean");
  return keyword == "none" ? Reduction::none : keyword == "sum" ? Reduction::sum : Reduction::mean;
}

GeluApproximate approximateOf(const AttributeMap& attributes) {
  return attrKeyword(attributes, "approximate", "none") == "tanh" ? GeluApproximate::tanh : GeluApproximate::none;
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

namespace ops {
constinit const OpDef neg{"jit.neg", {"input"}, inferUnary, D::Vjp, vjpNeg};
constinit const OpDef relu{"jit.relu", {"input"}, inferUnary, D::Vjp, vjpRelu};
constinit const OpDef tanh{"jit.tanh", {"input"}, inferUnary, D::Vjp, vjpTanh};
constinit const OpDef sigmoid{"jit.sigmoid", {"input"}, inferUnary, D::Vjp, vjpSigmoid};
constinit const OpDef exp{"jit.exp", {"input"}, inferUnary, D::Vjp, vjpExp};
constinit const OpDef log{"jit.log", {"input"}, inferUnary, D::Vjp, vjpLog};
constinit const OpDef sqrt{"jit.sqrt", {"input"}, inferUnary, D::Vjp, vjpSqrt};
constinit const OpDef rsqrt{"jit.rsqrt", {"input"}, inferUnary, D::Vjp, vjpRsqrt};
constinit const OpDef gelu{"jit.gelu", {"input"}, inferUnary, D::Vjp, vjpGelu};
constinit const OpDef pow{"jit.pow", {"input"}, inferUnary, D::Vjp, vjpPow};
constinit const OpDef add{"jit.add", {"lhs", "rhs"}, inferBinary, D::Vjp, vjpAdd};
constinit const OpDef sub{"jit.sub", {"lhs", "rhs"}, inferBinary, D::Vjp, vjpSub};
constinit const OpDef mul{"jit.mul", {"lhs", "rhs"}, inferBinary, D::Vjp, vjpMul};
constinit const OpDef div{"jit.div", {"lhs", "rhs"}, inferBinary, D::Vjp, vjpDiv};
constinit const OpDef compare{"jit.compare", {"lhs", "rhs"}, inferCompare, D::None};
constinit const OpDef select{"jit.select", {"condition", "true_value", "false_value"}, inferSelect, D::Vjp, vjpSelect};
constinit const OpDef matmul{"jit.matmul", {"lhs", "rhs"}, inferMatmul, D::Vjp, vjpMatmul};
constinit const OpDef sum{"jit.sum", {"input"}, inferReduction, D::Vjp, vjpSum};
constinit const OpDef mean{"jit.mean", {"input"}, inferReduction, D::Vjp, vjpMean};
constinit const OpDef max{"jit.max", {"input"}, inferReduction, D::Vjp, vjpMax};
constinit const OpDef broadcast_to{"jit.broadcast_to", {"input"}, inferBroadcastTo, D::Vjp, vjpBroadcastTo};
constinit const OpDef reshape{"jit.reshape", {"input"}, inferReshape, D::Vjp, vjpReshape};
constinit const OpDef transpose{"jit.transpose", {"input"}, inferTranspose, D::Vjp, vjpTranspose};
constinit const OpDef constant{"jit.constant", {}, inferConstant, D::None};
constinit const OpDef convert{"jit.convert", {"input"}, inferConvert, D::Vjp, vjpConvert};
constinit const OpDef type_as{"jit.type_as", {"input", "reference"}, inferTypeAs, D::Vjp, vjpTypeAs};
constinit const OpDef softmax{"jit.softmax", {"input"}, inferAxis, D::Vjp, vjpSoftmax};
constinit const OpDef log_softmax{"jit.log_softmax", {"input"}, inferAxis, D::Vjp, vjpLogSoftmax};
constinit const OpDef layer_norm{"jit.layer_norm", {"input", "weight", "bias"}, inferLayerNorm, D::Vjp, vjpLayerNorm};
constinit const OpDef dropout{"jit.dropout", {"input", "rng_state"}, inferDropout, D::Vjp, vjpDropout};
constinit const OpDef mse_loss{"jit.mse_loss", {"input", "target"}, inferLoss, D::Vjp, vjpMseLoss};
constinit const OpDef cross_entropy{"jit.cross_entropy", {"logits", "labels"}, inferLoss, D::Vjp, vjpCrossEntropy};
constinit const OpDef nll_loss{"jit.nll_loss", {"log_probs", "labels"}, inferLoss, D::Vjp, vjpNllLoss};
constinit const OpDef relu_grad{"jit.relu_grad", {"grad_output", "saved"}, inferAxis, D::NotTwice};
constinit const OpDef gelu_grad{"jit.gelu_grad", {"grad_output", "input"}, inferAxis, D::NotTwice};
constinit const OpDef softmax_grad{"jit.softmax_grad", {"grad_output", "output"}, inferAxis, D::NotTwice};
constinit const OpDef log_softmax_grad{"jit.log_softmax_grad", {"grad_output", "output"}, inferAxis, D::NotTwice};
constinit const OpDef layer_norm_grad{"jit.layer_norm_grad", {"grad_output", "input", "mean", "rstd", "weight"},
                            inferLayerNormGrad, D::NotTwice};
constinit const OpDef mse_loss_grad{"jit.mse_loss_grad", {"grad_output", "input", "target"}, inferLossGrad, D::NotTwice};
constinit const OpDef cross_entropy_grad{"jit.cross_entropy_grad", {"grad_output", "logits", "labels"}, inferLossGrad,
                               D::NotTwice};
constinit const OpDef nll_loss_grad{"jit.nll_loss_grad", {"grad_output", "log_probs", "labels"}, inferLossGrad,
                          D::NotTwice};
constinit const OpDef embedding{"jit.embedding", {"indices", "weight"}, inferEmbedding, D::Vjp, vjpEmbedding};
constinit const OpDef embedding_grad{"jit.embedding_grad", {"grad_output", "indices"}, inferEmbeddingGrad,
                                     D::NotTwice};
// State updates: their results replace state (the caller rebinds it), so no gradient flows.
constinit const OpDef sgd_update{"jit.sgd_update",
                                 {"param", "grad", "momentum_buffer", "step", "lr", "inv_scale", "predicate",
                                  "param_copy"},
                                 inferSgdUpdate, D::None};
constinit const OpDef adam_update{"jit.adam_update",
                                  {"param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step", "lr",
                                   "inv_scale", "predicate", "param_copy"},
                                  inferAdamUpdate, D::None};
constinit const OpDef scale_loss{"amp.scale_loss", {"loss", "scale"}, inferScaleLoss, D::Vjp, vjpScaleLoss};
constinit const OpDef all_finite{"amp.all_finite", {"grads"}, inferAllFinite, D::None, nullptr, true};
constinit const OpDef unscale_and_check{"amp.unscale_and_check", {"inv_scale", "grads"}, inferUnscaleAndCheck,
                                        D::None, nullptr, true};
constinit const OpDef update_scale{"amp.update_scale",
                                   {"scale", "good_steps", "bad_steps", "skipped_steps", "all_finite"},
                                   inferUpdateScale, D::None};
constinit const OpDef conv2d{"jit.conv2d", {"input", "weight", "bias"}, inferConv2d, D::Vjp, vjpConv2d};
constinit const OpDef batch_norm{"jit.batch_norm", {"input", "weight", "bias", "running_mean", "running_var"},
                                 inferBatchNorm, D::Vjp, vjpBatchNorm};
constinit const OpDef batch_norm_inference{"jit.batch_norm_inference",
                                           {"input", "weight", "bias", "running_mean", "running_var"},
                                           inferBatchNorm, D::Vjp, vjpBatchNormInference};
constinit const OpDef max_pool2d{"jit.max_pool2d", {"input"}, inferPool, D::Vjp, vjpMaxPool2d};
constinit const OpDef avg_pool2d{"jit.avg_pool2d", {"input"}, inferPool, D::Vjp, vjpAvgPool2d};
constinit const OpDef conv2d_grad_input{"jit.conv2d_grad_input", {"grad_output", "weight"}, inferConv2dGrad,
                                        D::NotTwice};
constinit const OpDef conv2d_grad_weight{"jit.conv2d_grad_weight", {"grad_output", "input"}, inferConv2dGrad,
                                         D::NotTwice};
constinit const OpDef batch_norm_grad{"jit.batch_norm_grad",
                                      {"grad_output", "input", "save_mean", "save_invstd", "weight"},
                                      inferBatchNormGrad, D::NotTwice};
constinit const OpDef max_pool2d_grad{"jit.max_pool2d_grad", {"grad_output", "input"}, inferPoolGrad, D::NotTwice};
constinit const OpDef avg_pool2d_grad{"jit.avg_pool2d_grad", {"grad_output", "input"}, inferPoolGrad, D::NotTwice};
} // namespace ops

std::span<const OpDef* const> allOps() {
  static const OpDef* const table[] = {
      &ops::neg, &ops::relu, &ops::tanh, &ops::sigmoid, &ops::exp, &ops::log, &ops::sqrt, &ops::rsqrt,
      &ops::gelu, &ops::pow, &ops::add, &ops::sub, &ops::mul, &ops::div, &ops::compare, &ops::select,
      &ops::matmul, &ops::sum, &ops::mean, &ops::max, &ops::broadcast_to, &ops::reshape, &ops::transpose,
      &ops::constant, &ops::convert, &ops::type_as, &ops::softmax, &ops::log_softmax, &ops::layer_norm, &ops::dropout,
      &ops::mse_loss, &ops::cross_entropy, &ops::nll_loss, &ops::relu_grad, &ops::gelu_grad,
      &ops::softmax_grad, &ops::log_softmax_grad, &ops::layer_norm_grad, &ops::mse_loss_grad,
      &ops::cross_entropy_grad, &ops::nll_loss_grad, &ops::embedding, &ops::embedding_grad, &ops::sgd_update, &ops::adam_update, &ops::conv2d,
      &ops::batch_norm, &ops::batch_norm_inference, &ops::max_pool2d, &ops::avg_pool2d, &ops::conv2d_grad_input,
      &ops::conv2d_grad_weight, &ops::batch_norm_grad, &ops::max_pool2d_grad, &ops::avg_pool2d_grad,
      &ops::scale_loss, &ops::all_finite, &ops::unscale_and_check, &ops::update_scale};
  return table;
}

} // namespace jit::detail
