// A training step whose file ends after an op, as a partially written or
// partially copied file would: the function and its region are never closed.
func.func @step(%x: tensor<4x8xf32> {jit.role = "input"}, %w: tensor<8x8xf32> {jit.role = "param"})
    -> tensor<4x8xf32> {
  %0 = jit.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = jit.relu %0 : tensor<4x8xf32>
