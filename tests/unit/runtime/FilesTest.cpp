// Files.h: readWholeFile, and writeFileAtomically's whole files, errors that
// name the path and keep the previous file, and writers side by side that
// never show a reader half a file.

#include "ampjit/runtime/Files.h"

#include "TemporaryDirectory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using ampjit::runtime::Expected;
using ampjit::runtime::readWholeFile;
using ampjit::runtime::Status;
using ampjit::runtime::writeFileAtomically;
namespace fs = std::filesystem;

std::vector<fs::path> entriesOf(const fs::path& directory) {
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(directory))
    entries.push_back(entry.path().filename());
  return entries;
}

/// The file's bytes, or its error's message in their place (so that a
/// failed read also fails a comparison with the expected bytes).
std::string contentsOf(const fs::path& path) {
  Expected<std::string> bytes = readWholeFile(path);
  return bytes.ok() ? *bytes : "error: " + bytes.message();
}

TEST(Files, AFileIsReadWholeAndOneThatCannotBeIsAnErrorNamingItAndWhy) {
  ampjit::testing::TemporaryDirectory scratch;
  const std::string bytes = std::string("head\0\xff tail", 11) + std::string(200000, 'x');
  std::ofstream(scratch.path / "some.bin", std::ios::binary) << bytes;
  EXPECT_EQ(contentsOf(scratch.path / "some.bin"), bytes) << "more than one read's worth";
  EXPECT_EQ(contentsOf(scratch.path / "absent.bin"),
            "error: cannot open '" + (scratch.path / "absent.bin").string() + "': No such file or directory");
  EXPECT_EQ(contentsOf(scratch.path), "error: cannot read '" + scratch.path.string() + "': Is a directory");
}

TEST(Files, WritesAndReplacesWholeFilesAndLeavesNothingBeside) {
  ampjit::testing::TemporaryDirectory scratch;
  fs::path path = scratch.path / "entry.bin";
  const std::string longer(100000, 'a'), shorter = std::string("b\0c", 3);
  ASSERT_TRUE(writeFileAtomically(path, longer).ok());
  EXPECT_EQ(contentsOf(path), longer);
  ASSERT_TRUE(writeFileAtomically(path, shorter).ok());
  EXPECT_EQ(contentsOf(path), shorter) << "replaced, not overwritten in place";
  ASSERT_TRUE(writeFileAtomically(path, "").ok());
  EXPECT_EQ(contentsOf(path), "");
  EXPECT_EQ(entriesOf(scratch.path), std::vector<fs::path>{"entry.bin"});
}

TEST(Files, AFailureNamesThePathAndKeepsWhatWasThere) {
  ampjit::testing::TemporaryDirectory scratch;
  fs::path missing = scratch.path / "no-such-folder" / "entry.bin";
  Status status = writeFileAtomically(missing, "x");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "cannot open '" + missing.string() + "' for writing (its folder is missing or not writable)");

  // A directory in the way: the rename fails, the directory and its
  // contents stay, and the temporary file goes.
  fs::path occupied = scratch.path / "occupied";
  fs::create_directories(occupied / "inside");
  status = writeFileAtomically(occupied, "x");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message().rfind("cannot replace '" + occupied.string() + "': ", 0), 0u) << status.message();
  EXPECT_TRUE(fs::is_directory(occupied / "inside"));
  EXPECT_EQ(entriesOf(scratch.path), std::vector<fs::path>{"occupied"});
}

TEST(Files, ReadersBesideWritersOnlyEverSeeAWholeFile) {
  // Threads of one process, as the kernel compiler's are, and each writer's
  // own temporary file: a reader sees one version or another, whole.
  ampjit::testing::TemporaryDirectory scratch;
  fs::path path = scratch.path / "shared.bin";
  std::vector<std::string> versions;
  for (char c : {'p', 'q', 'r', 's'})
    versions.push_back(std::string(std::size_t(1) << 16, c) + std::string(std::size_t(c), c));
  ASSERT_TRUE(writeFileAtomically(path, versions[0]).ok());
  std::atomic<bool> writing{true};
  std::atomic<int> failures{0};
  std::vector<std::thread> writers;
  for (const std::string& version : versions)
    writers.emplace_back([&, version] {
      for (int i = 0; i < 40; ++i)
        failures += !writeFileAtomically(path, version).ok();
    });
  int reads = 0, torn = 0;
  std::thread reader([&] {
    while (writing.load()) {
      std::string seen = contentsOf(path);
      ++reads;
      torn += std::find(versions.begin(), versions.end(), seen) == versions.end();
    }
  });
  for (std::thread& writer : writers)
    writer.join();
  writing = false;
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(reads, 0);
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  EXPECT_EQ(entriesOf(scratch.path), std::vector<fs::path>{"shared.bin"});
}

} // namespace
