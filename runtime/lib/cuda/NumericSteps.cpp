// Plan steps of the numeric kinds as NumericKernels.h launches: at prepare
// the step's shapes and parameters become a launch description, and enqueue
// passes the slots' device pointers to its launcher.

#include "DeviceStep.h"
#include "NumericKernels.h"

#include <algorithm>
#include <utility>

namespace ampjit::runtime::cuda {

namespace {

namespace nk = numeric;

std::string stepName(const Step& step) {
  std::string name(stepKindName(step.kind));
  if (!step.origin.empty())
    name += " step (" + step.origin + ")";
  else
    name += " step";
  return name;
}

Expected<nk::Storage> storageOf(const Step& step, DType dtype) {
  switch (dtype) {
  case DType::F32: return nk::Storage::F32;
  case DType::F16: return nk::Storage::F16;
  case DType::BF16: return nk::Storage::BF16;
  case DType::F64: return nk::Storage::F64;
  default: break;
  }
  return Status::error(stepName(step) + ": no CUDA kernel for " + std::string(dtypeName(dtype)) + " data");
}

const TensorType& inputType(const Plan& plan, const Step& step, std::size_t slot) {
  return plan.buffers[step.inputs[slot]].type;
}

int64_t product(const Shape& shape, std::size_t begin, std::size_t end) {
  int64_t result = 1;
  for (std::size_t d = begin; d < end; ++d)
    result *= shape[d];
  return result;
}

void* slot(std::span<void* const> pointers, std::size_t index) {
  return index < pointers.size() ? pointers[index] : nullptr;
}

/// A step whose enqueue is one launcher call; the launcher closure holds the
/// geometry computed at prepare.
template <typename Launch>
class NumericStep final : public DeviceStep {
public:
  NumericStep(std::string name, std::size_t workspace, Launch launch)
      : name_(std::move(name)), workspace_(workspace), launch_(std::move(launch)) {}

  std::size_t workspaceBytes() const override { return workspace_; }

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    AMPJIT_CUDA_RETURN_IF_ERROR(launch_(pointers, stream), name_);
    return Status::success();
  }

private:
  std::string name_;
  std::size_t workspace_;
  Launch launch_;
};

template <typename Launch>
std::unique_ptr<DeviceStep> makeStep(const Step& step, std::size_t workspace, Launch launch) {
  return std::make_unique<NumericStep<Launch>>(stepName(step), workspace, std::move(launch));
}

Expected<std::unique_ptr<DeviceStep>> makeReduction(const Plan& plan, const Step& step, nk::Storage storage) {
  const ReductionParams& params = step.as<ReductionParams>();
  const Shape& shape = inputType(plan, step, 0).shape;
  if (shape.size() > std::size_t(nk::kMaxReductionRank))
    return Status::error(stepName(step) + ": rank " + std::to_string(shape.size()) + " exceeds the CUDA kernel's " +
                         std::to_string(nk::kMaxReductionRank));
  std::vector<int64_t> strides = contiguousStrides(shape);
  nk::ReductionGeometry geometry;
  geometry.op = params.op == ReduceOp::Sum ? nk::ReduceKind::Sum
                : params.op == ReduceOp::Mean ? nk::ReduceKind::Mean
                                              : nk::ReduceKind::Max;
  geometry.outputCount = 1;
  geometry.reducedCount = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    bool reduced = std::find(params.axes.begin(), params.axes.end(), int64_t(d)) != params.axes.end();
    if (reduced) {
      geometry.reducedSizes[geometry.reducedRank] = shape[d];
      geometry.reducedStrides[geometry.reducedRank++] = strides[d];
      geometry.reducedCount *= shape[d];
    } else {
      geometry.keptSizes[geometry.keptRank] = shape[d];
      geometry.keptStrides[geometry.keptRank++] = strides[d];
      geometry.outputCount *= shape[d];
    }
  }
  return makeStep(step, nk::reductionWorkspaceBytes(storage, geometry),
                  [storage, geometry](const StepPointers& p, cudaStream_t stream) {
                    return nk::launchReduction(storage, geometry, slot(p.inputs, 0), slot(p.outputs, 0), p.workspace,
                                               stream);
                  });
}

Expected<std::unique_ptr<DeviceStep>> makeSoftmax(const Plan& plan, const Step& step, nk::Storage storage) {
  const Shape& shape = inputType(plan, step, 0).shape;
  std::size_t axis = std::size_t(step.as<AxisParams>().axis);
  nk::AxisGeometry geometry{product(shape, 0, axis), shape[axis], product(shape, axis + 1, shape.size())};
  nk::SoftmaxKind kind = step.kind == StepKind::Softmax      ? nk::SoftmaxKind::Softmax
                         : step.kind == StepKind::LogSoftmax ? nk::SoftmaxKind::LogSoftmax
                         : step.kind == StepKind::SoftmaxGrad ? nk::SoftmaxKind::SoftmaxGrad
                                                              : nk::SoftmaxKind::LogSoftmaxGrad;
  return makeStep(step, 0, [storage, kind, geometry](const StepPointers& p, cudaStream_t stream) {
    return nk::launchSoftmax(storage, kind, geometry, slot(p.inputs, 0), slot(p.inputs, 1), slot(p.outputs, 0),
                             stream);
  });
}

Expected<std::unique_ptr<DeviceStep>> makeLayerNorm(const Plan& plan, const Step& step, nk::Storage storage) {
  const LayerNormParams& params = step.as<LayerNormParams>();
  const Shape& shape = inputType(plan, step, 0).shape;
  std::size_t axis = std::size_t(params.axis);
  nk::RowGeometry geometry{product(shape, 0, axis), product(shape, axis, shape.size())};
  double eps = params.eps;
  return makeStep(step, 0, [storage, geometry, eps](const StepPointers& p, cudaStream_t stream) {
    return nk::launchLayerNorm(storage, geometry, eps, slot(p.inputs, 0), slot(p.inputs, 1), slot(p.inputs, 2),
                               slot(p.outputs, 0), slot(p.outputs, 1), slot(p.outputs, 2), stream);
  });
}

Expected<std::unique_ptr<DeviceStep>> makeLayerNormGrad(const Plan& plan, const Step& step, nk::Storage storage) {
  const Shape& shape = inputType(plan, step, 1).shape;
  std::size_t axis = std::size_t(step.as<AxisParams>().axis);
  nk::RowGeometry geometry{product(shape, 0, axis), product(shape, axis, shape.size())};
  return makeStep(step, nk::layerNormGradWorkspaceBytes(storage, geometry),
                  [storage, geometry](const StepPointers& p, cudaStream_t stream) {
                    return nk::launchLayerNormGrad(storage, geometry, slot(p.inputs, 0), slot(p.inputs, 1),
                                                   slot(p.inputs, 2), slot(p.inputs, 3), slot(p.inputs, 4),
                                                   slot(p.outputs, 0), slot(p.outputs, 1), slot(p.outputs, 2),
                                                   p.workspace, stream);
                  });
}

/// The geometry of a Loss or LossGrad step.
nk::LossGeometry lossGeometry(const Plan& plan, const Step& step) {
  const LossParams& params = step.as<LossParams>();
  bool isGrad = step.kind == StepKind::LossGrad;
  const Shape& shape = inputType(plan, step, isGrad ? 1 : 0).shape;
  nk::LossGeometry geometry;
  geometry.loss = params.loss == LossKind::Mse            ? nk::LossKind::Mse
                  : params.loss == LossKind::CrossEntropy ? nk::LossKind::CrossEntropy
                                                          : nk::LossKind::Nll;
  geometry.reduction = params.reduction == LossReduction::None   ? nk::LossReduction::None
                       : params.reduction == LossReduction::Mean ? nk::LossReduction::Mean
                                                                 : nk::LossReduction::Sum;
  geometry.ignoreIndex = params.ignoreIndex;
  geometry.labelSmoothing = params.labelSmoothing;
  geometry.count = elementCount(shape);
  if (params.loss != LossKind::Mse) {
    geometry.rows = shape[0];
    geometry.classes = shape[1];
  }
  return geometry;
}

Expected<std::unique_ptr<DeviceStep>> makeLoss(const Plan& plan, const Step& step, nk::Storage storage) {
  nk::LossGeometry geometry = lossGeometry(plan, step);
  if (step.kind == StepKind::Loss)
    return makeStep(step, nk::lossWorkspaceBytes(storage, geometry),
                    [storage, geometry](const StepPointers& p, cudaStream_t stream) {
                      return nk::launchLoss(storage, geometry, slot(p.inputs, 0), slot(p.inputs, 1),
                                            slot(p.outputs, 0), p.workspace, stream);
                    });
  return makeStep(step, nk::lossGradWorkspaceBytes(storage, geometry),
                  [storage, geometry](const StepPointers& p, cudaStream_t stream) {
                    return nk::launchLossGrad(storage, geometry, slot(p.inputs, 0), slot(p.inputs, 1),
                                              slot(p.inputs, 2), slot(p.outputs, 0), p.workspace, stream);
                  });
}

Expected<std::unique_ptr<DeviceStep>> makeDropout(const Plan& plan, const Step& step, nk::Storage storage) {
  int64_t count = inputType(plan, step, 0).elementCount();
  double p = step.as<DropoutParams>().p;
  return makeStep(step, 0, [storage, count, p](const StepPointers& pointers, cudaStream_t stream) {
    return nk::launchDropout(storage, count, p, slot(pointers.inputs, 0),
                             static_cast<const int64_t*>(slot(pointers.inputs, 1)), slot(pointers.outputs, 0),
                             static_cast<uint8_t*>(slot(pointers.outputs, 1)),
                             static_cast<int64_t*>(slot(pointers.outputs, 2)), stream);
  });
}

} // namespace

bool canShareLossLaunch(const Plan& plan, const Step& loss, const Step& gradient) {
  if (loss.kind != StepKind::Loss || gradient.kind != StepKind::LossGrad || loss.params != gradient.params ||
      loss.computeType != gradient.computeType || loss.inputs.size() != 2 || gradient.inputs.size() != 3 ||
      loss.outputs.size() != 1 || gradient.outputs.size() != 1)
    return false;
  // The same scores and labels, and a gradient seed the loss does not write.
  return loss.inputs[0] == gradient.inputs[1] && loss.inputs[1] == gradient.inputs[2] &&
         gradient.inputs[0] != loss.outputs[0] &&
         nk::lossAndGradientShareALaunch(lossGeometry(plan, loss));
}

Expected<std::unique_ptr<DeviceStep>> makeLossAndGradientStep(const Plan& plan, const Step& loss,
                                                              const Step& gradient) {
  if (!canShareLossLaunch(plan, loss, gradient))
    return Status::error(stepName(gradient) + " cannot share a launch with " + stepName(loss));
  Expected<nk::Storage> dtype = storageOf(loss, inputType(plan, loss, 0).dtype);
  if (!dtype)
    return dtype.status();
  nk::LossGeometry geometry = lossGeometry(plan, loss);
  // Slots: the loss's [scores, labels], then the gradient's [seed, scores,
  // labels]; outputs [loss, grad].
  return makeStep(loss, 0, [storage = *dtype, geometry](const StepPointers& p, cudaStream_t stream) {
    return nk::launchLossAndGradient(storage, geometry, slot(p.inputs, 0), slot(p.inputs, 1), slot(p.inputs, 2),
                                     slot(p.outputs, 0), slot(p.outputs, 1), stream);
  });
}

namespace {

/// A convert step between the float dtypes `from` and `to`, elementwise in f32.
bool isConversion(const Plan& plan, const Step& step, DType from, DType to) {
  return step.kind == StepKind::Elementwise && step.as<ElementwiseParams>().op == ElementwiseOp::Convert &&
         step.computeType == DType::F32 && step.inputs.size() == 1 && step.outputs.size() == 1 &&
         inputType(plan, step, 0).dtype == from && plan.buffers[step.outputs[0]].type.dtype == to &&
         inputType(plan, step, 0).shape == plan.buffers[step.outputs[0]].type.shape;
}

} // namespace

std::size_t classificationHeadLength(const Plan& plan, std::size_t index) {
  if (index + 3 > plan.steps.size())
    return 0;
  const Step &widen = plan.steps[index], &loss = plan.steps[index + 1], &gradient = plan.steps[index + 2];
  if (widen.kind != StepKind::Elementwise || widen.inputs.size() != 1 || widen.outputs.size() != 1)
    return 0;
  DType low = inputType(plan, widen, 0).dtype;
  if ((low != DType::F16 && low != DType::BF16) || !isConversion(plan, widen, low, DType::F32) ||
      loss.kind != StepKind::Loss || loss.inputs.empty() || loss.inputs[0] != widen.outputs[0] ||
      loss.computeType != DType::F32 || !canShareLossLaunch(plan, loss, gradient))
    return 0;
  bool narrows = index + 3 < plan.steps.size() && plan.steps[index + 3].inputs.size() == 1 &&
                 plan.steps[index + 3].inputs[0] == gradient.outputs[0] &&
                 isConversion(plan, plan.steps[index + 3], DType::F32, low);
  return narrows ? 4 : 3;
}

Expected<std::unique_ptr<DeviceStep>> makeClassificationHeadStep(const Plan& plan, std::span<const Step* const> steps) {
  const Step& widen = *steps.front();
  if (steps.size() != 3 && steps.size() != 4)
    return Status::error(stepName(widen) + ": a classification head is 3 or 4 steps");
  nk::LossGeometry geometry = lossGeometry(plan, *steps[1]);
  nk::Storage scores = inputType(plan, widen, 0).dtype == DType::F16 ? nk::Storage::F16 : nk::Storage::BF16;
  bool narrows = steps.size() == 4;
  // Slots, step by step: inputs [low scores][scores, labels][seed, scores,
  // labels][grad]; outputs [scores][loss][grad][low grad].
  return makeStep(*steps[1], 0, [scores, geometry, narrows](const StepPointers& p, cudaStream_t stream) {
    return nk::launchClassificationHead(
        scores, geometry, slot(p.inputs, 0), static_cast<const int64_t*>(slot(p.inputs, 2)),
        static_cast<const float*>(slot(p.inputs, 3)), static_cast<float*>(slot(p.outputs, 0)),
        static_cast<float*>(slot(p.outputs, 1)), static_cast<float*>(slot(p.outputs, 2)),
        narrows ? slot(p.outputs, 3) : nullptr, stream);
  });
}

bool runsAsNumericKernel(StepKind kind) {
  switch (kind) {
  case StepKind::Reduction:
  case StepKind::Softmax:
  case StepKind::LogSoftmax:
  case StepKind::SoftmaxGrad:
  case StepKind::LogSoftmaxGrad:
  case StepKind::LayerNorm:
  case StepKind::LayerNormGrad:
  case StepKind::Loss:
  case StepKind::LossGrad:
  case StepKind::Dropout: return true;
  default: return false;
  }
}

Expected<std::unique_ptr<DeviceStep>> makeNumericStep(DeviceContext&, const Plan& plan, const Step& step) {
  if (!runsAsNumericKernel(step.kind))
    return Status::error(stepName(step) + ": not a numeric kernel's kind");
  // The data slot whose dtype every floating slot of the step shares.
  std::size_t dataSlot = step.kind == StepKind::LayerNormGrad || step.kind == StepKind::LossGrad ? 1 : 0;
  if (step.inputs.size() <= dataSlot || step.inputs[dataSlot] >= plan.buffers.size())
    return Status::error(stepName(step) + ": has no data input");
  Expected<nk::Storage> storage = storageOf(step, inputType(plan, step, dataSlot).dtype);
  if (!storage)
    return storage.status();
  switch (step.kind) {
  case StepKind::Reduction: return makeReduction(plan, step, *storage);
  case StepKind::Softmax:
  case StepKind::LogSoftmax:
  case StepKind::SoftmaxGrad:
  case StepKind::LogSoftmaxGrad: return makeSoftmax(plan, step, *storage);
  case StepKind::LayerNorm: return makeLayerNorm(plan, step, *storage);
  case StepKind::LayerNormGrad: return makeLayerNormGrad(plan, step, *storage);
  case StepKind::Loss:
  case StepKind::LossGrad: return makeLoss(plan, step, *storage);
  case StepKind::Dropout: return makeDropout(plan, step, *storage);
  default: break;
  }
  return Status::error(stepName(step) + ": not a numeric kernel's kind");
}

} // namespace ampjit::runtime::cuda
