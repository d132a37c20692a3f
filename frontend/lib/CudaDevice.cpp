// jit::cuda (cuda.h) and the one CUDA backend every traced function shares.

#include "CudaDevice.h"
#include "Dispatch.h"

#include "jit/Tensor.h"
#include "jit/cuda.h"

namespace jit {

namespace detail {

namespace {

std::shared_ptr<rt::CudaBackend>& sharedSlot() {
  static std::shared_ptr<rt::CudaBackend> shared;
  return shared;
}

} // namespace

std::shared_ptr<rt::CudaBackend> sharedCudaBackend(const std::string& who) {
  std::shared_ptr<rt::CudaBackend>& shared = sharedSlot();
  if (!shared) {
    rt::Expected<std::unique_ptr<rt::CudaBackend>> created = rt::createCudaBackend();
    if (!created)
      throw Error(who + ": " + created.message());
    shared = std::move(*created);
  }
  return shared;
}

void replaceSharedCudaBackend(const rt::CudaBackendOptions& options, const std::string& who) {
  rt::Expected<std::unique_ptr<rt::CudaBackend>> created = rt::createCudaBackend(options);
  if (!created)
    throw Error(who + ": " + created.message());
  sharedSlot() = std::move(*created);
}

} // namespace detail

namespace cuda {

namespace rt = ampjit::runtime;

struct Event::Impl {
  std::unique_ptr<rt::DeviceEvent> event;
};

struct HostCopy::Impl {
  rt::PendingHostRead read;
};

bool HostCopy::ready() const {
  if (!impl_)
    throw Error("jit::cuda::HostCopy::ready: a copy that was never started");
  return impl_->read.ready();
}

Tensor HostCopy::wait() const {
  if (!impl_)
    throw Error("jit::cuda::HostCopy::wait: a copy that was never started");
  rt::Expected<rt::Tensor> host = impl_->read.wait();
  if (!host)
    throw Error("jit::cuda::HostCopy::wait: " + host.message());
  return detail::makeTensor(std::move(*host));
}

double HostCopy::item() const { return wait().item(); }

HostCopy copy_to_host_async(const Tensor& tensor, std::source_location where) {
  const char* what = "jit::cuda::copy_to_host_async";
  if (!tensor.defined())
    throw Error(std::string(what) + ": an undefined tensor");
  const detail::TensorImpl& impl = tensor.impl();
  detail::checkHostReadOutsideTrace(impl, what, where);
  detail::completeDeferredUpdate(impl);
  // A value the device holds newer than the host's is read on the stream
  // of the backend that wrote it, after it; any other is on the host already.
  bool onDevice = impl.deviceCopy && impl.deviceCopy->hostStale;
  rt::Expected<rt::PendingHostRead> started =
      onDevice ? rt::PendingHostRead::start(impl.deviceCopy->device, impl.deviceCopy->backend.get())
               : rt::PendingHostRead::start(detail::concreteValue(impl, what, where), nullptr);
  if (!started)
    throw Error(std::string(what) + ": " + started.message());
  HostCopy copy;
  copy.impl_ = std::make_shared<HostCopy::Impl>(std::move(*started));
  return copy;
}

bool is_available() { return rt::cudaDeviceCount() > 0; }

void synchronize() {
  if (!is_available())
    return;
  if (rt::Status status = detail::sharedCudaBackend("jit::cuda::synchronize")->synchronize(); !status.ok())
    throw Error("jit::cuda::synchronize: " + status.message());
}

int64_t max_memory_allocated() {
  return is_available() ? detail::sharedCudaBackend("jit::cuda::max_memory_allocated")->peakDeviceBytes() : 0;
}

Tensor to_device(const Tensor& tensor, std::source_location where) {
  if (!tensor.defined())
    throw Error("jit::cuda::to_device: an undefined tensor");
  const detail::TensorImpl& impl = tensor.impl();
  detail::completeDeferredUpdate(impl);
  if (detail::deviceValueIsCurrent(impl))
    return tensor;
  std::shared_ptr<rt::CudaBackend> backend = detail::sharedCudaBackend("jit::cuda::to_device");
  rt::Expected<rt::Tensor> uploaded =
      backend->toDevice(detail::concreteValue(impl, "jit::cuda::to_device", where));
  if (!uploaded)
    throw Error("jit::cuda::to_device: " + uploaded.message());
  return detail::makeDeviceTensor(std::move(*uploaded), std::move(backend));
}

Event Event::record() {
  rt::Expected<std::unique_ptr<rt::DeviceEvent>> event =
      detail::sharedCudaBackend("jit::cuda::Event::record")->recordEvent();
  if (!event)
    throw Error("jit::cuda::Event::record: " + event.message());
  Event result;
  result.impl_ = std::make_shared<Impl>(Impl{std::move(*event)});
  return result;
}

double Event::elapsed_ms(const Event& later) const {
  if (!impl_ || !later.impl_)
    throw Error("jit::cuda::Event::elapsed_ms: an event that was never recorded");
  rt::Expected<double> milliseconds = impl_->event->millisecondsUntil(*later.impl_->event);
  if (!milliseconds)
    throw Error("jit::cuda::Event::elapsed_ms: " + milliseconds.message());
  return *milliseconds;
}

} // namespace cuda

} // namespace jit
