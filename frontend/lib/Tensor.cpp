// jit::Tensor's methods, creation functions, generators and printing.

#include "Dispatch.h"
#include "StateFile.h"
#include "trace/TraceSession.h"

#include "jit/Autograd.h"
#include "jit/Ops.h"

#include <cmath>
#include <cstring>
#include <iomanip>
#include <numbers>
#include <ostream>
#include <sstream>

namespace jit {

using detail::RequestedResult;
using detail::TensorImpl;
namespace rt = ampjit::runtime;

std::string_view dtype_name(DType dtype) { return rt::dtypeName(dtype); }
bool is_floating_point(DType dtype) { return rt::isFloating(dtype); }

//===----------------------------------------------------------------------===//
// Tensor
//===----------------------------------------------------------------------===//

TensorImpl& Tensor::impl() const {
  if (!impl_)
    throw Error("use of an undefined tensor (a default-constructed jit::Tensor)");
  return *impl_;
}

const Shape& Tensor::shape() const { return impl().type.shape; }
DType Tensor::dtype() const { return impl().type.dtype; }
int64_t Tensor::numel() const { return rt::elementCount(shape()); }

int64_t Tensor::size(int64_t d) const {
  int64_t rank = dim();
  if (d < -rank || d >= rank)
    throw Error("size(" + std::to_string(d) + ") is out of range for " + detail::describe(*this));
  return shape()[d < 0 ? d + rank : d];
}

double Tensor::item(std::source_location where) const {
  if (numel() != 1)
    throw Error("item() needs a tensor with one element, got " + detail::describe(*this));
  return detail::concreteValue(impl(), "item()", where).at(0);
}

std::vector<double> Tensor::to_vector(std::source_location where) const {
  return detail::concreteValue(impl(), "to_vector()", where).toDoubles();
}

template <typename T>
const T* Tensor::data_ptr(std::source_location where) const {
  const rt::Tensor& value = detail::concreteValue(impl(), "data_ptr()", where);
  bool matches = rt::isStorageTypeOf<T>(dtype()) ||
                 (std::is_same_v<T, uint16_t> && (dtype() == f16 || dtype() == bf16));
  if (!matches)
    throw Error("data_ptr: the element type asked for does not store " + detail::describe(*this));
  return reinterpret_cast<const T*>(value.bytes());
}
template const float* Tensor::data_ptr<float>(std::source_location) const;
template const double* Tensor::data_ptr<double>(std::source_location) const;
template const int64_t* Tensor::data_ptr<int64_t>(std::source_location) const;
template const uint8_t* Tensor::data_ptr<uint8_t>(std::source_location) const;
template const uint16_t* Tensor::data_ptr<uint16_t>(std::source_location) const;

Tensor Tensor::to(DType target) const {
  return detail::apply1(detail::ops::convert, {*this}, {}, RequestedResult{.dtype = target});
}

Tensor Tensor::type_as(const Tensor& other) const {
  return detail::apply1(detail::ops::type_as, {*this, other}, {});
}

bool Tensor::requires_grad() const { return impl().requiresGrad; }

Tensor& Tensor::requires_grad_(bool requiresGrad) {
  TensorImpl& self = impl();
  if (self.gradFn)
    throw Error("requires_grad_() applies to leaf tensors; " + detail::describe(*this) + " was computed by " +
                grad_fn_name() + " (use detach() to make a leaf)");
  if (requiresGrad && !is_floating_point(self.type.dtype))
    throw Error("only floating-point tensors can require grad, not " + detail::describe(*this));
  self.requiresGrad = requiresGrad;
  return *this;
}

bool Tensor::is_leaf() const { return impl().gradFn == nullptr; }
Tensor Tensor::grad() const { return impl().grad; }

void Tensor::zero_grad(bool setToNone) {
  TensorImpl& self = impl();
  if (auto* session = detail::TraceSession::current(); session && session->active() && setToNone)
    session->noteGradientReset(impl_ptr());
  if (setToNone || !self.grad.defined()) {
    self.grad = Tensor();
    return;
  }
  // In place, as PyTorch: every handle of the gradient sees the zeros, and a
  // traced step records a write to the gradient state.
  NoGradGuard noGrad;
  self.grad.copy_(zeros_like(self.grad));
}

std::string Tensor::grad_fn_name() const {
  const TensorImpl& self = impl();
  return self.gradFn ? detail::nodeName(*self.gradFn) : std::string();
}

void Tensor::backward(std::source_location where) const {
  detail::UserFrame frame(where);
  if (numel() != 1)
    throw Error("backward() without a gradient needs a one-element tensor, but this is " +
                detail::describe(*this) + "; pass a seed gradient of that type: backward(gradient)");
  NoGradGuard noGrad;
  backward(ones_like(*this));
}

void Tensor::backward(const Tensor& gradient, std::source_location where) const {
  detail::UserFrame frame(where);
  if (!requires_grad())
    throw Error("backward() on " + detail::describe(*this) +
                ", which does not require grad: no operand of the ops that computed it requires grad, "
                "or it was computed under NoGradGuard");
  if (!gradient.defined() || gradient.impl().type != impl().type)
    throw Error("backward(gradient): the gradient must have the tensor's type " + detail::describe(*this) +
                ", got " + detail::describe(gradient));
  detail::runBackward(*this, gradient.detach());
}

Tensor Tensor::detach() const {
  if (auto* session = detail::TraceSession::current(); session && session->active() && !impl().session)
    session->captureBeforeDetach(*this);
  auto copy = std::make_shared<TensorImpl>();
  copy->type = impl().type;
  detail::completeDeferredUpdate(impl());
  detail::syncFromDevice(impl(), "detach");
  copy->value = impl().value;
  copy->session = impl().session;
  copy->traceValue = impl().traceValue;
  copy->wrappedNumber = impl().wrappedNumber;
  return Tensor(std::move(copy));
}

Tensor& Tensor::copy_(const Tensor& source) {
  TensorImpl& self = impl();
  if (is_grad_enabled() && self.requiresGrad)
    throw Error("copy_/add_/sub_/mul_ on " + detail::describe(*this) +
                ", which requires grad: update it under jit::NoGradGuard");
  Tensor value = source;
  if (value.dtype() != self.type.dtype)
    value = value.to(self.type.dtype);
  if (value.shape() != self.type.shape)
    value = broadcast_to(value, self.type.shape);
  detail::assignValue(self, value);
  return *this;
}

Tensor& Tensor::add_(const Tensor& other) { return copy_(*this + other); }
Tensor& Tensor::sub_(const Tensor& other) { return copy_(*this - other); }
Tensor& Tensor::mul_(const Tensor& other) { return copy_(*this * other); }

//===----------------------------------------------------------------------===//
// Generators
//===----------------------------------------------------------------------===//

Generator::Generator(uint64_t seed) { manual_seed(seed); }

void Generator::manual_seed(uint64_t seed) {
  seed_ = seed;
  engine_.seed(seed);
  // Rewritten in place, not replaced: a traced step holds this tensor as state.
  if (rngState_.defined()) {
    const int64_t state[] = {int64_t(seed_), 0};
    set_rng_state(tensor(std::span<const int64_t>(state), {2}));
  }
}

double Generator::next_uniform() { return double(engine_() >> 11) * 0x1.0p-53; }

double Generator::next_normal() {
  // Box-Muller; 1 - u is in (0, 1], so the log is finite.
  double u1 = 1.0 - next_uniform(), u2 = next_uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

const Tensor& Generator::rng_state() const {
  if (!rngState_.defined()) {
    // A host value, not a jit.constant op: made during a trace (dropout's
    // first use), a constant would belong to the trace, not be state it captures.
    rt::Expected<rt::Tensor> state = rt::Tensor::allocate(i64, {2});
    if (!state)
      throw Error("Generator: " + state.message());
    state->elements<int64_t>()[0] = int64_t(seed_);
    state->elements<int64_t>()[1] = 0;
    rngState_ = detail::makeTensor(std::move(*state));
    detail::nameState(rngState_, "generator.rng_state");
  }
  return rngState_;
}

void Generator::set_rng_state(const Tensor& state) {
  if (state.dtype() != i64 || state.shape() != Shape{2})
    throw Error("a generator's rng_state is i64[2] ([seed, offset]), got " + detail::describe(state));
  // Written in place: a traced step captures the state tensor by identity, so
  // the write (dropout's next state) becomes a result tied to it and every
  // call draws new masks; rebinding would leave the step replaying the
  // traced call's masks and the generator holding a symbolic tensor.
  Tensor target = rng_state();
  target.copy_(state);
}

detail::SavedState detail::savedStateOf(Generator& generator) {
  // The host engine's state as the numbers of its standard text form.
  std::ostringstream text;
  text << generator.engine_;
  std::istringstream numbers(text.str());
  std::vector<int64_t> words;
  for (uint64_t word; numbers >> word;)
    words.push_back(int64_t(word));
  Tensor engine = tensor(std::span<const int64_t>(words), {int64_t(words.size())});
  Tensor seed = tensor(std::vector<int64_t>{int64_t(generator.seed_)}, {});
  return {.kind = "Generator",
          .noun = "generator",
          .tensors = {{"rng_state", generator.rng_state()}, {"engine", engine}, {"seed", seed}},
          .settings = {},
          .restore = [&generator, engine, seed] {
            // data_ptr, not to_vector: the words use all 64 bits.
            std::ostringstream restored;
            const int64_t* loaded = engine.data_ptr<int64_t>();
            for (int64_t i = 0; i < engine.numel(); ++i)
              restored << uint64_t(loaded[i]) << ' ';
            std::istringstream in(restored.str());
            in >> generator.engine_;
            generator.seed_ = uint64_t(*seed.data_ptr<int64_t>());
          }};
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

//===----------------------------------------------------------------------===//
// Creation: every tensor is made by jit.constant, so a trace records it too
//===----------------------------------------------------------------------===//

namespace {

Tensor constantFrom(const rt::Tensor& value) {
  rt::DenseData data{value.type(), std::vector<uint8_t>(value.byteSize())};
  std::memcpy(data.bytes.data(), value.bytes(), value.byteSize());
  return detail::apply1(detail::ops::constant, {}, {{"value", std::move(data)}});
}

void checkShape(const Shape& shape, const char* what) {
  if (rt::checkedElementCount(shape) < 0)
    throw Error(std::string(what) + ": invalid shape " + rt::shapeToString(shape) +
                " (a negative dimension, or more than 2^48 elements)");
}

} // namespace

Tensor tensor(std::span<const double> values, Shape shape, DType dtype) {
  checkShape(shape, "jit::tensor");
  int64_t count = rt::elementCount(shape);
  if (int64_t(values.size()) != count && values.size() != 1)
    throw Error("jit::tensor: " + std::to_string(values.size()) + " values for shape " +
                rt::shapeToString(shape) + " (" + std::to_string(count) + " elements)");
  rt::Expected<rt::Tensor> value = rt::Tensor::fromDoubles(dtype, shape, values);
  if (!value)
    throw Error("jit::tensor: " + value.message());
  return constantFrom(*value);
}

Tensor tensor(std::initializer_list<double> values, Shape shape, DType dtype) {
  return tensor(std::span<const double>(values.begin(), values.size()), std::move(shape), dtype);
}

Tensor tensor(std::initializer_list<double> values, DType dtype) {
  return tensor(values, Shape{int64_t(values.size())}, dtype);
}

Tensor tensor(std::span<const int64_t> values, Shape shape) {
  checkShape(shape, "jit::tensor");
  if (int64_t(values.size()) != rt::elementCount(shape))
    throw Error("jit::tensor: " + std::to_string(values.size()) + " values for shape " +
                rt::shapeToString(shape));
  rt::Expected<rt::Tensor> value = rt::Tensor::allocate(i64, shape);
  if (!value)
    throw Error("jit::tensor: " + value.message());
  std::copy(values.begin(), values.end(), value->elements<int64_t>().begin());
  return constantFrom(*value);
}

Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

namespace detail {
Tensor wrappedNumber(double value, DType dtype) {
  bool low = dtype == f16 || dtype == bf16;
  Tensor number = scalar_tensor(low ? double(float(value)) : value, dtype);
  number.impl().wrappedNumber = value;
  return number;
}
} // namespace detail

Tensor full(Shape shape, double value, DType dtype) {
  checkShape(shape, "jit::full");
  // A splat: one element of data, however large the tensor (jit.constant dense<v>).
  rt::Expected<rt::Tensor> one = rt::Tensor::fromDoubles(dtype, {}, std::span<const double>(&value, 1));
  if (!one)
    throw Error("jit::full: " + one.message());
  rt::DenseData data{rt::TensorType{dtype, std::move(shape)}, std::vector<uint8_t>(one->byteSize())};
  std::memcpy(data.bytes.data(), one->bytes(), one->byteSize());
  return detail::apply1(detail::ops::constant, {}, {{"value", std::move(data)}});
}

Tensor zeros(Shape shape, DType dtype) { return full(std::move(shape), 0.0, dtype); }
Tensor ones(Shape shape, DType dtype) { return full(std::move(shape), 1.0, dtype); }
Tensor zeros_like(const Tensor& like) { return zeros(like.shape(), like.dtype()); }
Tensor ones_like(const Tensor& like) { return ones(like.shape(), like.dtype()); }

namespace {
template <typename Draw>
Tensor randomTensor(Shape shape, DType dtype, Draw draw, const char* what) {
  detail::refuseInsideTrace(what, "the numbers are drawn on the host, so the trace would keep the ones it drew "
                                  "and every call would reuse them; draw them outside the step and pass them as "
                                  "an input (dropout's masks are drawn in the step: its state advances)");
  if (!is_floating_point(dtype))
    throw Error(std::string(what) + ": needs a floating-point dtype, got " + std::string(dtype_name(dtype)));
  return detail::drawnTensor(std::move(shape), dtype, draw, what);
}
} // namespace

namespace detail {

Tensor drawnTensor(Shape shape, DType dtype, const std::function<double()>& draw, const char* what) {
  checkShape(shape, what);
  rt::Expected<rt::Tensor> value = rt::Tensor::allocate(dtype, std::move(shape));
  if (!value)
    throw Error(std::string(what) + ": " + value.message());
  // Each draw is stored as it comes, rounded once as jit::tensor rounds a
  // double: no vector of doubles in between (mlp9's 604M parameters took
  // 19 s to draw that way, most of a benchmark process's life).
  std::byte* bytes = value->bytes();
  int64_t count = value->elementCount();
  if (dtype == f32) {
    float* out = reinterpret_cast<float*>(bytes);
    for (int64_t i = 0; i < count; ++i)
      out[i] = float(draw());
  } else {
    for (int64_t i = 0; i < count; ++i)
      rt::storeElementFromDouble(dtype, bytes, i, draw());
  }
  // Outside a trace the tensor is the drawn bytes themselves; a trace
  // records them as a constant, as jit::tensor does.
  if (TraceSession* session = TraceSession::current(); session && session->active())
    return constantFrom(*value);
  return makeTensor(std::move(*value));
}

} // namespace detail

Tensor rand(Shape shape, DType dtype, Generator* generator) {
  Generator& source = generator ? *generator : default_generator();
  return randomTensor(std::move(shape), dtype, [&] { return source.next_uniform(); }, "jit::rand");
}

Tensor randn(Shape shape, DType dtype, Generator* generator) {
  Generator& source = generator ? *generator : default_generator();
  return randomTensor(std::move(shape), dtype, [&] { return source.next_normal(); }, "jit::randn");
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

namespace {

// Like PyTorch: at most kEdgeItems values at each end of a dimension once a
// tensor has more than kSummariseAbove elements.
constexpr int64_t kSummariseAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Printer {
  std::ostream& os;
  const Shape& shape;
  const std::vector<double>& values;
  DType dtype;
  bool summarise;
  bool scientific;

  void element(double value) {
    if (dtype == i1) {
      os << (value != 0.0 ? "True" : "False");
    } else if (dtype == i64) {
      os << int64_t(value);
    } else if (std::isnan(value) || std::isinf(value)) {
      os << (std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf");
    } else if (scientific) {
      os << std::scientific << std::setprecision(4) << value << std::defaultfloat;
    } else {
      os << std::fixed << std::setprecision(4) << value << std::defaultfloat;
    }
  }

  void block(size_t dim, int64_t offset, int indent) {
    if (dim == shape.size())
      return element(values[size_t(offset)]);
    int64_t stride = rt::elementCount(std::span<const int64_t>(shape).subspan(dim + 1));
    int64_t count = shape[dim];
    os << '[';
    for (int64_t i = 0; i < count; ++i) {
      if (summarise && count > 2 * kEdgeItems && i == kEdgeItems) {
        os << "...";
        i = count - kEdgeItems - 1;
      } else {
        block(dim + 1, offset + i * stride, indent + 1);
      }
      if (i + 1 < count) {
        os << ',';
        if (dim + 1 == shape.size()) {
          os << ' ';
        } else {
          os << std::string(shape.size() - dim - 1, '\n') << std::string(size_t(indent + 1), ' ');
        }
      }
    }
    os << ']';
  }
};

} // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& value) {
  if (!value.defined())
    return os << "tensor(<undefined>)";
  std::vector<double> values = value.to_vector();
  double largest = 0.0, smallest = INFINITY;
  for (double v : values)
    if (std::isfinite(v) && v != 0.0) {
      largest = std::max(largest, std::fabs(v));
      smallest = std::min(smallest, std::fabs(v));
    }
  Printer printer{os, value.shape(), values, value.dtype(), value.numel() > kSummariseAbove,
                  largest >= 1e8 || (smallest < 1e-4 && largest > 0.0)};
  os << "tensor(";
  printer.block(0, 0, int(std::string("tensor(").size()));
  if (value.dtype() != f32 && value.dtype() != i64)
    os << ", dtype=" << dtype_name(value.dtype());
  if (!value.grad_fn_name().empty())
    os << ", grad_fn=<" << value.grad_fn_name() << '>';
  else if (value.requires_grad())
    os << ", requires_grad=True";
  return os << ')';
}

std::string to_string(const Tensor& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

} // namespace jit
