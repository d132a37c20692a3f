// O2 and O3 lower the model's computation (the backward and every op it
// reads); the rest of the step follows its inputs' types. Clipping the
// unscaled fp32 gradients and an fp32 EMA of the weights stay fp32, where
// lowering them would round unscaled gradients back to f16 (undoing the loss
// scaling, and overflowing a sum of squares past 65504) and freeze the EMA.
// RUN: amp-opt %s --split-input-file --amp-auto-cast="level=O2" | FileCheck %s --check-prefix=CHECK
// RUN: amp-opt %s --split-input-file --amp-auto-cast="level=O3" | FileCheck %s --check-prefix=CHECK
// RUN: amp-opt %s --split-input-file --amp-auto-cast="level=O1" | FileCheck %s --check-prefix=O1

func.func @step(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"},
                %ema: tensor<8x8xf32> {jit.role = "hyper"}, %lr: tensor<f32> {jit.role = "hyper"},
                %scale: tensor<f32> {jit.role = "scaler_state"})
    -> (tensor<4x8xf32>, tensor<f32>, tensor<8x8xf32> {jit.tied = 1 : i64}, tensor<8x8xf32> {jit.tied = 2 : i64}) {
  %m = jit.matmul %x, %w {jit.op_id = 0 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = jit.relu %m {jit.op_id = 1 : i64} : tensor<4x8xf32>
  %d = jit.relu_grad %r, %r {jit.vjp_of = 1 : i64} : tensor<4x8xf32>
  %g = jit.matmul %x, %d {transpose_lhs, jit.vjp_of = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %one = jit.constant dense<1.0> : tensor<f32>
  %inv = jit.div %one, %scale : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %u, %ok = amp.unscale_and_check %inv, %g : (tensor<f32>, tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<i1>)
  // clip_grad_norm_: the sum of squares, the coefficient, the clipped gradient.
  %sq = jit.mul %u, %u : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %ss = jit.sum %sq axes = [0, 1] : tensor<8x8xf32> -> tensor<f32>
  %norm = jit.sqrt %ss : tensor<f32>
  %coef = jit.div %one, %norm : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %clipped = jit.mul %u, %coef : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %w1 = jit.sgd_update %w, %clipped lr %lr predicate %ok
      : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<i1>) -> tensor<8x8xf32>
  // ema = 0.9 ema + 0.1 w
  %c9 = jit.constant dense<0.9> : tensor<f32>
  %c1 = jit.constant dense<0.1> : tensor<f32>
  %e9 = jit.mul %ema, %c9 : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %w01 = jit.mul %w1, %c1 : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %ema1 = jit.add %e9, %w01 : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %r, %norm, %w1, %ema1 : tensor<4x8xf32>, tensor<f32>, tensor<8x8xf32>, tensor<8x8xf32>
}

// The forward and backward are lowered (O3 lowers relu_grad too, O2 does not
// need to: it is clear, and low at O2 as well).
// CHECK-LABEL: func.func @step
// CHECK: jit.matmul {{.*}} -> tensor<4x8xf16>
// CHECK: jit.relu {{.*}} : tensor<4x8xf16>
// CHECK: jit.relu_grad {{.*}} : tensor<4x8xf16>
// CHECK: jit.matmul {{.*}}transpose_lhs{{.*}} -> tensor<8x8xf16>
// ...and unscaling reads them in fp32, as always; everything after it is fp32.
// CHECK: amp.unscale_and_check {{.*}} -> (tensor<8x8xf32>, tensor<i1>)
// CHECK-NEXT: jit.mul {{.*}} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: jit.sum {{.*}} : tensor<8x8xf32> -> tensor<f32>
// CHECK-NEXT: jit.sqrt {{.*}} : tensor<f32>
// CHECK-NEXT: jit.div {{.*}} -> tensor<f32>
// CHECK-NEXT: jit.mul {{.*}} : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
// CHECK-NEXT: jit.sgd_update {{.*}} : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<i1>) -> tensor<8x8xf32>
// CHECK: jit.mul {{.*}} : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
// CHECK-NEXT: jit.mul {{.*}} : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
// CHECK-NEXT: jit.add {{.*}} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>

// O1 paints only between allow ops: nothing after the backward was low before
// either.
// O1-LABEL: func.func @step
// O1: amp.unscale_and_check
// O1-NOT: f16

// -----

// An "apply" function of gradient accumulation has no backward: there every
// op that reads no gradient is the model's computation, and the gradients'
// clipping follows its inputs.
func.func @apply(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"},
                 %g: tensor<8x8xf32> {jit.role = "grad"}, %lr: tensor<f32> {jit.role = "hyper"},
                 %scale: tensor<f32> {jit.role = "scaler_state"})
    -> (tensor<4x8xf32>, tensor<8x8xf32> {jit.tied = 1 : i64}) {
  %m = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %one = jit.constant dense<1.0> : tensor<f32>
  %inv = jit.div %one, %scale : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %u, %ok = amp.unscale_and_check %inv, %g : (tensor<f32>, tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<i1>)
  %half = jit.constant dense<0.5> : tensor<f32>
  %clipped = jit.mul %u, %half : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %w1 = jit.sgd_update %w, %clipped lr %lr predicate %ok
      : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<i1>) -> tensor<8x8xf32>
  return %m, %w1 : tensor<4x8xf32>, tensor<8x8xf32>
}

// CHECK-LABEL: func.func @apply
// CHECK: jit.matmul {{.*}} -> tensor<4x8xf16>
// CHECK: amp.unscale_and_check {{.*}} -> (tensor<8x8xf32>, tensor<i1>)
// CHECK: jit.mul {{.*}} : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
// CHECK-NEXT: jit.sgd_update {{.*}} : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<i1>)
// O1-LABEL: func.func @apply
