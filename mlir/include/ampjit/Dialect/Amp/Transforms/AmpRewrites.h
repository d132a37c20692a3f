//===- AmpRewrites.h - the AMP rewrites as functions ------------*- C++ -*-===//
//
// Each AMP pass is a thin wrapper around one of these, so that amp-pipeline
// (and jit::trace) run them in sequence and combine what they report.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_DIALECT_AMP_TRANSFORMS_AMPREWRITES_H
#define AMPJIT_DIALECT_AMP_TRANSFORMS_AMPREWRITES_H

#include "ampjit/Dialect/Amp/Transforms/AmpConfig.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace ampjit::ir::amp {

/// Why an op computes in the precision it does.
enum class DecisionReason {
  Unchanged,     // AMP does not touch it (O0, not floating point, not fp32)
  List,          // the policy's category for the op decided
  Condition,     // a policy attribute condition decided
  Level,         // the level decided (O2's non-deny ops, O3's everything)
  Inferred,      // painted from a neighbour (`source`)
  Promoted,      // the widest of its inputs (promote, autocast's infer/clear)
  Backward,      // autocast: the precision of the forward op (jit.vjp_of)
  Region,        // amp.disabled / amp.force_type on the op
  AlwaysFp32,    // scaler and optimizer arithmetic
  Unsupported,   // would be low precision, but the target cannot run it so
  Reference,     // jit.type_as: the type decided for its reference
};

llvm::StringRef stringifyDecisionReason(DecisionReason reason);

/// Kept as text: the report outlives the ops (fusion and cleanup run after).
struct OpDecision {
  std::string opName;
  std::string location;         // file:line:col of the op
  std::string category;         // the policy category, "" when the op has no rule
  std::string computeType;      // "f32", "f16", "bf16", ... after the pass
  DecisionReason reason = DecisionReason::Unchanged;
  std::string detail;           // human-readable: the list entry, the neighbour, ...
  std::string policySource;     // file:line of the policy entry, when one decided
  std::string source;           // the op this one was inferred from: "jit.matmul at file:line:col"
};

/// A low-precision copy of a parameter that amp-master-weights added (O2),
/// each argument by number and by name (its location name, else "argN", as
/// plans name it).
struct MasterWeightCopy {
  std::string function;
  unsigned master = 0, copy = 0;
  std::string masterName, copyName;
  std::string copyType; ///< "tensor<8x8xf16>"
};

/// What the AMP passes did to a module: per-op decisions and cast counts.
struct AmpReport {
  std::string level, dtype, semantics, target, policyName;
  uint64_t policyHash = 0;
  std::vector<OpDecision> decisions;
  unsigned castsInserted = 0;
  unsigned castsRemoved = 0;
  std::vector<MasterWeightCopy> masterWeightCopies;

  /// Fills masterWeightCopies from the `jit.derived_from` arguments of
  /// `module`'s functions.
  void recordMasterWeightCopies(mlir::ModuleOp module);
  /// JSON: the options, a summary (ops per compute type, casts inserted and
  /// removed, master weight copies), one entry per op and one per copy.
  void writeJson(llvm::raw_ostream &os) const;
  /// Graphviz: one node per op, colored by compute type, SSA edges.
  void writeDot(mlir::ModuleOp module, llvm::raw_ostream &os) const;
};

/// amp-auto-cast. Records its decisions in `report` when given; emits a
/// remark per op when `remarks`.
mlir::LogicalResult autoCast(mlir::ModuleOp module, const AmpConfig &config, AmpReport *report,
                             bool remarks);

struct FuseCastsResult {
  unsigned castsRemoved = 0;  // net: casts before minus casts after
  unsigned castsMoved = 0;
};

/// amp-fuse-casts.
FuseCastsResult fuseCasts(mlir::ModuleOp module, const ampjit::amp::Policy &policy,
                          bool foldRoundTrips);

/// amp-master-weights: returns the number of low-precision parameter copies
/// created, or failure with a diagnostic.
mlir::FailureOr<unsigned> addMasterWeights(mlir::ModuleOp module);

/// amp-verify.
mlir::LogicalResult verifyAmp(mlir::ModuleOp module, AmpLevel level,
                              const ampjit::amp::Policy &policy);

/// Writes `report` to `path` (JSON) and/or `dotPath` (DOT); an unwritable
/// file is an error on `module`.
mlir::LogicalResult writeReportFiles(const AmpReport &report, mlir::ModuleOp module,
                                     llvm::StringRef path, llvm::StringRef dotPath);

} // namespace ampjit::ir::amp

#endif // AMPJIT_DIALECT_AMP_TRANSFORMS_AMPREWRITES_H
