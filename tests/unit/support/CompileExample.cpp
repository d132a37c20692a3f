//===- CompileExample.cpp - a sample module compiled to a plan, for tests -===//

#include "CompileExample.h"

#include "ampjit/Codegen/CompileModule.h"

#include "ampjit/InitAmpjit.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

#include "ampjit/runtime/Backend.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

using namespace mlir;

namespace ampjit::testing {

namespace rt = ampjit::runtime;

CompiledModule compileSource(const std::string &source, const std::string &sourceName,
                             const std::string &pipeline, codegen::PlanOptions options) {
  ampjit::registerAmpjitPasses();
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

std::string examplePath(const std::string &file) {
  std::string configured = std::string(AMPJIT_EXAMPLES_DIR) + "/" + file;
  // The GPU bundle's tests run from the root of a copy of the repository on
  // another machine, where the source tree they were built from is absent.
  if (!std::filesystem::exists(configured) && std::filesystem::exists("examples/" + file))
    return "examples/" + file;
  return configured;
}

std::string exampleText(const std::string &file) {
  std::ifstream stream(examplePath(file));
  EXPECT_TRUE(stream) << examplePath(file);
  std::stringstream source;
  source << stream.rdbuf();
  return source.str();
}

runtime::Plan compileExample(const std::string &file, const std::string &ampOptions,
                             codegen::PlanOptions options) {
  runtime::Expected<runtime::Plan> plan =
      codegen::compileModule(exampleText(file), examplePath(file), {.ampPipeline = ampOptions, .plan = options});
  EXPECT_TRUE(plan.ok()) << plan.message();
  return plan.ok() ? std::move(*plan) : runtime::Plan{};
}

std::vector<rt::Tensor> initialArguments(const rt::Plan &plan, StepData data) {
  using namespace mnist_step;
  std::mt19937_64 generator(data.seed);
  std::vector<rt::Tensor> arguments;
  std::normal_distribution<double> normal(0.0, 1.0);
  const rt::Shape &imageShape = plan.buffers[plan.argumentBuffer(kImages)].type.shape;
  size_t features = size_t(plan.buffers[plan.argumentBuffer(kImages)].type.elementCount() / imageShape[0]);
  std::vector<std::vector<double>> prototypes(size_t(data.classes), std::vector<double>(features));
  for (auto &prototype : prototypes)
    for (double &value : prototype)
      value = normal(generator);
  for (size_t index = 0; index < plan.argumentCount(); ++index) {
    const rt::BufferDesc &buffer = plan.buffers[plan.argumentBuffer(index)];
    std::vector<double> values(size_t(buffer.type.elementCount()), 0.0);
    if (index == kImages) {
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = prototypes[(i / features) % prototypes.size()][i % features] + 0.5 * normal(generator);
    } else if (index == kLabels) {
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = double(int64_t(i) % data.classes);
    } else if (buffer.role == rt::BufferRole::Param && buffer.derivedFrom < 0) {
      int64_t fanIn = buffer.type.shape.size() == 2 ? buffer.type.shape[1] : data.defaultFanIn;
      std::uniform_real_distribution<double> uniform(-1 / std::sqrt(double(fanIn)),
                                                     1 / std::sqrt(double(fanIn)));
      for (double &value : values)
        value = uniform(generator);
    } else if (index == kLearningRate) {
      values[0] = data.learningRate;
    } else if (index == kScale || index == kLastStepFinite) {
      values[0] = index == kScale ? 65536.0 : 1.0; // no step has overflowed yet
    }
    rt::Expected<rt::Tensor> tensor = rt::Tensor::fromDoubles(buffer.type.dtype, buffer.type.shape, values);
    EXPECT_TRUE(tensor.ok()) << tensor.message();
    arguments.push_back(std::move(*tensor));
  }
  rt::Status derived = rt::rederiveArguments(plan, arguments);
  EXPECT_TRUE(derived.ok()) << derived.message();
  return arguments;
}

std::vector<std::vector<std::byte>> snapshot(const std::vector<runtime::Tensor> &tensors) {
  std::vector<std::vector<std::byte>> bytes;
  for (const runtime::Tensor &tensor : tensors)
    bytes.emplace_back(tensor.bytes(), tensor.bytes() + tensor.type().byteSize());
  return bytes;
}

} // namespace ampjit::testing
