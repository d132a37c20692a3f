//===- PlanBuilder.h - an AMP-rewritten function to an ExecutionPlan -*- C++ -*-===//
//
// Walks one function of the jit/amp dialects and produces the runtime's plan:
// arguments become buffers with their jit.role (state updated in place through
// jit.tied results), constants become constant buffers, every other op one
// step built by the runtime's StepBuilder, and the temporaries are laid out in
// one arena by liveness, reusing bytes as soon as a value is dead.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_CODEGEN_PLANBUILDER_H
#define AMPJIT_CODEGEN_PLANBUILDER_H

#include "ampjit/Codegen/PlanOptions.h"
#include "ampjit/runtime/Plan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace ampjit::codegen {

/// Lowers `function` to a verified plan, or reports a located error on the op
/// (or argument) that cannot be lowered and fails.
mlir::FailureOr<runtime::Plan> buildPlan(mlir::func::FuncOp function, PlanOptions options = {});

/// The fusion of PlanOptions::fuseElementwise, on a plan whose arena is not
/// laid out yet; drops the buffers that became registers.
void fuseElementwiseSteps(runtime::Plan &plan);

/// The fusion of PlanOptions::fuseGemmEpilogues, on a plan whose arena is
/// not laid out yet (before elementwise fusion, which would take the add).
void fuseGemmEpilogues(runtime::Plan &plan);

/// The fusion of PlanOptions::fuseBatchNormEpilogues, on a plan whose arena
/// is not laid out yet (before elementwise fusion, which would take the add
/// and the relu).
void fuseBatchNormEpilogues(runtime::Plan &plan);

/// PlanOptions::fuseGradientAccumulation, on a plan whose arena is not laid
/// out yet (before elementwise fusion, which would take the add): an add of
/// two temporaries of one type, each read only by it, one last written by a
/// conv2d_grad_input step after the other was final, becomes that step's
/// 'accumulate' input, written in place, and the add goes. The sum is
/// rounded once instead of twice (the same bits for f32).
void fuseGradientAccumulation(runtime::Plan &plan);

/// Optimizer updates and finiteness checks read a gradient that is only
/// reshaped on its way to them (a 1x1 convolution's weight gradient in NHWC)
/// before its reshape, which goes: on a plan whose arena is not laid out yet.
/// Always run; every value stays bit for bit the same.
void readGradientsBeforeTheirReshape(runtime::Plan &plan);

/// A transpose whose result is first read by the finiteness check (a
/// convolution's weight gradient in NHWC moved back to OIHW) moves to just
/// before that check, so the gradients' transposes are consecutive there and
/// the CUDA backend runs them as one launch. Only where nothing between
/// writes what it reads or touches what it writes; on a plan whose arena is
/// not laid out yet. Always run: the values are the same.
void sinkGradientTransposesToTheirCheck(runtime::Plan &plan);

/// How many weight gradients may wait on the side lane at once
/// (overlapWeightGradients).
inline constexpr size_t kWeightGradientLag = 2;
/// A GEMM over more than this many flops fills the GPU on its own (about
/// 14 us at 600 TFLOP/s), so its weight gradient stays in line.
inline constexpr double kMaxSideGemmFlops = double(int64_t(1) << 33);
/// A convolution's input gradient runs beside the steps after it when at
/// least this many main-lane steps pass before one needs it
/// (overlapWeightGradients).
inline constexpr size_t kMinSideStepSpan = 3;

/// PlanOptions::overlapWeightGradients, on a plan whose steps are in their
/// final order and whose arena is not laid out yet (the layout keeps a side
/// step's buffers live until its join): each weight gradient after the
/// deferred steps (a conv2d_grad_weight step, or a gemm step of at most
/// kMaxSideGemmFlops, whose outputs only the finiteness check and the
/// optimizer read, through reshapes and transposes) becomes a side step
/// (runtime Plan::sideSteps), joined before the weight gradient `lag` places
/// later, or before the first step that must follow it, or at the end; one
/// that would join at the very next step stays in line. So does each bias
/// gradient: a reduction whose result only they read, of an input of at
/// least `reductionMinimumElements` elements, with the conversion right
/// before it that only it reads (the widening of an f16 output gradient:
/// both one launch on the CUDA backend), each joined `lag` bias gradients
/// later. Beside too goes each conv2d_grad_input step that at least
/// kMinSideStepSpan steps not beside pass before the first that must follow
/// it, joined there.
void overlapWeightGradients(runtime::Plan &plan, size_t lag = kWeightGradientLag,
                            int64_t reductionMinimumElements = PlanOptions{}.sideReductionMinimumElements);

/// What deferOptimizerUpdates did: the steps it deferred, or why none.
struct DeferralResult {
  size_t deferredSteps = 0;
  std::string whyNot{};
};
/// PlanOptions::deferOptimizerUpdates, on a plan whose arena is not laid out
/// yet (after the fusions): the optimizer update and what depends on it
/// become the plan's deferred steps (runtime Plan::deferredSteps), the values
/// they read from the run carried buffers. Leaves the plan unchanged and says
/// why when it updates fewer than `minimumElements` parameter elements or
/// cannot be deferred.
DeferralResult deferOptimizerUpdates(runtime::Plan &plan, int64_t minimumElements = 0);
/// The function of `module` to compile: the one named `name`, or the only
/// function with a body when `name` is empty.
mlir::FailureOr<mlir::func::FuncOp> findEntryFunction(mlir::ModuleOp module, llvm::StringRef name);

/// The runtime's view of an MLIR tensor type: nullopt for anything else, and
/// for a shape of more than runtime::kMaxElements elements.
std::optional<runtime::TensorType> toRuntimeType(mlir::Type type);

} // namespace ampjit::codegen

#endif // AMPJIT_CODEGEN_PLANBUILDER_H
