//===- BackendByName.cpp - a backend from the name a user gives it --------===//
//
// The one reading of "cpu", "cuda" and "cuda:N", shared by the C API's
// sessions and ampjit-run's --backend.
//
//===----------------------------------------------------------------------===//

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/CudaBackend.h"

#include <charconv>
#include <string>

namespace ampjit::runtime {

Expected<std::unique_ptr<Backend>> createBackendByName(std::string_view name) {
  if (name == "cpu")
    return createCpuBackend();
  if (name == "cuda" || name.starts_with("cuda:")) {
    CudaBackendOptions options;
    if (name != "cuda") {
      std::string_view number = name.substr(5);
      auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), options.device);
      if (error != std::errc() || end != number.data() + number.size() || number.empty() || options.device < 0)
        return Status::error("backend '" + std::string(name) + "': 'cuda:N' takes a device number N");
    }
    Expected<std::unique_ptr<CudaBackend>> backend = createCudaBackend(options);
    if (!backend)
      return Status::error("backend '" + std::string(name) + "': " + backend.message());
    return std::unique_ptr<Backend>(std::move(*backend));
  }
  return Status::error("unknown backend '" + std::string(name) + "' (known: " + std::string(kBackendNames) + ")");
}

} // namespace ampjit::runtime
