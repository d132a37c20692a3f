// PendingHostRead (CudaBackend.h): plain C++ over the backend interface, so
// a host tensor's read works in builds without CUDA too.

#include "ampjit/runtime/CudaBackend.h"

#include <utility>

namespace ampjit::runtime {

Expected<PendingHostRead> PendingHostRead::start(const Tensor& tensor, CudaBackend* writer) {
  PendingHostRead read;
  if (tensor.device() == Device::Host) {
    Expected<Tensor> snapshot = tensor.clone();
    if (!snapshot)
      return snapshot.status();
    read.arrived_ = std::move(*snapshot);
    return read;
  }
  if (writer == nullptr)
    return Status::error("reading a device tensor to the host without the backend that wrote it");
  Expected<std::unique_ptr<AsyncHostCopy>> started = writer->copyToHostAsync(tensor);
  if (!started)
    return started.status();
  read.inFlight_ = std::move(*started);
  return read;
}

bool PendingHostRead::ready() { return arrived_.has_value() || inFlight_->ready(); }

Expected<Tensor> PendingHostRead::wait() {
  if (!arrived_) {
    Expected<Tensor> arrived = inFlight_->wait();
    if (!arrived)
      return arrived;
    arrived_ = std::move(*arrived);
    inFlight_.reset();
  }
  return *arrived_;
}

} // namespace ampjit::runtime
