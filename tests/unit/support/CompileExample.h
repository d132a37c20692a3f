//===- CompileExample.h - a sample module compiled to a plan, for tests ---===//

#ifndef AMPJIT_TESTS_UNIT_SUPPORT_COMPILEEXAMPLE_H
#define AMPJIT_TESTS_UNIT_SUPPORT_COMPILEEXAMPLE_H

#include "ampjit/Codegen/PlanBuilder.h"
#include "ampjit/runtime/Plan.h"

#include <string>

namespace ampjit::testing {

/// Parses examples/<file>, runs `--amp-pipeline` with `ampOptions` (none when
/// empty) and lowers the only function. Failures are GoogleTest failures; the
/// plan is then empty.
runtime::Plan compileExample(const std::string &file, const std::string &ampOptions,
                             codegen::PlanOptions options = {});

} // namespace ampjit::testing

#endif // AMPJIT_TESTS_UNIT_SUPPORT_COMPILEEXAMPLE_H
