// Learning-rate schedules: PyTorch's closed forms, written into the lr tensor.

#include "jit/optim.h"

#include "ParameterGroups.h"
#include "StateFile.h"
#include "ampjit/runtime/Plan.h"
#include "trace/TraceSession.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

namespace jit::optim {

using ampjit::runtime::formatDouble;

namespace {

/// PyTorch's cosine annealing from base_lr at t = 0 to eta_min at t = period,
/// in its order of operations (CosineAnnealingLR, and each cycle of
/// CosineAnnealingWarmRestarts).
double cosineAnnealed(double base_lr, double eta_min, int64_t t, int64_t period) {
  return eta_min + (base_lr - eta_min) * (1.0 + std::cos(std::numbers::pi * double(t) / double(period))) / 2.0;
}

} // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t group = 0; group < optimizer.group_count(); ++group)
    baseLrs_.push_back(optimizer.initial_lr(group));
  lastLrs_.resize(baseLrs_.size());
}

void LRScheduler::initialize() { apply(); }

void LRScheduler::step() {
  detail::refuseInsideTrace(std::string(name()) + "::step()",
                            "its epoch is a host counter the trace would advance once; step the schedule between "
                            "calls of the step (the lr tensor it writes is state the step reads)");
  // lrsAt may refuse the epoch (a OneCycleLR past its end): then nothing moves.
  lastLrs_ = lrsAt(epoch_ + 1);
  ++epoch_;
  writeLrs();
}

std::vector<double> LRScheduler::lrsAt(int64_t epoch) const {
  std::vector<double> lrs;
  for (double base : baseLrs_) {
    double lr = lrAt(epoch, base);
    // Checked here, not by set_lr partway through the groups: a refused
    // epoch leaves every group's lr as it was.
    if (!std::isfinite(lr) || lr < 0.0)
      throw Error(std::string(name()) + ": the lr of group " + std::to_string(lrs.size()) + " at epoch " +
                  std::to_string(epoch) + " would be " + formatDouble(lr) + "; an lr must be finite and >= 0");
    lrs.push_back(lr);
  }
  return lrs;
}

void LRScheduler::apply() {
  lastLrs_ = lrsAt(epoch_);
  writeLrs();
}

void LRScheduler::writeLrs() {
  for (size_t group = 0; group < lastLrs_.size(); ++group)
    optimizer_.set_lr(group, lastLrs_[group]);
}

std::vector<std::pair<std::string, double>> LRScheduler::hyperparameters() const {
  std::vector<std::pair<std::string, double>> settings{{"base_lr", baseLrs_[0]}};
  for (size_t group = 1; group < baseLrs_.size(); ++group)
    settings.emplace_back("base_lr." + std::to_string(group), baseLrs_[group]);
  for (auto& setting : schedule_settings())
    settings.push_back(std::move(setting));
  return settings;
}

void LRScheduler::save(const std::string& path) const {
  detail::saveAlone(path, *this, std::string(name()) + "::save");
}

void LRScheduler::load(const std::string& path) {
  detail::loadAlone(path, *this, std::string(name()) + "::load");
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), stepSize_(step_size), gamma_(gamma) {
  if (step_size <= 0)
    throw Error("StepLR: step_size must be positive");
  initialize();
}

double StepLR::lrAt(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(gamma_, double(epoch / stepSize_));
}

std::vector<std::pair<std::string, double>> StepLR::schedule_settings() const {
  return {{"step_size", double(stepSize_)}, {"gamma", gamma_}};
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), tMax_(T_max), etaMin_(eta_min) {
  if (T_max <= 0)
    throw Error("CosineAnnealingLR: T_max must be positive");
  initialize();
}

double CosineAnnealingLR::lrAt(int64_t epoch, double base_lr) const {
  return cosineAnnealed(base_lr, etaMin_, epoch, tMax_);
}

std::vector<std::pair<std::string, double>> CosineAnnealingLR::schedule_settings() const {
  return {{"T_max", double(tMax_)}, {"eta_min", etaMin_}};
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult,
                                                         double eta_min)
    : LRScheduler(optimizer), t0_(T_0), tMult_(T_mult), etaMin_(eta_min) {
  if (T_0 <= 0)
    throw Error("CosineAnnealingWarmRestarts: T_0 must be positive, got " + std::to_string(T_0));
  if (T_mult < 1)
    throw Error("CosineAnnealingWarmRestarts: T_mult must be an integer >= 1, got " + std::to_string(T_mult));
  if (!std::isfinite(eta_min))
    throw Error("CosineAnnealingWarmRestarts: eta_min must be finite, got " + formatDouble(eta_min));
  initialize();
}

double CosineAnnealingWarmRestarts::lrAt(int64_t epoch, double base_lr) const {
  // In integers, as PyTorch's step() advances T_cur and T_i one step at a
  // time (its closed form through log() can land a restart a step off).
  int64_t cycle = t0_, intoCycle = epoch;
  if (tMult_ == 1)
    intoCycle = epoch % t0_;
  else
    while (intoCycle >= cycle) {
      intoCycle -= cycle;
      cycle *= tMult_;
    }
  return cosineAnnealed(base_lr, etaMin_, intoCycle, cycle);
}

std::vector<std::pair<std::string, double>> CosineAnnealingWarmRestarts::schedule_settings() const {
  return {{"T_0", double(t0_)}, {"T_mult", double(tMult_)}, {"eta_min", etaMin_}};
}

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t total_iters, double start_factor, double end_factor)
    : LRScheduler(optimizer), totalIters_(total_iters), startFactor_(start_factor), endFactor_(end_factor) {
  if (total_iters <= 0)
    throw Error("LinearWarmup: total_iters must be positive");
  if (!(start_factor > 0.0 && start_factor <= 1.0) || !(end_factor >= 0.0 && end_factor <= 1.0))
    throw Error("LinearWarmup: start_factor must be in (0, 1] and end_factor in [0, 1] (as PyTorch's LinearLR)");
  initialize();
}

double LinearWarmup::lrAt(int64_t epoch, double base_lr) const {
  double progress = double(std::min(epoch, totalIters_)) / double(totalIters_);
  return base_lr * (startFactor_ + (endFactor_ - startFactor_) * progress);
}

std::vector<std::pair<std::string, double>> LinearWarmup::schedule_settings() const {
  return {{"total_iters", double(totalIters_)}, {"start_factor", startFactor_}, {"end_factor", endFactor_}};
}

ConstantLR::ConstantLR(Optimizer& optimizer, double factor, int64_t total_iters)
    : LRScheduler(optimizer), factor_(factor), totalIters_(total_iters) {
  if (!(factor >= 0.0 && factor <= 1.0))
    throw Error("ConstantLR: factor must be in [0, 1], got " + formatDouble(factor));
  if (total_iters < 0)
    throw Error("ConstantLR: total_iters must be >= 0, got " + std::to_string(total_iters));
  initialize();
}

double ConstantLR::lrAt(int64_t epoch, double base_lr) const {
  return base_lr * (epoch < totalIters_ ? factor_ : factor_ + (1.0 - factor_));
}

std::vector<std::pair<std::string, double>> ConstantLR::schedule_settings() const {
  return {{"factor", factor_}, {"total_iters", double(totalIters_)}};
}

namespace {
/// How many of the sorted `milestones` are <= epoch (Python's bisect_right).
size_t milestonesPassed(const std::vector<int64_t>& milestones, int64_t epoch) {
  return size_t(std::upper_bound(milestones.begin(), milestones.end(), epoch) - milestones.begin());
}
void checkMilestones(const std::vector<int64_t>& milestones, const char* who, bool strictly) {
  for (size_t i = 0; i < milestones.size(); ++i) {
    if (milestones[i] <= 0)
      throw Error(std::string(who) + ": milestones must be positive epochs, got " + std::to_string(milestones[i]));
    if (i > 0 && (strictly ? milestones[i] <= milestones[i - 1] : milestones[i] < milestones[i - 1]))
      throw Error(std::string(who) + ": milestones must be " + (strictly ? "strictly " : "") +
                  "increasing, got " + std::to_string(milestones[i - 1]) + " then " + std::to_string(milestones[i]));
  }
}
std::vector<std::pair<std::string, double>> milestoneSettings(const std::vector<int64_t>& milestones) {
  std::vector<std::pair<std::string, double>> settings{{"milestones", double(milestones.size())}};
  for (size_t i = 0; i < milestones.size(); ++i)
    settings.emplace_back("milestone." + std::to_string(i), double(milestones[i]));
  return settings;
}
} // namespace

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  checkMilestones(milestones_, "MultiStepLR", /*strictly=*/false);
  initialize();
}

double MultiStepLR::lrAt(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(gamma_, double(milestonesPassed(milestones_, epoch)));
}

std::vector<std::pair<std::string, double>> MultiStepLR::schedule_settings() const {
  std::vector<std::pair<std::string, double>> settings = milestoneSettings(milestones_);
  settings.emplace_back("gamma", gamma_);
  return settings;
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {
  if (!(gamma > 0.0) || !std::isfinite(gamma))
    throw Error("ExponentialLR: gamma must be finite and positive, got " + formatDouble(gamma));
  initialize();
}

double ExponentialLR::lrAt(int64_t epoch, double base_lr) const { return base_lr * std::pow(gamma_, double(epoch)); }

std::vector<std::pair<std::string, double>> ExponentialLR::schedule_settings() const { return {{"gamma", gamma_}}; }

PolynomialLR::PolynomialLR(Optimizer& optimizer, int64_t total_iters, double power)
    : LRScheduler(optimizer), totalIters_(total_iters), power_(power) {
  if (total_iters <= 0)
    throw Error("PolynomialLR: total_iters must be positive");
  if (!(power >= 0.0) || !std::isfinite(power))
    throw Error("PolynomialLR: power must be finite and >= 0, got " + formatDouble(power));
  initialize();
}

double PolynomialLR::lrAt(int64_t epoch, double base_lr) const {
  double remaining = 1.0 - double(std::min(epoch, totalIters_)) / double(totalIters_);
  return base_lr * std::pow(remaining, power_);
}

std::vector<std::pair<std::string, double>> PolynomialLR::schedule_settings() const {
  return {{"total_iters", double(totalIters_)}, {"power", power_}};
}

OneCycleLR::OneCycleLR(Optimizer& optimizer, int64_t total_steps, OneCycleLROptions options)
    : LRScheduler(optimizer), totalSteps_(total_steps), options_(options) {
  if (total_steps <= 0)
    throw Error("OneCycleLR: total_steps must be positive, got " + std::to_string(total_steps));
  if (!(options.pct_start >= 0.0 && options.pct_start <= 1.0))
    throw Error("OneCycleLR: pct_start must be in [0, 1], got " + formatDouble(options.pct_start));
  auto requirePositive = [](const char* setting, double value) {
    if (!(value > 0.0) || !std::isfinite(value))
      throw Error(std::string("OneCycleLR: ") + setting + " must be finite and positive, got " + formatDouble(value));
  };
  if (options.max_lr)
    requirePositive("max_lr", *options.max_lr);
  requirePositive("div_factor", options.div_factor);
  requirePositive("final_div_factor", options.final_div_factor);
  double rise = options.pct_start * double(total_steps);
  double last = double(total_steps) - 1.0;
  if (options.three_phase)
    phases_ = {{rise - 1.0, PhaseLr::Initial, PhaseLr::Max},
               {2.0 * rise - 2.0, PhaseLr::Max, PhaseLr::Initial},
               {last, PhaseLr::Initial, PhaseLr::Last}};
  else
    phases_ = {{rise - 1.0, PhaseLr::Initial, PhaseLr::Max}, {last, PhaseLr::Max, PhaseLr::Last}};
  // PyTorch divides by each phase's length and fails at the step that
  // reaches a phase of none; refuse such a cycle before it starts.
  double start = 0.0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    if (phases_[i].endStep == start)
      throw Error("OneCycleLR: phase " + std::to_string(i + 1) + " of the cycle has no steps (pct_start " +
                  formatDouble(options.pct_start) + " of total_steps " + std::to_string(total_steps) +
                  "); change pct_start or total_steps");
    start = phases_[i].endStep;
  }
  initialize();
}

double OneCycleLR::lrAt(int64_t epoch, double base_lr) const {
  if (epoch > totalSteps_)
    throw Error("OneCycleLR: stepped " + std::to_string(epoch) + " times, past its total_steps of " +
                std::to_string(totalSteps_));
  double maxLr = options_.max_lr.value_or(base_lr);
  double initialLr = maxLr / options_.div_factor;
  double lastLr = initialLr / options_.final_div_factor;
  auto lrOf = [&](PhaseLr which) {
    switch (which) {
    case PhaseLr::Initial: return initialLr;
    case PhaseLr::Max: return maxLr;
    case PhaseLr::Last: return lastLr;
    }
    return maxLr;
  };
  double step = double(epoch), start = 0.0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& phase = phases_[i];
    if (step <= phase.endStep || i + 1 == phases_.size()) {
      // Step total_steps, which PyTorch still takes, is past the last
      // phase's end: PyTorch runs the curve on (a linear anneal to a
      // negative lr); here it stays at the last lr.
      double pct = std::min((step - start) / (phase.endStep - start), 1.0);
      double from = lrOf(phase.from), to = lrOf(phase.to);
      // PyTorch's _annealing_cos and _annealing_linear, in their order of operations.
      if (options_.anneal_strategy == OneCycleLROptions::Anneal::cos)
        return to + (from - to) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
      return (to - from) * pct + from;
    }
    start = phase.endStep;
  }
  return lastLr; // not reached: the last phase takes every step
}

std::vector<std::pair<std::string, double>> OneCycleLR::schedule_settings() const {
  // max_lr 0: each group's own lr (a set max_lr is positive).
  return {{"total_steps", double(totalSteps_)},
          {"max_lr", options_.max_lr.value_or(0.0)},
          {"pct_start", options_.pct_start},
          {"anneal_cos", options_.anneal_strategy == OneCycleLROptions::Anneal::cos ? 1.0 : 0.0},
          {"div_factor", options_.div_factor},
          {"final_div_factor", options_.final_div_factor},
          {"three_phase", options_.three_phase ? 1.0 : 0.0}};
}

CyclicLR::CyclicLR(Optimizer& optimizer, double base_lr, double max_lr, CyclicLROptions options)
    : LRScheduler(optimizer), baseLr_(base_lr), maxLr_(max_lr), options_(std::move(options)) {
  detail::requireFiniteNonNegative("CyclicLR", "base_lr", base_lr);
  detail::requireFiniteNonNegative("CyclicLR", "max_lr", max_lr);
  if (options_.step_size_up < 1)
    throw Error("CyclicLR: step_size_up must be >= 1, got " + std::to_string(options_.step_size_up));
  if (options_.step_size_down && *options_.step_size_down < 0)
    throw Error("CyclicLR: step_size_down must be >= 0, got " + std::to_string(*options_.step_size_down));
  if (!(options_.gamma > 0.0) || !std::isfinite(options_.gamma))
    throw Error("CyclicLR: gamma must be finite and positive, got " + formatDouble(options_.gamma));
  initialize();
}

double CyclicLR::lrAt(int64_t epoch, double /*base_lr: CyclicLR's own*/) const {
  // PyTorch's get_lr, in its order of operations and in its doubles.
  double up = double(options_.step_size_up);
  double totalSize = up + double(options_.step_size_down.value_or(options_.step_size_up));
  double stepRatio = up / totalSize;
  double cycle = std::floor(1.0 + double(epoch) / totalSize);
  double x = 1.0 + double(epoch) / totalSize - cycle;
  double scaleFactor = x <= stepRatio ? x / stepRatio : (x - 1.0) / (stepRatio - 1.0);
  double baseHeight = (maxLr_ - baseLr_) * scaleFactor;
  if (options_.scale_fn) {
    bool ofCycle = options_.scale_mode == CyclicLROptions::ScaleMode::cycle;
    return baseLr_ + baseHeight * options_.scale_fn(ofCycle ? cycle : double(epoch));
  }
  switch (options_.mode) {
  case CyclicLROptions::Mode::triangular: return baseLr_ + baseHeight * 1.0;
  case CyclicLROptions::Mode::triangular2: return baseLr_ + baseHeight * (1.0 / std::pow(2.0, cycle - 1.0));
  case CyclicLROptions::Mode::exp_range: return baseLr_ + baseHeight * std::pow(options_.gamma, double(epoch));
  }
  return baseLr_;
}

std::vector<std::pair<std::string, double>> CyclicLR::schedule_settings() const {
  // mode -1: a scale_fn of its own (scale_of_epoch says of what).
  return {{"cyclic_base_lr", baseLr_},
          {"max_lr", maxLr_},
          {"step_size_up", double(options_.step_size_up)},
          {"step_size_down", double(options_.step_size_down.value_or(options_.step_size_up))},
          {"mode", options_.scale_fn ? -1.0 : double(int(options_.mode))},
          {"gamma", options_.gamma},
          {"scale_of_epoch", options_.scale_mode == CyclicLROptions::ScaleMode::iterations ? 1.0 : 0.0}};
}

ComposedLR::ComposedLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedules, const char* who)
    : LRScheduler(optimizer), schedules_(std::move(schedules)) {
  if (schedules_.empty())
    throw Error(std::string(who) + ": no schedules given");
  for (size_t i = 0; i < schedules_.size(); ++i) {
    if (!schedules_[i])
      throw Error(std::string(who) + ": schedule " + std::to_string(i) + " is null");
    if (&schedules_[i]->optimizer_ != &optimizer)
      throw Error(std::string(who) + ": schedule " + std::to_string(i) + " (" + schedules_[i]->name() +
                  ") drives another optimizer");
  }
}

std::vector<std::pair<std::string, double>> ComposedLR::nestedSettings() const {
  std::vector<std::pair<std::string, double>> settings;
  for (size_t i = 0; i < schedules_.size(); ++i) {
    std::string prefix = std::to_string(i) + "." + schedules_[i]->name();
    settings.emplace_back(prefix, 1.0); // a LambdaLR has no settings of its own
    for (auto& [setting, value] : schedules_[i]->schedule_settings())
      settings.emplace_back(prefix + "." + setting, value);
  }
  return settings;
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedules,
                           std::vector<int64_t> milestones)
    : ComposedLR(optimizer, std::move(schedules), "SequentialLR"), milestones_(std::move(milestones)) {
  if (milestones_.size() + 1 != schedules_.size())
    throw Error("SequentialLR: " + std::to_string(schedules_.size()) + " schedules need " +
                std::to_string(schedules_.size() - 1) + " milestones, got " + std::to_string(milestones_.size()));
  checkMilestones(milestones_, "SequentialLR", /*strictly=*/true);
  initialize();
}

double SequentialLR::lrAt(int64_t epoch, double base_lr) const {
  size_t index = milestonesPassed(milestones_, epoch);
  int64_t start = index == 0 ? 0 : milestones_[index - 1];
  return scheduleLrAt(index, epoch - start, base_lr);
}

std::vector<std::pair<std::string, double>> SequentialLR::schedule_settings() const {
  std::vector<std::pair<std::string, double>> settings = milestoneSettings(milestones_);
  for (auto& setting : nestedSettings())
    settings.push_back(std::move(setting));
  return settings;
}

ChainedScheduler::ChainedScheduler(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedules)
    : ComposedLR(optimizer, std::move(schedules), "ChainedScheduler") {
  initialize();
}

double ChainedScheduler::lrAt(int64_t epoch, double base_lr) const {
  double lr = base_lr;
  for (size_t i = 0; i < schedules_.size(); ++i)
    lr = scheduleLrAt(i, epoch, lr);
  return lr;
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor)
    : LRScheduler(optimizer), factor_(std::move(factor)) {
  if (!factor_)
    throw Error("LambdaLR: the factor function is empty");
  initialize();
}

double LambdaLR::lrAt(int64_t epoch, double base_lr) const {
  double factor = factor_(epoch);
  if (!std::isfinite(factor) || factor < 0.0)
    throw Error("LambdaLR: the factor at epoch " + std::to_string(epoch) + " is " + formatDouble(factor) +
                "; it must be finite and >= 0");
  return base_lr * factor;
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : optimizer_(optimizer), options_(std::move(options)) {
  const char* who = "ReduceLROnPlateau";
  if (!(options_.factor < 1.0 && options_.factor >= 0.0))
    throw Error(std::string(who) + ": factor must be in [0, 1), got " + formatDouble(options_.factor));
  if (options_.patience < 0 || options_.cooldown < 0)
    throw Error(std::string(who) + ": patience and cooldown must be >= 0");
  if (!(options_.threshold >= 0.0) || !std::isfinite(options_.threshold))
    throw Error(std::string(who) + ": threshold must be finite and >= 0");
  if (options_.min_lr.size() == 1)
    options_.min_lr.resize(optimizer.group_count(), options_.min_lr[0]);
  if (options_.min_lr.size() != optimizer.group_count())
    throw Error(std::string(who) + ": min_lr has " + std::to_string(options_.min_lr.size()) + " values for " +
                std::to_string(optimizer.group_count()) + " parameter groups");
  for (size_t group = 0; group < optimizer.group_count(); ++group)
    lrs_.push_back(optimizer.initial_lr(group));
  best_ = options_.mode == ReduceLROnPlateauOptions::Mode::min ? INFINITY : -INFINITY;
}

bool ReduceLROnPlateau::isBetter(double metric) const {
  using Options = ReduceLROnPlateauOptions;
  bool relative = options_.threshold_mode == Options::ThresholdMode::rel;
  if (options_.mode == Options::Mode::min)
    return metric < (relative ? best_ * (1.0 - options_.threshold) : best_ - options_.threshold);
  return metric > (relative ? best_ * (1.0 + options_.threshold) : best_ + options_.threshold);
}

void ReduceLROnPlateau::step(double metric) {
  detail::refuseInsideTrace("ReduceLROnPlateau::step()",
                            "it reads a metric on the host; step it between calls of the step, with the value the "
                            "step returned");
  ++epoch_;
  if (isBetter(metric)) {
    best_ = metric;
    badEpochs_ = 0;
  } else {
    ++badEpochs_;
  }
  if (cooldownCounter_ > 0) {
    --cooldownCounter_;
    badEpochs_ = 0;
  }
  if (badEpochs_ > options_.patience) {
    for (size_t group = 0; group < lrs_.size(); ++group) {
      // PyTorch reduces the group's current lr: if something else wrote the
      // lr tensor (set_lr, a warmup), start from what it holds.
      double held = optimizer_.lr(group).item();
      if (held != double(float(lrs_[group])))
        lrs_[group] = held;
      double reduced = std::max(lrs_[group] * options_.factor, options_.min_lr[group]);
      if (lrs_[group] - reduced > options_.eps) {
        lrs_[group] = reduced;
        optimizer_.set_lr(group, reduced);
      }
    }
    cooldownCounter_ = options_.cooldown;
    badEpochs_ = 0;
  }
}

std::vector<std::pair<std::string, double>> ReduceLROnPlateau::hyperparameters() const {
  std::vector<std::pair<std::string, double>> settings{
      {"mode_max", options_.mode == ReduceLROnPlateauOptions::Mode::max ? 1.0 : 0.0},
      {"factor", options_.factor},
      {"patience", double(options_.patience)},
      {"threshold", options_.threshold},
      {"threshold_abs", options_.threshold_mode == ReduceLROnPlateauOptions::ThresholdMode::abs ? 1.0 : 0.0},
      {"cooldown", double(options_.cooldown)},
      {"eps", options_.eps}};
  for (size_t group = 0; group < options_.min_lr.size(); ++group)
    settings.emplace_back(group == 0 ? "min_lr" : "min_lr." + std::to_string(group), options_.min_lr[group]);
  return settings;
}

void ReduceLROnPlateau::save(const std::string& path) const {
  detail::saveAlone(path, *this, "ReduceLROnPlateau::save");
}

void ReduceLROnPlateau::load(const std::string& path) {
  detail::loadAlone(path, *this, "ReduceLROnPlateau::load");
}

} // namespace jit::optim

namespace jit::detail {

SavedState savedStateOf(optim::ReduceLROnPlateau& scheduler) {
  // Host state travels through tensors of its own: the counters in i64, the
  // best metric and each group's lr in f64 (the lr tensors are f32).
  Tensor counters = tensor(std::vector<int64_t>{scheduler.epoch_, scheduler.badEpochs_, scheduler.cooldownCounter_},
                           {3});
  Tensor best = scalar_tensor(scheduler.best_, f64);
  Tensor lrs = tensor(std::span<const double>(scheduler.lrs_), {int64_t(scheduler.lrs_.size())}, f64);
  return {.kind = scheduler.name(),
          .noun = "scheduler",
          .tensors = {{"counters", counters}, {"best", best}, {"lrs", lrs}},
          .settings = scheduler.hyperparameters(),
          .restore = [&scheduler, counters, best, lrs] {
            std::vector<double> counts = counters.to_vector();
            scheduler.epoch_ = int64_t(counts[0]);
            scheduler.badEpochs_ = int64_t(counts[1]);
            scheduler.cooldownCounter_ = int64_t(counts[2]);
            scheduler.best_ = best.item();
            scheduler.lrs_ = lrs.to_vector();
          }};
}


SavedState savedStateOf(optim::LRScheduler& scheduler) {
  // The epoch is a host integer; it travels through a tensor of its own.
  Tensor epoch = scalar_tensor(double(scheduler.epoch_), i64);
  return {.kind = scheduler.name(),
          .noun = "scheduler",
          .tensors = {{"last_epoch", epoch}},
          .settings = scheduler.hyperparameters(),
          .checkLoaded =
              [&scheduler](const std::vector<Tensor>& loaded, const std::string& at) {
                double epoch = loaded[0].item();
                // Up to 2^53, where a double still counts every step.
                if (!(epoch >= 0.0 && epoch <= 9007199254740992.0 && epoch == std::floor(epoch))) {
                  std::ostringstream text;
                  text << epoch;
                  throw Error(at + "last_epoch is " + text.str() + ", not a count of steps");
                }
                try {
                  (void)scheduler.lrsAt(int64_t(epoch));
                } catch (const Error& refused) {
                  throw Error(at + "last_epoch " + std::to_string(int64_t(epoch)) + ": " + refused.what());
                }
              },
          .restore =
              [&scheduler, epoch] {
                scheduler.epoch_ = int64_t(epoch.item());
                scheduler.lastLrs_ = scheduler.lrsAt(scheduler.epoch_);
              }};
}

} // namespace jit::detail
