#ifndef JIT_CUDA_H
#define JIT_CUDA_H

// The GPU that traced steps run on (jit::Backend::cuda, or automatic with a
// device present): whether there is one, waiting for it, timing it with CUDA
// events, and its memory high-water mark. A step returns once its work is
// enqueued; reading a value (item, to_vector) waits for what it needs.

#include <cstdint>
#include <memory>
#include <source_location>

namespace jit {
class Tensor;
} // namespace jit

namespace jit::cuda {

/// Whether this build has the CUDA backend and a device is present.
bool is_available();
/// Waits for every step enqueued so far.
void synchronize();
/// Device bytes the memory pool has handed out at most.
int64_t max_memory_allocated();

/// A copy of `tensor` whose value lives on the GPU (PyTorch's `.cuda()`): a
/// step traced for CUDA reads it there, with no copy from host memory (a copy
/// from pageable memory waits for the GPU and caps a step at the bus's
/// speed). Reading its values (item, to_vector) copies them back. A tensor
/// already on the GPU is returned as it is. Throws without a device.
/// Called on a traced tensor, it is an error naming the caller's line.
Tensor to_device(const Tensor& tensor, std::source_location where = std::source_location::current());

/// A tensor's value on its way to the host (copy_to_host_async).
class HostCopy {
public:
  /// Whether the value has arrived; never waits.
  bool ready() const;
  /// The value as a host tensor, waiting for it if it has not arrived.
  Tensor wait() const;
  /// wait() of a one-element value, as a double.
  double item() const;

  struct Impl;

private:
  std::shared_ptr<Impl> impl_;
  friend HostCopy copy_to_host_async(const Tensor& tensor, std::source_location where);
};

/// Starts copying `tensor`'s value to the host after the work enqueued so
/// far, and returns without waiting for it (PyTorch's
/// `.to("cpu", non_blocking=True)` with an event): a loss or the loss scale
/// read every step while the steps after it are already enqueued, where
/// item() would make the GPU run dry each step. A value on the host already
/// (a CPU step's, or one read before) arrives at once. Called while
/// jit::trace records, it is an error naming the caller's line, as item() is.
HostCopy copy_to_host_async(const Tensor& tensor, std::source_location where = std::source_location::current());

/// A CUDA event on the stream traced steps run on.
class Event {
public:
  /// Records an event after everything enqueued so far.
  static Event record();
  /// GPU milliseconds from this event to `later` (waits for `later`).
  double elapsed_ms(const Event& later) const;

  struct Impl;

private:
  std::shared_ptr<Impl> impl_;
};

} // namespace jit::cuda

#endif // JIT_CUDA_H
