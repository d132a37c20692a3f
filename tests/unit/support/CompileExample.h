//===- CompileExample.h - a sample module compiled to a plan, for tests ---===//

#ifndef AMPJIT_TESTS_UNIT_SUPPORT_COMPILEEXAMPLE_H
#define AMPJIT_TESTS_UNIT_SUPPORT_COMPILEEXAMPLE_H

#include "ampjit/Codegen/PlanBuilder.h"
#include "ampjit/runtime/Plan.h"

#include "ampjit/runtime/Tensor.h"

#include <cstddef>
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

/// Parses examples/<file>, runs `--amp-pipeline` with `ampOptions` (none when
/// empty) and lowers the only function. Failures are GoogleTest failures; the
/// plan is then empty.
runtime::Plan compileExample(const std::string &file, const std::string &ampOptions,
                             codegen::PlanOptions options = {});

/// The bytes of each tensor, to compare state bit for bit.
std::vector<std::vector<std::byte>> snapshot(const std::vector<runtime::Tensor> &tensors);

} // namespace ampjit::testing

#endif // AMPJIT_TESTS_UNIT_SUPPORT_COMPILEEXAMPLE_H
