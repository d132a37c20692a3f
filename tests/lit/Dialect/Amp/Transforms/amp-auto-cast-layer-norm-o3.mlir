// O3 lowers jit.layer_norm_grad with its data; the mean and rstd the forward
// op saved stay fp32 (they were cast to f16, which the op rejects).
// RUN: amp-opt %s --amp-auto-cast="level=O3" | FileCheck %s

func.func @step(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8xf32> {jit.role = "param"}, %b: tensor<8xf32> {jit.role = "param"}, %dy: tensor<4x8xf32> {jit.role = "input"})
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %y, %mean, %rstd = jit.layer_norm %x weight %w bias %b axis = 1 eps = 1.0e-05 {jit.op_id = 0 : i64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  %dx, %dw, %db = jit.layer_norm_grad %dy, %x, %mean, %rstd weight %w axis = 1 {jit.vjp_of = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %y, %dx, %dw, %db : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
}

// CHECK: jit.layer_norm {{.*}} : (tensor<4x8xf16>, tensor<8xf16>, tensor<8xf16>) -> (tensor<4x8xf16>, tensor<4xf32>, tensor<4xf32>)
// CHECK: jit.layer_norm_grad {{.*}} : (tensor<4x8xf16>, tensor<4x8xf16>, tensor<4xf32>, tensor<4xf32>, tensor<8xf16>) -> (tensor<4x8xf16>, tensor<8xf16>, tensor<8xf16>)
