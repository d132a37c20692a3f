#ifndef JIT_AMP_H
#define JIT_AMP_H

// jit::amp: the loss scaler (DESIGN "Loss scaling in the graph"). Every
// operation is an op of the `amp` dialect or a predicated optimizer update,
// dispatched like any op, so a traced step records the same graph. The
// scaler's state (scale, good/bad-step counters, skipped steps) is tensors.

#include "jit/Tensor.h"
#include "jit/optim.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace jit::amp {

// --- the amp ops (AmpOps.td) ----------------------------------------------------
Tensor scale_loss(const Tensor& loss, const Tensor& scale); ///< amp.scale_loss
Tensor all_finite(const std::vector<Tensor>& grads);        ///< amp.all_finite (i1[])
/// amp.unscale_and_check: {grads * inv_scale, all finite}.
std::pair<std::vector<Tensor>, Tensor> unscale_and_check(const Tensor& inv_scale, const std::vector<Tensor>& grads);
struct UpdateScaleOptions {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t backoff_interval = 1;
  double min_scale = 0.0;
};
/// amp.update_scale: {scale, good_steps, bad_steps, skipped_steps}.
std::tuple<Tensor, Tensor, Tensor, Tensor> update_scale(const Tensor& scale, const Tensor& good_steps,
                                                        const Tensor& bad_steps, const Tensor& skipped_steps,
                                                        const Tensor& all_finite, const UpdateScaleOptions& options);

/// PyTorch's names, or Paddle's (init_loss_scaling, incr_ratio, decr_ratio,
/// incr_every_n_steps, decr_every_n_nan_or_inf); giving a value under both
/// names is an error. Any Paddle name also keeps the scale >= 1, as Paddle does.
struct GradScalerOptions {
  bool enabled = true;
  /// false: static scaling (the scale never changes; overflowing steps are still skipped).
  bool dynamic = true;
  // `{}` on each so designated initialisers may leave any out (-Wextra).
  std::optional<double> init_scale{};
  std::optional<double> growth_factor{};
  std::optional<double> backoff_factor{};
  std::optional<int64_t> growth_interval{};
  std::optional<double> init_loss_scaling{};
  std::optional<double> incr_ratio{};
  std::optional<double> decr_ratio{};
  std::optional<int64_t> incr_every_n_steps{};
  std::optional<int64_t> decr_every_n_nan_or_inf{};
};

class GradScaler {
public:
  explicit GradScaler(GradScalerOptions options = {});

  /// loss * scale (the loss itself when disabled).
  Tensor scale(const Tensor& loss) const;
  /// Unscales the optimizer's gradients in place and records whether they
  /// are finite; once per optimizer between update() calls.
  void unscale_(optim::Optimizer& optimizer);
  /// The optimizer's update, predicated on its gradients being finite.
  void step(optim::Optimizer& optimizer);
  /// The scale update from every stepped optimizer's finite flag.
  void update();

  bool is_enabled() const { return enabled_; }
  double get_scale() const;
  int64_t growth_tracker() const;
  int64_t skipped_steps() const;
  /// Whether the last step (or, before update(), the current one) of any optimizer saw an inf/NaN.
  bool found_inf() const;
  bool found_inf(const optim::Optimizer& optimizer) const;
  const UpdateScaleOptions& update_options() const { return update_; }

  /// A small versioned text file; loading a missing, foreign, newer or
  /// truncated file is a jit::Error saying which.
  void save(const std::string& path) const;
  void load(const std::string& path);

private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    Tensor allFinite;
  };
  Tensor invScale() const;

  bool enabled_;
  bool dynamic_;
  UpdateScaleOptions update_;
  Tensor scale_, good_, bad_, skipped_;
  std::map<const optim::Optimizer*, PerOptimizer> perOptimizer_;
  Tensor lastAllFinite_;
};

} // namespace jit::amp

#endif // JIT_AMP_H
