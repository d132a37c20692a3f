#ifndef AMPJIT_FRONTEND_TRACE_TRACESESSION_H
#define AMPJIT_FRONTEND_TRACE_TRACESESSION_H

// One run of a user's step on symbolic tensors (DESIGN "Capture and the
// compile cache", principle 3). The session is the op handler while the step
// runs: every dispatched op becomes a TracedOp over value numbers instead of
// running. A concrete tensor an op reads (a parameter, an optimizer buffer,
// the loss scale, the learning rate) is captured as state: an argument with
// a role. An in-place write (copy_, a gradient accumulated into a leaf)
// rebinds the tensor to a new value; at the end every rebound piece of state
// becomes a result tied to its argument. finish() turns all of it into a
// TraceGraph, the plain-C++ description EmitModule turns into MLIR.

#include "../Dispatch.h"

#include "jit/amp.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace jit::detail {

/// A place in the user's source (from std::source_location).
struct UserLocation {
  std::string file;
  unsigned line = 0;
  unsigned column = 0;
  std::string str() const { return file + ":" + std::to_string(line); }
};

/// The innermost open UserFrame's location (jit/Tensor.h), if any.
const std::optional<UserLocation>& currentUserFrame();

enum class ArgumentRole { Input, Param, Grad, OptState, ScalerState, Hyper };
std::string_view roleName(ArgumentRole role);

struct TracedOp {
  std::string name;
  /// Value numbers in ODS operand order; -1 for an absent optional operand.
  std::vector<int64_t> operands;
  AttributeMap attributes;
  std::vector<int64_t> results;
  UserLocation location;
};

/// What a trace captured, ready to become a function.
struct TraceGraph {
  std::string name;
  UserLocation location;
  std::vector<TensorType> valueTypes;
  std::vector<TracedOp> ops;
  struct Argument {
    int64_t value;
    ArgumentRole role;
    /// What the plan and its messages call it: "input0", the state's name
    /// ("fc1.weight", "fc1.weight.momentum_buffer", "scaler.scale"; a repeat
    /// gets "#2"), or "" for state nothing named.
    std::string name;
  };
  /// Explicit inputs first, then captured state grouped by role (param,
  /// grad, opt_state, hyper, scaler_state), each group in capture order.
  std::vector<Argument> arguments;
  struct Result {
    int64_t value;
    std::optional<size_t> tiedArgument;
    /// One of the step's outputs (`jit.returned`): AMP may give it the type
    /// it computed it in.
    bool returnedToCaller = false;
  };
  /// The step's outputs, then the state updates in argument order, then new
  /// gradients kept as outputs.
  std::vector<Result> results;
};

/// Where the tensors of a graph's arguments come from and where its results
/// go after a run: what TracedFunction needs to call the compiled step.
struct TraceBindings {
  /// For argument i >= inputCount: the captured tensor.
  size_t inputCount = 0;
  std::vector<std::shared_ptr<TensorImpl>> state;
  /// Whether each captured tensor required grad: a guard, since it decides
  /// which gradients the step computes and which parameters it updates
  /// (freezing a layer between calls must retrace).
  std::vector<bool> stateRequiresGrad;
  size_t outputCount = 0;
  /// Results after the outputs and the tied updates: gradients the step
  /// leaves for later (accumulation), set as the leaf's .grad after a run.
  struct NewGradient {
    std::shared_ptr<TensorImpl> leaf;
    size_t result;
  };
  std::vector<NewGradient> newGradients;
  /// Leaves whose .grad the step reads as state: a guard (the same tensor
  /// must be there on the next call), and restored after the run.
  struct GradientState {
    std::shared_ptr<TensorImpl> leaf;
    std::shared_ptr<TensorImpl> grad;
  };
  std::vector<GradientState> gradientState;
  /// Inputs the step wrote in place (x.mul_(...)): the result holding the
  /// final value, written into the caller's tensor after a run, as eagerly.
  struct InputWrite {
    size_t input;
    size_t result;
  };
  std::vector<InputWrite> inputWrites;
  /// Leaves whose gradient the step consumed (not kept): .grad is unset after a run.
  std::vector<std::shared_ptr<TensorImpl>> droppedGradients;
  /// Leaves whose .grad must still be undefined on the next call (the step
  /// would accumulate into it otherwise).
  std::vector<std::shared_ptr<TensorImpl>> undefinedGradients;
  /// Training flags of the modules whose forward read it (Dropout,
  /// BatchNorm2d): a guard, each must have the value it had in the trace.
  struct TrainingMode {
    std::shared_ptr<const bool> flag;
    bool training;
    std::string module; ///< its class, for the retrace reason
  };
  std::vector<TrainingMode> trainingModes;
};

class TraceSession final : public OpHandler, public std::enable_shared_from_this<TraceSession> {
public:
  /// `ampDecidesPrecision`: the trace's AMP options are not O0, so what eager
  /// autocast would decide the AMP pass decides (WidenMixedOperandsScope).
  TraceSession(std::string name, UserLocation location, bool ampDecidesPrecision);
  ~TraceSession() override;

  /// Starts recording on this thread: installs the session as the op handler.
  void begin();
  /// A symbolic stand-in for explicit input `example`.
  Tensor input(const Tensor& example);
  std::vector<Tensor> run(const OpCall& call) override;
  /// Records `target = value` (an in-place update of state).
  void write(TensorImpl& target, const Tensor& value);
  /// Stops recording, unbinds captured state, and describes the step whose
  /// outputs are `outputs`. `keepGradients`: gradients the step consumes are
  /// still returned (as PyTorch leaves .grad set after a step).
  std::pair<TraceGraph, TraceBindings> finish(std::span<const Tensor> outputs, bool keepGradients);
  /// Stops recording after an error in the user's step; restores what it bound.
  void abandon();
  /// Puts back every leaf's .grad as it was before the step ran (after a
  /// finished trace that could not be compiled: no state is lost).
  void restoreGradients();
  /// Tensor::zero_grad on `leaf` while recording: its gradient so far does
  /// not flow into the step.
  void noteGradientReset(const std::shared_ptr<TensorImpl>& leaf);
  void noteTrainingMode(const std::shared_ptr<const bool>& flag, std::string module);

  bool active() const { return active_; }
  bool ampDecidesPrecision() const { return ampDecidesPrecision_; }
  /// Tensor::detach while recording: a concrete tensor (a parameter) is
  /// captured first, so the detached handle is the same traced value and
  /// reads the state live on every call. A handle of its own would be
  /// captured apart, and keep the first call's value once the step
  /// updates the state.
  void captureBeforeDetach(const Tensor& tensor) { valueOf(tensor); }
  /// "jit.add at train.cpp:42" for the op that produced value `value`.
  std::string describeProducer(int64_t value) const;
  const std::string& name() const { return name_; }

  /// The session recording on this thread, or null.
  static TraceSession* current();

private:
  struct Capture {
    std::shared_ptr<TensorImpl> impl;
    ArgumentRole role;
    int64_t argumentValue;
    /// The leaf's .grad when the leaf was captured (parameters only).
    std::shared_ptr<TensorImpl> gradAtCapture;
  };

  int64_t newValue(const TensorType& type, int64_t producer);
  Tensor symbolic(const TensorType& type, int64_t producer);
  /// The value `tensor` stands for in this trace, capturing it if concrete.
  int64_t valueOf(const Tensor& tensor);
  int64_t capture(const std::shared_ptr<TensorImpl>& impl);
  /// Uninstalls the session and unbinds captured state (finish and abandon).
  void stopRecording();
  void snapshotGradient(const std::shared_ptr<TensorImpl>& leaf);

  std::string name_;
  UserLocation location_;
  bool active_ = false;
  std::optional<ScopedOpHandler> handler_;
  TraceSession* previous_ = nullptr;
  std::vector<TensorType> valueTypes_;
  std::vector<int64_t> producers_;
  std::vector<int> uses_;
  std::vector<TracedOp> ops_;
  std::vector<int64_t> inputValues_;
  /// The symbolic inputs, to recognise in-place writes into them.
  std::vector<const TensorImpl*> inputImpls_;
  /// Per input, the value of its last in-place write (-1: never written).
  std::vector<int64_t> inputWrites_;
  std::vector<Capture> captures_;
  std::vector<std::shared_ptr<TensorImpl>> bound_;
  /// Each touched leaf's .grad before the step, for restoreGradients().
  std::vector<std::pair<std::shared_ptr<TensorImpl>, Tensor>> gradientSnapshots_;
  /// Leaves zero_grad reset before the step read their gradient.
  std::vector<std::shared_ptr<TensorImpl>> resetBeforeCapture_;
  std::vector<TraceBindings::TrainingMode> trainingModes_;
  /// The trace records fp32 (AMP is the compiler's pass), from outside any
  /// AMP region of the caller's: a traced step's precision is its options'.
  std::optional<SuspendAutocast> autocastOff_;
  bool ampDecidesPrecision_;
  std::optional<WidenMixedOperandsScope> widenMixedOperands_;
};

/// For host-side work a trace would run once and bake in (drawing random
/// numbers on the host, a schedule's epoch counter, reading or writing a
/// state file): inside an active trace, a jit::Error "<what> inside the
/// traced step '<name>': <advice>".
void refuseInsideTrace(const std::string& what, const std::string& advice);

} // namespace jit::detail

#endif // AMPJIT_FRONTEND_TRACE_TRACESESSION_H
