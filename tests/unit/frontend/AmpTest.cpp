// GradScaler scenarios (PyTorch's) eagerly, against an fp32 control.

#include "FrontendTestUtil.h"
#include "TemporaryDirectory.h"

#include "StateFile.h"

#include "jit/amp.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace jit {
namespace {

using testing::errorOf;

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor param() { return tensor({0.5, -1.0, 2.0}, {3}, f32).requires_grad_(); }

/// loss = sum(p^2) * factor (factor inf injects an overflow).
Tensor lossOf(const Tensor& p, double factor) { return sum(p * p) * factor; }

TEST(AmpTest, AnInfOnOneStepOfFourSkipsExactlyThatStep) {
  Tensor p = param(), control = param();
  optim::SGD opt({p}, {.lr = 0.125}), controlOpt({control}, {.lr = 0.125});
  amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
  for (int s = 0; s < 4; ++s) {
    std::vector<double> before = p.to_vector();
    opt.zero_grad();
    scaler.scale(lossOf(p, s == 2 ? kInf : 1.0)).backward();
    scaler.step(opt);
    scaler.update();
    if (s == 2) {
      EXPECT_EQ(p.to_vector(), before); // bit-identical
      EXPECT_TRUE(scaler.found_inf());
      continue;
    }
    controlOpt.zero_grad();
    lossOf(control, 1.0).backward();
    controlOpt.step();
    EXPECT_EQ(p.to_vector(), control.to_vector()) << "step " << s; // power-of-two scales are exact
  }
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // growths: steps 0,1 (one growth), skip, step 3 (counter 1): 1024 * 2 * 0.5.
  EXPECT_EQ(scaler.get_scale(), 1024.0 * 2 * 0.5);
}

TEST(AmpTest, UnscaleGivesTrueGradientsAndTwiceIsAnError) {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 0.125});
  amp::GradScaler scaler;
  scaler.scale(lossOf(p, 1.0)).backward();
  scaler.unscale_(opt);
  EXPECT_EQ(p.grad().to_vector(), (std::vector<double>{1.0, -2.0, 4.0}));
  EXPECT_NE(errorOf([&] { scaler.unscale_(opt); }).find("already been called"), std::string::npos);
  Tensor norm = clip_grad_norm_({p}, 1.0);
  EXPECT_NEAR(norm.item(), std::sqrt(21.0), 1e-5);
  scaler.step(opt);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(AmpTest, OnlyTheOptimizerThatSeesAnInfSkips) {
  Tensor a = param(), b = param();
  optim::SGD optA({a}, {.lr = 0.125}), optB({b}, {.lr = 0.125});
  amp::GradScaler scaler;
  scaler.scale(lossOf(a, 1.0) + lossOf(b, kInf)).backward();
  scaler.step(optA);
  scaler.step(optB);
  EXPECT_FALSE(scaler.found_inf(optA));
  EXPECT_TRUE(scaler.found_inf(optB));
  EXPECT_NE(a.to_vector(), param().to_vector());
  EXPECT_EQ(b.to_vector(), param().to_vector());
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

TEST(AmpTest, TwoMicroBatchesAccumulateThenOneStep) {
  Tensor p = param(), control = param();
  optim::SGD opt({p}, {.lr = 0.125}), controlOpt({control}, {.lr = 0.125});
  amp::GradScaler scaler;
  for (int micro = 0; micro < 2; ++micro) {
    scaler.scale(lossOf(p, 0.5)).backward();
    lossOf(control, 0.5).backward();
  }
  scaler.step(opt);
  scaler.update();
  controlOpt.step();
  EXPECT_EQ(p.to_vector(), control.to_vector());
}

TEST(AmpTest, StateSavedAndLoadedMidTraining) {
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = scratch.file("scaler.state");
  amp::GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 0.125});
  for (double factor : {1.0, kInf, 1.0}) {
    scaler.scale(lossOf(p, factor)).backward();
    scaler.step(opt);
    scaler.update();
    opt.zero_grad();
  }
  scaler.save(path);
  amp::GradScaler restored({.init_scale = 8.0, .growth_interval = 3});
  restored.load(path);
  EXPECT_EQ(restored.get_scale(), 4.0);
  EXPECT_EQ(restored.growth_tracker(), 1);
  EXPECT_EQ(restored.skipped_steps(), 1);
  // The overflow flag belongs to the step that set it, not to the file: a
  // scaler that loads over one that overflowed has seen no overflow yet.
  scaler.scale(lossOf(p, kInf)).backward();
  scaler.step(opt);
  scaler.update();
  opt.zero_grad();
  ASSERT_TRUE(scaler.found_inf());
  scaler.load(path);
  EXPECT_FALSE(scaler.found_inf());
  EXPECT_EQ(scaler.state_tensors().last_step_finite.item(), 1.0);
  EXPECT_EQ(scaler.skipped_steps(), 1) << "the file's count, not the overflow after the save";
  // The update settings are compiled into traced steps: a load checks them.
  amp::GradScaler slower({.init_scale = 8.0, .growth_interval = 5});
  std::string message = errorOf([&] { slower.load(path); });
  EXPECT_NE(message.find("scaler setting 'growth_interval' is 3 in the file but 5 here"), std::string::npos)
      << message;
  EXPECT_EQ(slower.get_scale(), 8.0);
  amp::GradScaler fixed({.dynamic = false, .growth_interval = 3});
  EXPECT_NE(errorOf([&] { fixed.load(path); }).find("setting 'dynamic' is 1 in the file but 0 here"),
            std::string::npos);
  std::FILE* file = std::fopen(path.c_str(), "w");
  std::fputs("ampjit-grad-scaler 1\nscale 0x1p+2\n", file);
  std::fclose(file);
  EXPECT_NE(errorOf([&] { restored.load(path); }).find("not an ampjit state file"), std::string::npos);
  EXPECT_NE(errorOf([&] { restored.load(path + ".missing"); }).find("cannot open"), std::string::npos);
}

TEST(AmpTest, ApexLossScaleBoundsAreCheckedAndSavedWithTheScaler) {
  amp::GradScaler apex({.min_loss_scale = 1.0, .max_loss_scale = 16777216.0});
  EXPECT_EQ(apex.update_options().min_scale, 1.0);
  EXPECT_EQ(apex.update_options().max_scale, 16777216.0);
  EXPECT_EQ(amp::GradScaler().update_options().max_scale, kInf);
  for (auto [options, expected] :
       {std::pair{amp::GradScalerOptions{.max_loss_scale = 0.0}, "max_loss_scale must be positive"},
        {amp::GradScalerOptions{.min_loss_scale = 8.0, .max_loss_scale = 4.0}, "at least min_loss_scale"},
        {amp::GradScalerOptions{.min_loss_scale = -1.0}, "min_loss_scale must be finite and non-negative"},
        {amp::GradScalerOptions{.max_loss_scale = 1024.0},
         "the initial scale 65536 is above max_loss_scale 1024"}}) {
    std::string message = errorOf([&] { amp::GradScaler scaler(options); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }

  // A traced step compiles the cap in, so a load requires the file's.
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = scratch.file("scaler.state");
  apex.save(path);
  amp::GradScaler uncapped({.min_loss_scale = 1.0});
  std::string message = errorOf([&] { uncapped.load(path); });
  EXPECT_NE(message.find("setting 'max_scale' is 16777216 in the file but inf here"), std::string::npos)
      << message;
  amp::GradScaler same({.min_loss_scale = 1.0, .max_loss_scale = 16777216.0});
  EXPECT_EQ(errorOf([&] { same.load(path); }), "");

  // A file written before the setting existed had no cap.
  detail::SavedState older = detail::savedStateOf(uncapped);
  std::erase_if(older.settings, [](const auto& setting) { return setting.first == "max_scale"; });
  std::string olderPath = scratch.file("older.state");
  detail::writeStateFile(olderPath, {{"", older}}, "test");
  amp::GradScaler fresh({.min_loss_scale = 1.0});
  EXPECT_EQ(errorOf([&] { fresh.load(olderPath); }), "");
  message = errorOf([&] { same.load(olderPath); });
  EXPECT_NE(message.find("setting 'max_scale' is inf in the file but 16777216 here"), std::string::npos)
      << message;
}

TEST(AmpTest, MindSporesDynamicLossScaleManagerNames) {
  // DynamicLossScaleManager(init_loss_scale=8, scale_factor=4, scale_window=2):
  // x4 after 2 clean steps, /4 on an overflow, never below 1.
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 0.125});
  amp::GradScaler scaler({.init_loss_scale = 8.0, .scale_factor = 4.0, .scale_window = 2});
  EXPECT_EQ(scaler.update_options().growth_factor, 4.0);
  EXPECT_EQ(scaler.update_options().backoff_factor, 0.25);
  EXPECT_EQ(scaler.update_options().growth_interval, 2);
  EXPECT_EQ(scaler.update_options().min_scale, 1.0);
  std::vector<std::pair<double, double>> sequence = {{1.0, 8},  {1.0, 32}, {kInf, 8}, {kInf, 2},
                                                     {kInf, 1}, {1.0, 1},  {1.0, 4}};
  for (auto [factor, expected] : sequence) {
    opt.zero_grad();
    scaler.scale(lossOf(p, factor)).backward();
    scaler.step(opt);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), expected);
  }
  EXPECT_EQ(scaler.skipped_steps(), 3);
  for (auto [options, expected] :
       {std::pair{amp::GradScalerOptions{.growth_factor = 3.0, .scale_factor = 4.0},
                  "growth_factor and scale_factor name the same setting"},
        {amp::GradScalerOptions{.decr_ratio = 0.5, .scale_factor = 4.0}, "decr_ratio and scale_factor"},
        {amp::GradScalerOptions{.incr_every_n_steps = 5, .scale_window = 5}, "incr_every_n_steps and scale_window"},
        {amp::GradScalerOptions{.scale_factor = 1.0}, "growth_factor must be > 1"}}) {
    std::string message = errorOf([&] { amp::GradScaler bad(options); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

TEST(AmpTest, AScalerMadeForAPolicyFollowsItsLossScale) {
  // apex's amp.initialize: the level's loss_scale decides the scaler.
  amp::GradScaler f16Default(amp::Policy{.level = amp::O1, .dtype = f16});
  EXPECT_TRUE(f16Default.is_enabled());
  EXPECT_EQ(f16Default.get_scale(), 65536.0);
  EXPECT_EQ(f16Default.update_options().growth_interval, 2000);
  amp::GradScaler withOptions(amp::Policy{.level = amp::O1, .dtype = f16}, {.growth_interval = 7});
  EXPECT_EQ(withOptions.update_options().growth_interval, 7);
  for (amp::Policy none : {amp::Policy{.level = amp::O2, .dtype = bf16}, amp::Policy{.level = amp::O0}}) {
    amp::GradScaler off(none);
    EXPECT_FALSE(off.is_enabled()) << amp::level_name(none.level);
    EXPECT_EQ(off.get_scale(), 1.0);
  }

  // A fixed scale: overflowing steps are still skipped, the scale stays.
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 0.125});
  amp::GradScaler fixed(amp::Policy{.level = amp::O2, .dtype = f16, .loss_scale = 128.0});
  for (double factor : {1.0, kInf, 1.0}) {
    opt.zero_grad();
    fixed.scale(lossOf(p, factor)).backward();
    fixed.step(opt);
    fixed.update();
    EXPECT_EQ(fixed.get_scale(), 128.0);
  }
  EXPECT_EQ(fixed.skipped_steps(), 1);
  EXPECT_NE(errorOf([] { amp::GradScaler({.level = amp::O1, .loss_scale = 128.0}, {.init_scale = 64.0}); })
                .find("the policy's loss_scale 128 and the options' initial scale both set the scale"),
            std::string::npos);

  // bf16 scales only when asked, and says that it needs none.
  ::testing::internal::CaptureStderr();
  amp::GradScaler asked(amp::Policy{.level = amp::O1, .dtype = bf16, .loss_scale = amp::dynamic});
  std::string notice = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(asked.is_enabled());
  EXPECT_NE(notice.find("loss scaling under bf16, as the policy asks"), std::string::npos) << notice;
  ::testing::internal::CaptureStderr();
  amp::GradScaler quiet(amp::Policy{.level = amp::O1, .dtype = bf16});
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(AmpTest, UpdateWithANewScaleSetsItAsPyTorchDoes) {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 0.125});
  amp::GradScaler scaler({.growth_interval = 3});
  auto stepWith = [&](double factor) {
    opt.zero_grad();
    scaler.scale(lossOf(p, factor)).backward();
    scaler.step(opt);
  };
  stepWith(1.0);
  scaler.update();
  EXPECT_EQ(scaler.growth_tracker(), 1);
  stepWith(1.0);
  scaler.update(1024.0);
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  EXPECT_EQ(scaler.growth_tracker(), 1); // left as it was
  std::vector<double> before = p.to_vector();
  stepWith(kInf);
  scaler.update(scalar_tensor(512.0, f64));
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(p.to_vector(), before);
  stepWith(1.0);
  scaler.update();
  EXPECT_EQ(scaler.growth_tracker(), 2);
  EXPECT_EQ(scaler.get_scale(), 512.0);

  stepWith(1.0);
  for (double bad : {0.0, -2.0, kInf, std::nan("")})
    EXPECT_NE(errorOf([&] { scaler.update(bad); }).find("the scale must be positive and finite"), std::string::npos)
        << bad;
  EXPECT_NE(errorOf([&] { scaler.update(tensor({1.0, 2.0}, {2}, f32)); }).find("takes one floating-point element"),
            std::string::npos);
  EXPECT_EQ(scaler.get_scale(), 512.0); // the refused updates changed nothing
  scaler.update(256.0);
  EXPECT_NE(errorOf([&] { scaler.update(128.0); }).find("update() without a step()"), std::string::npos);
}

TEST(AmpTest, AScalerThatNeverDropsAnUpdateAppliesEveryStepAndCannotSayWhetherOneOverflowed) {
  // MindSpore's FixedLossScaleManager(drop_overflow_update=False), apex's
  // static loss scale: no check, every update applied, an overflow's included.
  std::string dynamic = errorOf([] { amp::GradScaler({.drop_overflow_update = false}); });
  EXPECT_NE(dynamic.find("drop_overflow_update = false needs dynamic = false"), std::string::npos) << dynamic;
  amp::GradScaler never({.dynamic = false, .drop_overflow_update = false, .init_scale = 128.0});
  Tensor p = param(), control = param();
  optim::SGD opt({p}, {.lr = 0.125}), controlOpt({control}, {.lr = 0.125});
  never.scale(lossOf(p, 1.0)).backward();
  never.step(opt);
  never.update();
  lossOf(control, 1.0).backward();
  controlOpt.step();
  EXPECT_EQ(p.to_vector(), control.to_vector()); // a power-of-two scale is exact

  // unscale_() before clipping works as with a scaler that checks.
  opt.zero_grad();
  never.scale(lossOf(p, 1.0)).backward();
  never.unscale_(opt);
  std::vector<double> unscaled = p.grad().to_vector();
  controlOpt.zero_grad();
  lossOf(control, 1.0).backward();
  EXPECT_EQ(unscaled, control.grad().to_vector());
  never.step(opt);
  never.update();
  controlOpt.step();
  EXPECT_EQ(p.to_vector(), control.to_vector());

  opt.zero_grad();
  never.scale(lossOf(p, kInf)).backward();
  never.step(opt);
  never.update();
  for (double value : p.to_vector())
    EXPECT_FALSE(std::isfinite(value)) << "the overflowing update is applied, not skipped";
  EXPECT_EQ(never.get_scale(), 128.0);
  EXPECT_EQ(never.skipped_steps(), 0);
  for (const std::string& message : {errorOf([&] { never.found_inf(); }), errorOf([&] { never.found_inf(opt); })}) {
    EXPECT_NE(message.find("drop_overflow_update = false, so its steps never check"), std::string::npos) << message;
    EXPECT_NE(message.find("AmpTest.cpp"), std::string::npos) << message;
  }
  EXPECT_FALSE(never.state_tensors().last_step_finite.defined());
  EXPECT_TRUE(never.state_tensors().scale.defined());
  opt.zero_grad();
  never.scale(lossOf(p, 1.0)).backward();
  never.step(opt);
  never.update(64.0);
  EXPECT_EQ(never.get_scale(), 64.0) << "update(new_scale) still sets a fixed scale";
  EXPECT_EQ(never.skipped_steps(), 0);

  // Whether a step skips is compiled into traced steps: a load checks it,
  // and files from before the setting skipped.
  ::ampjit::testing::TemporaryDirectory scratch;
  std::string path = scratch.file("scaler.state");
  never.save(path);
  amp::GradScaler skipping({.dynamic = false, .init_scale = 128.0});
  std::string message = errorOf([&] { skipping.load(path); });
  EXPECT_NE(message.find("scaler setting 'drop_overflow_update' is 0 in the file but 1 here"), std::string::npos)
      << message;
  amp::GradScaler again({.dynamic = false, .drop_overflow_update = false, .init_scale = 128.0});
  again.load(path);
  EXPECT_EQ(again.get_scale(), 64.0);
  detail::SavedState older = detail::savedStateOf(skipping);
  std::erase_if(older.settings, [](const auto& setting) { return setting.first == "drop_overflow_update"; });
  std::string olderPath = scratch.file("older.state");
  detail::writeStateFile(olderPath, {{"", older}}, "test");
  EXPECT_EQ(errorOf([&] { skipping.load(olderPath); }), "");
  message = errorOf([&] { again.load(olderPath); });
  EXPECT_NE(message.find("setting 'drop_overflow_update' is 1 in the file but 0 here"), std::string::npos)
      << message;
}

TEST(AmpTest, PaddleNamesStaticAndDisabledModes) {
  amp::GradScaler paddle({.init_loss_scaling = 4.0, .incr_every_n_steps = 10, .decr_every_n_nan_or_inf = 2});
  EXPECT_EQ(paddle.get_scale(), 4.0);
  EXPECT_EQ(paddle.update_options().growth_interval, 10);
  EXPECT_EQ(paddle.update_options().backoff_interval, 2);
  EXPECT_EQ(paddle.update_options().min_scale, 1.0);
  EXPECT_NE(errorOf([] { amp::GradScaler({.init_scale = 2.0, .init_loss_scaling = 4.0}); })
                .find("init_scale and init_loss_scaling name the same setting; give one"),
            std::string::npos);
  amp::GradScaler disabled({.enabled = false});
  Tensor loss = scalar_tensor(3.0);
  EXPECT_TRUE(disabled.scale(loss).is_same(loss));
  EXPECT_EQ(disabled.get_scale(), 1.0);
  amp::GradScaler fixed({.dynamic = false, .init_scale = 128.0});
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 0.125});
  fixed.scale(lossOf(p, kInf)).backward();
  fixed.step(opt);
  fixed.update();
  EXPECT_EQ(fixed.get_scale(), 128.0);
  EXPECT_EQ(fixed.skipped_steps(), 1);
}

} // namespace
} // namespace jit
