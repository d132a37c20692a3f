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
