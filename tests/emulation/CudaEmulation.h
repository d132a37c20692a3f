#ifndef AMPJIT_TESTS_EMULATION_CUDAEMULATION_H
#define AMPJIT_TESTS_EMULATION_CUDAEMULATION_H

// Runs CUDA kernels on the host, so CI can check what they compute without a
// GPU. A kernel source compiled by the host C++ compiler with
// EmulatedCudaLanguage.h first (the .cu files, with their `<<<...>>>` launches rewritten by
// RewriteLaunches.cmake; or a generated NVRTC kernel) becomes ordinary C++:
// each launch runs every block in turn, each block's threads as fibers on
// the calling thread. A fiber runs until it ends or waits at a
// `__syncthreads()` or a warp shuffle, and a wait ends when every live thread
// of the block (the warp) has arrived, as on the device. So kernels that
// share memory through barriers and shuffles compute what they compute on a
// GPU, up to the ulps of the math library (host libm, not CUDA's).
//
// What it does not show: timing, memory ordering between threads that do
// not synchronise (fibers run one at a time, in thread order), and
// anything of the CUDA libraries. A barrier some live threads never reach is
// reported as a failed launch, not a hang.
//
// Test-only: never part of a shipped binary.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace ampjit::emulation {

/// The built-in variables of the thread that is running.
struct ThreadIds {
  uint3 threadIdx{};
  uint3 blockIdx{};
  dim3 blockDim;
  dim3 gridDim;
};

namespace detail {
/// The running emulated thread's ids; null outside a kernel. Read inline:
/// kernels read their indices in every loop, and a call each time was a
/// tenth of what an emulated kernel took.
extern thread_local constinit const ThreadIds* runningThread;
[[noreturn]] void threadIndexReadOutsideAKernel();
} // namespace detail

/// The running emulated thread's ids; outside a kernel, a failed check.
inline const ThreadIds& currentThread() {
  if (detail::runningThread == nullptr) [[unlikely]]
    detail::threadIndexReadOutsideAKernel();
  return *detail::runningThread;
}

/// Blocks the running thread until every live thread of its block arrives.
void synchronizeBlock();

/// Blocks the running thread until every live lane of its warp arrives
/// (`__syncwarp`, whose memory ordering the one-at-a-time fibers give);
/// every lane named in `mask` must take part, as on the device (the
/// emulation supports the full mask).
void synchronizeWarp(unsigned mask = 0xffffffffu);

/// The 8 bytes `bits` of the running lane exchanged with lane `lane ^
/// laneMask` of its warp (`__shfl_xor_sync`); every lane named in `mask`
/// must take part, as on the device.
uint64_t exchangeInWarp(uint64_t bits, unsigned mask, int laneMask, int width);

template <typename T> T shuffleXor(unsigned mask, T value, int laneMask, int width = 32) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  bits = exchangeInWarp(bits, mask, laneMask, width);
  T result;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}

/// Runs `body` as every thread of a `grid` of `block`s; the launch's error
/// (an invalid configuration, a deadlock) is what the next
/// takeLastError() returns, as cudaGetLastError() after a launch.
void runGrid(dim3 grid, dim3 block, std::size_t dynamicSharedBytes, const std::function<void()>& body);

/// The error of the last failed launch, reset to cudaSuccess (cudaGetLastError).
cudaError_t takeLastError();
/// What went wrong in the latest launch, in words ("" if nothing did).
const std::string& lastFailure();

/// Whether a launch of `grid` x `block` is one the device would take; if
/// not, the reason is what the next takeLastError()/lastFailure() return.
bool checkLaunch(dim3 grid, dim3 block, std::size_t dynamicSharedBytes);

/// Work enqueued on a stream: the stream model (EmulatedStreams.h) installs
/// itself as the submitter; without one (a generated kernels' library), and
/// on the null stream, work runs at once. `what` says what the work is, with
/// its launch configuration or problem but no addresses, so that a captured
/// graph can be described (GraphInstantiation::nodes) and two captures of
/// the same work on other buffers compare equal.
using StreamSubmitter = void (*)(cudaStream_t, std::string what, std::function<void()>);
void setStreamSubmitter(StreamSubmitter submitter);
void submitToStream(cudaStream_t stream, std::string what, std::function<void()> work);

/// "<<<grid, block, shared>>>": a launch's configuration as a description of
/// it shows it.
std::string describeLaunchConfiguration(dim3 grid, dim3 block, std::size_t sharedBytes);

/// Launches and emulated threads since the process started (what a test
/// counts to show that work ran where it says).
struct Counters {
  int64_t launches = 0;
  int64_t threads = 0;
  int64_t evictFirstBytes = 0; ///< loaded and stored with __ldcs / __stcs
};
Counters counters();

void countEvictFirstBytes(std::size_t bytes);

/// `kernel<<<grid, block, shared, stream>>>(arguments...)` becomes
/// `launch(grid, block, shared, stream).kernel("kernel", [](auto... p) { kernel(p...); })(arguments...)`
/// (RewriteLaunches.cmake): the arguments are copied once, decayed, and every
/// thread calls the kernel with its own copies, so overload resolution and
/// the conversions to the parameter types are those of the device launch.
/// A launch's configuration errors are reported at once, as the device's
/// are; the kernel runs when its stream gets to it.
template <typename Kernel> class BoundLaunch {
public:
  BoundLaunch(dim3 grid, dim3 block, std::size_t sharedBytes, cudaStream_t stream, const char* name, Kernel kernel)
      : grid_(grid), block_(block), sharedBytes_(sharedBytes), stream_(stream), name_(name), kernel_(kernel) {}
  template <typename... Arguments> void operator()(Arguments&&... arguments) const {
    if (!checkLaunch(grid_, block_, sharedBytes_))
      return;
    std::tuple<std::decay_t<Arguments>...> copies(std::forward<Arguments>(arguments)...);
    submitToStream(stream_, name_ + describeLaunchConfiguration(grid_, block_, sharedBytes_),
                   [grid = grid_, block = block_, shared = sharedBytes_, kernel = kernel_, copies] {
                     runGrid(grid, block, shared, [&] { std::apply(kernel, copies); });
                   });
  }

private:
  dim3 grid_, block_;
  std::size_t sharedBytes_;
  cudaStream_t stream_;
  const char* name_; ///< a string literal (RewriteLaunches.cmake)
  Kernel kernel_;
};

class LaunchConfiguration {
public:
  LaunchConfiguration(dim3 grid, dim3 block, std::size_t sharedBytes, cudaStream_t stream)
      : grid_(grid), block_(block), sharedBytes_(sharedBytes), stream_(stream) {}
  template <typename Kernel> BoundLaunch<Kernel> kernel(const char* name, Kernel kernel) const {
    return BoundLaunch<Kernel>(grid_, block_, sharedBytes_, stream_, name, kernel);
  }

private:
  dim3 grid_, block_;
  std::size_t sharedBytes_;
  cudaStream_t stream_;
};

inline LaunchConfiguration launch(dim3 grid, dim3 block, std::size_t sharedBytes = 0, cudaStream_t stream = nullptr) {
  return LaunchConfiguration(grid, block, sharedBytes, stream);
}

// Device intrinsics the host compiler lacks.

/// __ldcs / __stcs: a load or store with the evict-first ("cache
/// streaming") hint. The host has no cache to hint, so it is a plain access;
/// the bytes are counted so that a test can show which accesses carry it.
template <typename T> T loadEvictFirst(const T* at) {
  countEvictFirstBytes(sizeof(T));
  return *at;
}
template <typename T> void storeEvictFirst(T* at, T value) {
  countEvictFirstBytes(sizeof(T));
  *at = value;
}
inline float intAsFloat(int bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
inline double longLongAsDouble(long long bits) {
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

} // namespace ampjit::emulation

#endif // AMPJIT_TESTS_EMULATION_CUDAEMULATION_H
