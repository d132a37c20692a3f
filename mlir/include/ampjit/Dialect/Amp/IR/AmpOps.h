//===- AmpOps.h - ops of the amp dialect ----------------------------------===//

#ifndef AMPJIT_DIALECT_AMP_IR_AMPOPS_H
#define AMPJIT_DIALECT_AMP_IR_AMPOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "ampjit/Dialect/Amp/IR/AmpDialect.h"

#include <limits> // update_scale's max_scale defaults to infinity

#define GET_OP_CLASSES
#include "ampjit/Dialect/Amp/IR/AmpOps.h.inc"

#endif // AMPJIT_DIALECT_AMP_IR_AMPOPS_H
