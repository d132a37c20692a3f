#ifndef AMPJIT_RUNTIME_TENSOR_H
#define AMPJIT_RUNTIME_TENSOR_H

// Tensor storage: a dtype, a shape, contiguous row-major strides, and a
// reference-counted, 64-byte aligned block of bytes. Copying a Tensor shares
// the bytes (like torch.Tensor); clone() copies them. f16 and bf16 elements are
// stored as their 16-bit patterns and read and written through Half/BFloat16
// or raw uint16_t views; conversions round to nearest even (LowPrecision.h).

#include "ampjit/runtime/DType.h"
#include "ampjit/runtime/LowPrecision.h"
#include "ampjit/runtime/Shape.h"
#include "ampjit/runtime/Status.h"

#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace ampjit::runtime {

/// Alignment of every tensor and arena allocation: a cache line, and enough
/// for any vector load the kernels (or a GPU copy engine) use.
inline constexpr std::size_t kTensorAlignment = 64;

/// Where a tensor's bytes live. Host bytes can be read through the element
/// accessors; CUDA bytes are device pointers that only a backend's kernels
/// and copies touch (Backend::toHost brings them back).
enum class Device : uint8_t { Host, Cuda };

/// The C++ element type of each DType's storage. Booleans are one byte each,
/// 0 or 1, read as uint8_t (bool's object representation is not guaranteed).
template <DType D> struct StorageTypeOf;
template <> struct StorageTypeOf<DType::F32> { using type = float; };
template <> struct StorageTypeOf<DType::F64> { using type = double; };
template <> struct StorageTypeOf<DType::F16> { using type = Half; };
template <> struct StorageTypeOf<DType::BF16> { using type = BFloat16; };
template <> struct StorageTypeOf<DType::I64> { using type = int64_t; };
template <> struct StorageTypeOf<DType::I1> { using type = uint8_t; };
template <DType D> using StorageType = typename StorageTypeOf<D>::type;

/// Whether T is the storage type of `dtype`.
template <typename T>
constexpr bool isStorageTypeOf(DType dtype) {
  using U = std::remove_const_t<T>;
  switch (dtype) {
  case DType::F32: return std::is_same_v<U, float>;
  case DType::F64: return std::is_same_v<U, double>;
  case DType::F16: return std::is_same_v<U, Half>;
  case DType::BF16: return std::is_same_v<U, BFloat16>;
  case DType::I64: return std::is_same_v<U, int64_t>;
  case DType::I1: return std::is_same_v<U, uint8_t>;
  }
  return false;
}

/// The runtime's one rule for a value becoming i64 (stores, Convert, and the
/// CUDA kernels generated to match): toward zero, saturating at the int64
/// range, NaN to 0 — never undefined behaviour.
inline int64_t truncateToInt64(double value) {
  if (std::isnan(value))
    return 0;
  if (value >= 0x1p63)
    return std::numeric_limits<int64_t>::max();
  if (value < -0x1p63)
    return std::numeric_limits<int64_t>::min();
  return int64_t(value);
}

/// Reads element `index` of raw storage of `dtype` as a double (exact for every
/// dtype but i64 beyond 2^53).
double loadElementAsDouble(DType dtype, const std::byte* data, int64_t index);
/// Writes `value` to element `index`, rounding once to nearest even for
/// floating types; i64 truncates toward zero (saturating, NaN to 0), i1 stores
/// value != 0.
void storeElementFromDouble(DType dtype, std::byte* data, int64_t index, double value);

/// 64-byte aligned bytes, freed when the last Tensor sharing them goes away.
class Storage {
public:
  /// Host bytes, zero-filled. Fails (rather than aborting) when the allocation
  /// does, or when it would pass the host memory limit (HostMemory.h).
  static Expected<std::shared_ptr<Storage>> allocate(std::size_t bytes);
  /// Bytes a backend allocated elsewhere (device memory); `release` gives
  /// them back when the last handle goes away (never null: a Storage without
  /// one is Storage::allocate's, counted against the host memory limit).
  using Release = std::function<void(std::byte*)>;
  static std::shared_ptr<Storage> adopt(std::byte* data, std::size_t size, Device device, Release release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  Device device() const { return device_; }
  /// Trades bytes with `other` (same size and device), each keeping how its
  /// new bytes are freed: every handle of this Storage now sees `other`'s
  /// bytes. A backend that wrote a step's new state into bytes of its own
  /// hands them over this way instead of copying them (the CUDA backend's
  /// speculative updates). False, changing nothing, when they differ.
  bool exchangeBytes(Storage& other);

private:
  Storage(std::byte* data, std::size_t size, Device device, Release release)
      : data_(data), size_(size), device_(device), release_(std::move(release)) {}
  std::byte* data_;
  std::size_t size_;
  Device device_;
  Release release_;
};

class Tensor {
public:
  /// An empty handle (no storage); `defined()` is false.
  Tensor() = default;

  /// A new zero-filled tensor. Fails for a negative or oversized shape or
  /// when memory runs out.
  static Expected<Tensor> allocate(DType dtype, Shape shape);
  static Expected<Tensor> allocate(const TensorType& type) { return allocate(type.dtype, type.shape); }
  /// A tensor over existing storage (a backend's device memory); the storage
  /// must hold at least the type's bytes.
  static Expected<Tensor> wrap(TensorType type, std::shared_ptr<Storage> storage);

  /// A tensor of `dtype` and `shape` filled from `values`, each rounded once to
  /// nearest even (see storeElementFromDouble). `values` has one element per
  /// tensor element, or exactly one (a splat). Convenient for tests and constants.
  static Expected<Tensor> fromDoubles(DType dtype, Shape shape, std::span<const double> values);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  const TensorType& type() const { return type_; }
  int64_t rank() const { return int64_t(type_.shape.size()); }
  int64_t elementCount() const { return elementCount_; }
  std::size_t byteSize() const { return std::size_t(elementCount_) * dtypeSize(type_.dtype); }
  /// Row-major contiguous strides in elements (tensors are always contiguous).
  std::vector<int64_t> strides() const { return contiguousStrides(type_.shape); }
  Device device() const { return storage_ ? storage_->device() : Device::Host; }

  std::byte* bytes() { return storage_ ? storage_->data() : nullptr; }
  const std::byte* bytes() const { return storage_ ? storage_->data() : nullptr; }

  /// Typed element access; T must be the dtype's storage type (asserted).
  template <typename T>
  std::span<T> elements() {
    assert(isStorageTypeOf<T>(dtype()));
    return {reinterpret_cast<T*>(bytes()), std::size_t(elementCount_)};
  }
  template <typename T>
  std::span<const T> elements() const {
    assert(isStorageTypeOf<T>(dtype()));
    return {reinterpret_cast<const T*>(bytes()), std::size_t(elementCount_)};
  }

  /// The 16-bit patterns of an f16 or bf16 tensor (asserted).
  std::span<uint16_t> bits16() {
    assert(dtype() == DType::F16 || dtype() == DType::BF16);
    return {reinterpret_cast<uint16_t*>(bytes()), std::size_t(elementCount_)};
  }
  std::span<const uint16_t> bits16() const {
    assert(dtype() == DType::F16 || dtype() == DType::BF16);
    return {reinterpret_cast<const uint16_t*>(bytes()), std::size_t(elementCount_)};
  }

  /// Element `index` (row-major) as a double.
  double at(int64_t index) const { return loadElementAsDouble(dtype(), bytes(), index); }
  /// Sets element `index`, rounding as storeElementFromDouble does.
  void set(int64_t index, double value) { storeElementFromDouble(dtype(), bytes(), index, value); }
  /// Every element as a double (tests, printing).
  std::vector<double> toDoubles() const;

  /// A copy with its own storage.
  Expected<Tensor> clone() const;
  /// Same dtype, shape and bytes (NaN patterns compared bit for bit).
  bool bitwiseEqual(const Tensor& other) const;
  bool sharesStorageWith(const Tensor& other) const {
    return storage_ != nullptr && storage_ == other.storage_;
  }
  /// Whether another handle holds this storage too (writing in place would
  /// change what that handle sees).
  bool sharesStorage() const { return storage_ != nullptr && storage_.use_count() > 1; }
  /// The storage every handle of these bytes shares (null when undefined).
  const std::shared_ptr<Storage>& storage() const { return storage_; }

private:
  Tensor(TensorType type, int64_t elementCount, std::shared_ptr<Storage> storage)
      : type_(std::move(type)), elementCount_(elementCount), storage_(std::move(storage)) {}

  TensorType type_;
  int64_t elementCount_ = 0;
  std::shared_ptr<Storage> storage_;
};

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_TENSOR_H
