#include "ampjit/runtime/Environment.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ampjit::runtime {

bool environmentFlag(const char* name, bool whenUnset) {
  const char* value = std::getenv(name);
  if (value == nullptr)
    return whenUnset;
  return *value != '\0' && std::strcmp(value, "0") != 0;
}

std::optional<long long> environmentInteger(const char* name, long long fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0')
    return fallback;
  char* end = nullptr;
  errno = 0;
  long long parsed = std::strtoll(value, &end, 10);
  if (errno != 0 || *end != '\0')
    return std::nullopt;
  return parsed;
}

} // namespace ampjit::runtime
