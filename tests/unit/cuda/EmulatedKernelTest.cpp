//===- EmulatedKernelTest.cpp - the CUDA emulation itself -----------------===//
//
// tests/emulation runs kernels on the host; these tests show that it keeps
// the device's rules a kernel relies on (thread and block ids, shared
// memory behind barriers, warp shuffles, exited threads at a barrier) and
// refuses what the device refuses (launches past its limits, barriers that
// cannot all be reached), so a passing emulated kernel test means the
// kernel's logic holds. The kernels are EmulationTestKernels.cu.
//
//===----------------------------------------------------------------------===//

#include "CudaEmulation.h"
#include "EmulationTestKernels.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace ampjit::emulation {
namespace {

namespace kernels = testkernels;

TEST(CudaEmulation, EveryThreadOfEveryBlockRunsWithItsOwnIds) {
  dim3 grid(3, 2, 2), block(4, 3, 2);
  unsigned blocks = 12, threads = 24;
  std::vector<unsigned> ids(blocks * threads, ~0u);
  int64_t before = counters().threads;
  ASSERT_EQ(kernels::ids(grid, block, ids.data()), cudaSuccess) << lastFailure();
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned t = 0; t < threads; ++t)
      ASSERT_EQ(ids[b * threads + t], b * 1000 + t) << "block " << b << ", thread " << t;
  EXPECT_EQ(counters().threads - before, int64_t(blocks * threads));
}

TEST(CudaEmulation, SharedMemoryIsWrittenByAllBeforeABarrierReleasesAny) {
  constexpr int kBlocks = 3, kThreads = 256;
  std::vector<int> in(kBlocks * kThreads), out(in.size(), -1);
  std::iota(in.begin(), in.end(), 0);
  ASSERT_EQ(kernels::rotate(in.data(), out.data(), kBlocks), cudaSuccess) << lastFailure();
  // Thread t reads what thread t+1 wrote: without the barrier, fibers run in
  // order and thread t would read a slot nobody had written yet.
  for (int b = 0; b < kBlocks; ++b)
    for (int t = 0; t < kThreads; ++t)
      ASSERT_EQ(out[b * kThreads + t], b * kThreads + (t + 1) % kThreads) << "block " << b << ", thread " << t;
}

TEST(CudaEmulation, AWarpShuffleExchangesWithTheRightLane) {
  constexpr int kBlocks = 2, kThreads = 96;
  std::vector<float> in(kBlocks * kThreads), out(in.size(), -1.0f);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = float(i % 7) + float(i / 32); // differs between warps and lanes
  ASSERT_EQ(kernels::sumWarps(in.data(), out.data(), kBlocks, kThreads), cudaSuccess) << lastFailure();
  for (size_t warp = 0; warp < in.size() / 32; ++warp) {
    float sum = 0;
    for (size_t lane = 0; lane < 32; ++lane)
      sum += in[warp * 32 + lane];
    for (size_t lane = 0; lane < 32; ++lane)
      ASSERT_EQ(out[warp * 32 + lane], sum) << "warp " << warp << ", lane " << lane;
  }
}

TEST(CudaEmulation, ThreadsThatExitCountAsArrivedAtABarrier) {
  std::vector<int> out(256, -1);
  ASSERT_EQ(kernels::exitEarly(100, out.data()), cudaSuccess) << lastFailure();
  for (int t = 0; t < 100; ++t)
    ASSERT_EQ(out[size_t(t)], 99 - t) << "thread " << t;
  EXPECT_EQ(out[100], -1);
}

TEST(CudaEmulation, BarriersThatCannotAllBeReachedFailTheLaunch) {
  float out = 0.0f;
  EXPECT_EQ(kernels::deadlock(&out), cudaErrorLaunchFailure);
  EXPECT_NE(lastFailure().find("deadlock in block (0,0,0): 63 threads wait at __syncthreads, 1 at a warp shuffle"),
            std::string::npos)
      << lastFailure();
  // The error is taken once, as cudaGetLastError's, and the next launch runs.
  std::vector<int> ok(256);
  EXPECT_EQ(kernels::exitEarly(1, ok.data()), cudaSuccess);
}

TEST(CudaEmulation, LaunchesPastTheDevicesLimitsAreInvalidConfigurations) {
  unsigned unused = 0;
  EXPECT_EQ(kernels::ids(dim3(1), dim3(1025), &unused), cudaErrorInvalidConfiguration);
  EXPECT_NE(lastFailure().find("at most 1024 threads"), std::string::npos) << lastFailure();
  EXPECT_EQ(kernels::ids(dim3(1, 65536), dim3(1), &unused), cudaErrorInvalidConfiguration);
  EXPECT_EQ(kernels::ids(dim3(0), dim3(32), &unused), cudaErrorInvalidConfiguration);
  EXPECT_EQ(unused, 0u) << "a refused launch runs nothing";
}

} // namespace
} // namespace ampjit::emulation
