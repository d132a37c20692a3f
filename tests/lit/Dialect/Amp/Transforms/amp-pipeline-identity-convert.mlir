// A user's identity conversion (x.to(f32) on a value whose trace type is
// already f32) states the precision the eager program computed in: the
// pipeline's first canonicalization keeps it, auto-cast reads it as a deny
// op (the neg after it runs in f32, not in the matmul's f16), and the
// pipeline removes it once the decisions are made.
// RUN: amp-opt %s --amp-pipeline="level=O1 dtype=f16 semantics=autocast" | FileCheck %s

// CHECK-LABEL: func.func @pinned(
// CHECK:         %[[Y:.*]] = jit.matmul {{.*}} -> tensor<4x4xf16>
// CHECK:         %[[W:.*]] = amp.cast %[[Y]] : tensor<4x4xf16> to tensor<4x4xf32>
// CHECK-NEXT:    %[[N:.*]] = jit.neg %[[W]] {{.*}}: tensor<4x4xf32>
// CHECK-NOT:     jit.convert
// CHECK:         return %[[N]]
func.func @pinned(%a: tensor<4x4xf32> {jit.role = "input"}, %b: tensor<4x4xf32> {jit.role = "input"})
    -> tensor<4x4xf32> {
  %y = jit.matmul %a, %b {jit.op_id = 0 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %w = jit.convert %y {jit.op_id = 1 : i64} : tensor<4x4xf32> -> tensor<4x4xf32>
  %n = jit.neg %w {jit.op_id = 2 : i64} : tensor<4x4xf32>
  return %n : tensor<4x4xf32>
}
