#ifndef AMPJIT_RUNTIME_LIB_CUDA_NVRTC_H
#define AMPJIT_RUNTIME_LIB_CUDA_NVRTC_H

// Compiling generated CUDA C++ to CUBIN with NVRTC, behind an on-disk cache.
//
// Built only when the CUDA backend is (AMPJIT_CUDA_ENABLED). NVRTC needs no
// GPU and no driver library, so CI compiles every generated kernel for sm_90
// on CPU-only machines; loading the CUBIN is the CUDA backend's business.
//
// The cache maps a key (source, options, architecture, NVRTC version) to the
// CUBIN bytes, one file per kernel, each with a header carrying the key and
// a checksum: a truncated, corrupt or colliding entry is ignored and
// rewritten, never loaded. Writes go to a temporary file renamed into
// place, so concurrent processes never see half an entry. The cache is an
// optimisation: when its directory cannot be created or written, kernels are
// still compiled, just not kept.

#include "ampjit/runtime/Status.h"

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ampjit::runtime::cuda {

/// The name of a cache entry: two independently seeded FNV-1a hashes of
/// everything the entry depends on (`material`), 128 bits.
struct CacheKey {
  uint64_t low = 0, high = 0;
  static CacheKey of(std::string_view material);
  /// 32 hex digits, the entry's file name without its extension.
  std::string hex() const;
};

/// Best effort, through a temporary file renamed into place, so concurrent
/// processes never see half an entry: a failure (no directory, a full disk)
/// leaves the cache without this entry.
void writeCacheFileAtomically(const std::filesystem::path& path, const std::string& bytes);

/// NVRTC's version, "13.0".
std::string nvrtcVersion();

/// Every option a generated kernel is compiled with for `architecture`
/// ("sm_90"): C++17, the architecture, the toolkit's include directory (for
/// cuda_fp16.h and cuda_bf16.h), device functions by default, and
/// --fmad=false because the CPU reference never contracts a * b + c into an
/// FMA and fused and unfused plans must round identically.
std::vector<std::string> nvrtcOptions(std::string_view architecture);

/// AMPJIT_KERNEL_CACHE if set and not empty, else $XDG_CACHE_HOME/ampjit,
/// else $HOME/.cache/ampjit; empty when none of these is set.
std::filesystem::path defaultKernelCacheDirectory();

struct CompiledKernel {
  std::vector<uint8_t> cubin{};
  /// Whether the bytes came from the cache rather than from NVRTC.
  bool cacheHit = false;
  /// NVRTC's log (warnings) when it compiled; empty on a cache hit.
  std::string log{};
};

/// Not thread-safe (its counters): use one per thread. Compilers in threads
/// and processes may share one cache directory.
class KernelCompiler {
public:
  /// `cacheDirectory` empty: no cache, every call compiles.
  explicit KernelCompiler(std::filesystem::path cacheDirectory = defaultKernelCacheDirectory());

  /// CUBIN for `source` on `architecture` ("sm_90"); `programName` names the
  /// program in NVRTC's messages. The error carries NVRTC's log.
  Expected<CompiledKernel> compile(std::string_view source, std::string_view programName,
                                   std::string_view architecture);

  /// The file that holds (or would hold) the entry of this compilation; empty
  /// without a cache.
  std::filesystem::path cacheEntryPath(std::string_view source, std::string_view architecture) const;

  const std::filesystem::path& cacheDirectory() const { return cacheDirectory_; }
  int64_t cacheHits() const { return cacheHits_; }
  int64_t compilations() const { return compilations_; }

private:
  std::filesystem::path cacheDirectory_;
  int64_t cacheHits_ = 0;
  int64_t compilations_ = 0;
};

struct CompileRequest {
  std::string_view source;
  std::string_view programName;
};

/// Every request compiled (through the cache in `cacheDirectory`, or none
/// when empty) on up to one thread per core, results in request order. NVRTC
/// spends most of a compilation parsing the fp16/bf16 headers on one core,
/// so a plan's kernels side by side take about the time of the slowest.
std::vector<Expected<CompiledKernel>> compileInParallel(const std::filesystem::path& cacheDirectory,
                                                        std::span<const CompileRequest> requests,
                                                        std::string_view architecture);

/// NVRTC alone, no cache: the CUBIN, or an error with NVRTC's log.
Expected<CompiledKernel> compileWithNvrtc(std::string_view source, std::string_view programName,
                                          std::string_view architecture);

} // namespace ampjit::runtime::cuda

#endif // AMPJIT_RUNTIME_LIB_CUDA_NVRTC_H
