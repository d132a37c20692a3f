#ifndef AMPJIT_TESTS_EMULATION_EMULATEDCUDAPLAN_H
#define AMPJIT_TESTS_EMULATION_EMULATEDCUDAPLAN_H

// A plan run the way the CUDA backend runs it, on the host, without a GPU:
// the backend's own launch groups (cuda::launchGroups) and DeviceSteps
// (makeLaunchGroupStep, makeHandwrittenStep) enqueue the hand-written
// kernels, which run emulated (CudaEmulation.h); each generated elementwise
// kernel is the source emitElementwiseKernel writes, built by the host C++
// compiler against the emulation and launched with the arguments
// ElementwiseKernelArguments packs for cudaLaunchKernel. A Gemm is the
// backend's own GemmStep (CublasLtGemm.cpp) calling the host model of
// cuBLASLt (EmulatedCublasLt.h); a convolution or batch norm is the
// backend's own cuDNN step (Cudnn.cpp) calling the host model of cuDNN
// (EmulatedCudnn.h); pooling is our own kernels, emulated. Each is counted,
// so a test can say what ran where.
//
// Buffers live in emulated device memory (EmulatedStreams.h), as the
// library models require: arguments and constants are copied in and
// arguments and outputs back, temporaries sit at their arena offsets (so
// reshape views share bytes), and the arena, workspace and outputs are
// filled with NaN bytes before every run, so a kernel that reads what no
// step wrote shows up as a NaN.
//
// Deferred updates, the side stream, graphs and the memory pool are the
// backend's own business: the CUDA backend itself runs them on the emulated
// runtime (EmulatedStreams.h). This executor keeps plan order on the null
// stream and refuses a deferred update.

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/Status.h"
#include "ampjit/runtime/Tensor.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ampjit::emulation {

/// What ran where in one run of a plan.
struct EmulationCounts {
  /// Launch groups the backend's DeviceSteps enqueued (hand-written kernels,
  /// multi-tensor groups) and generated kernels, all emulated.
  int64_t handwrittenLaunches = 0;
  int64_t generatedLaunches = 0;
  /// Gemm steps the backend's GemmStep enqueued on the cuBLASLt model.
  int64_t gemmSteps = 0;
  /// Convolution and batch-norm steps the backend's cuDNN steps enqueued on the cuDNN model.
  int64_t cudnnSteps = 0;
};

/// A runtime::Backend over the emulation, shaped as CudaBackend is where the
/// GPU tests use it (prepare, toDevice, toHost), so tests/gpu's kernel tests
/// build against it unchanged (GpuTestUtil.h, AMPJIT_GPU_TESTS_ON_EMULATION).
/// "Device" tensors are host tensors.
class EmulatedCudaBackend final : public runtime::Backend {
public:
  /// For a device with `multiprocessors` SMs (the H100 has 132), which sizes
  /// grids as on that device.
  explicit EmulatedCudaBackend(int multiprocessors = 132) : multiprocessors_(multiprocessors) {}

  std::string_view name() const override { return "cuda-emulated"; }
  runtime::Expected<runtime::Tensor> allocate(const runtime::TensorType& type) override;
  /// The plan's launch groups, DeviceSteps and one host-compiled library of
  /// its generated kernels; refuses a plan with a deferred update.
  runtime::Expected<std::unique_ptr<runtime::Executable>> prepare(runtime::Plan plan) override;
  runtime::Expected<runtime::Tensor> toHost(const runtime::Tensor& tensor) override { return tensor.clone(); }
  runtime::Expected<runtime::Tensor> toDevice(const runtime::Tensor& tensor) { return tensor.clone(); }

  /// What ran where in the last run of an executable this backend prepared.
  static const EmulationCounts& countsOf(const runtime::Executable& executable);

private:
  int multiprocessors_;
};

} // namespace ampjit::emulation

#endif // AMPJIT_TESTS_EMULATION_EMULATEDCUDAPLAN_H
