#ifndef JIT_LIB_CUDADEVICE_H
#define JIT_LIB_CUDADEVICE_H

#include "ampjit/runtime/CudaBackend.h"

#include <memory>
#include <string>

namespace jit::detail {

namespace rt = ampjit::runtime;

/// One CUDA backend (one stream, one memory pool) for every traced function
/// and jit::cuda call, so state shared between traced functions is ordered
/// on one stream. Throws jit::Error, naming `who`, when there is no device.
std::shared_ptr<rt::CudaBackend> sharedCudaBackend(const std::string& who);

/// Makes a backend created with `options` the shared one from now on (tests
/// that compare two configurations in one process). Functions traced before
/// keep the backend they were traced with, and tensors on the device stay
/// readable by both: one device, one address space.
void replaceSharedCudaBackend(const rt::CudaBackendOptions& options, const std::string& who);

} // namespace jit::detail

#endif // JIT_LIB_CUDADEVICE_H
