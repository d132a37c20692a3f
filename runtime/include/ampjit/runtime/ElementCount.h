#ifndef AMPJIT_RUNTIME_ELEMENTCOUNT_H
#define AMPJIT_RUNTIME_ELEMENTCOUNT_H

// How many elements a tensor may have. Header-only and free of other
// dependencies, because the plan verifier, the frontend and the jit dialect's
// type constraints must all agree on it and the dialect does not link the
// runtime (as WindowShape.h).

#include <cstdint>
#include <span>

namespace ampjit::runtime {

/// The largest element count a tensor may have. Keeps byte sizes (count times
/// at most 8) and offsets far from int64 overflow, so that shape arithmetic on
/// untrusted plan files and IR cannot wrap.
inline constexpr int64_t kMaxElements = int64_t(1) << 48;

/// Element count, or -1 if a dimension is negative (or dynamic) or the count
/// exceeds kMaxElements.
inline int64_t checkedElementCount(std::span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0)
      return -1;
    if (dim == 0)
      count = 0;
    else if (count > kMaxElements / dim)
      return -1;
    else
      count *= dim;
  }
  return count;
}

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_ELEMENTCOUNT_H
