//===- StateModel.h - roles of a traced step's arguments ------------------===//
//
// DESIGN principle 3: a step's state is explicit. Entry-function arguments
// carry `jit.role`, results that replace state carry `jit.tied`.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_DIALECT_JIT_IR_STATEMODEL_H
#define AMPJIT_DIALECT_JIT_IR_STATEMODEL_H

#include "mlir/IR/Value.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace ampjit::ir {

enum class ArgumentRole { Input, Param, Grad, OptState, ScalerState, Hyper };

/// The spelling used in `jit.role = "<name>"`.
llvm::StringRef stringifyArgumentRole(ArgumentRole role);
std::optional<ArgumentRole> parseArgumentRole(llvm::StringRef name);
/// All valid spellings, for diagnostics: "input, param, grad, ...".
llvm::StringRef allArgumentRoleNames();

/// What a step's argument is called in its plan and in every message about
/// it: the name a framework gave it with a location
/// (`%w: tensor<...> loc("fc1.weight")`), else "argN".
std::string argumentName(mlir::BlockArgument argument);

} // namespace ampjit::ir

#endif // AMPJIT_DIALECT_JIT_IR_STATEMODEL_H
