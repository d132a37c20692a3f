//===- EmulatedCudnnTest.cpp - the host model of cuDNN itself --------------===//
//
// tests/emulation/EmulatedCudnn.h stands in for cuDNN when the backend's
// convolution and batch-norm steps run without a GPU; these tests show that
// it keeps cuDNN's documented contract on small cases worked out by hand
// (padding, stride, groups, both gradients, blends, TF32 unless FMA math,
// batch statistics and the unbiased running variance, the ReLU and its mask
// kept in the reserve space) and refuses what the library refuses, so a
// CudnnKernelTest passing on it means Cudnn.cpp drives cuDNN as documented.
// Calls are made directly and qualified, as in EmulatedCublasLtTest.cpp; no
// stream is bound, so work runs at the call.
//
//===----------------------------------------------------------------------===//

#include "EmulatedCudnn.h"
#include "EmulatedStreams.h"

#include "ampjit/runtime/LowPrecision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace ampjit::emulation {
namespace {

/// Emulated device memory holding `values` (the emulated device's memory is
/// host memory, so tests read and write it directly).
template <typename T> class DeviceArray {
public:
  explicit DeviceArray(std::vector<T> values) : size_(values.size()) {
    EXPECT_EQ(emulation::cudaMalloc(reinterpret_cast<void**>(&data_), std::max<std::size_t>(size_, 1) * sizeof(T)),
              cudaSuccess);
    std::memcpy(data_, values.data(), size_ * sizeof(T));
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { emulation::cudaFree(data_); }
  T* get() const { return data_; }
  std::vector<T> values() const { return std::vector<T>(data_, data_ + size_); }

private:
  T* data_ = nullptr;
  std::size_t size_;
};

/// `count` copies of `value` (DeviceArray takes only vectors, so that
/// `DeviceArray<float>({2})` is the one value 2, never two zeros).
template <typename T> std::vector<T> filled(std::size_t count, T value = T{}) { return std::vector<T>(count, value); }

std::vector<uint16_t> toHalf(const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float value : values)
    bits.push_back(runtime::floatToHalf(value));
  return bits;
}

std::vector<float> fromHalf(const std::vector<uint16_t>& bits) {
  std::vector<float> values;
  for (uint16_t value : bits)
    values.push_back(runtime::halfToFloat(value));
  return values;
}

class CudnnModel : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_EQ(emulation::cudnnCreate(&handle), CUDNN_STATUS_SUCCESS); }
  void TearDown() override {
    for (cudnnTensorDescriptor_t d : tensors)
      emulation::cudnnDestroyTensorDescriptor(d);
    for (cudnnFilterDescriptor_t d : filters)
      emulation::cudnnDestroyFilterDescriptor(d);
    for (cudnnConvolutionDescriptor_t d : convolutions)
      emulation::cudnnDestroyConvolutionDescriptor(d);
    for (cudnnActivationDescriptor_t d : activations)
      emulation::cudnnDestroyActivationDescriptor(d);
    emulation::cudnnDestroy(handle);
  }

  cudnnTensorDescriptor_t tensor(int n, int c, int h, int w, cudnnDataType_t type = CUDNN_DATA_FLOAT,
                                 cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW) {
    cudnnTensorDescriptor_t d = nullptr;
    EXPECT_EQ(emulation::cudnnCreateTensorDescriptor(&d), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(emulation::cudnnSetTensor4dDescriptor(d, format, type, n, c, h, w), CUDNN_STATUS_SUCCESS);
    tensors.push_back(d);
    return d;
  }
  cudnnFilterDescriptor_t filter(int k, int c, int h, int w, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    cudnnFilterDescriptor_t d = nullptr;
    EXPECT_EQ(emulation::cudnnCreateFilterDescriptor(&d), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(emulation::cudnnSetFilter4dDescriptor(d, type, CUDNN_TENSOR_NCHW, k, c, h, w), CUDNN_STATUS_SUCCESS);
    filters.push_back(d);
    return d;
  }
  cudnnConvolutionDescriptor_t convolution(int pad, int stride, int groups = 1,
                                           cudnnMathType_t mathType = CUDNN_FMA_MATH) {
    cudnnConvolutionDescriptor_t d = nullptr;
    EXPECT_EQ(emulation::cudnnCreateConvolutionDescriptor(&d), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(emulation::cudnnSetConvolution2dDescriptor(d, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                         CUDNN_DATA_FLOAT),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(emulation::cudnnSetConvolutionGroupCount(d, groups), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(emulation::cudnnSetConvolutionMathType(d, mathType), CUDNN_STATUS_SUCCESS);
    convolutions.push_back(d);
    return d;
  }
  cudnnActivationDescriptor_t relu() {
    cudnnActivationDescriptor_t d = nullptr;
    EXPECT_EQ(emulation::cudnnCreateActivationDescriptor(&d), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(emulation::cudnnSetActivationDescriptor(d, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
              CUDNN_STATUS_SUCCESS);
    activations.push_back(d);
    return d;
  }

  /// The forward convolution with IMPLICIT_GEMM (no workspace), alpha 1, `beta`.
  cudnnStatus_t forward(cudnnTensorDescriptor_t x, const void* xData, cudnnFilterDescriptor_t w, const void* wData,
                        cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y, void* yData, float beta = 0.0f) {
    return emulation::cudnnConvolutionForward(handle, &one, x, xData, w, wData, conv,
                                              CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &beta, y, yData);
  }

  cudnnHandle_t handle = nullptr;
  float one = 1.0f, zero = 0.0f;
  std::vector<cudnnTensorDescriptor_t> tensors;
  std::vector<cudnnFilterDescriptor_t> filters;
  std::vector<cudnnConvolutionDescriptor_t> convolutions;
  std::vector<cudnnActivationDescriptor_t> activations;
};

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

TEST_F(CudnnModel, ConvolutionPadsStridesAndBlends) {
  // x = 1..9 in 3x3; w = [[1, 0], [0, -1]]: each output is x[i][j] - x[i+1][j+1].
  DeviceArray<float> x({1, 2, 3, 4, 5, 6, 7, 8, 9}), w({1, 0, 0, -1});
  DeviceArray<float> y(filled(4, 0.0f));
  cudnnTensorDescriptor_t xd = tensor(1, 1, 3, 3), yd = tensor(1, 1, 2, 2);
  cudnnFilterDescriptor_t wd = filter(1, 1, 2, 2);
  ASSERT_EQ(forward(xd, x.get(), wd, w.get(), convolution(0, 1), yd, y.get()), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(y.values(), (std::vector<float>{-4, -4, -4, -4}));
  // Padding 1, stride 2: windows start at (-1, -1), (-1, 1), (1, -1), (1, 1).
  ASSERT_EQ(forward(xd, x.get(), wd, w.get(), convolution(1, 2), yd, y.get()), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(y.values(), (std::vector<float>{-1, -3, -7, -4}));
  // beta 1 adds what y held.
  ASSERT_EQ(forward(xd, x.get(), wd, w.get(), convolution(1, 2), yd, y.get(), 1.0f), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(y.values(), (std::vector<float>{-2, -6, -14, -8}));
}

TEST_F(CudnnModel, GroupsSplitTheChannels) {
  DeviceArray<float> x({2, 3}), w({10, 100}), y(filled(2, 0.0f));
  // Two groups: each output channel sees its own input channel.
  ASSERT_EQ(forward(tensor(1, 2, 1, 1), x.get(), filter(2, 1, 1, 1), w.get(), convolution(0, 1, 2), tensor(1, 2, 1, 1),
                    y.get()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(y.values(), (std::vector<float>{20, 300}));
  // One group: the one output channel sums both.
  ASSERT_EQ(forward(tensor(1, 2, 1, 1), x.get(), filter(1, 2, 1, 1), w.get(), convolution(0, 1), tensor(1, 1, 1, 1),
                    y.get()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(y.values()[0], 320.0f);
}

TEST_F(CudnnModel, GradientsOfASingleWindow) {
  // y = sum(x * w) over one 2x2 window: dx = dy * w, dw = dy * x.
  DeviceArray<float> x({1, 2, 3, 4}), w({5, 6, 7, 8}), dy({2}), dx(filled(4, 0.0f)), dw(filled(4, 0.0f));
  cudnnTensorDescriptor_t xd = tensor(1, 1, 2, 2), yd = tensor(1, 1, 1, 1);
  cudnnFilterDescriptor_t wd = filter(1, 1, 2, 2);
  cudnnConvolutionDescriptor_t conv = convolution(0, 1);
  ASSERT_EQ(emulation::cudnnConvolutionBackwardData(handle, &one, wd, w.get(), yd, dy.get(), conv,
                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, nullptr, 0, &zero, xd, dx.get()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(dx.values(), (std::vector<float>{10, 12, 14, 16}));
  ASSERT_EQ(emulation::cudnnConvolutionBackwardFilter(handle, &one, xd, x.get(), yd, dy.get(), conv,
                                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, nullptr, 0, &zero, wd,
                                                      dw.get()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(dw.values(), (std::vector<float>{2, 4, 6, 8}));
}

TEST_F(CudnnModel, FloatDataRunsInTf32UnlessTheMathTypeIsFma) {
  float exact = 1.0f + std::ldexp(1.0f, -20); // below TF32's 10-bit mantissa
  DeviceArray<float> x({exact}), w({1.0f}), y(filled(1, 0.0f));
  cudnnTensorDescriptor_t xd = tensor(1, 1, 1, 1), yd = tensor(1, 1, 1, 1);
  cudnnFilterDescriptor_t wd = filter(1, 1, 1, 1);
  ASSERT_EQ(forward(xd, x.get(), wd, w.get(), convolution(0, 1, 1, CUDNN_FMA_MATH), yd, y.get()), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(y.values()[0], exact);
  ASSERT_EQ(forward(xd, x.get(), wd, w.get(), convolution(0, 1, 1, CUDNN_DEFAULT_MATH), yd, y.get()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(y.values()[0], 1.0f);
}

TEST_F(CudnnModel, HeuristicsReportWorkspacesTheCallsThenRequire) {
  cudnnTensorDescriptor_t xd = tensor(2, 4, 6, 6), yd = tensor(2, 8, 6, 6);
  cudnnFilterDescriptor_t wd = filter(8, 4, 3, 3);
  cudnnConvolutionDescriptor_t conv = convolution(1, 1);
  int count = 0, returned = 0;
  ASSERT_EQ(emulation::cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &count), CUDNN_STATUS_SUCCESS);
  std::vector<cudnnConvolutionFwdAlgoPerf_t> results(static_cast<std::size_t>(count));
  ASSERT_EQ(emulation::cudnnGetConvolutionForwardAlgorithm_v7(handle, xd, wd, conv, yd, count, &returned, results.data()),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(returned, count);
  EXPECT_EQ(results[0].status, CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(results[0].mathType, CUDNN_FMA_MATH);
  EXPECT_EQ(results[size_t(count) - 1].status, CUDNN_STATUS_NOT_SUPPORTED);
  std::size_t bytes = 0;
  ASSERT_EQ(emulation::cudnnGetConvolutionForwardWorkspaceSize(handle, xd, wd, conv, yd, results[0].algo, &bytes),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(bytes, results[0].memory);
  ASSERT_GT(bytes, 0u);

  DeviceArray<float> x(filled(2 * 4 * 6 * 6, 1.0f)), w(filled(8 * 4 * 3 * 3, 1.0f)), y(filled(2 * 8 * 6 * 6, 0.0f));
  DeviceArray<std::byte> workspace(filled<std::byte>(bytes));
  auto run = [&](void* space, std::size_t size) {
    return emulation::cudnnConvolutionForward(handle, &one, xd, x.get(), wd, w.get(), conv, results[0].algo, space,
                                              size, &zero, yd, y.get());
  };
  EXPECT_EQ(run(workspace.get(), bytes - 1), CUDNN_STATUS_BAD_PARAM);
  EXPECT_NE(lastCudnnRefusal().find("bytes of workspace"), std::string::npos) << lastCudnnRefusal();
  EXPECT_EQ(run(nullptr, 0), CUDNN_STATUS_BAD_PARAM);
  ASSERT_EQ(run(workspace.get(), bytes), CUDNN_STATUS_SUCCESS);
  // The centre output of a 3x3 window of ones over 4 channels of ones.
  EXPECT_EQ(y.values()[1 * 6 + 1], 36.0f);
  // The workspace is scribbled on: nothing may count on what it held.
  EXPECT_EQ(workspace.values()[0], std::byte(0xff));
}

TEST_F(CudnnModel, RefusesDescriptorsThatDoNotChainAndHostOperands) {
  DeviceArray<float> x(filled(9, 1.0f)), w(filled(4, 1.0f)), y(filled(9, 0.0f));
  cudnnTensorDescriptor_t xd = tensor(1, 1, 3, 3);
  cudnnFilterDescriptor_t wd = filter(1, 1, 2, 2);
  // A 3x3 input and a 2x2 filter give 2x2, not 3x3.
  EXPECT_EQ(forward(xd, x.get(), wd, w.get(), convolution(0, 1), tensor(1, 1, 3, 3), y.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_NE(lastCudnnRefusal().find("the convolution gives 1x1x2x2"), std::string::npos) << lastCudnnRefusal();
  // x of f16 with a filter of f32.
  EXPECT_EQ(forward(tensor(1, 1, 3, 3, CUDNN_DATA_HALF), x.get(), wd, w.get(), convolution(0, 1), tensor(1, 1, 2, 2),
                    y.get()),
            CUDNN_STATUS_NOT_SUPPORTED);
  // Input channels must be the filter's times the groups.
  EXPECT_EQ(forward(tensor(1, 2, 3, 3), x.get(), wd, w.get(), convolution(0, 1), tensor(1, 1, 2, 2), y.get()),
            CUDNN_STATUS_BAD_PARAM);
  // Operands in host memory.
  std::vector<float> host(9, 1.0f);
  EXPECT_EQ(forward(xd, host.data(), wd, w.get(), convolution(0, 1), tensor(1, 1, 2, 2), y.get()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_NE(std::string(emulation::cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM)).find("x is not device memory"),
            std::string::npos);
  // And a blend factor in device memory.
  DeviceArray<float> deviceOne({1.0f});
  float beta = 0.0f;
  EXPECT_EQ(emulation::cudnnConvolutionForward(handle, deviceOne.get(), xd, x.get(), wd, w.get(), convolution(0, 1),
                                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &beta,
                                               tensor(1, 1, 2, 2), y.get()),
            CUDNN_STATUS_BAD_PARAM);
}

TEST_F(CudnnModel, AddTensorBroadcastsABiasPerChannel) {
  DeviceArray<float> bias({1, 10}), c({0, 0, 0, 0, 5, 5, 5, 5});
  ASSERT_EQ(emulation::cudnnAddTensor(handle, &one, tensor(1, 2, 1, 1), bias.get(), &one, tensor(1, 2, 2, 2), c.get()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(c.values(), (std::vector<float>{1, 1, 1, 1, 15, 15, 15, 15}));
  EXPECT_EQ(emulation::cudnnAddTensor(handle, &one, tensor(1, 3, 1, 1), bias.get(), &one, tensor(1, 2, 2, 2), c.get()),
            CUDNN_STATUS_BAD_PARAM);
}

//===----------------------------------------------------------------------===//
// Batch norm
//===----------------------------------------------------------------------===//

TEST_F(CudnnModel, BatchNormTrainingStatisticsAndRunningUpdate) {
  // One channel of 1, 2, 3, 4: mean 2.5, biased variance 1.25, unbiased 5/3.
  DeviceArray<float> x({1, 2, 3, 4}), y(filled(4, 0.0f)), scale({2}), bias({1}), runningMean({0}), runningVar({1}),
      saveMean(filled(1, 0.0f)), saveInvstd(filled(1, 0.0f));
  cudnnTensorDescriptor_t xd = tensor(1, 1, 2, 2), statistics = nullptr;
  ASSERT_EQ(emulation::cudnnCreateTensorDescriptor(&statistics), CUDNN_STATUS_SUCCESS);
  tensors.push_back(statistics);
  ASSERT_EQ(emulation::cudnnDeriveBNTensorDescriptor(statistics, xd, CUDNN_BATCHNORM_SPATIAL), CUDNN_STATUS_SUCCESS);
  double eps = 1e-5;
  ASSERT_EQ(emulation::cudnnBatchNormalizationForwardTraining(handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x.get(),
                                                              xd, y.get(), statistics, scale.get(), bias.get(), 0.5,
                                                              runningMean.get(), runningVar.get(), eps, saveMean.get(),
                                                              saveInvstd.get()),
            CUDNN_STATUS_SUCCESS);
  float invstd = float(1.0 / std::sqrt(1.25 + eps));
  EXPECT_EQ(saveMean.values()[0], 2.5f);
  EXPECT_FLOAT_EQ(saveInvstd.values()[0], invstd);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(y.values()[size_t(i)], 2.0 * (i + 1 - 2.5) * invstd + 1.0, 1e-6) << i;
  EXPECT_FLOAT_EQ(runningMean.values()[0], 1.25f);
  EXPECT_FLOAT_EQ(runningVar.values()[0], float(0.5 + 0.5 * 5.0 / 3.0));

  // The gradient from the saved statistics: dbias = sum(dy), dscale = sum(dy * xhat).
  DeviceArray<float> dy({1, 0, 0, -1}), dx(filled(4, 0.0f)), dScale(filled(1, 0.0f)), dBias(filled(1, 0.0f));
  ASSERT_EQ(emulation::cudnnBatchNormalizationBackward(handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xd,
                                                       x.get(), xd, dy.get(), xd, dx.get(), statistics, scale.get(),
                                                       dScale.get(), dBias.get(), eps, saveMean.get(), saveInvstd.get()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(dBias.values()[0], 0.0f);
  EXPECT_FLOAT_EQ(dScale.values()[0], -3.0f * invstd); // 1 * -1.5 * invstd + -1 * 1.5 * invstd
  // dx = scale * invstd / M * (M * dy - dbias - xhat * dscale).
  for (int i = 0; i < 4; ++i) {
    double xhat = (i + 1 - 2.5) * invstd, g = i == 0 ? 1.0 : i == 3 ? -1.0 : 0.0;
    EXPECT_NEAR(dx.values()[size_t(i)], 2.0 * invstd / 4.0 * (4.0 * g + xhat * 3.0 * invstd), 1e-6) << i;
  }

  // bf16 data is not modelled (the backend stages it through f32); a
  // statistics descriptor of the wrong type is refused.
  DeviceArray<uint16_t> half(filled<uint16_t>(4));
  EXPECT_EQ(emulation::cudnnBatchNormalizationForwardTraining(
                handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, tensor(1, 1, 2, 2, CUDNN_DATA_BFLOAT16), half.get(),
                tensor(1, 1, 2, 2, CUDNN_DATA_BFLOAT16), half.get(), statistics, scale.get(), bias.get(), 0.5,
                runningMean.get(), runningVar.get(), eps, saveMean.get(), saveInvstd.get()),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(emulation::cudnnBatchNormalizationForwardTraining(
                handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x.get(), xd, y.get(), tensor(1, 1, 1, 1, CUDNN_DATA_DOUBLE),
                scale.get(), bias.get(), 0.5, runningMean.get(), runningVar.get(), eps, saveMean.get(), saveInvstd.get()),
            CUDNN_STATUS_BAD_PARAM);
}

/// An f16 NHWC batch norm + ReLU through the extended calls.
class CudnnModelFused : public CudnnModel {
protected:
  void SetUp() override {
    CudnnModel::SetUp();
    data = tensor(1, 4, 1, 2, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC);
    ASSERT_EQ(emulation::cudnnCreateTensorDescriptor(&statistics), CUDNN_STATUS_SUCCESS);
    tensors.push_back(statistics);
    ASSERT_EQ(emulation::cudnnDeriveBNTensorDescriptor(statistics, data, CUDNN_BATCHNORM_SPATIAL_PERSISTENT),
              CUDNN_STATUS_SUCCESS);
    activation = relu();
    ASSERT_EQ(emulation::cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                  handle, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, data, nullptr, data,
                  statistics, activation, &forwardWorkspace),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(emulation::cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                  handle, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, data, data, data,
                  nullptr, data, statistics, activation, &backwardWorkspace),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(emulation::cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                  handle, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, activation, data,
                  &reserveBytes),
              CUDNN_STATUS_SUCCESS);
    ASSERT_GT(forwardWorkspace, 0u);
    ASSERT_GT(reserveBytes, 0u);
  }

  cudnnStatus_t forward(void* workspace, void* reserve) {
    return emulation::cudnnBatchNormalizationForwardTrainingEx(
        handle, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, &one, &zero, data, x.get(),
        nullptr, nullptr, data, y.get(), statistics, ones.get(), zeros.get(), 0.1, runningMean.get(), runningVar.get(),
        1e-5, saveMean.get(), saveInvstd.get(), activation, workspace, forwardWorkspace, reserve, reserveBytes);
  }
  cudnnStatus_t backward(void* workspace, void* reserve) {
    return emulation::cudnnBatchNormalizationBackwardEx(
        handle, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, &one, &zero, &one, &zero, data,
        x.get(), data, y.get(), data, dy.get(), nullptr, nullptr, data, dx.get(), statistics, ones.get(), zeros.get(),
        dScale.get(), dBias.get(), 1e-5, saveMean.get(), saveInvstd.get(), activation, workspace, backwardWorkspace,
        reserve, reserveBytes);
  }

  cudnnTensorDescriptor_t data = nullptr, statistics = nullptr;
  cudnnActivationDescriptor_t activation = nullptr;
  std::size_t forwardWorkspace = 0, backwardWorkspace = 0, reserveBytes = 0;
  // NHWC [1, 1, 2, 4]: channel c holds elements c and c + 4, {-1, 1} each, so
  // xhat is -1 then +1 (up to eps) and the ReLU passes the second.
  DeviceArray<uint16_t> x{toHalf({-1, -2, -3, -4, 1, 2, 3, 4})}, y{filled<uint16_t>(8)},
      dy{toHalf({5, 5, 5, 5, 7, 7, 7, 7})}, dx{filled<uint16_t>(8)};
  DeviceArray<float> ones{filled(4, 1.0f)}, zeros{filled(4, 0.0f)}, runningMean{filled(4, 0.0f)},
      runningVar{filled(4, 1.0f)}, saveMean{filled(4, 0.0f)}, saveInvstd{filled(4, 0.0f)}, dScale{filled(4, 0.0f)},
      dBias{filled(4, 0.0f)};
};

TEST_F(CudnnModelFused, ForwardAppliesTheReluAndTheBackwardItsMaskFromTheReserve) {
  DeviceArray<std::byte> forwardSpace(filled<std::byte>(forwardWorkspace)), backwardSpace(filled<std::byte>(backwardWorkspace)),
      reserve(filled<std::byte>(reserveBytes));
  ASSERT_EQ(forward(forwardSpace.get(), reserve.get()), CUDNN_STATUS_SUCCESS) << lastCudnnRefusal();
  std::vector<float> out = fromHalf(y.values());
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(out[size_t(c)], 0.0f) << c;
    EXPECT_NEAR(out[size_t(c) + 4], 1.0f, 1e-3) << c;
  }
  ASSERT_EQ(backward(backwardSpace.get(), reserve.get()), CUDNN_STATUS_SUCCESS) << lastCudnnRefusal();
  // Only the passed elements' dy (7) reaches the batch norm: dbias = 7,
  // dscale = 7 * xhat = 7.
  for (int c = 0; c < 4; ++c) {
    EXPECT_FLOAT_EQ(dBias.values()[size_t(c)], 7.0f) << c;
    EXPECT_NEAR(dScale.values()[size_t(c)], 7.0f, 1e-3) << c;
  }
  EXPECT_EQ(emulation::cudnnCounts().fusedBatchNorms >= 2, true);

  // A reserve space the forward's mask did not survive in: garbage (NaN).
  std::memset(reserve.get(), 0, reserveBytes);
  ASSERT_EQ(backward(backwardSpace.get(), reserve.get()), CUDNN_STATUS_SUCCESS);
  EXPECT_TRUE(std::isnan(fromHalf(dx.values())[0]));
  EXPECT_TRUE(std::isnan(dBias.values()[0]));
}

TEST_F(CudnnModelFused, RefusesWhatTheSemiPersistentKernelDoesNotCover) {
  DeviceArray<std::byte> forwardSpace(filled<std::byte>(forwardWorkspace)), reserve(filled<std::byte>(reserveBytes));
  // No workspace: the fused kernel needs one, even where a size is given.
  EXPECT_EQ(forward(nullptr, reserve.get()), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(forward(forwardSpace.get(), nullptr), CUDNN_STATUS_BAD_PARAM);
  auto reserveQuery = [&](cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, cudnnTensorDescriptor_t x) {
    std::size_t bytes = 0;
    return emulation::cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, ops, activation, x, &bytes);
  };
  constexpr cudnnBatchNormMode_t persistent = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  constexpr cudnnBatchNormOps_t relu = CUDNN_BATCHNORM_OPS_BN_ACTIVATION, addRelu = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  // NCHW, f32, or the plain spatial mode: no fused kernel.
  EXPECT_EQ(reserveQuery(persistent, relu, tensor(1, 4, 1, 2, CUDNN_DATA_HALF, CUDNN_TENSOR_NCHW)),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(reserveQuery(persistent, relu, tensor(1, 4, 1, 2, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC)),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(reserveQuery(CUDNN_BATCHNORM_SPATIAL, relu, data), CUDNN_STATUS_NOT_SUPPORTED);
  // The add needs channels a multiple of 4; the ReLU alone does not.
  cudnnTensorDescriptor_t six = tensor(1, 6, 1, 2, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC);
  EXPECT_EQ(reserveQuery(persistent, addRelu, six), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(reserveQuery(persistent, relu, six), CUDNN_STATUS_SUCCESS);
}

} // namespace
} // namespace ampjit::emulation
