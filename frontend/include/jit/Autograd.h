#ifndef JIT_AUTOGRAD_H
#define JIT_AUTOGRAD_H

// Grad mode. While it is on (the default), every op with an operand that
// requires grad records a node of the autograd tape holding its VJP rule;
// Tensor::backward runs the rules (with grad mode off, so backward itself
// records nothing and higher-order gradients are not supported).

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

} // namespace jit

#endif // JIT_AUTOGRAD_H
