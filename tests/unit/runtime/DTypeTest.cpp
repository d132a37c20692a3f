#include "ampjit/runtime/DType.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace {

using ampjit::runtime::allDTypes;
using ampjit::runtime::DType;
using ampjit::runtime::dtypeName;
using ampjit::runtime::dtypeSize;
using ampjit::runtime::isFloating;
using ampjit::runtime::parseDType;

// The helpers are constexpr so plans can use them in static tables.
static_assert(parseDType("bf16") == DType::BF16);
static_assert(dtypeSize(DType::F16) == 2);

TEST(DType, EveryNameParsesBackToItsDType) {
  std::set<std::string> seenNames;
  for (DType dtype : allDTypes) {
    std::string_view name = dtypeName(dtype);
    EXPECT_TRUE(seenNames.insert(std::string(name)).second) << "duplicate name " << name;
    EXPECT_EQ(parseDType(name), dtype) << name;
  }
}

TEST(DType, NamesMatchMlirElementTypeSpellings) {
  EXPECT_EQ(dtypeName(DType::F32), "f32");
  EXPECT_EQ(dtypeName(DType::F64), "f64");
  EXPECT_EQ(dtypeName(DType::F16), "f16");
  EXPECT_EQ(dtypeName(DType::BF16), "bf16");
  EXPECT_EQ(dtypeName(DType::I64), "i64");
  EXPECT_EQ(dtypeName(DType::I1), "i1");
}

TEST(DType, ParseRejectsUnknownAndAlternativeSpellings) {
  for (std::string_view name : {"", "F32", "float", "half", "bfloat16", "f8", "i32", "bool", " f32", "f32 ", "f3"})
    EXPECT_FALSE(parseDType(name).has_value()) << "'" << name << "'";
}

TEST(DType, SizesInBytes) {
  EXPECT_EQ(dtypeSize(DType::F32), 4u);
  EXPECT_EQ(dtypeSize(DType::F64), 8u);
  EXPECT_EQ(dtypeSize(DType::F16), 2u);
  EXPECT_EQ(dtypeSize(DType::BF16), 2u);
  EXPECT_EQ(dtypeSize(DType::I64), 8u);
  EXPECT_EQ(dtypeSize(DType::I1), 1u) << "booleans are stored one per byte";
}

TEST(DType, OnlyFloatTypesAreFloating) {
  EXPECT_TRUE(isFloating(DType::F32));
  EXPECT_TRUE(isFloating(DType::F64));
  EXPECT_TRUE(isFloating(DType::F16));
  EXPECT_TRUE(isFloating(DType::BF16));
  EXPECT_FALSE(isFloating(DType::I64));
  EXPECT_FALSE(isFloating(DType::I1));
}

} // namespace
