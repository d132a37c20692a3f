//===- AutoCast.cpp - decide compute precisions, insert casts -------------===//
//
// Two ways to decide, then one way to rewrite:
//
//  * paint (O1 default): TensorFlow grappler's auto_mixed_precision over the
//    joint graph. Seed allow ops; spread deny forward through infer and clear
//    ops that lie upstream of deny/infer ops (so a relu feeding only a matmul
//    is not dragged to fp32); paint infer/clear ops that are both downstream
//    and upstream of allow ops; spread allow through clear ops in both
//    directions. Promote ops then take the widest type of their inputs.
//  * per op (O1 with semantics=autocast, O2, O3, auto): each op in program
//    order, from its category, the level and the types its inputs already
//    have, as PyTorch's autocast and MindSpore's auto level do. O2 and O3
//    lower the model's computation only: the backward and every op it reads
//    (in a step without one, every op that reads no gradient). The rest of
//    the step (clipping unscaled gradients, a weight EMA, gradient norms)
//    runs in the widest of its inputs' types, as PyTorch's type promotion
//    does over apex O2's f16 model and fp32 master state: rounding unscaled
//    gradients back to f16 would undo the loss scaling, and an fp32 EMA
//    updated in f16 stops moving.
//
// The rewrite gives each decided op its compute type, casts every operand
// that has another type (one amp.cast per (value, type), shared and placed
// right after the value's definition), and re-infers result types so ops
// that keep fp32 statistics (layer_norm's mean and rstd) stay valid.
//
// Graph nodes are ops that compute on fp32 tensors only and have a policy
// rule; values of other types (integer labels, f64, values a user already
// cast) are not painted. An op on values the trace recorded in f16/bf16 (the
// user's own x.half() or autocast inside the traced function) is decided per
// op whatever the mode, as eager autocast decides it; f64 is never touched,
// and a conversion is kept as written. An allow op the target cannot run in
// low precision (policy min_target) is not a seed: like an op grappler does
// not process, it stays fp32 and bounds the painting. Ops under a region
// attribute (amp.disabled, amp.force_type) are fixed and bound it too.
//
//===----------------------------------------------------------------------===//

#include "ampjit/Dialect/Amp/IR/AmpDialect.h"
#include "ampjit/Dialect/Amp/IR/AmpOps.h"
#include "ampjit/Dialect/Amp/Transforms/AmpRewrites.h"
#include "ampjit/Dialect/Amp/Transforms/Passes.h"
#include "ampjit/Dialect/Jit/IR/JitDialect.h"
#include "ampjit/Dialect/Jit/IR/JitOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/raw_ostream.h"

namespace ampjit::ir::amp {

#define GEN_PASS_DEF_AMPAUTOCAST
#include "ampjit/Dialect/Amp/Transforms/Passes.h.inc"

using namespace mlir;
using ampjit::amp::AttributeCondition;
using ampjit::amp::Category;
using ampjit::amp::OpRule;

namespace {

std::string locationText(Location loc) {
  if (auto fileLoc = dyn_cast<FileLineColLoc>(loc))
    return (fileLoc.getFilename().getValue() + ":" + Twine(fileLoc.getLine()) + ":" +
            Twine(fileLoc.getColumn()))
        .str();
  if (auto nameLoc = dyn_cast<NameLoc>(loc))
    return locationText(nameLoc.getChildLoc());
  if (auto callSite = dyn_cast<CallSiteLoc>(loc))
    return locationText(callSite.getCallee());
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (std::string text = locationText(inner); !text.empty())
        return text;
  return "";
}

std::string describeOp(Operation *op) {
  std::string text = ("'" + op->getName().getStringRef() + "'").str();
  if (auto id = op->getAttrOfType<IntegerAttr>("jit.op_id"))
    text += " #" + std::to_string(id.getInt());
  if (std::string where = locationText(op->getLoc()); !where.empty())
    text += " at " + where;
  return text;
}

std::string typeName(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  type.print(os);
  return text;
}

bool isFloatTensorOf(Type type, Type element) {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  return tensorType && tensorType.getElementType() == element;
}

/// The types autocast casts between; f64 is the user's explicit choice of
/// precision and never cast.
bool isCastableElement(Type element) { return element.isF32() || element.isF16() || element.isBF16(); }

/// What is known about one op before deciding.
struct Node {
  Operation *op = nullptr;
  const OpRule *rule = nullptr;
  Category category = Category::Infer;
  const AttributeCondition *condition = nullptr;
  /// Takes part in painting: fp32 only, has a rule, no region attribute, not
  /// always fp32, not an allow op the target cannot run.
  bool paintable = false;
  /// Reads or writes a value the trace recorded in f16/bf16 (the user's
  /// conversion, their own autocast inside the traced function, f16 state),
  /// and is otherwise as a paintable op: decided op by op, as eager
  /// autocast decides an op on such a value, at every level and in both
  /// semantics. Painting colours fp32 values only.
  bool lowAsTraced = false;
  /// The decision, once made.
  Type computeType;
  DecisionReason reason = DecisionReason::Unchanged;
  std::string detail;
  Operation *source = nullptr;
  bool decided = false;
  /// Reads only scaler/optimizer state and hyperparameters.
  bool stateArithmetic = false;
};

class AutoCaster {
public:
  AutoCaster(func::FuncOp function, const AmpConfig &config, AmpReport *report, bool remarks)
      : function(function), config(config), report(report), remarks(remarks),
        f32(Float32Type::get(function.getContext())),
        low(config.lowElementType(function.getContext())) {}

  LogicalResult run() {
    collectNodes();
    painting = config.level == AmpLevel::O1 && config.semantics == AmpSemantics::Paint;
    if (painting)
      paint();
    if (failed(rewrite()))
      return failure();
    record();
    // Resolved type_as ops are identities now; the report needed them until here.
    for (TypeAsOp typeAs : resolvedTypeAs) {
      typeAs.getResult().replaceAllUsesWith(typeAs.getInput());
      typeAs->erase();
    }
    return success();
  }

private:
  //===--------------------------------------------------------------------===//
  // Classification
  //===--------------------------------------------------------------------===//

  std::string policyEntryText(const Node &node) const {
    if (node.condition)
      return node.condition->source.str();
    return node.rule ? node.rule->source.str() : "";
  }

  std::string listDetail(const Node &node) const {
    std::string text = std::string(ampjit::amp::stringifyCategory(node.category));
    if (node.condition)
      text += " when " + node.condition->attribute + " = " + node.condition->equals;
    text += " in policy '" + config.policy->name() + "'";
    return text;
  }

  bool targetRunsInLowPrecision(const Node &node) const {
    if (!node.rule)
      return true;
    auto minimum = node.rule->minimumTarget.find(config.lowType);
    return minimum == node.rule->minimumTarget.end() || config.target.satisfies(minimum->second);
  }

  std::string unsupportedDetail(const Node &node) const {
    auto minimum = node.rule->minimumTarget.find(config.lowType);
    return ("needs " + minimum->second.str() + " for " +
            std::string(ampjit::amp::stringifyLowPrecisionType(config.lowType)) + ", target is " +
            config.target.str())
        ;
  }

  /// Whether every floating-point tensor the op reads (other than operands
  /// read in any precision) and writes is fp32.
  bool computesInFp32Only(Operation *op) const {
    return computesOnlyIn(op, [&](Type element) { return element == f32; });
  }

  /// Whether every such tensor is of a type autocast casts.
  bool computesInCastableTypesOnly(Operation *op) const { return computesOnlyIn(op, isCastableElement); }

  template <typename Accepts>
  bool computesOnlyIn(Operation *op, Accepts accepts) const {
    SmallVector<unsigned> anyPrecision = anyPrecisionOperandIndices(op);
    bool sawFloat = false;
    auto check = [&](Type type) {
      if (!isFloatTensor(type))
        return true;
      sawFloat = true;
      return accepts(cast<RankedTensorType>(type).getElementType());
    };
    for (OpOperand &operand : op->getOpOperands())
      if (!llvm::is_contained(anyPrecision, operand.getOperandNumber()) && !check(operand.get().getType()))
        return false;
    for (Type type : op->getResultTypes())
      if (!check(type))
        return false;
    return sawFloat;
  }

  /// Values computed from the training data or the parameters. Everything
  /// else (the loss scale, learning rate, step counts and the arithmetic on
  /// them) is the scaler's and optimizer's business and stays fp32: 1/scale
  /// underflows in f16 once the scale passes 2^24.
  void findDataDependentValues() {
    for (BlockArgument argument : function.getArguments()) {
      auto role =
          function.getArgAttrOfType<StringAttr>(argument.getArgNumber(), ampjit::ir::JitDialect::kRoleAttrName);
      bool isStateArithmeticInput =
          role && llvm::is_contained({"scaler_state", "hyper", "opt_state"}, role.getValue());
      if (!isStateArithmeticInput)
        dataDependent.insert(argument);
    }
    function.walk([&](Operation *op) {
      if (llvm::any_of(op->getOperands(), [&](Value v) { return dataDependent.contains(v); }))
        for (Value result : op->getResults())
          dataDependent.insert(result);
    });
  }

  bool isStateArithmetic(Operation *op) const {
    return op->getNumOperands() > 0 &&
           llvm::none_of(op->getOperands(), [&](Value v) { return dataDependent.contains(v); });
  }

  /// The ops O2 and O3 lower: with a backward, the backward ops (jit.vjp_of)
  /// and every op they read, directly or not; without one, every op that
  /// reads no gradient (a `grad` argument or an unscaled gradient).
  void findModelComputation() {
    SmallVector<Operation *> worklist;
    function.walk([&](Operation *op) {
      if (op->hasAttr(ampjit::ir::JitDialect::kVjpOfAttrName) && modelComputation.insert(op).second)
        worklist.push_back(op);
    });
    if (!worklist.empty()) {
      while (!worklist.empty()) {
        Operation *op = worklist.pop_back_val();
        for (Value operand : op->getOperands())
          if (Operation *producer = operand.getDefiningOp())
            if (modelComputation.insert(producer).second)
              worklist.push_back(producer);
      }
      return;
    }
    llvm::DenseSet<Value> gradients;
    for (BlockArgument argument : function.getArguments())
      if (auto role = function.getArgAttrOfType<StringAttr>(argument.getArgNumber(),
                                                             ampjit::ir::JitDialect::kRoleAttrName);
          role && role.getValue() == "grad")
        gradients.insert(argument);
    function.walk([&](Operation *op) {
      if (op == function.getOperation())
        return;
      if (isa<UnscaleAndCheckOp>(op) ||
          llvm::any_of(op->getOperands(), [&](Value v) { return gradients.contains(v); })) {
        for (Value result : op->getResults())
          gradients.insert(result);
        return;
      }
      modelComputation.insert(op);
    });
  }

  void collectNodes() {
    findDataDependentValues();
    findModelComputation();
    function.walk([&](Operation *op) {
      if (op == function.getOperation())
        return;
      Node node;
      node.op = op;
      node.rule = config.policy->find(op->getName().getStringRef().str());
      if (node.rule)
        node.category = node.rule->resolve(config.lowType, attributeLookupFor(op), &node.condition);
      // A constant is never repainted: its consumers cast it, and the cast
      // folds into a constant of the new type.
      bool isConstant = isa<ConstantOp>(op);
      bool fixedByRegion = isAmpDisabled(op) || forcedComputeType(op).has_value();
      node.stateArithmetic = isStateArithmetic(op);
      bool ampDecides = node.rule && !isConstant && !fixedByRegion && !node.rule->alwaysFp32 &&
                        !node.stateArithmetic && config.level != AmpLevel::O0;
      node.paintable = ampDecides && computesInFp32Only(op);
      // A conversion reads its operand exactly and rounds once to the type
      // the user asked for, so a low-precision operand changes nothing.
      node.lowAsTraced = ampDecides && !node.paintable && !isa<ConvertOp>(op) && computesInCastableTypesOnly(op);
      if (auto id = op->getAttrOfType<IntegerAttr>("jit.op_id"))
        forwardById[id.getInt()] = nodes.size();
      nodeIndex[op] = nodes.size();
      nodes.push_back(std::move(node));
    });
  }

  /// Deciding op by op at O1 (semantics=autocast) or auto: the pass then
  /// follows eager autocast, and the operands have their final types when an
  /// op is decided.
  bool followsEagerAutocast() const {
    return !painting && (config.level == AmpLevel::O1 || config.level == AmpLevel::Auto);
  }

  /// An op eager code runs with autocast off runs in its operands' types;
  /// so it does here, and a traced step keeps eager's bits. A conversion
  /// computes in the type it converts to (the user's x.to(f32)), and a
  /// backward op in its forward op's type, as everywhere else.
  void decideAsWithoutAutocast(Node &node) {
    if (const Node *forward = decidedForwardOf(node)) {
      node.computeType = forward->computeType;
      node.detail = backwardDetail(*forward);
    } else if (isa<ConvertOp>(node.op)) {
      node.computeType = cast<RankedTensorType>(node.op->getResult(0).getType()).getElementType();
      node.detail = "a conversion computes in the type it converts to";
    } else {
      decidePromote(node);
    }
  }

  /// Decisions that do not depend on the mode; true when one was made.
  bool decideFixed(Node &node) {
    Operation *op = node.op;
    if (isAmpDisabled(op)) {
      // Painting and O2/O3 keep the region's traced fp32, casting low
      // operands up.
      if (followsEagerAutocast()) {
        decideAsWithoutAutocast(node);
        node.reason = DecisionReason::Region;
        node.detail = "AMP disabled by a region (amp.disabled): " + node.detail + ", as eager autocast(false) runs it";
        return true;
      }
      node.reason = DecisionReason::Region;
      node.detail = "AMP disabled by a region (amp.disabled)";
      return true;
    }
    // No region and no forward op to follow: an autograd::function's
    // backward, which PyTorch runs with autocast off. Painting decides it
    // with the rest of the graph.
    if (isOutsideAutocast(op) && followsEagerAutocast() && (node.paintable || node.lowAsTraced)) {
      decideAsWithoutAutocast(node);
      node.reason = DecisionReason::Promoted;
      node.detail = "outside autocast (amp.outside_autocast): " + node.detail + ", as eager code runs it";
      return true;
    }
    if (std::optional<FloatType> forced = forcedComputeType(op)) {
      node.computeType = *forced;
      node.reason = DecisionReason::Region;
      node.detail = "forced to " + typeName(*forced) + " by a region (amp.force_type)";
      return true;
    }
    if (node.rule && node.rule->alwaysFp32 && config.level != AmpLevel::O0) {
      node.computeType = f32;
      node.reason = DecisionReason::AlwaysFp32;
      node.detail = "scaler and optimizer arithmetic is fp32 at every level (policy '" +
                    config.policy->name() + "')";
      return true;
    }
    if (node.rule && node.stateArithmetic && config.level != AmpLevel::O0 &&
        computesInFp32Only(op)) {
      node.computeType = f32;
      node.reason = DecisionReason::AlwaysFp32;
      node.detail = "reads only scaler/optimizer state and hyperparameters, which stay fp32 at "
                    "every level";
      return true;
    }
    if (!node.paintable && !node.lowAsTraced) {
      node.reason = DecisionReason::Unchanged;
      node.detail = config.level == AmpLevel::O0 ? "level O0 keeps fp32"
                    : !node.rule                 ? "no policy entry"
                    : isa<ConstantOp>(op)        ? "constants are cast by their consumers"
                    : isa<ConvertOp>(op)         ? "a conversion to or from a type the trace recorded is kept as written"
                                                 : "does not compute on fp32 tensors";
      return true;
    }
    return false;
  }

  //===--------------------------------------------------------------------===//
  // Painting (grappler)
  //===--------------------------------------------------------------------===//

  /// Paintable producers/consumers of a node over fp32 tensor values.
  SmallVector<unsigned> neighbours(unsigned index, bool inputs, bool outputs) {
    SmallVector<unsigned> result;
    Operation *op = nodes[index].op;
    auto addIfPaintable = [&](Operation *other) {
      if (!other)
        return;
      auto found = nodeIndex.find(other);
      if (found != nodeIndex.end() && nodes[found->second].paintable)
        result.push_back(found->second);
    };
    if (inputs)
      for (Value operand : op->getOperands())
        if (isFloatTensorOf(operand.getType(), f32))
          addIfPaintable(operand.getDefiningOp());
    if (outputs)
      for (Value produced : op->getResults())
        if (isFloatTensorOf(produced.getType(), f32))
          for (Operation *user : produced.getUsers())
            addIfPaintable(user);
    return result;
  }

  /// Depth-first from `root`; `enter(node)` says whether to step onto a node;
  /// `visit(node)` is called on each entered node, root included.
  template <typename Enter, typename Visit>
  void traverse(unsigned root, bool inputs, bool outputs, Enter enter, Visit visit) {
    llvm::DenseSet<unsigned> seen{root};
    SmallVector<unsigned> stack{root};
    while (!stack.empty()) {
      unsigned index = stack.pop_back_val();
      visit(index);
      for (unsigned next : neighbours(index, inputs, outputs))
        if (!seen.contains(next) && enter(next)) {
          seen.insert(next);
          stack.push_back(next);
        }
    }
  }

  bool hasCategory(unsigned index, Category category) const {
    return nodes[index].paintable && nodes[index].category == category;
  }

  void paint() {
    llvm::DenseSet<unsigned> allow, deny;
    // Why each painted or denied node got its colour.
    llvm::DenseMap<unsigned, std::pair<unsigned, std::string>> paintedFrom;

    for (unsigned i = 0; i < nodes.size(); ++i) {
      if (!nodes[i].paintable)
        continue;
      if (nodes[i].category == Category::Allow) {
        if (targetRunsInLowPrecision(nodes[i]))
          allow.insert(i);
        else
          unsupported.insert(i);
      }
    }
    // An unsupported allow op is a boundary, not a node.
    for (unsigned i : unsupported)
      nodes[i].paintable = false;

    // Deny spreads forward only through clear ops that feed deny or infer
    // ops (and through infer ops): a clear op feeding just an allow op stays
    // free to be painted.
    llvm::DenseSet<unsigned> upstreamOfDenyOrInfer;
    for (unsigned root = 0; root < nodes.size(); ++root) {
      if (!hasCategory(root, Category::Deny) && !hasCategory(root, Category::Infer))
        continue;
      traverse(
          root, /*inputs=*/true, /*outputs=*/false,
          [&](unsigned next) {
            return !upstreamOfDenyOrInfer.contains(next) && hasCategory(next, Category::Clear);
          },
          [&](unsigned index) { upstreamOfDenyOrInfer.insert(index); });
    }
    for (unsigned root = 0; root < nodes.size(); ++root) {
      if (!hasCategory(root, Category::Deny) || deny.contains(root))
        continue;
      traverse(
          root, /*inputs=*/false, /*outputs=*/true,
          [&](unsigned next) { return !deny.contains(next) && upstreamOfDenyOrInfer.contains(next); },
          [&](unsigned index) {
            if (deny.insert(index).second && index != root)
              paintedFrom[index] = {root, "fp32: deny spreads forward from"};
          });
    }

    // Infer and clear ops both downstream and upstream of allow ops.
    llvm::DenseSet<unsigned> downstreamOfAllow;
    for (unsigned root : llvm::to_vector(allow))
      traverse(
          root, /*inputs=*/false, /*outputs=*/true,
          [&](unsigned next) {
            return !downstreamOfAllow.contains(next) && !allow.contains(next) &&
                   !deny.contains(next) &&
                   (hasCategory(next, Category::Infer) || hasCategory(next, Category::Clear));
          },
          [&](unsigned index) { downstreamOfAllow.insert(index); });
    for (unsigned root : sortedCopy(allow))
      traverse(
          root, /*inputs=*/true, /*outputs=*/false,
          [&](unsigned next) { return !allow.contains(next) && downstreamOfAllow.contains(next); },
          [&](unsigned index) {
            if (index != root && allow.insert(index).second)
              paintedFrom[index] = {root, "between allow ops, upstream of"};
          });

    // Clear ops next to allow ops, either direction.
    for (unsigned root : sortedCopy(allow))
      traverse(
          root, /*inputs=*/true, /*outputs=*/true,
          [&](unsigned next) {
            return !allow.contains(next) && !deny.contains(next) && hasCategory(next, Category::Clear);
          },
          [&](unsigned index) {
            if (index != root && allow.insert(index).second)
              paintedFrom[index] = {root, "clear ops next to an allow op take its precision:"};
          });

    // Promote ops are left to the rewrite, which reaches them after their
    // inputs have their final types.
    for (unsigned i = 0; i < nodes.size(); ++i) {
      Node &node = nodes[i];
      node.decided = !(node.paintable && node.category == Category::Promote && !allow.contains(i)) &&
                     !node.lowAsTraced;
      if (unsupported.contains(i)) {
        node.computeType = f32;
        node.reason = DecisionReason::Unsupported;
        node.detail = unsupportedDetail(node);
        continue;
      }
      if (decideFixed(node))
        continue;
      if (!allow.contains(i) && !node.decided)
        continue;
      node.computeType = allow.contains(i) ? Type(low) : Type(f32);
      if (auto from = paintedFrom.find(i); from != paintedFrom.end()) {
        node.reason = DecisionReason::Inferred;
        node.source = nodes[from->second.first].op;
        node.detail = from->second.second + " " + describeOp(node.source);
      } else {
        node.reason = node.condition ? DecisionReason::Condition : DecisionReason::List;
        node.detail = listDetail(node);
        if (!allow.contains(i) &&
            (node.category == Category::Infer || node.category == Category::Clear))
          node.detail += ", not between allow ops";
      }
    }
  }

  static SmallVector<unsigned> sortedCopy(const llvm::DenseSet<unsigned> &set) {
    SmallVector<unsigned> sorted(set.begin(), set.end());
    llvm::sort(sorted);
    return sorted;
  }

  //===--------------------------------------------------------------------===//
  // Per-op decisions (autocast, O2, O3, auto; promote ops when painting)
  //===--------------------------------------------------------------------===//
  //
  // Made during the rewrite, in program order, so an op sees the types its
  // operands actually have by then.

  static Type widerOf(Type a, Type b) {
    if (!a || a == b)
      return a ? a : b;
    unsigned widthA = a.getIntOrFloatBitWidth(), widthB = b.getIntOrFloatBitWidth();
    if (widthA != widthB)
      return widthA > widthB ? a : b;
    // f16 with bf16: neither holds the other; fp32 holds both.
    return Float32Type::get(a.getContext());
  }

  /// The forward op a backward op (`jit.vjp_of`) differentiates, where it
  /// comes earlier and has been decided; null otherwise.
  const Node *decidedForwardOf(const Node &node) const {
    auto vjpOf = node.op->getAttrOfType<IntegerAttr>(ampjit::ir::JitDialect::kVjpOfAttrName);
    if (!vjpOf)
      return nullptr;
    auto forward = forwardById.find(vjpOf.getInt());
    if (forward == forwardById.end() || forward->second >= nodeIndex.lookup(node.op) ||
        !nodes[forward->second].computeType)
      return nullptr;
    return &nodes[forward->second];
  }
  static std::string backwardDetail(const Node &forward) {
    return "backward of " + describeOp(forward.op) + ", which computes in " + typeName(forward.computeType);
  }

  /// Promote: the widest floating-point input type (f16 with bf16 gives f32).
  /// A wrapped C++ number (`jit.wrapped_operands`) takes the others' type, as
  /// in PyTorch's type promotion and eager autocast, unless it is all there is.
  void decidePromote(Node &node) {
    Type widest;
    Operation *widestFrom = nullptr;
    SmallVector<unsigned> anyPrecision = anyPrecisionOperandIndices(node.op);
    SmallVector<unsigned> wrapped;
    if (auto positions = node.op->getAttrOfType<DenseI64ArrayAttr>(ampjit::ir::JitDialect::kWrappedOperandsAttrName))
      for (int64_t position : positions.asArrayRef())
        wrapped.push_back(unsigned(position));
    bool anyTensor = llvm::any_of(node.op->getOpOperands(), [&](OpOperand &operand) {
      return !llvm::is_contained(anyPrecision, operand.getOperandNumber()) &&
             !llvm::is_contained(wrapped, operand.getOperandNumber()) && isFloatTensor(operand.get().getType());
    });
    for (OpOperand &operand : node.op->getOpOperands()) {
      if (llvm::is_contained(anyPrecision, operand.getOperandNumber()) ||
          !isFloatTensor(operand.get().getType()))
        continue;
      if (anyTensor && llvm::is_contained(wrapped, operand.getOperandNumber()))
        continue;
      Type element = cast<RankedTensorType>(operand.get().getType()).getElementType();
      Type wider = widerOf(widest, element);
      if (wider != widest && wider == element)
        widestFrom = operand.get().getDefiningOp();
      widest = wider;
    }
    node.computeType = widest ? widest : Type(f32);
    node.reason = DecisionReason::Promoted;
    node.source = widestFrom;
    node.detail = "the widest of its inputs (" + typeName(node.computeType) + ")";
    if (widestFrom)
      node.detail += ", from " + describeOp(widestFrom);
  }

  void decidePerOp(unsigned index) {
    Node &node = nodes[index];
    if (decideFixed(node))
      return;
    bool wantsLow = false;
    bool promote = false;
    node.reason = node.condition ? DecisionReason::Condition : DecisionReason::List;
    node.detail = listDetail(node);
    switch (config.level) {
    case AmpLevel::O3:
      wantsLow = true;
      node.reason = DecisionReason::Level;
      node.detail = "level O3 runs every compute op in low precision";
      break;
    case AmpLevel::O2:
      wantsLow = node.category != Category::Deny;
      if (wantsLow) {
        node.reason = DecisionReason::Level;
        node.detail = "level O2 runs every op but deny ops in low precision";
      }
      break;
    case AmpLevel::O0:
    case AmpLevel::O1: // semantics=autocast
    case AmpLevel::Auto:
      wantsLow = node.category == Category::Allow;
      // PyTorch runs ops on no list in their inputs' types, which with type
      // promotion is the widest of them; MindSpore's auto level promotes.
      promote = node.category != Category::Allow && node.category != Category::Deny;
      break;
    }

    // A sum of a leaf's gradients runs in the leaf's (traced) type: eagerly
    // each gradient first passes back through the cast autocast recorded.
    // (The sums of other values' gradients carry jit.vjp_of of the value's
    // producer, so they take its precision below.)
    if (node.op->hasAttr(ampjit::ir::JitDialect::kGradOfLeafAttrName) && config.level != AmpLevel::O2 &&
        config.level != AmpLevel::O3 && node.op->getNumResults() == 1 && isFloatTensor(node.op->getResult(0).getType())) {
      node.computeType = cast<RankedTensorType>(node.op->getResult(0).getType()).getElementType();
      node.reason = DecisionReason::Backward;
      node.detail = "sums the gradients of a leaf (a parameter or input) in the leaf's type, as eager autocast does";
      return;
    }

    // Backward ops take the precision their forward op computed in, as
    // PyTorch's autograd does under autocast.
    if (config.level != AmpLevel::O2 && config.level != AmpLevel::O3) {
      if (const Node *forward = decidedForwardOf(node)) {
        node.computeType = forward->computeType;
        node.reason = DecisionReason::Backward;
        node.source = forward->op;
        node.detail = backwardDetail(*forward);
        if (node.computeType != f32 && !targetRunsInLowPrecision(node))
          markUnsupported(node);
        return;
      }
    }

    if (promote && (config.level == AmpLevel::O1 || config.level == AmpLevel::Auto) && decideLinearBias(node))
      return;

    bool lowersEverything = config.level == AmpLevel::O2 || config.level == AmpLevel::O3;
    if (lowersEverything && wantsLow && !modelComputation.contains(node.op)) {
      decidePromote(node);
      node.detail = "level " + std::string(config.level == AmpLevel::O2 ? "O2" : "O3") +
                    " lowers only the forward and backward; this op works on their results, so " +
                    node.detail;
      return;
    }
    if (promote)
      return decidePromote(node);
    if (wantsLow && !targetRunsInLowPrecision(node))
      return markUnsupported(node);
    node.computeType = wantsLow ? Type(low) : Type(f32);
  }

  /// jit::linear's bias add (jit.linear_bias) runs in its product's type, as
  /// eager autocast runs it: torch's linear is one allow op, bias included,
  /// where a user's own `matmul + b` promotes. Its product (operand 0) comes
  /// earlier and has its final type. An f64 operand promotes as usual.
  bool decideLinearBias(Node &node) {
    if (!node.op->hasAttr(ampjit::ir::JitDialect::kLinearBiasAttrName) || node.op->getNumOperands() == 0)
      return false;
    bool anyF64 = llvm::any_of(node.op->getOperands(), [](Value v) {
      return isFloatTensor(v.getType()) && cast<RankedTensorType>(v.getType()).getElementType().isF64();
    });
    Value product = node.op->getOperand(0);
    if (anyF64 || !isFloatTensor(product.getType()))
      return false;
    node.computeType = cast<RankedTensorType>(product.getType()).getElementType();
    node.reason = DecisionReason::Inferred;
    node.source = product.getDefiningOp();
    node.detail = "a linear layer's bias add (jit.linear_bias) runs in its product's type (" +
                  typeName(node.computeType) + "), as torch's linear under autocast";
    if (node.source)
      node.detail += ", " + describeOp(node.source);
    return true;
  }

  void markUnsupported(Node &node) {
    node.computeType = f32;
    node.reason = DecisionReason::Unsupported;
    node.detail = unsupportedDetail(node);
  }

  //===--------------------------------------------------------------------===//
  // Rewrite
  //===--------------------------------------------------------------------===//

  /// One cast per (value, type), right after the value's definition.
  Value castTo(Value value, Type elementType) {
    auto tensorType = cast<RankedTensorType>(value.getType());
    if (tensorType.getElementType() == elementType)
      return value;
    auto key = std::make_pair(value, elementType);
    if (auto found = castCache.find(key); found != castCache.end())
      return found->second;
    OpBuilder builder(function.getContext());
    Block *argumentBlock = nullptr;
    if (Operation *producer = value.getDefiningOp())
      builder.setInsertionPointAfter(producer);
    else
      builder.setInsertionPointToStart(argumentBlock = cast<BlockArgument>(value).getOwner());
    auto castOp = CastOp::create(builder, value.getLoc(), tensorType.clone(elementType), value);
    if (argumentBlock)
      placeArgumentCast(castOp, argumentBlock);
    ++castsInserted;
    castCache[key] = castOp.getResult();
    return castOp.getResult();
  }

  /// Casts of arguments go first, in the order they are made, so the IR
  /// reads like the signature.
  void placeArgumentCast(CastOp castOp, Block *block) {
    auto last = lastArgumentCast.find(block);
    if (last != lastArgumentCast.end())
      castOp->moveAfter(last->second);
    else
      castOp->moveBefore(&block->front());
    lastArgumentCast[block] = castOp;
  }

  /// Existing casts are reused rather than duplicated; one that is defined
  /// after a use we give it is moved up next to its input.
  void seedCastCache() {
    function.walk([&](CastOp castOp) {
      auto key = std::make_pair(castOp.getInput(),
                                cast<RankedTensorType>(castOp.getType()).getElementType());
      if (castCache.contains(key))
        return;
      if (Operation *producer = castOp.getInput().getDefiningOp())
        castOp->moveAfter(producer);
      else
        placeArgumentCast(castOp, cast<BlockArgument>(castOp.getInput()).getOwner());
      castCache[key] = castOp.getResult();
    });
  }

  LogicalResult rewrite() {
    // The types every value had before, so that ops we do not decide, and
    // function results, get back exactly what they had.
    llvm::DenseMap<Value, Type> originalType;
    function.walk([&](Operation *op) {
      for (Value result : op->getResults())
        originalType[result] = result.getType();
    });
    seedCastCache();

    SmallVector<Operation *> order;
    function.walk([&](Operation *op) {
      if (op != function.getOperation() && !isa<CastOp>(op))
        order.push_back(op);
    });
    for (Operation *op : order) {
      auto found = nodeIndex.find(op);
      Node *node = found == nodeIndex.end() ? nullptr : &nodes[found->second];
      if (auto typeAs = dyn_cast<TypeAsOp>(op)) {
        resolveTypeAs(typeAs, *node);
        continue;
      }
      if (node && !node->decided) {
        if (painting && !node->lowAsTraced)
          decidePromote(*node);
        else
          decidePerOp(found->second);
        node->decided = true;
      }
      if (auto scaleLoss = dyn_cast<ScaleLossOp>(op); scaleLoss && followsAWidenedLoss(scaleLoss, originalType))
        continue;
      Type compute = node ? node->computeType : Type();
      SmallVector<unsigned> anyPrecision = anyPrecisionOperandIndices(op);
      for (OpOperand &operand : op->getOpOperands()) {
        Value value = operand.get();
        if (!isFloatTensor(value.getType()))
          continue;
        if (llvm::is_contained(anyPrecision, operand.getOperandNumber()))
          continue;
        Type wanted;
        // A decided op reads its fp32 operands in its compute type (and an op
        // on values traced low, all of them); anything else reads what it
        // read before.
        Type before = originalType.count(value) ? originalType[value] : value.getType();
        Type beforeElement = cast<RankedTensorType>(before).getElementType();
        if (returnsAsComputed(operand, before))
          continue;
        if (compute && node->paintable && beforeElement == f32)
          wanted = compute;
        else if (compute && node->lowAsTraced)
          wanted = compute;
        else if (compute && !node->paintable && node->reason == DecisionReason::Region)
          wanted = compute;
        else if (!compute && isa<ConvertOp>(op))
          // A conversion AMP leaves as written is exact whatever its operand's
          // type: an f32 result AMP gave the user's f16 exp is not rounded
          // back to f16 on its way in.
          continue;
        else
          wanted = beforeElement;
        if (compute)
          widenTheSeedOfAWidenedLoss(value, wanted);
        if (cast<RankedTensorType>(value.getType()).getElementType() != wanted) {
          operand.set(castTo(value, wanted));
        }
      }
      if (auto convert = dyn_cast<ConvertOp>(op); convert && node && !compute)
        retypeGradientOfAConversion(convert, *node);
      bool retype = node && compute &&
                    (node->lowAsTraced || (compute != f32 && (node->paintable || node->reason == DecisionReason::Region)));
      if (!retype)
        continue;
      if (failed(retypeResults(op, compute)))
        return failure();
    }
    Operation *terminator = function.getBody().back().getTerminator();
    if (TypeRange returned = terminator->getOperandTypes(); returned != function.getResultTypes())
      function.setType(FunctionType::get(function.getContext(), function.getArgumentTypes(), returned));
    return success();
  }

  /// A step's output that the trace recorded in f16/bf16 is returned in
  /// the type AMP computed it in, as eager autocast returns it: the user's
  /// MSE on their own f16 values (a deny op) in f32, their f16 product at
  /// bf16 in bf16. Cast back to the recorded type, the caller got eager's
  /// value rounded once more (bf16 to f16 can overflow). A value recorded in
  /// f32 stays f32, as the user's code without autocast returns it. Only a
  /// `jit.returned` result: new state keeps its argument's type, and a
  /// gradient or an input write the type of the tensor it lands in. Only in
  /// a one-block function, whose one return the signature then follows.
  bool returnsAsComputed(OpOperand &operand, Type recorded) {
    if (!isa<func::ReturnOp>(operand.getOwner()) || operand.getOwner()->getParentOp() != function ||
        !function.getBody().hasOneBlock() ||
        !function.getResultAttr(operand.getOperandNumber(), ampjit::ir::JitDialect::kReturnedAttrName))
      return false;
    return isLowPrecisionTensor(recorded) && isFloatTensor(operand.get().getType());
  }

  /// `scaler.scale(loss)` scales the loss in the loss's own type. Where AMP
  /// widened a loss the trace recorded in f16/bf16 (a deny op on the user's
  /// low value, which eager autocast runs in f32), the scaled loss is f32
  /// too, as eagerly (and so is the backward's seed:
  /// widenTheSeedOfAWidenedLoss).
  bool followsAWidenedLoss(ScaleLossOp scaleLoss, const llvm::DenseMap<Value, Type> &originalType) {
    TypedValue<RankedTensorType> loss = scaleLoss.getLoss();
    auto recorded = originalType.find(loss);
    bool widened = isFloatTensorOf(loss.getType(), f32) && recorded != originalType.end() &&
                   isLowPrecisionTensor(recorded->second);
    if (widened)
      scaleLoss.getResult().setType(loss.getType());
    return widened;
  }

  /// The backward's seed, `scaler.scale` of ones in the loss's recorded type
  /// (the forward scale_loss is often gone by now: nothing reads it). The
  /// loss's backward op reads it in f32 where AMP widened that loss, and
  /// then the seed is scaled in f32 as eagerly, not scaled in f16 and cast.
  void widenTheSeedOfAWidenedLoss(Value value, Type wanted) {
    auto seed = value.getDefiningOp<ScaleLossOp>();
    if (!seed || !seed->hasAttr(ampjit::ir::JitDialect::kVjpOfAttrName) || wanted != f32 ||
        !isLowPrecisionTensor(seed.getType()))
      return;
    seed.getLossMutable().set(castTo(seed.getLoss(), f32));
    seed.getResult().setType(seed.getType().clone(f32));
  }

  /// The gradient of `y = x.to(t)` converts `dy` to x's type, and autograd
  /// gives every gradient its tensor's type (PyTorch's engine casts it). Where
  /// AMP gave x or y another type than the trace recorded, the gradient
  /// conversion follows the types they have now: it reads `dy` rounded to
  /// y's type and converts to x's. Before 2026-12-03 it kept the recorded
  /// types, so in `log_softmax(h.half()).float()` (the log-softmax, a deny
  /// op, now f32) the gradient was rounded to f16 before the log-softmax's
  /// backward and not after it, where eager autocast rounds it at its cast.
  void retypeGradientOfAConversion(ConvertOp gradient, Node &node) {
    auto vjpOf = gradient->getAttrOfType<IntegerAttr>(ampjit::ir::JitDialect::kVjpOfAttrName);
    auto forwardIndex = vjpOf ? forwardById.find(vjpOf.getInt()) : forwardById.end();
    if (forwardIndex == forwardById.end())
      return;
    auto forward = dyn_cast<ConvertOp>(nodes[forwardIndex->second].op);
    if (!forward || forward.getInput().getType().getShape() != gradient.getType().getShape() ||
        forward.getType().getShape() != gradient.getInput().getType().getShape())
      return;
    Type readType = forward.getType().getElementType();
    Type resultType = forward.getInput().getType().getElementType();
    if (!isCastableElement(readType) || !isCastableElement(resultType))
      return;
    bool changed = false;
    if (gradient.getInput().getType().getElementType() != readType) {
      gradient.getInputMutable().set(castTo(gradient.getInput(), readType));
      changed = true;
    }
    if (gradient.getType().getElementType() != resultType) {
      gradient.getResult().setType(gradient.getType().clone(resultType));
      changed = true;
    }
    if (!changed)
      return;
    node.reason = DecisionReason::Backward;
    node.source = forward;
    node.detail = "the gradient of " + describeOp(forward) + ": reads its gradient in " + typeName(readType) +
                  " and converts it to " + typeName(resultType) +
                  ", the types that conversion has now, as autograd gives a gradient its tensor's type";
  }

  /// `x.type_as(ref)` converts to the type `ref` has now: its producer comes
  /// earlier and has been rewritten, so this is the type AMP decided for it,
  /// at every level and in both semantics (eagerly, under autocast, `ref`
  /// has that type). The op becomes a cast of its input, or nothing.
  void resolveTypeAs(TypeAsOp typeAs, Node &node) {
    Type target = cast<RankedTensorType>(typeAs.getReference().getType()).getElementType();
    node.computeType = target;
    node.reason = DecisionReason::Reference;
    node.source = typeAs.getReference().getDefiningOp();
    node.detail = "converts to the type of its reference (" + typeName(target) + ")";
    if (node.source)
      node.detail += ", " + describeOp(node.source);
    node.decided = true;
    typeAs.getInputMutable().set(castTo(typeAs.getInput(), target));
    typeAs.getResult().setType(cast<RankedTensorType>(typeAs.getType()).clone(target));
    resolvedTypeAs.push_back(typeAs);
  }

  /// Gives `op` results of its new compute type: inferred where the op can
  /// infer them (so fp32-only results stay fp32), else every fp32 result
  /// (and every f16/bf16 one the trace recorded).
  LogicalResult retypeResults(Operation *op, Type compute) {
    SmallVector<Type> resultTypes;
    if (auto inferable = dyn_cast<InferTypeOpInterface>(op)) {
      if (failed(inferable.inferReturnTypes(op->getContext(), op->getLoc(), op->getOperands(),
                                            op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                                            op->getRegions(), resultTypes)))
        return op->emitOpError() << "cannot compute in " << compute
                                 << ": result types do not infer from the cast operands";
    } else {
      for (Type type : op->getResultTypes())
        resultTypes.push_back(isFloatTensor(type) && isCastableElement(cast<RankedTensorType>(type).getElementType())
                                  ? Type(cast<RankedTensorType>(type).clone(compute))
                                  : type);
    }
    for (auto [result, type] : llvm::zip_equal(op->getResults(), resultTypes))
      result.setType(type);
    if (failed(mlir::verify(op)))
      return op->emitOpError() << "is invalid in " << compute
                               << " (see above): the policy puts it in a category its verifier rejects";
    return success();
  }

  //===--------------------------------------------------------------------===//
  // Report
  //===--------------------------------------------------------------------===//

  void record() {
    for (Node &node : nodes) {
      if (!node.rule && !node.computeType)
        continue; // func.return and friends: nothing to explain
      std::optional<FloatType> actual = computeElementType(node.op);
      std::string computeText = actual ? typeName(*actual) : "none";
      bool explained = node.rule || node.reason == DecisionReason::Reference;
      if (remarks && explained)
        node.op->emitRemark() << "computes in " << computeText << ": "
                              << stringifyDecisionReason(node.reason) << ", " << node.detail;
      if (!report)
        continue;
      OpDecision decision;
      decision.opName = node.op->getName().getStringRef().str();
      decision.location = locationText(node.op->getLoc());
      decision.category =
          node.rule ? std::string(ampjit::amp::stringifyCategory(node.category)) : std::string();
      decision.computeType = computeText;
      decision.reason = node.reason;
      decision.detail = node.detail;
      decision.policySource = policyEntryText(node);
      if (node.source)
        decision.source = describeOp(node.source);
      report->decisions.push_back(std::move(decision));
    }
    if (report)
      report->castsInserted += castsInserted;
  }

  func::FuncOp function;
  const AmpConfig &config;
  AmpReport *report;
  bool remarks;
  FloatType f32;
  FloatType low;
  std::vector<Node> nodes;
  llvm::DenseMap<Operation *, unsigned> nodeIndex;
  llvm::DenseSet<unsigned> unsupported;
  llvm::DenseSet<Value> dataDependent;
  llvm::DenseSet<Operation *> modelComputation;
  /// jit.op_id -> node, for backward ops (jit.vjp_of).
  llvm::DenseMap<int64_t, unsigned> forwardById;
  bool painting = false;
  llvm::DenseMap<std::pair<Value, Type>, Value> castCache;
  llvm::DenseMap<Block *, Operation *> lastArgumentCast;
  unsigned castsInserted = 0;
  SmallVector<TypeAsOp> resolvedTypeAs;
};

struct AmpAutoCastPass : impl::AmpAutoCastBase<AmpAutoCastPass> {
  using AmpAutoCastBase::AmpAutoCastBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<AmpConfig> config = AmpConfig::parse(level, dtype, semantics, target, policy,
                                                   &getContext(), [&] { return mlir::emitError(module.getLoc()); });
    if (failed(config))
      return signalPassFailure();
    AmpReport report;
    bool wantsReport = !this->report.empty() || !reportDot.empty();
    if (failed(autoCast(module, *config, wantsReport ? &report : nullptr, remarks)))
      return signalPassFailure();
    if (wantsReport && failed(writeReportFiles(report, module, this->report, reportDot)))
      return signalPassFailure();
  }
};

} // namespace

LogicalResult autoCast(ModuleOp module, const AmpConfig &config, AmpReport *report, bool remarks) {
  if (report) {
    report->level = stringifyAmpLevel(config.level).str();
    report->dtype = std::string(ampjit::amp::stringifyLowPrecisionType(config.lowType));
    report->semantics = config.semantics == AmpSemantics::Paint ? "paint" : "autocast";
    report->target = config.target.str();
    report->policyName = config.policy->name();
    report->policyHash = config.policy->hash();
  }
  for (auto function : module.getOps<func::FuncOp>()) {
    if (function.isDeclaration())
      continue;
    if (failed(AutoCaster(function, config, report, remarks).run()))
      return failure();
  }
  return success();
}

} // namespace ampjit::ir::amp
