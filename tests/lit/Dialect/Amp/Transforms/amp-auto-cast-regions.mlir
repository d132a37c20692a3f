// An op recorded inside a user's autocast(false) (amp.disabled) takes no
// decision of the policy's. Painting (O1) and O2 keep it in its traced fp32,
// casting a low operand up. Deciding op by op (semantics=autocast, auto), it
// runs in its operands' types as eager autocast(false) does, a conversion in
// the type it converts to, and a backward op in its forward op's type.
// RUN: amp-opt %s --amp-auto-cast="level=O1" | FileCheck %s --check-prefix=PAINT
// RUN: amp-opt %s --amp-auto-cast="level=O2" | FileCheck %s --check-prefix=PAINT
// RUN: amp-opt %s --amp-auto-cast="level=O1 semantics=autocast" | FileCheck %s --check-prefix=EAGER
// RUN: amp-opt %s --amp-auto-cast="level=auto" | FileCheck %s --check-prefix=EAGER

// PAINT:      %[[M:.*]] = jit.matmul {{.*}} -> tensor<4x8xf16>
// PAINT:      %[[MF:.*]] = amp.cast %[[M]] : tensor<4x8xf16> to tensor<4x8xf32>
// PAINT:      jit.mul %[[MF]], %[[MF]] {amp.disabled, jit.op_id = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// PAINT:      jit.mul {{.*}} {amp.disabled, jit.vjp_of = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>

// EAGER:      %[[M:.*]] = jit.matmul {{.*}} -> tensor<4x8xf16>
// EAGER-NEXT: %[[SQ:.*]] = jit.mul %[[M]], %[[M]] {amp.disabled, jit.op_id = 1 : i64} : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xf16>
// EAGER-NEXT: %[[UP:.*]] = amp.cast %[[SQ]] : tensor<4x8xf16> to tensor<4x8xf32>
// EAGER-NEXT: jit.convert %[[UP]] {amp.disabled, jit.op_id = 2 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
// The gradient of the conversion is fp32, the conversion's; the product's
// gradient is f16, the product's.
// EAGER:      jit.convert {{.*}} {amp.disabled, jit.vjp_of = 2 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
// EAGER:      jit.mul {{.*}} {amp.disabled, jit.vjp_of = 1 : i64} : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xf16>
func.func @region(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"},
                  %dy: tensor<4x8xf32> {jit.role = "input"}) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %m = jit.matmul %x, %w {jit.op_id = 0 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %sq = jit.mul %m, %m {amp.disabled, jit.op_id = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %up = jit.convert %sq {amp.disabled, jit.op_id = 2 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  %dup = jit.convert %dy {amp.disabled, jit.vjp_of = 2 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  %dm = jit.mul %dup, %m {amp.disabled, jit.vjp_of = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %up, %dm : tensor<4x8xf32>, tensor<4x8xf32>
}
