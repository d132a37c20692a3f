// Elementwise and fused elementwise steps: one evaluator for both.
//
// An Elementwise step runs as a program of loads plus its one op, so every
// scalar operation exists once and a fused program computes exactly what the
// same ops computed step by step. The program runs over the output in chunks:
// each register is an array of one chunk's values, so the interpretation
// overhead is per chunk, not per element.
//
// Registers are typed (FusedInstruction::type). Values of f16/bf16/f32
// registers are kept as float, rounded to the register's dtype after every
// instruction (an f16 register holds only f16 values, as an f16 buffer
// would); f64 registers as double; i64 and i1 registers as int64. An
// instruction computes in double when its operands are f64, in float
// otherwise.

#include "CpuKernels.h"

#include <cmath>
#include <numbers>

namespace ampjit::runtime::cpu {

namespace {

constexpr int64_t kChunk = 256;

//===----------------------------------------------------------------------===//
// The scalar operations
//===----------------------------------------------------------------------===//

template <typename T> T geluExact(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
}

template <typename T> T geluExactGrad(T dy, T x) {
  T cdf = T(0.5) * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
  T pdf = std::exp(T(-0.5) * x * x) * T(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
  return dy * (cdf + x * pdf);
}

template <typename T, typename F>
void map1(const T* a, T* out, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = f(a[i]);
}

template <typename T, typename F>
void map2(const T* a, const T* b, T* out, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = f(a[i], b[i]);
}

template <typename T>
void unary(ElementwiseOp op, const T* x, T* y, int64_t n, double scalar) {
  switch (op) {
  case ElementwiseOp::Neg: return map1(x, y, n, [](T v) { return -v; });
  // `v < 0 ? 0 : v` keeps NaN (as PyTorch's relu does).
  case ElementwiseOp::Relu: return map1(x, y, n, [](T v) { return v < T(0) ? T(0) : v; });
  case ElementwiseOp::Tanh: return map1(x, y, n, [](T v) { return std::tanh(v); });
  case ElementwiseOp::Sigmoid: return map1(x, y, n, [](T v) { return T(1) / (T(1) + std::exp(-v)); });
  case ElementwiseOp::Exp: return map1(x, y, n, [](T v) { return std::exp(v); });
  case ElementwiseOp::Log: return map1(x, y, n, [](T v) { return std::log(v); });
  case ElementwiseOp::Sqrt: return map1(x, y, n, [](T v) { return std::sqrt(v); });
  case ElementwiseOp::Rsqrt: return map1(x, y, n, [](T v) { return T(1) / std::sqrt(v); });
  case ElementwiseOp::Gelu: return map1(x, y, n, [](T v) { return geluExact(v); });
  case ElementwiseOp::GeluTanh: return map1(x, y, n, [](T v) { return geluTanh(v); });
  case ElementwiseOp::Pow: {
    T exponent = T(scalar);
    return map1(x, y, n, [exponent](T v) { return std::pow(v, exponent); });
  }
  default: return;
  }
}

template <typename T>
void binary(ElementwiseOp op, const T* a, const T* b, T* y, int64_t n) {
  switch (op) {
  case ElementwiseOp::Add: return map2(a, b, y, n, [](T u, T v) { return u + v; });
  case ElementwiseOp::Sub: return map2(a, b, y, n, [](T u, T v) { return u - v; });
  case ElementwiseOp::Mul: return map2(a, b, y, n, [](T u, T v) { return u * v; });
  case ElementwiseOp::Div: return map2(a, b, y, n, [](T u, T v) { return u / v; });
  case ElementwiseOp::ReluGrad: return map2(a, b, y, n, [](T dy, T out) { return out > T(0) ? dy : T(0); });
  case ElementwiseOp::GeluGrad: return map2(a, b, y, n, [](T dy, T x) { return geluExactGrad(dy, x); });
  case ElementwiseOp::GeluTanhGrad: return map2(a, b, y, n, [](T dy, T x) { return geluTanhGrad(dy, x); });
  default: return;
  }
}

template <typename T>
void compare(ElementwiseOp op, const T* a, const T* b, int64_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    bool result = false;
    switch (op) {
    case ElementwiseOp::CmpEq: result = a[i] == b[i]; break;
    case ElementwiseOp::CmpNe: result = a[i] != b[i]; break;
    case ElementwiseOp::CmpLt: result = a[i] < b[i]; break;
    case ElementwiseOp::CmpLe: result = a[i] <= b[i]; break;
    case ElementwiseOp::CmpGt: result = a[i] > b[i]; break;
    case ElementwiseOp::CmpGe: result = a[i] >= b[i]; break;
    default: break;
    }
    y[i] = result ? 1 : 0;
  }
}

/// Rounds float values in place to an f16/bf16 register's dtype.
void roundSingle(float* values, int64_t n, DType dtype) {
  if (dtype == DType::F16)
    roundToHalf(values, size_t(n));
  else if (dtype == DType::BF16)
    roundToBFloat16(values, size_t(n));
}

/// A double rounded once to dtype `to`, as a float register holds it.
float roundDoubleToSingle(double value, DType to) {
  switch (to) {
  case DType::F16: return halfToFloat(doubleToHalf(value));
  case DType::BF16: return bfloat16ToFloat(doubleToBFloat16(value));
  default: return float(value);
  }
}

//===----------------------------------------------------------------------===//
// The evaluator
//===----------------------------------------------------------------------===//

/// Offsets into a contiguous input of shape `from` for output elements
/// [begin, begin + n) of shape `to` (numpy broadcasting).
class BroadcastReader {
public:
  BroadcastReader(const Shape& from, const Shape& to)
      : outShape_(to), strides_(broadcastStrides(from, to)), identity_(from == to),
        scalar_(elementCount(from) == 1) {}

  bool identity() const { return identity_; }

  void offsets(int64_t begin, int64_t n, int64_t* out) const {
    if (scalar_) {
      std::fill(out, out + n, 0);
      return;
    }
    size_t rank = outShape_.size();
    std::vector<int64_t> index(rank);
    int64_t rest = begin, offset = 0;
    for (size_t d = rank; d-- > 0;) {
      index[d] = rest % outShape_[d];
      rest /= outShape_[d];
      offset += index[d] * strides_[d];
    }
    for (int64_t i = 0; i < n; ++i) {
      out[i] = offset;
      for (size_t d = rank; d-- > 0;) {
        offset += strides_[d];
        if (++index[d] < outShape_[d])
          break;
        offset -= strides_[d] * index[d];
        index[d] = 0;
      }
    }
  }

private:
  Shape outShape_;
  std::vector<int64_t> strides_;
  bool identity_;
  bool scalar_;
};

class ProgramEvaluator {
public:
  ProgramEvaluator(const std::vector<FusedInstruction>& program, const std::vector<uint32_t>& outputs,
                   const StepIO& io)
      : program_(program), outputs_(outputs), io_(io) {
    const Shape& shape = io.out[0].dims();
    for (const BufferView& input : io.in)
      readers_.emplace_back(input.dims(), shape);
    // One chunk of storage per register, in the array of its class.
    size_t singles = 0, doubles = 0, integers = 0;
    for (const FusedInstruction& instruction : program) {
      switch (registerClassOf(instruction.type)) {
      case RegisterClass::Single: slot_.push_back(singles++); break;
      case RegisterClass::Double: slot_.push_back(doubles++); break;
      case RegisterClass::Integer: slot_.push_back(integers++); break;
      }
    }
    singles_.resize(singles * kChunk);
    doubles_.resize(doubles * kChunk);
    integers_.resize(integers * kChunk);
    offsets_.resize(kChunk);
  }

  void run() {
    int64_t total = io_.out[0].count;
    for (int64_t begin = 0; begin < total; begin += kChunk) {
      int64_t n = std::min(kChunk, total - begin);
      for (size_t r = 0; r < program_.size(); ++r)
        execute(r, begin, n);
      for (size_t k = 0; k < outputs_.size(); ++k)
        store(outputs_[k], io_.out[k], begin, n);
    }
  }

private:
  float* single(size_t reg) { return singles_.data() + slot_[reg] * kChunk; }
  double* dbl(size_t reg) { return doubles_.data() + slot_[reg] * kChunk; }
  int64_t* integer(size_t reg) { return integers_.data() + slot_[reg] * kChunk; }

  void execute(size_t r, int64_t begin, int64_t n) {
    const FusedInstruction& instruction = program_[r];
    DType type = instruction.type;
    RegisterClass cls = registerClassOf(type);
    const auto& ops = instruction.operands;
    switch (instruction.op) {
    case ElementwiseOp::Load: return load(r, io_.in[ops[0]], readers_[ops[0]], begin, n);
    case ElementwiseOp::Constant: return constant(r, instruction.scalar, n);
    case ElementwiseOp::Convert: return convert(r, ops[0], n);
    case ElementwiseOp::Select: return select(r, ops, n);
    default: break;
    }
    if (instruction.op >= ElementwiseOp::CmpEq && instruction.op <= ElementwiseOp::CmpGe) {
      switch (registerClassOf(program_[ops[0]].type)) {
      case RegisterClass::Single: return compare(instruction.op, single(ops[0]), single(ops[1]), integer(r), n);
      case RegisterClass::Double: return compare(instruction.op, dbl(ops[0]), dbl(ops[1]), integer(r), n);
      case RegisterClass::Integer: return compare(instruction.op, integer(ops[0]), integer(ops[1]), integer(r), n);
      }
    }
    bool isUnary = elementwiseOpArity(instruction.op) == 1;
    if (cls == RegisterClass::Double) {
      if (isUnary)
        unary(instruction.op, dbl(ops[0]), dbl(r), n, instruction.scalar);
      else
        binary(instruction.op, dbl(ops[0]), dbl(ops[1]), dbl(r), n);
      return;
    }
    if (isUnary)
      unary(instruction.op, single(ops[0]), single(r), n, instruction.scalar);
    else
      binary(instruction.op, single(ops[0]), single(ops[1]), single(r), n);
    roundSingle(single(r), n, type);
  }

  void load(size_t r, const BufferView& input, const BroadcastReader& reader, int64_t begin, int64_t n) {
    RegisterClass cls = registerClassOf(program_[r].type);
    if (reader.identity()) {
      switch (cls) {
      case RegisterClass::Single: return loadRange<float>(input, begin, n, single(r));
      case RegisterClass::Double: return loadRange<double>(input, begin, n, dbl(r));
      case RegisterClass::Integer: break;
      }
      int64_t* out = integer(r);
      for (int64_t i = 0; i < n; ++i)
        out[i] = input.dtype == DType::I64 ? input.as<const int64_t>()[begin + i] : input.as<const uint8_t>()[begin + i];
      return;
    }
    reader.offsets(begin, n, offsets_.data());
    const int64_t* offsets = offsets_.data();
    switch (cls) {
    case RegisterClass::Single: return gather<float>(input, offsets, n, single(r));
    case RegisterClass::Double: return gather<double>(input, offsets, n, dbl(r));
    case RegisterClass::Integer: {
      int64_t* out = integer(r);
      for (int64_t i = 0; i < n; ++i)
        out[i] = input.dtype == DType::I64 ? input.as<const int64_t>()[offsets[i]]
                                           : input.as<const uint8_t>()[offsets[i]];
      return;
    }
    }
  }

  /// Elements at `offsets` of `input`, widened to T, with the dtype switch
  /// outside the loop.
  template <typename T>
  static void gather(const BufferView& input, const int64_t* offsets, int64_t n, T* out) {
    switch (input.dtype) {
    case DType::F32:
      for (int64_t i = 0; i < n; ++i)
        out[i] = T(input.as<const float>()[offsets[i]]);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i)
        out[i] = T(halfToFloat(input.as<const uint16_t>()[offsets[i]]));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i)
        out[i] = T(bfloat16ToFloat(input.as<const uint16_t>()[offsets[i]]));
      return;
    default:
      for (int64_t i = 0; i < n; ++i)
        out[i] = loadAs<T>(input, offsets[i]);
      return;
    }
  }

  void constant(size_t r, double value, int64_t n) {
    DType type = program_[r].type;
    switch (registerClassOf(type)) {
    case RegisterClass::Single: std::fill(single(r), single(r) + n, roundDoubleToSingle(value, type)); return;
    case RegisterClass::Double: std::fill(dbl(r), dbl(r) + n, value); return;
    case RegisterClass::Integer:
      std::fill(integer(r), integer(r) + n, type == DType::I1 ? int64_t(value != 0.0) : truncateToInt64(value));
      return;
    }
  }

  void convert(size_t r, size_t source, int64_t n) {
    DType to = program_[r].type;
    DType from = program_[source].type;
    RegisterClass toClass = registerClassOf(to), fromClass = registerClassOf(from);
    // One loop per pair of register classes, over local pointers: the
    // register arrays are members, and per-element class switches kept the
    // compiler from vectorising (or even hoisting the loads of) the common
    // float-to-float cast.
    auto toInteger = [to](auto value) {
      return to == DType::I1 ? int64_t(value != decltype(value)(0)) : truncateToInt64(double(value));
    };
    switch (fromClass) {
    case RegisterClass::Single: {
      const float* in = single(source);
      if (toClass == RegisterClass::Single) {
        float* out = single(r);
        std::copy(in, in + n, out);
        roundSingle(out, n, to); // rounded once, from the exact float
      } else if (toClass == RegisterClass::Double) {
        double* out = dbl(r);
        for (int64_t i = 0; i < n; ++i)
          out[i] = in[i];
      } else {
        int64_t* out = integer(r);
        for (int64_t i = 0; i < n; ++i)
          out[i] = toInteger(in[i]);
      }
      return;
    }
    case RegisterClass::Double: {
      const double* in = dbl(source);
      if (toClass == RegisterClass::Single) {
        float* out = single(r);
        for (int64_t i = 0; i < n; ++i)
          out[i] = roundDoubleToSingle(in[i], to);
      } else if (toClass == RegisterClass::Double) {
        std::copy(in, in + n, dbl(r));
      } else {
        int64_t* out = integer(r);
        for (int64_t i = 0; i < n; ++i)
          out[i] = toInteger(in[i]);
      }
      return;
    }
    case RegisterClass::Integer: {
      const int64_t* in = integer(source);
      if (toClass == RegisterClass::Single) {
        float* out = single(r);
        for (int64_t i = 0; i < n; ++i)
          out[i] = roundDoubleToSingle(double(in[i]), to);
      } else if (toClass == RegisterClass::Double) {
        double* out = dbl(r);
        for (int64_t i = 0; i < n; ++i)
          out[i] = double(in[i]);
      } else {
        int64_t* out = integer(r);
        for (int64_t i = 0; i < n; ++i)
          out[i] = to == DType::I1 ? int64_t(in[i] != 0) : in[i];
      }
      return;
    }
    }
  }

  void select(size_t r, const std::array<uint32_t, 3>& ops, int64_t n) {
    const int64_t* condition = integer(ops[0]);
    switch (registerClassOf(program_[r].type)) {
    case RegisterClass::Single:
      for (int64_t i = 0; i < n; ++i)
        single(r)[i] = condition[i] ? single(ops[1])[i] : single(ops[2])[i];
      return;
    case RegisterClass::Double:
      for (int64_t i = 0; i < n; ++i)
        dbl(r)[i] = condition[i] ? dbl(ops[1])[i] : dbl(ops[2])[i];
      return;
    case RegisterClass::Integer:
      for (int64_t i = 0; i < n; ++i)
        integer(r)[i] = condition[i] ? integer(ops[1])[i] : integer(ops[2])[i];
      return;
    }
  }

  void store(size_t r, const BufferView& output, int64_t begin, int64_t n) {
    switch (registerClassOf(program_[r].type)) {
    case RegisterClass::Single: return storeRange<float>(output, begin, n, single(r));
    case RegisterClass::Double: return storeRange<double>(output, begin, n, dbl(r));
    case RegisterClass::Integer: break;
    }
    const int64_t* values = integer(r);
    for (int64_t i = 0; i < n; ++i) {
      if (output.dtype == DType::I64)
        output.as<int64_t>()[begin + i] = values[i];
      else
        output.as<uint8_t>()[begin + i] = values[i] != 0 ? 1 : 0;
    }
  }

  const std::vector<FusedInstruction>& program_;
  const std::vector<uint32_t>& outputs_;
  const StepIO& io_;
  std::vector<BroadcastReader> readers_;
  std::vector<size_t> slot_;
  std::vector<float> singles_;
  std::vector<double> doubles_;
  std::vector<int64_t> integers_;
  std::vector<int64_t> offsets_;
};

} // namespace

Status runFusedElementwise(const Step& step, const StepIO& io) {
  const FusedElementwiseParams& params = step.as<FusedElementwiseParams>();
  ProgramEvaluator(params.program, params.outputs, io).run();
  return Status::success();
}

Status runElementwise(const Step& step, const StepIO& io) {
  const ElementwiseParams& params = step.as<ElementwiseParams>();
  std::vector<FusedInstruction> program;
  FusedInstruction op{params.op, io.out[0].dtype, {}, params.scalar};
  for (uint32_t slot = 0; slot < io.in.size(); ++slot) {
    program.push_back(FusedInstruction{ElementwiseOp::Load, io.in[slot].dtype, {slot, 0, 0}, 0.0});
    op.operands[slot] = slot;
  }
  program.push_back(op);
  std::vector<uint32_t> outputs = {uint32_t(program.size() - 1)};
  ProgramEvaluator(program, outputs, io).run();
  return Status::success();
}

} // namespace ampjit::runtime::cpu
