#ifndef JIT_TENSOR_H
#define JIT_TENSOR_H

// jit::Tensor, the user's handle to a tensor, and the ways to make one.
//
// Errors: the public API throws jit::Error (a std::runtime_error) whose
// message names the op and its operands, e.g.
//   jit.add: operand 'rhs' f32[4] does not broadcast with operand 'lhs' f32[2x3] ...
// The frontend is built with exceptions (unlike MLIR-based targets); the
// runtime below it reports errors as values and this layer turns them into
// jit::Error at the API boundary.

#include "ampjit/runtime/DType.h"

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <random>
#include <source_location>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace jit {

/// Every error the public API reports.
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Element types. One definition with the runtime's (and MLIR's) spelling.
using DType = ampjit::runtime::DType;
inline constexpr DType f32 = DType::F32;
inline constexpr DType f64 = DType::F64;
inline constexpr DType f16 = DType::F16;
inline constexpr DType bf16 = DType::BF16;
inline constexpr DType i64 = DType::I64;
inline constexpr DType i1 = DType::I1;

/// "f32", "bf16", ...
std::string_view dtype_name(DType dtype);
bool is_floating_point(DType dtype);

/// Dimension sizes, outermost first; empty for a scalar.
using Shape = std::vector<int64_t>;

/// Where a tensor lives. Only the CPU exists so far.
enum class Device { cpu };

namespace detail {
struct TensorImpl;
}

class Generator;

/// A shared handle, like torch.Tensor: copies share the data and the
/// autograd state. A default-constructed Tensor is undefined (`defined()` is
/// false); it stands for "no tensor" (an absent gradient, an absent bias).
class Tensor {
public:
  Tensor() = default;
  /// Internal: wraps the frontend's representation.
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  DType dtype() const;
  Device device() const { return Device::cpu; }
  int64_t dim() const { return int64_t(shape().size()); }
  /// Size of dimension `d` (negative counts from the end).
  int64_t size(int64_t d) const;
  int64_t numel() const;

  // Host reads. Under jit::trace a tensor has no value yet: reading one is a
  // jit::Error naming the op that made it and the caller's source line.
  /// The value of a one-element tensor.
  double item(std::source_location where = std::source_location::current()) const;
  /// Every element as a double, row-major (exact but for i64 beyond 2^53).
  std::vector<double> to_vector(std::source_location where = std::source_location::current()) const;
  /// Contiguous row-major host data. T is the dtype's storage type: float
  /// (f32), double (f64), int64_t (i64), uint8_t (i1), uint16_t (the bit
  /// patterns of f16/bf16); anything else throws.
  template <typename T> const T* data_ptr(std::source_location where = std::source_location::current()) const;

  /// jit.convert: rounds to nearest even between float types, truncates
  /// float to i64, tests != 0 for i1. Differentiable between float types.
  Tensor to(DType dtype) const;
  /// jit.type_as: this tensor in `other`'s floating-point type (PyTorch's
  /// Tensor.type_as). In a traced step the target is the type AMP decides
  /// for `other`, as eager autocast would give it, where `to(other.dtype())`
  /// would fix the trace's fp32 (the `x.float()` ... `.type_as(x)` of an
  /// RMSNorm keeps the activations' precision).
  Tensor type_as(const Tensor& other) const;

  // --- autograd -------------------------------------------------------------
  bool requires_grad() const;
  /// Marks a leaf (floating-point) tensor as needing a gradient.
  Tensor& requires_grad_(bool requires_grad = true);
  /// True for tensors no recorded op produced (user-created ones).
  bool is_leaf() const;
  /// The accumulated gradient of a leaf; undefined before the first backward().
  Tensor grad() const;
  /// Drops the gradient (PyTorch's set_to_none), or fills it with zeros.
  void zero_grad(bool set_to_none = true);
  /// Name of the op that produced this tensor for autograd ("jit.add"), or "".
  std::string grad_fn_name() const;
  /// Backpropagates from a one-element tensor (seed 1) or with `gradient` (this tensor's
  /// shape and dtype) and accumulates into every leaf that requires grad.
  /// The graph is kept, so backward may run through it again.
  void backward(std::source_location where = std::source_location::current()) const;
  void backward(const Tensor& gradient, std::source_location where = std::source_location::current()) const;
  /// The same data, without autograd history.
  Tensor detach() const;

  // --- in-place updates (of leaves, under NoGradGuard; e.g. a manual SGD step)
  /// Replaces the value with `source` broadcast and converted to this
  /// tensor's shape and dtype. Every handle to this tensor sees the new value.
  Tensor& copy_(const Tensor& source);
  Tensor& add_(const Tensor& other);
  Tensor& sub_(const Tensor& other);
  Tensor& mul_(const Tensor& other);

  /// Whether two handles are the same tensor.
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  detail::TensorImpl& impl() const;
  const std::shared_ptr<detail::TensorImpl>& impl_ptr() const { return impl_; }

private:
  std::shared_ptr<detail::TensorImpl> impl_;
};

/// A (name, tensor) pair of an object's state, the name dotted as in
/// PyTorch's state_dict ("0.weight", "3.exp_avg").
using NamedTensor = std::pair<std::string, Tensor>;

/// PyTorch-like printing: `tensor([[1.0000, 2.0000]], dtype=f16, grad_fn=<jit.add>)`.
std::ostream& operator<<(std::ostream& os, const Tensor& tensor);
std::string to_string(const Tensor& tensor);

/// A seeded source of random numbers: rand/randn draw from a host engine
/// (a fixed, portable algorithm, so a seed gives the same tensor everywhere),
/// and dropout reads and advances `rng_state()`, the `[seed, offset]` i64[2]
/// tensor of the runtime's counter-based stream (the same mask on CPU and
/// CUDA, and a state tensor a traced step can carry).
namespace detail {
struct SavedState;
SavedState savedStateOf(Generator& generator);
} // namespace detail

class Generator {
public:
  explicit Generator(uint64_t seed = 0);
  void manual_seed(uint64_t seed);
  uint64_t initial_seed() const { return seed_; }

  /// Uniform in [0, 1) with 53 random bits.
  double next_uniform();
  /// Standard normal (Box-Muller on next_uniform; portable, unlike std::normal_distribution).
  double next_normal();

  /// Dropout's `[seed, offset]` state.
  const Tensor& rng_state() const;
  void set_rng_state(const Tensor& state);

private:
  friend detail::SavedState detail::savedStateOf(Generator& generator);
  uint64_t seed_;
  std::mt19937_64 engine_;
  /// Made on first use, so that constructing a Generator (even a global one)
  /// runs no op.
  mutable Tensor rngState_;
};

namespace detail {
/// The source location ops are recorded with under jit::trace (DESIGN
/// "Conventions"): public entry points (Module calls, losses, backward, the
/// optimizer and scaler steps) take the caller's std::source_location and
/// open a frame; the outermost frame wins, so ops a library call makes
/// inside are located at the user's line. Ops outside any frame (a bare
/// `a + b`) take the jit::trace call's location.
class UserFrame {
public:
  explicit UserFrame(const std::source_location& where);
  ~UserFrame();
  UserFrame(const UserFrame&) = delete;
  UserFrame& operator=(const UserFrame&) = delete;

private:
  bool outermost_;
};
} // namespace detail

/// The generator used when none is passed.
Generator& default_generator();
/// Seeds the default generator (torch.manual_seed).
void manual_seed(uint64_t seed);

// --- creation (each records jit.constant) --------------------------------------

/// A tensor of `shape` from row-major `values` (one per element, or one to
/// fill), each rounded once to `dtype`.
Tensor tensor(std::span<const double> values, Shape shape, DType dtype = f32);
Tensor tensor(std::initializer_list<double> values, Shape shape, DType dtype = f32);
/// A 1-D tensor of `values` (`shape` defaults to [values.size()]).
Tensor tensor(std::initializer_list<double> values, DType dtype = f32);
/// Exact integers (class labels): an i64 tensor.
Tensor tensor(std::span<const int64_t> values, Shape shape);
/// A rank-0 tensor.
Tensor scalar_tensor(double value, DType dtype = f32);

Tensor full(Shape shape, double value, DType dtype = f32);
Tensor zeros(Shape shape, DType dtype = f32);
Tensor ones(Shape shape, DType dtype = f32);
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);
/// Uniform in [0, 1).
Tensor rand(Shape shape, DType dtype = f32, Generator* generator = nullptr);
/// Standard normal.
Tensor randn(Shape shape, DType dtype = f32, Generator* generator = nullptr);

} // namespace jit

#endif // JIT_TENSOR_H
