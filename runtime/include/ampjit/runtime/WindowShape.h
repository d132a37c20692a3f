#ifndef AMPJIT_RUNTIME_WINDOWSHAPE_H
#define AMPJIT_RUNTIME_WINDOWSHAPE_H

// The output size of a sliding window (convolution, pooling) along one
// spatial dimension, and where the channel and spatial dimensions of an
// NCHW or NHWC activation are. Header-only and free of other dependencies,
// because the plan verifier, the frontend's type inference and the jit
// dialect's verifiers must all agree on it and the dialect does not link the
// runtime.

#include <cstdint>

namespace ampjit::runtime {

/// The largest kernel, stride, padding or dilation a window takes. cuDNN's
/// descriptors hold them as int; and with them this small, the size
/// arithmetic below and its users' (2 * padding) stay far from overflow.
inline constexpr int64_t kMaxWindowParameter = INT32_MAX;

/// Whether a window parameter is in [minimum, kMaxWindowParameter]: minimum
/// is 0 for padding and 1 for kernel, stride and dilation.
inline constexpr bool windowParameterInRange(int64_t value, int64_t minimum) {
  return value >= minimum && value <= kMaxWindowParameter;
}

/// Output size along one dimension, or -1 when the window does not fit (or a
/// parameter is out of range: kernel, stride, dilation < 1 or padding < 0, or
/// any of them above kMaxWindowParameter).
///   floor((in + 2*padding - dilation*(kernel-1) - 1) / stride) + 1
/// With ceilMode the division rounds up, but (as PyTorch) the last window
/// must start inside the input or its left padding.
inline int64_t windowOutputSize(int64_t in, int64_t kernel, int64_t stride, int64_t padding,
                                int64_t dilation, bool ceilMode = false) {
  if (in < 1 || !windowParameterInRange(kernel, 1) || !windowParameterInRange(stride, 1) ||
      !windowParameterInRange(padding, 0) || !windowParameterInRange(dilation, 1))
    return -1;
  // In 128 bits: a dimension near INT64_MAX plus twice the padding must not wrap.
  using Wide = __int128;
  Wide span = Wide(in) + 2 * Wide(padding) - Wide(dilation) * (kernel - 1) - 1;
  if (span < 0)
    return -1;
  Wide out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceilMode && (out - 1) * stride >= Wide(in) + padding)
    --out;
  return out > INT64_MAX ? -1 : int64_t(out);
}

/// Positions of the batch, channel and two spatial dimensions of a rank-4
/// activation.
struct ActivationDims {
  int batch, channel, height, width;
};
inline constexpr ActivationDims activationDims(bool nhwc) {
  return nhwc ? ActivationDims{0, 3, 1, 2} : ActivationDims{0, 1, 2, 3};
}
/// Filter dimensions: OIHW, or OHWI under NHWC.
struct FilterDims {
  int out, in, height, width;
};
inline constexpr FilterDims filterDims(bool nhwc) {
  return nhwc ? FilterDims{0, 3, 1, 2} : FilterDims{0, 1, 2, 3};
}

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_WINDOWSHAPE_H
