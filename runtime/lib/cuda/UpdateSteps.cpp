// Plan steps on the update kernels (UpdateKernels.h): the loss-scaler steps,
// the optimizer updates (one step, or consecutive steps as one multi-tensor
// launch) and the layout kinds. Everything about shapes, dtypes and hazards
// is settled here at prepare time; enqueue only fills pointer tables and
// launches.

#include "DeviceStep.h"
#include "FiniteCheckSchedule.h"
#include "UpdateKernels.h"

#include "ampjit/runtime/Backend.h"

#include <algorithm>
#include <cstring>
#include <optional>

namespace ampjit::runtime::cuda {

namespace {

static_assert(int(DType::F32) == int(update::ElementType::F32) && int(DType::F64) == int(update::ElementType::F64) &&
                  int(DType::F16) == int(update::ElementType::F16) &&
                  int(DType::BF16) == int(update::ElementType::BF16) &&
                  int(DType::I64) == int(update::ElementType::I64) && int(DType::I1) == int(update::ElementType::I1),
              "update::ElementType mirrors DType");

update::ElementType elementType(DType dtype) { return update::ElementType(int(dtype)); }

const TensorType& typeOf(const Plan& plan, BufferId id) { return plan.buffers[id].type; }

std::string stepName(const Step& step) {
  return std::string(stepKindName(step.kind)) + (step.origin.empty() ? "" : " (" + step.origin + ")");
}

Status wrongPointerCount(const Step& step) {
  return Status::error(stepName(step) + ": enqueued with the wrong number of buffers");
}

std::unique_ptr<DeviceStep> upcast(std::unique_ptr<DeviceStep> step) { return step; }

//===----------------------------------------------------------------------===//
// Loss scaler
//===----------------------------------------------------------------------===//

class ScaleLossStep final : public DeviceStep {
public:
  ScaleLossStep(const Plan& plan, const Step& step)
      : step_(step), type_(elementType(typeOf(plan, step.inputs[0]).dtype)),
        computeF64_(step.computeType == DType::F64) {}

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    if (pointers.inputs.size() != 2 || pointers.outputs.size() != 1)
      return wrongPointerCount(step_);
    AMPJIT_CUDA_RETURN_IF_ERROR(update::launchScaleLoss(pointers.inputs[0], pointers.outputs[0], type_,
                                                        static_cast<const float*>(pointers.inputs[1]),
                                                        computeF64_, stream),
                                stepName(step_));
    return Status::success();
  }

private:
  Step step_;
  update::ElementType type_;
  bool computeF64_;
};

class AllFiniteStep final : public DeviceStep {
public:
  /// With `withQuotient`, the step is followed in its launch by the division
  /// finiteCheckTakesQuotient allows, whose two inputs and output come after
  /// the check's in the StepPointers.
  AllFiniteStep(const Plan& plan, const Step& step, bool withQuotient = false)
      : step_(step), withQuotient_(withQuotient), evictFirst_(evictFirstHints()) {
    for (BufferId id : step.inputs)
      tensors_.push_back({nullptr, typeOf(plan, id).elementCount(), elementType(typeOf(plan, id).dtype)});
  }

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    std::size_t inputs = tensors_.size() + (withQuotient_ ? 2 : 0), outputs = withQuotient_ ? 2 : 1;
    if (pointers.inputs.size() != inputs || pointers.outputs.size() != outputs)
      return wrongPointerCount(step_);
    for (size_t k = 0; k < tensors_.size(); ++k)
      tensors_[k].data = pointers.inputs[k];
    std::optional<update::ScalarQuotient> quotient;
    if (withQuotient_)
      quotient = update::ScalarQuotient{static_cast<const float*>(pointers.inputs[tensors_.size()]),
                                        static_cast<const float*>(pointers.inputs[tensors_.size() + 1]),
                                        static_cast<float*>(pointers.outputs[1])};
    AMPJIT_CUDA_RETURN_IF_ERROR(update::launchAllFinite(tensors_.data(), tensors_.size(),
                                                        static_cast<uint8_t*>(pointers.outputs[0]), evictFirst_, stream,
                                                        quotient ? &*quotient : nullptr),
                                stepName(step_));
    return Status::success();
  }

private:
  Step step_;
  bool withQuotient_;
  bool evictFirst_;
  /// Types and counts fixed at prepare; pointers filled per enqueue.
  std::vector<update::FiniteCheckTensor> tensors_;
};

class UnscaleAndCheckStep final : public DeviceStep {
public:
  UnscaleAndCheckStep(const Plan& plan, const Step& step)
      : step_(step), computeF64_(step.computeType == DType::F64) {
    for (size_t k = 1; k < step.inputs.size(); ++k) {
      const TensorType& type = typeOf(plan, step.inputs[k]);
      tensors_.push_back({nullptr, nullptr, type.elementCount(), elementType(type.dtype)});
    }
  }

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    if (pointers.inputs.size() != tensors_.size() + 1 || pointers.outputs.size() != tensors_.size() + 1)
      return wrongPointerCount(step_);
    for (size_t k = 0; k < tensors_.size(); ++k) {
      tensors_[k].in = pointers.inputs[k + 1];
      tensors_[k].out = pointers.outputs[k];
    }
    AMPJIT_CUDA_RETURN_IF_ERROR(update::launchUnscaleAndCheck(static_cast<const float*>(pointers.inputs[0]),
                                                              tensors_.data(), tensors_.size(),
                                                              static_cast<uint8_t*>(pointers.outputs.back()),
                                                              computeF64_, stream),
                                stepName(step_));
    return Status::success();
  }

private:
  Step step_;
  bool computeF64_;
  std::vector<update::UnscaleTensor> tensors_;
};

update::UpdateScaleConfig updateScaleConfig(const Step& step) {
  const UpdateScaleParams& params = step.as<UpdateScaleParams>();
  return {params.growthFactor, params.backoffFactor, params.growthInterval, params.backoffInterval,
          params.minScale, params.maxScale};
}

/// An UpdateScale step's buffers: inputs (scale, good, bad, skipped steps,
/// found finite), outputs (the new scale and counts).
constexpr std::size_t kUpdateScaleInputs = 5, kUpdateScaleOutputs = 4;
update::UpdateScalePointers updateScalePointers(std::span<void* const> in, std::span<void* const> out) {
  return {static_cast<const float*>(in[0]),   static_cast<const int64_t*>(in[1]),
          static_cast<const int64_t*>(in[2]), static_cast<const int64_t*>(in[3]),
          static_cast<const uint8_t*>(in[4]), static_cast<float*>(out[0]),
          static_cast<int64_t*>(out[1]),      static_cast<int64_t*>(out[2]),
          static_cast<int64_t*>(out[3])};
}

class UpdateScaleStep final : public DeviceStep {
public:
  explicit UpdateScaleStep(const Step& step) : step_(step), config_(updateScaleConfig(step)) {}

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    if (pointers.inputs.size() != kUpdateScaleInputs || pointers.outputs.size() != kUpdateScaleOutputs)
      return wrongPointerCount(step_);
    AMPJIT_CUDA_RETURN_IF_ERROR(
        update::launchUpdateScale(config_, updateScalePointers(pointers.inputs, pointers.outputs), stream),
        stepName(step_));
    return Status::success();
  }

private:
  Step step_;
  update::UpdateScaleConfig config_{};
};

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

/// The slot positions of one optimizer's step layout.
struct OptimizerSlots {
  size_t inputs, outputs;
  size_t param, grad, state0, state1, state2, step, lr, invScale, predicate, copy;
  size_t newParam, newState0, newState1, newState2, newCopy;
  static constexpr size_t kNone = size_t(-1);

  static OptimizerSlots of(const Step& step) {
    if (step.as<OptimizerParams>().optimizer == OptimizerKind::Adam) {
      using namespace adam_slot;
      return {.inputs = kInputs, .outputs = kOutputs, .param = kParam, .grad = kGrad, .state0 = kExpAvg,
              .state1 = kExpAvgSq, .state2 = kMaxExpAvgSq, .step = kStep, .lr = kLr, .invScale = kInvScale,
              .predicate = kPredicate, .copy = kParamCopy, .newParam = kNewParam, .newState0 = kNewExpAvg,
              .newState1 = kNewExpAvgSq, .newState2 = kNewMaxExpAvgSq, .newCopy = kNewParamCopy};
    }
    using namespace sgd_slot;
    return {.inputs = kInputs, .outputs = kOutputs, .param = kParam, .grad = kGrad, .state0 = kMomentumBuffer,
            .state1 = kNone, .state2 = kNone, .step = kStep, .lr = kLr, .invScale = kInvScale,
            .predicate = kPredicate, .copy = kParamCopy, .newParam = kNewParam, .newState0 = kNewMomentumBuffer,
            .newState1 = kNone, .newState2 = kNone, .newCopy = kNewParamCopy};
  }
};

/// Whether running two steps in one launch (elements in any order) could
/// differ from running them one after the other: one writes what the other
/// reads or writes.
bool stepsConflict(const Plan& plan, const Step& a, const Step& b) {
  auto writesInto = [&](const Step& writer, const Step& other) {
    for (BufferId out : writer.outputs) {
      for (BufferId in : other.inputs)
        if (sameMemory(plan, out, in))
          return true;
      for (BufferId otherOut : other.outputs)
        if (sameMemory(plan, out, otherOut))
          return true;
    }
    return false;
  };
  return writesInto(a, b) || writesInto(b, a);
}

class OptimizerGroupStep final : public DeviceStep {
public:
  /// `steps` verified by makeOptimizerGroupStep: updates, then possibly the
  /// step's UpdateScale.
  OptimizerGroupStep(const Plan& plan, std::span<const Step* const> steps)
      : origin_(stepName(*steps.front())), slots_(OptimizerSlots::of(*steps.front())) {
    if (steps.back()->kind == StepKind::UpdateScale) {
      scaleConfig_ = updateScaleConfig(*steps.back());
      steps = steps.first(steps.size() - 1);
    }
    const Step& first = *steps.front();
    const OptimizerParams& params = first.as<OptimizerParams>();
    config_.adam = params.optimizer == OptimizerKind::Adam;
    config_.computeF64 = first.computeType == DType::F64;
    config_.momentum = params.momentum;
    config_.dampening = params.dampening;
    config_.nesterov = params.nesterov;
    config_.beta1 = params.beta1;
    config_.beta2 = params.beta2;
    config_.eps = params.eps;
    config_.decoupledWeightDecay = params.decoupledWeightDecay;
    config_.weightDecay = params.weightDecay;
    config_.maximize = params.maximize;
    config_.paramType = elementType(typeOf(plan, first.inputs[slots_.param]).dtype);
    config_.copyType = update::ElementType::F16; // unread unless a step has a copy
    config_.evictFirst = evictFirstHints();
    config_.vectorize = vectorUpdates();
    for (const Step* step : steps)
      if (BufferId copy = step->inputs[slots_.copy]; copy != kNoBuffer)
        config_.copyType = elementType(typeOf(plan, copy).dtype);

    // Split into launches whose steps touch disjoint memory, so that one
    // launch's arbitrary element order equals the plan's step order.
    std::vector<size_t> current;
    for (size_t k = 0; k < steps.size(); ++k) {
      counts_.push_back(typeOf(plan, steps[k]->inputs[slots_.param]).elementCount());
      gradTypes_.push_back(elementType(typeOf(plan, steps[k]->inputs[slots_.grad]).dtype));
      bool conflict = std::any_of(current.begin(), current.end(),
                                  [&](size_t j) { return stepsConflict(plan, *steps[j], *steps[k]); });
      if (conflict) {
        launches_.push_back(std::move(current));
        current.clear();
      }
      current.push_back(k);
    }
    launches_.push_back(std::move(current));
    tensors_.resize(steps.size());
  }

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    std::size_t inputs = counts_.size() * slots_.inputs, outputs = counts_.size() * slots_.outputs;
    if (pointers.inputs.size() != inputs + (scaleConfig_ ? kUpdateScaleInputs : 0) ||
        pointers.outputs.size() != outputs + (scaleConfig_ ? kUpdateScaleOutputs : 0))
      return Status::error(origin_ + ": enqueued with the wrong number of buffers");
    std::optional<update::ScaleUpdate> scaleUpdate;
    if (scaleConfig_)
      scaleUpdate = update::ScaleUpdate{
          *scaleConfig_, updateScalePointers(pointers.inputs.subspan(inputs), pointers.outputs.subspan(outputs))};
    for (const std::vector<size_t>& launch : launches_) {
      for (size_t n = 0; n < launch.size(); ++n) {
        size_t k = launch[n];
        std::span<void* const> in = pointers.inputs.subspan(k * slots_.inputs, slots_.inputs);
        std::span<void* const> out = pointers.outputs.subspan(k * slots_.outputs, slots_.outputs);
        auto input = [&](size_t slot) -> const void* { return slot == OptimizerSlots::kNone ? nullptr : in[slot]; };
        auto output = [&](size_t slot) -> void* { return slot == OptimizerSlots::kNone ? nullptr : out[slot]; };
        tensors_[n] = {.param = input(slots_.param),
                       .grad = input(slots_.grad),
                       .state0 = input(slots_.state0),
                       .state1 = input(slots_.state1),
                       .state2 = input(slots_.state2),
                       .copy = input(slots_.copy),
                       .newParam = output(slots_.newParam),
                       .newState0 = output(slots_.newState0),
                       .newState1 = output(slots_.newState1),
                       .newState2 = output(slots_.newState2),
                       .newCopy = output(slots_.newCopy),
                       .count = counts_[k],
                       .gradType = gradTypes_[k]};
      }
      // The scalars are the same buffers for every step of the group.
      std::span<void* const> in = pointers.inputs.subspan(launch.front() * slots_.inputs, slots_.inputs);
      update::OptimizerScalars scalars{static_cast<const int64_t*>(in[slots_.step]),
                                       static_cast<const float*>(in[slots_.lr]),
                                       static_cast<const float*>(in[slots_.invScale]),
                                       static_cast<const uint8_t*>(in[slots_.predicate]),
                                       pointers.gradientsFinite};
      bool last = &launch == &launches_.back();
      AMPJIT_CUDA_RETURN_IF_ERROR(update::launchOptimizer(config_, scalars, tensors_.data(), launch.size(), stream,
                                                          last && scaleUpdate ? &*scaleUpdate : nullptr),
                                  origin_);
    }
    return Status::success();
  }

private:
  std::string origin_;
  OptimizerSlots slots_;
  update::OptimizerConfig config_{};
  /// Elements and gradient dtype per step.
  std::vector<int64_t> counts_;
  std::vector<update::ElementType> gradTypes_;
  /// Step indices per launch (each then chunked by the launcher).
  std::vector<std::vector<size_t>> launches_;
  std::vector<update::OptimizerTensor> tensors_;
  /// A trailing UpdateScale step's configuration: its last launch runs it.
  std::optional<update::UpdateScaleConfig> scaleConfig_;
};

/// Consecutive conversions (an O1 step's parameter casts) in one launch.
class ConvertGroupStep final : public DeviceStep {
public:
  /// `steps` verified by makeLaunchGroupStep.
  ConvertGroupStep(const Plan& plan, std::span<const Step* const> steps)
      : origin_(stepName(*steps.front())),
        from_(elementType(typeOf(plan, steps.front()->inputs[0]).dtype)),
        to_(elementType(typeOf(plan, steps.front()->outputs[0]).dtype)) {
    for (const Step* step : steps)
      counts_.push_back(typeOf(plan, step->outputs[0]).elementCount());
    tensors_.resize(steps.size());
  }

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    if (pointers.inputs.size() != counts_.size() || pointers.outputs.size() != counts_.size())
      return Status::error(origin_ + ": enqueued with the wrong number of buffers");
    for (size_t k = 0; k < counts_.size(); ++k)
      tensors_[k] = {pointers.inputs[k], pointers.outputs[k], counts_[k]};
    AMPJIT_CUDA_RETURN_IF_ERROR(update::launchConvert(from_, to_, tensors_.data(), tensors_.size(), stream), origin_);
    return Status::success();
  }

private:
  std::string origin_;
  update::ElementType from_, to_;
  std::vector<int64_t> counts_;
  std::vector<update::ConvertTensor> tensors_;
};

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

class ReshapeStep final : public DeviceStep {
public:
  ReshapeStep(const Plan& plan, const Step& step) : step_(step), bytes_(size_t(typeOf(plan, step.outputs[0]).byteSize())) {}

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    if (pointers.inputs.size() != 1 || pointers.outputs.size() != 1)
      return wrongPointerCount(step_);
    // Codegen may give a reshape its input's own buffer: then nothing moves.
    if (bytes_ == 0 || pointers.inputs[0] == pointers.outputs[0])
      return Status::success();
    AMPJIT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(pointers.outputs[0], pointers.inputs[0], bytes_, cudaMemcpyDeviceToDevice, stream),
        stepName(step_));
    return Status::success();
  }

private:
  Step step_;
  size_t bytes_;
};

/// Output dims and per-output-dim input strides with size-1 dimensions
/// dropped and runs that are contiguous in the input merged, so any rank
/// whose movement needs at most kMaxLayoutRank dimensions runs.
Expected<update::StridedCopyShape> collapse(const Shape& dims, const std::vector<int64_t>& strides) {
  std::vector<int64_t> d, s;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 1)
      continue;
    if (!d.empty() && s.back() == strides[k] * dims[k]) {
      d.back() *= dims[k];
      s.back() = strides[k];
      continue;
    }
    d.push_back(dims[k]);
    s.push_back(strides[k]);
  }
  if (d.size() > size_t(update::kMaxLayoutRank))
    return Status::error("needs " + std::to_string(d.size()) + " strided dimensions; the kernel handles " +
                         std::to_string(update::kMaxLayoutRank));
  update::StridedCopyShape shape{};
  shape.rank = int32_t(d.size());
  shape.wideIndex = wideIndexArithmeticForced();
  for (size_t k = 0; k < d.size(); ++k) {
    shape.dims[k] = d[k];
    shape.inStrides[k] = s[k];
  }
  return shape;
}

class StridedCopyStep final : public DeviceStep {
public:
  StridedCopyStep(const Step& step, const TensorType& out, update::StridedCopyShape shape)
      : step_(step), count_(out.elementCount()), elementBytes_(int32_t(dtypeSize(out.dtype))), shape_(shape) {}

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    if (pointers.inputs.size() != 1 || pointers.outputs.size() != 1)
      return wrongPointerCount(step_);
    AMPJIT_CUDA_RETURN_IF_ERROR(
        update::launchStridedCopy(pointers.inputs[0], pointers.outputs[0], count_, elementBytes_, shape_, stream),
        stepName(step_));
    return Status::success();
  }

private:
  Step step_;
  int64_t count_;
  int32_t elementBytes_;
  update::StridedCopyShape shape_;
};

/// A BroadcastTo or Transpose step's copy: output dims and the input stride
/// each walks, collapsed.
Expected<update::StridedCopyShape> stridedCopyShapeOf(const Plan& plan, const Step& step) {
  const TensorType &in = typeOf(plan, step.inputs[0]), &out = typeOf(plan, step.outputs[0]);
  std::vector<int64_t> strides;
  if (step.kind == StepKind::BroadcastTo) {
    strides = broadcastStrides(in.shape, out.shape);
  } else {
    std::vector<int64_t> inStrides = contiguousStrides(in.shape);
    for (int64_t dim : step.as<TransposeParams>().perm)
      strides.push_back(inStrides[size_t(dim)]);
  }
  Expected<update::StridedCopyShape> shape = collapse(out.shape, strides);
  if (!shape)
    return Status::error(stepName(step) + ": " + shape.message());
  return shape;
}

/// Consecutive transposes as one multi-tensor launch (canShareCopyLaunch).
class StridedCopyGroupStep final : public DeviceStep {
public:
  /// `steps` verified by makeLaunchGroupStep.
  StridedCopyGroupStep(const Plan& plan, std::span<const Step* const> steps, std::vector<update::StridedCopyShape> shapes)
      : origin_(stepName(*steps.front())), elementBytes_(int32_t(dtypeSize(typeOf(plan, steps.front()->outputs[0]).dtype))) {
    for (size_t k = 0; k < steps.size(); ++k) {
      update::StridedCopyTensor tensor{};
      tensor.count = typeOf(plan, steps[k]->outputs[0]).elementCount();
      tensor.rank = shapes[k].rank;
      for (int d = 0; d < shapes[k].rank; ++d) {
        tensor.dims[d] = shapes[k].dims[d];
        tensor.inStrides[d] = shapes[k].inStrides[d];
      }
      tensors_.push_back(tensor);
    }
  }

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    if (pointers.inputs.size() != tensors_.size() || pointers.outputs.size() != tensors_.size())
      return Status::error(origin_ + ": enqueued with the wrong number of buffers");
    for (size_t k = 0; k < tensors_.size(); ++k) {
      tensors_[k].in = pointers.inputs[k];
      tensors_[k].out = pointers.outputs[k];
    }
    AMPJIT_CUDA_RETURN_IF_ERROR(update::launchStridedCopies(elementBytes_, tensors_.data(), tensors_.size(), stream),
                                origin_);
    return Status::success();
  }

private:
  std::string origin_;
  int32_t elementBytes_;
  std::vector<update::StridedCopyTensor> tensors_;
};

class ConstantStep final : public DeviceStep {
public:
  ConstantStep(const Step& step, const TensorType& out)
      : step_(step), count_(out.elementCount()), elementBytes_(int32_t(dtypeSize(out.dtype))) {}
  ~ConstantStep() override {
    if (data_ != nullptr)
      cudaFree(data_);
  }
  ConstantStep(const ConstantStep&) = delete;
  ConstantStep& operator=(const ConstantStep&) = delete;

  /// A splat is filled at run time; full data is uploaded once, here.
  Status prepare() {
    const std::vector<uint8_t>& data = step_.as<ConstantParams>().data;
    if (count_ == 0)
      return Status::success();
    if (data.size() == size_t(elementBytes_)) {
      std::memcpy(&splatBits_, data.data(), data.size());
      return Status::success();
    }
    bytes_ = data.size();
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaMalloc(&data_, bytes_), stepName(step_) + ": constant data");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpy(data_, data.data(), bytes_, cudaMemcpyHostToDevice),
                                stepName(step_) + ": constant data");
    // From pageable memory cudaMemcpy may return before its DMA on the
    // default stream lands, and runs enqueue on a non-blocking stream that
    // does not wait for the default one: wait here, at prepare.
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr), stepName(step_) + ": constant data");
    return Status::success();
  }

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    if (!pointers.inputs.empty() || pointers.outputs.size() != 1)
      return wrongPointerCount(step_);
    if (count_ == 0)
      return Status::success();
    if (data_ != nullptr)
      AMPJIT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(pointers.outputs[0], data_, bytes_, cudaMemcpyDeviceToDevice, stream), stepName(step_));
    else
      AMPJIT_CUDA_RETURN_IF_ERROR(update::launchFill(pointers.outputs[0], count_, elementBytes_, splatBits_, stream),
                                  stepName(step_));
    return Status::success();
  }

private:
  Step step_;
  int64_t count_;
  int32_t elementBytes_;
  uint64_t splatBits_ = 0; // little-endian: the element's bytes are the low ones
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

} // namespace

bool sameMemory(const Plan& plan, BufferId a, BufferId b) {
  if (a == kNoBuffer || b == kNoBuffer)
    return false;
  // A view of an argument, constant or carried buffer is that buffer's memory.
  if (plan.buffers[a].viewOf >= 0)
    a = BufferId(plan.buffers[a].viewOf);
  if (plan.buffers[b].viewOf >= 0)
    b = BufferId(plan.buffers[b].viewOf);
  if (a == b)
    return true;
  const BufferDesc &x = plan.buffers[a], &y = plan.buffers[b];
  if (x.role != BufferRole::Temporary || y.role != BufferRole::Temporary)
    return false;
  uint64_t xEnd = x.arenaOffset + uint64_t(x.type.byteSize()), yEnd = y.arenaOffset + uint64_t(y.type.byteSize());
  return x.arenaOffset < yEnd && y.arenaOffset < xEnd;
}


bool runsAsUpdateKernel(StepKind kind) {
  switch (kind) {
  case StepKind::ScaleLoss:
  case StepKind::AllFinite:
  case StepKind::UnscaleAndCheck:
  case StepKind::UpdateScale:
  case StepKind::OptimizerUpdate:
  case StepKind::BroadcastTo:
  case StepKind::Reshape:
  case StepKind::Transpose:
  case StepKind::Constant: return true;
  default: return false;
  }
}

Expected<std::unique_ptr<DeviceStep>> makeUpdateStep(DeviceContext& context, const Plan& plan, const Step& step) {
  switch (step.kind) {
  case StepKind::ScaleLoss: return upcast(std::make_unique<ScaleLossStep>(plan, step));
  case StepKind::AllFinite: return upcast(std::make_unique<AllFiniteStep>(plan, step));
  case StepKind::UnscaleAndCheck: return upcast(std::make_unique<UnscaleAndCheckStep>(plan, step));
  case StepKind::UpdateScale: return upcast(std::make_unique<UpdateScaleStep>(step));
  case StepKind::OptimizerUpdate: {
    const Step* steps[] = {&step};
    return makeOptimizerGroupStep(context, plan, steps);
  }
  case StepKind::Reshape: return upcast(std::make_unique<ReshapeStep>(plan, step));
  case StepKind::BroadcastTo:
  case StepKind::Transpose: {
    Expected<update::StridedCopyShape> shape = stridedCopyShapeOf(plan, step);
    if (!shape)
      return shape.status();
    return upcast(std::make_unique<StridedCopyStep>(step, typeOf(plan, step.outputs[0]), *shape));
  }
  case StepKind::Constant: {
    auto constant = std::make_unique<ConstantStep>(step, typeOf(plan, step.outputs[0]));
    AMPJIT_RETURN_IF_ERROR(constant->prepare());
    return upcast(std::move(constant));
  }
  default: return Status::error("no CUDA update kernel runs " + stepName(step) + " steps");
  }
}

namespace {

/// Whether `next` can use `first`'s launch configuration: same parameters
/// and compute type, the same slots present with the same dtypes (but for the
/// gradient's dtype and the param_copy's presence, which are per tensor), and
/// the same shared scalars (step, lr, inv_scale, predicate).
bool sameOptimizerConfiguration(const Plan& plan, const Step& first, const Step& next) {
  if (first.kind != StepKind::OptimizerUpdate || next.kind != StepKind::OptimizerUpdate)
    return false;
  if (first.params != next.params || first.computeType != next.computeType ||
      first.inputs.size() != next.inputs.size() || first.outputs.size() != next.outputs.size())
    return false;
  OptimizerSlots slots = OptimizerSlots::of(first);
  if (first.inputs.size() != slots.inputs || first.outputs.size() != slots.outputs)
    return false;
  // The gradient's dtype is per tensor, and so is having a param_copy (with
  // the one copy dtype); every other slot must match in presence and dtype.
  auto sameSlots = [&](const std::vector<BufferId>& a, const std::vector<BufferId>& b, size_t grad, size_t copy) {
    for (size_t k = 0; k < a.size(); ++k) {
      if (k == grad)
        continue;
      bool present = a[k] != kNoBuffer, nextPresent = b[k] != kNoBuffer;
      if (present != nextPresent && k != copy)
        return false;
      if (present && nextPresent && typeOf(plan, a[k]).dtype != typeOf(plan, b[k]).dtype)
        return false;
    }
    return true;
  };
  if (!sameSlots(first.inputs, next.inputs, slots.grad, slots.copy) ||
      !sameSlots(first.outputs, next.outputs, OptimizerSlots::kNone, slots.newCopy))
    return false;
  for (size_t slot : {slots.step, slots.lr, slots.invScale, slots.predicate})
    if (first.inputs[slot] != next.inputs[slot])
      return false;
  return true;
}

/// Whether `step`'s param_copy, if it has one, has the dtype of the group's
/// copies so far (`copy`, which the first copy sets).
bool sameCopyDType(const Plan& plan, std::optional<DType>& copy, const Step& step) {
  BufferId id = step.inputs[OptimizerSlots::of(step).copy];
  if (id == kNoBuffer)
    return true;
  if (!copy)
    copy = typeOf(plan, id).dtype;
  return *copy == typeOf(plan, id).dtype;
}

} // namespace

bool canShareOptimizerLaunch(const Plan& plan, const Step& first, const Step& next) {
  return sameOptimizerConfiguration(plan, first, next) && !stepsConflict(plan, first, next);
}

std::optional<std::pair<DType, DType>> plainConversion(const Plan& plan, const Step& step) {
  if (step.kind != StepKind::Elementwise || step.as<ElementwiseParams>().op != ElementwiseOp::Convert ||
      step.inputs.size() != 1 || step.outputs.size() != 1 || step.computeType != DType::F32)
    return std::nullopt;
  const TensorType &from = typeOf(plan, step.inputs[0]), &to = typeOf(plan, step.outputs[0]);
  auto floating = [](DType dtype) { return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16; };
  // Widening is exact; narrowing from f32 rounds once, as the generated
  // kernel's convert (compute f32) does.
  if (!floating(from.dtype) || !floating(to.dtype) || from.dtype == to.dtype || from.shape != to.shape)
    return std::nullopt;
  return std::pair{from.dtype, to.dtype};
}

bool canShareConvertLaunch(const Plan& plan, const Step& first, const Step& next) {
  std::optional<std::pair<DType, DType>> dtypes = plainConversion(plan, first);
  return dtypes && dtypes == plainConversion(plan, next) && !stepsConflict(plan, first, next);
}

bool canShareCopyLaunch(const Plan& plan, const Step& first, const Step& next) {
  auto groups = [&](const Step& step) {
    if (step.kind != StepKind::Transpose || step.inputs.size() != 1 || step.outputs.size() != 1)
      return false;
    Expected<update::StridedCopyShape> shape = stridedCopyShapeOf(plan, step);
    return shape && update::groupsStridedCopy(typeOf(plan, step.outputs[0]).elementCount(), *shape);
  };
  return groups(first) && groups(next) &&
         dtypeSize(typeOf(plan, first.outputs[0]).dtype) == dtypeSize(typeOf(plan, next.outputs[0]).dtype) &&
         !stepsConflict(plan, first, next);
}

bool finiteCheckTakesQuotient(const Plan& plan, std::size_t index) {
  if (index + 1 >= plan.steps.size())
    return false;
  const Step &check = plan.steps[index], &division = plan.steps[index + 1];
  if (check.kind != StepKind::AllFinite || division.kind != StepKind::Elementwise ||
      division.as<ElementwiseParams>().op != ElementwiseOp::Div || division.inputs.size() != 2 ||
      division.outputs.size() != 1)
    return false;
  for (const std::vector<BufferId>* ids : {&division.inputs, &division.outputs})
    for (BufferId id : *ids)
      if (id == kNoBuffer || typeOf(plan, id) != TensorType{DType::F32, {}})
        return false;
  // A check split over the side stream runs apart (CudaBackend's split).
  return !stepsConflict(plan, check, division) && !scheduleFiniteCheck(plan, index);
}

namespace {

/// Whether the UpdateScale step at `end` can run in the launch of the
/// updates [begin, end): it writes nothing they read or write, and they
/// write nothing it reads (the found-finite flag they also read is only read).
bool scaleUpdateJoins(const Plan& plan, std::size_t begin, std::size_t end) {
  if (end >= plan.steps.size() || plan.steps[end].kind != StepKind::UpdateScale)
    return false;
  for (std::size_t k = begin; k < end; ++k)
    if (plan.steps[k].kind != StepKind::OptimizerUpdate || stepsConflict(plan, plan.steps[k], plan.steps[end]))
      return false;
  return true;
}

} // namespace

std::vector<std::pair<std::size_t, std::size_t>> launchGroups(const Plan& plan) {
  std::vector<std::size_t> deadlines = deferredStepDeadlines(plan);
  const std::size_t deferred = plan.deferredSteps;
  auto parameterElements = [&](std::size_t index) {
    return plan.buffers[plan.steps[index].inputs[0]].type.elementCount();
  };
  // A side step runs on its own stream: it is a launch of its own, but for
  // a widened bias gradient, whose two steps go beside together (one join),
  // and the steps of a launch are never split around one (they go one by
  // one).
  std::vector<bool> isSide = sideStepMask(plan);
  std::vector<std::size_t> joinOf(plan.steps.size(), 0);
  for (const SideStep& side : plan.sideSteps)
    if (side.step < plan.steps.size())
      joinOf[side.step] = side.joinBefore;
  std::vector<std::pair<std::size_t, std::size_t>> groups;
  for (std::size_t index = 0; index < plan.steps.size();) {
    std::size_t end = index + 1;
    if (isSide[index]) {
      if (end < plan.steps.size() && isSide[end] && joinOf[end] == joinOf[index] && widenedReductionAt(plan, index))
        ++end;
      groups.emplace_back(index, end);
      index = end;
      continue;
    }
    std::size_t head = index >= deferred ? classificationHeadLength(plan, index) : 0;
    if (head == 0 && index >= deferred)
      head = mseHeadLength(plan, index);
    if (head > 0) {
      end = index + head;
    } else if ((index < deferred) == (index + 1 < deferred) &&
               (widenedReductionAt(plan, index) || columnSummedElementwiseAt(plan, index))) {
      end = index + 2;
    } else if (index >= deferred && finiteCheckTakesQuotient(plan, index)) {
      end = index + 2;
    } else if (plan.steps[index].kind == StepKind::OptimizerUpdate) {
      int64_t elements = parameterElements(index);
      std::optional<DType> copy;
      sameCopyDType(plan, copy, plan.steps[index]);
      auto joins = [&](std::size_t next) {
        if ((index < deferred) != (next < deferred))
          return false;
        return index >= deferred || deadlines[index] == deadlines[next] || elements < kSmallDeferredLaunchElements;
      };
      while (end < plan.steps.size() && plan.steps[end].kind == StepKind::OptimizerUpdate && joins(end) &&
             canShareOptimizerLaunch(plan, plan.steps[index], plan.steps[end]) &&
             sameCopyDType(plan, copy, plan.steps[end]))
        elements += parameterElements(end++);
      if (index >= deferred && scaleUpdateJoins(plan, index, end))
        ++end;
    } else if (plainConversion(plan, plan.steps[index]) || plan.steps[index].kind == StepKind::Transpose) {
      // Each must also be independent of every earlier one of the group.
      bool converts = plan.steps[index].kind != StepKind::Transpose;
      auto independent = [&](std::size_t next) {
        for (std::size_t k = index; k < next; ++k)
          if (converts ? !canShareConvertLaunch(plan, plan.steps[k], plan.steps[next])
                       : !canShareCopyLaunch(plan, plan.steps[k], plan.steps[next]))
            return false;
        return true;
      };
      while (end < plan.steps.size() && (index < deferred) == (end < deferred) && independent(end))
        ++end;
    } else if (end < plan.steps.size() && (index < deferred) == (end < deferred) &&
               canShareLossLaunch(plan, plan.steps[index], plan.steps[end])) {
      ++end;
    }
    if (std::find(isSide.begin() + std::ptrdiff_t(index), isSide.begin() + std::ptrdiff_t(end), true) !=
        isSide.begin() + std::ptrdiff_t(end))
      end = index + 1;
    groups.emplace_back(index, end);
    index = end;
  }
  return groups;
}

Expected<std::vector<std::optional<ElementwiseKernel>>> generatedKernels(
    const Plan& plan, std::span<const std::pair<std::size_t, std::size_t>> groups) {
  std::vector<std::optional<ElementwiseKernel>> kernels(plan.steps.size());
  for (auto [index, end] : groups) {
    const Step& step = plan.steps[index];
    if (step.kind != StepKind::Elementwise && step.kind != StepKind::FusedElementwise)
      continue;
    bool summed = end - index == 2 && columnSummedElementwiseAt(plan, index);
    if (end - index > 1 && !summed)
      continue;
    Expected<ElementwiseKernel> kernel =
        summed ? emitColumnSummedKernel(plan, step, plan.steps[index + 1]) : emitElementwiseKernel(plan, step);
    if (!kernel)
      return Status::error(describeStepOfPlan(plan, index) + ": " + kernel.message());
    kernels[index] = std::move(*kernel);
  }
  return kernels;
}

std::size_t launchesPerRun(const Plan& plan, std::span<const std::pair<std::size_t, std::size_t>> groups) {
  std::vector<BufferId> roots = arenaViewRoots(plan);
  std::size_t launches = 0;
  for (auto [begin, end] : groups) {
    const Step& first = plan.steps[begin];
    launches += !(end - begin == 1 && first.kind == StepKind::Reshape && roots[first.outputs[0]] != first.outputs[0]);
  }
  return launches;
}

std::vector<std::ptrdiff_t> deferredJoins(const Plan& plan,
                                          std::span<const std::pair<std::size_t, std::size_t>> groups) {
  std::vector<std::size_t> deadlines = deferredStepDeadlines(plan);
  std::vector<std::size_t> groupDeadlines; // of the deferred groups, in order
  std::vector<std::ptrdiff_t> joins(groups.size(), -1);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto [begin, end] = groups[g];
    if (begin < plan.deferredSteps) {
      std::size_t deadline = plan.steps.size();
      for (std::size_t index = begin; index < end; ++index)
        deadline = std::min(deadline, deadlines[index]);
      groupDeadlines.push_back(deadline);
      continue;
    }
    // The side stream runs its groups in order: waiting for the last one due
    // at any step of the launch covers the earlier ones.
    for (std::size_t d = 0; d < groupDeadlines.size(); ++d)
      if (groupDeadlines[d] < end)
        joins[g] = std::ptrdiff_t(d);
  }
  return joins;
}

Expected<std::unique_ptr<DeviceStep>> makeLaunchGroupStep(DeviceContext& context, const Plan& plan,
                                                          std::span<const Step* const> steps) {
  if (steps.empty())
    return Status::error("a launch group needs at least one step");
  const Step& first = *steps.front();
  bool ofThePlan = &first >= plan.steps.data() && &first < plan.steps.data() + plan.steps.size();
  if (ofThePlan && classificationHeadLength(plan, std::size_t(&first - plan.steps.data())) == steps.size())
    return makeClassificationHeadStep(plan, steps);
  if (ofThePlan && mseHeadLength(plan, std::size_t(&first - plan.steps.data())) == steps.size())
    return makeMseHeadStep(plan, steps);
  if (ofThePlan && steps.size() == 2 && widenedReductionAt(plan, std::size_t(&first - plan.steps.data())))
    return makeWidenedReductionStep(plan, steps);
  if (ofThePlan && steps.size() == 2 && columnSummedElementwiseAt(plan, std::size_t(&first - plan.steps.data())))
    return Status::error(stepName(first) + " and the sum after it run as one generated kernel "
                                           "(generatedKernels), not as a launch group of their own");
  if (first.kind == StepKind::AllFinite) {
    if (!ofThePlan || steps.size() != 2 || !finiteCheckTakesQuotient(plan, std::size_t(&first - plan.steps.data())))
      return Status::error(stepName(first) + ": a finiteness check shares a launch only with the scalar division "
                                             "after it");
    return upcast(std::make_unique<AllFiniteStep>(plan, first, /*withQuotient=*/true));
  }
  if (first.kind == StepKind::Loss) {
    if (steps.size() != 2)
      return Status::error(stepName(first) + ": a loss shares a launch with its gradient alone");
    return makeLossAndGradientStep(plan, first, *steps[1]);
  }
  if (plainConversion(plan, first)) {
    for (size_t k = 1; k < steps.size(); ++k)
      for (size_t j = 0; j < k; ++j)
        if (!canShareConvertLaunch(plan, *steps[j], *steps[k]))
          return Status::error(stepName(*steps[k]) + " cannot share a launch with " + stepName(*steps[j]));
    return upcast(std::make_unique<ConvertGroupStep>(plan, steps));
  }
  if (first.kind == StepKind::Transpose) {
    std::vector<update::StridedCopyShape> shapes;
    for (size_t k = 0; k < steps.size(); ++k) {
      for (size_t j = 0; j < k; ++j)
        if (!canShareCopyLaunch(plan, *steps[j], *steps[k]))
          return Status::error(stepName(*steps[k]) + " cannot share a launch with " + stepName(*steps[j]));
      Expected<update::StridedCopyShape> shape = stridedCopyShapeOf(plan, *steps[k]);
      if (!shape)
        return shape.status();
      shapes.push_back(*shape);
    }
    return upcast(std::make_unique<StridedCopyGroupStep>(plan, steps, std::move(shapes)));
  }
  return makeOptimizerGroupStep(context, plan, steps);
}

Expected<std::unique_ptr<DeviceStep>> makeOptimizerGroupStep(DeviceContext&, const Plan& plan,
                                                             std::span<const Step* const> steps) {
  if (steps.empty())
    return Status::error("an optimizer group needs at least one step");
  const Step& first = *steps.front();
  if (first.kind != StepKind::OptimizerUpdate)
    return Status::error("no CUDA optimizer kernel runs " + stepName(first) + " steps");
  // Steps that touch each other's buffers are allowed: the group runs them
  // in separate launches, in order.
  std::span<const Step* const> updates = steps;
  if (steps.size() > 1 && steps.back()->kind == StepKind::UpdateScale) {
    updates = steps.first(steps.size() - 1);
    for (const Step* update : updates)
      if (update->kind != StepKind::OptimizerUpdate || stepsConflict(plan, *update, *steps.back()))
        return Status::error(stepName(*steps.back()) + " touches the buffers of " + stepName(*update) +
                             ": it cannot share its launch");
  }
  std::optional<DType> copy;
  for (const Step* step : updates)
    if (!sameOptimizerConfiguration(plan, first, *step) || !sameCopyDType(plan, copy, *step))
      return Status::error(stepName(*step) + " cannot share a launch with " + stepName(first));
  return upcast(std::make_unique<OptimizerGroupStep>(plan, steps));
}

} // namespace ampjit::runtime::cuda
