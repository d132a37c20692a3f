// RUN: amp-opt %s -split-input-file -verify-diagnostics

// One section per verifier rule of the amp ops (AmpOps.cpp and their ODS
// constraints).

//===----------------------------------------------------------------------===//
// amp.cast
//===----------------------------------------------------------------------===//

func.func @cast_shape(%w: tensor<4x8xf32>) -> tensor<32xf16> {
  // expected-error @below {{'amp.cast' op result 'tensor<32xf16>' must have the shape of operand 'input', 'tensor<4x8xf32>'; a cast changes only the element type}}
  %0 = amp.cast %w : tensor<4x8xf32> to tensor<32xf16>
  return %0 : tensor<32xf16>
}

// -----

// Integer conversions are the user's jit.convert, never an AMP cast.
func.func @cast_to_integer(%w: tensor<4xf32>) -> tensor<4xi64> {
  // expected-error @below {{'amp.cast' op result #0 must be statically shaped tensor (at most 2^48 elements) of f16, bf16, f32 or f64 values, but got 'tensor<4xi64>'}}
  %0 = amp.cast %w : tensor<4xf32> to tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @cast_from_bool(%m: tensor<4xi1>) -> tensor<4xf16> {
  // expected-error @below {{'amp.cast' op operand #0 must be statically shaped tensor (at most 2^48 elements) of f16, bf16, f32 or f64 values, but got 'tensor<4xi1>'}}
  %0 = amp.cast %m : tensor<4xi1> to tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

func.func @cast_dynamic_shape(%w: tensor<?xf32>) -> tensor<?xf16> {
  // expected-error @below {{'amp.cast' op operand #0 must be statically shaped tensor (at most 2^48 elements) of f16, bf16, f32 or f64 values, but got 'tensor<?xf32>'}}
  %0 = amp.cast %w : tensor<?xf32> to tensor<?xf16>
  return %0 : tensor<?xf16>
}

//===----------------------------------------------------------------------===//
// amp.scale_loss
//===----------------------------------------------------------------------===//

// -----

// Backward starts from a scalar: an unreduced loss cannot be scaled.
func.func @scale_loss_not_scalar(%loss: tensor<4xf32>, %scale: tensor<f32>) -> tensor<4xf32> {
  // expected-error @below {{'amp.scale_loss' op operand 'loss' of type 'tensor<4xf32>' must hold a single value; backward starts from a scalar loss}}
  %0 = amp.scale_loss %loss, %scale : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @scale_loss_f16_scale(%loss: tensor<f16>, %scale: tensor<f16>) -> tensor<f16> {
  // expected-error @below {{'amp.scale_loss' op operand #1 must be 0D tensor of 32-bit float values, but got 'tensor<f16>'}}
  %0 = "amp.scale_loss"(%loss, %scale) : (tensor<f16>, tensor<f16>) -> tensor<f16>
  return %0 : tensor<f16>
}

// -----

func.func @scale_loss_result_type(%loss: tensor<f16>, %scale: tensor<f32>) -> tensor<f32> {
  // expected-error @below {{'amp.scale_loss' op failed to verify that all of {loss, result} have same type}}
  %0 = "amp.scale_loss"(%loss, %scale) : (tensor<f16>, tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}

//===----------------------------------------------------------------------===//
// amp.all_finite, amp.unscale_and_check
//===----------------------------------------------------------------------===//

// -----

func.func @all_finite_no_gradients() -> tensor<i1> {
  // expected-error @below {{'amp.all_finite' op needs at least one gradient to check}}
  %0 = "amp.all_finite"() : () -> tensor<i1>
  return %0 : tensor<i1>
}

// -----

func.func @all_finite_integer_gradient(%g: tensor<4xi64>) -> tensor<i1> {
  // expected-error @below {{'amp.all_finite' op operand #0 must be variadic of statically shaped tensor (at most 2^48 elements) of f16, bf16, f32 or f64 values, but got 'tensor<4xi64>'}}
  %0 = amp.all_finite %g : tensor<4xi64>
  return %0 : tensor<i1>
}

// -----

func.func @unscale_and_check_no_gradients(%inv: tensor<f32>) -> tensor<i1> {
  // expected-error @below {{'amp.unscale_and_check' op needs at least one gradient to unscale}}
  %0 = amp.unscale_and_check %inv, : (tensor<f32>) -> tensor<i1>
  return %0 : tensor<i1>
}

// -----

// Unscaling keeps each gradient's precision: the result is not widened.
func.func @unscale_and_check_result_types(%inv: tensor<f32>, %g: tensor<4xf16>) -> (tensor<4xf32>, tensor<i1>) {
  // expected-error @below {{'amp.unscale_and_check' op inferred type(s) 'tensor<4xf16>', 'tensor<i1>' are incompatible with return type(s) of operation 'tensor<4xf32>', 'tensor<i1>'}}
  // expected-error @below {{failed to infer returned types}}
  %0, %ok = amp.unscale_and_check %inv, %g : (tensor<f32>, tensor<4xf16>) -> (tensor<4xf32>, tensor<i1>)
  return %0, %ok : tensor<4xf32>, tensor<i1>
}

// -----

func.func @unscale_and_check_inv_scale_type(%inv: tensor<1xf32>, %g: tensor<4xf16>) -> (tensor<4xf16>, tensor<i1>) {
  // expected-error @below {{'amp.unscale_and_check' op operand #0 must be 0D tensor of 32-bit float values, but got 'tensor<1xf32>'}}
  %0, %ok = amp.unscale_and_check %inv, %g : (tensor<1xf32>, tensor<4xf16>) -> (tensor<4xf16>, tensor<i1>)
  return %0, %ok : tensor<4xf16>, tensor<i1>
}

//===----------------------------------------------------------------------===//
// amp.update_scale
//===----------------------------------------------------------------------===//

// -----

func.func @update_scale_growth_factor_one(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op growth_factor = 1.000000e+00 must be finite and greater than 1}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {growth_factor = 1.0}
  return
}

// -----

func.func @update_scale_growth_factor_inf(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op growth_factor = INF must be finite and greater than 1}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {growth_factor = 0x7FF0000000000000 : f64}
  return
}

// -----

func.func @update_scale_growth_factor_nan(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op growth_factor = nan must be finite and greater than 1}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {growth_factor = 0x7FF8000000000000 : f64}
  return
}

// -----

func.func @update_scale_backoff_factor_one(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op backoff_factor = 1.000000e+00 must be in (0, 1)}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {backoff_factor = 1.0}
  return
}

// -----

func.func @update_scale_backoff_factor_zero(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op backoff_factor = 0.000000e+00 must be in (0, 1)}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {backoff_factor = 0.0}
  return
}

// -----

func.func @update_scale_growth_interval(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op growth_interval = 0 must be at least 1}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {growth_interval = 0 : i64}
  return
}

// -----

// A negative interval is reported as written, not as its unsigned reading.
func.func @update_scale_negative_growth_interval(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op growth_interval = -1 must be at least 1}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {growth_interval = -1 : i64}
  return
}

// -----

// Paddle's decr_every_n_nan_or_inf maps to backoff_interval.
func.func @update_scale_backoff_interval(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op backoff_interval = -2 must be at least 1}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {backoff_interval = -2 : i64}
  return
}

// -----

func.func @update_scale_negative_min_scale(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op min_scale = -1.000000e+00 must be finite and non-negative}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {min_scale = -1.0}
  return
}

// -----

func.func @update_scale_infinite_min_scale(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op min_scale = INF must be finite and non-negative}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {min_scale = 0x7FF0000000000000 : f64}
  return
}

// -----

func.func @update_scale_max_below_min(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op max_scale = 5.000000e-01 must be positive and at least min_scale (1.000000e+00)}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {min_scale = 1.0, max_scale = 0.5}
  return
}

// -----

func.func @update_scale_nan_max_scale(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op max_scale = nan must be positive and at least min_scale}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {max_scale = 0x7FF8000000000000 : f64}
  return
}

// -----

func.func @update_scale_interval_type(%s: tensor<f32>, %n: tensor<i64>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op attribute 'growth_interval' failed to satisfy constraint: 64-bit signless integer attribute}}
  %0:4 = amp.update_scale %s, %n, %n, %n, %ok {growth_interval = 2.0e+03}
  return
}

// -----

// The scaler's counters are i64 state tensors.
func.func @update_scale_counter_type(%s: tensor<f32>, %n: tensor<i32>, %ok: tensor<i1>) {
  // expected-error @below {{'amp.update_scale' op operand #1 must be 0D tensor of 64-bit signless integer values, but got 'tensor<i32>'}}
  %0:4 = "amp.update_scale"(%s, %n, %n, %n, %ok)
      : (tensor<f32>, tensor<i32>, tensor<i32>, tensor<i32>, tensor<i1>) -> (tensor<f32>, tensor<i32>, tensor<i32>, tensor<i32>)
  return
}

// -----

// Region attributes recorded by autocast scopes.
func.func @disabled_not_unit(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu' op attribute 'amp.disabled' must be a unit attribute, got true}}
  %0 = jit.relu %x {amp.disabled = true} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @force_type_not_float(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu' op attribute 'amp.force_type' must be one of f16, bf16, f32, got i8}}
  %0 = jit.relu %x {amp.force_type = i8} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @disabled_and_forced(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu' op has both 'amp.disabled' and 'amp.force_type': AMP cannot be off and forced at once}}
  %0 = jit.relu %x {amp.disabled, amp.force_type = f16} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unknown_amp_attribute(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu' op unknown amp attribute 'amp.fast' (known: 'amp.disabled', 'amp.force_type', 'amp.outside_autocast')}}
  %0 = jit.relu %x {amp.fast} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @outside_autocast_not_unit(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu' op attribute 'amp.outside_autocast' must be a unit attribute, got 1 : i64}}
  %0 = jit.relu %x {amp.outside_autocast = 1} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @outside_autocast_in_a_region(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu' op has both 'amp.outside_autocast' and 'amp.disabled': the region already decides its precision}}
  %0 = jit.relu %x {amp.disabled, amp.outside_autocast} : tensor<4xf32>
  return %0 : tensor<4xf32>
}
