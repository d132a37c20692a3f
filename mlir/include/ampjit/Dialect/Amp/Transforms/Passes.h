//===- Passes.h - automatic mixed precision passes --------------*- C++ -*-===//

#ifndef AMPJIT_DIALECT_AMP_TRANSFORMS_PASSES_H
#define AMPJIT_DIALECT_AMP_TRANSFORMS_PASSES_H

#include "ampjit/Dialect/Amp/IR/AmpDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace ampjit::ir::amp {

#define GEN_PASS_DECL
#include "ampjit/Dialect/Amp/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "ampjit/Dialect/Amp/Transforms/Passes.h.inc"

} // namespace ampjit::ir::amp

#endif // AMPJIT_DIALECT_AMP_TRANSFORMS_PASSES_H
