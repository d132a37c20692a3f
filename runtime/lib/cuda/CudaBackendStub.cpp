// The CUDA backend's entry points in a build without CUDA (CudaBackend.h).

#include "ampjit/runtime/CudaBackend.h"

namespace ampjit::runtime {

int cudaDeviceCount() { return 0; }

Expected<std::unique_ptr<CudaBackend>> createCudaBackend(CudaBackendOptions) {
  return Status::error("this build of ampjit has no CUDA backend (configured without a CUDA toolkit or "
                       "with AMPJIT_ENABLE_CUDA=OFF)");
}

} // namespace ampjit::runtime
