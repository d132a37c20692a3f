// apply() and dispatch(): the path every public op takes (see Dispatch.h),
// the eager handler, grad mode and the autograd tape's backward pass.

#include "Dispatch.h"
#include "trace/TraceSession.h"

#include "jit/Autograd.h"
#include "jit/amp.h"
#include "jit/Ops.h"

#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/CudaBackend.h"

#include <algorithm>
#include <deque>
#include <unordered_map>

namespace jit {

namespace {
thread_local bool gGradEnabled = true;
} // namespace

bool is_grad_enabled() { return gGradEnabled; }
void set_grad_enabled(bool enabled) { gGradEnabled = enabled; }
NoGradGuard::NoGradGuard() : previous_(gGradEnabled) { gGradEnabled = false; }
NoGradGuard::~NoGradGuard() { gGradEnabled = previous_; }

namespace detail {

std::string describe(const TensorType& type) { return rt::typeToString(type); }
std::string describe(const Tensor& tensor) {
  return tensor.defined() ? describe(tensor.impl().type) : std::string("<undefined>");
}

namespace {
/// "layer1.0." for a module registered as "0" in one registered as "layer1".
std::string modulePrefix(const std::weak_ptr<const ModulePlace>& module) {
  std::string prefix;
  std::shared_ptr<const ModulePlace> place = module.lock();
  // A module registered inside its own descendant would loop: stop.
  for (int depth = 0; place && place->registered && depth < 256; ++depth) {
    prefix = place->name + "." + prefix;
    place = place->parent.lock();
  }
  return prefix;
}
} // namespace

std::string stateName(const TensorImpl& impl) {
  std::string name = impl.name.text;
  const TensorImpl* part = &impl;
  // A chain longer than a few links is a cycle built by hand: no name.
  for (int depth = 0; depth < 8 && !name.empty(); ++depth) {
    if (!part->name.isPart)
      return modulePrefix(part->name.module) + name;
    std::shared_ptr<const TensorImpl> whole = part->name.of.lock();
    if (!whole || whole->name.text.empty())
      return "";
    name = whole->name.text + "." + name;
    part = whole.get();
  }
  return "";
}

std::string describeState(const TensorImpl& impl) {
  std::string name = stateName(impl);
  return name.empty() ? describe(impl.type) : "'" + name + "' " + describe(impl.type);
}

Tensor makeTensor(rt::Tensor value) {
  auto impl = std::make_shared<TensorImpl>();
  impl->type = value.type();
  impl->value = std::move(value);
  return Tensor(std::move(impl));
}

Tensor makeDeviceTensor(rt::Tensor device, std::shared_ptr<rt::CudaBackend> backend) {
  auto impl = std::make_shared<TensorImpl>();
  impl->type = device.type();
  impl->deviceCopy = std::make_shared<DeviceCopy>();
  impl->deviceCopy->device = std::move(device);
  impl->deviceCopy->hostStale = true;
  impl->deviceCopy->backend = std::move(backend);
  return Tensor(std::move(impl));
}

void completeDeferredUpdate(const TensorImpl& impl) {
  if (impl.deferredUpdate && impl.deferredUpdate->pending && impl.deferredUpdate->complete)
    impl.deferredUpdate->complete();
}

void syncFromDevice(const TensorImpl& impl, std::string_view what) {
  if (!impl.deviceCopy || !impl.deviceCopy->hostStale)
    return;
  rt::Expected<rt::Tensor> host = impl.deviceCopy->backend->toHost(impl.deviceCopy->device);
  if (!host)
    throw Error(std::string(what) + ": reading a " + describe(impl.type) + " back from the GPU: " + host.message());
  // Refreshing the cache of a value is not a write: the version stays.
  const_cast<TensorImpl&>(impl).value = std::move(*host);
  impl.deviceCopy->hostStale = false;
}

int64_t nextOpId() {
  // Ids only need to be unique among the ops a backward pass links; a
  // per-thread counter keeps concurrent threads from contending.
  thread_local int64_t counter = 0;
  return counter++;
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

namespace {

class EagerHandler final : public OpHandler {
public:
  std::vector<Tensor> run(const OpCall& call) override {
    std::vector<std::optional<TensorType>> operandTypes;
    std::vector<rt::Tensor> arguments;
    for (const Tensor& operand : call.operands) {
      if (!operand.defined()) {
        operandTypes.emplace_back();
        continue;
      }
      operandTypes.push_back(operand.impl().type);
      arguments.push_back(concreteValue(operand.impl(), call.op));
    }
    rt::Expected<rt::Plan> plan =
        rt::buildSingleOpPlan(call.op, operandTypes, call.resultTypes, call.attributes);
    if (!plan)
      throw Error(plan.message());
    rt::Expected<std::vector<rt::Tensor>> results = backend().run(std::move(*plan), arguments);
    if (!results)
      throw Error(std::string(call.op) + ": " + results.message());
    std::vector<Tensor> wrapped;
    for (rt::Tensor& result : *results)
      wrapped.push_back(makeTensor(std::move(result)));
    return wrapped;
  }

private:
  static rt::Backend& backend() {
    static std::unique_ptr<rt::Backend> cpu = rt::createCpuBackend();
    return *cpu;
  }
};

thread_local OpHandler* gHandler = nullptr;
thread_local std::optional<int64_t> gVjpOf;

} // namespace

OpHandler& eagerHandler() {
  static EagerHandler handler;
  return handler;
}

ScopedOpHandler::ScopedOpHandler(OpHandler& handler) : previous_(gHandler) { gHandler = &handler; }
ScopedOpHandler::~ScopedOpHandler() { gHandler = previous_; }

VjpScope::VjpScope(int64_t forwardOpId) : previous_(gVjpOf) { gVjpOf = forwardOpId; }
VjpScope::~VjpScope() { gVjpOf = previous_; }

thread_local bool gLeafGradient = false;
LeafGradientScope::LeafGradientScope() : previous_(gLeafGradient) { gLeafGradient = true; }
LeafGradientScope::~LeafGradientScope() { gLeafGradient = previous_; }

namespace {
thread_local bool gAmpDisabledByUser = false;
thread_local bool gOutsideAutocast = false;
thread_local bool gWidenMixedOperands = false;
} // namespace

WidenMixedOperandsScope::WidenMixedOperandsScope() : previous_(gWidenMixedOperands) { gWidenMixedOperands = true; }
WidenMixedOperandsScope::~WidenMixedOperandsScope() { gWidenMixedOperands = previous_; }

OutsideAutocastScope::OutsideAutocastScope() : previous_(gOutsideAutocast) { gOutsideAutocast = true; }
OutsideAutocastScope::~OutsideAutocastScope() { gOutsideAutocast = previous_; }

bool ampDisabledByUser() { return gAmpDisabledByUser; }
void setAmpDisabledByUser(bool disabled) { gAmpDisabledByUser = disabled; }
AmpRegionScope::AmpRegionScope(bool disabled) : previous_(gAmpDisabledByUser) { gAmpDisabledByUser = disabled; }
AmpRegionScope::~AmpRegionScope() { gAmpDisabledByUser = previous_; }

std::vector<Tensor> dispatch(std::string_view op, std::span<const Tensor> operands, const AttributeMap& attributes,
                             std::span<const TensorType> resultTypes) {
  OpHandler& handler = gHandler ? *gHandler : eagerHandler();
  std::vector<int64_t> wrapped;
  for (size_t i = 0; i < operands.size(); ++i)
    if (operands[i].defined() && operands[i].impl().wrappedNumber)
      wrapped.push_back(int64_t(i));
  if (!gVjpOf && !gLeafGradient && !gAmpDisabledByUser && !gOutsideAutocast && wrapped.empty())
    return handler.run(OpCall{op, operands, attributes, resultTypes});
  // The marks go on the call only: the tape node keeps the op's own
  // attributes, which VJP rules read.
  AttributeMap marked = attributes;
  if (!wrapped.empty())
    marked["jit.wrapped_operands"] = std::move(wrapped);
  if (gVjpOf)
    marked["jit.vjp_of"] = *gVjpOf;
  if (gLeafGradient)
    marked["jit.grad_of_leaf"] = true;
  if (gAmpDisabledByUser)
    marked["amp.disabled"] = true;
  else if (gOutsideAutocast)
    marked["amp.outside_autocast"] = true;
  return handler.run(OpCall{op, operands, marked, resultTypes});
}

//===----------------------------------------------------------------------===//
// apply
//===----------------------------------------------------------------------===//

namespace {

/// Whether `operands` hold floating-point tensors of more than one of f16,
/// bf16 and f32 (and no f64, the user's explicit choice), wrapped numbers
/// aside: then f32 holds them all.
bool mixesCastableFloatTypes(const std::vector<Tensor>& operands) {
  std::optional<DType> seen;
  bool mixed = false;
  for (const Tensor& operand : operands) {
    if (!operand.defined() || !is_floating_point(operand.dtype()) || operand.impl().wrappedNumber)
      continue;
    if (operand.dtype() == f64)
      return false;
    mixed |= seen && *seen != operand.dtype();
    seen = operand.dtype();
  }
  return mixed;
}

/// The op's result types; under a WidenMixedOperandsScope, an op the types
/// of whose operands it refuses for mixing them gets them widened to the
/// widest of them (f32, since they mix).
std::vector<TensorType> inferWideningMixedOperands(const OpDef& op, std::vector<Tensor>& operands,
                                                   const AttributeMap& attributes, const RequestedResult& requested) {
  if (!gWidenMixedOperands || gAmpDisabledByUser || gOutsideAutocast || currentAutocastState() ||
      !mixesCastableFloatTypes(operands))
    return op.infer(op, operands, attributes, requested);
  try {
    // Ops that read some operands in any precision (the optimizers'
    // low-precision gradients) accept the mix as it is.
    return op.infer(op, operands, attributes, requested);
  } catch (const Error&) {
    DType widest = *widestFloatOperandType(operands);
    for (Tensor& operand : operands)
      if (operand.defined() && is_floating_point(operand.dtype()) && operand.dtype() != widest &&
          !operand.impl().wrappedNumber)
        operand = operand.to(widest);
    return op.infer(op, operands, attributes, requested);
  }
}

} // namespace

std::vector<Tensor> apply(const OpDef& op, std::vector<Tensor> operands, AttributeMap attributes,
                          const RequestedResult& requested) {
  bool countOk = op.variadic ? operands.size() >= op.operandCount() : operands.size() == op.operandCount();
  if (!countOk)
    throw Error("internal: " + std::string(op.name) + " called with " + std::to_string(operands.size()) +
                " operand positions, expected " + std::to_string(op.operandCount()));
  operands = autocastOperands(op, std::move(operands), attributes);
  std::vector<TensorType> resultTypes = inferWideningMixedOperands(op, operands, attributes, requested);

  bool anyRequiresGrad = std::any_of(operands.begin(), operands.end(), [](const Tensor& operand) {
    return operand.defined() && operand.requires_grad();
  });
  bool record = gGradEnabled && anyRequiresGrad && op.differentiability != Differentiability::None;
  if (record && op.differentiability == Differentiability::NotTwice)
    throw Error(std::string(op.name) +
                " has no VJP rule (it is a backward op; higher-order gradients are not supported): "
                "call it under NoGradGuard or on tensors that do not require grad");
  int64_t id = 0;
  if (record) {
    id = nextOpId();
    attributes["jit.op_id"] = id;
  }
  std::vector<Tensor> results = dispatch(op.name, operands, attributes, resultTypes);
  if (!record)
    return results;

  auto node = std::make_shared<Node>();
  node->op = &op;
  node->id = id;
  node->ampDisabled = gAmpDisabledByUser;
  node->attributes = std::move(attributes);
  for (const Tensor& operand : operands) {
    node->inputs.push_back(operand.defined() ? operand.detach() : Tensor());
    node->edges.push_back(operand.defined() && operand.requires_grad() ? operand.impl_ptr() : nullptr);
  }
  for (size_t i = 0; i < results.size(); ++i) {
    node->outputs.push_back(results[i].detach());
    TensorImpl& impl = results[i].impl();
    if (!rt::isFloating(impl.type.dtype))
      continue;
    impl.requiresGrad = true;
    impl.gradFn = node;
    impl.outputIndex = uint32_t(i);
  }
  return results;
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

namespace {

void accumulateInto(Tensor& slot, const Tensor& gradient) {
  slot = slot.defined() ? slot + gradient : gradient.detach();
  markState(slot, StateRole::Grad);
}

/// `gradient` checked against the operand it is for. A function's backward
/// may return another floating-point type, which goes to the input's as in
/// PyTorch's engine (under autocast the user does not choose the types); as
/// a type_as, so that in a trace it is the type AMP decides for the input.
Tensor conformGradient(const Node& node, size_t operand, const Tensor& gradient) {
  const TensorType& expected = node.edges[operand]->type;
  if (gradient.impl().type == expected)
    return gradient;
  if (!node.op) {
    if (gradient.impl().type.shape == expected.shape && rt::isFloating(gradient.impl().type.dtype) &&
        rt::isFloating(expected.dtype))
      return gradient.type_as(Tensor(node.edges[operand]));
    throw Error("autograd::function '" + node.customName + "': backward gave input " + std::to_string(operand) +
                " a gradient of type " + describe(gradient) + ", but the input is " + describe(expected));
  }
  throw Error("internal: the VJP rule of " + std::string(node.op->name) + " gave operand '" +
              std::string(node.op->operandNames[operand]) + "' a gradient of type " + describe(gradient) +
              ", expected " + describe(expected));
}

/// The node's rule: its op's VJP, or its function's backward.
std::vector<Tensor> nodeGradients(const Node& node, std::vector<Tensor> gradOutputs) {
  std::vector<bool> needsGrad;
  for (const auto& edge : node.edges)
    needsGrad.push_back(edge != nullptr);
  if (node.op) {
    VjpContext context{*node.op, node.inputs, node.outputs, node.attributes, gradOutputs, needsGrad};
    return node.op->vjp(context);
  }
  size_t inputCount = node.inputs.size();
  // The backward runs outside autocast, as PyTorch's engine runs it, or
  // under the forward's autocast state (custom_bwd).
  std::optional<ResumeAutocast> forwardsAutocast;
  std::optional<OutsideAutocastScope> outsideAutocast;
  if (node.customBackwardAutocast)
    forwardsAutocast.emplace(*node.customBackwardAutocast);
  else
    outsideAutocast.emplace();
  // Eagerly each gradient arrives in its output's type (autocast's casts
  // convert it back on their way). A trace sees every value as f32 and its
  // AMP pass may hand the rule a gradient of another type, which the user's
  // backward has no op of ours to follow: a type_as of the output gives it
  // the type AMP decides for the output, as eagerly.
  for (size_t i = 0; i < gradOutputs.size(); ++i) // one per output (runBackward)
    if (gradOutputs[i].defined() && gradOutputs[i].impl().session && is_floating_point(gradOutputs[i].dtype()))
      gradOutputs[i] = gradOutputs[i].type_as(node.outputs[i]);
  std::vector<Tensor> gradients = node.customBackward(
      autograd::FunctionContext{node.inputs, node.outputs, std::move(gradOutputs), std::move(needsGrad)});
  if (gradients.size() != inputCount)
    throw Error("autograd::function '" + node.customName + "': backward returned " +
                std::to_string(gradients.size()) + " gradients for " + std::to_string(inputCount) +
                " inputs (one per input; an undefined Tensor where none flows)");
  return gradients;
}

} // namespace

void runBackward(const Tensor& root, const Tensor& seed) {
  NoGradGuard noGrad;
  // VJP rules run without autocast, as PyTorch's: backward ops take the
  // types of the forward values (the casts autocast inserted are on the tape).
  SuspendAutocast noAutocast;
  TensorImpl& rootImpl = root.impl();
  if (!rootImpl.gradFn) {
    accumulateInto(rootImpl.grad, seed);
    nameState(rootImpl.grad, "grad", root);
    return;
  }

  // Count, for every node reachable from the root, how many edges lead to
  // it, so each node runs once, after all its consumers (Kahn's algorithm).
  std::unordered_map<Node*, int> pendingConsumers;
  std::vector<Node*> stack = {rootImpl.gradFn.get()};
  pendingConsumers[rootImpl.gradFn.get()] = 0;
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->edges) {
      if (!edge || !edge->gradFn)
        continue;
      auto [it, inserted] = pendingConsumers.try_emplace(edge->gradFn.get(), 0);
      ++it->second;
      if (inserted)
        stack.push_back(edge->gradFn.get());
    }
  }

  std::unordered_map<Node*, std::vector<Tensor>> gradients;
  gradients[rootImpl.gradFn.get()].resize(rootImpl.gradFn->outputs.size());
  gradients[rootImpl.gradFn.get()][rootImpl.outputIndex] = seed;
  std::deque<Node*> ready = {rootImpl.gradFn.get()};
  while (!ready.empty()) {
    Node* node = ready.front();
    ready.pop_front();
    std::vector<Tensor> gradOutputs = std::move(gradients[node]);
    gradOutputs.resize(node->outputs.size());
    for (size_t i = 0; i < gradOutputs.size(); ++i)
      if (!gradOutputs[i].defined() && is_floating_point(node->outputs[i].dtype()))
        gradOutputs[i] = zeros_like(node->outputs[i]);
    gradients.erase(node);

    std::vector<Tensor> inputGradients;
    {
      VjpScope marking(node->id);
      AmpRegionScope region(node->ampDisabled);
      inputGradients = nodeGradients(*node, std::move(gradOutputs));
    }
    inputGradients.resize(node->edges.size());

    for (size_t i = 0; i < node->edges.size(); ++i) {
      const std::shared_ptr<TensorImpl>& edge = node->edges[i];
      if (!edge)
        continue;
      Tensor gradient = inputGradients[i];
      if (gradient.defined())
        gradient = conformGradient(*node, i, gradient);
      // Sums of several gradients are marked for a traced step's AMP pass:
      // eagerly they run in the type of the value they differentiate (the
      // casts autocast recorded convert each gradient back first), which
      // under autocast semantics the pass must reproduce.
      if (!edge->gradFn) {
        if (gradient.defined()) {
          LeafGradientScope marking;
          accumulateInto(edge->grad, gradient);
          nameState(edge->grad, "grad", Tensor(edge));
        }
        continue;
      }
      Node* producer = edge->gradFn.get();
      if (gradient.defined()) {
        std::vector<Tensor>& slots = gradients[producer];
        slots.resize(producer->outputs.size());
        VjpScope marking(producer->id);
        AmpRegionScope region(producer->ampDisabled);
        accumulateInto(slots[edge->outputIndex], gradient);
      }
      if (--pendingConsumers[producer] == 0)
        ready.push_back(producer);
    }
  }
}

std::string nodeName(const Node& node) { return node.op ? std::string(node.op->name) : node.customName; }

} // namespace detail

std::vector<Tensor> autograd::function(const std::string& name, const std::vector<Tensor>& inputs,
                                       const ForwardFunction& forward, BackwardFunction backward,
                                       FunctionOptions options, std::source_location where) {
  detail::UserFrame frame(where);
  if (name.empty())
    throw Error("autograd::function: give it a name (grad_fn_name() and errors use it)");
  if (!forward || !backward)
    throw Error("autograd::function '" + name + "': forward and backward must both be given");
  if (options.cast_inputs && !is_floating_point(*options.cast_inputs))
    throw Error("autograd::function '" + name + "': cast_inputs must be a floating-point type (f16, bf16, f32 or "
                "f64), not " + std::string(dtype_name(*options.cast_inputs)));
  // A traced step with AMP options stands for eager code under autocast: its
  // pass decides what autocast would. At O0 it stands for code without.
  auto* session = detail::TraceSession::current();
  bool tracingUnderAmp = session && session->active() && session->ampDecidesPrecision();
  bool castsInputs = options.cast_inputs && (tracingUnderAmp || amp::autocast::is_enabled());
  std::shared_ptr<const amp::autocast::State> forwardsAutocast = detail::currentAutocastState();
  std::vector<Tensor> detached;
  bool anyRequiresGrad = false;
  std::vector<Tensor> results;
  {
    NoGradGuard noGrad;
    std::optional<amp::autocast> ampOff;
    if (castsInputs)
      ampOff.emplace(false);
    for (const Tensor& input : inputs) {
      Tensor given = input.defined() ? input.detach() : Tensor();
      if (castsInputs && given.defined() && is_floating_point(given.dtype()))
        given = given.to(*options.cast_inputs);
      detached.push_back(given);
      anyRequiresGrad = anyRequiresGrad || (input.defined() && input.requires_grad());
    }
    results = forward(detached);
  }
  if (!is_grad_enabled() || !anyRequiresGrad)
    return results;
  auto node = std::make_shared<detail::Node>();
  node->id = detail::nextOpId();
  node->ampDisabled = castsInputs || detail::ampDisabledByUser();
  if (options.autocast_backward && !castsInputs)
    node->customBackwardAutocast = forwardsAutocast;
  node->customName = name;
  node->customBackward = std::move(backward);
  node->inputs = detached;
  for (const Tensor& input : inputs)
    node->edges.push_back(input.defined() && input.requires_grad() ? input.impl_ptr() : nullptr);
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].defined())
      throw Error("autograd::function '" + name + "': forward returned an undefined result " + std::to_string(i));
    // A fresh handle: a result that is an input itself must not take over
    // the input's history. The node keeps a handle of its own: holding the
    // result, whose history is the node, it would keep both alive forever.
    results[i] = results[i].detach();
    node->outputs.push_back(results[i].detach());
    detail::TensorImpl& impl = results[i].impl();
    if (!ampjit::runtime::isFloating(impl.type.dtype))
      continue;
    impl.requiresGrad = true;
    impl.gradFn = node;
    impl.outputIndex = uint32_t(i);
  }
  return results;
}

} // namespace jit
