// Reductions, the softmax family and layer norm: everything that reduces
// along axes. Inputs are widened to the compute type, sums accumulate
// sequentially in row-major order of the reduced index (deterministic, and
// independent of how the loops are arranged), and results are rounded once.

#include "CpuKernels.h"

#include <algorithm>

namespace ampjit::runtime::cpu {

namespace {

int64_t product(const Shape& shape, size_t begin, size_t end) {
  int64_t result = 1;
  for (size_t d = begin; d < end; ++d)
    result *= shape[d];
  return result;
}

template <typename T>
struct Reducer {
  ReduceOp op;
  T identity() const { return op == ReduceOp::Max ? -std::numeric_limits<T>::infinity() : T(0); }
  // max propagates NaN: once the accumulator is NaN nothing compares greater.
  void combine(T& acc, T value) const {
    if (op == ReduceOp::Max)
      acc = (value > acc || value != value) ? value : acc;
    else
      acc += value;
  }
};

template <typename T>
Status reduce(const Step& step, const StepIO& io) {
  const ReductionParams& params = step.as<ReductionParams>();
  const Shape& shape = io.in[0].dims();
  std::vector<T> x = loadAll<T>(io.in[0]);
  Reducer<T> reducer{params.op};
  std::vector<T> acc(size_t(io.out[0].count), reducer.identity());
  int64_t reducedCount = 1;
  for (int64_t axis : params.axes)
    reducedCount *= shape[size_t(axis)];

  bool contiguousBlock = true;
  for (size_t i = 1; i < params.axes.size(); ++i)
    contiguousBlock &= params.axes[i] == params.axes[i - 1] + 1;

  if (params.axes.empty()) {
    acc.assign(x.begin(), x.end());
  } else if (contiguousBlock) {
    size_t first = size_t(params.axes.front()), last = size_t(params.axes.back());
    int64_t outer = product(shape, 0, first), inner = product(shape, last + 1, shape.size());
    for (int64_t o = 0; o < outer; ++o) {
      if (inner == 1) {
        // Reduced to one value (a norm, a loss's mean, a row sum): the
        // accumulator in a register, where the loop below would store and
        // reload it through memory for every element. The same order.
        const T* values = x.data() + o * reducedCount;
        T total = acc[size_t(o)];
        for (int64_t r = 0; r < reducedCount; ++r)
          reducer.combine(total, values[r]);
        acc[size_t(o)] = total;
        continue;
      }
      for (int64_t r = 0; r < reducedCount; ++r) {
        const T* row = x.data() + (o * reducedCount + r) * inner;
        T* target = acc.data() + o * inner;
        for (int64_t i = 0; i < inner; ++i)
          reducer.combine(target[i], row[i]);
      }
    }
  } else {
    // General axes: the offsets of the reduced sub-tensor, then one pass per output element.
    std::vector<int64_t> strides = contiguousStrides(shape);
    std::vector<int64_t> reducedOffsets = {0};
    for (int64_t axis : params.axes) {
      std::vector<int64_t> next;
      for (int64_t base : reducedOffsets)
        for (int64_t j = 0; j < shape[size_t(axis)]; ++j)
          next.push_back(base + j * strides[size_t(axis)]);
      reducedOffsets = std::move(next);
    }
    std::vector<size_t> kept;
    for (size_t d = 0; d < shape.size(); ++d)
      if (std::find(params.axes.begin(), params.axes.end(), int64_t(d)) == params.axes.end())
        kept.push_back(d);
    std::vector<int64_t> index(kept.size(), 0);
    for (size_t out = 0; out < acc.size(); ++out) {
      int64_t base = 0;
      for (size_t k = 0; k < kept.size(); ++k)
        base += index[k] * strides[kept[k]];
      for (int64_t offset : reducedOffsets)
        reducer.combine(acc[out], x[size_t(base + offset)]);
      for (size_t k = kept.size(); k-- > 0;) {
        if (++index[k] < shape[kept[k]])
          break;
        index[k] = 0;
      }
    }
  }
  if (params.op == ReduceOp::Mean)
    for (T& value : acc)
      value /= T(reducedCount);
  storeRange<T>(io.out[0], 0, int64_t(acc.size()), acc.data());
  return Status::success();
}

/// [outer, length, inner] around `axis`.
struct AxisLayout {
  int64_t outer, length, inner;
  AxisLayout(const Shape& shape, int64_t axis)
      : outer(product(shape, 0, size_t(axis))), length(shape[size_t(axis)]),
        inner(product(shape, size_t(axis) + 1, shape.size())) {}
};

template <typename T>
Status softmaxFamily(const Step& step, const StepIO& io) {
  AxisLayout layout(io.in[0].dims(), step.as<AxisParams>().axis);
  std::vector<T> first = loadAll<T>(io.in[0]); // x, or dy for the gradients
  std::vector<T> second;                       // y for the gradients
  if (io.in.size() > 1)
    second = loadAll<T>(io.in[1]);
  std::vector<T> out(first.size());
  for (int64_t o = 0; o < layout.outer; ++o) {
    for (int64_t i = 0; i < layout.inner; ++i) {
      int64_t base = o * layout.length * layout.inner + i, stride = layout.inner;
      auto at = [&](std::vector<T>& values, int64_t j) -> T& { return values[size_t(base + j * stride)]; };
      switch (step.kind) {
      case StepKind::Softmax:
      case StepKind::LogSoftmax: {
        T max = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < layout.length; ++j)
          max = (at(first, j) > max || at(first, j) != at(first, j)) ? at(first, j) : max;
        T sum = 0;
        for (int64_t j = 0; j < layout.length; ++j)
          sum += std::exp(at(first, j) - max);
        if (step.kind == StepKind::Softmax) {
          for (int64_t j = 0; j < layout.length; ++j)
            at(out, j) = std::exp(at(first, j) - max) / sum;
        } else {
          T logSum = std::log(sum);
          for (int64_t j = 0; j < layout.length; ++j)
            at(out, j) = at(first, j) - max - logSum;
        }
        break;
      }
      case StepKind::SoftmaxGrad: {
        T dot = 0;
        for (int64_t j = 0; j < layout.length; ++j)
          dot += at(first, j) * at(second, j);
        for (int64_t j = 0; j < layout.length; ++j)
          at(out, j) = at(second, j) * (at(first, j) - dot);
        break;
      }
      case StepKind::LogSoftmaxGrad: {
        T sum = 0;
        for (int64_t j = 0; j < layout.length; ++j)
          sum += at(first, j);
        for (int64_t j = 0; j < layout.length; ++j)
          at(out, j) = at(first, j) - std::exp(at(second, j)) * sum;
        break;
      }
      default: return Status::error("internal: not a softmax step");
      }
    }
  }
  storeRange<T>(io.out[0], 0, int64_t(out.size()), out.data());
  return Status::success();
}

template <typename T>
Status layerNorm(const Step& step, const StepIO& io) {
  const LayerNormParams& params = step.as<LayerNormParams>();
  const Shape& shape = io.in[0].dims();
  int64_t rows = product(shape, 0, size_t(params.axis)), cols = product(shape, size_t(params.axis), shape.size());
  std::vector<T> x = loadAll<T>(io.in[0]);
  std::vector<T> weight = io.in[1].present ? loadAll<T>(io.in[1]) : std::vector<T>(size_t(cols), T(1));
  std::vector<T> bias = io.in[2].present ? loadAll<T>(io.in[2]) : std::vector<T>(size_t(cols), T(0));
  std::vector<T> y(x.size()), means(static_cast<size_t>(rows)), rstds(static_cast<size_t>(rows));
  T eps = T(params.eps);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x.data() + r * cols;
    // Two passes (mean, then centred squares): no cancellation for rows far from zero.
    T sum = 0;
    for (int64_t c = 0; c < cols; ++c)
      sum += row[c];
    T mean = sum / T(cols);
    T squares = 0;
    for (int64_t c = 0; c < cols; ++c)
      squares += (row[c] - mean) * (row[c] - mean);
    T rstd = T(1) / std::sqrt(squares / T(cols) + eps);
    for (int64_t c = 0; c < cols; ++c)
      y[size_t(r * cols + c)] = (row[c] - mean) * rstd * weight[size_t(c)] + bias[size_t(c)];
    means[size_t(r)] = mean;
    rstds[size_t(r)] = rstd;
  }
  storeRange<T>(io.out[0], 0, int64_t(y.size()), y.data());
  storeRange<T>(io.out[1], 0, rows, means.data());
  storeRange<T>(io.out[2], 0, rows, rstds.data());
  return Status::success();
}

template <typename T>
Status layerNormGrad(const Step& step, const StepIO& io) {
  int64_t axis = step.as<AxisParams>().axis;
  const Shape& shape = io.in[1].dims();
  int64_t rows = product(shape, 0, size_t(axis)), cols = product(shape, size_t(axis), shape.size());
  std::vector<T> dy = loadAll<T>(io.in[0]), x = loadAll<T>(io.in[1]);
  std::vector<T> means = loadAll<T>(io.in[2]), rstds = loadAll<T>(io.in[3]);
  std::vector<T> weight = io.in[4].present ? loadAll<T>(io.in[4]) : std::vector<T>(size_t(cols), T(1));
  std::vector<T> dx(x.size()), dweight(size_t(cols), T(0)), dbias(size_t(cols), T(0));
  std::vector<T> xhat(static_cast<size_t>(cols)), g(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    T mean = means[size_t(r)], rstd = rstds[size_t(r)];
    const T* dyRow = dy.data() + r * cols;
    const T* xRow = x.data() + r * cols;
    T sumG = 0, sumGXhat = 0;
    for (int64_t c = 0; c < cols; ++c) {
      xhat[size_t(c)] = (xRow[c] - mean) * rstd;
      g[size_t(c)] = dyRow[c] * weight[size_t(c)];
      sumG += g[size_t(c)];
      sumGXhat += g[size_t(c)] * xhat[size_t(c)];
      dweight[size_t(c)] += dyRow[c] * xhat[size_t(c)];
      dbias[size_t(c)] += dyRow[c];
    }
    T meanG = sumG / T(cols), meanGXhat = sumGXhat / T(cols);
    for (int64_t c = 0; c < cols; ++c)
      dx[size_t(r * cols + c)] = rstd * (g[size_t(c)] - meanG - xhat[size_t(c)] * meanGXhat);
  }
  storeRange<T>(io.out[0], 0, int64_t(dx.size()), dx.data());
  storeRange<T>(io.out[1], 0, cols, dweight.data());
  storeRange<T>(io.out[2], 0, cols, dbias.data());
  return Status::success();
}

} // namespace

Status runReduction(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return reduce<decltype(zero)>(step, io); });
}

Status runSoftmaxFamily(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return softmaxFamily<decltype(zero)>(step, io); });
}

Status runLayerNorm(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return layerNorm<decltype(zero)>(step, io); });
}

Status runLayerNormGrad(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return layerNormGrad<decltype(zero)>(step, io); });
}

} // namespace ampjit::runtime::cpu
