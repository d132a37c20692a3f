#ifndef AMPJIT_TESTS_EMULATION_EMULATEDCUDNN_H
#define AMPJIT_TESTS_EMULATION_EMULATEDCUDNN_H

// A host model of the part of cuDNN's legacy API the CUDA backend calls
// (runtime/lib/cuda/Cudnn.cpp), written from the contract cuDNN's headers
// and API reference document, not from Cudnn.cpp:
//
//  * 4-d tensor and filter descriptors (NCHW and NHWC, packed), 2-d
//    cross-correlation descriptors with padding, stride, dilation, groups,
//    a compute type and a math type, ReLU activation descriptors;
//  * convolution forward, backward data and backward filter: the _v7
//    heuristics (every algorithm the model implements, as successful
//    results with their workspace, then the others as NOT_SUPPORTED), the
//    workspace-size queries, and the calls, which refuse descriptors that
//    do not chain (the output shape cudnnGetConvolution2dForwardOutputDim
//    gives, channels = filter channels x groups), type and compute-type
//    combinations outside the documented configurations, an algorithm that
//    needs more workspace than it is given, and pointers that are not
//    device memory. Precision is the configuration's: f32 accumulation for
//    f16, bf16 and f32 data (f64 for f64); f32 data is rounded to TF32 on
//    entry unless the descriptor's math type is CUDNN_FMA_MATH, as cuDNN
//    does by default on Ampere and later;
//  * cudnnAddTensor with broadcasting;
//  * spatial batch norm: the derived statistics descriptor (1xCx1x1, f32
//    for f16 data), training forward with running statistics (unbiased
//    variance) and saved mean and inverse standard deviation, inference,
//    backward from saved statistics, each with its alpha/beta blends;
//  * the extended batch norm calls with CUDNN_BATCHNORM_OPS_BN_ACTIVATION
//    and _BN_ADD_ACTIVATION, which exist only as the semi-persistent NHWC
//    kernel: refused with CUDNN_STATUS_NOT_SUPPORTED unless every tensor is
//    f16 and fully packed NHWC, the mode is CUDNN_BATCHNORM_SPATIAL_PERSISTENT,
//    the activation is a ReLU, the channels are a multiple of 4 for the add,
//    and the workspace (non-null) and reserve space are at least what the
//    size queries said. The forward writes the ReLU's mask to the reserve
//    space and the backward reads it from there, so a reserve not kept from
//    forward to backward gives NaN, the model's garbage.
//
// Work runs on the stream cudnnSetStream bound (EmulatedStreams.h), with
// descriptors and scalars as they were at the call; a convolution scribbles
// NaN over the workspace it was given, so nothing may rely on a workspace's
// contents across steps. Attributes, modes and types the model does not
// implement are refused by name rather than approximated.
// cudnnGetErrorString appends why the latest call was refused.
//
// The backend's sources built for the emulation reach it through
// EmulatedCudaRuntime.h, which sends their cudnn* calls here.
//
// Test-only: never part of a shipped binary.

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ampjit::emulation {

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream);
const char* cudnnGetErrorString(cudnnStatus_t status);

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* descriptor);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t descriptor);
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t descriptor, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w);
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* descriptor);
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t descriptor);
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t descriptor, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w);
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* descriptor);
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t descriptor);
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t descriptor, int padH, int padW,
                                              int strideH, int strideW, int dilationH, int dilationW,
                                              cudnnConvolutionMode_t mode, cudnnDataType_t computeType);
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t descriptor, int groups);
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t descriptor, cudnnMathType_t mathType);
cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t* descriptor);
cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t descriptor);
cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t descriptor, cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t nan, double coefficient);

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int* count);
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t convolution,
                                                     const cudnnTensorDescriptor_t y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* results);
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t convolution,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      std::size_t* bytes);
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void* x, const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convolution, cudnnConvolutionFwdAlgo_t algo,
                                      void* workspace, std::size_t workspaceBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y);
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle, int* count);
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t convolution,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results);
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t convolution,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes);
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha, const cudnnFilterDescriptor_t wDesc,
                                           const void* w, const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convolution,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workspace,
                                           std::size_t workspaceBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx);
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle, int* count);
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t convolution,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* results);
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t convolution,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes);
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convolution,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             std::size_t workspaceBytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw);
cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t aDesc,
                             const void* a, const void* beta, const cudnnTensorDescriptor_t cDesc, void* c);

cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derived, const cudnnTensorDescriptor_t x,
                                            cudnnBatchNormMode_t mode);
cudnnStatus_t cudnnBatchNormalizationForwardTraining(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                                     const void* alpha, const void* beta,
                                                     const cudnnTensorDescriptor_t xDesc, const void* x,
                                                     const cudnnTensorDescriptor_t yDesc, void* y,
                                                     const cudnnTensorDescriptor_t statisticsDesc, const void* scale,
                                                     const void* bias, double factor, void* runningMean,
                                                     void* runningVariance, double epsilon, void* saveMean,
                                                     void* saveInvVariance);
cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                                      const void* alpha, const void* beta,
                                                      const cudnnTensorDescriptor_t xDesc, const void* x,
                                                      const cudnnTensorDescriptor_t yDesc, void* y,
                                                      const cudnnTensorDescriptor_t statisticsDesc, const void* scale,
                                                      const void* bias, const void* estimatedMean,
                                                      const void* estimatedVariance, double epsilon);
cudnnStatus_t cudnnBatchNormalizationBackward(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                              const void* alphaData, const void* betaData, const void* alphaParameters,
                                              const void* betaParameters, const cudnnTensorDescriptor_t xDesc,
                                              const void* x, const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                              const cudnnTensorDescriptor_t dxDesc, void* dx,
                                              const cudnnTensorDescriptor_t statisticsDesc, const void* scale,
                                              void* dScale, void* dBias, double epsilon, const void* savedMean,
                                              const void* savedInvVariance);
cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t x,
    const cudnnTensorDescriptor_t z, const cudnnTensorDescriptor_t y, const cudnnTensorDescriptor_t statistics,
    const cudnnActivationDescriptor_t activation, std::size_t* bytes);
cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t x,
    const cudnnTensorDescriptor_t y, const cudnnTensorDescriptor_t dy, const cudnnTensorDescriptor_t dz,
    const cudnnTensorDescriptor_t dx, const cudnnTensorDescriptor_t statistics,
    const cudnnActivationDescriptor_t activation, std::size_t* bytes);
cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                                                   cudnnBatchNormOps_t ops,
                                                                   const cudnnActivationDescriptor_t activation,
                                                                   const cudnnTensorDescriptor_t x, std::size_t* bytes);
cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t zDesc, const void* z,
    const cudnnTensorDescriptor_t yDesc, void* y, const cudnnTensorDescriptor_t statisticsDesc, const void* scale,
    const void* bias, double factor, void* runningMean, void* runningVariance, double epsilon, void* saveMean,
    void* saveInvVariance, cudnnActivationDescriptor_t activation, void* workspace, std::size_t workspaceBytes,
    void* reserve, std::size_t reserveBytes);
cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void* alphaData,
    const void* betaData, const void* alphaParameters, const void* betaParameters, const cudnnTensorDescriptor_t xDesc,
    const void* x, const cudnnTensorDescriptor_t yDesc, const void* y, const cudnnTensorDescriptor_t dyDesc,
    const void* dy, const cudnnTensorDescriptor_t dzDesc, void* dz, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const cudnnTensorDescriptor_t statisticsDesc, const void* scale, const void* bias, void* dScale, void* dBias,
    double epsilon, const void* savedMean, const void* savedInvVariance, cudnnActivationDescriptor_t activation,
    void* workspace, std::size_t workspaceBytes, void* reserve, std::size_t reserveBytes);

/// Why the latest refused call was refused, in words ("" if none was).
const std::string& lastCudnnRefusal();

/// What the model has computed since the process started, as tests count
/// it to show which path a step took.
struct CudnnCounts {
  int64_t convolutions = 0;      // forward, backward data and backward filter
  int64_t batchNorms = 0;        // the plain calls, and the extended ones without an activation
  int64_t fusedBatchNorms = 0;   // the extended calls with an activation (forward or backward)
};
CudnnCounts cudnnCounts();

} // namespace ampjit::emulation

#endif // AMPJIT_TESTS_EMULATION_EMULATEDCUDNN_H
