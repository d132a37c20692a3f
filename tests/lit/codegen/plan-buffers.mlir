// Codegen's buffers: arguments keep their roles, a tied result is written into
// its argument in place, temporaries share arena bytes once dead, a returned
// value is an output, a constant is data in the plan.
// RUN: ampjit-run %s --print-plan | FileCheck %s
// RUN: ampjit-run %s --amp-pipeline="level=O2" --print-plan | FileCheck %s --check-prefix=O2
// RUN: ampjit-run %s --jit-fuse-elementwise --print-plan | FileCheck %s --check-prefix=FUSED

// CHECK-LABEL: plan @step
// CHECK-NEXT: arena 512 bytes
// CHECK-NEXT: %0 = arg 0 input f32[4x8]
// CHECK-NEXT: %1 = arg 1 param f32[8x8]
// CHECK-NEXT: %2 = arg 2 hyper f32[]
// CHECK-NEXT: %3 = temporary f32[4x8] @0
// CHECK-NEXT: %4 = temporary f32[4x8] @128
// The tanh's result takes the matmul's bytes: the matmul result is dead.
// CHECK-NEXT: %5 = temporary f32[4x8] @0
// CHECK-NEXT: %6 = output f32[4x8]
// CHECK-NEXT: %7 = temporary f32[8x8] @0
// CHECK-NEXT: %8 = constant f32[] = 2
// CHECK-NEXT: %9 = temporary f32[8x8] @256
// CHECK-NEXT: return %6, %1 tied arg 1
// CHECK-NEXT: step 0: gemm f32 x f32 -> f32 (acc f32) A=%0 B=%1 C=%3
// CHECK: step 4: gemm f32 x f32 -> f32 (acc f32) A=%0^T B=%6 C=%7
// CHECK: step 6: optimizer_update sgd {{.*}} param=%1 grad=%9 lr=%2 new_param=%1

// At O2 the parameter is read through its f16 copy, which the update writes
// in place as well.
// O2: %3 = arg 3 param f16[8x8] derived_from arg 1
// O2: return %{{[0-9]+}}, %1 tied arg 1, %3 tied arg 3
// O2: gemm f16 x f16 -> f16 (acc f32) A=%{{[0-9]+}} B=%3 C=
// O2: optimizer_update sgd {{.*}} param=%1 {{.*}} param_copy=%3 new_param=%1 new_param_copy=%3

// --jit-fuse-elementwise: relu, tanh and sigmoid become one program that
// reads the matmul's result once and stores only the sigmoid (the weight
// gradient's matmul and the function read it); the two intermediates are gone.
// FUSED: %3 = temporary f32[4x8] @0
// FUSED-NEXT: %4 = output f32[4x8]
// FUSED-NEXT: %5 = temporary f32[8x8]
// FUSED: step 1: fused_elementwise f32 -> f32 (compute f32) in0=%3 out0=%4  // fused: jit.relu, jit.tanh, jit.sigmoid
// FUSED-NEXT: r0 = load in0 : f32
// FUSED-NEXT: r1 = relu r0 : f32
// FUSED-NEXT: r2 = tanh r1 : f32
// FUSED-NEXT: r3 = sigmoid r2 : f32
// FUSED-NEXT: out0 = r3
// FUSED-NEXT: step 2: gemm f32 x f32 -> f32 (acc f32) A=%0^T B=%4 C=%5

func.func @step(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"},
                %lr: tensor<f32> {jit.role = "hyper"})
    -> (tensor<4x8xf32>, tensor<8x8xf32> {jit.tied = 1 : i64}) {
  %h = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = jit.relu %h : tensor<4x8xf32>
  %s = jit.tanh %r : tensor<4x8xf32>
  %t = jit.sigmoid %s : tensor<4x8xf32>
  %g = jit.matmul %x, %t {transpose_lhs} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %c = jit.constant dense<2.0> : tensor<f32>
  %g2 = jit.mul %g, %c : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %w_new = jit.sgd_update %w, %g2 lr %lr : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  return %t, %w_new : tensor<4x8xf32>, tensor<8x8xf32>
}
