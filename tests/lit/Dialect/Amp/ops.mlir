// RUN: amp-opt %s | FileCheck %s
// RUN: amp-opt %s | amp-opt | FileCheck %s
// RUN: amp-opt %s --mlir-print-op-generic | amp-opt | FileCheck %s

// Round trip of every amp op in its custom syntax: amp.cast, amp.scale_loss,
// amp.all_finite, amp.unscale_and_check and amp.update_scale (PyTorch
// defaults, which the printer elides, and Paddle-style attributes).

// CHECK-LABEL: func.func @cast(
func.func @cast(%w: tensor<4x8xf32>, %h: tensor<8xf16>, %b: tensor<bf16>, %d: tensor<2x2xf64>)
    -> (tensor<4x8xf16>, tensor<4x8xbf16>, tensor<8xf32>, tensor<f64>, tensor<2x2xf32>, tensor<4x8xf32>) {
  // CHECK-NEXT: %[[A:.*]] = amp.cast %arg0 : tensor<4x8xf32> to tensor<4x8xf16>
  // CHECK-NEXT: %[[B:.*]] = amp.cast %arg0 : tensor<4x8xf32> to tensor<4x8xbf16>
  // CHECK-NEXT: %[[C:.*]] = amp.cast %arg1 : tensor<8xf16> to tensor<8xf32>
  // CHECK-NEXT: %[[D:.*]] = amp.cast %arg2 : tensor<bf16> to tensor<f64>
  // CHECK-NEXT: %[[E:.*]] = amp.cast %arg3 : tensor<2x2xf64> to tensor<2x2xf32>
  // CHECK-NEXT: %[[F:.*]] = amp.cast %arg0 : tensor<4x8xf32> to tensor<4x8xf32>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]], %[[D]], %[[E]], %[[F]]
  %0 = amp.cast %w : tensor<4x8xf32> to tensor<4x8xf16>
  %1 = amp.cast %w : tensor<4x8xf32> to tensor<4x8xbf16>
  %2 = amp.cast %h : tensor<8xf16> to tensor<8xf32>
  %3 = amp.cast %b : tensor<bf16> to tensor<f64>
  %4 = amp.cast %d : tensor<2x2xf64> to tensor<2x2xf32>
  %5 = amp.cast %w : tensor<4x8xf32> to tensor<4x8xf32>
  return %0, %1, %2, %3, %4, %5
      : tensor<4x8xf16>, tensor<4x8xbf16>, tensor<8xf32>, tensor<f64>, tensor<2x2xf32>, tensor<4x8xf32>
}

// The loss is any single-element float tensor; the scale is always f32.
// CHECK-LABEL: func.func @scale_loss(
func.func @scale_loss(%loss: tensor<f32>, %hloss: tensor<f16>, %one: tensor<1x1xbf16>, %scale: tensor<f32>)
    -> (tensor<f32>, tensor<f16>, tensor<1x1xbf16>) {
  // CHECK-NEXT: %[[A:.*]] = amp.scale_loss %arg0, %arg3 : tensor<f32>
  // CHECK-NEXT: %[[B:.*]] = amp.scale_loss %arg1, %arg3 : tensor<f16>
  // CHECK-NEXT: %[[C:.*]] = amp.scale_loss %arg2, %arg3 : tensor<1x1xbf16>
  // CHECK-NEXT: return %[[A]], %[[B]], %[[C]]
  %0 = amp.scale_loss %loss, %scale : tensor<f32>
  %1 = amp.scale_loss %hloss, %scale : tensor<f16>
  %2 = amp.scale_loss %one, %scale : tensor<1x1xbf16>
  return %0, %1, %2 : tensor<f32>, tensor<f16>, tensor<1x1xbf16>
}

// CHECK-LABEL: func.func @all_finite(
func.func @all_finite(%gw: tensor<4x8xf16>, %gb: tensor<8xbf16>, %gs: tensor<f32>)
    -> (tensor<i1>, tensor<i1>) {
  // CHECK-NEXT: %[[ONE:.*]] = amp.all_finite %arg0 : tensor<4x8xf16>
  // CHECK-NEXT: %[[ALL:.*]] = amp.all_finite %arg0, %arg1, %arg2 : tensor<4x8xf16>, tensor<8xbf16>, tensor<f32>
  // CHECK-NEXT: return %[[ONE]], %[[ALL]]
  %0 = amp.all_finite %gw : tensor<4x8xf16>
  %1 = amp.all_finite %gw, %gb, %gs : tensor<4x8xf16>, tensor<8xbf16>, tensor<f32>
  return %0, %1 : tensor<i1>, tensor<i1>
}

// CHECK-LABEL: func.func @unscale_and_check(
func.func @unscale_and_check(%inv: tensor<f32>, %gw: tensor<4x8xf16>, %gb: tensor<8xf32>)
    -> (tensor<4x8xf16>, tensor<i1>, tensor<4x8xf16>, tensor<8xf32>, tensor<i1>) {
  // The printer names the result groups: one value per gradient, then the flag.
  // CHECK-NEXT: %[[G:[^ ]*]], %[[OK1:.*]] = amp.unscale_and_check %arg0, %arg1 : (tensor<f32>, tensor<4x8xf16>) -> (tensor<4x8xf16>, tensor<i1>)
  // CHECK-NEXT: %[[H:[^ ]*]]:2, %[[OK2:.*]] = amp.unscale_and_check %arg0, %arg1, %arg2 : (tensor<f32>, tensor<4x8xf16>, tensor<8xf32>) -> (tensor<4x8xf16>, tensor<8xf32>, tensor<i1>)
  // CHECK-NEXT: return %[[G]], %[[OK1]], %[[H]]#0, %[[H]]#1, %[[OK2]]
  %gw1, %ok1 = amp.unscale_and_check %inv, %gw
      : (tensor<f32>, tensor<4x8xf16>) -> (tensor<4x8xf16>, tensor<i1>)
  %gw2, %gb2, %ok2 = amp.unscale_and_check %inv, %gw, %gb
      : (tensor<f32>, tensor<4x8xf16>, tensor<8xf32>) -> (tensor<4x8xf16>, tensor<8xf32>, tensor<i1>)
  return %gw1, %ok1, %gw2, %gb2, %ok2 : tensor<4x8xf16>, tensor<i1>, tensor<4x8xf16>, tensor<8xf32>, tensor<i1>
}

// PyTorch's GradScaler: every attribute at its default, elided when printed
// whether it was spelled out or not.
// CHECK-LABEL: func.func @update_scale_defaults(
func.func @update_scale_defaults(%s: tensor<f32>, %g: tensor<i64>, %b: tensor<i64>, %k: tensor<i64>, %ok: tensor<i1>)
    -> (tensor<f32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<f32>) {
  // CHECK-NEXT: %[[S:.*]], %[[G:.*]], %[[B:.*]], %[[K:.*]] = amp.update_scale %arg0, %arg1, %arg2, %arg3, %arg4{{$}}
  // CHECK-NEXT: %[[S2:.*]], %{{.*}}, %{{.*}}, %{{.*}} = amp.update_scale %arg0, %arg1, %arg2, %arg3, %arg4{{$}}
  // CHECK-NEXT: return %[[S]], %[[G]], %[[B]], %[[K]], %[[S2]]
  %s1, %g1, %b1, %k1 = amp.update_scale %s, %g, %b, %k, %ok
  %s2, %g2, %b2, %k2 = amp.update_scale %s, %g, %b, %k, %ok
      {growth_factor = 2.0, backoff_factor = 0.5, growth_interval = 2000 : i64, backoff_interval = 1 : i64,
       min_scale = 0.0, max_scale = 0x7FF0000000000000 : f64}
  return %s1, %g1, %b1, %k1, %s2 : tensor<f32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<f32>
}

// Paddle's GradScaler: incr_ratio, decr_ratio, incr_every_n_steps,
// decr_every_n_nan_or_inf, and a scale kept at least 1.
// CHECK-LABEL: func.func @update_scale_paddle(
func.func @update_scale_paddle(%s: tensor<f32>, %g: tensor<i64>, %b: tensor<i64>, %k: tensor<i64>, %ok: tensor<i1>)
    -> (tensor<f32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<f32>) {
  // CHECK-NEXT: %[[S:.*]], %[[G:.*]], %[[B:.*]], %[[K:.*]] = amp.update_scale %arg0, %arg1, %arg2, %arg3, %arg4 {backoff_factor = 2.500000e-01 : f64, backoff_interval = 2 : i64, growth_factor = 4.000000e+00 : f64, growth_interval = 1000 : i64, min_scale = 1.000000e+00 : f64}{{$}}
  // CHECK-NEXT: %[[S2:.*]], %{{.*}}, %{{.*}}, %{{.*}} = amp.update_scale %arg0, %arg1, %arg2, %arg3, %arg4 {growth_interval = 1 : i64}{{$}}
  // CHECK-NEXT: return %[[S]], %[[G]], %[[B]], %[[K]], %[[S2]]
  %s1, %g1, %b1, %k1 = amp.update_scale %s, %g, %b, %k, %ok
      {growth_factor = 4.0, backoff_factor = 0.25, growth_interval = 1000 : i64, backoff_interval = 2 : i64,
       min_scale = 1.0}
  %s2, %g2, %b2, %k2 = amp.update_scale %s, %g, %b, %k, %ok {growth_interval = 1 : i64}
  return %s1, %g1, %b1, %k1, %s2 : tensor<f32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<f32>
}

// apex's min_loss_scale and max_loss_scale bound the dynamic scale.
// CHECK-LABEL: func.func @update_scale_apex_bounds(
func.func @update_scale_apex_bounds(%s: tensor<f32>, %g: tensor<i64>, %b: tensor<i64>, %k: tensor<i64>, %ok: tensor<i1>)
    -> (tensor<f32>, tensor<i64>, tensor<i64>, tensor<i64>) {
  // CHECK-NEXT: amp.update_scale %arg0, %arg1, %arg2, %arg3, %arg4 {max_scale = 0x4170000000000000 : f64, min_scale = 1.000000e+00 : f64}{{$}}
  %s1, %g1, %b1, %k1 = amp.update_scale %s, %g, %b, %k, %ok {min_scale = 1.0, max_scale = 16777216.0}
  return %s1, %g1, %b1, %k1 : tensor<f32>, tensor<i64>, tensor<i64>, tensor<i64>
}

// The amp ops in a scaled step, with the jit state model around them.
// CHECK-LABEL: func.func @scaled_step(
// CHECK-SAME:    %arg0: tensor<4x8xf32> {jit.role = "param"}, %arg1: tensor<4x8xf16> {jit.derived_from = 0 : i64, jit.role = "param"},
// CHECK-SAME:    %arg2: tensor<f32> {jit.role = "scaler_state"}, %arg3: tensor<i64> {jit.role = "scaler_state"},
// CHECK-SAME:    %arg4: tensor<i64> {jit.role = "scaler_state"}, %arg5: tensor<i64> {jit.role = "scaler_state"},
// CHECK-SAME:    %arg6: tensor<f32> {jit.role = "input"}, %arg7: tensor<4x8xf16> {jit.role = "input"})
// CHECK-SAME:    -> (tensor<f32>, tensor<f32> {jit.tied = 2 : i64}, tensor<i64> {jit.tied = 3 : i64},
// CHECK-SAME:        tensor<i64> {jit.tied = 4 : i64}, tensor<i64> {jit.tied = 5 : i64}, tensor<4x8xf16> {jit.tied = 1 : i64})
func.func @scaled_step(%w: tensor<4x8xf32> {jit.role = "param"},
                       %w16: tensor<4x8xf16> {jit.role = "param", jit.derived_from = 0 : i64},
                       %scale: tensor<f32> {jit.role = "scaler_state"},
                       %good: tensor<i64> {jit.role = "scaler_state"},
                       %bad: tensor<i64> {jit.role = "scaler_state"},
                       %skipped: tensor<i64> {jit.role = "scaler_state"},
                       %loss: tensor<f32> {jit.role = "input"},
                       %gw: tensor<4x8xf16> {jit.role = "input"})
    -> (tensor<f32>, tensor<f32> {jit.tied = 2 : i64}, tensor<i64> {jit.tied = 3 : i64},
        tensor<i64> {jit.tied = 4 : i64}, tensor<i64> {jit.tied = 5 : i64}, tensor<4x8xf16> {jit.tied = 1 : i64}) {
  // CHECK-NEXT: %[[SCALED:.*]] = amp.scale_loss %arg6, %arg2 {jit.op_id = 3 : i64} : tensor<f32>
  // CHECK-NEXT: %[[OK:.*]] = amp.all_finite %arg7 : tensor<4x8xf16>
  // CHECK-NEXT: %[[S:.*]], %[[G:.*]], %[[B:.*]], %[[K:.*]] = amp.update_scale %arg2, %arg3, %arg4, %arg5, %[[OK]]
  // CHECK-NEXT: %[[W16:.*]] = amp.cast %arg0 : tensor<4x8xf32> to tensor<4x8xf16>
  // CHECK-NEXT: return %[[SCALED]], %[[S]], %[[G]], %[[B]], %[[K]], %[[W16]]
  %scaled = amp.scale_loss %loss, %scale {jit.op_id = 3 : i64} : tensor<f32>
  %ok = amp.all_finite %gw : tensor<4x8xf16>
  %s1, %g1, %b1, %k1 = amp.update_scale %scale, %good, %bad, %skipped, %ok
  %w16new = amp.cast %w : tensor<4x8xf32> to tensor<4x8xf16>
  return %scaled, %s1, %g1, %b1, %k1, %w16new
      : tensor<f32>, tensor<f32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<4x8xf16>
}
