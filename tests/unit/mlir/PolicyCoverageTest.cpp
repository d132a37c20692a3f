// DESIGN principle 1: an op's AMP category lives in the policy YAML, and a
// test proves the YAML and the dialects agree. Both built-in policies must
// classify every registered jit and amp op (amp.cast, AMP's own cast, and jit.type_as,
// which takes its reference's type, aside),
// and name no op the dialects do not register (Policy::builtin rejects those).

#include "ampjit/Dialect/Amp/IR/AmpDialect.h"
#include "ampjit/Dialect/Amp/Policy/Policy.h"
#include "ampjit/Dialect/Jit/IR/JitDialect.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

using ampjit::amp::Policy;
using ampjit::amp::PolicyError;

namespace {

std::vector<std::string> registeredJitAndAmpOps() {
  mlir::MLIRContext context;
  context.loadDialect<ampjit::ir::JitDialect, ampjit::ir::amp::AmpDialect>();
  std::vector<std::string> ops;
  for (mlir::RegisteredOperationName op : context.getRegisteredOperations()) {
    llvm::StringRef dialect = op.getDialectNamespace();
    if (dialect == "jit" || dialect == "amp")
      ops.push_back(op.getStringRef().str());
  }
  return ops;
}

bool contains(const std::vector<std::string> &names, const std::string &name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(PolicyCoverage, TheOpsWithoutEntryAreRegistered) {
  // A stale exemption would hide a missing entry.
  std::vector<std::string> ops = registeredJitAndAmpOps();
  ASSERT_TRUE(contains(ops, "jit.matmul"));
  for (const Policy::OpWithoutEntry &op : Policy::opsWithoutEntry())
    EXPECT_TRUE(contains(ops, op.name)) << op.name;
}

TEST(PolicyCoverage, EveryBuiltinClassifiesEveryRegisteredOp) {
  std::vector<std::string> ops = registeredJitAndAmpOps();
  for (const std::string &name : Policy::builtinNames()) {
    ampjit::amp::PolicyOrError result = Policy::builtin(name, ops);
    if (auto *error = std::get_if<PolicyError>(&result)) {
      ADD_FAILURE() << error->str();
      continue;
    }
    const Policy &policy = std::get<Policy>(result);
    for (const std::string &op : ops) {
      if (Policy::needsEntry(op)) {
        EXPECT_NE(policy.find(op), nullptr)
            << "policies/" << name << ".yaml has no entry for " << op;
      }
    }
    EXPECT_EQ(policy.rules().size() + Policy::opsWithoutEntry().size(), ops.size()) << name;
  }
}

} // namespace
