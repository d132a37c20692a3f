// Data movement (broadcast_to, reshape, transpose, constant) and dropout.
// Movement copies element bytes and never converts, so it is exact for
// every dtype.

#include "CpuKernels.h"

#include "ampjit/runtime/Philox.h"

namespace ampjit::runtime::cpu {

namespace {

/// Copies elements of `in` to `out` in out's row-major order, reading input
/// element sum(index[d] * strides[d]) (strides in elements, per output dim).
void stridedCopy(const BufferView& in, const BufferView& out, const std::vector<int64_t>& strides) {
  size_t elementBytes = dtypeSize(in.dtype);
  const Shape& shape = out.dims();
  std::vector<int64_t> index(shape.size(), 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < out.count; ++i) {
    std::memcpy(out.data + size_t(i) * elementBytes, in.data + size_t(offset) * elementBytes, elementBytes);
    for (size_t d = shape.size(); d-- > 0;) {
      offset += strides[d];
      if (++index[d] < shape[d])
        break;
      offset -= strides[d] * index[d];
      index[d] = 0;
    }
  }
}

} // namespace

Status runLayout(const Step& step, const StepIO& io) {
  const BufferView &in = io.in[0], &out = io.out[0];
  switch (step.kind) {
  case StepKind::Reshape:
    // A view of its input's bytes (arenaViewRoots) has nothing to move.
    if (out.data != in.data)
      std::memcpy(out.data, in.data, size_t(out.count) * dtypeSize(out.dtype));
    return Status::success();
  case StepKind::BroadcastTo:
    stridedCopy(in, out, broadcastStrides(in.dims(), out.dims()));
    return Status::success();
  case StepKind::Transpose: {
    const std::vector<int64_t>& perm = step.as<TransposeParams>().perm;
    std::vector<int64_t> inStrides = contiguousStrides(in.dims());
    std::vector<int64_t> strides;
    for (int64_t dim : perm)
      strides.push_back(inStrides[size_t(dim)]);
    stridedCopy(in, out, strides);
    return Status::success();
  }
  default: return Status::error("internal: not a layout step");
  }
}

Status runConstant(const Step& step, const StepIO& io) {
  const std::vector<uint8_t>& data = step.as<ConstantParams>().data;
  const BufferView& out = io.out[0];
  size_t elementBytes = dtypeSize(out.dtype);
  if (data.size() == size_t(out.count) * elementBytes) {
    std::memcpy(out.data, data.data(), data.size());
    return Status::success();
  }
  for (int64_t i = 0; i < out.count; ++i)
    std::memcpy(out.data + size_t(i) * elementBytes, data.data(), elementBytes);
  return Status::success();
}

namespace {

template <typename T>
Status dropout(const Step& step, const StepIO& io) {
  double p = step.as<DropoutParams>().p;
  const BufferView &x = io.in[0], &y = io.out[0], &mask = io.out[1];
  // Read the state before writing: next_rng_state is usually rng_state itself.
  int64_t seed = io.in[1].as<const int64_t>()[0];
  int64_t offset = io.in[1].as<const int64_t>()[1];
  T scale = T(1.0 / (1.0 - p));
  constexpr int64_t kChunk = 256;
  T values[kChunk];
  for (int64_t begin = 0; begin < x.count; begin += kChunk) {
    int64_t n = std::min(kChunk, x.count - begin);
    loadRange<T>(x, begin, n, values);
    for (int64_t i = 0; i < n; ++i) {
      uint64_t position = uint64_t(offset) + uint64_t(begin + i);
      bool keep = philoxUniform(philoxBitsAt(uint64_t(seed), position)) >= p;
      values[i] = keep ? values[i] * scale : T(0);
      mask.as<uint8_t>()[begin + i] = keep ? 1 : 0;
    }
    storeRange<T>(y, begin, n, values);
  }
  int64_t* next = io.out[2].as<int64_t>();
  next[0] = seed;
  next[1] = int64_t(uint64_t(offset) + uint64_t(x.count));
  return Status::success();
}

} // namespace

Status runDropout(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return dropout<decltype(zero)>(step, io); });
}

} // namespace ampjit::runtime::cpu
