// EmulatedCudnn.h: cuDNN's documented legacy contract, on the host.

#include "EmulatedCudnn.h"

#include "CudaEmulation.h"
#include "EmulatedElements.h"
#include "EmulatedStreams.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <vector>

namespace ampjit::emulation {

namespace {

// Never destroyed: the process-wide CUDA backend is released by an exit
// handler that runs after thread-local destructors, and its teardown still
// reports here.
thread_local std::string& refusal = *new std::string;
thread_local std::string& errorText = *new std::string;
std::atomic<int64_t> convolutions{0}, batchNorms{0}, fusedBatchNorms{0};

cudnnStatus_t refuse(cudnnStatus_t status, std::string why) {
  refusal = std::move(why);
  return status;
}

cudnnStatus_t succeed() {
  refusal.clear();
  return CUDNN_STATUS_SUCCESS;
}

#define AMPJIT_CUDNN_MODEL_CHECK(expr)                                                                             \
  do {                                                                                                             \
    if (cudnnStatus_t checked_ = (expr); checked_ != CUDNN_STATUS_SUCCESS)                                       \
      return checked_;                                                                                             \
  } while (false)

//===----------------------------------------------------------------------===//
// Handles and descriptors
//===----------------------------------------------------------------------===//

/// cudnnHandle_t points at one of these; the live ones are kept so a
/// destroyed or made-up handle is refused rather than read.
struct Handle {
  cudaStream_t stream = nullptr;
};
std::mutex handlesMutex;
std::set<const Handle*> liveHandles;

Handle* handleOf(cudnnHandle_t handle) {
  std::lock_guard<std::mutex> lock(handlesMutex);
  auto* model = reinterpret_cast<Handle*>(handle);
  return liveHandles.count(model) != 0 ? model : nullptr;
}

cudnnStatus_t refuseUnknownHandle() {
  return refuse(CUDNN_STATUS_BAD_PARAM, "a handle cudnnCreate did not make, or one already destroyed");
}

cudnnStatus_t checkHandle(cudnnHandle_t handle) {
  return handleOf(handle) != nullptr ? succeed() : refuseUnknownHandle();
}

#define AMPJIT_CUDNN_MODEL_HANDLE(name, handle)                                                                    \
  Handle* name = handleOf(handle);                                                                                 \
  if (name == nullptr)                                                                                             \
    return refuseUnknownHandle();

struct TensorDesc {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t nStride = 0, cStride = 0, hStride = 0, wStride = 0;

  int64_t offset(int64_t in, int64_t ic, int64_t ih, int64_t iw) const {
    return in * nStride + ic * cStride + ih * hStride + iw * wStride;
  }
  int64_t count() const { return n * c * h * w; }
  bool sameShape(const TensorDesc& other) const {
    return n == other.n && c == other.c && h == other.h && w == other.w;
  }
  std::string describe() const {
    return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w) +
           (format == CUDNN_TENSOR_NHWC ? " NHWC" : " NCHW");
  }
};

struct FilterDesc {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int64_t k = 0, c = 0, h = 0, w = 0;

  int64_t offset(int64_t ik, int64_t ic, int64_t ir, int64_t is) const {
    if (format == CUDNN_TENSOR_NHWC)
      return ((ik * h + ir) * w + is) * c + ic;
    return ((ik * c + ic) * h + ir) * w + is;
  }
  int64_t count() const { return k * c * h * w; }
};

struct ConvolutionDesc {
  bool set = false;
  int64_t padH = 0, padW = 0, strideH = 1, strideW = 1, dilationH = 1, dilationW = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t computeType = CUDNN_DATA_FLOAT;
  int64_t groups = 1;
  cudnnMathType_t mathType = CUDNN_DEFAULT_MATH;
};

struct ActivationDesc {
  bool set = false;
  cudnnActivationMode_t mode = CUDNN_ACTIVATION_RELU;
  cudnnNanPropagation_t nan = CUDNN_PROPAGATE_NAN;
};

TensorDesc* unwrap(cudnnTensorDescriptor_t d) { return reinterpret_cast<TensorDesc*>(d); }
FilterDesc* unwrap(cudnnFilterDescriptor_t d) { return reinterpret_cast<FilterDesc*>(d); }
ConvolutionDesc* unwrap(cudnnConvolutionDescriptor_t d) { return reinterpret_cast<ConvolutionDesc*>(d); }
ActivationDesc* unwrap(cudnnActivationDescriptor_t d) { return reinterpret_cast<ActivationDesc*>(d); }

std::string typeName(cudnnDataType_t type) {
  switch (type) {
  case CUDNN_DATA_HALF: return "CUDNN_DATA_HALF";
  case CUDNN_DATA_BFLOAT16: return "CUDNN_DATA_BFLOAT16";
  case CUDNN_DATA_FLOAT: return "CUDNN_DATA_FLOAT";
  case CUDNN_DATA_DOUBLE: return "CUDNN_DATA_DOUBLE";
  default: return "cudnnDataType_t " + std::to_string(int(type));
  }
}

bool storageOf(cudnnDataType_t type, ElementStorage& storage) {
  switch (type) {
  case CUDNN_DATA_HALF: storage = ElementStorage::F16; return true;
  case CUDNN_DATA_BFLOAT16: storage = ElementStorage::BF16; return true;
  case CUDNN_DATA_FLOAT: storage = ElementStorage::F32; return true;
  case CUDNN_DATA_DOUBLE: storage = ElementStorage::F64; return true;
  default: return false;
  }
}

ElementStorage storageOf(cudnnDataType_t type) {
  ElementStorage storage = ElementStorage::F32;
  storageOf(type, storage);
  return storage;
}

std::size_t bytesOf(const TensorDesc& t) { return std::size_t(t.count()) * bytesOf(storageOf(t.type)); }
std::size_t bytesOf(const FilterDesc& f) { return std::size_t(f.count()) * bytesOf(storageOf(f.type)); }

/// A tensor or filter descriptor's required state for use in a call.
cudnnStatus_t checkSet(const void* descriptor, bool set, const char* what) {
  if (descriptor == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": a null descriptor");
  if (!set)
    return refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": a descriptor that was never set");
  return succeed();
}

/// Operand memory must be the device's, all `bytes` the call touches in one
/// allocation (a kernel running past its end would corrupt its neighbour);
/// blend factors must be host memory.
cudnnStatus_t checkDevice(const void* pointer, const char* what, std::size_t bytes, bool nullable = false) {
  if (pointer == nullptr)
    return nullable ? succeed() : refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + " is null");
  if (!isDeviceMemory(pointer))
    return refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + " is not device memory");
  if (std::size_t available = deviceBytesFrom(pointer); available < bytes)
    return refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": the call touches " + std::to_string(bytes) +
                                              " bytes, but its allocation ends " + std::to_string(available) +
                                              " bytes on");
  return succeed();
}

/// A pair of blend factors (out = alpha * result + beta * out), read at the
/// call from host memory: double for double data and float otherwise
/// (cuDNN's scaling-parameter rule).
cudnnStatus_t takeBlends(const void* alpha, const void* beta, cudnnDataType_t dataType, double& alphaValue,
                         double& betaValue, const char* alphaName = "alpha", const char* betaName = "beta") {
  for (auto [pointer, what] : {std::pair{alpha, alphaName}, std::pair{beta, betaName}}) {
    if (pointer == nullptr)
      return refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + " is null");
    if (isDeviceMemory(pointer))
      return refuse(CUDNN_STATUS_BAD_PARAM,
                    std::string(what) + " is in device memory; cuDNN reads blend factors on the host");
  }
  auto read = [&](const void* pointer) {
    return dataType == CUDNN_DATA_DOUBLE ? *static_cast<const double*>(pointer)
                                         : double(*static_cast<const float*>(pointer));
  };
  alphaValue = read(alpha);
  betaValue = read(beta);
  return succeed();
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

int64_t outputExtent(int64_t input, int64_t pad, int64_t filter, int64_t dilation, int64_t stride) {
  return 1 + (input + 2 * pad - ((filter - 1) * dilation + 1)) / stride;
}

/// The documented configurations: x, w and y of one type; f16 data computes
/// in f16 or f32, bf16 and f32 in f32, f64 in f64.
bool supportedConfiguration(cudnnDataType_t data, cudnnDataType_t compute) {
  switch (data) {
  case CUDNN_DATA_HALF: return compute == CUDNN_DATA_HALF || compute == CUDNN_DATA_FLOAT;
  case CUDNN_DATA_BFLOAT16:
  case CUDNN_DATA_FLOAT: return compute == CUDNN_DATA_FLOAT;
  case CUDNN_DATA_DOUBLE: return compute == CUDNN_DATA_DOUBLE;
  default: return false;
  }
}

/// The convolution a call describes: x [n, c, h, w] with filters
/// [k, c / groups, r, s] into y [n, k, outH, outW].
struct Convolution {
  TensorDesc x, y;
  FilterDesc w;
  ConvolutionDesc conv;
  int64_t groupIn() const { return w.c; }
  int64_t groupOut() const { return w.k / conv.groups; }
};

cudnnStatus_t checkConvolution(const TensorDesc* x, const FilterDesc* w, const ConvolutionDesc* conv,
                               const TensorDesc* y, Convolution& problem) {
  AMPJIT_CUDNN_MODEL_CHECK(checkSet(x, x && x->set, "the input tensor"));
  AMPJIT_CUDNN_MODEL_CHECK(checkSet(w, w && w->set, "the filter"));
  AMPJIT_CUDNN_MODEL_CHECK(checkSet(conv, conv && conv->set, "the convolution"));
  AMPJIT_CUDNN_MODEL_CHECK(checkSet(y, y && y->set, "the output tensor"));
  if (conv->mode != CUDNN_CROSS_CORRELATION)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the emulation models CUDNN_CROSS_CORRELATION only");
  if (x->type != w->type || x->type != y->type)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "x is " + typeName(x->type) + ", w " + typeName(w->type) + ", y " +
                                                  typeName(y->type) + ": they must be one type");
  if (!supportedConfiguration(x->type, conv->computeType))
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "no configuration computes " + typeName(x->type) + " data in " +
                                                  typeName(conv->computeType));
  if (w->c * conv->groups != x->c || w->k % conv->groups != 0)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a filter of " + std::to_string(w->k) + " x " + std::to_string(w->c) +
                                              " channels in " + std::to_string(conv->groups) + " groups for an input of " +
                                              std::to_string(x->c) + " channels");
  int64_t outH = outputExtent(x->h, conv->padH, w->h, conv->dilationH, conv->strideH);
  int64_t outW = outputExtent(x->w, conv->padW, w->w, conv->dilationW, conv->strideW);
  if (y->n != x->n || y->c != w->k || y->h != outH || y->w != outW)
    return refuse(CUDNN_STATUS_BAD_PARAM, "an output tensor of " + y->describe() + " where the convolution gives " +
                                              std::to_string(x->n) + "x" + std::to_string(w->k) + "x" +
                                              std::to_string(outH) + "x" + std::to_string(outW));
  problem = Convolution{*x, *y, *w, *conv};
  return succeed();
}

enum class ConvolutionKind { Forward, BackwardData, BackwardFilter };

/// What the model implements of each direction, in its heuristic's order:
/// an algorithm and the workspace it needs. The arithmetic is the same for
/// all (one summation order); the workspaces differ, so a step that sizes
/// its workspace for one algorithm and runs another is caught.
struct ModelAlgorithm {
  int algo;
  int64_t workspaceBytes;
};

std::vector<ModelAlgorithm> modelAlgorithms(ConvolutionKind kind, const Convolution& p) {
  int64_t element = int64_t(bytesOf(storageOf(p.x.type)));
  int64_t taps = p.w.c * p.w.h * p.w.w, outputs = p.y.h * p.y.w;
  switch (kind) {
  case ConvolutionKind::Forward:
    return {{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, 4 * taps + 256},
            {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, 0},
            {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, element * taps * outputs}};
  case ConvolutionKind::BackwardData:
    return {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, 4 * p.w.k * p.w.h * p.w.w + 256},
            {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, 0}};
  default:
    return {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, 4 * p.w.count() + 256},
            {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, 0},
            {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, 8 * p.w.count() + 256}};
  }
}

int algorithmCount(ConvolutionKind kind) {
  switch (kind) {
  case ConvolutionKind::Forward: return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  case ConvolutionKind::BackwardData: return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  default: return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
}

bool nondeterministic(ConvolutionKind kind, int algo) {
  return (kind == ConvolutionKind::BackwardData && algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) ||
         (kind == ConvolutionKind::BackwardFilter &&
          (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3));
}

cudnnStatus_t workspaceOf(ConvolutionKind kind, const Convolution& p, int algo, int64_t& bytes) {
  for (const ModelAlgorithm& modelled : modelAlgorithms(kind, p))
    if (modelled.algo == algo) {
      bytes = modelled.workspaceBytes;
      return succeed();
    }
  return refuse(CUDNN_STATUS_NOT_SUPPORTED, "algorithm " + std::to_string(algo) +
                                                " is not one the emulation implements (its heuristic never returns it)");
}

template <typename Perf>
cudnnStatus_t heuristic(ConvolutionKind kind, const Convolution& p, int requested, int* returned, Perf* results) {
  if (returned == nullptr || results == nullptr || requested < 1)
    return refuse(CUDNN_STATUS_BAD_PARAM, "no room for heuristic results");
  std::vector<ModelAlgorithm> modelled = modelAlgorithms(kind, p);
  // What the call will run: the descriptor's math type; f32 data that may
  // use tensor cores reports TF32's.
  cudnnMathType_t mathType = p.conv.mathType;
  int written = 0;
  auto add = [&](int algo, cudnnStatus_t status, int64_t workspace) {
    if (written >= requested)
      return;
    Perf& result = results[written++];
    std::memset(&result, 0, sizeof result);
    result.algo = static_cast<decltype(result.algo)>(algo);
    result.status = status;
    result.time = status == CUDNN_STATUS_SUCCESS ? 0.01f * float(written) : -1.0f;
    result.memory = std::size_t(workspace);
    result.determinism = nondeterministic(kind, algo) ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC;
    result.mathType = mathType;
  };
  for (const ModelAlgorithm& algorithm : modelled)
    add(algorithm.algo, CUDNN_STATUS_SUCCESS, algorithm.workspaceBytes);
  for (int algo = 0; algo < algorithmCount(kind); ++algo) {
    bool isModelled = false;
    for (const ModelAlgorithm& algorithm : modelled)
      isModelled = isModelled || algorithm.algo == algo;
    if (!isModelled)
      add(algo, CUDNN_STATUS_NOT_SUPPORTED, 0);
  }
  *returned = written;
  return succeed();
}

/// How a convolution rounds: products of inputs as they enter (TF32 for f32
/// data on tensor cores), accumulated with one rounding per step in the
/// compute type.
struct Arithmetic {
  bool tf32 = false;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;

  double enter(double value) const { return tf32 ? double(roundToTf32(float(value))) : value; }
  double round(double value) const {
    switch (compute) {
    case CUDNN_DATA_DOUBLE: return value;
    case CUDNN_DATA_HALF: return runtime::halfToFloat(runtime::floatToHalf(float(value)));
    default: return double(float(value));
    }
  }
  /// acc + a*b as a fused multiply-add: the product is exact in double for
  /// f32 operands, so this rounds once.
  double fma(double accumulator, double a, double b) const { return round(accumulator + a * b); }
};

Arithmetic arithmeticOf(const Convolution& p) {
  Arithmetic arithmetic;
  arithmetic.compute = p.conv.computeType;
  arithmetic.tf32 = p.x.type == CUDNN_DATA_FLOAT && p.conv.mathType != CUDNN_FMA_MATH;
  return arithmetic;
}

/// The checks every convolution call makes before it enqueues.
struct Operand {
  const void* pointer;
  const char* what;
  std::size_t bytes;
};

cudnnStatus_t checkConvolutionCall(ConvolutionKind kind, const Convolution& p, int algo, const void* workspace,
                                   std::size_t workspaceBytes, std::initializer_list<Operand> operands) {
  int64_t needed = 0;
  AMPJIT_CUDNN_MODEL_CHECK(workspaceOf(kind, p, algo, needed));
  if (needed > 0 && (workspace == nullptr || int64_t(workspaceBytes) < needed))
    return refuse(CUDNN_STATUS_BAD_PARAM, "algorithm " + std::to_string(algo) + " needs " + std::to_string(needed) +
                                              " bytes of workspace, given " + std::to_string(workspaceBytes) +
                                              (workspace == nullptr ? " at a null pointer" : ""));
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(workspace, "the workspace", workspaceBytes, true));
  for (const Operand& operand : operands)
    AMPJIT_CUDNN_MODEL_CHECK(checkDevice(operand.pointer, operand.what, operand.bytes));
  return succeed();
}

/// Overwrites the workspace as a kernel using it would, so that nothing
/// may count on its contents.
void scribble(void* workspace, std::size_t bytes) {
  if (workspace != nullptr)
    std::memset(workspace, 0xff, bytes);
}

/// Visits every filter tap of output channel k at (oh, ow) whose input
/// position lies inside the input: `visit(ci, gc, r, s, ih, iw)`, with ci
/// the input channel and gc its index within the group.
template <typename Visit> void forEachTap(const Convolution& p, int64_t k, int64_t oh, int64_t ow, Visit&& visit) {
  int64_t group = k / p.groupOut();
  for (int64_t gc = 0; gc < p.groupIn(); ++gc) {
    int64_t ci = group * p.groupIn() + gc;
    for (int64_t r = 0; r < p.w.h; ++r) {
      int64_t ih = oh * p.conv.strideH - p.conv.padH + r * p.conv.dilationH;
      if (ih < 0 || ih >= p.x.h)
        continue;
      for (int64_t s = 0; s < p.w.w; ++s) {
        int64_t iw = ow * p.conv.strideW - p.conv.padW + s * p.conv.dilationW;
        if (iw < 0 || iw >= p.x.w)
          continue;
        visit(ci, gc, r, s, ih, iw);
      }
    }
  }
}

/// out = alpha * value + beta * out, rounded as the compute type, stored once.
void blendAndStore(const Arithmetic& arithmetic, ElementStorage storage, void* out, int64_t index, double value,
                   double alpha, double beta) {
  double result = arithmetic.round(alpha * value);
  if (beta != 0.0)
    result = arithmetic.round(result + beta * loadElement(storage, out, index));
  storeElement(storage, out, index, result);
}

void runForward(const Convolution& p, double alpha, double beta, const void* x, const void* w, void* y) {
  Arithmetic arithmetic = arithmeticOf(p);
  ElementStorage storage = storageOf(p.x.type);
  for (int64_t n = 0; n < p.y.n; ++n)
    for (int64_t k = 0; k < p.y.c; ++k)
      for (int64_t oh = 0; oh < p.y.h; ++oh)
        for (int64_t ow = 0; ow < p.y.w; ++ow) {
          double accumulator = 0.0;
          forEachTap(p, k, oh, ow, [&](int64_t ci, int64_t gc, int64_t r, int64_t s, int64_t ih, int64_t iw) {
            accumulator = arithmetic.fma(accumulator, arithmetic.enter(loadElement(storage, x, p.x.offset(n, ci, ih, iw))),
                                         arithmetic.enter(loadElement(storage, w, p.w.offset(k, gc, r, s))));
          });
          blendAndStore(arithmetic, storage, y, p.y.offset(n, k, oh, ow), accumulator, alpha, beta);
        }
}

/// Every output gradient dy[n, k, oh, ow], as it enters the product, with
/// each of its taps: `visit(n, k, gradient, ci, gc, r, s, ih, iw)`. Both
/// gradients are sums of these products, into dx or into dw.
template <typename Visit>
void forEachGradientTap(const Convolution& p, const Arithmetic& arithmetic, ElementStorage storage, const void* dy,
                        Visit&& visit) {
  for (int64_t n = 0; n < p.y.n; ++n)
    for (int64_t k = 0; k < p.y.c; ++k)
      for (int64_t oh = 0; oh < p.y.h; ++oh)
        for (int64_t ow = 0; ow < p.y.w; ++ow) {
          double gradient = arithmetic.enter(loadElement(storage, dy, p.y.offset(n, k, oh, ow)));
          forEachTap(p, k, oh, ow, [&](int64_t ci, int64_t gc, int64_t r, int64_t s, int64_t ih, int64_t iw) {
            visit(n, k, gradient, ci, gc, r, s, ih, iw);
          });
        }
}

void runBackwardData(const Convolution& p, double alpha, double beta, const void* w, const void* dy, void* dx) {
  Arithmetic arithmetic = arithmeticOf(p);
  ElementStorage storage = storageOf(p.x.type);
  std::vector<double> sums(size_t(p.x.count()), 0.0);
  auto at = [&](int64_t n, int64_t c, int64_t h, int64_t w2) { return size_t(((n * p.x.c + c) * p.x.h + h) * p.x.w + w2); };
  forEachGradientTap(p, arithmetic, storage, dy,
                     [&](int64_t n, int64_t k, double gradient, int64_t ci, int64_t gc, int64_t r, int64_t s,
                         int64_t ih, int64_t iw) {
                       double& sum = sums[at(n, ci, ih, iw)];
                       sum = arithmetic.fma(sum, gradient,
                                            arithmetic.enter(loadElement(storage, w, p.w.offset(k, gc, r, s))));
                     });
  for (int64_t n = 0; n < p.x.n; ++n)
    for (int64_t c = 0; c < p.x.c; ++c)
      for (int64_t h = 0; h < p.x.h; ++h)
        for (int64_t w2 = 0; w2 < p.x.w; ++w2)
          blendAndStore(arithmetic, storage, dx, p.x.offset(n, c, h, w2), sums[at(n, c, h, w2)], alpha, beta);
}

void runBackwardFilter(const Convolution& p, double alpha, double beta, const void* x, const void* dy, void* dw) {
  Arithmetic arithmetic = arithmeticOf(p);
  ElementStorage storage = storageOf(p.x.type);
  std::vector<double> sums(size_t(p.w.count()), 0.0);
  auto at = [&](int64_t k, int64_t c, int64_t r, int64_t s) { return size_t(((k * p.w.c + c) * p.w.h + r) * p.w.w + s); };
  forEachGradientTap(p, arithmetic, storage, dy,
                     [&](int64_t n, int64_t k, double gradient, int64_t ci, int64_t gc, int64_t r, int64_t s,
                         int64_t ih, int64_t iw) {
                       double& sum = sums[at(k, gc, r, s)];
                       sum = arithmetic.fma(sum, gradient,
                                            arithmetic.enter(loadElement(storage, x, p.x.offset(n, ci, ih, iw))));
                     });
  for (int64_t k = 0; k < p.w.k; ++k)
    for (int64_t c = 0; c < p.w.c; ++c)
      for (int64_t r = 0; r < p.w.h; ++r)
        for (int64_t s = 0; s < p.w.w; ++s)
          blendAndStore(arithmetic, storage, dw, p.w.offset(k, c, r, s), sums[at(k, c, r, s)], alpha, beta);
}

//===----------------------------------------------------------------------===//
// Batch norm
//===----------------------------------------------------------------------===//

/// cudnnDeriveBNTensorDescriptor's type: f32 statistics for 16-bit data.
cudnnDataType_t statisticsTypeOf(cudnnDataType_t data) {
  return data == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

bool fullyPackedNhwc(const TensorDesc& t) {
  return t.format == CUDNN_TENSOR_NHWC && t.cStride == 1 && t.wStride == t.c && t.hStride == t.c * t.w &&
         t.nStride == t.c * t.w * t.h;
}

/// The data and statistics a batch-norm call names: `data` are x, y (dy,
/// dx, z, dz), all of x's shape and type; statistics 1xCx1x1 of the derived type.
cudnnStatus_t checkBatchNorm(cudnnBatchNormMode_t mode, std::initializer_list<std::pair<const TensorDesc*, const char*>> data,
                             const TensorDesc* statistics) {
  if (mode != CUDNN_BATCHNORM_SPATIAL && mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the emulation models spatial batch norm only");
  const TensorDesc* x = data.begin()->first;
  for (auto [tensor, what] : data) {
    AMPJIT_CUDNN_MODEL_CHECK(checkSet(tensor, tensor && tensor->set, what));
    if (!tensor->sameShape(*x) || tensor->type != x->type)
      return refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + " is " + tensor->describe() + " " +
                                                typeName(tensor->type) + " but x is " + x->describe() + " " +
                                                typeName(x->type));
  }
  if (x->type != CUDNN_DATA_HALF && x->type != CUDNN_DATA_FLOAT && x->type != CUDNN_DATA_DOUBLE)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the emulation models batch norm on f16, f32 and f64 data, not " +
                                                  typeName(x->type));
  AMPJIT_CUDNN_MODEL_CHECK(checkSet(statistics, statistics && statistics->set, "the statistics"));
  if (statistics->n != 1 || statistics->c != x->c || statistics->h != 1 || statistics->w != 1 ||
      statistics->type != statisticsTypeOf(x->type))
    return refuse(CUDNN_STATUS_BAD_PARAM, "statistics of " + statistics->describe() + " " + typeName(statistics->type) +
                                              " for spatial batch norm over " + x->describe() + " " + typeName(x->type) +
                                              ": cudnnDeriveBNTensorDescriptor gives 1x" + std::to_string(x->c) +
                                              "x1x1 " + typeName(statisticsTypeOf(x->type)));
  return succeed();
}

cudnnStatus_t checkEpsilon(double epsilon) {
  if (!(epsilon >= CUDNN_BN_MIN_EPSILON))
    return refuse(CUDNN_STATUS_BAD_PARAM, "epsilon " + std::to_string(epsilon) + " is below CUDNN_BN_MIN_EPSILON");
  return succeed();
}

cudnnStatus_t checkPair(const void* first, const void* second, const char* what, std::size_t bytes) {
  if ((first == nullptr) != (second == nullptr))
    return refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": both pointers or neither");
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(first, what, bytes, true));
  return checkDevice(second, what, bytes, true);
}

/// Every (n, h, w) position of a tensor: a channel's elements, in order.
template <typename Visit> void forEachPosition(const TensorDesc& t, Visit&& visit) {
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t h = 0; h < t.h; ++h)
      for (int64_t w = 0; w < t.w; ++w)
        visit(n, h, w);
}

/// A statistics-type value: f32 rounding for f16/f32 data.
double roundStatistic(cudnnDataType_t statistics, double value) {
  return statistics == CUDNN_DATA_DOUBLE ? value : double(float(value));
}

struct ChannelMoments {
  double mean = 0.0, biasedVariance = 0.0;
  int64_t count = 0;
};

ChannelMoments momentsOf(const TensorDesc& t, const void* x, int64_t channel) {
  ElementStorage storage = storageOf(t.type);
  ChannelMoments moments;
  double sum = 0.0;
  forEachPosition(t, [&](int64_t n, int64_t h, int64_t w) {
    sum += loadElement(storage, x, t.offset(n, channel, h, w));
    ++moments.count;
  });
  moments.mean = sum / double(moments.count);
  double squares = 0.0;
  forEachPosition(t, [&](int64_t n, int64_t h, int64_t w) {
    double d = loadElement(storage, x, t.offset(n, channel, h, w)) - moments.mean;
    squares += d * d;
  });
  moments.biasedVariance = squares / double(moments.count);
  return moments;
}

/// What the forward training calls compute, with an optional residual and
/// ReLU after the normalisation (the extended calls' operations); `mask`,
/// when given, gets one bit per element of x in x's element order: whether
/// the ReLU passed it.
struct ForwardTraining {
  TensorDesc x, z, y, statistics;
  const void *xData = nullptr, *zData = nullptr, *scale = nullptr, *bias = nullptr;
  void *yData = nullptr, *runningMean = nullptr, *runningVariance = nullptr, *saveMean = nullptr,
       *saveInvVariance = nullptr;
  double alpha = 1, beta = 0, factor = 0, epsilon = 0;
  bool addsResidual = false, relu = false, propagateNan = true;

  void run(uint8_t* mask) const {
    ElementStorage data = storageOf(x.type), stats = storageOf(statistics.type);
    cudnnDataType_t statType = statistics.type;
    for (int64_t c = 0; c < x.c; ++c) {
      ChannelMoments moments = momentsOf(x, xData, c);
      double mean = roundStatistic(statType, moments.mean);
      double invstd = roundStatistic(statType, 1.0 / std::sqrt(moments.biasedVariance + epsilon));
      double gamma = loadElement(stats, scale, c), beta0 = loadElement(stats, bias, c);
      forEachPosition(x, [&](int64_t n, int64_t h, int64_t w) {
        double value = roundStatistic(statType, (loadElement(data, xData, x.offset(n, c, h, w)) - mean) * invstd * gamma + beta0);
        if (addsResidual)
          value = roundStatistic(statType, value + loadElement(data, zData, z.offset(n, c, h, w)));
        if (relu) {
          bool passes = value > 0.0;
          if (mask != nullptr && passes) {
            int64_t e = x.offset(n, c, h, w);
            mask[e / 8] |= uint8_t(1u << (e % 8));
          }
          if (!passes && !(std::isnan(value) && propagateNan))
            value = 0.0;
        }
        int64_t out = y.offset(n, c, h, w);
        double result = roundStatistic(statType, alpha * value);
        if (beta != 0.0)
          result = roundStatistic(statType, result + beta * loadElement(data, yData, out));
        storeElement(data, yData, out, result);
      });
      if (runningMean != nullptr) {
        double unbiased = moments.biasedVariance * double(moments.count) / double(moments.count - 1);
        storeElement(stats, runningMean, c, (1.0 - factor) * loadElement(stats, runningMean, c) + factor * moments.mean);
        storeElement(stats, runningVariance, c,
                     (1.0 - factor) * loadElement(stats, runningVariance, c) + factor * unbiased);
      }
      if (saveMean != nullptr) {
        storeElement(stats, saveMean, c, mean);
        storeElement(stats, saveInvVariance, c, invstd);
      }
    }
  }
};

/// What the backward calls compute, from dy or, after a ReLU, from dy
/// masked by the forward's mask (also written to dz for the residual).
struct Backward {
  TensorDesc x, dy, dx, dz, statistics;
  const void *xData = nullptr, *dyData = nullptr, *scale = nullptr, *savedMean = nullptr, *savedInvVariance = nullptr;
  void *dxData = nullptr, *dzData = nullptr, *dScale = nullptr, *dBias = nullptr;
  double alphaData = 1, betaData = 0, alphaParameters = 1, betaParameters = 0, epsilon = 0;

  /// `mask` null: no activation; otherwise one bit per element of x.
  void run(const uint8_t* mask) const {
    ElementStorage data = storageOf(x.type), stats = storageOf(statistics.type);
    cudnnDataType_t statType = statistics.type;
    auto gradientAt = [&](int64_t n, int64_t c, int64_t h, int64_t w) {
      double g = loadElement(data, dyData, dy.offset(n, c, h, w));
      if (mask != nullptr) {
        int64_t e = x.offset(n, c, h, w);
        if ((mask[e / 8] & (1u << (e % 8))) == 0)
          g = 0.0;
      }
      return g;
    };
    for (int64_t c = 0; c < x.c; ++c) {
      double mean = 0.0, invstd = 0.0;
      if (savedMean != nullptr) {
        mean = loadElement(stats, savedMean, c);
        invstd = loadElement(stats, savedInvVariance, c);
      } else {
        ChannelMoments moments = momentsOf(x, xData, c);
        mean = roundStatistic(statType, moments.mean);
        invstd = roundStatistic(statType, 1.0 / std::sqrt(moments.biasedVariance + epsilon));
      }
      double sumGradient = 0.0, sumGradientXhat = 0.0;
      int64_t count = 0;
      forEachPosition(x, [&](int64_t n, int64_t h, int64_t w) {
        double g = gradientAt(n, c, h, w);
        double xhat = (loadElement(data, xData, x.offset(n, c, h, w)) - mean) * invstd;
        sumGradient += g;
        sumGradientXhat += g * xhat;
        if (dzData != nullptr)
          storeElement(data, dzData, dz.offset(n, c, h, w), g);
        ++count;
      });
      double dbias = roundStatistic(statType, sumGradient), dscale = roundStatistic(statType, sumGradientXhat);
      double factor = loadElement(stats, scale, c) * invstd / double(count);
      forEachPosition(x, [&](int64_t n, int64_t h, int64_t w) {
        double xhat = (loadElement(data, xData, x.offset(n, c, h, w)) - mean) * invstd;
        double value =
            roundStatistic(statType, factor * (double(count) * gradientAt(n, c, h, w) - dbias - xhat * dscale));
        int64_t out = dx.offset(n, c, h, w);
        double result = roundStatistic(statType, alphaData * value);
        if (betaData != 0.0)
          result = roundStatistic(statType, result + betaData * loadElement(data, dxData, out));
        storeElement(data, dxData, out, result);
      });
      auto blendParameter = [&](void* out, double value) {
        double result = roundStatistic(statType, alphaParameters * value);
        if (betaParameters != 0.0)
          result = roundStatistic(statType, result + betaParameters * loadElement(stats, out, c));
        storeElement(stats, out, c, result);
      };
      blendParameter(dScale, dscale);
      blendParameter(dBias, dbias);
    }
  }

  /// The model's garbage: what reading a reserve space no forward wrote yields.
  void poison() const {
    ElementStorage data = storageOf(x.type), stats = storageOf(statistics.type);
    double nan = std::numeric_limits<double>::quiet_NaN();
    for (int64_t c = 0; c < x.c; ++c) {
      forEachPosition(x, [&](int64_t n, int64_t h, int64_t w) {
        storeElement(data, dxData, dx.offset(n, c, h, w), nan);
        if (dzData != nullptr)
          storeElement(data, dzData, dz.offset(n, c, h, w), nan);
      });
      storeElement(stats, dScale, c, nan);
      storeElement(stats, dBias, c, nan);
    }
  }
};

// The extended calls' reserve space: a header naming what the forward
// wrote, then the ReLU's mask, one bit per element.
constexpr uint64_t kReserveMagic = 0x616d706a6974424eull;
struct ReserveHeader {
  uint64_t magic;
  uint64_t elements;
};
constexpr std::size_t kReserveHeaderBytes = 64;

std::size_t reserveBytesFor(const TensorDesc& x) {
  return (kReserveHeaderBytes + std::size_t((x.count() + 7) / 8) + 255) / 256 * 256;
}

std::string opsName(cudnnBatchNormOps_t ops) {
  switch (ops) {
  case CUDNN_BATCHNORM_OPS_BN: return "CUDNN_BATCHNORM_OPS_BN";
  case CUDNN_BATCHNORM_OPS_BN_ACTIVATION: return "CUDNN_BATCHNORM_OPS_BN_ACTIVATION";
  case CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION: return "CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION";
  default: return "cudnnBatchNormOps_t " + std::to_string(int(ops));
  }
}

/// Whether the extended calls' operations can run: with an activation they
/// exist only as the semi-persistent NHWC kernel, whose documented
/// conditions are checked here (the workspace and reserve sizes at the call).
using NamedTensors = std::vector<std::pair<const TensorDesc*, const char*>>;

cudnnStatus_t checkExtendedOperations(cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const NamedTensors& data,
                                      const ActivationDesc* activation) {
  if (ops == CUDNN_BATCHNORM_OPS_BN)
    return succeed();
  if (ops != CUDNN_BATCHNORM_OPS_BN_ACTIVATION && ops != CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION)
    return refuse(CUDNN_STATUS_BAD_PARAM, opsName(ops) + " is not a batch-norm operation");
  if (activation == nullptr || !activation->set)
    return refuse(CUDNN_STATUS_BAD_PARAM, opsName(ops) + " without an activation descriptor");
  if (activation->mode != CUDNN_ACTIVATION_RELU)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the emulation models a ReLU activation only");
  if (mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                  opsName(ops) + " runs only as the semi-persistent NHWC kernel, which needs CUDNN_BATCHNORM_SPATIAL_PERSISTENT");
  for (auto [tensor, what] : data) {
    if (tensor == nullptr || !tensor->set)
      return refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": a null or unset descriptor");
    if (tensor->type != CUDNN_DATA_HALF || !fullyPackedNhwc(*tensor))
      return refuse(CUDNN_STATUS_NOT_SUPPORTED, opsName(ops) + " needs f16 fully packed NHWC tensors; " + what +
                                                    " is " + tensor->describe() + " " + typeName(tensor->type));
  }
  if (ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION && data.begin()->first->c % 4 != 0)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, opsName(ops) + " needs channels a multiple of 4, not " +
                                                  std::to_string(data.begin()->first->c));
  return succeed();
}

std::size_t forwardExWorkspaceBytes(const TensorDesc& x) { return std::size_t(x.c) * 2 * sizeof(float) * 8; }
std::size_t backwardExWorkspaceBytes(const TensorDesc& x) { return std::size_t(x.c) * 4 * sizeof(float) * 8 + 128; }

cudnnStatus_t checkSpace(const void* pointer, std::size_t given, std::size_t needed, const char* what) {
  if (pointer == nullptr || given < needed)
    return refuse(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": " + std::to_string(needed) + " bytes needed, given " +
                                              std::to_string(given) + (pointer == nullptr ? " at a null pointer" : ""));
  return checkDevice(pointer, what, given);
}

/// The three directions' queries, which differ only in which descriptor is
/// which: `x`, `w` and `y` are the forward's input, filter and output.
cudnnStatus_t algorithmCountQuery(cudnnHandle_t handle, ConvolutionKind kind, int* count) {
  AMPJIT_CUDNN_MODEL_CHECK(checkHandle(handle));
  if (count == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a null count");
  *count = algorithmCount(kind);
  return succeed();
}

template <typename Perf>
cudnnStatus_t heuristicQuery(cudnnHandle_t handle, ConvolutionKind kind, cudnnTensorDescriptor_t x,
                             cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t convolution,
                             cudnnTensorDescriptor_t y, int requested, int* returned, Perf* results) {
  AMPJIT_CUDNN_MODEL_CHECK(checkHandle(handle));
  Convolution problem;
  AMPJIT_CUDNN_MODEL_CHECK(checkConvolution(unwrap(x), unwrap(w), unwrap(convolution), unwrap(y), problem));
  return heuristic(kind, problem, requested, returned, results);
}

cudnnStatus_t workspaceSizeQuery(cudnnHandle_t handle, ConvolutionKind kind, cudnnTensorDescriptor_t x,
                                 cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t convolution,
                                 cudnnTensorDescriptor_t y, int algo, std::size_t* bytes) {
  AMPJIT_CUDNN_MODEL_CHECK(checkHandle(handle));
  Convolution problem;
  AMPJIT_CUDNN_MODEL_CHECK(checkConvolution(unwrap(x), unwrap(w), unwrap(convolution), unwrap(y), problem));
  if (bytes == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a null size to write");
  int64_t needed = 0;
  AMPJIT_CUDNN_MODEL_CHECK(workspaceOf(kind, problem, algo, needed));
  *bytes = std::size_t(needed);
  return succeed();
}

} // namespace

//===----------------------------------------------------------------------===//
// Handles and descriptors
//===----------------------------------------------------------------------===//

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnCreate without a handle to write");
  auto* made = new Handle;
  {
    std::lock_guard<std::mutex> lock(handlesMutex);
    liveHandles.insert(made);
  }
  *handle = reinterpret_cast<cudnnHandle_t>(made);
  return succeed();
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  AMPJIT_CUDNN_MODEL_HANDLE(model, handle);
  {
    std::lock_guard<std::mutex> lock(handlesMutex);
    liveHandles.erase(model);
  }
  delete model;
  return succeed();
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  AMPJIT_CUDNN_MODEL_HANDLE(model, handle);
  model->stream = stream;
  return succeed();
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
  case CUDNN_STATUS_SUCCESS: errorText = "CUDNN_STATUS_SUCCESS"; break;
  case CUDNN_STATUS_BAD_PARAM: errorText = "CUDNN_STATUS_BAD_PARAM"; break;
  case CUDNN_STATUS_NOT_SUPPORTED: errorText = "CUDNN_STATUS_NOT_SUPPORTED"; break;
  default: errorText = "cudnnStatus_t " + std::to_string(int(status)); break;
  }
  if (!refusal.empty())
    errorText += " (the cuDNN emulation: " + refusal + ")";
  return errorText.c_str();
}

template <typename Model, typename Descriptor> cudnnStatus_t createDescriptor(Descriptor* descriptor) {
  if (descriptor == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a create call without a descriptor to write");
  *descriptor = reinterpret_cast<Descriptor>(new Model);
  return succeed();
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) { return createDescriptor<TensorDesc>(d); }
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) { return createDescriptor<FilterDesc>(d); }
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  return createDescriptor<ConvolutionDesc>(d);
}
cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t* d) {
  return createDescriptor<ActivationDesc>(d);
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  delete unwrap(d);
  return succeed();
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  delete unwrap(d);
  return succeed();
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  delete unwrap(d);
  return succeed();
}
cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t d) {
  delete unwrap(d);
  return succeed();
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t descriptor, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (descriptor == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a null tensor descriptor");
  ElementStorage storage;
  if (!storageOf(type, storage))
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the emulation does not model tensors of " + typeName(type));
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the emulation models NCHW and NHWC tensors only");
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0)
    return refuse(CUDNN_STATUS_BAD_PARAM, "tensor dimensions " + std::to_string(n) + "x" + std::to_string(c) + "x" +
                                              std::to_string(h) + "x" + std::to_string(w) + ": each must be positive");
  TensorDesc& t = *unwrap(descriptor);
  t = TensorDesc{};
  t.set = true;
  t.type = type;
  t.format = format;
  t.n = n, t.c = c, t.h = h, t.w = w;
  if (format == CUDNN_TENSOR_NHWC) {
    t.cStride = 1, t.wStride = c, t.hStride = int64_t(c) * w, t.nStride = int64_t(c) * w * h;
  } else {
    t.wStride = 1, t.hStride = w, t.cStride = int64_t(w) * h, t.nStride = int64_t(w) * h * c;
  }
  return succeed();
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t descriptor, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  if (descriptor == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a null filter descriptor");
  ElementStorage storage;
  if (!storageOf(type, storage))
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the emulation does not model filters of " + typeName(type));
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the emulation models NCHW (KCRS) and NHWC (KRSC) filters only");
  if (k <= 0 || c <= 0 || h <= 0 || w <= 0)
    return refuse(CUDNN_STATUS_BAD_PARAM, "filter dimensions must be positive");
  FilterDesc& f = *unwrap(descriptor);
  f = FilterDesc{true, type, format, k, c, h, w};
  return succeed();
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t descriptor, int padH, int padW,
                                              int strideH, int strideW, int dilationH, int dilationW,
                                              cudnnConvolutionMode_t mode, cudnnDataType_t computeType) {
  if (descriptor == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a null convolution descriptor");
  if (padH < 0 || padW < 0 || strideH <= 0 || strideW <= 0 || dilationH <= 0 || dilationW <= 0)
    return refuse(CUDNN_STATUS_BAD_PARAM, "negative padding, or a stride or dilation below 1");
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)
    return refuse(CUDNN_STATUS_BAD_PARAM, "an invalid convolution mode");
  ConvolutionDesc& conv = *unwrap(descriptor);
  // Group count and math type are kept: they have setters of their own.
  conv.set = true;
  conv.padH = padH, conv.padW = padW, conv.strideH = strideH, conv.strideW = strideW;
  conv.dilationH = dilationH, conv.dilationW = dilationW;
  conv.mode = mode;
  conv.computeType = computeType;
  return succeed();
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t descriptor, int groups) {
  if (descriptor == nullptr || groups < 1)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a null convolution descriptor or a group count below 1");
  unwrap(descriptor)->groups = groups;
  return succeed();
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t descriptor, cudnnMathType_t mathType) {
  if (descriptor == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a null convolution descriptor");
  if (mathType != CUDNN_DEFAULT_MATH && mathType != CUDNN_TENSOR_OP_MATH &&
      mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && mathType != CUDNN_FMA_MATH)
    return refuse(CUDNN_STATUS_BAD_PARAM, "an invalid math type");
  unwrap(descriptor)->mathType = mathType;
  return succeed();
}

cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t descriptor, cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t nan, double) {
  if (descriptor == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a null activation descriptor");
  ActivationDesc& activation = *unwrap(descriptor);
  activation.set = true;
  activation.mode = mode;
  activation.nan = nan;
  return succeed();
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return algorithmCountQuery(handle, ConvolutionKind::Forward, count);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return algorithmCountQuery(handle, ConvolutionKind::BackwardData, count);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return algorithmCountQuery(handle, ConvolutionKind::BackwardFilter, count);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t convolution,
                                                     const cudnnTensorDescriptor_t y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* results) {
  return heuristicQuery(handle, ConvolutionKind::Forward, x, w, convolution, y, requested, returned, results);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t convolution,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
  return heuristicQuery(handle, ConvolutionKind::BackwardData, dx, w, convolution, dy, requested, returned, results);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t convolution,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  return heuristicQuery(handle, ConvolutionKind::BackwardFilter, x, dw, convolution, dy, requested, returned, results);
}


cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t convolution,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      std::size_t* bytes) {
  return workspaceSizeQuery(handle, ConvolutionKind::Forward, x, w, convolution, y, algo, bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t convolution,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) {
  return workspaceSizeQuery(handle, ConvolutionKind::BackwardData, dx, w, convolution, dy, algo, bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t convolution,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) {
  return workspaceSizeQuery(handle, ConvolutionKind::BackwardFilter, x, dw, convolution, dy, algo, bytes);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void* x, const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convolution, cudnnConvolutionFwdAlgo_t algo,
                                      void* workspace, std::size_t workspaceBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  AMPJIT_CUDNN_MODEL_HANDLE(model, handle);
  Convolution p;
  AMPJIT_CUDNN_MODEL_CHECK(checkConvolution(unwrap(xDesc), unwrap(wDesc), unwrap(convolution), unwrap(yDesc), p));
  AMPJIT_CUDNN_MODEL_CHECK(checkConvolutionCall(ConvolutionKind::Forward, p, algo, workspace, workspaceBytes,
                                                {{x, "x", bytesOf(p.x)}, {w, "w", bytesOf(p.w)}, {y, "y", bytesOf(p.y)}}));
  double a = 0, b = 0;
  AMPJIT_CUDNN_MODEL_CHECK(takeBlends(alpha, beta, p.x.type, a, b));
  submitToStream(model->stream, "cudnnConvolutionForward", [p, a, b, x, w, y, workspace, workspaceBytes] {
    scribble(workspace, workspaceBytes);
    runForward(p, a, b, x, w, y);
    ++convolutions;
  });
  return succeed();
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha, const cudnnFilterDescriptor_t wDesc,
                                           const void* w, const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convolution,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workspace,
                                           std::size_t workspaceBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  AMPJIT_CUDNN_MODEL_HANDLE(model, handle);
  Convolution p;
  AMPJIT_CUDNN_MODEL_CHECK(checkConvolution(unwrap(dxDesc), unwrap(wDesc), unwrap(convolution), unwrap(dyDesc), p));
  AMPJIT_CUDNN_MODEL_CHECK(checkConvolutionCall(ConvolutionKind::BackwardData, p, algo, workspace, workspaceBytes,
                                                {{w, "w", bytesOf(p.w)}, {dy, "dy", bytesOf(p.y)}, {dx, "dx", bytesOf(p.x)}}));
  double a = 0, b = 0;
  AMPJIT_CUDNN_MODEL_CHECK(takeBlends(alpha, beta, p.x.type, a, b));
  submitToStream(model->stream, "cudnnConvolutionBackwardData", [p, a, b, w, dy, dx, workspace, workspaceBytes] {
    scribble(workspace, workspaceBytes);
    runBackwardData(p, a, b, w, dy, dx);
    ++convolutions;
  });
  return succeed();
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convolution,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             std::size_t workspaceBytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  AMPJIT_CUDNN_MODEL_HANDLE(model, handle);
  Convolution p;
  AMPJIT_CUDNN_MODEL_CHECK(checkConvolution(unwrap(xDesc), unwrap(dwDesc), unwrap(convolution), unwrap(dyDesc), p));
  AMPJIT_CUDNN_MODEL_CHECK(checkConvolutionCall(ConvolutionKind::BackwardFilter, p, algo, workspace, workspaceBytes,
                                                {{x, "x", bytesOf(p.x)}, {dy, "dy", bytesOf(p.y)}, {dw, "dw", bytesOf(p.w)}}));
  double a = 0, b = 0;
  AMPJIT_CUDNN_MODEL_CHECK(takeBlends(alpha, beta, p.x.type, a, b));
  submitToStream(model->stream, "cudnnConvolutionBackwardFilter", [p, a, b, x, dy, dw, workspace, workspaceBytes] {
    scribble(workspace, workspaceBytes);
    runBackwardFilter(p, a, b, x, dy, dw);
    ++convolutions;
  });
  return succeed();
}

cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t aDesc,
                             const void* a, const void* beta, const cudnnTensorDescriptor_t cDesc, void* c) {
  AMPJIT_CUDNN_MODEL_HANDLE(model, handle);
  const TensorDesc* at = unwrap(aDesc);
  const TensorDesc* ct = unwrap(cDesc);
  AMPJIT_CUDNN_MODEL_CHECK(checkSet(at, at && at->set, "A"));
  AMPJIT_CUDNN_MODEL_CHECK(checkSet(ct, ct && ct->set, "C"));
  if (at->type != ct->type)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "A is " + typeName(at->type) + " but C is " + typeName(ct->type));
  auto fits = [](int64_t from, int64_t to) { return from == to || from == 1; };
  if (!fits(at->n, ct->n) || !fits(at->c, ct->c) || !fits(at->h, ct->h) || !fits(at->w, ct->w))
    return refuse(CUDNN_STATUS_BAD_PARAM, "A of " + at->describe() + " does not broadcast to C of " + ct->describe() +
                                              ": each dimension must match or be 1");
  double alphaValue = 0, betaValue = 0;
  AMPJIT_CUDNN_MODEL_CHECK(takeBlends(alpha, beta, at->type, alphaValue, betaValue));
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(a, "A", bytesOf(*at)));
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(c, "C", bytesOf(*ct)));
  TensorDesc ad = *at, cd = *ct;
  submitToStream(model->stream, "cudnnAddTensor", [ad, cd, alphaValue, betaValue, a, c] {
    Arithmetic arithmetic;
    arithmetic.compute = statisticsTypeOf(ad.type);
    ElementStorage storage = storageOf(ad.type);
    for (int64_t n = 0; n < cd.n; ++n)
      for (int64_t ch = 0; ch < cd.c; ++ch)
        for (int64_t h = 0; h < cd.h; ++h)
          for (int64_t w = 0; w < cd.w; ++w) {
            int64_t from = ad.offset(ad.n == 1 ? 0 : n, ad.c == 1 ? 0 : ch, ad.h == 1 ? 0 : h, ad.w == 1 ? 0 : w);
            int64_t to = cd.offset(n, ch, h, w);
            double value = arithmetic.round(alphaValue * loadElement(storage, a, from));
            value = arithmetic.round(value + betaValue * loadElement(storage, c, to));
            storeElement(storage, c, to, value);
          }
  });
  return succeed();
}

//===----------------------------------------------------------------------===//
// Batch norm
//===----------------------------------------------------------------------===//

cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derived, const cudnnTensorDescriptor_t x,
                                            cudnnBatchNormMode_t mode) {
  const TensorDesc* xt = unwrap(x);
  AMPJIT_CUDNN_MODEL_CHECK(checkSet(xt, xt && xt->set, "x"));
  if (derived == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a null derived descriptor");
  if (mode != CUDNN_BATCHNORM_SPATIAL && mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "the emulation models spatial batch norm only");
  return ::ampjit::emulation::cudnnSetTensor4dDescriptor(derived, CUDNN_TENSOR_NCHW, statisticsTypeOf(xt->type), 1, int(xt->c), 1, 1);
}

namespace {

cudnnStatus_t checkForwardTraining(const ForwardTraining& f) {
  AMPJIT_CUDNN_MODEL_CHECK(checkEpsilon(f.epsilon));
  std::size_t statistics = bytesOf(f.statistics);
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(f.xData, "x", bytesOf(f.x)));
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(f.yData, "y", bytesOf(f.y)));
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(f.scale, "bnScale", statistics));
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(f.bias, "bnBias", statistics));
  AMPJIT_CUDNN_MODEL_CHECK(checkPair(f.runningMean, f.runningVariance, "the running mean and variance", statistics));
  return checkPair(f.saveMean, f.saveInvVariance, "the saved mean and inverse variance", statistics);
}

cudnnStatus_t checkBackward(const Backward& b) {
  AMPJIT_CUDNN_MODEL_CHECK(checkEpsilon(b.epsilon));
  std::size_t statistics = bytesOf(b.statistics);
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(b.xData, "x", bytesOf(b.x)));
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(b.dyData, "dy", bytesOf(b.dy)));
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(b.dxData, "dx", bytesOf(b.dx)));
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(b.scale, "bnScale", statistics));
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(b.dScale, "dBnScaleResult", statistics));
  AMPJIT_CUDNN_MODEL_CHECK(checkDevice(b.dBias, "dBnBiasResult", statistics));
  return checkPair(b.savedMean, b.savedInvVariance, "the saved mean and inverse variance", statistics);
}

} // namespace

cudnnStatus_t cudnnBatchNormalizationForwardTraining(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                                     const void* alpha, const void* beta,
                                                     const cudnnTensorDescriptor_t xDesc, const void* x,
                                                     const cudnnTensorDescriptor_t yDesc, void* y,
                                                     const cudnnTensorDescriptor_t statisticsDesc, const void* scale,
                                                     const void* bias, double factor, void* runningMean,
                                                     void* runningVariance, double epsilon, void* saveMean,
                                                     void* saveInvVariance) {
  AMPJIT_CUDNN_MODEL_HANDLE(model, handle);
  AMPJIT_CUDNN_MODEL_CHECK(checkBatchNorm(mode, {{unwrap(xDesc), "x"}, {unwrap(yDesc), "y"}}, unwrap(statisticsDesc)));
  ForwardTraining f{*unwrap(xDesc), {}, *unwrap(yDesc), *unwrap(statisticsDesc), x, nullptr, scale, bias, y,
                    runningMean, runningVariance, saveMean, saveInvVariance};
  AMPJIT_CUDNN_MODEL_CHECK(takeBlends(alpha, beta, f.x.type, f.alpha, f.beta));
  f.factor = factor, f.epsilon = epsilon;
  AMPJIT_CUDNN_MODEL_CHECK(checkForwardTraining(f));
  submitToStream(model->stream, "cudnnBatchNormalizationForwardTraining", [f] {
    f.run(nullptr);
    ++batchNorms;
  });
  return succeed();
}

cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                                      const void* alpha, const void* beta,
                                                      const cudnnTensorDescriptor_t xDesc, const void* x,
                                                      const cudnnTensorDescriptor_t yDesc, void* y,
                                                      const cudnnTensorDescriptor_t statisticsDesc, const void* scale,
                                                      const void* bias, const void* estimatedMean,
                                                      const void* estimatedVariance, double epsilon) {
  AMPJIT_CUDNN_MODEL_HANDLE(model, handle);
  AMPJIT_CUDNN_MODEL_CHECK(checkBatchNorm(mode, {{unwrap(xDesc), "x"}, {unwrap(yDesc), "y"}}, unwrap(statisticsDesc)));
  AMPJIT_CUDNN_MODEL_CHECK(checkEpsilon(epsilon));
  TensorDesc xt = *unwrap(xDesc), yt = *unwrap(yDesc), st = *unwrap(statisticsDesc);
  double a = 0, b = 0;
  AMPJIT_CUDNN_MODEL_CHECK(takeBlends(alpha, beta, xt.type, a, b));
  for (auto [pointer, what, bytes] : {Operand{x, "x", bytesOf(xt)}, {y, "y", bytesOf(yt)}, {scale, "bnScale", bytesOf(st)},
                                      {bias, "bnBias", bytesOf(st)}, {estimatedMean, "estimatedMean", bytesOf(st)},
                                      {estimatedVariance, "estimatedVariance", bytesOf(st)}})
    AMPJIT_CUDNN_MODEL_CHECK(checkDevice(pointer, what, bytes));
  submitToStream(model->stream, "cudnnBatchNormalizationForwardInference", [=] {
    ElementStorage data = storageOf(xt.type), stats = storageOf(st.type);
    for (int64_t c = 0; c < xt.c; ++c) {
      double mean = loadElement(stats, estimatedMean, c);
      double invstd = roundStatistic(st.type, 1.0 / std::sqrt(loadElement(stats, estimatedVariance, c) + epsilon));
      double gamma = loadElement(stats, scale, c), shift = loadElement(stats, bias, c);
      forEachPosition(xt, [&](int64_t n, int64_t h, int64_t w) {
        double value = roundStatistic(st.type, (loadElement(data, x, xt.offset(n, c, h, w)) - mean) * invstd * gamma + shift);
        int64_t out = yt.offset(n, c, h, w);
        double result = roundStatistic(st.type, a * value);
        if (b != 0.0)
          result = roundStatistic(st.type, result + b * loadElement(data, y, out));
        storeElement(data, y, out, result);
      });
    }
    ++batchNorms;
  });
  return succeed();
}

cudnnStatus_t cudnnBatchNormalizationBackward(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                              const void* alphaData, const void* betaData, const void* alphaParameters,
                                              const void* betaParameters, const cudnnTensorDescriptor_t xDesc,
                                              const void* x, const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                              const cudnnTensorDescriptor_t dxDesc, void* dx,
                                              const cudnnTensorDescriptor_t statisticsDesc, const void* scale,
                                              void* dScale, void* dBias, double epsilon, const void* savedMean,
                                              const void* savedInvVariance) {
  AMPJIT_CUDNN_MODEL_HANDLE(model, handle);
  AMPJIT_CUDNN_MODEL_CHECK(checkBatchNorm(mode, {{unwrap(xDesc), "x"}, {unwrap(dyDesc), "dy"}, {unwrap(dxDesc), "dx"}},
                                          unwrap(statisticsDesc)));
  Backward b{*unwrap(xDesc), *unwrap(dyDesc), *unwrap(dxDesc), {}, *unwrap(statisticsDesc), x, dy, scale,
             savedMean, savedInvVariance, dx, nullptr, dScale, dBias};
  AMPJIT_CUDNN_MODEL_CHECK(
      takeBlends(alphaData, betaData, b.x.type, b.alphaData, b.betaData, "alphaDataDiff", "betaDataDiff"));
  AMPJIT_CUDNN_MODEL_CHECK(takeBlends(alphaParameters, betaParameters, b.x.type, b.alphaParameters,
                                      b.betaParameters, "alphaParamDiff", "betaParamDiff"));
  b.epsilon = epsilon;
  AMPJIT_CUDNN_MODEL_CHECK(checkBackward(b));
  submitToStream(model->stream, "cudnnBatchNormalizationBackward", [b] {
    b.run(nullptr);
    ++batchNorms;
  });
  return succeed();
}

cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t x,
    const cudnnTensorDescriptor_t z, const cudnnTensorDescriptor_t y, const cudnnTensorDescriptor_t statistics,
    const cudnnActivationDescriptor_t activation, std::size_t* bytes) {
  AMPJIT_CUDNN_MODEL_CHECK(checkHandle(handle));
  if (bytes == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a null size to write");
  bool adds = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  AMPJIT_CUDNN_MODEL_CHECK(checkBatchNorm(mode, {{unwrap(x), "x"}, {unwrap(y), "y"}}, unwrap(statistics)));
  if (adds)
    AMPJIT_CUDNN_MODEL_CHECK(checkBatchNorm(mode, {{unwrap(x), "x"}, {unwrap(z), "z"}}, unwrap(statistics)));
  NamedTensors data = {{unwrap(x), "x"}, {unwrap(y), "y"}};
  if (adds)
    data.push_back({unwrap(z), "z"});
  AMPJIT_CUDNN_MODEL_CHECK(checkExtendedOperations(mode, ops, data, unwrap(activation)));
  *bytes = ops == CUDNN_BATCHNORM_OPS_BN ? 0 : forwardExWorkspaceBytes(*unwrap(x));
  return succeed();
}

cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t x,
    const cudnnTensorDescriptor_t y, const cudnnTensorDescriptor_t dy, const cudnnTensorDescriptor_t dz,
    const cudnnTensorDescriptor_t dx, const cudnnTensorDescriptor_t statistics,
    const cudnnActivationDescriptor_t activation, std::size_t* bytes) {
  AMPJIT_CUDNN_MODEL_CHECK(checkHandle(handle));
  if (bytes == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a null size to write");
  AMPJIT_CUDNN_MODEL_CHECK(
      checkBatchNorm(mode, {{unwrap(x), "x"}, {unwrap(dy), "dy"}, {unwrap(dx), "dx"}}, unwrap(statistics)));
  if (ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION)
    AMPJIT_CUDNN_MODEL_CHECK(checkBatchNorm(mode, {{unwrap(x), "x"}, {unwrap(dz), "dz"}}, unwrap(statistics)));
  if (ops != CUDNN_BATCHNORM_OPS_BN)
    AMPJIT_CUDNN_MODEL_CHECK(checkBatchNorm(mode, {{unwrap(x), "x"}, {unwrap(y), "y"}}, unwrap(statistics)));
  NamedTensors data = {{unwrap(x), "x"}, {unwrap(y), "y"}, {unwrap(dy), "dy"}, {unwrap(dx), "dx"}};
  if (ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION)
    data.push_back({unwrap(dz), "dz"});
  AMPJIT_CUDNN_MODEL_CHECK(checkExtendedOperations(mode, ops, data, unwrap(activation)));
  *bytes = ops == CUDNN_BATCHNORM_OPS_BN ? 0 : backwardExWorkspaceBytes(*unwrap(x));
  return succeed();
}

cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                                                   cudnnBatchNormOps_t ops,
                                                                   const cudnnActivationDescriptor_t activation,
                                                                   const cudnnTensorDescriptor_t x, std::size_t* bytes) {
  AMPJIT_CUDNN_MODEL_CHECK(checkHandle(handle));
  if (bytes == nullptr)
    return refuse(CUDNN_STATUS_BAD_PARAM, "a null size to write");
  const TensorDesc* xt = unwrap(x);
  AMPJIT_CUDNN_MODEL_CHECK(checkSet(xt, xt && xt->set, "x"));
  AMPJIT_CUDNN_MODEL_CHECK(checkExtendedOperations(mode, ops, {{xt, "x"}}, unwrap(activation)));
  *bytes = ops == CUDNN_BATCHNORM_OPS_BN ? 0 : reserveBytesFor(*xt);
  return succeed();
}

cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t zDesc, const void* z,
    const cudnnTensorDescriptor_t yDesc, void* y, const cudnnTensorDescriptor_t statisticsDesc, const void* scale,
    const void* bias, double factor, void* runningMean, void* runningVariance, double epsilon, void* saveMean,
    void* saveInvVariance, cudnnActivationDescriptor_t activation, void* workspace, std::size_t workspaceBytes,
    void* reserve, std::size_t reserveBytes) {
  AMPJIT_CUDNN_MODEL_HANDLE(model, handle);
  bool adds = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION, fused = ops != CUDNN_BATCHNORM_OPS_BN;
  AMPJIT_CUDNN_MODEL_CHECK(checkBatchNorm(mode, {{unwrap(xDesc), "x"}, {unwrap(yDesc), "y"}}, unwrap(statisticsDesc)));
  if (adds)
    AMPJIT_CUDNN_MODEL_CHECK(checkBatchNorm(mode, {{unwrap(xDesc), "x"}, {unwrap(zDesc), "z"}}, unwrap(statisticsDesc)));
  NamedTensors data = {{unwrap(xDesc), "x"}, {unwrap(yDesc), "y"}};
  if (adds)
    data.push_back({unwrap(zDesc), "z"});
  AMPJIT_CUDNN_MODEL_CHECK(checkExtendedOperations(mode, ops, data, unwrap(activation)));
  ForwardTraining f{*unwrap(xDesc), adds ? *unwrap(zDesc) : TensorDesc{}, *unwrap(yDesc), *unwrap(statisticsDesc),
                    x, adds ? z : nullptr, scale, bias, y, runningMean, runningVariance, saveMean, saveInvVariance};
  AMPJIT_CUDNN_MODEL_CHECK(takeBlends(alpha, beta, f.x.type, f.alpha, f.beta));
  f.factor = factor, f.epsilon = epsilon;
  f.addsResidual = adds;
  f.relu = fused;
  f.propagateNan = !fused || unwrap(activation)->nan == CUDNN_PROPAGATE_NAN;
  AMPJIT_CUDNN_MODEL_CHECK(checkForwardTraining(f));
  if (adds)
    AMPJIT_CUDNN_MODEL_CHECK(checkDevice(z, "z", bytesOf(f.z)));
  if (fused) {
    AMPJIT_CUDNN_MODEL_CHECK(checkSpace(workspace, workspaceBytes, forwardExWorkspaceBytes(f.x), "the workspace"));
    AMPJIT_CUDNN_MODEL_CHECK(checkSpace(reserve, reserveBytes, reserveBytesFor(f.x), "the reserve space"));
  }
  submitToStream(model->stream, "cudnnBatchNormalizationForwardTrainingEx", [f, fused, reserve, workspace,
                                                                             workspaceBytes] {
    if (!fused) {
      f.run(nullptr);
      ++batchNorms;
      return;
    }
    scribble(workspace, workspaceBytes);
    auto* bytes = static_cast<std::byte*>(reserve);
    auto* mask = reinterpret_cast<uint8_t*>(bytes + kReserveHeaderBytes);
    std::memset(mask, 0, std::size_t((f.x.count() + 7) / 8));
    f.run(mask);
    ReserveHeader header{kReserveMagic, uint64_t(f.x.count())};
    std::memcpy(bytes, &header, sizeof header);
    ++fusedBatchNorms;
  });
  return succeed();
}

cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void* alphaData,
    const void* betaData, const void* alphaParameters, const void* betaParameters, const cudnnTensorDescriptor_t xDesc,
    const void* x, const cudnnTensorDescriptor_t yDesc, const void* y, const cudnnTensorDescriptor_t dyDesc,
    const void* dy, const cudnnTensorDescriptor_t dzDesc, void* dz, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const cudnnTensorDescriptor_t statisticsDesc, const void* scale, const void* bias, void* dScale, void* dBias,
    double epsilon, const void* savedMean, const void* savedInvVariance, cudnnActivationDescriptor_t activation,
    void* workspace, std::size_t workspaceBytes, void* reserve, std::size_t reserveBytes) {
  AMPJIT_CUDNN_MODEL_HANDLE(model, handle);
  bool adds = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION, fused = ops != CUDNN_BATCHNORM_OPS_BN;
  AMPJIT_CUDNN_MODEL_CHECK(checkBatchNorm(mode, {{unwrap(xDesc), "x"}, {unwrap(dyDesc), "dy"}, {unwrap(dxDesc), "dx"}},
                                          unwrap(statisticsDesc)));
  if (adds)
    AMPJIT_CUDNN_MODEL_CHECK(checkBatchNorm(mode, {{unwrap(xDesc), "x"}, {unwrap(dzDesc), "dz"}}, unwrap(statisticsDesc)));
  if (fused)
    AMPJIT_CUDNN_MODEL_CHECK(checkBatchNorm(mode, {{unwrap(xDesc), "x"}, {unwrap(yDesc), "y"}}, unwrap(statisticsDesc)));
  NamedTensors data = {{unwrap(xDesc), "x"}, {unwrap(yDesc), "y"}, {unwrap(dyDesc), "dy"}, {unwrap(dxDesc), "dx"}};
  if (adds)
    data.push_back({unwrap(dzDesc), "dz"});
  AMPJIT_CUDNN_MODEL_CHECK(checkExtendedOperations(mode, ops, data, unwrap(activation)));
  Backward b{*unwrap(xDesc), *unwrap(dyDesc), *unwrap(dxDesc), adds ? *unwrap(dzDesc) : TensorDesc{},
             *unwrap(statisticsDesc), x, dy, scale, savedMean, savedInvVariance, dx, adds ? dz : nullptr, dScale, dBias};
  AMPJIT_CUDNN_MODEL_CHECK(
      takeBlends(alphaData, betaData, b.x.type, b.alphaData, b.betaData, "alphaDataDiff", "betaDataDiff"));
  AMPJIT_CUDNN_MODEL_CHECK(takeBlends(alphaParameters, betaParameters, b.x.type, b.alphaParameters,
                                      b.betaParameters, "alphaParamDiff", "betaParamDiff"));
  b.epsilon = epsilon;
  AMPJIT_CUDNN_MODEL_CHECK(checkBackward(b));
  if (fused) {
    // The kernel recomputes the activation's input from x, the statistics, scale and bias.
    AMPJIT_CUDNN_MODEL_CHECK(checkDevice(bias, "bnBias (needed with an activation)", bytesOf(b.statistics)));
    AMPJIT_CUDNN_MODEL_CHECK(checkDevice(y, "y", bytesOf(b.x), true));
    if (adds)
      AMPJIT_CUDNN_MODEL_CHECK(checkDevice(dz, "dz", bytesOf(b.dz)));
    AMPJIT_CUDNN_MODEL_CHECK(checkSpace(workspace, workspaceBytes, backwardExWorkspaceBytes(b.x), "the workspace"));
    AMPJIT_CUDNN_MODEL_CHECK(checkSpace(reserve, reserveBytes, reserveBytesFor(b.x), "the reserve space"));
  }
  submitToStream(model->stream, "cudnnBatchNormalizationBackwardEx", [b, fused, reserve, workspace, workspaceBytes] {
    if (!fused) {
      b.run(nullptr);
      ++batchNorms;
      return;
    }
    scribble(workspace, workspaceBytes);
    const auto* bytes = static_cast<const std::byte*>(reserve);
    ReserveHeader header;
    std::memcpy(&header, bytes, sizeof header);
    if (header.magic != kReserveMagic || header.elements != uint64_t(b.x.count()))
      b.poison();
    else
      b.run(reinterpret_cast<const uint8_t*>(bytes + kReserveHeaderBytes));
    ++fusedBatchNorms;
  });
  return succeed();
}

const std::string& lastCudnnRefusal() { return refusal; }

CudnnCounts cudnnCounts() { return CudnnCounts{convolutions.load(), batchNorms.load(), fusedBatchNorms.load()}; }

} // namespace ampjit::emulation
