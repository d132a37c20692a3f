// RUN: amp-opt %s -split-input-file --amp-auto-cast | FileCheck %s

// Painting at O1 (TensorFlow grappler's auto_mixed_precision cases, on the
// default policy with f16).

// A graph with no allow op is left alone.
// CHECK-LABEL: func.func @no_allow_op_is_unchanged
// CHECK-NOT: amp.cast
// CHECK: jit.exp %arg0 : tensor<4x8xf32>
// CHECK-NEXT: jit.add {{.*}} -> tensor<4x8xf32>
// CHECK-NEXT: return
func.func @no_allow_op_is_unchanged(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = jit.exp %x : tensor<4x8xf32>
  %a = jit.add %e, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %a : tensor<4x8xf32>
}

// -----

// A graph already in low precision is left alone.
// CHECK-LABEL: func.func @already_low_precision_is_unchanged
// CHECK-NOT: amp.cast
// CHECK: jit.matmul %arg0, %arg1 : (tensor<4x8xf16>, tensor<8x8xf16>) -> tensor<4x8xf16>
// CHECK-NEXT: jit.relu {{.*}} : tensor<4x8xf16>
// CHECK-NEXT: return
func.func @already_low_precision_is_unchanged(%x: tensor<4x8xf16>, %w: tensor<8x8xf16>) -> tensor<4x8xf16> {
  %m = jit.matmul %x, %w : (tensor<4x8xf16>, tensor<8x8xf16>) -> tensor<4x8xf16>
  %r = jit.relu %m : tensor<4x8xf16>
  return %r : tensor<4x8xf16>
}

// -----

// Two allow ops: inputs cast once each (the weight's cast is shared by both
// matmuls), the result cast back because function results keep their types.
// CHECK-LABEL: func.func @simple_allow_chain
// CHECK-NEXT: %[[X:.*]] = amp.cast %arg0 : tensor<4x8xf32> to tensor<4x8xf16>
// CHECK-NEXT: %[[W:.*]] = amp.cast %arg1 : tensor<8x8xf32> to tensor<8x8xf16>
// CHECK-NEXT: %[[M1:.*]] = jit.matmul %[[X]], %[[W]] : (tensor<4x8xf16>, tensor<8x8xf16>) -> tensor<4x8xf16>
// CHECK-NEXT: %[[M2:.*]] = jit.matmul %[[M1]], %[[W]] : (tensor<4x8xf16>, tensor<8x8xf16>) -> tensor<4x8xf16>
// CHECK-NEXT: %[[OUT:.*]] = amp.cast %[[M2]] : tensor<4x8xf16> to tensor<4x8xf32>
// CHECK-NEXT: return %[[OUT]] : tensor<4x8xf32>
func.func @simple_allow_chain(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %m1 = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %m2 = jit.matmul %m1, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %m2 : tensor<4x8xf32>
}

// -----

// Clear ops next to an allow op are painted in both directions, so the casts
// sit at the ends of the clear chains.
// CHECK-LABEL: func.func @bidirectional_clear_chain
// CHECK-NEXT: %[[X:.*]] = amp.cast %arg0 : tensor<32xf32> to tensor<32xf16>
// CHECK-NEXT: %[[W:.*]] = amp.cast %arg1
// CHECK-NEXT: %[[R:.*]] = jit.reshape %[[X]] : tensor<32xf16> -> tensor<4x8xf16>
// CHECK-NEXT: %[[N:.*]] = jit.neg %[[R]] : tensor<4x8xf16>
// CHECK-NEXT: %[[M:.*]] = jit.matmul %[[N]], %[[W]]
// CHECK-NEXT: %[[T:.*]] = jit.transpose %[[M]] perm = [1, 0] : tensor<4x8xf16> -> tensor<8x4xf16>
// CHECK-NEXT: %[[Q:.*]] = jit.relu %[[T]] : tensor<8x4xf16>
// CHECK-NEXT: %[[OUT:.*]] = amp.cast %[[Q]] : tensor<8x4xf16> to tensor<8x4xf32>
// CHECK-NEXT: return %[[OUT]]
func.func @bidirectional_clear_chain(%x: tensor<32xf32>, %w: tensor<8x8xf32>) -> tensor<8x4xf32> {
  %r = jit.reshape %x : tensor<32xf32> -> tensor<4x8xf32>
  %n = jit.neg %r : tensor<4x8xf32>
  %m = jit.matmul %n, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %t = jit.transpose %m perm = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %q = jit.relu %t : tensor<8x4xf32>
  return %q : tensor<8x4xf32>
}

// -----

// Deny spreads forward through the infer op (add), which therefore stays fp32
// although it lies between two matmuls; the relu feeds only a matmul, so deny
// does not reach it and it is painted.
// CHECK-LABEL: func.func @deny_spreads_through_infer
// CHECK: %[[M1:.*]] = jit.matmul {{.*}} -> tensor<4x8xf16>
// CHECK-NEXT: %[[M1F:.*]] = amp.cast %[[M1]] : tensor<4x8xf16> to tensor<4x8xf32>
// CHECK-NEXT: %[[E:.*]] = jit.exp %[[M1F]] : tensor<4x8xf32>
// CHECK-NEXT: %[[A:.*]] = jit.add %[[E]], %[[M1F]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[AH:.*]] = amp.cast %[[A]] : tensor<4x8xf32> to tensor<4x8xf16>
// CHECK-NEXT: %[[R:.*]] = jit.relu %[[AH]] : tensor<4x8xf16>
// CHECK-NEXT: jit.matmul %[[R]], {{.*}} -> tensor<4x8xf16>
func.func @deny_spreads_through_infer(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %m1 = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %e = jit.exp %m1 : tensor<4x8xf32>
  %a = jit.add %e, %m1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %r = jit.relu %a : tensor<4x8xf32>
  %m2 = jit.matmul %r, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %m2 : tensor<4x8xf32>
}

// -----

// Infer (bias add) and clear (relu) ops between allow ops are painted; the
// bias is cast to the low type.
// CHECK-LABEL: func.func @clear_and_infer_between_allow_ops
// CHECK-DAG: %[[B:.*]] = amp.cast %arg2 : tensor<8xf32> to tensor<8xf16>
// CHECK: %[[M1:.*]] = jit.matmul {{.*}} -> tensor<4x8xf16>
// CHECK-NEXT: %[[A:.*]] = jit.add %[[M1]], %[[B]] : (tensor<4x8xf16>, tensor<8xf16>) -> tensor<4x8xf16>
// CHECK-NEXT: %[[R:.*]] = jit.relu %[[A]] : tensor<4x8xf16>
// CHECK-NEXT: jit.matmul %[[R]], {{.*}} -> tensor<4x8xf16>
func.func @clear_and_infer_between_allow_ops(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %m1 = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a = jit.add %m1, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r = jit.relu %a : tensor<4x8xf32>
  %m2 = jit.matmul %r, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %m2 : tensor<4x8xf32>
}

// -----

// A cast already in the graph is reused (and moved up to dominate its new
// use) instead of a second cast of the same value.
// CHECK-LABEL: func.func @existing_casts_are_reused
// CHECK-NEXT: %[[X:.*]] = amp.cast %arg0 : tensor<4x8xf32> to tensor<4x8xf16>
// CHECK-NEXT: %[[W:.*]] = amp.cast %arg1
// CHECK-NEXT: jit.matmul %[[X]], %[[W]]
// CHECK-NOT: amp.cast %arg0
// CHECK: jit.neg %[[X]] : tensor<4x8xf16>
func.func @existing_casts_are_reused(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf16>) {
  %m = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %c = amp.cast %x : tensor<4x8xf32> to tensor<4x8xf16>
  %n = jit.neg %c : tensor<4x8xf16>
  return %m, %n : tensor<4x8xf32>, tensor<4x8xf16>
}

// -----

// Outputs keep their declared fp32 type; one cast back serves every use.
// CHECK-LABEL: func.func @outputs_stay_fp32
// CHECK: %[[M:.*]] = jit.matmul {{.*}} -> tensor<4x8xf16>
// CHECK-NEXT: %[[F:.*]] = amp.cast %[[M]] : tensor<4x8xf16> to tensor<4x8xf32>
// CHECK-NEXT: %[[E:.*]] = jit.exp %[[F]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[F]], %[[E]], %[[F]] : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
func.func @outputs_stay_fp32(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %m = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %e = jit.exp %m : tensor<4x8xf32>
  return %m, %e, %m : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Region boundaries: an op recorded under autocast(false) keeps fp32 even
// between matmuls, and painting does not cross it; a forced op computes in
// its forced type whatever its category (exp is deny).
// CHECK-LABEL: func.func @region_attributes_win
// CHECK: %[[M1:.*]] = jit.matmul {{.*}} -> tensor<4x8xf16>
// CHECK-NEXT: %[[M1F:.*]] = amp.cast %[[M1]] : tensor<4x8xf16> to tensor<4x8xf32>
// CHECK-NEXT: %[[R:.*]] = jit.relu %[[M1F]] {amp.disabled} : tensor<4x8xf32>
// CHECK-NEXT: %[[RH:.*]] = amp.cast %[[R]] : tensor<4x8xf32> to tensor<4x8xf16>
// CHECK-NEXT: %[[M2:.*]] = jit.matmul %[[RH]], {{.*}} -> tensor<4x8xf16>
// CHECK-NEXT: %[[E:.*]] = jit.exp %[[M2]] {amp.force_type = f16} : tensor<4x8xf16>
// CHECK-NEXT: %[[EF:.*]] = amp.cast %[[E]] : tensor<4x8xf16> to tensor<4x8xf32>
// CHECK-NEXT: jit.neg %[[EF]] {amp.force_type = f32} : tensor<4x8xf32>
func.func @region_attributes_win(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %m1 = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = jit.relu %m1 {amp.disabled} : tensor<4x8xf32>
  %m2 = jit.matmul %r, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %e = jit.exp %m2 {amp.force_type = f16} : tensor<4x8xf32>
  %n = jit.neg %e {amp.force_type = f32} : tensor<4x8xf32>
  return %n : tensor<4x8xf32>
}

// -----

// Calls keep their callee's signature: precision does not leak across a
// function boundary, and each function is painted on its own.
// CHECK-LABEL: func.func @callee
// CHECK: jit.matmul {{.*}} -> tensor<4x8xf16>
// CHECK: return {{.*}} : tensor<4x8xf32>
// CHECK-LABEL: func.func @caller
// CHECK: %[[C:.*]] = call @callee(%arg0, %arg1) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: amp.cast %[[C]] : tensor<4x8xf32> to tensor<4x8xf16>
func.func @callee(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %m = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %m : tensor<4x8xf32>
}
func.func @caller(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %c = call @callee(%x, %w) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %m = jit.matmul %c, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %m : tensor<4x8xf32>
}

// -----

// The optimizer update and the finiteness check read the low-precision
// gradient directly (no fp32 copy); scaler arithmetic (1/scale) stays fp32.
// CHECK-LABEL: func.func @optimizer_reads_low_precision_gradients
// CHECK: %[[G:.*]] = jit.matmul {{.*}} -> tensor<8x8xf16>
// CHECK-NEXT: %[[OK:.*]] = amp.all_finite %[[G]] : tensor<8x8xf16>
// CHECK: %[[INV:.*]] = jit.div {{.*}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT: jit.sgd_update %arg1, %[[G]] lr %arg2 inv_scale %[[INV]] predicate %[[OK]]
// CHECK-SAME: (tensor<8x8xf32>, tensor<8x8xf16>, tensor<f32>, tensor<f32>, tensor<i1>) -> tensor<8x8xf32>
func.func @optimizer_reads_low_precision_gradients(
    %x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"},
    %lr: tensor<f32> {jit.role = "hyper"}, %scale: tensor<f32> {jit.role = "scaler_state"})
    -> (tensor<8x8xf32> {jit.tied = 1 : i64}) {
  %g = jit.matmul %x, %x {transpose_lhs} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %ok = amp.all_finite %g : tensor<8x8xf32>
  %one = jit.constant dense<1.0> : tensor<f32>
  %inv = jit.div %one, %scale : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %w_new = jit.sgd_update %w, %g lr %lr inv_scale %inv predicate %ok
      : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> tensor<8x8xf32>
  return %w_new : tensor<8x8xf32>
}
