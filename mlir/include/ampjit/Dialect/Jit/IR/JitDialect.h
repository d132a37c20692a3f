//===- JitDialect.h - the jit dialect -------------------------------------===//

#ifndef AMPJIT_DIALECT_JIT_IR_JITDIALECT_H
#define AMPJIT_DIALECT_JIT_IR_JITDIALECT_H

#include "mlir/IR/Dialect.h"

#include "ampjit/Dialect/Jit/IR/JitDialect.h.inc"

#endif // AMPJIT_DIALECT_JIT_IR_JITDIALECT_H
