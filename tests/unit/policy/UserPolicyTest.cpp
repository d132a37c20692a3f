// User policy files: a built-in base changed by add/remove lists and whole
// entries (policies/README.md), their errors, and reading them from disk.

#include "PolicyTestSupport.h"
#include "TemporaryDirectory.h"

#include <cstdio>
#include <filesystem>
#include <fstream>


using namespace ampjit::amp;
using namespace ampjit::amp::testing;

namespace {

constexpr auto F16 = LowPrecisionType::F16;
constexpr auto BF16 = LowPrecisionType::BF16;

PolicyOrError parseUser(std::string_view text) {
  return Policy::parseUserPolicy(text, "user.yaml", opsListedInDefault());
}

void expectErrorAt(PolicyOrError result, int line, int column, std::string_view message) {
  PolicyError error = expectError(std::move(result));
  EXPECT_EQ(error.where.file, "user.yaml");
  EXPECT_EQ(error.where.line, line) << error.str();
  EXPECT_EQ(error.where.column, column) << error.str();
  EXPECT_EQ(error.message, message);
}

Policy builtin(std::string_view name) {
  return expectPolicy(Policy::builtin(name, opsListedInDefault()));
}

//===----------------------------------------------------------------------===//
// Semantics
//===----------------------------------------------------------------------===//

TEST(UserPolicy, NothingChangedIsTheBase) {
  Policy policy = expectPolicy(parseUser("version: 1\n"));
  EXPECT_EQ(policy.name(), "user.yaml (base: default)");
  EXPECT_EQ(policy.hash(), builtin("default").hash());
  Policy onPytorch = expectPolicy(parseUser("version: 1\nbase: pytorch\n"));
  EXPECT_EQ(onPytorch.name(), "user.yaml (base: pytorch)");
  EXPECT_EQ(onPytorch.hash(), builtin("pytorch").hash());
  EXPECT_EQ(resolve(onPytorch, "jit.sum", BF16), Category::Deny);
}

TEST(UserPolicy, TheReadmeExample) {
  Policy policy = expectPolicy(parseUser(R"(version: 1
base: default            # or pytorch; default when omitted
allow:
  add: [jit.softmax]
deny:
  add: [jit.gelu]
infer:
  remove: [jit.tanh]     # a removed op becomes `promote`: it never lowers precision itself
ops:
  jit.pow: {category: deny, when: [{attribute: exponent, equals: 2, category: infer}]}
)"));
  EXPECT_EQ(resolve(policy, "jit.softmax", F16), Category::Allow);
  EXPECT_EQ(resolve(policy, "jit.gelu", F16), Category::Deny);
  EXPECT_EQ(resolve(policy, "jit.tanh", F16), Category::Promote);
  auto exponent = [](std::string value) {
    return [value](std::string_view name) -> std::optional<std::string> {
      return name == "exponent" ? std::optional<std::string>(value) : std::nullopt;
    };
  };
  EXPECT_EQ(resolve(policy, "jit.pow", F16, exponent("2.000000e+00")), Category::Infer);
  // The whole entry is replaced: default's 0.5 condition is gone.
  EXPECT_EQ(resolve(policy, "jit.pow", F16, exponent("5.000000e-01")), Category::Deny);
  EXPECT_EQ(policy.find("jit.pow")->conditions.size(), 1u);
  // Untouched ops keep the base's rule.
  EXPECT_EQ(resolve(policy, "jit.sum", BF16), Category::Infer);
  EXPECT_NE(policy.hash(), builtin("default").hash());
}

TEST(UserPolicy, AddSetsTheCategoryForEveryTypeAndAttribute) {
  Policy policy = expectPolicy(parseUser(R"(version: 1
infer:
  add: [jit.sum, jit.pow]
)"));
  // default: sum is deny with bf16 infer; pow has attribute conditions.
  EXPECT_EQ(resolve(policy, "jit.sum", F16), Category::Infer);
  EXPECT_EQ(resolve(policy, "jit.sum", BF16), Category::Infer);
  EXPECT_TRUE(policy.find("jit.sum")->categoryByType.empty());
  EXPECT_TRUE(policy.find("jit.pow")->conditions.empty());
  EXPECT_EQ(policy.find("jit.sum")->source.str(), "user.yaml:3:9");
  EXPECT_EQ(policy.find("jit.pow")->source.str(), "user.yaml:3:18");
}

TEST(UserPolicy, AddKeepsHardwareFacts) {
  Policy policy = expectPolicy(parseUser(R"(version: 1
allow:
  add: [jit.sgd_update]
deny:
  add: [jit.matmul, amp.all_finite]
)"));
  const OpRule *sgd = policy.find("jit.sgd_update");
  EXPECT_EQ(sgd->category, Category::Allow);
  // always_fp32 contradicts allow.
  EXPECT_FALSE(sgd->alwaysFp32);
  const OpRule *matmul = policy.find("jit.matmul");
  EXPECT_EQ(matmul->category, Category::Deny);
  EXPECT_EQ(matmul->minimumTarget.at(BF16).str(), "sm_80");
  // Added to deny, an always-fp32 op stays always fp32.
  EXPECT_TRUE(policy.find("amp.all_finite")->alwaysFp32);
}

TEST(UserPolicy, RemoveMakesThatCategoryPromote) {
  Policy policy = expectPolicy(parseUser(R"(version: 1
infer:
  remove: [jit.tanh, jit.sum]
deny:
  remove: [jit.mean, amp.update_scale]
)"));
  EXPECT_EQ(resolve(policy, "jit.tanh", F16), Category::Promote);
  EXPECT_EQ(resolve(policy, "jit.tanh", BF16), Category::Promote);
  // sum: only its bf16 infer goes; its f16 deny stays.
  EXPECT_EQ(resolve(policy, "jit.sum", F16), Category::Deny);
  EXPECT_EQ(resolve(policy, "jit.sum", BF16), Category::Promote);
  // mean: only its f16 deny goes.
  EXPECT_EQ(resolve(policy, "jit.mean", F16), Category::Promote);
  EXPECT_EQ(resolve(policy, "jit.mean", BF16), Category::Infer);
  const OpRule *updateScale = policy.find("amp.update_scale");
  EXPECT_EQ(updateScale->category, Category::Promote);
  EXPECT_FALSE(updateScale->alwaysFp32);
  EXPECT_EQ(updateScale->source.str(), "user.yaml:5:22");
}

TEST(UserPolicy, RemoveAlsoDemotesConditionsOfThatCategory) {
  Policy policy = expectPolicy(parseUser("version: 1\ndeny:\n  remove: [jit.pow]\n"));
  const OpRule *pow = policy.find("jit.pow");
  EXPECT_EQ(pow->category, Category::Promote);
  // default's conditions on pow are infer and clear: untouched.
  ASSERT_EQ(pow->conditions.size(), 2u);
  EXPECT_EQ(pow->conditions[0].category, Category::Infer);
  EXPECT_EQ(pow->conditions[1].category, Category::Clear);
}

TEST(UserPolicy, OpsReplaceWholeEntries) {
  Policy policy = expectPolicy(parseUser(R"(version: 1
base: pytorch
ops:
  jit.sum: {category: deny, bf16: infer}
  jit.matmul: allow
)"));
  EXPECT_EQ(resolve(policy, "jit.sum", BF16), Category::Infer);
  // The replacement has no min_target: the base's is not merged in.
  EXPECT_TRUE(policy.find("jit.matmul")->minimumTarget.empty());
  EXPECT_EQ(policy.find("jit.matmul")->source.str(), "user.yaml:5:3");
}

TEST(UserPolicy, EmptySectionsAreFine) {
  Policy policy = expectPolicy(parseUser("version: 1\nallow:\ndeny:\n  add:\n  remove: []\nops:\n"));
  EXPECT_EQ(policy.hash(), builtin("default").hash());
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(UserPolicyErrors, VersionRequired) {
  expectErrorAt(parseUser("allow:\n  add: [jit.softmax]\n"), 1, 1,
                "missing 'version: 1' (the policy format version)");
  expectErrorAt(parseUser("version: 3\n"), 1, 10,
                "unsupported policy format version 3 (this build reads version 1)");
}

TEST(UserPolicyErrors, UnknownBase) {
  expectErrorAt(parseUser("version: 1\nbase: apex\n"), 2, 7,
                "unknown base policy 'apex' (built-in: default, pytorch)");
}

TEST(UserPolicyErrors, UnknownTopLevelKey) {
  expectErrorAt(parseUser("version: 1\nalow:\n  add: [jit.softmax]\n"), 2, 1,
                "unknown key 'alow' in a user policy; did you mean 'allow'? (valid: version, "
                "base, allow, deny, infer, clear, promote, ops)");
}

TEST(UserPolicyErrors, UnknownSectionKey) {
  expectErrorAt(parseUser("version: 1\nallow:\n  ad: [jit.softmax]\n"), 3, 3,
                "unknown key 'ad' in the 'allow' section; did you mean 'add'? (valid: add, remove)");
}

TEST(UserPolicyErrors, SectionShapes) {
  expectErrorAt(parseUser("version: 1\nallow: [jit.softmax]\n"), 2, 8,
                "expected a mapping with 'add' and/or 'remove' lists after 'allow', found a list");
  expectErrorAt(parseUser("version: 1\nallow:\n  add: jit.softmax\n"), 3, 8,
                "expected a list of op names after 'add', found 'jit.softmax' (write "
                "[jit.softmax])");
}

TEST(UserPolicyErrors, UnknownOpInAList) {
  expectErrorAt(parseUser("version: 1\nallow:\n  add: [jit.softmx]\n"), 3, 9,
                "unknown op 'jit.softmx'; did you mean 'jit.softmax'?");
  expectErrorAt(parseUser("version: 1\ndeny:\n  remove:\n    - jit.exp\n    - gelu\n"), 5, 7,
                "unknown op 'gelu'; did you mean 'jit.gelu'?");
}

TEST(UserPolicyErrors, NonStringInAList) {
  expectErrorAt(parseUser("version: 1\nallow:\n  add: [{jit.softmax: 1}]\n"), 3, 9,
                "expected an op name, found a mapping");
  expectErrorAt(parseUser("version: 1\nallow:\n  add: [jit.softmax, [jit.exp]]\n"), 3, 22,
                "expected an op name, found a list");
}

TEST(UserPolicyErrors, UnknownCategoryInAnOpsEntry) {
  expectErrorAt(parseUser("version: 1\nops:\n  jit.gelu: {category: low}\n"), 3, 24,
                "unknown category 'low' (valid: allow, deny, infer, clear, promote)");
}

TEST(UserPolicyErrors, RemoveOfAnOpNotInThatCategory) {
  expectErrorAt(parseUser("version: 1\ndeny:\n  remove: [jit.exp, jit.tanh]\n"), 3, 21,
                "cannot remove 'jit.tanh' from deny: in default its category is infer");
  expectErrorAt(parseUser("version: 1\nclear:\n  remove: [jit.sum]\n"), 3, 12,
                "cannot remove 'jit.sum' from clear: in default its category is deny (bf16: "
                "infer)");
  expectErrorAt(parseUser("version: 1\nbase: pytorch\nclear:\n  remove: [jit.relu]\n"), 4, 12,
                "cannot remove 'jit.relu' from clear: in pytorch its category is infer");
}

TEST(UserPolicyErrors, OpAddedToTwoCategories) {
  expectErrorAt(parseUser("version: 1\nallow:\n  add: [jit.gelu]\ndeny:\n  add: [jit.exp, "
                          "jit.gelu]\n"),
                5, 18,
                "op 'jit.gelu' is listed twice: in 'allow: add' (line 3) and in 'deny: add' "
                "(line 5)");
}

TEST(UserPolicyErrors, OpRemovedAndAdded) {
  expectErrorAt(parseUser("version: 1\ninfer:\n  remove: [jit.tanh]\ndeny:\n  add: [jit.tanh]\n"),
                5, 9,
                "op 'jit.tanh' is listed twice: in 'infer: remove' (line 3) and in 'deny: add' "
                "(line 5); 'add' alone moves an op to a category");
}

TEST(UserPolicyErrors, OpInAListAndInOps) {
  expectErrorAt(parseUser("version: 1\nallow:\n  add: [jit.gelu]\nops:\n  jit.gelu: deny\n"), 5,
                3, "op 'jit.gelu' is listed twice: in 'allow: add' (line 3) and in 'ops' (line 5)");
}

TEST(UserPolicyErrors, OpTwiceInOneList) {
  expectErrorAt(parseUser("version: 1\nallow:\n  add: [jit.gelu, jit.gelu]\n"), 3, 19,
                "op 'jit.gelu' is listed twice: in 'allow: add' (line 3) and in 'allow: add' "
                "(line 3)");
}

TEST(UserPolicyErrors, MalformedYaml) {
  expectErrorAt(parseUser("version: 1\nallow:\n  add: [jit.gelu\n"), 4, 1,
                "malformed YAML: end of sequence flow not found");
}

TEST(UserPolicyErrors, ABrokenBaseIsReportedInTheBuiltin) {
  std::vector<std::string> ops = opsListedInDefault();
  ops.push_back("jit.brand_new");
  PolicyError error = expectError(Policy::parseUserPolicy("version: 1\n", "user.yaml", ops));
  EXPECT_EQ(error.where.file, "policies/default.yaml");
  EXPECT_EQ(error.message,
            "no entry for 1 registered op: jit.brand_new (every op needs a category)");
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

class UserPolicyFile : public ::testing::Test {
protected:
  std::string write(const std::string &name, std::string_view text) {
    std::string path = scratch.file(name);
    std::ofstream(path) << text;
    return path;
  }

  ::ampjit::testing::TemporaryDirectory scratch;
  const std::filesystem::path &directory = scratch.path;
};

TEST_F(UserPolicyFile, LoadsAndNamesThePath) {
  std::string path = write("mine.yaml", "version: 1\ndeny:\n  add: [jit.gelu]\n");
  Policy policy = expectPolicy(Policy::loadUserFile(path, opsListedInDefault()));
  EXPECT_EQ(policy.name(), path + " (base: default)");
  EXPECT_EQ(resolve(policy, "jit.gelu", F16), Category::Deny);
  EXPECT_EQ(policy.find("jit.gelu")->source.str(), path + ":3:9");
}

TEST_F(UserPolicyFile, ErrorsNameThePath) {
  std::string path = write("bad.yaml", "version: 1\ndeny:\n  add: [jit.gelo]\n");
  PolicyError error = expectError(Policy::loadUserFile(path, opsListedInDefault()));
  EXPECT_EQ(error.str(), path + ":3:9: error: unknown op 'jit.gelo'; did you mean 'jit.gelu'?");
}

TEST_F(UserPolicyFile, MissingFile) {
  std::string path = (directory / "absent.yaml").string();
  PolicyError error = expectError(Policy::loadUserFile(path, opsListedInDefault()));
  EXPECT_EQ(error.where.file, path);
  EXPECT_EQ(error.where.line, 0);
  EXPECT_EQ(error.str(),
            path + ": error: cannot open policy file '" + path + "': No such file or directory");
}

TEST_F(UserPolicyFile, DirectoryIsUnreadable) {
  std::string path = directory.string();
  PolicyError error = expectError(Policy::loadUserFile(path, opsListedInDefault()));
  EXPECT_EQ(error.where.file, path);
  EXPECT_EQ(error.message, "cannot read policy file '" + path + "': Is a directory");
}

} // namespace
