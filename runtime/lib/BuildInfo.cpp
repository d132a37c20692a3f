#include "ampjit/runtime/BuildInfo.h"

namespace ampjit::runtime {

bool cudaBackendBuilt() {
#ifdef AMPJIT_CUDA_ENABLED
  return true;
#else
  return false;
#endif
}

std::string buildDescription() {
  std::string description = "ampjit (C++20";
  description += cudaBackendBuilt() ? ", CUDA backend built" : ", CPU only";
  description += ")";
  return description;
}

} // namespace ampjit::runtime
