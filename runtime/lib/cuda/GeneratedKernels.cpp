// Elementwise and FusedElementwise steps on the GPU: the CUDA C++ that
// KernelSource.cpp generates from the step, compiled by NVRTC for the
// device's architecture (through the on-disk cache) and loaded with the
// runtime API's library calls, so no binary links the driver library.

#include "DeviceStep.h"
#include "Nvrtc.h"

#include "ampjit/runtime/cuda/KernelSource.h"

#include <algorithm>

namespace ampjit::runtime::cuda {

namespace {

/// Loads a compiled kernel's CUBIN and records its handle under its name.
Expected<cudaKernel_t> loadCompiled(DeviceContext& context, const std::string& name, const CompiledKernel& compiled) {
  ++(compiled.cacheHit ? context.kernelCacheHits : context.kernelsCompiled);
  cudaLibrary_t library = nullptr;
  AMPJIT_CUDA_RETURN_IF_ERROR(
      cudaLibraryLoadData(&library, compiled.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
      "loading kernel " + name);
  context.loadedLibraries.push_back(library);
  cudaKernel_t handle = nullptr;
  AMPJIT_CUDA_RETURN_IF_ERROR(cudaLibraryGetKernel(&handle, library, name.c_str()),
                              "finding kernel " + name + " in its module");
  context.loadedKernels.emplace(name, handle);
  return handle;
}

Expected<cudaKernel_t> loadKernel(DeviceContext& context, const ElementwiseKernel& kernel) {
  if (auto found = context.loadedKernels.find(kernel.name); found != context.loadedKernels.end())
    return found->second;
  if (context.compiler == nullptr)
    return Status::error("no kernel compiler in the CUDA device context");
  Expected<CompiledKernel> compiled = context.compiler->compile(kernel.source, kernel.name, context.architecture);
  if (!compiled)
    return compiled.status();
  return loadCompiled(context, kernel.name, *compiled);
}

class GeneratedElementwiseStep final : public DeviceStep {
public:
  GeneratedElementwiseStep(cudaKernel_t kernel, const ElementwiseLaunch& launch, int multiprocessors)
      : kernel_(kernel), arguments_(launch), grid_(launch.gridSizeOn(multiprocessors)) {}

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    if (arguments_.elementCount() == 0)
      return Status::success();
    Expected<std::span<void*>> arguments = arguments_.bind(pointers.inputs, pointers.outputs);
    if (!arguments)
      return arguments.status();
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(unsigned(grid_)),
                                                 dim3(kElementwiseBlockSize), arguments->data(), 0, stream),
                                "launching a generated elementwise kernel");
    return Status::success();
  }

private:
  cudaKernel_t kernel_;
  ElementwiseKernelArguments arguments_;
  int64_t grid_;
};

} // namespace

Expected<std::unique_ptr<DeviceStep>> makeGeneratedElementwiseStep(DeviceContext& context,
                                                                   const ElementwiseKernel& kernel) {
  Expected<cudaKernel_t> handle = loadKernel(context, kernel);
  if (!handle)
    return handle.status();
  return std::unique_ptr<DeviceStep>(
      new GeneratedElementwiseStep(*handle, kernel.launch, context.multiprocessorCount));
}

Status precompileGeneratedKernels(DeviceContext& context, std::span<const ElementwiseKernel* const> kernels) {
  if (context.compiler == nullptr)
    return Status::error("no kernel compiler in the CUDA device context");
  std::vector<const ElementwiseKernel*> missing;
  for (const ElementwiseKernel* kernel : kernels) {
    bool known = context.loadedKernels.count(kernel->name) > 0 ||
                 std::any_of(missing.begin(), missing.end(), [&](const auto* k) { return k->name == kernel->name; });
    if (!known)
      missing.push_back(kernel);
  }
  if (missing.empty())
    return Status::success();

  std::vector<CompileRequest> requests;
  for (const ElementwiseKernel* kernel : missing)
    requests.push_back({kernel->source, kernel->name});
  std::vector<Expected<CompiledKernel>> compiled =
      compileInParallel(context.compiler->cacheDirectory(), requests, context.architecture);
  for (std::size_t i = 0; i < missing.size(); ++i) {
    if (!compiled[i])
      return compiled[i].status();
    Expected<cudaKernel_t> loaded = loadCompiled(context, missing[i]->name, *compiled[i]);
    if (!loaded)
      return loaded.status();
  }
  return Status::success();
}

} // namespace ampjit::runtime::cuda
