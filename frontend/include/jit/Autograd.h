#ifndef JIT_AUTOGRAD_H
#define JIT_AUTOGRAD_H

// Grad mode. While it is on (the default), every op with an operand that
// requires grad records a node of the autograd tape holding its VJP rule;
// Tensor::backward runs the rules (with grad mode off, so backward itself
// records nothing and higher-order gradients are not supported).
// autograd::function adds a node whose rule the user writes.

#include "jit/Tensor.h"

#include <functional>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

namespace jit {

/// Whether ops record autograd history on this thread.
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

/// Turns grad mode off for its scope (torch.no_grad), restoring it after.
class NoGradGuard {
public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

private:
  bool previous_;
};

namespace autograd {

/// What a function's backward receives.
struct FunctionContext {
  std::vector<Tensor> inputs;        ///< the forward's inputs, detached (undefined where none was given)
  std::vector<Tensor> outputs;       ///< its results, detached
  std::vector<Tensor> grad_outputs;  ///< one per result; zeros where no gradient flowed
  std::vector<bool> needs_input_grad;
};

using ForwardFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;
/// One gradient per input, of that input's type; undefined where none flows.
using BackwardFunction = std::function<std::vector<Tensor>(const FunctionContext& context)>;

/// How a function meets autocast: PyTorch's torch.amp.custom_fwd and
/// custom_bwd decorators.
struct FunctionOptions {
  /// custom_fwd(cast_inputs=...): where autocast is on (eagerly, and in every
  /// traced step with AMP options, whose pass stands in for it), the
  /// floating-point inputs are converted to this type and forward and
  /// backward run with AMP off, as inside autocast(false): a function that
  /// needs fp32 keeps it at every level, one whose kernel takes only f16
  /// gets f16 whatever the AMP type. FunctionContext::inputs holds the
  /// converted inputs; the gradients backward returns go back to the inputs'
  /// types.
  std::optional<DType> cast_inputs{};
  /// custom_bwd: backward runs under the autocast state forward ran under,
  /// so its matmuls lower as the forward's did. Without it backward runs
  /// with autocast off (as PyTorch's does), its ops in the types of the
  /// values they read. With cast_inputs, AMP stays off either way.
  bool autocast_backward = false;
};

/// torch.autograd.Function: runs `forward` on the detached inputs with grad
/// mode off and, when an input requires grad, gives its results one history
/// node whose gradient rule is `backward` (a straight-through estimator, a
/// gradient reversal, a custom clip). Both are written with jit ops, so a
/// traced step records them like any others and computes them in the types
/// eager autocast would (FunctionOptions). Each gradient backward returns in
/// another floating-point type than its input's is converted to the input's,
/// as PyTorch's autograd engine does. `name` appears in grad_fn_name() and
/// in errors.
std::vector<Tensor> function(const std::string& name, const std::vector<Tensor>& inputs, const ForwardFunction& forward,
                             BackwardFunction backward, FunctionOptions options = {},
                             std::source_location where = std::source_location::current());

} // namespace autograd

} // namespace jit

#endif // JIT_AUTOGRAD_H
