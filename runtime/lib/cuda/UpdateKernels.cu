// The loss-scaler and optimizer kernels. Each mirrors its CPU reference
// (runtime/lib/cpu/Scaler.cpp, Optimizers.cpp, include/.../LossScaler.h)
// operation for operation: values are widened exactly, arithmetic runs in the
// step's compute type (f32, or f64 when any operand is f64), each stored value
// is rounded once to nearest even. The build passes --fmad=false, so no
// multiply-add is contracted, as on the CPU.
//
// Multi-tensor launches take their tensor tables by value in one kernel
// argument (under the 4 KB parameter limit; longer lists become several
// launches). Each block covers one chunk of one tensor (BlockChunks): a grid
// sized by the largest tensor, every block walking every tensor, spent its
// time on the walk for a ResNet's 161 small tensors (0.37 ms for a
// finiteness check of 50 MB on the H200).

#include "UpdateKernels.h"
#include "MultiTensor.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace ampjit::runtime::cuda::update {

namespace {

/// An f16 or bf16 element from its bits, exactly.
template <ElementType S>
__device__ float widenBits(unsigned short bits) {
  if constexpr (S == ElementType::F16)
    return __half2float(__ushort_as_half(bits));
  else
    return __bfloat162float(__ushort_as_bfloat16(bits));
}

/// An f32 value rounded once to nearest even into f16 or bf16 bits.
template <ElementType S>
__device__ unsigned narrowBits(float value) {
  if constexpr (S == ElementType::F16)
    return __half_as_ushort(__float2half_rn(value));
  else
    return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

/// Element i widened to C (float or double); exact for every dtype C holds.
template <typename C>
__device__ C loadAs(const void* data, ElementType type, int64_t i) {
  switch (type) {
  case ElementType::F32: return C(static_cast<const float*>(data)[i]);
  case ElementType::F64: return C(static_cast<const double*>(data)[i]);
  case ElementType::F16: return C(widenBits<ElementType::F16>(static_cast<const unsigned short*>(data)[i]));
  case ElementType::BF16: return C(widenBits<ElementType::BF16>(static_cast<const unsigned short*>(data)[i]));
  case ElementType::I64: return C(static_cast<const long long*>(data)[i]);
  case ElementType::I1: return static_cast<const uint8_t*>(data)[i] ? C(1) : C(0);
  }
  return C(0);
}

/// Stores a floating value rounded once to nearest even (a double goes to
/// f16/bf16 directly, never through float, as the CPU's doubleToHalf).
__device__ void storeAs(void* data, ElementType type, int64_t i, float value) {
  switch (type) {
  case ElementType::F32: static_cast<float*>(data)[i] = value; return;
  case ElementType::F64: static_cast<double*>(data)[i] = double(value); return;
  case ElementType::F16: static_cast<unsigned short*>(data)[i] = narrowBits<ElementType::F16>(value); return;
  case ElementType::BF16: static_cast<unsigned short*>(data)[i] = narrowBits<ElementType::BF16>(value); return;
  case ElementType::I64:
  case ElementType::I1: return; // update kernels store floating data only (verified plans)
  }
}

__device__ void storeAs(void* data, ElementType type, int64_t i, double value) {
  switch (type) {
  case ElementType::F32: static_cast<float*>(data)[i] = float(value); return;
  case ElementType::F64: static_cast<double*>(data)[i] = value; return;
  case ElementType::F16: static_cast<unsigned short*>(data)[i] = __half_as_ushort(__double2half(value)); return;
  case ElementType::BF16:
    static_cast<unsigned short*>(data)[i] = __bfloat16_as_ushort(__double2bfloat16(value));
    return;
  case ElementType::I64:
  case ElementType::I1: return;
  }
}

/// Whether element i is finite, from its bits (as the CPU's allFinite tests
/// them), so no compiler flag can fold the test away.
__device__ bool isFiniteAt(const void* data, ElementType type, int64_t i) {
  switch (type) {
  case ElementType::F32: return (static_cast<const uint32_t*>(data)[i] & 0x7F800000u) != 0x7F800000u;
  case ElementType::F64:
    return (static_cast<const unsigned long long*>(data)[i] & 0x7FF0000000000000ull) != 0x7FF0000000000000ull;
  case ElementType::F16: return (static_cast<const unsigned short*>(data)[i] & 0x7C00u) != 0x7C00u;
  case ElementType::BF16: return (static_cast<const unsigned short*>(data)[i] & 0x7F80u) != 0x7F80u;
  case ElementType::I64:
  case ElementType::I1: return true;
  }
  return true;
}

__host__ __device__ int elementBytes(ElementType type) {
  switch (type) {
  case ElementType::F32: return 4;
  case ElementType::F64:
  case ElementType::I64: return 8;
  case ElementType::F16:
  case ElementType::BF16: return 2;
  case ElementType::I1: return 1;
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// Loss scaler
//===----------------------------------------------------------------------===//

template <typename C>
__global__ void scaleLossKernel(const void* loss, void* scaled, ElementType type, const float* scale) {
  C value = loadAs<C>(loss, type, 0);
  value *= C(*scale);
  storeAs(scaled, type, 0, value);
}

/// A 16-byte load or store of data the step touches once (a gradient the
/// check or the update reads, a master weight the update rewrites), with
/// the evict-first hint where `evictFirst`: the ~800 MB that mlp9's update
/// streams through L2 beside a GEMM then do not push out the GEMM's operand
/// tiles (AMPJIT_CUDA_CACHE_HINTS, DeviceStep.h).
template <typename Vector> __device__ Vector loadOnce(const Vector* at, bool evictFirst) {
  return evictFirst ? __ldcs(at) : *at;
}
template <typename Vector> __device__ void storeOnce(Vector* at, Vector value, bool evictFirst) {
  if (evictFirst)
    __stcs(at, value);
  else
    *at = value;
}

constexpr int kMaxFiniteTensors = 128;
struct FiniteTable {
  const void* data[kMaxFiniteTensors];
  int64_t count[kMaxFiniteTensors];
  ElementType type[kMaxFiniteTensors];
  BlockChunks<kMaxFiniteTensors> chunks;
  int32_t size;
  bool evictFirst;
};
/// A finiteness-check block reads 16 bytes per load, kVectorsPerThread
/// loads per thread: 16 KB of one tensor.
constexpr int kVectorsPerThread = 4;
constexpr int64_t kFiniteChunkBytes = int64_t(kThreads) * kVectorsPerThread * 16;
static_assert(sizeof(FiniteTable) < 4096, "kernel arguments must stay under 4 KB");

/// Whether any element in 16 bytes of `type` data is an inf or a NaN, from
/// the bits of each 32-bit word (little-endian: an f64's exponent is in its
/// second word, an f16 or bf16 pair's second element in the high half).
__device__ bool anyNonFiniteIn16Bytes(uint4 bytes, ElementType type) {
  uint32_t words[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
  bool bad = false;
  switch (type) {
  case ElementType::F32:
    for (uint32_t word : words)
      bad |= (word & 0x7F800000u) == 0x7F800000u;
    break;
  case ElementType::F64:
    bad = (words[1] & 0x7FF00000u) == 0x7FF00000u || (words[3] & 0x7FF00000u) == 0x7FF00000u;
    break;
  case ElementType::F16:
    for (uint32_t word : words)
      bad |= (word & 0x7C00u) == 0x7C00u || (word & 0x7C000000u) == 0x7C000000u;
    break;
  case ElementType::BF16:
    for (uint32_t word : words)
      bad |= (word & 0x7F80u) == 0x7F80u || (word & 0x7F800000u) == 0x7F800000u;
    break;
  case ElementType::I64:
  case ElementType::I1: break;
  }
  return bad;
}

/// log2 of elementBytes for the floating types (shifts, not 64-bit
/// divisions, which are a software routine on the GPU).
__device__ int elementShift(ElementType type) {
  switch (type) {
  case ElementType::F64: return 3;
  case ElementType::F32: return 2;
  default: return 1;
  }
}

/// Each block checks one 16 KB chunk of one tensor: 16 bytes per load where
/// the data is 16-byte aligned (every plan buffer is 64-byte aligned), the
/// bytes after the tensor's last whole vector (and unaligned data) element
/// by element. No thread stops at a bad element: loads that do not wait on
/// each other keep enough bytes in flight for the memory's bandwidth (one
/// 2-byte load per branch reached about a quarter of it on an H200).
__global__ void allFiniteKernel(FiniteTable table, uint8_t* flag, ScalarQuotient quotient) {
  if (quotient.quotient != nullptr && blockIdx.x == 0 && threadIdx.x == 0)
    *quotient.quotient = *quotient.numerator / *quotient.dividend;
  BlockChunk at = blockChunk(table.chunks, table.size);
  const void* data = table.data[at.tensor];
  ElementType type = table.type[at.tensor];
  int shift = elementShift(type);
  int64_t tensorBytes = table.count[at.tensor] << shift;
  int64_t begin = at.chunk * kFiniteChunkBytes;
  int64_t end = min(begin + kFiniteChunkBytes, tensorBytes);
  bool bad = false;
  int64_t elementwiseFrom = begin;
  if (reinterpret_cast<uintptr_t>(data) % 16 == 0) {
    const uint4* vectors = static_cast<const uint4*>(data);
    int64_t vectorEnd = end / 16;
    for (int k = 0; k < kVectorsPerThread; ++k) {
      int64_t v = begin / 16 + threadIdx.x + int64_t(k) * kThreads;
      if (v < vectorEnd)
        bad |= anyNonFiniteIn16Bytes(loadOnce(vectors + v, table.evictFirst), type);
    }
    elementwiseFrom = vectorEnd * 16;
  }
  for (int64_t i = (elementwiseFrom >> shift) + threadIdx.x; i < (end >> shift); i += kThreads)
    bad |= !isFiniteAt(data, type, i);
  // Every writer stores the same 0: the race is benign.
  if (bad)
    *flag = 0;
}

constexpr int kMaxUnscaleTensors = 96;
struct UnscaleTable {
  const void* in[kMaxUnscaleTensors];
  void* out[kMaxUnscaleTensors];
  int64_t count[kMaxUnscaleTensors];
  ElementType type[kMaxUnscaleTensors];
  BlockChunks<kMaxUnscaleTensors> chunks;
  int32_t size;
};
static_assert(sizeof(UnscaleTable) < 4096, "kernel arguments must stay under 4 KB");

template <typename C>
__global__ void unscaleAndCheckKernel(UnscaleTable table, const float* invScale, uint8_t* flag) {
  C factor = C(*invScale);
  bool finite = true;
  BlockChunk at = blockChunk(table.chunks, table.size);
  int t = at.tensor;
  int64_t begin = at.chunk * kChunkElements + threadIdx.x;
  for (int k = 0; k < kElementsPerThread; ++k) {
    int64_t i = begin + int64_t(k) * kThreads;
    if (i < table.count[t]) {
      // The input is checked before it is overwritten (in place), and the
      // stored output too, in case an inv_scale above 1 overflows it.
      bool inputFinite = isFiniteAt(table.in[t], table.type[t], i);
      C value = loadAs<C>(table.in[t], table.type[t], i) * factor;
      storeAs(table.out[t], table.type[t], i, value);
      bool outputFinite = isFiniteAt(table.out[t], table.type[t], i);
      finite = finite && inputFinite && outputFinite;
    }
  }
  if (!finite)
    *flag = 0;
}

__device__ void updateScale(const UpdateScaleConfig& config, const UpdateScalePointers& p) {
  // Everything is read before anything is written: outputs may be inputs.
  float scale = *p.scale;
  int64_t good = *p.goodSteps, bad = *p.badSteps, skipped = *p.skippedSteps;
  bool finite = *p.allFinite != 0;
  if (finite) {
    bad = 0;
    good += 1;
    if (good >= config.growthInterval) {
      double product = double(scale) * config.growthFactor;
      // std::min(product, maxScale): keeps `product` unless maxScale compares below.
      float grown = float(config.maxScale < product ? config.maxScale : product);
      if (isfinite(grown))
        scale = grown;
      good = 0;
    }
  } else {
    good = 0;
    skipped += 1;
    bad += 1;
    if (bad >= config.backoffInterval) {
      double reduced = double(scale) * config.backoffFactor;
      // std::max(reduced, minScale): keeps `reduced` unless it compares below.
      scale = float(reduced < config.minScale ? config.minScale : reduced);
      bad = 0;
    }
  }
  *p.newScale = scale;
  *p.newGoodSteps = good;
  *p.newBadSteps = bad;
  *p.newSkippedSteps = skipped;
}

__global__ void updateScaleKernel(UpdateScaleConfig config, UpdateScalePointers p) { updateScale(config, p); }

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

constexpr int kMaxOptimizerTensors = 32;
struct OptimizerTable {
  OptimizerTensor tensors[kMaxOptimizerTensors];
  BlockChunks<kMaxOptimizerTensors> chunks;
  int32_t size;
};
struct OptimizerArguments {
  OptimizerConfig config;
  OptimizerScalars scalars;
  OptimizerTable table;
  bool updatesScale;
  ScaleUpdate scaleUpdate;
};
static_assert(sizeof(OptimizerArguments) < 4096, "kernel arguments must stay under 4 KB");

/// The gradient element unscaled and with maximize applied (the CPU's
/// GradientReader): f64 gradients unscale in f64, all others in f32 as read.
/// A gradient that is not f64, read as f32: unscaled in f32, maximize
/// applied. The 16-byte SGD and Adam paths and readGradient use it.
__device__ float unscaledGradient(const OptimizerConfig& config, float read, bool hasInvScale, float invScale) {
  if (hasInvScale)
    read *= invScale;
  return config.maximize ? -read : read;
}

/// OptimizerScalars::gradientsFinite: cleared where `read` is inf or NaN.
template <typename T>
__device__ void noteNonFinite(uint8_t* gradientsFinite, T read) {
  if (gradientsFinite != nullptr && !isfinite(read))
    *gradientsFinite = 0;
}

template <typename T>
__device__ T readGradient(const OptimizerConfig& config, const OptimizerTensor& x, int64_t i, bool hasInvScale,
                          float invScale, uint8_t* gradientsFinite) {
  if (x.gradType == ElementType::F64) {
    double read = loadAs<double>(x.grad, x.gradType, i);
    noteNonFinite(gradientsFinite, read);
    T value = T(read * (hasInvScale ? double(invScale) : 1.0));
    return config.maximize ? -value : value;
  }
  float read = loadAs<float>(x.grad, x.gradType, i);
  noteNonFinite(gradientsFinite, read);
  return T(unscaledGradient(config, read, hasInvScale, invScale));
}

__device__ void copyElement(const void* from, void* to, int bytes, int64_t i) {
  switch (bytes) {
  case 2: static_cast<unsigned short*>(to)[i] = static_cast<const unsigned short*>(from)[i]; return;
  case 4: static_cast<uint32_t*>(to)[i] = static_cast<const uint32_t*>(from)[i]; return;
  case 8: static_cast<unsigned long long*>(to)[i] = static_cast<const unsigned long long*>(from)[i]; return;
  default: static_cast<uint8_t*>(to)[i] = static_cast<const uint8_t*>(from)[i]; return;
  }
}

/// A skipped step: each present new value that is another buffer gets its
/// input's bits.
__device__ void carryOver(const void* from, void* to, int bytes, int64_t i) {
  if (to != nullptr && to != from)
    copyElement(from, to, bytes, i);
}

/// torch.maximum: NaN when either is NaN.
template <typename T>
__device__ T maximumPropagatingNan(T a, T b) {
  if (isnan(a))
    return a;
  return b > a || isnan(b) ? b : a;
}

/// One element's SGD in T from its parameter p, gradient g (unscaled,
/// maximize applied) and momentum buffer b (read only after the first step):
/// the new parameter, and the new buffer in `buffer` when there is momentum.
/// Both SGD paths call it, so they give the same bits.
template <typename T>
__device__ T sgdUpdated(const OptimizerConfig& c, T p, T g, T b, T lr, bool firstStep, T& buffer) {
  T gradient = g;
  if (c.weightDecay != 0.0)
    gradient = gradient + T(c.weightDecay) * p;
  if (c.momentum != 0.0) {
    T momentum = T(c.momentum);
    // PyTorch starts the buffer as the gradient itself on the first step.
    buffer = firstStep ? gradient : momentum * b + T(1.0 - c.dampening) * gradient;
    gradient = c.nesterov ? gradient + momentum * buffer : buffer;
  }
  return p - lr * gradient;
}

/// SGD for elements first, first + stride, ... (kElementsPerThread of
/// them): every read is issued before any write, so a thread keeps that
/// many elements' loads in flight. A parameter updated in place is safe:
/// each element's read precedes its own write, and elements differ.
template <typename T>
__device__ void sgdElements(const OptimizerConfig& c, const OptimizerTensor& x, int64_t first, int64_t stride, T lr,
                            bool firstStep, bool hasInvScale, float invScale, uint8_t* gradientsFinite) {
  bool readsBuffer = c.momentum != 0.0 && !firstStep;
  T p[kElementsPerThread], g[kElementsPerThread], b[kElementsPerThread];
  // Constant trip counts: nvcc unrolls both loops, so the loads come first.
  for (int k = 0; k < kElementsPerThread; ++k) {
    int64_t i = first + k * stride;
    if (i >= x.count)
      continue;
    p[k] = loadAs<T>(x.param, c.paramType, i);
    g[k] = readGradient<T>(c, x, i, hasInvScale, invScale, gradientsFinite);
    b[k] = readsBuffer ? loadAs<T>(x.state0, c.paramType, i) : T(0);
  }
  for (int k = 0; k < kElementsPerThread; ++k) {
    int64_t i = first + k * stride;
    if (i >= x.count)
      continue;
    T buffer = T(0);
    T updated = sgdUpdated<T>(c, p[k], g[k], b[k], lr, firstStep, buffer);
    if (c.momentum != 0.0)
      storeAs(x.newState0, c.paramType, i, buffer);
    storeAs(x.newParam, c.paramType, i, updated);
    if (x.copy != nullptr)
      storeAs(x.newCopy, c.copyType, i, updated);
  }
}

template <typename T>
struct AdamScalars {
  T stepSize, biasCorrection2Sqrt, decay;
};

/// The step's Adam scalars in double, as PyTorch computes them from Python
/// floats, then in T.
template <typename T>
__device__ AdamScalars<T> adamScalars(const OptimizerConfig& c, const OptimizerScalars& scalars) {
  double lr = *scalars.lr;
  double step = double(*scalars.step + 1);
  double biasCorrection1 = 1.0 - pow(c.beta1, step);
  double biasCorrection2 = 1.0 - pow(c.beta2, step);
  return {T(lr / biasCorrection1), T(sqrt(biasCorrection2)), T(1.0 - lr * c.weightDecay)};
}

/// One element's Adam in T from its parameter p, gradient g (unscaled,
/// maximize applied), exp_avg m, exp_avg_sq v and, with AMSGrad,
/// max_exp_avg_sq vMax: each is updated in place. Both Adam paths call it,
/// so they give the same bits.
template <typename T>
__device__ void adamUpdate(const OptimizerConfig& c, const AdamScalars<T>& s, bool amsgrad, T& p, T g, T& m, T& v,
                           T& vMax) {
  if (c.weightDecay != 0.0) {
    if (c.decoupledWeightDecay)
      p = p * s.decay;
    else
      g = g + T(c.weightDecay) * p;
  }
  m = m + T(1.0 - c.beta1) * (g - m); // lerp(m, g, 1 - beta1)
  v = v * T(c.beta2) + T(1.0 - c.beta2) * (g * g);
  T denominatorSource = v;
  if (amsgrad) {
    vMax = maximumPropagatingNan(vMax, v);
    denominatorSource = vMax;
  }
  T denominator = sqrt(denominatorSource) / s.biasCorrection2Sqrt + T(c.eps);
  p = p - s.stepSize * (m / denominator);
}

template <typename T>
__device__ void adamElement(const OptimizerConfig& c, const OptimizerTensor& x, int64_t i, const AdamScalars<T>& s,
                            bool hasInvScale, float invScale, uint8_t* gradientsFinite) {
  bool amsgrad = x.state2 != nullptr;
  T p = loadAs<T>(x.param, c.paramType, i);
  T g = readGradient<T>(c, x, i, hasInvScale, invScale, gradientsFinite);
  T m = loadAs<T>(x.state0, c.paramType, i);
  T v = loadAs<T>(x.state1, c.paramType, i);
  T vMax = amsgrad ? loadAs<T>(x.state2, c.paramType, i) : T(0);
  adamUpdate<T>(c, s, amsgrad, p, g, m, v, vMax);
  if (amsgrad)
    storeAs(x.newState2, c.paramType, i, vMax);
  storeAs(x.newState0, c.paramType, i, m);
  storeAs(x.newState1, c.paramType, i, v);
  storeAs(x.newParam, c.paramType, i, p);
  if (x.copy != nullptr)
    storeAs(x.newCopy, c.copyType, i, p);
}

template <typename T>
__device__ void optimizerChunk(const OptimizerArguments& args) {
  const OptimizerConfig& c = args.config;
  const OptimizerScalars& scalars = args.scalars;
  BlockChunk at = blockChunk(args.table.chunks, args.table.size);
  const OptimizerTensor& x = args.table.tensors[at.tensor];
  // Thread x of the block takes elements first, first + kThreads, ...
  int64_t first = at.chunk * kChunkElements + threadIdx.x;
  if (scalars.predicate != nullptr && *scalars.predicate == 0) {
    int paramBytes = elementBytes(c.paramType), copyBytes = elementBytes(c.copyType);
    for (int k = 0; k < kElementsPerThread; ++k) {
      int64_t i = first + int64_t(k) * kThreads;
      if (i < x.count) {
        carryOver(x.param, x.newParam, paramBytes, i);
        if (x.state0 != nullptr)
          carryOver(x.state0, x.newState0, paramBytes, i);
        if (x.state1 != nullptr)
          carryOver(x.state1, x.newState1, paramBytes, i);
        if (x.state2 != nullptr)
          carryOver(x.state2, x.newState2, paramBytes, i);
        if (x.copy != nullptr)
          carryOver(x.copy, x.newCopy, copyBytes, i);
      }
    }
    return;
  }
  bool hasInvScale = scalars.invScale != nullptr;
  float invScale = hasInvScale ? *scalars.invScale : 1.0f;
  float lrValue = *scalars.lr;
  if (c.adam) {
    AdamScalars<T> s = adamScalars<T>(c, scalars);
    for (int k = 0; k < kElementsPerThread; ++k) {
      int64_t i = first + int64_t(k) * kThreads;
      if (i < x.count)
        adamElement<T>(c, x, i, s, hasInvScale, invScale, scalars.gradientsFinite);
    }
    return;
  }
  bool firstStep = scalars.step != nullptr && *scalars.step == 0;
  sgdElements<T>(c, x, first, kThreads, T(lrValue), firstStep, hasInvScale, invScale, scalars.gradientsFinite);
}

template <typename T>
__global__ void optimizerKernel(OptimizerArguments args) {
  optimizerChunk<T>(args);
  if (args.updatesScale && blockIdx.x == 0 && threadIdx.x == 0)
    updateScale(args.scaleUpdate.config, args.scaleUpdate.pointers);
}

//===----------------------------------------------------------------------===//
// SGD and Adam 16 bytes at a time (optimizerLaunchVectorizes)
//===----------------------------------------------------------------------===//

/// Each thread takes kUpdateVectorRounds runs of kUpdateVectorWidth consecutive
/// elements (16 bytes of f16, 32 of f32), a block kUpdateVectorChunkElements.
/// One element per load, even four of them in flight per thread, reached
/// about half of an H100's bandwidth on mlp9's update (0.5 ms for 805 MB).
constexpr int kUpdateVectorWidth = 8;
constexpr int kUpdateVectorRounds = 2;
constexpr int64_t kUpdateVectorChunkElements = int64_t(kThreads) * kUpdateVectorWidth * kUpdateVectorRounds;

/// Elements i .. i + 7 of S (f32, f16 or bf16) widened to f32; i is a
/// multiple of 8 and `data` 16-byte aligned.
template <ElementType S>
__device__ void loadVector(const void* data, int64_t i, float (&out)[kUpdateVectorWidth], bool evictFirst) {
  if constexpr (S == ElementType::F32) {
    const float4* vectors = reinterpret_cast<const float4*>(static_cast<const float*>(data) + i);
    float4 low = loadOnce(vectors, evictFirst), high = loadOnce(vectors + 1, evictFirst);
    float values[kUpdateVectorWidth] = {low.x, low.y, low.z, low.w, high.x, high.y, high.z, high.w};
    for (int k = 0; k < kUpdateVectorWidth; ++k)
      out[k] = values[k];
  } else {
    uint4 bits = loadOnce(reinterpret_cast<const uint4*>(static_cast<const unsigned short*>(data) + i), evictFirst);
    unsigned words[4] = {bits.x, bits.y, bits.z, bits.w};
    // Little-endian: the lower half of a word is the earlier element.
    for (int k = 0; k < 4; ++k) {
      out[2 * k] = widenBits<S>((unsigned short)(words[k] & 0xFFFFu));
      out[2 * k + 1] = widenBits<S>((unsigned short)(words[k] >> 16));
    }
  }
}

/// Stores `values` as elements i .. i + 7 of S, each rounded once to
/// nearest even, as storeAs does.
template <ElementType S>
__device__ void storeVector(void* data, int64_t i, const float (&values)[kUpdateVectorWidth], bool evictFirst) {
  if constexpr (S == ElementType::F32) {
    float4* vectors = reinterpret_cast<float4*>(static_cast<float*>(data) + i);
    storeOnce(vectors, make_float4(values[0], values[1], values[2], values[3]), evictFirst);
    storeOnce(vectors + 1, make_float4(values[4], values[5], values[6], values[7]), evictFirst);
  } else {
    unsigned words[4];
    for (int k = 0; k < 4; ++k)
      words[k] = narrowBits<S>(values[2 * k]) | (narrowBits<S>(values[2 * k + 1]) << 16);
    storeOnce(reinterpret_cast<uint4*>(static_cast<unsigned short*>(data) + i),
              make_uint4(words[0], words[1], words[2], words[3]), evictFirst);
  }
}

/// Elements i .. i + 7 of x's f32 parameter and of its gradient (of type G,
/// as read: not yet unscaled), noting a non-finite gradient element in
/// `gradientsFinite` where it is given.
template <ElementType G>
__device__ void loadParamAndGradient(const OptimizerConfig& c, const OptimizerTensor& x, int64_t i,
                                     float (&p)[kUpdateVectorWidth], float (&g)[kUpdateVectorWidth],
                                     uint8_t* gradientsFinite) {
  loadVector<ElementType::F32>(x.param, i, p, c.evictFirst);
  loadVector<G>(x.grad, i, g, c.evictFirst);
  if (gradientsFinite != nullptr)
    for (int k = 0; k < kUpdateVectorWidth; ++k)
      noteNonFinite(gradientsFinite, g[k]);
}

/// SGD over elements [begin, end) of x in f32, gradients of type G, the
/// copy (when HasCopy) of type C: whole vectors first, every load of a
/// thread before its stores; the elements after the last whole vector
/// (only at the tensor's end) one by one.
template <ElementType G, bool HasCopy, ElementType C>
__device__ void sgdVectorChunk(const OptimizerConfig& c, const OptimizerTensor& x, int64_t begin, int64_t end,
                               float lr, bool firstStep, bool hasInvScale, float invScale, uint8_t* gradientsFinite) {
  bool readsBuffer = c.momentum != 0.0 && !firstStep;
  float p[kUpdateVectorRounds][kUpdateVectorWidth], g[kUpdateVectorRounds][kUpdateVectorWidth],
      b[kUpdateVectorRounds][kUpdateVectorWidth];
  for (int r = 0; r < kUpdateVectorRounds; ++r) {
    int64_t i = begin + (int64_t(r) * kThreads + threadIdx.x) * kUpdateVectorWidth;
    if (i + kUpdateVectorWidth > end)
      continue;
    loadParamAndGradient<G>(c, x, i, p[r], g[r], gradientsFinite);
    if (readsBuffer)
      loadVector<ElementType::F32>(x.state0, i, b[r], c.evictFirst);
    else
      for (int k = 0; k < kUpdateVectorWidth; ++k)
        b[r][k] = 0.0f;
  }
  for (int r = 0; r < kUpdateVectorRounds; ++r) {
    int64_t i = begin + (int64_t(r) * kThreads + threadIdx.x) * kUpdateVectorWidth;
    if (i + kUpdateVectorWidth > end)
      continue;
    for (int k = 0; k < kUpdateVectorWidth; ++k) {
      float gradient = unscaledGradient(c, g[r][k], hasInvScale, invScale);
      float buffer = 0.0f;
      p[r][k] = sgdUpdated<float>(c, p[r][k], gradient, b[r][k], lr, firstStep, buffer);
      b[r][k] = buffer;
    }
    storeVector<ElementType::F32>(x.newParam, i, p[r], c.evictFirst);
    if (c.momentum != 0.0)
      storeVector<ElementType::F32>(x.newState0, i, b[r], c.evictFirst);
    // The copy is the next forward GEMM's operand: cached as usual.
    if constexpr (HasCopy)
      storeVector<C>(x.newCopy, i, p[r], false);
  }
  int64_t tail = begin + (end - begin) / kUpdateVectorWidth * kUpdateVectorWidth;
  if (tail < end)
    sgdElements<float>(c, x, tail + threadIdx.x, kThreads, lr, firstStep, hasInvScale, invScale, gradientsFinite);
}

/// A skipped step over elements [begin, end) of a vectorized launch's tensor
/// (f32 parameter and state, f16 or bf16 copy): each new value that is
/// another buffer gets its input's bits.
__device__ void carryOverChunk(const OptimizerTensor& x, int64_t begin, int64_t end) {
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    carryOver(x.param, x.newParam, 4, i);
    if (x.state0 != nullptr)
      carryOver(x.state0, x.newState0, 4, i);
    if (x.state1 != nullptr)
      carryOver(x.state1, x.newState1, 4, i);
    if (x.state2 != nullptr)
      carryOver(x.state2, x.newState2, 4, i);
    if (x.copy != nullptr)
      carryOver(x.copy, x.newCopy, 2, i);
  }
}

/// Adam over elements [begin, end) of x in f32 (AMSGrad where x has
/// state2), gradients of type G, the copy (when HasCopy) of type C: as
/// sgdVectorChunk, whole vectors with every load of a thread before its
/// stores, then the tail element by element. Everything but the copy is read
/// or written once per step, so it carries the evict-first hint.
template <ElementType G, bool HasCopy, ElementType C>
__device__ void adamVectorChunk(const OptimizerConfig& c, const OptimizerTensor& x, int64_t begin, int64_t end,
                                const AdamScalars<float>& s, bool hasInvScale, float invScale,
                                uint8_t* gradientsFinite) {
  bool amsgrad = x.state2 != nullptr;
  float p[kUpdateVectorRounds][kUpdateVectorWidth], g[kUpdateVectorRounds][kUpdateVectorWidth],
      m[kUpdateVectorRounds][kUpdateVectorWidth], v[kUpdateVectorRounds][kUpdateVectorWidth],
      vMax[kUpdateVectorRounds][kUpdateVectorWidth];
#pragma unroll
  for (int r = 0; r < kUpdateVectorRounds; ++r) {
    int64_t i = begin + (int64_t(r) * kThreads + threadIdx.x) * kUpdateVectorWidth;
    if (i + kUpdateVectorWidth > end)
      continue;
    loadParamAndGradient<G>(c, x, i, p[r], g[r], gradientsFinite);
    loadVector<ElementType::F32>(x.state0, i, m[r], c.evictFirst);
    loadVector<ElementType::F32>(x.state1, i, v[r], c.evictFirst);
    if (amsgrad)
      loadVector<ElementType::F32>(x.state2, i, vMax[r], c.evictFirst);
    else
      for (int k = 0; k < kUpdateVectorWidth; ++k)
        vMax[r][k] = 0.0f;
  }
#pragma unroll
  for (int r = 0; r < kUpdateVectorRounds; ++r) {
    int64_t i = begin + (int64_t(r) * kThreads + threadIdx.x) * kUpdateVectorWidth;
    if (i + kUpdateVectorWidth > end)
      continue;
#pragma unroll
    for (int k = 0; k < kUpdateVectorWidth; ++k) {
      float gradient = unscaledGradient(c, g[r][k], hasInvScale, invScale);
      adamUpdate<float>(c, s, amsgrad, p[r][k], gradient, m[r][k], v[r][k], vMax[r][k]);
    }
    storeVector<ElementType::F32>(x.newState0, i, m[r], c.evictFirst);
    storeVector<ElementType::F32>(x.newState1, i, v[r], c.evictFirst);
    if (amsgrad)
      storeVector<ElementType::F32>(x.newState2, i, vMax[r], c.evictFirst);
    storeVector<ElementType::F32>(x.newParam, i, p[r], c.evictFirst);
    // The copy is the next forward GEMM's operand: cached as usual.
    if constexpr (HasCopy)
      storeVector<C>(x.newCopy, i, p[r], false);
  }
  for (int64_t i = begin + (end - begin) / kUpdateVectorWidth * kUpdateVectorWidth + threadIdx.x; i < end;
       i += kThreads)
    adamElement<float>(c, x, i, s, hasInvScale, invScale, gradientsFinite);
}

/// What vectorUpdateKernel needs of an optimizer: its scalars, read once per
/// block, and its chunk of one tensor for each gradient and copy type.
struct SgdVectorUpdate {
  float lr;
  bool firstStep;
  __device__ SgdVectorUpdate(const OptimizerConfig&, const OptimizerScalars& scalars)
      : lr(*scalars.lr), firstStep(scalars.step != nullptr && *scalars.step == 0) {}
  template <ElementType G, bool HasCopy, ElementType C>
  __device__ void chunk(const OptimizerConfig& c, const OptimizerTensor& x, int64_t begin, int64_t end,
                        bool hasInvScale, float invScale, uint8_t* gradientsFinite) const {
    sgdVectorChunk<G, HasCopy, C>(c, x, begin, end, lr, firstStep, hasInvScale, invScale, gradientsFinite);
  }
};

struct AdamVectorUpdate {
  AdamScalars<float> s;
  __device__ AdamVectorUpdate(const OptimizerConfig& c, const OptimizerScalars& scalars)
      : s(adamScalars<float>(c, scalars)) {}
  template <ElementType G, bool HasCopy, ElementType C>
  __device__ void chunk(const OptimizerConfig& c, const OptimizerTensor& x, int64_t begin, int64_t end,
                        bool hasInvScale, float invScale, uint8_t* gradientsFinite) const {
    adamVectorChunk<G, HasCopy, C>(c, x, begin, end, s, hasInvScale, invScale, gradientsFinite);
  }
};

template <typename Update, ElementType G>
__device__ void vectorChunkOf(const Update& update, const OptimizerConfig& c, const OptimizerTensor& x,
                              int64_t begin, int64_t end, bool hasInvScale, float invScale,
                              uint8_t* gradientsFinite) {
  if (x.copy == nullptr)
    update.template chunk<G, false, ElementType::F16>(c, x, begin, end, hasInvScale, invScale, gradientsFinite);
  else if (c.copyType == ElementType::F16)
    update.template chunk<G, true, ElementType::F16>(c, x, begin, end, hasInvScale, invScale, gradientsFinite);
  else
    update.template chunk<G, true, ElementType::BF16>(c, x, begin, end, hasInvScale, invScale, gradientsFinite);
}

/// One block's chunk of kUpdateVectorChunkElements of one tensor, by
/// Update (SgdVectorUpdate or AdamVectorUpdate).
template <typename Update>
__global__ void vectorUpdateKernel(OptimizerArguments args) {
  const OptimizerConfig& c = args.config;
  const OptimizerScalars& scalars = args.scalars;
  BlockChunk at = blockChunk(args.table.chunks, args.table.size);
  const OptimizerTensor& x = args.table.tensors[at.tensor];
  int64_t begin = at.chunk * kUpdateVectorChunkElements;
  int64_t end = begin + kUpdateVectorChunkElements < x.count ? begin + kUpdateVectorChunkElements : x.count;
  if (scalars.predicate != nullptr && *scalars.predicate == 0) {
    carryOverChunk(x, begin, end);
  } else {
    bool hasInvScale = scalars.invScale != nullptr;
    float invScale = hasInvScale ? *scalars.invScale : 1.0f;
    Update update(c, scalars);
    switch (x.gradType) {
    case ElementType::F16:
      vectorChunkOf<Update, ElementType::F16>(update, c, x, begin, end, hasInvScale, invScale,
                                              scalars.gradientsFinite);
      break;
    case ElementType::BF16:
      vectorChunkOf<Update, ElementType::BF16>(update, c, x, begin, end, hasInvScale, invScale,
                                               scalars.gradientsFinite);
      break;
    default:
      vectorChunkOf<Update, ElementType::F32>(update, c, x, begin, end, hasInvScale, invScale,
                                              scalars.gradientsFinite);
      break;
    }
  }
  if (args.updatesScale && blockIdx.x == 0 && threadIdx.x == 0)
    updateScale(args.scaleUpdate.config, args.scaleUpdate.pointers);
}

using ConvertTable = TensorTable<ConvertTensor, 128>;
static_assert(sizeof(ConvertTable) < 4096, "kernel arguments must stay under 4 KB");

__global__ void convertKernel(ElementType from, ElementType to, ConvertTable table) {
  BlockChunk at = blockChunk(table.chunks, table.size);
  const ConvertTensor& x = table.tensors[at.tensor];
  int64_t begin = at.chunk * kChunkElements + threadIdx.x;
  // Every load before any store (constant trip counts: both loops unroll),
  // so a thread has kElementsPerThread loads in flight.
  float values[kElementsPerThread];
  for (int k = 0; k < kElementsPerThread; ++k) {
    int64_t i = begin + int64_t(k) * kThreads;
    values[k] = i < x.count ? loadAs<float>(x.from, from, i) : 0.0f;
  }
  for (int k = 0; k < kElementsPerThread; ++k) {
    int64_t i = begin + int64_t(k) * kThreads;
    if (i < x.count)
      storeAs(x.to, to, i, values[k]);
  }
}

} // namespace

cudaError_t launchConvert(ElementType from, ElementType to, const ConvertTensor* tensors, std::size_t tensorCount,
                          cudaStream_t stream) {
  auto launch = [&](const ConvertTable& table) {
    unsigned blocks = unsigned(table.chunks.blocks(table.size));
    convertKernel<<<blocks, kThreads, 0, stream>>>(from, to, table);
    return cudaGetLastError();
  };
  return launchInTables<ConvertTable>(tensors, tensorCount, kChunkElements, launch);
}

namespace {

/// Up to 64 entries passed by value in a kernel's arguments.
template <typename Entry> struct EntryTable {
  static constexpr int kCapacity = 64;
  Entry entries[kCapacity];
  int size;
};
using RestoreTable = EntryTable<RestoreTensor>;
static_assert(sizeof(RestoreTable) < 4096, "kernel arguments must stay under 4 KB");
constexpr int kRestoreTableCapacity = RestoreTable::kCapacity;

__global__ void restoreWhereSkippedKernel(const uint8_t* predicate, RestoreTable table) {
  if (*predicate != 0)
    return;
  int64_t thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int t = 0; t < table.size; ++t) {
    const RestoreTensor& tensor = table.entries[t];
    // Plan buffers and pool allocations are 64-byte aligned: whole 16-byte
    // words first, then the tail byte by byte.
    int64_t words = tensor.bytes / 16;
    const uint4* from = static_cast<const uint4*>(tensor.current);
    uint4* to = static_cast<uint4*>(tensor.next);
    for (int64_t i = thread; i < words; i += stride)
      to[i] = from[i];
    const unsigned char* fromBytes = static_cast<const unsigned char*>(tensor.current);
    unsigned char* toBytes = static_cast<unsigned char*>(tensor.next);
    for (int64_t i = words * 16 + thread; i < tensor.bytes; i += stride)
      toBytes[i] = fromBytes[i];
  }
}

} // namespace

cudaError_t launchRestoreWhereSkipped(const uint8_t* predicate, const RestoreTensor* tensors,
                                      std::size_t tensorCount, cudaStream_t stream) {
  RestoreTable table{};
  int64_t largest = 0;
  auto launch = [&]() -> cudaError_t {
    if (table.size == 0)
      return cudaSuccess;
    unsigned blocks = blocksFor((largest + 15) / 16);
    restoreWhereSkippedKernel<<<blocks, kThreads, 0, stream>>>(predicate, table);
    table = RestoreTable{};
    largest = 0;
    return cudaGetLastError();
  };
  for (std::size_t k = 0; k < tensorCount; ++k) {
    if (tensors[k].bytes <= 0)
      continue;
    if (table.size == kRestoreTableCapacity)
      if (cudaError_t error = launch(); error != cudaSuccess)
        return error;
    table.entries[table.size++] = tensors[k];
    largest = largest > tensors[k].bytes ? largest : tensors[k].bytes;
  }
  return launch();
}

namespace {

using FoldTable = EntryTable<FoldedUpdateScalars>;
constexpr int kFoldTableCapacity = FoldTable::kCapacity;
static_assert(sizeof(FoldTable) < 4096, "kernel arguments must stay under 4 KB");

__global__ void foldedUpdateScalarsKernel(FoldTable table) {
  int t = int(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= table.size)
    return;
  const FoldedUpdateScalars& fold = table.entries[t];
  // The in-line update multiplies the gradient by inv_scale, then by lr.
  float step = *fold.lr * (fold.invScale != nullptr ? *fold.invScale : 1.0f);
  fold.alphaBeta[0] = fold.maximize ? step : -step;
  fold.alphaBeta[1] = 1.0f;
}

/// launchCheckFoldedUpdate's kernel, grid-stride: whole vectors of 8
/// elements, kUpdateVectorRounds of them a thread at a time with every load
/// issued before any store (as the SGD kernel), then the tail element by
/// element.
template <ElementType C>
__global__ void checkFoldedUpdateKernel(const float* param, void* copy, int64_t count, uint8_t* flag,
                                        bool evictFirst) {
  int64_t thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t vectors = count / kUpdateVectorWidth;
  bool finite = true;
  for (int64_t first = thread; first < vectors; first += stride * kUpdateVectorRounds) {
    float values[kUpdateVectorRounds][kUpdateVectorWidth];
    for (int r = 0; r < kUpdateVectorRounds; ++r)
      if (int64_t v = first + r * stride; v < vectors)
        loadVector<ElementType::F32>(param, v * kUpdateVectorWidth, values[r], evictFirst);
    for (int r = 0; r < kUpdateVectorRounds; ++r) {
      int64_t v = first + r * stride;
      if (v >= vectors)
        continue;
      for (int k = 0; k < kUpdateVectorWidth; ++k)
        finite = finite && isfinite(values[r][k]);
      if (copy != nullptr)
        storeVector<C>(copy, v * kUpdateVectorWidth, values[r], evictFirst);
    }
  }
  for (int64_t i = vectors * kUpdateVectorWidth + thread; i < count; i += stride) {
    float value = param[i];
    finite = finite && isfinite(value);
    if (copy != nullptr)
      storeAs(copy, C, i, value);
  }
  if (!finite)
    *flag = 0;
}

} // namespace

cudaError_t launchFoldedUpdateScalars(const FoldedUpdateScalars* folds, std::size_t count, cudaStream_t stream) {
  for (std::size_t first = 0; first < count; first += kFoldTableCapacity) {
    FoldTable table{};
    for (std::size_t k = first; k < count && table.size < kFoldTableCapacity; ++k)
      table.entries[table.size++] = folds[k];
    foldedUpdateScalarsKernel<<<1, kFoldTableCapacity, 0, stream>>>(table);
    if (cudaError_t error = cudaGetLastError(); error != cudaSuccess)
      return error;
  }
  return cudaSuccess;
}

cudaError_t launchCheckFoldedUpdate(const float* param, void* copy, ElementType copyType, int64_t count,
                                    uint8_t* flag, bool evictFirst, int64_t maxBlocks, cudaStream_t stream) {
  if (count <= 0)
    return cudaSuccess;
  if ((copy != nullptr && copyType != ElementType::F16 && copyType != ElementType::BF16) || maxBlocks < 0)
    return cudaErrorInvalidValue;
  int64_t rounds = (count / kUpdateVectorWidth + kUpdateVectorRounds - 1) / kUpdateVectorRounds;
  unsigned blocks = blocksFor(rounds > 0 ? rounds : 1);
  if (maxBlocks > 0 && blocks > maxBlocks)
    blocks = unsigned(maxBlocks);
  if (copyType == ElementType::BF16)
    checkFoldedUpdateKernel<ElementType::BF16><<<blocks, kThreads, 0, stream>>>(param, copy, count, flag, evictFirst);
  else
    checkFoldedUpdateKernel<ElementType::F16><<<blocks, kThreads, 0, stream>>>(param, copy, count, flag, evictFirst);
  return cudaGetLastError();
}

cudaError_t launchScaleLoss(const void* loss, void* scaled, ElementType type, const float* scale, bool computeF64,
                            cudaStream_t stream) {
  if (computeF64)
    scaleLossKernel<double><<<1, 1, 0, stream>>>(loss, scaled, type, scale);
  else
    scaleLossKernel<float><<<1, 1, 0, stream>>>(loss, scaled, type, scale);
  return cudaGetLastError();
}

namespace {

__global__ void scalarQuotientKernel(ScalarQuotient quotient) {
  *quotient.quotient = *quotient.numerator / *quotient.dividend;
}

/// launchFiniteCheck's launches, the last also computing `quotient` (when
/// its pointers are set); with nothing to check, the quotient alone.
cudaError_t checkFinite(const FiniteCheckTensor* tensors, std::size_t tensorCount, uint8_t* flag, bool evictFirst,
                        ScalarQuotient quotient, cudaStream_t stream) {
  cudaError_t error = cudaSuccess;
  bool quotientDone = quotient.quotient == nullptr;
  FiniteTable table{};
  table.evictFirst = evictFirst;
  for (std::size_t k = 0; k < tensorCount; ++k) {
    ElementType type = tensors[k].type;
    // Empty tensors have nothing to check, and integers are finite.
    if (tensors[k].count > 0 && type != ElementType::I64 && type != ElementType::I1) {
      if (!table.chunks.add(table.size, tensors[k].count * elementBytes(type), kFiniteChunkBytes))
        return cudaErrorInvalidValue;
      table.data[table.size] = tensors[k].data;
      table.count[table.size] = tensors[k].count;
      table.type[table.size] = type;
      ++table.size;
    }
    bool last = k + 1 == tensorCount;
    if (table.size == kMaxFiniteTensors || (last && table.size > 0)) {
      ScalarQuotient launchQuotient = last ? quotient : ScalarQuotient{};
      quotientDone = quotientDone || last;
      allFiniteKernel<<<table.chunks.blocks(table.size), kThreads, 0, stream>>>(table, flag, launchQuotient);
      if ((error = cudaGetLastError()) != cudaSuccess)
        return error;
      table.size = 0;
    }
  }
  if (!quotientDone) {
    scalarQuotientKernel<<<1, 1, 0, stream>>>(quotient);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

} // namespace

cudaError_t launchAllFinite(const FiniteCheckTensor* tensors, std::size_t tensorCount, uint8_t* flag, bool evictFirst,
                            cudaStream_t stream, const ScalarQuotient* quotient) {
  cudaError_t error = cudaMemsetAsync(flag, 1, 1, stream);
  if (error != cudaSuccess)
    return error;
  return checkFinite(tensors, tensorCount, flag, evictFirst, quotient ? *quotient : ScalarQuotient{}, stream);
}

cudaError_t launchFiniteCheck(const FiniteCheckTensor* tensors, std::size_t tensorCount, uint8_t* flag,
                              bool evictFirst, cudaStream_t stream) {
  return checkFinite(tensors, tensorCount, flag, evictFirst, ScalarQuotient{}, stream);
}

cudaError_t launchUnscaleAndCheck(const float* invScale, const UnscaleTensor* tensors, std::size_t tensorCount,
                                  uint8_t* flag, bool computeF64, cudaStream_t stream) {
  cudaError_t error = cudaMemsetAsync(flag, 1, 1, stream);
  if (error != cudaSuccess)
    return error;
  UnscaleTable table{};
  for (std::size_t k = 0; k < tensorCount; ++k) {
    if (tensors[k].count > 0) {
      if (!table.chunks.add(table.size, tensors[k].count, kChunkElements))
        return cudaErrorInvalidValue;
      table.in[table.size] = tensors[k].in;
      table.out[table.size] = tensors[k].out;
      table.count[table.size] = tensors[k].count;
      table.type[table.size] = tensors[k].type;
      ++table.size;
    }
    bool last = k + 1 == tensorCount;
    if (table.size == kMaxUnscaleTensors || (last && table.size > 0)) {
      unsigned blocks = unsigned(table.chunks.blocks(table.size));
      if (computeF64)
        unscaleAndCheckKernel<double><<<blocks, kThreads, 0, stream>>>(table, invScale, flag);
      else
        unscaleAndCheckKernel<float><<<blocks, kThreads, 0, stream>>>(table, invScale, flag);
      if ((error = cudaGetLastError()) != cudaSuccess)
        return error;
      table.size = 0;
    }
  }
  return cudaSuccess;
}

cudaError_t launchUpdateScale(const UpdateScaleConfig& config, const UpdateScalePointers& pointers,
                              cudaStream_t stream) {
  updateScaleKernel<<<1, 1, 0, stream>>>(config, pointers);
  return cudaGetLastError();
}

bool optimizerLaunchVectorizes(const OptimizerConfig& config, const OptimizerTensor* tensors,
                               std::size_t tensorCount) {
  if (!config.vectorize || config.computeF64 || config.paramType != ElementType::F32)
    return false;
  auto aligned = [](const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; };
  auto narrow = [](ElementType type) { return type == ElementType::F16 || type == ElementType::BF16; };
  for (std::size_t k = 0; k < tensorCount; ++k) {
    const OptimizerTensor& x = tensors[k];
    if (x.count == 0)
      continue;
    if (x.gradType != ElementType::F32 && !narrow(x.gradType))
      return false;
    if (x.copy != nullptr && !narrow(config.copyType))
      return false;
    // Absent buffers are nullptr, which is aligned.
    for (const void* pointer :
         {x.param, x.grad, x.state0, x.state1, x.state2, x.copy, static_cast<const void*>(x.newParam),
          static_cast<const void*>(x.newState0), static_cast<const void*>(x.newState1),
          static_cast<const void*>(x.newState2), static_cast<const void*>(x.newCopy)})
      if (!aligned(pointer))
        return false;
  }
  return true;
}

cudaError_t launchOptimizer(const OptimizerConfig& config, const OptimizerScalars& scalars,
                            const OptimizerTensor* tensors, std::size_t tensorCount, cudaStream_t stream,
                            const ScaleUpdate* scaleUpdate) {
  OptimizerArguments args{};
  args.config = config;
  args.scalars = scalars;
  bool vectorized = optimizerLaunchVectorizes(config, tensors, tensorCount);
  int64_t chunkElements = vectorized ? kUpdateVectorChunkElements : kChunkElements;
  bool scaleUpdated = scaleUpdate == nullptr;
  for (std::size_t k = 0; k < tensorCount; ++k) {
    if (tensors[k].count > 0) {
      if (!args.table.chunks.add(args.table.size, tensors[k].count, chunkElements))
        return cudaErrorInvalidValue;
      args.table.tensors[args.table.size++] = tensors[k];
    }
    bool last = k + 1 == tensorCount;
    if (args.table.size == kMaxOptimizerTensors || (last && args.table.size > 0)) {
      if (last && scaleUpdate != nullptr) {
        args.updatesScale = true;
        args.scaleUpdate = *scaleUpdate;
        scaleUpdated = true;
      }
      unsigned blocks = unsigned(args.table.chunks.blocks(args.table.size));
      if (vectorized && config.adam)
        vectorUpdateKernel<AdamVectorUpdate><<<blocks, kThreads, 0, stream>>>(args);
      else if (vectorized)
        vectorUpdateKernel<SgdVectorUpdate><<<blocks, kThreads, 0, stream>>>(args);
      else if (config.computeF64)
        optimizerKernel<double><<<blocks, kThreads, 0, stream>>>(args);
      else
        optimizerKernel<float><<<blocks, kThreads, 0, stream>>>(args);
      cudaError_t error = cudaGetLastError();
      if (error != cudaSuccess)
        return error;
      args.table.size = 0;
    }
  }
  // Every tensor empty: no launch carried the scaler's update.
  if (!scaleUpdated)
    return launchUpdateScale(scaleUpdate->config, scaleUpdate->pointers, stream);
  return cudaSuccess;
}

} // namespace ampjit::runtime::cuda::update
