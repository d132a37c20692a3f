//===- amp-opt.cpp - mlir-opt over ampjit's dialects and passes -----------===//

#include "ampjit/InitAmpjit.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  ampjit::registerAmpjitDialects(registry);
  ampjit::registerAmpjitPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "ampjit: the jit and amp dialects and their passes\n", registry));
}
