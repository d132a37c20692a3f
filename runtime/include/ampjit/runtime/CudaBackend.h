#ifndef AMPJIT_RUNTIME_CUDABACKEND_H
#define AMPJIT_RUNTIME_CUDABACKEND_H

// The CUDA backend: plans run on one NVIDIA GPU.
//
//   * Memory: every tensor and arena comes from one stream-ordered CUDA
//     memory pool that keeps what it has reserved, so after the first step
//     no run calls cudaMalloc. An Executable owns its arena, its constants,
//     its output buffers and a staging buffer per input argument, all at
//     fixed addresses.
//   * Steps: GEMMs through cuBLASLt (f32 with true fp32 compute, never TF32;
//     f16/bf16 with fp32 accumulation), elementwise and fused elementwise
//     steps as CUDA C++ generated from the plan and compiled by NVRTC (cached
//     on disk), convolution, batch norm and pooling through cuDNN, the rest
//     (reductions, softmax, norms, losses, layout, dropout, scaler and
//     optimizer updates, consecutive updates as one multi-tensor launch)
//     through kernels compiled into the library.
//   * Runs: run() only enqueues work on the backend's stream and returns:
//     results are device tensors, and nothing waits for the GPU until a
//     value is brought to the host (toHost, or an AsyncHostCopy). The first
//     run of an Executable enqueues step by step; the second is captured as
//     one CUDA graph, which later runs replay. Inputs are copied into the
//     staging buffers first (from host or device memory), so a new batch
//     never invalidates the graph; state arguments are used in place, and
//     graphs are cached by the state addresses they read (two at most: a
//     new address captures a new graph, replacing the least recently used).
//   * A second stream where overlap pays: the loss scaler's finiteness check
//     of large gradients runs there in chunks, each as soon as its gradients
//     are final, under the backward GEMMs that follow (FiniteCheckSchedule.h);
//     every run joins it back, so callers only ever see one stream.
//
// In a build without CUDA every entry point exists: createCudaBackend fails
// with a message saying so and cudaDeviceCount() is 0.

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/BuildInfo.h" // cudaBackendBuilt()

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace ampjit::runtime {

/// Devices the CUDA runtime reports; 0 on any error (no driver, no device,
/// a build without CUDA), which is what GPU tests skip on.
int cudaDeviceCount();

struct CudaBackendOptions {
  int device = 0;
  /// Capture the second run of each Executable as a CUDA graph and replay it.
  bool useGraphs = true;
  /// Wait after every step and stop with an error naming the first step whose
  /// floating-point output holds an inf or NaN, in the CPU backend's words
  /// (DESIGN: AMPJIT_CHECK_NUMERICS=1 also turns it on). Runs go step by
  /// step, without graphs. Off by default: overflow is the scaler's business.
  bool checkNumerics = false;
  /// Where NVRTC output is cached; empty means the default directory
  /// (AMPJIT_KERNEL_CACHE, XDG_CACHE_HOME/ampjit or ~/.cache/ampjit).
  std::filesystem::path kernelCacheDirectory{};
  /// SMs that each GEMM running while a deferred optimizer update is still
  /// on the side stream leaves to that update: cuBLASLt picks its algorithm
  /// for the others (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET), so the
  /// memory-bound update runs beside the GEMM rather than between GEMMs.
  /// 0 leaves every GEMM the whole device; -1 takes
  /// AMPJIT_CUDA_GEMM_SM_RESERVE, or 0. Below the device's SM count.
  int gemmSmReserve = -1;
  /// Optimizer updates predicated on the loss scaler's finiteness check run
  /// speculatively, each on the side stream as soon as its gradient is
  /// final, into a second buffer of the state it rewrites; where the check
  /// skips the step, the old state is copied over, and the run hands each
  /// state tensor the buffer that holds its new value (Storage::exchangeBytes:
  /// the tensor's bytes alternate between two addresses, so memory read by
  /// address from outside ampjit does not follow). Plans whose qualifying
  /// updates cover at least this many parameter elements do so; 0 never; -1
  /// takes AMPJIT_CUDA_SPECULATIVE_UPDATE (a switch, on unless "0"; on means
  /// 2^24: mlp9's step on the H200 took 12.58 ms against 12.93 ms with
  /// the update deferred). While it is on, jit::trace does not defer the
  /// update into the next run.
  int64_t speculativeUpdateMinimumElements = -1;
  /// Where updates run speculatively, a plain SGD update whose gradient is
  /// a GEMM's product alone is computed in that GEMM (cuBLASLt's D = alpha *
  /// product + C into the parameter's second buffer, alpha = -lr * inv_scale
  /// read from the device), and a kernel after it checks the new parameter
  /// and writes its low-precision copy: the update's separate pass over the
  /// gradient and the parameter disappears into the GEMM's epilogue. The
  /// gradient is then never rounded to f16 or bf16, so the bits differ from
  /// the update in line, and a gradient that would overflow f16 but not f32
  /// updates instead of skipping the step (SpeculativeUpdates.h, GemmFold).
  /// 1 on, 0 off, -1 takes AMPJIT_CUDA_GEMM_FOLDED_UPDATE (a switch, on
  /// unless "0": mlp9's step on the H200 took 12.13 ms folded against 12.58
  /// ms speculative alone).
  int foldUpdatesIntoGemms = -1;
  /// GEMMs of at least this many floating-point operations (2 m n k per
  /// product) choose their cuBLASLt algorithm by timing: at prepare, the
  /// candidates the heuristic offers (gemmTuningCandidates) run on scratch
  /// operands, timed with CUDA events, and the fastest is kept where it beats the
  /// heuristic's first choice by more than 2%. Choices are remembered in the
  /// process and in the kernel cache directory (keyed by the device,
  /// cuBLASLt's version and the problem), so later processes time nothing
  /// and run the same algorithm. Prepare takes longer (tens of milliseconds
  /// per distinct large GEMM) and the scratch operands come from the pool.
  /// Another algorithm may sum in another order, so the bits can differ from
  /// the heuristic's choice's (within the GEMM's tolerance). 0 never; -1
  /// takes AMPJIT_CUDA_GEMM_TUNING (a switch, on unless "0"; on means 2^34,
  /// GEMMs of about 25 us and more on an H100; it took mlp9's folded step on
  /// the H200 from 13.01 to 12.49 ms).
  int64_t gemmTuningMinimumFlops = -1;
  /// How many algorithms a tuned GEMM asks cuBLASLt's heuristic for (it may
  /// offer fewer), 1 to 64. Each is screened by one short timed run and only
  /// the heuristic's first and the 4 fastest of the screen get the full
  /// trials, so a longer list costs about one run per candidate more. -1
  /// takes AMPJIT_CUDA_GEMM_TUNING_CANDIDATES (default 8).
  int gemmTuningCandidates = -1;
};

/// What an Executable of this backend has done; for tests and benchmarks.
struct CudaRunStats {
  int64_t eagerRuns = 0;   ///< runs enqueued step by step
  int64_t captures = 0;    ///< graphs captured (the first, and re-captures)
  int64_t graphReplays = 0;
  int64_t timelineRuns = 0; ///< AMPJIT_TIMELINE's stamped run (its own graph, or step by step)
  int64_t kernelsCompiled = 0; ///< NVRTC compilations at prepare (cache misses)
  int64_t kernelCacheHits = 0;
  /// Chunks of finiteness checks that run on the side stream, under the
  /// backward GEMMs, instead of after them (per run).
  int64_t sideStreamChunks = 0;
  /// Launches of a deferred optimizer update (Plan::deferredSteps) that run
  /// on the side stream beside the forward (per run).
  int64_t deferredUpdateGroups = 0;
  /// The plan's side steps (Plan::sideSteps: weight gradients) that run on
  /// the side stream beside the backward (per run).
  int64_t sideSteps = 0;
  /// GEMM launches prepared to leave CudaBackendOptions::gemmSmReserve SMs
  /// to the deferred update running beside them (per run).
  int64_t gemmsBesideDeferredUpdate = 0;
  /// Optimizer updates run speculatively (per run), and when none is, why
  /// (CudaBackendOptions::speculativeUpdateMinimumElements).
  int64_t speculativeUpdates = 0;
  std::string speculationDeclined{};
  /// Device bytes of the second buffers of the state they rewrite.
  int64_t speculativeStateBytes = 0;
  /// Gradients a speculative update checks for inf and NaN as it reads them,
  /// which the finiteness check then leaves out (per run).
  int64_t gradientsCheckedByTheirUpdate = 0;
  /// Speculative updates computed in their gradient's GEMM (per run,
  /// CudaBackendOptions::foldUpdatesIntoGemms), and why an update was not
  /// when some were not.
  int64_t updatesFoldedIntoGemms = 0;
  std::string gemmFoldDeclined{};
  /// GEMM steps whose algorithm tuning chose (CudaBackendOptions::
  /// gemmTuningMinimumFlops): timed at this prepare, chosen earlier in the
  /// process, or read from the disk cache; and of those, the steps that run
  /// another algorithm than the heuristic's first.
  int64_t gemmsTuned = 0;
  int64_t gemmsOffHeuristic = 0;
  /// At this prepare: the distinct problems timed, the choices read from
  /// disk, the entries there ignored as malformed or stale (and replaced),
  /// and the host milliseconds the timing took.
  int64_t gemmProblemsTimed = 0;
  int64_t gemmTuningCacheHits = 0;
  int64_t gemmTuningEntriesRejected = 0;
  double gemmTuningMilliseconds = 0;
  /// Of the problems timed at this prepare: the candidates that ran their
  /// screening run (what the heuristic offered, less what cuBLASLt
  /// refused), and the finalists among them that ran the full trials.
  int64_t gemmTuningCandidatesScreened = 0;
  int64_t gemmTuningFinalistsTimed = 0;
  /// Why a GEMM that tuning wanted kept the heuristic's first algorithm
  /// (its scratch operands did not fit in device memory); empty if none did.
  std::string gemmTuningDeclined{};
  /// Kernel and library launches a run enqueues (steps sharing a launch
  /// counted once, a reshape that views its input not at all): the nodes a
  /// step's graph replays one after another.
  int64_t launchesPerRun = 0;
  /// Why runs go step by step instead of replaying a graph (a capture or an
  /// instantiation failed); empty while graphs work.
  std::string graphDisabledReason{};
};

/// A device-to-host copy in flight: the value of a loss, the scale or the
/// found-inf flag after a step, without making the next step wait.
class AsyncHostCopy {
public:
  virtual ~AsyncHostCopy() = default;
  /// Whether the copy has finished (never blocks).
  virtual bool ready() = 0;
  /// Waits for the copy and returns the host tensor.
  virtual Expected<Tensor> wait() = 0;
};

class CudaBackend;

/// A value read to the host that may arrive later: what the C API's
/// ampjit_host_copy and jit::cuda::HostCopy hold. A device tensor is copied
/// to pinned memory on the stream of the backend that wrote it, after the
/// work enqueued there so far (CudaBackend::copyToHostAsync); a host tensor
/// is cloned at once. Either way a later write to the tensor does not reach
/// the value. The copy keeps what it needs of the device alive, so it may
/// outlive the backend that started it.
class PendingHostRead {
public:
  /// Starts reading `tensor`. `writer` is the backend whose stream writes a
  /// device tensor; unused (and may be null) for a host tensor.
  static Expected<PendingHostRead> start(const Tensor& tensor, CudaBackend* writer);

  /// Whether the value has arrived (never blocks).
  bool ready();
  /// The value on the host, waiting for it the first time; later calls
  /// return what arrived (sharing its bytes) without waiting.
  Expected<Tensor> wait();

private:
  PendingHostRead() = default;

  /// The copy in flight, until wait() takes its value.
  std::unique_ptr<AsyncHostCopy> inFlight_;
  std::optional<Tensor> arrived_;
};

/// A point in the backend's stream, for timing GPU work with CUDA events.
class DeviceEvent {
public:
  virtual ~DeviceEvent() = default;
  /// GPU milliseconds from this event to `later`, waiting for `later` to complete.
  virtual Expected<double> millisecondsUntil(DeviceEvent& later) = 0;
};

class CudaBackend : public Backend {
public:
  /// Records an event after all work enqueued so far.
  virtual Expected<std::unique_ptr<DeviceEvent>> recordEvent() = 0;
  /// Enqueues a copy of `tensor` into pinned host memory, ordered after all
  /// work enqueued so far.
  virtual Expected<std::unique_ptr<AsyncHostCopy>> copyToHostAsync(const Tensor& tensor) = 0;
  /// A device tensor with `host`'s bytes (`host` may already be on the device).
  virtual Expected<Tensor> toDevice(const Tensor& host) = 0;
  /// Copies the caller's bytes (`tensor`'s byte size of them) at `source`
  /// into `tensor`, a device tensor of this backend, which keeps its address:
  /// graphs captured on it stay valid. Ordered after the work enqueued so far.
  ///   * `source` in host memory (`callerStream` unused): the call returns
  ///     once the bytes are staged, so the caller may change them at once.
  ///   * `source` in device memory (`sourceOnDevice`): memory of this
  ///     backend's device, or managed memory; anything else is an error that
  ///     says what it is. The copy also follows the work enqueued so far on
  ///     `callerStream` (a cudaStream_t; nullptr: the legacy default stream),
  ///     and the caller's later work there waits for it, so the caller may
  ///     reuse `source` in its own stream order. The host waits for nothing.
  virtual Status copyIntoTensor(Tensor& tensor, const void* source, bool sourceOnDevice, void* callerStream) = 0;
  /// `tensor`'s bytes into the caller's device memory at `destination`
  /// (checked as copyIntoTensor checks a device source), ordered after the
  /// work enqueued so far here and on `callerStream`, and before the
  /// caller's later work there. The host waits for nothing.
  virtual Status copyTensorToDeviceMemory(const Tensor& tensor, void* destination, void* callerStream) = 0;
  /// Waits for everything enqueued so far.
  virtual Status synchronize() = 0;
  /// Device bytes the pool has handed out at most since the backend began.
  virtual int64_t peakDeviceBytes() = 0;
  /// The CUDA stream every run is enqueued on (a cudaStream_t), for callers
  /// that time it with events.
  virtual void* stream() = 0;
  /// The device's architecture as NVRTC and the AMP pass's `target` name it ("sm_90").
  virtual std::string architecture() const = 0;
  /// Statistics of an Executable this backend prepared.
  virtual CudaRunStats stats(const Executable& executable) const = 0;
  /// Whether its plans' optimizer updates may run speculatively
  /// (CudaBackendOptions::speculativeUpdateMinimumElements, resolved).
  virtual bool speculatesOptimizerUpdates() const = 0;
  /// Whether prepare(plan) would run `plan`'s optimizer updates
  /// speculatively: they qualify and cover the minimum. jit::trace defers a
  /// large update that this backend would not speculate.
  virtual bool speculatesOptimizerUpdatesOf(const Plan& plan) const = 0;
  /// The options it was created with, each -1 replaced by what the
  /// environment switched on or off.
  virtual CudaBackendOptions resolvedOptions() const = 0;
};

Expected<std::unique_ptr<CudaBackend>> createCudaBackend(CudaBackendOptions options = {});

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_CUDABACKEND_H
