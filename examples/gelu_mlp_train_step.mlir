// A whole training step of a small MLP with tanh-approximated GELUs
// (32-64-64-8: Linear, GELU(tanh), Linear, GELU(tanh), Linear; batch 16,
// cross-entropy, SGD with momentum 0.9, a dynamic loss scaler), exactly as
// `jit::trace` recorded it (locations dropped): everything fp32, AMP not yet
// applied. Its backward has the patterns the CUDA pipeline's GEMM epilogues
// fold (gelu after a bias add, gelu_grad after the product, the bias
// gradients' sums over the batch); see codegen/lib/FuseElementwise.cpp.
//
// Run it with: ampjit-run examples/gelu_mlp_train_step.mlir --amp-pipeline="level=O1 dtype=f16" --jit-fuse-gemm-epilogues --print-plan

module {
  func.func @gelu_mlp_train_step(%arg0: tensor<16x32xf32> {jit.role = "input"}, %arg1: tensor<16xi64> {jit.role = "input"}, %arg2: tensor<64x32xf32> {jit.role = "param"}, %arg3: tensor<64xf32> {jit.role = "param"}, %arg4: tensor<64x64xf32> {jit.role = "param"}, %arg5: tensor<64xf32> {jit.role = "param"}, %arg6: tensor<8x64xf32> {jit.role = "param"}, %arg7: tensor<8xf32> {jit.role = "param"}, %arg8: tensor<64x32xf32> {jit.role = "opt_state"}, %arg9: tensor<64xf32> {jit.role = "opt_state"}, %arg10: tensor<64x64xf32> {jit.role = "opt_state"}, %arg11: tensor<64xf32> {jit.role = "opt_state"}, %arg12: tensor<8x64xf32> {jit.role = "opt_state"}, %arg13: tensor<8xf32> {jit.role = "opt_state"}, %arg14: tensor<f32> {jit.role = "hyper"}, %arg15: tensor<f32> {jit.role = "scaler_state"}, %arg16: tensor<i64> {jit.role = "scaler_state"}, %arg17: tensor<i64> {jit.role = "scaler_state"}, %arg18: tensor<i64> {jit.role = "scaler_state"}) -> (tensor<f32>, tensor<64x32xf32> {jit.tied = 2 : i64}, tensor<64xf32> {jit.tied = 3 : i64}, tensor<64x64xf32> {jit.tied = 4 : i64}, tensor<64xf32> {jit.tied = 5 : i64}, tensor<8x64xf32> {jit.tied = 6 : i64}, tensor<8xf32> {jit.tied = 7 : i64}, tensor<64x32xf32> {jit.tied = 8 : i64}, tensor<64xf32> {jit.tied = 9 : i64}, tensor<64x64xf32> {jit.tied = 10 : i64}, tensor<64xf32> {jit.tied = 11 : i64}, tensor<8x64xf32> {jit.tied = 12 : i64}, tensor<8xf32> {jit.tied = 13 : i64}, tensor<f32> {jit.tied = 15 : i64}, tensor<i64> {jit.tied = 16 : i64}, tensor<i64> {jit.tied = 17 : i64}, tensor<i64> {jit.tied = 18 : i64}) {
    %0 = jit.matmul %arg0, %arg2 {jit.op_id = 0 : i64, transpose_rhs} : (tensor<16x32xf32>, tensor<64x32xf32>) -> tensor<16x64xf32>
    %1 = jit.add %0, %arg3 {jit.linear_bias, jit.op_id = 1 : i64} : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
    %2 = jit.gelu %1 approximate = tanh {jit.op_id = 2 : i64} : tensor<16x64xf32>
    %3 = jit.matmul %2, %arg4 {jit.op_id = 3 : i64, transpose_rhs} : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
    %4 = jit.add %3, %arg5 {jit.linear_bias, jit.op_id = 4 : i64} : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
    %5 = jit.gelu %4 approximate = tanh {jit.op_id = 5 : i64} : tensor<16x64xf32>
    %6 = jit.matmul %5, %arg6 {jit.op_id = 6 : i64, transpose_rhs} : (tensor<16x64xf32>, tensor<8x64xf32>) -> tensor<16x8xf32>
    %7 = jit.add %6, %arg7 {jit.linear_bias, jit.op_id = 7 : i64} : (tensor<16x8xf32>, tensor<8xf32>) -> tensor<16x8xf32>
    %8 = jit.cross_entropy %7, %arg1 reduction = mean {jit.op_id = 8 : i64} : (tensor<16x8xf32>, tensor<16xi64>) -> tensor<f32>
    %9 = amp.scale_loss %8, %arg15 {jit.op_id = 9 : i64} : tensor<f32>
    %10 = jit.constant dense<1.000000e+00> : tensor<f32>
    %11 = amp.scale_loss %10, %arg15 {jit.vjp_of = 9 : i64} : tensor<f32>
    %12 = jit.cross_entropy_grad %11, %7, %arg1 reduction = mean {jit.vjp_of = 8 : i64} : (tensor<f32>, tensor<16x8xf32>, tensor<16xi64>) -> tensor<16x8xf32>
    %13 = jit.sum %12 axes = [0] {jit.vjp_of = 7 : i64} : tensor<16x8xf32> -> tensor<8xf32>
    %14 = jit.matmul %12, %5 {jit.vjp_of = 6 : i64, transpose_lhs} : (tensor<16x8xf32>, tensor<16x64xf32>) -> tensor<8x64xf32>
    %15 = jit.matmul %12, %arg6 {jit.vjp_of = 6 : i64} : (tensor<16x8xf32>, tensor<8x64xf32>) -> tensor<16x64xf32>
    %16 = jit.gelu_grad %15, %4 approximate = tanh {jit.vjp_of = 5 : i64} : tensor<16x64xf32>
    %17 = jit.sum %16 axes = [0] {jit.vjp_of = 4 : i64} : tensor<16x64xf32> -> tensor<64xf32>
    %18 = jit.matmul %16, %2 {jit.vjp_of = 3 : i64, transpose_lhs} : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<64x64xf32>
    %19 = jit.matmul %16, %arg4 {jit.vjp_of = 3 : i64} : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
    %20 = jit.gelu_grad %19, %1 approximate = tanh {jit.vjp_of = 2 : i64} : tensor<16x64xf32>
    %21 = jit.sum %20 axes = [0] {jit.vjp_of = 1 : i64} : tensor<16x64xf32> -> tensor<64xf32>
    %22 = jit.matmul %20, %arg0 {jit.vjp_of = 0 : i64, transpose_lhs} : (tensor<16x64xf32>, tensor<16x32xf32>) -> tensor<64x32xf32>
    %23 = amp.all_finite %22, %21, %18, %17, %14, %13 : tensor<64x32xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<8x64xf32>, tensor<8xf32>
    %24 = jit.constant dense<1.000000e+00> : tensor<f32>
    %25 = jit.div %24, %arg15 : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %new_param, %new_momentum_buffer = jit.sgd_update %arg2, %22 momentum_buffer %arg8 lr %arg14 inv_scale %25 predicate %23 {momentum = 9.000000e-01 : f64} : (tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<64x32xf32>, tensor<64x32xf32>)
    %new_param_0, %new_momentum_buffer_1 = jit.sgd_update %arg3, %21 momentum_buffer %arg9 lr %arg14 inv_scale %25 predicate %23 {momentum = 9.000000e-01 : f64} : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<64xf32>, tensor<64xf32>)
    %new_param_2, %new_momentum_buffer_3 = jit.sgd_update %arg4, %18 momentum_buffer %arg10 lr %arg14 inv_scale %25 predicate %23 {momentum = 9.000000e-01 : f64} : (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<64x64xf32>, tensor<64x64xf32>)
    %new_param_4, %new_momentum_buffer_5 = jit.sgd_update %arg5, %17 momentum_buffer %arg11 lr %arg14 inv_scale %25 predicate %23 {momentum = 9.000000e-01 : f64} : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<64xf32>, tensor<64xf32>)
    %new_param_6, %new_momentum_buffer_7 = jit.sgd_update %arg6, %14 momentum_buffer %arg12 lr %arg14 inv_scale %25 predicate %23 {momentum = 9.000000e-01 : f64} : (tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<8x64xf32>, tensor<8x64xf32>)
    %new_param_8, %new_momentum_buffer_9 = jit.sgd_update %arg7, %13 momentum_buffer %arg13 lr %arg14 inv_scale %25 predicate %23 {momentum = 9.000000e-01 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<f32>, tensor<i1>) -> (tensor<8xf32>, tensor<8xf32>)
    %new_scale, %new_good_steps, %new_bad_steps, %new_skipped_steps = amp.update_scale %arg15, %arg16, %arg17, %arg18, %23
    return %8, %new_param, %new_param_0, %new_param_2, %new_param_4, %new_param_6, %new_param_8, %new_momentum_buffer, %new_momentum_buffer_1, %new_momentum_buffer_3, %new_momentum_buffer_5, %new_momentum_buffer_7, %new_momentum_buffer_9, %new_scale, %new_good_steps, %new_bad_steps, %new_skipped_steps : tensor<f32>, tensor<64x32xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<8x64xf32>, tensor<8xf32>, tensor<64x32xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<8x64xf32>, tensor<8xf32>, tensor<f32>, tensor<i64>, tensor<i64>, tensor<i64>
  }
}
