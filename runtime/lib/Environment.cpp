#include "ampjit/runtime/Environment.h"

#include <cstdlib>
#include <cstring>

namespace ampjit::runtime {

bool environmentFlag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

} // namespace ampjit::runtime
