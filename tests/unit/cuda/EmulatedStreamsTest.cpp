//===- EmulatedStreamsTest.cpp - the emulated runtime's streams and graphs ===//
//
// tests/emulation/EmulatedStreams.h runs the CUDA backend's streams,
// events and graphs on the host; these tests show that it keeps the rules
// the backend relies on and that it can expose their breach: work waits in
// its stream until the host waits, an event wait orders two streams and
// nothing else does (the shuffled schedule runs a stream without one out of
// order), capture records instead of running and refuses an unjoined fork
// or a synchronisation, a graph replays what it captured on every launch,
// a graph describes its nodes (without addresses), and a copy from
// pageable memory takes the bytes at the call. Calls are
// qualified, as the runtime's own declarations would also match.
//
//===----------------------------------------------------------------------===//

#include "CudaEmulation.h"
#include "EmulatedStreams.h"
#include "cuda/UpdateKernels.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace ampjit::emulation {
namespace {

/// Two streams and an event, destroyed at the end of the test.
struct TwoStreams {
  explicit TwoStreams(uint64_t seed = 1) {
    setStreamSchedule(StreamSchedule::Shuffled, seed);
    EXPECT_EQ(emulation::cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(emulation::cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(emulation::cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  }
  ~TwoStreams() {
    emulation::cudaEventDestroy(event);
    emulation::cudaStreamDestroy(side);
    emulation::cudaStreamDestroy(main);
  }
  cudaStream_t main = nullptr, side = nullptr;
  cudaEvent_t event = nullptr;
};

TEST(EmulatedStreams, WorkWaitsInItsStreamUntilTheHostWaits) {
  TwoStreams streams;
  int value = 0;
  submitToStream(streams.main, "work", [&] { value = 1; });
  EXPECT_EQ(value, 0) << "enqueued work ran before anything waited for it";
  ASSERT_EQ(emulation::cudaStreamSynchronize(streams.main), cudaSuccess);
  EXPECT_EQ(value, 1);
}

TEST(EmulatedStreams, OnlyAnEventWaitOrdersTwoStreams) {
  // The side stream reads what the main stream writes. With the wait it
  // always sees the write; without it, some seeds run the read first.
  int outOfOrder = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    for (bool wait : {true, false}) {
      TwoStreams streams(seed);
      int written = 0, seen = -1;
      submitToStream(streams.main, "work", [&] { written = 7; });
      ASSERT_EQ(emulation::cudaEventRecord(streams.event, streams.main), cudaSuccess);
      if (wait) {
        ASSERT_EQ(emulation::cudaStreamWaitEvent(streams.side, streams.event, 0), cudaSuccess);
      }
      submitToStream(streams.side, "work", [&] { seen = written; });
      ASSERT_EQ(emulation::cudaDeviceSynchronize(), cudaSuccess);
      if (wait) {
        EXPECT_EQ(seen, 7) << "seed " << seed;
      } else {
        outOfOrder += seen == 0;
      }
    }
  }
  EXPECT_GT(outOfOrder, 0) << "the schedule never ran the side stream first: it would hide a missing wait";
}

TEST(EmulatedStreams, CaptureRecordsAndAGraphReplaysOnEveryLaunch) {
  TwoStreams streams;
  int mainRuns = 0, sideRuns = 0;
  cudaEvent_t joined = nullptr;
  ASSERT_EQ(emulation::cudaEventCreateWithFlags(&joined, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(emulation::cudaStreamBeginCapture(streams.main, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  submitToStream(streams.main, "main work", [&] { ++mainRuns; });
  // Fork to the side stream and join it back, as the backend's update does.
  ASSERT_EQ(emulation::cudaEventRecord(streams.event, streams.main), cudaSuccess);
  ASSERT_EQ(emulation::cudaStreamWaitEvent(streams.side, streams.event, 0), cudaSuccess);
  // After the fork: sees this launch's main work.
  submitToStream(streams.side, "side work", [&] { sideRuns += mainRuns; });
  ASSERT_EQ(emulation::cudaEventRecord(joined, streams.side), cudaSuccess);
  ASSERT_EQ(emulation::cudaStreamWaitEvent(streams.main, joined, 0), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(emulation::cudaStreamEndCapture(streams.main, &graph), cudaSuccess);
  ASSERT_EQ(emulation::cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(mainRuns + sideRuns, 0) << "captured work ran during capture";

  cudaGraphExec_t executable = nullptr;
  ASSERT_EQ(emulation::cudaGraphInstantiate(&executable, graph, 0), cudaSuccess);
  emulation::cudaGraphDestroy(graph);
  // The graph in words, each node on its lane in capture order; the events
  // by their number in the capture, the records by their count there.
  std::vector<std::string> described = {"lane 0: main work",
                                        "lane 0: record event 0 (#1)",
                                        "lane 1: wait for event 0 (#1)",
                                        "lane 1: side work",
                                        "lane 1: record event 1 (#1)",
                                        "lane 0: wait for event 1 (#1)"};
  EXPECT_EQ(lastGraphInstantiation().nodes, described);
  for (int launch = 0; launch < 2; ++launch)
    ASSERT_EQ(emulation::cudaGraphLaunch(executable, streams.main), cudaSuccess);
  ASSERT_EQ(emulation::cudaStreamSynchronize(streams.main), cudaSuccess);
  EXPECT_EQ(mainRuns, 2);
  EXPECT_EQ(sideRuns, 1 + 2) << "each launch's side work ran after that launch's main work";
  emulation::cudaGraphExecDestroy(executable);
  emulation::cudaEventDestroy(joined);
}

TEST(EmulatedStreams, CaptureRefusesAnUnjoinedForkAndASynchronisation) {
  {
    TwoStreams streams;
    ASSERT_EQ(emulation::cudaStreamBeginCapture(streams.main, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(emulation::cudaEventRecord(streams.event, streams.main), cudaSuccess);
    ASSERT_EQ(emulation::cudaStreamWaitEvent(streams.side, streams.event, 0), cudaSuccess);
    submitToStream(streams.side, "work", [] {});
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(emulation::cudaStreamEndCapture(streams.main, &graph), cudaErrorStreamCaptureUnjoined);
    EXPECT_EQ(graph, nullptr);
  }
  {
    TwoStreams streams;
    ASSERT_EQ(emulation::cudaStreamBeginCapture(streams.main, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    EXPECT_EQ(emulation::cudaStreamSynchronize(streams.main), cudaErrorStreamCaptureUnsupported);
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(emulation::cudaStreamEndCapture(streams.main, &graph), cudaErrorStreamCaptureInvalidated);
  }
  {
    // An event recorded before the capture cannot order a captured node.
    TwoStreams streams;
    ASSERT_EQ(emulation::cudaEventRecord(streams.event, streams.side), cudaSuccess);
    ASSERT_EQ(emulation::cudaStreamBeginCapture(streams.main, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    EXPECT_EQ(emulation::cudaStreamWaitEvent(streams.main, streams.event, 0), cudaErrorStreamCaptureIsolation);
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(emulation::cudaStreamEndCapture(streams.main, &graph), cudaErrorStreamCaptureInvalidated);
  }
}

TEST(EmulatedStreams, PrioritiesAreClampedAndCaptureCopiesThemIntoTheGraph) {
  int least = 1, greatest = 1;
  ASSERT_EQ(emulation::cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  EXPECT_EQ(least, 0);
  EXPECT_LT(greatest, least);
  cudaStream_t high = nullptr, low = nullptr;
  ASSERT_EQ(emulation::cudaStreamCreateWithPriority(&high, cudaStreamNonBlocking, greatest - 10), cudaSuccess);
  ASSERT_EQ(emulation::cudaStreamCreateWithPriority(&low, cudaStreamNonBlocking, least + 10), cudaSuccess);
  int priority = 1;
  ASSERT_EQ(emulation::cudaStreamGetPriority(high, &priority), cudaSuccess);
  EXPECT_EQ(priority, greatest) << "clamped to the range";
  ASSERT_EQ(emulation::cudaStreamGetPriority(low, &priority), cudaSuccess);
  EXPECT_EQ(priority, least);
  // A capture that forks onto `low` and joins back.
  cudaEvent_t fork = nullptr, join = nullptr;
  ASSERT_EQ(emulation::cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(emulation::cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(emulation::cudaStreamBeginCapture(high, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  submitToStream(high, "work", [] {});
  ASSERT_EQ(emulation::cudaEventRecord(fork, high), cudaSuccess);
  ASSERT_EQ(emulation::cudaStreamWaitEvent(low, fork, 0), cudaSuccess);
  submitToStream(low, "work", [] {});
  ASSERT_EQ(emulation::cudaEventRecord(join, low), cudaSuccess);
  ASSERT_EQ(emulation::cudaStreamWaitEvent(high, join, 0), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(emulation::cudaStreamEndCapture(high, &graph), cudaSuccess);
  cudaGraphExec_t executable = nullptr;
  EXPECT_EQ(emulation::cudaGraphInstantiate(&executable, graph, 1ull << 40), cudaErrorInvalidValue)
      << "a flag the runtime does not define";
  ASSERT_EQ(emulation::cudaGraphInstantiate(&executable, graph, cudaGraphInstantiateFlagUseNodePriority), cudaSuccess);
  GraphInstantiation instantiation = lastGraphInstantiation();
  EXPECT_EQ(instantiation.flags, cudaGraphInstantiateFlagUseNodePriority);
  EXPECT_EQ(instantiation.lanePriorities, (std::vector<std::vector<int>>{{greatest}, {least}}));
  emulation::cudaGraphExecDestroy(executable);
  emulation::cudaGraphDestroy(graph);
  emulation::cudaEventDestroy(join);
  emulation::cudaEventDestroy(fork);
  emulation::cudaStreamDestroy(low);
  emulation::cudaStreamDestroy(high);
}

TEST(EmulatedStreams, APageableCopyTakesTheBytesAtTheCall) {
  TwoStreams streams;
  void* device = nullptr;
  ASSERT_EQ(emulation::cudaMalloc(&device, sizeof(int)), cudaSuccess);
  EXPECT_TRUE(isDeviceMemory(device));
  int host = 5, back = 0;
  ASSERT_EQ(emulation::cudaMemcpyAsync(device, &host, sizeof host, cudaMemcpyHostToDevice, streams.main), cudaSuccess);
  host = 6; // after the call: the runtime has staged the 5 already
  ASSERT_EQ(emulation::cudaMemcpyAsync(&back, device, sizeof back, cudaMemcpyDeviceToHost, streams.main), cudaSuccess);
  EXPECT_EQ(back, 5) << "a copy into pageable memory returns once the bytes are there";
  EXPECT_EQ(emulation::cudaMemcpyAsync(device, &host, sizeof host, cudaMemcpyDeviceToHost, streams.main),
            cudaErrorInvalidValue)
      << "the copy's kind contradicts where its pointers are";
  ASSERT_EQ(emulation::cudaFree(device), cudaSuccess);
}

TEST(EmulatedStreams, AProfilesStreamHoldWaitsForItsReleaseOrGivesUpAfterItsPolls) {
  // AMPJIT_PROFILE holds the stream with this kernel while it enqueues a
  // segment: released, it returns at once; never released, it stops
  // polling and says so, rather than hang the device.
  cudaStream_t stream = nullptr;
  ASSERT_EQ(emulation::cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (uint32_t released : {1u, 0u}) {
    runtime::cuda::update::StreamHold hold{};
    hold.released = released;
    ASSERT_EQ(runtime::cuda::update::launchStreamHold(&hold, 1000, stream), cudaSuccess);
    ASSERT_EQ(emulation::cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(hold.gaveUp, released == 0 ? 1u : 0u) << "released " << released;
  }
  emulation::cudaStreamDestroy(stream);
}

} // namespace
} // namespace ampjit::emulation
