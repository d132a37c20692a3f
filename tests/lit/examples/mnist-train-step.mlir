// The main job's module (examples/mnist_train_step.mlir): a whole traced train
// step verifies, state model included, and survives canonicalization and CSE
// with its structure intact.
// RUN: amp-opt %S/../../../examples/mnist_train_step.mlir | FileCheck %s --check-prefix=PARSED
// RUN: amp-opt %S/../../../examples/mnist_train_step.mlir --canonicalize --cse | FileCheck %s

// PARSED: amp.scale_loss

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: {jit.role = "input"}
// CHECK-SAME: {jit.role = "scaler_state"}
// CHECK-SAME: tensor<i64> {jit.tied = 18 : i64}
// The scaled loss itself is dead: backward is seeded with the scale directly.
// CHECK-NOT: amp.scale_loss
// CHECK-COUNT-3: jit.matmul {{.*}}transpose_rhs
// CHECK: jit.cross_entropy
// CHECK: jit.cross_entropy_grad
// CHECK: %[[OK:.*]] = amp.all_finite
// CHECK: %[[INV:.*]] = jit.div
// CHECK-COUNT-6: jit.sgd_update {{.*}} inv_scale %[[INV]] predicate %[[OK]] {momentum = 9.000000e-01 : f64}
// CHECK: amp.update_scale {{.*}}, %[[OK]]
// CHECK: return
