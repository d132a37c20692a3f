// Without the AMP pipeline jit.type_as is a conversion to its reference's
// type, whose step reads only the input (the reference is not kept alive for
// it); the AMP pipeline replaces it by AMP's cast of its input.
// RUN: ampjit-run %s --print-plan --steps 1 --arg=0=0.1 --arg=1=2 --print-results | FileCheck %s
// RUN: ampjit-run %s --amp-pipeline="level=O1" --print-plan --steps 1 --arg=0=0.1 --arg=1=2 --print-results | FileCheck %s --check-prefix=AMP

// CHECK-LABEL: plan @step
// CHECK:      step 0: elementwise convert f32 -> f16 (compute f32) x=%0 out=%{{[0-9]+}}  // jit.type_as
// CHECK-NOT:  step 1
// 0.1 rounded to f16:
// CHECK:      result 0: f16[3] [0.0999755859375, 0.0999755859375, 0.0999755859375]

// AMP-LABEL: plan @step
// AMP:       step 0: elementwise convert f32 -> f16 (compute f32) x=%0 out=%{{[0-9]+}}  // amp.cast
// AMP-NOT:   step 1
// AMP:       result 0: f16[3] [0.0999755859375, 0.0999755859375, 0.0999755859375]

func.func @step(%x: tensor<3xf32> {jit.role = "input"}, %h: tensor<2xf16> {jit.role = "input"}) -> tensor<3xf16> {
  %y = jit.type_as %x, %h : tensor<3xf32>, tensor<2xf16> -> tensor<3xf16>
  return %y : tensor<3xf16>
}
