// The numeric CUDA kernels (reductions, softmax family, layer norm, losses,
// dropout) against the CPU backend: one-op plans over every floating dtype,
// odd sizes (1, 3, sizes that are not multiples of the block size, rows longer
// than a block), axis variants, empty tensors and NaN/inf inputs.

#include "GpuTestUtil.h"
#include "cuda/DeviceStep.h"

#include "ampjit/runtime/StepBuilder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace ampjit::runtime::gputest {
namespace {

using test::PlanBuilder;
using test::tt;

constexpr DType kDataTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string describe(DType dtype, const Shape& shape, const std::string& extra = "") {
  return std::string(dtypeName(dtype)) + " " + shapeToString(shape) + (extra.empty() ? "" : " " + extra);
}

Expected<Plan> singleOp(std::string_view op, std::vector<std::optional<TensorType>> operands,
                        std::vector<TensorType> results, const AttributeMap& attributes,
                        std::vector<int> tied = {}) {
  return buildSingleOpPlan(op, operands, results, attributes, tied);
}

/// Runs `plan` on both backends `runs` times and expects every result (and
/// every argument, which in-place state updates write) to agree; result k
/// is compared with slack `slacks[k]` (the last entry for the rest).
void expectAgree(Backend& cpu, CudaBackend& cuda, const Plan& plan, const std::vector<Tensor>& arguments,
                 std::vector<double> slacks, const std::string& what, int runs = 1) {
  Expected<BothRuns> both = runOnBoth(cpu, cuda, plan, arguments, runs);
  ASSERT_TRUE(both.ok()) << what << ": " << both.message();
  ASSERT_EQ(both->cpuResults.size(), both->cudaResults.size()) << what;
  for (size_t k = 0; k < both->cpuResults.size(); ++k) {
    double slack = slacks.empty() ? 1.0 : slacks[std::min(k, slacks.size() - 1)];
    EXPECT_TRUE(allClose(both->cpuResults[k], both->cudaResults[k], slack)) << what << ", result " << k;
  }
  for (size_t k = 0; k < both->cpuArguments.size(); ++k)
    EXPECT_TRUE(allClose(both->cpuArguments[k], both->cudaArguments[k])) << what << ", argument " << k;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

Shape reducedShape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), int64_t(d)) != axes.end();
    if (!reduced)
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

struct ReductionCase {
  Shape shape;
  std::vector<int64_t> axes;
};

TEST_F(GpuTest, ReductionsMatchTheCpuOverEveryAxisPattern) {
  const ReductionCase cases[] = {
      {{}, {}},                // rank 0: a copy
      {{1}, {0}},
      {{3}, {0}},
      {{1037}, {0}},           // one block, a partial last chunk
      {{4, 5, 6}, {1}},        // middle axis, few elements: a thread per output
      {{4, 5, 6}, {0, 2}},     // non-adjacent axes
      {{4, 5, 6}, {0, 1, 2}},
      {{2, 33, 70}, {0, 2}},   // non-adjacent, a block per output
      {{7, 300}, {1}},
      {{3, 2, 257}, {1, 2}},
      {{3, 40000}, {1}},       // few outputs, long ranges: split over blocks
      {{70001}, {0}},          // a whole-tensor reduction, split
      {{3, 5, 20000}, {0, 2}}, // split, non-adjacent axes
      {{300, 7}, {0}},         // over rows, outputs contiguous: the column kernel
      {{2000, 40}, {0}},       // the column kernel in several parts
      {{3, 600, 50}, {0, 1}},
      {{64, 3, 33}, {0}},
      {{2, 0, 3}, {1}},        // nothing reduced: 0, NaN and -inf
      {{0, 3}, {1}},           // no output
      {{40, 0}, {0}},          // no output, over rows (the column kernel's shape)
  };
  for (const ReductionCase& c : cases)
    for (std::string op : {"jit.sum", "jit.mean", "jit.max"})
      for (bool keepdim : {false, true})
        for (DType dtype : kDataTypes) {
          TensorType in{dtype, c.shape};
          TensorType out{dtype, reducedShape(c.shape, c.axes, keepdim)};
          Expected<Plan> plan = singleOp(op, {in}, {out}, {{"axes", c.axes}, {"keepdim", keepdim}});
          ASSERT_TRUE(plan.ok()) << plan.message();
          int64_t reduced = 1;
          for (int64_t axis : c.axes)
            reduced *= c.shape[size_t(axis)];
          std::string what = op + " " + describe(dtype, c.shape, keepdim ? "keepdim" : "");
          // Two runs: the split path's workspace partials must not leak between runs.
          expectAgree(*cpu, *cuda, *plan, randomArguments(*plan, 1), {1.0 + double(reduced) / 64}, what, 2);
        }
}

TEST_F(GpuTest, ReductionsPropagateNaNAndInfinities) {
  for (DType dtype : kDataTypes)
    for (std::string op : {"jit.sum", "jit.mean", "jit.max"})
      for (int64_t length : {5, 100, 40000}) { // a thread, a block, several blocks per output
        TensorType in{dtype, {4, length}};
        Expected<Plan> plan = singleOp(op, {in}, {TensorType{dtype, {4}}}, {{"axes", std::vector<int64_t>{1}}});
        ASSERT_TRUE(plan.ok()) << plan.message();
        std::vector<Tensor> arguments = randomArguments(*plan, 2);
        arguments[0].set(1, kNaN);                  // row 0: a NaN among finite values
        arguments[0].set(length + 2, kInf);         // row 1: +inf
        arguments[0].set(2 * length, kInf);         // row 2: +inf and -inf (sum NaN, max inf)
        arguments[0].set(2 * length + 3, -kInf);
        arguments[0].set(3 * length + length - 1, kNaN); // row 3: NaN last, after a -inf
        arguments[0].set(3 * length, -kInf);
        expectAgree(*cpu, *cuda, *plan, arguments, {1.0 + double(length) / 64},
                    op + " " + describe(dtype, in.shape, "with NaN/inf"));
      }
}

TEST_F(GpuTest, ColumnReductionsPropagateNaNAndInfinities) {
  for (DType dtype : kDataTypes)
    for (std::string op : {"jit.sum", "jit.mean", "jit.max"})
      for (int64_t rows : {100, 3000}) { // one part, several parts
        TensorType in{dtype, {rows, 40}};
        Expected<Plan> plan = singleOp(op, {in}, {TensorType{dtype, {40}}}, {{"axes", std::vector<int64_t>{0}}});
        ASSERT_TRUE(plan.ok()) << plan.message();
        std::vector<Tensor> arguments = randomArguments(*plan, 15);
        arguments[0].set(5 * 40 + 0, kNaN);           // column 0: a NaN
        arguments[0].set((rows - 1) * 40 + 1, kInf);  // column 1: +inf in the last row
        arguments[0].set(7 * 40 + 2, kInf);           // column 2: +inf and -inf
        arguments[0].set((rows / 2) * 40 + 2, -kInf);
        arguments[0].set((rows - 1) * 40 + 39, kNaN); // the last column, last row
        expectAgree(*cpu, *cuda, *plan, arguments, {1.0 + double(rows) / 64},
                    op + " " + describe(dtype, in.shape, "over rows with NaN/inf"));
      }
}

//===----------------------------------------------------------------------===//
// Softmax family
//===----------------------------------------------------------------------===//

struct AxisCase {
  Shape shape;
  int64_t axis;
};

const AxisCase kAxisCases[] = {
    {{1}, 0}, {{3, 5}, 1}, {{4, 1000}, 1}, {{2, 3000}, 1}, {{5, 7, 3}, 1}, {{2, 3, 4}, 0}, {{3, 4, 1}, 2},
    {{0, 6}, 1}, {{4, 0}, 1},
};

TEST_F(GpuTest, SoftmaxFamilyMatchesTheCpu) {
  for (std::string op : {"jit.softmax", "jit.log_softmax", "jit.softmax_grad", "jit.log_softmax_grad"})
    for (const AxisCase& c : kAxisCases)
      for (DType dtype : kDataTypes) {
        bool grad = op.ends_with("_grad");
        TensorType type{dtype, c.shape};
        std::vector<std::optional<TensorType>> operands = {type};
        if (grad)
          operands.push_back(type);
        Expected<Plan> plan = singleOp(op, operands, {type}, {{"axis", c.axis}});
        ASSERT_TRUE(plan.ok()) << plan.message();
        // Spread logits so exp() is exercised over a real range.
        std::vector<Tensor> arguments = randomArguments(*plan, 3, grad ? -1.0 : -8.0, grad ? 1.0 : 8.0);
        double length = double(c.shape[size_t(c.axis)]);
        expectAgree(*cpu, *cuda, *plan, arguments, {2.0 + length / 64},
                    op + " " + describe(dtype, c.shape, "axis " + std::to_string(c.axis)));
      }
}

TEST_F(GpuTest, SoftmaxPropagatesNaNAndInfinities) {
  for (std::string op : {"jit.softmax", "jit.log_softmax"})
    for (DType dtype : kDataTypes) {
      TensorType type{dtype, {4, 300}};
      Expected<Plan> plan = singleOp(op, {type}, {type}, {{"axis", int64_t(1)}});
      ASSERT_TRUE(plan.ok()) << plan.message();
      std::vector<Tensor> arguments = randomArguments(*plan, 4);
      arguments[0].set(7, kNaN);         // row 0: NaN everywhere
      arguments[0].set(300 + 5, kInf);   // row 1: inf - inf = NaN, as the CPU
      for (int64_t j = 0; j < 300; ++j)  // row 2: all -inf
        arguments[0].set(600 + j, -kInf);
      arguments[0].set(900 + 11, -kInf); // row 3: one -inf gives probability 0
      expectAgree(*cpu, *cuda, *plan, arguments, {2.0 + 300.0 / 64}, op + " " + describe(dtype, type.shape));
    }
}

//===----------------------------------------------------------------------===//
// Layer norm
//===----------------------------------------------------------------------===//

const AxisCase kLayerNormCases[] = {
    {{4, 37}, 1}, {{5, 1}, 1}, {{1, 3}, 1}, {{3, 1500}, 1}, {{2, 3, 300}, 1}, {{2, 3, 4}, 0}, {{2, 3, 5}, 2},
    {{5000, 3}, 1}, // many rows: the parameter gradients split the rows
    {{0, 8}, 1}, {{3, 0}, 1},
};

DType statisticsTypeOf(DType dtype) { return dtype == DType::F64 ? DType::F64 : DType::F32; }

TEST_F(GpuTest, LayerNormMatchesTheCpu) {
  for (const AxisCase& c : kLayerNormCases)
    for (DType dtype : kDataTypes)
      for (int affine = 0; affine < 4; ++affine) { // bit 0: weight, bit 1: bias
        Shape normalised(c.shape.begin() + c.axis, c.shape.end());
        Shape rows(c.shape.begin(), c.shape.begin() + c.axis);
        TensorType type{dtype, c.shape}, param{dtype, normalised}, stats{statisticsTypeOf(dtype), rows};
        std::vector<std::optional<TensorType>> operands = {type, affine & 1 ? std::optional(param) : std::nullopt,
                                                           affine & 2 ? std::optional(param) : std::nullopt};
        Expected<Plan> plan =
            singleOp("jit.layer_norm", operands, {type, stats, stats}, {{"axis", c.axis}, {"eps", 1e-5}});
        ASSERT_TRUE(plan.ok()) << plan.message();
        int64_t cols = elementCount(normalised);
        // Offset the data so the centred second pass matters.
        std::vector<Tensor> arguments = randomArguments(*plan, 5, 2.0, 4.0);
        std::string what = "layer_norm " + describe(dtype, c.shape, "affine " + std::to_string(affine));
        Expected<BothRuns> both = runOnBoth(*cpu, *cuda, *plan, arguments);
        ASSERT_TRUE(both.ok()) << what << ": " << both.message();
        double slack = 2.0 + double(cols) / 64;
        EXPECT_TRUE(allClose(both->cpuResults[1], both->cudaResults[1], slack)) << what << ", mean";
        EXPECT_TRUE(allClose(both->cpuResults[2], both->cudaResults[2], slack)) << what << ", rstd";
        // y from the device's own statistics (DESIGN: a reduction's consumer
        // against its already-rounded inputs). A tree sum's mean may differ
        // from the CPU's sequential one in its last bit, and y carries that
        // difference times rstd, which is large for a row of nearly equal
        // values: compared with the CPU's y, such a row fails any fixed bound.
        Tensor expected = *both->cudaResults[0].clone();
        const Tensor &means = both->cudaResults[1], &rstds = both->cudaResults[2];
        int64_t rowCount = elementCount(rows);
        for (int64_t r = 0; r < rowCount; ++r)
          for (int64_t k = 0; k < cols; ++k) {
            // Absent operands are not arguments: the bias follows x or the weight.
            double w = affine & 1 ? arguments[1].at(k) : 1.0;
            double b = affine & 2 ? arguments[affine & 1 ? 2 : 1].at(k) : 0.0;
            expected.set(r * cols + k, (arguments[0].at(r * cols + k) - means.at(r)) * rstds.at(r) * w + b);
          }
        EXPECT_TRUE(allClose(expected, both->cudaResults[0], 2.0)) << what << ", y from the device's statistics";
      }
}

TEST_F(GpuTest, LayerNormGradMatchesTheCpu) {
  for (const AxisCase& c : kLayerNormCases)
    for (DType dtype : kDataTypes)
      for (bool weight : {false, true}) {
        Shape normalised(c.shape.begin() + c.axis, c.shape.end());
        Shape rowShape(c.shape.begin(), c.shape.begin() + c.axis);
        TensorType type{dtype, c.shape}, param{dtype, normalised}, stats{statisticsTypeOf(dtype), rowShape};
        std::vector<std::optional<TensorType>> operands = {type, type, stats, stats,
                                                           weight ? std::optional(param) : std::nullopt};
        Expected<Plan> plan = singleOp("jit.layer_norm_grad", operands, {type, param, param}, {{"axis", c.axis}});
        ASSERT_TRUE(plan.ok()) << plan.message();
        std::vector<Tensor> arguments = randomArguments(*plan, 6);
        for (int64_t r = 0; r < arguments[3].elementCount(); ++r) // rstd > 0, as layer_norm yields it
          arguments[3].set(r, 0.5 + std::fabs(arguments[3].at(r)));
        double cols = double(elementCount(normalised)), rows = double(elementCount(rowShape));
        expectAgree(*cpu, *cuda, *plan, arguments, {2.0 + cols / 64, 2.0 + rows / 64},
                    "layer_norm_grad " + describe(dtype, c.shape, weight ? "weight" : "no weight"));
      }
}

TEST_F(GpuTest, LayerNormPropagatesNaN) {
  for (DType dtype : kDataTypes) {
    TensorType type{dtype, {3, 300}}, param{dtype, {300}}, stats{statisticsTypeOf(dtype), {3}};
    Expected<Plan> plan = singleOp("jit.layer_norm", {type, param, param}, {type, stats, stats}, {{"axis", int64_t(1)}});
    ASSERT_TRUE(plan.ok()) << plan.message();
    std::vector<Tensor> arguments = randomArguments(*plan, 7);
    arguments[0].set(4, kNaN);
    arguments[0].set(300 + 9, kInf);
    expectAgree(*cpu, *cuda, *plan, arguments, {2.0 + 300.0 / 64}, "layer_norm " + describe(dtype, type.shape));
  }
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

const std::string kReductions[] = {"none", "mean", "sum"};

Shape lossShape(const std::string& reduction, int64_t rows) {
  return reduction == "none" ? Shape{rows} : Shape{};
}

TEST_F(GpuTest, MseLossAndGradMatchTheCpu) {
  const Shape shapes[] = {{1}, {3}, {3, 5}, {1037}, {2, 700}, {70001}, {0}};
  for (const Shape& shape : shapes)
    for (const std::string& reduction : kReductions)
      for (DType dtype : kDataTypes) {
        TensorType type{dtype, shape};
        TensorType loss{dtype, reduction == "none" ? shape : Shape{}};
        AttributeMap attributes = {{"reduction", reduction}};
        double slack = 2.0 + double(elementCount(shape)) / 64;
        std::string what = reduction + " " + describe(dtype, shape);
        Expected<Plan> forward = singleOp("jit.mse_loss", {type, type}, {loss}, attributes);
        ASSERT_TRUE(forward.ok()) << forward.message();
        expectAgree(*cpu, *cuda, *forward, randomArguments(*forward, 8), {slack}, "mse_loss " + what);
        Expected<Plan> backward = singleOp("jit.mse_loss_grad", {loss, type, type}, {type}, attributes);
        ASSERT_TRUE(backward.ok()) << backward.message();
        expectAgree(*cpu, *cuda, *backward, randomArguments(*backward, 9), {2.0}, "mse_loss_grad " + what);
      }
}

struct ClassificationCase {
  int64_t rows, classes;
};

/// Labels in [0, classes), with every third row ignored when `ignoreSome`,
/// or every row when `ignoreAll`.
void setLabels(Tensor& labels, int64_t classes, int64_t ignoreIndex, bool ignoreSome, bool ignoreAll) {
  for (int64_t n = 0; n < labels.elementCount(); ++n) {
    double label = double((n * 7 + 3) % std::max<int64_t>(classes, 1));
    if (ignoreAll || (ignoreSome && n % 3 == 1))
      label = double(ignoreIndex);
    labels.set(n, label);
  }
}

TEST_F(GpuTest, ClassificationLossesAndGradsMatchTheCpu) {
  // A reduced loss of at most 1024 rows and 32768 scores runs in one block
  // (the classifier's {64, 10}); {40, 1000} and {1100, 5} take the
  // two-launch path. The gradient's blocks count the rows themselves up to
  // 512 rows; {1100, 5} counts them in a launch first.
  const ClassificationCase cases[] = {{1, 1},   {1, 3},    {3, 5},     {17, 10}, {4, 1000}, {2, 3001},
                                      {300, 7}, {64, 10},  {40, 1000}, {1100, 5}, {0, 5}};
  for (std::string loss : {"jit.cross_entropy", "jit.nll_loss"})
    for (const ClassificationCase& c : cases)
      for (const std::string& reduction : kReductions)
        for (double smoothing : {0.0, 0.1})
          for (int64_t ignoreIndex : {int64_t(-100), int64_t(2)})
            for (int ignoring = 0; ignoring < 3; ++ignoring) // none, some, all rows ignored
              for (DType dtype : kDataTypes) {
                if (loss == "jit.nll_loss" && smoothing != 0.0)
                  continue;
                TensorType scores{dtype, {c.rows, c.classes}}, labels{DType::I64, {c.rows}};
                TensorType lossType{dtype, lossShape(reduction, c.rows)};
                AttributeMap attributes = {{"reduction", reduction}, {"ignore_index", ignoreIndex}};
                if (loss == "jit.cross_entropy")
                  attributes["label_smoothing"] = smoothing;
                std::string what = loss + " " + reduction + " " + describe(dtype, scores.shape) + " smoothing " +
                                   std::to_string(smoothing) + " ignore_index " + std::to_string(ignoreIndex) +
                                   " ignoring " + std::to_string(ignoring);
                double slack = 2.0 + double(c.classes + c.rows) / 64;

                Expected<Plan> forward = singleOp(loss, {scores, labels}, {lossType}, attributes);
                ASSERT_TRUE(forward.ok()) << forward.message();
                std::vector<Tensor> arguments = randomArguments(*forward, 10, -4.0, 4.0);
                setLabels(arguments[1], c.classes, ignoreIndex, ignoring == 1, ignoring == 2);
                expectAgree(*cpu, *cuda, *forward, arguments, {slack}, what);

                Expected<Plan> backward = singleOp(loss + "_grad", {lossType, scores, labels}, {scores}, attributes);
                ASSERT_TRUE(backward.ok()) << backward.message();
                std::vector<Tensor> gradArguments = randomArguments(*backward, 11, -4.0, 4.0);
                setLabels(gradArguments[2], c.classes, ignoreIndex, ignoring == 1, ignoring == 2);
                expectAgree(*cpu, *cuda, *backward, gradArguments, {slack}, what + " (grad)");
              }
}

TEST_F(GpuTest, ALossAndItsGradientInOneLaunchMatchTheCpu) {
  // A plan's loss and the loss_grad after it share one launch when small
  // (cuda::canShareLossLaunch): every classification case of that path.
  const ClassificationCase cases[] = {{1, 1}, {3, 5}, {64, 10}, {128, 10}, {17, 1000}, {1024, 32}, {0, 5}};
  for (std::string loss : {"jit.cross_entropy", "jit.nll_loss"})
    for (const ClassificationCase& c : cases)
      for (std::string reduction : {"mean", "sum"})
        for (double smoothing : {0.0, 0.1})
          for (int ignoring = 0; ignoring < 3; ++ignoring)
            for (DType dtype : kDataTypes) {
              if (loss == "jit.nll_loss" && smoothing != 0.0)
                continue;
              PlanBuilder b("loss_and_grad");
              BufferId scores = b.argument(tt(dtype, {c.rows, c.classes}), BufferRole::Input);
              BufferId labels = b.argument(tt(DType::I64, {c.rows}), BufferRole::Input);
              BufferId seed = b.argument(tt(dtype, {}), BufferRole::ScalerState);
              BufferId value = b.output(tt(dtype, {}));
              BufferId grad = b.output(tt(dtype, {c.rows, c.classes}));
              AttributeMap attributes = {{"reduction", reduction}, {"ignore_index", int64_t(2)}};
              if (loss == "jit.cross_entropy")
                attributes["label_smoothing"] = smoothing;
              b.op(loss, {scores, labels}, {value}, attributes);
              b.op(loss + "_grad", {seed, scores, labels}, {grad}, attributes);
              b.result(value);
              b.result(grad);
              Plan plan = b.finish();
              std::string what = loss + " " + reduction + " " + describe(dtype, {c.rows, c.classes}) +
                                 " smoothing " + std::to_string(smoothing) + " ignoring " + std::to_string(ignoring);
              ASSERT_EQ(cuda::launchGroups(plan).size(), 1u) << what;
              std::vector<Tensor> arguments = randomArguments(plan, 13, -4.0, 4.0);
              setLabels(arguments[1], c.classes, 2, ignoring == 1, ignoring == 2);
              arguments[2].set(0, 1024.0); // a loss scale
              expectAgree(*cpu, *cuda, plan, arguments, {2.0 + double(c.classes + c.rows) / 64}, what);
            }
}

TEST_F(GpuTest, AClassifiersHeadInOneLaunchMatchesTheCpu) {
  // The scores widened from f16/bf16 (or f32 already), the f32 loss and
  // gradient, the gradient rounded to the low dtype, its column sums
  // (cuda::classificationHeadLength): one launch, every output stored.
  const ClassificationCase cases[] = {{3, 5}, {64, 10}, {128, 10}, {1024, 32}, {32, 13}};
  for (std::string loss : {"jit.cross_entropy", "jit.nll_loss"})
    for (const ClassificationCase& c : cases)
      for (std::string reduction : {"mean", "sum"})
        for (int ignoring = 0; ignoring < 3; ++ignoring)
          for (DType low : {DType::F16, DType::BF16})
            for (bool widen : {true, false})
              for (bool narrow : {true, false}) {
                PlanBuilder b("head");
                Shape shape = {c.rows, c.classes};
                BufferId given = b.argument(tt(widen ? low : DType::F32, shape), BufferRole::Input);
                BufferId labels = b.argument(tt(DType::I64, {c.rows}), BufferRole::Input);
                BufferId seed = b.argument(tt(DType::F32, {}), BufferRole::ScalerState);
                BufferId scores = widen ? b.output(tt(DType::F32, shape)) : given;
                BufferId value = b.output(tt(DType::F32, {}));
                BufferId grad = b.output(tt(DType::F32, shape));
                AttributeMap attributes = {{"reduction", reduction}, {"ignore_index", int64_t(2)}};
                if (loss == "jit.cross_entropy")
                  attributes["label_smoothing"] = 0.05;
                if (widen) {
                  b.op("amp.cast", {given}, {scores});
                  b.result(scores);
                }
                b.op(loss, {scores, labels}, {value}, attributes);
                b.op(loss + "_grad", {seed, scores, labels}, {grad}, attributes);
                b.result(value);
                b.result(grad);
                if (narrow) {
                  BufferId lowGrad = b.output(tt(low, shape));
                  b.op("amp.cast", {grad}, {lowGrad});
                  b.result(lowGrad);
                }
                BufferId sums = b.output(tt(DType::F32, {c.classes}));
                b.op("jit.sum", {grad}, {sums}, {{"axes", std::vector<int64_t>{0}}});
                b.result(sums);
                Plan plan = b.finish();
                std::string what = loss + " " + reduction + " " + describe(low, shape) + " ignoring " +
                                   std::to_string(ignoring) + (widen ? " widened" : "") + (narrow ? " narrowed" : "");
                ASSERT_EQ(cuda::launchGroups(plan).size(), 1u) << what;
                std::vector<Tensor> arguments = randomArguments(plan, 14, -4.0, 4.0);
                setLabels(arguments[1], c.classes, 2, ignoring == 1, ignoring == 2);
                arguments[2].set(0, 65536.0);
                double slack = 2.0 + double(c.classes + c.rows) / 64;
                Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments);
                ASSERT_TRUE(both.ok()) << what << ": " << both.message();
                size_t sumsIndex = both->cudaResults.size() - 1, gradIndex = widen ? 2 : 1;
                // The f32 gradient is seed/rows x (p - target): a last-bit
                // difference in p (exp is not correctly rounded; the row sums
                // run in another order) moves it by up to the seed times
                // 2^-23 however small it is, so its bound is absolute.
                double gradSlack = std::max(slack, 4.0 * 65536.0 * std::ldexp(1.0, -23) / 1e-5);
                for (size_t k = 0; k < sumsIndex; ++k)
                  EXPECT_TRUE(allClose(both->cpuResults[k], both->cudaResults[k],
                                       widen && k == 0 ? 0.0 : k == gradIndex ? gradSlack : slack))
                      << what << ", result " << k;
                // The column sums from the device's own gradient, in row
                // order as the kernel adds them: bit for bit. (Against the
                // CPU's sums no fixed bound holds: the sums cancel, and a
                // last-bit difference in exp moves the gradient.)
                const Tensor& deviceGrad = both->cudaResults[gradIndex];
                Tensor expected = *both->cudaResults[sumsIndex].clone();
                for (int64_t k = 0; k < c.classes; ++k) {
                  float sum = 0;
                  for (int64_t n = 0; n < c.rows; ++n)
                    sum += float(deviceGrad.at(n * c.classes + k));
                  expected.set(k, sum);
                }
                EXPECT_TRUE(allClose(expected, both->cudaResults[sumsIndex], 0.0)) << what << ", column sums";
              }
}

TEST_F(GpuTest, AClassifiersHeadWithoutColumnSumsMatchesTheCpu) {
  // A tied output projection has no bias: the head is widen, loss, gradient
  // and narrow, with the widened scores a temporary only the head reads.
  PlanBuilder b("head_without_sums");
  Shape shape = {32, 13};
  BufferId given = b.argument(tt(DType::F16, shape), BufferRole::Input);
  BufferId labels = b.argument(tt(DType::I64, {32}), BufferRole::Input);
  BufferId seed = b.argument(tt(DType::F32, {}), BufferRole::ScalerState);
  BufferId scores = b.temporary(tt(DType::F32, shape));
  BufferId value = b.output(tt(DType::F32, {}));
  BufferId grad = b.temporary(tt(DType::F32, shape));
  BufferId lowGrad = b.output(tt(DType::F16, shape));
  AttributeMap attributes = {{"reduction", std::string("mean")}};
  b.op("amp.cast", {given}, {scores});
  b.op("jit.cross_entropy", {scores, labels}, {value}, attributes);
  b.op("jit.cross_entropy_grad", {seed, scores, labels}, {grad}, attributes);
  b.op("amp.cast", {grad}, {lowGrad});
  b.result(value);
  b.result(lowGrad);
  Plan plan = b.finish();
  ASSERT_EQ(cuda::launchGroups(plan).size(), 1u);
  std::vector<Tensor> arguments = randomArguments(plan, 15, -4.0, 4.0);
  setLabels(arguments[1], 13, -100, false, false);
  arguments[2].set(0, 1024.0);
  expectAgree(*cpu, *cuda, plan, arguments, {2.0, 4.0}, "head without column sums");
}

TEST_F(GpuTest, AnO1HeadWidensItsScoresAddsTheBiasAndRunsTheLossInOneLaunch) {
  // At O1 the last layer's f16/bf16 product is widened and its f32 bias
  // added in one FusedElementwise step; the head's launch takes it in
  // (widening the scores and adding the bias row by row, then working on
  // the f32 scores it stored), in either order of the add's operands.
  const ClassificationCase cases[] = {{3, 5}, {64, 10}, {1024, 32}};
  for (const ClassificationCase& c : cases)
    for (DType low : {DType::F16, DType::BF16})
      for (bool biasFirst : {false, true}) {
        PlanBuilder b("biased_head");
        Shape shape = {c.rows, c.classes};
        BufferId product = b.argument(tt(low, shape), BufferRole::Input, "product");
        BufferId bias = b.argument(tt(DType::F32, {c.classes}), BufferRole::Param, "bias");
        BufferId labels = b.argument(tt(DType::I64, {c.rows}), BufferRole::Input, "labels");
        BufferId seed = b.argument(tt(DType::F32, {}), BufferRole::ScalerState, "scale");
        BufferId scores = b.output(tt(DType::F32, shape));
        b.fused(
            {
                {ElementwiseOp::Load, low, {0, 0, 0}, 0.0},
                {ElementwiseOp::Convert, DType::F32, {0, 0, 0}, 0.0},
                {ElementwiseOp::Load, DType::F32, {1, 0, 0}, 0.0},
                {ElementwiseOp::Add, DType::F32, {biasFirst ? 2u : 1u, biasFirst ? 1u : 2u, 0}, 0.0},
            },
            {3}, {product, bias}, {scores}, "fused(amp.cast, jit.add)");
        BufferId value = b.output(tt(DType::F32, {}));
        BufferId grad = b.output(tt(DType::F32, shape));
        BufferId lowGrad = b.output(tt(low, shape));
        BufferId sums = b.output(tt(DType::F32, {c.classes}));
        AttributeMap attributes = {{"reduction", std::string("mean")}, {"ignore_index", int64_t(2)}};
        b.op("jit.cross_entropy", {scores, labels}, {value}, attributes);
        b.op("jit.cross_entropy_grad", {seed, scores, labels}, {grad}, attributes);
        b.op("amp.cast", {grad}, {lowGrad});
        b.op("jit.sum", {grad}, {sums}, {{"axes", std::vector<int64_t>{0}}});
        for (BufferId result : {scores, value, grad, lowGrad})
          b.result(result);
        Plan plan = b.finish();
        std::string what = describe(low, shape) + (biasFirst ? " bias + scores" : " scores + bias");
        ASSERT_EQ(cuda::launchGroups(plan), (std::vector<std::pair<size_t, size_t>>{{0, 5}})) << what;
        std::vector<Tensor> arguments = randomArguments(plan, 16, -4.0, 4.0);
        setLabels(arguments[2], c.classes, 2, true, false);
        arguments[3].set(0, 1024.0);
        Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments);
        ASSERT_TRUE(both.ok()) << what << ": " << both.message();
        // The scores: one exact widening and one f32 addition, bit for bit.
        EXPECT_TRUE(both->cpuResults[0].bitwiseEqual(both->cudaResults[0])) << what << ", the scores";
        double slack = 2.0 + double(c.classes + c.rows) / 64;
        EXPECT_TRUE(allClose(both->cpuResults[1], both->cudaResults[1], slack)) << what << ", the loss";
        double gradSlack = std::max(slack, 4.0 * 1024.0 * std::ldexp(1.0, -23) / 1e-5);
        EXPECT_TRUE(allClose(both->cpuResults[2], both->cudaResults[2], gradSlack)) << what << ", the gradient";
        EXPECT_TRUE(allClose(both->cpuResults[3], both->cudaResults[3], gradSlack)) << what << ", the low gradient";
      }
}

TEST_F(GpuTest, AnMlpsRegressionHeadInOneLaunchMatchesTheCpu) {
  // An mlp's last layer at O1 as one pass (cuda::mseHeadLength): the f16 or
  // bf16 product widened (and its f32 bias added), the mse loss and its
  // gradient, the gradient rounded back and summed over the rows. Every
  // elementwise value is the CPU's bit for bit; the loss and the sums add in
  // another order.
  enum class Widen { No, Plain, Biased };
  const Shape shapes[] = {{48, 64}, {300, 70}, {2048, 40}, {5, 3}};
  for (const Shape& shape : shapes)
    for (Widen widen : {Widen::No, Widen::Plain, Widen::Biased})
      for (bool narrow : {true, false})
        for (bool sums : {true, false})
          for (std::string reduction : {"mean", "sum"})
            for (DType low : {DType::F16, DType::BF16}) {
              if (widen == Widen::No && !narrow && !sums)
                continue;
              PlanBuilder b("regression_head");
              BufferId product = b.argument(tt(widen == Widen::No ? DType::F32 : low, shape), BufferRole::Input);
              BufferId bias = widen == Widen::Biased ? b.argument(tt(DType::F32, {shape[1]}), BufferRole::Param)
                                                     : kNoBuffer;
              BufferId target = b.argument(tt(DType::F32, shape), BufferRole::Input);
              BufferId seed = b.argument(tt(DType::F32, {}), BufferRole::ScalerState);
              BufferId scores = product;
              if (widen != Widen::No) {
                scores = b.temporary(tt(DType::F32, shape));
                if (widen == Widen::Plain)
                  b.op("amp.cast", {product}, {scores});
                else
                  b.fused({{ElementwiseOp::Load, low, {0, 0, 0}, 0.0},
                           {ElementwiseOp::Convert, DType::F32, {0, 0, 0}, 0.0},
                           {ElementwiseOp::Load, DType::F32, {1, 0, 0}, 0.0},
                           {ElementwiseOp::Add, DType::F32, {1, 2, 0}, 0.0}},
                          {3}, {product, bias}, {scores});
              }
              BufferId loss = b.output(tt(DType::F32, {}));
              // Returned, so stored, when nothing after the head reads it.
              BufferId grad = narrow || sums ? b.temporary(tt(DType::F32, shape)) : b.output(tt(DType::F32, shape));
              AttributeMap attributes = {{"reduction", reduction}};
              b.op("jit.mse_loss", {scores, target}, {loss}, attributes);
              b.op("jit.mse_loss_grad", {seed, scores, target}, {grad}, attributes);
              b.result(loss);
              if (!narrow && !sums)
                b.result(grad);
              if (narrow) {
                BufferId lowGrad = b.output(tt(low, shape));
                b.op("amp.cast", {grad}, {lowGrad});
                b.result(lowGrad);
              }
              if (sums) {
                BufferId columnSums = b.output(tt(DType::F32, {shape[1]}));
                b.op("jit.sum", {grad}, {columnSums}, {{"axes", std::vector<int64_t>{0}}});
                b.result(columnSums);
              }
              Plan plan = b.finish();
              std::string what = describe(low, shape) + " " + reduction +
                                 (widen == Widen::No ? "" : widen == Widen::Plain ? " widened" : " widened with a bias") +
                                 (narrow ? " narrowed" : "") + (sums ? " summed" : "");
              ASSERT_EQ(cuda::launchGroups(plan).size(), 1u) << what << "\n" << printPlan(plan);
              std::vector<Tensor> arguments = randomArguments(plan, 17, -4.0, 4.0);
              arguments.back().set(0, 1000.3); // a seed whose products round
              Expected<BothRuns> both = runOnBoth(*cpu, *cuda, plan, arguments);
              ASSERT_TRUE(both.ok()) << what << ": " << both.message();
              double slack = 2.0 + double(shape[0]) / 64;
              EXPECT_TRUE(allClose(both->cpuResults[0], both->cudaResults[0], slack)) << what << ", the loss";
              for (size_t k = 1; k < both->cpuResults.size(); ++k) {
                if (!sums || k + 1 < both->cpuResults.size()) {
                  EXPECT_TRUE(both->cpuResults[k].bitwiseEqual(both->cudaResults[k])) << what << ", result " << k;
                }
              }
              if (!sums)
                continue;
              // The column sums cancel: bound each by the rows times f32's
              // unit roundoff times the sum of its terms' magnitudes (from
              // the arguments, in double).
              const Tensor &cpuSums = both->cpuResults.back(), &gpuSums = both->cudaResults.back();
              double count = double(shape[0] * shape[1]), scale = arguments.back().at(0);
              double norm = reduction == "mean" ? 2.0 / count : 2.0;
              for (int64_t c = 0; c < shape[1]; ++c) {
                double magnitude = 0;
                for (int64_t r = 0; r < shape[0]; ++r) {
                  int64_t i = r * shape[1] + c;
                  double x = arguments[0].at(i) + (widen == Widen::Biased ? arguments[1].at(c) : 0.0);
                  magnitude += std::abs(norm * (x - arguments[bias == kNoBuffer ? 1 : 2].at(i)) * scale);
                }
                double bound = double(shape[0]) * std::ldexp(1.0, -24) * magnitude + 1e-5;
                EXPECT_LE(std::abs(cpuSums.at(c) - gpuSums.at(c)), bound) << what << ", column sum " << c;
              }
            }
}

TEST_F(GpuTest, CrossEntropyPropagatesNaNAndInfinities) {
  for (DType dtype : kDataTypes)
    for (const std::string& reduction : kReductions) {
      TensorType scores{dtype, {4, 300}}, labels{DType::I64, {4}}, lossType{dtype, lossShape(reduction, 4)};
      AttributeMap attributes = {{"reduction", reduction}, {"label_smoothing", 0.05}};
      Expected<Plan> forward = singleOp("jit.cross_entropy", {scores, labels}, {lossType}, attributes);
      ASSERT_TRUE(forward.ok()) << forward.message();
      std::vector<Tensor> arguments = randomArguments(*forward, 12);
      setLabels(arguments[1], 300, -100, false, false);
      arguments[0].set(3, kNaN);
      arguments[0].set(300 + 8, kInf);
      arguments[0].set(600 + 8, -kInf);
      expectAgree(*cpu, *cuda, *forward, arguments, {2.0 + 304.0 / 64},
                  "cross_entropy " + reduction + " " + describe(dtype, scores.shape));
    }
}

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

/// `count` indices in [0, rows), many repeated (every third one is row 3).
void setIndices(Tensor& indices, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < indices.elementCount(); ++i)
    indices.set(i, i % 3 == 0 ? 3.0 : double(rng() % uint32_t(rows)));
}

bool sameBits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size())
    return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (!a[k].bitwiseEqual(b[k]))
      return false;
  return true;
}

TEST_F(GpuTest, EmbeddingGathersTheCpusBitsInEveryDType) {
  for (DType dtype : kDataTypes) {
    for (const Shape& indexShape : {Shape{4, 5}, Shape{1}, Shape{300}}) {
      TensorType table{dtype, {37, 70}}, indices{DType::I64, indexShape};
      Shape outShape = indexShape;
      outShape.push_back(70);
      Expected<Plan> plan = singleOp("jit.embedding", {indices, table}, {TensorType{dtype, outShape}}, {});
      ASSERT_TRUE(plan.ok()) << plan.message();
      std::vector<Tensor> arguments = randomArguments(*plan, 21);
      setIndices(arguments[0], 37, 5);
      Expected<BothRuns> both = runOnBoth(*cpu, *cuda, *plan, arguments);
      ASSERT_TRUE(both.ok()) << both.message();
      EXPECT_TRUE(sameBits(both->cpuResults, both->cudaResults)) << describe(dtype, indexShape);
    }
  }
}

TEST_F(GpuTest, EmbeddingGradSumsInTheCpusOrderBitForBit) {
  // Narrow and wide rows (one and two column blocks), few and many rows per
  // owning thread, with and without a padding row.
  struct Case {
    int64_t rows, width, count, padding;
  };
  const Case cases[] = {{37, 70, 300, 3}, {1000, 300, 517, -1}, {5, 1, 2000, 0}, {64, 513, 64, -1}};
  for (DType dtype : {DType::F32, DType::F64}) {
    for (const Case& c : cases) {
      std::string what = describe(dtype, {c.rows, c.width}, "indices " + std::to_string(c.count));
      AttributeMap attributes{{"num_weights", c.rows}};
      if (c.padding >= 0)
        attributes.emplace("padding_idx", c.padding);
      Expected<Plan> plan = singleOp("jit.embedding_grad", {TensorType{dtype, {c.count, c.width}},
                                                            TensorType{DType::I64, {c.count}}},
                                     {TensorType{dtype, {c.rows, c.width}}}, attributes);
      ASSERT_TRUE(plan.ok()) << plan.message();
      std::vector<Tensor> arguments = randomArguments(*plan, 22);
      setIndices(arguments[1], c.rows, 6);
      // Twice: the second run must zero what the first accumulated.
      Expected<BothRuns> both = runOnBoth(*cpu, *cuda, *plan, arguments, 2);
      ASSERT_TRUE(both.ok()) << what << ": " << both.message();
      EXPECT_TRUE(sameBits(both->cpuResults, both->cudaResults)) << what;
      if (c.padding >= 0) {
        EXPECT_EQ(both->cudaResults[0].at(c.padding * c.width), 0.0) << what;
      }
    }
  }
}

TEST_F(GpuTest, EmbeddingGradInHalfPrecisionIsRefusedWithTheReason) {
  Expected<Plan> plan = singleOp("jit.embedding_grad", {TensorType{DType::F16, {8, 4}}, TensorType{DType::I64, {8}}},
                                 {TensorType{DType::F16, {10, 4}}}, {{"num_weights", int64_t(10)}});
  ASSERT_TRUE(plan.ok()) << plan.message();
  Expected<std::unique_ptr<Executable>> executable = cuda->prepare(*plan);
  ASSERT_FALSE(executable.ok());
  EXPECT_NE(executable.message().find("must be f32 or f64 on CUDA"), std::string::npos) << executable.message();
}

TEST_F(GpuTest, AnEmbeddingIndexOutsideTheTableGivesANaNRowOnTheDevice) {
  // The CPU backend raises; a kernel cannot, so the row is NaN (which a loss
  // scaler then skips), never another row's values.
  Expected<Plan> plan = singleOp("jit.embedding", {TensorType{DType::I64, {3}}, TensorType{DType::F32, {4, 2}}},
                                 {TensorType{DType::F32, {3, 2}}}, {});
  ASSERT_TRUE(plan.ok()) << plan.message();
  std::vector<Tensor> arguments = randomArguments(*plan, 23);
  arguments[0].set(0, 1.0);
  arguments[0].set(1, 4.0);
  arguments[0].set(2, -1.0);
  Expected<BothRuns> both = runOnBoth(*cpu, *cuda, *plan, arguments);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.message().find("index 4 at position 1 is outside the table's rows [0, 4)"), std::string::npos)
      << both.message();
  std::vector<Tensor> deviceArguments;
  for (const Tensor& argument : arguments) {
    Expected<Tensor> device = cuda->toDevice(argument);
    ASSERT_TRUE(device.ok()) << device.message();
    deviceArguments.push_back(std::move(*device));
  }
  Expected<std::unique_ptr<Executable>> executable = cuda->prepare(*plan);
  ASSERT_TRUE(executable.ok()) << executable.message();
  Expected<std::vector<Tensor>> results = (*executable)->run(deviceArguments);
  ASSERT_TRUE(results.ok()) << results.message();
  Expected<Tensor> host = cuda->toHost((*results)[0]);
  ASSERT_TRUE(host.ok()) << host.message();
  EXPECT_EQ(host->at(0), arguments[1].at(2));
  for (int64_t i = 2; i < 6; ++i)
    EXPECT_TRUE(std::isnan(host->at(i))) << i;
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

TEST_F(GpuTest, DropoutMaskIsBitIdenticalToTheCpu) {
  const Shape shapes[] = {{1}, {3}, {4097}, {3, 5, 7}, {0}};
  // Seeds beyond 32 bits and an offset that crosses a 32-bit block boundary.
  const std::pair<int64_t, int64_t> states[] = {{1234, 10}, {0x1234567890abLL, (int64_t(1) << 34) - 5}, {0, 0}};
  for (const Shape& shape : shapes)
    for (double p : {0.0, 0.3, 0.9})
      for (const auto& [seed, offset] : states)
        for (DType dtype : kDataTypes) {
          TensorType type{dtype, shape}, mask{DType::I1, shape}, state{DType::I64, {2}};
          Expected<Plan> plan = singleOp("jit.dropout", {type, state}, {type, mask, state}, {{"p", p}});
          ASSERT_TRUE(plan.ok()) << plan.message();
          std::vector<Tensor> arguments = randomArguments(*plan, 13);
          arguments[1].set(0, double(seed));
          arguments[1].set(1, double(offset));
          expectAgree(*cpu, *cuda, *plan, arguments, {1.0},
                      "dropout " + describe(dtype, shape, "p " + std::to_string(p) + " seed " + std::to_string(seed)));
        }
}

TEST_F(GpuTest, DropoutAdvancesItsStateInPlace) {
  // next_rng_state tied to rng_state: every run reads the state the last one
  // wrote, so three runs agree only if the kernel reads before it writes.
  for (DType dtype : kDataTypes) {
    TensorType type{dtype, {1000}}, mask{DType::I1, {1000}}, state{DType::I64, {2}};
    Expected<Plan> plan = singleOp("jit.dropout", {type, state}, {type, mask, state}, {{"p", 0.5}}, {-1, -1, 1});
    ASSERT_TRUE(plan.ok()) << plan.message();
    std::vector<Tensor> arguments = randomArguments(*plan, 14);
    arguments[1].set(0, 77.0);
    arguments[1].set(1, 3.0);
    expectAgree(*cpu, *cuda, *plan, arguments, {1.0}, "in-place dropout " + std::string(dtypeName(dtype)), 3);
  }
}

} // namespace
} // namespace ampjit::runtime::gputest
