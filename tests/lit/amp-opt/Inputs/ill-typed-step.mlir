// Well-formed syntax, ill-typed IR: the weight is [in, out] but the matmul
// treats it as PyTorch's [out, in] layout. The verifier rejects it.
func.func @step(%x: tensor<64x784xf32> {jit.role = "input"}, %w: tensor<784x512xf32> {jit.role = "param"})
    -> tensor<64x512xf32> {
  %0 = jit.matmul %x, %w {transpose_rhs} : (tensor<64x784xf32>, tensor<784x512xf32>) -> tensor<64x512xf32>
  return %0 : tensor<64x512xf32>
}
