#ifndef JIT_JIT_H
#define JIT_JIT_H

// ampjit's public C++ API (DESIGN "What a user writes"). Names follow
// PyTorch's wherever the concept is the same. The public API reports errors
// by throwing jit::Error. This header is all a training program includes.

#include "jit/Autograd.h"
#include "jit/Ops.h"
#include "jit/Tensor.h"
#include "jit/amp.h"
#include "jit/checkpoint.h"
#include "jit/cuda.h"
#include "jit/nn.h"
#include "jit/optim.h"
#include "jit/trace.h"

#endif // JIT_JIT_H
