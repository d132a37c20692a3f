//===- InitAmpjit.h - what ampjit's tools register ------------------------===//
//
// DESIGN: never registerAllDialects; register exactly what we use, so the
// tools stay small and link fast.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_INITAMPJIT_H
#define AMPJIT_INITAMPJIT_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace ampjit {

/// The jit and amp dialects, plus func and arith which traced modules use.
void registerAmpjitDialects(mlir::DialectRegistry &registry);

/// Every ampjit pass, plus the upstream cleanups our pipelines run
/// (canonicalize, cse). Registers once however often and from however many
/// threads it is called.
void registerAmpjitPasses();

} // namespace ampjit

#endif // AMPJIT_INITAMPJIT_H
