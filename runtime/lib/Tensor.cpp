#include "ampjit/runtime/Tensor.h"

#include "ampjit/runtime/HostMemory.h"

#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

namespace ampjit::runtime {

double loadElementAsDouble(DType dtype, const std::byte* data, int64_t index) {
  switch (dtype) {
  case DType::F32: return reinterpret_cast<const float*>(data)[index];
  case DType::F64: return reinterpret_cast<const double*>(data)[index];
  case DType::F16: return halfToFloat(reinterpret_cast<const uint16_t*>(data)[index]);
  case DType::BF16: return bfloat16ToFloat(reinterpret_cast<const uint16_t*>(data)[index]);
  case DType::I64: return double(reinterpret_cast<const int64_t*>(data)[index]);
  case DType::I1: return reinterpret_cast<const uint8_t*>(data)[index] != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

namespace {

} // namespace

void storeElementFromDouble(DType dtype, std::byte* data, int64_t index, double value) {
  switch (dtype) {
  case DType::F32: reinterpret_cast<float*>(data)[index] = float(value); return;
  case DType::F64: reinterpret_cast<double*>(data)[index] = value; return;
  case DType::F16: reinterpret_cast<uint16_t*>(data)[index] = doubleToHalf(value); return;
  case DType::BF16: reinterpret_cast<uint16_t*>(data)[index] = doubleToBFloat16(value); return;
  case DType::I64: reinterpret_cast<int64_t*>(data)[index] = truncateToInt64(value); return;
  case DType::I1: reinterpret_cast<uint8_t*>(data)[index] = value != 0.0 ? 1 : 0; return;
  }
}

Expected<std::shared_ptr<Storage>> Storage::allocate(std::size_t bytes) {
  // aligned_alloc needs a size that is a multiple of the alignment, and a
  // zero-byte tensor still gets a distinct, valid pointer.
  if (bytes > (std::size_t(1) << 60))
    return Status::error("cannot allocate " + std::to_string(bytes) + " bytes");
  std::size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (rounded == 0)
    rounded = kTensorAlignment;
  // Counted before the memset below touches every page: past the machine's
  // memory that would be the OOM killer's business, not an error.
  if (Status reserved = reserveHostBytes(bytes); !reserved)
    return reserved;
  void* memory = std::aligned_alloc(kTensorAlignment, rounded);
  if (memory == nullptr) {
    releaseHostBytes(bytes);
    return Status::error("out of memory: the system refused " + std::to_string(bytes) + " bytes");
  }
  std::memset(memory, 0, rounded);
  Storage* storage = new (std::nothrow) Storage(static_cast<std::byte*>(memory), bytes, Device::Host, nullptr);
  if (storage == nullptr) {
    std::free(memory);
    releaseHostBytes(bytes);
    return Status::error("out of memory: the system refused a tensor's bookkeeping");
  }
  return std::shared_ptr<Storage>(storage);
}

std::shared_ptr<Storage> Storage::adopt(std::byte* data, std::size_t size, Device device, Release release) {
  // A Storage without one is Storage::allocate's and gives its bytes back to
  // the host memory count it never entered.
  assert(release && "Storage::adopt needs a release function");
  return std::shared_ptr<Storage>(new Storage(data, size, device, std::move(release)));
}

Storage::~Storage() {
  // No release function: the bytes are Storage::allocate's, counted there.
  if (release_) {
    release_(data_);
  } else {
    std::free(data_);
    releaseHostBytes(size_);
  }
}

bool Storage::exchangeBytes(Storage& other) {
  if (&other == this || other.size_ != size_ || other.device_ != device_)
    return false;
  std::swap(data_, other.data_);
  std::swap(release_, other.release_);
  return true;
}

Expected<Tensor> Tensor::wrap(TensorType type, std::shared_ptr<Storage> storage) {
  int64_t count = checkedElementCount(type.shape);
  if (count < 0)
    return Status::error("cannot make a tensor of shape " + shapeToString(type.shape) +
                         ": dimensions must be non-negative and the element count at most 2^48");
  std::size_t bytes = std::size_t(count) * dtypeSize(type.dtype);
  if (storage == nullptr || storage->size() < bytes)
    return Status::error("storage of " + std::to_string(storage ? storage->size() : 0) +
                         " bytes cannot hold a tensor of type " + typeToString(type));
  return Tensor(std::move(type), count, std::move(storage));
}

Expected<Tensor> Tensor::allocate(DType dtype, Shape shape) {
  int64_t count = checkedElementCount(shape);
  if (count < 0)
    return Status::error("cannot allocate a tensor of shape " + shapeToString(shape) +
                         ": dimensions must be non-negative and the element count at most 2^48");
  Expected<std::shared_ptr<Storage>> storage = Storage::allocate(std::size_t(count) * dtypeSize(dtype));
  if (!storage)
    return Status::error("cannot allocate a tensor of type " + typeToString(TensorType{dtype, shape}) + ": " +
                         storage.message());
  return Tensor(TensorType{dtype, std::move(shape)}, count, std::move(*storage));
}

Expected<Tensor> Tensor::fromDoubles(DType dtype, Shape shape, std::span<const double> values) {
  Expected<Tensor> tensor = allocate(dtype, std::move(shape));
  if (!tensor)
    return tensor;
  int64_t count = tensor->elementCount();
  if (values.size() != 1 && int64_t(values.size()) != count)
    return Status::error("Tensor::fromDoubles: " + std::to_string(values.size()) +
                         " values for a tensor of " + std::to_string(count) + " elements");
  for (int64_t i = 0; i < count; ++i)
    tensor->set(i, values.size() == 1 ? values[0] : values[i]);
  return tensor;
}

std::vector<double> Tensor::toDoubles() const {
  std::vector<double> values(static_cast<std::size_t>(elementCount_));
  for (int64_t i = 0; i < elementCount_; ++i)
    values[i] = at(i);
  return values;
}

Expected<Tensor> Tensor::clone() const {
  if (device() != Device::Host)
    return Status::error("Tensor::clone copies host tensors only; copy a CUDA tensor through its backend");
  Expected<Tensor> copy = allocate(type_);
  if (copy && byteSize() > 0)
    std::memcpy(copy->bytes(), bytes(), byteSize());
  return copy;
}

bool Tensor::bitwiseEqual(const Tensor& other) const {
  if (type_ != other.type_ || device() != Device::Host || other.device() != Device::Host)
    return false;
  return byteSize() == 0 || std::memcmp(bytes(), other.bytes(), byteSize()) == 0;
}

} // namespace ampjit::runtime
