#ifndef AMPJIT_TESTS_EMULATION_EMULATEDCUDARUNTIME_H
#define AMPJIT_TESTS_EMULATION_EMULATEDCUDARUNTIME_H

// The CUDA runtime calls the backend's kernel and step sources make, sent to
// the host model of the device's memory, streams, events and graphs
// (EmulatedStreams.h), their cuBLASLt calls, sent to the host model of
// cuBLASLt (EmulatedCublasLt.h), and their cuDNN calls, sent to the host
// model of cuDNN (EmulatedCudnn.h). Included first by the sources built for the
// emulation (tests/emulation/CMakeLists.txt), after the CUDA headers so
// their declarations keep their meaning: only calls are redirected.

#include "CudaEmulation.h"
#include "EmulatedCublasLt.h"
#include "EmulatedCudnn.h"
#include "EmulatedStreams.h"

#define cudaGetLastError() ::ampjit::emulation::takeLastError()
#define cudaGetDeviceCount ::ampjit::emulation::cudaGetDeviceCount
#define cudaSetDevice ::ampjit::emulation::cudaSetDevice
#define cudaDeviceGetAttribute ::ampjit::emulation::cudaDeviceGetAttribute
#define cudaDeviceSynchronize ::ampjit::emulation::cudaDeviceSynchronize
#define cudaStreamCreateWithFlags ::ampjit::emulation::cudaStreamCreateWithFlags
#define cudaDeviceGetStreamPriorityRange ::ampjit::emulation::cudaDeviceGetStreamPriorityRange
#define cudaStreamCreateWithPriority ::ampjit::emulation::cudaStreamCreateWithPriority
#define cudaStreamGetPriority ::ampjit::emulation::cudaStreamGetPriority
#define cudaStreamDestroy ::ampjit::emulation::cudaStreamDestroy
#define cudaStreamSynchronize ::ampjit::emulation::cudaStreamSynchronize
#define cudaStreamBeginCapture ::ampjit::emulation::cudaStreamBeginCapture
#define cudaStreamEndCapture ::ampjit::emulation::cudaStreamEndCapture
#define cudaEventCreate ::ampjit::emulation::cudaEventCreate
#define cudaEventCreateWithFlags ::ampjit::emulation::cudaEventCreateWithFlags
#define cudaEventDestroy ::ampjit::emulation::cudaEventDestroy
#define cudaEventRecord ::ampjit::emulation::cudaEventRecord
#define cudaStreamWaitEvent ::ampjit::emulation::cudaStreamWaitEvent
#define cudaEventSynchronize ::ampjit::emulation::cudaEventSynchronize
#define cudaEventQuery ::ampjit::emulation::cudaEventQuery
#define cudaEventElapsedTime ::ampjit::emulation::cudaEventElapsedTime
#define cudaGraphInstantiate ::ampjit::emulation::cudaGraphInstantiate
#define cudaGraphExecUpdate ::ampjit::emulation::cudaGraphExecUpdate
#define cudaGraphLaunch ::ampjit::emulation::cudaGraphLaunch
#define cudaGraphDestroy ::ampjit::emulation::cudaGraphDestroy
#define cudaGraphExecDestroy ::ampjit::emulation::cudaGraphExecDestroy
#define cudaDeviceGetDefaultMemPool ::ampjit::emulation::cudaDeviceGetDefaultMemPool
#define cudaMemPoolSetAttribute ::ampjit::emulation::cudaMemPoolSetAttribute
#define cudaMemPoolGetAttribute ::ampjit::emulation::cudaMemPoolGetAttribute
// The allocation calls have template overloads in cuda_runtime.h.
#define cudaMallocFromPoolAsync(pointer, bytes, pool, stream)                                               \
  ::ampjit::emulation::cudaMallocFromPoolAsync(reinterpret_cast<void**>(pointer), bytes, pool, stream)
#define cudaMalloc(pointer, bytes) ::ampjit::emulation::cudaMalloc(reinterpret_cast<void**>(pointer), bytes)
#define cudaMallocHost(pointer, bytes) ::ampjit::emulation::cudaMallocHost(reinterpret_cast<void**>(pointer), bytes)
#define cudaFreeAsync ::ampjit::emulation::cudaFreeAsync
#define cudaFree ::ampjit::emulation::cudaFree
#define cudaFreeHost ::ampjit::emulation::cudaFreeHost
#define cudaPointerGetAttributes ::ampjit::emulation::cudaPointerGetAttributes
#define cudaMemcpyAsync ::ampjit::emulation::cudaMemcpyAsync
#define cudaMemcpy ::ampjit::emulation::cudaMemcpy
#define cudaMemsetAsync ::ampjit::emulation::cudaMemsetAsync
#define cudaLibraryUnload ::ampjit::emulation::cudaLibraryUnload

#define cublasLtCreate ::ampjit::emulation::cublasLtCreate
#define cublasLtDestroy ::ampjit::emulation::cublasLtDestroy
#define cublasLtMatmulDescCreate ::ampjit::emulation::cublasLtMatmulDescCreate
#define cublasLtMatmulDescDestroy ::ampjit::emulation::cublasLtMatmulDescDestroy
#define cublasLtMatmulDescSetAttribute ::ampjit::emulation::cublasLtMatmulDescSetAttribute
#define cublasLtMatrixLayoutCreate ::ampjit::emulation::cublasLtMatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy ::ampjit::emulation::cublasLtMatrixLayoutDestroy
#define cublasLtMatrixLayoutSetAttribute ::ampjit::emulation::cublasLtMatrixLayoutSetAttribute
#define cublasLtMatmulPreferenceCreate ::ampjit::emulation::cublasLtMatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy ::ampjit::emulation::cublasLtMatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute ::ampjit::emulation::cublasLtMatmulPreferenceSetAttribute
#define cublasLtMatmulAlgoGetHeuristic ::ampjit::emulation::cublasLtMatmulAlgoGetHeuristic
#define cublasLtMatmulAlgoConfigGetAttribute ::ampjit::emulation::cublasLtMatmulAlgoConfigGetAttribute
#define cublasLtMatmul ::ampjit::emulation::cublasLtMatmul
#define cublasLtGetVersion ::ampjit::emulation::cublasLtGetVersion

#define cudnnCreate ::ampjit::emulation::cudnnCreate
#define cudnnDestroy ::ampjit::emulation::cudnnDestroy
#define cudnnSetStream ::ampjit::emulation::cudnnSetStream
#define cudnnGetErrorString ::ampjit::emulation::cudnnGetErrorString
#define cudnnCreateTensorDescriptor ::ampjit::emulation::cudnnCreateTensorDescriptor
#define cudnnDestroyTensorDescriptor ::ampjit::emulation::cudnnDestroyTensorDescriptor
#define cudnnSetTensor4dDescriptor ::ampjit::emulation::cudnnSetTensor4dDescriptor
#define cudnnCreateFilterDescriptor ::ampjit::emulation::cudnnCreateFilterDescriptor
#define cudnnDestroyFilterDescriptor ::ampjit::emulation::cudnnDestroyFilterDescriptor
#define cudnnSetFilter4dDescriptor ::ampjit::emulation::cudnnSetFilter4dDescriptor
#define cudnnCreateConvolutionDescriptor ::ampjit::emulation::cudnnCreateConvolutionDescriptor
#define cudnnDestroyConvolutionDescriptor ::ampjit::emulation::cudnnDestroyConvolutionDescriptor
#define cudnnSetConvolution2dDescriptor ::ampjit::emulation::cudnnSetConvolution2dDescriptor
#define cudnnSetConvolutionGroupCount ::ampjit::emulation::cudnnSetConvolutionGroupCount
#define cudnnSetConvolutionMathType ::ampjit::emulation::cudnnSetConvolutionMathType
#define cudnnCreateActivationDescriptor ::ampjit::emulation::cudnnCreateActivationDescriptor
#define cudnnDestroyActivationDescriptor ::ampjit::emulation::cudnnDestroyActivationDescriptor
#define cudnnSetActivationDescriptor ::ampjit::emulation::cudnnSetActivationDescriptor
#define cudnnGetConvolutionForwardAlgorithmMaxCount ::ampjit::emulation::cudnnGetConvolutionForwardAlgorithmMaxCount
#define cudnnGetConvolutionForwardAlgorithm_v7 ::ampjit::emulation::cudnnGetConvolutionForwardAlgorithm_v7
#define cudnnGetConvolutionForwardWorkspaceSize ::ampjit::emulation::cudnnGetConvolutionForwardWorkspaceSize
#define cudnnConvolutionForward ::ampjit::emulation::cudnnConvolutionForward
#define cudnnGetConvolutionBackwardDataAlgorithmMaxCount ::ampjit::emulation::cudnnGetConvolutionBackwardDataAlgorithmMaxCount
#define cudnnGetConvolutionBackwardDataAlgorithm_v7 ::ampjit::emulation::cudnnGetConvolutionBackwardDataAlgorithm_v7
#define cudnnGetConvolutionBackwardDataWorkspaceSize ::ampjit::emulation::cudnnGetConvolutionBackwardDataWorkspaceSize
#define cudnnConvolutionBackwardData ::ampjit::emulation::cudnnConvolutionBackwardData
#define cudnnGetConvolutionBackwardFilterAlgorithmMaxCount ::ampjit::emulation::cudnnGetConvolutionBackwardFilterAlgorithmMaxCount
#define cudnnGetConvolutionBackwardFilterAlgorithm_v7 ::ampjit::emulation::cudnnGetConvolutionBackwardFilterAlgorithm_v7
#define cudnnGetConvolutionBackwardFilterWorkspaceSize ::ampjit::emulation::cudnnGetConvolutionBackwardFilterWorkspaceSize
#define cudnnConvolutionBackwardFilter ::ampjit::emulation::cudnnConvolutionBackwardFilter
#define cudnnAddTensor ::ampjit::emulation::cudnnAddTensor
#define cudnnDeriveBNTensorDescriptor ::ampjit::emulation::cudnnDeriveBNTensorDescriptor
#define cudnnBatchNormalizationForwardTraining ::ampjit::emulation::cudnnBatchNormalizationForwardTraining
#define cudnnBatchNormalizationForwardInference ::ampjit::emulation::cudnnBatchNormalizationForwardInference
#define cudnnBatchNormalizationBackward ::ampjit::emulation::cudnnBatchNormalizationBackward
#define cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize ::ampjit::emulation::cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize
#define cudnnGetBatchNormalizationBackwardExWorkspaceSize ::ampjit::emulation::cudnnGetBatchNormalizationBackwardExWorkspaceSize
#define cudnnGetBatchNormalizationTrainingExReserveSpaceSize ::ampjit::emulation::cudnnGetBatchNormalizationTrainingExReserveSpaceSize
#define cudnnBatchNormalizationForwardTrainingEx ::ampjit::emulation::cudnnBatchNormalizationForwardTrainingEx
#define cudnnBatchNormalizationBackwardEx ::ampjit::emulation::cudnnBatchNormalizationBackwardEx

#endif // AMPJIT_TESTS_EMULATION_EMULATEDCUDARUNTIME_H
