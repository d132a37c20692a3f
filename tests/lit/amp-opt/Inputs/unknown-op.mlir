// jit has no op 'frobnicate'.
func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = jit.relu %x : tensor<4xf32>
  %1 = jit.frobnicate %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
