//===- ShapeInference.h - shape rules shared by jit and amp ops -----------===//
//
// Verifiers and result-type inference report errors that name the op, the
// operand and the offending dimension. The helpers here take the op's name
// and an optional location so that both verifiers (which have an op) and
// inferReturnTypes (which may have only a location) can use them.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_DIALECT_JIT_IR_SHAPEINFERENCE_H
#define AMPJIT_DIALECT_JIT_IR_SHAPEINFERENCE_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Support/LLVM.h"

#include <optional>

namespace ampjit::ir {

/// An operand as diagnostics see it: its ODS name and its type.
struct NamedOperand {
  llvm::StringRef name;
  mlir::Type type;
};

/// The operand's type as a statically shaped ranked tensor, or an error
/// naming the operand.
mlir::FailureOr<mlir::RankedTensorType>
requireStaticTensor(std::optional<mlir::Location> loc, llvm::StringRef opName,
                    const NamedOperand &operand);

/// numpy broadcasting of all operands' shapes.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(std::optional<mlir::Location> loc, llvm::StringRef opName,
                llvm::ArrayRef<NamedOperand> operands);

/// All operands have the element type of the first.
mlir::LogicalResult requireSameElementType(std::optional<mlir::Location> loc,
                                           llvm::StringRef opName,
                                           llvm::ArrayRef<NamedOperand> operands);

/// `to` is reachable from `from` by numpy broadcasting.
bool isBroadcastableTo(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to);

/// Every value of `narrow` is exactly representable in `wide` (f16 and bf16
/// in f32, all three in f64).
bool isExactlyRepresentableIn(mlir::Type narrow, mlir::Type wide);

/// A conversion from `from` to another type `to` that loses nothing.
inline bool isExactWidening(mlir::Type from, mlir::Type to) {
  return from != to && isExactlyRepresentableIn(from, to);
}

} // namespace ampjit::ir

#endif // AMPJIT_DIALECT_JIT_IR_SHAPEINFERENCE_H
