// A policy condition on an enum attribute (gelu's approximate) matches the
// keyword: the tanh approximation is denied, the exact gelu stays clear and is
// painted between the matmuls.
// RUN: amp-opt %s --amp-auto-cast="policy=%S/Inputs/gelu-tanh-deny.yaml" | FileCheck %s

// CHECK-LABEL: func.func @gelus
// CHECK: jit.gelu {{.*}} approximate = none : tensor<4x8xf16>
// CHECK: jit.gelu {{.*}} approximate = tanh : tensor<4x8xf32>
func.func @gelus(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %m = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %g = jit.gelu %m approximate = none : tensor<4x8xf32>
  %m2 = jit.matmul %g, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %t = jit.gelu %m2 approximate = tanh : tensor<4x8xf32>
  %m3 = jit.matmul %t, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %m3, %t : tensor<4x8xf32>, tensor<4x8xf32>
}
