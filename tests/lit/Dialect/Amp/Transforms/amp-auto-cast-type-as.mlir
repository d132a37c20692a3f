// jit.type_as converts to the type AMP decided for its reference, at every
// level and in both semantics, and becomes an amp.cast of its input (or
// nothing). An RMSNorm written as PyTorch's: normalise in fp32, then back to
// the activations' type with x.type_as(h).
// RUN: amp-opt %s --amp-auto-cast="level=O1" | FileCheck %s --check-prefix=LOW
// RUN: amp-opt %s --amp-auto-cast="level=O1 semantics=autocast" | FileCheck %s --check-prefix=LOW
// RUN: amp-opt %s --amp-auto-cast="level=O2" | FileCheck %s --check-prefix=O2
// RUN: amp-opt %s --amp-auto-cast="level=O0" | FileCheck %s --check-prefix=FP32
// RUN: amp-opt %s --amp-auto-cast="level=O1 report=%t.json" -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT < %t.json
// RUN: amp-opt %s --amp-pipeline="level=O1" | FileCheck %s --check-prefix=PIPELINE

// LOW-LABEL: func.func @rms_norm(
// LOW:       %[[H:.*]] = jit.matmul {{.*}} -> tensor<4x8xf16>
// LOW:       %[[N:.*]] = jit.mul {{.*}} : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
// LOW-NEXT:  %[[BACK:.*]] = amp.cast %[[N]] : tensor<4x8xf32> to tensor<4x8xf16>
// LOW-NOT:   jit.type_as
// LOW:       jit.matmul %[[BACK]], {{.*}} -> tensor<4x8xf16>

// O2 lowers the products too, so the result is f16 already.
// O2-LABEL: func.func @rms_norm(
// O2:       %[[N:.*]] = jit.mul {{.*}} : (tensor<4x8xf16>, tensor<4x1xf16>) -> tensor<4x8xf16>
// O2-NOT:   jit.type_as
// O2:       jit.matmul %[[N]], {{.*}} -> tensor<4x8xf16>

// FP32-LABEL: func.func @rms_norm(
// FP32-NOT:   jit.type_as
// FP32-NOT:   amp.cast
// FP32:       return

// REPORT:      "detail": "converts to the type of its reference (f16), 'jit.matmul' at {{.*}}type-as.mlir:{{[0-9]+}}:8",
// REPORT-NEXT: "inferred_from": "'jit.matmul' at
// REPORT-NEXT: "location": "{{.*}}type-as.mlir:{{[0-9]+}}:11",
// REPORT-NEXT: "op": "jit.type_as",
// REPORT-NEXT: "reason": "reference"

// PIPELINE-LABEL: func.func @rms_norm(
// PIPELINE-NOT:   jit.type_as
// PIPELINE:       return
func.func @rms_norm(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"},
                    %w2: tensor<8x8xf32> {jit.role = "param"}) -> tensor<4x8xf32> {
  %h = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %hf = jit.convert %h : tensor<4x8xf32> -> tensor<4x8xf32>
  %sq = jit.mul %hf, %hf : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %ms = jit.mean %sq axes = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  %r = jit.rsqrt %ms : tensor<4x1xf32>
  %n = jit.mul %hf, %r : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %back = jit.type_as %n, %h : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %y = jit.matmul %back, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// An autograd::function's backward (amp.outside_autocast, a jit.vjp_of with
// no forward op in the function) runs with autocast off eagerly: deciding op
// by op, its exp and matmul run in their operands' types (the f16 activation,
// the f32 gradient), not as the lists say. Painting ignores the mark.
// RUN: amp-opt %s --amp-auto-cast="level=O1 semantics=autocast" | FileCheck %s --check-prefix=OUTSIDE
// RUN: amp-opt %s --amp-auto-cast="level=O1" | FileCheck %s --check-prefix=OUTSIDE-PAINT

// OUTSIDE-LABEL: func.func @custom_backward(
// OUTSIDE:       %[[H:.*]] = jit.matmul {{.*}} {jit.op_id = 0 : i64} {{.*}} -> tensor<4x8xf16>
// OUTSIDE:       jit.exp %[[H]] {amp.outside_autocast, jit.vjp_of = 7 : i64} : tensor<4x8xf16>
// OUTSIDE:       jit.matmul %arg2, %arg1 {amp.outside_autocast, jit.vjp_of = 7 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>

// OUTSIDE-PAINT-LABEL: func.func @custom_backward(
// OUTSIDE-PAINT:       jit.exp {{.*}} {amp.outside_autocast, jit.vjp_of = 7 : i64} : tensor<4x8xf32>
// OUTSIDE-PAINT:       jit.matmul {{.*}} {amp.outside_autocast, jit.vjp_of = 7 : i64} : (tensor<4x8xf16>, tensor<8x8xf16>) -> tensor<4x8xf16>
func.func @custom_backward(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"},
                           %g: tensor<4x8xf32> {jit.role = "input"}) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %h = jit.matmul %x, %w {jit.op_id = 0 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %e = jit.exp %h {amp.outside_autocast, jit.vjp_of = 7 : i64} : tensor<4x8xf32>
  %dx = jit.matmul %g, %w {amp.outside_autocast, jit.vjp_of = 7 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %e, %dx : tensor<4x8xf32>, tensor<4x8xf32>
}
