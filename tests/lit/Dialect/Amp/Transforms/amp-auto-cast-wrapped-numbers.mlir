// A C++ number the frontend wrapped (`h * 0.3`, jit.wrapped_operands) takes
// the type of the op's other operands, as PyTorch's type promotion and eager
// autocast give it: the trace records it as an f32 constant, which must not
// widen an op whose tensor operand is f16. A number with no tensor beside it
// still decides.
// RUN: amp-opt %s --amp-auto-cast="level=O1 semantics=autocast" | FileCheck %s

// CHECK-LABEL: func.func @scaled
// CHECK:      %[[M:.*]] = jit.matmul {{.*}} -> tensor<4x8xf16>
// CHECK:      %[[C:.*]] = amp.cast %{{.*}} : tensor<f32> to tensor<f16>
// CHECK-NEXT: jit.mul %[[M]], %[[C]] {jit.wrapped_operands = array<i64: 1>} : (tensor<4x8xf16>, tensor<f16>) -> tensor<4x8xf16>
// Without the mark, the f32 constant widens the product.
// CHECK:      jit.mul %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
func.func @scaled(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"})
    -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %m = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %c = jit.constant dense<3.000000e-01> : tensor<f32>
  %s = jit.mul %m, %c {jit.wrapped_operands = array<i64: 1>} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %t = jit.mul %m, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %s, %t : tensor<4x8xf32>, tensor<4x8xf32>
}
