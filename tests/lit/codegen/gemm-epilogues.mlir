// The CUDA pipeline's GEMM epilogues: a product read only by a bias add, read
// only by a relu, becomes one gemm step (the two hidden layers of the MNIST
// step); the logits' product, whose add feeds a cast, keeps its separate add.
// A saved plan keeps the epilogue.
// RUN: ampjit-run %S/../../../examples/mnist_train_step.mlir --amp-pipeline="level=O1 dtype=f16" --jit-fuse-gemm-epilogues --print-plan --steps=1 --emit-plan=%t.plan | FileCheck %s
// RUN: ampjit-run %s --load-plan=%t.plan --print-plan --steps=1 | FileCheck %s

// CHECK: gemm f16 x f16 -> f16 (acc f32) epilogue=bias_relu A=%{{[0-9]+}} B=%{{[0-9]+}}^T bias=%{{[0-9]+}} C=%{{[0-9]+}}  // jit.matmul #0 + jit.add #1 + jit.relu #2
// CHECK-NEXT: gemm f16 x f16 -> f16 (acc f32) epilogue=bias_relu {{.*}} // jit.matmul #3 + jit.add #4 + jit.relu #5
// CHECK-NEXT: gemm f16 x f16 -> f16 (acc f32) A=%{{[0-9]+}} B=%{{[0-9]+}}^T C=%{{[0-9]+}}  // jit.matmul #6
// CHECK: step 0: result 0 =
