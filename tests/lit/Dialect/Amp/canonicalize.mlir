// RUN: amp-opt %s -split-input-file -canonicalize | FileCheck %s

// amp.cast folds when that cannot change a value: an identity cast, an exact
// round trip through a wider type, and the cast of a constant (rounded to
// nearest even exactly as the runtime would round it). A lossy round trip
// stays: only the explicit cast-fusion option of the AMP passes may drop it.

// CHECK-LABEL: func.func @identity(
// CHECK-SAME:    %[[W:.*]]: tensor<4x8xf32>, %[[H:.*]]: tensor<f16>)
// CHECK-NEXT:    return %[[W]], %[[H]]
func.func @identity(%w: tensor<4x8xf32>, %h: tensor<f16>) -> (tensor<4x8xf32>, tensor<f16>) {
  %0 = amp.cast %w : tensor<4x8xf32> to tensor<4x8xf32>
  %1 = amp.cast %h : tensor<f16> to tensor<f16>
  return %0, %1 : tensor<4x8xf32>, tensor<f16>
}

// -----

// Every f16 and bf16 value is exact in f32 and f64, so widening and narrowing
// back returns the original value.
// CHECK-LABEL: func.func @exact_round_trips(
// CHECK-SAME:    %[[H:.*]]: tensor<4xf16>, %[[B:.*]]: tensor<4xbf16>, %[[F:.*]]: tensor<4xf32>)
// CHECK-NEXT:    return %[[H]], %[[B]], %[[H]], %[[F]]
func.func @exact_round_trips(%h: tensor<4xf16>, %b: tensor<4xbf16>, %f: tensor<4xf32>)
    -> (tensor<4xf16>, tensor<4xbf16>, tensor<4xf16>, tensor<4xf32>) {
  %0 = amp.cast %h : tensor<4xf16> to tensor<4xf32>
  %1 = amp.cast %0 : tensor<4xf32> to tensor<4xf16>
  %2 = amp.cast %b : tensor<4xbf16> to tensor<4xf32>
  %3 = amp.cast %2 : tensor<4xf32> to tensor<4xbf16>
  %4 = amp.cast %h : tensor<4xf16> to tensor<4xf64>
  %5 = amp.cast %4 : tensor<4xf64> to tensor<4xf16>
  %6 = amp.cast %f : tensor<4xf32> to tensor<4xf64>
  %7 = amp.cast %6 : tensor<4xf64> to tensor<4xf32>
  return %1, %3, %5, %7 : tensor<4xf16>, tensor<4xbf16>, tensor<4xf16>, tensor<4xf32>
}

// -----

// f32 -> f16 -> f32 rounds (0.1 becomes 0.0999755859375, 1e5 becomes inf):
// folding it away would change the values, so both casts stay.
// CHECK-LABEL: func.func @lossy_round_trip(
// CHECK-SAME:    %[[W:.*]]: tensor<4xf32>)
// CHECK-NEXT:    %[[H:.*]] = amp.cast %[[W]] : tensor<4xf32> to tensor<4xf16>
// CHECK-NEXT:    %[[F:.*]] = amp.cast %[[H]] : tensor<4xf16> to tensor<4xf32>
// CHECK-NEXT:    return %[[F]]
func.func @lossy_round_trip(%w: tensor<4xf32>) -> tensor<4xf32> {
  %0 = amp.cast %w : tensor<4xf32> to tensor<4xf16>
  %1 = amp.cast %0 : tensor<4xf16> to tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// f16 and bf16 do not contain each other, and f64 -> f32 -> f64 loses precision.
// CHECK-LABEL: func.func @other_round_trips_stay(
// CHECK-NEXT:    amp.cast %arg0 : tensor<4xf16> to tensor<4xbf16>
// CHECK-NEXT:    amp.cast %{{.*}} : tensor<4xbf16> to tensor<4xf16>
// CHECK-NEXT:    amp.cast %arg1 : tensor<4xf64> to tensor<4xf32>
// CHECK-NEXT:    amp.cast %{{.*}} : tensor<4xf32> to tensor<4xf64>
// CHECK-NEXT:    amp.cast %arg0 : tensor<4xf16> to tensor<4xf32>
// CHECK-NEXT:    amp.cast %{{.*}} : tensor<4xf32> to tensor<4xbf16>
// CHECK-NEXT:    return
func.func @other_round_trips_stay(%h: tensor<4xf16>, %d: tensor<4xf64>)
    -> (tensor<4xf16>, tensor<4xf64>, tensor<4xbf16>) {
  %0 = amp.cast %h : tensor<4xf16> to tensor<4xbf16>
  %1 = amp.cast %0 : tensor<4xbf16> to tensor<4xf16>
  %2 = amp.cast %d : tensor<4xf64> to tensor<4xf32>
  %3 = amp.cast %2 : tensor<4xf32> to tensor<4xf64>
  // Widening then narrowing to a third type is a real conversion.
  %4 = amp.cast %h : tensor<4xf16> to tensor<4xf32>
  %5 = amp.cast %4 : tensor<4xf32> to tensor<4xbf16>
  return %1, %3, %5 : tensor<4xf16>, tensor<4xf64>, tensor<4xbf16>
}

// -----

//===----------------------------------------------------------------------===//
// Casts of constants: the folded constant is a jit.constant of the new type.
//===----------------------------------------------------------------------===//

// 0.1 is 0x2E66 in f16 (0.0999755859375) and 0x3DCD in bf16 (0.10009765625).
// CHECK-LABEL: func.func @splat_constants(
// CHECK-DAG:     %[[ONE:.*]] = jit.constant dense<1.000000e+00> : tensor<4x8xf16>
// CHECK-DAG:     %[[H:.*]] = jit.constant dense<9.997550e-02> : tensor<4x8xf16>
// CHECK-DAG:     %[[B:.*]] = jit.constant dense<1.000980e-01> : tensor<4x8xbf16>
// CHECK-DAG:     %[[W:.*]] = jit.constant dense<0.0999755859> : tensor<4x8xf32>
// CHECK-DAG:     %[[D:.*]] = jit.constant dense<0.10000000149011612> : tensor<f64>
// CHECK-NOT:     amp.cast
// CHECK:         return %[[ONE]], %[[H]], %[[B]], %[[W]], %[[D]]
func.func @splat_constants() -> (tensor<4x8xf16>, tensor<4x8xf16>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<f64>) {
  %one = jit.constant dense<1.0> : tensor<4x8xf32>
  %tenth = jit.constant dense<0.1> : tensor<4x8xf32>
  %0 = amp.cast %one : tensor<4x8xf32> to tensor<4x8xf16>
  %1 = amp.cast %tenth : tensor<4x8xf32> to tensor<4x8xf16>
  %2 = amp.cast %tenth : tensor<4x8xf32> to tensor<4x8xbf16>
  // f16 -> f32 is exact: the widened constant is the f16 value itself.
  %h = jit.constant dense<0.1> : tensor<4x8xf16>
  %3 = amp.cast %h : tensor<4x8xf16> to tensor<4x8xf32>
  %s = jit.constant dense<0.1> : tensor<f32>
  %4 = amp.cast %s : tensor<f32> to tensor<f64>
  return %0, %1, %2, %3, %4 : tensor<4x8xf16>, tensor<4x8xf16>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<f64>
}

// -----

// f16: the largest finite value is 65504 and everything from 65520 up (the
// midpoint to the next, unrepresentable, binade) rounds to inf; ties go to
// the even mantissa (2049 -> 2048, 2051 -> 2052); 1e-7 becomes the subnormal
// 2 * 2^-24 and 1e-8 underflows to a zero that keeps its sign.
// CHECK-LABEL: func.func @f32_to_f16(
// CHECK-NEXT:    %[[C:.*]] = jit.constant dense<[1.000000e+00, 6.550400e+04, 0x7C00, 0xFC00, 2.048000e+03, 2.052000e+03, 1.192090e-07, -0.000000e+00, 0x7C00, 0x7E00]> : tensor<10xf16>
// CHECK-NEXT:    return %[[C]]
func.func @f32_to_f16() -> tensor<10xf16> {
  %c = jit.constant dense<[1.0, 65519.0, 65520.0, -1.0e+05, 2049.0, 2051.0, 1.0e-07, -1.0e-08, 0x7F800000, 0x7FC00000]> : tensor<10xf32>
  %0 = amp.cast %c : tensor<10xf32> to tensor<10xf16>
  return %0 : tensor<10xf16>
}

// -----

// A NaN stays a NaN of the same sign with its top payload bits, quiet, as the
// runtime's narrowing produces it: 0x7FA00000 (signalling) -> 0x7F00 in f16
// and 0x7FE0 in bf16; 0xFFC00001 -> 0xFE00 and 0xFFC0.
// CHECK-LABEL: func.func @nan_payloads(
// CHECK-DAG:     jit.constant dense<[0x7F00, 0xFE00]> : tensor<2xf16>
// CHECK-DAG:     jit.constant dense<[0x7FE0, 0xFFC0]> : tensor<2xbf16>
func.func @nan_payloads() -> (tensor<2xf16>, tensor<2xbf16>) {
  %c = jit.constant dense<[0x7FA00000, 0xFFC00001]> : tensor<2xf32>
  %0 = amp.cast %c : tensor<2xf32> to tensor<2xf16>
  %1 = amp.cast %c : tensor<2xf32> to tensor<2xbf16>
  return %0, %1 : tensor<2xf16>, tensor<2xbf16>
}

// -----

// bf16 has f32's range: f32's largest value rounds up to inf, 3.0e38 stays
// finite; 1 + 2^-8 is a tie and goes to the even 1.0, 1 + 3 * 2^-8 to 1 + 2^-6.
// CHECK-LABEL: func.func @f32_to_bf16(
// CHECK-NEXT:    %[[C:.*]] = jit.constant dense<[0x7F80, 3.004060e+38, 1.000000e+00, 1.015630e+00, -2.000000e+00]> : tensor<5xbf16>
// CHECK-NEXT:    return %[[C]]
func.func @f32_to_bf16() -> tensor<5xbf16> {
  %c = jit.constant dense<[0x7F7FFFFF, 3.0e+38, 1.00390625, 1.01171875, -2.0]> : tensor<5xf32>
  %0 = amp.cast %c : tensor<5xf32> to tensor<5xbf16>
  return %0 : tensor<5xbf16>
}

// -----

// Widening is exact, infinities and NaNs included.
// CHECK-LABEL: func.func @f16_to_f32(
// CHECK-NEXT:    %[[C:.*]] = jit.constant dense<[0.0999755859, 6.550400e+04, 5.96046448E-8, 0x7F800000, 0xFF800000, 0x7FC00000]> : tensor<6xf32>
// CHECK-NEXT:    return %[[C]]
func.func @f16_to_f32() -> tensor<6xf32> {
  %c = jit.constant dense<[0.1, 65504.0, 0x0001, 0x7C00, 0xFC00, 0x7E00]> : tensor<6xf16>
  %0 = amp.cast %c : tensor<6xf16> to tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

// f64 -> f16 rounds once. 1 + 2^-11 + 2^-40 is just above the tie between 1
// and 1 + 2^-10; going through f32 would land exactly on the tie and round
// down to 1.0.
// CHECK-LABEL: func.func @f64_to_f16_rounds_once(
// CHECK-NEXT:    %[[C:.*]] = jit.constant dense<1.000980e+00> : tensor<f16>
// CHECK-NEXT:    return %[[C]]
func.func @f64_to_f16_rounds_once() -> tensor<f16> {
  %c = jit.constant dense<0x3FF0020000001000> : tensor<f64>
  %0 = amp.cast %c : tensor<f64> to tensor<f16>
  return %0 : tensor<f16>
}

// -----

// A constant's lossy round trip folds to the rounded value, never back to
// the original.
// CHECK-LABEL: func.func @constant_lossy_round_trip(
// CHECK-NEXT:    %[[C:.*]] = jit.constant dense<[0.0999755859, 0x7F800000]> : tensor<2xf32>
// CHECK-NEXT:    return %[[C]]
func.func @constant_lossy_round_trip() -> tensor<2xf32> {
  %c = jit.constant dense<[0.1, 1.0e+05]> : tensor<2xf32>
  %0 = amp.cast %c : tensor<2xf32> to tensor<2xf16>
  %1 = amp.cast %0 : tensor<2xf16> to tensor<2xf32>
  return %1 : tensor<2xf32>
}

// -----

// Any ElementsAttr constant folds: an arith.constant, and a dense_resource
// blob (how large traced weights are stored; here 1.0 and 0.1 as f32).
// CHECK-LABEL: func.func @other_constants(
// CHECK-DAG:     %[[A:.*]] = jit.constant dense<[1.000000e+00, 9.997550e-02]> : tensor<2xf16>
// CHECK-DAG:     %[[R:.*]] = jit.constant dense<[1.000000e+00, 1.000980e-01]> : tensor<2xbf16>
// CHECK-NOT:     amp.cast
// CHECK:         return %[[A]], %[[R]]
func.func @other_constants() -> (tensor<2xf16>, tensor<2xbf16>) {
  %a = arith.constant dense<[1.0, 0.1]> : tensor<2xf32>
  %0 = amp.cast %a : tensor<2xf32> to tensor<2xf16>
  %r = jit.constant dense_resource<weights> : tensor<2xf32>
  %1 = amp.cast %r : tensor<2xf32> to tensor<2xbf16>
  return %0, %1 : tensor<2xf16>, tensor<2xbf16>
}

{-#
  dialect_resources: {
    builtin: {
      weights: "0x040000000000803FCDCCCC3D"
    }
  }
#-}

// -----

// A resource whose data is not in the file cannot be read: the cast stays.
// CHECK-LABEL: func.func @elided_resource(
// CHECK:         amp.cast
func.func @elided_resource() -> tensor<2xf16> {
  %r = jit.constant dense_resource<__elided__> : tensor<2xf32>
  %0 = amp.cast %r : tensor<2xf32> to tensor<2xf16>
  return %0 : tensor<2xf16>
}
