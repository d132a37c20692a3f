#ifndef JIT_OPTIM_H
#define JIT_OPTIM_H

// jit::optim: PyTorch's SGD, Adam and AdamW (AMSGrad too), RMSprop and
// Adagrad, learning-rate schedules and clip_grad_norm_. SGD and Adam update
// each parameter with one fused op (jit.sgd_update / jit.adam_update);
// RMSprop and Adagrad with elementwise ops. Either way the results replace
// the parameter and its buffers in place, so a traced step records the same ops. The learning
// rate and each parameter's step count are state tensors (DESIGN principle
// 3): a traced step reads them, and a schedule writes the lr tensor between
// steps without retracing.

#include "jit/Tensor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace jit {
namespace optim {
class LRScheduler;
class ReduceLROnPlateau;
class ParameterAverage;
}
namespace detail {
struct SavedState;
SavedState savedStateOf(optim::LRScheduler& scheduler);
SavedState savedStateOf(optim::ReduceLROnPlateau& scheduler);
SavedState savedStateOf(optim::ParameterAverage& average);
} // namespace detail

// --- the fused update ops (JitOps.td describes them exactly) ------------------

struct SgdUpdateOptions {
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};
/// jit.sgd_update. `momentum_buffer` is given exactly when momentum != 0;
/// `step` (i64[]), `inv_scale` (f32[]) and `predicate` (i1[]) may be
/// undefined. Returns {new_param, new_momentum_buffer (undefined without one)}.
std::pair<Tensor, Tensor> sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                                     const Tensor& step, const Tensor& lr, const SgdUpdateOptions& options,
                                     const Tensor& inv_scale = {}, const Tensor& predicate = {});

struct AdamUpdateOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false; ///< AdamW
  bool maximize = false;
};
/// jit.adam_update; `step` counts the updates before this one. Returns
/// {new_param, new_exp_avg, new_exp_avg_sq}.
std::tuple<Tensor, Tensor, Tensor> adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                               const Tensor& exp_avg_sq, const Tensor& step, const Tensor& lr,
                                               const AdamUpdateOptions& options, const Tensor& inv_scale = {},
                                               const Tensor& predicate = {});
/// AMSGrad: jit.adam_update with `max_exp_avg_sq`, the running maximum of
/// exp_avg_sq that the denominator reads. Returns {new_param, new_exp_avg,
/// new_exp_avg_sq, new_max_exp_avg_sq}.
std::tuple<Tensor, Tensor, Tensor, Tensor> adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                                       const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                                                       const Tensor& step, const Tensor& lr,
                                                       const AdamUpdateOptions& options, const Tensor& inv_scale = {},
                                                       const Tensor& predicate = {});

/// Scales the gradients of `params` so their joint norm is at most
/// `max_norm` and returns that norm before clipping (torch.nn.utils.
/// clip_grad_norm_: coefficient max_norm / (norm + 1e-6), clamped to 1).
/// `norm_type` is 2 or infinity. The norm is an f32 tensor (f64 when a
/// gradient is f64); gradients of f16/bf16 are summed in f32.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       std::source_location where = std::source_location::current());
/// Clamps every gradient of `params` into [-clip_value, clip_value] in place
/// (torch.nn.utils.clip_grad_value_); NaNs stay NaN. Under a loss scaler,
/// unscale_ first, as with clip_grad_norm_.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value,
                      std::source_location where = std::source_location::current());

namespace optim {

/// The base of every optimizer. Parameters come in groups (PyTorch's
/// param_groups), each with its own lr tensor and option values; an
/// optimizer over a plain parameter list has one group.
class Optimizer {
public:
  /// `groups[g]` are group g's parameters, `lrs[g]` its initial lr.
  Optimizer(std::vector<std::vector<Tensor>> groups, std::vector<double> lrs);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Every parameter, group by group.
  const std::vector<Tensor>& parameters() const { return params_; }
  size_t group_count() const { return lrs_.size(); }
  /// The group parameter i (an index into parameters()) belongs to.
  size_t group_of(size_t i) const { return groupOf_.at(i); }
  /// Drops (or zeroes) every parameter's gradient.
  void zero_grad(bool set_to_none = true, std::source_location where = std::source_location::current());

  /// One update of every parameter that has a gradient.
  void step(std::source_location where = std::source_location::current()) { step(Tensor(), Tensor(), where); }
  /// The loss scaler's form: gradients are multiplied by `inv_scale` as they
  /// are read, and with `predicate` false nothing changes (parameters,
  /// buffers and step counts stay bit-identical). Either may be undefined.
  void step(const Tensor& inv_scale, const Tensor& predicate, std::source_location where = std::source_location::current());

  /// A group's learning rate, an f32[] state tensor.
  const Tensor& lr(size_t group = 0) const { return lrs_.at(group); }
  /// Writes every group's lr tensor (in place: a traced step sees the new value).
  void set_lr(double lr);
  /// Writes one group's lr tensor.
  void set_lr(size_t group, double lr);
  /// A group's lr given at construction (schedules' base_lr).
  double initial_lr(size_t group = 0) const { return initialLrs_.at(group); }
  /// Parameter i's update count (i64[]; PyTorch's state['step']). Kept only
  /// by optimizers whose update reads it (counts_steps()); otherwise 0.
  const Tensor& step_count(size_t i) const { return steps_.at(i); }

  /// "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "RAdam", "NAdam", ...
  virtual const char* name() const = 0;
  /// The state a checkpoint saves: "lr" (with more groups, "lr.1", ... for
  /// the others), then per parameter i (in parameters() order) "<i>.step" and
  /// its buffers ("<i>.momentum_buffer", "<i>.exp_avg", "<i>.exp_avg_sq",
  /// "<i>.max_exp_avg_sq" with AMSGrad).
  /// The tensors themselves: writing them writes the optimizer's state.
  std::vector<NamedTensor> state_dict() const;
  /// The constructor's settings (momentum, betas, eps, ...; lr is state):
  /// "groups", group 0's under their names, group g's as "group<g>.<name>".
  std::vector<std::pair<std::string, double>> hyperparameters() const;
  /// Writes state_dict() and the settings to `path` (the state file format;
  /// jit::Checkpoint puts several objects in one file).
  void save(const std::string& path) const;
  /// Reads a file save() wrote into this optimizer's state, in place, so a
  /// traced step that uses it continues from the file. The file must come
  /// from the same class over parameters of the same shapes and dtypes, with
  /// the same groups and settings (a traced step compiles them in, so a load
  /// does not change them); it is checked completely before any tensor changes.
  void load(const std::string& path);

protected:
  /// Runs at the start of step(), before any update(), for what a step
  /// computes over every gradient at once (LAMB's global gradient norm).
  virtual void prepare_step(const Tensor& /*inv_scale*/) {}
  /// Updates parameter i in place with its gradient `grad`.
  virtual void update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) = 0;
  /// Whether step() advances parameter i's step count (state a traced step carries).
  virtual bool counts_steps(size_t) const { return true; }
  /// Group g's settings, named as for a single group.
  virtual std::vector<std::pair<std::string, double>> group_hyperparameters(size_t group) const = 0;
  /// Rebinds state to its updated value (every handle sees it).
  static void assign(Tensor& state, const Tensor& value);
  /// `updated`, or `old` bit for bit where the scaler's `predicate` is false
  /// (`updated` when there is no predicate).
  static Tensor predicated(const Tensor& predicate, const Tensor& updated, const Tensor& old);
  /// Parameter i's buffers, as state_dict() names them.
  virtual void collect_buffers(size_t i, std::vector<NamedTensor>& out) const = 0;
  /// Names the state for traced steps' plans and messages after state_dict():
  /// "3.exp_avg" becomes "<parameter 3's name>.exp_avg", "lr.1"
  /// "param_groups.1.lr". Each optimizer calls it once its buffers exist.
  void name_state_for_traces();

  std::vector<Tensor> params_;
  std::vector<size_t> groupOf_;
  std::vector<Tensor> steps_;

private:
  std::vector<Tensor> lrs_;
  std::vector<double> initialLrs_;
};

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};
/// A parameter group: its parameters and the options it sets for itself
/// (unset ones are the optimizer's), as a PyTorch param_groups entry.
struct SGDGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{};
  std::optional<double> momentum{};
  std::optional<double> dampening{};
  std::optional<double> weight_decay{};
  std::optional<bool> nesterov{};
  std::optional<bool> maximize{};
};

class SGD : public Optimizer {
public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  /// Parameter groups over `defaults`: `SGD({{.params = decay, .weight_decay = 1e-4},
  /// {.params = biases}}, {.lr = 0.1, .momentum = 0.9})`.
  SGD(std::vector<SGDGroup> groups, SGDOptions defaults);
  /// Group `group`'s options (its own where set, else the defaults).
  const SGDOptions& options(size_t group = 0) const { return groupOptions_.at(group); }
  /// Parameter i's momentum buffer (undefined when its group's momentum is 0).
  const Tensor& momentum_buffer(size_t i) const { return buffers_.at(i); }
  const char* name() const override { return "SGD"; }

protected:
  void update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) override;
  bool counts_steps(size_t i) const override;
  std::vector<std::pair<std::string, double>> group_hyperparameters(size_t group) const override;
  void collect_buffers(size_t i, std::vector<NamedTensor>& out) const override;

private:
  std::vector<SGDOptions> groupOptions_;
  std::vector<Tensor> buffers_;
};

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  /// AMSGrad: the denominator reads the running maximum of exp_avg_sq, a
  /// third buffer per parameter ("<i>.max_exp_avg_sq" in state_dict()).
  bool amsgrad = false;
  bool maximize = false;
};
/// AdamW's weight_decay defaults to 1e-2, as PyTorch's does.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

/// A parameter group of Adam or AdamW (see SGDGroup).
struct AdamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{};
  std::optional<std::pair<double, double>> betas{};
  std::optional<double> eps{};
  std::optional<double> weight_decay{};
  std::optional<bool> amsgrad{};
  std::optional<bool> maximize{};
};

class Adam : public Optimizer {
public:
  Adam(std::vector<Tensor> params, AdamOptions options);
  Adam(std::vector<AdamGroup> groups, AdamOptions defaults);
  const Tensor& exp_avg(size_t i) const { return expAvg_.at(i); }
  const Tensor& exp_avg_sq(size_t i) const { return expAvgSq_.at(i); }
  /// AMSGrad's running maximum of exp_avg_sq; undefined unless parameter i's
  /// group has amsgrad.
  const Tensor& max_exp_avg_sq(size_t i) const { return maxExpAvgSq_.at(i); }
  const char* name() const override { return decoupled_ ? "AdamW" : "Adam"; }

protected:
  /// AdamW's constructor: the same state, decoupled weight decay.
  Adam(std::vector<AdamGroup> groups, const AdamOptions& defaults, bool decoupled);
  void update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) override;
  std::vector<std::pair<std::string, double>> group_hyperparameters(size_t group) const override;
  void collect_buffers(size_t i, std::vector<NamedTensor>& out) const override;

private:
  bool decoupled_;
  std::vector<AdamUpdateOptions> groupUpdates_;
  std::vector<bool> groupAmsgrad_;
  std::vector<Tensor> expAvg_, expAvgSq_, maxExpAvgSq_;
};

class AdamW : public Adam {
public:
  AdamW(std::vector<Tensor> params, AdamWOptions options);
  AdamW(std::vector<AdamGroup> groups, AdamWOptions defaults);
};

// RMSprop, Adagrad, RAdam, NAdam and Adamax are written with the public elementwise ops (no fused
// op of their own): a traced step compiles them into fused elementwise
// kernels on every backend. Under a loss scaler the gradient is unscaled in
// fp32 as it is read, and a false predicate selects every old value, bit for
// bit, as the fused updates do.

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  /// Divides by the variance estimate sqrt(square_avg - grad_avg^2).
  bool centered = false;
  bool maximize = false;
};
/// A parameter group of RMSprop (see SGDGroup).
struct RMSpropGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{};
  std::optional<double> alpha{};
  std::optional<double> eps{};
  std::optional<double> weight_decay{};
  std::optional<double> momentum{};
  std::optional<bool> centered{};
  std::optional<bool> maximize{};
};

/// torch.optim.RMSprop. state_dict() names its buffers as PyTorch does:
/// "<i>.square_avg", "<i>.momentum_buffer" (momentum > 0), "<i>.grad_avg"
/// (centered).
class RMSprop : public Optimizer {
public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options);
  RMSprop(std::vector<RMSpropGroup> groups, RMSpropOptions defaults);
  const RMSpropOptions& options(size_t group = 0) const { return groupOptions_.at(group); }
  const Tensor& square_avg(size_t i) const { return squareAvg_.at(i); }
  /// Undefined unless parameter i's group has momentum > 0.
  const Tensor& momentum_buffer(size_t i) const { return momentumBuffer_.at(i); }
  /// Undefined unless parameter i's group is centered.
  const Tensor& grad_avg(size_t i) const { return gradAvg_.at(i); }
  const char* name() const override { return "RMSprop"; }

protected:
  void update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) override;
  /// The update never reads the count (PyTorch's only serves capturable mode).
  bool counts_steps(size_t) const override { return false; }
  std::vector<std::pair<std::string, double>> group_hyperparameters(size_t group) const override;
  void collect_buffers(size_t i, std::vector<NamedTensor>& out) const override;

private:
  std::vector<RMSpropOptions> groupOptions_;
  std::vector<Tensor> squareAvg_, momentumBuffer_, gradAvg_;
};

struct AdagradOptions {
  double lr = 1e-2;
  /// The lr of update t (from 0) is lr / (1 + t * lr_decay).
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  bool maximize = false;
};
/// A parameter group of Adagrad (see SGDGroup).
struct AdagradGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{};
  std::optional<double> lr_decay{};
  std::optional<double> weight_decay{};
  std::optional<double> initial_accumulator_value{};
  std::optional<double> eps{};
  std::optional<bool> maximize{};
};

/// torch.optim.Adagrad. state_dict() names its accumulator "<i>.sum", as
/// PyTorch does.
class Adagrad : public Optimizer {
public:
  Adagrad(std::vector<Tensor> params, AdagradOptions options);
  Adagrad(std::vector<AdagradGroup> groups, AdagradOptions defaults);
  const AdagradOptions& options(size_t group = 0) const { return groupOptions_.at(group); }
  /// The running sum of squared gradients.
  const Tensor& state_sum(size_t i) const { return stateSum_.at(i); }
  const char* name() const override { return "Adagrad"; }

protected:
  void update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) override;
  /// Only lr_decay reads the count.
  bool counts_steps(size_t i) const override;
  std::vector<std::pair<std::string, double>> group_hyperparameters(size_t group) const override;
  void collect_buffers(size_t i, std::vector<NamedTensor>& out) const override;

private:
  std::vector<AdagradOptions> groupOptions_;
  std::vector<Tensor> stateSum_;
};

struct RAdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  /// AdamW's decay, param *= 1 - lr * weight_decay, instead of the L2 term
  /// added to the gradient.
  bool decoupled_weight_decay = false;
  bool maximize = false;
};
/// A parameter group of RAdam (see SGDGroup).
struct RAdamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{};
  std::optional<std::pair<double, double>> betas{};
  std::optional<double> eps{};
  std::optional<double> weight_decay{};
  std::optional<bool> decoupled_weight_decay{};
  std::optional<bool> maximize{};
};

/// torch.optim.RAdam (Liu et al., "On the Variance of the Adaptive Learning
/// Rate"): Adam's moments, with the adaptive step rectified by the variance
/// of its estimate, and plain bias-corrected momentum while that variance is
/// intractable (rho_t <= 5, the first updates). state_dict() names its
/// buffers "<i>.exp_avg" and "<i>.exp_avg_sq", as PyTorch does.
class RAdam : public Optimizer {
public:
  RAdam(std::vector<Tensor> params, RAdamOptions options);
  RAdam(std::vector<RAdamGroup> groups, RAdamOptions defaults);
  const RAdamOptions& options(size_t group = 0) const { return groupOptions_.at(group); }
  const Tensor& exp_avg(size_t i) const { return expAvg_.at(i); }
  const Tensor& exp_avg_sq(size_t i) const { return expAvgSq_.at(i); }
  const char* name() const override { return "RAdam"; }

protected:
  void update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) override;
  std::vector<std::pair<std::string, double>> group_hyperparameters(size_t group) const override;
  void collect_buffers(size_t i, std::vector<NamedTensor>& out) const override;

private:
  std::vector<RAdamOptions> groupOptions_;
  std::vector<Tensor> expAvg_, expAvgSq_;
};

struct NAdamOptions {
  double lr = 2e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  /// psi: the momentum of update t is beta1 * (1 - 0.5 * 0.96^(t * psi)).
  double momentum_decay = 4e-3;
  /// AdamW's decay (NAdamW), param *= 1 - lr * weight_decay, instead of the
  /// L2 term added to the gradient.
  bool decoupled_weight_decay = false;
  bool maximize = false;
};
/// A parameter group of NAdam (see SGDGroup).
struct NAdamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{};
  std::optional<std::pair<double, double>> betas{};
  std::optional<double> eps{};
  std::optional<double> weight_decay{};
  std::optional<double> momentum_decay{};
  std::optional<bool> decoupled_weight_decay{};
  std::optional<bool> maximize{};
};

/// torch.optim.NAdam (Dozat, "Incorporating Nesterov Momentum into Adam"):
/// Adam with Nesterov momentum under a warming momentum schedule.
/// state_dict() names its buffers as PyTorch does: "<i>.mu_product" (the
/// product of the momenta so far, a scalar; f64 for an f64 parameter, else
/// f32, as PyTorch's default scalar dtype), "<i>.exp_avg", "<i>.exp_avg_sq".
class NAdam : public Optimizer {
public:
  NAdam(std::vector<Tensor> params, NAdamOptions options);
  NAdam(std::vector<NAdamGroup> groups, NAdamOptions defaults);
  const NAdamOptions& options(size_t group = 0) const { return groupOptions_.at(group); }
  const Tensor& mu_product(size_t i) const { return muProduct_.at(i); }
  const Tensor& exp_avg(size_t i) const { return expAvg_.at(i); }
  const Tensor& exp_avg_sq(size_t i) const { return expAvgSq_.at(i); }
  const char* name() const override { return "NAdam"; }

protected:
  void update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) override;
  std::vector<std::pair<std::string, double>> group_hyperparameters(size_t group) const override;
  void collect_buffers(size_t i, std::vector<NamedTensor>& out) const override;

private:
  std::vector<NAdamOptions> groupOptions_;
  std::vector<Tensor> muProduct_, expAvg_, expAvgSq_;
};

struct AdamaxOptions {
  double lr = 2e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool maximize = false;
};
/// A parameter group of Adamax (see SGDGroup).
struct AdamaxGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{};
  std::optional<std::pair<double, double>> betas{};
  std::optional<double> eps{};
  std::optional<double> weight_decay{};
  std::optional<bool> maximize{};
};

/// torch.optim.Adamax (Kingma and Ba, section 7.1): Adam with the infinity
/// norm in place of the second moment, exp_inf = max(beta2 * exp_inf,
/// |grad| + eps), a NaN in either side propagating as torch.maximum's does.
/// state_dict() names its buffers "<i>.exp_avg" and "<i>.exp_inf", as PyTorch
/// does.
class Adamax : public Optimizer {
public:
  Adamax(std::vector<Tensor> params, AdamaxOptions options);
  Adamax(std::vector<AdamaxGroup> groups, AdamaxOptions defaults);
  const AdamaxOptions& options(size_t group = 0) const { return groupOptions_.at(group); }
  const Tensor& exp_avg(size_t i) const { return expAvg_.at(i); }
  const Tensor& exp_inf(size_t i) const { return expInf_.at(i); }
  const char* name() const override { return "Adamax"; }

protected:
  void update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) override;
  std::vector<std::pair<std::string, double>> group_hyperparameters(size_t group) const override;
  void collect_buffers(size_t i, std::vector<NamedTensor>& out) const override;

private:
  std::vector<AdamaxOptions> groupOptions_;
  std::vector<Tensor> expAvg_, expInf_;
};

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0.0;
  bool maximize = false;
};
/// A parameter group of Adadelta (see SGDGroup).
struct AdadeltaGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{};
  std::optional<double> rho{};
  std::optional<double> eps{};
  std::optional<double> weight_decay{};
  std::optional<bool> maximize{};
};

/// torch.optim.Adadelta (Zeiler, "ADADELTA: An Adaptive Learning Rate
/// Method"): square_avg = rho * square_avg + (1 - rho) g^2, delta =
/// sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g, acc_delta = rho *
/// acc_delta + (1 - rho) delta^2, param -= lr * delta. state_dict() names
/// its buffers "<i>.square_avg" and "<i>.acc_delta", as PyTorch does.
class Adadelta : public Optimizer {
public:
  Adadelta(std::vector<Tensor> params, AdadeltaOptions options);
  Adadelta(std::vector<AdadeltaGroup> groups, AdadeltaOptions defaults);
  const AdadeltaOptions& options(size_t group = 0) const { return groupOptions_.at(group); }
  const Tensor& square_avg(size_t i) const { return squareAvg_.at(i); }
  const Tensor& acc_delta(size_t i) const { return accDelta_.at(i); }
  const char* name() const override { return "Adadelta"; }

protected:
  void update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) override;
  bool counts_steps(size_t) const override { return false; }
  std::vector<std::pair<std::string, double>> group_hyperparameters(size_t group) const override;
  void collect_buffers(size_t i, std::vector<NamedTensor>& out) const override;

private:
  std::vector<AdadeltaOptions> groupOptions_;
  std::vector<Tensor> squareAvg_, accDelta_;
};

struct AdafactorOptions {
  double lr = 1e-2;
  /// 1 - beta2 at step t is t^beta2_decay (<= 0).
  double beta2_decay = -0.8;
  /// eps1 keeps the variance estimate and its row mean from 0 (unset: the
  /// parameter dtype's machine epsilon); eps2 is the least RMS a parameter's
  /// step is scaled by.
  std::pair<std::optional<double>, double> eps = {std::nullopt, 1e-3};
  /// The clipping threshold of the update's RMS (>= 1).
  double d = 1.0;
  /// Decoupled: param *= 1 - lr * weight_decay.
  double weight_decay = 0.0;
  bool maximize = false;
};
/// A parameter group of Adafactor (see SGDGroup).
struct AdafactorGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{};
  std::optional<double> beta2_decay{};
  std::optional<std::pair<std::optional<double>, double>> eps{};
  std::optional<double> d{};
  std::optional<double> weight_decay{};
  std::optional<bool> maximize{};
};

/// torch.optim.Adafactor (Shazeer and Stern, "Adafactor: Adaptive Learning
/// Rates with Sublinear Memory Cost"): for a parameter of rank >= 2 the
/// second moment is kept factored over its last two dimensions, a row
/// average (shape [..., rows, 1]) and a column average ([..., 1, cols]) of
/// g^2, so a [n, m] weight keeps n + m numbers, not n * m; the estimate is
/// row_var * col_var / max(mean(row_var), eps1). A vector keeps the full
/// average. The step is the update g / sqrt(max(estimate, eps1^2)), clipped
/// to an RMS of d, times max(eps2, RMS(param)) * min(lr, 1/sqrt(t)).
/// state_dict() names the buffers "<i>.row_var" and "<i>.col_var", or
/// "<i>.variance", as PyTorch does.
class Adafactor : public Optimizer {
public:
  Adafactor(std::vector<Tensor> params, AdafactorOptions options);
  Adafactor(std::vector<AdafactorGroup> groups, AdafactorOptions defaults);
  const AdafactorOptions& options(size_t group = 0) const { return groupOptions_.at(group); }
  /// Parameter i's factored averages (undefined for a vector) and full
  /// average (undefined for rank >= 2).
  const Tensor& row_var(size_t i) const { return rowVar_.at(i); }
  const Tensor& col_var(size_t i) const { return colVar_.at(i); }
  const Tensor& variance(size_t i) const { return variance_.at(i); }
  const char* name() const override { return "Adafactor"; }

protected:
  void update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) override;
  std::vector<std::pair<std::string, double>> group_hyperparameters(size_t group) const override;
  void collect_buffers(size_t i, std::vector<NamedTensor>& out) const override;

private:
  std::vector<AdafactorOptions> groupOptions_;
  std::vector<Tensor> rowVar_, colVar_, variance_;
};

struct LAMBOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-6;
  double weight_decay = 0.01;
  /// Divide the moments by 1 - beta^step.
  bool bias_correction = true;
  /// exp_avg takes (1 - beta1) * grad; without it, grad itself.
  bool grad_averaging = true;
  /// Weight decay added to the update (AdamW's); without it, L2 added to the
  /// gradient. The same for every group, as in apex.
  bool adam_w_mode = true;
  /// Before the update, every gradient is divided by global_norm /
  /// max_grad_norm where the L2 norm of all gradients together exceeds it;
  /// 0 clips nothing. The same for every group, as in apex.
  double max_grad_norm = 1.0;
  /// The trust ratio scales every parameter's step (NVLAMB); without it,
  /// only those of groups with weight decay. The same for every group.
  bool use_nvlamb = false;
};
/// A parameter group of LAMB (see SGDGroup): the settings apex keeps per group.
struct LAMBGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{};
  std::optional<std::pair<double, double>> betas{};
  std::optional<double> eps{};
  std::optional<double> weight_decay{};
  std::optional<bool> bias_correction{};
  std::optional<bool> grad_averaging{};
};

/// apex's FusedLAMB (You et al., "Large Batch Optimization for Deep Learning",
/// BERT's optimizer): the gradients clipped by their global norm, Adam's
/// moments, update = m_hat / (sqrt(v_hat) + eps) + weight_decay * param, and
/// param -= lr * trust_ratio * update with trust_ratio = ||param|| / ||update||
/// per parameter (1 where either norm is 0). The norms accumulate in f32 (f64
/// for f64 parameters). Steps are counted per parameter, as every optimizer
/// here counts them; apex counts per group, the same when every parameter has
/// a gradient at every step. state_dict() names the buffers "<i>.exp_avg" and
/// "<i>.exp_avg_sq".
class LAMB : public Optimizer {
public:
  LAMB(std::vector<Tensor> params, LAMBOptions options);
  LAMB(std::vector<LAMBGroup> groups, LAMBOptions defaults);
  const LAMBOptions& options(size_t group = 0) const { return groupOptions_.at(group); }
  const Tensor& exp_avg(size_t i) const { return expAvg_.at(i); }
  const Tensor& exp_avg_sq(size_t i) const { return expAvgSq_.at(i); }
  const char* name() const override { return "LAMB"; }

protected:
  void prepare_step(const Tensor& inv_scale) override;
  void update(size_t i, const Tensor& grad, const Tensor& inv_scale, const Tensor& predicate) override;
  std::vector<std::pair<std::string, double>> group_hyperparameters(size_t group) const override;
  void collect_buffers(size_t i, std::vector<NamedTensor>& out) const override;

private:
  std::vector<LAMBOptions> groupOptions_;
  std::vector<Tensor> expAvg_, expAvgSq_;
  /// This step's divisor of every gradient: max(global_norm / max_grad_norm,
  /// 1), in f32 (undefined without clipping); prepare_step() writes it.
  Tensor gradientDivisor_;
};

// --- learning-rate schedules ---------------------------------------------------
// Each writes the optimizer's lr tensor from PyTorch's closed-form formula of
// the epoch counter; construction sets epoch 0 (lr = the schedule at 0), and
// step() advances one epoch.

class LRScheduler {
public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  void step();
  int64_t last_epoch() const { return epoch_; }
  /// A group's lr at the current epoch (each group follows the schedule
  /// from its own initial lr, as in PyTorch).
  double get_last_lr(size_t group = 0) const { return lastLrs_.at(group); }

  /// The lr this schedule gives at `epoch` to a group whose initial lr is
  /// `base_lr` (its closed form; nothing is written).
  double lr_at(int64_t epoch, double base_lr) const { return lrAt(epoch, base_lr); }

  /// "StepLR", "CosineAnnealingLR", "OneCycleLR", ...
  virtual const char* name() const = 0;
  /// base_lr (with more groups also "base_lr.1", ...) and the schedule's own settings.
  std::vector<std::pair<std::string, double>> hyperparameters() const;
  /// The epoch counter, with the settings. A load sets the epoch and
  /// get_last_lr(); the lr tensors are the optimizer's state and load with it.
  /// It requires the same schedule and settings.
  void save(const std::string& path) const;
  void load(const std::string& path);

protected:
  /// Call at the end of a derived constructor: writes the epoch-0 lrs.
  void initialize();
  /// The lr at `epoch` of a group whose initial lr is `base_lr`.
  virtual double lrAt(int64_t epoch, double base_lr) const = 0;
  /// The schedule's own settings (step_size, gamma, ...).
  virtual std::vector<std::pair<std::string, double>> schedule_settings() const = 0;

private:
  friend detail::SavedState detail::savedStateOf(LRScheduler& scheduler);
  friend class ComposedLR;
  /// Writes every group's lr for epoch_.
  void apply();
  /// Every group's lr at `epoch`; throws where the schedule refuses it.
  std::vector<double> lrsAt(int64_t epoch) const;
  /// Writes lastLrs_ into the optimizer's lr tensors.
  void writeLrs();

  Optimizer& optimizer_;
  std::vector<double> baseLrs_;
  int64_t epoch_ = 0;
  std::vector<double> lastLrs_;
};

/// lr = base_lr * gamma^(epoch / step_size).
class StepLR : public LRScheduler {
public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  const char* name() const override { return "StepLR"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  std::vector<std::pair<std::string, double>> schedule_settings() const override;

private:
  int64_t stepSize_;
  double gamma_;
};

/// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2.
class CosineAnnealingLR : public LRScheduler {
public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  const char* name() const override { return "CosineAnnealingLR"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  std::vector<std::pair<std::string, double>> schedule_settings() const override;

private:
  int64_t tMax_;
  double etaMin_;
};

/// PyTorch's CosineAnnealingWarmRestarts, stepped by one: cosine decays
/// from base_lr to eta_min over T_i steps, restarting at base_lr after each;
/// the first lasts T_0 steps and each next one T_mult times the last.
/// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2,
/// T_cur the steps since the last restart.
class CosineAnnealingWarmRestarts : public LRScheduler {
public:
  CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult = 1, double eta_min = 0.0);
  const char* name() const override { return "CosineAnnealingWarmRestarts"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  std::vector<std::pair<std::string, double>> schedule_settings() const override;

private:
  int64_t t0_, tMult_;
  double etaMin_;
};

/// PyTorch's LinearLR as a warmup: lr = base_lr * (start_factor +
/// (end_factor - start_factor) * min(epoch, total_iters) / total_iters).
class LinearWarmup : public LRScheduler {
public:
  LinearWarmup(Optimizer& optimizer, int64_t total_iters, double start_factor = 1.0 / 3.0,
               double end_factor = 1.0);
  const char* name() const override { return "LinearWarmup"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  std::vector<std::pair<std::string, double>> schedule_settings() const override;

private:
  int64_t totalIters_;
  double startFactor_, endFactor_;
};

/// PyTorch's name for LinearWarmup.
using LinearLR = LinearWarmup;

/// PyTorch's ConstantLR: lr = base_lr * factor for the first total_iters
/// epochs, base_lr from then on (PyTorch's closed form, base_lr * (factor +
/// (1 - factor)) there).
class ConstantLR : public LRScheduler {
public:
  ConstantLR(Optimizer& optimizer, double factor = 1.0 / 3.0, int64_t total_iters = 5);
  const char* name() const override { return "ConstantLR"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  std::vector<std::pair<std::string, double>> schedule_settings() const override;

private:
  double factor_;
  int64_t totalIters_;
};

/// lr = base_lr * gamma^(number of milestones <= epoch) (PyTorch's
/// MultiStepLR; a milestone given twice counts twice).
class MultiStepLR : public LRScheduler {
public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  const char* name() const override { return "MultiStepLR"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  std::vector<std::pair<std::string, double>> schedule_settings() const override;

private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

/// lr = base_lr * gamma^epoch.
class ExponentialLR : public LRScheduler {
public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  const char* name() const override { return "ExponentialLR"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  std::vector<std::pair<std::string, double>> schedule_settings() const override;

private:
  double gamma_;
};

/// lr = base_lr * (1 - min(epoch, total_iters) / total_iters)^power.
class PolynomialLR : public LRScheduler {
public:
  PolynomialLR(Optimizer& optimizer, int64_t total_iters = 5, double power = 1.0);
  const char* name() const override { return "PolynomialLR"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  std::vector<std::pair<std::string, double>> schedule_settings() const override;

private:
  int64_t totalIters_;
  double power_;
};

/// OneCycleLR's settings, PyTorch's defaults.
struct OneCycleLROptions {
  /// The peak lr of every group. Unset: each group's own lr as its optimizer
  /// was built (so groups may peak at different lrs).
  std::optional<double> max_lr{};
  /// The cycle's first phase as a fraction of total_steps: the rise from
  /// max_lr / div_factor to max_lr.
  double pct_start = 0.3;
  enum class Anneal { cos, linear };
  Anneal anneal_strategy = Anneal::cos;
  /// initial lr = max_lr / div_factor; the last lr = initial lr / final_div_factor.
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  /// Rise, fall back to the initial lr over as many steps, then anneal to the
  /// last lr (fast.ai's schedule); else rise, then anneal to the last lr.
  bool three_phase = false;
};

/// PyTorch's OneCycleLR with cycle_momentum=False, stepped after every
/// optimizer step: a warmup from max_lr / div_factor to max_lr over
/// pct_start of `total_steps`, then an annealing to max_lr / (div_factor *
/// final_div_factor), each phase by `anneal_strategy`. Stepping past
/// total_steps is an error, as in PyTorch, and leaves the schedule as it was.
/// The lr at step total_steps (after the last step) is the last lr, where
/// PyTorch carries the last phase's curve past its end.
/// Momentum (or Adam's beta1) is not cycled: it is a constant the compiled
/// update is built with, and cycling it would recompile every step.
class OneCycleLR : public LRScheduler {
public:
  OneCycleLR(Optimizer& optimizer, int64_t total_steps, OneCycleLROptions options = {});
  const char* name() const override { return "OneCycleLR"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  std::vector<std::pair<std::string, double>> schedule_settings() const override;

private:
  /// A phase anneals from `from` at the previous phase's end step (the first
  /// phase's: 0) to `to` at `endStep`; fractional, as PyTorch computes it.
  enum class PhaseLr { Initial, Max, Last };
  struct Phase {
    double endStep;
    PhaseLr from, to;
  };
  int64_t totalSteps_;
  OneCycleLROptions options_;
  std::vector<Phase> phases_;
};

/// CyclicLR's settings, PyTorch's defaults.
struct CyclicLROptions {
  /// The epochs of each cycle's rise from base_lr to max_lr (>= 1).
  int64_t step_size_up = 2000;
  /// The epochs of its fall back (>= 0); unset: step_size_up.
  std::optional<int64_t> step_size_down{};
  /// The amplitude's scale: triangular 1; triangular2 halved each cycle
  /// (1 / 2^(cycle - 1)); exp_range gamma^epoch.
  enum class Mode { triangular, triangular2, exp_range };
  Mode mode = Mode::triangular;
  double gamma = 1.0;
  /// A scale of your own in place of mode's, of the cycle (from 1) or, with
  /// ScaleMode::iterations, of the epoch. Not saved, as LambdaLR's function
  /// is not: a resumed run passes the same one.
  std::function<double(double)> scale_fn{};
  enum class ScaleMode { cycle, iterations };
  ScaleMode scale_mode = ScaleMode::cycle;
};

/// PyTorch's CyclicLR (Smith, "Cyclical Learning Rates for Training Neural
/// Networks") with cycle_momentum=False, stepped after every optimizer step:
/// the lr rises linearly from base_lr to max_lr over step_size_up epochs and
/// falls back over step_size_down, the amplitude max_lr - base_lr scaled by
/// the mode. One base_lr and max_lr for every group (PyTorch also takes one
/// per group). Momentum is not cycled, as in OneCycleLR.
class CyclicLR : public LRScheduler {
public:
  CyclicLR(Optimizer& optimizer, double base_lr, double max_lr, CyclicLROptions options = {});
  const char* name() const override { return "CyclicLR"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  std::vector<std::pair<std::string, double>> schedule_settings() const override;

private:
  double baseLr_, maxLr_;
  CyclicLROptions options_;
};

/// What SequentialLR and ChainedScheduler share: schedules of the same
/// optimizer, owned by the composite, which writes the lr (their own step()
/// is not called).
class ComposedLR : public LRScheduler {
protected:
  /// `who` names the composite in messages (name() is not callable yet).
  ComposedLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedules, const char* who);
  /// Schedule i's lr at `epoch` for a group whose initial lr is `base_lr`.
  double scheduleLrAt(size_t i, int64_t epoch, double base_lr) const { return schedules_[i]->lrAt(epoch, base_lr); }
  /// Every schedule's settings, named "<i>.<schedule>.<setting>", so a
  /// checkpoint of another composition does not load.
  std::vector<std::pair<std::string, double>> nestedSettings() const;

  std::vector<std::shared_ptr<LRScheduler>> schedules_;
};

/// PyTorch's SequentialLR: schedules[0] until milestones[0], then
/// schedules[1] counting its epochs from that milestone, and so on (warmup,
/// then cosine decay).
class SequentialLR : public ComposedLR {
public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedules,
               std::vector<int64_t> milestones);
  const char* name() const override { return "SequentialLR"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  /// The milestones, then every schedule's settings.
  std::vector<std::pair<std::string, double>> schedule_settings() const override;

private:
  std::vector<int64_t> milestones_;
};

/// PyTorch's ChainedScheduler: every schedule at every epoch, each taking the
/// lr the one before it gives as its base_lr, so their factors multiply
/// (ConstantLR's warmup factor times ExponentialLR's decay). That is PyTorch's
/// chain for the schedules that scale the lr by a factor of the epoch
/// (StepLR, MultiStepLR, ExponentialLR, ConstantLR, LinearLR, PolynomialLR).
/// PyTorch chains the others through their recursive forms, whose result
/// depends on the order of the steps, and a LambdaLR there discards the
/// schedules before it; here each applies its closed form to the lr before it
/// (CyclicLR, and OneCycleLR with a max_lr, take no base_lr, so they too
/// discard the schedules before them).
class ChainedScheduler : public ComposedLR {
public:
  ChainedScheduler(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedules);
  const char* name() const override { return "ChainedScheduler"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  std::vector<std::pair<std::string, double>> schedule_settings() const override { return nestedSettings(); }
};

/// PyTorch's LambdaLR: lr = base_lr * factor(epoch), for any schedule a
/// closed form does not cover (warmup then cosine decay, say). The function
/// is not saved: a checkpoint saves the epoch, and the resumed run passes the
/// same function.
class LambdaLR : public LRScheduler {
public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t epoch)> factor);
  const char* name() const override { return "LambdaLR"; }

protected:
  double lrAt(int64_t epoch, double base_lr) const override;
  std::vector<std::pair<std::string, double>> schedule_settings() const override { return {}; }

private:
  std::function<double(int64_t)> factor_;
};

/// ReduceLROnPlateau's options, PyTorch's defaults.
struct ReduceLROnPlateauOptions {
  enum class Mode { min, max };
  enum class ThresholdMode { rel, abs };
  /// min: the metric should fall (a loss); max: rise (an accuracy).
  Mode mode = Mode::min;
  /// Each reduction multiplies every group's lr by this (< 1).
  double factor = 0.1;
  /// Epochs without improvement tolerated before a reduction.
  int64_t patience = 10;
  /// What counts as an improvement: beyond best * (1 -/+ threshold) (rel) or best -/+ threshold (abs).
  double threshold = 1e-4;
  ThresholdMode threshold_mode = ThresholdMode::rel;
  /// Epochs after a reduction during which bad epochs are not counted.
  int64_t cooldown = 0;
  /// No group's lr goes below this; one value, or one per group.
  std::vector<double> min_lr = {0.0};
  /// A reduction smaller than this is not made.
  double eps = 1e-8;
};

/// PyTorch's ReduceLROnPlateau: call step(metric) after each evaluation;
/// after more than `patience` epochs without improvement every group's lr is
/// multiplied by `factor` (not below min_lr). Unlike the closed-form
/// schedules it depends on the metrics seen, so its state (best, the bad-
/// epoch and cooldown counters, each group's lr as a double) is saved.
class ReduceLROnPlateau {
public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  /// One epoch's metric. A NaN metric is never an improvement.
  void step(double metric);
  int64_t last_epoch() const { return epoch_; }
  double get_last_lr(size_t group = 0) const { return lrs_.at(group); }
  /// The best metric so far (+inf in min mode, -inf in max mode before any step).
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return badEpochs_; }
  const char* name() const { return "ReduceLROnPlateau"; }
  /// The options, as a checkpoint records them.
  std::vector<std::pair<std::string, double>> hyperparameters() const;
  void save(const std::string& path) const;
  void load(const std::string& path);

private:
  friend detail::SavedState detail::savedStateOf(ReduceLROnPlateau& scheduler);
  bool isBetter(double metric) const;

  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  std::vector<double> lrs_;
  double best_;
  int64_t badEpochs_ = 0;
  int64_t cooldownCounter_ = 0;
  int64_t epoch_ = 0;
};

/// Averages of parameters kept beside them for evaluation (what
/// ExponentialMovingAverage and StochasticWeightAverage share). update() may
/// run inside a traced step (at O2 it stays fp32); to evaluate with the
/// averages, store() the parameters, copy_to() the averages, evaluate,
/// restore(). A traced eval step sees each swap without retracing.
class ParameterAverage {
public:
  virtual ~ParameterAverage() = default;
  ParameterAverage(const ParameterAverage&) = delete;
  ParameterAverage& operator=(const ParameterAverage&) = delete;
  /// One averaging step, in place and outside autograd.
  virtual void update(std::source_location where = std::source_location::current()) = 0;
  /// Writes the averages into the parameters (between calls of a step).
  void copy_to();
  /// Keeps a copy of the parameters' current values for restore().
  void store();
  /// Writes the values store() kept back into the parameters.
  void restore();
  /// The averages, in the parameters' order (written in place by load and update).
  const std::vector<Tensor>& shadow_params() const { return shadows_; }
  /// "ExponentialMovingAverage" or "StochasticWeightAverage".
  virtual const char* name() const = 0;
  void save(const std::string& path) const;
  void load(const std::string& path);

protected:
  /// The shadows start as copies of `parameters` (floating-point tensors),
  /// each named "<parameter>.<shadowName>" for traced steps' plans.
  ParameterAverage(std::vector<Tensor> parameters, const char* who, const char* shadowName);
  /// Settings a checkpoint must match (EMA's decay).
  virtual std::vector<std::pair<std::string, double>> settings() const { return {}; }
  /// State beside the shadows that a checkpoint carries (SWA's count).
  virtual std::vector<NamedTensor> extra_state() const { return {}; }

  std::vector<Tensor> parameters_;
  std::vector<Tensor> shadows_;

private:
  friend detail::SavedState detail::savedStateOf(ParameterAverage& average);
  void refuseInsideTrace(const char* what) const;
  std::vector<Tensor> stored_;
};

/// An exponential moving average of parameters for evaluation (torch_ema's
/// ExponentialMovingAverage; PyTorch's swa_utils.AveragedModel with
/// get_ema_multi_avg_fn): after each update(), shadow = decay * shadow +
/// (1 - decay) * parameter.
class ExponentialMovingAverage : public ParameterAverage {
public:
  /// The shadows start as copies of `parameters`; decay in [0, 1].
  ExponentialMovingAverage(std::vector<Tensor> parameters, double decay);
  void update(std::source_location where = std::source_location::current()) override;
  double decay() const { return decay_; }
  const char* name() const override { return "ExponentialMovingAverage"; }

protected:
  std::vector<std::pair<std::string, double>> settings() const override { return {{"decay", decay_}}; }

private:
  double decay_;
};

/// Stochastic weight averaging (Izmailov et al.; PyTorch's
/// swa_utils.AveragedModel with its default averaging): the equal average
/// of the parameters at every update(), shadow += (parameter - shadow) /
/// (n + 1), the first update copying the parameters as PyTorch's does. The
/// count n is a state tensor (i64[], "n_averaged" in checkpoints), so
/// update() may run inside a traced step. Batch-norm running statistics are
/// buffers, not parameters, and are not averaged: as after PyTorch's
/// AveragedModel, recompute them (update_bn's pass over the data in train
/// mode) after copy_to(). The lr schedule around it (PyTorch's SWALR) is the
/// user's: a ConstantLR or LambdaLR from the epoch SWA starts.
class StochasticWeightAverage : public ParameterAverage {
public:
  explicit StochasticWeightAverage(std::vector<Tensor> parameters);
  void update(std::source_location where = std::source_location::current()) override;
  /// How many updates the averages hold (reads the count: outside a trace).
  int64_t n_averaged() const;
  const char* name() const override { return "StochasticWeightAverage"; }

protected:
  std::vector<NamedTensor> extra_state() const override { return {{"n_averaged", count_}}; }

private:
  Tensor count_;
};

} // namespace optim
} // namespace jit

#endif // JIT_OPTIM_H
