// jit.embedding (a row gather) and jit.embedding_grad (rows summed by index,
// in the compute type, in index order, rounded once). The CUDA kernels sum
// each output element over the same order, so f32 results agree bit for bit.

#include "CpuKernels.h"

#include <string>

namespace ampjit::runtime::cpu {

namespace {

Status checkIndex(int64_t index, int64_t position, int64_t rows) {
  if (index < 0 || index >= rows)
    return Status::error("index " + std::to_string(index) + " at position " + std::to_string(position) +
                         " is outside the table's rows [0, " + std::to_string(rows) + ")");
  return Status::success();
}

} // namespace

Status runEmbedding(const Step&, const StepIO& io) {
  const BufferView &indices = io.in[0], &table = io.in[1], &out = io.out[0];
  int64_t rows = table.dims()[0], width = table.dims()[1];
  size_t rowBytes = size_t(width) * dtypeSize(table.dtype);
  const int64_t* index = indices.as<const int64_t>();
  for (int64_t n = 0; n < indices.count; ++n) {
    AMPJIT_RETURN_IF_ERROR(checkIndex(index[n], n, rows));
    std::memcpy(out.data + size_t(n) * rowBytes, table.data + size_t(index[n]) * rowBytes, rowBytes);
  }
  return Status::success();
}

Status runEmbeddingGrad(const Step& step, const StepIO& io) {
  const BufferView &dy = io.in[0], &indices = io.in[1], &out = io.out[0];
  int64_t rows = out.dims()[0], width = out.dims()[1];
  int64_t padding = step.as<EmbeddingGradParams>().paddingIdx;
  const int64_t* index = indices.as<const int64_t>();
  for (int64_t n = 0; n < indices.count; ++n)
    AMPJIT_RETURN_IF_ERROR(checkIndex(index[n], n, rows));
  return withComputeType(step.computeType, [&](auto zero) -> Status {
    using T = decltype(zero);
    std::vector<T> sums(size_t(rows * width), T(0));
    std::vector<T> row(static_cast<size_t>(width));
    for (int64_t n = 0; n < indices.count; ++n) {
      if (index[n] == padding)
        continue;
      loadRange<T>(dy, n * width, width, row.data());
      T* target = sums.data() + index[n] * width;
      for (int64_t d = 0; d < width; ++d)
        target[d] += row[size_t(d)];
    }
    storeRange<T>(out, 0, rows * width, sums.data());
    return Status::success();
  });
}

} // namespace ampjit::runtime::cpu
