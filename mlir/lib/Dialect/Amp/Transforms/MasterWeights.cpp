//===- MasterWeights.cpp - amp-master-weights: O2's low-precision copies ---===//
//
// At O2 the step reads its parameters in low precision but keeps fp32 master
// weights for the update (DESIGN, "AMP semantics"). After amp-auto-cast every
// such read is an `amp.cast %w : f32 -> T`, one per step per parameter. This
// pass turns those casts into state: for a parameter argument %w
//
//   * that has `jit.role = "param"` and an f32 tensor type,
//   * whose every use is an amp.cast to one low-precision type T, the `param`
//     operand of the optimizer update whose new value is returned tied to %w,
//     or %w itself returned tied to itself (a parameter the step does not
//     change),
//
// it appends an argument %w_T : tensor<...xT> {jit.role = "param",
// jit.derived_from = <index of %w>}, reads %w_T where the casts were (and
// erases them), passes %w_T as the update's `param_copy`, and returns the
// update's `new_param_copy` as a new result {jit.tied = <index of %w_T>}. The
// update writes the copy from the new fp32 master in the same kernel, so the
// step casts no parameter at all; with the overflow predicate false it returns
// the copy unchanged, like the master.
//
// A parameter read in fp32 anywhere else (by a deny op such as layer_norm, or
// by a user's jit.convert) keeps its casts and gets no copy: O2's batch-norm
// and layer-norm parameters stay fp32 (DESIGN), and a copy would not remove
// the fp32 reads.
//
// A frozen parameter (cast, but updated by no optimizer in this step) also
// gets a copy, without a tied result: the step never changes its master, and
// derived state is re-derived by the runtime whenever the user writes the
// master between steps (DESIGN principle 3), so the copy stays equal to
// round_to_nearest_even(master) and the step saves the cast.
//
// Declarations, functions whose body is not one block ending in func.return,
// and parameters that already have a copy are left alone, so the pass can run
// twice.
//
//===----------------------------------------------------------------------===//

#include "ampjit/Dialect/Amp/IR/AmpOps.h"
#include "ampjit/Dialect/Amp/Transforms/AmpRewrites.h"
#include "ampjit/Dialect/Amp/Transforms/Passes.h"
#include "ampjit/Dialect/Jit/IR/JitDialect.h"
#include "ampjit/Dialect/Jit/IR/JitOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

namespace ampjit::ir::amp {

#define GEN_PASS_DEF_AMPMASTERWEIGHTS
#include "ampjit/Dialect/Amp/Transforms/Passes.h.inc"

using namespace mlir;

namespace {

/// What the pass will do for one parameter.
struct CopyPlan {
  unsigned master = 0;
  RankedTensorType copyType;
  SmallVector<CastOp> casts;
  /// The jit.sgd_update / jit.adam_update whose new value of the master is
  /// returned tied to it; null for a frozen parameter.
  Operation *update = nullptr;
};

std::optional<int64_t> tiedArgumentOf(func::FuncOp function, unsigned resultIndex) {
  auto tied = function.getResultAttrOfType<IntegerAttr>(resultIndex, JitDialect::kTiedAttrName);
  if (!tied)
    return std::nullopt;
  return tied.getInt();
}

/// Whether `value` is returned in a result tied to argument `master`.
bool isReturnedTiedTo(func::FuncOp function, func::ReturnOp ret, Value value, unsigned master) {
  for (OpOperand &operand : ret->getOpOperands())
    if (operand.get() == value && tiedArgumentOf(function, operand.getOperandNumber()) == master)
      return true;
  return false;
}

/// The update that reads `use` as its `param` operand and yields the value
/// returned tied to `master`; null otherwise.
Operation *updateWritingMaster(func::FuncOp function, func::ReturnOp ret, OpOperand &use,
                               unsigned master) {
  return llvm::TypeSwitch<Operation *, Operation *>(use.getOwner())
      .Case<SgdUpdateOp, AdamUpdateOp>([&](auto update) -> Operation * {
        if (&use != &update.getParamMutable() || update.getParamCopy() ||
            !isReturnedTiedTo(function, ret, update.getNewParam(), master))
          return nullptr;
        return update;
      })
      .Default([](Operation *) { return nullptr; });
}

bool hasCopyAlready(func::FuncOp function, unsigned master) {
  for (unsigned index = 0, count = function.getNumArguments(); index < count; ++index) {
    auto source =
        function.getArgAttrOfType<IntegerAttr>(index, JitDialect::kDerivedFromAttrName);
    if (source && source.getInt() == master)
      return true;
  }
  return false;
}

std::optional<CopyPlan> planCopy(func::FuncOp function, func::ReturnOp ret, unsigned index) {
  auto role = function.getArgAttrOfType<StringAttr>(index, JitDialect::kRoleAttrName);
  BlockArgument master = function.getArgument(index);
  auto masterType = dyn_cast<RankedTensorType>(master.getType());
  if (!role || role.getValue() != "param" || !masterType || !masterType.getElementType().isF32() ||
      hasCopyAlready(function, index))
    return std::nullopt;

  CopyPlan plan;
  plan.master = index;
  for (OpOperand &use : master.getUses()) {
    Operation *user = use.getOwner();
    if (auto cast = dyn_cast<CastOp>(user)) {
      if (!isLowPrecisionTensor(cast.getType()) ||
          (plan.copyType && cast.getType() != plan.copyType))
        return std::nullopt; // read in fp32, or in two low-precision types
      plan.copyType = cast.getType();
      plan.casts.push_back(cast);
      continue;
    }
    if (Operation *update = updateWritingMaster(function, ret, use, index)) {
      if (plan.update && plan.update != update)
        return std::nullopt; // two updates of one master: not a step we understand
      plan.update = update;
      continue;
    }
    // The master returned unchanged as its own new value is not a read.
    if (user == ret.getOperation() && tiedArgumentOf(function, use.getOperandNumber()) == index)
      continue;
    return std::nullopt; // read in fp32
  }
  if (plan.casts.empty())
    return std::nullopt; // nothing to save
  return plan;
}

/// The same update, also reading `copy` and yielding the new copy (last).
Operation *withParamCopy(Operation *update, Value copy) {
  OpBuilder builder(update);
  Operation *replacement =
      llvm::TypeSwitch<Operation *, Operation *>(update)
          .Case([&](SgdUpdateOp sgd) {
            return SgdUpdateOp::create(builder, sgd.getLoc(), sgd.getParam(), sgd.getGrad(),
                                       sgd.getMomentumBuffer(), sgd.getStep(), sgd.getLr(),
                                       sgd.getInvScale(), sgd.getPredicate(), copy,
                                       sgd.getMomentumAttr(), sgd.getDampeningAttr(),
                                       sgd.getWeightDecayAttr(), sgd.getNesterovAttr(),
                                       sgd.getMaximizeAttr())
                .getOperation();
          })
          .Case([&](AdamUpdateOp adam) {
            return AdamUpdateOp::create(builder, adam.getLoc(), adam.getParam(), adam.getGrad(),
                                        adam.getExpAvg(), adam.getExpAvgSq(), adam.getMaxExpAvgSq(),
                                        adam.getStep(), adam.getLr(), adam.getInvScale(), adam.getPredicate(), copy,
                                        adam.getBeta1Attr(), adam.getBeta2Attr(),
                                        adam.getEpsAttr(), adam.getWeightDecayAttr(),
                                        adam.getDecoupledWeightDecayAttr(), adam.getMaximizeAttr())
                .getOperation();
          });
  // jit.op_id, jit.vjp_of and any other discardable attribute stay with the op.
  replacement->setDiscardableAttrs(update->getDiscardableAttrDictionary());
  // new_param_copy comes after every result the update had.
  for (auto [oldResult, newResult] : llvm::zip(update->getResults(), replacement->getResults()))
    oldResult.replaceAllUsesWith(newResult);
  update->erase();
  return replacement;
}

LogicalResult applyPlan(func::FuncOp function, func::ReturnOp ret, const CopyPlan &plan) {
  MLIRContext *context = function.getContext();
  Builder builder(context);
  unsigned copyIndex = function.getNumArguments();
  NamedAttrList copyAttrs;
  copyAttrs.append(JitDialect::kRoleAttrName, builder.getStringAttr("param"));
  copyAttrs.append(JitDialect::kDerivedFromAttrName, builder.getI64IntegerAttr(plan.master));
  Location copyLoc = function.getArgument(plan.master).getLoc();
  // A master a framework named (`loc("fc1.weight")`, which names plan buffers
  // and messages) names its copy after itself and the copy's type.
  if (auto name = dyn_cast<NameLoc>(copyLoc)) {
    std::string copyName = name.getName().str() + ".";
    llvm::raw_string_ostream(copyName) << cast<ShapedType>(plan.copyType).getElementType();
    copyLoc = NameLoc::get(builder.getStringAttr(copyName), name.getChildLoc());
  }
  if (failed(function.insertArgument(copyIndex, plan.copyType, copyAttrs.getDictionary(context),
                                     copyLoc)))
    return function.emitError() << "amp-master-weights could not add the low-precision copy of "
                                   "argument #"
                                << plan.master;
  BlockArgument copy = function.getArgument(copyIndex);
  for (CastOp cast : plan.casts) {
    cast.replaceAllUsesWith(copy);
    cast.erase();
  }
  if (!plan.update)
    return success();

  Operation *update = withParamCopy(plan.update, copy);
  Value newCopy = update->getResults().back();
  unsigned resultIndex = function.getNumResults();
  ret.getOperandsMutable().append(newCopy);
  NamedAttrList tiedAttrs;
  tiedAttrs.append(JitDialect::kTiedAttrName, builder.getI64IntegerAttr(copyIndex));
  if (failed(function.insertResult(resultIndex, plan.copyType, tiedAttrs.getDictionary(context))))
    return function.emitError() << "amp-master-weights could not return the new low-precision "
                                   "copy of argument #"
                                << plan.master;
  return success();
}

FailureOr<unsigned> addMasterWeightsTo(func::FuncOp function) {
  if (function.isDeclaration() || !function.getBody().hasOneBlock())
    return 0u;
  auto ret = dyn_cast<func::ReturnOp>(function.getBody().front().getTerminator());
  if (!ret)
    return 0u;
  // Plan first: new arguments go at the end, so the masters' indices hold.
  SmallVector<CopyPlan> plans;
  for (unsigned index = 0, count = function.getNumArguments(); index < count; ++index)
    if (std::optional<CopyPlan> plan = planCopy(function, ret, index))
      plans.push_back(std::move(*plan));
  for (const CopyPlan &plan : plans)
    if (failed(applyPlan(function, ret, plan)))
      return failure();
  return static_cast<unsigned>(plans.size());
}

struct AmpMasterWeightsPass : impl::AmpMasterWeightsBase<AmpMasterWeightsPass> {
  using AmpMasterWeightsBase::AmpMasterWeightsBase;

  void runOnOperation() override {
    if (failed(addMasterWeights(getOperation())))
      signalPassFailure();
  }
};

} // namespace

FailureOr<unsigned> addMasterWeights(ModuleOp module) {
  unsigned copies = 0;
  for (func::FuncOp function : module.getOps<func::FuncOp>()) {
    FailureOr<unsigned> added = addMasterWeightsTo(function);
    if (failed(added))
      return failure();
    copies += *added;
  }
  return copies;
}

} // namespace ampjit::ir::amp
