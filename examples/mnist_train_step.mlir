// One whole training step of the MindSpore tutorial's MNIST classifier
// (784-512-512-10, ReLU, batch 64, cross-entropy, SGD with momentum 0.9 and a
// dynamic loss scaler), as `jit::trace` records it: everything in fp32, AMP
// not yet applied. Forward ops carry `jit.op_id`; the ops their VJP rules
// emitted carry `jit.vjp_of`. Every piece of state is an argument with a
// `jit.role`, and each new value of it is a result `jit.tied` to it.
//
// Run it with: amp-opt examples/mnist_train_step.mlir --canonicalize --cse

func.func @train_step(
    %x: tensor<64x784xf32> {jit.role = "input"},
    %labels: tensor<64xi64> {jit.role = "input"},
    %w1: tensor<512x784xf32> {jit.role = "param"},
    %b1: tensor<512xf32> {jit.role = "param"},
    %w2: tensor<512x512xf32> {jit.role = "param"},
    %b2: tensor<512xf32> {jit.role = "param"},
    %w3: tensor<10x512xf32> {jit.role = "param"},
    %b3: tensor<10xf32> {jit.role = "param"},
    %v_w1: tensor<512x784xf32> {jit.role = "opt_state"},
    %v_b1: tensor<512xf32> {jit.role = "opt_state"},
    %v_w2: tensor<512x512xf32> {jit.role = "opt_state"},
    %v_b2: tensor<512xf32> {jit.role = "opt_state"},
    %v_w3: tensor<10x512xf32> {jit.role = "opt_state"},
    %v_b3: tensor<10xf32> {jit.role = "opt_state"},
    %lr: tensor<f32> {jit.role = "hyper"},
    %scale: tensor<f32> {jit.role = "scaler_state"},
    %good_steps: tensor<i64> {jit.role = "scaler_state"},
    %bad_steps: tensor<i64> {jit.role = "scaler_state"},
    %skipped_steps: tensor<i64> {jit.role = "scaler_state"},
    %last_step_finite: tensor<i1> {jit.role = "scaler_state"})
    -> (tensor<f32>,
        tensor<512x784xf32> {jit.tied = 2 : i64}, tensor<512xf32> {jit.tied = 3 : i64},
        tensor<512x512xf32> {jit.tied = 4 : i64}, tensor<512xf32> {jit.tied = 5 : i64},
        tensor<10x512xf32> {jit.tied = 6 : i64}, tensor<10xf32> {jit.tied = 7 : i64},
        tensor<512x784xf32> {jit.tied = 8 : i64}, tensor<512xf32> {jit.tied = 9 : i64},
        tensor<512x512xf32> {jit.tied = 10 : i64}, tensor<512xf32> {jit.tied = 11 : i64},
        tensor<10x512xf32> {jit.tied = 12 : i64}, tensor<10xf32> {jit.tied = 13 : i64},
        tensor<f32> {jit.tied = 15 : i64}, tensor<i64> {jit.tied = 16 : i64},
        tensor<i64> {jit.tied = 17 : i64}, tensor<i64> {jit.tied = 18 : i64},
        tensor<i1> {jit.tied = 19 : i64}) {
  // Forward: three Linear layers (weights in PyTorch's [out, in] layout).
  %h1 = jit.matmul %x, %w1 {transpose_rhs, jit.op_id = 0 : i64}
      : (tensor<64x784xf32>, tensor<512x784xf32>) -> tensor<64x512xf32>
  %a1 = jit.add %h1, %b1 {jit.linear_bias, jit.op_id = 1 : i64} : (tensor<64x512xf32>, tensor<512xf32>) -> tensor<64x512xf32>
  %r1 = jit.relu %a1 {jit.op_id = 2 : i64} : tensor<64x512xf32>
  %h2 = jit.matmul %r1, %w2 {transpose_rhs, jit.op_id = 3 : i64}
      : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
  %a2 = jit.add %h2, %b2 {jit.linear_bias, jit.op_id = 4 : i64} : (tensor<64x512xf32>, tensor<512xf32>) -> tensor<64x512xf32>
  %r2 = jit.relu %a2 {jit.op_id = 5 : i64} : tensor<64x512xf32>
  %h3 = jit.matmul %r2, %w3 {transpose_rhs, jit.op_id = 6 : i64}
      : (tensor<64x512xf32>, tensor<10x512xf32>) -> tensor<64x10xf32>
  %logits = jit.add %h3, %b3 {jit.linear_bias, jit.op_id = 7 : i64} : (tensor<64x10xf32>, tensor<10xf32>) -> tensor<64x10xf32>
  %loss = jit.cross_entropy %logits, %labels reduction = mean {jit.op_id = 8 : i64}
      : (tensor<64x10xf32>, tensor<64xi64>) -> tensor<f32>

  // scaler.scale(loss).backward(): the seed gradient of the loss is the scale.
  %scaled = amp.scale_loss %loss, %scale {jit.op_id = 9 : i64} : tensor<f32>
  %d_logits = jit.cross_entropy_grad %scale, %logits, %labels reduction = mean {jit.vjp_of = 8 : i64}
      : (tensor<f32>, tensor<64x10xf32>, tensor<64xi64>) -> tensor<64x10xf32>
  %d_b3 = jit.sum %d_logits axes = [0] {jit.vjp_of = 7 : i64} : tensor<64x10xf32> -> tensor<10xf32>
  %d_w3 = jit.matmul %d_logits, %r2 {transpose_lhs, jit.vjp_of = 6 : i64}
      : (tensor<64x10xf32>, tensor<64x512xf32>) -> tensor<10x512xf32>
  %d_r2 = jit.matmul %d_logits, %w3 {jit.vjp_of = 6 : i64}
      : (tensor<64x10xf32>, tensor<10x512xf32>) -> tensor<64x512xf32>
  %d_a2 = jit.relu_grad %d_r2, %r2 {jit.vjp_of = 5 : i64} : tensor<64x512xf32>
  %d_b2 = jit.sum %d_a2 axes = [0] {jit.vjp_of = 4 : i64} : tensor<64x512xf32> -> tensor<512xf32>
  %d_w2 = jit.matmul %d_a2, %r1 {transpose_lhs, jit.vjp_of = 3 : i64}
      : (tensor<64x512xf32>, tensor<64x512xf32>) -> tensor<512x512xf32>
  %d_r1 = jit.matmul %d_a2, %w2 {jit.vjp_of = 3 : i64}
      : (tensor<64x512xf32>, tensor<512x512xf32>) -> tensor<64x512xf32>
  %d_a1 = jit.relu_grad %d_r1, %r1 {jit.vjp_of = 2 : i64} : tensor<64x512xf32>
  %d_b1 = jit.sum %d_a1 axes = [0] {jit.vjp_of = 1 : i64} : tensor<64x512xf32> -> tensor<512xf32>
  %d_w1 = jit.matmul %d_a1, %x {transpose_lhs, jit.vjp_of = 0 : i64}
      : (tensor<64x512xf32>, tensor<64x784xf32>) -> tensor<512x784xf32>

  // scaler.step(opt): one finiteness check; updates read inv_scale and skip on overflow.
  %ok = amp.all_finite %d_w1, %d_b1, %d_w2, %d_b2, %d_w3, %d_b3
      : tensor<512x784xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>,
        tensor<10x512xf32>, tensor<10xf32>
  %one = jit.constant dense<1.0> : tensor<f32>
  %inv_scale = jit.div %one, %scale : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %w1_new, %v_w1_new = jit.sgd_update %w1, %d_w1 momentum_buffer %v_w1 lr %lr inv_scale %inv_scale predicate %ok {momentum = 0.9}
      : (tensor<512x784xf32>, tensor<512x784xf32>, tensor<512x784xf32>, tensor<f32>, tensor<f32>, tensor<i1>)
        -> (tensor<512x784xf32>, tensor<512x784xf32>)
  %b1_new, %v_b1_new = jit.sgd_update %b1, %d_b1 momentum_buffer %v_b1 lr %lr inv_scale %inv_scale predicate %ok {momentum = 0.9}
      : (tensor<512xf32>, tensor<512xf32>, tensor<512xf32>, tensor<f32>, tensor<f32>, tensor<i1>)
        -> (tensor<512xf32>, tensor<512xf32>)
  %w2_new, %v_w2_new = jit.sgd_update %w2, %d_w2 momentum_buffer %v_w2 lr %lr inv_scale %inv_scale predicate %ok {momentum = 0.9}
      : (tensor<512x512xf32>, tensor<512x512xf32>, tensor<512x512xf32>, tensor<f32>, tensor<f32>, tensor<i1>)
        -> (tensor<512x512xf32>, tensor<512x512xf32>)
  %b2_new, %v_b2_new = jit.sgd_update %b2, %d_b2 momentum_buffer %v_b2 lr %lr inv_scale %inv_scale predicate %ok {momentum = 0.9}
      : (tensor<512xf32>, tensor<512xf32>, tensor<512xf32>, tensor<f32>, tensor<f32>, tensor<i1>)
        -> (tensor<512xf32>, tensor<512xf32>)
  %w3_new, %v_w3_new = jit.sgd_update %w3, %d_w3 momentum_buffer %v_w3 lr %lr inv_scale %inv_scale predicate %ok {momentum = 0.9}
      : (tensor<10x512xf32>, tensor<10x512xf32>, tensor<10x512xf32>, tensor<f32>, tensor<f32>, tensor<i1>)
        -> (tensor<10x512xf32>, tensor<10x512xf32>)
  %b3_new, %v_b3_new = jit.sgd_update %b3, %d_b3 momentum_buffer %v_b3 lr %lr inv_scale %inv_scale predicate %ok {momentum = 0.9}
      : (tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>, tensor<f32>, tensor<i1>)
        -> (tensor<10xf32>, tensor<10xf32>)

  // scaler.update()
  %scale_new, %good_new, %bad_new, %skipped_new =
      amp.update_scale %scale, %good_steps, %bad_steps, %skipped_steps, %ok

  return %loss, %w1_new, %b1_new, %w2_new, %b2_new, %w3_new, %b3_new,
         %v_w1_new, %v_b1_new, %v_w2_new, %v_b2_new, %v_w3_new, %v_b3_new,
         %scale_new, %good_new, %bad_new, %skipped_new, %ok
      : tensor<f32>, tensor<512x784xf32>, tensor<512xf32>, tensor<512x512xf32>, tensor<512xf32>,
        tensor<10x512xf32>, tensor<10xf32>, tensor<512x784xf32>, tensor<512xf32>, tensor<512x512xf32>,
        tensor<512xf32>, tensor<10x512xf32>, tensor<10xf32>, tensor<f32>, tensor<i64>, tensor<i64>,
        tensor<i64>, tensor<i1>
}
