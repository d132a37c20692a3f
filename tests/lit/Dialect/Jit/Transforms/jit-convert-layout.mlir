// jit-convert-layout: NCHW conv/pool/batch-norm ops run NHWC, and only the
// transposes at the edges of the convolutional part remain.
// RUN: amp-opt %s --jit-convert-layout | FileCheck %s
// RUN: amp-opt %s --jit-convert-layout="layout=nhwc" | FileCheck %s
// RUN: amp-opt %s --jit-convert-layout | FileCheck %s --check-prefix=COUNT
// `layout=nchw` leaves the module exactly as it is.
// RUN: amp-opt %s > %t.original.mlir
// RUN: amp-opt %s --jit-convert-layout="layout=nchw" > %t.nchw.mlir
// RUN: diff %t.original.mlir %t.nchw.mlir
// RUN: not amp-opt %s --jit-convert-layout="layout=chwn" 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: error: jit-convert-layout: unknown layout 'chwn': expected nhwc or nchw

// Forward conv-bn-relu-maxpool-conv-add-relu-mean: the input and the two
// filters are transposed in; the spatial mean reads NHWC directly, so nothing
// is transposed out.
// CHECK-LABEL: func.func @forward(
// CHECK-DAG: %[[X:.*]] = jit.transpose %arg0 perm = [0, 2, 3, 1] : tensor<2x3x8x8xf32> -> tensor<2x8x8x3xf32>
// CHECK-DAG: %[[W1:.*]] = jit.transpose %arg1 perm = [0, 2, 3, 1] : tensor<4x3x3x3xf32> -> tensor<4x3x3x3xf32>
// CHECK-DAG: %[[W2:.*]] = jit.transpose %arg7 perm = [0, 2, 3, 1] : tensor<4x4x3x3xf32> -> tensor<4x3x3x4xf32>
// CHECK: %[[C1:.*]] = jit.conv2d %[[X]], %[[W1]] bias %arg2 stride = [1, 1] padding = [1, 1] dilation = [1, 1] layout = nhwc : (tensor<2x8x8x3xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<2x8x8x4xf32>
// CHECK: %[[BN:[a-z0-9_]+]], %{{.*}} = jit.batch_norm %[[C1]] weight %arg3 bias %arg4 running_mean %arg5 running_var %arg6 axis = 3 {{.*}} -> (tensor<2x8x8x4xf32>,
// CHECK: %[[R1:.*]] = jit.relu %[[BN]] : tensor<2x8x8x4xf32>
// CHECK: %[[P:.*]] = jit.max_pool2d %[[R1]] kernel_size = [2, 2] stride = [2, 2] padding = [0, 0] layout = nhwc : tensor<2x8x8x4xf32> -> tensor<2x4x4x4xf32>
// CHECK: %[[C2:.*]] = jit.conv2d %[[P]], %[[W2]] stride = [1, 1] padding = [1, 1] dilation = [1, 1] layout = nhwc
// CHECK: %[[A:.*]] = jit.add %[[C2]], %[[P]] : (tensor<2x4x4x4xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
// CHECK: %[[R2:.*]] = jit.relu %[[A]] : tensor<2x4x4x4xf32>
// CHECK: %[[M:.*]] = jit.mean %[[R2]] axes = [1, 2] : tensor<2x4x4x4xf32> -> tensor<2x4xf32>
// CHECK: return %[[M]],
// COUNT-LABEL: func.func @forward(
// COUNT-COUNT-3: jit.transpose
// COUNT-NOT: jit.transpose
func.func @forward(%x: tensor<2x3x8x8xf32>, %w1: tensor<4x3x3x3xf32>, %b1: tensor<4xf32>,
                   %g: tensor<4xf32>, %beta: tensor<4xf32>, %rm: tensor<4xf32>, %rv: tensor<4xf32>,
                   %w2: tensor<4x4x3x3xf32>)
    -> (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %c1 = jit.conv2d %x, %w1 bias %b1 stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<2x4x8x8xf32>
  %bn, %mean, %invstd, %rm1, %rv1 = jit.batch_norm %c1 weight %g bias %beta running_mean %rm
      running_var %rv axis = 1 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<2x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
        -> (tensor<2x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %r1 = jit.relu %bn : tensor<2x4x8x8xf32>
  %p = jit.max_pool2d %r1 kernel_size = [2, 2] stride = [2, 2] padding = [0, 0]
      : tensor<2x4x8x8xf32> -> tensor<2x4x4x4xf32>
  %c2 = jit.conv2d %p, %w2 stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<2x4x4x4xf32>, tensor<4x4x3x3xf32>) -> tensor<2x4x4x4xf32>
  %a = jit.add %c2, %p : (tensor<2x4x4x4xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %r2 = jit.relu %a : tensor<2x4x4x4xf32>
  %m = jit.mean %r2 axes = [2, 3] : tensor<2x4x4x4xf32> -> tensor<2x4xf32>
  return %m, %rm1, %rv1 : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
}

// A whole training step of that network with a linear classifier, backward
// and SGD. Five transposes remain: the input and the two filters in (each
// filter's one transpose feeds both its conv2d and its conv2d_grad_input),
// and the two filter gradients out to their sgd_update, which keeps the
// OIHW parameter. The mean's gradient (reshape, broadcast_to, scale) is
// built NHWC directly; the bias and batch-norm gradients reduce NHWC.
// CHECK-LABEL: func.func @train_step(
// CHECK-DAG: jit.transpose %arg0 perm = [0, 2, 3, 1] : tensor<2x3x8x8xf32> -> tensor<2x8x8x3xf32>
// CHECK-DAG: jit.transpose %arg2 perm = [0, 2, 3, 1] : tensor<4x3x3x3xf32> -> tensor<4x3x3x3xf32>
// CHECK-DAG: jit.transpose %arg8 perm = [0, 2, 3, 1] : tensor<4x4x3x3xf32> -> tensor<4x3x3x4xf32>
// CHECK-DAG: %[[DW2:.*]] = jit.conv2d_grad_weight {{.*}} layout = nhwc {{.*}} -> tensor<4x3x3x4xf32>
// CHECK-DAG: %[[DW2T:.*]] = jit.transpose %[[DW2]] perm = [0, 3, 1, 2] : tensor<4x3x3x4xf32> -> tensor<4x4x3x3xf32>
// CHECK-DAG: jit.sgd_update %arg8, %[[DW2T]] lr
// CHECK-DAG: %[[DW1:.*]] = jit.conv2d_grad_weight {{.*}} layout = nhwc {{.*}} -> tensor<4x3x3x3xf32>
// CHECK-DAG: %[[DW1T:.*]] = jit.transpose %[[DW1]] perm = [0, 3, 1, 2] : tensor<4x3x3x3xf32> -> tensor<4x3x3x3xf32>
// CHECK-DAG: jit.sgd_update %arg2, %[[DW1T]] lr
// CHECK-DAG: jit.reshape %{{.*}} : tensor<2x4xf32> -> tensor<2x1x1x4xf32>
// CHECK-DAG: jit.broadcast_to %{{.*}} : tensor<2x1x1x4xf32> -> tensor<2x4x4x4xf32>
// CHECK-DAG: jit.conv2d_grad_input {{.*}} layout = nhwc {{.*}} -> tensor<2x4x4x4xf32>
// CHECK-DAG: jit.max_pool2d_grad {{.*}} layout = nhwc {{.*}}: (tensor<2x4x4x4xf32>, tensor<2x8x8x4xf32>) -> tensor<2x8x8x4xf32>
// CHECK-DAG: jit.batch_norm_grad {{.*}} axis = 3 {{.*}}: (tensor<2x8x8x4xf32>, tensor<2x8x8x4xf32>,
// CHECK-DAG: jit.sum %{{.*}} axes = [0, 1, 2] {{.*}}: tensor<2x8x8x4xf32> -> tensor<4xf32>
// COUNT-LABEL: func.func @train_step(
// COUNT-COUNT-5: jit.transpose
// COUNT-NOT: jit.transpose
func.func @train_step(
    %x: tensor<2x3x8x8xf32> {jit.role = "input"},
    %labels: tensor<2xi64> {jit.role = "input"},
    %w1: tensor<4x3x3x3xf32> {jit.role = "param"},
    %b1: tensor<4xf32> {jit.role = "param"},
    %g: tensor<4xf32> {jit.role = "param"},
    %beta: tensor<4xf32> {jit.role = "param"},
    %rm: tensor<4xf32> {jit.role = "opt_state"},
    %rv: tensor<4xf32> {jit.role = "opt_state"},
    %w2: tensor<4x4x3x3xf32> {jit.role = "param"},
    %wfc: tensor<10x4xf32> {jit.role = "param"},
    %bfc: tensor<10xf32> {jit.role = "param"},
    %lr: tensor<f32> {jit.role = "hyper"})
    -> (tensor<f32>,
        tensor<4x3x3x3xf32> {jit.tied = 2 : i64}, tensor<4xf32> {jit.tied = 3 : i64},
        tensor<4xf32> {jit.tied = 4 : i64}, tensor<4xf32> {jit.tied = 5 : i64},
        tensor<4xf32> {jit.tied = 6 : i64}, tensor<4xf32> {jit.tied = 7 : i64},
        tensor<4x4x3x3xf32> {jit.tied = 8 : i64}, tensor<10x4xf32> {jit.tied = 9 : i64},
        tensor<10xf32> {jit.tied = 10 : i64}) {
  %c1 = jit.conv2d %x, %w1 bias %b1 stride = [1, 1] padding = [1, 1] dilation = [1, 1] {jit.op_id = 0 : i64}
      : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<2x4x8x8xf32>
  %bn, %mean, %invstd, %rm1, %rv1 = jit.batch_norm %c1 weight %g bias %beta running_mean %rm
      running_var %rv axis = 1 eps = 1.0e-05 momentum = 1.0e-01 {jit.op_id = 1 : i64}
      : (tensor<2x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
        -> (tensor<2x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %r1 = jit.relu %bn {jit.op_id = 2 : i64} : tensor<2x4x8x8xf32>
  %p = jit.max_pool2d %r1 kernel_size = [2, 2] stride = [2, 2] padding = [0, 0] {jit.op_id = 3 : i64}
      : tensor<2x4x8x8xf32> -> tensor<2x4x4x4xf32>
  %c2 = jit.conv2d %p, %w2 stride = [1, 1] padding = [1, 1] dilation = [1, 1] {jit.op_id = 4 : i64}
      : (tensor<2x4x4x4xf32>, tensor<4x4x3x3xf32>) -> tensor<2x4x4x4xf32>
  %a = jit.add %c2, %p {jit.op_id = 5 : i64} : (tensor<2x4x4x4xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %r2 = jit.relu %a {jit.op_id = 6 : i64} : tensor<2x4x4x4xf32>
  %m = jit.mean %r2 axes = [2, 3] {jit.op_id = 7 : i64} : tensor<2x4x4x4xf32> -> tensor<2x4xf32>
  %h = jit.matmul %m, %wfc {transpose_rhs, jit.op_id = 8 : i64} : (tensor<2x4xf32>, tensor<10x4xf32>) -> tensor<2x10xf32>
  %logits = jit.add %h, %bfc {jit.op_id = 9 : i64} : (tensor<2x10xf32>, tensor<10xf32>) -> tensor<2x10xf32>
  %loss = jit.cross_entropy %logits, %labels reduction = mean {jit.op_id = 10 : i64}
      : (tensor<2x10xf32>, tensor<2xi64>) -> tensor<f32>

  %seed = jit.constant dense<1.0> : tensor<f32>
  %d_logits = jit.cross_entropy_grad %seed, %logits, %labels reduction = mean {jit.vjp_of = 10 : i64}
      : (tensor<f32>, tensor<2x10xf32>, tensor<2xi64>) -> tensor<2x10xf32>
  %d_bfc = jit.sum %d_logits axes = [0] {jit.vjp_of = 9 : i64} : tensor<2x10xf32> -> tensor<10xf32>
  %d_wfc = jit.matmul %d_logits, %m {transpose_lhs, jit.vjp_of = 8 : i64}
      : (tensor<2x10xf32>, tensor<2x4xf32>) -> tensor<10x4xf32>
  %d_m = jit.matmul %d_logits, %wfc {jit.vjp_of = 8 : i64} : (tensor<2x10xf32>, tensor<10x4xf32>) -> tensor<2x4xf32>
  %d_m4 = jit.reshape %d_m {jit.vjp_of = 7 : i64} : tensor<2x4xf32> -> tensor<2x4x1x1xf32>
  %d_mb = jit.broadcast_to %d_m4 {jit.vjp_of = 7 : i64} : tensor<2x4x1x1xf32> -> tensor<2x4x4x4xf32>
  %inv_hw = jit.constant dense<6.250000e-02> : tensor<f32>
  %d_r2 = jit.mul %d_mb, %inv_hw {jit.vjp_of = 7 : i64} : (tensor<2x4x4x4xf32>, tensor<f32>) -> tensor<2x4x4x4xf32>
  %d_a = jit.relu_grad %d_r2, %r2 {jit.vjp_of = 6 : i64} : tensor<2x4x4x4xf32>
  %d_w2 = jit.conv2d_grad_weight %d_a, %p stride = [1, 1] padding = [1, 1] dilation = [1, 1] {jit.vjp_of = 4 : i64}
      : (tensor<2x4x4x4xf32>, tensor<2x4x4x4xf32>) -> tensor<4x4x3x3xf32>
  %d_p2 = jit.conv2d_grad_input %d_a, %w2 stride = [1, 1] padding = [1, 1] dilation = [1, 1] {jit.vjp_of = 4 : i64}
      : (tensor<2x4x4x4xf32>, tensor<4x4x3x3xf32>) -> tensor<2x4x4x4xf32>
  %d_p = jit.add %d_a, %d_p2 : (tensor<2x4x4x4xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %d_r1 = jit.max_pool2d_grad %d_p, %r1 kernel_size = [2, 2] stride = [2, 2] padding = [0, 0] {jit.vjp_of = 3 : i64}
      : (tensor<2x4x4x4xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %d_bn = jit.relu_grad %d_r1, %r1 {jit.vjp_of = 2 : i64} : tensor<2x4x8x8xf32>
  %d_c1, %d_g, %d_beta = jit.batch_norm_grad %d_bn, %c1, %mean, %invstd weight %g axis = 1 {jit.vjp_of = 1 : i64}
      : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
        -> (tensor<2x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>)
  %d_w1 = jit.conv2d_grad_weight %d_c1, %x stride = [1, 1] padding = [1, 1] dilation = [1, 1] {jit.vjp_of = 0 : i64}
      : (tensor<2x4x8x8xf32>, tensor<2x3x8x8xf32>) -> tensor<4x3x3x3xf32>
  %d_b1 = jit.sum %d_c1 axes = [0, 2, 3] {jit.vjp_of = 0 : i64} : tensor<2x4x8x8xf32> -> tensor<4xf32>

  %w1_new = jit.sgd_update %w1, %d_w1 lr %lr : (tensor<4x3x3x3xf32>, tensor<4x3x3x3xf32>, tensor<f32>) -> tensor<4x3x3x3xf32>
  %b1_new = jit.sgd_update %b1, %d_b1 lr %lr : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %g_new = jit.sgd_update %g, %d_g lr %lr : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %beta_new = jit.sgd_update %beta, %d_beta lr %lr : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %w2_new = jit.sgd_update %w2, %d_w2 lr %lr : (tensor<4x4x3x3xf32>, tensor<4x4x3x3xf32>, tensor<f32>) -> tensor<4x4x3x3xf32>
  %wfc_new = jit.sgd_update %wfc, %d_wfc lr %lr : (tensor<10x4xf32>, tensor<10x4xf32>, tensor<f32>) -> tensor<10x4xf32>
  %bfc_new = jit.sgd_update %bfc, %d_bfc lr %lr : (tensor<10xf32>, tensor<10xf32>, tensor<f32>) -> tensor<10xf32>
  return %loss, %w1_new, %b1_new, %g_new, %beta_new, %rm1, %rv1, %w2_new, %wfc_new, %bfc_new
      : tensor<f32>, tensor<4x3x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>,
        tensor<4xf32>, tensor<4x4x3x3xf32>, tensor<10x4xf32>, tensor<10xf32>
}

// Activations leaving for a classifier through a jit.reshape, and the
// gradient coming back through one, keep their transposes: the forward one
// before the flattening reshape, the backward one after the unflattening
// reshape (it moves with the gradient through relu_grad so that the one
// leaving relu_grad cancels at conv2d_grad_input). The input gradient is a
// function result and leaves NCHW.
// CHECK-LABEL: func.func @flatten_edges(
// CHECK-DAG: %[[X:.*]] = jit.transpose %arg0 perm = [0, 2, 3, 1]
// CHECK-DAG: %[[W:.*]] = jit.transpose %arg1 perm = [0, 2, 3, 1]
// CHECK: %[[C:.*]] = jit.conv2d %[[X]], %[[W]] {{.*}} layout = nhwc
// CHECK: %[[R:.*]] = jit.relu %[[C]] : tensor<2x4x4x4xf32>
// CHECK: %[[RT:.*]] = jit.transpose %[[R]] perm = [0, 3, 1, 2]
// CHECK: %[[FLAT:.*]] = jit.reshape %[[RT]] : tensor<2x4x4x4xf32> -> tensor<2x64xf32>
// CHECK: %[[D4:.*]] = jit.reshape %arg2 : tensor<2x64xf32> -> tensor<2x4x4x4xf32>
// CHECK: %[[D4T:.*]] = jit.transpose %[[D4]] perm = [0, 2, 3, 1]
// CHECK: %[[DR:.*]] = jit.relu_grad %[[D4T]], %[[R]] : tensor<2x4x4x4xf32>
// CHECK: %[[DX:.*]] = jit.conv2d_grad_input %[[DR]], %[[W]] {{.*}} layout = nhwc : (tensor<2x4x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x3xf32>
// CHECK: %[[DXT:.*]] = jit.transpose %[[DX]] perm = [0, 3, 1, 2] : tensor<2x4x4x3xf32> -> tensor<2x3x4x4xf32>
// CHECK: return %[[FLAT]], %[[DXT]] : tensor<2x64xf32>, tensor<2x3x4x4xf32>
// COUNT-LABEL: func.func @flatten_edges(
// COUNT-COUNT-5: jit.transpose
// COUNT-NOT: jit.transpose
func.func @flatten_edges(%x: tensor<2x3x4x4xf32>, %w: tensor<4x3x3x3xf32>, %dflat: tensor<2x64xf32>)
    -> (tensor<2x64xf32>, tensor<2x3x4x4xf32>) {
  %c = jit.conv2d %x, %w stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<2x3x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
  %r = jit.relu %c : tensor<2x4x4x4xf32>
  %flat = jit.reshape %r : tensor<2x4x4x4xf32> -> tensor<2x64xf32>
  %d4 = jit.reshape %dflat : tensor<2x64xf32> -> tensor<2x4x4x4xf32>
  %dr = jit.relu_grad %d4, %r : tensor<2x4x4x4xf32>
  %dx = jit.conv2d_grad_input %dr, %w stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<2x4x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<2x3x4x4xf32>
  return %flat, %dx : tensor<2x64xf32>, tensor<2x3x4x4xf32>
}

// A keepdim mean over H, W: the [N, 1, 1, C] NHWC result is a reshape away
// from [N, C, 1, 1].
// CHECK-LABEL: func.func @keepdim_mean(
// CHECK: %[[C:.*]] = jit.conv2d {{.*}} layout = nhwc
// CHECK: %[[M:.*]] = jit.mean %[[C]] axes = [1, 2] keepdim : tensor<2x4x4x4xf32> -> tensor<2x1x1x4xf32>
// CHECK: %[[R:.*]] = jit.reshape %[[M]] : tensor<2x1x1x4xf32> -> tensor<2x4x1x1xf32>
// CHECK: return %[[R]]
// COUNT-LABEL: func.func @keepdim_mean(
// COUNT-COUNT-2: jit.transpose
// COUNT-NOT: jit.transpose
func.func @keepdim_mean(%x: tensor<2x3x4x4xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<2x4x1x1xf32> {
  %c = jit.conv2d %x, %w stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<2x3x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
  %m = jit.mean %c axes = [2, 3] keepdim : tensor<2x4x4x4xf32> -> tensor<2x4x1x1xf32>
  return %m : tensor<2x4x1x1xf32>
}

// A stage whose activations are 1x1 (a ResNet's last on 32x32 images): the
// moves in and out of NHWC only move size-1 dimensions, so they are
// reshapes, and they sink through the relu, the residual add and the relu
// gradient as transposes do: every batch norm reads a conv's output and
// feeds its relu directly, and a reshape is left only at the edges (the
// input, the 1x1 filter, the function's results).
// CHECK-LABEL: func.func @one_by_one_stage(
// CHECK: %[[C1:.*]] = jit.conv2d {{.*}} layout = nhwc {{.*}} -> tensor<2x1x1x4xf32>
// CHECK: %[[Y1:[a-z0-9_]+]], {{.*}} = jit.batch_norm %[[C1]] {{.*}} axis = 3
// CHECK-NEXT: %[[R1:.*]] = jit.relu %[[Y1]] : tensor<2x1x1x4xf32>
// CHECK-NEXT: %[[C2:.*]] = jit.conv2d %[[R1]], {{.*}} layout = nhwc
// CHECK: %[[Y2:[a-z0-9_]+]], {{.*}} = jit.batch_norm %[[C2]] {{.*}} axis = 3
// CHECK-NEXT: %[[S:.*]] = jit.add %[[Y2]], %[[R1]] : (tensor<2x1x1x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x1x1x4xf32>
// CHECK-NEXT: %[[R2:.*]] = jit.relu %[[S]] : tensor<2x1x1x4xf32>
// CHECK: %[[DR:.*]] = jit.relu_grad %{{.*}}, %[[R2]] : tensor<2x1x1x4xf32>
// CHECK-NEXT: jit.batch_norm_grad %[[DR]], %[[C2]]
// COUNT-LABEL: func.func @one_by_one_stage(
// COUNT-COUNT-5: jit.reshape
// COUNT-NOT: jit.reshape
func.func @one_by_one_stage(%x: tensor<2x3x1x1xf32>, %w1: tensor<4x3x1x1xf32>, %w2: tensor<4x4x3x3xf32>,
    %g: tensor<4xf32>, %b: tensor<4xf32>, %rm: tensor<4xf32>, %rv: tensor<4xf32>, %dy: tensor<2x4x1x1xf32>)
    -> (tensor<2x4x1x1xf32>, tensor<2x4x1x1xf32>) {
  %c1 = jit.conv2d %x, %w1 stride = [1, 1] padding = [0, 0] dilation = [1, 1]
      : (tensor<2x3x1x1xf32>, tensor<4x3x1x1xf32>) -> tensor<2x4x1x1xf32>
  %y1, %m1, %s1, %rm1, %rv1 = jit.batch_norm %c1 weight %g bias %b running_mean %rm running_var %rv
      axis = 1 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<2x4x1x1xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
      -> (tensor<2x4x1x1xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %r1 = jit.relu %y1 : tensor<2x4x1x1xf32>
  %c2 = jit.conv2d %r1, %w2 stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<2x4x1x1xf32>, tensor<4x4x3x3xf32>) -> tensor<2x4x1x1xf32>
  %y2, %m2, %s2, %rm2, %rv2 = jit.batch_norm %c2 weight %g bias %b running_mean %rm running_var %rv
      axis = 1 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<2x4x1x1xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
      -> (tensor<2x4x1x1xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %sum = jit.add %y2, %r1 : (tensor<2x4x1x1xf32>, tensor<2x4x1x1xf32>) -> tensor<2x4x1x1xf32>
  %r2 = jit.relu %sum : tensor<2x4x1x1xf32>
  %dr = jit.relu_grad %dy, %r2 : tensor<2x4x1x1xf32>
  %dx, %dw, %db = jit.batch_norm_grad %dr, %c2, %m2, %s2 weight %g axis = 1
      : (tensor<2x4x1x1xf32>, tensor<2x4x1x1xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
      -> (tensor<2x4x1x1xf32>, tensor<4xf32>, tensor<4xf32>)
  return %r2, %dx : tensor<2x4x1x1xf32>, tensor<2x4x1x1xf32>
}

// AMP's casts are elementwise: an f16 conv, batch norm in f32 and the next
// f16 conv need no transposes between them. Three remain: the input and the
// 3x3 filter, each after its cast, and the result; the 1x1 filter's
// OIHW -> OHWI moves only size-1 dimensions, so it is a reshape.
// CHECK-LABEL: func.func @with_casts(
// CHECK: jit.reshape %{{.*}} : tensor<4x4x1x1xf16> -> tensor<4x1x1x4xf16>
// CHECK: amp.cast %{{.*}} : tensor<2x4x4x4xf16> to tensor<2x4x4x4xf32>
// CHECK: jit.batch_norm %{{.*}} axis = 3
// CHECK: jit.relu %{{.*}} : tensor<2x4x4x4xf32>
// CHECK: amp.cast %{{.*}} : tensor<2x4x4x4xf32> to tensor<2x4x4x4xf16>
// CHECK: jit.conv2d {{.*}} layout = nhwc
// COUNT-LABEL: func.func @with_casts(
// COUNT-COUNT-3: jit.transpose
// COUNT-NOT: jit.transpose
func.func @with_casts(%x: tensor<2x3x4x4xf32>, %w1: tensor<4x3x3x3xf32>, %w2: tensor<4x4x1x1xf32>,
                      %rm: tensor<4xf32>, %rv: tensor<4xf32>) -> tensor<2x4x4x4xf16> {
  %xh = amp.cast %x : tensor<2x3x4x4xf32> to tensor<2x3x4x4xf16>
  %w1h = amp.cast %w1 : tensor<4x3x3x3xf32> to tensor<4x3x3x3xf16>
  %w2h = amp.cast %w2 : tensor<4x4x1x1xf32> to tensor<4x4x1x1xf16>
  %c = jit.conv2d %xh, %w1h stride = [1, 1] padding = [1, 1] dilation = [1, 1]
      : (tensor<2x3x4x4xf16>, tensor<4x3x3x3xf16>) -> tensor<2x4x4x4xf16>
  %cf = amp.cast %c : tensor<2x4x4x4xf16> to tensor<2x4x4x4xf32>
  %bn, %mean, %invstd, %rm1, %rv1 = jit.batch_norm %cf running_mean %rm running_var %rv
      axis = 1 eps = 1.0e-05 momentum = 1.0e-01
      : (tensor<2x4x4x4xf32>, tensor<4xf32>, tensor<4xf32>)
        -> (tensor<2x4x4x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %r = jit.relu %bn : tensor<2x4x4x4xf32>
  %rh = amp.cast %r : tensor<2x4x4x4xf32> to tensor<2x4x4x4xf16>
  %c2 = jit.conv2d %rh, %w2h stride = [1, 1] padding = [0, 0] dilation = [1, 1]
      : (tensor<2x4x4x4xf16>, tensor<4x4x1x1xf16>) -> tensor<2x4x4x4xf16>
  return %c2 : tensor<2x4x4x4xf16>
}

// Without NCHW ops a function is left alone, its own transposes included.
// CHECK-LABEL: func.func @no_conv(
// CHECK: %[[T:.*]] = jit.transpose %arg0 perm = [1, 0]
// CHECK: jit.transpose %[[T]] perm = [1, 0]
// COUNT-LABEL: func.func @no_conv(
func.func @no_conv(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %t = jit.transpose %x perm = [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
  %u = jit.transpose %t perm = [1, 0] : tensor<3x2xf32> -> tensor<2x3xf32>
  return %u : tensor<2x3xf32>
}
