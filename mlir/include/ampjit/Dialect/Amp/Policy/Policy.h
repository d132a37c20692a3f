//===- Policy.h - AMP op lists: categories per op, from YAML --------------===//
//
// The AMP policy is data, not a switch in a pass (DESIGN principle 1): for
// every op it gives a category, per low-precision type where they differ,
// conditions on the op's attributes, the minimum target that runs the op in
// low precision, and whether it runs in fp32 at every level. Which operands an
// op reads in any precision is part of the op's definition, not of a policy
// (anyPrecisionOperandIndices in mlir/lib/Dialect/Amp/Transforms/AmpConfig.cpp).
//
// This library is plain C++ (it uses yaml-cpp, which throws, so it is built
// with exceptions and catches them at this boundary): nothing here includes
// MLIR, and no exception escapes the functions below.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_DIALECT_AMP_POLICY_POLICY_H
#define AMPJIT_DIALECT_AMP_POLICY_POLICY_H

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ampjit::amp {

/// allow: run in low precision; deny: run in fp32; infer: follow the inputs;
/// clear: data movement and sign-preserving ops, follow the neighbours;
/// promote: the widest input type.
enum class Category { Allow, Deny, Infer, Clear, Promote };

std::string_view stringifyCategory(Category category);
std::optional<Category> parseCategory(std::string_view name);

enum class LowPrecisionType { F16, BF16 };

std::string_view stringifyLowPrecisionType(LowPrecisionType type);
std::optional<LowPrecisionType> parseLowPrecisionType(std::string_view name);

/// What the compiled code runs on: `cpu` (which emulates every low-precision
/// op exactly) or an NVIDIA architecture `sm_<NN>`.
struct Target {
  bool isCpu = true;
  int smVersion = 0; // e.g. 80 for sm_80; unused for cpu

  /// "cpu" or "sm_<NN>" with NN two or three digits and no leading zero
  /// (sm_70, sm_80, sm_90, sm_100); anything else is nullopt.
  static std::optional<Target> parse(std::string_view name);
  std::string str() const;
  /// Whether this target can do everything `minimum` can. The CPU backend
  /// emulates every type exactly, so `cpu` satisfies every minimum; sm_X
  /// satisfies sm_Y iff X >= Y. No GPU satisfies a minimum of `cpu`: a policy
  /// writes `min_target: {f16: cpu}` for an op no GPU runs in that type.
  bool satisfies(const Target &minimum) const;
  /// What dtype=auto means here: bf16 where the target computes it (sm_80
  /// and later; the CPU emulates both), else f16.
  LowPrecisionType preferredLowType() const;
  bool operator==(const Target &) const = default;
};

/// Where a policy entry came from: shown in diagnostics and in the AMP report.
struct PolicySource {
  std::string file;
  int line = 0;   // 1-based; 0 when unknown
  int column = 0; // 1-based; 0 when unknown
  /// "file:line:column".
  std::string str() const;
};

/// `{attribute: <name>, equals: <value>, category: <category>}`: when the op's
/// attribute, printed as the IR prints it (an enum's keyword, a number, true
/// for a present unit attribute), equals `value`, the op takes `category`.
struct AttributeCondition {
  std::string attribute;
  std::string equals;
  Category category = Category::Deny;
  PolicySource source;

  /// Whether an attribute printed as `printed` (nullopt: the op does not carry
  /// it) meets this condition. Equal text always matches; numbers compare by
  /// value ("0.5" matches "5.000000e-01", and a trailing " : <type>" such as
  /// "2 : i64" is ignored); true/false compare case-insensitively; and
  /// `equals: false` also matches an absent attribute (an absent unit
  /// attribute is false).
  bool matches(const std::optional<std::string> &printed) const;
};

/// The rule for one op.
struct OpRule {
  Category category = Category::Deny;
  std::map<LowPrecisionType, Category> categoryByType;   // overrides `category`
  std::vector<AttributeCondition> conditions;            // first match wins over both
  std::map<LowPrecisionType, Target> minimumTarget;      // to run in that type
  bool alwaysFp32 = false; // fp32 at every level, O3 included (scaler, optimizer)
  PolicySource source;

  /// Looks up an attribute of the op being classified, printed as in the IR,
  /// or nullopt when the op does not carry it.
  using AttributeLookup = std::function<std::optional<std::string>(std::string_view)>;

  /// The category for `type`, with attribute conditions applied; `matched`
  /// (if given) receives the condition that decided, if one did.
  Category resolve(LowPrecisionType type, const AttributeLookup &attributeOf,
                   const AttributeCondition **matched = nullptr) const;
};

/// A problem with a policy file, located in that file.
struct PolicyError {
  PolicySource where;
  std::string message;
  /// "file:line:column: error: message" (what compilers print); the line and
  /// column are left out when unknown (an unreadable file), the file too when
  /// there is none (an unknown built-in name).
  std::string str() const;
};

class Policy;
using PolicyOrError = std::variant<Policy, PolicyError>;

class Policy {
public:
  /// Parses a complete policy (the format of policies/default.yaml).
  /// `knownOps` are the registered op names; an entry for any other name is an
  /// error, and so is a known op without an entry when `requireEveryOp`.
  static PolicyOrError parse(std::string_view yamlText, const std::string &fileName,
                             const std::vector<std::string> &knownOps, bool requireEveryOp);

  /// A policy shipped inside the binaries: "default" or "pytorch", parsed
  /// with `requireEveryOp` (its diagnostics name "policies/<name>.yaml").
  static PolicyOrError builtin(std::string_view name, const std::vector<std::string> &knownOps);
  static std::vector<std::string> builtinNames();
  /// The embedded YAML of a built-in, as shipped (nullopt for an unknown name).
  static std::optional<std::string_view> builtinText(std::string_view name);

  /// Ops that no policy classifies and that need no entry: `amp.cast`, which
  /// AMP itself inserts, and `jit.type_as`, whose type is its reference's.
  /// Listing one in a policy is an error that gives the reason.
  struct OpWithoutEntry {
    std::string name;
    std::string reason; ///< completes "'<name>' ... and takes no policy entry"
  };
  static const std::vector<OpWithoutEntry> &opsWithoutEntry();
  static bool needsEntry(std::string_view op);

  /// A user's policy file: `base:` names the built-in it starts from (default
  /// "default"); `allow:`/`deny:`/`infer:`/`clear:`/`promote:` each take
  /// `add:` and `remove:` lists of op names (an added op takes that category,
  /// a removed op must have it and becomes `promote`, i.e. it never lowers
  /// precision itself); `ops:` replaces whole entries. Each op appears at
  /// most once. policies/README.md has the details. A file that cannot be
  /// opened or read is an error naming `path`.
  static PolicyOrError loadUserFile(const std::string &path,
                                    const std::vector<std::string> &knownOps);
  /// The same, from text already in memory.
  static PolicyOrError parseUserPolicy(std::string_view yamlText, const std::string &fileName,
                                       const std::vector<std::string> &knownOps);

  const OpRule *find(std::string_view opName) const;
  const std::map<std::string, OpRule, std::less<>> &rules() const { return rules_; }

  /// "default", "pytorch", the file name given to parse(), or for a user file
  /// "<file> (base: <builtin>)".
  const std::string &name() const { return name_; }
  /// A stable hash of the policy's content and format version, for compile-cache guards:
  /// FNV-1a over a canonical serialisation of every rule. The name and source
  /// locations are not part of it (editing a comment changes no compiled code).
  uint64_t hash() const;

  static constexpr int kFormatVersion = 1;

private:
  std::string name_;
  std::map<std::string, OpRule, std::less<>> rules_;
  friend class PolicyParser;
};

} // namespace ampjit::amp

#endif // AMPJIT_DIALECT_AMP_POLICY_POLICY_H
