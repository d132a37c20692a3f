#ifndef JIT_TRACE_H
#define JIT_TRACE_H

// jit::trace: capture a whole eager train step once and replay it compiled
// (DESIGN "Capture and the compile cache", principle 3).
//
//   auto step = jit::trace([&](const jit::Tensor& x, const jit::Tensor& y) {
//     opt.zero_grad();
//     auto loss = jit::cross_entropy(model(x), y);
//     scaler.scale(loss).backward();
//     scaler.step(opt);
//     scaler.update();
//     return loss;
//   }, {.amp = {.level = jit::amp::O1, .dtype = jit::f16}});
//   jit::Tensor loss = step(x, y);
//
// The first call runs the lambda on symbolic tensors with eager autocast off
// (an autocast the lambda opens itself is recorded as its casts; at O0 so is
// the caller's, as torch.compile follows the autocast around it, while with
// AMP options the options alone decide; and with AMP options an f16 batch
// meets fp32 weights as under eager autocast):
// every op (forward, the VJP rules of backward, the scaler, the optimizer) is
// recorded into one function whose arguments are the inputs and every tensor
// the step read (parameters, optimizer buffers, lr, scaler state: `jit.role`)
// and whose results are the returned tensors (`jit.returned`: one the trace
// recorded in f16/bf16 comes back in the type AMP computed it in, as under
// eager autocast) and each piece of state the step wrote (`jit.tied`). The
// AMP pipeline and codegen compile it; the runtime runs it, updating the
// state tensors in place. Later calls replay it.
//
// What a trace fixes, and what it does not:
//   * C++ numbers and host control flow are constants of a trace; tensors are
//     not (set_lr writes the lr tensor: no retrace). Reading a tensor's value
//     inside the step is a jit::Error naming the op and the source line.
//   * Guards, checked on every call: the inputs' shapes and dtypes, the AMP
//     options (a policy file's contents included), at O0 the caller's
//     autocast (its dtype and policy), and the gradient state
//     the step accumulates into. A miss retraces and logs which guard failed;
//     past `max_variants` variants the call runs eagerly, with a warning.
//   * The step captures state by identity: write into parameters (copy_,
//     Module::load, optimizer steps) and the trace sees it; replacing a
//     module's tensors with new ones after tracing is not seen.
//   * Gradients the step computes and consumes (the optimizer reads them) are
//     temporaries: after a call `.grad()` is undefined unless `keep_grads`.
//     A gradient the step computes without consuming it is kept as state, so
//     gradient accumulation is two traced functions sharing it (README).
//   * An in-place write into an input (x.mul_(...)) reaches the caller's
//     tensor after each call, as eagerly.
//   * Several traced functions may share state (train and eval steps,
//     gradient accumulation's two functions): each sees what the others
//     wrote, their O2 parameter copies included.
//   * Host side effects of the step (prints, counters) happen once, at trace
//     time. Tensors made inside the step that it does not return have no
//     value afterwards; reading one is a jit::Error saying so.
//
// Environment: AMPJIT_DUMP=<dir> writes every stage of every compile (the
// traced module with source locations, the IR after each pass, the AMP
// report, the plan); AMPJIT_CHECK_NUMERICS=1 compiles unfused and stops a
// step at the first op that produced an inf or NaN, naming it and its line.

#include "jit/Tensor.h"
#include "jit/amp.h"

#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace jit {

/// Where a traced step runs. `automatic`: CUDA when a device is present and
/// the build has the CUDA backend, else the CPU.
enum class Backend { cpu, cuda, automatic };

/// The backend a traced step given `backend` runs on: `cpu` or `cuda`, with
/// `automatic` resolved as above (jit::trace's own rule, for tools that set
/// up their data to match).
Backend resolve_backend(Backend backend);

namespace amp {
/// DESIGN's low-precision dtype `auto` for the backend a step given `backend`
/// runs on: bf16 where it computes bf16 (a GPU of sm_80 or later, and the
/// CPU, which emulates both exactly), else f16; the compiler's rule for
/// `dtype=auto`. Give it as the policy's dtype, so the loss scaler made from
/// the policy (scaling for f16, none for bf16) and the traced step agree:
/// `{.level = jit::amp::O1, .dtype = jit::amp::preferred_dtype()}`.
DType preferred_dtype(Backend backend = Backend::automatic);
} // namespace amp

/// Whether a traced step defers its optimizer update into the next call
/// (TraceOptions::defer_updates).
enum class DeferUpdates { automatic, on, off };

namespace amp {
/// How the AMP pass assigns precisions (DESIGN "AMP semantics"): `paint`
/// over the whole joint graph (the default), or per-op `autocast` semantics,
/// which reproduce eager jit::amp::autocast bit for bit on the CPU.
enum class Semantics { paint, autocast };
} // namespace amp

struct TraceOptions {
  /// The AMP policy (level, dtype, policy file, apex properties). O0 (fp32)
  /// unless given.
  amp::Policy amp{.level = amp::O0};
  amp::Semantics semantics = amp::Semantics::paint;
  Backend backend = Backend::automatic;
  /// Compiled variants kept per traced function before calls run eagerly.
  size_t max_variants = 8;
  /// Return consumed gradients too, so `.grad()` is set after a call as after
  /// an eager step (costs their memory and writes).
  bool keep_grads = false;
  /// Fuse elementwise runs into single kernels (off under AMPJIT_CHECK_NUMERICS).
  bool fuse_elementwise = true;
  /// Move each call's optimizer update to the start of the next call, where
  /// the CUDA backend runs it beside the forward's GEMMs (the update of the
  /// first layer first). Any host access to the state it updates (reading a
  /// parameter, saving, a copy_ into it, another traced function or eager op
  /// using it, destroying the traced function) completes it first, so a
  /// program sees the same values as without. `automatic`: on the CUDA
  /// backend, for updates of at least 16M parameter elements (smaller ones
  /// take less time than what deferring adds), unless the backend runs that
  /// plan's updates speculatively under the backward instead (by default,
  /// where the updates that qualify cover 2^24 elements: mlp9's, not
  /// ResNet-50's; faster on mlp9). `on`: always, on any backend. Off under
  /// AMPJIT_CHECK_NUMERICS.
  DeferUpdates defer_updates = DeferUpdates::automatic;
  /// Keep each parameter's low-precision cast from call to call (O1-O3): the
  /// optimizer update writes it from the new fp32 parameter, as O2's master
  /// weights do, so a call casts no parameter and every value is bit for bit
  /// the same. Unset: kept on the CUDA backend at O1 (O2 and O3 keep them as
  /// master weights already), cast per call on the CPU. true at O0 is an error.
  std::optional<bool> keep_parameter_casts{};
  /// Write each retrace's reason and the fallback warning to stderr.
  bool log_retraces = true;
  /// The traced function's name (in the module, the plan, dumps and messages).
  std::string name = "train_step";
};

/// What a traced function has done so far.
struct TraceStats {
  size_t calls = 0;
  /// Traces compiled (the first one included).
  size_t traces = 0;
  /// Calls that replayed a compiled variant without tracing.
  size_t cache_hits = 0;
  /// Calls run eagerly because the variant limit was reached.
  size_t eager_calls = 0;
  /// Why each trace after the first happened: the guard that failed.
  std::vector<std::string> retrace_reasons;
  /// Deferred updates (TraceOptions::defer_updates) that a host access or
  /// another function completed before the next call could overlap them.
  size_t early_update_completions = 0;
  // The device_ fields below describe the variant the last compiled call ran
  // (a traced function holds one per guard outcome: after a smaller last
  // batch, that variant's).
  /// On CUDA, the kernel and library launches the last compiled call's step
  /// enqueues (what its graph replays one after another); 0 on the CPU.
  size_t device_launches_per_step = 0;
  /// On CUDA, how many of those run on the side stream beside the steps
  /// after them (weight gradients, a plan's side steps); 0 on the CPU and
  /// with AMPJIT_CUDA_SIDE_STEPS_IN_LINE=1.
  size_t device_side_steps_per_step = 0;
  /// On CUDA, how many GEMMs of a step leave AMPJIT_CUDA_GEMM_SM_RESERVE SMs
  /// to the deferred optimizer update running beside them; 0 without a
  /// reserve, without deferral and on the CPU.
  size_t device_gemms_beside_update_per_step = 0;
  /// On CUDA, how many optimizer updates of a step run speculatively (under
  /// the backward pass, before the loss scaler's check; CudaBackendOptions::
  /// speculativeUpdateMinimumElements, AMPJIT_CUDA_SPECULATIVE_UPDATE), and
  /// when none does, why; 0 and empty on the CPU.
  size_t device_speculative_updates_per_step = 0;
  std::string device_speculation_declined{};
  /// On CUDA, how many of those speculative updates run in their gradient's
  /// GEMM (CudaBackendOptions::foldUpdatesIntoGemms,
  /// AMPJIT_CUDA_GEMM_FOLDED_UPDATE), and why one does not; 0 and empty on
  /// the CPU.
  size_t device_updates_folded_into_gemms = 0;
  std::string device_gemm_fold_declined{};
  /// On CUDA, how many GEMMs of that variant run the algorithm
  /// tuning chose by timing cuBLASLt's candidates (CudaBackendOptions::
  /// gemmTuningMinimumFlops, AMPJIT_CUDA_GEMM_TUNING), how many of those
  /// run another than the heuristic's first, and the milliseconds its
  /// compilation spent timing them (0 where every choice was known before);
  /// 0 on the CPU.
  size_t device_gemms_tuned = 0;
  size_t device_gemms_off_heuristic = 0;
  double device_gemm_tuning_ms = 0;
  /// The candidates that timing ran at that compilation, over every
  /// problem it timed (what cuBLASLt's heuristic offered, up to
  /// AMPJIT_CUDA_GEMM_TUNING_CANDIDATES each, less what it refused); 0
  /// where every choice was known before.
  size_t device_gemm_tuning_candidates_screened = 0;
  /// Why a GEMM that tuning wanted kept the heuristic's choice (its timing's
  /// scratch did not fit in device memory); empty otherwise.
  std::string device_gemm_tuning_declined{};
  /// On CUDA, calls of that variant that replayed its captured
  /// graph, and why it runs step by step instead when a capture or an
  /// instantiation failed (empty while graphs work); 0 and empty on the CPU.
  size_t device_graph_replays = 0;
  std::string device_graph_disabled_reason{};
  /// On CUDA, graphs that variant captured: its first, and one
  /// more each time an argument the graph reads in place moved to other
  /// device memory (a host write to the state does not move it); 0 on the
  /// CPU.
  size_t device_graph_captures = 0;
};

namespace detail {
class TracedStep;
}

/// The type-independent part of a traced function.
class TracedFunctionBase {
public:
  const TraceStats& stats() const;
  size_t variant_count() const;
  /// The AMP pipeline's JSON report of the variant the last call ran (ops per
  /// precision, casts inserted and removed); empty before a compiled call.
  const std::string& amp_report() const;
  /// The traced module (MLIR text with source locations, before AMP) of the
  /// variant the last call ran.
  const std::string& traced_module() const;
  /// The plan (runtime text form) of the variant the last call ran.
  std::string plan_text() const;
  /// New AMP options for later calls; the next call retraces (a guard).
  void set_amp(amp::Policy policy);

  using Body = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

protected:
  TracedFunctionBase(TraceOptions options, std::source_location where);
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const Body& body);

private:
  std::shared_ptr<detail::TracedStep> core_;
};

namespace detail {
template <typename R> std::vector<Tensor> flattenResult(R&& result) {
  using T = std::decay_t<R>;
  if constexpr (std::is_same_v<T, Tensor>) {
    return {result};
  } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
    return result;
  } else {
    return std::apply([](const auto&... parts) { return std::vector<Tensor>{parts...}; }, result);
  }
}
template <typename R> R unflattenResult(std::vector<Tensor>& results) {
  if constexpr (std::is_void_v<R>) {
    return;
  } else if constexpr (std::is_same_v<R, Tensor>) {
    return results.at(0);
  } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
    return results;
  } else {
    return [&]<size_t... I>(std::index_sequence<I...>) { return R{results.at(I)...}; }(
        std::make_index_sequence<std::tuple_size_v<R>>{});
  }
}
} // namespace detail

/// A traced step: call it like the function it wraps.
template <typename F> class TracedFunction : public TracedFunctionBase {
public:
  TracedFunction(F fn, TraceOptions options, std::source_location where)
      : TracedFunctionBase(std::move(options), where), fn_(std::move(fn)) {}

  /// The step returns void, a Tensor, a std::vector<Tensor>, or a
  /// std::tuple / std::pair of Tensors; every argument is a Tensor.
  template <typename... Args> auto operator()(const Args&... args) {
    static_assert((std::is_same_v<Args, Tensor> && ...), "a traced step takes jit::Tensor arguments");
    using R = std::invoke_result_t<F&, const Args&...>;
    std::vector<Tensor> results =
        call({args...}, [this](const std::vector<Tensor>& inputs) -> std::vector<Tensor> {
          return [&]<size_t... I>(std::index_sequence<I...>) -> std::vector<Tensor> {
            if constexpr (std::is_void_v<R>) {
              fn_(inputs.at(I)...);
              return {};
            } else {
              return detail::flattenResult(fn_(inputs.at(I)...));
            }
          }(std::index_sequence_for<Args...>{});
        });
    return detail::unflattenResult<R>(results);
  }

private:
  F fn_;
};

/// Traces `fn` on its first call (see the top of this file).
template <typename F>
TracedFunction<F> trace(F fn, TraceOptions options = {},
                        std::source_location where = std::source_location::current()) {
  return TracedFunction<F>(std::move(fn), std::move(options), where);
}

} // namespace jit

#endif // JIT_TRACE_H
