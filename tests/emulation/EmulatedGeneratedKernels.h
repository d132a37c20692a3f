#ifndef AMPJIT_TESTS_EMULATION_EMULATEDGENERATEDKERNELS_H
#define AMPJIT_TESTS_EMULATION_EMULATEDGENERATEDKERNELS_H

// Generated elementwise kernels on the host: exactly the source
// emitElementwiseKernel writes, built by the host C++ compiler against the
// emulation (CudaEmulation.h) into a shared object, and launched with the
// parameter addresses ElementwiseKernelArguments packs for cudaLaunchKernel.
// The plan-level emulation (EmulatedCudaPlan.h) uses these directly; for
// the CUDA backend itself the same file defines the backend's
// precompileGeneratedKernels and makeGeneratedElementwiseStep (DeviceStep.h)
// in place of GeneratedKernels.cpp's, whose NVRTC CUBINs need a device.
//
// Test-only: never part of a shipped binary.

#include "ampjit/runtime/Status.h"
#include "ampjit/runtime/cuda/KernelSource.h"
#include "cuda/DeviceStep.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ampjit::emulation {

/// A generated kernel's entry in a host library: launches it over the
/// addresses cudaLaunchKernel would take; returns the launch's cudaError_t.
using HostEntry = int (*)(unsigned grid, unsigned block, void** arguments);

/// Kernels built by the host compiler into one shared object (with its own
/// copy of the emulation), each in a namespace of its own so the kernels'
/// shared prelude does not collide.
class HostKernelLibrary {
public:
  static runtime::Expected<std::unique_ptr<HostKernelLibrary>>
  build(const std::vector<const runtime::cuda::ElementwiseKernel*>& kernels);

  HostKernelLibrary(const HostKernelLibrary&) = delete;
  HostKernelLibrary& operator=(const HostKernelLibrary&) = delete;
  ~HostKernelLibrary();

  HostEntry entry(const std::string& name) const { return entries_.at(name); }

private:
  HostKernelLibrary() = default;
  void* handle_ = nullptr;
  std::map<std::string, HostEntry> entries_;
};

/// The DeviceStep of one generated kernel, as GeneratedElementwiseStep
/// launches it: on its stream, with the pointers of the enqueue.
std::unique_ptr<runtime::cuda::DeviceStep> makeEmulatedGeneratedStep(HostEntry entry,
                                                                     const runtime::cuda::ElementwiseLaunch& launch,
                                                                     int multiprocessors);

} // namespace ampjit::emulation

#endif // AMPJIT_TESTS_EMULATION_EMULATEDGENERATEDKERNELS_H
