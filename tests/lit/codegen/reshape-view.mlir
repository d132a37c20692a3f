// A reshape of a temporary into a temporary is laid out as a view of its
// input's bytes (the same arena offset), so it moves nothing; the bytes stay
// live until the view's last reader, past the input's own last read (freed
// bytes poisoned here, which would show as NaN). A reshape of an argument
// views the argument's memory (`view of %0`), unless a step writes the
// argument while the view is live: then it copies.
// RUN: env AMPJIT_POISON_FREED=1 ampjit-run %s --function=step --print-plan --steps 2 --arg=0=0.5 --print-results | FileCheck %s
// RUN: ampjit-run %s --function=updated --print-plan --steps 1 --arg=0=1 --arg=1=2 --arg=2=0.5 --print-results | FileCheck %s --check-prefix=UPDATED

// CHECK-LABEL: plan @step
// CHECK: %[[N:[0-9]+]] = temporary f32[2x1x2x2] @[[AT:[0-9]+]]
// CHECK-NEXT: %[[V:[0-9]+]] = temporary f32[2x4] @[[AT]]
// CHECK-NEXT: %[[C:[0-9]+]] = temporary f32[2x4] view of %0
// CHECK: step 1: reshape f32 -> f32 (compute f32) x=%[[N]] y=%[[V]]
// CHECK-NEXT: step 2: reshape f32 -> f32 (compute f32) x=%0 y=%[[C]]
// x - (-x) for x = 0.5:
// CHECK: result 0: f32[2x4] [1, 1, 1, 1, 1, 1, ...]

// The weight's reshape is read after the update writes the weight: a copy of
// the old value (-1 everywhere), not a view of the new one (which gives -0).
// UPDATED-LABEL: plan @updated
// UPDATED: %[[R:[0-9]+]] = temporary f32[4] @{{[0-9]+}}
// UPDATED: result 0: f32[4] [-1, -1, -1, -1]

func.func @step(%x: tensor<2x1x2x2xf32> {jit.role = "input"}) -> tensor<2x4xf32> {
  %n = jit.neg %x : tensor<2x1x2x2xf32>
  %v = jit.reshape %n : tensor<2x1x2x2xf32> -> tensor<2x4xf32>
  %c = jit.reshape %x : tensor<2x1x2x2xf32> -> tensor<2x4xf32>
  %s = jit.sub %c, %v : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %s : tensor<2x4xf32>
}

func.func @updated(%w: tensor<2x2xf32> {jit.role = "param"}, %g: tensor<2x2xf32> {jit.role = "input"},
                   %lr: tensor<f32> {jit.role = "hyper"}) -> (tensor<4xf32>, tensor<2x2xf32> {jit.tied = 0 : i64}) {
  %r = jit.reshape %w : tensor<2x2xf32> -> tensor<4xf32>
  %w_new = jit.sgd_update %w, %g lr %lr : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  %s = jit.neg %r : tensor<4xf32>
  return %s, %w_new : tensor<4xf32>, tensor<2x2xf32>
}
