// amp-pipeline keep-parameter-casts: at O1 each parameter's cast becomes a
// low-precision copy the optimizer update writes (amp-master-weights'
// mechanism), so the step casts no parameter; the values do not change (the
// MNIST step's losses and every result to the last bit, deferred as well).
// At O0 there is no cast to keep.
// RUN: amp-opt %s --amp-pipeline="level=O1 dtype=f16 keep-parameter-casts=true" | FileCheck %s
// RUN: not amp-opt %s --amp-pipeline="level=O0 keep-parameter-casts=true" 2>&1 | FileCheck %s --check-prefix=O0
// RUN: rm -rf %t.cast %t.kept && mkdir %t.cast %t.kept
// RUN: ampjit-run %S/../../../../../examples/mnist_train_step.mlir --amp-pipeline="level=O1 dtype=f16" --jit-fuse-elementwise --steps=3 --save-results=%t.cast > %t.cast.log
// RUN: ampjit-run %S/../../../../../examples/mnist_train_step.mlir --amp-pipeline="level=O1 dtype=f16 keep-parameter-casts=true" --jit-fuse-elementwise --jit-defer-optimizer-updates --steps=3 --save-results=%t.kept > %t.kept.log
// RUN: diff %t.cast.log %t.kept.log
// RUN: for f in %t.cast/*; do cmp $f %t.kept/$(basename $f); done

// CHECK-LABEL: func.func @step(
// CHECK-SAME: %[[W:[^:]+]]: tensor<8x8xf32> {jit.role = "param"}
// CHECK-SAME: %[[COPY:[^:]+]]: tensor<8x8xf16> {jit.derived_from = 1 : i64, jit.role = "param"}
// CHECK-NOT: amp.cast %[[W]]
// CHECK: jit.matmul %{{.*}}, %[[COPY]]
// CHECK: jit.sgd_update %[[W]], {{.*}} param_copy %[[COPY]]

// O0: error: keep-parameter-casts needs level O1, O2 or O3: at O0 no parameter is cast

func.func @step(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"},
                %lr: tensor<f32> {jit.role = "hyper"})
    -> (tensor<f32>, tensor<8x8xf32> {jit.tied = 1 : i64}) {
  %h = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = jit.sum %h axes = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  %g = jit.matmul %x, %h {transpose_lhs} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %w_new = jit.sgd_update %w, %g lr %lr : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  return %s, %w_new : tensor<f32>, tensor<8x8xf32>
}
