#ifndef AMPJIT_FRONTEND_DISPATCH_H
#define AMPJIT_FRONTEND_DISPATCH_H

// The frontend's internals: a tensor's representation, the op table and the
// one dispatch function every public op goes through.
//
//   jit::relu(x)  ->  apply(ops::relu, {x}, attrs)      infer result types (OpDef),
//                                                       note autograd (Node + VJP rule)
//                 ->  dispatch("jit.relu", operands,    the only place an op is executed:
//                              attrs, resultTypes)      today by the eager handler (a one-op
//                                                       plan from the runtime's StepBuilder);
//                                                       under jit::trace by a recorder.

#include "jit/Autograd.h"
#include "jit/amp.h"
#include "jit/Ops.h"
#include "jit/Tensor.h"

#include "ampjit/runtime/Shape.h"
#include "ampjit/runtime/StepBuilder.h"
#include "ampjit/runtime/Tensor.h"

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string_view>
#include <vector>

namespace ampjit::runtime {
// Held by DeviceCopy; the few sources that call it include CudaBackend.h,
// so the many that include this header do not rebuild when it changes.
class CudaBackend;
} // namespace ampjit::runtime

namespace jit::detail {

namespace rt = ampjit::runtime;
using rt::AttributeMap;
using rt::TensorType;

struct Node;
class TraceSession;

/// What a piece of captured state is, for the `jit.role` a trace gives it.
/// Owners mark their tensors (optimizers, the scaler, autograd's gradients);
/// a captured leaf that requires grad is a parameter; anything else a trace
/// captures is `hyper` (read-only or user state it carries between steps).
enum class StateRole : uint8_t { Unmarked, Param, Grad, OptState, ScalerState, Hyper };

/// The device copy of a value a CUDA-compiled step keeps on the GPU: state
/// it updates in place, and its outputs. While `hostStale`, the device holds
/// the newer value and the host `value` (if any) is older; concreteValue
/// downloads it before any host read, so steps never wait for the GPU unless
/// the program reads a value (or asks for it without waiting:
/// jit::cuda::copy_to_host_async).
struct DeviceCopy {
  rt::Tensor device;
  bool hostStale = false;
  /// The TensorImpl::version whose value `device` holds; a host write
  /// (a newer version) makes the next step upload again.
  uint64_t version = 0;
  /// The backend whose stream wrote `device`: reads are ordered there.
  std::shared_ptr<rt::CudaBackend> backend;
};

/// A traced step's optimizer update left for its next call
/// (TraceOptions::defer_updates). The state it touches points here; until it
/// is done that state holds its values from before the update, so any host
/// access completes it first (completeDeferredUpdate).
struct DeferredUpdate {
  bool pending = false;
  /// Does the update and clears `pending`; throws jit::Error when it fails.
  /// Empty once the traced function is gone.
  std::function<void()> complete;
};

struct TensorImpl;

/// Where a module sits in the tree that holds it: its name in the module that
/// registered it first, and that module's place. A module no other registered
/// is a root.
struct ModulePlace {
  std::string name{};
  bool registered = false;
  std::weak_ptr<const ModulePlace> parent{};
};

/// What a traced step calls a piece of state in its plan and in its messages:
/// a module entry's name under its module's place ("fc1" + "weight" reads
/// "fc1.weight"), a plain name ("scaler.scale"), or a part of another tensor
/// ("momentum_buffer" of that parameter reads "fc1.weight.momentum_buffer").
/// The links are weak and resolved when a trace finishes, so a name follows
/// the tree as it is then: a module registered in a parent after its
/// parameters (or the optimizer's buffers) were made, a layer appended to a
/// Sequential that is already someone's child.
struct StateName {
  // `{}` on each so designated initialisers may leave any out (-Wextra).
  std::string text{};
  bool isPart = false;
  std::weak_ptr<const TensorImpl> of{};
  std::weak_ptr<const ModulePlace> module{};
};

struct TensorImpl : std::enable_shared_from_this<TensorImpl> {
  TensorType type;
  /// The data of an eager tensor.
  rt::Tensor value;
  bool requiresGrad = false;
  /// The accumulated gradient of a leaf.
  Tensor grad;
  /// The recorded op that produced this tensor (null for leaves and for
  /// tensors computed without grad), and which of its results this is.
  std::shared_ptr<Node> gradFn;
  uint32_t outputIndex = 0;
  /// Under jit::trace, the session and the traced value this tensor stands
  /// for. Captured state is bound while the trace runs and unbound after; a
  /// tensor an op made inside a trace has no data and keeps its (finished)
  /// session, so reading it later is a clear error, not garbage.
  std::shared_ptr<TraceSession> session;
  int64_t traceValue = -1;
  StateRole stateRole = StateRole::Unmarked;
  StateName name;
  /// Bumped by every in-place write (copy_ and friends), so a compiled step
  /// knows when state it derived (O2's low-precision copies) is stale.
  uint64_t version = 0;
  /// The C++ number an operator made this 0-d tensor from, in its partner's
  /// dtype (`x * 0.3`: PyTorch's wrapped number). It never decides an op's
  /// type: autocast and a traced step's AMP pass give it the other operand's.
  std::optional<double> wrappedNumber;
  /// Set once a CUDA-compiled step has used this tensor (DeviceCopy).
  std::shared_ptr<DeviceCopy> deviceCopy;
  /// Set once a step that defers its update has touched this state.
  std::shared_ptr<DeferredUpdate> deferredUpdate;
};

/// The data of `impl` for a host read (item, to_vector, data_ptr, printing,
/// eager ops). A traced tensor has none: reading it while tracing is an error
/// naming the op that made it and `where` (DESIGN principle 4), and so is
/// reading one left over from a finished trace.
const rt::Tensor& concreteValue(const TensorImpl& impl, std::string_view what,
                                const std::source_location& where = std::source_location::current());
/// concreteValue's refusals, for a read that will not wait for the value
/// (jit::cuda::copy_to_host_async): while jit::trace records, a tensor's
/// value cannot be read.
void checkHostReadOutsideTrace(const TensorImpl& impl, std::string_view what, const std::source_location& where);
/// Whether an op of a finished trace made `impl`: it has no value, and
/// concreteValue refuses it.
bool leftOverFromATrace(const TensorImpl& impl);
/// The caller's `file:line`, for a refusal's message.
std::string callerLine(const std::source_location& where);

/// Writes `value` into `target` in place (Tensor::copy_ after its checks and
/// conversions): rebinding the data eagerly, recording a state update under
/// jit::trace.
void assignValue(TensorImpl& target, const Tensor& value);

/// Marks `tensor` as state of the given kind (optimizer buffers, scaler state).
inline void markState(const Tensor& tensor, StateRole role) {
  if (tensor.defined())
    tensor.impl().stateRole = role;
}
/// Names `tensor` for traced steps: `text` alone, or `text` as a part of `of`.
inline void nameState(const Tensor& tensor, std::string text, const Tensor& of = Tensor()) {
  if (tensor.defined())
    tensor.impl().name = StateName{.text = std::move(text), .isPart = of.defined(), .of = of.impl_ptr()};
}
/// The resolved StateName ("fc1.weight.exp_avg"), or "" where it, or what it
/// is a part of, has none.
std::string stateName(const TensorImpl& impl);
/// "'fc1.weight' f32[32x784]", or the type alone for unnamed state.
std::string describeState(const TensorImpl& impl);

Tensor makeTensor(rt::Tensor value);
/// A tensor of `shape` in `dtype` whose elements are draw()'s values in
/// order, each rounded once as jit::tensor rounds a double (random
/// initialisation). `what` names the caller in errors.
Tensor drawnTensor(Shape shape, DType dtype, const std::function<double()>& draw, const char* what);
/// A tensor whose value is on the device (a CUDA step's output on
/// `backend`), brought to the host when first read.
Tensor makeDeviceTensor(rt::Tensor device, std::shared_ptr<rt::CudaBackend> backend);
/// Whether the GPU holds `impl`'s current value: a CUDA step's output not
/// read back yet, or state or a to_device copy no host write has overtaken.
inline bool deviceValueIsCurrent(const TensorImpl& impl) {
  return impl.deviceCopy && (impl.deviceCopy->hostStale || impl.deviceCopy->version == impl.version);
}
/// Does the deferred optimizer update pending on `impl`, if any, so that its
/// value is current (before any host read or write of state).
void completeDeferredUpdate(const TensorImpl& impl);
/// Brings a stale host value up to date from its DeviceCopy (a no-op otherwise).
void syncFromDevice(const TensorImpl& impl, std::string_view what);

//===----------------------------------------------------------------------===//
// The op table
//===----------------------------------------------------------------------===//

struct OpDef;

/// What a VJP rule sees: the forward op's operands and results (detached),
/// its attributes, and the gradient of each result (a zero tensor where no
/// gradient reached that result, so rules need not test).
struct VjpContext {
  const OpDef& op;
  std::span<const Tensor> inputs;
  std::span<const Tensor> outputs;
  const AttributeMap& attributes;
  std::span<const Tensor> gradOutputs;
  /// Whether operand i needs a gradient; a rule may skip the others.
  std::vector<bool> needsGrad;
};

/// One gradient per operand; undefined where none flows.
using VjpRule = std::vector<Tensor> (*)(const VjpContext&);

/// Result types from operand types (an absent optional operand is an
/// undefined Tensor), attributes, and `requested` (the result shape of
/// broadcast_to/reshape, the dtype of convert, which no attribute carries).
/// Throws jit::Error naming the op and the offending operands.
struct RequestedResult {
  std::optional<Shape> shape{};
  std::optional<DType> dtype{};
};
using InferFunction = std::vector<TensorType> (*)(const OpDef&, std::span<const Tensor>, const AttributeMap&,
                                                  const RequestedResult&);

enum class Differentiability {
  Vjp,       ///< has a VJP rule
  None,      ///< no gradient flows (results are i1/i64, or inputs are data)
  NotTwice,  ///< a backward op: recording it for autograd is an error
};

/// Everything the frontend knows about one op: its name, its operands' ODS
/// names (for messages), its type inference and its VJP rule.
struct OpDef {
  // jit.adam_update has the most operand positions (10).
  static constexpr size_t kMaxOperands = 10;
  std::string_view name;
  /// Empty entries after the last operand. A fixed array keeps the table
  /// constant-initialised, so ops work during other objects' static init.
  std::array<std::string_view, kMaxOperands> operandNames;
  InferFunction infer;
  Differentiability differentiability;
  VjpRule vjp = nullptr;
  /// The last named operand is ODS-Variadic (amp.all_finite's grads): it
  /// takes one or more positions.
  bool variadic = false;

  size_t operandCount() const {
    size_t count = 0;
    while (count < kMaxOperands && !operandNames[count].empty())
      ++count;
    return count;
  }
};

/// The table, in JitOps.td order (tests walk it against the StepBuilder's).
std::span<const OpDef* const> allOps();

namespace ops {
extern constinit const OpDef neg, relu, tanh, sigmoid, exp, log, sqrt, rsqrt, gelu, pow;
extern constinit const OpDef add, sub, mul, div, compare, select, matmul, sum, mean, max;
extern constinit const OpDef broadcast_to, reshape, transpose, constant, convert, type_as;
extern constinit const OpDef softmax, log_softmax, layer_norm, dropout, mse_loss, cross_entropy, nll_loss;
extern constinit const OpDef relu_grad, gelu_grad, softmax_grad, log_softmax_grad, layer_norm_grad;
extern constinit const OpDef mse_loss_grad, cross_entropy_grad, nll_loss_grad;
extern constinit const OpDef embedding, embedding_grad;
extern constinit const OpDef sgd_update, adam_update;
extern constinit const OpDef conv2d, batch_norm, batch_norm_inference, max_pool2d, avg_pool2d;
extern constinit const OpDef conv2d_grad_input, conv2d_grad_weight, batch_norm_grad, max_pool2d_grad, avg_pool2d_grad;
extern constinit const OpDef scale_loss, all_finite, unscale_and_check, update_scale;
} // namespace ops

/// Inside an enabled jit::amp::autocast scope, `operands` cast as the policy
/// says for `op` (lib/amp/Autocast.cpp); otherwise `operands` unchanged.
std::vector<Tensor> autocastOperands(const OpDef& op, std::vector<Tensor> operands, const AttributeMap& attributes);

/// Whether a policy spec (`policy=`, amp::Policy::policy) names a YAML file
/// rather than a built-in: the compiler's test (loadPolicy in AmpConfig.cpp).
bool policySpecIsFile(std::string_view spec);

/// Runs `op`: applies autocast, infers result types, dispatches, records autograd.
std::vector<Tensor> apply(const OpDef& op, std::vector<Tensor> operands, AttributeMap attributes = {},
                          const RequestedResult& requested = {});
inline Tensor apply1(const OpDef& op, std::vector<Tensor> operands, AttributeMap attributes = {},
                     const RequestedResult& requested = {}) {
  return apply(op, std::move(operands), std::move(attributes), requested)[0];
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

/// One op call as the runtime's StepBuilder (and MLIR) sees it.
struct OpCall {
  std::string_view op;
  /// Every operand position in ODS order; undefined for absent optionals.
  std::span<const Tensor> operands;
  const AttributeMap& attributes;
  std::span<const TensorType> resultTypes;
};

/// Executes (or, under tracing, records) op calls.
class OpHandler {
public:
  virtual ~OpHandler() = default;
  virtual std::vector<Tensor> run(const OpCall& call) = 0;
};

/// Runs each op as a one-step plan on the CPU backend.
OpHandler& eagerHandler();

/// Installs `handler` for this thread for its scope (jit::trace will install
/// its recorder this way; tests install observers).
class ScopedOpHandler {
public:
  explicit ScopedOpHandler(OpHandler& handler);
  ~ScopedOpHandler();
  ScopedOpHandler(const ScopedOpHandler&) = delete;
  ScopedOpHandler& operator=(const ScopedOpHandler&) = delete;

private:
  OpHandler* previous_;
};

/// The one dispatch function. Adds `jit.vjp_of` while a VJP rule runs,
/// `jit.grad_of_leaf` while a leaf's gradients are summed, `amp.disabled`
/// inside a user's autocast(false), and `jit.wrapped_operands` where an
/// operand is a wrapped number.
std::vector<Tensor> dispatch(std::string_view op, std::span<const Tensor> operands, const AttributeMap& attributes,
                             std::span<const TensorType> resultTypes);

/// While alive, ops dispatched on this thread carry `jit.vjp_of = forwardOpId`.
class VjpScope {
public:
  explicit VjpScope(int64_t forwardOpId);
  ~VjpScope();

private:
  std::optional<int64_t> previous_;
};

/// `value` as a wrapped number (TensorImpl::wrappedNumber) of `dtype`: f16
/// and bf16 round it through f32, as a traced step's cast of its fp32
/// constant does, so eager and traced steps hold the same bits.
Tensor wrappedNumber(double value, DType dtype);

/// Whether the innermost jit::amp::autocast scope the user opened on this
/// thread is autocast(false). Ops then carry `amp.disabled`, which a traced
/// step's AMP pass reads as a region it leaves alone; their tape nodes keep
/// it, so their VJP ops carry it too (DESIGN: regions recorded as op attributes).
bool ampDisabledByUser();
/// jit::amp::autocast's own scopes set it (and restore it when they end).
void setAmpDisabledByUser(bool disabled);

/// Sets that flag for its scope: a trace starts outside any region, and a VJP
/// rule runs inside its forward op's.
class AmpRegionScope {
public:
  explicit AmpRegionScope(bool disabled);
  ~AmpRegionScope();
  AmpRegionScope(const AmpRegionScope&) = delete;
  AmpRegionScope& operator=(const AmpRegionScope&) = delete;

private:
  bool previous_;
};

/// While alive (a trace whose AMP options decide the precision), an op whose
/// floating-point operands mix f16, bf16 and f32, which eagerly only
/// autocast accepts, has them widened to f32 first, where eager autocast
/// would decide it: outside a user's autocast(false) region and outside an
/// autograd::function's backward (where eagerly it is an error, so it stays
/// one) and with autocast off (on, it casts them itself). A traced step then
/// takes an f16 batch as eager autocast does; the AMP pipeline reads the
/// widening as its own exact cast and folds it into the casts it makes.
class WidenMixedOperandsScope {
public:
  WidenMixedOperandsScope();
  ~WidenMixedOperandsScope();
  WidenMixedOperandsScope(const WidenMixedOperandsScope&) = delete;
  WidenMixedOperandsScope& operator=(const WidenMixedOperandsScope&) = delete;

private:
  bool previous_;
};

/// The widest floating-point type among `operands` (f16 with bf16 meets at
/// f32); a wrapped number (x * 0.3) takes the others' unless it is all there
/// is (PyTorch's type promotion). Null without floating operands.
std::optional<DType> widestFloatOperandType(const std::vector<Tensor>& operands);

/// The autocast state ops dispatched now run under (null where it is off).
std::shared_ptr<const amp::autocast::State> currentAutocastState();

/// `state` in words, its dtype and its policy's name and content hash, so
/// two states that cast alike compare equal ("" for null: autocast off).
std::string autocastGuard(const amp::autocast::State* state);

/// Eager autocast as `state` had it, for its scope: an autograd::function's
/// backward with custom_bwd semantics runs under its forward's state.
class ResumeAutocast {
public:
  explicit ResumeAutocast(std::shared_ptr<const amp::autocast::State> state);
  ~ResumeAutocast();
  ResumeAutocast(const ResumeAutocast&) = delete;
  ResumeAutocast& operator=(const ResumeAutocast&) = delete;

private:
  std::shared_ptr<const amp::autocast::State> previous_;
};

/// Eager autocast off for its scope, for the library's own needs (a trace
/// records fp32, backward runs in the forward values' types): unlike a
/// user's autocast(false), it opens no region, and leaves any it is in.
class SuspendAutocast {
private:
  ResumeAutocast autocastOff_{nullptr};
  AmpRegionScope outsideRegions_{false};
};

/// While alive, ops dispatched on this thread outside a user's region carry
/// `amp.outside_autocast`: they run where eager autocast is off without the
/// user having said so (an autograd::function's backward), and the tape
/// gives the AMP pass no forward op whose precision they could follow, so
/// under `semantics=autocast` it runs them in their operands' types.
class OutsideAutocastScope {
public:
  OutsideAutocastScope();
  ~OutsideAutocastScope();
  OutsideAutocastScope(const OutsideAutocastScope&) = delete;
  OutsideAutocastScope& operator=(const OutsideAutocastScope&) = delete;

private:
  bool previous_;
};

/// While alive, ops dispatched on this thread carry `jit.grad_of_leaf`: they
/// sum a leaf's gradients, which eager autocast does in the leaf's dtype.
class LeafGradientScope {
public:
  LeafGradientScope();
  ~LeafGradientScope();

private:
  bool previous_;
};

//===----------------------------------------------------------------------===//
// Autograd tape
//===----------------------------------------------------------------------===//

struct Node {
  /// Null for an autograd::function's node, which has `customName` and `customBackward`.
  const OpDef* op = nullptr;
  std::string customName;
  autograd::BackwardFunction customBackward;
  /// The `jit.op_id` this op was dispatched with; its VJP ops carry it as `jit.vjp_of`.
  int64_t id = 0;
  /// Recorded inside a user's autocast(false) (or with FunctionOptions::
  /// cast_inputs in effect): its VJP ops are too.
  bool ampDisabled = false;
  /// An autograd::function's backward with autocast_backward: the autocast
  /// state its forward ran under (null: off). Unset, it runs outside
  /// autocast (OutsideAutocastScope).
  std::optional<std::shared_ptr<const amp::autocast::State>> customBackwardAutocast;
  std::vector<Tensor> inputs;  ///< detached operands (undefined for absent ones)
  std::vector<Tensor> outputs; ///< detached results
  AttributeMap attributes;
  /// The original operands, which carry the history to follow backwards.
  std::vector<std::shared_ptr<TensorImpl>> edges;
};

/// What messages and grad_fn_name call a node: its op, or its function's name.
std::string nodeName(const Node& node);

/// PyTorch's padding_idx as a row of a `rows`-row table (negative counts from
/// the end); an error from `who` when it is none.
int64_t paddingRow(const std::string& who, int64_t paddingIdx, int64_t rows);

/// Backpropagates `seed` from `root` (Tensor::backward after its checks).
void runBackward(const Tensor& root, const Tensor& seed);

/// Next `jit.op_id`.
int64_t nextOpId();

/// Enum attributes travel as their ODS keywords ("mean", "tanh", "gt").
std::string keywordOf(Reduction reduction);
std::string keywordOf(GeluApproximate approximate);
Reduction reductionOf(const AttributeMap& attributes);
GeluApproximate approximateOf(const AttributeMap& attributes);

/// Formats `f32[2x3]`.
std::string describe(const TensorType& type);
std::string describe(const Tensor& tensor);

} // namespace jit::detail

#endif // AMPJIT_FRONTEND_DISPATCH_H
