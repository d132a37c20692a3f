#ifndef AMPJIT_RUNTIME_HOSTMEMORY_H
#define AMPJIT_RUNTIME_HOSTMEMORY_H

// What host tensors hold, and the most they may hold. Storage::allocate
// zero-fills every byte it hands out, so an allocation the kernel granted on
// credit is touched at once: past the machine's memory and swap the process
// would be killed by the OOM killer instead of told. Counting what tensors
// hold turns that into an error naming the request, what is held and the limit.

#include "ampjit/runtime/Status.h"

#include <cstddef>
#include <optional>
#include <string_view>

namespace ampjit::runtime {

/// The most host bytes tensors may hold at once, and where that figure came from.
struct HostMemoryLimit {
  std::size_t bytes;
  /// For a person: "AMPJIT_HOST_MEMORY_LIMIT", "this machine's memory and swap", ...
  /// (a literal, so finding the limit on every allocation copies no text).
  std::string_view source;
};

/// Bytes that host tensors hold now: each Storage::allocate until its last handle goes.
std::size_t hostBytesHeld();

/// setHostMemoryLimit's figure if one is set; else AMPJIT_HOST_MEMORY_LIMIT (a
/// decimal count of bytes; an error if it is anything else); else the
/// machine's memory plus swap, or its memory cgroup's limit plus swap where
/// that is lower. Read once; the figure a machine cannot report is no limit.
Expected<HostMemoryLimit> hostMemoryLimit();

/// A limit for this process that overrides the environment and the machine;
/// nullopt goes back to them. For embedding frameworks that budget host memory
/// themselves, and for tests.
void setHostMemoryLimit(std::optional<std::size_t> bytes);

/// Counts `bytes` as held, or refuses them where that would pass the limit,
/// with an error naming the request, what is held and the limit's source.
Status reserveHostBytes(std::size_t bytes);
/// Gives back bytes that reserveHostBytes counted.
void releaseHostBytes(std::size_t bytes);

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_HOSTMEMORY_H
