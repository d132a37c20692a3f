// Plan steps of the numeric kinds as NumericKernels.h launches: at prepare
// the step's shapes and parameters become a launch description, and enqueue
// passes the slots' device pointers to its launcher.

#include "DeviceStep.h"
#include "NumericKernels.h"

#include <algorithm>
#include <optional>
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

Expected<nk::ReductionGeometry> reductionGeometry(const Plan& plan, const Step& step) {
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
  return geometry;
}

Expected<std::unique_ptr<DeviceStep>> makeReduction(const Plan& plan, const Step& step, nk::Storage storage) {
  Expected<nk::ReductionGeometry> geometry = reductionGeometry(plan, step);
  if (!geometry)
    return geometry.status();
  return makeStep(step, nk::reductionWorkspaceBytes(storage, *geometry),
                  [storage, geometry = *geometry](const StepPointers& p, cudaStream_t stream) {
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

Expected<std::unique_ptr<DeviceStep>> makeEmbedding(const Plan& plan, const Step& step, nk::Storage storage) {
  bool forward = step.kind == StepKind::Embedding;
  const Shape& table = forward ? inputType(plan, step, 1).shape : plan.buffers[step.outputs[0]].type.shape;
  nk::EmbeddingGeometry geometry{.rows = table[0], .width = table[1],
                                 .count = inputType(plan, step, forward ? 0 : 1).elementCount()};
  if (forward)
    return makeStep(step, 0, [storage, geometry](const StepPointers& p, cudaStream_t stream) {
      return nk::launchEmbedding(storage, geometry, static_cast<const int64_t*>(slot(p.inputs, 0)),
                                 slot(p.inputs, 1), slot(p.outputs, 0), stream);
    });
  if (storage != nk::Storage::F32 && storage != nk::Storage::F64)
    return Status::error(stepName(step) +
                         ": the table's gradient accumulates in place, so it must be f32 or f64 on CUDA (the AMP "
                         "policies keep jit.embedding_grad in fp32)");
  int64_t paddingIdx = step.as<EmbeddingGradParams>().paddingIdx;
  return makeStep(step, 0, [storage, geometry, paddingIdx](const StepPointers& p, cudaStream_t stream) {
    return nk::launchEmbeddingGrad(storage, geometry, paddingIdx, slot(p.inputs, 0),
                                   static_cast<const int64_t*>(slot(p.inputs, 1)), slot(p.outputs, 0), stream);
  });
}

} // namespace

bool canShareLossLaunch(const Plan& plan, const Step& loss, const Step& gradient) {
  if (loss.kind != StepKind::Loss || gradient.kind != StepKind::LossGrad || loss.params != gradient.params ||
      loss.computeType != gradient.computeType || loss.inputs.size() != 2 || gradient.inputs.size() != 3 ||
      loss.outputs.size() != 1 || gradient.outputs.size() != 1)
    return false;
  // The same scores and labels, and a gradient seed the loss does not write.
  if (loss.inputs[0] != gradient.inputs[1] || loss.inputs[1] != gradient.inputs[2] ||
      gradient.inputs[0] == loss.outputs[0] || !nk::lossAndGradientShareALaunch(lossGeometry(plan, loss)))
    return false;
  // One kernel writes the loss and the gradient while it reads: neither may
  // share bytes with what it reads or with the other (a loss nobody reads
  // is dead at once, and codegen may give its bytes to the gradient).
  for (BufferId written : {loss.outputs[0], gradient.outputs[0]})
    for (BufferId read : {gradient.inputs[0], gradient.inputs[1], gradient.inputs[2]})
      if (sameMemory(plan, written, read))
        return false;
  return !sameMemory(plan, loss.outputs[0], gradient.outputs[0]);
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

/// The parts of a head (a classification or a regression loss with its
/// gradient and what AMP puts around them) at step `index`, or nothing.
struct HeadParts {
  bool widens = false, biased = false, narrows = false, sums = false;
  std::size_t length() const { return 2 + widens + narrows + sums; }
};

/// Where a head's buffers are in its launch group's slots (each step's
/// inputs, then its outputs, one step after another: widen [low scores] or
/// [low scores, bias] -> [scores]; loss [scores, labels or target] ->
/// [loss]; gradient [seed, scores, labels or target] -> [grad]; narrow
/// [grad] -> [low grad]; sum [grad] -> [column sums]); kAbsent where the
/// head has no such part.
struct HeadSlots {
  static constexpr std::size_t kAbsent = std::size_t(-1);
  std::size_t scores = 0, bias = kAbsent, second = 0, seed = 0, wide = kAbsent, loss = 0, grad = 0, low = kAbsent,
              sums = kAbsent;
};

/// Whether one pass may write `writes` element by element while it reads
/// `reads`: no write shares bytes with a read unless `inPlace(write, read)`
/// (the same bytes, each element read before its own is written), nor with
/// another write.
template <typename InPlace>
bool elementWritesClear(const Plan& plan, const std::vector<BufferId>& writes, const std::vector<BufferId>& reads,
                        InPlace inPlace) {
  for (std::size_t w = 0; w < writes.size(); ++w) {
    for (BufferId read : reads)
      if (sameMemory(plan, writes[w], read) && !inPlace(writes[w], read))
        return false;
    for (std::size_t other = w + 1; other < writes.size(); ++other)
      if (sameMemory(plan, writes[w], writes[other]))
        return false;
  }
  return true;
}

/// Whether two temporaries outside any view start at the same arena offset.
bool sameArenaStart(const Plan& plan, BufferId a, BufferId b) {
  const BufferDesc &x = plan.buffers[a], &y = plan.buffers[b];
  return x.role == BufferRole::Temporary && y.role == BufferRole::Temporary && x.viewOf < 0 && y.viewOf < 0 &&
         x.arenaOffset == y.arenaOffset;
}

/// A head's steps, or 0 for none.
std::size_t lengthOf(const std::optional<HeadParts>& parts) { return parts ? parts->length() : 0; }

HeadSlots headSlots(const HeadParts& parts) {
  HeadSlots at;
  std::size_t in = 0, out = 0;
  if (parts.widens) {
    at.bias = parts.biased ? 1 : HeadSlots::kAbsent;
    in += parts.biased ? 2 : 1;
    at.wide = out++;
  }
  at.scores = parts.widens ? 0 : in;
  at.second = in + 1;
  in += 2;
  at.loss = out++;
  at.seed = in;
  in += 3;
  at.grad = out++;
  if (parts.narrows) {
    in += 1;
    at.low = out++;
  }
  if (parts.sums)
    at.sums = out++;
  return at;
}

/// Whether `step` is an O1 last layer's output widened from f16/bf16 to f32
/// and its f32 bias (one per column) added: a FusedElementwise step of
/// exactly load, convert, load, add, on [rows, classes] scores and a
/// [classes] bias.
bool biasedWidening(const Plan& plan, const Step& step) {
  if (step.kind != StepKind::FusedElementwise || step.inputs.size() != 2 || step.outputs.size() != 1)
    return false;
  const FusedElementwiseParams& params = step.as<FusedElementwiseParams>();
  const TensorType &scores = plan.buffers[step.inputs[0]].type, &bias = plan.buffers[step.inputs[1]].type,
                   &wide = plan.buffers[step.outputs[0]].type;
  if ((scores.dtype != DType::F16 && scores.dtype != DType::BF16) || scores.shape.size() != 2 ||
      bias.dtype != DType::F32 || bias.shape != Shape{scores.shape[1]} || wide.dtype != DType::F32 ||
      wide.shape != scores.shape || params.program.size() != 4 || params.outputs.size() != 1)
    return false;
  const std::vector<FusedInstruction>& program = params.program;
  const FusedInstruction& add = program[params.outputs[0]];
  if (add.op != ElementwiseOp::Add || add.type != DType::F32)
    return false;
  auto isLoadOf = [&](uint32_t r, uint32_t input, DType dtype) {
    return program[r].op == ElementwiseOp::Load && program[r].operands[0] == input && program[r].type == dtype;
  };
  auto isWidenedScores = [&](uint32_t r) {
    return program[r].op == ElementwiseOp::Convert && program[r].type == DType::F32 &&
           isLoadOf(program[r].operands[0], 0, scores.dtype);
  };
  uint32_t a = add.operands[0], b = add.operands[1];
  return (isWidenedScores(a) && isLoadOf(b, 1, DType::F32)) || (isWidenedScores(b) && isLoadOf(a, 1, DType::F32));
}

bool isColumnSumOf(const Plan& plan, const Step& step, BufferId grad) {
  if (step.kind != StepKind::Reduction || step.inputs.size() != 1 || step.outputs.size() != 1 ||
      step.inputs[0] != grad || step.computeType != DType::F32)
    return false;
  const ReductionParams& params = step.as<ReductionParams>();
  const TensorType& out = plan.buffers[step.outputs[0]].type;
  return params.op == ReduceOp::Sum && params.axes == std::vector<int64_t>{0} && !params.keepdim &&
         out.dtype == DType::F32 && out.shape == Shape{plan.buffers[grad].type.shape[1]};
}

/// The head `find` sees at a launch group's first step, which must span the
/// group exactly, and that step's index; an error names `what` it is not.
Expected<std::pair<std::size_t, HeadParts>> headOfGroup(const Plan& plan, std::span<const Step* const> steps,
                                                        std::optional<HeadParts> (*find)(const Plan&, std::size_t),
                                                        const std::string& what) {
  if (steps.empty() || steps.front() < plan.steps.data() || steps.front() >= plan.steps.data() + plan.steps.size())
    return Status::error("a " + what + "'s steps must be the plan's own");
  std::size_t index = std::size_t(steps.front() - plan.steps.data());
  std::optional<HeadParts> parts = find(plan, index);
  if (!parts || parts->length() != steps.size())
    return Status::error(stepName(*steps.front()) + ": not the first step of a " + what + " of " +
                         std::to_string(steps.size()) + " steps");
  return std::pair{index, *parts};
}

/// A head's floating buffer dtype as kernel storage (f32 unless f16 or bf16).
nk::Storage headStorage(DType dtype) {
  return dtype == DType::F16 ? nk::Storage::F16 : dtype == DType::BF16 ? nk::Storage::BF16 : nk::Storage::F32;
}

/// A head's opening widening at `step`, into `parts`: an Elementwise or
/// FusedElementwise step must be a conversion of the scores to f32
/// (biasedWidening for a fused one), else it is no head (false); any other
/// step opens none.
bool readHeadWidening(const Plan& plan, const Step& step, HeadParts& parts) {
  if (step.kind == StepKind::Elementwise) {
    std::optional<std::pair<DType, DType>> dtypes = plainConversion(plan, step);
    parts.widens = dtypes && dtypes->second == DType::F32;
    return parts.widens;
  }
  if (step.kind == StepKind::FusedElementwise) {
    parts.widens = parts.biased = biasedWidening(plan, step);
    return parts.widens;
  }
  return true;
}

/// Where a head at `index` has its loss (its gradient right after), past
/// the widening readHeadWidening puts into `parts`; nothing if no head can
/// start there.
std::optional<std::size_t> headLossAt(const Plan& plan, std::size_t index, HeadParts& parts) {
  if (index >= plan.steps.size() || !readHeadWidening(plan, plan.steps[index], parts))
    return std::nullopt;
  std::size_t at = index + parts.widens;
  if (at + 1 >= plan.steps.size())
    return std::nullopt;
  return at;
}

std::optional<HeadParts> classificationHead(const Plan& plan, std::size_t index) {
  HeadParts parts;
  const std::vector<Step>& steps = plan.steps;
  std::optional<std::size_t> lossAt = headLossAt(plan, index, parts);
  if (!lossAt)
    return std::nullopt;
  std::size_t at = *lossAt;
  const Step &loss = steps[at], &gradient = steps[at + 1];
  if (loss.kind != StepKind::Loss || loss.inputs.empty() || loss.computeType != DType::F32 ||
      inputType(plan, loss, 0).dtype != DType::F32 || !canShareLossLaunch(plan, loss, gradient) ||
      (parts.widens && loss.inputs[0] != steps[index].outputs[0]))
    return std::nullopt;
  at += 2;
  BufferId grad = gradient.outputs[0];
  if (at < steps.size() && steps[at].inputs.size() == 1 && steps[at].inputs[0] == grad) {
    // Back to the widened scores' dtype, or to either low dtype.
    std::optional<std::pair<DType, DType>> dtypes = plainConversion(plan, steps[at]);
    parts.narrows = dtypes && dtypes->first == DType::F32 &&
                    (!parts.widens || dtypes->second == inputType(plan, steps[index], 0).dtype);
    at += parts.narrows;
  }
  if (at < steps.size() && isColumnSumOf(plan, steps[at], grad))
    parts.sums = true;
  // A loss with its gradient alone is makeLossAndGradientStep's.
  if (!parts.widens && !parts.narrows && !parts.sums)
    return std::nullopt;
  // The kernel works on all rows at once where the steps ran one after
  // another, and codegen gives dead temporaries' bytes to later outputs. Its
  // order: first, row by row in any order, it reads the scores, labels and
  // seed and writes the wide scores, the gradient and its narrowed copy;
  // then (after a barrier) the loss, then the column sums from the gradient.
  // So a first-phase write must not share bytes with what the first phase
  // reads or with another first-phase write (an f32 gradient in the f16
  // scores' bytes overwrote rows not yet read: a GPT's tied output
  // projection lost its loss to NaN), except the gradient or its copy in
  // place of the scores element for element, since each row is read in full
  // before its gradient is written (the MNIST head's f16 gradient takes its
  // f16 scores' bytes). The loss, stored late, must not take the bytes of a
  // gradient written before it; the sums, last in both orders, may take any
  // dead bytes, but not the gradient they read.
  BufferId source = steps[index].inputs[0], lossValue = loss.outputs[0];
  std::size_t afterGradient = index + parts.widens + 2;
  BufferId lowGrad = parts.narrows ? steps[afterGradient].outputs[0] : kNoBuffer;
  BufferId sums = parts.sums ? steps[afterGradient + parts.narrows].outputs[0] : kNoBuffer;
  std::vector<BufferId> firstReads = {source, loss.inputs[1], gradient.inputs[0]};
  if (parts.biased)
    firstReads.push_back(steps[index].inputs[1]);
  std::vector<BufferId> firstWrites = {grad};
  if (parts.widens)
    firstWrites.push_back(steps[index].outputs[0]);
  if (parts.narrows)
    firstWrites.push_back(lowGrad);
  auto inPlaceOfScores = [&](BufferId written, BufferId read) {
    return read == source && (written == grad || written == lowGrad) && sameArenaStart(plan, written, read) &&
           plan.buffers[written].type == plan.buffers[read].type;
  };
  if (!elementWritesClear(plan, firstWrites, firstReads, inPlaceOfScores))
    return std::nullopt;
  if (sameMemory(plan, lossValue, grad) || sameMemory(plan, lossValue, lowGrad) || sameMemory(plan, sums, grad))
    return std::nullopt;
  return parts;
}

/// Whether `buffer` is read, returned or viewed outside steps [begin, end).
bool usedOutside(const Plan& plan, BufferId buffer, std::size_t begin, std::size_t end) {
  for (std::size_t s = 0; s < plan.steps.size(); ++s)
    if ((s < begin || s >= end) &&
        std::find(plan.steps[s].inputs.begin(), plan.steps[s].inputs.end(), buffer) != plan.steps[s].inputs.end())
      return true;
  for (const PlanResult& result : plan.results)
    if (result.buffer == buffer)
      return true;
  for (const BufferDesc& other : plan.buffers)
    if (other.viewOf == int32_t(buffer))
      return true;
  return false;
}

/// Whether `buffer` is a temporary that only step `reader` reads: nothing
/// else reads it, returns it or views its memory (a launch that never
/// writes it may then run both).
bool readOnlyBy(const Plan& plan, BufferId buffer, std::size_t reader) {
  return plan.buffers[buffer].role == BufferRole::Temporary && !usedOutside(plan, buffer, reader, reader + 1);
}

std::optional<HeadParts> mseHead(const Plan& plan, std::size_t index) {
  const std::vector<Step>& steps = plan.steps;
  HeadParts parts;
  std::optional<std::size_t> lossAt = headLossAt(plan, index, parts);
  if (!lossAt)
    return std::nullopt;
  std::size_t at = *lossAt;
  const Step &loss = steps[at], &gradient = steps[at + 1];
  auto isMse = [&](const Step& step, StepKind kind) {
    return step.kind == kind && step.computeType == DType::F32 && step.as<LossParams>().loss == LossKind::Mse &&
           step.as<LossParams>().reduction != LossReduction::None;
  };
  if (!isMse(loss, StepKind::Loss) || !isMse(gradient, StepKind::LossGrad) || loss.inputs.size() != 2 ||
      gradient.inputs.size() != 3 || loss.as<LossParams>().reduction != gradient.as<LossParams>().reduction ||
      gradient.inputs[1] != loss.inputs[0] || gradient.inputs[2] != loss.inputs[1] ||
      (parts.widens && loss.inputs[0] != steps[index].outputs[0]))
    return std::nullopt;
  const TensorType &scores = plan.buffers[loss.inputs[0]].type, &target = plan.buffers[loss.inputs[1]].type;
  if (scores.dtype != DType::F32 || target != scores || scores.shape.size() != 2 ||
      plan.buffers[gradient.inputs[0]].type != TensorType{DType::F32, {}})
    return std::nullopt;
  at += 2;
  BufferId grad = gradient.outputs[0];
  if (at < steps.size() && steps[at].inputs.size() == 1 && steps[at].inputs[0] == grad) {
    std::optional<std::pair<DType, DType>> dtypes = plainConversion(plan, steps[at]);
    parts.narrows = dtypes && dtypes->first == DType::F32 && dtypes->second != DType::F32;
    at += parts.narrows;
  }
  if (at < steps.size() && isColumnSumOf(plan, steps[at], grad))
    parts.sums = true;
  if (!parts.widens && !parts.narrows && !parts.sums)
    return std::nullopt;
  // One pass writes the wide scores, the gradient and its narrowed copy
  // element by element after reading that element's scores and target; the
  // sums after a tile's rows, while other blocks read; the loss in a second
  // launch. So an element write may share bytes with a read only in place
  // (the same bytes, element for element, as the low gradient over the low
  // scores), never with another write; the sums with nothing; the loss with
  // no write.
  std::size_t end = index + parts.length();
  BufferId source = steps[index].inputs[0];
  std::vector<BufferId> reads = {source, loss.inputs[1], gradient.inputs[0]};
  if (parts.biased)
    reads.push_back(steps[index].inputs[1]);
  std::vector<BufferId> elementWrites;
  if (parts.widens && usedOutside(plan, steps[index].outputs[0], index, end))
    elementWrites.push_back(steps[index].outputs[0]);
  if (usedOutside(plan, grad, index, end))
    elementWrites.push_back(grad);
  if (parts.narrows)
    elementWrites.push_back(steps[index + parts.widens + 2].outputs[0]);
  BufferId sums = parts.sums ? steps[end - 1].outputs[0] : kNoBuffer;
  auto inPlace = [&](BufferId written, BufferId read) {
    const TensorType &x = plan.buffers[written].type, &y = plan.buffers[read].type;
    return sameArenaStart(plan, written, read) && x.shape == y.shape && dtypeSize(x.dtype) == dtypeSize(y.dtype);
  };
  if (!elementWritesClear(plan, elementWrites, reads, inPlace))
    return std::nullopt;
  for (BufferId write : elementWrites)
    if (sameMemory(plan, sums, write) || sameMemory(plan, loss.outputs[0], write))
      return std::nullopt;
  for (BufferId read : reads)
    if (sameMemory(plan, sums, read))
      return std::nullopt;
  if (sameMemory(plan, loss.outputs[0], sums))
    return std::nullopt;
  return parts;
}

} // namespace

std::size_t mseHeadLength(const Plan& plan, std::size_t index) { return lengthOf(mseHead(plan, index)); }

Expected<std::unique_ptr<DeviceStep>> makeMseHeadStep(const Plan& plan, std::span<const Step* const> steps) {
  Expected<std::pair<std::size_t, HeadParts>> found = headOfGroup(plan, steps, mseHead, "regression head");
  if (!found)
    return found.status();
  auto [index, parts] = *found;
  const Step &loss = *steps[parts.widens], &gradient = *steps[parts.widens + 1];
  nk::MseHead head;
  head.scores = headStorage(inputType(plan, *steps.front(), 0).dtype);
  head.reduction = loss.as<LossParams>().reduction == LossReduction::Mean ? nk::LossReduction::Mean
                                                                          : nk::LossReduction::Sum;
  const Shape& shape = inputType(plan, loss, 0).shape;
  head.rows = shape[0];
  head.columns = shape[1];
  std::size_t end = index + steps.size();
  bool storesWide = parts.widens && usedOutside(plan, steps.front()->outputs[0], index, end);
  bool storesGrad = usedOutside(plan, gradient.outputs[0], index, end);
  if (parts.narrows)
    head.low = headStorage(plan.buffers[steps[parts.widens + 2]->outputs[0]].type.dtype);
  HeadSlots at = headSlots(parts);
  if (!storesWide)
    at.wide = HeadSlots::kAbsent;
  if (!storesGrad)
    at.grad = HeadSlots::kAbsent;
  return makeStep(loss, nk::mseHeadWorkspaceBytes(head), [head, at](const StepPointers& p, cudaStream_t stream) {
    auto input = [&](std::size_t slotIndex) {
      return slotIndex == HeadSlots::kAbsent ? nullptr : slot(p.inputs, slotIndex);
    };
    auto output = [&](std::size_t slotIndex) {
      return slotIndex == HeadSlots::kAbsent ? nullptr : slot(p.outputs, slotIndex);
    };
    nk::MseHeadPointers pointers;
    pointers.scores = slot(p.inputs, at.scores);
    pointers.bias = static_cast<const float*>(input(at.bias));
    pointers.target = static_cast<const float*>(slot(p.inputs, at.second));
    pointers.seed = static_cast<const float*>(slot(p.inputs, at.seed));
    pointers.wide = static_cast<float*>(output(at.wide));
    pointers.loss = static_cast<float*>(slot(p.outputs, at.loss));
    pointers.grad = static_cast<float*>(output(at.grad));
    pointers.lowGrad = output(at.low);
    pointers.columnSums = static_cast<float*>(output(at.sums));
    return nk::launchMseHead(head, pointers, p.workspace, stream);
  });
}

bool widenedReductionAt(const Plan& plan, std::size_t index) {
  if (index + 1 >= plan.steps.size())
    return false;
  const Step &convert = plan.steps[index], &reduction = plan.steps[index + 1];
  std::optional<std::pair<DType, DType>> dtypes = plainConversion(plan, convert);
  if (!dtypes || (dtypes->first != DType::F16 && dtypes->first != DType::BF16) || dtypes->second != DType::F32)
    return false;
  BufferId narrow = convert.inputs[0], widened = convert.outputs[0];
  if (reduction.kind != StepKind::Reduction || reduction.inputs.size() != 1 || reduction.outputs.size() != 1 ||
      reduction.inputs[0] != widened || reduction.computeType != DType::F32 || !readOnlyBy(plan, widened, index + 1))
    return false;
  // The sum reads the narrow input while it writes: the arena may have given
  // the sum the narrow input's bytes, dead once the conversion copied them.
  return !sameMemory(plan, reduction.outputs[0], narrow);
}

bool columnSummedElementwiseAt(const Plan& plan, std::size_t index) {
  if (index + 1 >= plan.steps.size())
    return false;
  const Step &step = plan.steps[index], &sum = plan.steps[index + 1];
  if ((step.kind != StepKind::Elementwise && step.kind != StepKind::FusedElementwise) ||
      sum.kind != StepKind::Reduction || sum.inputs.size() != 1 || sum.outputs.size() != 1 ||
      sum.computeType != DType::F32)
    return false;
  BufferId summed = sum.inputs[0], sums = sum.outputs[0];
  if (std::find(step.outputs.begin(), step.outputs.end(), summed) == step.outputs.end() ||
      !readOnlyBy(plan, summed, index + 1))
    return false;
  const ReductionParams& params = sum.as<ReductionParams>();
  const TensorType& type = plan.buffers[summed].type;
  if (params.op != ReduceOp::Sum || params.axes != std::vector<int64_t>{0} || type.dtype != DType::F32 ||
      plan.buffers[sums].type.dtype != DType::F32 || type.shape.size() < 2 || type.elementCount() == 0)
    return false;
  // The same additions as the sum's own launch: its one-pass column kernel.
  Expected<nk::ReductionGeometry> geometry = reductionGeometry(plan, sum);
  if (!geometry || !nk::columnSumInOnePass(*geometry))
    return false;
  // Blocks store sums while others still read inputs and store outputs:
  // the sums must not share bytes with any of them (the arena may give the
  // sums the bytes of an input that dies at the elementwise step).
  for (const std::vector<BufferId>* ids : {&step.inputs, &step.outputs})
    for (BufferId id : *ids)
      if (id != summed && sameMemory(plan, sums, id))
        return false;
  return true;
}

Expected<std::unique_ptr<DeviceStep>> makeWidenedReductionStep(const Plan& plan, std::span<const Step* const> steps) {
  if (steps.size() != 2 || steps.front() < plan.steps.data() ||
      steps.front() >= plan.steps.data() + plan.steps.size() ||
      !widenedReductionAt(plan, std::size_t(steps.front() - plan.steps.data())))
    return Status::error("a widened reduction is the plan's conversion of f16 or bf16 to f32 and the sum that alone "
                         "reads it");
  const Step &convert = *steps[0], &reduction = *steps[1];
  Expected<nk::Storage> input = storageOf(convert, inputType(plan, convert, 0).dtype);
  if (!input)
    return input.status();
  Expected<nk::ReductionGeometry> geometry = reductionGeometry(plan, reduction);
  if (!geometry)
    return geometry.status();
  // The group's slots: inputs {narrow, widened}, outputs {widened, sum}.
  return makeStep(reduction, nk::reductionWorkspaceBytes(nk::Storage::F32, *geometry),
                  [input = *input, geometry = *geometry](const StepPointers& p, cudaStream_t stream) {
                    return nk::launchWidenedReduction(input, geometry, slot(p.inputs, 0),
                                                      static_cast<float*>(slot(p.outputs, 1)), p.workspace, stream);
                  });
}

std::size_t classificationHeadLength(const Plan& plan, std::size_t index) {
  return lengthOf(classificationHead(plan, index));
}

Expected<std::unique_ptr<DeviceStep>> makeClassificationHeadStep(const Plan& plan, std::span<const Step* const> steps) {
  Expected<std::pair<std::size_t, HeadParts>> found = headOfGroup(plan, steps, classificationHead, "classification head");
  if (!found)
    return found.status();
  const HeadParts& parts = found->second;
  const Step& loss = *steps[parts.widens];
  nk::LossGeometry geometry = lossGeometry(plan, loss);
  nk::ClassificationHead head;
  head.scores = headStorage(inputType(plan, *steps.front(), 0).dtype);
  if (parts.narrows)
    head.low = headStorage(plan.buffers[steps[parts.widens + 2]->outputs[0]].type.dtype);
  HeadSlots at = headSlots(parts);
  return makeStep(loss, 0, [head, geometry, at](const StepPointers& p, cudaStream_t stream) {
    auto output = [&](std::size_t slotIndex) {
      return slotIndex == HeadSlots::kAbsent ? nullptr : slot(p.outputs, slotIndex);
    };
    const float* bias = at.bias == HeadSlots::kAbsent ? nullptr : static_cast<const float*>(slot(p.inputs, at.bias));
    return nk::launchClassificationHead(
        head, geometry, slot(p.inputs, at.scores), bias, static_cast<const int64_t*>(slot(p.inputs, at.second)),
        static_cast<const float*>(slot(p.inputs, at.seed)), static_cast<float*>(output(at.wide)),
        static_cast<float*>(output(at.loss)), static_cast<float*>(output(at.grad)), output(at.low),
        static_cast<float*>(output(at.sums)), stream);
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
  case StepKind::Dropout:
  case StepKind::Embedding:
  case StepKind::EmbeddingGrad: return true;
  default: return false;
  }
}

Expected<std::unique_ptr<DeviceStep>> makeNumericStep(DeviceContext&, const Plan& plan, const Step& step) {
  if (!runsAsNumericKernel(step.kind))
    return Status::error(stepName(step) + ": not a numeric kernel's kind");
  // The data slot whose dtype every floating slot of the step shares.
  std::size_t dataSlot =
      step.kind == StepKind::LayerNormGrad || step.kind == StepKind::LossGrad || step.kind == StepKind::Embedding ? 1 : 0;
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
  case StepKind::Embedding:
  case StepKind::EmbeddingGrad: return makeEmbedding(plan, step, *storage);
  default: break;
  }
  return Status::error(stepName(step) + ": not a numeric kernel's kind");
}

} // namespace ampjit::runtime::cuda
