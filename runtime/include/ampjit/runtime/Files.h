#ifndef AMPJIT_RUNTIME_FILES_H
#define AMPJIT_RUNTIME_FILES_H

// Whole files: read at once, and replaced as one. writeFileAtomically is
// the one way ampjit replaces a file that another process may read at the
// same moment (a kernel cache entry, a GEMM tuning entry, a generated AMP
// policy) or that must survive a failed save (a checkpoint): the bytes go to
// a file of this writer's own beside the target, which is then renamed over
// it. A reader sees the old file or the new one, never part of one.

#include "ampjit/runtime/Status.h"

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace ampjit::runtime {

/// Writes `bytes` to `path` as above. On an error, which names `path` and
/// says what failed (the folder missing or not writable, a short write, the
/// rename), the previous file, if any, is unchanged and nothing is left
/// beside it.
Status writeFileAtomically(const std::filesystem::path& path, std::string_view bytes);
inline Status writeFileAtomically(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  return writeFileAtomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

/// The whole file's bytes, or an error that names `path` and says why
/// ("cannot open 'p': No such file or directory", "cannot read 'p': Is a
/// directory"); callers put who was reading it in front.
Expected<std::string> readWholeFile(const std::filesystem::path& path);

/// A file's bytes as the binary decoders (plans, .npy) take them.
inline std::span<const uint8_t> bytesOf(const std::string& file) {
  return {reinterpret_cast<const uint8_t*>(file.data()), file.size()};
}

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_FILES_H
