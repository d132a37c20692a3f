// The .npy reader and writer: exact round trips for every dtype, the byte
// layout np.save writes, headers as NumPy versions write them, and a clear
// error for every malformed file.

#include "ampjit/runtime/Npy.h"
#include "TemporaryDirectory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace {

namespace rt = ampjit::runtime;
using rt::DType;

/// A .npy file's bytes from a header dict literal, written independently of
/// the code under test: magic, version, length, the header padded as np.save
/// pads it, then `data`.
std::vector<uint8_t> npyBytes(std::string header, const void* data, size_t dataBytes, uint8_t version = 1) {
  size_t lengthBytes = version == 1 ? 2 : 4;
  size_t prefix = 8 + lengthBytes;
  header.append(63 - (prefix + header.size()) % 64, ' ');
  header += '\n';
  std::vector<uint8_t> bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', version, 0};
  for (size_t i = 0; i < lengthBytes; ++i)
    bytes.push_back(uint8_t(header.size() >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  const uint8_t* raw = static_cast<const uint8_t*>(data);
  bytes.insert(bytes.end(), raw, raw + dataBytes);
  return bytes;
}

std::string parseError(const std::vector<uint8_t>& bytes) {
  rt::Expected<rt::Tensor> tensor = rt::parseNpy(bytes, "test.npy");
  EXPECT_FALSE(tensor.ok()) << "a malformed file parsed";
  return tensor.ok() ? "" : tensor.message();
}

std::vector<uint8_t> fileBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(Npy, EveryDTypeRoundTripsBitForBit) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const std::filesystem::path& dir = scratch.path;
  const double quietNaN = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> values = {1.5, -0.0, 65504.0, 1e-7, quietNaN, -3.25};
  for (DType dtype : {DType::F16, DType::F32, DType::F64, DType::I64, DType::I1}) {
    std::vector<double> stored = values;
    if (dtype == DType::I64 || dtype == DType::I1)
      stored = {1, 0, 7, -2, 1, 0};
    if (dtype == DType::I1)
      stored = {1, 0, 1, 1, 0, 0};
    rt::Expected<rt::Tensor> original = rt::Tensor::fromDoubles(dtype, {2, 1, 3}, stored);
    ASSERT_TRUE(original.ok()) << original.message();
    std::string path = (dir / "round.npy").string();
    ASSERT_TRUE(rt::writeNpy(path, *original).ok());
    rt::Expected<rt::Tensor> read = rt::readNpy(path);
    ASSERT_TRUE(read.ok()) << read.message();
    EXPECT_TRUE(read->bitwiseEqual(*original)) << rt::dtypeName(dtype);
  }
  // Scalars and empty arrays.
  for (rt::Shape shape : {rt::Shape{}, rt::Shape{0}, rt::Shape{4, 0, 2}}) {
    rt::Expected<rt::Tensor> original = rt::Tensor::allocate(DType::F32, shape);
    ASSERT_TRUE(original.ok());
    std::string path = (dir / "shape.npy").string();
    ASSERT_TRUE(rt::writeNpy(path, *original).ok());
    rt::Expected<rt::Tensor> read = rt::readNpy(path);
    ASSERT_TRUE(read.ok()) << read.message();
    EXPECT_EQ(read->shape(), shape);
  }
}

TEST(Npy, BFloat16IsWrittenAsTheF32ItWidensTo) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const std::filesystem::path& dir = scratch.path;
  std::vector<double> values = {1.0 / 3.0, -1e30, 0.0078125};
  rt::Expected<rt::Tensor> original = rt::Tensor::fromDoubles(DType::BF16, {3}, values);
  ASSERT_TRUE(original.ok());
  std::string path = (dir / "bf16.npy").string();
  ASSERT_TRUE(rt::writeNpy(path, *original).ok());
  rt::Expected<rt::Tensor> read = rt::readNpy(path);
  ASSERT_TRUE(read.ok()) << read.message();
  ASSERT_EQ(read->dtype(), DType::F32);
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_EQ(read->at(i), original->at(i)) << i;
}

TEST(Npy, WritesTheBytesNpSaveWrites) {
  ::ampjit::testing::TemporaryDirectory scratch;
  const std::filesystem::path& dir = scratch.path;
  float data[6] = {0, 1, 2, 3, 4, 5};
  std::vector<double> asDoubles(data, data + 6);
  rt::Expected<rt::Tensor> tensor = rt::Tensor::fromDoubles(DType::F32, {2, 3}, asDoubles);
  ASSERT_TRUE(tensor.ok());
  ASSERT_TRUE(rt::writeNpy((dir / "a.npy").string(), *tensor).ok());
  // np.save(f, np.arange(6, dtype=np.float32).reshape(2, 3)) writes exactly this.
  EXPECT_EQ(fileBytes(dir / "a.npy"), npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                               data, sizeof data));
  rt::Expected<rt::Tensor> vector = rt::Tensor::fromDoubles(DType::I64, {5}, std::vector<double>{1, 2, 3, 4, 5});
  ASSERT_TRUE(vector.ok());
  ASSERT_TRUE(rt::writeNpy((dir / "v.npy").string(), *vector).ok());
  int64_t longs[5] = {1, 2, 3, 4, 5};
  EXPECT_EQ(fileBytes(dir / "v.npy"),
            npyBytes("{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }", longs, sizeof longs));
}

TEST(Npy, ReadsHeadersAsEveryNumPyWritesThem) {
  float data[4] = {1, 2, 3, 4};
  // Reordered keys, double quotes, no trailing comma, format version 2.
  for (auto [header, version] : {
           std::pair<std::string, uint8_t>{"{'shape': (2, 2), 'fortran_order': False, 'descr': '<f4'}", 1},
           {"{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 2)}", 1},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 2L), }", 1},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 2},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 3},
       }) {
    rt::Expected<rt::Tensor> tensor = rt::parseNpy(npyBytes(header, data, sizeof data, version), "ok.npy");
    ASSERT_TRUE(tensor.ok()) << header << ": " << tensor.message();
    EXPECT_EQ(tensor->shape(), (rt::Shape{2, 2})) << header;
    EXPECT_EQ(tensor->toDoubles(), (std::vector<double>{1, 2, 3, 4})) << header;
  }
  // NumPy's default integer on some platforms is int32: labels widen to i64.
  int32_t labels[3] = {-1, 9, 2147483647};
  rt::Expected<rt::Tensor> widened =
      rt::parseNpy(npyBytes("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", labels, sizeof labels),
                   "labels.npy");
  ASSERT_TRUE(widened.ok()) << widened.message();
  EXPECT_EQ(widened->dtype(), DType::I64);
  EXPECT_EQ(widened->toDoubles(), (std::vector<double>{-1, 9, 2147483647}));
  // Booleans are 0 or 1 whatever byte the file holds.
  uint8_t flags[3] = {0, 2, 1};
  rt::Expected<rt::Tensor> booleans =
      rt::parseNpy(npyBytes("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", flags, sizeof flags),
                   "flags.npy");
  ASSERT_TRUE(booleans.ok()) << booleans.message();
  EXPECT_EQ(booleans->toDoubles(), (std::vector<double>{0, 1, 1}));
}

TEST(Npy, EveryMalformedFileIsAnErrorThatSaysWhy) {
  float data[2] = {1, 2};
  auto withHeader = [&](const std::string& header) { return npyBytes(header, data, sizeof data); };
  const std::string good = "'fortran_order': False, 'shape': (2,), }";
  EXPECT_NE(parseError({1, 2, 3}).find("'test.npy' is not a NumPy .npy file (wrong magic)"), std::string::npos);
  std::vector<uint8_t> version4 = withHeader("{'descr': '<f4', " + good);
  version4[6] = 4;
  EXPECT_NE(parseError(version4).find("format version 4"), std::string::npos);
  std::vector<uint8_t> shortHeader = withHeader("{'descr': '<f4', " + good);
  shortHeader.resize(40);
  EXPECT_NE(parseError(shortHeader).find("truncated in its header"), std::string::npos);
  // Each header, with 8 data bytes, and what its error must say.
  const std::pair<std::string, std::string> malformed[] = {
      {"{'descr': '>f4', " + good, "dtype '>f4'"},
      {"{'descr': '<c8', " + good, "dtype '<c8'"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", "Fortran order"},
      {"{'descr': '<f4', 'shape': (2,), }", "lacks 'fortran_order'"},
      {"{'descr': '<f4', 'extra': 1, " + good, "unknown key 'extra'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }",
       "'shape' is not a tuple of non-negative integers"},
      {"{'descr': '<f4', 'fortran_order': Nope, 'shape': (2,), }", "'fortran_order' is not True or False"},
      {"{'descr': '<f4', " + good + " junk", "text after the closing '}'"},
      // Dimensions whose product overflows are refused before any size arithmetic.
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
       "more elements than a tensor may hold"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
       "is truncated: shape [3] of <f4 needs 12 data bytes but the file has 8"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "has 4 bytes after its data"},
  };
  for (const auto& [header, expected] : malformed) {
    std::string message = parseError(withHeader(header));
    EXPECT_NE(message.find(expected), std::string::npos) << header << " gave: " << message;
  }
}

TEST(Npy, AnErrorQuotesTheHeaderOnOneLineInPrintableTextAndNotWhole) {
  float data[2] = {1, 2};
  auto printableLine = [](const std::string& message) {
    return std::all_of(message.begin(), message.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
  };
  // np.save's padding and newline are not quoted.
  std::string padded = parseError(npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x", data, sizeof data));
  EXPECT_NE(padded.find("(header: {'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x)"), std::string::npos)
      << padded;
  EXPECT_TRUE(printableLine(padded)) << padded;
  // What a corrupt header length makes of binary data: escaped and cut short.
  std::string binary = "{'descr': '<f4', \x01\xff";
  binary.append(1000, '\x80');
  std::string cut = parseError(npyBytes(binary, data, sizeof data));
  EXPECT_TRUE(printableLine(cut)) << cut;
  EXPECT_NE(cut.find("(header: {'descr': '<f4', \\x01\\xff\\x80"), std::string::npos) << cut;
  EXPECT_NE(cut.find(" more bytes))"), std::string::npos) << cut;
  EXPECT_LT(cut.size(), 400u) << cut;
  std::string control =
      parseError(npyBytes("{'descr': '<f\x1b', 'fortran_order': False, 'shape': (2,), }", data, sizeof data));
  EXPECT_NE(control.find("has dtype '<f\\x1b'"), std::string::npos) << control;
  EXPECT_TRUE(printableLine(control)) << control;
}

TEST(Npy, FileErrorsNameTheFile) {
  rt::Expected<rt::Tensor> missing = rt::readNpy("/nonexistent/dir/x.npy");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("cannot open '/nonexistent/dir/x.npy'"), std::string::npos);
  rt::Expected<rt::Tensor> tensor = rt::Tensor::allocate(DType::F32, {2});
  ASSERT_TRUE(tensor.ok());
  rt::Status unwritable = rt::writeNpy("/nonexistent/dir/x.npy", *tensor);
  ASSERT_FALSE(unwritable.ok());
  EXPECT_NE(unwritable.message().find("cannot open '/nonexistent/dir/x.npy' for writing"), std::string::npos)
      << unwritable.message();
}

// As a plan file: a reader holding the old array keeps it whole while
// another is written, since writing replaces the file.
TEST(Npy, WritingReplacesTheFileRatherThanRewritingIt) {
  ::ampjit::testing::TemporaryDirectory scratch;
  rt::Expected<rt::Tensor> first = rt::Tensor::fromDoubles(DType::F32, {2}, std::vector<double>{1.5, -2});
  rt::Expected<rt::Tensor> second = rt::Tensor::fromDoubles(DType::F64, {3}, std::vector<double>{4, 5, 6});
  ASSERT_TRUE(first.ok() && second.ok());
  std::string path = scratch.file("x.npy"), opened = scratch.file("opened.npy");
  ASSERT_TRUE(rt::writeNpy(path, *first).ok());
  std::filesystem::create_hard_link(path, opened);
  ASSERT_TRUE(rt::writeNpy(path, *second).ok());
  rt::Expected<rt::Tensor> now = rt::readNpy(path), before = rt::readNpy(opened);
  ASSERT_TRUE(now.ok() && before.ok()) << now.message() << before.message();
  EXPECT_TRUE(now->bitwiseEqual(*second));
  EXPECT_TRUE(before->bitwiseEqual(*first)) << "the written-over file was rewritten in place";
}

} // namespace
