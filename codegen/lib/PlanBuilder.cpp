//===- PlanBuilder.cpp - an AMP-rewritten function to an ExecutionPlan ----===//
//
// Buffers:
//  * argument i is buffer i, with the role of its jit.role (input when it has
//    none) and jit.derived_from;
//  * a result tied to argument i is written into argument i's buffer by the
//    op that produces it: state is updated in place, never copied. That is
//    only sound when nothing reads the old value afterwards, which is checked;
//  * jit.constant values are constant buffers (no step runs for them);
//  * every other value is a temporary in the arena, or an output when the
//    function returns it. Temporaries are placed by liveness: a value's bytes
//    are free again after the last step that reads it, and the next value
//    takes the lowest free offset it fits (first fit, 64-byte aligned).
//
//===----------------------------------------------------------------------===//

#include "ampjit/Codegen/PlanBuilder.h"

#include "ampjit/Dialect/Amp/IR/AmpOps.h"
#include "ampjit/Dialect/Jit/IR/JitOps.h"
#include "ampjit/Dialect/Jit/IR/StateModel.h"
#include "ampjit/runtime/StepBuilder.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"

#include <map>

using namespace mlir;
namespace rt = ampjit::runtime;

namespace ampjit::codegen {

namespace {
/// What toRuntimeType accepts, for the messages about what it refuses.
constexpr const char *kRuntimeTypes =
    " (it holds statically shaped tensors of at most 2^48 elements of f16, bf16, f32, f64, i64 or i1)";
} // namespace

std::optional<rt::TensorType> toRuntimeType(Type type) {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  if (!tensorType || rt::checkedElementCount(tensorType.getShape()) < 0)
    return std::nullopt;
  Type element = tensorType.getElementType();
  std::optional<rt::DType> dtype;
  if (element.isF32())
    dtype = rt::DType::F32;
  else if (element.isF64())
    dtype = rt::DType::F64;
  else if (element.isF16())
    dtype = rt::DType::F16;
  else if (element.isBF16())
    dtype = rt::DType::BF16;
  else if (element.isSignlessInteger(64))
    dtype = rt::DType::I64;
  else if (element.isSignlessInteger(1))
    dtype = rt::DType::I1;
  if (!dtype)
    return std::nullopt;
  return rt::TensorType{*dtype, rt::Shape(tensorType.getShape().begin(), tensorType.getShape().end())};
}

FailureOr<func::FuncOp> findEntryFunction(ModuleOp module, StringRef name) {
  func::FuncOp found;
  for (auto function : module.getOps<func::FuncOp>()) {
    if (function.isDeclaration())
      continue;
    if (!name.empty() ? function.getSymName() == name : !found) {
      found = function;
      if (!name.empty())
        break;
      continue;
    }
    if (name.empty())
      return module.emitError() << "the module has several functions ('@" << found.getSymName()
                                << "', '@" << function.getSymName()
                                << "', ...): say which one to compile";
  }
  if (!found)
    return name.empty() ? module.emitError() << "the module has no function with a body"
                        : module.emitError() << "the module has no function '@" << name << "'";
  return found;
}

namespace {

/// Little-endian element bytes of a constant, one element for a splat,
/// i1 as one byte per element (MLIR packs bits; the runtime does not).
FailureOr<rt::DenseData> denseDataOf(ElementsAttr elements, const rt::TensorType &type,
                                     Operation *op) {
  auto dense = dyn_cast<DenseElementsAttr>(elements);
  if (!dense)
    return op->emitOpError() << "has a constant stored as " << elements
                             << ", which codegen cannot read (only dense constants)";
  rt::DenseData data{type, {}};
  unsigned byteWidth = rt::dtypeSize(type.dtype);
  auto appendElement = [&](const APInt &bits) {
    if (type.dtype == rt::DType::I1) {
      data.bytes.push_back(bits.isZero() ? 0 : 1);
      return;
    }
    APInt wide = bits.zextOrTrunc(byteWidth * 8);
    for (unsigned byte = 0; byte < byteWidth; ++byte)
      data.bytes.push_back(uint8_t(wide.extractBitsAsZExtValue(8, 8 * byte)));
  };
  bool isFloat = isa<FloatType>(dense.getElementType());
  int64_t count = dense.isSplat() ? 1 : dense.getNumElements();
  if (isFloat) {
    auto values = dense.getValues<APFloat>();
    for (int64_t i = 0; i < count; ++i)
      appendElement(values[i].bitcastToAPInt());
  } else {
    auto values = dense.getValues<APInt>();
    for (int64_t i = 0; i < count; ++i)
      appendElement(values[i]);
  }
  return data;
}

/// An op's attribute as the StepBuilder takes it: unit attributes are true,
/// enums their keyword, numbers int64/double, lists of integers vectors.
FailureOr<rt::AttributeValue> attributeValueOf(Operation *op, NamedAttribute named) {
  Attribute attribute = named.getValue();
  if (std::optional<StringRef> keyword = ir::enumAttributeKeyword(op, named.getName()))
    return rt::AttributeValue(keyword->str());
  if (isa<UnitAttr>(attribute))
    return rt::AttributeValue(true);
  if (auto boolAttr = dyn_cast<BoolAttr>(attribute))
    return rt::AttributeValue(boolAttr.getValue());
  if (auto intAttr = dyn_cast<IntegerAttr>(attribute))
    return rt::AttributeValue(int64_t(intAttr.getInt()));
  if (auto floatAttr = dyn_cast<FloatAttr>(attribute))
    return rt::AttributeValue(floatAttr.getValueAsDouble());
  if (auto stringAttr = dyn_cast<StringAttr>(attribute))
    return rt::AttributeValue(stringAttr.getValue().str());
  if (auto array = dyn_cast<DenseI64ArrayAttr>(attribute))
    return rt::AttributeValue(std::vector<int64_t>(array.asArrayRef().begin(), array.asArrayRef().end()));
  if (auto array = dyn_cast<ArrayAttr>(attribute)) {
    std::vector<int64_t> values;
    for (Attribute element : array) {
      auto intAttr = dyn_cast<IntegerAttr>(element);
      if (!intAttr)
        return op->emitOpError() << "attribute '" << named.getName() << "' = " << attribute
                                 << " is not a list of integers, which codegen cannot pass on";
      values.push_back(intAttr.getInt());
    }
    return rt::AttributeValue(std::move(values));
  }
  if (auto elements = dyn_cast<ElementsAttr>(attribute)) {
    std::optional<rt::TensorType> type = toRuntimeType(elements.getType());
    if (!type)
      return op->emitOpError() << "attribute '" << named.getName() << "' has type "
                               << elements.getType() << ", which the runtime has no dtype for";
    FailureOr<rt::DenseData> data = denseDataOf(elements, *type, op);
    if (failed(data))
      return failure();
    return rt::AttributeValue(std::move(*data));
  }
  return op->emitOpError() << "attribute '" << named.getName() << "' = " << attribute
                           << " has a kind codegen cannot pass to the runtime";
}

class PlanBuilder {
public:
  PlanBuilder(func::FuncOp function, PlanOptions options) : function(function), options(options) {}

  FailureOr<rt::Plan> build() {
    plan.name = function.getSymName().str();
    if (failed(addArguments()) || failed(planResults()) || failed(addSteps()) ||
        failed(checkInPlaceUpdates()))
      return failure();
    if (options.fuseGemmEpilogues)
      fuseGemmEpilogues(plan);
    if (options.fuseBatchNormEpilogues)
      fuseBatchNormEpilogues(plan);
    if (options.fuseGradientAccumulation)
      fuseGradientAccumulation(plan);
    if (options.fuseElementwise)
      fuseElementwiseSteps(plan);
    readGradientsBeforeTheirReshape(plan);
    sinkGradientTransposesToTheirCheck(plan);
    if (options.deferOptimizerUpdates)
      deferOptimizerUpdates(plan, options.deferMinimumElements);
    if (options.overlapWeightGradients)
      overlapWeightGradients(plan, kWeightGradientLag, options.sideReductionMinimumElements);
    layOutArena();
    if (rt::Status status = rt::verifyPlan(plan); !status.ok())
      return function.emitError() << "codegen produced an invalid plan (a codegen bug): "
                                  << status.message();
    return std::move(plan);
  }

private:
  /// A tied result that is another argument, unchanged: copied last.
  struct ArgumentCopy {
    int64_t target;
    int64_t source;
    size_t result;
  };

  rt::BufferId addBuffer(Value value, rt::BufferDesc desc) {
    rt::BufferId id = rt::BufferId(plan.buffers.size());
    plan.buffers.push_back(std::move(desc));
    bufferOf[value] = id;
    return id;
  }

  LogicalResult addArguments() {
    static const std::map<std::string, rt::BufferRole, std::less<>> roles = {
        {"input", rt::BufferRole::Input},       {"param", rt::BufferRole::Param},
        {"grad", rt::BufferRole::Grad},         {"opt_state", rt::BufferRole::OptState},
        {"scaler_state", rt::BufferRole::ScalerState}, {"hyper", rt::BufferRole::Hyper}};
    for (BlockArgument argument : function.getArguments()) {
      unsigned index = argument.getArgNumber();
      std::optional<rt::TensorType> type = toRuntimeType(argument.getType());
      if (!type)
        return function.emitError() << "argument #" << index << " has type " << argument.getType()
                                    << ", which the runtime has no buffer for" << kRuntimeTypes;
      rt::BufferDesc desc;
      desc.type = *type;
      desc.role = rt::BufferRole::Input;
      if (auto role = function.getArgAttrOfType<StringAttr>(index, ir::JitDialect::kRoleAttrName))
        desc.role = roles.at(role.getValue().str()); // the state-model verifier checked the spelling
      desc.argument = int32_t(index);
      if (auto source = function.getArgAttrOfType<IntegerAttr>(index, ir::JitDialect::kDerivedFromAttrName))
        desc.derivedFrom = int32_t(source.getInt());
      desc.name = ir::argumentName(argument);
      addBuffer(argument, std::move(desc));
    }
    return success();
  }

  /// Decides, before any step exists, which values are written straight into
  /// a state argument (tied results) and which are outputs.
  LogicalResult planResults() {
    auto returnOp = cast<func::ReturnOp>(function.getBody().front().getTerminator());
    for (auto [index, value] : llvm::enumerate(returnOp.getOperands())) {
      auto tied = function.getResultAttrOfType<IntegerAttr>(index, ir::JitDialect::kTiedAttrName);
      if (!tied)
        continue;
      int64_t argument = tied.getInt();
      if (auto source = dyn_cast<BlockArgument>(value)) {
        // State set to another argument's value (`scale.copy_(new_scale)`):
        // a copy written last, when every reader of the old value has run.
        if (int64_t(source.getArgNumber()) != argument)
          argumentCopies.push_back({argument, int64_t(source.getArgNumber()), index});
        continue;
      }
      // State reset to a constant (zero_grad(false), a counter reset): the
      // constant stays a constant buffer for its other readers, and a step
      // at the end writes it into the state.
      if (auto constant = value.getDefiningOp<ir::ConstantOp>()) {
        constantWrites.push_back({argument, constant});
        continue;
      }
      auto [it, inserted] = writesArgument.try_emplace(value, argument);
      if (!inserted && it->second != argument)
        return returnOp.emitOpError() << "one value is returned tied to arguments #" << it->second
                                      << " and #" << argument
                                      << ": each state argument needs its own value";
    }
    // A copy runs last, so it must read its source's old value then: a source
    // the step also updates (a swap of two arguments) would give the new one.
    for (const ArgumentCopy &copy : argumentCopies) {
      auto writes = [&](int64_t argument) {
        return llvm::any_of(writesArgument, [&](const auto &write) { return write.second == argument; }) ||
               llvm::any_of(constantWrites, [&](const auto &write) { return write.first == argument; }) ||
               llvm::any_of(argumentCopies, [&](const ArgumentCopy &other) { return other.target == argument; });
      };
      bool sourceWritten = writes(copy.source);
      if (sourceWritten)
        return returnOp.emitOpError() << "result #" << copy.result << " is tied to argument #" << copy.target
                                      << " and returns argument #" << copy.source
                                      << " unchanged, which the step also updates: the runtime writes state in "
                                         "place, so one step cannot both update an argument and copy its old "
                                         "value into another";
    }
    return success();
  }

  LogicalResult addSteps() {
    for (Operation &op : function.getBody().front().without_terminator()) {
      if (auto constant = dyn_cast<ir::ConstantOp>(op)) {
        if (failed(addConstant(constant)))
          return failure();
        continue;
      }
      if (failed(addStep(&op)))
        return failure();
    }
    for (auto [argument, constant] : constantWrites)
      if (failed(addConstantWrite(argument, constant)))
        return failure();
    for (const ArgumentCopy &copy : argumentCopies)
      if (failed(addArgumentCopy(copy)))
        return failure();
    auto returnOp = cast<func::ReturnOp>(function.getBody().front().getTerminator());
    for (auto [index, value] : llvm::enumerate(returnOp.getOperands())) {
      rt::PlanResult result;
      result.buffer = bufferOf.at(value);
      if (auto tied = function.getResultAttrOfType<IntegerAttr>(index, ir::JitDialect::kTiedAttrName)) {
        result.tiedArgument = int32_t(tied.getInt());
        result.buffer = plan.argumentBuffer(size_t(tied.getInt()));
      }
      else if (plan.buffers[result.buffer].role == rt::BufferRole::Temporary)
        plan.buffers[result.buffer].role = rt::BufferRole::Output;
      plan.results.push_back(result);
    }
    return success();
  }

  /// The last step of the plan: `constant` written into state argument `argument`.
  LogicalResult addConstantWrite(int64_t argument, ir::ConstantOp constant) {
    rt::BufferId target = plan.argumentBuffer(size_t(argument));
    const rt::TensorType &type = plan.buffers[target].type;
    FailureOr<rt::DenseData> data = denseDataOf(constant.getValue(), type, constant);
    if (failed(data))
      return failure();
    rt::AttributeMap attributes{{"value", std::move(*data)}};
    rt::Expected<rt::Step> step = rt::buildStep("jit.constant", {}, std::vector<rt::TensorType>{type}, attributes);
    if (!step)
      return constant.emitOpError() << "cannot be written into argument #" << argument << ": " << step.message();
    if (rt::Status status = rt::bindStep(*step, {}, std::vector<rt::BufferId>{target}); !status.ok())
      return constant.emitOpError() << "cannot be written into argument #" << argument << ": " << status.message();
    step->origin = "jit.constant written into argument #" + std::to_string(argument);
    plan.steps.push_back(std::move(*step));
    return success();
  }

  /// The last steps of the plan: argument `source` copied into state argument `target`.
  LogicalResult addArgumentCopy(const ArgumentCopy &copy) {
    rt::BufferId source = plan.argumentBuffer(size_t(copy.source));
    rt::BufferId target = plan.argumentBuffer(size_t(copy.target));
    const rt::TensorType &type = plan.buffers[target].type;
    rt::Expected<rt::Step> step = rt::buildStep("jit.reshape", std::vector<std::optional<rt::TensorType>>{type},
                                                std::vector<rt::TensorType>{type}, {});
    auto refuse = [&](const std::string &why) {
      return function.emitError() << "argument #" << copy.source << " cannot be copied into argument #"
                                  << copy.target << ": " << why;
    };
    if (!step)
      return refuse(step.message());
    if (rt::Status bound = rt::bindStep(*step, std::vector<rt::BufferId>{source}, std::vector<rt::BufferId>{target});
        !bound.ok())
      return refuse(bound.message());
    step->origin = "argument '" + plan.buffers[source].name + "' copied into '" + plan.buffers[target].name + "'";
    plan.steps.push_back(std::move(*step));
    return success();
  }

  LogicalResult addConstant(ir::ConstantOp constant) {
    std::optional<rt::TensorType> type = toRuntimeType(constant.getType());
    if (!type)
      return constant.emitOpError() << "has type " << constant.getType()
                                    << ", which the runtime has no buffer for" << kRuntimeTypes;
    FailureOr<rt::DenseData> data = denseDataOf(constant.getValue(), *type, constant);
    if (failed(data))
      return failure();
    rt::BufferDesc desc;
    desc.type = *type;
    desc.role = rt::BufferRole::Constant;
    // The plan stores every element; a splat is expanded once here.
    int64_t count = type->elementCount();
    if (int64_t(data->bytes.size()) == int64_t(rt::dtypeSize(type->dtype)) && count != 1) {
      desc.constantData.reserve(size_t(type->byteSize()));
      for (int64_t i = 0; i < count; ++i)
        desc.constantData.insert(desc.constantData.end(), data->bytes.begin(), data->bytes.end());
    } else {
      desc.constantData = std::move(data->bytes);
    }
    desc.name = "constant";
    addBuffer(constant.getResult(), std::move(desc));
    return success();
  }

  /// Operand positions in ODS order: an absent optional operand is nullopt.
  SmallVector<std::optional<Value>> operandPositions(Operation *op) {
    SmallVector<std::optional<Value>> positions;
    DenseI32ArrayAttr segments;
    if (auto properties = dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute()))
      segments = properties.getAs<DenseI32ArrayAttr>("operandSegmentSizes");
    if (!segments)
      segments = op->getAttrOfType<DenseI32ArrayAttr>("operandSegmentSizes");
    if (!segments) {
      for (Value operand : op->getOperands())
        positions.push_back(operand);
      return positions;
    }
    unsigned next = 0;
    for (int32_t size : segments.asArrayRef()) {
      if (size == 0)
        positions.push_back(std::nullopt);
      for (int32_t i = 0; i < size; ++i)
        positions.push_back(op->getOperand(next++));
    }
    return positions;
  }

  LogicalResult addStep(Operation *op) {
    SmallVector<std::optional<Value>> positions = operandPositions(op);
    std::vector<std::optional<rt::TensorType>> operandTypes;
    std::vector<rt::BufferId> operandBuffers;
    for (std::optional<Value> position : positions) {
      if (!position) {
        operandTypes.push_back(std::nullopt);
        operandBuffers.push_back(rt::kNoBuffer);
        continue;
      }
      std::optional<rt::TensorType> type = toRuntimeType(position->getType());
      if (!type)
        return op->emitOpError() << "reads a value of type " << position->getType()
                                 << ", which the runtime has no buffer for" << kRuntimeTypes;
      operandTypes.push_back(type);
      operandBuffers.push_back(bufferOf.at(*position));
    }

    std::vector<rt::TensorType> resultTypes;
    for (Type type : op->getResultTypes()) {
      std::optional<rt::TensorType> runtimeType = toRuntimeType(type);
      if (!runtimeType)
        return op->emitOpError() << "produces a value of type " << type
                                 << ", which the runtime has no buffer for" << kRuntimeTypes;
      resultTypes.push_back(*runtimeType);
    }

    rt::AttributeMap attributes;
    auto addAttributes = [&](DictionaryAttr dictionary) -> LogicalResult {
      if (!dictionary)
        return success();
      for (NamedAttribute named : dictionary) {
        StringRef name = named.getName().getValue();
        // Segment sizes are structure, already in the operand positions; a
        // dotted name is a discardable annotation (jit.op_id, amp.*).
        if (name == "operandSegmentSizes" || name == "resultSegmentSizes" || name.contains('.'))
          continue;
        FailureOr<rt::AttributeValue> value = attributeValueOf(op, named);
        if (failed(value))
          return failure();
        attributes[name.str()] = std::move(*value);
      }
      return success();
    };
    if (failed(addAttributes(dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute()))) ||
        failed(addAttributes(op->getDiscardableAttrDictionary())))
      return failure();

    rt::Expected<rt::Step> step =
        rt::buildStep(op->getName().getStringRef(), operandTypes, resultTypes, attributes);
    if (!step)
      return op->emitOpError() << "cannot be compiled: " << step.message();

    std::vector<rt::BufferId> resultBuffers;
    std::string updates; // the state argument an update's first result is written into
    for (auto [index, result] : llvm::enumerate(op->getResults())) {
      if (auto argument = writesArgument.find(result); argument != writesArgument.end()) {
        rt::BufferId buffer = plan.argumentBuffer(size_t(argument->second));
        bufferOf[result] = buffer;
        resultBuffers.push_back(buffer);
        inPlaceWrites.push_back({argument->second, op});
        if (index == 0)
          updates = plan.buffers[buffer].name;
        continue;
      }
      rt::BufferDesc desc;
      desc.type = resultTypes[index];
      desc.role = rt::BufferRole::Temporary;
      desc.name = "v" + std::to_string(plan.buffers.size());
      resultBuffers.push_back(addBuffer(result, std::move(desc)));
    }
    if (rt::Status status = rt::bindStep(*step, operandBuffers, resultBuffers); !status.ok())
      return op->emitOpError() << "cannot be compiled: " << status.message();
    step->origin = op->getName().getStringRef().str();
    if (auto id = op->getAttrOfType<IntegerAttr>("jit.op_id"))
      step->origin += " #" + std::to_string(id.getInt());
    Location location = op->getLoc();
    // An op made for a named argument (AMP's cast of a parameter) carries its name.
    if (auto name = dyn_cast<NameLoc>(location)) {
      step->origin += " of '" + name.getName().str() + "'";
      location = name.getChildLoc();
    }
    // Which parameter an optimizer update (any op whose main result is state)
    // is for: a trace records every parameter's update at the one opt.step() line.
    if (!updates.empty())
      step->origin += " into '" + updates + "'";
    if (options.recordLocations)
      if (auto fileLine = dyn_cast<FileLineColLoc>(location))
        step->origin += " at " + fileLine.getFilename().str() + ":" + std::to_string(fileLine.getLine());
    plan.steps.push_back(std::move(*step));
    return success();
  }

  /// A step that writes a state argument in place must be the last reader of
  /// its old value (the step itself may read it: updates are elementwise).
  LogicalResult checkInPlaceUpdates() {
    for (auto [argumentIndex, writer] : inPlaceWrites) {
      BlockArgument argument = function.getArgument(unsigned(argumentIndex));
      for (Operation *user : argument.getUsers()) {
        if (user == writer || isa<func::ReturnOp>(user) || user->isBeforeInBlock(writer))
          continue;
        InFlightDiagnostic diag = user->emitOpError()
                                  << "reads argument #" << argumentIndex
                                  << " after it is updated in place";
        diag.attachNote(writer->getLoc()) << "updated here, by its tied result";
        return diag;
      }
    }
    return success();
  }

  /// First-fit placement of temporaries by liveness.
  void layOutArena() {
    size_t stepCount = plan.steps.size();
    std::vector<int64_t> firstWrite(plan.buffers.size(), -1), lastRead(plan.buffers.size(), -1);
    std::vector<int> writers(plan.buffers.size(), 0);
    for (size_t s = 0; s < stepCount; ++s) {
      for (rt::BufferId id : plan.steps[s].outputs)
        if (id != rt::kNoBuffer) {
          if (firstWrite[id] < 0)
            firstWrite[id] = int64_t(s);
          ++writers[id];
        }
      for (rt::BufferId id : plan.steps[s].inputs)
        if (id != rt::kNoBuffer)
          lastRead[id] = int64_t(s);
    }
    // A reduction of an output of the elementwise step right before it
    // keeps that step's inputs live through it: the CUDA backend runs such a
    // pair as one launch (a widened or column-summed reduction), where the
    // sums are stored while other blocks still read those inputs.
    for (size_t s = 1; s < stepCount; ++s) {
      const rt::Step &before = plan.steps[s - 1], &reduction = plan.steps[s];
      if (reduction.kind != rt::StepKind::Reduction || reduction.inputs.empty() ||
          (before.kind != rt::StepKind::Elementwise && before.kind != rt::StepKind::FusedElementwise) ||
          !llvm::is_contained(before.outputs, reduction.inputs[0]))
        continue;
      for (rt::BufferId id : before.inputs)
        if (id != rt::kNoBuffer)
          lastRead[id] = std::max(lastRead[id], int64_t(s));
    }
    // A side step's buffers hold their bytes until it joins: the steps
    // before the join may run while it still reads or writes them.
    std::vector<int64_t> held = rt::heldBySideSteps(plan);
    for (rt::BufferId id = 0; id < plan.buffers.size(); ++id)
      lastRead[id] = std::max(lastRead[id], held[id]);
    auto isTemporary = [&](rt::BufferId id) { return plan.buffers[id].role == rt::BufferRole::Temporary; };
    struct Live {
      uint64_t offset, size;
      int64_t until;
    };
    std::vector<Live> live;
    uint64_t arenaBytes = 0;
    auto alignUp = [](uint64_t bytes) {
      return (bytes + rt::kArenaAlignment - 1) / rt::kArenaAlignment * rt::kArenaAlignment;
    };
    for (size_t s = 0; s < stepCount; ++s) {
      // Values whose last reader ran before this step free their bytes. A
      // step never writes over its own inputs: they stay live through it.
      llvm::erase_if(live, [&](const Live &entry) { return entry.until < int64_t(s); });
      const rt::Step &step = plan.steps[s];
      // A reshape of an argument, constant or carried buffer into a
      // temporary written by no other step views that buffer's memory
      // (BufferDesc::viewOf) when nothing writes it while the view is live:
      // a 1x1 convolution's f16 weight copy in NHWC, read until the backward.
      if (step.kind == rt::StepKind::Reshape && !isTemporary(step.inputs[0]) &&
          plan.buffers[step.inputs[0]].role != rt::BufferRole::Output && isTemporary(step.outputs[0]) &&
          writers[step.outputs[0]] == 1 && plan.buffers[step.inputs[0]].type.byteSize() > 0) {
        rt::BufferId viewed = step.inputs[0], view = step.outputs[0];
        bool unwritten = true;
        for (int64_t later = int64_t(s) + 1; later <= lastRead[view] && unwritten; ++later)
          for (rt::BufferId out : plan.steps[size_t(later)].outputs)
            unwritten &= out != viewed;
        if (unwritten) {
          plan.buffers[view].viewOf = int32_t(viewed);
          continue;
        }
      }
      // A reshape of a temporary into a temporary, neither written by
      // another step, views its input's bytes (runtime arenaViewRoots), which
      // stay live until the view's last reader: the reshape moves nothing.
      if (step.kind == rt::StepKind::Reshape && isTemporary(step.inputs[0]) && isTemporary(step.outputs[0]) &&
          plan.buffers[step.inputs[0]].viewOf < 0 && writers[step.inputs[0]] == 1 && writers[step.outputs[0]] == 1 &&
          plan.buffers[step.inputs[0]].type.byteSize() > 0) {
        rt::BufferId input = step.inputs[0], view = step.outputs[0];
        uint64_t offset = plan.buffers[input].arenaOffset;
        auto held = llvm::find_if(live, [&](const Live &entry) { return entry.offset == offset; });
        if (held != live.end()) {
          plan.buffers[view].arenaOffset = offset;
          held->until = std::max(held->until, lastRead[view]);
          continue;
        }
      }
      for (rt::BufferId id : plan.steps[s].outputs) {
        if (id == rt::kNoBuffer || firstWrite[id] != int64_t(s) ||
            plan.buffers[id].role != rt::BufferRole::Temporary)
          continue;
        uint64_t size = alignUp(std::max<uint64_t>(uint64_t(plan.buffers[id].type.byteSize()), 1));
        llvm::sort(live, [](const Live &a, const Live &b) { return a.offset < b.offset; });
        uint64_t offset = 0;
        for (const Live &entry : live) {
          if (offset + size <= entry.offset)
            break;
          offset = std::max(offset, entry.offset + entry.size);
        }
        plan.buffers[id].arenaOffset = offset;
        // A value nothing reads still occupies its bytes while being written.
        live.push_back({offset, size, std::max(lastRead[id], int64_t(s))});
        arenaBytes = std::max(arenaBytes, offset + size);
      }
    }
    plan.arenaBytes = arenaBytes;
  }

  func::FuncOp function;
  PlanOptions options;
  rt::Plan plan;
  llvm::DenseMap<Value, rt::BufferId> bufferOf;
  /// Values returned tied to a state argument -> that argument's index.
  llvm::DenseMap<Value, int64_t> writesArgument;
  /// Tied results that are constants: (argument, constant), written last.
  std::vector<std::pair<int64_t, ir::ConstantOp>> constantWrites;
  std::vector<ArgumentCopy> argumentCopies;
  std::vector<std::pair<int64_t, Operation *>> inPlaceWrites;
};

} // namespace

FailureOr<rt::Plan> buildPlan(func::FuncOp function, PlanOptions options) {
  if (function.isDeclaration())
    return function.emitError() << "has no body to compile";
  if (!llvm::hasSingleElement(function.getBody()))
    return function.emitError() << "has control flow (" << function.getBody().getBlocks().size()
                                << " blocks); a traced step is one block";
  return PlanBuilder(function, options).build();
}

} // namespace ampjit::codegen
