// jit::linear marks its bias add `jit.linear_bias`: torch's linear (addmm) is
// one op under autocast, so deciding op by op (O1 with semantics=autocast,
// and auto, which eager autocast matches) the add runs in its product's
// type. The same add without the mark (a user's own matmul + b) promotes to
// fp32, and the bias gradient (the add's jit.vjp_of sum) follows the add.
// Painting is grappler's rule and does not read the mark: the last bias add,
// which feeds only the fp32 loss, stays fp32.
// RUN: amp-opt %s --amp-auto-cast="level=O1 semantics=autocast" | FileCheck %s --check-prefixes=CHECK,PERop
// RUN: amp-opt %s --amp-auto-cast="level=auto" | FileCheck %s --check-prefixes=CHECK,PERop
// RUN: amp-opt %s --amp-auto-cast="level=O1" | FileCheck %s --check-prefixes=CHECK,PAINT
// RUN: amp-opt %s --amp-auto-cast="level=O1 semantics=autocast remarks=true" 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK

// CHECK-LABEL: func.func @linear
// PERop:       %[[B:.*]] = amp.cast %arg2 : tensor<3xf32> to tensor<3xf16>
// PERop:       %[[DY:.*]] = amp.cast %arg4 : tensor<4x3xf32> to tensor<4x3xf16>
// CHECK:       %[[M:.*]] = jit.matmul {{.*}} -> tensor<4x3xf16>
// CHECK-NEXT:  %[[WIDE:.*]] = amp.cast %[[M]] : tensor<4x3xf16> to tensor<4x3xf32>
// PERop-NEXT:  jit.add %[[M]], %[[B]] {jit.linear_bias, jit.op_id = 1 : i64} : (tensor<4x3xf16>, tensor<3xf16>) -> tensor<4x3xf16>
// PAINT-NEXT:  jit.add %[[WIDE]], %arg2 {jit.linear_bias, jit.op_id = 1 : i64} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
// CHECK:       jit.add %[[WIDE]], %arg2 {jit.op_id = 2 : i64} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
// PERop:       %[[DB:.*]] = jit.sum %[[DY]] axes = [0] {jit.vjp_of = 1 : i64} : tensor<4x3xf16> -> tensor<3xf16>
// PERop-NEXT:  amp.cast %[[DB]] : tensor<3xf16> to tensor<3xf32>
// PAINT:       jit.sum %arg4 axes = [0] {jit.vjp_of = 1 : i64} : tensor<4x3xf32> -> tensor<3xf32>

// REMARK: remark: computes in f16: inferred, a linear layer's bias add (jit.linear_bias) runs in its product's type (f16), as torch's linear under autocast, 'jit.matmul' #0
func.func @linear(%x: tensor<4x5xf32> {jit.role = "input"}, %w: tensor<3x5xf32> {jit.role = "param"},
                  %b: tensor<3xf32> {jit.role = "param"}, %t: tensor<4x3xf32> {jit.role = "input"},
                  %dy: tensor<4x3xf32> {jit.role = "input"})
    -> (tensor<f32>, tensor<f32>, tensor<3xf32>) {
  %m = jit.matmul %x, %w {jit.op_id = 0 : i64, transpose_rhs} : (tensor<4x5xf32>, tensor<3x5xf32>) -> tensor<4x3xf32>
  %y = jit.add %m, %b {jit.op_id = 1 : i64, jit.linear_bias} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %z = jit.add %m, %b {jit.op_id = 2 : i64} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %l = jit.mse_loss %y, %t reduction = mean {jit.op_id = 3 : i64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<f32>
  %k = jit.mse_loss %z, %t reduction = mean {jit.op_id = 4 : i64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<f32>
  %db = jit.sum %dy axes = [0] {jit.vjp_of = 1 : i64} : tensor<4x3xf32> -> tensor<3xf32>
  return %l, %k, %db : tensor<f32>, tensor<f32>, tensor<3xf32>
}
