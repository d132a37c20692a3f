//===- StateModel.cpp - verification of jit.role / jit.tied / ... ---------===//
//
// The state model of DESIGN principle 3 is carried by discardable attributes;
// the dialect hooks below are the verifier that keeps it consistent:
//
//   * `jit.role` on a function argument names one of the roles;
//   * `jit.tied = i` on a function result names a state argument (any role but
//     `input`) of the same type, and no two results tie the same argument;
//   * `jit.derived_from = i` on a state argument names another state argument
//     of the same shape (O2's low-precision parameter copy of an fp32 master);
//   * `jit.op_id` / `jit.vjp_of` on ops are non-negative integers;
//   * `jit.grad_of_leaf` (a unit flag) marks an op summing a leaf's gradients;
//   * `jit.linear_bias` (a unit flag) marks only a jit.add.
//
//===----------------------------------------------------------------------===//

#include "ampjit/Dialect/Jit/IR/StateModel.h"

#include "ampjit/Dialect/Jit/IR/JitDialect.h"
#include "ampjit/Dialect/Jit/IR/JitOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;

namespace ampjit::ir {

namespace {

constexpr std::pair<ArgumentRole, llvm::StringLiteral> kRoleNames[] = {
    {ArgumentRole::Input, "input"},          {ArgumentRole::Param, "param"},
    {ArgumentRole::Grad, "grad"},            {ArgumentRole::OptState, "opt_state"},
    {ArgumentRole::ScalerState, "scaler_state"}, {ArgumentRole::Hyper, "hyper"},
};

/// The function whose argument or result carries the attribute, or an error.
FailureOr<FunctionOpInterface> requireFunction(Operation *op, StringRef attrName,
                                               StringRef where) {
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function) {
    op->emitError() << "'" << attrName << "' is only meaningful on a function " << where
                    << ", not on a region " << where << " of '" << op->getName() << "'";
    return failure();
  }
  return function;
}

/// An attribute value that must be a valid argument index.
FailureOr<unsigned> requireArgumentIndex(FunctionOpInterface function, NamedAttribute attr,
                                         StringRef owner) {
  auto index = dyn_cast<IntegerAttr>(attr.getValue());
  if (!index || !index.getType().isSignlessInteger(64)) {
    function->emitError() << "'" << attr.getName().getValue() << "' on " << owner
                          << " must be an i64 argument index, but is " << attr.getValue();
    return failure();
  }
  int64_t value = index.getInt();
  if (value < 0 || value >= static_cast<int64_t>(function.getNumArguments())) {
    function->emitError() << "'" << attr.getName().getValue() << " = " << value << "' on "
                          << owner << " is not an argument index (the function has "
                          << function.getNumArguments() << " arguments)";
    return failure();
  }
  return static_cast<unsigned>(value);
}

std::optional<ArgumentRole> roleOfArgument(FunctionOpInterface function, unsigned index) {
  auto role = function.getArgAttrOfType<StringAttr>(index, JitDialect::kRoleAttrName);
  if (!role)
    return std::nullopt;
  return parseArgumentRole(role.getValue());
}

LogicalResult verifyRole(Operation *op, unsigned argIndex, Attribute value) {
  auto role = dyn_cast<StringAttr>(value);
  if (!role || !parseArgumentRole(role.getValue()))
    return op->emitError() << "argument #" << argIndex << " has 'jit.role = " << value
                           << "'; expected one of " << allArgumentRoleNames();
  return success();
}

LogicalResult verifyDerivedFrom(FunctionOpInterface function, unsigned argIndex,
                                NamedAttribute attr) {
  std::string owner = "argument #" + std::to_string(argIndex);
  FailureOr<unsigned> source = requireArgumentIndex(function, attr, owner);
  if (failed(source))
    return failure();
  if (*source == argIndex)
    return function->emitError() << owner << " cannot be derived from itself";
  // The runtime keeps a derived copy alive across steps and re-derives it,
  // which only state has; an "input" is replaced by the caller every step.
  std::optional<ArgumentRole> ownRole = roleOfArgument(function, argIndex);
  if (!ownRole || *ownRole == ArgumentRole::Input)
    return function->emitError() << owner << " has 'jit.derived_from' but is not state (it needs "
                                    "a 'jit.role' other than \"input\")";
  std::optional<ArgumentRole> sourceRole = roleOfArgument(function, *source);
  if (!sourceRole || *sourceRole == ArgumentRole::Input)
    return function->emitError() << owner << " is derived from argument #" << *source
                                 << ", which is not state (it needs a 'jit.role' other than "
                                    "\"input\")";
  // Argument types come from the signature: a declaration has no entry block.
  Type derivedArgType = function.getArgumentTypes()[argIndex];
  Type sourceArgType = function.getArgumentTypes()[*source];
  auto derivedType = dyn_cast<ShapedType>(derivedArgType);
  auto sourceType = dyn_cast<ShapedType>(sourceArgType);
  if (!derivedType || !sourceType || derivedType.getShape() != sourceType.getShape())
    return function->emitError() << owner << " of type " << derivedArgType
                                 << " must have the shape of argument #" << *source
                                 << ", which it is derived from (" << sourceArgType << ")";
  return success();
}

LogicalResult verifyTied(FunctionOpInterface function, unsigned resultIndex, NamedAttribute attr) {
  std::string owner = "result #" + std::to_string(resultIndex);
  FailureOr<unsigned> argIndex = requireArgumentIndex(function, attr, owner);
  if (failed(argIndex))
    return failure();
  std::optional<ArgumentRole> role = roleOfArgument(function, *argIndex);
  if (!role)
    return function->emitError() << owner << " is tied to argument #" << *argIndex
                                 << ", which has no 'jit.role'; only state can be updated";
  if (*role == ArgumentRole::Input)
    return function->emitError() << owner << " is tied to argument #" << *argIndex
                                 << ", an \"input\"; only state can be updated in place";
  Type argType = function.getArgumentTypes()[*argIndex];
  Type resultType = function.getResultTypes()[resultIndex];
  if (argType != resultType)
    return function->emitError() << owner << " of type " << resultType << " is tied to argument #"
                                 << *argIndex << " of a different type, " << argType;
  // Report a duplicate once, on the later of the two results.
  for (unsigned other = 0; other < resultIndex; ++other) {
    auto otherTie = function.getResultAttrOfType<IntegerAttr>(other, JitDialect::kTiedAttrName);
    if (otherTie && otherTie.getInt() == static_cast<int64_t>(*argIndex))
      return function->emitError() << "results #" << other << " and #" << resultIndex
                                   << " are both tied to argument #" << *argIndex
                                   << "; a state argument has one new value per step";
  }
  return success();
}

} // namespace

StringRef stringifyArgumentRole(ArgumentRole role) {
  for (const auto &[candidate, name] : kRoleNames)
    if (candidate == role)
      return name;
  llvm_unreachable("every ArgumentRole has a name");
}

std::optional<ArgumentRole> parseArgumentRole(StringRef name) {
  for (const auto &[role, candidate] : kRoleNames)
    if (candidate == name)
      return role;
  return std::nullopt;
}

StringRef allArgumentRoleNames() {
  return "\"input\", \"param\", \"grad\", \"opt_state\", \"scaler_state\", \"hyper\"";
}

std::string argumentName(BlockArgument argument) {
  if (auto name = dyn_cast<NameLoc>(argument.getLoc()))
    return name.getName().str();
  return "arg" + std::to_string(argument.getArgNumber());
}

LogicalResult JitDialect::verifyRegionArgAttribute(Operation *op, unsigned, unsigned argIndex,
                                                   NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kRoleAttrName) {
    if (failed(requireFunction(op, name, "argument")))
      return failure();
    return verifyRole(op, argIndex, attr.getValue());
  }
  if (name == kDerivedFromAttrName) {
    FailureOr<FunctionOpInterface> function = requireFunction(op, name, "argument");
    if (failed(function))
      return failure();
    return verifyDerivedFrom(*function, argIndex, attr);
  }
  return op->emitError() << "unknown argument attribute '" << name << "' on argument #" << argIndex
                         << "; the jit dialect defines '" << kRoleAttrName << "' and '"
                         << kDerivedFromAttrName << "'";
}

LogicalResult JitDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                      unsigned resultIndex, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kTiedAttrName) {
    FailureOr<FunctionOpInterface> function = requireFunction(op, name, "result");
    if (failed(function))
      return failure();
    return verifyTied(*function, resultIndex, attr);
  }
  if (name == kReturnedAttrName) {
    FailureOr<FunctionOpInterface> function = requireFunction(op, name, "result");
    if (failed(function))
      return failure();
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' on result #" << resultIndex << " is a unit flag, but is "
                             << attr.getValue();
    // A new state value keeps its argument's type; only what the caller
    // receives may follow the type AMP computed it in.
    if (function->getResultAttr(resultIndex, kTiedAttrName))
      return op->emitError() << "result #" << resultIndex << " has both '" << kTiedAttrName << "' and '" << name
                             << "'; a result is either new state or what the step returns";
    return success();
  }
  return op->emitError() << "unknown result attribute '" << name << "' on result #" << resultIndex
                         << "; the jit dialect defines '" << kTiedAttrName << "' and '" << kReturnedAttrName << "'";
}

LogicalResult JitDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kOpIdAttrName || name == kVjpOfAttrName) {
    auto id = dyn_cast<IntegerAttr>(attr.getValue());
    if (!id || !id.getType().isSignlessInteger(64) || id.getInt() < 0)
      return op->emitOpError() << "'" << name << "' must be a non-negative i64 op id, but is "
                               << attr.getValue();
    return success();
  }
  if (name == kGradOfLeafAttrName) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitOpError() << "'" << name << "' is a unit flag, but is " << attr.getValue();
    return success();
  }
  if (name == kLinearBiasAttrName) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitOpError() << "'" << name << "' is a unit flag, but is " << attr.getValue();
    if (!isa<AddOp>(op))
      return op->emitOpError() << "'" << name << "' marks the jit.add of a linear layer's bias, not another op";
    return success();
  }
  if (name == kWrappedOperandsAttrName) {
    auto positions = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!positions)
      return op->emitOpError() << "'" << name << "' must be an array of operand positions, but is "
                               << attr.getValue();
    for (int64_t position : positions.asArrayRef()) {
      if (position < 0 || position >= int64_t(op->getNumOperands()))
        return op->emitOpError() << "'" << name << "' names operand " << position << " of an op with "
                                 << op->getNumOperands() << " operands";
      auto type = dyn_cast<RankedTensorType>(op->getOperand(unsigned(position)).getType());
      if (!type || type.getRank() != 0 || !isa<FloatType>(type.getElementType()))
        return op->emitOpError() << "'" << name << "' names operand " << position
                                 << ", which is not a 0-d floating-point tensor";
    }
    return success();
  }
  if (name == kRoleAttrName || name == kDerivedFromAttrName || name == kTiedAttrName || name == kReturnedAttrName)
    return op->emitOpError() << "'" << name << "' belongs on a function "
                             << (name == kTiedAttrName || name == kReturnedAttrName ? "result" : "argument")
                             << ", not on an operation";
  return op->emitOpError() << "unknown attribute '" << name << "'; the jit dialect defines '"
                           << kOpIdAttrName << "', '" << kVjpOfAttrName << "', '" << kGradOfLeafAttrName
                           << "', '" << kWrappedOperandsAttrName << "' and '" << kLinearBiasAttrName
                           << "' on operations";
}

} // namespace ampjit::ir
