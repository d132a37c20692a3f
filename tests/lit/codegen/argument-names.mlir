// An argument a framework named with a location keeps that name in the plan
// (and in every message about it); one without is argN. O2's low-precision
// copy of a named parameter is named after it and its type, and the step that
// updates a named argument in place names it in its origin.
// RUN: ampjit-run %s --print-plan --steps=0 | FileCheck %s
// RUN: ampjit-run %s --amp-pipeline="level=O2 dtype=bf16" --print-plan --steps=0 | FileCheck %s --check-prefix=O2

// CHECK: %0 = arg 0 input f32[4x8] "batch"
// CHECK-NEXT: %1 = arg 1 param f32[8x8] "fc1.weight"
// CHECK-NEXT: %2 = arg 2 hyper f32[] "arg2"

// A step that updates a state argument in place names it.
// CHECK: optimizer_update sgd {{.*}} // jit.sgd_update into 'fc1.weight'

// O2: %1 = arg 1 param f32[8x8] "fc1.weight"
// O2: %3 = arg 3 param bf16[8x8] derived_from arg 1 "fc1.weight.bf16"

func.func @step(%x: tensor<4x8xf32> {jit.role = "input"} loc("batch"),
                %w: tensor<8x8xf32> {jit.role = "param"} loc("fc1.weight"),
                %lr: tensor<f32> {jit.role = "hyper"})
    -> (tensor<4x8xf32>, tensor<8x8xf32> {jit.tied = 1 : i64}) {
  %h = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %g = jit.matmul %x, %h {transpose_lhs} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %w_new = jit.sgd_update %w, %g lr %lr : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  return %h, %w_new : tensor<4x8xf32>, tensor<8x8xf32>
}
