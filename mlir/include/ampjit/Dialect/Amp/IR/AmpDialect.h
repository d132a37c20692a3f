//===- AmpDialect.h - the amp dialect -------------------------------------===//

#ifndef AMPJIT_DIALECT_AMP_IR_AMPDIALECT_H
#define AMPJIT_DIALECT_AMP_IR_AMPDIALECT_H

#include "mlir/IR/Dialect.h"

#include "ampjit/Dialect/Amp/IR/AmpDialect.h.inc"

#endif // AMPJIT_DIALECT_AMP_IR_AMPDIALECT_H
