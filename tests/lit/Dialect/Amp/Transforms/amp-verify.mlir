// RUN: amp-opt %s -split-input-file --amp-verify -verify-diagnostics | FileCheck %s
// RUN: amp-opt %s -split-input-file --amp-verify="level=O2" -verify-diagnostics
// At O3 deny ops may run in low precision; always_fp32 ops and redundant casts
// are still errors.
// RUN: not amp-opt %s -split-input-file --amp-verify="level=O3" 2>&1 | FileCheck %s --check-prefix=O3
// RUN: not amp-opt %s -split-input-file --amp-verify="level=O7" 2>&1 | FileCheck %s --check-prefix=BADLEVEL

// BADLEVEL: unknown AMP level 'O7'
// (amp-opt echoes the expected-error lines, hence "error: '" in the patterns.)
// O3-NOT: error: '{{[a-z_.]+}}' op {{.*}} is deny
// O3: error: 'jit.sgd_update' op computes in 'f16', but policy 'default'{{.*}} marks it always_fp32
// O3: error: 'amp.cast' op is dead
// O3-NOT: error: '{{[a-z_.]+}}' op {{.*}} is deny

// A correctly rewritten O1 step passes: the matmul in f16, softmax (deny) and
// the loss in fp32, sum in bf16 (infer for bf16), the finiteness check on the
// f16 gradient, which the fp32 update reads as it is; unscaling on its fp32
// cast (amp.unscale_and_check yields its operand's type); one cast per
// (value, type).
// CHECK-LABEL: func.func @valid_step
func.func @valid_step(%x: tensor<4x8xf32> {jit.role = "input"},
                      %w: tensor<8x8xf32> {jit.role = "param"},
                      %t: tensor<4x8xf32> {jit.role = "input"},
                      %lr: tensor<f32> {jit.role = "hyper"},
                      %scale: tensor<f32> {jit.role = "scaler_state"})
    -> (tensor<f32>, tensor<8x8xf32> {jit.tied = 1 : i64}, tensor<8xbf16>) {
  %xh = amp.cast %x : tensor<4x8xf32> to tensor<4x8xf16>
  %wh = amp.cast %w : tensor<8x8xf32> to tensor<8x8xf16>
  %y = jit.matmul %xh, %wh : (tensor<4x8xf16>, tensor<8x8xf16>) -> tensor<4x8xf16>
  %yf = amp.cast %y : tensor<4x8xf16> to tensor<4x8xf32>
  %p = jit.softmax %yf axis = 1 : tensor<4x8xf32>
  %loss = jit.mse_loss %p, %t reduction = mean : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<f32>
  %scaled = amp.scale_loss %loss, %scale : tensor<f32>
  %yb = amp.cast %y : tensor<4x8xf16> to tensor<4x8xbf16>
  %s = jit.sum %yb axes = [0] : tensor<4x8xbf16> -> tensor<8xbf16>
  %dw = jit.matmul %xh, %y {transpose_lhs} : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<8x8xf16>
  %ok = amp.all_finite %dw : tensor<8x8xf16>
  %one = jit.constant dense<1.0> : tensor<f32>
  %inv = jit.div %one, %scale : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %dwf = amp.cast %dw : tensor<8x8xf16> to tensor<8x8xf32>
  %dw_unscaled, %ok2 = amp.unscale_and_check %inv, %dwf
      : (tensor<f32>, tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<i1>)
  %w1 = jit.sgd_update %w, %dw_unscaled lr %lr predicate %ok
      : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<i1>) -> tensor<8x8xf32>
  return %scaled, %w1, %s : tensor<f32>, tensor<8x8xf32>, tensor<8xbf16>
}

// -----

// A conversion reads its operand exactly, so widening the user's f16 value
// (x.half().float()) is no deny op computing in f16, though jit.convert is deny.
// CHECK-LABEL: func.func @valid_widening_conversion
func.func @valid_widening_conversion(%h: tensor<8xf16> {jit.role = "input"}) -> tensor<8xf32> {
  %w = jit.convert %h : tensor<8xf16> -> tensor<8xf32>
  return %w : tensor<8xf32>
}

// -----

// O2's master weights: the update writes the f16 copy, which is fine.
// CHECK-LABEL: func.func @valid_master_weights
func.func @valid_master_weights(%w: tensor<8xf32> {jit.role = "param"},
                                %g: tensor<8xf16> {jit.role = "input"},
                                %lr: tensor<f32> {jit.role = "hyper"},
                                %w16: tensor<8xf16> {jit.role = "param", jit.derived_from = 0 : i64})
    -> (tensor<8xf32> {jit.tied = 0 : i64}, tensor<8xf16> {jit.tied = 3 : i64}) {
  %w1, %c1 = jit.sgd_update %w, %g lr %lr param_copy %w16
      : (tensor<8xf32>, tensor<8xf16>, tensor<f32>, tensor<8xf16>) -> (tensor<8xf32>, tensor<8xf16>)
  return %w1, %c1 : tensor<8xf32>, tensor<8xf16>
}

// -----

// A user's own conversion to f16 (jit.convert, deny) computes on the fp32
// value it reads: fine at O1.
// CHECK-LABEL: func.func @user_conversion
func.func @user_conversion(%x: tensor<4xf32>) -> tensor<4xf16> {
  %h = jit.convert %x : tensor<4xf32> -> tensor<4xf16>
  return %h : tensor<4xf16>
}

// -----

// A user's amp.force_type region may run a deny op in low precision.
// CHECK-LABEL: func.func @forced_region
func.func @forced_region(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
  %p = jit.softmax %x axis = 1 {amp.force_type = f16} : tensor<4x8xf16>
  return %p : tensor<4x8xf16>
}

// -----

// So may an op eager code runs outside autocast (an autograd::function's
// backward), which semantics=autocast runs in its operands' types.
// CHECK-LABEL: func.func @outside_autocast
func.func @outside_autocast(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
  %e = jit.exp %x {amp.outside_autocast} : tensor<4x8xf16>
  return %e : tensor<4x8xf16>
}

// -----

func.func @deny_in_f16(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
  // expected-error @below {{'jit.softmax' op computes in 'f16', but its category for 'f16' is deny (policy 'default', entry at}}
  %p = jit.softmax %x axis = 1 : tensor<4x8xf16>
  return %p : tensor<4x8xf16>
}

// -----

// sum is deny for f16 (it is infer for bf16, see @valid_step).
func.func @sum_in_f16(%x: tensor<4x8xf16>) -> tensor<8xf16> {
  // expected-error @below {{'jit.sum' op computes in 'f16', but its category for 'f16' is deny}}
  %s = jit.sum %x axes = [0] : tensor<4x8xf16> -> tensor<8xf16>
  return %s : tensor<8xf16>
}

// -----

// The policy's attribute condition decides: pow with exponent 2 is deny.
func.func @deny_by_condition(%x: tensor<4xf16>) -> tensor<4xf16> {
  // expected-error @below {{'jit.pow' op computes in 'f16', but its category for 'f16' is deny (policy 'default', entry at}}
  %p = jit.pow %x exponent = 2.0 : tensor<4xf16>
  return %p : tensor<4xf16>
}

// -----

// Optimizer arithmetic is fp32 at every level: an update of an f16 parameter.
func.func @optimizer_in_f16(%w: tensor<8xf16>, %g: tensor<8xf16>, %lr: tensor<f32>) -> tensor<8xf16> {
  // expected-error @below {{'jit.sgd_update' op computes in 'f16', but policy 'default'}}
  %w1 = jit.sgd_update %w, %g lr %lr : (tensor<8xf16>, tensor<8xf16>, tensor<f32>) -> tensor<8xf16>
  return %w1 : tensor<8xf16>
}

// -----

// Unscaling an f16 gradient rounds the unscaled values to f16 (and small ones
// underflow): unscale_and_check is scaler arithmetic, fp32 at every level.
func.func @unscale_in_f16(%inv: tensor<f32>, %g: tensor<8xf16>) -> tensor<8xf16> {
  // expected-error @below {{'amp.unscale_and_check' op computes in 'f16', but policy 'default'}}
  %u, %ok = amp.unscale_and_check %inv, %g : (tensor<f32>, tensor<8xf16>) -> (tensor<8xf16>, tensor<i1>)
  return %u : tensor<8xf16>
}

// -----

func.func @dead_cast(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'amp.cast' op is dead: nothing reads its result}}
  %h = amp.cast %x : tensor<4xf32> to tensor<4xf16>
  return %x : tensor<4xf32>
}

// -----

func.func @identity_cast(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'amp.cast' op casts 'tensor<4xf32>' to itself}}
  %same = amp.cast %x : tensor<4xf32> to tensor<4xf32>
  return %same : tensor<4xf32>
}

// -----

func.func @foldable_round_trip(%h: tensor<4xf16>) -> tensor<4xf16> {
  // expected-note @below {{the cast it reads}}
  %w = amp.cast %h : tensor<4xf16> to tensor<4xf32>
  // expected-error @below {{'amp.cast' op reads a cast from 'f16' to 'f32', which loses nothing, so the chain is exactly the original value}}
  %back = amp.cast %w : tensor<4xf32> to tensor<4xf16>
  return %back : tensor<4xf16>
}

// -----

func.func @foldable_chain(%h: tensor<4xf16>) -> tensor<4xbf16> {
  // expected-note @below {{the cast it reads}}
  %w = amp.cast %h : tensor<4xf16> to tensor<4xf32>
  // expected-error @below {{so the chain is exactly one cast from 'f16' to 'bf16'}}
  %b = amp.cast %w : tensor<4xf32> to tensor<4xbf16>
  return %b : tensor<4xbf16>
}

// -----

// A lossy round trip is not foldable by default: no error.
// CHECK-LABEL: func.func @lossy_round_trip_is_kept
func.func @lossy_round_trip_is_kept(%x: tensor<4xf32>) -> tensor<4xf32> {
  %h = amp.cast %x : tensor<4xf32> to tensor<4xf16>
  %w = amp.cast %h : tensor<4xf16> to tensor<4xf32>
  return %w : tensor<4xf32>
}

// -----

func.func @duplicate_cast(%x: tensor<4xf32>) -> tensor<4xf16> {
  %e = jit.exp %x : tensor<4xf32>
  // expected-note @below {{the earlier cast}}
  %a = amp.cast %e : tensor<4xf32> to tensor<4xf16>
  // expected-error @below {{'amp.cast' op duplicates an earlier cast of the same value to 'tensor<4xf16>'}}
  %b = amp.cast %e : tensor<4xf32> to tensor<4xf16>
  %s = jit.add %a, %b : (tensor<4xf16>, tensor<4xf16>) -> tensor<4xf16>
  return %s : tensor<4xf16>
}

// -----

func.func @parameter_cast_twice(%x: tensor<4x8xf16> {jit.role = "input"},
                                %w: tensor<8x8xf32> {jit.role = "param"}) -> tensor<4x8xf16> {
  // expected-note @below {{the earlier cast}}
  %w1 = amp.cast %w : tensor<8x8xf32> to tensor<8x8xf16>
  %y = jit.matmul %x, %w1 : (tensor<4x8xf16>, tensor<8x8xf16>) -> tensor<4x8xf16>
  // expected-error @below {{'amp.cast' op casts fp32 parameter argument #1 to 'tensor<8x8xf16>' a second time}}
  %w2 = amp.cast %w : tensor<8x8xf32> to tensor<8x8xf16>
  %z = jit.matmul %y, %w2 : (tensor<4x8xf16>, tensor<8x8xf16>) -> tensor<4x8xf16>
  return %z : tensor<4x8xf16>
}
