#ifndef AMPJIT_CODEGEN_OPFROMCALL_H
#define AMPJIT_CODEGEN_OPFROMCALL_H

// The inverse of what PlanBuilder reads from an op: an MLIR op of the jit or
// amp dialect made from an op call as the runtime's StepBuilder sees it (op
// name, operand positions, result types, attributes by ODS name). jit::trace
// records calls in that form and builds its module with this, so the traced
// IR and the plan speak of attributes the same way.

#include "ampjit/runtime/StepBuilder.h"

#include "mlir/IR/Builders.h"

#include <optional>

namespace ampjit::codegen {

/// The MLIR tensor type of a runtime type.
mlir::RankedTensorType toMlirType(mlir::MLIRContext *context, const runtime::TensorType &type);

/// Creates op `name` at the builder's insertion point. `operands` lists every
/// operand position in ODS order (nullopt for an absent optional operand; the
/// last, variadic, position may be repeated). Attributes convert by kind:
/// int64 -> I64Attr, double -> F64Attr, true -> UnitAttr (false is omitted),
/// an enum keyword -> the op's enum attribute, a list -> DenseI64ArrayAttr,
/// DenseData -> a dense elements attribute. Discardable names (`jit.op_id`)
/// become discardable attributes. An unknown op or enum keyword, or an op
/// that does not verify, is reported at `location` and fails.
mlir::FailureOr<mlir::Operation *> createOperationFromCall(mlir::OpBuilder &builder, mlir::Location location,
                                                           llvm::StringRef name,
                                                           llvm::ArrayRef<std::optional<mlir::Value>> operands,
                                                           mlir::TypeRange resultTypes,
                                                           const runtime::AttributeMap &attributes);

} // namespace ampjit::codegen

#endif // AMPJIT_CODEGEN_OPFROMCALL_H
