// Results saved as .npy feed a later run; a wrong .npy is a clear error.
// RUN: rm -rf %t.dir && mkdir -p %t.dir
// RUN: ampjit-run %S/../../../examples/mnist_train_step.mlir --steps=1 --seed=3 --save-results=%t.dir --print-results > %t.first
// RUN: ampjit-run %S/../../../examples/mnist_train_step.mlir --steps=1 --arg=2=%t.dir/result_1.npy | FileCheck %s --check-prefix=FED
// RUN: cat %t.first | FileCheck %s
// RUN: not ampjit-run %S/../../../examples/mnist_train_step.mlir --steps=1 --arg=2=%t.dir/result_0.npy 2>&1 | FileCheck %s --check-prefix=SHAPE
// RUN: printf 'junk' > %t.junk.npy
// RUN: not ampjit-run %S/../../../examples/mnist_train_step.mlir --steps=1 --arg=2=%t.junk.npy 2>&1 | FileCheck %s --check-prefix=JUNK
// RUN: not ampjit-run %S/../../../examples/mnist_train_step.mlir --steps=1 --arg=99=1 2>&1 | FileCheck %s --check-prefix=INDEX

// CHECK: step 0: result 0 =
// CHECK: result 1: f32[512x784] [
// FED: step 0: result 0 =
// SHAPE: ampjit-run: error: plan @train_step: argument 2 'arg2' (param f32[512x784]) was given a tensor of type f32[]
// JUNK: ampjit-run: error: --arg=2={{.*}}junk.npy: '{{.*}}junk.npy' is not a NumPy .npy file (wrong magic)
// INDEX: ampjit-run: error: --arg=99=1: expected INDEX=FILE.npy or INDEX=NUMBER with INDEX < 20, or NAME=... with an argument's name
