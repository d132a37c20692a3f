// Generated elementwise kernels on the host: exactly the source
// emitElementwiseKernel writes, built by the host C++ compiler against the
// emulation (CudaEmulation.h) into a shared object, and launched with the
// parameter addresses ElementwiseKernelArguments packs for cudaLaunchKernel.
// This file defines the backend's precompileGeneratedKernels and
// makeGeneratedElementwiseStep (DeviceStep.h) in place of
// GeneratedKernels.cpp's, whose NVRTC CUBINs need a device: the CUDA backend
// built on the emulation and the plan-level emulation (EmulatedCudaPlan.h)
// both call them. NVRTC itself is checked by CompileKernels.*.
//
// Test-only: never part of a shipped binary.

#include "CudaEmulation.h"

#include "ampjit/runtime/Status.h"
#include "ampjit/runtime/cuda/KernelSource.h"
#include "cuda/DeviceStep.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace ampjit::emulation {

namespace {

namespace rt = ampjit::runtime;
namespace cuda = ampjit::runtime::cuda;
using rt::Expected;
using rt::Status;

/// A generated kernel's entry in a host library: launches it over the
/// addresses cudaLaunchKernel would take; returns the launch's cudaError_t.
using HostEntry = int (*)(unsigned grid, unsigned block, void** arguments);

/// Kernels built by the host compiler into one shared object (with its own
/// copy of the emulation), each in a namespace of its own so the kernels'
/// shared prelude does not collide.
class HostKernelLibrary {
public:
  static Expected<std::unique_ptr<HostKernelLibrary>> build(const std::vector<const cuda::ElementwiseKernel*>& kernels);

  HostKernelLibrary(const HostKernelLibrary&) = delete;
  HostKernelLibrary& operator=(const HostKernelLibrary&) = delete;
  ~HostKernelLibrary();

  HostEntry entry(const std::string& name) const { return entries_.at(name); }

private:
  HostKernelLibrary() = default;
  void* handle_ = nullptr;
  std::map<std::string, HostEntry> entries_;
};

std::string entryName(const std::string& kernel) { return "ampjit_emulated_" + kernel; }

/// Once per library: launches a kernel with its parameters read back from
/// cudaLaunchKernel's address array, each as the type the kernel's own
/// signature gives it (KernelSource.h defines the order).
constexpr const char* kEntryPrelude = R"(
namespace ampjit_emulated_entry {
template <typename... P, std::size_t... I>
int launchWith(void (*kernel)(P...), unsigned grid, unsigned block, void** a, std::index_sequence<I...>) {
  ::ampjit::emulation::launch(grid, block).kernel("generated kernel", [kernel](auto... p) { kernel(p...); })(
      *static_cast<std::remove_cv_t<P>*>(a[I])...);
  return int(::ampjit::emulation::takeLastError());
}
template <typename... P> int launch(void (*kernel)(P...), unsigned grid, unsigned block, void** a) {
  return launchWith(kernel, grid, block, a, std::index_sequence_for<P...>{});
}
} // namespace ampjit_emulated_entry
)";

std::string entrySource(const cuda::ElementwiseKernel& kernel) {
  return "extern \"C\" __attribute__((visibility(\"default\"))) int " + entryName(kernel.name) +
         "(unsigned grid, unsigned block, void** a) {\n  return ampjit_emulated_entry::launch(&" + kernel.name +
         ", grid, block, a);\n}\n";
}

Expected<std::unique_ptr<HostKernelLibrary>>
HostKernelLibrary::build(const std::vector<const cuda::ElementwiseKernel*>& kernels) {
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
  source << "#include \"EmulatedKernelPrelude.h\"\n" << kEntryPrelude;
  for (size_t k = 0; k < kernels.size(); ++k)
    source << "namespace ampjit_generated_" << k << " {\n"
           << kernels[k]->source << "\n"
           << entrySource(*kernels[k]) << "} // namespace ampjit_generated_" << k << "\n";
  std::filesystem::path sourcePath = directory / "kernels.cpp", kernelsObjectPath = directory / "kernels.o",
                        objectPath = directory / "kernels.so", logPath = directory / "compile.log";
  std::ofstream(sourcePath) << source.str();
  // The flags the prelude was precompiled with (tests/emulation/CMakeLists.txt):
  // without contraction, as NVRTC runs (--fmad=false); hidden symbols, so
  // the library's emulation, linked from the archive, never binds to the
  // test executable's.
  std::string command = std::string(AMPJIT_EMULATION_CXX) + " " + AMPJIT_EMULATION_KERNEL_FLAGS + " -c '" +
                        sourcePath.string() + "' -o '" + kernelsObjectPath.string() + "' > '" + logPath.string() +
                        "' 2>&1 && " + AMPJIT_EMULATION_CXX + " -shared '" + kernelsObjectPath.string() + "' '" +
                        AMPJIT_EMULATION_RUNTIME_ARCHIVE + "' -o '" + objectPath.string() + "' >> '" +
                        logPath.string() + "' 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::ifstream log(logPath);
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    return Status::error("the host compiler refused the generated kernels (" + sourcePath.string() + "):\n" +
                         text.substr(0, 4000));
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

HostKernelLibrary::~HostKernelLibrary() {
  if (handle_ != nullptr)
    dlclose(handle_);
}

/// A generated kernel's step: binds the enqueue's pointers when its stream
/// runs it, into a copy of the arguments of its own (a captured graph
/// replays it with the pointers it was captured with).
class EmulatedGeneratedStep final : public cuda::DeviceStep {
public:
  EmulatedGeneratedStep(HostEntry entry, std::string name, const cuda::ElementwiseLaunch& launch, int multiprocessors)
      : entry_(entry), name_(std::move(name)), arguments_(launch), grid_(launch.gridSizeOn(multiprocessors)) {}

  Status enqueue(const cuda::StepPointers& pointers, cudaStream_t stream) override {
    if (arguments_.elementCount() == 0)
      return Status::success();
    std::vector<void*> inputs(pointers.inputs.begin(), pointers.inputs.end()),
        outputs(pointers.outputs.begin(), pointers.outputs.end());
    // The counts are checked now, as the device launch checks them.
    Expected<std::span<void*>> checked = arguments_.bind(inputs, outputs);
    if (!checked)
      return checked.status();
    if (stream == nullptr) { // the plan-level emulation: at once, its error the step's
      int error = entry_(unsigned(grid_), unsigned(cuda::kElementwiseBlockSize), checked->data());
      return error == 0 ? Status::success()
                        : Status::error("emulated generated kernel: cudaError " + std::to_string(error));
    }
    std::string what =
        name_ + describeLaunchConfiguration(dim3(unsigned(grid_)), dim3(unsigned(cuda::kElementwiseBlockSize)), 0);
    submitToStream(stream, std::move(what), [entry = entry_, arguments = arguments_, grid = grid_, inputs,
                                             outputs]() mutable {
      Expected<std::span<void*>> bound = arguments.bind(inputs, outputs);
      int error = entry(unsigned(grid), unsigned(cuda::kElementwiseBlockSize), bound->data());
      if (error != 0)
        std::fprintf(stderr, "[cuda emulation] a generated kernel failed: cudaError %d\n", error);
    });
    return Status::success();
  }

private:
  HostEntry entry_;
  std::string name_;
  cuda::ElementwiseKernelArguments arguments_;
  int64_t grid_;
};

/// What the backend's hooks below have built: every library stays loaded
/// for the process, as the device keeps loaded modules.
struct LoadedKernels {
  std::mutex mutex;
  std::vector<std::unique_ptr<HostKernelLibrary>> libraries;
  std::map<std::string, HostEntry> entries;
};

LoadedKernels& loadedKernels() {
  static LoadedKernels* kernels = new LoadedKernels;
  return *kernels;
}

Status loadKernels(cuda::DeviceContext& context, const std::vector<const cuda::ElementwiseKernel*>& requested) {
  LoadedKernels& loaded = loadedKernels();
  std::lock_guard<std::mutex> lock(loaded.mutex);
  std::vector<const cuda::ElementwiseKernel*> missing;
  for (const cuda::ElementwiseKernel* kernel : requested) {
    bool known = loaded.entries.count(kernel->name) > 0;
    for (const cuda::ElementwiseKernel* seen : missing)
      known = known || seen->name == kernel->name;
    if (!known)
      missing.push_back(kernel);
  }
  if (missing.empty())
    return Status::success();
  Expected<std::unique_ptr<HostKernelLibrary>> library = HostKernelLibrary::build(missing);
  if (!library)
    return library.status();
  for (const cuda::ElementwiseKernel* kernel : missing)
    loaded.entries[kernel->name] = (*library)->entry(kernel->name);
  context.kernelsCompiled += int64_t(missing.size());
  loaded.libraries.push_back(std::move(*library));
  return Status::success();
}

} // namespace

} // namespace ampjit::emulation

// The CUDA backend's hooks (DeviceStep.h), for CudaBackend.cpp built on the
// emulation: the kernels the backend would compile with NVRTC and load are
// built for the host instead.
namespace ampjit::runtime::cuda {

Status precompileGeneratedKernels(DeviceContext& context, std::span<const ElementwiseKernel* const> kernels) {
  return emulation::loadKernels(context, std::vector<const ElementwiseKernel*>(kernels.begin(), kernels.end()));
}

Expected<std::unique_ptr<DeviceStep>> makeGeneratedElementwiseStep(DeviceContext& context,
                                                                   const ElementwiseKernel& kernel) {
  AMPJIT_RETURN_IF_ERROR(emulation::loadKernels(context, {&kernel}));
  emulation::HostEntry entry = nullptr;
  {
    emulation::LoadedKernels& loaded = emulation::loadedKernels();
    std::lock_guard<std::mutex> lock(loaded.mutex);
    entry = loaded.entries.at(kernel.name);
  }
  return std::unique_ptr<DeviceStep>(
      new emulation::EmulatedGeneratedStep(entry, kernel.name, kernel.launch, context.multiprocessorCount));
}

} // namespace ampjit::runtime::cuda
