// A reduction of what the elementwise step right before it wrote keeps that
// step's inputs live through it: the CUDA backend may run the two as one
// launch (a widened or column-summed reduction), whose blocks store sums
// while others still read those inputs. So the sums never take the bytes of
// the negated x, which the relu gradient reads last; a step later they do.
// RUN: ampjit-run %s --function=step --print-plan --steps 1 --arg=0=-0.5 --arg=1=1 --print-results | FileCheck %s

// CHECK-LABEL: plan @step
// CHECK: %[[N:[0-9]+]] = temporary f32[64x8] @0 "
// CHECK-NEXT: %[[G:[0-9]+]] = temporary f32[64x8] @2048 "
// CHECK-NEXT: %[[S:[0-9]+]] = temporary f32[8] @4096 "
// CHECK-NEXT: %[[T:[0-9]+]] = temporary f32[8] @0 "
// CHECK: step 1: elementwise relu_grad f32, f32 -> f32 (compute f32) dy=%[[N]] y=%{{[0-9]+}} out=%[[G]]
// CHECK-NEXT: step 2: reduction sum axes=[0] f32 -> f32 (acc f32) x=%[[G]] y=%[[S]]
// 64 rows of -(-0.5), doubled and negated:
// CHECK: result 0: f32[8] [-64, -64, -64, -64, -64, -64, ...]

func.func @step(%x: tensor<64x8xf32> {jit.role = "input"}, %y: tensor<64x8xf32> {jit.role = "input"}) -> tensor<8xf32> {
  %n = jit.neg %x : tensor<64x8xf32>
  %g = jit.relu_grad %n, %y : tensor<64x8xf32>
  %s = jit.sum %g axes = [0] : tensor<64x8xf32> -> tensor<8xf32>
  %t = jit.add %s, %s : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %r = jit.neg %t : tensor<8xf32>
  return %r : tensor<8xf32>
}
