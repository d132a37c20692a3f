#ifndef AMPJIT_TESTS_UNIT_RUNTIME_RUNTIMETESTUTIL_H
#define AMPJIT_TESTS_UNIT_RUNTIME_RUNTIMETESTUTIL_H

// Helpers shared by the runtime tests: building plans by hand the way
// codegen will (StepBuilder + bindStep), with a simple liveness-based arena
// layout so that temporaries really share bytes.

#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/StepBuilder.h"
#include "ampjit/runtime/Tensor.h"

#include "Tolerance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace ampjit::runtime::test {

inline TensorType tt(DType dtype, Shape shape) { return TensorType{dtype, std::move(shape)}; }

/// Builds a plan one op at a time, as codegen does.
class PlanBuilder {
public:
  explicit PlanBuilder(std::string name) { plan_.name = std::move(name); }

  BufferId argument(TensorType type, BufferRole role, std::string name = "") {
    BufferDesc buffer;
    buffer.type = std::move(type);
    buffer.role = role;
    buffer.argument = nextArgument_++;
    buffer.name = std::move(name);
    return add(std::move(buffer));
  }
  BufferId temporary(TensorType type) {
    BufferDesc buffer;
    buffer.type = std::move(type);
    buffer.role = BufferRole::Temporary;
    return add(std::move(buffer));
  }
  BufferId carried(TensorType type, std::string name = "") {
    BufferDesc buffer;
    buffer.type = std::move(type);
    buffer.role = BufferRole::Carried;
    buffer.name = std::move(name);
    return add(std::move(buffer));
  }
  BufferId output(TensorType type) {
    BufferDesc buffer;
    buffer.type = std::move(type);
    buffer.role = BufferRole::Output;
    return add(std::move(buffer));
  }
  BufferId constant(TensorType type, std::span<const double> values) {
    Tensor tensor = *Tensor::fromDoubles(type.dtype, type.shape, values);
    BufferDesc buffer;
    buffer.type = std::move(type);
    buffer.role = BufferRole::Constant;
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(tensor.bytes());
    buffer.constantData.assign(bytes, bytes + tensor.byteSize());
    return add(std::move(buffer));
  }

  /// Adds the step for `op`, reading `operands` (kNoBuffer for an absent
  /// optional operand) and writing `results`.
  void op(std::string_view name, std::vector<BufferId> operands, std::vector<BufferId> results,
          const AttributeMap& attributes = {}) {
    std::vector<std::optional<TensorType>> operandTypes;
    for (BufferId id : operands)
      operandTypes.push_back(id == kNoBuffer ? std::nullopt : std::optional(plan_.buffers[id].type));
    std::vector<TensorType> resultTypes;
    for (BufferId id : results)
      resultTypes.push_back(plan_.buffers[id].type);
    Expected<Step> step = buildStep(name, operandTypes, resultTypes, attributes);
    ASSERT_TRUE(step.ok()) << step.message();
    ASSERT_TRUE(bindStep(*step, operands, results).ok());
    plan_.steps.push_back(std::move(*step));
  }

  void step(Step step) { plan_.steps.push_back(std::move(step)); }

  /// Adds a FusedElementwise step (what elementwise fusion writes): `program`
  /// over `inputs`, registers `stored` into `outputs`.
  void fused(std::vector<FusedInstruction> program, std::vector<uint32_t> stored, std::vector<BufferId> inputs,
             std::vector<BufferId> outputs, std::string origin = "fused") {
    Step step;
    step.kind = StepKind::FusedElementwise;
    step.params = FusedElementwiseParams{std::move(program), std::move(stored)};
    step.inputs = std::move(inputs);
    step.outputs = std::move(outputs);
    step.origin = std::move(origin);
    plan_.steps.push_back(std::move(step));
  }

  void result(BufferId buffer, int32_t tiedArgument = -1) {
    plan_.results.push_back(PlanResult{buffer, tiedArgument});
  }

  /// Lays temporaries out by liveness (first fit, 64-byte aligned), reusing
  /// the bytes of dead ones, and returns the plan.
  Plan finish() {
    Plan plan = plan_;
    size_t count = plan.buffers.size();
    std::vector<size_t> first(count, SIZE_MAX), last(count, 0);
    for (size_t s = 0; s < plan.steps.size(); ++s) {
      for (BufferId id : plan.steps[s].inputs)
        if (id != kNoBuffer)
          last[id] = std::max(last[id], s);
      for (BufferId id : plan.steps[s].outputs)
        if (id != kNoBuffer) {
          first[id] = std::min(first[id], s);
          last[id] = std::max(last[id], s);
        }
    }
    struct Placed {
      uint64_t offset, end;
      size_t first, last;
    };
    std::vector<Placed> placed;
    uint64_t arena = 0;
    for (BufferId id = 0; id < count; ++id) {
      BufferDesc& buffer = plan.buffers[id];
      if (buffer.role != BufferRole::Temporary)
        continue;
      if (first[id] == SIZE_MAX) // never written (a broken plan under test): live throughout
        first[id] = 0, last[id] = plan.steps.size();
      uint64_t size = (uint64_t(buffer.type.byteSize()) + 63) / 64 * 64;
      uint64_t offset = 0;
      bool moved = true;
      while (moved) {
        moved = false;
        for (const Placed& other : placed) {
          bool liveTogether = first[id] <= other.last && other.first <= last[id];
          if (liveTogether && offset < other.end && other.offset < offset + size) {
            offset = other.end;
            moved = true;
          }
        }
      }
      buffer.arenaOffset = offset;
      placed.push_back({offset, offset + size, first[id], last[id]});
      arena = std::max(arena, offset + size);
    }
    plan.arenaBytes = arena;
    return plan;
  }

  Plan& raw() { return plan_; }

private:
  BufferId add(BufferDesc buffer) {
    plan_.buffers.push_back(std::move(buffer));
    return BufferId(plan_.buffers.size() - 1);
  }

  Plan plan_;
  int32_t nextArgument_ = 0;
};

/// A tensor of uniformly random values in [low, high), rounded to its dtype.
inline Tensor randomTensor(DType dtype, Shape shape, std::mt19937_64& rng, double low = -1.0,
                           double high = 1.0) {
  Tensor tensor = *Tensor::allocate(dtype, std::move(shape));
  std::uniform_real_distribution<double> uniform(low, high);
  for (int64_t i = 0; i < tensor.elementCount(); ++i)
    tensor.set(i, uniform(rng));
  return tensor;
}

inline Tensor filled(DType dtype, Shape shape, std::vector<double> values) {
  Expected<Tensor> tensor = Tensor::fromDoubles(dtype, std::move(shape), values);
  EXPECT_TRUE(tensor.ok()) << tensor.message();
  return std::move(*tensor);
}

using ampjit::testing::Tolerance;
using ampjit::testing::toleranceFor;

/// Checks every element of `actual` against `expected` within
/// atol + rtol * |expected| + extra[i] (extra: an accumulation bound, e.g.
/// K * eps32 * sum|terms| for a dot product; empty for none). NaN must
/// match NaN and infinities must match exactly.
inline ::testing::AssertionResult allClose(const Tensor& actual, const std::vector<double>& expected,
                                           Tolerance tolerance, const std::vector<double>& extra = {}) {
  if (actual.elementCount() != int64_t(expected.size()))
    return ::testing::AssertionFailure() << "element count " << actual.elementCount() << " vs "
                                         << expected.size();
  int failures = 0;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (size_t i = 0; i < expected.size(); ++i) {
    double got = actual.at(int64_t(i)), want = expected[i];
    bool ok;
    if (std::isnan(want) || std::isinf(want))
      ok = std::isnan(want) ? std::isnan(got) : got == want;
    else
      ok = std::abs(got - want) <= tolerance.atol + tolerance.rtol * std::abs(want) +
                                        (extra.empty() ? 0.0 : extra[i]);
    if (!ok) {
      if (failures == 0)
        result = ::testing::AssertionFailure();
      if (failures < 8)
        result << "element " << i << ": got " << got << ", want " << want << " (diff " << got - want
               << ")\n";
      ++failures;
    }
  }
  if (failures > 8)
    result << "... " << failures << " elements differ";
  return result;
}

/// x -> neg -> t -> reshape -> view -> exp -> out, with the view laid out at
/// t's own bytes (what codegen does, so the reshape moves nothing).
struct ViewPlan {
  Plan plan;
  BufferId t, view;
};
inline ViewPlan reshapeViewPlan() {
  PlanBuilder b("view");
  BufferId x = b.argument(tt(DType::F32, {6}), BufferRole::Input);
  BufferId t = b.temporary(tt(DType::F32, {6}));
  BufferId view = b.temporary(tt(DType::F32, {2, 3}));
  BufferId out = b.output(tt(DType::F32, {2, 3}));
  b.op("jit.neg", {x}, {t});
  b.op("jit.reshape", {t}, {view});
  b.op("jit.exp", {view}, {out});
  b.result(out);
  Plan plan = b.finish();
  plan.buffers[view].arenaOffset = plan.buffers[t].arenaOffset;
  return {plan, t, view};
}

/// A small mixed-precision train step touching most step kinds and every
/// kind of parameter field, so that the file round trip covers each encoding.
inline Plan sampleTrainStep() {
  PlanBuilder b("train_step");
  BufferId x = b.argument(tt(DType::F32, {4, 8}), BufferRole::Input, "x");
  BufferId w = b.argument(tt(DType::F32, {3, 8}), BufferRole::Param, "w");
  BufferId w16 = b.argument(tt(DType::F16, {3, 8}), BufferRole::Param, "w16");
  b.raw().buffers[w16].derivedFrom = 1;
  BufferId bias = b.argument(tt(DType::F32, {3}), BufferRole::Param, "b");
  BufferId labels = b.argument(tt(DType::I64, {4}), BufferRole::Input, "labels");
  BufferId momentum = b.argument(tt(DType::F32, {3, 8}), BufferRole::OptState, "buf");
  BufferId lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper, "lr");
  BufferId scale = b.argument(tt(DType::F32, {}), BufferRole::ScalerState, "scale");
  BufferId good = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "good");
  BufferId bad = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "bad");
  BufferId skipped = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "skipped");
  BufferId rng = b.argument(tt(DType::I64, {2}), BufferRole::OptState, "rng");

  BufferId x16 = b.temporary(tt(DType::F16, {4, 8}));
  b.op("amp.cast", {x}, {x16});
  BufferId h = b.temporary(tt(DType::F16, {4, 3}));
  b.op("jit.matmul", {x16, w16}, {h}, {{"transpose_rhs", true}});
  BufferId b16 = b.temporary(tt(DType::F16, {3}));
  b.op("amp.cast", {bias}, {b16});

  // relu(h + b) in f16, also widened to f32: one fused step, two outputs.
  BufferId act16 = b.output(tt(DType::F16, {4, 3}));
  BufferId act = b.temporary(tt(DType::F32, {4, 3}));
  b.fused(
      {
          {ElementwiseOp::Load, DType::F16, {0, 0, 0}, 0.0},
          {ElementwiseOp::Load, DType::F16, {1, 0, 0}, 0.0},
          {ElementwiseOp::Add, DType::F16, {0, 1, 0}, 0.0},
          {ElementwiseOp::Relu, DType::F16, {2, 0, 0}, 0.0},
          {ElementwiseOp::Convert, DType::F32, {3, 0, 0}, 0.0},
          {ElementwiseOp::Constant, DType::F32, {0, 0, 0}, 0.5},
          {ElementwiseOp::Pow, DType::F32, {4, 0, 0}, 2.0},
      },
      {3, 6}, {h, b16}, {act16, act}, "fused(jit.add, jit.relu, amp.cast, jit.pow)");

  BufferId dropped = b.temporary(tt(DType::F32, {4, 3}));
  BufferId mask = b.temporary(tt(DType::I1, {4, 3}));
  b.op("jit.dropout", {act, rng}, {dropped, mask, rng}, {{"p", 0.25}});
  BufferId loss = b.output(tt(DType::F32, {}));
  b.op("jit.cross_entropy", {dropped, labels}, {loss}, {{"label_smoothing", 0.1}});
  BufferId scaled = b.temporary(tt(DType::F32, {}));
  b.op("amp.scale_loss", {loss, scale}, {scaled});
  BufferId dlogits = b.temporary(tt(DType::F32, {4, 3}));
  b.op("jit.cross_entropy_grad", {scaled, dropped, labels}, {dlogits}, {{"label_smoothing", 0.1}});
  BufferId gw = b.temporary(tt(DType::F32, {3, 8}));
  b.op("jit.matmul", {dlogits, x}, {gw}, {{"transpose_lhs", true}});
  BufferId ok = b.temporary(tt(DType::I1, {}));
  b.op("amp.all_finite", {gw}, {ok});
  BufferId invScale = b.temporary(tt(DType::F32, {}));
  b.op("jit.div", {scale, scale}, {invScale});
  b.op("jit.sgd_update", {w, gw, momentum, kNoBuffer, lr, invScale, ok, w16}, {w, momentum, w16},
       {{"momentum", 0.9}, {"nesterov", true}});
  b.op("amp.update_scale", {scale, good, bad, skipped, ok}, {scale, good, bad, skipped},
       {{"growth_interval", int64_t(1000)}});
  BufferId rowSums = b.output(tt(DType::F32, {4, 1}));
  b.op("jit.sum", {act}, {rowSums}, {{"axes", std::vector<int64_t>{1}}, {"keepdim", true}});
  BufferId normed = b.output(tt(DType::F32, {4, 8}));
  BufferId mean = b.temporary(tt(DType::F32, {4}));
  BufferId rstd = b.temporary(tt(DType::F32, {4}));
  b.op("jit.layer_norm", {x, kNoBuffer, kNoBuffer}, {normed, mean, rstd}, {{"axis", int64_t(1)}});
  BufferId wt = b.output(tt(DType::F32, {8, 3}));
  b.op("jit.transpose", {w}, {wt}, {{"perm", std::vector<int64_t>{1, 0}}});
  BufferId half = b.constant(tt(DType::F32, {3}), std::vector<double>{0.5, 1.5, -2});
  BufferId shifted = b.output(tt(DType::F32, {4, 3}));
  b.op("jit.add", {act, half}, {shifted});

  b.result(loss);
  b.result(act16);
  b.result(rowSums);
  b.result(normed);
  b.result(wt);
  b.result(shifted);
  b.result(w, 1);
  b.result(momentum, 5);
  b.result(w16, 2);
  b.result(scale, 7);
  b.result(good, 8);
  b.result(bad, 9);
  b.result(skipped, 10);
  b.result(rng, 11);
  return b.finish();
}

/// Where deferredSgdStep() keeps its pieces.
struct DeferredSgdStep {
  Plan plan;
  BufferId x, w, lr, loss, gradient, lrCopy;
};

/// loss = sum(w * x) with the SGD step w -= lr * x deferred to the next run,
/// laid out as codegen's deferOptimizerUpdates leaves a step: the update
/// first, reading the gradient and a snapshot of lr that the run carries.
/// Arguments: x (input f32[4]), w (param f32[4]), lr (hyper f32[]).
inline DeferredSgdStep deferredSgdStep() {
  PlanBuilder b("deferred_sgd");
  DeferredSgdStep parts{};
  parts.x = b.argument(tt(DType::F32, {4}), BufferRole::Input, "x");
  parts.w = b.argument(tt(DType::F32, {4}), BufferRole::Param, "w");
  parts.lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper, "lr");
  parts.gradient = b.carried(tt(DType::F32, {4}), "grad");
  parts.lrCopy = b.carried(tt(DType::F32, {}), "lr.deferred");
  b.op("jit.sgd_update", {parts.w, parts.gradient, kNoBuffer, kNoBuffer, parts.lrCopy, kNoBuffer, kNoBuffer, kNoBuffer},
       {parts.w});
  BufferId product = b.temporary(tt(DType::F32, {4}));
  b.op("jit.mul", {parts.w, parts.x}, {product});
  parts.loss = b.output(tt(DType::F32, {}));
  b.op("jit.sum", {product}, {parts.loss}, {{"axes", std::vector<int64_t>{0}}});
  // d loss / d w = x
  b.op("amp.cast", {parts.x}, {parts.gradient});
  b.op("amp.cast", {parts.lr}, {parts.lrCopy});
  b.result(parts.loss);
  b.result(parts.w, 1);
  parts.plan = b.finish();
  parts.plan.deferredSteps = 1;
  return parts;
}

/// Where scaledTwoLayerStep() keeps its pieces.
struct ScaledTwoLayerStep {
  Plan plan;
  BufferId x, target, w0, w0Copy, w1, momentum, lr, scale, loss;
  /// Steps: the weight gradients, the check, inv_scale = 1 / scale and the
  /// two updates (w0's, then w1's).
  std::size_t gw1Step, gw0Step, checkStep, inverseStep, w0Update, w1Update;
};

/// A mixed-precision step of two f16 layers under a dynamic loss scaler, as
/// jit::trace lays one out: y = (x w0) w1, MSE against target, the scaled
/// backward, all_finite over both f16 weight gradients, inv_scale = 1 / scale,
/// then SGD predicated on the check for w0 (plain, writing its f16 copy
/// w0Copy, O1's kept cast) and for w1 (momentum 0.9, cast each step), and the
/// scale update. Arguments in order: x (input f16[rows, width]), target
/// (input f32[rows, width]), w0, w0Copy, w1, momentum, lr, scale, good, bad,
/// skipped. Without `w1Momentum`, w1's SGD is plain too (its momentum
/// argument stays, unread and unchanged), so both updates may fold into
/// their gradients' GEMMs on CUDA.
inline ScaledTwoLayerStep scaledTwoLayerStep(int64_t rows, int64_t width, bool w1Momentum = true) {
  PlanBuilder b("scaled_two_layers");
  ScaledTwoLayerStep parts{};
  TensorType square = tt(DType::F32, {width, width}), square16 = tt(DType::F16, {width, width});
  parts.x = b.argument(tt(DType::F16, {rows, width}), BufferRole::Input, "x");
  parts.target = b.argument(tt(DType::F32, {rows, width}), BufferRole::Input, "target");
  parts.w0 = b.argument(square, BufferRole::Param, "w0");
  parts.w0Copy = b.argument(square16, BufferRole::Param, "w0.f16");
  parts.w1 = b.argument(square, BufferRole::Param, "w1");
  parts.momentum = b.argument(square, BufferRole::OptState, "w1.momentum");
  parts.lr = b.argument(tt(DType::F32, {}), BufferRole::Hyper, "lr");
  parts.scale = b.argument(tt(DType::F32, {}), BufferRole::ScalerState, "scale");
  BufferId good = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "good");
  BufferId bad = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "bad");
  BufferId skipped = b.argument(tt(DType::I64, {}), BufferRole::ScalerState, "skipped");

  std::size_t steps = 0;
  auto op = [&](std::string_view name, std::vector<BufferId> in, std::vector<BufferId> out,
                const AttributeMap& attributes = {}) {
    b.op(name, std::move(in), std::move(out), attributes);
    return steps++;
  };
  TensorType activation16 = tt(DType::F16, {rows, width}), activation = tt(DType::F32, {rows, width});
  BufferId h = b.temporary(activation16), w1Half = b.temporary(square16), y16 = b.temporary(activation16);
  op("jit.matmul", {parts.x, parts.w0Copy}, {h});
  op("amp.cast", {parts.w1}, {w1Half});
  op("jit.matmul", {h, w1Half}, {y16});
  BufferId y = b.temporary(activation);
  op("amp.cast", {y16}, {y});
  parts.loss = b.output(tt(DType::F32, {}));
  op("jit.mse_loss", {y, parts.target}, {parts.loss});
  // d(loss * scale) / d loss = scale.
  BufferId dy = b.temporary(activation), dy16 = b.temporary(activation16);
  op("jit.mse_loss_grad", {parts.scale, y, parts.target}, {dy});
  op("amp.cast", {dy}, {dy16});
  BufferId gw1 = b.temporary(square16), dh = b.temporary(activation16), gw0 = b.temporary(square16);
  parts.gw1Step = op("jit.matmul", {h, dy16}, {gw1}, {{"transpose_lhs", true}});
  op("jit.matmul", {dy16, w1Half}, {dh}, {{"transpose_rhs", true}});
  parts.gw0Step = op("jit.matmul", {parts.x, dh}, {gw0}, {{"transpose_lhs", true}});
  BufferId ok = b.temporary(tt(DType::I1, {}));
  parts.checkStep = op("amp.all_finite", {gw0, gw1}, {ok});
  BufferId one = b.constant(tt(DType::F32, {}), std::vector<double>{1.0});
  BufferId inverse = b.temporary(tt(DType::F32, {}));
  parts.inverseStep = op("jit.div", {one, parts.scale}, {inverse});
  parts.w0Update = op("jit.sgd_update", {parts.w0, gw0, kNoBuffer, kNoBuffer, parts.lr, inverse, ok, parts.w0Copy},
                      {parts.w0, parts.w0Copy});
  if (w1Momentum)
    parts.w1Update = op("jit.sgd_update", {parts.w1, gw1, parts.momentum, kNoBuffer, parts.lr, inverse, ok, kNoBuffer},
                        {parts.w1, parts.momentum}, {{"momentum", 0.9}});
  else
    parts.w1Update =
        op("jit.sgd_update", {parts.w1, gw1, kNoBuffer, kNoBuffer, parts.lr, inverse, ok, kNoBuffer}, {parts.w1});
  op("amp.update_scale", {parts.scale, good, bad, skipped, ok}, {parts.scale, good, bad, skipped},
     {{"growth_interval", int64_t(2)}});
  b.result(parts.loss);
  b.result(parts.w0, 2);
  b.result(parts.w0Copy, 3);
  b.result(parts.w1, 4);
  if (w1Momentum)
    b.result(parts.momentum, 5);
  b.result(parts.scale, 7);
  b.result(good, 8);
  b.result(bad, 9);
  b.result(skipped, 10);
  parts.plan = b.finish();
  return parts;
}

/// The CPU backend the tests share (one per process, like OpenBLAS's threads).
inline Backend& cpuBackend() {
  static std::unique_ptr<Backend> backend = createCpuBackend();
  return *backend;
}

/// Runs one op eagerly (a one-step plan) on the CPU backend. `operands` holds
/// every operand position, nullptr for an absent optional one.
inline Expected<std::vector<Tensor>> tryRunOp(std::string_view op, std::vector<const Tensor*> operands,
                                              std::vector<TensorType> results, const AttributeMap& attributes = {},
                                              std::vector<int> resultTiedToOperand = {}) {
  std::vector<std::optional<TensorType>> operandTypes;
  std::vector<Tensor> arguments;
  for (const Tensor* operand : operands) {
    operandTypes.push_back(operand ? std::optional(operand->type()) : std::nullopt);
    if (operand)
      arguments.push_back(*operand);
  }
  Expected<Plan> plan = buildSingleOpPlan(op, operandTypes, results, attributes, resultTiedToOperand);
  if (!plan)
    return plan.status();
  return cpuBackend().run(std::move(*plan), arguments);
}

inline std::vector<Tensor> runOp(std::string_view op, std::vector<const Tensor*> operands,
                                 std::vector<TensorType> results, const AttributeMap& attributes = {},
                                 std::vector<int> resultTiedToOperand = {}) {
  Expected<std::vector<Tensor>> outputs =
      tryRunOp(op, std::move(operands), std::move(results), attributes, std::move(resultTiedToOperand));
  EXPECT_TRUE(outputs.ok()) << op << ": " << outputs.message();
  return outputs.ok() ? std::move(*outputs) : std::vector<Tensor>{};
}

/// Every floating dtype, for tests that run each kernel in each precision.
inline constexpr DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};

/// d(sum(forward(x) * weights))/dx by central differences, one element at a time.
inline std::vector<double> numericalGradient(const std::function<Tensor(const Tensor&)>& forward,
                                             const Tensor& x, const std::vector<double>& weights) {
  std::vector<double> grad;
  double h = 1e-6;
  for (int64_t i = 0; i < x.elementCount(); ++i) {
    Tensor plus = *x.clone(), minus = *x.clone();
    plus.set(i, x.at(i) + h);
    minus.set(i, x.at(i) - h);
    std::vector<double> up = forward(plus).toDoubles(), down = forward(minus).toDoubles();
    double derivative = 0;
    for (size_t k = 0; k < up.size(); ++k)
      derivative += weights[k] * (up[k] - down[k]) / (2 * h);
    grad.push_back(derivative);
  }
  return grad;
}

inline constexpr Tolerance kGradientCheck = {1e-6, 1e-7};

} // namespace ampjit::runtime::test

#endif // AMPJIT_TESTS_UNIT_RUNTIME_RUNTIMETESTUTIL_H
