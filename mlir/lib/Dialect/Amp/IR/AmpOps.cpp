//===- AmpOps.cpp - verifiers, type inference and folders of amp ops ------===//

#include "ampjit/Dialect/Amp/IR/AmpOps.h"

#include "ampjit/Dialect/Jit/IR/ShapeInference.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"

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

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
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
  return success();
}
