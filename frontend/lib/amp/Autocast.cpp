// Eager autocast and the AMP Policy for jit::trace (jit/amp.h). Both read the
// compiler's policy data through ampjit::amp::Policy, checked against the
// runtime's op list, so eager autocast, `semantics=autocast` and the painting
// passes classify every op from the same YAML.

#include "Dispatch.h"

#include "jit/amp.h"
#include "jit/trace.h"

#include "CudaDevice.h"

#include "ampjit/Dialect/Amp/Policy/Policy.h"
#include "ampjit/runtime/Files.h"
#include "ampjit/runtime/Fnv1a.h"
#include "ampjit/runtime/Plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

namespace jit::detail {
bool policySpecIsFile(std::string_view spec) {
  return spec.find('/') != std::string_view::npos || spec.ends_with(".yaml") || spec.ends_with(".yml");
}
} // namespace jit::detail

namespace jit::amp {

namespace {

using PolicyData = ampjit::amp::Policy;
using ampjit::amp::Category;
using ampjit::amp::LowPrecisionType;

std::vector<std::string> knownOps() {
  std::vector<std::string> names;
  for (const auto& op : ampjit::runtime::supportedOps())
    names.emplace_back(op.name);
  return names;
}

bool isBuiltinName(const std::string& spec) {
  std::vector<std::string> builtins = PolicyData::builtinNames();
  return std::find(builtins.begin(), builtins.end(), spec) != builtins.end();
}

std::shared_ptr<const PolicyData> unwrap(ampjit::amp::PolicyOrError loaded) {
  if (auto* error = std::get_if<ampjit::amp::PolicyError>(&loaded))
    throw Error("AMP policy: " + error->str());
  return std::make_shared<const PolicyData>(std::move(std::get<PolicyData>(loaded)));
}

/// `spec` as the compiler's `policy=` option takes it: a built-in name or a
/// YAML path (the same test as loadPolicy in AmpConfig.cpp, so a name that
/// works in one works in the other). Built-ins are parsed once per process;
/// a user file is read each time, since the user may edit it between runs.
/// `parse()` the first time `key` is asked for, the same policy after: for
/// what cannot change under a process (a built-in's name, custom lists'
/// YAML text; the two never look alike). A failed parse is not kept.
template <typename Parse>
std::shared_ptr<const PolicyData> parsedOnce(const std::string& key, Parse parse) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const PolicyData>> cache;
  std::lock_guard lock(mutex);
  auto& slot = cache[key];
  if (!slot)
    slot = unwrap(parse());
  return slot;
}

std::shared_ptr<const PolicyData> loadPolicy(const std::string& spec) {
  if (isBuiltinName(spec))
    return parsedOnce(spec, [&] { return PolicyData::builtin(spec, knownOps()); });
  if (!detail::policySpecIsFile(spec)) {
    std::string builtins;
    for (const std::string& name : PolicyData::builtinNames())
      builtins += (builtins.empty() ? "" : ", ") + name;
    throw Error("AMP policy: unknown policy '" + spec + "': expected a built-in (" + builtins +
                ") or the path of a .yaml file");
  }
  return unwrap(PolicyData::loadUserFile(spec, knownOps()));
}

std::string yamlList(const std::vector<std::string>& names) {
  std::string text = "[";
  for (size_t i = 0; i < names.size(); ++i)
    text += (i ? ", " : "") + names[i];
  return text + "]";
}

/// The user policy that custom lists make over the built-in `base`, or
/// nullopt without lists. The checks both Policy and autocast make: no op in
/// both lists, and a built-in base (a file holds its own lists).
std::optional<std::string> customListsYaml(const std::string& base, const std::vector<std::string>& allow,
                                           const std::vector<std::string>& deny) {
  if (allow.empty() && deny.empty())
    return std::nullopt;
  for (const std::string& op : allow)
    if (std::find(deny.begin(), deny.end(), op) != deny.end())
      throw Error("AMP policy: '" + op + "' is in both custom_allow and custom_deny");
  if (!isBuiltinName(base))
    throw Error("AMP policy: custom_allow/custom_deny extend a built-in policy, but policy='" + base +
                "' is a file: put the lists in that file (allow: add: / deny: add:)");
  std::string text = "version: 1\nbase: " + base + "\n";
  if (!allow.empty())
    text += "allow:\n  add: " + yamlList(allow) + "\n";
  if (!deny.empty())
    text += "deny:\n  add: " + yamlList(deny) + "\n";
  return text;
}

/// The policy custom lists make, parsed once per distinct text (an eager
/// autocast scope opens every step).
std::shared_ptr<const PolicyData> loadCustomLists(const std::string& yaml) {
  return parsedOnce(yaml, [&] { return PolicyData::parseUserPolicy(yaml, "<custom lists>", knownOps()); });
}

std::optional<LowPrecisionType> lowPrecisionTypeOf(DType dtype) {
  if (dtype == f16)
    return LowPrecisionType::F16;
  if (dtype == bf16)
    return LowPrecisionType::BF16;
  return std::nullopt;
}

/// An attribute as the IR prints it, for the policy's `when` conditions
/// (numbers compare by value there, so any exact spelling will do).
std::optional<std::string> printAttribute(const detail::AttributeMap& attributes, std::string_view name) {
  auto it = attributes.find(name);
  if (it == attributes.end())
    return std::nullopt;
  const auto& value = it->second;
  if (auto* i = std::get_if<int64_t>(&value))
    return std::to_string(*i);
  if (auto* d = std::get_if<double>(&value)) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", *d);
    return std::string(text);
  }
  if (auto* b = std::get_if<bool>(&value))
    return std::string(*b ? "true" : "false");
  if (auto* s = std::get_if<std::string>(&value))
    return *s;
  // Arrays and dense data: no policy condition can name them usefully.
  return std::nullopt;
}

/// Width order for "the widest floating input": f16 and bf16 are each
/// narrower than f32, and neither holds the other, so together they meet at f32.
int widthRank(DType dtype) {
  if (dtype == f64)
    return 3;
  if (dtype == f32)
    return 2;
  return 1;
}

} // namespace

struct autocast::State {
  DType dtype;
  LowPrecisionType lowType;
  std::shared_ptr<const PolicyData> policy;
  /// What a traced step that follows this scope keys on, in words: the
  /// dtype, and the policy by name and content (custom lists change it).
  std::string guard;
};

namespace {
/// The innermost scope's state; null where autocast is off.
thread_local std::shared_ptr<const autocast::State> gCurrent;
} // namespace

autocast::autocast(AutocastOptions options) : previous_(gCurrent), previousDisabled_(detail::ampDisabledByUser()) {
  if (!options.enabled) {
    gCurrent = nullptr;
    detail::setAmpDisabledByUser(true);
    return;
  }
  std::optional<LowPrecisionType> lowType = lowPrecisionTypeOf(options.dtype);
  if (!lowType)
    throw Error("autocast: dtype must be f16 or bf16, got " + std::string(dtype_name(options.dtype)));
  // Load before changing anything, so a bad policy leaves the thread as it was.
  std::optional<std::string> lists = customListsYaml(options.policy, options.custom_allow, options.custom_deny);
  std::shared_ptr<const PolicyData> policy = lists ? loadCustomLists(*lists) : loadPolicy(options.policy);
  std::string guard = "jit::amp::autocast(" + std::string(dtype_name(options.dtype)) + ", policy '" + policy->name() +
                      "' #" + ampjit::runtime::hex64(policy->hash()) + ")";
  auto state = std::make_shared<const State>(State{options.dtype, *lowType, std::move(policy), std::move(guard)});
  gCurrent = std::move(state);
  detail::setAmpDisabledByUser(false);
}

autocast::~autocast() {
  gCurrent = std::move(previous_);
  detail::setAmpDisabledByUser(previousDisabled_);
}

bool autocast::is_enabled() { return gCurrent != nullptr; }

std::optional<DType> autocast::current_dtype() {
  return gCurrent ? std::optional<DType>(gCurrent->dtype) : std::nullopt;
}

} // namespace jit::amp

namespace jit::detail {

std::shared_ptr<const amp::autocast::State> currentAutocastState() { return amp::gCurrent; }

std::string autocastGuard(const amp::autocast::State* state) { return state ? state->guard : std::string(); }

ResumeAutocast::ResumeAutocast(std::shared_ptr<const amp::autocast::State> state) : previous_(amp::gCurrent) {
  amp::gCurrent = std::move(state);
}
ResumeAutocast::~ResumeAutocast() { amp::gCurrent = std::move(previous_); }

std::optional<DType> widestFloatOperandType(const std::vector<Tensor>& operands) {
  bool anyTensor = std::any_of(operands.begin(), operands.end(), [](const Tensor& operand) {
    return operand.defined() && is_floating_point(operand.dtype()) && !operand.impl().wrappedNumber;
  });
  std::optional<DType> widest;
  for (const Tensor& operand : operands) {
    if (!operand.defined() || !is_floating_point(operand.dtype()))
      continue;
    if (anyTensor && operand.impl().wrappedNumber)
      continue;
    DType dtype = operand.dtype();
    if (!widest || amp::widthRank(dtype) > amp::widthRank(*widest))
      widest = dtype;
    else if (amp::widthRank(dtype) == 1 && amp::widthRank(*widest) == 1 && dtype != *widest)
      widest = f32;
  }
  return widest;
}

std::vector<Tensor> autocastOperands(const OpDef& op, std::vector<Tensor> operands, const AttributeMap& attributes) {
  const auto* state = amp::gCurrent.get();
  // jit.convert is the cast autocast inserts, and a user's explicit
  // conversion is kept as written (as PyTorch's autocast leaves Tensor.to
  // and Tensor.type_as).
  if (!state || &op == &ops::convert || &op == &ops::type_as)
    return operands;
  const ampjit::amp::OpRule* rule = state->policy->find(op.name);
  // Every supported op has an entry (Policy::builtin checks it); ops that
  // need none (AMP's own cast) and always_fp32 ops (the scaler and optimizer,
  // whose gradient and parameter-copy operands are read in any precision)
  // run exactly as called.
  if (!rule || rule->alwaysFp32)
    return operands;
  ampjit::amp::Category category = rule->resolve(
      state->lowType, [&](std::string_view name) { return amp::printAttribute(attributes, name); });

  // f64 is never cast (as PyTorch: it is the user's explicit choice of precision).
  auto castable = [](const Tensor& t) { return t.defined() && is_floating_point(t.dtype()) && t.dtype() != f64; };
  std::optional<DType> target;
  if (category == ampjit::amp::Category::Allow) {
    target = state->dtype;
  } else if (category == ampjit::amp::Category::Deny) {
    target = f32;
  } else if (attributes.count("jit.linear_bias") && castable(operands[0]) &&
             std::none_of(operands.begin(), operands.end(), [](const Tensor& t) { return t.defined() && t.dtype() == f64; })) {
    // jit::linear's bias: torch's linear is one autocast op, so the bias
    // joins its product's type rather than widening the result to f32
    // (an f64 bias is the user's choice and promotes as usual).
    target = operands[0].dtype();
  } else {
    // infer, clear, promote: the widest floating operand type.
    target = widestFloatOperandType(operands);
  }
  if (!target)
    return operands;
  for (Tensor& operand : operands) {
    if (!castable(operand) || operand.dtype() == *target)
      continue;
    // From the number itself, not from its rounding to the partner's type.
    const std::optional<double>& number = operand.impl().wrappedNumber;
    operand = number ? wrappedNumber(*number, *target) : operand.to(*target);
  }
  return operands;
}

} // namespace jit::detail

//===----------------------------------------------------------------------===//
// Policy
//===----------------------------------------------------------------------===//

namespace jit::amp {

std::string_view level_name(Level level) {
  switch (level) {
  case Level::O0: return "O0";
  case Level::O1: return "O1";
  case Level::O2: return "O2";
  case Level::O3: return "O3";
  case Level::Auto: return "auto";
  }
  return "?";
}

DType preferred_dtype(Backend backend) {
  std::string target = "cpu";
  if (resolve_backend(backend) == Backend::cuda)
    target = detail::sharedCudaBackend("jit::amp::preferred_dtype")->architecture();
  std::optional<ampjit::amp::Target> parsed = ampjit::amp::Target::parse(target);
  if (!parsed)
    throw Error("jit::amp::preferred_dtype: the device's architecture '" + target + "' is not a target the AMP "
                "policy knows");
  return parsed->preferredLowType() == ampjit::amp::LowPrecisionType::BF16 ? bf16 : f16;
}

std::optional<Level> level_from_name(std::string_view name) {
  for (Level level : kLevels)
    if (level_name(level) == name)
      return level;
  return std::nullopt;
}

namespace {

[[noreturn]] void nonsense(Level level, const std::string& why) {
  throw Error("AMP policy: " + std::string(level_name(level)) + " " + why);
}

} // namespace

std::optional<std::string> Policy::custom_policy_yaml() const {
  return customListsYaml(policy, custom_allow, custom_deny);
}

Policy::Resolved Policy::resolve() const {
  bool lists = !custom_allow.empty() || !custom_deny.empty();
  if (level == O0) {
    if (dtype && *dtype != f32)
      nonsense(level, "runs every op in fp32: dtype=" + std::string(dtype_name(*dtype)) +
                          " contradicts it (use O1-O3 for mixed precision)");
    if (master_weights.value_or(false))
      nonsense(level, "keeps the parameters in fp32 and makes no low-precision copies: master_weights=true "
                      "has nothing to be the master of");
    if (keep_batchnorm_fp32)
      nonsense(level, "runs everything in fp32: keep_batchnorm_fp32 has no meaning");
    if (loss_scale && *loss_scale != LossScale(1.0))
      nonsense(level, "has no low-precision gradients that could underflow: a loss_scale other than 1 "
                      "only changes the gradients' rounding");
    if (lists)
      nonsense(level, "consults no op lists: custom_allow/custom_deny need O1, O2 or auto");
  } else if (dtype && *dtype != f16 && *dtype != bf16) {
    nonsense(level, "needs a low-precision dtype, f16 or bf16, got " + std::string(dtype_name(*dtype)) +
                        " (use O0 for fp32)");
  }
  if (level == O1 || level == Auto) {
    if (master_weights.value_or(false))
      nonsense(level, "keeps parameters in fp32 and casts them per op: there is no low-precision copy for "
                      "master_weights=true to keep masters of (use O2)");
    if (keep_batchnorm_fp32)
      nonsense(level, "decides normalisation precision from the op lists: keep_batchnorm_fp32 is O2's "
                      "property");
  }
  if (level == O2 && keep_batchnorm_fp32 == false)
    nonsense(level, "with keep_batchnorm_fp32=false is not supported: normalisation is on the policy's deny "
                    "list; move it with custom_allow or a policy file instead");
  if (level == O3) {
    if (keep_batchnorm_fp32 == true)
      nonsense(level, "is pure low precision: keep_batchnorm_fp32=true is O2");
    if (lists)
      nonsense(level, "runs every compute op in low precision and consults no op lists: custom_allow/"
                      "custom_deny need O1, O2 or auto");
  }
  if (loss_scale) {
    if (const double* scale = std::get_if<double>(&*loss_scale); scale && !(std::isfinite(*scale) && *scale > 0))
      throw Error("AMP policy: loss_scale must be positive and finite, got " + ampjit::runtime::formatDouble(*scale));
  }
  // Load the policy now, so a bad file or an unknown op in the lists is an
  // error here, with its file:line, and not later inside the compiler.
  if (std::optional<std::string> yaml = custom_policy_yaml())
    loadCustomLists(*yaml);
  else if (level != O0)
    loadPolicy(policy);

  Resolved resolved{};
  resolved.level = level;
  resolved.dtype = level == O0 ? f32 : dtype.value_or(f16);
  // apex: O2 and O3 hold the model in the low type; O1 casts per op.
  resolved.master_weights = master_weights.value_or(level == O2);
  resolved.keep_batchnorm_fp32 = keep_batchnorm_fp32.value_or(level == O2);
  resolved.cast_model_type = level == O2 || level == O3 ? resolved.dtype : f32;
  // bf16 has fp32's exponent range: its gradients do not underflow, so it
  // needs no scaling by default (DESIGN "AMP semantics").
  resolved.loss_scale = loss_scale.value_or(level == O0 || resolved.dtype == bf16 ? LossScale(1.0)
                                                                                  : LossScale(dynamic));
  return resolved;
}

std::string Policy::pipelineOptions() const {
  Resolved resolved = resolve();
  std::string policyOption = policy;
  if (std::optional<std::string> yaml = custom_policy_yaml()) {
    // The compiler takes a policy by name or path; lists become a file named
    // by its content's hash, so equal lists share one file and a cached
    // compile keyed on the option string stays valid. Processes side by side
    // may want the same file while another compiles from it: a whole one is
    // left as it is, and any other is replaced whole.
    std::string name = "ampjit-policy-" + ampjit::runtime::hex64(ampjit::runtime::fnv1a64(*yaml)) + ".yaml";
    std::filesystem::path path = std::filesystem::temp_directory_path() / name;
    if (ampjit::runtime::Expected<std::string> existing = ampjit::runtime::readWholeFile(path);
        !existing.ok() || *existing != *yaml)
      if (ampjit::runtime::Status written = ampjit::runtime::writeFileAtomically(path, *yaml); !written)
        throw Error("AMP policy: cannot write the custom policy file: " + written.message());
    policyOption = path.string();
  }
  std::string options = "level=" + std::string(level_name(resolved.level));
  if (resolved.level != O0)
    options += " dtype=" + std::string(dtype_name(resolved.dtype));
  options += " policy=" + policyOption;
  options += std::string(" master-weights=") + (resolved.master_weights ? "on" : "off");
  return options;
}

} // namespace jit::amp
