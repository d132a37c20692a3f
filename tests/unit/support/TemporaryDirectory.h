#ifndef AMPJIT_TESTS_UNIT_SUPPORT_TEMPORARYDIRECTORY_H
#define AMPJIT_TESTS_UNIT_SUPPORT_TEMPORARYDIRECTORY_H

// A directory of one test's own (a kernel cache, GEMM tuning entries), named
// after the running test and the process, empty at the start and removed at
// the end of its scope, however the test ends.

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace ampjit::testing {

struct TemporaryDirectory {
  std::filesystem::path path;

  TemporaryDirectory() {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::path(::testing::TempDir()) /
           ("ampjit-" + std::string(test ? test->name() : "test") + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
  }
  ~TemporaryDirectory() {
    std::error_code error;
    std::filesystem::remove_all(path, error);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
};

} // namespace ampjit::testing

#endif // AMPJIT_TESTS_UNIT_SUPPORT_TEMPORARYDIRECTORY_H
