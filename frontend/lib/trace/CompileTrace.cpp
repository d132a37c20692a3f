// Compiling a trace: see CompileTrace.h.

#include "CompileTrace.h"

#include "ampjit/Codegen/OpFromCall.h"
#include "ampjit/Codegen/PlanBuilder.h"
#include "ampjit/Dialect/Jit/IR/JitDialect.h"
#include "ampjit/InitAmpjit.h"
#include "ampjit/runtime/Files.h"
#include "ampjit/runtime/Plan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <filesystem>
#include <map>
#include <unistd.h>

namespace jit::detail {

using namespace mlir;

namespace {

Location locationOf(MLIRContext& context, const UserLocation& where) {
  if (where.file.empty())
    return UnknownLoc::get(&context);
  return FileLineColLoc::get(&context, where.file, where.line, where.column);
}

std::string printed(Operation* op, bool withLocations) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  OpPrintingFlags flags;
  if (withLocations)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false).useLocalScope();
  op->print(stream, flags);
  return text + "\n";
}

void writeDumpFile(const std::filesystem::path& path, const std::string& text) {
  if (rt::Status written = rt::writeFileAtomically(path, text); !written)
    throw Error("AMPJIT_DUMP: " + written.message());
}

/// The module of the joint graph: one function, arguments with jit.role,
/// results with jit.tied or jit.returned, op ids renumbered from 0 in
/// program order (the eager counter is process-wide, a module should not
/// depend on it).
OwningOpRef<ModuleOp> emitModule(MLIRContext& context, const TraceGraph& graph) {
  Location functionLocation = locationOf(context, graph.location);
  OwningOpRef<ModuleOp> module = ModuleOp::create(functionLocation);
  OpBuilder builder(&context);
  builder.setInsertionPointToEnd(module->getBody());

  SmallVector<Type> argumentTypes, resultTypes;
  for (const TraceGraph::Argument& argument : graph.arguments)
    argumentTypes.push_back(ampjit::codegen::toMlirType(&context, graph.valueTypes[size_t(argument.value)]));
  for (const TraceGraph::Result& result : graph.results)
    resultTypes.push_back(ampjit::codegen::toMlirType(&context, graph.valueTypes[size_t(result.value)]));
  auto function = func::FuncOp::create(builder, functionLocation, graph.name,
                                       builder.getFunctionType(argumentTypes, resultTypes));
  using ampjit::ir::JitDialect;
  for (auto [index, argument] : llvm::enumerate(graph.arguments))
    function.setArgAttr(unsigned(index), JitDialect::kRoleAttrName, builder.getStringAttr(roleName(argument.role)));
  for (auto [index, result] : llvm::enumerate(graph.results)) {
    if (result.tiedArgument)
      function.setResultAttr(unsigned(index), JitDialect::kTiedAttrName,
                             builder.getI64IntegerAttr(int64_t(*result.tiedArgument)));
    if (result.returnedToCaller)
      function.setResultAttr(unsigned(index), JitDialect::kReturnedAttrName, builder.getUnitAttr());
  }

  Block* entry = function.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  std::vector<Value> values(graph.valueTypes.size());
  for (auto [index, argument] : llvm::enumerate(graph.arguments)) {
    BlockArgument blockArgument = entry->getArgument(unsigned(index));
    // The plan names an argument after its location (PlanBuilder).
    if (!argument.name.empty())
      blockArgument.setLoc(NameLoc::get(builder.getStringAttr(argument.name), functionLocation));
    values[size_t(argument.value)] = blockArgument;
  }

  std::map<int64_t, int64_t> opIds;
  auto renumber = [&](int64_t id) { return opIds.try_emplace(id, int64_t(opIds.size())).first->second; };
  for (const TracedOp& op : graph.ops) {
    SmallVector<std::optional<Value>> operands;
    for (int64_t value : op.operands)
      operands.push_back(value >= 0 ? std::optional<Value>(values[size_t(value)]) : std::nullopt);
    SmallVector<Type> types;
    for (int64_t value : op.results)
      types.push_back(ampjit::codegen::toMlirType(&context, graph.valueTypes[size_t(value)]));
    AttributeMap attributes = op.attributes;
    for (const char* name : {"jit.op_id", "jit.vjp_of"}) // jit.grad_of_leaf is a unit flag
      if (auto found = attributes.find(name); found != attributes.end())
        found->second = renumber(std::get<int64_t>(found->second));
    FailureOr<Operation*> created = ampjit::codegen::createOperationFromCall(builder, locationOf(context, op.location),
                                                                     op.name, operands, types, attributes);
    if (failed(created))
      return nullptr;
    for (auto [index, value] : llvm::enumerate(op.results))
      values[size_t(value)] = (*created)->getResult(unsigned(index));
  }
  SmallVector<Value> returned;
  for (const TraceGraph::Result& result : graph.results)
    returned.push_back(values[size_t(result.value)]);
  func::ReturnOp::create(builder, functionLocation, returned);
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

std::filesystem::path temporaryReportPath() {
  static std::atomic<int> counter{0};
  return std::filesystem::temp_directory_path() /
         ("ampjit-amp-report-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ".json");
}

} // namespace

CompiledTrace compileTrace(const TraceGraph& graph, const CompileTraceOptions& options) {
  ampjit::registerAmpjitPasses();

  DialectRegistry registry;
  ampjit::registerAmpjitDialects(registry);
  MLIRContext context(registry, MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  std::string diagnostics;
  ScopedDiagnosticHandler collect(&context, [&](Diagnostic& diagnostic) {
    std::string location;
    llvm::raw_string_ostream stream(location);
    diagnostic.getLocation().print(stream);
    diagnostics += location + ": " + diagnostic.str() + "\n";
    for (const Diagnostic& note : diagnostic.getNotes())
      diagnostics += "  note: " + note.str() + "\n";
    return success();
  });
  auto fail = [&](const std::string& stage) -> Error {
    return Error("jit::trace '" + graph.name + "': " + stage + ":\n" + diagnostics);
  };

  OwningOpRef<ModuleOp> module = emitModule(context, graph);
  if (!module)
    throw fail("internal: the traced module is not valid IR");
  CompiledTrace compiled;
  compiled.tracedModule = printed(*module, /*withLocations=*/true);

  bool dumping = !options.dumpDirectory.empty();
  std::filesystem::path stem = std::filesystem::path(options.dumpDirectory) / options.dumpStem;
  if (dumping) {
    std::error_code error;
    std::filesystem::create_directories(options.dumpDirectory, error);
    writeDumpFile(stem.string() + ".0-traced.mlir", compiled.tracedModule);
  }

  std::filesystem::path reportPath = dumping ? std::filesystem::path(stem.string() + ".amp-report.json")
                                             : temporaryReportPath();
  std::string afterPasses;
  llvm::raw_string_ostream afterPassesStream(afterPasses);
  {
    PassManager passManager(&context, ModuleOp::getOperationName());
    std::string pipeline = "amp-pipeline{" + options.pipelineOptions + " report=" + reportPath.string() + "}";
    if (options.convertToNhwc)
      pipeline += ",jit-convert-layout{layout=nhwc}";
    if (failed(parsePassPipeline(pipeline, passManager, afterPassesStream)))
      throw Error("jit::trace '" + graph.name + "': bad AMP options '" + options.pipelineOptions +
                  "': " + afterPasses);
    if (dumping)
      passManager.enableIRPrinting([](Pass*, Operation*) { return false; },
                                   [](Pass*, Operation*) { return true; }, /*printModuleScope=*/true,
                                   /*printAfterOnlyOnChange=*/false, /*printAfterOnlyOnFailure=*/false,
                                   afterPassesStream);
    if (failed(passManager.run(*module)))
      throw fail("the AMP pipeline failed");
  }
  rt::Expected<std::string> report = rt::readWholeFile(reportPath);
  if (!report.ok())
    throw fail("the AMP pipeline wrote no report: " + report.message());
  compiled.ampReport = std::move(*report);
  if (!dumping)
    std::filesystem::remove(reportPath);

  FailureOr<func::FuncOp> entry = ampjit::codegen::findEntryFunction(*module, graph.name);
  if (failed(entry))
    throw fail("internal: the traced function is missing");
  ampjit::codegen::PlanOptions planOptions = options.plan;
  planOptions.recordLocations = true;
  FailureOr<rt::Plan> plan = ampjit::codegen::buildPlan(*entry, planOptions);
  if (failed(plan))
    throw fail("code generation failed");
  compiled.plan = std::move(*plan);
  if (dumping) {
    writeDumpFile(stem.string() + ".1-passes.mlir", afterPasses);
    writeDumpFile(stem.string() + ".2-amp.mlir", printed(*module, /*withLocations=*/true));
    writeDumpFile(stem.string() + ".3-plan.txt", rt::printPlan(compiled.plan));
  }
  return compiled;
}

} // namespace jit::detail
