#include "ampjit/runtime/Files.h"

#include <atomic>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

#include <unistd.h>

namespace ampjit::runtime {

Status writeFileAtomically(const std::filesystem::path& path, std::string_view bytes) {
  // Writers in other processes, and in other threads of this one, each get
  // a temporary file of their own.
  static std::atomic<uint64_t> writes{0};
  std::filesystem::path temporary = path;
  temporary += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(writes.fetch_add(1));
  const std::string quoted = std::string("'").append(path.string()).append("'");
  std::error_code error;
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out)
      return Status::error("cannot open " + quoted + " for writing (its folder is missing or not writable)");
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) {
      std::filesystem::remove(temporary, error);
      return Status::error("writing " + quoted + " failed (disk full?); the previous file is unchanged");
    }
  }
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::string why = error.message();
    std::filesystem::remove(temporary, error);
    return Status::error("cannot replace " + quoted + ": " + why);
  }
  return Status::success();
}

std::optional<std::string> readWholeFile(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return std::nullopt;
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad())
    return std::nullopt;
  return bytes;
}

} // namespace ampjit::runtime
