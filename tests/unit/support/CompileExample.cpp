//===- CompileExample.cpp - a sample module compiled to a plan, for tests -===//

#include "CompileExample.h"

#include "ampjit/InitAmpjit.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

using namespace mlir;

namespace ampjit::testing {

CompiledModule compileSource(const std::string &source, const std::string &sourceName,
                             const std::string &pipeline, codegen::PlanOptions options) {
  static bool registered = (ampjit::registerAmpjitPasses(), true);
  (void)registered;
  DialectRegistry registry;
  ampjit::registerAmpjitDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context, sourceName);
  EXPECT_TRUE(module) << sourceName;
  if (!module)
    return {};
  if (!pipeline.empty()) {
    PassManager passManager(&context, ModuleOp::getOperationName());
    EXPECT_TRUE(succeeded(parsePassPipeline(pipeline, passManager))) << pipeline;
    EXPECT_TRUE(succeeded(passManager.run(*module))) << pipeline;
  }
  CompiledModule compiled;
  llvm::raw_string_ostream os(compiled.ir);
  module->print(os);
  FailureOr<func::FuncOp> entry = codegen::findEntryFunction(*module, "");
  EXPECT_TRUE(succeeded(entry));
  if (failed(entry))
    return compiled;
  FailureOr<runtime::Plan> plan = codegen::buildPlan(*entry, options);
  EXPECT_TRUE(succeeded(plan)) << pipeline;
  if (succeeded(plan))
    compiled.plan = std::move(*plan);
  return compiled;
}

runtime::Plan compileExample(const std::string &file, const std::string &ampOptions,
                             codegen::PlanOptions options) {
  std::string path = std::string(AMPJIT_EXAMPLES_DIR) + "/" + file;
  std::ifstream stream(path);
  EXPECT_TRUE(stream) << path;
  std::stringstream source;
  source << stream.rdbuf();
  std::string pipeline = ampOptions.empty() ? "" : "amp-pipeline{" + ampOptions + "}";
  return compileSource(source.str(), path, pipeline, options).plan;
}

std::vector<std::vector<std::byte>> snapshot(const std::vector<runtime::Tensor> &tensors) {
  std::vector<std::vector<std::byte>> bytes;
  for (const runtime::Tensor &tensor : tensors)
    bytes.emplace_back(tensor.bytes(), tensor.bytes() + tensor.type().byteSize());
  return bytes;
}

} // namespace ampjit::testing
