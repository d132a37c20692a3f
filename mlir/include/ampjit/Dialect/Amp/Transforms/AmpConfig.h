//===- AmpConfig.h - what the AMP passes share ------------------*- C++ -*-===//
//
// One definition of the AMP options (level, low-precision type, semantics,
// target, policy), of how a policy is found and loaded, and of the
// vocabulary the passes use to talk about an op's precision. The passes are
// thin wrappers around the functions declared in AmpRewrites.h, so that
// amp-pipeline can run them in sequence and combine their reports.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_DIALECT_AMP_TRANSFORMS_AMPCONFIG_H
#define AMPJIT_DIALECT_AMP_TRANSFORMS_AMPCONFIG_H

#include "ampjit/Dialect/Amp/Policy/Policy.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"

#include <memory>
#include <optional>
#include <string>

namespace ampjit::ir::amp {

enum class AmpLevel { O0, O1, O2, O3, Auto };
enum class AmpSemantics { Paint, Autocast };

llvm::StringRef stringifyAmpLevel(AmpLevel level);

/// The parsed, validated options of an AMP pass.
struct AmpConfig {
  AmpLevel level = AmpLevel::O1;
  ampjit::amp::LowPrecisionType lowType = ampjit::amp::LowPrecisionType::F16;
  AmpSemantics semantics = AmpSemantics::Paint;
  ampjit::amp::Target target;
  std::shared_ptr<const ampjit::amp::Policy> policy;

  /// Parses the textual pass options. `dtype=auto` becomes bf16 where the
  /// target has it (cpu, sm_80 and newer) and f16 elsewhere. Errors (an
  /// unknown level, a policy file that does not parse, ...) are reported
  /// through `emitError` and give failure.
  static mlir::FailureOr<AmpConfig>
  parse(llvm::StringRef level, llvm::StringRef dtype, llvm::StringRef semantics,
        llvm::StringRef target, llvm::StringRef policy, mlir::MLIRContext *context,
        llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

  /// The MLIR element type of `lowType`.
  mlir::FloatType lowElementType(mlir::MLIRContext *context) const;
};

/// Loads a built-in policy by name ("default", "pytorch") or a user policy
/// file by path, checked against every op registered in `context`. A policy
/// error is reported at the file's own location (file:line:column).
mlir::FailureOr<std::shared_ptr<const ampjit::amp::Policy>>
loadPolicy(llvm::StringRef spec, mlir::MLIRContext *context,
           llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

/// The names of every op registered in `context`.
std::vector<std::string> registeredOpNames(mlir::MLIRContext *context);

/// Looks up `op`'s attributes for policy conditions, printed as the IR
/// prints them: an enum's keyword, a number, `true` for a unit attribute.
ampjit::amp::OpRule::AttributeLookup attributeLookupFor(mlir::Operation *op);

/// The floating-point element type `op` computes in: that of its first
/// floating-point tensor result, else of its first floating-point tensor
/// operand; nullopt for ops that touch no floating-point tensor.
std::optional<mlir::FloatType> computeElementType(mlir::Operation *op);

/// The element type of a ranked tensor of floats; nullopt for anything else.
std::optional<mlir::FloatType> floatElementTypeOf(mlir::Type type);
inline bool isFloatTensor(mlir::Type type) { return floatElementTypeOf(type).has_value(); }

/// Whether `type` is a ranked tensor of 16-bit floats (f16 or bf16).
bool isLowPrecisionTensor(mlir::Type type);

/// The region attributes (AmpDialect::kDisabledAttrName / kForceTypeAttrName).
bool isAmpDisabled(mlir::Operation *op);
std::optional<mlir::FloatType> forcedComputeType(mlir::Operation *op);
/// AmpDialect::kOutsideAutocastAttrName: eager code ran the op with autocast off.
bool isOutsideAutocast(mlir::Operation *op);

/// The operands whose precision does not follow the op's compute type, so
/// AMP never casts them: those read in whatever floating-point precision they
/// come (the optimizer updates' and the scaler's gradients), and those fixed
/// at fp32 whatever the activations' precision (batch norm's parameters and
/// statistics). A fact of the ops' definitions (their verifiers say so), so
/// it is not in the policy.
llvm::SmallVector<unsigned> anyPrecisionOperandIndices(mlir::Operation *op);

} // namespace ampjit::ir::amp

#endif // AMPJIT_DIALECT_AMP_TRANSFORMS_AMPCONFIG_H
