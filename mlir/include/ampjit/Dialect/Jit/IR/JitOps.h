//===- JitOps.h - ops of the jit dialect ----------------------------------===//

#ifndef AMPJIT_DIALECT_JIT_IR_JITOPS_H
#define AMPJIT_DIALECT_JIT_IR_JITOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "ampjit/Dialect/Jit/IR/JitDialect.h"
#include "ampjit/Dialect/Jit/IR/JitEnums.h.inc"

#define GET_OP_CLASSES
#include "ampjit/Dialect/Jit/IR/JitOps.h.inc"

#endif // AMPJIT_DIALECT_JIT_IR_JITOPS_H
