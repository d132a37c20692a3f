#ifndef AMPJIT_RUNTIME_CPUBACKEND_H
#define AMPJIT_RUNTIME_CPUBACKEND_H

// The CPU backend: the numerical reference for every other backend. Every
// step kind has a reference kernel; f16/bf16 values are stored as 16-bit
// patterns and rounded to nearest even on every store; arithmetic is done as
// tensor cores do it (low-precision inputs widened, f32 compute and
// accumulation, f64 for f64 data, one rounding per result); GEMMs go through
// a statically linked OpenBLAS on widened operands. Results are deterministic:
// the same plan and inputs give the same bits on the same machine
// (blasKernelName() names what makes machines differ).

#include "ampjit/runtime/Backend.h"

#include <memory>

namespace ampjit::runtime {

struct CpuBackendOptions {
  /// Fill the arena with NaN patterns before each run and each temporary's
  /// bytes after its last use, so that a plan reading a dead or unwritten
  /// temporary shows it (results of a correct plan do not change). Also on
  /// when the environment has AMPJIT_POISON_FREED=1.
  bool poisonFreedTemporaries = false;
  /// Stop with an error naming the first step whose floating-point output
  /// holds an inf or NaN (DESIGN: AMPJIT_CHECK_NUMERICS=1 also turns it on).
  /// Off by default: overflow is the loss scaler's business, not an error.
  bool checkNumerics = false;
  /// OpenBLAS threads. Fixed (not "all cores") so results and timings do not
  /// depend on the machine's load; one process shares one setting.
  int blasThreads = 1;
};

std::unique_ptr<Backend> createCpuBackend(CpuBackendOptions options = {});

/// The OpenBLAS kernels this process's GEMMs run ("Haswell", "SkylakeX", ...):
/// OpenBLAS's choice for the CPU, or what OPENBLAS_CORETYPE asked for. They
/// decide the GEMMs' summation order, so results are the same bits only
/// between machines that run the same kernels.
const char* blasKernelName();

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_CPUBACKEND_H
