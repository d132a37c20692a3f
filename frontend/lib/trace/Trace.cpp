// jit::trace's compile cache: variants, guards and running a compiled step
// (jit/trace.h).

#include "CompileTrace.h"
#include "TraceSession.h"
#include "CudaDevice.h"

#include "jit/trace.h"

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/CudaBackend.h"
#include "ampjit/runtime/Environment.h"
#include "ampjit/runtime/Files.h"

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>

namespace jit {

namespace detail {

namespace {

std::string semanticsName(amp::Semantics semantics) {
  return semantics == amp::Semantics::paint ? "paint" : "autocast";
}

} // namespace

/// One compiled trace and what it needs to run.
struct Variant {
  std::vector<TensorType> inputTypes;
  std::string ampKey;
  /// At O0, the caller's autocast it was traced under (autocastGuard; empty: none).
  std::string callersAutocast;
  TraceBindings bindings;
  std::unique_ptr<rt::Executable> executable;
  CompiledTrace compiled;
  /// Plan arguments past the traced ones: state the compiler derived (O2's
  /// low-precision parameter copies), owned here.
  std::vector<rt::Tensor> derived;
  /// For each derived argument: the traced argument it is derived from, and
  /// that tensor's version when the copy was last made.
  std::vector<size_t> derivedSources;
  std::vector<uint64_t> derivedVersions;
  bool derivedValid = false;
  /// For a plan that defers its update (Plan::deferredSteps): the update the
  /// last run left, and the traced state it touches (indices into
  /// bindings.state).
  std::shared_ptr<DeferredUpdate> deferred;
  std::vector<size_t> deferredState;
  /// On CUDA, the launches a run enqueues (fixed at prepare); 0 on the CPU.
  size_t deviceLaunches = 0;
  /// On CUDA, how many of those run on the side stream (fixed at prepare).
  size_t deviceSideSteps = 0;
  size_t deviceGemmsBesideUpdate = 0;
  size_t deviceSpeculativeUpdates = 0;
  std::string deviceSpeculationDeclined;
  size_t deviceUpdatesFoldedIntoGemms = 0;
  std::string deviceGemmFoldDeclined;
  size_t deviceGemmsTuned = 0;
  size_t deviceGemmsOffHeuristic = 0;
  double deviceGemmTuningMs = 0;
  size_t deviceGemmTuningCandidatesScreened = 0;
  std::string deviceGemmTuningDeclined;
};

/// At least this many parameter elements before DeferUpdates::automatic
/// defers an update: below it the update takes about as long as the launches
/// and snapshots deferring adds (the same size at which the CUDA backend
/// moves a finiteness check to its side stream).
constexpr int64_t kDeferMinimumElements = int64_t(16) << 20;

class TracedStep {
public:
  TracedStep(TraceOptions options, std::source_location where)
      : options_(std::move(options)),
        where_{where.file_name(), unsigned(where.line()), unsigned(where.column())} {
    if (resolve_backend(options_.backend) == Backend::cuda) {
      cuda_ = sharedCudaBackend("jit::trace '" + options_.name + "' on Backend::cuda");
      backend_ = cuda_;
    } else {
      backend_ = std::shared_ptr<rt::Backend>(rt::createCpuBackend());
    }
    setAmp(options_.amp);
  }

  /// No update is lost with the function: what a call left pending is done
  /// now (a destructor cannot throw, so a failure is reported on stderr).
  ~TracedStep() {
    for (const auto& variant : variants_) {
      if (!variant->deferred)
        continue;
      try {
        completeDeferredUpdate(*variant);
      } catch (const std::exception& error) {
        std::cerr << "ampjit: error: jit::trace '" << options_.name
                  << "': completing the last call's optimizer update: " << error.what() << "\n";
      }
      variant->deferred->complete = nullptr;
      variant->deferred->pending = false;
    }
  }

  void setAmp(amp::Policy policy) {
    options_.amp = std::move(policy);
    // Resolving checks the options now (jit::Error on nonsense), not at the first call.
    pipelineOptions_ = options_.amp.pipelineOptions() + " semantics=" + semanticsName(options_.semantics) +
                       " target=" + (cuda_ ? cuda_->architecture() : std::string("cpu"));
    if (options_.keep_parameter_casts == true && options_.amp.level == amp::O0)
      throw Error("jit::trace '" + options_.name +
                  "': keep_parameter_casts needs O1-O3 or auto: at O0 no parameter is cast to keep");
    // O1 and auto cast fp32 parameters per use; on a GPU the cast is kept.
    bool castsPerUse = options_.amp.level == amp::O1 || options_.amp.level == amp::Auto;
    if (options_.keep_parameter_casts.value_or(cuda_ != nullptr && castsPerUse))
      pipelineOptions_ += " keep-parameter-casts=true";
  }

  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const TracedFunctionBase::Body& body) {
    // The inner function's compiled step would run on symbolic tensors, and
    // its state updates would bypass the outer trace.
    refuseInsideTrace("calling the traced function '" + options_.name + "'",
                      "call the function it wraps inside the step, or call the traced functions one after the "
                      "other");
    ++stats_.calls;
    std::string key = ampKey();
    std::shared_ptr<const amp::autocast::State> callers = callersAutocast();
    std::string callersGuard = autocastGuard(callers.get());
    std::vector<TensorType> types;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined())
        throw Error("jit::trace '" + options_.name + "': input #" + std::to_string(i) + " is an undefined tensor");
      types.push_back(inputs[i].impl().type);
    }

    std::string reason;
    for (const auto& variant : variants_) {
      std::string miss = guardMiss(*variant, types, key, callersGuard);
      if (miss.empty()) {
        ++stats_.cache_hits;
        last_ = variant.get();
        return run(*variant, inputs);
      }
      if (variant.get() == last_ || reason.empty())
        reason = miss;
    }

    if (variants_.size() >= options_.max_variants) {
      if (!warnedLimit_ && options_.log_retraces)
        std::cerr << "ampjit: warning: jit::trace '" << options_.name << "' has " << variants_.size()
                  << " compiled variants (max_variants); running this and further new variants eagerly ("
                  << reason << ")\n";
      warnedLimit_ = true;
      ++stats_.eager_calls;
      last_ = nullptr;
      // What a variant takes, the eager call takes too (an f16 batch).
      std::optional<WidenMixedOperandsScope> widenMixedOperands;
      if (ampDecidesPrecision())
        widenMixedOperands.emplace();
      return body(inputs);
    }
    if (!variants_.empty()) {
      stats_.retrace_reasons.push_back(reason);
      if (options_.log_retraces)
        std::cerr << "ampjit: jit::trace '" << options_.name << "' retraces (variant " << variants_.size() + 1
                  << "): " << reason << "\n";
    }
    auto variant = traceAndCompile(inputs, body, types, key, callers, std::move(callersGuard));
    ++stats_.traces;
    variants_.push_back(std::move(variant));
    last_ = variants_.back().get();
    return run(*last_, inputs);
  }

  const TraceStats& stats() const { return stats_; }
  size_t variantCount() const { return variants_.size(); }
  const std::string& ampReport() const { return last_ ? last_->compiled.ampReport : empty_; }
  const std::string& tracedModule() const { return last_ ? last_->compiled.tracedModule : empty_; }
  std::string planText() const { return last_ ? rt::printPlan(last_->executable->plan()) : std::string(); }

private:
  /// The AMP guard: the options, and a user policy file's contents (so an
  /// edited file retraces). The version prefix changes with the key's format.
  std::string ampKey() const {
    std::string key = "amp-key-v1 " + pipelineOptions_;
    const std::string& policy = options_.amp.policy;
    if (policySpecIsFile(policy)) {
      // An unreadable file keys on its error, which compiling will report.
      rt::Expected<std::string> text = rt::readWholeFile(policy);
      key += " policy-hash=" + std::to_string(std::hash<std::string>{}(text.ok() ? *text : text.message()));
    }
    return key;
  }

  std::string guardMiss(const Variant& variant, const std::vector<TensorType>& types, const std::string& key,
                        const std::string& callersGuard) const {
    if (types.size() != variant.inputTypes.size())
      return "the step was traced with " + std::to_string(variant.inputTypes.size()) + " inputs, now " +
             std::to_string(types.size());
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i] != variant.inputTypes[i])
        return "input #" + std::to_string(i) + " was " + describe(variant.inputTypes[i]) + ", now " +
               describe(types[i]);
    if (key != variant.ampKey)
      return "the AMP options changed (traced with '" + variant.ampKey + "', now '" + key + "')";
    if (callersGuard != variant.callersAutocast) {
      auto where = [](const std::string& guard) {
        return guard.empty() ? std::string("with autocast off") : "under " + guard;
      };
      return "the caller's autocast changed (traced " + where(variant.callersAutocast) + ", now called " +
             where(callersGuard) + ")";
    }
    for (const auto& state : variant.bindings.gradientState)
      if (state.leaf->grad.impl_ptr() != state.grad)
        return "the gradient of the parameter " + describeState(*state.leaf) +
               " is no longer the tensor the step accumulates into";
    for (const auto& leaf : variant.bindings.undefinedGradients)
      if (leaf->grad.defined())
        return "the parameter " + describeState(*leaf) +
               " now has a gradient to accumulate into (the step was traced without one)";
    for (size_t i = 0; i < variant.bindings.state.size(); ++i)
      if (variant.bindings.state[i]->requiresGrad != variant.bindings.stateRequiresGrad[i])
        return "the tensor " + describeState(*variant.bindings.state[i]) + " the step reads " +
               (variant.bindings.stateRequiresGrad[i] ? "required grad, now does not (frozen)"
                                                      : "did not require grad, now does");
    for (const auto& mode : variant.bindings.trainingModes)
      if (*mode.flag != mode.training)
        return "a " + mode.module + " the step reads was in " + (mode.training ? "training" : "eval") +
               " mode, now in " + (*mode.flag ? "training" : "eval") + " mode (train()/eval())";
    return {};
  }

  /// Whether the options ask for AMP: the traced step then stands for eager
  /// code under autocast (TraceSession, WidenMixedOperandsScope).
  bool ampDecidesPrecision() const { return options_.amp.level != amp::O0; }

  /// The caller's autocast a call follows: at O0 (no AMP options) the
  /// step runs as its body would where it is called, as torch.compile
  /// follows the autocast around it; with AMP options of its own the step's
  /// precision is those options' alone. Null: none to follow.
  std::shared_ptr<const amp::autocast::State> callersAutocast() const {
    return ampDecidesPrecision() ? nullptr : currentAutocastState();
  }

  std::unique_ptr<Variant> traceAndCompile(const std::vector<Tensor>& inputs, const TracedFunctionBase::Body& body,
                                           std::vector<TensorType> types, std::string key,
                                           std::shared_ptr<const amp::autocast::State> callers,
                                           std::string callersGuard) {
    auto session = std::make_shared<TraceSession>(options_.name, where_, ampDecidesPrecision());
    session->begin();
    std::vector<Tensor> symbolicInputs;
    for (const Tensor& input : inputs)
      symbolicInputs.push_back(session->input(input));
    std::pair<TraceGraph, TraceBindings> traced;
    try {
      std::vector<Tensor> outputs;
      {
        // The session records with autocast off; the caller's autocast is
        // recorded as the casts it makes, as a user's own inside the body.
        std::optional<ResumeAutocast> followCallers;
        if (callers)
          followCallers.emplace(callers);
        outputs = body(symbolicInputs);
      }
      traced = session->finish(outputs, options_.keep_grads);
    } catch (...) {
      session->abandon();
      throw;
    }

    // Whatever fails from here on, the parameters' gradients go back to
    // what they were before the step (the rest of the state was never touched).
    try {
      auto variant = compileVariant(traced.first, std::move(traced.second), std::move(types), std::move(key));
      variant->callersAutocast = std::move(callersGuard);
      return variant;
    } catch (...) {
      session->restoreGradients();
      throw;
    }
  }

  std::unique_ptr<Variant> compileVariant(const TraceGraph& graph, TraceBindings bindings,
                                          std::vector<TensorType> types, std::string key) {
    auto variant = std::make_unique<Variant>();
    variant->inputTypes = std::move(types);
    variant->ampKey = std::move(key);
    variant->bindings = std::move(bindings);
    bool checkNumerics = rt::environmentFlag("AMPJIT_CHECK_NUMERICS");
    bool automaticDeferral = !checkNumerics && options_.defer_updates == DeferUpdates::automatic && cuda_ != nullptr;
    // A backend that runs the update speculatively starts it under the
    // backward pass; deferring it would keep it out of that run.
    bool defer = !checkNumerics && (options_.defer_updates == DeferUpdates::on ||
                                    (automaticDeferral && !cuda_->speculatesOptimizerUpdates()));
    const char* dumpDirectory = std::getenv("AMPJIT_DUMP");
    int64_t sideReductionMinimum = ampjit::codegen::PlanOptions{}.sideReductionMinimumElements;
    if (cuda_) {
      std::optional<long long> minimum =
          rt::environmentInteger("AMPJIT_SIDE_REDUCTION_MIN_ELEMENTS", sideReductionMinimum);
      if (!minimum || *minimum < 0)
        throw Error("jit::trace '" + options_.name + "': AMPJIT_SIDE_REDUCTION_MIN_ELEMENTS='" +
                    std::getenv("AMPJIT_SIDE_REDUCTION_MIN_ELEMENTS") +
                    "': the elements a bias gradient's reduction reads before it goes beside the backward must be a "
                    "whole number, 0 or more");
      sideReductionMinimum = *minimum;
    }
    CompileTraceOptions compileOptions{
        .pipelineOptions = pipelineOptions_,
        .convertToNhwc = cuda_ != nullptr,
        .plan = {.fuseElementwise = options_.fuse_elementwise && !checkNumerics,
                 .fuseGemmEpilogues = cuda_ != nullptr && !checkNumerics,
                 .fuseBatchNormEpilogues = cuda_ != nullptr && !checkNumerics,
                 .fuseGradientAccumulation = cuda_ != nullptr && !checkNumerics,
                 .deferOptimizerUpdates = defer,
                 .deferMinimumElements = options_.defer_updates == DeferUpdates::on ? 0 : kDeferMinimumElements,
                 .overlapWeightGradients = cuda_ != nullptr && !checkNumerics,
                 .sideReductionMinimumElements = sideReductionMinimum},
        .dumpDirectory = dumpDirectory ? dumpDirectory : "",
        .dumpStem = options_.name + ".v" + std::to_string(variants_.size() + 1)};
    variant->compiled = compileTrace(graph, compileOptions);
    // Where the backend would not speculate this plan's large update after
    // all (too little of it qualifies: ResNet-50's), the update is deferred
    // as it would be on a backend that never speculates, not left in line.
    if (automaticDeferral && !defer && rt::optimizerUpdateElements(variant->compiled.plan) >= kDeferMinimumElements &&
        !cuda_->speculatesOptimizerUpdatesOf(variant->compiled.plan)) {
      compileOptions.plan.deferOptimizerUpdates = true;
      variant->compiled = compileTrace(graph, compileOptions);
    }

    const rt::Plan& plan = variant->compiled.plan;
    size_t traced_arguments = graph.arguments.size();
    for (size_t i = traced_arguments; i < plan.argumentCount(); ++i) {
      const rt::BufferDesc& buffer = plan.buffers[plan.argumentBuffer(i)];
      if (buffer.derivedFrom < int32_t(variant->bindings.inputCount) ||
          buffer.derivedFrom >= int32_t(traced_arguments))
        throw Error("jit::trace '" + options_.name + "': internal: plan argument " + std::to_string(i) +
                    " is neither traced nor derived from traced state");
      rt::Expected<rt::Tensor> storage = backend_->allocate(buffer.type);
      if (!storage)
        throw Error("jit::trace '" + options_.name + "': " + storage.message());
      variant->derived.push_back(std::move(*storage));
      variant->derivedSources.push_back(size_t(buffer.derivedFrom) - variant->bindings.inputCount);
      variant->derivedVersions.push_back(0);
    }
    rt::Expected<std::unique_ptr<rt::Executable>> executable = backend_->prepare(variant->compiled.plan);
    if (!executable)
      throw Error("jit::trace '" + options_.name + "': " + executable.message());
    variant->executable = std::move(*executable);
    if (cuda_) {
      rt::CudaRunStats stats = cuda_->stats(*variant->executable);
      variant->deviceLaunches = size_t(stats.launchesPerRun);
      variant->deviceSideSteps = size_t(stats.sideSteps);
      variant->deviceGemmsBesideUpdate = size_t(stats.gemmsBesideDeferredUpdate);
      variant->deviceSpeculativeUpdates = size_t(stats.speculativeUpdates);
      variant->deviceSpeculationDeclined = stats.speculationDeclined;
      variant->deviceUpdatesFoldedIntoGemms = size_t(stats.updatesFoldedIntoGemms);
      variant->deviceGemmFoldDeclined = stats.gemmFoldDeclined;
      variant->deviceGemmsTuned = size_t(stats.gemmsTuned);
      variant->deviceGemmsOffHeuristic = size_t(stats.gemmsOffHeuristic);
      variant->deviceGemmTuningMs = stats.gemmTuningMilliseconds;
      variant->deviceGemmTuningCandidatesScreened = size_t(stats.gemmTuningCandidatesScreened);
      variant->deviceGemmTuningDeclined = stats.gemmTuningDeclined;
    }
    if (plan.deferredSteps > 0) {
      variant->deferred = std::make_shared<DeferredUpdate>();
      Variant* owner = variant.get();
      variant->deferred->complete = [this, owner] { completeDeferredUpdate(*owner); };
      for (size_t argument : rt::deferredArguments(plan))
        if (argument >= variant->bindings.inputCount && argument < traced_arguments)
          variant->deferredState.push_back(argument - variant->bindings.inputCount);
    }
    return variant;
  }

  /// Does the update `variant`'s last run left pending, on the state of that run.
  void completeDeferredUpdate(Variant& variant) {
    if (!variant.deferred || !variant.deferred->pending)
      return;
    // The update reads its own snapshots of the inputs: those may be empty.
    std::vector<rt::Tensor> arguments(variant.bindings.inputCount);
    for (const auto& state : variant.bindings.state)
      arguments.push_back(cuda_ ? state->deviceCopy->device : state->value);
    for (rt::Tensor& derived : variant.derived)
      arguments.push_back(derived);
    if (rt::Status status = variant.executable->completeDeferred(arguments); !status.ok())
      throw Error("jit::trace '" + options_.name + "': completing the last call's optimizer update: " +
                  status.message());
    variant.deferred->pending = false;
    ++stats_.early_update_completions;
  }

  std::vector<Tensor> run(Variant& variant, const std::vector<Tensor>& inputs) {
    const TraceBindings& bindings = variant.bindings;
    // Another step's pending update of this state goes first; this variant's
    // own is part of this run.
    for (const auto& state : bindings.state)
      if (state->deferredUpdate != variant.deferred)
        detail::completeDeferredUpdate(*state);
    std::vector<rt::Tensor> arguments;
    for (const Tensor& input : inputs) {
      // A batch already on the GPU (jit::cuda::to_device, or another step's
      // output) is read there: no round trip through the host.
      if (cuda_) {
        detail::completeDeferredUpdate(input.impl());
        if (detail::deviceValueIsCurrent(input.impl())) {
          arguments.push_back(input.impl().deviceCopy->device);
          continue;
        }
      }
      arguments.push_back(concreteValue(input.impl(), "a traced step's input"));
    }
    for (const auto& state : bindings.state) {
      if (cuda_) {
        arguments.push_back(deviceArgument(*state));
        continue;
      }
      syncFromDevice(*state, "a traced step's state");
      // The step writes state in place; another handle sharing the data
      // (a detach() taken earlier) keeps its old value, as eagerly.
      if (state->value.sharesStorage()) {
        // The copy becomes the state: this variant's pending update must
        // land in it, so it is done before copying.
        completeDeferredUpdate(variant);
        rt::Expected<rt::Tensor> copy = state->value.clone();
        if (!copy)
          throw Error("jit::trace '" + options_.name + "': " + copy.message());
        state->value = std::move(*copy);
      }
      arguments.push_back(state->value);
    }
    bool stale = !variant.derivedValid;
    for (size_t i = 0; i < variant.derived.size(); ++i)
      stale |= bindings.state[variant.derivedSources[i]]->version != variant.derivedVersions[i];
    for (rt::Tensor& derived : variant.derived)
      arguments.push_back(derived);
    if (stale) {
      if (rt::Status status = variant.executable->rederive(arguments); !status.ok())
        throw Error("jit::trace '" + options_.name + "': " + status.message());
      for (size_t i = 0; i < variant.derived.size(); ++i)
        variant.derivedVersions[i] = bindings.state[variant.derivedSources[i]]->version;
      variant.derivedValid = true;
    }

    rt::Expected<std::vector<rt::Tensor>> results = variant.executable->run(arguments);
    if (!results)
      throw Error("jit::trace '" + options_.name + "': " + results.message());
    stats_.device_launches_per_step = variant.deviceLaunches;
    stats_.device_side_steps_per_step = variant.deviceSideSteps;
    stats_.device_gemms_beside_update_per_step = variant.deviceGemmsBesideUpdate;
    stats_.device_speculative_updates_per_step = variant.deviceSpeculativeUpdates;
    stats_.device_speculation_declined = variant.deviceSpeculationDeclined;
    stats_.device_updates_folded_into_gemms = variant.deviceUpdatesFoldedIntoGemms;
    stats_.device_gemm_fold_declined = variant.deviceGemmFoldDeclined;
    stats_.device_gemms_tuned = variant.deviceGemmsTuned;
    stats_.device_gemms_off_heuristic = variant.deviceGemmsOffHeuristic;
    stats_.device_gemm_tuning_ms = variant.deviceGemmTuningMs;
    stats_.device_gemm_tuning_candidates_screened = variant.deviceGemmTuningCandidatesScreened;
    stats_.device_gemm_tuning_declined = variant.deviceGemmTuningDeclined;
    if (cuda_) {
      rt::CudaRunStats run = cuda_->stats(*variant.executable);
      stats_.device_graph_replays = size_t(run.graphReplays);
      stats_.device_graph_captures = size_t(run.captures);
      stats_.device_graph_disabled_reason = run.graphDisabledReason;
    }
    if (variant.deferred) {
      variant.deferred->pending = variant.executable->deferredPending();
      for (size_t index : variant.deferredState)
        bindings.state[index]->deferredUpdate = variant.deferred;
    }
    std::vector<Tensor> outputs;
    for (size_t i = 0; i < bindings.outputCount; ++i)
      outputs.push_back(wrapResult(std::move((*results)[i])));
    noteStateWrites(variant);
    for (const auto& state : bindings.gradientState)
      state.leaf->grad = Tensor(state.grad);
    for (const auto& leaf : bindings.droppedGradients)
      leaf->grad = Tensor();
    for (const auto& gradient : bindings.newGradients) {
      gradient.leaf->grad = wrapResult(std::move((*results)[gradient.result]));
      markState(gradient.leaf->grad, StateRole::Grad);
      nameState(gradient.leaf->grad, "grad", Tensor(gradient.leaf));
    }
    for (const auto& write : bindings.inputWrites)
      assignValue(inputs[write.input].impl(), wrapResult(std::move((*results)[write.result])));
    return outputs;
  }

  /// After a run: the state it wrote in place has a new version, so every
  /// other variant, of this function or another, that derived copies from it
  /// (O2's and kept-cast low-precision parameters) re-derives them before its
  /// next run; without this an eval step or gradient accumulation's other
  /// function kept computing with the weights it first copied. This
  /// variant's own copies stay valid where the run wrote them beside their
  /// source (the optimizer update writes both). On CUDA the device holds the
  /// new value and the host copy is stale until read.
  void noteStateWrites(Variant& variant) {
    const TraceBindings& bindings = variant.bindings;
    size_t stateBegin = bindings.inputCount, derivedBegin = stateBegin + bindings.state.size();
    std::vector<bool> stateWritten(bindings.state.size(), false), derivedWritten(variant.derived.size(), false);
    for (const rt::PlanResult& result : variant.executable->plan().results) {
      if (result.tiedArgument < 0)
        continue;
      size_t argument = size_t(result.tiedArgument);
      if (argument >= stateBegin && argument < derivedBegin)
        stateWritten[argument - stateBegin] = true;
      else if (argument >= derivedBegin && argument - derivedBegin < variant.derived.size())
        derivedWritten[argument - derivedBegin] = true;
    }
    for (size_t i = 0; i < bindings.state.size(); ++i) {
      if (!stateWritten[i])
        continue;
      TensorImpl& state = *bindings.state[i];
      ++state.version;
      if (cuda_) {
        state.deviceCopy->hostStale = true;
        state.deviceCopy->version = state.version;
      }
    }
    for (size_t i = 0; i < variant.derived.size(); ++i)
      if (stateWritten[variant.derivedSources[i]] && derivedWritten[i])
        variant.derivedVersions[i] = bindings.state[variant.derivedSources[i]]->version;
  }

  /// A run's result as a frontend tensor: as is from the CPU, read back
  /// lazily from the GPU.
  Tensor wrapResult(rt::Tensor result) {
    if (result.device() != rt::Device::Cuda)
      return makeTensor(std::move(result));
    return makeDeviceTensor(std::move(result), cuda_);
  }

  /// The device copy of a state tensor, uploaded when the host holds a newer
  /// value (first use, or a host write since). A host write lands in the
  /// device tensor the state already has: at the same address the captured
  /// graph stays valid, where a new tensor would cost a recapture per write
  /// (a learning rate or a weight set from the host every few steps).
  rt::Tensor deviceArgument(TensorImpl& state) {
    std::shared_ptr<DeviceCopy>& copy = state.deviceCopy;
    if (deviceValueIsCurrent(state))
      return copy->device;
    const rt::Tensor& host = concreteValue(state, "a traced step's state");
    if (copy && copy->device.defined() && copy->device.device() == rt::Device::Cuda &&
        copy->device.type() == host.type()) {
      if (rt::Status status = cuda_->copyIntoTensor(copy->device, host.bytes(), false, nullptr); !status.ok())
        throw Error("jit::trace '" + options_.name + "': uploading a state tensor written on the host: " +
                    status.message());
      copy->version = state.version;
      copy->hostStale = false;
      return copy->device;
    }
    rt::Expected<rt::Tensor> uploaded = cuda_->toDevice(host);
    if (!uploaded)
      throw Error("jit::trace '" + options_.name + "': " + uploaded.message());
    if (!copy) {
      copy = std::make_shared<DeviceCopy>();
      copy->backend = cuda_;
    }
    copy->device = std::move(*uploaded);
    copy->version = state.version;
    copy->hostStale = false;
    return copy->device;
  }


  TraceOptions options_;
  UserLocation where_;
  std::string pipelineOptions_;
  std::shared_ptr<rt::Backend> backend_;
  std::shared_ptr<rt::CudaBackend> cuda_;
  std::vector<std::unique_ptr<Variant>> variants_;
  Variant* last_ = nullptr;
  TraceStats stats_;
  bool warnedLimit_ = false;
  std::string empty_;
};

} // namespace detail

Backend resolve_backend(Backend backend) {
  if (backend != Backend::automatic)
    return backend;
  return ampjit::runtime::cudaDeviceCount() > 0 ? Backend::cuda : Backend::cpu;
}

TracedFunctionBase::TracedFunctionBase(TraceOptions options, std::source_location where)
    : core_(std::make_shared<detail::TracedStep>(std::move(options), where)) {}

std::vector<Tensor> TracedFunctionBase::call(const std::vector<Tensor>& inputs, const Body& body) {
  return core_->call(inputs, body);
}

const TraceStats& TracedFunctionBase::stats() const { return core_->stats(); }
size_t TracedFunctionBase::variant_count() const { return core_->variantCount(); }
const std::string& TracedFunctionBase::amp_report() const { return core_->ampReport(); }
const std::string& TracedFunctionBase::traced_module() const { return core_->tracedModule(); }
std::string TracedFunctionBase::plan_text() const { return core_->planText(); }
void TracedFunctionBase::set_amp(amp::Policy policy) { core_->setAmp(std::move(policy)); }

} // namespace jit
