// Values the trace recorded in f16 (the user's x.half(), their own autocast
// inside the traced function, f16 state) are decided op by op, as eager
// autocast decides an op on such a value: a deny op casts them up and
// computes in fp32, an allow op runs in the AMP type (bf16 casts the user's
// f16), the rest follow their inputs. Conversions stay as written and f64 is
// never touched. Before 2026-12-02 these ops were left alone and amp-verify
// refused the exp and the widening conversion at O1 and O2.
// RUN: amp-opt %s --amp-auto-cast="level=O1" | FileCheck %s --check-prefixes=CHECK,F16
// RUN: amp-opt %s --amp-auto-cast="level=O1 semantics=autocast" | FileCheck %s --check-prefixes=CHECK,F16
// RUN: amp-opt %s --amp-auto-cast="level=O1 dtype=bf16" | FileCheck %s --check-prefixes=CHECK,BF16
// RUN: amp-opt %s --amp-auto-cast="level=O2" | FileCheck %s --check-prefix=O2
// RUN: amp-opt %s --amp-pipeline="level=O1" | FileCheck %s --check-prefix=PIPELINE
// RUN: amp-opt %s --amp-pipeline="level=O2" -o /dev/null
// RUN: amp-opt %s --amp-pipeline="level=auto" -o /dev/null

// CHECK-LABEL: func.func @deny_on_traced_f16(
// CHECK:         %[[H:.*]] = jit.convert %{{.*}} : tensor<4x4xf32> -> tensor<4x4xf16>
// CHECK-NEXT:    %[[UP:.*]] = amp.cast %[[H]] : tensor<4x4xf16> to tensor<4x4xf32>
// CHECK-NEXT:    %[[E:.*]] = jit.exp %[[UP]] {{.*}}: tensor<4x4xf32>
// CHECK-NEXT:    %[[S:.*]] = jit.sqrt %[[E]] {{.*}}: tensor<4x4xf32>
// CHECK-NEXT:    %[[BACK:.*]] = amp.cast %[[S]] : tensor<4x4xf32> to tensor<4x4xf16>
// CHECK-NEXT:    return %[[BACK]] : tensor<4x4xf16>
// O2 runs the sqrt after the deny op in low precision again.
// O2-LABEL: func.func @deny_on_traced_f16(
// O2:         jit.exp %{{.*}} : tensor<4x4xf32>
// O2:         jit.sqrt %{{.*}} : tensor<4x4xf16>
func.func @deny_on_traced_f16(%a: tensor<4x4xf32> {jit.role = "input"}) -> tensor<4x4xf16> {
  %h = jit.convert %a {jit.op_id = 0 : i64} : tensor<4x4xf32> -> tensor<4x4xf16>
  %e = jit.exp %h {jit.op_id = 1 : i64} : tensor<4x4xf16>
  %s = jit.sqrt %e {jit.op_id = 2 : i64} : tensor<4x4xf16>
  return %s : tensor<4x4xf16>
}

// CHECK-LABEL: func.func @allow_on_traced_f16(
// F16-NOT:       amp.cast
// F16:           jit.matmul {{.*}} : (tensor<4x4xf16>, tensor<4x4xf16>) -> tensor<4x4xf16>
// BF16:          amp.cast %{{.*}} : tensor<4x4xf16> to tensor<4x4xbf16>
// BF16:          amp.cast %{{.*}} : tensor<4x4xf16> to tensor<4x4xbf16>
// BF16:          %[[Y:.*]] = jit.matmul {{.*}} : (tensor<4x4xbf16>, tensor<4x4xbf16>) -> tensor<4x4xbf16>
// BF16-NEXT:     amp.cast %[[Y]] : tensor<4x4xbf16> to tensor<4x4xf16>
func.func @allow_on_traced_f16(%a: tensor<4x4xf32> {jit.role = "input"}, %b: tensor<4x4xf32> {jit.role = "input"})
    -> tensor<4x4xf16> {
  %ha = jit.convert %a {jit.op_id = 0 : i64} : tensor<4x4xf32> -> tensor<4x4xf16>
  %hb = jit.convert %b {jit.op_id = 1 : i64} : tensor<4x4xf32> -> tensor<4x4xf16>
  %y = jit.matmul %ha, %hb {jit.op_id = 2 : i64} : (tensor<4x4xf16>, tensor<4x4xf16>) -> tensor<4x4xf16>
  return %y : tensor<4x4xf16>
}

// A round trip through f16 (simulating f16 storage) keeps both conversions:
// the widening one reads its f16 operand exactly (and in the pipeline becomes
// the cast it is).
// CHECK-LABEL: func.func @round_trip(
// CHECK:         %[[H:.*]] = jit.convert %{{.*}} : tensor<4x4xf32> -> tensor<4x4xf16>
// CHECK-NEXT:    jit.convert %[[H]] {{.*}}: tensor<4x4xf16> -> tensor<4x4xf32>
// PIPELINE-LABEL: func.func @round_trip(
// PIPELINE:         %[[H:.*]] = jit.convert %{{.*}} : tensor<4x4xf32> -> tensor<4x4xf16>
// PIPELINE-NEXT:    amp.cast %[[H]] : tensor<4x4xf16> to tensor<4x4xf32>
func.func @round_trip(%a: tensor<4x4xf32> {jit.role = "input"}) -> tensor<4x4xf32> {
  %h = jit.convert %a {jit.op_id = 0 : i64} : tensor<4x4xf32> -> tensor<4x4xf16>
  %w = jit.convert %h {jit.op_id = 1 : i64} : tensor<4x4xf16> -> tensor<4x4xf32>
  %n = jit.exp %w {jit.op_id = 2 : i64} : tensor<4x4xf32>
  return %n : tensor<4x4xf32>
}

// CHECK-LABEL: func.func @f64_stays(
// CHECK-NOT:     amp.cast
// CHECK:         jit.exp %{{.*}} : tensor<4x4xf64>
func.func @f64_stays(%a: tensor<4x4xf64> {jit.role = "input"}) -> tensor<4x4xf64> {
  %e = jit.exp %a {jit.op_id = 0 : i64} : tensor<4x4xf64>
  return %e : tensor<4x4xf64>
}

// A trace widens an f16 batch to meet the fp32 weights (as eager autocast
// lets them meet); the pipeline reads that exact widening as its own cast, so
// the f16 matmul AMP decides reads the batch as it came.
// PIPELINE-LABEL: func.func @f16_batch(
// PIPELINE-SAME:    %[[X:.*]]: tensor<4x8xf16>
// PIPELINE-NOT:     jit.convert
// PIPELINE-NOT:     amp.cast %[[X]]
// PIPELINE:         jit.matmul %[[X]], %{{.*}} : (tensor<4x8xf16>, tensor<8x8xf16>) -> tensor<4x8xf16>
func.func @f16_batch(%x: tensor<4x8xf16> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"})
    -> tensor<4x8xf32> {
  %xw = jit.convert %x {jit.op_id = 0 : i64} : tensor<4x8xf16> -> tensor<4x8xf32>
  %y = jit.matmul %xw, %w {jit.op_id = 1 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// The gradients of the user's conversions around a deny op follow the types
// AMP gave the conversions (autograd gives a gradient its tensor's type): the
// widening's gradient reads and gives f32, as the log-softmax now computes,
// and the narrowing's gradient reads the log-softmax's f32 input gradient
// rounded to f16, the type of h, as eager autocast rounds it at its cast.
// Before 2026-12-03 both kept the recorded types: the gradient was rounded to
// f16 before the log-softmax's backward and not after it.
// CHECK-LABEL: func.func @gradients_of_conversions_around_a_deny_op(
// CHECK-SAME:    %[[A:[^:]*]]: tensor<4x4xf32>{{.*}}, %[[G:[^:]*]]: tensor<4x4xf32>
// CHECK:         %[[H:.*]] = jit.convert %[[A]] {{.*}}: tensor<4x4xf32> -> tensor<4x4xf16>
// CHECK:         %[[L:.*]] = jit.log_softmax {{.*}}: tensor<4x4xf32>
// CHECK:         %[[W:.*]] = jit.convert %[[L]] {{.*}}: tensor<4x4xf32> -> tensor<4x4xf32>
// CHECK:         %[[DL:.*]] = jit.convert %[[G]] {{.*}}: tensor<4x4xf32> -> tensor<4x4xf32>
// CHECK:         %[[DH:.*]] = jit.log_softmax_grad %[[DL]], %[[L]] {{.*}}: tensor<4x4xf32>
// CHECK:         %[[ROUNDED:.*]] = amp.cast %[[DH]] : tensor<4x4xf32> to tensor<4x4xf16>
// CHECK:         %[[DA:.*]] = jit.convert %[[ROUNDED]] {{.*}}: tensor<4x4xf16> -> tensor<4x4xf32>
// CHECK:         return %[[W]], %[[DA]]
// O2-LABEL: func.func @gradients_of_conversions_around_a_deny_op(
// O2:         jit.log_softmax_grad {{.*}}: tensor<4x4xf32>
// O2:         amp.cast %{{.*}} : tensor<4x4xf32> to tensor<4x4xf16>
// O2:         jit.convert %{{.*}} : tensor<4x4xf16> -> tensor<4x4xf32>
func.func @gradients_of_conversions_around_a_deny_op(%a: tensor<4x4xf32> {jit.role = "input"},
                                                    %g: tensor<4x4xf32> {jit.role = "input"})
    -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %h = jit.convert %a {jit.op_id = 0 : i64} : tensor<4x4xf32> -> tensor<4x4xf16>
  %l = jit.log_softmax %h axis = 1 {jit.op_id = 1 : i64} : tensor<4x4xf16>
  %w = jit.convert %l {jit.op_id = 2 : i64} : tensor<4x4xf16> -> tensor<4x4xf32>
  %dl = jit.convert %g {jit.vjp_of = 2 : i64} : tensor<4x4xf32> -> tensor<4x4xf16>
  %dh = jit.log_softmax_grad %dl, %l axis = 1 {jit.vjp_of = 1 : i64} : tensor<4x4xf16>
  %da = jit.convert %dh {jit.vjp_of = 0 : i64} : tensor<4x4xf16> -> tensor<4x4xf32>
  return %w, %da : tensor<4x4xf32>, tensor<4x4xf32>
}

// The user's MSE on their own f16 values is a deny op, so its loss is f32,
// and scaler.scale scales it, and the backward's seed, in f32 as eager
// autocast does. Until 2026-12-03 the seed stayed f16: 1 times the scale
// (2^16) overflowed, and the step was skipped where eager's was not.
// CHECK-LABEL: func.func @scaled_loss_of_a_deny_op_on_traced_f16(
// CHECK:         %[[LOSS:.*]] = jit.mse_loss {{.*}} -> tensor<f32>
// CHECK:         amp.scale_loss %[[LOSS]], %{{.*}} : tensor<f32>
// CHECK:         %[[ONE:.*]] = amp.cast %{{.*}} : tensor<f16> to tensor<f32>
// CHECK:         %[[SEED:.*]] = amp.scale_loss %[[ONE]], %{{.*}} : tensor<f32>
// CHECK:         jit.mse_loss_grad %[[SEED]], {{.*}} -> tensor<4x4xf32>
// O2-LABEL: func.func @scaled_loss_of_a_deny_op_on_traced_f16(
// O2:         amp.scale_loss %{{.*}}, %{{.*}} {jit.vjp_of = 2 : i64} : tensor<f32>
func.func @scaled_loss_of_a_deny_op_on_traced_f16(%p: tensor<4x4xf32> {jit.role = "input"},
                                                  %t: tensor<4x4xf32> {jit.role = "input"},
                                                  %scale: tensor<f32> {jit.role = "scaler_state"})
    -> (tensor<f16>, tensor<f16>, tensor<4x4xf16>) {
  %ph = jit.convert %p {jit.op_id = 0 : i64} : tensor<4x4xf32> -> tensor<4x4xf16>
  %th = jit.convert %t : tensor<4x4xf32> -> tensor<4x4xf16>
  %loss = jit.mse_loss %ph, %th reduction = mean {jit.op_id = 1 : i64} : (tensor<4x4xf16>, tensor<4x4xf16>) -> tensor<f16>
  %scaled = amp.scale_loss %loss, %scale {jit.op_id = 2 : i64} : tensor<f16>
  %one = jit.constant dense<1.000000e+00> : tensor<f16>
  %seed = amp.scale_loss %one, %scale {jit.vjp_of = 2 : i64} : tensor<f16>
  %dp = jit.mse_loss_grad %seed, %ph, %th reduction = mean {jit.vjp_of = 1 : i64}
      : (tensor<f16>, tensor<4x4xf16>, tensor<4x4xf16>) -> tensor<4x4xf16>
  return %loss, %scaled, %dp : tensor<f16>, tensor<f16>, tensor<4x4xf16>
}

// What the step returns (`jit.returned`) and the trace recorded in f16 is
// returned in the type AMP computed it in, as eager autocast returns it: the
// MSE on the user's own f16 values, a deny op, in f32 (rounded back to f16,
// the caller got eager's loss rounded once more, until 2026-12-04), their
// f16 product at bf16 in bf16. A result without the flag (a gradient landing
// in an f16 tensor) and new state keep their types, and so does a returned
// value the trace recorded in f32 (the product of an allow op).
// CHECK-LABEL: func.func @returned_values_of_the_users_f16(
// CHECK-SAME:      -> (tensor<f32> {jit.returned}, tensor<f16>, tensor<f16> {jit.tied = 2 : i64}, tensor<4x4xf32> {jit.returned},
// F16-SAME:        tensor<4x4xf16> {jit.returned})
// BF16-SAME:       tensor<4x4xbf16> {jit.returned})
// CHECK:         %[[LOSS:.*]] = jit.mse_loss {{.*}} -> tensor<f32>
// CHECK:         %[[ROUNDED:.*]] = amp.cast %[[LOSS]] : tensor<f32> to tensor<f16>
// CHECK:         %[[PRODUCT:.*]] = jit.matmul
// CHECK:         %[[WIDE:.*]] = amp.cast %[[PRODUCT]] : tensor<4x4x{{.*}}> to tensor<4x4xf32>
// CHECK:         %[[USERS:.*]] = jit.matmul
// CHECK:         return %[[LOSS]], %[[ROUNDED]], %[[ROUNDED]], %[[WIDE]], %[[USERS]] :
// O2-LABEL: func.func @returned_values_of_the_users_f16(
// O2-SAME:      -> (tensor<f32> {jit.returned}, tensor<f16>, tensor<f16> {jit.tied = 2 : i64}, tensor<4x4xf32> {jit.returned}, tensor<4x4xf16> {jit.returned})
// PIPELINE-LABEL: func.func @returned_values_of_the_users_f16(
// PIPELINE-SAME:      -> (tensor<f32> {jit.returned}, tensor<f16>, tensor<f16> {jit.tied = 2 : i64}, tensor<4x4xf32> {jit.returned}, tensor<4x4xf16> {jit.returned})
func.func @returned_values_of_the_users_f16(%p: tensor<4x4xf32> {jit.role = "input"},
                                            %t: tensor<4x4xf32> {jit.role = "input"},
                                            %last: tensor<f16> {jit.role = "opt_state"})
    -> (tensor<f16> {jit.returned}, tensor<f16>, tensor<f16> {jit.tied = 2 : i64}, tensor<4x4xf32> {jit.returned},
        tensor<4x4xf16> {jit.returned}) {
  %ph = jit.convert %p {jit.op_id = 0 : i64} : tensor<4x4xf32> -> tensor<4x4xf16>
  %th = jit.convert %t : tensor<4x4xf32> -> tensor<4x4xf16>
  %loss = jit.mse_loss %ph, %th reduction = mean {jit.op_id = 1 : i64} : (tensor<4x4xf16>, tensor<4x4xf16>) -> tensor<f16>
  %product = jit.matmul %p, %t {jit.op_id = 2 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %users = jit.matmul %ph, %th {jit.op_id = 3 : i64} : (tensor<4x4xf16>, tensor<4x4xf16>) -> tensor<4x4xf16>
  return %loss, %loss, %loss, %product, %users : tensor<f16>, tensor<f16>, tensor<f16>, tensor<4x4xf32>, tensor<4x4xf16>
}
