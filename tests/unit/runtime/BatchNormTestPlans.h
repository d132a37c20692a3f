#ifndef AMPJIT_TESTS_UNIT_RUNTIME_BATCHNORMTESTPLANS_H
#define AMPJIT_TESTS_UNIT_RUNTIME_BATCHNORMTESTPLANS_H

// A ResNet block's batch-norm tail as a plan, fused (Plan.h's
// BatchNormActivation) or as the unfused steps codegen would emit:
//
//   y = relu(batch_norm(x) [+ z]);  g = relu_grad(dy, y);  dx, dweight, dbias = batch_norm_grad(g, ...)
//
// with the same arguments and results either way, so the CPU tests
// (FusedBatchNormTest) and the GPU tests (CudnnKernelTest) can run both
// versions on the same data.

#include "RuntimeTestUtil.h"

#include <string>

namespace ampjit::runtime::test {

struct BatchNormBlockShape {
  std::string label;
  Shape x;
  int64_t axis = 1;
};

struct BatchNormBlockOptions {
  DType dtype = DType::F32;
  BatchNormActivation activation = BatchNormActivation::Relu;
  /// Training (batch statistics, with the gradient) or inference (forward only).
  bool training = true;
  /// weight and bias present.
  bool affine = true;
  /// One fused step per direction, or the unfused steps.
  bool fused = true;
};

/// Arguments: x, z (add_relu only), dy (training only), weight, bias (when
/// affine), running_mean, running_var; results: y, then for training dx,
/// dweight, dbias, dz (add_relu only), save_mean, save_invstd,
/// new_running_mean, new_running_var.
inline Plan batchNormBlockPlan(const BatchNormBlockShape& shape, const BatchNormBlockOptions& options) {
  bool residual = options.activation == BatchNormActivation::AddRelu;
  DType statistics = options.dtype == DType::F64 ? DType::F64 : DType::F32;
  TensorType data = tt(options.dtype, shape.x), channel = tt(statistics, {shape.x[size_t(shape.axis)]});
  PlanBuilder b("batch_norm_block");
  BufferId x = b.argument(data, BufferRole::Input, "x");
  BufferId z = residual ? b.argument(data, BufferRole::Input, "z") : kNoBuffer;
  BufferId dy = options.training ? b.argument(data, BufferRole::Input, "dy") : kNoBuffer;
  BufferId weight = options.affine ? b.argument(channel, BufferRole::Param, "weight") : kNoBuffer;
  BufferId bias = options.affine ? b.argument(channel, BufferRole::Param, "bias") : kNoBuffer;
  BufferId runningMean = b.argument(channel, BufferRole::Hyper, "running_mean");
  BufferId runningVar = b.argument(channel, BufferRole::Hyper, "running_var");

  AttributeMap attributes = {{"axis", shape.axis}, {"eps", 1e-3}};
  if (options.training)
    attributes["momentum"] = 0.25;
  BufferId y = b.output(data);
  b.result(y);
  if (!options.training) {
    if (options.fused) {
      b.op("jit.batch_norm_inference", {x, weight, bias, runningMean, runningVar}, {y}, attributes);
      Step& step = b.raw().steps.back();
      step.as<BatchNormParams>().activation = options.activation;
      if (residual)
        step.inputs.push_back(z);
    } else {
      BufferId normalised = b.temporary(data);
      b.op("jit.batch_norm_inference", {x, weight, bias, runningMean, runningVar}, {normalised}, attributes);
      BufferId sum = normalised;
      if (residual) {
        sum = b.temporary(data);
        b.op("jit.add", {normalised, z}, {sum});
      }
      b.op("jit.relu", {sum}, {y});
    }
    return b.finish();
  }

  BufferId dx = b.output(data), dweight = b.output(channel), dbias = b.output(channel);
  BufferId dz = residual ? b.output(data) : kNoBuffer;
  BufferId saveMean = b.output(channel), saveInvstd = b.output(channel);
  BufferId newRunningMean = b.output(channel), newRunningVar = b.output(channel);
  for (BufferId result : {dx, dweight, dbias, dz, saveMean, saveInvstd, newRunningMean, newRunningVar})
    if (result != kNoBuffer)
      b.result(result);
  if (options.fused) {
    b.op("jit.batch_norm", {x, weight, bias, runningMean, runningVar},
         {y, saveMean, saveInvstd, newRunningMean, newRunningVar}, attributes);
    Step& forward = b.raw().steps.back();
    forward.as<BatchNormParams>().activation = options.activation;
    if (residual)
      forward.inputs.push_back(z);
    b.op("jit.batch_norm_grad", {dy, x, saveMean, saveInvstd, weight}, {dx, dweight, dbias},
         {{"axis", shape.axis}});
    Step& backward = b.raw().steps.back();
    backward.as<BatchNormGradParams>().activation = options.activation;
    backward.inputs.push_back(y);
    backward.inputs.push_back(bias);
    if (residual)
      backward.outputs.push_back(dz);
    return b.finish();
  }
  BufferId normalised = b.temporary(data);
  b.op("jit.batch_norm", {x, weight, bias, runningMean, runningVar},
       {normalised, saveMean, saveInvstd, newRunningMean, newRunningVar}, attributes);
  BufferId sum = normalised;
  if (residual) {
    sum = b.temporary(data);
    b.op("jit.add", {normalised, z}, {sum});
  }
  b.op("jit.relu", {sum}, {y});
  BufferId g = residual ? dz : b.temporary(data);
  b.op("jit.relu_grad", {dy, y}, {g});
  b.op("jit.batch_norm_grad", {g, x, saveMean, saveInvstd, weight}, {dx, dweight, dbias}, {{"axis", shape.axis}});
  return b.finish();
}

/// Shapes that cover cuDNN's fused path (rank-4 NHWC, channels a multiple
/// of 4) and the configurations that take the fallback.
inline std::vector<BatchNormBlockShape> batchNormBlockShapes() {
  return {
      {"nhwc 8 channels", {2, 3, 5, 8}, 3},
      {"nhwc 3 channels (not a multiple of 4)", {2, 4, 3, 3}, 3},
      {"nchw", {2, 4, 3, 5}, 1},
      {"[N, C]", {6, 4}, 1},
  };
}

} // namespace ampjit::runtime::test

#endif // AMPJIT_TESTS_UNIT_RUNTIME_BATCHNORMTESTPLANS_H
