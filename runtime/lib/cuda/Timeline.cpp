#include "Timeline.h"

#include <algorithm>
#include <utility>

namespace ampjit::runtime::cuda {
namespace {

using Interval = std::pair<uint64_t, uint64_t>;

/// The stream's launches as disjoint, sorted intervals. A stamp kernel that
/// ran late can make a launch look as if it began after it ended: such a
/// launch is an instant, not a negative length.
std::vector<Interval> busyIntervals(std::span<const TimelineLaunch> launches, bool side) {
  std::vector<Interval> intervals;
  for (const TimelineLaunch& launch : launches)
    if (launch.side == side)
      intervals.emplace_back(launch.startNs, std::max(launch.startNs, launch.endNs));
  std::sort(intervals.begin(), intervals.end());
  std::vector<Interval> merged;
  for (const Interval& interval : intervals) {
    if (!merged.empty() && interval.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, interval.second);
    else
      merged.push_back(interval);
  }
  return merged;
}

uint64_t totalLength(const std::vector<Interval>& intervals) {
  uint64_t total = 0;
  for (const Interval& interval : intervals)
    total += interval.second - interval.first;
  return total;
}

/// The length of the intersection of two sets of disjoint, sorted intervals.
uint64_t overlapLength(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  uint64_t total = 0;
  for (std::size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    uint64_t begin = std::max(a[i].first, b[j].first), end = std::min(a[i].second, b[j].second);
    if (begin < end)
      total += end - begin;
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return total;
}

} // namespace

TimelineSummary summarizeTimeline(std::span<const TimelineLaunch> launches) {
  TimelineSummary summary;
  if (launches.empty())
    return summary;
  uint64_t first = launches.front().startNs, last = launches.front().endNs;
  for (const TimelineLaunch& launch : launches) {
    first = std::min(first, launch.startNs);
    last = std::max({last, launch.startNs, launch.endNs});
  }
  std::vector<Interval> main = busyIntervals(launches, false), side = busyIntervals(launches, true);
  summary.spanUs = double(last - first) * 1e-3;
  summary.mainBusyUs = double(totalLength(main)) * 1e-3;
  summary.sideBusyUs = double(totalLength(side)) * 1e-3;
  summary.bothBusyUs = double(overlapLength(main, side)) * 1e-3;
  for (const TimelineLaunch& launch : launches) {
    std::vector<Interval> own{{launch.startNs, std::max(launch.startNs, launch.endNs)}};
    summary.besideOtherStreamUs.push_back(double(overlapLength(own, launch.side ? main : side)) * 1e-3);
  }
  return summary;
}

} // namespace ampjit::runtime::cuda
