// RUN: amp-opt %s -split-input-file -verify-diagnostics

// One section per verifier rule of the jit dialect: the op verifiers and
// result-type inference (JitOps.cpp, ShapeInference.cpp) and the state-model
// attribute verifiers (StateModel.cpp). Rules checked during result-type
// inference report their own error and then MLIR's "failed to infer returned
// types"; both are expected so that neither can change unnoticed.

//===----------------------------------------------------------------------===//
// ODS constraints: element types, static shapes, unit flags
//===----------------------------------------------------------------------===//

func.func @unary_integer_operand(%x: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @below {{'jit.relu' op operand #0 must be statically shaped tensor (at most 2^48 elements) of f16, bf16, f32 or f64 values, but got 'tensor<4xi64>'}}
  %0 = jit.relu %x : tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @dynamic_shape(%x: tensor<?xf32>) -> tensor<?xf32> {
  // expected-error @below {{'jit.exp' op operand #0 must be statically shaped tensor (at most 2^48 elements) of f16, bf16, f32 or f64 values, but got 'tensor<?xf32>'}}
  %0 = jit.exp %x : tensor<?xf32>
  return %0 : tensor<?xf32>
}

// -----

func.func @matmul_transpose_flag_not_unit(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @below {{'jit.matmul' op attribute 'transpose_lhs' failed to satisfy constraint: unit attribute}}
  %0 = jit.matmul %a, %b {transpose_lhs = 1 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @select_condition_not_i1(%c: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.select' op operand #0 must be statically shaped tensor (at most 2^48 elements) of 1-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = jit.select %c, %x, %x : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @cross_entropy_labels_i32(%logits: tensor<4x10xf32>, %labels: tensor<4xi32>) -> tensor<f32> {
  // expected-error @below {{'jit.cross_entropy' op operand #1 must be statically shaped tensor (at most 2^48 elements) of 64-bit signless integer values, but got 'tensor<4xi32>'}}
  %0 = jit.cross_entropy %logits, %labels reduction = mean : (tensor<4x10xf32>, tensor<4xi32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @inferred_result_mismatch(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<5xf32> {
  // expected-error @below {{'jit.add' op inferred type(s) 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<5xf32>'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

//===----------------------------------------------------------------------===//
// Broadcasting and element types (ShapeInference.cpp)
//===----------------------------------------------------------------------===//

// -----

func.func @add_bad_broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) -> tensor<2x3xf32> {
  // expected-error @below {{'jit.add' operand 'rhs' of type 'tensor<4xf32>' does not broadcast with operand 'lhs' of type 'tensor<2x3xf32>': result dimension 1 would be both 3 and 4}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @add_mixed_element_types(%a: tensor<4xf32>, %b: tensor<4xf16>) -> tensor<4xf32> {
  // expected-error @below {{'jit.add' operand 'rhs' of type 'tensor<4xf16>' has element type 'f16' but operand 'lhs' of type 'tensor<4xf32>' has 'f32'; insert an explicit conversion}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.add %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @compare_mixed_element_types(%a: tensor<4xi64>, %b: tensor<4xf32>) -> tensor<4xi1> {
  // expected-error @below {{'jit.compare' operand 'rhs' of type 'tensor<4xf32>' has element type 'f32' but operand 'lhs' of type 'tensor<4xi64>' has 'i64'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.compare lt, %a, %b : (tensor<4xi64>, tensor<4xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @compare_bad_broadcast(%a: tensor<4xf32>, %b: tensor<5xf32>) -> tensor<4xi1> {
  // expected-error @below {{'jit.compare' operand 'rhs' of type 'tensor<5xf32>' does not broadcast with operand 'lhs' of type 'tensor<4xf32>': result dimension 0 would be both 4 and 5}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.compare eq, %a, %b : (tensor<4xf32>, tensor<5xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

// The condition broadcasts too, and is named when it is the odd one out.
func.func @select_condition_bad_broadcast(%c: tensor<3x1xi1>, %x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // expected-error @below {{'jit.select' operand 'true_value' of type 'tensor<2x4xf32>' does not broadcast with operand 'condition' of type 'tensor<3x1xi1>': result dimension 0 would be both 3 and 2}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.select %c, %x, %x : (tensor<3x1xi1>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @select_mixed_value_types(%c: tensor<4xi1>, %x: tensor<4xf32>, %y: tensor<4xbf16>) -> tensor<4xf32> {
  // expected-error @below {{'jit.select' operand 'false_value' of type 'tensor<4xbf16>' has element type 'bf16' but operand 'true_value' of type 'tensor<4xf32>' has 'f32'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.select %c, %x, %y : (tensor<4xi1>, tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @dropout_dynamic_rng_state(%x: tensor<4xf32>, %rng: tensor<?xi64>) {
  // expected-error @below {{'jit.dropout' operand 'rng_state' must be a statically shaped tensor, but is 'tensor<?xi64>'}}
  // expected-error @below {{failed to infer returned types}}
  %y, %mask, %rng1 = jit.dropout %x, %rng p = 0.5
      : (tensor<4xf32>, tensor<?xi64>) -> (tensor<4xf32>, tensor<4xi1>, tensor<?xi64>)
  return
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

// -----

func.func @matmul_vector_lhs(%a: tensor<4xf32>, %b: tensor<4x2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'jit.matmul' operand 'lhs' of type 'tensor<4xf32>' must have rank >= 2 (reshape a vector to a matrix first)}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.matmul %a, %b : (tensor<4xf32>, tensor<4x2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @matmul_vector_rhs(%a: tensor<3x4xf32>, %b: tensor<4xf32>) -> tensor<3xf32> {
  // expected-error @below {{'jit.matmul' operand 'rhs' of type 'tensor<4xf32>' must have rank >= 2}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.matmul %a, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @matmul_contraction_mismatch(%a: tensor<3x4xf32>, %b: tensor<5x2xf32>) -> tensor<3x2xf32> {
  // expected-error @below {{'jit.matmul' contraction dimensions differ: operand 'lhs' of type 'tensor<3x4xf32>' has 4 columns but operand 'rhs' of type 'tensor<5x2xf32>' has 5 rows}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.matmul %a, %b : (tensor<3x4xf32>, tensor<5x2xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

// x @ W with W in [out, in] layout needs transpose_rhs: without it the
// contraction fails, and the message says which operand is transposed.
func.func @matmul_contraction_mismatch_transposed(%x: tensor<8x784xf32>, %w: tensor<784x512xf32>) -> tensor<8x784xf32> {
  // expected-error @below {{'jit.matmul' contraction dimensions differ: operand 'lhs' of type 'tensor<8x784xf32>' has 784 columns but operand 'rhs' of type 'tensor<784x512xf32>' (transposed) has 512 rows}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.matmul %x, %w {transpose_rhs} : (tensor<8x784xf32>, tensor<784x512xf32>) -> tensor<8x784xf32>
  return %0 : tensor<8x784xf32>
}

// -----

func.func @matmul_contraction_mismatch_both_transposed(%a: tensor<4x3xf32>, %b: tensor<4x2xf32>) -> tensor<4x2xf32> {
  // expected-error @below {{'jit.matmul' contraction dimensions differ: operand 'lhs' of type 'tensor<4x3xf32>' (transposed) has 4 columns but operand 'rhs' of type 'tensor<4x2xf32>' (transposed) has 2 rows}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.matmul %a, %b {transpose_lhs, transpose_rhs} : (tensor<4x3xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

func.func @matmul_batch_bad_broadcast(%a: tensor<2x3x4xf32>, %b: tensor<5x4x6xf32>) -> tensor<2x3x6xf32> {
  // expected-error @below {{'jit.matmul' operand 'rhs' of type 'tensor<5xf32>' does not broadcast with operand 'lhs' of type 'tensor<2xf32>': result dimension 0 would be both 2 and 5}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.matmul %a, %b : (tensor<2x3x4xf32>, tensor<5x4x6xf32>) -> tensor<2x3x6xf32>
  return %0 : tensor<2x3x6xf32>
}

// -----

func.func @matmul_mixed_element_types(%a: tensor<3x4xf16>, %b: tensor<4x2xf32>) -> tensor<3x2xf16> {
  // expected-error @below {{'jit.matmul' operand 'rhs' of type 'tensor<4x2xf32>' has element type 'f32' but operand 'lhs' of type 'tensor<3x4xf16>' has 'f16'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.matmul %a, %b : (tensor<3x4xf16>, tensor<4x2xf32>) -> tensor<3x2xf16>
  return %0 : tensor<3x2xf16>
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// -----

func.func @sum_empty_axes(%x: tensor<4x8xf32>) -> tensor<f32> {
  // expected-error @below {{'jit.sum' axes must not be empty for operand 'input' of type 'tensor<4x8xf32>'; list every axis to reduce to a scalar}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.sum %x axes = [] : tensor<4x8xf32> -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @mean_axis_out_of_range(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.mean' axis 2 is out of range for operand 'input' of type 'tensor<4x8xf32>' (expected 0 <= axis < 2)}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.mean %x axes = [2] : tensor<4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @max_negative_axis(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.max' axis -1 is out of range for operand 'input' of type 'tensor<4x8xf32>' (expected 0 <= axis < 2)}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.max %x axes = [-1] : tensor<4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @sum_axes_repeated(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.sum' axes must be strictly increasing, but 1 follows 1}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.sum %x axes = [1, 1] : tensor<4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @sum_axes_decreasing(%x: tensor<2x4x8xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.sum' axes must be strictly increasing, but 0 follows 2}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.sum %x axes = [2, 0] : tensor<2x4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @sum_keepdim_result(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.sum' op inferred type(s) 'tensor<4x1xf32>' are incompatible with return type(s) of operation 'tensor<4xf32>'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.sum %x axes = [1] keepdim : tensor<4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

//===----------------------------------------------------------------------===//
// Shape and data movement
//===----------------------------------------------------------------------===//

// -----

func.func @broadcast_to_element_type(%x: tensor<8xf32>) -> tensor<4x8xf16> {
  // expected-error @below {{'jit.broadcast_to' op result 'tensor<4x8xf16>' must have the element type of operand 'input', 'tensor<8xf32>'}}
  %0 = jit.broadcast_to %x : tensor<8xf32> -> tensor<4x8xf16>
  return %0 : tensor<4x8xf16>
}

// -----

func.func @broadcast_to_incompatible(%x: tensor<3xf32>) -> tensor<4x8xf32> {
  // expected-error @below {{'jit.broadcast_to' op operand 'input' of type 'tensor<3xf32>' cannot be broadcast to 'tensor<4x8xf32>': each input dimension, aligned from the right, must be 1 or equal}}
  %0 = jit.broadcast_to %x : tensor<3xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Broadcasting never drops dimensions.
func.func @broadcast_to_lower_rank(%x: tensor<1x8xf32>) -> tensor<8xf32> {
  // expected-error @below {{'jit.broadcast_to' op operand 'input' of type 'tensor<1x8xf32>' cannot be broadcast to 'tensor<8xf32>'}}
  %0 = jit.broadcast_to %x : tensor<1x8xf32> -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @reshape_element_type(%x: tensor<2x8xf32>) -> tensor<16xbf16> {
  // expected-error @below {{'jit.reshape' op result 'tensor<16xbf16>' must have the element type of operand 'input', 'tensor<2x8xf32>'}}
  %0 = jit.reshape %x : tensor<2x8xf32> -> tensor<16xbf16>
  return %0 : tensor<16xbf16>
}

// -----

func.func @reshape_element_count(%x: tensor<2x8xf32>) -> tensor<15xf32> {
  // expected-error @below {{'jit.reshape' op operand 'input' of type 'tensor<2x8xf32>' has 16 elements but the result of type 'tensor<15xf32>' has 15}}
  %0 = jit.reshape %x : tensor<2x8xf32> -> tensor<15xf32>
  return %0 : tensor<15xf32>
}

// -----

func.func @transpose_perm_length(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @below {{'jit.transpose' perm has 3 entries but operand 'input' of type 'tensor<4x8xf32>' has rank 2}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.transpose %x perm = [1, 0, 2] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @transpose_perm_out_of_range(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @below {{'jit.transpose' perm must be a permutation of [0, 2), but contains 2 (out of range)}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.transpose %x perm = [2, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @transpose_perm_negative(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @below {{'jit.transpose' perm must be a permutation of [0, 2), but contains -1 (out of range)}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.transpose %x perm = [-1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @transpose_perm_repeated(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error @below {{'jit.transpose' perm must be a permutation of [0, 2), but contains 0 twice}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.transpose %x perm = [0, 0] : tensor<4x8xf32> -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @transpose_result_shape(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @below {{'jit.transpose' op inferred type(s) 'tensor<8x4xf32>' are incompatible with return type(s) of operation 'tensor<4x8xf32>'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.transpose %x perm = [1, 0] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @constant_type_mismatch() -> tensor<4xf32> {
  // expected-error @below {{'jit.constant' op failed to verify that all of {value, result} have same type}}
  %0 = "jit.constant"() {value = dense<1.0> : tensor<4xf16>} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @convert_shape(%x: tensor<4x8xi1>) -> tensor<32xf32> {
  // expected-error @below {{'jit.convert' op result 'tensor<32xf32>' must have the shape of operand 'input', 'tensor<4x8xi1>'; use jit.reshape to change shapes}}
  %0 = jit.convert %x : tensor<4x8xi1> -> tensor<32xf32>
  return %0 : tensor<32xf32>
}

// -----

func.func @type_as_shape(%x: tensor<4x8xf32>, %r: tensor<8xf16>) -> tensor<32xf16> {
  // expected-error @below {{'jit.type_as' op result 'tensor<32xf16>' must have the shape of operand 'input', 'tensor<4x8xf32>'}}
  %0 = jit.type_as %x, %r : tensor<4x8xf32>, tensor<8xf16> -> tensor<32xf16>
  return %0 : tensor<32xf16>
}

// -----

func.func @type_as_element_type(%x: tensor<4x8xf32>, %r: tensor<8xf16>) -> tensor<4x8xbf16> {
  // expected-error @below {{'jit.type_as' op result 'tensor<4x8xbf16>' must have the element type of operand 'reference', 'tensor<8xf16>'}}
  %0 = jit.type_as %x, %r : tensor<4x8xf32>, tensor<8xf16> -> tensor<4x8xbf16>
  return %0 : tensor<4x8xbf16>
}

// -----

func.func @type_as_integer(%x: tensor<4xf32>, %r: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @below {{'jit.type_as' op operand #1 must be statically shaped tensor (at most 2^48 elements) of f16, bf16, f32 or f64 values, but got 'tensor<4xi64>'}}
  %0 = jit.type_as %x, %r : tensor<4xf32>, tensor<4xi64> -> tensor<4xi64>
  return %0 : tensor<4xi64>
}

//===----------------------------------------------------------------------===//
// Axis ops, layer norm, dropout
//===----------------------------------------------------------------------===//

// -----

func.func @softmax_axis_out_of_range(%x: tensor<4x10xf32>) -> tensor<4x10xf32> {
  // expected-error @below {{'jit.softmax' axis 2 is out of range for operand 'input' of type 'tensor<4x10xf32>' (expected 0 <= axis < 2)}}
  %0 = jit.softmax %x axis = 2 : tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}

// -----

func.func @log_softmax_negative_axis(%x: tensor<4x10xf32>) -> tensor<4x10xf32> {
  // expected-error @below {{'jit.log_softmax' axis -1 is out of range for operand 'input' of type 'tensor<4x10xf32>' (expected 0 <= axis < 2)}}
  %0 = jit.log_softmax %x axis = -1 : tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}

// -----

// A rank-0 tensor has no axis to normalise along.
func.func @softmax_scalar(%x: tensor<f32>) -> tensor<f32> {
  // expected-error @below {{'jit.softmax' axis 0 is out of range for operand 'input' of type 'tensor<f32>' (expected 0 <= axis < 0)}}
  %0 = jit.softmax %x axis = 0 : tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @softmax_grad_axis_out_of_range(%dy: tensor<4x10xf32>, %y: tensor<4x10xf32>) -> tensor<4x10xf32> {
  // expected-error @below {{'jit.softmax_grad' axis 5 is out of range for operand 'grad_output' of type 'tensor<4x10xf32>' (expected 0 <= axis < 2)}}
  %0 = jit.softmax_grad %dy, %y axis = 5 : tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}

// -----

func.func @log_softmax_grad_axis_out_of_range(%dy: tensor<4x10xf32>, %y: tensor<4x10xf32>) -> tensor<4x10xf32> {
  // expected-error @below {{'jit.log_softmax_grad' axis -2 is out of range for operand 'grad_output' of type 'tensor<4x10xf32>' (expected 0 <= axis < 2)}}
  %0 = jit.log_softmax_grad %dy, %y axis = -2 : tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}

// -----

func.func @softmax_grad_operand_types(%dy: tensor<4x10xf16>, %y: tensor<4x10xf32>) -> tensor<4x10xf16> {
  // expected-error @below {{'jit.softmax_grad' op requires the same type for all operands and results}}
  %0 = "jit.softmax_grad"(%dy, %y) {axis = 1 : i64} : (tensor<4x10xf16>, tensor<4x10xf32>) -> tensor<4x10xf16>
  return %0 : tensor<4x10xf16>
}

// -----

func.func @layer_norm_axis_out_of_range(%x: tensor<4x8xf32>) {
  // expected-error @below {{'jit.layer_norm' axis 2 is out of range for operand 'input' of type 'tensor<4x8xf32>' (expected 0 <= axis < 2)}}
  // expected-error @below {{failed to infer returned types}}
  %y, %m, %r = jit.layer_norm %x axis = 2 eps = 1.0e-05
      : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

// -----

// normalized_shape is input.shape[axis:]: [8] for axis = 1, not [4].
func.func @layer_norm_weight_shape(%x: tensor<4x8xf32>, %g: tensor<4xf32>) {
  // expected-error @below {{'jit.layer_norm' operand 'weight' of type 'tensor<4xf32>' must be 'tensor<8xf32>': the normalised dimensions of 'input' in its element type}}
  // expected-error @below {{failed to infer returned types}}
  %y, %m, %r = jit.layer_norm %x weight %g axis = 1 eps = 1.0e-05
      : (tensor<4x8xf32>, tensor<4xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @layer_norm_bias_element_type(%x: tensor<2x3x8xf16>, %b: tensor<3x8xf32>) {
  // expected-error @below {{'jit.layer_norm' operand 'bias' of type 'tensor<3x8xf32>' must be 'tensor<3x8xf16>': the normalised dimensions of 'input' in its element type}}
  // expected-error @below {{failed to infer returned types}}
  %y, %m, %r = jit.layer_norm %x bias %b axis = 1 eps = 1.0e-05
      : (tensor<2x3x8xf16>, tensor<3x8xf32>) -> (tensor<2x3x8xf16>, tensor<2xf32>, tensor<2xf32>)
  return
}

// -----

// Statistics of an f16 input are kept in f32.
func.func @layer_norm_statistics_type(%x: tensor<4x8xf16>) {
  // expected-error @below {{'jit.layer_norm' op inferred type(s) 'tensor<4x8xf16>', 'tensor<4xf32>', 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<4x8xf16>', 'tensor<4xf16>', 'tensor<4xf16>'}}
  // expected-error @below {{failed to infer returned types}}
  %y, %m, %r = jit.layer_norm %x axis = 1 eps = 1.0e-05
      : (tensor<4x8xf16>) -> (tensor<4x8xf16>, tensor<4xf16>, tensor<4xf16>)
  return
}

// -----

func.func @layer_norm_negative_eps(%x: tensor<4x8xf32>) {
  // expected-error @below {{'jit.layer_norm' op eps = -1.000000e-05 must be non-negative}}
  %y, %m, %r = jit.layer_norm %x axis = 1 eps = -1.0e-05
      : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @layer_norm_nan_eps(%x: tensor<4x8xf32>) {
  // expected-error @below {{'jit.layer_norm' op eps = nan must be non-negative}}
  %y, %m, %r = jit.layer_norm %x axis = 1 eps = 0x7FF8000000000000
      : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @layer_norm_grad_output_type(%dy: tensor<4x8xf16>, %x: tensor<4x8xf32>, %mean: tensor<4xf32>) {
  // expected-error @below {{'jit.layer_norm_grad' operand 'grad_output' of type 'tensor<4x8xf16>' must have the type of operand 'input', 'tensor<4x8xf32>'}}
  // expected-error @below {{failed to infer returned types}}
  %dx, %dw, %db = jit.layer_norm_grad %dy, %x, %mean, %mean axis = 1
      : (tensor<4x8xf16>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
        -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @layer_norm_grad_axis(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %mean: tensor<4xf32>) {
  // expected-error @below {{'jit.layer_norm_grad' axis -1 is out of range for operand 'input' of type 'tensor<4x8xf32>' (expected 0 <= axis < 2)}}
  // expected-error @below {{failed to infer returned types}}
  %dx, %dw, %db = jit.layer_norm_grad %dy, %x, %mean, %mean axis = -1
      : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
        -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @layer_norm_grad_weight_shape(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %mean: tensor<4xf32>,
                                        %g: tensor<4x8xf32>) {
  // expected-error @below {{'jit.layer_norm_grad' operand 'weight' of type 'tensor<4x8xf32>' must be 'tensor<8xf32>': the normalised dimensions of 'input' in its element type}}
  // expected-error @below {{failed to infer returned types}}
  %dx, %dw, %db = jit.layer_norm_grad %dy, %x, %mean, %mean weight %g axis = 1
      : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4x8xf32>)
        -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @layer_norm_grad_mean_type(%dy: tensor<4x8xf16>, %x: tensor<4x8xf16>, %mean: tensor<4xf16>,
                                     %rstd: tensor<4xf32>) {
  // expected-error @below {{'jit.layer_norm_grad' operand 'mean' of type 'tensor<4xf16>' must be 'tensor<4xf32>': one statistic per normalised row, as jit.layer_norm yields it}}
  // expected-error @below {{failed to infer returned types}}
  %dx, %dw, %db = jit.layer_norm_grad %dy, %x, %mean, %rstd axis = 1
      : (tensor<4x8xf16>, tensor<4x8xf16>, tensor<4xf16>, tensor<4xf32>)
        -> (tensor<4x8xf16>, tensor<8xf16>, tensor<8xf16>)
  return
}

// -----

func.func @layer_norm_grad_rstd_shape(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %mean: tensor<4xf32>,
                                      %rstd: tensor<8xf32>) {
  // expected-error @below {{'jit.layer_norm_grad' operand 'rstd' of type 'tensor<8xf32>' must be 'tensor<4xf32>': one statistic per normalised row, as jit.layer_norm yields it}}
  // expected-error @below {{failed to infer returned types}}
  %dx, %dw, %db = jit.layer_norm_grad %dy, %x, %mean, %rstd axis = 1
      : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32>)
        -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @dropout_p_one(%x: tensor<4xf32>, %rng: tensor<2xi64>) {
  // expected-error @below {{'jit.dropout' probability p = 1.000000e+00 must be in [0, 1)}}
  // expected-error @below {{failed to infer returned types}}
  %y, %mask, %rng1 = jit.dropout %x, %rng p = 1.0
      : (tensor<4xf32>, tensor<2xi64>) -> (tensor<4xf32>, tensor<4xi1>, tensor<2xi64>)
  return
}

// -----

func.func @dropout_p_negative(%x: tensor<4xf32>, %rng: tensor<2xi64>) {
  // expected-error @below {{'jit.dropout' probability p = -1.000000e-01 must be in [0, 1)}}
  // expected-error @below {{failed to infer returned types}}
  %y, %mask, %rng1 = jit.dropout %x, %rng p = -0.1
      : (tensor<4xf32>, tensor<2xi64>) -> (tensor<4xf32>, tensor<4xi1>, tensor<2xi64>)
  return
}

// -----

func.func @dropout_p_nan(%x: tensor<4xf32>, %rng: tensor<2xi64>) {
  // expected-error @below {{'jit.dropout' probability p = nan must be in [0, 1)}}
  // expected-error @below {{failed to infer returned types}}
  %y, %mask, %rng1 = jit.dropout %x, %rng p = 0x7FF8000000000000
      : (tensor<4xf32>, tensor<2xi64>) -> (tensor<4xf32>, tensor<4xi1>, tensor<2xi64>)
  return
}

// -----

func.func @dropout_rng_state_shape(%x: tensor<4xf32>, %rng: tensor<3xi64>) {
  // expected-error @below {{'jit.dropout' operand 'rng_state' of type 'tensor<3xi64>' must be tensor<2xi64>: [seed, offset]}}
  // expected-error @below {{failed to infer returned types}}
  %y, %mask, %rng1 = jit.dropout %x, %rng p = 0.5
      : (tensor<4xf32>, tensor<3xi64>) -> (tensor<4xf32>, tensor<4xi1>, tensor<3xi64>)
  return
}

//===----------------------------------------------------------------------===//
// Losses and their gradients
//===----------------------------------------------------------------------===//

// -----

func.func @mse_loss_target_type(%y: tensor<4x8xf32>, %t: tensor<4x8xf16>) -> tensor<f32> {
  // expected-error @below {{'jit.mse_loss' operand 'target' of type 'tensor<4x8xf16>' must have the type of operand 'input', 'tensor<4x8xf32>'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.mse_loss %y, %t reduction = mean : (tensor<4x8xf32>, tensor<4x8xf16>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @mse_loss_reduction_none_result(%y: tensor<4x8xf32>, %t: tensor<4x8xf32>) -> tensor<f32> {
  // expected-error @below {{'jit.mse_loss' op inferred type(s) 'tensor<4x8xf32>' are incompatible with return type(s) of operation 'tensor<f32>'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.mse_loss %y, %t reduction = none : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @mse_loss_grad_target_shape(%g: tensor<f32>, %y: tensor<4x8xf32>, %t: tensor<8x4xf32>) -> tensor<4x8xf32> {
  // expected-error @below {{'jit.mse_loss_grad' operand 'target' of type 'tensor<8x4xf32>' must have the type of operand 'input', 'tensor<4x8xf32>'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.mse_loss_grad %g, %y, %t reduction = mean
      : (tensor<f32>, tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @mse_loss_grad_output(%g: tensor<f32>, %y: tensor<4x8xf32>, %t: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @below {{'jit.mse_loss_grad' operand 'grad_output' of type 'tensor<f32>' must be 'tensor<4x8xf32>', the type of the loss it differentiates (reduction = none)}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.mse_loss_grad %g, %y, %t reduction = none
      : (tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @cross_entropy_logits_rank(%logits: tensor<4x10x2xf32>, %labels: tensor<4xi64>) -> tensor<f32> {
  // expected-error @below {{'jit.cross_entropy' operand 'logits' of type 'tensor<4x10x2xf32>' must have rank 2: [batch, classes]}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.cross_entropy %logits, %labels reduction = mean : (tensor<4x10x2xf32>, tensor<4xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @cross_entropy_labels_rows(%logits: tensor<4x10xf32>, %labels: tensor<5xi64>) -> tensor<f32> {
  // expected-error @below {{'jit.cross_entropy' operand 'labels' of type 'tensor<5xi64>' must have shape [4]: one class index per row of 'logits'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.cross_entropy %logits, %labels reduction = mean : (tensor<4x10xf32>, tensor<5xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// One-hot labels are not class indices.
func.func @cross_entropy_labels_rank(%logits: tensor<4x10xf32>, %labels: tensor<4x10xi64>) -> tensor<f32> {
  // expected-error @below {{'jit.cross_entropy' operand 'labels' of type 'tensor<4x10xi64>' must have shape [4]: one class index per row of 'logits'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.cross_entropy %logits, %labels reduction = mean : (tensor<4x10xf32>, tensor<4x10xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @cross_entropy_label_smoothing(%logits: tensor<4x10xf32>, %labels: tensor<4xi64>) -> tensor<f32> {
  // expected-error @below {{'jit.cross_entropy' op label_smoothing = 1.500000e+00 must be in [0, 1]}}
  %0 = jit.cross_entropy %logits, %labels reduction = mean {label_smoothing = 1.5}
      : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @cross_entropy_grad_label_smoothing(%g: tensor<f32>, %logits: tensor<4x10xf32>, %labels: tensor<4xi64>) -> tensor<4x10xf32> {
  // expected-error @below {{'jit.cross_entropy_grad' op label_smoothing = -1.000000e-01 must be in [0, 1]}}
  %0 = jit.cross_entropy_grad %g, %logits, %labels reduction = mean {label_smoothing = -0.1}
      : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}

// -----

func.func @cross_entropy_grad_output(%g: tensor<f32>, %logits: tensor<4x10xf32>, %labels: tensor<4xi64>) -> tensor<4x10xf32> {
  // expected-error @below {{'jit.cross_entropy_grad' operand 'grad_output' of type 'tensor<f32>' must be 'tensor<4xf32>', the type of the loss it differentiates (reduction = none)}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.cross_entropy_grad %g, %logits, %labels reduction = none
      : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}

// -----

func.func @cross_entropy_grad_labels(%g: tensor<f32>, %logits: tensor<4x10xf32>, %labels: tensor<10xi64>) -> tensor<4x10xf32> {
  // expected-error @below {{'jit.cross_entropy_grad' operand 'labels' of type 'tensor<10xi64>' must have shape [4]: one class index per row of 'logits'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.cross_entropy_grad %g, %logits, %labels reduction = mean
      : (tensor<f32>, tensor<4x10xf32>, tensor<10xi64>) -> tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}

// -----

func.func @nll_loss_log_probs_rank(%logp: tensor<10xf32>, %labels: tensor<10xi64>) -> tensor<f32> {
  // expected-error @below {{'jit.nll_loss' operand 'log_probs' of type 'tensor<10xf32>' must have rank 2: [batch, classes]}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.nll_loss %logp, %labels reduction = sum : (tensor<10xf32>, tensor<10xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @nll_loss_labels_rows(%logp: tensor<4x10xf32>, %labels: tensor<3xi64>) -> tensor<f32> {
  // expected-error @below {{'jit.nll_loss' operand 'labels' of type 'tensor<3xi64>' must have shape [4]: one class index per row of 'log_probs'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.nll_loss %logp, %labels reduction = sum : (tensor<4x10xf32>, tensor<3xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// The loss's gradient has the loss's element type.
func.func @nll_loss_grad_output(%g: tensor<f16>, %logp: tensor<4x10xf32>, %labels: tensor<4xi64>) -> tensor<4x10xf32> {
  // expected-error @below {{'jit.nll_loss_grad' operand 'grad_output' of type 'tensor<f16>' must be 'tensor<f32>', the type of the loss it differentiates (reduction = mean)}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.nll_loss_grad %g, %logp, %labels reduction = mean
      : (tensor<f16>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}

// -----

func.func @nll_loss_grad_log_probs_rank(%g: tensor<f32>, %logp: tensor<4x10x1xf32>, %labels: tensor<4xi64>) -> tensor<4x10x1xf32> {
  // expected-error @below {{'jit.nll_loss_grad' operand 'log_probs' of type 'tensor<4x10x1xf32>' must have rank 2: [batch, classes]}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.nll_loss_grad %g, %logp, %labels reduction = mean
      : (tensor<f32>, tensor<4x10x1xf32>, tensor<4xi64>) -> tensor<4x10x1xf32>
  return %0 : tensor<4x10x1xf32>
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

// -----

func.func @sgd_grad_shape(%w: tensor<4x8xf32>, %g: tensor<8x4xf16>, %lr: tensor<f32>) -> tensor<4x8xf32> {
  // expected-error @below {{'jit.sgd_update' operand 'grad' of type 'tensor<8x4xf16>' must have the shape of operand 'param' of type 'tensor<4x8xf32>'}}
  // expected-error @below {{failed to infer returned types}}
  %0 = jit.sgd_update %w, %g lr %lr : (tensor<4x8xf32>, tensor<8x4xf16>, tensor<f32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @sgd_momentum_buffer_type(%w: tensor<8xf32>, %g: tensor<8xf32>, %buf: tensor<8xf16>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.sgd_update' operand 'momentum_buffer' of type 'tensor<8xf16>' must have the type of operand 'param', 'tensor<8xf32>'}}
  // expected-error @below {{failed to infer returned types}}
  %w1, %buf1 = jit.sgd_update %w, %g momentum_buffer %buf lr %lr {momentum = 0.9}
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf16>, tensor<f32>) -> (tensor<8xf32>, tensor<8xf16>)
  return
}

// -----

func.func @sgd_negative_momentum(%w: tensor<8xf32>, %g: tensor<8xf32>, %buf: tensor<8xf32>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.sgd_update' op momentum must be non-negative, but is -9.000000e-01}}
  %w1, %buf1 = jit.sgd_update %w, %g momentum_buffer %buf lr %lr {momentum = -0.9}
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @sgd_negative_weight_decay(%w: tensor<8xf32>, %g: tensor<8xf32>, %lr: tensor<f32>) -> tensor<8xf32> {
  // expected-error @below {{'jit.sgd_update' op weight_decay must be non-negative, but is -1.000000e-02}}
  %0 = jit.sgd_update %w, %g lr %lr {weight_decay = -0.01} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @sgd_momentum_without_buffer(%w: tensor<8xf32>, %g: tensor<8xf32>, %lr: tensor<f32>) -> tensor<8xf32> {
  // expected-error @below {{'jit.sgd_update' op momentum = 9.000000e-01 needs operand 'momentum_buffer' to hold the velocity}}
  %0 = jit.sgd_update %w, %g lr %lr {momentum = 0.9} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @sgd_buffer_without_momentum(%w: tensor<8xf32>, %g: tensor<8xf32>, %buf: tensor<8xf32>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.sgd_update' op operand 'momentum_buffer' is given but momentum = 0 never uses it}}
  %w1, %buf1 = jit.sgd_update %w, %g momentum_buffer %buf lr %lr
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @sgd_nesterov_without_momentum(%w: tensor<8xf32>, %g: tensor<8xf32>, %lr: tensor<f32>) -> tensor<8xf32> {
  // expected-error @below {{'jit.sgd_update' op nesterov needs momentum > 0 and dampening = 0 (as in PyTorch), got momentum = 0.000000e+00, dampening = 0.000000e+00}}
  %0 = jit.sgd_update %w, %g lr %lr {nesterov} : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @sgd_nesterov_with_dampening(%w: tensor<8xf32>, %g: tensor<8xf32>, %buf: tensor<8xf32>, %t: tensor<i64>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.sgd_update' op nesterov needs momentum > 0 and dampening = 0 (as in PyTorch), got momentum = 9.000000e-01, dampening = 1.000000e-01}}
  %w1, %buf1 = jit.sgd_update %w, %g momentum_buffer %buf step %t lr %lr {momentum = 0.9, dampening = 0.1, nesterov}
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @sgd_dampening_without_step(%w: tensor<8xf32>, %g: tensor<8xf32>, %buf: tensor<8xf32>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.sgd_update' op dampening = 1.000000e-01 needs operand 'step': PyTorch starts the buffer as the undampened gradient on the first step}}
  %w1, %buf1 = jit.sgd_update %w, %g momentum_buffer %buf lr %lr {momentum = 0.9, dampening = 0.1}
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @sgd_step_without_buffer(%w: tensor<8xf32>, %g: tensor<8xf32>, %t: tensor<i64>, %lr: tensor<f32>) -> tensor<8xf32> {
  // expected-error @below {{'jit.sgd_update' op operand 'step' is only used to start a momentum buffer}}
  %0 = jit.sgd_update %w, %g step %t lr %lr : (tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @embedding_table_rank(%ids: tensor<4xi64>, %table: tensor<100xf32>) {
  // expected-error @below {{'jit.embedding' operand 'weight' of type 'tensor<100xf32>' must have rank 2: [num_embeddings, embedding_dim]}}
  // expected-error @below {{failed to infer returned types}}
  %e = jit.embedding %ids, %table : (tensor<4xi64>, tensor<100xf32>) -> tensor<4x1xf32>
  return
}

// -----

func.func @embedding_padding_outside(%ids: tensor<4xi64>, %table: tensor<10x3xf32>) {
  // expected-error @below {{'jit.embedding' padding_idx = 10 is not a row of the table (expected 0 <= padding_idx < 10)}}
  // expected-error @below {{failed to infer returned types}}
  %e = jit.embedding %ids, %table {padding_idx = 10 : i64} : (tensor<4xi64>, tensor<10x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @embedding_indices_float(%ids: tensor<4xf32>, %table: tensor<10x3xf32>) {
  // expected-error @below {{operand #0 must be statically shaped tensor (at most 2^48 elements) of 64-bit signless integer values}}
  %e = jit.embedding %ids, %table : (tensor<4xf32>, tensor<10x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @embedding_grad_shape(%de: tensor<4x3xf32>, %ids: tensor<5xi64>) {
  // expected-error @below {{'jit.embedding_grad' operand 'grad_output' of type 'tensor<4x3xf32>' must have the shape of operand 'indices' ('tensor<5xi64>') followed by embedding_dim}}
  // expected-error @below {{failed to infer returned types}}
  %g = jit.embedding_grad %de, %ids {num_weights = 10 : i64} : (tensor<4x3xf32>, tensor<5xi64>) -> tensor<10x3xf32>
  return
}

// -----

func.func @adam_grad_shape(%w: tensor<8xf32>, %g: tensor<4xf16>, %m: tensor<8xf32>, %t: tensor<i64>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.adam_update' operand 'grad' of type 'tensor<4xf16>' must have the shape of operand 'param' of type 'tensor<8xf32>'}}
  // expected-error @below {{failed to infer returned types}}
  %w1, %m1, %v1 = jit.adam_update %w, %g, %m, %m step %t lr %lr
      : (tensor<8xf32>, tensor<4xf16>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @adam_exp_avg_type(%w: tensor<8xf32>, %g: tensor<8xf16>, %m: tensor<8xf16>, %v: tensor<8xf32>,
                             %t: tensor<i64>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.adam_update' operand 'exp_avg' of type 'tensor<8xf16>' must have the type of operand 'param', 'tensor<8xf32>'}}
  // expected-error @below {{failed to infer returned types}}
  %w1, %m1, %v1 = jit.adam_update %w, %g, %m, %v step %t lr %lr
      : (tensor<8xf32>, tensor<8xf16>, tensor<8xf16>, tensor<8xf32>, tensor<i64>, tensor<f32>)
        -> (tensor<8xf32>, tensor<8xf16>, tensor<8xf32>)
  return
}

// -----

func.func @adam_exp_avg_sq_shape(%w: tensor<8xf32>, %g: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<1x8xf32>,
                                 %t: tensor<i64>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.adam_update' operand 'exp_avg_sq' of type 'tensor<1x8xf32>' must have the type of operand 'param', 'tensor<8xf32>'}}
  // expected-error @below {{failed to infer returned types}}
  %w1, %m1, %v1 = jit.adam_update %w, %g, %m, %v step %t lr %lr
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<1x8xf32>, tensor<i64>, tensor<f32>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<1x8xf32>)
  return
}

// -----

func.func @adam_max_exp_avg_sq_type(%w: tensor<8xf32>, %g: tensor<8xf16>, %v: tensor<8xf32>, %vmax: tensor<8xf16>,
                                    %t: tensor<i64>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.adam_update' operand 'max_exp_avg_sq' of type 'tensor<8xf16>' must have the type of operand 'param', 'tensor<8xf32>'}}
  // expected-error @below {{failed to infer returned types}}
  %w1, %m1, %v1, %vmax1 = jit.adam_update %w, %g, %v, %v max_exp_avg_sq %vmax step %t lr %lr
      : (tensor<8xf32>, tensor<8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf16>, tensor<i64>, tensor<f32>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf16>)
  return
}

// -----

func.func @adam_max_exp_avg_sq_without_its_result(%w: tensor<8xf32>, %t: tensor<i64>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.adam_update' op has 3 results but needs 4: 'new_param', 'new_exp_avg', 'new_exp_avg_sq', 'new_max_exp_avg_sq' (for operand 'max_exp_avg_sq'); an optional state operand and its new value come together}}
  %w1, %m1, %v1 = "jit.adam_update"(%w, %w, %w, %w, %w, %t, %lr)
      <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 0, 0, 0>}>
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @adam_beta1_one(%w: tensor<8xf32>, %t: tensor<i64>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.adam_update' op beta1 = 1.000000e+00 must be in [0, 1)}}
  %w1, %m1, %v1 = jit.adam_update %w, %w, %w, %w step %t lr %lr {beta1 = 1.0}
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @adam_beta2_negative(%w: tensor<8xf32>, %t: tensor<i64>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.adam_update' op beta2 = -9.990000e-01 must be in [0, 1)}}
  %w1, %m1, %v1 = jit.adam_update %w, %w, %w, %w step %t lr %lr {beta2 = -0.999}
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @adam_negative_eps(%w: tensor<8xf32>, %t: tensor<i64>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.adam_update' op eps must be non-negative, but is -1.000000e-08}}
  %w1, %m1, %v1 = jit.adam_update %w, %w, %w, %w step %t lr %lr {eps = -1.0e-08}
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @adam_negative_weight_decay(%w: tensor<8xf32>, %t: tensor<i64>, %lr: tensor<f32>) {
  // expected-error @below {{'jit.adam_update' op weight_decay must be non-negative, but is -1.000000e-02}}
  %w1, %m1, %v1 = jit.adam_update %w, %w, %w, %w step %t lr %lr {weight_decay = -0.01, decoupled_weight_decay}
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

//===----------------------------------------------------------------------===//
// State model: jit.role, jit.tied, jit.returned, jit.derived_from (StateModel.cpp)
//===----------------------------------------------------------------------===//

// -----

// expected-error @below {{argument #1 has 'jit.role = "weights"'; expected one of "input", "param", "grad", "opt_state", "scaler_state", "hyper"}}
func.func @role_unknown(%x: tensor<4xf32> {jit.role = "input"}, %w: tensor<4xf32> {jit.role = "weights"}) {
  return
}

// -----

// expected-error @below {{argument #0 has 'jit.role = 1 : i64'; expected one of "input", "param", "grad", "opt_state", "scaler_state", "hyper"}}
func.func @role_not_a_string(%x: tensor<4xf32> {jit.role = 1 : i64}) {
  return
}

// -----

// Roles are case-sensitive, as the runtime's parser is.
// expected-error @below {{argument #0 has 'jit.role = "Param"'; expected one of}}
func.func private @role_wrong_case(tensor<4xf32> {jit.role = "Param"})

// -----

// expected-error @below {{unknown argument attribute 'jit.tied' on argument #0; the jit dialect defines 'jit.role' and 'jit.derived_from'}}
func.func @tied_on_argument(%w: tensor<4xf32> {jit.tied = 0 : i64}) {
  return
}

// -----

// expected-error @below {{unknown result attribute 'jit.role' on result #0; the jit dialect defines 'jit.tied' and 'jit.returned'}}
func.func @role_on_result(%w: tensor<4xf32> {jit.role = "param"}) -> (tensor<4xf32> {jit.role = "param"}) {
  return %w : tensor<4xf32>
}

// -----

// expected-error @below {{'jit.returned' on result #0 is a unit flag, but is true}}
func.func @returned_not_a_unit_flag(%w: tensor<4xf32> {jit.role = "param"}) -> (tensor<4xf32> {jit.returned = true}) {
  return %w : tensor<4xf32>
}

// -----

// expected-error @below {{result #1 has both 'jit.tied' and 'jit.returned'; a result is either new state or what the step returns}}
func.func @returned_and_tied(%w: tensor<4xf32> {jit.role = "param"})
    -> (tensor<4xf32> {jit.returned}, tensor<4xf32> {jit.returned, jit.tied = 0 : i64}) {
  return %w, %w : tensor<4xf32>, tensor<4xf32>
}

// -----

// expected-error @below {{unknown argument attribute 'jit.returned' on argument #0; the jit dialect defines 'jit.role' and 'jit.derived_from'}}
func.func @returned_on_argument(%w: tensor<4xf32> {jit.returned}) {
  return
}

// -----

// expected-error @below {{'jit.tied = 2' on result #0 is not an argument index (the function has 2 arguments)}}
func.func @tied_out_of_range(%x: tensor<4xf32> {jit.role = "input"}, %w: tensor<4xf32> {jit.role = "param"})
    -> (tensor<4xf32> {jit.tied = 2 : i64}) {
  return %w : tensor<4xf32>
}

// -----

// expected-error @below {{'jit.tied = -1' on result #0 is not an argument index (the function has 1 arguments)}}
func.func @tied_negative(%w: tensor<4xf32> {jit.role = "param"}) -> (tensor<4xf32> {jit.tied = -1 : i64}) {
  return %w : tensor<4xf32>
}

// -----

// expected-error @below {{'jit.tied' on result #0 must be an i64 argument index, but is 0 : i32}}
func.func @tied_not_i64(%w: tensor<4xf32> {jit.role = "param"}) -> (tensor<4xf32> {jit.tied = 0 : i32}) {
  return %w : tensor<4xf32>
}

// -----

// expected-error @below {{'jit.tied' on result #0 must be an i64 argument index, but is "w"}}
func.func @tied_not_an_integer(%w: tensor<4xf32> {jit.role = "param"}) -> (tensor<4xf32> {jit.tied = "w"}) {
  return %w : tensor<4xf32>
}

// -----

// expected-error @below {{result #1 is tied to argument #0, an "input"; only state can be updated in place}}
func.func @tied_to_input(%x: tensor<4xf32> {jit.role = "input"}, %w: tensor<4xf32> {jit.role = "param"})
    -> (tensor<4xf32> {jit.tied = 1 : i64}, tensor<4xf32> {jit.tied = 0 : i64}) {
  return %w, %x : tensor<4xf32>, tensor<4xf32>
}

// -----

// expected-error @below {{result #0 is tied to argument #0, which has no 'jit.role'; only state can be updated}}
func.func @tied_to_argument_without_role(%w: tensor<4xf32>) -> (tensor<4xf32> {jit.tied = 0 : i64}) {
  return %w : tensor<4xf32>
}

// -----

// O1 keeps fp32 master weights: an f16 update cannot replace them in place.
// expected-error @below {{result #0 of type 'tensor<4xf16>' is tied to argument #0 of a different type, 'tensor<4xf32>'}}
func.func @tied_type_mismatch(%w: tensor<4xf32> {jit.role = "param"}) -> (tensor<4xf16> {jit.tied = 0 : i64}) {
  %0 = amp.cast %w : tensor<4xf32> to tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

// expected-error @below {{results #0 and #2 are both tied to argument #1; a state argument has one new value per step}}
func.func @tied_twice(%x: tensor<4xf32> {jit.role = "input"}, %w: tensor<4xf32> {jit.role = "param"})
    -> (tensor<4xf32> {jit.tied = 1 : i64}, tensor<4xf32>, tensor<4xf32> {jit.tied = 1 : i64}) {
  return %w, %x, %w : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Declarations are checked from their signature alone.
// expected-error @below {{result #0 of type 'tensor<8xf32>' is tied to argument #0 of a different type, 'tensor<4xf32>'}}
func.func private @tied_in_declaration(tensor<4xf32> {jit.role = "param"}) -> (tensor<8xf32> {jit.tied = 0 : i64})

// -----

// expected-error @below {{'jit.derived_from = 3' on argument #1 is not an argument index (the function has 2 arguments)}}
func.func @derived_from_out_of_range(%w: tensor<4xf32> {jit.role = "param"},
                                     %h: tensor<4xf16> {jit.role = "param", jit.derived_from = 3 : i64}) {
  return
}

// -----

// expected-error @below {{'jit.derived_from' on argument #1 must be an i64 argument index, but is 0.000000e+00 : f32}}
func.func @derived_from_not_an_index(%w: tensor<4xf32> {jit.role = "param"},
                                     %h: tensor<4xf16> {jit.role = "param", jit.derived_from = 0.0 : f32}) {
  return
}

// -----

// expected-error @below {{argument #0 cannot be derived from itself}}
func.func @derived_from_itself(%w: tensor<4xf32> {jit.role = "param", jit.derived_from = 0 : i64}) {
  return
}

// -----

// expected-error @below {{argument #1 is derived from argument #0, which is not state (it needs a 'jit.role' other than "input")}}
func.func @derived_from_input(%x: tensor<4xf32> {jit.role = "input"},
                              %h: tensor<4xf16> {jit.role = "param", jit.derived_from = 0 : i64}) {
  return
}

// -----

// expected-error @below {{argument #1 is derived from argument #0, which is not state (it needs a 'jit.role' other than "input")}}
func.func @derived_from_argument_without_role(%w: tensor<4xf32>,
                                              %h: tensor<4xf16> {jit.role = "param", jit.derived_from = 0 : i64}) {
  return
}

// -----

// The runtime keeps and re-derives only state; a derived copy must be state itself.
// expected-error @below {{argument #1 has 'jit.derived_from' but is not state (it needs a 'jit.role' other than "input")}}
func.func @derived_argument_without_role(%w: tensor<4xf32> {jit.role = "param"},
                                         %h: tensor<4xf16> {jit.derived_from = 0 : i64}) {
  return
}

// -----

// expected-error @below {{argument #1 has 'jit.derived_from' but is not state (it needs a 'jit.role' other than "input")}}
func.func @derived_argument_is_input(%w: tensor<4xf32> {jit.role = "param"},
                                     %h: tensor<4xf16> {jit.role = "input", jit.derived_from = 0 : i64}) {
  return
}

// -----

// expected-error @below {{argument #1 of type 'tensor<8xf16>' must have the shape of argument #0, which it is derived from ('tensor<4xf32>')}}
func.func @derived_from_other_shape(%w: tensor<4xf32> {jit.role = "param"},
                                    %h: tensor<8xf16> {jit.role = "param", jit.derived_from = 0 : i64}) {
  return
}

// -----

// expected-error @below {{unknown argument attribute 'jit.derivedFrom' on argument #0; the jit dialect defines 'jit.role' and 'jit.derived_from'}}
func.func @unknown_argument_attribute(%w: tensor<4xf32> {jit.derivedFrom = 0 : i64}) {
  return
}

//===----------------------------------------------------------------------===//
// Attributes on operations: jit.op_id, jit.vjp_of
//===----------------------------------------------------------------------===//

// -----

func.func @op_id_negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu' op 'jit.op_id' must be a non-negative i64 op id, but is -1 : i64}}
  %0 = jit.relu %x {jit.op_id = -1 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @op_id_not_i64(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu' op 'jit.op_id' must be a non-negative i64 op id, but is 3 : i32}}
  %0 = jit.relu %x {jit.op_id = 3 : i32} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @vjp_of_negative(%dy: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu_grad' op 'jit.vjp_of' must be a non-negative i64 op id, but is -7 : i64}}
  %0 = jit.relu_grad %dy, %y {jit.vjp_of = -7 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @vjp_of_not_an_integer(%dy: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu_grad' op 'jit.vjp_of' must be a non-negative i64 op id, but is "relu"}}
  %0 = jit.relu_grad %dy, %y {jit.vjp_of = "relu"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// The state-model attributes are checked on any op, not only jit ones.
func.func @role_on_operation(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu' op 'jit.role' belongs on a function argument, not on an operation}}
  %0 = jit.relu %x {jit.role = "param"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @below {{'func.func' op 'jit.tied' belongs on a function result, not on an operation}}
func.func @tied_on_function(%w: tensor<4xf32> {jit.role = "param"}) -> tensor<4xf32> attributes {jit.tied = 0 : i64} {
  return %w : tensor<4xf32>
}

// -----

func.func @returned_on_operation(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu' op 'jit.returned' belongs on a function result, not on an operation}}
  %0 = jit.relu %x {jit.returned} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @derived_from_on_operation(%x: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @below {{'amp.cast' op 'jit.derived_from' belongs on a function argument, not on an operation}}
  %0 = amp.cast %x {jit.derived_from = 0 : i64} : tensor<4xf32> to tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

func.func @unknown_operation_attribute(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.relu' op unknown attribute 'jit.opid'; the jit dialect defines 'jit.op_id', 'jit.vjp_of', 'jit.grad_of_leaf', 'jit.wrapped_operands' and 'jit.linear_bias' on operations}}
  %0 = jit.relu %x {jit.opid = 3 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @wrapped_operand_out_of_range(%x: tensor<4xf32>, %c: tensor<f32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.mul' op 'jit.wrapped_operands' names operand 2 of an op with 2 operands}}
  %0 = jit.mul %x, %c {jit.wrapped_operands = array<i64: 2>} : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @wrapped_operand_not_a_number(%x: tensor<4xf32>, %c: tensor<f32>) -> tensor<4xf32> {
  // expected-error @below {{'jit.mul' op 'jit.wrapped_operands' names operand 0, which is not a 0-d floating-point tensor}}
  %0 = jit.mul %x, %c {jit.wrapped_operands = array<i64: 0>} : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @linear_bias_not_a_flag(%y: tensor<4x3xf32>, %b: tensor<3xf32>) -> tensor<4x3xf32> {
  // expected-error @below {{'jit.add' op 'jit.linear_bias' is a unit flag, but is true}}
  %0 = jit.add %y, %b {jit.linear_bias = true} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @linear_bias_on_another_op(%y: tensor<4x3xf32>, %b: tensor<3xf32>) -> tensor<4x3xf32> {
  // expected-error @below {{'jit.mul' op 'jit.linear_bias' marks the jit.add of a linear layer's bias, not another op}}
  %0 = jit.mul %y, %b {jit.linear_bias} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @conv2d_channels_per_group(%x: tensor<2x4x8x8xf32>, %w: tensor<6x4x3x3xf32>) {
  // expected-error @below {{'jit.conv2d' operand 'weight' of type 'tensor<6x4x3x3xf32>' must have 2 input channels per group in layout nchw (input 'tensor<2x4x8x8xf32>' has 4 channels in 2 groups)}}
  // expected-error @below {{failed to infer returned types}}
  %y = jit.conv2d %x, %w stride = [1, 1] padding = [0, 0] dilation = [1, 1] groups = 2
      : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>) -> tensor<2x6x6x6xf32>
  return
}

// -----

func.func @conv2d_groups_divide_channels(%x: tensor<2x4x8x8xf32>, %w: tensor<5x1x3x3xf32>) {
  // expected-error @below {{'jit.conv2d' groups = 4 must divide the input channels (4) and the output channels (5)}}
  // expected-error @below {{failed to infer returned types}}
  %y = jit.conv2d %x, %w stride = [1, 1] padding = [0, 0] dilation = [1, 1] groups = 4
      : (tensor<2x4x8x8xf32>, tensor<5x1x3x3xf32>) -> tensor<2x5x6x6xf32>
  return
}

// -----

func.func @conv2d_kernel_larger_than_input(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) {
  // expected-error @below {{'jit.conv2d' the height 4 of operand 'input' is smaller than the dilated kernel (3, dilation 2, padding 0)}}
  // expected-error @below {{failed to infer returned types}}
  %y = jit.conv2d %x, %w stride = [1, 1] padding = [0, 0] dilation = [2, 2]
      : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x1x1xf32>
  return
}

// -----

func.func @conv2d_window_attribute_arity(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) {
  // expected-error @below {{'jit.conv2d' attribute 'stride' must have 2 entries [height, width], got 3}}
  // expected-error @below {{failed to infer returned types}}
  %y = jit.conv2d %x, %w stride = [1, 1, 1] padding = [0, 0] dilation = [1, 1]
      : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x2x2xf32>
  return
}

// -----

// 2^62 x 4 elements would wrap to 0 in int64 and match the result's count.
func.func @reshape_huge(%x: tensor<4611686018427387904x4xf32>) {
  // expected-error @below {{'jit.reshape' op operand #0 must be statically shaped tensor (at most 2^48 elements) of f16, bf16, f32, f64, i64 or i1 values, but got 'tensor<4611686018427387904x4xf32>'}}
  %y = jit.reshape %x : tensor<4611686018427387904x4xf32> -> tensor<0xf32>
  return
}

// -----

// A window parameter past int32 is refused before any size arithmetic (the
// dilated kernel's extent overflowed int64 here once).
func.func @conv2d_grad_input_huge_dilation(%dy: tensor<1x2x4x4xf32>, %w: tensor<2x2x3x3xf32>) {
  // expected-error @below {{'jit.conv2d_grad_input' attribute 'dilation' entries must be in [1, 2147483647], got [1, 4611686018427387904]}}
  %dx = jit.conv2d_grad_input %dy, %w stride = [1, 1] padding = [1, 1] dilation = [1, 4611686018427387904]
      : (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32>
  return
}

// -----

func.func @max_pool2d_huge_padding(%x: tensor<1x1x8x8xf32>) {
  // expected-error @below {{'jit.max_pool2d' attribute 'padding' entries must be in [0, 2147483647], got [0, 4611686018427387904]}}
  // expected-error @below {{failed to infer returned types}}
  %y = jit.max_pool2d %x kernel_size = [3, 3] stride = [2, 2] padding = [0, 4611686018427387904] : tensor<1x1x8x8xf32> -> tensor<1x1x3x3xf32>
  return
}

// -----

func.func @conv2d_element_types(%x: tensor<1x1x4x4xf16>, %w: tensor<1x1x3x3xf32>) {
  // expected-error @below {{'jit.conv2d' operand 'weight' of type 'tensor<1x1x3x3xf32>' must have the element type of operand 'input', 'tensor<1x1x4x4xf16>'}}
  // expected-error @below {{failed to infer returned types}}
  %y = jit.conv2d %x, %w stride = [1, 1] padding = [0, 0] dilation = [1, 1]
      : (tensor<1x1x4x4xf16>, tensor<1x1x3x3xf32>) -> tensor<1x1x2x2xf16>
  return
}

// -----

// Stride 2 makes both 8 and 9 rows give 4 output rows; the result type says which.
func.func @conv2d_grad_input_shape(%dy: tensor<1x2x4x4xf32>, %w: tensor<2x1x3x3xf32>) {
  // expected-error @below {{'jit.conv2d_grad_input' operand 'grad_output' of type 'tensor<1x2x4x4xf32>' must be 'tensor<1x2x3x3xf32>', the type the forward op yields for an input of the result's type}}
  %dx = jit.conv2d_grad_input %dy, %w stride = [2, 2] padding = [0, 0] dilation = [1, 1]
      : (tensor<1x2x4x4xf32>, tensor<2x1x3x3xf32>) -> tensor<1x1x8x8xf32>
  return
}

// -----

func.func @conv2d_grad_weight_shape(%dy: tensor<1x2x4x4xf32>, %x: tensor<1x1x6x6xf32>) {
  // expected-error @below {{'jit.conv2d_grad_weight' operand 'grad_output' of type 'tensor<1x2x4x4xf32>' must be 'tensor<1x2x2x2xf32>', the type the forward op yields for a filter of the result's type}}
  %dw = jit.conv2d_grad_weight %dy, %x stride = [1, 1] padding = [0, 0] dilation = [1, 1]
      : (tensor<1x2x4x4xf32>, tensor<1x1x6x6xf32>) -> tensor<2x1x5x5xf32>
  return
}

// -----

// Parameters and statistics stay f32 under f16 activations.
func.func @batch_norm_statistics_type(%x: tensor<4x3xf16>, %rm: tensor<3xf16>, %rv: tensor<3xf32>) {
  // expected-error @below {{'jit.batch_norm' operand 'running_mean' of type 'tensor<3xf16>' must be 'tensor<3xf32>': one value per channel in the statistics type (f32, or f64 for f64 input)}}
  // expected-error @below {{failed to infer returned types}}
  %y, %m, %i, %rm1, %rv1 = jit.batch_norm %x running_mean %rm running_var %rv axis = 1 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<4x3xf16>, tensor<3xf16>, tensor<3xf32>) -> (tensor<4x3xf16>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  return
}

// -----

func.func @batch_norm_momentum(%x: tensor<4x3xf32>, %rm: tensor<3xf32>, %rv: tensor<3xf32>) {
  // expected-error @below {{'jit.batch_norm' op momentum = 1.500000e+00 must be in [0, 1]}}
  %y, %m, %i, %rm1, %rv1 = jit.batch_norm %x running_mean %rm running_var %rv axis = 1 eps = 1.0e-05 momentum = 1.5
      : (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  return
}

// -----

func.func @batch_norm_no_channels(%x: tensor<4x0xf32>, %rm: tensor<0xf32>, %rv: tensor<0xf32>) {
  // expected-error @below {{'jit.batch_norm' op input 'tensor<4x0xf32>' has no channels (dimension 1 is 0)}}
  %y, %m, %i, %rm1, %rv1 = jit.batch_norm %x running_mean %rm running_var %rv axis = 1 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<4x0xf32>, tensor<0xf32>, tensor<0xf32>) -> (tensor<4x0xf32>, tensor<0xf32>, tensor<0xf32>, tensor<0xf32>, tensor<0xf32>)
  return
}

// -----

func.func @batch_norm_single_value_per_channel(%x: tensor<1x3xf32>, %rm: tensor<3xf32>, %rv: tensor<3xf32>) {
  // expected-error @below {{'jit.batch_norm' op input 'tensor<1x3xf32>' has one value per channel: training statistics need more than one}}
  %y, %m, %i, %rm1, %rv1 = jit.batch_norm %x running_mean %rm running_var %rv axis = 1 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<1x3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<1x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  return
}

// -----

func.func @max_pool2d_padding(%x: tensor<1x1x8x8xf32>) {
  // expected-error @below {{'jit.max_pool2d' padding [2, 2] must be at most half the kernel [3, 3]}}
  // expected-error @below {{failed to infer returned types}}
  %y = jit.max_pool2d %x kernel_size = [3, 3] stride = [2, 2] padding = [2, 2] : tensor<1x1x8x8xf32> -> tensor<1x1x5x5xf32>
  return
}

// -----

func.func @avg_pool2d_grad_shape(%dy: tensor<1x1x3x3xf32>, %x: tensor<1x1x8x8xf32>) {
  // expected-error @below {{'jit.avg_pool2d_grad' operand 'grad_output' of type 'tensor<1x1x3x3xf32>' must be 'tensor<1x1x4x4xf32>', the type the forward op yields for operand 'input'}}
  // expected-error @below {{failed to infer returned types}}
  %dx = jit.avg_pool2d_grad %dy, %x kernel_size = [2, 2] stride = [2, 2] padding = [0, 0]
      : (tensor<1x1x3x3xf32>, tensor<1x1x8x8xf32>) -> tensor<1x1x8x8xf32>
  return
}
