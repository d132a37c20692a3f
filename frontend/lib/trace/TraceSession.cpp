// Recording a step on symbolic tensors: see TraceSession.h.

#include "TraceSession.h"

#include "jit/nn.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <typeinfo>

namespace jit::detail {

namespace {
thread_local TraceSession* gCurrentSession = nullptr;
thread_local std::optional<UserLocation> gUserFrame;

UserLocation toUserLocation(const std::source_location& where) {
  return UserLocation{where.file_name(), unsigned(where.line()), unsigned(where.column())};
}

/// Where a tensor captured without an owner's mark goes.
ArgumentRole roleOf(const TensorImpl& impl) {
  switch (impl.stateRole) {
  case StateRole::Param: return ArgumentRole::Param;
  case StateRole::Grad: return ArgumentRole::Grad;
  case StateRole::OptState: return ArgumentRole::OptState;
  case StateRole::ScalerState: return ArgumentRole::ScalerState;
  case StateRole::Hyper: return ArgumentRole::Hyper;
  case StateRole::Unmarked: break;
  }
  return impl.requiresGrad && !impl.gradFn ? ArgumentRole::Param : ArgumentRole::Hyper;
}

/// Argument order after the inputs (the golden joint graph's order).
int roleOrder(ArgumentRole role) {
  switch (role) {
  case ArgumentRole::Input: return 0;
  case ArgumentRole::Param: return 1;
  case ArgumentRole::Grad: return 2;
  case ArgumentRole::OptState: return 3;
  case ArgumentRole::Hyper: return 4;
  case ArgumentRole::ScalerState: return 5;
  }
  return 6;
}

} // namespace

std::string_view roleName(ArgumentRole role) {
  switch (role) {
  case ArgumentRole::Input: return "input";
  case ArgumentRole::Param: return "param";
  case ArgumentRole::Grad: return "grad";
  case ArgumentRole::OptState: return "opt_state";
  case ArgumentRole::ScalerState: return "scaler_state";
  case ArgumentRole::Hyper: return "hyper";
  }
  return "?";
}

UserFrame::UserFrame(const std::source_location& where) : outermost_(!gUserFrame) {
  if (outermost_)
    gUserFrame = toUserLocation(where);
}
UserFrame::~UserFrame() {
  if (outermost_)
    gUserFrame.reset();
}
const std::optional<UserLocation>& currentUserFrame() { return gUserFrame; }

//===----------------------------------------------------------------------===//
// Host reads and in-place writes (declared in Dispatch.h)
//===----------------------------------------------------------------------===//

// Built only when a refusal is thrown, not on every host read.
std::string callerLine(const std::source_location& where) {
  return std::string(where.file_name()) + ":" + std::to_string(where.line());
}

bool leftOverFromATrace(const TensorImpl& impl) {
  return impl.session && !impl.session->active() && !impl.value.defined();
}

void checkHostReadOutsideTrace(const TensorImpl& impl, std::string_view what, const std::source_location& where) {
  if (impl.session && impl.session->active())
    throw Error(std::string(what) + " at " + callerLine(where) + " reads the value of " + describe(impl.type) +
                ", made by " +
                impl.session->describeProducer(impl.traceValue) + ", while jit::trace records '" +
                impl.session->name() +
                "': a traced step cannot depend on a tensor's value (compute on tensors, e.g. with jit::where, "
                "or return the tensor from the step and read it after the call)");
  if (TraceSession* session = TraceSession::current(); session && session->active())
    throw Error(std::string(what) + " at " + callerLine(where) + " reads the value of a tensor (" +
                describeState(impl) +
                ") while jit::trace records '" + session->name() +
                "': a traced step cannot depend on a tensor's value");
}

const rt::Tensor& concreteValue(const TensorImpl& impl, std::string_view what, const std::source_location& where) {
  checkHostReadOutsideTrace(impl, what, where);
  completeDeferredUpdate(impl);
  syncFromDevice(impl, what);
  if (!impl.value.defined()) {
    std::string at = callerLine(where);
    if (impl.session)
      throw Error(std::string(what) + " at " + at + ": this " + describe(impl.type) +
                  " was computed inside the traced step '" + impl.session->name() + "' (by " +
                  impl.session->describeProducer(impl.traceValue) +
                  ") and is not one of its outputs, so it has no value; return it from the step to read it");
    throw Error(std::string(what) + " at " + at + ": internal: the tensor has no data");
  }
  return impl.value;
}

void assignValue(TensorImpl& target, const Tensor& value) {
  if (TraceSession* session = TraceSession::current(); session && session->active()) {
    session->write(target, value);
    return;
  }
  if (target.session && !target.value.defined())
    throw Error("copy_ into a " + describe(target.type) + " computed inside the traced step '" +
                target.session->name() + "' (it has no data; only the step's outputs do)");
  // A pending update would otherwise land on top of this write.
  completeDeferredUpdate(target);
  target.value = concreteValue(value.impl(), "copy_");
  ++target.version;
  // The host now holds the newest value; the next CUDA step uploads it.
  if (target.deviceCopy)
    target.deviceCopy->hostStale = false;
}

//===----------------------------------------------------------------------===//
// TraceSession
//===----------------------------------------------------------------------===//

TraceSession* TraceSession::current() { return gCurrentSession; }

TraceSession::TraceSession(std::string name, UserLocation location, bool ampDecidesPrecision)
    : name_(std::move(name)), location_(std::move(location)), ampDecidesPrecision_(ampDecidesPrecision) {}

TraceSession::~TraceSession() {
  if (active_)
    abandon();
}

void TraceSession::begin() {
  active_ = true;
  previous_ = gCurrentSession;
  gCurrentSession = this;
  handler_.emplace(*this);
  autocastOff_.emplace();
  if (ampDecidesPrecision_)
    widenMixedOperands_.emplace();
}

Tensor TraceSession::input(const Tensor& example) {
  int64_t value = newValue(example.impl().type, -1);
  inputValues_.push_back(value);
  auto impl = std::make_shared<TensorImpl>();
  impl->type = example.impl().type;
  impl->session = shared_from_this();
  impl->traceValue = value;
  inputImpls_.push_back(impl.get());
  inputWrites_.push_back(-1);
  return Tensor(std::move(impl));
}

int64_t TraceSession::newValue(const TensorType& type, int64_t producer) {
  valueTypes_.push_back(type);
  producers_.push_back(producer);
  uses_.push_back(0);
  return int64_t(valueTypes_.size()) - 1;
}

Tensor TraceSession::symbolic(const TensorType& type, int64_t producer) {
  auto impl = std::make_shared<TensorImpl>();
  impl->type = type;
  impl->session = shared_from_this();
  impl->traceValue = newValue(type, producer);
  return Tensor(std::move(impl));
}

int64_t TraceSession::valueOf(const Tensor& tensor) {
  TensorImpl& impl = tensor.impl();
  if (impl.session.get() == this)
    return impl.traceValue;
  if (impl.session)
    throw Error("a " + describe(impl.type) + " computed inside the traced step '" + impl.session->name() +
                "' is used while tracing '" + name_ + "': only its outputs leave a traced step");
  return capture(tensor.impl_ptr());
}

void TraceSession::snapshotGradient(const std::shared_ptr<TensorImpl>& leaf) {
  for (const auto& [known, grad] : gradientSnapshots_)
    if (known == leaf)
      return;
  gradientSnapshots_.emplace_back(leaf, leaf->grad);
}

int64_t TraceSession::capture(const std::shared_ptr<TensorImpl>& impl) {
  ArgumentRole role = roleOf(*impl);
  int64_t value = newValue(impl->type, -1);
  Capture entry{impl, role, value, nullptr};
  if (role == ArgumentRole::Param) {
    snapshotGradient(impl);
    entry.gradAtCapture = impl->grad.impl_ptr();
  }
  captures_.push_back(std::move(entry));
  impl->session = shared_from_this();
  impl->traceValue = value;
  bound_.push_back(impl);
  return value;
}

void TraceSession::noteTrainingMode(const std::shared_ptr<const bool>& flag, std::string module) {
  for (const auto& mode : trainingModes_)
    if (mode.flag == flag)
      return;
  trainingModes_.push_back({flag, *flag, std::move(module)});
}

void TraceSession::noteGradientReset(const std::shared_ptr<TensorImpl>& leaf) {
  snapshotGradient(leaf);
  bool captured = std::any_of(captures_.begin(), captures_.end(),
                              [&](const Capture& capture) { return capture.impl == leaf; });
  if (!captured)
    resetBeforeCapture_.push_back(leaf);
}

std::vector<Tensor> TraceSession::run(const OpCall& call) {
  if (!active_)
    throw Error("internal: " + std::string(call.op) + " dispatched to a finished trace");
  TracedOp op;
  op.name = std::string(call.op);
  for (const Tensor& operand : call.operands) {
    int64_t value = operand.defined() ? valueOf(operand) : -1;
    if (value >= 0)
      ++uses_[size_t(value)];
    op.operands.push_back(value);
  }
  op.attributes = call.attributes;
  op.location = currentUserFrame() ? *currentUserFrame() : location_;
  int64_t index = int64_t(ops_.size());
  std::vector<Tensor> results;
  for (const TensorType& type : call.resultTypes) {
    results.push_back(symbolic(type, index));
    op.results.push_back(results.back().impl().traceValue);
  }
  ops_.push_back(std::move(op));
  return results;
}

void TraceSession::write(TensorImpl& target, const Tensor& value) {
  int64_t newValue = valueOf(value);
  for (size_t i = 0; i < inputImpls_.size(); ++i)
    if (inputImpls_[i] == &target) {
      // The caller's tensor changes, as eagerly: the final value becomes a
      // result the run writes back.
      inputWrites_[i] = newValue;
      target.traceValue = newValue;
      return;
    }
  if (target.session.get() != this) {
    if (target.session)
      throw Error("copy_ into a " + describe(target.type) + " computed inside the traced step '" +
                  target.session->name() + "'");
    // State written before any op read it: captured all the same, since
    // the write must reach it.
    capture(target.shared_from_this());
  }
  target.traceValue = newValue;
}

std::string TraceSession::describeProducer(int64_t value) const {
  if (value < 0 || size_t(value) >= producers_.size())
    return "an unknown op";
  int64_t producer = producers_[size_t(value)];
  if (producer >= 0) {
    const TracedOp& op = ops_[size_t(producer)];
    return op.name + " at " + op.location.str();
  }
  for (size_t i = 0; i < inputValues_.size(); ++i)
    if (inputValues_[i] == value)
      return "the step's input #" + std::to_string(i);
  for (const Capture& capture : captures_)
    if (capture.argumentValue == value) {
      std::string name = stateName(*capture.impl);
      return "captured " + std::string(roleName(capture.role)) + (name.empty() ? " state" : " '" + name + "'");
    }
  return "an unknown op";
}

void TraceSession::restoreGradients() {
  for (auto& [leaf, grad] : gradientSnapshots_)
    leaf->grad = grad;
}

void TraceSession::stopRecording() {
  active_ = false;
  widenMixedOperands_.reset();
  autocastOff_.reset();
  handler_.reset();
  gCurrentSession = previous_;
  for (const std::shared_ptr<TensorImpl>& impl : bound_) {
    impl->session = nullptr;
    impl->traceValue = -1;
  }
  bound_.clear();
}

void TraceSession::abandon() {
  if (!active_)
    return;
  stopRecording();
  restoreGradients();
}

std::pair<TraceGraph, TraceBindings> TraceSession::finish(std::span<const Tensor> outputs, bool keepGradients) {
  std::vector<int64_t> outputValues;
  for (const Tensor& output : outputs) {
    if (!output.defined())
      throw Error("the traced step '" + name_ + "' returned an undefined tensor");
    outputValues.push_back(valueOf(output));
  }

  TraceBindings bindings;
  bindings.trainingModes = trainingModes_;
  // Each captured piece of state's final value; gradients follow their leaf.
  std::map<const TensorImpl*, int64_t> finalValue;
  for (const Capture& capture : captures_)
    finalValue[capture.impl.get()] = capture.impl->traceValue;

  std::vector<std::pair<std::shared_ptr<TensorImpl>, int64_t>> newGradients;
  for (const Capture& capture : captures_) {
    if (capture.role != ArgumentRole::Param)
      continue;
    const std::shared_ptr<TensorImpl>& leaf = capture.impl;
    bool reset = std::find(resetBeforeCapture_.begin(), resetBeforeCapture_.end(), leaf) != resetBeforeCapture_.end();
    const std::shared_ptr<TensorImpl>& before = capture.gradAtCapture;
    bool beforeIsState = before && finalValue.count(before.get());
    if (!reset) {
      if (beforeIsState)
        bindings.gradientState.push_back({leaf, before});
      else if (!before)
        bindings.undefinedGradients.push_back(leaf);
    }
    const Tensor& now = leaf->grad;
    if (!now.defined()) {
      bindings.droppedGradients.push_back(leaf);
      continue;
    }
    if (finalValue.count(now.impl_ptr().get()))
      continue; // concrete gradient state, updated like any state
    if (now.impl().session.get() != this)
      continue; // a gradient the step did not touch
    if (beforeIsState) {
      finalValue[before.get()] = now.impl().traceValue;
      continue;
    }
    bool consumed = uses_[size_t(now.impl().traceValue)] > 0;
    if (consumed && !keepGradients)
      bindings.droppedGradients.push_back(leaf);
    else
      newGradients.emplace_back(leaf, now.impl().traceValue);
  }

  TraceGraph graph;
  graph.name = name_;
  graph.location = location_;
  for (size_t i = 0; i < inputValues_.size(); ++i)
    graph.arguments.push_back({inputValues_[i], ArgumentRole::Input, "input" + std::to_string(i)});
  bindings.inputCount = inputValues_.size();
  std::vector<const Capture*> ordered;
  for (const Capture& capture : captures_)
    ordered.push_back(&capture);
  std::stable_sort(ordered.begin(), ordered.end(), [](const Capture* a, const Capture* b) {
    return roleOrder(a->role) < roleOrder(b->role);
  });
  // Two models built alike (a GAN's, two Sequentials) name their entries alike.
  std::map<std::string, int> nameUses;
  for (const TraceGraph::Argument& input : graph.arguments)
    ++nameUses[input.name];
  for (const Capture* capture : ordered) {
    std::string name = stateName(*capture->impl);
    if (!name.empty())
      if (int uses = ++nameUses[name]; uses > 1)
        name += "#" + std::to_string(uses);
    graph.arguments.push_back({capture->argumentValue, capture->role, std::move(name)});
    bindings.state.push_back(capture->impl);
    bindings.stateRequiresGrad.push_back(capture->impl->requiresGrad);
  }

  for (int64_t value : outputValues)
    graph.results.push_back({value, std::nullopt, /*returnedToCaller=*/true});
  bindings.outputCount = outputValues.size();
  for (size_t i = 0; i < ordered.size(); ++i) {
    int64_t last = finalValue[ordered[i]->impl.get()];
    if (last != ordered[i]->argumentValue)
      graph.results.push_back({last, inputValues_.size() + i});
  }
  for (const auto& [leaf, value] : newGradients) {
    bindings.newGradients.push_back({leaf, graph.results.size()});
    graph.results.push_back({value, std::nullopt});
  }
  for (size_t i = 0; i < inputWrites_.size(); ++i)
    if (inputWrites_[i] >= 0) {
      bindings.inputWrites.push_back({i, graph.results.size()});
      graph.results.push_back({inputWrites_[i], std::nullopt});
    }

  // Stop recording; state goes back to its data, leaves to their gradient state.
  stopRecording();
  for (const auto& [leaf, grad] : bindings.gradientState)
    leaf->grad = Tensor(grad);
  for (const auto& leaf : bindings.droppedGradients)
    leaf->grad = Tensor();
  for (const auto& gradient : bindings.newGradients)
    gradient.leaf->grad = Tensor();

  graph.valueTypes = valueTypes_;
  graph.ops = ops_;
  return {std::move(graph), std::move(bindings)};
}

void noteTrainingModeRead(const std::shared_ptr<const bool>& flag, const nn::Module& module) {
  TraceSession* session = TraceSession::current();
  if (!session || !session->active())
    return;
  const char* mangled = typeid(module).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  session->noteTrainingMode(flag, std::move(name));
}

void refuseInsideTrace(const std::string& what, const std::string& advice) {
  if (TraceSession* session = TraceSession::current(); session && session->active())
    throw Error(what + " inside the traced step '" + session->name() + "': " + advice);
}

} // namespace jit::detail
