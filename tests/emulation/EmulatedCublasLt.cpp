// EmulatedCublasLt.h: cuBLASLt's documented contract, on the host.

#include "EmulatedCublasLt.h"

#include "CudaEmulation.h"
#include "EmulatedElements.h"
#include "EmulatedStreams.h"

#include "ampjit/runtime/LowPrecision.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iterator>
#include <vector>

namespace ampjit::emulation {

namespace {

namespace rt = ampjit::runtime;

// Never destroyed: the process-wide CUDA backend is released by an exit
// handler that runs after thread-local destructors, and its teardown still
// reports here.
thread_local std::string& refusal = *new std::string;
std::atomic<int64_t> matmuls{0};
/// setCublasLtAlgorithmTimes': one algorithm per entry (none set: one that
/// takes no extra time); and the products each variant computed.
std::vector<uint64_t>& algorithmTimes = *new std::vector<uint64_t>;
std::vector<int64_t>& matmulsByVariant = *new std::vector<int64_t>(kModelledVariants, 0);
/// setCublasLtOffersDeviceScalars'.
std::atomic<bool> offersDeviceScalars{true};

cublasStatus_t refuse(cublasStatus_t status, std::string why) {
  refusal = std::move(why);
  return status;
}

cublasStatus_t succeed() {
  refusal.clear();
  return CUBLAS_STATUS_SUCCESS;
}

/// cublasLtMatmulDesc_t, cublasLtMatrixLayout_t and cublasLtMatmulPreference_t
/// point at these; only this file looks inside.
struct MatmulDescriptor {
  int32_t computeType = 0;
  int32_t scaleType = 0;
  int32_t pointerMode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int64_t biasBatchStride = 0;
  int32_t biasType = -1;
  const void* aux = nullptr;
  int64_t auxLd = 0, auxBatchStride = 0;
  int32_t auxType = -1;
  /// How many SMs the algorithm is chosen for (0: all). It shapes only the
  /// choice, never the result, which the model computes one way.
  int32_t smCountTarget = 0;
  std::vector<int> unmodelled; // attributes set that this model does not implement
};

struct MatrixLayout {
  int32_t type = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, columns = 0;
  int64_t ld = 0;
  int32_t batchCount = 1;
  int64_t batchStride = 0;
  std::vector<int> unmodelled;
};

struct Preference {
  uint64_t maxWorkspace = 0; // the documented default: no workspace
  uint32_t minAlignment[4] = {256, 256, 256, 256};
  uint32_t reductionSchemes = CUBLASLT_REDUCTION_SCHEME_MASK; // the documented default: any
  std::vector<int> unmodelled;
};

/// What a heuristic result's cublasLtMatmulAlgo_t carries here: the problem
/// it was chosen for and what it needs of a call.
struct AlgorithmRecord {
  uint64_t magic;
  uint64_t problem;
  uint32_t alignment[6]; // A, B, C, D, bias, aux: what the algorithm may assume of each pointer
  uint64_t workspaceBytes;
  uint32_t variant; // its place in the heuristic's list (setCublasLtAlgorithmTimes)
};
static_assert(sizeof(AlgorithmRecord) <= sizeof(cublasLtMatmulAlgo_t));
constexpr uint64_t kAlgorithmMagic = 0x616d706a69744c74ull;
int handleToken = 0;

MatmulDescriptor* unwrap(cublasLtMatmulDesc_t descriptor) { return reinterpret_cast<MatmulDescriptor*>(descriptor); }
MatrixLayout* unwrap(cublasLtMatrixLayout_t layout) { return reinterpret_cast<MatrixLayout*>(layout); }
Preference* unwrap(cublasLtMatmulPreference_t preference) { return reinterpret_cast<Preference*>(preference); }

/// Copies an attribute whose documented type is T, or refuses a size that
/// does not match it, as the library does.
template <typename T> cublasStatus_t take(T& field, const void* value, std::size_t bytes, const char* name) {
  if (value == nullptr || bytes != sizeof(T))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(name) + " takes " + std::to_string(sizeof(T)) +
                                                   " bytes, not " + std::to_string(bytes));
  std::memcpy(&field, value, sizeof(T));
  return succeed();
}

/// The storage a cudaDataType names, or nothing for types the model does not know.
bool storageOf(int32_t type, ElementStorage& storage) {
  switch (type) {
  case CUDA_R_16F: storage = ElementStorage::F16; return true;
  case CUDA_R_16BF: storage = ElementStorage::BF16; return true;
  case CUDA_R_32F: storage = ElementStorage::F32; return true;
  case CUDA_R_64F: storage = ElementStorage::F64; return true;
  default: return false;
  }
}

std::size_t elementBytes(int32_t type) {
  ElementStorage storage;
  return storageOf(type, storage) ? bytesOf(storage) : 0;
}

double load(int32_t type, const void* base, int64_t index) {
  ElementStorage storage = ElementStorage::F64;
  storageOf(type, storage);
  return loadElement(storage, base, index);
}

/// Rounds once from the compute type's value to the storage type.
void store(int32_t type, void* base, int64_t index, double value) {
  ElementStorage storage = ElementStorage::F64;
  storageOf(type, storage);
  storeElement(storage, base, index, value);
}

bool epilogueHas(uint32_t epilogue, uint32_t bits) { return (epilogue & bits) == bits; }
bool addsBias(uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
         epilogue == CUBLASLT_EPILOGUE_GELU_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool writesAux(uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool readsAux(uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_DGELU || epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
bool writesBiasGradient(uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD || epilogue == CUBLASLT_EPILOGUE_BGRADA ||
         epilogue == CUBLASLT_EPILOGUE_BGRADB;
}
bool modelledEpilogue(uint32_t epilogue) {
  switch (epilogue) {
  case CUBLASLT_EPILOGUE_DEFAULT:
  case CUBLASLT_EPILOGUE_RELU:
  case CUBLASLT_EPILOGUE_BIAS:
  case CUBLASLT_EPILOGUE_RELU_BIAS:
  case CUBLASLT_EPILOGUE_GELU:
  case CUBLASLT_EPILOGUE_GELU_BIAS:
  case CUBLASLT_EPILOGUE_GELU_AUX:
  case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
  case CUBLASLT_EPILOGUE_DGELU:
  case CUBLASLT_EPILOGUE_DGELU_BGRAD:
  case CUBLASLT_EPILOGUE_BGRADA:
  case CUBLASLT_EPILOGUE_BGRADB: return true;
  default: return false; // the ReLU bit-mask family
  }
}

/// GELU as cuBLASLt computes it: the tanh approximation.
constexpr double kSqrtTwoOverPi = 0.7978845608028654, kGeluCubic = 0.044715;
double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kSqrtTwoOverPi * (x + kGeluCubic * x * x * x))); }
double geluDerivative(double x) {
  double t = std::tanh(kSqrtTwoOverPi * (x + kGeluCubic * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrtTwoOverPi * (1.0 + 3.0 * kGeluCubic * x * x);
}

/// How an input element enters the product under a compute type: the FAST
/// modes may round inputs to TF32 (a 10-bit mantissa, to nearest), f16 or bf16.
double enterProduct(int32_t computeType, double value) {
  switch (computeType) {
  case CUBLAS_COMPUTE_32F_FAST_TF32: return roundToTf32(float(value));
  case CUBLAS_COMPUTE_32F_FAST_16F: return rt::halfToFloat(rt::floatToHalf(float(value)));
  case CUBLAS_COMPUTE_32F_FAST_16BF: return rt::bfloat16ToFloat(rt::floatToBFloat16(float(value)));
  default: return value;
  }
}

bool computesInDouble(int32_t computeType) {
  return computeType == CUBLAS_COMPUTE_64F || computeType == CUBLAS_COMPUTE_64F_PEDANTIC;
}

std::string typeName(int32_t type) {
  switch (type) {
  case CUDA_R_16F: return "CUDA_R_16F";
  case CUDA_R_16BF: return "CUDA_R_16BF";
  case CUDA_R_32F: return "CUDA_R_32F";
  case CUDA_R_64F: return "CUDA_R_64F";
  default: return "cudaDataType " + std::to_string(type);
  }
}

/// cuBLASLt's table of regular (non-IMMA, non-FP8) GEMM types: whether A/B
/// of `inputs` may produce C/D of `output` under this compute and scale type.
bool supportedTypes(int32_t computeType, int32_t scaleType, int32_t inputs, int32_t output) {
  switch (computeType) {
  case CUBLAS_COMPUTE_64F:
  case CUBLAS_COMPUTE_64F_PEDANTIC: return scaleType == CUDA_R_64F && inputs == CUDA_R_64F && output == CUDA_R_64F;
  case CUBLAS_COMPUTE_32F:
  case CUBLAS_COMPUTE_32F_PEDANTIC:
    if (scaleType != CUDA_R_32F)
      return false;
    if (inputs == CUDA_R_32F)
      return output == CUDA_R_32F;
    return (inputs == CUDA_R_16F || inputs == CUDA_R_16BF) && (output == inputs || output == CUDA_R_32F);
  case CUBLAS_COMPUTE_32F_FAST_TF32:
  case CUBLAS_COMPUTE_32F_FAST_16F:
  case CUBLAS_COMPUTE_32F_FAST_16BF:
    return scaleType == CUDA_R_32F && inputs == CUDA_R_32F && output == CUDA_R_32F;
  default: return false;
  }
}

std::string unmodelledList(const char* what, const std::vector<int>& attributes) {
  std::string text;
  for (int attribute : attributes)
    text += (text.empty() ? "" : ", ") + std::to_string(attribute);
  return std::string("the emulation does not model ") + what + " attribute(s) " + text;
}

/// The product a call describes, checked against the contract.
struct Problem {
  int64_t m = 0, n = 0, k = 0, batches = 1;
  int32_t biasType = 0, auxType = 0;
};

cublasStatus_t checkProblem(const MatmulDescriptor& desc, const MatrixLayout& a, const MatrixLayout& b,
                            const MatrixLayout& c, const MatrixLayout& d, Problem& problem) {
  if (!desc.unmodelled.empty())
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, unmodelledList("matmul descriptor", desc.unmodelled));
  for (const MatrixLayout* layout : {&a, &b, &c, &d}) {
    if (!layout->unmodelled.empty())
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, unmodelledList("matrix layout", layout->unmodelled));
    if (layout->order != CUBLASLT_ORDER_COL)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "the emulation models column-major layouts only");
    if (elementBytes(layout->type) == 0)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matrix of " + typeName(layout->type));
    if (layout->ld < int64_t(std::max<uint64_t>(layout->rows, 1)))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "a leading dimension of " + std::to_string(layout->ld) +
                                                     " for a matrix of " + std::to_string(layout->rows) +
                                                     " rows: its columns would overlap");
  }
  if (desc.pointerMode != CUBLASLT_POINTER_MODE_HOST && desc.pointerMode != CUBLASLT_POINTER_MODE_DEVICE)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "the emulation models alpha and beta both on the host or both "
                                               "on the device only");
  if (desc.smCountTarget < 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "SM_COUNT_TARGET " + std::to_string(desc.smCountTarget) + ": a count of SMs, 0 for all");
  if (desc.transc != CUBLAS_OP_N)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "TRANSC: only CUBLAS_OP_N is supported");
  if (desc.transa != CUBLAS_OP_N && desc.transa != CUBLAS_OP_T)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "TRANSA other than N or T on real matrices");
  if (desc.transb != CUBLAS_OP_N && desc.transb != CUBLAS_OP_T)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "TRANSB other than N or T on real matrices");
  if (a.type != b.type)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "A is " + typeName(a.type) + " but B is " + typeName(b.type));
  if (c.type != d.type)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "C is " + typeName(c.type) + " but D is " + typeName(d.type));
  if (!supportedTypes(desc.computeType, desc.scaleType, a.type, d.type))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "no GEMM from " + typeName(a.type) + " to " + typeName(d.type) +
                                                   " with compute type " + std::to_string(desc.computeType) +
                                                   " and scale type " + typeName(desc.scaleType));
  // D = op(A) op(B): op(A) is [m, k], op(B) [k, n], C and D [m, n].
  problem.m = int64_t(d.rows);
  problem.n = int64_t(d.columns);
  bool aT = desc.transa == CUBLAS_OP_T, bT = desc.transb == CUBLAS_OP_T;
  uint64_t aRows = aT ? a.columns : a.rows, aColumns = aT ? a.rows : a.columns;
  uint64_t bRows = bT ? b.columns : b.rows, bColumns = bT ? b.rows : b.columns;
  problem.k = int64_t(aColumns);
  if (aRows != d.rows || bColumns != d.columns || bRows != aColumns || c.rows != d.rows || c.columns != d.columns)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "op(A) [" + std::to_string(aRows) + ", " + std::to_string(aColumns) + "] times op(B) [" +
                      std::to_string(bRows) + ", " + std::to_string(bColumns) + "] into C [" + std::to_string(c.rows) +
                      ", " + std::to_string(c.columns) + "] and D [" + std::to_string(d.rows) + ", " +
                      std::to_string(d.columns) + "]: the shapes do not chain");
  problem.batches = d.batchCount;
  for (const MatrixLayout* layout : {&a, &b, &c})
    if (layout->batchCount != d.batchCount)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "batch counts differ: " + std::to_string(layout->batchCount) +
                                                     " against D's " + std::to_string(d.batchCount));
  if (d.batchCount < 1)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "a batch count below 1");

  uint32_t epilogue = desc.epilogue;
  if (!modelledEpilogue(epilogue))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "the emulation does not model epilogue " + std::to_string(epilogue));
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && computesInDouble(desc.computeType))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "epilogues on a double product");
  problem.biasType = desc.biasType == -1 ? d.type : desc.biasType;
  if (addsBias(epilogue) && problem.biasType != d.type &&
      !(problem.biasType == CUDA_R_32F && (d.type == CUDA_R_16F || d.type == CUDA_R_16BF)))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "a " + typeName(problem.biasType) + " bias for a " + typeName(d.type) +
                                                   " D");
  if (writesBiasGradient(epilogue) && problem.biasType != d.type)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "a bias gradient is in D's type (" + typeName(d.type) + "), not " +
                                                   typeName(problem.biasType));
  if (writesAux(epilogue) || readsAux(epilogue)) {
    problem.auxType = desc.auxType == -1 ? d.type : desc.auxType;
    if (problem.auxType != d.type)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "a GELU input of " + typeName(problem.auxType) + " for a " +
                                                     typeName(d.type) + " D");
    if (desc.auxLd % 8 != 0 || desc.auxLd < int64_t(d.rows))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE_AUX_LD " + std::to_string(desc.auxLd) +
                                                     ": must be divisible by 8 and no less than D's " +
                                                     std::to_string(d.rows) + " rows");
    if (d.batchCount > 1 && desc.auxBatchStride % 8 != 0)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE_AUX_BATCH_STRIDE must be divisible by 8");
  }
  return succeed();
}

uint64_t mix(uint64_t hash, uint64_t value) {
  hash ^= value + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2);
  return hash;
}

/// Everything the heuristic chose for, except the pointers (set per call).
uint64_t problemKey(const MatmulDescriptor& desc, const MatrixLayout* layouts[4]) {
  uint64_t hash = 0;
  for (uint64_t value : {uint64_t(desc.computeType), uint64_t(desc.scaleType), uint64_t(desc.transa),
                         uint64_t(desc.transb), uint64_t(desc.epilogue), uint64_t(desc.biasType),
                         uint64_t(desc.biasBatchStride), uint64_t(desc.auxLd), uint64_t(desc.auxBatchStride),
                         uint64_t(desc.auxType)})
    hash = mix(hash, value);
  for (int i = 0; i < 4; ++i)
    for (uint64_t value : {uint64_t(layouts[i]->type), layouts[i]->rows, layouts[i]->columns,
                           uint64_t(layouts[i]->ld), uint64_t(layouts[i]->batchCount),
                           uint64_t(layouts[i]->batchStride)})
      hash = mix(hash, value);
  return hash;
}

/// The widest access a kernel makes is 16 bytes: it may assume no more.
uint32_t usableAlignment(uint64_t guaranteed) {
  uint64_t lowest = guaranteed == 0 ? 16 : (guaranteed & (~guaranteed + 1));
  return uint32_t(std::min<uint64_t>(16, lowest));
}

bool aligned(const void* pointer, uint32_t alignment) { return reinterpret_cast<uintptr_t>(pointer) % alignment == 0; }

} // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate without a handle to write");
  *handle = reinterpret_cast<cublasLtHandle_t>(&handleToken);
  return succeed();
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle != reinterpret_cast<cublasLtHandle_t>(&handleToken))
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy of a handle cublasLtCreate did not make");
  return succeed();
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* descriptor, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (descriptor == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate without a descriptor to write");
  auto* made = new MatmulDescriptor;
  made->computeType = computeType;
  made->scaleType = scaleType;
  *descriptor = reinterpret_cast<cublasLtMatmulDesc_t>(made);
  return succeed();
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t descriptor) {
  delete unwrap(descriptor);
  return succeed();
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t descriptor, cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, std::size_t bytes) {
  if (descriptor == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "a null matmul descriptor");
  MatmulDescriptor& d = *unwrap(descriptor);
  switch (attribute) {
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return take(d.computeType, value, bytes, "COMPUTE_TYPE");
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return take(d.scaleType, value, bytes, "SCALE_TYPE");
  case CUBLASLT_MATMUL_DESC_POINTER_MODE: return take(d.pointerMode, value, bytes, "POINTER_MODE");
  case CUBLASLT_MATMUL_DESC_TRANSA: return take(d.transa, value, bytes, "TRANSA");
  case CUBLASLT_MATMUL_DESC_TRANSB: return take(d.transb, value, bytes, "TRANSB");
  case CUBLASLT_MATMUL_DESC_TRANSC: return take(d.transc, value, bytes, "TRANSC");
  case CUBLASLT_MATMUL_DESC_EPILOGUE: return take(d.epilogue, value, bytes, "EPILOGUE");
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return take(d.bias, value, bytes, "BIAS_POINTER");
  case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return take(d.biasBatchStride, value, bytes, "BIAS_BATCH_STRIDE");
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return take(d.biasType, value, bytes, "BIAS_DATA_TYPE");
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return take(d.aux, value, bytes, "EPILOGUE_AUX_POINTER");
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return take(d.auxLd, value, bytes, "EPILOGUE_AUX_LD");
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
    return take(d.auxBatchStride, value, bytes, "EPILOGUE_AUX_BATCH_STRIDE");
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return take(d.auxType, value, bytes, "EPILOGUE_AUX_DATA_TYPE");
  case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: return take(d.smCountTarget, value, bytes, "SM_COUNT_TARGET");
  default:
    d.unmodelled.push_back(int(attribute));
    return succeed();
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t columns, int64_t leadingDimension) {
  if (layout == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate without a layout to write");
  auto* made = new MatrixLayout;
  made->type = type;
  made->rows = rows;
  made->columns = columns;
  made->ld = leadingDimension;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(made);
  return succeed();
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete unwrap(layout);
  return succeed();
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute,
                                                const void* value, std::size_t bytes) {
  if (layout == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "a null matrix layout");
  MatrixLayout& l = *unwrap(layout);
  switch (attribute) {
  case CUBLASLT_MATRIX_LAYOUT_TYPE: return take(l.type, value, bytes, "LAYOUT_TYPE");
  case CUBLASLT_MATRIX_LAYOUT_ORDER: return take(l.order, value, bytes, "LAYOUT_ORDER");
  case CUBLASLT_MATRIX_LAYOUT_ROWS: return take(l.rows, value, bytes, "LAYOUT_ROWS");
  case CUBLASLT_MATRIX_LAYOUT_COLS: return take(l.columns, value, bytes, "LAYOUT_COLS");
  case CUBLASLT_MATRIX_LAYOUT_LD: return take(l.ld, value, bytes, "LAYOUT_LD");
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return take(l.batchCount, value, bytes, "LAYOUT_BATCH_COUNT");
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
    return take(l.batchStride, value, bytes, "LAYOUT_STRIDED_BATCH_OFFSET");
  default:
    l.unmodelled.push_back(int(attribute));
    return succeed();
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  if (preference == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate without a preference to write");
  *preference = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference);
  return succeed();
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete unwrap(preference);
  return succeed();
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute, const void* value,
                                                    std::size_t bytes) {
  if (preference == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "a null matmul preference");
  Preference& p = *unwrap(preference);
  switch (attribute) {
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return take(p.maxWorkspace, value, bytes, "MAX_WORKSPACE_BYTES");
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return take(p.minAlignment[0], value, bytes, "MIN_ALIGNMENT_A_BYTES");
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return take(p.minAlignment[1], value, bytes, "MIN_ALIGNMENT_B_BYTES");
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return take(p.minAlignment[2], value, bytes, "MIN_ALIGNMENT_C_BYTES");
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return take(p.minAlignment[3], value, bytes, "MIN_ALIGNMENT_D_BYTES");
  case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
    return take(p.reductionSchemes, value, bytes, "REDUCTION_SCHEME_MASK");
  default:
    p.unmodelled.push_back(int(attribute));
    return succeed();
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t descriptor,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (returned != nullptr)
    *returned = 0;
  if (handle != reinterpret_cast<cublasLtHandle_t>(&handleToken))
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "a handle cublasLtCreate did not make");
  if (!descriptor || !a || !b || !c || !d || !preference || requested < 1 || !results || !returned)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: a null or empty argument");
  const Preference& pref = *unwrap(preference);
  if (!pref.unmodelled.empty())
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, unmodelledList("preference", pref.unmodelled));
  const MatmulDescriptor& desc = *unwrap(descriptor);
  const MatrixLayout* layouts[4] = {unwrap(a), unwrap(b), unwrap(c), unwrap(d)};
  Problem problem;
  if (cublasStatus_t status = checkProblem(desc, *layouts[0], *layouts[1], *layouts[2], *layouts[3], problem);
      status != CUBLAS_STATUS_SUCCESS)
    return status;

  if (desc.pointerMode == CUBLASLT_POINTER_MODE_DEVICE && !offersDeviceScalars.load())
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "no algorithm reads alpha and beta from the device "
                                               "(setCublasLtOffersDeviceScalars)");

  AlgorithmRecord record{};
  record.magic = kAlgorithmMagic;
  record.problem = problemKey(desc, layouts);
  for (int i = 0; i < 4; ++i)
    record.alignment[i] = usableAlignment(pref.minAlignment[i]);
  // The bias and aux pointers' values say how aligned they will be.
  record.alignment[4] = usableAlignment(reinterpret_cast<uintptr_t>(desc.bias));
  record.alignment[5] = usableAlignment(reinterpret_cast<uintptr_t>(desc.aux));
  // A split-K algorithm for long products, where workspace is allowed and
  // the preference lets it reduce in the compute type, as this model does
  // (its products round once, whatever they split).
  bool splitAllowed = (pref.reductionSchemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) != 0;
  record.workspaceBytes =
      problem.k >= 1024 && splitAllowed ? std::min<uint64_t>(pref.maxWorkspace, 4u << 20) : 0;

  int offered = std::min<int>(requested, std::max<int>(1, int(algorithmTimes.size())));
  for (int variant = 0; variant < offered; ++variant) {
    record.variant = uint32_t(variant);
    cublasLtMatmulHeuristicResult_t& result = results[variant];
    std::memset(&result, 0, sizeof result);
    std::memcpy(&result.algo, &record, sizeof record);
    result.workspaceSize = record.workspaceBytes;
    result.state = CUBLAS_STATUS_SUCCESS;
    result.wavesCount = 1.0f;
  }
  *returned = offered;
  return succeed();
}

cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algorithm,
                                                    cublasLtMatmulAlgoConfigAttributes_t attribute, void* buffer,
                                                    std::size_t bytes, std::size_t* written) {
  if (algorithm == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoConfigGetAttribute without an algorithm");
  AlgorithmRecord record;
  std::memcpy(&record, algorithm, sizeof record);
  if (record.magic != kAlgorithmMagic)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "an algorithm the heuristic did not choose");
  bool split = record.workspaceBytes > 0;
  int32_t value = 0;
  switch (attribute) {
  case CUBLASLT_ALGO_CONFIG_ID: value = int32_t(record.variant); break;
  case CUBLASLT_ALGO_CONFIG_TILE_ID: value = CUBLASLT_MATMUL_TILE_UNDEFINED; break;
  case CUBLASLT_ALGO_CONFIG_STAGES_ID: value = CUBLASLT_MATMUL_STAGES_UNDEFINED; break;
  case CUBLASLT_ALGO_CONFIG_SPLITK_NUM: value = split ? 2 : 1; break;
  case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME:
    value = split ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE : CUBLASLT_REDUCTION_SCHEME_NONE;
    break;
  default: return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "algorithm attribute " + std::to_string(int(attribute)) +
                                                          " is not modelled");
  }
  if (written != nullptr)
    *written = sizeof value;
  if (bytes != sizeof value || buffer == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "an algorithm attribute is 4 bytes, not " + std::to_string(bytes));
  std::memcpy(buffer, &value, sizeof value);
  return succeed();
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t descriptor, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t aLayout, const void* b,
                              cublasLtMatrixLayout_t bLayout, const void* beta, const void* c,
                              cublasLtMatrixLayout_t cLayout, void* d, cublasLtMatrixLayout_t dLayout,
                              const cublasLtMatmulAlgo_t* algorithm, void* workspace, std::size_t workspaceBytes,
                              cudaStream_t stream) {
  if (handle != reinterpret_cast<cublasLtHandle_t>(&handleToken))
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "a handle cublasLtCreate did not make");
  if (!descriptor || !aLayout || !bLayout || !cLayout || !dLayout || !alpha || !beta)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: a null descriptor, alpha or beta");
  const MatmulDescriptor desc = *unwrap(descriptor);
  const MatrixLayout* layouts[4] = {unwrap(aLayout), unwrap(bLayout), unwrap(cLayout), unwrap(dLayout)};
  Problem problem;
  if (cublasStatus_t status = checkProblem(desc, *layouts[0], *layouts[1], *layouts[2], *layouts[3], problem);
      status != CUBLAS_STATUS_SUCCESS)
    return status;
  const MatrixLayout &la = *layouts[0], &lb = *layouts[1], &lc = *layouts[2], &ld = *layouts[3];

  // Without an algorithm the library runs its own heuristic; with one, it
  // must be one chosen for this problem.
  AlgorithmRecord record{};
  std::fill(std::begin(record.alignment), std::end(record.alignment), 16u);
  if (algorithm != nullptr) {
    std::memcpy(&record, algorithm, sizeof record);
    if (record.magic != kAlgorithmMagic)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "an algorithm no heuristic returned");
    if (record.problem != problemKey(desc, layouts))
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    "the algorithm was chosen for another problem (a descriptor or layout changed since)");
  }
  uint64_t time = record.variant < algorithmTimes.size() ? algorithmTimes[record.variant] : 0;
  if (time == kRefusedAlgorithm)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "algorithm " + std::to_string(record.variant) +
                                                   " does not run this problem (setCublasLtAlgorithmTimes)");
  if (record.workspaceBytes > 0 && (workspace == nullptr || workspaceBytes < record.workspaceBytes))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "the algorithm needs " + std::to_string(record.workspaceBytes) +
                                                   " bytes of workspace, given " + std::to_string(workspaceBytes));
  bool needsBias = addsBias(desc.epilogue) || writesBiasGradient(desc.epilogue);
  bool needsAux = writesAux(desc.epilogue) || readsAux(desc.epilogue);
  if (needsBias && desc.bias == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "the epilogue needs BIAS_POINTER, which is null");
  if (needsAux && desc.aux == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "the epilogue needs EPILOGUE_AUX_POINTER, which is null");
  const char* names[6] = {"A", "B", "C", "D", "the bias", "the aux matrix"};
  const void* pointers[6] = {a, b, c, d, needsBias ? desc.bias : nullptr, needsAux ? desc.aux : nullptr};
  for (int i = 0; i < 6; ++i)
    if (pointers[i] != nullptr && !aligned(pointers[i], record.alignment[i]))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(names[i]) + " is not " +
                                                     std::to_string(record.alignment[i]) +
                                                     "-byte aligned, as the algorithm was told it would be");
  if (a == nullptr || b == nullptr || d == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "a null A, B or D");

  bool inDouble = computesInDouble(desc.computeType);
  auto scalar = [inDouble](const void* at) {
    return inDouble ? *static_cast<const double*>(at) : double(*static_cast<const float*>(at));
  };
  // Host scalars are read at the call; device ones when the product runs,
  // since a kernel before it on the stream may write them.
  bool onDevice = desc.pointerMode == CUBLASLT_POINTER_MODE_DEVICE;
  if (onDevice && c == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "a device beta without C (the emulation cannot tell it is zero)");
  double hostAlpha = onDevice ? 0.0 : scalar(alpha), hostBeta = onDevice ? 0.0 : scalar(beta);
  if (hostBeta != 0.0 && c == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "a nonzero beta without C");
  // The product runs when the stream gets to it, with the descriptors as
  // they are now: the library reads them at the call.
  uint32_t variant = record.variant;
  std::string what = "cublasLtMatmul " + std::to_string(problem.m) + "x" + std::to_string(problem.n) + "x" +
                     std::to_string(problem.k) + " batches " + std::to_string(problem.batches) + " transa " +
                     std::to_string(int(desc.transa)) + " transb " + std::to_string(int(desc.transb)) +
                     " epilogue " + std::to_string(desc.epilogue) + " algorithm " + std::to_string(variant) +
                     " workspace " + std::to_string(record.workspaceBytes);
  submitToStream(stream, std::move(what), [desc, la = la, lb = lb, lc = lc, ld = ld, problem, inDouble, onDevice,
                                           scalar, alpha, beta, hostAlpha, hostBeta, a, b, c, d, variant, time] {
    chargeDeviceClock(time);
    if (variant < matmulsByVariant.size())
      ++matmulsByVariant[variant];
    double alphaValue = onDevice ? scalar(alpha) : hostAlpha, betaValue = onDevice ? scalar(beta) : hostBeta;
    bool aT = desc.transa == CUBLAS_OP_T, bT = desc.transb == CUBLAS_OP_T;
    auto round = [&](double value) { return inDouble ? value : double(float(value)); };
    const int64_t m = problem.m, n = problem.n, k = problem.k;
    uint32_t epilogue = desc.epilogue;
    std::vector<double> gradient;
    for (int64_t batch = 0; batch < problem.batches; ++batch) {
      int64_t aBase = batch * la.batchStride, bBase = batch * lb.batchStride, cBase = batch * lc.batchStride,
              dBase = batch * ld.batchStride;
      int64_t biasBase = batch * desc.biasBatchStride, auxBase = batch * desc.auxBatchStride;
      // op(A) by rows and op(B) by columns, as they enter the product.
      std::vector<double> rowsOfA(size_t(m * k)), columnsOfB(size_t(k * n));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p)
          rowsOfA[size_t(i * k + p)] =
              enterProduct(desc.computeType, load(la.type, a, aBase + (aT ? p + i * la.ld : i + p * la.ld)));
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p)
          columnsOfB[size_t(j * k + p)] =
              enterProduct(desc.computeType, load(lb.type, b, bBase + (bT ? j + p * lb.ld : p + j * lb.ld)));
      if (writesBiasGradient(epilogue))
        gradient.assign(size_t(epilogue == CUBLASLT_EPILOGUE_BGRADB ? n : m), 0.0);
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < m; ++i) {
          // The accumulator is the compute type: every partial sum rounds to it.
          double accumulator = 0.0;
          const double *row = rowsOfA.data() + i * k, *column = columnsOfB.data() + j * k;
          for (int64_t p = 0; p < k; ++p)
            accumulator = round(accumulator + round(row[p] * column[p]));
          double value = round(alphaValue * accumulator);
          if (betaValue != 0.0)
            value = round(value + betaValue * load(lc.type, c, cBase + i + j * lc.ld));
          if (addsBias(epilogue))
            value = round(value + load(problem.biasType, desc.bias, biasBase + i));
          if (writesAux(epilogue))
            store(problem.auxType, const_cast<void*>(desc.aux), auxBase + i + j * desc.auxLd, value);
          if (epilogueHas(epilogue, CUBLASLT_EPILOGUE_RELU) && !epilogueHas(epilogue, CUBLASLT_EPILOGUE_GELU))
            value = value > 0.0 ? value : 0.0;
          if (epilogue == CUBLASLT_EPILOGUE_GELU || epilogue == CUBLASLT_EPILOGUE_GELU_BIAS || writesAux(epilogue))
            value = round(gelu(value));
          if (readsAux(epilogue))
            value = round(value * geluDerivative(load(problem.auxType, desc.aux, auxBase + i + j * desc.auxLd)));
          if (epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD)
            gradient[size_t(i)] = round(gradient[size_t(i)] + value);
          store(ld.type, d, dBase + i + j * ld.ld, value);
        }
      }
      if (epilogue == CUBLASLT_EPILOGUE_BGRADA)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t p = 0; p < k; ++p)
            gradient[size_t(i)] = round(gradient[size_t(i)] + rowsOfA[size_t(i * k + p)]);
      if (epilogue == CUBLASLT_EPILOGUE_BGRADB)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t p = 0; p < k; ++p)
            gradient[size_t(j)] = round(gradient[size_t(j)] + columnsOfB[size_t(j * k + p)]);
      for (size_t e = 0; e < gradient.size(); ++e)
        store(problem.biasType, const_cast<void*>(desc.bias), biasBase + int64_t(e), gradient[e]);
    }
    ++matmuls;
  });
  return succeed();
}

const std::string& lastCublasLtRefusal() { return refusal; }

int64_t cublasLtMatmulCount() { return matmuls.load(); }

void setCublasLtAlgorithmTimes(std::vector<uint64_t> microseconds) {
  algorithmTimes = std::move(microseconds);
  if (algorithmTimes.size() > kModelledVariants)
    algorithmTimes.resize(kModelledVariants);
}

int64_t cublasLtMatmulsWithAlgorithm(int variant) {
  return variant >= 0 && std::size_t(variant) < matmulsByVariant.size() ? matmulsByVariant[std::size_t(variant)] : 0;
}

void setCublasLtOffersDeviceScalars(bool offered) { offersDeviceScalars.store(offered); }

size_t cublasLtGetVersion() { return kEmulatedCublasLtVersion; }

} // namespace ampjit::emulation
