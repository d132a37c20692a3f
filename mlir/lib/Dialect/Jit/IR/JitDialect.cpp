//===- JitDialect.cpp - the jit dialect -----------------------------------===//

#include "ampjit/Dialect/Jit/IR/JitDialect.h"

#include "ampjit/Dialect/Jit/IR/JitOps.h"

using namespace mlir;
using namespace ampjit::ir;

#include "ampjit/Dialect/Jit/IR/JitDialect.cpp.inc"

void JitDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ampjit/Dialect/Jit/IR/JitOps.cpp.inc"
      >();
}

Operation *JitDialect::materializeConstant(OpBuilder &builder, Attribute value, Type type,
                                           Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}
