#ifndef AMPJIT_RUNTIME_LIB_CUDA_DEVICESTEP_H
#define AMPJIT_RUNTIME_LIB_CUDA_DEVICESTEP_H

// How the CUDA backend runs a plan step: at prepare time each step (or run
// of steps that share one launch, such as consecutive optimizer updates)
// becomes a DeviceStep, which holds whatever the step needs between runs
// (a cuBLASLt algorithm, cuDNN descriptors, a loaded NVRTC kernel, launch
// geometry). A run then enqueues every DeviceStep, in plan order, on one
// stream with the buffers' device pointers. Enqueue never allocates, never
// synchronises and never reads device memory on the host, so a whole run can
// be captured into a CUDA graph and replayed.
//
// Built only with the CUDA backend (AMPJIT_CUDA_ENABLED).

#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/Status.h"
#include "ampjit/runtime/cuda/KernelSource.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ampjit::runtime::cuda {

class KernelCompiler;
struct GemmTuner;

/// What prepare-time code may use: the device's properties and the
/// libraries' handles, created once per backend.
struct DeviceContext {
  int device = 0;
  /// "sm_90"; NVRTC compiles generated kernels for it.
  std::string architecture;
  int multiprocessorCount = 0;
  /// Threads resident on one SM at most (2048 on sm_90).
  int maxThreadsPerMultiprocessor = 0;
  cublasLtHandle_t cublasLt = nullptr;
  /// Created on first use (cudnnCreate loads several libraries): call
  /// cudnnHandle() rather than reading this.
  cudnnHandle_t cudnn = nullptr;
  KernelCompiler* compiler = nullptr;
  /// Null unless GEMMs are tuned (GemmTuning.h): then large ones time the
  /// heuristic's candidates at prepare.
  GemmTuner* gemmTuner = nullptr;
  /// NVRTC kernels loaded so far, by kernel name (one name, one source), so
  /// identical steps share one module; and the libraries to unload.
  std::map<std::string, cudaKernel_t> loadedKernels;
  std::vector<cudaLibrary_t> loadedLibraries;
  /// Compilations and cache hits of this context's kernels (CudaRunStats).
  int64_t kernelsCompiled = 0;
  int64_t kernelCacheHits = 0;

  /// The cuDNN handle, created the first time a plan needs it.
  Expected<cudnnHandle_t> cudnnHandle();
};

/// One enqueue's buffers: device pointers in the step's slot order (for a
/// grouped DeviceStep, the slots of its steps one after another), nullptr for
/// an absent optional slot, and the shared workspace of at least
/// workspaceBytes().
struct StepPointers {
  std::span<void* const> inputs;
  std::span<void* const> outputs;
  void* workspace = nullptr;
  /// An optimizer step's flag byte, cleared where a gradient element it
  /// reads is inf or NaN (update::OptimizerScalars::gradientsFinite); other
  /// steps ignore it.
  uint8_t* gradientsFinite = nullptr;
};

class DeviceStep {
public:
  virtual ~DeviceStep() = default;
  /// Scratch device memory enqueue needs (one workspace serves all steps,
  /// since they run one after another on one stream).
  virtual std::size_t workspaceBytes() const { return 0; }
  /// Enqueues the step's work on `stream`: asynchronous, capturable (no
  /// allocation, no synchronisation, no host reads of device memory).
  virtual Status enqueue(const StepPointers& pointers, cudaStream_t stream) = 0;
  /// What the step chose at prepare that a profile should show (a GEMM's
  /// cuBLASLt algorithm), or nothing.
  virtual std::string profileNote() const { return {}; }
};

/// AMPJIT_CUDA_WIDE_INDEX=1: the pooling and layout kernels do their index
/// arithmetic in 64 bits even where every offset fits in 32, which they
/// otherwise do (64-bit division is a slow software routine on the GPU).
/// Read when a step is prepared; tests run the wide path with it, since
/// tensors of 2^31 elements do not fit in a test.
bool wideIndexArithmeticForced();

/// Whether the update and finiteness kernels load and store the data they
/// touch once with the evict-first hint (so that streaming it beside a GEMM
/// keeps the GEMM's tiles in L2); AMPJIT_CUDA_CACHE_HINTS=0 (or "", as for
/// every AMPJIT_* switch) turns that off,
/// to measure what it buys. Read when a step is prepared. The bits are the
/// same either way.
bool evictFirstHints();

/// Whether the SGD and Adam updates run 16 bytes per load and store where
/// their tensors allow it (update::optimizerLaunchVectorizes);
/// AMPJIT_CUDA_VECTOR_UPDATES=0 sends every update to the element-by-element
/// kernel, to measure what the wide loads buy and to compare the two
/// kernels' bits. Read when a step is prepared. The bits are the same.
bool vectorUpdates();

/// Per-family factories; each returns an error naming the step when the step
/// is not one it runs or its shapes are outside what it supports.

/// Gemm through cuBLASLt (CublasLtGemm.cpp); with `smCountTarget` > 0, its
/// algorithm chosen for that many SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET:
/// the rest are left to work beside it, CudaBackendOptions::gemmSmReserve).
/// With the context's GemmTuner, a large enough product's algorithm is the
/// fastest of the heuristic's candidates (GemmTuning.h): timed here on
/// scratch memory from the tuner's pool, unless chosen before, or unless
/// `choice` is Heuristic (a product an update may fold into: only a run
/// that does not fold runs it as it is, so timing it would be wasted).
enum class GemmAlgorithmChoice { TimedIfLarge, Heuristic };
Expected<std::unique_ptr<DeviceStep>> makeGemmStep(DeviceContext& context, const Plan& plan, const Step& step,
                                                   int smCountTarget = 0,
                                                   GemmAlgorithmChoice choice = GemmAlgorithmChoice::TimedIfLarge);
/// A Gemm step with an SGD update folded in (SpeculativeUpdates.h's
/// GemmFold): D = alpha * op(A) op(B) + beta * C in f32, C and D f32
/// matrices of the product's shape, alpha and beta read from the device when
/// the GEMM runs. Its enqueue takes inputs [A, B, C, scalars] (scalars: the
/// two floats alpha, beta) and outputs [D]; D may not be C.
Expected<std::unique_ptr<DeviceStep>> makeFoldedUpdateGemmStep(DeviceContext& context, const Plan& plan,
                                                               const Step& step, int smCountTarget = 0);
/// Elementwise and FusedElementwise through NVRTC (GeneratedKernels.cpp):
/// the step's kernel as emitElementwiseKernel made it, loaded (compiled
/// first unless precompileGeneratedKernels did).
Expected<std::unique_ptr<DeviceStep>> makeGeneratedElementwiseStep(DeviceContext& context,
                                                                   const ElementwiseKernel& kernel);
/// Compiles every kernel the context has not loaded, in parallel threads,
/// and loads them, so that makeGeneratedElementwiseStep finds them ready
/// (time to first step: one compilation's time, not the sum).
Status precompileGeneratedKernels(DeviceContext& context, std::span<const ElementwiseKernel* const> kernels);
/// Every other kind but the convolutional ones, through the hand-written
/// kernels compiled into the library (KernelSteps.cpp dispatches):
///  * numeric kernels: Reduction, the softmax family, LayerNorm(Grad), Loss,
///    LossGrad, Dropout (NumericSteps.cpp, NumericKernels.cu);
///  * update kernels: ScaleLoss, AllFinite, UnscaleAndCheck, UpdateScale,
///    OptimizerUpdate and its multi-tensor groups, and the layout kinds
///    BroadcastTo, Reshape, Transpose, Constant (UpdateSteps.cpp,
///    UpdateKernels.cu, LayoutKernels.cu).
bool runsAsHandwrittenKernel(StepKind kind);
Expected<std::unique_ptr<DeviceStep>> makeHandwrittenStep(DeviceContext& context, const Plan& plan,
                                                          const Step& step);
bool runsAsNumericKernel(StepKind kind);
Expected<std::unique_ptr<DeviceStep>> makeNumericStep(DeviceContext& context, const Plan& plan, const Step& step);
bool runsAsUpdateKernel(StepKind kind);
Expected<std::unique_ptr<DeviceStep>> makeUpdateStep(DeviceContext& context, const Plan& plan, const Step& step);
/// Consecutive OptimizerUpdate steps that one multi-tensor launch can run
/// (same optimizer parameters, same dtypes and present slots, shared
/// lr/step/inv_scale/predicate buffers).
bool canShareOptimizerLaunch(const Plan& plan, const Step& first, const Step& next);
/// A deferred update's multi-tensor launch smaller than this (in parameter
/// elements: 4 MB of fp32 values, a few microseconds of bandwidth) also takes
/// the updates of later deadlines, which then finish earlier than needed.
inline constexpr int64_t kSmallDeferredLaunchElements = int64_t(1) << 20;
/// For an Elementwise Convert step between two of f32, f16 and bf16, in f32,
/// from one shape to the same shape (what the multi-tensor convert kernel and
/// a classification head run): its (from, to) dtypes.
std::optional<std::pair<DType, DType>> plainConversion(const Plan& plan, const Step& step);
/// Consecutive conversions between f32, f16 and bf16 with the same pair of
/// dtypes, each reading nothing the other writes (an O1 step's parameter
/// casts), that one multi-tensor launch can run.
bool canShareConvertLaunch(const Plan& plan, const Step& first, const Step& next);
/// Consecutive Transpose steps (a ResNet's weight-gradient transposes, which
/// codegen gathers before the finiteness check) of one element size, each
/// reading nothing the other writes, whose copies the multi-tensor layout
/// kernel takes (at most 4 strided dimensions, 32-bit offsets): one launch.
bool canShareCopyLaunch(const Plan& plan, const Step& first, const Step& next);
/// A Loss step and the LossGrad step right after it, on the same scores and
/// labels, that one launch can run (a small reduced classification loss:
/// NumericKernels.h's lossAndGradientShareALaunch).
bool canShareLossLaunch(const Plan& plan, const Step& loss, const Step& gradient);
Expected<std::unique_ptr<DeviceStep>> makeLossAndGradientStep(const Plan& plan, const Step& loss,
                                                              const Step& gradient);
/// An AMP classifier's head at step `index`: the f16/bf16 scores widened to
/// f32 (at O1 with the f32 bias added in the same FusedElementwise step), a
/// loss and its gradient on them that canShareLossLaunch allows, and
/// the gradient's rounding back to the low dtype and its column sums if the
/// next steps are those. Its length, 3 to 5 steps, or 0; one launch runs it
/// (makeClassificationHeadStep), storing every output of its steps.
std::size_t classificationHeadLength(const Plan& plan, std::size_t index);
Expected<std::unique_ptr<DeviceStep>> makeClassificationHeadStep(const Plan& plan, std::span<const Step* const> steps);
/// An mlp's regression head at step `index`: its [rows, columns] f16/bf16
/// scores widened to f32 (the f32 bias added, at O1), or f32 scores; a
/// reduced mse loss against an f32 target and its gradient; the gradient
/// rounded to the low dtype and its column sums, where the next steps are
/// those (at least one of the widening, the rounding and the sums). Its
/// length, 3 to 5 steps, or 0. makeMseHeadStep runs it in one pass and a
/// launch that totals the loss, storing the wide scores and the f32
/// gradient only where a step outside it reads them.
std::size_t mseHeadLength(const Plan& plan, std::size_t index);
Expected<std::unique_ptr<DeviceStep>> makeMseHeadStep(const Plan& plan, std::span<const Step* const> steps);
/// Whether steps `index` and `index + 1` are an f16 or bf16 tensor widened
/// to f32 and an f32 reduction that alone reads the widened copy (AMP's fp32
/// bias gradient of a low-precision output gradient). One launch then sums
/// the narrow tensor directly (makeWidenedReductionStep), with the same bits
/// and without writing or reading the f32 copy. Not when the sum's output
/// shares bytes with the narrow input.
bool widenedReductionAt(const Plan& plan, std::size_t index);
/// Whether steps `index` and `index + 1` are an Elementwise or
/// FusedElementwise step and an f32 sum over the first dimension of one of
/// its f32 outputs (of rank 2 or more) that alone reads it: a bias gradient
/// after a relu gradient and its widening. One generated kernel then runs
/// both (KernelSource.h's emitColumnSummedKernel), never storing the summed
/// output, when the sum on its own would run as one pass of the column
/// kernel (so the bits are the same) and the sums share no bytes with the
/// elementwise step's other buffers.
bool columnSummedElementwiseAt(const Plan& plan, std::size_t index);
/// Whether step `index` is an AllFinite step (not split over the side
/// stream) and step `index + 1` an f32 division of scalars touching none of
/// its buffers (the scaler's inv_scale = 1 / scale): one thread of the
/// check's last launch then computes the quotient, a launch fewer.
bool finiteCheckTakesQuotient(const Plan& plan, std::size_t index);
Expected<std::unique_ptr<DeviceStep>> makeWidenedReductionStep(const Plan& plan, std::span<const Step* const> steps);
/// The plan's steps as the backend launches them, as [begin, end) ranges:
/// consecutive updates canShareOptimizerLaunch allows share a multi-tensor
/// launch, and so do consecutive conversions canShareConvertLaunch allows
/// pairwise, and consecutive transposes canShareCopyLaunch allows pairwise,
/// a classification head (classificationHeadLength), a widened
/// reduction (widenedReductionAt), an elementwise step with its column sums
/// (columnSummedElementwiseAt) and otherwise
/// a loss with its gradient (canShareLossLaunch); never across the deferred
/// boundary (Plan::deferredSteps). A finiteness check takes the scalar
/// division after it (finiteCheckTakesQuotient). Not deferred, the UpdateScale step right
/// after a step's updates joins their launch when none of them touches its
/// buffers (one thread of the last launch runs it).
/// Deferred, a launch holds the updates one step waits for
/// (deferredStepDeadlines) and takes in those of later steps while it is
/// under kSmallDeferredLaunchElements: a ResNet's ~100 batch-norm and
/// convolution updates of a few thousand elements each would otherwise be
/// ~100 side-stream launches and joins for ~0.2 ms of work.
std::vector<std::pair<std::size_t, std::size_t>> launchGroups(const Plan& plan);
/// The generated kernel of each of launchGroups' `groups` that runs one:
/// a group of one Elementwise or FusedElementwise step, or such a step with
/// the column sum after it (columnSummedElementwiseAt; other steps that
/// share a launch, such as conversions, need none); indexed by the group's first
/// step, empty elsewhere. An error names the step it cannot emit for.
Expected<std::vector<std::optional<ElementwiseKernel>>> generatedKernels(
    const Plan& plan, std::span<const std::pair<std::size_t, std::size_t>> groups);
/// How many of launchGroups' `groups` enqueue work on the device: all but
/// the reshapes that view their input's memory (runtime arenaViewRoots).
std::size_t launchesPerRun(const Plan& plan, std::span<const std::pair<std::size_t, std::size_t>> groups);
/// For each of launchGroups' `groups` after the deferred update, the last of
/// the update's groups (counted among those, in order) that must finish
/// before it launches: the last one due (deferredStepDeadlines) at any of its
/// steps; -1 for none, and for the update's own groups.
std::vector<std::ptrdiff_t> deferredJoins(const Plan& plan,
                                          std::span<const std::pair<std::size_t, std::size_t>> groups);
/// Whether two buffers may share bytes: the same buffer (or views of it), or
/// temporaries whose arena ranges overlap (codegen reuses the bytes of dead
/// temporaries). Steps that run in one launch must not, where one writes.
bool sameMemory(const Plan& plan, BufferId a, BufferId b);
/// The DeviceStep of one of launchGroups' groups of more than one step: a
/// multi-tensor conversion, a classification head, a loss with its gradient,
/// or makeOptimizerGroupStep's launch.
Expected<std::unique_ptr<DeviceStep>> makeLaunchGroupStep(DeviceContext& context, const Plan& plan,
                                                          std::span<const Step* const> steps);
/// One launch for `steps` (at least one OptimizerUpdate step, each pair
/// allowed by canShareOptimizerLaunch, possibly then an UpdateScale step
/// that touches none of their buffers); its StepPointers hold the steps'
/// slots one step after another.
Expected<std::unique_ptr<DeviceStep>> makeOptimizerGroupStep(DeviceContext& context, const Plan& plan,
                                                             std::span<const Step* const> steps);
/// Conv2d, its gradients, batch norm and pooling through cuDNN (Cudnn.cpp).
bool runsThroughCudnn(StepKind kind);
/// Of those, the kinds whose steps call the cuDNN library itself (pooling
/// there runs our own kernels, PoolingKernels.cu).
bool callsCudnn(StepKind kind);
/// A fused batch norm's cuDNN reserve space (Cudnn.cpp says how it travels).
struct BatchNormReserve;
/// What the cuDNN steps of one plan share, made in plan order at prepare:
/// the reserve space of each batch norm that runs cuDNN's fused forward, by
/// the forward's save_mean buffer, where its gradient looks it up.
struct CudnnPlanState {
  std::map<BufferId, std::shared_ptr<BatchNormReserve>> batchNormReserves;
};
Expected<std::unique_ptr<DeviceStep>> makeCudnnStep(DeviceContext& context, const Plan& plan, const Step& step,
                                                    CudnnPlanState& state);

/// "cudaErrorMemoryAllocation: out of memory" as a Status, prefixed by `what`.
Status cudaFailure(cudaError_t error, const std::string& what);
Status cublasFailure(cublasStatus_t status, const std::string& what);
Status cudnnFailure(cudnnStatus_t status, const std::string& what);

#define AMPJIT_CUDA_RETURN_IF_ERROR(expr, what)                                                      \
  do {                                                                                               \
    cudaError_t ampjitCudaError_ = (expr);                                                           \
    if (ampjitCudaError_ != cudaSuccess)                                                             \
      return ::ampjit::runtime::cuda::cudaFailure(ampjitCudaError_, (what));                         \
  } while (0)

#define AMPJIT_CUBLAS_RETURN_IF_ERROR(expr, what)                                                    \
  do {                                                                                               \
    cublasStatus_t ampjitCublasStatus_ = (expr);                                                     \
    if (ampjitCublasStatus_ != CUBLAS_STATUS_SUCCESS)                                                \
      return ::ampjit::runtime::cuda::cublasFailure(ampjitCublasStatus_, (what));                    \
  } while (0)

#define AMPJIT_CUDNN_RETURN_IF_ERROR(expr, what)                                                     \
  do {                                                                                               \
    cudnnStatus_t ampjitCudnnStatus_ = (expr);                                                       \
    if (ampjitCudnnStatus_ != CUDNN_STATUS_SUCCESS)                                                  \
      return ::ampjit::runtime::cuda::cudnnFailure(ampjitCudnnStatus_, (what));                      \
  } while (0)

} // namespace ampjit::runtime::cuda

#endif // AMPJIT_RUNTIME_LIB_CUDA_DEVICESTEP_H
