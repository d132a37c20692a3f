// EmulatedCudaPlan.h: the CUDA backend's step mapping on host memory.

#include "EmulatedCudaPlan.h"

#include "CudaEmulation.h"
#include "EmulatedCublasLt.h"

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/cuda/KernelSource.h"
#include "cpu/CpuKernels.h"
#include "cuda/DeviceStep.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

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

/// A generated kernel's entry in the host library: launches it over the
/// addresses cudaLaunchKernel would take; returns the launch's cudaError_t.
using HostEntry = int (*)(unsigned grid, unsigned block, void** arguments);

std::string entryName(const std::string& kernel) { return "ampjit_emulated_" + kernel; }

/// The emulated entry of one kernel: its parameters read back from the
/// cudaLaunchKernel address array, in the signature's order (KernelSource.h).
std::string entrySource(const Plan& plan, const cuda::ElementwiseKernel& kernel) {
  std::ostringstream text;
  text << "extern \"C\" __attribute__((visibility(\"default\"))) int " << entryName(kernel.name)
       << "(unsigned grid, unsigned block, void** a) {\n"
       << "  ::ampjit::emulation::launch(grid, block).kernel([](auto... p) { " << kernel.name << "(p...); })(\n"
       << "      *static_cast<long long*>(a[0]), *static_cast<int*>(a[1]), *static_cast<AmpjitDims*>(a[2])";
  size_t slot = 3;
  for (BufferId id : kernel.launch.inputs) {
    text << ",\n      *static_cast<const " << cuda::deviceElementTypeName(plan.buffers[id].type.dtype) << "**>(a[" << slot
         << "]), *static_cast<AmpjitDims*>(a[" << slot + 1 << "])";
    slot += 2;
  }
  for (BufferId id : kernel.launch.outputs)
    text << ",\n      *static_cast<" << cuda::deviceElementTypeName(plan.buffers[id].type.dtype) << "**>(a[" << slot++ << "])";
  text << ");\n  return int(::ampjit::emulation::takeLastError());\n}\n";
  return text.str();
}

/// A plan's generated kernels built by the host compiler into one shared
/// object (with its own copy of the emulation), each in a namespace of its
/// own so the kernels' shared prelude does not collide.
class HostKernelLibrary {
public:
  static Expected<std::unique_ptr<HostKernelLibrary>> build(const Plan& plan,
                                                            const std::vector<const cuda::ElementwiseKernel*>& kernels) {
    std::unique_ptr<HostKernelLibrary> library(new HostKernelLibrary);
    if (kernels.empty())
      return library;
    std::error_code error;
    // A new path for every library: dlopen hands back a loaded library of
    // the same name instead of loading the new one.
    static std::atomic<int> libraries{0};
    std::filesystem::path directory = std::filesystem::temp_directory_path(error) /
                                      ("ampjit-emulation-" + std::to_string(getpid()) + "-" +
                                       std::to_string(libraries++));
    std::filesystem::create_directories(directory, error);
    if (error)
      return Status::error("cannot create " + directory.string() + ": " + error.message());
    std::ostringstream source;
    // The emulation's own source first: the language header's macros
    // (threadIdx, ...) are for kernel code only.
    source << "#include \"" AMPJIT_EMULATION_RUNTIME_SOURCE "\"\n#include \"EmulatedCudaLanguage.h\"\n";
    for (size_t k = 0; k < kernels.size(); ++k)
      source << "namespace ampjit_generated_" << k << " {\n"
             << kernels[k]->source << "\n"
             << entrySource(plan, *kernels[k]) << "} // namespace ampjit_generated_" << k << "\n";
    std::filesystem::path sourcePath = directory / "kernels.cpp", objectPath = directory / "kernels.so",
                          logPath = directory / "compile.log";
    std::ofstream(sourcePath) << source.str();
    // Without contraction, as NVRTC runs (--fmad=false); hidden symbols, so
    // the library's emulation never binds to the test executable's.
    std::string command = std::string(AMPJIT_EMULATION_CXX) +
                          " -std=c++20 -O1 -shared -fPIC -fvisibility=hidden -ffp-contract=off -w " +
                          AMPJIT_EMULATION_INCLUDE_FLAGS + " '" + sourcePath.string() + "' -o '" +
                          objectPath.string() + "' > '" + logPath.string() + "' 2>&1";
    if (std::system(command.c_str()) != 0) {
      std::ifstream log(logPath);
      std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      return Status::error("the host compiler refused the generated kernels (" + sourcePath.string() +
                           "):\n" + text.substr(0, 4000));
    }
    library->handle_ = dlopen(objectPath.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library->handle_ == nullptr)
      return Status::error(std::string("cannot load the emulated kernels: ") + dlerror());
    for (const cuda::ElementwiseKernel* kernel : kernels) {
      void* symbol = dlsym(library->handle_, entryName(kernel->name).c_str());
      if (symbol == nullptr)
        return Status::error("the emulated kernels lack " + entryName(kernel->name));
      library->entries_[kernel->name] = reinterpret_cast<HostEntry>(symbol);
    }
    std::filesystem::remove_all(directory, error);
    return library;
  }

  HostKernelLibrary(const HostKernelLibrary&) = delete;
  HostKernelLibrary& operator=(const HostKernelLibrary&) = delete;
  ~HostKernelLibrary() {
    if (handle_ != nullptr)
      dlclose(handle_);
  }

  HostEntry entry(const std::string& name) const { return entries_.at(name); }

private:
  HostKernelLibrary() = default;
  void* handle_ = nullptr;
  std::map<std::string, HostEntry> entries_;
};

/// The generated kernel of one step, as GeneratedElementwiseStep launches it.
class EmulatedGeneratedStep final : public cuda::DeviceStep {
public:
  EmulatedGeneratedStep(HostEntry entry, const cuda::ElementwiseLaunch& launch, int multiprocessors)
      : entry_(entry), arguments_(launch), grid_(launch.gridSizeOn(multiprocessors)) {}

  Status enqueue(const cuda::StepPointers& pointers, cudaStream_t) override {
    if (arguments_.elementCount() == 0)
      return Status::success();
    Expected<std::span<void*>> arguments = arguments_.bind(pointers.inputs, pointers.outputs);
    if (!arguments)
      return arguments.status();
    int error = entry_(unsigned(grid_), unsigned(cuda::kElementwiseBlockSize), arguments->data());
    if (error != 0)
      return Status::error("emulated generated kernel: cudaError " + std::to_string(error));
    return Status::success();
  }

private:
  HostEntry entry_;
  cuda::ElementwiseKernelArguments arguments_;
  int64_t grid_;
};

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
    std::vector<const cuda::ElementwiseKernel*> distinct;
    for (const std::optional<cuda::ElementwiseKernel>& kernel : kernels_) {
      bool known = !kernel;
      for (const cuda::ElementwiseKernel* seen : distinct)
        known = known || seen->name == kernel->name;
      if (!known)
        distinct.push_back(&*kernel);
    }
    Expected<std::unique_ptr<HostKernelLibrary>> library = HostKernelLibrary::build(plan_, distinct);
    if (!library)
      return Status::error("plan @" + plan_.name + ": " + library.message());
    library_ = std::move(*library);

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
        made = std::unique_ptr<cuda::DeviceStep>(new EmulatedGeneratedStep(
            library_->entry(kernels_[index]->name), kernels_[index]->launch, multiprocessors));
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
  std::unique_ptr<HostKernelLibrary> library_;
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
