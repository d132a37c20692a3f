#ifndef AMPJIT_RUNTIME_BACKEND_H
#define AMPJIT_RUNTIME_BACKEND_H

// What a backend offers the layers above it (codegen's runner, `ampjit-run`,
// the eager API): memory for tensors, and plans prepared once and run many
// times with the caller's argument tensors.

#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/Status.h"
#include "ampjit/runtime/Tensor.h"

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ampjit::runtime {

Status rederiveArguments(const Plan& plan, std::span<Tensor> arguments);

/// A verified plan with everything it needs between runs (the arena, and on
/// a GPU its kernels and graph).
class Executable {
public:
  virtual ~Executable() = default;
  virtual const Plan& plan() const = 0;

  /// Runs the plan once. `arguments[i]` is function argument i, with the
  /// argument buffer's dtype and shape; state arguments that results are tied
  /// to are updated in place through these very tensors. Returns the results
  /// in order: a tied result is the argument tensor itself (same storage), an
  /// output a new tensor, an untied argument or constant a copy. One run at a
  /// time per Executable (its arena is shared between runs).
  ///
  /// A plan with deferred steps (Plan::deferredSteps) leaves each run's
  /// optimizer update pending: the next run does it first, or
  /// completeDeferred() does it alone. Until then the state it updates holds
  /// the values before the update, so a caller completes it before any host
  /// access to that state (deferredArguments()). The next run must get the
  /// same state tensors; an error says so otherwise.
  virtual Expected<std::vector<Tensor>> run(std::span<Tensor> arguments) = 0;

  /// Whether the last run left a deferred update pending.
  virtual bool deferredPending() const { return false; }
  /// Does the pending deferred update now (a no-op when none is). `arguments`
  /// are those of the run that left it; its inputs and hyper arguments may be
  /// empty tensors (the update reads its own snapshots of them).
  virtual Status completeDeferred(std::span<Tensor> /*arguments*/) { return Status::success(); }

  /// rederiveArguments for arguments in this executable's memory (a device
  /// backend rounds on the device).
  virtual Status rederive(std::span<Tensor> arguments) { return rederiveArguments(plan(), arguments); }
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  /// A zero-filled tensor in memory this backend computes on.
  virtual Expected<Tensor> allocate(const TensorType& type) = 0;
  /// Verifies the plan (verifyPlan) and prepares it for running.
  virtual Expected<std::unique_ptr<Executable>> prepare(Plan plan) = 0;
  /// The tensor in host memory (a backend's results may live on a device).
  virtual Expected<Tensor> toHost(const Tensor& tensor) = 0;

  /// prepare() and one run(), for one-off plans (eager ops).
  Expected<std::vector<Tensor>> run(Plan plan, std::span<Tensor> arguments);
};

/// The backends a user names (the C API's sessions, `ampjit-run --backend`).
inline constexpr std::string_view kBackendNames = "cpu, cuda, cuda:N";
/// The backend named "cpu", "cuda" (device 0) or "cuda:N" (device N), or an
/// error that names it: unknown, a bad device number, or why CUDA cannot run
/// (a build without it, no device).
Expected<std::unique_ptr<Backend>> createBackendByName(std::string_view name);

/// How errors name a function argument: "argument 4 'labels' (input i64[64])".
std::string describeArgument(const Plan& plan, std::size_t index);
/// The index of the one argument named `name` (a location name, or argN); an
/// error that lists the names when none has it, or asks for an index when
/// several do.
Expected<std::size_t> findArgument(const Plan& plan, std::string_view name);

/// AMPJIT_CHECK_NUMERICS checks these arguments before a run, so that an inf
/// or NaN the step was given is blamed on where it came from, not on the
/// first op that reads it: every floating-point argument but derived copies,
/// which follow their master.
std::vector<std::size_t> numericsCheckedArguments(const Plan& plan);
/// Its error for argument `index`, the same words on every backend.
Status nonFiniteArgumentError(const Plan& plan, std::size_t index);

/// Checks arguments against a plan before a run: the count, that each is
/// defined, its dtype and shape, and that no state argument updated in place
/// shares storage with another argument. The message names the argument by
/// index, name and role ("argument 4 'labels' (input i64[64]) is missing").
Status checkArguments(const Plan& plan, std::span<const Tensor> arguments);

/// A run's results, as Executable::run returns them, for a backend whose
/// buffers are host memory: a tied result is the argument tensor itself, an
/// Output buffer the run's new tensor `outputs[buffer]`, anything else (an
/// untied argument, a temporary, a constant) a copy of `bytesOf(buffer)`.
Expected<std::vector<Tensor>> hostRunResults(const Plan& plan, std::span<Tensor> arguments,
                                             std::span<const Tensor> outputs,
                                             const std::function<const std::byte*(BufferId)>& bytesOf);

/// The arguments a plan's deferred steps read or write: the state a caller
/// must not touch on the host while an update is pending.
std::vector<size_t> deferredArguments(const Plan& plan);

/// Whether `later` must run after `earlier`: it reads what `earlier` writes,
/// or writes what `earlier` reads or writes (buffer ids; absent slots aside).
bool mustFollow(const Step& earlier, const Step& later);

/// For each deferred step, the first step of the rest of the run that must
/// wait for it (mustFollow; plan.steps.size() when only the end of the run
/// must). Codegen
/// orders the update by it; a GPU backend joins a side stream there.
std::vector<size_t> deferredStepDeadlines(const Plan& plan);

/// The bookkeeping every backend shares for deferred updates: whether one is
/// pending, and the addresses of the state it was left for.
class DeferredUpdateTracker {
public:
  explicit DeferredUpdateTracker(const Plan& plan) : arguments_(deferredArguments(plan)) {}
  bool pending() const { return pending_; }
  /// The first step a run with `arguments` executes: 0 when an update is
  /// pending for exactly this state, after the deferred steps when none is;
  /// an error naming the argument when one is pending for other state.
  Expected<size_t> firstStep(const Plan& plan, std::span<const Tensor> arguments) const;
  /// checkArguments for completeDeferred(): inputs and hyper arguments may
  /// be empty, and the state must be the pending update's.
  Status checkCompletion(const Plan& plan, std::span<const Tensor> arguments) const;
  /// After a run: its update is pending on these arguments (plans that defer).
  void ran(const Plan& plan, std::span<const Tensor> arguments);
  void completed() { pending_ = false; }

private:
  std::vector<size_t> arguments_;
  std::vector<const void*> addresses_;
  bool pending_ = false;
};

/// Re-establishes derived state (`BufferDesc::derivedFrom`, O2's
/// low-precision parameter copies): every derived argument becomes its
/// source rounded to nearest even. Call it after writing a source parameter
/// between steps, and once to initialise the copies. Host tensors only
/// (Executable::rederive serves every backend).
Status rederiveArguments(const Plan& plan, std::span<Tensor> arguments);

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_BACKEND_H
