// Gemm steps through cuBLASLt.
//
// The plan's matrices are row-major; cuBLASLt's are column-major. A row-major
// C[M, N] is the column-major C^T[N, M], and C^T = op(B)^T op(A)^T, so the
// call computes with B's bytes as its first operand and A's as its second,
// with m = N, n = M: no data moves.
//
// Precision as the CPU backend's GEMM: f32 computes in true fp32
// (CUBLAS_COMPUTE_32F never uses TF32; only the _FAST_ compute types do),
// f16 and bf16 accumulate in fp32 and round C once, f64 computes in f64.
// The algorithm comes from cuBLASLt's heuristic at prepare, for the
// alignment the buffers are known to have, so a run only enqueues.
//
// Epilogues (Plan.h, GemmEpilogue) map one to one onto cuBLASLt's, seen
// through the swap: our C[M, N] is cuBLASLt's D with N rows and M columns, so
// a bias or a bias gradient of one value per column of C (bias, dgelu_bgrad)
// is cuBLASLt's per-row vector, the GELU input has C's layout with leading
// dimension N, and a sum over K of our A (bgrad_a) is cuBLASLt's BGRADB,
// since our A is its B.

#include "DeviceStep.h"
#include "GemmTuning.h"
#include "Nvrtc.h"

#include "ampjit/runtime/Files.h"
#include "ampjit/runtime/Shape.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ampjit::runtime::cuda {

namespace {

/// cuBLASLt's workspace: what NVIDIA recommends for Hopper.
constexpr std::size_t kGemmWorkspaceBytes = 32u << 20;

Expected<cudaDataType_t> cudaTypeOf(DType dtype) {
  switch (dtype) {
  case DType::F32: return CUDA_R_32F;
  case DType::F64: return CUDA_R_64F;
  case DType::F16: return CUDA_R_16F;
  case DType::BF16: return CUDA_R_16BF;
  default: return Status::error("cuBLASLt multiplies floating matrices only, not " + std::string(dtypeName(dtype)));
  }
}

/// Owns the cuBLASLt descriptors of one step.
struct LtDescriptors {
  cublasLtMatmulDesc_t matmul = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, result = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtDescriptors() {
    if (preference)
      cublasLtMatmulPreferenceDestroy(preference);
    if (result)
      cublasLtMatrixLayoutDestroy(result);
    if (second)
      cublasLtMatrixLayoutDestroy(second);
    if (first)
      cublasLtMatrixLayoutDestroy(first);
    if (matmul)
      cublasLtMatmulDescDestroy(matmul);
  }
};

Status setBatch(cublasLtMatrixLayout_t layout, int32_t count, int64_t strideElements) {
  AMPJIT_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
      "setting a batch count");
  AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                 &strideElements, sizeof strideElements),
                                "setting a batch stride");
  return Status::success();
}

/// Whether offsets[b] == b * stride for one stride (a strided batch), and that stride.
bool isStrided(const std::vector<int64_t>& offsets, int64_t& stride) {
  stride = offsets.size() > 1 ? offsets[1] - offsets[0] : 0;
  for (size_t b = 0; b < offsets.size(); ++b)
    if (offsets[b] != int64_t(b) * stride)
      return false;
  return true;
}

cublasLtEpilogue_t cublasEpilogueOf(GemmEpilogue epilogue) {
  switch (epilogue) {
  case GemmEpilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
  case GemmEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
  case GemmEpilogue::BiasRelu: return CUBLASLT_EPILOGUE_RELU_BIAS;
  case GemmEpilogue::BiasGelu: return CUBLASLT_EPILOGUE_GELU_BIAS;
  case GemmEpilogue::BiasGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  case GemmEpilogue::DGelu: return CUBLASLT_EPILOGUE_DGELU;
  case GemmEpilogue::DGeluBiasGrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
  case GemmEpilogue::BiasGradA: return CUBLASLT_EPILOGUE_BGRADB; // our A is cuBLASLt's B
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

/// Where an epilogue's extra buffer goes: cuBLASLt's bias pointer (a bias, or
/// a bias gradient it writes) or its aux pointer (the GELU input).
enum class EpilogueBuffer : uint8_t { None, Bias, Aux };

/// The one multiple of 64 every plan buffer's address is (arena offsets and
/// the pool's allocations). The heuristic reads the bias and aux pointers'
/// values only for their alignment, and they are set per enqueue, so at
/// prepare they hold this placeholder: the algorithm then needs no more
/// alignment than the real pointers have.
const void* const kAlignmentPlaceholder = reinterpret_cast<const void*>(uintptr_t(64));

class GemmStep final : public DeviceStep {
public:
  std::size_t workspaceBytes() const override { return kGemmWorkspaceBytes; }

  Status enqueue(const StepPointers& pointers, cudaStream_t stream) override {
    if (foldsUpdate_)
      return enqueueFoldedUpdate(pointers, stream);
    size_t inputs = 2 + (extraInput_ != EpilogueBuffer::None), outputs = 1 + (extraOutput_ != EpilogueBuffer::None);
    if (pointers.inputs.size() != inputs || pointers.outputs.size() != outputs)
      return Status::error("gemm step: wrong number of buffers");
    // Host-side descriptor updates: captured graphs keep the pointers the
    // matmul node was recorded with.
    if (extraInput_ != EpilogueBuffer::None && descriptors_.matmul)
      AMPJIT_RETURN_IF_ERROR(setEpiloguePointer(extraInput_, pointers.inputs[2]));
    if (extraOutput_ != EpilogueBuffer::None && descriptors_.matmul)
      AMPJIT_RETURN_IF_ERROR(setEpiloguePointer(extraOutput_, pointers.outputs[1]));
    const auto* aBytes = static_cast<const std::byte*>(pointers.inputs[0]);
    const auto* bBytes = static_cast<const std::byte*>(pointers.inputs[1]);
    auto* cBytes = static_cast<std::byte*>(pointers.outputs[0]);
    if (empty_)
      return Status::success();
    if (zeroK_) {
      AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(cBytes, 0, cBytesTotal_, stream), "zeroing a K = 0 product");
      return Status::success();
    }
    const void* alpha = computeDouble_ ? static_cast<const void*>(&alphaDouble_) : &alphaFloat_;
    const void* beta = computeDouble_ ? static_cast<const void*>(&betaDouble_) : &betaFloat_;
    for (const Call& call : calls_) {
      // cuBLASLt's first operand holds B's bytes and its second A's (see the file comment).
      AMPJIT_CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmul(handle_, descriptors_.matmul, alpha, bBytes + call.bByteOffset, descriptors_.first,
                         aBytes + call.aByteOffset, descriptors_.second, beta, cBytes + call.cByteOffset,
                         descriptors_.result, cBytes + call.cByteOffset, descriptors_.result, &algorithm_,
                         pointers.workspace, kGemmWorkspaceBytes, stream),
          "cublasLtMatmul");
    }
    return Status::success();
  }

  std::string profileNote() const override {
    auto config = [&](cublasLtMatmulAlgoConfigAttributes_t attribute) {
      int32_t value = -1;
      size_t written = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&algorithm_, attribute, &value, sizeof value, &written);
      return std::to_string(value);
    };
    return "m=" + std::to_string(m_) + " n=" + std::to_string(n_) + " k=" + std::to_string(k_) + " calls=" +
           std::to_string(calls_.size()) + " " + shape_ + " algo=" + config(CUBLASLT_ALGO_CONFIG_ID) +
           " tile=" + config(CUBLASLT_ALGO_CONFIG_TILE_ID) + " stages=" + config(CUBLASLT_ALGO_CONFIG_STAGES_ID) +
           " splitk=" + config(CUBLASLT_ALGO_CONFIG_SPLITK_NUM) +
           " reduction=" + config(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) + " waves=" + std::to_string(waves_) +
           tuning_;
  }

  /// makeFoldedUpdateGemmStep's: inputs [A, B, state, scalars], outputs
  /// [new state], alpha and beta the two floats at `scalars`.
  Status enqueueFoldedUpdate(const StepPointers& pointers, cudaStream_t stream) {
    if (pointers.inputs.size() != 4 || pointers.outputs.size() != 1 || calls_.size() != 1)
      return Status::error("gemm step with a folded update: wrong number of buffers");
    const auto* scalars = static_cast<const float*>(pointers.inputs[3]);
    // cuBLASLt's first operand holds B's bytes and its second A's (see the file comment).
    AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, descriptors_.matmul, scalars, pointers.inputs[1],
                                                 descriptors_.first, pointers.inputs[0], descriptors_.second,
                                                 scalars + 1, pointers.inputs[2], descriptors_.result,
                                                 pointers.outputs[0], descriptors_.result, &algorithm_,
                                                 pointers.workspace, kGemmWorkspaceBytes, stream),
                                  "cublasLtMatmul with a folded update");
    return Status::success();
  }

  Status setEpiloguePointer(EpilogueBuffer buffer, const void* pointer) {
    cublasLtMatmulDescAttributes_t attribute =
        buffer == EpilogueBuffer::Bias ? CUBLASLT_MATMUL_DESC_BIAS_POINTER : CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER;
    AMPJIT_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(descriptors_.matmul, attribute, &pointer, sizeof pointer),
        buffer == EpilogueBuffer::Bias ? "setting the bias pointer" : "setting the epilogue aux pointer");
    return Status::success();
  }

  struct Call {
    int64_t aByteOffset = 0, bByteOffset = 0, cByteOffset = 0;
  };

  cublasLtHandle_t handle_ = nullptr;
  LtDescriptors descriptors_;
  cublasLtMatmulAlgo_t algorithm_{};
  std::vector<Call> calls_;
  bool empty_ = false, zeroK_ = false, computeDouble_ = false, foldsUpdate_ = false;
  EpilogueBuffer extraInput_ = EpilogueBuffer::None, extraOutput_ = EpilogueBuffer::None;
  std::size_t cBytesTotal_ = 0;
  float alphaFloat_ = 1.0f, betaFloat_ = 0.0f;
  double alphaDouble_ = 1.0, betaDouble_ = 0.0;
  // For profileNote: the product's shape, transposes and epilogue, and the heuristic's wave count.
  int64_t m_ = 0, n_ = 0, k_ = 0;
  std::string shape_;
  float waves_ = 0;
  /// For profileNote: which of the heuristic's candidates tuning chose, and how.
  std::string tuning_;
};

} // namespace

namespace {

//===----------------------------------------------------------------------===//
// Tuning (GemmTuning.h)
//===----------------------------------------------------------------------===//

/// Timed runs of one candidate. The screen is one run of a few enqueues
/// between two events; a finalist's trials are three longer ones, long
/// enough for the events' resolution and the launches' spacing not to
/// matter, and their median counts. Both are sized from the first
/// candidate's single enqueue.
constexpr double kTuningScreenMilliseconds = 0.25;
constexpr int kTuningTrials = 3;
constexpr double kTuningTrialMilliseconds = 0.5;
constexpr int kMaxTuningRepetitions = 16;

/// What timing learned of each candidate, per enqueue in milliseconds.
struct CandidateTimes {
  std::vector<double> screened;  ///< the screening run (NaN: refused)
  std::vector<double> trialled;  ///< the finalists' median trial (NaN: refused, or not a finalist)

  static std::size_t ran(const std::vector<double>& times) {
    return std::size_t(std::count_if(times.begin(), times.end(), [](double ms) { return !std::isnan(ms); }));
  }

  /// For the disk: a finalist's trial, the others' screen.
  std::vector<double> best() const {
    std::vector<double> times = screened;
    for (std::size_t c = 0; c < times.size(); ++c)
      if (!std::isnan(trialled[c]))
        times[c] = trialled[c];
    return times;
  }
};

std::size_t roundedScratchBytes(std::size_t bytes) { return std::max<std::size_t>(256, (bytes + 255) / 256 * 256); }

/// Scratch memory and events of one problem's timing, given back on every path.
struct TuningScratch {
  cudaStream_t stream = nullptr;
  void* memory = nullptr;
  std::vector<cudaEvent_t> events;
  ~TuningScratch() {
    for (cudaEvent_t event : events)
      cudaEventDestroy(event);
    if (memory)
      cudaFreeAsync(memory, stream);
  }
};

/// Each candidate's milliseconds per enqueue of `gemm` on scratch operands
/// of the slots' sizes (filled with one finite value: timing needs no
/// meaningful numbers, but an inf or NaN could take a slower path): every
/// one that cuBLASLt runs is screened, the finalists (gemmTuningFinalists)
/// are trialled. Leaves `gemm` with the last candidate it ran. Nothing, and
/// why in `untuned`, when the scratch does not fit in memory (then before any
/// candidate ran, so `gemm` keeps the heuristic's first): tuning is an
/// optimisation, never a reason for a plan not to run.
Expected<CandidateTimes> timeCandidates(GemmStep& gemm, std::span<const cublasLtMatmulHeuristicResult_t> candidates,
                                             std::span<const std::size_t> inputBytes,
                                             std::span<const std::size_t> outputBytes, GemmTuner& tuner,
                                             std::string& untuned) {
  TuningScratch scratch;
  scratch.stream = tuner.stream;
  std::size_t total = roundedScratchBytes(gemm.workspaceBytes());
  for (std::span<const std::size_t> slots : {inputBytes, outputBytes})
    for (std::size_t bytes : slots)
      total += roundedScratchBytes(bytes);
  if (cudaError_t error = cudaMallocFromPoolAsync(&scratch.memory, total, tuner.pool, tuner.stream);
      error != cudaSuccess) {
    scratch.memory = nullptr;
    if (error != cudaErrorMemoryAllocation)
      return cudaFailure(error, "allocating " + std::to_string(total) + " bytes of scratch operands");
    cudaGetLastError(); // not sticky: clear it for whoever checks next
    untuned = "its " + std::to_string(total) + " bytes of scratch operands do not fit in device memory";
    return CandidateTimes{};
  }
  AMPJIT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scratch.memory, 0x3c, total, tuner.stream), "filling the scratch operands");
  auto* next = static_cast<std::byte*>(scratch.memory);
  auto carve = [&](std::size_t bytes) {
    void* at = next;
    next += roundedScratchBytes(bytes);
    return at;
  };
  std::vector<void*> inputs, outputs;
  for (std::size_t bytes : inputBytes)
    inputs.push_back(carve(bytes));
  for (std::size_t bytes : outputBytes)
    outputs.push_back(carve(bytes));
  StepPointers pointers{inputs, outputs, carve(gemm.workspaceBytes())};
  for (int e = 0; e <= kTuningTrials; ++e) {
    cudaEvent_t event = nullptr;
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event), "creating a timing event");
    scratch.events.push_back(event);
  }
  auto elapsed = [&](int from, int to, double& ms) -> Status {
    float value = 0;
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(scratch.events[std::size_t(to)]), "timing an algorithm");
    AMPJIT_CUDA_RETURN_IF_ERROR(
        cudaEventElapsedTime(&value, scratch.events[std::size_t(from)], scratch.events[std::size_t(to)]),
        "reading an algorithm's time");
    ms = double(value);
    return Status::success();
  };

  auto record = [&](int event) -> Status {
    AMPJIT_CUDA_RETURN_IF_ERROR(cudaEventRecord(scratch.events[std::size_t(event)], tuner.stream),
                                "timing an algorithm");
    return Status::success();
  };
  auto enqueueRepeatedly = [&](int repetitions) -> Status {
    for (int r = 0; r < repetitions; ++r)
      AMPJIT_RETURN_IF_ERROR(gemm.enqueue(pointers, tuner.stream));
    return Status::success();
  };
  // One run between events 0 and 1: milliseconds per enqueue.
  auto timedRun = [&](int repetitions, double& perEnqueue) -> Status {
    double ms = 0;
    AMPJIT_RETURN_IF_ERROR(record(0));
    AMPJIT_RETURN_IF_ERROR(enqueueRepeatedly(repetitions));
    AMPJIT_RETURN_IF_ERROR(record(1));
    AMPJIT_RETURN_IF_ERROR(elapsed(0, 1, ms));
    perEnqueue = ms / repetitions;
    return Status::success();
  };
  auto repetitionsFor = [](double milliseconds, double once) {
    return once > 0 ? int(std::clamp(std::ceil(milliseconds / once), 1.0, double(kMaxTuningRepetitions)))
                    : kMaxTuningRepetitions;
  };

  CandidateTimes times;
  times.screened.assign(candidates.size(), std::nan(""));
  times.trialled.assign(candidates.size(), std::nan(""));
  int screenRepetitions = 0, trialRepetitions = 0;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    gemm.algorithm_ = candidates[c].algo;
    // The warm-up, which also loads the kernel: a candidate cuBLASLt
    // refuses is refused here, at the call.
    if (!gemm.enqueue(pointers, tuner.stream))
      continue;
    if (screenRepetitions == 0) {
      double once = 0;
      AMPJIT_RETURN_IF_ERROR(timedRun(1, once));
      screenRepetitions = repetitionsFor(kTuningScreenMilliseconds, once);
      trialRepetitions = repetitionsFor(kTuningTrialMilliseconds, once);
    }
    AMPJIT_RETURN_IF_ERROR(timedRun(screenRepetitions, times.screened[c]));
  }
  for (int c : gemmTuningFinalists(times.screened)) {
    gemm.algorithm_ = candidates[std::size_t(c)].algo;
    // Back to back, each trial's end the next one's start.
    AMPJIT_RETURN_IF_ERROR(record(0));
    for (int trial = 1; trial <= kTuningTrials; ++trial) {
      AMPJIT_RETURN_IF_ERROR(enqueueRepeatedly(trialRepetitions));
      AMPJIT_RETURN_IF_ERROR(record(trial));
    }
    std::vector<double> trials(kTuningTrials);
    for (int trial = 0; trial < kTuningTrials; ++trial)
      AMPJIT_RETURN_IF_ERROR(elapsed(trial, trial + 1, trials[std::size_t(trial)]));
    std::nth_element(trials.begin(), trials.begin() + kTuningTrials / 2, trials.end());
    times.trialled[std::size_t(c)] = trials[kTuningTrials / 2] / trialRepetitions;
  }
  return times;
}

/// Gives `gemm` the tuned one of the heuristic's `candidates` for `problem`:
/// chosen earlier in this process, read from the disk cache, or timed now
/// (and then written there).
Status tuneAlgorithm(GemmStep& gemm, std::span<const cublasLtMatmulHeuristicResult_t> candidates,
                     const std::string& problem, std::span<const std::size_t> inputBytes,
                     std::span<const std::size_t> outputBytes, GemmTuner& tuner) {
  // The list asked for is part of the key: a longer list may rank the same
  // algorithms alike and offer more, and each length keeps its own entry.
  std::string key = tuner.deviceKey + " | up to " + std::to_string(tuner.candidates) + " candidates | " + problem;
  int count = int(candidates.size()), choice = -1;
  std::string how;
  if (auto known = tuner.chosen.find(key); known != tuner.chosen.end() && known->second < count) {
    choice = known->second;
    how = "chosen before";
  }
  std::filesystem::path entry = tuner.cacheDirectory.empty() ? std::filesystem::path()
                                                             : gemmTuningEntryPath(tuner.cacheDirectory, key);
  if (choice < 0 && !entry.empty()) {
    if (Expected<std::string> text = readWholeFile(entry); text.ok()) {
      std::optional<GemmTuningRecord> record = decodeGemmTuning(*text, key);
      if (record && record->candidates == count) {
        choice = record->choice;
        how = "from the cache";
        ++tuner.counts.cacheHits;
      } else {
        ++tuner.counts.cacheEntriesRejected;
      }
    }
  }
  if (choice < 0) {
    auto start = std::chrono::steady_clock::now();
    std::string untuned;
    Expected<CandidateTimes> times = timeCandidates(gemm, candidates, inputBytes, outputBytes, tuner, untuned);
    tuner.counts.timingMilliseconds +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!times)
      return Status::error("timing cuBLASLt's algorithms: " + times.message());
    if (!untuned.empty()) {
      ++tuner.counts.stepsUntuned;
      tuner.untunedReason = "a " + problem + " GEMM keeps the heuristic's first algorithm: " + untuned;
      gemm.tuning_ = " untuned (" + untuned + ")";
      return Status::success();
    }
    ++tuner.counts.problemsTimed;
    std::size_t finalists = CandidateTimes::ran(times->trialled);
    tuner.counts.candidatesScreened += int64_t(CandidateTimes::ran(times->screened));
    tuner.counts.finalistsTimed += int64_t(finalists);
    choice = chooseGemmCandidate(times->trialled);
    if (choice < 0)
      return Status::error("cuBLASLt refused to run each of the " + std::to_string(count) +
                           " algorithms its heuristic offered");
    char timed[112];
    std::snprintf(timed, sizeof timed, "timed: %.4f ms, the heuristic's first %.4f ms, %zu finalists",
                  times->trialled[std::size_t(choice)], times->trialled[0], finalists);
    how = timed;
    if (!entry.empty())
      writeCacheFileAtomically(entry, encodeGemmTuning(key, GemmTuningRecord{count, choice, times->best()}));
  }
  tuner.chosen[key] = choice;
  ++tuner.counts.stepsTuned;
  tuner.counts.stepsOffHeuristic += choice != 0;
  gemm.algorithm_ = candidates[std::size_t(choice)].algo;
  gemm.waves_ = candidates[std::size_t(choice)].wavesCount;
  gemm.tuning_ = " tuned=" + std::to_string(choice) + "/" + std::to_string(count) + " (" + how + ")";
  return Status::success();
}

/// makeGemmStep, or with `foldsUpdate` makeFoldedUpdateGemmStep.
Expected<std::unique_ptr<DeviceStep>> makeCublasLtStep(DeviceContext& context, const Plan& plan, const Step& step,
                                                       int smCountTarget, bool foldsUpdate,
                                                       GemmAlgorithmChoice choice) {
  if (step.kind != StepKind::Gemm)
    return Status::error("makeGemmStep: not a gemm step");
  const GemmParams& params = step.as<GemmParams>();
  const TensorType& aType = plan.buffers[step.inputs[0]].type;
  const TensorType& bType = plan.buffers[step.inputs[1]].type;
  const TensorType& cType = plan.buffers[step.outputs[0]].type;
  const Shape &aShape = aType.shape, &bShape = bType.shape, &cShape = cType.shape;
  size_t rank = cShape.size();
  int64_t m = cShape[rank - 2], n = cShape[rank - 1];
  int64_t aRows = aShape[aShape.size() - 2], aCols = aShape[aShape.size() - 1];
  int64_t bRows = bShape[bShape.size() - 2], bCols = bShape[bShape.size() - 1];
  int64_t k = params.transposeA ? aRows : aCols;

  auto gemm = std::make_unique<GemmStep>();
  gemm->handle_ = context.cublasLt;
  gemm->foldsUpdate_ = foldsUpdate;
  if (foldsUpdate && (params.epilogue != GemmEpilogue::None || rank != 2 || step.computeType != DType::F32 ||
                      cType.elementCount() == 0 || k == 0))
    return Status::error("an update folds only into a non-empty f32-accumulated product of two matrices, "
                         "without an epilogue");
  gemm->cBytesTotal_ = cType.byteSize();
  GemmEpilogue epilogue = params.epilogue;
  std::string epilogueName = "the " + std::string(gemmEpilogueName(epilogue)) + " epilogue";
  // What cuBLASLt cannot run; codegen fuses none of these.
  if (gemmEpilogueNeedsMatrices(epilogue)) {
    if (step.computeType == DType::F64)
      return Status::error(epilogueName + " runs on f16, bf16 and f32 products only, not f64");
    if (m == 0 || n == 0 || k == 0)
      return Status::error(epilogueName + " needs a non-empty product, not " + std::to_string(m) + "x" +
                           std::to_string(n) + " over K = " + std::to_string(k));
    if ((gemmEpilogueReadsGeluInput(epilogue) || gemmEpilogueWritesGeluInput(epilogue)) && n % 8 != 0)
      return Status::error(epilogueName + " needs C's row length N to be a multiple of 8 (cuBLASLt's "
                           "EPILOGUE_AUX_LD), not " + std::to_string(n));
    if (epilogue == GemmEpilogue::BiasGradA && !params.transposeA)
      return Status::error(epilogueName + " needs A transposed (dW = dY^T X): cuBLASLt's BGRADB, which sums our A, "
                           "takes its B transposed only");
  }
  gemm->extraInput_ = gemmEpilogueHasBias(epilogue)         ? EpilogueBuffer::Bias
                      : gemmEpilogueReadsGeluInput(epilogue) ? EpilogueBuffer::Aux
                                                             : EpilogueBuffer::None;
  gemm->extraOutput_ = gemmEpilogueWritesBiasGrad(epilogue)   ? EpilogueBuffer::Bias
                       : gemmEpilogueWritesGeluInput(epilogue) ? EpilogueBuffer::Aux
                                                               : EpilogueBuffer::None;
  if (cType.elementCount() == 0) {
    gemm->empty_ = true;
    return std::unique_ptr<DeviceStep>(std::move(gemm));
  }
  if (k == 0) {
    if (params.epilogue != GemmEpilogue::None)
      return Status::error("a product over K = 0 with an epilogue (codegen fuses none)");
    gemm->zeroK_ = true;
    return std::unique_ptr<DeviceStep>(std::move(gemm));
  }

  // A folded update's C and D are the f32 parameter, not the gradient.
  Expected<cudaDataType_t> aCuda = cudaTypeOf(aType.dtype), bCuda = cudaTypeOf(bType.dtype),
                           cCuda = cudaTypeOf(foldsUpdate ? DType::F32 : cType.dtype);
  if (!aCuda || !bCuda || !cCuda)
    return Status::error(!aCuda ? aCuda.message() : !bCuda ? bCuda.message() : cCuda.message());
  gemm->computeDouble_ = step.computeType == DType::F64;
  cublasComputeType_t compute = gemm->computeDouble_ ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = gemm->computeDouble_ ? CUDA_R_64F : CUDA_R_32F;

  // Batch entries: one strided-batched call when every operand's entries are
  // evenly spaced (contiguous or fully broadcast), else one call per entry.
  Shape resultBatch(cShape.begin(), cShape.end() - 2);
  std::vector<int64_t> aOffsets = broadcastOffsets(Shape(aShape.begin(), aShape.end() - 2), resultBatch);
  std::vector<int64_t> bOffsets = broadcastOffsets(Shape(bShape.begin(), bShape.end() - 2), resultBatch);
  int64_t aMatrix = aRows * aCols, bMatrix = bRows * bCols, cMatrix = m * n;
  int64_t aStride = 0, bStride = 0;
  bool strided = isStrided(aOffsets, aStride) && isStrided(bOffsets, bStride) &&
                 aOffsets.size() <= size_t(INT32_MAX);
  int64_t aSize = int64_t(dtypeSize(aType.dtype)), bSize = int64_t(dtypeSize(bType.dtype)),
          cSize = int64_t(dtypeSize(cType.dtype));
  if (strided) {
    gemm->calls_.push_back({});
  } else {
    for (size_t batch = 0; batch < aOffsets.size(); ++batch)
      gemm->calls_.push_back({aOffsets[batch] * aMatrix * aSize, bOffsets[batch] * bMatrix * bSize,
                              int64_t(batch) * cMatrix * cSize});
  }

  // Every pointer is a 64-byte aligned buffer plus these offsets: tell the
  // heuristic the alignment that really holds.
  uint64_t alignmentUnion = 64;
  auto account = [&](int64_t bytes) { alignmentUnion |= uint64_t(bytes); };
  for (const GemmStep::Call& call : gemm->calls_) {
    account(call.aByteOffset);
    account(call.bByteOffset);
    account(call.cByteOffset);
  }
  if (strided && aOffsets.size() > 1) {
    account(aStride * aMatrix * aSize);
    account(bStride * bMatrix * bSize);
    account(cMatrix * cSize);
  }
  uint32_t alignment = uint32_t(std::min<uint64_t>(64, alignmentUnion & (~alignmentUnion + 1)));

  LtDescriptors& d = gemm->descriptors_;
  AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&d.matmul, compute, scale), "creating a matmul descriptor");
  cublasOperation_t firstOp = params.transposeB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t secondOp = params.transposeA ? CUBLAS_OP_T : CUBLAS_OP_N;
  AMPJIT_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(d.matmul, CUBLASLT_MATMUL_DESC_TRANSA, &firstOp, sizeof firstOp),
      "setting transa");
  AMPJIT_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(d.matmul, CUBLASLT_MATMUL_DESC_TRANSB, &secondOp, sizeof secondOp),
      "setting transb");
  if (foldsUpdate) {
    cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
    AMPJIT_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(d.matmul, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode),
        "reading alpha and beta from the device");
  }
  if (epilogue != GemmEpilogue::None) {
    cublasLtEpilogue_t cublasEpilogue = cublasEpilogueOf(epilogue);
    AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(d.matmul, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                                 &cublasEpilogue, sizeof cublasEpilogue),
                                  "setting the epilogue");
    // The bias and the bias gradient are in C's dtype (the plan's rule, and
    // the type cuBLASLt writes a bias gradient in).
    if (gemmEpilogueHasBias(epilogue) || gemmEpilogueWritesBiasGrad(epilogue)) {
      cudaDataType_t biasType = *cCuda;
      AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(d.matmul, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                                   &biasType, sizeof biasType),
                                    "setting the bias type");
      AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(d.matmul, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                                   &kAlignmentPlaceholder,
                                                                   sizeof kAlignmentPlaceholder),
                                    "setting the bias pointer's alignment");
    }
    // The GELU input: C's dtype and layout, so its leading dimension is C's (N).
    if (gemmEpilogueReadsGeluInput(epilogue) || gemmEpilogueWritesGeluInput(epilogue)) {
      int64_t leading = n;
      cudaDataType_t auxType = *cCuda;
      AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(d.matmul, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                                   &leading, sizeof leading),
                                    "setting the epilogue aux leading dimension");
      AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(d.matmul,
                                                                   CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                                                   &auxType, sizeof auxType),
                                    "setting the epilogue aux type");
      AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(d.matmul,
                                                                   CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                                   &kAlignmentPlaceholder,
                                                                   sizeof kAlignmentPlaceholder),
                                    "setting the epilogue aux pointer's alignment");
    }
  }
  // Column-major views of the row-major bytes: B as [N, K] (or [K, N] when
  // transposed), A as [K, M] (or [M, K]), C as [N, M].
  AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&d.first, *bCuda, uint64_t(bCols), uint64_t(bRows), bCols),
                                "creating B's layout");
  AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&d.second, *aCuda, uint64_t(aCols), uint64_t(aRows), aCols),
                                "creating A's layout");
  AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&d.result, *cCuda, uint64_t(n), uint64_t(m), n),
                                "creating C's layout");
  if (strided && aOffsets.size() > 1) {
    int32_t count = int32_t(aOffsets.size());
    AMPJIT_RETURN_IF_ERROR(setBatch(d.first, count, bStride * bMatrix));
    AMPJIT_RETURN_IF_ERROR(setBatch(d.second, count, aStride * aMatrix));
    AMPJIT_RETURN_IF_ERROR(setBatch(d.result, count, cMatrix));
  }

  if (smCountTarget > 0) {
    int32_t target = smCountTarget;
    AMPJIT_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(d.matmul, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &target, sizeof target),
        "setting the SM count target");
  }
  AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&d.preference), "creating a matmul preference");
  uint64_t workspace = kGemmWorkspaceBytes;
  AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(d.preference,
                                                                     CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                     &workspace, sizeof workspace),
                                "setting the workspace limit");
  for (cublasLtMatmulPreferenceAttributes_t attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    AMPJIT_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulPreferenceSetAttribute(d.preference, attribute, &alignment, sizeof alignment),
        "setting an alignment preference");

  // A split-K reduction "in place" or "in the output type" keeps partial
  // sums in C's type: for an f16 or bf16 C that rounds each partial sum, and
  // the product no longer accumulates in fp32 with one rounding. Partial
  // sums in the compute type (fp32) keep the contract.
  if (!foldsUpdate && (cType.dtype == DType::F16 || cType.dtype == DType::BF16)) {
    uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(d.preference,
                                                                       CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                                       &reductions, sizeof reductions),
                                  "restricting split-K reductions to fp32");
  }

  // Products: the batch entries of one strided call, or the calls.
  double products = double(strided ? aOffsets.size() : gemm->calls_.size());
  GemmTuner* tuner = context.gemmTuner;
  bool wantsTuning = choice == GemmAlgorithmChoice::TimedIfLarge && tuner != nullptr &&
                     tuner->wants(2.0 * double(m) * double(n) * double(k) * products);
  std::vector<cublasLtMatmulHeuristicResult_t> results(wantsTuning ? std::size_t(tuner->candidates) : 1);
  int found = 0;
  AMPJIT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(context.cublasLt, d.matmul, d.first, d.second,
                                                               d.result, d.result, d.preference, int(results.size()),
                                                               results.data(), &found),
                                "choosing a cuBLASLt algorithm");
  if (found == 0)
    return Status::error("cuBLASLt has no algorithm for a " + typeToString(aType) + " x " + typeToString(bType) +
                         " -> " + (foldsUpdate ? "f32 product added to an f32 matrix" : typeToString(cType) +
                         " product"));
  results.resize(std::size_t(found));
  gemm->algorithm_ = results[0].algo;
  gemm->waves_ = results[0].wavesCount;
  gemm->m_ = m;
  gemm->n_ = n;
  gemm->k_ = k;
  gemm->shape_ = std::string(params.transposeA ? "At" : "A") + (params.transposeB ? "Bt" : "B") + " align=" +
                 std::to_string(alignment) + " " + std::string(gemmEpilogueName(epilogue)) +
                 (smCountTarget > 0 ? " sms=" + std::to_string(smCountTarget) : "") +
                 (foldsUpdate ? " folded-update" : "");
  if (wantsTuning && found > 1) {
    // Every slot enqueue takes, at its size: a folded update's are
    // [A, B, the f32 parameter, the two scalars] -> [its second buffer].
    std::vector<std::size_t> inputBytes, outputBytes;
    for (std::size_t i = 0; i < 2; ++i)
      inputBytes.push_back(plan.buffers[step.inputs[i]].type.byteSize());
    if (foldsUpdate) {
      std::size_t parameterBytes = std::size_t(m * n) * sizeof(float);
      inputBytes.insert(inputBytes.end(), {parameterBytes, 2 * sizeof(float)});
      outputBytes.push_back(parameterBytes);
    } else {
      for (std::size_t i = 2; i < step.inputs.size(); ++i)
        inputBytes.push_back(plan.buffers[step.inputs[i]].type.byteSize());
      for (BufferId output : step.outputs)
        outputBytes.push_back(plan.buffers[output].type.byteSize());
    }
    std::string problem = typeToString(aType) + " x " + typeToString(bType) + " -> " +
                          (foldsUpdate ? std::string("f32 added to f32") : typeToString(cType)) +
                          (gemm->computeDouble_ ? " in f64 " : " in f32 ") + gemm->shape_ + " m=" +
                          std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                          (strided ? " strided" : " calls=" + std::to_string(gemm->calls_.size())) +
                          " workspace=" + std::to_string(kGemmWorkspaceBytes);
    AMPJIT_RETURN_IF_ERROR(tuneAlgorithm(*gemm, results, problem, inputBytes, outputBytes, *tuner));
  }
  return std::unique_ptr<DeviceStep>(std::move(gemm));
}

} // namespace

Expected<std::unique_ptr<DeviceStep>> makeGemmStep(DeviceContext& context, const Plan& plan, const Step& step,
                                                   int smCountTarget, GemmAlgorithmChoice choice) {
  return makeCublasLtStep(context, plan, step, smCountTarget, false, choice);
}

Expected<std::unique_ptr<DeviceStep>> makeFoldedUpdateGemmStep(DeviceContext& context, const Plan& plan,
                                                               const Step& step, int smCountTarget) {
  return makeCublasLtStep(context, plan, step, smCountTarget, true, GemmAlgorithmChoice::TimedIfLarge);
}

} // namespace ampjit::runtime::cuda
