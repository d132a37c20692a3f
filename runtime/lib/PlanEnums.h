#ifndef AMPJIT_RUNTIME_LIB_PLANENUMS_H
#define AMPJIT_RUNTIME_LIB_PLANENUMS_H

// Count and name of every enum a plan stores, so the printer, the file reader
// (range checks) and the writer treat all of them through one interface.

#include "ampjit/runtime/Plan.h"

#include <string_view>

namespace ampjit::runtime::detail {

template <typename E> struct EnumInfo;

template <> struct EnumInfo<DType> {
  static constexpr int count = int(allDTypes.size());
  static std::string_view name(DType value) { return dtypeName(value); }
};
template <> struct EnumInfo<BufferRole> {
  static constexpr int count = kBufferRoleCount;
  static std::string_view name(BufferRole value) { return bufferRoleName(value); }
};
template <> struct EnumInfo<StepKind> {
  static constexpr int count = kStepKindCount;
  static std::string_view name(StepKind value) { return stepKindName(value); }
};
template <> struct EnumInfo<ElementwiseOp> {
  static constexpr int count = kElementwiseOpCount;
  static std::string_view name(ElementwiseOp value) { return elementwiseOpName(value); }
};
template <> struct EnumInfo<GemmEpilogue> {
  static constexpr int count = kGemmEpilogueCount;
  static std::string_view name(GemmEpilogue value) { return gemmEpilogueName(value); }
};
template <> struct EnumInfo<BatchNormActivation> {
  static constexpr int count = kBatchNormActivationCount;
  static std::string_view name(BatchNormActivation value) { return batchNormActivationName(value); }
};
template <> struct EnumInfo<ReduceOp> {
  static constexpr int count = kReduceOpCount;
  static std::string_view name(ReduceOp value) { return reduceOpName(value); }
};
template <> struct EnumInfo<LossKind> {
  static constexpr int count = kLossKindCount;
  static std::string_view name(LossKind value) { return lossKindName(value); }
};
template <> struct EnumInfo<LossReduction> {
  static constexpr int count = kLossReductionCount;
  static std::string_view name(LossReduction value) { return lossReductionName(value); }
};
template <> struct EnumInfo<OptimizerKind> {
  static constexpr int count = kOptimizerKindCount;
  static std::string_view name(OptimizerKind value) { return optimizerKindName(value); }
};

template <typename E>
concept PlanEnum = requires { EnumInfo<E>::count; };

/// Calls `visit(name, field)` for each field of the parameters a const step
/// holds. forEachField is written once per struct as a non-const template so
/// that reading and writing share it; reading does not modify.
template <typename Params, typename Visit>
void forEachConstField(const Params& params, Visit&& visit) {
  const_cast<Params&>(params).forEachField(
      [&](const char* name, auto& field) { visit(name, std::as_const(field)); });
}

} // namespace ampjit::runtime::detail

#endif // AMPJIT_RUNTIME_LIB_PLANENUMS_H
