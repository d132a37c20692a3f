// A reshape of a temporary into a temporary is laid out as a view of its
// input's bytes (the same arena offset), so it moves nothing; the bytes stay
// live until the view's last reader, past the input's own last read (freed
// bytes poisoned here, which would show as NaN). A reshape of an argument
// still copies into bytes of its own.
// RUN: env AMPJIT_POISON_FREED=1 ampjit-run %s --print-plan --steps 2 --arg=0=0.5 --print-results | FileCheck %s

// CHECK-LABEL: plan @step
// CHECK: %[[N:[0-9]+]] = temporary f32[2x1x2x2] @[[AT:[0-9]+]]
// CHECK-NEXT: %[[V:[0-9]+]] = temporary f32[2x4] @[[AT]]
// CHECK-NEXT: %[[C:[0-9]+]] = temporary f32[2x4] @{{[0-9]+}}
// CHECK-NOT: @[[AT]]
// CHECK: step 1: reshape f32 -> f32 (compute f32) x=%[[N]] y=%[[V]]
// CHECK-NEXT: step 2: reshape f32 -> f32 (compute f32) x=%0 y=%[[C]]
// x - (-x) for x = 0.5:
// CHECK: result 0: f32[2x4] [1, 1, 1, 1, 1, 1, ...]

func.func @step(%x: tensor<2x1x2x2xf32> {jit.role = "input"}) -> tensor<2x4xf32> {
  %n = jit.neg %x : tensor<2x1x2x2xf32>
  %v = jit.reshape %n : tensor<2x1x2x2xf32> -> tensor<2x4xf32>
  %c = jit.reshape %x : tensor<2x1x2x2xf32> -> tensor<2x4xf32>
  %s = jit.sub %c, %v : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %s : tensor<2x4xf32>
}
