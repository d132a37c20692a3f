#ifndef AMPJIT_RUNTIME_FILES_H
#define AMPJIT_RUNTIME_FILES_H

// Whole files: read at once, and replaced as one. writeFileAtomically is
// the one way ampjit replaces a file that another process may read at the
// same moment (a kernel cache entry, a GEMM tuning entry, a generated AMP
// policy) or that must survive a failed save (a checkpoint): the bytes go to
// a file of this writer's own beside the target, which is then renamed over
// it. A reader sees the old file or the new one, never part of one.

#include "ampjit/runtime/Status.h"

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace ampjit::runtime {

/// Writes `bytes` to `path` as above. On an error, which names `path` and
/// says what failed (the folder missing or not writable, a short write, the
/// rename), the previous file, if any, is unchanged and nothing is left
/// beside it.
Status writeFileAtomically(const std::filesystem::path& path, std::string_view bytes);

/// The whole file's bytes; nothing when it cannot be opened or read.
std::optional<std::string> readWholeFile(const std::filesystem::path& path);

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_FILES_H
