// The function promises f32 but returns the f16 value.
func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = amp.cast %x : tensor<4xf32> to tensor<4xf16>
  return %0 : tensor<4xf16>
}
