//===- Passes.h - passes over the jit dialect -------------------*- C++ -*-===//

#ifndef AMPJIT_DIALECT_JIT_TRANSFORMS_PASSES_H
#define AMPJIT_DIALECT_JIT_TRANSFORMS_PASSES_H

#include "ampjit/Dialect/Jit/IR/JitDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace ampjit::ir {

#define GEN_PASS_DECL
#include "ampjit/Dialect/Jit/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "ampjit/Dialect/Jit/Transforms/Passes.h.inc"

} // namespace ampjit::ir

#endif // AMPJIT_DIALECT_JIT_TRANSFORMS_PASSES_H
