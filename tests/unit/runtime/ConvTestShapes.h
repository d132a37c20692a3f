#ifndef AMPJIT_TESTS_UNIT_RUNTIME_CONVTESTSHAPES_H
#define AMPJIT_TESTS_UNIT_RUNTIME_CONVTESTSHAPES_H

// The shape of a convolution or pooling test case and the attributes its op
// takes, shared by the CPU kernel tests (ConvKernelTest) and the GPU tests
// that compare cuDNN and the pooling kernels with the CPU (CudnnKernelTest).

#include "ampjit/runtime/Shape.h"
#include "ampjit/runtime/StepBuilder.h"
#include "ampjit/runtime/WindowShape.h"

#include <string>
#include <vector>

namespace ampjit::runtime::test {

inline AttributeMap::value_type layoutAttribute(bool nhwc) {
  return {"layout", std::string(nhwc ? "nhwc" : "nchw")};
}

/// A conv2d: input x (NCHW), filter w (OIHW), and its attributes.
struct ConvShape {
  std::string label{};
  Shape x{};
  Shape w{};
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;

  /// The output's NCHW shape.
  Shape y() const {
    Shape shape = {x[0], w[0], 0, 0};
    for (int d = 0; d < 2; ++d)
      shape[size_t(2 + d)] = windowOutputSize(x[size_t(2 + d)], w[size_t(2 + d)], stride[size_t(d)],
                                              padding[size_t(d)], dilation[size_t(d)]);
    return shape;
  }
  AttributeMap attributes(bool nhwc) const {
    return {{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups},
            layoutAttribute(nhwc)};
  }
};

/// A max or average pooling over input x (NCHW), and its attributes.
struct PoolShape {
  std::string label{};
  Shape x{};
  std::vector<int64_t> kernel{}, stride{}, padding{0, 0};
  bool ceilMode = false;
  bool countIncludePad = true;

  /// The output's NCHW shape.
  Shape y() const {
    Shape shape = x;
    for (int d = 0; d < 2; ++d)
      shape[size_t(2 + d)] = windowOutputSize(x[size_t(2 + d)], kernel[size_t(d)], stride[size_t(d)],
                                              padding[size_t(d)], 1, ceilMode);
    return shape;
  }
  AttributeMap attributes(bool average, bool nhwc) const {
    AttributeMap attributes = {{"kernel_size", kernel}, {"stride", stride}, {"padding", padding},
                               {"ceil_mode", ceilMode}, layoutAttribute(nhwc)};
    if (average)
      attributes["exclude_padding"] = !countIncludePad;
    return attributes;
  }
};

} // namespace ampjit::runtime::test

#endif // AMPJIT_TESTS_UNIT_RUNTIME_CONVTESTSHAPES_H
