// C++-side checks of the dialects: what the frontend relies on when it builds
// ops (result-type inference, folding) and what the verifier reports.

#include "ampjit/Dialect/Amp/IR/AmpOps.h"
#include "ampjit/Dialect/Jit/IR/JitOps.h"
#include "ampjit/Dialect/Jit/IR/StateModel.h"
#include "ampjit/InitAmpjit.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace ampjit;

namespace {

class DialectTest : public ::testing::Test {
protected:
  DialectTest() {
    DialectRegistry registry;
    registerAmpjitDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    // Collect diagnostics instead of printing them.
    handler = std::make_unique<ScopedDiagnosticHandler>(&context, [this](Diagnostic &diag) {
      diagnostics += diag.str() + "\n";
      return success();
    });
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape, Type element) {
    return RankedTensorType::get(shape, element);
  }

  /// A function whose arguments have the given types, with the builder inside it.
  func::FuncOp makeFunction(OpBuilder &builder, TypeRange argumentTypes) {
    auto function = func::FuncOp::create(builder, builder.getUnknownLoc(), "f",
                                         builder.getFunctionType(argumentTypes, {}));
    builder.setInsertionPointToStart(function.addEntryBlock());
    return function;
  }

  OwningOpRef<ModuleOp> parse(StringRef source) {
    return parseSourceString<ModuleOp>(source, &context);
  }

  MLIRContext context;
  std::unique_ptr<ScopedDiagnosticHandler> handler;
  std::string diagnostics;
};

TEST_F(DialectTest, MatmulBuilderInfersBroadcastBatchAndTransposedShape) {
  OpBuilder builder(&context);
  auto module = ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToStart(module.getBody());
  Type f16 = builder.getF16Type();
  func::FuncOp function = makeFunction(builder, {tensor({4, 1, 64, 784}, f16), tensor({3, 512, 784}, f16)});
  auto matmul = ir::MatmulOp::create(builder, builder.getUnknownLoc(), function.getArgument(0),
                                     function.getArgument(1), /*transpose_lhs=*/false,
                                     /*transpose_rhs=*/true);
  EXPECT_EQ(matmul.getType(), tensor({4, 3, 64, 512}, f16));
  EXPECT_TRUE(succeeded(verify(matmul)));
  module->erase();
}

TEST_F(DialectTest, InferenceFailureNamesTheOperandsAndDimension) {
  Type f32 = Float32Type::get(&context);
  SmallVector<Type> inferred;
  // Build through the generic inference entry point, as a pass would.
  OpBuilder builder(&context);
  auto module = ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToStart(module.getBody());
  func::FuncOp function = makeFunction(builder, {tensor({2, 3}, f32), tensor({4}, f32)});
  ir::AddOp::Adaptor adaptor(ValueRange{function.getArgument(0), function.getArgument(1)});
  LogicalResult result = ir::AddOp::inferReturnTypes(&context, builder.getUnknownLoc(), adaptor,
                                                     inferred);
  EXPECT_TRUE(failed(result));
  EXPECT_NE(diagnostics.find("'jit.add' operand 'rhs' of type 'tensor<4xf32>' does not broadcast "
                             "with operand 'lhs' of type 'tensor<2x3xf32>'"),
            std::string::npos)
      << diagnostics;
  EXPECT_NE(diagnostics.find("dimension 1 would be both 3 and 4"), std::string::npos) << diagnostics;
  module->erase();
}

TEST_F(DialectTest, ArgumentRolesRoundTripThroughTheirSpelling) {
  for (auto role : {ir::ArgumentRole::Input, ir::ArgumentRole::Param, ir::ArgumentRole::Grad,
                    ir::ArgumentRole::OptState, ir::ArgumentRole::ScalerState,
                    ir::ArgumentRole::Hyper}) {
    std::optional<ir::ArgumentRole> parsed = ir::parseArgumentRole(ir::stringifyArgumentRole(role));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, role);
  }
  EXPECT_FALSE(ir::parseArgumentRole("weights").has_value());
  EXPECT_FALSE(ir::parseArgumentRole("").has_value());
}

TEST_F(DialectTest, ExactCastRoundTripFoldsButLossyOneDoesNot) {
  OpBuilder builder(&context);
  auto module = ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToStart(module.getBody());
  Type f16 = builder.getF16Type(), f32 = builder.getF32Type(), bf16 = builder.getBF16Type();
  func::FuncOp function = makeFunction(builder, {tensor({8}, f16), tensor({8}, f32)});
  Location loc = builder.getUnknownLoc();

  // f16 -> f32 -> f16 is exact: folds to the original value.
  Value widened = builder.createOrFold<ir::amp::CastOp>(loc, tensor({8}, f32), function.getArgument(0));
  Value back = builder.createOrFold<ir::amp::CastOp>(loc, tensor({8}, f16), widened);
  EXPECT_EQ(back, function.getArgument(0));

  // f32 -> f16 -> f32 rounds: it must stay (only an explicit cast-fusion option may fold it).
  Value narrowed = builder.createOrFold<ir::amp::CastOp>(loc, tensor({8}, f16), function.getArgument(1));
  Value again = builder.createOrFold<ir::amp::CastOp>(loc, tensor({8}, f32), narrowed);
  EXPECT_NE(again, function.getArgument(1));

  // f16 -> bf16 is not a widening: bf16 has fewer mantissa bits.
  Value toBf16 = builder.createOrFold<ir::amp::CastOp>(loc, tensor({8}, bf16), function.getArgument(0));
  Value fromBf16 = builder.createOrFold<ir::amp::CastOp>(loc, tensor({8}, f16), toBf16);
  EXPECT_NE(fromBf16, function.getArgument(0));
  module->erase();
}

TEST_F(DialectTest, VerifierAcceptsAConsistentStateModel) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
    func.func @step(%x: tensor<4x8xf32> {jit.role = "input"},
                    %w: tensor<2x8xf32> {jit.role = "param"},
                    %lr: tensor<f32> {jit.role = "hyper"})
        -> (tensor<4x2xf32>, tensor<2x8xf32> {jit.tied = 1 : i64}) {
      %y = jit.matmul %x, %w {transpose_rhs, jit.op_id = 0 : i64}
          : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<4x2xf32>
      return %y, %w : tensor<4x2xf32>, tensor<2x8xf32>
    })mlir");
  ASSERT_TRUE(module) << diagnostics;
  EXPECT_TRUE(diagnostics.empty()) << diagnostics;
}

TEST_F(DialectTest, VerifierRejectsStateTiedToAnInput) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
    func.func @step(%x: tensor<4xf32> {jit.role = "input"}) -> (tensor<4xf32> {jit.tied = 0 : i64}) {
      return %x : tensor<4xf32>
    })mlir");
  EXPECT_FALSE(module);
  EXPECT_NE(diagnostics.find("result #0 is tied to argument #0, an \"input\""), std::string::npos)
      << diagnostics;
}

TEST_F(DialectTest, SgdUpdateInfersTheMomentumBufferResultOnlyWhenGiven) {
  OpBuilder builder(&context);
  auto module = ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToStart(module.getBody());
  Type f32 = builder.getF32Type(), f16 = builder.getF16Type();
  func::FuncOp function =
      makeFunction(builder, {tensor({16}, f32), tensor({16}, f16), tensor({16}, f32), tensor({}, f32)});
  Location loc = builder.getUnknownLoc();
  auto plain = ir::SgdUpdateOp::create(builder, loc, function.getArgument(0), function.getArgument(1),
                                       /*momentum_buffer=*/Value(), /*step=*/Value(),
                                       function.getArgument(3), /*inv_scale=*/Value(),
                                       /*predicate=*/Value(), llvm::APFloat(0.0), llvm::APFloat(0.0),
                                       llvm::APFloat(0.0));
  EXPECT_EQ(plain->getNumResults(), 1u);
  EXPECT_TRUE(succeeded(verify(plain))) << diagnostics;
  auto withMomentum = ir::SgdUpdateOp::create(
      builder, loc, function.getArgument(0), function.getArgument(1), function.getArgument(2),
      Value(), function.getArgument(3), Value(), Value(), llvm::APFloat(0.9), llvm::APFloat(0.0),
      llvm::APFloat(0.0), /*nesterov=*/true);
  ASSERT_EQ(withMomentum->getNumResults(), 2u);
  EXPECT_EQ(withMomentum.getNewMomentumBuffer().getType(), tensor({16}, f32));
  EXPECT_TRUE(succeeded(verify(withMomentum))) << diagnostics;
  module->erase();
}

} // namespace
