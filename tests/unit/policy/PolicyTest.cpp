// The complete-policy format (policies/default.yaml), its errors, the
// built-ins, rule resolution, targets and the hash.

#include "PolicyTestSupport.h"

#include <algorithm>
#include <set>

using namespace ampjit::amp;
using namespace ampjit::amp::testing;

namespace {

constexpr auto F16 = LowPrecisionType::F16;
constexpr auto BF16 = LowPrecisionType::BF16;

PolicyOrError parseText(std::string_view text, bool requireEveryOp = false) {
  return Policy::parse(text, "test.yaml", syntheticOps(), requireEveryOp);
}

void expectErrorAt(PolicyOrError result, int line, int column, std::string_view message) {
  PolicyError error = expectError(std::move(result));
  EXPECT_EQ(error.where.file, "test.yaml");
  EXPECT_EQ(error.where.line, line) << error.str();
  EXPECT_EQ(error.where.column, column) << error.str();
  EXPECT_EQ(error.message, message);
}

OpRule::AttributeLookup attributes(std::map<std::string, std::string> values) {
  return [values = std::move(values)](std::string_view name) -> std::optional<std::string> {
    auto it = values.find(std::string(name));
    if (it == values.end())
      return std::nullopt;
    return it->second;
  };
}

//===----------------------------------------------------------------------===//
// The format
//===----------------------------------------------------------------------===//

TEST(PolicyFormat, ParsesEveryEntryKey) {
  Policy policy = expectPolicy(parseText(R"(version: 1
ops:
  jit.add: infer
  jit.matmul: {category: allow, min_target: {f16: sm_70, bf16: sm_80}}
  jit.sum:
    category: deny
    bf16: infer
  jit.pow:
    category: deny
    f16: deny
    when:
      - {attribute: exponent, equals: 0.5, category: infer}
      - {attribute: exponent, equals: 1, category: clear}
  amp.all_finite: {category: deny, always_fp32: true}
)"));
  EXPECT_EQ(policy.name(), "test.yaml");
  EXPECT_EQ(policy.rules().size(), 5u);

  const OpRule *add = policy.find("jit.add");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->category, Category::Infer);
  EXPECT_TRUE(add->categoryByType.empty());
  EXPECT_EQ(add->source.str(), "test.yaml:3:3");

  const OpRule *matmul = policy.find("jit.matmul");
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ(matmul->category, Category::Allow);
  EXPECT_EQ(matmul->minimumTarget.at(F16), *Target::parse("sm_70"));
  EXPECT_EQ(matmul->minimumTarget.at(BF16), *Target::parse("sm_80"));

  const OpRule *sum = policy.find("jit.sum");
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(sum->category, Category::Deny);
  EXPECT_EQ(sum->categoryByType.at(BF16), Category::Infer);
  EXPECT_EQ(sum->categoryByType.count(F16), 0u);

  const OpRule *pow = policy.find("jit.pow");
  ASSERT_NE(pow, nullptr);
  ASSERT_EQ(pow->conditions.size(), 2u);
  EXPECT_EQ(pow->conditions[0].attribute, "exponent");
  EXPECT_EQ(pow->conditions[0].equals, "0.5");
  EXPECT_EQ(pow->conditions[0].category, Category::Infer);
  EXPECT_EQ(pow->conditions[1].source.str(), "test.yaml:13:9");

  const OpRule *allFinite = policy.find("amp.all_finite");
  ASSERT_NE(allFinite, nullptr);
  EXPECT_TRUE(allFinite->alwaysFp32);
  EXPECT_FALSE(add->alwaysFp32);

  EXPECT_EQ(policy.find("jit.exp"), nullptr);
}

TEST(PolicyFormat, EmptyOpsAndCommentsAreFine) {
  Policy policy = expectPolicy(parseText("# nothing yet\nversion: 1 # the format\nops:\n"));
  EXPECT_TRUE(policy.rules().empty());
}

//===----------------------------------------------------------------------===//
// Errors: each located at the offending text, 1-based
//===----------------------------------------------------------------------===//

TEST(PolicyErrors, MalformedYamlCarriesYamlCppMessageAndPosition) {
  expectErrorAt(parseText("version: 1\nops: [jit.add, jit.exp\n"), 3, 1,
                "malformed YAML: end of sequence flow not found");
  expectErrorAt(parseText("version: 1\nops:\n  jit.add: a: b\n"), 3, 13,
                "malformed YAML: illegal map value");
}

TEST(PolicyErrors, EmptyTextIsLocatedAtTheStart) {
  expectErrorAt(parseText(""), 1, 1,
                "expected a policy (a mapping that starts with 'version: 1'), found nothing");
  expectErrorAt(parseText("- jit.add\n"), 1, 1,
                "expected a policy (a mapping that starts with 'version: 1'), found a list");
}

TEST(PolicyErrors, SecondDocument) {
  expectErrorAt(parseText("version: 1\nops: {}\n---\nversion: 1\n"), 4, 1,
                "a policy file holds one YAML document; this is a second one (after '---')");
}

TEST(PolicyErrors, VersionIsRequiredAndChecked) {
  expectErrorAt(parseText("ops:\n  jit.add: infer\n"), 1, 1,
                "missing 'version: 1' (the policy format version)");
  expectErrorAt(parseText("version: 2\nops: {}\n"), 1, 10,
                "unsupported policy format version 2 (this build reads version 1)");
  expectErrorAt(parseText("version: one\n"), 1, 10, "version must be an integer, found 'one'");
  expectErrorAt(parseText("version: [1]\n"), 1, 10, "expected a version number, found a list");
}

TEST(PolicyErrors, UnknownTopLevelKey) {
  expectErrorAt(parseText("version: 1\nopz:\n  jit.add: infer\n"), 2, 1,
                "unknown key 'opz' in a policy; did you mean 'ops'? (valid: version, ops)");
  // A user file's section in a complete policy: say where it belongs.
  expectErrorAt(parseText("version: 1\nallow:\n  add: [jit.add]\n"), 2, 1,
                "unknown key 'allow' in a policy (valid: version, ops); add/remove lists by "
                "category belong in a user policy (see policies/README.md)");
}

TEST(PolicyErrors, TopLevelKeyTwice) {
  expectErrorAt(parseText("version: 1\nops: {}\nops: {}\n"), 3, 1,
                "key 'ops' is given twice in a policy (lines 2 and 3)");
}

TEST(PolicyErrors, UnknownEntryKey) {
  expectErrorAt(parseText("version: 1\nops:\n  jit.add: {category: infer, categroy: deny}\n"), 3,
                30,
                "unknown key 'categroy' in the entry for 'jit.add'; did you mean 'category'? "
                "(valid: category, f16, bf16, when, min_target, always_fp32)");
  expectErrorAt(parseText("version: 1\nops:\n  jit.add: {category: infer, fp16: deny}\n"), 3, 30,
                "unknown key 'fp16' in the entry for 'jit.add'; did you mean 'f16'? (valid: "
                "category, f16, bf16, when, min_target, always_fp32)");
  expectErrorAt(
      parseText("version: 1\nops:\n  jit.add:\n    category: infer\n    when:\n"
                "      - {attribute: alpha, equal: 1, category: deny}\n"),
      6, 28,
      "unknown key 'equal' in a 'when' condition; did you mean 'equals'? (valid: attribute, "
      "equals, category)");
  expectErrorAt(parseText("version: 1\nops:\n  jit.matmul: {category: allow, min_target: {fp8: "
                          "sm_90}}\n"),
                3, 46, "unknown key 'fp8' in 'min_target' of 'jit.matmul' (valid: f16, bf16)");
}

TEST(PolicyErrors, EntryKeyTwice) {
  expectErrorAt(parseText("version: 1\nops:\n  jit.add:\n    category: infer\n    category: deny\n"),
                5, 5, "key 'category' is given twice in the entry for 'jit.add' (lines 4 and 5)");
}

TEST(PolicyErrors, UnknownOpSuggestsTheClosestKnownName) {
  expectErrorAt(parseText("version: 1\nops:\n  jit.add: infer\n  jit.matmull: allow\n"), 4, 3,
                "unknown op 'jit.matmull'; did you mean 'jit.matmul'?");
  expectErrorAt(parseText("version: 1\nops:\n  matmul: allow\n"), 3, 3,
                "unknown op 'matmul'; did you mean 'jit.matmul'?");
  expectErrorAt(parseText("version: 1\nops:\n  jit.conv2d: allow\n"), 3, 3,
                "unknown op 'jit.conv2d'");
}

TEST(PolicyErrors, ATypoSuggestsTheNearSpellingNotAShorterNameItExtends) {
  // The candidates come in name order, so "jit.log" is seen first, and the
  // misspelt name starts with it.
  std::vector<std::string> ops = {"jit.log", "jit.log_softmax", "jit.log_softmax_grad"};
  PolicyError error = expectError(
      Policy::parse("version: 1\nops:\n  jit.log_oftmax_grad: deny\n", "test.yaml", ops, false));
  EXPECT_EQ(error.message, "unknown op 'jit.log_oftmax_grad'; did you mean 'jit.log_softmax_grad'?");
  // Nothing is near "jit.log_softmax_grad_of_the_input": the longest name it extends is meant.
  error = expectError(Policy::parse("version: 1\nops:\n  jit.log_softmax_grad_of_the_input: deny\n",
                                    "test.yaml", ops, false));
  EXPECT_EQ(error.message,
            "unknown op 'jit.log_softmax_grad_of_the_input'; did you mean 'jit.log_softmax_grad'?");
}

TEST(PolicyErrors, AmpCastTakesNoEntry) {
  std::vector<std::string> ops = syntheticOps();
  ops.push_back("amp.cast");
  PolicyError error = expectError(
      Policy::parse("version: 1\nops:\n  amp.cast: clear\n", "test.yaml", ops, false));
  EXPECT_EQ(error.where.line, 3);
  EXPECT_EQ(error.where.column, 3);
  EXPECT_EQ(error.message, "'amp.cast' is inserted by AMP itself and takes no policy entry");
  // jit.type_as takes its reference's type: no list could change it.
  ops.push_back("jit.type_as");
  error = expectError(Policy::parse("version: 1\nops:\n  jit.type_as: allow\n", "test.yaml", ops, false));
  EXPECT_EQ(error.message,
            "'jit.type_as' converts to the type AMP decides for its reference and takes no policy entry");
}

TEST(PolicyErrors, UnknownCategoryListsTheValidOnes) {
  expectErrorAt(parseText("version: 1\nops:\n  jit.add: alow\n"), 3, 12,
                "unknown category 'alow'; did you mean 'allow'? (valid: allow, deny, infer, "
                "clear, promote)");
  expectErrorAt(parseText("version: 1\nops:\n  jit.add: {category: fp32}\n"), 3, 23,
                "unknown category 'fp32' (valid: allow, deny, infer, clear, promote)");
  expectErrorAt(parseText("version: 1\nops:\n  jit.sum: {category: deny, bf16: inferred}\n"), 3,
                35,
                "unknown category 'inferred'; did you mean 'infer'? (valid: allow, deny, infer, "
                "clear, promote)");
}

TEST(PolicyErrors, OpListedTwiceNamesBothLines) {
  expectErrorAt(parseText("version: 1\nops:\n  jit.add: infer\n  jit.exp: deny\n  jit.add: clear\n"),
                5, 3, "op 'jit.add' is listed twice (lines 3 and 5)");
}

TEST(PolicyErrors, BadTarget) {
  expectErrorAt(
      parseText("version: 1\nops:\n  jit.matmul: {category: allow, min_target: {f16: sm_7}}\n"), 3,
      51, "bad target 'sm_7' (expected 'cpu' or 'sm_<NN>', e.g. 'sm_80')");
  expectErrorAt(parseText("version: 1\nops:\n  jit.matmul:\n    category: allow\n    min_target: "
                          "sm_80\n"),
                5, 17,
                "expected a mapping {f16: <target>, bf16: <target>} after 'min_target', found "
                "'sm_80'");
}

TEST(PolicyErrors, NonStringWhereANameIsExpected) {
  expectErrorAt(parseText("version: 1\nops:\n  ? [jit.add]\n  : infer\n"), 3, 5,
                "expected an op name, found a list");
  expectErrorAt(parseText("version: 1\nops:\n  jit.add: [infer]\n"), 3, 12,
                "expected a category or a mapping {category: ..., ...} for 'jit.add', found a "
                "list");
  expectErrorAt(parseText("version: 1\nops:\n  jit.matmul: {category: allow, min_target: {f16: "
                          "[sm_70]}}\n"),
                3, 51, "expected a target, found a list");
  expectErrorAt(parseText("version: 1\nops:\n  jit.pow:\n    category: deny\n    when:\n"
                          "      - {attribute: [exponent], equals: 2, category: infer}\n"),
                6, 21, "expected an attribute name, found a list");
  expectErrorAt(parseText("version: 1\nops:\n  jit.pow:\n    category: deny\n    when:\n"
                          "      - {attribute: exponent, equals: , category: infer}\n"),
                6, 31, "expected a value, found nothing");
}

TEST(PolicyErrors, IncompleteEntries) {
  expectErrorAt(parseText("version: 1\nops:\n  jit.add:\n  jit.exp: deny\n"), 3, 3,
                "op 'jit.add' has no category");
  expectErrorAt(parseText("version: 1\nops:\n  jit.sum: {bf16: infer}\n"), 3, 12,
                "the entry for 'jit.sum' has no 'category'");
  expectErrorAt(parseText("version: 1\nops:\n  jit.pow:\n    category: deny\n    when:\n"
                          "      - {attribute: exponent, category: infer}\n"),
                6, 9, "condition has no 'equals'");
  expectErrorAt(parseText("version: 1\nops:\n  jit.pow:\n    category: deny\n    when: "
                          "{attribute: exponent}\n"),
                5, 11,
                "expected a list of {attribute, equals, category} after 'when', found a mapping");
}

TEST(PolicyErrors, AlwaysFp32MustBeABooleanOnADenyOp) {
  expectErrorAt(parseText("version: 1\nops:\n  amp.all_finite: {category: deny, always_fp32: "
                          "yes}\n"),
                3, 49, "expected true or false, found 'yes'");
  expectErrorAt(parseText("version: 1\nops:\n  jit.sum: {category: deny, bf16: infer, "
                          "always_fp32: true}\n"),
                3, 42,
                "'always_fp32: true' needs category deny for every type and condition (it runs "
                "'jit.sum' in fp32 at every level)");
}

// Which operands an op reads in any precision is part of the op definitions
// (AmpConfig.cpp, anyPrecisionOperandIndices), not of a policy: the key that
// once said so is an unknown key like any other.
TEST(PolicyErrors, AnyPrecisionOperandsIsNotAKey) {
  expectErrorAt(parseText("version: 1\nops:\n  amp.all_finite: {category: deny, "
                          "any_precision_operands: [grads]}\n"),
                3, 36,
                "unknown key 'any_precision_operands' in the entry for 'amp.all_finite' (valid: "
                "category, f16, bf16, when, min_target, always_fp32)");
}

TEST(PolicyErrors, EveryKnownOpNeedsAnEntryWhenRequired) {
  expectErrorAt(parseText("version: 1\nops:\n  jit.add: infer\n  jit.exp: deny\n  jit.matmul: "
                          "allow\n  jit.pow: deny\n",
                          /*requireEveryOp=*/true),
                2, 1,
                "no entry for 3 registered ops: amp.all_finite, jit.gelu, jit.sum (every op "
                "needs a category)");
  // amp.cast and jit.type_as need none.
  std::vector<std::string> ops = {"jit.add", "amp.cast", "jit.type_as"};
  expectPolicy(Policy::parse("version: 1\nops:\n  jit.add: infer\n", "test.yaml", ops, true));
}

TEST(PolicyErrors, StrFormatsLikeACompiler) {
  PolicyError error = expectError(parseText("version: 1\nops:\n  jit.add: alow\n"));
  EXPECT_EQ(error.str(), "test.yaml:3:12: error: " + error.message);
  PolicyError noLine;
  noLine.where.file = "file.yaml";
  noLine.message = "cannot open";
  EXPECT_EQ(noLine.str(), "file.yaml: error: cannot open");
  PolicyError noFile;
  noFile.message = "unknown";
  EXPECT_EQ(noFile.str(), "error: unknown");
  EXPECT_EQ((PolicySource{"f.yaml", 4, 0}).str(), "f.yaml:4");
}

//===----------------------------------------------------------------------===//
// Built-ins
//===----------------------------------------------------------------------===//

TEST(BuiltinPolicies, NamesAndTexts) {
  EXPECT_EQ(Policy::builtinNames(), (std::vector<std::string>{"default", "pytorch"}));
  for (const std::string &name : Policy::builtinNames()) {
    std::optional<std::string_view> text = Policy::builtinText(name);
    ASSERT_TRUE(text.has_value()) << name;
    EXPECT_NE(text->find("version: 1"), std::string_view::npos) << name;
  }
  EXPECT_FALSE(Policy::builtinText("apex").has_value());
}

TEST(BuiltinPolicies, BothParseAndCoverTheSameOps) {
  std::vector<std::string> ops = opsListedInDefault();
  ASSERT_GT(ops.size(), 40u);
  for (const std::string &name : Policy::builtinNames()) {
    Policy policy = expectPolicy(Policy::builtin(name, ops));
    EXPECT_EQ(policy.name(), name);
    EXPECT_EQ(policy.rules().size(), ops.size()) << name;
  }
}

TEST(BuiltinPolicies, UnknownNameListsTheBuiltins) {
  PolicyError error = expectError(Policy::builtin("apex", opsListedInDefault()));
  EXPECT_EQ(error.str(), "error: unknown built-in policy 'apex' (built-in: default, pytorch)");
}

TEST(BuiltinPolicies, DiagnosticsNameThePolicyFile) {
  std::vector<std::string> ops = opsListedInDefault();
  // An op the dialects no longer register: the built-in's entry is now wrong.
  ops.erase(std::find(ops.begin(), ops.end(), "jit.add"));
  PolicyError error = expectError(Policy::builtin("default", ops));
  EXPECT_EQ(error.where.file, "policies/default.yaml");
  EXPECT_EQ(error.message.rfind("unknown op 'jit.add'", 0), 0u) << error.message;
  std::string_view text = *Policy::builtinText("default");
  size_t offset = text.find("\n  jit.add:") + 1;
  EXPECT_EQ(error.where.line, 1 + std::count(text.begin(), text.begin() + offset, '\n'));
  EXPECT_EQ(error.where.column, 3);
}

TEST(BuiltinPolicies, RequireAnEntryForEveryRegisteredOp) {
  std::vector<std::string> ops = opsListedInDefault();
  ops.push_back("jit.brand_new");
  for (const std::string &name : Policy::builtinNames()) {
    PolicyError error = expectError(Policy::builtin(name, ops));
    EXPECT_EQ(error.where.file, "policies/" + name + ".yaml");
    EXPECT_EQ(error.message,
              "no entry for 1 registered op: jit.brand_new (every op needs a category)");
  }
}

TEST(BuiltinPolicies, SumIsDenyForF16AndInferForBf16InDefault) {
  Policy policy = expectPolicy(Policy::builtin("default", opsListedInDefault()));
  EXPECT_EQ(resolve(policy, "jit.sum", F16), Category::Deny);
  EXPECT_EQ(resolve(policy, "jit.sum", BF16), Category::Infer);
  EXPECT_EQ(resolve(policy, "jit.mean", F16), Category::Deny);
  EXPECT_EQ(resolve(policy, "jit.mean", BF16), Category::Infer);
}

TEST(BuiltinPolicies, SumIsDenyForBothTypesInPytorch) {
  Policy policy = expectPolicy(Policy::builtin("pytorch", opsListedInDefault()));
  EXPECT_EQ(resolve(policy, "jit.sum", F16), Category::Deny);
  EXPECT_EQ(resolve(policy, "jit.sum", BF16), Category::Deny);
  // mean is on none of PyTorch's lists: it runs in its input type.
  EXPECT_EQ(resolve(policy, "jit.mean", F16), Category::Infer);
  EXPECT_EQ(resolve(policy, "jit.mean", BF16), Category::Infer);
}

TEST(BuiltinPolicies, DesignCategoriesInDefault) {
  Policy policy = expectPolicy(Policy::builtin("default", opsListedInDefault()));
  EXPECT_EQ(resolve(policy, "jit.matmul", F16), Category::Allow);
  for (const char *op : {"jit.exp", "jit.log", "jit.pow", "jit.softmax", "jit.log_softmax",
                         "jit.layer_norm", "jit.mse_loss", "jit.cross_entropy", "jit.nll_loss"})
    EXPECT_EQ(resolve(policy, op, F16), Category::Deny) << op;
  for (const char *op : {"jit.add", "jit.mul", "jit.sub", "jit.div"})
    EXPECT_EQ(resolve(policy, op, BF16), Category::Infer) << op;
  for (const char *op : {"jit.reshape", "jit.transpose", "jit.relu", "jit.neg"})
    EXPECT_EQ(resolve(policy, op, F16), Category::Clear) << op;
  for (const char *op :
       {"jit.sgd_update", "jit.adam_update", "amp.scale_loss", "amp.all_finite",
        "amp.unscale_and_check", "amp.update_scale"}) {
    const OpRule *rule = policy.find(op);
    ASSERT_NE(rule, nullptr) << op;
    EXPECT_EQ(rule->category, Category::Deny) << op;
    EXPECT_TRUE(rule->alwaysFp32) << op;
  }
  const OpRule *matmul = policy.find("jit.matmul");
  EXPECT_EQ(matmul->minimumTarget.at(F16).str(), "sm_70");
  EXPECT_EQ(matmul->minimumTarget.at(BF16).str(), "sm_80");
}

TEST(BuiltinPolicies, PowConditionsInDefaultMatchTheIrsPrinting) {
  Policy policy = expectPolicy(Policy::builtin("default", opsListedInDefault()));
  // F64Attr prints in scientific notation; the policy writes 0.5 and 1.
  EXPECT_EQ(resolve(policy, "jit.pow", F16, attributes({{"exponent", "5.000000e-01"}})),
            Category::Infer);
  EXPECT_EQ(resolve(policy, "jit.pow", F16, attributes({{"exponent", "1.000000e+00"}})),
            Category::Clear);
  EXPECT_EQ(resolve(policy, "jit.pow", F16, attributes({{"exponent", "2.000000e+00"}})),
            Category::Deny);
  Policy pytorch = expectPolicy(Policy::builtin("pytorch", opsListedInDefault()));
  EXPECT_EQ(resolve(pytorch, "jit.pow", F16, attributes({{"exponent", "5.000000e-01"}})),
            Category::Deny);
}

//===----------------------------------------------------------------------===//
// Resolution
//===----------------------------------------------------------------------===//

TEST(OpRuleResolve, ConditionsThenTypeThenCategory) {
  Policy policy = expectPolicy(parseText(R"(version: 1
ops:
  jit.gelu:
    category: infer
    bf16: clear
    when:
      - {attribute: approximate, equals: tanh, category: deny}
      - {attribute: approximate, equals: tanh, category: allow}
      - {attribute: approximate, equals: none, category: promote}
)"));
  const OpRule &rule = *policy.find("jit.gelu");
  const AttributeCondition *matched = nullptr;
  // The first matching condition wins, over the per-type category too.
  EXPECT_EQ(rule.resolve(BF16, attributes({{"approximate", "tanh"}}), &matched), Category::Deny);
  ASSERT_NE(matched, nullptr);
  EXPECT_EQ(matched, &rule.conditions[0]);
  EXPECT_EQ(rule.resolve(F16, attributes({{"approximate", "none"}}), &matched),
            Category::Promote);
  EXPECT_EQ(matched, &rule.conditions[2]);
  // No condition matches: the per-type category, else the category.
  EXPECT_EQ(rule.resolve(BF16, attributes({{"approximate", "erf"}}), &matched), Category::Clear);
  EXPECT_EQ(matched, nullptr);
  EXPECT_EQ(rule.resolve(F16, attributes({}), &matched), Category::Infer);
  EXPECT_EQ(matched, nullptr);
  EXPECT_EQ(rule.resolve(F16, {}), Category::Infer);
}

TEST(OpRuleResolve, NumbersCompareByValue) {
  AttributeCondition half{.attribute = "p", .equals = "0.5", .category = Category::Infer, .source = {}};
  EXPECT_TRUE(half.matches("0.5"));
  EXPECT_TRUE(half.matches("5.0e-01"));
  EXPECT_TRUE(half.matches("5.000000e-01"));
  EXPECT_TRUE(half.matches("+0.50"));
  EXPECT_TRUE(half.matches("5.000000e-01 : f64"));
  EXPECT_FALSE(half.matches("0.25"));
  EXPECT_FALSE(half.matches("0.5x"));
  EXPECT_FALSE(half.matches(std::nullopt));
  AttributeCondition two{.attribute = "n", .equals = "2", .category = Category::Deny, .source = {}};
  EXPECT_TRUE(two.matches("2 : i64"));
  EXPECT_TRUE(two.matches("2.0"));
  EXPECT_FALSE(two.matches("-2"));
  AttributeCondition word{.attribute = "mode", .equals = "tanh", .category = Category::Deny, .source = {}};
  EXPECT_TRUE(word.matches("tanh"));
  EXPECT_FALSE(word.matches("Tanh"));
}

TEST(OpRuleResolve, Booleans) {
  AttributeCondition set{.attribute = "keepdim", .equals = "true", .category = Category::Deny, .source = {}};
  EXPECT_TRUE(set.matches("true"));
  EXPECT_TRUE(set.matches("True"));
  EXPECT_FALSE(set.matches("false"));
  EXPECT_FALSE(set.matches("1"));
  EXPECT_FALSE(set.matches(std::nullopt));
  // An absent unit attribute is false.
  AttributeCondition unset{.attribute = "keepdim", .equals = "false", .category = Category::Deny, .source = {}};
  EXPECT_TRUE(unset.matches(std::nullopt));
  EXPECT_TRUE(unset.matches("FALSE"));
  EXPECT_FALSE(unset.matches("true"));
}

//===----------------------------------------------------------------------===//
// Targets
//===----------------------------------------------------------------------===//

TEST(TargetTest, ParseAcceptsCpuAndSmVersions) {
  for (const char *name : {"cpu", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"}) {
    std::optional<Target> target = Target::parse(name);
    ASSERT_TRUE(target.has_value()) << name;
    EXPECT_EQ(target->str(), name);
  }
  EXPECT_TRUE(Target::parse("cpu")->isCpu);
  EXPECT_FALSE(Target::parse("sm_90")->isCpu);
  EXPECT_EQ(Target::parse("sm_90")->smVersion, 90);
  EXPECT_EQ(Target::parse("sm_100")->smVersion, 100);
}

TEST(TargetTest, ParseRejectsEverythingElse) {
  for (const char *name : {"", "gpu", "cuda", "CPU", "SM_80", "sm_", "sm_8", "sm_0", "sm_08",
                           "sm_080", "sm_1000", "sm_80a", "sm_9x", " sm_80", "sm_80 ", "sm-80",
                           "compute_80", "sm_+80"})
    EXPECT_FALSE(Target::parse(name).has_value()) << "'" << name << "'";
}

TEST(TargetTest, Satisfies) {
  Target cpu = *Target::parse("cpu");
  Target sm70 = *Target::parse("sm_70"), sm80 = *Target::parse("sm_80"),
         sm90 = *Target::parse("sm_90"), sm100 = *Target::parse("sm_100");
  // The CPU emulates every type exactly.
  for (const Target &minimum : {cpu, sm70, sm80, sm90, sm100})
    EXPECT_TRUE(cpu.satisfies(minimum)) << minimum.str();
  EXPECT_TRUE(sm80.satisfies(sm80));
  EXPECT_TRUE(sm90.satisfies(sm80));
  EXPECT_TRUE(sm100.satisfies(sm90));
  EXPECT_FALSE(sm70.satisfies(sm80));
  EXPECT_FALSE(sm80.satisfies(sm90));
  // A minimum of cpu: no GPU runs the op in that type.
  for (const Target &gpu : {sm70, sm80, sm90, sm100})
    EXPECT_FALSE(gpu.satisfies(cpu)) << gpu.str();
}

TEST(TargetTest, TheAutoDtypeIsBf16FromAmpereAndOnTheCpu) {
  EXPECT_EQ(Target::parse("cpu")->preferredLowType(), LowPrecisionType::BF16);
  EXPECT_EQ(Target::parse("sm_70")->preferredLowType(), LowPrecisionType::F16);
  EXPECT_EQ(Target::parse("sm_75")->preferredLowType(), LowPrecisionType::F16);
  EXPECT_EQ(Target::parse("sm_80")->preferredLowType(), LowPrecisionType::BF16);
  EXPECT_EQ(Target::parse("sm_90")->preferredLowType(), LowPrecisionType::BF16);
  EXPECT_EQ(Target::parse("sm_100")->preferredLowType(), LowPrecisionType::BF16);
}

TEST(TargetTest, CpuMinimumInAPolicy) {
  Policy policy = expectPolicy(
      parseText("version: 1\nops:\n  jit.exp: {category: allow, min_target: {bf16: cpu}}\n"));
  const Target &minimum = policy.find("jit.exp")->minimumTarget.at(BF16);
  EXPECT_TRUE(minimum.isCpu);
  EXPECT_FALSE(Target::parse("sm_90")->satisfies(minimum));
}

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

TEST(Names, CategoriesAndTypesRoundTrip) {
  for (Category category :
       {Category::Allow, Category::Deny, Category::Infer, Category::Clear, Category::Promote})
    EXPECT_EQ(parseCategory(stringifyCategory(category)), category);
  EXPECT_FALSE(parseCategory("Allow").has_value());
  EXPECT_EQ(parseLowPrecisionType("f16"), LowPrecisionType::F16);
  EXPECT_EQ(parseLowPrecisionType("bf16"), LowPrecisionType::BF16);
  EXPECT_FALSE(parseLowPrecisionType("fp16").has_value());
  EXPECT_EQ(stringifyLowPrecisionType(LowPrecisionType::BF16), "bf16");
}

//===----------------------------------------------------------------------===//
// Hash
//===----------------------------------------------------------------------===//

constexpr std::string_view kHashBase = R"(version: 1
ops:
  jit.add: infer
  jit.matmul: {category: allow, min_target: {f16: sm_70, bf16: sm_80}}
  jit.sum: {category: deny, bf16: infer}
  jit.pow:
    category: deny
    when: [{attribute: exponent, equals: 0.5, category: infer}]
  amp.all_finite: {category: deny, always_fp32: true}
)";

uint64_t hashOf(std::string_view text, const std::string &file = "test.yaml") {
  return expectPolicy(Policy::parse(text, file, syntheticOps(), false)).hash();
}

std::string replaced(std::string_view text, std::string_view from, std::string_view to) {
  std::string result(text);
  size_t at = result.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos)
    result.replace(at, from.size(), to);
  return result;
}

TEST(PolicyHash, IsAFixedFunctionOfTheRules) {
  // Pinned: the hash guards compile caches across runs and builds, so it must
  // not depend on addresses or std::hash. Changing the canonical serialisation
  // changes this value; do it on purpose (it invalidates cached plans). The
  // value was checked against an independent implementation of FNV-1a over
  // the serialisation described in Policy.cpp.
  EXPECT_EQ(hashOf(kHashBase), 0x3b120292dbdda6b2ull);
  EXPECT_EQ(hashOf(kHashBase), hashOf(kHashBase));
}

TEST(PolicyHash, IgnoresLayoutCommentsOrderAndFileName) {
  std::string_view relaidOut = R"(# same rules, other layout
version: 1
ops:
  amp.all_finite:
    always_fp32: true
    category: deny
  jit.pow: {when: [{category: infer, attribute: exponent, equals: 0.5}], category: deny}
  jit.sum: {bf16: infer, category: deny}
  jit.matmul: {min_target: {bf16: sm_80, f16: sm_70}, category: allow}
  jit.add: infer   # comment
)";
  EXPECT_EQ(hashOf(relaidOut), hashOf(kHashBase));
  EXPECT_EQ(hashOf(kHashBase, "other.yaml"), hashOf(kHashBase));
}

TEST(PolicyHash, ChangesWhenAnyRuleChanges) {
  uint64_t base = hashOf(kHashBase);
  const std::pair<std::string_view, std::string_view> edits[] = {
      {"jit.add: infer", "jit.add: clear"},
      {"jit.add: infer", "jit.add: {category: infer, f16: infer}"},
      {"jit.add: infer", "jit.add: {category: infer, min_target: {f16: sm_70}}"},
      {"jit.add: infer\n", "jit.add: infer\n  jit.exp: deny\n"},
      {"f16: sm_70", "f16: sm_75"},
      {"f16: sm_70, ", ""},
      {"bf16: infer", "bf16: clear"},
      {"bf16: infer", "f16: infer"},
      {"attribute: exponent", "attribute: power"},
      {"equals: 0.5", "equals: 2"},
      {"category: infer}]", "category: clear}]"},
      {"always_fp32: true", "always_fp32: false"},
      {"category: infer}]", "category: infer}, {attribute: exponent, equals: 1, category: clear}]"},
  };
  std::set<uint64_t> seen = {base};
  for (const auto &[from, to] : edits) {
    uint64_t edited = hashOf(replaced(kHashBase, from, to));
    EXPECT_NE(edited, base) << from << " -> " << to;
    EXPECT_TRUE(seen.insert(edited).second) << "collision for " << from << " -> " << to;
  }
}

TEST(PolicyHash, BuiltinsDiffer) {
  std::vector<std::string> ops = opsListedInDefault();
  EXPECT_NE(expectPolicy(Policy::builtin("default", ops)).hash(),
            expectPolicy(Policy::builtin("pytorch", ops)).hash());
}

} // namespace
