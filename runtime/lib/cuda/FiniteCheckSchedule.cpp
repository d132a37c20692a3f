#include "FiniteCheckSchedule.h"

#include <algorithm>
#include <limits>

namespace ampjit::runtime::cuda {

std::optional<FiniteCheckSchedule> scheduleFiniteCheck(const Plan& plan, std::size_t allFiniteStep,
                                                       int64_t minChunkElements) {
  constexpr std::size_t kNoWriter = std::numeric_limits<std::size_t>::max();
  const Step& check = plan.steps[allFiniteStep];
  // Each input's last writer before the check: from then on its bytes hold
  // the final gradient until the check (the arena keeps a buffer's bytes for
  // it until its last reader), so the side stream may read it concurrently.
  std::vector<std::pair<std::size_t, BufferId>> byWriter;
  FiniteCheckSchedule schedule;
  for (BufferId input : check.inputs) {
    std::size_t writer = kNoWriter;
    for (std::size_t s = 0; s < allFiniteStep; ++s)
      if (std::find(plan.steps[s].outputs.begin(), plan.steps[s].outputs.end(), input) != plan.steps[s].outputs.end())
        writer = s;
    if (writer == kNoWriter)
      schedule.atStep.push_back(input);
    else
      byWriter.emplace_back(writer, input);
  }
  std::stable_sort(byWriter.begin(), byWriter.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  FiniteCheckChunk pending;
  int64_t pendingElements = 0;
  for (const auto& [writer, input] : byWriter) {
    pending.buffers.push_back(input);
    pending.afterStep = writer;
    pendingElements += plan.buffers[input].type.elementCount();
    if (pendingElements >= minChunkElements) {
      schedule.early.push_back(std::move(pending));
      pending = {};
      pendingElements = 0;
    }
  }
  schedule.atStep.insert(schedule.atStep.end(), pending.buffers.begin(), pending.buffers.end());
  if (schedule.early.empty())
    return std::nullopt;
  return schedule;
}

} // namespace ampjit::runtime::cuda
