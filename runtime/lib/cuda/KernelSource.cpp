// CUDA C++ for Elementwise and FusedElementwise steps (see KernelSource.h).
//
// The emitter writes one statement per program instruction, each defining a
// `const` register of its class (float for f32/f16/bf16, double for f64,
// long long for i64/i1), exactly as the CPU evaluator keeps registers, so
// every rounding the CPU does happens here at the same place. Constants
// are rounded on the host with the CPU's own conversions and printed exactly
// (hexadecimal floating literals or bit patterns), so no decimal round trip
// can change them.

#include "ampjit/runtime/cuda/KernelSource.h"

#include "ampjit/runtime/Fnv1a.h"
#include "ampjit/runtime/LowPrecision.h"
#include "ampjit/runtime/Tensor.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numbers>

namespace ampjit::runtime::cuda {

namespace {

const char* registerTypeName(RegisterClass cls) {
  switch (cls) {
  case RegisterClass::Single: return "float";
  case RegisterClass::Double: return "double";
  case RegisterClass::Integer: return "long long";
  }
  return "float";
}

std::string format(const char* pattern, auto... values) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, values...);
  return buffer;
}

/// An exact float literal: hexadecimal when finite, the bit pattern otherwise.
std::string floatLiteral(float value) {
  if (std::isfinite(value))
    return format("(%af)", double(value));
  return format("__int_as_float(0x%08" PRIx32 ")", std::bit_cast<uint32_t>(value));
}

std::string doubleLiteral(double value) {
  if (std::isfinite(value))
    return format("(%a)", value);
  return "__longlong_as_double(0x" + hex64(std::bit_cast<uint64_t>(value)) + "LL)";
}

std::string integerLiteral(int64_t value) {
  // -9223372036854775808LL is the negation of a literal that does not fit.
  if (value == std::numeric_limits<int64_t>::min())
    return "(-9223372036854775807LL - 1)";
  return "(" + std::to_string(value) + "LL)";
}

/// The literal a Constant instruction of dtype `type` holds, rounded as the
/// CPU evaluator rounds it (once, from the double).
std::string constantLiteral(double value, DType type) {
  switch (type) {
  case DType::F32: return floatLiteral(float(value));
  case DType::F16: return floatLiteral(halfToFloat(doubleToHalf(value)));
  case DType::BF16: return floatLiteral(bfloat16ToFloat(doubleToBFloat16(value)));
  case DType::F64: return doubleLiteral(value);
  case DType::I64: return integerLiteral(truncateToInt64(value));
  case DType::I1: return value != 0.0 ? "1LL" : "0LL";
  }
  return "0";
}

/// Wraps a float expression so that it is rounded to an f16/bf16 register's
/// dtype, as the CPU's roundSingle does after every instruction.
std::string roundedTo(DType type, const std::string& expression) {
  switch (type) {
  case DType::F16: return "ampjit_round_f16(" + expression + ")";
  case DType::BF16: return "ampjit_round_bf16(" + expression + ")";
  default: return expression;
  }
}

// The functions every kernel shares. The helpers are the CPU evaluator's
// (runtime/lib/cpu/Elementwise.cpp) with std:: replaced by overloads, in the
// same operation order; their double constants are printed from the same
// std::numbers expressions, so T(constant) rounds identically.
std::string prelude() {
  std::string text = R"(#include <cuda_fp16.h>
#include <cuda_bf16.h>

// Kernel argument for dimension sizes and element strides (KernelDims on the host).
struct AmpjitDims {
  long long v[8];
};

static __device__ __forceinline__ float ampjit_round_f16(float v) { return __half2float(__float2half_rn(v)); }
static __device__ __forceinline__ float ampjit_round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
// Rounded once from double, as the CPU's doubleToHalf / doubleToBFloat16.
static __device__ __forceinline__ float ampjit_f16_from_double(double v) { return __half2float(__double2half(v)); }
static __device__ __forceinline__ float ampjit_bf16_from_double(double v) { return __bfloat162float(__double2bfloat16(v)); }

// Toward zero, saturating, NaN as 0 (the CPU's truncateToInt64).
static __device__ __forceinline__ long long ampjit_truncate_i64(double v) {
  if (v != v) return 0;
  if (v >= 0x1p63) return 0x7fffffffffffffffLL;
  if (v < -0x1p63) return -0x7fffffffffffffffLL - 1;
  return (long long)v;
}

static __device__ __forceinline__ float ampjit_tanh(float v) { return tanhf(v); }
static __device__ __forceinline__ double ampjit_tanh(double v) { return tanh(v); }
static __device__ __forceinline__ float ampjit_exp(float v) { return expf(v); }
static __device__ __forceinline__ double ampjit_exp(double v) { return exp(v); }
static __device__ __forceinline__ float ampjit_log(float v) { return logf(v); }
static __device__ __forceinline__ double ampjit_log(double v) { return log(v); }
static __device__ __forceinline__ float ampjit_sqrt(float v) { return sqrtf(v); }
static __device__ __forceinline__ double ampjit_sqrt(double v) { return sqrt(v); }
static __device__ __forceinline__ float ampjit_erf(float v) { return erff(v); }
static __device__ __forceinline__ double ampjit_erf(double v) { return erf(v); }
static __device__ __forceinline__ float ampjit_pow(float v, float e) { return powf(v, e); }
static __device__ __forceinline__ double ampjit_pow(double v, double e) { return pow(v, e); }

)";
  text += "#define AMPJIT_CHUNK " + std::to_string(kChunkElements) + "\n";
  text += "#define AMPJIT_SQRT_HALF " + doubleLiteral(std::numbers::sqrt2 / 2) + "\n";
  text += "#define AMPJIT_GELU_BETA " + doubleLiteral(std::numbers::sqrt2 * std::numbers::inv_sqrtpi) + "\n";
  text += "#define AMPJIT_GELU_KAPPA " + doubleLiteral(0.044715) + "\n";
  text += "#define AMPJIT_INV_SQRT_2PI " + doubleLiteral(std::numbers::inv_sqrtpi / std::numbers::sqrt2) + "\n";
  text += R"(
// kChunkElements consecutive elements, aligned for one 16-byte access per
// 16 bytes (one 8-byte access for 1-byte elements): the SGD kernels' lesson
// on the H100, where element-wide accesses left half the bandwidth unused.
template <typename T> struct alignas(sizeof(T) == 1 ? 8 : 16) AmpjitChunk {
  T v[AMPJIT_CHUNK];
};

template <typename T> static __device__ __forceinline__ bool ampjit_chunk_aligned(const T* at) {
  return reinterpret_cast<unsigned long long>(at) % alignof(AmpjitChunk<T>) == 0;
}

// Whether every chunk of an operand that steps through its innermost
// dimension contiguously starts aligned: its first element does, and each
// outer dimension steps a whole number of alignments (a plan's operands'
// do; a direct launch's view may not).
template <typename T>
static __device__ __forceinline__ bool ampjit_chunks_aligned(const T* at, const AmpjitDims& stride, int rank) {
  if (!ampjit_chunk_aligned(at))
    return false;
  for (int d = 0; d + 1 < rank; ++d)
    if (stride.v[d] * (long long)sizeof(T) % (long long)alignof(AmpjitChunk<T>) != 0)
      return false;
  return true;
}

// The host build of this source (the tests' CUDA emulation) stops where the
// device would fault on a misaligned access.
template <typename T> static __device__ __forceinline__ void ampjit_check_chunk_aligned(const T* at) {
#if !defined(__CUDA_ARCH__)
  if (!ampjit_chunk_aligned(at))
    __builtin_trap();
#endif
}

// One chunk's bytes in whole accesses; both ends aligned as AmpjitChunk<T>.
template <typename T> static __device__ __forceinline__ void ampjit_copy_chunk(void* to, const void* from) {
  if constexpr (sizeof(AmpjitChunk<T>) == 8) {
    *static_cast<uint2*>(to) = *static_cast<const uint2*>(from);
  } else {
#pragma unroll
    for (int q = 0; q < int(sizeof(AmpjitChunk<T>) / 16); ++q)
      static_cast<uint4*>(to)[q] = static_cast<const uint4*>(from)[q];
  }
}

template <typename T> static __device__ __forceinline__ AmpjitChunk<T> ampjit_load_chunk(const T* from) {
  ampjit_check_chunk_aligned(from);
  AmpjitChunk<T> chunk;
  ampjit_copy_chunk<T>(&chunk, from);
  return chunk;
}

// A broadcast operand's one element, in every lane.
template <typename T> static __device__ __forceinline__ AmpjitChunk<T> ampjit_splat_chunk(T value) {
  AmpjitChunk<T> chunk;
#pragma unroll
  for (int lane = 0; lane < AMPJIT_CHUNK; ++lane)
    chunk.v[lane] = value;
  return chunk;
}

template <typename T> static __device__ __forceinline__ void ampjit_store_chunk(T* to, const AmpjitChunk<T>& chunk) {
  ampjit_check_chunk_aligned(to);
  ampjit_copy_chunk<T>(to, &chunk);
}

template <typename T> static __device__ __forceinline__ T ampjit_gelu(T x) {
  return T(0.5) * x * (T(1) + ampjit_erf(x * T(AMPJIT_SQRT_HALF)));
}

template <typename T> static __device__ __forceinline__ T ampjit_gelu_tanh(T x) {
  T inner = T(AMPJIT_GELU_BETA) * (x + T(AMPJIT_GELU_KAPPA) * x * x * x);
  return T(0.5) * x * (T(1) + ampjit_tanh(inner));
}

template <typename T> static __device__ __forceinline__ T ampjit_gelu_grad(T dy, T x) {
  T cdf = T(0.5) * (T(1) + ampjit_erf(x * T(AMPJIT_SQRT_HALF)));
  T pdf = ampjit_exp(T(-0.5) * x * x) * T(AMPJIT_INV_SQRT_2PI);
  return dy * (cdf + x * pdf);
}

// As PyTorch's GeluBackward with approximate='tanh'.
template <typename T> static __device__ __forceinline__ T ampjit_gelu_tanh_grad(T dy, T x) {
  T xSquared = x * x;
  T inner = T(AMPJIT_GELU_BETA) * (x + T(AMPJIT_GELU_KAPPA) * xSquared * x);
  T tanhInner = ampjit_tanh(inner);
  T left = T(0.5) * x;
  T right = T(1) + tanhInner;
  T leftDerivative = T(0.5) * right;
  T tanhDerivative = T(1) - tanhInner * tanhInner;
  T innerDerivative = T(AMPJIT_GELU_BETA) * (T(1) + T(3) * T(AMPJIT_GELU_KAPPA) * xSquared);
  T rightDerivative = left * tanhDerivative * innerDerivative;
  return dy * (leftDerivative + rightDerivative);
}

)";
  return text;
}

std::string reg(uint32_t index) {
  // Appending, not "r" + to_string(...): GCC 12 warns falsely (-Wrestrict) on the latter.
  std::string name = "r";
  name += std::to_string(index);
  return name;
}

/// The right-hand side of an arithmetic instruction (unary, binary) before
/// rounding to its dtype.
std::string arithmetic(const FusedInstruction& instruction) {
  bool isDouble = registerClassOf(instruction.type) == RegisterClass::Double;
  std::string zero = isDouble ? "0.0" : "0.0f", one = isDouble ? "1.0" : "1.0f";
  std::string a = reg(instruction.operands[0]), b = reg(instruction.operands[1]);
  switch (instruction.op) {
  case ElementwiseOp::Neg: return "-" + a;
  // `v < 0 ? 0 : v` keeps NaN, as PyTorch's relu does.
  case ElementwiseOp::Relu: return "(" + a + " < " + zero + " ? " + zero + " : " + a + ")";
  case ElementwiseOp::Tanh: return "ampjit_tanh(" + a + ")";
  case ElementwiseOp::Sigmoid: return one + " / (" + one + " + ampjit_exp(-" + a + "))";
  case ElementwiseOp::Exp: return "ampjit_exp(" + a + ")";
  case ElementwiseOp::Log: return "ampjit_log(" + a + ")";
  case ElementwiseOp::Sqrt: return "ampjit_sqrt(" + a + ")";
  // 1 / sqrt, not rsqrt: the CPU divides, and rsqrt is not correctly rounded.
  case ElementwiseOp::Rsqrt: return one + " / ampjit_sqrt(" + a + ")";
  case ElementwiseOp::Gelu: return "ampjit_gelu(" + a + ")";
  case ElementwiseOp::GeluTanh: return "ampjit_gelu_tanh(" + a + ")";
  case ElementwiseOp::Pow:
    return "ampjit_pow(" + a + ", " +
           (isDouble ? doubleLiteral(instruction.scalar) : floatLiteral(float(instruction.scalar))) + ")";
  case ElementwiseOp::Add: return a + " + " + b;
  case ElementwiseOp::Sub: return a + " - " + b;
  case ElementwiseOp::Mul: return a + " * " + b;
  case ElementwiseOp::Div: return a + " / " + b;
  case ElementwiseOp::ReluGrad: return "(" + b + " > " + zero + " ? " + a + " : " + zero + ")";
  case ElementwiseOp::GeluGrad: return "ampjit_gelu_grad(" + a + ", " + b + ")";
  case ElementwiseOp::GeluTanhGrad: return "ampjit_gelu_tanh_grad(" + a + ", " + b + ")";
  default: return "";
  }
}

const char* comparisonOperator(ElementwiseOp op) {
  switch (op) {
  case ElementwiseOp::CmpEq: return "==";
  case ElementwiseOp::CmpNe: return "!=";
  case ElementwiseOp::CmpLt: return "<";
  case ElementwiseOp::CmpLe: return "<=";
  case ElementwiseOp::CmpGt: return ">";
  case ElementwiseOp::CmpGe: return ">=";
  default: return nullptr;
  }
}

/// Convert as the CPU evaluator's convert(): float registers narrow once from
/// the exact float, doubles and integers round once from double (an i64 to
/// f32 goes through double, as the CPU's does), integers truncate.
std::string conversion(DType to, DType from, const std::string& value) {
  RegisterClass toClass = registerClassOf(to), fromClass = registerClassOf(from);
  if (toClass == RegisterClass::Integer) {
    if (to == DType::I1)
      return "(" + value + (fromClass == RegisterClass::Single    ? " != 0.0f"
                            : fromClass == RegisterClass::Double ? " != 0.0"
                                                                  : " != 0") +
             " ? 1LL : 0LL)";
    if (fromClass == RegisterClass::Integer)
      return value;
    return "ampjit_truncate_i64((double)" + value + ")";
  }
  if (toClass == RegisterClass::Double)
    return "(double)" + value;
  if (fromClass == RegisterClass::Single)
    return roundedTo(to, value);
  std::string asDouble = fromClass == RegisterClass::Double ? value : "(double)" + value;
  switch (to) {
  case DType::F16: return "ampjit_f16_from_double(" + asDouble + ")";
  case DType::BF16: return "ampjit_bf16_from_double(" + asDouble + ")";
  default: return "(float)" + asDouble;
  }
}

/// A register value widened from a loaded element.
std::string loadExpression(DType dtype, const std::string& element) {
  switch (dtype) {
  case DType::F16: return "__half2float(" + element + ")";
  case DType::BF16: return "__bfloat162float(" + element + ")";
  case DType::I1: return "(long long)" + element;
  default: return element;
  }
}

std::string storeExpression(DType dtype, const std::string& value) {
  switch (dtype) {
  case DType::F16: return "__float2half_rn(" + value + ")";
  case DType::BF16: return "__float2bfloat16_rn(" + value + ")";
  case DType::I1: return "(unsigned char)(" + value + " != 0 ? 1 : 0)";
  default: return value;
  }
}

std::string instructionComment(const FusedInstruction& instruction, uint32_t index) {
  std::string text = "// " + reg(index) + ": " + std::string(elementwiseOpName(instruction.op)) + " " +
                     std::string(dtypeName(instruction.type));
  if (instruction.op == ElementwiseOp::Load)
    return text + " in" + std::to_string(instruction.operands[0]);
  int arity = elementwiseOpArity(instruction.op);
  for (int k = 0; k < arity; ++k)
    text += (k ? ", " : " ") + reg(instruction.operands[k]);
  return text;
}

constexpr std::string_view kNamePlaceholder = "AMPJIT_KERNEL_NAME";

/// The kernel's declaration up to its opening brace (KernelSource.h gives
/// the parameters): inputs with their strides, then `outputTypes`, then for
/// a column-summed kernel the f32 sums and the row count.
std::string kernelSignature(const std::vector<DType>& inputTypes, const std::vector<DType>& outputTypes,
                            bool columnSummed) {
  std::string text = "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kElementwiseBlockSize) + ")\n";
  text += std::string(kNamePlaceholder) + "(long long count, int rank, AmpjitDims dims";
  for (size_t k = 0; k < inputTypes.size(); ++k)
    text += ",\n    const " + std::string(deviceElementTypeName(inputTypes[k])) + "* in" + std::to_string(k) +
            ", AmpjitDims stride" + std::to_string(k);
  for (size_t k = 0; k < outputTypes.size(); ++k)
    text += ",\n    " + std::string(deviceElementTypeName(outputTypes[k])) + "* out" + std::to_string(k);
  if (columnSummed)
    text += ",\n    float* column_sums, long long rows";
  return text + ") {\n";
}

/// Statements defining `offset<k>`, input k's element for flat output index
/// `i`, each line indented by `indent`.
std::string offsetStatements(size_t inputCount, const std::string& indent) {
  std::string text;
  for (size_t k = 0; k < inputCount; ++k)
    text += indent + "long long offset" + std::to_string(k) + " = 0;\n";
  if (inputCount == 0)
    return text;
  // Rank 1 (every same-shape operand once dimensions are collapsed) needs
  // no division.
  text += indent + "if (rank == 1) {\n";
  for (size_t k = 0; k < inputCount; ++k)
    text += indent + "  offset" + std::to_string(k) + " = i * stride" + std::to_string(k) + ".v[0];\n";
  text += indent + "} else {\n";
  // DeviceIndexing.cuh's stridedOffset, printed: the outermost coordinate
  // is what is left of the index; the others divide in 32 bits when both
  // operands fit (64-bit division is a software routine on the GPU).
  text += indent + "  long long rest = i;\n";
  text += indent + "  for (int d = rank - 1; d > 0; --d) {\n";
  text += indent + "    const long long size = dims.v[d];\n";
  text += indent + "    const long long quotient = (((unsigned long long)rest | (unsigned long long)size) >> 32) == 0\n";
  text += indent + "        ? (long long)((unsigned)rest / (unsigned)size) : rest / size;\n";
  text += indent + "    const long long coordinate = rest - quotient * size;\n";
  text += indent + "    rest = quotient;\n";
  for (size_t k = 0; k < inputCount; ++k)
    text += indent + "    offset" + std::to_string(k) + " += coordinate * stride" + std::to_string(k) + ".v[d];\n";
  text += indent + "  }\n";
  for (size_t k = 0; k < inputCount; ++k)
    text += indent + "  offset" + std::to_string(k) + " += rest * stride" + std::to_string(k) + ".v[0];\n";
  return text + indent + "}\n";
}

/// One `const` register per instruction, each commented; a Load's value is
/// `loaded(r)`.
template <typename LoadedValue>
std::string programStatements(const std::vector<FusedInstruction>& program, const std::string& indent,
                              LoadedValue loaded) {
  std::string text;
  for (uint32_t r = 0; r < program.size(); ++r) {
    const FusedInstruction& instruction = program[r];
    const auto& ops = instruction.operands;
    std::string value;
    switch (instruction.op) {
    case ElementwiseOp::Load: value = loaded(r); break;
    case ElementwiseOp::Constant: value = constantLiteral(instruction.scalar, instruction.type); break;
    case ElementwiseOp::Convert:
      value = conversion(instruction.type, program[ops[0]].type, reg(ops[0]));
      break;
    case ElementwiseOp::Select:
      value = "(" + reg(ops[0]) + " != 0 ? " + reg(ops[1]) + " : " + reg(ops[2]) + ")";
      break;
    default:
      if (const char* comparison = comparisonOperator(instruction.op))
        value = "(" + reg(ops[0]) + " " + comparison + " " + reg(ops[1]) + " ? 1LL : 0LL)";
      else if (registerClassOf(instruction.type) == RegisterClass::Single)
        value = roundedTo(instruction.type, arithmetic(instruction));
      else
        value = arithmetic(instruction);
      break;
    }
    text += indent + instructionComment(instruction, r) + "\n";
    text += indent + "const " + std::string(registerTypeName(registerClassOf(instruction.type))) + " " + reg(r) + " = " +
            value + ";\n";
  }
  return text;
}

/// The element of input `input` at `offset<input>`, widened to its register.
std::string loadedElement(const FusedInstruction& load) {
  std::string input = std::to_string(load.operands[0]);
  return loadExpression(load.type, "in" + input + "[offset" + input + "]");
}

/// A pass's loads (the grid-stride loop's, the column sums'): per Load
/// instruction an array of kSlotsPerPass registers...
std::string slotArrays(const std::vector<FusedInstruction>& program, const std::string& indent) {
  std::string text;
  for (uint32_t r = 0; r < program.size(); ++r)
    if (program[r].op == ElementwiseOp::Load)
      text += indent + registerTypeName(registerClassOf(program[r].type)) + " loaded" + std::to_string(r) + "[" +
              std::to_string(kSlotsPerPass) + "];\n";
  return text;
}

/// ...and the statements filling its `slot` with element `i`.
std::string slotLoads(const std::vector<FusedInstruction>& program, const std::string& indent) {
  std::string text;
  for (uint32_t r = 0; r < program.size(); ++r)
    if (program[r].op == ElementwiseOp::Load)
      text += indent + "loaded" + std::to_string(r) + "[slot] = " + loadedElement(program[r]) + ";\n";
  return text;
}

/// The statements storing the program's outputs: output k into `out<k>[i]`,
/// or, given `element`, into `<element(k)>`.
std::string storeStatements(const std::vector<uint32_t>& outputs, const std::vector<DType>& outputTypes,
                            const std::string& indent,
                            const std::function<std::string(size_t)>& element = nullptr) {
  std::string text;
  for (size_t k = 0; k < outputs.size(); ++k)
    text += indent + (element ? element(k) : "out" + std::to_string(k) + "[i]") + " = " +
            storeExpression(outputTypes[k], reg(outputs[k])) + ";\n";
  return text;
}

/// Whether the kernel gets chunkedLoop: where its program has no
/// transcendental function and no conversion through double. Those programs'
/// kernels are bound by memory, and chunks raise the bandwidth they reach;
/// the others' eight unrolled copies of the program took NVRTC four times as
/// long to compile (the time to first step) for kernels that compute more
/// than they move.
bool takesChunks(const std::vector<FusedInstruction>& program) {
  return std::none_of(program.begin(), program.end(), [](const FusedInstruction& instruction) {
    switch (instruction.op) {
    case ElementwiseOp::Tanh:
    case ElementwiseOp::Sigmoid:
    case ElementwiseOp::Exp:
    case ElementwiseOp::Log:
    case ElementwiseOp::Sqrt:
    case ElementwiseOp::Rsqrt:
    case ElementwiseOp::Gelu:
    case ElementwiseOp::GeluTanh:
    case ElementwiseOp::Pow:
    case ElementwiseOp::GeluGrad:
    case ElementwiseOp::GeluTanhGrad: return true;
    default: return registerClassOf(instruction.type) == RegisterClass::Double;
    }
  });
}

/// The kernel's first loop, taken where every input steps through the
/// innermost dimension contiguously or not at all, no chunk of
/// kChunkElements crosses a row, and every chunk of every operand starts
/// aligned (decided once, from the pointers and strides): each thread takes
/// whole chunks of consecutive elements, every input's chunk in whole
/// accesses (one element, splat, where broadcast) before it computes any,
/// then every output's. What is left (fewer than a chunk's elements, at the
/// end of a vector) goes to the grid-stride loop from `start`, as does the
/// whole of a kernel whose operands fail the test. The program runs once per
/// element as in the other loop, so the bits are the same.
std::string chunkedLoop(const std::vector<FusedInstruction>& program, const std::vector<uint32_t>& outputs,
                        const std::vector<DType>& inputTypes, const std::vector<DType>& outputTypes) {
  const std::string chunk = std::to_string(kChunkElements);
  std::string text = "  const int inner = rank - 1;\n";
  text += "  if (rank >= 1 && (rank == 1 || dims.v[inner] % " + chunk + " == 0)";
  for (size_t k = 0; k < inputTypes.size(); ++k) {
    const std::string input = std::to_string(k);
    text += "\n      && (stride" + input + ".v[inner] == 0 || (stride" + input +
            ".v[inner] == 1 && ampjit_chunks_aligned(in" + input + ", stride" + input + ", rank)))";
  }
  for (size_t k = 0; k < outputTypes.size(); ++k)
    text += "\n      && ampjit_chunk_aligned(out" + std::to_string(k) + ")";
  text += ") {\n";
  text += "    const long long chunks = count / " + chunk + ";\n";
  text += "    for (long long chunk = (long long)blockIdx.x * blockDim.x + threadIdx.x; chunk < chunks; "
          "chunk += step) {\n";
  text += "      const long long i = chunk * " + chunk + ";\n";
  text += offsetStatements(inputTypes.size(), "      ");
  for (uint32_t r = 0; r < program.size(); ++r) {
    if (program[r].op != ElementwiseOp::Load)
      continue;
    std::string input = std::to_string(program[r].operands[0]);
    std::string type = deviceElementTypeName(inputTypes[program[r].operands[0]]);
    text += "      const AmpjitChunk<" + type + "> chunk" + std::to_string(r) + " = stride" + input +
            ".v[inner] == 0 ? ampjit_splat_chunk(in" + input + "[offset" + input + "]) : ampjit_load_chunk(in" +
            input + " + offset" + input + ");\n";
  }
  for (size_t k = 0; k < outputTypes.size(); ++k)
    text += "      AmpjitChunk<" + std::string(deviceElementTypeName(outputTypes[k])) + "> stored" +
            std::to_string(k) + ";\n";
  text += "#pragma unroll\n";
  text += "      for (int lane = 0; lane < " + chunk + "; ++lane) {\n";
  text += programStatements(program, "        ", [&](uint32_t r) {
    return loadExpression(program[r].type, "chunk" + std::to_string(r) + ".v[lane]");
  });
  text += storeStatements(outputs, outputTypes, "        ",
                          [](size_t k) { return "stored" + std::to_string(k) + ".v[lane]"; });
  text += "      }\n";
  for (size_t k = 0; k < outputTypes.size(); ++k)
    text += "      ampjit_store_chunk(out" + std::to_string(k) + " + i, stored" + std::to_string(k) + ");\n";
  text += "    }\n";
  text += "    start = chunks * " + chunk + ";\n";
  text += "  }\n";
  return text;
}

/// The kernel, with kNamePlaceholder for its name and no step comment: the
/// text whose hash names it.
std::string kernelBody(const std::vector<FusedInstruction>& program, const std::vector<uint32_t>& outputs,
                       const std::vector<DType>& inputTypes, const std::vector<DType>& outputTypes) {
  std::string text = prelude() + kernelSignature(inputTypes, outputTypes, /*columnSummed=*/false);
  text += "  const long long step = (long long)gridDim.x * blockDim.x;\n";
  // Where the grid-stride loop begins: past what the chunks covered.
  text += "  long long start = 0;\n";
  if (takesChunks(program))
    text += chunkedLoop(program, outputs, inputTypes, outputTypes);
  // Each pass of the grid-stride loop covers kSlotsPerPass elements a grid
  // apart, their loads issued before any arithmetic or store: one element
  // at a time kept a thread's one load in flight, and casts of 64 MB ran at
  // about 1.4 TB/s on the H200. A grid of one thread per element (below
  // the grid cap) leaves the later slots out of range. Loads may precede
  // an earlier slot's store: an output shares bytes with an input only in
  // place, element for element.
  const std::string slots = std::to_string(kSlotsPerPass);
  text += "  for (long long first = start + (long long)blockIdx.x * blockDim.x + threadIdx.x; first < count; "
          "first += " + slots + " * step) {\n";
  text += slotArrays(program, "    ");
  text += "    for (int slot = 0; slot < " + slots + "; ++slot) {\n";
  text += "      const long long i = first + slot * step;\n";
  text += "      if (i >= count) break;\n";
  text += offsetStatements(inputTypes.size(), "      ");
  text += slotLoads(program, "      ");
  text += "    }\n";
  text += "    for (int slot = 0; slot < " + slots + "; ++slot) {\n";
  text += "      const long long i = first + slot * step;\n";
  text += "      if (i >= count) break;\n";
  text += programStatements(program, "      ", [](uint32_t r) { return "loaded" + std::to_string(r) + "[slot]"; });
  text += storeStatements(outputs, outputTypes, "      ");
  text += "    }\n  }\n}\n";
  return text;
}

/// emitColumnSummedKernel's kernel: program output `summed` (f32) is added
/// into the column sums instead of stored; `outputs` and `outputTypes` are
/// the others, stored.
std::string columnSummedKernelBody(const std::vector<FusedInstruction>& program, const std::vector<uint32_t>& outputs,
                                   uint32_t summed, const std::vector<DType>& inputTypes,
                                   const std::vector<DType>& outputTypes) {
  std::string text = prelude() + kernelSignature(inputTypes, outputTypes, /*columnSummed=*/true);
  const std::string columns = std::to_string(kColumnTileColumns), lanes = std::to_string(kColumnTileLanes);
  // NumericKernels.cu's reduceColumnsKernel in one part, with the program
  // in place of its loads: the same additions in the same order.
  text += "  __shared__ float lane_sums[" + lanes + "][" + columns + "];\n";
  text += "  const long long columns = count / rows;\n";
  text += "  const int column = threadIdx.x % " + columns + ", lane = threadIdx.x / " + columns + ";\n";
  // A lane's rows in passes of kSlotsPerPass, every load of a pass before
  // its arithmetic: one row at a time kept one load in flight per thread,
  // and a grid of one block per 32 columns fills a quarter of the H100's
  // thread slots (mlp9's bias gradients ran at 1.3 TB/s). The additions stay
  // in row order, so the bits are the same.
  const std::string slots = std::to_string(kSlotsPerPass);
  text += "  for (long long tile = blockIdx.x; tile * " + columns + " < columns; tile += gridDim.x) {\n";
  text += "    const long long c = tile * " + columns + " + column;\n";
  text += "    float sum = 0.0f;\n";
  text += "    if (c < columns) {\n";
  text += "      for (long long first = lane; first < rows; first += " + slots + " * " + lanes + ") {\n";
  text += slotArrays(program, "        ");
  text += "        for (int slot = 0; slot < " + slots + "; ++slot) {\n";
  text += "          const long long row = first + slot * " + lanes + ";\n";
  text += "          if (row >= rows) break;\n";
  text += "          const long long i = row * columns + c;\n";
  text += offsetStatements(inputTypes.size(), "          ");
  text += slotLoads(program, "          ");
  text += "        }\n";
  text += "        for (int slot = 0; slot < " + slots + "; ++slot) {\n";
  text += "          const long long row = first + slot * " + lanes + ";\n";
  text += "          if (row >= rows) break;\n";
  if (!outputs.empty())
    text += "          const long long i = row * columns + c;\n";
  text += programStatements(program, "          ", [](uint32_t r) { return "loaded" + std::to_string(r) + "[slot]"; });
  text += storeStatements(outputs, outputTypes, "          ");
  text += "          sum = sum + " + reg(summed) + ";\n";
  text += "        }\n";
  text += "      }\n    }\n";
  text += "    lane_sums[lane][column] = sum;\n";
  text += "    __syncthreads();\n";
  text += "    if (lane == 0 && c < columns) {\n";
  text += "      float total = lane_sums[0][column];\n";
  text += "      for (int l = 1; l < " + lanes + "; ++l)\n";
  text += "        total = total + lane_sums[l][column];\n";
  text += "      column_sums[c] = total;\n";
  text += "    }\n";
  text += "    __syncthreads();\n";
  text += "  }\n}\n";
  return text;
}

/// The step as the printed plan shows it, as comment lines.
std::string stepComment(const Plan& plan, const Step& step) {
  std::string printed;
  for (size_t index = 0; index < plan.steps.size(); ++index)
    if (&plan.steps[index] == &step) {
      printed = printStep(plan, index);
      break;
    }
  if (printed.empty())
    printed = std::string(stepKindName(step.kind)) + " step (not in the plan's step list), from " +
              (step.origin.empty() ? "an unknown origin" : step.origin);
  std::string text = "// Generated by ampjit for plan '" + plan.name + "':\n//   ";
  for (char c : printed)
    text += c == '\n' ? std::string("\n//   ") : std::string(1, c);
  return text + "\n";
}

} // namespace

const char* deviceElementTypeName(DType dtype) {
  switch (dtype) {
  case DType::F32: return "float";
  case DType::F64: return "double";
  case DType::F16: return "__half";
  case DType::BF16: return "__nv_bfloat16";
  case DType::I64: return "long long";
  case DType::I1: return "unsigned char";
  }
  return "float";
}

KernelDims ElementwiseLaunch::packedDims() const {
  KernelDims packed;
  for (size_t d = 0; d < dims.size() && d < size_t(kMaxKernelRank); ++d)
    packed.values[d] = dims[d];
  return packed;
}

KernelDims ElementwiseLaunch::packedStrides(size_t input) const {
  KernelDims packed;
  const std::vector<int64_t>& strides = inputStrides.at(input);
  for (size_t d = 0; d < strides.size() && d < size_t(kMaxKernelRank); ++d)
    packed.values[d] = strides[d];
  return packed;
}

int64_t ElementwiseLaunch::gridSize(int64_t maxBlocks) const {
  int64_t blocks = summedRows > 0
                       ? (elementCount / summedRows + kColumnTileColumns - 1) / kColumnTileColumns
                       : (elementCount + kElementwiseBlockSize - 1) / kElementwiseBlockSize;
  return std::max<int64_t>(1, std::min(blocks, std::max<int64_t>(1, maxBlocks)));
}

ElementwiseKernelArguments::ElementwiseKernelArguments(const ElementwiseLaunch& launch)
    : count_(launch.elementCount), rank_(int(launch.dims.size())), dims_(launch.packedDims()),
      groupInputs_(launch.outputSlots.empty() ? launch.inputs.size() : launch.groupInputs),
      groupOutputs_(launch.outputSlots.empty() ? launch.outputs.size() : launch.groupOutputs),
      outputSlots_(launch.outputSlots), summedRows_(launch.summedRows) {
  for (size_t k = 0; k < launch.inputs.size(); ++k)
    strides_.push_back(launch.packedStrides(k));
  if (outputSlots_.empty())
    for (size_t k = 0; k < launch.outputs.size(); ++k)
      outputSlots_.push_back(k);
}

Expected<std::span<void*>> ElementwiseKernelArguments::bind(std::span<void* const> inputs,
                                                            std::span<void* const> outputs) {
  if (inputs.size() != groupInputs_ || outputs.size() != groupOutputs_)
    return Status::error("generated elementwise kernel: " + std::to_string(inputs.size()) + " inputs and " +
                         std::to_string(outputs.size()) + " outputs for a kernel of " +
                         std::to_string(groupInputs_) + " and " + std::to_string(groupOutputs_));
  // A group's inputs start with the kernel's (the elementwise step's).
  inputPointers_.assign(inputs.begin(), inputs.begin() + std::ptrdiff_t(strides_.size()));
  outputPointers_.clear();
  for (size_t slot : outputSlots_)
    outputPointers_.push_back(outputs[slot]);
  addresses_.clear();
  addresses_.push_back(&count_);
  addresses_.push_back(&rank_);
  addresses_.push_back(&dims_);
  for (size_t k = 0; k < strides_.size(); ++k) {
    addresses_.push_back(&inputPointers_[k]);
    addresses_.push_back(&strides_[k]);
  }
  for (size_t k = 0; k < outputPointers_.size(); ++k)
    addresses_.push_back(&outputPointers_[k]);
  if (summedRows_ > 0)
    addresses_.push_back(&summedRows_);
  return std::span<void*>(addresses_);
}

Expected<ElementwiseLaunch> describeElementwiseLaunch(const std::vector<Shape>& inputShapes,
                                                      const Shape& outputShape) {
  ElementwiseLaunch launch;
  launch.elementCount = elementCount(outputShape);
  std::vector<std::vector<int64_t>> fullStrides;
  for (size_t k = 0; k < inputShapes.size(); ++k) {
    if (!broadcastsTo(inputShapes[k], outputShape))
      return Status::error("input " + std::to_string(k) + " of shape " + shapeToString(inputShapes[k]) +
                           " does not broadcast to " + shapeToString(outputShape));
    fullStrides.push_back(broadcastStrides(inputShapes[k], outputShape));
  }
  launch.inputStrides.resize(inputShapes.size());
  // Walk from the innermost dimension outwards, merging a dimension into the
  // one kept inside it when every input continues its stride there; size-1
  // dimensions contribute nothing. Built innermost-first, reversed below.
  for (size_t d = outputShape.size(); d-- > 0;) {
    if (outputShape[d] == 1)
      continue;
    bool merge = !launch.dims.empty();
    for (size_t k = 0; merge && k < inputShapes.size(); ++k)
      merge = fullStrides[k][d] == launch.inputStrides[k].back() * launch.dims.back();
    if (merge) {
      launch.dims.back() *= outputShape[d];
      continue;
    }
    launch.dims.push_back(outputShape[d]);
    for (size_t k = 0; k < inputShapes.size(); ++k)
      launch.inputStrides[k].push_back(fullStrides[k][d]);
  }
  std::reverse(launch.dims.begin(), launch.dims.end());
  for (std::vector<int64_t>& strides : launch.inputStrides)
    std::reverse(strides.begin(), strides.end());
  if (launch.dims.size() > size_t(kMaxKernelRank))
    return Status::error("the broadcast needs " + std::to_string(launch.dims.size()) +
                         " dimensions after collapsing; generated kernels index at most " +
                         std::to_string(kMaxKernelRank));
  return launch;
}

namespace {

/// A checked Elementwise or FusedElementwise step as a program: its
/// instructions, the registers it stores, its buffers' dtypes and its launch
/// geometry (inputs and outputs not yet filled in).
struct ElementwiseProgram {
  std::vector<FusedInstruction> instructions;
  std::vector<uint32_t> outputs;
  std::vector<DType> inputTypes, outputTypes;
  ElementwiseLaunch launch;
};

Expected<ElementwiseProgram> elementwiseProgram(const Plan& plan, const Step& step) {
  if (step.kind != StepKind::Elementwise && step.kind != StepKind::FusedElementwise)
    return Status::error("no elementwise kernel for a " + std::string(stepKindName(step.kind)) + " step");
  std::vector<TensorType> inputTypes, outputTypes;
  for (const auto* ids : {&step.inputs, &step.outputs})
    for (BufferId id : *ids) {
      if (id >= plan.buffers.size())
        return Status::error("step reads or writes buffer %" + std::to_string(id) + ", which the plan lacks");
      (ids == &step.inputs ? inputTypes : outputTypes).push_back(plan.buffers[id].type);
    }
  AMPJIT_RETURN_IF_ERROR(verifyStepTypes(step, inputTypes, outputTypes).withContext(
      "cannot generate a kernel for a malformed " + std::string(stepKindName(step.kind)) + " step"));

  ElementwiseProgram program;
  // An Elementwise step is the program "load each input; apply the op".
  if (step.kind == StepKind::Elementwise) {
    const ElementwiseParams& params = step.as<ElementwiseParams>();
    FusedInstruction op{params.op, outputTypes[0].dtype, {}, params.scalar};
    for (uint32_t slot = 0; slot < inputTypes.size(); ++slot) {
      program.instructions.push_back(FusedInstruction{ElementwiseOp::Load, inputTypes[slot].dtype, {slot, 0, 0}, 0.0});
      op.operands[slot] = slot;
    }
    program.instructions.push_back(op);
    program.outputs = {uint32_t(program.instructions.size() - 1)};
  } else {
    program.instructions = step.as<FusedElementwiseParams>().program;
    program.outputs = step.as<FusedElementwiseParams>().outputs;
  }

  std::vector<Shape> inputShapes;
  for (const TensorType& type : inputTypes) {
    inputShapes.push_back(type.shape);
    program.inputTypes.push_back(type.dtype);
  }
  for (const TensorType& type : outputTypes)
    program.outputTypes.push_back(type.dtype);
  Expected<ElementwiseLaunch> launch = describeElementwiseLaunch(inputShapes, outputTypes[0].shape);
  if (!launch)
    return launch.status();
  program.launch = std::move(*launch);
  return program;
}

/// Names the kernel by its body's hash; the source starts with the steps'
/// comment and a line that says what the kernel does.
ElementwiseKernel namedKernel(std::string body, const std::string& stepsComment, const std::string& description,
                              ElementwiseLaunch launch) {
  ElementwiseKernel kernel;
  kernel.name = "ampjit_elementwise_" + hex64(fnv1a64(body));
  body.replace(body.find(kNamePlaceholder), kNamePlaceholder.size(), kernel.name);
  kernel.source = stepsComment + "// Kernel " + kernel.name + ": " + description + "\n\n" + body;
  kernel.launch = std::move(launch);
  return kernel;
}

} // namespace

Expected<ElementwiseKernel> emitElementwiseKernel(const Plan& plan, const Step& step) {
  Expected<ElementwiseProgram> program = elementwiseProgram(plan, step);
  if (!program)
    return program.status();
  program->launch.inputs = step.inputs;
  program->launch.outputs = step.outputs;
  return namedKernel(kernelBody(program->instructions, program->outputs, program->inputTypes, program->outputTypes),
                     stepComment(plan, step),
                     std::string(takesChunks(program->instructions)
                                     ? "chunks of " + std::to_string(kChunkElements) +
                                           " consecutive elements in whole accesses where every operand is "
                                           "contiguous or broadcast along the innermost dimension, else "
                                     : "") +
                         "a grid-stride loop, each pass loading " +
                         std::to_string(kSlotsPerPass) + " elements a grid apart before computing them; inputs " +
                         "broadcast by per-dimension strides (0 where broadcast).",
                     std::move(program->launch));
}

Expected<ElementwiseKernel> emitColumnSummedKernel(const Plan& plan, const Step& step, const Step& sum) {
  Expected<ElementwiseProgram> program = elementwiseProgram(plan, step);
  if (!program)
    return program.status();
  auto refuse = [&](const std::string& why) {
    return Status::error("no column-summed kernel for this " + std::string(stepKindName(step.kind)) +
                         " step and the reduction after it: " + why);
  };
  if (sum.kind != StepKind::Reduction || sum.inputs.size() != 1 || sum.outputs.size() != 1 ||
      sum.computeType != DType::F32 || sum.outputs[0] >= plan.buffers.size())
    return refuse("the second step is not an f32 reduction of one tensor");
  const ReductionParams& params = sum.as<ReductionParams>();
  auto summedAt = std::find(step.outputs.begin(), step.outputs.end(), sum.inputs[0]);
  if (summedAt == step.outputs.end())
    return refuse("the reduction reads none of its outputs");
  size_t summedSlot = size_t(summedAt - step.outputs.begin());
  const Shape& shape = plan.buffers[sum.inputs[0]].type.shape;
  const TensorType& sums = plan.buffers[sum.outputs[0]].type;
  if (params.op != ReduceOp::Sum || params.axes != std::vector<int64_t>{0} || shape.size() < 2 || shape[0] == 0 ||
      plan.buffers[sum.inputs[0]].type.dtype != DType::F32 || sums.dtype != DType::F32 ||
      sums.elementCount() * shape[0] != elementCount(shape))
    return refuse("it is not an f32 sum over the first dimension of an f32 output of rank 2 or more");
  ElementwiseLaunch& launch = program->launch;
  launch.inputs = step.inputs;
  launch.summedRows = shape[0];
  launch.groupInputs = step.inputs.size() + 1;
  launch.groupOutputs = step.outputs.size() + 1;
  std::vector<uint32_t> stored;
  std::vector<DType> storedTypes;
  for (size_t k = 0; k < step.outputs.size(); ++k) {
    if (k == summedSlot)
      continue;
    stored.push_back(program->outputs[k]);
    storedTypes.push_back(program->outputTypes[k]);
    launch.outputs.push_back(step.outputs[k]);
    launch.outputSlots.push_back(k);
  }
  launch.outputs.push_back(sum.outputs[0]);
  launch.outputSlots.push_back(step.outputs.size());
  std::string body = columnSummedKernelBody(program->instructions, stored, program->outputs[summedSlot],
                                            program->inputTypes, storedTypes);
  return namedKernel(std::move(body),
                     stepComment(plan, step) + stepComment(plan, sum),
                     "output " + std::to_string(summedSlot) +
                         " summed over its " + std::to_string(shape[0]) + " rows in the launch, never stored: " +
                         "tiles of " + std::to_string(kColumnTileColumns) + " columns, " +
                         std::to_string(kColumnTileLanes) + " lanes of rows added in lane order.",
                     std::move(launch));
}

} // namespace ampjit::runtime::cuda
