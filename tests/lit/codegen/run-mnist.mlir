// ampjit-run compiles the MNIST train step, runs it on the CPU, saves the plan,
// and a saved plan runs to the same losses; a corrupt plan file is an error.
// RUN: ampjit-run %S/../../../examples/mnist_train_step.mlir --amp-pipeline="level=O1 dtype=f16" --steps=3 --emit-plan=%t.plan > %t.compiled
// RUN: ampjit-run %s --load-plan=%t.plan --steps=3 > %t.loaded
// RUN: cat %t.compiled %t.loaded | FileCheck %s
// RUN: head -c 100 %t.plan > %t.truncated
// RUN: not ampjit-run %s --load-plan=%t.truncated --steps=1 2>&1 | FileCheck %s --check-prefix=TRUNCATED
// RUN: printf 'not a plan at all' > %t.garbage
// RUN: not ampjit-run %s --load-plan=%t.garbage --steps=1 2>&1 | FileCheck %s --check-prefix=GARBAGE

// CHECK: step 0: result 0 = [[L0:[0-9.e+-]+]]
// CHECK-NEXT: step 1: result 0 = [[L1:[0-9.e+-]+]]
// CHECK-NEXT: step 2: result 0 = [[L2:[0-9.e+-]+]]
// CHECK-NEXT: step 0: result 0 = [[L0]]
// CHECK-NEXT: step 1: result 0 = [[L1]]
// CHECK-NEXT: step 2: result 0 = [[L2]]

// TRUNCATED: ampjit-run: error: {{.*}}.truncated: truncated: the header announces
// GARBAGE: ampjit-run: error: {{.*}}.garbage: not an ampjit plan (the file does not start with "AMPJPLAN")
