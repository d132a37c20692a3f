// An op the jit dialect does not define, and an op of a dialect amp-opt does
// not register, are errors at the op's line.

// RUN: not amp-opt %S/Inputs/unknown-op.mlir 2>&1 | FileCheck %s --check-prefix=OP
// OP: Inputs/unknown-op.mlir:4:8: error: custom op 'jit.frobnicate' is unknown
// OP-NEXT: %1 = jit.frobnicate %0 : tensor<4xf32>

// RUN: not amp-opt %S/Inputs/unknown-dialect.mlir 2>&1 | FileCheck %s --check-prefix=DIALECT
// DIALECT: Inputs/unknown-dialect.mlir:4:25: error: operation being parsed with an unregistered dialect
