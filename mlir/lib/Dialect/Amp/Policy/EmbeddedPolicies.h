//===- EmbeddedPolicies.h - the built-in policies' YAML, compiled in ------===//
//
// The built-in policies are the files in policies/, copied into the binaries
// at build time by EmbedPolicies.cmake: tools and the GPU machine must not
// depend on finding the source tree at run time.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_LIB_DIALECT_AMP_POLICY_EMBEDDEDPOLICIES_H
#define AMPJIT_LIB_DIALECT_AMP_POLICY_EMBEDDEDPOLICIES_H

#include <span>
#include <string_view>

namespace ampjit::amp::detail {

struct EmbeddedPolicy {
  std::string_view name;     // "default"
  std::string_view fileName; // "policies/default.yaml", as diagnostics name it
  std::string_view text;     // the file's bytes
};

/// Defined in the generated EmbeddedPolicies.cpp.
std::span<const EmbeddedPolicy> embeddedPolicies();

} // namespace ampjit::amp::detail

#endif // AMPJIT_LIB_DIALECT_AMP_POLICY_EMBEDDEDPOLICIES_H
