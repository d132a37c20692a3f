// Levels, low-precision types, targets, policy conditions and autocast
// semantics of --amp-auto-cast.
// RUN: amp-opt %s --amp-auto-cast="level=O0" | FileCheck %s --check-prefix=O0
// RUN: amp-opt %s --amp-auto-cast="level=O1" | FileCheck %s --check-prefix=O1
// RUN: amp-opt %s --amp-auto-cast="level=O1 dtype=bf16" | FileCheck %s --check-prefix=BF16
// RUN: amp-opt %s --amp-auto-cast="level=O1 dtype=bf16 target=sm_70" | FileCheck %s --check-prefix=SM70
// RUN: amp-opt %s --amp-auto-cast="level=O1 dtype=auto target=sm_75" | FileCheck %s --check-prefix=AUTO-DTYPE
// RUN: amp-opt %s --amp-auto-cast="level=O2" | FileCheck %s --check-prefix=O2
// RUN: amp-opt %s --amp-auto-cast="level=O3" | FileCheck %s --check-prefix=O3
// RUN: amp-opt %s --amp-auto-cast="level=auto" | FileCheck %s --check-prefix=MS-AUTO
// RUN: amp-opt %s --amp-auto-cast="semantics=autocast policy=pytorch" | FileCheck %s --check-prefix=TORCH
// RUN: amp-opt %s --amp-auto-cast="semantics=autocast policy=pytorch dtype=bf16" | FileCheck %s --check-prefix=TORCH-BF16

func.func @step(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"},
                %b: tensor<8xf32> {jit.role = "param"}, %lr: tensor<f32> {jit.role = "hyper"})
    -> (tensor<f32>, tensor<8x8xf32> {jit.tied = 1 : i64}) {
  %m = jit.matmul %x, %w {jit.op_id = 0 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a = jit.add %m, %b {jit.op_id = 1 : i64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r = jit.relu %a {jit.op_id = 2 : i64} : tensor<4x8xf32>
  %sq = jit.pow %r exponent = 2.0 {jit.op_id = 3 : i64} : tensor<4x8xf32>
  %rt = jit.pow %r exponent = 0.5 {jit.op_id = 4 : i64} : tensor<4x8xf32>
  %s = jit.sum %r axes = [0, 1] {jit.op_id = 5 : i64} : tensor<4x8xf32> -> tensor<f32>
  %d = jit.relu_grad %a, %r {jit.vjp_of = 2 : i64} : tensor<4x8xf32>
  %g = jit.matmul %x, %d {transpose_lhs, jit.vjp_of = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %w_new = jit.sgd_update %w, %g lr %lr : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %t = jit.add %sq, %rt : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %u = jit.mean %t axes = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  %loss = jit.add %s, %u : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %loss, %w_new : tensor<f32>, tensor<8x8xf32>
}

// O0 changes nothing.
// O0-NOT: amp.cast
// O0-NOT: f16

// O1 paint, f16: the bias add and relu lie between the forward matmul and the
// weight-gradient matmul (through relu_grad, a clear op), so they are painted.
// pow with exponent 0.5 is infer by a policy condition, but not between allow
// ops: fp32 like pow^2 (deny). sum is deny for f16. The relu's result is cast
// up once for its three fp32 readers.
// O1: jit.matmul {{.*}} -> tensor<4x8xf16>
// O1-NEXT: jit.add {{.*}} : (tensor<4x8xf16>, tensor<8xf16>) -> tensor<4x8xf16>
// O1-NEXT: jit.relu {{.*}} : tensor<4x8xf16>
// O1-NEXT: %[[RF:.*]] = amp.cast {{.*}} : tensor<4x8xf16> to tensor<4x8xf32>
// O1-NEXT: jit.pow %[[RF]] exponent = 2.000000e+00 {{.*}} : tensor<4x8xf32>
// O1-NEXT: jit.pow %[[RF]] exponent = 5.000000e-01 {{.*}} : tensor<4x8xf32>
// O1-NEXT: jit.sum %[[RF]] {{.*}} -> tensor<f32>
// O1-NEXT: jit.relu_grad {{.*}} : tensor<4x8xf16>
// O1-NEXT: jit.matmul {{.*}}transpose_lhs{{.*}} -> tensor<8x8xf16>
// O1-NEXT: jit.sgd_update %arg1, %{{.*}} : (tensor<8x8xf32>, tensor<8x8xf16>, tensor<f32>) -> tensor<8x8xf32>

// bf16 runs on every target the CPU backend emulates...
// BF16: jit.matmul {{.*}} -> tensor<4x8xbf16>
// BF16: jit.sgd_update %arg1, %{{.*}} : (tensor<8x8xf32>, tensor<8x8xbf16>, tensor<f32>) -> tensor<8x8xf32>

// ...but not on Volta: the matmuls stay fp32 (policy min_target bf16: sm_80).
// SM70-NOT: bf16
// SM70: jit.matmul {{.*}} -> tensor<4x8xf32>

// dtype=auto picks f16 where the target has no bf16.
// AUTO-DTYPE: jit.matmul {{.*}} -> tensor<4x8xf16>

// Level O2 runs everything but deny ops in low precision: add, relu, sqrt-like pow,
// relu_grad; sum (deny for f16) and pow^2 stay fp32; sgd stays fp32.
// O2: jit.matmul {{.*}} -> tensor<4x8xf16>
// O2-NEXT: jit.add {{.*}} : (tensor<4x8xf16>, tensor<8xf16>) -> tensor<4x8xf16>
// O2-NEXT: jit.relu {{.*}} : tensor<4x8xf16>
// O2: jit.pow {{.*}} exponent = 2.000000e+00 {{.*}} : tensor<4x8xf32>
// O2: jit.pow {{.*}} exponent = 5.000000e-01 {{.*}} : tensor<4x8xf16>
// O2: jit.sum {{.*}} : tensor<4x8xf32> -> tensor<f32>
// O2: jit.relu_grad {{.*}} : tensor<4x8xf16>
// O2: jit.sgd_update {{.*}} -> tensor<8x8xf32>

// Level O3 runs every compute op in low precision, deny included; the optimizer
// update stays fp32 and the fp32 function result gets a cast.
// O3: jit.pow {{.*}} exponent = 2.000000e+00 {{.*}} : tensor<4x8xf16>
// O3: jit.sum {{.*}} : tensor<4x8xf16> -> tensor<f16>
// O3: jit.sgd_update {{.*}} : (tensor<8x8xf32>, tensor<8x8xf16>, tensor<f32>) -> tensor<8x8xf32>
// O3: %[[LOSS:.*]] = amp.cast {{.*}} : tensor<f16> to tensor<f32>
// O3: return %[[LOSS]]

// MindSpore's auto: allow low, deny fp32, the rest promote to the widest
// input: the bias add mixes f16 and f32 and runs in f32.
// MS-AUTO: jit.matmul {{.*}} -> tensor<4x8xf16>
// MS-AUTO: jit.add {{.*}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// MS-AUTO: jit.relu {{.*}} : tensor<4x8xf32>

// PyTorch autocast: matmul f16, ops on no list run in the widest input
// type, backward ops in the precision of their forward op (relu_grad of an
// fp32 relu is fp32; the weight gradient of the f16 matmul is f16).
// TORCH: jit.matmul {{.*}}jit.op_id = 0{{.*}} -> tensor<4x8xf16>
// TORCH: jit.add {{.*}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// TORCH: jit.pow {{.*}} exponent = 5.000000e-01 {{.*}} : tensor<4x8xf32>
// TORCH: jit.sum {{.*}} : tensor<4x8xf32> -> tensor<f32>
// TORCH: jit.relu_grad {{.*}} : tensor<4x8xf32>
// TORCH: jit.matmul {{.*}}transpose_lhs{{.*}} : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<8x8xf16>

// pytorch.yaml keeps sum in fp32 for bf16 too (default makes it infer).
// TORCH-BF16: jit.sum {{.*}} : tensor<4x8xf32> -> tensor<f32>
