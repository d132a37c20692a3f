#include "ampjit/runtime/Files.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
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

Expected<std::string> readWholeFile(const std::filesystem::path& path) {
  const std::string quoted = std::string("'").append(path.string()).append("'");
  // stdio rather than a stream: errno then says why, which is the message.
  errno = 0;
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file)
    return Status::error("cannot open " + quoted + ": " + std::strerror(errno));
  std::string bytes;
  char chunk[1 << 16];
  size_t read;
  while ((read = std::fread(chunk, 1, sizeof chunk, file.get())) > 0)
    bytes.append(chunk, read);
  if (std::ferror(file.get()))
    return Status::error("cannot read " + quoted + ": " + std::strerror(errno));
  return bytes;
}

} // namespace ampjit::runtime
