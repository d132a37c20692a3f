//===- PlanOptions.h - which plan rewrites codegen applies ------*- C++ -*-===//
//
// The switches of buildPlan, apart from PlanBuilder.h so that jit::trace can
// choose them without including MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_CODEGEN_PLANOPTIONS_H
#define AMPJIT_CODEGEN_PLANOPTIONS_H

#include <cstdint>

namespace ampjit::codegen {

struct PlanOptions {
  /// Turn each run of consecutive elementwise steps (casts included) with one
  /// output shape into one fused step that reads every input once and writes
  /// only the values read after it (`--jit-fuse-elementwise`). Scalar steps
  /// first move up ahead of the tensor steps they need not follow, so that
  /// they do not cut the tensor steps around them into separate runs.
  bool fuseElementwise = false;
  /// Fold bias adds, relu/gelu-tanh activations, gelu-tanh gradients and
  /// bias-gradient sums into the Gemm steps as their epilogues
  /// (`--jit-fuse-gemm-epilogues`; on for the CUDA backend, whose cuBLASLt
  /// applies them before the one rounding; runtime GemmEpilogue).
  bool fuseGemmEpilogues = false;
  /// Fold relu(batch_norm(x) [+ z]) into the batch norm and the relu's
  /// gradient into its batch_norm_grad (`--jit-fuse-batch-norm-epilogues`;
  /// on for the CUDA backend, whose cuDNN runs them as one call each).
  bool fuseBatchNormEpilogues = false;
  /// Fold the sum of a convolution's input gradient and another gradient
  /// (a residual block's two branches) into the convolution, which adds to
  /// the other in place (`--jit-fuse-gradient-accumulation`; on for the CUDA
  /// backend, whose cuDNN blends with beta = 1): fuseGradientAccumulation.
  bool fuseGradientAccumulation = false;
  /// Move the optimizer update to the front of the next run
  /// (`--jit-defer-optimizer-updates`, deferOptimizerUpdates below) when it
  /// updates at least `deferMinimumElements` parameter elements.
  bool deferOptimizerUpdates = false;
  int64_t deferMinimumElements = 0;
  /// Let weight gradients (convolutions' filter gradients, small GEMMs'
  /// weight gradients) run beside the steps after them
  /// (`--jit-overlap-weight-gradients`; on for the CUDA backend, which runs
  /// such side steps on its second stream): overlapWeightGradients below.
  bool overlapWeightGradients = false;
  /// With overlapWeightGradients, a reduction whose result only the
  /// finiteness check and the optimizer read (a bias gradient) goes beside
  /// the steps after it when its input has at least this many elements
  /// (kSideReductionMinimumElements by default; jit::trace reads
  /// AMPJIT_SIDE_REDUCTION_MIN_ELEMENTS). Below, it takes about what its
  /// fork and join cost.
  int64_t sideReductionMinimumElements = int64_t(1) << 20;
  /// Append each op's `file:line` to its step's origin, so runtime messages
  /// (AMPJIT_CHECK_NUMERICS) name the user's source line. jit::trace sets it.
  bool recordLocations = false;
};

} // namespace ampjit::codegen

#endif // AMPJIT_CODEGEN_PLANOPTIONS_H
