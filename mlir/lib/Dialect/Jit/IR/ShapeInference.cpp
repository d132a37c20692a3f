//===- ShapeInference.cpp - shape rules shared by jit and amp ops ---------===//

#include "ampjit/Dialect/Jit/IR/ShapeInference.h"

#include "mlir/IR/Diagnostics.h"

using namespace mlir;

namespace ampjit::ir {

FailureOr<RankedTensorType> requireStaticTensor(std::optional<Location> loc, StringRef opName,
                                                const NamedOperand &operand) {
  auto tensor = dyn_cast_or_null<RankedTensorType>(operand.type);
  if (!tensor || !tensor.hasStaticShape()) {
    (void)emitOptionalError(loc, "'", opName, "' operand '", operand.name,
                            "' must be a statically shaped tensor, but is ", operand.type);
    return failure();
  }
  return tensor;
}

FailureOr<SmallVector<int64_t>> broadcastShapes(std::optional<Location> loc, StringRef opName,
                                                ArrayRef<NamedOperand> operands) {
  SmallVector<RankedTensorType> tensors;
  size_t rank = 0;
  for (const NamedOperand &operand : operands) {
    FailureOr<RankedTensorType> tensor = requireStaticTensor(loc, opName, operand);
    if (failed(tensor))
      return failure();
    tensors.push_back(*tensor);
    rank = std::max<size_t>(rank, tensor->getRank());
  }
  // Dimensions align from the right; a 1 stretches to match the other size.
  SmallVector<int64_t> shape(rank, 1);
  SmallVector<const NamedOperand *> sizeSource(rank, nullptr);
  for (auto [tensor, operand] : llvm::zip_equal(tensors, operands)) {
    ArrayRef<int64_t> dims = tensor.getShape();
    size_t offset = rank - dims.size();
    for (size_t i = 0; i < dims.size(); ++i) {
      int64_t &size = shape[offset + i];
      if (dims[i] == size || dims[i] == 1)
        continue;
      if (size == 1) {
        size = dims[i];
        sizeSource[offset + i] = &operand;
        continue;
      }
      (void)emitOptionalError(loc, "'", opName, "' operand '", operand.name, "' of type ",
                              operand.type, " does not broadcast with operand '",
                              sizeSource[offset + i]->name, "' of type ", sizeSource[offset + i]->type,
                              ": result dimension ", offset + i, " would be both ", size,
                              " and ", dims[i]);
      return failure();
    }
  }
  return shape;
}

LogicalResult requireSameElementType(std::optional<Location> loc, StringRef opName,
                                     ArrayRef<NamedOperand> operands) {
  Type expected = getElementTypeOrSelf(operands.front().type);
  for (const NamedOperand &operand : operands.drop_front()) {
    if (getElementTypeOrSelf(operand.type) != expected)
      return emitOptionalError(loc, "'", opName, "' operand '", operand.name, "' of type ",
                               operand.type, " has element type ",
                               getElementTypeOrSelf(operand.type), " but operand '",
                               operands.front().name, "' of type ", operands.front().type,
                               " has ", expected, "; insert an explicit conversion");
  }
  return success();
}

bool isBroadcastableTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  size_t offset = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[offset + i])
      return false;
  return true;
}

bool isExactlyRepresentableIn(Type narrow, Type wide) {
  if (narrow == wide)
    return true;
  if (wide.isF64())
    return narrow.isF32() || narrow.isF16() || narrow.isBF16();
  if (wide.isF32())
    return narrow.isF16() || narrow.isBF16();
  return false;
}

} // namespace ampjit::ir
