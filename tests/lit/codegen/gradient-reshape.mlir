// A gradient that only changes shape on its way to the optimizer update and
// the finiteness check (a 1x1 convolution's NHWC weight gradient) is read
// before its reshape, which goes: both read it element by element.
// RUN: ampjit-run %s --print-plan --steps 1 --arg=0=1 --arg=1=2 --arg=2=0.5 --print-results | FileCheck %s

// CHECK-LABEL: plan @step
// CHECK: %[[N:[0-9]+]] = temporary f32[2x1x1x3]
// CHECK-NOT: reshape
// CHECK: all_finite f32 -> i1 (compute f32) grad0=%[[N]]
// CHECK-NEXT: optimizer_update sgd {{.*}} param=%0 grad=%[[N]] lr=%2
// CHECK-NOT: reshape
// w - lr * (-g) = 1 + 0.5 * 2:
// CHECK: result 0: f32[2x3x1x1] [2, 2, 2, 2, 2, 2]

func.func @step(%w: tensor<2x3x1x1xf32> {jit.role = "param"}, %g: tensor<2x1x1x3xf32> {jit.role = "input"},
                %lr: tensor<f32> {jit.role = "hyper"})
    -> (tensor<2x3x1x1xf32> {jit.tied = 0 : i64}, tensor<i1>) {
  %n = jit.neg %g : tensor<2x1x1x3xf32>
  %r = jit.reshape %n : tensor<2x1x1x3xf32> -> tensor<2x3x1x1xf32>
  %ok = amp.all_finite %r : tensor<2x3x1x1xf32>
  %w_new = jit.sgd_update %w, %r lr %lr : (tensor<2x3x1x1xf32>, tensor<2x3x1x1xf32>, tensor<f32>) -> tensor<2x3x1x1xf32>
  return %w_new, %ok : tensor<2x3x1x1xf32>, tensor<i1>
}
