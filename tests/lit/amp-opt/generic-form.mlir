// RUN: not amp-opt %s -split-input-file 2>&1 | FileCheck %s

// Ops in generic form can omit what the custom syntax always writes:
// required attributes, operands, results. Each is an error at the op, never a
// crash in a verifier or in result-type inference that reads what is missing.

func.func @missing_axis(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: generic-form.mlir:[[# @LINE + 1]]:8: error: 'jit.softmax' op requires attribute 'axis'
  %0 = "jit.softmax"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @missing_perm(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // CHECK: generic-form.mlir:[[# @LINE + 1]]:8: error: 'jit.transpose' op requires attribute 'perm'
  %0 = "jit.transpose"(%x) : (tensor<4x8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @missing_dropout_p(%x: tensor<4xf32>, %rng: tensor<2xi64>) {
  // CHECK: generic-form.mlir:[[# @LINE + 1]]:10: error: 'jit.dropout' op requires attribute 'p'
  %0:3 = "jit.dropout"(%x, %rng) : (tensor<4xf32>, tensor<2xi64>) -> (tensor<4xf32>, tensor<4xi1>, tensor<2xi64>)
  return
}

// -----

func.func @missing_operand_segments(%x: tensor<4x8xf32>) {
  // CHECK: generic-form.mlir:[[# @LINE + 1]]:10: error: 'jit.layer_norm' op operand count (1) does not match with the total size (0) specified in attribute 'operandSegmentSizes'
  %0:3 = "jit.layer_norm"(%x) {axis = 1 : i64} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @missing_operand(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: generic-form.mlir:[[# @LINE + 1]]:8: error: 'jit.matmul' op expected 2 operands, but found 1
  %0 = "jit.matmul"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @missing_results(%x: tensor<4x8xf32>) {
  // CHECK: generic-form.mlir:[[# @LINE + 1]]:10: error: 'jit.layer_norm_grad' op expected 3 results
  %0:2 = "jit.layer_norm_grad"(%x, %x, %x, %x) <{axis = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0>}>
      : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @no_gradients() -> tensor<i1> {
  // CHECK: generic-form.mlir:[[# @LINE + 1]]:8: error: 'amp.unscale_and_check' op expected 1 or more operands, but found 0
  %0 = "amp.unscale_and_check"() : () -> tensor<i1>
  return %0 : tensor<i1>
}

// -----

func.func @bad_property(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // CHECK: generic-form.mlir:[[# @LINE + 1]]:8: error: invalid properties {axes = 3 : i64} for op jit.sum
  %0 = "jit.sum"(%x) <{axes = 3 : i64}> : (tensor<4x8xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @missing_constant_value() -> tensor<f32> {
  // CHECK: generic-form.mlir:[[# @LINE + 1]]:8: error: 'jit.constant' op requires attribute 'value'
  %0 = "jit.constant"() : () -> tensor<f32>
  return %0 : tensor<f32>
}
