// The golden joint graph: the MindSpore tutorial's MNIST train step
// (examples/mnist_train_step.mlir: forward, backward, loss scaler, SGD with
// momentum) after the whole AMP pipeline at O1 (f16 and bf16), O2 and O3.
// jit::trace's dump of the same step matches them too (frontend/trace-golden.mlir).
//
// RUN: amp-opt %S/../../../examples/mnist_train_step.mlir --amp-pipeline="level=O1 dtype=f16" | FileCheck %s --check-prefix=O1
// RUN: amp-opt %S/../../../examples/mnist_train_step.mlir --amp-pipeline="level=O1 dtype=bf16" | FileCheck %s --check-prefix=BF16
// RUN: amp-opt %S/../../../examples/mnist_train_step.mlir --amp-pipeline="level=O2 dtype=f16" | FileCheck %s --check-prefix=O2
// RUN: amp-opt %S/../../../examples/mnist_train_step.mlir --amp-pipeline="level=O3 dtype=f16" | FileCheck %s --check-prefix=O3

// At O1 the three Linear layers run in f16 up to the last matmul; the last bias
// add, the loss and its gradient in fp32; every parameter is cast once and
// the cast shared by forward and backward; the bias gradients (sums, deny for
// f16) in fp32; the optimizer reads the f16 weight gradients directly.
// O1-LABEL: func.func @train_step(
// O1-NEXT: %[[V0:.*]] = jit.constant dense<1.000000e+00> : tensor<f32>
// O1-NEXT: %[[V1:.*]] = amp.cast %arg0 : tensor<64x784xf32> to tensor<64x784xf16>
// O1-NEXT: %[[V2:.*]] = amp.cast %arg2 : tensor<512x784xf32> to tensor<512x784xf16>
// O1-NEXT: %[[V3:.*]] = amp.cast %arg3 : tensor<512xf32> to tensor<512xf16>
// O1-NEXT: %[[V4:.*]] = amp.cast %arg4 : tensor<512x512xf32> to tensor<512x512xf16>
// O1-NEXT: %[[V5:.*]] = amp.cast %arg5 : tensor<512xf32> to tensor<512xf16>
// O1-NEXT: %[[V6:.*]] = amp.cast %arg6 : tensor<10x512xf32> to tensor<10x512xf16>
// O1-NEXT: %[[V7:.*]] = jit.matmul %[[V1]], %[[V2]] {jit.op_id = 0 : i64, transpose_rhs} : (tensor<64x784xf16>, tensor<512x784xf16>) -> tensor<64x512xf16>
// O1-NEXT: %[[V8:.*]] = jit.add %[[V7]], %[[V3]] {jit.linear_bias, jit.op_id = 1 : i64} : (tensor<64x512xf16>, tensor<512xf16>) -> tensor<64x512xf16>
// O1-NEXT: %[[V9:.*]] = jit.relu %[[V8]] {jit.op_id = 2 : i64} : tensor<64x512xf16>
// O1-NEXT: %[[V10:.*]] = jit.matmul %[[V9]], %[[V4]] {jit.op_id = 3 : i64, transpose_rhs} : (tensor<64x512xf16>, tensor<512x512xf16>) -> tensor<64x512xf16>
// O1-NEXT: %[[V11:.*]] = jit.add %[[V10]], %[[V5]] {jit.linear_bias, jit.op_id = 4 : i64} : (tensor<64x512xf16>, tensor<512xf16>) -> tensor<64x512xf16>
// O1-NEXT: %[[V12:.*]] = jit.relu %[[V11]] {jit.op_id = 5 : i64} : tensor<64x512xf16>
// O1-NEXT: %[[V13:.*]] = jit.matmul %[[V12]], %[[V6]] {jit.op_id = 6 : i64, transpose_rhs} : (tensor<64x512xf16>, tensor<10x512xf16>) -> tensor<64x10xf16>
// O1-NEXT: %[[V14:.*]] = amp.cast %[[V13]] : tensor<64x10xf16> to tensor<64x10xf32>
// O1-NEXT: %[[V15:.*]] = jit.add %[[V14]], %arg7 {jit.linear_bias, jit.op_id = 7 : i64} : (tensor<64x10xf32>, tensor<10xf32>) -> tensor<64x10xf32>
// O1-NEXT: %[[V16:.*]] = jit.cross_entropy %[[V15]], %arg1 reduction = mean {jit.op_id = 8 : i64} : (tensor<64x10xf32>, tensor<64xi64>) -> tensor<f32>
// O1-NEXT: %[[V17:.*]] = jit.cross_entropy_grad %arg15, %[[V15]], %arg1 reduction = mean {jit.vjp_of = 8 : i64} : (tensor<f32>, tensor<64x10xf32>, tensor<64xi64>) -> tensor<64x10xf32>
// O1-NEXT: %[[V18:.*]] = amp.cast %[[V17]] : tensor<64x10xf32> to tensor<64x10xf16>
// O1-NEXT: %[[V19:.*]] = jit.sum %[[V17]] axes = [0] {jit.vjp_of = 7 : i64} : tensor<64x10xf32> -> tensor<10xf32>
// O1-NEXT: %[[V20:.*]] = jit.matmul %[[V18]], %[[V12]] {jit.vjp_of = 6 : i64, transpose_lhs} : (tensor<64x10xf16>, tensor<64x512xf16>) -> tensor<10x512xf16>
// O1-NEXT: %[[V21:.*]] = jit.matmul %[[V18]], %[[V6]] {jit.vjp_of = 6 : i64} : (tensor<64x10xf16>, tensor<10x512xf16>) -> tensor<64x512xf16>
// O1-NEXT: %[[V22:.*]] = jit.relu_grad %[[V21]], %[[V12]] {jit.vjp_of = 5 : i64} : tensor<64x512xf16>
// O1-NEXT: %[[V23:.*]] = amp.cast %[[V22]] : tensor<64x512xf16> to tensor<64x512xf32>
// O1-NEXT: %[[V24:.*]] = jit.sum %[[V23]] axes = [0] {jit.vjp_of = 4 : i64} : tensor<64x512xf32> -> tensor<512xf32>
// O1-NEXT: %[[V25:.*]] = jit.matmul %[[V22]], %[[V9]] {jit.vjp_of = 3 : i64, transpose_lhs} : (tensor<64x512xf16>, tensor<64x512xf16>) -> tensor<512x512xf16>
// O1-NEXT: %[[V26:.*]] = jit.matmul %[[V22]], %[[V4]] {jit.vjp_of = 3 : i64} : (tensor<64x512xf16>, tensor<512x512xf16>) -> tensor<64x512xf16>
// O1-NEXT: %[[V27:.*]] = jit.relu_grad %[[V26]], %[[V9]] {jit.vjp_of = 2 : i64} : tensor<64x512xf16>
// O1-NEXT: %[[V28:.*]] = amp.cast %[[V27]] : tensor<64x512xf16> to tensor<64x512xf32>
// O1-NEXT: %[[V29:.*]] = jit.sum %[[V28]] axes = [0] {jit.vjp_of = 1 : i64} : tensor<64x512xf32> -> tensor<512xf32>
// O1-NEXT: %[[V30:.*]] = jit.matmul %[[V27]], %[[V1]] {jit.vjp_of = 0 : i64, transpose_lhs} : (tensor<64x512xf16>, tensor<64x784xf16>) -> tensor<512x784xf16>
// O1-NEXT: %[[V31:.*]] = amp.all_finite %[[V30]], %[[V29]], %[[V25]], %[[V24]], %[[V20]], %[[V19]] : tensor<512x784xf16>, tensor<512xf32>, tensor<512x512xf16>, tensor<512xf32>, tensor<10x512xf16>, tensor<10xf32>
// O1-NEXT: %[[V32:.*]] = jit.div %[[V0]], %arg15 : (tensor<f32>, tensor<f32>) -> tensor<f32>
// O1-NEXT: %[[VNEW_PARAM:.*]], %[[VNEW_MOMENTUM_BUFFER:.*]] = jit.sgd_update %arg2, %[[V30]] momentum_buffer %arg8 lr %arg14 inv_scale %[[V32]] predicate %[[V31]] {momentum = 9.000000e-01 : f64} : (tensor<512x784xf32>, tensor<512x784xf16>, tensor<512x784xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<512x784xf32>, tensor<512x784xf32>)
// O1-NEXT: %[[VNEW_PARAM_0:.*]], %[[VNEW_MOMENTUM_BUFFER_1:.*]] = jit.sgd_update %arg3, %[[V29]] momentum_buffer %arg9 lr %arg14 inv_scale %[[V32]] predicate %[[V31]] {momentum = 9.000000e-01 : f64} : (tensor<512xf32>, tensor<512xf32>, tensor<512xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<512xf32>, tensor<512xf32>)
// O1-NEXT: %[[VNEW_PARAM_2:.*]], %[[VNEW_MOMENTUM_BUFFER_3:.*]] = jit.sgd_update %arg4, %[[V25]] momentum_buffer %arg10 lr %arg14 inv_scale %[[V32]] predicate %[[V31]] {momentum = 9.000000e-01 : f64} : (tensor<512x512xf32>, tensor<512x512xf16>, tensor<512x512xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<512x512xf32>, tensor<512x512xf32>)
// O1-NEXT: %[[VNEW_PARAM_4:.*]], %[[VNEW_MOMENTUM_BUFFER_5:.*]] = jit.sgd_update %arg5, %[[V24]] momentum_buffer %arg11 lr %arg14 inv_scale %[[V32]] predicate %[[V31]] {momentum = 9.000000e-01 : f64} : (tensor<512xf32>, tensor<512xf32>, tensor<512xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<512xf32>, tensor<512xf32>)
// O1-NEXT: %[[VNEW_PARAM_6:.*]], %[[VNEW_MOMENTUM_BUFFER_7:.*]] = jit.sgd_update %arg6, %[[V20]] momentum_buffer %arg12 lr %arg14 inv_scale %[[V32]] predicate %[[V31]] {momentum = 9.000000e-01 : f64} : (tensor<10x512xf32>, tensor<10x512xf16>, tensor<10x512xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<10x512xf32>, tensor<10x512xf32>)
// O1-NEXT: %[[VNEW_PARAM_8:.*]], %[[VNEW_MOMENTUM_BUFFER_9:.*]] = jit.sgd_update %arg7, %[[V19]] momentum_buffer %arg13 lr %arg14 inv_scale %[[V32]] predicate %[[V31]] {momentum = 9.000000e-01 : f64} : (tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<10xf32>, tensor<10xf32>)
// O1-NEXT: %[[VNEW_SCALE:.*]], %[[VNEW_GOOD_STEPS:.*]], %[[VNEW_BAD_STEPS:.*]], %[[VNEW_SKIPPED_STEPS:.*]] = amp.update_scale %arg15, %arg16, %arg17, %arg18, %[[V31]]
// O1-NEXT: return %[[V16]], %[[VNEW_PARAM]], %[[VNEW_PARAM_0]], %[[VNEW_PARAM_2]], %[[VNEW_PARAM_4]], %[[VNEW_PARAM_6]], %[[VNEW_PARAM_8]], %[[VNEW_MOMENTUM_BUFFER]], %[[VNEW_MOMENTUM_BUFFER_1]], %[[VNEW_MOMENTUM_BUFFER_3]], %[[VNEW_MOMENTUM_BUFFER_5]], %[[VNEW_MOMENTUM_BUFFER_7]], %[[VNEW_MOMENTUM_BUFFER_9]], %[[VNEW_SCALE]], %[[VNEW_GOOD_STEPS]], %[[VNEW_BAD_STEPS]], %[[VNEW_SKIPPED_STEPS]], %[[V31]] : tensor<f32>, tensor<512x784xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<10x512xf32>, tensor<10xf32>, tensor<512x784xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<10x512xf32>, tensor<10xf32>, tensor<f32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<i1>

// bf16: the same painting (sum is infer for bf16, but the bias-gradient sums
// feed only the optimizer, so they are not between allow ops).
// BF16-LABEL: func.func @train_step(
// BF16-NEXT: %[[V0:.*]] = jit.constant dense<1.000000e+00> : tensor<f32>
// BF16-NEXT: %[[V1:.*]] = amp.cast %arg0 : tensor<64x784xf32> to tensor<64x784xbf16>
// BF16-NEXT: %[[V2:.*]] = amp.cast %arg2 : tensor<512x784xf32> to tensor<512x784xbf16>
// BF16-NEXT: %[[V3:.*]] = amp.cast %arg3 : tensor<512xf32> to tensor<512xbf16>
// BF16-NEXT: %[[V4:.*]] = amp.cast %arg4 : tensor<512x512xf32> to tensor<512x512xbf16>
// BF16-NEXT: %[[V5:.*]] = amp.cast %arg5 : tensor<512xf32> to tensor<512xbf16>
// BF16-NEXT: %[[V6:.*]] = amp.cast %arg6 : tensor<10x512xf32> to tensor<10x512xbf16>
// BF16-NEXT: %[[V7:.*]] = jit.matmul %[[V1]], %[[V2]] {jit.op_id = 0 : i64, transpose_rhs} : (tensor<64x784xbf16>, tensor<512x784xbf16>) -> tensor<64x512xbf16>
// BF16-NEXT: %[[V8:.*]] = jit.add %[[V7]], %[[V3]] {jit.linear_bias, jit.op_id = 1 : i64} : (tensor<64x512xbf16>, tensor<512xbf16>) -> tensor<64x512xbf16>
// BF16-NEXT: %[[V9:.*]] = jit.relu %[[V8]] {jit.op_id = 2 : i64} : tensor<64x512xbf16>
// BF16-NEXT: %[[V10:.*]] = jit.matmul %[[V9]], %[[V4]] {jit.op_id = 3 : i64, transpose_rhs} : (tensor<64x512xbf16>, tensor<512x512xbf16>) -> tensor<64x512xbf16>
// BF16-NEXT: %[[V11:.*]] = jit.add %[[V10]], %[[V5]] {jit.linear_bias, jit.op_id = 4 : i64} : (tensor<64x512xbf16>, tensor<512xbf16>) -> tensor<64x512xbf16>
// BF16-NEXT: %[[V12:.*]] = jit.relu %[[V11]] {jit.op_id = 5 : i64} : tensor<64x512xbf16>
// BF16-NEXT: %[[V13:.*]] = jit.matmul %[[V12]], %[[V6]] {jit.op_id = 6 : i64, transpose_rhs} : (tensor<64x512xbf16>, tensor<10x512xbf16>) -> tensor<64x10xbf16>
// BF16-NEXT: %[[V14:.*]] = amp.cast %[[V13]] : tensor<64x10xbf16> to tensor<64x10xf32>
// BF16-NEXT: %[[V15:.*]] = jit.add %[[V14]], %arg7 {jit.linear_bias, jit.op_id = 7 : i64} : (tensor<64x10xf32>, tensor<10xf32>) -> tensor<64x10xf32>
// BF16-NEXT: %[[V16:.*]] = jit.cross_entropy %[[V15]], %arg1 reduction = mean {jit.op_id = 8 : i64} : (tensor<64x10xf32>, tensor<64xi64>) -> tensor<f32>
// BF16-NEXT: %[[V17:.*]] = jit.cross_entropy_grad %arg15, %[[V15]], %arg1 reduction = mean {jit.vjp_of = 8 : i64} : (tensor<f32>, tensor<64x10xf32>, tensor<64xi64>) -> tensor<64x10xf32>
// BF16-NEXT: %[[V18:.*]] = amp.cast %[[V17]] : tensor<64x10xf32> to tensor<64x10xbf16>
// BF16-NEXT: %[[V19:.*]] = jit.sum %[[V17]] axes = [0] {jit.vjp_of = 7 : i64} : tensor<64x10xf32> -> tensor<10xf32>
// BF16-NEXT: %[[V20:.*]] = jit.matmul %[[V18]], %[[V12]] {jit.vjp_of = 6 : i64, transpose_lhs} : (tensor<64x10xbf16>, tensor<64x512xbf16>) -> tensor<10x512xbf16>
// BF16-NEXT: %[[V21:.*]] = jit.matmul %[[V18]], %[[V6]] {jit.vjp_of = 6 : i64} : (tensor<64x10xbf16>, tensor<10x512xbf16>) -> tensor<64x512xbf16>
// BF16-NEXT: %[[V22:.*]] = jit.relu_grad %[[V21]], %[[V12]] {jit.vjp_of = 5 : i64} : tensor<64x512xbf16>
// BF16-NEXT: %[[V23:.*]] = amp.cast %[[V22]] : tensor<64x512xbf16> to tensor<64x512xf32>
// BF16-NEXT: %[[V24:.*]] = jit.sum %[[V23]] axes = [0] {jit.vjp_of = 4 : i64} : tensor<64x512xf32> -> tensor<512xf32>
// BF16-NEXT: %[[V25:.*]] = jit.matmul %[[V22]], %[[V9]] {jit.vjp_of = 3 : i64, transpose_lhs} : (tensor<64x512xbf16>, tensor<64x512xbf16>) -> tensor<512x512xbf16>
// BF16-NEXT: %[[V26:.*]] = jit.matmul %[[V22]], %[[V4]] {jit.vjp_of = 3 : i64} : (tensor<64x512xbf16>, tensor<512x512xbf16>) -> tensor<64x512xbf16>
// BF16-NEXT: %[[V27:.*]] = jit.relu_grad %[[V26]], %[[V9]] {jit.vjp_of = 2 : i64} : tensor<64x512xbf16>
// BF16-NEXT: %[[V28:.*]] = amp.cast %[[V27]] : tensor<64x512xbf16> to tensor<64x512xf32>
// BF16-NEXT: %[[V29:.*]] = jit.sum %[[V28]] axes = [0] {jit.vjp_of = 1 : i64} : tensor<64x512xf32> -> tensor<512xf32>
// BF16-NEXT: %[[V30:.*]] = jit.matmul %[[V27]], %[[V1]] {jit.vjp_of = 0 : i64, transpose_lhs} : (tensor<64x512xbf16>, tensor<64x784xbf16>) -> tensor<512x784xbf16>
// BF16-NEXT: %[[V31:.*]] = amp.all_finite %[[V30]], %[[V29]], %[[V25]], %[[V24]], %[[V20]], %[[V19]] : tensor<512x784xbf16>, tensor<512xf32>, tensor<512x512xbf16>, tensor<512xf32>, tensor<10x512xbf16>, tensor<10xf32>
// BF16-NEXT: %[[V32:.*]] = jit.div %[[V0]], %arg15 : (tensor<f32>, tensor<f32>) -> tensor<f32>
// BF16-NEXT: %[[VNEW_PARAM:.*]], %[[VNEW_MOMENTUM_BUFFER:.*]] = jit.sgd_update %arg2, %[[V30]] momentum_buffer %arg8 lr %arg14 inv_scale %[[V32]] predicate %[[V31]] {momentum = 9.000000e-01 : f64} : (tensor<512x784xf32>, tensor<512x784xbf16>, tensor<512x784xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<512x784xf32>, tensor<512x784xf32>)
// BF16-NEXT: %[[VNEW_PARAM_0:.*]], %[[VNEW_MOMENTUM_BUFFER_1:.*]] = jit.sgd_update %arg3, %[[V29]] momentum_buffer %arg9 lr %arg14 inv_scale %[[V32]] predicate %[[V31]] {momentum = 9.000000e-01 : f64} : (tensor<512xf32>, tensor<512xf32>, tensor<512xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<512xf32>, tensor<512xf32>)
// BF16-NEXT: %[[VNEW_PARAM_2:.*]], %[[VNEW_MOMENTUM_BUFFER_3:.*]] = jit.sgd_update %arg4, %[[V25]] momentum_buffer %arg10 lr %arg14 inv_scale %[[V32]] predicate %[[V31]] {momentum = 9.000000e-01 : f64} : (tensor<512x512xf32>, tensor<512x512xbf16>, tensor<512x512xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<512x512xf32>, tensor<512x512xf32>)
// BF16-NEXT: %[[VNEW_PARAM_4:.*]], %[[VNEW_MOMENTUM_BUFFER_5:.*]] = jit.sgd_update %arg5, %[[V24]] momentum_buffer %arg11 lr %arg14 inv_scale %[[V32]] predicate %[[V31]] {momentum = 9.000000e-01 : f64} : (tensor<512xf32>, tensor<512xf32>, tensor<512xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<512xf32>, tensor<512xf32>)
// BF16-NEXT: %[[VNEW_PARAM_6:.*]], %[[VNEW_MOMENTUM_BUFFER_7:.*]] = jit.sgd_update %arg6, %[[V20]] momentum_buffer %arg12 lr %arg14 inv_scale %[[V32]] predicate %[[V31]] {momentum = 9.000000e-01 : f64} : (tensor<10x512xf32>, tensor<10x512xbf16>, tensor<10x512xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<10x512xf32>, tensor<10x512xf32>)
// BF16-NEXT: %[[VNEW_PARAM_8:.*]], %[[VNEW_MOMENTUM_BUFFER_9:.*]] = jit.sgd_update %arg7, %[[V19]] momentum_buffer %arg13 lr %arg14 inv_scale %[[V32]] predicate %[[V31]] {momentum = 9.000000e-01 : f64} : (tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<10xf32>, tensor<10xf32>)
// BF16-NEXT: %[[VNEW_SCALE:.*]], %[[VNEW_GOOD_STEPS:.*]], %[[VNEW_BAD_STEPS:.*]], %[[VNEW_SKIPPED_STEPS:.*]] = amp.update_scale %arg15, %arg16, %arg17, %arg18, %[[V31]]
// BF16-NEXT: return %[[V16]], %[[VNEW_PARAM]], %[[VNEW_PARAM_0]], %[[VNEW_PARAM_2]], %[[VNEW_PARAM_4]], %[[VNEW_PARAM_6]], %[[VNEW_PARAM_8]], %[[VNEW_MOMENTUM_BUFFER]], %[[VNEW_MOMENTUM_BUFFER_1]], %[[VNEW_MOMENTUM_BUFFER_3]], %[[VNEW_MOMENTUM_BUFFER_5]], %[[VNEW_MOMENTUM_BUFFER_7]], %[[VNEW_MOMENTUM_BUFFER_9]], %[[VNEW_SCALE]], %[[VNEW_GOOD_STEPS]], %[[VNEW_BAD_STEPS]], %[[VNEW_SKIPPED_STEPS]], %[[V31]] : tensor<f32>, tensor<512x784xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<10x512xf32>, tensor<10xf32>, tensor<512x784xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<10x512xf32>, tensor<10xf32>, tensor<f32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<i1>

// At O2 every non-deny op in f16; the parameters are read through
// low-precision copies (arguments 20-25, derived from the fp32 masters 2-7)
// that the SGD updates write: no parameter cast at all.
// O2: func.func @train_step(
// O2-SAME: %arg20: tensor<512x784xf16> {jit.derived_from = 2 : i64, jit.role = "param"}
// O2-SAME: %arg25: tensor<10xf16> {jit.derived_from = 7 : i64, jit.role = "param"}
// O2-SAME: tensor<512x784xf16> {jit.tied = 20 : i64}
// O2-SAME: tensor<10xf16> {jit.tied = 25 : i64}
// O2-NOT: amp.cast %arg{{[2-7]}} :
// O2-NEXT: %[[V0:.*]] = jit.constant dense<1.000000e+00> : tensor<f32>
// O2-NEXT: %[[V1:.*]] = amp.cast %arg0 : tensor<64x784xf32> to tensor<64x784xf16>
// O2-NEXT: %[[V2:.*]] = jit.matmul %[[V1]], %arg20 {jit.op_id = 0 : i64, transpose_rhs} : (tensor<64x784xf16>, tensor<512x784xf16>) -> tensor<64x512xf16>
// O2-NEXT: %[[V3:.*]] = jit.add %[[V2]], %arg21 {jit.linear_bias, jit.op_id = 1 : i64} : (tensor<64x512xf16>, tensor<512xf16>) -> tensor<64x512xf16>
// O2-NEXT: %[[V4:.*]] = jit.relu %[[V3]] {jit.op_id = 2 : i64} : tensor<64x512xf16>
// O2-NEXT: %[[V5:.*]] = jit.matmul %[[V4]], %arg22 {jit.op_id = 3 : i64, transpose_rhs} : (tensor<64x512xf16>, tensor<512x512xf16>) -> tensor<64x512xf16>
// O2-NEXT: %[[V6:.*]] = jit.add %[[V5]], %arg23 {jit.linear_bias, jit.op_id = 4 : i64} : (tensor<64x512xf16>, tensor<512xf16>) -> tensor<64x512xf16>
// O2-NEXT: %[[V7:.*]] = jit.relu %[[V6]] {jit.op_id = 5 : i64} : tensor<64x512xf16>
// O2-NEXT: %[[V8:.*]] = jit.matmul %[[V7]], %arg24 {jit.op_id = 6 : i64, transpose_rhs} : (tensor<64x512xf16>, tensor<10x512xf16>) -> tensor<64x10xf16>
// O2-NEXT: %[[V9:.*]] = jit.add %[[V8]], %arg25 {jit.linear_bias, jit.op_id = 7 : i64} : (tensor<64x10xf16>, tensor<10xf16>) -> tensor<64x10xf16>
// O2-NEXT: %[[V10:.*]] = amp.cast %[[V9]] : tensor<64x10xf16> to tensor<64x10xf32>
// O2-NEXT: %[[V11:.*]] = jit.cross_entropy %[[V10]], %arg1 reduction = mean {jit.op_id = 8 : i64} : (tensor<64x10xf32>, tensor<64xi64>) -> tensor<f32>
// O2-NEXT: %[[V12:.*]] = jit.cross_entropy_grad %arg15, %[[V10]], %arg1 reduction = mean {jit.vjp_of = 8 : i64} : (tensor<f32>, tensor<64x10xf32>, tensor<64xi64>) -> tensor<64x10xf32>
// O2-NEXT: %[[V13:.*]] = amp.cast %[[V12]] : tensor<64x10xf32> to tensor<64x10xf16>
// O2-NEXT: %[[V14:.*]] = jit.sum %[[V12]] axes = [0] {jit.vjp_of = 7 : i64} : tensor<64x10xf32> -> tensor<10xf32>
// O2-NEXT: %[[V15:.*]] = jit.matmul %[[V13]], %[[V7]] {jit.vjp_of = 6 : i64, transpose_lhs} : (tensor<64x10xf16>, tensor<64x512xf16>) -> tensor<10x512xf16>
// O2-NEXT: %[[V16:.*]] = jit.matmul %[[V13]], %arg24 {jit.vjp_of = 6 : i64} : (tensor<64x10xf16>, tensor<10x512xf16>) -> tensor<64x512xf16>
// O2-NEXT: %[[V17:.*]] = jit.relu_grad %[[V16]], %[[V7]] {jit.vjp_of = 5 : i64} : tensor<64x512xf16>
// O2-NEXT: %[[V18:.*]] = amp.cast %[[V17]] : tensor<64x512xf16> to tensor<64x512xf32>
// O2-NEXT: %[[V19:.*]] = jit.sum %[[V18]] axes = [0] {jit.vjp_of = 4 : i64} : tensor<64x512xf32> -> tensor<512xf32>
// O2-NEXT: %[[V20:.*]] = jit.matmul %[[V17]], %[[V4]] {jit.vjp_of = 3 : i64, transpose_lhs} : (tensor<64x512xf16>, tensor<64x512xf16>) -> tensor<512x512xf16>
// O2-NEXT: %[[V21:.*]] = jit.matmul %[[V17]], %arg22 {jit.vjp_of = 3 : i64} : (tensor<64x512xf16>, tensor<512x512xf16>) -> tensor<64x512xf16>
// O2-NEXT: %[[V22:.*]] = jit.relu_grad %[[V21]], %[[V4]] {jit.vjp_of = 2 : i64} : tensor<64x512xf16>
// O2-NEXT: %[[V23:.*]] = amp.cast %[[V22]] : tensor<64x512xf16> to tensor<64x512xf32>
// O2-NEXT: %[[V24:.*]] = jit.sum %[[V23]] axes = [0] {jit.vjp_of = 1 : i64} : tensor<64x512xf32> -> tensor<512xf32>
// O2-NEXT: %[[V25:.*]] = jit.matmul %[[V22]], %[[V1]] {jit.vjp_of = 0 : i64, transpose_lhs} : (tensor<64x512xf16>, tensor<64x784xf16>) -> tensor<512x784xf16>
// O2-NEXT: %[[V26:.*]] = amp.all_finite %[[V25]], %[[V24]], %[[V20]], %[[V19]], %[[V15]], %[[V14]] : tensor<512x784xf16>, tensor<512xf32>, tensor<512x512xf16>, tensor<512xf32>, tensor<10x512xf16>, tensor<10xf32>
// O2-NEXT: %[[V27:.*]] = jit.div %[[V0]], %arg15 : (tensor<f32>, tensor<f32>) -> tensor<f32>
// O2-NEXT: %[[VNEW_PARAM:.*]], %[[VNEW_MOMENTUM_BUFFER:.*]], %[[VNEW_PARAM_COPY:.*]] = jit.sgd_update %arg2, %[[V25]] momentum_buffer %arg8 lr %arg14 inv_scale %[[V27]] predicate %[[V26]] param_copy %arg20 {momentum = 9.000000e-01 : f64} : (tensor<512x784xf32>, tensor<512x784xf16>, tensor<512x784xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<512x784xf16>) -> (tensor<512x784xf32>, tensor<512x784xf32>, tensor<512x784xf16>)
// O2-NEXT: %[[VNEW_PARAM_0:.*]], %[[VNEW_MOMENTUM_BUFFER_1:.*]], %[[VNEW_PARAM_COPY_2:.*]] = jit.sgd_update %arg3, %[[V24]] momentum_buffer %arg9 lr %arg14 inv_scale %[[V27]] predicate %[[V26]] param_copy %arg21 {momentum = 9.000000e-01 : f64} : (tensor<512xf32>, tensor<512xf32>, tensor<512xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<512xf16>) -> (tensor<512xf32>, tensor<512xf32>, tensor<512xf16>)
// O2-NEXT: %[[VNEW_PARAM_3:.*]], %[[VNEW_MOMENTUM_BUFFER_4:.*]], %[[VNEW_PARAM_COPY_5:.*]] = jit.sgd_update %arg4, %[[V20]] momentum_buffer %arg10 lr %arg14 inv_scale %[[V27]] predicate %[[V26]] param_copy %arg22 {momentum = 9.000000e-01 : f64} : (tensor<512x512xf32>, tensor<512x512xf16>, tensor<512x512xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<512x512xf16>) -> (tensor<512x512xf32>, tensor<512x512xf32>, tensor<512x512xf16>)
// O2-NEXT: %[[VNEW_PARAM_6:.*]], %[[VNEW_MOMENTUM_BUFFER_7:.*]], %[[VNEW_PARAM_COPY_8:.*]] = jit.sgd_update %arg5, %[[V19]] momentum_buffer %arg11 lr %arg14 inv_scale %[[V27]] predicate %[[V26]] param_copy %arg23 {momentum = 9.000000e-01 : f64} : (tensor<512xf32>, tensor<512xf32>, tensor<512xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<512xf16>) -> (tensor<512xf32>, tensor<512xf32>, tensor<512xf16>)
// O2-NEXT: %[[VNEW_PARAM_9:.*]], %[[VNEW_MOMENTUM_BUFFER_10:.*]], %[[VNEW_PARAM_COPY_11:.*]] = jit.sgd_update %arg6, %[[V15]] momentum_buffer %arg12 lr %arg14 inv_scale %[[V27]] predicate %[[V26]] param_copy %arg24 {momentum = 9.000000e-01 : f64} : (tensor<10x512xf32>, tensor<10x512xf16>, tensor<10x512xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<10x512xf16>) -> (tensor<10x512xf32>, tensor<10x512xf32>, tensor<10x512xf16>)
// O2-NEXT: %[[VNEW_PARAM_12:.*]], %[[VNEW_MOMENTUM_BUFFER_13:.*]], %[[VNEW_PARAM_COPY_14:.*]] = jit.sgd_update %arg7, %[[V14]] momentum_buffer %arg13 lr %arg14 inv_scale %[[V27]] predicate %[[V26]] param_copy %arg25 {momentum = 9.000000e-01 : f64} : (tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<10xf16>) -> (tensor<10xf32>, tensor<10xf32>, tensor<10xf16>)
// O2-NEXT: %[[VNEW_SCALE:.*]], %[[VNEW_GOOD_STEPS:.*]], %[[VNEW_BAD_STEPS:.*]], %[[VNEW_SKIPPED_STEPS:.*]] = amp.update_scale %arg15, %arg16, %arg17, %arg18, %[[V26]]
// O2-NEXT: return %[[V11]], %[[VNEW_PARAM]], %[[VNEW_PARAM_0]], %[[VNEW_PARAM_3]], %[[VNEW_PARAM_6]], %[[VNEW_PARAM_9]], %[[VNEW_PARAM_12]], %[[VNEW_MOMENTUM_BUFFER]], %[[VNEW_MOMENTUM_BUFFER_1]], %[[VNEW_MOMENTUM_BUFFER_4]], %[[VNEW_MOMENTUM_BUFFER_7]], %[[VNEW_MOMENTUM_BUFFER_10]], %[[VNEW_MOMENTUM_BUFFER_13]], %[[VNEW_SCALE]], %[[VNEW_GOOD_STEPS]], %[[VNEW_BAD_STEPS]], %[[VNEW_SKIPPED_STEPS]], %[[V26]], %[[VNEW_PARAM_COPY]], %[[VNEW_PARAM_COPY_2]], %[[VNEW_PARAM_COPY_5]], %[[VNEW_PARAM_COPY_8]], %[[VNEW_PARAM_COPY_11]], %[[VNEW_PARAM_COPY_14]] : tensor<f32>, tensor<512x784xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<10x512xf32>, tensor<10xf32>, tensor<512x784xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<10x512xf32>, tensor<10xf32>, tensor<f32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<i1>, tensor<512x784xf16>, tensor<512xf16>, tensor<512x512xf16>, tensor<512xf16>, tensor<10x512xf16>, tensor<10xf16>

// At O3 everything in f16 but the scaler and optimizer arithmetic.
// O3-LABEL: func.func @train_step(
// O3-NEXT: %[[V0:.*]] = jit.constant dense<1.000000e+00> : tensor<f32>
// O3-NEXT: %[[V1:.*]] = amp.cast %arg0 : tensor<64x784xf32> to tensor<64x784xf16>
// O3-NEXT: %[[V2:.*]] = amp.cast %arg15 : tensor<f32> to tensor<f16>
// O3-NEXT: %[[V3:.*]] = jit.matmul %[[V1]], %arg20 {jit.op_id = 0 : i64, transpose_rhs} : (tensor<64x784xf16>, tensor<512x784xf16>) -> tensor<64x512xf16>
// O3-NEXT: %[[V4:.*]] = jit.add %[[V3]], %arg21 {jit.linear_bias, jit.op_id = 1 : i64} : (tensor<64x512xf16>, tensor<512xf16>) -> tensor<64x512xf16>
// O3-NEXT: %[[V5:.*]] = jit.relu %[[V4]] {jit.op_id = 2 : i64} : tensor<64x512xf16>
// O3-NEXT: %[[V6:.*]] = jit.matmul %[[V5]], %arg22 {jit.op_id = 3 : i64, transpose_rhs} : (tensor<64x512xf16>, tensor<512x512xf16>) -> tensor<64x512xf16>
// O3-NEXT: %[[V7:.*]] = jit.add %[[V6]], %arg23 {jit.linear_bias, jit.op_id = 4 : i64} : (tensor<64x512xf16>, tensor<512xf16>) -> tensor<64x512xf16>
// O3-NEXT: %[[V8:.*]] = jit.relu %[[V7]] {jit.op_id = 5 : i64} : tensor<64x512xf16>
// O3-NEXT: %[[V9:.*]] = jit.matmul %[[V8]], %arg24 {jit.op_id = 6 : i64, transpose_rhs} : (tensor<64x512xf16>, tensor<10x512xf16>) -> tensor<64x10xf16>
// O3-NEXT: %[[V10:.*]] = jit.add %[[V9]], %arg25 {jit.linear_bias, jit.op_id = 7 : i64} : (tensor<64x10xf16>, tensor<10xf16>) -> tensor<64x10xf16>
// O3-NEXT: %[[V11:.*]] = jit.cross_entropy %[[V10]], %arg1 reduction = mean {jit.op_id = 8 : i64} : (tensor<64x10xf16>, tensor<64xi64>) -> tensor<f16>
// O3-NEXT: %[[V12:.*]] = amp.cast %[[V11]] : tensor<f16> to tensor<f32>
// O3-NEXT: %[[V13:.*]] = jit.cross_entropy_grad %[[V2]], %[[V10]], %arg1 reduction = mean {jit.vjp_of = 8 : i64} : (tensor<f16>, tensor<64x10xf16>, tensor<64xi64>) -> tensor<64x10xf16>
// O3-NEXT: %[[V14:.*]] = jit.sum %[[V13]] axes = [0] {jit.vjp_of = 7 : i64} : tensor<64x10xf16> -> tensor<10xf16>
// O3-NEXT: %[[V15:.*]] = jit.matmul %[[V13]], %[[V8]] {jit.vjp_of = 6 : i64, transpose_lhs} : (tensor<64x10xf16>, tensor<64x512xf16>) -> tensor<10x512xf16>
// O3-NEXT: %[[V16:.*]] = jit.matmul %[[V13]], %arg24 {jit.vjp_of = 6 : i64} : (tensor<64x10xf16>, tensor<10x512xf16>) -> tensor<64x512xf16>
// O3-NEXT: %[[V17:.*]] = jit.relu_grad %[[V16]], %[[V8]] {jit.vjp_of = 5 : i64} : tensor<64x512xf16>
// O3-NEXT: %[[V18:.*]] = jit.sum %[[V17]] axes = [0] {jit.vjp_of = 4 : i64} : tensor<64x512xf16> -> tensor<512xf16>
// O3-NEXT: %[[V19:.*]] = jit.matmul %[[V17]], %[[V5]] {jit.vjp_of = 3 : i64, transpose_lhs} : (tensor<64x512xf16>, tensor<64x512xf16>) -> tensor<512x512xf16>
// O3-NEXT: %[[V20:.*]] = jit.matmul %[[V17]], %arg22 {jit.vjp_of = 3 : i64} : (tensor<64x512xf16>, tensor<512x512xf16>) -> tensor<64x512xf16>
// O3-NEXT: %[[V21:.*]] = jit.relu_grad %[[V20]], %[[V5]] {jit.vjp_of = 2 : i64} : tensor<64x512xf16>
// O3-NEXT: %[[V22:.*]] = jit.sum %[[V21]] axes = [0] {jit.vjp_of = 1 : i64} : tensor<64x512xf16> -> tensor<512xf16>
// O3-NEXT: %[[V23:.*]] = jit.matmul %[[V21]], %[[V1]] {jit.vjp_of = 0 : i64, transpose_lhs} : (tensor<64x512xf16>, tensor<64x784xf16>) -> tensor<512x784xf16>
// O3-NEXT: %[[V24:.*]] = amp.all_finite %[[V23]], %[[V22]], %[[V19]], %[[V18]], %[[V15]], %[[V14]] : tensor<512x784xf16>, tensor<512xf16>, tensor<512x512xf16>, tensor<512xf16>, tensor<10x512xf16>, tensor<10xf16>
// O3-NEXT: %[[V25:.*]] = jit.div %[[V0]], %arg15 : (tensor<f32>, tensor<f32>) -> tensor<f32>
// O3-NEXT: %[[VNEW_PARAM:.*]], %[[VNEW_MOMENTUM_BUFFER:.*]], %[[VNEW_PARAM_COPY:.*]] = jit.sgd_update %arg2, %[[V23]] momentum_buffer %arg8 lr %arg14 inv_scale %[[V25]] predicate %[[V24]] param_copy %arg20 {momentum = 9.000000e-01 : f64} : (tensor<512x784xf32>, tensor<512x784xf16>, tensor<512x784xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<512x784xf16>) -> (tensor<512x784xf32>, tensor<512x784xf32>, tensor<512x784xf16>)
// O3-NEXT: %[[VNEW_PARAM_0:.*]], %[[VNEW_MOMENTUM_BUFFER_1:.*]], %[[VNEW_PARAM_COPY_2:.*]] = jit.sgd_update %arg3, %[[V22]] momentum_buffer %arg9 lr %arg14 inv_scale %[[V25]] predicate %[[V24]] param_copy %arg21 {momentum = 9.000000e-01 : f64} : (tensor<512xf32>, tensor<512xf16>, tensor<512xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<512xf16>) -> (tensor<512xf32>, tensor<512xf32>, tensor<512xf16>)
// O3-NEXT: %[[VNEW_PARAM_3:.*]], %[[VNEW_MOMENTUM_BUFFER_4:.*]], %[[VNEW_PARAM_COPY_5:.*]] = jit.sgd_update %arg4, %[[V19]] momentum_buffer %arg10 lr %arg14 inv_scale %[[V25]] predicate %[[V24]] param_copy %arg22 {momentum = 9.000000e-01 : f64} : (tensor<512x512xf32>, tensor<512x512xf16>, tensor<512x512xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<512x512xf16>) -> (tensor<512x512xf32>, tensor<512x512xf32>, tensor<512x512xf16>)
// O3-NEXT: %[[VNEW_PARAM_6:.*]], %[[VNEW_MOMENTUM_BUFFER_7:.*]], %[[VNEW_PARAM_COPY_8:.*]] = jit.sgd_update %arg5, %[[V18]] momentum_buffer %arg11 lr %arg14 inv_scale %[[V25]] predicate %[[V24]] param_copy %arg23 {momentum = 9.000000e-01 : f64} : (tensor<512xf32>, tensor<512xf16>, tensor<512xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<512xf16>) -> (tensor<512xf32>, tensor<512xf32>, tensor<512xf16>)
// O3-NEXT: %[[VNEW_PARAM_9:.*]], %[[VNEW_MOMENTUM_BUFFER_10:.*]], %[[VNEW_PARAM_COPY_11:.*]] = jit.sgd_update %arg6, %[[V15]] momentum_buffer %arg12 lr %arg14 inv_scale %[[V25]] predicate %[[V24]] param_copy %arg24 {momentum = 9.000000e-01 : f64} : (tensor<10x512xf32>, tensor<10x512xf16>, tensor<10x512xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<10x512xf16>) -> (tensor<10x512xf32>, tensor<10x512xf32>, tensor<10x512xf16>)
// O3-NEXT: %[[VNEW_PARAM_12:.*]], %[[VNEW_MOMENTUM_BUFFER_13:.*]], %[[VNEW_PARAM_COPY_14:.*]] = jit.sgd_update %arg7, %[[V14]] momentum_buffer %arg13 lr %arg14 inv_scale %[[V25]] predicate %[[V24]] param_copy %arg25 {momentum = 9.000000e-01 : f64} : (tensor<10xf32>, tensor<10xf16>, tensor<10xf32>, tensor<f32>, tensor<f32>, tensor<i1>, tensor<10xf16>) -> (tensor<10xf32>, tensor<10xf32>, tensor<10xf16>)
// O3-NEXT: %[[VNEW_SCALE:.*]], %[[VNEW_GOOD_STEPS:.*]], %[[VNEW_BAD_STEPS:.*]], %[[VNEW_SKIPPED_STEPS:.*]] = amp.update_scale %arg15, %arg16, %arg17, %arg18, %[[V24]]
// O3-NEXT: return %[[V12]], %[[VNEW_PARAM]], %[[VNEW_PARAM_0]], %[[VNEW_PARAM_3]], %[[VNEW_PARAM_6]], %[[VNEW_PARAM_9]], %[[VNEW_PARAM_12]], %[[VNEW_MOMENTUM_BUFFER]], %[[VNEW_MOMENTUM_BUFFER_1]], %[[VNEW_MOMENTUM_BUFFER_4]], %[[VNEW_MOMENTUM_BUFFER_7]], %[[VNEW_MOMENTUM_BUFFER_10]], %[[VNEW_MOMENTUM_BUFFER_13]], %[[VNEW_SCALE]], %[[VNEW_GOOD_STEPS]], %[[VNEW_BAD_STEPS]], %[[VNEW_SKIPPED_STEPS]], %[[V24]], %[[VNEW_PARAM_COPY]], %[[VNEW_PARAM_COPY_2]], %[[VNEW_PARAM_COPY_5]], %[[VNEW_PARAM_COPY_8]], %[[VNEW_PARAM_COPY_11]], %[[VNEW_PARAM_COPY_14]] : tensor<f32>, tensor<512x784xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<10x512xf32>, tensor<10xf32>, tensor<512x784xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>, tensor<10x512xf32>, tensor<10xf32>, tensor<f32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<i1>, tensor<512x784xf16>, tensor<512xf16>, tensor<512x512xf16>, tensor<512xf16>, tensor<10x512xf16>, tensor<10xf16>
