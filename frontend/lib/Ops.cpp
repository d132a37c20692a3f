// The public op functions: each turns its C++ arguments into the op's
// operands and attributes (ODS names) and calls apply().

#include "Dispatch.h"

#include "jit/Autograd.h"
#include "jit/Ops.h"

#include <algorithm>

namespace jit {

using detail::apply;
using detail::apply1;
using detail::AttributeMap;
using detail::keywordOf;
using detail::RequestedResult;
namespace ops = detail::ops;

namespace {

/// `axis` in [-rank, rank) as an index in [0, rank).
int64_t normalizeAxis(std::string_view op, const Tensor& input, int64_t axis) {
  int64_t rank = input.dim();
  if (axis < -rank || axis >= rank)
    throw Error(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for operand 'input' " +
                detail::describe(input));
  return axis < 0 ? axis + rank : axis;
}

/// Sorted, non-negative, distinct axes (what the dialect requires).
std::vector<int64_t> normalizeAxes(std::string_view op, const Tensor& input, std::vector<int64_t> axes) {
  for (int64_t& axis : axes)
    axis = normalizeAxis(op, input, axis);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    throw Error(std::string(op) + ": axis " + std::to_string(*std::adjacent_find(axes.begin(), axes.end())) +
                " is listed twice");
  return axes;
}

std::vector<int64_t> allAxes(const Tensor& input) {
  std::vector<int64_t> axes(size_t(input.dim()));
  for (size_t i = 0; i < axes.size(); ++i)
    axes[i] = int64_t(i);
  return axes;
}

Tensor scalarLike(double value, const Tensor& like) { return detail::wrappedNumber(value, like.dtype()); }

Tensor comparison(const Tensor& lhs, const Tensor& rhs, const char* predicate) {
  return apply1(ops::compare, {lhs, rhs}, {{"predicate", std::string(predicate)}});
}

Tensor reduction(const detail::OpDef& op, const Tensor& input, std::vector<int64_t> axes, bool keepdim) {
  AttributeMap attributes{{"axes", normalizeAxes(op.name, input, std::move(axes))}};
  if (keepdim)
    attributes["keepdim"] = true;
  return apply1(op, {input}, std::move(attributes));
}

} // namespace

// --- elementwise ------------------------------------------------------------------
Tensor add(const Tensor& lhs, const Tensor& rhs) { return apply1(ops::add, {lhs, rhs}); }
Tensor sub(const Tensor& lhs, const Tensor& rhs) { return apply1(ops::sub, {lhs, rhs}); }
Tensor mul(const Tensor& lhs, const Tensor& rhs) { return apply1(ops::mul, {lhs, rhs}); }
Tensor div(const Tensor& lhs, const Tensor& rhs) { return apply1(ops::div, {lhs, rhs}); }
Tensor neg(const Tensor& input) { return apply1(ops::neg, {input}); }
Tensor relu(const Tensor& input) { return apply1(ops::relu, {input}); }
Tensor gelu(const Tensor& input, GeluApproximate approximate) {
  return apply1(ops::gelu, {input}, {{"approximate", keywordOf(approximate)}});
}
Tensor tanh(const Tensor& input) { return apply1(ops::tanh, {input}); }
Tensor sigmoid(const Tensor& input) { return apply1(ops::sigmoid, {input}); }
Tensor exp(const Tensor& input) { return apply1(ops::exp, {input}); }
Tensor log(const Tensor& input) { return apply1(ops::log, {input}); }
Tensor sqrt(const Tensor& input) { return apply1(ops::sqrt, {input}); }
Tensor rsqrt(const Tensor& input) { return apply1(ops::rsqrt, {input}); }
Tensor pow(const Tensor& input, double exponent) { return apply1(ops::pow, {input}, {{"exponent", exponent}}); }

Tensor operator+(const Tensor& lhs, const Tensor& rhs) { return add(lhs, rhs); }
Tensor operator-(const Tensor& lhs, const Tensor& rhs) { return sub(lhs, rhs); }
Tensor operator*(const Tensor& lhs, const Tensor& rhs) { return mul(lhs, rhs); }
Tensor operator/(const Tensor& lhs, const Tensor& rhs) { return div(lhs, rhs); }
Tensor operator-(const Tensor& input) { return neg(input); }
Tensor operator+(const Tensor& lhs, double rhs) { return add(lhs, scalarLike(rhs, lhs)); }
Tensor operator-(const Tensor& lhs, double rhs) { return sub(lhs, scalarLike(rhs, lhs)); }
Tensor operator*(const Tensor& lhs, double rhs) { return mul(lhs, scalarLike(rhs, lhs)); }
Tensor operator/(const Tensor& lhs, double rhs) { return div(lhs, scalarLike(rhs, lhs)); }
Tensor operator+(double lhs, const Tensor& rhs) { return add(scalarLike(lhs, rhs), rhs); }
Tensor operator-(double lhs, const Tensor& rhs) { return sub(scalarLike(lhs, rhs), rhs); }
Tensor operator*(double lhs, const Tensor& rhs) { return mul(scalarLike(lhs, rhs), rhs); }
Tensor operator/(double lhs, const Tensor& rhs) { return div(scalarLike(lhs, rhs), rhs); }

// --- comparisons and choice ------------------------------------------------------------
Tensor eq(const Tensor& lhs, const Tensor& rhs) { return comparison(lhs, rhs, "eq"); }
Tensor ne(const Tensor& lhs, const Tensor& rhs) { return comparison(lhs, rhs, "ne"); }
Tensor lt(const Tensor& lhs, const Tensor& rhs) { return comparison(lhs, rhs, "lt"); }
Tensor le(const Tensor& lhs, const Tensor& rhs) { return comparison(lhs, rhs, "le"); }
Tensor gt(const Tensor& lhs, const Tensor& rhs) { return comparison(lhs, rhs, "gt"); }
Tensor ge(const Tensor& lhs, const Tensor& rhs) { return comparison(lhs, rhs, "ge"); }
Tensor operator<(const Tensor& lhs, const Tensor& rhs) { return lt(lhs, rhs); }
Tensor operator<=(const Tensor& lhs, const Tensor& rhs) { return le(lhs, rhs); }
Tensor operator>(const Tensor& lhs, const Tensor& rhs) { return gt(lhs, rhs); }
Tensor operator>=(const Tensor& lhs, const Tensor& rhs) { return ge(lhs, rhs); }
Tensor where(const Tensor& condition, const Tensor& true_value, const Tensor& false_value) {
  return apply1(ops::select, {condition, true_value, false_value});
}

// --- matmul -----------------------------------------------------------------------------
Tensor matmul(const Tensor& lhs, const Tensor& rhs, MatmulOptions options) {
  AttributeMap attributes;
  if (options.transpose_lhs)
    attributes["transpose_lhs"] = true;
  if (options.transpose_rhs)
    attributes["transpose_rhs"] = true;
  return apply1(ops::matmul, {lhs, rhs}, std::move(attributes));
}

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  if (!input.defined() || !weight.defined())
    throw Error("jit::linear: operands 'input' and 'weight' must be defined tensors");
  if (weight.dim() != 2 || input.dim() < 1 || input.size(-1) != weight.size(1))
    throw Error("jit::linear: operand 'input' " + detail::describe(input) + " and operand 'weight' " +
                detail::describe(weight) + " do not make input @ weight^T: the weight must be [out, in] with " +
                "'in' the input's last dimension");
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0)))
    throw Error("jit::linear: operand 'bias' " + detail::describe(bias) + " must be a vector of the weight's " +
                std::to_string(weight.size(0)) + " output features");
  // jit.matmul needs rank >= 2: a vector is a one-row matrix, as in torch.
  Tensor rows = input.dim() == 1 ? reshape(input, {1, input.size(0)}) : input;
  Tensor y = matmul(rows, weight, {.transpose_rhs = true});
  if (bias.defined())
    y = apply1(ops::add, {y, bias}, {{"jit.linear_bias", true}});
  return input.dim() == 1 ? reshape(y, {weight.size(0)}) : y;
}

// --- reductions -------------------------------------------------------------------------
Tensor sum(const Tensor& input) { return reduction(ops::sum, input, allAxes(input), false); }
Tensor mean(const Tensor& input) { return reduction(ops::mean, input, allAxes(input), false); }
Tensor max(const Tensor& input) { return reduction(ops::max, input, allAxes(input), false); }
Tensor sum(const Tensor& input, std::vector<int64_t> axes, bool keepdim) {
  return reduction(ops::sum, input, std::move(axes), keepdim);
}
Tensor mean(const Tensor& input, std::vector<int64_t> axes, bool keepdim) {
  return reduction(ops::mean, input, std::move(axes), keepdim);
}
Tensor max(const Tensor& input, std::vector<int64_t> axes, bool keepdim) {
  return reduction(ops::max, input, std::move(axes), keepdim);
}

// --- shape and data movement ----------------------------------------------------------------
Tensor broadcast_to(const Tensor& input, Shape shape) {
  return apply1(ops::broadcast_to, {input}, {}, RequestedResult{.shape = std::move(shape)});
}

Tensor reshape(const Tensor& input, Shape shape) {
  auto inferred = std::find(shape.begin(), shape.end(), int64_t(-1));
  if (inferred != shape.end()) {
    int64_t known = 1;
    for (auto it = shape.begin(); it != shape.end(); ++it)
      if (it != inferred)
        known *= *it;
    if (known <= 0 || input.numel() % known != 0)
      throw Error("jit.reshape: cannot reshape operand 'input' " + detail::describe(input) + " to " +
                  ampjit::runtime::shapeToString(shape));
    *inferred = input.numel() / known;
  }
  return apply1(ops::reshape, {input}, {}, RequestedResult{.shape = std::move(shape)});
}

Tensor transpose(const Tensor& input, int64_t dim0, int64_t dim1) {
  std::vector<int64_t> perm = allAxes(input);
  std::swap(perm[size_t(normalizeAxis("jit.transpose", input, dim0))],
            perm[size_t(normalizeAxis("jit.transpose", input, dim1))]);
  return apply1(ops::transpose, {input}, {{"perm", perm}});
}

Tensor permute(const Tensor& input, std::vector<int64_t> perm) {
  for (int64_t& d : perm)
    d = normalizeAxis("jit.transpose", input, d);
  return apply1(ops::transpose, {input}, {{"perm", std::move(perm)}});
}

// --- normalisation, softmax, dropout ----------------------------------------------------------
Tensor softmax(const Tensor& input, int64_t axis) {
  return apply1(ops::softmax, {input}, {{"axis", normalizeAxis("jit.softmax", input, axis)}});
}
Tensor log_softmax(const Tensor& input, int64_t axis) {
  return apply1(ops::log_softmax, {input}, {{"axis", normalizeAxis("jit.log_softmax", input, axis)}});
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_with_stats(const Tensor& input, int64_t axis, const Tensor& weight,
                                                         const Tensor& bias, double eps) {
  std::vector<Tensor> results =
      apply(ops::layer_norm, {input, weight, bias},
            {{"axis", normalizeAxis("jit.layer_norm", input, axis)}, {"eps", eps}});
  return {results[0], results[1], results[2]};
}

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const Shape& shape = input.shape();
  if (normalized_shape.empty() || normalized_shape.size() > shape.size() ||
      !std::equal(normalized_shape.begin(), normalized_shape.end(), shape.end() - int64_t(normalized_shape.size())))
    throw Error("jit.layer_norm: normalized_shape " + ampjit::runtime::shapeToString(normalized_shape) +
                " must be the trailing dimensions of operand 'input' " + detail::describe(input));
  int64_t axis = int64_t(shape.size() - normalized_shape.size());
  return std::get<0>(layer_norm_with_stats(input, axis, weight, bias, eps));
}

std::tuple<Tensor, Tensor, Tensor> dropout_with_state(const Tensor& input, const Tensor& rng_state, double p) {
  std::vector<Tensor> results = apply(ops::dropout, {input, rng_state}, {{"p", p}});
  return {results[0], results[1], results[2]};
}

Tensor dropout(const Tensor& input, double p, bool training, Generator* generator) {
  if (!training || p == 0.0)
    return input;
  Generator& source = generator ? *generator : default_generator();
  auto [output, mask, next] = dropout_with_state(input, source.rng_state(), p);
  source.set_rng_state(next);
  return output;
}

// --- convolutional networks ---------------------------------------------------------------------
namespace {
std::vector<int64_t> pairList(const Pair& pair) { return {pair[0], pair[1]}; }
std::string keywordOf(Layout layout) { return layout == Layout::nhwc ? "nhwc" : "nchw"; }

AttributeMap convAttributes(const Conv2dOptions& options) {
  return {{"stride", pairList(options.stride)},
          {"padding", pairList(options.padding)},
          {"dilation", pairList(options.dilation)},
          {"groups", options.groups},
          {"layout", keywordOf(options.layout)}};
}

AttributeMap poolAttributes(const Pool2dOptions& options, bool average) {
  AttributeMap attributes{{"kernel_size", pairList(options.kernel_size)},
                          {"stride", pairList(options.stride.value_or(options.kernel_size))},
                          {"padding", pairList(options.padding)},
                          {"layout", keywordOf(options.layout)}};
  if (options.ceil_mode)
    attributes["ceil_mode"] = true;
  if (average && !options.count_include_pad)
    attributes["exclude_padding"] = true;
  return attributes;
}
} // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Conv2dOptions options) {
  return apply1(ops::conv2d, {input, weight, bias}, convAttributes(options));
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>
batch_norm_with_stats(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, int64_t axis, double momentum, double eps) {
  std::vector<Tensor> results =
      apply(ops::batch_norm, {input, weight, bias, running_mean, running_var},
            {{"axis", normalizeAxis("jit.batch_norm", input, axis)}, {"eps", eps}, {"momentum", momentum}});
  return {results[0], results[1], results[2], results[3], results[4]};
}

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  if (input.dim() < 2)
    throw Error("jit.batch_norm: operand 'input' " + detail::describe(input) +
                " must have rank >= 2 (a batch and channels)");
  if (!training) {
    if (!running_mean.defined() || !running_var.defined())
      throw Error("jit.batch_norm_inference: evaluation mode needs running_mean and running_var");
    return apply1(ops::batch_norm_inference, {input, weight, bias, running_mean, running_var},
                  {{"axis", int64_t(1)}, {"eps", eps}});
  }
  if (running_mean.defined() != running_var.defined())
    throw Error("jit.batch_norm: give both running_mean and running_var, or neither");
  // Without running statistics (track_running_stats=False) the op still
  // needs operands for them; their updated values are dropped.
  DType statistics = input.dtype() == f64 ? f64 : f32;
  Shape channel{input.shape()[1]};
  Tensor mean = running_mean.defined() ? running_mean : zeros(channel, statistics);
  Tensor var = running_var.defined() ? running_var : ones(channel, statistics);
  auto [output, saveMean, saveInvstd, newMean, newVar] =
      batch_norm_with_stats(input, weight, bias, mean, var, 1, momentum, eps);
  if (running_mean.defined()) {
    NoGradGuard noGrad;
    Tensor(running_mean).copy_(newMean);
    Tensor(running_var).copy_(newVar);
  }
  return output;
}

Tensor max_pool2d(const Tensor& input, Pool2dOptions options) {
  return apply1(ops::max_pool2d, {input}, poolAttributes(options, false));
}

Tensor avg_pool2d(const Tensor& input, Pool2dOptions options) {
  return apply1(ops::avg_pool2d, {input}, poolAttributes(options, true));
}

Tensor adaptive_avg_pool2d(const Tensor& input, Pair output_size) {
  if (output_size != Pair{1, 1})
    throw Error("adaptive_avg_pool2d: only output_size {1, 1} (global average pooling) is supported, got {" +
                std::to_string(output_size[0]) + ", " + std::to_string(output_size[1]) + "}");
  if (input.dim() != 4)
    throw Error("adaptive_avg_pool2d: operand 'input' " + detail::describe(input) + " must be NCHW (rank 4)");
  return mean(input, {2, 3}, true);
}

// --- losses ---------------------------------------------------------------------------------------
namespace {
AttributeMap lossAttributes(Reduction reduction, std::optional<int64_t> ignoreIndex = std::nullopt,
                            std::optional<double> labelSmoothing = std::nullopt) {
  AttributeMap attributes{{"reduction", keywordOf(reduction)}};
  if (ignoreIndex)
    attributes["ignore_index"] = *ignoreIndex;
  if (labelSmoothing)
    attributes["label_smoothing"] = *labelSmoothing;
  return attributes;
}
} // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, MseLossOptions options, std::source_location where) {
  detail::UserFrame frame(where);
  return apply1(ops::mse_loss, {input, target}, lossAttributes(options.reduction));
}
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, CrossEntropyOptions options,
                     std::source_location where) {
  detail::UserFrame frame(where);
  return apply1(ops::cross_entropy, {logits, labels},
                lossAttributes(options.reduction, options.ignore_index, options.label_smoothing));
}
Tensor nll_loss(const Tensor& log_probs, const Tensor& labels, NllLossOptions options, std::source_location where) {
  detail::UserFrame frame(where);
  return apply1(ops::nll_loss, {log_probs, labels}, lossAttributes(options.reduction, options.ignore_index));
}

// --- backward ops ---------------------------------------------------------------------------------
Tensor relu_grad(const Tensor& grad_output, const Tensor& output) {
  return apply1(ops::relu_grad, {grad_output, output});
}
Tensor gelu_grad(const Tensor& grad_output, const Tensor& input, GeluApproximate approximate) {
  return apply1(ops::gelu_grad, {grad_output, input}, {{"approximate", keywordOf(approximate)}});
}
Tensor softmax_grad(const Tensor& grad_output, const Tensor& output, int64_t axis) {
  return apply1(ops::softmax_grad, {grad_output, output},
                {{"axis", normalizeAxis("jit.softmax_grad", output, axis)}});
}
Tensor log_softmax_grad(const Tensor& grad_output, const Tensor& output, int64_t axis) {
  return apply1(ops::log_softmax_grad, {grad_output, output},
                {{"axis", normalizeAxis("jit.log_softmax_grad", output, axis)}});
}
std::tuple<Tensor, Tensor, Tensor> layer_norm_grad(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                                   int64_t axis) {
  std::vector<Tensor> results = apply(ops::layer_norm_grad, {grad_output, input, mean, rstd, weight},
                                      {{"axis", normalizeAxis("jit.layer_norm_grad", input, axis)}});
  return {results[0], results[1], results[2]};
}
Tensor mse_loss_grad(const Tensor& grad_output, const Tensor& input, const Tensor& target, MseLossOptions options) {
  return apply1(ops::mse_loss_grad, {grad_output, input, target}, lossAttributes(options.reduction));
}
Tensor cross_entropy_grad(const Tensor& grad_output, const Tensor& logits, const Tensor& labels,
                          CrossEntropyOptions options) {
  return apply1(ops::cross_entropy_grad, {grad_output, logits, labels},
                lossAttributes(options.reduction, options.ignore_index, options.label_smoothing));
}
Tensor nll_loss_grad(const Tensor& grad_output, const Tensor& log_probs, const Tensor& labels,
                     NllLossOptions options) {
  return apply1(ops::nll_loss_grad, {grad_output, log_probs, labels},
                lossAttributes(options.reduction, options.ignore_index));
}

int64_t detail::paddingRow(const std::string& who, int64_t paddingIdx, int64_t rows) {
  int64_t padding = paddingIdx < 0 ? paddingIdx + rows : paddingIdx;
  if (padding < 0 || padding >= rows)
    throw Error(who + ": padding_idx " + std::to_string(paddingIdx) + " is not a row of a table of " +
                std::to_string(rows) + " rows");
  return padding;
}

namespace {
AttributeMap embeddingAttributes(const char* opName, std::optional<int64_t> paddingIdx, int64_t rows) {
  AttributeMap attributes;
  if (paddingIdx)
    attributes.emplace("padding_idx", detail::paddingRow(opName, *paddingIdx, rows));
  return attributes;
}
} // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx,
                 std::source_location where) {
  detail::UserFrame frame(where);
  int64_t rows = weight.defined() && weight.dim() == 2 ? weight.shape()[0] : 0;
  return apply1(ops::embedding, {indices, weight},
                padding_idx && rows > 0 ? embeddingAttributes("jit.embedding", padding_idx, rows) : AttributeMap());
}
Tensor embedding_grad(const Tensor& grad_output, const Tensor& indices, int64_t num_weights,
                      std::optional<int64_t> padding_idx) {
  AttributeMap attributes = embeddingAttributes("jit.embedding_grad", padding_idx, num_weights);
  attributes.emplace("num_weights", num_weights);
  return apply1(ops::embedding_grad, {grad_output, indices}, std::move(attributes));
}

Tensor conv2d_grad_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_shape,
                         Conv2dOptions options) {
  return apply1(ops::conv2d_grad_input, {grad_output, weight}, convAttributes(options),
                RequestedResult{.shape = input_shape});
}
Tensor conv2d_grad_weight(const Tensor& grad_output, const Tensor& input, const Shape& weight_shape,
                          Conv2dOptions options) {
  return apply1(ops::conv2d_grad_weight, {grad_output, input}, convAttributes(options),
                RequestedResult{.shape = weight_shape});
}
std::tuple<Tensor, Tensor, Tensor> batch_norm_grad(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& save_mean, const Tensor& save_invstd,
                                                   const Tensor& weight, int64_t axis) {
  std::vector<Tensor> results = apply(ops::batch_norm_grad, {grad_output, input, save_mean, save_invstd, weight},
                                      {{"axis", normalizeAxis("jit.batch_norm_grad", input, axis)}});
  return {results[0], results[1], results[2]};
}
Tensor max_pool2d_grad(const Tensor& grad_output, const Tensor& input, Pool2dOptions options) {
  return apply1(ops::max_pool2d_grad, {grad_output, input}, poolAttributes(options, false));
}
Tensor avg_pool2d_grad(const Tensor& grad_output, const Tensor& input, Pool2dOptions options) {
  return apply1(ops::avg_pool2d_grad, {grad_output, input}, poolAttributes(options, true));
}

Tensor sum_to_shape(const Tensor& grad, const Shape& shape) {
  const Shape& from = grad.shape();
  if (from == shape)
    return grad;
  if (!ampjit::runtime::broadcastsTo(shape, from))
    throw Error("sum_to_shape: " + ampjit::runtime::shapeToString(shape) + " does not broadcast to " +
                detail::describe(grad));
  // Leading dimensions the shape lacks are summed away; dimensions it has as
  // 1 are summed keeping them. A bias's gradient is then one jit.sum.
  size_t lead = from.size() - shape.size();
  std::vector<int64_t> leading, kept;
  for (size_t d = 0; d < from.size(); ++d) {
    if (d < lead)
      leading.push_back(int64_t(d));
    else if (shape[d - lead] == 1 && from[d] != 1)
      kept.push_back(int64_t(d - lead));
  }
  Tensor reduced = leading.empty() ? grad : sum(grad, leading, false);
  if (!kept.empty())
    reduced = sum(reduced, kept, true);
  return reduced.shape() == shape ? reduced : reshape(reduced, shape);
}

} // namespace jit
