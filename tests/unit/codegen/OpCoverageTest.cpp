//===- OpCoverageTest.cpp - every op is defined everywhere (DESIGN principle 1)
//
// An op exists when it has all of: its ODS definition (registered here), a
// category in both shipped policies, a runtime step from the StepBuilder
// (which the CPU backend runs: its dispatch has a case per step kind), and a
// round-trip lit test. The frontend function and VJP rule join this list with
// the eager API.
//
//===----------------------------------------------------------------------===//

#include "ampjit/Dialect/Amp/Policy/Policy.h"
#include "ampjit/InitAmpjit.h"
#include "ampjit/runtime/StepBuilder.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace {

std::vector<std::string> registeredJitAndAmpOps() {
  mlir::DialectRegistry registry;
  ampjit::registerAmpjitDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  std::vector<std::string> names;
  for (mlir::RegisteredOperationName name : context.getRegisteredOperations()) {
    llvm::StringRef text = name.getStringRef();
    if (text.starts_with("jit.") || text.starts_with("amp."))
      names.push_back(text.str());
  }
  return names;
}

std::string readFile(const std::string &path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(OpCoverage, EveryOpHasAPolicyEntryAStepAndARoundTripTest) {
  std::vector<std::string> ops = registeredJitAndAmpOps();
  ASSERT_GT(ops.size(), 40u);
  std::string roundTrips = readFile(AMPJIT_LIT_DIR "/Dialect/Jit/ops.mlir") +
                           readFile(AMPJIT_LIT_DIR "/Dialect/Amp/ops.mlir");
  ASSERT_FALSE(roundTrips.empty());
  for (const char *policyName : {"default", "pytorch"}) {
    ampjit::amp::PolicyOrError policy = ampjit::amp::Policy::builtin(policyName, ops);
    ASSERT_TRUE(std::holds_alternative<ampjit::amp::Policy>(policy))
        << std::get<ampjit::amp::PolicyError>(policy).str();
    for (const std::string &op : ops) {
      bool needsEntry = ampjit::amp::Policy::needsEntry(op);
      EXPECT_EQ(std::get<ampjit::amp::Policy>(policy).find(op) != nullptr, needsEntry)
          << op << " in policy " << policyName;
    }
  }
  for (const std::string &op : ops) {
    EXPECT_TRUE(ampjit::runtime::stepKindOf(op).has_value()) << op << " has no runtime step";
    EXPECT_NE(roundTrips.find(op + " "), std::string::npos) << op << " has no round-trip test";
  }
}

TEST(OpCoverage, TheRuntimeKnowsNoOpTheDialectsDoNotDefine) {
  std::vector<std::string> ops = registeredJitAndAmpOps();
  std::set<std::string> registered(ops.begin(), ops.end());
  for (const ampjit::runtime::OpDescription &description : ampjit::runtime::supportedOps())
    EXPECT_TRUE(registered.count(std::string(description.name)))
        << description.name << " is in the StepBuilder but not registered";
}

} // namespace
