// The CUDA backend (CudaBackend.h): memory from the device's stream-ordered
// pool, plans prepared into DeviceSteps, runs enqueued on one stream and,
// from the second run on, replayed as one CUDA graph.

#include "ampjit/runtime/CudaBackend.h"

#include "DeviceStep.h"
#include "FiniteCheckSchedule.h"
#include "GemmTuning.h"
#include "SpeculativeUpdates.h"
#include "Nvrtc.h"
#include "Timeline.h"
#include "UpdateKernels.h"

#include "ampjit/runtime/Environment.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>

namespace ampjit::runtime {

int cudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError(); // clear the sticky "no driver" error for later calls
    return 0;
  }
  return count;
}

namespace {

using cuda::DeviceContext;
using cuda::DeviceStep;
using cuda::StepPointers;

/// The updates of `plan` that run speculatively on a backend with these
/// options, or nothing with the reason: the one decision prepare makes and
/// CudaBackend::speculatesOptimizerUpdatesOf (jit::trace's question) reports.
std::optional<cuda::SpeculationSchedule> speculationOf(const Plan& plan, int64_t minimumElements,
                                                       bool checkNumerics, std::string& whyNot) {
  if (minimumElements <= 0) {
    whyNot = "switched off (AMPJIT_CUDA_SPECULATIVE_UPDATE=0)";
    return std::nullopt;
  }
  if (checkNumerics) {
    whyNot = "AMPJIT_CHECK_NUMERICS runs every step in line";
    return std::nullopt;
  }
  return cuda::scheduleSpeculativeUpdates(plan, minimumElements, &whyNot);
}

/// Where one copy to the host (copyToHostAsync) lands and says it has.
struct HostCopySlot {
  void* pinned = nullptr;
  /// The buffer's size: a power of two, 256 at least, so that one buffer
  /// serves values of similar sizes.
  std::size_t bytes = 0;
  cudaEvent_t done = nullptr;
};

/// Pinned host buffers and their events, kept for the next copy to the host
/// instead of freed: cudaMallocHost costs far more than a small copy, and
/// the CUDA guide lists a page-locked allocation among what keeps two
/// streams' work from running concurrently, so a loss read every step would
/// pay both each step (and an event's creation and destruction).
/// A copy gives its slot back when it is dropped, arrived or not, without
/// waiting: every copy is enqueued on the runtime's one stream, so the next
/// copy into the buffer lands after this one, and only a copy's holder reads
/// its buffer, after its own event. Dropping a read never stalls the host.
class HostCopySlots {
public:
  HostCopySlots() = default;
  HostCopySlots(const HostCopySlots&) = delete;
  HostCopySlots& operator=(const HostCopySlots&) = delete;
  /// Runs after DeviceRuntime's destructor has synchronized its stream.
  ~HostCopySlots() {
    for (const auto& [bytes, slot] : free_) {
      cudaEventDestroy(slot.done);
      cudaFreeHost(slot.pinned);
    }
  }

  /// A slot whose buffer holds at least `bytes`, reused or newly made.
  Expected<HostCopySlot> take(std::size_t bytes) {
    std::size_t rounded = std::bit_ceil(std::max<std::size_t>(bytes, 256));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto found = free_.find(rounded); found != free_.end()) {
        HostCopySlot slot = found->second;
        free_.erase(found);
        return slot;
      }
    }
    HostCopySlot slot{.bytes = rounded};
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaMallocHost(&slot.pinned, rounded),
                                "pinning " + std::to_string(rounded) + " bytes of host memory");
    if (cudaError_t error = cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming); error != cudaSuccess) {
      cudaFreeHost(slot.pinned);
      return cuda::cudaFailure(error, "creating a device-to-host copy's event");
    }
    return slot;
  }
  /// Takes back a slot take() gave, its copy possibly still in flight.
  void give(HostCopySlot slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.emplace(slot.bytes, slot);
  }

private:
  std::mutex mutex_;
  std::multimap<std::size_t, HostCopySlot> free_;
};

/// What outlives the backend object for as long as anything uses it: the
/// stream, the library handles and the loaded kernels. The backend, each
/// Executable and each device tensor hold it, so a tensor freed after its
/// backend still has a stream to free on.
struct DeviceRuntime {
  int device = 0;
  cudaStream_t stream = nullptr;
  /// Where memory-bound work overlaps the main stream's GEMMs
  /// (FiniteCheckSchedule.h); every run joins it back before it returns.
  cudaStream_t sideStream = nullptr;
  /// Whether the streams have different priorities, which captured graphs
  /// keep (cudaGraphInstantiateFlagUseNodePriority); not under
  /// AMPJIT_CUDA_EQUAL_STREAM_PRIORITIES=1, to measure what they buy.
  bool streamPriorities = true;
  cudaMemPool_t pool = nullptr;
  /// For copies between a caller's stream and `stream`
  /// (CudaBackend::copyIntoTensor): the caller's work so far, and the copy.
  /// Made at the first such copy; re-recorded by each, which a wait already
  /// enqueued does not see.
  cudaEvent_t callerWorkDone = nullptr, callerCopyDone = nullptr;
  HostCopySlots hostCopySlots;
  cuda::KernelCompiler compiler;
  /// In use (context.gemmTuner) where GEMMs are tuned.
  cuda::GemmTuner gemmTuner;
  DeviceContext context;

  explicit DeviceRuntime(std::filesystem::path cacheDirectory) : compiler(std::move(cacheDirectory)) {}
  ~DeviceRuntime() {
    cudaSetDevice(device);
    if (stream)
      cudaStreamSynchronize(stream);
    if (sideStream) {
      cudaStreamSynchronize(sideStream);
      cudaStreamDestroy(sideStream);
    }
    for (cudaEvent_t event : {callerWorkDone, callerCopyDone})
      if (event)
        cudaEventDestroy(event);
    if (context.cudnn)
      cudnnDestroy(context.cudnn);
    if (context.cublasLt)
      cublasLtDestroy(context.cublasLt);
    for (cudaLibrary_t library : context.loadedLibraries)
      cudaLibraryUnload(library);
    if (stream)
      cudaStreamDestroy(stream);
  }
};

/// Device bytes from the pool, freed back to it (stream-ordered) with the
/// last handle. Rounded up so every allocation keeps kTensorAlignment.
Expected<std::shared_ptr<Storage>> allocateDevice(const std::shared_ptr<DeviceRuntime>& runtime, std::size_t bytes,
                                                  bool zeroFill) {
  std::size_t rounded = std::max<std::size_t>(256, (bytes + 255) / 256 * 256);
  void* memory = nullptr;
  cudaError_t error = cudaMallocFromPoolAsync(&memory, rounded, runtime->pool, runtime->stream);
  if (error != cudaSuccess)
    return cuda::cudaFailure(error, "allocating " + std::to_string(bytes) + " bytes of device memory");
  if (zeroFill) {
    error = cudaMemsetAsync(memory, 0, rounded, runtime->stream);
    if (error != cudaSuccess) {
      cudaFreeAsync(memory, runtime->stream);
      return cuda::cudaFailure(error, "zero-filling device memory");
    }
  }
  return Storage::adopt(static_cast<std::byte*>(memory), bytes, Device::Cuda,
                        [runtime](std::byte* data) { cudaFreeAsync(data, runtime->stream); });
}

Expected<Tensor> allocateDeviceTensor(const std::shared_ptr<DeviceRuntime>& runtime, const TensorType& type,
                                      bool zeroFill) {
  if (checkedElementCount(type.shape) < 0)
    return Status::error("cannot allocate a tensor of shape " + shapeToString(type.shape));
  Expected<std::shared_ptr<Storage>> storage = allocateDevice(runtime, type.byteSize(), zeroFill);
  if (!storage)
    return storage.status();
  return Tensor::wrap(type, std::move(*storage));
}

/// A DeviceStep and the plan steps it runs (several for a multi-tensor group).
struct PreparedStep {
  std::unique_ptr<DeviceStep> step;
  std::vector<std::size_t> indices;
  /// After the deferred update: the latest of its side-stream launches (in
  /// their order) that must finish before this step, or -1.
  std::ptrdiff_t deferredDue = -1;
  /// The SMs a GEMM's algorithm was chosen for (0: all).
  int smCountTarget = 0;
};

/// An AllFinite step checked partly on the side stream.
struct SplitFiniteCheck {
  std::size_t stepIndex;
  cuda::FiniteCheckSchedule schedule;
  std::shared_ptr<Storage> flag; ///< its own byte: the step's output may be another temporary's until the step
  cudaEvent_t sideDone;
  std::vector<cudaEvent_t> chunkReady; ///< per early chunk, recorded on the main stream after its writer
};

/// A plan side step (Plan::sideSteps) run on the side stream: forked where
/// it stands, joined before its joinBefore step.
struct SideLaneStep {
  std::size_t step;
  std::size_t joinBefore;
  cudaEvent_t fork = nullptr, done = nullptr;
};

/// AMPJIT_TIMELINE's run as it enqueues: per launch its JSON fields and
/// stream, and the device buffer of its stamps (before and after each).
struct TimelineRecording {
  struct Launch {
    std::string fields;
    bool side = false;
  };
  std::shared_ptr<Storage> stamps;
  std::size_t capacity = 0; ///< launches the stamps have room for
  std::vector<Launch> launches;
};

/// AMPJIT_PROFILE=<file> (a run step by step with timed launches) and
/// AMPJIT_TIMELINE=<file> (a run as replayed, each launch stamped on its
/// stream): which run of each plan is observed (AMPJIT_PROFILE_RUN,
/// AMPJIT_TIMELINE_RUN, default the 8th, after warm-up), and the file its
/// JSON lines are appended to.
struct ObservedRun {
  std::string pathVariable;
  std::string path;
  int64_t run = 8;
  /// Why the run variable cannot be used (not a number from 1 up), naming
  /// it; prepare reports it where a path asks for the run.
  std::string error;

  static ObservedRun fromEnvironment(const char* pathVariable, const char* runVariable) {
    ObservedRun request;
    request.pathVariable = pathVariable;
    if (const char* path = std::getenv(pathVariable))
      request.path = path;
    std::optional<long long> run = environmentInteger(runVariable, request.run);
    if (run && *run >= 1)
      request.run = *run;
    else
      request.error = std::string(runVariable) + "='" + std::getenv(runVariable) +
                      "' is not a run number (1 is the first run of each plan)";
    return request;
  }
  /// What stops the observation, for prepare to refuse before any step runs:
  /// a bad run number, or a file that cannot be opened for appending (a
  /// write failing only after the observed step has run would report an
  /// error for a step that did run). Empty when nothing is asked or all is well.
  std::string problem() const {
    if (path.empty())
      return {};
    if (!error.empty())
      return error;
    if (!std::ofstream(path, std::ios::app))
      return pathVariable + "='" + path + "': cannot open the file for appending";
    return {};
  }
  /// Whether the run after `runsSoFar` earlier ones is the profiled one.
  bool due(int64_t runsSoFar) const { return !path.empty() && runsSoFar + 1 == run; }
};

std::string jsonString(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      quoted += '\\';
    if (static_cast<unsigned char>(c) < 0x20)
      continue;
    quoted += c;
  }
  return quoted + "\"";
}

class CudaExecutable final : public Executable {
public:
  CudaExecutable(Plan plan, std::shared_ptr<DeviceRuntime> runtime, bool useGraphs, bool checkNumerics,
                 int gemmSmReserve, int64_t speculativeMinimumElements, bool foldUpdatesIntoGemms)
      : plan_(std::move(plan)), runtime_(std::move(runtime)), useGraphs_(useGraphs && !checkNumerics),
        checkNumerics_(checkNumerics), gemmSmReserve_(gemmSmReserve),
        speculativeMinimumElements_(speculativeMinimumElements), foldUpdatesIntoGemms_(foldUpdatesIntoGemms),
        deferredUpdateInLine_(environmentFlag("AMPJIT_CUDA_DEFERRED_UPDATE_IN_LINE")),
        evictFirst_(cuda::evictFirstHints()), deferred_(plan_) {}

  ~CudaExecutable() override {
    for (CachedGraph& cached : graphs_)
      cudaGraphExecDestroy(cached.exec);
    for (SpeculativeLaunch& launch : speculativeLaunches_)
      for (cudaEvent_t event : {launch.fork, launch.done})
        if (event)
          cudaEventDestroy(event);
    for (SideLaneStep& side : sideLane_)
      for (cudaEvent_t event : {side.fork, side.done})
        if (event)
          cudaEventDestroy(event);
    for (SplitFiniteCheck& split : splitChecks_) {
      for (cudaEvent_t event : split.chunkReady)
        cudaEventDestroy(event);
      if (split.sideDone)
        cudaEventDestroy(split.sideDone);
    }
    for (cudaEvent_t event : deferredDone_)
      cudaEventDestroy(event);
    if (deferredFork_)
      cudaEventDestroy(deferredFork_);
    for (PinnedInput& pinned : pinnedInputs_) {
      if (pinned.copied) {
        cudaEventSynchronize(pinned.copied);
        cudaEventDestroy(pinned.copied);
      }
      if (pinned.host)
        cudaFreeHost(pinned.host);
    }
  }

  Status prepare() {
    for (const ObservedRun* observed : {&profile_, &timeline_})
      if (std::string problem = observed->problem(); !problem.empty())
        return Status::error("plan @" + plan_.name + ": " + problem);
    DeviceContext& context = runtime_->context;
    int64_t compiledBefore = context.kernelsCompiled, hitsBefore = context.kernelCacheHits;
    const cuda::GemmTuningCounts tunedBefore = runtime_->gemmTuner.counts;
    // Every generated kernel is emitted once, then all are compiled together;
    // steps that share a launch (conversions) need none.
    AMPJIT_RETURN_IF_ERROR(planRederivation());
    std::vector<std::pair<std::size_t, std::size_t>> groups = cuda::launchGroups(plan_);
    if (checkNumerics_)
      groups = splitUnstoredOutputs(std::move(groups));
    planSpeculation();
    groups = splitSpeculatedSteps(std::move(groups));
    Expected<std::vector<std::optional<cuda::ElementwiseKernel>>> emitted = cuda::generatedKernels(plan_, groups);
    if (!emitted)
      return emitted.status();
    std::vector<std::optional<cuda::ElementwiseKernel>>& kernels = *emitted;
    std::vector<const cuda::ElementwiseKernel*> toCompile;
    for (const std::optional<cuda::ElementwiseKernel>& kernel : kernels)
      if (kernel)
        toCompile.push_back(&*kernel);
    for (const Rederivation& rederivation : rederivations_)
      toCompile.push_back(&rederivation.kernel);
    if (Status compiled = cuda::precompileGeneratedKernels(context, toCompile); !compiled)
      return Status::error("plan @" + plan_.name + ": compiling its kernels: " + compiled.message());
    std::vector<std::ptrdiff_t> joins = cuda::deferredJoins(plan_, groups);
    std::vector<bool> besideUpdate = besideDeferredUpdate(groups, joins);
    std::vector<bool> besideSpeculation = besideSpeculativeUpdate(groups);
    for (std::size_t g = 0; g < groups.size(); ++g)
      besideUpdate[g] = besideUpdate[g] || besideSpeculation[g];
    int gemmSmCountTarget = gemmSmReserve_ > 0 ? context.multiprocessorCount - gemmSmReserve_ : 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      auto [index, end] = groups[g];
      bool leavesSms = gemmSmCountTarget > 0 && besideUpdate[g] && end - index == 1 &&
                       plan_.steps[index].kind == StepKind::Gemm && !kernels[index];
      stats_.gemmsBesideDeferredUpdate += leavesSms;
      Expected<std::unique_ptr<DeviceStep>> step =
          makeStep(index, end, kernels[index], leavesSms ? gemmSmCountTarget : 0);
      if (!step)
        return Status::error(describeStepOfPlan(plan_, index) + ": " + step.message());
      PreparedStep prepared;
      prepared.step = std::move(*step);
      prepared.deferredDue = joins[g];
      prepared.smCountTarget = leavesSms ? gemmSmCountTarget : 0;
      if (leavesSms)
        lastReservedGemm_ = index;
      for (std::size_t i = index; i < end; ++i)
        prepared.indices.push_back(i);
      workspaceBytes_ = std::max(workspaceBytes_, prepared.step->workspaceBytes());
      steps_.push_back(std::move(prepared));
    }
    stats_.launchesPerRun = int64_t(cuda::launchesPerRun(plan_, groups));
    stats_.kernelsCompiled = context.kernelsCompiled - compiledBefore;
    stats_.kernelCacheHits = context.kernelCacheHits - hitsBefore;

    // Fixed memory: the arena, the workspace, and per buffer the constants'
    // bytes, the outputs' buffers and the inputs' staging buffers, so that
    // a captured graph's addresses stay valid for every later run.
    AMPJIT_RETURN_IF_ERROR(allocateFixed(arena_, plan_.arenaBytes, "its arena"));
    AMPJIT_RETURN_IF_ERROR(allocateFixed(workspace_, workspaceBytes_, "the steps' workspace"));
    if (checkNumerics_)
      AMPJIT_RETURN_IF_ERROR(allocateFixed(finiteFlag_, 1, "the numerics check's flag"));
    AMPJIT_RETURN_IF_ERROR(prepareSplitFiniteChecks());
    AMPJIT_RETURN_IF_ERROR(prepareDeferredUpdate());
    AMPJIT_RETURN_IF_ERROR(prepareSideLane());
    AMPJIT_RETURN_IF_ERROR(prepareSpeculation());
    fixed_.resize(plan_.buffers.size());
    for (BufferId id = 0; id < plan_.buffers.size(); ++id) {
      const BufferDesc& buffer = plan_.buffers[id];
      if (buffer.role != BufferRole::Constant && buffer.role != BufferRole::Output &&
          buffer.role != BufferRole::Input && buffer.role != BufferRole::Carried)
        continue;
      // allocateFixed zero-fills: carried buffers start at zero, as the plan model says.
      AMPJIT_RETURN_IF_ERROR(allocateFixed(fixed_[id], buffer.type.byteSize(), "buffer %" + std::to_string(id)));
      if (buffer.role == BufferRole::Constant && !buffer.constantData.empty())
        AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(fixed_[id]->data(), buffer.constantData.data(),
                                                    buffer.constantData.size(), cudaMemcpyHostToDevice,
                                                    runtime_->stream),
                                    "plan @" + plan_.name + ": uploading constant %" + std::to_string(id));
    }
    AMPJIT_RETURN_IF_ERROR(prepareRederivation());
    cuda::GemmTuningCounts tuned = runtime_->gemmTuner.counts.since(tunedBefore);
    stats_.gemmsTuned = tuned.stepsTuned;
    stats_.gemmsOffHeuristic = tuned.stepsOffHeuristic;
    stats_.gemmProblemsTimed = tuned.problemsTimed;
    stats_.gemmTuningCacheHits = tuned.cacheHits;
    stats_.gemmTuningEntriesRejected = tuned.cacheEntriesRejected;
    stats_.gemmTuningMilliseconds = tuned.timingMilliseconds;
    stats_.gemmTuningCandidatesScreened = tuned.candidatesScreened;
    stats_.gemmTuningFinalistsTimed = tuned.finalistsTimed;
    if (tuned.stepsUntuned > 0)
      stats_.gemmTuningDeclined = runtime_->gemmTuner.untunedReason;
    // Prepare may wait: surface any failure of the uploads now, not in a run.
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(runtime_->stream), "plan @" + plan_.name + ": preparing");
    return Status::success();
  }

  const Plan& plan() const override { return plan_; }

  bool deferredPending() const override { return deferred_.pending(); }

  Status completeDeferred(std::span<Tensor> arguments) override {
    AMPJIT_RETURN_IF_ERROR(deferred_.checkCompletion(plan_, arguments));
    if (!deferred_.pending())
      return Status::success();
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaSetDevice(runtime_->device), "selecting the device");
    std::vector<void*> argumentKey;
    AMPJIT_RETURN_IF_ERROR(bindBuffers(arguments, /*stageInputs=*/false, argumentKey));
    // Alone, the update runs on the main stream: nothing is left to overlap.
    AMPJIT_RETURN_IF_ERROR(enqueueSteps(runtime_->stream, 0, plan_.deferredSteps, /*overlap=*/false));
    deferred_.completed();
    return Status::success();
  }

  Expected<std::vector<Tensor>> run(std::span<Tensor> arguments) override {
    AMPJIT_RETURN_IF_ERROR(checkArguments(plan_, arguments));
    Expected<std::size_t> firstStep = deferred_.firstStep(plan_, arguments);
    if (!firstStep)
      return firstStep.status();
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaSetDevice(runtime_->device), "selecting the device");
    cudaStream_t stream = runtime_->stream;
    std::vector<void*> argumentKey;
    AMPJIT_RETURN_IF_ERROR(bindBuffers(arguments, /*stageInputs=*/true, argumentKey));
    if (checkNumerics_)
      AMPJIT_RETURN_IF_ERROR(checkArgumentNumerics(stream));
    enqueuedSpeculatively_ = false;

    // A graph holds the whole plan, deferred update included; a run without
    // a pending update (the first, or the first after completeDeferred) goes
    // step by step.
    bool wholePlan = *firstStep == 0;
    int64_t runsSoFar = stats_.eagerRuns + stats_.graphReplays + stats_.timelineRuns;
    // An observed run's file is written after its step has run: a failure
    // to write is reported once the run's bookkeeping is done.
    Status written = Status::success();
    if (profile_.due(runsSoFar)) {
      // One warm run step by step with an event between launches (AMPJIT_PROFILE).
      AMPJIT_RETURN_IF_ERROR(profileSteps(stream, *firstStep, written));
      ++stats_.eagerRuns;
    } else if (timeline_.due(runsSoFar)) {
      // One warm run as replayed, each launch stamped (AMPJIT_TIMELINE).
      AMPJIT_RETURN_IF_ERROR(timelineRun(stream, *firstStep, written));
      ++stats_.timelineRuns;
    } else if (!useGraphs_ || stats_.eagerRuns == 0 || !graphFailure_.empty() || !wholePlan) {
      // The first run goes step by step: it loads lazily initialised library
      // state (cuBLASLt, cuDNN) outside any capture.
      AMPJIT_RETURN_IF_ERROR(enqueueSteps(stream, *firstStep, plan_.steps.size(), !checkNumerics_));
      ++stats_.eagerRuns;
    } else {
      auto cached = std::find_if(graphs_.begin(), graphs_.end(),
                                 [&](const CachedGraph& graph) { return graph.key == argumentKey; });
      if (cached == graphs_.end()) {
        AMPJIT_RETURN_IF_ERROR(capture(stream, argumentKey));
      } else {
        // The most recently used last: a capture replaces the first.
        std::rotate(cached, cached + 1, graphs_.end());
        // The key carries bindSecondBuffers' mark: a graph of this key was
        // captured speculating exactly when this run speculates.
        enqueuedSpeculatively_ = speculating_;
      }
      if (graphFailure_.empty()) {
        AMPJIT_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_.back().exec, stream),
                                    "plan @" + plan_.name + ": launching its graph");
        ++stats_.graphReplays;
      } else {
        // The capture failed and capture() has already run this run's steps
        // one by one: launching now would run them a second time (and, after
        // a failed re-capture, on the old graph's stale state addresses).
        ++stats_.eagerRuns;
      }
    }
    deferred_.ran(plan_, arguments);
    if (enqueuedSpeculatively_)
      AMPJIT_RETURN_IF_ERROR(handOverSecondBuffers(arguments));
    AMPJIT_RETURN_IF_ERROR(written);

    std::vector<Tensor> results;
    for (const PlanResult& result : plan_.results) {
      const BufferDesc& buffer = plan_.buffers[result.buffer];
      if (result.tiedArgument >= 0) {
        results.push_back(arguments[std::size_t(result.tiedArgument)]);
        continue;
      }
      // Outputs live in fixed buffers the next run overwrites: each run's
      // results are copies the caller owns.
      Expected<Tensor> copy = allocateDeviceTensor(runtime_, buffer.type, false);
      if (!copy)
        return Status::error("plan @" + plan_.name + ": " + copy.message());
      if (copy->byteSize() > 0)
        AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(copy->bytes(), pointers_[result.buffer], copy->byteSize(),
                                                    cudaMemcpyDeviceToDevice, stream),
                                    "plan @" + plan_.name + ": copying a result");
      results.push_back(std::move(*copy));
    }
    return results;
  }

  /// Every buffer's device address for one run; inputs are copied into
  /// their staging buffers when `stageInputs` (a completion reads none).
  /// `argumentKey` collects the state addresses a graph depends on.
  Status bindBuffers(std::span<Tensor> arguments, bool stageInputs, std::vector<void*>& argumentKey) {
    cudaStream_t stream = runtime_->stream;
    pointers_.assign(plan_.buffers.size(), nullptr);
    for (BufferId id = 0; id < plan_.buffers.size(); ++id) {
      const BufferDesc& buffer = plan_.buffers[id];
      switch (buffer.role) {
      case BufferRole::Temporary: pointers_[id] = arena_->data() + buffer.arenaOffset; break;
      case BufferRole::Constant:
      case BufferRole::Output:
      case BufferRole::Carried: pointers_[id] = fixed_[id]->data(); break;
      case BufferRole::Input: {
        // A new batch is copied into the staging buffer the graph reads, from
        // host or device memory alike.
        const Tensor& input = arguments[std::size_t(buffer.argument)];
        pointers_[id] = fixed_[id]->data();
        if (!stageInputs || input.byteSize() == 0)
          break;
        if (input.device() == Device::Cuda)
          AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pointers_[id], input.bytes(), input.byteSize(),
                                                      cudaMemcpyDeviceToDevice, stream),
                                      "plan @" + plan_.name + ": copying " + describeArgument(plan_, buffer.argument));
        else
          AMPJIT_RETURN_IF_ERROR(stageHostInput(id, input, stream));
        break;
      }
      default: {
        Tensor& state = arguments[std::size_t(buffer.argument)];
        if (!stageInputs && !state.defined())
          break; // a completion need not pass what the update does not touch
        if (state.device() != Device::Cuda)
          return Status::error("plan @" + plan_.name + ": " + describeArgument(plan_, std::size_t(buffer.argument)) +
                               " is in host memory; the CUDA backend reads and updates state on the device "
                               "(allocate it with the backend or copy it there with toDevice)");
        pointers_[id] = state.bytes();
        argumentKey.push_back(pointers_[id]);
        break;
      }
      }
    }
    // A view of an argument, constant or carried buffer reads its memory.
    for (BufferId id = 0; id < plan_.buffers.size(); ++id)
      if (plan_.buffers[id].viewOf >= 0)
        pointers_[id] = pointers_[std::size_t(plan_.buffers[id].viewOf)];
    // A hoisted step's output lives in memory of its own in every run, so
    // that the steps between the run's start and its place keep its bytes.
    for (const auto& [id, storage] : hoistedOutputs_)
      pointers_[id] = storage->data();
    speculating_ = false;
    if (stageInputs && speculation_)
      AMPJIT_RETURN_IF_ERROR(bindSecondBuffers(arguments, argumentKey));
    return Status::success();
  }

  /// The second buffer of each piece of state the speculative updates
  /// rewrite, as large as the state's storage (allocated when first needed
  /// or when the state moves to storage of another size); their addresses
  /// join `argumentKey`, with a mark that the run speculates. (checkArguments
  /// has refused state updated in place whose storage another argument shares.)
  Status bindSecondBuffers(std::span<Tensor> arguments, std::vector<void*>& argumentKey) {
    for (const cuda::SpeculativeUpdate& update : speculation_->updates)
      for (BufferId id : update.rewritten) {
        if (id == kNoBuffer)
          continue;
        const Storage& storage = *arguments[std::size_t(plan_.buffers[id].argument)].storage();
        std::shared_ptr<Storage>& second = secondBuffers_[id];
        if (!second || second->size() != storage.size()) {
          if (second)
            stats_.speculativeStateBytes -= int64_t(second->size());
          AMPJIT_RETURN_IF_ERROR(allocateFixed(second, storage.size(), "the second buffer of " + describeBuffer(plan_, id)));
          stats_.speculativeStateBytes += int64_t(second->size());
        }
        argumentKey.push_back(second->data());
      }
    argumentKey.push_back(&speculation_); // a mark: the key of a speculative run
    speculating_ = true;
    return Status::success();
  }

  /// After a speculative run: each state tensor takes the buffer its new
  /// value went to, and the next run writes into the old one.
  Status handOverSecondBuffers(std::span<Tensor> arguments) {
    for (auto& [id, second] : secondBuffers_) {
      const std::shared_ptr<Storage>& storage = arguments[std::size_t(plan_.buffers[id].argument)].storage();
      if (!storage || !storage->exchangeBytes(*second))
        return Status::error("plan @" + plan_.name + ": " + describeBuffer(plan_, id) +
                             " changed storage while its speculative update ran (a backend bug)");
    }
    return Status::success();
  }

  /// Copies a host input into its staging buffer through pinned memory of
  /// its own. A copy from pageable memory first waits for the stream, so the
  /// host could not enqueue a step while the last one ran. The pinned bytes
  /// are reused once the last run's copy has read them.
  Status stageHostInput(BufferId id, const Tensor& input, cudaStream_t stream) {
    std::string what = "plan @" + plan_.name + ": copying " + describeArgument(plan_, plan_.buffers[id].argument);
    if (pinnedInputs_.size() < plan_.buffers.size())
      pinnedInputs_.resize(plan_.buffers.size());
    PinnedInput& pinned = pinnedInputs_[id];
    if (pinned.host == nullptr) {
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaMallocHost(&pinned.host, input.byteSize()), what + ": pinning host memory");
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&pinned.copied, cudaEventDisableTiming), what);
    } else {
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(pinned.copied), what + ": waiting for the last run's copy");
    }
    std::memcpy(pinned.host, input.bytes(), input.byteSize());
    AMPJIT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(pointers_[id], pinned.host, input.byteSize(), cudaMemcpyHostToDevice, stream), what);
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventRecord(pinned.copied, stream), what);
    return Status::success();
  }

  Status rederive(std::span<Tensor> arguments) override {
    AMPJIT_RETURN_IF_ERROR(checkArguments(plan_, arguments));
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaSetDevice(runtime_->device), "selecting the device");
    for (const Rederivation& rederivation : rederivations_) {
      Tensor& source = arguments[rederivation.source];
      Tensor& derived = arguments[rederivation.derived];
      if (source.device() != Device::Cuda || derived.device() != Device::Cuda)
        return Status::error("plan @" + plan_.name + ": re-deriving " + describeArgument(plan_, rederivation.derived) +
                             " needs it and its source on the device");
      void* in[] = {source.bytes()};
      void* out[] = {derived.bytes()};
      AMPJIT_RETURN_IF_ERROR(rederivation.convert->enqueue(StepPointers{in, out, nullptr}, runtime_->stream));
    }
    return Status::success();
  }

  CudaRunStats stats() const {
    CudaRunStats stats = stats_;
    stats.graphDisabledReason = graphFailure_;
    return stats;
  }

private:
  /// Per launch group, whether a launch of the deferred update may still be
  /// running beside it: one the group does not wait for, directly or through
  /// an earlier group (`joins`, cuda::deferredJoins). Deferred groups
  /// themselves are not beside it.
  std::vector<bool> besideDeferredUpdate(const std::vector<std::pair<std::size_t, std::size_t>>& groups,
                                         const std::vector<std::ptrdiff_t>& joins) const {
    std::ptrdiff_t deferredLaunches = 0;
    for (auto [index, end] : groups)
      deferredLaunches += index < plan_.deferredSteps;
    std::vector<bool> beside(groups.size(), false);
    if (deferredUpdateInLine_)
      return beside;
    std::ptrdiff_t joined = -1;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      joined = std::max(joined, joins[g]);
      beside[g] = groups[g].first >= plan_.deferredSteps && joined < deferredLaunches - 1;
    }
    return beside;
  }

  /// The DeviceStep for steps [index, end); `kernel` is the generated kernel
  /// of an elementwise step, emitted once at prepare. A GEMM with
  /// `gemmSmCountTarget` > 0 is planned for that many SMs.
  Expected<std::unique_ptr<DeviceStep>> makeStep(std::size_t index, std::size_t end,
                                                 const std::optional<cuda::ElementwiseKernel>& kernel,
                                                 int gemmSmCountTarget) {
    DeviceContext& context = runtime_->context;
    const Step& step = plan_.steps[index];
    // A generated kernel may run a group (an elementwise step and its column sums).
    if (kernel)
      return cuda::makeGeneratedElementwiseStep(context, *kernel);
    if (end - index > 1) {
      std::vector<const Step*> group;
      for (std::size_t i = index; i < end; ++i)
        group.push_back(&plan_.steps[i]);
      return cuda::makeLaunchGroupStep(context, plan_, group);
    }
    if (step.kind == StepKind::Gemm) {
      bool foldMayReplace = std::any_of(gemmFoldCandidates_.begin(), gemmFoldCandidates_.end(),
                                        [&](const auto& candidate) { return candidate.second.gemm == index; });
      if (foldMayReplace)
        untimedUntilFoldDecided_.insert(index);
      return cuda::makeGemmStep(context, plan_, step, gemmSmCountTarget,
                                foldMayReplace ? cuda::GemmAlgorithmChoice::Heuristic
                                               : cuda::GemmAlgorithmChoice::TimedIfLarge);
    }
    if (cuda::runsThroughCudnn(step.kind))
      return cuda::makeCudnnStep(context, plan_, step, cudnnState_);
    if (cuda::runsAsHandwrittenKernel(step.kind))
      return cuda::makeHandwrittenStep(context, plan_, step);
    return Status::error("the CUDA backend has no kernel for " + std::string(stepKindName(step.kind)) + " steps");
  }

  Status allocateFixed(std::shared_ptr<Storage>& storage, uint64_t bytes, const std::string& what) {
    Expected<std::shared_ptr<Storage>> allocated = allocateDevice(runtime_, std::size_t(bytes), true);
    if (!allocated)
      return Status::error("plan @" + plan_.name + ": " + what + ": " + allocated.message());
    storage = std::move(*allocated);
    return Status::success();
  }

  //===--------------------------------------------------------------------===//
  // Speculative updates (SpeculativeUpdates.h)
  //===--------------------------------------------------------------------===//

  void planSpeculation() {
    std::string whyNot;
    speculation_ = speculationOf(plan_, speculativeMinimumElements_, checkNumerics_, whyNot);
    if (!speculation_) {
      stats_.speculationDeclined = whyNot;
      return;
    }
    stats_.speculativeUpdates = int64_t(speculation_->updates.size());
    for (std::size_t u = 0; u < speculation_->updates.size(); ++u)
      speculativeAt_[speculation_->updates[u].step] = u;
    hoistedSteps_.insert(speculation_->hoisted.begin(), speculation_->hoisted.end());
    if (!foldUpdatesIntoGemms_) {
      stats_.gemmFoldDeclined = "switched off (AMPJIT_CUDA_GEMM_FOLDED_UPDATE=0)";
      return;
    }
    for (std::size_t u = 0; u < speculation_->updates.size(); ++u) {
      std::string why;
      if (std::optional<cuda::GemmFold> fold = cuda::gemmFoldOf(plan_, speculation_->updates[u], why))
        gemmFoldCandidates_[u] = *fold;
      else if (stats_.gemmFoldDeclined.empty())
        stats_.gemmFoldDeclined = describeStep(plan_, speculation_->updates[u].step) + " " + why;
    }
  }

  /// Each speculative update and hoisted step in a launch of its own: they
  /// run apart from the steps they would share a launch with.
  std::vector<std::pair<std::size_t, std::size_t>> splitSpeculatedSteps(
      std::vector<std::pair<std::size_t, std::size_t>> groups) const {
    if (!speculation_)
      return groups;
    std::vector<std::pair<std::size_t, std::size_t>> split;
    for (auto [begin, end] : groups) {
      bool apart = false;
      for (std::size_t index = begin; index < end; ++index)
        apart = apart || speculativeAt_.count(index) || hoistedSteps_.count(index);
      if (!apart || end - begin == 1) {
        split.emplace_back(begin, end);
        continue;
      }
      for (std::size_t index = begin; index < end; ++index)
        split.emplace_back(index, index + 1);
    }
    return split;
  }

  /// Per launch group, whether a speculative update may be running beside
  /// it: forked after an earlier step and joined at a later one.
  std::vector<bool> besideSpeculativeUpdate(const std::vector<std::pair<std::size_t, std::size_t>>& groups) const {
    std::vector<bool> beside(groups.size(), false);
    if (!speculation_)
      return beside;
    for (std::size_t g = 0; g < groups.size(); ++g)
      for (const cuda::SpeculativeUpdate& update : speculation_->updates) {
        bool forked = update.readyAfter == cuda::kReadyAtRunStart || update.readyAfter < groups[g].first;
        beside[g] = beside[g] || (forked && groups[g].first < update.step);
      }
    return beside;
  }

  /// Per update its events, the updates each step forks, the restores
  /// (consecutive updates with one predicate share a launch) and the
  /// hoisted steps' own memory.
  Status prepareSpeculation() {
    if (!speculation_)
      return Status::success();
    preparedAt_.assign(plan_.steps.size(), kNotPrepared);
    for (std::size_t p = 0; p < steps_.size(); ++p)
      preparedAt_[steps_[p].indices.front()] = p;
    std::string where = "plan @" + plan_.name + ": preparing its speculative updates";
    std::ptrdiff_t lastStep = -2;
    BufferId lastPredicate = kNoBuffer;
    std::size_t batchStart = 0;
    for (std::size_t u = 0; u < speculation_->updates.size(); ++u) {
      const cuda::SpeculativeUpdate& update = speculation_->updates[u];
      SpeculativeLaunch& launch = speculativeLaunches_.emplace_back();
      launch.update = u;
      launch.prepared = preparedAt_[update.step];
      for (cudaEvent_t* event : {&launch.fork, &launch.done})
        AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(event, cudaEventDisableTiming), where);
      speculateAfter_[update.readyAfter].push_back(u);
      const Step& step = plan_.steps[update.step];
      BufferId predicate = step.inputs[cuda::optimizerPredicateSlot(step)];
      if (std::ptrdiff_t(update.step) != lastStep + 1 || predicate != lastPredicate)
        batchStart = update.step;
      restoreBatches_[batchStart].push_back(u);
      lastStep = std::ptrdiff_t(update.step);
      lastPredicate = predicate;
    }
    AMPJIT_RETURN_IF_ERROR(prepareFoldedChecks());
    AMPJIT_RETURN_IF_ERROR(prepareGemmFolds());
    for (std::size_t index : speculation_->hoisted) {
      BufferId out = plan_.steps[index].outputs[0];
      AMPJIT_RETURN_IF_ERROR(allocateFixed(hoistedOutputs_[out], plan_.buffers[out].type.byteSize(),
                                           "the output of hoisted " + describeStep(plan_, index)));
    }
    return Status::success();
  }

  /// Each speculative update whose predicate is an AllFinite step's output
  /// and whose gradient that step checks checks it instead, as it reads it:
  /// the check then reads only the rest. A check that is not split must be
  /// a launch of its own (not one with inv_scale's division).
  Status prepareFoldedChecks() {
    for (std::size_t u = 0; u < speculation_->updates.size(); ++u) {
      const Step& update = plan_.steps[speculation_->updates[u].step];
      BufferId predicate = update.inputs[cuda::optimizerPredicateSlot(update)];
      BufferId gradient = update.inputs[sgd_slot::kGrad];
      static_assert(sgd_slot::kGrad == adam_slot::kGrad);
      std::size_t check = speculation_->updates[u].predicateWriter;
      const Step& allFinite = plan_.steps[check];
      if (allFinite.kind != StepKind::AllFinite || allFinite.outputs[0] != predicate)
        continue;
      bool split = splitAtStep_.count(check) > 0;
      bool alone = preparedAt_[check] != kNotPrepared && steps_[preparedAt_[check]].indices.size() == 1;
      if ((!split && !alone) ||
          std::find(allFinite.inputs.begin(), allFinite.inputs.end(), gradient) == allFinite.inputs.end())
        continue;
      FoldedCheck& fold = foldedChecks_[check];
      if (fold.flag == nullptr) {
        if (split) {
          fold.flag = reinterpret_cast<uint8_t*>(splitChecks_[splitAtStep_[check]].flag->data());
        } else {
          AMPJIT_RETURN_IF_ERROR(allocateFixed(fold.ownFlag, 1, "the flag of " + describeStep(plan_, check)));
          fold.flag = reinterpret_cast<uint8_t*>(fold.ownFlag->data());
        }
      }
      fold.checkedByUpdates.insert(gradient);
      fold.updates.push_back(u);
      updateChecksInto_[u] = fold.flag;
      ++stats_.gradientsCheckedByTheirUpdate;
    }
    return Status::success();
  }

  /// Each candidate fold (gemmFoldOf) whose gradient's check it can take
  /// over and whose GEMM cuBLASLt runs with the update added: its own GEMM
  /// step and device scalars. One that cannot is declined, not an error:
  /// its update then runs speculatively on its own.
  Status prepareGemmFolds() {
    for (const auto& [u, fold] : gemmFoldCandidates_) {
      const cuda::SpeculativeUpdate& update = speculation_->updates[u];
      std::size_t prepared = preparedAt_[fold.gemm];
      auto decline = [&](const std::string& why) {
        stats_.gemmFoldDeclined = describeStep(plan_, update.step) + " " + why;
        return timeGemmNotFoldedInto(fold.gemm);
      };
      if (!updateChecksInto_.count(u)) {
        AMPJIT_RETURN_IF_ERROR(decline("has a finiteness check that must read its gradient itself"));
        continue;
      }
      if (prepared == kNotPrepared || steps_[prepared].indices.size() != 1) {
        AMPJIT_RETURN_IF_ERROR(decline("has a GEMM that shares its launch"));
        continue;
      }
      Expected<std::unique_ptr<DeviceStep>> gemm = cuda::makeFoldedUpdateGemmStep(
          runtime_->context, plan_, plan_.steps[fold.gemm], steps_[prepared].smCountTarget);
      if (!gemm) {
        AMPJIT_RETURN_IF_ERROR(decline("was not folded into its GEMM: " + gemm.message()));
        continue;
      }
      GemmFoldLaunch& launch = gemmFolds_[fold.gemm];
      launch.update = u;
      launch.gemm = std::move(*gemm);
      AMPJIT_RETURN_IF_ERROR(allocateFixed(launch.alphaBeta, 2 * sizeof(float),
                                           "the GEMM scalars of " + describeStep(plan_, update.step)));
      speculativeLaunches_[u].foldedIntoGemm = true;
    }
    stats_.updatesFoldedIntoGemms = int64_t(gemmFolds_.size());
    if (!gemmFolds_.empty() && gemmFolds_.size() == gemmFoldCandidates_.size() &&
        gemmFoldCandidates_.size() == speculation_->updates.size())
      stats_.gemmFoldDeclined.clear();
    return Status::success();
  }

  /// A GEMM made with the heuristic's algorithm because an update might
  /// fold into it, now that none does: remade, its algorithm timed as every
  /// other large GEMM's. Its scratch comes after the arena's, as the folded
  /// GEMMs' does.
  Status timeGemmNotFoldedInto(std::size_t gemm) {
    if (!untimedUntilFoldDecided_.erase(gemm))
      return Status::success();
    PreparedStep& prepared = steps_[preparedAt_[gemm]];
    Expected<std::unique_ptr<DeviceStep>> timed =
        cuda::makeGemmStep(runtime_->context, plan_, plan_.steps[gemm], prepared.smCountTarget);
    if (!timed)
      return Status::error(describeStepOfPlan(plan_, gemm) + ": " + timed.message());
    prepared.step = std::move(*timed);
    return Status::success();
  }

  /// A speculative run's GEMM-folded updates: their scalars (at the start,
  /// after the hoisted inv_scale).
  Status computeGemmFoldScalars(cudaStream_t stream) {
    if (gemmFolds_.empty())
      return Status::success();
    std::vector<cuda::update::FoldedUpdateScalars> folds;
    for (const auto& [gemm, launch] : gemmFolds_) {
      const Step& step = plan_.steps[speculation_->updates[launch.update].step];
      BufferId invScale = step.inputs[sgd_slot::kInvScale];
      folds.push_back({static_cast<const float*>(pointers_[step.inputs[sgd_slot::kLr]]),
                       invScale == kNoBuffer ? nullptr : static_cast<const float*>(pointers_[invScale]),
                       step.as<OptimizerParams>().maximize, reinterpret_cast<float*>(launch.alphaBeta->data())});
    }
    std::string where = "plan @" + plan_.name + ": the scalars of the updates folded into GEMMs";
    if (timelineRecording_)
      AMPJIT_RETURN_IF_ERROR(beginTimelineLaunch(
          stream, chunkFields(speculation_->updates[gemmFolds_.begin()->second.update].step,
                              "alpha and beta of every update folded into its GEMM")));
    AMPJIT_CUDA_RETURN_IF_ERROR(cuda::update::launchFoldedUpdateScalars(folds.data(), folds.size(), stream), where);
    return endTimelineLaunch(stream);
  }

  /// A folded update's GEMM: the product added to the current parameter,
  /// into its second buffer.
  Status enqueueFoldedGemm(const PreparedStep& prepared, cudaStream_t stream, void* workspace) {
    const GemmFoldLaunch& launch = gemmFolds_.at(prepared.indices.front());
    const Step& gemm = plan_.steps[prepared.indices.front()];
    BufferId param = plan_.steps[speculation_->updates[launch.update].step].inputs[sgd_slot::kParam];
    void* in[4] = {pointers_[gemm.inputs[0]], pointers_[gemm.inputs[1]], pointers_[param], launch.alphaBeta->data()};
    void* out[1] = {secondBuffers_.at(param)->data()};
    if (timelineRecording_)
      AMPJIT_RETURN_IF_ERROR(beginTimelineLaunch(stream, launchFields(prepared) + ",\"folded_update\":true"));
    Status status = launch.gemm->enqueue(StepPointers{in, out, workspace}, stream);
    if (!status)
      return Status::error(describeStepOfPlan(plan_, prepared.indices.front()) + ": with its update folded in: " +
                           status.message());
    return endTimelineLaunch(stream);
  }

  /// The buffers of `buffers` that no speculative update checks for the
  /// AllFinite step `check` in this enqueue.
  std::vector<BufferId> uncheckedByUpdates(std::size_t check, const std::vector<BufferId>& buffers) const {
    auto fold = foldedChecks_.find(check);
    if (!speculativeEnqueue_ || fold == foldedChecks_.end())
      return buffers;
    std::vector<BufferId> rest;
    for (BufferId id : buffers)
      if (!fold->second.checkedByUpdates.count(id))
        rest.push_back(id);
    return rest;
  }

  /// A folded check where it stands waits for the updates that check its
  /// gradients, before it checks the rest into the same flag.
  Status joinFoldedCheck(std::size_t check, cudaStream_t stream) {
    const FoldedCheck& fold = foldedChecks_.at(check);
    std::string where = describeStepOfPlan(plan_, check) + ": joining the updates that check its gradients";
    for (std::size_t u : fold.updates)
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, speculativeLaunches_[u].done, 0), where);
    return Status::success();
  }

  /// A check not split, whose gradients some speculative updates checked:
  /// the rest, then the flag into the step's output.
  Status finishFoldedCheck(std::size_t check, cudaStream_t stream) {
    AMPJIT_RETURN_IF_ERROR(joinFoldedCheck(check, stream));
    const FoldedCheck& fold = foldedChecks_.at(check);
    std::string where = describeStepOfPlan(plan_, check);
    std::vector<cuda::update::FiniteCheckTensor> tensors =
        finiteCheckTensors(uncheckedByUpdates(check, plan_.steps[check].inputs));
    if (timelineRecording_)
      AMPJIT_RETURN_IF_ERROR(beginTimelineLaunch(stream, chunkFields(check, "the gradients no update checked")));
    if (!tensors.empty())
      AMPJIT_CUDA_RETURN_IF_ERROR(
          cuda::update::launchFiniteCheck(tensors.data(), tensors.size(), fold.flag, evictFirst_, stream), where);
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pointers_[plan_.steps[check].outputs[0]], fold.flag, 1,
                                                cudaMemcpyDeviceToDevice, stream),
                                where + ": writing the flag");
    return endTimelineLaunch(stream);
  }

  /// For a grid-stride kernel forked to the side stream after plan step
  /// `index`: the blocks of 256 threads that fill the SMs the GEMMs after it
  /// leave to it (gemmSmReserve_), or 0 (no limit) when none of them leaves
  /// any: at the step's tail a limit would only slow it.
  int64_t reservedSmBlocks(std::size_t index) const {
    if (gemmSmReserve_ <= 0 || !lastReservedGemm_ || *lastReservedGemm_ <= index)
      return 0;
    int blocksPerSm = std::max(1, runtime_->context.maxThreadsPerMultiprocessor / cuda::update::kThreads);
    return int64_t(gemmSmReserve_) * blocksPerSm;
  }

  /// Forks to the side stream the speculative updates whose inputs are
  /// final once plan step `index` is enqueued (kReadyAtRunStart: at the
  /// start), each reading the current state and writing the second buffers,
  /// without its predicate.
  Status forkSpeculativeUpdates(std::size_t index, cudaStream_t stream) {
    auto ready = speculateAfter_.find(index);
    if (ready == speculateAfter_.end())
      return Status::success();
    cudaStream_t side = runtime_->sideStream;
    void* sideWorkspace = sideWorkspace_ ? static_cast<void*>(sideWorkspace_->data())
                                         : (workspaceBytes_ > 0 ? static_cast<void*>(workspace_->data()) : nullptr);
    for (std::size_t u : ready->second) {
      SpeculativeLaunch& launch = speculativeLaunches_[u];
      const cuda::SpeculativeUpdate& update = speculation_->updates[u];
      const Step& step = plan_.steps[update.step];
      std::size_t predicate = cuda::optimizerPredicateSlot(step);
      std::vector<void*> in, out;
      for (std::size_t slot = 0; slot < step.inputs.size(); ++slot)
        in.push_back(slot == predicate || step.inputs[slot] == kNoBuffer ? nullptr : pointers_[step.inputs[slot]]);
      for (BufferId id : update.rewritten)
        out.push_back(id == kNoBuffer ? nullptr : static_cast<void*>(secondBuffers_.at(id)->data()));
      std::string where = describeStepOfPlan(plan_, update.step) + ": running it speculatively";
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventRecord(launch.fork, stream), where);
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, launch.fork, 0), where);
      PreparedStep& prepared = steps_[launch.prepared];
      bool folded = launch.foldedIntoGemm;
      if (timelineRecording_)
        AMPJIT_RETURN_IF_ERROR(beginTimelineLaunch(
            side, launchFields(prepared) + ",\"speculative\":true" + (folded ? ",\"folded_update\":true" : "")));
      auto checks = updateChecksInto_.find(u);
      Status status = Status::success();
      if (folded) {
        // The GEMM wrote the new parameter: check it, and write the copy.
        BufferId copy = step.inputs[sgd_slot::kParamCopy];
        BufferId param = step.inputs[sgd_slot::kParam];
        AMPJIT_CUDA_RETURN_IF_ERROR(
            cuda::update::launchCheckFoldedUpdate(
                static_cast<const float*>(out[sgd_slot::kNewParam]), out[sgd_slot::kNewParamCopy],
                copy == kNoBuffer ? cuda::update::ElementType::F16
                                  : cuda::update::ElementType(int32_t(plan_.buffers[copy].type.dtype)),
                plan_.buffers[param].type.elementCount(), checks->second, evictFirst_, reservedSmBlocks(index), side),
            where + ": checking the parameter its GEMM updated");
      } else {
        status = prepared.step->enqueue(
            StepPointers{in, out, sideWorkspace, checks == updateChecksInto_.end() ? nullptr : checks->second}, side);
      }
      if (!status)
        return Status::error(where + ": " + status.message());
      AMPJIT_RETURN_IF_ERROR(endTimelineLaunch(side));
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventRecord(launch.done, side), where);
      launch.forked = true;
    }
    return Status::success();
  }

  /// At the place of plan step `index`, a speculative update: the first of
  /// a batch waits for the batch's updates and, where the step is skipped,
  /// copies the old state over what they wrote; the rest have nothing left.
  Status restoreWhereSkipped(std::size_t index, cudaStream_t stream) {
    auto batch = restoreBatches_.find(index);
    if (batch == restoreBatches_.end())
      return Status::success();
    std::string where = describeStepOfPlan(plan_, index) + ": restoring the state where the step is skipped";
    std::vector<cuda::update::RestoreTensor> tensors;
    const uint8_t* predicate = nullptr;
    for (std::size_t u : batch->second) {
      SpeculativeLaunch& launch = speculativeLaunches_[u];
      if (!launch.forked)
        return Status::error(where + ": its speculative update was never forked (a backend bug)");
      launch.forked = false;
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, launch.done, 0), where);
      const cuda::SpeculativeUpdate& update = speculation_->updates[u];
      const Step& step = plan_.steps[update.step];
      predicate = static_cast<const uint8_t*>(pointers_[step.inputs[cuda::optimizerPredicateSlot(step)]]);
      for (BufferId id : update.rewritten)
        if (id != kNoBuffer)
          tensors.push_back({pointers_[id], secondBuffers_.at(id)->data(), int64_t(plan_.buffers[id].type.byteSize())});
    }
    if (timelineRecording_)
      AMPJIT_RETURN_IF_ERROR(beginTimelineLaunch(stream, chunkFields(index, "restoring where skipped")));
    AMPJIT_CUDA_RETURN_IF_ERROR(
        cuda::update::launchRestoreWhereSkipped(predicate, tensors.data(), tensors.size(), stream), where);
    return endTimelineLaunch(stream);
  }

  /// The whole plan, as a graph captures it.
  Status enqueueWholePlan(cudaStream_t stream) { return enqueueSteps(stream, 0, plan_.steps.size(), true); }

  /// Enqueues plan steps [begin, end). With `overlap` and the deferred
  /// update among them, the update runs on the side stream, forked at the
  /// start; each step of the rest waits for the update groups whose
  /// deadline it is (deferredStepDeadlines), and the run joins what is left
  /// at its end. With `overlap`, the plan's side steps run on the side
  /// stream too, each forked where it stands and joined before its
  /// joinBefore step (or at the end).
  Status enqueueSteps(cudaStream_t stream, std::size_t begin, std::size_t end, bool overlap) {
    void* workspace = workspaceBytes_ > 0 ? static_cast<void*>(workspace_->data()) : nullptr;
    void* sideWorkspace = sideWorkspace_ ? static_cast<void*>(sideWorkspace_->data()) : workspace;
    cudaStream_t side = runtime_->sideStream;
    bool onSide = overlap && begin == 0 && !deferredDone_.empty() && end > plan_.deferredSteps;
    // Side steps forked and not yet joined, in plan order.
    std::vector<const SideLaneStep*> besides;
    auto joinSideSteps = [&](std::size_t before) -> Status {
      for (auto it = besides.begin(); it != besides.end();) {
        if ((*it)->joinBefore > before) {
          ++it;
          continue;
        }
        AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, (*it)->done, 0),
                                    describeStepOfPlan(plan_, (*it)->step) + ": joining the side stream");
        it = besides.erase(it);
      }
      return Status::success();
    };
    bool speculate = overlap && speculating_ && begin == 0 && end == plan_.steps.size();
    speculativeEnqueue_ = speculate;
    if (speculate) {
      enqueuedSpeculatively_ = true;
      // Set before any update can clear them (a split check's first chunk
      // would set it only when that chunk is forked).
      for (const auto& [check, fold] : foldedChecks_)
        AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(fold.flag, 1, 1, stream),
                                    describeStepOfPlan(plan_, check) + ": resetting its flag");
      // An enqueue that failed part way (a failed capture) left some marked.
      for (SpeculativeLaunch& launch : speculativeLaunches_)
        launch.forked = false;
      for (std::size_t index : speculation_->hoisted)
        AMPJIT_RETURN_IF_ERROR(enqueueStep(steps_[preparedAt_[index]], stream, workspace));
      AMPJIT_RETURN_IF_ERROR(computeGemmFoldScalars(stream));
      AMPJIT_RETURN_IF_ERROR(forkSpeculativeUpdates(cuda::kReadyAtRunStart, stream));
    }
    if (onSide) {
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventRecord(deferredFork_, stream), "plan @" + plan_.name + ": forking its update");
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, deferredFork_, 0),
                                  "plan @" + plan_.name + ": forking its update");
    }
    std::size_t deferredGroup = 0;
    std::ptrdiff_t joined = -1; // the last deferred group the main stream has waited for
    auto joinUpTo = [&](std::ptrdiff_t group) -> Status {
      if (group <= joined)
        return Status::success();
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, deferredDone_[std::size_t(group)], 0),
                                  "plan @" + plan_.name + ": joining its update");
      joined = group;
      return Status::success();
    };
    for (PreparedStep& prepared : steps_) {
      std::size_t first = prepared.indices.front();
      if (first < begin || first >= end)
        continue;
      bool deferred = first < plan_.deferredSteps;
      if (onSide && !deferred)
        AMPJIT_RETURN_IF_ERROR(joinUpTo(prepared.deferredDue));
      if (speculate && hoistedSteps_.count(first))
        continue; // ran first
      if (speculate && foldedChecks_.count(first) && !splitAtStep_.count(first)) {
        AMPJIT_RETURN_IF_ERROR(joinSideSteps(prepared.indices.back()));
        AMPJIT_RETURN_IF_ERROR(finishFoldedCheck(first, stream));
        AMPJIT_RETURN_IF_ERROR(forkFiniteChecksAfter(prepared, stream));
        AMPJIT_RETURN_IF_ERROR(forkSpeculativeUpdates(first, stream));
        continue;
      }
      if (speculate && speculativeAt_.count(first)) {
        AMPJIT_RETURN_IF_ERROR(joinSideSteps(prepared.indices.back()));
        AMPJIT_RETURN_IF_ERROR(restoreWhereSkipped(first, stream));
        continue;
      }
      // Joined before any step of a launch that one of them must precede.
      AMPJIT_RETURN_IF_ERROR(joinSideSteps(prepared.indices.back()));
      if (auto beside = sideLaneAt_.find(first); overlap && beside != sideLaneAt_.end()) {
        const SideLaneStep& sideStep = sideLane_[beside->second];
        std::string where = describeStepOfPlan(plan_, first);
        AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventRecord(sideStep.fork, stream), where + ": forking to the side stream");
        AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, sideStep.fork, 0), where + ": forking to the side stream");
        AMPJIT_RETURN_IF_ERROR(enqueueStep(prepared, side, sideWorkspace));
        AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventRecord(sideStep.done, side), where + ": marking it done");
        besides.push_back(&sideStep);
        AMPJIT_RETURN_IF_ERROR(forkFiniteChecksAfter(prepared, stream));
        if (speculate)
          for (std::size_t index : prepared.indices)
            AMPJIT_RETURN_IF_ERROR(forkSpeculativeUpdates(index, stream));
        continue;
      }
      if (auto split = splitAtStep_.find(first); split != splitAtStep_.end()) {
        AMPJIT_RETURN_IF_ERROR(joinFiniteCheck(splitChecks_[split->second], stream));
        if (speculate)
          AMPJIT_RETURN_IF_ERROR(forkSpeculativeUpdates(first, stream));
        continue;
      }
      bool sideStep = onSide && deferred;
      AMPJIT_RETURN_IF_ERROR(enqueueStep(prepared, sideStep ? side : stream, sideStep ? sideWorkspace : workspace));
      if (sideStep)
        AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventRecord(deferredDone_[deferredGroup++], side),
                                    describeStepOfPlan(plan_, first) + ": marking the update done");
      AMPJIT_RETURN_IF_ERROR(forkFiniteChecksAfter(prepared, stream));
      if (speculate)
        for (std::size_t index : prepared.indices)
          AMPJIT_RETURN_IF_ERROR(forkSpeculativeUpdates(index, stream));
    }
    if (onSide)
      AMPJIT_RETURN_IF_ERROR(joinUpTo(std::ptrdiff_t(deferredDone_.size()) - 1));
    return joinSideSteps(plan_.steps.size());
  }

  /// The finiteness-check chunks whose last writer is among `prepared`'s
  /// steps. A chunk forked after a side step checks on the side stream
  /// after it, in that stream's order.
  Status forkFiniteChecksAfter(const PreparedStep& prepared, cudaStream_t stream) {
    for (std::size_t index : prepared.indices)
      if (auto forks = forksAfterStep_.find(index); forks != forksAfterStep_.end())
        for (auto [split, chunk] : forks->second)
          AMPJIT_RETURN_IF_ERROR(forkFiniteCheck(splitChecks_[split], chunk, stream));
    return Status::success();
  }

  Status enqueueStep(PreparedStep& prepared, cudaStream_t stream, void* workspace) {
    if (speculativeEnqueue_)
      if (gemmFolds_.count(prepared.indices.front()))
        return enqueueFoldedGemm(prepared, stream, workspace);
    std::vector<void*> in, out;
    for (std::size_t index : prepared.indices) {
      const Step& step = plan_.steps[index];
      for (BufferId id : step.inputs)
        in.push_back(id == kNoBuffer ? nullptr : pointers_[id]);
      for (BufferId id : step.outputs)
        out.push_back(id == kNoBuffer ? nullptr : pointers_[id]);
    }
    if (timelineRecording_)
      AMPJIT_RETURN_IF_ERROR(beginTimelineLaunch(stream, launchFields(prepared)));
    Status status = prepared.step->enqueue(StepPointers{in, out, workspace}, stream);
    if (!status)
      return Status::error(describeStepOfPlan(plan_, prepared.indices.front()) + ": " + status.message());
    AMPJIT_RETURN_IF_ERROR(endTimelineLaunch(stream));
    if (checkNumerics_)
      for (std::size_t index : prepared.indices)
        AMPJIT_RETURN_IF_ERROR(checkNumerics(index, stream));
    return Status::success();
  }

  /// AMPJIT_CHECK_NUMERICS checks every output of every step, and a widened
  /// reduction's launch never writes the widened copy, nor a column-summed
  /// elementwise launch the summed output, nor a regression head the
  /// outputs only it reads: run their steps apart.
  std::vector<std::pair<std::size_t, std::size_t>> splitUnstoredOutputs(
      std::vector<std::pair<std::size_t, std::size_t>> groups) const {
    std::vector<std::pair<std::size_t, std::size_t>> split;
    for (auto [begin, end] : groups) {
      if ((end - begin == 2 &&
           (cuda::widenedReductionAt(plan_, begin) || cuda::columnSummedElementwiseAt(plan_, begin))) ||
          (end - begin > 1 && cuda::mseHeadLength(plan_, begin) == end - begin)) {
        for (std::size_t index = begin; index < end; ++index)
          split.emplace_back(index, index + 1);
      } else {
        split.emplace_back(begin, end);
      }
    }
    return split;
  }

  /// AMPJIT_PROFILE: runs steps [begin, end of plan) on `stream` alone, an
  /// event after each launch, waits, and appends one JSON line per launch
  /// (its plan steps, their kinds and types, what the step says it chose,
  /// its milliseconds) and one with the total. The deferred update runs
  /// in line, not beside the forward pass, so each launch's time is its own.
  /// The launches go in segments of kProfileSegment, each held back by a
  /// kernel that polls pinned memory until the host has enqueued the whole
  /// segment: otherwise a launch's time included the host's enqueueing of
  /// it (the H200's ResNet-50 profile summed to 12.7 ms against 4.3 ms
  /// replayed, most of it cuDNN's host cost). A hold that gives up (the host
  /// took over maxPolls reads) is counted in the total line's
  /// "segments_with_host_time".
  Status profileSteps(cudaStream_t stream, std::size_t begin, Status& written) {
    constexpr std::size_t kProfileSegment = 64;
    // About a microsecond a read of host memory: a second or two at most.
    constexpr long long kMaxHoldPolls = 2'000'000;
    void* workspace = workspaceBytes_ > 0 ? static_cast<void*>(workspace_->data()) : nullptr;
    // Every step in line, as written: no GEMM with a folded update, whatever
    // the run before did.
    speculativeEnqueue_ = false;
    std::vector<PreparedStep*> launched;
    for (PreparedStep& prepared : steps_)
      if (prepared.indices.front() >= begin)
        launched.push_back(&prepared);
    std::string where = "plan @" + plan_.name + ": profiling";
    auto checked = [&](cudaError_t error) {
      return error == cudaSuccess ? Status::success() : cuda::cudaFailure(error, where);
    };
    // Events: the segment's start, then one after each launch.
    std::vector<cudaEvent_t> marks(std::min(launched.size(), kProfileSegment) + 1, nullptr);
    cuda::update::StreamHold* hold = nullptr;
    auto release = [&] {
      for (cudaEvent_t mark : marks)
        if (mark)
          cudaEventDestroy(mark);
      if (hold)
        cudaFreeHost(hold);
    };
    void* holdMemory = nullptr;
    Status status = checked(cudaMallocHost(&holdMemory, sizeof(cuda::update::StreamHold)));
    hold = static_cast<cuda::update::StreamHold*>(holdMemory);
    for (cudaEvent_t& mark : marks)
      if (status)
        status = checked(cudaEventCreate(&mark));
    std::vector<float> milliseconds(launched.size(), 0.0f);
    int64_t segments = 0, segmentsWithHostTime = 0;
    for (std::size_t first = 0; status && first < launched.size(); first += kProfileSegment) {
      std::size_t count = std::min(kProfileSegment, launched.size() - first);
      hold->released = 0;
      hold->gaveUp = 0;
      status = checked(cuda::update::launchStreamHold(hold, kMaxHoldPolls, stream));
      if (status)
        status = checked(cudaEventRecord(marks[0], stream));
      for (std::size_t i = 0; status && i < count; ++i) {
        status = enqueueStep(*launched[first + i], stream, workspace);
        if (status)
          status = checked(cudaEventRecord(marks[i + 1], stream));
      }
      // Released even after an error, so the stream can drain.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      hold->released = 1;
      Status drained = checked(cudaStreamSynchronize(stream));
      if (!status)
        break;
      status = drained;
      for (std::size_t i = 0; status && i < count; ++i)
        status = checked(cudaEventElapsedTime(&milliseconds[first + i], marks[i], marks[i + 1]));
      ++segments;
      segmentsWithHostTime += hold->gaveUp != 0 ? 1 : 0;
    }
    release();
    if (!status)
      return status;
    std::ofstream file(profile_.path, std::ios::app);
    double total = 0;
    for (std::size_t i = 0; i < launched.size(); ++i) {
      total += milliseconds[i];
      file << profileLine(*launched[i], milliseconds[i]) << "\n";
    }
    file << "{\"plan\":" << jsonString(plan_.name) << ",\"launches\":" << launched.size()
         << ",\"total_ms\":" << total << ",\"segments\":" << segments
         << ",\"segments_with_host_time\":" << segmentsWithHostTime << "}\n";
    if (!file)
      written = Status::error(where + ": cannot write " + profile_.path + " (the step itself ran)");
    return Status::success();
  }

  std::string profileLine(const PreparedStep& prepared, float ms) const {
    // Appended piece by piece: GCC 12's -Wrestrict misfires on "{" + string.
    std::string line = "{";
    line += launchFields(prepared);
    line += ",\"ms\":" + std::to_string(ms) + "}";
    return line;
  }

  /// A launch's JSON fields for AMPJIT_PROFILE and AMPJIT_TIMELINE: its
  /// plan steps, what the first is, its types, what the step chose.
  std::string launchFields(const PreparedStep& prepared) const {
    const Step& first = plan_.steps[prepared.indices.front()];
    std::string types;
    for (BufferId id : first.inputs)
      types += (types.empty() ? "" : ", ") + (id == kNoBuffer ? std::string("-") : typeToString(plan_.buffers[id].type));
    types += " -> ";
    for (std::size_t slot = 0; slot < first.outputs.size(); ++slot)
      types += (slot ? ", " : "") + (first.outputs[slot] == kNoBuffer ? std::string("-")
                                                                      : typeToString(plan_.buffers[first.outputs[slot]].type));
    std::string line = "\"plan\":" + jsonString(plan_.name) + ",\"steps\":[" +
                       std::to_string(prepared.indices.front()) + "," + std::to_string(prepared.indices.back()) +
                       "],\"what\":" + jsonString(describeStep(plan_, prepared.indices.front())) +
                       ",\"types\":" + jsonString(types);
    if (std::string chose = prepared.step->profileNote(); !chose.empty())
      line += ",\"chose\":" + jsonString(chose);
    return line;
  }

  /// A launch of a split finiteness check's: `part` of plan step `index`.
  std::string chunkFields(std::size_t index, const std::string& part) const {
    return "\"plan\":" + jsonString(plan_.name) + ",\"steps\":[" + std::to_string(index) + "," +
           std::to_string(index) + "],\"what\":" + jsonString(describeStep(plan_, index) + ", " + part);
  }

  /// AMPJIT_TIMELINE: a launch of the run being recorded starts on `stream`:
  /// a stamp first, after whatever the stream waits for.
  Status beginTimelineLaunch(cudaStream_t stream, std::string fields) {
    TimelineRecording& recording = *timelineRecording_;
    if (recording.launches.size() == recording.capacity)
      return Status::error("plan @" + plan_.name + ": the timeline has room for " +
                           std::to_string(recording.capacity) + " launches and the run makes more (a backend bug)");
    recording.launches.push_back({std::move(fields), stream == runtime_->sideStream});
    auto* stamps = reinterpret_cast<unsigned long long*>(recording.stamps->data());
    AMPJIT_CUDA_RETURN_IF_ERROR(
        cuda::update::launchTimelineStamp(stamps + 2 * (recording.launches.size() - 1), stream),
        "plan @" + plan_.name + ": stamping the timeline");
    return Status::success();
  }

  /// ... and the stamp after it, when a timeline is being recorded.
  Status endTimelineLaunch(cudaStream_t stream) {
    if (!timelineRecording_)
      return Status::success();
    auto* stamps = reinterpret_cast<unsigned long long*>(timelineRecording_->stamps->data());
    AMPJIT_CUDA_RETURN_IF_ERROR(
        cuda::update::launchTimelineStamp(stamps + 2 * timelineRecording_->launches.size() - 1, stream),
        "plan @" + plan_.name + ": stamping the timeline");
    return Status::success();
  }

  /// AMPJIT_TIMELINE: runs steps [begin, end of plan) as a replay does, side
  /// stream and all, with a stamp of the device's global timer before and
  /// after each launch on its stream, waits, and appends a JSON line per
  /// launch (its fields, stream, start and end in us from the first stamp)
  /// and a summary (summarizeTimeline). Where the executable would replay
  /// its graph, the stamped run is captured into a graph of its own and
  /// launched once, so the device sees what a replay gives it and the host's
  /// enqueueing is not in the times; otherwise (the first run, graphs off, a
  /// run without the deferred update) it is enqueued step by step, and the
  /// summary's "graph" says so. The stamps cost a one-thread launch each.
  Status timelineRun(cudaStream_t stream, std::size_t begin, Status& written) {
    std::string where = "plan @" + plan_.name + ": recording a timeline";
    TimelineRecording recording;
    recording.capacity = steps_.size() + restoreBatches_.size() + (gemmFolds_.empty() ? 0 : 1);
    for (const SplitFiniteCheck& split : splitChecks_)
      recording.capacity += split.schedule.early.size();
    AMPJIT_RETURN_IF_ERROR(allocateFixed(recording.stamps, 2 * recording.capacity * sizeof(unsigned long long),
                                         "the timeline's stamps"));
    bool overlap = !checkNumerics_;
    bool asGraph = useGraphs_ && stats_.eagerRuns > 0 && graphFailure_.empty() && begin == 0;
    if (asGraph) {
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), where);
      timelineRecording_ = &recording;
      Status enqueued = enqueueSteps(stream, begin, plan_.steps.size(), overlap);
      timelineRecording_ = nullptr;
      cudaGraph_t graph = nullptr;
      cudaError_t ended = cudaStreamEndCapture(stream, &graph);
      cudaGraphExec_t exec = nullptr;
      cudaError_t instantiated = enqueued && ended == cudaSuccess ? instantiateGraph(&exec, graph) : cudaErrorUnknown;
      if (graph)
        cudaGraphDestroy(graph);
      if (instantiated == cudaSuccess) {
        cudaError_t launched = cudaGraphLaunch(exec, stream);
        cudaError_t finished = launched == cudaSuccess ? cudaStreamSynchronize(stream) : launched;
        cudaGraphExecDestroy(exec);
        AMPJIT_CUDA_RETURN_IF_ERROR(finished, where + ": its graph");
      } else {
        // Nothing of the run has executed: record it step by step instead.
        (void)cudaGetLastError();
        asGraph = false;
        recording.launches.clear();
      }
    }
    if (!asGraph) {
      timelineRecording_ = &recording;
      Status enqueued = enqueueSteps(stream, begin, plan_.steps.size(), overlap);
      timelineRecording_ = nullptr;
      AMPJIT_RETURN_IF_ERROR(enqueued);
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), where);
    }
    std::vector<unsigned long long> stamps(2 * recording.launches.size());
    if (!stamps.empty())
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpy(stamps.data(), recording.stamps->data(),
                                             stamps.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost),
                                  where + ": reading its stamps");
    std::vector<cuda::TimelineLaunch> launches;
    for (std::size_t i = 0; i < recording.launches.size(); ++i)
      launches.push_back({recording.launches[i].side, stamps[2 * i], stamps[2 * i + 1]});
    uint64_t origin = std::numeric_limits<uint64_t>::max();
    for (const cuda::TimelineLaunch& launch : launches)
      origin = std::min(origin, launch.startNs);
    cuda::TimelineSummary summary = cuda::summarizeTimeline(launches);
    std::ofstream file(timeline_.path, std::ios::app);
    auto microseconds = [&](uint64_t ns) { return std::to_string(double(ns - std::min(ns, origin)) * 1e-3); };
    for (std::size_t i = 0; i < launches.size(); ++i)
      file << "{" << recording.launches[i].fields << ",\"stream\":\"" << (launches[i].side ? "side" : "main")
           << "\",\"start_us\":" << microseconds(launches[i].startNs)
           << ",\"end_us\":" << microseconds(std::max(launches[i].startNs, launches[i].endNs))
           << ",\"beside_other_stream_us\":" << std::to_string(summary.besideOtherStreamUs[i]) << "}\n";
    file << "{\"plan\":" << jsonString(plan_.name) << ",\"timeline_launches\":" << launches.size()
         << ",\"graph\":" << (asGraph ? "true" : "false") << ",\"span_us\":" << summary.spanUs
         << ",\"main_busy_us\":" << summary.mainBusyUs << ",\"side_busy_us\":" << summary.sideBusyUs
         << ",\"both_busy_us\":" << summary.bothBusyUs << "}\n";
    if (!file)
      written = Status::error(where + ": cannot write " + timeline_.path + " (the step itself ran)");
    return Status::success();
  }

  /// The deferred update's groups on the side stream: an event per group
  /// (each later launch waits for its deferredDue one), and their own
  /// workspace, since the main stream's steps use the shared one meanwhile.
  /// Not with deferredUpdateInLine_.
  Status prepareDeferredUpdate() {
    if (plan_.deferredSteps == 0 || deferredUpdateInLine_)
      return Status::success();
    std::size_t sideWorkspaceBytes = 0;
    for (PreparedStep& prepared : steps_) {
      std::size_t first = prepared.indices.front();
      if (first >= plan_.deferredSteps)
        continue;
      sideWorkspaceBytes = std::max(sideWorkspaceBytes, prepared.step->workspaceBytes());
      cudaEvent_t& done = deferredDone_.emplace_back(nullptr);
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                                  describeStepOfPlan(plan_, first) + ": creating an event");
    }
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&deferredFork_, cudaEventDisableTiming),
                                "plan @" + plan_.name + ": creating an event");
    sideWorkspaceBytes_ = std::max(sideWorkspaceBytes_, sideWorkspaceBytes);
    stats_.deferredUpdateGroups = int64_t(deferredDone_.size());
    return Status::success();
  }

  /// The plan's side steps on the side stream (unless
  /// AMPJIT_CUDA_SIDE_STEPS_IN_LINE=1, to measure what they buy): two events
  /// each, and the side workspace, which the deferred update shares (the
  /// stream runs one launch at a time), since main-stream steps use the
  /// other meanwhile. Then that workspace is allocated.
  Status prepareSideLane() {
    if (!environmentFlag("AMPJIT_CUDA_SIDE_STEPS_IN_LINE"))
      for (const SideStep& planned : plan_.sideSteps) {
        auto prepared = std::find_if(steps_.begin(), steps_.end(), [&](const PreparedStep& p) {
          return std::find(p.indices.begin(), p.indices.end(), std::size_t(planned.step)) != p.indices.end();
        });
        // A launch of several steps goes beside only when all of them do,
        // with one join (cuda::launchGroups: a widened bias gradient).
        bool wholeLaunch = prepared != steps_.end() && std::all_of(prepared->indices.begin(), prepared->indices.end(), [&](std::size_t index) {
          return std::any_of(plan_.sideSteps.begin(), plan_.sideSteps.end(), [&](const SideStep& other) {
            return other.step == index && other.joinBefore == planned.joinBefore;
          });
        });
        if (!wholeLaunch)
          return Status::error(describeStepOfPlan(plan_, planned.step) +
                               ": a side step shares a launch with other steps (a backend bug)");
        if (prepared->indices.front() != planned.step)
          continue; // its launch's first step stands for it
        SideLaneStep& side = sideLane_.emplace_back(SideLaneStep{planned.step, planned.joinBefore});
        for (cudaEvent_t* event : {&side.fork, &side.done})
          AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(event, cudaEventDisableTiming),
                                      describeStepOfPlan(plan_, planned.step) + ": creating an event");
        sideLaneAt_[planned.step] = sideLane_.size() - 1;
        sideWorkspaceBytes_ = std::max(sideWorkspaceBytes_, prepared->step->workspaceBytes());
      }
    stats_.sideSteps = int64_t(sideLane_.size());
    if (sideWorkspaceBytes_ > 0)
      AMPJIT_RETURN_IF_ERROR(allocateFixed(sideWorkspace_, sideWorkspaceBytes_, "the side stream's workspace"));
    return Status::success();
  }

  /// Splits each large AllFinite step over the side stream
  /// (FiniteCheckSchedule.h); not under AMPJIT_CUDA_FINITE_CHECK_IN_LINE=1,
  /// which keeps every check in one place on the main stream (to measure
  /// what the split buys).
  Status prepareSplitFiniteChecks() {
    if (environmentFlag("AMPJIT_CUDA_FINITE_CHECK_IN_LINE"))
      return Status::success();
    for (const PreparedStep& prepared : steps_) {
      std::size_t index = prepared.indices.front();
      if (plan_.steps[index].kind != StepKind::AllFinite)
        continue;
      std::optional<cuda::FiniteCheckSchedule> schedule = cuda::scheduleFiniteCheck(plan_, index);
      if (!schedule)
        continue;
      SplitFiniteCheck split{index, std::move(*schedule), nullptr, nullptr, {}};
      AMPJIT_RETURN_IF_ERROR(allocateFixed(split.flag, 1, "the split finiteness check's flag"));
      split.chunkReady.resize(split.schedule.early.size(), nullptr);
      for (cudaEvent_t& event : split.chunkReady)
        AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                                    describeStepOfPlan(plan_, index) + ": creating an event");
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&split.sideDone, cudaEventDisableTiming),
                                  describeStepOfPlan(plan_, index) + ": creating an event");
      for (std::size_t chunk = 0; chunk < split.schedule.early.size(); ++chunk)
        forksAfterStep_[split.schedule.early[chunk].afterStep].emplace_back(splitChecks_.size(), chunk);
      splitAtStep_[index] = splitChecks_.size();
      stats_.sideStreamChunks += int64_t(split.schedule.early.size());
      splitChecks_.push_back(std::move(split));
    }
    return Status::success();
  }

  std::vector<cuda::update::FiniteCheckTensor> finiteCheckTensors(const std::vector<BufferId>& buffers) const {
    std::vector<cuda::update::FiniteCheckTensor> tensors;
    for (BufferId id : buffers)
      tensors.push_back({pointers_[id], plan_.buffers[id].type.elementCount(),
                         cuda::update::ElementType(int(plan_.buffers[id].type.dtype))});
    return tensors;
  }

  /// After a chunk's last writer: the side stream waits for the main stream
  /// there and checks the chunk while the main stream goes on.
  Status forkFiniteCheck(SplitFiniteCheck& split, std::size_t chunk, cudaStream_t stream) {
    cudaStream_t side = runtime_->sideStream;
    auto* flag = reinterpret_cast<uint8_t*>(split.flag->data());
    std::string where = describeStepOfPlan(plan_, split.stepIndex) + ": chunk " + std::to_string(chunk);
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventRecord(split.chunkReady[chunk], stream), where + ": forking");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, split.chunkReady[chunk], 0), where + ": forking");
    bool folded = speculativeEnqueue_ && foldedChecks_.count(split.stepIndex);
    if (chunk == 0 && !folded) // the flag is reset inside the run (and the graph), before any chunk clears it
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flag, 1, 1, side), where + ": resetting the flag");
    std::vector<cuda::update::FiniteCheckTensor> tensors =
        finiteCheckTensors(uncheckedByUpdates(split.stepIndex, split.schedule.early[chunk].buffers));
    if (tensors.empty())
      return Status::success(); // its speculative updates check it all
    if (timelineRecording_)
      AMPJIT_RETURN_IF_ERROR(beginTimelineLaunch(side, chunkFields(split.stepIndex, "chunk " + std::to_string(chunk))));
    AMPJIT_CUDA_RETURN_IF_ERROR(cuda::update::launchFiniteCheck(tensors.data(), tensors.size(), flag, evictFirst_, side), where);
    return endTimelineLaunch(side);
  }

  /// The AllFinite step itself: join the side stream, check what is left,
  /// and write the flag where the plan expects it. The step's output bytes
  /// may belong to other temporaries until here, so only now are they written.
  Status joinFiniteCheck(SplitFiniteCheck& split, cudaStream_t stream) {
    auto* flag = reinterpret_cast<uint8_t*>(split.flag->data());
    std::string where = describeStepOfPlan(plan_, split.stepIndex);
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventRecord(split.sideDone, runtime_->sideStream), where + ": joining");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, split.sideDone, 0), where + ": joining");
    if (speculativeEnqueue_ && foldedChecks_.count(split.stepIndex))
      AMPJIT_RETURN_IF_ERROR(joinFoldedCheck(split.stepIndex, stream));
    std::vector<cuda::update::FiniteCheckTensor> tensors =
        finiteCheckTensors(uncheckedByUpdates(split.stepIndex, split.schedule.atStep));
    if (timelineRecording_)
      AMPJIT_RETURN_IF_ERROR(beginTimelineLaunch(stream, chunkFields(split.stepIndex, "the rest")));
    AMPJIT_CUDA_RETURN_IF_ERROR(cuda::update::launchFiniteCheck(tensors.data(), tensors.size(), flag, evictFirst_, stream), where);
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pointers_[plan_.steps[split.stepIndex].outputs[0]], flag, 1,
                                                cudaMemcpyDeviceToDevice, stream),
                                where + ": writing the flag");
    AMPJIT_RETURN_IF_ERROR(endTimelineLaunch(stream));
    if (checkNumerics_)
      AMPJIT_RETURN_IF_ERROR(checkNumerics(split.stepIndex, stream));
    return Status::success();
  }

  /// AMPJIT_CHECK_NUMERICS: waits for step `index` and checks each floating
  /// output as the CPU backend does, so both name the same first step.
  Status checkNumerics(std::size_t index, cudaStream_t stream) {
    const Step& step = plan_.steps[index];
    for (std::size_t slot = 0; slot < step.outputs.size(); ++slot) {
      BufferId id = step.outputs[slot];
      if (id == kNoBuffer || !isFloating(plan_.buffers[id].type.dtype))
        continue;
      Expected<bool> finite = allFinite(id, stream, describeStepOfPlan(plan_, index) + ": checking its outputs");
      if (!finite)
        return finite.status();
      if (!*finite)
        return nonFiniteOutputError(plan_, index, slot);
    }
    return Status::success();
  }

  /// AMPJIT_CHECK_NUMERICS before a run: the arguments the CPU backend checks.
  Status checkArgumentNumerics(cudaStream_t stream) {
    for (std::size_t index : numericsCheckedArguments(plan_)) {
      Expected<bool> finite = allFinite(plan_.argumentBuffer(index), stream,
                                        "plan @" + plan_.name + ": checking " + describeArgument(plan_, index));
      if (!finite)
        return finite.status();
      if (!*finite)
        return nonFiniteArgumentError(plan_, index);
    }
    return Status::success();
  }

  /// Whether every element of buffer `id` is finite, once the stream's work
  /// before this call is done (it waits).
  Expected<bool> allFinite(BufferId id, cudaStream_t stream, const std::string& what) {
    const TensorType& type = plan_.buffers[id].type;
    cuda::update::FiniteCheckTensor tensor{pointers_[id], type.elementCount(),
                                           cuda::update::ElementType(int(type.dtype))};
    auto* flag = reinterpret_cast<uint8_t*>(finiteFlag_->data());
    uint8_t finite = 0;
    AMPJIT_CUDA_RETURN_IF_ERROR(cuda::update::launchAllFinite(&tensor, 1, flag, /*evictFirst=*/false, stream), what);
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&finite, flag, 1, cudaMemcpyDeviceToHost, stream),
                                what + ": reading the check");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), what);
    return finite != 0;
  }

  /// Instantiates a captured graph at its nodes' stream priorities where the
  /// runtime uses them.
  cudaError_t instantiateGraph(cudaGraphExec_t* exec, cudaGraph_t graph) {
    unsigned long long flags = runtime_->streamPriorities ? cudaGraphInstantiateFlagUseNodePriority : 0;
    cudaError_t instantiated = cudaGraphInstantiate(exec, graph, flags);
    if (instantiated == cudaErrorInvalidValue && flags != 0) {
      // A driver without per-node priorities (before CUDA 11.7) still
      // replays the graph, at the launch stream's priority.
      (void)cudaGetLastError();
      instantiated = cudaGraphInstantiate(exec, graph, 0);
    }
    return instantiated;
  }

  /// Captures the whole plan for `key`'s state addresses into graphs_'s
  /// last entry: a new one while the cache has room, else the least
  /// recently used one, updated in place where the driver can.
  Status capture(cudaStream_t stream, const std::vector<void*>& key) {
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                                "plan @" + plan_.name + ": beginning graph capture");
    Status enqueued = enqueueWholePlan(stream);
    cudaGraph_t graph = nullptr;
    cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    auto dropGraphs = [&] {
      for (CachedGraph& cached : graphs_)
        cudaGraphExecDestroy(cached.exec);
      graphs_.clear();
    };
    if (!enqueued || ended != cudaSuccess) {
      if (graph)
        cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      // What cannot be captured still runs: remember why and go step by step
      // (run() then launches nothing). A graph of earlier state addresses is
      // never launched again.
      graphFailure_ = !enqueued ? enqueued.message() : cuda::cudaFailure(ended, "ending capture").message();
      dropGraphs();
      enqueuedSpeculatively_ = false;
      return enqueueWholePlan(stream);
    }
    cudaGraphExec_t exec = nullptr;
    if (graphs_.size() == kCachedGraphs) {
      exec = graphs_.front().exec;
      graphs_.erase(graphs_.begin());
      cudaGraphExecUpdateResultInfo info{};
      if (cudaGraphExecUpdate(exec, graph, &info) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaGraphExecDestroy(exec);
        exec = nullptr;
      }
    }
    cudaError_t instantiated = exec ? cudaSuccess : instantiateGraph(&exec, graph);
    cudaGraphDestroy(graph);
    if (instantiated != cudaSuccess) {
      // As for a failed capture: nothing of this run has executed yet, so
      // run it step by step (and every later run) instead of failing every
      // run from now on.
      (void)cudaGetLastError();
      dropGraphs();
      graphFailure_ = cuda::cudaFailure(instantiated, "instantiating its graph").message();
      enqueuedSpeculatively_ = false;
      return enqueueWholePlan(stream);
    }
    graphs_.push_back({key, exec});
    ++stats_.captures;
    return Status::success();
  }

  /// O2's derived copies are re-established on the device by the same
  /// generated Convert kernel a plan step would use: emitted from a
  /// single-step plan per derived argument, compiled with the plan's kernels.
  Status planRederivation() {
    for (const BufferDesc& buffer : plan_.buffers) {
      if (buffer.derivedFrom < 0)
        continue;
      Plan conversion;
      conversion.name = plan_.name + ".rederive";
      conversion.buffers.push_back(plan_.buffers[plan_.argumentBuffer(std::size_t(buffer.derivedFrom))]);
      conversion.buffers.push_back(buffer);
      Step convert;
      convert.kind = StepKind::Elementwise;
      convert.params = ElementwiseParams{.op = ElementwiseOp::Convert};
      convert.computeType = (conversion.buffers[0].type.dtype == DType::F64 || buffer.type.dtype == DType::F64)
                                ? DType::F64
                                : DType::F32;
      convert.inputs = {0};
      convert.outputs = {1};
      convert.origin = "rederive " + buffer.name;
      Expected<cuda::ElementwiseKernel> kernel = cuda::emitElementwiseKernel(conversion, convert);
      if (!kernel)
        return Status::error("plan @" + plan_.name + ": the re-derivation of " +
                             describeArgument(plan_, std::size_t(buffer.argument)) + ": " + kernel.message());
      rederivations_.push_back({std::size_t(buffer.derivedFrom), std::size_t(buffer.argument), std::move(*kernel),
                                nullptr});
    }
    return Status::success();
  }

  Status prepareRederivation() {
    for (Rederivation& rederivation : rederivations_) {
      Expected<std::unique_ptr<DeviceStep>> step =
          cuda::makeGeneratedElementwiseStep(runtime_->context, rederivation.kernel);
      if (!step)
        return Status::error("plan @" + plan_.name + ": preparing the re-derivation of " +
                             describeArgument(plan_, rederivation.derived) + ": " + step.message());
      rederivation.convert = std::move(*step);
    }
    return Status::success();
  }


  /// A host input's pinned bytes, and the event after the copy that last read them.
  struct PinnedInput {
    void* host = nullptr;
    cudaEvent_t copied = nullptr;
  };

  struct Rederivation {
    std::size_t source, derived;
    cuda::ElementwiseKernel kernel;
    std::unique_ptr<DeviceStep> convert;
  };

  Plan plan_;
  std::shared_ptr<DeviceRuntime> runtime_;
  bool useGraphs_;
  bool checkNumerics_;
  int gemmSmReserve_; ///< CudaBackendOptions::gemmSmReserve, resolved
  /// The plan step of the last GEMM planned to leave gemmSmReserve_ SMs.
  std::optional<std::size_t> lastReservedGemm_;
  /// CudaBackendOptions::speculativeUpdateMinimumElements, resolved (0: off).
  int64_t speculativeMinimumElements_;
  /// CudaBackendOptions::foldUpdatesIntoGemms, resolved.
  bool foldUpdatesIntoGemms_;
  /// AMPJIT_CUDA_DEFERRED_UPDATE_IN_LINE=1: the deferred update runs first on
  /// the main stream, to measure what the overlap buys (on the H100, mlp9's
  /// GEMMs fill every SM, and its replayed step took 0.7 ms longer than its
  /// launches one by one).
  bool deferredUpdateInLine_;
  /// The split finiteness check's loads carry the evict-first hint
  /// (cuda::evictFirstHints, AMPJIT_CUDA_CACHE_HINTS).
  bool evictFirst_;
  /// Where checkNumerics writes, allocated only when checking.
  std::shared_ptr<Storage> finiteFlag_;
  std::vector<PreparedStep> steps_;
  std::vector<SplitFiniteCheck> splitChecks_;
  /// Plan step index -> the (split, chunk) pairs forked after it; the
  /// AllFinite step index -> its split.
  std::map<std::size_t, std::vector<std::pair<std::size_t, std::size_t>>> forksAfterStep_;
  std::map<std::size_t, std::size_t> splitAtStep_;
  /// Speculative updates: the schedule, and per update its launch.
  struct SpeculativeLaunch {
    std::size_t update = 0;   ///< in speculation_->updates
    std::size_t prepared = 0; ///< its PreparedStep
    cudaEvent_t fork = nullptr, done = nullptr;
    bool forked = false; ///< in the enqueue under way, not yet restored
    /// Computed in its gradient's GEMM (gemmFolds_): what it launches is the
    /// check of the new parameter.
    bool foldedIntoGemm = false;
  };
  static constexpr std::size_t kNotPrepared = std::numeric_limits<std::size_t>::max();
  std::optional<cuda::SpeculationSchedule> speculation_;
  std::vector<SpeculativeLaunch> speculativeLaunches_;
  std::map<std::size_t, std::size_t> speculativeAt_;                  ///< update step -> update
  std::map<std::size_t, std::vector<std::size_t>> speculateAfter_;    ///< readyAfter -> updates
  std::map<std::size_t, std::vector<std::size_t>> restoreBatches_;    ///< first update step -> updates
  std::set<std::size_t> hoistedSteps_;
  std::vector<std::size_t> preparedAt_; ///< plan step -> the PreparedStep it starts, or kNotPrepared
  std::map<BufferId, std::shared_ptr<Storage>> hoistedOutputs_;
  std::map<BufferId, std::shared_ptr<Storage>> secondBuffers_;
  /// Whether the run being bound speculates (bindSecondBuffers), whether the
  /// enqueue under way does, and whether what the run enqueued or launched did.
  bool speculating_ = false;
  bool speculativeEnqueue_ = false;
  bool enqueuedSpeculatively_ = false;
  /// A finiteness check whose gradients speculative updates check as they
  /// read them (in speculative runs): which, by which updates, and the flag
  /// they clear (a split check's own; else one of its own here).
  struct FoldedCheck {
    std::set<BufferId> checkedByUpdates;
    std::vector<std::size_t> updates;
    std::shared_ptr<Storage> ownFlag;
    uint8_t* flag = nullptr;
  };
  std::map<std::size_t, FoldedCheck> foldedChecks_; ///< AllFinite step -> its fold
  std::map<std::size_t, uint8_t*> updateChecksInto_; ///< update -> the flag it clears
  /// The updates gemmFoldOf allows, and those folded (prepareGemmFolds).
  std::map<std::size_t, cuda::GemmFold> gemmFoldCandidates_; ///< update -> its fold
  /// The candidates' GEMM steps, made with the heuristic's algorithm until
  /// prepareGemmFolds decides (timeGemmNotFoldedInto).
  std::set<std::size_t> untimedUntilFoldDecided_;
  struct GemmFoldLaunch {
    std::size_t update = 0; ///< in speculation_->updates
    std::unique_ptr<DeviceStep> gemm;
    std::shared_ptr<Storage> alphaBeta;
  };
  std::map<std::size_t, GemmFoldLaunch> gemmFolds_; ///< Gemm step -> its folded update
  DeferredUpdateTracker deferred_;
  /// Per side-stream launch of the deferred update, in order: the event the
  /// side stream records after it.
  std::vector<cudaEvent_t> deferredDone_;
  cudaEvent_t deferredFork_ = nullptr;
  std::shared_ptr<Storage> sideWorkspace_;
  std::size_t sideWorkspaceBytes_ = 0;
  /// The plan's side steps as they run on the side stream, in plan order,
  /// and the index among them of each one's plan step.
  std::vector<SideLaneStep> sideLane_;
  std::map<std::size_t, std::size_t> sideLaneAt_;
  std::size_t workspaceBytes_ = 0;
  /// Shared by this plan's cuDNN steps (fused batch norms' reserve spaces).
  cuda::CudnnPlanState cudnnState_;
  std::shared_ptr<Storage> arena_, workspace_;
  std::vector<std::shared_ptr<Storage>> fixed_;
  std::vector<void*> pointers_;
  std::vector<Rederivation> rederivations_;
  std::vector<PinnedInput> pinnedInputs_; ///< by buffer id, for host inputs (stageHostInput)
  /// Captured graphs by the state addresses they read (and whether they
  /// speculate): state that alternates between two buffers (speculative
  /// updates) replays two.
  struct CachedGraph {
    std::vector<void*> key;
    cudaGraphExec_t exec = nullptr;
  };
  static constexpr std::size_t kCachedGraphs = 2;
  std::vector<CachedGraph> graphs_; ///< the most recently used last
  std::string graphFailure_;
  CudaRunStats stats_;
  ObservedRun profile_ = ObservedRun::fromEnvironment("AMPJIT_PROFILE", "AMPJIT_PROFILE_RUN");
  ObservedRun timeline_ = ObservedRun::fromEnvironment("AMPJIT_TIMELINE", "AMPJIT_TIMELINE_RUN");
  /// While a timeline run enqueues: where its launches' stamps go.
  TimelineRecording* timelineRecording_ = nullptr;
};

class PinnedHostCopy final : public AsyncHostCopy {
public:
  PinnedHostCopy(std::shared_ptr<DeviceRuntime> runtime, TensorType type, HostCopySlot slot)
      : runtime_(std::move(runtime)), type_(std::move(type)), slot_(slot) {}
  ~PinnedHostCopy() override { runtime_->hostCopySlots.give(slot_); }

  bool ready() override { return cudaEventQuery(slot_.done) == cudaSuccess; }

  Expected<Tensor> wait() override {
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(slot_.done), "waiting for a device-to-host copy");
    Expected<Tensor> host = Tensor::allocate(type_);
    if (!host)
      return host;
    if (host->byteSize() > 0)
      std::memcpy(host->bytes(), slot_.pinned, host->byteSize());
    return host;
  }

private:
  std::shared_ptr<DeviceRuntime> runtime_;
  TensorType type_;
  HostCopySlot slot_;
};

class StreamEvent final : public DeviceEvent {
public:
  explicit StreamEvent(std::shared_ptr<DeviceRuntime> runtime, cudaEvent_t event)
      : runtime_(std::move(runtime)), event_(event) {}
  ~StreamEvent() override { cudaEventDestroy(event_); }

  Expected<double> millisecondsUntil(DeviceEvent& later) override {
    auto* end = dynamic_cast<StreamEvent*>(&later);
    if (end == nullptr)
      return Status::error("timing between events of different backends");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(end->event_), "waiting for an event");
    float milliseconds = 0;
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&milliseconds, event_, end->event_), "timing two events");
    return double(milliseconds);
  }

private:
  std::shared_ptr<DeviceRuntime> runtime_;
  cudaEvent_t event_;
};

class CudaBackendImpl final : public CudaBackend {
public:
  explicit CudaBackendImpl(std::shared_ptr<DeviceRuntime> runtime, CudaBackendOptions options)
      : runtime_(std::move(runtime)), options_(std::move(options)) {
    options_.checkNumerics |= environmentFlag("AMPJIT_CHECK_NUMERICS");
  }

  std::string_view name() const override { return "cuda"; }

  Expected<Tensor> allocate(const TensorType& type) override {
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaSetDevice(runtime_->device), "selecting the device");
    return allocateDeviceTensor(runtime_, type, true);
  }

  Expected<std::unique_ptr<Executable>> prepare(Plan plan) override {
    Status valid = verifyPlan(plan);
    if (!valid)
      return Status::error("plan @" + plan.name + " is invalid: " + valid.message());
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaSetDevice(runtime_->device), "selecting the device");
    auto executable = std::make_unique<CudaExecutable>(std::move(plan), runtime_, options_.useGraphs,
                                                       options_.checkNumerics, options_.gemmSmReserve,
                                                       options_.speculativeUpdateMinimumElements,
                                                       options_.foldUpdatesIntoGemms > 0);
    AMPJIT_RETURN_IF_ERROR(executable->prepare());
    return std::unique_ptr<Executable>(std::move(executable));
  }

  Expected<Tensor> toHost(const Tensor& tensor) override {
    if (tensor.device() == Device::Host)
      return tensor;
    Expected<Tensor> host = Tensor::allocate(tensor.type());
    if (!host)
      return host;
    if (tensor.byteSize() > 0)
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host->bytes(), tensor.bytes(), tensor.byteSize(),
                                                  cudaMemcpyDeviceToHost, runtime_->stream),
                                  "copying a " + typeToString(tensor.type()) + " tensor to the host");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(runtime_->stream), "waiting for the device");
    return host;
  }

  Expected<Tensor> toDevice(const Tensor& host) override {
    if (host.device() == Device::Cuda)
      return host;
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaSetDevice(runtime_->device), "selecting the device");
    Expected<Tensor> device = allocateDeviceTensor(runtime_, host.type(), false);
    if (!device)
      return device;
    // From pageable memory the call returns once the bytes are staged, so
    // `host` may change right after.
    if (host.byteSize() > 0)
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device->bytes(), host.bytes(), host.byteSize(),
                                                  cudaMemcpyHostToDevice, runtime_->stream),
                                  "copying a " + typeToString(host.type()) + " tensor to the device");
    return device;
  }

  Status copyIntoTensor(Tensor& tensor, const void* source, bool sourceOnDevice, void* callerStream) override {
    if (tensor.device() != Device::Cuda)
      return Status::error("copyIntoTensor: the " + typeToString(tensor.type()) + " tensor is not on the device");
    if (source == nullptr)
      return Status::error("copyIntoTensor: the source is NULL");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaSetDevice(runtime_->device), "selecting the device");
    std::string what = "copying " + std::to_string(tensor.byteSize()) + " bytes into a " +
                       typeToString(tensor.type()) + " tensor";
    if (sourceOnDevice) {
      AMPJIT_RETURN_IF_ERROR(checkCallerDeviceMemory(source, "the source"));
      return betweenCallerWork(callerStream, what, [&](cudaStream_t stream) {
        return cudaMemcpyAsync(tensor.bytes(), source, tensor.byteSize(), cudaMemcpyDeviceToDevice, stream);
      });
    }
    Expected<cudaPointerAttributes> attributes = pointerAttributes(source, "the source");
    if (!attributes)
      return attributes.status();
    if (attributes->type == cudaMemoryTypeDevice || attributes->type == cudaMemoryTypeManaged)
      return Status::error("copyIntoTensor: the source " + describeAddress(source) +
                           " is device memory, given as host memory");
    // A copy from pinned memory returns before it has read the bytes, so
    // they are staged in pageable memory first, as the runtime stages
    // pageable bytes itself before its copy returns.
    std::vector<std::byte> staged;
    if (attributes->type == cudaMemoryTypeHost) {
      staged.assign(static_cast<const std::byte*>(source), static_cast<const std::byte*>(source) + tensor.byteSize());
      source = staged.data();
    }
    if (tensor.byteSize() > 0)
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tensor.bytes(), source, tensor.byteSize(), cudaMemcpyHostToDevice,
                                                  runtime_->stream),
                                  what);
    return Status::success();
  }

  Status copyTensorToDeviceMemory(const Tensor& tensor, void* destination, void* callerStream) override {
    if (tensor.device() != Device::Cuda)
      return Status::error("copyTensorToDeviceMemory: the " + typeToString(tensor.type()) +
                           " tensor is not on the device");
    if (destination == nullptr)
      return Status::error("copyTensorToDeviceMemory: the destination is NULL");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaSetDevice(runtime_->device), "selecting the device");
    AMPJIT_RETURN_IF_ERROR(checkCallerDeviceMemory(destination, "the destination"));
    return betweenCallerWork(callerStream,
                             "copying a " + typeToString(tensor.type()) + " tensor into the caller's device memory",
                             [&](cudaStream_t stream) {
                               return cudaMemcpyAsync(destination, tensor.bytes(), tensor.byteSize(),
                                                      cudaMemcpyDeviceToDevice, stream);
                             });
  }

  Expected<std::unique_ptr<AsyncHostCopy>> copyToHostAsync(const Tensor& tensor) override {
    if (tensor.device() != Device::Cuda)
      return Status::error("copyToHostAsync: the tensor is not on the device");
    // The event must belong to the stream's device.
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaSetDevice(runtime_->device), "selecting the device");
    Expected<HostCopySlot> taken = runtime_->hostCopySlots.take(tensor.byteSize());
    if (!taken)
      return taken.status();
    HostCopySlot slot = *taken;
    cudaError_t error = cudaSuccess;
    if (tensor.byteSize() > 0)
      error = cudaMemcpyAsync(slot.pinned, tensor.bytes(), tensor.byteSize(), cudaMemcpyDeviceToHost, runtime_->stream);
    if (error == cudaSuccess)
      error = cudaEventRecord(slot.done, runtime_->stream);
    if (error != cudaSuccess) {
      // Back at once: a later copy into the buffer follows any enqueued here.
      runtime_->hostCopySlots.give(slot);
      return cuda::cudaFailure(error, "enqueueing a device-to-host copy");
    }
    return std::unique_ptr<AsyncHostCopy>(new PinnedHostCopy(runtime_, tensor.type(), slot));
  }

  Expected<std::unique_ptr<DeviceEvent>> recordEvent() override {
    cudaEvent_t event = nullptr;
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaSetDevice(runtime_->device), "selecting the device");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event), "creating an event");
    cudaError_t error = cudaEventRecord(event, runtime_->stream);
    if (error != cudaSuccess) {
      cudaEventDestroy(event);
      return cuda::cudaFailure(error, "recording an event");
    }
    return std::unique_ptr<DeviceEvent>(new StreamEvent(runtime_, event));
  }

  Status synchronize() override {
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(runtime_->stream), "waiting for the device");
    return Status::success();
  }

  int64_t peakDeviceBytes() override {
    uint64_t high = 0;
    if (cudaMemPoolGetAttribute(runtime_->pool, cudaMemPoolAttrUsedMemHigh, &high) != cudaSuccess)
      return -1;
    return int64_t(high);
  }

  void* stream() override { return runtime_->stream; }

  std::string architecture() const override { return runtime_->context.architecture; }

  CudaRunStats stats(const Executable& executable) const override {
    const auto* cudaExecutable = dynamic_cast<const CudaExecutable*>(&executable);
    return cudaExecutable ? cudaExecutable->stats() : CudaRunStats{};
  }

  bool speculatesOptimizerUpdates() const override { return options_.speculativeUpdateMinimumElements > 0; }
  bool speculatesOptimizerUpdatesOf(const Plan& plan) const override {
    std::string whyNot;
    return speculationOf(plan, options_.speculativeUpdateMinimumElements, options_.checkNumerics, whyNot)
        .has_value();
  }
  CudaBackendOptions resolvedOptions() const override { return options_; }

private:
  static std::string describeAddress(const void* pointer) {
    char text[32];
    std::snprintf(text, sizeof text, "%p", pointer);
    return text;
  }

  Expected<cudaPointerAttributes> pointerAttributes(const void* pointer, const std::string& what) {
    cudaPointerAttributes attributes{};
    cudaError_t error = cudaPointerGetAttributes(&attributes, pointer);
    if (error != cudaSuccess) {
      cudaGetLastError(); // not sticky: leave no error for the next call to find
      return cuda::cudaFailure(error, "asking the CUDA runtime what " + what + " " + describeAddress(pointer) + " is");
    }
    return attributes;
  }

  /// Whether a caller's pointer is memory this backend's stream can copy to
  /// and from on the device: the device's own memory, or managed memory. A
  /// host pointer would fail inside the copy with no word of which one.
  Status checkCallerDeviceMemory(const void* pointer, const std::string& what) {
    Expected<cudaPointerAttributes> attributes = pointerAttributes(pointer, what);
    if (!attributes)
      return attributes.status();
    std::string device = "CUDA device " + std::to_string(runtime_->device);
    switch (attributes->type) {
    case cudaMemoryTypeManaged:
      return Status::success();
    case cudaMemoryTypeDevice:
      if (attributes->device == runtime_->device)
        return Status::success();
      return Status::error(what + " " + describeAddress(pointer) + " is memory of CUDA device " +
                           std::to_string(attributes->device) + ", not of " + device + ", where the session runs");
    case cudaMemoryTypeHost:
      return Status::error(what + " " + describeAddress(pointer) + " is pinned host memory, not memory of " + device);
    default:
      return Status::error(what + " " + describeAddress(pointer) + " is host memory, not memory of " + device);
    }
  }

  /// Enqueues `copy` on the backend's stream between the caller's work on
  /// `callerStream`: after what is enqueued there so far, and before what
  /// comes later. Two events and two waits; the host waits for nothing.
  Status betweenCallerWork(void* callerStream, const std::string& what,
                           const std::function<cudaError_t(cudaStream_t)>& copy) {
    auto caller = static_cast<cudaStream_t>(callerStream);
    for (cudaEvent_t* event : {&runtime_->callerWorkDone, &runtime_->callerCopyDone})
      if (*event == nullptr)
        AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(event, cudaEventDisableTiming),
                                    "creating an event for " + what);
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventRecord(runtime_->callerWorkDone, caller),
                                what + ": recording the caller's stream");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(runtime_->stream, runtime_->callerWorkDone, 0),
                                what + ": waiting for the caller's stream");
    AMPJIT_CUDA_RETURN_IF_ERROR(copy(runtime_->stream), what);
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventRecord(runtime_->callerCopyDone, runtime_->stream), what);
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(caller, runtime_->callerCopyDone, 0),
                                what + ": making the caller's stream wait for it");
    return Status::success();
  }

  std::shared_ptr<DeviceRuntime> runtime_;
  CudaBackendOptions options_;
};

} // namespace

Expected<std::unique_ptr<CudaBackend>> createCudaBackend(CudaBackendOptions options) {
  int count = cudaDeviceCount();
  if (count == 0)
    return Status::error("no CUDA device is available (cudaGetDeviceCount found none, or no driver is installed)");
  if (options.device < 0 || options.device >= count)
    return Status::error("CUDA device " + std::to_string(options.device) + " does not exist (" +
                         std::to_string(count) + " found)");
  std::filesystem::path cache = options.kernelCacheDirectory.empty() ? cuda::defaultKernelCacheDirectory()
                                                                     : options.kernelCacheDirectory;
  auto runtime = std::make_shared<DeviceRuntime>(cache);
  runtime->device = options.device;
  AMPJIT_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device), "selecting CUDA device " + std::to_string(options.device));
  int major = 0, minor = 0, multiprocessors = 0, threadsPerMultiprocessor = 0;
  AMPJIT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, options.device),
                              "reading the compute capability");
  AMPJIT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, options.device),
                              "reading the compute capability");
  AMPJIT_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, options.device),
      "reading the multiprocessor count");
  AMPJIT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&threadsPerMultiprocessor,
                                                     cudaDevAttrMaxThreadsPerMultiProcessor, options.device),
                              "reading the threads an SM holds");
  // The step's own work at the device's greatest priority, the side
  // stream's (the deferred update, early finiteness checks) at its least:
  // the block scheduler then gives the GEMMs and convolutions the SMs first
  // and the memory-bound update what is left, rather than the update
  // delaying the work it was meant to hide under. Captured kernels keep
  // their stream's priority (the graph is instantiated to use it).
  int leastPriority = 0, greatestPriority = 0;
  AMPJIT_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&leastPriority, &greatestPriority),
                              "reading the stream priority range");
  runtime->streamPriorities = !environmentFlag("AMPJIT_CUDA_EQUAL_STREAM_PRIORITIES");
  if (!runtime->streamPriorities)
    greatestPriority = leastPriority;
  AMPJIT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&runtime->stream, cudaStreamNonBlocking, greatestPriority),
                              "creating the backend's stream");
  AMPJIT_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithPriority(&runtime->sideStream, cudaStreamNonBlocking, leastPriority),
      "creating the backend's side stream");
  // The pool keeps what it reserved: after the first step every allocation
  // is served from it, never from cudaMalloc.
  AMPJIT_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&runtime->pool, options.device),
                              "getting the device's memory pool");
  uint64_t keepEverything = std::numeric_limits<uint64_t>::max();
  AMPJIT_CUDA_RETURN_IF_ERROR(
      cudaMemPoolSetAttribute(runtime->pool, cudaMemPoolAttrReleaseThreshold, &keepEverything),
      "configuring the memory pool");
  AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&runtime->context.cublasLt), "creating the cuBLASLt handle");
  runtime->context.device = options.device;
  runtime->context.architecture = "sm_" + std::to_string(major) + std::to_string(minor);
  runtime->context.multiprocessorCount = multiprocessors;
  runtime->context.maxThreadsPerMultiprocessor = threadsPerMultiprocessor;
  runtime->context.compiler = &runtime->compiler;
  if (options.gemmSmReserve < 0) {
    std::optional<long long> reserve = environmentInteger("AMPJIT_CUDA_GEMM_SM_RESERVE", 0);
    if (!reserve || *reserve < 0 || *reserve >= multiprocessors)
      return Status::error("AMPJIT_CUDA_GEMM_SM_RESERVE='" + std::string(std::getenv("AMPJIT_CUDA_GEMM_SM_RESERVE")) +
                           "': the SMs a GEMM leaves to the deferred update must be a whole number from 0 to " +
                           std::to_string(multiprocessors - 1) + " (the device has " +
                           std::to_string(multiprocessors) + ")");
    options.gemmSmReserve = int(*reserve);
  } else if (options.gemmSmReserve >= multiprocessors) {
    return Status::error("CudaBackendOptions::gemmSmReserve " + std::to_string(options.gemmSmReserve) +
                         ": a GEMM cannot leave all of the device's " + std::to_string(multiprocessors) +
                         " SMs to the deferred update");
  }
  if (options.speculativeUpdateMinimumElements < 0)
    options.speculativeUpdateMinimumElements =
        environmentFlag("AMPJIT_CUDA_SPECULATIVE_UPDATE", true) ? cuda::kMinSpeculativeUpdateElements : 0;
  if (options.foldUpdatesIntoGemms < 0)
    options.foldUpdatesIntoGemms = environmentFlag("AMPJIT_CUDA_GEMM_FOLDED_UPDATE", true) ? 1 : 0;
  if (options.gemmTuningMinimumFlops < 0)
    options.gemmTuningMinimumFlops =
        environmentFlag("AMPJIT_CUDA_GEMM_TUNING", true) ? cuda::kDefaultGemmTuningMinimumFlops : 0;
  if (options.gemmTuningCandidates < 0) {
    std::optional<long long> candidates =
        environmentInteger("AMPJIT_CUDA_GEMM_TUNING_CANDIDATES", cuda::kDefaultGemmTuningCandidates);
    if (!candidates || *candidates < 1 || *candidates > cuda::kMaxGemmTuningCandidates)
      return Status::error("AMPJIT_CUDA_GEMM_TUNING_CANDIDATES='" +
                           std::string(std::getenv("AMPJIT_CUDA_GEMM_TUNING_CANDIDATES")) +
                           "': the algorithms a tuned GEMM asks cuBLASLt's heuristic for must be a whole number "
                           "from 1 to " + std::to_string(cuda::kMaxGemmTuningCandidates));
    options.gemmTuningCandidates = int(*candidates);
  } else if (options.gemmTuningCandidates < 1 || options.gemmTuningCandidates > cuda::kMaxGemmTuningCandidates) {
    return Status::error("CudaBackendOptions::gemmTuningCandidates " + std::to_string(options.gemmTuningCandidates) +
                         ": a tuned GEMM asks cuBLASLt's heuristic for 1 to " +
                         std::to_string(cuda::kMaxGemmTuningCandidates) + " algorithms");
  }
  if (options.gemmTuningMinimumFlops > 0) {
    // The key's device part: what an algorithm's speed depends on that
    // another device of the same architecture may not share.
    int l2Bytes = 0, busBits = 0;
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&l2Bytes, cudaDevAttrL2CacheSize, options.device),
                                "reading the L2 cache's size");
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&busBits, cudaDevAttrGlobalMemoryBusWidth, options.device),
                                "reading the memory bus width");
    cuda::GemmTuner& tuner = runtime->gemmTuner;
    tuner.minimumFlops = options.gemmTuningMinimumFlops;
    tuner.candidates = options.gemmTuningCandidates;
    tuner.cacheDirectory = cache;
    tuner.deviceKey = runtime->context.architecture + " sms=" + std::to_string(multiprocessors) +
                      " l2=" + std::to_string(l2Bytes) + " bus=" + std::to_string(busBits) +
                      " cublasLt=" + std::to_string(cublasLtGetVersion());
    tuner.pool = runtime->pool;
    tuner.stream = runtime->stream;
    runtime->context.gemmTuner = &tuner;
  }
  return std::unique_ptr<CudaBackend>(new CudaBackendImpl(std::move(runtime), std::move(options)));
}

} // namespace ampjit::runtime
