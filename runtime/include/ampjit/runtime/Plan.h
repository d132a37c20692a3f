#ifndef AMPJIT_RUNTIME_PLAN_H
#define AMPJIT_RUNTIME_PLAN_H

// The ExecutionPlan: what codegen produces from an optimised module and what
// every backend executes. A plan is a buffer table, the function's arguments
// and results expressed as buffers, and an ordered list of steps, each one
// kernel or library call reading and writing buffers by id.
//
// The plan owns no memory. Argument buffers are the caller's tensors (state is
// updated in place through them), output buffers are allocated per run, and
// temporaries live at fixed offsets in one arena that codegen laid out by
// liveness. verifyPlan() checks every rule stated here, so a backend can
// trust a verified plan and a corrupt file is an error message, not a crash.
//
// Printing (printPlan) is stable text for lit tests of codegen;
// PlanFile.h reads and writes the binary form (docs/plan-format.md).

#include "ampjit/runtime/DType.h"
#include "ampjit/runtime/Shape.h"
#include "ampjit/runtime/Status.h"

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ampjit::runtime {

/// Index into Plan::buffers.
using BufferId = uint32_t;
/// An absent optional slot (a layer norm without weight, an SGD step without
/// momentum buffer).
inline constexpr BufferId kNoBuffer = 0xFFFFFFFFu;

/// Alignment of every temporary's arena offset (and of the arena itself).
inline constexpr uint64_t kArenaAlignment = 64;

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

/// What a buffer is. The first six are function arguments and mirror the
/// `jit.role` attribute of the entry function (DESIGN principle 3); the rest
/// are the plan's own.
enum class BufferRole : uint8_t {
  Input,       ///< data fed each step (read-only)
  Param,       ///< model parameter
  Grad,        ///< accumulated gradient
  OptState,    ///< optimizer buffer or step count
  ScalerState, ///< loss scale and scaler counters
  Hyper,       ///< learning rate and other tensors that may change between steps
  Temporary,   ///< lives in the arena at `arenaOffset`, dead between runs
  Constant,    ///< immutable data stored in the plan (`constantData`)
  Output,      ///< a function result that is not state; allocated per run
  /// Held by the executable from one run to the next: written by a run's
  /// steps for the deferred update the next run (or completeDeferred) does
  /// first (Plan::deferredSteps). Zero before the first run; not in the arena.
  Carried,
};
inline constexpr int kBufferRoleCount = 10;

std::string_view bufferRoleName(BufferRole role);
bool isArgumentRole(BufferRole role);

struct BufferDesc {
  TensorType type{};
  BufferRole role = BufferRole::Temporary;
  /// For argument roles: the index of the function argument this buffer is.
  /// A result tied to it (PlanResult::tiedArgument) is written here in place.
  /// -1 for temporaries, constants and outputs.
  int32_t argument = -1;
  /// For state a pass derived from another argument (O2's low-precision
  /// parameter copy, `jit.derived_from`): the source argument's index. The
  /// buffer holds the source rounded to nearest even into this dtype;
  /// rederiveArgument() re-establishes that after the user writes the source.
  int32_t derivedFrom = -1;
  /// For temporaries: byte offset in the arena, a multiple of 64.
  uint64_t arenaOffset = 0;
  /// For a temporary that views another buffer's memory instead of arena
  /// bytes: that buffer (an argument, a constant or a carried buffer), which
  /// the one step writing this one, a Reshape, reads. Nothing writes the
  /// viewed buffer while the view is live; -1 for every other buffer.
  int32_t viewOf = -1;
  /// For constants: the elements, little-endian, exactly `type.byteSize()` bytes.
  std::vector<uint8_t> constantData{};
  /// Optional, for people: the IR value or argument name.
  std::string name{};

  friend bool operator==(const BufferDesc&, const BufferDesc&) = default;
};

//===----------------------------------------------------------------------===//
// Elementwise operations (one table for Elementwise steps and fused programs)
//===----------------------------------------------------------------------===//

/// Every scalar operation an Elementwise step or a FusedElementwise
/// instruction can perform. Arithmetic on f16/bf16/f32 values runs in f32 and
/// on f64 values in f64; the result is rounded once to the result dtype.
enum class ElementwiseOp : uint8_t {
  // Fused programs only.
  Load,     ///< operands[0] = input slot; the register holds the input element
  Constant, ///< `scalar`, rounded to the register's dtype
  // Unary on floating types.
  Neg, Relu, Tanh, Sigmoid, Exp, Log, Sqrt, Rsqrt,
  Gelu,     ///< x * Phi(x) with Phi through erf
  GeluTanh, ///< PyTorch's tanh approximation
  Pow,      ///< x ^ scalar
  // Binary on floating types.
  Add, Sub, Mul, Div,
  ReluGrad,     ///< (dy, y): y > 0 ? dy : 0
  GeluGrad,     ///< (dy, x)
  GeluTanhGrad, ///< (dy, x)
  // Comparisons of two values of one dtype (any), yielding i1.
  CmpEq, CmpNe, CmpLt, CmpLe, CmpGt, CmpGe,
  Select,  ///< (condition i1, a, b): condition ? a : b
  Convert, ///< any dtype to any dtype (float rounding to nearest even, float to
           ///< i64 truncating toward zero and saturating with NaN as 0, to i1 != 0)
};
inline constexpr int kElementwiseOpCount = int(ElementwiseOp::Convert) + 1;

std::string_view elementwiseOpName(ElementwiseOp op);
/// Operand count (Load and Constant: 0; they take a slot or a scalar).
int elementwiseOpArity(ElementwiseOp op);
/// Whether the op's result dtype must be stated (Convert, Constant, Load).
bool elementwiseOpChoosesResultType(ElementwiseOp op);
/// Checks the dtypes of one operation: operands as `elementwiseOpArity` says,
/// same-dtype rules, floating-only ops, i1 results of comparisons.
Status checkElementwiseTypes(ElementwiseOp op, std::span<const DType> operands, DType result);

//===----------------------------------------------------------------------===//
// Step kinds and their parameters
//===----------------------------------------------------------------------===//

enum class StepKind : uint8_t {
  Gemm,             ///< batched C = op(A) @ op(B); inputs [A, B, bias | gelu_input?], outputs [C, gelu_input | bias_grad?] (see GemmEpilogue)
  Elementwise,      ///< one ElementwiseOp over broadcast operands
  FusedElementwise, ///< a small program over broadcast inputs, several outputs
  Reduction,        ///< sum/mean/max over axes
  Softmax,          ///< inputs [x], outputs [y]
  LogSoftmax,       ///< inputs [x], outputs [y]
  SoftmaxGrad,      ///< inputs [dy, y], outputs [dx]
  LogSoftmaxGrad,   ///< inputs [dy, y], outputs [dx]
  LayerNorm,        ///< inputs [x, weight?, bias?], outputs [y, mean, rstd]
  LayerNormGrad,    ///< inputs [dy, x, mean, rstd, weight?], outputs [dx, dweight, dbias]
  Dropout,          ///< inputs [x, rng_state], outputs [y, mask, next_rng_state]
  Loss,             ///< inputs [input|logits|log_probs, target|labels], outputs [loss]
  LossGrad,         ///< inputs [grad_output, input..., target|labels], outputs [grad]
  BroadcastTo,      ///< inputs [x], outputs [y]
  Reshape,          ///< inputs [x], outputs [y]
  Transpose,        ///< inputs [x], outputs [y]
  Constant,         ///< inputs [], outputs [y]
  OptimizerUpdate,  ///< SGD or Adam on one parameter (slots: see optimizerSlotNames)
  ScaleLoss,        ///< inputs [loss, scale], outputs [scaled]
  AllFinite,        ///< inputs [grad...], outputs [all_finite]
  UnscaleAndCheck,  ///< inputs [inv_scale, grad...], outputs [unscaled..., all_finite]
  UpdateScale,      ///< inputs [scale, good, bad, skipped, all_finite], outputs the four new values
  // Convolutional networks (appended, so plan files keep their kind numbers).
  Conv2d,             ///< inputs [x, weight, bias?], outputs [y]
  Conv2dGradInput,    ///< inputs [dy, weight], outputs [dx]
  Conv2dGradWeight,   ///< inputs [dy, x], outputs [dweight]
  BatchNorm,          ///< inputs [x, weight?, bias?, running_mean, running_var, z if add_relu],
                      ///< outputs [y, save_mean, save_invstd, new_running_mean, new_running_var]
  BatchNormInference, ///< inputs [x, weight?, bias?, running_mean, running_var, z if add_relu], outputs [y]
  BatchNormGrad,      ///< inputs [dy, x, save_mean, save_invstd, weight?, y and bias? with an activation],
                      ///< outputs [dx, dweight, dbias, dz if add_relu]
  MaxPool2d,          ///< inputs [x], outputs [y]
  MaxPool2dGrad,      ///< inputs [dy, x], outputs [dx]
  AvgPool2d,          ///< inputs [x], outputs [y]
  AvgPool2dGrad,      ///< inputs [dy, x], outputs [dx]
  // Embeddings.
  Embedding,          ///< inputs [indices, weight], outputs [y]
  EmbeddingGrad,      ///< inputs [dy, indices], outputs [dweight]
};
inline constexpr int kStepKindCount = int(StepKind::EmbeddingGrad) + 1;

std::string_view stepKindName(StepKind kind);

/// Parameters of kinds that need none (layout copies, scaler ops but update).
struct NoParams {
  template <typename Visit> void forEachField(Visit&&) {}
  friend bool operator==(const NoParams&, const NoParams&) = default;
};

/// What a GEMM applies to each accumulated product P = op(A) @ op(B) before
/// C's one rounding: cuBLASLt's epilogues, one definition for every backend.
/// All arithmetic runs in the step's compute type on the unrounded product;
/// every buffer is rounded once when stored. `gelu` is the tanh approximation
/// (the ElementwiseOp GeluTanh formula; cuBLASLt has no erf GELU), `gelu'` its
/// gradient (GeluTanhGrad).
///
///   epilogue        extra input          C                     extra output
///   none            -                    P                     -
///   bias            bias [N]             P + bias              -
///   bias_relu       bias [N]             relu(P + bias)        -
///   bias_gelu       bias [N]             gelu(P + bias)        -
///   bias_gelu_aux   bias [N]             gelu(P + bias)        gelu_input = P + bias
///   dgelu           gelu_input [M, N]    gelu'(P, gelu_input)  -
///   dgelu_bgrad     gelu_input [M, N]    gelu'(P, gelu_input)  bias_grad[n] = sum over m of C[m, n]
///   bgrad_a         -                    P                     bias_grad[m] = sum over k of op(A)[m, k]
///
/// bias, gelu_input and bias_grad have C's dtype (cuBLASLt stores the aux
/// matrix and the bias gradient in C's type); the epilogues after bias_relu
/// need unbatched (rank-2) operands. bias_grad accumulates in the compute
/// type in index order (the order a Reduction step sums in), from C's values
/// before their rounding for dgelu_bgrad and from the widened A for bgrad_a,
/// and is rounded once. So in f32 and f64 every epilogue gives exactly the
/// bits of the unfused steps (product, add, activation, gradient, sum); in
/// f16/bf16 it skips the roundings of the intermediate values. bgrad_a is the
/// bias gradient of a weight gradient dW = dY^T X (A = dY, transposed): the
/// sum over the batch of dY, without a Reduction step.
enum class GemmEpilogue : uint8_t { None, Bias, BiasRelu, BiasGelu, BiasGeluAux, DGelu, DGeluBiasGrad, BiasGradA };
inline constexpr int kGemmEpilogueCount = 8;
std::string_view gemmEpilogueName(GemmEpilogue epilogue);
/// Input slot 2 is the bias.
inline bool gemmEpilogueHasBias(GemmEpilogue epilogue) {
  return epilogue == GemmEpilogue::Bias || epilogue == GemmEpilogue::BiasRelu ||
         epilogue == GemmEpilogue::BiasGelu || epilogue == GemmEpilogue::BiasGeluAux;
}
/// Output slot 1 is the GELU input (the pre-activation the backward reads).
inline bool gemmEpilogueWritesGeluInput(GemmEpilogue epilogue) { return epilogue == GemmEpilogue::BiasGeluAux; }
/// Input slot 2 is the GELU input saved by the forward.
inline bool gemmEpilogueReadsGeluInput(GemmEpilogue epilogue) {
  return epilogue == GemmEpilogue::DGelu || epilogue == GemmEpilogue::DGeluBiasGrad;
}
/// Output slot 1 is a bias gradient.
inline bool gemmEpilogueWritesBiasGrad(GemmEpilogue epilogue) {
  return epilogue == GemmEpilogue::DGeluBiasGrad || epilogue == GemmEpilogue::BiasGradA;
}
/// Whether the epilogue is one of those that need rank-2 operands.
inline bool gemmEpilogueNeedsMatrices(GemmEpilogue epilogue) {
  return epilogue != GemmEpilogue::None && epilogue != GemmEpilogue::Bias && epilogue != GemmEpilogue::BiasRelu;
}

/// Operands A [batch..., M, K] (or [..., K, M] transposed) and B [batch..., K, N]
/// (or [..., N, K]); batch dimensions broadcast; C = [broadcast batch..., M, N].
/// Low-precision operands are widened exactly, products accumulate in the
/// step's computeType, and C is rounded once. Without an epilogue a bias add
/// is a separate elementwise step, so fused and unfused plans agree bit for
/// bit. Codegen fuses epilogues (GemmEpilogue) for the CUDA backend only.
struct GemmParams {
  bool transposeA = false;
  bool transposeB = false;
  GemmEpilogue epilogue = GemmEpilogue::None;
  template <typename Visit> void forEachField(Visit&& visit) {
    visit("transpose_a", transposeA);
    visit("transpose_b", transposeB);
    visit("epilogue", epilogue);
  }
  friend bool operator==(const GemmParams&, const GemmParams&) = default;
};

struct ElementwiseParams {
  ElementwiseOp op = ElementwiseOp::Add;
  /// Pow's exponent; unused otherwise.
  double scalar = 0.0;
  template <typename Visit> void forEachField(Visit&& visit) {
    visit("op", op);
    visit("scalar", scalar);
  }
  friend bool operator==(const ElementwiseParams&, const ElementwiseParams&) = default;
};

/// One instruction of a fused elementwise program. Registers are numbered by
/// instruction (SSA): instruction i defines register i. A register holds one
/// element of its dtype, so an f16 register is rounded after every operation
/// exactly as an unfused plan rounds when it stores to an f16 buffer; that is
/// what makes fused and unfused plans bit-identical.
struct FusedInstruction {
  ElementwiseOp op = ElementwiseOp::Load;
  DType type = DType::F32;
  /// Registers read (earlier instructions); for Load, operands[0] is the step's input slot.
  std::array<uint32_t, 3> operands{};
  /// Constant's value (rounded to `type`), Pow's exponent.
  double scalar = 0.0;
  friend bool operator==(const FusedInstruction&, const FusedInstruction&) = default;
};

/// What a register of a dtype computes in: f32, f16 and bf16 registers in
/// float (f16/bf16 rounded back after every instruction), f64 in double, i64
/// and i1 in 64-bit integers. The CPU evaluator and the generated CUDA
/// kernels both keep registers this way, so they round at the same places.
enum class RegisterClass : uint8_t { Single, Double, Integer };

constexpr RegisterClass registerClassOf(DType dtype) {
  switch (dtype) {
  case DType::F64: return RegisterClass::Double;
  case DType::I64:
  case DType::I1: return RegisterClass::Integer;
  case DType::F32:
  case DType::F16:
  case DType::BF16: return RegisterClass::Single;
  }
  return RegisterClass::Single;
}

/// Inputs broadcast to the outputs' common shape; output slot k stores
/// register `outputs[k]`, whose dtype is that output's.
struct FusedElementwiseParams {
  std::vector<FusedInstruction> program{};
  std::vector<uint32_t> outputs{};
  template <typename Visit> void forEachField(Visit&& visit) {
    visit("program", program);
    visit("outputs", outputs);
  }
  friend bool operator==(const FusedElementwiseParams&, const FusedElementwiseParams&) = default;
};

enum class ReduceOp : uint8_t { Sum, Mean, Max };
inline constexpr int kReduceOpCount = 3;
std::string_view reduceOpName(ReduceOp op);

/// Reduces `axes` (strictly increasing; empty only for a rank-0 input), keeping
/// them as size 1 under keepdim. Accumulates in computeType; max propagates NaN.
struct ReductionParams {
  ReduceOp op = ReduceOp::Sum;
  std::vector<int64_t> axes{};
  bool keepdim = false;
  template <typename Visit> void forEachField(Visit&& visit) {
    visit("op", op);
    visit("axes", axes);
    visit("keepdim", keepdim);
  }
  friend bool operator==(const ReductionParams&, const ReductionParams&) = default;
};

/// Softmax family and LayerNormGrad: the axis (for layer norm, the first
/// normalised dimension).
struct AxisParams {
  int64_t axis = 0;
  template <typename Visit> void forEachField(Visit&& visit) { visit("axis", axis); }
  friend bool operator==(const AxisParams&, const AxisParams&) = default;
};

/// Normalises dimensions [axis, rank); mean and rstd are f32 (f64 for f64
/// input) of shape input.shape[:axis]; rstd = 1 / sqrt(biased variance + eps).
struct LayerNormParams {
  int64_t axis = 0;
  double eps = 1e-5;
  template <typename Visit> void forEachField(Visit&& visit) {
    visit("axis", axis);
    visit("eps", eps);
  }
  friend bool operator==(const LayerNormParams&, const LayerNormParams&) = default;
};

/// See Philox.h for the random stream: element i of the input draws at
/// counter offset + i of the generator keyed by seed.
struct DropoutParams {
  double p = 0.0;
  template <typename Visit> void forEachField(Visit&& visit) { visit("p", p); }
  friend bool operator==(const DropoutParams&, const DropoutParams&) = default;
};

enum class LossKind : uint8_t { Mse, CrossEntropy, Nll };
inline constexpr int kLossKindCount = 3;
std::string_view lossKindName(LossKind kind);

enum class LossReduction : uint8_t { None, Mean, Sum };
inline constexpr int kLossReductionCount = 3;
std::string_view lossReductionName(LossReduction reduction);

/// Loss and LossGrad. Classification losses take [N, C] scores and [N] i64
/// labels; rows labelled `ignoreIndex` count for nothing (mean divides by the
/// other rows); labelSmoothing is cross-entropy's (0 for the others).
struct LossParams {
  LossKind loss = LossKind::Mse;
  LossReduction reduction = LossReduction::Mean;
  int64_t ignoreIndex = -100;
  double labelSmoothing = 0.0;
  template <typename Visit> void forEachField(Visit&& visit) {
    visit("loss", loss);
    visit("reduction", reduction);
    visit("ignore_index", ignoreIndex);
    visit("label_smoothing", labelSmoothing);
  }
  friend bool operator==(const LossParams&, const LossParams&) = default;
};

/// Output dimension i is input dimension perm[i].
struct TransposeParams {
  std::vector<int64_t> perm{};
  template <typename Visit> void forEachField(Visit&& visit) { visit("perm", perm); }
  friend bool operator==(const TransposeParams&, const TransposeParams&) = default;
};

/// The output's elements, little-endian in its dtype: one element (a splat)
/// or all of them.
struct ConstantParams {
  std::vector<uint8_t> data{};
  template <typename Visit> void forEachField(Visit&& visit) { visit("data", data); }
  friend bool operator==(const ConstantParams&, const ConstantParams&) = default;
};

enum class OptimizerKind : uint8_t { Sgd, Adam };
inline constexpr int kOptimizerKindCount = 2;
std::string_view optimizerKindName(OptimizerKind kind);

/// jit.sgd_update / jit.adam_update (JitOps.td has the formulas). Fields an
/// optimizer does not use stay at their defaults.
struct OptimizerParams {
  OptimizerKind optimizer = OptimizerKind::Sgd;
  double momentum = 0.0;     // sgd
  double dampening = 0.0;    // sgd
  bool nesterov = false;     // sgd
  double beta1 = 0.9;        // adam
  double beta2 = 0.999;      // adam
  double eps = 1e-8;         // adam
  bool decoupledWeightDecay = false; // adam (AdamW)
  double weightDecay = 0.0;
  bool maximize = false;
  template <typename Visit> void forEachField(Visit&& visit) {
    visit("optimizer", optimizer);
    visit("momentum", momentum);
    visit("dampening", dampening);
    visit("nesterov", nesterov);
    visit("beta1", beta1);
    visit("beta2", beta2);
    visit("eps", eps);
    visit("decoupled_weight_decay", decoupledWeightDecay);
    visit("weight_decay", weightDecay);
    visit("maximize", maximize);
  }
  friend bool operator==(const OptimizerParams&, const OptimizerParams&) = default;
};

/// amp.update_scale (AmpOps.td). PyTorch's GradScaler is the defaults;
/// Paddle sets backoffInterval (decr_every_n_nan_or_inf) and minScale = 1;
/// apex's min_loss_scale and max_loss_scale are minScale and maxScale.
struct UpdateScaleParams {
  double growthFactor = 2.0;
  double backoffFactor = 0.5;
  int64_t growthInterval = 2000;
  int64_t backoffInterval = 1;
  double minScale = 0.0;
  double maxScale = std::numeric_limits<double>::infinity();
  template <typename Visit> void forEachField(Visit&& visit) {
    visit("growth_factor", growthFactor);
    visit("backoff_factor", backoffFactor);
    visit("growth_interval", growthInterval);
    visit("backoff_interval", backoffInterval);
    visit("min_scale", minScale);
    visit("max_scale", maxScale);
  }
  friend bool operator==(const UpdateScaleParams&, const UpdateScaleParams&) = default;
};

/// Conv2d and its two gradients. Activations are [N, C, H, W] (NCHW) or
/// [N, H, W, C] (`nhwc`); the filter is [O, C/groups, KH, KW] (OIHW) or
/// [O, KH, KW, C/groups] (OHWI, cuDNN's NHWC filter layout). stride, padding
/// (zeros, both sides) and dilation are [height, width]. Output size per
/// spatial dim: (in + 2*pad - dilation*(k-1) - 1) / stride + 1. Products
/// accumulate in computeType in an order that depends on the shapes only,
/// not on the layout, so NCHW and NHWC plans agree bit for bit on the CPU. The gradients' result shapes (the input's,
/// the filter's) are their output buffers' shapes.
struct Conv2dParams {
  std::vector<int64_t> stride{1, 1};
  std::vector<int64_t> padding{0, 0};
  std::vector<int64_t> dilation{1, 1};
  int64_t groups = 1;
  bool nhwc = false;
  template <typename Visit> void forEachField(Visit&& visit) {
    visit("stride", stride);
    visit("padding", padding);
    visit("dilation", dilation);
    visit("groups", groups);
    visit("nhwc", nhwc);
  }
  friend bool operator==(const Conv2dParams&, const Conv2dParams&) = default;
};

/// What a batch norm applies to its normalised output before the one
/// rounding of y (cuDNN's CUDNN_BATCHNORM_OPS_BN, _BN_ACTIVATION and
/// _BN_ADD_ACTIVATION): nothing, relu, or relu after adding a residual z.
/// BatchNormGrad carries the same value to fold the relu's gradient in.
enum class BatchNormActivation : uint8_t { None, Relu, AddRelu };
inline constexpr int kBatchNormActivationCount = 3;
std::string_view batchNormActivationName(BatchNormActivation activation);

/// BatchNorm and BatchNormInference: statistics per index of `axis` (the
/// channel: 1 for NCHW and [N, C], 3 for NHWC) over all other dimensions.
/// weight, bias, running statistics, save_mean and save_invstd are [C] in
/// the statistics type (f32; f64 for f64 data) whatever the data's dtype, so
/// low-precision activations keep fp32 statistics. Training: save_invstd =
/// 1/sqrt(biased var + eps); new running = (1 - momentum) * running +
/// momentum * batch statistic, with the unbiased variance (PyTorch).
/// Inference normalises with the running statistics.
///
/// The epilogue (`activation`; codegen fuses it for the CUDA backend only):
/// y = relu(bn(x)) or y = relu(bn(x) + z), with z an extra input of x's
/// type, computed in the statistics type from the same per-channel values
/// and rounded once to y's dtype. relu is the Elementwise step's
/// (`v < 0 ? 0 : v`, so NaN passes). In f32 and f64 that is bit for bit the
/// unfused steps (bn, add, relu each rounding to the same type); in f16/bf16
/// it skips the roundings of bn(x) and of the sum.
struct BatchNormParams {
  int64_t axis = 1;
  double eps = 1e-5;
  double momentum = 0.1;
  BatchNormActivation activation = BatchNormActivation::None;
  template <typename Visit> void forEachField(Visit&& visit) {
    visit("axis", axis);
    visit("eps", eps);
    visit("momentum", momentum);
    visit("activation", activation);
  }
  friend bool operator==(const BatchNormParams&, const BatchNormParams&) = default;
};

/// BatchNormGrad: `axis` as the forward's. dbias = sum(g), dweight =
/// sum(g * xhat), dx from save_mean/save_invstd, where g is dy without an
/// activation. With one, the step is the relu's gradient folded in: it
/// reads the forward's output y (after the relu) and its bias, and
/// g = y > 0 ? dy : 0 (the ReluGrad elementwise op, exact in dy's dtype);
/// add_relu also writes g as dz, the residual input's gradient. The bias
/// does not enter the definition: it is there for backends whose fused
/// kernel recomputes the pre-activation (cuDNN's BatchNormalizationBackwardEx
/// wants it). Folding changes no rounding: fused == unfused bit for bit in
/// every dtype.
struct BatchNormGradParams {
  int64_t axis = 1;
  BatchNormActivation activation = BatchNormActivation::None;
  template <typename Visit> void forEachField(Visit&& visit) {
    visit("axis", axis);
    visit("activation", activation);
  }
  friend bool operator==(const BatchNormGradParams&, const BatchNormGradParams&) = default;
};

/// Slot positions of the batch-norm steps (the optional trailing slots exist
/// only with the activation that needs them).
namespace batch_norm_slot {
inline constexpr std::size_t kX = 0, kWeight = 1, kBias = 2, kRunningMean = 3, kRunningVar = 4, kZ = 5;
inline constexpr std::size_t kY = 0, kSaveMean = 1, kSaveInvstd = 2, kNewRunningMean = 3, kNewRunningVar = 4;
} // namespace batch_norm_slot
/// conv2d_grad_input's optional third input: the gradient its result is
/// added to, which must be its output 'dx' itself (cuDNN's beta = 1).
namespace conv2d_grad_input_slot {
inline constexpr std::size_t kDy = 0, kWeight = 1, kAccumulate = 2;
} // namespace conv2d_grad_input_slot

namespace batch_norm_grad_slot {
inline constexpr std::size_t kDy = 0, kX = 1, kSaveMean = 2, kSaveInvstd = 3, kWeight = 4, kY = 5, kBias = 6;
inline constexpr std::size_t kDx = 0, kDweight = 1, kDbias = 2, kDz = 3;
} // namespace batch_norm_grad_slot

/// Max and average pooling over [height, width] windows of NCHW or NHWC
/// activations. Padding is implicit -inf (max) or zeros (average). ceilMode
/// rounds the output size up (a window must still start inside the input or
/// its left padding, as PyTorch). Average divides by the window's size
/// clipped to the padded input (countIncludePad) or to the input. MaxPool2dGrad
/// routes each output gradient to its window's maximum, the first in
/// row-major order among equal values; a NaN replaces any maximum seen
/// before it (so the last NaN wins), as PyTorch's CPU kernel does.
struct Pool2dParams {
  std::vector<int64_t> kernel{1, 1};
  std::vector<int64_t> stride{1, 1};
  std::vector<int64_t> padding{0, 0};
  bool ceilMode = false;
  bool countIncludePad = true;
  bool nhwc = false;
  template <typename Visit> void forEachField(Visit&& visit) {
    visit("kernel", kernel);
    visit("stride", stride);
    visit("padding", padding);
    visit("ceil_mode", ceilMode);
    visit("count_include_pad", countIncludePad);
    visit("nhwc", nhwc);
  }
  friend bool operator==(const Pool2dParams&, const Pool2dParams&) = default;
};

/// jit.embedding_grad: the row whose gradient stays zero, or -1 for none.
/// (jit.embedding's padding_idx changes nothing in the forward: NoParams.)
/// Rows are summed in fp32 (f64 for f64) in index order and rounded once.
struct EmbeddingGradParams {
  int64_t paddingIdx = -1;
  template <typename Visit> void forEachField(Visit&& visit) { visit("padding_idx", paddingIdx); }
  friend bool operator==(const EmbeddingGradParams&, const EmbeddingGradParams&) = default;
};

/// Input slot positions of the optimizer updates (outputs: new_param, then
/// the new value of each state input present, in input order).
namespace sgd_slot {
inline constexpr std::size_t kParam = 0, kGrad = 1, kMomentumBuffer = 2, kStep = 3, kLr = 4,
                             kInvScale = 5, kPredicate = 6, kParamCopy = 7;
inline constexpr std::size_t kNewParam = 0, kNewMomentumBuffer = 1, kNewParamCopy = 2;
inline constexpr std::size_t kInputs = 8, kOutputs = 3;
} // namespace sgd_slot
namespace adam_slot {
inline constexpr std::size_t kParam = 0, kGrad = 1, kExpAvg = 2, kExpAvgSq = 3, kMaxExpAvgSq = 4, kStep = 5,
                             kLr = 6, kInvScale = 7, kPredicate = 8, kParamCopy = 9;
inline constexpr std::size_t kNewParam = 0, kNewExpAvg = 1, kNewExpAvgSq = 2, kNewMaxExpAvgSq = 3,
                             kNewParamCopy = 4;
inline constexpr std::size_t kInputs = 10, kOutputs = 5;
} // namespace adam_slot

using StepParams =
    std::variant<NoParams, GemmParams, ElementwiseParams, FusedElementwiseParams, ReductionParams,
                 AxisParams, LayerNormParams, DropoutParams, LossParams, TransposeParams,
                 ConstantParams, OptimizerParams, UpdateScaleParams, Conv2dParams, BatchNormParams,
                 Pool2dParams, BatchNormGradParams, EmbeddingGradParams>;

/// The StepParams alternative (variant index) each kind carries.
std::size_t paramsIndexOf(StepKind kind);
/// Default-constructed parameters of the right alternative for `kind`.
StepParams defaultParamsFor(StepKind kind);

//===----------------------------------------------------------------------===//
// Steps and plans
//===----------------------------------------------------------------------===//

struct Step {
  StepKind kind = StepKind::Elementwise;
  /// The precision arithmetic runs in: f64 when the data is f64, otherwise f32
  /// (low-precision inputs are widened, as tensor cores do). Recorded so that
  /// a backend and the printed plan need not re-derive it.
  DType computeType = DType::F32;
  StepParams params{};
  /// Buffers read and written, in the kind's slot order (slotNames()). Absent
  /// optional slots hold kNoBuffer.
  std::vector<BufferId> inputs{};
  std::vector<BufferId> outputs{};
  /// Where the step came from, for messages ("jit.matmul", "jit.matmul #12").
  std::string origin{};

  template <typename P> const P& as() const { return std::get<P>(params); }
  template <typename P> P& as() { return std::get<P>(params); }
  friend bool operator==(const Step&, const Step&) = default;
};

/// Whether `step` is a conv2d_grad_input that adds its result to its
/// 'accumulate' input in place (conv2d_grad_input_slot).
inline bool accumulatesInPlace(const Step& step) {
  return step.kind == StepKind::Conv2dGradInput && step.inputs.size() > conv2d_grad_input_slot::kAccumulate;
}

/// A function result: a buffer, and when the result is the new value of a
/// state argument, that argument's index (the buffer is then the argument's
/// own: state is updated in place, never copied).
struct PlanResult {
  BufferId buffer = 0;
  int32_t tiedArgument = -1;
  friend bool operator==(const PlanResult&, const PlanResult&) = default;
};

/// A step that may run beside the main order until `joinBefore`, a later
/// step index or steps.size() (the end of the run). Plan::sideSteps.
struct SideStep {
  uint32_t step = 0;
  uint32_t joinBefore = 0;
  friend bool operator==(const SideStep&, const SideStep&) = default;
};

struct Plan {
  /// The traced function's name.
  std::string name{};
  std::vector<BufferDesc> buffers{};
  std::vector<PlanResult> results{};
  std::vector<Step> steps{};
  /// Bytes of the temporaries' arena.
  uint64_t arenaBytes = 0;
  /// The first `deferredSteps` steps are the previous run's optimizer update,
  /// deferred into this run so that it can overlap this run's forward
  /// (codegen's deferOptimizerUpdates). They read only carried buffers,
  /// constants and state, and write only state no other step writes and
  /// carried buffers. A run does them only when the run before left them
  /// pending; Executable::completeDeferred does them alone.
  uint32_t deferredSteps = 0;
  /// Steps a backend may run on a second lane (a GPU's side stream), beside
  /// the steps after them, each finished before its `joinBefore` step
  /// starts (codegen's overlapWeightGradients). In step order. Running them
  /// in line is always right; verifyPlan checks that running them beside is
  /// too: no step in between reads what a side step writes or writes what
  /// it touches, and its buffers hold their arena bytes until the join.
  std::vector<SideStep> sideSteps{};

  /// Number of function arguments (buffers with an argument index).
  std::size_t argumentCount() const;
  /// The buffer of argument `index`, or kNoBuffer.
  BufferId argumentBuffer(std::size_t index) const;
  friend bool operator==(const Plan&, const Plan&) = default;
};

/// The slot names of a step's inputs or outputs, in order ("A", "B";
/// "param", "grad", "momentum_buffer", ...). Optional slots are included.
std::vector<std::string> slotNames(const Step& step, bool outputs);
/// Whether an input slot may hold kNoBuffer.
bool isOptionalInputSlot(const Step& step, std::size_t slot);

/// How errors name a buffer: "buffer %N 'name'".
std::string describeBuffer(const Plan& plan, BufferId id);
/// How errors name a step: "step N (kind from origin)".
std::string describeStep(const Plan& plan, std::size_t index);
/// The same with its plan, as backends' errors say it: "plan @name, step N (...)".
std::string describeStepOfPlan(const Plan& plan, std::size_t index);
/// The error of AMPJIT_CHECK_NUMERICS (DESIGN: it names the first op that
/// produced an inf or NaN) for output slot `slot` of step `index`, the same
/// words on every backend.
Status nonFiniteOutputError(const Plan& plan, std::size_t index, std::size_t slot);

/// The parameter elements the plan's optimizer updates rewrite: what
/// deferring the update (codegen's deferOptimizerUpdates) and jit::trace's
/// automatic deferral weigh.
int64_t optimizerUpdateElements(const Plan& plan);

/// For each step, whether it is one of Plan::sideSteps (those in range).
std::vector<bool> sideStepMask(const Plan& plan);
/// For each buffer, the last step through which a side step that reads or
/// writes it keeps it live (its joinBefore - 1), or -1: the arena holds a
/// side step's buffers until it joins (codegen's layout, verifyPlan).
std::vector<int64_t> heldBySideSteps(const Plan& plan);

/// Which temporaries are views of another buffer's memory, so that their
/// Reshape step moves nothing: the output of a Reshape step laid out at its
/// temporary input's own arena offset (codegen does so when no other step
/// writes either), or a temporary with `viewOf` (a view of an argument, a
/// constant or a carried buffer). For each buffer, the buffer whose memory it
/// views, following chains of views: itself when it is no view.
std::vector<BufferId> arenaViewRoots(const Plan& plan);

/// Checks every rule of the plan model: buffer table, arguments and results,
/// ties, slot counts and ids, dtypes and shapes of every step, arena bounds
/// and that no two temporaries share arena bytes while both are live (but a
/// view and what it views, neither written by a second step), that
/// nothing reads a buffer before it is written, and that only tied state,
/// temporaries and outputs are written. The message names the step or buffer
/// and what is wrong.
Status verifyPlan(const Plan& plan);

/// Checks one step against buffer types (used by verifyPlan and by the
/// StepBuilder, which checks a step against its operand types).
Status verifyStepTypes(const Step& step, std::span<const TensorType> inputTypes,
                       std::span<const TensorType> outputTypes);

/// The plan as stable, readable text (see docs/plan-format.md for an example).
std::string printPlan(const Plan& plan);
/// One step as printed inside printPlan, without the trailing newline:
/// `step 3: gemm f16 x f16 -> f16 (acc f32) A=%5 B=%2^T C=%7`.
std::string printStep(const Plan& plan, std::size_t index);

/// Shortest decimal that reads back as the same double ("0.1", "1e-08", "nan").
std::string formatDouble(double value);

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_PLAN_H
