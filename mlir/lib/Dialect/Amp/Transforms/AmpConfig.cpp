//===- AmpConfig.cpp - what the AMP passes share --------------------------===//

#include "ampjit/Dialect/Amp/Transforms/AmpConfig.h"

#include "ampjit/Dialect/Amp/IR/AmpDialect.h"
#include "ampjit/Dialect/Amp/IR/AmpOps.h"
#include "ampjit/Dialect/Jit/IR/JitOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using ampjit::amp::LowPrecisionType;
using ampjit::amp::Policy;
using ampjit::amp::PolicyError;

namespace ampjit::ir::amp {

StringRef stringifyAmpLevel(AmpLevel level) {
  switch (level) {
  case AmpLevel::O0: return "O0";
  case AmpLevel::O1: return "O1";
  case AmpLevel::O2: return "O2";
  case AmpLevel::O3: return "O3";
  case AmpLevel::Auto: return "auto";
  }
  llvm_unreachable("unknown AMP level");
}

static std::optional<AmpLevel> parseAmpLevel(StringRef name) {
  return llvm::StringSwitch<std::optional<AmpLevel>>(name)
      .Case("O0", AmpLevel::O0)
      .Case("O1", AmpLevel::O1)
      .Case("O2", AmpLevel::O2)
      .Case("O3", AmpLevel::O3)
      .Case("auto", AmpLevel::Auto)
      .Default(std::nullopt);
}

std::vector<std::string> registeredOpNames(MLIRContext *context) {
  std::vector<std::string> names;
  for (RegisteredOperationName name : context->getRegisteredOperations())
    names.push_back(name.getStringRef().str());
  return names;
}

FailureOr<std::shared_ptr<const Policy>>
loadPolicy(StringRef spec, MLIRContext *context, function_ref<InFlightDiagnostic()> emitError) {
  // The policy checks entries against the registered ops: load ours first so
  // a pass over a module that happens not to use amp ops still knows them.
  context->getOrLoadDialect<AmpDialect>();
  std::vector<std::string> knownOps = registeredOpNames(context);
  // Policies speak about our compute ops; func.return and friends have no
  // precision to decide.
  llvm::erase_if(knownOps, [](const std::string &name) {
    return !StringRef(name).starts_with("jit.") && !StringRef(name).starts_with("amp.");
  });
  std::vector<std::string> builtins = Policy::builtinNames();
  bool isBuiltin = llvm::is_contained(builtins, spec.str());
  bool looksLikeFile = spec.contains('/') || spec.ends_with(".yaml") || spec.ends_with(".yml");
  if (!isBuiltin && !looksLikeFile) {
    InFlightDiagnostic diag = emitError();
    diag << "unknown policy '" << spec << "': expected a built-in (";
    llvm::interleaveComma(builtins, diag);
    diag << ") or the path of a .yaml file";
    return failure();
  }
  ampjit::amp::PolicyOrError loaded = isBuiltin
                                          ? Policy::builtin(spec, knownOps)
                                          : Policy::loadUserFile(spec.str(), knownOps);
  if (auto *error = std::get_if<PolicyError>(&loaded)) {
    // Point at the policy file itself, so editors and users land on the line;
    // an error with no line (an unreadable file) names the file already.
    InFlightDiagnostic diag =
        error->where.line > 0
            ? mlir::emitError(FileLineColLoc::get(context, error->where.file, error->where.line,
                                                  std::max(error->where.column, 0)))
            : emitError();
    diag << error->message << " (while loading AMP policy '" << spec << "')";
    return failure();
  }
  return std::shared_ptr<const Policy>(std::make_shared<Policy>(std::get<Policy>(std::move(loaded))));
}

FailureOr<AmpConfig> AmpConfig::parse(StringRef level, StringRef dtype, StringRef semantics,
                                      StringRef target, StringRef policy, MLIRContext *context,
                                      function_ref<InFlightDiagnostic()> emitError) {
  AmpConfig config;
  std::optional<AmpLevel> parsedLevel = parseAmpLevel(level);
  if (!parsedLevel) {
    emitError() << "unknown AMP level '" << level << "': expected O0, O1, O2, O3 or auto";
    return failure();
  }
  config.level = *parsedLevel;

  std::optional<ampjit::amp::Target> parsedTarget = ampjit::amp::Target::parse(target.str());
  if (!parsedTarget) {
    emitError() << "unknown target '" << target << "': expected cpu or sm_NN (e.g. sm_80, sm_90)";
    return failure();
  }
  config.target = *parsedTarget;

  if (dtype == "auto") {
    config.lowType = config.target.preferredLowType();
  } else if (std::optional<LowPrecisionType> parsed =
                 ampjit::amp::parseLowPrecisionType(dtype.str())) {
    config.lowType = *parsed;
  } else {
    emitError() << "unknown low-precision dtype '" << dtype << "': expected f16, bf16 or auto";
    return failure();
  }

  if (semantics == "paint") {
    config.semantics = AmpSemantics::Paint;
  } else if (semantics == "autocast") {
    config.semantics = AmpSemantics::Autocast;
  } else {
    emitError() << "unknown AMP semantics '" << semantics << "': expected paint or autocast";
    return failure();
  }

  FailureOr<std::shared_ptr<const Policy>> loaded = loadPolicy(policy, context, emitError);
  if (failed(loaded))
    return failure();
  config.policy = *loaded;
  return config;
}

FloatType AmpConfig::lowElementType(MLIRContext *context) const {
  Builder builder(context);
  return lowType == LowPrecisionType::F16 ? FloatType(builder.getF16Type())
                                          : FloatType(builder.getBF16Type());
}

ampjit::amp::OpRule::AttributeLookup attributeLookupFor(Operation *op) {
  return [op](std::string_view name) -> std::optional<std::string> {
    Attribute attribute = op->getAttr(StringRef(name.data(), name.size()));
    if (!attribute)
      return std::nullopt;
    if (std::optional<StringRef> keyword = enumAttributeKeyword(op, StringRef(name.data(), name.size())))
      return keyword->str();
    if (isa<UnitAttr>(attribute))
      return std::string("true");
    if (auto boolAttr = dyn_cast<BoolAttr>(attribute))
      return std::string(boolAttr.getValue() ? "true" : "false");
    if (auto intAttr = dyn_cast<IntegerAttr>(attribute))
      return std::to_string(intAttr.getInt());
    if (auto floatAttr = dyn_cast<FloatAttr>(attribute)) {
      // Round-trippable decimal; the policy compares numbers by value.
      llvm::SmallString<32> text;
      floatAttr.getValue().toString(text, /*FormatPrecision=*/0, /*FormatMaxPadding=*/0);
      return text.str().str();
    }
    if (auto stringAttr = dyn_cast<StringAttr>(attribute))
      return stringAttr.getValue().str();
    // Enum attributes print as `#jit<kind value>` or a bare keyword: take the
    // keyword, which is how the policy spells it.
    std::string printed;
    llvm::raw_string_ostream os(printed);
    attribute.print(os, /*elideType=*/true);
    StringRef text(printed);
    if (text.consume_front("#")) {
      size_t space = text.rfind(' ');
      if (space != StringRef::npos)
        text = text.drop_front(space + 1);
      text.consume_back(">");
    }
    return text.str();
  };
}

std::optional<FloatType> floatElementTypeOf(Type type) {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  if (!tensorType)
    return std::nullopt;
  if (auto floatType = dyn_cast<FloatType>(tensorType.getElementType()))
    return floatType;
  return std::nullopt;
}

std::optional<FloatType> computeElementType(Operation *op) {
  for (Type type : op->getResultTypes())
    if (std::optional<FloatType> element = floatElementTypeOf(type))
      return element;
  for (Type type : op->getOperandTypes())
    if (std::optional<FloatType> element = floatElementTypeOf(type))
      return element;
  return std::nullopt;
}

bool isLowPrecisionTensor(Type type) {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  return tensorType && (tensorType.getElementType().isF16() || tensorType.getElementType().isBF16());
}

bool isAmpDisabled(Operation *op) { return op->hasAttr(AmpDialect::kDisabledAttrName); }
bool isOutsideAutocast(Operation *op) { return op->hasAttr(AmpDialect::kOutsideAutocastAttrName); }

std::optional<FloatType> forcedComputeType(Operation *op) {
  auto forced = op->getAttrOfType<TypeAttr>(AmpDialect::kForceTypeAttrName);
  if (!forced)
    return std::nullopt;
  if (auto floatType = dyn_cast<FloatType>(forced.getValue()))
    return floatType;
  return std::nullopt;
}

SmallVector<unsigned> anyPrecisionOperandIndices(Operation *op) {
  auto indicesOf = [](MutableOperandRange range) {
    SmallVector<unsigned> indices;
    for (OpOperand &operand : range)
      indices.push_back(operand.getOperandNumber());
    return indices;
  };
  return llvm::TypeSwitch<Operation *, SmallVector<unsigned>>(op)
      .Case<SgdUpdateOp, AdamUpdateOp>([&](auto update) {
        // The gradient comes in whatever precision backward produced; the
        // parameter copy is low precision by construction (O2).
        SmallVector<unsigned> indices = indicesOf(update.getGradMutable());
        indices.append(indicesOf(update.getParamCopyMutable()));
        return indices;
      })
      // Not amp.unscale_and_check: it yields each gradient in that gradient's
      // type, so reading backward's f16 would round the unscaled gradients
      // to f16, where eager unscales the f32 gradient of an f32 parameter
      // (and small unscaled values underflow in f16: what scaling is for).
      .Case<AllFiniteOp>([&](AllFiniteOp check) { return indicesOf(check.getGradsMutable()); })
      .Case<BatchNormOp, BatchNormInferenceOp>([&](auto norm) {
        // Parameters and running statistics are fp32 by the op's definition
        // (f64 with f64 data): they never take the activations' precision.
        SmallVector<unsigned> indices = indicesOf(norm.getWeightMutable());
        indices.append(indicesOf(norm.getBiasMutable()));
        indices.append(indicesOf(norm.getRunningMeanMutable()));
        indices.append(indicesOf(norm.getRunningVarMutable()));
        return indices;
      })
      .Case<BatchNormGradOp>([&](BatchNormGradOp grad) {
        SmallVector<unsigned> indices = indicesOf(grad.getSaveMeanMutable());
        indices.append(indicesOf(grad.getSaveInvstdMutable()));
        indices.append(indicesOf(grad.getWeightMutable()));
        return indices;
      })
      .Case<LayerNormGradOp>([&](LayerNormGradOp grad) {
        // The statistics jit.layer_norm saved are fp32 whatever the
        // activations' type (O3 lowers the gradient, not them).
        SmallVector<unsigned> indices = indicesOf(grad.getMeanMutable());
        indices.append(indicesOf(grad.getRstdMutable()));
        return indices;
      })
      .Default([](Operation *) { return SmallVector<unsigned>(); });
}

} // namespace ampjit::ir::amp
