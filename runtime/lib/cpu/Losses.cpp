// Losses and their gradients (PyTorch's definitions). Classification losses
// skip rows labelled ignore_index, and `mean` divides by the rows counted
// (0/0 = NaN when every row is ignored, as in PyTorch). A label outside
// [0, classes) that is not ignore_index is an error naming the row.

#include "CpuKernels.h"

namespace ampjit::runtime::cpu {

namespace {

/// Checks the labels and counts the rows that are not ignored.
Status countRows(const BufferView& labels, int64_t classes, int64_t ignoreIndex, int64_t& counted) {
  counted = 0;
  const int64_t* values = labels.as<const int64_t>();
  for (int64_t n = 0; n < labels.count; ++n) {
    if (values[n] == ignoreIndex)
      continue;
    if (values[n] < 0 || values[n] >= classes)
      return Status::error("label " + std::to_string(values[n]) + " of row " + std::to_string(n) +
                           " is outside [0, " + std::to_string(classes) + ") and is not ignore_index " +
                           std::to_string(ignoreIndex));
    ++counted;
  }
  return Status::success();
}

/// log(sum(exp(row))) computed stably.
template <typename T>
T logSumExp(const T* row, int64_t classes) {
  T max = -std::numeric_limits<T>::infinity();
  for (int64_t c = 0; c < classes; ++c)
    max = (row[c] > max || row[c] != row[c]) ? row[c] : max;
  T sum = 0;
  for (int64_t c = 0; c < classes; ++c)
    sum += std::exp(row[c] - max);
  return max + std::log(sum);
}

template <typename T>
Status loss(const Step& step, const StepIO& io) {
  const LossParams& params = step.as<LossParams>();
  const BufferView& out = io.out[0];
  std::vector<T> input = loadAll<T>(io.in[0]);
  std::vector<T> perRow; // per element (mse) or per row (classification)
  int64_t counted = 0;
  if (params.loss == LossKind::Mse) {
    std::vector<T> target = loadAll<T>(io.in[1]);
    perRow.resize(input.size());
    for (size_t i = 0; i < input.size(); ++i) {
      T difference = input[i] - target[i];
      perRow[i] = difference * difference;
    }
    counted = int64_t(input.size());
  } else {
    int64_t rows = io.in[0].dims()[0], classes = io.in[0].dims()[1];
    AMPJIT_RETURN_IF_ERROR(countRows(io.in[1], classes, params.ignoreIndex, counted));
    const int64_t* labels = io.in[1].as<const int64_t>();
    perRow.assign(size_t(rows), T(0));
    T smoothing = T(params.labelSmoothing);
    for (int64_t n = 0; n < rows; ++n) {
      if (labels[n] == params.ignoreIndex)
        continue;
      const T* row = input.data() + n * classes;
      if (params.loss == LossKind::Nll) {
        perRow[size_t(n)] = -row[labels[n]];
        continue;
      }
      T lse = logSumExp(row, classes);
      T nll = lse - row[labels[n]];
      if (params.labelSmoothing == 0.0) {
        perRow[size_t(n)] = nll;
        continue;
      }
      // The uniform part: mean over classes of -log_softmax = lse - mean(row).
      T rowSum = 0;
      for (int64_t c = 0; c < classes; ++c)
        rowSum += row[c];
      T uniform = lse - rowSum / T(classes);
      perRow[size_t(n)] = (T(1) - smoothing) * nll + smoothing * uniform;
    }
  }
  if (params.reduction == LossReduction::None) {
    storeRange<T>(out, 0, int64_t(perRow.size()), perRow.data());
    return Status::success();
  }
  T total = 0;
  for (T value : perRow)
    total += value;
  if (params.reduction == LossReduction::Mean)
    total /= T(counted);
  storeAs<T>(out, 0, total);
  return Status::success();
}

template <typename T>
Status lossGrad(const Step& step, const StepIO& io) {
  const LossParams& params = step.as<LossParams>();
  const BufferView& gradOutput = io.in[0];
  const BufferView& out = io.out[0];
  std::vector<T> input = loadAll<T>(io.in[1]);
  std::vector<T> grad(input.size(), T(0));
  bool perElementGrad = params.reduction == LossReduction::None;
  auto incoming = [&](int64_t i) { return loadAs<T>(gradOutput, perElementGrad ? i : 0); };

  if (params.loss == LossKind::Mse) {
    std::vector<T> target = loadAll<T>(io.in[2]);
    // PyTorch: norm * (input - target) * grad_output, norm = 2 (or 2 / numel for mean).
    T norm = params.reduction == LossReduction::Mean ? T(2.0 / double(input.size())) : T(2);
    for (size_t i = 0; i < input.size(); ++i)
      grad[i] = norm * (input[i] - target[i]) * incoming(int64_t(i));
    storeRange<T>(out, 0, int64_t(grad.size()), grad.data());
    return Status::success();
  }

  int64_t rows = io.in[1].dims()[0], classes = io.in[1].dims()[1];
  int64_t counted = 0;
  AMPJIT_RETURN_IF_ERROR(countRows(io.in[2], classes, params.ignoreIndex, counted));
  const int64_t* labels = io.in[2].as<const int64_t>();
  T smoothing = T(params.labelSmoothing);
  for (int64_t n = 0; n < rows; ++n) {
    if (labels[n] == params.ignoreIndex)
      continue;
    T scale = incoming(n);
    if (params.reduction == LossReduction::Mean)
      scale /= T(counted);
    T* target = grad.data() + n * classes;
    if (params.loss == LossKind::Nll) {
      target[labels[n]] = -scale;
      continue;
    }
    const T* row = input.data() + n * classes;
    T lse = logSumExp(row, classes);
    T uniform = smoothing / T(classes);
    for (int64_t c = 0; c < classes; ++c) {
      T probability = std::exp(row[c] - lse);
      T wanted = (c == labels[n] ? T(1) - smoothing : T(0)) + uniform;
      target[c] = scale * (probability - wanted);
    }
  }
  storeRange<T>(out, 0, int64_t(grad.size()), grad.data());
  return Status::success();
}

} // namespace

Status runLoss(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return loss<decltype(zero)>(step, io); });
}

Status runLossGrad(const Step& step, const StepIO& io) {
  return withComputeType(step.computeType, [&](auto zero) { return lossGrad<decltype(zero)>(step, io); });
}

} // namespace ampjit::runtime::cpu
