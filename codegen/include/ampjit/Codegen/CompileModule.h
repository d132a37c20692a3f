//===- CompileModule.h - MLIR text to an ExecutionPlan, without MLIR headers ===//
//
// The way in for another framework (and ampjit-run): a module of the jit and
// amp dialects as text, whose function takes every piece of state as an
// argument with a `jit.role` and returns each new value as a result
// `jit.tied` to it (docs/architecture.md "The dialects"), becomes a verified
// runtime::Plan that a runtime::Backend prepares and runs. This header
// includes no MLIR, so it is installed beside the runtime's headers.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_CODEGEN_COMPILEMODULE_H
#define AMPJIT_CODEGEN_COMPILEMODULE_H

#include "ampjit/Codegen/PlanOptions.h"
#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/Status.h"

#include <string>
#include <string_view>

namespace ampjit::codegen {

struct ModuleCompileOptions {
  /// The AMP pipeline's options, as amp-opt's `--amp-pipeline` takes them
  /// ("level=O1 dtype=f16 target=cpu"); empty: the module is lowered as
  /// written, with no AMP rewriting.
  std::string ampPipeline{};
  /// The function to compile; empty: the module's only function.
  std::string function{};
  /// The plan's rewrites (fusions, deferred updates, side steps).
  PlanOptions plan{};
};

/// Parses `text`, runs the AMP pipeline and lowers the function to a plan.
/// Every failure (malformed IR, a verifier's rule, bad pipeline options, an
/// op the runtime cannot run) is an error whose message starts with
/// `sourceName` and carries each diagnostic at its `sourceName:line:column`.
/// Safe to call from several threads: each call has its own MLIR context.
runtime::Expected<runtime::Plan> compileModule(std::string_view text, std::string_view sourceName,
                                               const ModuleCompileOptions& options = {});

} // namespace ampjit::codegen

#endif // AMPJIT_CODEGEN_COMPILEMODULE_H
