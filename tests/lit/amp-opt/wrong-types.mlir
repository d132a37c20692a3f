// Type errors are reported with the file, line and column of the offending
// op, whether the parser (a value used at a type other than its own) or a
// verifier (an op whose operand types do not fit) finds them.

// RUN: not amp-opt %S/Inputs/operand-type-mismatch.mlir 2>&1 | FileCheck %s --check-prefix=USE
// USE: Inputs/operand-type-mismatch.mlir:4:17: error: use of value '%x' expects different type than prior uses: 'tensor<4xf16>' vs 'tensor<4xf32>'

// RUN: not amp-opt %S/Inputs/ill-typed-step.mlir 2>&1 | FileCheck %s --check-prefix=VERIFY
// VERIFY: Inputs/ill-typed-step.mlir:5:8: error: 'jit.matmul' contraction dimensions differ: operand 'lhs' of type 'tensor<64x784xf32>' has 784 columns but operand 'rhs' of type 'tensor<784x512xf32>' (transposed) has 512 rows

// RUN: not amp-opt %S/Inputs/return-type-mismatch.mlir 2>&1 | FileCheck %s --check-prefix=RETURN
// RETURN: Inputs/return-type-mismatch.mlir:4:3: error: type of return operand 0 ('tensor<4xf16>') doesn't match function result type ('tensor<4xf32>') in function @step

// A pass pipeline never runs on IR that failed to verify.
// RUN: not amp-opt %S/Inputs/ill-typed-step.mlir -canonicalize 2>&1 | FileCheck %s --check-prefix=VERIFY
