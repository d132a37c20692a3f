//===- OpFromCall.cpp - an MLIR op from a runtime-style op call -----------===//

#include "ampjit/Codegen/OpFromCall.h"

#include "ampjit/Dialect/Jit/IR/JitOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/Verifier.h"

#include <cstring>

using namespace mlir;
namespace rt = ampjit::runtime;

namespace ampjit::codegen {

RankedTensorType toMlirType(MLIRContext *context, const rt::TensorType &type) {
  Builder builder(context);
  Type element;
  switch (type.dtype) {
  case rt::DType::F32: element = builder.getF32Type(); break;
  case rt::DType::F64: element = builder.getF64Type(); break;
  case rt::DType::F16: element = builder.getF16Type(); break;
  case rt::DType::BF16: element = builder.getBF16Type(); break;
  case rt::DType::I64: element = builder.getI64Type(); break;
  case rt::DType::I1: element = builder.getI1Type(); break;
  }
  return RankedTensorType::get(type.shape, element);
}

namespace {

FailureOr<Attribute> denseAttributeOf(MLIRContext *context, const rt::DenseData &data, Location location) {
  RankedTensorType type = toMlirType(context, data.type);
  size_t elementSize = rt::dtypeSize(data.type.dtype);
  size_t count = size_t(data.type.elementCount());
  bool splat = data.bytes.size() == elementSize;
  if (!splat && data.bytes.size() != elementSize * count)
    return emitError(location) << "jit.constant: " << data.bytes.size() << " bytes of data for " << type;
  if (data.type.dtype == rt::DType::I1) {
    // i1 elements are packed bits in MLIR's raw buffers; go through bools.
    SmallVector<bool> values;
    for (size_t i = 0; i < (splat ? 1 : count); ++i)
      values.push_back(data.bytes[i] != 0);
    return splat ? Attribute(DenseElementsAttr::get(type, values.front()))
                 : Attribute(DenseElementsAttr::get(type, ArrayRef<bool>(values)));
  }
  ArrayRef<char> raw(reinterpret_cast<const char *>(data.bytes.data()), data.bytes.size());
  return Attribute(DenseElementsAttr::getFromRawBuffer(type, raw));
}

FailureOr<Attribute> attributeOf(MLIRContext *context, StringRef name, const rt::AttributeValue &value,
                                 Location location) {
  Builder builder(context);
  if (const auto *integer = std::get_if<int64_t>(&value))
    return Attribute(builder.getI64IntegerAttr(*integer));
  if (const auto *real = std::get_if<double>(&value))
    return Attribute(builder.getF64FloatAttr(*real));
  if (const auto *flag = std::get_if<bool>(&value))
    return *flag ? Attribute(builder.getUnitAttr()) : Attribute();
  if (const auto *list = std::get_if<std::vector<int64_t>>(&value))
    return Attribute(builder.getDenseI64ArrayAttr(*list));
  if (const auto *keyword = std::get_if<std::string>(&value)) {
    if (Attribute attribute = ir::enumAttributeFromKeyword(context, name, *keyword))
      return attribute;
    return emitError(location) << "attribute '" << name << "' = \"" << *keyword
                               << "\" is not a keyword of any jit enum attribute";
  }
  return denseAttributeOf(context, std::get<rt::DenseData>(value), location);
}

} // namespace

FailureOr<Operation *> createOperationFromCall(OpBuilder &builder, Location location, StringRef name,
                                               ArrayRef<std::optional<Value>> operands, TypeRange resultTypes,
                                               const rt::AttributeMap &attributes) {
  MLIRContext *context = builder.getContext();
  std::optional<RegisteredOperationName> registered = RegisteredOperationName::lookup(name, context);
  if (!registered)
    return emitError(location) << "'" << name << "' is not a registered op of the jit or amp dialect";

  OperationState state(location, *registered);
  SmallVector<int32_t> segmentSizes;
  for (const std::optional<Value> &operand : operands) {
    segmentSizes.push_back(operand ? 1 : 0);
    if (operand)
      state.addOperands(*operand);
  }
  // With AttrSizedOperandSegments every position is a segment; ops whose
  // only variadic position is the last one need none.
  if (registered->hasTrait<OpTrait::AttrSizedOperandSegments>())
    state.addAttribute("operandSegmentSizes", builder.getDenseI32ArrayAttr(segmentSizes));
  state.addTypes(resultTypes);
  for (const auto &[attributeName, value] : attributes) {
    FailureOr<Attribute> attribute = attributeOf(context, attributeName, value, location);
    if (failed(attribute))
      return failure();
    if (*attribute)
      state.addAttribute(attributeName, *attribute);
  }
  Operation *op = builder.create(state);
  if (failed(verify(op, /*verifyRecursively=*/false))) {
    op->erase();
    return failure();
  }
  return op;
}

} // namespace ampjit::codegen
