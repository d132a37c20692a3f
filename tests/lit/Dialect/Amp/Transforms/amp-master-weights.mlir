// RUN: amp-opt %s -split-input-file --amp-master-weights | FileCheck %s
// Running it again changes nothing: a parameter with a copy gets no second one.
// RUN: amp-opt %s -split-input-file --amp-master-weights | amp-opt -split-input-file --amp-master-weights | FileCheck %s

// An O2 MLP step after amp-auto-cast: both weights are read only through casts
// to f16 (forward and backward) and written by their predicated SGD updates.
// Each gets an f16 copy as derived state, read instead of the casts and written
// by its update; no parameter is cast any more.
// CHECK-LABEL: func.func @mlp_step(
// CHECK-SAME:      %arg0: tensor<4x8xf16> {jit.role = "input"},
// CHECK-SAME:      %arg1: tensor<16x8xf32> {jit.role = "param"},
// CHECK-SAME:      %arg2: tensor<2x16xf32> {jit.role = "param"},
// CHECK-SAME:      %arg3: tensor<2x16xf32> {jit.role = "opt_state"},
// CHECK-SAME:      %arg4: tensor<4x2xf32> {jit.role = "input"},
// CHECK-SAME:      %arg5: tensor<f32> {jit.role = "hyper"},
// CHECK-SAME:      %arg6: tensor<f32> {jit.role = "scaler_state"},
// CHECK-SAME:      %arg7: tensor<16x8xf16> {jit.derived_from = 1 : i64, jit.role = "param"},
// CHECK-SAME:      %arg8: tensor<2x16xf16> {jit.derived_from = 2 : i64, jit.role = "param"})
// CHECK-SAME:   -> (tensor<f32>, tensor<16x8xf32> {jit.tied = 1 : i64}, tensor<2x16xf32> {jit.tied = 2 : i64},
// CHECK-SAME:       tensor<2x16xf32> {jit.tied = 3 : i64}, tensor<16x8xf16> {jit.tied = 7 : i64},
// CHECK-SAME:       tensor<2x16xf16> {jit.tied = 8 : i64})
// CHECK-NOT:     amp.cast %arg1
// CHECK-NOT:     amp.cast %arg2
// CHECK:         %[[H:.*]] = jit.matmul %arg0, %arg7 {jit.op_id = 0 : i64, transpose_rhs}
// CHECK:         %[[Y:.*]] = jit.matmul %{{.*}}, %arg8 {jit.op_id = 2 : i64, transpose_rhs}
// CHECK:         jit.matmul %{{.*}}, %arg8 {jit.vjp_of = 2 : i64}
// CHECK:         %[[W1:.*]], %[[C1:.*]] = jit.sgd_update %arg1, %{{.*}} lr %arg5 inv_scale %{{.*}} predicate %[[OK:.*]] param_copy %arg7 {jit.op_id = 10 : i64}
// CHECK-SAME:      -> (tensor<16x8xf32>, tensor<16x8xf16>)
// CHECK:         %[[W2:.*]], %[[B2:.*]], %[[C2:.*]] = jit.sgd_update %arg2, %{{.*}} momentum_buffer %arg3 lr %arg5 inv_scale %{{.*}} predicate %[[OK]] param_copy %arg8 {jit.op_id = 11 : i64, momentum = 9.000000e-01 : f64}
// CHECK-SAME:      -> (tensor<2x16xf32>, tensor<2x16xf32>, tensor<2x16xf16>)
// CHECK-NEXT:    return %{{.*}}, %[[W1]], %[[W2]], %[[B2]], %[[C1]], %[[C2]] :
// CHECK-NOT:     amp.cast %arg1
// CHECK-NOT:     amp.cast %arg2
func.func @mlp_step(%x: tensor<4x8xf16> {jit.role = "input"},
                    %w1: tensor<16x8xf32> {jit.role = "param"},
                    %w2: tensor<2x16xf32> {jit.role = "param"},
                    %v2: tensor<2x16xf32> {jit.role = "opt_state"},
                    %t: tensor<4x2xf32> {jit.role = "input"},
                    %lr: tensor<f32> {jit.role = "hyper"},
                    %scale: tensor<f32> {jit.role = "scaler_state"})
    -> (tensor<f32>, tensor<16x8xf32> {jit.tied = 1 : i64}, tensor<2x16xf32> {jit.tied = 2 : i64},
        tensor<2x16xf32> {jit.tied = 3 : i64}) {
  %w1h = amp.cast %w1 : tensor<16x8xf32> to tensor<16x8xf16>
  %h = jit.matmul %x, %w1h {transpose_rhs, jit.op_id = 0 : i64}
      : (tensor<4x8xf16>, tensor<16x8xf16>) -> tensor<4x16xf16>
  %r = jit.relu %h {jit.op_id = 1 : i64} : tensor<4x16xf16>
  %w2h = amp.cast %w2 : tensor<2x16xf32> to tensor<2x16xf16>
  %y = jit.matmul %r, %w2h {transpose_rhs, jit.op_id = 2 : i64}
      : (tensor<4x16xf16>, tensor<2x16xf16>) -> tensor<4x2xf16>
  %yf = amp.cast %y : tensor<4x2xf16> to tensor<4x2xf32>
  %loss = jit.mse_loss %yf, %t reduction = mean {jit.op_id = 3 : i64}
      : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<f32>
  %scaled = amp.scale_loss %loss, %scale {jit.op_id = 4 : i64} : tensor<f32>
  %dyf = jit.mse_loss_grad %scale, %yf, %t reduction = mean {jit.vjp_of = 3 : i64}
      : (tensor<f32>, tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  %dy = amp.cast %dyf : tensor<4x2xf32> to tensor<4x2xf16>
  %dw2 = jit.matmul %dy, %r {transpose_lhs, jit.vjp_of = 2 : i64}
      : (tensor<4x2xf16>, tensor<4x16xf16>) -> tensor<2x16xf16>
  // A second cast of the same parameter (before amp-fuse-casts merged them).
  %w2h_again = amp.cast %w2 : tensor<2x16xf32> to tensor<2x16xf16>
  %dr = jit.matmul %dy, %w2h_again {jit.vjp_of = 2 : i64}
      : (tensor<4x2xf16>, tensor<2x16xf16>) -> tensor<4x16xf16>
  %dh = jit.relu_grad %dr, %r {jit.vjp_of = 1 : i64} : tensor<4x16xf16>
  %dw1 = jit.matmul %dh, %x {transpose_lhs, jit.vjp_of = 0 : i64}
      : (tensor<4x16xf16>, tensor<4x8xf16>) -> tensor<16x8xf16>
  %ok = amp.all_finite %dw1, %dw2 : tensor<16x8xf16>, tensor<2x16xf16>
  %one = jit.constant dense<1.0> : tensor<f32>
  %inv = jit.div %one, %scale : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %w1_new = jit.sgd_update %w1, %dw1 lr %lr inv_scale %inv predicate %ok {jit.op_id = 10 : i64}
      : (tensor<16x8xf32>, tensor<16x8xf16>, tensor<f32>, tensor<f32>, tensor<i1>) -> tensor<16x8xf32>
  %w2_new, %v2_new = jit.sgd_update %w2, %dw2 momentum_buffer %v2 lr %lr inv_scale %inv predicate %ok
      {momentum = 0.9, jit.op_id = 11 : i64}
      : (tensor<2x16xf32>, tensor<2x16xf16>, tensor<2x16xf32>, tensor<f32>, tensor<f32>, tensor<i1>)
        -> (tensor<2x16xf32>, tensor<2x16xf32>)
  return %scaled, %w1_new, %w2_new, %v2_new
      : tensor<f32>, tensor<16x8xf32>, tensor<2x16xf32>, tensor<2x16xf32>
}

// -----

// Adam writes the bf16 copy too.
// CHECK-LABEL: func.func @adam_step(
// CHECK-SAME:      %arg6: tensor<8xbf16> {jit.derived_from = 0 : i64, jit.role = "param"})
// CHECK-SAME:   -> (tensor<8xf32> {jit.tied = 0 : i64}, tensor<8xf32> {jit.tied = 1 : i64},
// CHECK-SAME:       tensor<8xf32> {jit.tied = 2 : i64}, tensor<8xbf16> {jit.tied = 6 : i64})
// CHECK-NEXT:    %[[P:.*]] = jit.mul %arg5, %arg6
// CHECK-NEXT:    %[[W:.*]], %[[M:.*]], %[[V:.*]], %[[C:.*]] = jit.adam_update %arg0, %[[P]], %arg1, %arg2 step %arg3 lr %arg4 param_copy %arg6
// CHECK-SAME:      -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>)
// CHECK-NEXT:    return %[[W]], %[[M]], %[[V]], %[[C]]
func.func @adam_step(%w: tensor<8xf32> {jit.role = "param"},
                     %m: tensor<8xf32> {jit.role = "opt_state"},
                     %v: tensor<8xf32> {jit.role = "opt_state"},
                     %step: tensor<i64> {jit.role = "opt_state"},
                     %lr: tensor<f32> {jit.role = "hyper"},
                     %x: tensor<8xbf16> {jit.role = "input"})
    -> (tensor<8xf32> {jit.tied = 0 : i64}, tensor<8xf32> {jit.tied = 1 : i64},
        tensor<8xf32> {jit.tied = 2 : i64}) {
  %wb = amp.cast %w : tensor<8xf32> to tensor<8xbf16>
  %g = jit.mul %x, %wb : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  %w1, %m1, %v1 = jit.adam_update %w, %g, %m, %v step %step lr %lr
      : (tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %w1, %m1, %v1 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// AMSGrad's running maximum keeps its place: the copy comes after it.
// CHECK-LABEL: func.func @amsgrad_step(
// CHECK:         %[[W:.*]], %[[M:.*]], %[[V:.*]], %[[MAX:.*]], %[[C:.*]] = jit.adam_update %arg0, %{{.*}}, %arg1, %arg2 max_exp_avg_sq %arg3 step %arg4 lr %arg5 param_copy %arg7
// CHECK-NEXT:    return %[[W]], %[[M]], %[[V]], %[[MAX]], %[[C]]
func.func @amsgrad_step(%w: tensor<8xf32> {jit.role = "param"},
                        %m: tensor<8xf32> {jit.role = "opt_state"},
                        %v: tensor<8xf32> {jit.role = "opt_state"},
                        %vmax: tensor<8xf32> {jit.role = "opt_state"},
                        %step: tensor<i64> {jit.role = "opt_state"},
                        %lr: tensor<f32> {jit.role = "hyper"},
                        %x: tensor<8xbf16> {jit.role = "input"})
    -> (tensor<8xf32> {jit.tied = 0 : i64}, tensor<8xf32> {jit.tied = 1 : i64},
        tensor<8xf32> {jit.tied = 2 : i64}, tensor<8xf32> {jit.tied = 3 : i64}) {
  %wb = amp.cast %w : tensor<8xf32> to tensor<8xbf16>
  %g = jit.mul %x, %wb : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  %w1, %m1, %v1, %vmax1 = jit.adam_update %w, %g, %m, %v max_exp_avg_sq %vmax step %step lr %lr
      : (tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<i64>, tensor<f32>)
        -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %w1, %m1, %v1, %vmax1 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// A parameter that a deny op reads in fp32 (here layer_norm's weight, which
// O2 keeps fp32) gets no copy: it keeps its cast for the f16 reader. The other
// parameter still gets its copy.
// CHECK-LABEL: func.func @fp32_reader_keeps_the_master(
// CHECK-SAME:      %arg4: tensor<8xf16> {jit.derived_from = 2 : i64, jit.role = "param"})
// CHECK-SAME:   -> (tensor<8xf32> {jit.tied = 1 : i64}, tensor<8xf32> {jit.tied = 2 : i64}, tensor<8xf16> {jit.tied = 4 : i64})
// CHECK-NEXT:    %[[GH:.*]] = amp.cast %arg1 : tensor<8xf32> to tensor<8xf16>
// CHECK:         jit.layer_norm %{{.*}} weight %arg1
// CHECK:         jit.mul %{{.*}}, %[[GH]]
// CHECK:         jit.mul %{{.*}}, %arg4
// CHECK:         jit.sgd_update %arg1, %{{.*}} lr %arg3 :
// CHECK:         jit.sgd_update %arg2, %{{.*}} lr %arg3 param_copy %arg4 :
func.func @fp32_reader_keeps_the_master(%x: tensor<4x8xf16> {jit.role = "input"},
                                        %g: tensor<8xf32> {jit.role = "param"},
                                        %s: tensor<8xf32> {jit.role = "param"},
                                        %lr: tensor<f32> {jit.role = "hyper"})
    -> (tensor<8xf32> {jit.tied = 1 : i64}, tensor<8xf32> {jit.tied = 2 : i64}) {
  %gh = amp.cast %g : tensor<8xf32> to tensor<8xf16>
  %xf = amp.cast %x : tensor<4x8xf16> to tensor<4x8xf32>
  %y, %mean, %rstd = jit.layer_norm %xf weight %g axis = 1 eps = 1.0e-05
      : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  %yh = amp.cast %y : tensor<4x8xf32> to tensor<4x8xf16>
  %a = jit.mul %yh, %gh : (tensor<4x8xf16>, tensor<8xf16>) -> tensor<4x8xf16>
  %sh = amp.cast %s : tensor<8xf32> to tensor<8xf16>
  %b = jit.mul %a, %sh : (tensor<4x8xf16>, tensor<8xf16>) -> tensor<4x8xf16>
  %dg = jit.sum %b axes = [0] : tensor<4x8xf16> -> tensor<8xf16>
  %g1 = jit.sgd_update %g, %dg lr %lr : (tensor<8xf32>, tensor<8xf16>, tensor<f32>) -> tensor<8xf32>
  %s1 = jit.sgd_update %s, %dg lr %lr : (tensor<8xf32>, tensor<8xf16>, tensor<f32>) -> tensor<8xf32>
  return %g1, %s1 : tensor<8xf32>, tensor<8xf32>
}

// -----

// A frozen parameter (no optimizer update in this step) gets a copy without a
// tied result: the step never changes its master, and the runtime re-derives
// the copy whenever the user writes the master between steps. Returning the
// master unchanged as its own new value does not count as a read.
// CHECK-LABEL: func.func @frozen(
// CHECK-SAME:      %arg0: tensor<8xf32> {jit.role = "param"},
// CHECK-SAME:      %arg1: tensor<8xf32> {jit.role = "param"},
// CHECK-SAME:      %arg2: tensor<8xf16> {jit.role = "input"},
// CHECK-SAME:      %arg3: tensor<8xf16> {jit.derived_from = 0 : i64, jit.role = "param"},
// CHECK-SAME:      %arg4: tensor<8xf16> {jit.derived_from = 1 : i64, jit.role = "param"})
// CHECK-SAME:   -> (tensor<8xf16>, tensor<8xf32> {jit.tied = 1 : i64}) {
// CHECK-NEXT:    %[[A:.*]] = jit.mul %arg2, %arg3
// CHECK-NEXT:    %[[B:.*]] = jit.mul %[[A]], %arg4
// CHECK-NEXT:    return %[[B]], %arg1
func.func @frozen(%w: tensor<8xf32> {jit.role = "param"}, %u: tensor<8xf32> {jit.role = "param"},
                  %x: tensor<8xf16> {jit.role = "input"})
    -> (tensor<8xf16>, tensor<8xf32> {jit.tied = 1 : i64}) {
  %wh = amp.cast %w : tensor<8xf32> to tensor<8xf16>
  %a = jit.mul %x, %wh : (tensor<8xf16>, tensor<8xf16>) -> tensor<8xf16>
  %uh = amp.cast %u : tensor<8xf32> to tensor<8xf16>
  %b = jit.mul %a, %uh : (tensor<8xf16>, tensor<8xf16>) -> tensor<8xf16>
  return %b, %u : tensor<8xf16>, tensor<8xf32>
}

// -----

// No copy when it would not remove a cast or would not cover every read: a
// parameter read in f16 and bf16, one read by no cast, one returned as a plain
// output, one whose update is not its tied new value, a bf16 parameter, an
// input; and none in a declaration.
// CHECK-LABEL: func.func @no_copy(
// CHECK-NOT:     jit.derived_from
// CHECK:         amp.cast %arg0 : tensor<8xf32> to tensor<8xf16>
// CHECK:         amp.cast %arg0 : tensor<8xf32> to tensor<8xbf16>
// CHECK:         amp.cast %arg2
// CHECK:         amp.cast %arg3
// CHECK:         amp.cast %arg4
// CHECK:         amp.cast %arg5
// CHECK:         return
func.func @no_copy(%two_types: tensor<8xf32> {jit.role = "param"},
                   %uncast: tensor<8xf32> {jit.role = "param"},
                   %output: tensor<8xf32> {jit.role = "param"},
                   %untied: tensor<8xf32> {jit.role = "param"},
                   %bf16_param: tensor<8xbf16> {jit.role = "param"},
                   %input: tensor<8xf32> {jit.role = "input"},
                   %lr: tensor<f32> {jit.role = "hyper"})
    -> (tensor<8xf16>, tensor<8xbf16>, tensor<8xf32> {jit.tied = 1 : i64}, tensor<8xf32>,
        tensor<8xf16>, tensor<8xf16>, tensor<8xf32>, tensor<8xf16>, tensor<8xf16>) {
  %a = amp.cast %two_types : tensor<8xf32> to tensor<8xf16>
  %b = amp.cast %two_types : tensor<8xf32> to tensor<8xbf16>
  %g = jit.reshape %a : tensor<8xf16> -> tensor<8xf16>
  %u1 = jit.sgd_update %uncast, %g lr %lr : (tensor<8xf32>, tensor<8xf16>, tensor<f32>) -> tensor<8xf32>
  %o = amp.cast %output : tensor<8xf32> to tensor<8xf16>
  %t = amp.cast %untied : tensor<8xf32> to tensor<8xf16>
  %t1 = jit.sgd_update %untied, %g lr %lr : (tensor<8xf32>, tensor<8xf16>, tensor<f32>) -> tensor<8xf32>
  %p = amp.cast %bf16_param : tensor<8xbf16> to tensor<8xf16>
  %i = amp.cast %input : tensor<8xf32> to tensor<8xf16>
  return %a, %b, %u1, %output, %o, %t, %t1, %p, %i
      : tensor<8xf16>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf16>, tensor<8xf16>,
        tensor<8xf32>, tensor<8xf16>, tensor<8xf16>
}

// CHECK-LABEL: func.func private @declared_step(
// CHECK-SAME:    tensor<8xf32> {jit.role = "param"}) -> (tensor<8xf32> {jit.tied = 0 : i64})
// CHECK-NOT:   jit.derived_from
func.func private @declared_step(tensor<8xf32> {jit.role = "param"})
    -> (tensor<8xf32> {jit.tied = 0 : i64})
