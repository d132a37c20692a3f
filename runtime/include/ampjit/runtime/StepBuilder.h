#ifndef AMPJIT_RUNTIME_STEPBUILDER_H
#define AMPJIT_RUNTIME_STEPBUILDER_H

// The StepBuilder (DESIGN principle 1): the one place that maps an op of the
// `jit` and `amp` dialects to a runtime step. Codegen calls it for every op
// of a module and eager execution for every op it runs (eager is a one-step
// plan, buildSingleOpPlan), so eager and compiled code share every kernel.
//
// It takes what MLIR knows about an op, in plain C++: the op name
// ("jit.matmul"), operand and result types, and attributes by their ODS
// names. Attributes the op declares with a default may be omitted; names
// with a dot (`jit.op_id`, `amp.force_type`) are discardable and ignored;
// any other unknown name is an error, so a renamed attribute cannot be
// silently dropped.

#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/Status.h"

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ampjit::runtime {

/// A dense tensor constant (`jit.constant`'s value): little-endian element
/// bytes of `type`, one element for a splat or all of them.
struct DenseData {
  TensorType type{};
  std::vector<uint8_t> bytes{};
  friend bool operator==(const DenseData&, const DenseData&) = default;
};

/// An attribute value. Unit attributes are `true`; enum attributes are their
/// keyword strings ("mean", "tanh", "gt"); F64Attr accepts an int64 too.
using AttributeValue =
    std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, DenseData>;
using AttributeMap = std::map<std::string, AttributeValue, std::less<>>;

/// An op the builder knows, and the step kind it becomes.
struct OpDescription {
  std::string_view name;
  StepKind kind;
};

/// Every supported op, in the order of JitOps.td then AmpOps.td. The
/// op-coverage test compares this list with the registered MLIR ops.
std::span<const OpDescription> supportedOps();
/// The step kind of `op`, or nullopt if the builder does not know it.
std::optional<StepKind> stepKindOf(std::string_view op);

/// Builds the step for one op. `operands` lists every operand position of
/// the op in ODS order, optional ones as nullopt when absent (an `sgd_update`
/// always has 8 entries); `results` lists the results the op has.
///
/// In the returned step, input slot k holds the index of the operand it reads
/// and output slot k the index of the result it writes (kNoBuffer for absent
/// optional slots); bindStep() replaces those indices with buffer ids.
Expected<Step> buildStep(std::string_view op, std::span<const std::optional<TensorType>> operands,
                         std::span<const TensorType> results, const AttributeMap& attributes);

/// Replaces the operand and result indices in a built step's slots with the
/// buffers holding those values.
Status bindStep(Step& step, std::span<const BufferId> operandBuffers,
                std::span<const BufferId> resultBuffers);

/// A plan that runs one op: argument k is the k-th present operand (role
/// input), results are the op's results (role output). `resultTiedToOperand`
/// (empty, or one entry per result, -1 for none) makes a result update an
/// operand in place, which then has role `param` (eager optimizer steps,
/// in-place scaler updates).
Expected<Plan> buildSingleOpPlan(std::string_view op, std::span<const std::optional<TensorType>> operands,
                                 std::span<const TensorType> results, const AttributeMap& attributes,
                                 std::span<const int> resultTiedToOperand = {});

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_STEPBUILDER_H
