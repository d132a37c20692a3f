// An op of a dialect amp-opt does not register (amp-opt registers jit, amp,
// func and arith only).
func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "torch.aten.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
