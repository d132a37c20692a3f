//===- JitOps.cpp - verifiers, type inference and folders of jit ops ------===//

#include "ampjit/Dialect/Jit/IR/JitOps.h"

#include "ampjit/Dialect/Jit/IR/ShapeInference.h"
#include "ampjit/runtime/WindowShape.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

#include <cmath>

using namespace mlir;
using namespace ampjit::ir;

#include "ampjit/Dialect/Jit/IR/JitEnums.cpp.inc"

#define GET_OP_CLASSES
#include "ampjit/Dialect/Jit/IR/JitOps.cpp.inc"

namespace {

NamedOperand named(StringRef name, Value value) {
  return {name, value ? value.getType() : Type()};
}

RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elementType) {
  return RankedTensorType::get(shape, elementType);
}

/// Statistics of normalisation ops are kept in fp32 (fp64 for fp64 inputs),
/// as PyTorch's accumulate type.
Type statisticsElementType(Type inputElement) {
  return inputElement.isF64() ? inputElement : Float32Type::get(inputElement.getContext());
}

/// A loss's result: rank 0 when reduced, one value per row otherwise.
RankedTensorType lossResultType(Reduction reduction, ArrayRef<int64_t> unreducedShape,
                                Type elementType) {
  if (reduction == Reduction::none)
    return tensorOf(unreducedShape, elementType);
  return tensorOf({}, elementType);
}

LogicalResult requireSameType(std::optional<Location> loc, StringRef opName,
                              const NamedOperand &reference, const NamedOperand &operand) {
  if (operand.type != reference.type)
    return emitOptionalError(loc, "'", opName, "' operand '", operand.name, "' of type ", operand.type,
                             " must have the type of operand '", reference.name, "', ",
                             reference.type);
  return success();
}

LogicalResult requireAxisInRange(std::optional<Location> loc, StringRef opName, int64_t axis,
                                 const NamedOperand &operand) {
  int64_t rank = cast<RankedTensorType>(operand.type).getRank();
  if (axis < 0 || axis >= rank)
    return emitOptionalError(loc, "'", opName, "' axis ", axis, " is out of range for operand '",
                             operand.name, "' of type ", operand.type, " (expected 0 <= axis < ",
                             rank, ")");
  return success();
}

template <typename OpTy>
LogicalResult inferBroadcastBinary(std::optional<Location> loc, typename OpTy::Adaptor adaptor,
                                   SmallVectorImpl<Type> &inferred) {
  NamedOperand operands[] = {named("lhs", adaptor.getLhs()), named("rhs", adaptor.getRhs())};
  FailureOr<SmallVector<int64_t>> shape = broadcastShapes(loc, OpTy::getOperationName(), operands);
  if (failed(shape) || failed(requireSameElementType(loc, OpTy::getOperationName(), operands)))
    return failure();
  inferred.push_back(tensorOf(*shape, getElementTypeOrSelf(operands[0].type)));
  return success();
}

template <typename OpTy>
LogicalResult inferReduction(std::optional<Location> loc, typename OpTy::Adaptor adaptor,
                             SmallVectorImpl<Type> &inferred) {
  StringRef opName = OpTy::getOperationName();
  FailureOr<RankedTensorType> input =
      requireStaticTensor(loc, opName, named("input", adaptor.getInput()));
  if (failed(input))
    return failure();
  ArrayRef<int64_t> axes = adaptor.getAxes();
  int64_t rank = input->getRank();
  if (axes.empty() && rank != 0)
    return emitOptionalError(loc, "'", opName, "' axes must not be empty for operand 'input' of type ",
                             *input, "; list every axis to reduce to a scalar");
  for (auto [index, axis] : llvm::enumerate(axes)) {
    if (axis < 0 || axis >= rank)
      return emitOptionalError(loc, "'", opName, "' axis ", axis,
                               " is out of range for operand 'input' of type ", *input,
                               " (expected 0 <= axis < ", rank, ")");
    if (index > 0 && axis <= axes[index - 1])
      return emitOptionalError(loc, "'", opName, "' axes must be strictly increasing, but ", axis,
                               " follows ", axes[index - 1]);
  }
  SmallVector<int64_t> shape;
  for (int64_t dim = 0; dim < rank; ++dim) {
    if (!llvm::is_contained(axes, dim))
      shape.push_back(input->getDimSize(dim));
    else if (adaptor.getKeepdim())
      shape.push_back(1);
  }
  inferred.push_back(tensorOf(shape, input->getElementType()));
  return success();
}

/// Checks the [N, C] scores and [N] labels of a classification loss and
/// returns N.
FailureOr<int64_t> verifyClassificationOperands(std::optional<Location> loc, StringRef opName,
                                                const NamedOperand &scores,
                                                const NamedOperand &labels) {
  FailureOr<RankedTensorType> scoresType = requireStaticTensor(loc, opName, scores);
  FailureOr<RankedTensorType> labelsType = requireStaticTensor(loc, opName, labels);
  if (failed(scoresType) || failed(labelsType))
    return failure();
  if (scoresType->getRank() != 2)
    return emitOptionalError(loc, "'", opName, "' operand '", scores.name, "' of type ", scores.type,
                             " must have rank 2: [batch, classes]");
  if (labelsType->getRank() != 1 || labelsType->getDimSize(0) != scoresType->getDimSize(0))
    return emitOptionalError(loc, "'", opName, "' operand '", labels.name, "' of type ", labels.type,
                             " must have shape [", scoresType->getDimSize(0),
                             "]: one class index per row of '", scores.name, "'");
  return scoresType->getDimSize(0);
}

/// Checks a loss gradient's incoming gradient against the loss's result shape.
LogicalResult verifyLossGradOutput(std::optional<Location> loc, StringRef opName,
                                   const NamedOperand &gradOutput, Reduction reduction,
                                   ArrayRef<int64_t> unreducedShape, Type elementType) {
  RankedTensorType expected = lossResultType(reduction, unreducedShape, elementType);
  if (gradOutput.type != expected)
    return emitOptionalError(loc, "'", opName, "' operand '", gradOutput.name, "' of type ",
                             gradOutput.type, " must be ", expected,
                             ", the type of the loss it differentiates (reduction = ",
                             stringifyReduction(reduction), ")");
  return success();
}

/// The shared checks of jit.layer_norm and jit.layer_norm_grad: the axis, and
/// the weight (and bias) shaped like the normalised dimensions.
LogicalResult verifyNormalizedOperands(std::optional<Location> loc, StringRef opName,
                                       RankedTensorType input, int64_t axis,
                                       ArrayRef<NamedOperand> affine) {
  if (axis < 0 || axis >= input.getRank())
    return emitOptionalError(loc, "'", opName, "' axis ", axis,
                             " is out of range for operand 'input' of type ", input,
                             " (expected 0 <= axis < ", input.getRank(), ")");
  ArrayRef<int64_t> normalized = input.getShape().drop_front(axis);
  RankedTensorType expected = tensorOf(normalized, input.getElementType());
  for (const NamedOperand &operand : affine) {
    if (!operand.type)
      continue;
    if (operand.type != expected)
      return emitOptionalError(loc, "'", opName, "' operand '", operand.name, "' of type ", operand.type,
                               " must be ", expected,
                               ": the normalised dimensions of 'input' in its element type");
  }
  return success();
}

LogicalResult verifyStatistics(std::optional<Location> loc, StringRef opName,
                               RankedTensorType input, int64_t axis,
                               ArrayRef<NamedOperand> statistics) {
  RankedTensorType expected = tensorOf(input.getShape().take_front(axis),
                                       statisticsElementType(input.getElementType()));
  for (const NamedOperand &operand : statistics)
    if (operand.type != expected)
      return emitOptionalError(loc, "'", opName, "' operand '", operand.name, "' of type ", operand.type,
                               " must be ", expected,
                               ": one statistic per normalised row, as jit.layer_norm yields it");
  return success();
}

LogicalResult requireNonNegative(Operation *op, StringRef name, double value) {
  if (!(value >= 0.0))
    return op->emitOpError() << name << " must be non-negative, but is " << value;
  return success();
}

/// The gradient of an optimizer update has the parameter's shape but may be
/// in any floating-point precision (the low-precision gradient is read as is).
LogicalResult verifyGradientMatchesParam(std::optional<Location> loc, StringRef opName,
                                         Value param, Value grad) {
  auto paramType = cast<RankedTensorType>(param.getType());
  auto gradType = cast<RankedTensorType>(grad.getType());
  if (paramType.getShape() != gradType.getShape())
    return emitOptionalError(loc, "'", opName, "' operand 'grad' of type ", gradType,
                             " must have the shape of operand 'param' of type ", paramType);
  return success();
}

/// O2's low-precision parameter copy: f16 or bf16, the shape of `param`, and
/// narrower than it (the fp32 master it is rounded from).
LogicalResult verifyParamCopy(std::optional<Location> loc, StringRef opName, Value param,
                              Value copy) {
  auto paramType = cast<RankedTensorType>(param.getType());
  auto copyType = cast<RankedTensorType>(copy.getType());
  Type copyElement = copyType.getElementType();
  if (!copyElement.isF16() && !copyElement.isBF16())
    return emitOptionalError(loc, "'", opName, "' operand 'param_copy' of type ", copyType,
                             " must hold f16 or bf16: it is the low-precision copy of operand "
                             "'param'");
  if (copyType.getShape() != paramType.getShape())
    return emitOptionalError(loc, "'", opName, "' operand 'param_copy' of type ", copyType,
                             " must have the shape of operand 'param' of type ", paramType);
  if (copyElement == paramType.getElementType() ||
      !isExactlyRepresentableIn(copyElement, paramType.getElementType()))
    return emitOptionalError(loc, "'", opName, "' operand 'param_copy' of type ", copyType,
                             " is a low-precision copy, so operand 'param' must be a wider "
                             "master (f32 or f64), not ",
                             paramType);
  return success();
}

/// A missing or extra optional result is reported by the ops' verifiers,
/// which can name the operand it belongs to; only same-length lists are
/// compared here.
//===----------------------------------------------------------------------===//
// Convolution, batch norm and pooling shape rules
//===----------------------------------------------------------------------===//

/// The window attribute `name` has two entries [height, width], each in [`minimum`, kMaxWindowParameter].
LogicalResult verifyWindowPair(std::optional<Location> loc, StringRef opName, StringRef name,
                               ArrayRef<int64_t> values, int64_t minimum) {
  if (values.size() != 2)
    return emitOptionalError(loc, "'", opName, "' attribute '", name,
                             "' must have 2 entries [height, width], got ", values.size());
  for (int64_t value : values)
    if (!ampjit::runtime::windowParameterInRange(value, minimum))
      return emitOptionalError(loc, "'", opName, "' attribute '", name, "' entries must be in [", minimum, ", ",
                               ampjit::runtime::kMaxWindowParameter, "], got [", values[0], ", ", values[1], "]");
  return success();
}

FailureOr<RankedTensorType> requireRank4(std::optional<Location> loc, StringRef opName,
                                         const NamedOperand &operand) {
  FailureOr<RankedTensorType> type = requireStaticTensor(loc, opName, operand);
  if (failed(type))
    return failure();
  if (type->getRank() != 4)
    return emitOptionalError(loc, "'", opName, "' operand '", operand.name, "' of type ", *type,
                             " must have rank 4");
  return type;
}

/// The output of convolving `input` with `weight` (both rank 4, one element
/// type) under the window attributes, or an error naming what does not fit.
FailureOr<RankedTensorType> inferConvOutput(std::optional<Location> loc, StringRef opName,
                                            const NamedOperand &inputOperand,
                                            const NamedOperand &weightOperand, ArrayRef<int64_t> stride,
                                            ArrayRef<int64_t> padding, ArrayRef<int64_t> dilation,
                                            int64_t groups, ActivationLayout layout) {
  if (failed(verifyWindowPair(loc, opName, "stride", stride, 1)) ||
      failed(verifyWindowPair(loc, opName, "padding", padding, 0)) ||
      failed(verifyWindowPair(loc, opName, "dilation", dilation, 1)))
    return failure();
  if (groups < 1)
    return emitOptionalError(loc, "'", opName, "' groups = ", groups, " must be at least 1");
  FailureOr<RankedTensorType> input = requireRank4(loc, opName, inputOperand);
  if (failed(input))
    return failure();
  FailureOr<RankedTensorType> weight = requireRank4(loc, opName, weightOperand);
  if (failed(weight))
    return failure();
  if (input->getElementType() != weight->getElementType())
    return emitOptionalError(loc, "'", opName, "' operand '", weightOperand.name, "' of type ", *weight,
                             " must have the element type of operand '", inputOperand.name, "', ", *input);
  bool nhwc = layout == ActivationLayout::nhwc;
  ampjit::runtime::ActivationDims a = ampjit::runtime::activationDims(nhwc);
  ampjit::runtime::FilterDims f = ampjit::runtime::filterDims(nhwc);
  int64_t channels = input->getDimSize(a.channel), outChannels = weight->getDimSize(f.out);
  if (channels % groups != 0 || outChannels % groups != 0)
    return emitOptionalError(loc, "'", opName, "' groups = ", groups, " must divide the input channels (",
                             channels, ") and the output channels (", outChannels, ")");
  if (weight->getDimSize(f.in) != channels / groups)
    return emitOptionalError(loc, "'", opName, "' operand '", weightOperand.name, "' of type ", *weight,
                             " must have ", channels / groups, " input channels per group in layout ",
                             stringifyActivationLayout(layout), " (", inputOperand.name, " ", *input, " has ",
                             channels, " channels in ", groups, " groups)");
  SmallVector<int64_t, 4> shape(4);
  shape[a.batch] = input->getDimSize(a.batch);
  shape[a.channel] = outChannels;
  for (int d = 0; d < 2; ++d) {
    int inDim = d == 0 ? a.height : a.width, kernelDim = d == 0 ? f.height : f.width;
    int64_t size = ampjit::runtime::windowOutputSize(input->getDimSize(inDim), weight->getDimSize(kernelDim),
                                                     stride[d], padding[d], dilation[d]);
    if (size < 1)
      return emitOptionalError(loc, "'", opName, "' the ", d == 0 ? "height" : "width", " ",
                               input->getDimSize(inDim), " of operand '", inputOperand.name,
                               "' is smaller than the dilated kernel (", weight->getDimSize(kernelDim),
                               ", dilation ", dilation[d], ", padding ", padding[d], ")");
    shape[inDim] = size;
  }
  return tensorOf(shape, input->getElementType());
}

/// The pooled shape of `input` under the window attributes.
FailureOr<RankedTensorType> inferPoolOutput(std::optional<Location> loc, StringRef opName,
                                            const NamedOperand &inputOperand, ArrayRef<int64_t> kernel,
                                            ArrayRef<int64_t> stride, ArrayRef<int64_t> padding, bool ceilMode,
                                            ActivationLayout layout) {
  if (failed(verifyWindowPair(loc, opName, "kernel_size", kernel, 1)) ||
      failed(verifyWindowPair(loc, opName, "stride", stride, 1)) ||
      failed(verifyWindowPair(loc, opName, "padding", padding, 0)))
    return failure();
  for (int d = 0; d < 2; ++d)
    if (2 * padding[d] > kernel[d])
      return emitOptionalError(loc, "'", opName, "' padding [", padding[0], ", ", padding[1],
                               "] must be at most half the kernel [", kernel[0], ", ", kernel[1], "]");
  FailureOr<RankedTensorType> input = requireRank4(loc, opName, inputOperand);
  if (failed(input))
    return failure();
  ampjit::runtime::ActivationDims a = ampjit::runtime::activationDims(layout == ActivationLayout::nhwc);
  SmallVector<int64_t, 4> shape(input->getShape());
  for (int d = 0; d < 2; ++d) {
    int dim = d == 0 ? a.height : a.width;
    int64_t size = ampjit::runtime::windowOutputSize(input->getDimSize(dim), kernel[d], stride[d], padding[d],
                                                     1, ceilMode);
    if (size < 1)
      return emitOptionalError(loc, "'", opName, "' the ", d == 0 ? "height" : "width", " ",
                               input->getDimSize(dim), " of operand '", inputOperand.name,
                               "' is smaller than the kernel [", kernel[0], ", ", kernel[1], "]");
    shape[dim] = size;
  }
  return tensorOf(shape, input->getElementType());
}

/// Batch norm's data operand and its per-channel operands: [C] of dimension
/// `axis`, in the statistics type. Returns that per-channel type.
FailureOr<RankedTensorType> verifyBatchNormOperands(std::optional<Location> loc, StringRef opName,
                                                    const NamedOperand &inputOperand, int64_t axis,
                                                    ArrayRef<NamedOperand> perChannel) {
  FailureOr<RankedTensorType> input = requireStaticTensor(loc, opName, inputOperand);
  if (failed(input))
    return failure();
  if (input->getRank() < 2)
    return emitOptionalError(loc, "'", opName, "' operand '", inputOperand.name, "' of type ", *input,
                             " must have rank >= 2 (a batch and channels)");
  if (axis < 0 || axis >= input->getRank())
    return emitOptionalError(loc, "'", opName, "' axis ", axis, " is out of range for operand '",
                             inputOperand.name, "' of type ", *input);
  RankedTensorType channel =
      tensorOf({input->getDimSize(axis)}, statisticsElementType(input->getElementType()));
  for (const NamedOperand &operand : perChannel)
    if (operand.type && operand.type != channel)
      return emitOptionalError(loc, "'", opName, "' operand '", operand.name, "' of type ", operand.type,
                               " must be ", channel,
                               ": one value per channel in the statistics type (f32, or f64 for f64 input)");
  return channel;
}

LogicalResult verifyBatchNormAttributes(Operation *op, double eps, std::optional<double> momentum) {
  if (!(eps >= 0.0) || std::isinf(eps))
    return op->emitOpError() << "eps = " << eps << " must be finite and non-negative";
  if (momentum && !(*momentum >= 0.0 && *momentum <= 1.0))
    return op->emitOpError() << "momentum = " << *momentum << " must be in [0, 1]";
  return success();
}

/// A gradient op's operand must be what the forward op would have made.
LogicalResult requireForwardResult(std::optional<Location> loc, StringRef opName,
                                   const NamedOperand &operand, RankedTensorType expected, StringRef what) {
  if (operand.type != expected)
    return emitOptionalError(loc, "'", opName, "' operand '", operand.name, "' of type ", operand.type,
                             " must be ", expected, ", the type the forward op yields for ", what);
  return success();
}

bool sameTypesOrDifferentCounts(TypeRange inferred, TypeRange actual) {
  return inferred.size() != actual.size() || llvm::equal(inferred, actual);
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

#define AMPJIT_BROADCAST_BINARY_INFERENCE(OP)                                                      \
  LogicalResult OP::inferReturnTypes(MLIRContext *, std::optional<Location> loc,                  \
                                     Adaptor adaptor, SmallVectorImpl<Type> &inferred) {           \
    return inferBroadcastBinary<OP>(loc, adaptor, inferred);                                       \
  }
AMPJIT_BROADCAST_BINARY_INFERENCE(AddOp)
AMPJIT_BROADCAST_BINARY_INFERENCE(SubOp)
AMPJIT_BROADCAST_BINARY_INFERENCE(MulOp)
AMPJIT_BROADCAST_BINARY_INFERENCE(DivOp)
#undef AMPJIT_BROADCAST_BINARY_INFERENCE

LogicalResult CompareOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  NamedOperand operands[] = {named("lhs", adaptor.getLhs()), named("rhs", adaptor.getRhs())};
  FailureOr<SmallVector<int64_t>> shape = broadcastShapes(loc, getOperationName(), operands);
  if (failed(shape) || failed(requireSameElementType(loc, getOperationName(), operands)))
    return failure();
  inferred.push_back(tensorOf(*shape, IntegerType::get(context, 1)));
  return success();
}

LogicalResult SelectOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  NamedOperand operands[] = {named("condition", adaptor.getCondition()),
                             named("true_value", adaptor.getTrueValue()),
                             named("false_value", adaptor.getFalseValue())};
  FailureOr<SmallVector<int64_t>> shape = broadcastShapes(loc, getOperationName(), operands);
  if (failed(shape) ||
      failed(requireSameElementType(loc, getOperationName(), ArrayRef(operands).drop_front())))
    return failure();
  inferred.push_back(tensorOf(*shape, getElementTypeOrSelf(operands[1].type)));
  return success();
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  StringRef opName = getOperationName();
  NamedOperand lhsOperand = named("lhs", adaptor.getLhs());
  NamedOperand rhsOperand = named("rhs", adaptor.getRhs());
  FailureOr<RankedTensorType> lhs = requireStaticTensor(loc, opName, lhsOperand);
  FailureOr<RankedTensorType> rhs = requireStaticTensor(loc, opName, rhsOperand);
  if (failed(lhs) || failed(rhs) ||
      failed(requireSameElementType(loc, opName, {lhsOperand, rhsOperand})))
    return failure();
  for (auto [operand, type] : {std::pair{lhsOperand, *lhs}, std::pair{rhsOperand, *rhs}})
    if (type.getRank() < 2)
      return emitOptionalError(loc, "'", opName, "' operand '", operand.name, "' of type ", type,
                               " must have rank >= 2 (reshape a vector to a matrix first)");

  auto matrixDims = [](RankedTensorType type, bool transposed) {
    int64_t rows = type.getDimSize(type.getRank() - 2);
    int64_t cols = type.getDimSize(type.getRank() - 1);
    return transposed ? std::pair{cols, rows} : std::pair{rows, cols};
  };
  auto [m, lhsK] = matrixDims(*lhs, adaptor.getTransposeLhs());
  auto [rhsK, n] = matrixDims(*rhs, adaptor.getTransposeRhs());
  if (lhsK != rhsK)
    return emitOptionalError(
        loc, "'", opName, "' contraction dimensions differ: operand 'lhs' of type ", *lhs,
        adaptor.getTransposeLhs() ? " (transposed)" : "", " has ", lhsK,
        " columns but operand 'rhs' of type ", *rhs,
        adaptor.getTransposeRhs() ? " (transposed)" : "", " has ", rhsK, " rows");

  // Batch dimensions broadcast like any elementwise operands.
  Type element = lhs->getElementType();
  NamedOperand batches[] = {
      {"lhs", tensorOf(lhs->getShape().drop_back(2), element)},
      {"rhs", tensorOf(rhs->getShape().drop_back(2), element)}};
  FailureOr<SmallVector<int64_t>> shape = broadcastShapes(loc, opName, batches);
  if (failed(shape))
    return failure();
  shape->push_back(m);
  shape->push_back(n);
  inferred.push_back(tensorOf(*shape, element));
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

#define AMPJIT_REDUCTION_INFERENCE(OP)                                                             \
  LogicalResult OP::inferReturnTypes(MLIRContext *, std::optional<Location> loc,                  \
                                     Adaptor adaptor, SmallVectorImpl<Type> &inferred) {           \
    return inferReduction<OP>(loc, adaptor, inferred);                                             \
  }
AMPJIT_REDUCTION_INFERENCE(SumOp)
AMPJIT_REDUCTION_INFERENCE(MeanOp)
AMPJIT_REDUCTION_INFERENCE(MaxOp)
#undef AMPJIT_REDUCTION_INFERENCE

/// A sum, mean or maximum of one element is that element (NaN included):
/// over axes that all have size 1, kept, a reduction is its input. A global
/// average pool of 1x1 feature maps (ResNet-50 on 32x32 images) is then no
/// step, nor are the casts AMP would put around its f32 mean.
template <typename Reduction>
OpFoldResult foldReductionOfSizeOneAxes(Reduction op) {
  auto input = cast<RankedTensorType>(op.getInput().getType());
  if (input != op.getType())
    return {};
  for (int64_t axis : op.getAxes())
    if (axis < 0 || axis >= input.getRank() || input.getDimSize(axis) != 1)
      return {};
  return op.getInput();
}
OpFoldResult SumOp::fold(FoldAdaptor) { return foldReductionOfSizeOneAxes(*this); }
OpFoldResult MeanOp::fold(FoldAdaptor) { return foldReductionOfSizeOneAxes(*this); }
OpFoldResult MaxOp::fold(FoldAdaptor) { return foldReductionOfSizeOneAxes(*this); }

OpFoldResult MulOp::fold(FoldAdaptor adaptor) {
  // Commutative: the canonicalizer has moved a constant operand to the right.
  auto one = dyn_cast_or_null<SplatElementsAttr>(adaptor.getRhs());
  if (!one || getLhs().getType() != getType() || !isa<FloatType>(one.getElementType()) ||
      !one.getSplatValue<APFloat>().isExactlyValue(1.0))
    return {};
  return getLhs();
}

//===----------------------------------------------------------------------===//
// Shape and data movement
//===----------------------------------------------------------------------===//

LogicalResult BroadcastToOp::verify() {
  auto input = getInput().getType();
  auto result = getResult().getType();
  if (input.getElementType() != result.getElementType())
    return emitOpError() << "result " << result << " must have the element type of operand 'input', "
                         << input;
  if (!isBroadcastableTo(input.getShape(), result.getShape()))
    return emitOpError() << "operand 'input' of type " << input << " cannot be broadcast to " << result
                         << ": each input dimension, aligned from the right, must be 1 or equal";
  return success();
}

OpFoldResult BroadcastToOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto splat = dyn_cast_or_null<SplatElementsAttr>(adaptor.getInput()))
    return SplatElementsAttr::get(getType(), splat.getSplatValue<Attribute>());
  return {};
}

LogicalResult ReshapeOp::verify() {
  auto input = getInput().getType();
  auto result = getResult().getType();
  if (input.getElementType() != result.getElementType())
    return emitOpError() << "result " << result << " must have the element type of operand 'input', "
                         << input;
  if (input.getNumElements() != result.getNumElements())
    return emitOpError() << "operand 'input' of type " << input << " has " << input.getNumElements()
                         << " elements but the result of type " << result << " has "
                         << result.getNumElements();
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput()))
    return dense.reshape(getType());
  return {};
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  FailureOr<RankedTensorType> input =
      requireStaticTensor(loc, getOperationName(), named("input", adaptor.getInput()));
  if (failed(input))
    return failure();
  ArrayRef<int64_t> perm = adaptor.getPerm();
  int64_t rank = input->getRank();
  if (static_cast<int64_t>(perm.size()) != rank)
    return emitOptionalError(loc, "'", getOperationName(), "' perm has ", perm.size(),
                             " entries but operand 'input' of type ", *input, " has rank ", rank);
  llvm::SmallSet<int64_t, 8> seen;
  SmallVector<int64_t> shape;
  for (int64_t dim : perm) {
    if (dim < 0 || dim >= rank || !seen.insert(dim).second)
      return emitOptionalError(loc, "'", getOperationName(), "' perm must be a permutation of [0, ",
                               rank, "), but contains ", dim,
                               dim < 0 || dim >= rank ? " (out of range)" : " twice");
    shape.push_back(input->getDimSize(dim));
  }
  inferred.push_back(tensorOf(shape, input->getElementType()));
  return success();
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  for (auto [index, dim] : llvm::enumerate(getPerm()))
    if (static_cast<int64_t>(index) != dim)
      return {};
  return getInput();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult ConvertOp::verify() {
  auto input = getInput().getType();
  auto result = getResult().getType();
  if (input.getShape() != result.getShape())
    return emitOpError() << "result " << result << " must have the shape of operand 'input', "
                         << input << "; use jit.reshape to change shapes";
  return success();
}

OpFoldResult ConvertOp::fold(FoldAdaptor) {
  // An identity conversion of floats is the user's statement of a
  // precision (a traced step records every value in its fp32 trace type,
  // where eagerly the input may have been f16): the AMP pass must see it,
  // and the AMP pipeline removes it once it has decided.
  if (getInput().getType() == getType() && !isa<FloatType>(getElementTypeOrSelf(getType())))
    return getInput();
  return {};
}

LogicalResult TypeAsOp::verify() {
  auto input = getInput().getType();
  auto result = getResult().getType();
  if (input.getShape() != result.getShape())
    return emitOpError() << "result " << result << " must have the shape of operand 'input', " << input;
  if (result.getElementType() != getReference().getType().getElementType())
    return emitOpError() << "result " << result << " must have the element type of operand 'reference', "
                         << getReference().getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Normalisation, activations with axes, dropout
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::verify() {
  return requireAxisInRange(getLoc(), getOperationName(), getAxis(), named("input", getInput()));
}
LogicalResult LogSoftmaxOp::verify() {
  return requireAxisInRange(getLoc(), getOperationName(), getAxis(), named("input", getInput()));
}
LogicalResult SoftmaxGradOp::verify() {
  return requireAxisInRange(getLoc(), getOperationName(), getAxis(),
                            named("grad_output", getGradOutput()));
}
LogicalResult LogSoftmaxGradOp::verify() {
  return requireAxisInRange(getLoc(), getOperationName(), getAxis(),
                            named("grad_output", getGradOutput()));
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  StringRef opName = getOperationName();
  FailureOr<RankedTensorType> input =
      requireStaticTensor(loc, opName, named("input", adaptor.getInput()));
  if (failed(input))
    return failure();
  int64_t axis = adaptor.getAxis();
  if (failed(verifyNormalizedOperands(
          loc, opName, *input, axis,
          {named("weight", adaptor.getWeight()), named("bias", adaptor.getBias())})))
    return failure();
  RankedTensorType statistics = tensorOf(input->getShape().take_front(axis),
                                         statisticsElementType(input->getElementType()));
  inferred.append({*input, statistics, statistics});
  return success();
}

LogicalResult LayerNormOp::verify() {
  // rsqrt(var + eps) needs var + eps > 0: a negative (or NaN) eps turns
  // near-constant rows into NaN.
  double eps = getEps().convertToDouble();
  if (!(eps >= 0.0))
    return emitOpError() << "eps = " << eps << " must be non-negative";
  return success();
}

LogicalResult LayerNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  StringRef opName = getOperationName();
  NamedOperand inputOperand = named("input", adaptor.getInput());
  FailureOr<RankedTensorType> input = requireStaticTensor(loc, opName, inputOperand);
  if (failed(input))
    return failure();
  int64_t axis = adaptor.getAxis();
  if (failed(requireSameType(loc, opName, inputOperand,
                             named("grad_output", adaptor.getGradOutput()))) ||
      failed(verifyNormalizedOperands(loc, opName, *input, axis,
                                      {named("weight", adaptor.getWeight())})) ||
      failed(verifyStatistics(loc, opName, *input, axis,
                              {named("mean", adaptor.getMean()), named("rstd", adaptor.getRstd())})))
    return failure();
  RankedTensorType affine = tensorOf(input->getShape().drop_front(axis), input->getElementType());
  inferred.append({*input, affine, affine});
  return success();
}

LogicalResult DropoutOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  StringRef opName = getOperationName();
  FailureOr<RankedTensorType> input =
      requireStaticTensor(loc, opName, named("input", adaptor.getInput()));
  FailureOr<RankedTensorType> rng =
      requireStaticTensor(loc, opName, named("rng_state", adaptor.getRngState()));
  if (failed(input) || failed(rng))
    return failure();
  double p = adaptor.getP().convertToDouble();
  if (!(p >= 0.0 && p < 1.0))
    return emitOptionalError(loc, "'", opName, "' probability p = ", p,
                             " must be in [0, 1)");
  if (rng->getShape() != ArrayRef<int64_t>{2})
    return emitOptionalError(loc, "'", opName, "' operand 'rng_state' of type ", *rng,
                             " must be tensor<2xi64>: [seed, offset]");
  inferred.append({*input, tensorOf(input->getShape(), IntegerType::get(context, 1)), *rng});
  return success();
}

//===----------------------------------------------------------------------===//
// Losses and their gradients
//===----------------------------------------------------------------------===//

LogicalResult MseLossOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  NamedOperand input = named("input", adaptor.getInput());
  FailureOr<RankedTensorType> inputType = requireStaticTensor(loc, getOperationName(), input);
  if (failed(inputType) ||
      failed(requireSameType(loc, getOperationName(), input, named("target", adaptor.getTarget()))))
    return failure();
  inferred.push_back(
      lossResultType(adaptor.getReduction(), inputType->getShape(), inputType->getElementType()));
  return success();
}

LogicalResult MseLossGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                              Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  StringRef opName = getOperationName();
  NamedOperand input = named("input", adaptor.getInput());
  FailureOr<RankedTensorType> inputType = requireStaticTensor(loc, opName, input);
  if (failed(inputType) ||
      failed(requireSameType(loc, opName, input, named("target", adaptor.getTarget()))) ||
      failed(verifyLossGradOutput(loc, opName, named("grad_output", adaptor.getGradOutput()),
                                  adaptor.getReduction(), inputType->getShape(),
                                  inputType->getElementType())))
    return failure();
  inferred.push_back(*inputType);
  return success();
}

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                               Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  FailureOr<int64_t> rows = verifyClassificationOperands(
      loc, getOperationName(), named("logits", adaptor.getLogits()),
      named("labels", adaptor.getLabels()));
  if (failed(rows))
    return failure();
  inferred.push_back(lossResultType(adaptor.getReduction(), {*rows},
                                    getElementTypeOrSelf(adaptor.getLogits().getType())));
  return success();
}

static LogicalResult verifyLabelSmoothing(Operation *op, double labelSmoothing) {
  if (!(labelSmoothing >= 0.0 && labelSmoothing <= 1.0))
    return op->emitOpError() << "label_smoothing = " << labelSmoothing << " must be in [0, 1]";
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  return verifyLabelSmoothing(*this, getLabelSmoothing().convertToDouble());
}

LogicalResult CrossEntropyGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                   Adaptor adaptor,
                                                   SmallVectorImpl<Type> &inferred) {
  NamedOperand logits = named("logits", adaptor.getLogits());
  FailureOr<int64_t> rows = verifyClassificationOperands(loc, getOperationName(), logits,
                                                         named("labels", adaptor.getLabels()));
  if (failed(rows) ||
      failed(verifyLossGradOutput(loc, getOperationName(),
                                  named("grad_output", adaptor.getGradOutput()),
                                  adaptor.getReduction(), {*rows}, getElementTypeOrSelf(logits.type))))
    return failure();
  inferred.push_back(logits.type);
  return success();
}

LogicalResult CrossEntropyGradOp::verify() {
  return verifyLabelSmoothing(*this, getLabelSmoothing().convertToDouble());
}

LogicalResult NllLossOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  FailureOr<int64_t> rows = verifyClassificationOperands(
      loc, getOperationName(), named("log_probs", adaptor.getLogProbs()),
      named("labels", adaptor.getLabels()));
  if (failed(rows))
    return failure();
  inferred.push_back(lossResultType(adaptor.getReduction(), {*rows},
                                    getElementTypeOrSelf(adaptor.getLogProbs().getType())));
  return success();
}

LogicalResult NllLossGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                              Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  NamedOperand logProbs = named("log_probs", adaptor.getLogProbs());
  FailureOr<int64_t> rows = verifyClassificationOperands(loc, getOperationName(), logProbs,
                                                         named("labels", adaptor.getLabels()));
  if (failed(rows) ||
      failed(verifyLossGradOutput(loc, getOperationName(),
                                  named("grad_output", adaptor.getGradOutput()),
                                  adaptor.getReduction(), {*rows},
                                  getElementTypeOrSelf(logProbs.type))))
    return failure();
  inferred.push_back(logProbs.type);
  return success();
}

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

/// A padding_idx must name a row of the [V, D] table (frontends normalise
/// PyTorch's negative ones).
static LogicalResult verifyPaddingIndex(std::optional<Location> loc, StringRef opName,
                                        std::optional<int64_t> paddingIdx, int64_t rows) {
  if (paddingIdx && (*paddingIdx < 0 || *paddingIdx >= rows))
    return emitOptionalError(loc, "'", opName, "' padding_idx = ", *paddingIdx,
                             " is not a row of the table (expected 0 <= padding_idx < ", rows, ")");
  return success();
}

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  StringRef opName = getOperationName();
  NamedOperand weight = named("weight", adaptor.getWeight());
  FailureOr<RankedTensorType> table = requireStaticTensor(loc, opName, weight);
  FailureOr<RankedTensorType> indices = requireStaticTensor(loc, opName, named("indices", adaptor.getIndices()));
  if (failed(table) || failed(indices))
    return failure();
  if (table->getRank() != 2)
    return emitOptionalError(loc, "'", opName, "' operand 'weight' of type ", weight.type,
                             " must have rank 2: [num_embeddings, embedding_dim]");
  if (failed(verifyPaddingIndex(loc, opName, adaptor.getPaddingIdx(), table->getDimSize(0))))
    return failure();
  SmallVector<int64_t> shape(indices->getShape());
  shape.push_back(table->getDimSize(1));
  inferred.push_back(tensorOf(shape, table->getElementType()));
  return success();
}

LogicalResult EmbeddingGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                SmallVectorImpl<Type> &inferred) {
  StringRef opName = getOperationName();
  NamedOperand gradOutput = named("grad_output", adaptor.getGradOutput());
  FailureOr<RankedTensorType> grad = requireStaticTensor(loc, opName, gradOutput);
  FailureOr<RankedTensorType> indices = requireStaticTensor(loc, opName, named("indices", adaptor.getIndices()));
  if (failed(grad) || failed(indices))
    return failure();
  ArrayRef<int64_t> indexShape = indices->getShape();
  if (grad->getRank() != indices->getRank() + 1 || grad->getShape().drop_back() != indexShape)
    return emitOptionalError(loc, "'", opName, "' operand 'grad_output' of type ", gradOutput.type,
                             " must have the shape of operand 'indices' (", adaptor.getIndices().getType(),
                             ") followed by embedding_dim");
  int64_t rows = adaptor.getNumWeights();
  if (rows <= 0)
    return emitOptionalError(loc, "'", opName, "' num_weights = ", rows, " must be positive");
  if (failed(verifyPaddingIndex(loc, opName, adaptor.getPaddingIdx(), rows)))
    return failure();
  inferred.push_back(tensorOf({rows, grad->getShape().back()}, grad->getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

LogicalResult SgdUpdateOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  StringRef opName = getOperationName();
  NamedOperand param = named("param", adaptor.getParam());
  if (failed(requireStaticTensor(loc, opName, param)) ||
      failed(requireStaticTensor(loc, opName, named("grad", adaptor.getGrad()))) ||
      failed(verifyGradientMatchesParam(loc, opName, adaptor.getParam(), adaptor.getGrad())))
    return failure();
  inferred.push_back(param.type);
  if (Value buffer = adaptor.getMomentumBuffer()) {
    if (failed(requireSameType(loc, opName, param, named("momentum_buffer", buffer))))
      return failure();
    inferred.push_back(buffer.getType());
  }
  if (Value copy = adaptor.getParamCopy()) {
    if (failed(requireStaticTensor(loc, opName, named("param_copy", copy))) ||
        failed(verifyParamCopy(loc, opName, adaptor.getParam(), copy)))
      return failure();
    inferred.push_back(copy.getType());
  }
  return success();
}

bool SgdUpdateOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return sameTypesOrDifferentCounts(inferred, actual);
}

TypedValue<RankedTensorType> SgdUpdateOp::getNewMomentumBuffer() {
  ResultRange optionalState = getNewOptionalState();
  if (!getMomentumBuffer() || optionalState.empty())
    return {};
  return cast<TypedValue<RankedTensorType>>(optionalState[0]);
}

TypedValue<RankedTensorType> SgdUpdateOp::getNewParamCopy() {
  ResultRange optionalState = getNewOptionalState();
  unsigned position = getMomentumBuffer() ? 1 : 0;
  if (!getParamCopy() || optionalState.size() <= position)
    return {};
  return cast<TypedValue<RankedTensorType>>(optionalState[position]);
}

void SgdUpdateOp::getAsmResultNames(OpAsmSetValueNameFn setNameFn) {
  setNameFn(getNewParam(), "new_param");
  if (Value buffer = getNewMomentumBuffer())
    setNameFn(buffer, "new_momentum_buffer");
  if (Value copy = getNewParamCopy())
    setNameFn(copy, "new_param_copy");
}

LogicalResult SgdUpdateOp::verify() {
  bool hasCopy = static_cast<bool>(getParamCopy());
  unsigned expectedResults = 1 + (getMomentumBuffer() ? 1 : 0) + (hasCopy ? 1 : 0);
  if (getNumResults() != expectedResults) {
    InFlightDiagnostic diag = emitOpError()
                              << "has " << getNumResults() << " results but needs "
                              << expectedResults << ": 'new_param'";
    if (getMomentumBuffer())
      diag << ", 'new_momentum_buffer' (for operand 'momentum_buffer')";
    if (hasCopy)
      diag << ", 'new_param_copy' (for operand 'param_copy')";
    diag << "; an optional state operand and its new value come together";
    return diag;
  }
  double momentum = getMomentum().convertToDouble();
  double dampening = getDampening().convertToDouble();
  if (failed(requireNonNegative(*this, "momentum", momentum)) ||
      failed(requireNonNegative(*this, "weight_decay", getWeightDecay().convertToDouble())))
    return failure();
  bool hasBuffer = static_cast<bool>(getMomentumBuffer());
  if (momentum != 0.0 && !hasBuffer)
    return emitOpError() << "momentum = " << momentum
                         << " needs operand 'momentum_buffer' to hold the velocity";
  if (momentum == 0.0 && hasBuffer)
    return emitOpError() << "operand 'momentum_buffer' is given but momentum = 0 never uses it";
  if (getNesterov() && (momentum <= 0.0 || dampening != 0.0))
    return emitOpError() << "nesterov needs momentum > 0 and dampening = 0 (as in PyTorch), got "
                         << "momentum = " << momentum << ", dampening = " << dampening;
  if (hasBuffer && dampening != 0.0 && !getStep())
    return emitOpError() << "dampening = " << dampening
                         << " needs operand 'step': PyTorch starts the buffer as the undampened "
                            "gradient on the first step";
  if (getStep() && !hasBuffer)
    return emitOpError() << "operand 'step' is only used to start a momentum buffer";
  return success();
}

LogicalResult AdamUpdateOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  StringRef opName = getOperationName();
  NamedOperand param = named("param", adaptor.getParam());
  if (failed(requireStaticTensor(loc, opName, param)) ||
      failed(requireStaticTensor(loc, opName, named("grad", adaptor.getGrad()))) ||
      failed(verifyGradientMatchesParam(loc, opName, adaptor.getParam(), adaptor.getGrad())) ||
      failed(requireSameType(loc, opName, param, named("exp_avg", adaptor.getExpAvg()))) ||
      failed(requireSameType(loc, opName, param, named("exp_avg_sq", adaptor.getExpAvgSq()))))
    return failure();
  inferred.append(3, param.type);
  if (Value maximum = adaptor.getMaxExpAvgSq()) {
    if (failed(requireSameType(loc, opName, param, named("max_exp_avg_sq", maximum))))
      return failure();
    inferred.push_back(maximum.getType());
  }
  if (Value copy = adaptor.getParamCopy()) {
    if (failed(requireStaticTensor(loc, opName, named("param_copy", copy))) ||
        failed(verifyParamCopy(loc, opName, adaptor.getParam(), copy)))
      return failure();
    inferred.push_back(copy.getType());
  }
  return success();
}

bool AdamUpdateOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return sameTypesOrDifferentCounts(inferred, actual);
}

TypedValue<RankedTensorType> AdamUpdateOp::getNewMaxExpAvgSq() {
  ResultRange optionalState = getNewOptionalState();
  if (!getMaxExpAvgSq() || optionalState.empty())
    return {};
  return cast<TypedValue<RankedTensorType>>(optionalState[0]);
}

TypedValue<RankedTensorType> AdamUpdateOp::getNewParamCopy() {
  ResultRange optionalState = getNewOptionalState();
  unsigned position = getMaxExpAvgSq() ? 1 : 0;
  if (!getParamCopy() || optionalState.size() <= position)
    return {};
  return cast<TypedValue<RankedTensorType>>(optionalState[position]);
}

void AdamUpdateOp::getAsmResultNames(OpAsmSetValueNameFn setNameFn) {
  setNameFn(getNewParam(), "new_param");
  setNameFn(getNewExpAvg(), "new_exp_avg");
  setNameFn(getNewExpAvgSq(), "new_exp_avg_sq");
  if (Value maximum = getNewMaxExpAvgSq())
    setNameFn(maximum, "new_max_exp_avg_sq");
  if (Value copy = getNewParamCopy())
    setNameFn(copy, "new_param_copy");
}

LogicalResult AdamUpdateOp::verify() {
  unsigned expectedResults = 3 + (getMaxExpAvgSq() ? 1 : 0) + (getParamCopy() ? 1 : 0);
  if (getNumResults() != expectedResults) {
    InFlightDiagnostic diag = emitOpError()
                              << "has " << getNumResults() << " results but needs " << expectedResults
                              << ": 'new_param', 'new_exp_avg', 'new_exp_avg_sq'";
    if (getMaxExpAvgSq())
      diag << ", 'new_max_exp_avg_sq' (for operand 'max_exp_avg_sq')";
    if (getParamCopy())
      diag << ", 'new_param_copy' (for operand 'param_copy')";
    diag << "; an optional state operand and its new value come together";
    return diag;
  }
  for (auto [name, beta] : {std::pair{"beta1", getBeta1().convertToDouble()},
                            std::pair{"beta2", getBeta2().convertToDouble()}})
    if (!(beta >= 0.0 && beta < 1.0))
      return emitOpError() << name << " = " << beta << " must be in [0, 1)";
  if (failed(requireNonNegative(*this, "eps", getEps().convertToDouble())) ||
      failed(requireNonNegative(*this, "weight_decay", getWeightDecay().convertToDouble())))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Convolutional networks
//===----------------------------------------------------------------------===//

LogicalResult Conv2dOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  StringRef opName = getOperationName();
  FailureOr<RankedTensorType> output =
      inferConvOutput(loc, opName, named("input", adaptor.getInput()), named("weight", adaptor.getWeight()),
                      adaptor.getStride(), adaptor.getPadding(), adaptor.getDilation(), adaptor.getGroups(),
                      adaptor.getLayout());
  if (failed(output))
    return failure();
  if (Value bias = adaptor.getBias()) {
    bool nhwc = adaptor.getLayout() == ActivationLayout::nhwc;
    int64_t outChannels = output->getDimSize(ampjit::runtime::activationDims(nhwc).channel);
    RankedTensorType expected = tensorOf({outChannels}, output->getElementType());
    if (bias.getType() != expected)
      return emitOptionalError(loc, "'", opName, "' operand 'bias' of type ", bias.getType(), " must be ",
                               expected, ": one bias per output channel");
  }
  inferred.push_back(*output);
  return success();
}

LogicalResult Conv2dGradInputOp::verify() {
  StringRef opName = getOperationName();
  FailureOr<RankedTensorType> output =
      inferConvOutput(getLoc(), opName, {"grad_input (the result)", getGradInput().getType()},
                      named("weight", getWeight()), getStride(), getPadding(), getDilation(), getGroups(),
                      getLayout());
  if (failed(output))
    return failure();
  return requireForwardResult(getLoc(), opName, named("grad_output", getGradOutput()), *output,
                              "an input of the result's type");
}

LogicalResult Conv2dGradWeightOp::verify() {
  StringRef opName = getOperationName();
  FailureOr<RankedTensorType> output =
      inferConvOutput(getLoc(), opName, named("input", getInput()),
                      {"grad_weight (the result)", getGradWeight().getType()}, getStride(), getPadding(),
                      getDilation(), getGroups(), getLayout());
  if (failed(output))
    return failure();
  return requireForwardResult(getLoc(), opName, named("grad_output", getGradOutput()), *output,
                              "a filter of the result's type");
}

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  FailureOr<RankedTensorType> channel = verifyBatchNormOperands(
      loc, getOperationName(), named("input", adaptor.getInput()), adaptor.getAxis(),
      {named("weight", adaptor.getWeight()), named("bias", adaptor.getBias()),
       named("running_mean", adaptor.getRunningMean()), named("running_var", adaptor.getRunningVar())});
  if (failed(channel))
    return failure();
  inferred.push_back(adaptor.getInput().getType());
  inferred.append(4, *channel);
  return success();
}

LogicalResult BatchNormOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  if (input.getDimSize(getAxis()) == 0)
    return emitOpError() << "input " << input << " has no channels (dimension " << getAxis() << " is 0)";
  if (input.getNumElements() / input.getDimSize(getAxis()) < 2)
    return emitOpError() << "input " << input
                         << " has one value per channel: training statistics need more than one";
  return verifyBatchNormAttributes(*this, getEps().convertToDouble(), getMomentum().convertToDouble());
}

LogicalResult BatchNormInferenceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                     Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  FailureOr<RankedTensorType> channel = verifyBatchNormOperands(
      loc, getOperationName(), named("input", adaptor.getInput()), adaptor.getAxis(),
      {named("weight", adaptor.getWeight()), named("bias", adaptor.getBias()),
       named("running_mean", adaptor.getRunningMean()), named("running_var", adaptor.getRunningVar())});
  if (failed(channel))
    return failure();
  inferred.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult BatchNormInferenceOp::verify() {
  return verifyBatchNormAttributes(*this, getEps().convertToDouble(), std::nullopt);
}

LogicalResult BatchNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                SmallVectorImpl<Type> &inferred) {
  StringRef opName = getOperationName();
  NamedOperand input = named("input", adaptor.getInput());
  FailureOr<RankedTensorType> channel = verifyBatchNormOperands(
      loc, opName, input, adaptor.getAxis(),
      {named("save_mean", adaptor.getSaveMean()), named("save_invstd", adaptor.getSaveInvstd()),
       named("weight", adaptor.getWeight())});
  if (failed(channel) ||
      failed(requireSameType(loc, opName, input, named("grad_output", adaptor.getGradOutput()))))
    return failure();
  inferred.push_back(input.type);
  inferred.append(2, *channel);
  return success();
}

template <typename PoolOp>
static FailureOr<RankedTensorType> inferPoolOf(std::optional<Location> loc, typename PoolOp::Adaptor adaptor) {
  return inferPoolOutput(loc, PoolOp::getOperationName(), named("input", adaptor.getInput()),
                         adaptor.getKernelSize(), adaptor.getStride(), adaptor.getPadding(),
                         adaptor.getCeilMode(), adaptor.getLayout());
}

template <typename PoolGradOp>
static LogicalResult inferPoolGrad(std::optional<Location> loc, typename PoolGradOp::Adaptor adaptor,
                                   SmallVectorImpl<Type> &inferred) {
  FailureOr<RankedTensorType> pooled = inferPoolOf<PoolGradOp>(loc, adaptor);
  if (failed(pooled) || failed(requireForwardResult(loc, PoolGradOp::getOperationName(),
                                                    named("grad_output", adaptor.getGradOutput()), *pooled,
                                                    "operand 'input'")))
    return failure();
  inferred.push_back(adaptor.getInput().getType());
  return success();
}

template <typename PoolOp>
static LogicalResult inferPool(std::optional<Location> loc, typename PoolOp::Adaptor adaptor,
                               SmallVectorImpl<Type> &inferred) {
  FailureOr<RankedTensorType> pooled = inferPoolOf<PoolOp>(loc, adaptor);
  if (failed(pooled))
    return failure();
  inferred.push_back(*pooled);
  return success();
}

LogicalResult MaxPool2dOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  return inferPool<MaxPool2dOp>(loc, adaptor, inferred);
}

LogicalResult AvgPool2dOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  return inferPool<AvgPool2dOp>(loc, adaptor, inferred);
}

LogicalResult MaxPool2dGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                SmallVectorImpl<Type> &inferred) {
  return inferPoolGrad<MaxPool2dGradOp>(loc, adaptor, inferred);
}

LogicalResult AvgPool2dGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                SmallVectorImpl<Type> &inferred) {
  return inferPoolGrad<AvgPool2dGradOp>(loc, adaptor, inferred);
}


std::optional<llvm::StringRef> ampjit::ir::enumAttributeKeyword(Operation *op, StringRef name) {
  if (!isa<JitDialect>(op->getDialect()))
    return std::nullopt;
  auto value = dyn_cast_or_null<IntegerAttr>(op->getAttr(name));
  if (!value)
    return std::nullopt;
  uint32_t raw = uint32_t(value.getInt());
  std::optional<StringRef> keyword;
  if (name == "approximate") {
    if (std::optional<GeluApproximate> kind = symbolizeGeluApproximate(raw))
      keyword = stringifyGeluApproximate(*kind);
  } else if (name == "reduction") {
    if (std::optional<Reduction> kind = symbolizeReduction(raw))
      keyword = stringifyReduction(*kind);
  } else if (name == "predicate") {
    if (std::optional<ComparePredicate> kind = symbolizeComparePredicate(raw))
      keyword = stringifyComparePredicate(*kind);
  } else if (name == "layout") {
    if (std::optional<ActivationLayout> kind = symbolizeActivationLayout(raw))
      keyword = stringifyActivationLayout(*kind);
  }
  return keyword;
}

Attribute ampjit::ir::enumAttributeFromKeyword(MLIRContext *context, StringRef name, StringRef keyword) {
  if (name == "approximate") {
    if (std::optional<GeluApproximate> kind = symbolizeGeluApproximate(keyword))
      return GeluApproximateAttr::get(context, *kind);
  } else if (name == "reduction") {
    if (std::optional<Reduction> kind = symbolizeReduction(keyword))
      return ReductionAttr::get(context, *kind);
  } else if (name == "predicate") {
    if (std::optional<ComparePredicate> kind = symbolizeComparePredicate(keyword))
      return ComparePredicateAttr::get(context, *kind);
  } else if (name == "layout") {
    if (std::optional<ActivationLayout> kind = symbolizeActivationLayout(keyword))
      return ActivationLayoutAttr::get(context, *kind);
  }
  return {};
}
