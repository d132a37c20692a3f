//===- JitOps.h - ops of the jit dialect ----------------------------------===//

#ifndef AMPJIT_DIALECT_JIT_IR_JITOPS_H
#define AMPJIT_DIALECT_JIT_IR_JITOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

// The type constraints (JitBase.td) call checkedElementCount.
#include "ampjit/runtime/ElementCount.h"

#include "ampjit/Dialect/Jit/IR/JitDialect.h"
#include "ampjit/Dialect/Jit/IR/JitEnums.h.inc"

#define GET_OP_CLASSES
#include "ampjit/Dialect/Jit/IR/JitOps.h.inc"

#include <optional>

namespace ampjit::ir {

/// The keyword of an enum attribute of a jit op (`approximate`, `reduction`,
/// `predicate`) as the IR prints it ("tanh", "mean", "gt"); nullopt for any
/// other attribute. The enums are stored as integers, so code outside the
/// dialect (policy conditions, codegen) needs this to speak of them by name.
std::optional<llvm::StringRef> enumAttributeKeyword(mlir::Operation *op, llvm::StringRef name);

/// The inverse: the attribute a jit op stores for `keyword` of its enum
/// attribute `name`, or null when `name` is no enum attribute or `keyword`
/// is not one of its cases.
mlir::Attribute enumAttributeFromKeyword(mlir::MLIRContext *context, llvm::StringRef name,
                                         llvm::StringRef keyword);

} // namespace ampjit::ir

#endif // AMPJIT_DIALECT_JIT_IR_JITOPS_H
