#ifndef AMPJIT_FRONTEND_TRACE_COMPILETRACE_H
#define AMPJIT_FRONTEND_TRACE_COMPILETRACE_H

// A TraceGraph through the compiler: one MLIR module (the joint graph, every
// op at the user's source line), the AMP pipeline, codegen to a plan. The one
// place the frontend meets MLIR; everything after it is the runtime's.

#include "TraceSession.h"

#include "ampjit/Codegen/PlanOptions.h"
#include "ampjit/runtime/Plan.h"

#include <string>

namespace jit::detail {

struct CompileTraceOptions {
  /// `--amp-pipeline` options (amp::Policy::pipelineOptions() plus semantics).
  std::string pipelineOptions;
  /// Run convolutional ops channels-last (jit-convert-layout{layout=nhwc}),
  /// the layout cuDNN's tensor-core kernels want; the CPU runs both alike.
  bool convertToNhwc = false;
  /// The plan rewrites (fusions, deferred updates, side steps) for the
  /// backend; compileTrace always records the user's source locations.
  ampjit::codegen::PlanOptions plan;
  /// AMPJIT_DUMP: write every stage here as `<stem>.*`.
  std::string dumpDirectory;
  std::string dumpStem;
};

struct CompiledTrace {
  rt::Plan plan;
  /// The AMP pipeline's JSON report (the precision summary).
  std::string ampReport;
  /// The traced module as text, before AMP.
  std::string tracedModule;
};

/// Throws jit::Error with the compiler's located diagnostics on failure.
CompiledTrace compileTrace(const TraceGraph& graph, const CompileTraceOptions& options);

} // namespace jit::detail

#endif // AMPJIT_FRONTEND_TRACE_COMPILETRACE_H
