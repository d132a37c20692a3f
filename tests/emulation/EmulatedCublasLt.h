#ifndef AMPJIT_TESTS_EMULATION_EMULATEDCUBLASLT_H
#define AMPJIT_TESTS_EMULATION_EMULATEDCUBLASLT_H

// A host model of the part of cuBLASLt the CUDA backend calls, written from
// the contract cublasLt.h documents, not from CublasLtGemm.cpp: column-major
// matrices with leading dimensions, op(A) [m, k] times op(B) [k, n] into D
// [m, n], strided batches, alpha and beta in the scale type, the compute
// types' precision (TF32 and the other FAST modes round their inputs), and
// the epilogues as the header defines them (a bias per row of D; GELU, the
// tanh approximation, with its input written to or read from the aux
// matrix; DGELU_BGRAD's bias gradient a sum over the columns of D; BGRADA a
// sum of op(A) over k per row of D, BGRADB of op(B) over k per column).
//
// It refuses what the library refuses or would run wrong, so a mistake in
// how the backend drives cuBLASLt fails in CI instead of on the first GPU:
// attribute sizes that do not match the documented types, type and compute
// combinations outside cuBLASLt's table, operand shapes that do not chain,
// leading dimensions shorter than a column, an aux leading dimension that is
// not a multiple of 8, a missing bias or aux pointer, an algorithm used for
// another problem than the one the heuristic chose it for, pointers less
// aligned than the heuristic was promised (the preference's minimum
// alignments, and the bias and aux pointers' values at heuristic time), and
// a workspace smaller than the algorithm's. Attributes it does not model are
// refused by name rather than ignored. lastCublasLtRefusal() says why.
//
// cublasLtMatmul checks at the call and multiplies when its stream gets to
// it (EmulatedStreams.h), with the descriptors and scalars as they were at
// the call, as the library reads them then.
//
// The backend's sources built for the emulation reach it through
// EmulatedCudaRuntime.h, which sends their cublasLt* calls here.
//
// Test-only: never part of a shipped binary.

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ampjit::emulation {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* descriptor, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t descriptor);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t descriptor, cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, std::size_t bytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t columns, int64_t leadingDimension);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute,
                                                const void* value, std::size_t bytes);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute, const void* value,
                                                    std::size_t bytes);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t descriptor,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned);
/// The chosen algorithm's configuration as cuBLASLt reports it: its ID is
/// its place in the heuristic's list, tile and stages undefined, and it splits K only where
/// the heuristic gave it workspace, reducing in the compute type.
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algorithm,
                                                    cublasLtMatmulAlgoConfigAttributes_t attribute, void* buffer,
                                                    std::size_t bytes, std::size_t* written);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t descriptor, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t aLayout, const void* b,
                              cublasLtMatrixLayout_t bLayout, const void* beta, const void* c,
                              cublasLtMatrixLayout_t cLayout, void* d, cublasLtMatrixLayout_t dLayout,
                              const cublasLtMatmulAlgo_t* algorithm, void* workspace, std::size_t workspaceBytes,
                              cudaStream_t stream);

/// Why the latest refused call was refused, in words ("" if none was).
const std::string& lastCublasLtRefusal();

/// Products cublasLtMatmul computed since the process started (a batch
/// counts once): what a test counts to show that a GEMM ran here.
int64_t cublasLtMatmulCount();

/// The algorithms the heuristic offers from now on, one per entry in its
/// order (at most kModelledVariants; none, the default: one), each with the
/// microseconds of the emulated device's clock its product takes
/// (EmulatedStreams.h's event times), kRefusedAlgorithm for one that
/// cublasLtMatmul refuses to run. They compute the same values: what GEMM
/// tuning measures and chooses, not what it computes.
inline constexpr uint64_t kRefusedAlgorithm = ~uint64_t(0);
inline constexpr std::size_t kModelledVariants = 32;
void setCublasLtAlgorithmTimes(std::vector<uint64_t> microseconds);
/// Products computed with the heuristic's `variant`-th algorithm since the
/// process started (cublasLtMatmulAlgoConfigGetAttribute's ALGO_CONFIG_ID).
int64_t cublasLtMatmulsWithAlgorithm(int variant);

/// Whether the heuristic offers algorithms whose alpha and beta are read
/// from the device (CUBLASLT_POINTER_MODE_DEVICE) from now on: true by
/// default; false models a cuBLASLt without them (NOT_SUPPORTED), as for a
/// product an update would fold into.
void setCublasLtOffersDeviceScalars(bool offered);

/// cuBLASLt's version as this model reports it.
inline constexpr size_t kEmulatedCublasLtVersion = 130000;
size_t cublasLtGetVersion();

} // namespace ampjit::emulation

#endif // AMPJIT_TESTS_EMULATION_EMULATEDCUBLASLT_H
