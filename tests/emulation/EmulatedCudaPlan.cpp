// EmulatedCudaPlan.h: the CUDA backend's step mapping on host memory.

#include "EmulatedCudaPlan.h"

#include "CudaEmulation.h"
#include "EmulatedCublasLt.h"
#include "EmulatedCudnn.h"
#include "EmulatedStreams.h"

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/cuda/KernelSource.h"
#include "cuda/DeviceStep.h"

#include <algorithm>
#include <cstring>
#include <optional>

namespace ampjit::emulation {

namespace {

namespace rt = ampjit::runtime;
namespace cuda = ampjit::runtime::cuda;
using rt::BufferId;
using rt::DType;
using rt::Expected;
using rt::Plan;
using rt::Status;
using rt::Step;
using rt::StepKind;
using rt::Tensor;

/// All bytes 0xFF: a NaN in every floating dtype, as the CPU's poison mode.
constexpr int kPoisonByte = 0xFF;

enum class Where { Handwritten, Generated, Gemm, Cudnn };

struct Prepared {
  std::vector<size_t> indices;
  Where where = Where::Handwritten;
  std::unique_ptr<cuda::DeviceStep> step;
};

/// Blocks of emulated device memory, freed together.
class DeviceBlocks {
public:
  DeviceBlocks() = default;
  DeviceBlocks(const DeviceBlocks&) = delete;
  DeviceBlocks& operator=(const DeviceBlocks&) = delete;
  ~DeviceBlocks() {
    for (void* block : blocks_)
      emulation::cudaFree(block);
  }
  /// `bytes` of device memory holding a copy of `host`, or poison where `host` is null.
  Expected<std::byte*> allocate(std::size_t bytes, const void* host = nullptr) {
    void* block = nullptr;
    if (emulation::cudaMalloc(&block, std::max<std::size_t>(bytes, 1)) != cudaSuccess)
      return Status::error("the emulated device could not allocate " + std::to_string(bytes) + " bytes");
    blocks_.push_back(block);
    if (host != nullptr)
      std::memcpy(block, host, bytes);
    else
      std::memset(block, kPoisonByte, bytes);
    return static_cast<std::byte*>(block);
  }

private:
  std::vector<void*> blocks_;
};

class Executable final : public rt::Executable {
public:
  explicit Executable(Plan plan) : plan_(std::move(plan)) {}
  ~Executable() override {
    if (context_.cudnn != nullptr)
      emulation::cudnnDestroy(context_.cudnn);
  }

  Status prepare(int multiprocessors) {
    if (plan_.deferredSteps > 0)
      return Status::error("plan @" + plan_.name + ": the emulation runs no deferred update");
    AMPJIT_RETURN_IF_ERROR(rt::verifyPlan(plan_));
    context_.architecture = "sm_90";
    context_.multiprocessorCount = multiprocessors;
    if (emulation::cublasLtCreate(&context_.cublasLt) != CUBLAS_STATUS_SUCCESS)
      return Status::error("the cuBLASLt model: " + lastCublasLtRefusal());
    std::vector<std::pair<size_t, size_t>> groups = cuda::launchGroups(plan_);
    Expected<std::vector<std::optional<cuda::ElementwiseKernel>>> emitted = cuda::generatedKernels(plan_, groups);
    if (!emitted)
      return emitted.status();
    kernels_ = std::move(*emitted);
    // Built for the host by the backend's own hooks (EmulatedGeneratedKernels.cpp).
    std::vector<const cuda::ElementwiseKernel*> toCompile;
    for (const std::optional<cuda::ElementwiseKernel>& kernel : kernels_)
      if (kernel)
        toCompile.push_back(&*kernel);
    if (Status compiled = cuda::precompileGeneratedKernels(context_, toCompile); !compiled)
      return Status::error("plan @" + plan_.name + ": " + compiled.message());

    for (auto [index, end] : groups) {
      Prepared prepared;
      for (size_t i = index; i < end; ++i)
        prepared.indices.push_back(i);
      const Step& step = plan_.steps[index];
      Expected<std::unique_ptr<cuda::DeviceStep>> made = std::unique_ptr<cuda::DeviceStep>();
      if (kernels_[index]) { // an elementwise step's, or one that also sums columns
        prepared.where = Where::Generated;
        made = cuda::makeGeneratedElementwiseStep(context_, *kernels_[index]);
      } else if (end - index > 1) {
        std::vector<const Step*> members;
        for (size_t i = index; i < end; ++i)
          members.push_back(&plan_.steps[i]);
        made = cuda::makeLaunchGroupStep(context_, plan_, members);
      } else if (step.kind == StepKind::Gemm) {
        prepared.where = Where::Gemm;
        made = cuda::makeGemmStep(context_, plan_, step);
      } else if (cuda::runsThroughCudnn(step.kind)) {
        // Convolutions and batch norms call the cuDNN model; pooling is our kernels.
        prepared.where = cuda::callsCudnn(step.kind) ? Where::Cudnn : Where::Handwritten;
        made = cuda::makeCudnnStep(context_, plan_, step, cudnnState_);
      } else if (cuda::runsAsHandwrittenKernel(step.kind)) {
        made = cuda::makeHandwrittenStep(context_, plan_, step);
      } else {
        return Status::error(rt::describeStepOfPlan(plan_, index) + ": the CUDA backend has no kernel for it");
      }
      if (!made)
        return Status::error(rt::describeStepOfPlan(plan_, index) + ": " + made.message() +
                             libraryRefusal(prepared.where));
      prepared.step = std::move(*made);
      if (prepared.step)
        workspaceBytes_ = std::max(workspaceBytes_, prepared.step->workspaceBytes());
      prepared_.push_back(std::move(prepared));
    }
    return Status::success();
  }

  const Plan& plan() const override { return plan_; }

  Expected<std::vector<Tensor>> run(std::span<Tensor> arguments) override {
    AMPJIT_RETURN_IF_ERROR(rt::checkArguments(plan_, arguments));
    counts_ = EmulationCounts{};
    // Every buffer lives in emulated device memory, as the library models
    // require of operands: arguments and constants copied in, arguments and
    // outputs copied back after the run. Fresh NaN bytes every run: nothing
    // may depend on an earlier run's temporaries or workspace, which the
    // device does not keep either.
    DeviceBlocks device;
    Expected<std::byte*> arena = device.allocate(size_t(plan_.arenaBytes));
    Expected<std::byte*> workspace = device.allocate(workspaceBytes_);
    if (!arena || !workspace)
      return !arena ? arena.status() : workspace.status();
    std::vector<Tensor> outputs(plan_.buffers.size());
    std::vector<std::byte*> data(plan_.buffers.size(), nullptr);
    for (BufferId id = 0; id < plan_.buffers.size(); ++id) {
      const rt::BufferDesc& buffer = plan_.buffers[id];
      if (buffer.viewOf >= 0)
        continue;
      const void* host = nullptr;
      switch (buffer.role) {
      case rt::BufferRole::Temporary: data[id] = *arena + buffer.arenaOffset; continue;
      case rt::BufferRole::Constant: host = buffer.constantData.data(); break;
      case rt::BufferRole::Output: {
        Expected<Tensor> tensor = Tensor::allocate(buffer.type);
        if (!tensor)
          return tensor.status();
        outputs[id] = std::move(*tensor);
        break;
      }
      case rt::BufferRole::Carried: return Status::error("the emulation runs no deferred update");
      default: host = arguments[size_t(buffer.argument)].bytes(); break;
      }
      Expected<std::byte*> block = device.allocate(size_t(buffer.type.byteSize()), host);
      if (!block)
        return block.status();
      data[id] = *block;
    }
    for (BufferId id = 0; id < plan_.buffers.size(); ++id)
      if (plan_.buffers[id].viewOf >= 0)
        data[id] = data[size_t(plan_.buffers[id].viewOf)];

    for (Prepared& prepared : prepared_) {
      size_t first = prepared.indices.front();
      std::vector<void*> in, out;
      for (size_t index : prepared.indices) {
        for (BufferId id : plan_.steps[index].inputs)
          in.push_back(id == rt::kNoBuffer ? nullptr : data[id]);
        for (BufferId id : plan_.steps[index].outputs)
          out.push_back(id == rt::kNoBuffer ? nullptr : data[id]);
      }
      Status status = prepared.step->enqueue(cuda::StepPointers{in, out, *workspace}, nullptr);
      if (!status)
        return Status::error(rt::describeStepOfPlan(plan_, first) + ": " + status.message() +
                             (prepared.where == Where::Gemm       ? libraryRefusal(prepared.where)
                              : lastFailure().empty() ? ""
                                                      : " (" + lastFailure() + ")"));
      ++(prepared.where == Where::Generated ? counts_.generatedLaunches
         : prepared.where == Where::Gemm    ? counts_.gemmSteps
         : prepared.where == Where::Cudnn   ? counts_.cudnnSteps
                                            : counts_.handwrittenLaunches);
    }

    for (BufferId id = 0; id < plan_.buffers.size(); ++id) {
      const rt::BufferDesc& buffer = plan_.buffers[id];
      if (buffer.viewOf >= 0 || buffer.type.byteSize() == 0)
        continue;
      if (buffer.role == rt::BufferRole::Output)
        std::memcpy(outputs[id].bytes(), data[id], size_t(buffer.type.byteSize()));
      else if (buffer.argument >= 0)
        std::memcpy(arguments[size_t(buffer.argument)].bytes(), data[id], size_t(buffer.type.byteSize()));
    }
    return rt::hostRunResults(plan_, arguments, outputs, [&](BufferId id) { return data[id]; });
  }

  const EmulationCounts& counts() const { return counts_; }

private:
  /// Why the cuBLASLt model refused a Gemm step's call, for its message.
  static std::string libraryRefusal(Where where) {
    return where == Where::Gemm && !lastCublasLtRefusal().empty() ? " (the cuBLASLt model: " + lastCublasLtRefusal() + ")"
                                                                  : "";
  }

  Plan plan_;
  cuda::DeviceContext context_;
  cuda::CudnnPlanState cudnnState_;
  std::vector<std::optional<cuda::ElementwiseKernel>> kernels_;
  std::vector<Prepared> prepared_;
  size_t workspaceBytes_ = 0;
  EmulationCounts counts_;
};

} // namespace

Expected<Tensor> EmulatedCudaBackend::allocate(const rt::TensorType& type) { return Tensor::allocate(type); }

Expected<std::unique_ptr<rt::Executable>> EmulatedCudaBackend::prepare(Plan plan) {
  auto executable = std::make_unique<Executable>(std::move(plan));
  AMPJIT_RETURN_IF_ERROR(executable->prepare(multiprocessors_));
  return std::unique_ptr<rt::Executable>(std::move(executable));
}

const EmulationCounts& EmulatedCudaBackend::countsOf(const rt::Executable& executable) {
  return dynamic_cast<const Executable&>(executable).counts();
}

} // namespace ampjit::emulation
