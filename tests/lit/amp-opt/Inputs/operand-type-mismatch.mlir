// %x is an f32 tensor, but jit.relu is told it is f16: the parser rejects the
// use before any verifier runs.
func.func @step(%x: tensor<4xf32>) -> tensor<4xf16> {
  %0 = jit.relu %x : tensor<4xf16>
  return %0 : tensor<4xf16>
}
