// Conv2d and its gradients, batch norm and pooling on the GPU (DeviceStep.h).
//
// Convolutions and batch norm go through cuDNN's legacy descriptor API (the
// GPU machines have cuDNN 9.14; nothing newer is used). Everything cuDNN
// needs is decided at prepare time: descriptors, the algorithm (first
// successful heuristic result, never an exhaustive search, so a plan's first
// run stays fast) and its workspace. Enqueue then only binds the stream and
// issues the calls.
//
// Precision follows the CPU kernels (runtime/lib/cpu): convolutions
// accumulate in f32 for f16/bf16/f32 data (f64 for f64), f32 never runs on
// TF32 (CUDNN_FMA_MATH), f16/bf16 may use tensor cores (they accumulate in
// f32). Batch norm statistics are f32 (f64 for f64 data), cuDNN's derived
// descriptor type, which is the plan's statistics type; bf16 batch norm data
// runs through f32 copies (BatchNormStep).
//
// Pooling does not use cuDNN: PoolingKernels.cu mirrors the CPU's windows,
// tie and NaN rules bit for bit, which cuDNN's pooling does not.

#include "BatchNormKernels.h"
#include "DeviceStep.h"
#include "PoolingKernels.h"

#include "ampjit/runtime/Environment.h"
#include "ampjit/runtime/WindowShape.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <vector>

namespace ampjit::runtime::cuda {

namespace {

std::string labelOf(const Step& step) {
  std::string label = std::string(stepKindName(step.kind)) + " step";
  if (!step.origin.empty())
    label += " from " + step.origin;
  return label;
}

/// A cuDNN descriptor owned for the step's lifetime.
template <typename Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle)>
class Descriptor {
public:
  Descriptor() = default;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() {
    if (handle_ != nullptr)
      Destroy(handle_);
  }
  Status create(const std::string& what) {
    AMPJIT_CUDNN_RETURN_IF_ERROR(Create(&handle_), what + ": creating a cuDNN descriptor");
    return Status::success();
  }
  Handle get() const { return handle_; }

private:
  Handle handle_ = nullptr;
};

using TensorDescriptor =
    Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor =
    Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor = Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                         cudnnDestroyConvolutionDescriptor>;

/// Device memory owned by a step (constant operands filled at prepare).
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (pointer_ != nullptr)
      cudaFree(pointer_);
  }
  /// Allocates `bytes` and copies `host` into it, waiting for the copy (prepare time).
  Status upload(const void* host, std::size_t bytes, const std::string& what) {
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaMalloc(&pointer_, bytes), what + ": allocating a constant operand");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpy(pointer_, host, bytes, cudaMemcpyHostToDevice),
                                what + ": uploading a constant operand");
    // From pageable memory cudaMemcpy may return once the bytes are staged,
    // before its DMA on the default stream lands, and runs enqueue on the
    // backend's non-blocking stream, which does not wait for the default
    // one: wait here, at prepare.
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr), what + ": uploading a constant operand");
    return Status::success();
  }
  void* get() const { return pointer_; }

private:
  void* pointer_ = nullptr;
};

/// cuDNN's alpha/beta blend factors: host f32 for f16/bf16/f32 data, f64 for f64.
class Blend {
public:
  explicit Blend(bool isDouble) : isDouble_(isDouble) {}
  const void* one() const { return isDouble_ ? static_cast<const void*>(&oneD_) : &oneF_; }
  const void* zero() const { return isDouble_ ? static_cast<const void*>(&zeroD_) : &zeroF_; }

private:
  bool isDouble_;
  float oneF_ = 1.0f, zeroF_ = 0.0f;
  double oneD_ = 1.0, zeroD_ = 0.0;
};

cudnnDataType_t cudnnTypeOf(DType dtype) {
  switch (dtype) {
  case DType::F16: return CUDNN_DATA_HALF;
  case DType::BF16: return CUDNN_DATA_BFLOAT16;
  case DType::F64: return CUDNN_DATA_DOUBLE;
  default: return CUDNN_DATA_FLOAT;
  }
}

/// cuDNN's legacy descriptors take int dimensions.
Status checkFitsInt(std::initializer_list<int64_t> values, const std::string& label) {
  for (int64_t value : values)
    if (value < 0 || value > INT_MAX)
      return Status::error(label + ": dimension " + std::to_string(value) +
                           " does not fit cuDNN's 32-bit descriptors");
  return Status::success();
}

Status setTensor4d(const TensorDescriptor& descriptor, bool nhwc, DType dtype, int64_t n, int64_t c, int64_t h,
                   int64_t w, const std::string& label) {
  AMPJIT_RETURN_IF_ERROR(checkFitsInt({n, c, h, w, n * c * h * w}, label));
  AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(descriptor.get(), nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                                          cudnnTypeOf(dtype), int(n), int(c), int(h), int(w)),
                               label + ": describing a tensor");
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

/// Conv2d (y = conv(x, w) + bias), Conv2dGradInput (dx from dy, w, added
/// with beta = 1 to what dx holds when the step has an 'accumulate' input,
/// which is dx itself) and Conv2dGradWeight (dw from dy, x).
class ConvolutionStep final : public DeviceStep {
public:
  ConvolutionStep(const Step& step, bool isDouble) : kind_(step.kind), label_(labelOf(step)), blend_(isDouble) {}

  Status prepare(DeviceContext& context, const Plan& plan, const Step& step);
  std::size_t workspaceBytes() const override { return workspaceBytes_; }
  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override;

private:
  /// Run: the convolution. ZeroOutput: an empty reduction (no input
  /// channels, no images, no output channels), so the result is 0 (+ bias).
  /// Nothing: the result is empty.
  enum class Mode { Run, ZeroOutput, Nothing };

  Status chooseAlgorithm(DType dtype);
  Status addBias(void* y, const void* bias) const;

  StepKind kind_;
  std::string label_;
  Blend blend_;
  Mode mode_ = Mode::Run;
  cudnnHandle_t handle_ = nullptr;
  TensorDescriptor x_, y_, bias_;
  FilterDescriptor w_;
  ConvolutionDescriptor convolution_;
  cudnnConvolutionFwdAlgo_t forwardAlgorithm_{};
  cudnnConvolutionBwdDataAlgo_t dataAlgorithm_{};
  cudnnConvolutionBwdFilterAlgo_t filterAlgorithm_{};
  std::size_t workspaceBytes_ = 0;
  std::size_t outputBytes_ = 0;
  bool hasBias_ = false;
  bool accumulates_ = false;
};

Status ConvolutionStep::prepare(DeviceContext& context, const Plan& plan, const Step& step) {
  const Conv2dParams& params = step.as<Conv2dParams>();
  auto typeOfInput = [&](std::size_t slot) -> const TensorType& { return plan.buffers[step.inputs[slot]].type; };
  const TensorType& xType = kind_ == StepKind::Conv2d            ? typeOfInput(0)
                            : kind_ == StepKind::Conv2dGradInput ? plan.buffers[step.outputs[0]].type
                                                                 : typeOfInput(1);
  const TensorType& wType =
      kind_ == StepKind::Conv2dGradWeight ? plan.buffers[step.outputs[0]].type : typeOfInput(1);
  const TensorType& yType = kind_ == StepKind::Conv2d ? plan.buffers[step.outputs[0]].type : typeOfInput(0);
  const TensorType& outType = plan.buffers[step.outputs[0]].type;
  DType dtype = xType.dtype;
  hasBias_ = kind_ == StepKind::Conv2d && step.inputs.size() > 2 && step.inputs[2] != kNoBuffer;
  accumulates_ = accumulatesInPlace(step);
  outputBytes_ = std::size_t(outType.byteSize());

  ActivationDims a = activationDims(params.nhwc);
  FilterDims f = filterDims(params.nhwc);
  const Shape &x = xType.shape, &w = wType.shape, &y = yType.shape;
  int64_t batch = x[size_t(a.batch)], channels = x[size_t(a.channel)];
  int64_t outChannels = w[size_t(f.out)], groupChannels = w[size_t(f.in)];

  if (outType.elementCount() == 0) {
    mode_ = Mode::Nothing;
    return Status::success();
  }
  Expected<cudnnHandle_t> handle = context.cudnnHandle();
  if (!handle)
    return handle.status().withContext(label_);
  handle_ = *handle;
  if (hasBias_) {
    AMPJIT_RETURN_IF_ERROR(y_.create(label_));
    AMPJIT_RETURN_IF_ERROR(bias_.create(label_));
    AMPJIT_RETURN_IF_ERROR(setTensor4d(y_, params.nhwc, dtype, batch, outChannels, y[size_t(a.height)],
                                       y[size_t(a.width)], label_));
    AMPJIT_RETURN_IF_ERROR(setTensor4d(bias_, params.nhwc, dtype, 1, outChannels, 1, 1, label_));
  }
  if (xType.elementCount() == 0 || wType.elementCount() == 0 || yType.elementCount() == 0) {
    mode_ = Mode::ZeroOutput;
    return Status::success();
  }

  if (!hasBias_) {
    AMPJIT_RETURN_IF_ERROR(y_.create(label_));
    AMPJIT_RETURN_IF_ERROR(setTensor4d(y_, params.nhwc, dtype, batch, outChannels, y[size_t(a.height)],
                                       y[size_t(a.width)], label_));
  }
  AMPJIT_RETURN_IF_ERROR(x_.create(label_));
  AMPJIT_RETURN_IF_ERROR(
      setTensor4d(x_, params.nhwc, dtype, batch, channels, x[size_t(a.height)], x[size_t(a.width)], label_));
  int64_t kernelH = w[size_t(f.height)], kernelW = w[size_t(f.width)];
  AMPJIT_RETURN_IF_ERROR(checkFitsInt({outChannels, groupChannels, kernelH, kernelW, params.groups,
                                       params.padding[0], params.padding[1], params.stride[0], params.stride[1],
                                       params.dilation[0], params.dilation[1]},
                                      label_));
  AMPJIT_RETURN_IF_ERROR(w_.create(label_));
  AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(w_.get(), cudnnTypeOf(dtype),
                                                          params.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                                          int(outChannels), int(groupChannels), int(kernelH),
                                                          int(kernelW)),
                               label_ + ": describing the filter");
  AMPJIT_RETURN_IF_ERROR(convolution_.create(label_));
  AMPJIT_CUDNN_RETURN_IF_ERROR(
      cudnnSetConvolution2dDescriptor(convolution_.get(), int(params.padding[0]), int(params.padding[1]),
                                      int(params.stride[0]), int(params.stride[1]), int(params.dilation[0]),
                                      int(params.dilation[1]), CUDNN_CROSS_CORRELATION,
                                      dtype == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
      label_ + ": describing the convolution");
  AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionGroupCount(convolution_.get(), int(params.groups)),
                               label_ + ": setting the group count");
  return chooseAlgorithm(dtype);
}

/// The math type the descriptor starts with: no TF32 for f32 data, tensor
/// cores (f32 accumulation) for f16/bf16.
cudnnMathType_t initialMathType(DType dtype) {
  switch (dtype) {
  case DType::F16:
  case DType::BF16: return CUDNN_TENSOR_OP_MATH;
  case DType::F32: return CUDNN_FMA_MATH;
  default: return CUDNN_DEFAULT_MATH;
  }
}

/// Whether an algorithm's math type keeps the plan's precision: f32 data must
/// never be rounded to TF32 (so FMA math only).
bool acceptableMathType(DType dtype, cudnnMathType_t mathType) {
  return dtype != DType::F32 || mathType == CUDNN_FMA_MATH;
}

/// The first heuristic result that succeeded with an acceptable math type.
template <typename Perf>
const Perf* firstUsable(const std::vector<Perf>& results, int returned, DType dtype) {
  for (int i = 0; i < returned && i < int(results.size()); ++i)
    if (results[size_t(i)].status == CUDNN_STATUS_SUCCESS && acceptableMathType(dtype, results[size_t(i)].mathType))
      return &results[size_t(i)];
  return nullptr;
}

Status ConvolutionStep::chooseAlgorithm(DType dtype) {
  cudnnConvolutionDescriptor_t convolution = convolution_.get();
  AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(convolution, initialMathType(dtype)),
                               label_ + ": setting the math type");
  std::string none = label_ + ": cuDNN has no algorithm for this " + std::string(dtypeName(dtype)) +
                     " convolution (its heuristics returned no supported configuration)";
  int count = 0, returned = 0;
  cudnnMathType_t mathType = CUDNN_DEFAULT_MATH;
  switch (kind_) {
  case StepKind::Conv2d: {
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithmMaxCount(handle_, &count),
                                 label_ + ": counting algorithms");
    std::vector<cudnnConvolutionFwdAlgoPerf_t> results(size_t(count > 0 ? count : 1));
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(handle_, x_.get(), w_.get(), convolution,
                                                                        y_.get(), int(results.size()), &returned,
                                                                        results.data()),
                                 label_ + ": choosing an algorithm");
    const cudnnConvolutionFwdAlgoPerf_t* chosen = firstUsable(results, returned, dtype);
    if (chosen == nullptr)
      return Status::error(none);
    forwardAlgorithm_ = chosen->algo;
    mathType = chosen->mathType;
    break;
  }
  case StepKind::Conv2dGradInput: {
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle_, &count),
                                 label_ + ": counting algorithms");
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> results(size_t(count > 0 ? count : 1));
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle_, w_.get(), y_.get(),
                                                                             convolution, x_.get(),
                                                                             int(results.size()), &returned,
                                                                             results.data()),
                                 label_ + ": choosing an algorithm");
    const cudnnConvolutionBwdDataAlgoPerf_t* chosen = firstUsable(results, returned, dtype);
    if (chosen == nullptr)
      return Status::error(none);
    dataAlgorithm_ = chosen->algo;
    mathType = chosen->mathType;
    break;
  }
  default: {
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle_, &count),
                                 label_ + ": counting algorithms");
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> results(size_t(count > 0 ? count : 1));
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle_, x_.get(), y_.get(),
                                                                               convolution, w_.get(),
                                                                               int(results.size()), &returned,
                                                                               results.data()),
                                 label_ + ": choosing an algorithm");
    const cudnnConvolutionBwdFilterAlgoPerf_t* chosen = firstUsable(results, returned, dtype);
    if (chosen == nullptr)
      return Status::error(none);
    filterAlgorithm_ = chosen->algo;
    mathType = chosen->mathType;
    break;
  }
  }
  // cuDNN picks tensor-core kernels from the algorithm and the descriptor's
  // math type together, so the descriptor takes the chosen result's type.
  AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(convolution, mathType),
                               label_ + ": setting the chosen math type");
  switch (kind_) {
  case StepKind::Conv2d:
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardWorkspaceSize(handle_, x_.get(), w_.get(), convolution,
                                                                         y_.get(), forwardAlgorithm_,
                                                                         &workspaceBytes_),
                                 label_ + ": sizing the workspace");
    break;
  case StepKind::Conv2dGradInput:
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataWorkspaceSize(handle_, w_.get(), y_.get(),
                                                                              convolution, x_.get(),
                                                                              dataAlgorithm_, &workspaceBytes_),
                                 label_ + ": sizing the workspace");
    break;
  default:
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle_, x_.get(), y_.get(),
                                                                                convolution, w_.get(),
                                                                                filterAlgorithm_, &workspaceBytes_),
                                 label_ + ": sizing the workspace");
    break;
  }
  return Status::success();
}

/// y += bias per output channel, after the convolution (the CPU rounds
/// sum + bias once; here the f16/bf16 sum is rounded before the add, one
/// extra rounding within the dtype's tolerance).
Status ConvolutionStep::addBias(void* y, const void* bias) const {
  AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnAddTensor(handle_, blend_.one(), bias_.get(), bias, blend_.one(), y_.get(), y),
                               label_ + ": adding the bias");
  return Status::success();
}

Status ConvolutionStep::enqueue(const StepPointers& pointers, cudaStream_t stream) {
  if (mode_ == Mode::Nothing)
    return Status::success();
  void* out = pointers.outputs[0];
  AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnSetStream(handle_, stream), label_ + ": binding the stream");
  if (accumulates_ && pointers.inputs[conv2d_grad_input_slot::kAccumulate] != out)
    return Status::error(label_ + ": adds to its 'accumulate' input in place, but dx is elsewhere (a backend bug)");
  if (mode_ == Mode::ZeroOutput) {
    if (accumulates_) // adding zero to what dx holds
      return Status::success();
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out, 0, outputBytes_, stream), label_ + ": zeroing the result");
    return hasBias_ ? addBias(out, pointers.inputs[2]) : Status::success();
  }
  void* workspace = pointers.workspace;
  switch (kind_) {
  case StepKind::Conv2d:
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(handle_, blend_.one(), x_.get(), pointers.inputs[0],
                                                         w_.get(), pointers.inputs[1], convolution_.get(),
                                                         forwardAlgorithm_, workspace, workspaceBytes_,
                                                         blend_.zero(), y_.get(), out),
                                 label_);
    return hasBias_ ? addBias(out, pointers.inputs[2]) : Status::success();
  case StepKind::Conv2dGradInput:
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(handle_, blend_.one(), w_.get(), pointers.inputs[1],
                                                              y_.get(), pointers.inputs[0], convolution_.get(),
                                                              dataAlgorithm_, workspace, workspaceBytes_,
                                                              accumulates_ ? blend_.one() : blend_.zero(), x_.get(),
                                                              out),
                                 label_);
    return Status::success();
  default:
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(handle_, blend_.one(), x_.get(), pointers.inputs[1],
                                                                y_.get(), pointers.inputs[0], convolution_.get(),
                                                                filterAlgorithm_, workspace, workspaceBytes_,
                                                                blend_.zero(), w_.get(), out),
                                 label_);
    return Status::success();
  }
}

//===----------------------------------------------------------------------===//
// Batch norm
//===----------------------------------------------------------------------===//

using ActivationDescriptor = Descriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                                        cudnnDestroyActivationDescriptor>;

pooling::Storage poolingStorageOf(DType dtype) {
  switch (dtype) {
  case DType::F16: return pooling::Storage::F16;
  case DType::BF16: return pooling::Storage::BF16;
  case DType::F64: return pooling::Storage::F64;
  default: return pooling::Storage::F32;
  }
}

/// AMPJIT_CUDA_FUSED_BN=0 (or "", as for every switch) sends every fused
/// batch norm to the fallback (the first GPU sessions bisect with it);
/// unset, it allows cuDNN's fused calls where they apply.
bool cudnnFusedBatchNormAllowed() { return environmentFlag("AMPJIT_CUDA_FUSED_BN", /*whenUnset=*/true); }

} // namespace

/// What a fused batch norm's forward leaves for its gradient when both run
/// cuDNN's fused calls (CUDNN_BATCHNORM_SPATIAL_PERSISTENT with an
/// activation): the reserve space, which cudnnBatchNormalizationForwardTrainingEx
/// writes and cudnnBatchNormalizationBackwardEx reads, and must be kept
/// between them. Plan buffers cannot hold it (its size is cuDNN's business),
/// so the forward's BatchNormStep allocates it at prepare and registers it in
/// the plan's CudnnPlanState under its save_mean buffer, which the gradient
/// reads too: that is how the gradient finds it. One space per forward step,
/// reused by every run (a run's backward reads what the same run's forward
/// wrote, in stream order).
struct BatchNormReserve {
  BatchNormReserve() = default;
  BatchNormReserve(const BatchNormReserve&) = delete;
  BatchNormReserve& operator=(const BatchNormReserve&) = delete;
  ~BatchNormReserve() {
    if (space != nullptr)
      cudaFree(space);
  }
  void* space = nullptr;
  std::size_t bytes = 0;
  BatchNormActivation activation = BatchNormActivation::None;
  /// The forward's eps, which cuDNN wants again in the backward.
  double eps = 1e-5;
  /// Whether the forward runs the fused call, so the space holds what the
  /// backward needs. Cleared for good if cuDNN refuses the call on the first
  /// run (before any capture): both steps then take the fallback.
  bool forwardUsesCudnn = false;
};

namespace {

/// BatchNorm (training), BatchNormInference and BatchNormGrad through
/// cuDNN's spatial batch norm. What cuDNN computes matches the plan's
/// definitions (Plan.h, runtime/lib/cpu/BatchNorm.cpp):
///  * save_invstd: cuDNN's "saved inverse variance" is 1/sqrt(biased var +
///    eps), the inverse standard deviation (PyTorch passes it through as
///    its save_invstd);
///  * running statistics: running = (1 - factor) * running + factor * batch
///    statistic, with the unbiased variance for the running variance; the
///    factor is the plan's momentum;
///  * the gradient: dbias = sum(dy), dweight = sum(dy * xhat), dx from the
///    given save_mean and save_invstd (cuDNN recomputes nothing when they are
///    passed).
/// bf16 data is staged through f32 copies in the workspace: PyTorch never
/// sends bf16 to cuDNN's legacy batch norm, so neither do we, and widening,
/// computing in f32 and rounding y or dx once is exactly the CPU's rule.
///
/// Epilogues (BatchNormActivation) take one of two paths, chosen at prepare:
///  * cuDNN's fused calls, cudnnBatchNormalizationForwardTrainingEx and
///    cudnnBatchNormalizationBackwardEx with CUDNN_BATCHNORM_OPS_BN_ACTIVATION
///    or _BN_ADD_ACTIVATION and a ReLU activation descriptor, for exactly the
///    configuration cuDNN documents for its semi-persistent NHWC kernel: a
///    training forward and its gradient, both fused, f16 data, rank-4 NHWC,
///    fully packed, mode CUDNN_BATCHNORM_SPATIAL_PERSISTENT, a non-null
///    workspace of the size cuDNN asks, a reserve space kept from forward to
///    backward (BatchNormReserve), and channels a multiple of 4 (cuDNN
///    requires it for the add; we ask it of both, ResNets have it anyway);
///  * otherwise (bf16, f32, f64, NCHW or other ranks, other channel counts,
///    inference, AMPJIT_CUDA_FUSED_BN=0, a gradient whose forward is not
///    fused, or cuDNN refusing the call on the first run) the fallback: the
///    forward normalises as an unfused step would, but into f32 (f16/bf16
///    data staged; f32/f64 in y itself), and a kernel applies (add and) relu
///    and rounds once; the gradient runs the relu-gradient kernel into dz (or
///    a workspace scratch) and then the unfused backward on it.
/// Both stay capturable: everything is allocated and decided at prepare.
class BatchNormStep final : public DeviceStep {
public:
  BatchNormStep(const Step& step, bool isDouble) : kind_(step.kind), label_(labelOf(step)), blend_(isDouble) {}

  Status prepare(DeviceContext& context, const Plan& plan, const Step& step, CudnnPlanState& state);
  std::size_t workspaceBytes() const override {
    return std::max(fallbackWorkspaceBytes(), fused_ ? cudnnWorkspaceBytes_ : std::size_t(0));
  }
  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override;

private:
  bool gradient() const { return kind_ == StepKind::BatchNormGrad; }
  std::size_t fallbackWorkspaceBytes() const { return (staged_ ? 3 * stagedBytes_ : 0) + reluGradScratchBytes_; }
  /// Decides whether this step runs cuDNN's fused call (fused_) and, if so,
  /// describes it; any configuration cuDNN's fused kernel does not cover
  /// leaves fused_ false, which is not an error.
  Status prepareFused(const Plan& plan, const Step& step, CudnnPlanState& state);
  /// cuDNN's fused forward or backward (the stream is bound; a forward's
  /// running statistics are already in its outputs).
  cudnnStatus_t runFused(const StepPointers& pointers);
  /// Everything but the fused calls: the plain batch norm, staged for bf16,
  /// with the fallback's relu-gradient and epilogue kernels around it.
  Status runUnfused(const StepPointers& pointers, cudaStream_t stream);
  /// The legacy cuDNN call, on data in the descriptor's type (the stream is bound).
  Status run(std::span<void* const> in, std::span<void* const> out, cudaStream_t stream);
  /// cuDNN updates the running statistics in the buffers it is given: give
  /// it the outputs, holding the old values unless they already are the
  /// state (updated in place).
  Status copyRunningStatistics(std::span<void* const> in, std::span<void* const> out, cudaStream_t stream);

  StepKind kind_;
  std::string label_;
  Blend blend_;
  BatchNormActivation activation_ = BatchNormActivation::None;
  pooling::Storage storage_ = pooling::Storage::F32;
  cudnnHandle_t handle_ = nullptr;
  TensorDescriptor data_, statistics_;
  /// Stand-ins for an absent weight (ones) and bias (zeros).
  DeviceBuffer ones_, zeros_;
  double eps_ = 1e-5, momentum_ = 0.1;
  std::size_t statisticsBytes_ = 0;
  /// Nothing to compute (no channels, or an empty inference input).
  bool nothing_ = false;
  /// A gradient over no elements: dweight and dbias are 0, dx is empty.
  bool zeroParameterGradients_ = false;
  /// bf16 data, and f16 data of a forward epilogue, runs in f32: three f32
  /// copies (x, dy and y or dx), each `stagedBytes_` (rounded up to 256
  /// bytes), at the start of the workspace.
  bool staged_ = false;
  int64_t elementCount_ = 0;
  std::size_t stagedBytes_ = 0;
  /// A relu-only gradient's g on the fallback, after the staged copies.
  std::size_t reluGradScratchBytes_ = 0;

  // cuDNN's fused path.
  bool fused_ = false;
  /// Set when cuDNN refused this gradient's fused call on the first run.
  bool refused_ = false;
  /// Set after the fused call first succeeded: a refusal after that is an error.
  bool confirmed_ = false;
  cudnnBatchNormOps_t operations_ = CUDNN_BATCHNORM_OPS_BN;
  TensorDescriptor fusedData_, fusedStatistics_;
  ActivationDescriptor relu_;
  std::size_t cudnnWorkspaceBytes_ = 0;
  std::shared_ptr<BatchNormReserve> reserve_;
};

Status BatchNormStep::prepare(DeviceContext& context, const Plan& plan, const Step& step, CudnnPlanState& state) {
  const TensorType& xType = plan.buffers[step.inputs[gradient() ? 1 : 0]].type;
  int64_t axis = 0;
  if (gradient()) {
    axis = step.as<BatchNormGradParams>().axis;
    activation_ = step.as<BatchNormGradParams>().activation;
  } else {
    const BatchNormParams& params = step.as<BatchNormParams>();
    axis = params.axis;
    activation_ = params.activation;
    eps_ = params.eps;
    momentum_ = params.momentum;
  }
  storage_ = poolingStorageOf(xType.dtype);
  const Shape& shape = xType.shape;
  int64_t channels = shape[size_t(axis)];
  DType statisticsType = xType.dtype == DType::F64 ? DType::F64 : DType::F32;
  statisticsBytes_ = std::size_t(channels) * dtypeSize(statisticsType);
  if (channels == 0) {
    nothing_ = true;
    return Status::success();
  }
  if (xType.elementCount() == 0) {
    nothing_ = !gradient();
    zeroParameterGradients_ = gradient();
    return Status::success();
  }
  // cuDNN's kernels index with 32 bits.
  AMPJIT_RETURN_IF_ERROR(checkFitsInt({xType.elementCount()}, label_));
  elementCount_ = xType.elementCount();
  bool forwardEpilogue = !gradient() && activation_ != BatchNormActivation::None;
  staged_ = xType.dtype == DType::BF16 || (xType.dtype == DType::F16 && forwardEpilogue);
  stagedBytes_ = (std::size_t(elementCount_) * sizeof(float) + 255) / 256 * 256;
  if (gradient() && activation_ == BatchNormActivation::Relu)
    reluGradScratchBytes_ = (std::size_t(elementCount_) * dtypeSize(xType.dtype) + 255) / 256 * 256;
  DType dataType = staged_ ? DType::F32 : xType.dtype;

  Expected<cudnnHandle_t> handle = context.cudnnHandle();
  if (!handle)
    return handle.status().withContext(label_);
  handle_ = *handle;

  // Spatial batch norm normalises per index of dimension 1 (NCHW) or of the
  // channel of an NHWC descriptor. Channels-last data of rank >= 3 is NHWC
  // with the middle dimensions as height (the batch stays the batch, which
  // keeps it within cuDNN's batch-size limits); any other axis is
  // [before, channels, after, 1] in NCHW, which for [N, C] is N x C x 1 x 1.
  int64_t before = 1, after = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (int64_t(d) < axis)
      before *= shape[d];
    else if (int64_t(d) > axis)
      after *= shape[d];
  }
  AMPJIT_RETURN_IF_ERROR(data_.create(label_));
  if (shape.size() >= 3 && axis == int64_t(shape.size()) - 1)
    AMPJIT_RETURN_IF_ERROR(setTensor4d(data_, true, dataType, shape[0], channels, before / shape[0], 1, label_));
  else
    AMPJIT_RETURN_IF_ERROR(setTensor4d(data_, false, dataType, before, channels, after, 1, label_));
  AMPJIT_RETURN_IF_ERROR(statistics_.create(label_));
  AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnDeriveBNTensorDescriptor(statistics_.get(), data_.get(), CUDNN_BATCHNORM_SPATIAL),
                               label_ + ": deriving the statistics descriptor");

  bool hasWeight = step.inputs[gradient() ? batch_norm_grad_slot::kWeight : batch_norm_slot::kWeight] != kNoBuffer;
  // The plain backward does not read the bias; the fused one does.
  bool hasBias = gradient() ? activation_ == BatchNormActivation::None ||
                                  step.inputs[batch_norm_grad_slot::kBias] != kNoBuffer
                            : step.inputs[batch_norm_slot::kBias] != kNoBuffer;
  auto fill = [&](DeviceBuffer& buffer, double value) -> Status {
    std::size_t count = std::size_t(channels);
    if (statisticsType == DType::F64) {
      std::vector<double> host(count, value);
      return buffer.upload(host.data(), statisticsBytes_, label_);
    }
    std::vector<float> host(count, float(value));
    return buffer.upload(host.data(), statisticsBytes_, label_);
  };
  if (!hasWeight)
    AMPJIT_RETURN_IF_ERROR(fill(ones_, 1.0));
  if (!hasBias)
    AMPJIT_RETURN_IF_ERROR(fill(zeros_, 0.0));
  return prepareFused(plan, step, state);
}

Status BatchNormStep::prepareFused(const Plan& plan, const Step& step, CudnnPlanState& state) {
  if (activation_ == BatchNormActivation::None || kind_ == StepKind::BatchNormInference ||
      !cudnnFusedBatchNormAllowed())
    return Status::success();
  const TensorType& xType = plan.buffers[step.inputs[gradient() ? batch_norm_grad_slot::kX : batch_norm_slot::kX]].type;
  const Shape& shape = xType.shape;
  int64_t axis = gradient() ? step.as<BatchNormGradParams>().axis : step.as<BatchNormParams>().axis;
  bool addsResidual = activation_ == BatchNormActivation::AddRelu;
  if (xType.dtype != DType::F16 || shape.size() != 4 || axis != 3 || shape[3] % 4 != 0)
    return Status::success();
  std::shared_ptr<BatchNormReserve> reserve;
  if (gradient()) {
    auto found = state.batchNormReserves.find(step.inputs[batch_norm_grad_slot::kSaveMean]);
    if (found == state.batchNormReserves.end() || !found->second->forwardUsesCudnn ||
        found->second->activation != activation_)
      return Status::success();
    reserve = found->second;
  }

  // Plan buffers are dense, so [N, H, W, C] is a fully packed NHWC tensor.
  AMPJIT_RETURN_IF_ERROR(fusedData_.create(label_));
  AMPJIT_RETURN_IF_ERROR(
      setTensor4d(fusedData_, true, DType::F16, shape[0], shape[3], shape[1], shape[2], label_));
  AMPJIT_RETURN_IF_ERROR(fusedStatistics_.create(label_));
  AMPJIT_CUDNN_RETURN_IF_ERROR(
      cudnnDeriveBNTensorDescriptor(fusedStatistics_.get(), fusedData_.get(), CUDNN_BATCHNORM_SPATIAL_PERSISTENT),
      label_ + ": deriving the fused statistics descriptor");
  AMPJIT_RETURN_IF_ERROR(relu_.create(label_));
  // CUDNN_PROPAGATE_NAN: relu(NaN) = NaN, as the plan's relu (`v < 0 ? 0 : v`).
  AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnSetActivationDescriptor(relu_.get(), CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
                               label_ + ": describing the relu");
  operations_ = addsResidual ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  cudnnTensorDescriptor_t residual = addsResidual ? fusedData_.get() : nullptr;
  std::size_t workspace = 0;
  // A size query that fails means cuDNN has no fused kernel for this
  // configuration: the fallback runs instead.
  if (gradient()) {
    if (cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, operations_,
                                                          fusedData_.get(), fusedData_.get(), fusedData_.get(),
                                                          residual, fusedData_.get(), fusedStatistics_.get(),
                                                          relu_.get(), &workspace) != CUDNN_STATUS_SUCCESS)
      return Status::success();
  } else {
    std::size_t reserveBytes = 0;
    if (cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
            handle_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, operations_, fusedData_.get(), residual, fusedData_.get(),
            fusedStatistics_.get(), relu_.get(), &workspace) != CUDNN_STATUS_SUCCESS ||
        cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, operations_,
                                                             relu_.get(), fusedData_.get(),
                                                             &reserveBytes) != CUDNN_STATUS_SUCCESS)
      return Status::success();
    reserve = std::make_shared<BatchNormReserve>();
    reserve->bytes = std::max<std::size_t>(reserveBytes, 1);
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaMalloc(&reserve->space, reserve->bytes),
                                label_ + ": allocating cuDNN's batch-norm reserve space");
    reserve->activation = activation_;
    reserve->eps = eps_;
    reserve->forwardUsesCudnn = true;
    state.batchNormReserves[step.outputs[batch_norm_slot::kSaveMean]] = reserve;
  }
  // cuDNN's fused kernel wants a workspace, not a null pointer, even when it asks for none.
  cudnnWorkspaceBytes_ = (std::max<std::size_t>(workspace, 1) + 255) / 256 * 256;
  reserve_ = std::move(reserve);
  fused_ = true;
  return Status::success();
}

Status BatchNormStep::enqueue(const StepPointers& pointers, cudaStream_t stream) {
  if (nothing_)
    return Status::success();
  if (zeroParameterGradients_) {
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(pointers.outputs[1], 0, statisticsBytes_, stream),
                                label_ + ": zeroing dweight");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(pointers.outputs[2], 0, statisticsBytes_, stream),
                                label_ + ": zeroing dbias");
    return Status::success();
  }
  AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnSetStream(handle_, stream), label_ + ": binding the stream");
  if (fused_ && reserve_->forwardUsesCudnn && !refused_) {
    if (!gradient())
      AMPJIT_RETURN_IF_ERROR(copyRunningStatistics(pointers.inputs, pointers.outputs, stream));
    cudnnStatus_t status = runFused(pointers);
    if (status == CUDNN_STATUS_SUCCESS) {
      confirmed_ = true;
      return Status::success();
    }
    if (status != CUDNN_STATUS_NOT_SUPPORTED || confirmed_)
      return cudnnFailure(status, label_ + " (cuDNN's fused batch norm; AMPJIT_CUDA_FUSED_BN=0 runs the fallback)");
    // Refused on the first run, before anything was launched: this step
    // (and, for a forward, its gradient, which finds no reserve written)
    // takes the fallback from now on. The first run is never captured.
    if (gradient())
      refused_ = true;
    else
      reserve_->forwardUsesCudnn = false;
  }
  return runUnfused(pointers, stream);
}

cudnnStatus_t BatchNormStep::runFused(const StepPointers& pointers) {
  auto orOnes = [&](void* weight) { return weight != nullptr ? weight : ones_.get(); };
  auto orZeros = [&](void* bias) { return bias != nullptr ? bias : zeros_.get(); };
  std::span<void* const> in = pointers.inputs, out = pointers.outputs;
  bool addsResidual = activation_ == BatchNormActivation::AddRelu;
  cudnnTensorDescriptor_t residual = addsResidual ? fusedData_.get() : nullptr;
  if (gradient()) {
    namespace slot = batch_norm_grad_slot;
    return cudnnBatchNormalizationBackwardEx(
        handle_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, operations_, blend_.one(), blend_.zero(), blend_.one(),
        blend_.zero(), fusedData_.get(), in[slot::kX], fusedData_.get(), in[slot::kY], fusedData_.get(),
        in[slot::kDy], residual, addsResidual ? out[slot::kDz] : nullptr, fusedData_.get(), out[slot::kDx],
        fusedStatistics_.get(), orOnes(in[slot::kWeight]), orZeros(in[slot::kBias]), out[slot::kDweight],
        out[slot::kDbias], reserve_->eps, in[slot::kSaveMean], in[slot::kSaveInvstd], relu_.get(),
        pointers.workspace, cudnnWorkspaceBytes_, reserve_->space, reserve_->bytes);
  }
  namespace slot = batch_norm_slot;
  return cudnnBatchNormalizationForwardTrainingEx(
      handle_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, operations_, blend_.one(), blend_.zero(), fusedData_.get(),
      in[slot::kX], residual, addsResidual ? in[slot::kZ] : nullptr, fusedData_.get(), out[slot::kY],
      fusedStatistics_.get(), orOnes(in[slot::kWeight]), orZeros(in[slot::kBias]), momentum_,
      out[slot::kNewRunningMean], out[slot::kNewRunningVar], eps_, out[slot::kSaveMean], out[slot::kSaveInvstd],
      relu_.get(), pointers.workspace, cudnnWorkspaceBytes_, reserve_->space, reserve_->bytes);
}

Status BatchNormStep::runUnfused(const StepPointers& pointers, cudaStream_t stream) {
  std::array<void*, 8> in{}, out{};
  std::copy(pointers.inputs.begin(), pointers.inputs.end(), in.begin());
  std::copy(pointers.outputs.begin(), pointers.outputs.end(), out.begin());
  char* workspace = static_cast<char*>(pointers.workspace);
  if (gradient() && activation_ != BatchNormActivation::None) {
    namespace slot = batch_norm_grad_slot;
    void* g = activation_ == BatchNormActivation::AddRelu ? out[slot::kDz]
                                                           : workspace + (staged_ ? 3 * stagedBytes_ : 0);
    AMPJIT_CUDA_RETURN_IF_ERROR(batchnorm::launchReluGrad(storage_, in[slot::kDy], in[slot::kY], g, elementCount_,
                                                          stream),
                                label_ + ": the relu's gradient");
    in[slot::kDy] = g;
  }
  bool epilogue = !gradient() && activation_ != BatchNormActivation::None;
  const void* residual = activation_ == BatchNormActivation::AddRelu && !gradient() ? in[batch_norm_slot::kZ] : nullptr;
  if (!staged_) {
    AMPJIT_RETURN_IF_ERROR(run(in, out, stream));
    if (epilogue)
      AMPJIT_CUDA_RETURN_IF_ERROR(batchnorm::launchEpilogue(storage_, out[0], residual, out[0], elementCount_, stream),
                                  label_ + ": the relu epilogue");
    return Status::success();
  }
  // The data slots (x; dy and x for the gradient) read f32 copies and y or
  // dx is written to a third one; per-channel slots stay as they are.
  float* first = reinterpret_cast<float*>(workspace);
  float* second = reinterpret_cast<float*>(workspace + stagedBytes_);
  float* result = reinterpret_cast<float*>(workspace + 2 * stagedBytes_);
  std::size_t dataSlots = gradient() ? 2 : 1;
  float* staging[2] = {first, second};
  for (std::size_t slot = 0; slot < dataSlots; ++slot) {
    AMPJIT_CUDA_RETURN_IF_ERROR(batchnorm::launchWidenToF32(storage_, in[slot], staging[slot], elementCount_, stream),
                                label_ + ": widening the data to f32");
    in[slot] = staging[slot];
  }
  void* target = out[0];
  out[0] = result;
  AMPJIT_RETURN_IF_ERROR(run(in, out, stream));
  if (epilogue)
    AMPJIT_CUDA_RETURN_IF_ERROR(batchnorm::launchEpilogue(storage_, result, residual, target, elementCount_, stream),
                                label_ + ": the relu epilogue");
  else
    AMPJIT_CUDA_RETURN_IF_ERROR(batchnorm::launchNarrowFromF32(storage_, result, target, elementCount_, stream),
                                label_ + ": rounding the result");
  return Status::success();
}

Status BatchNormStep::copyRunningStatistics(std::span<void* const> in, std::span<void* const> out,
                                            cudaStream_t stream) {
  for (std::size_t k : {batch_norm_slot::kNewRunningMean, batch_norm_slot::kNewRunningVar})
    if (out[k] != in[k])
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out[k], in[k], statisticsBytes_, cudaMemcpyDeviceToDevice, stream),
                                  label_ + ": copying the running statistics");
  return Status::success();
}

Status BatchNormStep::run(std::span<void* const> in, std::span<void* const> out, cudaStream_t stream) {
  auto orOnes = [&](void* weight) { return weight != nullptr ? weight : ones_.get(); };
  auto orZeros = [&](void* bias) { return bias != nullptr ? bias : zeros_.get(); };

  switch (kind_) {
  case StepKind::BatchNorm: {
    AMPJIT_RETURN_IF_ERROR(copyRunningStatistics(in, out, stream));
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationForwardTraining(
                                     handle_, CUDNN_BATCHNORM_SPATIAL, blend_.one(), blend_.zero(), data_.get(),
                                     in[0], data_.get(), out[0], statistics_.get(), orOnes(in[1]),
                                     orZeros(in[2]), momentum_, out[3], out[4], eps_, out[1], out[2]),
                                 label_);
    return Status::success();
  }
  case StepKind::BatchNormInference:
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationForwardInference(
                                     handle_, CUDNN_BATCHNORM_SPATIAL, blend_.one(), blend_.zero(), data_.get(),
                                     in[0], data_.get(), out[0], statistics_.get(), orOnes(in[1]),
                                     orZeros(in[2]), in[3], in[4], eps_),
                                 label_);
    return Status::success();
  default:
    // The epsilon is unused: save_mean and save_invstd are given. (It must
    // only be a valid value, >= CUDNN_BN_MIN_EPSILON.)
    AMPJIT_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationBackward(
                                     handle_, CUDNN_BATCHNORM_SPATIAL, blend_.one(), blend_.zero(), blend_.one(),
                                     blend_.zero(), data_.get(), in[1], data_.get(), in[0], data_.get(), out[0],
                                     statistics_.get(), orOnes(in[4]), out[1], out[2], 1e-5, in[2], in[3]),
                                 label_);
    return Status::success();
  }
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

class PoolStep final : public DeviceStep {
public:
  PoolStep(const Step& step, pooling::Storage storage, pooling::PoolKind kind, const pooling::PoolGeometry& geometry)
      : label_(labelOf(step)), storage_(storage), kind_(kind), geometry_(geometry),
        gradient_(step.kind == StepKind::MaxPool2dGrad || step.kind == StepKind::AvgPool2dGrad) {}

  std::size_t workspaceBytes() const override {
    return gradient_ ? pooling::poolGradWorkspaceBytes(kind_, geometry_) : 0;
  }

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    if (gradient_)
      AMPJIT_CUDA_RETURN_IF_ERROR(pooling::launchPool2dGrad(storage_, kind_, geometry_, pointers.inputs[0],
                                                            pointers.inputs[1], pointers.outputs[0],
                                                            pointers.workspace, stream),
                                  label_);
    else
      AMPJIT_CUDA_RETURN_IF_ERROR(
          pooling::launchPool2d(storage_, kind_, geometry_, pointers.inputs[0], pointers.outputs[0], stream), label_);
    return Status::success();
  }

private:
  std::string label_;
  pooling::Storage storage_;
  pooling::PoolKind kind_;
  pooling::PoolGeometry geometry_;
  bool gradient_;
};

std::unique_ptr<DeviceStep> makePoolStep(const Plan& plan, const Step& step) {
  const Pool2dParams& params = step.as<Pool2dParams>();
  bool gradient = step.kind == StepKind::MaxPool2dGrad || step.kind == StepKind::AvgPool2dGrad;
  const TensorType& x = plan.buffers[step.inputs[gradient ? 1 : 0]].type;
  const Shape& y = gradient ? plan.buffers[step.inputs[0]].type.shape : plan.buffers[step.outputs[0]].type.shape;
  ActivationDims a = activationDims(params.nhwc);
  pooling::PoolGeometry geometry;
  geometry.batch = x.shape[size_t(a.batch)];
  geometry.channels = x.shape[size_t(a.channel)];
  geometry.height = x.shape[size_t(a.height)];
  geometry.width = x.shape[size_t(a.width)];
  geometry.outHeight = y[size_t(a.height)];
  geometry.outWidth = y[size_t(a.width)];
  geometry.kernelH = params.kernel[0];
  geometry.kernelW = params.kernel[1];
  geometry.strideH = params.stride[0];
  geometry.strideW = params.stride[1];
  geometry.padH = params.padding[0];
  geometry.padW = params.padding[1];
  geometry.countIncludePad = params.countIncludePad;
  geometry.nhwc = params.nhwc;
  geometry.wideIndex = wideIndexArithmeticForced();
  bool isMax = step.kind == StepKind::MaxPool2d || step.kind == StepKind::MaxPool2dGrad;
  return std::make_unique<PoolStep>(step, poolingStorageOf(x.dtype),
                                    isMax ? pooling::PoolKind::Max : pooling::PoolKind::Average, geometry);
}

} // namespace

bool callsCudnn(StepKind kind) {
  switch (kind) {
  case StepKind::Conv2d:
  case StepKind::Conv2dGradInput:
  case StepKind::Conv2dGradWeight:
  case StepKind::BatchNorm:
  case StepKind::BatchNormInference:
  case StepKind::BatchNormGrad: return true;
  default: return false;
  }
}

bool runsThroughCudnn(StepKind kind) {
  if (callsCudnn(kind))
    return true;
  switch (kind) {
  case StepKind::MaxPool2d:
  case StepKind::MaxPool2dGrad:
  case StepKind::AvgPool2d:
  case StepKind::AvgPool2dGrad: return true;
  default: return false;
  }
}

Expected<std::unique_ptr<DeviceStep>> makeCudnnStep(DeviceContext& context, const Plan& plan, const Step& step,
                                                    CudnnPlanState& state) {
  switch (step.kind) {
  case StepKind::Conv2d:
  case StepKind::Conv2dGradInput:
  case StepKind::Conv2dGradWeight: {
    auto convolution = std::make_unique<ConvolutionStep>(step, step.computeType == DType::F64);
    AMPJIT_RETURN_IF_ERROR(convolution->prepare(context, plan, step));
    return std::unique_ptr<DeviceStep>(std::move(convolution));
  }
  case StepKind::BatchNorm:
  case StepKind::BatchNormInference:
  case StepKind::BatchNormGrad: {
    auto batchNorm = std::make_unique<BatchNormStep>(step, step.computeType == DType::F64);
    AMPJIT_RETURN_IF_ERROR(batchNorm->prepare(context, plan, step, state));
    return std::unique_ptr<DeviceStep>(std::move(batchNorm));
  }
  case StepKind::MaxPool2d:
  case StepKind::MaxPool2dGrad:
  case StepKind::AvgPool2d:
  case StepKind::AvgPool2dGrad: return makePoolStep(plan, step);
  default: return Status::error(labelOf(step) + ": not a convolution, batch norm or pooling step");
  }
}

} // namespace ampjit::runtime::cuda
