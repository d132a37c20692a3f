//===- CompileExample.h - a sample module compiled to a plan, for tests ---===//

#ifndef AMPJIT_TESTS_UNIT_SUPPORT_COMPILEEXAMPLE_H
#define AMPJIT_TESTS_UNIT_SUPPORT_COMPILEEXAMPLE_H

#include "ampjit/Codegen/PlanBuilder.h"
#include "ampjit/runtime/Plan.h"

#include "ampjit/runtime/Tensor.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ampjit::testing {

/// A module after a pass pipeline, as printed IR and as the plan of its only
/// function.
struct CompiledModule {
  std::string ir;
  runtime::Plan plan;
};

/// Parses `source` (named `sourceName` in locations), runs the textual pass
/// `pipeline` (none when empty) and lowers the only function. Failures are
/// GoogleTest failures; the plan is then empty.
CompiledModule compileSource(const std::string &source, const std::string &sourceName,
                             const std::string &pipeline, codegen::PlanOptions options = {});

/// The path of examples/<file>, and its text (a GoogleTest failure when it
/// cannot be read).
std::string examplePath(const std::string &file);
std::string exampleText(const std::string &file);

/// Parses examples/<file>, runs `--amp-pipeline` with `ampOptions` (none when
/// empty) and lowers the only function. Failures are GoogleTest failures; the
/// plan is then empty.
runtime::Plan compileExample(const std::string &file, const std::string &ampOptions,
                             codegen::PlanOptions options = {});

/// Argument positions of examples/mnist_train_step.mlir.
namespace mnist_step {
constexpr size_t kImages = 0, kLabels = 1, kFirstParam = 2, kLearningRate = 14, kScale = 15, kGoodSteps = 16,
                 kBadSteps = 17, kSkippedSteps = 18, kLastStepFinite = 19;
} // namespace mnist_step

/// What initialArguments fills a train step laid out like
/// examples/mnist_train_step.mlir with (images, labels, parameters, momentum
/// buffers, lr, the scaler's state).
struct StepData {
  uint64_t seed = 42;
  int64_t classes = 10;
  int64_t defaultFanIn = 512; ///< for parameters that are not matrices
  double learningRate = 0.01;
};

/// Fixed, learnable data: each label's images share a random prototype plus
/// noise, so the model has something to learn in a few steps; parameters
/// uniform in +-1/sqrt(fan-in), the scale 2^16, derived copies derived.
std::vector<runtime::Tensor> initialArguments(const runtime::Plan &plan, StepData data = {});

/// The bytes of each tensor, to compare state bit for bit.
std::vector<std::vector<std::byte>> snapshot(const std::vector<runtime::Tensor> &tensors);

} // namespace ampjit::testing

#endif // AMPJIT_TESTS_UNIT_SUPPORT_COMPILEEXAMPLE_H
