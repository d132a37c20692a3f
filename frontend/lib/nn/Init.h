#ifndef AMPJIT_FRONTEND_NN_INIT_H
#define AMPJIT_FRONTEND_NN_INIT_H

// Parameter initialisation shared by the nn modules.

#include "jit/nn.h"

namespace jit::detail {

/// Values uniform in [-bound, bound), drawn in row-major order from the
/// options' generator (default_generator() if null): PyTorch's default
/// init for Linear and Conv2d weights and biases.
Tensor uniformTensor(Shape shape, double bound, const nn::InitOptions& options);

} // namespace jit::detail

#endif // AMPJIT_FRONTEND_NN_INIT_H
