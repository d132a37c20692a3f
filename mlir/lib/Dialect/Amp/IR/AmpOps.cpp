//===- AmpOps.cpp - verifiers, type inference and folders of amp ops ------===//

#include "ampjit/Dialect/Amp/IR/AmpOps.h"

#include "ampjit/Dialect/Jit/IR/JitOps.h"
#include "ampjit/Dialect/Jit/IR/ShapeInference.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"

#include "llvm/Support/Endian.h"

#include <cmath>

using namespace mlir;
using namespace ampjit::ir;
using namespace ampjit::ir::amp;

#define GET_OP_CLASSES
#include "ampjit/Dialect/Amp/IR/AmpOps.cpp.inc"

LogicalResult CastOp::verify() {
  auto input = getInput().getType();
  auto result = getResult().getType();
  if (input.getShape() != result.getShape())
    return emitOpError() << "result " << result << " must have the shape of operand 'input', "
                         << input << "; a cast changes only the element type";
  return success();
}

/// The first `count` elements of a float constant as APFloat. Dense attributes
/// iterate as APFloat; a resource blob (`dense_resource`, how large traced
/// weights are stored) is read as the host-endian bit patterns it holds.
static std::optional<SmallVector<APFloat>> readFloats(ElementsAttr attr, FloatType elementType,
                                                      int64_t count) {
  SmallVector<APFloat> values;
  values.reserve(count);
  if (auto range = attr.tryGetValues<APFloat>()) {
    for (const APFloat &value : *range) {
      if (static_cast<int64_t>(values.size()) == count)
        break;
      values.push_back(value);
    }
    return values;
  }
  auto resource = dyn_cast<DenseResourceElementsAttr>(attr);
  AsmResourceBlob *blob = resource ? resource.getRawHandle().getBlob() : nullptr;
  unsigned width = elementType.getWidth();
  if (!blob || (width != 16 && width != 32 && width != 64))
    return std::nullopt;
  ArrayRef<char> data = blob->getData();
  size_t bytes = width / 8;
  if (data.size() < static_cast<size_t>(count) * bytes)
    return std::nullopt;
  for (int64_t i = 0; i < count; ++i) {
    const char *element = data.data() + i * bytes;
    uint64_t bits = width == 16   ? llvm::support::endian::read16(element, llvm::endianness::native)
                    : width == 32 ? llvm::support::endian::read32(element, llvm::endianness::native)
                                  : llvm::support::endian::read64(element, llvm::endianness::native);
    values.push_back(APFloat(elementType.getFloatSemantics(), APInt(width, bits)));
  }
  return values;
}

/// The cast of a constant, rounded to nearest even by APFloat. That is the
/// rounding of the runtime's conversions (overflow to inf, NaN kept quiet with
/// its sign and top payload bits), so folding never changes a step's results.
static Attribute foldConstantCast(ElementsAttr input, RankedTensorType resultType) {
  auto target = dyn_cast<FloatType>(resultType.getElementType());
  auto source = dyn_cast<FloatType>(input.getElementType());
  if (!target || !source)
    return {};
  int64_t count = input.isSplat() ? 1 : input.getNumElements();
  std::optional<SmallVector<APFloat>> values = readFloats(input, source, count);
  if (!values || static_cast<int64_t>(values->size()) != count)
    return {};
  for (APFloat &value : *values) {
    bool losesInfo = false;
    (void)value.convert(target.getFloatSemantics(), APFloat::rmNearestTiesToEven, &losesInfo);
  }
  return DenseElementsAttr::get(resultType, *values);
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto constant = dyn_cast_or_null<ElementsAttr>(adaptor.getInput()))
    if (Attribute folded = foldConstantCast(constant, getType()))
      return folded;
  // x -> wider -> x's type again is exact: the round trip returns x itself.
  if (auto producer = getInput().getDefiningOp<CastOp>()) {
    Value source = producer.getInput();
    if (source.getType() == getType() &&
        isExactlyRepresentableIn(getElementTypeOrSelf(source.getType()),
                                 getElementTypeOrSelf(producer.getType())))
      return source;
  }
  return {};
}

OpFoldResult ScaleLossOp::fold(FoldAdaptor adaptor) {
  // backward() seeds the scaled loss's gradient with 1, and the VJP of
  // scale_loss scales that seed: 1 * scale in f32 is the scale itself.
  auto loss = dyn_cast_or_null<DenseElementsAttr>(adaptor.getLoss());
  if (!loss || !loss.isSplat() || getType() != getScale().getType())
    return {};
  if (!loss.getSplatValue<APFloat>().isExactlyValue(1.0))
    return {};
  return getScale();
}

LogicalResult ScaleLossOp::verify() {
  if (getLoss().getType().getNumElements() != 1)
    return emitOpError() << "operand 'loss' of type " << getLoss().getType()
                         << " must hold a single value; backward starts from a scalar loss";
  return success();
}

LogicalResult AllFiniteOp::verify() {
  if (getGrads().empty())
    return emitOpError() << "needs at least one gradient to check";
  return success();
}

LogicalResult UnscaleAndCheckOp::inferReturnTypes(MLIRContext *context, std::optional<Location>,
                                                  Adaptor adaptor,
                                                  SmallVectorImpl<Type> &inferred) {
  for (Value grad : adaptor.getGrads())
    inferred.push_back(grad.getType());
  inferred.push_back(RankedTensorType::get({}, IntegerType::get(context, 1)));
  return success();
}

LogicalResult UnscaleAndCheckOp::verify() {
  if (getGrads().empty())
    return emitOpError() << "needs at least one gradient to unscale";
  return success();
}

LogicalResult UpdateScaleOp::verify() {
  double growth = getGrowthFactor().convertToDouble();
  double backoff = getBackoffFactor().convertToDouble();
  double minScale = getMinScale().convertToDouble();
  // An infinite growth_factor would silently never grow the scale (growth is
  // skipped when the product is not finite), and an infinite min_scale would
  // make the first backoff set it to inf.
  if (!(growth > 1.0) || std::isinf(growth))
    return emitOpError() << "growth_factor = " << growth << " must be finite and greater than 1";
  if (!(backoff > 0.0 && backoff < 1.0))
    return emitOpError() << "backoff_factor = " << backoff << " must be in (0, 1)";
  // The ODS getters of I64Attr return uint64_t, which would turn a negative
  // interval into a huge valid-looking one; read the signed value.
  int64_t growthInterval = getGrowthIntervalAttr().getInt();
  int64_t backoffInterval = getBackoffIntervalAttr().getInt();
  if (growthInterval < 1)
    return emitOpError() << "growth_interval = " << growthInterval << " must be at least 1";
  if (backoffInterval < 1)
    return emitOpError() << "backoff_interval = " << backoffInterval << " must be at least 1";
  if (!(minScale >= 0.0) || std::isinf(minScale))
    return emitOpError() << "min_scale = " << minScale << " must be finite and non-negative";
  // inf is no cap (the default); NaN would make every growth a no-op.
  double maxScale = getMaxScale().convertToDouble();
  if (!(maxScale > 0.0) || maxScale < minScale)
    return emitOpError() << "max_scale = " << maxScale << " must be positive and at least min_scale (" << minScale
                         << ")";
  return success();
}

// The amp dialect has no constant op: the constants its folders produce are
// jit.constant, like every other tensor constant of a step.
Operation *AmpDialect::materializeConstant(OpBuilder &builder, Attribute value, Type type,
                                           Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ampjit::ir::ConstantOp::create(builder, loc, elements);
}
