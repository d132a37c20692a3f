// ampjit-run --backend=cuda runs the MNIST step with its arguments moved to the
// device and its results brought back; here on the emulated CUDA runtime,
// against the same plan's CPU run from the same seed. The losses agree to the
// digits f16's rounding and another summation order leave alone, and the
// printed parameter and loss scale match. O2's f16 copy of the first weight
// (argument 20, which the DERIVED lines pin), given as zeros, is re-derived
// from its master on the device before the first step, so the losses stay the
// same.
// REQUIRES: emulated-cuda
// RUN: ampjit-run %S/../../../examples/mnist_train_step.mlir --amp-pipeline="level=O2 dtype=f16" --jit-fuse-elementwise --jit-fuse-gemm-epilogues --steps=3 --print-results > %t.cpu
// RUN: env AMPJIT_KERNEL_CACHE=%t.cache ampjit-run-on-emulated-runtime %S/../../../examples/mnist_train_step.mlir --amp-pipeline="level=O2 dtype=f16" --jit-fuse-elementwise --jit-fuse-gemm-epilogues --steps=3 --print-results --backend=cuda > %t.cuda
// RUN: env AMPJIT_KERNEL_CACHE=%t.cache ampjit-run-on-emulated-runtime %S/../../../examples/mnist_train_step.mlir --amp-pipeline="level=O2 dtype=f16" --jit-fuse-elementwise --jit-fuse-gemm-epilogues --steps=3 --backend=cuda --arg=20=0 > %t.rederived
// RUN: cat %t.cpu %t.cuda %t.rederived | FileCheck %s
// RUN: ampjit-run %S/../../../examples/mnist_train_step.mlir --amp-pipeline="level=O2 dtype=f16" --print-plan | FileCheck %s --check-prefix=DERIVED
// DERIVED: %20 = arg 20 param f16[512x784] derived_from arg 2
// RUN: not ampjit-run %s --backend=tpu --steps=1 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not ampjit-run-on-emulated-runtime %s --backend=cuda:7 --steps=1 2>&1 | FileCheck %s --check-prefix=NO-DEVICE

// CHECK: step 0: result 0 = [[L0:[0-9]\.[0-9]{4}]]
// CHECK-NEXT: step 1: result 0 = [[L1:[0-9]\.[0-9]{4}]]
// CHECK-NEXT: step 2: result 0 = [[L2:[0-9]\.[0-9]{4}]]
// CHECK-NEXT: result 0: f32[] {{\[}}[[L2]]
// CHECK-NEXT: result 1: f32[512x784] {{\[}}[[W:-?0\.0[0-9]{5}]]
// CHECK: result {{[0-9]+}}: f32[] {{\[}}65536]
// CHECK: step 0: result 0 = [[L0]]
// CHECK-NEXT: step 1: result 0 = [[L1]]
// CHECK-NEXT: step 2: result 0 = [[L2]]
// CHECK-NEXT: result 0: f32[] {{\[}}[[L2]]
// CHECK-NEXT: result 1: f32[512x784] {{\[}}[[W]]
// CHECK: result {{[0-9]+}}: f32[] {{\[}}65536]
// CHECK: step 0: result 0 = [[L0]]
// CHECK-NEXT: step 1: result 0 = [[L1]]
// CHECK-NEXT: step 2: result 0 = [[L2]]

// UNKNOWN: ampjit-run: error: --backend=tpu: unknown backend 'tpu' (known: cpu, cuda, cuda:N)
// NO-DEVICE: ampjit-run: error: --backend=cuda:7: backend 'cuda:7': CUDA device 7 does not exist (1 found)
