// Host tensors count what they hold against a limit, so a request the machine
// cannot back is an error naming it instead of a process the OOM killer ends
// while zero-filling it.

#include "ampjit/runtime/HostMemory.h"

#include "RuntimeTestUtil.h"

#include <gtest/gtest.h>

#if defined(__linux__)
#include <sys/sysinfo.h>
#endif

namespace ampjit::runtime {
namespace {

using namespace test;

/// Sets the process's limit for one test and puts the machine's back after.
class ScopedHostMemoryLimit {
public:
  explicit ScopedHostMemoryLimit(std::size_t bytes) { setHostMemoryLimit(bytes); }
  ~ScopedHostMemoryLimit() { setHostMemoryLimit(std::nullopt); }
  ScopedHostMemoryLimit(const ScopedHostMemoryLimit&) = delete;
  ScopedHostMemoryLimit& operator=(const ScopedHostMemoryLimit&) = delete;
};

constexpr std::size_t kKiB = 1024;

TEST(HostMemory, TensorsCountWhatTheyHoldUntilTheLastHandleGoes) {
  std::size_t before = hostBytesHeld();
  {
    Expected<Tensor> tensor = Tensor::allocate(DType::F32, {1000});
    ASSERT_TRUE(tensor) << tensor.message();
    EXPECT_EQ(hostBytesHeld(), before + 4000);
    Tensor alias = *tensor;
    tensor = Tensor::allocate(DType::F16, {10});
    ASSERT_TRUE(tensor) << tensor.message();
    EXPECT_EQ(hostBytesHeld(), before + 4000 + 20) << "the alias keeps the first tensor's bytes";
  }
  EXPECT_EQ(hostBytesHeld(), before);
}

TEST(HostMemory, ARequestPastTheLimitIsRefusedNamingWhatIsHeldAndTheLimit) {
  std::size_t held = hostBytesHeld();
  ScopedHostMemoryLimit limit(held + 1024 * kKiB);
  Expected<std::shared_ptr<Storage>> first = Storage::allocate(768 * kKiB);
  ASSERT_TRUE(first) << first.message();

  Expected<std::shared_ptr<Storage>> second = Storage::allocate(512 * kKiB);
  ASSERT_FALSE(second);
  EXPECT_NE(second.message().find(std::to_string(512 * kKiB) + " bytes more"), std::string::npos)
      << second.message();
  EXPECT_NE(second.message().find("hold " + std::to_string(held + 768 * kKiB) + " bytes"), std::string::npos)
      << second.message();
  EXPECT_NE(second.message().find("setHostMemoryLimit allows " + std::to_string(held + 1024 * kKiB) + " bytes"),
            std::string::npos)
      << second.message();
  EXPECT_EQ(second.message().find("AMPJIT_HOST_MEMORY_LIMIT"), std::string::npos)
      << "a limit set on purpose is not the environment's to change: " << second.message();
  EXPECT_EQ(hostBytesHeld(), held + 768 * kKiB) << "a refusal holds nothing";

  // Exactly up to the limit is allowed, and freeing makes room again.
  Expected<std::shared_ptr<Storage>> rest = Storage::allocate(256 * kKiB);
  ASSERT_TRUE(rest) << rest.message();
  first->reset();
  second = Storage::allocate(512 * kKiB);
  EXPECT_TRUE(second) << second.message();
}

TEST(HostMemory, ATensorRefusedForTheLimitNamesItsTypeAndTheReason) {
  ScopedHostMemoryLimit limit(hostBytesHeld() + 64 * kKiB);
  Expected<Tensor> tensor = Tensor::allocate(DType::F32, {1024, 1024});
  ASSERT_FALSE(tensor);
  EXPECT_NE(tensor.message().find("cannot allocate a tensor of type f32[1024x1024]: 4194304 bytes (4.0 MiB) more"),
            std::string::npos)
      << tensor.message();
}

TEST(HostMemory, APlanWhoseArenaPassesTheLimitIsRefusedAtPrepareNamingThePlan) {
  Plan plan = sampleTrainStep();
  ASSERT_GT(plan.arenaBytes, 0);
  ScopedHostMemoryLimit limit(hostBytesHeld() + std::size_t(plan.arenaBytes) - 1);
  Expected<std::unique_ptr<Executable>> executable = cpuBackend().prepare(plan);
  ASSERT_FALSE(executable);
  EXPECT_NE(executable.message().find("plan @" + plan.name + ": cannot allocate its arena of " +
                                      std::to_string(plan.arenaBytes) + " bytes: "),
            std::string::npos)
      << executable.message();
  EXPECT_NE(executable.message().find("host memory limit"), std::string::npos) << executable.message();
}

TEST(HostMemory, WithoutAnOverrideTheLimitIsTheMachinesAtMost) {
  Expected<HostMemoryLimit> limit = hostMemoryLimit();
  ASSERT_TRUE(limit) << limit.message();
  EXPECT_GE(limit->bytes, hostBytesHeld());
#if defined(__linux__)
  struct sysinfo info {};
  ASSERT_EQ(sysinfo(&info), 0);
  std::size_t machine = (std::size_t(info.totalram) + std::size_t(info.totalswap)) * info.mem_unit;
  if (std::getenv("AMPJIT_HOST_MEMORY_LIMIT") == nullptr) {
    EXPECT_LE(limit->bytes, machine) << limit->source;
    EXPECT_GT(limit->bytes, std::size_t(64) << 20) << limit->source;
    EXPECT_NE(limit->source.find("swap"), std::string::npos) << limit->source;
  }
#endif
  setHostMemoryLimit(12345);
  EXPECT_EQ(hostMemoryLimit()->bytes, 12345u);
  setHostMemoryLimit(std::nullopt);
  EXPECT_EQ(hostMemoryLimit()->bytes, limit->bytes) << "nullopt goes back to the machine's";
}

} // namespace
} // namespace ampjit::runtime
