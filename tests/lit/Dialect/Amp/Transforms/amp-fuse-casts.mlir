// RUN: amp-opt %s -split-input-file --amp-fuse-casts | FileCheck %s
// RUN: amp-opt %s -split-input-file --amp-fuse-casts="fold-round-trips" | FileCheck %s --check-prefix=ROUND
// RUN: amp-opt %s -split-input-file --amp-fuse-casts="policy=pytorch" | FileCheck %s --check-prefix=PYTORCH
// RUN: not amp-opt %s -split-input-file --amp-fuse-casts="policy=nonsense" 2>&1 | FileCheck %s --check-prefix=BADPOLICY

// BADPOLICY: unknown policy 'nonsense'

// An identity cast is its input; a cast nobody reads disappears.
// CHECK-LABEL: func.func @identity_and_dead
// CHECK-NEXT:    return %arg0
func.func @identity_and_dead(%x: tensor<4xf32>) -> tensor<4xf32> {
  %same = amp.cast %x : tensor<4xf32> to tensor<4xf32>
  %unused = amp.cast %x : tensor<4xf32> to tensor<4xf16>
  return %same : tensor<4xf32>
}

// -----

// A widening first cast loses nothing, so the chain is exact: f16 -> f32 -> f16
// is the value itself, and f16 -> f32 -> bf16 is the single cast f16 -> bf16.
// CHECK-LABEL: func.func @exact_chains
// CHECK-NEXT:    %[[BF:.*]] = amp.cast %arg0 : tensor<4xf16> to tensor<4xbf16>
// CHECK-NEXT:    return %arg0, %[[BF]]
func.func @exact_chains(%h: tensor<4xf16>) -> (tensor<4xf16>, tensor<4xbf16>) {
  %w = amp.cast %h : tensor<4xf16> to tensor<4xf32>
  %back = amp.cast %w : tensor<4xf32> to tensor<4xf16>
  %other = amp.cast %w : tensor<4xf32> to tensor<4xbf16>
  return %back, %other : tensor<4xf16>, tensor<4xbf16>
}

// -----

// The middle cast is still read: only the chain through it folds.
// CHECK-LABEL: func.func @exact_chain_shared_middle
// CHECK-NEXT:    %[[W:.*]] = amp.cast %arg0 : tensor<4xf16> to tensor<4xf32>
// CHECK-NEXT:    %[[E:.*]] = jit.exp %[[W]]
// CHECK-NEXT:    return %[[E]], %arg0
func.func @exact_chain_shared_middle(%h: tensor<4xf16>) -> (tensor<4xf32>, tensor<4xf16>) {
  %w = amp.cast %h : tensor<4xf16> to tensor<4xf32>
  %e = jit.exp %w : tensor<4xf32>
  %back = amp.cast %w : tensor<4xf32> to tensor<4xf16>
  return %e, %back : tensor<4xf32>, tensor<4xf16>
}

// -----

// The lossy round trip f32 -> f16 -> f32 changes values: kept unless
// fold-round-trips asks for it.
// CHECK-LABEL: func.func @lossy_round_trip
// CHECK-NEXT:    %[[H:.*]] = amp.cast %arg0 : tensor<4xf32> to tensor<4xf16>
// CHECK-NEXT:    %[[W:.*]] = amp.cast %[[H]] : tensor<4xf16> to tensor<4xf32>
// CHECK-NEXT:    return %[[W]]
// ROUND-LABEL: func.func @lossy_round_trip
// ROUND-NEXT:    return %arg0
func.func @lossy_round_trip(%x: tensor<4xf32>) -> tensor<4xf32> {
  %h = amp.cast %x : tensor<4xf32> to tensor<4xf16>
  %w = amp.cast %h : tensor<4xf16> to tensor<4xf32>
  return %w : tensor<4xf32>
}

// -----

// Narrowing first: f32 -> f16 -> bf16 overflows where f32 -> bf16 does not,
// f32 -> bf16 -> f16 drops significand bits. Neither folds, with or without
// fold-round-trips (they are not round trips).
// CHECK-LABEL: func.func @inexact_chains
// CHECK-NEXT:    %[[H:.*]] = amp.cast %arg0 : tensor<4xf32> to tensor<4xf16>
// CHECK-NEXT:    %[[HB:.*]] = amp.cast %[[H]] : tensor<4xf16> to tensor<4xbf16>
// CHECK-NEXT:    %[[B:.*]] = amp.cast %arg0 : tensor<4xf32> to tensor<4xbf16>
// CHECK-NEXT:    %[[BH:.*]] = amp.cast %[[B]] : tensor<4xbf16> to tensor<4xf16>
// CHECK-NEXT:    return %[[HB]], %[[BH]]
// ROUND-LABEL: func.func @inexact_chains
// ROUND-COUNT-4: amp.cast
// ROUND-NEXT:    return
func.func @inexact_chains(%x: tensor<4xf32>) -> (tensor<4xbf16>, tensor<4xf16>) {
  %h = amp.cast %x : tensor<4xf32> to tensor<4xf16>
  %hb = amp.cast %h : tensor<4xf16> to tensor<4xbf16>
  %b = amp.cast %x : tensor<4xf32> to tensor<4xbf16>
  %bh = amp.cast %b : tensor<4xbf16> to tensor<4xf16>
  return %hb, %bh : tensor<4xbf16>, tensor<4xf16>
}

// -----

// One cast per (value, type), right after the value's definition, shared by
// every reader; a second type gets its own cast.
// CHECK-LABEL: func.func @duplicates_of_a_result
// CHECK-NEXT:    %[[E:.*]] = jit.exp %arg0
// CHECK-NEXT:    %[[H:.*]] = amp.cast %[[E]] : tensor<4x4xf32> to tensor<4x4xf16>
// CHECK-NEXT:    %[[A:.*]] = jit.add %arg1, %[[H]]
// CHECK-NEXT:    %[[M:.*]] = jit.mul %[[A]], %[[H]]
// CHECK-NEXT:    %[[B:.*]] = amp.cast %[[E]] : tensor<4x4xf32> to tensor<4x4xbf16>
// CHECK-NEXT:    return %[[M]], %[[B]]
func.func @duplicates_of_a_result(%x: tensor<4x4xf32>, %y: tensor<4x4xf16>)
    -> (tensor<4x4xf16>, tensor<4x4xbf16>) {
  %e = jit.exp %x : tensor<4x4xf32>
  %h1 = amp.cast %e : tensor<4x4xf32> to tensor<4x4xf16>
  %a = jit.add %y, %h1 : (tensor<4x4xf16>, tensor<4x4xf16>) -> tensor<4x4xf16>
  %h2 = amp.cast %e : tensor<4x4xf32> to tensor<4x4xf16>
  %m = jit.mul %a, %h2 : (tensor<4x4xf16>, tensor<4x4xf16>) -> tensor<4x4xf16>
  %b = amp.cast %e : tensor<4x4xf32> to tensor<4x4xbf16>
  return %m, %b : tensor<4x4xf16>, tensor<4x4xbf16>
}

// -----

// The step's guarantee: each fp32 parameter is cast at most once per type,
// at the start of the function, however many ops read it (here forward and
// backward matmuls), and casts of several parameters keep their order.
// CHECK-LABEL: func.func @one_cast_per_parameter
// CHECK-NEXT:    %[[W:.*]] = amp.cast %arg1 : tensor<8x4xf32> to tensor<8x4xf16>
// CHECK-NEXT:    %[[V:.*]] = amp.cast %arg2 : tensor<4x8xf32> to tensor<4x8xf16>
// CHECK-NEXT:    %[[X:.*]] = jit.matmul %arg0, %[[W]]
// CHECK-NEXT:    %[[Y:.*]] = jit.matmul %[[X]], %[[V]]
// CHECK-NEXT:    %[[DX:.*]] = jit.matmul %[[Y]], %[[V]] {transpose_rhs}
// CHECK-NEXT:    %[[DA:.*]] = jit.matmul %[[DX]], %[[W]] {transpose_rhs}
// CHECK-NEXT:    return
// CHECK-NOT:   amp.cast
func.func @one_cast_per_parameter(%a: tensor<2x8xf16> {jit.role = "input"},
                                  %w: tensor<8x4xf32> {jit.role = "param"},
                                  %v: tensor<4x8xf32> {jit.role = "param"})
    -> tensor<2x8xf16> {
  %w1 = amp.cast %w : tensor<8x4xf32> to tensor<8x4xf16>
  %x = jit.matmul %a, %w1 : (tensor<2x8xf16>, tensor<8x4xf16>) -> tensor<2x4xf16>
  %v1 = amp.cast %v : tensor<4x8xf32> to tensor<4x8xf16>
  %y = jit.matmul %x, %v1 : (tensor<2x4xf16>, tensor<4x8xf16>) -> tensor<2x8xf16>
  %v2 = amp.cast %v : tensor<4x8xf32> to tensor<4x8xf16>
  %dx = jit.matmul %y, %v2 {transpose_rhs} : (tensor<2x8xf16>, tensor<4x8xf16>) -> tensor<2x4xf16>
  %w2 = amp.cast %w : tensor<8x4xf32> to tensor<8x4xf16>
  %da = jit.matmul %dx, %w2 {transpose_rhs} : (tensor<2x4xf16>, tensor<8x4xf16>) -> tensor<2x8xf16>
  return %da : tensor<2x8xf16>
}

// -----

// A narrowing cast after a broadcast casts the small input instead.
// CHECK-LABEL: func.func @hoist_above_broadcast
// CHECK-NEXT:    %[[H:.*]] = amp.cast %arg0 : tensor<8xf32> to tensor<8xf16>
// CHECK-NEXT:    %[[B:.*]] = jit.broadcast_to %[[H]] : tensor<8xf16> -> tensor<4x8xf16>
// CHECK-NEXT:    return %[[B]]
// PYTORCH-LABEL: func.func @hoist_above_broadcast
// PYTORCH-NEXT:    jit.broadcast_to %arg0 : tensor<8xf32> -> tensor<4x8xf32>
// PYTORCH-NEXT:    amp.cast
func.func @hoist_above_broadcast(%b: tensor<8xf32>) -> tensor<4x8xf16> {
  %bb = jit.broadcast_to %b : tensor<8xf32> -> tensor<4x8xf32>
  %h = amp.cast %bb : tensor<4x8xf32> to tensor<4x8xf16>
  return %h : tensor<4x8xf16>
}

// -----

// Hoisted across a transpose and a reshape, the cast reaches the parameter
// and merges with its other cast: one cast of %w per step.
// CHECK-LABEL: func.func @hoist_to_the_parameter
// CHECK-NEXT:    %[[W:.*]] = amp.cast %arg1 : tensor<8x4xf32> to tensor<8x4xf16>
// CHECK-NEXT:    %[[Y:.*]] = jit.matmul %arg0, %[[W]]
// CHECK-NEXT:    %[[T:.*]] = jit.transpose %[[W]] perm = [1, 0] : tensor<8x4xf16> -> tensor<4x8xf16>
// CHECK-NEXT:    %[[R:.*]] = jit.reshape %[[T]] : tensor<4x8xf16> -> tensor<32xf16>
// CHECK-NEXT:    return %[[Y]], %[[R]]
// PYTORCH-LABEL: func.func @hoist_to_the_parameter
// PYTORCH-NEXT:    amp.cast %arg1
// PYTORCH-NEXT:    jit.matmul
// PYTORCH-NEXT:    jit.transpose %arg1
// PYTORCH-NEXT:    jit.reshape
// PYTORCH-NEXT:    amp.cast
func.func @hoist_to_the_parameter(%x: tensor<2x8xf16> {jit.role = "input"},
                                  %w: tensor<8x4xf32> {jit.role = "param"})
    -> (tensor<2x4xf16>, tensor<32xf16>) {
  %h = amp.cast %w : tensor<8x4xf32> to tensor<8x4xf16>
  %y = jit.matmul %x, %h : (tensor<2x8xf16>, tensor<8x4xf16>) -> tensor<2x4xf16>
  %t = jit.transpose %w perm = [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  %r = jit.reshape %t : tensor<4x8xf32> -> tensor<32xf32>
  %rh = amp.cast %r : tensor<32xf32> to tensor<32xf16>
  return %y, %rh : tensor<2x4xf16>, tensor<32xf16>
}

// -----

// relu is clear: the cast moves above it.
// CHECK-LABEL: func.func @hoist_above_relu
// CHECK-NEXT:    %[[H:.*]] = amp.cast %arg0 : tensor<4xf32> to tensor<4xf16>
// CHECK-NEXT:    %[[R:.*]] = jit.relu %[[H]] : tensor<4xf16>
// CHECK-NEXT:    return %[[R]]
func.func @hoist_above_relu(%x: tensor<4xf32>) -> tensor<4xf16> {
  %r = jit.relu %x : tensor<4xf32>
  %h = amp.cast %r : tensor<4xf32> to tensor<4xf16>
  return %h : tensor<4xf16>
}

// -----

// Not moved: the broadcast's fp32 result has another reader, so it would be
// computed twice.
// CHECK-LABEL: func.func @other_readers_keep_the_cast
// CHECK-NEXT:    %[[B:.*]] = jit.broadcast_to %arg0 : tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[H:.*]] = amp.cast %[[B]] : tensor<4x8xf32> to tensor<4x8xf16>
// CHECK-NEXT:    %[[E:.*]] = jit.exp %[[B]]
// CHECK-NEXT:    return %[[H]], %[[E]]
func.func @other_readers_keep_the_cast(%b: tensor<8xf32>) -> (tensor<4x8xf16>, tensor<4x8xf32>) {
  %bb = jit.broadcast_to %b : tensor<8xf32> -> tensor<4x8xf32>
  %h = amp.cast %bb : tensor<4x8xf32> to tensor<4x8xf16>
  %e = jit.exp %bb : tensor<4x8xf32>
  return %h, %e : tensor<4x8xf16>, tensor<4x8xf32>
}

// -----

// Not moved: casting the input of a reduction moves more bytes than casting
// its small result.
// CHECK-LABEL: func.func @reduction_keeps_the_cast_after
// CHECK-NEXT:    %[[M:.*]] = jit.max %arg0 axes = [1] : tensor<64x32xf32> -> tensor<64xf32>
// CHECK-NEXT:    %[[H:.*]] = amp.cast %[[M]] : tensor<64xf32> to tensor<64xf16>
// CHECK-NEXT:    return %[[H]]
func.func @reduction_keeps_the_cast_after(%x: tensor<64x32xf32>) -> tensor<64xf16> {
  %m = jit.max %x axes = [1] : tensor<64x32xf32> -> tensor<64xf32>
  %h = amp.cast %m : tensor<64xf32> to tensor<64xf16>
  return %h : tensor<64xf16>
}

// -----

// Not moved: a select of two fp32 tensors would need two casts for one, no
// fewer bytes...
// CHECK-LABEL: func.func @select_of_fp32_inputs_keeps_the_cast_after
// CHECK-NEXT:    %[[S:.*]] = jit.select %arg0, %arg1, %arg2 : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[H:.*]] = amp.cast %[[S]] : tensor<4xf32> to tensor<4xf16>
// CHECK-NEXT:    return %[[H]]
func.func @select_of_fp32_inputs_keeps_the_cast_after(%c: tensor<4xi1>, %x: tensor<4xf32>,
                                                      %y: tensor<4xf32>) -> tensor<4xf16> {
  %s = jit.select %c, %x, %y : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %sh = amp.cast %s : tensor<4xf32> to tensor<4xf16>
  return %sh : tensor<4xf16>
}

// -----

// ...but when its inputs are cast to f16 anyway, it selects among those.
// CHECK-LABEL: func.func @select_of_inputs_cast_anyway_moves
// CHECK-NEXT:    %[[A:.*]] = amp.cast %arg1 : tensor<4xf32> to tensor<4xf16>
// CHECK-NEXT:    %[[B:.*]] = amp.cast %arg2 : tensor<4xf32> to tensor<4xf16>
// CHECK-NEXT:    %[[S:.*]] = jit.select %arg0, %[[A]], %[[B]] : (tensor<4xi1>, tensor<4xf16>, tensor<4xf16>) -> tensor<4xf16>
// CHECK-NEXT:    %[[M:.*]] = jit.mul %[[A]], %[[B]]
// CHECK-NEXT:    return %[[S]], %[[M]]
func.func @select_of_inputs_cast_anyway_moves(%c: tensor<4xi1>, %x: tensor<4xf32>, %y: tensor<4xf32>)
    -> (tensor<4xf16>, tensor<4xf16>) {
  %s = jit.select %c, %x, %y : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %sh = amp.cast %s : tensor<4xf32> to tensor<4xf16>
  %xh = amp.cast %x : tensor<4xf32> to tensor<4xf16>
  %yh = amp.cast %y : tensor<4xf32> to tensor<4xf16>
  %m = jit.mul %xh, %yh : (tensor<4xf16>, tensor<4xf16>) -> tensor<4xf16>
  return %sh, %m : tensor<4xf16>, tensor<4xf16>
}

// -----

// Not moved: add is infer, not clear; a relu in an amp.disabled region keeps
// the precision the user traced it in.
// CHECK-LABEL: func.func @only_clear_ops_outside_amp_regions
// CHECK-NEXT:    jit.add %arg0, %arg0
// CHECK-NEXT:    amp.cast
// CHECK-NEXT:    jit.relu %arg0 {amp.disabled}
// CHECK-NEXT:    amp.cast
func.func @only_clear_ops_outside_amp_regions(%x: tensor<4xf32>) -> (tensor<4xf16>, tensor<4xf16>) {
  %s = jit.add %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %sh = amp.cast %s : tensor<4xf32> to tensor<4xf16>
  %r = jit.relu %x {amp.disabled} : tensor<4xf32>
  %rh = amp.cast %r : tensor<4xf32> to tensor<4xf16>
  return %sh, %rh : tensor<4xf16>, tensor<4xf16>
}

// -----

// A widening cast moves below a reduction: reduce the f16 values, widen the
// small result (max of the widened values is the widened max).
// CHECK-LABEL: func.func @sink_below_reduction
// CHECK-NEXT:    %[[M:.*]] = jit.max %arg0 axes = [1] : tensor<64x32xf16> -> tensor<64xf16>
// CHECK-NEXT:    %[[W:.*]] = amp.cast %[[M]] : tensor<64xf16> to tensor<64xf32>
// CHECK-NEXT:    return %[[W]]
func.func @sink_below_reduction(%h: tensor<64x32xf16>) -> tensor<64xf32> {
  %w = amp.cast %h : tensor<64x32xf16> to tensor<64x32xf32>
  %m = jit.max %w axes = [1] : tensor<64x32xf32> -> tensor<64xf32>
  return %m : tensor<64xf32>
}

// -----

// Not moved: widening before a broadcast moves fewer bytes than after it.
// CHECK-LABEL: func.func @widening_stays_before_broadcast
// CHECK-NEXT:    %[[W:.*]] = amp.cast %arg0 : tensor<8xf16> to tensor<8xf32>
// CHECK-NEXT:    %[[B:.*]] = jit.broadcast_to %[[W]] : tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    return %[[B]]
func.func @widening_stays_before_broadcast(%h: tensor<8xf16>) -> tensor<4x8xf32> {
  %w = amp.cast %h : tensor<8xf16> to tensor<8xf32>
  %b = jit.broadcast_to %w : tensor<8xf32> -> tensor<4x8xf32>
  return %b : tensor<4x8xf32>
}

// -----

// Widen, reshape, narrow: the reshape runs in f16 and both casts vanish.
// CHECK-LABEL: func.func @casts_around_a_reshape_vanish
// CHECK-NEXT:    %[[R:.*]] = jit.reshape %arg0 : tensor<4x8xf16> -> tensor<32xf16>
// CHECK-NEXT:    return %[[R]]
func.func @casts_around_a_reshape_vanish(%h: tensor<4x8xf16>) -> tensor<32xf16> {
  %w = amp.cast %h : tensor<4x8xf16> to tensor<4x8xf32>
  %r = jit.reshape %w : tensor<4x8xf32> -> tensor<32xf32>
  %n = amp.cast %r : tensor<32xf32> to tensor<32xf16>
  return %n : tensor<32xf16>
}

// -----

// Policy conditions count: pow with exponent 1 is the identity (clear), so the
// cast moves above it; pow with exponent 2 is deny and keeps the cast after.
// CHECK-LABEL: func.func @clear_by_attribute_condition
// CHECK-NEXT:    %[[H:.*]] = amp.cast %arg0 : tensor<4xf32> to tensor<4xf16>
// CHECK-NEXT:    %[[ONE:.*]] = jit.pow %[[H]] exponent = 1.000000e+00 : tensor<4xf16>
// CHECK-NEXT:    %[[SQ:.*]] = jit.pow %arg0 exponent = 2.000000e+00 : tensor<4xf32>
// CHECK-NEXT:    %[[SQH:.*]] = amp.cast %[[SQ]] : tensor<4xf32> to tensor<4xf16>
// CHECK-NEXT:    return %[[ONE]], %[[SQH]]
func.func @clear_by_attribute_condition(%x: tensor<4xf32>) -> (tensor<4xf16>, tensor<4xf16>) {
  %one = jit.pow %x exponent = 1.0 : tensor<4xf32>
  %oneh = amp.cast %one : tensor<4xf32> to tensor<4xf16>
  %sq = jit.pow %x exponent = 2.0 : tensor<4xf32>
  %sqh = amp.cast %sq : tensor<4xf32> to tensor<4xf16>
  return %oneh, %sqh : tensor<4xf16>, tensor<4xf16>
}
