#ifndef JIT_AMP_H
#define JIT_AMP_H

// jit::amp: the loss scaler (DESIGN "Loss scaling in the graph"), eager
// autocast scopes and the AMP policy for jit::trace (DESIGN "AMP semantics").
// Every scaler operation is an op of the `amp` dialect or a predicated
// optimizer update, dispatched like any op, so a traced step records the same
// graph. The scaler's state (scale, good/bad-step counters, skipped steps) is
// tensors. Autocast and Policy read the same policy data as the compiler's AMP
// passes (ampjit::amp::Policy: policies/default.yaml, pytorch.yaml, user YAML).

#include "jit/Tensor.h"
#include "jit/optim.h"

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

namespace jit::amp {
class GradScaler;
}
namespace jit::detail {
struct SavedState;
SavedState savedStateOf(amp::GradScaler& scaler);
} // namespace jit::detail

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
  /// The scale never grows past it (apex's max_loss_scale); inf: no cap.
  double max_scale = std::numeric_limits<double>::infinity();
};
/// amp.update_scale: {scale, good_steps, bad_steps, skipped_steps}.
std::tuple<Tensor, Tensor, Tensor, Tensor> update_scale(const Tensor& scale, const Tensor& good_steps,
                                                        const Tensor& bad_steps, const Tensor& skipped_steps,
                                                        const Tensor& all_finite, const UpdateScaleOptions& options);

/// PyTorch's names, or Paddle's (init_loss_scaling, incr_ratio, decr_ratio,
/// incr_every_n_steps, decr_every_n_nan_or_inf), or MindSpore's
/// DynamicLossScaleManager's (init_loss_scale; scale_factor, which grows by
/// the factor and backs off by its inverse; scale_window); giving one setting
/// under two names is an error. A Paddle or MindSpore name also keeps the
/// scale >= 1, as those frameworks do.
/// apex's min_loss_scale and max_loss_scale bound the dynamic scale: a backoff
/// never takes it below the first, a growth never past the second (apex's
/// default cap is 2^24; PyTorch, Paddle and this scaler have none unless given).
struct GradScalerOptions {
  bool enabled = true;
  /// false: static scaling (the scale never changes; overflowing steps are still skipped).
  bool dynamic = true;
  /// MindSpore's FixedLossScaleManager option. false: the step checks nothing
  /// and always updates, an inf or NaN in the gradients included (apex's
  /// static loss scale does not skip either); no pass over the gradients
  /// looks for one, so found_inf() has no answer and is an error. Needs
  /// dynamic = false: a dynamic scale backs off from the step it skips.
  bool drop_overflow_update = true;
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
  std::optional<double> init_loss_scale{};
  std::optional<double> scale_factor{};
  std::optional<int64_t> scale_window{};
  std::optional<double> min_loss_scale{};
  std::optional<double> max_loss_scale{};
};

struct Policy;

class GradScaler {
public:
  explicit GradScaler(GradScalerOptions options = {});
  /// The scaler apex's amp.initialize makes for `policy`'s loss_scale: dynamic
  /// scaling with `options` (f16's default), a fixed scale (dynamic = false,
  /// init_scale = the value), or none for 1.0 (bf16's and O0's default: bf16 has
  /// f32's exponent range, its gradients do not underflow). Scaling that bf16
  /// asks for explicitly is done, with a notice on stderr. An initial scale in
  /// `options` beside a fixed loss_scale is an error. A fixed scale still
  /// skips the steps that overflow, as Paddle's static scaler does; apex's
  /// never skips, which `drop_overflow_update = false` in `options` gives.
  GradScaler(const Policy& policy, GradScalerOptions options);
  explicit GradScaler(const Policy& policy);

  /// loss * scale (the loss itself when disabled).
  Tensor scale(const Tensor& loss, std::source_location where = std::source_location::current()) const;
  /// Unscales the optimizer's gradients in place and records whether they
  /// are finite; once per optimizer between update() calls.
  void unscale_(optim::Optimizer& optimizer, std::source_location where = std::source_location::current());
  /// The optimizer's update, predicated on its gradients being finite.
  void step(optim::Optimizer& optimizer, std::source_location where = std::source_location::current());
  /// The scale update from every stepped optimizer's finite flag.
  void update(std::source_location where = std::source_location::current());
  /// PyTorch's update(new_scale): the scale becomes `new_scale` (a positive
  /// finite number, or a one-element floating tensor, which a traced step reads
  /// each call) instead of growing or backing off; the growth and backoff
  /// counters are left as they are, and a skipped step is still counted.
  void update(double new_scale, std::source_location where = std::source_location::current());
  void update(const Tensor& new_scale, std::source_location where = std::source_location::current());

  bool is_enabled() const { return enabled_; }
  // The getters read the host value, waiting for the GPU when a CUDA step
  // wrote it (state_tensors() reads without waiting). Called while jit::trace
  // records, each is an error naming the caller's line, as item() is.
  double get_scale(std::source_location where = std::source_location::current()) const;
  int64_t growth_tracker(std::source_location where = std::source_location::current()) const;
  int64_t skipped_steps(std::source_location where = std::source_location::current()) const;
  /// Whether the last step (or, before update(), the current one) of any
  /// optimizer saw an inf/NaN; false before the first. A traced step keeps it.
  /// An error with drop_overflow_update = false, whose steps check nothing.
  bool found_inf(std::source_location where = std::source_location::current()) const;
  /// The same for one optimizer's gradients: whether its last step saw an
  /// inf/NaN (and was skipped). An update that covered several optimizers
  /// keeps a flag for each (state a traced step writes); one that covered a
  /// single optimizer keeps only the scaler's. So after traced steps, asking
  /// about an optimizer whose last step was such an update's, when a later
  /// update has rewritten the scaler's flag, is an error that says so.
  bool found_inf(const optim::Optimizer& optimizer,
                 std::source_location where = std::source_location::current()) const;

  /// The scaler's state as tensors, to read without waiting for the GPU
  /// (`jit::cuda::copy_to_host_async(scaler.state_tensors().scale)`): a traced
  /// step writes them in place on every call, so a copy asked for after a call
  /// holds that call's values. They are the state itself: writing one sets it.
  struct StateTensors {
    Tensor scale;            ///< f32[]: the loss scale (1 when disabled)
    Tensor growth_tracker;   ///< i64[]: clean steps since the scale last grew or backed off
    Tensor skipped_steps;    ///< i64[]: steps skipped for an inf/NaN so far
    Tensor last_step_finite; ///< i1[]: 0 when the last update's step saw an inf/NaN (and was skipped);
                             ///< undefined with drop_overflow_update = false, which checks nothing
  };
  StateTensors state_tensors() const;
  const UpdateScaleOptions& update_options() const { return update_; }

  /// The scale, the good/bad-step counters and the skipped steps, with the
  /// update settings, in the state file format (jit::Checkpoint puts several
  /// objects in one file). A load writes them in place, so a traced step
  /// continues from the file; it requires the same settings (enabled,
  /// dynamic, drop_overflow_update, growth/backoff factors and intervals,
  /// min/max scale: a traced step compiles them in) and checks the whole file
  /// before changing anything.
  void save(const std::string& path) const;
  void load(const std::string& path);

private:
  friend detail::SavedState detail::savedStateOf(GradScaler& scaler);

  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    /// This step's finite flag (a value of the step: a symbol of its trace
    /// once a traced step has finished).
    Tensor allFinite;
    /// Whether the last update covered this optimizer, and whether that
    /// update covered others too (host bookkeeping, which a traced step
    /// records once and every replay repeats).
    bool inLastUpdate = false;
    bool lastUpdateShared = false;
    /// i1[] state: the flag of the last update that covered this optimizer
    /// among others, written by that update (a single optimizer's update
    /// leaves it to lastStepFinite_, so a common step writes nothing more).
    Tensor sharedUpdateFinite;
    /// The order in which the scaler first met the optimizer: entries are
    /// visited in it, so a traced step's ops do not follow heap addresses.
    size_t ordinal = 0;
  };
  PerOptimizer& entryFor(const optim::Optimizer& optimizer);
  Tensor invScale() const;
  /// Whether every optimizer stepped since the last update saw finite
  /// gradients; undefined where none was checked (drop_overflow_update = false).
  Tensor stepsFinite() const;
  /// Ends an update: the optimizers are ready for the next step.
  void finishUpdate(const Tensor& finite);
  /// The error for asking whether a step overflowed a scaler that never checks.
  void requireChecks(std::source_location where) const;

  bool enabled_;
  bool dynamic_;
  /// Whether a step checks its gradients and skips its update on an inf/NaN.
  bool dropOverflowUpdate_;
  UpdateScaleOptions update_;
  Tensor scale_, good_, bad_, skipped_;
  /// Whether the last update's step was finite (1 before any): state, so a
  /// traced step writes it each call; not in checkpoints (a load sets it to 1).
  Tensor lastStepFinite_;
  std::map<const optim::Optimizer*, PerOptimizer> perOptimizer_;
};

//===----------------------------------------------------------------------===//
// Eager autocast
//===----------------------------------------------------------------------===//

struct AutocastOptions {
  bool enabled = true;
  /// The low-precision type: f16 or bf16 (anything else is a jit::Error).
  DType dtype = jit::f16;
  /// A built-in policy ("default", "pytorch") or the path of a user policy
  /// YAML file (policies/README.md), as the compiler's `policy=` option takes.
  std::string policy = "default";
  /// Op names (`jit.softmax`) added to the allow or deny list of a built-in
  /// `policy`, as Paddle's auto_cast(custom_white_list, custom_black_list)
  /// and Policy's lists of the same names.
  std::vector<std::string> custom_allow{};
  std::vector<std::string> custom_deny{};
};

/// While alive, ops on this thread run with PyTorch's autocast semantics
/// (`semantics=autocast`): per the policy's category for the op, its
/// floating-point operands are cast (by jit.convert, which autograd records)
/// to the low type (allow), to f32 (deny), or to the widest floating operand
/// type (infer, clear, promote). f64 operands are never cast (as PyTorch);
/// integer and i1 operands never; always_fp32 ops (scaler, optimizer) and
/// jit.convert itself run as called. Backward passes run with autocast off,
/// so gradients take the forward values' types. Scopes nest; the innermost
/// decides, and `autocast(false)` turns autocast off inside an enabled scope.
/// A policy that cannot be loaded is a jit::Error at construction, with the
/// policy file's `file:line:column` message.
class autocast {
public:
  explicit autocast(AutocastOptions options = {});
  explicit autocast(bool enabled) : autocast(AutocastOptions{.enabled = enabled}) {}
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

  /// Whether autocast is on for ops dispatched now on this thread, and its low type.
  static bool is_enabled();
  static std::optional<DType> current_dtype();

  /// The state of one enabled scope (defined in the implementation).
  struct State;

private:
  std::shared_ptr<const State> previous_;
  /// Whether the scope this one nests in was a user's autocast(false).
  bool previousDisabled_;
};

//===----------------------------------------------------------------------===//
// The AMP policy for jit::trace (apex-style levels and properties)
//===----------------------------------------------------------------------===//

enum class Level { O0, O1, O2, O3, Auto };
inline constexpr Level O0 = Level::O0; ///< fp32 everywhere
inline constexpr Level O1 = Level::O1; ///< per-op lists; fp32 parameters
inline constexpr Level O2 = Level::O2; ///< almost all low precision; fp32 master weights
inline constexpr Level O3 = Level::O3; ///< pure low precision (a speed baseline)
/// MindSpore's amp_level "auto": allow ops low, deny ops fp32, every other op
/// in the widest type among its inputs, decided op by op whatever the trace's
/// semantics (so a traced step gives eager autocast's bits on the CPU); fp32
/// parameters, cast per use, as at O1.
inline constexpr Level Auto = Level::Auto;
/// Every level, in the order above.
inline constexpr Level kLevels[] = {O0, O1, O2, O3, Auto};

/// `loss_scale = jit::amp::dynamic`: GradScaler's dynamic scaling.
struct DynamicLossScale {
  friend bool operator==(DynamicLossScale, DynamicLossScale) = default;
};
inline constexpr DynamicLossScale dynamic{};
/// A fixed scale (1.0: none) or dynamic.
using LossScale = std::variant<double, DynamicLossScale>;

/// What jit::trace is told about AMP: `{.level = jit::amp::O1, .dtype = jit::f16}`.
/// Unset properties take the level's defaults (resolve()); a combination that
/// makes no sense is a jit::Error saying why:
///   O0: dtype must be f32, and master_weights=true, keep_batchnorm_fp32,
///       loss_scale other than 1, or custom lists are errors (nothing is low precision).
///   O1-O3: dtype must be f16 or bf16.
///   O1 and auto: master_weights=true is an error (parameters stay fp32 and each op casts
///       them; there is no low-precision copy to keep masters for);
///       keep_batchnorm_fp32 is an error (the lists decide normalisation).
///   O2: keep_batchnorm_fp32=false is an error (ampjit's normalisation ops are
///       on the deny list; change that with a policy file instead).
///   O3: keep_batchnorm_fp32=true is an error (O3 is pure low precision; that
///       is O2), and so are custom lists (O3 consults no lists).
///   Any level: a loss_scale that is not positive and finite; an op in both
///   custom lists; custom lists together with a policy YAML file (put them in
///   the file); an unknown op or a bad policy file (the file:line message).
struct Policy {
  Level level = O1;
  /// f16 or bf16 for O1-O3; unset: f16, or f32 at O0.
  std::optional<DType> dtype{};
  /// A built-in ("default", "pytorch") or the path of a user policy YAML file.
  std::string policy = "default";
  /// Op names (`jit.softmax`) added to the allow or deny list of a built-in
  /// policy, as Paddle's custom_white_list/custom_black_list.
  std::vector<std::string> custom_allow{};
  std::vector<std::string> custom_deny{};
  // apex's properties; unset takes the level's default.
  std::optional<bool> master_weights{};
  std::optional<bool> keep_batchnorm_fp32{};
  std::optional<LossScale> loss_scale{};

  /// Every property decided: the level's defaults with the overrides applied.
  struct Resolved {
    Level level;
    DType dtype;            ///< the low-precision type (f32 at O0)
    DType cast_model_type;  ///< the parameters' compute type (f32 at O0/O1)
    bool master_weights;
    bool keep_batchnorm_fp32;
    LossScale loss_scale;   ///< dynamic for f16 at O1-O3; 1.0 for bf16 (its range needs none) and O0
  };
  /// Checks the overrides (jit::Error on nonsense) and fills in the defaults.
  Resolved resolve() const;

  /// The YAML of the user policy that the custom lists make (base: `policy`),
  /// or nullopt without custom lists.
  std::optional<std::string> custom_policy_yaml() const;

  /// The option string for the compiler's `--amp-pipeline`, e.g.
  /// `level=O2 dtype=f16 policy=default master-weights=on`. Custom lists are
  /// written once to a content-named YAML file in the temporary directory,
  /// whose path becomes `policy=`. Throws what resolve() throws.
  std::string pipelineOptions() const;
};

/// "O0" ... "O3", "auto": the compiler's and the tools' spelling.
std::string_view level_name(Level level);
/// The level level_name() spells `name`; nullopt for any other text.
std::optional<Level> level_from_name(std::string_view name);

} // namespace jit::amp

#endif // JIT_AMP_H
