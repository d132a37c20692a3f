#ifndef AMPJIT_RUNTIME_ENVIRONMENT_H
#define AMPJIT_RUNTIME_ENVIRONMENT_H

namespace ampjit::runtime {

/// Whether an AMPJIT_* switch (AMPJIT_CHECK_NUMERICS, AMPJIT_POISON_FREED, ...)
/// is on: set to anything but "" or "0". One rule for every layer, so the
/// frontend and the backends never disagree about the same variable.
bool environmentFlag(const char* name);

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_ENVIRONMENT_H
