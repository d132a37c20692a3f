//===- InitAmpjit.cpp - what ampjit's tools register ----------------------===//

#include "ampjit/InitAmpjit.h"

#include "ampjit/Dialect/Amp/IR/AmpDialect.h"
#include "ampjit/Dialect/Amp/Transforms/Passes.h"
#include "ampjit/Dialect/Jit/IR/JitDialect.h"
#include "ampjit/Dialect/Jit/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

#include <mutex>

namespace ampjit {

void registerAmpjitDialects(mlir::DialectRegistry &registry) {
  registry.insert<ir::JitDialect, ir::amp::AmpDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect>();
}

void registerAmpjitPasses() {
  // The tools call this from main, the library from each compile: MLIR's
  // registry refuses a pass registered twice.
  static std::once_flag registered;
  std::call_once(registered, [] {
    mlir::registerCanonicalizerPass();
    mlir::registerCSEPass();
    ir::amp::registerAmpPasses();
    ir::registerJitPasses();
  });
}

} // namespace ampjit
