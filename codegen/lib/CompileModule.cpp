//===- CompileModule.cpp - MLIR text to an ExecutionPlan ------------------===//

#include "ampjit/Codegen/CompileModule.h"

#include "ampjit/Codegen/PlanBuilder.h"
#include "ampjit/InitAmpjit.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace ampjit::codegen {

runtime::Expected<runtime::Plan> compileModule(std::string_view text, std::string_view sourceName,
                                               const ModuleCompileOptions& options) {
  registerAmpjitPasses();

  mlir::DialectRegistry registry;
  registerAmpjitDialects(registry);
  // No thread pool per call: a host framework may compile from many threads.
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();

  std::string diagnostics;
  llvm::raw_string_ostream diagnosticStream(diagnostics);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(text.data(), text.size()),
                                           llvm::StringRef(sourceName.data(), sourceName.size())),
      llvm::SMLoc());
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context, diagnosticStream);
  auto failed = [&](const std::string& what) {
    std::string message = std::string(sourceName) + ": " + what;
    if (!diagnostics.empty())
      message += ":\n" + diagnostics;
    while (!message.empty() && message.back() == '\n')
      message.pop_back();
    return runtime::Status::error(message);
  };

  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
  if (!module)
    return failed("not a valid module");
  if (!options.ampPipeline.empty()) {
    mlir::PassManager passManager(&context, mlir::ModuleOp::getOperationName());
    std::string pipelineErrors;
    llvm::raw_string_ostream pipelineStream(pipelineErrors);
    if (mlir::failed(mlir::parsePassPipeline("amp-pipeline{" + options.ampPipeline + "}", passManager,
                                             pipelineStream)))
      return failed("bad AMP pipeline options '" + options.ampPipeline + "': " + pipelineErrors);
    if (mlir::failed(passManager.run(*module)))
      return failed("the AMP pipeline failed");
  }
  mlir::FailureOr<mlir::func::FuncOp> entry = findEntryFunction(*module, options.function);
  if (mlir::failed(entry))
    return failed("no function to compile");
  mlir::FailureOr<runtime::Plan> plan = buildPlan(*entry, options.plan);
  if (mlir::failed(plan))
    return failed("code generation failed");
  return std::move(*plan);
}

} // namespace ampjit::codegen
