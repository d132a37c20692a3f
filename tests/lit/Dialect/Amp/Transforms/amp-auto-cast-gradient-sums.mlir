// Under autocast semantics a sum of gradients runs in the type of the value
// it differentiates, as eager autocast does: each gradient first passes back
// through the cast autocast recorded. Here %h (an fp32 layer_norm output) feeds
// two f16 matmuls; their input gradients are f16, and the sums must not be.
// RUN: amp-opt %s --amp-auto-cast="semantics=autocast" | FileCheck %s

// CHECK-LABEL: func.func @two_consumers(
// The sum of %h's gradients takes layer_norm's precision (jit.vjp_of = 0).
// CHECK:         %[[DH:.*]] = jit.add %{{.*}}, %{{.*}} {jit.vjp_of = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// The sum of the weight's gradients takes the weight's type (jit.grad_of_leaf).
// CHECK:         jit.add %{{.*}}, %{{.*}} {jit.grad_of_leaf} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
func.func @two_consumers(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"},
                         %dy1: tensor<4x8xf32> {jit.role = "input"}, %dy2: tensor<4x8xf32> {jit.role = "input"})
    -> (tensor<4x8xf32>, tensor<8x8xf32>) {
  %h, %mean, %rstd = jit.layer_norm %x axis = 1 eps = 1.000000e-05 {jit.op_id = 0 : i64}
      : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  %y1 = jit.matmul %h, %w {jit.op_id = 1 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %y2 = jit.matmul %h, %w {jit.op_id = 2 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %dw2 = jit.matmul %h, %dy2 {jit.vjp_of = 2 : i64, transpose_lhs} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %dh2 = jit.matmul %dy2, %w {jit.vjp_of = 2 : i64, transpose_rhs} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %dw1 = jit.matmul %h, %dy1 {jit.vjp_of = 1 : i64, transpose_lhs} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %dh1 = jit.matmul %dy1, %w {jit.vjp_of = 1 : i64, transpose_rhs} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %dh = jit.add %dh2, %dh1 {jit.vjp_of = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %dw = jit.add %dw2, %dw1 {jit.grad_of_leaf} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %dh, %dw : tensor<4x8xf32>, tensor<8x8xf32>
}
