#include "SpeculativeUpdates.h"

#include <algorithm>
#include <set>

namespace ampjit::runtime::cuda {

namespace {

/// Per output slot of an optimizer step, the input slot it rewrites.
std::vector<std::size_t> rewrittenInputSlots(const Step& step) {
  if (step.as<OptimizerParams>().optimizer == OptimizerKind::Adam) {
    using namespace adam_slot;
    return {kParam, kExpAvg, kExpAvgSq, kMaxExpAvgSq, kParamCopy};
  }
  using namespace sgd_slot;
  return {kParam, kMomentumBuffer, kParamCopy};
}

/// For each buffer, the buffer whose memory it is: reshapes laid over their
/// input in the arena, and views of arguments, constants and carried buffers.
std::vector<BufferId> memoryRoots(const Plan& plan) {
  std::vector<BufferId> root = arenaViewRoots(plan);
  auto rootOf = [&](BufferId id) {
    // A chain of viewOf ends at a buffer that views nothing (verifyPlan).
    for (std::size_t hops = 0; plan.buffers[id].viewOf >= 0 && hops < plan.buffers.size(); ++hops)
      id = BufferId(plan.buffers[id].viewOf);
    return root[id];
  };
  std::vector<BufferId> roots(plan.buffers.size());
  for (BufferId id = 0; id < plan.buffers.size(); ++id)
    roots[id] = rootOf(id);
  return roots;
}

bool isUpdatableState(BufferRole role) { return role == BufferRole::Param || role == BufferRole::OptState; }

class Scheduler {
public:
  explicit Scheduler(const Plan& plan) : plan_(plan), roots_(memoryRoots(plan)) {
    for (const SideStep& side : plan.sideSteps)
      sideSteps_.push_back(side.step);
  }

  /// The update at `index`, or why it cannot run speculatively.
  std::optional<SpeculativeUpdate> update(std::size_t index, std::string& whyNot) {
    const Step& step = plan_.steps[index];
    std::size_t predicate = optimizerPredicateSlot(step);
    if (step.inputs[predicate] == kNoBuffer)
      return refuse(whyNot, "is not predicated on a finiteness check");
    std::size_t predicateWriter = lastWriterBefore(index, step.inputs[predicate]);
    if (predicateWriter == kNoWriter)
      return refuse(whyNot, "reads a predicate no step of the run writes");
    if (std::find(sideSteps_.begin(), sideSteps_.end(), index) != sideSteps_.end())
      return refuse(whyNot, "is a side step");

    SpeculativeUpdate update;
    update.step = index;
    update.predicateWriter = predicateWriter;
    std::vector<std::size_t> inputSlots = rewrittenInputSlots(step);
    std::set<BufferId> rewrittenRoots;
    for (std::size_t slot = 0; slot < step.outputs.size(); ++slot) {
      BufferId out = step.outputs[slot];
      update.rewritten.push_back(out);
      if (out == kNoBuffer)
        continue;
      const BufferDesc& buffer = plan_.buffers[out];
      if (out != step.inputs[inputSlots[slot]])
        return refuse(whyNot, "writes " + describeBuffer(plan_, out) + " other than in place");
      if (!isUpdatableState(buffer.role) || buffer.argument < 0 || buffer.viewOf >= 0)
        return refuse(whyNot, "rewrites " + describeBuffer(plan_, out) + ", which is no parameter or "
                                     "optimizer state of its own");
      rewrittenRoots.insert(out);
    }
    for (BufferId id = 0; id < plan_.buffers.size(); ++id)
      if (id != roots_[id] && rewrittenRoots.count(roots_[id]))
        return refuse(whyNot, "rewrites state that " + describeBuffer(plan_, id) + " views");
    for (std::size_t s = 0; s < plan_.steps.size(); ++s) {
      if (s == index)
        continue;
      if (touches(plan_.steps[s].outputs, rewrittenRoots))
        return refuse(whyNot, "rewrites state that " + describeStep(plan_, s) + " writes too");
      if (s > index && touches(plan_.steps[s].inputs, rewrittenRoots))
        return refuse(whyNot, "rewrites state that " + describeStep(plan_, s) + " reads after it");
    }

    std::vector<std::size_t> hoists;
    for (std::size_t slot = 0; slot < step.inputs.size(); ++slot) {
      BufferId in = step.inputs[slot];
      if (slot == predicate || in == kNoBuffer)
        continue;
      std::size_t writer = lastWriterBefore(index, in);
      if (writer == kNoWriter)
        continue;
      if (hoistable(writer)) {
        hoists.push_back(writer);
        continue;
      }
      if (update.readyAfter == kReadyAtRunStart || writer > update.readyAfter)
        update.readyAfter = writer;
    }
    if (update.readyAfter != kReadyAtRunStart && update.readyAfter >= predicateWriter)
      return refuse(whyNot, "reads " + describeStep(plan_, update.readyAfter) +
                                       "'s output, written no earlier than its predicate: nothing to gain");
    for (std::size_t writer : hoists)
      if (std::find(hoisted_.begin(), hoisted_.end(), writer) == hoisted_.end())
        hoisted_.push_back(writer);
    return update;
  }

  std::vector<std::size_t> hoisted() const {
    std::vector<std::size_t> sorted = hoisted_;
    std::sort(sorted.begin(), sorted.end());
    return sorted;
  }

private:
  static constexpr std::size_t kNoWriter = std::numeric_limits<std::size_t>::max();

  static std::optional<SpeculativeUpdate> refuse(std::string& whyNot, std::string why) {
    whyNot = std::move(why);
    return std::nullopt;
  }

  bool touches(const std::vector<BufferId>& ids, const std::set<BufferId>& roots) const {
    return std::any_of(ids.begin(), ids.end(),
                       [&](BufferId id) { return id != kNoBuffer && roots.count(roots_[id]) > 0; });
  }

  /// The last step before `index` that writes `id`'s memory.
  std::size_t lastWriterBefore(std::size_t index, BufferId id) const {
    std::size_t writer = kNoWriter;
    for (std::size_t s = 0; s < index; ++s)
      for (BufferId out : plan_.steps[s].outputs)
        if (out != kNoBuffer && roots_[out] == roots_[id])
          writer = s;
    return writer;
  }

  /// A small elementwise step whose value is known when the run starts:
  /// every input's memory unwritten before it, one temporary output of at
  /// most kHoistableElements elements that no other step writes and
  /// nothing views. Run first, into memory of its own, it computes what it
  /// would where it stands.
  bool hoistable(std::size_t index) const {
    constexpr int64_t kHoistableElements = 64;
    const Step& step = plan_.steps[index];
    if ((step.kind != StepKind::Elementwise && step.kind != StepKind::FusedElementwise) ||
        step.outputs.size() != 1 || index < plan_.deferredSteps ||
        std::find(sideSteps_.begin(), sideSteps_.end(), index) != sideSteps_.end())
      return false;
    BufferId out = step.outputs[0];
    const BufferDesc& buffer = plan_.buffers[out];
    if (out == kNoBuffer || buffer.role != BufferRole::Temporary || buffer.viewOf >= 0 ||
        buffer.type.elementCount() > kHoistableElements)
      return false;
    for (BufferId id = 0; id < plan_.buffers.size(); ++id)
      if (id != out && roots_[id] == roots_[out])
        return false;
    for (std::size_t s = 0; s < plan_.steps.size(); ++s)
      if (s != index && touches(plan_.steps[s].outputs, {roots_[out]}))
        return false;
    for (BufferId in : step.inputs) {
      if (in == kNoBuffer)
        continue;
      if (roots_[in] == roots_[out] || lastWriterBefore(index, in) != kNoWriter ||
          plan_.buffers[roots_[in]].role == BufferRole::Temporary)
        return false;
    }
    return true;
  }

  const Plan& plan_;
  std::vector<BufferId> roots_;
  std::vector<std::size_t> hoisted_;
  std::vector<std::size_t> sideSteps_;
};

} // namespace

std::size_t optimizerPredicateSlot(const Step& step) {
  return step.as<OptimizerParams>().optimizer == OptimizerKind::Adam ? adam_slot::kPredicate
                                                                     : sgd_slot::kPredicate;
}

std::optional<SpeculationSchedule> scheduleSpeculativeUpdates(const Plan& plan, int64_t minimumElements,
                                                              std::string* whyNot) {
  auto refuse = [&](std::string why) -> std::optional<SpeculationSchedule> {
    if (whyNot)
      *whyNot = std::move(why);
    return std::nullopt;
  };
  if (plan.deferredSteps > 0)
    return refuse("its update is deferred to the next run");
  Scheduler scheduler(plan);
  SpeculationSchedule schedule;
  int64_t elements = 0;
  std::string lastWhyNot = "it has no optimizer update";
  for (std::size_t index = 0; index < plan.steps.size(); ++index) {
    if (plan.steps[index].kind != StepKind::OptimizerUpdate)
      continue;
    std::string why;
    std::optional<SpeculativeUpdate> update = scheduler.update(index, why);
    if (!update) {
      lastWhyNot = describeStep(plan, index) + " " + why;
      continue;
    }
    elements += plan.buffers[plan.steps[index].inputs[0]].type.elementCount();
    schedule.updates.push_back(std::move(*update));
  }
  if (schedule.updates.empty())
    return refuse(lastWhyNot);
  if (elements < minimumElements)
    return refuse("its speculative updates would cover " + std::to_string(elements) +
                  " parameter elements, under the " + std::to_string(minimumElements) + " that pay");
  schedule.hoisted = scheduler.hoisted();
  return schedule;
}

std::optional<GemmFold> gemmFoldOf(const Plan& plan, const SpeculativeUpdate& update, std::string& whyNot) {
  auto refuse = [&](std::string why) -> std::optional<GemmFold> {
    whyNot = std::move(why);
    return std::nullopt;
  };
  const Step& step = plan.steps[update.step];
  const OptimizerParams& optimizer = step.as<OptimizerParams>();
  if (optimizer.optimizer != OptimizerKind::Sgd)
    return refuse("is no SGD update");
  if (optimizer.momentum != 0.0 || step.inputs[sgd_slot::kMomentumBuffer] != kNoBuffer)
    return refuse("has momentum, which a GEMM's epilogue cannot keep");
  if (optimizer.weightDecay != 0.0)
    return refuse("has weight decay");
  auto isF32Scalar = [&](BufferId id) {
    return id != kNoBuffer && plan.buffers[id].type.dtype == DType::F32 && plan.buffers[id].type.elementCount() == 1;
  };
  BufferId invScale = step.inputs[sgd_slot::kInvScale];
  if (!isF32Scalar(step.inputs[sgd_slot::kLr]) || (invScale != kNoBuffer && !isF32Scalar(invScale)))
    return refuse("takes its lr or inv_scale other than as an f32 scalar");
  const TensorType& param = plan.buffers[step.inputs[sgd_slot::kParam]].type;
  if (param.dtype != DType::F32 || param.shape.size() != 2)
    return refuse("updates " + describeBuffer(plan, step.inputs[sgd_slot::kParam]) + ", no f32 matrix");

  BufferId gradient = step.inputs[sgd_slot::kGrad];
  std::vector<BufferId> roots = memoryRoots(plan);
  const BufferDesc& gradientBuffer = plan.buffers[gradient];
  if (gradientBuffer.role != BufferRole::Temporary || roots[gradient] != gradient)
    return refuse("reads " + describeBuffer(plan, gradient) + ", no temporary of its own");
  for (BufferId id = 0; id < plan.buffers.size(); ++id)
    if (id != gradient && roots[id] == gradient)
      return refuse("reads " + describeBuffer(plan, gradient) + ", which " + describeBuffer(plan, id) + " views");
  std::optional<std::size_t> gemm;
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    const Step& other = plan.steps[s];
    bool writes = std::find(other.outputs.begin(), other.outputs.end(), gradient) != other.outputs.end();
    bool reads = std::find(other.inputs.begin(), other.inputs.end(), gradient) != other.inputs.end();
    if (writes && gemm)
      return refuse("reads " + describeBuffer(plan, gradient) + ", which more than one step writes");
    if (writes)
      gemm = s;
    if (reads && s != update.step && s != update.predicateWriter)
      return refuse("reads " + describeBuffer(plan, gradient) + ", which " + describeStep(plan, s) + " reads too");
  }
  if (!gemm || plan.steps[*gemm].kind != StepKind::Gemm)
    return refuse("reads " + describeBuffer(plan, gradient) + ", which no Gemm step writes");
  const Step& product = plan.steps[*gemm];
  if (product.outputs[0] != gradient || product.as<GemmParams>().epilogue != GemmEpilogue::None ||
      product.computeType != DType::F32)
    return refuse("reads " + describeBuffer(plan, gradient) + ", which " + describeStep(plan, *gemm) +
                  " writes other than as a plain f32-accumulated product");
  if (gradientBuffer.type.shape != param.shape)
    return refuse("reads " + describeBuffer(plan, gradient) + ", which is not its parameter's shape");
  for (BufferId operand : {product.inputs[0], product.inputs[1]})
    if (plan.buffers[operand].type.shape.size() != 2)
      return refuse("reads " + describeBuffer(plan, gradient) + ", a batched product");
  if (*gemm < plan.deferredSteps || update.readyAfter != *gemm)
    return refuse("waits for " +
                  (update.readyAfter == kReadyAtRunStart ? std::string("nothing")
                                                         : describeStep(plan, update.readyAfter)) +
                  ", not for the GEMM of its gradient");
  return GemmFold{*gemm};
}

} // namespace ampjit::runtime::cuda
