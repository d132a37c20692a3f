// A transpose first read by the finiteness check (a convolution's weight
// gradient moved from OHWI back to OIHW) moves down to just before the
// check, next to the others, so the CUDA backend runs them as one launch.
// A transpose something else reads first (%u, read by the add) stays.
// RUN: ampjit-run %s --function=step --print-plan --steps 1 --arg=0=1 --arg=1=2 --print-results | FileCheck %s

// CHECK-LABEL: plan @step
// CHECK: step 0: elementwise neg f16 -> f16 (compute f32) x=%0 out=%[[A:[0-9]+]]
// CHECK-NEXT: step 1: transpose perm=[1, 0] f16 -> f16 (compute f32) x=%[[A]] y=%[[U:[0-9]+]]
// CHECK-NEXT: step 2: reshape f16 -> f16 (compute f32) x=%[[A]] y=%[[R:[0-9]+]]
// CHECK-NEXT: step 3: elementwise add f16, f16 -> f16 (compute f32) lhs=%[[U]]
// CHECK-NEXT: step 4: elementwise neg f16 -> f16 (compute f32) x=%1 out=%[[B:[0-9]+]]
// CHECK-NEXT: step 5: transpose perm=[0, 2, 1] f16 -> f16 (compute f32) x=%[[R]] y=%[[S:[0-9]+]]
// CHECK-NEXT: step 6: transpose perm=[1, 0] f16 -> f16 (compute f32) x=%[[B]] y=%[[T:[0-9]+]]
// CHECK-NEXT: step 7: all_finite f16, f16 -> i1 (compute f32) grad0=%[[S]] grad1=%[[T]]
// CHECK: result 0: i1[] [1]

func.func @step(%x: tensor<4x8xf16> {jit.role = "input"}, %y: tensor<8x4xf16> {jit.role = "input"})
    -> (tensor<i1>, tensor<8x4xf16>) {
  %a = jit.neg %x : tensor<4x8xf16>
  %u = jit.transpose %a perm = [1, 0] : tensor<4x8xf16> -> tensor<8x4xf16>
  %r = jit.reshape %a : tensor<4x8xf16> -> tensor<2x2x8xf16>
  %s = jit.transpose %r perm = [0, 2, 1] : tensor<2x2x8xf16> -> tensor<2x8x2xf16>
  %v = jit.add %u, %y : (tensor<8x4xf16>, tensor<8x4xf16>) -> tensor<8x4xf16>
  %b = jit.neg %y : tensor<8x4xf16>
  %t = jit.transpose %b perm = [1, 0] : tensor<8x4xf16> -> tensor<4x8xf16>
  %ok = amp.all_finite %s, %t : tensor<2x8x2xf16>, tensor<4x8xf16>
  return %ok, %v : tensor<i1>, tensor<8x4xf16>
}
