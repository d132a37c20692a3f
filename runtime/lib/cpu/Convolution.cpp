// 2-D convolution and its two gradients, lowered to GEMMs through OpenBLAS
// (im2col / col2im), as Gemm.cpp does matrix products: low-precision data is
// widened exactly to the compute type, products accumulate in that type
// inside sgemm/dgemm, and each result is rounded once when stored.
//
// Every kernel first brings its operands into one canonical layout (NCHW
// activations, OIHW filters) in compute-type buffers, runs the same sequence
// of im2col, GEMM and col2im calls there, and only the final store writes the
// requested layout. An NHWC plan therefore performs exactly the arithmetic of
// the NCHW plan, in the same order, and the two agree bit for bit; the
// transposes are pure data movement.
//
// Images are processed in chunks: the column matrix of a chunk is
// [K = Cg*KH*KW, images * OH*OW], so one GEMM covers every image of the chunk
// (layers with tiny feature maps still get wide GEMMs) while the column
// buffer stays bounded. The chunk size depends only on the shapes, so the
// order of every sum is fixed by the plan.

#include "CpuKernels.h"

#include "ampjit/runtime/WindowShape.h"

#include <algorithm>

namespace ampjit::runtime::cpu {

namespace {

/// At most this many elements in one chunk's column matrix (64 MiB of f32),
/// unless a single image needs more.
constexpr int64_t kColumnBudget = int64_t(1) << 24;

/// One convolution's sizes in canonical terms, whichever layout the plan uses.
struct ConvGeometry {
  int64_t batch = 0, channels = 0, height = 0, width = 0;
  int64_t outChannels = 0, outHeight = 0, outWidth = 0;
  int64_t kernelHeight = 0, kernelWidth = 0;
  int64_t groups = 1, groupChannels = 0, groupOutChannels = 0;
  int64_t strideH = 1, strideW = 1, padH = 0, padW = 0, dilationH = 1, dilationW = 1;

  int64_t inPlane() const { return height * width; }
  int64_t outPlane() const { return outHeight * outWidth; }
  int64_t kernelArea() const { return kernelHeight * kernelWidth; }
  /// The GEMM's reduction length: one group's input channels times the kernel.
  int64_t patch() const { return groupChannels * kernelArea(); }
  /// Images per chunk (see the file comment).
  int64_t imagesPerChunk() const {
    int64_t perImage = std::max<int64_t>(1, patch() * outPlane());
    return std::clamp<int64_t>(kColumnBudget / perImage, 1, std::max<int64_t>(1, batch));
  }
};

ConvGeometry geometryOf(const Conv2dParams& params, const Shape& x, const Shape& w, const Shape& y) {
  ActivationDims a = activationDims(params.nhwc);
  FilterDims f = filterDims(params.nhwc);
  ConvGeometry g;
  g.batch = x[size_t(a.batch)];
  g.channels = x[size_t(a.channel)];
  g.height = x[size_t(a.height)];
  g.width = x[size_t(a.width)];
  g.outChannels = y[size_t(a.channel)];
  g.outHeight = y[size_t(a.height)];
  g.outWidth = y[size_t(a.width)];
  g.kernelHeight = w[size_t(f.height)];
  g.kernelWidth = w[size_t(f.width)];
  g.groups = params.groups;
  g.groupChannels = g.channels / g.groups;
  g.groupOutChannels = g.outChannels / g.groups;
  g.strideH = params.stride[0];
  g.strideW = params.stride[1];
  g.padH = params.padding[0];
  g.padW = params.padding[1];
  g.dilationH = params.dilation[0];
  g.dilationW = params.dilation[1];
  return g;
}

//===----------------------------------------------------------------------===//
// Canonical layout
//===----------------------------------------------------------------------===//

// NHWC activations are [outer, spatial, channels] and NCHW ones [outer,
// channels, spatial]; the OHWI and OIHW filters are the same pair with
// outer = O, channels = C/groups, spatial = KH*KW.

template <typename T>
std::vector<T> channelsLastToFirst(const std::vector<T>& in, int64_t outer, int64_t channels, int64_t spatial) {
  std::vector<T> out(in.size());
  for (int64_t o = 0; o < outer; ++o) {
    const T* src = in.data() + o * spatial * channels;
    T* dst = out.data() + o * channels * spatial;
    for (int64_t s = 0; s < spatial; ++s)
      for (int64_t c = 0; c < channels; ++c)
        dst[c * spatial + s] = src[s * channels + c];
  }
  return out;
}

template <typename T>
std::vector<T> channelsFirstToLast(const std::vector<T>& in, int64_t outer, int64_t channels, int64_t spatial) {
  std::vector<T> out(in.size());
  for (int64_t o = 0; o < outer; ++o) {
    const T* src = in.data() + o * channels * spatial;
    T* dst = out.data() + o * spatial * channels;
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t s = 0; s < spatial; ++s)
        dst[s * channels + c] = src[c * spatial + s];
  }
  return out;
}

/// The buffer widened to T in channels-first order ([outer, channels, spatial]).
template <typename T>
std::vector<T> loadChannelsFirst(const BufferView& view, bool channelsLast, int64_t outer, int64_t channels,
                                 int64_t spatial) {
  std::vector<T> values = loadAll<T>(view);
  return channelsLast ? channelsLastToFirst(values, outer, channels, spatial) : values;
}

/// Stores channels-first `values` into the buffer in its own layout, rounding once.
template <typename T>
void storeChannelsFirst(const BufferView& view, const std::vector<T>& values, bool channelsLast, int64_t outer,
                        int64_t channels, int64_t spatial) {
  if (channelsLast) {
    std::vector<T> permuted = channelsFirstToLast(values, outer, channels, spatial);
    storeRange<T>(view, 0, int64_t(permuted.size()), permuted.data());
  } else {
    storeRange<T>(view, 0, int64_t(values.size()), values.data());
  }
}

/// An activation ([N, channels, plane] in NCHW order) widened to T.
template <typename T>
std::vector<T> loadActivation(const BufferView& view, const ConvGeometry& g, bool nhwc, int64_t channels,
                              int64_t plane) {
  return loadChannelsFirst<T>(view, nhwc, g.batch, channels, plane);
}

/// The filter widened to T, in OIHW order.
template <typename T>
std::vector<T> loadFilter(const BufferView& view, const ConvGeometry& g, bool nhwc) {
  return loadChannelsFirst<T>(view, nhwc, g.outChannels, g.groupChannels, g.kernelArea());
}

//===----------------------------------------------------------------------===//
// GEMM and the column matrix
//===----------------------------------------------------------------------===//

/// Whether every GEMM dimension of a chunk fits BLAS's 32-bit indices.
Status checkBlasLimits(const ConvGeometry& g) {
  int64_t columns = g.imagesPerChunk() * g.outPlane();
  for (int64_t dimension : {g.patch(), columns, g.groupOutChannels})
    if (dimension > INT32_MAX)
      return Status::error("convolution dimensions exceed what BLAS can index (2^31 - 1)");
  return Status::success();
}

/// The first image and image count of each chunk.
struct Chunk {
  int64_t first, images;
  int64_t columns(const ConvGeometry& g) const { return images * g.outPlane(); }
};

template <typename F>
void forEachChunk(const ConvGeometry& g, F&& body) {
  int64_t step = g.imagesPerChunk();
  for (int64_t first = 0; first < g.batch; first += step)
    body(Chunk{first, std::min(step, g.batch - first)});
}

/// Row (c, kh, kw) of the column matrix holds, for each image of the chunk
/// and each output position, the input element that kernel tap multiplies
/// (zero in the padding): col[(c*KH + kh)*KW + kw][image*OH*OW + oh*OW + ow].
template <typename T>
void im2col(const T* x, const ConvGeometry& g, const Chunk& chunk, int64_t group, T* col) {
  int64_t columns = chunk.columns(g), outPlane = g.outPlane();
  for (int64_t c = 0; c < g.groupChannels; ++c)
    for (int64_t kh = 0; kh < g.kernelHeight; ++kh)
      for (int64_t kw = 0; kw < g.kernelWidth; ++kw) {
        T* row = col + ((c * g.kernelHeight + kh) * g.kernelWidth + kw) * columns;
        for (int64_t image = 0; image < chunk.images; ++image) {
          const T* plane = x + ((chunk.first + image) * g.channels + group * g.groupChannels + c) * g.inPlane();
          for (int64_t oh = 0; oh < g.outHeight; ++oh) {
            T* out = row + image * outPlane + oh * g.outWidth;
            int64_t ih = oh * g.strideH - g.padH + kh * g.dilationH;
            if (ih < 0 || ih >= g.height) {
              std::fill(out, out + g.outWidth, T(0));
              continue;
            }
            const T* in = plane + ih * g.width;
            for (int64_t ow = 0; ow < g.outWidth; ++ow) {
              int64_t iw = ow * g.strideW - g.padW + kw * g.dilationW;
              out[ow] = iw >= 0 && iw < g.width ? in[iw] : T(0);
            }
          }
        }
      }
}

/// The adjoint of im2col: adds every column entry to the input element it
/// was read from, in im2col's loop order (a fixed order for each element).
template <typename T>
void col2imAccumulate(const T* col, const ConvGeometry& g, const Chunk& chunk, int64_t group, T* dx) {
  int64_t columns = chunk.columns(g), outPlane = g.outPlane();
  for (int64_t c = 0; c < g.groupChannels; ++c)
    for (int64_t kh = 0; kh < g.kernelHeight; ++kh)
      for (int64_t kw = 0; kw < g.kernelWidth; ++kw) {
        const T* row = col + ((c * g.kernelHeight + kh) * g.kernelWidth + kw) * columns;
        for (int64_t image = 0; image < chunk.images; ++image) {
          T* plane = dx + ((chunk.first + image) * g.channels + group * g.groupChannels + c) * g.inPlane();
          for (int64_t oh = 0; oh < g.outHeight; ++oh) {
            int64_t ih = oh * g.strideH - g.padH + kh * g.dilationH;
            if (ih < 0 || ih >= g.height)
              continue;
            const T* in = row + image * outPlane + oh * g.outWidth;
            T* out = plane + ih * g.width;
            for (int64_t ow = 0; ow < g.outWidth; ++ow) {
              int64_t iw = ow * g.strideW - g.padW + kw * g.dilationW;
              if (iw >= 0 && iw < g.width)
                out[iw] += in[ow];
            }
          }
        }
      }
}

/// One group's output channels of a chunk as a [Og, images * OH*OW] matrix,
/// gathered from the canonical [N, O, OH*OW] activation.
template <typename T>
void gatherGroupOutput(const T* dy, const ConvGeometry& g, const Chunk& chunk, int64_t group, T* matrix) {
  int64_t columns = chunk.columns(g), outPlane = g.outPlane();
  for (int64_t o = 0; o < g.groupOutChannels; ++o)
    for (int64_t image = 0; image < chunk.images; ++image) {
      const T* src = dy + ((chunk.first + image) * g.outChannels + group * g.groupOutChannels + o) * outPlane;
      std::copy(src, src + outPlane, matrix + o * columns + image * outPlane);
    }
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

template <typename T>
Status convForward(const Step& step, const StepIO& io) {
  const Conv2dParams& params = step.as<Conv2dParams>();
  const BufferView &xView = io.in[0], &wView = io.in[1], &biasView = io.in[2], &yView = io.out[0];
  ConvGeometry g = geometryOf(params, xView.dims(), wView.dims(), yView.dims());
  AMPJIT_RETURN_IF_ERROR(checkBlasLimits(g));
  std::vector<T> x = loadActivation<T>(xView, g, params.nhwc, g.channels, g.inPlane());
  std::vector<T> w = loadFilter<T>(wView, g, params.nhwc);
  std::vector<T> bias = biasView.present ? loadAll<T>(biasView) : std::vector<T>(size_t(g.outChannels), T(0));
  std::vector<T> y(size_t(yView.count));
  int64_t outPlane = g.outPlane(), patch = g.patch();
  std::vector<T> col, product;
  forEachChunk(g, [&](const Chunk& chunk) {
    int64_t columns = chunk.columns(g);
    col.resize(size_t(patch * columns));
    product.resize(size_t(g.groupOutChannels * columns));
    for (int64_t group = 0; group < g.groups; ++group) {
      im2col(x.data(), g, chunk, group, col.data());
      // [Og, K] filter rows of this group (contiguous in OIHW) times the columns.
      blasGemm(false, false, g.groupOutChannels, columns, patch, w.data() + group * g.groupOutChannels * patch,
              patch, col.data(), columns, product.data());
      // The bias is added to the finished sum, so y = sum + bias rounds once.
      for (int64_t o = 0; o < g.groupOutChannels; ++o) {
        int64_t channel = group * g.groupOutChannels + o;
        T channelBias = bias[size_t(channel)];
        for (int64_t image = 0; image < chunk.images; ++image) {
          const T* src = product.data() + o * columns + image * outPlane;
          T* dst = y.data() + ((chunk.first + image) * g.outChannels + channel) * outPlane;
          for (int64_t p = 0; p < outPlane; ++p)
            dst[p] = src[p] + channelBias;
        }
      }
    }
  });
  storeChannelsFirst<T>(yView, y, params.nhwc, g.batch, g.outChannels, outPlane);
  return Status::success();
}

/// dx = col2im(W^T @ dy), per chunk and group.
template <typename T>
Status convGradInput(const Step& step, const StepIO& io) {
  const Conv2dParams& params = step.as<Conv2dParams>();
  const BufferView &dyView = io.in[0], &wView = io.in[1], &dxView = io.out[0];
  ConvGeometry g = geometryOf(params, dxView.dims(), wView.dims(), dyView.dims());
  AMPJIT_RETURN_IF_ERROR(checkBlasLimits(g));
  std::vector<T> dy = loadActivation<T>(dyView, g, params.nhwc, g.outChannels, g.outPlane());
  std::vector<T> w = loadFilter<T>(wView, g, params.nhwc);
  std::vector<T> dx(size_t(dxView.count), T(0));
  int64_t patch = g.patch();
  std::vector<T> dyGroup, dcol;
  forEachChunk(g, [&](const Chunk& chunk) {
    int64_t columns = chunk.columns(g);
    dyGroup.resize(size_t(g.groupOutChannels * columns));
    dcol.resize(size_t(patch * columns));
    for (int64_t group = 0; group < g.groups; ++group) {
      gatherGroupOutput(dy.data(), g, chunk, group, dyGroup.data());
      // [K, Og] (the group's filter rows, transposed) times [Og, columns].
      blasGemm(true, false, patch, columns, g.groupOutChannels, w.data() + group * g.groupOutChannels * patch,
              patch, dyGroup.data(), columns, dcol.data());
      col2imAccumulate(dcol.data(), g, chunk, group, dx.data());
    }
  });
  // With an 'accumulate' input (the same buffer as dx), the gradient it
  // already holds is added in compute type before the one rounding, as
  // cuDNN blends with beta = 1.
  if (accumulatesInPlace(step)) {
    std::vector<T> prior =
        loadActivation<T>(io.in[conv2d_grad_input_slot::kAccumulate], g, params.nhwc, g.channels, g.inPlane());
    for (size_t i = 0; i < dx.size(); ++i)
      dx[i] += prior[i];
  }
  storeChannelsFirst<T>(dxView, dx, params.nhwc, g.batch, g.channels, g.inPlane());
  return Status::success();
}

/// dW = dy @ col(x)^T, one GEMM per chunk and group reducing over the chunk's
/// images and output positions; chunks add up in compute type in image order.
template <typename T>
Status convGradWeight(const Step& step, const StepIO& io) {
  const Conv2dParams& params = step.as<Conv2dParams>();
  const BufferView &dyView = io.in[0], &xView = io.in[1], &dwView = io.out[0];
  ConvGeometry g = geometryOf(params, xView.dims(), dwView.dims(), dyView.dims());
  AMPJIT_RETURN_IF_ERROR(checkBlasLimits(g));
  std::vector<T> dy = loadActivation<T>(dyView, g, params.nhwc, g.outChannels, g.outPlane());
  std::vector<T> x = loadActivation<T>(xView, g, params.nhwc, g.channels, g.inPlane());
  int64_t patch = g.patch();
  std::vector<T> dw(size_t(g.outChannels * patch), T(0)); // OIHW
  std::vector<T> dyGroup, col, partial(size_t(g.groupOutChannels * patch));
  bool firstChunk = true;
  forEachChunk(g, [&](const Chunk& chunk) {
    int64_t columns = chunk.columns(g);
    dyGroup.resize(size_t(g.groupOutChannels * columns));
    col.resize(size_t(patch * columns));
    for (int64_t group = 0; group < g.groups; ++group) {
      gatherGroupOutput(dy.data(), g, chunk, group, dyGroup.data());
      im2col(x.data(), g, chunk, group, col.data());
      T* target = dw.data() + group * g.groupOutChannels * patch;
      // The first chunk writes its rows directly; later ones add theirs.
      T* result = firstChunk ? target : partial.data();
      blasGemm(false, true, g.groupOutChannels, patch, columns, dyGroup.data(), columns, col.data(), columns, result);
      if (!firstChunk)
        for (int64_t i = 0; i < g.groupOutChannels * patch; ++i)
          target[i] += partial[size_t(i)];
    }
    firstChunk = false;
  });
  storeChannelsFirst<T>(dwView, dw, params.nhwc, g.outChannels, g.groupChannels, g.kernelArea());
  return Status::success();
}

} // namespace

Status runConv2d(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return convForward<decltype(zero)>(step, io); });
}

Status runConv2dGradInput(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return convGradInput<decltype(zero)>(step, io); });
}

Status runConv2dGradWeight(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return convGradWeight<decltype(zero)>(step, io); });
}

} // namespace ampjit::runtime::cpu
