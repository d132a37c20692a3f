#ifndef AMPJIT_RUNTIME_LIB_CUDA_NUMERICKERNELS_H
#define AMPJIT_RUNTIME_LIB_CUDA_NUMERICKERNELS_H

// Launchers of the numeric kernels (NumericKernels.cu):
// reductions, the softmax family, layer norm, losses and dropout. Plain
// C++17 so nvcc can compile the kernels without the runtime's C++20 headers;
// NumericSteps.cpp turns plan steps into these descriptions.
//
// Every launcher computes what the CPU kernel of the same kind computes
// (runtime/lib/cpu): data widened to f32 (f64 for f64 data), one rounding per
// stored result; only the order of summation differs (parallel trees). Each
// one enqueues on `stream` only and returns the first CUDA error.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ampjit::runtime::cuda::numeric {

/// The floating storage types the kernels read and write; the compute type
/// follows from it (f64 for F64, f32 otherwise).
enum class Storage : int { F32, F16, BF16, F64 };

/// Largest rank a reduction supports (dimensions are passed by value).
constexpr int kMaxReductionRank = 16;

enum class ReduceKind : int { Sum, Mean, Max };

/// A reduction as strides: output element o is the kept index (row-major over
/// keptSizes) and reduces the row-major reduced index space. Strides are the
/// input's, in elements.
struct ReductionGeometry {
  ReduceKind op = ReduceKind::Sum;
  int64_t outputCount = 0;
  int64_t reducedCount = 1;
  int keptRank = 0;
  int reducedRank = 0;
  int64_t keptSizes[kMaxReductionRank] = {};
  int64_t keptStrides[kMaxReductionRank] = {};
  int64_t reducedSizes[kMaxReductionRank] = {};
  int64_t reducedStrides[kMaxReductionRank] = {};
};
/// Whether launchReduction runs this reduction as one pass of its column
/// kernel (tiles of kColumnTileColumns consecutive outputs, kColumnTileLanes
/// lanes over the reduced range, no partials): the order a generated
/// column-summed kernel (KernelSource.h) adds in.
bool columnSumInOnePass(const ReductionGeometry& geometry);
/// Scratch bytes launchReduction needs: few outputs over many elements split
/// each output's range over several blocks and combine their partials.
std::size_t reductionWorkspaceBytes(Storage storage, const ReductionGeometry& geometry);
cudaError_t launchReduction(Storage storage, const ReductionGeometry& geometry, const void* x, void* y,
                            void* workspace, cudaStream_t stream);
/// A sum (or mean, max) of f16 or bf16 `x` into f32 `y`, computing in f32:
/// the bits of launchReduction over x converted to f32, without the f32
/// copy (a bias gradient's widening and column sum in one launch).
cudaError_t launchWidenedReduction(Storage input, const ReductionGeometry& geometry, const void* x, float* y,
                                   void* workspace, cudaStream_t stream);

enum class SoftmaxKind : int { Softmax, LogSoftmax, SoftmaxGrad, LogSoftmaxGrad };

/// A tensor viewed as [outer, length, inner] around an axis.
struct AxisGeometry {
  int64_t outer = 1, length = 1, inner = 1;
};
/// `first` is x (dy for the gradients), `second` y for the gradients (unused otherwise).
cudaError_t launchSoftmax(Storage storage, SoftmaxKind kind, AxisGeometry geometry, const void* first,
                          const void* second, void* out, cudaStream_t stream);

/// [rows, cols] with cols the normalised dimensions flattened.
struct RowGeometry {
  int64_t rows = 0, cols = 0;
};
/// weight and bias may be null (1 and 0); mean and rstd are in the compute type.
cudaError_t launchLayerNorm(Storage storage, RowGeometry geometry, double eps, const void* x, const void* weight,
                            const void* bias, void* y, void* mean, void* rstd, cudaStream_t stream);
/// Scratch bytes launchLayerNormGrad needs (partial dweight/dbias sums over
/// row ranges when there are many rows).
std::size_t layerNormGradWorkspaceBytes(Storage storage, RowGeometry geometry);
/// weight may be null (1); any of dx, dweight, dbias may be null (not written).
cudaError_t launchLayerNormGrad(Storage storage, RowGeometry geometry, const void* dy, const void* x,
                                const void* mean, const void* rstd, const void* weight, void* dx, void* dweight,
                                void* dbias, void* workspace, cudaStream_t stream);

enum class LossKind : int { Mse, CrossEntropy, Nll };
enum class LossReduction : int { None, Mean, Sum };

/// Mse: `count` elements. CrossEntropy and Nll: [rows, classes] scores, [rows]
/// i64 labels.
struct LossGeometry {
  LossKind loss = LossKind::Mse;
  LossReduction reduction = LossReduction::Mean;
  int64_t ignoreIndex = -100;
  double labelSmoothing = 0.0;
  int64_t count = 0;
  int64_t rows = 0, classes = 0;
};
/// Scratch bytes launchLoss / launchLossGrad need (the workspace pointer may
/// be null when 0).
std::size_t lossWorkspaceBytes(Storage storage, const LossGeometry& geometry);
std::size_t lossGradWorkspaceBytes(Storage storage, const LossGeometry& geometry);
cudaError_t launchLoss(Storage storage, const LossGeometry& geometry, const void* input, const void* target,
                       void* loss, void* workspace, cudaStream_t stream);
cudaError_t launchLossGrad(Storage storage, const LossGeometry& geometry, const void* gradOutput,
                           const void* input, const void* target, void* grad, void* workspace,
                           cudaStream_t stream);

/// Whether a loss and its gradient (same geometry, same scores and labels)
/// can run as one launch: a small reduced classification loss.
bool lossAndGradientShareALaunch(const LossGeometry& geometry);
/// The loss into `loss` and its gradient, for the scalar gradOutput, into
/// `grad`, as launchLoss and launchLossGrad would (no workspace).
cudaError_t launchLossAndGradient(Storage storage, const LossGeometry& geometry, const void* input,
                                  const void* target, const void* gradOutput, void* loss, void* grad,
                                  cudaStream_t stream);

/// An AMP classifier's head in one launch: the f32 loss (small and reduced:
/// lossAndGradientShareALaunch) of the scores and its gradient for the f32
/// seed into `grad`; `scores` are F32, or F16/BF16 widened into `wideScores`
/// (F32) as well, and then, given `bias` (f32, one per class), the bias
/// added to each widened row (an O1 last layer's f32 bias add). Given,
/// `lowGrad` gets the gradient rounded to `low` (the scores' dtype when they
/// are not f32) and `columnSums` its sums over the rows (a last layer's bias
/// gradient).
struct ClassificationHead {
  Storage scores = Storage::F32;
  Storage low = Storage::F16;
};
cudaError_t launchClassificationHead(const ClassificationHead& head, const LossGeometry& geometry, const void* scores,
                                     const float* bias, const int64_t* labels, const float* gradOutput,
                                     float* wideScores, float* loss, float* grad, void* lowGrad, float* columnSums,
                                     cudaStream_t stream);

/// A regression head in one pass over [rows, columns] scores (an O1 mlp's
/// last layer): the f32 scores (F16/BF16 `scores` widened, `bias` per column
/// added when given), the mse loss against f32 `target` and its gradient
/// for the f32 `seed`, each value as the separate steps compute it; stored
/// are the wide scores and the f32 gradient when given, the gradient rounded
/// to `low` (lowGrad) and its column sums when given. The loss is summed per
/// block into the workspace and totalled by a second launch.
struct MseHead {
  Storage scores = Storage::F32;
  Storage low = Storage::F16;
  LossReduction reduction = LossReduction::Mean;
  int64_t rows = 0, columns = 0;
};
struct MseHeadPointers {
  const void* scores = nullptr;
  const float* bias = nullptr;
  const float* target = nullptr;
  const float* seed = nullptr;
  float* wide = nullptr;
  float* loss = nullptr;
  float* grad = nullptr;
  void* lowGrad = nullptr;
  float* columnSums = nullptr;
};
std::size_t mseHeadWorkspaceBytes(const MseHead& head);
cudaError_t launchMseHead(const MseHead& head, const MseHeadPointers& pointers, void* workspace, cudaStream_t stream);

/// state and nextState are [seed, offset] (they may be the same buffer); mask
/// is one byte per element.
cudaError_t launchDropout(Storage storage, int64_t count, double p, const void* x, const int64_t* state, void* y,
                          uint8_t* mask, int64_t* nextState, cudaStream_t stream);

/// An embedding table of `rows` x `width` and `count` indices.
struct EmbeddingGeometry {
  int64_t rows = 0, width = 0, count = 0;
};
/// y[n, :] = table[indices[n], :], bit for bit; a row of quiet NaNs for an
/// index outside [0, rows) (a kernel cannot raise; the CPU backend does).
cudaError_t launchEmbedding(Storage storage, EmbeddingGeometry geometry, const int64_t* indices, const void* table,
                            void* y, cudaStream_t stream);
/// dweight[v, :] = the sum of dy[n, :] over n with indices[n] == v, in index
/// order, accumulated in dweight itself (so f32 or f64 storage only: the
/// CPU's order and rounding, bit for bit); row paddingIdx (if >= 0) and rows
/// no index names stay zero; out-of-range indices are skipped.
cudaError_t launchEmbeddingGrad(Storage storage, EmbeddingGeometry geometry, int64_t paddingIdx, const void* dy,
                                const int64_t* indices, void* dweight, cudaStream_t stream);

} // namespace ampjit::runtime::cuda::numeric

#endif // AMPJIT_RUNTIME_LIB_CUDA_NUMERICKERNELS_H
