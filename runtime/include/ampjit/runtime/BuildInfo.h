#ifndef AMPJIT_RUNTIME_BUILDINFO_H
#define AMPJIT_RUNTIME_BUILDINFO_H

#include <string>

namespace ampjit::runtime {

/// True when this build contains the CUDA backend (the toolkit was found at
/// configure time and AMPJIT_ENABLE_CUDA was not OFF). Whether a device is
/// present is a separate, run-time question.
bool cudaBackendBuilt();

/// One line describing the build, for `--version` output and bug reports.
std::string buildDescription();

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_BUILDINFO_H
