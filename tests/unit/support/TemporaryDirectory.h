#ifndef AMPJIT_TESTS_UNIT_SUPPORT_TEMPORARYDIRECTORY_H
#define AMPJIT_TESTS_UNIT_SUPPORT_TEMPORARYDIRECTORY_H

// A directory of one test's own (a kernel cache, GEMM tuning entries, a
// checkpoint, a profile), named after the running test and the process, so
// that tests ctest runs side by side never share a file: it exists and is
// empty at the start and is removed at the end of its scope, however the
// test ends.

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
    std::filesystem::create_directories(path);
  }
  /// `name` in the directory, as the string the APIs under test take.
  std::string file(const std::string& name) const { return (path / name).string(); }
  ~TemporaryDirectory() {
    std::error_code error;
    std::filesystem::remove_all(path, error);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
};

} // namespace ampjit::testing

#endif // AMPJIT_TESTS_UNIT_SUPPORT_TEMPORARYDIRECTORY_H
