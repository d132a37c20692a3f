#ifndef AMPJIT_RUNTIME_LIB_CUDA_UPDATEKERNELS_H
#define AMPJIT_RUNTIME_LIB_CUDA_UPDATEKERNELS_H

// Launchers of the update kernels (UpdateKernels.cu): the loss-scaler steps
// and the fused optimizer updates, single and multi-tensor. nvcc compiles the
// .cu file as C++17, so this header is plain C++17 with no runtime headers;
// UpdateSteps.cpp adapts plan steps to it.
//
// Every launcher only enqueues on `stream` (graph-capturable) and returns the
// first CUDA error. Host arrays passed in are read before the launcher
// returns (their contents travel by value in kernel arguments).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ampjit::runtime::cuda::update {

/// Blocks of kThreads threads for every update and layout kernel. The
/// layout kernels' grid-stride loops take at most kMaxBlocks of them; the
/// multi-tensor update kernels size their grid by their tensors' chunks.
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;
/// Elements each thread of a multi-tensor launch handles: a chunk (one
/// block, MultiTensor.cuh) is kThreads * kElementsPerThread elements, thread
/// x taking x, x + kThreads, ... (coalesced), their loads issued before their
/// stores where the kernel allows (SGD, conversion, layout copies). One
/// element per thread reached about half of an H200's memory bandwidth on
/// mlp9's update.
constexpr int kElementsPerThread = 4;
constexpr int64_t kChunkElements = int64_t(kThreads) * kElementsPerThread;

inline unsigned blocksFor(int64_t count) {
  int64_t blocks = (count + kThreads - 1) / kThreads;
  return unsigned(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

/// Element types, numbered as the runtime's DType (F32, F64, F16, BF16, I64, I1)
/// so the adapter converts with a cast.
enum class ElementType : int32_t { F32 = 0, F64 = 1, F16 = 2, BF16 = 3, I64 = 4, I1 = 5 };

//===----------------------------------------------------------------------===//
// Loss scaler
//===----------------------------------------------------------------------===//

/// scaled = loss * scale (one element), in f64 when computeF64, else f32.
cudaError_t launchScaleLoss(const void* loss, void* scaled, ElementType type, const float* scale, bool computeF64,
                            cudaStream_t stream);

struct FiniteCheckTensor {
  const void* data;
  int64_t count;
  ElementType type;
};

/// quotient = numerator / dividend, three f32 scalars (IEEE division, as a
/// generated kernel's): the scaler's inv_scale = 1 / scale, which one
/// thread of the finiteness check's last launch computes.
struct ScalarQuotient {
  const float* numerator;
  const float* dividend;
  float* quotient;
};

/// flag = 1, then 0 if any element of any tensor is inf or NaN; with
/// `quotient`, also that division. With `evictFirst`, the 16-byte loads
/// carry the evict-first hint (the gradients are read once here).
cudaError_t launchAllFinite(const FiniteCheckTensor* tensors, std::size_t tensorCount, uint8_t* flag, bool evictFirst,
                            cudaStream_t stream, const ScalarQuotient* quotient = nullptr);
/// flag = 0 if any element of any tensor is inf or NaN, else unchanged: one
/// chunk of a check split over several launches (FiniteCheckSchedule.h).
cudaError_t launchFiniteCheck(const FiniteCheckTensor* tensors, std::size_t tensorCount, uint8_t* flag,
                              bool evictFirst, cudaStream_t stream);

struct UnscaleTensor {
  const void* in;
  void* out; ///< may be `in` (unscaled in place)
  int64_t count;
  ElementType type;
};

/// out = in * inv_scale for each tensor; flag = 1, then 0 if any input or
/// any (rounded) output element is inf or NaN.
cudaError_t launchUnscaleAndCheck(const float* invScale, const UnscaleTensor* tensors, std::size_t tensorCount,
                                  uint8_t* flag, bool computeF64, cudaStream_t stream);

struct UpdateScaleConfig {
  double growthFactor;
  double backoffFactor;
  int64_t growthInterval;
  int64_t backoffInterval;
  double minScale;
  double maxScale;
};

/// The loss-scaler state update (LossScaler.h's updateLossScale) in one
/// thread; outputs may be their inputs.
struct UpdateScalePointers {
  const float* scale;
  const int64_t* goodSteps;
  const int64_t* badSteps;
  const int64_t* skippedSteps;
  const uint8_t* allFinite;
  float* newScale;
  int64_t* newGoodSteps;
  int64_t* newBadSteps;
  int64_t* newSkippedSteps;
};
cudaError_t launchUpdateScale(const UpdateScaleConfig& config, const UpdateScalePointers& pointers,
                              cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

/// What every tensor of one optimizer launch shares: parameters and dtypes.
struct OptimizerConfig {
  bool adam;
  bool computeF64;
  double momentum;  // sgd
  double dampening; // sgd
  bool nesterov;    // sgd
  double beta1;     // adam
  double beta2;     // adam
  double eps;       // adam
  bool decoupledWeightDecay;
  double weightDecay;
  bool maximize;
  ElementType paramType; ///< also the type of the state buffers
  ElementType copyType;  ///< of param_copy, where a tensor has one
  /// The 16-byte SGD and Adam paths load gradients, parameters and state
  /// and store parameters and state with the evict-first hint (they are not
  /// read again before the next step's update); copies are cached as usual.
  bool evictFirst;
  /// Whether launches may take those 16-byte paths (optimizerLaunchVectorizes);
  /// false: every launch runs element by element.
  bool vectorize;
};

/// Scalars every tensor of the launch reads (nullptr when absent).
struct OptimizerScalars {
  const int64_t* step;
  const float* lr;
  const float* invScale;
  const uint8_t* predicate;
  /// Set to 0 where a gradient element, as read (before unscaling), is inf
  /// or NaN, as launchFiniteCheck does; left alone otherwise. A speculative
  /// update checks its own gradient this way, so the finiteness check need
  /// not read it again (nullptr: no check).
  uint8_t* gradientsFinite = nullptr;
};

/// One parameter's buffers. state0 is SGD's momentum buffer or Adam's
/// exp_avg, state1 Adam's exp_avg_sq, state2 AMSGrad's max_exp_avg_sq;
/// absent ones are nullptr. Outputs may
/// be their inputs. Tensors of one launch may differ in their gradient's
/// dtype and in having a param_copy (a network's f16-gradient weights with
/// f16 copies beside its f32 batch-norm parameters).
struct OptimizerTensor {
  const void* param;
  const void* grad;
  const void* state0;
  const void* state1;
  const void* state2;
  const void* copy;
  void* newParam;
  void* newState0;
  void* newState1;
  void* newState2;
  void* newCopy;
  int64_t count;
  ElementType gradType;
};

/// The loss scaler's state update, run by one thread of an optimizer's last
/// launch (a step's updates and its update_scale, which touch none of each
/// other's buffers, in one launch instead of two).
struct ScaleUpdate {
  UpdateScaleConfig config;
  UpdateScalePointers pointers;
};

/// Whether launchOptimizer runs these tensors' SGD or Adam 16 bytes per
/// load and store, a block taking 4096 elements: `config.vectorize`, f32
/// parameters (and optimizer state, computed in f32), f32, f16 or bf16
/// gradients, f16 or bf16 copies or none, and every pointer 16-byte aligned
/// (plan buffers are 64-byte aligned; a view into one may not be). The bits
/// are those of the element-by-element kernel, which takes every other
/// launch.
bool optimizerLaunchVectorizes(const OptimizerConfig& config, const OptimizerTensor* tensors,
                               std::size_t tensorCount);

/// Updates every tensor (as few launches as the kernel-argument limit
/// allows). With the predicate present and 0, each new value is its input,
/// bit for bit (copied where the output is another buffer). With
/// `scaleUpdate`, the last launch also updates the scaler's state.
cudaError_t launchOptimizer(const OptimizerConfig& config, const OptimizerScalars& scalars,
                            const OptimizerTensor* tensors, std::size_t tensorCount, cudaStream_t stream,
                            const ScaleUpdate* scaleUpdate = nullptr);

/// One piece of state a speculative update rewrote into its second buffer
/// (SpeculativeUpdates.h): `bytes` from `current` into `next`.
struct RestoreTensor {
  const void* current;
  void* next;
  int64_t bytes;
};

/// Where the step is skipped (`predicate` 0), copies each tensor's current
/// state over what the speculative update wrote, so the next buffers hold
/// the old state bit for bit; where it is taken, every block returns at
/// once. A fixed grid (at most kMaxBlocks) walks the tensors in 16-byte
/// words, so a taken step costs one short launch whatever the state's size.
cudaError_t launchRestoreWhereSkipped(const uint8_t* predicate, const RestoreTensor* tensors,
                                      std::size_t tensorCount, cudaStream_t stream);

/// One SGD update folded into its gradient's GEMM (SpeculativeUpdates.h's
/// GemmFold): the GEMM's device scalars. alpha = -(lr * inv_scale), or
/// lr * inv_scale when maximizing (inv_scale 1 when absent), beta = 1.
struct FoldedUpdateScalars {
  const float* lr;
  const float* invScale; ///< nullptr: no loss scaler
  bool maximize;
  float* alphaBeta; ///< two floats
};
/// Every fold's scalars, one thread each, in as few launches as the
/// kernel-argument limit allows.
cudaError_t launchFoldedUpdateScalars(const FoldedUpdateScalars* folds, std::size_t count, cudaStream_t stream);

/// After a GEMM-folded update wrote the new f32 parameter: flag = 0 where
/// one of its `count` elements is inf or NaN (else unchanged), and with
/// `copy`, each element rounded to nearest even into it (F16 or BF16), as
/// the update in line writes its param_copy. `param` and `copy` 16-byte
/// aligned. With `evictFirst`, the loads and stores carry the evict-first
/// hint (nothing reads them before the next step). At most `maxBlocks`
/// blocks (0: as many as the data fills, up to kMaxBlocks), so that beside
/// GEMMs planned to leave it some SMs it stays within them.
cudaError_t launchCheckFoldedUpdate(const float* param, void* copy, ElementType copyType, int64_t count,
                                    uint8_t* flag, bool evictFirst, int64_t maxBlocks, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Conversions
//===----------------------------------------------------------------------===//

/// One tensor of a multi-tensor conversion: `count` elements, contiguous.
struct ConvertTensor {
  const void* from;
  void* to;
  int64_t count;
};

/// Converts every tensor between two of F32, F16 and BF16 (rounding to
/// nearest even, as the generated kernels' convert), in as few launches as
/// the kernel-argument limit allows.
cudaError_t launchConvert(ElementType from, ElementType to, const ConvertTensor* tensors, std::size_t tensorCount,
                          cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Layout (LayoutKernels.cu)
//===----------------------------------------------------------------------===//

/// After size-1 dimensions are dropped and contiguous runs merged.
inline constexpr int kMaxLayoutRank = 16;

/// out (row-major, `dims`) element at index (i0, ..., ir-1) reads input
/// element sum(ik * inStrides[k]) (strides in elements; 0 broadcasts).
struct StridedCopyShape {
  int32_t rank;
  int64_t dims[kMaxLayoutRank];
  int64_t inStrides[kMaxLayoutRank];
  /// 64-bit index arithmetic even where 32 bits hold every offset.
  bool wideIndex = false;
};

/// elementBytes is 1, 2, 4 or 8.
cudaError_t launchStridedCopy(const void* in, void* out, int64_t count, int32_t elementBytes,
                              const StridedCopyShape& shape, cudaStream_t stream);

/// One tensor of a grouped layout copy: a StridedCopyShape of at most
/// kMaxGroupedCopyRank dimensions whose every offset fits in 32 bits.
inline constexpr int kMaxGroupedCopyRank = 4;
struct StridedCopyTensor {
  const void* in;
  void* out;
  int64_t count;
  int32_t rank;
  int64_t dims[kMaxGroupedCopyRank];
  int64_t inStrides[kMaxGroupedCopyRank];
};
/// Whether launchStridedCopies takes a copy of this shape and count.
bool groupsStridedCopy(int64_t count, const StridedCopyShape& shape);
/// Every tensor's strided copy (all of elementBytes 1, 2, 4 or 8) in one
/// multi-tensor launch per table of up to 32 tensors; each must pass
/// groupsStridedCopy, none may write what another reads.
cudaError_t launchStridedCopies(int32_t elementBytes, const StridedCopyTensor* tensors, std::size_t tensorCount,
                                cudaStream_t stream);

/// Every element of out = the low `elementBytes` bytes of `bits` (little-endian).
cudaError_t launchFill(void* out, int64_t count, int32_t elementBytes, uint64_t bits, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Profiling (AMPJIT_PROFILE, AMPJIT_TIMELINE)
//===----------------------------------------------------------------------===//

/// Host-written release word and device-written verdict, in pinned host
/// memory (device-addressable through unified addressing).
struct StreamHold {
  volatile uint32_t released; ///< the host stores 1 once it has enqueued what the hold holds back
  volatile uint32_t gaveUp;   ///< the kernel stores 1 if it stopped waiting after `maxPolls` reads
};

/// One thread polls hold->released until it is nonzero or it has read it
/// `maxPolls` times. Everything enqueued behind it then runs back to back,
/// so a profile's events time the device, not the host's enqueueing.
cudaError_t launchStreamHold(StreamHold* hold, long long maxPolls, cudaStream_t stream);

/// One thread stores the device's global timer (ns) in *slot: AMPJIT_TIMELINE
/// stamps each launch of a replayed step before and after it on its stream.
cudaError_t launchTimelineStamp(unsigned long long* slot, cudaStream_t stream);

} // namespace ampjit::runtime::cuda::update

#endif // AMPJIT_RUNTIME_LIB_CUDA_UPDATEKERNELS_H
