//===- CompileExample.cpp - a sample module compiled to a plan, for tests -===//

#include "CompileExample.h"

#include "ampjit/InitAmpjit.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace ampjit::testing {

runtime::Plan compileExample(const std::string &file, const std::string &ampOptions,
                             codegen::PlanOptions options) {
  static bool registered = (ampjit::registerAmpjitPasses(), true);
  (void)registered;
  DialectRegistry registry;
  ampjit::registerAmpjitDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(std::string(AMPJIT_EXAMPLES_DIR) + "/" + file, &context);
  EXPECT_TRUE(module) << file;
  if (!module)
    return {};
  if (!ampOptions.empty()) {
    PassManager passManager(&context, ModuleOp::getOperationName());
    EXPECT_TRUE(succeeded(parsePassPipeline("amp-pipeline{" + ampOptions + "}", passManager)));
    EXPECT_TRUE(succeeded(passManager.run(*module))) << ampOptions;
  }
  FailureOr<func::FuncOp> entry = codegen::findEntryFunction(*module, "");
  EXPECT_TRUE(succeeded(entry));
  if (failed(entry))
    return {};
  FailureOr<runtime::Plan> plan = codegen::buildPlan(*entry, options);
  EXPECT_TRUE(succeeded(plan));
  return succeeded(plan) ? std::move(*plan) : runtime::Plan{};
}

} // namespace ampjit::testing
