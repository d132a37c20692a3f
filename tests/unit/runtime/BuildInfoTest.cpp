#include "ampjit/runtime/BuildInfo.h"

#include <gtest/gtest.h>

namespace {

TEST(BuildInfo, DescriptionNamesTheBackendsThatWereBuilt) {
  std::string description = ampjit::runtime::buildDescription();
  if (ampjit::runtime::cudaBackendBuilt())
    EXPECT_NE(description.find("CUDA backend built"), std::string::npos) << description;
  else
    EXPECT_NE(description.find("CPU only"), std::string::npos) << description;
}

} // namespace
