#include "ampjit/runtime/CpuBackend.h"

#include "CpuKernels.h"

#include "ampjit/runtime/Environment.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace ampjit::runtime {

namespace cpu {

Status runStep(const Step& step, const StepIO& io) {
  switch (step.kind) {
  case StepKind::Gemm: return runGemm(step, io);
  case StepKind::Elementwise: return runElementwise(step, io);
  case StepKind::FusedElementwise: return runFusedElementwise(step, io);
  case StepKind::Reduction: return runReduction(step, io);
  case StepKind::Softmax:
  case StepKind::LogSoftmax:
  case StepKind::SoftmaxGrad:
  case StepKind::LogSoftmaxGrad: return runSoftmaxFamily(step, io);
  case StepKind::LayerNorm: return runLayerNorm(step, io);
  case StepKind::LayerNormGrad: return runLayerNormGrad(step, io);
  case StepKind::Dropout: return runDropout(step, io);
  case StepKind::Loss: return runLoss(step, io);
  case StepKind::LossGrad: return runLossGrad(step, io);
  case StepKind::BroadcastTo:
  case StepKind::Reshape:
  case StepKind::Transpose: return runLayout(step, io);
  case StepKind::Constant: return runConstant(step, io);
  case StepKind::OptimizerUpdate: return runOptimizerUpdate(step, io);
  case StepKind::ScaleLoss:
  case StepKind::AllFinite:
  case StepKind::UnscaleAndCheck:
  case StepKind::UpdateScale: return runScaler(step, io);
  case StepKind::Conv2d: return runConv2d(step, io);
  case StepKind::Conv2dGradInput: return runConv2dGradInput(step, io);
  case StepKind::Conv2dGradWeight: return runConv2dGradWeight(step, io);
  case StepKind::BatchNorm:
  case StepKind::BatchNormInference: return runBatchNorm(step, io);
  case StepKind::BatchNormGrad: return runBatchNormGrad(step, io);
  case StepKind::MaxPool2d:
  case StepKind::AvgPool2d: return runPool2d(step, io);
  case StepKind::MaxPool2dGrad:
  case StepKind::AvgPool2dGrad: return runPool2dGrad(step, io);
  case StepKind::Embedding: return runEmbedding(step, io);
  case StepKind::EmbeddingGrad: return runEmbeddingGrad(step, io);
  }
  return Status::error("no CPU kernel for step kind " + std::to_string(int(step.kind)));
}

} // namespace cpu

namespace {

using cpu::BufferView;

/// All bytes 0xFF: a NaN in f16, bf16, f32 and f64, -1 in i64.
constexpr int kPoisonByte = 0xFF;

/// Kernels allocate working arrays the size of their operands; running out of
/// memory there must be an error, not an exception escaping the library.
Status runStepCatchingAllocationFailure(const Step& step, const cpu::StepIO& io) {
  try {
    return cpu::runStep(step, io);
  } catch (const std::bad_alloc&) {
    return Status::error("out of memory in the kernel");
  }
}

class CpuExecutable final : public Executable {
public:
  CpuExecutable(Plan plan, CpuBackendOptions options, std::shared_ptr<Storage> arena,
                std::vector<std::shared_ptr<Storage>> carried)
      : plan_(std::move(plan)), options_(options), arena_(std::move(arena)), carried_(std::move(carried)),
        deferred_(plan_) {
    // The temporaries whose bytes are dead after each step (poison mode):
    // after the last access of any view of the same bytes.
    std::vector<BufferId> viewRoot = arenaViewRoots(plan_);
    std::vector<size_t> lastAccess(plan_.buffers.size(), SIZE_MAX);
    auto touch = [&](BufferId id, size_t s) {
      lastAccess[id] = s;
      lastAccess[viewRoot[id]] = s;
    };
    for (size_t s = 0; s < plan_.steps.size(); ++s) {
      for (BufferId id : plan_.steps[s].inputs)
        if (id != kNoBuffer)
          touch(id, s);
      for (BufferId id : plan_.steps[s].outputs)
        if (id != kNoBuffer)
          touch(id, s);
    }
    deadAfter_.resize(plan_.steps.size());
    for (BufferId id = 0; id < plan_.buffers.size(); ++id)
      if (plan_.buffers[id].role == BufferRole::Temporary && viewRoot[id] == id && lastAccess[id] != SIZE_MAX)
        deadAfter_[lastAccess[id]].push_back(id);
  }

  const Plan& plan() const override { return plan_; }

  bool deferredPending() const override { return deferred_.pending(); }

  Expected<std::vector<Tensor>> run(std::span<Tensor> arguments) override {
    AMPJIT_RETURN_IF_ERROR(checkArguments(plan_, arguments));
    Expected<size_t> firstStep = deferred_.firstStep(plan_, arguments);
    if (!firstStep)
      return firstStep.status();
    std::vector<Tensor> outputs(plan_.buffers.size());
    std::vector<BufferView> views;
    AMPJIT_RETURN_IF_ERROR(bindBuffers(arguments, &outputs, views));
    if (options_.checkNumerics)
      AMPJIT_RETURN_IF_ERROR(checkArgumentNumerics(views));
    if (options_.poisonFreedTemporaries)
      std::memset(arena_->data(), kPoisonByte, arena_->size());
    AMPJIT_RETURN_IF_ERROR(runSteps(*firstStep, plan_.steps.size(), views));
    deferred_.ran(plan_, arguments);

    return hostRunResults(plan_, arguments, outputs, [&](BufferId id) { return views[id].data; });
  }

  Status completeDeferred(std::span<Tensor> arguments) override {
    AMPJIT_RETURN_IF_ERROR(deferred_.checkCompletion(plan_, arguments));
    if (!deferred_.pending())
      return Status::success();
    std::vector<BufferView> views;
    AMPJIT_RETURN_IF_ERROR(bindBuffers(arguments, nullptr, views));
    AMPJIT_RETURN_IF_ERROR(runSteps(0, plan_.deferredSteps, views));
    deferred_.completed();
    return Status::success();
  }

private:
  /// Every buffer's bytes for one run: arguments in place, temporaries in
  /// the arena, carried buffers in their own storage, outputs new. Arguments
  /// a completion leaves empty get no bytes, nor do outputs without
  /// `outputs` (the deferred steps touch neither).
  Status bindBuffers(std::span<Tensor> arguments, std::vector<Tensor>* outputs, std::vector<BufferView>& views) {
    views.assign(plan_.buffers.size(), BufferView{});
    for (BufferId id = 0; id < plan_.buffers.size(); ++id) {
      const BufferDesc& buffer = plan_.buffers[id];
      BufferView& view = views[id];
      view.present = true;
      view.dtype = buffer.type.dtype;
      view.shape = &buffer.type.shape;
      view.count = buffer.type.elementCount();
      switch (buffer.role) {
      case BufferRole::Temporary: view.data = arena_->data() + buffer.arenaOffset; break;
      case BufferRole::Constant:
        // Kernels never write constants (verifyPlan), so the plan's bytes serve as is.
        view.data = const_cast<std::byte*>(reinterpret_cast<const std::byte*>(buffer.constantData.data()));
        break;
      case BufferRole::Output: {
        if (!outputs)
          break;
        Expected<Tensor> tensor = Tensor::allocate(buffer.type);
        if (!tensor)
          return tensor.status();
        (*outputs)[id] = std::move(*tensor);
        view.data = (*outputs)[id].bytes();
        break;
      }
      case BufferRole::Carried: view.data = carried_[id]->data(); break;
      default: view.data = arguments[size_t(buffer.argument)].bytes(); break;
      }
    }
    // A view of an argument, constant or carried buffer reads its memory.
    for (BufferId id = 0; id < plan_.buffers.size(); ++id)
      if (plan_.buffers[id].viewOf >= 0)
        views[id].data = views[size_t(plan_.buffers[id].viewOf)].data;
    return Status::success();
  }

  Status runSteps(size_t begin, size_t end, const std::vector<BufferView>& views) {
    std::vector<BufferView> in, out;
    BufferView absent;
    for (size_t index = begin; index < end; ++index) {
      const Step& step = plan_.steps[index];
      in.clear();
      out.clear();
      for (BufferId id : step.inputs)
        in.push_back(id == kNoBuffer ? absent : views[id]);
      for (BufferId id : step.outputs)
        out.push_back(id == kNoBuffer ? absent : views[id]);
      Status status = runStepCatchingAllocationFailure(step, cpu::StepIO{in, out});
      if (!status)
        return Status::error(describeStepOfPlan(plan_, index) + ": " + status.message());
      if (options_.checkNumerics)
        AMPJIT_RETURN_IF_ERROR(checkNumerics(index, out));
      if (options_.poisonFreedTemporaries)
        for (BufferId id : deadAfter_[index])
          std::memset(views[id].data, kPoisonByte, size_t(plan_.buffers[id].type.byteSize()));
    }
    return Status::success();
  }

  Status checkArgumentNumerics(const std::vector<BufferView>& views) const {
    for (size_t index : numericsCheckedArguments(plan_))
      if (!cpu::allFinite(views[plan_.argumentBuffer(index)]))
        return nonFiniteArgumentError(plan_, index);
    return Status::success();
  }

  Status checkNumerics(size_t index, const std::vector<BufferView>& out) const {
    for (size_t slot = 0; slot < out.size(); ++slot)
      if (out[slot].present && isFloating(out[slot].dtype) && !cpu::allFinite(out[slot]))
        return nonFiniteOutputError(plan_, index, slot);
    return Status::success();
  }

  Plan plan_;
  CpuBackendOptions options_;
  std::shared_ptr<Storage> arena_;
  /// Per buffer id; set for carried buffers only.
  std::vector<std::shared_ptr<Storage>> carried_;
  DeferredUpdateTracker deferred_;
  std::vector<std::vector<BufferId>> deadAfter_;
};

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(CpuBackendOptions options) : options_(options) {
    options_.poisonFreedTemporaries |= environmentFlag("AMPJIT_POISON_FREED");
    options_.checkNumerics |= environmentFlag("AMPJIT_CHECK_NUMERICS");
    cpu::setBlasThreads(options_.blasThreads);
  }

  std::string_view name() const override { return "cpu"; }

  Expected<Tensor> allocate(const TensorType& type) override { return Tensor::allocate(type); }

  Expected<std::unique_ptr<Executable>> prepare(Plan plan) override {
    Status valid = verifyPlan(plan);
    if (!valid)
      return Status::error("plan @" + plan.name + " is invalid: " + valid.message());
    Expected<std::shared_ptr<Storage>> arena = Storage::allocate(size_t(plan.arenaBytes));
    if (!arena)
      return Status::error("plan @" + plan.name + ": cannot allocate its arena of " +
                           std::to_string(plan.arenaBytes) + " bytes: " + arena.message());
    std::vector<std::shared_ptr<Storage>> carried(plan.buffers.size());
    for (BufferId id = 0; id < plan.buffers.size(); ++id) {
      if (plan.buffers[id].role != BufferRole::Carried)
        continue;
      // Zero-filled, as the plan model promises before the first run.
      Expected<std::shared_ptr<Storage>> storage = Storage::allocate(size_t(plan.buffers[id].type.byteSize()));
      if (!storage)
        return Status::error("plan @" + plan.name + ": carried buffer %" + std::to_string(id) + ": " +
                             storage.message());
      carried[id] = std::move(*storage);
    }
    return std::unique_ptr<Executable>(
        new CpuExecutable(std::move(plan), options_, std::move(*arena), std::move(carried)));
  }

  Expected<Tensor> toHost(const Tensor& tensor) override { return tensor; }

private:
  CpuBackendOptions options_;
};

} // namespace

std::unique_ptr<Backend> createCpuBackend(CpuBackendOptions options) {
  return std::make_unique<CpuBackend>(options);
}

} // namespace ampjit::runtime
