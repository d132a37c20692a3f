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
  GeneratedElementwiseStep(cudaKernel_t kernel, const ElementwiseLaunch& launch, int64_t maxBlocks)
      : kernel_(kernel), count_(launch.elementCount), rank_(int(launch.dims.size())), dims_(launch.packedDims()),
        grid_(launch.gridSize(maxBlocks)), inputCount_(launch.inputs.size()), outputCount_(launch.outputs.size()) {
    for (size_t k = 0; k < inputCount_; ++k)
      strides_.push_back(launch.packedStrides(k));
  }

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    if (count_ == 0)
      return Status::success();
    if (pointers.inputs.size() != inputCount_ || pointers.outputs.size() != outputCount_)
      return Status::error("generated elementwise kernel: wrong number of buffers");
    // cudaLaunchKernel takes the address of each parameter, in order.
    std::vector<void*> arguments;
    arguments.reserve(3 + 2 * inputCount_ + outputCount_);
    arguments.push_back(&count_);
    arguments.push_back(&rank_);
    arguments.push_back(&dims_);
    inputPointers_.assign(pointers.inputs.begin(), pointers.inputs.end());
    outputPointers_.assign(pointers.outputs.begin(), pointers.outputs.end());
    for (size_t k = 0; k < inputCount_; ++k) {
      arguments.push_back(&inputPointers_[k]);
      arguments.push_back(&strides_[k]);
    }
    for (size_t k = 0; k < outputCount_; ++k)
      arguments.push_back(&outputPointers_[k]);
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(unsigned(grid_)),
                                                 dim3(kElementwiseBlockSize), arguments.data(), 0, stream),
                                "launching a generated elementwise kernel");
    return Status::success();
  }

private:
  cudaKernel_t kernel_;
  long long count_;
  int rank_;
  KernelDims dims_;
  int64_t grid_;
  size_t inputCount_, outputCount_;
  std::vector<KernelDims> strides_;
  std::vector<void*> inputPointers_, outputPointers_;
};

} // namespace

Expected<std::unique_ptr<DeviceStep>> makeGeneratedElementwiseStep(DeviceContext& context,
                                                                   const ElementwiseKernel& kernel) {
  Expected<cudaKernel_t> handle = loadKernel(context, kernel);
  if (!handle)
    return handle.status();
  // Enough blocks to fill the device several times over; the grid-stride
  // loop covers the rest.
  int64_t maxBlocks = std::max(1, context.multiprocessorCount) * 16;
  return std::unique_ptr<DeviceStep>(new GeneratedElementwiseStep(*handle, kernel.launch, maxBlocks));
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
