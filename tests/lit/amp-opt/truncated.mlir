// A file cut short is reported at the point where it ends, with its name,
// and amp-opt exits non-zero without crashing (`not` fails on a crash).

// RUN: not amp-opt %S/Inputs/truncated-step.mlir 2>&1 | FileCheck %s --check-prefix=STEP
// STEP: Inputs/truncated-step.mlir:6:37: error: expected operation name in quotes

// RUN: not amp-opt %S/Inputs/truncated-type.mlir 2>&1 | FileCheck %s --check-prefix=TYPE
// TYPE: Inputs/truncated-type.mlir:5:32: error: expected 'x' in dimension list
// TYPE-NEXT: %1 = jit.relu %0 : tensor<4x8

// Cutting the sample training step anywhere gives the same kind of error.
// RUN: head -c 3000 %S/../../../examples/mnist_train_step.mlir > %t.head.mlir
// RUN: not amp-opt %t.head.mlir 2>&1 | FileCheck %s --check-prefix=HEAD
// HEAD: truncated.mlir.tmp.head.mlir:{{[0-9]+}}:{{[0-9]+}}: error:
