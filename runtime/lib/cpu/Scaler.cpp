// The loss-scaler steps: scale_loss, all_finite, unscale_and_check and
// update_scale. Non-finite values are data here, never errors.

#include "CpuKernels.h"

#include "ampjit/runtime/LossScaler.h"

namespace ampjit::runtime::cpu {

namespace {

/// Whether no element of `bits` has every exponent bit set (an inf or NaN).
/// The test is on the bits, chunk by chunk with no early exit inside a chunk,
/// so the loop vectorises; finite data, the common case, reads it all anyway.
template <typename Bits>
bool noAllOnesExponent(const Bits* bits, int64_t count, Bits exponentMask) {
  constexpr int64_t kChunk = 1024;
  for (int64_t begin = 0; begin < count; begin += kChunk) {
    int64_t end = std::min(count, begin + kChunk);
    Bits allOnes = 0;
    for (int64_t i = begin; i < end; ++i)
      allOnes |= Bits((bits[i] & exponentMask) == exponentMask);
    if (allOnes)
      return false;
  }
  return true;
}

} // namespace

bool allFinite(const BufferView& view) {
  switch (view.dtype) {
  case DType::F32: return noAllOnesExponent<uint32_t>(view.as<const uint32_t>(), view.count, 0x7F800000u);
  case DType::F64:
    return noAllOnesExponent<uint64_t>(view.as<const uint64_t>(), view.count, 0x7FF0000000000000u);
  case DType::F16: return noAllOnesExponent<uint16_t>(view.as<const uint16_t>(), view.count, 0x7C00u);
  case DType::BF16: return noAllOnesExponent<uint16_t>(view.as<const uint16_t>(), view.count, 0x7F80u);
  case DType::I64:
  case DType::I1: return true;
  }
  return true;
}

namespace {

template <typename T>
void scaleInto(const BufferView& in, const BufferView& out, float factor) {
  constexpr int64_t kChunk = 256;
  T values[kChunk];
  for (int64_t begin = 0; begin < in.count; begin += kChunk) {
    int64_t n = std::min(kChunk, in.count - begin);
    loadRange<T>(in, begin, n, values);
    for (int64_t i = 0; i < n; ++i)
      values[i] *= T(factor);
    storeRange<T>(out, begin, n, values);
  }
}

} // namespace

Status runScaler(const Step& step, const StepIO& io) {
  switch (step.kind) {
  case StepKind::ScaleLoss: {
    float scale = io.in[1].as<const float>()[0];
    withComputeType(step.computeType, [&](auto zero) {
      scaleInto<decltype(zero)>(io.in[0], io.out[0], scale);
      return 0;
    });
    return Status::success();
  }
  case StepKind::AllFinite: {
    bool finite = true;
    for (const BufferView& grad : io.in)
      finite = finite && allFinite(grad);
    io.out[0].as<uint8_t>()[0] = finite ? 1 : 0;
    return Status::success();
  }
  case StepKind::UnscaleAndCheck: {
    float invScale = io.in[0].as<const float>()[0];
    bool finite = true;
    for (size_t g = 1; g < io.in.size(); ++g) {
      // The input is checked before it is overwritten (unscaled in place);
      // the output too, in case an inv_scale above 1 overflows it.
      finite = finite && allFinite(io.in[g]);
      withComputeType(step.computeType, [&](auto zero) {
        scaleInto<decltype(zero)>(io.in[g], io.out[g - 1], invScale);
        return 0;
      });
      finite = finite && allFinite(io.out[g - 1]);
    }
    io.out.back().as<uint8_t>()[0] = finite ? 1 : 0;
    return Status::success();
  }
  case StepKind::UpdateScale: {
    LossScalerState state{io.in[0].as<const float>()[0], io.in[1].as<const int64_t>()[0],
                          io.in[2].as<const int64_t>()[0], io.in[3].as<const int64_t>()[0]};
    bool finite = io.in[4].as<const uint8_t>()[0] != 0;
    state = updateLossScale(state, finite, step.as<UpdateScaleParams>());
    io.out[0].as<float>()[0] = state.scale;
    io.out[1].as<int64_t>()[0] = state.goodSteps;
    io.out[2].as<int64_t>()[0] = state.badSteps;
    io.out[3].as<int64_t>()[0] = state.skippedSteps;
    return Status::success();
  }
  default: return Status::error("internal: not a scaler step");
  }
}

} // namespace ampjit::runtime::cpu
