#include "ampjit/runtime/HostMemory.h"

#include "ampjit/runtime/Environment.h"
#include "ampjit/runtime/Files.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string_view>

#if defined(__linux__)
#include <sys/sysinfo.h>
#endif

namespace ampjit::runtime {

namespace {

constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();

std::atomic<std::size_t> heldBytes{0};
/// kNoLimit: no override, the environment or the machine decides.
std::atomic<std::size_t> overrideBytes{kNoLimit};

/// The sources a person set on purpose; only the machine's limit is worth pointing past.
constexpr std::string_view kOverrideSource = "setHostMemoryLimit";
constexpr std::string_view kEnvironmentSource = "AMPJIT_HOST_MEMORY_LIMIT";

/// A cgroup file's byte count; nullopt for "max", a missing file or anything else.
std::optional<std::size_t> readByteCount(const std::string& path) {
  Expected<std::string> text = readWholeFile(path);
  if (!text)
    return std::nullopt;
  std::string_view digits = *text;
  while (!digits.empty() && std::isspace(static_cast<unsigned char>(digits.back())))
    digits.remove_suffix(1);
  std::size_t value = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size())
    return std::nullopt;
  return value;
}

/// The lowest memory limit of this process's cgroup and its ancestors (a
/// parent's limit binds its children too), cgroup v2 or v1.
std::optional<std::size_t> cgroupMemoryLimit() {
  Expected<std::string> membership = readWholeFile("/proc/self/cgroup");
  if (!membership)
    return std::nullopt;
  std::istringstream in(*membership);
  std::optional<std::size_t> lowest;
  std::string line;
  while (std::getline(in, line)) {
    // "hierarchy-id:controllers:path"; v2's controllers are empty.
    std::size_t first = line.find(':');
    std::size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos)
      continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    std::string root, file;
    if (controllers.empty()) {
      root = "/sys/fs/cgroup";
      file = "/memory.max";
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      root = "/sys/fs/cgroup/memory";
      file = "/memory.limit_in_bytes";
    } else {
      continue;
    }
    while (true) {
      if (std::optional<std::size_t> limit = readByteCount(root + (path == "/" ? "" : path) + file))
        lowest = std::min(lowest.value_or(kNoLimit), *limit);
      if (path.empty() || path == "/")
        break;
      std::size_t slash = path.rfind('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
  return lowest;
}

/// The most the machine can back: memory plus swap, or the cgroup's limit
/// plus swap where that is lower. Swap only ever adds, so this is an upper
/// bound, not a guess at what is free.
HostMemoryLimit machineLimit() {
#if defined(__linux__)
  struct sysinfo info {};
  if (sysinfo(&info) != 0 || info.totalram == 0)
    return {kNoLimit, "no limit (the machine did not report its memory)"};
  std::size_t unit = info.mem_unit == 0 ? 1 : info.mem_unit;
  std::size_t swap = std::size_t(info.totalswap) * unit;
  std::size_t machine = std::size_t(info.totalram) * unit + swap;
  std::optional<std::size_t> cgroup = cgroupMemoryLimit();
  if (cgroup && *cgroup <= kNoLimit - swap && *cgroup + swap < machine)
    return {*cgroup + swap, "this process's memory cgroup limit and the machine's swap"};
  return {machine, "this machine's memory and swap"};
#else
  return {kNoLimit, "no limit (the machine's memory is not known on this system)"};
#endif
}

/// The environment's limit or the machine's, read once: allocation is hot.
const Expected<HostMemoryLimit>& environmentOrMachineLimit() {
  static const Expected<HostMemoryLimit> limit = []() -> Expected<HostMemoryLimit> {
    const char* text = std::getenv("AMPJIT_HOST_MEMORY_LIMIT");
    if (text == nullptr || *text == '\0')
      return machineLimit();
    std::optional<long long> bytes = environmentInteger("AMPJIT_HOST_MEMORY_LIMIT", 0);
    if (!bytes || *bytes < 0)
      return Status::error(std::string("AMPJIT_HOST_MEMORY_LIMIT='") + text +
                           "' is not a count of bytes (a decimal integer of 0 or more)");
    return HostMemoryLimit{std::size_t(*bytes), kEnvironmentSource};
  }();
  return limit;
}

/// "25276510208 bytes (23.5 GiB)": the exact count to compare, the scaled one to read.
std::string describeBytes(std::size_t bytes) {
  std::string text = std::to_string(bytes) + " bytes";
  constexpr std::size_t kMiB = std::size_t(1) << 20, kGiB = std::size_t(1) << 30;
  if (bytes >= kMiB) {
    char scaled[32];
    bool gibibytes = bytes >= kGiB;
    std::snprintf(scaled, sizeof scaled, " (%.1f %s)", double(bytes) / double(gibibytes ? kGiB : kMiB),
                  gibibytes ? "GiB" : "MiB");
    text += scaled;
  }
  return text;
}

} // namespace

std::size_t hostBytesHeld() { return heldBytes.load(std::memory_order_relaxed); }

Expected<HostMemoryLimit> hostMemoryLimit() {
  std::size_t bytes = overrideBytes.load(std::memory_order_relaxed);
  if (bytes != kNoLimit)
    return HostMemoryLimit{bytes, kOverrideSource};
  return environmentOrMachineLimit();
}

void setHostMemoryLimit(std::optional<std::size_t> bytes) {
  overrideBytes.store(bytes.value_or(kNoLimit), std::memory_order_relaxed);
}

Status reserveHostBytes(std::size_t bytes) {
  Expected<HostMemoryLimit> limit = hostMemoryLimit();
  if (!limit)
    return Status::error(limit.message());
  std::size_t held = heldBytes.fetch_add(bytes, std::memory_order_relaxed);
  if (bytes <= limit->bytes && held <= limit->bytes - bytes)
    return Status::success();
  heldBytes.fetch_sub(bytes, std::memory_order_relaxed);
  bool setOnPurpose = limit->source == kOverrideSource || limit->source == kEnvironmentSource;
  return Status::error(describeBytes(bytes) + " more would pass the host memory limit: tensors hold " +
                       describeBytes(held) + " already, and " + std::string(limit->source) + " allows " +
                       describeBytes(limit->bytes) + (setOnPurpose ? "" : " (AMPJIT_HOST_MEMORY_LIMIT sets another)"));
}

void releaseHostBytes(std::size_t bytes) { heldBytes.fetch_sub(bytes, std::memory_order_relaxed); }

} // namespace ampjit::runtime
