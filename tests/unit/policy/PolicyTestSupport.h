//===- PolicyTestSupport.h - shared helpers of the policy tests -----------===//

#ifndef AMPJIT_TESTS_UNIT_POLICY_POLICYTESTSUPPORT_H
#define AMPJIT_TESTS_UNIT_POLICY_POLICYTESTSUPPORT_H

#include "ampjit/Dialect/Amp/Policy/Policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ampjit::amp::testing {

/// The ops the synthetic policies of these tests may name.
inline const std::vector<std::string> &syntheticOps() {
  static const std::vector<std::string> ops = {"jit.add",    "jit.exp",  "jit.matmul",
                                               "jit.pow",    "jit.sum",  "jit.gelu",
                                               "amp.all_finite"};
  return ops;
}

/// The op names the shipped default policy lists. This executable has no
/// MLIRContext to ask; tests/unit/mlir/PolicyCoverageTest.cpp checks these
/// against the registered ops.
inline std::vector<std::string> opsListedInDefault() {
  std::vector<std::string> ops;
  std::string_view text = *Policy::builtinText("default");
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    // Entries are indented by two spaces under `ops:` and start with a dialect.
    if (!line.starts_with("  ") || line.size() < 3 || line[2] == ' ' || line[2] == '#')
      continue;
    size_t colon = line.find(':');
    std::string_view name = line.substr(2, colon - 2);
    if (colon != std::string_view::npos && name.find('.') != std::string_view::npos)
      ops.emplace_back(name);
  }
  return ops;
}

/// The policy, or a test failure that prints the error.
inline Policy expectPolicy(PolicyOrError result) {
  if (auto *error = std::get_if<PolicyError>(&result)) {
    ADD_FAILURE() << "unexpected policy error: " << error->str();
    return Policy();
  }
  return std::get<Policy>(std::move(result));
}

/// The error, or a test failure when the policy parsed.
inline PolicyError expectError(PolicyOrError result) {
  if (auto *error = std::get_if<PolicyError>(&result))
    return *error;
  ADD_FAILURE() << "expected a policy error, but the policy parsed";
  return PolicyError();
}

inline Category resolve(const Policy &policy, std::string_view op, LowPrecisionType type,
                        const OpRule::AttributeLookup &attributes = {}) {
  const OpRule *rule = policy.find(op);
  EXPECT_NE(rule, nullptr) << "no rule for " << op;
  return rule ? rule->resolve(type, attributes) : Category::Promote;
}

} // namespace ampjit::amp::testing

#endif // AMPJIT_TESTS_UNIT_POLICY_POLICYTESTSUPPORT_H
