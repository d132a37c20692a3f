// The CUDA pipeline's GELU, GELU-gradient and bias-gradient epilogues on a
// traced GELU(tanh) MLP step, and what does not fuse.
//
// At O0 each hidden layer's forward keeps gelu's input as the aux output that
// its backward's dgelu reads; the bias gradients fold into the gelu gradient
// (hidden layers) and into the logits' weight gradient. A saved plan keeps it.
// RUN: ampjit-run %S/../../../examples/gelu_mlp_train_step.mlir --amp-pipeline="level=O0" --jit-fuse-gemm-epilogues --print-plan --emit-plan=%t.plan | FileCheck %s --check-prefix=FP32
// RUN: ampjit-run %s --load-plan=%t.plan --print-plan | FileCheck %s --check-prefix=FP32
// FP32: gemm f32 x f32 -> f32, f32 (acc f32) epilogue=bias_gelu_aux A=%0 B=%2^T bias=%3 C=%[[H1:[0-9]+]] gelu_input=%[[Z1:[0-9]+]]  // jit.matmul #0 + jit.add #1 + jit.gelu #2
// FP32-NEXT: gemm f32 x f32 -> f32, f32 (acc f32) epilogue=bias_gelu_aux A=%[[H1]] B=%4^T bias=%5 C=%[[H2:[0-9]+]] gelu_input=%[[Z2:[0-9]+]]  // jit.matmul #3 + jit.add #4 + jit.gelu #5
// FP32-NEXT: gemm f32 x f32 -> f32 (acc f32) epilogue=bias A=%[[H2]] B=%6^T bias=%7
// FP32: gemm f32 x f32 -> f32, f32 (acc f32) epilogue=bgrad_a A=%[[DY:[0-9]+]]^T B=%[[H2]] C={{%[0-9]+}} bias_grad={{%[0-9]+}}  // jit.matmul + jit.sum
// FP32-NEXT: gemm f32 x f32 -> f32, f32 (acc f32) epilogue=dgelu_bgrad A=%[[DY]] B=%6 gelu_input=%[[Z2]] C=%[[G2:[0-9]+]] bias_grad={{%[0-9]+}}  // jit.matmul + jit.gelu_grad + jit.sum
// FP32-NEXT: gemm f32 x f32 -> f32 (acc f32) A=%[[G2]]^T B=%[[H1]]
// FP32-NEXT: gemm f32 x f32 -> f32, f32 (acc f32) epilogue=dgelu_bgrad A=%[[G2]] B=%4 gelu_input=%[[Z1]] C=%[[G1:[0-9]+]] bias_grad={{%[0-9]+}}
// FP32-NEXT: gemm f32 x f32 -> f32 (acc f32) A=%[[G1]]^T B=%0
// FP32-NOT: reduction
// FP32-NOT: gelu
//
// O1 f16: AMP sums the f16 gradients in f32 (a cast, then an f32 sum), and
// cuBLASLt writes a bias gradient in C's type only: the sums stay steps.
// RUN: ampjit-run %S/../../../examples/gelu_mlp_train_step.mlir --amp-pipeline="level=O1 dtype=f16" --jit-fuse-gemm-epilogues --print-plan | FileCheck %s --check-prefix=F16
// F16: gemm f16 x f16 -> f16, f16 (acc f32) epilogue=bias_gelu_aux
// F16-NEXT: gemm f16 x f16 -> f16, f16 (acc f32) epilogue=bias_gelu_aux
// F16: reduction sum axes=[0] f32 -> f32
// F16: gemm f16 x f16 -> f16 (acc f32) A={{%[0-9]+}}^T
// F16-NEXT: gemm f16 x f16 -> f16 (acc f32) epilogue=dgelu {{.*}} // jit.matmul + jit.gelu_grad
// F16-NEXT: elementwise convert f16 -> f32
// F16-NEXT: reduction sum axes=[0] f32 -> f32
// F16-NOT: epilogue=dgelu_bgrad
// F16-NOT: epilogue=bgrad_a
//
// What never fuses:
// RUN: ampjit-run %s --function=f64_product --jit-fuse-gemm-epilogues --print-plan | FileCheck %s --check-prefix=UNFUSED
// RUN: ampjit-run %s --function=empty_contraction --jit-fuse-gemm-epilogues --print-plan | FileCheck %s --check-prefix=UNFUSED
// RUN: ampjit-run %s --function=shared_product --jit-fuse-gemm-epilogues --print-plan | FileCheck %s --check-prefix=UNFUSED
// RUN: ampjit-run %s --function=shared_gradient_product --jit-fuse-gemm-epilogues --print-plan | FileCheck %s --check-prefix=UNFUSED
// RUN: ampjit-run %s --function=bias_grad_read_before_the_weight_gradient --jit-fuse-gemm-epilogues --print-plan | FileCheck %s --check-prefix=UNFUSED
// UNFUSED-NOT: epilogue=
// RUN: ampjit-run %s --function=erf_gelu_and_odd_width --jit-fuse-gemm-epilogues --print-plan | FileCheck %s --check-prefix=BIAS-ONLY
// RUN: ampjit-run %s --function=bias_grad_of_a_weight_gradient --jit-fuse-gemm-epilogues --print-plan | FileCheck %s --check-prefix=BGRAD
//
// f64, K = 0, and a product something else also reads keep their steps.
// Erf GELU (cuBLASLt's GELU is the tanh approximation) and a GELU input
// whose rows are not a multiple of 8 long (cuBLASLt's aux leading dimension)
// fold only the bias.
// BIAS-ONLY: step 0: gemm f32 x f32 -> f32 (acc f32) epilogue=bias
// BIAS-ONLY-NEXT: elementwise gelu f32
// BIAS-ONLY-NEXT: gemm f32 x f32 -> f32 (acc f32) epilogue=bias
// BIAS-ONLY-NEXT: elementwise gelu_tanh f32
// A bias gradient read before the weight gradient would be written too late;
// read after it, it folds.
// BGRAD: step 0: gemm f32 x f32 -> f32, f32 (acc f32) epilogue=bgrad_a A=%0^T B=%1 C=%3 bias_grad=%2  // jit.matmul + jit.sum
// BGRAD-NEXT: step 1: elementwise add f32, f32 -> f32 (compute f32) lhs=%2 rhs=%2

func.func @f64_product(%x: tensor<4x8xf64> {jit.role = "input"}, %w: tensor<16x8xf64> {jit.role = "param"},
                       %b: tensor<16xf64> {jit.role = "param"}) -> tensor<4x16xf64> {
  %p = jit.matmul %x, %w {transpose_rhs} : (tensor<4x8xf64>, tensor<16x8xf64>) -> tensor<4x16xf64>
  %s = jit.add %p, %b : (tensor<4x16xf64>, tensor<16xf64>) -> tensor<4x16xf64>
  %g = jit.gelu %s approximate = tanh : tensor<4x16xf64>
  return %g : tensor<4x16xf64>
}

func.func @empty_contraction(%x: tensor<4x0xf32> {jit.role = "input"}, %w: tensor<16x0xf32> {jit.role = "param"},
                             %b: tensor<16xf32> {jit.role = "param"}) -> tensor<4x16xf32> {
  %p = jit.matmul %x, %w {transpose_rhs} : (tensor<4x0xf32>, tensor<16x0xf32>) -> tensor<4x16xf32>
  %s = jit.add %p, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %g = jit.gelu %s approximate = tanh : tensor<4x16xf32>
  return %g : tensor<4x16xf32>
}

func.func @shared_product(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<16x8xf32> {jit.role = "param"},
                          %b: tensor<16xf32> {jit.role = "param"}) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %p = jit.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %s = jit.add %p, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %g = jit.gelu %s approximate = tanh : tensor<4x16xf32>
  %t = jit.tanh %p : tensor<4x16xf32>
  return %g, %t : tensor<4x16xf32>, tensor<4x16xf32>
}

func.func @erf_gelu_and_odd_width(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<16x8xf32> {jit.role = "param"},
                                  %b: tensor<16xf32> {jit.role = "param"}, %w2: tensor<12x16xf32> {jit.role = "param"},
                                  %b2: tensor<12xf32> {jit.role = "param"}) -> tensor<4x12xf32> {
  %p = jit.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %s = jit.add %p, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %g = jit.gelu %s approximate = none : tensor<4x16xf32>
  %p2 = jit.matmul %g, %w2 {transpose_rhs} : (tensor<4x16xf32>, tensor<12x16xf32>) -> tensor<4x12xf32>
  %s2 = jit.add %p2, %b2 : (tensor<4x12xf32>, tensor<12xf32>) -> tensor<4x12xf32>
  %g2 = jit.gelu %s2 approximate = tanh : tensor<4x12xf32>
  return %g2 : tensor<4x12xf32>
}

func.func @shared_gradient_product(%dy: tensor<4x16xf32> {jit.role = "input"}, %w: tensor<16x16xf32> {jit.role = "param"},
                                   %x: tensor<4x16xf32> {jit.role = "input"}) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %p = jit.matmul %dy, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %g = jit.gelu_grad %p, %x approximate = tanh : tensor<4x16xf32>
  %t = jit.tanh %p : tensor<4x16xf32>
  return %g, %t : tensor<4x16xf32>, tensor<4x16xf32>
}

func.func @bias_grad_read_before_the_weight_gradient(%dy: tensor<4x16xf32> {jit.role = "input"},
                                                     %x: tensor<4x8xf32> {jit.role = "input"}) -> (tensor<16xf32>, tensor<16x8xf32>) {
  %db = jit.sum %dy axes = [0] : tensor<4x16xf32> -> tensor<16xf32>
  %twice = jit.add %db, %db : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %dw = jit.matmul %dy, %x {transpose_lhs} : (tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
  return %twice, %dw : tensor<16xf32>, tensor<16x8xf32>
}

func.func @bias_grad_of_a_weight_gradient(%dy: tensor<4x16xf32> {jit.role = "input"},
                                          %x: tensor<4x8xf32> {jit.role = "input"}) -> (tensor<16xf32>, tensor<16x8xf32>) {
  %db = jit.sum %dy axes = [0] : tensor<4x16xf32> -> tensor<16xf32>
  %dw = jit.matmul %dy, %x {transpose_lhs} : (tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
  %twice = jit.add %db, %db : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  return %twice, %dw : tensor<16xf32>, tensor<16x8xf32>
}
