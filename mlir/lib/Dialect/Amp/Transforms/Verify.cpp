//===- Verify.cpp - amp-verify: check the result of AMP rewriting ----------===//
//
// The last step of amp-pipeline, and a pass of its own for hand-written or
// externally rewritten modules. It reports, on the op at fault, every one of:
//
//   * an op whose policy category, resolved for the low-precision type it
//     computes in, is deny, at a level where deny means fp32 (O1, O2, auto);
//     O3 runs everything in low precision, and an op in a user's
//     amp.force_type region (or amp.disabled region, where AMP does not
//     decide), one marked amp.outside_autocast (run in its operands'
//     types under semantics=autocast, as eagerly), a jit.convert (which
//     reads its operand exactly), and, at O1 and auto, a backward op
//     (jit.vjp_of) computing in the type its forward op computes in (the
//     pass's backward rule, PyTorch's autograd: the f16 bias gradient sum of
//     torch's linear), are exempt;
//   * an op the policy marks always_fp32 (scaler and optimizer arithmetic)
//     computing in low precision, at any level;
//   * an amp.cast that is dead, an identity, foldable into the cast it reads
//     (a chain whose first cast widens, see FuseCasts.cpp), or a second cast
//     of the same value to the same type; for an fp32 parameter argument the
//     last is reported as the parameter being cast more than once per step.
//
// "Computes in low precision": one of the op's floating-point operands is f16
// or bf16 (for an op without floating-point operands, such as jit.constant,
// one of its results). An op's result type alone says what it writes, not what
// it computes in: jit.convert from f32 to f16 computes on the f32 value. Not
// counted are the operands an op reads in whatever precision they come (the
// gradients of the optimizer and scaler ops, the optimizer updates' O2
// parameter copy, the loss of amp.scale_loss).
//
//===----------------------------------------------------------------------===//

#include "ampjit/Dialect/Amp/IR/AmpOps.h"
#include "ampjit/Dialect/Amp/Transforms/AmpRewrites.h"
#include "ampjit/Dialect/Amp/Transforms/Passes.h"
#include "ampjit/Dialect/Jit/IR/JitDialect.h"
#include "ampjit/Dialect/Jit/IR/JitOps.h"
#include "ampjit/Dialect/Jit/IR/ShapeInference.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseMap.h"

namespace ampjit::ir::amp {

#define GEN_PASS_DEF_AMPVERIFY
#include "ampjit/Dialect/Amp/Transforms/Passes.h.inc"

using namespace mlir;
using ampjit::amp::Category;
using ampjit::amp::LowPrecisionType;
using ampjit::amp::OpRule;
using ampjit::amp::Policy;

namespace {

std::optional<LowPrecisionType> lowPrecisionTypeOf(Type element) {
  if (element.isF16())
    return LowPrecisionType::F16;
  if (element.isBF16())
    return LowPrecisionType::BF16;
  return std::nullopt;
}

/// Operands whose type says nothing about the precision the op computes in:
/// those it reads in any precision (gradients, O2's parameter copy), and
/// amp.scale_loss's loss, which it multiplies by the scale in fp32 and rounds
/// back to the loss's own type.
SmallVector<unsigned> operandsNotComputedWith(Operation *op) {
  SmallVector<unsigned> indices = anyPrecisionOperandIndices(op);
  if (auto scale = dyn_cast<ScaleLossOp>(op))
    indices.push_back(scale.getLossMutable().getOperandNumber());
  return indices;
}

/// The low-precision type `op` computes in, if any (see the file comment).
std::optional<FloatType> lowPrecisionComputeType(Operation *op) {
  SmallVector<unsigned> skipped = operandsNotComputedWith(op);
  bool anyFloatOperand = false;
  for (OpOperand &operand : op->getOpOperands()) {
    std::optional<FloatType> element = floatElementTypeOf(operand.get().getType());
    if (!element)
      continue;
    anyFloatOperand = true;
    if (!llvm::is_contained(skipped, operand.getOperandNumber()) &&
        lowPrecisionTypeOf(*element))
      return element;
  }
  // The result of an op that reads floats says what it writes, not what it
  // computes in (jit.convert f32 -> f16 computes on the f32 value).
  if (anyFloatOperand)
    return std::nullopt;
  for (Type type : op->getResultTypes())
    if (std::optional<FloatType> element = floatElementTypeOf(type);
        element && lowPrecisionTypeOf(*element))
      return element;
  return std::nullopt;
}

std::string describeSource(const Policy &policy, const ampjit::amp::PolicySource &source) {
  std::string text = "policy '" + policy.name() + "'";
  std::string where = source.str();
  if (!where.empty())
    text += ", entry at " + where;
  return text;
}

class AmpVerifier {
public:
  AmpVerifier(AmpLevel level, const Policy &policy) : level(level), policy(policy) {}

  LogicalResult verifyPrecision(Operation *op);
  LogicalResult verifyCast(CastOp cast);

private:
  /// The fp32 parameter argument `value` is, if it is one.
  std::optional<unsigned> fp32ParameterIndex(Value value) const;
  /// The op a backward op (`jit.vjp_of`) differentiates, in the same
  /// function; null where there is none.
  Operation *forwardOf(Operation *op);
  /// Whether `op` is a backward op computing in `computeType` because its
  /// forward op does, at a level where the pass gives backward ops their
  /// forward op's type.
  bool followsItsForwardOp(Operation *op, FloatType computeType);

  AmpLevel level;
  const Policy &policy;
  llvm::DenseMap<std::pair<Value, Type>, CastOp> firstCastOf;
  llvm::DenseMap<Operation *, llvm::DenseMap<int64_t, Operation *>> forwardOpsByFunction;
};

Operation *AmpVerifier::forwardOf(Operation *op) {
  auto vjpOf = op->getAttrOfType<IntegerAttr>(ampjit::ir::JitDialect::kVjpOfAttrName);
  auto function = op->getParentOfType<FunctionOpInterface>();
  if (!vjpOf || !function)
    return nullptr;
  auto [entry, inserted] = forwardOpsByFunction.try_emplace(function.getOperation());
  if (inserted)
    function->walk([&](Operation *candidate) {
      if (auto id = candidate->getAttrOfType<IntegerAttr>(ampjit::ir::JitDialect::kOpIdAttrName))
        entry->second.try_emplace(id.getInt(), candidate);
    });
  return entry->second.lookup(vjpOf.getInt());
}

bool AmpVerifier::followsItsForwardOp(Operation *op, FloatType computeType) {
  if (level != AmpLevel::O1 && level != AmpLevel::Auto)
    return false;
  Operation *forward = forwardOf(op);
  return forward && lowPrecisionComputeType(forward) == computeType;
}

LogicalResult AmpVerifier::verifyPrecision(Operation *op) {
  const OpRule *rule = policy.find(op->getName().getStringRef());
  std::optional<FloatType> computeType = lowPrecisionComputeType(op);
  if (!rule || !computeType)
    return success();
  LowPrecisionType lowType = *lowPrecisionTypeOf(*computeType);

  if (rule->alwaysFp32)
    return op->emitOpError() << "computes in " << *computeType << ", but " << describeSource(policy, rule->source)
                             << " marks it always_fp32: scaler and optimizer arithmetic runs in "
                                "fp32 at every level (here "
                             << stringifyAmpLevel(level) << ")";

  bool denyMeansFp32 =
      level == AmpLevel::O1 || level == AmpLevel::O2 || level == AmpLevel::Auto;
  // An op eager code runs outside autocast computes in its operands' types
  // under semantics=autocast, whatever its list says.
  // A conversion reads its operand exactly and rounds once to its result
  // type: a low-precision operand (the user's x.half().float()) loses nothing.
  // A backward op deciding op by op took its forward op's type, as autograd
  // runs it: the f16 bias gradient of torch's linear is an f16 sum.
  if (!denyMeansFp32 || forcedComputeType(op) || isAmpDisabled(op) || isOutsideAutocast(op) ||
      isa<ampjit::ir::ConvertOp>(op) || followsItsForwardOp(op, *computeType))
    return success();
  const ampjit::amp::AttributeCondition *condition = nullptr;
  Category category = rule->resolve(lowType, attributeLookupFor(op), &condition);
  if (category != Category::Deny)
    return success();
  InFlightDiagnostic diag = op->emitOpError()
                            << "computes in " << *computeType << ", but its category for "
                            << *computeType << " is deny (";
  if (condition)
    diag << "attribute '" << condition->attribute << "' = " << condition->equals << ", "
         << describeSource(policy, condition->source);
  else
    diag << describeSource(policy, rule->source);
  diag << "): at level " << stringifyAmpLevel(level)
       << " deny ops run in fp32; only O3 or an amp.force_type region runs them in low precision";
  return diag;
}

std::optional<unsigned> AmpVerifier::fp32ParameterIndex(Value value) const {
  auto argument = dyn_cast<BlockArgument>(value);
  if (!argument || !argument.getOwner()->isEntryBlock())
    return std::nullopt;
  auto function = dyn_cast<FunctionOpInterface>(argument.getOwner()->getParentOp());
  if (!function)
    return std::nullopt;
  auto role =
      function.getArgAttrOfType<StringAttr>(argument.getArgNumber(), JitDialect::kRoleAttrName);
  std::optional<FloatType> element = floatElementTypeOf(value.getType());
  if (!role || role.getValue() != "param" || !element || !element->isF32())
    return std::nullopt;
  return argument.getArgNumber();
}

LogicalResult AmpVerifier::verifyCast(CastOp cast) {
  Value input = cast.getInput();
  if (cast->use_empty())
    return cast.emitOpError() << "is dead: nothing reads its result (amp-fuse-casts erases it)";
  if (input.getType() == cast.getType())
    return cast.emitOpError() << "casts " << input.getType()
                              << " to itself (amp-fuse-casts removes identity casts)";
  if (auto producer = input.getDefiningOp<CastOp>()) {
    Type source = getElementTypeOrSelf(producer.getInput().getType());
    Type middle = getElementTypeOrSelf(input.getType());
    if (isExactlyRepresentableIn(source, middle)) {
      InFlightDiagnostic diag = cast.emitOpError()
                                << "reads a cast from " << source << " to " << middle
                                << ", which loses nothing, so the chain is exactly ";
      if (producer.getInput().getType() == cast.getType())
        diag << "the original value";
      else
        diag << "one cast from " << source << " to " << getElementTypeOrSelf(cast.getType());
      diag << " (amp-fuse-casts folds it)";
      diag.attachNote(producer.getLoc()) << "the cast it reads";
      return diag;
    }
  }
  auto [first, inserted] = firstCastOf.try_emplace({input, cast.getType()}, cast);
  if (inserted)
    return success();
  InFlightDiagnostic diag = cast.emitOpError();
  if (std::optional<unsigned> parameter = fp32ParameterIndex(input))
    diag << "casts fp32 parameter argument #" << *parameter << " to " << cast.getType()
         << " a second time: each parameter is cast at most once per type and step "
            "(amp-fuse-casts merges the casts)";
  else
    diag << "duplicates an earlier cast of the same value to " << cast.getType()
         << ": one cast per (value, type) (amp-fuse-casts merges them)";
  diag.attachNote(first->second.getLoc()) << "the earlier cast";
  return diag;
}

struct AmpVerifyPass : impl::AmpVerifyBase<AmpVerifyPass> {
  using AmpVerifyBase::AmpVerifyBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto emitError = [&] { return module.emitError(); };
    // The level is parsed as every AMP pass parses it; the other options do
    // not matter here.
    FailureOr<AmpConfig> config =
        AmpConfig::parse(level, "f16", "paint", "cpu", policy, &getContext(), emitError);
    if (failed(config) || failed(verifyAmp(module, config->level, *config->policy)))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }
};

} // namespace

LogicalResult verifyAmp(ModuleOp module, AmpLevel level, const Policy &policy) {
  AmpVerifier verifier(level, policy);
  bool valid = true;
  module.walk([&](Operation *op) {
    if (auto cast = dyn_cast<CastOp>(op))
      valid &= succeeded(verifier.verifyCast(cast));
    else
      valid &= succeeded(verifier.verifyPrecision(op));
  });
  return success(valid);
}

} // namespace ampjit::ir::amp
