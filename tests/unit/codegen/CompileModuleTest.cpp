// codegen::compileModule: MLIR text to a plan behind a header without MLIR,
// the way in for a framework that embeds ampjit (and ampjit-run's).

#include "ampjit/Codegen/CompileModule.h"

#include "CompileExample.h"

#include <gtest/gtest.h>

#include <thread>

namespace {

namespace rt = ampjit::runtime;
using ampjit::codegen::compileModule;
using ampjit::testing::exampleText;

TEST(CompileModule, GivesThePlanOfTheAmpPipelineRunOnTheParsedModule) {
  // The same module through the pass manager by hand (the tests' own path):
  // the two plans must print alike, fused or not, at O0, O1 and O2.
  std::string text = exampleText("mnist_train_step.mlir");
  for (std::string amp : {"level=O0", "level=O1 dtype=f16 target=cpu", "level=O2 dtype=bf16 target=cpu"}) {
    for (bool fuse : {false, true}) {
      SCOPED_TRACE(amp + (fuse ? " fused" : ""));
      rt::Expected<rt::Plan> plan = compileModule(text, "mnist_train_step.mlir",
                                                  {.ampPipeline = amp, .plan = {.fuseElementwise = fuse}});
      ASSERT_TRUE(plan.ok()) << plan.message();
      rt::Plan expected = ampjit::testing::compileSource(text, "mnist_train_step.mlir", "amp-pipeline{" + amp + "}",
                                                         {.fuseElementwise = fuse})
                              .plan;
      EXPECT_EQ(rt::printPlan(*plan), rt::printPlan(expected));
    }
  }
}

TEST(CompileModule, WithoutAPipelineTheModuleIsLoweredAsWritten) {
  std::string text = exampleText("mnist_train_step.mlir");
  rt::Expected<rt::Plan> plan = compileModule(text, "step.mlir");
  ASSERT_TRUE(plan.ok()) << plan.message();
  for (const rt::BufferDesc& buffer : plan->buffers)
    EXPECT_NE(buffer.type.dtype, rt::DType::F16) << "nothing was cast without the AMP pipeline";
  EXPECT_EQ(plan->argumentCount(), 20u);
}

TEST(CompileModule, MalformedIrIsAnErrorAtItsSourceLine) {
  rt::Expected<rt::Plan> plan = compileModule("func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                                              "  %y = jit.relu %x : tensor<4xf16>\n"
                                              "  return %y : tensor<4xf32>\n}\n",
                                              "graph-from-a-framework.mlir");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.message().rfind("graph-from-a-framework.mlir: not a valid module", 0), 0u) << plan.message();
  EXPECT_NE(plan.message().find("graph-from-a-framework.mlir:2:"), std::string::npos) << plan.message();
  EXPECT_NE(plan.message().find("error:"), std::string::npos) << plan.message();
}

TEST(CompileModule, AVerifierRuleBrokenIsAnErrorThatNamesTheRuleAndLine) {
  // Two arguments swapped through their tied results.
  rt::Expected<rt::Plan> plan =
      compileModule("func.func @step(%a: tensor<4xf32> {jit.role = \"param\"}, %b: tensor<4xf32> {jit.role = "
                    "\"param\"}) -> (tensor<4xf32> {jit.tied = 0 : i64}, tensor<4xf32> {jit.tied = 1 : i64}) {\n"
                    "  return %b, %a : tensor<4xf32>, tensor<4xf32>\n}\n",
                    "tied.mlir");
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.message().find("tied.mlir:2:"), std::string::npos) << plan.message();
  EXPECT_NE(plan.message().find("tied to argument #0"), std::string::npos) << plan.message();
}

TEST(CompileModule, BadPipelineOptionsAndAMissingFunctionAreErrorsThatSaySo) {
  std::string text = exampleText("mnist_train_step.mlir");
  // An option the pipeline does not have fails to parse; a value it does not
  // take fails when the pipeline runs. Both say which.
  rt::Expected<rt::Plan> unknownOption = compileModule(text, "step.mlir", {.ampPipeline = "level=O1 speed=max"});
  ASSERT_FALSE(unknownOption.ok());
  EXPECT_NE(unknownOption.message().find("bad AMP pipeline options 'level=O1 speed=max'"), std::string::npos)
      << unknownOption.message();
  EXPECT_NE(unknownOption.message().find("no such option speed"), std::string::npos) << unknownOption.message();

  rt::Expected<rt::Plan> badLevel = compileModule(text, "step.mlir", {.ampPipeline = "level=O7"});
  ASSERT_FALSE(badLevel.ok());
  EXPECT_EQ(badLevel.message().rfind("step.mlir: the AMP pipeline failed", 0), 0u) << badLevel.message();
  EXPECT_NE(badLevel.message().find("unknown AMP level 'O7'"), std::string::npos) << badLevel.message();

  rt::Expected<rt::Plan> missing = compileModule(text, "step.mlir", {.function = "eval_step"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("no function '@eval_step'"), std::string::npos) << missing.message();
}

TEST(CompileModule, CompilesFromSeveralThreadsAtOnce) {
  // Each call has its own MLIR context; pass registration happens once.
  std::string text = exampleText("mnist_train_step.mlir");
  std::vector<std::string> printed(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < printed.size(); ++i)
    threads.emplace_back([&, i] {
      rt::Expected<rt::Plan> plan = compileModule(text, "step.mlir", {.ampPipeline = "level=O1 dtype=f16 target=cpu"});
      printed[i] = plan.ok() ? rt::printPlan(*plan) : "error: " + plan.message();
    });
  for (std::thread& thread : threads)
    thread.join();
  EXPECT_EQ(printed[0].rfind("error:", 0), std::string::npos) << printed[0];
  for (size_t i = 1; i < printed.size(); ++i)
    EXPECT_EQ(printed[i], printed[0]);
}

} // namespace
