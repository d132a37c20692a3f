// A backward op (jit.vjp_of) takes its forward op's precision at O1 and auto
// (the pass's backward rule; PyTorch's autograd runs a backward in its
// forward's types): the f16 bias gradient sum of torch's linear is no deny op
// in f16 there. Its forward op must compute in that type; at O2, where deny
// ops and their gradients run in fp32, the same sum is an error.
// RUN: amp-opt %s -split-input-file --amp-verify -verify-diagnostics
// RUN: amp-opt %s -split-input-file --amp-verify="level=auto" -verify-diagnostics
// RUN: not amp-opt %s -split-input-file --amp-verify="level=O2" 2>&1 | FileCheck %s --check-prefix=O2

// O2: amp-verify-backward.mlir:[[# @LINE + 4]]:{{.*}} error: 'jit.sum' op computes in 'f16', but its category for 'f16' is deny
func.func @bias_gradient_of_an_f16_linear(%m: tensor<4x3xf16>, %b: tensor<3xf16>, %dy: tensor<4x3xf16>)
    -> (tensor<4x3xf16>, tensor<3xf32>) {
  %y = jit.add %m, %b {jit.op_id = 1 : i64, jit.linear_bias} : (tensor<4x3xf16>, tensor<3xf16>) -> tensor<4x3xf16>
  %db = jit.sum %dy axes = [0] {jit.vjp_of = 1 : i64} : tensor<4x3xf16> -> tensor<3xf16>
  %dbf = amp.cast %db : tensor<3xf16> to tensor<3xf32>
  return %y, %dbf : tensor<4x3xf16>, tensor<3xf32>
}

// jit.vjp_of names an op of another function: it follows nothing.
func.func @gradient_of_no_op(%dy: tensor<4x3xf16>) -> tensor<3xf32> {
  // expected-error @below {{'jit.sum' op computes in 'f16', but its category for 'f16' is deny}}
  %db = jit.sum %dy axes = [0] {jit.vjp_of = 1 : i64} : tensor<4x3xf16> -> tensor<3xf16>
  %dbf = amp.cast %db : tensor<3xf16> to tensor<3xf32>
  return %dbf : tensor<3xf32>
}

// -----

// The forward op computes in fp32: an f16 gradient sum follows nothing.
func.func @bias_gradient_of_an_f32_add(%m: tensor<4x3xf32>, %b: tensor<3xf32>, %dy: tensor<4x3xf16>)
    -> (tensor<4x3xf32>, tensor<3xf32>) {
  %y = jit.add %m, %b {jit.op_id = 1 : i64} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  // expected-error @below {{'jit.sum' op computes in 'f16', but its category for 'f16' is deny}}
  %db = jit.sum %dy axes = [0] {jit.vjp_of = 1 : i64} : tensor<4x3xf16> -> tensor<3xf16>
  %dbf = amp.cast %db : tensor<3xf16> to tensor<3xf32>
  return %y, %dbf : tensor<4x3xf32>, tensor<3xf32>
}
