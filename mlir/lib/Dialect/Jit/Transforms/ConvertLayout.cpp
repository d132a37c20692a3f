//===- ConvertLayout.cpp - jit-convert-layout: NCHW steps run NHWC --------===//
//
// A traced step is NCHW (PyTorch's layout); cuDNN's fast convolution, pooling
// and batch-norm kernels want NHWC. The pass works in two phases.
//
// 1. Convert. Every NCHW conv/pool op (forward and gradient) becomes its
//    `layout = nhwc` form and every batch-norm op on a rank-4 value with
//    axis 1 takes axis 3. Its activation and filter operands are transposed
//    in with perm [0, 2, 3, 1] (NCHW -> NHWC; for filters OIHW -> OHWI, the
//    same perm) and its activation (or filter-gradient) result transposed
//    back out with [0, 3, 1, 2]. Each value is transposed in once, right after
//    its definition, however many converted ops read it (a filter feeds both
//    jit.conv2d and jit.conv2d_grad_input). After this phase every original
//    value still has its original type, so the rest of the function is
//    untouched and already correct.
//
// 2. Cancel. Rewrite patterns move the transposes until the ones between two
//    converted ops meet their inverse:
//      - T(T(x, r), q) = T(x, r o q), and x itself when that is the identity
//        (jit.transpose's own folder only removes identity perms);
//      - a transpose that moves only size-1 dimensions keeps the row-major
//        order of the elements: it is a jit.reshape (reshapes of reshapes
//        merge); a transpose of a splat is a splat;
//      - T(broadcast_to(x), q) = broadcast_to(T(x, q)): x is small (with
//        leading 1s added when its rank is lower);
//      - sinking: op(T(a, p), T(b, p)) = T(op(a, b), p) for an elementwise op
//        (see isElementwise); a 1x1 activation's transposes are reshapes,
//        and those out of NHWC sink the same way (SinkReshapeThroughElementwise); Rank-0 operands broadcast the same in any
//        layout and stay; every other operand is transposed by p^-1, which
//        is free when it composes away, only moves size-1 dimensions, lands
//        on a splat or moves into a broadcast_to (transposeOperand);
//      - hoisting: T(op(bcast, splat, ...), q) = op(bcast(T(x)), ...) when no
//        operand of op needs a real transpose (a mean's gradient is
//        broadcast_to(reshape(g)) * (1/HW): its transpose becomes a reshape
//        of g);
//      - jit.sum / jit.mean / jit.max over axes of T(x, p) reduce x over the
//        permuted axes, with a transpose after only when the kept dimensions
//        change order (a keepdim result that needs one is a reshape when it
//        only moves the size-1 dimensions).
//    A transpose that one of the first three rules rewrites is rewritten
//    before anything sinks through it, and the rewrites never make such a
//    transpose for an operand, so sinking and hoisting cannot undo each
//    other. Then, with sinking off, T(op(x), p) becomes op(T(x, p)) when
//    T(x, p) exists anyway (an f16 filter gradient feeding its update and
//    returned in f32), and duplicate transposes and reshapes of one value
//    are merged.
//
// What is left is at the edges of the convolutional part: the network input
// and each filter (transposed in), each filter gradient that leaves for the
// optimizer or as a result (transposed out), and activations or gradients
// that pass through an op with no NHWC form (a jit.reshape to a classifier,
// a softmax over channels, a function result).
//
// Exactness. The pass only moves data: every op computes the same elements
// from the same elements. Elementwise ops do not care where an element sits.
// The CPU conv, pool and batch-norm kernels compute in a canonical order
// whatever the layout (runtime/lib/cpu). Reductions sum in row-major order
// of the reduced index, so a reduction is rewritten only when the permuted
// axes keep their relative order ([N,C,H,W] over [2, 3] becomes [N,H,W,C]
// over [1, 2]: h before w in both); otherwise the transpose stays.
//
// When to sink. Sinking removes the transposes of the operands that carry p
// (n_t of them) and adds one after the op, plus one for each other operand
// that needs a real transpose (n_c). It is done when n_c < n_t, and on a tie
// only for p = [0, 3, 1, 2], the transpose out of NHWC: a gradient entering
// the convolutional part from a classifier (relu_grad(reshape(dflat), T(y)))
// must take the transpose into NHWC with it, so that the one leaving the
// ReLU's gradient cancels at the next convolution's gradient. Allowing ties
// in only one direction is also what keeps the rewrite from undoing itself.
//
//===----------------------------------------------------------------------===//

#include "ampjit/Dialect/Amp/IR/AmpOps.h"
#include "ampjit/Dialect/Jit/IR/JitOps.h"
#include "ampjit/Dialect/Jit/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>

namespace ampjit::ir {

#define GEN_PASS_DEF_JITCONVERTLAYOUT
#include "ampjit/Dialect/Jit/Transforms/Passes.h.inc"

using namespace mlir;

namespace {

/// NCHW -> NHWC, and OIHW -> OHWI for filters.
constexpr int64_t kToNhwc[] = {0, 2, 3, 1};
/// NHWC -> NCHW.
constexpr int64_t kToNchw[] = {0, 3, 1, 2};

//===----------------------------------------------------------------------===//
// Permutations
//===----------------------------------------------------------------------===//

/// The shape of transpose(x, perm) for x of `shape`: dimension i is perm[i].
SmallVector<int64_t> permuteShape(ArrayRef<int64_t> shape, ArrayRef<int64_t> perm) {
  SmallVector<int64_t> result;
  for (int64_t dim : perm)
    result.push_back(shape[dim]);
  return result;
}

RankedTensorType permuteType(Type type, ArrayRef<int64_t> perm) {
  auto tensor = cast<RankedTensorType>(type);
  return RankedTensorType::get(permuteShape(tensor.getShape(), perm), tensor.getElementType());
}

SmallVector<int64_t> invertPerm(ArrayRef<int64_t> perm) {
  SmallVector<int64_t> inverse(perm.size());
  for (auto [index, dim] : llvm::enumerate(perm))
    inverse[dim] = int64_t(index);
  return inverse;
}

/// transpose(transpose(x, first), then) = transpose(x, composePerms(first, then)).
SmallVector<int64_t> composePerms(ArrayRef<int64_t> first, ArrayRef<int64_t> then) {
  SmallVector<int64_t> result;
  for (int64_t dim : then)
    result.push_back(first[dim]);
  return result;
}

bool isIdentityPerm(ArrayRef<int64_t> perm) {
  for (auto [index, dim] : llvm::enumerate(perm))
    if (int64_t(index) != dim)
      return false;
  return true;
}

/// Transposing a tensor of `shape` by `perm` keeps its elements in row-major
/// order when the dimensions larger than 1 keep their relative order: the
/// transpose is then a reshape.
bool movesOnlyUnitDims(ArrayRef<int64_t> shape, ArrayRef<int64_t> perm) {
  int64_t last = -1;
  for (int64_t dim : perm) {
    if (shape[dim] == 1)
      continue;
    if (dim < last)
      return false;
    last = dim;
  }
  return true;
}

ArrayRef<int64_t> shapeOf(Value value) { return cast<RankedTensorType>(value.getType()).getShape(); }
int64_t rankOf(Value value) { return cast<RankedTensorType>(value.getType()).getRank(); }

//===----------------------------------------------------------------------===//
// Phase 1: convert the layout-aware ops
//===----------------------------------------------------------------------===//

class LayoutConverter {
public:
  /// Converts every NCHW op of `function`; returns how many it converted.
  unsigned run(func::FuncOp function) {
    SmallVector<Operation *> ops;
    function.walk([&](Operation *op) {
      if (needsConversion(op))
        ops.push_back(op);
    });
    for (Operation *op : ops)
      convert(op);
    return unsigned(ops.size());
  }

private:
  static bool isNchwBatchNorm(Value input, int64_t axis) { return axis == 1 && rankOf(input) == 4; }

  static bool needsConversion(Operation *op) {
    return llvm::TypeSwitch<Operation *, bool>(op)
        .Case<Conv2dOp, Conv2dGradInputOp, Conv2dGradWeightOp, MaxPool2dOp, AvgPool2dOp,
              MaxPool2dGradOp, AvgPool2dGradOp>(
            [](auto windowed) { return windowed.getLayout() == ActivationLayout::nchw; })
        .Case<BatchNormOp, BatchNormInferenceOp>(
            [](auto norm) { return isNchwBatchNorm(norm.getInput(), int64_t(norm.getAxis())); })
        .Case<BatchNormGradOp>(
            [](BatchNormGradOp norm) { return isNchwBatchNorm(norm.getInput(), int64_t(norm.getAxis())); })
        .Default([](Operation *) { return false; });
  }

  void convert(Operation *op) {
    llvm::TypeSwitch<Operation *>(op)
        .Case<Conv2dOp>([&](Conv2dOp conv) {
          // The bias is [O] in both layouts.
          rewrite(op, {&conv.getInputMutable(), &conv.getWeightMutable()},
                  [&] { conv.setLayout(ActivationLayout::nhwc); });
        })
        .Case<Conv2dGradInputOp>([&](Conv2dGradInputOp grad) {
          rewrite(op, {&grad.getGradOutputMutable(), &grad.getWeightMutable()},
                  [&] { grad.setLayout(ActivationLayout::nhwc); });
        })
        .Case<Conv2dGradWeightOp>([&](Conv2dGradWeightOp grad) {
          // The result is a filter: OHWI comes back out to OIHW with the same perm.
          rewrite(op, {&grad.getGradOutputMutable(), &grad.getInputMutable()},
                  [&] { grad.setLayout(ActivationLayout::nhwc); });
        })
        .Case<MaxPool2dOp, AvgPool2dOp>([&](auto pool) {
          rewrite(op, {&pool.getInputMutable()}, [&] { pool.setLayout(ActivationLayout::nhwc); });
        })
        .Case<MaxPool2dGradOp, AvgPool2dGradOp>([&](auto grad) {
          rewrite(op, {&grad.getGradOutputMutable(), &grad.getInputMutable()},
                  [&] { grad.setLayout(ActivationLayout::nhwc); });
        })
        .Case<BatchNormOp, BatchNormInferenceOp>([&](auto norm) {
          // Only the output is an activation; statistics and parameters are [C].
          rewrite(op, {&norm.getInputMutable()}, [&] { norm.setAxis(3); });
        })
        .Case<BatchNormGradOp>([&](BatchNormGradOp grad) {
          rewrite(op, {&grad.getGradOutputMutable(), &grad.getInputMutable()}, [&] { grad.setAxis(3); });
        });
  }

  /// Transposes `operands` into NHWC, lets `setLayout` switch the op, and
  /// transposes its first result (the activation or filter gradient; every
  /// other result is per channel) back out for its users.
  void rewrite(Operation *op, ArrayRef<OpOperand *> operands, llvm::function_ref<void()> setLayout) {
    for (OpOperand *operand : operands)
      operand->set(toNhwc(operand->get()));
    setLayout();
    Value result = op->getResult(0);
    result.setType(permuteType(result.getType(), kToNhwc));
    OpBuilder builder(op->getContext());
    builder.setInsertionPointAfter(op);
    auto back = TransposeOp::create(builder, op->getLoc(), result, kToNchw);
    result.replaceAllUsesExcept(back, back);
  }

  /// The one NHWC copy of `value`, placed right after its definition so that
  /// it dominates every op that reads it.
  Value toNhwc(Value value) {
    auto found = transposed.find(value);
    if (found != transposed.end())
      return found->second;
    OpBuilder builder(value.getContext());
    auto argument = dyn_cast<BlockArgument>(value);
    if (!argument)
      builder.setInsertionPointAfter(value.getDefiningOp());
    else if (lastArgumentCopy && lastArgumentCopy->getBlock() == argument.getOwner())
      builder.setInsertionPointAfter(lastArgumentCopy); // arguments' copies in order of first use
    else
      builder.setInsertionPointToStart(argument.getOwner());
    auto copy = TransposeOp::create(builder, value.getLoc(), value, kToNhwc);
    if (argument)
      lastArgumentCopy = copy;
    transposed[value] = copy;
    return copy;
  }

  DenseMap<Value, Value> transposed;
  Operation *lastArgumentCopy = nullptr;
};

//===----------------------------------------------------------------------===//
// Phase 2: cancel the transposes
//===----------------------------------------------------------------------===//

/// Ops that compute each result element from the elements at the same index
/// of their operands (after numpy broadcasting), and so give the same values
/// in any layout. Ops with an axis (softmax and its gradient) have the same
/// operand and result types but are not elementwise; jit.dropout draws its
/// random numbers by linear index, so it is not either.
bool isElementwise(Operation *op) {
  if (op->getNumResults() != 1 || op->getNumRegions() != 0 || op->getNumOperands() == 0)
    return false;
  if (!isa<RankedTensorType>(op->getResult(0).getType()))
    return false;
  if (isa<AddOp, SubOp, MulOp, DivOp, CompareOp, SelectOp, ConvertOp, amp::CastOp>(op))
    return true;
  if (isa<SoftmaxOp, LogSoftmaxOp, SoftmaxGradOp, LogSoftmaxGradOp>(op))
    return false;
  return isa<JitDialect>(op->getDialect()) && op->hasTrait<OpTrait::SameOperandsAndResultType>() &&
         !op->hasAttr("axis") && !op->hasAttr("axes");
}

bool isSplatConstant(Value value) {
  DenseElementsAttr attr;
  return matchPattern(value, m_Constant(&attr)) && attr.isSplat();
}

/// The shape `value` broadcasts as in an op of rank `rank`: leading 1s added
/// (numpy broadcasting aligns shapes from the right).
SmallVector<int64_t> extendedShape(Value value, int64_t rank) {
  SmallVector<int64_t> shape(size_t(rank - rankOf(value)), 1);
  llvm::append_range(shape, shapeOf(value));
  return shape;
}

/// Whether transpose(value, perm) needs no real transpose of its data: a
/// rank-0 value stays as it is (it broadcasts the same in any layout), a
/// splat is a splat of the new shape, a broadcast_to moves the transpose onto
/// its small input, a transpose composes into the identity or a reshape, and
/// a transpose that moves only size-1 dimensions is a reshape. `rank` is the
/// rank the value is used at (an elementwise op's result rank).
bool isFreeToTranspose(Value value, ArrayRef<int64_t> perm, int64_t rank) {
  if (rankOf(value) == 0 || isSplatConstant(value) || value.getDefiningOp<BroadcastToOp>())
    return true;
  if (auto inner = value.getDefiningOp<TransposeOp>()) {
    if (rankOf(value) != rank)
      return false;
    SmallVector<int64_t> composed = composePerms(inner.getPerm(), perm);
    return isIdentityPerm(composed) || movesOnlyUnitDims(shapeOf(inner.getInput()), composed);
  }
  return movesOnlyUnitDims(extendedShape(value, rank), perm);
}

/// A transpose that another rewrite removes or replaces (see
/// isFreeToTranspose; a transpose of a transpose composes).
bool isSimplifiable(TransposeOp op) {
  return op.getInput().getDefiningOp<TransposeOp>() ||
         isFreeToTranspose(op.getInput(), op.getPerm(), int64_t(op.getPerm().size()));
}

/// transpose(value, perm) for `value` used at rank `perm.size()` (with
/// leading 1s when its rank is lower), built without a transpose op wherever
/// isFreeToTranspose says one is not needed. A transpose op is made only for
/// a value that really needs one, so an op whose operands were all free to
/// transpose gets no transposed operand that would let the transpose sink
/// straight back.
Value transposeOperand(PatternRewriter &rewriter, Location loc, Value value, ArrayRef<int64_t> perm) {
  if (rankOf(value) == 0)
    return value;
  auto type = cast<RankedTensorType>(value.getType());
  int64_t rank = int64_t(perm.size());
  SmallVector<int64_t> shape = extendedShape(value, rank);
  auto result = RankedTensorType::get(permuteShape(shape, perm), type.getElementType());
  DenseElementsAttr splat;
  if (matchPattern(value, m_Constant(&splat)) && splat.isSplat())
    return ConstantOp::create(rewriter, loc, result, cast<ElementsAttr>(splat.resizeSplat(result)));
  if (auto broadcast = value.getDefiningOp<BroadcastToOp>()) {
    Value small = transposeOperand(rewriter, loc, broadcast.getInput(), perm);
    return BroadcastToOp::create(rewriter, loc, result, small);
  }
  if (type.getRank() < rank)
    value = ReshapeOp::create(rewriter, loc, RankedTensorType::get(shape, type.getElementType()), value);
  SmallVector<int64_t> effective(perm);
  if (auto inner = value.getDefiningOp<TransposeOp>()) {
    effective = composePerms(inner.getPerm(), perm);
    value = inner.getInput();
    if (isIdentityPerm(effective))
      return value;
  }
  if (movesOnlyUnitDims(shapeOf(value), effective))
    return ReshapeOp::create(rewriter, loc, result, value);
  return TransposeOp::create(rewriter, loc, value, effective);
}

/// Clones the elementwise `op` before the rewriter's insertion point with
/// `operands`, its result transposed by `perm` from the original's.
Value cloneElementwise(PatternRewriter &rewriter, Operation *op, ValueRange operands,
                       ArrayRef<int64_t> perm) {
  Operation *clone = rewriter.clone(*op);
  clone->setOperands(operands);
  clone->getResult(0).setType(permuteType(op->getResult(0).getType(), perm));
  return clone->getResult(0);
}

/// Identity transposes, transposes of transposes, of splats, of broadcasts,
/// and those that move only size-1 dimensions (see transposeOperand).
struct SimplifyTranspose : OpRewritePattern<TransposeOp> {
  SimplifyTranspose(MLIRContext *context) : OpRewritePattern(context, /*benefit=*/10) {}

  LogicalResult matchAndRewrite(TransposeOp op, PatternRewriter &rewriter) const override {
    if (!isIdentityPerm(op.getPerm()) && !isSimplifiable(op))
      return failure();
    rewriter.replaceOp(op, transposeOperand(rewriter, op.getLoc(), op.getInput(), op.getPerm()));
    return success();
  }
};

/// reshape(reshape(x)) -> reshape(x), and x itself when the types match.
struct MergeReshapes : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ReshapeOp op, PatternRewriter &rewriter) const override {
    Value input = op.getInput();
    if (auto inner = input.getDefiningOp<ReshapeOp>())
      input = inner.getInput();
    if (input.getType() == op.getType()) {
      rewriter.replaceOp(op, input);
      return success();
    }
    if (input == op.getInput())
      return failure();
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), input);
    return success();
  }
};

/// op(T(a, p), T(b, p)) -> T(op(a, b), p) for elementwise ops (see "When to
/// sink" at the top of the file).
struct SinkTransposeThroughElementwise : RewritePattern {
  SinkTransposeThroughElementwise(MLIRContext *context)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, context) {}

  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    if (!isElementwise(op))
      return failure();
    auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
    int64_t rank = resultType.getRank();
    // Transposes another pattern simplifies go first: what is left of them
    // decides whether to sink.
    SmallVector<int64_t> perm;
    for (Value operand : op->getOperands()) {
      auto transpose = operand.getDefiningOp<TransposeOp>();
      if (!transpose)
        continue;
      if (isSimplifiable(transpose))
        return failure();
      if (perm.empty() && transpose.getType().getShape() == resultType.getShape())
        perm.assign(transpose.getPerm().begin(), transpose.getPerm().end());
    }
    if (perm.empty())
      return failure();
    SmallVector<int64_t> inverse = invertPerm(perm);
    int64_t removed = 0, added = 0;
    for (Value operand : op->getOperands()) {
      auto transpose = operand.getDefiningOp<TransposeOp>();
      if (transpose && transpose.getPerm() == ArrayRef<int64_t>(perm) &&
          transpose.getType().getShape() == resultType.getShape())
        ++removed;
      else if (!isFreeToTranspose(operand, inverse, rank))
        ++added;
    }
    if (!(added < removed || (added == removed && ArrayRef<int64_t>(perm) == ArrayRef<int64_t>(kToNchw))))
      return failure();

    SmallVector<Value> operands;
    for (Value operand : op->getOperands())
      operands.push_back(transposeOperand(rewriter, op->getLoc(), operand, inverse));
    Value inner = cloneElementwise(rewriter, op, operands, inverse);
    rewriter.replaceOpWithNewOp<TransposeOp>(op, inner, perm);
    return success();
  }
};

/// op(R(a), b) -> R(op(a, R'(b))) for an elementwise op with an operand
/// R(a) that is a reshape out of NHWC: on 1x1 activations (the last stage of
/// a ResNet on 32x32 images) the transposes in and out of NHWC move only
/// size-1 dimensions and became reshapes (SimplifyTranspose), which must
/// still sink through the relus, residual adds and relu gradients to meet
/// their inverses, or the batch norms there keep their relus apart. Reshapes
/// cost nothing here (isFreeToTranspose counts them free too), so the other
/// full-size operands are reshaped alike (a reshape of a reshape merges);
/// rank-0 operands stay and splats are rebuilt. A reshape only reinterprets
/// the row-major order, so operands reshaped alike keep each element with
/// its partners. Reshapes only ever sink out of NHWC, and the ones made for
/// other operands go into it, so nothing sinks back.
struct SinkReshapeThroughElementwise : RewritePattern {
  SinkReshapeThroughElementwise(MLIRContext *context)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, context) {}

  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    if (!isElementwise(op))
      return failure();
    auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
    ArrayRef<int64_t> resultShape = resultType.getShape();
    std::optional<SmallVector<int64_t>> nhwc;
    for (Value operand : op->getOperands()) {
      if (operand.getDefiningOp<TransposeOp>())
        return failure(); // a real transpose: SinkTransposeThroughElementwise's case
      if (rankOf(operand) == 0 || isSplatConstant(operand))
        continue;
      if (shapeOf(operand) != resultShape)
        return failure(); // broadcasting
      auto reshape = operand.getDefiningOp<ReshapeOp>();
      if (!reshape || nhwc)
        continue;
      ArrayRef<int64_t> source = shapeOf(reshape.getInput());
      if (source.size() == 4 && source != resultShape &&
          ArrayRef<int64_t>(permuteShape(source, kToNchw)) == resultShape)
        nhwc = SmallVector<int64_t>(source);
    }
    if (!nhwc)
      return failure();

    SmallVector<Value> operands;
    for (Value operand : op->getOperands()) {
      DenseElementsAttr splat;
      if (rankOf(operand) == 0) {
        operands.push_back(operand);
      } else if (matchPattern(operand, m_Constant(&splat)) && splat.isSplat()) {
        auto type = RankedTensorType::get(*nhwc, splat.getElementType());
        operands.push_back(ConstantOp::create(rewriter, op->getLoc(), type, cast<ElementsAttr>(splat.resizeSplat(type))));
      } else {
        Value input = operand;
        if (auto reshape = operand.getDefiningOp<ReshapeOp>())
          input = reshape.getInput();
        auto type = RankedTensorType::get(*nhwc, cast<RankedTensorType>(input.getType()).getElementType());
        operands.push_back(input.getType() == type ? input : ReshapeOp::create(rewriter, op->getLoc(), type, input));
      }
    }
    Operation *inner = rewriter.clone(*op);
    inner->setOperands(operands);
    inner->getResult(0).setType(RankedTensorType::get(*nhwc, resultType.getElementType()));
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, resultType, inner->getResult(0));
    return success();
  }
};

/// T(op(x...), q) -> op(T(x, q)...) for an elementwise op read only by the
/// transpose whose operands are all free to transpose (broadcasts, splats,
/// rank-0 values): the full-size transpose disappears.
struct HoistTransposeAboveElementwise : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(TransposeOp op, PatternRewriter &rewriter) const override {
    Operation *producer = op.getInput().getDefiningOp();
    if (!producer || !isElementwise(producer) || !producer->hasOneUse())
      return failure();
    ArrayRef<int64_t> perm = op.getPerm();
    for (Value operand : producer->getOperands())
      if (!isFreeToTranspose(operand, perm, int64_t(perm.size())))
        return failure();
    SmallVector<Value> operands;
    for (Value operand : producer->getOperands())
      operands.push_back(transposeOperand(rewriter, op.getLoc(), operand, perm));
    rewriter.replaceOp(op, cloneElementwise(rewriter, producer, operands, perm));
    return success();
  }
};

/// The transpose of `value` by `perm` that the function already has, if any.
TransposeOp existingTranspose(Value value, ArrayRef<int64_t> perm) {
  for (Operation *user : value.getUsers())
    if (auto transpose = dyn_cast<TransposeOp>(user); transpose && transpose.getPerm() == perm)
      return transpose;
  return nullptr;
}

/// The last cleanup, run once the transposes have settled: T(op(x), p) ->
/// op(T(x, p)) when T(x, p) already exists (it is reused, moved up to x's
/// definition so that it dominates) and op is elementwise, read only by the
/// transpose, with every other operand free to transpose. A filter gradient
/// in f16 that feeds its update as it is and is also returned in f32 gets
/// one transpose instead of two. Not run with the sinking pattern, which
/// would undo it.
struct ReuseTransposeAboveElementwise : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(TransposeOp op, PatternRewriter &rewriter) const override {
    Operation *producer = op.getInput().getDefiningOp();
    if (!producer || !isElementwise(producer) || !producer->hasOneUse())
      return failure();
    ArrayRef<int64_t> perm = op.getPerm();
    auto resultShape = cast<RankedTensorType>(producer->getResult(0).getType()).getShape();
    SmallVector<TransposeOp> reused;
    for (Value operand : producer->getOperands()) {
      TransposeOp existing;
      if (shapeOf(operand) == resultShape)
        existing = existingTranspose(operand, perm);
      if (!existing && !isFreeToTranspose(operand, perm, int64_t(perm.size())))
        return failure();
      reused.push_back(existing);
    }
    if (llvm::none_of(reused, [](TransposeOp existing) { return bool(existing); }))
      return failure();
    SmallVector<Value> operands;
    for (auto [operand, existing] : llvm::zip_equal(producer->getOperands(), reused)) {
      if (!existing) {
        operands.push_back(transposeOperand(rewriter, op.getLoc(), operand, perm));
        continue;
      }
      if (Operation *definition = operand.getDefiningOp())
        rewriter.moveOpAfter(existing, definition);
      else if (Operation *first = &cast<BlockArgument>(operand).getOwner()->front(); first != existing)
        rewriter.moveOpBefore(existing, first);
      operands.push_back(existing);
    }
    rewriter.replaceOp(op, cloneElementwise(rewriter, producer, operands, perm));
    return success();
  }
};

/// sum/mean/max over axes of T(x, p) -> the same reduction of x over the
/// permuted axes, when they keep their relative order (so the row-major
/// order of the reduced index, and every rounding, is the same).
template <typename ReduceOp>
struct ReduceTransposed : OpRewritePattern<ReduceOp> {
  using OpRewritePattern<ReduceOp>::OpRewritePattern;

  LogicalResult matchAndRewrite(ReduceOp op, PatternRewriter &rewriter) const override {
    auto transpose = op.getInput().template getDefiningOp<TransposeOp>();
    if (!transpose)
      return failure();
    ArrayRef<int64_t> perm = transpose.getPerm();
    SmallVector<int64_t> axes;
    for (int64_t axis : op.getAxes()) {
      if (!axes.empty() && perm[axis] < axes.back())
        return failure();
      axes.push_back(perm[axis]);
    }
    Value input = transpose.getInput();
    ArrayRef<int64_t> inputShape = shapeOf(input);
    bool keepdim = op.getKeepdim();
    SmallVector<int64_t> shape, kept;
    for (int64_t dim = 0; dim < int64_t(inputShape.size()); ++dim) {
      bool reduced = llvm::is_contained(axes, dim);
      if (!reduced)
        kept.push_back(dim);
      if (!reduced || keepdim)
        shape.push_back(reduced ? 1 : inputShape[dim]);
    }
    auto reduce = cast<ReduceOp>(rewriter.clone(*op));
    reduce.getInputMutable().assign(input);
    reduce.setAxes(axes);
    reduce.getResult().setType(
        RankedTensorType::get(shape, cast<RankedTensorType>(op.getType()).getElementType()));

    // Where each dimension of the original result is in the new one.
    SmallVector<int64_t> resultPerm;
    if (keepdim) {
      resultPerm.assign(perm.begin(), perm.end());
    } else {
      for (int64_t dim = 0; dim < int64_t(perm.size()); ++dim)
        if (!llvm::is_contained(op.getAxes(), dim))
          resultPerm.push_back(llvm::find(kept, perm[dim]) - kept.begin());
    }
    if (isIdentityPerm(resultPerm))
      rewriter.replaceOp(op, reduce.getResult());
    else
      rewriter.replaceOp(op, transposeOperand(rewriter, op.getLoc(), reduce.getResult(), resultPerm));
    return success();
  }
};

/// One transpose (reshape) per (value, perm (type)): the patterns make one
/// per reader. The survivor moves right after the value's definition, where
/// it dominates every reader of the others.
void mergeDuplicateMoves(func::FuncOp function) {
  llvm::MapVector<std::pair<Value, Attribute>, SmallVector<Operation *>> groups;
  function.walk([&](Operation *op) {
    if (auto transpose = dyn_cast<TransposeOp>(op))
      groups[{transpose.getInput(), transpose.getPermAttr()}].push_back(op);
    else if (auto reshape = dyn_cast<ReshapeOp>(op))
      groups[{reshape.getInput(), TypeAttr::get(reshape.getType())}].push_back(op);
  });
  for (auto &[key, ops] : groups) {
    if (ops.size() < 2)
      continue;
    Operation *survivor = ops.front();
    Value input = key.first;
    if (Operation *definition = input.getDefiningOp())
      survivor->moveAfter(definition);
    else if (Operation *first = &cast<BlockArgument>(input).getOwner()->front(); first != survivor)
      survivor->moveBefore(first);
    for (Operation *duplicate : llvm::drop_begin(ops)) {
      duplicate->replaceAllUsesWith(survivor);
      duplicate->erase();
    }
  }
}

struct JitConvertLayoutPass : impl::JitConvertLayoutBase<JitConvertLayoutPass> {
  using Base::Base;

  void runOnOperation() override {
    if (layout == "nchw")
      return;
    if (layout != "nhwc") {
      getOperation().emitError() << "jit-convert-layout: unknown layout '" << layout
                                 << "': expected nhwc or nchw";
      return signalPassFailure();
    }
    MLIRContext *context = &getContext();
    RewritePatternSet patterns(context);
    patterns.add<SimplifyTranspose, MergeReshapes, SinkTransposeThroughElementwise,
                 SinkReshapeThroughElementwise, HoistTransposeAboveElementwise, ReduceTransposed<SumOp>, ReduceTransposed<MeanOp>,
                 ReduceTransposed<MaxOp>>(context);
    FrozenRewritePatternSet frozen(std::move(patterns));
    RewritePatternSet cleanupPatterns(context);
    cleanupPatterns.add<ReuseTransposeAboveElementwise, SimplifyTranspose, MergeReshapes>(context);
    FrozenRewritePatternSet cleanup(std::move(cleanupPatterns));

    for (func::FuncOp function : getOperation().getOps<func::FuncOp>()) {
      if (function.isExternal())
        continue;
      // A function without NCHW ops is left exactly as it is (its own
      // transposes included).
      if (LayoutConverter().run(function) == 0)
        continue;
      // Only data movement is rewritten: no folding (it would also fold the
      // step's own constants) and no region simplification. Every rewrite
      // removes transposes or moves them toward the function's results, so
      // the rewrites are bounded by a small multiple of the ops; the bound
      // only guards against a case the argument missed, and each rewrite
      // keeps the function correct, so hitting it costs speed, not results.
      int64_t ops = 0;
      function.walk([&](Operation *) { ++ops; });
      GreedyRewriteConfig config;
      config.enableFolding(false)
          .enableConstantCSE(false)
          .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled)
          .setMaxNumRewrites(64 * ops + 1024);
      if (failed(applyPatternsGreedily(function.getBody(), frozen, config)) ||
          failed(applyPatternsGreedily(function.getBody(), cleanup, config)))
        function.emitWarning() << "jit-convert-layout: transposes did not settle within "
                               << 64 * ops + 1024 << " rewrites; some stay between NHWC ops";
      mergeDuplicateMoves(function);
    }
  }
};

} // namespace

} // namespace ampjit::ir
