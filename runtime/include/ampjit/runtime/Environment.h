#ifndef AMPJIT_RUNTIME_ENVIRONMENT_H
#define AMPJIT_RUNTIME_ENVIRONMENT_H

#include <optional>

namespace ampjit::runtime {

/// Whether an AMPJIT_* switch (AMPJIT_CHECK_NUMERICS, AMPJIT_POISON_FREED, ...)
/// is on: set to anything but "" or "0"; `whenUnset` where it is not set (a
/// switch that is on by default, AMPJIT_CUDA_CACHE_HINTS, is turned off with
/// 0). One rule for every layer, so the frontend and the backends never
/// disagree about the same variable.
bool environmentFlag(const char* name, bool whenUnset = false);

/// An AMPJIT_* number (AMPJIT_CUDA_GEMM_SM_RESERVE): `fallback` when unset
/// or "", nullopt when set to anything but a decimal integer.
std::optional<long long> environmentInteger(const char* name, long long fallback);

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_ENVIRONMENT_H
