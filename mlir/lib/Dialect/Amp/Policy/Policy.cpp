//===- Policy.cpp - AMP op lists from YAML ---------------------------------===//
//
// yaml-cpp reports malformed input by throwing, so this file is built with
// exceptions (unlike the MLIR libraries). The parser below also throws its own
// PolicyFailure to keep the validation code linear; every public entry point
// catches both (and anything else) and returns a located PolicyError.
//
// The format is described in policies/README.md; keep the two in step.
//
//===----------------------------------------------------------------------===//

#include "ampjit/Dialect/Amp/Policy/Policy.h"

#include "EmbeddedPolicies.h"
#include "ampjit/runtime/Fnv1a.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <set>
#include <utility>

namespace ampjit::amp {

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

namespace {
constexpr Category kCategories[] = {Category::Allow, Category::Deny, Category::Infer,
                                    Category::Clear, Category::Promote};
constexpr LowPrecisionType kLowPrecisionTypes[] = {LowPrecisionType::F16,
                                                   LowPrecisionType::BF16};
} // namespace

std::string_view stringifyCategory(Category category) {
  switch (category) {
  case Category::Allow:
    return "allow";
  case Category::Deny:
    return "deny";
  case Category::Infer:
    return "infer";
  case Category::Clear:
    return "clear";
  case Category::Promote:
    return "promote";
  }
  return "?";
}

std::optional<Category> parseCategory(std::string_view name) {
  for (Category category : kCategories)
    if (stringifyCategory(category) == name)
      return category;
  return std::nullopt;
}

std::string_view stringifyLowPrecisionType(LowPrecisionType type) {
  switch (type) {
  case LowPrecisionType::F16:
    return "f16";
  case LowPrecisionType::BF16:
    return "bf16";
  }
  return "?";
}

std::optional<LowPrecisionType> parseLowPrecisionType(std::string_view name) {
  for (LowPrecisionType type : kLowPrecisionTypes)
    if (stringifyLowPrecisionType(type) == name)
      return type;
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Target, PolicySource, PolicyError
//===----------------------------------------------------------------------===//

std::optional<Target> Target::parse(std::string_view name) {
  if (name == "cpu")
    return Target{.isCpu = true, .smVersion = 0};
  constexpr std::string_view prefix = "sm_";
  if (!name.starts_with(prefix))
    return std::nullopt;
  std::string_view digits = name.substr(prefix.size());
  // A leading zero would make "sm_080" and "sm_80" two spellings of one target.
  if (digits.size() < 2 || digits.size() > 3 || digits.front() == '0')
    return std::nullopt;
  int version = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), version);
  if (error != std::errc() || end != digits.data() + digits.size())
    return std::nullopt;
  return Target{.isCpu = false, .smVersion = version};
}

std::string Target::str() const {
  return isCpu ? std::string("cpu") : "sm_" + std::to_string(smVersion);
}

bool Target::satisfies(const Target &minimum) const {
  if (isCpu)
    return true;
  if (minimum.isCpu)
    return false;
  return smVersion >= minimum.smVersion;
}

LowPrecisionType Target::preferredLowType() const {
  // bf16 needs Ampere's tensor cores.
  return isCpu || smVersion >= 80 ? LowPrecisionType::BF16 : LowPrecisionType::F16;
}

std::string PolicySource::str() const {
  std::string text = file;
  if (line > 0) {
    text += ":" + std::to_string(line);
    if (column > 0)
      text += ":" + std::to_string(column);
  }
  return text;
}

std::string PolicyError::str() const {
  std::string location = where.str();
  return (location.empty() ? std::string() : location + ": ") + "error: " + message;
}

//===----------------------------------------------------------------------===//
// Attribute conditions and resolution
//===----------------------------------------------------------------------===//

namespace {

/// The IR prints an integer attribute as "2 : i64"; the policy writes "2".
std::string_view withoutTypeSuffix(std::string_view printed) {
  size_t colon = printed.find(" : ");
  return colon == std::string_view::npos ? printed : printed.substr(0, colon);
}

/// Locale-independent (unlike strtod), whole string or nothing.
std::optional<double> parseNumber(std::string_view text) {
  if (text.starts_with('+'))
    text.remove_prefix(1);
  if (text.empty())
    return std::nullopt;
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size())
    return std::nullopt;
  return value;
}

bool equalsIgnoringCase(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  });
}

std::optional<bool> parseBoolean(std::string_view text) {
  if (equalsIgnoringCase(text, "true"))
    return true;
  if (equalsIgnoringCase(text, "false"))
    return false;
  return std::nullopt;
}

} // namespace

bool AttributeCondition::matches(const std::optional<std::string> &printed) const {
  if (!printed)
    return parseBoolean(equals) == false;
  if (*printed == equals)
    return true;
  std::optional<double> actualNumber = parseNumber(withoutTypeSuffix(*printed));
  std::optional<double> expectedNumber = parseNumber(withoutTypeSuffix(equals));
  if (actualNumber && expectedNumber)
    return *actualNumber == *expectedNumber;
  std::optional<bool> actualBoolean = parseBoolean(*printed);
  std::optional<bool> expectedBoolean = parseBoolean(equals);
  return actualBoolean && expectedBoolean && *actualBoolean == *expectedBoolean;
}

Category OpRule::resolve(LowPrecisionType type, const AttributeLookup &attributeOf,
                         const AttributeCondition **matched) const {
  if (matched)
    *matched = nullptr;
  for (const AttributeCondition &condition : conditions) {
    std::optional<std::string> printed =
        attributeOf ? attributeOf(condition.attribute) : std::nullopt;
    if (condition.matches(printed)) {
      if (matched)
        *matched = &condition;
      return condition.category;
    }
  }
  if (auto byType = categoryByType.find(type); byType != categoryByType.end())
    return byType->second;
  return category;
}

//===----------------------------------------------------------------------===//
// The parser
//===----------------------------------------------------------------------===//

namespace {

/// Thrown by the parser only; the public functions return its error.
struct PolicyFailure {
  PolicyError error;
};

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1,
                             previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(previous, current);
  }
  return previous[b.size()];
}

/// The candidate a typo most likely meant, in this order: the op whose name
/// without its dialect is `name` ("matmul"); the nearest within a third of
/// the name's length in edits (at least one); the longest candidate `name`
/// extends ("inferred"). Edits come before extension because a short name is a
/// prefix of many longer ones: "jit.log_oftmax_grad" means
/// "jit.log_softmax_grad", one edit away, not "jit.log". Further than that, a
/// suggestion ("fp8" -> "f16") misleads more than it helps.
template <typename Range>
std::optional<std::string> closestName(std::string_view name, const Range &candidates) {
  std::optional<std::string> nearest, extended;
  size_t nearestDistance = std::max<size_t>(1, name.size() / 3) + 1;
  for (const auto &candidate : candidates) {
    std::string_view candidateView = candidate;
    size_t dot = candidateView.find('.');
    if (dot != std::string_view::npos && candidateView.substr(dot + 1) == name)
      return std::string(candidateView);
    if (candidateView.size() >= 3 && name.starts_with(candidateView) &&
        (!extended || candidateView.size() > extended->size()))
      extended = std::string(candidateView);
    size_t distance = editDistance(name, candidateView);
    if (distance < nearestDistance) {
      nearestDistance = distance;
      nearest = std::string(candidateView);
    }
  }
  return nearest ? nearest : extended;
}

std::string joined(const std::vector<std::string> &names, std::string_view separator = ", ") {
  std::string text;
  for (const std::string &name : names) {
    if (!text.empty())
      text += separator;
    text += name;
  }
  return text;
}

std::vector<std::string> categoryNames() {
  std::vector<std::string> names;
  for (Category category : kCategories)
    names.emplace_back(stringifyCategory(category));
  return names;
}

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

/// What a node is, for "expected X, found Y".
std::string describe(const YAML::Node &node) {
  switch (node.Type()) {
  case YAML::NodeType::Map:
    return "a mapping";
  case YAML::NodeType::Sequence:
    return "a list";
  case YAML::NodeType::Scalar:
    return quoted(node.Scalar());
  default:
    return "nothing";
  }
}

std::string categoriesOf(const OpRule &rule) {
  std::string text(stringifyCategory(rule.category));
  for (const auto &[type, category] : rule.categoryByType)
    text += std::string(" (") + std::string(stringifyLowPrecisionType(type)) + ": " +
            std::string(stringifyCategory(category)) + ")";
  return text;
}

bool hasCategory(const OpRule &rule, Category category) {
  if (rule.category == category)
    return true;
  return std::any_of(rule.categoryByType.begin(), rule.categoryByType.end(),
                     [&](const auto &entry) { return entry.second == category; });
}

/// One key/value pair of a mapping, with the key's node for locations.
struct Field {
  std::string key;
  YAML::Node keyNode;
  YAML::Node value;
};

} // namespace

class PolicyParser {
public:
  PolicyParser(std::string fileName, const std::vector<std::string> &knownOps)
      : fileName_(std::move(fileName)), knownOps_(knownOps.begin(), knownOps.end()) {}

  Policy parseComplete(std::string_view text, bool requireEveryOp);
  Policy parseUser(std::string_view text);

private:
  PolicySource at(const YAML::Node &node) const {
    YAML::Mark mark = node.Mark();
    if (mark.is_null() || mark.line < 0)
      return {fileName_, 0, 0};
    // yaml-cpp counts from 0; editors and compilers count from 1.
    return {fileName_, mark.line + 1, mark.column + 1};
  }

  [[noreturn]] void fail(const YAML::Node &node, std::string message) const {
    throw PolicyFailure{{at(node), std::move(message)}};
  }
  [[noreturn]] void fail(const PolicySource &where, std::string message) const {
    throw PolicyFailure{{where, std::move(message)}};
  }

  /// A null value (`key:` with nothing after it) is located on the next line
  /// by yaml-cpp; the key is where the reader should look.
  const YAML::Node &locatable(const Field &field) const {
    return field.value.IsNull() ? field.keyNode : field.value;
  }

  YAML::Node loadDocument(std::string_view text) const;
  std::vector<Field> fieldsOf(const YAML::Node &map, std::string_view what,
                              std::initializer_list<std::string_view> allowedKeys,
                              std::string_view hint = {}) const;
  void checkVersion(const YAML::Node &root, const std::vector<Field> &fields) const;

  std::string scalarOf(const YAML::Node &node, const YAML::Node &where,
                       std::string_view expected) const;
  std::string opNameOf(const YAML::Node &node, const YAML::Node &where) const;
  Category categoryOf(const YAML::Node &node, const YAML::Node &where) const;
  bool booleanOf(const YAML::Node &node, const YAML::Node &where) const;
  std::vector<YAML::Node> itemsOf(const Field &field, std::string_view expected) const;
  OpRule ruleOf(const std::string &op, const Field &entry) const;
  std::vector<AttributeCondition> conditionsOf(const Field &field) const;

  std::string fileName_;
  std::set<std::string, std::less<>> knownOps_;
};

YAML::Node PolicyParser::loadDocument(std::string_view text) const {
  std::vector<YAML::Node> documents = YAML::LoadAll(std::string(text));
  if (documents.size() > 1)
    fail(documents[1], "a policy file holds one YAML document; this is a second one (after '---')");
  YAML::Node root = documents.empty() ? YAML::Node() : documents.front();
  if (!root.IsMap())
    fail(root.IsNull() ? PolicySource{fileName_, 1, 1} : at(root),
         "expected a policy (a mapping that starts with 'version: " +
             std::to_string(Policy::kFormatVersion) + "'), found " + describe(root));
  return root;
}

std::vector<Field> PolicyParser::fieldsOf(const YAML::Node &map, std::string_view what,
                                          std::initializer_list<std::string_view> allowedKeys,
                                          std::string_view hint) const {
  std::vector<std::string> allowed(allowedKeys.begin(), allowedKeys.end());
  std::vector<Field> fields;
  for (auto it = map.begin(); it != map.end(); ++it) {
    std::string key = scalarOf(it->first, it->first, "a key");
    // yaml-cpp keeps both pairs of a repeated key rather than rejecting it.
    for (const Field &earlier : fields)
      if (earlier.key == key)
        fail(it->first, "key " + quoted(key) + " is given twice in " + std::string(what) +
                            " (lines " + std::to_string(at(earlier.keyNode).line) + " and " +
                            std::to_string(at(it->first).line) + ")");
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string message = "unknown key " + quoted(key) + " in " + std::string(what);
      if (std::optional<std::string> suggestion = closestName(key, allowed))
        message += "; did you mean " + quoted(*suggestion) + "?";
      message += " (valid: " + joined(allowed) + ")";
      if (!hint.empty() && parseCategory(key))
        message += std::string("; ") + std::string(hint);
      fail(it->first, message);
    }
    fields.push_back({key, it->first, it->second});
  }
  return fields;
}

void PolicyParser::checkVersion(const YAML::Node &root, const std::vector<Field> &fields) const {
  auto version = std::find_if(fields.begin(), fields.end(),
                              [](const Field &field) { return field.key == "version"; });
  std::string expected = std::to_string(Policy::kFormatVersion);
  if (version == fields.end())
    fail(root, "missing 'version: " + expected + "' (the policy format version)");
  std::string text = scalarOf(version->value, locatable(*version), "a version number");
  int number = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (error != std::errc() || end != text.data() + text.size())
    fail(version->value, "version must be an integer, found " + quoted(text));
  if (number != Policy::kFormatVersion)
    fail(version->value, "unsupported policy format version " + text + " (this build reads version " +
                             expected + ")");
}

std::string PolicyParser::scalarOf(const YAML::Node &node, const YAML::Node &where,
                                   std::string_view expected) const {
  if (!node.IsScalar())
    fail(where, "expected " + std::string(expected) + ", found " + describe(node));
  return node.Scalar();
}

std::string PolicyParser::opNameOf(const YAML::Node &node, const YAML::Node &where) const {
  std::string name = scalarOf(node, where, "an op name");
  for (const Policy::OpWithoutEntry &exempt : Policy::opsWithoutEntry())
    if (exempt.name == name)
      fail(node, quoted(name) + " " + exempt.reason + " and takes no policy entry");
  if (!knownOps_.contains(name)) {
    std::string message = "unknown op " + quoted(name);
    if (std::optional<std::string> suggestion = closestName(name, knownOps_))
      message += "; did you mean " + quoted(*suggestion) + "?";
    fail(node, message);
  }
  return name;
}

Category PolicyParser::categoryOf(const YAML::Node &node, const YAML::Node &where) const {
  std::string name = scalarOf(node, where, "a category");
  if (std::optional<Category> category = parseCategory(name))
    return *category;
  std::vector<std::string> valid = categoryNames();
  std::string message = "unknown category " + quoted(name);
  if (std::optional<std::string> suggestion = closestName(name, valid))
    message += "; did you mean " + quoted(*suggestion) + "?";
  fail(node, message + " (valid: " + joined(valid) + ")");
}

bool PolicyParser::booleanOf(const YAML::Node &node, const YAML::Node &where) const {
  std::string text = scalarOf(node, where, "true or false");
  if (text == "true")
    return true;
  if (text == "false")
    return false;
  fail(node, "expected true or false, found " + quoted(text));
}

/// The items of a list value; `key:` with nothing after it is an empty list.
std::vector<YAML::Node> PolicyParser::itemsOf(const Field &field, std::string_view expected) const {
  std::vector<YAML::Node> items;
  if (field.value.IsNull())
    return items;
  if (!field.value.IsSequence())
    fail(locatable(field), "expected a list of " + std::string(expected) + " after " +
                               quoted(field.key) + ", found " + describe(field.value) +
                               (field.value.IsScalar() ? " (write [" + field.value.Scalar() + "])"
                                                       : std::string()));
  for (const YAML::Node &item : field.value)
    items.push_back(item);
  return items;
}

std::vector<AttributeCondition> PolicyParser::conditionsOf(const Field &field) const {
  if (!field.value.IsSequence())
    fail(locatable(field), "expected a list of {attribute, equals, category} after 'when', found " +
                               describe(field.value));
  std::vector<AttributeCondition> conditions;
  for (const YAML::Node &item : field.value) {
    if (!item.IsMap())
      fail(item, "expected a condition {attribute: <name>, equals: <value>, category: "
                 "<category>}, found " +
                     describe(item));
    std::vector<Field> parts =
        fieldsOf(item, "a 'when' condition", {"attribute", "equals", "category"});
    std::optional<std::string> attribute, equals;
    std::optional<Category> category;
    for (const Field &part : parts) {
      if (part.key == "attribute")
        attribute = scalarOf(part.value, locatable(part), "an attribute name");
      else if (part.key == "equals")
        equals = scalarOf(part.value, locatable(part), "a value");
      else
        category = categoryOf(part.value, locatable(part));
    }
    if (!attribute)
      fail(item, "condition has no 'attribute'");
    if (!equals)
      fail(item, "condition has no 'equals'");
    if (!category)
      fail(item, "condition has no 'category'");
    conditions.push_back(AttributeCondition{
        .attribute = *attribute, .equals = *equals, .category = *category, .source = at(item)});
  }
  return conditions;
}

OpRule PolicyParser::ruleOf(const std::string &op, const Field &entry) const {
  OpRule rule;
  rule.source = at(entry.keyNode);
  const YAML::Node &value = entry.value;
  if (value.IsNull())
    fail(entry.keyNode, "op " + quoted(op) + " has no category");
  if (value.IsScalar()) {
    rule.category = categoryOf(value, value);
    return rule;
  }
  if (!value.IsMap())
    fail(value, "expected a category or a mapping {category: ..., ...} for " + quoted(op) +
                    ", found " + describe(value));

  std::vector<Field> fields =
      fieldsOf(value, "the entry for " + quoted(op),
               {"category", "f16", "bf16", "when", "min_target", "always_fp32"});
  bool hasCategoryKey = false;
  const Field *alwaysFp32Field = nullptr;
  for (const Field &field : fields) {
    if (field.key == "category") {
      rule.category = categoryOf(field.value, locatable(field));
      hasCategoryKey = true;
    } else if (std::optional<LowPrecisionType> type = parseLowPrecisionType(field.key)) {
      rule.categoryByType[*type] = categoryOf(field.value, locatable(field));
    } else if (field.key == "when") {
      rule.conditions = conditionsOf(field);
    } else if (field.key == "min_target") {
      if (!field.value.IsMap())
        fail(locatable(field), "expected a mapping {f16: <target>, bf16: <target>} after "
                               "'min_target', found " +
                                   describe(field.value));
      for (const Field &minimum :
           fieldsOf(field.value, "'min_target' of " + quoted(op), {"f16", "bf16"})) {
        std::string name = scalarOf(minimum.value, locatable(minimum), "a target");
        std::optional<Target> target = Target::parse(name);
        if (!target)
          fail(minimum.value, "bad target " + quoted(name) +
                                  " (expected 'cpu' or 'sm_<NN>', e.g. 'sm_80')");
        rule.minimumTarget[*parseLowPrecisionType(minimum.key)] = *target;
      }
    } else { // always_fp32
      rule.alwaysFp32 = booleanOf(field.value, locatable(field));
      alwaysFp32Field = &field;
    }
  }
  if (!hasCategoryKey)
    fail(value, "the entry for " + quoted(op) + " has no 'category'");
  // always_fp32 is deny at every level; any other category would contradict it.
  if (rule.alwaysFp32) {
    bool onlyDeny = rule.category == Category::Deny &&
                    std::all_of(rule.categoryByType.begin(), rule.categoryByType.end(),
                                [](const auto &e) { return e.second == Category::Deny; }) &&
                    std::all_of(rule.conditions.begin(), rule.conditions.end(),
                                [](const auto &c) { return c.category == Category::Deny; });
    if (!onlyDeny)
      fail(alwaysFp32Field->keyNode,
           "'always_fp32: true' needs category deny for every type and condition (it runs " +
               quoted(op) + " in fp32 at every level)");
  }
  return rule;
}

Policy PolicyParser::parseComplete(std::string_view text, bool requireEveryOp) {
  YAML::Node root = loadDocument(text);
  std::vector<Field> fields =
      fieldsOf(root, "a policy", {"version", "ops"},
               "add/remove lists by category belong in a user policy (see policies/README.md)");
  checkVersion(root, fields);

  Policy policy;
  policy.name_ = fileName_;
  const Field *opsField = nullptr;
  for (const Field &field : fields) {
    if (field.key != "ops")
      continue;
    opsField = &field;
    if (field.value.IsNull())
      break;
    if (!field.value.IsMap())
      fail(locatable(field),
           "expected a mapping from op names to entries after 'ops', found " + describe(field.value));
    for (auto it = field.value.begin(); it != field.value.end(); ++it) {
      std::string op = opNameOf(it->first, it->first);
      if (const OpRule *earlier = policy.find(op))
        fail(it->first, "op " + quoted(op) + " is listed twice (lines " +
                            std::to_string(earlier->source.line) + " and " +
                            std::to_string(at(it->first).line) + ")");
      policy.rules_.emplace(op, ruleOf(op, Field{op, it->first, it->second}));
    }
  }

  if (requireEveryOp) {
    std::vector<std::string> missing;
    for (const std::string &op : knownOps_) {
      if (!policy.find(op) && Policy::needsEntry(op))
        missing.push_back(op);
    }
    if (!missing.empty())
      fail(opsField ? opsField->keyNode : root,
           "no entry for " + std::to_string(missing.size()) + " registered op" +
               (missing.size() == 1 ? "" : "s") + ": " + joined(missing) +
               " (every op needs a category)");
  }
  return policy;
}

Policy PolicyParser::parseUser(std::string_view text) {
  YAML::Node root = loadDocument(text);
  std::vector<Field> fields = fieldsOf(
      root, "a user policy",
      {"version", "base", "allow", "deny", "infer", "clear", "promote", "ops"});
  checkVersion(root, fields);

  std::string baseName = "default";
  for (const Field &field : fields) {
    if (field.key != "base")
      continue;
    baseName = scalarOf(field.value, locatable(field), "the name of a built-in policy");
    std::vector<std::string> builtins = Policy::builtinNames();
    if (std::find(builtins.begin(), builtins.end(), baseName) == builtins.end())
      fail(field.value,
           "unknown base policy " + quoted(baseName) + " (built-in: " + joined(builtins) + ")");
  }
  PolicyOrError base = Policy::builtin(baseName, std::vector<std::string>(knownOps_.begin(),
                                                                          knownOps_.end()));
  if (auto *error = std::get_if<PolicyError>(&base))
    throw PolicyFailure{*error};
  Policy policy = std::move(std::get<Policy>(base));
  policy.name_ = fileName_ + " (base: " + baseName + ")";

  // Each op may appear once in a user file: two mentions would either repeat
  // or contradict each other, and which one wins would be a rule to learn.
  struct Mention {
    std::string where; // "allow: add"
    PolicySource source;
    bool isRemoval;
  };
  std::map<std::string, Mention, std::less<>> mentions;
  auto mention = [&](const std::string &op, const YAML::Node &node, std::string where,
                     bool isRemoval) {
    PolicySource source = at(node);
    auto [earlier, inserted] = mentions.try_emplace(op, Mention{where, source, isRemoval});
    if (inserted)
      return;
    std::string message = "op " + quoted(op) + " is listed twice: in '" + earlier->second.where +
                          "' (line " + std::to_string(earlier->second.source.line) +
                          ") and in '" + where + "' (line " + std::to_string(source.line) + ")";
    if (earlier->second.isRemoval != isRemoval)
      message += "; 'add' alone moves an op to a category";
    fail(source, message);
  };

  for (const Field &field : fields) {
    if (std::optional<Category> category = parseCategory(field.key)) {
      if (field.value.IsNull())
        continue;
      if (!field.value.IsMap())
        fail(locatable(field), "expected a mapping with 'add' and/or 'remove' lists after " +
                                   quoted(field.key) + ", found " + describe(field.value));
      for (const Field &list :
           fieldsOf(field.value, "the " + quoted(field.key) + " section", {"add", "remove"})) {
        bool isRemoval = list.key == "remove";
        for (const YAML::Node &node : itemsOf(list, "op names")) {
          std::string op = opNameOf(node, node);
          mention(op, node, field.key + ": " + list.key, isRemoval);
          auto existing = policy.rules_.find(op);
          if (isRemoval) {
            if (existing == policy.rules_.end() || !hasCategory(existing->second, *category))
              fail(node, "cannot remove " + quoted(op) + " from " + field.key + ": in " +
                             baseName + " its category is " +
                             (existing == policy.rules_.end() ? std::string("not set")
                                                              : categoriesOf(existing->second)));
            // Only the parts in `category` become promote: removing jit.sum
            // from infer leaves its f16 deny alone.
            OpRule &rule = existing->second;
            auto demote = [&](Category &c) {
              if (c == *category)
                c = Category::Promote;
            };
            demote(rule.category);
            for (auto &entry : rule.categoryByType)
              demote(entry.second);
            for (AttributeCondition &condition : rule.conditions)
              demote(condition.category);
            if (*category == Category::Deny)
              rule.alwaysFp32 = false;
            rule.source = at(node);
          } else {
            // The op takes this category for every type and attribute; what
            // the base says about hardware (min_target) still holds.
            OpRule rule = existing == policy.rules_.end() ? OpRule() : existing->second;
            rule.category = *category;
            rule.categoryByType.clear();
            rule.conditions.clear();
            if (*category != Category::Deny)
              rule.alwaysFp32 = false;
            rule.source = at(node);
            policy.rules_[op] = std::move(rule);
          }
        }
      }
    } else if (field.key == "ops") {
      if (field.value.IsNull())
        continue;
      if (!field.value.IsMap())
        fail(locatable(field), "expected a mapping from op names to entries after 'ops', found " +
                                   describe(field.value));
      for (auto it = field.value.begin(); it != field.value.end(); ++it) {
        std::string op = opNameOf(it->first, it->first);
        mention(op, it->first, "ops", /*isRemoval=*/false);
        policy.rules_[op] = ruleOf(op, Field{op, it->first, it->second});
      }
    }
  }
  return policy;
}

//===----------------------------------------------------------------------===//
// Policy
//===----------------------------------------------------------------------===//

namespace {

/// An error about a whole file (no line). Built member by member: GCC 12
/// warns (-Wmaybe-uninitialized, falsely) about the nested aggregate
/// initialiser `PolicyError{{file, 0, 0}, ...}` converted into the variant.
PolicyError fileError(const std::string &file, std::string message) {
  PolicyError error;
  error.where.file = file;
  error.message = std::move(message);
  return error;
}

/// Runs `parse` and turns every way it can fail into a PolicyError for `file`.
template <typename ParseFn>
PolicyOrError guarded(const std::string &file, ParseFn &&parse) {
  try {
    return parse();
  } catch (const PolicyFailure &failure) {
    return failure.error;
  } catch (const YAML::Exception &exception) {
    PolicySource where{file, 0, 0};
    if (!exception.mark.is_null() && exception.mark.line >= 0)
      where = {file, exception.mark.line + 1, exception.mark.column + 1};
    return PolicyError{where, "malformed YAML: " + exception.msg};
  } catch (const std::exception &exception) {
    return fileError(file, std::string("cannot read the policy: ") + exception.what());
  } catch (...) {
    return fileError(file, "cannot read the policy: unknown error");
  }
}

const detail::EmbeddedPolicy *findEmbedded(std::string_view name) {
  for (const detail::EmbeddedPolicy &policy : detail::embeddedPolicies())
    if (policy.name == name)
      return &policy;
  return nullptr;
}

/// Length-prefixed, so no two different rule sets serialise alike.
void appendField(std::string &out, std::string_view text) {
  out += std::to_string(text.size());
  out += ':';
  out += text;
}

} // namespace

PolicyOrError Policy::parse(std::string_view yamlText, const std::string &fileName,
                            const std::vector<std::string> &knownOps, bool requireEveryOp) {
  return guarded(fileName, [&]() -> PolicyOrError {
    return PolicyParser(fileName, knownOps).parseComplete(yamlText, requireEveryOp);
  });
}

PolicyOrError Policy::builtin(std::string_view name, const std::vector<std::string> &knownOps) {
  const detail::EmbeddedPolicy *embedded = findEmbedded(name);
  if (!embedded)
    return fileError("", "unknown built-in policy " + quoted(name) + " (built-in: " +
                             joined(builtinNames()) + ")");
  PolicyOrError result =
      parse(embedded->text, std::string(embedded->fileName), knownOps, /*requireEveryOp=*/true);
  if (auto *policy = std::get_if<Policy>(&result))
    policy->name_ = std::string(embedded->name);
  return result;
}

std::vector<std::string> Policy::builtinNames() {
  std::vector<std::string> names;
  for (const detail::EmbeddedPolicy &policy : detail::embeddedPolicies())
    names.emplace_back(policy.name);
  return names;
}

std::optional<std::string_view> Policy::builtinText(std::string_view name) {
  if (const detail::EmbeddedPolicy *embedded = findEmbedded(name))
    return embedded->text;
  return std::nullopt;
}

const std::vector<Policy::OpWithoutEntry> &Policy::opsWithoutEntry() {
  static const std::vector<OpWithoutEntry> ops = {
      {"amp.cast", "is inserted by AMP itself"},
      {"jit.type_as", "converts to the type AMP decides for its reference"},
  };
  return ops;
}

bool Policy::needsEntry(std::string_view op) {
  return std::none_of(opsWithoutEntry().begin(), opsWithoutEntry().end(),
                      [&](const OpWithoutEntry &exempt) { return exempt.name == op; });
}

PolicyOrError Policy::loadUserFile(const std::string &path,
                                   const std::vector<std::string> &knownOps) {
  return guarded(path, [&]() -> PolicyOrError {
    std::FILE *file = std::fopen(path.c_str(), "rb");
    if (!file)
      return fileError(path, "cannot open policy file " + quoted(path) + ": " +
                                 std::strerror(errno));
    std::string text;
    char buffer[4096];
    size_t count = 0;
    while ((count = std::fread(buffer, 1, sizeof(buffer), file)) > 0)
      text.append(buffer, count);
    // fopen succeeds on a directory; the read is what fails (EISDIR).
    bool failed = std::ferror(file);
    int readErrno = errno;
    std::fclose(file);
    if (failed)
      return fileError(path, "cannot read policy file " + quoted(path) + ": " +
                                 std::strerror(readErrno));
    return parseUserPolicy(text, path, knownOps);
  });
}

PolicyOrError Policy::parseUserPolicy(std::string_view yamlText, const std::string &fileName,
                                      const std::vector<std::string> &knownOps) {
  return guarded(fileName, [&]() -> PolicyOrError {
    return PolicyParser(fileName, knownOps).parseUser(yamlText);
  });
}

const OpRule *Policy::find(std::string_view opName) const {
  auto it = rules_.find(opName);
  return it == rules_.end() ? nullptr : &it->second;
}

// The canonical form: "ampjit-policy", kFormatVersion, then per rule in op
// name order: name, category, per-type categories (f16 before bf16),
// conditions in order (attribute, equals as written, category), minimum
// targets, always_fp32; every field length-prefixed ("5:allow").
// Sources are left out, so moving an entry or editing a comment keeps the hash.
uint64_t Policy::hash() const {
  std::string canonical;
  appendField(canonical, "ampjit-policy");
  appendField(canonical, std::to_string(kFormatVersion));
  for (const auto &[op, rule] : rules_) {
    appendField(canonical, op);
    appendField(canonical, stringifyCategory(rule.category));
    appendField(canonical, std::to_string(rule.categoryByType.size()));
    for (const auto &[type, category] : rule.categoryByType) {
      appendField(canonical, stringifyLowPrecisionType(type));
      appendField(canonical, stringifyCategory(category));
    }
    appendField(canonical, std::to_string(rule.conditions.size()));
    for (const AttributeCondition &condition : rule.conditions) {
      appendField(canonical, condition.attribute);
      appendField(canonical, condition.equals);
      appendField(canonical, stringifyCategory(condition.category));
    }
    appendField(canonical, std::to_string(rule.minimumTarget.size()));
    for (const auto &[type, target] : rule.minimumTarget) {
      appendField(canonical, stringifyLowPrecisionType(type));
      appendField(canonical, target.str());
    }
    appendField(canonical, rule.alwaysFp32 ? "always_fp32" : "-");
  }
  return runtime::fnv1a64(canonical);
}

} // namespace ampjit::amp
