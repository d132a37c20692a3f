//===- TimelineTest.cpp - AMPJIT_TIMELINE's arithmetic on its stamps -------===//
//
// How long each stream was busy and how long both were, from stamps worked
// out by hand (the device run is tests/gpu's
// ATimelineRunStampsEachLaunchOnItsStreamAndStillComputesTheStep).
//
//===----------------------------------------------------------------------===//

#include "cuda/Timeline.h"

#include <gtest/gtest.h>

#include <vector>

namespace ampjit::runtime {
namespace {

using cuda::summarizeTimeline;
using cuda::TimelineLaunch;
using cuda::TimelineSummary;

struct TimelineCase {
  const char* what;
  std::vector<TimelineLaunch> launches;
  TimelineSummary expected;
};

TEST(Timeline, EachStreamsBusyTimeAndTheirIntersectionFromHandWorkedStamps) {
  const std::vector<TimelineCase> cases{
      {"main 0-10 and 12-20 us, side 5-15: beside each other 5-10 and 12-15",
       {{false, 1'000'000, 1'010'000}, {true, 1'005'000, 1'015'000}, {false, 1'012'000, 1'020'000}},
       {20.0, 18.0, 10.0, 8.0, {5.0, 8.0, 3.0}}},
      {"side 0-100 beside main 10-20, 30-40 and 90-120, which runs past the side's end",
       {{true, 0, 100'000}, {false, 10'000, 20'000}, {false, 30'000, 40'000}, {false, 90'000, 120'000}},
       {120.0, 50.0, 100.0, 30.0, {30.0, 10.0, 10.0, 10.0}}},
      // Launches of one stream overlap only through a late stamp kernel: the
      // time counts once, and a launch stamped as ending before it began is
      // an instant.
      {"main 0-10, 5-8, 9-14 and one stamped 20 then 19",
       {{false, 0, 10'000}, {false, 5'000, 8'000}, {false, 9'000, 14'000}, {false, 20'000, 19'000}},
       {20.0, 14.0, 0.0, 0.0, {0.0, 0.0, 0.0, 0.0}}},
  };
  for (const TimelineCase& c : cases) {
    SCOPED_TRACE(c.what);
    TimelineSummary summary = summarizeTimeline(c.launches);
    EXPECT_DOUBLE_EQ(summary.spanUs, c.expected.spanUs);
    EXPECT_DOUBLE_EQ(summary.mainBusyUs, c.expected.mainBusyUs);
    EXPECT_DOUBLE_EQ(summary.sideBusyUs, c.expected.sideBusyUs);
    EXPECT_DOUBLE_EQ(summary.bothBusyUs, c.expected.bothBusyUs);
    ASSERT_EQ(summary.besideOtherStreamUs.size(), c.launches.size());
    for (std::size_t i = 0; i < c.launches.size(); ++i)
      EXPECT_DOUBLE_EQ(summary.besideOtherStreamUs[i], c.expected.besideOtherStreamUs[i]) << "launch " << i;
  }
}

TEST(Timeline, NoLaunchesIsAnEmptySummary) {
  TimelineSummary summary = summarizeTimeline({});
  EXPECT_EQ(summary.spanUs, 0.0);
  EXPECT_EQ(summary.bothBusyUs, 0.0);
}

} // namespace
} // namespace ampjit::runtime
