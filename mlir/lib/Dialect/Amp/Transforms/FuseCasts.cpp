//===- FuseCasts.cpp - amp-fuse-casts: fold, share and move amp.cast -------===//
//
// Cleans up after amp-auto-cast (and after a user's own amp.cast ops) without
// changing any result, except for the one rewrite `fold-round-trips` opts into:
//
//   1. An identity cast is its input.
//   2. A chain cast(cast(x : A -> B) : B -> C) becomes the single cast
//      x : A -> C, or x itself when C = A, exactly when every value of A is a
//      value of B (see "Which chains fold" below). With `fold-round-trips` a
//      lossy round trip A -> B -> A (f32 -> f16 -> f32) also becomes x.
//   3. One cast per (value, type): duplicates are merged into one placed right
//      after the value's definition (at the start of the block for a block
//      argument), where it dominates every use. For a function's fp32
//      parameter arguments this is the guarantee DESIGN asks for: each
//      parameter is cast at most once per type per step, however many ops
//      read it.
//   4. Casts move across `clear` ops (data movement and sign-preserving ops,
//      which commute with rounding according to the policy) when that moves
//      fewer bytes: a narrowing cast of a clear op's result moves above the op
//      (cast the small input of a broadcast_to, not its large result), and a
//      widening cast feeding a clear op moves below it (reduce in f16, then
//      widen the small result). A moved cast can then fold or merge (rules
//      1-3), so the pass iterates to a fixed point.
//
// Which chains fold. amp.cast rounds to nearest even: write rnd_T(x) for that
// rounding of the real number x into format T (overflowing to +-inf; NaN stays
// NaN). The chain computes rnd_C(rnd_B(x)), the single cast rnd_C(x).
//   * If every value of A is a value of B (f16 and bf16 in f32, all three in
//     f64), rnd_B(x) = x for every x in A, so the chain is exactly rnd_C(x)
//     whatever C is: f16 -> f32 -> f16 is the identity, and f16 -> f32 -> bf16
//     is exactly the single cast f16 -> bf16 (both round the same f16 value to
//     bf16 once).
//   * Otherwise the first cast rounds, and no chain is exact in general:
//       - narrowing twice (f64 -> f32 -> f16) rounds twice: take m, the
//         midpoint between two neighbouring f16 values whose lower one is
//         even, and x = m + d in f64 with 0 < d below half an f32 ulp of m.
//         rnd_f32(x) = m, which ties to the lower f16 value; rnd_f16(x) is the
//         upper one;
//       - an intermediate type with a smaller range overflows (f32 -> f16 ->
//         bf16: 1e6 becomes inf in f16, but bf16 holds it);
//       - an intermediate type with a shorter significand drops bits that do
//         not come back (f32 -> bf16 -> f16, f16 -> bf16 -> f32);
//       - the round trip A -> B -> A loses what B cannot hold
//         (f32 -> f16 -> f32): only `fold-round-trips` folds it, knowingly.
//   So a chain folds exactly when the first cast widens (or is an identity).
//
// Bytes moved. A move is made only when it strictly lowers the bytes that the
// affected ops read and write: the clear op's floating-point operands and
// result plus the casts around it. A cast that the move makes unnecessary or
// that already exists (the input is already cast to that type, or is itself a
// widening cast from it, which then folds) costs nothing. Each move lowers
// that sum, so moves cannot cycle.
//
//===----------------------------------------------------------------------===//

#include "ampjit/Dialect/Amp/IR/AmpOps.h"
#include "ampjit/Dialect/Amp/Transforms/AmpRewrites.h"
#include "ampjit/Dialect/Amp/Transforms/Passes.h"
#include "ampjit/Dialect/Jit/IR/ShapeInference.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace ampjit::ir::amp {

#define GEN_PASS_DEF_AMPFUSECASTS
#include "ampjit/Dialect/Amp/Transforms/Passes.h.inc"

using namespace mlir;
using ampjit::amp::Category;
using ampjit::amp::LowPrecisionType;
using ampjit::amp::Policy;

namespace {

/// Every move lowers the bytes moved and every fold or merge removes a cast,
/// so the rewrite reaches a fixed point; this bound only guards against a
/// policy whose "clear" op re-creates what the last round removed.
constexpr unsigned kMaxRounds = 64;

Type elementTypeOf(Value value) { return getElementTypeOrSelf(value.getType()); }

std::optional<LowPrecisionType> lowPrecisionTypeOf(Type element) {
  if (element.isF16())
    return LowPrecisionType::F16;
  if (element.isBF16())
    return LowPrecisionType::BF16;
  return std::nullopt;
}


/// The bytes a tensor of `type` occupies when its elements are `element`.
int64_t bytesAs(Type type, Type element) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  return tensor.getNumElements() * int64_t((element.getIntOrFloatBitWidth() + 7) / 8);
}

int64_t bytesOf(Type type) { return bytesAs(type, getElementTypeOrSelf(type)); }

/// A cast reads its input and writes its result.
int64_t castBytes(Type from, Type toElement) { return bytesOf(from) + bytesAs(from, toElement); }

/// The bytes `op` reads and writes in floating point when its `from`
/// elements are computed as `to` instead (`to == from` for the op as it is).
int64_t opBytes(Operation *op, Type from, Type to) {
  int64_t bytes = 0;
  auto add = [&](Type type) {
    if (isFloatTensor(type))
      bytes += bytesAs(type, getElementTypeOrSelf(type) == from ? to : getElementTypeOrSelf(type));
  };
  for (Type type : op->getOperandTypes())
    add(type);
  for (Type type : op->getResultTypes())
    add(type);
  return bytes;
}

class CastFuser {
public:
  CastFuser(const Policy &policy, bool foldRoundTrips)
      : policy(policy), foldRoundTrips(foldRoundTrips) {}

  /// Rules 1 and 2, then erases the casts nothing uses any more.
  bool foldCasts(ModuleOp module);
  /// Rule 3.
  bool mergeDuplicates(ModuleOp module);
  /// Rule 4: at most one move per cast per call.
  bool moveAcrossClearOps(ModuleOp module);

  unsigned castsMoved = 0;

private:
  bool isClearOp(Operation *op, LowPrecisionType lowType) const;
  bool hoistNarrowingCast(CastOp cast);
  bool sinkWideningCast(CastOp cast);
  /// A copy of `clear`, inserted before it, reading `operands` instead of its
  /// own and computing `to` where it computed `from`; null (and nothing
  /// created) when the op does not accept that.
  Operation *cloneInType(Operation *clear, ValueRange operands, Type from, Type to);
  void erase(Operation *op) {
    erased.insert(op);
    op->erase();
  }

  const Policy &policy;
  bool foldRoundTrips;
  /// Ops erased during the current sweep, which may still be on its list.
  llvm::DenseSet<Operation *> erased;
};

bool CastFuser::foldCasts(ModuleOp module) {
  bool changed = false;
  SmallVector<CastOp> casts;
  module.walk([&](CastOp cast) { casts.push_back(cast); });
  for (CastOp cast : casts) {
    Value input = cast.getInput();
    if (input.getType() == cast.getType()) {
      cast.replaceAllUsesWith(input);
      changed = true;
      continue;
    }
    auto producer = input.getDefiningOp<CastOp>();
    if (!producer)
      continue;
    Value source = producer.getInput();
    bool exact = isExactlyRepresentableIn(elementTypeOf(source), elementTypeOf(input));
    if (source.getType() == cast.getType() && (exact || foldRoundTrips)) {
      cast.replaceAllUsesWith(source);
      changed = true;
    } else if (exact) {
      cast.getInputMutable().assign(source);
      changed = true;
    }
  }
  // Erasing a cast can leave its producer unused: sweep until none is.
  bool erasedOne = true;
  while (erasedOne) {
    erasedOne = false;
    SmallVector<CastOp> dead;
    module.walk([&](CastOp cast) {
      if (cast->use_empty())
        dead.push_back(cast);
    });
    for (CastOp cast : dead)
      cast.erase();
    erasedOne = !dead.empty();
    changed |= erasedOne;
  }
  return changed;
}

bool CastFuser::mergeDuplicates(ModuleOp module) {
  llvm::MapVector<std::pair<Value, Type>, SmallVector<CastOp, 2>> castsOf;
  module.walk([&](CastOp cast) { castsOf[{cast.getInput(), cast.getType()}].push_back(cast); });
  bool changed = false;
  // Casts of several arguments of one block keep their relative order there.
  llvm::DenseMap<Block *, Operation *> lastPlacedAtBlockStart;
  for (auto &[key, casts] : castsOf) {
    if (casts.size() < 2)
      continue;
    CastOp kept = casts.front();
    Value input = key.first;
    if (Operation *definition = input.getDefiningOp()) {
      kept->moveAfter(definition);
    } else {
      Block *block = llvm::cast<BlockArgument>(input).getOwner();
      Operation *&last = lastPlacedAtBlockStart[block];
      if (last)
        kept->moveAfter(last);
      else if (&block->front() != kept.getOperation())
        kept->moveBefore(&block->front());
      last = kept;
    }
    for (CastOp duplicate : llvm::drop_begin(casts)) {
      duplicate.replaceAllUsesWith(kept.getResult());
      duplicate.erase();
    }
    changed = true;
  }
  return changed;
}

bool CastFuser::isClearOp(Operation *op, LowPrecisionType lowType) const {
  // A user's amp.disabled / amp.force_type region fixes the op's precision.
  if (isa<CastOp>(op) || isAmpDisabled(op) || forcedComputeType(op) || op->getNumResults() != 1 ||
      op->getNumRegions() != 0)
    return false;
  const ampjit::amp::OpRule *rule = policy.find(op->getName().getStringRef());
  return rule && rule->resolve(lowType, attributeLookupFor(op)) == Category::Clear;
}

Operation *CastFuser::cloneInType(Operation *clear, ValueRange operands, Type from, Type to) {
  OpBuilder builder(clear);
  Operation *copy = builder.clone(*clear);
  copy->setOperands(operands);
  for (OpResult result : copy->getResults())
    if (auto tensor = dyn_cast<RankedTensorType>(result.getType());
        tensor && tensor.getElementType() == from)
      result.setType(tensor.clone(to));
  // An op may reject the new type (a user policy can call anything clear):
  // then it simply does not move. Its complaint is not the user's problem.
  ScopedDiagnosticHandler silence(clear->getContext(), [](Diagnostic &) { return success(); });
  if (failed(mlir::verify(copy, /*verifyRecursively=*/false))) {
    copy->erase();
    return nullptr;
  }
  return copy;
}

/// %y = clear(%x) : S;  %c = cast %y : S -> T   becomes
/// %xc = cast %x : S -> T;  %c = clear(%xc) : T
bool CastFuser::hoistNarrowingCast(CastOp cast) {
  Value result = cast.getInput();
  Type wide = elementTypeOf(result), narrow = elementTypeOf(cast.getResult());
  std::optional<LowPrecisionType> lowType = lowPrecisionTypeOf(narrow);
  Operation *clear = result.getDefiningOp();
  if (!lowType || !isExactWidening(narrow, wide) || !clear || !result.hasOneUse() ||
      !isClearOp(clear, *lowType))
    return false;

  // Every floating-point operand must be in the type being narrowed.
  bool anyFloatOperand = false;
  for (Value operand : clear->getOperands()) {
    if (!isFloatTensor(operand.getType()))
      continue;
    if (elementTypeOf(operand) != wide)
      return false;
    anyFloatOperand = true;
  }
  if (!anyFloatOperand)
    return false;

  auto castIsFree = [&](Value operand) {
    if (auto producer = operand.getDefiningOp<CastOp>();
        producer && elementTypeOf(producer.getInput()) == narrow)
      return true; // the new cast folds into the producer's input
    return llvm::any_of(operand.getUsers(), [&](Operation *user) {
      auto other = dyn_cast<CastOp>(user);
      return other && elementTypeOf(other.getResult()) == narrow;
    });
  };
  int64_t before = opBytes(clear, wide, wide) + castBytes(result.getType(), narrow);
  int64_t after = opBytes(clear, wide, narrow);
  llvm::SetVector<Value> castOperands;
  for (Value operand : clear->getOperands())
    if (isFloatTensor(operand.getType()) && castOperands.insert(operand) && !castIsFree(operand))
      after += castBytes(operand.getType(), narrow);
  if (after >= before)
    return false;

  OpBuilder builder(clear);
  llvm::DenseMap<Value, Value> narrowed;
  for (Value operand : castOperands)
    narrowed[operand] = CastOp::create(builder, cast.getLoc(),
                                       llvm::cast<RankedTensorType>(operand.getType()).clone(narrow),
                                       operand);
  SmallVector<Value> newOperands;
  for (Value operand : clear->getOperands())
    newOperands.push_back(narrowed.lookup(operand) ? narrowed.lookup(operand) : operand);
  Operation *lowered = cloneInType(clear, newOperands, wide, narrow);
  if (!lowered) {
    for (auto &[operand, created] : narrowed)
      created.getDefiningOp()->erase();
    return false;
  }
  cast.replaceAllUsesWith(lowered->getResult(0));
  erase(cast);
  erase(clear);
  return true;
}

/// %w = cast %h : T -> S;  %y = clear(%w) : S   becomes
/// %yl = clear(%h) : T;  %y = cast %yl : T -> S
bool CastFuser::sinkWideningCast(CastOp cast) {
  Value widened = cast.getResult();
  Type narrow = elementTypeOf(cast.getInput()), wide = elementTypeOf(widened);
  std::optional<LowPrecisionType> lowType = lowPrecisionTypeOf(narrow);
  if (!lowType || !isExactWidening(narrow, wide) || widened.use_empty())
    return false;
  Operation *clear = *widened.getUsers().begin();
  if (llvm::any_of(widened.getUsers(), [&](Operation *user) { return user != clear; }) ||
      !isClearOp(clear, *lowType) || elementTypeOf(clear->getResult(0)) != wide)
    return false;

  // Every floating-point operand must be a value of the narrow type, widened:
  // computing on the narrow values then gives exactly the same numbers.
  llvm::SetVector<CastOp> widenings;
  for (Value operand : clear->getOperands()) {
    if (!isFloatTensor(operand.getType()))
      continue;
    auto widening = operand.getDefiningOp<CastOp>();
    if (!widening || elementTypeOf(widening.getInput()) != narrow || elementTypeOf(operand) != wide)
      return false;
    widenings.insert(widening);
  }

  int64_t before = opBytes(clear, wide, wide);
  for (CastOp widening : widenings)
    if (llvm::all_of(widening->getUsers(), [&](Operation *user) { return user == clear; }))
      before += castBytes(widening.getInput().getType(), wide);
  Type resultType = clear->getResult(0).getType();
  int64_t after = opBytes(clear, wide, narrow) + bytesAs(resultType, narrow) + bytesOf(resultType);
  if (after >= before)
    return false;

  SmallVector<Value> newOperands;
  for (Value operand : clear->getOperands()) {
    auto widening = operand.getDefiningOp<CastOp>();
    newOperands.push_back(widening && widenings.contains(widening) ? widening.getInput() : operand);
  }
  Operation *lowered = cloneInType(clear, newOperands, wide, narrow);
  if (!lowered)
    return false;
  OpBuilder builder(clear);
  auto rewidened = CastOp::create(builder, cast.getLoc(), resultType, lowered->getResult(0));
  clear->getResult(0).replaceAllUsesWith(rewidened.getResult());
  erase(clear);
  for (CastOp widening : widenings)
    if (widening->use_empty())
      erase(widening);
  return true;
}

bool CastFuser::moveAcrossClearOps(ModuleOp module) {
  erased.clear();
  SmallVector<CastOp> casts;
  module.walk([&](CastOp cast) { casts.push_back(cast); });
  bool changed = false;
  for (CastOp cast : casts) {
    if (erased.contains(cast.getOperation()))
      continue;
    if (hoistNarrowingCast(cast) || sinkWideningCast(cast)) {
      ++castsMoved;
      changed = true;
    }
  }
  erased.clear();
  return changed;
}

unsigned countCasts(ModuleOp module) {
  unsigned count = 0;
  module.walk([&](CastOp) { ++count; });
  return count;
}

struct AmpFuseCastsPass : impl::AmpFuseCastsBase<AmpFuseCastsPass> {
  using AmpFuseCastsBase::AmpFuseCastsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<std::shared_ptr<const Policy>> loaded =
        loadPolicy(policy, &getContext(), [&] { return module.emitError(); });
    if (failed(loaded))
      return signalPassFailure();
    fuseCasts(module, **loaded, foldRoundTrips);
  }
};

} // namespace

FuseCastsResult fuseCasts(ModuleOp module, const Policy &policy, bool foldRoundTrips) {
  unsigned castsBefore = countCasts(module);
  CastFuser fuser(policy, foldRoundTrips);
  for (unsigned round = 0; round < kMaxRounds; ++round) {
    bool changed = fuser.foldCasts(module);
    changed |= fuser.mergeDuplicates(module);
    changed |= fuser.moveAcrossClearOps(module);
    if (!changed)
      break;
  }
  // A move above an op with several inputs may add casts (when that still
  // moves fewer bytes), so the count can grow; "removed" is then zero.
  unsigned castsAfter = countCasts(module);
  FuseCastsResult result;
  result.castsRemoved = castsBefore > castsAfter ? castsBefore - castsAfter : 0;
  result.castsMoved = fuser.castsMoved;
  return result;
}

} // namespace ampjit::ir::amp
