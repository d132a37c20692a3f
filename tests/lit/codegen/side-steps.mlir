// --jit-overlap-weight-gradients: each filter gradient becomes a side step,
// joined before the filter gradient two places later or before the first
// step that must follow it (here the finiteness check), whichever comes
// first. The CPU runs side steps in line: the results are the plain plan's
// to the byte, and a saved plan keeps its side steps.
// RUN: rm -rf %t.plain %t.side %t.loaded && mkdir %t.plain %t.side %t.loaded
// RUN: ampjit-run %s --function=step --steps 1 --save-results=%t.plain > %t.plain.log
// RUN: ampjit-run %s --function=step --jit-overlap-weight-gradients --steps 1 --save-results=%t.side --emit-plan=%t.plan --print-plan > %t.side.log
// RUN: FileCheck %s < %t.side.log
// RUN: diff -r %t.plain %t.side
// RUN: ampjit-run %s --load-plan=%t.plan --steps 1 --save-results=%t.loaded
// RUN: diff -r %t.plain %t.loaded
// RUN: ampjit-run %s --load-plan=%t.plan --print-plan | FileCheck %s

// CHECK-LABEL: plan @step
// CHECK-NEXT: arena
// CHECK-NEXT: side steps: 0 joins before 6, 3 joins before 8, 6 joins before 8
// CHECK: step 0: conv2d_grad_weight
// CHECK: step 3: conv2d_grad_weight
// CHECK: step 6: conv2d_grad_weight
// CHECK: step 8: all_finite

func.func @step(%x: tensor<1x2x5x5xf32> {jit.role = "input"}, %dy: tensor<1x2x5x5xf32> {jit.role = "input"},
                %w1: tensor<2x2x3x3xf32> {jit.role = "input"}, %w2: tensor<2x2x3x3xf32> {jit.role = "input"},
                %w3: tensor<2x2x3x3xf32> {jit.role = "input"})
    -> (tensor<i1>, tensor<1x2x5x5xf32>, tensor<2x2x3x3xf32>, tensor<2x2x3x3xf32>, tensor<2x2x3x3xf32>) {
  %dw3 = jit.conv2d_grad_weight %dy, %x stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<1x2x5x5xf32>, tensor<1x2x5x5xf32>) -> tensor<2x2x3x3xf32>
  %d2 = jit.conv2d_grad_input %dy, %w3 stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<1x2x5x5xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x5x5xf32>
  %r2 = jit.relu %d2 : tensor<1x2x5x5xf32>
  %dw2 = jit.conv2d_grad_weight %r2, %x stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<1x2x5x5xf32>, tensor<1x2x5x5xf32>) -> tensor<2x2x3x3xf32>
  %d1 = jit.conv2d_grad_input %r2, %w2 stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<1x2x5x5xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x5x5xf32>
  %r1 = jit.relu %d1 : tensor<1x2x5x5xf32>
  %dw1 = jit.conv2d_grad_weight %r1, %x stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<1x2x5x5xf32>, tensor<1x2x5x5xf32>) -> tensor<2x2x3x3xf32>
  %d0 = jit.conv2d_grad_input %r1, %w1 stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<1x2x5x5xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x5x5xf32>
  %ok = amp.all_finite %dw3, %dw2, %dw1 : tensor<2x2x3x3xf32>, tensor<2x2x3x3xf32>, tensor<2x2x3x3xf32>
  return %ok, %d0, %dw3, %dw2, %dw1
      : tensor<i1>, tensor<1x2x5x5xf32>, tensor<2x2x3x3xf32>, tensor<2x2x3x3xf32>, tensor<2x2x3x3xf32>
}
