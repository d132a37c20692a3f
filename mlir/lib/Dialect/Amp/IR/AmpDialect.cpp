//===- AmpDialect.cpp - the amp dialect -----------------------------------===//

#include "ampjit/Dialect/Amp/IR/AmpDialect.h"

#include "ampjit/Dialect/Amp/IR/AmpOps.h"
#include "ampjit/Dialect/Jit/IR/JitDialect.h"

using namespace mlir;
using namespace ampjit::ir::amp;

#include "ampjit/Dialect/Amp/IR/AmpDialect.cpp.inc"

void AmpDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ampjit/Dialect/Amp/IR/AmpOps.cpp.inc"
      >();
}

LogicalResult AmpDialect::verifyOperationAttribute(Operation *op, NamedAttribute attribute) {
  StringRef name = attribute.getName().getValue();
  if (name == kDisabledAttrName) {
    if (!isa<UnitAttr>(attribute.getValue()))
      return op->emitOpError() << "attribute '" << name << "' must be a unit attribute, got "
                               << attribute.getValue();
    if (op->hasAttr(kForceTypeAttrName))
      return op->emitOpError() << "has both '" << kDisabledAttrName << "' and '"
                               << kForceTypeAttrName << "': AMP cannot be off and forced at once";
    return success();
  }
  if (name == kForceTypeAttrName) {
    auto typeAttr = dyn_cast<TypeAttr>(attribute.getValue());
    Type forced = typeAttr ? typeAttr.getValue() : Type();
    if (!forced || !(forced.isF16() || forced.isBF16() || forced.isF32()))
      return op->emitOpError() << "attribute '" << name << "' must be one of f16, bf16, f32, got "
                               << attribute.getValue();
    return success();
  }
  if (name == kOutsideAutocastAttrName) {
    if (!isa<UnitAttr>(attribute.getValue()))
      return op->emitOpError() << "attribute '" << name << "' must be a unit attribute, got "
                               << attribute.getValue();
    for (StringRef region : {kDisabledAttrName, kForceTypeAttrName})
      if (op->hasAttr(region))
        return op->emitOpError() << "has both '" << name << "' and '" << region
                                 << "': the region already decides its precision";
    return success();
  }
  return op->emitOpError() << "unknown amp attribute '" << name << "' (known: '"
                           << kDisabledAttrName << "', '" << kForceTypeAttrName << "', '"
                           << kOutsideAutocastAttrName << "')";
}
