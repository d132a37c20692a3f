// NVRTC compilation and the on-disk kernel cache (see Nvrtc.h).

#include "Nvrtc.h"

#include "ampjit/runtime/Files.h"
#include "ampjit/runtime/Fnv1a.h"
#include "ampjit/runtime/cuda/KernelSource.h"

#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>

#ifndef AMPJIT_CUDA_INCLUDE_DIR
#define AMPJIT_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

namespace ampjit::runtime::cuda {

namespace {

// Entry layout, little-endian: magic, format version, key hash (two 64-bit
// halves), payload size, payload checksum, then the CUBIN.
constexpr char kEntryMagic[8] = {'A', 'M', 'P', 'J', 'K', 'C', 'U', 'B'};
constexpr uint32_t kEntryFormat = 1;
constexpr size_t kEntryHeaderSize = 8 + 4 + 8 + 8 + 8 + 8;

CacheKey cacheKey(std::string_view source, const std::vector<std::string>& options, std::string_view architecture) {
  // The options contain the architecture; it and the NVRTC version are
  // hashed again explicitly so the key's inputs are obvious.
  std::string material = "ampjit-kernel-cache-v1\n";
  material += "nvrtc " + nvrtcVersion() + "\n";
  material += "arch " + std::string(architecture) + "\n";
  for (const std::string& option : options)
    material += "option " + option + "\n";
  material += "source\n";
  material += source;
  // The entry also stores the key, to catch a collision anyway.
  return CacheKey::of(material);
}

template <typename T> void append(std::string& bytes, T value) {
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  bytes.append(raw, sizeof(T));
}

template <typename T> T readAt(const std::string& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

std::string encodeEntry(const CacheKey& key, const std::vector<uint8_t>& cubin) {
  std::string bytes(kEntryMagic, sizeof kEntryMagic);
  append(bytes, kEntryFormat);
  append(bytes, key.low);
  append(bytes, key.high);
  append(bytes, uint64_t(cubin.size()));
  append(bytes, fnv1a64(cubin));
  bytes.append(reinterpret_cast<const char*>(cubin.data()), cubin.size());
  return bytes;
}

/// The CUBIN of a well-formed entry for `key`; empty for anything else.
std::vector<uint8_t> decodeEntry(const std::string& bytes, const CacheKey& key) {
  if (bytes.size() < kEntryHeaderSize || std::memcmp(bytes.data(), kEntryMagic, sizeof kEntryMagic) != 0)
    return {};
  if (readAt<uint32_t>(bytes, 8) != kEntryFormat || readAt<uint64_t>(bytes, 12) != key.low ||
      readAt<uint64_t>(bytes, 20) != key.high)
    return {};
  uint64_t size = readAt<uint64_t>(bytes, 28);
  if (size == 0 || size != bytes.size() - kEntryHeaderSize)
    return {};
  std::string_view payload(bytes.data() + kEntryHeaderSize, size);
  if (readAt<uint64_t>(bytes, 36) != fnv1a64(payload))
    return {};
  // A CUBIN is an ELF image.
  if (payload.substr(0, 4) != std::string_view("\x7f" "ELF", 4))
    return {};
  std::vector<uint8_t> cubin(payload.size());
  std::memcpy(cubin.data(), payload.data(), payload.size());
  return cubin;
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

struct ProgramDeleter {
  void operator()(nvrtcProgram program) const { nvrtcDestroyProgram(&program); }
};
using ProgramHandle = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

std::string programLog(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1)
    return {};
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS)
    return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n'))
    log.pop_back();
  return log;
}

} // namespace

CacheKey CacheKey::of(std::string_view material) {
  // Two independently seeded FNV-1a hashes: 128 bits, so distinct entries do
  // not collide in practice.
  return CacheKey{fnv1a64(material), fnv1a64(material, 0x84222325cbf29ce4ull)};
}

std::string CacheKey::hex() const { return hex64(high) + hex64(low); }

void writeCacheFileAtomically(const std::filesystem::path& path, const std::string& bytes) {
  std::error_code error;
  std::filesystem::create_directories(path.parent_path(), error);
  if (!error)
    (void)writeFileAtomically(path, bytes);
}

std::string nvrtcVersion() {
  int major = 0, minor = 0;
  if (::nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<std::string> nvrtcOptions(std::string_view architecture) {
  return {"-std=c++17", "--gpu-architecture=" + std::string(architecture), "-I" AMPJIT_CUDA_INCLUDE_DIR,
          "-default-device", "--fmad=false"};
}

std::filesystem::path defaultKernelCacheDirectory() {
  if (std::string explicitDirectory = environment("AMPJIT_KERNEL_CACHE"); !explicitDirectory.empty())
    return explicitDirectory;
  if (std::string xdg = environment("XDG_CACHE_HOME"); !xdg.empty())
    return std::filesystem::path(xdg) / "ampjit";
  if (std::string home = environment("HOME"); !home.empty())
    return std::filesystem::path(home) / ".cache" / "ampjit";
  return {};
}

Expected<CompiledKernel> compileWithNvrtc(std::string_view source, std::string_view programName,
                                          std::string_view architecture) {
  // NVRTC's --gpu-architecture also takes compute_XX, which yields PTX and no CUBIN.
  if (!architecture.starts_with("sm_"))
    return Status::error("kernels compile to CUBIN for a real architecture such as sm_90, not '" +
                         std::string(architecture) + "'");
  std::string sourceText(source), name(programName);
  nvrtcProgram raw = nullptr;
  if (nvrtcResult result = nvrtcCreateProgram(&raw, sourceText.c_str(), name.c_str(), 0, nullptr, nullptr);
      result != NVRTC_SUCCESS)
    return Status::error("nvrtcCreateProgram failed for " + name + ": " + nvrtcGetErrorString(result));
  ProgramHandle program(raw);
  std::vector<std::string> options = nvrtcOptions(architecture);
  std::vector<const char*> optionPointers;
  for (const std::string& option : options)
    optionPointers.push_back(option.c_str());
  nvrtcResult result = nvrtcCompileProgram(program.get(), int(optionPointers.size()), optionPointers.data());
  std::string log = programLog(program.get());
  if (result != NVRTC_SUCCESS)
    return Status::error("NVRTC " + nvrtcVersion() + " could not compile " + name + " for " +
                         std::string(architecture) + " (" + nvrtcGetErrorString(result) + "):\n" + log);
  size_t size = 0;
  if (nvrtcResult sizeResult = nvrtcGetCUBINSize(program.get(), &size); sizeResult != NVRTC_SUCCESS || size == 0)
    return Status::error("NVRTC produced no CUBIN for " + name + ": " + nvrtcGetErrorString(sizeResult));
  CompiledKernel kernel;
  kernel.cubin.resize(size);
  if (nvrtcResult cubinResult = nvrtcGetCUBIN(program.get(), reinterpret_cast<char*>(kernel.cubin.data()));
      cubinResult != NVRTC_SUCCESS)
    return Status::error("nvrtcGetCUBIN failed for " + name + ": " + nvrtcGetErrorString(cubinResult));
  kernel.log = std::move(log);
  return kernel;
}

KernelCompiler::KernelCompiler(std::filesystem::path cacheDirectory) : cacheDirectory_(std::move(cacheDirectory)) {}

std::filesystem::path KernelCompiler::cacheEntryPath(std::string_view source, std::string_view architecture) const {
  if (cacheDirectory_.empty())
    return {};
  CacheKey key = cacheKey(source, nvrtcOptions(architecture), architecture);
  return cacheDirectory_ / (key.hex() + ".cubin");
}

Expected<CompiledKernel> KernelCompiler::compile(std::string_view source, std::string_view programName,
                                                 std::string_view architecture) {
  std::filesystem::path entry = cacheEntryPath(source, architecture);
  CacheKey key = cacheKey(source, nvrtcOptions(architecture), architecture);
  if (!entry.empty()) {
    if (Expected<std::string> bytes = readWholeFile(entry); bytes.ok()) {
      std::vector<uint8_t> cubin = decodeEntry(*bytes, key);
      if (!cubin.empty()) {
        ++cacheHits_;
        return CompiledKernel{std::move(cubin), true, {}};
      }
      // Corrupt or foreign: fall through, recompile and overwrite it.
    }
  }
  Expected<CompiledKernel> compiled = compileWithNvrtc(source, programName, architecture);
  if (!compiled)
    return compiled;
  ++compilations_;
  if (!entry.empty())
    writeCacheFileAtomically(entry, encodeEntry(key, compiled->cubin));
  return compiled;
}

std::vector<Expected<CompiledKernel>> compileInParallel(const std::filesystem::path& cacheDirectory,
                                                        std::span<const CompileRequest> requests,
                                                        std::string_view architecture) {
  std::vector<std::optional<Expected<CompiledKernel>>> slots(requests.size());
  std::atomic<std::size_t> next{0};
  // One compiler per thread (its counters are its own); they share the
  // cache directory, which is safe across threads and processes.
  auto work = [&] {
    KernelCompiler compiler(cacheDirectory);
    for (std::size_t i = next++; i < requests.size(); i = next++)
      slots[i].emplace(compiler.compile(requests[i].source, requests[i].programName, architecture));
  };
  std::size_t threads =
      std::min<std::size_t>(requests.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t)
    pool.emplace_back(work);
  work();
  for (std::thread& thread : pool)
    thread.join();
  std::vector<Expected<CompiledKernel>> results;
  for (std::optional<Expected<CompiledKernel>>& slot : slots)
    results.push_back(std::move(*slot));
  return results;
}

} // namespace ampjit::runtime::cuda
