// Remarks: one per op, with its compute type and the reason.
// RUN: amp-opt %s --amp-auto-cast="remarks=true" -verify-diagnostics -o /dev/null

func.func @step(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-remark @below {{computes in f16: list, allow in policy 'default'}}
  %m = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  // expected-remark @below {{computes in f16: inferred, between allow ops, upstream of 'jit.matmul' at}}
  %a = jit.add %m, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // expected-remark @below {{computes in f16: inferred, between allow ops, upstream of 'jit.matmul' at}}
  %r = jit.relu %a : tensor<4x8xf32>
  // expected-remark @below {{computes in f16: list, allow in policy 'default'}}
  %m2 = jit.matmul %r, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  // expected-remark @below {{computes in f32: list, deny in policy 'default'}}
  %s = jit.softmax %m2 axis = 1 : tensor<4x8xf32>
  // expected-remark @below {{computes in f32: inferred, fp32: deny spreads forward from 'jit.softmax' at}}
  %g = jit.gelu %s approximate = tanh : tensor<4x8xf32>
  // expected-remark @below {{computes in bf16: region, forced to bf16 by a region (amp.force_type)}}
  %h = jit.tanh %g {amp.force_type = bf16} : tensor<4x8xf32>
  // expected-remark @below {{computes in f32: region, AMP disabled by a region (amp.disabled)}}
  %k = jit.sigmoid %h {amp.disabled} : tensor<4x8xf32>
  return %k : tensor<4x8xf32>
}
