// Convolutional layers and the ResNet builder (torchvision's architecture,
// parameter names and initialisation).

#include "jit/nn.h"

#include "Dispatch.h"
#include "Init.h"
#include "jit/Autograd.h"

#include <algorithm>
#include <cmath>

namespace jit::nn {

namespace {

/// torchvision's kaiming_normal_(mode="fan_out", nonlinearity="relu").
Tensor kaimingNormalFanOut(Shape shape, const InitOptions& init) {
  int64_t fanOut = shape[0] * shape[2] * shape[3];
  return randn(std::move(shape), init.dtype, init.generator) * std::sqrt(2.0 / double(fanOut));
}

DType statisticsDType(DType dtype) { return dtype == f64 ? f64 : f32; }

} // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, Conv2dOptions options, bool hasBias,
               InitOptions init)
    : options_(options) {
  if (in_channels <= 0 || out_channels <= 0 || kernel_size[0] <= 0 || kernel_size[1] <= 0)
    throw Error("nn::Conv2d: channels (" + std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                ") and kernel size must be positive");
  if (options.groups < 1 || in_channels % options.groups != 0 || out_channels % options.groups != 0)
    throw Error("nn::Conv2d: groups = " + std::to_string(options.groups) + " must divide in_channels (" +
                std::to_string(in_channels) + ") and out_channels (" + std::to_string(out_channels) + ")");
  if (options.layout != Layout::nchw)
    throw Error("nn::Conv2d: modules hold NCHW (OIHW) parameters; the compiler chooses NHWC itself");
  int64_t fanIn = in_channels / options.groups * kernel_size[0] * kernel_size[1];
  double bound = 1.0 / std::sqrt(double(fanIn));
  // The same draws as Linear's: weight first, then bias, row-major.
  weight = register_parameter(
      "weight", detail::uniformTensor({out_channels, in_channels / options.groups, kernel_size[0], kernel_size[1]},
                                      bound, init));
  if (hasBias)
    bias = register_parameter("bias", detail::uniformTensor({out_channels}, bound, init));
}

Tensor Conv2d::forward(const Tensor& input) {
  if (input.dim() != 4)
    throw Error("nn::Conv2d: input " + std::string(dtype_name(input.dtype())) + " of rank " +
                std::to_string(input.dim()) + " must be NCHW (rank 4)");
  return conv2d(input, weight, bias, options_);
}

BatchNorm::BatchNorm(const char* name, std::vector<int64_t> ranks, const char* shapes, int64_t num_features,
                     double eps, double momentum, bool affine, bool track_running_stats, InitOptions init)
    : name_(name), ranks_(std::move(ranks)), shapes_(shapes), numFeatures_(num_features), eps_(eps),
      momentum_(momentum) {
  if (num_features <= 0)
    throw Error("nn::" + std::string(name_) + ": num_features (" + std::to_string(num_features) +
                ") must be positive");
  DType dtype = statisticsDType(init.dtype);
  if (affine) {
    weight = register_parameter("weight", ones({num_features}, dtype));
    bias = register_parameter("bias", zeros({num_features}, dtype));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}, dtype));
    running_var = register_buffer("running_var", ones({num_features}, dtype));
  }
}

Tensor BatchNorm::forward(const Tensor& input) {
  if (std::find(ranks_.begin(), ranks_.end(), input.dim()) == ranks_.end() || input.size(1) != numFeatures_)
    throw Error("nn::" + std::string(name_) + "(" + std::to_string(numFeatures_) + "): input " +
                detail::describe(input) + " must be " + shapes_ + " with " + std::to_string(numFeatures_) +
                " channels");
  bool useBatchStatistics = is_training() || !running_mean.defined();
  return batch_norm(input, running_mean, running_var, weight, bias, useBatchStatistics, momentum_, eps_);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Pair output_size) : outputSize_(output_size) {
  if (output_size != Pair{1, 1})
    throw Error("nn::AdaptiveAvgPool2d: only output_size {1, 1} (global average pooling) is supported");
}

// --- ResNet -------------------------------------------------------------------------

namespace {

std::shared_ptr<Conv2d> convFor(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                                const InitOptions& init) {
  auto conv = std::make_shared<Conv2d>(in, out, Pair{kernel, kernel},
                                       Conv2dOptions{.stride = {stride, stride}, .padding = {padding, padding}},
                                       /*bias=*/false, init);
  NoGradGuard noGrad;
  conv->weight.copy_(kaimingNormalFanOut(conv->weight.shape(), init));
  return conv;
}

std::shared_ptr<Sequential> downsampleFor(int64_t in, int64_t out, int64_t stride, const InitOptions& init) {
  if (stride == 1 && in == out)
    return nullptr;
  auto shortcut = std::make_shared<Sequential>();
  shortcut->push_back(std::shared_ptr<Module>(convFor(in, out, 1, stride, 0, init)));
  shortcut->push_back(std::shared_ptr<Module>(std::make_shared<BatchNorm2d>(out, 1e-5, 0.1, true, true, init)));
  return shortcut;
}

std::shared_ptr<BatchNorm2d> bnFor(int64_t channels, const InitOptions& init) {
  return std::make_shared<BatchNorm2d>(channels, 1e-5, 0.1, true, true, init);
}

} // namespace

BasicBlock::BasicBlock(int64_t in_channels, int64_t channels, int64_t stride, const InitOptions& init) {
  conv1_ = register_module("conv1", convFor(in_channels, channels, 3, stride, 1, init));
  bn1_ = register_module("bn1", bnFor(channels, init));
  conv2_ = register_module("conv2", convFor(channels, channels, 3, 1, 1, init));
  bn2_ = register_module("bn2", bnFor(channels, init));
  if (auto shortcut = downsampleFor(in_channels, channels * kExpansion, stride, init))
    downsample_ = register_module("downsample", shortcut);
}

Tensor BasicBlock::forward(const Tensor& input) {
  Tensor out = relu((*bn1_)((*conv1_)(input)));
  out = (*bn2_)((*conv2_)(out));
  Tensor identity = downsample_ ? (*downsample_)(input) : input;
  return relu(out + identity);
}

Bottleneck::Bottleneck(int64_t in_channels, int64_t channels, int64_t stride, const InitOptions& init) {
  conv1_ = register_module("conv1", convFor(in_channels, channels, 1, 1, 0, init));
  bn1_ = register_module("bn1", bnFor(channels, init));
  conv2_ = register_module("conv2", convFor(channels, channels, 3, stride, 1, init));
  bn2_ = register_module("bn2", bnFor(channels, init));
  conv3_ = register_module("conv3", convFor(channels, channels * kExpansion, 1, 1, 0, init));
  bn3_ = register_module("bn3", bnFor(channels * kExpansion, init));
  if (auto shortcut = downsampleFor(in_channels, channels * kExpansion, stride, init))
    downsample_ = register_module("downsample", shortcut);
}

Tensor Bottleneck::forward(const Tensor& input) {
  Tensor out = relu((*bn1_)((*conv1_)(input)));
  out = relu((*bn2_)((*conv2_)(out)));
  out = (*bn3_)((*conv3_)(out));
  Tensor identity = downsample_ ? (*downsample_)(input) : input;
  return relu(out + identity);
}

ResNet::ResNet(Block block, std::array<int64_t, 4> layers, ResNetOptions options)
    : inChannels_(options.base_width) {
  if (options.num_classes <= 0 || options.base_width <= 0)
    throw Error("nn::ResNet: num_classes and base_width must be positive");
  const InitOptions& init = options.init;
  bool imagenet = options.stem == ResNetOptions::Stem::imagenet;
  conv1_ = register_module("conv1", imagenet ? convFor(3, inChannels_, 7, 2, 3, init)
                                             : convFor(3, inChannels_, 3, 1, 1, init));
  bn1_ = register_module("bn1", bnFor(inChannels_, init));
  register_module("relu", ReLU());
  maxpool_ = imagenet ? std::shared_ptr<Module>(register_module(
                            "maxpool", MaxPool2d({.kernel_size = {3, 3}, .stride = Pair{2, 2}, .padding = {1, 1}})))
                      : std::shared_ptr<Module>(register_module("maxpool", Identity()));
  for (size_t stage = 0; stage < 4; ++stage) {
    int64_t channels = options.base_width << stage;
    stages_[stage] = register_module("layer" + std::to_string(stage + 1),
                                     makeStage(block, channels, layers[stage], stage == 0 ? 1 : 2, init));
  }
  register_module("avgpool", AdaptiveAvgPool2d({1, 1}));
  fc_ = register_module("fc", Linear(inChannels_, options.num_classes, true, init));
}

std::shared_ptr<Sequential> ResNet::makeStage(Block block, int64_t channels, int64_t blocks, int64_t stride,
                                              const InitOptions& init) {
  auto stage = std::make_shared<Sequential>();
  for (int64_t i = 0; i < blocks; ++i) {
    int64_t blockStride = i == 0 ? stride : 1;
    if (block == Block::basic) {
      stage->push_back(std::shared_ptr<Module>(std::make_shared<BasicBlock>(inChannels_, channels, blockStride, init)));
      inChannels_ = channels * BasicBlock::kExpansion;
    } else {
      stage->push_back(std::shared_ptr<Module>(std::make_shared<Bottleneck>(inChannels_, channels, blockStride, init)));
      inChannels_ = channels * Bottleneck::kExpansion;
    }
  }
  return stage;
}

Tensor ResNet::forward(const Tensor& input) {
  Tensor x = (*maxpool_)(relu((*bn1_)((*conv1_)(input))));
  for (const std::shared_ptr<Sequential>& stage : stages_)
    x = (*stage)(x);
  x = adaptive_avg_pool2d(x, {1, 1});
  return (*fc_)(reshape(x, {x.size(0), x.size(1)}));
}

std::shared_ptr<ResNet> resnet18(ResNetOptions options) {
  return std::make_shared<ResNet>(ResNet::Block::basic, std::array<int64_t, 4>{2, 2, 2, 2}, options);
}

std::shared_ptr<ResNet> resnet50(ResNetOptions options) {
  return std::make_shared<ResNet>(ResNet::Block::bottleneck, std::array<int64_t, 4>{3, 4, 6, 3}, options);
}

} // namespace jit::nn
