#ifndef JIT_OPS_H
#define JIT_OPS_H

// Every op of the `jit` dialect as a free function (DESIGN: "mirroring the
// eager API 1:1"). Each records exactly the op named in its comment through
// the frontend's one dispatch function, so eager execution and, later,
// tracing see the same calls. Binary ops broadcast as numpy does and never
// promote dtypes: both operands must have the same element type (a C++
// number becomes a rank-0 constant of the tensor's dtype, as in PyTorch).
// Axes may be negative (counted from the end).

#include "jit/Tensor.h"

#include <array>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

namespace jit {

// --- elementwise ------------------------------------------------------------
Tensor add(const Tensor& lhs, const Tensor& rhs); ///< jit.add
Tensor sub(const Tensor& lhs, const Tensor& rhs); ///< jit.sub
Tensor mul(const Tensor& lhs, const Tensor& rhs); ///< jit.mul
Tensor div(const Tensor& lhs, const Tensor& rhs); ///< jit.div
Tensor neg(const Tensor& input);                  ///< jit.neg
Tensor relu(const Tensor& input);                 ///< jit.relu
enum class GeluApproximate { none, tanh };
Tensor gelu(const Tensor& input, GeluApproximate approximate = GeluApproximate::none); ///< jit.gelu
Tensor tanh(const Tensor& input);    ///< jit.tanh
Tensor sigmoid(const Tensor& input); ///< jit.sigmoid
Tensor exp(const Tensor& input);     ///< jit.exp
Tensor log(const Tensor& input);     ///< jit.log
Tensor sqrt(const Tensor& input);    ///< jit.sqrt
Tensor rsqrt(const Tensor& input);   ///< jit.rsqrt
Tensor pow(const Tensor& input, double exponent); ///< jit.pow

Tensor operator+(const Tensor& lhs, const Tensor& rhs);
Tensor operator-(const Tensor& lhs, const Tensor& rhs);
Tensor operator*(const Tensor& lhs, const Tensor& rhs);
Tensor operator/(const Tensor& lhs, const Tensor& rhs);
Tensor operator-(const Tensor& input);
Tensor operator+(const Tensor& lhs, double rhs);
Tensor operator-(const Tensor& lhs, double rhs);
Tensor operator*(const Tensor& lhs, double rhs);
Tensor operator/(const Tensor& lhs, double rhs);
Tensor operator+(double lhs, const Tensor& rhs);
Tensor operator-(double lhs, const Tensor& rhs);
Tensor operator*(double lhs, const Tensor& rhs);
Tensor operator/(double lhs, const Tensor& rhs);

// --- comparisons and choice (jit.compare, jit.select); results are i1 ----------
Tensor eq(const Tensor& lhs, const Tensor& rhs);
Tensor ne(const Tensor& lhs, const Tensor& rhs);
Tensor lt(const Tensor& lhs, const Tensor& rhs);
Tensor le(const Tensor& lhs, const Tensor& rhs);
Tensor gt(const Tensor& lhs, const Tensor& rhs);
Tensor ge(const Tensor& lhs, const Tensor& rhs);
// No operator== / !=: they compare handles in containers and tests; use eq/ne.
Tensor operator<(const Tensor& lhs, const Tensor& rhs);
Tensor operator<=(const Tensor& lhs, const Tensor& rhs);
Tensor operator>(const Tensor& lhs, const Tensor& rhs);
Tensor operator>=(const Tensor& lhs, const Tensor& rhs);
/// `condition ? true_value : false_value` elementwise, all three broadcast (jit.select).
Tensor where(const Tensor& condition, const Tensor& true_value, const Tensor& false_value);

// --- matmul -------------------------------------------------------------------
struct MatmulOptions {
  bool transpose_lhs = false; ///< use lhs^T (its last two dimensions swapped)
  bool transpose_rhs = false;
};
/// op(lhs) @ op(rhs), rank >= 2, batch dimensions broadcast (jit.matmul).
Tensor matmul(const Tensor& lhs, const Tensor& rhs, MatmulOptions options = {});
/// PyTorch's F.linear: input [..., in] @ weight^T with weight [out, in], plus
/// an optional bias [out]. As torch's linear/addmm it is one op under
/// autocast: the bias is added in the product's type (f16 under f16
/// autocast), where a user's own `matmul(x, w) + b` promotes to f32
/// (the add carries `jit.linear_bias`, which a traced step's AMP pass reads).
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = {});

// --- reductions (jit.sum, jit.mean, jit.max) -------------------------------------
/// Over every axis, to a rank-0 tensor.
Tensor sum(const Tensor& input);
Tensor mean(const Tensor& input);
Tensor max(const Tensor& input);
/// Over `axes` (any order, negative allowed, no repeats).
Tensor sum(const Tensor& input, std::vector<int64_t> axes, bool keepdim = false);
Tensor mean(const Tensor& input, std::vector<int64_t> axes, bool keepdim = false);
/// The maximum values (PyTorch's amax); the gradient is shared evenly among ties.
Tensor max(const Tensor& input, std::vector<int64_t> axes, bool keepdim = false);

// --- shape and data movement -----------------------------------------------------
Tensor broadcast_to(const Tensor& input, Shape shape); ///< jit.broadcast_to
/// jit.reshape; one dimension may be -1 (inferred).
Tensor reshape(const Tensor& input, Shape shape);
/// Swaps two dimensions (jit.transpose).
Tensor transpose(const Tensor& input, int64_t dim0, int64_t dim1);
/// Result dimension i is input dimension perm[i] (jit.transpose).
Tensor permute(const Tensor& input, std::vector<int64_t> perm);

// --- normalisation, activations along an axis, dropout -------------------------------
Tensor softmax(const Tensor& input, int64_t axis);     ///< jit.softmax
Tensor log_softmax(const Tensor& input, int64_t axis); ///< jit.log_softmax
/// Normalises over the trailing dimensions `normalized_shape` (PyTorch's
/// signature); `weight`/`bias` may be undefined (jit.layer_norm).
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
/// jit.layer_norm with its saved statistics: {output, mean, rstd}.
std::tuple<Tensor, Tensor, Tensor> layer_norm_with_stats(const Tensor& input, int64_t axis,
                                                         const Tensor& weight, const Tensor& bias,
                                                         double eps = 1e-5);
/// Zeroes elements with probability p and scales the rest by 1/(1-p) when
/// training; draws from (and advances) the generator's rng_state (jit.dropout).
Tensor dropout(const Tensor& input, double p = 0.5, bool training = true, Generator* generator = nullptr);
/// jit.dropout on explicit state: {output, keep-mask (i1), next_rng_state}.
std::tuple<Tensor, Tensor, Tensor> dropout_with_state(const Tensor& input, const Tensor& rng_state, double p);

// --- convolutional networks --------------------------------------------------------
/// Dimension order of 4-D activations: NCHW (PyTorch's default) or NHWC
/// (channels last; the filter is then [out, kh, kw, in/groups]). Eager code
/// uses NCHW; the compiler's layout pass makes NHWC for cuDNN.
enum class Layout { nchw, nhwc };
/// [height, width].
using Pair = std::array<int64_t, 2>;

struct Conv2dOptions {
  Pair stride{1, 1};
  Pair padding{0, 0}; ///< zeros on both sides
  Pair dilation{1, 1};
  int64_t groups = 1;
  Layout layout = Layout::nchw;
};
/// PyTorch's F.conv2d: input [N, C, H, W], weight [O, C/groups, KH, KW],
/// optional bias [O] (jit.conv2d).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, Conv2dOptions options = {});

/// PyTorch's F.batch_norm over dimension 1 (the channel of [N, C], [N, C, L]
/// or [N, C, H, W]). Training normalises with the batch's statistics and
/// updates `running_mean`/`running_var` in place (when defined); evaluation
/// uses them. Parameters and running statistics are f32 (f64 for f64 input)
/// whatever the input's precision. (jit.batch_norm, jit.batch_norm_inference)
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = {}, const Tensor& bias = {}, bool training = false,
                  double momentum = 0.1, double eps = 1e-5);
/// jit.batch_norm itself over channel `axis`, without updating anything:
/// {output, save_mean, save_invstd, new_running_mean, new_running_var}.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>
batch_norm_with_stats(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, int64_t axis, double momentum = 0.1, double eps = 1e-5);

struct Pool2dOptions {
  Pair kernel_size{1, 1};
  /// Unset: the kernel size (PyTorch's default).
  std::optional<Pair> stride{};
  Pair padding{0, 0}; ///< at most half the kernel; -inf (max) or zeros (average)
  bool ceil_mode = false;
  /// Average pooling: divide by the window clipped to the padded input (true)
  /// or to the input (false).
  bool count_include_pad = true;
  Layout layout = Layout::nchw;
};
Tensor max_pool2d(const Tensor& input, Pool2dOptions options); ///< jit.max_pool2d
Tensor avg_pool2d(const Tensor& input, Pool2dOptions options); ///< jit.avg_pool2d
/// PyTorch's adaptive_avg_pool2d for an output of {1, 1} (global average
/// pooling of NCHW input): the mean over H and W, keeping them as size 1.
Tensor adaptive_avg_pool2d(const Tensor& input, Pair output_size);

// --- losses ----------------------------------------------------------------------
enum class Reduction { none, mean, sum };
struct MseLossOptions {
  Reduction reduction = Reduction::mean;
};
struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};
struct NllLossOptions {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
};
Tensor mse_loss(const Tensor& input, const Tensor& target, MseLossOptions options = {},
                std::source_location where = std::source_location::current()); ///< jit.mse_loss
/// logits [N, C], labels i64 [N] (jit.cross_entropy).
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, CrossEntropyOptions options = {},
                     std::source_location where = std::source_location::current());
/// log_probs [N, C], labels i64 [N] (jit.nll_loss).
Tensor nll_loss(const Tensor& log_probs, const Tensor& labels, NllLossOptions options = {},
                std::source_location where = std::source_location::current());

// --- losses written with the ops above (no op of their own) -------------------------
// Each takes `input` and a floating `target` of its shape, computes
// elementwise in fp32 (f64 when either is f64; f16/bf16 are widened, as
// PyTorch's autocast runs these losses in fp32) and reduces like the ops
// above (mean over every element, sum, or none).

struct BceWithLogitsOptions {
  Reduction reduction = Reduction::mean;
  /// Weight of the positive term, broadcast against the input (torch's pos_weight); undefined for 1.
  Tensor pos_weight{};
};
/// torch.nn.functional.binary_cross_entropy_with_logits, in the stable
/// form (1 - y) x + w (log(1 + exp(-|x|)) + max(-x, 0)), w = 1 + (pos_weight - 1) y.
/// Its gradient, (1 - y) - w sigmoid(-x), is PyTorch's at x = 0 too.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, BceWithLogitsOptions options = {},
                                        std::source_location where = std::source_location::current());
struct L1LossOptions {
  Reduction reduction = Reduction::mean;
};
/// |input - target|; the gradient at 0 is 0, as torch's sign.
Tensor l1_loss(const Tensor& input, const Tensor& target, L1LossOptions options = {},
               std::source_location where = std::source_location::current());
struct SmoothL1LossOptions {
  Reduction reduction = Reduction::mean;
  double beta = 1.0; ///< 0 makes it l1_loss
};
/// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, SmoothL1LossOptions options = {},
                      std::source_location where = std::source_location::current());
struct HuberLossOptions {
  Reduction reduction = Reduction::mean;
  double delta = 1.0;
};
/// 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta).
Tensor huber_loss(const Tensor& input, const Tensor& target, HuberLossOptions options = {},
                  std::source_location where = std::source_location::current());

/// jit.embedding (torch.nn.functional.embedding): the rows of `weight`
/// ([num_embeddings, embedding_dim]) at `indices` (i64, any shape), shaped
/// [indices..., embedding_dim]. `padding_idx` (negative counts from the end)
/// keeps that row's gradient zero.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt,
                 std::source_location where = std::source_location::current());

// --- backward ops --------------------------------------------------------------------
// The dialect's gradient kernels, public so that VJP rules (and custom ones)
// record them like any op. They have no VJP rule themselves: calling one on
// a tensor that requires grad, with grad mode on, is an error.
Tensor relu_grad(const Tensor& grad_output, const Tensor& output);
Tensor gelu_grad(const Tensor& grad_output, const Tensor& input,
                 GeluApproximate approximate = GeluApproximate::none);
Tensor softmax_grad(const Tensor& grad_output, const Tensor& output, int64_t axis);
Tensor log_softmax_grad(const Tensor& grad_output, const Tensor& output, int64_t axis);
/// {grad_input, grad_weight, grad_bias}; `weight` may be undefined.
std::tuple<Tensor, Tensor, Tensor> layer_norm_grad(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& mean, const Tensor& rstd,
                                                   const Tensor& weight, int64_t axis);
Tensor mse_loss_grad(const Tensor& grad_output, const Tensor& input, const Tensor& target,
                     MseLossOptions options = {});
/// The input gradient of conv2d; `input_shape` is the forward input's shape.
Tensor conv2d_grad_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_shape,
                         Conv2dOptions options = {});
/// The filter gradient of conv2d; `weight_shape` is the forward filter's shape.
Tensor conv2d_grad_weight(const Tensor& grad_output, const Tensor& input, const Shape& weight_shape,
                          Conv2dOptions options = {});
/// {grad_input, grad_weight, grad_bias} of training-mode batch norm over channel `axis`.
std::tuple<Tensor, Tensor, Tensor> batch_norm_grad(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& save_mean, const Tensor& save_invstd,
                                                   const Tensor& weight, int64_t axis);
Tensor max_pool2d_grad(const Tensor& grad_output, const Tensor& input, Pool2dOptions options);
Tensor avg_pool2d_grad(const Tensor& grad_output, const Tensor& input, Pool2dOptions options);
Tensor cross_entropy_grad(const Tensor& grad_output, const Tensor& logits, const Tensor& labels,
                          CrossEntropyOptions options = {});
Tensor nll_loss_grad(const Tensor& grad_output, const Tensor& log_probs, const Tensor& labels,
                     NllLossOptions options = {});
/// [num_weights, embedding_dim]: each row the sum, in fp32, of the rows of
/// `grad_output` whose index is that row; the `padding_idx` row zero.
Tensor embedding_grad(const Tensor& grad_output, const Tensor& indices, int64_t num_weights,
                      std::optional<int64_t> padding_idx = std::nullopt);

/// Sums `grad` over the dimensions that broadcasting added or expanded, so
/// it gets `shape` (the reverse of broadcast_to; used by VJP rules).
Tensor sum_to_shape(const Tensor& grad, const Shape& shape);

} // namespace jit

#endif // JIT_OPS_H
