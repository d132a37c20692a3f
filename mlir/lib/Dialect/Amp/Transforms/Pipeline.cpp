//===- Pipeline.cpp - amp-pipeline: the whole AMP sequence ----------------===//
//
// Runs the rewrites as functions rather than as nested passes so that one
// report covers them all (decisions from auto-cast, casts removed by fusion
// and cleanup, copies made by master weights).
//
//===----------------------------------------------------------------------===//

#include "ampjit/Dialect/Amp/IR/AmpOps.h"
#include "ampjit/Dialect/Amp/Transforms/AmpRewrites.h"
#include "ampjit/Dialect/Amp/Transforms/Passes.h"
#include "ampjit/Dialect/Jit/IR/JitOps.h"
#include "ampjit/Dialect/Jit/IR/ShapeInference.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

namespace ampjit::ir::amp {

#define GEN_PASS_DEF_AMPPIPELINE
#include "ampjit/Dialect/Amp/Transforms/Passes.h.inc"

using namespace mlir;

namespace {

/// Identity jit.converts have said what they had to (the precision the user
/// wrote, for autoCast): they go before the cleanup.
void removeIdentityConversions(ModuleOp module) {
  module.walk([](ampjit::ir::ConvertOp convert) {
    if (convert.getInput().getType() != convert.getType())
      return;
    convert.getResult().replaceAllUsesWith(convert.getInput());
    convert->erase();
  });
}

/// A conversion that widens exactly (f16 or bf16 to f32: a trace widens an
/// f16 batch so that it meets the fp32 weights, and the user's own
/// x.half().float() ends so) is the cast AMP would have made. As one,
/// fuse-casts folds it into the casts around it, and an f16 batch that a
/// painted matmul reads in f16 is read as it came, with no pass over it.
void widenExactConversionsToCasts(ModuleOp module) {
  module.walk([](ampjit::ir::ConvertOp convert) {
    if (!ampjit::ir::isExactWidening(getElementTypeOrSelf(convert.getInput().getType()),
                                     getElementTypeOrSelf(convert.getType())))
      return;
    OpBuilder builder(convert);
    auto cast = CastOp::create(builder, convert.getLoc(), convert.getType(), convert.getInput());
    convert.getResult().replaceAllUsesWith(cast.getResult());
    convert->erase();
  });
}

unsigned countCasts(ModuleOp module) {
  unsigned count = 0;
  module.walk([&](CastOp) { ++count; });
  return count;
}

struct AmpPipelinePass : impl::AmpPipelineBase<AmpPipelinePass> {
  using AmpPipelineBase::AmpPipelineBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto emitError = [&] { return mlir::emitError(module.getLoc()); };
    FailureOr<AmpConfig> config =
        AmpConfig::parse(level, dtype, semantics, target, policy, &getContext(), emitError);
    if (failed(config))
      return signalPassFailure();

    bool lowPrecisionParameters = config->level == AmpLevel::O2 || config->level == AmpLevel::O3;
    bool withMasterWeights = lowPrecisionParameters;
    if (masterWeights == "on") {
      if (!lowPrecisionParameters) {
        emitError() << "master-weights=on needs level O2 or O3: at "
                    << stringifyAmpLevel(config->level)
                    << " parameters are read in fp32 (or cast per use), so there is no "
                       "low-precision copy to keep";
        return signalPassFailure();
      }
    } else if (masterWeights == "off") {
      withMasterWeights = false;
    } else if (masterWeights != "auto") {
      emitError() << "unknown master-weights value '" << masterWeights
                  << "': expected auto, on or off";
      return signalPassFailure();
    }
    // The copies are the casts kept from one step to the next: the update
    // writes round_to_nearest_even(new master), which is what the next
    // step's cast would compute, so no value changes.
    if (keepParameterCasts) {
      if (config->level == AmpLevel::O0) {
        emitError() << "keep-parameter-casts needs level O1, O2 or O3: at O0 no parameter is cast";
        return signalPassFailure();
      }
      withMasterWeights = true;
    }

    // Fold first, so the painting sees the graph the step computes: a
    // traced backward seeds the scaled loss with 1 and scales that seed
    // (amp.scale_loss 1, %scale), which is the scale itself.
    OpPassManager fold(ModuleOp::getOperationName());
    fold.addPass(createCanonicalizerPass());
    if (failed(runPipeline(fold, module)))
      return signalPassFailure();

    AmpReport report;
    if (failed(autoCast(module, *config, &report, remarks)))
      return signalPassFailure();
    if (config->level != AmpLevel::O0)
      widenExactConversionsToCasts(module);
    unsigned castsAfterAutoCast = countCasts(module);

    // Fusion first as well, so that a parameter read through a cast chain
    // (cast of a transpose) is seen as read only through casts.
    fuseCasts(module, *config->policy, foldRoundTrips);
    if (withMasterWeights && failed(addMasterWeights(module)))
      return signalPassFailure();
    fuseCasts(module, *config->policy, foldRoundTrips);
    removeIdentityConversions(module);

    OpPassManager cleanup(ModuleOp::getOperationName());
    cleanup.addPass(createCanonicalizerPass());
    cleanup.addPass(createCSEPass());
    if (failed(runPipeline(cleanup, module)))
      return signalPassFailure();

    report.recordMasterWeightCopies(module);
    unsigned castsAtEnd = countCasts(module);
    report.castsRemoved = castsAfterAutoCast > castsAtEnd ? castsAfterAutoCast - castsAtEnd : 0;
    if (failed(verifyAmp(module, config->level, *config->policy)))
      return signalPassFailure();
    if ((!this->report.empty() || !reportDot.empty()) &&
        failed(writeReportFiles(report, module, this->report, reportDot)))
      return signalPassFailure();
  }
};

} // namespace

} // namespace ampjit::ir::amp
