// ampjit-run --jit-defer-optimizer-updates: the MNIST train step with its SGD
// update deferred into the next run gives the plain step's losses and, once
// the last run's update is completed, every result (parameters, momentum
// buffers, scaler state) to the last bit (.npy files compared byte for
// byte). The saved plan keeps its deferred steps and carried buffers.
// RUN: rm -rf %t.plain %t.deferred %t.loaded && mkdir %t.plain %t.deferred %t.loaded
// RUN: ampjit-run %S/../../../examples/mnist_train_step.mlir --amp-pipeline="level=O2 dtype=f16" --jit-fuse-elementwise --steps=3 --save-results=%t.plain > %t.plain.log
// RUN: ampjit-run %S/../../../examples/mnist_train_step.mlir --amp-pipeline="level=O2 dtype=f16" --jit-fuse-elementwise --jit-defer-optimizer-updates --steps=3 --save-results=%t.deferred --emit-plan=%t.plan > %t.deferred.log
// RUN: diff %t.plain.log %t.deferred.log
// RUN: diff -r %t.plain %t.deferred
// RUN: ampjit-run %s --load-plan=%t.plan --steps=3 --save-results=%t.loaded > %t.loaded.log
// RUN: diff -r %t.plain %t.loaded
// RUN: ampjit-run %s --load-plan=%t.plan --print-plan | FileCheck %s

// CHECK: plan @train_step
// CHECK: deferred steps 0..5 (the previous run's update, done first)
// CHECK: carried f16[512x784]
// CHECK: step 0: optimizer_update sgd
// CHECK: snapshot for the deferred update
