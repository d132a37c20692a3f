// State set to another argument's value (a scaler's `update(new_scale)`, an
// EMA swapped into the weights) is a copy, written last, after every reader
// of the old value. A swap of two arguments is refused (errors.mlir).
// RUN: ampjit-run %s --print-plan --steps=1 --arg=0=1 --arg=1=2 --print-results | FileCheck %s
// An argument is also given by its name:
// RUN: ampjit-run %s --steps=1 --arg=scale=1 --arg=new_scale=2 --print-results | FileCheck %s --check-prefix=NAMED
// RUN: not ampjit-run %s --steps=1 --arg=scales=1 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// NAMED: result 0: f32[4] [-1, -1, -1, -1]
// NAMED: result 1: f32[4] [2, 2, 2, 2]
// UNKNOWN: error: --arg=scales=1: plan @set has no argument named 'scales'; its arguments are 'scale', 'new_scale'

// CHECK: step 0: elementwise neg
// CHECK-NEXT: step 1: reshape {{.*}} // argument 'new_scale' copied into 'scale'
// CHECK: result 0: f32[4] [-1, -1, -1, -1]
// CHECK: result 1: f32[4] [2, 2, 2, 2]
func.func @set(%a: tensor<4xf32> {jit.role = "scaler_state"} loc("scale"),
               %b: tensor<4xf32> {jit.role = "hyper"} loc("new_scale"))
    -> (tensor<4xf32>, tensor<4xf32> {jit.tied = 0 : i64}) {
  %old = jit.neg %a : tensor<4xf32>
  return %old, %b : tensor<4xf32>, tensor<4xf32>
}
