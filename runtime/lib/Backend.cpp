#include "ampjit/runtime/Backend.h"

#include <algorithm>
#include <cstring>

namespace ampjit::runtime {

Expected<std::vector<Tensor>> Backend::run(Plan plan, std::span<Tensor> arguments) {
  Expected<std::unique_ptr<Executable>> executable = prepare(std::move(plan));
  if (!executable)
    return executable.status();
  return (*executable)->run(arguments);
}

std::string describeArgument(const Plan& plan, size_t index) {
  BufferId id = plan.argumentBuffer(index);
  const BufferDesc& buffer = plan.buffers[id];
  std::string text = "argument " + std::to_string(index);
  if (!buffer.name.empty())
    text += " '" + buffer.name + "'";
  return text + " (" + std::string(bufferRoleName(buffer.role)) + " " + typeToString(buffer.type) + ")";
}

Expected<std::size_t> findArgument(const Plan& plan, std::string_view name) {
  std::vector<std::size_t> found;
  std::string known;
  for (std::size_t i = 0; i < plan.argumentCount(); ++i) {
    const std::string& argumentName = plan.buffers[plan.argumentBuffer(i)].name;
    if (argumentName == name)
      found.push_back(i);
    known += (known.empty() ? "'" : ", '") + argumentName + "'";
  }
  if (found.size() == 1)
    return found.front();
  if (found.empty())
    return Status::error("plan @" + plan.name + " has no argument named '" + std::string(name) +
                         "'; its arguments are " + known);
  return Status::error("plan @" + plan.name + " has " + std::to_string(found.size()) + " arguments named '" +
                       std::string(name) + "' (" + std::to_string(found[0]) + " and " + std::to_string(found[1]) +
                       "); use an index");
}

std::vector<std::size_t> numericsCheckedArguments(const Plan& plan) {
  std::vector<std::size_t> checked;
  for (const BufferDesc& buffer : plan.buffers)
    if (buffer.argument >= 0 && isFloating(buffer.type.dtype) && buffer.derivedFrom < 0)
      checked.push_back(std::size_t(buffer.argument));
  std::sort(checked.begin(), checked.end());
  return checked;
}

Status nonFiniteArgumentError(const Plan& plan, std::size_t index) {
  return Status::error("AMPJIT_CHECK_NUMERICS: plan @" + plan.name + ": " + describeArgument(plan, index) +
                       " holds an inf or NaN before the step runs");
}

Expected<std::vector<Tensor>> hostRunResults(const Plan& plan, std::span<Tensor> arguments,
                                             std::span<const Tensor> outputs,
                                             const std::function<const std::byte*(BufferId)>& bytesOf) {
  std::vector<Tensor> results;
  for (const PlanResult& result : plan.results) {
    const BufferDesc& buffer = plan.buffers[result.buffer];
    if (buffer.role == BufferRole::Output) {
      results.push_back(outputs[result.buffer]);
    } else if (result.tiedArgument >= 0) {
      results.push_back(arguments[size_t(result.tiedArgument)]);
    } else {
      Expected<Tensor> copy = Tensor::allocate(buffer.type);
      if (!copy)
        return copy.status();
      if (copy->byteSize() > 0)
        std::memcpy(copy->bytes(), bytesOf(result.buffer), copy->byteSize());
      results.push_back(std::move(*copy));
    }
  }
  return results;
}

Status checkArguments(const Plan& plan, std::span<const Tensor> arguments) {
  size_t expected = plan.argumentCount();
  std::string function = "plan @" + plan.name;
  if (arguments.size() < expected)
    return Status::error(function + " takes " + std::to_string(expected) + " arguments but got " +
                         std::to_string(arguments.size()) + ": " + describeArgument(plan, arguments.size()) +
                         " is missing");
  if (arguments.size() > expected)
    return Status::error(function + " takes " + std::to_string(expected) + " arguments but got " +
                         std::to_string(arguments.size()));
  std::vector<bool> updatedInPlace(expected, false);
  for (const PlanResult& result : plan.results)
    if (result.tiedArgument >= 0)
      updatedInPlace[size_t(result.tiedArgument)] = true;
  for (size_t i = 0; i < expected; ++i) {
    const TensorType& type = plan.buffers[plan.argumentBuffer(i)].type;
    if (!arguments[i].defined())
      return Status::error(function + ": " + describeArgument(plan, i) + " is missing (an empty tensor)");
    if (arguments[i].type() != type)
      return Status::error(function + ": " + describeArgument(plan, i) + " was given a tensor of type " +
                           typeToString(arguments[i].type()));
  }
  for (size_t i = 0; i < expected; ++i) {
    if (!updatedInPlace[i])
      continue;
    for (size_t j = 0; j < expected; ++j)
      if (j != i && arguments[i].sharesStorageWith(arguments[j]))
        return Status::error(function + ": " + describeArgument(plan, i) +
                             " is updated in place but shares its storage with " + describeArgument(plan, j));
  }
  return Status::success();
}

Status rederiveArguments(const Plan& plan, std::span<Tensor> arguments) {
  AMPJIT_RETURN_IF_ERROR(checkArguments(plan, arguments));
  for (const BufferDesc& buffer : plan.buffers) {
    if (buffer.derivedFrom < 0)
      continue;
    const Tensor& source = arguments[size_t(buffer.derivedFrom)];
    Tensor& derived = arguments[size_t(buffer.argument)];
    if (source.device() != Device::Host || derived.device() != Device::Host)
      return Status::error("rederiveArguments: argument " + std::to_string(buffer.argument) +
                           " is not in host memory; re-derive through its Executable");
    // One rounding from the exact source value (f32 and f64 are exact in double).
    for (int64_t i = 0; i < derived.elementCount(); ++i)
      derived.set(i, source.at(i));
  }
  return Status::success();
}

std::vector<size_t> deferredArguments(const Plan& plan) {
  std::vector<size_t> arguments;
  for (size_t index = 0; index < plan.deferredSteps && index < plan.steps.size(); ++index) {
    const Step& step = plan.steps[index];
    for (const std::vector<BufferId>* slots : {&step.inputs, &step.outputs})
      for (BufferId id : *slots)
        if (id != kNoBuffer && id < plan.buffers.size() && plan.buffers[id].argument >= 0)
          arguments.push_back(size_t(plan.buffers[id].argument));
  }
  std::sort(arguments.begin(), arguments.end());
  arguments.erase(std::unique(arguments.begin(), arguments.end()), arguments.end());
  return arguments;
}

bool mustFollow(const Step& earlier, const Step& later) {
  auto sharesABuffer = [](const std::vector<BufferId>& a, const std::vector<BufferId>& b) {
    for (BufferId id : a)
      if (id != kNoBuffer && std::find(b.begin(), b.end(), id) != b.end())
        return true;
    return false;
  };
  return sharesABuffer(later.inputs, earlier.outputs) || sharesABuffer(later.outputs, earlier.outputs) ||
         sharesABuffer(later.outputs, earlier.inputs);
}

std::vector<size_t> deferredStepDeadlines(const Plan& plan) {
  const size_t deferred = std::min<size_t>(plan.deferredSteps, plan.steps.size());
  std::vector<size_t> deadlines(deferred, plan.steps.size());
  for (size_t u = 0; u < deferred; ++u) {
    for (size_t index = deferred; index < plan.steps.size(); ++index) {
      if (mustFollow(plan.steps[u], plan.steps[index])) {
        deadlines[u] = index;
        break;
      }
    }
  }
  return deadlines;
}

Expected<size_t> DeferredUpdateTracker::firstStep(const Plan& plan, std::span<const Tensor> arguments) const {
  if (!pending_)
    return size_t(plan.deferredSteps);
  for (size_t i = 0; i < arguments_.size(); ++i)
    if (arguments[arguments_[i]].bytes() != addresses_[i])
      return Status::error("plan @" + plan.name + ": the last run's optimizer update is still pending (deferred) "
                           "for other state than " + describeArgument(plan, arguments_[i]) +
                           " of this run; complete it first (Executable::completeDeferred)");
  return size_t(0);
}

Status DeferredUpdateTracker::checkCompletion(const Plan& plan, std::span<const Tensor> arguments) const {
  std::string function = "plan @" + plan.name + ": completing its deferred update";
  if (arguments.size() != plan.argumentCount())
    return Status::error(function + ": it takes " + std::to_string(plan.argumentCount()) + " arguments but got " +
                         std::to_string(arguments.size()));
  for (size_t i = 0; i < arguments_.size(); ++i) {
    const Tensor& argument = arguments[arguments_[i]];
    const TensorType& type = plan.buffers[plan.argumentBuffer(arguments_[i])].type;
    if (!argument.defined() || argument.type() != type)
      return Status::error(function + ": " + describeArgument(plan, arguments_[i]) +
                           (argument.defined() ? " was given a tensor of type " + typeToString(argument.type())
                                               : std::string(" is missing (an empty tensor)")));
    if (pending_ && argument.bytes() != addresses_[i])
      return Status::error(function + ": " + describeArgument(plan, arguments_[i]) +
                           " is not the tensor the pending update was left for");
  }
  return Status::success();
}

void DeferredUpdateTracker::ran(const Plan& plan, std::span<const Tensor> arguments) {
  if (plan.deferredSteps == 0)
    return;
  addresses_.clear();
  for (size_t argument : arguments_)
    addresses_.push_back(arguments[argument].bytes());
  pending_ = true;
}

} // namespace ampjit::runtime
