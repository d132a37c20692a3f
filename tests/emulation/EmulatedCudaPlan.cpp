// EmulatedCudaPlan.h: the CUDA backend's step mapping on host memory.

#include "EmulatedCudaPlan.h"

#include "CudaEmulation.h"
#include "EmulatedCublasLt.h"

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/cuda/KernelSource.h"
#include "cpu/CpuKernels.h"
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

enum class Where { Handwritten, Generated, Gemm, LibraryStandIn };

struct Prepared {
  std::vector<size_t> indices;
  Where where = Where::Handwritten;
  std::unique_ptr<cuda::DeviceStep> step; // null for a stand-in
};

class Executable final : public rt::Executable {
public:
  explicit Executable(Plan plan) : plan_(std::move(plan)) {}

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
      if (end - index > 1) {
        std::vector<const Step*> members;
        for (size_t i = index; i < end; ++i)
          members.push_back(&plan_.steps[i]);
        made = cuda::makeLaunchGroupStep(context_, plan_, members);
      } else if (step.kind == StepKind::Gemm) {
        prepared.where = Where::Gemm;
        made = cuda::makeGemmStep(context_, plan_, step);
      } else if (cuda::callsCudnn(step.kind)) {
        prepared.where = Where::LibraryStandIn;
      } else if (cuda::runsThroughCudnn(step.kind)) {
        made = cuda::makeCudnnStep(context_, plan_, step, cudnnState_); // pooling: our kernels
      } else if (kernels_[index]) {
        prepared.where = Where::Generated;
        made = cuda::makeGeneratedElementwiseStep(context_, *kernels_[index]);
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
    // Fresh NaN bytes every run: nothing may depend on an earlier run's
    // temporaries or workspace, which the device does not keep either.
    std::vector<std::byte> arena(size_t(plan_.arenaBytes), std::byte(kPoisonByte));
    std::vector<std::byte> workspace(workspaceBytes_, std::byte(kPoisonByte));
    std::vector<Tensor> outputs(plan_.buffers.size());
    std::vector<std::byte*> data(plan_.buffers.size(), nullptr);
    for (BufferId id = 0; id < plan_.buffers.size(); ++id) {
      const rt::BufferDesc& buffer = plan_.buffers[id];
      switch (buffer.role) {
      case rt::BufferRole::Temporary: data[id] = arena.data() + buffer.arenaOffset; break;
      case rt::BufferRole::Constant:
        data[id] = const_cast<std::byte*>(reinterpret_cast<const std::byte*>(buffer.constantData.data()));
        break;
      case rt::BufferRole::Output: {
        Expected<Tensor> tensor = Tensor::allocate(buffer.type);
        if (!tensor)
          return tensor.status();
        outputs[id] = std::move(*tensor);
        std::memset(outputs[id].bytes(), kPoisonByte, size_t(buffer.type.byteSize()));
        data[id] = outputs[id].bytes();
        break;
      }
      case rt::BufferRole::Carried: return Status::error("the emulation runs no deferred update");
      default: data[id] = arguments[size_t(buffer.argument)].bytes(); break;
      }
    }
    for (BufferId id = 0; id < plan_.buffers.size(); ++id)
      if (plan_.buffers[id].viewOf >= 0)
        data[id] = data[size_t(plan_.buffers[id].viewOf)];

    for (Prepared& prepared : prepared_) {
      size_t first = prepared.indices.front();
      if (prepared.where == Where::LibraryStandIn) {
        AMPJIT_RETURN_IF_ERROR(runOnCpu(plan_.steps[first], data).withContext(rt::describeStepOfPlan(plan_, first)));
        ++counts_.libraryStandIns;
        continue;
      }
      std::vector<void*> in, out;
      for (size_t index : prepared.indices) {
        for (BufferId id : plan_.steps[index].inputs)
          in.push_back(id == rt::kNoBuffer ? nullptr : data[id]);
        for (BufferId id : plan_.steps[index].outputs)
          out.push_back(id == rt::kNoBuffer ? nullptr : data[id]);
      }
      Status status = prepared.step->enqueue(cuda::StepPointers{in, out, workspace.data()}, nullptr);
      if (!status)
        return Status::error(rt::describeStepOfPlan(plan_, first) + ": " + status.message() +
                             (prepared.where == Where::Gemm       ? libraryRefusal(prepared.where)
                              : lastFailure().empty() ? ""
                                                      : " (" + lastFailure() + ")"));
      ++(prepared.where == Where::Generated ? counts_.generatedLaunches
         : prepared.where == Where::Gemm    ? counts_.gemmSteps
                                            : counts_.handwrittenLaunches);
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

  Status runOnCpu(const Step& step, const std::vector<std::byte*>& data) {
    std::vector<rt::cpu::BufferView> in, out;
    auto view = [&](BufferId id) {
      rt::cpu::BufferView view;
      if (id == rt::kNoBuffer)
        return view;
      const rt::BufferDesc& buffer = plan_.buffers[id];
      view.present = true;
      view.dtype = buffer.type.dtype;
      view.shape = &buffer.type.shape;
      view.count = buffer.type.elementCount();
      view.data = data[id];
      return view;
    };
    for (BufferId id : step.inputs)
      in.push_back(view(id));
    for (BufferId id : step.outputs)
      out.push_back(view(id));
    return rt::cpu::runStep(step, rt::cpu::StepIO{in, out});
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
