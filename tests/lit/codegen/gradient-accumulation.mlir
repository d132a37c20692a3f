// --jit-fuse-gradient-accumulation: a value read by two convolutions gets
// the sum of their input gradients; the later convolution adds its result to
// the earlier one's in place (cuDNN's beta = 1 on the GPU) and the add goes.
// In f32 the sum is rounded once either way: the results are the plain
// plan's to the byte.
// RUN: rm -rf %t.plain %t.fused && mkdir %t.plain %t.fused
// RUN: ampjit-run %s --function=step --steps 1 --save-results=%t.plain > %t.plain.log
// RUN: ampjit-run %s --function=step --jit-fuse-gradient-accumulation --steps 1 --save-results=%t.fused --print-plan > %t.fused.log
// RUN: FileCheck %s < %t.fused.log
// RUN: diff -r %t.plain %t.fused

// CHECK-LABEL: plan @step
// CHECK: step 0: conv2d_grad_input {{.*}} dy=%0 weight=%2 dx=%[[SUM:[0-9]+]]
// CHECK-NEXT: step 1: conv2d_grad_input {{.*}} f32, f32, f32 -> f32 {{.*}} dy=%1 weight=%3 accumulate=%[[SUM]] dx=%[[SUM]]  // jit.conv2d_grad_input + jit.add
// CHECK-NEXT: step 2: elementwise neg {{.*}} x=%[[SUM]]
// CHECK-NOT: elementwise add

func.func @step(%dy1: tensor<1x2x5x5xf32> {jit.role = "input"}, %dy2: tensor<1x2x5x5xf32> {jit.role = "input"},
                %w1: tensor<2x2x3x3xf32> {jit.role = "input"}, %w2: tensor<2x2x3x3xf32> {jit.role = "input"})
    -> tensor<1x2x5x5xf32> {
  %d1 = jit.conv2d_grad_input %dy1, %w1 stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<1x2x5x5xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x5x5xf32>
  %d2 = jit.conv2d_grad_input %dy2, %w2 stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<1x2x5x5xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x5x5xf32>
  %sum = jit.add %d1, %d2 : (tensor<1x2x5x5xf32>, tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32>
  %out = jit.neg %sum : tensor<1x2x5x5xf32>
  return %out : tensor<1x2x5x5xf32>
}
